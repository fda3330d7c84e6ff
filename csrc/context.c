/* context.c - rdma.ibverbs.Context: an open device of one provider. */
#include <errno.h>

#include "rdma.h"
#include "structmember.h"

/* Return 1 if the context is open; else 0 with ValueError set. */
static int
check_open(pyrdma_Context *self)
{
    if (self->h == NULL) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed Context");
        return 0;
    }
    return 1;
}

/* Raise the "provider lacks this verb" SysError; return NULL. */
static PyObject *
not_supported(pyrdma_Context *self, const char *verb)
{
    char msg[128];
    PyOS_snprintf(msg, sizeof(msg), "the %s provider does not implement it",
                  self->prov->name);
    return pyrdma_raise_sys(self->state, EOPNOTSUPP, verb, msg);
}

static int
ctx_init(PyObject *op, PyObject *args, PyObject *kw)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    static char *kwlist[] = {"name", "provider", "end_port", NULL};
    const char *name, *provname = "verbs";
    PyObject *end_port = Py_None;
    const struct pyrdma_provider *prov;
    struct pyrdma_status st = {0};
    void *h = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$sO:Context", kwlist,
                                     &name, &provname, &end_port))
        return -1;
    if (self->h != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Context is already open");
        return -1;
    }
    prov = pyrdma_find_provider(provname);
    if (prov == NULL) {
        PyErr_Format(PyExc_ValueError, "unknown RDMA provider '%s'", provname);
        return -1;
    }
    if (prov->load(&st) < 0 || prov->open_device(name, &h, &st) < 0) {
        pyrdma_raise_status(self->state, &st);
        return -1;
    }
    self->prov = prov;
    self->h = h;
    Py_XSETREF(self->name, PyUnicode_FromString(name));
    Py_INCREF(end_port);
    Py_XSETREF(self->end_port, end_port);
    if (self->name == NULL)
        return -1;
    return 0;
}

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
    self->state = st;
    self->end_port = Py_NewRef(Py_None);
    return (PyObject *)self;
}

/* Close the device; return 0, or -1 with an exception set. */
static int
ctx_do_close(pyrdma_Context *self)
{
    struct pyrdma_status st = {0};
    void *h = self->h;

    if (h == NULL)
        return 0;
    self->h = NULL;   /* steal first: never closed twice */
    if (self->prov->close_device(h, &st) < 0) {
        pyrdma_raise_status(self->state, &st);
        return -1;
    }
    return 0;
}

static PyObject *
ctx_close(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (ctx_do_close((pyrdma_Context *)op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
ctx_enter(PyObject *op, PyObject *noargs)
{
    (void)noargs;
    if (!check_open((pyrdma_Context *)op))
        return NULL;
    return Py_NewRef(op);
}

static PyObject *
ctx_exit(PyObject *op, PyObject *args)
{
    (void)args;
    if (ctx_do_close((pyrdma_Context *)op) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static void
ctx_finalize(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    PyObject *et, *ev, *tb;

    if (self->h == NULL)
        return;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyErr_ResourceWarning(op, 1, "unclosed %R", op) < 0)
        PyErr_WriteUnraisable(op);
    if (ctx_do_close(self) < 0)
        PyErr_WriteUnraisable(op);
    PyErr_Restore(et, ev, tb);
}

static int
ctx_traverse(PyObject *op, visitproc visit, void *arg)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->end_port);
    return 0;
}

static int
ctx_clear(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    Py_CLEAR(self->end_port);
    return 0;
}

static void
ctx_dealloc(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    PyTypeObject *tp = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (PyObject_CallFinalizerFromDealloc(op) < 0)
        return;   /* resurrected */
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs(op);
    ctx_clear(op);
    Py_CLEAR(self->name);
    tp->tp_free(op);
    Py_DECREF(tp);
}

/* Parse a port number argument; return 0..255 or -1 with an error set. */
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
        port = PyLong_AsLong(v);
    }
    if (port == -1 && PyErr_Occurred())
        return -1;
    if (port < 1 || port > 255) {
        PyErr_Format(PyExc_ValueError, "port_id must be in 1..255, not %ld",
                     port);
        return -1;
    }
    return (int)port;
}

/* Parse a table index argument; return >= 0 or -1 with an error set. */
static int
index_arg(PyObject *v, const char *what)
{
    long idx;

    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    idx = PyLong_AsLong(v);
    if (idx == -1 && PyErr_Occurred())
        return -1;
    if (idx < 0 || idx > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0, not %ld", what, idx);
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
    if (!check_open(self))
        return NULL;
    if (self->prov->query_device == NULL)
        return not_supported(self, "ibv_query_device");
    memset(&a, 0, sizeof(a));
    if (self->prov->query_device(self->h, &a, &st) < 0)
        return pyrdma_raise_status(self->state, &st);
    return pyrdma_struct_new(self->state->device_attr, &a, sizeof(a));
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
    if (!check_open(self))
        return NULL;
    if ((port = port_arg(self, pobj)) < 0)
        return NULL;
    if (self->prov->query_port == NULL)
        return not_supported(self, "ibv_query_port");
    memset(&a, 0, sizeof(a));
    if (self->prov->query_port(self->h, (uint8_t)port, &a, &st) < 0)
        return pyrdma_raise_status(self->state, &st);
    return pyrdma_struct_new(self->state->port_attr, &a, sizeof(a));
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
    if (!check_open(self))
        return -1;
    if ((port = port_arg(self, pobj)) < 0 ||
        (idx = index_arg(iobj, "index")) < 0)
        return -1;
    if (self->prov->query_gid == NULL) {
        not_supported(self, "ibv_query_gid");
        return -1;
    }
    if (self->prov->query_gid(self->h, (uint8_t)port, idx, e, &st) < 0) {
        pyrdma_raise_status(self->state, &st);
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
    return pyrdma_gid_from_raw(((pyrdma_Context *)op)->state, e.gid);
}

static PyObject *
ctx_query_gid_ex(PyObject *op, PyObject *args, PyObject *kw)
{
    struct pyrdma_gid_entry e;

    if (gid_entry((pyrdma_Context *)op, args, kw, "query_gid_ex", &e) < 0)
        return NULL;
    return pyrdma_struct_new(((pyrdma_Context *)op)->state->gid_entry, &e,
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
    if (!check_open(self))
        return NULL;
    if ((port = port_arg(self, pobj)) < 0 ||
        (idx = index_arg(iobj, "index")) < 0)
        return NULL;
    if (self->prov->query_pkey == NULL)
        return not_supported(self, "ibv_query_pkey");
    if (self->prov->query_pkey(self->h, (uint8_t)port, idx, &pkey, &st) < 0)
        return pyrdma_raise_status(self->state, &st);
    return PyLong_FromLong(pkey);
}

static PyObject *
ctx_repr(PyObject *op)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    return PyUnicode_FromFormat("<rdma.ibverbs.Context %R (%s)%s>",
                                self->name ? self->name : Py_None,
                                self->prov ? self->prov->name : "?",
                                self->h ? "" : " closed");
}

static PyObject *
ctx_get_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((pyrdma_Context *)op)->h == NULL);
}

static PyObject *
ctx_get_provider(PyObject *op, void *closure)
{
    pyrdma_Context *self = (pyrdma_Context *)op;
    (void)closure;
    if (self->prov == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->prov->name);
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
    {"close", ctx_close, METH_NOARGS,
     "close($self, /)\n--\n\nClose the device (and, later, its children). "
     "Idempotent."},
    {"__enter__", ctx_enter, METH_NOARGS, NULL},
    {"__exit__", ctx_exit, METH_VARARGS, NULL},
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
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ctx_getset[] = {
    {"closed", ctx_get_closed, NULL, "True once close() was called.", NULL},
    {"provider", ctx_get_provider, NULL,
     "Name of the provider that opened the device.", NULL},
    {"name", ctx_get_name, NULL, "Device name.", NULL},
    {"end_port", ctx_get_end_port, NULL,
     "The rdma.devices.EndPort this context was opened for, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef ctx_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(pyrdma_Context, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot ctx_slots[] = {
    {Py_tp_doc, "Context(name, *, provider='verbs', end_port=None)\n--\n\n"
                "An open RDMA device (ibv_open_device).  Usually made with "
                "rdma.get_verbs(end_port).  A context manager; close() "
                "releases it and everything created from it."},
    {Py_tp_new, ctx_new},
    {Py_tp_init, ctx_init},
    {Py_tp_dealloc, ctx_dealloc},
    {Py_tp_finalize, ctx_finalize},
    {Py_tp_traverse, ctx_traverse},
    {Py_tp_clear, ctx_clear},
    {Py_tp_repr, ctx_repr},
    {Py_tp_methods, ctx_methods},
    {Py_tp_getset, ctx_getset},
    {Py_tp_members, ctx_members},
    {0, NULL},
};

static PyType_Spec ctx_spec = {
    .name = "rdma.ibverbs.Context",
    .basicsize = sizeof(pyrdma_Context),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ctx_slots,
};

int
pyrdma_context_init(PyObject *module, pyrdma_state *st)
{
    st->ContextType = (PyTypeObject *)PyType_FromModuleAndSpec(module,
                                                               &ctx_spec, NULL);
    if (st->ContextType == NULL)
        return -1;
    return PyModule_AddType(module, st->ContextType);
}
