/* capi.c - the C API capsule (rdma/include/pyrdma.h) for C/Cython users. */
#include <errno.h>

#include "rdma.h"

/* The state of the module instance that made the capsule. */
static pyrdma_state *S;

/* Return the object if it is an open instance of tp made in this process
   (not inherited across fork()), else NULL. */
static pyrdma_obj *
open_obj(void *p, PyTypeObject *tp)
{
    PyObject *o = p;
    if (o == NULL || S == NULL || !PyObject_TypeCheck(o, tp))
        return NULL;
    return ((pyrdma_obj *)o)->h != NULL &&
           ((pyrdma_obj *)o)->fork_gen == pyrdma_fork_gen ? (pyrdma_obj *)o
                                                          : NULL;
}

static int
c_post_send(void *qp, struct pyrdma_send_wr *wr, struct pyrdma_send_wr **bad)
{
    pyrdma_obj *o = open_obj(qp, S ? S->QPType : NULL);
    if (o == NULL) {
        if (open_obj(qp, S ? S->VirtualQPType : NULL) != NULL)
            return pyrdma_vqp_capi_send(qp, wr, bad);
        *bad = wr;
        return EINVAL;
    }
    return o->prov->post_send(o->h, wr, bad);
}

static int
c_post_recv(void *t, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    pyrdma_obj *o = open_obj(t, S ? S->QPType : NULL);
    if (o != NULL) {
        if (o->parents[3] != NULL) {   /* the QP takes receives from an SRQ */
            *bad = wr;
            return EINVAL;
        }
        return o->prov->post_recv(o->h, wr, bad);
    }
    o = open_obj(t, S ? S->SRQType : NULL);
    if (o != NULL)
        return o->prov->post_srq_recv(o->h, wr, bad);
    if (open_obj(t, S ? S->VirtualQPType : NULL) != NULL)
        return pyrdma_vqp_capi_recv(t, wr, bad);
    *bad = wr;
    return EINVAL;
}

static int
c_poll_cq(void *cq, int n, struct pyrdma_wc *wc)
{
    pyrdma_obj *o = open_obj(cq, S ? S->CQType : NULL);
    if (n < 0)
        return -EINVAL;
    if (o == NULL && open_obj(cq, S ? S->VirtualCQType : NULL) != NULL)
        return pyrdma_vcq_capi_poll(cq, n, wc);
    if (o == NULL)
        return -EINVAL;
    return o->prov->poll_cq(o->h, n, wc);
}

static int
c_mr_info(void *mr, uint64_t *addr, uint64_t *length, uint32_t *lkey,
          uint32_t *rkey)
{
    pyrdma_MR *m = (pyrdma_MR *)open_obj(mr, S ? S->MRType : NULL);
    if (m == NULL)
        return EINVAL;
    *addr = (uint64_t)(uintptr_t)m->view.buf;
    *length = (uint64_t)m->view.len;
    *lkey = m->info.lkey;
    *rkey = m->info.rkey;
    return 0;
}

static void *
c_ah_handle(void *ah)
{
    pyrdma_obj *o = open_obj(ah, S ? S->AHType : NULL);
    return o ? o->h : NULL;
}

static const pyrdma_capi capi = {
    PYRDMA_CAPI_VERSION, c_post_send, c_post_recv, c_poll_cq, c_mr_info,
    c_ah_handle,
};

int
pyrdma_capi_init(PyObject *module, pyrdma_state *st)
{
    PyObject *cap = PyCapsule_New((void *)&capi, "rdma._ibverbs._C_API",
                                  NULL);
    if (cap == NULL)
        return -1;
    S = st;
    if (PyModule_AddObjectRef(module, "_C_API", cap) < 0) {
        Py_DECREF(cap);
        return -1;
    }
    Py_DECREF(cap);
    return 0;
}
