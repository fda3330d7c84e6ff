/* errors.c - raising rdma.SysError (built into rdma._ibverbs and
   rdma._umad: it uses nothing but the exception class it is given). */
#include "errors.h"

PyObject *
pyrdma_sys_error(PyObject *cls, int err, const char *func, const char *msg)
{
    PyObject *exc;

    if (msg != NULL && msg[0] != '\0')
        exc = PyObject_CallFunction(cls, "iss", err, func, msg);
    else
        exc = PyObject_CallFunction(cls, "is", err, func);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *
pyrdma_status_error(PyObject *cls, const struct pyrdma_status *s)
{
    return pyrdma_sys_error(cls, s->err, s->func ? s->func : "?", s->msg);
}
