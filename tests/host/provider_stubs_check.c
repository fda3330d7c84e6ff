/* provider_stubs_check.c - pyrdma_provider_fill() on a provider that
   implements no optional op: each one the object model may call is a
   stub failing with EOPNOTSUPP that names the verb (tests/host/
   test_errors.py builds it with csrc/provider_stubs.c and status.c).
   Prints "VERB errno" per op and exits 0, or 1 if an op is left NULL. */
#include <stdio.h>
#include <string.h>

#include "provider.h"

static int
report(const char *op, int rc, const struct pyrdma_status *st)
{
    printf("%s %d %d %s\n", op, rc, st->err, st->func ? st->func : "-");
    return 0;
}

int
main(void)
{
    struct pyrdma_provider none, p;
    struct pyrdma_status st;
    void *h = NULL;
    uint32_t rkey = 0;
    int fd = -1, actual = 0;

    memset(&none, 0, sizeof(none));
    none.name = "none";
    pyrdma_provider_fill(&p, &none);
    if (p.alloc_mw == NULL || p.resize_cq == NULL || p.create_ah == NULL ||
        p.cm_create_channel == NULL)
        return 1;
    memset(&st, 0, sizeof(st));
    report("alloc_mw", p.alloc_mw(NULL, 1, &h, &rkey, &st), &st);
    memset(&st, 0, sizeof(st));
    report("resize_cq", p.resize_cq(NULL, 16, &actual, &st), &st);
    memset(&st, 0, sizeof(st));
    report("cm_create_channel", p.cm_create_channel(&h, &fd, &st), &st);
    return 0;
}
