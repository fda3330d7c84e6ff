/* c_front_probe.c - a small verbs program for tests/host/test_c_front.py:
   on ucx0, it checks the objects' public fields, the file descriptors,
   the verbs the fabric lacks and an error completion, and prints one
   "name=value" line per check (the test compares them). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "verbs_test.h"

static int
poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
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

/* Two threads poll one CQ at once while the main thread posts to it and
   resizes it: every completion arrives once (the fabric's CQ consumers
   serialize on a lock of the CQ, not the node's; resize takes both). */
#define MT_N 2000

struct mt {
    struct ibv_cq *cq;     /* polled by both threads */
    int stop;              /* set: the pollers end */
    int seen[2 * MT_N];    /* completions per wr_id */
    int got, dup, bad;     /* completions, duplicates, bad ones */
};

static void *
mt_poller(void *arg)
{
    struct mt *m = arg;
    struct ibv_wc wc[4];
    int i, n;
    while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
        n = ibv_poll_cq(m->cq, 4, wc);
        if (n < 0) {
            __atomic_add_fetch(&m->bad, 1, __ATOMIC_RELAXED);
            break;
        }
        for (i = 0; i < n; i++) {
            uint64_t id = wc[i].wr_id;
            if (wc[i].status != IBV_WC_SUCCESS || id >= 2 * MT_N)
                __atomic_add_fetch(&m->bad, 1, __ATOMIC_RELAXED);
            else if (__atomic_fetch_add(&m->seen[id], 1, __ATOMIC_RELAXED))
                __atomic_add_fetch(&m->dup, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&m->got, 1, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

static void
mt_poll(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
        uint16_t lid)
{
    static struct mt m;
    struct ibv_qp_init_attr qa = {0};
    struct ibv_qp *qp;
    struct ibv_sge sge = {(uintptr_t)mr->addr, 8, mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_recv_wr rwr = {0}, *rbad;
    pthread_t t[2];
    int i, resized = 0;

    m.cq = ibv_create_cq(ctx, 4 * MT_N, NULL, NULL, 0);
    if (m.cq == NULL)
        DIE("ibv_create_cq mt");
    qa.send_cq = qa.recv_cq = m.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = MT_N;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &qa);
    if (qp == NULL || connect_rc(qp, qp->qp_num, lid, 0, 7))
        DIE("mt qp");
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    for (i = 0; i < MT_N; i++) {
        rwr.wr_id = (uint64_t)i;
        if (ibv_post_recv(qp, &rwr, &rbad))
            DIE("mt post_recv");
    }
    for (i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, mt_poller, &m) != 0)
            DIE("pthread_create");
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    for (i = 0; i < MT_N; i++) {
        wr.wr_id = (uint64_t)(MT_N + i);
        if (ibv_post_send(qp, &wr, &bad))
            DIE("mt post_send");
        if (i % 500 == 499 && ibv_resize_cq(m.cq, 4 * MT_N + i) == 0)
            resized++;
    }
    for (i = 0; i < 60000 &&
         __atomic_load_n(&m.got, __ATOMIC_ACQUIRE) < 2 * MT_N; i++)
        usleep(1000);
    __atomic_store_n(&m.stop, 1, __ATOMIC_RELEASE);
    for (i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("mt_poll=%d %d %d %d\n", m.got, m.dup, m.bad, resized == 4);
    if (ibv_destroy_qp(qp) || ibv_destroy_cq(m.cq))
        DIE("mt destroy");
}

/* The extended CQ and QP: ibv_create_cq_ex, ibv_create_qp_ex, and a
   loopback SEND read with ibv_start_poll/ibv_next_poll. */
static void
extended(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *mr,
         uint16_t lid)
{
    struct ibv_cq_init_attr_ex ca = {0};
    struct ibv_qp_init_attr_ex qa = {0};
    struct ibv_poll_cq_attr pa = {0};
    struct ibv_cq_ex *cx;
    struct ibv_qp *qp;
    struct ibv_sge sge = {(uintptr_t)mr->addr, 16, mr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_recv_wr rwr = {0}, *rbad;
    int rc, seen = 0, i;

    ca.cqe = 8;
    ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    errno = 0;
    rc = ibv_create_cq_ex(ctx, &ca) == NULL;
    printf("cq_ex_timestamp=%d %s\n", rc, strerror(errno));
    ca.wc_flags = IBV_WC_STANDARD_FLAGS;
    cx = ibv_create_cq_ex(ctx, &ca);
    if (cx == NULL)
        DIE("ibv_create_cq_ex");
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cx);
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    qa.pd = pd;
    qp = ibv_create_qp_ex(ctx, &qa);
    if (qp == NULL)
        DIE("ibv_create_qp_ex");
    if (connect_rc(qp, qp->qp_num, lid, 0, 7))
        DIE("connect_self");
    rwr.wr_id = 21;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    wr.wr_id = 22;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_recv(qp, &rwr, &rbad) || ibv_post_send(qp, &wr, &bad))
        DIE("post");
    for (i = 0; i < 5000000 && seen < 2; i++) {
        rc = ibv_start_poll(cx, &pa);
        if (rc == ENOENT)
            continue;
        if (rc)
            DIE("ibv_start_poll");
        do {
            printf("cq_ex_wc%lu=%s %d %u %d\n", (unsigned long)cx->wr_id,
                   ibv_wc_status_str(cx->status), (int)ibv_wc_read_opcode(cx),
                   ibv_wc_read_byte_len(cx),
                   ibv_wc_read_qp_num(cx) == qp->qp_num);
            seen++;
        } while (ibv_next_poll(cx) == 0);
        ibv_end_poll(cx);
    }
    if (ibv_destroy_qp(qp))
        DIE("destroy extended");

    /* the ibv_wr_* API: WRITE, inline SEND and FETCH_AND_ADD in one post */
    {
        int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_ATOMIC;
        char *m = calloc(1, 4096);
        struct ibv_mr *fm = ibv_reg_mr(pd, m, 4096, acc);
        struct ibv_qp_ex *qx;
        uint64_t *counter = (uint64_t *)(m + 2048);
        if (fm == NULL)
            DIE("ibv_reg_mr");
        qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        qa.send_ops_flags = IBV_QP_EX_WITH_TSO;
        errno = 0;
        rc = ibv_create_qp_ex(ctx, &qa) == NULL;
        printf("qp_ex_tso=%d %s\n", rc, strerror(errno));
        qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        qa.cap.max_inline_data = 64;
        qa.cap.max_send_wr = 4;
        qp = ibv_create_qp_ex(ctx, &qa);
        if (qp == NULL)
            DIE("ibv_create_qp_ex(send_ops_flags)");
        qx = ibv_qp_to_qp_ex(qp);
        printf("qp_to_qp_ex_ops=%d\n", qx != NULL &&
               ibv_qp_to_qp_ex(qp) == qx && &qx->qp_base == qp);
        if (qx == NULL || connect_rc(qp, qp->qp_num, lid, acc, 7))
            DIE("connect_self");
        memcpy(m, "written by wr_*", 16);
        *counter = 40;
        rwr.wr_id = 30;
        sge.addr = (uintptr_t)m + 512;
        sge.length = 64;
        sge.lkey = fm->lkey;
        if (ibv_post_recv(qp, &rwr, &rbad))
            DIE("ibv_post_recv");
        ibv_wr_start(qx);
        qx->wr_id = 31;
        qx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(qx, fm->rkey, (uintptr_t)m + 1024);
        ibv_wr_set_sge(qx, fm->lkey, (uintptr_t)m, 16);
        qx->wr_id = 32;
        ibv_wr_send(qx);
        ibv_wr_set_inline_data(qx, "inline!", 8);
        qx->wr_id = 33;
        ibv_wr_atomic_fetch_add(qx, fm->rkey, (uintptr_t)counter, 2);
        ibv_wr_set_sge(qx, fm->lkey, (uintptr_t)m + 3072, 8);
        rc = ibv_wr_complete(qx);
        printf("wr_complete=%d\n", rc);
        for (i = 0, seen = 0; i < 5000000 && seen < 4; i++) {
            if (ibv_start_poll(cx, &pa) != 0)
                continue;
            do {
                printf("wr_api_wc%lu=%s\n", (unsigned long)cx->wr_id,
                       ibv_wc_status_str(cx->status));
                seen++;
            } while (ibv_next_poll(cx) == 0);
            ibv_end_poll(cx);
        }
        printf("wr_api_data=%s|%s|%lu|%lu\n", m + 1024, m + 512,
               (unsigned long)*counter,
               (unsigned long)*(uint64_t *)(m + 3072));
        /* an opcode the QP was not created for */
        ibv_wr_start(qx);
        ibv_wr_rdma_read(qx, fm->rkey, (uintptr_t)m);
        ibv_wr_set_sge(qx, fm->lkey, (uintptr_t)m, 8);
        printf("wr_not_enabled=%s\n", strerror(ibv_wr_complete(qx)));
        /* a bad rkey: REM_ACCESS_ERR, and the responder (the same QP)
           raises IBV_EVENT_QP_ACCESS_ERR on the async fd */
        {
            struct ibv_async_event ev;
            struct pollfd afd = {.fd = ctx->async_fd, .events = POLLIN};
            ibv_wr_start(qx);
            qx->wr_id = 34;
            ibv_wr_rdma_write(qx, fm->rkey + 0x100, (uintptr_t)m);
            ibv_wr_set_sge(qx, fm->lkey, (uintptr_t)m, 8);
            if (ibv_wr_complete(qx))
                DIE("wr_complete");
            for (i = 0, seen = 0; i < 5000000 && !seen; i++) {
                if (ibv_start_poll(cx, &pa) != 0)
                    continue;
                printf("bad_rkey=%s\n", ibv_wc_status_str(cx->status));
                seen = 1;
                ibv_end_poll(cx);
            }
            rc = poll(&afd, 1, 10000);
            printf("async_readable=%d\n", rc == 1);
            rc = ibv_get_async_event(ctx, &ev);
            printf("async_event=%d %s %d\n", rc,
                   ibv_event_type_str(ev.event_type), ev.element.qp == qp);
            ibv_ack_async_event(&ev);
        }
        if (ibv_destroy_qp(qp) || ibv_dereg_mr(fm))
            DIE("destroy wr_*");
        free(m);
    }
    if (ibv_destroy_cq(ibv_cq_ex_to_cq(cx)))
        DIE("destroy extended");
}

int
main(void)
{
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    struct ibv_port_attr port;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq, *ev_cq;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_qp *qp;
    struct ibv_qp_init_attr init = {0};
    struct ibv_async_event aev;
    struct ibv_cq_init_attr_ex cqx = {0};
    struct ibv_send_wr wr = {0}, *bad;
    struct ibv_recv_wr rwr = {0}, *rbad;
    struct ibv_sge sge;
    struct ibv_wc wc;
    struct pollfd pfd;
    void *ev_ctx;
    char *buf;
    int i, n, rc;

    list = ibv_get_device_list(&n);
    if (list == NULL)
        DIE("ibv_get_device_list");
    for (i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), "ucx0") == 0)
            ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (ctx == NULL)
        DIE("ibv_open_device(ucx0)");
    if (ibv_query_port(ctx, 1, &port))
        DIE("ibv_query_port");
    printf("lid_nonzero=%d\n", port.lid != 0);

    /* the async fd: real, O_NONBLOCK makes the call return EAGAIN */
    fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
    errno = 0;
    rc = ibv_get_async_event(ctx, &aev);
    printf("async_nonblock=%d %s\n", rc, strerror(errno));

    cc = ibv_create_comp_channel(ctx);
    if (cc == NULL)
        DIE("ibv_create_comp_channel");
    cq = ibv_create_cq(ctx, 16, (void *)0x1234, cc, 0);
    if (cq == NULL)
        DIE("ibv_create_cq");
    printf("cq_fields=%d %d %d\n", cq->context == ctx, cq->channel == cc,
           cq->cqe >= 16);
    fcntl(cc->fd, F_SETFL, fcntl(cc->fd, F_GETFL) | O_NONBLOCK);
    errno = 0;
    rc = ibv_get_cq_event(cc, &ev_cq, &ev_ctx);
    printf("cq_event_nonblock=%d %s\n", rc, strerror(errno));
    rc = ibv_destroy_comp_channel(cc);
    printf("destroy_busy_channel=%s\n", strerror(rc));

    pd = ibv_alloc_pd(ctx);
    if (pd == NULL)
        DIE("ibv_alloc_pd");
    buf = calloc(1, 4096);
    mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    if (mr == NULL)
        DIE("ibv_reg_mr");
    printf("mr_fields=%d %d %d %d\n", mr->context == ctx, mr->pd == pd,
           mr->addr == buf, mr->length == 4096);

    /* a parent domain is not supported */
    cqx.cqe = 4;
    cqx.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    cqx.parent_domain = pd;
    errno = 0;
    rc = ibv_create_cq_ex(ctx, &cqx) == NULL;
    printf("create_cq_ex_pd=%d %s\n", rc, strerror(errno));

    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 4;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.qp_context = (void *)0x5678;
    qp = ibv_create_qp(pd, &init);
    if (qp == NULL)
        DIE("ibv_create_qp");
    printf("qp_fields=%d %d %d %d %d\n", qp->qp_num != 0,
           qp->state == IBV_QPS_RESET, qp->qp_type == IBV_QPT_RC,
           qp->pd == pd, qp->qp_context == (void *)0x5678);
    errno = 0;
    rc = ibv_qp_to_qp_ex(qp) == NULL;
    printf("qp_to_qp_ex=%d %s\n", rc, strerror(errno));
    /* a WR in RESET is refused */
    sge.addr = (uintptr_t)buf;
    sge.length = 8;
    sge.lkey = mr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    rc = ibv_post_send(qp, &wr, &bad);
    printf("post_send_reset=%d\n", rc != 0 && bad == &wr);

    /* connect the QP to itself, by LID */
    if ((rc = connect_rc(qp, qp->qp_num, port.lid, 0, 7)))
        DIE("connect_self");
    printf("qp_state_rts=%d\n", qp->state == IBV_QPS_RTS);

    /* a good SEND to itself, seen through the completion channel */
    sge.addr = (uintptr_t)buf + 2048;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    rwr.wr_id = 7;
    if (ibv_post_recv(qp, &rwr, &rbad))
        DIE("ibv_post_recv");
    if (ibv_req_notify_cq(cq, 0))
        DIE("ibv_req_notify_cq");
    sge.addr = (uintptr_t)buf;
    memcpy(buf, "fabric!", 8);
    wr.wr_id = 8;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("ibv_post_send");
    pfd.fd = cc->fd;
    pfd.events = POLLIN;
    rc = poll(&pfd, 1, 10000);
    printf("channel_readable=%d\n", rc == 1 && (pfd.revents & POLLIN));
    rc = ibv_get_cq_event(cc, &ev_cq, &ev_ctx);
    printf("cq_event=%d %d %d\n", rc, ev_cq == cq, ev_ctx == (void *)0x1234);
    ibv_ack_cq_events(cq, 1);
    for (i = 0; i < 2; i++) {
        if (poll_one(cq, &wc) != 1)
            DIE("poll");
        printf("wc%lu=%s %u\n", (unsigned long)wc.wr_id,
               ibv_wc_status_str(wc.status), wc.qp_num == qp->qp_num);
    }
    printf("payload=%s\n", buf + 2048);

    /* a bad lkey: an error completion, the QP goes to ERROR */
    sge.lkey = mr->lkey + 0x1000;
    wr.wr_id = 9;
    rc = ibv_post_send(qp, &wr, &bad);
    if (rc == 0) {
        if (poll_one(cq, &wc) != 1)
            DIE("poll");
        printf("bad_lkey=%s\n", ibv_wc_status_str(wc.status));
    }
    else {
        printf("bad_lkey=refused %s\n", strerror(rc));
    }

    extended(ctx, pd, mr, port.lid);
    mt_poll(ctx, pd, mr, port.lid);

    /* fork(): the child's inherited objects refuse every verb (they are
       the parent's), a context it opens itself works; the parent's go on */
    fflush(stdout);
    {
        pid_t pid = fork();
        if (pid == 0) {
            struct ibv_device **l2 = ibv_get_device_list(&n);
            struct ibv_context *c2 = NULL;
            struct ibv_pd *pd2 = NULL;
            int post, pol, des;
            bad = NULL;
            post = ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr;
            pol = ibv_poll_cq(cq, 1, &wc) == -EINVAL;
            des = ibv_destroy_qp(qp) == EINVAL;
            for (i = 0; l2 != NULL && i < n; i++)
                if (strcmp(ibv_get_device_name(l2[i]), "ucx0") == 0)
                    c2 = ibv_open_device(l2[i]);
            if (c2 != NULL)
                pd2 = ibv_alloc_pd(c2);
            printf("fork_child=%d %d %d %d\n", post, pol, des,
                   pd2 != NULL && ibv_dealloc_pd(pd2) == 0 &&
                   ibv_close_device(c2) == 0);
            fflush(stdout);
            _exit(0);
        }
        if (pid < 0 || waitpid(pid, &rc, 0) != pid || rc != 0)
            DIE("fork");
        printf("fork_parent=%d\n", ibv_poll_cq(cq, 1, &wc) >= 0 &&
               qp->qp_num != 0);
    }

    /* objects still in use are not destroyed (EBUSY, as on a NIC) */
    printf("busy=%s, %s\n", strerror(ibv_destroy_cq(cq)),
           strerror(ibv_dealloc_pd(pd)));

    if (ibv_destroy_qp(qp) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) ||
        ibv_destroy_comp_channel(cc) || ibv_dealloc_pd(pd) ||
        ibv_close_device(ctx))
        DIE("destroy");
    free(buf);
    printf("closed=1\n");
    return 0;
}
