/* fabric_lib.c - what the standalone fabric library exports: the ops table
   of the software fabric (csrc/fabric/, its table in ops.c), built with
   hidden visibility, behind two functions, and the table of settings. */
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

EXPORT const struct pyrdma_setting *
pyrdma_fabric_settings(int *n)
{
    *n = PYRDMA_NSETTINGS;
    return pyrdma_settings_table;
}

EXPORT int
pyrdma_fabric_setting_check(int id, const char *text, char *err,
                            size_t errlen)
{
    unsigned long long num;

    return pyrdma_setting_parse(id, text, &num, err, errlen);
}

EXPORT const char *
pyrdma_fabric_setting_closest(const char *name)
{
    return pyrdma_setting_closest(name);
}
