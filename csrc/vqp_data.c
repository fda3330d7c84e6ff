/* vqp_data.c - the data path of VirtualQP/VirtualCQ: cutting messages,
   choosing data QPs, sequence numbers, reassembly, completions. */

/*
 * Between two virtual QPs (their data QPs paired by index, RC):
 *  - dqplb: every fragment is an RDMA_WRITE_WITH_IMM; its immediate holds
 *    a 30-bit sequence number, VQP_IMM_LAST on a message's last fragment
 *    and VQP_IMM_NOTIFY when the message is an RDMA_WRITE_WITH_IMM.  A
 *    notify fragment is followed on the same data QP by a zero-byte
 *    WRITE_WITH_IMM (a trailer) holding the user's immediate.  The
 *    receiver puts fragments back in sequence order in a window.
 *  - spray: fragments are RDMA_WRITEs.  Once all of a WRITE_WITH_IMM
 *    message completed, data QP 0 carries two zero-byte WRITE_WITH_IMMs:
 *    the message length, then the user's immediate.  A WRITE_WITH_IMM
 *    message of one fragment (1 byte or more) that nothing waits to be
 *    posted or notified before goes as one WR instead: a WRITE_WITH_IMM
 *    on data QP 0 with its data and the user's immediate (the receiver
 *    takes the length from byte_len; a length trailer has none).
 * The receiver keeps receive WRs posted on its data QPs (all of them in
 * dqplb, QP 0 in spray) and reposts each as it completes.  As on one QP,
 * an RDMA_WRITE_WITH_IMM message consumes one virtual receive WR and an
 * RDMA_WRITE message none.  Virtual completions come in posting order.
 * Everything goes through the provider ops (post_send, post_recv,
 * poll_cq, modify_qp): no provider code here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "vqp.h"

/* IBV_WC_* values used here (the ABI). */
enum {
    WC_SUCCESS = 0, WC_LOC_QP_OP_ERR = 2, WC_WR_FLUSH_ERR = 5,
    WC_GENERAL_ERR = 21, WC_RDMA_WRITE = 1, WC_RECV_RDMA_WITH_IMM = 129,
    WC_WITH_IMM = 2, QPS_ERR = 6,
};

static struct vqp_msg *
msg_at(pyrdma_VQP *q, uint32_t serial)
{
    return &q->msgs[serial & (q->cap - 1)];
}

/* ---- virtual completions ---- */

/* Whether the next virtual completion goes straight into the array of
   the pyrdma_vcq_poll() under way (none wait in the ring, room left). */
static inline int
emit_direct(const pyrdma_VCQ *c)
{
    return c->out_n == 0 && c->dst_n < c->dst_room;
}

/* Where the next virtual completion goes, zeroed: the poller's array, or
   the VirtualCQ's ring (a power of two); the caller fills it, then
   emit_done().  NULL when out of memory. */
static struct pyrdma_wc *
emit_slot(pyrdma_VCQ *c)
{
    struct pyrdma_wc *e;

    if (emit_direct(c)) {
        e = &c->dst[c->dst_n];
        memset(e, 0, sizeof(*e));
        return e;
    }
    if (c->out_n == c->out_cap) {
        uint32_t ncap = c->out_cap ? c->out_cap * 2 : 256, i;
        struct pyrdma_wc *n = malloc(sizeof(*n) * ncap);
        if (n == NULL)
            return NULL;
        for (i = 0; i < c->out_n; i++)
            n[i] = c->out[(c->out_head + i) & (c->out_cap - 1)];
        free(c->out);
        c->out = n;
        c->out_head = 0;
        c->out_cap = ncap;
    }
    e = &c->out[(c->out_head + c->out_n) & (c->out_cap - 1)];
    memset(e, 0, sizeof(*e));
    return e;
}

/* Count the entry emit_slot() gave. */
static inline void
emit_done(pyrdma_VCQ *c)
{
    if (emit_direct(c))
        c->dst_n++;
    else
        c->out_n++;
}

/* A virtual receive completion, written in place (emit_slot). */
static void
emit_recv(pyrdma_VQP *q, uint64_t wr_id, int status, uint32_t len,
          uint32_t imm)
{
    struct pyrdma_wc *wc = emit_slot(q->vcq);

    if (wc == NULL)
        return;             /* out of memory: lost */
    wc->wr_id = wr_id;
    wc->status = status;
    wc->opcode = WC_RECV_RDMA_WITH_IMM;
    wc->byte_len = len;
    wc->imm_data = imm;
    wc->wc_flags = status == WC_SUCCESS ? WC_WITH_IMM : 0;
    wc->qp_num = q->q[0].qpn;
    emit_done(q->vcq);
}

/* Report the messages at the head that are complete, in posting order. */
static void
harvest(pyrdma_VQP *q)
{
    while (q->head != q->serial_next) {
        struct vqp_msg *m = msg_at(q, q->head);
        struct pyrdma_wc *wc;

        if (!m->closed || m->done < m->posted)
            return;
        if ((wc = emit_slot(q->vcq)) == NULL)
            return;         /* out of memory: reported on a later poll */
        wc->wr_id = m->wr_id;
        wc->status = m->status;
        wc->opcode = WC_RDMA_WRITE;
        wc->byte_len = m->length;
        wc->vendor_err = m->vendor_err;
        wc->qp_num = m->status ? m->err_qpn : q->q[0].qpn;
        emit_done(q->vcq);
        q->head++;
    }
}

/* ---- the error state ---- */

/* Nothing more is posted for m; it fails with FLUSH unless it failed. */
static void
abort_msg(pyrdma_VQP *q, struct vqp_msg *m)
{
    m->closed = 1;
    m->next_frag = m->nfrags;
    if (m->status == WC_SUCCESS) {
        m->status = WC_WR_FLUSH_ERR;
        m->err_qpn = q->q[0].qpn;
    }
}

/* Enter the error state (once): say why, move the data QPs to ERR so
   that what is in flight flushes, fail what was not posted and every
   posted virtual receive WR. */
static void
vqp_fail(pyrdma_VQP *q, const char *fmt, ...)
{
    struct pyrdma_qp_attr a;
    struct pyrdma_status st = {0};
    uint32_t s, i;
    va_list ap;

    if (q->err)
        return;
    q->err = 1;
    va_start(ap, fmt);
    vsnprintf(q->errmsg, sizeof(q->errmsg), fmt, ap);
    va_end(ap);
    memset(&a, 0, sizeof(a));
    a.qp_state = QPS_ERR;
    for (i = 0; i < q->n; i++)
        (void)q->o.prov->modify_qp(q->q[i].h, &a, PYRDMA_QP_STATE, &st);
    for (s = q->head; s != q->serial_next; s++) {
        struct vqp_msg *m = msg_at(q, s);
        if (!m->closed)
            abort_msg(q, m);
    }
    q->post_at = q->notify_at = q->serial_next;
    for (; q->rwr_n; q->rwr_n--, q->rwr_head++)
        emit_recv(q, q->rwr[q->rwr_head & (q->cap - 1)], WC_WR_FLUSH_ERR,
                  0, 0);
}

/* ---- sending ---- */

/* A data QP with room for k more WRs: round robin, or the one with the
   fewest in flight; -1 if none. */
static int
choose_qp(pyrdma_VQP *q, uint32_t k)
{
    uint32_t i, best = UINT32_MAX;
    int pick = -1;

    if (q->choose == VQP_ROUND_ROBIN) {
        uint32_t j = q->rr;
        for (i = 0; i < q->n; i++) {
            if (q->q[j].out + k <= q->depth) {
                q->rr = j + 1 == q->n ? 0 : j + 1;
                return (int)j;
            }
            j = j + 1 == q->n ? 0 : j + 1;
        }
        return -1;
    }
    for (i = 0; i < q->n; i++)
        if (q->q[i].out + k <= q->depth && q->q[i].out < best) {
            best = q->q[i].out;
            pick = (int)i;
        }
    return pick;
}

/* dqplb: would one more sequence number overrun the receiver's window?
   (Every sequence number in flight stays within half a window of the
   oldest one in flight.) */
static int
window_full(pyrdma_VQP *q)
{
    uint32_t i, far = 0;

    for (i = 0; i < q->n; i++) {
        struct vqp_dqp *d = &q->q[i];
        if (d->seq_n) {
            uint32_t dist = (q->seq_next - d->seq[d->seq_head]) &
                            VQP_SEQ_MASK;
            if (dist > far)
                far = dist;
        }
    }
    return far + 1 >= q->window / 2;
}

/* Fill q->tmp with the s/g entries of the next len bytes of m; return
   how many. */
static int
cut_sges(pyrdma_VQP *q, struct vqp_msg *m, uint32_t len)
{
    int k = 0;

    while (len > 0 && m->cur_sge < (uint32_t)m->nsge) {
        struct pyrdma_sge *s = &m->sge[m->cur_sge];
        uint32_t take = s->length - m->cur_off;
        if (take > len)
            take = len;
        if (take > 0) {
            q->tmp[k].addr = s->addr + m->cur_off;
            q->tmp[k].length = take;
            q->tmp[k].lkey = s->lkey;
            k++;
        }
        len -= take;
        m->cur_off += take;
        if (m->cur_off == s->length) {
            m->cur_sge++;
            m->cur_off = 0;
        }
    }
    return k;
}

/* Account for k WRs of m posted on data QP i (the first one a fragment
   with sequence number seq when fragment is set). */
static void
note_posted(pyrdma_VQP *q, struct vqp_msg *m, uint32_t i, uint32_t k,
            int fragment, uint32_t seq)
{
    struct vqp_dqp *d = &q->q[i];

    d->out += k;
    m->posted += k;
    if (fragment && q->mode == VQP_DQPLB) {
        uint32_t at = d->seq_head + d->seq_n;
        d->seq[at >= q->depth ? at - q->depth : at] = seq;
        d->seq_n++;
    }
}

/* Post the next fragment of m (serial s), whose s/g list is sg[nsg], on
   data QP i, with its trailer when trailer is set (spray: the fragment,
   the whole message, is a WRITE_WITH_IMM with the user's immediate, no
   trailer); 0 or -1 (error state entered). */
static int
post_frag_sg(pyrdma_VQP *q, struct vqp_msg *m, uint32_t s, uint32_t i,
             int trailer, struct pyrdma_sge *sg, int nsg)
{
    struct pyrdma_send_wr wr[2], *bad = NULL;
    uint64_t off = (uint64_t)m->next_frag * q->fragment;
    uint32_t seq = q->seq_next;
    int last = m->next_frag + 1 == m->nfrags, rc;
    uint32_t k = trailer && q->mode == VQP_DQPLB ? 2 : 1;

    memset(&wr[0], 0, sizeof(wr[0]));
    wr[0].wr_id = ((uint64_t)(s & 0x7fffffff) << 32) | m->next_frag;
    wr[0].sg_list = sg;
    wr[0].num_sge = nsg;
    wr[0].send_flags = PYRDMA_SEND_SIGNALED;
    wr[0].wr.rdma.remote_addr = m->remote_addr + off;
    wr[0].wr.rdma.rkey = m->rkey;
    if (q->mode == VQP_DQPLB) {
        wr[0].opcode = PYRDMA_WR_RDMA_WRITE_WITH_IMM;
        wr[0].imm_data = htonl(seq | (last ? VQP_IMM_LAST : 0) |
                               (trailer ? VQP_IMM_NOTIFY : 0));
        q->seq_next = (seq + 1) & VQP_SEQ_MASK;
    }
    else if (trailer) {
        wr[0].opcode = PYRDMA_WR_RDMA_WRITE_WITH_IMM;
        wr[0].imm_data = m->imm;
    }
    else
        wr[0].opcode = PYRDMA_WR_RDMA_WRITE;
    if (k == 2) {
        wr[1] = wr[0];
        wr[1].wr_id = (wr[0].wr_id & ~0xffffffffull) | VQP_TRAILER;
        wr[1].num_sge = 0;
        wr[1].sg_list = NULL;
        wr[1].imm_data = m->imm;
        wr[0].next = &wr[1];
    }
    rc = q->o.prov->post_send(q->q[i].h, wr, &bad);
    m->next_frag++;
    if (rc == 0) {
        note_posted(q, m, i, k, 1, seq);
        return 0;
    }
    if (bad == &wr[1])
        note_posted(q, m, i, 1, 1, seq);
    m->status = WC_LOC_QP_OP_ERR;
    m->err_qpn = q->q[i].qpn;
    vqp_fail(q, "posting fragment %u of wr_id %llu on data QP %u (qpn "
             "%#x) failed: %s", m->next_frag - 1,
             (unsigned long long)m->wr_id, i, q->q[i].qpn, strerror(rc));
    return -1;
}

/* Post the next fragment of m (serial s), cut from its s/g list. */
static int
post_frag(pyrdma_VQP *q, struct vqp_msg *m, uint32_t s, uint32_t i,
          int trailer)
{
    uint64_t off = (uint64_t)m->next_frag * q->fragment;
    uint32_t len = m->length - (uint32_t)off;

    if (len > q->fragment)
        len = q->fragment;
    return post_frag_sg(q, m, s, i, trailer, q->tmp, cut_sges(q, m, len));
}

/* Post what fragments of m (serial s) fit; return 1 when all are
   posted, 0 when a queue or the window is full, -1 on error. */
static int
post_frags(pyrdma_VQP *q, struct vqp_msg *m, uint32_t s)
{
    while (m->next_frag < m->nfrags) {
        int trailer = q->mode == VQP_DQPLB && m->next_frag + 1 == m->nfrags
                      && m->opcode == PYRDMA_WR_RDMA_WRITE_WITH_IMM, i;
        if (q->mode == VQP_DQPLB && window_full(q))
            return 0;
        i = choose_qp(q, trailer ? 2 : 1);
        if (i < 0)
            return 0;
        if (post_frag(q, m, s, (uint32_t)i, trailer) < 0)
            return -1;
    }
    if (q->mode == VQP_DQPLB || m->opcode == PYRDMA_WR_RDMA_WRITE)
        m->closed = 1;
    return 1;
}

/* spray: post the length and immediate trailers on data QP 0 for the
   WRITE_WITH_IMM messages whose fragments all completed, in order. */
static void
spray_notify(pyrdma_VQP *q)
{
    while (q->notify_at != q->post_at) {
        struct vqp_msg *m = msg_at(q, q->notify_at);
        struct pyrdma_send_wr wr[2], *bad = NULL;
        int rc;

        if (!m->closed) {
            if (m->done < m->posted || q->q[0].out + 2 > q->depth)
                return;
            memset(wr, 0, sizeof(wr));
            wr[0].wr_id = ((uint64_t)(q->notify_at & 0x7fffffff) << 32) |
                          VQP_TRAILER;
            wr[0].opcode = PYRDMA_WR_RDMA_WRITE_WITH_IMM;
            wr[0].send_flags = PYRDMA_SEND_SIGNALED;
            wr[0].wr.rdma.remote_addr = m->remote_addr;
            wr[0].wr.rdma.rkey = m->rkey;
            wr[0].imm_data = htonl(m->length);
            wr[1] = wr[0];
            wr[1].imm_data = m->imm;
            wr[0].next = &wr[1];
            rc = q->o.prov->post_send(q->q[0].h, wr, &bad);
            if (rc != 0) {
                if (bad == &wr[1])
                    note_posted(q, m, 0, 1, 0, 0);
                m->status = WC_LOC_QP_OP_ERR;
                m->err_qpn = q->q[0].qpn;
                vqp_fail(q, "posting the notify of wr_id %llu on data QP 0 "
                         "(qpn %#x) failed: %s",
                         (unsigned long long)m->wr_id, q->q[0].qpn,
                         strerror(rc));
                return;
            }
            note_posted(q, m, 0, 2, 0, 0);
            m->closed = 1;
        }
        q->notify_at++;
    }
}

/* Post what can be posted, then report what completed. */
static void
progress(pyrdma_VQP *q)
{
    while (!q->err && q->post_at != q->serial_next) {
        if (post_frags(q, msg_at(q, q->post_at), q->post_at) <= 0)
            break;
        q->post_at++;
    }
    if (q->mode == VQP_SPRAY && !q->err)
        spray_notify(q);
    harvest(q);
}

/* Check one virtual send WR; 0 or EINVAL with why. */
static int
check_send(pyrdma_VQP *q, const struct pyrdma_send_wr *w, char *why,
           size_t len)
{
    uint64_t total = 0;
    int i;

    if (w->opcode != PYRDMA_WR_RDMA_WRITE &&
        w->opcode != PYRDMA_WR_RDMA_WRITE_WITH_IMM) {
        snprintf(why, len, "opcode %d: a VirtualQP carries IBV_WR_RDMA_WRITE "
                 "and IBV_WR_RDMA_WRITE_WITH_IMM only (dqplb: fragments as "
                 "WRITE_WITH_IMM; spray: fragments as WRITE, then one "
                 "zero-byte WRITE_WITH_IMM); SEND, READ and atomics are "
                 "carried by neither mode", w->opcode);
        return EINVAL;
    }
    if (w->num_sge < 0 || (uint32_t)w->num_sge > q->max_sge) {
        snprintf(why, len, "%d s/g entries: this VirtualQP takes at most %u "
                 "(max_sge)", w->num_sge, q->max_sge);
        return EINVAL;
    }
    for (i = 0; i < w->num_sge; i++)
        total += w->sg_list[i].length;
    if (total > UINT32_MAX) {
        snprintf(why, len, "%llu bytes: a message is at most 4294967295 "
                 "bytes", (unsigned long long)total);
        return EINVAL;
    }
    return 0;
}

/* Take one checked virtual send WR into the ring. */
static void
enqueue_send(pyrdma_VQP *q, const struct pyrdma_send_wr *w)
{
    struct vqp_msg *m = msg_at(q, q->serial_next);
    struct pyrdma_sge *sge = m->sge;
    uint64_t total = 0;
    int i;

    memset(m, 0, sizeof(*m));
    m->sge = sge;
    m->wr_id = w->wr_id;
    m->remote_addr = w->wr.rdma.remote_addr;
    m->rkey = w->wr.rdma.rkey;
    m->opcode = w->opcode;
    m->imm = w->imm_data;
    m->nsge = w->num_sge;
    for (i = 0; i < w->num_sge; i++) {
        m->sge[i] = w->sg_list[i];
        total += w->sg_list[i].length;
    }
    m->length = (uint32_t)total;
    m->nfrags = total ? (uint32_t)((total + q->fragment - 1) / q->fragment)
                      : 1;
    if (q->err)
        abort_msg(q, m);
    q->serial_next++;
}

/* The data QP for post_whole() of a message of total bytes (trailer: a
   WRITE_WITH_IMM), -1 if none has room.  dqplb: the window has room, a
   data QP has room for the fragment and its trailer.  spray: a
   WRITE_WITH_IMM goes as one WR on data QP 0 (where the receiver's
   receives are) if it carries data (its byte_len is its length) and no
   notify waits before it (they come in order on QP 0). */
static int
whole_qp(pyrdma_VQP *q, int trailer, uint32_t total)
{
    if (q->mode == VQP_DQPLB)
        return window_full(q) ? -1 : choose_qp(q, trailer ? 2 : 1);
    if (!trailer)
        return choose_qp(q, 1);
    return total > 0 && q->notify_at == q->post_at &&
           q->q[0].out < q->depth ? 0 : -1;
}

/* The fast path of a message of at most one fragment when nothing waits
   to be posted before it: post it 1:1 from the user's s/g list (no
   cutting, no copy of the list).  0 when it does not apply (the caller
   enqueues it), 1 when taken (posted, or failed into the error state as
   post_frags() would). */
static int
post_whole(pyrdma_VQP *q, const struct pyrdma_send_wr *w)
{
    int trailer = w->opcode == PYRDMA_WR_RDMA_WRITE_WITH_IMM, i, k;
    uint32_t total = 0, s;
    struct vqp_msg *m;

    if (q->err || q->post_at != q->serial_next)
        return 0;
    for (k = 0; k < w->num_sge; k++) {
        if (w->sg_list[k].length == 0)
            return 0;       /* cut_sges() drops empty entries */
        total += w->sg_list[k].length;
        if (total > q->fragment)
            return 0;
    }
    if ((i = whole_qp(q, trailer, total)) < 0)
        return 0;
    s = q->serial_next++;
    m = msg_at(q, s);
    m->wr_id = w->wr_id;
    m->remote_addr = w->wr.rdma.remote_addr;
    m->rkey = w->wr.rdma.rkey;
    m->opcode = w->opcode;
    m->imm = w->imm_data;
    m->length = total;
    m->nfrags = 1;
    m->next_frag = 0;
    m->posted = m->done = 0;
    m->nsge = 0;
    m->closed = 0;
    m->status = WC_SUCCESS;
    m->vendor_err = m->err_qpn = 0;
    if (post_frag_sg(q, m, s, (uint32_t)i, trailer, w->sg_list,
                     w->num_sge) == 0) {
        q->post_at++;
        m->closed = 1;      /* spray: no notify to post for it */
        if (q->mode == VQP_SPRAY && q->notify_at == s)
            q->notify_at = q->post_at;
    }
    return 1;
}

int
pyrdma_vqp_send(pyrdma_VQP *q, struct pyrdma_send_wr *wr,
                struct pyrdma_send_wr **bad, char *why, size_t len)
{
    struct pyrdma_send_wr *w;
    uint32_t n = 0;
    int rc, slow = 0;

    why[0] = '\0';
    if (!q->connected) {
        *bad = wr;
        snprintf(why, len, "the VirtualQP is not connected (connect() "
                 "first)");
        return EINVAL;
    }
    for (w = wr; w != NULL; w = w->next, n++) {
        if ((rc = check_send(q, w, why, len)) != 0) {
            *bad = w;
            return rc;
        }
        if (q->serial_next - q->head + n >= q->cap) {
            *bad = w;
            snprintf(why, len, "%u virtual WRs are in flight (max_wr): poll "
                     "the VirtualCQ", q->cap);
            return ENOMEM;
        }
    }
    for (w = wr; w != NULL; w = w->next)
        if (!post_whole(q, w)) {
            enqueue_send(q, w);
            slow = 1;
        }
    if (slow || q->err)
        progress(q);
    return 0;
}

int
pyrdma_vqp_recv(pyrdma_VQP *q, struct pyrdma_recv_wr *wr,
                struct pyrdma_recv_wr **bad, char *why, size_t len)
{
    struct pyrdma_recv_wr *w;
    uint32_t n = 0;

    why[0] = '\0';
    for (w = wr; w != NULL; w = w->next, n++)
        if (q->rwr_n + n >= q->cap) {
            *bad = w;
            snprintf(why, len, "%u virtual receive WRs are posted (max_wr)",
                     q->cap);
            return ENOMEM;
        }
    for (w = wr; w != NULL; w = w->next) {
        if (q->err)
            emit_recv(q, w->wr_id, WC_WR_FLUSH_ERR, 0, 0);
        else if (q->note_n) {   /* the message came first */
            uint32_t k = q->note_head++ & (q->cap - 1);
            q->note_n--;
            emit_recv(q, w->wr_id, WC_SUCCESS, q->note_len[k],
                      q->note_imm[k]);
        }
        else {
            q->rwr[(q->rwr_head + q->rwr_n) & (q->cap - 1)] = w->wr_id;
            q->rwr_n++;
        }
    }
    return 0;
}

/* ---- receiving ---- */

/* Internal receive WRs are posted as chains of up to this many (one
   provider call each). */
#define VQP_RX_CHAIN 32

int
pyrdma_vqp_post_rx(pyrdma_VQP *q, uint32_t i, uint32_t n)
{
    struct pyrdma_recv_wr wr[VQP_RX_CHAIN], *bad;
    uint32_t k, m;
    int rc;

    while (n > 0) {
        m = n < VQP_RX_CHAIN ? n : VQP_RX_CHAIN;
        for (k = 0; k < m; k++) {
            wr[k].wr_id = VQP_RECV_TAG | i;
            wr[k].next = k + 1 < m ? &wr[k + 1] : NULL;
            wr[k].sg_list = NULL;
            wr[k].num_sge = 0;
        }
        bad = NULL;
        rc = q->o.prov->post_recv(q->q[i].h, wr, &bad);
        k = rc == 0 ? m : bad != NULL ? (uint32_t)(bad - wr) : 0;
        q->q[i].rx_posted += k;
        if (rc != 0)
            return rc;
        n -= m;
    }
    return 0;
}

/* Repost the receive WRs the data QPs' completions consumed in this batch
   (on_recv() counts them), as one chain per data QP. */
static void
repost_owed(pyrdma_VQP *q)
{
    uint32_t i, owed;
    int rc;

    q->rx_owed = 0;
    for (i = 0; i < q->n && !q->err; i++) {
        if ((owed = q->q[i].rx_owed) == 0)
            continue;
        q->q[i].rx_owed = 0;
        if ((rc = pyrdma_vqp_post_rx(q, i, owed)) != 0)
            vqp_fail(q, "reposting a receive on data QP %u (qpn %#x) "
                     "failed: %s", i, q->q[i].qpn, strerror(rc));
    }
}

/* A WRITE_WITH_IMM message arrived whole: complete a virtual receive WR
   (or keep it until one is posted). */
static void
delivered(pyrdma_VQP *q, uint32_t len, uint32_t imm)
{
    if (q->rwr_n) {
        uint64_t id = q->rwr[q->rwr_head++ & (q->cap - 1)];
        q->rwr_n--;
        emit_recv(q, id, WC_SUCCESS, len, imm);
        return;
    }
    if (q->note_n == q->cap) {
        vqp_fail(q, "%u messages arrived with no virtual receive WR posted",
                 q->cap);
        return;
    }
    q->note_len[(q->note_head + q->note_n) & (q->cap - 1)] = len;
    q->note_imm[(q->note_head + q->note_n) & (q->cap - 1)] = imm;
    q->note_n++;
}

/* dqplb: consume the fragments that are now in order. */
static void
rx_advance(pyrdma_VQP *q)
{
    for (;;) {
        struct vqp_rxent *e = &q->rx[q->rx_next & (q->window - 1)];
        if (!(e->flags & VQP_RX_HERE) ||
            ((e->flags & VQP_RX_NOTIFY) && !(e->flags & VQP_RX_IMM)))
            return;
        q->rx_bytes += e->len;
        if (e->flags & VQP_RX_LAST) {
            if (e->flags & VQP_RX_NOTIFY)
                delivered(q, q->rx_bytes, e->imm);
            q->rx_bytes = 0;
        }
        e->flags = 0;
        q->rx_next = (q->rx_next + 1) & VQP_SEQ_MASK;
    }
}

static void
rx_dqplb(pyrdma_VQP *q, uint32_t i, const struct pyrdma_wc *wc)
{
    struct vqp_dqp *d = &q->q[i];
    uint32_t imm = ntohl(wc->imm_data), seq = imm & VQP_SEQ_MASK;
    struct vqp_rxent *e;

    if (d->rx_trailer) {
        e = &q->rx[d->rx_seq & (q->window - 1)];
        e->imm = wc->imm_data;
        e->flags |= VQP_RX_IMM;
        d->rx_trailer = 0;
        rx_advance(q);
        return;
    }
    if (((seq - q->rx_next) & VQP_SEQ_MASK) >= q->window) {
        vqp_fail(q, "data QP %u (qpn %#x) received sequence number %u, "
                 "outside the window [%u, +%u)", i, d->qpn, seq,
                 q->rx_next, q->window);
        return;
    }
    e = &q->rx[seq & (q->window - 1)];
    e->len = wc->byte_len;
    e->flags = VQP_RX_HERE | ((imm & VQP_IMM_LAST) ? VQP_RX_LAST : 0) |
               ((imm & VQP_IMM_NOTIFY) ? VQP_RX_NOTIFY : 0);
    if (imm & VQP_IMM_NOTIFY) {
        d->rx_trailer = 1;
        d->rx_seq = seq;
    }
    rx_advance(q);
}

static void
on_recv(pyrdma_VQP *q, uint32_t i, const struct pyrdma_wc *wc)
{
    struct vqp_dqp *d = &q->q[i];

    if (d->rx_posted == 0)
        return;             /* stale: left by an earlier QP of that number */
    d->rx_posted--;
    if (q->err)
        return;
    if (wc->status != WC_SUCCESS) {
        vqp_fail(q, "a receive on data QP %u (qpn %#x) failed with status "
                 "%d", i, d->qpn, wc->status);
        return;
    }
    d->rx_owed++;           /* reposted after the batch: repost_owed() */
    q->rx_owed = 1;
    if (q->mode == VQP_DQPLB)
        rx_dqplb(q, i, wc);
    else if (!d->rx_trailer && wc->byte_len > 0)   /* spray: one WR */
        delivered(q, wc->byte_len, wc->imm_data);
    else if (!d->rx_trailer) {      /* spray: the length, then the imm */
        d->rx_len = ntohl(wc->imm_data);
        d->rx_trailer = 1;
    }
    else {
        d->rx_trailer = 0;
        delivered(q, d->rx_len, wc->imm_data);
    }
}

static void
on_send(pyrdma_VQP *q, uint32_t i, const struct pyrdma_wc *wc)
{
    struct vqp_dqp *d = &q->q[i];
    uint32_t frag = (uint32_t)wc->wr_id;
    uint32_t low = (uint32_t)(wc->wr_id >> 32) & 0x7fffffff;
    /* the serial is the oldest in flight with these low 31 bits */
    uint32_t s = q->head + ((low - q->head) & 0x7fffffff);
    struct vqp_msg *m = msg_at(q, s);

    if (d->out == 0)
        return;             /* stale: left by an earlier QP of that number */
    d->out--;
    if (frag != VQP_TRAILER && q->mode == VQP_DQPLB && d->seq_n) {
        d->seq_head = d->seq_head + 1 == q->depth ? 0 : d->seq_head + 1;
        d->seq_n--;
    }
    if (s - q->head >= q->serial_next - q->head)
        return;             /* not ours (cannot happen) */
    m->done++;
    if (wc->status != WC_SUCCESS) {
        if (m->status == WC_SUCCESS) {
            m->status = wc->status;
            m->vendor_err = wc->vendor_err;
            m->err_qpn = d->qpn;
        }
        if (frag == VQP_TRAILER)
            vqp_fail(q, "the notify of wr_id %llu on data QP %u (qpn %#x) "
                     "failed with status %d", (unsigned long long)m->wr_id,
                     i, d->qpn, wc->status);
        else
            vqp_fail(q, "fragment %u of %u of wr_id %llu on data QP %u (qpn "
                     "%#x) failed with status %d", frag, m->nfrags,
                     (unsigned long long)m->wr_id, i, d->qpn, wc->status);
    }
}

/* Route one completion of the CQ to its virtual QP; return that virtual
   QP (NULL: none). */
static pyrdma_VQP *
dispatch(pyrdma_VCQ *c, const struct pyrdma_wc *wc)
{
    struct vcq_reg *r = NULL;
    uint32_t k;

    if (c->last < c->nreg && c->reg[c->last].qpn == wc->qp_num)
        r = &c->reg[c->last];
    else
        for (k = 0; k < c->nreg; k++)
            if (c->reg[k].qpn == wc->qp_num) {
                r = &c->reg[k];
                c->last = k;
                break;
            }
    if (r == NULL)
        return NULL;        /* a data QP already destroyed */
    if (wc->wr_id & VQP_RECV_TAG)
        on_recv(r->vqp, r->idx, wc);
    else
        on_send(r->vqp, r->idx, wc);
    return r->vqp;
}

/* Route a batch of completions, then let each virtual QP they touched
   post what now fits and report what completed (once per batch). */
static void
dispatch_batch(pyrdma_VCQ *c, const struct pyrdma_wc *wc, int n)
{
    pyrdma_VQP *touched[32];
    int i, k, nt = 0;

    for (i = 0; i < n; i++) {
        pyrdma_VQP *q = dispatch(c, &wc[i]);
        if (q == NULL)
            continue;
        for (k = 0; k < nt && touched[k] != q; k++)
            ;
        if (k == nt)
            touched[nt++] = q;
    }
    for (k = 0; k < nt; k++) {
        if (touched[k]->rx_owed)
            repost_owed(touched[k]);
        progress(touched[k]);
    }
}

int
pyrdma_vcq_poll(pyrdma_VCQ *c, int n, struct pyrdma_wc *out)
{
    struct pyrdma_wc wc[32];
    int got = 0;

    for (;;) {
        int r;
        while (got < n && c->out_n) {
            out[got++] = c->out[c->out_head];
            c->out_head = (c->out_head + 1) & (c->out_cap - 1);
            c->out_n--;
        }
        if (got >= n)
            return got;
        r = c->o.prov->poll_cq(c->o.h, 32, wc);
        if (r < 0)
            return got ? got : r;
        /* virtual completions made now go straight to out (in order:
           the ring is empty, and used once out is full) */
        c->dst = out + got;
        c->dst_n = 0;
        c->dst_room = (uint32_t)(n - got);
        dispatch_batch(c, wc, r);
        got += (int)c->dst_n;
        c->dst_room = c->dst_n = 0;
        if (r == 0 && c->out_n == 0)
            return got;
    }
}

int
pyrdma_vcq_register(pyrdma_VCQ *c, pyrdma_VQP *q)
{
    uint32_t i;

    if (c->nreg + q->n > c->capreg) {
        uint32_t ncap = (c->nreg + q->n) * 2;
        struct vcq_reg *r = realloc(c->reg, sizeof(*r) * ncap);
        if (r == NULL)
            return ENOMEM;
        c->reg = r;
        c->capreg = ncap;
    }
    for (i = 0; i < q->n; i++) {
        c->reg[c->nreg].qpn = q->q[i].qpn;
        c->reg[c->nreg].idx = i;
        c->reg[c->nreg].vqp = q;
        c->nreg++;
    }
    return 0;
}

void
pyrdma_vcq_unregister(pyrdma_VCQ *c, pyrdma_VQP *q)
{
    uint32_t i, k = 0;

    for (i = 0; i < c->nreg; i++)
        if (c->reg[i].vqp != q)
            c->reg[k++] = c->reg[i];
    c->nreg = k;
    c->last = 0;
}
