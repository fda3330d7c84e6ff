/* fabric_lib.c - what the standalone fabric library exports: the ops table
   of the software fabric (csrc/fabric/, its table in ops.c), built with
   hidden visibility, behind two functions. */
#include "fabric_lib.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT const struct pyrdma_provider *
pyrdma_fabric_provider(void)
{
    return &pyrdma_provider_ucx;
}

EXPORT int
pyrdma_fabric_version(void)
{
    return PYRDMA_FABRIC_LIB_VERSION;
}
