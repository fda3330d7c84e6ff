/* c_cm_probe.c - a librdmacm program for tests/host/test_c_cm.py: it
   drives the connection manager through librdmacm's API (on ucx0 through
   the front end) and prints each event and error as one line:

     EVENT <name> status=<n> pdata_len=<n> pdata=<text up to a NUL>
     ERR <call> <errno>
     OK <call>

   Modes:
     server PORT accept|reject|hold   listen; answer each CONNECT_REQUEST
                                     (accept with "welcome", reject with
                                     "nope", or never); print events
     client ADDR PORT [hold|nodisc]  connect with "hello" (no QP: the
                                     CONNECT_RESPONSE is shown, then
                                     rdma_establish), disconnect, print
                                     events until TIMEWAIT_EXIT; hold:
                                     sleep after CONNECT_RESPONSE; nodisc:
                                     stay connected, print events
     resolve ADDR                    resolve ADDR, print the event
     bind PORT [PORT]                bind (and listen on) each PORT
     limits ADDR PORT                connect/accept/reject with private
                                     data over the limits (needs a server)
     mcast GROUP                     join and leave multicast GROUP on a
                                     UD ID bound to 127.0.0.1 with a QP,
                                     after the calls that must fail; print
                                     the JOIN's address (MCAST line)
     held ADDR [migrate]             resolve ADDR, keep ADDR_RESOLVED
                                     unacknowledged, destroy the ID (or
                                     migrate it to a new channel) while
                                     another thread acknowledges it 300
                                     ms later: DESTROY (MIGRATE)
                                     after-ack|before-ack
     reqdestroy PORT                 listen on PORT and connect to it on
                                     one channel; on CONNECT_REQUEST reject
                                     and destroy its new ID before the
                                     acknowledgement (OK reqdestroy: it
                                     must not wait: the request counts
                                     against the listener)
     options                         rdma_set_option's errors and effects:
                                     OPT <what> <errno, 0 if accepted>,
                                     then TCLASS <n> (the route's
                                     traffic class after RDMA_OPTION_IB_PATH
                                     resolved it, TOS 0x28 set)
     addrinfo                        rdma_getaddrinfo with no arguments,
                                     with the addresses in the hints only,
                                     and with a node and a hinted source;
                                     print each result (AI lines)
   Every wait is bounded (10 s); stdout is line-buffered. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;

static void
say_err(const char *call)
{
    printf("ERR %s %d\n", call, errno);
}

static void
say_event(const struct rdma_cm_event *e)
{
    const struct rdma_conn_param *c = &e->param.conn;
    char text[64];
    size_t n = c->private_data_len < sizeof(text) - 1
               ? c->private_data_len : sizeof(text) - 1;
    memset(text, 0, sizeof(text));
    if (c->private_data != NULL)
        memcpy(text, c->private_data, n);
    printf("EVENT %s status=%d pdata_len=%d pdata=%s\n",
           rdma_event_str(e->event), e->status, c->private_data_len, text);
}

/* The next event (waiting at most 10 s), printed; NULL on timeout. */
static struct rdma_cm_event *
next_event(void)
{
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    struct rdma_cm_event *e;
    if (poll(&p, 1, 10000) != 1) {
        printf("TIMEOUT\n");
        return NULL;
    }
    if (rdma_get_cm_event(ch, &e) != 0) {
        say_err("rdma_get_cm_event");
        return NULL;
    }
    say_event(e);
    return e;
}

static void
addr_of(struct sockaddr_in *sin, const char *ip, const char *port)
{
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)atoi(port));
    if (ip != NULL)
        inet_pton(AF_INET, ip, &sin->sin_addr);
}

static int
answer(struct rdma_cm_id *id, const char *mode)
{
    struct rdma_conn_param p;
    memset(&p, 0, sizeof(p));
    if (strcmp(mode, "reject") == 0)
        return rdma_reject(id, "nope", 5) ? (say_err("rdma_reject"), 1) : 0;
    if (strcmp(mode, "hold") == 0)
        return 0;
    if (strcmp(mode, "limits") == 0) {
        static char big[256];
        p.private_data = big;
        p.private_data_len = 197;
        if (rdma_accept(id, &p) != 0)
            say_err("rdma_accept");
        if (rdma_reject(id, big, 149) != 0)
            say_err("rdma_reject");
    }
    p.private_data = "welcome";
    p.private_data_len = 8;
    p.responder_resources = p.initiator_depth = 1;
    return rdma_accept(id, &p) ? (say_err("rdma_accept"), 1) : 0;
}

static int
server(const char *port, const char *mode)
{
    struct rdma_cm_id *l;
    struct sockaddr_in sin;
    struct rdma_cm_event *e;
    int done = 0;

    addr_of(&sin, NULL, port);
    if (rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) != 0)
        return say_err("rdma_create_id"), 1;
    if (rdma_bind_addr(l, (struct sockaddr *)&sin) != 0)
        return say_err("rdma_bind_addr"), 1;
    if (rdma_listen(l, 4) != 0)
        return say_err("rdma_listen"), 1;
    printf("LISTENING guid=%016llx\n", (unsigned long long)
           be64toh(l->route.addr.addr.ibaddr.sgid.global.interface_id));
    while (!done && (e = next_event()) != NULL) {
        enum rdma_cm_event_type t = e->event;
        struct rdma_cm_id *id = e->id;
        rdma_ack_cm_event(e);
        if (t == RDMA_CM_EVENT_CONNECT_REQUEST && answer(id, mode))
            return 1;
        if (t == RDMA_CM_EVENT_DISCONNECTED && rdma_disconnect(id) != 0)
            say_err("rdma_disconnect");
        done = (t == RDMA_CM_EVENT_CONNECT_REQUEST &&
                strcmp(mode, "reject") == 0) ||
               t == RDMA_CM_EVENT_TIMEWAIT_EXIT ||
               t == RDMA_CM_EVENT_UNREACHABLE ||
               (t == RDMA_CM_EVENT_REJECTED);
    }
    return 0;
}

/* Wait for an event of type want (printing all); 0 if it came. */
static int
expect(enum rdma_cm_event_type want)
{
    struct rdma_cm_event *e = next_event();
    enum rdma_cm_event_type t;
    if (e == NULL)
        return -1;
    t = e->event;
    rdma_ack_cm_event(e);
    return t == want ? 0 : -1;
}

static int
client_connect(struct rdma_cm_id **out, const char *ip, const char *port,
               const void *pdata, int len)
{
    struct rdma_conn_param p;
    struct sockaddr_in dst;
    addr_of(&dst, ip, port);
    if (rdma_create_id(ch, out, NULL, RDMA_PS_TCP) != 0)
        return say_err("rdma_create_id"), -1;
    if (rdma_resolve_addr(*out, NULL, (struct sockaddr *)&dst, 2000) != 0)
        return say_err("rdma_resolve_addr"), -1;
    if (expect(RDMA_CM_EVENT_ADDR_RESOLVED) != 0)
        return -1;
    if (rdma_resolve_route(*out, 2000) != 0)
        return say_err("rdma_resolve_route"), -1;
    if (expect(RDMA_CM_EVENT_ROUTE_RESOLVED) != 0)
        return -1;
    memset(&p, 0, sizeof(p));
    p.private_data = pdata;
    p.private_data_len = (uint8_t)len;
    p.responder_resources = p.initiator_depth = 1;
    p.retry_count = 7;
    if (rdma_connect(*out, &p) != 0)
        return say_err("rdma_connect"), -2;
    return 0;
}

static int
client(const char *ip, const char *port, const char *mode)
{
    struct rdma_cm_id *id;
    if (client_connect(&id, ip, port, "hello", 6) != 0)
        return 1;
    if (expect(RDMA_CM_EVENT_CONNECT_RESPONSE) != 0)
        return 0;
    if (strcmp(mode, "hold") == 0) {
        printf("HOLDING\n");
        pause();
    }
    if (rdma_establish(id) != 0)
        return say_err("rdma_establish"), 1;
    if (expect(RDMA_CM_EVENT_ESTABLISHED) != 0)
        return 1;
    if (strcmp(mode, "nodisc") == 0) {
        printf("CONNECTED\n");
        while (expect(RDMA_CM_EVENT_TIMEWAIT_EXIT) != 0)
            ;
        return 0;
    }
    if (rdma_disconnect(id) != 0)
        return say_err("rdma_disconnect"), 1;
    if (expect(RDMA_CM_EVENT_DISCONNECTED) != 0)
        return 1;
    expect(RDMA_CM_EVENT_TIMEWAIT_EXIT);
    rdma_destroy_id(id);
    return 0;
}

static int
limits(const char *ip, const char *port)
{
    static char big[256];
    struct rdma_cm_id *id;
    int rc = client_connect(&id, ip, port, big, 57);
    if (rc != -2)
        return 1;
    if (client_connect(&id, ip, port, big, 56) != 0)
        return 1;
    expect(RDMA_CM_EVENT_CONNECT_RESPONSE);
    return 0;
}

static int
resolve(const char *ip)
{
    struct rdma_cm_id *id;
    struct sockaddr_in dst;
    addr_of(&dst, ip, "0");
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0)
        return say_err("rdma_create_id"), 1;
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) != 0)
        return say_err("rdma_resolve_addr"), 1;
    next_event();
    return 0;
}

static int
bind_ports(int n, char **ports)
{
    struct rdma_cm_id *id;
    struct sockaddr_in sin;
    int i;
    for (i = 0; i < n; i++) {
        addr_of(&sin, "127.0.0.1", ports[i]);
        if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0)
            return say_err("rdma_create_id"), 1;
        if (rdma_bind_addr(id, (struct sockaddr *)&sin) != 0)
            say_err("rdma_bind_addr");
        else if (rdma_listen(id, 1) != 0)
            say_err("rdma_listen");
        else
            printf("OK bind %s\n", ports[i]);
    }
    return 0;
}

/* A UD ID bound to 127.0.0.1 (ps: its port space), or NULL. */
static struct rdma_cm_id *
mc_id(enum rdma_port_space ps, int bind)
{
    struct rdma_cm_id *id;
    struct sockaddr_in sin;
    addr_of(&sin, "127.0.0.1", "0");
    if (rdma_create_id(ch, &id, NULL, ps) != 0)
        return say_err("rdma_create_id"), NULL;
    if (bind && rdma_bind_addr(id, (struct sockaddr *)&sin) != 0)
        return say_err("rdma_bind_addr"), NULL;
    return id;
}

/* Join g on id with context &ctx, print the JOIN's address; 0 if it came. */
static int
mc_join(struct rdma_cm_id *id, struct sockaddr *g)
{
    static int ctx;
    struct rdma_cm_event *e;
    char gid[64];
    int rc;
    if (rdma_join_multicast(id, g, &ctx) != 0)
        return say_err("rdma_join_multicast"), -1;
    if ((e = next_event()) == NULL)
        return -1;
    inet_ntop(AF_INET6, e->param.ud.ah_attr.grh.dgid.raw, gid, sizeof(gid));
    printf("MCAST dgid=%s dlid=0x%x global=%d qp_num=0x%x qkey=0x%x "
           "ctx=%d\n", gid, e->param.ud.ah_attr.dlid,
           e->param.ud.ah_attr.is_global, e->param.ud.qp_num,
           e->param.ud.qkey, e->param.ud.private_data == (void *)&ctx);
    rc = e->event == RDMA_CM_EVENT_MULTICAST_JOIN ? 0 : -1;
    rdma_ack_cm_event(e);
    return rc;
}

static int
mcast(const char *group)
{
    struct sockaddr_in g, not_g;
    struct rdma_cm_join_mc_attr_ex ex;
    struct ibv_qp_init_attr qa;
    struct rdma_cm_id *tcp = mc_id(RDMA_PS_TCP, 1), *unbound = mc_id(
        RDMA_PS_UDP, 0), *id = mc_id(RDMA_PS_UDP, 1);
    struct ibv_qp *qp;
    struct ibv_pd *pd;
    struct ibv_cq *cq;

    if (tcp == NULL || unbound == NULL || id == NULL)
        return 1;
    pd = ibv_alloc_pd(id->verbs);
    cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
    if (pd == NULL || cq == NULL)
        return say_err("ibv_create_cq"), 1;
    addr_of(&g, group, "0");
    addr_of(&not_g, "10.1.2.3", "0");
    if (rdma_join_multicast(tcp, (struct sockaddr *)&g, NULL) != 0)
        say_err("rdma_join_multicast(tcp)");
    if (rdma_join_multicast(unbound, (struct sockaddr *)&g, NULL) != 0)
        say_err("rdma_join_multicast(unbound)");
    if (rdma_join_multicast(id, (struct sockaddr *)&not_g, NULL) != 0)
        say_err("rdma_join_multicast(unicast)");
    memset(&ex, 0, sizeof(ex));
    ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if (rdma_join_multicast_ex(id, &ex, NULL) != 0)
        say_err("rdma_join_multicast_ex(no address)");
    if (rdma_leave_multicast(id, (struct sockaddr *)&g) != 0)
        say_err("rdma_leave_multicast(not joined)");
    memset(&qa, 0, sizeof(qa));
    qa.qp_type = IBV_QPT_UD;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.send_cq = qa.recv_cq = cq;
    if (rdma_create_qp(id, pd, &qa) != 0)
        return say_err("rdma_create_qp"), 1;
    qp = id->qp;
    if (mc_join(id, (struct sockaddr *)&g) != 0)
        return 1;
    if (rdma_leave_multicast(id, (struct sockaddr *)&g) == 0)
        printf("OK rdma_leave_multicast\n");
    if (rdma_leave_multicast(id, (struct sockaddr *)&g) != 0)
        say_err("rdma_leave_multicast(again)");
    if (mc_join(id, (struct sockaddr *)&g) != 0)
        return 1;
    errno = ibv_destroy_qp(qp);
    if (errno != 0)
        say_err("ibv_destroy_qp(attached)");
    id->qp = NULL;              /* rdma_destroy_id leaves the group */
    if (rdma_destroy_id(id) == 0 && ibv_destroy_qp(qp) == 0)
        printf("OK ibv_destroy_qp\n");
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(tcp);
    rdma_destroy_id(unbound);
    return 0;
}

static double
now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static double acked_at;

static void *
ack_later(void *arg)
{
    struct rdma_cm_event *e = arg;
    volatile void *ctx;
    usleep(300000);
    ctx = e->id->context;   /* the ID must still be there */
    (void)ctx;
    acked_at = now_s();
    rdma_ack_cm_event(e);
    return NULL;
}

static int
held(const char *ip, int migrate)
{
    struct rdma_cm_id *id;
    struct rdma_cm_event *e;
    struct sockaddr_in dst;
    pthread_t t;
    double done;
    addr_of(&dst, ip, "0");
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0)
        return say_err("rdma_create_id"), 1;
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) != 0)
        return say_err("rdma_resolve_addr"), 1;
    if ((e = next_event()) == NULL)
        return 1;
    pthread_create(&t, NULL, ack_later, e);
    if (migrate && rdma_migrate_id(id, rdma_create_event_channel()) != 0)
        say_err("rdma_migrate_id");
    if (!migrate && rdma_destroy_id(id) != 0)
        say_err("rdma_destroy_id");
    done = now_s();
    pthread_join(t, NULL);
    printf("%s %s\n", migrate ? "MIGRATE" : "DESTROY",
           done >= acked_at && acked_at > 0 ? "after-ack" : "before-ack");
    return 0;
}

static int
reqdestroy(const char *port)
{
    struct rdma_cm_id *l, *c;
    struct rdma_cm_event *e;
    struct sockaddr_in sin;
    addr_of(&sin, "127.0.0.1", port);
    if (rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(l, (struct sockaddr *)&sin) != 0 ||
        rdma_listen(l, 4) != 0)
        return say_err("listen"), 1;
    if (client_connect(&c, "127.0.0.1", port, "hello", 6) != 0)
        return 1;
    if ((e = next_event()) == NULL)
        return 1;
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        if (rdma_reject(e->id, NULL, 0) != 0)
            say_err("rdma_reject");
        if (rdma_destroy_id(e->id) != 0)
            say_err("rdma_destroy_id");
        printf("OK reqdestroy\n");
    }
    rdma_ack_cm_event(e);
    expect(RDMA_CM_EVENT_REJECTED);
    rdma_destroy_id(c);
    rdma_destroy_id(l);
    return 0;
}

static void
opt(const char *what, struct rdma_cm_id *id, int level, int name,
    void *val, size_t len)
{
    errno = 0;
    printf("OPT %s %d\n", what,
           rdma_set_option(id, level, name, val, len) == 0 ? 0 : errno);
}

static int
options(void)
{
    struct rdma_cm_id *id, *ud;
    struct rdma_cm_event *e;
    struct sockaddr_in dst;
    struct ibv_path_data path[2];
    uint8_t tos = 0x28, tmo = 20;
    int one = 1;
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0 ||
        rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) != 0)
        return say_err("rdma_create_id"), 1;
    opt("bad-level", id, 7, 0, &one, sizeof(one));
    opt("bad-name", id, RDMA_OPTION_ID, 99, &one, sizeof(one));
    opt("bad-ib-name", id, RDMA_OPTION_IB, 99, &one, sizeof(one));
    opt("tos-len", id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, 4);
    opt("reuse-len", id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, 1);
    opt("null", id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, NULL, 4);
    opt("ud-ack-timeout", ud, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
        &tmo, 1);
    opt("tos", id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1);
    opt("reuse", id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, 4);
    opt("afonly", id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, 4);
    opt("ack-timeout", id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
        &tmo, 1);
    memset(path, 0, sizeof(path));
    opt("path-early", id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, path,
        sizeof(path[0]));
    addr_of(&dst, "127.0.0.1", "0");
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) != 0)
        return say_err("rdma_resolve_addr"), 1;
    if ((e = next_event()) == NULL)
        return 1;
    rdma_ack_cm_event(e);
    opt("afonly-resolved", id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY,
        &one, 4);
    opt("path-flags", id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, path,
        sizeof(path[0]));
    opt("path-len", id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, path,
        sizeof(path[0]) + 1);
    path[1].flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
                    IBV_PATH_FLAG_BIDIRECTIONAL;
    opt("path", id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, path, sizeof(path));
    if ((e = next_event()) == NULL)
        return 1;
    rdma_ack_cm_event(e);
    printf("TCLASS %d\n", id->route.path_rec != NULL
                            ? id->route.path_rec->traffic_class : -1);
    rdma_destroy_id(ud);
    rdma_destroy_id(id);
    return 0;
}

static void
say_addr(const char *what, const struct sockaddr *sa, socklen_t len)
{
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    char text[INET_ADDRSTRLEN] = "-";
    if (sa != NULL && len >= sizeof(*in) && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    printf(" %s=%s:%d", what, text,
           sa != NULL && len >= sizeof(*in) ? ntohs(in->sin_port) : 0);
}

static void
say_ai(const char *call, int rc, const struct rdma_addrinfo *r)
{
    if (rc != 0) {
        say_err(call);
        return;
    }
    printf("AI %s flags=%d ps=0x%x qpt=%d", call, r->ai_flags,
           r->ai_port_space, r->ai_qp_type);
    say_addr("src", r->ai_src_addr, r->ai_src_len);
    say_addr("dst", r->ai_dst_addr, r->ai_dst_len);
    printf("\n");
}

/* rdma_getaddrinfo's three forms: nothing (EINVAL), the addresses in the
   hints only (libfabric's verbs provider), a node with a hinted source */
static int
addrinfo(void)
{
    struct rdma_addrinfo hints, *r = NULL;
    struct sockaddr_in src, dst;
    int rc;

    errno = 0;
    rc = rdma_getaddrinfo(NULL, NULL, NULL, &r);
    say_ai("nothing", rc, r);
    addr_of(&src, "127.0.0.2", "4791");
    addr_of(&dst, "127.0.0.3", "7471");
    memset(&hints, 0, sizeof(hints));
    hints.ai_port_space = RDMA_PS_TCP;
    hints.ai_src_addr = (struct sockaddr *)&src;
    hints.ai_src_len = sizeof(src);
    hints.ai_dst_addr = (struct sockaddr *)&dst;
    hints.ai_dst_len = sizeof(dst);
    rc = rdma_getaddrinfo(NULL, NULL, &hints, &r);
    say_ai("hints", rc, r);
    if (rc == 0)
        rdma_freeaddrinfo(r);
    hints.ai_dst_addr = NULL;
    hints.ai_dst_len = 0;
    rc = rdma_getaddrinfo("127.0.0.1", "7472", &hints, &r);
    say_ai("node", rc, r);
    if (rc == 0)
        rdma_freeaddrinfo(r);
    return 0;
}

int
main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ch = rdma_create_event_channel();
    if (ch == NULL)
        return say_err("rdma_create_event_channel"), 1;
    if (argc >= 4 && strcmp(argv[1], "server") == 0)
        return server(argv[2], argv[3]);
    if (argc >= 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3], argc > 4 ? argv[4] : "");
    if (argc >= 4 && strcmp(argv[1], "limits") == 0)
        return limits(argv[2], argv[3]);
    if (argc >= 3 && strcmp(argv[1], "mcast") == 0)
        return mcast(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "resolve") == 0)
        return resolve(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "options") == 0)
        return options();
    if (argc >= 3 && strcmp(argv[1], "held") == 0)
        return held(argv[2], argc > 3 && strcmp(argv[3], "migrate") == 0);
    if (argc >= 3 && strcmp(argv[1], "reqdestroy") == 0)
        return reqdestroy(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "bind") == 0)
        return bind_ports(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "addrinfo") == 0)
        return addrinfo();
    fprintf(stderr, "usage: see the comment at the top\n");
    return 2;
}
