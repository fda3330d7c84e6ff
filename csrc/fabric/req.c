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

/* The one-sided fast path (N.lock held): execute an RC WRITE, READ or
   atomic directly in the target's memory, mapped here by UCX (shared
   memory, memory of alloc_mr), if every check a responder makes passes
   on the target's key page and nothing of q is outstanding on the
   active-message path (RC order).  Return 1 if done (the data is in
   place), 0 to take the active-message path, which also produces every
   error completion exactly as before; -1 if the MR was withdrawn while
   the op ran (it fails with REM_ACCESS_ERR).  No malloc, lock or
   syscall. */
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

static int
fast_op(struct uqp *q, uint32_t *byte_len, const struct pyrdma_send_wr *wr,
        int op, size_t total, int inline_data, struct fhold *h)
{
    struct peer *p = q->peer;
    int atomic = op >= OP_CAS, ok;
    uint32_t rkey = atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey;
    uint64_t raddr = atomic ? wr->wr.atomic.remote_addr
                            : wr->wr.rdma.remote_addr;
    uint64_t len = atomic ? 8 : total;
    unsigned need = op == OP_WRITE ? IBV_ACCESS_REMOTE_WRITE :
                    op == OP_READ ? IBV_ACCESS_REMOTE_READ :
                    IBV_ACCESS_REMOTE_ATOMIC;
    uint32_t idx = rkey >> 8, dqpn = q->attr.dest_qp_num;
    struct rkc *c;
    struct sh_qp *t;
    struct sh_mr *m;

    if (len == 0 || idx == 0 || idx >= SH_MR)
        return 0;
    if (op == OP_WRITE && rkey == h->rep_rkey && !inline_data &&
        wr->num_sge == 1 && wr->sg_list->lkey == h->lkey &&
        in_mr(h->lmr, wr->sg_list->addr, len)) {
        /* the same local and target MRs as this call's last one-sided
           WRITE, which checked what cannot change while the MR's key
           stays (its PD, access, bounds and mapping; the QP's PD), and
           counted us in on both: the QP's identity, its access and the
           key are checked again, and the bounds */
        t = h->rep_t;
        m = h->rep_m;
        if (__atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn &&
            t->dest_qpn == q->qpn && t->peer_guid == N.guid &&
            (__atomic_load_n(&t->access, __ATOMIC_RELAXED) & need) &&
            __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey &&
            raddr >= h->rep_lo && len <= h->rep_len &&
            raddr - h->rep_lo <= h->rep_len - len) {
            copy_sges(h->rep_base + (raddr - h->rep_lo), wr, len);
            h->n_write++;
            /* (as below: withdrawn meanwhile) */
            return __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey ? 1
                                                                      : -1;
        }
        h->rep_rkey = 0;        /* the full checks decide */
    }
    c = &p->rk[idx];
    if (c->key != rkey)
        return 0;               /* not mapped (post_send tried) */
    if (c->base == NULL &&      /* the target's own memory, if c->cma */
        (!c->cma || atomic || p->cma_off || len < N.cma_min))
        return 0;               /* atomics need the target's CPU */
    if (q->sq_head != q->sq_tail) {
        fab_sq_advance(q);
        if (q->sq_head != q->sq_tail)
            return 0;           /* an active-message WR is outstanding */
    }
    if (!inline_data) {
        const struct pyrdma_sge *sg = wr->sg_list;
        if (op == OP_WRITE && wr->num_sge == 1 && h->lmr != NULL &&
            sg->lkey == h->lkey && in_mr(h->lmr, sg->addr, sg->length))
            ;                   /* the same local MR as the last WR */
        else if (fab_check_sges(q->pd, sg, wr->num_sge, op != OP_WRITE, 1))
            return 0;
        else if (op == OP_WRITE && wr->num_sge == 1 && sg->length) {
            h->lmr = mr_lookup(sg->lkey);
            h->lkey = sg->lkey;
        }
    }
    t = &p->sh->qp[dqpn & (MAX_QP - 1)];
    m = &p->sh->mr[idx];
    /* count ourselves in, then check: the target withdraws first, then
       waits for the count (seq_cst on both sides) */
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
    ok = __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn &&
         t->dest_qpn == q->qpn && t->peer_guid == N.guid &&
         (__atomic_load_n(&t->access, __ATOMIC_RELAXED) & need) &&
         __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey &&
         m->pd == t->pd && (m->access & need) && m->addr == c->addr &&
         raddr >= m->addr && len <= m->len &&
         raddr - m->addr <= m->len - len && !(atomic && (raddr & 7)) &&
         __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn;
    if (ok && c->base == NULL) {
        ok = cma_op(p, wr, op == OP_WRITE, raddr, len, &m->key, rkey);
        if (ok > 0) {
            if (op == OP_READ)
                *byte_len = (uint32_t)len;
            if (op == OP_WRITE)
                N.sh->st_cma_write++;
            else
                N.sh->st_cma_read++;
        }
    }
    else if (ok) {
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
        default: {
            uint64_t *pp = (uint64_t *)(void *)dst, old;
            if (op == OP_FAA)
                old = __atomic_fetch_add(pp, wr->wr.atomic.compare_add,
                                         __ATOMIC_SEQ_CST);
            else {
                old = wr->wr.atomic.compare_add;
                __atomic_compare_exchange_n(pp, &old, wr->wr.atomic.swap, 0,
                                            __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST);
            }
            scatter(wr->sg_list, wr->num_sge, (const uint8_t *)&old, 8);
            *byte_len = 8;
            h->n_atomic++;
            break;
        }
        }
        /* the target withdrew the MR meanwhile (deregistered it; if we
           were stopped long enough, it also took its memory away from
           the mapping we wrote: mem_revoke): the op did not reliably
           happen; it fails as on a NIC whose target found no MR
           (REM_ACCESS_ERR: -1) */
        if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) != rkey)
            ok = -1;
        else if (op == OP_WRITE && !inline_data && wr->num_sge == 1 &&
                 wr->sg_list->lkey == h->lkey && h->lmr != NULL) {
            h->rep_rkey = rkey;
            h->rep_t = t;
            h->rep_m = m;
            h->rep_lo = m->addr;
            h->rep_len = m->len;
            h->rep_base = c->base;
        }
    }
    return ok;
}

/* Fill slot s from wr (N.lock held); return 0, an errno for a post-time
   rejection, or -1 if the WR was executed one-sided (no slot used, its
   completion already in the CQ if signaled). */
static int
fill_slot(struct uqp *q, struct slot *s, struct pyrdma_send_wr *wr,
          struct fhold *hold)
{
    struct wire *h;
    size_t total = 0;
    int i, op, status = 0, fast = 0;
    int inline_data = (wr->send_flags & IBV_SEND_INLINE) != 0;
    struct peer *peer = q->peer;

    for (i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    switch (wr->opcode) {
    case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: op = OP_SEND; break;
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM:
        op = OP_WRITE; break;
    case IBV_WR_RDMA_READ: op = OP_READ; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: op = OP_CAS; break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: op = OP_FAA; break;
    default: return EINVAL;     /* LOCAL_INV, BIND_MW, SEND_WITH_INV... */
    }
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
    /* one-sided: done here, no slot used, nothing on the wire (no PSN) */
    if (hold->fast_ok && !q->err_pending && q->attr.qp_state != IBV_QPS_ERR &&
        (op >= OP_READ || wr->opcode == IBV_WR_RDMA_WRITE)) {
        uint32_t byte_len = 0;
        fast = fast_op(q, &byte_len, wr, op, total, inline_data, hold);
        if (fast > 0) {
            if (q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)) {
                struct pyrdma_wc wc;
                memset(&wc, 0, sizeof(wc));
                wc.wr_id = wr->wr_id;
                wc.status = IBV_WC_SUCCESS;
                wc.opcode = fab_wc_opcode_of[wr->opcode];
                wc.byte_len = byte_len;
                wc.qp_num = q->qpn;
                fab_cq_push(q->scq, &wc, 0);
            }
            return -1;
        }
    }
    hold->rep_rkey = 0;         /* RC order: later WRs check it all */
    if (s->inflight)
        return ENOMEM;          /* UCP still reads this slot */
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
    if (q->attr.qp_state == IBV_QPS_ERR || q->err_pending) {
        s->done = 1;
        s->status = IBV_WC_WR_FLUSH_ERR;
        return 0;
    }
    if (fast < 0) {
        fill_fail(q, s, IBV_WC_REM_ACCESS_ERR);
        return 0;
    }
    /* the transport table (seed 004): rxe fails these on the wire */
    if ((q->type == IBV_QPT_UC && op > OP_WRITE) ||
        (q->type == IBV_QPT_UD && op != OP_SEND)) {
        fill_fail(q, s, IBV_WC_LOC_QP_OP_ERR);
        return 0;
    }
    if (q->type == IBV_QPT_UD)
        peer = ((struct uah *)wr->wr.ud.ah)->peer;
    if (op <= OP_WRITE)
        status = gather(q, s, wr, total, inline_data);
    else {
        /* READ / atomics: the local s/g list is written on completion */
        status = fab_check_sges(q->pd, wr->sg_list, wr->num_sge, 1,
                                IBV_WC_LOC_PROT_ERR);
        memcpy(s->sge, wr->sg_list, sizeof(*s->sge) * (size_t)wr->num_sge);
        s->num_sge = wr->num_sge;
        s->len = sizeof(struct wire);
    }
    if (status) {
        fill_fail(q, s, status);
        return 0;
    }
    h = (struct wire *)s->buf;
    memset(h, 0, sizeof(*h));
    h->kind = AM_REQ;
    h->op = (uint8_t)op;
    h->flags = (uint8_t)(((wr->opcode == IBV_WR_SEND_WITH_IMM ||
                           wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ? F_IMM
                                                                     : 0) |
                         ((wr->send_flags & IBV_SEND_SOLICITED) ? F_SOLICITED
                                                                : 0));
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
        if (total > (size_t)mtu_bytes(PORT_MTU)) {
            /* a UD message is at most one MTU */
            fill_fail(q, s, IBV_WC_LOC_LEN_ERR);
            return 0;
        }
    }
    else {
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
    }
    if (peer == NULL || peer->failed) {
        fill_fail(q, s, IBV_WC_RETRY_EXC_ERR);
        return 0;
    }
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

int
fab_post_send(void *vq, struct pyrdma_send_wr *wr,
              struct pyrdma_send_wr **bad)
{
    struct uqp *q = vq;
    uint32_t first, last, i;
    int rc = 0, signal = 0, n_ucp = 0;
    struct peer *p, *bell = NULL;
    struct fhold hold;

    /* one-sided candidates: map the target MRs not mapped yet (UCP is
       called, so before N.lock; a racy look at the cache is enough) */
    p = q->type == IBV_QPT_RC ? __atomic_load_n(&q->peer, __ATOMIC_ACQUIRE)
                              : NULL;
    if (p != NULL && p->sh != NULL) {
        struct pyrdma_send_wr *w;
        for (w = wr; w; w = w->next) {
            uint32_t k;
            if (w->opcode == IBV_WR_RDMA_WRITE ||
                w->opcode == IBV_WR_RDMA_READ)
                k = w->wr.rdma.rkey;
            else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                     w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
                k = w->wr.atomic.rkey;
            else
                continue;
            if ((k >> 8) != 0 && (k >> 8) < SH_MR &&
                __atomic_load_n(&p->rk[k >> 8].key, __ATOMIC_RELAXED) != k)
                fab_rk_fetch(p, k);
        }
        if (p->sh != N.sh &&
            __atomic_load_n(&p->ring_state, __ATOMIC_RELAXED) == 0)
            fab_ring_make(p);
    }
    pthread_mutex_lock(&q->post_lock);
    slots_settle(q, wr);
    LOCK();
    if (q->attr.qp_state == IBV_QPS_RESET || q->attr.qp_state == IBV_QPS_INIT
        || q->attr.qp_state == IBV_QPS_RTR) {
        UNLOCK();
        pthread_mutex_unlock(&q->post_lock);
        *bad = wr;
        return EINVAL;
    }
    memset(&hold, 0, sizeof(hold));
    p = q->peer;
    hold.fast_ok = q->type == IBV_QPT_RC && p != NULL && p->sh != NULL &&
                   !p->failed && N.sh != NULL;
    first = q->sq_tail;
    for (; wr; wr = wr->next) {
        struct slot *s;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) {
            rc = EINVAL;
            break;
        }
        if (q->sq_tail - q->sq_head >= q->cap.max_send_wr) {
            rc = ENOMEM;
            break;
        }
        s = &q->sq[q->sq_tail & q->sq_mask];
        rc = fill_slot(q, s, wr, &hold);
        if (rc == -1) {
            rc = 0;             /* done one-sided, without a slot */
            continue;
        }
        if (rc)
            break;
        q->sq_tail++;
    }
    fhold_drop(&hold);
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
    /* RC requests to a same-host node: through its ring while they fit
       (then the rest of this call's through UCP, in order) */
    p = q->type == IBV_QPT_RC ? q->peer : NULL;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        if (s->need_send != 1)
            continue;
        if (n_ucp == 0 && p != NULL && p->ring_state == 1 &&
            s->ep == p->ep &&
            !(q->naked && (((struct wire *)s->buf)->flags & F_ACK)) &&
            ring_put(p, s) == 0) {
            s->need_send = 0;
            s->inflight = 0;
            q->n_inflight--;
            bell = p;
            if (N.sh != NULL)
                N.sh->st_ring_req++;
            continue;
        }
        n_ucp++;
    }
    if (bell != NULL && !ring_bell_needed(bell))
        bell = NULL;
    if (n_ucp == 0) {
        fab_sq_advance(q);
        UNLOCK();
        pthread_mutex_unlock(&q->post_lock);
        if (bell != NULL)
            fab_ring_bell(bell);
        return rc;
    }
    UNLOCK();
    if (bell != NULL)
        fab_ring_bell(bell);
    /* transmit, outside N.lock, in order */
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
            signal = 1;         /* req_sent_cb will finish it */
        else
            s->imm_done = UCS_PTR_IS_ERR(r) ? -1 : 1;
    }
    LOCK();
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
    fab_sq_advance(q);
    UNLOCK();
    pthread_mutex_unlock(&q->post_lock);
    if (signal)
        wake_progress();
    return rc;
}
