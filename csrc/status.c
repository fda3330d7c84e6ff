/* status.c - pyrdma_fail(), the one helper providers need (no Python here:
   it is built into the extension and into the standalone fabric library). */
#include <stdarg.h>
#include <stdio.h>

#include "provider.h"

/* Fill *st and return -1 (providers call this). */
int
pyrdma_fail(struct pyrdma_status *st, int err, const char *func,
            const char *fmt, ...)
{
    va_list ap;

    st->err = err;
    st->func = func;
    st->msg[0] = '\0';
    if (fmt != NULL && fmt[0] != '\0') {
        va_start(ap, fmt);
        vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
        va_end(ap);
    }
    return -1;
}
