/* pd.c - rdma.ibverbs.PD (protection domain) and AH (address handle). */
#include <errno.h>

#include "rdma.h"

static int
pd_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->dealloc_pd(o->h, st);
}

static const struct pyrdma_objkind pd_kind = {
    "PD", PYRDMA_RANK_PD, pd_destroy, NULL,
};

PyObject *
pyrdma_pd_new(pyrdma_Context *ctx)
{
    struct pyrdma_status st = {0};
    pyrdma_obj *pd;
    void *h;

    if (!pyrdma_obj_check(&ctx->o))
        return NULL;
    pd = pyrdma_obj_new(ctx->o.state->PDType, &pd_kind, &ctx->o);
    if (pd == NULL)
        return NULL;
    if (ctx->o.prov->alloc_pd(ctx->o.h, &h, &st) < 0) {
        Py_DECREF(pd);
        return pyrdma_raise_status(ctx->o.state, &st);
    }
    pd->h = h;
    pyrdma_obj_link(pd, 0, &ctx->o);
    return (PyObject *)pd;
}

/* The Context of a PD. */
static pyrdma_Context *
pd_ctx(pyrdma_obj *pd)
{
    return (pyrdma_Context *)pd->parents[0];
}

static PyObject *
pd_cq(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_obj *pd = (pyrdma_obj *)op;
    if (!pyrdma_obj_check(pd))
        return NULL;
    return pyrdma_cq_new(pd_ctx(pd), args, kw);
}

/* ---- AH ---- */

static int
ah_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->destroy_ah(o->h, st);
}

static const struct pyrdma_objkind ah_kind = {
    "AH", PYRDMA_RANK_AH, ah_destroy, NULL,
};

/* Make an AH from the ah_attr struct object attr. */
static PyObject *
ah_from_attr(pyrdma_obj *pd, PyObject *attr)
{
    pyrdma_state *S = pd->state;
    struct pyrdma_status st = {0};
    pyrdma_AH *ah;
    void *h;

    ah = (pyrdma_AH *)pyrdma_obj_new(S->AHType, &ah_kind, pd);
    if (ah == NULL)
        return NULL;
    memcpy(&ah->attr, pyrdma_struct_sync(attr), sizeof(ah->attr));
    if (pd->prov->create_ah(pd->h, &ah->attr, &h, &st) < 0) {
        Py_DECREF(ah);
        return pyrdma_raise_status(S, &st);
    }
    ah->o.h = h;
    pyrdma_obj_link(&ah->o, 0, pd);
    return (PyObject *)ah;
}

static PyObject *
pd_ah(PyObject *op, PyObject *arg)
{
    pyrdma_obj *pd = (pyrdma_obj *)op;
    pyrdma_state *S = pd->state;
    PyObject *attr, *res;

    if (!pyrdma_obj_check(pd))
        return NULL;
    if (PyObject_TypeCheck(arg, S->ah_attr))
        return ah_from_attr(pd, arg);
    /* A path (rdma.path.IBPath) makes and caches its own AH: it is asked,
       so that the path tables live in one Python place. */
    if (PyObject_HasAttrString(arg, "ah_for"))
        return PyObject_CallMethod(arg, "ah_for", "O", op);
    if (!PyObject_HasAttrString(arg, "ah_attr_for")) {
        PyErr_Format(PyExc_TypeError, "PD.ah() needs an ibv.ah_attr or a "
                     "path, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    attr = PyObject_CallMethod(arg, "ah_attr_for", "O", op);
    if (attr == NULL)
        return NULL;
    if (!PyObject_TypeCheck(attr, S->ah_attr)) {
        PyErr_SetString(PyExc_TypeError, "ah_attr_for() must return an "
                        "ibv.ah_attr");
        Py_DECREF(attr);
        return NULL;
    }
    res = ah_from_attr(pd, attr);
    Py_DECREF(attr);
    return res;
}

static PyObject *
ah_get_attr(PyObject *op, void *closure)
{
    pyrdma_AH *ah = (pyrdma_AH *)op;
    (void)closure;
    return pyrdma_struct_new(ah->o.state->ah_attr, &ah->attr,
                             sizeof(ah->attr));
}

static PyObject *
obj_get_pd(PyObject *op, void *closure)
{
    PyObject *pd = ((pyrdma_obj *)op)->parents[0];
    (void)closure;
    return Py_NewRef(pd ? pd : Py_None);
}

static PyGetSetDef ah_getset[] = {
    {"ah_attr", ah_get_attr, NULL, "A copy of the attributes it was made "
     "from (ibv.ah_attr).", NULL},
    {"pd", obj_get_pd, NULL, "The PD it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
pd_get_ctx(PyObject *op, void *closure)
{
    return obj_get_pd(op, closure);
}

/* Creation methods implemented in other files. */
PyObject *pyrdma_pd_qp(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_srq(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_mr(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_mw(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_alloc_mr(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_virtual_qp(PyObject *pd, PyObject *args, PyObject *kw);
PyObject *pyrdma_pd_virtual_cq(PyObject *pd, PyObject *args, PyObject *kw);

static PyMethodDef pd_methods[] = {
    {"qp", (PyCFunction)(void (*)(void))pyrdma_pd_qp,
     METH_VARARGS | METH_KEYWORDS,
     "qp($self, /, qp_type, max_send_wr=None, send_cq=None, max_recv_wr=None, "
     "recv_cq=None, srq=None, sq_sig_all=1, max_send_sge=1, max_recv_sge=1, "
     "max_inline_data=0)\n--\n\n"
     "Create a queue pair (ibv_create_qp).  qp_type is IBV_QPT_RC, _UC or "
     "_UD; an ibv.qp_init_attr may be given instead of the arguments."},
    {"srq", (PyCFunction)(void (*)(void))pyrdma_pd_srq,
     METH_VARARGS | METH_KEYWORDS,
     "srq($self, /, max_wr=100, max_sge=1, srq_limit=0)\n--\n\n"
     "Create a shared receive queue (ibv_create_srq)."},
    {"mr", (PyCFunction)(void (*)(void))pyrdma_pd_mr,
     METH_VARARGS | METH_KEYWORDS,
     "mr($self, /, buf, access=0)\n--\n\nRegister the memory of a "
     "buffer-protocol object (ibv_reg_mr).  The MR holds the buffer until "
     "it is closed, so it cannot be resized or freed under the device.  "
     "Writable access flags need a writable buffer."},
    {"alloc_mr", (PyCFunction)(void (*)(void))pyrdma_pd_alloc_mr,
     METH_VARARGS | METH_KEYWORDS,
     "alloc_mr($self, /, length, access=IBV_ACCESS_LOCAL_WRITE)\n--\n\n"
     "Allocate length bytes of page-aligned, zeroed memory owned by the "
     "library and register it.  mr.buf (or memoryview(mr)) is a writable "
     "view of it; the memory outlives close() while views exist."},
    {"mw", (PyCFunction)(void (*)(void))pyrdma_pd_mw,
     METH_VARARGS | METH_KEYWORDS,
     "mw($self, /, type=IBV_MW_TYPE_1)\n--\n\nAllocate a memory window "
     "(ibv_alloc_mw)."},
    {"ah", pd_ah, METH_O,
     "ah($self, attr, /)\n--\n\nCreate an address handle (ibv_create_ah) "
     "from an ibv.ah_attr, or get the cached one of a path."},
    {"virtual_qp", (PyCFunction)(void (*)(void))pyrdma_pd_virtual_qp,
     METH_VARARGS | METH_KEYWORDS,
     "virtual_qp($self, /, n_qps, cq, mode='dqplb', fragment=65536, "
     "max_msgs=64, max_wr=256, max_sge=4, choose='round_robin', port=1)"
     "\n--\n\nCreate a VirtualQP owning n_qps RC data QPs on the "
     "VirtualCQ cq: each message is cut into fragments of at most "
     "fragment bytes, at most max_msgs of them in flight per data QP "
     "(mode 'dqplb' or 'spray'; the data QP of a fragment chosen by "
     "'round_robin' or 'least_outstanding')."},
    {"virtual_cq", (PyCFunction)(void (*)(void))pyrdma_pd_virtual_cq,
     METH_VARARGS | METH_KEYWORDS,
     "virtual_cq($self, /, nelems=4096)\n--\n\nCreate a VirtualCQ (a CQ "
     "of nelems entries shared by the data QPs of its VirtualQPs)."},
    {"cq", (PyCFunction)(void (*)(void))pd_cq, METH_VARARGS | METH_KEYWORDS,
     "cq($self, /, nelems=100, comp_channel=None, vec=0)\n--\n\n"
     "Context.cq() of the PD's context."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pd_getset[] = {
    {"ctx", pd_get_ctx, NULL, "The Context it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int
pyrdma_pd_init(PyObject *module, pyrdma_state *st)
{
    st->PDType = pyrdma_obj_type(module, "rdma.ibverbs.PD",
                                 sizeof(pyrdma_PD),
                                 "A protection domain: Context.pd().",
                                 pd_methods, pd_getset, NULL, 0);
    if (st->PDType == NULL)
        return -1;
    st->AHType = pyrdma_obj_type(module, "rdma.ibverbs.AH",
                                 sizeof(pyrdma_AH),
                                 "An address handle: PD.ah().",
                                 NULL, ah_getset, NULL, 0);
    return st->AHType == NULL ? -1 : 0;
}
