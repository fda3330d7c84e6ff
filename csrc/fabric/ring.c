/* ring.c - same-host request rings: making a ring to a peer and
   having it mapped (AM_CTL_RINGOPEN), accepting and running the rings to
   this node, waking a sleeping receiver (AM_CTL_BELL), releasing the
   rings of dead senders.  The writer (ring_put) is inline in fabric.h;
   struct ring is described there. */
#include "fabric.h"

void
fab_ring_name(char *buf, size_t n, uint64_t src, uint64_t dst)
{
    snprintf(buf, n, "%s/ring-%016llx-%016llx", N.dir,
             (unsigned long long)src, (unsigned long long)dst);
}

/* The whole header of a short entry (struct ring_short at k, plen bytes
   of payload, from node src); a short entry is a SEND or nothing. */
static void
short_header(struct wire *h, const uint8_t *k, size_t plen, uint64_t src)
{
    struct ring_short s;
    memcpy(&s, k, sizeof(s));   /* once: the sender may write meanwhile */
    memset(h, 0, sizeof(*h));
    memcpy(h, &s, 24);
    memcpy(&h->src_lid, &s.src_lid, 8);
    h->src_guid = src;
    h->len = (uint32_t)plen;
    h->ack_psn = s.ack_psn;
    h->ack_epoch = s.ack_epoch;
    h->sid = s.sid;
    if (h->op != OP_SEND)
        h->kind = 0;            /* malformed: dropped and counted */
}

/* Execute the entries ring r holds (N.lock held); return how many. */
static unsigned
ring_run(struct ring *r)
{
    uint64_t head = r->head;
    unsigned n = 0;
    int k;
    for (k = 0; k < RING_SLOTS; k++, head++) {
        const struct ring_slot *e = &r->s[head & (RING_SLOTS - 1)];
        struct wire h;
        uint32_t len;
        size_t hl;
        if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != (uint32_t)(head + 1))
            break;
        len = e->len;
        if (len & RING_SHORT) {
            len &= ~RING_SHORT;
            hl = sizeof(struct ring_short);
            if (len < hl || len > RING_DATA) {
                fab_rx_bad();
                continue;       /* corrupt: skipped */
            }
            short_header(&h, e->data, len - hl, r->src_guid);
        }
        else {
            hl = sizeof(h);
            if (len < hl || len > RING_DATA) {
                fab_rx_bad();
                continue;       /* corrupt: skipped */
            }
            memcpy(&h, e->data, sizeof(h));
        }
        if (h.kind != AM_REQ || !fab_msg_check(&h, len - hl))
            fab_rx_bad();
        else if (h.src_guid != r->src_guid)
            fab_rx_denied();        /* the ring is its sender's only */
        else
            fab_am_dispatch(&h, e->data + hl, len - hl);
        n++;
    }
    __atomic_store_n(&r->head, head, __ATOMIC_RELEASE);
    return n;
}

/* Execute what the request rings to this node hold; return how many. */
unsigned
fab_rings_poll(void)
{
    uint32_t i, nr = __atomic_load_n(&N.nrx, __ATOMIC_ACQUIRE);
    unsigned n = 0;

    for (i = 0; i < nr; i++) {
        struct ring *r = N.rx[i];
        uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
        if (__atomic_load_n(&r->s[head & (RING_SLOTS - 1)].seq,
                            __ATOMIC_ACQUIRE) != (uint32_t)(head + 1))
            continue;           /* nothing new */
        LOCK();
        n += ring_run(r);
        UNLOCK();
    }
    return n;
}

/* Release the rings of senders that died (every 100 ms, N.lock held; a
   sender's pid is one of this pid namespace: a node makes a ring only to
   a peer whose key page it maps, which it does only in its own pid
   namespace, peer.c):
   what a sender wrote before it died is executed (a NIC delivers what
   was on the wire), then its memory goes and the entry's address holds
   zeros for a reader that still looks at it, until the next ring
   accepted takes it (fab_ring_accept).  Without this a node that outlives
   many senders would keep their rings mapped and looked at, and after
   MAX_RX_RINGS of them take no more rings. */
void
fab_rings_check(uint64_t t)
{
    uint32_t i;
    if (t < N.ring_check)
        return;
    N.ring_check = t + 100000000ull;
    for (i = 0; i < N.nrx; i++) {
        struct ring *r = N.rx[i];
        if (N.rx_free[i] || fab_pid_alive(r->pid))
            continue;
        ring_run(r);
        if (mmap(r, sizeof(*r), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            continue;           /* stays as it is (looked at, harmless) */
        N.rx_free[i] = 1;
        if (N.sh != NULL)
            N.sh->st_ring_gone++;
    }
}

/* Is r a ring from src to this node? */
static int
ring_valid(const struct ring *r, uint64_t src)
{
    return r->magic == RING_MAGIC && r->version == RING_VERSION &&
           r->src_guid == src && r->dst_guid == N.guid;
}

/* Map the ring a same-host node made for its requests to this node (on
   its AM_CTL_RINGOPEN); on any failure it keeps using UCP. */
void
fab_ring_accept(uint64_t src)
{
    char path[300];
    struct ring *r, *at = NULL;
    uint32_t i;

    if (N.sh == NULL || src == N.guid)
        return;
    fab_ring_name(path, sizeof(path), src, N.guid);
    r = fab_shm_file_map(path, sizeof(*r), O_NOFOLLOW, NULL);
    if (r == NULL)
        return;
    if (!ring_valid(r, src)) {
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    r->head = 0;                /* the writer starts once open is set */
    /* the progress thread may be asleep without knowing this ring: its
       first writer rings once (the thread clears it when it wakes) */
    __atomic_store_n(&r->sleep, 1, __ATOMIC_SEQ_CST);
    LOCK();
    for (i = 0; i < N.nrx; i++)
        if (N.rx_free[i])
            break;
    if (i < N.nrx) {
        /* the entry of a dead sender's ring: the ring is mapped again at
           its address, in place of the zeros there (one mmap: a reader
           without N.lock sees zeros or this ring) */
        at = fab_shm_file_map(path, sizeof(*r), O_NOFOLLOW, N.rx[i]);
        if (at != N.rx[i] || !ring_valid(at, src)) {
            if (at != NULL)     /* (the file changed meanwhile) */
                mmap(N.rx[i], sizeof(*r), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            UNLOCK();
            munmap(r, sizeof(*r));
            unlink(path);
            return;
        }
        N.rx_free[i] = 0;
    }
    else if (N.nrx == MAX_RX_RINGS) {
        UNLOCK();
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    else {
        N.rx[N.nrx] = r;
        __atomic_store_n(&N.nrx, N.nrx + 1, __ATOMIC_RELEASE);
    }
    UNLOCK();
    unlink(path);               /* both sides have it mapped now */
    if (at != NULL) {
        munmap(r, sizeof(*r));  /* the first mapping: not needed */
        r = at;
    }
    __atomic_store_n(&r->open, 1, __ATOMIC_RELEASE);
}

static void
ctl_sent_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    free(user);
    U.request_free(req);
}

/* Send a control message (AM_CTL_*) to p through UCP (no lock held). */
static void
ctl_send(struct peer *p, int kind)
{
    struct wire *h = calloc(1, sizeof(*h));
    ucp_request_param_t prm;
    ucs_status_ptr_t r;

    if (h == NULL)
        return;
    h->kind = (uint8_t)kind;
    h->src_guid = N.guid;
    h->sid = p->tx_sid;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = ctl_sent_cb;
    prm.user_data = h;
    r = U.am_send_nbx(p->ep, AM_REQ, h, sizeof(*h), NULL, 0, &prm);
    if (!UCS_PTR_IS_PTR(r))
        free(h);
}

/* Rings are shared memory: used when UCX may use it too (UCX_TLS unset,
   or naming a shared-memory transport), so that UCX_TLS=tcp still means
   TCP; RDMA_UCX_NO_RING=1 turns them off. */
int
fab_ring_allowed(void)
{
    if (FAB_SET_NUM(UCX_NO_RING))
        return 0;
    return fab_tls_shm();
}

/* May UCX use shared memory (UCX_TLS unset, or naming a shared-memory
   transport)?  1 or 0. */
int
fab_tls_shm(void)
{
    const char *tls = FAB_SET_TEXT(UCX_TLS);
    int shm;
    if (tls == NULL || tls[0] == '\0')
        return 1;
    shm = strstr(tls, "shm") != NULL || strstr(tls, "sm") != NULL ||
          strstr(tls, "posix") != NULL || strstr(tls, "sysv") != NULL;
    if (tls[0] == '^')                  /* all but those listed */
        return !shm;
    return shm || strstr(tls, "all") != NULL;
}

/* Make the request ring to same-host peer p and ask it to map it (once
   per peer; no lock held). */
void
fab_ring_make(struct peer *p)
{
    char path[300], tmp[320];
    struct ring *r;
    int zero = 0;

    if (!__atomic_compare_exchange_n(&p->ring_state, &zero, -1, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;                 /* made, or being made, or never */
    if (!fab_ring_allowed())
        return;
    fab_ring_name(path, sizeof(path), N.guid, p->guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
    r = fab_shm_file_create(tmp, sizeof(*r));
    if (r == NULL)
        return;
    r->magic = RING_MAGIC;
    r->version = RING_VERSION;
    r->pid = (int32_t)getpid();
    r->src_guid = N.guid;
    r->dst_guid = p->guid;
    if (rename(tmp, path) != 0) {
        munmap(r, sizeof(*r));
        unlink(tmp);
        return;
    }
    LOCK();
    if (p->failed) {            /* gone meanwhile */
        UNLOCK();
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    r->wcpu = N.poll_cpu;
    p->tx = r;
    p->tx_head = p->tx_tail = 0;
    __atomic_store_n(&p->ring_state, 1, __ATOMIC_RELEASE);
    UNLOCK();
    ctl_send(p, AM_CTL_RINGOPEN);
}

/* The progress thread is about to sleep (1) or awake (0): tell the
   writers of this node's rings. */
void
fab_rings_sleep(uint32_t v)
{
    uint32_t i, nr = __atomic_load_n(&N.nrx, __ATOMIC_ACQUIRE);
    for (i = 0; i < nr; i++)
        if (!__atomic_load_n(&N.rx_free[i], __ATOMIC_RELAXED) &&
            __atomic_load_n(&N.rx[i]->sleep, __ATOMIC_RELAXED) != v)
            __atomic_store_n(&N.rx[i]->sleep, v, __ATOMIC_SEQ_CST);
}

/* Wake p's progress thread (no lock held). */
void
fab_ring_bell(struct peer *p)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_ring_bell, 1, __ATOMIC_RELAXED);
    ctl_send(p, AM_CTL_BELL);
}

/* This node's poll_cq now runs on CPU cpu1 - 1: tell the receivers of
   its rings (struct ring.wcpu; no lock held). */
void
fab_rings_cpu(uint32_t cpu1)
{
    int i;
    LOCK();
    N.poll_cpu = cpu1;
    for (i = 0; i < N.npeers; i++)
        if (N.peers[i]->tx != NULL)
            __atomic_store_n(&N.peers[i]->tx->wcpu, cpu1, __ATOMIC_RELAXED);
    UNLOCK();
}

/* Does a node that writes into this node's rings poll on CPU cpu1 - 1,
   the one the caller runs on (so that it runs only when the caller lets
   it)?  1 or 0.  A released ring's entry reads as zeros: never. */
int
fab_rings_near(uint32_t cpu1)
{
    uint32_t i, nr = __atomic_load_n(&N.nrx, __ATOMIC_ACQUIRE);
    for (i = 0; i < nr; i++)
        if (__atomic_load_n(&N.rx[i]->wcpu, __ATOMIC_RELAXED) == cpu1)
            return 1;
    return 0;
}
