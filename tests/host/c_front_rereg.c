/* ibv_rereg_mr through the verbs front end (tests/host/test_c_front.py):
   an unmodified libibverbs program on ucx0, RC QPs connected to
   themselves.  A new access (keys kept; a WRITE no longer granted is
   REM_ACCESS_ERR), a new range (new keys; the old rkey reaches nothing),
   a new PD (mr->pd follows; a QP of the old PD is refused; the new PD is
   busy while the MR is in it).  Bad input: unknown flags, access without
   IBV_REREG_MR_CHANGE_ACCESS, a new range with no address (libibverbs'
   IBV_REREG_MR_ERR_INPUT), flags 0 (the device's EINVAL,
   IBV_REREG_MR_ERR_CMD).  Prints key=value lines. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define DIE(what) do { perror(what); exit(2); } while (0)
#define SZ 4096
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
             IBV_ACCESS_REMOTE_READ)

static struct ibv_cq *cq;
static struct ibv_context *ctx;
static uint16_t lid;

static const char *
status_of(void)
{
    struct ibv_wc wc;
    int i, n;
    for (i = 0; i < 5000000; i++) {
        n = ibv_poll_cq(cq, 1, &wc);
        if (n == 1)
            return ibv_wc_status_str(wc.status);
        if (n < 0)
            return "poll error";
        if (i % 1000 == 999)
            usleep(100);
    }
    return "none";
}

/* A new RC QP of pd in RTS, connected to itself. */
static struct ibv_qp *
self_qp(struct ibv_pd *pd)
{
    struct ibv_qp_init_attr ia = {0};
    struct ibv_qp_attr a = {0};
    struct ibv_qp *qp;
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &ia);
    if (qp == NULL)
        DIE("ibv_create_qp");
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = ACC;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        DIE("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        DIE("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC))
        DIE("RTS");
    return qp;
}

/* On a fresh QP of pd: WRITE the 8 bytes of text (copied into smr) to
   raddr through rkey; the completion's status. */
static const char *
write8(struct ibv_pd *pd, struct ibv_mr *smr, const char *src,
       uint32_t rkey, void *raddr)
{
    struct ibv_qp *qp = self_qp(pd);
    struct ibv_sge sge = {(uintptr_t)smr->addr, 8, smr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    const char *st;
    memset(smr->addr, 0, 8);
    memcpy(smr->addr, src, strlen(src) < 8 ? strlen(src) : 8);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.rkey = rkey;
    wr.wr.rdma.remote_addr = (uintptr_t)raddr;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("post write");
    st = status_of();
    if (ibv_destroy_qp(qp))
        DIE("ibv_destroy_qp");
    return st;
}

static void
rereg_access(struct ibv_pd *pd, struct ibv_mr *src, struct ibv_mr *mr,
             char *buf)
{
    uint32_t lkey = mr->lkey, rkey = mr->rkey;
    int rc;
    printf("write_before=%s\n", write8(pd, src, "before!", rkey, buf));
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    printf("access=%d %d\n", rc, mr->lkey == lkey && mr->rkey == rkey);
    printf("write_denied=%s %s\n", write8(pd, src, "denied!", rkey, buf),
           buf);
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ACC);
    printf("access_back=%d %s\n", rc, write8(pd, src, "again!", rkey, buf));
}

static void
rereg_translation(struct ibv_pd *pd, struct ibv_mr *src, struct ibv_mr *mr,
                  char *buf, char *buf2)
{
    uint32_t old = mr->rkey;
    int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2,
                          SZ, 0);
    printf("translation=%d %d %d %d\n", rc, mr->rkey != old,
           mr->addr == buf2, mr->length == SZ);
    printf("write_new=%s %s\n", write8(pd, src, "newrng", mr->rkey, buf2),
           buf2);
    memcpy(buf, "oldrng!", 8);
    printf("write_old_key=%s %s\n", write8(pd, src, "leaked", old, buf),
           buf);
}

static void
rereg_pd(struct ibv_pd *pd, struct ibv_mr *src, struct ibv_mr *mr,
         char *buf2)
{
    struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
    int rc;
    if (pd2 == NULL)
        DIE("ibv_alloc_pd");
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
    printf("pd=%d %d\n", rc, mr->pd == pd2);
    memcpy(buf2, "pd-one", 7);
    printf("write_old_pd=%s %s\n", write8(pd, src, "pd-two", mr->rkey,
                                          buf2), buf2);
    rc = ibv_dealloc_pd(pd2);
    printf("dealloc_new_pd=%s\n", strerror(rc));
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0);
    printf("pd_back=%d %d %d\n", rc, mr->pd == pd, ibv_dealloc_pd(pd2));
}

static void
bad_input(struct ibv_mr *mr)
{
    uint32_t rkey = mr->rkey;
    int rc;
    errno = 0;
    rc = ibv_rereg_mr(mr, 8, NULL, NULL, 0, 0);
    printf("bad_flags=%d %s\n", rc, strerror(errno));
    errno = 0;
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, ACC);
    printf("access_without_flag=%d %s\n", rc, strerror(errno));
    errno = 0;
    rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0);
    printf("no_range=%d %s\n", rc, strerror(errno));
    errno = 0;
    rc = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
    printf("no_flags=%d %s %d\n", rc, strerror(errno), mr->rkey == rkey);
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_port_attr port;
    struct ibv_pd *pd;
    struct ibv_mr *mr, *src;
    char *buf = calloc(1, SZ), *buf2 = calloc(1, SZ), *sbuf = calloc(1, 64);
    int i;

    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_port(ctx, 1, &port))
        DIE("ucx0");
    lid = port.lid;
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    mr = ibv_reg_mr(pd, buf, SZ, ACC);
    src = ibv_reg_mr(pd, sbuf, 64, ACC);
    if (pd == NULL || cq == NULL || mr == NULL || src == NULL)
        DIE("objects");
    strcpy(sbuf, "x");
    rereg_access(pd, src, mr, buf);
    rereg_translation(pd, src, mr, buf, buf2);
    rereg_pd(pd, src, mr, buf2);
    bad_input(mr);
    if (ibv_dereg_mr(mr) || ibv_dereg_mr(src) || ibv_destroy_cq(cq) ||
        ibv_dealloc_pd(pd) || ibv_close_device(ctx))
        DIE("teardown");
    ibv_free_device_list(list);
    free(buf);
    free(buf2);
    free(sbuf);
    return 0;
}
