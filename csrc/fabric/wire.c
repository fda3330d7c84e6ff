/* wire.c - messages in: the UCP active-message callback (am_cb), the
   checks of every message's header (msg_check), rendezvous data, and
   the dispatch of a request to the responder and of a response to the
   requester (am_dispatch).  The format is in wire.h. */
#include "fabric.h"

/* Rendezvous data of a message. */
struct rndv_rx {
    struct inmsg *m;       /* REQ: the queued message; NULL for RESP */
    struct wire h;         /* RESP: its header */
    uint8_t *buf;          /* RESP: its payload */
    size_t len;            /* RESP: payload bytes */
};

static void
rndv_done(void *req, ucs_status_t status, size_t length, void *user)
{
    struct rndv_rx *x = user;
    (void)length;
    LOCK();
    if (x->m != NULL) {
        struct inmsg *m = x->m;
        m->inflight = 0;
        if (m->qp == NULL)
            fab_inmsg_free(m);          /* its QP is gone */
        else {
            m->ready = 1;
            m->lost = status != UCS_OK;
            fab_inq_run(m->qp);
        }
    }
    else if (status == UCS_OK)
        fab_on_resp(&x->h, x->buf, x->len);
    UNLOCK();
    free(x->buf);
    free(x);
    if (req != NULL)
        U.request_free(req);
}

/* Is h, with plen payload bytes, a well-formed request or response (its
   kind, op, type, flags, PSN and lengths in range, the payload as long
   as the header says)?  What the responder then checks against its
   state (QP, source, rkey, bounds, access) comes later. */
int
fab_msg_check(const struct wire *h, size_t plen)
{
    if (h->kind == AM_REQ) {
        if (h->op > OP_FAA ||
            (h->flags & ~(F_IMM | F_SOLICITED | F_ACK | F_PLACED | F_INV |
                          F_MCAST)) ||
            ((h->flags & F_INV) && (h->op != OP_SEND || (h->flags & F_IMM) ||
                                    h->qp_type == IBV_QPT_UD)) ||
            ((h->flags & F_MCAST) && (h->op != OP_SEND ||
                                      h->qp_type != IBV_QPT_UD ||
                                      h->dst_qpn != MCAST_QPN)) ||
            (h->qp_type != IBV_QPT_RC && h->qp_type != IBV_QPT_UC &&
             h->qp_type != IBV_QPT_UD) || h->psn > 0xFFFFFF ||
            h->len > MAX_MSG || h->dst_qpn > 0xFFFFFF)
            return 0;
        if (h->op == OP_SEND)
            return plen == h->len;
        if (h->flags & F_PLACED)    /* the data is in place already */
            return h->op == OP_WRITE && (h->flags & F_IMM) && plen == 0 &&
                   h->qp_type == IBV_QPT_RC;
        if (h->op == OP_WRITE)
            return plen == h->len && h->qp_type != IBV_QPT_UD;
        if (h->qp_type != IBV_QPT_RC || plen != 0)
            return 0;           /* READ and atomics: RC, no payload */
        return h->op == OP_READ || h->len == 8;
    }
    if (h->kind == AM_RESP) {
        if (h->op > R_NOQP || h->dst_qpn > 0xFFFFFF)
            return 0;
        if (h->op == R_READ)
            return plen == h->len;
        if (h->op == R_ATOMIC)
            return plen == 8 && h->len == 8;
        return plen == 0;
    }
    return 0;
}

/* Execute a whole message, from UCP or a ring (N.lock held). */
void
fab_am_dispatch(const struct wire *h, const uint8_t *pl, size_t plen)
{
    if (h->kind == AM_REQ) {
        if (h->flags & F_ACK)
            fab_on_piggyback_ack(h);
        fab_on_req(h, pl, plen, 0, NULL);
    }
    else if (h->kind == AM_RESP)
        fab_on_resp(h, pl, plen);
}

/* A control message (HELLO, CHALLENGE, PROOF, RINGOPEN, BELL, CM): handled;
   1, or 0 if h is not one. */
static int
am_control(const struct wire *h, const void *data, size_t length,
           const ucp_am_recv_param_t *param)
{
    ucp_ep_h reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                     ? param->reply_ep : NULL;
    int ok;
    switch (h->kind) {
    case AM_CTL_HELLO:
        fab_hello_rx(h, reply);
        return 1;
    case AM_CTL_CHALLENGE:
        fab_challenge_rx(h);
        return 1;
    case AM_CTL_PROOF:
        fab_proof_rx(h, reply);
        return 1;
    case AM_CTL_CM:
        if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
            fab_rx_bad();       /* never that long */
        else
            fab_cm_rx(h, data, length);
        return 1;
    case AM_CTL_RINGOPEN:
    case AM_CTL_BELL:
        LOCK();
        ok = fab_auth_ok(h->src_guid, h->sid);
        UNLOCK();
        if (!ok)
            fab_rx_denied();
        else if (h->kind == AM_CTL_RINGOPEN)
            fab_ring_accept(h->src_guid);
        else
            fab_rings_poll();
        return 1;
    default:
        return 0;
    }
}

/* Where the data of a rendezvous request goes: its place in the QP's
   queue of incoming messages, reserved now (x->m); NULL: dropped. */
static void *
rndv_place_req(const struct wire *h, size_t length, struct rndv_rx *x)
{
    struct inmsg *m = NULL;
    LOCK();
    fab_on_req(h, NULL, length, 1, &m);
    UNLOCK();
    if (m == NULL)
        return NULL;
    x->m = m;
    return m->data + sizeof(*h);
}

/* Where the data of a rendezvous response goes: a buffer of x, if the
   response is for one of our QPs from its peer (else it is denied);
   NULL: dropped. */
static void *
rndv_place_resp(const struct wire *h, size_t length, struct rndv_rx *x)
{
    struct uqp *q;
    int ok;
    LOCK();
    q = qp_lookup(h->dst_qpn);
    ok = q != NULL && q->peer != NULL && q->peer->guid == h->src_guid &&
         q->peer->rx_sid == h->sid;
    UNLOCK();
    if (!ok) {
        fab_rx_denied();
        return NULL;
    }
    x->h = *h;
    x->len = length;
    x->buf = malloc(length ? length : 1);
    return x->buf;
}

/* A request or response whose data UCP holds back (rendezvous): a
   piggybacked ACK is taken at once; reserve the message's place, then
   fetch the data (rndv_done executes it). */
static void
am_rndv(const struct wire *h, void *data, size_t length)
{
    struct rndv_rx *x;
    ucp_request_param_t p;
    ucs_status_ptr_t r;
    void *dst;

    if (h->kind == AM_REQ && (h->flags & F_ACK)) {
        LOCK();
        fab_on_piggyback_ack(h);
        UNLOCK();
    }
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_am_rndv, 1, __ATOMIC_RELAXED);
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return;
    dst = h->kind == AM_REQ ? rndv_place_req(h, length, x)
                            : rndv_place_resp(h, length, x);
    if (dst == NULL) {
        free(x);
        return;
    }
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = rndv_done;
    p.user_data = x;
    r = U.am_recv_data_nbx(N.w, data, dst, length, &p);
    if (UCS_PTR_IS_ERR(r))
        rndv_done(NULL, UCS_PTR_STATUS(r), 0, x);
    else if (r == NULL)
        rndv_done(NULL, UCS_OK, length, x);
}

ucs_status_t
fab_am_cb(void *arg, const void *header, size_t header_length, void *data,
          size_t length, const ucp_am_recv_param_t *param)
{
    struct wire h;

    (void)arg;
    if (header_length != sizeof(h)) {
        fab_rx_bad();
        return UCS_OK;
    }
    memcpy(&h, header, sizeof(h));
    if (am_control(&h, data, length, param))
        return UCS_OK;
    if ((h.kind != AM_REQ && h.kind != AM_RESP) || !fab_msg_check(&h, length)) {
        fab_rx_bad();
        return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        am_rndv(&h, data, length);
        return UCS_OK;
    }
    LOCK();
    fab_am_dispatch(&h, data, length);
    UNLOCK();
    return UCS_OK;
}
