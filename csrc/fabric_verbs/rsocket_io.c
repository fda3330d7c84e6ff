/* rsocket_io.c - the data path of ucx0's rsockets: the QP, rings and
   credits (the protocol is described in rsocket.h), send and receive,
   riomap and riowrite. */
#include "rsocket.h"

#define WR_RECV (1ULL << 63)     /* wr_id of a receive: | its slot */
#define WR_CTL  (1ULL << 62)     /* wr_id of a control SEND */
#define MAX_CHUNK (1u << 20)     /* bytes of one WRITE */
#define CTL_RESERVE 2            /* receives of the peer kept for control */

static void *
ring_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

static int
post_slot(struct rsk *rs, uint32_t i)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(rs->slots + (size_t)i * RS_SLOT),
        .length = RS_SLOT, .lkey = rs->slot_mr->lkey,
    };
    struct ibv_recv_wr wr = { .wr_id = WR_RECV | i, .sg_list = &sge,
                              .num_sge = 1 }, *bad;
    int rc = ibv_post_recv(rs->qp, &wr, &bad);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    rs->posted++;
    return 0;
}

/* The rings and their MRs. */
static int
setup_rings(struct rsk *rs)
{
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    rs->rbuf = ring_alloc(rs->rbuf_size);
    rs->sbuf = ring_alloc(rs->sbuf_size);
    rs->slots = ring_alloc((size_t)rs->rq_size * RS_SLOT);
    if (rs->rbuf == NULL || rs->sbuf == NULL || rs->slots == NULL) {
        errno = ENOMEM;
        return -1;
    }
    rs->rmr = ibv_reg_mr(rs->pd, rs->rbuf, rs->rbuf_size, acc);
    rs->smr = ibv_reg_mr(rs->pd, rs->sbuf, rs->sbuf_size,
                         IBV_ACCESS_LOCAL_WRITE);
    rs->slot_mr = ibv_reg_mr(rs->pd, rs->slots,
                             (size_t)rs->rq_size * RS_SLOT,
                             IBV_ACCESS_LOCAL_WRITE);
    if (rs->rmr == NULL || rs->smr == NULL || rs->slot_mr == NULL)
        return -1;
    return 0;
}

static int
watch_fd(int epfd, int fd)
{
    struct epoll_event pe;
    memset(&pe, 0, sizeof(pe));
    pe.events = EPOLLIN;
    pe.data.fd = fd;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &pe);
}

/* PD, CQ (its channel watched by rs->fd), RC QP on rs->id, rings, and
   every receive posted.  0 or -1 with errno (rs_teardown frees). */
int
rs_setup(struct rsk *rs)
{
    struct ibv_context *v = rs->id->verbs;
    struct ibv_qp_init_attr a;
    uint32_t i;

    if ((rs->pd = ibv_alloc_pd(v)) == NULL ||
        (rs->cc = ibv_create_comp_channel(v)) == NULL)
        return -1;
    if (fcntl(rs->cc->fd, F_SETFL,
              fcntl(rs->cc->fd, F_GETFL) | O_NONBLOCK) < 0 ||
        watch_fd(rs->fd, rs->cc->fd) < 0)
        return -1;
    rs->cq = ibv_create_cq(v, (int)(rs->sq_size + rs->rq_size), rs, rs->cc,
                           0);
    if (rs->cq == NULL || ibv_req_notify_cq(rs->cq, 0) != 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = rs->cq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = rs->sq_size;
    a.cap.max_recv_wr = rs->rq_size;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = rs->inline_size > sizeof(struct rs_ctl)
                                ? rs->inline_size : sizeof(struct rs_ctl);
    if (rdma_create_qp(rs->id, rs->pd, &a) < 0)
        return -1;
    rs->qp = rs->id->qp;
    if (setup_rings(rs) < 0)
        return -1;
    for (i = 0; i < rs->rq_size; i++)
        if (post_slot(rs, i) < 0)
            return -1;
    rs->told_posted = rs->posted;
    return 0;
}

/* Free what rs_setup made (the ID stays). */
void
rs_teardown(struct rsk *rs)
{
    int i;
    if (rs->qp != NULL)
        rdma_destroy_qp(rs->id);
    rs->qp = NULL;
    for (i = 0; i < rs->n_lmaps; i++)
        ibv_dereg_mr(rs->lmaps[i].mr);
    free(rs->lmaps);
    free(rs->rmaps);
    rs->lmaps = rs->rmaps = NULL;
    rs->n_lmaps = rs->n_rmaps = 0;
    if (rs->rmr)
        ibv_dereg_mr(rs->rmr);
    if (rs->smr)
        ibv_dereg_mr(rs->smr);
    if (rs->slot_mr)
        ibv_dereg_mr(rs->slot_mr);
    rs->rmr = rs->smr = rs->slot_mr = NULL;
    if (rs->cq)
        ibv_destroy_cq(rs->cq);
    rs->cq = NULL;
    if (rs->cc)
        ibv_destroy_comp_channel(rs->cc);
    rs->cc = NULL;
    if (rs->pd)
        ibv_dealloc_pd(rs->pd);
    rs->pd = NULL;
    free(rs->rbuf);
    free(rs->sbuf);
    free(rs->slots);
    rs->rbuf = rs->sbuf = rs->slots = NULL;
}

/* ------------------------------------------------------------------ */
/* control messages and credits                                        */

static int
can_ctl(const struct rsk *rs)
{
    return rs->qp != NULL && !rs->broken && rs->state == RS_CONNECTED &&
           rs->sq_out < rs->sq_size && rs->sent_msgs < rs->peer_posted;
}

static int
post_ctl(struct rsk *rs, struct rs_ctl *m)
{
    struct ibv_sge sge = { .addr = (uintptr_t)m, .length = sizeof(*m) };
    struct ibv_send_wr wr = { .wr_id = WR_CTL, .sg_list = &sge,
                              .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED |
                                            IBV_SEND_INLINE }, *bad;
    int rc;
    m->consumed = rs->rx_head;
    m->posted = rs->posted;
    rc = ibv_post_send(rs->qp, &wr, &bad);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    rs->sq_out++;
    rs->sent_msgs++;
    rs->told_consumed = rs->rx_head;
    rs->told_posted = rs->posted;
    return 0;
}

/* Tell the peer its credits once half the ring or half the receives
   were freed since it last heard. */
static void
maybe_credit(struct rsk *rs)
{
    struct rs_ctl m = { .op = RS_CTL_CREDIT };
    if (rs->fin_pending && can_ctl(rs)) {
        m.op = RS_CTL_FIN;
        if (post_ctl(rs, &m) == 0) {
            rs->fin_pending = 0;
            rs->fin_sent = 1;
        }
        return;
    }
    if ((rs->rx_head - rs->told_consumed >= rs->rbuf_size / 2 ||
         rs->posted - rs->told_posted >= rs->rq_size / 2) && can_ctl(rs))
        (void)post_ctl(rs, &m);
}

/* rshutdown(SHUT_WR) and rclose: the peer reads end of file once it has
   read everything sent before. */
int
rs_send_fin(struct rsk *rs)
{
    if (rs->fin_sent || rs->state != RS_CONNECTED)
        return 0;
    rs->fin_pending = 1;
    maybe_credit(rs);
    return 0;
}

static void
add_rmap(struct rsk *rs, const struct rs_ctl *m)
{
    struct rs_map *n = realloc(rs->rmaps,
                               sizeof(*n) * (size_t)(rs->n_rmaps + 1));
    if (n == NULL)
        return;
    rs->rmaps = n;
    n[rs->n_rmaps].addr = m->addr;
    n[rs->n_rmaps].off = m->off;
    n[rs->n_rmaps].len = m->len;
    n[rs->n_rmaps].rkey = m->rkey;
    n[rs->n_rmaps].mr = NULL;
    rs->n_rmaps++;
}

static void
handle_ctl(struct rsk *rs, const struct rs_ctl *m)
{
    int i;
    if (m->consumed > rs->peer_consumed && m->consumed <= rs->tx_bytes)
        rs->peer_consumed = m->consumed;
    if (m->posted > rs->peer_posted)
        rs->peer_posted = m->posted;
    if (m->op == RS_CTL_FIN)
        rs->fin_rcvd = 1;
    else if (m->op == RS_CTL_IOMAP)
        add_rmap(rs, m);
    else if (m->op == RS_CTL_IOUNMAP)
        for (i = 0; i < rs->n_rmaps; i++)
            if (rs->rmaps[i].off == m->off) {
                rs->rmaps[i] = rs->rmaps[--rs->n_rmaps];
                break;
            }
}

static void
handle_wc(struct rsk *rs, const struct ibv_wc *wc)
{
    uint32_t slot;
    if (!(wc->wr_id & WR_RECV)) {
        rs->sq_out--;
        if (!(wc->wr_id & WR_CTL) && wc->wr_id > rs->s_tail)
            rs->s_tail = wc->wr_id;
        if (wc->status != IBV_WC_SUCCESS) {
            rs->broken = 1;
            if (rs->err == 0 && wc->status != IBV_WC_WR_FLUSH_ERR)
                rs->err = ECONNRESET;
        }
        return;
    }
    if (wc->status != IBV_WC_SUCCESS)
        return;     /* flushed: the QP is going away */
    slot = (uint32_t)(wc->wr_id & ~WR_RECV);
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        uint32_t n = be32toh(wc->imm_data);
        if (rs->rx_tail + n - rs->rx_head <= rs->rbuf_size)
            rs->rx_tail += n;
    }
    else if (wc->byte_len >= sizeof(struct rs_ctl)) {
        struct rs_ctl m;
        memcpy(&m, rs->slots + (size_t)slot * RS_SLOT, sizeof(m));
        handle_ctl(rs, &m);
    }
    if (slot < rs->rq_size && post_slot(rs, slot) < 0)
        rs->broken = 1;
}

/* Take every completion and CQ event, and CM events: the number of
   completions and events handled. */
int
rs_progress(struct rsk *rs)
{
    struct ibv_wc wc[16];
    struct ibv_cq *cq;
    void *ctx;
    int n, i, done = 0;

    if (rs->state != RS_LISTEN && rs->id != NULL)
        done += rs_cm_step(rs);
    if (rs->cq == NULL)
        return done;
    while (ibv_get_cq_event(rs->cc, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        done++;
    }
    while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
        for (i = 0; i < n; i++)
            handle_wc(rs, &wc[i]);
        done += n;
    }
    if (rs->state == RS_CONNECTED)
        maybe_credit(rs);
    return done;
}

/* Re-arm the CQ; 1 if something arrived meanwhile (do not sleep). */
int
rs_arm(struct rsk *rs)
{
    if (rs->cq != NULL)
        ibv_req_notify_cq(rs->cq, 0);
    return rs_progress(rs) > 0;
}

/* Wait (lock released) until rs's fd is readable or timeout_ms. */
int
rs_wait(struct rsk *rs, int timeout_ms)
{
    struct pollfd p = { .fd = rs->fd, .events = POLLIN };
    int r;
    if (rs_arm(rs))
        return 0;
    pthread_mutex_unlock(&rs->lock);
    r = poll(&p, 1, timeout_ms);
    pthread_mutex_lock(&rs->lock);
    return r < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* send and receive                                                    */

static uint64_t
min64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static int
data_room(const struct rsk *rs)
{
    return rs->qp != NULL && !rs->broken && rs->state == RS_CONNECTED &&
           rs->sq_out + 1 < rs->sq_size &&
           rs->sent_msgs + CTL_RESERVE < rs->peer_posted;
}

/* How much one WRITE may carry now; *inl: sent inline (from the
   program's buffer), else copied into the send buffer. */
static uint64_t
chunk_room(const struct rsk *rs, uint64_t len, int *inl)
{
    uint64_t n = min64(len, MAX_CHUNK);
    n = min64(n, rs->peer_size - (rs->tx_bytes - rs->peer_consumed));
    n = min64(n, rs->peer_size - rs->tx_bytes % rs->peer_size);
    *inl = n <= rs->inline_size;
    if (!*inl) {
        n = min64(n, rs->sbuf_size - (rs->s_head - rs->s_tail));
        n = min64(n, rs->sbuf_size - rs->s_head % rs->sbuf_size);
    }
    return data_room(rs) ? n : 0;
}

int
rs_can_send(const struct rsk *rs)
{
    int inl;
    return chunk_room(rs, rs->inline_size + 1, &inl) > 0 ||
           chunk_room(rs, 1, &inl) > 0;
}

/* Post one WRITE WITH IMMEDIATE of up to len bytes: the bytes posted. */
static uint64_t
send_chunk(struct rsk *rs, const char *buf, uint64_t len)
{
    int inl, rc;
    uint64_t n = chunk_room(rs, len, &inl);
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;

    if (n == 0)
        return 0;
    memset(&wr, 0, sizeof(wr));
    sge.length = (uint32_t)n;
    if (inl) {
        sge.addr = (uintptr_t)buf;
        sge.lkey = 0;
        wr.send_flags = IBV_SEND_INLINE;
    }
    else {
        char *dst = rs->sbuf + rs->s_head % rs->sbuf_size;
        memcpy(dst, buf, n);
        sge.addr = (uintptr_t)dst;
        sge.lkey = rs->smr->lkey;
        rs->s_head += n;
    }
    wr.wr_id = rs->s_head;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.imm_data = htobe32((uint32_t)n);
    wr.wr.rdma.remote_addr = rs->peer_addr + rs->tx_bytes % rs->peer_size;
    wr.wr.rdma.rkey = rs->peer_rkey;
    if ((rc = ibv_post_send(rs->qp, &wr, &bad)) != 0) {
        rs->broken = 1;
        rs->err = rc;
        return 0;
    }
    rs->tx_bytes += n;
    rs->sent_msgs++;
    rs->sq_out++;
    return n;
}

/* Why rs cannot send at all (errno), or 0. */
static int
send_blocked(const struct rsk *rs)
{
    if (rs->wr_shut)
        return EPIPE;
    if (rs->broken || rs->hup || rs->state == RS_FAILED)
        return rs->err && rs->err != ECONNREFUSED ? rs->err : ECONNRESET;
    if (rs->state < RS_ADDR)
        return ENOTCONN;
    return 0;
}

ssize_t
rs_send(struct rsk *rs, const void *buf, size_t len, int flags)
{
    int nb = rs->nonblock || (flags & MSG_DONTWAIT), e;
    size_t done = 0;

    rs_progress(rs);
    while (done < len) {
        uint64_t n;
        if ((e = send_blocked(rs)) != 0) {
            if (done > 0)
                break;
            errno = e;
            return -1;
        }
        n = rs->state == RS_CONNECTED
                ? send_chunk(rs, (const char *)buf + done, len - done) : 0;
        done += n;
        if (n > 0)
            continue;
        if (rs_progress(rs) > 0)
            continue;
        if (nb)
            break;
        if (rs_wait(rs, -1) < 0 && done == 0)
            return -1;
    }
    if (done == 0 && len > 0) {
        errno = EAGAIN;
        return -1;
    }
    return (ssize_t)done;
}

/* Copy n bytes out of the ring at the read offset (wrapping). */
static void
ring_copy(const struct rsk *rs, char *dst, uint64_t n)
{
    uint64_t at = rs->rx_head % rs->rbuf_size;
    uint64_t first = min64(n, rs->rbuf_size - at);
    memcpy(dst, rs->rbuf + at, first);
    if (n > first)
        memcpy(dst + first, rs->rbuf, n - first);
}

/* End of file or error for a read with nothing left: 0 (end) or -1. */
static int
recv_end(const struct rsk *rs)
{
    if (rs->rd_shut || rs->fin_rcvd || rs->hup || rs->broken ||
        rs->state == RS_FAILED)
        return 0;
    if (rs->state < RS_ADDR) {
        errno = ENOTCONN;
        return -1;
    }
    return 1;
}

ssize_t
rs_recv(struct rsk *rs, void *buf, size_t len, int flags)
{
    int nb = rs->nonblock || (flags & MSG_DONTWAIT), e;
    size_t done = 0;

    rs_progress(rs);
    while (done < len) {
        uint64_t n = min64(len - done, rs->rx_tail - rs->rx_head);
        if (n > 0) {
            ring_copy(rs, (char *)buf + done, n);
            if (flags & MSG_PEEK)
                return (ssize_t)n;
            rs->rx_head += n;
            done += n;
            maybe_credit(rs);
            if (!(flags & MSG_WAITALL))
                break;
            continue;
        }
        if ((e = recv_end(rs)) <= 0) {
            if (e < 0 && done == 0)
                return -1;
            break;
        }
        if (rs_progress(rs) > 0)
            continue;
        if (nb) {
            if (done == 0) {
                errno = EAGAIN;
                return -1;
            }
            break;
        }
        if (rs_wait(rs, -1) < 0 && done == 0)
            return -1;
    }
    return (ssize_t)done;
}

/* ------------------------------------------------------------------ */
/* riomap, riowrite                                                    */

off_t
rs_iomap(struct rsk *rs, void *buf, size_t len, int prot, off_t offset)
{
    struct rs_ctl m = { .op = RS_CTL_IOMAP };
    struct rs_map *n;
    struct ibv_mr *mr;

    while (rs->state >= RS_ADDR && rs->state < RS_CONNECTED)
        if (rs_progress(rs) == 0)
            rs_wait(rs, -1);    /* an accepted socket: until established */
    if (rs->state != RS_CONNECTED || rs->qp == NULL) {
        errno = ENOTCONN;
        return -1;
    }
    if (buf == NULL || len == 0 || !(prot & PROT_WRITE) || offset < -1) {
        errno = EINVAL;
        return -1;
    }
    if (rs->iomap_size && (uint32_t)rs->n_lmaps >= rs->iomap_size) {
        errno = ENOMEM;
        return -1;
    }
    while (!can_ctl(rs)) {
        if (rs->broken || rs->hup) {
            errno = ECONNRESET;
            return -1;
        }
        if (rs_progress(rs) == 0 && rs_wait(rs, -1) < 0)
            return -1;
    }
    n = realloc(rs->lmaps, sizeof(*n) * (size_t)(rs->n_lmaps + 1));
    if (n == NULL) {
        errno = ENOMEM;
        return -1;
    }
    rs->lmaps = n;
    mr = ibv_reg_mr(rs->pd, buf, len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == NULL)
        return -1;
    if (offset == -1)
        offset = (off_t)rs->next_map_off;
    if ((uint64_t)offset + len > rs->next_map_off)
        rs->next_map_off = (uint64_t)offset + len;
    m.addr = (uintptr_t)buf;
    m.off = (uint64_t)offset;
    m.len = len;
    m.rkey = mr->rkey;
    n[rs->n_lmaps] = (struct rs_map){ m.addr, m.off, m.len, m.rkey, mr };
    rs->n_lmaps++;
    if (post_ctl(rs, &m) < 0)
        return -1;
    return offset;
}

int
rs_iounmap(struct rsk *rs, void *buf, size_t len)
{
    struct rs_ctl m = { .op = RS_CTL_IOUNMAP };
    int i;
    for (i = 0; i < rs->n_lmaps; i++) {
        struct rs_map *p = &rs->lmaps[i];
        if (p->addr != (uintptr_t)buf || p->len != len)
            continue;
        m.off = p->off;
        ibv_dereg_mr(p->mr);
        *p = rs->lmaps[--rs->n_lmaps];
        if (can_ctl(rs))
            (void)post_ctl(rs, &m);
        return 0;
    }
    errno = EINVAL;
    return -1;
}

static const struct rs_map *
find_rmap(const struct rsk *rs, uint64_t off)
{
    int i;
    for (i = 0; i < rs->n_rmaps; i++)
        if (off >= rs->rmaps[i].off &&
            off - rs->rmaps[i].off < rs->rmaps[i].len)
            return &rs->rmaps[i];
    return NULL;
}

/* One RDMA WRITE of up to len bytes at the peer's offset off. */
static uint64_t
iowrite_chunk(struct rsk *rs, const char *buf, uint64_t len, uint64_t off)
{
    const struct rs_map *p = find_rmap(rs, off);
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;
    uint64_t n;
    char *dst;

    if (p == NULL || !data_room(rs))
        return 0;
    n = min64(len, p->len - (off - p->off));
    n = min64(n, MAX_CHUNK);
    n = min64(n, rs->sbuf_size - (rs->s_head - rs->s_tail));
    n = min64(n, rs->sbuf_size - rs->s_head % rs->sbuf_size);
    if (n == 0)
        return 0;
    dst = rs->sbuf + rs->s_head % rs->sbuf_size;
    memcpy(dst, buf, n);
    rs->s_head += n;
    sge = (struct ibv_sge){ (uintptr_t)dst, (uint32_t)n, rs->smr->lkey };
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = rs->s_head;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = p->addr + (off - p->off);
    wr.wr.rdma.rkey = p->rkey;
    if (ibv_post_send(rs->qp, &wr, &bad) != 0) {
        rs->broken = 1;
        return 0;
    }
    rs->sq_out++;
    return n;
}

size_t
rs_iowrite(struct rsk *rs, const void *buf, size_t count, off_t offset,
           int flags)
{
    int nb = rs->nonblock || (flags & MSG_DONTWAIT), e;
    size_t done = 0;

    rs_progress(rs);
    while (done < count) {
        uint64_t n;
        if ((e = send_blocked(rs)) != 0) {
            errno = e;
            break;
        }
        if (find_rmap(rs, (uint64_t)offset + done) == NULL) {
            errno = EINVAL;     /* the peer mapped nothing there */
            break;
        }
        n = iowrite_chunk(rs, (const char *)buf + done, count - done,
                          (uint64_t)offset + done);
        done += n;
        if (n > 0 || rs_progress(rs) > 0)
            continue;
        if (nb) {
            errno = EAGAIN;
            break;
        }
        if (rs_wait(rs, -1) < 0)
            break;
    }
    return done > 0 ? done : (size_t)-1;
}
