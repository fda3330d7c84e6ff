/* dlload.c - pyrdma_dlopen(): one loader for the libraries opened at run
   time (no Python here; built into rdma._ibverbs and rdma._umad). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

#include "dlload.h"

/* The file to load: its setting's variable when set and not empty, else
   the setting's default (the soname). */
static const char *
library_file(const struct pyrdma_dllib *lib)
{
    const char *file = pyrdma_setting_env(lib->setting);

    return file != NULL ? file : pyrdma_settings_table[lib->setting].dflt;
}

/* Resolve every symbol of syms from dl; return 0, or -1 with *st naming
   the first required one missing. */
static int
resolve_symbols(void *dl, const char *name, const char *too_old,
                const struct pyrdma_dlsym *syms, struct pyrdma_status *st)
{
    for (; syms->name != NULL; syms++) {
        *syms->slot = dlsym(dl, syms->name);
        if (*syms->slot == NULL && !syms->optional)
            return pyrdma_fail(st, ENOSYS, "dlsym", "%s has no symbol %s (%s)",
                               name, syms->name, too_old);
    }
    return 0;
}

void *
pyrdma_dlopen(const struct pyrdma_dllib *lib, const struct pyrdma_dlsym *syms,
              struct pyrdma_status *st)
{
    const char *file = library_file(lib);
    void *dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);

    if (dl == NULL) {
        const char *why = dlerror();
        pyrdma_fail(st, ENOENT, "dlopen", "cannot load %s (%s); install the "
                    "Debian package %s", file, why ? why : "unknown error",
                    lib->package);
        return NULL;
    }
    if (resolve_symbols(dl, lib->name != NULL ? lib->name : file,
                        lib->too_old, syms, st) < 0) {
        dlclose(dl);
        return NULL;
    }
    return dl;
}
