/* link.c - the shim's two datagram sockets to the ibsim server and its control requests. */
#define _GNU_SOURCE
#include "umad2sim.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* How long a control request may wait for its answer (the server is
 * single-threaded and may be busy with a slow client for a while). */
#define CTL_ANSWER_MS 30000

/* Fill *a with the abstract-namespace address "<base>:<what><num>" (num
 * < 0: none); return its length.  ibsim's names end with a NUL byte that
 * is part of the address (its length counts it). */
static socklen_t sim_address(struct sockaddr_un *a, const char *what, long num)
{
    int n;

    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if (num >= 0)
        n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "%s:%s%ld",
                     sim.base, what, num);
    else
        n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "%s:%s",
                     sim.base, what);
    if (n < 0 || (size_t)n >= sizeof(a->sun_path) - 1)
        n = (int)sizeof(a->sun_path) - 3;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 2 + n);
}

/* A datagram socket bound to "<base>:<what><pid>"; -1 on error. */
static int bound_socket(const char *what)
{
    struct sockaddr_un a;
    socklen_t len = sim_address(&a, what, (long)getpid());
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, len) < 0) {
        shim_log("cannot bind %s%d: %s", what, (int)getpid(),
                 strerror(errno));
        libc_close(fd);
        return -1;
    }
    return fd;
}

/* Connect fd to the server's control socket, waiting up to
 * $UMAD2SIM_WAIT seconds (default 30) for the server to appear.
 * Return 0 or -1. */
static int reach_server(int fd)
{
    struct sockaddr_un a;
    socklen_t len = sim_address(&a, "ctl", -1);
    const char *w = getenv("UMAD2SIM_WAIT");
    double wait_s = w && *w ? atof(w) : 30.0;
    uint64_t until = now_ns() + (uint64_t)(wait_s * 1e9);
    struct timespec pause = {0, 100 * 1000 * 1000};

    for (;;) {
        if (connect(fd, (struct sockaddr *)&a, len) == 0)
            return 0;
        if ((errno != ECONNREFUSED && errno != ENOENT) || now_ns() >= until)
            break;
        nanosleep(&pause, NULL);
    }
    shim_log("no ibsim server at @%s:ctl (%s); is ibsim running with the "
             "same IBSIM_SOCKNAME?", sim.base, strerror(errno));
    return -1;
}

/* Send one control request and wait for its answer; data (len bytes) is
 * sent and replaced by the answer's.  Return 0, or -1 with errno. */
int link_ctl(uint32_t op, void *data, size_t len)
{
    struct sim_ctl_msg m;
    struct pollfd pfd;
    ssize_t n;
    int rc = -1;

    if (len > SIM_CTL_DATA) {
        errno = EINVAL;
        return -1;
    }
    memset(&m, 0, sizeof(m));
    m.magic = SIM_CTL_MAGIC;
    m.client = sim.client;
    m.op = op;
    m.len = (uint32_t)len;
    if (len)
        memcpy(m.data, data, len);
    pthread_mutex_lock(&sim.ctl_lock);
    pfd.fd = sim.ctl_fd;
    pfd.events = POLLIN;
    if (send(sim.ctl_fd, &m, sizeof(m), 0) != (ssize_t)sizeof(m))
        goto out;
    if (poll(&pfd, 1, CTL_ANSWER_MS) != 1) {
        errno = ETIMEDOUT;
        goto out;
    }
    n = recv(sim.ctl_fd, &m, sizeof(m), 0);
    if (n != (ssize_t)sizeof(m)) {
        errno = EPROTO;
        goto out;
    }
    if (m.op == SIM_OP_ERROR) {
        errno = EREMOTEIO;
        goto out;
    }
    if (len)
        memcpy(data, m.data, len);
    rc = 0;
out:
    pthread_mutex_unlock(&sim.ctl_lock);
    return rc;
}

/* CONNECT as $SIM_HOST (SM-capable when $SIM_SET_ISSM is set), then
 * connect the data socket to the server's socket for our client id. */
static int attach(void)
{
    struct sim_hello h;
    struct sockaddr_un a;
    socklen_t len;
    const char *host = getenv("SIM_HOST");

    memset(&h, 0, sizeof(h));
    h.id = (uint32_t)getpid();
    h.issm = getenv("SIM_SET_ISSM") != NULL;
    if (host)
        snprintf(h.node, sizeof(h.node), "%s", host);
    if (link_ctl(SIM_OP_CONNECT, &h, sizeof(h)) < 0) {
        int err = errno;

        if (err == ETIMEDOUT)
            shim_log("ibsim did not answer our CONNECT");
        else
            shim_log("ibsim refused us as a client on node \"%s\" "
                     "(unknown node, all client slots taken, or an SM "
                     "there already)", host ? host : "(default)");
        errno = err;
        return -1;
    }
    sim.client = h.id;
    memcpy(sim.node, h.node, sizeof(h.node));
    sim.node[sizeof(sim.node) - 1] = 0;
    len = sim_address(&a, "out", (long)sim.client);
    if (connect(sim.data_fd, (struct sockaddr *)&a, len) < 0) {
        shim_log("cannot reach ibsim's data socket for client %u: %s",
                 sim.client, strerror(errno));
        return -1;
    }
    SIM_LOG("attached as ibsim client %u on node \"%s\"", sim.client,
            sim.node);
    return 0;
}

/* Read what the sysfs tree shows: vendor, NodeInfo, PortInfo, P_Keys. */
static int query_node(void)
{
    memset(sim.portinfo, 0, sizeof(sim.portinfo));  /* port 0: ours */
    if (link_ctl(SIM_OP_GET_VENDOR, &sim.vendor, sizeof(sim.vendor)) < 0 ||
        link_ctl(SIM_OP_GET_NODEINFO, sim.nodeinfo,
                 sizeof(sim.nodeinfo)) < 0 ||
        link_ctl(SIM_OP_GET_PORTINFO, sim.portinfo,
                 sizeof(sim.portinfo)) < 0 ||
        link_ctl(SIM_OP_GET_PKEYS, sim.pkeys, sizeof(sim.pkeys)) < 0) {
        shim_log("ibsim did not describe our node: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Open both sockets, attach to the server and read our node.  Return 0,
 * or -1 (the sockets closed again, except when CONNECT got no answer:
 * the server may still take it and then connects to our data socket,
 * and ibsim exits if that socket is gone). */
int link_open(void)
{
    const char *base = getenv("IBSIM_SOCKNAME");

    snprintf(sim.base, sizeof(sim.base), "%s",
             base && *base ? base : SIM_DEFAULT_BASE);
    sim.ctl_fd = bound_socket("ctl");
    sim.data_fd = bound_socket("in");
    if (sim.ctl_fd < 0 || sim.data_fd < 0 || reach_server(sim.ctl_fd) < 0)
        goto fail;
    if (attach() < 0) {
        if (errno == ETIMEDOUT)
            return -1;
        goto fail;
    }
    if (query_node() < 0) {
        link_ctl(SIM_OP_DISCONNECT, NULL, 0);
        goto fail;
    }
    return 0;
fail:
    if (sim.ctl_fd >= 0)
        libc_close(sim.ctl_fd);
    if (sim.data_fd >= 0)
        libc_close(sim.data_fd);
    sim.ctl_fd = sim.data_fd = -1;
    return -1;
}

/* Send one MAD (nowait: fail with EAGAIN rather than wait for room);
 * return 0 or -1 with errno. */
int link_send(const struct sim_packet *pkt, int nowait)
{
    ssize_t n;

    do
        n = send(sim.data_fd, pkt, sizeof(*pkt), nowait ? MSG_DONTWAIT : 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(*pkt)) {
        SIM_LOG("send to ibsim failed: %s", strerror(errno));
        if (n >= 0)
            errno = EIO;
        return -1;
    }
    return 0;
}

/* Give our client slot back to the server (at exit). */
void link_close(void)
{
    if (sim.ctl_fd >= 0)
        link_ctl(SIM_OP_DISCONNECT, NULL, 0);
}
