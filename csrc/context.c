/* context.c - rdma.ibverbs.Context: an open device of one provider. */
#include <errno.h>
#include <poll.h>

#include "rdma.h"
#include "structmember.h"

static int
ctx_destroy(pyrdma_obj *o, struct pyrdma_status *st)
{
    return o->prov->close_device(o->h, st);
}

static const struct pyrdma_objkind ctx_kind = {
    "Context", PYRDMA_RANK_CONTEXT, ctx_destroy, NULL,
};

static PyObject *
ctx_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self;
    pyrdma_state *st = pyrdma_get_state_by_type(tp);

    (void)args;
    (void)kw;
    if (st == NULL)
        return NULL;
    self = (pyrdma_Context *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    pyrdma_obj_setup(&self->o, &ctx_kind, NULL, st);
    self->end_port = Py_NewRef(Py_None);
    return (PyObject *)self;
}

/* Context(EndPort or Device), python-rdma's form: set *name (a new
   reference to the device name), *provname (from its provider unless one
   was given) and *end_port (borrowed; the end port or None).  Return 0, or
   -1 with an error set. */
static int
device_arg(PyObject *dev, PyObject **name, PyObject **prov,
           PyObject **end_port)
{
    PyObject *node;

    if (PyObject_HasAttrString(dev, "end_ports")) {
        node = Py_NewRef(dev);              /* a Device */
        *end_port = Py_None;
    }
    else if (PyObject_HasAttrString(dev, "parent") &&
             PyObject_HasAttrString(dev, "port_id")) {
        node = PyObject_GetAttrString(dev, "parent");   /* an EndPort */
        *end_port = dev;
    }
    else {
        PyErr_Format(PyExc_TypeError, "Context() needs a device name, an "
                     "rdma.devices.Device or an EndPort, not %.100s",
                     Py_TYPE(dev)->tp_name);
        return -1;
    }
    if (node == NULL)
        return -1;
    *name = PyObject_GetAttrString(node, "name");
    if (*name != NULL && *prov == NULL &&
        PyObject_HasAttrString(node, "provider"))
        *prov = PyObject_GetAttrString(node, "provider");
    Py_DECREF(node);
    if (*name == NULL || !PyUnicode_Check(*name)) {
        if (*name != NULL)
            PyErr_SetString(PyExc_TypeError, "Context(): the device's name "
                            "must be a str");
        return -1;
    }
    return 0;
}

static int
ctx_init(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    static char *kwlist[] = {"name", "provider", "end_port", NULL};
    const char *name, *provname = "verbs";
    PyObject *nobj, *pobj = NULL, *end_port = Py_None, *owned_name = NULL;
    const struct pyrdma_provider *prov;
    struct pyrdma_status st = {0};
    void *h = NULL;
    int rc = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$UO:Context", kwlist,
                                     &nobj, &pobj, &end_port))
        return -1;
    Py_XINCREF(pobj);
    if (PyUnicode_Check(nobj))
        owned_name = Py_NewRef(nobj);
    else if (device_arg(nobj, &owned_name, &pobj, &end_port) < 0)
        goto out;
    if ((name = PyUnicode_AsUTF8(owned_name)) == NULL)
        goto out;
    if (pobj != NULL && pobj != Py_None) {
        if (!PyUnicode_Check(pobj)) {
            PyErr_SetString(PyExc_TypeError, "Context(): provider must be "
                            "a str");
            goto out;
        }
        if ((provname = PyUnicode_AsUTF8(pobj)) == NULL)
            goto out;
    }
    if (self->o.h != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Context is already open");
        goto out;
    }
    prov = pyrdma_find_provider(provname);
    if (prov == NULL) {
        if (strcmp(provname, "umad") == 0)
            PyErr_Format(PyExc_ValueError, "%s has no verbs device: only "
                         "libibumad reports it (rdma.get_umad() works on "
                         "it)", name);
        else
            PyErr_Format(PyExc_ValueError, "unknown RDMA provider '%s'",
                         provname);
        goto out;
    }
    if (prov->load(&st) < 0 || prov->open_device(name, &h, &st) < 0) {
        pyrdma_raise_status(self->o.state, &st);
        goto out;
    }
    self->o.prov = prov;
    self->o.h = h;
    Py_XSETREF(self->name, Py_NewRef(owned_name));
    Py_INCREF(end_port);
    Py_XSETREF(self->end_port, end_port);
    rc = 0;
out:
    Py_XDECREF(owned_name);
    Py_XDECREF(pobj);
    return rc;
}

static int
ctx_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    Py_VISIT(self->end_port);
    return pyrdma_obj_traverse(op, visit, arg);
}

static int
ctx_clear(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    Py_CLEAR(self->end_port);
    Py_CLEAR(self->name);
    return pyrdma_obj_clear(op);
}

/* Parse a port number argument; return 1..255 or -1 with an error set. */
static int
port_arg(pyrdma_Context *self, PyObject *v)
{
    long port;

    if (v == NULL || v == Py_None) {
        /* Default: the end port this context was opened for, else 1. */
        PyObject *pid;
        if (self->end_port == Py_None)
            return 1;
        pid = PyObject_GetAttrString(self->end_port, "port_id");
        if (pid == NULL)
            return -1;
        port = PyLong_AsLong(pid);
        Py_DECREF(pid);
    }
    else {
        if (!PyLong_Check(v)) {
            PyErr_Format(PyExc_TypeError, "port_id must be an int, not %.100s",
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        int overflow = 0;
        port = PyLong_AsLongAndOverflow(v, &overflow);
        if (overflow)
            port = 0;       /* out of range, reported below */
    }
    if (port == -1 && PyErr_Occurred())
        return -1;
    if (port < 1 || port > 255) {
        PyErr_Format(PyExc_ValueError, "port_id must be in range 1..255, "
                     "not %R", v != NULL && v != Py_None ? v : Py_None);
        return -1;
    }
    return (int)port;
}

/* Parse a table index argument; return >= 0 or -1 with an error set. */
static int
index_arg(PyObject *v, const char *what)
{
    int overflow = 0;
    long idx;

    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    idx = PyLong_AsLongAndOverflow(v, &overflow);
    if (idx == -1 && PyErr_Occurred())
        return -1;
    if (overflow || idx < 0 || idx > INT32_MAX) {
        /* the verbs take an int index */
        PyErr_Format(PyExc_ValueError, "%s must be in range 0..%d, not %R",
                     what, INT32_MAX, v);
        return -1;
    }
    return (int)idx;
}

static PyObject *
ctx_query_device(PyObject *op, PyObject *noargs)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    struct pyrdma_device_attr a;
    struct pyrdma_status st = {0};

    (void)noargs;
    if (!pyrdma_obj_check(&self->o))
        return NULL;
    memset(&a, 0, sizeof(a));
    if (self->o.prov->query_device(self->o.h, &a, &st) < 0)
        return pyrdma_raise_status(self->o.state, &st);
    return pyrdma_struct_new(self->o.state->device_attr, &a, sizeof(a));
}

static PyObject *
ctx_query_port(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    static char *kwlist[] = {"port_id", NULL};
    PyObject *pobj = NULL;
    struct pyrdma_port_attr a;
    struct pyrdma_status st = {0};
    int port;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:query_port", kwlist, &pobj))
        return NULL;
    if (!pyrdma_obj_check(&self->o))
        return NULL;
    if ((port = port_arg(self, pobj)) < 0)
        return NULL;
    memset(&a, 0, sizeof(a));
    if (self->o.prov->query_port(self->o.h, (uint8_t)port, &a, &st) < 0)
        return pyrdma_raise_status(self->o.state, &st);
    return pyrdma_struct_new(self->o.state->port_attr, &a, sizeof(a));
}

/* Shared by query_gid and query_gid_ex: fill *e; return 0 or -1. */
static int
gid_entry(pyrdma_Context *self, PyObject *args, PyObject *kw,
          const char *fname, struct pyrdma_gid_entry *e)
{
    static char *kwlist[] = {"port_id", "index", NULL};
    PyObject *pobj, *iobj;
    struct pyrdma_status st = {0};
    char fmt[32];
    int port, idx;

    PyOS_snprintf(fmt, sizeof(fmt), "OO:%s", fname);
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &pobj, &iobj))
        return -1;
    if (!pyrdma_obj_check(&self->o))
        return -1;
    if ((port = port_arg(self, pobj)) < 0 ||
        (idx = index_arg(iobj, "index")) < 0)
        return -1;
    if (self->o.prov->query_gid(self->o.h, (uint8_t)port, idx, e, &st) < 0) {
        pyrdma_raise_status(self->o.state, &st);
        return -1;
    }
    return 0;
}

static PyObject *
ctx_query_gid(PyObject *op, PyObject *args, PyObject *kw)
{
    struct pyrdma_gid_entry e;

    if (gid_entry((pyrdma_Context *)op, args, kw, "query_gid", &e) < 0)
        return NULL;
    return pyrdma_gid_from_raw(((pyrdma_obj *)op)->state, e.gid);
}

static PyObject *
ctx_query_gid_ex(PyObject *op, PyObject *args, PyObject *kw)
{
    struct pyrdma_gid_entry e;

    if (gid_entry((pyrdma_Context *)op, args, kw, "query_gid_ex", &e) < 0)
        return NULL;
    return pyrdma_struct_new(((pyrdma_obj *)op)->state->gid_entry, &e,
                             sizeof(e));
}

static PyObject *
ctx_query_pkey(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    static char *kwlist[] = {"port_id", "index", NULL};
    PyObject *pobj, *iobj;
    struct pyrdma_status st = {0};
    uint16_t pkey = 0;
    int port, idx;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:query_pkey", kwlist,
                                     &pobj, &iobj))
        return NULL;
    if (!pyrdma_obj_check(&self->o))
        return NULL;
    if ((port = port_arg(self, pobj)) < 0 ||
        (idx = index_arg(iobj, "index")) < 0)
        return NULL;
    if (self->o.prov->query_pkey(self->o.h, (uint8_t)port, idx, &pkey, &st) < 0)
        return pyrdma_raise_status(self->o.state, &st);
    return PyLong_FromLong(pkey);
}

static PyObject *
ctx_pd(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    return pyrdma_pd_new((pyrdma_Context *)op);
}

static PyObject *
ctx_cq(PyObject *op, PyObject *args, PyObject *kw)
{
    return pyrdma_cq_new((pyrdma_Context *)op, args, kw);
}

static PyObject *
ctx_comp_channel(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    return pyrdma_cc_new((pyrdma_Context *)op);
}

/* The async event types handled here: the values of libibverbs' enum
   ibv_event_type (a stable ABI; this file includes no provider header). */
enum {
    EV_CQ_ERR = 0, EV_QP_FATAL = 1, EV_QP_REQ_ERR = 2, EV_QP_ACCESS_ERR = 3,
    EV_PATH_MIG_ERR = 7, EV_DEVICE_FATAL = 8, EV_PORT_ACTIVE = 9,
    EV_PORT_ERR = 10, EV_LID_CHANGE = 11, EV_PKEY_CHANGE = 12,
    EV_SM_CHANGE = 13, EV_SRQ_ERR = 14, EV_CLIENT_REREGISTER = 17,
    EV_GID_CHANGE = 18, EV_WQ_FATAL = 19,
};

/* Find the object an async event is about; a new reference or None. */
static PyObject *
event_element(pyrdma_Context *self, const struct pyrdma_async_event *ev)
{
    pyrdma_obj *o = NULL;

    switch (ev->element_kind) {
    case PYRDMA_EV_PORT:
        return PyLong_FromLong(ev->port_num);
    case PYRDMA_EV_CQ:   /* Context -> CQ (or CompChannel -> CQ) */
    case PYRDMA_EV_QP:   /* Context -> PD -> QP */
    case PYRDMA_EV_SRQ:  /* Context -> PD -> SRQ */
        /* Only an object that is still one of our live descendants. */
        o = pyrdma_find_child(&self->o, ev->element, 3);
        break;
    }
    return Py_NewRef(o ? (PyObject *)o : Py_None);
}

/* The device object of the context: end_port.parent, or None (a new
   reference; NULL with an error set). */
static PyObject *
ctx_node(pyrdma_Context *self)
{
    if (self->end_port == NULL || self->end_port == Py_None)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->end_port, "parent");
}

/* python-rdma's obj of an async event: the end port (node.end_ports[n])
   of a port event, the device of IBV_EVENT_DEVICE_FATAL, else element.
   Falls back to element when the context has no device object.  A new
   reference, NULL with an error set. */
static PyObject *
event_obj(pyrdma_Context *self, const struct pyrdma_async_event *ev,
          PyObject *element)
{
    PyObject *node, *ports, *key, *res;

    if (ev->element_kind != PYRDMA_EV_PORT &&
        ev->event_type != EV_DEVICE_FATAL)
        return Py_NewRef(element);
    node = ctx_node(self);
    if (node == NULL)
        return NULL;
    if (ev->event_type == EV_DEVICE_FATAL || node == Py_None) {
        if (node != Py_None)
            return node;
        Py_DECREF(node);
        return Py_NewRef(element);
    }
    ports = PyObject_GetAttrString(node, "end_ports");
    Py_DECREF(node);
    if (ports == NULL)
        return NULL;
    key = PyLong_FromLong(ev->port_num);
    res = key ? PyObject_GetItem(ports, key) : NULL;
    Py_XDECREF(key);
    Py_DECREF(ports);
    if (res == NULL && PyErr_ExceptionMatches(PyExc_LookupError)) {
        /* A port the device list does not know: the number. */
        PyErr_Clear();
        res = Py_NewRef(element);
    }
    return res;
}

static PyObject *
ctx_get_async_event(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    static char *kwlist[] = {"timeout", NULL};
    PyObject *tobj = Py_None, *res, *el, *obj;
    struct pyrdma_async_event ev;
    struct pyrdma_py_async_event pev;
    struct pyrdma_status st = {0};
    double timeout = -1;
    int rc, fd;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:get_async_event", kwlist,
                                     &tobj))
        return NULL;
    if (pyrdma_timeout_arg(tobj, &timeout) < 0)
        return NULL;
    if (!pyrdma_obj_check(&self->o))
        return NULL;
    for (;;) {
        rc = self->o.prov->get_async_event(self->o.h, &ev, &st);
        if (rc < 0)
            return pyrdma_raise_status(self->o.state, &st);
        if (rc > 0)
            break;
        fd = self->o.prov->async_fd(self->o.h);
        rc = pyrdma_wait_fd(&self->o, &fd, &timeout);
        if (rc < 0)
            return NULL;
        if (rc == 0)
            Py_RETURN_NONE;
    }
    pev.event_type = ev.event_type;
    res = pyrdma_struct_new(self->o.state->async_event, &pev, sizeof(pev));
    if (res == NULL)
        return NULL;
    el = event_element(self, &ev);
    if (el == NULL) {
        Py_DECREF(res);
        return NULL;
    }
    pyrdma_struct_slots(res)[0] = el;
    obj = event_obj(self, &ev, el);
    if (obj == NULL) {
        Py_DECREF(res);
        return NULL;
    }
    pyrdma_struct_slots(res)[1] = obj;
    return res;
}

/* Call obj.name() if obj has it; return 0, or -1 with an error set. */
static int
call_hook(PyObject *obj, const char *name)
{
    PyObject *r;

    if (obj == Py_None || PyLong_Check(obj) ||
        !PyObject_HasAttrString(obj, name))
        return 0;
    r = PyObject_CallMethod(obj, name, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *
ctx_handle_async_event(PyObject *op, PyObject *event)
{
    PyObject *tyobj, *obj, *exc;
    const char *hook = NULL;
    long ty;
    int rc = 0;

    if (PyTuple_Check(event) && PyTuple_GET_SIZE(event) == 2) {
        /* python-rdma's (event_type, obj) */
        tyobj = Py_NewRef(PyTuple_GET_ITEM(event, 0));
        obj = Py_NewRef(PyTuple_GET_ITEM(event, 1));
    }
    else {
        tyobj = PyObject_GetAttrString(event, "event_type");
        obj = tyobj ? PyObject_GetAttrString(event, "obj") : NULL;
        if (obj == NULL) {
            Py_XDECREF(tyobj);
            if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "handle_async_event() needs an "
                             "ibv.async_event or an (event_type, obj) pair, "
                             "not %.100s", Py_TYPE(event)->tp_name);
            }
            return NULL;
        }
    }
    ty = PyLong_Check(tyobj) ? PyLong_AsLong(tyobj) : -1;
    Py_DECREF(tyobj);
    if (ty == -1) {
        Py_DECREF(obj);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "handle_async_event(): "
                            "event_type must be an int");
        return NULL;
    }
    switch (ty) {
    case EV_CQ_ERR: case EV_QP_FATAL: case EV_QP_REQ_ERR:
    case EV_QP_ACCESS_ERR: case EV_PATH_MIG_ERR: case EV_DEVICE_FATAL:
    case EV_SRQ_ERR: case EV_WQ_FATAL:
        Py_DECREF(obj);
        exc = PyObject_CallOneArg(((pyrdma_obj *)op)->state->AsyncError,
                                  event);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    case EV_LID_CHANGE:
        hook = "lid_change";
        break;
    case EV_PKEY_CHANGE:
        hook = "pkey_change";
        break;
    case EV_SM_CHANGE:
        hook = "sm_change";
        break;
    case EV_PORT_ACTIVE: case EV_PORT_ERR: case EV_CLIENT_REREGISTER:
    case EV_GID_CHANGE:
        hook = "refresh";   /* the port's state or tables changed */
        break;
    }
    if (hook != NULL)
        rc = call_hook(obj, hook);
    Py_DECREF(obj);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Raise SysError(EOPNOTSUPP) for a provider without an async event fd
   (async_fd has no status to fail with: the one op checked for NULL, see
   provider.h); return NULL. */
static PyObject *
no_async_fd(pyrdma_Context *self)
{
    char msg[128];
    PyOS_snprintf(msg, sizeof(msg), "the %s provider does not implement it",
                  self->o.prov->name);
    return pyrdma_raise_sys(self->o.state, EOPNOTSUPP, "async_fd", msg);
}

static PyObject *
ctx_register_poll(PyObject *op, PyObject *poll)
{
    pyrdma_Context *self = (pyrdma_Context *)op;

    if (!pyrdma_obj_check(&self->o))
        return NULL;
    if (self->o.prov->async_fd == NULL)
        return no_async_fd(self);
    return PyObject_CallMethod(poll, "register", "ii",
                               self->o.prov->async_fd(self->o.h), POLLIN);
}

static PyObject *
ctx_check_poll(PyObject *op, PyObject *pevent)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    long fd, mask;

    if (!pyrdma_obj_check(&self->o))
        return NULL;
    if (self->o.prov->async_fd == NULL)
        return no_async_fd(self);
    if (!PyArg_ParseTuple(pevent, "ll:check_poll", &fd, &mask))
        return NULL;
    return PyBool_FromLong(fd == self->o.prov->async_fd(self->o.h) &&
                           (mask & POLLIN));
}

static PyObject *
ctx_async_fileno(PyObject *op, PyObject *noargs)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    (void)noargs;
    if (!pyrdma_obj_check(&self->o))
        return NULL;
    if (self->o.prov->async_fd == NULL)
        return no_async_fd(self);
    return PyLong_FromLong(self->o.prov->async_fd(self->o.h));
}

static PyObject *
ctx_repr(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    return PyUnicode_FromFormat("<rdma.ibverbs.Context %R (%s)%s>",
                                self->name ? self->name : Py_None,
                                self->o.prov ? self->o.prov->name : "?",
                                self->o.h ? "" : " closed");
}

static PyObject *
ctx_get_provider(PyObject *op, void *closure)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    (void)closure;
    if (self->o.prov == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->o.prov->name);
}

static PyObject *
ctx_get_name(PyObject *op, void *closure)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    (void)closure;
    return Py_NewRef(self->name ? self->name : Py_None);
}

static PyObject *
ctx_get_end_port(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(((pyrdma_Context *)op)->end_port);
}

static PyMethodDef ctx_methods[] = {
    {"query_device", ctx_query_device, METH_NOARGS,
     "query_device($self, /)\n--\n\nReturn the device's attributes as a "
     "device_attr (ibv_query_device)."},
    {"query_port", (PyCFunction)(void (*)(void))ctx_query_port,
     METH_VARARGS | METH_KEYWORDS,
     "query_port($self, /, port_id=None)\n--\n\nReturn a port_attr "
     "(ibv_query_port); port_id defaults to the context's end port."},
    {"query_gid", (PyCFunction)(void (*)(void))ctx_query_gid,
     METH_VARARGS | METH_KEYWORDS,
     "query_gid($self, /, port_id, index)\n--\n\nReturn GID table entry "
     "index of the port as an rdma.IBA.GID (ibv_query_gid)."},
    {"query_gid_ex", (PyCFunction)(void (*)(void))ctx_query_gid_ex,
     METH_VARARGS | METH_KEYWORDS,
     "query_gid_ex($self, /, port_id, index)\n--\n\nReturn a gid_entry with "
     "the GID, its type and netdev (ibv_query_gid_ex)."},
    {"query_pkey", (PyCFunction)(void (*)(void))ctx_query_pkey,
     METH_VARARGS | METH_KEYWORDS,
     "query_pkey($self, /, port_id, index)\n--\n\nReturn P_Key table entry "
     "index of the port (ibv_query_pkey)."},
    {"pd", ctx_pd, METH_NOARGS,
     "pd($self, /)\n--\n\nAllocate a protection domain (ibv_alloc_pd)."},
    {"cq", (PyCFunction)(void (*)(void))ctx_cq, METH_VARARGS | METH_KEYWORDS,
     "cq($self, /, nelems=100, comp_channel=None, vec=0)\n--\n\n"
     "Create a completion queue of at least nelems entries "
     "(ibv_create_cq), optionally reporting to a CompChannel."},
    {"comp_channel", ctx_comp_channel, METH_NOARGS,
     "comp_channel($self, /)\n--\n\nCreate a completion channel "
     "(ibv_create_comp_channel)."},
    {"get_async_event", (PyCFunction)(void (*)(void))ctx_get_async_event,
     METH_VARARGS | METH_KEYWORDS,
     "get_async_event($self, /, timeout=None)\n--\n\nWait for the next "
     "asynchronous event and return it (acknowledged) as an async_event, "
     "or None after timeout seconds.  Releases the GIL while waiting."},
    {"handle_async_event", ctx_handle_async_event, METH_O,
     "handle_async_event($self, event, /)\n--\n\npython-rdma's generic "
     "handler of an async event (or an (event_type, obj) pair): raise "
     "ibv.AsyncError for the events that break something (CQ_ERR, "
     "QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, PATH_MIG_ERR, DEVICE_FATAL, "
     "SRQ_ERR, WQ_FATAL); call the end port's lid_change(), pkey_change() "
     "or sm_change() for LID_CHANGE, PKEY_CHANGE and SM_CHANGE, and its "
     "refresh() for PORT_ACTIVE, PORT_ERR, CLIENT_REREGISTER and "
     "GID_CHANGE; ignore the others."},
    {"register_poll", ctx_register_poll, METH_O,
     "register_poll($self, poll, /)\n--\n\nRegister the async event fd "
     "with a select.poll object (POLLIN)."},
    {"check_poll", ctx_check_poll, METH_O,
     "check_poll($self, pevent, /)\n--\n\nTrue if the (fd, events) pair "
     "from poll.poll() says get_async_event() has an event."},
    {"async_fileno", ctx_async_fileno, METH_NOARGS,
     "async_fileno($self, /)\n--\n\nThe fd that is readable when an async "
     "event is pending (for select/poll/asyncio)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
ctx_get_node(PyObject *op, void *closure)
{
    (void)closure;
    return ctx_node((pyrdma_Context *)op);
}

static PyGetSetDef ctx_getset[] = {
    {"node", ctx_get_node, NULL,
     "The rdma.devices.Device of end_port (python-rdma's name), or None.",
     NULL},
    {"provider", ctx_get_provider, NULL,
     "Name of the provider that opened the device.", NULL},
    {"name", ctx_get_name, NULL, "Device name.", NULL},
    {"end_port", ctx_get_end_port, NULL,
     "The rdma.devices.EndPort this context was opened for, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* The Context is the one object users construct directly. */
static PyType_Slot ctx_slots[] = {
    {Py_tp_new, ctx_new},
    {Py_tp_init, ctx_init},
    {Py_tp_traverse, ctx_traverse},
    {Py_tp_clear, ctx_clear},
    {Py_tp_repr, ctx_repr},
    {0, NULL},
};

int
pyrdma_context_init(PyObject *module, pyrdma_state *st)
{
    PyTypeObject *tp = pyrdma_obj_type(
        module, "rdma.ibverbs.Context", sizeof(pyrdma_Context),
        "Context(name, *, provider='verbs', end_port=None)\n--\n\n"
        "An open RDMA device (ibv_open_device).  Usually made with "
        "rdma.get_verbs(end_port).  name may also be an "
        "rdma.devices.EndPort or Device (python-rdma's Context(port)): its "
        "device, provider and end port are used.  A context manager; "
        "close() releases it and everything created from it.",
        ctx_methods, ctx_getset, ctx_slots, 1);

    if (tp == NULL)
        return -1;
    st->ContextType = tp;
    return 0;
}
