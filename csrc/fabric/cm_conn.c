/* cm_conn.c - the connection manager's verbs on an ID: bind, resolve,
   listen, connect, accept, reject, establish, disconnect, and what a QP
   needs (init_qp_attr, query_route).  See cm.h. */
#include "cm.h"

#define EXPORT __attribute__((visibility("default")))
#define CM_LOCK() pthread_mutex_lock(&cm_lock)
#define CM_UNLOCK() pthread_mutex_unlock(&cm_lock)

#define IB_SIDR_UNSUPPORTED 1   /* SIDR_REP status: no such service */
#define IB_SIDR_REJECT 2        /* SIDR_REP status: rejected */

static const struct sockaddr_in *
inet_of(const struct sockaddr *sa, const char *func, struct pyrdma_status *st)
{
    if (sa == NULL) {
        pyrdma_fail(st, EINVAL, func, "no address");
        return NULL;
    }
    if (sa->sa_family != AF_INET) {
        pyrdma_fail(st, EAFNOSUPPORT, func, "address family %d: ucx0 "
                    "takes IPv4 addresses", sa->sa_family);
        return NULL;
    }
    return (const struct sockaddr_in *)(const void *)sa;
}

/* Private data of len bytes at pd for a message allowing max: 0, or -1
   with EINVAL (as the kernel's CM). */
static int
pdata_ok(const void *pd, int len, int max, const char *func,
         struct pyrdma_status *st)
{
    if (len > max)
        return pyrdma_fail(st, EINVAL, func, "%d bytes of private data: "
                           "at most %d fit", len, max);
    if (len > 0 && pd == NULL)
        return pyrdma_fail(st, EINVAL, func, "private_data is NULL");
    return 0;
}

static int
bad_state(const char *func, struct pyrdma_status *st)
{
    CM_UNLOCK();
    return pyrdma_fail(st, EINVAL, func, "the CM ID is not in a state "
                       "that allows it");
}

/* Bind id to sin (cm_lock held); 0 or -1. */
static int
bind_locked(struct fab_cm_id *id, const struct sockaddr_in *sin,
            struct pyrdma_status *st)
{
    if (sin->sin_addr.s_addr != 0 && !cm_addr_local(sin->sin_addr.s_addr))
        return pyrdma_fail(st, EADDRNOTAVAIL, "rdma_bind_addr", "%s is "
                           "not an address of this host",
                           inet_ntoa(sin->sin_addr));
    id->src.sin_addr = sin->sin_addr;
    if (cm_claim(id, ntohs(sin->sin_port), st) < 0)
        return -1;
    id->bound = 1;
    id->state = CS_BOUND;
    return 0;
}

EXPORT int
fab_cm_bind_addr(struct fab_cm_id *id, const struct sockaddr *addr,
                 struct pyrdma_status *st)
{
    const struct sockaddr_in *sin = inet_of(addr, "rdma_bind_addr", st);
    int rc;
    if (sin == NULL)
        return -1;
    CM_LOCK();
    if (id->state != CS_IDLE)
        return bad_state("rdma_bind_addr", st);
    rc = bind_locked(id, sin, st);
    CM_UNLOCK();
    return rc;
}

EXPORT int
fab_cm_resolve_addr(struct fab_cm_id *id, const struct sockaddr *src,
                    const struct sockaddr *dst, int timeout_ms,
                    struct pyrdma_status *st)
{
    const struct sockaddr_in *d = inet_of(dst, "rdma_resolve_addr", st);
    const struct sockaddr_in *s = NULL;
    uint32_t sip;
    unsigned long ns;

    (void)timeout_ms;
    if (d == NULL || (src != NULL &&
                      (s = inet_of(src, "rdma_resolve_addr", st)) == NULL))
        return -1;
    CM_LOCK();
    if (id->state != CS_IDLE && id->state != CS_BOUND &&
        id->state != CS_ADDR)
        return bad_state("rdma_resolve_addr", st);
    if (s != NULL && id->state == CS_IDLE &&
        (s->sin_addr.s_addr != 0 || s->sin_port != 0) &&
        bind_locked(id, s, st) < 0) {
        CM_UNLOCK();
        return -1;
    }
    id->dst = *d;
    if (IN_MULTICAST(ntohl(d->sin_addr.s_addr))) {
        /* a group (to join): this host's node, as the kernel binds the
           ID to the device of the source address or the default route */
        ns = N.netns;
        sip = N.ip ? N.ip : htonl(INADDR_LOOPBACK);
    }
    else if (cm_resolve_ip(d->sin_addr.s_addr, &ns, &sip) < 0) {
        cm_event_post(cm_event(id, FAB_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH));
        CM_UNLOCK();
        return 0;
    }
    id->dst_netns = ns;
    if (id->src.sin_addr.s_addr == 0)
        id->src.sin_addr.s_addr = sip;
    if (id->src.sin_port == 0)
        id->src.sin_port = htons(cm_ephemeral());
    id->state = CS_ADDR;
    cm_event_post(cm_event(id, FAB_CM_EVENT_ADDR_RESOLVED, 0));
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_resolve_route(struct fab_cm_id *id, int timeout_ms,
                     struct pyrdma_status *st)
{
    (void)timeout_ms;
    CM_LOCK();
    if (id->state != CS_ADDR)
        return bad_state("rdma_resolve_route", st);
    id->state = CS_ROUTE;
    cm_event_post(cm_event(id, FAB_CM_EVENT_ROUTE_RESOLVED, 0));
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_listen(struct fab_cm_id *id, int backlog, struct pyrdma_status *st)
{
    CM_LOCK();
    if (id->state == CS_IDLE) {
        struct sockaddr_in any;
        memset(&any, 0, sizeof(any));
        any.sin_family = AF_INET;
        if (bind_locked(id, &any, st) < 0) {
            CM_UNLOCK();
            return -1;
        }
    }
    if (id->state != CS_BOUND)
        return bad_state("rdma_listen", st);
    id->state = CS_LISTEN;
    id->backlog = backlog > 0 ? backlog : 1024;
    cm_claim_listening(id);
    CM_UNLOCK();
    return 0;
}

/* Nobody listens where id connects: the answer the listener's node
   would give (cm_lock held). */
static void
no_listener(struct fab_cm_id *id)
{
    struct cmev *e;
    id->state = CS_DONE;
    if (id->qp_type == IBV_QPT_UD) {
        e = cm_event(id, FAB_CM_EVENT_UNREACHABLE, IB_SIDR_UNSUPPORTED);
        if (e != NULL)
            e->ev.private_data_len = FAB_CM_SIDR_REP_PDATA;
    }
    else {
        e = cm_event(id, FAB_CM_EVENT_REJECTED,
                     FAB_CM_REJ_INVALID_SERVICE_ID);
        if (e != NULL)
            e->ev.private_data_len = FAB_CM_REJ_PDATA;
    }
    cm_event_post(e);
}

/* The node listening where id connects (and its LID), or 0.  A port
   nobody listens on (yet: a program that closes one listener and listens
   again at once, as perftest's -R does) is looked at again for up to
   100 ms before the connect is rejected: with the kernel's CM the REQ's
   way to the other node takes time too (cm_lock held; dropped while it
   waits). */
static uint64_t
listener_node(struct fab_cm_id *id, uint16_t *lid)
{
    uint64_t owner = 0;
    int tries;
    for (tries = 0; tries < 20; tries++) {
        owner = cm_claim_owner(id->ps, ntohs(id->dst.sin_port),
                               id->dst_netns, lid, 1);
        if (owner != 0 || id->state != CS_ROUTE)
            break;
        CM_UNLOCK();
        usleep(5000);
        CM_LOCK();
    }
    return id->state == CS_ROUTE ? owner : 0;
}

static void
msg_pdata(struct cm_msg *m, const void *pd, int len)
{
    m->pdata_len = (uint8_t)len;
    if (len > 0)
        memcpy(m->pdata, pd, (size_t)len);
}

EXPORT int
fab_cm_connect(struct fab_cm_id *id, const struct fab_cm_conn_param *p,
               struct pyrdma_status *st)
{
    int ud = id->qp_type == IBV_QPT_UD;
    struct cmout *o;
    uint64_t owner;
    uint16_t lid = 0;

    if (p != NULL && pdata_ok(p->private_data, p->private_data_len,
                              ud ? FAB_CM_SIDR_REQ_PDATA : FAB_CM_REQ_PDATA,
                              "rdma_connect", st) < 0)
        return -1;
    CM_LOCK();
    if (id->state != CS_ROUTE)
        return bad_state("rdma_connect", st);
    if (p != NULL) {
        if (p->qp_num != 0)
            id->qpn = p->qp_num & 0xFFFFFF;
        id->resp_res = p->responder_resources;
        id->init_depth = p->initiator_depth;
        id->retry = p->retry_count > 7 ? 7 : p->retry_count;
        id->rnr_retry = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
        id->srq = p->srq;
    }
    owner = listener_node(id, &lid);
    if (owner == 0) {
        no_listener(id);
        CM_UNLOCK();
        return 0;
    }
    o = cm_out_new(owner, ud ? CM_SIDR_REQ : CM_REQ);
    if (o == NULL) {
        CM_UNLOCK();
        return pyrdma_fail(st, ENOMEM, "rdma_connect", "");
    }
    id->peer_guid = owner;
    id->peer_lid = lid;
    id->state = CS_REQ_SENT;
    o->m.qpn = id->qpn;
    o->m.psn = id->psn;
    o->m.src_ip = id->src.sin_addr.s_addr;
    o->m.src_port = id->src.sin_port;
    o->m.dst_ip = id->dst.sin_addr.s_addr;
    o->m.dst_port = id->dst.sin_port;
    o->m.ps = (uint16_t)id->ps;
    o->m.resp_res = id->resp_res;
    o->m.init_depth = id->init_depth;
    o->m.retry = id->retry;
    o->m.rnr_retry = id->rnr_retry;
    o->m.srq = id->srq;
    if (p != NULL) {
        o->m.flow_control = p->flow_control;
        msg_pdata(&o->m, p->private_data, p->private_data_len);
    }
    cm_send(id, o->op, o);
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_accept(struct fab_cm_id *id, const struct fab_cm_conn_param *p,
              struct pyrdma_status *st)
{
    int ud = id->qp_type == IBV_QPT_UD;
    struct cmout *o;

    if (p != NULL && pdata_ok(p->private_data, p->private_data_len,
                              ud ? FAB_CM_SIDR_REP_PDATA : FAB_CM_REP_PDATA,
                              "rdma_accept", st) < 0)
        return -1;
    CM_LOCK();
    if (id->state != CS_REQ_RCVD)
        return bad_state("rdma_accept", st);
    o = cm_out_new(id->peer_guid, ud ? CM_SIDR_REP : CM_REP);
    if (o == NULL) {
        CM_UNLOCK();
        return pyrdma_fail(st, ENOMEM, "rdma_accept", "");
    }
    if (p != NULL) {
        if (p->qp_num != 0)
            id->qpn = p->qp_num & 0xFFFFFF;
        id->resp_res = p->responder_resources;
        id->init_depth = p->initiator_depth;
        id->rnr_retry = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
        if (ud)
            id->qkey = p->qkey;
        o->m.flow_control = p->flow_control;
        o->m.srq = p->srq;
        msg_pdata(&o->m, p->private_data, p->private_data_len);
    }
    o->m.qpn = id->qpn;
    o->m.psn = id->psn;
    o->m.qkey = id->qkey ? id->qkey : FAB_CM_UDP_QKEY;
    o->m.resp_res = id->resp_res;
    o->m.init_depth = id->init_depth;
    o->m.rnr_retry = id->rnr_retry;
    id->state = ud ? CS_ESTABLISHED : CS_REP_SENT;
    cm_send(id, o->op, o);
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_reject(struct fab_cm_id *id, const void *private_data,
              uint8_t private_data_len, struct pyrdma_status *st)
{
    int ud = id->qp_type == IBV_QPT_UD;
    struct cmout *o;

    if (pdata_ok(private_data, private_data_len,
                 ud ? FAB_CM_SIDR_REP_PDATA : FAB_CM_REJ_PDATA,
                 "rdma_reject", st) < 0)
        return -1;
    CM_LOCK();
    if (id->state != CS_REQ_RCVD)
        return bad_state("rdma_reject", st);
    o = cm_out_new(id->peer_guid, ud ? CM_SIDR_REP : CM_REJ);
    if (o == NULL) {
        CM_UNLOCK();
        return pyrdma_fail(st, ENOMEM, "rdma_reject", "");
    }
    o->m.reason = ud ? IB_SIDR_REJECT : FAB_CM_REJ_CONSUMER_DEFINED;
    msg_pdata(&o->m, private_data, private_data_len);
    id->state = CS_DONE;
    cm_send(id, o->op, o);
    CM_UNLOCK();
    return 0;
}

static int
establish(struct fab_cm_id *id, int event, struct pyrdma_status *st)
{
    struct cmout *o;
    CM_LOCK();
    if (id->state != CS_REP_RCVD)
        return bad_state("rdma_establish", st);
    o = cm_out_new(id->peer_guid, CM_RTU);
    if (o == NULL) {
        CM_UNLOCK();
        return pyrdma_fail(st, ENOMEM, "rdma_establish", "");
    }
    id->state = CS_ESTABLISHED;
    cm_send(id, CM_RTU, o);
    if (event)
        cm_event_post(cm_event(id, FAB_CM_EVENT_ESTABLISHED, 0));
    CM_UNLOCK();
    return 0;
}

EXPORT int
fab_cm_establish(struct fab_cm_id *id, struct pyrdma_status *st)
{
    return establish(id, 1, st);
}

EXPORT int
fab_cm_complete(struct fab_cm_id *id, struct pyrdma_status *st)
{
    return establish(id, 0, st);
}

EXPORT int
fab_cm_disconnect(struct fab_cm_id *id, struct pyrdma_status *st)
{
    struct cmout *o;
    CM_LOCK();
    if (id->state == CS_DISCONNECTED || id->state == CS_DREQ_SENT) {
        CM_UNLOCK();
        return 0;
    }
    if (id->qp_type == IBV_QPT_UD ||
        (id->state != CS_ESTABLISHED && id->state != CS_REP_SENT &&
         id->state != CS_REP_RCVD))
        return bad_state("rdma_disconnect", st);
    o = cm_out_new(id->peer_guid, CM_DREQ);
    if (o == NULL) {
        CM_UNLOCK();
        return pyrdma_fail(st, ENOMEM, "rdma_disconnect", "");
    }
    id->state = CS_DREQ_SENT;
    cm_send(id, CM_DREQ, o);
    CM_UNLOCK();
    return 0;
}

/* ------------------------------------------------------------------ */
/* what the caller's QP needs                                          */

static void
gid_of(uint8_t gid[16], uint64_t guid)
{
    uint64_t be = htobe64(guid);
    memset(gid, 0, 16);
    gid[0] = 0xfe;
    gid[1] = 0x80;
    memcpy(gid + 8, &be, 8);
}

/* The path to id's peer, as an address vector. */
static void
peer_av(const struct fab_cm_id *id, struct pyrdma_ah_attr *ah)
{
    memset(ah, 0, sizeof(*ah));
    ah->is_global = 1;
    gid_of(ah->grh.dgid, id->peer_guid);
    ah->grh.hop_limit = 1;
    ah->dlid = id->peer_lid;
    ah->port_num = 1;
}

static int
peer_known(const struct fab_cm_id *id)
{
    return id->peer_guid != 0 &&
           (id->state == CS_REQ_RCVD || id->state == CS_REP_SENT ||
            id->state == CS_REP_RCVD || id->state == CS_ESTABLISHED);
}

#define M(x) PYRDMA_QP_##x

/* init_qp_attr for an RC ID (cm_lock held): 0, or -1 (state). */
static int
rc_qp_attr(const struct fab_cm_id *id, struct pyrdma_qp_attr *a, int *mask)
{
    switch (a->qp_state) {
    case IBV_QPS_INIT:
        a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
                             IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC;
        *mask = M(STATE) | M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS);
        return 0;
    case IBV_QPS_RTR:
        if (!peer_known(id))
            return -1;
        peer_av(id, &a->ah_attr);
        a->path_mtu = IBV_MTU_4096;
        a->dest_qp_num = id->peer_qpn;
        a->rq_psn = id->peer_psn;
        a->max_dest_rd_atomic = id->resp_res ? id->resp_res : 1;
        a->min_rnr_timer = 12;
        *mask = M(STATE) | M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
                M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER);
        return 0;
    case IBV_QPS_RTS:
        if (!peer_known(id))
            return -1;
        a->sq_psn = id->psn;
        a->timeout = 14;
        a->retry_cnt = id->retry;
        a->rnr_retry = id->rnr_retry;
        a->max_rd_atomic = id->init_depth ? id->init_depth : 1;
        *mask = M(STATE) | M(SQ_PSN) | M(TIMEOUT) | M(RETRY_CNT) |
                M(RNR_RETRY) | M(MAX_QP_RD_ATOMIC);
        return 0;
    default:
        return -1;
    }
}

EXPORT int
fab_cm_init_qp_attr(struct fab_cm_id *id, struct pyrdma_qp_attr *attr,
                    int *mask, struct pyrdma_status *st)
{
    int state = attr->qp_state, rc = 0;

    memset(attr, 0, sizeof(*attr));
    attr->qp_state = state;
    attr->port_num = 1;
    CM_LOCK();
    if (id->qp_type == IBV_QPT_UD) {
        *mask = M(STATE);
        if (state == IBV_QPS_INIT) {
            attr->qkey = id->qkey ? id->qkey : FAB_CM_UDP_QKEY;
            *mask |= M(PKEY_INDEX) | M(PORT) | M(QKEY);
        }
        else if (state == IBV_QPS_RTS) {
            attr->sq_psn = id->psn;
            *mask |= M(SQ_PSN);
        }
        else if (state != IBV_QPS_RTR)
            rc = -1;
    }
    else
        rc = rc_qp_attr(id, attr, mask);
    CM_UNLOCK();
    if (rc < 0)
        return pyrdma_fail(st, EINVAL, "rdma_init_qp_attr", "QP state %d: "
                           "not INIT, RTR nor RTS, or the peer is not known "
                           "yet", state);
    return 0;
}

EXPORT int
fab_cm_query_route(struct fab_cm_id *id, struct fab_cm_route *r,
                   struct pyrdma_status *st)
{
    (void)st;
    memset(r, 0, sizeof(*r));
    CM_LOCK();
    memcpy(&r->src, &id->src, sizeof(id->src));
    memcpy(&r->dst, &id->dst, sizeof(id->dst));
    memcpy(r->sgid, N.gid, 16);
    r->slid = N.lid;
    if (id->peer_guid != 0) {
        gid_of(r->dgid, id->peer_guid);
        r->dlid = id->peer_lid;
    }
    r->port_num = 1;
    r->path_mtu = IBV_MTU_4096;
    r->num_paths = id->state >= CS_ROUTE && id->state != CS_LISTEN;
    r->ps = id->ps;
    r->qp_type = id->qp_type;
    CM_UNLOCK();
    return 0;
}
