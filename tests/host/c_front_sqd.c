/* Send WRs posted in SQD through the verbs front end
   (tests/host/test_c_front.py): an unmodified libibverbs program on ucx0,
   an RC QP connected to itself.  RTS -> SQD, the drained event; a WRITE
   and an inline WRITE posted in SQD are taken (0), nothing is sent or
   completed while the QP stays in SQD; SQD -> RTS and both complete, in
   order, with their data.  Then two WRs posted in SQD and the move to
   ERR: both flush.  Prints key=value lines. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_test.h"

#define SZ 4096
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
             IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_cq *cq;

/* Up to n completions within about ms milliseconds, into wc. */
static int
poll_for(struct ibv_wc *wc, int n, int ms)
{
    int got = 0, i;
    for (i = 0; i < ms * 10 && got < n; i++) {
        int r = ibv_poll_cq(cq, n - got, wc + got);
        if (r < 0)
            return r;
        got += r;
        if (got < n)
            usleep(100);
    }
    return got;
}

static int
set_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = s;
    a.en_sqd_async_notify = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE |
                         (s == IBV_QPS_SQD ? IBV_QP_EN_SQD_ASYNC_NOTIFY : 0));
}

/* 1 once IBV_EVENT_SQ_DRAINED came for qp. */
static int
drained(struct ibv_qp *qp)
{
    struct ibv_async_event ev;
    int ok;
    if (ibv_get_async_event(ctx, &ev))
        return 0;
    ok = ev.event_type == IBV_EVENT_SQ_DRAINED && ev.element.qp == qp;
    ibv_ack_async_event(&ev);
    return ok;
}

static int
post_write(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t id, size_t off,
           size_t roff, int flags)
{
    struct ibv_sge sge = {(uintptr_t)mr->addr + off, 8, mr->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | flags;
    wr.wr.rdma.rkey = mr->rkey;
    wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + roff;
    return ibv_post_send(qp, &wr, &bad);
}

static void
held_then_rts(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
    struct ibv_wc wc[4];
    int rc1, rc2, n;
    memcpy(buf, "held-wr", 8);
    memcpy(buf + 8, "inline!", 8);
    rc1 = set_state(qp, IBV_QPS_SQD);
    printf("sqd=%d %d\n", rc1, rc1 == 0 && drained(qp));
    rc1 = post_write(qp, mr, 1, 0, 1024, 0);
    rc2 = post_write(qp, mr, 2, 8, 1032, IBV_SEND_INLINE);
    memcpy(buf + 8, "reused", 7);      /* inline: taken at post time */
    n = poll_for(wc, 2, 300);
    printf("posted_in_sqd=%d %d %d %d\n", rc1, rc2, n, buf[1024] != 0);
    printf("rts=%d\n", set_state(qp, IBV_QPS_RTS));
    n = poll_for(wc, 2, 5000);
    printf("completed=%d %d %d %s %s\n", n, n > 0 ? (int)wc[0].wr_id : -1,
           n > 1 ? (int)wc[1].wr_id : -1,
           ibv_wc_status_str(n > 0 ? wc[0].status : IBV_WC_GENERAL_ERR),
           ibv_wc_status_str(n > 1 ? wc[1].status : IBV_WC_GENERAL_ERR));
    printf("data=%s %s\n", buf + 1024, buf + 1032);
}

static void
held_then_err(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
    struct ibv_wc wc[4];
    int rc1, rc2, n;
    memset(buf + 2048, 0, 16);
    rc1 = set_state(qp, IBV_QPS_SQD);
    printf("sqd2=%d %d\n", rc1, rc1 == 0 && drained(qp));
    rc1 = post_write(qp, mr, 3, 0, 2048, 0);
    rc2 = post_write(qp, mr, 4, 0, 2056, 0);
    printf("err=%d %d %d\n", rc1, rc2, set_state(qp, IBV_QPS_ERR));
    n = poll_for(wc, 3, 500);
    printf("flushed=%d %d %d %s %s %d\n", n,
           n > 0 ? (int)wc[0].wr_id : -1, n > 1 ? (int)wc[1].wr_id : -1,
           ibv_wc_status_str(n > 0 ? wc[0].status : IBV_WC_GENERAL_ERR),
           ibv_wc_status_str(n > 1 ? wc[1].status : IBV_WC_GENERAL_ERR),
           buf[2048] != 0 || buf[2056] != 0);
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_port_attr port;
    struct ibv_qp_init_attr ia;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_qp *qp;
    char *buf = calloc(1, SZ);
    int i;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_port(ctx, 1, &port))
        DIE("ucx0");
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    mr = pd != NULL ? ibv_reg_mr(pd, buf, SZ, ACC) : NULL;
    if (pd == NULL || cq == NULL || mr == NULL)
        DIE("objects");
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 16;
    qp = ibv_create_qp(pd, &ia);
    if (qp == NULL || connect_rc(qp, qp->qp_num, port.lid, ACC, 7))
        DIE("qp");
    held_then_rts(qp, mr, buf);
    held_then_err(qp, mr, buf);
    if (ibv_destroy_qp(qp) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) ||
        ibv_dealloc_pd(pd) || ibv_close_device(ctx))
        DIE("teardown");
    ibv_free_device_list(list);
    free(buf);
    return 0;
}
