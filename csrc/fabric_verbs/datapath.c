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

int
fv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                struct ibv_send_wr **bad)
{
    struct fqp *q = container_of(qp, struct fqp, qp);
    struct ibv_send_wr *w;
    int rc;

    if (fv_stale(qp->context)) {
        *bad = wr;
        return EINVAL;
    }
    if (qp->qp_type == IBV_QPT_UD)
        return post_send_ud(q, wr, bad);
    for (w = wr; w != NULL; w = w->next) {
        /* memory windows: the fabric has none (their handles would be
           ibv_mw pointers, not the fabric's) */
        if (w->opcode == IBV_WR_BIND_MW || w->opcode == IBV_WR_LOCAL_INV ||
            w->opcode == IBV_WR_SEND_WITH_INV) {
            *bad = w;
            return EOPNOTSUPP;
        }
    }
    rc = fv_prov->post_send(q->h, (struct pyrdma_send_wr *)wr,
                            (struct pyrdma_send_wr **)bad);
    return rc;
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

struct ibv_mw *
fv_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
    (void)pd;
    (void)type;
    errno = EOPNOTSUPP;
    return NULL;
}

int
fv_op_dealloc_mw(struct ibv_mw *mw)
{
    (void)mw;
    return EOPNOTSUPP;
}

int
fv_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
    (void)qp;
    (void)mw;
    (void)b;
    return EOPNOTSUPP;
}

