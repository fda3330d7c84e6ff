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
static const struct pyrdma_provider *const providers[] = {
    &pyrdma_provider_verbs,
};
#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))

const struct pyrdma_provider *
pyrdma_find_provider(const char *name)
{
    size_t i;
    for (i = 0; i < NPROVIDERS; i++)
        if (strcmp(providers[i]->name, name) == 0)
            return providers[i];
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
        PyObject *s = PyUnicode_FromString(providers[i]->name);
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
    if (pyrdma_structs_init(m, st) < 0 || pyrdma_context_init(m, st) < 0)
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
    Py_VISIT(st->GID);
    Py_VISIT(st->ContextType);
    Py_VISIT(st->device_attr);
    Py_VISIT(st->port_attr);
    Py_VISIT(st->gid_entry);
    return 0;
}

static int
mod_clear(PyObject *m)
{
    pyrdma_state *st = PyModule_GetState(m);
    Py_CLEAR(st->SysError);
    Py_CLEAR(st->GID);
    Py_CLEAR(st->ContextType);
    Py_CLEAR(st->device_attr);
    Py_CLEAR(st->port_attr);
    Py_CLEAR(st->gid_entry);
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
