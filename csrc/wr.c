/* wr.c - work requests: conversion, posting, prepared batches, WCArray. */

/*
 * A Python send_wr/recv_wr object stores its fields as C data, so turning
 * a list of them into the provider's array is a copy per field, with no
 * attribute lookup.  Small posts use stack buffers; a SendBatch/RecvBatch
 * keeps the converted array to post again and again with no conversion.
 */
#include <errno.h>
#include <time.h>

#include "rdma.h"

#define SMALL_WR 16
#define SMALL_SGE 32

/* Converted work requests (send or receive) and their s/g entries. */
struct wrbuf {
    void *wrs;                 /* pyrdma_send_wr[] or pyrdma_recv_wr[] */
    struct pyrdma_sge *sges;   /* all s/g entries, in WR order */
    PyObject **src;            /* borrowed: the Python WR of each entry */
    Py_ssize_t n;              /* number of WRs */
    Py_ssize_t nsge;           /* number of s/g entries */
    int heap;                  /* the arrays are heap memory */
    int binds;                 /* IBV_WR_BIND_MW WRs among them */
};

/* Iterate the WRs given to post_*: one WR, a list/tuple, each possibly a
   chain through next.  Calls fn(wr, i, arg) for each; returns the count or
   -1 with an error set. */
typedef int (*wr_fn)(PyObject *wr, Py_ssize_t i, void *arg);

static Py_ssize_t
walk(PyObject *arg, PyTypeObject *tp, const char *what, wr_fn fn, void *a)
{
    Py_ssize_t i = 0, k, n = 1;
    PyObject *seq = NULL;

    if (PyList_Check(arg) || PyTuple_Check(arg)) {
        seq = arg;
        n = PySequence_Fast_GET_SIZE(arg);
    }
    else if (arg == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: expected a work request, a list "
                     "of them or a batch, not None", what);
        return -1;
    }
    for (k = 0; k < n; k++) {
        PyObject *w = seq ? PySequence_Fast_GET_ITEM(seq, k) : arg;
        int depth = 0;
        while (w != NULL && w != Py_None) {
            if (!PyObject_TypeCheck(w, tp)) {
                PyErr_Format(PyExc_TypeError, "%s[%zd] must be an ibv.%s, "
                             "not %.100s", what, i, tp->tp_name + 13,
                             Py_TYPE(w)->tp_name);
                return -1;
            }
            if (++depth > 1 << 20) {
                PyErr_Format(PyExc_ValueError, "%s: the next chain loops",
                             what);
                return -1;
            }
            if (fn(w, i, a) < 0)
                return -1;
            i++;
            w = pyrdma_struct_slots(w)[PYRDMA_WR_NEXT];
        }
    }
    return i;
}

/* Counting pass: how many WRs and s/g entries. */
struct counts {
    Py_ssize_t nsge;
    PyTypeObject *sge;
    const char *what;
};

static Py_ssize_t
sg_len(PyObject *sg, PyTypeObject *sge_tp)
{
    if (sg == NULL)
        return 0;
    if (PyObject_TypeCheck(sg, sge_tp))
        return 1;
    return PySequence_Fast_GET_SIZE(sg);   /* list or tuple (checked) */
}

static int
count_fn(PyObject *w, Py_ssize_t i, void *arg)
{
    struct counts *c = arg;
    (void)i;
    c->nsge += sg_len(pyrdma_struct_slots(w)[PYRDMA_WR_SG_LIST], c->sge);
    return 0;
}

/* Fill pass state. */
struct fill {
    struct wrbuf *b;
    pyrdma_state *S;
    int send;                 /* send WRs (else receive) */
    int qp_type;              /* for UD address fields */
    Py_ssize_t sge_at;        /* next free s/g entry */
    const char *what;
};

/* Copy the s/g list of w into f->b; return the count or -1. */
static int
fill_sges(struct fill *f, PyObject *w, Py_ssize_t i, struct pyrdma_sge **out)
{
    PyObject *sg = pyrdma_struct_slots(w)[PYRDMA_WR_SG_LIST];
    struct pyrdma_sge *dst = f->b->sges + f->sge_at;
    Py_ssize_t n, k;

    *out = NULL;
    if (sg == NULL)
        return 0;
    if (PyObject_TypeCheck(sg, f->S->sge)) {
        memcpy(dst, pyrdma_struct_data(sg), sizeof(*dst));
        n = 1;
    }
    else {
        n = PySequence_Fast_GET_SIZE(sg);
        for (k = 0; k < n; k++) {
            PyObject *e = PySequence_Fast_GET_ITEM(sg, k);
            if (!PyObject_TypeCheck(e, f->S->sge)) {
                PyErr_Format(PyExc_TypeError, "%s[%zd].sg_list[%zd] must be "
                             "an ibv.sge, not %.100s", f->what, i, k,
                             Py_TYPE(e)->tp_name);
                return -1;
            }
            memcpy(dst + k, pyrdma_struct_data(e), sizeof(*dst));
        }
    }
    if (n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s[%zd]: too many s/g entries",
                     f->what, i);
        return -1;
    }
    *out = n ? dst : NULL;
    f->sge_at += n;
    return (int)n;
}

/* A slot that holds an object (None counts as empty). */
static PyObject *
slot_obj(PyObject *w, int slot)
{
    PyObject *v = pyrdma_struct_slots(w)[slot];
    return v == Py_None ? NULL : v;
}

/* The fields of an IBV_WR_BIND_MW WR (type 2 window). */
static int
fill_bind(struct fill *f, PyObject *w, Py_ssize_t i, struct pyrdma_send_wr *c,
          const struct pyrdma_py_send_wr *d)
{
    pyrdma_obj *mw = (pyrdma_obj *)slot_obj(w, PYRDMA_WR_MW), *mr;
    PyObject *bi = slot_obj(w, PYRDMA_WR_BIND_INFO);
    const struct pyrdma_py_mw_bind_info *b;

    if (mw == NULL || bi == NULL) {
        PyErr_Format(PyExc_ValueError, "%s[%zd]: IBV_WR_BIND_MW needs %s",
                     f->what, i, mw == NULL ? "mw (the window)"
                                            : "bind_info (an ibv.mw_bind_info)");
        return -1;
    }
    mr = (pyrdma_obj *)slot_obj(bi, 0);
    if (mr == NULL) {
        PyErr_Format(PyExc_ValueError, "%s[%zd].bind_info.mr: the MR to bind "
                     "to is missing", f->what, i);
        return -1;
    }
    if (mw->h == NULL || mr->h == NULL) {
        PyErr_Format(PyExc_ValueError, "%s[%zd].%s is closed", f->what, i,
                     mw->h == NULL ? "mw" : "bind_info.mr");
        return -1;
    }
    b = pyrdma_struct_data(bi);
    c->bind_mw.mw = mw->h;
    c->bind_mw.rkey = d->rkey;
    c->bind_mw.bind_info.mr = mr->h;
    c->bind_mw.bind_info.addr = b->addr;
    c->bind_mw.bind_info.length = b->length;
    c->bind_mw.bind_info.mw_access_flags = b->mw_access_flags;
    f->b->binds++;
    return 0;
}

static int
fill_send(PyObject *w, Py_ssize_t i, void *arg)
{
    struct fill *f = arg;
    struct pyrdma_send_wr *c = (struct pyrdma_send_wr *)f->b->wrs + i;
    const struct pyrdma_py_send_wr *d = pyrdma_struct_data(w);
    int nsge;

    memset(c, 0, sizeof(*c));
    f->b->src[i] = w;
    nsge = fill_sges(f, w, i, &c->sg_list);
    if (nsge < 0)
        return -1;
    c->num_sge = nsge;
    c->wr_id = d->wr_id;
    c->opcode = (int)d->opcode;
    c->send_flags = d->send_flags;
    switch (d->opcode) {
    case PYRDMA_WR_RDMA_WRITE_WITH_IMM:
        c->imm_data = d->imm_data;
        /* fall through */
    case PYRDMA_WR_RDMA_WRITE:
    case PYRDMA_WR_RDMA_READ:
        c->wr.rdma.remote_addr = d->remote_addr;
        c->wr.rdma.rkey = d->rkey;
        break;
    case PYRDMA_WR_ATOMIC_CMP_AND_SWP:
    case PYRDMA_WR_ATOMIC_FETCH_AND_ADD:
        c->wr.atomic.remote_addr = d->remote_addr;
        c->wr.atomic.rkey = d->rkey;
        c->wr.atomic.compare_add = d->compare_add;
        c->wr.atomic.swap = d->swap;
        break;
    case PYRDMA_WR_SEND_WITH_IMM:
        c->imm_data = d->imm_data;
        break;
    case PYRDMA_WR_SEND_WITH_INV:
    case PYRDMA_WR_LOCAL_INV:
        c->invalidate_rkey = d->invalidate_rkey;
        break;
    case PYRDMA_WR_BIND_MW:
        if (fill_bind(f, w, i, c, d) < 0)
            return -1;
        break;
    default:
        break;
    }
    if (f->qp_type == PYRDMA_QPT_UD) {
        PyObject *ah = pyrdma_struct_slots(w)[PYRDMA_WR_AH];
        if (ah == NULL) {
            PyErr_Format(PyExc_ValueError, "%s[%zd].ah: a UD QP needs an "
                         "address handle", f->what, i);
            return -1;
        }
        if (((pyrdma_obj *)ah)->h == NULL) {
            PyErr_Format(PyExc_ValueError, "%s[%zd].ah is closed", f->what, i);
            return -1;
        }
        c->wr.ud.ah = ((pyrdma_obj *)ah)->h;
        c->wr.ud.remote_qpn = d->remote_qpn;
        c->wr.ud.remote_qkey = d->remote_qkey;
    }
    if (i > 0)
        ((struct pyrdma_send_wr *)f->b->wrs)[i - 1].next = c;
    return 0;
}

static int
fill_recv(PyObject *w, Py_ssize_t i, void *arg)
{
    struct fill *f = arg;
    struct pyrdma_recv_wr *c = (struct pyrdma_recv_wr *)f->b->wrs + i;
    const struct pyrdma_py_recv_wr *d = pyrdma_struct_data(w);
    int nsge;

    f->b->src[i] = w;
    c->next = NULL;
    nsge = fill_sges(f, w, i, &c->sg_list);
    if (nsge < 0)
        return -1;
    c->num_sge = nsge;
    c->wr_id = d->wr_id;
    if (i > 0)
        ((struct pyrdma_recv_wr *)f->b->wrs)[i - 1].next = c;
    return 0;
}

static void
wrbuf_free(struct wrbuf *b)
{
    if (b->heap) {
        PyMem_Free(b->wrs);
        PyMem_Free(b->sges);
        PyMem_Free(b->src);
    }
    b->wrs = NULL;
    b->sges = NULL;
    b->src = NULL;
    b->heap = 0;
}

/* Convert arg into b.  stack_* are small buffers (may be NULL to force the
   heap).  Return 0 or -1 with an error set (b is then freed). */
static int
convert(pyrdma_state *S, PyObject *arg, int send, int qp_type,
        const char *what, struct wrbuf *b, void *stack_wr,
        struct pyrdma_sge *stack_sge, PyObject **stack_src)
{
    PyTypeObject *tp = send ? S->send_wr : S->recv_wr;
    size_t wsz = send ? sizeof(struct pyrdma_send_wr)
                      : sizeof(struct pyrdma_recv_wr);
    struct counts c = {0, S->sge, what};
    struct fill f;
    Py_ssize_t n;

    memset(b, 0, sizeof(*b));
    n = walk(arg, tp, what, count_fn, &c);
    if (n < 0)
        return -1;
    if (n == 0) {
        PyErr_Format(PyExc_ValueError, "%s: no work request given", what);
        return -1;
    }
    if (stack_wr != NULL && n <= SMALL_WR && c.nsge <= SMALL_SGE) {
        b->wrs = stack_wr;
        b->sges = stack_sge;
        b->src = stack_src;
    }
    else {
        b->heap = 1;
        b->wrs = PyMem_Malloc(wsz * (size_t)n);
        b->sges = PyMem_Malloc(sizeof(struct pyrdma_sge) *
                               (size_t)(c.nsge ? c.nsge : 1));
        b->src = PyMem_Malloc(sizeof(PyObject *) * (size_t)n);
        if (b->wrs == NULL || b->sges == NULL || b->src == NULL) {
            wrbuf_free(b);
            PyErr_NoMemory();
            return -1;
        }
    }
    b->n = n;
    b->nsge = c.nsge;
    f.b = b;
    f.S = S;
    f.send = send;
    f.qp_type = qp_type;
    f.sge_at = 0;
    f.what = what;
    /* The lists may not change between the passes: no Python code runs. */
    if (walk(arg, tp, what, send ? fill_send : fill_recv, &f) < 0) {
        wrbuf_free(b);
        return -1;
    }
    return 0;
}

/* The QP states (IBV_QPS_*) by number, for messages. */
static const char *const qp_states[] = {"RESET", "INIT", "RTR", "RTS", "SQD",
                                        "SQE", "ERR"};

/* Why a post to qp (NULL: to an SRQ) failed with err, as ": ..." in msg,
   or "" when nothing more is known: a QP in a state that takes no such
   WR, or a full queue.  Cold path: it may ask the provider. */
static void
post_reason(pyrdma_QP *qp, int send, int err, char *msg, size_t len)
{
    struct pyrdma_qp_attr a;
    struct pyrdma_status st = {0};

    msg[0] = '\0';
    if (qp == NULL) {
        if (err == ENOMEM)
            PyOS_snprintf(msg, len, ": the SRQ is full");
        return;
    }
    memset(&a, 0, sizeof(a));
    if (qp->o.prov->query_qp(qp->o.h, &a, PYRDMA_QP_STATE, &st) == 0 &&
        a.qp_state >= 0 && a.qp_state <= 2 && (send || a.qp_state == 0)) {
        PyOS_snprintf(msg, len, ": the QP is in the %s state (%s needs %s)",
                      qp_states[a.qp_state], send ? "post_send" : "post_recv",
                      send ? "RTS" : "INIT or later");
        return;
    }
    if (err != ENOMEM)
        return;
    if (!send) {
        PyOS_snprintf(msg, len, ": the receive queue is full (max_recv_wr "
                      "%u)", qp->cap.max_recv_wr);
        return;
    }
    PyOS_snprintf(msg, len, ": the send queue is full (max_send_wr %u; a "
                  "WR holds its slot until its completion is polled, an "
                  "unsignaled one until a later signaled WR's is%s)",
                  qp->cap.max_send_wr, qp->sq_sig_all ?
                  "; this QP has sq_sig_all=1, the default: every WR is "
                  "signaled" : "");
}

/* Raise WRError for WR index of n rejected with err by func (on qp,
   NULL for an SRQ); return NULL. */
static PyObject *
raise_wr(pyrdma_state *S, int err, const char *func, Py_ssize_t index,
         Py_ssize_t n, PyObject *wr, pyrdma_QP *qp, int send)
{
    char why[256], msg[320];
    PyObject *exc;

    post_reason(qp, send, err, why, sizeof(why));
    PyOS_snprintf(msg, sizeof(msg), "work request %zd of %zd rejected%s",
                  index, n, why);
    exc = PyObject_CallFunction(S->WRError, "issnO", err, func, msg, index,
                                wr ? wr : Py_None);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* A prepared batch (SendBatch / RecvBatch). */
typedef struct {
    PyObject_HEAD
    struct wrbuf b;            /* converted WRs (heap) */
    PyObject *wrs;             /* tuple: the Python WRs, kept alive */
    PyObject **ahs;            /* per WR: its AH object (send, UD) or NULL */
    int send;                  /* 1: SendBatch */
    int for_ud;                /* converted with UD address fields */
} pyrdma_Batch;

/* Refresh the AH handles of a UD batch; return 0 or -1 (closed AH). */
static int
batch_refresh_ah(pyrdma_Batch *bt)
{
    Py_ssize_t i;
    struct pyrdma_send_wr *w = bt->b.wrs;

    for (i = 0; i < bt->b.n; i++) {
        pyrdma_obj *ah = (pyrdma_obj *)bt->ahs[i];
        if (ah == NULL)
            continue;
        if (ah->h == NULL) {
            PyErr_Format(PyExc_ValueError, "SendBatch[%zd].ah is closed", i);
            return -1;
        }
        w[i].wr.ud.ah = ah->h;
    }
    return 0;
}

/* The first n WRs of b were posted: a type 2 window they bound has the
   WR's rkey now. */
static void
note_binds(struct wrbuf *b, Py_ssize_t n)
{
    Py_ssize_t i;

    for (i = 0; b->binds && i < n; i++) {
        struct pyrdma_send_wr *c = (struct pyrdma_send_wr *)b->wrs + i;
        if (c->opcode == PYRDMA_WR_BIND_MW) {
            pyrdma_MW *mw = (pyrdma_MW *)slot_obj(b->src[i], PYRDMA_WR_MW);
            mw->rkey = c->bind_mw.rkey;
            mw->o.prov->mw_rekeyed(mw->o.h, c->bind_mw.rkey);
        }
    }
}

PyObject *
pyrdma_post_send(pyrdma_QP *qp, PyObject *arg)
{
    pyrdma_state *S = qp->o.state;
    struct pyrdma_send_wr swr[SMALL_WR];
    struct pyrdma_sge ssge[SMALL_SGE];
    PyObject *ssrc[SMALL_WR];
    struct pyrdma_send_wr *bad = NULL;
    struct wrbuf b;
    int rc;

    if (!pyrdma_obj_check(&qp->o))
        return NULL;
    if (Py_IS_TYPE(arg, S->SendBatchType)) {
        pyrdma_Batch *bt = (pyrdma_Batch *)arg;
        if (bt->for_ud != (qp->qp_type == PYRDMA_QPT_UD)) {
            PyErr_SetString(PyExc_ValueError, "post_send(): the SendBatch "
                            "was prepared for another QP type");
            return NULL;
        }
        if (bt->for_ud && batch_refresh_ah(bt) < 0)
            return NULL;
        rc = qp->o.prov->post_send(qp->o.h, bt->b.wrs, &bad);
        if (rc)
            return raise_wr(S, rc, "ibv_post_send",
                            bad ? bad - (struct pyrdma_send_wr *)bt->b.wrs : 0,
                            bt->b.n,
                            bad ? bt->b.src[bad - (struct pyrdma_send_wr *)
                                            bt->b.wrs] : NULL, qp, 1);
        Py_RETURN_NONE;
    }
    if (convert(S, arg, 1, qp->qp_type, "send_wr", &b, swr, ssge, ssrc) < 0)
        return NULL;
    rc = qp->o.prov->post_send(qp->o.h, b.wrs, &bad);
    if (rc) {
        Py_ssize_t idx = bad ? bad - (struct pyrdma_send_wr *)b.wrs : 0;
        if (idx < 0 || idx >= b.n)
            idx = 0;
        raise_wr(S, rc, "ibv_post_send", idx, b.n, b.src[idx], qp, 1);
        note_binds(&b, idx);
        wrbuf_free(&b);
        return NULL;
    }
    note_binds(&b, b.n);
    wrbuf_free(&b);
    Py_RETURN_NONE;
}

PyObject *
pyrdma_post_recv(pyrdma_obj *t, PyObject *arg, int srq)
{
    pyrdma_state *S = t->state;
    struct pyrdma_recv_wr swr[SMALL_WR];
    struct pyrdma_sge ssge[SMALL_SGE];
    PyObject *ssrc[SMALL_WR];
    struct pyrdma_recv_wr *bad = NULL, *wrs;
    const char *func = srq ? "ibv_post_srq_recv" : "ibv_post_recv";
    struct wrbuf b;
    Py_ssize_t n;
    PyObject **src;
    int rc;

    if (!pyrdma_obj_check(t))
        return NULL;
    if (Py_IS_TYPE(arg, S->RecvBatchType)) {
        pyrdma_Batch *bt = (pyrdma_Batch *)arg;
        wrs = bt->b.wrs;
        n = bt->b.n;
        src = bt->b.src;
        b.heap = 0;
    }
    else {
        if (convert(S, arg, 0, 0, "recv_wr", &b, swr, ssge, ssrc) < 0)
            return NULL;
        wrs = b.wrs;
        n = b.n;
        src = b.src;
    }
    rc = srq ? t->prov->post_srq_recv(t->h, wrs, &bad)
             : t->prov->post_recv(t->h, wrs, &bad);
    if (rc) {
        Py_ssize_t idx = bad ? bad - wrs : 0;
        if (idx < 0 || idx >= n)
            idx = 0;
        raise_wr(S, rc, func, idx, n, src[idx],
                 srq ? NULL : (pyrdma_QP *)t, 0);
        wrbuf_free(&b);
        return NULL;
    }
    wrbuf_free(&b);
    Py_RETURN_NONE;
}

PyObject *
pyrdma_post_via(pyrdma_state *S, PyObject *arg, int send, void *target,
                pyrdma_post_fn fn, const char *func)
{
    struct pyrdma_send_wr swr[SMALL_WR];     /* the larger of the two */
    struct pyrdma_sge ssge[SMALL_SGE];
    PyObject *ssrc[SMALL_WR];
    size_t wsz = send ? sizeof(struct pyrdma_send_wr)
                      : sizeof(struct pyrdma_recv_wr);
    void *bad = NULL;
    char why[400], msg[480];
    struct wrbuf b;
    int rc;

    if (Py_IS_TYPE(arg, send ? S->SendBatchType : S->RecvBatchType)) {
        pyrdma_Batch *bt = (pyrdma_Batch *)arg;
        if (bt->for_ud) {
            PyErr_Format(PyExc_ValueError, "%s(): the SendBatch was "
                         "prepared for UD", func);
            return NULL;
        }
        b = bt->b;          /* borrowed: the batch keeps it */
        b.heap = 0;
    }
    else if (convert(S, arg, send, PYRDMA_QPT_RC,
                     send ? "send_wr" : "recv_wr", &b, swr, ssge, ssrc) < 0)
        return NULL;
    rc = fn(target, b.wrs, &bad, why, sizeof(why));
    if (rc) {
        Py_ssize_t idx = bad ? (Py_ssize_t)(((char *)bad - (char *)b.wrs) /
                                            (Py_ssize_t)wsz) : 0;
        PyObject *exc;
        if (idx < 0 || idx >= b.n)
            idx = 0;
        PyOS_snprintf(msg, sizeof(msg), "work request %zd of %zd rejected%s"
                      "%s (none was posted)", idx, b.n, why[0] ? ": " : "",
                      why);
        exc = PyObject_CallFunction(S->WRError, "issnO", rc, func, msg, idx,
                                    b.src[idx]);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        wrbuf_free(&b);
        return NULL;
    }
    wrbuf_free(&b);
    Py_RETURN_NONE;
}

/* ---- SendBatch / RecvBatch ---- */

static PyObject *
batch_new(PyTypeObject *tp, PyObject *args, PyObject *kw, int send)
{
    static char *kwlist[] = {"wrs", "qp_type", NULL};
    pyrdma_state *S = pyrdma_get_state_by_type(tp);
    PyObject *wrs, *tuple = NULL;
    int qp_type = 0;
    pyrdma_Batch *bt;
    Py_ssize_t i;

    if (S == NULL)
        return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, send ? "O|i:SendBatch" :
                                     "O|i:RecvBatch", kwlist, &wrs, &qp_type))
        return NULL;
    bt = (pyrdma_Batch *)tp->tp_alloc(tp, 0);
    if (bt == NULL)
        return NULL;
    bt->send = send;
    if (send) {
        /* UD address fields are laid out when any WR carries an AH. */
        Py_ssize_t k, n = 1;
        PyObject *seq = (PyList_Check(wrs) || PyTuple_Check(wrs)) ? wrs : NULL;
        if (seq)
            n = PySequence_Fast_GET_SIZE(seq);
        for (k = 0; k < n && !bt->for_ud; k++) {
            PyObject *w = seq ? PySequence_Fast_GET_ITEM(seq, k) : wrs;
            if (PyObject_TypeCheck(w, S->send_wr) &&
                pyrdma_struct_slots(w)[PYRDMA_WR_AH] != NULL)
                bt->for_ud = 1;
        }
        if (qp_type)
            bt->for_ud = qp_type == PYRDMA_QPT_UD;
    }
    if (convert(S, wrs, send, bt->for_ud ? PYRDMA_QPT_UD : 0,
                send ? "SendBatch" : "RecvBatch", &bt->b, NULL, NULL,
                NULL) < 0) {
        Py_DECREF(bt);
        return NULL;
    }
    if (bt->b.binds) {
        PyErr_SetString(PyExc_ValueError, "SendBatch: post IBV_WR_BIND_MW "
                        "work requests with QP.post_send(), not in a batch");
        Py_DECREF(bt);
        return NULL;
    }
    /* Keep the source WRs (for errors) and their AHs alive. */
    tuple = PyTuple_New(bt->b.n);
    bt->ahs = PyMem_Calloc((size_t)bt->b.n, sizeof(PyObject *));
    if (tuple == NULL || bt->ahs == NULL) {
        Py_XDECREF(tuple);
        Py_DECREF(bt);
        return PyErr_NoMemory();
    }
    for (i = 0; i < bt->b.n; i++) {
        PyObject *w = bt->b.src[i];
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(w));
        if (bt->for_ud)
            bt->ahs[i] = Py_XNewRef(pyrdma_struct_slots(w)[PYRDMA_WR_AH]);
    }
    bt->wrs = tuple;
    return (PyObject *)bt;
}

static PyObject *
sendbatch_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    return batch_new(tp, args, kw, 1);
}

static PyObject *
recvbatch_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    return batch_new(tp, args, kw, 0);
}

static int
batch_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_Batch *bt = (pyrdma_Batch *)op;
    Py_ssize_t i;

    Py_VISIT(Py_TYPE(op));
    Py_VISIT(bt->wrs);
    if (bt->ahs)
        for (i = 0; i < bt->b.n; i++)
            Py_VISIT(bt->ahs[i]);
    return 0;
}

static int
batch_clear(PyObject *op)
{
    pyrdma_Batch *bt = (pyrdma_Batch *)op;
    Py_ssize_t i;

    Py_CLEAR(bt->wrs);
    if (bt->ahs)
        for (i = 0; i < bt->b.n; i++)
            Py_CLEAR(bt->ahs[i]);
    return 0;
}

static void
batch_dealloc(PyObject *op)
{
    pyrdma_Batch *bt = (pyrdma_Batch *)op;
    PyTypeObject *tp = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    batch_clear(op);
    PyMem_Free(bt->ahs);
    wrbuf_free(&bt->b);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static Py_ssize_t
batch_len(PyObject *op)
{
    return ((pyrdma_Batch *)op)->b.n;
}

static PyObject *
batch_item(PyObject *op, Py_ssize_t i)
{
    pyrdma_Batch *bt = (pyrdma_Batch *)op;
    if (i < 0 || i >= bt->b.n) {
        PyErr_SetString(PyExc_IndexError, "batch index out of range");
        return NULL;
    }
    return Py_NewRef(PyTuple_GET_ITEM(bt->wrs, i));
}

static PyType_Slot sendbatch_slots[] = {
    {Py_tp_doc, "SendBatch(wrs, qp_type=0)\n--\n\nSend work requests "
                "converted once, to post many times with QP.post_send(batch) "
                "at no conversion cost.  Later changes to the send_wr "
                "objects are not seen.  UD batches (any WR with an ah, or "
                "qp_type=IBV_QPT_UD) keep their AHs alive."},
    {Py_tp_new, sendbatch_new},
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_traverse, batch_traverse},
    {Py_tp_clear, batch_clear},
    {Py_sq_length, batch_len},
    {Py_sq_item, batch_item},
    {0, NULL},
};

static PyType_Slot recvbatch_slots[] = {
    {Py_tp_doc, "RecvBatch(wrs)\n--\n\nReceive work requests converted "
                "once, to post many times with QP.post_recv(batch) or "
                "SRQ.post_recv(batch)."},
    {Py_tp_new, recvbatch_new},
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_traverse, batch_traverse},
    {Py_tp_clear, batch_clear},
    {Py_sq_length, batch_len},
    {Py_sq_item, batch_item},
    {0, NULL},
};

/* ---- WCArray ---- */


static PyObject *
wca_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t n = 64;
    pyrdma_WCArray *a;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:WCArray", kwlist, &n))
        return NULL;
    if (n < 1 || n > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "WCArray capacity must be in "
                     "1..16777216, not %zd", n);
        return NULL;
    }
    a = (pyrdma_WCArray *)tp->tp_alloc(tp, 0);
    if (a == NULL)
        return NULL;
    a->state = pyrdma_get_state_by_type(tp);
    a->wc = PyMem_Calloc((size_t)n, sizeof(struct pyrdma_wc));
    if (a->state == NULL || a->wc == NULL) {
        Py_DECREF(a);
        return a->state ? PyErr_NoMemory() : NULL;
    }
    a->capacity = n;
    return (PyObject *)a;
}

static void
wca_dealloc(PyObject *op)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    PyTypeObject *tp = Py_TYPE(op);
    PyMem_Free(a->wc);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static Py_ssize_t
wca_len(PyObject *op)
{
    return ((pyrdma_WCArray *)op)->count;
}

static PyObject *
wca_item(PyObject *op, Py_ssize_t i)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    if (i < 0 || i >= a->count) {
        PyErr_SetString(PyExc_IndexError, "WCArray index out of range "
                        "(only the entries of the last poll are valid)");
        return NULL;
    }
    return pyrdma_struct_new(a->state->wc, &a->wc[i], sizeof(a->wc[i]));
}

/* Index argument for the accessors. */
static int
wca_index(pyrdma_WCArray *a, PyObject *arg, Py_ssize_t *i)
{
    *i = PyLong_AsSsize_t(arg);
    if (*i == -1 && PyErr_Occurred())
        return -1;
    if (*i < 0 || *i >= a->count) {
        PyErr_SetString(PyExc_IndexError, "WCArray index out of range");
        return -1;
    }
    return 0;
}

static PyObject *
wca_wr_id(PyObject *op, PyObject *arg)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    Py_ssize_t i;
    if (wca_index(a, arg, &i) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(a->wc[i].wr_id);
}

static PyObject *
wca_status(PyObject *op, PyObject *arg)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    Py_ssize_t i;
    if (wca_index(a, arg, &i) < 0)
        return NULL;
    return PyLong_FromLong(a->wc[i].status);
}

static PyObject *
wca_byte_len(PyObject *op, PyObject *arg)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    Py_ssize_t i;
    if (wca_index(a, arg, &i) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(a->wc[i].byte_len);
}

static PyObject *
wca_first_error(PyObject *op, PyObject *noargs)
{
    pyrdma_WCArray *a = (pyrdma_WCArray *)op;
    Py_ssize_t i;
    (void)noargs;
    for (i = 0; i < a->count; i++)
        if (a->wc[i].status != 0)
            return PyLong_FromSsize_t(i);
    Py_RETURN_NONE;
}

static PyObject *
wca_get_capacity(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(((pyrdma_WCArray *)op)->capacity);
}

static double
mono_now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Does the interpreter have another thread (that may want the GIL)? */
static int
other_threads(void)
{
    PyThreadState *me = PyThreadState_Get();
    PyThreadState *t = PyInterpreterState_ThreadHead(
        PyThreadState_GetInterpreter(me));

    return t != NULL && (t != me || PyThreadState_Next(t) != NULL);
}

/* Busy-poll cq until *got >= min (entries land at a->wc[*got..n)).
   Between slices of polls: Ctrl-C, the timeout, and a short GIL release
   every millisecond (when there are other threads) so they run (a close() from one of them is
   then seen here).  Return 0 (done or timed out) or -1 with an error. */
static int
spin_poll(pyrdma_obj *cq, pyrdma_WCArray *a, int n, int min, double timeout,
          int *got)
{
    double start = 0, last_drop = 0, now;

    for (;;) {
        int k;

        for (k = 0; k < 64; k++) {
            int r = cq->prov->poll_cq(cq->h, n - *got, a->wc + *got);
            if (r < 0) {
                pyrdma_raise_sys(cq->state, -r, "ibv_poll_cq", "");
                return -1;
            }
            *got += r;
            if (*got >= min)
                return 0;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        now = mono_now();
        if (start == 0)         /* no clock read for a quick answer */
            start = last_drop = now;
        if (timeout >= 0 && now - start >= timeout)
            return 0;
        if (now - last_drop >= 1e-3 && other_threads()) {
            /* A bare release and re-take would starve a waiting thread:
               CPython only forces a switch when no switch happened for
               its interval, and each re-take counts as one.  A short
               sleep without the GIL lets the waiter have it. */
            struct timespec pause = {0, 20000};
            Py_BEGIN_ALLOW_THREADS
            nanosleep(&pause, NULL);
            Py_END_ALLOW_THREADS
            last_drop = mono_now();
            if (!pyrdma_obj_check(cq))
                return -1;
        }
    }
}

PyObject *
pyrdma_cq_poll_into(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    static const char *const names[] = {"wcs", "n", "min", "timeout", NULL};
    pyrdma_obj *cq = (pyrdma_obj *)op;
    PyObject *av[4];
    Py_ssize_t n = -1, min = 0;
    double timeout = -1;
    pyrdma_WCArray *a;
    int got;

    if (kwnames == NULL && nargs >= 1 && nargs <= 4) {   /* hot path */
        Py_ssize_t i;
        for (i = 0; i < 4; i++)
            av[i] = i < nargs ? args[i] : NULL;
    }
    else if (pyrdma_fast_args("poll_into", args, nargs, kwnames, names, 1,
                              av) < 0)
        return NULL;
    if (av[1] != NULL && av[1] != Py_None) {
        n = PyLong_AsSsize_t(av[1]);
        if (n == -1 && PyErr_Occurred())
            return NULL;
    }
    if (av[2] != NULL) {
        min = PyLong_AsSsize_t(av[2]);
        if (min == -1 && PyErr_Occurred())
            return NULL;
        if (min < 0) {
            PyErr_SetString(PyExc_ValueError, "poll_into(): min must be >= 0");
            return NULL;
        }
    }
    if (av[3] != NULL && pyrdma_timeout_arg(av[3], &timeout) < 0)
        return NULL;
    if (!Py_IS_TYPE(av[0], cq->state->WCArrayType)) {
        PyErr_Format(PyExc_TypeError, "poll_into() needs an ibv.WCArray, not "
                     "%.100s", Py_TYPE(av[0])->tp_name);
        return NULL;
    }
    if (!pyrdma_obj_check(cq))
        return NULL;
    a = (pyrdma_WCArray *)av[0];
    if (n < 0 || n > a->capacity)
        n = a->capacity;
    if (n > INT32_MAX)
        n = INT32_MAX;
    if (min > n) {
        PyErr_Format(PyExc_ValueError, "poll_into(): min=%zd is more than "
                     "the %zd entries it may poll", min, n);
        return NULL;
    }
    got = cq->prov->poll_cq(cq->h, (int)n, a->wc);
    if (got < 0) {
        a->count = 0;
        return pyrdma_raise_sys(cq->state, -got, "ibv_poll_cq", "");
    }
    if (got < min && spin_poll(cq, a, (int)n, (int)min, timeout, &got) < 0) {
        a->count = got;     /* what was polled stays readable */
        return NULL;
    }
    a->count = got;
    return PyLong_FromLong(got);
}

static PyMethodDef wca_methods[] = {
    {"wr_id", wca_wr_id, METH_O,
     "wr_id($self, i, /)\n--\n\nwr_id of entry i (no wc object made)."},
    {"status", wca_status, METH_O,
     "status($self, i, /)\n--\n\nstatus of entry i."},
    {"byte_len", wca_byte_len, METH_O,
     "byte_len($self, i, /)\n--\n\nbyte_len of entry i."},
    {"first_error", wca_first_error, METH_NOARGS,
     "first_error($self, /)\n--\n\nIndex of the first entry whose status is "
     "not IBV_WC_SUCCESS, or None."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef wca_getset[] = {
    {"capacity", wca_get_capacity, NULL, "Number of entries.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot wca_slots[] = {
    {Py_tp_doc, "WCArray(capacity=64)\n--\n\nA reusable array of work "
                "completions for CQ.poll_into(); len() is the number the "
                "last poll returned, [i] makes an ibv.wc."},
    {Py_tp_new, wca_new},
    {Py_tp_dealloc, wca_dealloc},
    {Py_tp_methods, wca_methods},
    {Py_tp_getset, wca_getset},
    {Py_sq_length, wca_len},
    {Py_sq_item, wca_item},
    {0, NULL},
};

static PyTypeObject *
add_type(PyObject *module, const char *name, int size, PyType_Slot *slots,
         int gc)
{
    PyType_Spec spec = {
        .name = name,
        .basicsize = size,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
                 (gc ? Py_TPFLAGS_HAVE_GC : 0),
        .slots = slots,
    };
    PyTypeObject *tp = (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec,
                                                                NULL);
    if (tp == NULL)
        return NULL;
    if (PyModule_AddType(module, tp) < 0) {
        Py_DECREF(tp);
        return NULL;
    }
    return tp;
}

int
pyrdma_wr_init(PyObject *module, pyrdma_state *st)
{
    st->SendBatchType = add_type(module, "rdma.ibverbs.SendBatch",
                                 sizeof(pyrdma_Batch), sendbatch_slots, 1);
    st->RecvBatchType = add_type(module, "rdma.ibverbs.RecvBatch",
                                 sizeof(pyrdma_Batch), recvbatch_slots, 1);
    st->WCArrayType = add_type(module, "rdma.ibverbs.WCArray",
                               sizeof(pyrdma_WCArray), wca_slots, 0);
    if (!st->SendBatchType || !st->RecvBatchType || !st->WCArrayType)
        return -1;
    return 0;
}
