/* cm_front.c - librdmacm's entry points for ucx0: event channels, CM
   IDs, addresses, events, connect/accept/reject/disconnect.  IDs made
   by a program are served by the fabric's connection manager
   (fab_cm_*), or by the real librdmacm once their address is a real
   device's (cm_front_real.c, CM_FORWARD); the calls UCX's rdmacm
   transport or librdmacm itself make
   go to the real librdmacm (fv_real_caller).  QPs, endpoints and
   getaddrinfo are in cm_front_ep.c.  See docs/c_programs.rst. */
#include "cm_front.h"

static int
cm_fail(const struct pyrdma_status *st)
{
    fv_failed(st);
    return -1;
}

/* The real librdmacm function name (NULL if there is none). */
void *
fv_cm_real(const char *name)
{
    static void *lib;
    void *h, *f = dlsym(RTLD_NEXT, name);
    if (f != NULL)
        return f;
    h = __atomic_load_n(&lib, __ATOMIC_ACQUIRE);
    if (h == NULL) {
        h = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            return NULL;
        __atomic_store_n(&lib, h, __ATOMIC_RELEASE);
    }
    return dlsym(h, name);
}

/* The ucx0 context every ID of the program shares (id->verbs). */
struct ibv_context *
fv_cm_verbs(void)
{
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static struct ibv_context *ctx;
    struct ibv_device **l;
    int n, i;

    pthread_mutex_lock(&m);
    if (ctx == NULL && (l = ibv_get_device_list(&n)) != NULL) {
        for (i = 0; i < n; i++)
            if (l[i] == &fv_dev)
                ctx = ibv_open_device(l[i]);
        ibv_free_device_list(l);
    }
    pthread_mutex_unlock(&m);
    if (ctx == NULL && errno == 0)
        errno = ENODEV;
    return ctx;
}

/* ------------------------------------------------------------------ */
/* channels                                                            */

static int
epoll_watch(int epfd, int fd)
{
    struct epoll_event pe;
    memset(&pe, 0, sizeof(pe));
    pe.events = EPOLLIN;
    pe.data.fd = fd;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &pe);
}

/* A channel: the fabric's, and an epoll fd (what the program polls)
   that also watches the real librdmacm's channel once it is made. */
static struct fch *
channel_new(void)
{
    struct pyrdma_status st;
    struct fch *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (fab_cm_create_channel(&c->h, &c->fab_fd, &st) < 0) {
        fv_failed(&st);
        free(c);
        return NULL;
    }
    c->ch.fd = epoll_create1(EPOLL_CLOEXEC);
    if (c->ch.fd < 0 || epoll_watch(c->ch.fd, c->fab_fd) < 0) {
        int e = errno;
        if (c->ch.fd >= 0)
            close(c->ch.fd);
        fab_cm_destroy_channel(c->h, &st);
        free(c);
        errno = e;
        return NULL;
    }
    return c;
}

EXPORT struct rdma_event_channel *
rdma_create_event_channel(void)
{
    CM_REAL(struct rdma_event_channel *, rdma_create_event_channel, (void));
    struct fch *c;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn()) : NULL;
    c = channel_new();
    return c ? &c->ch : NULL;
}

EXPORT void
rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    CM_REAL(void, rdma_destroy_event_channel,
            (struct rdma_event_channel *));
    struct fch *c = container_of(channel, struct fch, ch);
    struct pyrdma_status st;
    if (CM_CALLER_REAL()) {
        if (real_fn)
            CM_CALL(real_fn(channel));
        return;
    }
    if (fab_cm_destroy_channel(c->h, &st) < 0) {
        fv_failed(&st);
        return;
    }
    if (c->real != NULL) {
        CM_REAL(void, rdma_destroy_event_channel,
                (struct rdma_event_channel *));
        CM_CALL(real_fn(c->real));
    }
    close(c->ch.fd);
    free(c);
}

/* ------------------------------------------------------------------ */
/* IDs                                                                 */

static int
qp_type_of(enum rdma_port_space ps)
{
    return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

/* A new ID on c (NULL: a synchronous one with a channel of its own). */
static struct fid *
fid_new(struct fch *c, void *context, enum rdma_port_space ps)
{
    struct pyrdma_status st;
    struct fid *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (c == NULL && (c = f->own_ch = channel_new()) == NULL) {
        free(f);
        return NULL;
    }
    f->id.verbs = fv_cm_verbs();
    if (f->id.verbs == NULL ||
        fab_cm_create_id(c->h, f, (int)ps, &f->h, &st) < 0) {
        if (f->id.verbs != NULL)
            fv_failed(&st);
        if (f->own_ch != NULL)
            rdma_destroy_event_channel(&f->own_ch->ch);
        free(f);
        return NULL;
    }
    f->id.channel = &c->ch;
    f->id.context = context;
    f->id.ps = ps;
    f->id.qp_type = qp_type_of(ps);
    f->id.port_num = 1;
    return f;
}

EXPORT int
rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
               void *context, enum rdma_port_space ps)
{
    CM_REAL(int, rdma_create_id, (struct rdma_event_channel *,
                                  struct rdma_cm_id **, void *,
                                  enum rdma_port_space));
    struct fid *f;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(channel, id, context, ps)) : -1;
    f = fid_new(channel ? container_of(channel, struct fch, ch) : NULL,
                context, ps);
    if (f == NULL)
        return -1;
    *id = &f->id;
    return 0;
}

/* Events handed out and not acknowledged yet, per ID: rdma_destroy_id
   waits for them, as librdmacm's does (an ID's memory must outlive the
   events that point to it). */
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_acked = PTHREAD_COND_INITIALIZER;

static void
event_count(struct fev *e, struct fid *owner)
{
    pthread_mutex_lock(&ev_lock);
    e->owner = owner;
    owner->events_out++;
    pthread_mutex_unlock(&ev_lock);
}

static void
event_free(struct rdma_cm_event *ev)
{
    struct fev *e = container_of(ev, struct fev, ev);
    struct pyrdma_status st;
    fab_cm_ack_event(e->h, &st);
    if (e->owner != NULL) {
        pthread_mutex_lock(&ev_lock);
        if (--e->owner->events_out == 0)
            pthread_cond_broadcast(&ev_acked);
        pthread_mutex_unlock(&ev_lock);
    }
    free(e);
}

/* Wait until every event handed out for f is acknowledged. */
static void
wait_acked(struct fid *f)
{
    pthread_mutex_lock(&ev_lock);
    while (f->events_out > 0)
        pthread_cond_wait(&ev_acked, &ev_lock);
    pthread_mutex_unlock(&ev_lock);
}

EXPORT int
rdma_destroy_id(struct rdma_cm_id *id)
{
    CM_REAL(int, rdma_destroy_id, (struct rdma_cm_id *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id)) : -1;
    if (f->real != NULL && CM_CALL(real_fn(f->real)) < 0)
        return -1;
    f->real = NULL;
    if (f->h != NULL && fab_cm_destroy_id(f->h, &st) < 0)
        return cm_fail(&st);
    if (f->last != NULL)
        event_free(f->last);
    wait_acked(f);
    if (f->own_ch != NULL)
        rdma_destroy_event_channel(&f->own_ch->ch);
    free(f->qp_init);
    free(f);
    return 0;
}

/* Copy the route the CM knows into id->route. */
void
fv_cm_route(struct fid *f)
{
    struct fab_cm_route r;
    struct pyrdma_status st;
    struct rdma_route *rt = &f->id.route;

    if (fab_cm_query_route(f->h, &r, &st) < 0)
        return;
    memcpy(&rt->addr.src_storage, &r.src, sizeof(r.src));
    memcpy(&rt->addr.dst_storage, &r.dst, sizeof(r.dst));
    memcpy(rt->addr.addr.ibaddr.sgid.raw, r.sgid, 16);
    memcpy(rt->addr.addr.ibaddr.dgid.raw, r.dgid, 16);
    rt->addr.addr.ibaddr.pkey = htobe16(0xffff);
    memcpy(f->path.sgid.raw, r.sgid, 16);
    memcpy(f->path.dgid.raw, r.dgid, 16);
    f->path.slid = htobe16(r.slid);
    f->path.dlid = htobe16(r.dlid);
    f->path.pkey = htobe16(0xffff);
    f->path.mtu = r.path_mtu;
    f->path.hop_limit = 1;
    f->path.reversible = 1;
    f->path.numb_path = 1;
    if (f->tos_set)
        f->path.traffic_class = f->tos;  /* RDMA_OPTION_ID_TOS */
    rt->num_paths = r.num_paths;
    rt->path_rec = r.num_paths ? &f->path : NULL;
}

/* Drop one side of an ID bound to the wildcard on both (the real one if
   real_too). */
static void
drop_side(struct fid *f, int real_too)
{
    CM_REAL(int, rdma_destroy_id, (struct rdma_cm_id *));
    struct pyrdma_status st;
    if (real_too) {
        if (f->real != NULL && real_fn != NULL)
            CM_CALL(real_fn(f->real));
        f->real = NULL;
    }
    else if (f->h != NULL && fab_cm_destroy_id(f->h, &st) == 0)
        f->h = NULL;
    f->dual = 0;
}

/* Bind f to the wildcard on both sides: a real ID beside the fabric's. */
static int
bind_both(struct fid *f, struct sockaddr *addr)
{
    CM_REAL(int, rdma_bind_addr, (struct rdma_cm_id *, struct sockaddr *));
    struct pyrdma_status st;
    if (fv_cm_go_real(f, 1) < 0)
        return -1;
    f->dual = 1;
    if (CM_CALL(real_fn(f->real, addr)) < 0) {
        int e = errno;
        drop_side(f, 1);
        errno = e;
        return -1;
    }
    if (fab_cm_bind_addr(f->h, addr, &st) < 0) {
        drop_side(f, 1);
        return cm_fail(&st);
    }
    f->decided = 1;
    fv_cm_sync(f);
    fv_cm_route(f);
    return 0;
}

EXPORT int
rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    CM_REAL(int, rdma_bind_addr, (struct rdma_cm_id *, struct sockaddr *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, addr)) : -1;
    if (!f->decided && f->real == NULL && fv_cm_wildcard_both(addr))
        return bind_both(f, addr);
    if (!f->decided && f->real == NULL && fv_cm_real_side(addr) &&
        fv_cm_go_real(f, 0) < 0)
        return -1;
    CM_FORWARD(f, addr);
    if (fab_cm_bind_addr(f->h, addr, &st) < 0)
        return cm_fail(&st);
    f->decided = 1;
    fv_cm_route(f);
    return 0;
}

EXPORT int
rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
                  struct sockaddr *dst_addr, int timeout_ms)
{
    CM_REAL(int, rdma_resolve_addr, (struct rdma_cm_id *, struct sockaddr *,
                                     struct sockaddr *, int));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, src_addr, dst_addr, timeout_ms))
                         : -1;
    if (f->dual)
        drop_side(f, !fv_cm_real_side(dst_addr));
    if (!f->decided && f->real == NULL && fv_cm_real_side(dst_addr) &&
        fv_cm_go_real(f, 0) < 0)
        return -1;
    CM_FORWARD(f, src_addr, dst_addr, timeout_ms);
    f->decided = 1;
    if (fab_cm_resolve_addr(f->h, src_addr, dst_addr, timeout_ms, &st) < 0)
        return cm_fail(&st);
    return f->own_ch ? fv_cm_wait(f, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

EXPORT int
rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    CM_REAL(int, rdma_resolve_route, (struct rdma_cm_id *, int));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, timeout_ms)) : -1;
    CM_FORWARD(f, timeout_ms);
    if (fab_cm_resolve_route(f->h, timeout_ms, &st) < 0)
        return cm_fail(&st);
    return f->own_ch ? fv_cm_wait(f, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

EXPORT int
rdma_listen(struct rdma_cm_id *id, int backlog)
{
    CM_REAL(int, rdma_listen, (struct rdma_cm_id *, int));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, backlog)) : -1;
    if (f->dual && CM_CALL(real_fn(f->real, backlog)) < 0)
        return -1;
    if (!f->dual)
        CM_FORWARD(f, backlog);
    if (fab_cm_listen(f->h, backlog, &st) < 0)
        return cm_fail(&st);
    f->listening = 1;
    fv_cm_route(f);
    return 0;
}

/* rdma_migrate_id of an ID the real librdmacm carries: to the real
   channel of the program's (NULL: a synchronous one). */
static int
migrate_real(struct fid *f, struct rdma_event_channel *channel)
{
    CM_REAL(int, rdma_migrate_id, (struct rdma_cm_id *,
                                   struct rdma_event_channel *));
    struct fch *c = channel ? container_of(channel, struct fch, ch) : NULL;
    struct rdma_event_channel *rc = NULL;
    if (c != NULL && (rc = fv_cm_real_channel(c)) == NULL)
        return -1;
    if (CM_CALL(real_fn(f->real, rc)) < 0)
        return -1;
    f->id.channel = channel;
    fv_cm_sync(f);
    return 0;
}

EXPORT int
rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
    CM_REAL(int, rdma_migrate_id, (struct rdma_cm_id *,
                                   struct rdma_event_channel *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    struct fch *c, *old = f->own_ch;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, channel)) : -1;
    if (f->real != NULL) {
        if (migrate_real(f, channel) < 0)
            return -1;
        if (!f->dual)
            return 0;
    }
    c = channel ? container_of(channel, struct fch, ch) : channel_new();
    if (c == NULL)
        return -1;
    if (fab_cm_migrate_id(f->h, c->h, &st) < 0) {
        if (channel == NULL)
            rdma_destroy_event_channel(&c->ch);
        return cm_fail(&st);
    }
    f->own_ch = channel ? NULL : c;
    f->id.channel = &c->ch;
    if (f->last != NULL) {      /* a synchronous ID's last event */
        event_free(f->last);
        f->last = NULL;
        f->id.event = NULL;
    }
    wait_acked(f);              /* as librdmacm: none left on the old */
    if (old != NULL)
        rdma_destroy_event_channel(&old->ch);
    return 0;
}

/* ------------------------------------------------------------------ */
/* connecting                                                          */

static void
param_in(struct fab_cm_conn_param *o, const struct rdma_conn_param *p,
         struct rdma_cm_id *id)
{
    memset(o, 0, sizeof(*o));
    o->retry_count = 7;
    o->rnr_retry_count = 7;
    o->responder_resources = 16;
    o->initiator_depth = 16;
    if (p != NULL) {
        o->private_data = p->private_data;
        o->private_data_len = p->private_data_len;
        o->responder_resources = p->responder_resources > 16
                                 ? 16 : p->responder_resources;
        o->initiator_depth = p->initiator_depth > 16 ? 16 : p->initiator_depth;
        o->flow_control = p->flow_control;
        o->retry_count = p->retry_count;
        o->rnr_retry_count = p->rnr_retry_count;
        o->srq = p->srq;
        o->qp_num = p->qp_num;
    }
    if (id->qp != NULL) {
        o->qp_num = id->qp->qp_num;
        o->srq = id->qp->srq != NULL;
    }
}

EXPORT int
rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    CM_REAL(int, rdma_connect, (struct rdma_cm_id *,
                                struct rdma_conn_param *));
    struct fid *f = container_of(id, struct fid, id);
    struct fab_cm_conn_param p;
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, conn_param)) : -1;
    CM_FORWARD(f, conn_param);
    param_in(&p, conn_param, id);
    if (fab_cm_connect(f->h, &p, &st) < 0)
        return cm_fail(&st);
    return f->own_ch ? fv_cm_wait(f, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

EXPORT int
rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    CM_REAL(int, rdma_accept, (struct rdma_cm_id *,
                               struct rdma_conn_param *));
    struct fid *f = container_of(id, struct fid, id);
    struct fab_cm_conn_param p;
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, conn_param)) : -1;
    CM_FORWARD(f, conn_param);
    param_in(&p, conn_param, id);
    p.qkey = RDMA_UDP_QKEY;
    if (id->qp != NULL && id->qp_type == IBV_QPT_RC &&
        (fv_cm_qp_to(f, IBV_QPS_RTR) < 0 || fv_cm_qp_to(f, IBV_QPS_RTS) < 0))
        return -1;
    if (fab_cm_accept(f->h, &p, &st) < 0)
        return cm_fail(&st);
    if (f->own_ch != NULL && id->qp_type == IBV_QPT_RC)
        return fv_cm_wait(f, RDMA_CM_EVENT_ESTABLISHED);
    return 0;
}

EXPORT int
rdma_reject(struct rdma_cm_id *id, const void *private_data,
            uint8_t private_data_len)
{
    CM_REAL(int, rdma_reject, (struct rdma_cm_id *, const void *, uint8_t));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, private_data, private_data_len))
                         : -1;
    CM_FORWARD(f, private_data, private_data_len);
    if (fab_cm_reject(f->h, private_data, private_data_len, &st) < 0)
        return cm_fail(&st);
    return 0;
}

EXPORT int
rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
                uint8_t private_data_len)
{
    CM_REAL(int, rdma_reject_ece, (struct rdma_cm_id *, const void *,
                                   uint8_t));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, private_data, private_data_len))
                         : -1;
    CM_FORWARD(container_of(id, struct fid, id), private_data,
               private_data_len);
    return rdma_reject(id, private_data, private_data_len);
}

EXPORT int
rdma_establish(struct rdma_cm_id *id)
{
    CM_REAL(int, rdma_establish, (struct rdma_cm_id *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id)) : -1;
    CM_FORWARD0(f);
    if (fab_cm_establish(f->h, &st) < 0)
        return cm_fail(&st);
    return 0;
}

EXPORT int
rdma_disconnect(struct rdma_cm_id *id)
{
    CM_REAL(int, rdma_disconnect, (struct rdma_cm_id *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id)) : -1;
    CM_FORWARD0(f);
    if (id->qp != NULL) {
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
    }
    if (fab_cm_disconnect(f->h, &st) < 0)
        return cm_fail(&st);
    return 0;
}

EXPORT int
rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
                  int *qp_attr_mask)
{
    CM_REAL(int, rdma_init_qp_attr, (struct rdma_cm_id *,
                                     struct ibv_qp_attr *, int *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_qp_attr a;
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, qp_attr, qp_attr_mask)) : -1;
    CM_FORWARD(f, qp_attr, qp_attr_mask);
    memset(&a, 0, sizeof(a));
    a.qp_state = qp_attr->qp_state;
    if (fab_cm_init_qp_attr(f->h, &a, qp_attr_mask, &st) < 0)
        return cm_fail(&st);
    fv_qp_attr_out(qp_attr, &a);
    /* what rdma_set_option set: the kernel's rdma_init_qp_attr too */
    if (f->tos_set && (*qp_attr_mask & IBV_QP_AV))
        qp_attr->ah_attr.grh.traffic_class = f->tos;
    if (f->ack_timeout_set && (*qp_attr_mask & IBV_QP_TIMEOUT))
        qp_attr->timeout = f->ack_timeout;
    return 0;
}

/* ------------------------------------------------------------------ */
/* events                                                              */

/* The ID of a CONNECT_REQUEST (h->id, new): made like its listener's. */
static struct fid *
request_id(struct fab_cm_event *h)
{
    struct fid *l = h->listen_id ? fab_cm_id_context(h->listen_id) : NULL;
    struct pyrdma_status st;
    struct fid *f;

    if (l == NULL || (f = calloc(1, sizeof(*f))) == NULL) {
        fab_cm_reject(h->id, NULL, 0, &st);
        fab_cm_destroy_id(h->id, &st);
        return NULL;
    }
    f->h = h->id;
    f->id.verbs = fv_cm_verbs();  /* not l's: real if l is dual */
    f->id.channel = l->id.channel;
    f->id.context = l->id.context;
    f->id.ps = l->id.ps;
    f->id.qp_type = l->id.qp_type;
    f->id.port_num = 1;
    fab_cm_set_context(h->id, f);
    h->context = f;
    fv_cm_route(f);
    return f;
}

/* An RC connection's REP came to an ID whose QP librdmacm would own:
   RTR, RTS, the RTU, and the program sees ESTABLISHED (as librdmacm
   shows it); CONNECT_ERROR (and a reject) if the QP cannot move. */
static void
conn_response(struct fid *f, struct fev *e)
{
    struct pyrdma_status st;
    if (fv_cm_qp_to(f, IBV_QPS_RTR) < 0 || fv_cm_qp_to(f, IBV_QPS_RTS) < 0) {
        e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
        e->ev.status = -errno;
        return;
    }
    if (fab_cm_complete(f->h, &st) < 0) {
        e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
        e->ev.status = -fv_failed(&st);
        return;
    }
    e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
}

static void
event_fill(struct fev *e, struct fid *f, struct fab_cm_event *h)
{
    e->ev.id = &f->id;
    e->ev.listen_id = NULL;
    if (h->event == FAB_CM_EVENT_CONNECT_REQUEST && h->listen_id != NULL)
        e->ev.listen_id = &((struct fid *)fab_cm_id_context(h->listen_id))->id;
    e->ev.event = (enum rdma_cm_event_type)h->event;
    e->ev.status = h->status;
    if (h->event == FAB_CM_EVENT_MULTICAST_JOIN ||
        h->event == FAB_CM_EVENT_MULTICAST_ERROR) {
        /* librdmacm gives the join's context as the private data */
        e->ev.param.ud.private_data = h->mc_context;
        e->ev.param.ud.private_data_len = 0;
        e->ev.param.ud.qp_num = h->qp_num;
        e->ev.param.ud.qkey = h->qkey;
        fv_ah_out(&e->ev.param.ud.ah_attr, &h->ah_attr);
        return;
    }
    if (f->id.qp_type == IBV_QPT_UD) {
        e->ev.param.ud.private_data = h->private_data_len ? h->private_data
                                                           : NULL;
        e->ev.param.ud.private_data_len = h->private_data_len;
        e->ev.param.ud.qp_num = h->qp_num;
        e->ev.param.ud.qkey = h->qkey;
        fv_ah_out(&e->ev.param.ud.ah_attr, &h->ah_attr);
        return;
    }
    e->ev.param.conn.private_data = h->private_data_len ? h->private_data
                                                         : NULL;
    e->ev.param.conn.private_data_len = h->private_data_len;
    e->ev.param.conn.responder_resources = h->responder_resources;
    e->ev.param.conn.initiator_depth = h->initiator_depth;
    e->ev.param.conn.flow_control = h->flow_control;
    e->ev.param.conn.retry_count = h->retry_count;
    e->ev.param.conn.rnr_retry_count = h->rnr_retry_count;
    e->ev.param.conn.srq = h->srq;
    e->ev.param.conn.qp_num = h->qp_num;
}

/* The next event of the fabric channel of c: 1 (*out set), 0 if there
   is none, -1 with errno. */
static int
fabric_event(struct fch *c, struct rdma_cm_event **out)
{
    struct pyrdma_status st;
    struct fab_cm_event *h;
    struct fid *f;
    struct fev *e;

    for (;;) {
        if (fab_cm_get_event(c->h, 0, &h, &st) < 0)
            return st.err == EAGAIN ? 0 : cm_fail(&st);
        f = h->event == FAB_CM_EVENT_CONNECT_REQUEST ? request_id(h)
                                                      : h->context;
        if (f != NULL)
            break;
        fab_cm_ack_event(h, &st);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        fab_cm_ack_event(h, &st);
        errno = ENOMEM;
        return -1;
    }
    e->h = h;
    event_fill(e, f, h);
    /* librdmacm counts a CONNECT_REQUEST against its listener: the new
       ID may be destroyed before the request is acknowledged */
    event_count(e, e->ev.listen_id != NULL
                   ? container_of(e->ev.listen_id, struct fid, id) : f);
    if (h->event != FAB_CM_EVENT_DISCONNECTED &&
        h->event != FAB_CM_EVENT_TIMEWAIT_EXIT)
        fv_cm_route(f);
    if (h->event == FAB_CM_EVENT_CONNECT_RESPONSE && f->id.qp != NULL)
        conn_response(f, e);
    *out = &e->ev;
    return 1;
}

/* The next event of c (the real librdmacm's or the fabric's) as the
   program sees it, waiting on c's fd unless it is non-blocking; 0 or -1
   with errno. */
static int
next_event(struct fch *c, struct rdma_cm_event **out)
{
    int wait = !(fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK), rc;
    struct epoll_event pe;

    for (;;) {
        rc = fv_cm_real_event(c, out);
        if (rc == 0)
            rc = fabric_event(c, out);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
        if (!wait) {
            errno = EAGAIN;
            return -1;
        }
        if (epoll_wait(c->ch.fd, &pe, 1, -1) < 0 && errno == EINTR)
            return -1;
    }
}

EXPORT int
rdma_get_cm_event(struct rdma_event_channel *channel,
                  struct rdma_cm_event **event)
{
    CM_REAL(int, rdma_get_cm_event, (struct rdma_event_channel *,
                                     struct rdma_cm_event **));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(channel, event)) : -1;
    return next_event(container_of(channel, struct fch, ch), event);
}

EXPORT int
rdma_ack_cm_event(struct rdma_cm_event *event)
{
    CM_REAL(int, rdma_ack_cm_event, (struct rdma_cm_event *));
    struct fev *e;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(event)) : -1;
    e = container_of(event, struct fev, ev);
    if (e->real != NULL) {
        int rc = CM_CALL(real_fn(e->real));
        free(e);
        return rc;
    }
    event_free(event);
    return 0;
}

/* A synchronous ID: wait for its next event, keep it as id->event, and
   return 0 if it is want without error, else -1 with errno (as
   librdmacm: ECONNREFUSED for a reject). */
int
fv_cm_wait(struct fid *f, int want)
{
    struct rdma_cm_event *ev;
    if (next_event(f->own_ch, &ev) < 0)
        return -1;
    if (f->last != NULL)
        event_free(f->last);
    f->last = ev;
    f->id.event = ev;
    if (ev->event == (enum rdma_cm_event_type)want && ev->status == 0)
        return 0;
    if (ev->event == RDMA_CM_EVENT_REJECTED)
        errno = ECONNREFUSED;
    else if (ev->status < 0)
        errno = -ev->status;
    else
        errno = ev->status ? ev->status : EINVAL;
    return -1;
}

EXPORT const char *
rdma_event_str(enum rdma_cm_event_type event)
{
    return fab_cm_event_str((int)event);
}
