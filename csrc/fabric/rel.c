/* rel.c - reliability (rxe's completer and the responder's ACKs): the
   outbox of responses sent in order outside every lock, ACK coalescing,
   deferral and piggybacking, NAKs, the requester's handling of ACK, NAK,
   RNR and READ/atomic responses, SQ completions, ACK timeouts with
   retry, and RNR hold expiry (timers). */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* the outbox: responses, sent in order outside every lock             */

static struct obox *
ob_new_ep(struct uqp *q, ucp_ep_h ep, size_t len)
{
    struct obox *o = N.ob_free;
    if (o != NULL)
        N.ob_free = o->next;
    else if ((o = malloc(sizeof(*o))) == NULL)
        return NULL;
    o->next = NULL;
    o->qp = q;
    o->ep = ep;
    o->late = o->cancel = 0;
    o->len = len;
    o->buf = len <= sizeof(o->small) ? o->small : malloc(len);
    if (o->buf == NULL) {
        o->next = N.ob_free;
        N.ob_free = o;
        return NULL;
    }
    if (N.ob_tail)
        N.ob_tail->next = o;
    else
        N.ob_head = o;
    N.ob_tail = o;
    N.ob_plain++;
    return o;
}

/* Queue a copy of the message at buf (struct wire + payload) to ep: a
   multicast SEND's copy to one member node (mcast.c).  0 or -1. */
int
fab_queue_copy(ucp_ep_h ep, const uint8_t *buf, size_t len)
{
    struct obox *o = ob_new_ep(NULL, ep, len);
    if (o == NULL)
        return -1;
    memcpy(o->buf, buf, len);
    return 0;
}

static struct obox *
ob_new(struct uqp *q, size_t len)
{
    return ob_new_ep(q, q->peer->ep, len);
}

static void
ob_recycle(struct obox *o)
{
    if (o->buf != o->small)
        free(o->buf);
    o->buf = NULL;
    o->next = N.ob_free;
    N.ob_free = o;
}

static void
resp_header(struct wire *r, struct uqp *q, const struct wire *h, int code)
{
    memset(r, 0, sizeof(*r));
    r->kind = AM_RESP;
    r->op = (uint8_t)code;
    r->dst_qpn = h->src_qpn;
    r->src_qpn = q->qpn;
    r->psn = h->psn;
    r->slot = h->slot;
    r->epoch = h->epoch;
    r->src_guid = N.guid;
    r->src_lid = N.lid;
    r->sid = q->peer != NULL ? q->peer->tx_sid : 0;
}

/* Set while the application's own poll_cq makes progress: an ACK queued
   then may wait (uqp.dack) for the application's next request on that
   QP to carry it (F_ACK), if the QP has shown that pattern (uqp.alt: a
   post_send after requests came in, twice running; a deferred ACK that
   no request took sets it back below the mark, so that a QP that stopped
   replying does not defer again before it replies again).
   A deferred ACK is sent by the next full drain: an empty poll_cq, the
   progress thread (within about a millisecond), destroy_qp of its QP (a
   program that closes and exits right after its last receive), the end
   of the process (node_atexit) or a request's post_send taking it over.  Only fab_drain(0) (a poll_cq that returns completions,
   post_recv) leaves it held.  A deferred ACK is held in its QP (no
   outbox entry made, then cancelled, per message); the QPs holding one
   are on N.dack_head's list, which a full drain empties. */
__thread int fab_in_app_poll __attribute__((tls_model("initial-exec")));

/* The deferred ACK q holds goes into the outbox (N.lock held): late, a
   full drain sends it because no request took it; else something must
   follow it (a response, an ACK of another epoch). */
void
fab_dack_queue(struct uqp *q, int late)
{
    struct obox *o;
    struct wire h;
    if (!q->dack)
        return;
    q->dack = 0;
    o = ob_new_ep(q, q->dack_ep, sizeof(struct wire));
    if (o == NULL)
        return;
    memset(&h, 0, sizeof(h));
    h.src_qpn = q->dack_dst_qpn;
    h.psn = q->dack_psn;
    h.slot = q->dack_slot;
    h.epoch = q->dack_epoch;
    resp_header((struct wire *)o->buf, q, &h, R_ACK);
    o->late = late;
    q->ack_item = o;
}

/* A full drain: every deferred ACK goes into the outbox (N.lock held). */
static void
dack_queue_all(void)
{
    struct uqp *q, *next;
    for (q = N.dack_head; q != NULL; q = next) {
        next = q->dack_next;
        q->dack_next = NULL;
        q->dack_listed = 0;
        fab_dack_queue(q, 1);
    }
    N.dack_head = NULL;
}

/* q is going away: off N.dack_head's list (N.lock held). */
void
fab_dack_unlist(struct uqp *q)
{
    struct uqp **pp;
    if (!q->dack_listed)
        return;
    for (pp = &N.dack_head; *pp != NULL; pp = &(*pp)->dack_next)
        if (*pp == q) {
            *pp = q->dack_next;
            break;
        }
    q->dack_next = NULL;
    q->dack_listed = 0;
}

/* Queue a coalescing ACK of h->psn for q. */
void
fab_queue_ack(struct uqp *q, const struct wire *h)
{
    struct obox *o = q->ack_item;
    if (q->peer == NULL || q->peer->failed || q->peer->ended)
        return;
    q->rx_seen = 1;
    if (q->dack) {
        if (q->dack_epoch == h->epoch) {
            q->dack_psn = h->psn;       /* it acknowledges this one too */
            q->dack_slot = h->slot;
            return;
        }
        fab_dack_queue(q, 0);               /* another epoch's: in order */
        o = q->ack_item;
    }
    if (o != NULL) {
        struct wire *r = (struct wire *)o->buf;
        if (r->epoch == h->epoch) {
            r->psn = h->psn;
            r->slot = h->slot;
            return;
        }
    }
    if (fab_in_app_poll && q->alt >= 2) {
        /* held for the application's next request on q to carry */
        q->dack = 1;
        q->dack_psn = h->psn;
        q->dack_slot = h->slot;
        q->dack_epoch = h->epoch;
        q->dack_dst_qpn = h->src_qpn;
        q->dack_ep = q->peer->ep;
        q->ack_item = NULL;     /* later ACKs coalesce into this one */
        if (!q->dack_listed) {
            q->dack_listed = 1;
            q->dack_next = N.dack_head;
            N.dack_head = q;
        }
        return;
    }
    o = ob_new(q, sizeof(struct wire));
    if (o == NULL)
        return;
    resp_header((struct wire *)o->buf, q, h, R_ACK);
    q->ack_item = o;
}

/* Queue a response other than an ACK (data may be NULL). */
void
fab_queue_resp(struct uqp *q, const struct wire *h, int code, const void *data,
               size_t dlen)
{
    struct obox *o;
    if (q->peer == NULL || q->peer->failed || q->peer->ended)
        return;
    fab_dack_queue(q, 0);       /* an ACK held for q goes first */
    o = ob_new(q, sizeof(struct wire) + dlen);
    if (o == NULL)
        return;
    resp_header((struct wire *)o->buf, q, h, code);
    if (code != R_READ && code != R_ATOMIC && code != R_RNR_WAIT)
        q->naked = 1;
    ((struct wire *)o->buf)->len = (uint32_t)dlen;
    if (dlen)
        memcpy(o->buf + sizeof(struct wire), data, dlen);
    q->ack_item = NULL;     /* later ACKs must come after this */
}

static void
ob_sent_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    LOCK();
    ob_recycle(user);
    UNLOCK();
    __atomic_fetch_sub(&N.ob_pending, 1, __ATOMIC_RELEASE);
    U.request_free(req);
}

/* Send the outbox.  Never called with N.lock held nor from a UCP callback;
   whoever holds drain_lock sends everything, in order.  all = 0 (on the
   application's critical path) sends all but the deferred ACKs, which
   stay held in their QPs, and does not look again for what others queued
   while it held drain_lock: the next full drain (an empty poll_cq, the
   progress thread within ~1 ms) sends that.  all = 2 is all = 1 that
   waits for drain_lock instead of leaving the work to its holder. */
void
fab_drain(int all)
{
    /* nothing queued (a racy hint: whoever queues drains afterwards) */
    if (__atomic_load_n(&N.ob_head, __ATOMIC_ACQUIRE) == NULL &&
        (!all || __atomic_load_n(&N.dack_head, __ATOMIC_ACQUIRE) == NULL))
        return;
    /* only ACKs requests carried: fab_drain(0) leaves them (same hint) */
    if (!all && __atomic_load_n(&N.ob_plain, __ATOMIC_RELAXED) == 0)
        return;
    for (;;) {
        struct obox *list, *o, *next, *recycle = NULL;
        int busy;
        if (all == 2)
            pthread_mutex_lock(&N.drain_lock);
        else if (pthread_mutex_trylock(&N.drain_lock) != 0)
            return;
        for (;;) {
            struct obox *send = NULL, **send_end = &send;
            LOCK();
            if (all)
                dack_queue_all();
            list = N.ob_head;
            N.ob_head = N.ob_tail = NULL;
            N.ob_plain = 0;
            for (o = list; o; o = next) {
                next = o->next;
                o->next = NULL;
                if (o->cancel) {
                    ob_recycle(o);          /* a request carried it */
                    continue;
                }
                if (o->qp != NULL && o->qp->ack_item == o)
                    o->qp->ack_item = NULL;
                if (N.sh != NULL && ((struct wire *)o->buf)->op == R_ACK &&
                    ((struct wire *)o->buf)->kind == AM_RESP)
                    N.sh->st_ack_msg++;
                if (o->late && o->qp != NULL)
                    o->qp->alt = 1;     /* no reply took it: the next
                                           one must come first */
                if (o->late && N.sh != NULL)
                    N.sh->st_ack_late++;
                *send_end = o;
                send_end = &o->next;
            }
            UNLOCK();
            if (send == NULL)
                break;
            for (o = send; o; o = next) {
                ucp_request_param_t p;
                ucs_status_ptr_t r;
                next = o->next;
                memset(&p, 0, sizeof(p));
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                 UCP_OP_ATTR_FIELD_USER_DATA;
                p.cb.send = ob_sent_cb;
                p.user_data = o;
                __atomic_fetch_add(&N.ob_pending, 1, __ATOMIC_RELAXED);
                r = U.am_send_nbx(o->ep, AM_RESP, o->buf,
                                  sizeof(struct wire),
                                  o->buf + sizeof(struct wire),
                                  o->len - sizeof(struct wire), &p);
                if (!UCS_PTR_IS_PTR(r)) {
                    __atomic_fetch_sub(&N.ob_pending, 1, __ATOMIC_RELAXED);
                    o->next = recycle;
                    recycle = o;
                }
            }
            if (recycle) {
                LOCK();
                for (o = recycle; o; o = next) {
                    next = o->next;
                    ob_recycle(o);
                }
                UNLOCK();
                recycle = NULL;
            }
            if (!all)
                break;              /* what came meanwhile: the next one */
        }
        pthread_mutex_unlock(&N.drain_lock);
        if (!all)
            return;     /* the next full drain sends what came meanwhile */
        /* queued meanwhile by a thread that found drain_lock taken? */
        LOCK();
        o = N.ob_head;
        busy = N.dack_head != NULL;
        UNLOCK();
        if (o == NULL && !busy)
            return;
    }
}

/* Send everything queued and deferred (fab_drain(2)) and let UCP hand it over
   (over TCP, to the kernel) for at most 200 ms: before a QP or the
   process goes.  No lock held. */
void
fab_drain_out(void)
{
    uint64_t t0 = now_ns();
    fab_drain(2);
    while (__atomic_load_n(&N.ob_pending, __ATOMIC_ACQUIRE) != 0 &&
           now_ns() - t0 < 200000000ull)
        U.worker_progress(N.w);
}

/* ------------------------------------------------------------------ */
/* SQ completions                                                     */

const int fab_wc_opcode_of[] = {
    [IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
    [IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
    [IBV_WR_SEND] = IBV_WC_SEND,
    [IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
    [IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
    [IBV_WR_ATOMIC_CMP_AND_SWP] = IBV_WC_COMP_SWAP,
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = IBV_WC_FETCH_ADD,
    [IBV_WR_LOCAL_INV] = IBV_WC_LOCAL_INV,
    [IBV_WR_BIND_MW] = IBV_WC_BIND_MW,
    [IBV_WR_SEND_WITH_INV] = IBV_WC_SEND,
};

/* Complete the done slots at the head of the SQ, in order. */
void
fab_sq_advance(struct uqp *q)
{
    while (q->sq_head != q->sq_tail) {
        struct slot *s = &q->sq[q->sq_head & q->sq_mask];
        if (!s->done)
            break;
        if (s->status != IBV_WC_SUCCESS || s->signaled) {
            struct pyrdma_wc wc;
            memset(&wc, 0, sizeof(wc));
            wc.wr_id = s->wr_id;
            wc.status = s->status;
            wc.opcode = (s->opcode >= 0 && s->opcode <= IBV_WR_SEND_WITH_INV)
                        ? fab_wc_opcode_of[s->opcode] : IBV_WC_SEND;
            wc.byte_len = s->byte_len;
            wc.qp_num = q->qpn;
            fab_cq_push(q->scq, &wc, 0);
        }
        if (s->status != IBV_WC_SUCCESS && s->status != IBV_WC_WR_FLUSH_ERR)
            fab_qp_enter_err(q);
        q->sq_head++;
    }
    if (q->attr.sq_draining)
        fab_sq_drained(q);
    if (q->held != NULL)
        fab_sqd_flush(q);       /* WRs posted in SQD, the QP now in ERR */
}

/* Fail slot i with status; every later WR flushes. */
void
fab_sq_fail(struct uqp *q, uint32_t i, int status)
{
    uint32_t k;
    struct slot *s = &q->sq[i & q->sq_mask];
    s->done = 1;
    s->status = status;
    for (k = i + 1; k != q->sq_tail; k++) {
        struct slot *t = &q->sq[k & q->sq_mask];
        if (!t->done) {
            t->done = 1;
            t->status = IBV_WC_WR_FLUSH_ERR;
        }
    }
    q->err_pending = 1;
}

/* Fail the first outstanding WR of q (peer gone, timeout). */
void
fab_sq_fail_outstanding(struct uqp *q, int status)
{
    uint32_t i;
    for (i = q->sq_head; i != q->sq_tail; i++)
        if (!q->sq[i & q->sq_mask].done) {
            fab_sq_fail(q, i, status);
            break;
        }
    fab_sq_advance(q);
}

/* ------------------------------------------------------------------ */
/* responses at the requester: ACK, NAK, RNR, READ and atomic data    */

/* A response arrived (N.lock held). */
void
fab_on_resp(const struct wire *h, const uint8_t *pl, size_t plen)
{
    struct uqp *q = qp_lookup(h->dst_qpn);
    struct slot *s;
    uint32_t i;

    if (q == NULL || q->type != IBV_QPT_RC)
        return;
    if (q->peer == NULL || q->peer->guid != h->src_guid ||
        q->peer->rx_sid != h->sid) {
        fab_rx_denied();            /* only the node it is connected to */
        return;
    }
    if (h->epoch != q->epoch)
        return;                 /* for an earlier incarnation */
    if (h->op == R_ACK) {
        for (i = q->sq_head; i != q->sq_tail; i++) {
            s = &q->sq[i & q->sq_mask];
            if (psn_diff(s->psn, h->psn) > 0)
                break;
            if (!s->done && (s->opcode == IBV_WR_SEND ||
                             s->opcode == IBV_WR_SEND_WITH_IMM ||
                             s->opcode == IBV_WR_SEND_WITH_INV ||
                             s->opcode == IBV_WR_RDMA_WRITE ||
                             s->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
                s->done = 1;
                s->status = IBV_WC_SUCCESS;
            }
        }
        fab_sq_advance(q);
        return;
    }
    if ((uint32_t)(h->slot - q->sq_head) >= (uint32_t)(q->sq_tail - q->sq_head))
        return;
    s = &q->sq[h->slot & q->sq_mask];
    if (s->done || s->psn != h->psn)
        return;
    switch (h->op) {
    case R_READ:
    case R_ATOMIC: {
        /* (a landing in the program's memory: see fab_land_begin) */
        int land = fab_land_sges_begin();
        int bad = fab_check_sges(q->pd, s->sge, s->num_sge, 1,
                                 IBV_WC_LOC_PROT_ERR);
        if (!bad && h->op == R_ATOMIC && plen >= 8)
            scatter(s->sge, s->num_sge, pl, 8);
        else if (!bad && h->op == R_READ)
            scatter(s->sge, s->num_sge, pl, plen);
        fab_land_sges_end(land);
        if (bad) {
            fab_sq_fail(q, h->slot, bad);
            break;
        }
        s->byte_len = h->op == R_ATOMIC ? 8 : (uint32_t)plen;
        s->done = 1;
        s->status = IBV_WC_SUCCESS;
        break;
    }
    case R_RNR_WAIT:
        s->rnr_wait = 1;
        s->deadline = 0;
        return;
    case R_NOQP:
        /* the target QP does not exist or is not in RTR/RTS: a NIC's
           request goes unanswered until the requester's ACK timer runs
           out, and so does this one (a peer that destroyed its QP at its
           end, as ibv_srq_pingpong does with SENDs of the other side still
           on the way, is not taken for a failure before then); a WR
           without a timer (timeout 0) fails now instead of waiting
           forever */
        if (s->deadline != 0)
            return;
        fab_sq_fail(q, h->slot, IBV_WC_RETRY_EXC_ERR);
        break;
    case R_RNR_EXC:
        fab_sq_fail(q, h->slot, IBV_WC_RNR_RETRY_EXC_ERR);
        break;
    case R_REM_ACCESS:
        fab_sq_fail(q, h->slot, IBV_WC_REM_ACCESS_ERR);
        break;
    case R_REM_INV:
        fab_sq_fail(q, h->slot, IBV_WC_REM_INV_REQ_ERR);
        break;
    case R_REM_OP:
        fab_sq_fail(q, h->slot, IBV_WC_REM_OP_ERR);
        break;
    default:
        fab_sq_fail(q, h->slot, IBV_WC_RETRY_EXC_ERR);
        break;
    }
    fab_sq_advance(q);
}

/* The cumulative ACK for our side of the QP that the peer's request h
   carries (piggyback_ack; N.lock held). */
void
fab_on_piggyback_ack(const struct wire *h)
{
    struct wire a;
    memset(&a, 0, sizeof(a));
    a.kind = AM_RESP;
    a.op = R_ACK;
    a.src_guid = h->src_guid;
    a.sid = h->sid;
    a.dst_qpn = h->dst_qpn;
    a.psn = h->ack_psn;
    a.epoch = h->ack_epoch;
    fab_on_resp(&a, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* timers: ACK timeouts and retries, RNR holds, peers' liveness       */

void
fab_timers(void)
{
    uint64_t t = now_ns();
    int i, any = 0, ended = 0;

    LOCK();
    for (i = 0; i < N.npeers; i++) {
        struct peer *p = N.peers[i];
        if (!p->failed && p->pid && p->pid != getpid() &&
            t >= p->next_check) {
            char c = fab_pid_state(p->pid);
            p->next_check = t + 100000000ull;
            p->stopped = c == 'T' || c == 't';
            if (c == 0 || c == 'Z')
                ended = p->ended = 1;
        }
        else if (!p->failed && p->rec_live && t >= p->next_check) {
            /* in another pid namespace: its record's lock */
            p->next_check = t + 100000000ull;
            if (!fab_record_alive(p->guid))
                ended = p->ended = 1;
        }
    }
    if (ended) {
        /* What a peer sent before it ended may still wait in this node's
           transports (a last ACK in a socket or a UCX FIFO, while the
           application's own poll_cq, which progresses UCP, was not
           scheduled): take it in first, as a NIC delivers what was on
           the wire, then fail what is still outstanding.  The rings of
           senders that ended are run below (fab_rings_check), before
           their QPs fail too. */
        unsigned n = 0, k;
        UNLOCK();
        while ((k = U.worker_progress(N.w)) != 0 && n < 10000)
            n += k;
        LOCK();
        N.ring_check = 0;
    }
    fab_rings_check(t);
    for (i = 0; ended && i < N.npeers; i++)
        if (N.peers[i]->ended && !N.peers[i]->failed)
            fab_peer_fail_locked(N.peers[i]);
    for (i = 0; i < (int)N.qp_hi; i++) {
        struct uqp *q = N.qps[i];
        uint32_t k;
        if (q == NULL || q->destroyed)
            continue;
        for (k = q->sq_head; k != q->sq_tail; k++) {
            struct slot *s = &q->sq[k & q->sq_mask];
            if (s->done)
                continue;
            any = 1;
            /* a stopped same-host peer is a host whose CPU stopped,
               not a lost link: the timer starts again when it goes on
               (its one-sided ops went on meanwhile: fast_op) */
            if (s->deadline == DEADLINE_UNSET ||
                (q->peer != NULL && q->peer->stopped && s->deadline))
                s->deadline = t + s->tmo;
            if ((s->deadline && t >= s->deadline) ||
                (q->peer && q->peer->failed))
                fab_sq_fail_outstanding(q, IBV_WC_RETRY_EXC_ERR);
            break;
        }
        if (q->inq != NULL && q->inq->hold_until) {
            any = 1;
            if (!q->inq->hold_forever && t >= q->inq->hold_until)
                fab_inq_run(q);
        }
    }
    N.timers = any;
    UNLOCK();
}
