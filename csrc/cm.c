/* cm.c - rdma.ibverbs.CMEventChannel and CMID: the connection manager's
   objects (rdma_cm's event channel and IDs) in the object model.

   A channel belongs to one provider (chosen by name, like a Context); its
   IDs are its children, so closing the channel closes (destroys) every ID
   first.  A CONNECT_REQUEST event brings a new ID, made a child of the
   channel too.  Events are read without blocking and acknowledged at once
   (their private data copied), so destroying an ID never waits for an
   unacknowledged event.  The QP of an ID is an ordinary QP of the object
   model: init_qp_attr() gives what each transition needs.  rdma/cm.py
   builds the Python API on these two types. */
#include <errno.h>
#include <netdb.h>
#include <string.h>

#include "rdma.h"

/* An event channel. */
typedef struct {
    pyrdma_obj o;             /* no parent */
    int fd;                   /* the pollable fd, -1 once closed */
} pyrdma_CMChannel;

/* A CM ID. */
typedef struct {
    pyrdma_obj o;             /* parents[0]: its CMEventChannel */
    int ps;                   /* PYRDMA_PS_* */
} pyrdma_CMID;

/* ---- Addresses ---- */

/* Convert addr, a (host, port) tuple with a numeric host ("" or None: the
   wildcard), into *ss.  Return 0, or -1 with an error naming fname. */
static int
addr_arg(pyrdma_state *st, PyObject *addr, struct sockaddr_storage *ss,
         const char *fname)
{
    struct addrinfo hints, *res = NULL;
    PyObject *hobj;
    const char *host = NULL;
    char port[16];
    long p;
    int rc;

    if (!PyTuple_Check(addr) || PyTuple_GET_SIZE(addr) != 2) {
        PyErr_Format(PyExc_TypeError, "%s(): an address is a (host, port) "
                     "tuple, not %.100s", fname, Py_TYPE(addr)->tp_name);
        return -1;
    }
    hobj = PyTuple_GET_ITEM(addr, 0);
    if (hobj != Py_None && !PyUnicode_Check(hobj)) {
        PyErr_Format(PyExc_TypeError, "%s(): the host must be a str",
                     fname);
        return -1;
    }
    if (hobj != Py_None && (host = PyUnicode_AsUTF8(hobj)) == NULL)
        return -1;
    if (host != NULL && host[0] == '\0')
        host = NULL;
    p = PyLong_AsLong(PyTuple_GET_ITEM(addr, 1));
    if (p == -1 && PyErr_Occurred())
        return -1;
    if (p < 0 || p > 65535) {
        PyErr_Format(PyExc_ValueError, "%s(): port %ld is not in 0..65535",
                     fname, p);
        return -1;
    }
    snprintf(port, sizeof(port), "%ld", p);
    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*ss)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: not a numeric address (%s)",
                 host ? host : "", rc ? gai_strerror(rc) : "no result");
        if (res != NULL)
            freeaddrinfo(res);
        pyrdma_raise_sys(st, EINVAL, "getaddrinfo", msg);
        return -1;
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* Return (host, port) for sa, or None when it has no address family. */
static PyObject *
addr_tuple(const struct sockaddr_storage *ss)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    socklen_t len;

    if (ss->ss_family == AF_INET)
        len = sizeof(struct sockaddr_in);
    else if (ss->ss_family == AF_INET6)
        len = sizeof(struct sockaddr_in6);
    else
        Py_RETURN_NONE;
    if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host),
                    port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV))
        Py_RETURN_NONE;
    return Py_BuildValue("(si)", host, atoi(port));
}

/* ---- CMID ---- */

static int
id_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->cm_destroy_id(o->h, st);
}

static const struct pyrdma_objkind id_kind = {
    "CMID", PYRDMA_RANK_CMID, id_destroy, NULL,
};

/* A new CMID object for handle h, a child of channel ch. */
static PyObject *
id_wrap(pyrdma_CMChannel *ch, void *h, int ps)
{
    pyrdma_CMID *id = (pyrdma_CMID *)pyrdma_obj_new(ch->o.state->CMIDType,
                                                    &id_kind, &ch->o);
    if (id == NULL)
        return NULL;
    id->o.h = h;
    id->ps = ps;
    pyrdma_obj_link(&id->o, 0, &ch->o);
    return (PyObject *)id;
}

/* Run op(h, st) on an open ID; return None or raise SysError. */
static PyObject *
id_simple(PyObject *op, int (*fn)(void *, struct pyrdma_status *))
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (fn(id->o.h, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_bind_addr(PyObject *op, PyObject *addr)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct sockaddr_storage ss;

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (addr_arg(id->o.state, addr, &ss, "bind_addr") < 0)
        return NULL;
    if (id->o.prov->cm_bind_addr(id->o.h, (struct sockaddr *)&ss, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_resolve_addr(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dst", "src", "timeout_ms", NULL};
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct sockaddr_storage src, dst;
    PyObject *dobj, *sobj = Py_None;
    int timeout_ms = 2000;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Oi:resolve_addr", kwlist,
                                     &dobj, &sobj, &timeout_ms))
        return NULL;
    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (addr_arg(id->o.state, dobj, &dst, "resolve_addr") < 0)
        return NULL;
    if (sobj != Py_None &&
        addr_arg(id->o.state, sobj, &src, "resolve_addr") < 0)
        return NULL;
    if (id->o.prov->cm_resolve_addr(
            id->o.h, sobj != Py_None ? (struct sockaddr *)&src : NULL,
            (struct sockaddr *)&dst, timeout_ms, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_resolve_route(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout_ms", NULL};
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    int timeout_ms = 2000;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:resolve_route", kwlist,
                                     &timeout_ms))
        return NULL;
    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (id->o.prov->cm_resolve_route(id->o.h, timeout_ms, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_listen(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"backlog", NULL};
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    int backlog = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:listen", kwlist, &backlog))
        return NULL;
    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (id->o.prov->cm_listen(id->o.h, backlog, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

/* Copy private data (a bytes-like object or None) into p; 0 or -1 with
   SysError(EINVAL) naming func when it is over the limit. */
static int
private_data_arg(pyrdma_state *st, PyObject *obj, struct pyrdma_cm_param *p,
                 const char *func)
{
    Py_buffer b;

    p->private_data_len = 0;
    if (obj == NULL || obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0)
        return -1;
    if (b.len > PYRDMA_CM_PRIVATE_MAX) {
        char msg[120];
        snprintf(msg, sizeof(msg), "%zd bytes of private data: at most %d "
                 "fit a CM message", b.len, PYRDMA_CM_PRIVATE_MAX);
        PyBuffer_Release(&b);
        pyrdma_raise_sys(st, EINVAL, func, msg);
        return -1;
    }
    memcpy(p->private_data, b.buf, (size_t)b.len);
    p->private_data_len = (uint8_t)b.len;
    PyBuffer_Release(&b);
    return 0;
}

/* Parse the connection parameters of connect()/accept() into *p. */
static int
param_args(pyrdma_state *st, PyObject *args, PyObject *kw,
           struct pyrdma_cm_param *p, const char *fmt, const char *func)
{
    static char *kwlist[] = {"private_data", "qp_num", "responder_resources",
                             "initiator_depth", "flow_control", "retry_count",
                             "rnr_retry_count", "srq", "qkey", NULL};
    PyObject *data = Py_None;
    unsigned int qp_num = 0, qkey = 0;
    unsigned char rr = 1, id = 1, fc = 1, retry = 7, rnr = 7, srq = 0;

    memset(p, 0, sizeof(*p));
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &data, &qp_num,
                                     &rr, &id, &fc, &retry, &rnr, &srq,
                                     &qkey))
        return -1;
    if (qp_num > 0xffffff) {
        PyErr_Format(PyExc_ValueError, "%s(): qp_num 0x%x is over 24 bits",
                     func, qp_num);
        return -1;
    }
    p->qp_num = qp_num;
    p->qkey = qkey;
    p->responder_resources = rr;
    p->initiator_depth = id;
    p->flow_control = fc;
    p->retry_count = retry;
    p->rnr_retry_count = rnr;
    p->srq = srq;
    return private_data_arg(st, data, p, func);
}

static PyObject *
id_connect(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_cm_param p;

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (param_args(id->o.state, args, kw, &p, "|OIbbbbbbI:connect",
                   "rdma_connect") < 0)
        return NULL;
    if (id->o.prov->cm_connect(id->o.h, &p, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_accept(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_cm_param p;

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (param_args(id->o.state, args, kw, &p, "|OIbbbbbbI:accept",
                   "rdma_accept") < 0)
        return NULL;
    if (id->o.prov->cm_accept(id->o.h, &p, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_reject(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"private_data", NULL};
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_cm_param p;
    PyObject *data = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:reject", kwlist, &data))
        return NULL;
    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (private_data_arg(id->o.state, data, &p, "rdma_reject") < 0)
        return NULL;
    if (id->o.prov->cm_reject(id->o.h, p.private_data, p.private_data_len,
                              &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_establish(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (!pyrdma_obj_check((pyrdma_obj *)op))
        return NULL;
    return id_simple(op, ((pyrdma_obj *)op)->prov->cm_establish);
}

static PyObject *
id_disconnect(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (!pyrdma_obj_check((pyrdma_obj *)op))
        return NULL;
    return id_simple(op, ((pyrdma_obj *)op)->prov->cm_disconnect);
}

static PyObject *
id_init_qp_attr(PyObject *op, PyObject *arg)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_qp_attr a;
    PyObject *attr;
    long state;
    int mask = 0;

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    state = PyLong_AsLong(arg);
    if (state == -1 && PyErr_Occurred())
        return NULL;
    memset(&a, 0, sizeof(a));
    a.qp_state = (int32_t)state;
    if (id->o.prov->cm_init_qp_attr(id->o.h, &a, &mask, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    attr = pyrdma_struct_new(id->o.state->qp_attr, &a, sizeof(a));
    if (attr == NULL)
        return NULL;
    return Py_BuildValue("(Ni)", attr, mask);
}

/* The path tuple of a resolved route. */
static PyObject *
path_tuple(const struct pyrdma_cm_path *p)
{
    return Py_BuildValue("(y#y#HHHkBBBBBB)", (const char *)p->dgid,
                         (Py_ssize_t)16, (const char *)p->sgid,
                         (Py_ssize_t)16, p->dlid, p->slid, p->pkey,
                         (unsigned long)p->flow_label, p->hop_limit,
                         p->traffic_class, p->sl, p->mtu, p->rate,
                         p->packet_life_time);
}

static PyObject *
id_query(PyObject *op, PyObject *noargs)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct pyrdma_cm_info info;
    PyObject *path;

    (void)noargs;
    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (id->o.prov->cm_query(id->o.h, &info, &st) < 0)
        return pyrdma_raise_status(id->o.state, &st);
    if (info.num_paths > 0)
        path = path_tuple(&info.path);
    else
        path = Py_NewRef(Py_None);
    if (path == NULL)
        return NULL;
    return Py_BuildValue("(siiNNy#y#HN)", info.device, (int)info.port_num,
                         (int)info.ps, addr_tuple(&info.src),
                         addr_tuple(&info.dst), (const char *)info.sgid,
                         (Py_ssize_t)16, (const char *)info.dgid,
                         (Py_ssize_t)16, info.pkey, path);
}

/* join_multicast / leave_multicast: one address argument. */
static PyObject *
id_mcast(PyObject *op, PyObject *addr, int join)
{
    pyrdma_CMID *id = (pyrdma_CMID *)op;
    struct pyrdma_status st = {0};
    struct sockaddr_storage ss;
    const char *fname = join ? "join_multicast" : "leave_multicast";
    int rc;

    if (!pyrdma_obj_check(&id->o))
        return NULL;
    if (addr_arg(id->o.state, addr, &ss, fname) < 0)
        return NULL;
    if (join)
        rc = id->o.prov->cm_join_multicast(id->o.h, (struct sockaddr *)&ss,
                                           &st);
    else
        rc = id->o.prov->cm_leave_multicast(id->o.h, (struct sockaddr *)&ss,
                                            &st);
    if (rc < 0)
        return pyrdma_raise_status(id->o.state, &st);
    Py_RETURN_NONE;
}

static PyObject *
id_join_multicast(PyObject *op, PyObject *addr)
{
    return id_mcast(op, addr, 1);
}

static PyObject *
id_leave_multicast(PyObject *op, PyObject *addr)
{
    return id_mcast(op, addr, 0);
}

static PyObject *
id_get_ps(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromLong(((pyrdma_CMID *)op)->ps);
}

static PyObject *
id_get_channel(PyObject *op, void *closure)
{
    PyObject *ch = ((pyrdma_obj *)op)->parents[0];
    (void)closure;
    return Py_NewRef(ch != NULL ? ch : Py_None);
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef id_methods[] = {
    {"bind_addr", id_bind_addr, METH_O,
     "bind_addr($self, addr, /)\n--\n\nBind to a local (host, port) "
     "(rdma_bind_addr); host '' is the wildcard."},
    {"resolve_addr", KW id_resolve_addr, METH_VARARGS | METH_KEYWORDS,
     "resolve_addr($self, /, dst, src=None, timeout_ms=2000)\n--\n\n"
     "Start resolving (host, port) dst to a device (rdma_resolve_addr); "
     "ADDR_RESOLVED or ADDR_ERROR follows on the channel."},
    {"resolve_route", KW id_resolve_route, METH_VARARGS | METH_KEYWORDS,
     "resolve_route($self, /, timeout_ms=2000)\n--\n\nStart resolving the "
     "route (rdma_resolve_route); ROUTE_RESOLVED or ROUTE_ERROR follows."},
    {"listen", KW id_listen, METH_VARARGS | METH_KEYWORDS,
     "listen($self, /, backlog=0)\n--\n\nListen on the bound address "
     "(rdma_listen)."},
    {"connect", KW id_connect, METH_VARARGS | METH_KEYWORDS,
     "connect($self, /, private_data=None, qp_num=0, responder_resources=1, "
     "initiator_depth=1, flow_control=1, retry_count=7, rnr_retry_count=7, "
     "srq=0, qkey=0)\n--\n\nSend a connection request for the QP qp_num "
     "(rdma_connect)."},
    {"accept", KW id_accept, METH_VARARGS | METH_KEYWORDS,
     "accept($self, /, private_data=None, qp_num=0, responder_resources=1, "
     "initiator_depth=1, flow_control=1, retry_count=7, rnr_retry_count=7, "
     "srq=0, qkey=0)\n--\n\nAccept a connection request (rdma_accept) for "
     "the QP qp_num, already in RTR."},
    {"reject", KW id_reject, METH_VARARGS | METH_KEYWORDS,
     "reject($self, /, private_data=None)\n--\n\nReject a connection "
     "request (rdma_reject)."},
    {"establish", id_establish, METH_NOARGS,
     "establish($self, /)\n--\n\nComplete an active connection after "
     "CONNECT_RESPONSE, the QP in RTS (rdma_establish)."},
    {"disconnect", id_disconnect, METH_NOARGS,
     "disconnect($self, /)\n--\n\nDisconnect (rdma_disconnect); "
     "DISCONNECTED follows on both sides."},
    {"init_qp_attr", id_init_qp_attr, METH_O,
     "init_qp_attr($self, qp_state, /)\n--\n\nReturn (ibv.qp_attr, mask) "
     "that move this ID's QP to qp_state (rdma_init_qp_attr)."},
    {"query", id_query, METH_NOARGS,
     "query($self, /)\n--\n\nReturn (device, port_num, ps, src, dst, sgid, "
     "dgid, pkey, path): where the ID is bound and routed; path is None or "
     "(dgid, sgid, dlid, slid, pkey, flow_label, hop_limit, traffic_class, "
     "sl, mtu, rate, packet_life_time)."},
    {"join_multicast", id_join_multicast, METH_O,
     "join_multicast($self, addr, /)\n--\n\nJoin the multicast group of "
     "(host, port) addr (rdma_join_multicast)."},
    {"leave_multicast", id_leave_multicast, METH_O,
     "leave_multicast($self, addr, /)\n--\n\nLeave a multicast group "
     "(rdma_leave_multicast)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef id_getset[] = {
    {"ps", id_get_ps, NULL, "The port space (RDMA_PS_*).", NULL},
    {"channel", id_get_channel, NULL, "Its CMEventChannel.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- CMEventChannel ---- */

/* Take the events still queued on a channel whose IDs are all closed:
   the new ID of a CONNECT_REQUEST nobody took is destroyed (a provider
   refuses to destroy a channel while an ID lives on it). */
static void
ch_drain(pyrdma_obj *o)
{
    struct pyrdma_status st = {0};
    struct pyrdma_cm_event ev;
    int n;

    for (n = 0; n < 4096; n++) {
        memset(&ev, 0, sizeof(ev));
        if (o->prov->cm_get_event(o->h, &ev, &st) <= 0)
            return;
        if (ev.event == PYRDMA_CM_EVENT_CONNECT_REQUEST && ev.id != NULL)
            o->prov->cm_destroy_id(ev.id, &st);
    }
}

static int
ch_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    pyrdma_CMChannel *ch = (pyrdma_CMChannel *)o;
    int fd = ch->fd;
    ch->fd = -1;
    ch_drain(o);
    if (o->prov->cm_destroy_channel(o->h, st) < 0) {
        ch->fd = fd;            /* refused: still open */
        return -1;
    }
    return 0;
}

static const struct pyrdma_objkind ch_kind = {
    "CMEventChannel", PYRDMA_RANK_CMCHANNEL, ch_destroy, NULL,
};

static PyObject *
ch_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    pyrdma_CMChannel *self;
    pyrdma_state *st = pyrdma_get_state_by_type(tp);

    (void)args;
    (void)kw;
    if (st == NULL)
        return NULL;
    self = (pyrdma_CMChannel *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    pyrdma_obj_setup(&self->o, &ch_kind, NULL, st);
    self->fd = -1;
    return (PyObject *)self;
}

static int
ch_init(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"provider", NULL};
    pyrdma_CMChannel *self = (pyrdma_CMChannel *)op;
    const struct pyrdma_provider *prov;
    struct pyrdma_status st = {0};
    const char *provname = "verbs";
    void *h = NULL;
    int fd = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|s:CMEventChannel", kwlist,
                                     &provname))
        return -1;
    if (self->o.h != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "CMEventChannel is already open");
        return -1;
    }
    prov = pyrdma_find_provider(provname);
    if (prov == NULL) {
        PyErr_Format(PyExc_ValueError, "unknown RDMA provider '%s'",
                     provname);
        return -1;
    }
    if (prov->load(&st) < 0 || prov->cm_create_channel(&h, &fd, &st) < 0) {
        pyrdma_raise_status(self->o.state, &st);
        return -1;
    }
    self->o.prov = prov;
    self->o.h = h;
    self->fd = fd;
    return 0;
}

static PyObject *
ch_fileno(PyObject *op, PyObject *noargs)
{
    pyrdma_CMChannel *ch = (pyrdma_CMChannel *)op;
    (void)noargs;
    if (!pyrdma_obj_check(&ch->o))
        return NULL;
    return PyLong_FromLong(ch->fd);
}

static PyObject *
ch_create_id(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ps", NULL};
    pyrdma_CMChannel *ch = (pyrdma_CMChannel *)op;
    struct pyrdma_status st = {0};
    int ps = PYRDMA_PS_TCP;
    void *h;
    PyObject *id;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:create_id", kwlist, &ps))
        return NULL;
    if (!pyrdma_obj_check(&ch->o))
        return NULL;
    if (ps != PYRDMA_PS_TCP && ps != PYRDMA_PS_UDP && ps != PYRDMA_PS_IB &&
        ps != PYRDMA_PS_IPOIB) {
        PyErr_Format(PyExc_ValueError, "create_id(): unknown port space "
                     "0x%x (RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB or "
                     "RDMA_PS_IPOIB)", ps);
        return NULL;
    }
    if (ch->o.prov->cm_create_id(ch->o.h, ps, &h, &st) < 0)
        return pyrdma_raise_status(ch->o.state, &st);
    id = id_wrap(ch, h, ps);
    if (id == NULL) {
        ch->o.prov->cm_destroy_id(h, &st);
        return NULL;
    }
    return id;
}

/* The live CMID child of ch whose handle is h (borrowed), or NULL. */
static pyrdma_obj *
find_id(pyrdma_CMChannel *ch, void *h)
{
    pyrdma_link *l;

    if (h == NULL)
        return NULL;
    for (l = ch->o.children.next; l != &ch->o.children; l = l->next)
        if (l->obj->h == h)
            return l->obj;
    return NULL;
}

/* The Python tuple of event ev (id: a new reference or NULL for None). */
static PyObject *
event_tuple(pyrdma_CMChannel *ch, const struct pyrdma_cm_event *ev,
            PyObject *id, PyObject *listen)
{
    const struct pyrdma_cm_param *p = &ev->param;
    PyObject *ah;

    if (p->has_ah)
        ah = pyrdma_struct_new(ch->o.state->ah_attr, &p->ah_attr,
                               sizeof(p->ah_attr));
    else
        ah = Py_NewRef(Py_None);
    if (ah == NULL) {
        Py_XDECREF(id);
        return NULL;
    }
    return Py_BuildValue("(iiNOy#iiiiiikkN)", (int)ev->event,
                         (int)ev->status, id ? id : Py_NewRef(Py_None),
                         listen ? listen : Py_None,
                         (const char *)p->private_data,
                         (Py_ssize_t)p->private_data_len,
                         p->responder_resources, p->initiator_depth,
                         p->flow_control, p->retry_count, p->rnr_retry_count,
                         p->srq, (unsigned long)p->qp_num,
                         (unsigned long)p->qkey, ah);
}

/* Read one event without blocking: a tuple, None, or NULL (error). */
static PyObject *
ch_try_event(pyrdma_CMChannel *ch)
{
    struct pyrdma_status st = {0};
    struct pyrdma_cm_event ev;
    pyrdma_obj *listen, *known;
    PyObject *id = NULL;
    int rc;

    memset(&ev, 0, sizeof(ev));
    rc = ch->o.prov->cm_get_event(ch->o.h, &ev, &st);
    if (rc < 0)
        return pyrdma_raise_status(ch->o.state, &st);
    if (rc == 0)
        Py_RETURN_NONE;
    listen = find_id(ch, ev.listen_id);
    known = find_id(ch, ev.id);
    if (known != NULL)
        id = Py_NewRef((PyObject *)known);
    else if (ev.id != NULL && listen != NULL) {
        /* A new ID of a connection request: it is ours to destroy. */
        id = id_wrap(ch, ev.id, ((pyrdma_CMID *)listen)->ps);
        if (id == NULL) {
            ch->o.prov->cm_destroy_id(ev.id, &st);
            return NULL;
        }
    }
    return event_tuple(ch, &ev, id, (PyObject *)listen);
}

static PyObject *
ch_get_event(PyObject *op, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    pyrdma_CMChannel *ch = (pyrdma_CMChannel *)op;
    PyObject *tobj = Py_None, *ev;
    double timeout;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get_event", kwlist,
                                     &tobj))
        return NULL;
    if (pyrdma_timeout_arg(tobj, &timeout) < 0)
        return NULL;
    for (;;) {
        if (!pyrdma_obj_check(&ch->o))
            return NULL;
        ev = ch_try_event(ch);
        if (ev != Py_None)
            return ev;
        Py_DECREF(ev);
        rc = pyrdma_wait_fd(&ch->o, &ch->fd, &timeout);
        if (rc < 0)
            return NULL;
        if (rc == 0) {
            if (!pyrdma_obj_check(&ch->o))
                return NULL;
            return ch_try_event(ch);
        }
    }
}

static PyObject *
ch_get_provider(PyObject *op, void *closure)
{
    const struct pyrdma_provider *p = ((pyrdma_obj *)op)->prov;
    (void)closure;
    if (p == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(p->name);
}

static PyMethodDef ch_methods[] = {
    {"fileno", ch_fileno, METH_NOARGS,
     "fileno($self, /)\n--\n\nThe channel's file descriptor (readable when "
     "an event is pending); works with select, poll and asyncio."},
    {"create_id", KW ch_create_id, METH_VARARGS | METH_KEYWORDS,
     "create_id($self, /, ps=RDMA_PS_TCP)\n--\n\nCreate a CM ID reporting "
     "to this channel (rdma_create_id)."},
    {"get_event", KW ch_get_event, METH_VARARGS | METH_KEYWORDS,
     "get_event($self, /, timeout=None)\n--\n\nWait for a CM event "
     "(rdma_get_cm_event, acknowledged at once) and return (event, status, "
     "id, listen_id, private_data, responder_resources, initiator_depth, "
     "flow_control, retry_count, rnr_retry_count, srq, qp_num, qkey, "
     "ah_attr), or None after timeout seconds.  Releases the GIL; Ctrl-C "
     "interrupts."},
    {NULL, NULL, 0, NULL},
};
#undef KW

static PyGetSetDef ch_getset[] = {
    {"provider", ch_get_provider, NULL, "Name of its provider.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ch_slots[] = {
    {Py_tp_new, ch_new},
    {Py_tp_init, ch_init},
    {0, NULL},
};

int
pyrdma_cm_init(PyObject *module, pyrdma_state *st)
{
    st->CMEventChannelType = pyrdma_obj_type(
        module, "rdma.ibverbs.CMEventChannel", sizeof(pyrdma_CMChannel),
        "CMEventChannel(provider='verbs')\n--\n\nA connection manager event "
        "channel (rdma_create_event_channel) of one provider.  A context "
        "manager; close() destroys its IDs first.",
        ch_methods, ch_getset, ch_slots, 1);
    if (st->CMEventChannelType == NULL)
        return -1;
    st->CMIDType = pyrdma_obj_type(
        module, "rdma.ibverbs.CMID", sizeof(pyrdma_CMID),
        "A connection manager ID: CMEventChannel.create_id(), or the new ID "
        "of a CONNECT_REQUEST event.", id_methods, id_getset, NULL, 0);
    return st->CMIDType == NULL ? -1 : 0;
}
