/* rsocket.c - librdmacm's rsocket entry points for ucx0: sockets,
   connection setup through the front end's CM (cm_front.c), shutdown and
   close, options.  The data path is rsocket_io.c, rpoll/rselect
   rsocket_poll.c; see rsocket.h for the design and docs/c_programs.rst. */
#include "rsocket.h"

#define RS_DEF_BUF (128u << 10)
#define RS_DEF_QUEUE 128u
#define RS_DEF_INLINE 64u
#define RS_CM_TIMEOUT_MS 2000

/* ------------------------------------------------------------------ */
/* the descriptor table                                                */

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **tab;
static int tab_len;

struct rsk *
rs_get(int fd)
{
    struct rsk *rs = NULL;
    pthread_mutex_lock(&tab_lock);
    if (fd >= 0 && fd < tab_len)
        rs = tab[fd];
    pthread_mutex_unlock(&tab_lock);
    return rs;
}

static int
tab_set(int fd, struct rsk *rs)
{
    int rc = 0;
    pthread_mutex_lock(&tab_lock);
    if (fd >= tab_len) {
        int n = fd + 64;
        struct rsk **t = realloc(tab, sizeof(*t) * (size_t)n);
        if (t == NULL)
            rc = -1;
        else {
            memset(t + tab_len, 0, sizeof(*t) * (size_t)(n - tab_len));
            tab = t;
            tab_len = n;
        }
    }
    if (rc == 0)
        tab[fd] = rs;
    pthread_mutex_unlock(&tab_lock);
    if (rc < 0)
        errno = ENOMEM;
    return rc;
}

void *
rs_real(const char *name)
{
    return fv_cm_real(name);
}

/* ------------------------------------------------------------------ */
/* making and freeing                                                  */

static void
rs_free(struct rsk *rs)
{
    if (rs->req != NULL) {
        struct rdma_cm_id *id = rs->req->id;
        rdma_reject(id, NULL, 0);
        rdma_ack_cm_event(rs->req);
        rdma_destroy_id(id);
    }
    rs_teardown(rs);
    if (rs->id != NULL)
        rdma_destroy_id(rs->id);
    if (rs->ch != NULL)
        rdma_destroy_event_channel(rs->ch);
    if (rs->fd >= 0) {
        tab_set(rs->fd, NULL);
        close(rs->fd);
    }
    pthread_mutex_destroy(&rs->lock);
    free(rs);
}

/* A socket: its descriptor, event channel (non-blocking, watched by the
   descriptor) and, unless id is given (an accepted one), a CM ID. */
static struct rsk *
rs_new(int domain, const struct rsk *like)
{
    struct rsk *rs = calloc(1, sizeof(*rs));
    struct epoll_event pe;

    if (rs == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&rs->lock, NULL);
    rs->real_fd = -1;
    rs->domain = domain;
    rs->sbuf_size = like ? like->sbuf_size : RS_DEF_BUF;
    rs->rbuf_size = like ? like->rbuf_size : RS_DEF_BUF;
    rs->sq_size = like ? like->sq_size : RS_DEF_QUEUE;
    rs->rq_size = like ? like->rq_size : RS_DEF_QUEUE;
    rs->inline_size = like ? like->inline_size : RS_DEF_INLINE;
    rs->iomap_size = like ? like->iomap_size : 0;
    rs->nodelay = like ? like->nodelay : 0;
    rs->fd = epoll_create1(EPOLL_CLOEXEC);
    rs->ch = rs->fd >= 0 ? rdma_create_event_channel() : NULL;
    memset(&pe, 0, sizeof(pe));
    pe.events = EPOLLIN;
    if (rs->ch != NULL)
        pe.data.fd = rs->ch->fd;
    if (rs->ch == NULL ||
        fcntl(rs->ch->fd, F_SETFL, fcntl(rs->ch->fd, F_GETFL) | O_NONBLOCK)
            < 0 ||
        epoll_ctl(rs->fd, EPOLL_CTL_ADD, rs->ch->fd, &pe) < 0 ||
        (like == NULL &&
         rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP) < 0) ||
        tab_set(rs->fd, rs) < 0) {
        int e = errno;
        rs_free(rs);
        errno = e;
        return NULL;
    }
    return rs;
}

EXPORT int
rsocket(int domain, int type, int protocol)
{
    RS_REAL(int, rsocket, (int, int, int));
    struct rsk *rs;

    if (domain != AF_INET && domain != AF_INET6 && domain != AF_IB) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM) {
        /* datagram rsockets are the real librdmacm's (not on ucx0) */
        if (real_fn == NULL) {
            errno = ESOCKTNOSUPPORT;
            return -1;
        }
        return CM_CALL(real_fn(domain, type, protocol));
    }
    if (protocol != 0 && protocol != IPPROTO_TCP) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    rs = rs_new(domain, NULL);
    if (rs == NULL)
        return -1;
    rs->nonblock = !!(type & SOCK_NONBLOCK);
    return rs->fd;
}

/* addr belongs to the kernel: the socket becomes a real rsocket, with
   the options set so far.  0 or -1 with errno. */
static int
go_real(struct rsk *rs)
{
    RS_REAL(int, rsocket, (int, int, int));
    int fd, v;
    if (real_fn == NULL) {
        errno = ENOSYS;
        return -1;
    }
    fd = CM_CALL(real_fn(rs->domain, SOCK_STREAM, 0));
    if (fd < 0)
        return -1;
    {
        RS_REAL(int, rsetsockopt, (int, int, int, const void *, socklen_t));
        v = (int)rs->sbuf_size;
        CM_CALL(real_fn(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)));
        v = (int)rs->rbuf_size;
        CM_CALL(real_fn(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)));
        CM_CALL(real_fn(fd, SOL_SOCKET, SO_REUSEADDR, &rs->reuse,
                        sizeof(int)));
        CM_CALL(real_fn(fd, IPPROTO_TCP, TCP_NODELAY, &rs->nodelay,
                        sizeof(int)));
    }
    if (rs->nonblock) {
        RS_REAL(int, rfcntl, (int, int, ...));
        CM_CALL(real_fn(fd, F_SETFL, O_NONBLOCK));
    }
    rs->real_fd = fd;
    rdma_destroy_id(rs->id);
    rs->id = NULL;
    return 0;
}

static int
addr_ok(const struct sockaddr *addr, socklen_t len)
{
    if (addr == NULL) {
        errno = EFAULT;
        return 0;
    }
    if ((addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) ||
        (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
        || (addr->sa_family == AF_IB && len >= sizeof(struct sockaddr_ib)))
        return 1;
    errno = addr->sa_family == AF_INET || addr->sa_family == AF_INET6
                ? EINVAL : EAFNOSUPPORT;
    return 0;
}

EXPORT int
rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    RS_REAL(int, rbind, (int, const struct sockaddr *, socklen_t));
    struct rsk *rs;
    int rc;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, addr, addrlen)), -1);
    if (!addr_ok(addr, addrlen))
        return -1;
    pthread_mutex_lock(&rs->lock);
    if (rs->state != RS_NEW) {
        pthread_mutex_unlock(&rs->lock);
        errno = EINVAL;
        return -1;
    }
    if (fv_cm_real_side(addr)) {
        rc = go_real(rs);
        pthread_mutex_unlock(&rs->lock);
        return rc < 0 ? rc : rbind(socket, addr, addrlen);
    }
    rc = rdma_bind_addr(rs->id, (struct sockaddr *)addr);
    if (rc == 0)
        rs->state = RS_BOUND;
    pthread_mutex_unlock(&rs->lock);
    return rc;
}

EXPORT int
rlisten(int socket, int backlog)
{
    RS_REAL(int, rlisten, (int, int));
    struct rsk *rs;
    int rc;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, backlog)), -1);
    pthread_mutex_lock(&rs->lock);
    if (rs->state != RS_BOUND && rs->state != RS_LISTEN) {
        pthread_mutex_unlock(&rs->lock);
        errno = rs->state == RS_NEW ? EDESTADDRREQ : EINVAL;
        return -1;
    }
    rc = rdma_listen(rs->id, backlog > 0 ? backlog : 1);
    if (rc == 0)
        rs->state = RS_LISTEN;
    pthread_mutex_unlock(&rs->lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* connection events                                                   */

static int
hello_of(struct rsk *rs, const void *pd, uint8_t len)
{
    struct rs_hello h;
    if (pd == NULL || len < sizeof(h))
        return -1;
    memcpy(&h, pd, sizeof(h));
    if (h.magic != RS_HELLO_MAGIC || h.size == 0 || h.rq <= 2)
        return -1;
    rs->peer_addr = h.addr;
    rs->peer_rkey = h.rkey;
    rs->peer_size = h.size;
    rs->peer_posted = h.rq;
    return 0;
}

static struct rdma_conn_param
conn_param(const struct rsk *rs, struct rs_hello *h)
{
    struct rdma_conn_param p;
    h->magic = RS_HELLO_MAGIC;
    h->rkey = rs->rmr->rkey;
    h->addr = (uintptr_t)rs->rbuf;
    h->size = rs->rbuf_size;
    h->rq = rs->rq_size;
    memset(&p, 0, sizeof(p));
    p.private_data = h;
    p.private_data_len = sizeof(*h);
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

static void
fail(struct rsk *rs, int e)
{
    rs->state = RS_FAILED;
    if (rs->err == 0)
        rs->err = e;
}

/* The route is resolved: QP, rings, and the connect. */
static void
route_resolved(struct rsk *rs)
{
    struct rs_hello h;
    struct rdma_conn_param p;
    if (rs_setup(rs) < 0) {
        fail(rs, errno ? errno : ENOMEM);
        return;
    }
    p = conn_param(rs, &h);
    if (rdma_connect(rs->id, &p) < 0)
        fail(rs, errno);
    else
        rs->state = RS_CONNECTING;
}

static void
on_event(struct rsk *rs, const struct rdma_cm_event *ev)
{
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(rs->id, RS_CM_TIMEOUT_MS) < 0)
            fail(rs, errno);
        else
            rs->state = RS_ROUTE;
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        route_resolved(rs);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (rs->state == RS_CONNECTING &&
            hello_of(rs, ev->param.conn.private_data,
                     ev->param.conn.private_data_len) < 0)
            fail(rs, ECONNREFUSED);
        else
            rs->state = RS_CONNECTED;
        break;
    case RDMA_CM_EVENT_REJECTED:
        fail(rs, ECONNREFUSED);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
        fail(rs, EHOSTUNREACH);
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        fail(rs, rs->state == RS_ACCEPTING ? ECONNABORTED : ETIMEDOUT);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        rs->hup = 1;
        break;
    default:
        break;
    }
}

/* Handle the CM events waiting on rs's channel: how many. */
int
rs_cm_step(struct rsk *rs)
{
    struct rdma_cm_event *ev;
    int n = 0;
    while (rdma_get_cm_event(rs->ch, &ev) == 0) {
        on_event(rs, ev);
        rdma_ack_cm_event(ev);
        n++;
    }
    return n;
}

EXPORT int
rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    RS_REAL(int, rconnect, (int, const struct sockaddr *, socklen_t));
    struct rsk *rs;
    int e = 0;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, addr, addrlen)), -1);
    if (!addr_ok(addr, addrlen))
        return -1;
    pthread_mutex_lock(&rs->lock);
    if (rs->state == RS_NEW && fv_cm_real_side(addr)) {
        e = go_real(rs) < 0 ? errno : 0;
        pthread_mutex_unlock(&rs->lock);
        if (e) {
            errno = e;
            return -1;
        }
        return rconnect(socket, addr, addrlen);
    }
    if (rs->state > RS_BOUND)
        e = rs->state == RS_CONNECTED ? EISCONN
            : rs->state == RS_LISTEN || rs->state == RS_FAILED ? EINVAL
            : EALREADY;
    else if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr,
                               RS_CM_TIMEOUT_MS) < 0)
        e = errno;
    else
        rs->state = RS_ADDR;
    if (!e && rs->nonblock) {
        /* as TCP: the outcome comes by rpoll and SO_ERROR */
        rs_progress(rs);
        if (rs->state != RS_CONNECTED)
            e = EINPROGRESS;
    }
    while (!e && rs->state != RS_CONNECTED && rs->state != RS_FAILED)
        if (rs_progress(rs) == 0)
            rs_wait(rs, -1);
    if (!e && rs->state == RS_FAILED) {
        e = rs->err;
        rs->err = 0;
    }
    pthread_mutex_unlock(&rs->lock);
    errno = e;
    return e ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* accept                                                              */

/* The listener's next connection request (kept in l->req): 1, or 0 if
   there is none. */
int
rs_pending_request(struct rsk *l)
{
    struct rdma_cm_event *ev;
    while (l->req == NULL && rdma_get_cm_event(l->ch, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
            l->req = ev;
        else
            rdma_ack_cm_event(ev);
    }
    return l->req != NULL;
}

/* Answer the request ev with a new socket like l; NULL with errno. */
static struct rsk *
accept_request(struct rsk *l, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct rsk *rs = rs_new(l->domain, l);
    struct rs_hello h;
    struct rdma_conn_param p;
    int e;

    if (rs == NULL || hello_of(rs, ev->param.conn.private_data,
                               ev->param.conn.private_data_len) < 0) {
        e = rs ? ECONNABORTED : errno;
        rdma_reject(id, NULL, 0);
        rdma_ack_cm_event(ev);
        rdma_destroy_id(id);
        if (rs)
            rs_free(rs);
        errno = e;
        return NULL;
    }
    rdma_ack_cm_event(ev);
    rs->id = id;
    id->context = rs;
    if (rdma_migrate_id(id, rs->ch) < 0 || rs_setup(rs) < 0)
        goto bad;
    p = conn_param(rs, &h);
    if (rdma_accept(id, &p) < 0)
        goto bad;
    rs->state = RS_ACCEPTING;
    return rs;
bad:
    e = errno;
    rdma_reject(id, NULL, 0);
    rs_free(rs);
    errno = e ? e : ECONNABORTED;
    return NULL;
}

static void
copy_addr(const struct sockaddr *a, struct sockaddr *to, socklen_t *len)
{
    socklen_t n = a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                  : a->sa_family == AF_IB ? sizeof(struct sockaddr_ib)
                  : sizeof(struct sockaddr_in);
    if (to != NULL && len != NULL)
        memcpy(to, a, *len < n ? *len : n);
    if (len != NULL)
        *len = n;
}

EXPORT int
raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_REAL(int, raccept, (int, struct sockaddr *, socklen_t *));
    struct rsk *l, *rs = NULL;
    struct rdma_cm_event *ev;
    RS_LOOKUP(l, socket, CM_CALL(real_fn(fd_, addr, addrlen)), -1);
    pthread_mutex_lock(&l->lock);
    if (l->state != RS_LISTEN) {
        pthread_mutex_unlock(&l->lock);
        errno = EINVAL;
        return -1;
    }
    while (rs == NULL) {
        if (!rs_pending_request(l)) {
            if (l->nonblock) {
                pthread_mutex_unlock(&l->lock);
                errno = EAGAIN;
                return -1;
            }
            rs_wait(l, -1);
            continue;
        }
        ev = l->req;
        l->req = NULL;
        rs = accept_request(l, ev);
        if (rs == NULL && errno != ECONNABORTED) {
            pthread_mutex_unlock(&l->lock);
            return -1;
        }
    }
    pthread_mutex_unlock(&l->lock);
    copy_addr(rdma_get_peer_addr(rs->id), addr, addrlen);
    return rs->fd;
}

/* ------------------------------------------------------------------ */
/* shutdown and close                                                  */

EXPORT int
rshutdown(int socket, int how)
{
    RS_REAL(int, rshutdown, (int, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, how)), -1);
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&rs->lock);
    if (rs->state != RS_CONNECTED && rs->state != RS_ACCEPTING) {
        pthread_mutex_unlock(&rs->lock);
        errno = ENOTCONN;
        return -1;
    }
    rs_progress(rs);
    if (how != SHUT_WR)
        rs->rd_shut = 1;
    if (how != SHUT_RD && !rs->wr_shut) {
        rs->wr_shut = 1;
        rs_send_fin(rs);
    }
    pthread_mutex_unlock(&rs->lock);
    return 0;
}

/* Before closing a connected socket: the FIN sent and every send done
   (the peer has all the data), for at most the linger time or 10 s. */
static void
drain(struct rsk *rs)
{
    struct timespec t0, t;
    long limit = rs->linger.l_onoff ? rs->linger.l_linger * 1000L : 10000L;

    if (rs->state != RS_CONNECTED && rs->state != RS_ACCEPTING)
        return;
    rs->wr_shut = 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* an accepted socket not yet established: first that, then the FIN */
    while (!rs->broken && !rs->hup && rs->state != RS_FAILED &&
           (rs->state == RS_ACCEPTING || rs->sq_out > 0 || !rs->fin_sent)) {
        long ms;
        rs_send_fin(rs);
        clock_gettime(CLOCK_MONOTONIC, &t);
        ms = (t.tv_sec - t0.tv_sec) * 1000L +
             (t.tv_nsec - t0.tv_nsec) / 1000000L;
        if (ms >= limit)
            break;
        if (rs_progress(rs) == 0)
            rs_wait(rs, (int)(limit - ms));
    }
    rdma_disconnect(rs->id);
}

EXPORT int
rclose(int socket)
{
    RS_REAL(int, rclose, (int));
    struct rsk *rs = rs_get(socket);
    int rc = 0;
    if (rs == NULL || rs->real_fd >= 0) {
        if (real_fn == NULL) {
            errno = EBADF;
            rc = -1;
        }
        else
            rc = CM_CALL(real_fn(rs ? rs->real_fd : socket));
        if (rs == NULL)
            return rc;
    }
    else {
        pthread_mutex_lock(&rs->lock);
        drain(rs);
        pthread_mutex_unlock(&rs->lock);
    }
    rs_free(rs);
    return rc;
}
