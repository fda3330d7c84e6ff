/* Memory windows through the verbs front end (tests/host/test_c_front.py):
   an unmodified libibverbs program on ucx0, one RC QP connected to itself.
   Type 1: ibv_alloc_mw, ibv_bind_mw, an RDMA WRITE through the window, a
   WRITE outside it, a rebind (the old rkey dies).  Type 2: IBV_WR_BIND_MW
   posted with ibv_post_send, SEND_WITH_INV (the receive's flag and rkey),
   ibv_wr_bind_mw and ibv_wr_local_inv (the ibv_wr_* API).  Bad input:
   a bind to an MR without IBV_ACCESS_MW_BIND, ibv_dereg_mr of an MR with
   a window bound, ibv_dealloc_pd with a window left, a type 3 window.  Prints key=value lines. */
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

static int
poll_one(struct ibv_wc *wc)
{
    int i, n;
    for (i = 0; i < 5000000; i++) {
        n = ibv_poll_cq(cq, 1, wc);
        if (n != 0)
            return n;
        if (i % 1000 == 999)
            usleep(100);
    }
    return 0;
}

static const char *
status_of(void)
{
    struct ibv_wc wc;
    if (poll_one(&wc) != 1)
        return "none";
    return ibv_wc_status_str(wc.status);
}

/* RESET -> RTS, connected to itself by LID; 0 or an errno. */
static int
connect_self(struct ibv_qp *qp, uint16_t lid)
{
    struct ibv_qp_attr a = {0};
    int rc;
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = ACC;
    if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                            IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    if ((rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
                            IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_MIN_RNR_TIMER)))
        return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_qp *
make_qp(struct ibv_context *ctx, struct ibv_pd *pd, uint16_t lid,
        uint64_t ops)
{
    struct ibv_qp_init_attr_ex qa = {0};
    struct ibv_qp *qp;
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD;
    qa.pd = pd;
    if (ops) {
        qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        qa.send_ops_flags = ops;
    }
    qp = ibv_create_qp_ex(ctx, &qa);
    if (qp == NULL || connect_self(qp, lid))
        DIE("qp");
    return qp;
}

/* WRITE 8 bytes from src (in mr) to raddr through rkey; its status. */
static const char *
write8(struct ibv_qp *qp, struct ibv_mr *mr, char *src, uint32_t rkey,
       uint64_t raddr)
{
    struct ibv_sge sge = {(uintptr_t)src, 8, mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.rkey = rkey;
    wr.wr.rdma.remote_addr = raddr;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("post write");
    return status_of();
}

static void
type1(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
      char *buf, uint16_t lid)
{
    struct ibv_qp *qp = make_qp(ctx, pd, lid, 0);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    struct ibv_mw_bind b = {0};
    const char *st;
    uint32_t old;
    int rc;
    if (mw == NULL)
        DIE("ibv_alloc_mw");
    printf("mw1_fields=%d %d %d\n", mw->pd == pd, mw->context == ctx,
           mw->type == IBV_MW_TYPE_1);
    old = mw->rkey;
    b.wr_id = 1;
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info.mr = mr;
    b.bind_info.addr = (uintptr_t)buf + 1024;
    b.bind_info.length = 64;
    b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ibv_bind_mw(qp, mw, &b);
    st = status_of();
    printf("bind1=%d %d %s\n", rc, mw->rkey != old, st);
    memcpy(buf, "window!", 8);
    printf("write_in=%s %s\n", write8(qp, mr, buf, mw->rkey,
                                      (uintptr_t)buf + 1024), buf + 1024);
    old = mw->rkey;
    if (ibv_bind_mw(qp, mw, &b))
        DIE("rebind");
    st = status_of();
    printf("rebind=%s %d\n", st, mw->rkey != old);
    printf("write_old_key=%s\n", write8(qp, mr, buf, old,
                                        (uintptr_t)buf + 1024));
    if (ibv_destroy_qp(qp) || ibv_dealloc_mw(mw))
        DIE("type1 teardown");
}

static void
type2(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
      char *buf, uint16_t lid)
{
    struct ibv_qp *qp = make_qp(ctx, pd, lid, 0);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_recv_wr rwr = {0}, *rbad;
    struct ibv_sge sge = {(uintptr_t)buf + 2048, 64, mr->lkey};
    struct ibv_wc wc;
    uint32_t key;
    int rc;
    if (mw == NULL)
        DIE("ibv_alloc_mw 2");
    key = ibv_inc_rkey(mw->rkey);
    wr.wr_id = 2;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = key;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)buf + 1024;
    wr.bind_mw.bind_info.length = 64;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ibv_post_send(qp, &wr, &bad);
    printf("bind2=%d %s\n", rc, status_of());
    memcpy(buf, "type 2!", 8);
    printf("write2=%s %s\n", write8(qp, mr, buf, key,
                                    (uintptr_t)buf + 1024), buf + 1024);
    printf("write2_outside=%s\n", write8(qp, mr, buf, key,
                                         (uintptr_t)buf + 1024 + 60));
    /* the QP is in ERR now: a new one, and the window again */
    if (ibv_destroy_qp(qp))
        DIE("destroy");
    qp = make_qp(ctx, pd, lid, 0);
    key = ibv_inc_rkey(key);
    wr.bind_mw.rkey = key;
    rc = ibv_post_send(qp, &wr, &bad);
    printf("bind2_again=%d %s\n", rc, status_of());
    rwr.wr_id = 3;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 4;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = key;
    if (ibv_post_recv(qp, &rwr, &rbad) || ibv_post_send(qp, &wr, &bad))
        DIE("send_with_inv");
    for (rc = 0; rc < 2 && poll_one(&wc) == 1; rc++) {
        if (wc.wr_id == 3)
            printf("recv_inv=%s %d %d\n", ibv_wc_status_str(wc.status),
                   (wc.wc_flags & IBV_WC_WITH_INV) != 0,
                   wc.invalidated_rkey == key);
        else
            printf("send_inv=%s\n", ibv_wc_status_str(wc.status));
    }
    printf("write_invalidated=%s\n", write8(qp, mr, buf, key,
                                            (uintptr_t)buf + 1024));
    if (ibv_destroy_qp(qp) || ibv_dealloc_mw(mw))
        DIE("type2 teardown");
}

/* The ibv_wr_* API: wr_bind_mw, a WRITE, wr_local_inv, a WRITE again. */
static void
wr_api(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
       char *buf, uint16_t lid)
{
    struct ibv_qp *qp = make_qp(ctx, pd, lid, IBV_QP_EX_WITH_BIND_MW |
                                IBV_QP_EX_WITH_LOCAL_INV |
                                IBV_QP_EX_WITH_RDMA_WRITE);
    struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    struct ibv_mw_bind_info bi = {mr, (uintptr_t)buf + 1024, 64,
                                  IBV_ACCESS_REMOTE_WRITE};
    const char *st;
    uint32_t key;
    int rc;
    if (qx == NULL || mw == NULL)
        DIE("wr api");
    key = ibv_inc_rkey(mw->rkey);
    ibv_wr_start(qx);
    qx->wr_id = 5;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_bind_mw(qx, mw, key, &bi);
    rc = ibv_wr_complete(qx);
    st = status_of();
    printf("wr_bind=%d %s %d\n", rc, st, mw->rkey == key);
    memcpy(buf, "wr api!", 8);
    printf("wr_write=%s %s\n", write8(qp, mr, buf, key,
                                      (uintptr_t)buf + 1024), buf + 1024);
    ibv_wr_start(qx);
    qx->wr_id = 6;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(qx, key);
    rc = ibv_wr_complete(qx);
    printf("wr_local_inv=%d %s\n", rc, status_of());
    printf("wr_write_after_inv=%s\n", write8(qp, mr, buf, key,
                                             (uintptr_t)buf + 1024));
    if (ibv_destroy_qp(qp) || ibv_dealloc_mw(mw))
        DIE("wr api teardown");
}

/* Bad input: a bind to an MR without IBV_ACCESS_MW_BIND, an MR with a
   window bound, a PD with a window left, a window type that does not
   exist. */
static void
bad_input(struct ibv_context *ctx, struct ibv_pd *pd, uint16_t lid)
{
    struct ibv_qp *qp = make_qp(ctx, pd, lid, 0);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    char *plain = calloc(1, 256);
    struct ibv_mr *pmr = ibv_reg_mr(pd, plain, 256, ACC);
    struct ibv_mw_bind b = {0};
    struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
    struct ibv_mw *mw2;
    struct ibv_mr *pmr2;
    const char *st;
    int rc;
    if (mw == NULL || pmr == NULL || pd2 == NULL)
        DIE("bad input");
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info.mr = pmr;
    b.bind_info.addr = (uintptr_t)plain;
    b.bind_info.length = 64;
    b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ibv_bind_mw(qp, mw, &b);
    printf("bind_no_mw_bind=%d %s\n", rc, status_of());
    if (ibv_destroy_qp(qp))
        DIE("destroy");
    qp = make_qp(ctx, pd, lid, 0);
    /* an MR with a window bound: ibv_dereg_mr is EINVAL until the window
       is unbound (a bind of length 0) */
    b.bind_info.mr = pmr;
    b.bind_info.addr = (uintptr_t)plain;
    b.bind_info.length = 64;
    if (ibv_dealloc_mw(mw))
        DIE("dealloc");
    mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    if (mw == NULL)
        DIE("alloc");
    pmr2 = ibv_reg_mr(pd, plain + 128, 64, ACC | IBV_ACCESS_MW_BIND);
    if (pmr2 == NULL)
        DIE("reg_mr");
    b.bind_info.mr = pmr2;
    b.bind_info.addr = (uintptr_t)plain + 128;
    b.bind_info.length = 32;
    rc = ibv_bind_mw(qp, mw, &b);
    printf("bind_for_dereg=%d %s\n", rc, status_of());
    printf("dereg_bound=%s\n", strerror(ibv_dereg_mr(pmr2)));
    b.bind_info.length = 0;
    rc = ibv_bind_mw(qp, mw, &b);
    st = status_of();
    printf("dereg_unbound=%d %s %d\n", rc, st, ibv_dereg_mr(pmr2));
    mw2 = ibv_alloc_mw(pd2, IBV_MW_TYPE_2);
    if (mw2 == NULL)
        DIE("alloc mw2");
    printf("dealloc_pd_busy=%s\n", strerror(ibv_dealloc_pd(pd2)));
    errno = 0;
    rc = ibv_alloc_mw(pd, (enum ibv_mw_type)3) == NULL;
    printf("alloc_type3=%d %s\n", rc, strerror(errno));
    if (ibv_dealloc_mw(mw2) || ibv_dealloc_pd(pd2) || ibv_destroy_qp(qp) ||
        ibv_dealloc_mw(mw) || ibv_dereg_mr(pmr))
        DIE("bad input teardown");
    free(plain);
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL;
    struct ibv_device_attr da;
    struct ibv_port_attr port;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    char *buf = calloc(1, SZ);
    int i;

    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_port(ctx, 1, &port) ||
        ibv_query_device(ctx, &da))
        DIE("ucx0");
    printf("caps=%d %d %d\n", da.max_mw > 0,
           (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0,
           (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0);
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    mr = ibv_reg_mr(pd, buf, SZ, IBV_ACCESS_LOCAL_WRITE |
                    IBV_ACCESS_MW_BIND);
    if (pd == NULL || cq == NULL || mr == NULL)
        DIE("objects");
    type1(ctx, pd, mr, buf, port.lid);
    type2(ctx, pd, mr, buf, port.lid);
    wr_api(ctx, pd, mr, buf, port.lid);
    bad_input(ctx, pd, port.lid);
    if (ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) ||
        ibv_close_device(ctx))
        DIE("teardown");
    ibv_free_device_list(list);
    free(buf);
    return 0;
}
