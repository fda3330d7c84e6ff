/* fabric_lib.h - the interface of the standalone fabric library
   (librdma_fabric.so): the software fabric's provider ops table, with no
   Python in it. */
#ifndef PYRDMA_FABRIC_LIB_H
#define PYRDMA_FABRIC_LIB_H

#include "provider.h"
#include "settings.h"

/* Version of this interface (bumped when struct pyrdma_provider changes). */
#define PYRDMA_FABRIC_LIB_VERSION 1

/* The ops table of the software fabric (device "ucx0"); call its load()
   first.  Never NULL. */
const struct pyrdma_provider *pyrdma_fabric_provider(void);

/* PYRDMA_FABRIC_LIB_VERSION as this library was built. */
int pyrdma_fabric_version(void);

/* The table of settings (settings.h), *n rows; for `python -m rdma.fabric
   config` (rdma/fabric/settings.py reads it with ctypes). */
const struct pyrdma_setting *pyrdma_fabric_settings(int *n);

/* Check text as the value of setting id (pyrdma_setting_parse): 0, or -1
   with the message in err. */
int pyrdma_fabric_setting_check(int id, const char *text, char *err,
                                size_t errlen);

/* The setting whose name is closest to name, or NULL. */
const char *pyrdma_fabric_setting_closest(const char *name);

#endif /* PYRDMA_FABRIC_LIB_H */
