/* errors.c - raising rdma.SysError from provider failures. */
#include <errno.h>

#include "rdma.h"

PyObject *
pyrdma_raise_sys(pyrdma_state *st, int err, const char *func, const char *msg)
{
    PyObject *exc;

    if (msg != NULL && msg[0] != '\0')
        exc = PyObject_CallFunction(st->SysError, "iss", err, func, msg);
    else
        exc = PyObject_CallFunction(st->SysError, "is", err, func);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *
pyrdma_raise_status(pyrdma_state *st, const struct pyrdma_status *s)
{
    return pyrdma_raise_sys(st, s->err, s->func ? s->func : "?", s->msg);
}

PyObject *
pyrdma_not_supported(pyrdma_obj *o, const char *verb)
{
    char msg[128];
    PyOS_snprintf(msg, sizeof(msg), "the %s provider does not implement it",
                  o->prov ? o->prov->name : "?");
    return pyrdma_raise_sys(o->state, EOPNOTSUPP, verb, msg);
}
