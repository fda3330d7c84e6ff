/* fabric_lib.h - the interface of the standalone fabric library
   (librdma_fabric.so): the software fabric's provider ops table, with no
   Python in it. */
#ifndef PYRDMA_FABRIC_LIB_H
#define PYRDMA_FABRIC_LIB_H

#include "provider.h"

/* Version of this interface (bumped when struct pyrdma_provider changes). */
#define PYRDMA_FABRIC_LIB_VERSION 1

/* The ops table of the software fabric (device "ucx0"); call its load()
   first.  Never NULL. */
const struct pyrdma_provider *pyrdma_fabric_provider(void);

/* PYRDMA_FABRIC_LIB_VERSION as this library was built. */
int pyrdma_fabric_version(void);

#endif /* PYRDMA_FABRIC_LIB_H */
