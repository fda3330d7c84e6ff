/* datapath.c - the verbs front end's data path: the context->ops that
   libibverbs' inline ibv_post_send, ibv_post_recv, ibv_post_srq_recv,
   ibv_poll_cq and ibv_req_notify_cq call. */
#include "front.h"

/* The fabric's structs must have the libibverbs layout (pyrdma.h says so). */
#define SAME(a, b, f) \
    _Static_assert(offsetof(struct a, f) == offsetof(struct b, f), #f)
SAME(pyrdma_wc, ibv_wc, byte_len);
SAME(pyrdma_wc, ibv_wc, wc_flags);
SAME(pyrdma_wc, ibv_wc, dlid_path_bits);
SAME(pyrdma_send_wr, ibv_send_wr, wr.ud.remote_qkey);
SAME(pyrdma_send_wr, ibv_send_wr, wr.atomic.rkey);
SAME(pyrdma_recv_wr, ibv_recv_wr, num_sge);
_Static_assert(sizeof(struct pyrdma_wc) == sizeof(struct ibv_wc), "wc");
_Static_assert(sizeof(struct pyrdma_send_wr) == sizeof(struct ibv_send_wr),
               "send_wr");
_Static_assert(sizeof(struct pyrdma_sge) == sizeof(struct ibv_sge), "sge");

/* ------------------------------------------------------------------ */
/* the data path: context->ops                                         */

int
fv_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct fcq *c = container_of(cq, struct fcq, cq);
    if (fv_stale(cq->context))
        return -EINVAL;     /* inherited across fork() */
    return fv_prov->poll_cq(c->h, n, (struct pyrdma_wc *)wc);
}

int
fv_op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    struct fcq *c = container_of(cq, struct fcq, cq);
    if (fv_stale(cq->context))
        return EINVAL;
    return fv_prov->req_notify_cq(c->h, solicited_only);
}

/* UD: post one WR at a time with the fabric's AH handle in it. */
static int
post_send_ud(struct fqp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    for (; wr != NULL; wr = wr->next) {
        struct pyrdma_send_wr w, *b = NULL;
        int rc;
        memcpy(&w, wr, sizeof(w));
        w.next = NULL;
        if (wr->wr.ud.ah == NULL || !fv_ours(wr->wr.ud.ah->context)) {
            *bad = wr;
            return EINVAL;
        }
        w.wr.ud.ah = container_of(wr->wr.ud.ah, struct fah, ah)->h;
        rc = fv_prov->post_send(q->h, &w, &b);
        if (rc != 0) {
            *bad = wr;
            return rc;
        }
    }
    return 0;
}

/* The fabric's form of a BIND_MW WR's window and MR (their handles in
   place of the program's ibv_mw and ibv_mr): 0, or EINVAL for a window or
   MR that is not ucx0's or a window of another PD than the MR's. */
int
fv_bind_wr_in(struct pyrdma_send_wr *w, struct ibv_mw *mw, struct ibv_mr *mr)
{
    if (mw == NULL || !fv_ours(mw->context) || fv_mw_of(mw)->h == NULL)
        return EINVAL;
    if (mr != NULL && (!fv_ours(mr->context) || mr->pd != mw->pd))
        return EINVAL;
    w->bind_mw.mw = fv_mw_of(mw)->h;
    w->bind_mw.bind_info.mr = mr != NULL
                              ? container_of(mr, struct fmr, mr)->h : NULL;
    if (mr != NULL && w->bind_mw.bind_info.mr == NULL)
        return EINVAL;          /* revoked when its context was closed */
    return 0;
}

/* RC/UC with BIND_MW WRs in the list: post one WR at a time, those with
   the fabric's window and MR handles in them (a bound type 2 window's
   ibv_mw takes the WR's rkey, as the program's next bind names it). */
static int
post_send_bind(struct fqp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    for (; wr != NULL; wr = wr->next) {
        struct pyrdma_send_wr w, *b = NULL;
        int rc = 0;
        memcpy(&w, wr, sizeof(w));
        w.next = NULL;
        if (wr->opcode == IBV_WR_BIND_MW)
            rc = fv_bind_wr_in(&w, wr->bind_mw.mw, wr->bind_mw.bind_info.mr);
        if (rc == 0)
            rc = fv_prov->post_send(q->h, &w, &b);
        if (rc != 0) {
            *bad = wr;
            return rc;
        }
        if (wr->opcode == IBV_WR_BIND_MW)
            wr->bind_mw.mw->rkey = wr->bind_mw.rkey;
    }
    return 0;
}

int
fv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                struct ibv_send_wr **bad)
{
    struct fqp *q = container_of(qp, struct fqp, qp);
    struct ibv_send_wr *w;

    if (fv_stale(qp->context)) {
        *bad = wr;
        return EINVAL;
    }
    if (qp->qp_type == IBV_QPT_UD)
        return post_send_ud(q, wr, bad);
    for (w = wr; w != NULL; w = w->next)
        if (w->opcode == IBV_WR_BIND_MW)
            return post_send_bind(q, wr, bad);
    return fv_prov->post_send(q->h, (struct pyrdma_send_wr *)wr,
                              (struct pyrdma_send_wr **)bad);
}

int
fv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                struct ibv_recv_wr **bad)
{
    struct fqp *q = container_of(qp, struct fqp, qp);
    if (fv_stale(qp->context)) {
        *bad = wr;
        return EINVAL;
    }
    return fv_prov->post_recv(q->h, (struct pyrdma_recv_wr *)wr,
                              (struct pyrdma_recv_wr **)bad);
}

int
fv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad)
{
    struct fsrq *s = container_of(srq, struct fsrq, srq);
    if (fv_stale(srq->context)) {
        *bad = wr;
        return EINVAL;
    }
    return fv_prov->post_srq_recv(s->h, (struct pyrdma_recv_wr *)wr,
                                  (struct pyrdma_recv_wr **)bad);
}

/* ------------------------------------------------------------------ */
/* memory windows: context->ops of libibverbs' inline ibv_alloc_mw,
   ibv_dealloc_mw and ibv_bind_mw                                      */

/* Put m in (or take it out of) its context's list of windows. */
static void
mw_link(struct fmw *m, int in)
{
    struct fctx *c = fv_ctx_of(m->mw.context);
    pthread_mutex_lock(&c->mrs_lock);
    if (in) {
        m->prev = NULL;
        m->next = c->mws;
        if (c->mws != NULL)
            c->mws->prev = m;
        c->mws = m;
    } else {
        if (m->prev != NULL)
            m->prev->next = m->next;
        else if (c->mws == m)
            c->mws = m->next;
        if (m->next != NULL)
            m->next->prev = m->prev;
    }
    pthread_mutex_unlock(&c->mrs_lock);
}

struct ibv_mw *
fv_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
    struct pyrdma_status st;
    struct fmw *m;
    uint32_t rkey;
    if (fv_stale(pd->context)) {
        errno = EINVAL;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    memset(&st, 0, sizeof(st));
    if (fv_prov->alloc_mw(fv_pd_of(pd)->h, (int)type, &m->h, &rkey,
                          &st) < 0) {
        fv_failed(&st);
        free(m);
        return NULL;
    }
    m->mw.context = pd->context;
    m->mw.pd = pd;
    m->mw.rkey = rkey;
    m->mw.handle = fv_new_handle();
    m->mw.type = type;
    fv_pd_use(pd, 1);
    mw_link(m, 1);
    return &m->mw;
}

int
fv_op_dealloc_mw(struct ibv_mw *mw)
{
    struct pyrdma_status st;
    struct fmw *m = fv_mw_of(mw);
    if (fv_stale(mw->context))
        return EINVAL;
    if (m->h == NULL) {
        /* revoked when its context was closed: only the struct is left */
        free(m);
        return 0;
    }
    mw_link(m, 0);
    memset(&st, 0, sizeof(st));
    if (fv_prov->dealloc_mw(m->h, &st) < 0) {
        mw_link(m, 1);
        return fv_failed(&st);
    }
    fv_pd_use(mw->pd, -1);
    free(m);
    return 0;
}

/* ibv_bind_mw (type 1; libibverbs checked the type and the MR's PD). */
int
fv_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
    struct pyrdma_status st;
    struct pyrdma_send_wr w;
    uint32_t rkey;
    int rc;
    if (fv_stale(qp->context) || !fv_ours(mw->context))
        return EINVAL;
    memset(&w, 0, sizeof(w));
    rc = fv_bind_wr_in(&w, mw, b->bind_info.mr);
    if (rc != 0)
        return rc;
    w.bind_mw.bind_info.addr = b->bind_info.addr;
    w.bind_mw.bind_info.length = b->bind_info.length;
    w.bind_mw.bind_info.mw_access_flags = b->bind_info.mw_access_flags;
    memset(&st, 0, sizeof(st));
    if (fv_prov->bind_mw(fv_qp_of(qp)->h, w.bind_mw.mw, b->wr_id,
                         b->send_flags, &w.bind_mw.bind_info, &rkey,
                         &st) < 0)
        return fv_failed(&st);
    mw->rkey = rkey;
    return 0;
}
