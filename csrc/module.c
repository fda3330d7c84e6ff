/* module.c - rdma._ibverbs: module init, state, constants, device listing. */
#include "rdma.h"

/* The IBV_* constants, generated from <infiniband/verbs.h>. */
static const struct {
    const char *name;
    long long value;
} constants[] = {
#include "constants.inc"
};

/* The providers compiled into this build, in selection order. */
static const struct pyrdma_provider *const builtin[] = {
    &pyrdma_provider_verbs,
    &pyrdma_provider_ucx,
};
#define NPROVIDERS (sizeof(builtin) / sizeof(builtin[0]))

/* The same with the ops they lack pointed at stubs (setup_providers), the
   tables every object calls through. */
static struct pyrdma_provider providers[NPROVIDERS];

/* Fill providers[] from builtin[] once (module init, with the GIL). */
static void
setup_providers(void)
{
    static int done;
    size_t i;

    if (done)
        return;
    for (i = 0; i < NPROVIDERS; i++)
        pyrdma_provider_fill(&providers[i], builtin[i]);
    done = 1;
}

const struct pyrdma_provider *
pyrdma_find_provider(const char *name)
{
    size_t i;
    for (i = 0; i < NPROVIDERS; i++)
        if (strcmp(providers[i].name, name) == 0)
            return &providers[i];
    return NULL;
}

pyrdma_state *
pyrdma_get_state_by_type(PyTypeObject *tp)
{
    PyObject *m = PyType_GetModuleByDef(tp, &pyrdma_module);
    if (m == NULL)
        return NULL;
    return PyModule_GetState(m);
}

PyObject *
pyrdma_gid_type(pyrdma_state *st)
{
    if (st->GID == NULL) {
        PyObject *iba = PyImport_ImportModule("rdma.IBA");
        if (iba == NULL)
            return NULL;
        st->GID = PyObject_GetAttrString(iba, "GID");
        Py_DECREF(iba);
    }
    return st->GID;
}

PyObject *
pyrdma_gid_from_raw(pyrdma_state *st, const uint8_t raw[16])
{
    PyObject *b, *g, *tp = pyrdma_gid_type(st);

    if (tp == NULL)
        return NULL;
    b = PyBytes_FromStringAndSize((const char *)raw, 16);
    if (b == NULL)
        return NULL;
    g = PyObject_CallOneArg(tp, b);
    Py_DECREF(b);
    return g;
}

int
pyrdma_gid_to_raw(pyrdma_state *st, PyObject *v, uint8_t raw[16],
                  const char *what)
{
    Py_buffer b;

    if (PyUnicode_Check(v) || PyLong_Check(v)) {
        /* Textual and integer forms go through rdma.IBA.GID. */
        PyObject *tp = pyrdma_gid_type(st), *g;
        int rc;
        if (tp == NULL)
            return -1;
        g = PyObject_CallOneArg(tp, v);
        if (g == NULL)
            return -1;
        rc = pyrdma_gid_to_raw(st, g, raw, what);
        Py_DECREF(g);
        return rc;
    }
    if (PyObject_GetBuffer(v, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a GID, a str or 16 bytes, "
                     "not %.100s", what, Py_TYPE(v)->tp_name);
        return -1;
    }
    if (b.len != 16) {
        PyBuffer_Release(&b);
        PyErr_Format(PyExc_ValueError, "%s must be 16 bytes, not %zd", what,
                     b.len);
        return -1;
    }
    memcpy(raw, b.buf, 16);
    PyBuffer_Release(&b);
    return 0;
}

/* Return the provider named by a str argument, NULL with an error set. */
static const struct pyrdma_provider *
provider_arg(PyObject *arg)
{
    const struct pyrdma_provider *p;
    const char *name;

    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "provider must be a str, not %.100s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    p = pyrdma_find_provider(name);
    if (p == NULL)
        PyErr_Format(PyExc_ValueError, "unknown RDMA provider '%s'", name);
    return p;
}

static PyObject *
mod_providers(PyObject *m, PyObject *noargs)
{
    PyObject *t = PyTuple_New(NPROVIDERS);
    size_t i;

    (void)m;
    (void)noargs;
    if (t == NULL)
        return NULL;
    for (i = 0; i < NPROVIDERS; i++) {
        PyObject *s = PyUnicode_FromString(providers[i].name);
        if (s == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

static PyObject *
mod_load_provider(PyObject *m, PyObject *arg)
{
    const struct pyrdma_provider *p = provider_arg(arg);
    struct pyrdma_status st = {0};

    if (p == NULL)
        return NULL;
    if (p->load(&st) < 0)
        return pyrdma_raise_status(PyModule_GetState(m), &st);
    Py_RETURN_NONE;
}

static PyObject *
mod_list_devices(PyObject *m, PyObject *arg)
{
    const struct pyrdma_provider *p = provider_arg(arg);
    struct pyrdma_status st = {0};
    struct pyrdma_devinfo *devs = NULL;
    PyObject *list;
    int n = 0, i;

    if (p == NULL)
        return NULL;
    if (p->load(&st) < 0 || p->get_devices(&devs, &n, &st) < 0)
        return pyrdma_raise_status(PyModule_GetState(m), &st);
    list = PyList_New(n);
    if (list == NULL)
        goto out;
    for (i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(sKii)", devs[i].name,
                                    (unsigned long long)devs[i].node_guid,
                                    devs[i].node_type, devs[i].transport_type);
        if (t == NULL) {
            Py_CLEAR(list);
            goto out;
        }
        PyList_SET_ITEM(list, i, t);
    }
out:
    free(devs);
    return list;
}

static PyMethodDef mod_methods[] = {
    {"_providers", mod_providers, METH_NOARGS,
     "_providers($module, /)\n--\n\nNames of the providers in this build."},
    {"_load_provider", mod_load_provider, METH_O,
     "_load_provider($module, name, /)\n--\n\nLoad a provider's libraries; "
     "raise SysError naming what is missing."},
    {"_list_devices", mod_list_devices, METH_O,
     "_list_devices($module, provider, /)\n--\n\nList a provider's devices "
     "as (name, node_guid, node_type, transport_type) tuples."},
    {NULL, NULL, 0, NULL},
};

static int
mod_exec(PyObject *m)
{
    pyrdma_state *st = PyModule_GetState(m);
    PyObject *errors;
    size_t i;

    errors = PyImport_ImportModule("rdma._errors");
    if (errors == NULL)
        return -1;
    st->SysError = PyObject_GetAttrString(errors, "SysError");
    Py_DECREF(errors);
    if (st->SysError == NULL)
        return -1;
    if (PyModule_AddObjectRef(m, "SysError", st->SysError) < 0)
        return -1;
    errors = PyImport_ImportModule("rdma._errors");
    if (errors == NULL)
        return -1;
    st->WRError = PyObject_GetAttrString(errors, "WRError");
    st->AsyncError = PyObject_GetAttrString(errors, "AsyncError");
    Py_DECREF(errors);
    if (st->WRError == NULL || st->AsyncError == NULL)
        return -1;
    if (pyrdma_fork_setup() != 0) {
        PyErr_NoMemory();
        return -1;
    }
    setup_providers();
    /* Object types first: struct fields check against them. */
    if (pyrdma_context_init(m, st) < 0 || pyrdma_pd_init(m, st) < 0 ||
        pyrdma_cq_init(m, st) < 0 || pyrdma_qp_init(m, st) < 0 ||
        pyrdma_mr_init(m, st) < 0 || pyrdma_structs_init(m, st) < 0 ||
        pyrdma_wr_init(m, st) < 0 || pyrdma_capi_init(m, st) < 0 ||
        pyrdma_vcq_init(m, st) < 0 || pyrdma_vqp_init(m, st) < 0 ||
        pyrdma_cm_init(m, st) < 0)
        return -1;
    for (i = 0; i < sizeof(constants) / sizeof(constants[0]); i++)
        if (PyModule_AddIntConstant(m, constants[i].name,
                                    (long)constants[i].value) < 0)
            return -1;
#ifdef PYRDMA_LINK_IBVERBS
    if (PyModule_AddStringConstant(m, "_VERBS_LINKAGE", "linked") < 0)
        return -1;
#else
    if (PyModule_AddStringConstant(m, "_VERBS_LINKAGE", "dlopen") < 0)
        return -1;
#endif
    return 0;
}

static int
mod_traverse(PyObject *m, visitproc visit, void *arg)
{
    pyrdma_state *st = PyModule_GetState(m);
    Py_VISIT(st->SysError);
    Py_VISIT(st->WRError);
    Py_VISIT(st->AsyncError);
    Py_VISIT(st->GID);
    Py_VISIT(st->ContextType);
    Py_VISIT(st->PDType);
    Py_VISIT(st->CQType);
    Py_VISIT(st->CompChannelType);
    Py_VISIT(st->QPType);
    Py_VISIT(st->SRQType);
    Py_VISIT(st->MRType);
    Py_VISIT(st->MWType);
    Py_VISIT(st->AHType);
    Py_VISIT(st->SendBatchType);
    Py_VISIT(st->RecvBatchType);
    Py_VISIT(st->WCArrayType);
    Py_VISIT(st->VirtualQPType);
    Py_VISIT(st->VirtualCQType);
    Py_VISIT(st->CMEventChannelType);
    Py_VISIT(st->CMIDType);
    Py_VISIT(st->device_attr);
    Py_VISIT(st->port_attr);
    Py_VISIT(st->gid_entry);
    Py_VISIT(st->global_route);
    Py_VISIT(st->ah_attr);
    Py_VISIT(st->qp_cap);
    Py_VISIT(st->qp_attr);
    Py_VISIT(st->qp_init_attr);
    Py_VISIT(st->srq_attr);
    Py_VISIT(st->sge);
    Py_VISIT(st->send_wr);
    Py_VISIT(st->recv_wr);
    Py_VISIT(st->wc);
    Py_VISIT(st->async_event);
    Py_VISIT(st->mw_bind_info);
    return 0;
}

static int
mod_clear(PyObject *m)
{
    pyrdma_state *st = PyModule_GetState(m);
    Py_CLEAR(st->SysError);
    Py_CLEAR(st->WRError);
    Py_CLEAR(st->AsyncError);
    Py_CLEAR(st->GID);
    Py_CLEAR(st->ContextType);
    Py_CLEAR(st->PDType);
    Py_CLEAR(st->CQType);
    Py_CLEAR(st->CompChannelType);
    Py_CLEAR(st->QPType);
    Py_CLEAR(st->SRQType);
    Py_CLEAR(st->MRType);
    Py_CLEAR(st->MWType);
    Py_CLEAR(st->AHType);
    Py_CLEAR(st->SendBatchType);
    Py_CLEAR(st->RecvBatchType);
    Py_CLEAR(st->WCArrayType);
    Py_CLEAR(st->VirtualQPType);
    Py_CLEAR(st->VirtualCQType);
    Py_CLEAR(st->CMEventChannelType);
    Py_CLEAR(st->CMIDType);
    Py_CLEAR(st->device_attr);
    Py_CLEAR(st->port_attr);
    Py_CLEAR(st->gid_entry);
    Py_CLEAR(st->global_route);
    Py_CLEAR(st->ah_attr);
    Py_CLEAR(st->qp_cap);
    Py_CLEAR(st->qp_attr);
    Py_CLEAR(st->qp_init_attr);
    Py_CLEAR(st->srq_attr);
    Py_CLEAR(st->sge);
    Py_CLEAR(st->send_wr);
    Py_CLEAR(st->recv_wr);
    Py_CLEAR(st->wc);
    Py_CLEAR(st->async_event);
    Py_CLEAR(st->mw_bind_info);
    return 0;
}

static void
mod_free(void *m)
{
    mod_clear((PyObject *)m);
}

static PyModuleDef_Slot mod_slots[] = {
    {Py_mod_exec, mod_exec},
    {0, NULL},
};

PyModuleDef pyrdma_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rdma._ibverbs",
    .m_doc = "The C core of rdma.ibverbs: verbs objects over providers.",
    .m_size = sizeof(pyrdma_state),
    .m_methods = mod_methods,
    .m_slots = mod_slots,
    .m_traverse = mod_traverse,
    .m_clear = mod_clear,
    .m_free = mod_free,
};

PyMODINIT_FUNC
PyInit__ibverbs(void)
{
    return PyModuleDef_Init(&pyrdma_module);
}
