/* dlload.h - load a shared library with dlopen and resolve its symbols. */
#ifndef PYRDMA_DLLOAD_H
#define PYRDMA_DLLOAD_H

/*
 * The one loader of the libraries the C core opens at run time
 * (libibverbs, libibumad; libucp in csrc/fabric/ may use it too).  No
 * Python here: it fails with a struct pyrdma_status (provider.h) that the
 * caller turns into rdma.SysError, so the fabric library, which is built
 * without Python, can use it as well.
 */

#include "provider.h"
#include "settings.h"

/* A library to load. */
struct pyrdma_dllib {
    int setting;          /* the setting (settings.h) naming the file,
                             e.g. PYRDMA_SET_UMAD_LIBRARY: its default is
                             the soname, e.g. "libibumad.so.3" */
    const char *package;  /* what ships it, for the message when it is
                             missing: "libibumad3 (rdma-core)" */
    const char *name;     /* the library in "has no symbol" messages, e.g.
                             "libibumad"; NULL: the file loaded */
    const char *too_old;  /* the hint after a missing symbol, e.g.
                             "rdma-core too old?" */
};

/* A symbol to resolve; a table of them ends with a NULL name. */
struct pyrdma_dlsym {
    const char *name;     /* the symbol, e.g. "umad_init" */
    void **slot;          /* where its address goes */
    int optional;         /* 1: missing leaves *slot NULL, not an error */
};

/*
 * Load lib (dlopen RTLD_NOW | RTLD_LOCAL; $env overrides the file) and
 * resolve every symbol of syms into its slot.  Return the dlopen handle,
 * or NULL with *st set and nothing left loaded: ENOENT from "dlopen"
 * naming the file and the package, or ENOSYS from "dlsym" naming the
 * missing symbol.
 */
void *pyrdma_dlopen(const struct pyrdma_dllib *lib,
                    const struct pyrdma_dlsym *syms,
                    struct pyrdma_status *st);

#endif /* PYRDMA_DLLOAD_H */
