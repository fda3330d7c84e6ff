/* cq.c - completion queues and completion channels: create, resize,
   destroy, arm (req_notify_cq), poll_cq (which also drives progress when
   the CQ is empty), the channel's events, and a full CQ's effect on its
   QPs. */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* the consumers' lock of a CQ                                         */

/* A short spin lock: held only to copy out a few entries (or by
   resize_cq); a waiter gives up its CPU, the holder may need it. */
static void
take_lock(struct ucq *cq)
{
    while (__atomic_exchange_n(&cq->take, 1, __ATOMIC_ACQUIRE) != 0)
        while (__atomic_load_n(&cq->take, __ATOMIC_RELAXED) != 0)
            sched_yield();
}

static void
take_unlock(struct ucq *cq)
{
    __atomic_store_n(&cq->take, 0, __ATOMIC_RELEASE);
}

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
    if (cq->tail - __atomic_load_n(&cq->head, __ATOMIC_ACQUIRE) >= cq->cqe) {
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
    if (cqe < 1 || cqe > MAX_CQE)
        return pyrdma_fail(st, EINVAL, "ibv_create_cq", "cqe %d not in "
                           "1..%d", cqe, MAX_CQE);
    if (vector < 0 || vector >= NUM_COMP_VECTORS)
        return pyrdma_fail(st, EINVAL, "ibv_create_cq", "comp_vector %d: "
                           "the fabric device has %d", vector,
                           NUM_COMP_VECTORS);
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
    LOCK();                     /* no producer */
    take_lock(cq);              /* no consumer */
    used = cq->tail - cq->head;
    if (used > (uint32_t)cqe) {
        take_unlock(cq);
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
    take_unlock(cq);
    UNLOCK();
    *actual = cqe;
    return 0;
}

/* Take the completions of QP qpn out of cq, keeping the others in
   order (a QP's move to RESET, as mlx4 and mlx5 purge its CQ entries:
   the flushes of its last life are not seen in the next); with
   sends_only, its receive completions stay (an SRQ's: their WRs are gone
   from the SRQ).  N.lock held (no producer). */
void
fab_cq_clean(struct ucq *cq, uint32_t qpn, int sends_only)
{
    uint32_t from, to;
    if (cq == NULL)
        return;
    take_lock(cq);              /* no consumer */
    for (from = to = cq->head; from != cq->tail; from++) {
        struct pyrdma_wc *w = &cq->ring[from & cq->mask];
        if (w->qp_num == qpn &&
            !(sends_only && (w->opcode & IBV_WC_RECV)))
            continue;
        if (from != to)
            cq->ring[to & cq->mask] = *w;
        to++;
    }
    __atomic_store_n(&cq->tail, to, __ATOMIC_RELEASE);
    take_unlock(cq);
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

/* Up to n entries of cq into wc; return how many.  Consumers serialize
   on cq->take only: the producer (fab_cq_push, under N.lock) writes an
   entry, then publishes tail; a consumer reads entries below the tail it
   loaded, then publishes head, which frees them for the producer. */
static int
cq_take(struct ucq *cq, int n, struct pyrdma_wc *wc)
{
    uint32_t head, tail;
    int got = 0;
    take_lock(cq);
    head = cq->head;
    tail = __atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE);
    while (got < n && head != tail)
        wc[got++] = cq->ring[head++ & cq->mask];
    __atomic_store_n(&cq->head, head, __ATOMIC_RELEASE);
    take_unlock(cq);
    return got;
}

/* Does cq hold a completion? */
static inline int
cq_ready(struct ucq *cq)
{
    return __atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) !=
           __atomic_load_n(&cq->head, __ATOMIC_RELAXED);
}

/* UCP's turn in an empty poll_cq.  Same-host requests come through the
   request rings, which poll_cq looks at first and which cost a few loads
   when empty; UCP's progress costs ~270 instructions (its worker mutex
   and every transport's queue) and, while the rings carry the traffic,
   finds nothing.  So poll_cq skips it (at most UCP_SKIP polls running,
   then it progresses UCP anyway) when the rings have just given this CQ
   a completion (the application returns with it now), or when UCP found
   nothing the last UCP_IDLE times and this node receives through rings.
   Whatever UCP carries then waits at most UCP_SKIP polls longer; a UCP
   call that finds something ends the idle run. */
#define UCP_SKIP 4
#define UCP_IDLE 64

/* per polling thread */
static __thread unsigned empty_polls __attribute__((tls_model("initial-exec")));   /* consecutive empty poll_cq */
static __thread unsigned ucp_idle __attribute__((tls_model("initial-exec")));      /* UCP progress calls in a row
                                                   that found nothing (up
                                                   to UCP_IDLE) */
static __thread unsigned ucp_skips __attribute__((tls_model("initial-exec")));     /* polls since UCP's last turn */
static __thread uint32_t poll_cpu __attribute__((tls_model("initial-exec")));      /* 1 + the CPU it last polled
                                                   on, 0: not yet */

/* Empty polls in a row before poll_cq yields the CPU: YIELD_NEAR when a
   node writing into this node's rings last polled on this very CPU (it
   cannot run, and so answer, while we spin: two processes in a ping-pong
   on one CPU, a third process busy on the other), else YIELD_FAR. */
#define YIELD_NEAR 4
#define YIELD_FAR 64

int
fab_poll_cq(void *vcq, int n, struct pyrdma_wc *wc)
{
    struct ucq *cq = vcq;
    int got;
    if (n <= 0)
        return 0;
    if (cq_ready(cq))
        return cq_take(cq, n, wc);
    /* empty: make progress here (no thread hop), then look again */
    __atomic_store_n(&N.app_polls,
                     __atomic_load_n(&N.app_polls, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
    fab_in_app_poll = 1;
    if (N.nrx)
        fab_rings_poll();
    /* UCP too (while the application polls, its poll_cq is the only
       progress UCP gets: the progress thread stands back), unless the
       rings serve (see UCP_SKIP) */
    if (ucp_skips < UCP_SKIP &&
        (cq_ready(cq) || (N.nrx && ucp_idle >= UCP_IDLE)))
        ucp_skips++;
    else {
        ucp_skips = 0;
        if (U.worker_progress(N.w) != 0)
            ucp_idle = 0;
        else if (ucp_idle < UCP_IDLE)
            ucp_idle++;
        if (N.nrx && !cq_ready(cq))
            fab_rings_poll();       /* what landed during UCP's turn */
    }
    fab_in_app_poll = 0;
    /* Responses queued by callbacks (ours or the progress thread's) go out
       now: the progress thread is standing back while we poll.  When
       there are completions to return, an ACK may stay for the reply the
       application is likely to post next (see fab_in_app_poll). */
    if (!cq_ready(cq))
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
    if (!cq_ready(cq)) {
        /* Busy polling on an oversubscribed machine: the peer we wait
           for may need this very CPU.  After a run of empty polls, give
           it up once (costs a system call when no one else is runnable);
           soon when a ring's writer polls on this CPU (YIELD_NEAR).  Our
           own CPU is told to our rings' receivers once we wait too. */
        if (++empty_polls >= YIELD_NEAR) {
            uint32_t cpu1 = (uint32_t)(sched_getcpu() + 1);
            if (cpu1 != poll_cpu) {
                poll_cpu = cpu1;
                fab_rings_cpu(cpu1);
            }
            if (empty_polls >= YIELD_FAR ||
                (cpu1 != 0 && N.nrx && fab_rings_near(cpu1))) {
                empty_polls = 0;
                sched_yield();
            }
        }
        return 0;
    }
    empty_polls = 0;
    got = cq_take(cq, n, wc);
    return got;
}
