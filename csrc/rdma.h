/* rdma.h - object structs, module state and prototypes shared by csrc/. */
#ifndef PYRDMA_RDMA_H
#define PYRDMA_RDMA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "provider.h"

/* Module state (PEP 573): exceptions and heap types. */
typedef struct {
    PyObject *SysError;          /* rdma.SysError, from rdma._errors */
    PyObject *GID;               /* rdma.IBA.GID, imported on first use */
    PyTypeObject *ContextType;   /* rdma.ibverbs.Context */
    PyTypeObject *device_attr;   /* struct types, see structs.c */
    PyTypeObject *port_attr;
    PyTypeObject *gid_entry;
} pyrdma_state;

/* A Context: an open device of one provider. */
typedef struct {
    PyObject_HEAD
    const struct pyrdma_provider *prov; /* the provider that opened it */
    void *h;                  /* provider context handle, NULL once closed */
    PyObject *name;           /* device name (str) */
    PyObject *end_port;       /* the EndPort it was opened for, or None */
    pyrdma_state *state;      /* module state, cached for fast access */
    PyObject *weakreflist;    /* weak references to this object */
} pyrdma_Context;

/* The generic struct object behind ibv.device_attr, ibv.port_attr, ... */
struct pyrdma_structdef;
typedef struct {
    PyObject_HEAD
    const struct pyrdma_structdef *def;  /* field table of this type */
    uint64_t setmask;                    /* bit i: field i was assigned */
    union {
        uint64_t u;
        double d;
        void *p;
    } data[];                            /* the C struct itself */
} pyrdma_Struct;

extern PyModuleDef pyrdma_module;

/* module.c */
pyrdma_state *pyrdma_get_state_by_type(PyTypeObject *tp);
const struct pyrdma_provider *pyrdma_find_provider(const char *name);
/* Return rdma.IBA.GID (borrowed, imported on first use), NULL with an error. */
PyObject *pyrdma_gid_type(pyrdma_state *st);
/* Return a new reference to rdma.IBA.GID(raw), NULL with an error set. */
PyObject *pyrdma_gid_from_raw(pyrdma_state *st, const uint8_t raw[16]);

/* errors.c */
/* Raise SysError from a provider status; return NULL. */
PyObject *pyrdma_raise_status(pyrdma_state *st, const struct pyrdma_status *s);
/* Raise SysError(err, func, msg); return NULL. */
PyObject *pyrdma_raise_sys(pyrdma_state *st, int err, const char *func,
                           const char *msg);

/* structs.c */
int pyrdma_structs_init(PyObject *module, pyrdma_state *st);
/* Return a new struct object of type tp holding a copy of the C struct. */
PyObject *pyrdma_struct_new(PyTypeObject *tp, const void *cstruct, size_t size);

/* context.c */
int pyrdma_context_init(PyObject *module, pyrdma_state *st);

#endif /* PYRDMA_RDMA_H */
