/* qp.c - rdma.ibverbs.QP (queue pair) and SRQ (shared receive queue). */
#include <errno.h>

#include "rdma.h"

/* ---- SRQ ---- */

static int
srq_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->destroy_srq(o->h, st);
}

static const struct pyrdma_objkind srq_kind = {
    "SRQ", PYRDMA_RANK_SRQ, srq_destroy, NULL,
};

PyObject *
pyrdma_pd_srq(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max_wr", "max_sge", "srq_limit", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct pyrdma_srq_attr a;
    struct pyrdma_status st = {0};
    struct pyrdma_uint wr = {"PD.srq", "max_wr", UINT32_MAX, 100},
                       sge = {"PD.srq", "max_sge", UINT32_MAX, 1},
                       lim = {"PD.srq", "srq_limit", UINT32_MAX, 0};
    pyrdma_SRQ *srq;
    void *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&O&O&:srq", kwlist,
                                     pyrdma_uint_conv, &wr, pyrdma_uint_conv,
                                     &sge, pyrdma_uint_conv, &lim))
        return NULL;
    a.max_wr = (uint32_t)wr.v;
    a.max_sge = (uint32_t)sge.v;
    a.srq_limit = (uint32_t)lim.v;
    if (!pyrdma_obj_check(pd))
        return NULL;
    srq = (pyrdma_SRQ *)pyrdma_obj_new(pd->state->SRQType, &srq_kind, pd);
    if (srq == NULL)
        return NULL;
    if (pd->prov->create_srq(pd->h, &a, srq, &h, &st) < 0) {
        Py_DECREF(srq);
        return pyrdma_raise_status(pd->state, &st);
    }
    srq->o.h = h;
    pyrdma_obj_link(&srq->o, 0, pd);
    return (PyObject *)srq;
}

/* The argument handling shared by QP.modify and SRQ.modify: parse
   (attr, mask=None), check the object is open and attr is of type tp, and
   derive the mask from the assigned fields when none is given.  Return 0
   with *attr and *mask set, or -1 with an exception (unset names the
   ValueError raised when nothing was assigned). */
static int
modify_args(pyrdma_obj *o, PyObject *args, PyObject *kw, PyTypeObject *tp,
            const char *owner, const char *unset, PyObject **attr,
            long *mask)
{
    static char *kwlist[] = {"attr", "mask", NULL};
    PyObject *mobj = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:modify", kwlist, attr,
                                     &mobj))
        return -1;
    if (!pyrdma_obj_check(o))
        return -1;
    if (!PyObject_TypeCheck(*attr, tp)) {
        PyErr_Format(PyExc_TypeError, "%s.modify() needs an ibv.%s, "
                     "not %.100s", owner, strrchr(tp->tp_name, '.') + 1,
                     Py_TYPE(*attr)->tp_name);
        return -1;
    }
    if (mobj == Py_None)
        *mask = (long)pyrdma_struct_mask(*attr);
    else {
        /* the verbs take an int mask: never truncated into another one */
        char fname[32];
        struct pyrdma_uint m = {fname, "mask", INT32_MAX, 0};
        PyOS_snprintf(fname, sizeof(fname), "%s.modify", owner);
        if (!pyrdma_uint_conv(mobj, &m))
            return -1;
        *mask = (long)m.v;
    }
    if (*mask == 0) {
        PyErr_Format(PyExc_ValueError, "%s.modify(): %s", owner, unset);
        return -1;
    }
    return 0;
}

/* Parse an optional uint32 argument of SRQ.modify into *out; return 1 if
   given, 0 if None or absent, -1 with an error set. */
static int
srq_u32_arg(PyObject *v, const char *name, uint32_t *out)
{
    unsigned long x;

    if (v == NULL || v == Py_None)
        return 0;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "SRQ.modify(): %s must be an int, "
                     "not %.100s", name, Py_TYPE(v)->tp_name);
        return -1;
    }
    x = PyLong_AsUnsignedLong(v);
    if (x == (unsigned long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError))
            PyErr_Format(PyExc_ValueError, "SRQ.modify(): %s must be in "
                         "0..4294967295", name);
        return -1;
    }
    if (x > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "SRQ.modify(): %s must be in "
                     "0..4294967295, not %lu", name, x);
        return -1;
    }
    *out = (uint32_t)x;
    return 1;
}

/* SRQ.modify in both forms: python-rdma's modify(srq_limit=None,
   max_wr=None), and modify(attr, mask=None) with an ibv.srq_attr. */
static PyObject *
srq_modify(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"srq_limit", "max_wr", "attr", "mask", NULL};
    pyrdma_SRQ *srq = (pyrdma_SRQ *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_srq_attr a;
    PyObject *lim = NULL, *mwr = NULL, *attr = NULL, *mobj = NULL;
    PyTypeObject *tp = srq->o.state->srq_attr;
    long mask = 0;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOO:modify", kwlist, &lim,
                                     &mwr, &attr, &mobj))
        return NULL;
    /* modify(attr[, mask]) positionally lands in the first two slots. */
    if (lim != NULL && PyObject_TypeCheck(lim, tp)) {
        int mask_pos = PyTuple_GET_SIZE(args) >= 2;

        if (attr != NULL || (mask_pos && mobj != NULL)) {
            PyErr_Format(PyExc_TypeError, "SRQ.modify(): %s given twice",
                         attr != NULL ? "attr" : "mask");
            return NULL;
        }
        attr = lim;
        lim = NULL;
        if (mask_pos) {
            mobj = mwr;
            mwr = NULL;
        }
    }
    if (!pyrdma_obj_check(&srq->o))
        return NULL;
    memset(&a, 0, sizeof(a));
    if (attr != NULL) {
        if (lim != NULL || mwr != NULL) {
            PyErr_SetString(PyExc_TypeError, "SRQ.modify(): give an "
                            "ibv.srq_attr or srq_limit/max_wr, not both");
            return NULL;
        }
        if (!PyObject_TypeCheck(attr, tp)) {
            PyErr_Format(PyExc_TypeError, "SRQ.modify(): attr must be an "
                         "ibv.srq_attr, not %.100s", Py_TYPE(attr)->tp_name);
            return NULL;
        }
        mask = (mobj == NULL || mobj == Py_None)
            ? (long)pyrdma_struct_mask(attr) : PyLong_AsLong(mobj);
        if (mask == -1 && PyErr_Occurred())
            return NULL;
        memcpy(&a, pyrdma_struct_sync(attr), sizeof(a));
    }
    else {
        if (mobj != NULL) {
            PyErr_SetString(PyExc_TypeError, "SRQ.modify(): mask goes with "
                            "an ibv.srq_attr");
            return NULL;
        }
        if ((rc = srq_u32_arg(lim, "srq_limit", &a.srq_limit)) < 0)
            return NULL;
        if (rc)
            mask |= PYRDMA_SRQ_LIMIT;
        if ((rc = srq_u32_arg(mwr, "max_wr", &a.max_wr)) < 0)
            return NULL;
        if (rc)
            mask |= PYRDMA_SRQ_MAX_WR;
    }
    if (mask == 0) {
        PyErr_SetString(PyExc_ValueError, "SRQ.modify(): nothing to change "
                        "(give srq_limit or max_wr)");
        return NULL;
    }
    if (srq->o.prov->modify_srq(srq->o.h, &a, (int)mask, &st) < 0)
        return pyrdma_raise_status(srq->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
srq_query(PyObject *op, PyObject *noargs)
{
    pyrdma_SRQ *srq = (pyrdma_SRQ *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_srq_attr a;

    (void)noargs;
    if (!pyrdma_obj_check(&srq->o))
        return NULL;
    memset(&a, 0, sizeof(a));
    if (srq->o.prov->query_srq(srq->o.h, &a, &st) < 0)
        return pyrdma_raise_status(srq->o.state, &st);
    return pyrdma_struct_new(srq->o.state->srq_attr, &a, sizeof(a));
}

static PyObject *
srq_post_recv(PyObject *op, PyObject *arg)
{
    return pyrdma_post_recv((pyrdma_obj *)op, arg, 1);
}

static PyObject *
obj_get_pd(PyObject *op, void *closure)
{
    PyObject *pd = ((pyrdma_obj *)op)->parents[0];
    (void)closure;
    return Py_NewRef(pd ? pd : Py_None);
}

static PyMethodDef srq_methods[] = {
    {"post_recv", srq_post_recv, METH_O,
     "post_recv($self, wr, /)\n--\n\nPost receive work requests "
     "(ibv_post_srq_recv): one ibv.recv_wr, a list of them, a chain, or an "
     "ibv.RecvBatch."},
    {"modify", (PyCFunction)(void (*)(void))srq_modify,
     METH_VARARGS | METH_KEYWORDS,
     "modify($self, /, srq_limit=None, max_wr=None, attr=None, mask=None)"
     "\n--\n\nChange srq_limit and/or max_wr (ibv_modify_srq); None "
     "leaves a value as it is (python-rdma's form).  modify(attr, "
     "mask=None) with an ibv.srq_attr works too: the mask defaults to the "
     "fields assigned in attr."},
    {"query", srq_query, METH_NOARGS,
     "query($self, /)\n--\n\nReturn the SRQ's ibv.srq_attr "
     "(ibv_query_srq)."},
    {NULL, NULL, 0, NULL},
};

/* The Context of an object whose parents[0] is a PD (SRQ, QP). */
static PyObject *
obj_get_ctx(PyObject *op, void *c)
{
    pyrdma_obj *pd = (pyrdma_obj *)((pyrdma_obj *)op)->parents[0];
    (void)c;
    if (pd == NULL || pd->parents[0] == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(pd->parents[0]);
}

static PyGetSetDef srq_getset[] = {
    {"pd", obj_get_pd, NULL, "The PD it belongs to.", NULL},
    {"ctx", obj_get_ctx, NULL, "The Context.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- QP ---- */

static int
qp_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->destroy_qp(o->h, st);
}

static const struct pyrdma_objkind qp_kind = {
    "QP", PYRDMA_RANK_QP, qp_destroy, NULL,
};

/* Check that obj is an open object of type tp in the PD's Context; return
   1, or 0 with an error naming what. */
static int
same_ctx(pyrdma_obj *pd, PyObject *obj, PyTypeObject *tp, const char *what)
{
    pyrdma_obj *o = (pyrdma_obj *)obj;

    if (!PyObject_TypeCheck(obj, tp)) {
        PyErr_Format(PyExc_TypeError, "PD.qp(): %s must be a %s, not %.100s",
                     what, tp->tp_name, Py_TYPE(obj)->tp_name);
        return 0;
    }
    if (!pyrdma_obj_check(o))
        return 0;
    /* CQs hang off the Context, SRQs off a PD. */
    if (o->parents[0] != pd->parents[0] && o->parents[0] != (PyObject *)pd) {
        PyErr_Format(PyExc_ValueError, "PD.qp(): %s belongs to another %s",
                     what, tp == pd->state->SRQType ? "PD" : "Context");
        return 0;
    }
    return 1;
}

/* The objects a new QP is made with (each Py_None when not given). */
struct qp_objs {
    PyObject *send_cq;
    PyObject *recv_cq;
    PyObject *srq;
};

/* pd.qp(ibv.qp_init_attr(...)): take the attributes and the objects from
   the struct attr, given alone (args and kw hold nothing else).  Return 0,
   or -1 with an error set. */
static int
init_attr_from_struct(PyObject *attr, PyObject *args, PyObject *kw,
                      struct pyrdma_qp_init_attr *ia, struct qp_objs *objs)
{
    struct pyrdma_py_qp_init_attr *d = pyrdma_struct_sync(attr);
    PyObject **slots = pyrdma_struct_slots(attr);

    if (PyTuple_GET_SIZE(args) > 1 || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "PD.qp(): give a qp_init_attr "
                        "or the arguments, not both");
        return -1;
    }
    ia->cap = d->cap;
    ia->qp_type = d->qp_type;
    ia->sq_sig_all = d->sq_sig_all;
    objs->send_cq = slots[PYRDMA_INIT_SEND_CQ] ? slots[PYRDMA_INIT_SEND_CQ]
                                               : Py_None;
    objs->recv_cq = slots[PYRDMA_INIT_RECV_CQ] ? slots[PYRDMA_INIT_RECV_CQ]
                                               : Py_None;
    objs->srq = slots[PYRDMA_INIT_SRQ] ? slots[PYRDMA_INIT_SRQ] : Py_None;
    return 0;
}

/* The QP type argument as an int32 (-1, never a QP type, when it does not
   fit); return 0, or -1 with an error set when it is not an integer. */
static int
qp_type_arg(PyObject *qp_type, int32_t *out)
{
    int overflow = 0;
    long t = PyLong_AsLongAndOverflow(qp_type, &overflow);

    if (t == -1 && PyErr_Occurred())
        return -1;
    /* out of int32 range: not a QP type (never truncated into one) */
    *out = overflow || t < INT32_MIN || t > INT32_MAX ? -1 : (int32_t)t;
    return 0;
}

/* Check the QP type (RC, UC or UD), that both CQs are given, and that the
   CQs and the SRQ are open objects of pd's Context (the SRQ of pd itself).
   Return 1, or 0 with an error naming the problem. */
static int
check_init_attr(pyrdma_obj *pd, PyObject *qp_type,
                const struct pyrdma_qp_init_attr *ia,
                const struct qp_objs *objs)
{
    pyrdma_state *S = pd->state;

    if (ia->qp_type != PYRDMA_QPT_RC && ia->qp_type != PYRDMA_QPT_UC &&
        ia->qp_type != PYRDMA_QPT_UD) {
        PyErr_Format(PyExc_ValueError, "PD.qp(): qp_type must be IBV_QPT_RC, "
                     "IBV_QPT_UC or IBV_QPT_UD, not %R", qp_type);
        return 0;
    }
    if (objs->send_cq == Py_None || objs->recv_cq == Py_None) {
        PyErr_SetString(PyExc_TypeError, "PD.qp(): send_cq and recv_cq are "
                        "required");
        return 0;
    }
    if (!same_ctx(pd, objs->send_cq, S->CQType, "send_cq") ||
        !same_ctx(pd, objs->recv_cq, S->CQType, "recv_cq") ||
        (objs->srq != Py_None && !same_ctx(pd, objs->srq, S->SRQType, "srq")))
        return 0;
    if (objs->srq != Py_None &&
        ((pyrdma_obj *)objs->srq)->parents[0] != (PyObject *)pd) {
        PyErr_SetString(PyExc_ValueError, "PD.qp(): the srq belongs to "
                        "another PD");
        return 0;
    }
    return 1;
}

/* Create the QP (ibv_create_qp) and link it to pd, its CQs and its SRQ;
   return it, or NULL with an error set. */
static PyObject *
create_qp(pyrdma_obj *pd, struct pyrdma_qp_init_attr *ia,
          const struct qp_objs *objs)
{
    struct pyrdma_status st = {0};
    pyrdma_QP *qp;
    void *h;

    qp = (pyrdma_QP *)pyrdma_obj_new(pd->state->QPType, &qp_kind, pd);
    if (qp == NULL)
        return NULL;
    ia->send_cq = ((pyrdma_obj *)objs->send_cq)->h;
    ia->recv_cq = ((pyrdma_obj *)objs->recv_cq)->h;
    ia->srq = objs->srq != Py_None ? ((pyrdma_obj *)objs->srq)->h : NULL;
    ia->qp_context = qp;
    if (pd->prov->create_qp(pd->h, ia, &h, &qp->qp_num, &st) < 0) {
        Py_DECREF(qp);
        return pyrdma_raise_status(pd->state, &st);
    }
    qp->o.h = h;
    qp->qp_type = ia->qp_type;
    qp->cap = ia->cap;
    qp->sq_sig_all = ia->sq_sig_all;
    pyrdma_obj_link(&qp->o, 0, pd);
    pyrdma_obj_link(&qp->o, 1, (pyrdma_obj *)objs->send_cq);
    pyrdma_obj_link(&qp->o, 2, (pyrdma_obj *)objs->recv_cq);
    if (objs->srq != Py_None)
        pyrdma_obj_link(&qp->o, 3, (pyrdma_obj *)objs->srq);
    return (PyObject *)qp;
}

PyObject *
pyrdma_pd_qp(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"qp_type", "max_send_wr", "send_cq",
                             "max_recv_wr", "recv_cq", "srq", "sq_sig_all",
                             "max_send_sge", "max_recv_sge",
                             "max_inline_data", NULL};
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct qp_objs objs = {Py_None, Py_None, Py_None};
    struct pyrdma_qp_init_attr ia;
    struct pyrdma_uint max_send_wr = {"PD.qp", "max_send_wr", UINT32_MAX, 0},
        max_recv_wr = {"PD.qp", "max_recv_wr", UINT32_MAX, 0},
        max_send_sge = {"PD.qp", "max_send_sge", UINT32_MAX, 1},
        max_recv_sge = {"PD.qp", "max_recv_sge", UINT32_MAX, 1},
        max_inline = {"PD.qp", "max_inline_data", UINT32_MAX, 0};
    int sq_sig_all = 1;
    PyObject *qp_type;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O&OO&OOpO&O&O&:qp", kwlist,
                                     &qp_type, pyrdma_uint_conv, &max_send_wr,
                                     &objs.send_cq, pyrdma_uint_conv,
                                     &max_recv_wr, &objs.recv_cq, &objs.srq,
                                     &sq_sig_all,
                                     pyrdma_uint_conv, &max_send_sge,
                                     pyrdma_uint_conv, &max_recv_sge,
                                     pyrdma_uint_conv, &max_inline))
        return NULL;
    if (!pyrdma_obj_check(pd))
        return NULL;
    memset(&ia, 0, sizeof(ia));
    if (PyObject_TypeCheck(qp_type, pd->state->qp_init_attr)) {
        if (init_attr_from_struct(qp_type, args, kw, &ia, &objs) < 0)
            return NULL;
    }
    else {
        if (qp_type_arg(qp_type, &ia.qp_type) < 0)
            return NULL;
        ia.sq_sig_all = sq_sig_all;
        ia.cap.max_send_wr = (uint32_t)max_send_wr.v;
        ia.cap.max_recv_wr = (uint32_t)max_recv_wr.v;
        ia.cap.max_send_sge = (uint32_t)max_send_sge.v;
        ia.cap.max_recv_sge = (uint32_t)max_recv_sge.v;
        ia.cap.max_inline_data = (uint32_t)max_inline.v;
    }
    if (!check_init_attr(pd, qp_type, &ia, &objs))
        return NULL;
    return create_qp(pd, &ia, &objs);
}

static PyObject *
qp_modify(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_qp_attr a;
    PyObject *attr;
    long mask;

    if (modify_args(&qp->o, args, kw, qp->o.state->qp_attr, "QP",
                    "no attribute of the qp_attr was set", &attr, &mask) < 0)
        return NULL;
    memcpy(&a, pyrdma_struct_sync(attr), sizeof(a));
    if (qp->o.prov->modify_qp(qp->o.h, &a, (int)mask, &st) < 0)
        return pyrdma_raise_status(qp->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
qp_query(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mask", NULL};
    pyrdma_QP *qp = (pyrdma_QP *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_qp_attr a;
    struct pyrdma_uint m = {"QP.query", "mask", INT32_MAX,
                            0x3FFFFFF & ~PYRDMA_QP_RATE_LIMIT};
    int mask;
    PyObject *res;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&:query", kwlist,
                                     pyrdma_uint_conv, &m))
        return NULL;
    mask = (int)m.v;
    if (!pyrdma_obj_check(&qp->o))
        return NULL;
    memset(&a, 0, sizeof(a));
    if (qp->o.prov->query_qp(qp->o.h, &a, mask, &st) < 0)
        return pyrdma_raise_status(qp->o.state, &st);
    res = pyrdma_struct_new(qp->o.state->qp_attr, &a, sizeof(a));
    return res;
}

static PyObject *
qp_bind_mw(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mw", "bind_info", "wr_id", "send_flags", NULL};
    pyrdma_QP *qp = (pyrdma_QP *)op;
    pyrdma_state *S = qp->o.state;
    struct pyrdma_status st = {0};
    struct pyrdma_mw_bind_info bi;
    const struct pyrdma_py_mw_bind_info *d;
    struct pyrdma_uint wr_id = {"QP.bind_mw", "wr_id", UINT64_MAX, 0},
        flags = {"QP.bind_mw", "send_flags", UINT32_MAX, PYRDMA_SEND_SIGNALED};
    PyObject *mwo, *info, *mro;
    pyrdma_MW *mw;
    uint32_t rkey;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|O&O&:bind_mw", kwlist,
                                     S->MWType, &mwo, S->mw_bind_info, &info,
                                     pyrdma_uint_conv, &wr_id,
                                     pyrdma_uint_conv, &flags))
        return NULL;
    mw = (pyrdma_MW *)mwo;
    if (!pyrdma_obj_check(&qp->o) || !pyrdma_obj_check(&mw->o))
        return NULL;
    if (mw->type != 1) {
        PyErr_SetString(PyExc_ValueError, "bind_mw(): a type 2 window is "
                        "bound by posting a send_wr with opcode "
                        "IBV_WR_BIND_MW");
        return NULL;
    }
    mro = pyrdma_struct_slots(info)[0];
    if (mro == NULL || mro == Py_None) {
        PyErr_SetString(PyExc_ValueError, "bind_mw(): bind_info.mr, the MR "
                        "to bind to, is missing");
        return NULL;
    }
    if (!pyrdma_obj_check((pyrdma_obj *)mro))
        return NULL;
    d = pyrdma_struct_data(info);
    bi.mr = ((pyrdma_obj *)mro)->h;
    bi.addr = d->addr;
    bi.length = d->length;
    bi.mw_access_flags = d->mw_access_flags;
    if (qp->o.prov->bind_mw(qp->o.h, mw->o.h, wr_id.v,
                              (unsigned int)flags.v, &bi, &rkey,
                            &st) < 0)
        return pyrdma_raise_status(S, &st);
    mw->rkey = rkey;
    return PyLong_FromUnsignedLong(rkey);
}

static PyObject *
qp_post_send(PyObject *op, PyObject *arg)
{
    return pyrdma_post_send((pyrdma_QP *)op, arg);
}

static PyObject *
qp_post_recv(PyObject *op, PyObject *arg)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    if (qp->o.parents[3] != NULL && qp->o.h != NULL) {
        PyErr_SetString(PyExc_ValueError, "QP.post_recv(): the QP takes its "
                        "receives from an SRQ; post them there");
        return NULL;
    }
    return pyrdma_post_recv(&qp->o, arg, 0);
}

static PyObject *
qp_mcast(PyObject *op, PyObject *args, int attach)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    struct pyrdma_status st = {0};
    PyObject *gid;
    struct pyrdma_uint lidarg = {attach ? "QP.attach_mcast" :
                                 "QP.detach_mcast", "lid", UINT16_MAX, 0};
    unsigned short lid;
    uint8_t raw[16];
    int rc;

    if (!PyArg_ParseTuple(args, attach ? "O|O&:attach_mcast" :
                          "O|O&:detach_mcast", &gid, pyrdma_uint_conv,
                          &lidarg))
        return NULL;
    lid = (unsigned short)lidarg.v;
    if (!pyrdma_obj_check(&qp->o))
        return NULL;
    if (PyTuple_GET_SIZE(args) == 1 && PyObject_HasAttrString(gid, "DGID")) {
        /* python-rdma form: a path with DGID and DLID. */
        PyObject *path = gid, *d;
        long l;
        d = PyObject_GetAttrString(path, "DLID");
        if (d == NULL)
            return NULL;
        l = PyLong_AsLong(d);
        Py_DECREF(d);
        if ((l == -1 && PyErr_Occurred()) || l < 0 || l > 0xFFFF) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "path.DLID out of range");
            return NULL;
        }
        lid = (unsigned short)l;
        d = PyObject_GetAttrString(path, "DGID");
        if (d == NULL)
            return NULL;
        l = pyrdma_gid_to_raw(qp->o.state, d, raw, "path.DGID");
        Py_DECREF(d);
        if (l < 0)
            return NULL;
    }
    else if (pyrdma_gid_to_raw(qp->o.state, gid, raw, "gid") < 0)
        return NULL;
    if (attach)
        rc = qp->o.prov->attach_mcast(qp->o.h, raw, lid, &st);
    else
        rc = qp->o.prov->detach_mcast(qp->o.h, raw, lid, &st);
    if (rc < 0)
        return pyrdma_raise_status(qp->o.state, &st);
    Py_RETURN_NONE;
}

/* The RD atomic resources a path's qp_attr asks for (RTR: as responder,
   path.drdatomic; RTS: as initiator, path.srdatomic), checked against the
   device's limits before modify_qp: past them a device says only EINVAL
   (the fabric "attribute out of range"), and the likely cause is a path
   that fill_path never limited, whose value is still 255.  0, or -1
   with SysError EINVAL naming it. */
static int
check_rd_atomic(pyrdma_QP *qp, PyObject *attr, int state)
{
    const struct pyrdma_qp_attr *a;
    pyrdma_obj *pd = (pyrdma_obj *)qp->o.parents[0];
    pyrdma_obj *ctx = pd != NULL ? (pyrdma_obj *)pd->parents[0] : NULL;
    struct pyrdma_device_attr da;
    struct pyrdma_status st = {0};
    const char *name, *field, *limit;
    unsigned v;
    int max;

    if ((state != 2 && state != 3) || ctx == NULL || ctx->h == NULL ||
        qp->qp_type != PYRDMA_QPT_RC)
        return 0;
    memset(&da, 0, sizeof(da));
    if (ctx->prov->query_device(ctx->h, &da, &st) < 0)
        return 0;               /* modify_qp will say what it says */
    a = pyrdma_struct_sync(attr);
    if (state == 2) {
        v = a->max_dest_rd_atomic;
        max = da.max_qp_rd_atom;
        name = "modify_to_rtr";
        field = "max_dest_rd_atomic";
        limit = "path.drdatomic";
    }
    else {
        v = a->max_rd_atomic;
        max = da.max_qp_init_rd_atom;
        name = "modify_to_rts";
        field = "max_rd_atomic";
        limit = "path.srdatomic";
    }
    if (max < 0 || v <= (unsigned)max)
        return 0;
    pyrdma_fail(&st, EINVAL, "ibv_modify_qp", "QP.%s: %s %u is out of "
                "range (0..%d, the device's %s); it is %s, which stays 255 "
                "until rdma.path.fill_path(qp, path) limits it to what the "
                "device allows: was the path filled for this QP?", name,
                field, v, max,
                state == 2 ? "max_qp_rd_atom" : "max_qp_init_rd_atom", limit);
    pyrdma_raise_status(qp->o.state, &st);
    return -1;
}

/* modify_to_*: ask the path for the qp_attr (the tables live in
   rdma.path) and apply it. */
static int
modify_to(pyrdma_QP *qp, PyObject *path, int state, unsigned int access)
{
    PyObject *attr, *res, *args;

    if (!pyrdma_obj_check(&qp->o))
        return -1;
    attr = PyObject_CallMethod(path, "qp_attr", "iiI", qp->qp_type, state,
                               access);
    if (attr == NULL)
        return -1;
    if (PyObject_TypeCheck(attr, (PyTypeObject *)qp->o.state->qp_attr) &&
        check_rd_atomic(qp, attr, state) < 0) {
        Py_DECREF(attr);
        return -1;
    }
    args = PyTuple_Pack(1, attr);
    Py_DECREF(attr);
    if (args == NULL)
        return -1;
    res = qp_modify((PyObject *)qp, args, NULL);
    Py_DECREF(args);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

static PyObject *
qp_modify_to_init(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "qp_access_flags", NULL};
    struct pyrdma_uint acc = {"QP.modify_to_init", "qp_access_flags",
                              UINT32_MAX, 0};
    unsigned int access;
    PyObject *path;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O&:modify_to_init", kwlist,
                                     &path, pyrdma_uint_conv, &acc))
        return NULL;
    access = (unsigned int)acc.v;
    if (modify_to((pyrdma_QP *)op, path, 1, access) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
qp_modify_to_rtr(PyObject *op, PyObject *path)
{
    if (modify_to((pyrdma_QP *)op, path, 2, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
qp_modify_to_rts(PyObject *op, PyObject *path)
{
    if (modify_to((pyrdma_QP *)op, path, 3, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
qp_establish(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "qp_access_flags", NULL};
    struct pyrdma_uint acc = {"QP.establish", "qp_access_flags", UINT32_MAX,
                              0};
    unsigned int access;
    PyObject *path;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O&:establish", kwlist,
                                     &path, pyrdma_uint_conv, &acc))
        return NULL;
    access = (unsigned int)acc.v;
    if (modify_to((pyrdma_QP *)op, path, 1, access) < 0 ||
        modify_to((pyrdma_QP *)op, path, 2, 0) < 0 ||
        modify_to((pyrdma_QP *)op, path, 3, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
qp_attach_mcast(PyObject *op, PyObject *args)
{
    return qp_mcast(op, args, 1);
}

static PyObject *
qp_detach_mcast(PyObject *op, PyObject *args)
{
    return qp_mcast(op, args, 0);
}

static PyObject *
qp_get_qp_num(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((pyrdma_QP *)op)->qp_num);
}

static PyObject *
qp_get_qp_type(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((pyrdma_QP *)op)->qp_type);
}

static PyObject *
qp_get_cap(PyObject *op, void *c)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    (void)c;
    return pyrdma_struct_new(qp->o.state->qp_cap, &qp->cap, sizeof(qp->cap));
}

/* One field of the QP's actual capacities; closure: its offset. */
static PyObject *
qp_get_cap_field(PyObject *op, void *c)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    uint32_t v;

    memcpy(&v, (const char *)&qp->cap + (size_t)(uintptr_t)c, sizeof(v));
    return PyLong_FromUnsignedLong(v);
}

#define CAP_FIELD(f) ((void *)(uintptr_t)offsetof(struct pyrdma_qp_cap, f))

static PyObject *
qp_get_sq_sig_all(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((pyrdma_QP *)op)->sq_sig_all);
}

static PyObject *
qp_get_parent(PyObject *op, void *c)
{
    PyObject *p = ((pyrdma_obj *)op)->parents[(intptr_t)c];
    return Py_NewRef(p ? p : Py_None);
}

static PyObject *
qp_get_state(PyObject *op, void *c)
{
    pyrdma_QP *qp = (pyrdma_QP *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_qp_attr a;

    (void)c;
    if (!pyrdma_obj_check(&qp->o))
        return NULL;
    if (qp->o.prov->query_qp(qp->o.h, &a, PYRDMA_QP_STATE, &st) < 0)
        return pyrdma_raise_status(qp->o.state, &st);
    return PyLong_FromLong(a.qp_state);
}

static PyMethodDef qp_methods[] = {
    {"post_send", qp_post_send, METH_O,
     "post_send($self, wr, /)\n--\n\nPost send work requests "
     "(ibv_post_send): one ibv.send_wr, a list of them, a chain (next), or "
     "an ibv.SendBatch.  A rejected request raises ibv.WRError naming its "
     "index; the ones before it were posted."},
    {"post_recv", qp_post_recv, METH_O,
     "post_recv($self, wr, /)\n--\n\nPost receive work requests "
     "(ibv_post_recv): one ibv.recv_wr, a list, a chain or an "
     "ibv.RecvBatch."},
    {"bind_mw", (PyCFunction)(void (*)(void))qp_bind_mw,
     METH_VARARGS | METH_KEYWORDS,
     "bind_mw($self, /, mw, bind_info, wr_id=0, "
     "send_flags=IBV_SEND_SIGNALED)\n--\n\nBind a type 1 memory window "
     "(ibv_bind_mw) to bind_info (an ibv.mw_bind_info; length 0 unbinds); "
     "return its new rkey, which mw.rkey holds too.  The bind is a work "
     "request of this QP: it completes on the send CQ with opcode "
     "IBV_WC_BIND_MW."},
    {"modify", (PyCFunction)(void (*)(void))qp_modify,
     METH_VARARGS | METH_KEYWORDS,
     "modify($self, /, attr, mask=None)\n--\n\nModify the QP "
     "(ibv_modify_qp); the mask defaults to the IBV_QP_* bits of the fields "
     "assigned in attr."},
    {"query", (PyCFunction)(void (*)(void))qp_query,
     METH_VARARGS | METH_KEYWORDS,
     "query($self, /, mask=...)\n--\n\nReturn the QP's ibv.qp_attr "
     "(ibv_query_qp)."},
    {"modify_to_init", (PyCFunction)(void (*)(void))qp_modify_to_init,
     METH_VARARGS | METH_KEYWORDS,
     "modify_to_init($self, /, path, qp_access_flags=0)\n--\n\nMove the QP "
     "to INIT with the P_Key, port (and Q_Key for UD) of an "
     "rdma.path.IBPath."},
    {"modify_to_rtr", qp_modify_to_rtr, METH_O,
     "modify_to_rtr($self, path, /)\n--\n\nMove the QP to RTR: address "
     "vector, MTU, destination QP and PSN, responder resources from path."},
    {"modify_to_rts", qp_modify_to_rts, METH_O,
     "modify_to_rts($self, path, /)\n--\n\nMove the QP to RTS: send PSN, "
     "timeout, retries and RD atomics from path."},
    {"establish", (PyCFunction)(void (*)(void))qp_establish,
     METH_VARARGS | METH_KEYWORDS,
     "establish($self, /, path, qp_access_flags=0)\n--\n\n"
     "modify_to_init, modify_to_rtr and modify_to_rts in one call."},
    {"attach_mcast", qp_attach_mcast, METH_VARARGS,
     "attach_mcast($self, gid, lid=0, /)\n--\n\nJoin a UD QP to a multicast "
     "group (ibv_attach_mcast); a path with DGID and DLID is accepted "
     "too."},
    {"detach_mcast", qp_detach_mcast, METH_VARARGS,
     "detach_mcast($self, gid, lid=0, /)\n--\n\nLeave a multicast group "
     "(ibv_detach_mcast)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef qp_getset[] = {
    {"qp_num", qp_get_qp_num, NULL, "QP number.", NULL},
    {"qp_type", qp_get_qp_type, NULL, "IBV_QPT_*.", NULL},
    {"cap", qp_get_cap, NULL, "Actual capacities (ibv.qp_cap).", NULL},
    {"max_send_wr", qp_get_cap_field, NULL,
     "Send queue depth the QP got (cap.max_send_wr).",
     CAP_FIELD(max_send_wr)},
    {"max_recv_wr", qp_get_cap_field, NULL,
     "Receive queue depth the QP got (cap.max_recv_wr).",
     CAP_FIELD(max_recv_wr)},
    {"max_send_sge", qp_get_cap_field, NULL,
     "Scatter/gather entries per send WR (cap.max_send_sge).",
     CAP_FIELD(max_send_sge)},
    {"max_recv_sge", qp_get_cap_field, NULL,
     "Scatter/gather entries per receive WR (cap.max_recv_sge).",
     CAP_FIELD(max_recv_sge)},
    {"max_inline_data", qp_get_cap_field, NULL,
     "Bytes of inline data per send WR (cap.max_inline_data).",
     CAP_FIELD(max_inline_data)},
    {"sq_sig_all", qp_get_sq_sig_all, NULL,
     "True if every send WR is signaled.", NULL},
    {"state", qp_get_state, NULL, "Current state (queried), IBV_QPS_*.",
     NULL},
    {"pd", qp_get_parent, NULL, "The PD.", (void *)0},
    {"ctx", obj_get_ctx, NULL, "The Context.", NULL},
    {"send_cq", qp_get_parent, NULL, "The send CQ.", (void *)1},
    {"recv_cq", qp_get_parent, NULL, "The receive CQ.", (void *)2},
    {"srq", qp_get_parent, NULL, "The SRQ, or None.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

int
pyrdma_qp_init(PyObject *module, pyrdma_state *st)
{
    st->SRQType = pyrdma_obj_type(module, "rdma.ibverbs.SRQ",
                                  sizeof(pyrdma_SRQ),
                                  "A shared receive queue: PD.srq().",
                                  srq_methods, srq_getset, NULL, 0);
    if (st->SRQType == NULL)
        return -1;
    st->QPType = pyrdma_obj_type(module, "rdma.ibverbs.QP", sizeof(pyrdma_QP),
                                 "A queue pair: PD.qp().", qp_methods,
                                 qp_getset, NULL, 0);
    return st->QPType == NULL ? -1 : 0;
}
