/* UD multicast through the verbs front end (tests/host/test_c_front.py):
   an unmodified libibverbs program on ucx0.  Two UD QPs attach to a group
   (ibv_attach_mcast), a third sends one datagram to it (an AH whose DGID
   is the group's, QPN 0xFFFFFF); both receive it with a GRH whose DGID is
   the group's; one detaches and the next datagram reaches the other only.
   Bad input: ibv_attach_mcast of an RC QP, of a unicast GID, of a unicast
   LID; ibv_detach_mcast of a QP that is not attached; ibv_destroy_qp of
   an attached QP (EBUSY).  Prints key=value lines. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define DIE(what) do { perror(what); exit(2); } while (0)
#define QKEY 0x33333333u
#define MLID 0xC042

static struct ibv_cq *cq;

static struct ibv_qp *
make_qp(struct ibv_pd *pd, enum ibv_qp_type type)
{
    struct ibv_qp_init_attr init = {0};
    struct ibv_qp_attr a = {0};
    struct ibv_qp *qp;
    init.send_cq = init.recv_cq = cq;
    init.qp_type = type;
    init.cap.max_send_wr = init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &init);
    if (qp == NULL)
        DIE("ibv_create_qp");
    if (type != IBV_QPT_UD)
        return qp;
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = QKEY;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                      IBV_QP_PORT | IBV_QP_QKEY))
        DIE("init");
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
        DIE("rtr");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
        DIE("rts");
    return qp;
}

static void
post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint64_t id)
{
    struct ibv_sge sge = {(uintptr_t)at, 256, mr->lkey};
    struct ibv_recv_wr wr = {0}, *bad;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp, &wr, &bad))
        DIE("post_recv");
}

/* Poll until n completions or a second without any; count receives per
   QP (r[0], r[1]) and check each one's GRH DGID and payload. */
static void
collect(int n, struct ibv_qp **rx, int *r, int *grh_ok, char *buf,
        const union ibv_gid *mgid, const char *text)
{
    struct ibv_wc wc;
    int i, got = 0, idle = 0;
    while (got < n && idle < 10000) {
        if (ibv_poll_cq(cq, 1, &wc) != 1) {
            idle++;
            usleep(100);
            continue;
        }
        got++;
        if (wc.opcode != IBV_WC_RECV)
            continue;
        for (i = 0; i < 2; i++)
            if (wc.qp_num == rx[i]->qp_num && wc.status == IBV_WC_SUCCESS) {
                char *at = buf + 1024 * (i + 1) + 256 * (int)(wc.wr_id % 4);
                r[i]++;
                *grh_ok &= (wc.wc_flags & IBV_WC_GRH) &&
                           memcmp(at + 24, mgid->raw, 16) == 0 &&
                           strcmp(at + 40, text) == 0;
            }
    }
}

static void
send_to(struct ibv_qp *qp, struct ibv_ah *ah, struct ibv_mr *mr, char *buf,
        const char *text)
{
    struct ibv_sge sge = {(uintptr_t)buf, (uint32_t)strlen(text) + 1,
                          mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    strcpy(buf, text);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xFFFFFF;
    wr.wr.ud.remote_qkey = QKEY;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("post_send");
}

static void
bad_input(struct ibv_pd *pd, struct ibv_qp *ud, const union ibv_gid *mgid,
          const union ibv_gid *own)
{
    struct ibv_qp *rc = make_qp(pd, IBV_QPT_RC);
    printf("attach_rc=%s\n", strerror(ibv_attach_mcast(rc, mgid, MLID)));
    printf("attach_unicast_gid=%s\n",
           strerror(ibv_attach_mcast(ud, own, MLID)));
    printf("attach_unicast_lid=%s\n", strerror(ibv_attach_mcast(ud, mgid, 5)));
    printf("detach_not_attached=%s\n",
           strerror(ibv_detach_mcast(ud, mgid, MLID)));
    if (ibv_destroy_qp(rc))
        DIE("destroy rc");
}

int
main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL;
    struct ibv_device_attr da;
    struct ibv_ah_attr aa = {0};
    union ibv_gid mgid, own;
    struct ibv_qp *rx[2], *tx;
    struct ibv_ah *ah;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    char *buf = calloc(1, 4096);
    int i, r[2] = {0, 0}, grh_ok = 1;

    for (i = 0; list != NULL && list[i] != NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    if (ctx == NULL || ibv_query_device(ctx, &da) ||
        ibv_query_gid(ctx, 1, 0, &own))
        DIE("ucx0");
    printf("limits=%d %d %d\n", da.max_mcast_grp > 0,
           da.max_mcast_qp_attach > 0,
           da.max_total_mcast_qp_attach >= da.max_mcast_qp_attach);
    memset(&mgid, 0, sizeof(mgid));
    mgid.raw[0] = 0xff;
    mgid.raw[1] = 0x12;
    mgid.raw[15] = 0x42;
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
    mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (cq == NULL || mr == NULL)
        DIE("objects");
    for (i = 0; i < 2; i++) {
        rx[i] = make_qp(pd, IBV_QPT_UD);
        post_recv(rx[i], mr, buf + 1024 * (i + 1), 0);
        post_recv(rx[i], mr, buf + 1024 * (i + 1) + 256, 1);
        printf("attach%d=%d\n", i, ibv_attach_mcast(rx[i], &mgid, MLID));
    }
    tx = make_qp(pd, IBV_QPT_UD);
    aa.is_global = 1;
    aa.grh.dgid = mgid;
    aa.dlid = MLID;
    aa.port_num = 1;
    ah = ibv_create_ah(pd, &aa);
    if (ah == NULL)
        DIE("ibv_create_ah");
    send_to(tx, ah, mr, buf, "to the group");
    collect(3, rx, r, &grh_ok, buf, &mgid, "to the group");
    printf("first=%d %d %d\n", r[0], r[1], grh_ok);
    printf("detach1=%d\n", ibv_detach_mcast(rx[1], &mgid, MLID));
    send_to(tx, ah, mr, buf, "rx0 only");
    r[0] = r[1] = 0;
    collect(3, rx, r, &grh_ok, buf, &mgid, "rx0 only");
    printf("second=%d %d %d\n", r[0], r[1], grh_ok);
    bad_input(pd, tx, &mgid, &own);
    /* rx[0] is still attached: EBUSY, as the kernel says */
    printf("destroy_attached=%s\n", strerror(ibv_destroy_qp(rx[0])));
    if (ibv_detach_mcast(rx[0], &mgid, MLID))
        DIE("detach rx0");
    if (ibv_destroy_ah(ah) || ibv_destroy_qp(tx) || ibv_destroy_qp(rx[0]) ||
        ibv_destroy_qp(rx[1]) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) ||
        ibv_dealloc_pd(pd) || ibv_close_device(ctx))
        DIE("teardown");
    ibv_free_device_list(list);
    free(buf);
    return 0;
}
