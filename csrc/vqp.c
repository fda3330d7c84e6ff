/* vqp.c - rdma.ibverbs.VirtualQP: a queue pair that owns several RC data
   QPs and stripes each message over them (IBVerbX's IbvVirtualQp).  The
   data path is in vqp_data.c; connect() asks a path for the attributes,
   like QP.establish(). */
#include <errno.h>
#include <stdlib.h>

#include "vqp.h"

static const char *const mode_names[] = {"dqplb", "spray"};
static const char *const choose_names[] = {"round_robin",
                                           "least_outstanding"};

/* Free what the VirtualQP allocated (its data QPs are destroyed). */
static void
vqp_free(pyrdma_VQP *q)
{
    uint32_t i;

    if (q->q != NULL)
        for (i = 0; i < q->n; i++)
            free(q->q[i].seq);
    free(q->q);
    free(q->msgs);
    free(q->sges);
    free(q->tmp);
    free(q->rx);
    free(q->rwr);
    free(q->note_len);
    free(q->note_imm);
    q->q = NULL;
    q->msgs = NULL;
    q->sges = NULL;
    q->tmp = NULL;
    q->rx = NULL;
    q->rwr = NULL;
    q->note_len = q->note_imm = NULL;
}

/* Destroy the data QPs; the first failure is reported. */
static int
vqp_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    pyrdma_VQP *q = (pyrdma_VQP *)o;
    struct pyrdma_status tmp = {0};
    uint32_t i;
    int rc = 0;

    if (q->q == NULL)
        return 0;
    if (q->vcq != NULL) {
        pyrdma_vcq_unregister(q->vcq, q);
        q->vcq->reserved -= q->cq_share;
    }
    for (i = 0; i < q->n; i++) {
        if (q->q[i].h == NULL)
            continue;
        if (o->prov->destroy_qp(q->q[i].h, rc ? &tmp : st) < 0)
            rc = -1;
        q->q[i].h = NULL;
    }
    return rc;
}

static void
vqp_release(pyrdma_obj *o)
{
    vqp_free((pyrdma_VQP *)o);
}

static const struct pyrdma_objkind vqp_kind = {
    "VirtualQP", PYRDMA_RANK_QP, vqp_destroy, vqp_release,
};

/* The arguments of PD.virtual_qp. */
struct vqp_args {
    unsigned long long n, fragment, max_msgs, max_wr, max_sge, port;
    int mode, choose;
    pyrdma_VCQ *vcq;
};

static int
name_arg(PyObject *v, const char *const *names, int count, const char *what,
         int *out)
{
    int i;

    if (v == NULL)
        return 0;
    if (PyUnicode_Check(v))
        for (i = 0; i < count; i++)
            if (PyUnicode_CompareWithASCIIString(v, names[i]) == 0) {
                *out = i;
                return 0;
            }
    PyErr_Format(PyExc_ValueError, "virtual_qp(): %s must be %s or %s, not "
                 "%R", what, names[0], names[1], v);
    return -1;
}

/* Check the sizes against the device and port; 0 or -1 with ValueError. */
static int
check_limits(pyrdma_obj *pd, struct vqp_args *a)
{
    pyrdma_obj *ctx = (pyrdma_obj *)pd->parents[0];
    struct pyrdma_port_attr pa;
    struct pyrdma_device_attr da;
    struct pyrdma_status st = {0};

    if (a->n == 0 || a->n > 1024) {
        PyErr_Format(PyExc_ValueError, "virtual_qp(): n_qps must be in "
                     "1..1024, not %llu", a->n);
        return -1;
    }
    if (a->fragment == 0) {
        PyErr_SetString(PyExc_ValueError, "virtual_qp(): fragment must be "
                        "at least 1 byte");
        return -1;
    }
    memset(&pa, 0, sizeof(pa));
    if (ctx->prov->query_port(ctx->h, (uint8_t)a->port, &pa, &st) < 0) {
        pyrdma_raise_status(pd->state, &st);
        return -1;
    }
    if (pa.max_msg_sz && a->fragment > pa.max_msg_sz) {
        PyErr_Format(PyExc_ValueError, "virtual_qp(): fragment %llu is "
                     "larger than port %llu's max_msg_sz %u", a->fragment,
                     a->port, pa.max_msg_sz);
        return -1;
    }
    memset(&da, 0, sizeof(da));
    if (ctx->prov->query_device(ctx->h, &da, &st) == 0 && da.max_sge > 0 &&
        a->max_sge > (unsigned long long)da.max_sge) {
        PyErr_Format(PyExc_ValueError, "virtual_qp(): max_sge %llu is more "
                     "than the device's %d", a->max_sge, da.max_sge);
        return -1;
    }
    return 0;
}

static int
parse_args(pyrdma_obj *pd, PyObject *args, PyObject *kw, struct vqp_args *a)
{
    static char *kwlist[] = {"n_qps", "cq", "mode", "fragment", "max_msgs",
                             "max_wr", "max_sge", "choose", "port", NULL};
    struct pyrdma_uint n = {"virtual_qp", "n_qps", 1024, 0},
        f = {"virtual_qp", "fragment", UINT32_MAX, 65536},
        mm = {"virtual_qp", "max_msgs", 1 << 16, 64},
        mw = {"virtual_qp", "max_wr", 1 << 20, 256},
        ms = {"virtual_qp", "max_sge", 64, 4},
        port = {"virtual_qp", "port", 255, 1};
    PyObject *cq, *mode = NULL, *choose = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|OO&O&O&O&OO&:virtual_qp",
                                     kwlist, pyrdma_uint_conv, &n, &cq, &mode,
                                     pyrdma_uint_conv, &f, pyrdma_uint_conv,
                                     &mm, pyrdma_uint_conv, &mw,
                                     pyrdma_uint_conv, &ms, &choose,
                                     pyrdma_uint_conv, &port))
        return -1;
    a->mode = VQP_DQPLB;
    a->choose = VQP_ROUND_ROBIN;
    if (name_arg(mode, mode_names, 2, "mode", &a->mode) < 0 ||
        name_arg(choose, choose_names, 2, "choose", &a->choose) < 0)
        return -1;
    if (!PyObject_TypeCheck(cq, pd->state->VirtualCQType)) {
        PyErr_Format(PyExc_TypeError, "virtual_qp(): cq must be a VirtualCQ "
                     "(PD.virtual_cq()), not %.100s", Py_TYPE(cq)->tp_name);
        return -1;
    }
    a->vcq = (pyrdma_VCQ *)cq;
    a->n = n.v;
    a->fragment = f.v;
    a->max_msgs = mm.v ? mm.v : 1;
    a->max_wr = mw.v ? mw.v : 1;
    a->max_sge = ms.v ? ms.v : 1;
    a->port = port.v;
    if (!pyrdma_obj_check(&a->vcq->o))
        return -1;
    if (a->vcq->o.parents[0] != pd->parents[0]) {
        PyErr_SetString(PyExc_ValueError, "virtual_qp(): the VirtualCQ "
                        "belongs to another Context");
        return -1;
    }
    return check_limits(pd, a);
}

/* Allocate the rings; 0 or -1 with MemoryError. */
static int
vqp_alloc(pyrdma_VQP *q, const struct vqp_args *a)
{
    uint32_t i;

    q->cap = 1;
    while (q->cap < a->max_wr)
        q->cap <<= 1;
    q->q = calloc(q->n, sizeof(*q->q));
    q->msgs = calloc(q->cap, sizeof(*q->msgs));
    q->sges = calloc((size_t)q->cap * q->max_sge, sizeof(*q->sges));
    q->tmp = calloc(q->max_sge, sizeof(*q->tmp));
    q->rwr = calloc(q->cap, sizeof(*q->rwr));
    q->note_len = calloc(q->cap, sizeof(uint32_t));
    q->note_imm = calloc(q->cap, sizeof(uint32_t));
    if (!q->q || !q->msgs || !q->sges || !q->tmp || !q->rwr ||
        !q->note_len || !q->note_imm)
        goto nomem;
    for (i = 0; i < q->cap; i++)
        q->msgs[i].sge = &q->sges[(size_t)i * q->max_sge];
    for (i = 0; i < q->n; i++)
        if ((q->q[i].seq = calloc(q->depth, sizeof(uint32_t))) == NULL)
            goto nomem;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* Create the data QPs (RC, on the VirtualCQ); 0 or -1 with an error. */
static int
make_data_qps(pyrdma_VQP *q, pyrdma_obj *pd)
{
    struct pyrdma_qp_init_attr ia;
    struct pyrdma_status st = {0};
    uint32_t i;

    for (i = 0; i < q->n; i++) {
        memset(&ia, 0, sizeof(ia));
        ia.send_cq = ia.recv_cq = q->vcq->o.h;
        ia.qp_context = q;
        ia.qp_type = PYRDMA_QPT_RC;
        ia.sq_sig_all = 1;
        ia.cap.max_send_wr = q->depth;
        ia.cap.max_recv_wr = q->depth;
        ia.cap.max_send_sge = q->max_sge;
        ia.cap.max_recv_sge = 1;
        if (pd->prov->create_qp(pd->h, &ia, &q->q[i].h, &q->q[i].qpn,
                                &st) < 0) {
            pyrdma_raise_status(pd->state, &st);
            return -1;
        }
    }
    return 0;
}

PyObject *
pyrdma_pd_virtual_qp(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_obj *pd = (pyrdma_obj *)op;
    struct pyrdma_status st = {0};
    struct vqp_args a;
    pyrdma_VQP *q;
    uint32_t share;

    if (!pyrdma_obj_check(pd) || parse_args(pd, args, kw, &a) < 0)
        return NULL;
    share = (uint32_t)(a.n * 2 * (a.max_msgs + 2));
    if (a.vcq->reserved + share > (uint32_t)a.vcq->cqe) {
        PyErr_Format(PyExc_ValueError, "virtual_qp(): its %llu data QPs "
                     "may need %u CQ entries and the VirtualCQ has %u of "
                     "%d left (make it with a larger nelems)", a.n, share,
                     a.vcq->cqe - a.vcq->reserved, a.vcq->cqe);
        return NULL;
    }
    q = (pyrdma_VQP *)pyrdma_obj_new(pd->state->VirtualQPType, &vqp_kind, pd);
    if (q == NULL)
        return NULL;
    q->vcq = a.vcq;
    q->mode = a.mode;
    q->choose = a.choose;
    q->n = (uint32_t)a.n;
    q->fragment = (uint32_t)a.fragment;
    q->max_msgs = (uint32_t)a.max_msgs;
    q->depth = q->max_msgs + 2;
    q->max_sge = (uint32_t)a.max_sge;
    if (vqp_alloc(q, &a) < 0 || make_data_qps(q, pd) < 0 ||
        pyrdma_vcq_register(q->vcq, q) != 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        pyrdma_vcq_unregister(q->vcq, q);
        q->o.h = q->q;      /* for the shared destroy */
        (void)vqp_destroy(&q->o, &st);
        q->o.h = NULL;
        vqp_free(q);
        Py_DECREF(q);
        return NULL;
    }
    q->cq_share = share;
    q->vcq->reserved += share;
    q->o.h = q->q;
    pyrdma_obj_link(&q->o, 0, pd);
    pyrdma_obj_link(&q->o, 1, &q->vcq->o);
    return (PyObject *)q;
}

/* ---- posting ---- */

static int
send_fn(void *t, void *wrs, void **bad, char *why, size_t len)
{
    return pyrdma_vqp_send(t, wrs, (struct pyrdma_send_wr **)bad, why, len);
}

static int
recv_fn(void *t, void *wrs, void **bad, char *why, size_t len)
{
    return pyrdma_vqp_recv(t, wrs, (struct pyrdma_recv_wr **)bad, why, len);
}

/* A WR the modes cannot carry is a ValueError (nothing is posted). */
static PyObject *
vqp_post_send(PyObject *op, PyObject *arg)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    PyObject *r;

    if (!pyrdma_obj_check(&q->o))
        return NULL;
    r = pyrdma_post_via(q->o.state, arg, 1, q, send_fn,
                        "VirtualQP.post_send");
    if (r == NULL && PyErr_ExceptionMatches(q->o.state->WRError)) {
        PyObject *et, *ev, *tb, *e;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        e = PyObject_GetAttrString(ev, "errno");
        if (e != NULL && PyLong_Check(e) && PyLong_AsLong(e) == EINVAL &&
            q->connected) {
            PyObject *s = PyObject_GetAttrString(ev, "strerror");
            Py_XDECREF(e);
            Py_XDECREF(et);
            Py_XDECREF(tb);
            if (s != NULL)
                PyErr_Format(PyExc_ValueError, "VirtualQP.post_send(): %S", s);
            Py_XDECREF(s);
            Py_DECREF(ev);
            return NULL;
        }
        Py_XDECREF(e);
        PyErr_Restore(et, ev, tb);
    }
    return r;
}

static PyObject *
vqp_post_recv(PyObject *op, PyObject *arg)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;

    if (!pyrdma_obj_check(&q->o))
        return NULL;
    return pyrdma_post_via(q->o.state, arg, 0, q, recv_fn,
                           "VirtualQP.post_recv");
}

int
pyrdma_vqp_capi_send(PyObject *op, struct pyrdma_send_wr *wr,
                     struct pyrdma_send_wr **bad)
{
    char why[256];
    return pyrdma_vqp_send((pyrdma_VQP *)op, wr, bad, why, sizeof(why));
}

int
pyrdma_vqp_capi_recv(PyObject *op, struct pyrdma_recv_wr *wr,
                     struct pyrdma_recv_wr **bad)
{
    char why[256];
    return pyrdma_vqp_recv((pyrdma_VQP *)op, wr, bad, why, sizeof(why));
}

/* ---- connecting ---- */

/* An int item of the peer's info (a mapping); -1 with an error. */
static long long
peer_int(PyObject *peer, const char *key)
{
    PyObject *v = PyMapping_GetItemString(peer, key);
    long long x;

    if (v == NULL) {
        PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): the peer's "
                     "info has no %s (give the peer's VirtualQP.info())", key);
        return -1;
    }
    x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x < 0 && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): peer %s is "
                     "negative", key);
    return x < 0 ? -1 : x;
}

/* Check the peer's mode and QP count against ours; fill qpns[n]. */
static int
check_peer(pyrdma_VQP *q, PyObject *peer, uint32_t *qpns, uint32_t *seq,
           uint32_t *max_msgs)
{
    PyObject *mode = PyMapping_GetItemString(peer, "mode"), *l;
    long long n, v;
    uint32_t i;

    if (mode == NULL || !PyUnicode_Check(mode) ||
        PyUnicode_CompareWithASCIIString(mode, mode_names[q->mode]) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): the peer's "
                     "mode is %R, this VirtualQP's is '%s' (both ends must "
                     "use the same mode)", mode ? mode : Py_None,
                     mode_names[q->mode]);
        Py_XDECREF(mode);
        return -1;
    }
    Py_DECREF(mode);
    if (PyMapping_HasKeyString(peer, "proto")) {   /* absent: made by hand */
        if ((v = peer_int(peer, "proto")) < 0)
            return -1;
        if (v != VQP_PROTO) {
            PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): the peer "
                         "speaks VirtualQP protocol %lld, this one %d (both "
                         "ends need the same rdma version)", v, VQP_PROTO);
            return -1;
        }
    }
    if ((n = peer_int(peer, "n_qps")) < 0)
        return -1;
    if (n != q->n) {
        PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): the peer has "
                     "%lld data QPs, this VirtualQP %u (both ends must have "
                     "as many)", n, q->n);
        return -1;
    }
    if ((v = peer_int(peer, "seq")) < 0)
        return -1;
    *seq = (uint32_t)v & VQP_SEQ_MASK;
    if ((v = peer_int(peer, "max_msgs")) < 0)
        return -1;
    *max_msgs = v > (1 << 16) ? 1 << 16 : (uint32_t)v;
    if ((l = PyMapping_GetItemString(peer, "qpns")) == NULL ||
        PySequence_Size(l) != (Py_ssize_t)q->n) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "VirtualQP.connect(): the peer's "
                     "info needs qpns, a list of its %u data QP numbers",
                     q->n);
        Py_XDECREF(l);
        return -1;
    }
    for (i = 0; i < q->n; i++) {
        PyObject *x = PySequence_GetItem(l, i);
        unsigned long qpn = x ? PyLong_AsUnsignedLong(x) : (unsigned long)-1;
        Py_XDECREF(x);
        if (PyErr_Occurred()) {
            Py_DECREF(l);
            return -1;
        }
        qpns[i] = (uint32_t)qpn;
    }
    Py_DECREF(l);
    return 0;
}

/* Move data QP i to state on path (a copy with dqpn set); 0 or -1. */
static int
modify_data_qp(pyrdma_VQP *q, uint32_t i, PyObject *path, int state,
               unsigned long access)
{
    struct pyrdma_status st = {0};
    PyObject *attr;
    int rc;

    attr = PyObject_CallMethod(path, "qp_attr", "iik", PYRDMA_QPT_RC, state,
                               access);
    if (attr == NULL)
        return -1;
    if (!PyObject_TypeCheck(attr, q->o.state->qp_attr)) {
        PyErr_SetString(PyExc_TypeError, "path.qp_attr() must return an "
                        "ibv.qp_attr");
        Py_DECREF(attr);
        return -1;
    }
    rc = q->o.prov->modify_qp(q->q[i].h, pyrdma_struct_sync(attr),
                              (int)pyrdma_struct_mask(attr), &st);
    Py_DECREF(attr);
    if (rc < 0) {
        pyrdma_raise_status(q->o.state, &st);
        return -1;
    }
    return 0;
}

/* Bring data QP i to RTS towards qpn, its receives posted. */
static int
connect_one(pyrdma_VQP *q, uint32_t i, PyObject *path, uint32_t qpn,
            unsigned long access)
{
    PyObject *kw, *noargs, *copy, *p;
    int rc = -1, state;

    kw = Py_BuildValue("{s:k}", "dqpn", (unsigned long)qpn);
    noargs = PyTuple_New(0);
    copy = PyObject_GetAttrString(path, "copy");
    p = (kw && noargs && copy) ? PyObject_Call(copy, noargs, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(noargs);
    Py_XDECREF(copy);
    if (p == NULL)
        return -1;
    for (state = 1; state <= 3; state++) {
        if (modify_data_qp(q, i, p, state, access) < 0)
            goto out;
        if (state == 1 && (q->mode == VQP_DQPLB || i == 0)) {
            int err = pyrdma_vqp_post_rx(q, i, q->depth);
            if (err) {
                pyrdma_raise_sys(q->o.state, err, "ibv_post_recv",
                                 "posting the data QP's receives");
                goto out;
            }
        }
    }
    rc = 0;
out:
    Py_DECREF(p);
    return rc;
}

static PyObject *
vqp_connect(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "peer", "qp_access_flags", NULL};
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    struct pyrdma_uint acc = {"VirtualQP.connect", "qp_access_flags",
                              UINT32_MAX, PYRDMA_ACCESS_LOCAL_WRITE |
                              PYRDMA_ACCESS_REMOTE_WRITE};
    PyObject *path, *peer;
    uint32_t *qpns, seq = 0, mm = 0, i;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O&:connect", kwlist,
                                     &path, &peer, pyrdma_uint_conv, &acc))
        return NULL;
    if (!pyrdma_obj_check(&q->o))
        return NULL;
    if (q->connected) {
        PyErr_SetString(PyExc_ValueError, "VirtualQP.connect(): already "
                        "connected");
        return NULL;
    }
    if ((qpns = calloc(q->n, sizeof(uint32_t))) == NULL)
        return PyErr_NoMemory();
    if (check_peer(q, peer, qpns, &seq, &mm) < 0)
        goto fail;
    if (mm < q->max_msgs)
        mm = q->max_msgs;
    for (q->window = 64; q->window < 4 * q->n * (mm + 2); q->window <<= 1)
        ;
    if ((q->rx = calloc(q->window, sizeof(*q->rx))) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    q->rx_next = seq;
    for (i = 0; i < q->n; i++)
        if (connect_one(q, i, path, qpns[i], (unsigned long)acc.v) < 0)
            goto fail;
    q->connected = 1;
    free(qpns);
    Py_RETURN_NONE;
fail:
    free(qpns);
    free(q->rx);
    q->rx = NULL;
    return NULL;
}

/* What the peer needs for connect(): a dict. */
static PyObject *
vqp_info(PyObject *op, PyObject *noargs)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    PyObject *l, *d;
    uint32_t i;

    (void)noargs;
    if (!pyrdma_obj_check(&q->o))
        return NULL;
    if ((l = PyList_New(q->n)) == NULL)
        return NULL;
    for (i = 0; i < q->n; i++)
        PyList_SET_ITEM(l, i, PyLong_FromUnsignedLong(q->q[i].qpn));
    d = Py_BuildValue("{s:s,s:I,s:N,s:I,s:I,s:I,s:i}", "mode",
                      mode_names[q->mode], "n_qps", q->n, "qpns", l, "seq",
                      q->seq_next, "max_msgs", q->max_msgs, "fragment",
                      q->fragment, "proto", VQP_PROTO);
    return d;
}

/* ---- attributes ---- */

static PyObject *
vqp_get_qp_nums(PyObject *op, void *c)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    PyObject *t;
    uint32_t i;

    (void)c;
    if (!pyrdma_obj_check(&q->o))
        return NULL;
    if ((t = PyTuple_New(q->n)) == NULL)
        return NULL;
    for (i = 0; i < q->n; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLong(q->q[i].qpn));
    return t;
}

static PyObject *
vqp_get_int(PyObject *op, void *c)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    switch ((int)(intptr_t)c) {
    case 0: return PyLong_FromUnsignedLong(q->n);
    case 1: return PyLong_FromUnsignedLong(q->fragment);
    case 2: return PyLong_FromUnsignedLong(q->max_msgs);
    case 3: return PyLong_FromUnsignedLong(q->serial_next - q->head);
    case 4: return PyLong_FromUnsignedLong(q->cap);
    case 5: return PyUnicode_FromString(mode_names[q->mode]);
    case 6: return PyUnicode_FromString(choose_names[q->choose]);
    case 7: return PyBool_FromLong(q->connected);
    case 9: return PyLong_FromUnsignedLong(q->q ? q->q[0].qpn : 0);
    default:
        if (!q->err)
            Py_RETURN_NONE;
        return PyUnicode_FromString(q->errmsg);
    }
}

static PyObject *
vqp_get_send_seq(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((pyrdma_VQP *)op)->seq_next);
}

/* The first sequence number (dqplb), before connect: like a PSN. */
static int
vqp_set_send_seq(PyObject *op, PyObject *v, void *c)
{
    pyrdma_VQP *q = (pyrdma_VQP *)op;
    struct pyrdma_uint s = {"VirtualQP", "send_seq", VQP_SEQ_MASK, 0};

    (void)c;
    if (v == NULL || !pyrdma_uint_conv(v, &s)) {
        if (v == NULL)
            PyErr_SetString(PyExc_AttributeError, "cannot delete send_seq");
        return -1;
    }
    if (q->connected || q->serial_next != 0) {
        PyErr_SetString(PyExc_ValueError, "send_seq can only be set before "
                        "connect()");
        return -1;
    }
    q->seq_next = (uint32_t)s.v;
    return 0;
}

static PyObject *
vqp_get_parent(PyObject *op, void *c)
{
    PyObject *p = ((pyrdma_obj *)op)->parents[(intptr_t)c];
    return Py_NewRef(p ? p : Py_None);
}

static PyGetSetDef vqp_getset[] = {
    {"qp_nums", vqp_get_qp_nums, NULL, "The data QPs' numbers (tuple).",
     NULL},
    {"n_qps", vqp_get_int, NULL, "Number of data QPs.", (void *)0},
    {"fragment", vqp_get_int, NULL, "Bytes per fragment.", (void *)1},
    {"max_msgs", vqp_get_int, NULL, "Fragments in flight per data QP.",
     (void *)2},
    {"outstanding", vqp_get_int, NULL, "Virtual send WRs not yet reported "
     "on the VirtualCQ.", (void *)3},
    {"max_wr", vqp_get_int, NULL, "Virtual WRs in flight, each way.",
     (void *)4},
    {"mode", vqp_get_int, NULL, "'dqplb' or 'spray'.", (void *)5},
    {"choose", vqp_get_int, NULL, "How a fragment's data QP is chosen: "
     "'round_robin' or 'least_outstanding'.", (void *)6},
    {"connected", vqp_get_int, NULL, "connect() succeeded.", (void *)7},
    {"error", vqp_get_int, NULL, "None, or why the VirtualQP is in the "
     "error state (the data QP and fragment that failed).", (void *)8},
    {"qp_num", vqp_get_int, NULL, "Data QP 0's number (the number its "
     "virtual completions carry; rdma.path.fill_path() takes a VirtualQP).",
     (void *)9},
    {"send_seq", vqp_get_send_seq, vqp_set_send_seq, "dqplb: the next "
     "sequence number sent (settable before connect()).", NULL},
    {"pd", vqp_get_parent, NULL, "The PD it belongs to.", (void *)0},
    {"cq", vqp_get_parent, NULL, "Its VirtualCQ.", (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef vqp_methods[] = {
    {"post_send", vqp_post_send, METH_O,
     "post_send($self, wr, /)\n--\n\nPost virtual send WRs (one ibv.send_wr, "
     "a list or a chain): IBV_WR_RDMA_WRITE or IBV_WR_RDMA_WRITE_WITH_IMM "
     "of any length (up to 4 GiB - 1) and up to max_sge s/g entries.  Each "
     "is cut into fragments spread over the data QPs and gives one "
     "completion on the VirtualCQ, in posting order.  Another opcode is a "
     "ValueError; nothing of a rejected list is posted."},
    {"post_recv", vqp_post_recv, METH_O,
     "post_recv($self, wr, /)\n--\n\nPost virtual receive WRs: each "
     "RDMA_WRITE_WITH_IMM message the peer sends consumes one and "
     "completes it (IBV_WC_RECV_RDMA_WITH_IMM, the message's byte_len and "
     "imm_data).  The s/g list is not used: the data lands where the "
     "sender wrote it."},
    {"connect", (PyCFunction)(void (*)(void))vqp_connect,
     METH_VARARGS | METH_KEYWORDS,
     "connect($self, /, path, peer, qp_access_flags=LOCAL_WRITE|"
     "REMOTE_WRITE)\n--\n\nBring every data QP to RTS towards the peer's "
     "data QP of the same index.  path is the path to the peer (an IBPath; "
     "its dqpn is replaced per data QP), peer the peer's info() (checked: "
     "same mode and number of data QPs, else ValueError)."},
    {"info", vqp_info, METH_NOARGS,
     "info($self, /)\n--\n\nWhat the peer's connect() needs, as a dict "
     "(mode, n_qps, qpns, seq, max_msgs, fragment, proto): send it out "
     "of band."},
    {NULL, NULL, 0, NULL},
};

int
pyrdma_vqp_init(PyObject *module, pyrdma_state *st)
{
    st->VirtualQPType = pyrdma_obj_type(
        module, "rdma.ibverbs.VirtualQP", sizeof(pyrdma_VQP),
        "A virtual queue pair striping each message over n_qps RC data "
        "QPs: PD.virtual_qp().", vqp_methods, vqp_getset, NULL, 0);
    return st->VirtualQPType == NULL ? -1 : 0;
}
