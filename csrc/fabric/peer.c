/* peer.c - peers and addressing: node records and LID claims in the
   rendezvous directory, stale-file sweeps, the endpoint to each peer node
   (peer_get, with its HELLO), a peer's liveness and failure, and AH
   resolution (GID or LID to peer). */
#include "fabric.h"

/* ------------------------------------------------------------------ */
/* peers and addressing                                                */

static void
ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct peer *p = arg;
    (void)ep;
    (void)status;
    LOCK();
    if (p != NULL)
        fab_peer_fail_locked(p);
    UNLOCK();
}

/* The state of process pid: 0 if it is gone, 'Z' if it is a zombie or
   dead, else its letter in /proc/<pid>/stat ('R', 'S', 'D', 'T' stopped,
   't' traced...), '?' where /proc cannot be read.  kill(pid, 0) also
   succeeds for a zombie (a process that was killed and not yet reaped by
   its parent: its memory and its node are gone, but writes "to" it kept
   completing), so the state decides. */
char
fab_pid_state(pid_t pid)
{
    char path[40], buf[512];
    const char *rp;
    ssize_t n;
    int fd;

    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT ? '?' : 0;   /* ENOENT: it went meanwhile */
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return '?';
    buf[n] = '\0';
    /* "pid (comm) S ...": comm may hold spaces and parentheses */
    rp = strrchr(buf, ')');
    if (rp == NULL || rp[1] != ' ' || rp[2] == '\0')
        return '?';
    return rp[2] == 'X' ? 'Z' : rp[2];
}

/* Is process pid alive (not gone, not a zombie)? */
int
fab_pid_alive(pid_t pid)
{
    char c = fab_pid_state(pid);
    return c != 0 && c != 'Z';
}

/* Liveness across pid namespaces.  A pid names a process only in its own
   pid namespace (a node in a container that shares /dev/shm with the
   host has pid 1 in its record, and sees none of the host's pids), so
   the owner of a node record or LID claim holds an open file description
   lock (F_OFD_SETLK) on it for as long as it lives: the kernel drops it
   when the process ends, in whatever namespace, even by SIGKILL, before
   it is a zombie.  A reader asks whether the lock is held (F_OFD_GETLK,
   which takes nothing).  A child of fork() would share the description,
   and so the lock: the node closes it in the child (node.c). */

static void
whole_file(struct flock *l, short type)
{
    memset(l, 0, sizeof(*l));
    l->l_type = type;
    l->l_whence = SEEK_SET;     /* from 0, l_len 0: the whole file */
}

/* Hold the liveness lock on fd (opened for writing); 0 or -1. */
int
fab_file_hold(int fd)
{
    struct flock l;
    whole_file(&l, F_WRLCK);
    return fcntl(fd, F_OFD_SETLK, &l);
}

/* Does a living process hold the liveness lock of the file open at fd?
   1 or 0; -1 if the kernel cannot tell (no OFD locks: before Linux 3.15). */
int
fab_file_held(int fd)
{
    struct flock l;
    whole_file(&l, F_RDLCK);
    if (fcntl(fd, F_OFD_GETLK, &l) != 0)
        return -1;
    return l.l_type != F_UNLCK;
}

/* fab_file_held, or where it cannot tell, whether pid lives. */
static int
held_or_pid(int fd, pid_t pid)
{
    int h = fab_file_held(fd);
    return h >= 0 ? h : fab_pid_alive(pid);
}

/* Is the node guid of this host alive (its record there and held)?
   1 or 0. */
int
fab_record_alive(uint64_t guid)
{
    char path[300];
    struct record r;
    int fd, alive;

    snprintf(path, sizeof(path), "%s/node-%016llx", N.dir,
             (unsigned long long)guid);
    fd = fab_priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    alive = fab_file_held(fd);
    if (alive < 0)
        alive = read(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) &&
                r.magic == REC_MAGIC && fab_pid_alive(r.pid);
    close(fd);
    return alive;
}

/* Read the record of guid into *rec and a malloc'd address, and whether
   its node lives into *alive; 0 or -1. */
static int
record_read(uint64_t guid, struct record *rec, void **addr, int *alive)
{
    char path[300];
    int fd;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/node-%016llx", N.dir,
             (unsigned long long)guid);
    fd = fab_priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return -1;
    n = read(fd, rec, sizeof(*rec));
    if (n != (ssize_t)sizeof(*rec) || rec->magic != REC_MAGIC ||
        rec->alen > (1 << 20)) {
        close(fd);
        return -1;
    }
    *addr = malloc(rec->alen ? rec->alen : 1);
    if (*addr == NULL || read(fd, *addr, rec->alen) != (ssize_t)rec->alen) {
        free(*addr);
        *addr = NULL;
        close(fd);
        return -1;
    }
    *alive = held_or_pid(fd, rec->pid);
    close(fd);
    return 0;
}

/* Read a LID claim ("<pid> <guid>\n", claim_lid) from fd; 0 or -1. */
static int
lid_claim_read(int fd, int *pid, uint64_t *guid)
{
    char buf[64];
    unsigned long long g;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%d %llx", pid, &g) != 2)
        return -1;
    *guid = g;
    return 0;
}

/* The GUID that owns lid on this host, or 0. */
uint64_t
fab_lid_owner(uint16_t lid)
{
    char path[300];
    int fd, pid = 0, rc;
    uint64_t g = 0;

    snprintf(path, sizeof(path), "%s/lid-%04x", N.dir, lid);
    fd = fab_priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    rc = lid_claim_read(fd, &pid, &g);
    if (rc == 0 && !held_or_pid(fd, pid))
        rc = -1;
    close(fd);
    return rc < 0 ? 0 : g;
}

/* A temporary file (<name>.tmp<writer's pid>) is left behind when its
   writer (which renames it within a moment) is gone: its pid is dead here
   and the file is older than this.  The pid alone does not say (the
   writer may be in another pid namespace, where that pid is another
   process or none). */
#define TMP_STALE_S 60

/* Is the file name of the rendezvous directory one a process that ended
   left behind?  1 or 0 (0 also: not one of the fabric's, not readable,
   or of another boot: left alone). */
static int
file_stale(const char *name)
{
    char path[600];
    const char *tmp = strstr(name, ".tmp");
    struct stat sb;
    int fd, stale = 0;

    if (strncmp(name, "node-", 5) != 0 && strncmp(name, "keys-", 5) != 0 &&
        strncmp(name, "lid-", 4) != 0 && strncmp(name, "ring-", 5) != 0 &&
        strncmp(name, "cm-", 3) != 0)
        return 0;                       /* not ours */
    snprintf(path, sizeof(path), "%s/%s", N.dir, name);
    if (tmp != NULL)
        return lstat(path, &sb) == 0 &&
               time(NULL) - sb.st_mtime > TMP_STALE_S &&
               !fab_pid_alive((pid_t)atoi(tmp + 4));
    if (name[0] == 'k' || name[0] == 'r')
        /* a key page or a request ring lives as long as its owner's
           record (made after it, removed before it) */
        return !fab_record_alive(strtoull(name + 5, NULL, 16));
    fd = fab_priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    if (name[0] == 'n') {
        struct record r;
        if (read(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) &&
            r.magic == REC_MAGIC &&
            strncmp(r.boot_id, N.boot_id, sizeof(r.boot_id)) == 0)
            stale = !held_or_pid(fd, r.pid);
    }
    else {                      /* a LID or CM port claim (cm_addr.c) */
        int p;
        uint64_t g;
        if (lid_claim_read(fd, &p, &g) == 0)
            stale = !held_or_pid(fd, p);
    }
    close(fd);
    return stale;
}

/* Remove what dead processes left in the rendezvous directory (node
   record, key page, LID and CM port claims, request rings, temporary
   files).  A node
   removes its own files at exit; a crash or SIGKILL leaves them, and they
   used to pile up (thousands after many test runs).  Only a file whose
   owner is known to have ended (file_stale) goes. */
void
fab_sweep_stale(void)
{
    DIR *d = opendir(N.dir);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (file_stale(e->d_name)) {
            char path[600];
            snprintf(path, sizeof(path), "%s/%s", N.dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

int
fab_same_host(const struct record *r)
{
    return r->netns == N.netns && strcmp(r->boot_id, N.boot_id) == 0;
}

/* Endpoint parameters ep for node guid at the listener its GUID names
   (IPv4 and port; TCP), in *sin, which the caller keeps until the
   endpoint is made; 0 or -1 with *st set, naming func. */
static int
ep_by_sockaddr(uint64_t guid, ucp_ep_params_t *ep, struct sockaddr_in *sin,
               struct pyrdma_status *st, const char *func)
{
    uint32_t ip;
    uint16_t port;
    uint64_t be = htobe64(guid);
    memcpy(&ip, (uint8_t *)&be, 4);
    memcpy(&port, (uint8_t *)&be + 4, 2);
    if (fab_forked_from_node)
        return pyrdma_fail(st, EOPNOTSUPP, "ibv_modify_qp",
                           "fabric node %016llx is reached over tcp, "
                           "and " FORK_TCP_MSG, (unsigned long long)guid);
    if (port == 0 || ip == 0)
        return pyrdma_fail(st, EHOSTUNREACH, func,
                           "fabric node %016llx is not on this host and "
                           "has no listener (set RDMA_UCX_ADDR on both "
                           "hosts)", (unsigned long long)guid);
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = ip;
    sin->sin_port = port;
    ep->field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    ep->flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep->sockaddr.addr = (struct sockaddr *)sin;
    ep->sockaddr.addrlen = sizeof(*sin);
    ep->err_mode = UCP_ERR_HANDLING_MODE_PEER;
    return 0;
}

/* The GUID of the node of this host with LID lid (*guid 0 and lid not 0:
   the address gave a LID only); 0 or -1 with *st set, naming func. */
static int
guid_of_lid(uint64_t *guid, uint16_t lid, struct pyrdma_status *st,
            const char *func)
{
    if (*guid != 0 || lid == 0)
        return 0;
    *guid = lid == N.lid ? N.guid : fab_lid_owner(lid);
    if (*guid == 0)
        return pyrdma_fail(st, EHOSTUNREACH, func,
                           "no fabric node has LID 0x%x on this host "
                           "(rendezvous directory %s); use the GID to "
                           "reach another host", lid, N.dir);
    return 0;
}

/* The live peer of guid we have already, or NULL. */
static struct peer *
peer_find(uint64_t guid)
{
    struct peer *p = NULL;
    int i;
    LOCK();
    for (i = 0; i < N.npeers; i++)
        if (N.peers[i]->guid == guid && !N.peers[i]->failed) {
            p = N.peers[i];
            break;
        }
    UNLOCK();
    return p;
}

/* What peer_get learns of a node from its record. */
struct route {
    struct record rec;
    void *addr;            /* its worker address (malloc'd) or NULL */
    int rec_ok;            /* rec was read */
    int alive;             /* its process lives */
    int have_rec;          /* same host, same pid namespace: by rec */
    struct sockaddr_in sin; /* otherwise its listener */
};

/* How to reach p (of guid): ourselves by our worker's address; a node of
   this host and pid namespace by its worker's address (its record);
   anything else by its listener, over TCP.  Fills ep; 0 or -1 with *st
   set, naming func. */
static int
peer_route(struct peer *p, ucp_ep_params_t *ep, struct route *r,
           struct pyrdma_status *st, const char *func)
{
    uint64_t guid = p->guid;
    if (guid == N.guid) {
        ep->field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep->address = N.waddr;
        p->lid = N.lid;
        p->pid = getpid();
        return 0;
    }
    r->rec_ok = record_read(guid, &r->rec, &r->addr, &r->alive) == 0;
    if (r->rec_ok && fab_same_host(&r->rec) && r->alive &&
        r->rec.pidns == N.pidns) {
        r->have_rec = 1;
        ep->field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep->address = r->addr;
        p->lid = r->rec.lid;
        p->pid = r->rec.pid;
        return 0;
    }
    /* a node of this host in another pid namespace (a container sharing
       /dev/shm): its pid means nothing here (no cross-memory attach, no
       pid check: its record's lock says whether it lives), and UCX's
       shared-memory transports cannot reach it from here (an endpoint to
       its worker address times out): its listener, over TCP */
    p->rec_live = r->rec_ok && r->alive && fab_same_host(&r->rec);
    return ep_by_sockaddr(guid, ep, &r->sin, st, func);
}

/* The key of our HELLO to guid: a node of this host (any network
   namespace) publishes its own, else RDMA_UCX_SECRET, else none
   (NULL).  *mode: HELLO_*; nkey: room for a copied key. */
static const uint64_t *
hello_key(uint64_t guid, const struct route *r, uint64_t nkey[2], int *mode)
{
    if (guid == N.guid) {
        *mode = HELLO_NODE;
        return N.secret;
    }
    if (r->rec_ok && strcmp(r->rec.boot_id, N.boot_id) == 0) {
        memcpy(nkey, r->rec.secret, 2 * sizeof(*nkey));
        *mode = HELLO_NODE;
        return nkey;
    }
    if (N.have_shared) {
        *mode = HELLO_SHARED;
        return N.shared;
    }
    *mode = HELLO_NONE;
    return NULL;
}

/* Same host: p's key page opens the one-sided fast path (with a cache
   of its MR keys). */
static void
peer_map_keys(struct peer *p, int have_rec)
{
    if (p->guid == N.guid) {
        p->sh = N.sh;
        p->local = fab_ring_allowed();
    }
    else if (have_rec && N.sh != NULL)
        p->sh = fab_sh_map(p->guid);
    if (p->sh != NULL && (p->rk = calloc(SH_MR, sizeof(*p->rk))) == NULL) {
        if (p->sh != N.sh)
            munmap(p->sh, sizeof(*p->sh));
        p->sh = NULL;
    }
}

/* Add p to the node's peers.  0 or -1 with *st set. */
static int
peer_add(struct peer *p, struct pyrdma_status *st)
{
    struct auth *a;
    LOCK();
    if (N.npeers == N.cpeers) {
        int nc = N.cpeers ? N.cpeers * 2 : 16;
        struct peer **np = realloc(N.peers, sizeof(*np) * (size_t)nc);
        if (np == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "realloc", "");
        }
        N.peers = np;
        N.cpeers = nc;
    }
    a = fab_auth_find(p->guid);
    p->rx_sid = a != NULL ? a->sid : 0;
    N.peers[N.npeers++] = p;
    UNLOCK();
    return 0;
}

/* Find or make the peer for (guid, lid); dgid_known: guid came from a
   GID.  Return 0 or -1 with *st set, naming func (the verb resolving the
   address).  Called without N.lock. */
static int
peer_get(uint64_t guid, uint16_t lid, struct peer **out,
         struct pyrdma_status *st, const char *func)
{
    struct peer *p;
    struct route r;
    ucp_ep_params_t ep;
    ucs_status_t s;
    const uint64_t *key;
    uint64_t nkey[2];
    int mode;

    if (guid_of_lid(&guid, lid, st, func) < 0)
        return -1;
    if ((*out = peer_find(guid)) != NULL)
        return 0;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    p->guid = guid;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.err_handler.cb = ep_err_cb;
    ep.err_handler.arg = p;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    memset(&r, 0, sizeof(r));
    if (peer_route(p, &ep, &r, st, func) < 0) {
        free(r.addr);
        free(p);
        return -1;
    }
    key = hello_key(guid, &r, nkey, &mode);
    s = U.ep_create(N.w, &ep, &p->ep);
    free(r.addr);
    if (s != UCS_OK) {
        free(p);
        return ucs_fail(st, s, "ucp_ep_create", "connecting to a fabric node");
    }
    fab_hello_send(p, key, mode);
    peer_map_keys(p, r.have_rec);
    if (peer_add(p, st) < 0)
        return -1;
    wake_progress();
    *out = p;
    return 0;
}

/* Resolve an address vector to a peer. */
int
fab_ah_resolve(const struct pyrdma_ah_attr *a, struct peer **out,
               struct pyrdma_status *st, const char *func)
{
    uint64_t guid = 0;
    if (a->port_num > 1)
        return pyrdma_fail(st, EINVAL, func, "port_num %u: the fabric "
                           "device has one port", a->port_num);
    if (a->is_global) {
        if (a->grh.sgid_index != 0)
            return pyrdma_fail(st, EINVAL, func, "sgid_index %u: only GID "
                               "entry 0 is set", a->grh.sgid_index);
        if (a->grh.dgid[0] == 0xff)
            return pyrdma_fail(st, EOPNOTSUPP, func, "multicast is not "
                               "supported by the ucx fabric");
        memcpy(&guid, a->grh.dgid + 8, 8);
        guid = be64toh(guid);
        if (guid == 0)
            return pyrdma_fail(st, EINVAL, func, "the DGID has no GUID");
        return peer_get(guid, 0, out, st, func);
    }
    if (a->dlid == 0 || a->dlid >= 0xC000)
        return pyrdma_fail(st, EINVAL, func, "dlid 0x%x is not a unicast "
                           "LID (and the ah_attr has no GRH)", a->dlid);
    return peer_get(0, a->dlid, out, st, func);
}

/* ------------------------------------------------------------------ */
/* a peer's failure                                                   */

/* A peer is gone: its QPs' outstanding WRs fail, the request ring to it
   goes (ring_put takes no ring of a failed peer).  N.lock held. */
void
fab_peer_fail_locked(struct peer *p)
{
    int k;
    p->failed = 1;
    if (p->tx != NULL) {
        if (!__atomic_load_n(&p->tx->open, __ATOMIC_ACQUIRE)) {
            char path[300];     /* never mapped: its file is still there */
            fab_ring_name(path, sizeof(path), N.guid, p->guid);
            unlink(path);
        }
        munmap(p->tx, sizeof(*p->tx));
        p->tx = NULL;
    }
    for (k = 0; k < (int)N.qp_hi; k++) {
        struct uqp *q = N.qps[k];
        if (q != NULL && q->peer == p && !q->destroyed)
            fab_sq_fail_outstanding(q, IBV_WC_RETRY_EXC_ERR);
    }
}

/* ------------------------------------------------------------------ */
/* for the connection manager (cm_msg.c, cm_addr.c)                   */

/* The peer of node guid (made and authenticated if new; blocks while
   it says HELLO); 0 or -1 with *st set.  Without N.lock. */
int
fab_peer_of(uint64_t guid, struct peer **out, struct pyrdma_status *st)
{
    return peer_get(guid, 0, out, st, "rdma_connect");
}

/* Do we have a live peer of node guid already (no HELLO to wait for)?
   Without N.lock. */
int
fab_peer_known(uint64_t guid)
{
    return peer_find(guid) != NULL;
}

/* Does node guid live?  Its record says, where it has one in the
   rendezvous directory; else its peer's endpoint (failed: gone), else
   it is taken to live.  Without N.lock. */
int
fab_node_alive(uint64_t guid)
{
    struct record rec;
    void *addr = NULL;
    struct peer *p;
    int alive = 0;

    if (guid == N.guid)
        return 1;
    if (record_read(guid, &rec, &addr, &alive) == 0) {
        free(addr);
        return alive;
    }
    LOCK();
    for (int i = 0; i < N.npeers; i++)
        if (N.peers[i]->guid == guid) {
            p = N.peers[i];
            if (!p->failed) {
                UNLOCK();
                return 1;
            }
        }
    UNLOCK();
    return 0;
}

/* The network namespace (inode) of node guid of this host, if it lives:
   1, or 0. */
int
fab_node_netns(uint64_t guid, unsigned long *netns)
{
    struct record rec;
    void *addr = NULL;
    int alive = 0;

    if (guid == N.guid) {
        *netns = N.netns;
        return 1;
    }
    if (record_read(guid, &rec, &addr, &alive) < 0)
        return 0;
    free(addr);
    *netns = rec.netns;
    return alive && strcmp(rec.boot_id, N.boot_id) == 0;
}
