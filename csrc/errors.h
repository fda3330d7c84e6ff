/* errors.h - raising rdma.SysError; errors.c is built into both
   extensions (rdma._ibverbs and rdma._umad). */
#ifndef PYRDMA_ERRORS_H
#define PYRDMA_ERRORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "provider.h"

/* Raise cls(err, func, msg) (rdma.SysError; no msg when it is NULL or
   empty); return NULL. */
PyObject *pyrdma_sys_error(PyObject *cls, int err, const char *func,
                           const char *msg);
/* Raise cls(err, func, msg) from a failed call's status; return NULL. */
PyObject *pyrdma_status_error(PyObject *cls, const struct pyrdma_status *s);

#endif /* PYRDMA_ERRORS_H */
