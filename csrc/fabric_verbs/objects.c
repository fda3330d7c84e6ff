/* objects.c - the verbs front end's objects: PDs, MRs, completion
   channels, CQs, SRQs, QPs and AHs of ucx0 (the real libibverbs gets
   every other device's). */
#include "front.h"

/* ------------------------------------------------------------------ */
/* PD, MR                                                              */

EXPORT struct ibv_pd *
ibv_alloc_pd(struct ibv_context *ctx)
{
    REAL(struct ibv_pd *, ibv_alloc_pd, "IBVERBS_1.1", (struct ibv_context *));
    struct pyrdma_status st;
    struct fpd *p;
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx) : (errno = EINVAL, NULL);
    if (fv_stale(ctx))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (fv_prov->alloc_pd(fv_ctx_of(ctx)->h, &p->h, &st) < 0) {
        fv_failed(&st);
        free(p);
        return NULL;
    }
    p->pd.context = ctx;
    p->pd.handle = fv_new_handle();
    fv_use(&fv_ctx_of(ctx)->users, 1);
    return &p->pd;
}

EXPORT int
ibv_dealloc_pd(struct ibv_pd *pd)
{
    REAL(int, ibv_dealloc_pd, "IBVERBS_1.1", (struct ibv_pd *));
    struct pyrdma_status st;
    struct fpd *p;
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd) : EINVAL;
    if (fv_stale(pd->context))
        return EINVAL;   /* inherited across fork() */
    p = container_of(pd, struct fpd, pd);
    if (fv_in_use(&p->users))
        return EBUSY;
    if (fv_prov->dealloc_pd(p->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_ctx_of(pd->context)->users, -1);
    free(p);
    return 0;
}

static struct ibv_mr *
reg_mr(struct ibv_pd *pd, void *addr, size_t length, unsigned int access)
{
    struct pyrdma_status st;
    struct pyrdma_mr_info info;
    struct fmr *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* the optional flags (relaxed ordering...) may be ignored */
    access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
    if (fv_prov->reg_mr(fv_pd_of(pd)->h, addr, length, access, &m->h, &info,
                        &st) < 0) {
        fv_failed(&st);
        free(m);
        return NULL;
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = fv_new_handle();
    m->mr.lkey = info.lkey;
    m->mr.rkey = info.rkey;
    fv_use(&fv_pd_of(pd)->users, 1);
    return &m->mr;
}

EXPORT struct ibv_mr *
ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    REAL(struct ibv_mr *, ibv_reg_mr, "IBVERBS_1.1",
         (struct ibv_pd *, void *, size_t, int));
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, addr, length, access)
                       : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    return reg_mr(pd, addr, length, (unsigned int)access);
}

EXPORT struct ibv_mr *
ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                int access)
{
    REAL(struct ibv_mr *, ibv_reg_mr_iova, "IBVERBS_1.7",
         (struct ibv_pd *, void *, size_t, uint64_t, int));
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, addr, length, iova, access)
                       : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    if (iova != (uintptr_t)addr) {
        errno = EOPNOTSUPP;     /* the fabric's MRs are addressed by VA */
        return NULL;
    }
    return reg_mr(pd, addr, length, (unsigned int)access);
}

EXPORT struct ibv_mr *
ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                 unsigned int access)
{
    REAL(struct ibv_mr *, ibv_reg_mr_iova2, "IBVERBS_1.8",
         (struct ibv_pd *, void *, size_t, uint64_t, unsigned int));
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, addr, length, iova, access)
                       : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    if (iova != (uintptr_t)addr) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return reg_mr(pd, addr, length, access);
}

EXPORT struct ibv_mr *
ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                  uint64_t iova, int fd, int access)
{
    REAL(struct ibv_mr *, ibv_reg_dmabuf_mr, "IBVERBS_1.12",
         (struct ibv_pd *, uint64_t, size_t, uint64_t, int, int));
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, offset, length, iova, fd, access)
                       : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    errno = EOPNOTSUPP;
    return NULL;
}

EXPORT int
ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
             size_t length, int access)
{
    REAL(int, ibv_rereg_mr, "IBVERBS_1.1",
         (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int));
    if (!fv_ours(mr->context))
        return real_fn ? real_fn(mr, flags, pd, addr, length, access)
                       : IBV_REREG_MR_ERR_INPUT;
    if (fv_stale(mr->context))
        return IBV_REREG_MR_ERR_INPUT;   /* inherited across fork() */
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;     /* the old MR stays valid */
}

EXPORT int
ibv_dereg_mr(struct ibv_mr *mr)
{
    REAL(int, ibv_dereg_mr, "IBVERBS_1.1", (struct ibv_mr *));
    struct pyrdma_status st;
    struct fmr *m;
    if (!fv_ours(mr->context))
        return real_fn ? real_fn(mr) : EINVAL;
    if (fv_stale(mr->context))
        return EINVAL;   /* inherited across fork() */
    m = container_of(mr, struct fmr, mr);
    if (fv_prov->dereg_mr(m->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_pd_of(mr->pd)->users, -1);
    free(m);
    return 0;
}

EXPORT struct ibv_pd *
ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
    REAL(struct ibv_pd *, ibv_import_pd, "IBVERBS_1.10",
         (struct ibv_context *, uint32_t));
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx, handle) : (errno = EINVAL, NULL);
    if (fv_stale(ctx))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    errno = EOPNOTSUPP;
    return NULL;
}

EXPORT struct ibv_mr *
ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
    REAL(struct ibv_mr *, ibv_import_mr, "IBVERBS_1.10",
         (struct ibv_pd *, uint32_t));
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, handle) : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    errno = EOPNOTSUPP;
    return NULL;
}

/* ------------------------------------------------------------------ */
/* completion channels and CQs                                         */

EXPORT struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *ctx)
{
    REAL(struct ibv_comp_channel *, ibv_create_comp_channel, "IBVERBS_1.0",
         (struct ibv_context *));
    struct pyrdma_status st;
    struct fcc *c;
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx) : (errno = EINVAL, NULL);
    if (fv_stale(ctx))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (fv_prov->create_comp_channel(fv_ctx_of(ctx)->h, &c->h, &c->prov_fd,
                               &st) < 0) {
        fv_failed(&st);
        free(c);
        return NULL;
    }
    c->cc.fd = fv_watch_fd(c->prov_fd);
    if (c->cc.fd < 0) {
        int e = errno;
        fv_prov->destroy_comp_channel(c->h, &st);
        free(c);
        errno = e;
        return NULL;
    }
    c->cc.context = ctx;
    c->cc.refcnt = 0;
    fv_use(&fv_ctx_of(ctx)->users, 1);
    return &c->cc;
}

EXPORT int
ibv_destroy_comp_channel(struct ibv_comp_channel *cc)
{
    REAL(int, ibv_destroy_comp_channel, "IBVERBS_1.0",
         (struct ibv_comp_channel *));
    struct pyrdma_status st;
    struct fcc *c;
    if (!fv_ours(cc->context))
        return real_fn ? real_fn(cc) : EINVAL;
    if (fv_stale(cc->context))
        return EINVAL;   /* inherited across fork() */
    c = container_of(cc, struct fcc, cc);
    if (__atomic_load_n(&cc->refcnt, __ATOMIC_ACQUIRE) != 0)
        return EBUSY;
    if (fv_prov->destroy_comp_channel(c->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_ctx_of(cc->context)->users, -1);
    close(cc->fd);
    free(c);
    return 0;
}

/* A new CQ of ucx0 (channel checked by the caller); NULL with errno. */
struct fcq *
fv_cq_new(struct ibv_context *ctx, int cqe, void *cq_context,
          struct ibv_comp_channel *channel, int comp_vector)
{
    struct pyrdma_status st;
    struct fcq *c;
    int actual = 0;
    if (channel != NULL && channel->context != ctx) {
        errno = EINVAL;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* the fabric's cq_context is the ibv_cq: get_cq_event returns it */
    if (fv_prov->create_cq(fv_ctx_of(ctx)->h, cqe, &c->cq,
                     channel ? container_of(channel, struct fcc, cc)->h : NULL,
                     comp_vector, &c->h, &actual, &st) < 0) {
        fv_failed(&st);
        free(c);
        return NULL;
    }
    c->cq.context = ctx;
    c->cq.channel = channel;
    c->cq.cq_context = cq_context;
    c->cq.handle = fv_new_handle();
    c->cq.cqe = actual;
    pthread_mutex_init(&c->cq.mutex, NULL);
    pthread_cond_init(&c->cq.cond, NULL);
    if (channel != NULL)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
    fv_use(&fv_ctx_of(ctx)->users, 1);
    return c;
}

EXPORT struct ibv_cq *
ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
              struct ibv_comp_channel *channel, int comp_vector)
{
    REAL(struct ibv_cq *, ibv_create_cq, "IBVERBS_1.1",
         (struct ibv_context *, int, void *, struct ibv_comp_channel *, int));
    struct fcq *c;
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx, cqe, cq_context, channel, comp_vector)
                       : (errno = EINVAL, NULL);
    if (fv_stale(ctx))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    c = fv_cq_new(ctx, cqe, cq_context, channel, comp_vector);
    return c ? &c->cq : NULL;
}

EXPORT int
ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    REAL(int, ibv_resize_cq, "IBVERBS_1.1", (struct ibv_cq *, int));
    struct pyrdma_status st;
    int actual = 0;
    if (!fv_ours(cq->context))
        return real_fn ? real_fn(cq, cqe) : EINVAL;
    if (fv_stale(cq->context))
        return EINVAL;   /* inherited across fork() */
    if (fv_prov->resize_cq == NULL)
        return EOPNOTSUPP;
    if (fv_prov->resize_cq(container_of(cq, struct fcq, cq)->h, cqe, &actual,
                     &st) < 0)
        return fv_failed(&st);
    cq->cqe = actual;
    return 0;
}

EXPORT int
ibv_destroy_cq(struct ibv_cq *cq)
{
    REAL(int, ibv_destroy_cq, "IBVERBS_1.1", (struct ibv_cq *));
    struct pyrdma_status st;
    struct fcq *c;
    if (!fv_ours(cq->context))
        return real_fn ? real_fn(cq) : EINVAL;
    if (fv_stale(cq->context))
        return EINVAL;   /* inherited across fork() */
    c = container_of(cq, struct fcq, cq);
    if (fv_in_use(&c->users))
        return EBUSY;   /* a QP still uses it */
    if (fv_prov->destroy_cq(c->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_ctx_of(cq->context)->users, -1);
    if (cq->channel != NULL)
        __atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    free(c);
    return 0;
}

EXPORT int
ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq,
                 void **cq_context)
{
    REAL(int, ibv_get_cq_event, "IBVERBS_1.1",
         (struct ibv_comp_channel *, struct ibv_cq **, void **));
    struct pyrdma_status st;
    struct fcc *c;
    void *got = NULL;

    if (!fv_ours(cc->context))
        return real_fn ? real_fn(cc, cq, cq_context) : (errno = EINVAL, -1);
    if (fv_stale(cc->context))
        return (errno = EINVAL, -1);   /* inherited across fork() */
    c = container_of(cc, struct fcc, cc);
    for (;;) {
        int r = fv_prov->get_cq_event(c->h, &got, &st);
        if (r < 0) {
            fv_failed(&st);
            return -1;
        }
        if (r == 1)
            break;
        if (fv_wait_fd(cc->fd) < 0)
            return -1;
    }
    *cq = (struct ibv_cq *)got;
    *cq_context = (*cq)->cq_context;
    return 0;
}

EXPORT void
ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    REAL(void, ibv_ack_cq_events, "IBVERBS_1.1",
         (struct ibv_cq *, unsigned int));
    if (!fv_ours(cq->context)) {
        if (real_fn != NULL)
            real_fn(cq, nevents);
        return;
    }
    if (fv_stale(cq->context))
        return;     /* inherited across fork() */
    fv_prov->ack_cq_events(container_of(cq, struct fcq, cq)->h, nevents);
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------------ */
/* SRQ                                                                 */

EXPORT struct ibv_srq *
ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
    REAL(struct ibv_srq *, ibv_create_srq, "IBVERBS_1.1",
         (struct ibv_pd *, struct ibv_srq_init_attr *));
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    struct fsrq *s;
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, init) : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    a.max_wr = init->attr.max_wr;
    a.max_sge = init->attr.max_sge;
    a.srq_limit = init->attr.srq_limit;
    if (fv_prov->create_srq(container_of(pd, struct fpd, pd)->h, &a, s, &s->h,
                      &st) < 0) {
        fv_failed(&st);
        free(s);
        return NULL;
    }
    init->attr.max_wr = a.max_wr;
    init->attr.max_sge = a.max_sge;
    s->srq.context = pd->context;
    s->srq.srq_context = init->srq_context;
    s->srq.pd = pd;
    s->srq.handle = fv_new_handle();
    fv_use(&fv_pd_of(pd)->users, 1);
    pthread_mutex_init(&s->srq.mutex, NULL);
    pthread_cond_init(&s->srq.cond, NULL);
    return &s->srq;
}

EXPORT int
ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    REAL(int, ibv_modify_srq, "IBVERBS_1.1",
         (struct ibv_srq *, struct ibv_srq_attr *, int));
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    if (!fv_ours(srq->context))
        return real_fn ? real_fn(srq, attr, mask) : EINVAL;
    if (fv_stale(srq->context))
        return EINVAL;   /* inherited across fork() */
    a.max_wr = attr->max_wr;
    a.max_sge = attr->max_sge;
    a.srq_limit = attr->srq_limit;
    if (fv_prov->modify_srq(container_of(srq, struct fsrq, srq)->h, &a, mask,
                      &st) < 0)
        return fv_failed(&st);
    return 0;
}

EXPORT int
ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    REAL(int, ibv_query_srq, "IBVERBS_1.1",
         (struct ibv_srq *, struct ibv_srq_attr *));
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    if (!fv_ours(srq->context))
        return real_fn ? real_fn(srq, attr) : EINVAL;
    if (fv_stale(srq->context))
        return EINVAL;   /* inherited across fork() */
    if (fv_prov->query_srq(fv_srq_of(srq)->h, &a, &st) < 0)
        return fv_failed(&st);
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    attr->srq_limit = a.srq_limit;
    return 0;
}

EXPORT int
ibv_destroy_srq(struct ibv_srq *srq)
{
    REAL(int, ibv_destroy_srq, "IBVERBS_1.1", (struct ibv_srq *));
    struct pyrdma_status st;
    struct fsrq *s;
    if (!fv_ours(srq->context))
        return real_fn ? real_fn(srq) : EINVAL;
    if (fv_stale(srq->context))
        return EINVAL;   /* inherited across fork() */
    s = container_of(srq, struct fsrq, srq);
    if (fv_in_use(&s->users))
        return EBUSY;   /* a QP still uses it */
    if (fv_prov->destroy_srq(s->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_pd_of(srq->pd)->users, -1);
    pthread_mutex_destroy(&srq->mutex);
    pthread_cond_destroy(&srq->cond);
    free(s);
    return 0;
}

/* ------------------------------------------------------------------ */
/* QP                                                                  */

EXPORT struct ibv_qp *
ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    REAL(struct ibv_qp *, ibv_create_qp, "IBVERBS_1.1",
         (struct ibv_pd *, struct ibv_qp_init_attr *));
    struct pyrdma_status st;
    struct pyrdma_qp_init_attr a;
    struct fqp *q;
    uint32_t qpn = 0;

    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, init) : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    if (init->send_cq == NULL || init->recv_cq == NULL ||
        init->send_cq->context != pd->context ||
        init->recv_cq->context != pd->context ||
        (init->srq != NULL && init->srq->context != pd->context)) {
        errno = EINVAL;
        return NULL;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    memset(&a, 0, sizeof(a));
    a.send_cq = container_of(init->send_cq, struct fcq, cq)->h;
    a.recv_cq = container_of(init->recv_cq, struct fcq, cq)->h;
    a.srq = init->srq ? container_of(init->srq, struct fsrq, srq)->h : NULL;
    a.qp_context = q;       /* async events name the fqp */
    fv_cap_in(&a.cap, &init->cap);
    a.qp_type = init->qp_type;
    a.sq_sig_all = init->sq_sig_all;
    if (fv_prov->create_qp(fv_pd_of(pd)->h, &a, &q->h, &qpn, &st) < 0) {
        fv_failed(&st);
        free(q);
        return NULL;
    }
    fv_cap_out(&init->cap, &a.cap);
    q->sq_sig_all = init->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = init->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.srq = init->srq;
    q->qp.handle = fv_new_handle();
    q->qp.qp_num = qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = init->qp_type;
    fv_use(&fv_pd_of(pd)->users, 1);
    fv_use(&fv_cq_of(init->send_cq)->users, 1);
    fv_use(&fv_cq_of(init->recv_cq)->users, 1);
    if (init->srq != NULL)
        fv_use(&fv_srq_of(init->srq)->users, 1);
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    return &q->qp;
}

EXPORT int
ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    REAL(int, ibv_modify_qp, "IBVERBS_1.1",
         (struct ibv_qp *, struct ibv_qp_attr *, int));
    struct pyrdma_status st;
    struct pyrdma_qp_attr a;
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, attr, mask) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    fv_qp_attr_in(&a, attr);
    if (fv_prov->modify_qp(container_of(qp, struct fqp, qp)->h, &a, mask,
                     &st) < 0)
        return fv_failed(&st);
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

EXPORT int
ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
             struct ibv_qp_init_attr *init)
{
    REAL(int, ibv_query_qp, "IBVERBS_1.1",
         (struct ibv_qp *, struct ibv_qp_attr *, int,
          struct ibv_qp_init_attr *));
    struct pyrdma_status st;
    struct pyrdma_qp_attr a;
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, attr, mask, init) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    memset(&a, 0, sizeof(a));
    if (fv_prov->query_qp(container_of(qp, struct fqp, qp)->h, &a, mask,
                          &st) < 0)
        return fv_failed(&st);
    fv_qp_attr_out(attr, &a);
    if (init != NULL) {
        memset(init, 0, sizeof(*init));
        init->qp_context = qp->qp_context;
        init->send_cq = qp->send_cq;
        init->recv_cq = qp->recv_cq;
        init->srq = qp->srq;
        init->cap = attr->cap;
        init->qp_type = qp->qp_type;
        init->sq_sig_all = container_of(qp, struct fqp, qp)->sq_sig_all;
    }
    qp->state = attr->qp_state;
    return 0;
}

EXPORT int
ibv_destroy_qp(struct ibv_qp *qp)
{
    REAL(int, ibv_destroy_qp, "IBVERBS_1.1", (struct ibv_qp *));
    struct pyrdma_status st;
    struct fqp *q;
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    q = container_of(qp, struct fqp, qp);
    if (fv_prov->destroy_qp(q->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_pd_of(qp->pd)->users, -1);
    fv_use(&fv_cq_of(qp->send_cq)->users, -1);
    fv_use(&fv_cq_of(qp->recv_cq)->users, -1);
    if (qp->srq != NULL)
        fv_use(&fv_srq_of(qp->srq)->users, -1);
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    free(q->x);
    free(q->sg);
    free(q->ib);
    free(q);
    return 0;
}

EXPORT struct ibv_qp_ex *
ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    REAL(struct ibv_qp_ex *, ibv_qp_to_qp_ex, "IBVERBS_1.6",
         (struct ibv_qp *));
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp) : NULL;
    if (fv_stale(qp->context))
        return NULL;   /* inherited across fork() */
    if (container_of(qp, struct fqp, qp)->send_ops != 0)
        return &container_of(qp, struct fqp, qp)->qpx;
    errno = EOPNOTSUPP;     /* created without send_ops_flags */
    return NULL;
}

EXPORT int
ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    REAL(int, ibv_query_ece, "IBVERBS_1.10", (struct ibv_qp *,
                                               struct ibv_ece *));
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, ece) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    return EOPNOTSUPP;
}

EXPORT int
ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    REAL(int, ibv_set_ece, "IBVERBS_1.10", (struct ibv_qp *,
                                             struct ibv_ece *));
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, ece) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    return EOPNOTSUPP;
}

EXPORT int
ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                           uint32_t flags)
{
    REAL(int, ibv_query_qp_data_in_order, "IBVERBS_1.14",
         (struct ibv_qp *, enum ibv_wr_opcode, uint32_t));
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, op, flags) : 0;
    if (fv_stale(qp->context))
        return 0;   /* inherited across fork() */
    return 0;   /* no guarantee is made about the order data lands in */
}

EXPORT int
ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    REAL(int, ibv_attach_mcast, "IBVERBS_1.1",
         (struct ibv_qp *, const union ibv_gid *, uint16_t));
    struct pyrdma_status st;
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, gid, lid) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    if (fv_prov->attach_mcast == NULL)
        return EOPNOTSUPP;
    if (fv_prov->attach_mcast(container_of(qp, struct fqp, qp)->h, gid->raw,
                              lid, &st) < 0)
        return fv_failed(&st);
    return 0;
}

EXPORT int
ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    REAL(int, ibv_detach_mcast, "IBVERBS_1.1",
         (struct ibv_qp *, const union ibv_gid *, uint16_t));
    struct pyrdma_status st;
    if (!fv_ours(qp->context))
        return real_fn ? real_fn(qp, gid, lid) : EINVAL;
    if (fv_stale(qp->context))
        return EINVAL;   /* inherited across fork() */
    if (fv_prov->detach_mcast == NULL)
        return EOPNOTSUPP;
    if (fv_prov->detach_mcast(container_of(qp, struct fqp, qp)->h, gid->raw,
                              lid, &st) < 0)
        return fv_failed(&st);
    return 0;
}

/* ------------------------------------------------------------------ */
/* AH                                                                  */

EXPORT struct ibv_ah *
ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    REAL(struct ibv_ah *, ibv_create_ah, "IBVERBS_1.1",
         (struct ibv_pd *, struct ibv_ah_attr *));
    struct pyrdma_status st;
    struct pyrdma_ah_attr a;
    struct fah *h;
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, attr) : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    fv_ah_in(&a, attr);
    fv_in_fabric++;
    if (fv_prov->create_ah(container_of(pd, struct fpd, pd)->h, &a, &h->h,
                     &st) < 0) {
        fv_in_fabric--;
        fv_failed(&st);
        free(h);
        return NULL;
    }
    fv_in_fabric--;
    h->ah.context = pd->context;
    h->ah.pd = pd;
    h->ah.handle = fv_new_handle();
    fv_use(&fv_pd_of(pd)->users, 1);
    return &h->ah;
}

EXPORT int
ibv_destroy_ah(struct ibv_ah *ah)
{
    REAL(int, ibv_destroy_ah, "IBVERBS_1.1", (struct ibv_ah *));
    struct pyrdma_status st;
    struct fah *h;
    if (!fv_ours(ah->context))
        return real_fn ? real_fn(ah) : EINVAL;
    if (fv_stale(ah->context))
        return EINVAL;   /* inherited across fork() */
    h = container_of(ah, struct fah, ah);
    if (fv_prov->destroy_ah(h->h, &st) < 0)
        return fv_failed(&st);
    fv_use(&fv_pd_of(ah->pd)->users, -1);
    free(h);
    return 0;
}

EXPORT int
ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
                    struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
    REAL(int, ibv_init_ah_from_wc, "IBVERBS_1.1",
         (struct ibv_context *, uint8_t, struct ibv_wc *, struct ibv_grh *,
          struct ibv_ah_attr *));
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx, port, wc, grh, ah) : EINVAL;
    if (fv_stale(ctx))
        return EINVAL;   /* inherited across fork() */
    memset(ah, 0, sizeof(*ah));
    ah->dlid = wc->slid;
    ah->sl = wc->sl;
    ah->src_path_bits = wc->dlid_path_bits;
    ah->port_num = port;
    if (wc->wc_flags & IBV_WC_GRH) {
        uint32_t f = be32toh(grh->version_tclass_flow);
        ah->is_global = 1;
        ah->grh.dgid = grh->sgid;   /* back to where it came from */
        ah->grh.sgid_index = 0;     /* the fabric port has one GID */
        ah->grh.flow_label = f & 0xfffff;
        ah->grh.traffic_class = (f >> 20) & 0xff;
        ah->grh.hop_limit = 0xff;
    }
    return 0;
}

EXPORT struct ibv_ah *
ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                      struct ibv_grh *grh, uint8_t port)
{
    REAL(struct ibv_ah *, ibv_create_ah_from_wc, "IBVERBS_1.1",
         (struct ibv_pd *, struct ibv_wc *, struct ibv_grh *, uint8_t));
    struct ibv_ah_attr a;
    if (!fv_ours(pd->context))
        return real_fn ? real_fn(pd, wc, grh, port) : (errno = EINVAL, NULL);
    if (fv_stale(pd->context))
        return (errno = EINVAL, NULL);   /* inherited across fork() */
    if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a) != 0)
        return NULL;
    return ibv_create_ah(pd, &a);
}

EXPORT int
ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr,
                            uint8_t eth_mac[6], uint16_t *vid)
{
    REAL(int, ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1",
         (struct ibv_context *, struct ibv_ah_attr *, uint8_t *, uint16_t *));
    if (!fv_ours(ctx))
        return real_fn ? real_fn(ctx, attr, eth_mac, vid) : EINVAL;
    if (fv_stale(ctx))
        return EINVAL;   /* inherited across fork() */
    return EOPNOTSUPP;      /* the fabric is not Ethernet */
}

