/* c_rsocket_probe.c - rsockets' error paths and socket semantics on ucx0,
   run under `python -m rdma.fabric exec` by tests/host/test_c_rsocket.py.

   usage: c_rsocket_probe MODE PORT
     refused     rconnect to a port nobody listens on, blocking and
                 non-blocking (SO_ERROR)
     inuse       two listeners on one port: EADDRINUSE
     badinput    bad descriptors, options, addresses, unconnected calls
     server      accept one connection per client scenario below
     peerclose   (client) the server closes: read 0, then write fails
                 with ECONNRESET or EPIPE and no SIGPIPE
     halfclose   (client) SHUT_WR: the server reads everything then 0,
                 answers, and our write fails with EPIPE
     inflight    (client) 4 MiB sent and rclose at once: all of it arrives
     nonblock    (client) O_NONBLOCK connect (EINPROGRESS, POLLOUT), EAGAIN,
                 rpoll and rselect with a pipe mixed in, the names
   Each line printed is "name: result"; the exit status is 0 unless a step
   could not run at all. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static int port;

static void
sigpipe(int s)
{
    (void)s;
    printf("SIGPIPE\n");
    fflush(stdout);
    _exit(3);
}

static struct sockaddr_in
addr(void)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static const char *
en(int e)
{
    static char b[32];
    switch (e) {
    case 0: return "0";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EADDRINUSE: return "EADDRINUSE";
    case EPIPE: return "EPIPE";
    case ECONNRESET: return "ECONNRESET";
    case EAGAIN: return "EAGAIN";
    case EINPROGRESS: return "EINPROGRESS";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case ENOTCONN: return "ENOTCONN";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EISCONN: return "EISCONN";
    default: snprintf(b, sizeof(b), "errno%d", e); return b;
    }
}

static int
connected(int nonblock)
{
    struct sockaddr_in a = addr();
    int fd = rsocket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (nonblock)
        rfcntl(fd, F_SETFL, O_NONBLOCK);
    if (rconnect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && !nonblock) {
        printf("connect: %s\n", en(errno));
        rclose(fd);
        return -1;
    }
    return fd;
}

static void
refused(void)
{
    struct sockaddr_in a = addr();
    struct pollfd p;
    socklen_t l = sizeof(int);
    int fd = rsocket(AF_INET, SOCK_STREAM, 0), r, e = 0;
    r = rconnect(fd, (struct sockaddr *)&a, sizeof(a));
    printf("blocking connect: %d %s\n", r, en(r < 0 ? errno : 0));
    rclose(fd);
    fd = rsocket(AF_INET, SOCK_STREAM, 0);
    rfcntl(fd, F_SETFL, O_NONBLOCK);
    r = rconnect(fd, (struct sockaddr *)&a, sizeof(a));
    printf("nonblocking connect: %s\n", en(r < 0 ? errno : 0));
    p.fd = fd;
    p.events = POLLOUT;
    r = rpoll(&p, 1, 10000);
    printf("poll: %d%s%s\n", r, p.revents & POLLOUT ? " POLLOUT" : "",
           p.revents & POLLERR ? " POLLERR" : "");
    rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
    printf("SO_ERROR: %s\n", en(e));
    rclose(fd);
}

static void
inuse(void)
{
    struct sockaddr_in a = addr();
    int one = 1, f1 = rsocket(AF_INET, SOCK_STREAM, 0);
    int f2 = rsocket(AF_INET, SOCK_STREAM, 0), r;
    rsetsockopt(f1, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    r = rbind(f1, (struct sockaddr *)&a, sizeof(a));
    if (r == 0)
        r = rlisten(f1, 4);
    printf("first: %s\n", en(r < 0 ? errno : 0));
    r = rbind(f2, (struct sockaddr *)&a, sizeof(a));
    if (r == 0)
        r = rlisten(f2, 4);
    printf("second: %s\n", en(r < 0 ? errno : 0));
    rclose(f2);
    rclose(f1);
}

static void
badinput(void)
{
    struct sockaddr_in a = addr();
    int fd = rsocket(AF_INET, SOCK_STREAM, 0), v = 1, r;
    char c;
    socklen_t l = 4;
    r = (int)rsend(fd, "x", 1, 0);
    printf("send unconnected: %s\n", en(r < 0 ? errno : 0));
    r = (int)rrecv(fd, &c, 1, 0);
    printf("recv unconnected: %s\n", en(r < 0 ? errno : 0));
    r = rshutdown(fd, SHUT_WR);
    printf("shutdown unconnected: %s\n", en(r < 0 ? errno : 0));
    r = rconnect(fd, NULL, sizeof(a));
    printf("connect NULL: %s\n", en(r < 0 ? errno : 0));
    r = rbind(fd, (struct sockaddr *)&a, 3);
    printf("bind short: %s\n", en(r < 0 ? errno : 0));
    r = rsetsockopt(fd, SOL_SOCKET, SO_BROADCAST, &v, sizeof(v));
    printf("setsockopt unknown: %s\n", en(r < 0 ? errno : 0));
    r = rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, 1);
    printf("setsockopt short: %s\n", en(r < 0 ? errno : 0));
    r = rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &l);
    printf("getsockopt rcvbuf: %s\n", en(r < 0 ? errno : 0));
    r = rgetpeername(fd, (struct sockaddr *)&a, &l);
    printf("getpeername unconnected: %s\n", en(r < 0 ? errno : 0));
    rfcntl(fd, F_SETFL, O_NONBLOCK);
    printf("fcntl: %s\n", rfcntl(fd, F_GETFL) & O_NONBLOCK ? "O_NONBLOCK"
                                                            : "blocking");
    rclose(fd);
}

/* The server: a connection per client scenario, chosen by its first
   byte. */
static void
serve_one(int fd)
{
    static char buf[1 << 16];
    long total = 0, bad = 0;
    ssize_t n;
    char op;
    if (rrecv(fd, &op, 1, MSG_WAITALL) != 1)
        return;
    if (op == 'p') {        /* peerclose: read 10 bytes, close */
        n = rrecv(fd, buf, 10, MSG_WAITALL);
        printf("server peerclose read %zd\n", n);
        return;
    }
    while ((n = rrecv(fd, buf, sizeof(buf), 0)) > 0) {
        ssize_t i;
        for (i = 0; i < n; i++)
            bad += (unsigned char)buf[i] != (unsigned char)((total + i) % 251);
        total += n;
    }
    printf("server %c read %ld bad %ld end %zd\n", op, total, bad, n);
    if (op == 'h')
        rsend(fd, "done!", 5, 0);
}

static void
server(void)
{
    struct sockaddr_in a = addr();
    int one = 1, l = rsocket(AF_INET, SOCK_STREAM, 0), i;
    rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (rbind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || rlisten(l, 4) < 0) {
        printf("listen: %s\n", en(errno));
        exit(1);
    }
    printf("listening\n");
    fflush(stdout);
    for (i = 0;; i++) {
        int fd = raccept(l, NULL, NULL);
        if (fd < 0) {
            printf("accept: %s\n", en(errno));
            exit(1);
        }
        serve_one(fd);
        fflush(stdout);
        rclose(fd);
    }
    rclose(l);
}

static void
pattern(char *b, long n, long from)
{
    long i;
    for (i = 0; i < n; i++)
        b[i] = (char)((from + i) % 251);
}

static void
peerclose(void)
{
    int fd = connected(0), i;
    ssize_t r;
    char c;
    if (fd < 0)
        exit(1);
    rsend(fd, "p0123456789", 11, 0);
    r = rrecv(fd, &c, 1, 0);
    printf("read after peer close: %zd\n", r);
    for (i = 0; i < 500; i++) {
        r = rsend(fd, "x", 1, 0);
        if (r < 0)
            break;
        usleep(10000);
    }
    printf("write after peer close: %s\n", en(r < 0 ? errno : 0));
    rclose(fd);
}

static void
halfclose(void)
{
    static char b[100000];
    char got[6] = { 0 };
    int fd = connected(0);
    ssize_t r;
    if (fd < 0)
        exit(1);
    rsend(fd, "h", 1, 0);
    pattern(b, sizeof(b), 0);
    r = rsend(fd, b, sizeof(b), 0);
    printf("sent %zd\n", r);
    rshutdown(fd, SHUT_WR);
    r = rsend(fd, "x", 1, 0);
    printf("write after shutdown: %s\n", en(r < 0 ? errno : 0));
    r = rrecv(fd, got, 5, MSG_WAITALL);
    printf("answer: %zd %s\n", r, got);
    r = rrecv(fd, got, 1, 0);
    printf("then: %zd\n", r);
    rclose(fd);
}

static void
inflight(void)
{
    static char b[4 << 20];
    int fd = connected(0);
    ssize_t r;
    if (fd < 0)
        exit(1);
    rsend(fd, "i", 1, 0);
    pattern(b, sizeof(b), 0);
    r = rsend(fd, b, sizeof(b), 0);
    printf("sent %zd\n", r);
    rclose(fd);
}

static void
names(int fd)
{
    struct sockaddr_in me, peer;
    socklen_t l1 = sizeof(me), l2 = sizeof(peer);
    rgetsockname(fd, (struct sockaddr *)&me, &l1);
    rgetpeername(fd, (struct sockaddr *)&peer, &l2);
    printf("peer port ok: %d\n", ntohs(peer.sin_port) == port &&
                                 peer.sin_addr.s_addr ==
                                     htonl(INADDR_LOOPBACK));
    printf("local family ok: %d\n", me.sin_family == AF_INET);
}

static void
nonblock(void)
{
    struct pollfd p[2];
    fd_set rd, wr;
    struct timeval tv = { 5, 0 };
    int pipefd[2], fd = connected(1), e = -1, r;
    socklen_t l = sizeof(e);
    char c;

    if (fd < 0 || pipe(pipefd) < 0)
        exit(1);
    printf("connect: %s\n", en(errno));
    p[0].fd = fd;
    p[0].events = POLLOUT;
    r = rpoll(p, 1, 10000);
    printf("poll connect: %d%s\n", r, p[0].revents & POLLOUT ? " POLLOUT"
                                                               : "");
    rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
    printf("SO_ERROR: %s\n", en(e));
    r = (int)rrecv(fd, &c, 1, 0);
    printf("recv nothing: %s\n", en(r < 0 ? errno : 0));
    if (write(pipefd[1], "z", 1) != 1)
        exit(1);
    p[0].events = POLLIN;
    p[1].fd = pipefd[0];
    p[1].events = POLLIN;
    r = rpoll(p, 2, 5000);
    printf("poll mixed: %d rsocket %s pipe %s\n", r,
           p[0].revents ? "ready" : "idle",
           p[1].revents & POLLIN ? "POLLIN" : "idle");
    FD_ZERO(&rd);
    FD_ZERO(&wr);
    FD_SET(pipefd[0], &rd);
    FD_SET(fd, &wr);
    r = rselect((fd > pipefd[0] ? fd : pipefd[0]) + 1, &rd, &wr, NULL, &tv);
    printf("select: %d pipe %d rsocket-writable %d\n", r,
           FD_ISSET(pipefd[0], &rd), FD_ISSET(fd, &wr));
    r = rconnect(fd, NULL, 0);
    names(fd);
    rsend(fd, "i", 1, 0);
    rclose(fd);
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODE PORT\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, sigpipe);
    setvbuf(stdout, NULL, _IOLBF, 0);
    port = atoi(argv[2]);
    if (!strcmp(argv[1], "refused"))
        refused();
    else if (!strcmp(argv[1], "inuse"))
        inuse();
    else if (!strcmp(argv[1], "badinput"))
        badinput();
    else if (!strcmp(argv[1], "server"))
        server();
    else if (!strcmp(argv[1], "peerclose"))
        peerclose();
    else if (!strcmp(argv[1], "halfclose"))
        halfclose();
    else if (!strcmp(argv[1], "inflight"))
        inflight();
    else if (!strcmp(argv[1], "nonblock"))
        nonblock();
    else
        return 2;
    printf("alive\n");
    return 0;
}
