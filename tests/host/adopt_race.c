/* adopt_race.c - stores made by other threads while ibv_reg_mr adopts
   their pages must not be lost (tests/host/test_fabric_adopt.py).

   Run on ucx0 through the verbs front end.  NTHR threads each own a slice
   of a BUF-byte buffer (mmap, private anonymous) and keep storing a
   counter that goes up by one into every 8-byte word of their slice, in
   turn (one pass lasts PASS seconds), remembering what they stored last
   in each.  The main thread
   registers the whole buffer (remote write: reg_mr adopts it) while they
   run, lets them go on, deregisters it (the pages are given back),
   registers it again, stops them
   and checks that every word holds what its thread stored there last.
   Prints "adopted OK <words>" or the first wrong word, and exits 0 only
   if all are right. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "verbs_test.h"

#define BUF (64u << 20)
#define NTHR 2

static volatile uint64_t *buf;
static uint64_t *last;          /* what was stored last in each word */
static volatile int stop;
static volatile uint64_t rounds[NTHR];

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One pass over the slice, paced to last PASS seconds (a store lost in
   the adoption's copy is never written again), then again until stop. */
#define PASS 0.25

static void *
writer(void *arg)
{
    long t = (long)arg;
    size_t words = BUF / 8 / NTHR, lo = t * words, i;
    uint64_t v = (uint64_t)t << 56;
    while (!stop) {
        double t0 = now();
        for (i = lo; i < lo + words && !stop; i++) {
            v++;
            buf[i] = v;
            last[i] = v;
            if ((i & 4095) == 0)
                while (now() - t0 < PASS * (double)(i - lo) / words)
                    ;
        }
        rounds[t]++;
    }
    return NULL;
}

static void
ms(int n)
{
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int
main(void)
{
    struct ibv_device **l;
    struct ibv_context *ctx = NULL;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    pthread_t th[NTHR];
    int n, i, acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                    IBV_ACCESS_REMOTE_READ;
    size_t w, bad = 0;

    buf = mmap(NULL, BUF, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    last = calloc(BUF / 8, 8);
    if (buf == MAP_FAILED || last == NULL)
        return perror("mmap"), 2;
    l = ibv_get_device_list(&n);
    for (i = 0; l != NULL && i < n; i++)
        if (strcmp(ibv_get_device_name(l[i]), "ucx0") == 0)
            ctx = ibv_open_device(l[i]);
    if (ctx == NULL || (pd = ibv_alloc_pd(ctx)) == NULL)
        return fprintf(stderr, "no ucx0\n"), 2;
    /* touch half the pages only: the rest are still unpopulated when
       the writers reach them during the adoption */
    memset((void *)buf, 0, BUF / 2);
    for (i = 0; i < NTHR; i++)
        pthread_create(&th[i], NULL, writer, (void *)(long)i);
    ms(20);
    mr = ibv_reg_mr(pd, (void *)buf, BUF, acc);
    if (mr == NULL)
        return perror("ibv_reg_mr"), 2;
    if (!in_sysv_segment(buf))
        return fprintf(stderr, "not adopted\n"), 3;
    ms(50);
    if (ibv_dereg_mr(mr) != 0)
        return perror("ibv_dereg_mr"), 2;
    if (in_sysv_segment(buf))
        return fprintf(stderr, "not given back\n"), 3;
    ms(20);
    mr = ibv_reg_mr(pd, (void *)buf, BUF, acc);
    if (mr == NULL)
        return perror("ibv_reg_mr"), 2;
    ms(100);
    stop = 1;
    for (i = 0; i < NTHR; i++)
        pthread_join(th[i], NULL);
    for (w = 0; w < BUF / 8; w++)
        if (buf[w] != last[w]) {
            if (bad++ == 0)
                printf("word %zu: %#llx, stored last %#llx\n", w,
                       (unsigned long long)buf[w],
                       (unsigned long long)last[w]);
        }
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(l);
    if (bad) {
        printf("%zu words lost\n", bad);
        return 1;
    }
    printf("adopted OK %zu rounds %llu %llu\n", (size_t)(BUF / 8),
           (unsigned long long)rounds[0], (unsigned long long)rounds[1]);
    return 0;
}
