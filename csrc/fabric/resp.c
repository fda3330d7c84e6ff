/* resp.c - the responder: receive queues (QP and SRQ, post_recv,
   post_srq_recv, SRQ limit), and executing requests (PSN order, RNR
   holds, key, bounds and access checks, SEND/WRITE/READ/atomics, UD's
   GRH), with their ACK or NAK queued through rel.c. */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* receive queues                                                      */

int
fab_rq_init(struct rq *r, uint32_t max_wr, uint32_t max_sge)
{
    uint32_t n = pow2(max_wr ? max_wr : 1), i;
    r->w = calloc(n, sizeof(*r->w));
    r->sges = calloc((size_t)n * (max_sge ? max_sge : 1), sizeof(*r->sges));
    if (r->w == NULL || r->sges == NULL) {
        free(r->w);
        free(r->sges);
        r->w = NULL;
        r->sges = NULL;
        return -1;
    }
    for (i = 0; i < n; i++)
        r->w[i].sge = r->sges + (size_t)i * (max_sge ? max_sge : 1);
    r->mask = n - 1;
    r->max_wr = max_wr;
    r->max_sge = max_sge;
    r->head = r->tail = 0;
    return 0;
}

void
fab_rq_free(struct rq *r)
{
    free(r->w);
    free(r->sges);
    r->w = NULL;
    r->sges = NULL;
}

/* Post receives; return 0 or an errno with *bad set. */
static int
rq_post(struct rq *r, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    for (; wr; wr = wr->next) {
        struct rwqe *w;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > r->max_sge) {
            *bad = wr;
            return EINVAL;
        }
        if (r->tail - r->head >= r->max_wr) {
            *bad = wr;
            return ENOMEM;
        }
        w = &r->w[r->tail & r->mask];
        w->wr_id = wr->wr_id;
        w->num_sge = wr->num_sge;
        if (wr->num_sge)
            memcpy(w->sge, wr->sg_list, sizeof(*w->sge) * (size_t)wr->num_sge);
        r->tail++;
    }
    return 0;
}

void
fab_rq_flush(struct uqp *q)
{
    while (q->rq.head != q->rq.tail) {
        struct rwqe *w = &q->rq.w[q->rq.head & q->rq.mask];
        struct pyrdma_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = w->wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = q->qpn;
        q->rq.head++;
        fab_cq_push(q->rcq, &wc, 0);
    }
}

/* ------------------------------------------------------------------ */
/* responder                                                           */

static const double rnr_ms[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
    0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48,
    30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
};

/* Build the 40-byte GRH of a UD receive (IB: an IPv6-style header); a
   multicast SEND's DGID is its group's (when the sender gave it). */
static void
build_grh(uint8_t *g, const struct wire *h, size_t plen)
{
    uint32_t vtf = htonl(6u << 28);
    uint16_t paylen = htons((uint16_t)(12 + 8 + ((plen + 3) & ~(size_t)3) +
                                       4));
    uint64_t sg = htobe64(h->src_guid), dg = htobe64(N.guid);
    memcpy(g, &vtf, 4);
    memcpy(g + 4, &paylen, 2);
    g[6] = 0x1B;            /* next header: IBA BTH */
    g[7] = 64;              /* hop limit */
    memcpy(g + 8, N.gid, 8);
    memcpy(g + 16, &sg, 8);
    memcpy(g + 24, N.gid, 8);
    memcpy(g + 32, &dg, 8);
    if ((h->flags & F_MCAST) && (uint8_t)h->raddr == 0xff) {
        memcpy(g + 24, &h->raddr, 8);   /* the GID's bytes, as sent */
        memcpy(g + 32, &h->cmp, 8);
    }
}

enum { RX_DONE, RX_HOLD };

/* Responder errors: NAK, responder QP to ERR. */
static void
rx_nak(struct uqp *q, const struct wire *h, int code)
{
    fab_queue_resp(q, h, code, NULL, 0);
    q->dead_epoch = h->epoch;
    q->dead_valid = 1;
}

/* An RDMA or atomic request that fails its checks: RC NAKs it
   (REM_ACCESS_ERR at the requester), raises the QP's access error and
   goes to ERR; UC drops it. */
static int
rx_access_err(struct uqp *q, const struct wire *h)
{
    if (q->type == IBV_QPT_RC) {
        rx_nak(q, h, R_REM_ACCESS);
        fab_ctx_event(q->pd->ctx, IBV_EVENT_QP_ACCESS_ERR, PYRDMA_EV_QP,
                      q->qp_context);
        fab_qp_enter_err(q);
    }
    return RX_DONE;
}

/* The MR an RDMA or atomic request may reach, checked as a NIC checks
   it: rkey, PD, the access flags of the MR (or of the memory window the
   rkey names: fab_mw_resolve) and the QP, bounds, alignment of atomics,
   and memory the program still has (mr->gone).  *raddr: where in the MR
   (a zero-based window's offset made an address).  *ok 0 if the request
   fails them; NULL with *ok 1 for a zero-length one. */
static struct umr *
rx_check_rkey(const struct uqp *q, const struct wire *h, int *ok,
              uint64_t *raddr)
{
    unsigned need = h->op == OP_WRITE ? IBV_ACCESS_REMOTE_WRITE :
                    h->op == OP_READ ? IBV_ACCESS_REMOTE_READ :
                    IBV_ACCESS_REMOTE_ATOMIC;
    uint64_t len = h->op >= OP_CAS ? 8 : h->len;
    struct umr *mr;
    struct umw *w;
    *ok = 1;
    *raddr = h->raddr;
    if (len == 0)
        return NULL;
    if ((w = fab_mw_lookup(h->rkey)) != NULL) {
        mr = fab_mw_resolve(q, w, need, raddr, len);
        if (mr == NULL || !(q->attr.qp_access_flags & need) ||
            (h->op >= OP_CAS && (*raddr & 7)) ||
            __atomic_load_n(&mr->gone, __ATOMIC_RELAXED))
            *ok = 0;
        return mr;
    }
    mr = mr_lookup(h->rkey);
    if (mr == NULL || mr->pd != q->pd || !(mr->access & need) ||
        !(q->attr.qp_access_flags & need) || !in_mr(mr, h->raddr, len) ||
        (h->op >= OP_CAS && (h->raddr & 7)) ||
        __atomic_load_n(&mr->gone, __ATOMIC_RELAXED))
        *ok = 0;
    return mr;
}

/* A READ of the program's own memory: its bytes are copied out while
   the unmapping hook sees the copy (fab_land_begin), into a buffer taken
   before (no allocation inside: see fab_land_begin), then sent. */
static int
rx_read_own(struct uqp *q, const struct wire *h, struct umr *mr,
            uint64_t raddr)
{
    uint8_t small[4096], *buf = small;
    int ok;
    if (h->len > sizeof(small) && (buf = malloc(h->len)) == NULL)
        return rx_access_err(q, h);     /* (as a NIC out of resources) */
    ok = fab_land_begin(mr);
    if (ok) {
        memcpy(buf, mr_at(mr, raddr), h->len);
        fab_land_end(mr);
        fab_queue_resp(q, h, R_READ, buf, h->len);
    }
    if (buf != small)
        free(buf);
    return ok ? RX_DONE : rx_access_err(q, h);
}

/* Execute an RDMA WRITE, READ or atomic request of an RC or UC QP:
   RX_DONE when it is answered (READ, atomics) or failed, RX_GO when the
   WRITE is done (its ACK and immediate data follow), RX_GO for any other
   request. */
#define RX_GO (-1)
static int
rx_execute(struct uqp *q, const struct wire *h, const uint8_t *pl)
{
    struct umr *mr;
    uint64_t *p, old, raddr;
    int ok;
    if (h->op != OP_WRITE && h->op != OP_READ && h->op != OP_CAS &&
        h->op != OP_FAA)
        return RX_GO;
    mr = rx_check_rkey(q, h, &ok, &raddr);
    if (!ok)
        return rx_access_err(q, h);
    if (h->op == OP_READ && mr != NULL && mr->own)
        return rx_read_own(q, h, mr, raddr);
    if (h->op == OP_READ) {
        fab_queue_resp(q, h, R_READ, h->len ? mr_at(mr, raddr) : NULL,
                       h->len);
        return RX_DONE;
    }
    if (mr != NULL && !fab_land_begin(mr))
        return rx_access_err(q, h);
    if (h->op == OP_WRITE) {
        if (h->len && !(h->flags & F_PLACED))
            memcpy(mr_at(mr, raddr), pl, h->len);
        fab_land_end(mr);
        return RX_GO;
    }
    p = (uint64_t *)mr_at(mr, raddr);
    if (h->op == OP_FAA)
        old = __atomic_fetch_add(p, h->cmp, __ATOMIC_SEQ_CST);
    else {
        old = h->cmp;
        __atomic_compare_exchange_n(p, &old, h->swap, 0, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
    }
    fab_land_end(mr);
    fab_queue_resp(q, h, R_ATOMIC, &old, 8);
    return RX_DONE;
}

/* Scatter a SEND's payload into receive w (on UD after the GRH, whose
   fields go into *wc). */
static void
rx_scatter_send(const struct uqp *q, const struct wire *h,
                const struct rwqe *w, const uint8_t *pl, size_t plen,
                struct pyrdma_wc *wc)
{
    uint8_t grh[GRH_LEN];
    struct pyrdma_sge tmp[MAX_SGE];
    int i, k = 0;
    size_t skip = GRH_LEN;
    if (q->type != IBV_QPT_UD) {
        scatter(w->sge, w->num_sge, pl, plen);
        return;
    }
    build_grh(grh, h, plen);
    scatter(w->sge, w->num_sge, grh, GRH_LEN);
    /* the payload goes after the GRH */
    for (i = 0; i < w->num_sge; i++) {
        if (w->sge[i].length <= skip) {
            skip -= w->sge[i].length;
            continue;
        }
        tmp[k] = w->sge[i];
        tmp[k].addr += skip;
        tmp[k].length -= (uint32_t)skip;
        skip = 0;
        k++;
    }
    scatter(tmp, k, pl, plen);
    wc->wc_flags |= IBV_WC_GRH;
    wc->src_qp = h->src_qpn;
    wc->slid = h->src_lid;
}

/* The request is for q as it is now: a UD QP takes SENDs with its
   Q_Key (others are dropped, as for a bad Q_Key); an RC or UC QP drops
   what its requester sent before it went to ERR (the epoch q NAKed). */
static int
rx_check_qp(const struct uqp *q, const struct wire *h)
{
    if (q->type == IBV_QPT_UD)
        return h->qkey == q->attr.qkey && h->op == OP_SEND;
    return !(q->dead_valid && h->epoch == q->dead_epoch);
}

/* A request that consumes a receive (SEND, WRITE with immediate) finds
   one in r: RX_GO.  Else UC and UD drop it (RX_DONE), RC holds it for
   the RNR timer (RX_HOLD), or NAKs it when its retries are used up
   (RX_DONE). */
static int
rx_check_resource(struct uqp *q, const struct wire *h, const struct rq *r,
                  const struct inmsg *held)
{
    if (r->head != r->tail)
        return RX_GO;
    if (q->type != IBV_QPT_RC)
        return RX_DONE;                 /* UC/UD: silently dropped */
    if (h->rnr_retry == 0 || (held && held->hold_until &&
                              !held->hold_forever &&
                              now_ns() >= held->hold_until)) {
        rx_nak(q, h, R_RNR_EXC);
        return RX_DONE;
    }
    return RX_HOLD;
}

/* Complete the receive at r's head for a SEND (its payload scattered
   into it) or a WRITE with immediate data.  0, or -1 if the receive
   fails (its protection or length: an error completion, RC NAKs, the QP
   goes to ERR). */
static int
rx_complete_recv(struct uqp *q, const struct wire *h, struct rq *r,
                 const uint8_t *pl, size_t plen)
{
    struct rwqe *w = &r->w[r->head & r->mask];
    struct pyrdma_wc wc;
    size_t room = 0, want;
    int i, bad, land;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = w->wr_id;
    wc.qp_num = q->qpn;
    wc.opcode = h->op == OP_SEND ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
    if (h->flags & (F_IMM | F_INV)) {
        wc.wc_flags |= (h->flags & F_IMM) ? IBV_WC_WITH_IMM : IBV_WC_WITH_INV;
        wc.imm_data = h->imm;   /* the immediate data, or the rkey */
    }
    for (i = 0; i < w->num_sge; i++)
        room += w->sge[i].length;
    want = h->op == OP_SEND ? plen + (q->type == IBV_QPT_UD ? GRH_LEN : 0)
                            : 0;
    land = fab_land_sges_begin();  /* (see fab_land_begin) */
    bad = fab_check_sges(q->pd, w->sge, w->num_sge, 1, IBV_WC_LOC_PROT_ERR);
    r->head++;
    if (!bad && want > room)
        bad = IBV_WC_LOC_LEN_ERR;
    if (!bad && h->op == OP_SEND) {
        rx_scatter_send(q, h, w, pl, plen, &wc);
        wc.byte_len = (uint32_t)want;
    }
    else
        wc.byte_len = h->len;
    fab_land_sges_end(land);
    /* a SEND with invalidate: a window of q's it may invalidate (mw.c) */
    if (!bad && (h->flags & F_INV) && fab_mw_invalidate(q, h->imm, 1) < 0)
        bad = IBV_WC_REM_INV_REQ_ERR;
    if (bad) {
        wc.status = bad;
        wc.byte_len = 0;
        fab_cq_push(q->rcq, &wc, 0);
        if (q->type == IBV_QPT_RC)
            rx_nak(q, h, bad == IBV_WC_LOC_LEN_ERR ||
                         bad == IBV_WC_REM_INV_REQ_ERR ? R_REM_INV : R_REM_OP);
        fab_qp_enter_err(q);    /* UD too, as rxe and mlx5 do */
        return -1;
    }
    if (q->srq != NULL && q->srq->limit &&
        r->tail - r->head < q->srq->limit) {
        q->srq->limit = 0;
        fab_ctx_event(q->pd->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, PYRDMA_EV_SRQ,
                      q->srq->srq_context);
    }
    fab_cq_push(q->rcq, &wc, h->flags & F_SOLICITED);
    return 0;
}

/* Execute one request on q, in the responder's steps: the QP, the
   resource (a receive), the rkey with the execution of an RDMA or
   atomic op (rx_execute), the receive's completion, the ACK.  RX_HOLD
   if it must wait for a receive. */
static int
rx_exec(struct uqp *q, const struct wire *h, const uint8_t *pl, size_t plen,
        struct inmsg *held)
{
    struct rq *r = q->srq ? &q->srq->rq : &q->rq;
    int need_recv = h->op == OP_SEND ||
                    (h->op == OP_WRITE && (h->flags & F_IMM));
    int rc;

    if (!rx_check_qp(q, h))
        return RX_DONE;
    if (need_recv && (rc = rx_check_resource(q, h, r, held)) != RX_GO)
        return rc;
    if ((q->type == IBV_QPT_RC || q->type == IBV_QPT_UC) &&
        rx_execute(q, h, pl) == RX_DONE)
        return RX_DONE;
    if (need_recv && rx_complete_recv(q, h, r, pl, plen) < 0)
        return RX_DONE;
    if (q->type == IBV_QPT_RC)
        fab_queue_ack(q, h);
    return RX_DONE;
}

void
fab_inmsg_free(struct inmsg *m)
{
    free(m->data);
    free(m);
}

/* Process q's queued inbound messages from the head. */
void
fab_inq_run(struct uqp *q)
{
    while (q->inq != NULL) {
        struct inmsg *m = q->inq;
        const struct wire *h = (const struct wire *)m->data;
        int rc;
        if (!m->ready)
            return;
        if (m->lost || (q->attr.qp_state != IBV_QPS_RTR &&
                        q->attr.qp_state != IBV_QPS_RTS &&
                        q->attr.qp_state != IBV_QPS_SQD))
            rc = RX_DONE;       /* dropped */
        else
            rc = rx_exec(q, h, m->data + sizeof(*h), m->len - sizeof(*h), m);
        if (rc == RX_HOLD) {
            if (!m->hold_until) {
                double ms = rnr_ms[q->attr.min_rnr_timer & 31];
                m->hold_forever = h->rnr_retry >= 7;
                m->hold_until = now_ns() +
                                (uint64_t)(ms * 1e6 * h->rnr_retry) + 1;
                N.timers = 1;
            }
            if (!m->waited) {
                m->waited = 1;
                fab_queue_resp(q, h, R_RNR_WAIT, NULL, 0);
            }
            return;
        }
        q->inq = m->next;
        if (q->inq == NULL)
            q->inq_tail = NULL;
        fab_inmsg_free(m);
    }
}

static void
inq_append(struct uqp *q, struct inmsg *m)
{
    m->qp = q;
    m->next = NULL;
    if (q->inq_tail)
        q->inq_tail->next = m;
    else
        q->inq = m;
    q->inq_tail = m;
}

/* A request arrived (N.lock held) with its payload pl (plen bytes), or,
   if rndv, with the payload still to be received: then *rndv_msg is set to
   the queued message whose data must receive it (after the header). */
/* A copy of an inbound request (the header, then the payload; with rndv
   the payload is still to come: *rndv_msg gets the message); NULL if out
   of memory. */
static struct inmsg *
inmsg_new(const struct wire *h, const uint8_t *pl, size_t plen, int rndv,
          struct inmsg **rndv_msg)
{
    struct inmsg *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->len = sizeof(*h) + plen;
    m->data = malloc(m->len);
    if (m->data == NULL) {
        free(m);
        return NULL;
    }
    memcpy(m->data, h, sizeof(*h));
    if (rndv) {
        m->inflight = 1;
        *rndv_msg = m;
    }
    else {
        if (plen)
            memcpy(m->data + sizeof(*h), pl, plen);
        m->ready = 1;
    }
    return m;
}

/* Free (or orphan, while UCP still writes into it) a list of messages. */
void
fab_inmsg_list_free(struct inmsg *m)
{
    struct inmsg *next;

    for (; m; m = next) {
        next = m->next;
        if (m->inflight)
            m->qp = NULL;       /* freed when UCP is done with it */
        else
            fab_inmsg_free(m);
    }
}

/* Requests that arrived ahead of their turn and whose turn has come move,
   in PSN order, behind the in-order ones. */
static void
ooo_drain(struct uqp *q)
{
    for (;;) {
        struct inmsg **pp, *m = NULL;
        for (pp = &q->ooo; *pp; pp = &(*pp)->next)
            if (((const struct wire *)(*pp)->data)->psn == q->expect_psn) {
                m = *pp;
                *pp = m->next;
                break;
            }
        if (m == NULL)
            return;
        q->expect_psn = (q->expect_psn + 1) & 0xFFFFFF;
        inq_append(q, m);
    }
}

/* A multicast SEND (F_MCAST, UD): a copy for each QP of this node
   attached to its group (mcast.c), each checked as a UD SEND to that QP
   (state, Q_Key, a receive).  The sender must be authenticated. */
static void
rx_mcast(const struct wire *h, const uint8_t *pl, size_t plen)
{
    const struct mcg *g;
    struct wire c;
    uint32_t i;
    if (!fab_auth_ok(h->src_guid, h->sid)) {
        fab_rx_denied();
        return;
    }
    g = fab_mcg_of(h);
    for (i = 0; g != NULL && i < g->nqp; i++) {
        struct uqp *q = qp_lookup(g->qpn[i]);
        if (q == NULL || (q->attr.qp_state != IBV_QPS_RTR &&
                          q->attr.qp_state != IBV_QPS_RTS &&
                          q->attr.qp_state != IBV_QPS_SQD))
            continue;
        c = *h;
        c.dst_qpn = q->qpn;
        rx_exec(q, &c, pl, plen, NULL);
    }
}

/* A request for a QP this node does not have (or of another type): an
   RC requester of an authenticated session learns it at once (hardware
   would let it time out); anything else is dropped. */
static void
rx_no_qp(const struct wire *h)
{
    int i;

    if (!fab_auth_ok(h->src_guid, h->sid)) {
        fab_rx_denied();
        return;
    }
    if (h->qp_type != IBV_QPT_RC)
        return;
    for (i = 0; i < N.npeers; i++)
        if (N.peers[i]->guid == h->src_guid && !N.peers[i]->failed &&
            N.peers[i]->rx_sid == h->sid) {
            struct uqp fake;
            memset(&fake, 0, sizeof(fake));
            fake.peer = N.peers[i];
            fake.qpn = h->dst_qpn;
            fab_queue_resp(&fake, h, R_NOQP, NULL, 0);
            if (N.ob_tail != NULL && N.ob_tail->qp == &fake)
                N.ob_tail->qp = NULL;
            break;
        }
}

/* Whether request h with plen bytes of payload is malformed: a SEND or
   WRITE whose payload is not its length (none for F_PLACED), F_PLACED
   on anything but a WRITE with immediate data. */
static int
rx_malformed(const struct wire *h, size_t plen)
{
    return ((h->op == OP_SEND || h->op == OP_WRITE) &&
            plen != ((h->flags & F_PLACED) ? 0 : h->len)) ||
           ((h->flags & F_PLACED) &&
            (h->op != OP_WRITE || !(h->flags & F_IMM)));
}

void
fab_on_req(const struct wire *h, const uint8_t *pl, size_t plen, int rndv,
           struct inmsg **rndv_msg)
{
    struct uqp *q = qp_lookup(h->dst_qpn);
    struct inmsg *m;
    int ok;

    if (N.sh != NULL)
        N.sh->st_am_req++;
    if (rx_malformed(h, plen)) {
        fab_rx_bad();
        return;                 /* malformed */
    }
    if (h->flags & F_MCAST) {
        if (!rndv)
            rx_mcast(h, pl, plen);
        return;                 /* (a UD SEND fits one MTU: never rndv) */
    }
    if (q == NULL || q->type != h->qp_type) {
        rx_no_qp(h);
        return;
    }
    /* the sender is who it says (its session), and an RC/UC QP takes
       requests from the node it is connected to only */
    if (q->type == IBV_QPT_UD ? !fab_auth_ok(h->src_guid, h->sid)
                              : (q->peer == NULL ||
                                 q->peer->guid != h->src_guid ||
                                 q->peer->rx_sid != h->sid)) {
        fab_rx_denied();
        return;
    }
    ok = q->attr.qp_state == IBV_QPS_RTR || q->attr.qp_state == IBV_QPS_RTS ||
         q->attr.qp_state == IBV_QPS_SQD;
    if (ok && q->type != IBV_QPT_UD && q->attr.dest_qp_num != h->src_qpn)
        ok = 0;
    if (!ok) {
        if (h->qp_type == IBV_QPT_RC && q->peer != NULL)
            fab_queue_resp(q, h, R_NOQP, NULL, 0);
        return;
    }
    if (q->type != IBV_QPT_UD && h->psn != q->expect_psn) {
        /* UCP delivers active messages reliably but not always in order
           (over tcp a short message can pass a longer one): a request
           ahead of its turn waits for the ones before it.  A duplicate or
           one from beyond the send queue's reach is dropped (the requester
           times out, as with a wrong PSN). */
        int32_t d = psn_diff(h->psn, q->expect_psn);
        if (d <= 0 || d > MAX_WR)
            return;
        m = inmsg_new(h, pl, plen, rndv, rndv_msg);
        if (m == NULL)
            return;
        m->qp = q;
        m->next = q->ooo;
        q->ooo = m;
        return;
    }
    if (q->type != IBV_QPT_UD) {
        q->expect_psn = (q->expect_psn + 1) & 0xFFFFFF;
        if (q->ooo != NULL) {
            /* this one, then the early ones its arrival lets through */
            m = inmsg_new(h, pl, plen, rndv, rndv_msg);
            if (m == NULL)
                return;
            inq_append(q, m);
            ooo_drain(q);
            fab_inq_run(q);
            return;
        }
    }
    if (!rndv && q->inq == NULL &&
        rx_exec(q, h, pl, plen, NULL) == RX_DONE)
        return;
    /* keep it: behind others, waiting for a receive, or for its data */
    m = inmsg_new(h, pl, plen, rndv, rndv_msg);
    if (m == NULL)
        return;
    inq_append(q, m);
    fab_inq_run(q);
}

/* Run the held messages of the QPs that take receives from r. */
static void
rq_refilled(struct usrq *srq, struct uqp *own)
{
    int i;
    if (own != NULL) {
        if (own->inq)
            fab_inq_run(own);
        return;
    }
    for (i = 0; i < (int)N.qp_hi; i++) {
        struct uqp *q = N.qps[i];
        if (q != NULL && q->srq == srq && q->inq != NULL && !q->destroyed)
            fab_inq_run(q);
    }
}

int
fab_post_srq_recv(void *vs, struct pyrdma_recv_wr *wr,
                  struct pyrdma_recv_wr **bad)
{
    struct usrq *s = vs;
    int rc, any;
    LOCK();
    rc = rq_post(&s->rq, wr, bad);
    rq_refilled(s, NULL);
    any = ob_urgent();
    UNLOCK();
    if (any)
        fab_drain(0);       /* a reply may follow: deferred ACKs stay */
    return rc;
}

int
fab_post_recv(void *vq, struct pyrdma_recv_wr *wr,
              struct pyrdma_recv_wr **bad)
{
    struct uqp *q = vq;
    int rc, any;
    LOCK();
    if (q->srq != NULL || q->attr.qp_state == IBV_QPS_RESET) {
        UNLOCK();
        *bad = wr;
        return EINVAL;
    }
    rc = rq_post(&q->rq, wr, bad);
    if (q->attr.qp_state == IBV_QPS_ERR)
        fab_rq_flush(q);
    else
        rq_refilled(NULL, q);
    any = ob_urgent();
    UNLOCK();
    if (any)
        fab_drain(0);       /* a reply may follow: deferred ACKs stay */
    return rc;
}
