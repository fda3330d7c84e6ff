/* extended.c - the verbs front end's extended verbs: ibv_create_cq_ex
   (ibv_start_poll...), ibv_create_qp_ex and the ibv_wr_* post API. */
#include "front.h"

/* ibv_cq_ex polling: one completion at a time into fcq.cur. */
static struct fcq *
cqx_of(struct ibv_cq_ex *cx)
{
    return container_of(cx, struct fcq, cqx);
}

static int
cqx_next(struct ibv_cq_ex *cx)
{
    struct fcq *c = cqx_of(cx);
    int n;
    if (fv_stale(cx->context))
        return EINVAL;      /* inherited across fork() */
    n = fv_prov->poll_cq(c->h, 1, &c->cur);
    if (n < 0)
        return -n;
    if (n == 0)
        return ENOENT;
    cx->status = c->cur.status;
    cx->wr_id = c->cur.wr_id;
    return 0;
}

static int
cqx_start(struct ibv_cq_ex *cx, struct ibv_poll_cq_attr *attr)
{
    if (attr != NULL && attr->comp_mask != 0)
        return EINVAL;
    return cqx_next(cx);
}

static void
cqx_end(struct ibv_cq_ex *cx)
{
    (void)cx;
}

static enum ibv_wc_opcode
cqx_opcode(struct ibv_cq_ex *cx)
{
    return (enum ibv_wc_opcode)cqx_of(cx)->cur.opcode;
}

static uint32_t
cqx_vendor_err(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.vendor_err;
}

static uint32_t
cqx_byte_len(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.byte_len;
}

static __be32
cqx_imm_data(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.imm_data;
}

static uint32_t
cqx_qp_num(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.qp_num;
}

static uint32_t
cqx_src_qp(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.src_qp;
}

static unsigned int
cqx_wc_flags(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.wc_flags;
}

static uint32_t
cqx_slid(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.slid;
}

static uint8_t
cqx_sl(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.sl;
}

static uint8_t
cqx_dlid_path_bits(struct ibv_cq_ex *cx)
{
    return cqx_of(cx)->cur.dlid_path_bits;
}

/* verbs_context.create_cq_ex: the standard completion fields only (no
   timestamps, VLAN, flow tag or tag matching: EOPNOTSUPP). */
struct ibv_cq_ex *
fv_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
    struct fcq *c;
    struct ibv_cq_ex *cx;
    if (a->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) ||
        ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
         (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (a->cqe > INT32_MAX) {
        errno = EINVAL;
        return NULL;
    }
    c = fv_cq_new(ctx, (int)a->cqe, a->cq_context, a->channel,
                  (int)a->comp_vector);
    if (c == NULL)
        return NULL;
    cx = &c->cqx;
    cx->start_poll = cqx_start;
    cx->next_poll = cqx_next;
    cx->end_poll = cqx_end;
    cx->read_opcode = cqx_opcode;
    cx->read_vendor_err = cqx_vendor_err;
    cx->read_byte_len = cqx_byte_len;
    cx->read_imm_data = cqx_imm_data;
    cx->read_qp_num = cqx_qp_num;
    cx->read_src_qp = cqx_src_qp;
    cx->read_wc_flags = cqx_wc_flags;
    cx->read_slid = cqx_slid;
    cx->read_sl = cqx_sl;
    cx->read_dlid_path_bits = cqx_dlid_path_bits;
    return cx;
}

/* ------------------------------------------------------------------ */
/* the ibv_wr_* post API (struct ibv_qp_ex)                            */

static struct fqp *
qpx_of(struct ibv_qp_ex *qx)
{
    return container_of(qx, struct fqp, qpx);
}

/* Grow *buf (of *cap elements of size) to hold need; 0 or ENOMEM. */
static int
grow(void **buf, int *cap, int need, size_t size)
{
    int n = *cap ? *cap : 8;
    void *b;
    if (need <= *cap)
        return 0;
    while (n < need)
        n *= 2;
    b = realloc(*buf, (size_t)n * size);
    if (b == NULL)
        return ENOMEM;
    *buf = b;
    *cap = n;
    return 0;
}

/* Start a WR of opcode (an IBV_WR_*, allowed by op, an IBV_QP_EX_WITH_*
   flag); NULL (and an error for wr_complete) if it cannot. */
static struct xwr *
x_new(struct ibv_qp_ex *qx, int opcode, uint64_t op)
{
    struct fqp *q = qpx_of(qx);
    struct xwr *w;
    if (!(q->send_ops & op)) {
        q->xerr = EINVAL;       /* not among the QP's send_ops_flags */
        return NULL;
    }
    if (grow((void **)&q->x, &q->capx, q->nx + 1, sizeof(*q->x))) {
        q->xerr = ENOMEM;
        return NULL;
    }
    w = &q->x[q->nx++];
    memset(w, 0, sizeof(*w));
    w->wr.wr_id = qx->wr_id;
    w->wr.send_flags = qx->wr_flags;
    w->wr.opcode = opcode;
    w->sge_first = q->nsg;
    return w;
}

/* The WR the wr_set_* calls apply to (the last one started), or NULL. */
static struct xwr *
x_last(struct ibv_qp_ex *qx)
{
    struct fqp *q = qpx_of(qx);
    if (q->nx == 0) {
        q->xerr = EINVAL;
        return NULL;
    }
    return &q->x[q->nx - 1];
}

static void
x_unsupported(struct ibv_qp_ex *qx)
{
    qpx_of(qx)->xerr = EOPNOTSUPP;
}

static void
x_atomic_cmp_swp(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr,
                 uint64_t compare, uint64_t swap)
{
    struct xwr *w = x_new(qx, IBV_WR_ATOMIC_CMP_AND_SWP,
                          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
    if (w != NULL) {
        w->wr.wr.atomic.rkey = rkey;
        w->wr.wr.atomic.remote_addr = addr;
        w->wr.wr.atomic.compare_add = compare;
        w->wr.wr.atomic.swap = swap;
    }
}

static void
x_atomic_fetch_add(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr,
                   uint64_t add)
{
    struct xwr *w = x_new(qx, IBV_WR_ATOMIC_FETCH_AND_ADD,
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
    if (w != NULL) {
        w->wr.wr.atomic.rkey = rkey;
        w->wr.wr.atomic.remote_addr = addr;
        w->wr.wr.atomic.compare_add = add;
    }
}

static void
x_bind_mw(struct ibv_qp_ex *qx, struct ibv_mw *mw, uint32_t rkey,
          const struct ibv_mw_bind_info *bi)
{
    struct xwr *w = x_new(qx, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW);
    if (w == NULL)
        return;
    if (bi == NULL || fv_bind_wr_in(&w->wr, mw, bi->mr) != 0) {
        qpx_of(qx)->xerr = EINVAL;
        return;
    }
    w->wr.bind_mw.rkey = rkey;
    w->wr.bind_mw.bind_info.addr = bi->addr;
    w->wr.bind_mw.bind_info.length = bi->length;
    w->wr.bind_mw.bind_info.mw_access_flags = bi->mw_access_flags;
    w->mw = mw;
}

static void
x_local_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
    struct xwr *w = x_new(qx, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV);
    if (w != NULL)
        w->wr.invalidate_rkey = rkey;
}

static void
x_rdma(struct ibv_qp_ex *qx, int opcode, uint64_t op, uint32_t rkey,
       uint64_t addr, __be32 imm)
{
    struct xwr *w = x_new(qx, opcode, op);
    if (w != NULL) {
        w->wr.wr.rdma.rkey = rkey;
        w->wr.wr.rdma.remote_addr = addr;
        w->wr.imm_data = imm;
    }
}

static void
x_rdma_read(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr)
{
    x_rdma(qx, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, rkey, addr, 0);
}

static void
x_rdma_write(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr)
{
    x_rdma(qx, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, rkey, addr, 0);
}

static void
x_rdma_write_imm(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr,
                 __be32 imm)
{
    x_rdma(qx, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
           rkey, addr, imm);
}

static void
x_send(struct ibv_qp_ex *qx)
{
    x_new(qx, IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

static void
x_send_imm(struct ibv_qp_ex *qx, __be32 imm)
{
    struct xwr *w = x_new(qx, IBV_WR_SEND_WITH_IMM,
                          IBV_QP_EX_WITH_SEND_WITH_IMM);
    if (w != NULL)
        w->wr.imm_data = imm;
}

static void
x_send_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
    struct xwr *w = x_new(qx, IBV_WR_SEND_WITH_INV,
                          IBV_QP_EX_WITH_SEND_WITH_INV);
    if (w != NULL)
        w->wr.invalidate_rkey = rkey;
}

static void
x_send_tso(struct ibv_qp_ex *qx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    (void)hdr;
    (void)hdr_sz;
    (void)mss;
    x_unsupported(qx);
}

static void
x_set_ud_addr(struct ibv_qp_ex *qx, struct ibv_ah *ah, uint32_t qpn,
              uint32_t qkey)
{
    struct xwr *w = x_last(qx);
    if (w == NULL)
        return;
    if (ah == NULL || !fv_ours(ah->context)) {
        qpx_of(qx)->xerr = EINVAL;
        return;
    }
    w->wr.wr.ud.ah = container_of(ah, struct fah, ah)->h;
    w->wr.wr.ud.remote_qpn = qpn;
    w->wr.wr.ud.remote_qkey = qkey;
}

static void
x_set_xrc_srqn(struct ibv_qp_ex *qx, uint32_t srqn)
{
    (void)srqn;
    x_unsupported(qx);
}

/* Replace the last WR's s/g list with n entries (copied from sg). */
static void
x_sges(struct ibv_qp_ex *qx, size_t n, const struct ibv_sge *sg)
{
    struct fqp *q = qpx_of(qx);
    struct xwr *w = x_last(qx);
    if (w == NULL)
        return;
    if (n > INT32_MAX / 2 ||
        grow((void **)&q->sg, &q->capsg, q->nsg + (int)n, sizeof(*q->sg))) {
        q->xerr = ENOMEM;
        return;
    }
    w->sge_first = q->nsg;
    w->nsge = (int)n;
    w->inl = 0;
    w->wr.send_flags &= ~(unsigned int)IBV_SEND_INLINE;
    memcpy(&q->sg[q->nsg], sg, n * sizeof(*sg));
    q->nsg += (int)n;
}

static void
x_set_sge(struct ibv_qp_ex *qx, uint32_t lkey, uint64_t addr, uint32_t len)
{
    struct ibv_sge sg = {.addr = addr, .length = len, .lkey = lkey};
    x_sges(qx, 1, &sg);
}

static void
x_set_sge_list(struct ibv_qp_ex *qx, size_t n, const struct ibv_sge *sg)
{
    x_sges(qx, n, sg);
}

/* Inline data: copied now into fqp.ib, one s/g entry over it. */
static void
x_set_inline_data_list(struct ibv_qp_ex *qx, size_t n,
                       const struct ibv_data_buf *bufs)
{
    struct fqp *q = qpx_of(qx);
    struct xwr *w = x_last(qx);
    size_t total = 0, i;
    struct ibv_sge sg;
    if (w == NULL)
        return;
    for (i = 0; i < n; i++)
        total += bufs[i].length;
    if (total > UINT32_MAX || q->nib + total > INT32_MAX) {
        q->xerr = EINVAL;
        return;
    }
    {
        int cap = (int)q->capib;
        if (grow((void **)&q->ib, &cap, (int)(q->nib + total) + 1, 1)) {
            q->xerr = ENOMEM;
            return;
        }
        q->capib = (size_t)cap;
    }
    sg.addr = q->nib;           /* an offset until wr_complete */
    sg.length = (uint32_t)total;
    sg.lkey = 0;
    for (i = 0; i < n; i++) {
        memcpy(q->ib + q->nib, bufs[i].addr, bufs[i].length);
        q->nib += bufs[i].length;
    }
    x_sges(qx, 1, &sg);
    w->inl = 1;
    w->wr.send_flags |= IBV_SEND_INLINE;
}

static void
x_set_inline_data(struct ibv_qp_ex *qx, void *addr, size_t length)
{
    struct ibv_data_buf b = {.addr = addr, .length = length};
    x_set_inline_data_list(qx, 1, &b);
}

static void
x_start(struct ibv_qp_ex *qx)
{
    struct fqp *q = qpx_of(qx);
    q->nx = q->nsg = 0;
    q->nib = 0;
    q->xerr = 0;
}

static void
x_abort(struct ibv_qp_ex *qx)
{
    x_start(qx);
}

/* Post the WRs built since wr_start, in one post_send; 0 or an errno. */
static int
x_complete(struct ibv_qp_ex *qx)
{
    struct fqp *q = qpx_of(qx);
    struct pyrdma_send_wr *bad = NULL;
    int i, rc;
    if (fv_stale(q->qp.context))
        q->xerr = EINVAL;   /* inherited across fork() */
    if (q->xerr != 0) {
        rc = q->xerr;
        x_start(qx);
        return rc;
    }
    if (q->nx == 0)
        return 0;
    for (i = 0; i < q->nx; i++) {
        struct xwr *w = &q->x[i];
        struct pyrdma_sge *sg = &q->sg[w->sge_first];
        int k;
        if (w->inl)
            for (k = 0; k < w->nsge; k++)
                sg[k].addr = (uint64_t)(uintptr_t)(q->ib + sg[k].addr);
        w->wr.sg_list = w->nsge ? sg : NULL;
        w->wr.num_sge = w->nsge;
        w->wr.next = i + 1 < q->nx ? &q->x[i + 1].wr : NULL;
        if (q->qp.qp_type == IBV_QPT_UD && w->wr.wr.ud.ah == NULL) {
            x_start(qx);
            return EINVAL;      /* no wr_set_ud_addr */
        }
    }
    rc = fv_prov->post_send(q->h, &q->x[0].wr, &bad);
    for (i = 0; i < q->nx; i++)     /* posted binds: the window's rkey */
        if (q->x[i].mw != NULL &&
            (rc == 0 || &q->x[i].wr != bad))
            q->x[i].mw->rkey = q->x[i].wr.bind_mw.rkey;
    x_start(qx);
    return rc;
}

/* What the ibv_wr_* API can post on the fabric. */
#define X_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | \
                    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
                    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | \
                    IBV_QP_EX_WITH_RDMA_READ | \
                    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
                    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | \
                    IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | \
                    IBV_QP_EX_WITH_SEND_WITH_INV)

static void
qpx_init(struct fqp *q, uint64_t send_ops)
{
    struct ibv_qp_ex *qx = &q->qpx;
    q->send_ops = send_ops;
    qx->wr_atomic_cmp_swp = x_atomic_cmp_swp;
    qx->wr_atomic_fetch_add = x_atomic_fetch_add;
    qx->wr_bind_mw = x_bind_mw;
    qx->wr_local_inv = x_local_inv;
    qx->wr_rdma_read = x_rdma_read;
    qx->wr_rdma_write = x_rdma_write;
    qx->wr_rdma_write_imm = x_rdma_write_imm;
    qx->wr_send = x_send;
    qx->wr_send_imm = x_send_imm;
    qx->wr_send_inv = x_send_inv;
    qx->wr_send_tso = x_send_tso;
    qx->wr_set_ud_addr = x_set_ud_addr;
    qx->wr_set_xrc_srqn = x_set_xrc_srqn;
    qx->wr_set_inline_data = x_set_inline_data;
    qx->wr_set_inline_data_list = x_set_inline_data_list;
    qx->wr_set_sge = x_set_sge;
    qx->wr_set_sge_list = x_set_sge_list;
    qx->wr_start = x_start;
    qx->wr_complete = x_complete;
    qx->wr_abort = x_abort;
}

/* verbs_context.create_qp_ex: what ibv_create_qp does (PD, no creation
   flags), with the ibv_wr_* API for the send ops of X_SEND_OPS; the rest
   (XRC, RSS, TSO...) is EOPNOTSUPP. */
struct ibv_qp *
fv_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
    struct ibv_qp_init_attr init;
    uint32_t ok = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    uint64_t ops = 0;
    if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || a->pd == NULL ||
        a->pd->context != ctx) {
        errno = EINVAL;
        return NULL;
    }
    if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        ops = a->send_ops_flags;
    if ((a->comp_mask & ~ok) ||
        ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) ||
        (ops & ~(uint64_t)X_SEND_OPS)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    memset(&init, 0, sizeof(init));
    init.qp_context = a->qp_context;
    init.send_cq = a->send_cq;
    init.recv_cq = a->recv_cq;
    init.srq = a->srq;
    init.cap = a->cap;
    init.qp_type = a->qp_type;
    init.sq_sig_all = a->sq_sig_all;
    {
        struct ibv_qp *qp = ibv_create_qp(a->pd, &init);
        if (qp != NULL) {
            a->cap = init.cap;
            if (ops != 0)
                qpx_init(container_of(qp, struct fqp, qp), ops);
        }
        return qp;
    }
}

