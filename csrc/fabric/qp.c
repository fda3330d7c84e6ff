/* qp.c - QP and SRQ objects: create, modify (the QP state machine and
   its attribute table), query and destroy, a QP's reset and its move to
   the error state. */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* the error state                                                    */

void
fab_qp_enter_err(struct uqp *q)
{
    if (q->attr.qp_state == IBV_QPS_ERR)
        return;
    q->attr.qp_state = IBV_QPS_ERR;
    fab_sh_qp_sync(q);
    if (q->srq != NULL)
        fab_ctx_event(q->pd->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, PYRDMA_EV_QP,
                      q->qp_context);
    else
        fab_rq_flush(q);
}

/* Every outstanding send WR of q flushes (completed by the caller's or
   the next fab_sq_advance) and q goes to ERR.  N.lock held. */
void
fab_qp_flush_to_err(struct uqp *q)
{
    uint32_t i;
    for (i = q->sq_head; i != q->sq_tail; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        if (!s->done) {
            s->done = 1;
            s->status = IBV_WC_WR_FLUSH_ERR;
        }
    }
    q->err_pending = 1;
    fab_qp_enter_err(q);
}

/* A QP in SQD whose send queue is draining: once no send WR is
   outstanding, it is drained (query_qp's sq_draining drops) and, if
   the program asked (en_sqd_async_notify), IBV_EVENT_SQ_DRAINED is
   raised.  N.lock held. */
void
fab_sq_drained(struct uqp *q)
{
    if (q->attr.qp_state != IBV_QPS_SQD || !q->attr.sq_draining ||
        q->sq_head != q->sq_tail)
        return;
    q->attr.sq_draining = 0;
    if (q->attr.en_sqd_async_notify)
        fab_ctx_event(q->pd->ctx, IBV_EVENT_SQ_DRAINED, PYRDMA_EV_QP,
                      q->qp_context);
}

/* ------------------------------------------------------------------ */
/* SRQ                                                                 */

int
fab_create_srq(void *pd, struct pyrdma_srq_attr *a, void *ctxp, void **out,
               struct pyrdma_status *st)
{
    struct usrq *s;
    if (a->max_wr < 1 || a->max_wr > MAX_WR || a->max_sge > MAX_SGE)
        return pyrdma_fail(st, EINVAL, "ibv_create_srq", "max_wr %u / "
                           "max_sge %u (limits %d / %d)", a->max_wr,
                           a->max_sge, MAX_WR, MAX_SGE);
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    if (fab_rq_init(&s->rq, a->max_wr, a->max_sge ? a->max_sge : 1) < 0) {
        free(s);
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    }
    s->pd = pd;
    s->srq_context = ctxp;
    s->limit = a->srq_limit;
    a->max_sge = s->rq.max_sge;
    *out = s;
    return 0;
}

/* Resize s's receive queue to max_wr (N.lock held): the posted receives
   move to the new ring in order.  0, or -1 with st set. */
static int
srq_resize(struct usrq *s, uint32_t max_wr, struct pyrdma_status *st)
{
    struct rq n;
    uint32_t i, posted = s->rq.tail - s->rq.head;
    if (max_wr < 1 || max_wr > MAX_WR)
        return pyrdma_fail(st, EINVAL, "ibv_modify_srq", "max_wr %u (limit "
                           "%d)", max_wr, MAX_WR);
    if (max_wr < posted)
        return pyrdma_fail(st, EINVAL, "ibv_modify_srq", "max_wr %u is "
                           "below the %u receives posted", max_wr, posted);
    if (fab_rq_init(&n, max_wr, s->rq.max_sge) < 0)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    for (i = 0; i < posted; i++) {
        struct rwqe *from = &s->rq.w[(s->rq.head + i) & s->rq.mask];
        struct rwqe *to = &n.w[i & n.mask];
        to->wr_id = from->wr_id;
        to->num_sge = from->num_sge;
        memcpy(to->sge, from->sge, sizeof(*to->sge) * (size_t)from->num_sge);
    }
    n.tail = posted;
    fab_rq_free(&s->rq);
    s->rq = n;
    return 0;
}

int
fab_modify_srq(void *vs, struct pyrdma_srq_attr *a, int mask,
               struct pyrdma_status *st)
{
    struct usrq *s = vs;
    uint32_t max_wr;
    int rc = 0;
    if (mask & ~(PYRDMA_SRQ_MAX_WR | PYRDMA_SRQ_LIMIT))
        return pyrdma_fail(st, EINVAL, "ibv_modify_srq", "unknown mask bits "
                           "%#x", (unsigned)mask);
    LOCK();
    max_wr = (mask & PYRDMA_SRQ_MAX_WR) ? a->max_wr : s->rq.max_wr;
    if ((mask & PYRDMA_SRQ_MAX_WR) && s->limit && max_wr < s->limit &&
        !(mask & PYRDMA_SRQ_LIMIT))
        rc = pyrdma_fail(st, EINVAL, "ibv_modify_srq", "max_wr %u is below "
                         "the srq_limit %u", max_wr, s->limit);
    else if ((mask & PYRDMA_SRQ_LIMIT) && a->srq_limit > max_wr)
        rc = pyrdma_fail(st, EINVAL, "ibv_modify_srq", "srq_limit %u > "
                         "max_wr %u", a->srq_limit, max_wr);
    else if (mask & PYRDMA_SRQ_MAX_WR)
        rc = srq_resize(s, max_wr, st);
    if (rc == 0 && (mask & PYRDMA_SRQ_LIMIT))
        s->limit = a->srq_limit;
    UNLOCK();
    return rc;
}

int
fab_query_srq(void *vs, struct pyrdma_srq_attr *a, struct pyrdma_status *st)
{
    struct usrq *s = vs;
    (void)st;
    a->max_wr = s->rq.max_wr;
    a->max_sge = s->rq.max_sge;
    a->srq_limit = s->limit;
    return 0;
}

int
fab_destroy_srq(void *vs, struct pyrdma_status *st)
{
    struct usrq *s = vs;
    (void)st;
    fab_rq_free(&s->rq);
    free(s);
    return 0;
}

/* ------------------------------------------------------------------ */
/* QP                                                                  */

/* The QP table rows new QPs take turns over: QP_WIN_MIN, doubled while
   it is not twice the live QPs (and two reserved rows), at most MAX_QP.
   Taking turns over all MAX_QP rows touched a new row of N.qps, N.qp_gen
   and the key page's sh_qp per QP created until all 16384 were touched
   (some 700 KiB per process, and N.qp_hi at its top for every scan of
   the table); now the rows touched follow the most QPs alive at once. */
static uint32_t
qp_window(void)
{
    uint32_t w = QP_WIN_MIN;
    while (w < MAX_QP && w < 2 * (N.qp_live + 2))
        w <<= 1;
    return w;
}

/* Give q a free row of the QP table and its QPN: the row after the last
   one given within the window (a row's QPN comes back only after
   1024 turns of the window).  N.lock held.  0, or -1 if the table is
   full. */
static int
qp_index_take(struct uqp *q)
{
    uint32_t w = qp_window(), start = N.qp_next, i, idx = 0;
    if (start < 2 || start >= w)
        start = 2;
    for (i = 0; i < w - 2; i++) {
        idx = 2 + (start - 2 + i) % (w - 2);
        if (N.qps[idx] == NULL)
            break;
    }
    if (i == w - 2)
        return -1;
    N.qp_next = idx + 1;
    if (idx + 1 > N.qp_hi)
        N.qp_hi = idx + 1;
    N.qp_live++;
    N.qp_gen[idx] = (uint16_t)((N.qp_gen[idx] + 1) & 0x3ff);
    q->qpn = ((uint32_t)N.qp_gen[idx] << QPN_IDX_BITS) | idx;
    N.qps[idx] = q;
    return 0;
}

int
fab_create_qp(void *vpd, struct pyrdma_qp_init_attr *a, void **out,
              uint32_t *qpn, struct pyrdma_status *st)
{
    struct uqp *q;
    struct pyrdma_qp_cap *c = &a->cap;
    uint32_t n, i;

    if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC &&
        a->qp_type != IBV_QPT_UD)
        return pyrdma_fail(st, EINVAL, "ibv_create_qp", "qp_type %d",
                           a->qp_type);
    if (c->max_send_wr > MAX_WR || c->max_recv_wr > MAX_WR ||
        c->max_send_sge > MAX_SGE || c->max_recv_sge > MAX_SGE ||
        c->max_inline_data > MAX_INLINE)
        return pyrdma_fail(st, EINVAL, "ibv_create_qp", "capacities beyond "
                           "the device's (wr %d, sge %d, inline %d)", MAX_WR,
                           MAX_SGE, MAX_INLINE);
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    q->pd = vpd;
    q->scq = a->send_cq;
    q->rcq = a->recv_cq;
    q->srq = a->srq;
    q->qp_context = a->qp_context;
    q->type = a->qp_type;
    q->sq_sig_all = a->sq_sig_all;
    if (c->max_send_sge == 0)
        c->max_send_sge = 1;
    if (c->max_recv_sge == 0)
        c->max_recv_sge = 1;
    if (q->srq != NULL) {
        c->max_recv_wr = 0;
        c->max_recv_sge = 0;
    }
    q->cap = *c;
    n = pow2(c->max_send_wr ? c->max_send_wr : 1);
    q->sq = calloc(n, sizeof(*q->sq));
    if (q->sq == NULL)
        goto nomem;
    for (i = 0; i < n; i++) {
        q->sq[i].sge = calloc(c->max_send_sge, sizeof(struct pyrdma_sge));
        if (q->sq[i].sge == NULL)
            goto nomem;
        q->sq[i].buf = q->sq[i].small;
        q->sq[i].cap = SLOT_SMALL;
    }
    q->sq_mask = n - 1;
    if (q->srq == NULL &&
        fab_rq_init(&q->rq, c->max_recv_wr, c->max_recv_sge) < 0)
        goto nomem;
    pthread_mutex_init(&q->post_lock, NULL);
    q->attr.qp_state = IBV_QPS_RESET;
    q->attr.cap = *c;
    q->attr.path_mtu = PORT_MTU;
    q->attr.port_num = 1;
    LOCK();
    if (qp_index_take(q) < 0) {
        UNLOCK();
        pyrdma_fail(st, ENOMEM, "ibv_create_qp", "too many QPs");
        goto fail;
    }
    UNLOCK();
    *out = q;
    *qpn = q->qpn;
    return 0;
nomem:
    pyrdma_fail(st, ENOMEM, "calloc", "");
fail:
    if (q->sq)
        for (i = 0; i <= q->sq_mask || (q->sq_mask == 0 && i < n); i++) {
            if (i >= n)
                break;
            free(q->sq[i].sge);
        }
    free(q->sq);
    fab_rq_free(&q->rq);
    free(q);
    return -1;
}

/* The IBA modify_qp table: required and optional attributes. */
#define M(x) PYRDMA_QP_##x
/* From SQD (the IBA's table, as the kernel has it): back to RTS with
   what RTS -> RTS may change, or to SQD again changing what a drained
   send queue allows (no new address: the QP keeps its peer). */
static int
sqd_table(int ud, int rc, int next, int *opt)
{
    if (next == IBV_QPS_RTS) {
        *opt = M(CUR_STATE) | (ud ? M(QKEY) : M(ACCESS_FLAGS) |
                               M(ALT_PATH) | M(PATH_MIG_STATE) |
                               (rc ? M(MIN_RNR_TIMER) : 0));
        return 1;
    }
    if (next != IBV_QPS_SQD)
        return 0;
    *opt = M(PKEY_INDEX) | (ud ? M(QKEY) : M(ACCESS_FLAGS) |
                            (rc ? M(MIN_RNR_TIMER) | M(TIMEOUT) |
                             M(RETRY_CNT) | M(RNR_RETRY) |
                             M(MAX_QP_RD_ATOMIC) | M(MAX_DEST_RD_ATOMIC)
                             : 0));
    return 1;
}

static int
qp_table(int type, int cur, int next, int *req, int *opt)
{
    int ud = type == IBV_QPT_UD, rc = type == IBV_QPT_RC;
    *req = *opt = 0;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return 1;
    switch (cur) {
    case IBV_QPS_RESET:
        if (next != IBV_QPS_INIT)
            return 0;
        *req = M(PKEY_INDEX) | M(PORT) | (ud ? M(QKEY) : M(ACCESS_FLAGS));
        return 1;
    case IBV_QPS_INIT:
        if (next == IBV_QPS_INIT) {
            *opt = M(PKEY_INDEX) | M(PORT) | (ud ? M(QKEY) : M(ACCESS_FLAGS));
            return 1;
        }
        if (next != IBV_QPS_RTR)
            return 0;
        if (!ud)
            *req = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
                   (rc ? M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER) : 0);
        *opt = M(PKEY_INDEX) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH));
        return 1;
    case IBV_QPS_RTR:
        if (next != IBV_QPS_RTS)
            return 0;
        *req = M(SQ_PSN) | (rc ? M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) |
                                 M(MAX_QP_RD_ATOMIC) : 0);
        *opt = M(CUR_STATE) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH) |
                               M(PATH_MIG_STATE) |
                               (rc ? M(MIN_RNR_TIMER) : 0));
        return 1;
    case IBV_QPS_RTS:
        if (next == IBV_QPS_SQD) {
            *opt = M(EN_SQD_ASYNC_NOTIFY);
            return 1;
        }
        /* fall through */
    case IBV_QPS_SQE:
        if (next != IBV_QPS_RTS)
            return 0;
        *opt = M(CUR_STATE) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH) |
                               M(PATH_MIG_STATE) |
                               (rc ? M(MIN_RNR_TIMER) : 0));
        return 1;
    case IBV_QPS_SQD:
        return sqd_table(ud, rc, next, opt);
    case IBV_QPS_ERR:
        return 0;
    default:
        return 0;
    }
}

/* Forget everything in flight (RESET).  N.lock held. */
static void
qp_reset(struct uqp *q)
{
    q->sq_head = q->sq_tail;
    fab_sqd_forget(q);              /* WRs posted in SQD */
    /* its completions leave the CQs (not an SRQ's receives: their WRs
       are gone from the SRQ) */
    fab_cq_clean(q->scq, q->qpn, q->srq != NULL);
    if (q->rcq != q->scq)
        fab_cq_clean(q->rcq, q->qpn, q->srq != NULL);
    q->err_pending = 0;
    q->epoch++;
    q->rx_seen = q->alt = 0;
    q->naked = 0;
    q->dead_valid = 0;
    q->rq.head = q->rq.tail;
    fab_inmsg_list_free(q->inq);
    fab_inmsg_list_free(q->ooo);
    q->inq = q->inq_tail = q->ooo = NULL;
    q->peer = NULL;
    memset(&q->attr, 0, sizeof(q->attr));
    q->attr.cap = q->cap;
    q->attr.path_mtu = PORT_MTU;
    q->attr.port_num = 1;
}

/* The transition cur -> next with the attributes of mask: one the QP
   state table allows, with its required attributes and no others.
   0 or -1 with *st set. */
static int
check_transition(const struct uqp *q, const struct pyrdma_qp_attr *a,
                 int mask, int cur, int next, struct pyrdma_status *st)
{
    int req, opt;
    if ((mask & M(CUR_STATE)) && a->cur_qp_state != cur)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "cur_qp_state %d but "
                           "the QP is in state %d", a->cur_qp_state, cur);
    if (!qp_table(q->type, cur, next, &req, &opt))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "illegal transition "
                           "%d -> %d", cur, next);
    opt |= M(STATE) | M(CUR_STATE);
    if ((mask & req) != req)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "transition %d -> %d "
                           "needs attribute mask 0x%x (missing 0x%x)", cur,
                           next, req, req & ~mask);
    if (mask & ~(req | opt))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "attribute mask 0x%x "
                           "not allowed in transition %d -> %d",
                           mask & ~(req | opt), cur, next);
    return 0;
}

/* The values of the attributes of mask: within the fabric's port and
   the ranges of the IBA.  0 or -1 with *st set. */
static int
check_attr_values(const struct pyrdma_qp_attr *a, int mask,
                  struct pyrdma_status *st)
{
    if ((mask & M(PORT)) && a->port_num != 1)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "port_num %u",
                           a->port_num);
    if ((mask & M(PKEY_INDEX)) && a->pkey_index != 0)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "pkey_index %u",
                           a->pkey_index);
    if ((mask & M(PATH_MTU)) && (a->path_mtu < IBV_MTU_256 ||
                                 a->path_mtu > PORT_MTU))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "path_mtu %d",
                           a->path_mtu);
    if (((mask & M(TIMEOUT)) && a->timeout > 31) ||
        ((mask & M(RETRY_CNT)) && a->retry_cnt > 7) ||
        ((mask & M(RNR_RETRY)) && a->rnr_retry > 7) ||
        ((mask & M(MIN_RNR_TIMER)) && a->min_rnr_timer > 31) ||
        ((mask & M(MAX_QP_RD_ATOMIC)) && a->max_rd_atomic > MAX_RD_ATOM) ||
        ((mask & M(MAX_DEST_RD_ATOMIC)) &&
         a->max_dest_rd_atomic > MAX_RD_ATOM) ||
        ((mask & M(DEST_QPN)) && a->dest_qp_num > 0xFFFFFF))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "attribute out of "
                           "range");
    /* (IBV_ACCESS_ON_DEMAND means nothing for a QP; a NIC with ODP
       takes it, and rdma-core's ODP tests pass the MR's flags) */
    if ((mask & M(ACCESS_FLAGS)) &&
        (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE |
                                          IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_ATOMIC |
                                          IBV_ACCESS_MW_BIND |
                                          IBV_ACCESS_ON_DEMAND)))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "qp_access_flags "
                           "0x%x", a->qp_access_flags);
    return 0;
}

/* Store the (checked) attributes of mask in q (N.lock held); peer: the
   address vector's, resolved. */
static void
apply_attrs(struct uqp *q, const struct pyrdma_qp_attr *a, int mask,
            struct peer *peer)
{
    if (mask & M(EN_SQD_ASYNC_NOTIFY))
        q->attr.en_sqd_async_notify = a->en_sqd_async_notify != 0;
    if (mask & M(ACCESS_FLAGS))
        q->attr.qp_access_flags = a->qp_access_flags;
    if (mask & M(PKEY_INDEX))
        q->attr.pkey_index = a->pkey_index;
    if (mask & M(PORT))
        q->attr.port_num = a->port_num;
    if (mask & M(QKEY))
        q->attr.qkey = a->qkey;
    if (mask & M(AV)) {
        q->attr.ah_attr = a->ah_attr;
        q->peer = peer;
    }
    if (mask & M(PATH_MTU))
        q->attr.path_mtu = a->path_mtu;
    if (mask & M(TIMEOUT))
        q->attr.timeout = a->timeout;
    if (mask & M(RETRY_CNT))
        q->attr.retry_cnt = a->retry_cnt;
    if (mask & M(RNR_RETRY))
        q->attr.rnr_retry = a->rnr_retry;
    if (mask & M(RQ_PSN)) {
        q->attr.rq_psn = a->rq_psn & 0xFFFFFF;
        q->expect_psn = q->attr.rq_psn;
    }
    if (mask & M(MAX_QP_RD_ATOMIC))
        q->attr.max_rd_atomic = a->max_rd_atomic;
    if (mask & M(MIN_RNR_TIMER))
        q->attr.min_rnr_timer = a->min_rnr_timer;
    if (mask & M(SQ_PSN)) {
        q->attr.sq_psn = a->sq_psn & 0xFFFFFF;
        q->next_psn = q->attr.sq_psn;
    }
    if (mask & M(MAX_DEST_RD_ATOMIC))
        q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & M(DEST_QPN))
        q->attr.dest_qp_num = a->dest_qp_num;
    if (mask & M(ALT_PATH)) {
        q->attr.alt_ah_attr = a->alt_ah_attr;
        q->attr.alt_pkey_index = a->alt_pkey_index;
        q->attr.alt_port_num = a->alt_port_num;
        q->attr.alt_timeout = a->alt_timeout;
    }
    if (mask & M(PATH_MIG_STATE))
        q->attr.path_mig_state = a->path_mig_state;
}

/* Move q to state next (N.lock held; the attributes stored): RESET
   forgets everything in flight, ERR flushes. */
static void
enter_state(struct uqp *q, int next)
{
    if (next == IBV_QPS_RESET)
        qp_reset(q);
    else if (next == IBV_QPS_ERR) {
        fab_qp_flush_to_err(q);
        fab_sq_advance(q);
    }
    else {
        int was = q->attr.qp_state;
        q->attr.qp_state = next;
        if (next == IBV_QPS_RTS)
            q->err_pending = 0;
        q->attr.sq_draining = next == IBV_QPS_SQD &&
                              (was != IBV_QPS_SQD || q->attr.sq_draining);
        if (next == IBV_QPS_SQD)
            fab_sq_drained(q);
    }
    fab_sh_qp_sync(q);
}

int
fab_modify_qp(void *vq, struct pyrdma_qp_attr *a, int mask,
              struct pyrdma_status *st)
{
    struct uqp *q = vq;
    int cur, next, held;
    struct peer *peer = NULL;
    const int known = M(STATE) | M(CUR_STATE) | M(EN_SQD_ASYNC_NOTIFY) |
                      M(ACCESS_FLAGS) | M(PKEY_INDEX) | M(PORT) | M(QKEY) |
                      M(AV) | M(PATH_MTU) | M(TIMEOUT) | M(RETRY_CNT) |
                      M(RNR_RETRY) | M(RQ_PSN) | M(MAX_QP_RD_ATOMIC) |
                      M(ALT_PATH) | M(MIN_RNR_TIMER) | M(SQ_PSN) |
                      M(MAX_DEST_RD_ATOMIC) | M(PATH_MIG_STATE) | M(CAP) |
                      M(DEST_QPN) | M(RATE_LIMIT);

    if (mask & ~known)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "unknown attribute "
                           "mask bits 0x%x", mask & ~known);
    LOCK();
    cur = q->attr.qp_state;
    UNLOCK();
    next = (mask & M(STATE)) ? a->qp_state : cur;
    if (check_transition(q, a, mask, cur, next, st) < 0 ||
        check_attr_values(a, mask, st) < 0)
        return -1;
    if ((mask & M(AV)) &&
        fab_ah_resolve(&a->ah_attr, &peer, st, "ibv_modify_qp") < 0)
        return -1;
    LOCK();
    if (q->attr.qp_state != cur) {
        UNLOCK();
        return pyrdma_fail(st, EAGAIN, "ibv_modify_qp", "the QP changed "
                           "state meanwhile");
    }
    if (next != IBV_QPS_RESET)
        apply_attrs(q, a, mask, peer);
    enter_state(q, next);
    held = q->held != NULL && next == IBV_QPS_RTS;
    UNLOCK();
    if (held) {                 /* SQD -> RTS: the WRs posted in SQD go */
        struct pyrdma_send_wr *bad;
        fab_post_send(q, NULL, &bad);
    }
    return 0;
}
#undef M

int
fab_query_qp(void *vq, struct pyrdma_qp_attr *a, int mask,
             struct pyrdma_status *st)
{
    struct uqp *q = vq;
    (void)mask;
    (void)st;
    LOCK();
    *a = q->attr;
    a->cur_qp_state = q->attr.qp_state;
    a->cap = q->cap;
    UNLOCK();
    return 0;
}

int
fab_destroy_qp(void *vq, struct pyrdma_status *st)
{
    struct uqp *q = vq;
    struct obox *o;
    uint32_t i;
    int busy = 0;
    pthread_mutex_lock(&q->post_lock);
    LOCK();
    if ((busy = fab_mcast_qp_attached(q)) != 0) {
        UNLOCK();
        pthread_mutex_unlock(&q->post_lock);
        return pyrdma_fail(st, EBUSY, "ibv_destroy_qp", "the QP is attached "
                           "to %d multicast group(s): detach it first", busy);
    }
    q->destroyed = 1;
    fab_sqd_forget(q);
    fab_sh_qp_sync(q);              /* no new one-sided op can start */
    N.qps[q->qpn & (MAX_QP - 1)] = NULL;
    N.qp_live--;
    fab_mw_unbind_qp(q);            /* its type 2 windows */
    fab_inmsg_list_free(q->inq);
    fab_inmsg_list_free(q->ooo);
    q->inq = q->inq_tail = q->ooo = NULL;
    fab_dack_queue(q, 0);           /* no reply will carry it: send it now */
    fab_dack_unlist(q);
    for (o = N.ob_head; o; o = o->next)
        if (o->qp == q)
            o->qp = NULL;
    for (i = 0; i <= q->sq_mask; i++) {
        q->sq[i].qp = NULL;
        if (q->sq[i].inflight)
            busy = 1;
    }
    if (busy) {
        /* UCP still reads some slot buffers: keep them until exit */
        struct grave *g = malloc(sizeof(*g));
        if (g != NULL) {
            g->sq = q->sq;
            g->next = N.graves;
            N.graves = g;
        }
        q->sq = NULL;
    }
    UNLOCK();
    if (N.sh != NULL)           /* wait for those inside one */
        fab_sh_quiesce(&N.sh->qp[q->qpn & (MAX_QP - 1)].inflight);
    pthread_mutex_unlock(&q->post_lock);
    pthread_mutex_destroy(&q->post_lock);
    /* its ACKs (deferred ones too) go out before the process may end */
    fab_drain_out();
    if (q->sq != NULL) {
        for (i = 0; i <= q->sq_mask; i++) {
            if (q->sq[i].buf != q->sq[i].small)
                free(q->sq[i].buf);
            free(q->sq[i].sge);
        }
        free(q->sq);
    }
    fab_rq_free(&q->rq);
    free(q);
    return 0;
}
