/* c_front_teardown.c - teardown orders libibverbs allows, on ucx0, for
   tests/host/test_c_front.py: a CQ or PD destroyed while in use (EBUSY),
   a buffer freed (or unmapped, and the address mapped again) before its
   MR is deregistered, the device closed with objects alive (a peer's
   RDMA WRITE to its MR fails and changes nothing), a blocked
   ibv_get_cq_event interrupted by a signal, and the device list released
   with free() as qperf does.  Prints one
   "name=value" line per check; "done=1" last (a crash never gets there). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"


static struct ibv_device *
find(struct ibv_device **list, const char *name)
{
    for (; *list != NULL; list++)
        if (strcmp(ibv_get_device_name(*list), name) == 0)
            return *list;
    fprintf(stderr, "no %s\n", name);
    exit(2);
}

static const char *
err(int rc)
{
    return rc == 0 ? "0" : strerror(rc);
}

/* Objects destroyed out of order, then the device closed with some left. */
static void
out_of_order(struct ibv_device *dev)
{
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_qp_init_attr qa = {0};
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buf, *again;
    if (ctx == NULL || (pd = ibv_alloc_pd(ctx)) == NULL ||
        (cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)) == NULL)
        DIE("objects");
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if ((qp = ibv_create_qp(pd, &qa)) == NULL)
        DIE("ibv_create_qp");
    if ((buf = malloc(8192)) == NULL ||
        (mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE |
                         IBV_ACCESS_REMOTE_WRITE)) == NULL)
        DIE("ibv_reg_mr");
    printf("cq_before_qp=%s\n", err(ibv_destroy_cq(cq)));
    printf("pd_before_mr=%s\n", err(ibv_dealloc_pd(pd)));
    free(buf);                          /* before deregistering it */
    printf("dereg_freed_buffer=%s\n", err(ibv_dereg_mr(mr)));
    /* the heap is whole: the freed block is handed out again */
    if ((again = malloc(8192)) == NULL)
        DIE("malloc");
    memset(again, 0x5a, 8192);
    free(again);
    printf("pd_before_qp=%s\n", err(ibv_dealloc_pd(pd)));
    printf("close_with_objects=%s\n", err(ibv_close_device(ctx)));
}

/* A mapping unmapped before its MR is deregistered, and a new mapping
   made at the same address meanwhile: ibv_dereg_mr leaves it alone. */
static void
unmapped_before_dereg(struct ibv_device *dev)
{
    struct ibv_context *ctx = ibv_open_device(dev);
    size_t n = 1 << 20, changed = 0, k;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    char *a, *b;
    if (ctx == NULL || (pd = ibv_alloc_pd(ctx)) == NULL)
        DIE("pd");
    a = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    if (a == MAP_FAILED)
        DIE("mmap");
    memset(a, 1, n);
    if ((mr = ibv_reg_mr(pd, a, n, IBV_ACCESS_LOCAL_WRITE |
                         IBV_ACCESS_REMOTE_WRITE)) == NULL)
        DIE("ibv_reg_mr");
    munmap(a, n);
    b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    if (b == MAP_FAILED)
        DIE("mmap");
    memset(b, 7, n);
    printf("dereg_unmapped=%s", err(ibv_dereg_mr(mr)));
    for (k = 0; k < n; k++)
        changed += b[k] != 7;
    printf(" %zu\n", changed);
    munmap(b, n);
    printf("after_unmapped=%s", err(ibv_dealloc_pd(pd)));
    printf(" %s\n", err(ibv_close_device(ctx)));
}

/* One side's context, PD, CQ and RC QP. */
struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
};

static void
side_open(struct ibv_device *dev, struct side *s)
{
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    if ((s->ctx = ibv_open_device(dev)) == NULL ||
        (s->pd = ibv_alloc_pd(s->ctx)) == NULL ||
        (s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0)) == NULL)
        DIE("side");
    qa.send_cq = qa.recv_cq = s->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if ((s->qp = ibv_create_qp(s->pd, &qa)) == NULL)
        DIE("ibv_create_qp");
}

/* The device closed with its MR alive: a peer's RDMA WRITE to the MR
   afterwards fails, and no byte lands (the kernel deregisters it). */
static void
write_after_close(struct ibv_device *dev)
{
    static char target[4096], src[64];
    struct ibv_port_attr pa;
    struct side t, w;
    struct ibv_mr *tmr, *wmr;
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;
    int i, n = 0;
    size_t k, changed = 0;
    side_open(dev, &t);
    side_open(dev, &w);
    if (ibv_query_port(t.ctx, 1, &pa) ||
        (tmr = ibv_reg_mr(t.pd, target, sizeof(target),
                          IBV_ACCESS_LOCAL_WRITE |
                          IBV_ACCESS_REMOTE_WRITE)) == NULL ||
        (wmr = ibv_reg_mr(w.pd, src, sizeof(src), 0)) == NULL ||
        connect_rc(t.qp, w.qp->qp_num, pa.lid, IBV_ACCESS_REMOTE_WRITE, 1) ||
        connect_rc(w.qp, t.qp->qp_num, pa.lid, IBV_ACCESS_REMOTE_WRITE, 1))
        DIE("connect");
    printf("close_with_mr=%s\n", err(ibv_close_device(t.ctx)));
    memset(src, 0x66, sizeof(src));
    memset(&wr, 0, sizeof(wr));
    sge.addr = (uintptr_t)src;
    sge.length = sizeof(src);
    sge.lkey = wmr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)target;
    wr.wr.rdma.rkey = tmr->rkey;
    if (ibv_post_send(w.qp, &wr, &bad))
        DIE("ibv_post_send");
    for (i = 0; i < 5000000 && n == 0; i++)
        n = ibv_poll_cq(w.cq, 1, &wc);
    for (k = 0; k < sizeof(target); k++)
        changed += target[k] != 0;
    printf("write_after_close=%s %zu\n",
           n == 1 ? ibv_wc_status_str(wc.status) : "no completion",
           changed);
}

static void
on_alarm(int sig)
{
    (void)sig;
}

/* A blocked ibv_get_cq_event returns -1/EINTR when a signal handler
   (installed without SA_RESTART) runs, as libibverbs' read() does. */
static void
interrupted_wait(struct ibv_device *dev)
{
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_comp_channel *ch;
    struct sigaction sa;
    struct itimerval it = {{0, 0}, {0, 200000}};
    struct ibv_cq *cq, *ecq;
    void *ectx;
    int rc;
    if (ctx == NULL || (ch = ibv_create_comp_channel(ctx)) == NULL ||
        (cq = ibv_create_cq(ctx, 16, NULL, ch, 0)) == NULL ||
        ibv_req_notify_cq(cq, 0) != 0)
        DIE("channel");
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;           /* no SA_RESTART */
    sigaction(SIGALRM, &sa, NULL);
    setitimer(ITIMER_REAL, &it, NULL);
    errno = 0;
    rc = ibv_get_cq_event(ch, &ecq, &ectx);
    printf("get_cq_event_signal=%d %s\n", rc, strerror(errno));
    printf("destroy_after=%s", err(ibv_destroy_cq(cq)));
    printf(" %s", err(ibv_destroy_comp_channel(ch)));
    printf(" %s\n", err(ibv_close_device(ctx)));
}

int
main(int argc, char **argv)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_device *dev;
    if (list == NULL)
        DIE("ibv_get_device_list");
    dev = find(list, argc > 1 ? argv[1] : "ucx0");
    setvbuf(stdout, NULL, _IONBF, 0);
    out_of_order(dev);
    unmapped_before_dereg(dev);
    write_after_close(dev);
    interrupted_wait(dev);
    free(list);                         /* qperf does, not ibv_free_... */
    printf("done=1\n");
    return 0;
}
