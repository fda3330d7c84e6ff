/* rsocket_api.c - the rest of librdmacm's rsocket entry points for
   ucx0: send and receive in every form, riomap/riowrite, options,
   rfcntl and the names (rsocket.h). */
#include "rsocket.h"

#include <sys/uio.h>

#define LOCKED(rs, expr) \
    ({ \
        __typeof__(expr) r_; \
        pthread_mutex_lock(&(rs)->lock); \
        r_ = (expr); \
        pthread_mutex_unlock(&(rs)->lock); \
        r_; \
    })

/* ------------------------------------------------------------------ */
/* send and receive                                                    */

EXPORT ssize_t
rrecv(int socket, void *buf, size_t len, int flags)
{
    RS_REAL(ssize_t, rrecv, (int, void *, size_t, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, buf, len, flags)), -1);
    if (buf == NULL && len > 0) {
        errno = EFAULT;
        return -1;
    }
    return LOCKED(rs, rs_recv(rs, buf, len, flags));
}

EXPORT ssize_t
rsend(int socket, const void *buf, size_t len, int flags)
{
    RS_REAL(ssize_t, rsend, (int, const void *, size_t, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, buf, len, flags)), -1);
    if (buf == NULL && len > 0) {
        errno = EFAULT;
        return -1;
    }
    return LOCKED(rs, rs_send(rs, buf, len, flags));
}

EXPORT ssize_t
rread(int socket, void *buf, size_t count)
{
    return rrecv(socket, buf, count, 0);
}

EXPORT ssize_t
rwrite(int socket, const void *buf, size_t count)
{
    return rsend(socket, buf, count, 0);
}

EXPORT ssize_t
rrecvfrom(int socket, void *buf, size_t len, int flags,
          struct sockaddr *src_addr, socklen_t *addrlen)
{
    ssize_t r = rrecv(socket, buf, len, flags);
    if (r >= 0 && src_addr != NULL && addrlen != NULL)
        (void)rgetpeername(socket, src_addr, addrlen);
    return r;
}

EXPORT ssize_t
rsendto(int socket, const void *buf, size_t len, int flags,
        const struct sockaddr *dest_addr, socklen_t addrlen)
{
    (void)dest_addr;    /* a stream socket: connected, as TCP ignores it */
    (void)addrlen;
    return rsend(socket, buf, len, flags);
}

/* Each iovec in turn; after the first bytes, no waiting. */
static ssize_t
iov_io(int socket, const struct iovec *iov, int n, int flags, int out)
{
    ssize_t total = 0, r;
    int i;
    if (n < 0 || (iov == NULL && n > 0)) {
        errno = EINVAL;
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (iov[i].iov_len == 0)
            continue;
        r = out ? rsend(socket, iov[i].iov_base, iov[i].iov_len, flags)
                : rrecv(socket, iov[i].iov_base, iov[i].iov_len, flags);
        if (r < 0)
            return total > 0 && errno == EAGAIN ? total : (total ? total
                                                                 : -1);
        total += r;
        if ((size_t)r < iov[i].iov_len)
            break;
        flags |= MSG_DONTWAIT;
    }
    return total;
}

EXPORT ssize_t
rreadv(int socket, const struct iovec *iov, int iovcnt)
{
    RS_REAL(ssize_t, rreadv, (int, const struct iovec *, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, iov, iovcnt)), -1);
    return iov_io(socket, iov, iovcnt, 0, 0);
}

EXPORT ssize_t
rwritev(int socket, const struct iovec *iov, int iovcnt)
{
    RS_REAL(ssize_t, rwritev, (int, const struct iovec *, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, iov, iovcnt)), -1);
    return iov_io(socket, iov, iovcnt, 0, 1);
}

EXPORT ssize_t
rrecvmsg(int socket, struct msghdr *msg, int flags)
{
    RS_REAL(ssize_t, rrecvmsg, (int, struct msghdr *, int));
    struct rsk *rs;
    ssize_t r;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, msg, flags)), -1);
    if (msg == NULL) {
        errno = EFAULT;
        return -1;
    }
    r = iov_io(socket, msg->msg_iov, (int)msg->msg_iovlen, flags, 0);
    if (r >= 0) {
        msg->msg_controllen = 0;
        msg->msg_flags = 0;
        if (msg->msg_name != NULL)
            (void)rgetpeername(socket, msg->msg_name, &msg->msg_namelen);
    }
    return r;
}

EXPORT ssize_t
rsendmsg(int socket, const struct msghdr *msg, int flags)
{
    RS_REAL(ssize_t, rsendmsg, (int, const struct msghdr *, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, msg, flags)), -1);
    if (msg == NULL) {
        errno = EFAULT;
        return -1;
    }
    return iov_io(socket, msg->msg_iov, (int)msg->msg_iovlen, flags, 1);
}

/* ------------------------------------------------------------------ */
/* riomap                                                              */

EXPORT off_t
riomap(int socket, void *buf, size_t len, int prot, int flags,
       off_t offset)
{
    RS_REAL(off_t, riomap, (int, void *, size_t, int, int, off_t));
    struct rsk *rs;
    RS_LOOKUP(rs, socket,
              CM_CALL(real_fn(fd_, buf, len, prot, flags, offset)), -1);
    if (flags != 0) {
        errno = EINVAL;
        return -1;
    }
    return LOCKED(rs, rs_iomap(rs, buf, len, prot, offset));
}

EXPORT int
riounmap(int socket, void *buf, size_t len)
{
    RS_REAL(int, riounmap, (int, void *, size_t));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, buf, len)), -1);
    return LOCKED(rs, rs_iounmap(rs, buf, len));
}

EXPORT size_t
riowrite(int socket, const void *buf, size_t count, off_t offset,
         int flags)
{
    RS_REAL(size_t, riowrite, (int, const void *, size_t, off_t, int));
    struct rsk *rs;
    RS_LOOKUP(rs, socket,
              CM_CALL(real_fn(fd_, buf, count, offset, flags)),
              (size_t)-1);
    if ((buf == NULL && count > 0) || offset < 0) {
        errno = buf == NULL ? EFAULT : EINVAL;
        return (size_t)-1;
    }
    return LOCKED(rs, rs_iowrite(rs, buf, count, offset, flags));
}

/* ------------------------------------------------------------------ */
/* options                                                             */

static int
opt_int(const void *v, socklen_t len, int *out)
{
    if (v == NULL) {
        errno = EFAULT;
        return -1;
    }
    if (len < sizeof(int)) {
        errno = EINVAL;
        return -1;
    }
    memcpy(out, v, sizeof(int));
    return 0;
}

/* A buffer or queue size: set before the connection (later: no
   effect, as the rings are made), clamped to what the fabric takes. */
static uint32_t
clamp(int v, uint32_t lo, uint32_t hi)
{
    return v < (int)lo ? lo : (uint32_t)v > hi ? hi : (uint32_t)v;
}

static int
set_socket_opt(struct rsk *rs, int name, const void *v, socklen_t len)
{
    int i;
    if (name == SO_LINGER) {
        if (v == NULL || len < sizeof(struct linger)) {
            errno = v == NULL ? EFAULT : EINVAL;
            return -1;
        }
        memcpy(&rs->linger, v, sizeof(rs->linger));
        return 0;
    }
    if (opt_int(v, len, &i) < 0)
        return -1;
    switch (name) {
    case SO_REUSEADDR: rs->reuse = !!i; return 0;
    case SO_KEEPALIVE: rs->keepalive = !!i; return 0;
    case SO_SNDBUF: rs->sbuf_size = clamp(i, 4096, 64u << 20); return 0;
    case SO_RCVBUF: rs->rbuf_size = clamp(i, 4096, 64u << 20); return 0;
    case SO_OOBINLINE: return 0;
    default: break;
    }
    errno = ENOPROTOOPT;
    return -1;
}

static int
set_rdma_opt(struct rsk *rs, int name, const void *v, socklen_t len)
{
    int i;
    if (name == RDMA_ROUTE)
        return v == NULL ? (errno = EFAULT, -1) : 0;  /* the fabric's */
    if (opt_int(v, len, &i) < 0)
        return -1;
    switch (name) {
    case RDMA_SQSIZE: rs->sq_size = clamp(i, 8, 4096); return 0;
    case RDMA_RQSIZE: rs->rq_size = clamp(i, 8, 4096); return 0;
    case RDMA_INLINE: rs->inline_size = clamp(i, 0, 1024); return 0;
    case RDMA_IOMAPSIZE: rs->iomap_size = clamp(i, 0, 1u << 20); return 0;
    default: break;
    }
    errno = ENOPROTOOPT;
    return -1;
}

static int
set_opt(struct rsk *rs, int level, int name, const void *v, socklen_t len)
{
    int i;
    if (level == SOL_SOCKET)
        return set_socket_opt(rs, name, v, len);
    if (level == SOL_RDMA)
        return set_rdma_opt(rs, name, v, len);
    if (level == IPPROTO_TCP) {
        if (opt_int(v, len, &i) < 0)
            return -1;
        if (name == TCP_NODELAY)
            rs->nodelay = !!i;
        else if (name == TCP_KEEPIDLE)
            rs->keepidle = i;
        else if (name != TCP_MAXSEG) {
            errno = ENOPROTOOPT;
            return -1;
        }
        return 0;
    }
    errno = ENOPROTOOPT;
    return -1;
}

EXPORT int
rsetsockopt(int socket, int level, int optname, const void *optval,
            socklen_t optlen)
{
    RS_REAL(int, rsetsockopt, (int, int, int, const void *, socklen_t));
    struct rsk *rs;
    RS_LOOKUP(rs, socket,
              CM_CALL(real_fn(fd_, level, optname, optval, optlen)), -1);
    return LOCKED(rs, set_opt(rs, level, optname, optval, optlen));
}

/* The value of an int-valued option, or -1 with errno. */
static int
get_int_opt(struct rsk *rs, int level, int name, int *out)
{
    int e;
    if (level == SOL_SOCKET) {
        switch (name) {
        case SO_ERROR:
            e = rs->err;
            rs->err = 0;
            *out = e;
            return 0;
        case SO_REUSEADDR: *out = rs->reuse; return 0;
        case SO_KEEPALIVE: *out = rs->keepalive; return 0;
        case SO_SNDBUF: *out = (int)rs->sbuf_size; return 0;
        case SO_RCVBUF: *out = (int)rs->rbuf_size; return 0;
        case SO_TYPE: *out = SOCK_STREAM; return 0;
        default: break;
        }
    }
    else if (level == IPPROTO_TCP && name == TCP_NODELAY) {
        *out = rs->nodelay;
        return 0;
    }
    else if (level == IPPROTO_TCP && name == TCP_KEEPIDLE) {
        *out = rs->keepidle;
        return 0;
    }
    else if (level == SOL_RDMA) {
        switch (name) {
        case RDMA_SQSIZE: *out = (int)rs->sq_size; return 0;
        case RDMA_RQSIZE: *out = (int)rs->rq_size; return 0;
        case RDMA_INLINE: *out = (int)rs->inline_size; return 0;
        case RDMA_IOMAPSIZE: *out = (int)rs->iomap_size; return 0;
        default: break;
        }
    }
    errno = ENOPROTOOPT;
    return -1;
}

static int
get_opt(struct rsk *rs, int level, int name, void *v, socklen_t *len)
{
    int i;
    if (v == NULL || len == NULL) {
        errno = EFAULT;
        return -1;
    }
    if (level == SOL_SOCKET && name == SO_LINGER) {
        if (*len < sizeof(struct linger)) {
            errno = EINVAL;
            return -1;
        }
        memcpy(v, &rs->linger, sizeof(rs->linger));
        *len = sizeof(struct linger);
        return 0;
    }
    if (*len < sizeof(int)) {
        errno = EINVAL;
        return -1;
    }
    if (level == SOL_SOCKET && name == SO_ERROR && rs->state != RS_FAILED)
        rs_progress(rs);
    if (get_int_opt(rs, level, name, &i) < 0)
        return -1;
    memcpy(v, &i, sizeof(i));
    *len = sizeof(int);
    return 0;
}

EXPORT int
rgetsockopt(int socket, int level, int optname, void *optval,
            socklen_t *optlen)
{
    RS_REAL(int, rgetsockopt, (int, int, int, void *, socklen_t *));
    struct rsk *rs;
    RS_LOOKUP(rs, socket,
              CM_CALL(real_fn(fd_, level, optname, optval, optlen)), -1);
    return LOCKED(rs, get_opt(rs, level, optname, optval, optlen));
}

EXPORT int
rfcntl(int socket, int cmd, ... /* arg */)
{
    RS_REAL(int, rfcntl, (int, int, ...));
    struct rsk *rs;
    va_list ap;
    long arg;

    va_start(ap, cmd);
    arg = va_arg(ap, long);
    va_end(ap);
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, cmd, arg)), -1);
    if (cmd == F_GETFL)
        return O_RDWR | (rs->nonblock ? O_NONBLOCK : 0);
    if (cmd == F_SETFL) {
        pthread_mutex_lock(&rs->lock);
        rs->nonblock = !!(arg & O_NONBLOCK);
        pthread_mutex_unlock(&rs->lock);
        return 0;
    }
    errno = EINVAL;
    return -1;
}

/* ------------------------------------------------------------------ */
/* names                                                               */

static int
name_of(struct rsk *rs, int peer, struct sockaddr *addr, socklen_t *len)
{
    const struct sockaddr *a;
    socklen_t n;
    if (addr == NULL || len == NULL) {
        errno = EFAULT;
        return -1;
    }
    if (peer && rs->state != RS_CONNECTED && rs->state != RS_ACCEPTING) {
        errno = ENOTCONN;
        return -1;
    }
    a = peer ? rdma_get_peer_addr(rs->id) : rdma_get_local_addr(rs->id);
    n = a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
        : a->sa_family == AF_IB ? sizeof(struct sockaddr_ib)
        : sizeof(struct sockaddr_in);
    memcpy(addr, a, *len < n ? *len : n);
    *len = n;
    return 0;
}

EXPORT int
rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_REAL(int, rgetpeername, (int, struct sockaddr *, socklen_t *));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, addr, addrlen)), -1);
    return LOCKED(rs, name_of(rs, 1, addr, addrlen));
}

EXPORT int
rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_REAL(int, rgetsockname, (int, struct sockaddr *, socklen_t *));
    struct rsk *rs;
    RS_LOOKUP(rs, socket, CM_CALL(real_fn(fd_, addr, addrlen)), -1);
    return LOCKED(rs, name_of(rs, 0, addr, addrlen));
}
