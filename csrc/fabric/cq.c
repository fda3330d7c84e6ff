/* cq.c - completion queues and completion channels: create, resize,
   destroy, arm (req_notify_cq), poll_cq (which also drives progress when
   the CQ is empty), the channel's events, and a full CQ's effect on its
   QPs. */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* a completion's side effects: the channel's event, a full CQ         */

void
fab_cc_push(struct ucc *cc, struct ucq *cq)
{
    uint64_t one = 1;
    if (cc->tail - cc->head == cc->cap) {
        uint32_t ncap = cc->cap ? cc->cap * 2 : 16, i, n = cc->tail - cc->head;
        void **q = malloc(sizeof(*q) * ncap);
        struct ucq **qc = malloc(sizeof(*qc) * ncap);
        if (q == NULL || qc == NULL) {
            free(q);
            free(qc);
            return;
        }
        for (i = 0; i < n; i++) {
            q[i] = cc->q[(cc->head + i) % cc->cap];
            qc[i] = cc->qcq[(cc->head + i) % cc->cap];
        }
        free(cc->q);
        free(cc->qcq);
        cc->q = q;
        cc->qcq = qc;
        cc->head = 0;
        cc->tail = n;
        cc->cap = ncap;
    }
    cc->q[cc->tail % cc->cap] = cq->cq_context;
    cc->qcq[cc->tail % cc->cap] = cq;
    cc->tail++;
    if (write(cc->fd, &one, sizeof(one)) < 0) {
        /* cannot overflow in practice */
    }
}

/* A full CQ lost a completion of q: q goes to ERR with
   IBV_EVENT_QP_FATAL, as a NIC's QP does (its outstanding WRs flush; the
   caller, or the next ACK, completes them).  N.lock held. */
void
fab_qp_cq_lost(struct uqp *q)
{
    if (q == NULL || q->attr.qp_state == IBV_QPS_ERR)
        return;
    fab_qp_flush_to_err(q);
    fab_ctx_event(q->pd->ctx, IBV_EVENT_QP_FATAL, PYRDMA_EV_QP, q->qp_context);
}

/* Append a completion; raise the CQ's event if it is armed for it. */
void
fab_cq_push(struct ucq *cq, const struct pyrdma_wc *wc, int solicited)
{
    if (cq->tail - cq->head >= cq->cqe) {
        if (!cq->overrun) {
            cq->overrun = 1;
            fab_ctx_event(cq->ctx, IBV_EVENT_CQ_ERR, PYRDMA_EV_CQ,
                          cq->cq_context);
        }
        fab_qp_cq_lost(qp_lookup(wc->qp_num));
        return;
    }
    cq->ring[cq->tail & cq->mask] = *wc;
    __atomic_store_n(&cq->tail, cq->tail + 1, __ATOMIC_RELEASE);
    if (cq->armed && cq->cc != NULL &&
        (cq->armed == 1 || solicited || wc->status != IBV_WC_SUCCESS)) {
        cq->armed = 0;
        fab_cc_push(cq->cc, cq);
    }
}

/* ------------------------------------------------------------------ */
/* completion channels and CQs                                         */

int
fab_create_comp_channel(void *vc, void **out, int *fd,
                        struct pyrdma_status *st)
{
    struct ucc *cc = calloc(1, sizeof(*cc));
    (void)vc;
    if (cc == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    cc->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cc->fd < 0) {
        free(cc);
        return pyrdma_fail(st, errno, "eventfd", "");
    }
    *out = cc;
    *fd = cc->fd;
    return 0;
}

int
fab_destroy_comp_channel(void *vcc, struct pyrdma_status *st)
{
    struct ucc *cc = vcc;
    (void)st;
    close(cc->fd);
    free(cc->q);
    free(cc->qcq);
    free(cc);
    return 0;
}

int
fab_get_cq_event(void *vcc, void **cq_context, struct pyrdma_status *st)
{
    struct ucc *cc = vcc;
    uint64_t v;
    (void)st;
    LOCK();
    if (cc->head == cc->tail) {
        UNLOCK();
        return 0;
    }
    *cq_context = cc->q[cc->head % cc->cap];
    cc->head++;
    if (cc->head == cc->tail && read(cc->fd, &v, sizeof(v)) < 0) {
        /* already drained */
    }
    UNLOCK();
    return 1;
}

void
fab_ack_cq_events(void *cq, unsigned int n)
{
    (void)cq;
    (void)n;
}

int
fab_create_cq(void *vc, int cqe, void *cq_context, void *vcc, int vector,
              void **out, int *actual, struct pyrdma_status *st)
{
    struct ucq *cq;
    uint32_t n;
    (void)vector;
    if (cqe < 1 || cqe > MAX_CQE)
        return pyrdma_fail(st, EINVAL, "ibv_create_cq", "cqe %d not in "
                           "1..%d", cqe, MAX_CQE);
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    n = pow2((uint32_t)cqe + 1);
    cq->ring = calloc(n, sizeof(*cq->ring));
    if (cq->ring == NULL) {
        free(cq);
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    }
    cq->ctx = vc;
    cq->cc = vcc;
    cq->cq_context = cq_context;
    cq->mask = n - 1;
    cq->cqe = (uint32_t)cqe;
    *out = cq;
    *actual = cqe;
    return 0;
}

int
fab_destroy_cq(void *vcq, struct pyrdma_status *st)
{
    struct ucq *cq = vcq;
    (void)st;
    LOCK();
    if (cq->cc != NULL) {
        /* forget its unread events */
        struct ucc *cc = cq->cc;
        uint32_t i, k = cc->head;
        for (i = cc->head; i != cc->tail; i++)
            if (cc->qcq[i % cc->cap] != cq) {
                cc->q[k % cc->cap] = cc->q[i % cc->cap];
                cc->qcq[k % cc->cap] = cc->qcq[i % cc->cap];
                k++;
            }
        cc->tail = k;
        if (cc->head == cc->tail) {
            uint64_t v;
            if (read(cc->fd, &v, sizeof(v)) < 0) {
                /* nothing pending */
            }
        }
    }
    UNLOCK();
    free(cq->ring);
    free(cq);
    return 0;
}

int
fab_resize_cq(void *vcq, int cqe, int *actual, struct pyrdma_status *st)
{
    struct ucq *cq = vcq;
    struct pyrdma_wc *ring;
    uint32_t n, i, used;
    if (cqe < 1 || cqe > MAX_CQE)
        return pyrdma_fail(st, EINVAL, "ibv_resize_cq", "cqe %d", cqe);
    n = pow2((uint32_t)cqe + 1);
    ring = calloc(n, sizeof(*ring));
    if (ring == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    LOCK();
    used = cq->tail - cq->head;
    if (used > (uint32_t)cqe) {
        UNLOCK();
        free(ring);
        return pyrdma_fail(st, EINVAL, "ibv_resize_cq", "%u completions "
                           "are queued", used);
    }
    for (i = 0; i < used; i++)
        ring[i] = cq->ring[(cq->head + i) & cq->mask];
    free(cq->ring);
    cq->ring = ring;
    cq->mask = n - 1;
    cq->head = 0;
    cq->tail = used;
    cq->cqe = (uint32_t)cqe;
    UNLOCK();
    *actual = cqe;
    return 0;
}

int
fab_req_notify_cq(void *vcq, int solicited_only)
{
    struct ucq *cq = vcq;
    LOCK();
    cq->armed = solicited_only ? 2 : 1;
    UNLOCK();
    return 0;
}

static int
cq_take(struct ucq *cq, int n, struct pyrdma_wc *wc)
{
    int got = 0;
    LOCK();
    while (got < n && cq->head != cq->tail) {
        wc[got++] = cq->ring[cq->head & cq->mask];
        cq->head++;
    }
    UNLOCK();
    return got;
}

static __thread unsigned empty_polls __attribute__((tls_model("initial-exec")));   /* consecutive empty poll_cq */

int
fab_poll_cq(void *vcq, int n, struct pyrdma_wc *wc)
{
    struct ucq *cq = vcq;
    int got;
    if (n <= 0)
        return 0;
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) != cq->head)
        return cq_take(cq, n, wc);
    /* empty: make progress here (no thread hop), then look again */
    __atomic_store_n(&N.app_polls,
                     __atomic_load_n(&N.app_polls, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
    fab_in_app_poll = 1;
    /* UCP every time too: while the application polls, its poll_cq is
       the only progress UCP gets (the progress thread stands back) */
    if (N.nrx)
        fab_rings_poll();
    U.worker_progress(N.w);
    if (N.nrx && __atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head)
        fab_rings_poll();           /* what landed during UCP's turn */
    fab_in_app_poll = 0;
    /* Responses queued by callbacks (ours or the progress thread's) go out
       now: the progress thread is standing back while we poll.  When
       there are completions to return, an ACK may stay for the reply the
       application is likely to post next (see fab_in_app_poll). */
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head)
        fab_drain(1);
    else
        fab_drain(0);
    /* The progress thread sleeps while the application polls: the
       messages this poll consumed did not wake it.  Wake it once, so it
       stands back and keeps draining what the application leaves queued
       (deferred ACKs: at most ~1 ms late, not a whole sleep). */
    if (__atomic_load_n(&N.pt_asleep, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&N.pt_asleep, 0, __ATOMIC_RELAXED))
        wake_progress();
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head) {
        /* Busy polling on an oversubscribed machine: the peer we wait
           for may need this very CPU.  After a run of empty polls, give
           it up once (costs nothing when no one else is runnable). */
        if (++empty_polls >= 64) {
            empty_polls = 0;
            sched_yield();
        }
        return 0;
    }
    empty_polls = 0;
    got = cq_take(cq, n, wc);
    return got;
}
