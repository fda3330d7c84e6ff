/* auth.c - who may talk to this node: the HELLO that opens every
   endpoint (SipHash MAC, session ids), the table of authenticated senders
   and the message counters of rejects, and the guard that bounds the
   unauthenticated connections to the listener and to UCX's TCP sockets. */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* authentication and the listener's guard                             */

/*
 * Who may talk to this node (docs/fabric.rst, "Security model").
 *
 * The session: the first messages on every endpoint a node makes to
 * another (peer_get -> fab_hello_send) open a session, in three steps
 * (WIRE_VERSION 2 and later; each a struct wire through AM_REQ):
 *  1. AM_CTL_HELLO, sender -> receiver: the sender's GUID, LID and pid
 *     (imm), a random session id (sid), a random nonce na (raddr), and
 *     a MAC (cmp): SipHash-2-4 of (receiver GUID, sender GUID, sid, pid,
 *     na, 0, 1) under a 128-bit key; op names the key:
 *      - HELLO_NODE, a node of the same host (same boot id, any network
 *        namespace): the receiver's own key, random, in its node record
 *        (a 0600 file in the user's 0700 rendezvous directory: only the
 *        same user can read it);
 *      - HELLO_SHARED, another host: the key derived from
 *        RDMA_UCX_SECRET;
 *      - HELLO_NONE: no key (no MAC); accepted only in open mode
 *        (RDMA_UCX_SECRET unset and the listener on a non-loopback
 *        RDMA_UCX_ADDR), and only on an endpoint the listener accepted.
 *  2. AM_CTL_CHALLENGE, receiver -> sender, on the endpoint the HELLO
 *     came on (it is sent with UCP_AM_SEND_FLAG_REPLY): na again and a
 *     fresh random nonce nb (cmp), which the receiver keeps (struct
 *     chal, one per endpoint, for AUTH_DEADLINE_NS).  nb 0: refused.
 *  3. AM_CTL_PROOF, sender -> receiver, on the same endpoint: the
 *     HELLO's fields, nb (swap) and the MAC of (receiver, sender, sid,
 *     pid, na, nb, 2).  A challenge is answered once.
 * Then the session begins: an auth entry (sender GUID -> sid).  The pid
 * is under both MACs, and nb is new for every exchange, so neither a
 * captured HELLO nor a captured PROOF is worth anything later.  The
 * sender waits (fab_hello_send) until UCX has sent its PROOF before its
 * requests go: they follow it on the endpoint.
 *
 * Every later message of the sender carries its sid, and a request,
 * response or control message counts only if (src_guid, sid) is an
 * entry's: for RC and UC through q->peer->rx_sid (one comparison on the
 * hot path), for UD, control messages and requests to unknown QPs
 * through the table.  So a sender can neither act as another node nor
 * reach a QP that is not connected to it.  An entry is replaced only
 * once its node is gone (same host: its pid; else: the endpoint its
 * HELLO came on failed), or by a session proven with the node key from
 * the same pid (the node connected again).  Of another host the pid
 * proves nothing: a live node's session is never replaced; and without a
 * key a failed peer's QPs do not come back to life under a new one.
 *
 * The guard: the listener (the port in the GUID) accepts every
 * connection request into an endpoint (struct acc); one without a
 * session after AUTH_DEADLINE_NS is closed, and when MAX_PENDING such
 * endpoints wait, a new request closes the oldest of the source address
 * holding the most (it is not refused: a peer with the key always gets
 * its turn).  Below UCP, UCX itself accepts every TCP connection to its
 * listening sockets (this listener's, and the tcp transport's own) and
 * holds an fd for it until the peer speaks, forever; the guard watches
 * those sockets (edge-triggered in the progress thread's epoll set;
 * UCX's async thread may accept a connection before that thread sees
 * the edge, which then never comes, so the guard also looks every
 * GUARD_IDLE_NS), finds the connections among the process's fds, and
 * shuts down (UCX then closes them) those that have not become a
 * connection request (listener) or sent anything (tcp transport) after
 * AUTH_DEADLINE_NS; meanwhile those first seen less than GRACE_NS ago
 * wait (a peer's UCX speaks within that), and of the others at most
 * MAX_PENDING, shared fairly among source addresses (sock_trim): the
 * others are shut down at once.
 */
#define AUTH_DEADLINE_NS 2000000000ull /* to authenticate after connecting */
#define MAX_PENDING 32          /* unauthenticated connections held */
#define GRACE_NS 100000000ull   /* a new connection's time to speak */
#define MAX_YOUNG 256           /* connections held that long at most */
#define GUARD_EVERY_NS 100000000ull    /* guard passes while any pend */
#define GUARD_IDLE_NS 500000000ull     /* and at least this often */
#define LOG_EVERY_NS 10000000000ull    /* the guard logs at most this often */

/* An endpoint the listener accepted. */
struct acc {
    ucp_ep_h ep;           /* NULL: the entry is free */
    uint32_t gen;          /* incremented when the entry is reused */
    int authed;            /* a valid HELLO came on it */
    int dead;              /* it failed: close it */
    uint64_t deadline;     /* close it then unless authed */
    struct sockaddr_in client; /* the connecting socket's address */
};
#define MAX_ACC 4096            /* accepted endpoints at a time */
static struct acc acc_tab[MAX_ACC];
static uint32_t acc_hi;     /* entries in use are below this */

/* Do two connections come from the same address? */
static int
same_source(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_addr.s_addr == b->sin_addr.s_addr;
}

/* A TCP connection accepted by one of UCX's listening sockets. */
struct tsock {
    int fd;                /* its fd (UCX's: only shut down, never closed) */
    uint64_t ino;          /* its inode: a reused fd is another socket */
    uint64_t seen;         /* first seen (ns) */
    int cm;                /* 1: on the listener's port, 0: tcp transport */
    int ok;                /* proven: left alone */
    int talk;              /* it sent something */
    struct sockaddr_in peer; /* the other end */
};

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND() do { \
        v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32); \
        v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2; \
        v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0; \
        v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32); \
    } while (0)

/* SipHash-2-4 of n 64-bit words under key k. */
static uint64_t
siphash(const uint64_t k[2], const uint64_t *m, int n)
{
    uint64_t v0 = k[0] ^ 0x736f6d6570736575ull;
    uint64_t v1 = k[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = k[0] ^ 0x6c7967656e657261ull;
    uint64_t v3 = k[1] ^ 0x7465646279746573ull;
    uint64_t b = (uint64_t)(n * 8) << 56;
    int i;
    for (i = 0; i < n; i++) {
        v3 ^= m[i];
        SIPROUND();
        SIPROUND();
        v0 ^= m[i];
    }
    v3 ^= b;
    SIPROUND();
    SIPROUND();
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND();
    SIPROUND();
    SIPROUND();
    SIPROUND();
    return v0 ^ v1 ^ v2 ^ v3;
}

/* The MAC of step 1 (HELLO: nb 0) or 2 (PROOF) of the exchange that
   opens a session sid of process pid of node src with node dst; na and
   nb: the nonces of src and dst. */
static uint64_t
hello_mac(const uint64_t k[2], uint64_t dst, uint64_t src, uint64_t sid,
          uint32_t pid, uint64_t na, uint64_t nb, int step)
{
    uint64_t m[7] = {dst, src, sid, pid, na, nb, (uint64_t)step};
    return siphash(k, m, 7);
}

/* The key of a secret string (RDMA_UCX_SECRET). */
void
fab_secret_key(const char *s, uint64_t k[2])
{
    static const uint64_t k0[2] = {0x72646d6175637831ull, 1};
    static const uint64_t k1[2] = {0x72646d6175637831ull, 2};
    uint64_t m[33];
    size_t len = strlen(s), i;
    int n;
    if (len > 256)
        len = 256;
    memset(m, 0, sizeof(m));
    for (i = 0; i < len; i++)
        m[i / 8] |= (uint64_t)(uint8_t)s[i] << (8 * (i % 8));
    n = (int)((len + 7) / 8);
    m[n++] = len;
    k[0] = siphash(k0, m, n);
    k[1] = siphash(k1, m, n);
}

/* Random bytes (getrandom; 0 or -1). */
int
fab_random_bytes(void *buf, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t k;
    if (fd < 0)
        return -1;
    k = read(fd, buf, n);
    close(fd);
    return k == (ssize_t)n ? 0 : -1;
}

/* A new session id or nonce (random, never 0). */
static uint64_t
new_sid(void)
{
    uint64_t sid = 0;
    while (sid == 0)
        if (fab_random_bytes(&sid, sizeof(sid)) < 0)
            sid = now_ns() ^ ((uint64_t)getpid() << 32);
    return sid;
}

/* Count a dropped message: malformed (bad) or not allowed. */
void
fab_rx_bad(void)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_rx_bad, 1, __ATOMIC_RELAXED);
}

void
fab_rx_denied(void)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_rx_denied, 1, __ATOMIC_RELAXED);
}

/* The auth entry of guid (N.lock held), or NULL. */
struct auth *
fab_auth_find(uint64_t guid)
{
    int i;
    for (i = 0; i < N.nauth; i++)
        if (N.auth[i].guid == guid)
            return &N.auth[i];
    return NULL;
}

/* Is (guid, sid) an authenticated sender?  (N.lock held) */
int
fab_auth_ok(uint64_t guid, uint64_t sid)
{
    struct auth *a = fab_auth_find(guid);
    return a != NULL && a->sid == sid;
}

/* The acc_ref (index and generation, never 0) of accepted entry i. */
static uint32_t
acc_ref(uint32_t i)
{
    return ((acc_tab[i].gen & 0xFFFFF) << 12 | i) + 1;
}

/* The entry an acc_ref names, or NULL if it has been reused since. */
static struct acc *
acc_get(uint32_t ref)
{
    uint32_t i;
    if (ref == 0)
        return NULL;
    i = (ref - 1) & (MAX_ACC - 1);
    if (i >= acc_hi || acc_tab[i].ep == NULL || acc_ref(i) != ref)
        return NULL;
    return &acc_tab[i];
}

/* The senders whose HELLO came on accepted entry ref lose their entry
   (the endpoint failed or was closed; N.lock held). */
static void
auth_drop_acc(uint32_t ref)
{
    int i, k;
    for (i = 0; i < N.nauth;) {
        if (N.auth[i].acc != ref) {
            i++;
            continue;
        }
        for (k = 0; k < N.npeers; k++)
            if (N.peers[k]->guid == N.auth[i].guid)
                N.peers[k]->rx_sid = 0;
        N.auth[i] = N.auth[--N.nauth];
    }
}

/* A rate-limited line on stderr: connections closed, messages denied. */
static void
guard_log(uint64_t t)
{
    if (N.log_closed + N.log_denied == 0 || t < N.log_at)
        return;
    fprintf(stderr, "rdma (ucx fabric node %016llx): closed %llu "
            "unauthenticated connection(s), refused %llu HELLO(s) "
            "(logged at most every %llu s)\n",
            (unsigned long long)N.guid, (unsigned long long)N.log_closed,
            (unsigned long long)N.log_denied,
            (unsigned long long)(LOG_EVERY_NS / 1000000000ull));
    N.log_closed = N.log_denied = 0;
    N.log_at = t + LOG_EVERY_NS;
}

/* The key of HELLO mode m (NULL: none; HELLO_NONE, or no secret). */
static const uint64_t *
mode_key(int m)
{
    if (m == HELLO_NODE)
        return N.secret;
    if (m == HELLO_SHARED && N.have_shared)
        return N.shared;
    return NULL;
}

/* The acc_ref of accepted endpoint ep, 0 if the listener did not accept
   it (N.lock held). */
static uint32_t
acc_of(ucp_ep_h ep)
{
    uint32_t i;
    for (i = 0; ep != NULL && i < acc_hi; i++)
        if (acc_tab[i].ep == ep)
            return acc_ref(i);
    return 0;
}

/* May a new session of process pid, proven in key mode m, replace auth
   entry a (NULL: none) of its GUID?  Only if a's node is gone (same
   host: its pid; else the endpoint its HELLO came on failed), or if both
   are of this host and of the same process (it connected again; the
   node key binds the pid, and this host's pids mean something).  Of
   another host the pid proves nothing (any holder of the secret could
   name it; without a key anyone): a live node's session is never taken
   over.  N.lock held. */
static int
claim_ok(const struct auth *a, int m, pid_t pid)
{
    struct acc *x;
    if (a == NULL || (m == HELLO_NODE && a->same_host && a->pid == pid))
        return 1;
    if (a->same_host)
        return !fab_pid_alive(a->pid);
    x = acc_get(a->acc);
    return a->acc != 0 && (x == NULL || x->dead);
}

/* Refuse a HELLO or PROOF that came on accepted endpoint ref (0: none):
   count it, and close the endpoint unless it authenticated before
   (N.lock held). */
static void
hello_refuse(uint32_t ref)
{
    struct acc *x = acc_get(ref);
    fab_rx_denied();
    N.log_denied++;
    if (x != NULL && !x->authed)
        x->deadline = 0;        /* the guard closes it */
    N.guard_at = 1;
}

/* A challenge this node sent, waiting for its PROOF. */
struct chal {
    uint64_t nb;           /* our nonce (0: the entry is free) */
    uint64_t na;           /* the sender's nonce (its HELLO) */
    uint64_t guid, sid;    /* the sender and its session */
    pid_t pid;             /* its pid */
    int mode;              /* HELLO_*: the key it proves */
    ucp_ep_h ep;           /* the endpoint its HELLO came on */
    uint32_t acc;          /* that endpoint's acc_ref, 0: not accepted */
    uint64_t deadline;     /* the PROOF must come before */
};
#define MAX_CHAL 1024           /* challenges waiting at a time (only
                                   key holders, and in open mode the
                                   listener's endpoints, make them) */
static struct chal chal_tab[MAX_CHAL];

/* The entry for a challenge on endpoint ep (N.lock held): the one ep
   has already (a HELLO replaces the last of its endpoint), else a free
   or expired one, else the oldest. */
static struct chal *
chal_slot(ucp_ep_h ep, uint64_t t)
{
    struct chal *c = &chal_tab[0];
    int i;
    for (i = 0; i < MAX_CHAL; i++)
        if (chal_tab[i].nb != 0 && chal_tab[i].ep == ep)
            return &chal_tab[i];
    for (i = 0; i < MAX_CHAL; i++) {
        struct chal *x = &chal_tab[i];
        if (x->nb == 0 || x->deadline <= t)
            return x;
        if (x->deadline < c->deadline)
            c = x;
    }
    return c;
}

/* Forget the auth entries of nodes of this host that ended (N.lock
   held; those of other hosts go with their endpoint). */
static void
auth_forget_ended(void)
{
    int j, k;
    for (j = 0; j < N.nauth;) {
        if (N.auth[j].same_host && !fab_pid_alive(N.auth[j].pid)) {
            for (k = 0; k < N.npeers; k++)
                if (N.peers[k]->guid == N.auth[j].guid)
                    N.peers[k]->rx_sid = 0;
            N.auth[j] = N.auth[--N.nauth];
        }
        else
            j++;
    }
}

/* The session of answered challenge c begins: its auth entry (N.lock
   held). */
static void
auth_accept(const struct chal *c)
{
    struct auth *a = fab_auth_find(c->guid);
    struct acc *x = acc_get(c->acc);
    int k;

    if (a == NULL && N.nauth == N.cauth)
        auth_forget_ended();    /* full: first make room */
    if (a == NULL) {
        if (N.nauth == N.cauth) {
            int nc = N.cauth ? N.cauth * 2 : 16;
            struct auth *na = realloc(N.auth, sizeof(*na) * (size_t)nc);
            if (na == NULL)
                return;
            N.auth = na;
            N.cauth = nc;
        }
        a = &N.auth[N.nauth++];
    }
    a->guid = c->guid;
    a->sid = c->sid;
    a->pid = c->pid;
    a->same_host = c->mode == HELLO_NODE;
    a->acc = c->acc;
    if (x != NULL && !x->authed) {
        x->authed = 1;
        N.npending--;
    }
    /* without a key, no QP of a peer that failed (its node went) comes
       back to life under the new session */
    for (k = 0; k < N.npeers; k++)
        if (N.peers[k]->guid == c->guid)
            N.peers[k]->rx_sid = c->mode == HELLO_NONE &&
                                 N.peers[k]->failed ? 0 : c->sid;
}

/* A HELLO arrived on endpoint ep (the reply endpoint; NULL if the sender
   did not say it).  If its key proves it (or, in open mode, without a
   key, through the listener) and it may claim its GUID, the answer is a
   CHALLENGE with a fresh nonce (nb), which it must prove in turn; else
   it is refused (a CHALLENGE with nb 0 tells it).  N.lock not held. */
void
fab_hello_rx(const struct wire *h, ucp_ep_h ep)
{
    const uint64_t *key = mode_key(h->op);
    uint64_t nb = new_sid(), t = now_ns();
    struct wire c;
    struct chal *ch;
    uint32_t ref;
    int ok;

    ok = h->qkey == WIRE_VERSION && h->sid != 0 && h->src_guid != 0 &&
         h->raddr != 0 && ep != NULL &&
         (key != NULL ? hello_mac(key, N.guid, h->src_guid, h->sid, h->imm,
                                  h->raddr, 0, 1) == h->cmp
                      : h->op == HELLO_NONE && N.open_mode);
    memset(&c, 0, sizeof(c));
    c.kind = AM_CTL_CHALLENGE;
    c.src_guid = N.guid;
    c.src_lid = N.lid;
    c.qkey = WIRE_VERSION;
    c.raddr = h->raddr;
    LOCK();
    ref = acc_of(ep);
    if (ok && h->op == HELLO_NONE && ref == 0)
        ok = 0;                 /* without a key: through the listener */
    if (ok && !claim_ok(fab_auth_find(h->src_guid), h->op, (pid_t)h->imm))
        ok = 0;
    if (ok) {
        ch = chal_slot(ep, t);
        ch->nb = c.cmp = nb;
        ch->na = h->raddr;
        ch->guid = h->src_guid;
        ch->sid = h->sid;
        ch->pid = (pid_t)h->imm;
        ch->mode = h->op;
        ch->ep = ep;
        ch->acc = ref;
        ch->deadline = t + AUTH_DEADLINE_NS;
    }
    else
        hello_refuse(ref);
    UNLOCK();
    if (ep != NULL)
        fab_ctl_post(ep, &c);
}

/* A PROOF arrived on endpoint ep (the reply endpoint; NULL if the
   sender did not say it): the answer to a CHALLENGE (its nonce in swap)
   on the endpoint of the HELLO.  If it proves the key of the HELLO over
   both nonces (or, without a key, just answers), the session begins.  A
   challenge is answered once: a PROOF seen before, or one for another
   exchange, is refused (and its endpoint closed, as for a HELLO).  N.lock
   not held. */
void
fab_proof_rx(const struct wire *h, ucp_ep_h ep)
{
    const uint64_t *key;
    struct chal c;
    int i, ok;

    LOCK();
    for (i = 0; i < MAX_CHAL; i++)
        if (chal_tab[i].nb != 0 && chal_tab[i].nb == h->swap &&
            chal_tab[i].guid == h->src_guid && chal_tab[i].ep == ep)
            break;
    if (ep == NULL || i == MAX_CHAL) {
        hello_refuse(acc_of(ep));   /* no such challenge (any more) */
        UNLOCK();
        return;
    }
    c = chal_tab[i];
    chal_tab[i].nb = 0;
    key = mode_key(c.mode);
    ok = c.deadline > now_ns() && h->qkey == WIRE_VERSION &&
         h->op == c.mode && h->sid == c.sid && h->imm == (uint32_t)c.pid &&
         h->raddr == c.na &&
         (key != NULL ? hello_mac(key, N.guid, c.guid, c.sid, (uint32_t)c.pid,
                                  c.na, c.nb, 2) == h->cmp
                      : c.mode == HELLO_NONE);
    if (ok && c.acc != 0 && (acc_get(c.acc) == NULL || acc_get(c.acc)->dead))
        ok = 0;                 /* its endpoint was closed meanwhile */
    if (ok && !claim_ok(fab_auth_find(c.guid), c.mode, c.pid))
        ok = 0;
    if (ok)
        auth_accept(&c);
    else
        hello_refuse(c.acc);
    UNLOCK();
}

static void
close_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    (void)user;
    U.request_free(req);
}

/* Close an endpoint at once (no lock held). */
static void
ep_close_force(ucp_ep_h ep)
{
    ucp_request_param_t prm;
    ucs_status_ptr_t r;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    prm.cb.send = close_cb;
    r = U.ep_close_nbx(ep, &prm);
    (void)r;                    /* a request: close_cb frees it */
}

/* An accepted endpoint failed. */
static void
acc_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct acc *a;
    (void)ep;
    (void)status;
    LOCK();
    a = acc_get((uint32_t)(uintptr_t)arg);
    if (a != NULL) {
        a->dead = 1;
        N.guard_at = 1;
    }
    UNLOCK();
}

/* Make room for a connection request (N.lock held): when MAX_PENDING
   accepted endpoints wait for their HELLO, the oldest of the source
   that holds the most of them is closed (by the guard), so a flood from
   one source cannot keep others out, and a request is never refused
   for want of room. */
static void
acc_make_room(uint64_t t)
{
    uint32_t w[2 * MAX_PENDING], i;
    int nw = 0, j, k, best = 0, bestn = 0, old;

    for (i = 0; i < acc_hi && nw < 2 * MAX_PENDING; i++)
        if (acc_tab[i].ep != NULL && !acc_tab[i].authed &&
            !acc_tab[i].dead && acc_tab[i].deadline > t)
            w[nw++] = i;
    if (nw < MAX_PENDING)
        return;
    for (j = 0; j < nw; j++) {
        int c = 0;
        for (k = 0; k < nw; k++)
            c += same_source(&acc_tab[w[j]].client, &acc_tab[w[k]].client);
        if (c > bestn) {
            bestn = c;
            best = j;
        }
    }
    old = best;
    for (k = 0; k < nw; k++)
        if (same_source(&acc_tab[w[k]].client, &acc_tab[w[best]].client) &&
            acc_tab[w[k]].deadline < acc_tab[w[old]].deadline)
            old = k;
    acc_tab[w[old]].deadline = 0;
    N.guard_at = 1;
}

void
fab_conn_cb(ucp_conn_request_h req, void *arg)
{
    ucp_conn_request_attr_t ca;
    ucp_ep_params_t ep;
    ucp_ep_h h;
    uint32_t i;
    (void)arg;

    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (U.conn_request_query(req, &ca) != UCS_OK)
        ca.client_address.ss_family = AF_UNSPEC;
    LOCK();
    acc_make_room(now_ns());
    for (i = 0; i < acc_hi; i++)
        if (acc_tab[i].ep == NULL)
            break;
    if (i == MAX_ACC) {
        /* too many at all: refused */
        fab_rx_denied();
        N.log_closed++;
        N.guard_at = 1;
        UNLOCK();
        U.listener_reject(N.listener, req);
        return;
    }
    if (i == acc_hi)
        acc_hi++;
    acc_tab[i].gen++;
    acc_tab[i].ep = (ucp_ep_h)1;        /* taken */
    acc_tab[i].authed = acc_tab[i].dead = 0;
    acc_tab[i].deadline = now_ns() + AUTH_DEADLINE_NS;
    memset(&acc_tab[i].client, 0, sizeof(acc_tab[i].client));
    if (ca.client_address.ss_family == AF_INET)
        memcpy(&acc_tab[i].client, &ca.client_address,
               sizeof(acc_tab[i].client));
    N.npending++;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = req;
    ep.err_handler.cb = acc_err_cb;
    ep.err_handler.arg = (void *)(uintptr_t)acc_ref(i);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    N.guard_at = 1;
    UNLOCK();
    if (U.ep_create(N.w, &ep, &h) != UCS_OK) {
        LOCK();
        acc_tab[i].ep = NULL;
        N.npending--;
        UNLOCK();
        return;
    }
    LOCK();
    acc_tab[i].ep = h;
    UNLOCK();
}

/* A control message being sent. */
struct ctl_tx {
    struct wire h;         /* the message */
    int state;             /* 0: in flight, 1: sent (or failed), 2: its
                              sender stopped waiting */
};

static void
ctl_sent_cb(void *req, ucs_status_t status, void *user)
{
    struct ctl_tx *x = user;
    (void)status;
    if (__atomic_exchange_n(&x->state, 1, __ATOMIC_ACQ_REL) == 2)
        free(x);
    U.request_free(req);
}

/* Send control message *h on ep with flags (UCP_AM_SEND_FLAG_*; no lock
   held).  Return it while in flight (ctl_sent tells when UCX has sent
   it; ctl_leave when the caller is done), or NULL if UCX is done with
   it (sent or failed) already. */
static struct ctl_tx *
ctl_start(ucp_ep_h ep, const struct wire *h, uint32_t flags)
{
    struct ctl_tx *x = calloc(1, sizeof(*x));
    ucp_request_param_t prm;
    ucs_status_ptr_t r;

    if (x == NULL)
        return NULL;
    x->h = *h;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = flags;
    prm.cb.send = ctl_sent_cb;
    prm.user_data = x;
    r = U.am_send_nbx(ep, AM_REQ, &x->h, sizeof(x->h), NULL, 0, &prm);
    if (!UCS_PTR_IS_PTR(r)) {
        free(x);
        return NULL;
    }
    return x;
}

static int
ctl_sent(struct ctl_tx *x)
{
    return x == NULL || __atomic_load_n(&x->state, __ATOMIC_ACQUIRE) != 0;
}

static void
ctl_leave(struct ctl_tx *x)
{
    if (x != NULL && __atomic_exchange_n(&x->state, 2, __ATOMIC_ACQ_REL) == 1)
        free(x);
}

/* Send control message *h on ep and forget it (no lock held; from a UCP
   callback too). */
void
fab_ctl_post(ucp_ep_h ep, const struct wire *h)
{
    ctl_leave(ctl_start(ep, h, 0));
}

/* A HELLO this node sent, waiting for its CHALLENGE. */
struct hs {
    uint64_t na;           /* our nonce */
    uint64_t guid;         /* the node it went to */
    uint64_t nb;           /* that node's nonce, 0: it refused */
    int got;               /* the CHALLENGE came */
    struct hs *next;
};
static struct hs *hs_list;     /* N.lock */

/* Forget every accepted endpoint and exchange under way (fab_node_up,
   before the node starts). */
void
fab_auth_init(void)
{
    memset(acc_tab, 0, sizeof(acc_tab));
    acc_hi = 0;
    memset(chal_tab, 0, sizeof(chal_tab));
    hs_list = NULL;
}

/* A CHALLENGE arrived: the answer to one of our HELLOs (N.lock not
   held). */
void
fab_challenge_rx(const struct wire *h)
{
    struct hs *x;
    LOCK();
    for (x = hs_list; x != NULL; x = x->next)
        if (x->na == h->raddr && x->guid == h->src_guid && !x->got) {
            x->nb = h->qkey == WIRE_VERSION ? h->cmp : 0;
            __atomic_store_n(&x->got, 1, __ATOMIC_RELEASE);
            break;
        }
    if (x == NULL)
        fab_rx_denied();        /* no HELLO of ours asked for it */
    UNLOCK();
}

/* Drive progress until UCX has sent x and (got != NULL) *got is set, p's
   endpoint failed, or ns passed (no lock held). */
static void
hello_wait(struct peer *p, struct ctl_tx *x, const int *got, uint64_t ns)
{
    uint64_t t0 = now_ns();
    while ((!ctl_sent(x) ||
            (got != NULL && !__atomic_load_n(got, __ATOMIC_ACQUIRE))) &&
           !__atomic_load_n(&p->failed, __ATOMIC_RELAXED) &&
           now_ns() - t0 < ns)
        if (U.worker_progress(N.w) == 0)
            sched_yield();
}

/* Open our session with p on its new endpoint (its first messages; no
   lock held), proven with key (mode HELLO_*): a HELLO (our session id,
   pid and nonce na), sent with UCP_AM_SEND_FLAG_REPLY (the receiver
   learns the endpoint, and answers on it); the receiver's CHALLENGE (its
   nonce nb); our PROOF (the MAC over both nonces; on the same endpoint,
   which it says too).  UCX may hold the
   HELLO back until the endpoint is connected while later messages go
   ahead, and a request that came before the PROOF would be dropped: so
   this waits (driving progress; at most 5 s for each step, less if the
   endpoint fails) until UCX has sent the PROOF, and p's requests follow
   it. */
void
fab_hello_send(struct peer *p, const uint64_t *key, int mode)
{
    struct hs hs, **pp;
    struct ctl_tx *x;
    struct wire h;

    p->tx_sid = new_sid();
    memset(&hs, 0, sizeof(hs));
    hs.na = new_sid();
    hs.guid = p->guid;
    memset(&h, 0, sizeof(h));
    h.kind = AM_CTL_HELLO;
    h.op = (uint8_t)mode;
    h.src_guid = N.guid;
    h.src_lid = N.lid;
    h.sid = p->tx_sid;
    h.imm = (uint32_t)getpid();
    h.qkey = WIRE_VERSION;
    h.raddr = hs.na;
    h.cmp = key != NULL ? hello_mac(key, p->guid, N.guid, h.sid, h.imm,
                                    hs.na, 0, 1) : 0;
    LOCK();
    hs.next = hs_list;
    hs_list = &hs;
    UNLOCK();
    x = ctl_start(p->ep, &h, UCP_AM_SEND_FLAG_REPLY);
    hello_wait(p, x, &hs.got, 5000000000ull);
    ctl_leave(x);
    LOCK();
    for (pp = &hs_list; *pp != &hs; pp = &(*pp)->next)
        ;
    *pp = hs.next;
    UNLOCK();
    if (!hs.got || hs.nb == 0) {
        p->unanswered = 1;      /* refused: its messages will be dropped */
        return;
    }
    h.kind = AM_CTL_PROOF;
    h.swap = hs.nb;
    h.cmp = key != NULL ? hello_mac(key, p->guid, N.guid, h.sid, h.imm,
                                    hs.na, hs.nb, 2) : 0;
    x = ctl_start(p->ep, &h, UCP_AM_SEND_FLAG_REPLY);
    hello_wait(p, x, NULL, 5000000000ull);
    ctl_leave(x);
}

/* Find UCX's listening sockets: the AF_INET listening sockets of this
   process (inode, fd, port), at most max; return how many. */
int
fab_listen_scan(uint64_t *ino, int *fds, uint16_t *ports, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL && n < max) {
        struct sockaddr_in la;
        socklen_t sl = sizeof(la);
        struct stat sb;
        int fd, on = 0;
        socklen_t ol = sizeof(on);
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d) || fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) != 0 || !on ||
            getsockname(fd, (struct sockaddr *)&la, &sl) != 0 ||
            la.sin_family != AF_INET)
            continue;
        ino[n] = (uint64_t)sb.st_ino;
        fds[n] = fd;
        ports[n] = ntohs(la.sin_port);
        n++;
    }
    closedir(d);
    return n;
}

/* Shut down connection c, which did not prove itself (N.lock held).
   Counted before the peer can see the end (whoever sees the connection
   close sees it counted); UCX sees the end and closes its fd. */
static void
tsock_shut(struct tsock *c)
{
    c->ok = -1;
    fab_rx_denied();
    N.log_closed++;
    shutdown(c->fd, SHUT_RDWR);
}

/* The order of sock_trim: by source address; in a source, those that
   spoke first, then the newest first. */
static int
tsock_cmp(const void *x, const void *y)
{
    const struct tsock *a = *(struct tsock *const *)x;
    const struct tsock *b = *(struct tsock *const *)y;
    uint32_t sa = ntohl(a->peer.sin_addr.s_addr);
    uint32_t sb = ntohl(b->peer.sin_addr.s_addr);
    if (sa != sb)
        return sa < sb ? -1 : 1;
    if (a->talk != b->talk)
        return b->talk - a->talk;
    if (a->seen != b->seen)
        return a->seen > b->seen ? -1 : 1;
    return 0;
}

/* How many of the sorted connections w[0..n) wait if each source keeps
   at most level of them. */
static int
level_total(struct tsock *const *w, int n, int level)
{
    int i, rank = 0, total = 0;
    for (i = 0; i < n; i++) {
        rank = i > 0 && same_source(&w[i]->peer, &w[i - 1]->peer) ?
               rank + 1 : 0;
        total += rank < level;
    }
    return total;
}

/* Which unproven connections cur[0..n) wait (N.lock held): those past
   the deadline are shut down; those first seen less than GRACE_NS ago
   wait (up to MAX_YOUNG: a peer's UCX may not have spoken yet when the
   guard first sees its connection); at most MAX_PENDING of the others
   wait, shared among their sources: every source keeps up to the same
   number (as many as the room allows), so a source that floods the
   listener keeps what the others leave, not the room; in a source,
   those that spoke (a peer's UCX speaks at once) and then the newest
   are kept.  Return 1 if some wait. */
static int
sock_trim(struct tsock *cur, int n, uint64_t t)
{
    struct tsock **w = malloc(sizeof(*w) * (n > 0 ? (size_t)n : 1));
    int nw = 0, i, level = 0, left, rank = 0, waiting = 0, young = 0;

    for (i = 0; i < n; i++) {
        if (cur[i].ok)
            continue;
        if (t - cur[i].seen >= AUTH_DEADLINE_NS)
            tsock_shut(&cur[i]);
        else if (w == NULL || (t - cur[i].seen < GRACE_NS && young++ <
                               MAX_YOUNG))
            waiting = 1;        /* look again */
        else
            w[nw++] = &cur[i];
    }
    if (w == NULL)
        return waiting;
    qsort(w, (size_t)nw, sizeof(*w), tsock_cmp);
    if (nw <= MAX_PENDING)
        level = nw;
    while (level < nw && level_total(w, nw, level + 1) <= MAX_PENDING)
        level++;
    left = MAX_PENDING - level_total(w, nw, level);
    for (i = 0; i < nw; i++) {
        rank = i > 0 && same_source(&w[i]->peer, &w[i - 1]->peer) ?
               rank + 1 : 0;
        if (rank < level || (rank == level && left > 0)) {
            if (rank == level)
                left--;
            waiting = 1;
        }
        else
            tsock_shut(w[i]);
    }
    free(w);
    return waiting;
}

/* Which of the connections cur[0..n), not proven before, have proven
   themselves (N.lock held), and which have spoken at all. */
static void
sock_prove(struct tsock *cur, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        struct tsock *c = &cur[i];
        struct tcp_info ti;
        socklen_t tl = sizeof(ti);
        if (c->ok)
            continue;
        memset(&ti, 0, sizeof(ti));
        if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0)
            memset(&ti, 0, sizeof(ti));
        c->talk = ti.tcpi_bytes_received > 0;
        if (c->cm) {
            /* a connection request became an endpoint (which has a
               deadline of its own) */
            uint32_t j;
            for (j = 0; j < acc_hi && !c->ok; j++)
                c->ok = acc_tab[j].ep != NULL &&
                        acc_tab[j].client.sin_port == c->peer.sin_port &&
                        acc_tab[j].client.sin_addr.s_addr ==
                        c->peer.sin_addr.s_addr;
        }
        else {
            /* the tcp transport: a peer's UCX sends its connection
               request at once and ours answers it; a byte or two that
               UCX waits to complete does not count */
            c->ok = ti.tcpi_bytes_received > 0 && ti.tcpi_bytes_acked > 0;
        }
    }
}

/* Look at the TCP connections UCX's listening sockets accepted (no lock
   held); shut down those that did not prove themselves in time, or at
   once beyond MAX_PENDING.  Return 1 if some wait for their deadline. */
static int
sock_scan(uint64_t t)
{
    DIR *d;
    struct dirent *e;
    struct tsock *cur = NULL;
    int ncur = 0, ccur = 0, i, k, waiting = 0;

    if (N.nlsn == 0)
        return 0;
    /* Connections still in a listening socket's accept queue: UCX has not
       accepted them yet, so they are not among the fds below, and the
       edge that woke the guard has passed.  Look again soon.  (Checked
       before the scan: one accepted after it is checked by the next.) */
    for (k = 0; k < N.nlsn; k++) {
        struct tcp_info li;
        socklen_t ll = sizeof(li);
        memset(&li, 0, sizeof(li));
        if (getsockopt(N.lsn_fd[k], IPPROTO_TCP, TCP_INFO, &li, &ll) == 0 &&
            li.tcpi_state == 10 /* TCP_LISTEN */ && li.tcpi_unacked > 0)
            waiting = 1;        /* tcpi_unacked: the accept queue's length */
    }
    if ((d = opendir("/proc/self/fd")) == NULL)
        return waiting;
    while ((e = readdir(d)) != NULL) {
        struct sockaddr_in la, pa;
        socklen_t sl = sizeof(la);
        struct stat sb;
        int fd;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d) || fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) ||
            getsockname(fd, (struct sockaddr *)&la, &sl) != 0 ||
            la.sin_family != AF_INET)
            continue;
        for (k = 0; k < N.nlsn; k++)
            if (ntohs(la.sin_port) == N.lsn_port[k] && fd != N.lsn_fd[k])
                break;
        sl = sizeof(pa);
        if (k == N.nlsn ||
            getpeername(fd, (struct sockaddr *)&pa, &sl) != 0 ||
            pa.sin_family != AF_INET)
            continue;
        if (ncur == ccur) {
            int nc = ccur ? ccur * 2 : 64;
            struct tsock *nt = realloc(cur, sizeof(*nt) * (size_t)nc);
            if (nt == NULL)
                break;
            cur = nt;
            ccur = nc;
        }
        memset(&cur[ncur], 0, sizeof(cur[ncur]));
        cur[ncur].fd = fd;
        cur[ncur].ino = (uint64_t)sb.st_ino;
        cur[ncur].seen = t;
        cur[ncur].cm = N.lsn_port[k] == N.port;
        cur[ncur].peer = pa;
        ncur++;
    }
    closedir(d);
    /* what was seen before: when, and whether it proved itself */
    for (i = 0; i < ncur; i++)
        for (k = 0; k < N.nts; k++)
            if (N.ts[k].fd == cur[i].fd && N.ts[k].ino == cur[i].ino) {
                cur[i].seen = N.ts[k].seen;
                cur[i].ok = N.ts[k].ok;
                break;
            }
    LOCK();
    sock_prove(cur, ncur);
    if (sock_trim(cur, ncur, t))
        waiting = 1;
    UNLOCK();
    free(N.ts);
    N.ts = cur;
    N.nts = ncur;
    return waiting;
}

/* The guard's pass (progress thread, no lock held): close accepted
   endpoints that failed or did not authenticate in time, look at the
   connections UCX accepted.  Runs when a listening socket has a new
   connection, and every GUARD_EVERY_NS while anything is pending. */
static void
guard_pass(uint64_t t)
{
    ucp_ep_h eps[64];
    int n = 0, k, waiting = 0;
    uint32_t i;

    LOCK();
    if (N.guard_at == 0 || t < N.guard_at) {
        UNLOCK();
        return;
    }
    N.guard_at = 0;
    for (i = 0; i < acc_hi; i++) {
        struct acc *a = &acc_tab[i];
        if (a->ep == NULL || a->ep == (ucp_ep_h)1)
            continue;
        if (a->dead || (!a->authed && t >= a->deadline)) {
            if (n == (int)(sizeof(eps) / sizeof(eps[0]))) {
                waiting = 1;
                break;
            }
            if (!a->authed) {
                N.npending--;
                if (!a->dead) {
                    fab_rx_denied();
                    N.log_closed++;
                }
            }
            auth_drop_acc(acc_ref(i));
            eps[n++] = a->ep;
            a->ep = NULL;
            continue;
        }
        if (!a->authed)
            waiting = 1;
    }
    UNLOCK();
    for (k = 0; k < n; k++)
        ep_close_force(eps[k]);
    N.guard_scan = t;
    if (sock_scan(t))
        waiting = 1;
    LOCK();
    if (waiting && (N.guard_at == 0 || N.guard_at > t + GUARD_EVERY_NS))
        N.guard_at = t + GUARD_EVERY_NS;
    guard_log(t);
    UNLOCK();
}

/* The guard's pass if one is due (progress thread). */
void
fab_guard_maybe(uint64_t t)
{
    if (N.nlsn != 0 && t - N.guard_scan >= GUARD_IDLE_NS) {
        LOCK();
        if (N.guard_at == 0 || N.guard_at > t)
            N.guard_at = t;
        UNLOCK();
    }
    if (__atomic_load_n(&N.guard_at, __ATOMIC_RELAXED) != 0)
        guard_pass(t);
}

/* Something for the guard in epoll events ev[0..n)? */
void
fab_guard_events(const struct epoll_event *ev, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (ev[i].data.u64 == GUARD_TAG) {
            LOCK();
            N.guard_at = 1;
            UNLOCK();
            return;
        }
}
