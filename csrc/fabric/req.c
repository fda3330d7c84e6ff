/* req.c - the requester: post_send (WR checks, slots, the request
   header, ring or UCP transmission, the ACK a request carries), the
   one-sided fast path into a same-host peer's memory (fast_op), and
   UCP's send completions. */
#include "fabric.h"

/* UCP finished sending a request (not called for immediate completions). */
static void
req_sent_cb(void *req, ucs_status_t status, void *user)
{
    struct slot *s = user;
    struct uqp *q;
    LOCK();
    q = s->qp;                  /* NULL: the QP is gone (slot in a grave) */
    if (s->inflight && q != NULL)
        q->n_inflight--;
    s->inflight = 0;
    if (q != NULL && (uint32_t)(s->idx - q->sq_head) <
                     (uint32_t)(q->sq_tail - q->sq_head) && !s->done &&
        s->need_send == 0) {
        if (status != UCS_OK)
            fab_sq_fail(q, s->idx, IBV_WC_RETRY_EXC_ERR);
        else if (q->type != IBV_QPT_RC) {
            s->done = 1;        /* UC/UD: complete once sent */
            s->status = IBV_WC_SUCCESS;
        }
        fab_sq_advance(q);
    }
    else if (q != NULL && status != UCS_OK)
        s->imm_done = -1;       /* post_send is still finishing it */
    UNLOCK();
    U.request_free(req);
}

/* memcpy for 1 to 16 bytes, without a call (the 8-byte WRITE rate) */
static inline void
copy_small(uint8_t *d, const uint8_t *s, size_t n)
{
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
    }
    else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    }
    else
        while (n--)
            *d++ = *s++;
}

/* Copy the (checked) s/g data of wr, len bytes in all, to dst. */
static inline void
copy_sges(uint8_t *dst, const struct pyrdma_send_wr *wr, uint64_t len)
{
    size_t off = 0;
    int i;
    if (wr->num_sge == 1 && len <= 16) {
        copy_small(dst, (const uint8_t *)(uintptr_t)wr->sg_list[0].addr,
                   (size_t)len);
        return;
    }
    for (i = 0; i < wr->num_sge; i++) {
        if (wr->sg_list[i].length)
            memcpy(dst + off, (const void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
        off += wr->sg_list[i].length;
    }
}

/* Copy the local s/g data of a WR into the slot buffer after the header;
   return 0 or an IBV_WC_* status. */
static int
gather(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr,
       size_t total, int inline_data)
{
    size_t need = sizeof(struct wire) + total, off = sizeof(struct wire);
    if (!inline_data) {
        int bad = fab_check_sges(q->pd, wr->sg_list, wr->num_sge, 0,
                                 IBV_WC_LOC_QP_OP_ERR);
        if (bad)
            return bad;
    }
    if (need > s->cap) {
        uint8_t *b = malloc(need);
        if (b == NULL)
            return IBV_WC_LOC_QP_OP_ERR;
        if (s->buf != s->small)
            free(s->buf);
        s->buf = b;
        s->cap = need;
    }
    copy_sges(s->buf + off, wr, total);
    s->len = need;
    return 0;
}

static int
mtu_bytes(int mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 4096;
}

/* Complete slot s (being filled, not yet counted in the SQ) with an error
   at once; later WRs flush. */
static void
fill_fail(struct uqp *q, struct slot *s, int status)
{
    s->done = 1;
    s->status = status;
    q->err_pending = 1;
}

/* The in-flight counts a post_send call holds (one atomic add per target
   QP and MR per call, not per WR; dropped before post_send returns). */
struct fhold {
    uint32_t *qp, *mr;
    /* the local MR a one-sided WR of this post_send call last read from
       (N.lock is held throughout: it cannot go away): later WRs within
       it skip the key lookup */
    const struct umr *lmr;
    uint32_t lkey;
    /* the QP's peer may take the one-sided path (nothing of this changes
       while N.lock is held; the QP's own error state can: fill_slot) */
    int fast_ok;
    /* one-sided ops done, for the key page's counters (fhold_drop) */
    uint32_t n_write, n_read, n_atomic;
    /* the last one-sided WRITE of this call into UCX-mapped memory (rkey
       0: none since, or a WR of the call took a slot): its target QP and
       MR entries, the MR's bounds and where it is mapped here (fast_op's
       shortcut for the next WRITE to the same MR) */
    uint32_t rep_rkey;
    struct sh_qp *rep_t;
    struct sh_mr *rep_m;
    uint64_t rep_lo, rep_len;
    uint8_t *rep_base;
};

/* Count an initiator out of *ctr, never below 0: a target that gave up
   waiting for it (fab_sh_quiesce) has reset the count already. */
static void
inflight_out(uint32_t *ctr)
{
    uint32_t v = __atomic_load_n(ctr, __ATOMIC_RELAXED);
    while (v != 0 && !__atomic_compare_exchange_n(ctr, &v, v - 1, 0,
                                                  __ATOMIC_SEQ_CST,
                                                  __ATOMIC_RELAXED))
        ;
}

static void
fhold_drop(struct fhold *h)
{
    if (h->n_write + h->n_read + h->n_atomic) {
        N.sh->st_fast_write += h->n_write;
        N.sh->st_fast_read += h->n_read;
        N.sh->st_fast_atomic += h->n_atomic;
        h->n_write = h->n_read = h->n_atomic = 0;
    }
    if (h->mr != NULL)
        inflight_out(h->mr);
    if (h->qp != NULL)
        inflight_out(h->qp);
    h->mr = h->qp = NULL;
    h->rep_rkey = 0;
}

/* Cross-memory attach: WRITE (or READ, write 0) len bytes between the
   local s/g list and the target's own memory at raddr, in pieces of at
   most CMA_PIECE bytes with the MR's key checked between them (so that a
   dereg_mr waits for at most one piece: cma_fence in mr.c).  1: done,
   0: the kernel refused before copying anything (not the same user, not
   dumpable, seccomp...: the active-message path takes the WR and this
   peer is not tried again), -1: failed (the target memory is not
   mapped, or the MR was withdrawn meanwhile: REM_ACCESS_ERR). */
#define CMA_PIECE (64u << 20)

/* The fence of a deregistration (cma_fence in mr.c) is the target's
   dumpable flag, which a caller with CAP_SYS_PTRACE (root) passes: such
   an initiator's thread lowers that capability from its effective set
   around its copy (capabilities are per thread), and raises it again. */
static int
cap_lower(struct __user_cap_data_struct d[2])
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    const uint32_t bit = 1u << (CAP_SYS_PTRACE & 31);
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    if (!(d[CAP_SYS_PTRACE >> 5].effective & bit))
        return 0;
    d[CAP_SYS_PTRACE >> 5].effective &= ~bit;
    if (syscall(SYS_capset, &h, d) != 0)
        return -1;
    d[CAP_SYS_PTRACE >> 5].effective |= bit;    /* to restore */
    return 1;
}

static void
cap_restore(struct __user_cap_data_struct d[2])
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    (void)syscall(SYS_capset, &h, d);
}

static int
cma_op(struct peer *p, const struct pyrdma_send_wr *wr, int write,
       uint64_t raddr, uint64_t len, const uint32_t *key, uint32_t rkey)
{
    struct iovec lv[MAX_SGE], rv;
    uint64_t done = 0;
    int i = 0;
    size_t skip = 0;            /* bytes of sg_list[i] already done */

    if (fab_cma_debug_stop) {
        fab_cma_debug_stop = 0;
        raise(SIGSTOP);
    }
    while (done < len) {
        uint64_t want = len - done < CMA_PIECE ? len - done : CMA_PIECE;
        uint64_t have = 0;
        unsigned long n = 0;
        ssize_t r;
        int j = i;
        size_t sk = skip;
        while (have < want && j < wr->num_sge) {
            uint64_t l = wr->sg_list[j].length - sk;
            if (l > want - have)
                l = want - have;
            if (l) {
                lv[n].iov_base = (void *)(uintptr_t)(wr->sg_list[j].addr + sk);
                lv[n].iov_len = (size_t)l;
                n++;
            }
            have += l;
            if (sk + l == wr->sg_list[j].length) {
                j++;
                sk = 0;
            }
            else
                sk += l;
        }
        rv.iov_base = (void *)(uintptr_t)(raddr + done);
        rv.iov_len = (size_t)want;
        if (done != 0 && __atomic_load_n(key, __ATOMIC_SEQ_CST) != rkey)
            return -1;
        if (N.cma_cap) {
            struct __user_cap_data_struct d[2];
            int lowered = cap_lower(d);
            if (lowered < 0)
                return done == 0 ? 0 : -1;
            r = write ? process_vm_writev(p->pid, lv, n, &rv, 1, 0)
                      : process_vm_readv(p->pid, lv, n, &rv, 1, 0);
            if (lowered)
                cap_restore(d);
        }
        else
            r = write ? process_vm_writev(p->pid, lv, n, &rv, 1, 0)
                      : process_vm_readv(p->pid, lv, n, &rv, 1, 0);
        if (r < 0 && done == 0 &&
            (errno == EPERM || errno == ESRCH || errno == ENOSYS)) {
            p->cma_off = 1;
            return 0;
        }
        if (r != (ssize_t)want)
            return -1;
        done += want;
        i = j;
        skip = sk;
    }
    return 1;
}

/* How a WR reaches its target: one of four carriers, chosen by
   carrier_of() and nowhere else.
   - CARRY_MAPPED: one-sided; the initiator copies into (or out of) the
     target's memory as UCX maps it here (shared memory, memory of
     alloc_mr, adopted memory), an atomic operates on it in place;
   - CARRY_CMA: one-sided; process_vm_writev/readv between the local s/g
     list and the target process's own memory (same host; WRITE and READ
     of at least N.cma_min bytes);
   - CARRY_RING: a slot whose request goes through the same-host target's
     request ring, executed by the target's poll_cq;
   - CARRY_LOCAL: a slot whose target is this process (an RC QP connected
     to a QP of this node) where rings are allowed (peer.local):
     post_send executes the request itself, as ring_run does a ring's
     (instead of handing it to UCP's self transport, which calls the
     same handler at once, for some 500 instructions more); only one that
     fits a ring entry, and while no earlier request of the QP is with
     UCP (order), else by UCP;
   - CARRY_AM: a slot whose request is a UCP active message.
   A one-sided WR that fails its checks when executed (fast_op returns 0)
   takes a slot after all (carrier_of again, one-sided carriers excluded),
   whose responder produces its error completion as on a NIC.  A request
   for the ring goes by UCP when the ring is full or a request of the same
   call went by UCP before it (order): ring_slots. */
enum carrier {
    CARRY_MAPPED,
    CARRY_CMA,
    CARRY_RING,
    CARRY_LOCAL,
    CARRY_AM,
};

/* The target MR key of a one-sided WR (op OP_WRITE..OP_FAA). */
static inline uint32_t
wr_rkey(const struct pyrdma_send_wr *wr, int op)
{
    return op >= OP_CAS ? wr->wr.atomic.rkey : wr->wr.rdma.rkey;
}

static inline uint64_t
wr_raddr(const struct pyrdma_send_wr *wr, int op)
{
    return op >= OP_CAS ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr;
}

/* The access a one-sided op needs of the target QP and MR. */
static inline unsigned
op_access(int op)
{
    return op == OP_WRITE ? IBV_ACCESS_REMOTE_WRITE :
           op == OP_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_ATOMIC;
}

/* May wr (op, len bytes: 8 for an atomic) of q go one-sided at all (N.lock
   held)?  RC to a peer whose memory UCX maps here (h->fast_ok), the QP
   not failing, a WRITE (with immediate data: its data only, the
   immediate follows in a slot, F_PLACED), a READ or an atomic, a target
   key that can name an MR. */
static inline int
one_sided_candidate(const struct uqp *q, const struct pyrdma_send_wr *wr,
                    int op, uint64_t len, const struct fhold *h)
{
    uint32_t idx = wr_rkey(wr, op) >> 8;
    return h->fast_ok && !q->err_pending && q->attr.qp_state != IBV_QPS_ERR &&
           (op >= OP_READ || wr->opcode == IBV_WR_RDMA_WRITE ||
            wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
           len != 0 && idx != 0 && idx < SH_MR;
}

/* Room in q's send queue for a WR done one-sided into this process's
   own memory (rkc.self): the slots outstanding and the completions still
   in the send CQ (a bound on this QP's: a NIC frees a send queue entry
   when its completion is polled) leave one.  Without room the WR takes a
   slot, so that a full send queue is refused (ENOMEM) as on a NIC. */
static inline int
self_sq_room(const struct uqp *q)
{
    const struct ucq *cq = q->scq;
    return (q->sq_tail - q->sq_head) +
           (cq->tail - __atomic_load_n(&cq->head, __ATOMIC_RELAXED)) <
           q->cap.max_send_wr;
}

/* THE CHOICE of carrier for wr (op, len bytes) of q (N.lock held; see
   enum carrier).  one_sided 0: a slot carrier only. */
static enum carrier
carrier_of(const struct uqp *q, const struct pyrdma_send_wr *wr, int op,
           uint64_t len, const struct fhold *h, int one_sided)
{
    const struct peer *p = q->peer;
    if (one_sided && one_sided_candidate(q, wr, op, len, h)) {
        uint32_t rkey = wr_rkey(wr, op);
        const struct rkc *c = &p->rk[rkey >> 8];
        /* c->key: the MR is in our cache of the target's keys
           (post_send's map_targets tried to put it there) */
        if (c->key == rkey && c->base != NULL &&
            (!c->self || self_sq_room(q)))
            return CARRY_MAPPED;
        /* the target's own memory: atomics need the target's CPU, and
           small WRs are cheaper through the ring */
        if (c->key == rkey && c->cma && op < OP_CAS && !p->cma_off &&
            len >= N.cma_min)
            return CARRY_CMA;
    }
    if (q->type == IBV_QPT_RC && p != NULL && p->ring_state == 1)
        return CARRY_RING;
    if (q->type == IBV_QPT_RC && p != NULL && p->local)
        return CARRY_LOCAL;
    return CARRY_AM;
}

/* A WRITE to the target MR of this call's last CARRY_MAPPED WRITE, from
   the same local MR: the same carrier, and of that WR's checks only what
   can change while the MR's key stays (the target QP's identity and
   access, the key) and the bounds; the rest (PD, MR access, mapping, the
   QP's PD) held, and we are counted in on both.  1: done, -1: the MR was
   withdrawn meanwhile (as in fast_exec_mapped), 0: the full way. */
static inline int
fast_repeat_write(const struct uqp *q, const struct pyrdma_send_wr *wr,
                  uint64_t len, int inline_data, struct fhold *h)
{
    uint32_t rkey = wr->wr.rdma.rkey;
    uint64_t raddr = wr->wr.rdma.remote_addr;
    struct sh_qp *t = h->rep_t;
    struct sh_mr *m = h->rep_m;

    if (rkey != h->rep_rkey || inline_data || wr->num_sge != 1 ||
        wr->sg_list->lkey != h->lkey || !in_mr(h->lmr, wr->sg_list->addr, len))
        return 0;
    if (__atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == q->attr.dest_qp_num &&
        t->dest_qpn == q->qpn && t->peer_guid == N.guid &&
        (__atomic_load_n(&t->access, __ATOMIC_RELAXED) &
         IBV_ACCESS_REMOTE_WRITE) &&
        __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey &&
        raddr >= h->rep_lo && len <= h->rep_len &&
        raddr - h->rep_lo <= h->rep_len - len) {
        copy_sges(h->rep_base + (raddr - h->rep_lo), wr, len);
        h->n_write++;
        return __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey ? 1 : -1;
    }
    h->rep_rkey = 0;            /* the full checks decide */
    return 0;
}

/* RC order: a one-sided WR may not overtake a WR of q still outstanding
   on a slot; but the data of a WRITE with immediate data (imm) may be
   placed while only F_PLACED immediates are outstanding: their data is in
   place already, and its own immediate takes a slot behind theirs, so
   its completions keep their order. */
static inline int
fast_order_allows(struct uqp *q, int imm)
{
    if (q->sq_head != q->sq_tail) {
        fab_sq_advance(q);
        if (q->sq_head != q->sq_tail &&
            !(imm && (int32_t)(q->sq_head - q->sq_unplaced) >= 0))
            return 0;
    }
    return 1;
}

/* The local s/g list of a one-sided WR: valid in q's PD (written by a
   READ or an atomic)?  A WRITE from the local MR of the last one-sided
   WRITE of the call skips the key lookup. */
static inline int
fast_check_local(const struct uqp *q, const struct pyrdma_send_wr *wr,
                 int op, int inline_data, struct fhold *h)
{
    const struct pyrdma_sge *sg = wr->sg_list;
    if (inline_data)
        return 1;
    if (op == OP_WRITE && wr->num_sge == 1 && h->lmr != NULL &&
        sg->lkey == h->lkey && in_mr(h->lmr, sg->addr, sg->length))
        return 1;
    if (fab_check_sges(q->pd, sg, wr->num_sge, op != OP_WRITE, 1))
        return 0;
    if (op == OP_WRITE && wr->num_sge == 1 && sg->length) {
        h->lmr = mr_lookup(sg->lkey);
        h->lkey = sg->lkey;
    }
    return 1;
}

/* Count ourselves in on the target QP t and MR m, before checking them:
   the target withdraws first, then waits for the counts (seq_cst on both
   sides).  One count per target of a call, not per WR. */
static inline void
fast_count_in(struct fhold *h, struct sh_qp *t, struct sh_mr *m)
{
    if (h->qp != &t->inflight) {
        if (h->qp != NULL)
            __atomic_fetch_sub(h->qp, 1, __ATOMIC_SEQ_CST);
        h->qp = &t->inflight;
        __atomic_fetch_add(h->qp, 1, __ATOMIC_SEQ_CST);
        h->rep_rkey = 0;        /* the shortcut relies on our counts */
    }
    if (h->mr != &m->inflight) {
        if (h->mr != NULL)
            __atomic_fetch_sub(h->mr, 1, __ATOMIC_SEQ_CST);
        h->mr = &m->inflight;
        __atomic_fetch_add(h->mr, 1, __ATOMIC_SEQ_CST);
        h->rep_rkey = 0;
    }
}

/* Every check a responder makes, on the target's key page: its QP t is
   connected to q and grants the access, the MR m (cached in c) holds the
   key, is of t's PD, grants the access and holds [raddr, raddr + len);
   an atomic's address is aligned. */
static inline int
fast_check_target(const struct uqp *q, const struct rkc *c,
                  struct sh_qp *t, struct sh_mr *m, uint32_t rkey,
                  uint64_t raddr, uint64_t len, int op)
{
    uint32_t dqpn = q->attr.dest_qp_num;
    unsigned need = op_access(op);
    return __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn &&
           t->dest_qpn == q->qpn && t->peer_guid == N.guid &&
           (__atomic_load_n(&t->access, __ATOMIC_RELAXED) & need) &&
           __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey &&
           m->pd == t->pd && (m->access & need) && m->addr == c->addr &&
           raddr >= m->addr && len <= m->len &&
           raddr - m->addr <= m->len - len &&
           !(op >= OP_CAS && (raddr & 7)) &&
           __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn;
}

/* CARRY_CMA, checks passed: cma_op, and its counters.  1, 0 or -1 as
   fast_op. */
static inline int
fast_exec_cma(struct peer *p, uint32_t *byte_len,
              const struct pyrdma_send_wr *wr, int op, uint64_t raddr,
              uint64_t len, struct sh_mr *m, uint32_t rkey)
{
    int ok = cma_op(p, wr, op == OP_WRITE, raddr, len, &m->key, rkey);
    if (ok > 0) {
        if (op == OP_READ)
            *byte_len = (uint32_t)len;
        if (op == OP_WRITE)
            N.sh->st_cma_write++;
        else
            N.sh->st_cma_read++;
    }
    return ok;
}

/* An atomic in place at dst; the original value goes to the local s/g
   list. */
static inline void
fast_atomic(const struct pyrdma_send_wr *wr, int op, uint8_t *dst)
{
    uint64_t *pp = (uint64_t *)(void *)dst, old;
    if (op == OP_FAA)
        old = __atomic_fetch_add(pp, wr->wr.atomic.compare_add,
                                 __ATOMIC_SEQ_CST);
    else {
        old = wr->wr.atomic.compare_add;
        __atomic_compare_exchange_n(pp, &old, wr->wr.atomic.swap, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    scatter(wr->sg_list, wr->num_sge, (const uint8_t *)&old, 8);
}

/* CARRY_MAPPED, checks passed: the op in the mapped target memory; a
   WRITE is remembered for fast_repeat_write (not one into this process's
   own memory: each of those asks carrier_of for room in the queue).  1,
   or -1 if the target withdrew the MR meanwhile (deregistered it; if we
   were stopped long enough, it also took its memory away from the
   mapping we wrote: mem_revoke): the op did not reliably happen, and
   fails as on a NIC whose target found no MR (REM_ACCESS_ERR). */
static inline int
fast_exec_mapped(const struct rkc *c, uint32_t *byte_len,
                 const struct pyrdma_send_wr *wr, int op, uint64_t raddr,
                 uint64_t len, int inline_data, struct sh_qp *t,
                 struct sh_mr *m, uint32_t rkey, struct fhold *h)
{
    uint8_t *dst = c->base + (raddr - m->addr);
    switch (op) {
    case OP_WRITE:
        copy_sges(dst, wr, len);
        h->n_write++;
        break;
    case OP_READ:
        scatter(wr->sg_list, wr->num_sge, dst, len);
        *byte_len = (uint32_t)len;
        h->n_read++;
        break;
    default:
        fast_atomic(wr, op, dst);
        *byte_len = 8;
        h->n_atomic++;
        break;
    }
    if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) != rkey)
        return -1;
    if (op == OP_WRITE && !inline_data && wr->num_sge == 1 &&
        wr->sg_list->lkey == h->lkey && h->lmr != NULL && !c->self) {
        h->rep_rkey = rkey;
        h->rep_t = t;
        h->rep_m = m;
        h->rep_lo = m->addr;
        h->rep_len = m->len;
        h->rep_base = c->base;
    }
    return 1;
}

/* A one-sided carrier (CARRY_MAPPED or CARRY_CMA, N.lock held): execute
   an RC WRITE, READ or atomic directly in the target's memory if every
   check a responder makes passes on the target's key page and nothing of
   q is outstanding on a slot (RC order).  Return 1 if done (the data is
   in place), 0 to take a slot, whose responder also produces every error
   completion exactly as before; -1 if the MR was withdrawn while the op
   ran (it fails with REM_ACCESS_ERR).  CARRY_MAPPED: no malloc, lock or
   syscall. */
static int
fast_op(struct uqp *q, uint32_t *byte_len, const struct pyrdma_send_wr *wr,
        int op, uint64_t len, int inline_data, struct fhold *h,
        enum carrier how)
{
    struct peer *p = q->peer;
    uint32_t rkey = wr_rkey(wr, op);
    uint64_t raddr = wr_raddr(wr, op);
    const struct rkc *c = &p->rk[rkey >> 8];
    struct sh_qp *t;
    struct sh_mr *m;

    if (!fast_order_allows(q, wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ||
        !fast_check_local(q, wr, op, inline_data, h))
        return 0;
    t = &p->sh->qp[q->attr.dest_qp_num & (MAX_QP - 1)];
    m = &p->sh->mr[rkey >> 8];
    fast_count_in(h, t, m);
    if (!fast_check_target(q, c, t, m, rkey, raddr, len, op))
        return 0;
    if (how == CARRY_CMA)
        return fast_exec_cma(p, byte_len, wr, op, raddr, len, m, rkey);
    return fast_exec_mapped(c, byte_len, wr, op, raddr, len, inline_data,
                            t, m, rkey, h);
}

/* The WR's op (OP_*), or -1 for an opcode the fabric does not carry
   (the local BIND_MW and LOCAL_INV: post_local; TSO...). */
static inline int
op_of(const struct pyrdma_send_wr *wr)
{
    switch (wr->opcode) {
    case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: case IBV_WR_SEND_WITH_INV:
        return OP_SEND;
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: return OP_WRITE;
    case IBV_WR_RDMA_READ: return OP_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return OP_CAS;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return OP_FAA;
    default: return -1;
    }
}

/* The checks that reject a WR when posted (EINVAL), as a NIC's driver
   does: inline data over the QP's limit, a message over MAX_MSG, an
   unaligned or short atomic, a UD WR without an address handle. */
static inline int
check_post_time(const struct uqp *q, const struct pyrdma_send_wr *wr,
                int op, size_t total, int inline_data)
{
    if (op < 0)
        return EINVAL;
    if (inline_data && op <= OP_WRITE && total > q->cap.max_inline_data)
        return EINVAL;
    if (total > MAX_MSG)
        return EINVAL;
    if (op >= OP_CAS && (wr->wr.atomic.remote_addr & 7))
        return EINVAL;
    if (q->type == IBV_QPT_UD && wr->wr.ud.ah == NULL)
        return EINVAL;
    if (op >= OP_CAS && total < 8)
        return EINVAL;
    return 0;
}

/* A one-sided WR done: its completion, if signaled. */
static inline void
complete_one_sided(struct uqp *q, const struct pyrdma_send_wr *wr,
                   uint32_t byte_len)
{
    struct pyrdma_wc wc;
    if (!q->sq_sig_all && !(wr->send_flags & IBV_SEND_SIGNALED))
        return;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr->wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = fab_wc_opcode_of[wr->opcode];
    wc.byte_len = byte_len;
    wc.qp_num = q->qpn;
    fab_cq_push(q->scq, &wc, 0);
}

/* Slot s takes wr: its bookkeeping, the next PSN. */
static inline void
slot_start(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr)
{
    s->qp = q;
    s->idx = q->sq_tail;
    s->wr_id = wr->wr_id;
    s->opcode = wr->opcode;
    s->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    s->done = 0;
    s->status = IBV_WC_SUCCESS;
    s->need_send = 0;
    s->imm_done = 0;
    s->rnr_wait = 0;
    s->byte_len = 0;
    s->deadline = 0;
    s->num_sge = 0;
    s->psn = q->next_psn;
    q->next_psn = (q->next_psn + 1) & 0xFFFFFF;
}

/* The WR's local data: a SEND's or WRITE's is copied after the header
   (unless placed: a WRITE with immediate data whose data fast_op placed
   already); a READ's or atomic's s/g list is kept, to be written on
   completion.  0 or an IBV_WC_* status. */
static inline int
slot_payload(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr,
             int op, size_t total, int inline_data, int placed)
{
    int status;
    if (placed) {               /* F_PLACED: the data is there already */
        s->len = sizeof(struct wire);
        return 0;
    }
    if (op <= OP_WRITE)
        return gather(q, s, wr, total, inline_data);
    status = fab_check_sges(q->pd, wr->sg_list, wr->num_sge, 1,
                            IBV_WC_LOC_PROT_ERR);
    memcpy(s->sge, wr->sg_list, sizeof(*s->sge) * (size_t)wr->num_sge);
    s->num_sge = wr->num_sge;
    s->len = sizeof(struct wire);
    return status;
}

/* The request header of slot s for wr (to peer); 0 or an IBV_WC_* status
   (a UD message over one MTU). */
static int
slot_header(const struct uqp *q, struct slot *s,
            const struct pyrdma_send_wr *wr, int op, size_t total,
            const struct peer *peer)
{
    struct wire *h = (struct wire *)s->buf;
    int imm = wr->opcode == IBV_WR_SEND_WITH_IMM ||
              wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    memset(h, 0, sizeof(*h));
    h->kind = AM_REQ;
    h->op = (uint8_t)op;
    h->flags = (uint8_t)((imm ? F_IMM : 0) |
                         ((wr->send_flags & IBV_SEND_SOLICITED) ? F_SOLICITED
                                                                : 0) |
                         (wr->opcode == IBV_WR_SEND_WITH_INV ? F_INV : 0));
    h->rnr_retry = (uint8_t)q->attr.rnr_retry;
    h->src_qpn = q->qpn;
    h->psn = s->psn;
    h->slot = s->idx;
    h->epoch = q->epoch;
    h->src_guid = N.guid;
    h->src_lid = N.lid;
    h->sid = peer != NULL ? peer->tx_sid : 0;
    h->qp_type = (uint16_t)q->type;
    h->imm = wr->imm_data;
    h->len = (uint32_t)(op <= OP_READ ? total : 8);
    if (q->type == IBV_QPT_UD) {
        h->dst_qpn = wr->wr.ud.remote_qpn;
        h->qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? q->attr.qkey
                                                         : wr->wr.ud.remote_qkey;
        /* a UD message is at most one MTU */
        return total > (size_t)mtu_bytes(PORT_MTU) ? IBV_WC_LOC_LEN_ERR : 0;
    }
    h->dst_qpn = q->attr.dest_qp_num;
    if (op == OP_WRITE || op == OP_READ) {
        h->raddr = wr->wr.rdma.remote_addr;
        h->rkey = wr->wr.rdma.rkey;
    }
    else if (op >= OP_CAS) {
        h->raddr = wr->wr.atomic.remote_addr;
        h->rkey = wr->wr.atomic.rkey;
        h->cmp = wr->wr.atomic.compare_add;
        h->swap = wr->wr.atomic.swap;
    }
    return 0;
}

/* Slot s, filled, is to be sent to peer: its endpoint, its ACK timer. */
static inline void
slot_arm(struct uqp *q, struct slot *s, const struct peer *peer)
{
    s->ep = peer->ep;
    if (q->type == IBV_QPT_RC && q->attr.timeout) {
        double us = 4.096 * (double)(1ull << q->attr.timeout) *
                    (q->attr.retry_cnt + 1);
        /* no clock read per WR: the timer starts when fab_timers() (every
           ~1 ms while something waits) first sees the WR outstanding */
        s->tmo = (uint64_t)(us * 1000.0);
        s->deadline = DEADLINE_UNSET;
        N.timers = 1;
    }
    s->need_send = 1;
    s->inflight = 1;
    q->n_inflight++;
}

/* A UD SEND to a multicast group, slot s filled (N.lock held): a copy
   to each member node of the group (mcast.c) through the outbox; the WR
   completes now, as a UD WR once it is sent. */
static void
slot_mcast(struct uqp *q, struct slot *s, struct uah *ah)
{
    struct wire *h = (struct wire *)s->buf;
    int i;
    h->dst_qpn = MCAST_QPN;
    h->flags |= F_MCAST;
    if (ah->attr.is_global) {
        memcpy(&h->raddr, ah->attr.grh.dgid, 8);
        memcpy(&h->cmp, ah->attr.grh.dgid + 8, 8);
    }
    h->rkey = ah->attr.dlid;
    pthread_mutex_lock(&ah->mp_lock);
    for (i = 0; i < ah->nmp; i++) {
        struct peer *p = ah->mp[i];
        if (p->failed)
            continue;
        h->sid = p->tx_sid;
        if (fab_queue_copy(p->ep, s->buf, s->len) == 0)
            q->mc_queued = 1;
    }
    pthread_mutex_unlock(&ah->mp_lock);
    s->done = 1;
    s->status = IBV_WC_SUCCESS;
}

/* Slot s takes wr (N.lock held), for the slot carrier how: the request,
   or the WR's error completion (s->done) when it fails before it is sent;
   fast < 0: a one-sided attempt found the MR withdrawn; fast > 0: the
   data of this WRITE with immediate data is in place (F_PLACED), the
   slot carries the immediate. */
static void
slot_fill(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr,
          int op, size_t total, int inline_data, int fast, enum carrier how)
{
    struct peer *peer = q->peer;
    int status;

    slot_start(q, s, wr);
    s->carrier = how;
    if (q->attr.qp_state == IBV_QPS_ERR || q->err_pending) {
        s->done = 1;
        s->status = IBV_WC_WR_FLUSH_ERR;
        return;
    }
    if (fast < 0) {
        fill_fail(q, s, IBV_WC_REM_ACCESS_ERR);
        return;
    }
    /* the transport table (seed 004): rxe fails these on the wire */
    if ((q->type == IBV_QPT_UC && op > OP_WRITE) ||
        (q->type == IBV_QPT_UD && (op != OP_SEND ||
                                   wr->opcode == IBV_WR_SEND_WITH_INV))) {
        fill_fail(q, s, IBV_WC_LOC_QP_OP_ERR);
        return;
    }
    if (q->type == IBV_QPT_UD)
        peer = ((struct uah *)wr->wr.ud.ah)->peer;
    status = slot_payload(q, s, wr, op, total, inline_data, fast > 0);
    if (status == 0)
        status = slot_header(q, s, wr, op, total, peer);
    if (status == 0 && fast > 0)
        ((struct wire *)s->buf)->flags |= F_PLACED;
    if (status == 0 && q->type == IBV_QPT_UD &&
        ((struct uah *)wr->wr.ud.ah)->mcast) {
        slot_mcast(q, s, wr->wr.ud.ah);
        return;
    }
    if (status == 0 && (peer == NULL || peer->failed))
        status = IBV_WC_RETRY_EXC_ERR;
    if (status) {
        fill_fail(q, s, status);
        return;
    }
    slot_arm(q, s, peer);
}

/* A local WR (BIND_MW, LOCAL_INV) of q in slot s (N.lock held): executed
   now, in the order of posting (mw.c); the slot is done at once (its
   completion follows those of the WRs before it: fab_sq_advance), sends
   nothing, and a failure fails the QP as any WR's.  0 or an errno for a
   post-time rejection. */
static int
post_local(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr)
{
    int status;
    if (wr->opcode == IBV_WR_BIND_MW && wr->bind_mw.mw == NULL)
        return EINVAL;
    if (s->inflight)
        return ENOMEM;          /* UCP still reads this slot */
    slot_start(q, s, wr);
    q->next_psn = s->psn;       /* nothing goes on the wire: no PSN */
    s->carrier = CARRY_AM;
    s->done = 1;
    if (q->attr.qp_state == IBV_QPS_ERR || q->err_pending) {
        s->status = IBV_WC_WR_FLUSH_ERR;
        return 0;
    }
    if (q->type == IBV_QPT_UD)
        status = IBV_WC_LOC_QP_OP_ERR;
    else if (wr->opcode == IBV_WR_BIND_MW)
        status = fab_mw_bind_wr(q, wr);
    else
        status = fab_mw_invalidate(q, wr->invalidate_rkey, 0) < 0
                 ? IBV_WC_LOC_QP_OP_ERR : 0;
    if (status)
        fill_fail(q, s, status);
    return 0;
}

/* Post wr on q (N.lock held), in slot s unless its carrier is one-sided;
   return 0, an errno for a post-time rejection, or -1 if the WR was
   executed one-sided (no slot used, its completion already in the CQ if
   signaled). */
static int
post_one(struct uqp *q, struct slot *s, struct pyrdma_send_wr *wr,
         struct fhold *hold)
{
    size_t total = 0;
    int i, op = op_of(wr), fast = 0, rc;
    int inline_data = (wr->send_flags & IBV_SEND_INLINE) != 0;
    enum carrier how;

    if (wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV) {
        hold->rep_rkey = 0;     /* RC order: later WRs check it all */
        return post_local(q, s, wr);
    }
    for (i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    rc = check_post_time(q, wr, op, total, inline_data);
    if (rc)
        return rc;
    if (op == OP_WRITE && hold->rep_rkey != 0 &&
        wr->opcode == IBV_WR_RDMA_WRITE && total != 0 &&
        !q->err_pending && q->attr.qp_state != IBV_QPS_ERR) {
        fast = fast_repeat_write(q, wr, total, inline_data, hold);
        if (fast > 0) {
            complete_one_sided(q, wr, 0);
            return -1;
        }
    }
    /* (a repeat that found the MR withdrawn was a CARRY_MAPPED WR) */
    how = fast < 0 ? CARRY_MAPPED
                   : carrier_of(q, wr, op, op >= OP_CAS ? 8 : total, hold, 1);
    if (fast == 0 && (how == CARRY_MAPPED || how == CARRY_CMA)) {
        uint32_t byte_len = 0;
        /* a WRITE with immediate data places its data one-sided, then
           takes slot s for the immediate: s must be free before */
        if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && s->inflight)
            return ENOMEM;
        fast = fast_op(q, &byte_len, wr, op, op >= OP_CAS ? 8 : total,
                       inline_data, hold, how);
        if (fast > 0 && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
            complete_one_sided(q, wr, byte_len);
            return -1;
        }
    }
    hold->rep_rkey = 0;         /* RC order: later WRs check it all */
    if (s->inflight)
        return ENOMEM;          /* UCP still reads this slot */
    if (how == CARRY_MAPPED || how == CARRY_CMA)
        how = carrier_of(q, wr, op, total, hold, 0);
    slot_fill(q, s, wr, op, total, inline_data, fast, how);
    /* a zero-byte WRITE with immediate data has no data to place: like
       an F_PLACED one, it lets later WRITE_WITH_IMMs place theirs
       (fast_order_allows) */
    if ((fast <= 0 && !(total == 0 &&
                        wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) ||
        s->done)
        q->sq_unplaced = s->idx + 1;
    return 0;
}

/* A WR completes when its ACK arrives, which can be before UCP reports
   the send of its slot done: a slot about to be reused may still be read
   by UCP.  Make progress (outside N.lock, post_lock held) until the slots
   these WRs may take are free, for at most a second (then post_send says
   ENOMEM, as for a full queue). */
static void
slots_settle(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    uint32_t i = q->sq_tail, n = 0;
    uint64_t give_up = 0;

    /* none in flight: nothing to wait for (only post_send, which holds
       post_lock, sets inflight; a stale non-zero only costs the scan) */
    if (__atomic_load_n(&q->n_inflight, __ATOMIC_RELAXED) == 0)
        return;
    for (; wr != NULL && n <= q->sq_mask; wr = wr->next, i++, n++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        while (__atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE)) {
            uint64_t t = now_ns();
            if (give_up == 0)
                give_up = t + 1000000000ull;
            else if (t > give_up)
                return;
            U.worker_progress(N.w);
        }
    }
}

/* The ACK q owes its peer (queued, not sent yet) rides in the first
   request of [first, last) instead of a message of its own (N.lock held). */
static void
piggyback_ack(struct uqp *q, uint32_t first, uint32_t last)
{
    struct obox *o = q->ack_item;
    const struct wire *a = o != NULL ? (const struct wire *)o->buf : NULL;
    ucp_ep_h ep = o != NULL ? o->ep : q->dack_ep;
    uint32_t i;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        struct wire *h;
        if (s->need_send != 1 || s->ep != ep)
            continue;
        h = (struct wire *)s->buf;
        h->flags |= F_ACK;
        if (o != NULL) {        /* queued, not sent yet: now it need not */
            h->ack_psn = a->psn;
            h->ack_epoch = a->epoch;
            o->cancel = 1;
            N.ob_plain--;
            q->ack_item = NULL;
        }
        else {                  /* deferred (held in q) */
            h->ack_psn = q->dack_psn;
            h->ack_epoch = q->dack_epoch;
            q->dack = 0;
            if (N.dack_head == q) {     /* else the next full drain */
                N.dack_head = q->dack_next;
                q->dack_next = NULL;
                q->dack_listed = 0;
            }
        }
        if (N.sh != NULL)
            N.sh->st_ack_piggy++;
        return;
    }
}

/* Before N.lock (UCP is called): map the target MRs of wr's one-sided
   candidates not in q's peer's key cache yet, and make the peer's
   request ring (a racy look at the cache is enough). */
static inline __attribute__((always_inline)) void
map_targets(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    struct peer *p = q->type == IBV_QPT_RC
                     ? __atomic_load_n(&q->peer, __ATOMIC_ACQUIRE) : NULL;
    if (p == NULL || p->sh == NULL)
        return;
    for (; wr; wr = wr->next) {
        uint32_t k;
        if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_READ ||
            wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
            k = wr->wr.rdma.rkey;
        else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                 wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
            k = wr->wr.atomic.rkey;
        else
            continue;
        if ((k >> 8) != 0 && (k >> 8) < SH_MR &&
            __atomic_load_n(&p->rk[k >> 8].key, __ATOMIC_RELAXED) != k)
            fab_rk_fetch(p, k);
    }
    if (p->sh != N.sh && __atomic_load_n(&p->ring_state, __ATOMIC_RELAXED) == 0)
        fab_ring_make(p);
}

/* Before N.lock (peers may be made): the members of the multicast
   groups wr's UD WRs go to. */
static void
mcast_members(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    if (q->type != IBV_QPT_UD)
        return;
    for (; wr; wr = wr->next)
        if (wr->wr.ud.ah != NULL && ((struct uah *)wr->wr.ud.ah)->mcast)
            fab_mcast_members(wr->wr.ud.ah);
}

/* Post the WRs of the list at *wrp, one by one, until one is refused
   (N.lock held): 0, or the errno of the WR left at *wrp. */
static int
post_all(struct uqp *q, struct pyrdma_send_wr **wrp)
{
    struct pyrdma_send_wr *wr;
    struct peer *p = q->peer;
    struct fhold hold;
    int rc = 0;

    memset(&hold, 0, sizeof(hold));
    hold.fast_ok = q->type == IBV_QPT_RC && p != NULL && p->sh != NULL &&
                   !p->failed && N.sh != NULL;
    for (wr = *wrp; wr; wr = wr->next) {
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) {
            rc = EINVAL;
            break;
        }
        if (q->sq_tail - q->sq_head >= q->cap.max_send_wr) {
            rc = ENOMEM;
            break;
        }
        rc = post_one(q, &q->sq[q->sq_tail & q->sq_mask], wr, &hold);
        if (rc == -1) {
            rc = 0;             /* done one-sided, without a slot */
            continue;
        }
        if (rc)
            break;
        q->sq_tail++;
    }
    fhold_drop(&hold);
    *wrp = wr;
    return rc;
}

/* CARRY_LOCAL, slot s of q to be sent (N.lock held): executed here if
   it would fit a ring entry (a larger one goes by UCP, its rendezvous
   for the payload) and its order allows (held: q had slots with UCP
   before this call; the other rules are the ring's, ring_slots); 1 if
   done. */
static int
local_slot(struct uqp *q, struct slot *s, const struct peer *p, int held)
{
    const struct wire *h = (const struct wire *)s->buf;
    if (held || s->len > RING_DATA || s->ep != p->ep ||
        (q->naked && (h->flags & F_ACK)))
        return 0;
    s->need_send = 0;
    s->inflight = 0;
    q->n_inflight--;
    if (N.sh != NULL)
        N.sh->st_local_req++;
    fab_am_dispatch(h, s->buf + sizeof(struct wire),
                    s->len - sizeof(struct wire));
    return 1;
}

/* CARRY_RING: the slots of [first, last) to be sent go into the peer's
   ring while they fit, CARRY_LOCAL ones are executed (local_slot), the
   rest of the call's by UCP, in order (N.lock held).  Return how many
   are left for UCP; *bell: the peer to ring. */
static int
ring_slots(struct uqp *q, uint32_t first, uint32_t last, struct peer **bell,
           int held)
{
    struct peer *p = q->peer;
    int n_ucp = 0;
    uint32_t i;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        if (s->need_send != 1)
            continue;
        if (n_ucp == 0 && s->carrier == CARRY_LOCAL && p != NULL &&
            local_slot(q, s, p, held))
            continue;
        if (n_ucp == 0 && s->carrier == CARRY_RING && p != NULL &&
            p->ring_state == 1 && s->ep == p->ep &&
            !(q->naked && (((struct wire *)s->buf)->flags & F_ACK)) &&
            ring_put(p, s) == 0) {
            s->need_send = 0;
            s->inflight = 0;
            q->n_inflight--;
            *bell = p;
            if (N.sh != NULL)
                N.sh->st_ring_req++;
            continue;
        }
        n_ucp++;
    }
    if (*bell != NULL && !ring_bell_needed(*bell))
        *bell = NULL;
    return n_ucp;
}

/* CARRY_AM: send the slots of [first, last) still to be sent as UCP
   active messages, in order (outside N.lock).  1 if UCP holds one
   (req_sent_cb will finish it). */
static int
am_send_slots(struct uqp *q, uint32_t first, uint32_t last)
{
    int pending = 0;
    uint32_t i;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        ucp_request_param_t p;
        ucs_status_ptr_t r;
        if (s->need_send != 1)
            continue;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = req_sent_cb;
        p.user_data = s;
        r = U.am_send_nbx(s->ep, AM_REQ, s->buf, sizeof(struct wire),
                          s->buf + sizeof(struct wire),
                          s->len - sizeof(struct wire), &p);
        if (UCS_PTR_IS_PTR(r))
            pending = 1;
        else
            s->imm_done = UCS_PTR_IS_ERR(r) ? -1 : 1;
    }
    return pending;
}

/* After am_send_slots (N.lock held): the slots UCP finished at once are
   free; a failed send fails its WR, a UC/UD WR completes once sent. */
static void
am_sent_slots(struct uqp *q, uint32_t first, uint32_t last)
{
    uint32_t i;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        int imm = s->imm_done;
        if (s->need_send != 1)
            continue;
        s->need_send = 0;
        if ((imm == 1 || imm == -1) && s->inflight) {
            s->inflight = 0;
            q->n_inflight--;
        }
        if ((uint32_t)(i - q->sq_head) >= (uint32_t)(q->sq_tail - q->sq_head)
            || s->done)
            continue;           /* already completed (flushed) */
        if (imm < 0)
            fab_sq_fail(q, i, IBV_WC_RETRY_EXC_ERR);
        else if (imm == 1 && q->type != IBV_QPT_RC) {
            s->done = 1;        /* UC/UD complete once handed to UCP */
            s->status = IBV_WC_SUCCESS;
        }
        else if (!s->inflight && q->type != IBV_QPT_RC) {
            s->done = 1;        /* req_sent_cb ran before we got here */
            s->status = IBV_WC_SUCCESS;
        }
    }
}

/* THE ONE-WR SHORTCUT (perftest's default: one WR per post_send call):
   may wr go one-sided at once, as fast_op would take it (N.lock held)?  A
   lone RC RDMA WRITE of one s/g entry (or inline data) into memory of a
   same-host peer that UCX maps here, the target key in the peer's key
   cache, the QP in RTS with nothing outstanding on a slot (RC order) and
   no other post_send of q between its unlocked steps (q->posting).  Of
   post_all's and fast_op's checks, those that can fail for such a WR. */
static inline int
quick_allowed(const struct uqp *q, const struct pyrdma_send_wr *wr,
              const struct rkc **cp)
{
    const struct peer *p = q->peer;
    const struct pyrdma_sge *sg = wr->sg_list;
    uint32_t rkey = wr->wr.rdma.rkey, idx = rkey >> 8;
    const struct rkc *c;
    const struct umr *mr;

    if (q->posting || q->attr.qp_state != IBV_QPS_RTS || q->err_pending ||
        q->n_held != 0 ||
        q->sq_head != q->sq_tail || q->sq[q->sq_tail & q->sq_mask].inflight ||
        q->cap.max_send_sge < 1 ||
        q->cap.max_send_wr < 1 || p == NULL || p->sh == NULL || p->failed ||
        N.sh == NULL || idx == 0 || idx >= SH_MR || sg->length > MAX_MSG)
        return 0;
    c = &p->rk[idx];
    if (c->key != rkey || c->base == NULL || (c->self && !self_sq_room(q)))
        return 0;
    *cp = c;
    if (wr->send_flags & IBV_SEND_INLINE)
        return sg->length <= q->cap.max_inline_data;
    mr = mr_lookup(sg->lkey);
    return mr != NULL && mr->pd == q->pd && in_mr(mr, sg->addr, sg->length) &&
           !__atomic_load_n(&mr->gone, __ATOMIC_SEQ_CST);
}

/* post_quick's WR was copied while the target withdrew its MR: it did
   not reliably happen and fails as post_one fails a one-sided WR whose
   fast_op returned -1, in the free slot at the SQ's tail. */
static void
quick_lost(struct uqp *q, const struct pyrdma_send_wr *wr, uint64_t len)
{
    struct slot *s = &q->sq[q->sq_tail & q->sq_mask];
    slot_fill(q, s, wr, OP_WRITE, len,
              (wr->send_flags & IBV_SEND_INLINE) != 0, -1, CARRY_MAPPED);
    q->sq_unplaced = s->idx + 1;
    q->sq_tail++;
    fab_sq_advance(q);
}

/* The one-WR shortcut (N.lock held, post_lock not: see q->posting): wr
   done one-sided as fast_op does it, counted in on the target QP and MR
   for just this WR.  1: done (its completion pushed if signaled; or, if
   the target withdrew the MR during the copy, failed as post_one fails
   fast_op's -1: REM_ACCESS_ERR in the slot quick_allowed saw free), 0:
   not taken, nothing done (the general way decides). */
static int
post_quick(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    const struct rkc *c = NULL;
    uint32_t rkey = wr->wr.rdma.rkey;
    uint64_t raddr = wr->wr.rdma.remote_addr, len = wr->sg_list->length;
    struct sh_qp *t;
    struct sh_mr *m;
    int ok, copied = 0;

    if (!quick_allowed(q, wr, &c))
        return 0;
    t = &q->peer->sh->qp[q->attr.dest_qp_num & (MAX_QP - 1)];
    m = &q->peer->sh->mr[rkey >> 8];
    __atomic_fetch_add(&t->inflight, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&m->inflight, 1, __ATOMIC_SEQ_CST);
    ok = fast_check_target(q, c, t, m, rkey, raddr, len, OP_WRITE);
    if (ok) {
        copy_sges(c->base + (raddr - m->addr), wr, len);
        copied = 1;
        ok = __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey;
    }
    inflight_out(&m->inflight);
    inflight_out(&t->inflight);
    if (!ok && !copied)
        return 0;
    N.sh->st_fast_write++;
    if (ok)
        complete_one_sided(q, wr, 0);
    else
        quick_lost(q, wr, len);
    return 1;
}

/* Post the WR list wr on q (post_lock held, q out of SQD): 0 or the
   errno of the WR left at *bad.  *signal: the progress thread is to be
   woken. */
static inline __attribute__((always_inline)) int
post_locked(struct uqp *q, struct pyrdma_send_wr *wr,
            struct pyrdma_send_wr **bad, int *signal)
{
    uint32_t first, last;
    int rc, n_ucp, held;
    struct peer *bell = NULL;

    slots_settle(q, wr);
    LOCK();
    if (q->attr.qp_state == IBV_QPS_RESET || q->attr.qp_state == IBV_QPS_INIT
        || q->attr.qp_state == IBV_QPS_RTR) {
        UNLOCK();
        *bad = wr;
        return EINVAL;
    }
    q->posting = 1;             /* until the last UNLOCK: post_quick */
    first = q->sq_tail;
    held = q->n_inflight != 0;
    rc = post_all(q, &wr);
    if (rc)
        *bad = wr;
    last = q->sq_tail;
    if (q->rx_seen && first != last) {
        q->rx_seen = 0;
        if (q->alt < 4)
            q->alt++;
    }
    if ((q->ack_item != NULL || q->dack) && q->type == IBV_QPT_RC)
        piggyback_ack(q, first, last);
    n_ucp = ring_slots(q, first, last, &bell, held);
    if (n_ucp != 0) {
        UNLOCK();
        if (bell != NULL)
            fab_ring_bell(bell);
        *signal |= am_send_slots(q, first, last);
        LOCK();
        am_sent_slots(q, first, last);
        bell = NULL;
    }
    fab_sq_advance(q);
    q->posting = 0;
    UNLOCK();
    if (bell != NULL)
        fab_ring_bell(bell);
    return rc;
}

/* The WRs held while q was in SQD (sqd.c), taken from it: posted now,
   before any later WR (post_lock held); what post_send refuses goes
   back to the held list. */
static void
post_held(struct uqp *q, struct pyrdma_send_wr *l, int *signal)
{
    struct pyrdma_send_wr *rest = NULL;
    map_targets(q, l);
    mcast_members(q, l);
    if (post_locked(q, l, &rest, signal) == 0)
        rest = NULL;
    LOCK();
    fab_sqd_put_back(q, l, rest);
    fab_sq_advance(q);
    UNLOCK();
}

/* A WR's checks at post time, for one to be held in SQD: 0 or the errno
   post_send gives it. */
int
fab_post_check(const struct uqp *q, const struct pyrdma_send_wr *wr)
{
    size_t total = 0;
    int i;
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge)
        return EINVAL;
    if (wr->opcode == IBV_WR_BIND_MW)
        return wr->bind_mw.mw == NULL ? EINVAL : 0;
    if (wr->opcode == IBV_WR_LOCAL_INV)
        return 0;
    for (i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    return check_post_time(q, wr, op_of(wr), total,
                           (wr->send_flags & IBV_SEND_INLINE) != 0);
}

int
fab_post_send(void *vq, struct pyrdma_send_wr *wr,
              struct pyrdma_send_wr **bad)
{
    struct uqp *q = vq;
    struct pyrdma_send_wr *held;
    int rc = 0, signal = 0;

    if (wr != NULL && wr->next == NULL && wr->opcode == IBV_WR_RDMA_WRITE &&
        wr->num_sge == 1 && wr->sg_list->length != 0 &&
        q->type == IBV_QPT_RC) {
        LOCK();
        rc = post_quick(q, wr);
        UNLOCK();
        if (rc)
            return 0;
    }
    map_targets(q, wr);
    mcast_members(q, wr);
    pthread_mutex_lock(&q->post_lock);
    /* SQD and its held WRs (a racy hint: a post that races a move to
       SQD goes as if posted just before it) */
    if (__atomic_load_n(&q->attr.qp_state, __ATOMIC_RELAXED) ==
            IBV_QPS_SQD ||
        __atomic_load_n(&q->n_held, __ATOMIC_RELAXED) != 0) {
        LOCK();
        if (q->attr.qp_state == IBV_QPS_SQD) {
            /* a drained send queue: the WRs wait for RTS (sqd.c) */
            rc = fab_sqd_hold(q, wr, bad);
            UNLOCK();
            pthread_mutex_unlock(&q->post_lock);
            return rc;
        }
        held = fab_sqd_take(q);
        UNLOCK();
        if (held != NULL)
            post_held(q, held, &signal);
    }
    if (wr != NULL)
        rc = post_locked(q, wr, bad, &signal);
    pthread_mutex_unlock(&q->post_lock);
    if (signal)
        wake_progress();
    if (q->peer != NULL && q->peer->guid == N.guid &&
        __atomic_load_n(&N.ob_head, __ATOMIC_RELAXED) != NULL)
        fab_drain(0);   /* UCX's self transport ran the request in this
                           call: its response goes now, not at the
                           sleeping progress thread's next tick */
    if (__atomic_load_n(&q->mc_queued, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&q->mc_queued, 0, __ATOMIC_ACQ_REL))
        fab_drain(0);           /* multicast copies in the outbox */
    return rc;
}
