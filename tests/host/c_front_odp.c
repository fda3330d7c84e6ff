/* On-demand paging through the verbs front end
   (tests/host/test_c_front.py): an unmodified libibverbs program on ucx0,
   an RC QP connected to itself.  The ODP caps of ibv_query_device_ex; an
   IBV_ACCESS_ON_DEMAND MR over fresh anonymous memory no one touched
   yet, a QP whose access flags carry ON_DEMAND (as rdma-core's tests give
   them), a WRITE and a READ through it; ibv_advise_mr's prefetch and its
   errors.  Prints key=value lines. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_test.h"

#define SZ (1 << 20)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND)

static struct ibv_cq *cq;

static const char *
status_of(void)
{
    struct ibv_wc wc;
    int i, n;
    for (i = 0; i < 50000; i++) {
        n = ibv_poll_cq(cq, 1, &wc);
        if (n == 1)
            return ibv_wc_status_str(wc.status);
        if (n < 0)
            return "poll error";
        usleep(100);
    }
    return "none";
}

static const char *
rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *l, size_t loff,
     struct ibv_mr *r, size_t roff, uint32_t len)
{
    struct ibv_sge sge = {(uintptr_t)l->addr + loff, len, l->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.rkey = r->rkey;
    wr.wr.rdma.remote_addr = (uintptr_t)r->addr + roff;
    if (ibv_post_send(qp, &wr, &bad))
        return "post failed";
    return status_of();
}

static void
caps(struct ibv_context *ctx)
{
    struct ibv_device_attr_ex a;
    memset(&a, 0, sizeof(a));
    if (ibv_query_device_ex(ctx, NULL, &a))
        DIE("ibv_query_device_ex");
    printf("odp_caps=%#lx %#x %#x %#x\n",
           (unsigned long)a.odp_caps.general_caps,
           a.odp_caps.per_transport_caps.rc_odp_caps,
           a.odp_caps.per_transport_caps.uc_odp_caps,
           a.odp_caps.per_transport_caps.ud_odp_caps);
}

static void
advise(struct ibv_pd *pd, struct ibv_mr *odp, struct ibv_mr *plain)
{
    struct ibv_sge in = {(uintptr_t)odp->addr + 4096, 8192, odp->lkey};
    struct ibv_sge out = {(uintptr_t)odp->addr + SZ - 8, 16, odp->lkey};
    struct ibv_sge pl = {(uintptr_t)plain->addr, 64, plain->lkey};
    printf("advise=%d %d %d\n",
           ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                         IBV_ADVISE_MR_FLAG_FLUSH, &in, 1),
           ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &in, 1),
           ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &in,
                         1));
    printf("advise_errors=%s|%s|%s|%s\n",
           strerror(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0,
                                  &out, 1)),
           strerror(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0,
                                  &pl, 1)),
           strerror(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80,
                                  &in, 1)),
           strerror(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0,
                                  &in, 0)));
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL;
    struct ibv_port_attr port;
    struct ibv_qp_init_attr ia;
    struct ibv_pd *pd;
    struct ibv_mr *odp, *plain;
    struct ibv_qp *qp;
    char *mem, *small = calloc(1, 4096);
    int i, rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_port(ctx, 1, &port))
        DIE("ucx0");
    caps(ctx);
    mem = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (mem == MAP_FAILED || pd == NULL || cq == NULL)
        DIE("objects");
    odp = ibv_reg_mr(pd, mem, SZ, ACC);     /* no page touched yet */
    plain = ibv_reg_mr(pd, small, 4096, ACC & ~IBV_ACCESS_ON_DEMAND);
    if (odp == NULL || plain == NULL)
        DIE("ibv_reg_mr");
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &ia);
    if (qp == NULL)
        DIE("ibv_create_qp");
    rc = connect_rc(qp, qp->qp_num, port.lid, ACC, 7);
    printf("connect=%d\n", rc);
    if (rc)
        return 1;
    memcpy(small, "odp-write", 10);
    printf("write=%s %s\n", rdma(qp, IBV_WR_RDMA_WRITE, plain, 0, odp,
                                 SZ / 2, 10), mem + SZ / 2);
    memcpy(mem + SZ - 4096, "odp-read", 9);
    printf("read=%s %s\n", rdma(qp, IBV_WR_RDMA_READ, plain, 100, odp,
                                SZ - 4096, 9), small + 100);
    advise(pd, odp, plain);
    if (ibv_destroy_qp(qp) || ibv_dereg_mr(odp) || ibv_dereg_mr(plain) ||
        ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
        DIE("teardown");
    ibv_free_device_list(list);
    munmap(mem, SZ);
    free(small);
    return 0;
}
