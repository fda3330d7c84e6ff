/* vcq.c - rdma.ibverbs.VirtualCQ: the CQ of virtual QPs' data QPs, polled
   for one completion per virtual WR (IBVerbX's IbvVirtualCq). */
#include <errno.h>
#include <stdlib.h>

#include "vqp.h"

static int
vcq_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->destroy_cq(o->h, st);
}

static void
vcq_release(pyrdma_obj *o)
{
    pyrdma_VCQ *c = (pyrdma_VCQ *)o;

    free(c->reg);
    free(c->out);
    c->reg = NULL;
    c->out = NULL;
    c->nreg = c->capreg = c->out_n = c->out_cap = 0;
}

static const struct pyrdma_objkind vcq_kind = {
    "VirtualCQ", PYRDMA_RANK_CQ, vcq_destroy, vcq_release,
};

PyObject *
pyrdma_pd_virtual_cq(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"nelems", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op, *ctx;
    struct pyrdma_status st = {0};
    struct pyrdma_uint n = {"virtual_cq", "nelems", INT32_MAX, 4096};
    pyrdma_VCQ *c;
    void *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:virtual_cq", kwlist,
                                     pyrdma_uint_conv, &n))
        return NULL;
    if (!pyrdma_obj_check(pd))
        return NULL;
    if (n.v < 1) {
        PyErr_SetString(PyExc_ValueError, "virtual_cq(): nelems must be "
                        ">= 1");
        return NULL;
    }
    ctx = (pyrdma_obj *)pd->parents[0];
    c = (pyrdma_VCQ *)pyrdma_obj_new(pd->state->VirtualCQType, &vcq_kind,
                                     ctx);
    if (c == NULL)
        return NULL;
    if (ctx->prov->create_cq(ctx->h, (int)n.v, c, NULL, 0, &h, &c->cqe,
                             &st) < 0) {
        Py_DECREF(c);
        return pyrdma_raise_status(pd->state, &st);
    }
    c->o.h = h;
    pyrdma_obj_link(&c->o, 0, ctx);
    return (PyObject *)c;
}

/* pyrdma_vcq_poll as a pyrdma_poll_fn. */
static int
vcq_poll_fn(void *c, int n, struct pyrdma_wc *wc)
{
    return pyrdma_vcq_poll(c, n, wc);
}

/* poll(n=-1): a list of ibv.wc, one per virtual WR completed. */
static PyObject *
vcq_poll(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", NULL};
    pyrdma_VCQ *c = (pyrdma_VCQ *)op;
    Py_ssize_t n = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:poll", kwlist, &n))
        return NULL;
    if (!pyrdma_obj_check(&c->o))
        return NULL;
    return pyrdma_poll_list(&c->o, vcq_poll_fn, c, n);
}

/* poll_into(wcs, n=None): fill a WCArray; return how many. */
static PyObject *
vcq_poll_into(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"wcs", "n", NULL};
    pyrdma_VCQ *c = (pyrdma_VCQ *)op;
    PyObject *wcs, *nobj = Py_None;
    Py_ssize_t n = -1;
    pyrdma_WCArray *a;
    int got;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:poll_into", kwlist, &wcs,
                                     &nobj))
        return NULL;
    if (nobj != Py_None && (n = PyLong_AsSsize_t(nobj)) == -1 &&
        PyErr_Occurred())
        return NULL;
    if (!Py_IS_TYPE(wcs, c->o.state->WCArrayType)) {
        PyErr_Format(PyExc_TypeError, "poll_into() needs an ibv.WCArray, not "
                     "%.100s", Py_TYPE(wcs)->tp_name);
        return NULL;
    }
    if (!pyrdma_obj_check(&c->o))
        return NULL;
    a = (pyrdma_WCArray *)wcs;
    if (n < 0 || n > a->capacity)
        n = a->capacity;
    if (n > INT32_MAX)
        n = INT32_MAX;
    got = pyrdma_vcq_poll(c, (int)n, a->wc);
    if (got < 0) {
        a->count = 0;
        return pyrdma_raise_sys(c->o.state, -got, "ibv_poll_cq", "");
    }
    a->count = got;
    return PyLong_FromLong(got);
}

int
pyrdma_vcq_capi_poll(PyObject *op, int n, struct pyrdma_wc *wc)
{
    return pyrdma_vcq_poll((pyrdma_VCQ *)op, n, wc);
}

static PyObject *
vcq_get_cqe(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((pyrdma_VCQ *)op)->cqe);
}

static PyObject *
vcq_get_ctx(PyObject *op, void *c)
{
    PyObject *p = ((pyrdma_obj *)op)->parents[0];
    (void)c;
    return Py_NewRef(p ? p : Py_None);
}

static PyMethodDef vcq_methods[] = {
    {"poll", (PyCFunction)(void (*)(void))vcq_poll,
     METH_VARARGS | METH_KEYWORDS,
     "poll($self, /, n=-1)\n--\n\nPoll the data QPs' completions and return "
     "up to n (all when n < 0) virtual completions as a list of ibv.wc: one "
     "per virtual WR, with its wr_id, status, byte_len and imm_data, in "
     "posting order per VirtualQP.  A failed one has the failing data QP's "
     "number in qp_num (VirtualQP.error says which fragment)."},
    {"poll_into", (PyCFunction)(void (*)(void))vcq_poll_into,
     METH_VARARGS | METH_KEYWORDS,
     "poll_into($self, /, wcs, n=None)\n--\n\npoll() into a reusable "
     "ibv.WCArray; return the number of virtual completions."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef vcq_getset[] = {
    {"cqe", vcq_get_cqe, NULL, "Entries of the CQ behind it.", NULL},
    {"ctx", vcq_get_ctx, NULL, "The Context it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int
pyrdma_vcq_init(PyObject *module, pyrdma_state *st)
{
    st->VirtualCQType = pyrdma_obj_type(
        module, "rdma.ibverbs.VirtualCQ", sizeof(pyrdma_VCQ),
        "The completion queue of virtual QPs: PD.virtual_cq().", vcq_methods,
        vcq_getset, NULL, 0);
    return st->VirtualCQType == NULL ? -1 : 0;
}
