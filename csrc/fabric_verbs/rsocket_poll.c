/* rsocket_poll.c - rpoll and rselect over ucx0's rsockets and plain
   descriptors mixed: an rsocket's state decides its events; to sleep,
   its CQ is armed and its own descriptor (an epoll fd over its CM event
   channel and CQ channel) is polled beside the plain ones. */
#include "rsocket.h"

#include <time.h>

/* rs's events now (after taking what arrived), as poll() gives them. */
short
rs_revents(struct rsk *rs, short events)
{
    short r = 0;
    if (rs->state == RS_LISTEN)
        return rs_pending_request(rs) ? (events & POLLIN) : 0;
    rs_progress(rs);
    if (rs->state == RS_FAILED)
        return (short)(POLLERR | POLLHUP | (events & (POLLIN | POLLOUT)));
    if (rs->state != RS_CONNECTED)
        return 0;
    if (rs->rx_tail != rs->rx_head || rs->fin_rcvd || rs->rd_shut ||
        rs->hup || rs->broken)
        r |= POLLIN;
    if (rs_can_send(rs) || rs->broken || rs->hup || rs->wr_shut)
        r |= POLLOUT;
    if (rs->hup || (rs->fin_rcvd && rs->wr_shut))
        r |= POLLHUP;
    if (rs->broken)
        r |= POLLERR;
    return (short)(r & (events | POLLHUP | POLLERR));
}

static long
ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000L +
           (t.tv_nsec - t0->tv_nsec) / 1000000L;
}

/* Our sockets' events into fds (rs[i] set for ours): how many have
   some. */
static int
ours_ready(struct pollfd *fds, struct rsk **rs, nfds_t n)
{
    nfds_t i;
    int ready = 0;
    for (i = 0; i < n; i++) {
        if (rs[i] == NULL)
            continue;
        pthread_mutex_lock(&rs[i]->lock);
        fds[i].revents = rs_revents(rs[i], fds[i].events);
        pthread_mutex_unlock(&rs[i]->lock);
        ready += fds[i].revents != 0;
    }
    return ready;
}

/* Arm every socket of ours: 1 if one had something meanwhile. */
static int
arm_all(struct rsk **rs, nfds_t n)
{
    nfds_t i;
    int busy = 0;
    for (i = 0; i < n; i++) {
        if (rs[i] == NULL)
            continue;
        pthread_mutex_lock(&rs[i]->lock);
        busy |= rs_arm(rs[i]);
        pthread_mutex_unlock(&rs[i]->lock);
    }
    return busy;
}

/* Poll p (ours: their own descriptors) for at most timeout ms; the plain
   descriptors' results into fds: how many of them have events, or -1. */
static int
sleep_poll(struct pollfd *fds, struct pollfd *p, struct rsk **rs,
           nfds_t n, int timeout)
{
    nfds_t i;
    int r, plain = 0;
    for (i = 0; i < n; i++) {
        p[i] = fds[i];
        if (rs[i] != NULL) {
            p[i].fd = rs[i]->fd;
            p[i].events = POLLIN;
        }
    }
    r = poll(p, n, timeout);
    if (r < 0)
        return -1;
    for (i = 0; i < n; i++)
        if (rs[i] == NULL) {
            fds[i].revents = p[i].revents;
            plain += p[i].revents != 0;
        }
    return plain;
}

static int
poll_loop(struct pollfd *fds, struct pollfd *p, struct rsk **rs, nfds_t n,
          int timeout)
{
    struct timespec t0;
    int ready, plain;
    long left = timeout;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ready = ours_ready(fds, rs, n);
        if (ready > 0 || left == 0) {
            plain = sleep_poll(fds, p, rs, n, 0);
            if (plain < 0)
                return -1;
            return ready + plain;
        }
        if (arm_all(rs, n))
            continue;
        plain = sleep_poll(fds, p, rs, n, (int)left);
        if (plain < 0)
            return -1;
        ready = ours_ready(fds, rs, n);
        if (ready + plain > 0)
            return ready + plain;
        if (timeout >= 0) {
            left = timeout - ms_since(&t0);
            if (left < 0)
                left = 0;
        }
    }
}

/* Every rsocket among fds the real librdmacm's: its rpoll over them. */
static int
real_poll(struct pollfd *fds, struct rsk **rs, nfds_t n, int timeout)
{
    RS_REAL(int, rpoll, (struct pollfd *, nfds_t, int));
    nfds_t i;
    int r;
    if (real_fn == NULL) {
        errno = ENOSYS;
        return -1;
    }
    for (i = 0; i < n; i++)
        if (rs[i] != NULL)
            fds[i].fd = rs[i]->real_fd;
    r = CM_CALL(real_fn(fds, n, timeout));
    for (i = 0; i < n; i++)
        if (rs[i] != NULL)
            fds[i].fd = rs[i]->fd;
    return r;
}

EXPORT int
rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    struct rsk **rs;
    struct pollfd *p;
    nfds_t i;
    int r, real = 0, ours = 0;

    if (fds == NULL && nfds > 0) {
        errno = EFAULT;
        return -1;
    }
    rs = calloc(nfds + 1, sizeof(*rs));
    p = calloc(nfds + 1, sizeof(*p));
    if (rs == NULL || p == NULL) {
        free(rs);
        free(p);
        errno = ENOMEM;
        return -1;
    }
    for (i = 0; i < nfds; i++) {
        fds[i].revents = 0;
        rs[i] = rs_get(fds[i].fd);
        if (rs[i] != NULL && rs[i]->real_fd >= 0)
            real++;
        else if (rs[i] != NULL)
            ours++;
    }
    if (real > 0 && ours == 0)
        r = real_poll(fds, rs, nfds, timeout);
    else if (real > 0) {
        errno = EOPNOTSUPP;     /* ucx0's and the kernel's in one call */
        r = -1;
    }
    else
        r = poll_loop(fds, p, rs, nfds, timeout);
    free(rs);
    free(p);
    return r;
}

static void
sets_to_poll(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
             struct pollfd *p, nfds_t *n)
{
    int fd;
    *n = 0;
    for (fd = 0; fd < nfds; fd++) {
        short ev = 0;
        if (rd && FD_ISSET(fd, rd))
            ev |= POLLIN;
        if (wr && FD_ISSET(fd, wr))
            ev |= POLLOUT;
        if (ex && FD_ISSET(fd, ex))
            ev |= POLLPRI;
        if (ev) {
            p[*n].fd = fd;
            p[*n].events = ev;
            (*n)++;
        }
    }
}

static int
poll_to_sets(const struct pollfd *p, nfds_t n, fd_set *rd, fd_set *wr,
             fd_set *ex)
{
    nfds_t i;
    int count = 0;
    if (rd)
        FD_ZERO(rd);
    if (wr)
        FD_ZERO(wr);
    if (ex)
        FD_ZERO(ex);
    for (i = 0; i < n; i++) {
        short r = p[i].revents;
        if (rd && (p[i].events & POLLIN) && (r & (POLLIN | POLLHUP |
                                                  POLLERR))) {
            FD_SET(p[i].fd, rd);
            count++;
        }
        if (wr && (p[i].events & POLLOUT) && (r & (POLLOUT | POLLERR))) {
            FD_SET(p[i].fd, wr);
            count++;
        }
        if (ex && (p[i].events & POLLPRI) && (r & POLLPRI)) {
            FD_SET(p[i].fd, ex);
            count++;
        }
    }
    return count;
}

EXPORT int
rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
        struct timeval *timeout)
{
    struct pollfd *p;
    nfds_t n;
    int r, ms = -1;

    if (nfds < 0 || nfds > FD_SETSIZE) {
        errno = EINVAL;
        return -1;
    }
    if (timeout != NULL) {
        if (timeout->tv_sec < 0 || timeout->tv_usec < 0) {
            errno = EINVAL;
            return -1;
        }
        ms = (int)(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000);
    }
    p = calloc((size_t)nfds + 1, sizeof(*p));
    if (p == NULL) {
        errno = ENOMEM;
        return -1;
    }
    sets_to_poll(nfds, readfds, writefds, exceptfds, p, &n);
    r = rpoll(p, n, ms);
    if (r >= 0)
        r = poll_to_sets(p, n, readfds, writefds, exceptfds);
    free(p);
    return r;
}
