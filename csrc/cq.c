/* cq.c - rdma.ibverbs.CQ (completion queue) and CompChannel. */
#include <errno.h>

#include "rdma.h"

/* ---- CompChannel ---- */

static int
cc_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    pyrdma_CompChannel *cc = (pyrdma_CompChannel *)o;
    int fd = cc->fd;
    cc->fd = -1;
    if (o->prov->destroy_comp_channel(o->h, st) < 0) {
        cc->fd = fd;            /* refused: still open */
        return -1;
    }
    return 0;
}

static const struct pyrdma_objkind cc_kind = {
    "CompChannel", PYRDMA_RANK_CC, cc_destroy, NULL,
};

PyObject *
pyrdma_cc_new(pyrdma_Context *ctx)
{
    struct pyrdma_status st = {0};
    pyrdma_CompChannel *cc;
    void *h;

    if (!pyrdma_obj_check(&ctx->o))
        return NULL;
    cc = (pyrdma_CompChannel *)pyrdma_obj_new(ctx->o.state->CompChannelType,
                                              &cc_kind, &ctx->o);
    if (cc == NULL)
        return NULL;
    cc->fd = -1;
    if (ctx->o.prov->create_comp_channel(ctx->o.h, &h, &cc->fd, &st) < 0) {
        Py_DECREF(cc);
        return pyrdma_raise_status(ctx->o.state, &st);
    }
    cc->o.h = h;
    pyrdma_obj_link(&cc->o, 0, &ctx->o);
    return (PyObject *)cc;
}

static PyObject *
cc_fileno(PyObject *op, PyObject *noargs)
{
    pyrdma_CompChannel *cc = (pyrdma_CompChannel *)op;
    (void)noargs;
    if (!pyrdma_obj_check(&cc->o))
        return NULL;
    return PyLong_FromLong(cc->fd);
}

/* Read one pending event without blocking; return a new reference to the
   CQ, None if there is none, NULL with an error. */
static PyObject *
cc_try_event(pyrdma_CompChannel *cc)
{
    struct pyrdma_status st = {0};
    void *cq_context = NULL;
    pyrdma_obj *cq;
    int rc;

    rc = cc->o.prov->get_cq_event(cc->o.h, &cq_context, &st);
    if (rc < 0)
        return pyrdma_raise_status(cc->o.state, &st);
    if (rc == 0)
        Py_RETURN_NONE;
    /* The context we gave is the CQ object: accept it only if it is one of
       this channel's live CQs. */
    cq = pyrdma_find_child(&cc->o, cq_context, 1);
    if (cq == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "completion event for a CQ that "
                        "is not attached to this channel");
        return NULL;
    }
    ((pyrdma_CQ *)cq)->unacked++;
    return Py_NewRef((PyObject *)cq);
}

static PyObject *
cc_get_cq_event(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    pyrdma_CompChannel *cc = (pyrdma_CompChannel *)op;
    PyObject *tobj = Py_None, *cq;
    double timeout;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get_cq_event", kwlist,
                                     &tobj))
        return NULL;
    if (pyrdma_timeout_arg(tobj, &timeout) < 0)
        return NULL;
    for (;;) {
        if (!pyrdma_obj_check(&cc->o))
            return NULL;
        cq = cc_try_event(cc);
        if (cq != Py_None)
            return cq;
        Py_DECREF(cq);
        rc = pyrdma_wait_fd(&cc->o, &cc->fd, &timeout);
        if (rc < 0)
            return NULL;
        if (rc == 0) {
            /* Timed out: one last non-blocking look, then None. */
            if (!pyrdma_obj_check(&cc->o))
                return NULL;
            return cc_try_event(cc);
        }
    }
}

static PyObject *
cc_register_poll(PyObject *op, PyObject *pollobj)
{
    pyrdma_CompChannel *cc = (pyrdma_CompChannel *)op;
    if (!pyrdma_obj_check(&cc->o))
        return NULL;
    /* select.POLLIN is 1 on Linux. */
    return PyObject_CallMethod(pollobj, "register", "ii", cc->fd, 1);
}

static PyObject *
cc_check_poll(PyObject *op, PyObject *event)
{
    pyrdma_CompChannel *cc = (pyrdma_CompChannel *)op;
    struct pyrdma_status st = {0};
    PyObject *cq, *fdobj;
    long fd;
    int rc;

    if (!pyrdma_obj_check(&cc->o))
        return NULL;
    if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) < 1) {
        PyErr_SetString(PyExc_TypeError, "check_poll() takes an (fd, events) "
                        "tuple from poll()");
        return NULL;
    }
    fdobj = PyTuple_GET_ITEM(event, 0);
    fd = PyLong_AsLong(fdobj);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd != cc->fd)
        Py_RETURN_NONE;
    cq = cc_try_event(cc);
    if (cq == NULL || cq == Py_None)
        return cq;
    /* python-rdma semantics: acknowledge and re-arm, return the CQ. */
    {
        pyrdma_CQ *c = (pyrdma_CQ *)cq;
        cc->o.prov->ack_cq_events(c->o.h, c->unacked);
        c->unacked = 0;
        rc = cc->o.prov->req_notify_cq(c->o.h, 0);
        if (rc) {
            Py_DECREF(cq);
            pyrdma_fail(&st, rc, "ibv_req_notify_cq", "");
            return pyrdma_raise_status(cc->o.state, &st);
        }
    }
    return cq;
}

static PyMethodDef cc_methods[] = {
    {"fileno", cc_fileno, METH_NOARGS,
     "fileno($self, /)\n--\n\nThe channel's file descriptor (readable when "
     "an event is pending); works with select, poll, epoll and asyncio."},
    {"get_cq_event", (PyCFunction)(void (*)(void))cc_get_cq_event,
     METH_VARARGS | METH_KEYWORDS,
     "get_cq_event($self, /, timeout=None)\n--\n\nWait for a completion "
     "event (ibv_get_cq_event) and return its CQ, or None after timeout "
     "seconds.  Releases the GIL; Ctrl-C interrupts.  Acknowledge with "
     "CQ.ack_events() (closing the CQ acknowledges the rest)."},
    {"register_poll", cc_register_poll, METH_O,
     "register_poll($self, poll, /)\n--\n\nRegister the channel's fd for "
     "POLLIN with a select.poll() object."},
    {"check_poll", cc_check_poll, METH_O,
     "check_poll($self, event, /)\n--\n\nGiven one (fd, events) result of "
     "poll(): if it is this channel, read the event, acknowledge it, re-arm "
     "the CQ and return the CQ; else return None."},
    {NULL, NULL, 0, NULL},
};

/* ---- CQ ---- */

static int
cq_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    pyrdma_CQ *cq = (pyrdma_CQ *)o;

    /* ibv_destroy_cq waits for every event to be acknowledged. */
    if (cq->unacked) {
        o->prov->ack_cq_events(o->h, cq->unacked);
        cq->unacked = 0;
    }
    return o->prov->destroy_cq(o->h, st);
}

static const struct pyrdma_objkind cq_kind = {
    "CQ", PYRDMA_RANK_CQ, cq_destroy, NULL,
};

PyObject *
pyrdma_cq_new(pyrdma_Context *ctx, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"nelems", "comp_channel", "vec", NULL};
    pyrdma_state *S = ctx->o.state;
    struct pyrdma_status st = {0};
    PyObject *ccobj = Py_None;
    pyrdma_CompChannel *cc = NULL;
    struct pyrdma_uint n = {"cq", "nelems", INT32_MAX, 100},
                       v = {"cq", "vec", INT32_MAX, 0};
    int nelems, vec;
    pyrdma_CQ *cq;
    void *h;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&OO&:cq", kwlist,
                                     pyrdma_uint_conv, &n, &ccobj,
                                     pyrdma_uint_conv, &v))
        return NULL;
    nelems = (int)n.v;
    vec = (int)v.v;
    if (!pyrdma_obj_check(&ctx->o))
        return NULL;
    if (nelems < 1) {
        PyErr_Format(PyExc_ValueError, "cq(): nelems must be >= 1, not %d",
                     nelems);
        return NULL;
    }
    if (ccobj != Py_None) {
        if (!PyObject_TypeCheck(ccobj, S->CompChannelType)) {
            PyErr_Format(PyExc_TypeError, "cq(): comp_channel must be a "
                         "CompChannel or None, not %.100s",
                         Py_TYPE(ccobj)->tp_name);
            return NULL;
        }
        cc = (pyrdma_CompChannel *)ccobj;
        if (!pyrdma_obj_check(&cc->o))
            return NULL;
        if (cc->o.parents[0] != (PyObject *)ctx) {
            PyErr_SetString(PyExc_ValueError, "cq(): the comp_channel "
                            "belongs to another Context");
            return NULL;
        }
    }
    cq = (pyrdma_CQ *)pyrdma_obj_new(S->CQType, &cq_kind, &ctx->o);
    if (cq == NULL)
        return NULL;
    if (ctx->o.prov->create_cq(ctx->o.h, nelems, cq, cc ? cc->o.h : NULL, vec,
                               &h, &cq->cqe, &st) < 0) {
        Py_DECREF(cq);
        return pyrdma_raise_status(S, &st);
    }
    cq->o.h = h;
    pyrdma_obj_link(&cq->o, 0, &ctx->o);
    if (cc != NULL)
        pyrdma_obj_link(&cq->o, 1, &cc->o);
    return (PyObject *)cq;
}

/* Append n completions wc[] to list as ibv.wc objects of type tp;
   return 0, or -1 with an exception. */
static int
wc_append(PyTypeObject *tp, PyObject *list, const struct pyrdma_wc *wc,
          int n)
{
    int i;
    for (i = 0; i < n; i++) {
        PyObject *w = pyrdma_struct_new(tp, &wc[i], sizeof(wc[i]));
        if (w == NULL || PyList_Append(list, w) < 0) {
            Py_XDECREF(w);
            return -1;
        }
        Py_DECREF(w);
    }
    return 0;
}

PyObject *
pyrdma_poll_list(pyrdma_obj *o, pyrdma_poll_fn poll, void *arg,
                 Py_ssize_t n)
{
    struct pyrdma_wc wc[32];
    PyObject *list = PyList_New(0);

    if (list == NULL)
        return NULL;
    while (n != 0) {
        int want = (n < 0 || n > 32) ? 32 : (int)n, got;
        got = poll(arg, want, wc);
        if (got < 0) {
            Py_DECREF(list);
            return pyrdma_raise_sys(o->state, -got, "ibv_poll_cq", "");
        }
        if (wc_append(o->state->wc, list, wc, got) < 0) {
            /* The completions already polled are lost with the list:
               only memory exhaustion gets here. */
            Py_DECREF(list);
            return NULL;
        }
        if (n > 0)
            n -= got;
        if (got < want)
            break;
    }
    return list;
}

/* Poll up to n (n < 0: all available) completions into a new list.
   METH_FASTCALL: this is the hot path of Python polling loops. */
static PyObject *
cq_poll(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
        PyObject *kwnames)
{
    pyrdma_CQ *cq = (pyrdma_CQ *)op;
    Py_ssize_t n = -1;
    PyObject *nobj = NULL;

    if (nargs > 1 || (kwnames && (nargs + PyTuple_GET_SIZE(kwnames) > 1))) {
        PyErr_SetString(PyExc_TypeError, "poll() takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1)
        nobj = args[0];
    else if (kwnames && PyTuple_GET_SIZE(kwnames) == 1) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) ||
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                             "n") != 0) {
            PyErr_Format(PyExc_TypeError, "poll() got an unexpected keyword "
                         "argument '%U'", PyTuple_GET_ITEM(kwnames, 0));
            return NULL;
        }
        nobj = args[0];
    }
    if (nobj != NULL && nobj != Py_None) {
        n = PyLong_AsSsize_t(nobj);
        if (n == -1 && PyErr_Occurred())
            return NULL;
    }
    if (!pyrdma_obj_check(&cq->o))
        return NULL;
    return pyrdma_poll_list(&cq->o, cq->o.prov->poll_cq, cq->o.h, n);
}

static PyObject *
cq_req_notify_cq(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"solicited_only", NULL};
    pyrdma_CQ *cq = (pyrdma_CQ *)op;
    int solicited = 0, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:req_notify_cq", kwlist,
                                     &solicited))
        return NULL;
    if (!pyrdma_obj_check(&cq->o))
        return NULL;
    rc = cq->o.prov->req_notify_cq(cq->o.h, solicited);
    if (rc)
        return pyrdma_raise_sys(cq->o.state, rc, "ibv_req_notify_cq", "");
    Py_RETURN_NONE;
}

static PyObject *
cq_ack_events(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", NULL};
    pyrdma_CQ *cq = (pyrdma_CQ *)op;
    PyObject *nobj = Py_None;
    unsigned long n;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:ack_events", kwlist, &nobj))
        return NULL;
    if (!pyrdma_obj_check(&cq->o))
        return NULL;
    if (nobj == Py_None)
        n = cq->unacked;
    else {
        n = PyLong_AsUnsignedLong(nobj);
        if (n == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (n > cq->unacked) {
            PyErr_Format(PyExc_ValueError, "ack_events(%lu): only %u events "
                         "are unacknowledged", n, cq->unacked);
            return NULL;
        }
    }
    if (n) {
        cq->o.prov->ack_cq_events(cq->o.h, (unsigned int)n);
        cq->unacked -= (unsigned int)n;
    }
    Py_RETURN_NONE;
}

static PyObject *
cq_resize(PyObject *op, PyObject *arg)
{
    pyrdma_CQ *cq = (pyrdma_CQ *)op;
    struct pyrdma_status st = {0};
    long n;
    int actual;

    n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (!pyrdma_obj_check(&cq->o))
        return NULL;
    if (n < 1 || n > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "resize(): size must be in "
                     "1..2147483647, not %ld", n);
        return NULL;
    }
    if (cq->o.prov->resize_cq(cq->o.h, (int)n, &actual, &st) < 0)
        return pyrdma_raise_status(cq->o.state, &st);
    cq->cqe = actual;
    Py_RETURN_NONE;
}

static PyObject *
cq_get_cqe(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((pyrdma_CQ *)op)->cqe);
}

static PyObject *
cq_get_unacked(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((pyrdma_CQ *)op)->unacked);
}

static PyObject *
cq_get_cc(PyObject *op, void *c)
{
    PyObject *cc = ((pyrdma_obj *)op)->parents[1];
    (void)c;
    return Py_NewRef(cc ? cc : Py_None);
}

static PyObject *
cq_get_ctx(PyObject *op, void *c)
{
    PyObject *ctx = ((pyrdma_obj *)op)->parents[0];
    (void)c;
    return Py_NewRef(ctx ? ctx : Py_None);
}

/* In wr.c: poll into a WCArray. */
PyObject *pyrdma_cq_poll_into(PyObject *cq, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);

static PyMethodDef cq_methods[] = {
    {"poll", (PyCFunction)(void (*)(void))cq_poll,
     METH_FASTCALL | METH_KEYWORDS,
     "poll($self, /, n=-1)\n--\n\nPoll up to n completions (all available "
     "when n < 0) and return them as a list of ibv.wc (ibv_poll_cq)."},
    {"poll_into", (PyCFunction)(void (*)(void))pyrdma_cq_poll_into,
     METH_FASTCALL | METH_KEYWORDS,
     "poll_into($self, /, wcs, n=None, min=0, timeout=None)\n--\n\nPoll "
     "up to n (default: its capacity) completions into a reusable "
     "ibv.WCArray; return the number polled.  No Python object is made "
     "per completion.  With min > 0 it busy-polls (in C, no Python code "
     "per poll) until at least min completions arrived or timeout seconds "
     "passed (None: no limit), and may return fewer on timeout; Ctrl-C "
     "interrupts it and other threads run every millisecond."},
    {"req_notify_cq", (PyCFunction)(void (*)(void))cq_req_notify_cq,
     METH_VARARGS | METH_KEYWORDS,
     "req_notify_cq($self, /, solicited_only=False)\n--\n\nArm the CQ: the "
     "next (solicited) completion raises an event on its CompChannel."},
    {"req_notify", (PyCFunction)(void (*)(void))cq_req_notify_cq,
     METH_VARARGS | METH_KEYWORDS,
     "req_notify($self, /, solicited_only=False)\n--\n\npython-rdma's name "
     "of req_notify_cq()."},
    {"ack_events", (PyCFunction)(void (*)(void))cq_ack_events,
     METH_VARARGS | METH_KEYWORDS,
     "ack_events($self, /, n=None)\n--\n\nAcknowledge n (default: all) "
     "events received with CompChannel.get_cq_event() (ibv_ack_cq_events)."},
    {"resize", cq_resize, METH_O,
     "resize($self, cqe, /)\n--\n\nResize the CQ to at least cqe entries "
     "(ibv_resize_cq)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef cq_getset[] = {
    {"cqe", cq_get_cqe, NULL, "Number of entries (as the device rounded it).",
     NULL},
    {"unacked_events", cq_get_unacked, NULL,
     "Events received and not yet acknowledged.", NULL},
    {"comp_channel", cq_get_cc, NULL, "Its CompChannel, or None.", NULL},
    {"comp_chan", cq_get_cc, NULL, "python-rdma's name of comp_channel.",
     NULL},
    {"ctx", cq_get_ctx, NULL, "The Context it belongs to.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

int
pyrdma_cq_init(PyObject *module, pyrdma_state *st)
{
    st->CompChannelType = pyrdma_obj_type(
        module, "rdma.ibverbs.CompChannel", sizeof(pyrdma_CompChannel),
        "A completion channel: Context.comp_channel().", cc_methods, NULL,
        NULL, 0);
    if (st->CompChannelType == NULL)
        return -1;
    st->CQType = pyrdma_obj_type(module, "rdma.ibverbs.CQ", sizeof(pyrdma_CQ),
                                 "A completion queue: Context.cq().",
                                 cq_methods, cq_getset, NULL, 0);
    return st->CQType == NULL ? -1 : 0;
}
