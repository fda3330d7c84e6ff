/* Several threads post on one QP at once through the verbs front end
   (tests/host/test_c_front.py): an unmodified libibverbs program on ucx0,
   one RC QP connected to itself.  WRITERS threads each post ITERS lone
   8-byte RDMA WRITEs (one WR per ibv_post_send, the fabric's one-WR
   shortcut) of an increasing counter into a slot of their own, every
   SIG-th signaled; one thread posts SENDS SENDs (the general way: slots
   and the request ring) and one polls.  A post refused with ENOMEM (the
   send queue full) is retried.  Checks: every signaled WR completes once,
   successfully, and each slot holds its writer's last value; the SENDs'
   data arrive in order.  Prints "ok" and the counts. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "verbs_test.h"

#define WRITERS 3
#define ITERS 40000
#define SIG 64
#define SENDS 2000
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct ibv_qp *qp;
static struct ibv_cq *scq, *rcq;
static struct ibv_mr *mr;
static uint64_t *mem;          /* [0, WRITERS): targets; then sources */
static volatile int failed;

static void
post_retry(struct ibv_send_wr *w)
{
    struct ibv_send_wr *bad;
    int rc;
    while ((rc = ibv_post_send(qp, w, &bad)) == ENOMEM && !failed)
        sched_yield();
    if (rc != 0 && !failed) {
        fprintf(stderr, "ibv_post_send: %s\n", strerror(rc));
        failed = 1;
    }
}

static void *
writer(void *arg)
{
    uintptr_t t = (uintptr_t)arg;
    uint64_t *src = &mem[WRITERS + 64 * (t + 1)];   /* lines apart */
    uint64_t i;
    for (i = 1; i <= ITERS && !failed; i++) {
        struct ibv_sge s = {(uintptr_t)src, 8, mr->lkey};
        struct ibv_send_wr w = {0};
        *src = i;
        w.wr_id = (t << 32) | i;
        w.sg_list = &s;
        w.num_sge = 1;
        w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = i % SIG == 0 ? IBV_SEND_SIGNALED : 0;
        w.wr.rdma.remote_addr = (uintptr_t)&mem[t];
        w.wr.rdma.rkey = mr->rkey;
        post_retry(&w);         /* (the data is taken by then) */
    }
    return NULL;
}

static void *
sender(void *arg)
{
    uint64_t *src = &mem[WRITERS + 64 * (WRITERS + 1)];
    uint64_t i;
    (void)arg;
    for (i = 1; i <= SENDS && !failed; i++) {
        struct ibv_sge s = {(uintptr_t)&src[i], 8, mr->lkey};
        struct ibv_send_wr w = {0};
        src[i] = i;
        w.wr_id = (((uint64_t)WRITERS) << 32) | i;
        w.sg_list = &s;
        w.num_sge = 1;
        w.opcode = IBV_WR_SEND;
        w.send_flags = IBV_SEND_SIGNALED;
        post_retry(&w);
    }
    return NULL;
}

/* Poll both CQs until every signaled WR and every receive completed. */
static int
poll_all(uint64_t *rbuf, long *n_send, long *n_recv)
{
    long want_send = WRITERS * (ITERS / SIG) + SENDS, spins = 0;
    uint64_t next_w[WRITERS + 1] = {0}, next_r = 1;
    struct ibv_wc wc[32];
    int i, n;
    while ((*n_send < want_send || *n_recv < SENDS) && !failed) {
        n = ibv_poll_cq(scq, 32, wc);
        for (i = 0; i < n; i++) {
            uint64_t t = wc[i].wr_id >> 32, k = wc[i].wr_id & 0xffffffff;
            uint64_t step = t < WRITERS ? SIG : 1;
            if (wc[i].status != IBV_WC_SUCCESS || t > WRITERS ||
                k != next_w[t] + step) {
                fprintf(stderr, "send wc %lu:%lu status %s (want %lu)\n",
                        (unsigned long)t, (unsigned long)k,
                        ibv_wc_status_str(wc[i].status),
                        (unsigned long)(next_w[t] + step));
                return 1;
            }
            next_w[t] = k;
            (*n_send)++;
        }
        n = ibv_poll_cq(rcq, 32, wc);
        for (i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS ||
                rbuf[wc[i].wr_id] != next_r) {
                fprintf(stderr, "recv %lu: %s, data %lu, want %lu\n",
                        (unsigned long)wc[i].wr_id,
                        ibv_wc_status_str(wc[i].status),
                        (unsigned long)rbuf[wc[i].wr_id],
                        (unsigned long)next_r);
                return 1;
            }
            next_r++;
            (*n_recv)++;
        }
        if (++spins > 200000000L) {
            fprintf(stderr, "stuck: %ld sends, %ld receives\n", *n_send,
                    *n_recv);
            return 1;
        }
    }
    return 0;
}

static void
setup(uint64_t **rbuf)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_qp_init_attr ia = {0};
    struct ibv_port_attr pa;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    size_t len = 1 << 20;
    int i;
    if (list == NULL || list[0] == NULL)
        DIE("ibv_get_device_list");
    if ((ctx = ibv_open_device(list[0])) == NULL || ibv_query_port(ctx, 1, &pa))
        DIE("ibv_open_device");
    if ((pd = ibv_alloc_pd(ctx)) == NULL)
        DIE("ibv_alloc_pd");
    scq = ibv_create_cq(ctx, 8192, NULL, NULL, 0);
    rcq = ibv_create_cq(ctx, 8192, NULL, NULL, 0);
    if (scq == NULL || rcq == NULL)
        DIE("ibv_create_cq");
    mem = aligned_alloc(4096, len);
    if (mem == NULL)
        DIE("aligned_alloc");
    memset(mem, 0, len);
    if ((mr = ibv_reg_mr(pd, mem, len, ACC)) == NULL)
        DIE("ibv_reg_mr");
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 256;
    ia.cap.max_recv_wr = SENDS;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    if ((qp = ibv_create_qp(pd, &ia)) == NULL)
        DIE("ibv_create_qp");
    if (connect_rc(qp, qp->qp_num, pa.lid, ACC, 7))
        DIE("connect_rc");
    *rbuf = mem + len / 16;
    for (i = 0; i < SENDS; i++) {
        struct ibv_sge s = {(uintptr_t)&(*rbuf)[i], 8, mr->lkey};
        struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s,
                                .num_sge = 1}, *bad;
        if (ibv_post_recv(qp, &w, &bad))
            DIE("ibv_post_recv");
    }
}

int
main(void)
{
    pthread_t th[WRITERS + 1];
    long n_send = 0, n_recv = 0;
    uint64_t *rbuf;
    uintptr_t t;
    int rc;
    alarm(120);
    setup(&rbuf);
    for (t = 0; t < WRITERS; t++)
        if (pthread_create(&th[t], NULL, writer, (void *)t))
            DIE("pthread_create");
    if (pthread_create(&th[WRITERS], NULL, sender, NULL))
        DIE("pthread_create");
    rc = poll_all(rbuf, &n_send, &n_recv);
    if (rc)
        failed = 1;
    for (t = 0; t <= WRITERS; t++)
        pthread_join(th[t], NULL);
    for (t = 0; t < WRITERS && !rc; t++)
        if (mem[t] != ITERS) {
            fprintf(stderr, "slot %lu holds %lu, want %d\n",
                    (unsigned long)t, (unsigned long)mem[t], ITERS);
            rc = 1;
        }
    if (rc || failed)
        return 1;
    printf("ok sends=%ld recvs=%ld\n", n_send, n_recv);
    return 0;
}
