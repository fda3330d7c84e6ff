/* cm_msg.c - the connection manager's messages (REQ, REP, RTU, REJ,
   DREQ, DREP, SIDR_REQ, SIDR_REP: struct cm_msg behind a struct wire of
   kind AM_CTL_CM) and its thread, which handles what comes in, sends what
   goes out, watches the peers of IDs that wait for one, and gives
   TIMEWAIT_EXIT.  See cm.h. */
#include "cm.h"

#define CM_LOCK() pthread_mutex_lock(&cm_lock)
#define CM_UNLOCK() pthread_mutex_unlock(&cm_lock)

#define CM_INBOX_MAX 4096       /* messages waiting for the thread */
#define LIVE_EVERY_NS 100000000ull /* peers of waiting IDs are checked */
#define IB_SIDR_UNSUPPORTED 1
#define IB_SIDR_REJECT 2

/* A message in. */
struct cmin {
    struct cmin *next;
    uint64_t guid;          /* from this node (authenticated) */
    uint16_t lid;
    int op;
    struct cm_msg m;
};

static struct cmin *in_head, *in_tail;
static int in_count;
static struct cmout *out_head, *out_tail;
static pthread_cond_t cm_cv = PTHREAD_COND_INITIALIZER;
static int thr_up;
static pid_t thr_pid;
static int sending;             /* the thread is inside tx() */

/* A node we have no peer of yet: its endpoint is opened and HELLO said
   (up to seconds when it does not answer) by a thread of its own, so
   that the CM thread goes on with the other IDs; the messages to it
   wait here meanwhile, in order. */
struct opening {
    struct opening *next;
    uint64_t guid;
    struct cmout *head, *tail;
};
static struct opening *openings;

void
cm_wake(void)
{
    pthread_cond_signal(&cm_cv);
}

/* ------------------------------------------------------------------ */
/* in: the node's active-message callback                              */

static int
pdata_max(int op)
{
    switch (op) {
    case CM_REQ: return FAB_CM_REQ_PDATA;
    case CM_REP: return FAB_CM_REP_PDATA;
    case CM_REJ: return FAB_CM_REJ_PDATA;
    case CM_SIDR_REQ: return FAB_CM_SIDR_REQ_PDATA;
    case CM_SIDR_REP: return FAB_CM_SIDR_REP_PDATA;
    default: return 0;
    }
}

/* Is m (op) well formed? */
static int
msg_ok(int op, const struct cm_msg *m)
{
    int req = op == CM_REQ || op == CM_SIDR_REQ;
    if (op < CM_REQ || op > CM_MSG_LAST || m->version != CM_VERSION ||
        m->local_id == 0 || (!req && m->remote_id == 0) ||
        m->qpn > 0xFFFFFF || m->psn > 0xFFFFFF ||
        m->pdata_len > pdata_max(op) || m->retry > 7 || m->rnr_retry > 7)
        return 0;
    if (req && m->ps != FAB_CM_PS_TCP && m->ps != FAB_CM_PS_UDP &&
        m->ps != FAB_CM_PS_IB && m->ps != FAB_CM_PS_IPOIB)
        return 0;
    if (op == CM_REQ && cm_qp_type(m->ps) != IBV_QPT_RC)
        return 0;
    return op != CM_SIDR_REQ || cm_qp_type(m->ps) == IBV_QPT_UD;
}

/* A CM message (h, then length bytes at data) from the node's callback:
   checked, authenticated (it counts only under its sender's session),
   queued for the CM thread. */
void
fab_cm_rx(const struct wire *h, const void *data, size_t length)
{
    struct cmin *in;
    int ok;

    if (length != sizeof(struct cm_msg) || data == NULL ||
        !msg_ok(h->op, (const struct cm_msg *)data)) {
        fab_rx_bad();
        return;
    }
    LOCK();
    ok = fab_auth_ok(h->src_guid, h->sid);
    UNLOCK();
    if (!ok || (in = malloc(sizeof(*in))) == NULL) {
        fab_rx_denied();
        return;
    }
    in->next = NULL;
    in->guid = h->src_guid;
    in->lid = h->src_lid;
    in->op = h->op;
    memcpy(&in->m, data, sizeof(in->m));
    CM_LOCK();
    if (in_count >= CM_INBOX_MAX) {
        CM_UNLOCK();
        free(in);
        fab_rx_denied();
        return;
    }
    if (in_tail != NULL)
        in_tail->next = in;
    else
        in_head = in;
    in_tail = in;
    in_count++;
    cm_wake();
    CM_UNLOCK();
}

/* ------------------------------------------------------------------ */
/* out                                                                 */

struct cmout *
cm_out_new(uint64_t guid, int op)
{
    struct cmout *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->guid = guid;
    o->op = op;
    o->m.version = CM_VERSION;
    return o;
}

/* Queue o for the CM thread (cm_lock held). */
void
cm_out_post(struct cmout *o)
{
    if (out_tail != NULL)
        out_tail->next = o;
    else
        out_head = o;
    out_tail = o;
    cm_wake();
}

/* Send o for id (its ids filled in; cm_lock held). */
void
cm_send(struct fab_cm_id *id, int op, struct cmout *o)
{
    o->op = op;
    o->from = id->local_id;
    o->m.local_id = id->local_id;
    o->m.remote_id = id->remote_id;
    cm_out_post(o);
}

/* An answer to in without an ID (no listener, backlog full, a DREP). */
static void
reply(const struct cmin *in, int op, int reason)
{
    struct cmout *o = cm_out_new(in->guid, op);
    if (o == NULL)
        return;
    /* the ID it answers may be gone here: its id, or none (REQ) */
    o->m.local_id = in->m.remote_id != 0 ? in->m.remote_id : 0xFFFFFFFFu;
    o->m.remote_id = in->m.local_id;
    o->m.reason = (uint8_t)reason;
    cm_out_post(o);
}

struct cmtx {
    struct wire h;
    struct cm_msg m;
};

static void
tx_done(void *req, ucs_status_t status, void *user)
{
    (void)status;
    free(user);
    U.request_free(req);
}

/* Send o (no lock held): 0, or -1 if its node cannot be reached. */
static int
tx(const struct cmout *o)
{
    struct pyrdma_status st;
    struct peer *p;
    struct cmtx *x;
    ucp_request_param_t prm;
    ucs_status_ptr_t r;
    ucp_ep_h ep;
    int failed;

    if (fab_peer_of(o->guid, &p, &st) < 0 || (x = calloc(1, sizeof(*x))) ==
        NULL)
        return -1;
    LOCK();
    /* a node that did not answer our HELLO drops what we send it: the
       ID hears now (UNREACHABLE), as when the IB CM's retries run out */
    failed = p->failed || p->unanswered;
    ep = p->ep;
    x->h.sid = p->tx_sid;
    UNLOCK();
    if (failed) {
        free(x);
        return -1;
    }
    x->h.kind = AM_CTL_CM;
    x->h.op = (uint8_t)o->op;
    x->h.src_guid = N.guid;
    x->h.src_lid = N.lid;
    x->m = o->m;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = tx_done;
    prm.user_data = x;
    r = U.am_send_nbx(ep, AM_REQ, &x->h, sizeof(x->h), &x->m, sizeof(x->m),
                      &prm);
    if (UCS_PTR_IS_PTR(r))
        return 0;
    free(x);
    return UCS_PTR_STATUS(r) == UCS_OK ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* handlers (cm_lock held)                                             */

/* The ID in which in is an answer: its peer's node and communication
   id match, and its state is one of the mask (1 << CS_*); or NULL. */
static struct fab_cm_id *
answer_of(const struct cmin *in, unsigned states)
{
    struct fab_cm_id *id = cm_id_find(in->m.remote_id);
    if (id == NULL || id->peer_guid != in->guid ||
        !(states & (1u << id->state)))
        return NULL;
    if (id->state != CS_REQ_SENT && id->remote_id != in->m.local_id)
        return NULL;
    return id;
}

static struct fab_cm_id *
listener_of(const struct cm_msg *m)
{
    struct fab_cm_id *id;
    for (id = cm_id_first(); id != NULL; id = cm_id_next(id))
        if (id->state == CS_LISTEN && id->ps == m->ps &&
            id->src.sin_port == m->dst_port &&
            (id->src.sin_addr.s_addr == 0 ||
             id->src.sin_addr.s_addr == m->dst_ip))
            return id;
    return NULL;
}

static void
on_req(const struct cmin *in)
{
    int ud = in->op == CM_SIDR_REQ;
    struct fab_cm_id *l = listener_of(&in->m), *id;
    struct cmev *e;

    if (l == NULL || l->pending >= l->backlog ||
        (id = cm_id_new(l->ch, l->context, l->ps)) == NULL) {
        reply(in, ud ? CM_SIDR_REP : CM_REJ,
              l == NULL ? (ud ? IB_SIDR_UNSUPPORTED
                              : FAB_CM_REJ_INVALID_SERVICE_ID)
                        : (ud ? IB_SIDR_REJECT
                              : FAB_CM_REJ_CONSUMER_DEFINED));
        return;
    }
    id->state = CS_REQ_RCVD;
    id->listener = l->local_id;
    id->peer_guid = in->guid;
    id->peer_lid = in->lid;
    id->remote_id = in->m.local_id;
    id->peer_qpn = in->m.qpn;
    id->peer_psn = in->m.psn;
    id->src.sin_addr.s_addr = in->m.dst_ip;
    id->src.sin_port = in->m.dst_port;
    id->dst.sin_addr.s_addr = in->m.src_ip;
    id->dst.sin_port = in->m.src_port;
    id->resp_res = in->m.init_depth;
    id->init_depth = in->m.resp_res;
    id->retry = in->m.retry;
    id->rnr_retry = in->m.rnr_retry;
    e = cm_event(id, FAB_CM_EVENT_CONNECT_REQUEST, 0);
    if (e != NULL) {
        e->ev.listen_id = l;
        cm_event_pdata(e, &in->m, ud ? FAB_CM_SIDR_REQ_PDATA
                                     : FAB_CM_REQ_PDATA);
        e->ev.responder_resources = in->m.init_depth;
        e->ev.initiator_depth = in->m.resp_res;
        e->ev.flow_control = in->m.flow_control;
        e->ev.retry_count = in->m.retry;
        e->ev.rnr_retry_count = in->m.rnr_retry;
        e->ev.srq = in->m.srq;
        e->ev.qp_num = in->m.qpn;
        l->pending++;
    }
    cm_event_post(e);
}

static void
on_rep(struct fab_cm_id *id, const struct cmin *in)
{
    struct cmev *e;
    id->remote_id = in->m.local_id;
    id->peer_qpn = in->m.qpn;
    id->peer_psn = in->m.psn;
    id->state = CS_REP_RCVD;
    e = cm_event(id, FAB_CM_EVENT_CONNECT_RESPONSE, 0);
    if (e != NULL) {
        cm_event_pdata(e, &in->m, FAB_CM_REP_PDATA);
        e->ev.responder_resources = in->m.init_depth;
        e->ev.initiator_depth = in->m.resp_res;
        e->ev.flow_control = in->m.flow_control;
        e->ev.rnr_retry_count = in->m.rnr_retry;
        e->ev.srq = in->m.srq;
        e->ev.qp_num = in->m.qpn;
    }
    cm_event_post(e);
}

static void
on_sidr_rep(struct fab_cm_id *id, const struct cmin *in)
{
    struct cmev *e;
    if (in->m.reason != 0) {
        id->state = CS_DONE;
        e = cm_event(id, FAB_CM_EVENT_UNREACHABLE, in->m.reason);
    }
    else {
        id->state = CS_ESTABLISHED;
        id->remote_id = in->m.local_id;
        id->peer_qpn = in->m.qpn;
        e = cm_event(id, FAB_CM_EVENT_ESTABLISHED, 0);
        if (e != NULL) {
            uint64_t be = htobe64(id->peer_guid);
            e->ev.qp_num = in->m.qpn;
            e->ev.qkey = in->m.qkey;
            e->ev.ah_attr.is_global = 1;
            e->ev.ah_attr.grh.dgid[0] = 0xfe;
            e->ev.ah_attr.grh.dgid[1] = 0x80;
            memcpy(e->ev.ah_attr.grh.dgid + 8, &be, 8);
            e->ev.ah_attr.grh.hop_limit = 1;
            e->ev.ah_attr.dlid = id->peer_lid;
            e->ev.ah_attr.port_num = 1;
        }
    }
    cm_event_pdata(e, &in->m, FAB_CM_SIDR_REP_PDATA);
    cm_event_post(e);
}

static void
disconnected(struct fab_cm_id *id, int status)
{
    id->state = CS_DISCONNECTED;
    cm_event_post(cm_event(id, FAB_CM_EVENT_DISCONNECTED, status));
    cm_timewait(id);
}

#define S(x) (1u << CS_##x)

static void
on_msg(const struct cmin *in)
{
    struct fab_cm_id *id;
    struct cmev *e;

    switch (in->op) {
    case CM_REQ:
    case CM_SIDR_REQ:
        on_req(in);
        return;
    case CM_REP:
        if ((id = answer_of(in, S(REQ_SENT))) != NULL &&
            id->qp_type == IBV_QPT_RC)
            on_rep(id, in);
        return;
    case CM_SIDR_REP:
        if ((id = answer_of(in, S(REQ_SENT))) != NULL &&
            id->qp_type == IBV_QPT_UD)
            on_sidr_rep(id, in);
        return;
    case CM_RTU:
        if ((id = answer_of(in, S(REP_SENT))) != NULL) {
            id->state = CS_ESTABLISHED;
            cm_event_post(cm_event(id, FAB_CM_EVENT_ESTABLISHED, 0));
        }
        return;
    case CM_REJ:
        if ((id = answer_of(in, S(REQ_SENT) | S(REP_SENT) | S(REQ_RCVD))) !=
            NULL && id->qp_type == IBV_QPT_RC) {
            id->state = CS_DONE;
            e = cm_event(id, FAB_CM_EVENT_REJECTED, in->m.reason);
            cm_event_pdata(e, &in->m, FAB_CM_REJ_PDATA);
            cm_event_post(e);
        }
        return;
    case CM_DREQ:
        reply(in, CM_DREP, 0);
        if ((id = answer_of(in, S(ESTABLISHED) | S(REP_SENT) | S(REP_RCVD) |
                                S(DREQ_SENT))) != NULL)
            disconnected(id, 0);
        return;
    case CM_DREP:
        if ((id = answer_of(in, S(DREQ_SENT))) != NULL)
            disconnected(id, 0);
        return;
    default:
        return;
    }
}

/* ------------------------------------------------------------------ */
/* timers and peers (cm_lock held)                                     */

static int
waits_on_peer(const struct fab_cm_id *id)
{
    if (id->peer_guid == 0 || id->qp_type == IBV_QPT_UD)
        return id->peer_guid != 0 && id->state == CS_REQ_SENT;
    return id->state == CS_REQ_SENT || id->state == CS_REP_SENT ||
           id->state == CS_REP_RCVD || id->state == CS_ESTABLISHED ||
           id->state == CS_DREQ_SENT;
}

/* Give due TIMEWAIT_EXITs; collect in g[0..*n) the nodes waited on. */
static void
scan_ids(uint64_t t, uint64_t *g, int *n, int max)
{
    struct fab_cm_id *id;
    int k;
    *n = 0;
    for (id = cm_id_first(); id != NULL; id = cm_id_next(id)) {
        if (id->timewait_at != 0 && id->timewait_at <= t) {
            id->timewait_at = 0;
            cm_event_post(cm_event(id, FAB_CM_EVENT_TIMEWAIT_EXIT, 0));
        }
        if (!waits_on_peer(id))
            continue;
        for (k = 0; k < *n && g[k] != id->peer_guid; k++)
            ;
        if (k == *n && *n < max)
            g[(*n)++] = id->peer_guid;
    }
}

/* Node guid is gone: every ID waiting on it hears. */
static void
node_gone(uint64_t guid)
{
    struct fab_cm_id *id;
    for (id = cm_id_first(); id != NULL; id = cm_id_next(id))
        if (id->peer_guid == guid && waits_on_peer(id))
            cm_peer_gone(id, -ETIMEDOUT);
}

/* One pass of the timers: TIMEWAIT_EXIT, and the peers' liveness (lock
   dropped while it looks). */
static void
timers(void)
{
    uint64_t g[64];
    int n, k, dead[64];

    scan_ids(now_ns(), g, &n, 64);
    if (n == 0)
        return;
    CM_UNLOCK();
    for (k = 0; k < n; k++)
        dead[k] = !fab_node_alive(g[k]);
    CM_LOCK();
    for (k = 0; k < n; k++)
        if (dead[k])
            node_gone(g[k]);
}

/* ------------------------------------------------------------------ */
/* the thread                                                          */

/* o could not be sent: its ID hears that the peer is gone (cm_lock
   held). */
static void
tx_failed(const struct cmout *o)
{
    struct fab_cm_id *id;
    if (o->from != 0 && (id = cm_id_find(o->from)) != NULL)
        cm_peer_gone(id, -ETIMEDOUT);
}

/* The thread of an opening: send its messages in order until none is
   left, then end it (cm_lock dropped while sending). */
static void *
open_main(void *arg)
{
    struct opening *op = arg, **pp;
    struct cmout *o;
    CM_LOCK();
    while ((o = op->head) != NULL) {
        int rc;
        op->head = o->next;
        if (op->head == NULL)
            op->tail = NULL;
        CM_UNLOCK();
        rc = tx(o);
        CM_LOCK();
        if (rc < 0)
            tx_failed(o);
        free(o);
    }
    for (pp = &openings; *pp != op; pp = &(*pp)->next)
        ;
    *pp = op->next;
    CM_UNLOCK();
    free(op);
    return NULL;
}

/* Queue o behind the opening of its node (started if there is none):
   1, or 0 if no thread could be started (the caller sends it). */
static int
to_opening(struct cmout *o)
{
    struct opening *op;
    pthread_attr_t a;
    pthread_t t;
    int rc;

    for (op = openings; op != NULL && op->guid != o->guid; op = op->next)
        ;
    if (op == NULL) {
        if ((op = calloc(1, sizeof(*op))) == NULL)
            return 0;
        op->guid = o->guid;
        op->head = op->tail = o;
        o->next = NULL;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &a, open_main, op);
        pthread_attr_destroy(&a);
        if (rc != 0) {
            free(op);
            return 0;
        }
        op->next = openings;
        openings = op;
        return 1;
    }
    o->next = NULL;
    if (op->tail != NULL)
        op->tail->next = o;
    else
        op->head = o;
    op->tail = o;
    return 1;
}

/* Is o's node being opened, or not known yet (cm_lock held; dropped
   while it looks)? */
static int
needs_opening(const struct cmout *o)
{
    struct opening *op;
    int known;
    for (op = openings; op != NULL; op = op->next)
        if (op->guid == o->guid)
            return 1;
    CM_UNLOCK();
    known = fab_peer_known(o->guid);
    CM_LOCK();
    return !known;
}

/* Send the queued messages (cm_lock held, dropped meanwhile); those to
   a node not known yet go to its opening. */
static void
send_all(void)
{
    struct cmout *o;
    while ((o = out_head) != NULL) {
        int rc;
        out_head = o->next;
        if (out_head == NULL)
            out_tail = NULL;
        sending = 1;
        if (needs_opening(o) && to_opening(o)) {
            sending = 0;
            continue;
        }
        CM_UNLOCK();
        rc = tx(o);
        CM_LOCK();
        sending = 0;
        if (rc < 0)
            tx_failed(o);
        free(o);
    }
}

static void *
cm_main(void *arg)
{
    uint64_t next_live = 0;
    (void)arg;
    CM_LOCK();
    for (;;) {
        struct cmin *in;
        uint64_t t;
        while ((in = in_head) != NULL) {
            in_head = in->next;
            if (in_head == NULL)
                in_tail = NULL;
            in_count--;
            on_msg(in);
            free(in);
        }
        send_all();
        t = now_ns();
        if (t >= next_live) {
            timers();
            next_live = t + LIVE_EVERY_NS;
        }
        if (in_head == NULL && out_head == NULL) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&cm_cv, &cm_lock, &ts);
        }
    }
    return NULL;
}

/* The process ends: its IDs tell their peers what the kernel would
   (REJ, DREQ), release their ports, and what is queued goes out
   (waiting at most 2 s). */
static void
cm_atexit(void)
{
    struct fab_cm_id *id;
    uint64_t end = now_ns() + 2000000000ull;

    if (!thr_up || thr_pid != getpid())
        return;
    CM_LOCK();
    for (id = cm_id_first(); id != NULL; id = cm_id_next(id)) {
        cm_tell_peer(id);
        id->state = CS_DONE;
        cm_unclaim(id);
    }
    while ((out_head != NULL || sending || openings != NULL) &&
           now_ns() < end) {
        CM_UNLOCK();
        usleep(1000);
        CM_LOCK();
    }
    CM_UNLOCK();
}

/* Start the CM thread (once per process); 0 or -1. */
int
cm_thread_start(struct pyrdma_status *st)
{
    pthread_t t;
    pthread_attr_t a;
    int rc = 0;

    CM_LOCK();
    if (!thr_up || thr_pid != getpid()) {
        openings = NULL;        /* a child: its parent's threads are not
                                   here (their memory is left) */
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &a, cm_main, NULL);
        pthread_attr_destroy(&a);
        if (rc == 0) {
            if (!thr_up)
                atexit(cm_atexit);
            thr_up = 1;
            thr_pid = getpid();
        }
    }
    CM_UNLOCK();
    if (rc != 0)
        return pyrdma_fail(st, rc, "pthread_create", "the CM's thread");
    return 0;
}
