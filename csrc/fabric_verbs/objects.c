/* objects.c - the verbs front end's objects: PDs, MRs, completion
   channels, CQs, SRQs, QPs and AHs of ucx0 (the real libibverbs gets
   every other device's). */
#include "front.h"

/* ------------------------------------------------------------------ */
/* what making and destroying every object shares                     */

/* A zeroed object of size bytes; NULL with errno ENOMEM. */
static void *
obj_new(size_t size)
{
    void *o = calloc(1, size);
    if (o == NULL)
        errno = ENOMEM;
    return o;
}

/* The fabric refused to create o (status st): errno from st, o freed;
   NULL. */
static void *
obj_failed(void *o, const struct pyrdma_status *st)
{
    int e = fv_failed(st);
    free(o);
    errno = e;
    return NULL;
}

/* The public fields of a new object o of context ctx (context, handle);
   ctx counts it. */
#define IN_CONTEXT(o, ctx_) \
    ((o)->context = (ctx_), (o)->handle = fv_new_handle(), \
     fv_use(&fv_ctx_of(ctx_)->users, 1))

/* The public fields of a new object o of PD pd (context, pd, handle); the
   PD counts it. */
#define IN_PD(o, pd_) \
    ((o)->context = (pd_)->context, (o)->pd = (pd_), \
     (o)->handle = fv_new_handle(), fv_pd_use(pd_, 1))

/* Destroy the fabric object h (with the fabric's destroy op) of a ucx0
   object: EBUSY while users (NULL: not counted) says others still use it.
   Then parent, the count of the context it was in, goes down (NULL: the
   caller's fv_pd_use does it for a PD's objects).  0 or
   an errno; the caller frees the object's own parts. */
static int
unmake(void *h, int *users, int (*destroy)(void *, struct pyrdma_status *),
       int *parent)
{
    struct pyrdma_status st;
    if (users != NULL && fv_in_use(users))
        return EBUSY;
    if (destroy(h, &st) < 0)
        return fv_failed(&st);
    if (parent != NULL)
        fv_use(parent, -1);
    return 0;
}

/* The mutex and condition of a CQ, SRQ or QP (libibverbs' fields, used
   by the event calls). */
static void
sync_init(pthread_mutex_t *m, pthread_cond_t *c)
{
    pthread_mutex_init(m, NULL);
    pthread_cond_init(c, NULL);
}

static void
sync_fini(pthread_mutex_t *m, pthread_cond_t *c)
{
    pthread_mutex_destroy(m);
    pthread_cond_destroy(c);
}

/* ------------------------------------------------------------------ */
/* PD, MR                                                              */

EXPORT struct ibv_pd *
ibv_alloc_pd(struct ibv_context *ctx)
{
    FORWARD(struct ibv_pd *, ibv_alloc_pd, "IBVERBS_1.1",
            (struct ibv_context *), ctx, (ctx), (errno = EINVAL, NULL));
    struct pyrdma_status st;
    struct fpd *p = obj_new(sizeof(*p));
    if (p == NULL)
        return NULL;
    if (fv_prov->alloc_pd(fv_ctx_of(ctx)->h, &p->h, &st) < 0)
        return obj_failed(p, &st);
    IN_CONTEXT(&p->pd, ctx);
    fv_reg_pd(p, 1);                /* ibv_import_pd finds it */
    return &p->pd;
}

EXPORT int
ibv_dealloc_pd(struct ibv_pd *pd)
{
    FORWARD(int, ibv_dealloc_pd, "IBVERBS_1.1", (struct ibv_pd *),
            pd->context, (pd), EINVAL);
    struct fpd *p = fv_pd_of(pd);
    int e;
    if (p->orig != NULL)            /* a view (import.c): released */
        return fv_pd_release_import(p);
    fv_reg_pd(p, 0);
    e = unmake(p->h, &p->users, fv_prov->dealloc_pd,
               &fv_ctx_of(pd->context)->users);
    if (e == 0)
        free(p);
    else
        fv_reg_pd(p, 1);
    return e;
}

/* Put m in (or take it out of) its context's list of MRs. */
static void
mr_link(struct fmr *m, int in)
{
    struct fctx *c = fv_ctx_of(m->mr.context);
    pthread_mutex_lock(&c->mrs_lock);
    if (in) {
        m->prev = NULL;
        m->next = c->mrs;
        if (c->mrs != NULL)
            c->mrs->prev = m;
        c->mrs = m;
    } else {
        if (m->prev != NULL)
            m->prev->next = m->next;
        else
            c->mrs = m->next;
        if (m->next != NULL)
            m->next->prev = m->prev;
    }
    pthread_mutex_unlock(&c->mrs_lock);
}

void
fv_revoke_mrs(struct fctx *c)
{
    struct pyrdma_status st;
    struct fmr *m;
    struct fmw *w;
    pthread_mutex_lock(&c->mrs_lock);
    w = c->mws;
    c->mws = NULL;
    pthread_mutex_unlock(&c->mrs_lock);
    for (; w != NULL; w = w->next) {    /* windows first: they hold MRs */
        if (fv_prov->dealloc_mw(w->h, &st) == 0) {
            w->h = NULL;
            fv_pd_use(w->mw.pd, -1);
        }
    }
    pthread_mutex_lock(&c->mrs_lock);
    m = c->mrs;
    c->mrs = NULL;
    pthread_mutex_unlock(&c->mrs_lock);
    for (; m != NULL; m = m->next) {
        if (fv_prov->dereg_mr(m->h, &st) < 0) {
            fv_failed(&st);
            continue;
        }
        m->h = NULL;
        fv_pd_use(m->mr.pd, -1);
    }
}

static struct ibv_mr *
reg_mr(struct ibv_pd *pd, void *addr, size_t length, unsigned int access)
{
    struct pyrdma_status st;
    struct pyrdma_mr_info info;
    struct fmr *m = obj_new(sizeof(*m));
    if (m == NULL)
        return NULL;
    /* the optional flags (relaxed ordering...) may be ignored */
    access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
    if (fv_prov->reg_mr(fv_pd_of(pd)->h, addr, length, access, &m->h, &info,
                        &st) < 0)
        return obj_failed(m, &st);
    m->mr.addr = addr;
    m->mr.length = length;
    m->access = access;
    m->mr.lkey = info.lkey;
    m->mr.rkey = info.rkey;
    IN_PD(&m->mr, pd);
    mr_link(m, 1);
    fv_reg_mr(m, 1);                /* ibv_import_mr finds it */
    return &m->mr;
}

EXPORT struct ibv_mr *
ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    FORWARD(struct ibv_mr *, ibv_reg_mr, "IBVERBS_1.1",
            (struct ibv_pd *, void *, size_t, int), pd->context,
            (pd, addr, length, access), (errno = EINVAL, NULL));
    return reg_mr(pd, addr, length, (unsigned int)access);
}

EXPORT struct ibv_mr *
ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                int access)
{
    FORWARD(struct ibv_mr *, ibv_reg_mr_iova, "IBVERBS_1.7",
            (struct ibv_pd *, void *, size_t, uint64_t, int), pd->context,
            (pd, addr, length, iova, access), (errno = EINVAL, NULL));
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
    FORWARD(struct ibv_mr *, ibv_reg_mr_iova2, "IBVERBS_1.8",
            (struct ibv_pd *, void *, size_t, uint64_t, unsigned int),
            pd->context, (pd, addr, length, iova, access),
            (errno = EINVAL, NULL));
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
    FORWARD(struct ibv_mr *, ibv_reg_dmabuf_mr, "IBVERBS_1.12",
            (struct ibv_pd *, uint64_t, size_t, uint64_t, int, int),
            pd->context, (pd, offset, length, iova, fd, access),
            (errno = EINVAL, NULL));
    errno = EOPNOTSUPP;
    return NULL;
}

/* ibv_rereg_mr on ucx0: libibverbs' own checks of the arguments
   (IBV_REREG_MR_ERR_INPUT), then the fabric's (IBV_REREG_MR_ERR_CMD, the
   MR as it was); the MR's fields follow what changed. */
static int
rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
         size_t length, int access)
{
    struct fmr *m = container_of(mr, struct fmr, mr);
    struct pyrdma_status st;
    struct pyrdma_mr_info info;
    unsigned int acc = (unsigned int)access &
                       ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
    if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
        ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
         (addr == NULL || length == 0)) ||
        (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
        ((flags & IBV_REREG_MR_CHANGE_PD) &&
         (pd == NULL || pd->context != mr->context)) || m->h == NULL) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (fv_prov->rereg_mr(m->h, flags,
                          (flags & IBV_REREG_MR_CHANGE_PD) ?
                          fv_pd_of(pd)->h : NULL, addr, length, acc, &info,
                          &st) < 0) {
        errno = st.err ? st.err : EINVAL;
        return IBV_REREG_MR_ERR_CMD;
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = addr;
        mr->length = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        fv_pd_use(pd, 1);
        fv_pd_use(mr->pd, -1);
        mr->pd = pd;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        m->access = acc;
    mr->lkey = info.lkey;
    mr->rkey = info.rkey;
    return 0;
}

/* The ODP MR of c in pd whose lkey is sge's and which covers it, with
   local write if write; 1 if there is one. */
static int
odp_mr_covers(struct fctx *c, struct ibv_pd *pd, const struct ibv_sge *sge,
              int write)
{
    struct fmr *m;
    int ok = 0;
    pthread_mutex_lock(&c->mrs_lock);
    for (m = c->mrs; m != NULL && !ok; m = m->next)
        ok = m->mr.lkey == sge->lkey && m->mr.pd == pd && m->h != NULL &&
             (m->access & IBV_ACCESS_ON_DEMAND) &&
             (!write || (m->access & IBV_ACCESS_LOCAL_WRITE)) &&
             sge->addr >= (uintptr_t)m->mr.addr &&
             sge->length <= m->mr.length &&
             sge->addr - (uintptr_t)m->mr.addr <=
             m->mr.length - sge->length;
    pthread_mutex_unlock(&c->mrs_lock);
    return ok;
}

/* ibv_advise_mr (verbs_context op): prefetch ranges of ODP MRs.  The
   fabric reads and writes a program's memory itself, when a WR runs, and
   never pins it: there is nothing to fault in ahead, so a prefetch only
   checks its arguments as a NIC's driver does -- a known advice, only
   IBV_ADVISE_MR_FLAG_FLUSH, each s/g element inside an ODP MR of pd (with
   local write for PREFETCH_WRITE): else EINVAL. */
int
fv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
             uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
    struct fctx *c = fv_ctx_of(pd->context);
    uint32_t i;
    if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
        return EOPNOTSUPP;
    if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || num_sge == 0 ||
        sg_list == NULL)
        return EINVAL;
    for (i = 0; i < num_sge; i++)
        if (!odp_mr_covers(c, pd, &sg_list[i],
                           advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE))
            return EINVAL;
    return 0;
}

EXPORT int
ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
             size_t length, int access)
{
    FORWARD(int, ibv_rereg_mr, "IBVERBS_1.1",
            (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int),
            mr->context, (mr, flags, pd, addr, length, access),
            IBV_REREG_MR_ERR_INPUT);
    return rereg_mr(mr, flags, pd, addr, length, access);
}

EXPORT int
ibv_dereg_mr(struct ibv_mr *mr)
{
    FORWARD(int, ibv_dereg_mr, "IBVERBS_1.1", (struct ibv_mr *),
            mr->context, (mr), EINVAL);
    struct fmr *m = container_of(mr, struct fmr, mr);
    int e;
    if (m->orig != NULL)            /* a view (import.c): released */
        return fv_mr_release_import(m);
    fv_reg_mr(m, 0);
    if (__atomic_load_n(&m->imports, __ATOMIC_ACQUIRE) != 0) {
        fv_reg_mr(m, 1);
        return EBUSY;               /* imported views of it are left */
    }
    if (m->h == NULL) {
        /* revoked when its context was closed: only the struct is left */
        free(m);
        return 0;
    }
    mr_link(m, 0);
    e = unmake(m->h, NULL, fv_prov->dereg_mr, NULL);
    if (e == 0)
        fv_pd_use(mr->pd, -1);
    if (e != 0) {
        mr_link(m, 1);
        fv_reg_mr(m, 1);
        return e;
    }
    free(m);
    return 0;
}

/* ------------------------------------------------------------------ */
/* completion channels and CQs                                         */

EXPORT struct ibv_comp_channel *
ibv_create_comp_channel(struct ibv_context *ctx)
{
    FORWARD(struct ibv_comp_channel *, ibv_create_comp_channel,
            "IBVERBS_1.0", (struct ibv_context *), ctx, (ctx),
            (errno = EINVAL, NULL));
    struct pyrdma_status st;
    struct fcc *c = obj_new(sizeof(*c));
    if (c == NULL)
        return NULL;
    if (fv_prov->create_comp_channel(fv_ctx_of(ctx)->h, &c->h, &c->prov_fd,
                                     &st) < 0)
        return obj_failed(c, &st);
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
    FORWARD(int, ibv_destroy_comp_channel, "IBVERBS_1.0",
            (struct ibv_comp_channel *), cc->context, (cc), EINVAL);
    struct fcc *c = container_of(cc, struct fcc, cc);
    int e = unmake(c->h, &cc->refcnt, fv_prov->destroy_comp_channel,
                   &fv_ctx_of(cc->context)->users);
    if (e != 0)
        return e;
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
    c = obj_new(sizeof(*c));
    if (c == NULL)
        return NULL;
    /* the fabric's cq_context is the ibv_cq: get_cq_event returns it */
    if (fv_prov->create_cq(fv_ctx_of(ctx)->h, cqe, &c->cq,
                     channel ? container_of(channel, struct fcc, cc)->h : NULL,
                     comp_vector, &c->h, &actual, &st) < 0)
        return obj_failed(c, &st);
    c->cq.channel = channel;
    c->cq.cq_context = cq_context;
    c->cq.cqe = actual;
    sync_init(&c->cq.mutex, &c->cq.cond);
    if (channel != NULL)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
    IN_CONTEXT(&c->cq, ctx);
    return c;
}

EXPORT struct ibv_cq *
ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
              struct ibv_comp_channel *channel, int comp_vector)
{
    FORWARD(struct ibv_cq *, ibv_create_cq, "IBVERBS_1.1",
            (struct ibv_context *, int, void *, struct ibv_comp_channel *,
             int), ctx, (ctx, cqe, cq_context, channel, comp_vector),
            (errno = EINVAL, NULL));
    struct fcq *c = fv_cq_new(ctx, cqe, cq_context, channel, comp_vector);
    return c ? &c->cq : NULL;
}

EXPORT int
ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    FORWARD(int, ibv_resize_cq, "IBVERBS_1.1", (struct ibv_cq *, int),
            cq->context, (cq, cqe), EINVAL);
    struct pyrdma_status st;
    int actual = 0;
    if (fv_prov->resize_cq == NULL)
        return EOPNOTSUPP;
    if (fv_prov->resize_cq(fv_cq_of(cq)->h, cqe, &actual, &st) < 0)
        return fv_failed(&st);
    cq->cqe = actual;
    return 0;
}

EXPORT int
ibv_destroy_cq(struct ibv_cq *cq)
{
    FORWARD(int, ibv_destroy_cq, "IBVERBS_1.1", (struct ibv_cq *),
            cq->context, (cq), EINVAL);
    struct fcq *c = fv_cq_of(cq);
    /* EBUSY while a QP still uses it */
    int e = unmake(c->h, &c->users, fv_prov->destroy_cq,
                   &fv_ctx_of(cq->context)->users);
    if (e != 0)
        return e;
    if (cq->channel != NULL)
        __atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
    sync_fini(&cq->mutex, &cq->cond);
    free(c);
    return 0;
}

EXPORT int
ibv_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq,
                 void **cq_context)
{
    FORWARD(int, ibv_get_cq_event, "IBVERBS_1.1",
            (struct ibv_comp_channel *, struct ibv_cq **, void **),
            cc->context, (cc, cq, cq_context), (errno = EINVAL, -1));
    struct pyrdma_status st;
    struct fcc *c = container_of(cc, struct fcc, cc);
    void *got = NULL;

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
    /* returns nothing: FORWARD's return of a value does not fit */
    REAL(void, ibv_ack_cq_events, "IBVERBS_1.1",
         (struct ibv_cq *, unsigned int));
    if (!fv_ours(cq->context)) {
        if (real_fn != NULL)
            real_fn(cq, nevents);
        return;
    }
    if (fv_stale(cq->context))
        return;     /* inherited across fork() */
    fv_prov->ack_cq_events(fv_cq_of(cq)->h, nevents);
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
    FORWARD(struct ibv_srq *, ibv_create_srq, "IBVERBS_1.1",
            (struct ibv_pd *, struct ibv_srq_init_attr *), pd->context,
            (pd, init), (errno = EINVAL, NULL));
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    struct fsrq *s = obj_new(sizeof(*s));
    if (s == NULL)
        return NULL;
    a.max_wr = init->attr.max_wr;
    a.max_sge = init->attr.max_sge;
    a.srq_limit = init->attr.srq_limit;
    if (fv_prov->create_srq(fv_pd_of(pd)->h, &a, s, &s->h, &st) < 0)
        return obj_failed(s, &st);
    init->attr.max_wr = a.max_wr;
    init->attr.max_sge = a.max_sge;
    s->srq.srq_context = init->srq_context;
    sync_init(&s->srq.mutex, &s->srq.cond);
    IN_PD(&s->srq, pd);
    return &s->srq;
}

EXPORT int
ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
    FORWARD(int, ibv_modify_srq, "IBVERBS_1.1",
            (struct ibv_srq *, struct ibv_srq_attr *, int), srq->context,
            (srq, attr, mask), EINVAL);
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    a.max_wr = attr->max_wr;
    a.max_sge = attr->max_sge;
    a.srq_limit = attr->srq_limit;
    if (fv_prov->modify_srq(fv_srq_of(srq)->h, &a, mask, &st) < 0)
        return fv_failed(&st);
    return 0;
}

EXPORT int
ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    FORWARD(int, ibv_query_srq, "IBVERBS_1.1",
            (struct ibv_srq *, struct ibv_srq_attr *), srq->context,
            (srq, attr), EINVAL);
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
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
    FORWARD(int, ibv_destroy_srq, "IBVERBS_1.1", (struct ibv_srq *),
            srq->context, (srq), EINVAL);
    struct fsrq *s = fv_srq_of(srq);
    /* EBUSY while a QP still uses it */
    int e = unmake(s->h, &s->users, fv_prov->destroy_srq, NULL);
    if (e != 0)
        return e;
    fv_pd_use(srq->pd, -1);
    sync_fini(&srq->mutex, &srq->cond);
    free(s);
    return 0;
}

/* ------------------------------------------------------------------ */
/* QP                                                                  */

/* The CQs and SRQ of a QP counting it (d: 1) or no longer (d: -1). */
static void
qp_uses(struct ibv_cq *send_cq, struct ibv_cq *recv_cq, struct ibv_srq *srq,
        int d)
{
    fv_use(&fv_cq_of(send_cq)->users, d);
    fv_use(&fv_cq_of(recv_cq)->users, d);
    if (srq != NULL)
        fv_use(&fv_srq_of(srq)->users, d);
}

EXPORT struct ibv_qp *
ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    FORWARD(struct ibv_qp *, ibv_create_qp, "IBVERBS_1.1",
            (struct ibv_pd *, struct ibv_qp_init_attr *), pd->context,
            (pd, init), (errno = EINVAL, NULL));
    struct pyrdma_status st;
    struct pyrdma_qp_init_attr a;
    struct fqp *q;
    uint32_t qpn = 0;

    if (init->send_cq == NULL || init->recv_cq == NULL ||
        init->send_cq->context != pd->context ||
        init->recv_cq->context != pd->context ||
        (init->srq != NULL && init->srq->context != pd->context)) {
        errno = EINVAL;
        return NULL;
    }
    q = obj_new(sizeof(*q));
    if (q == NULL)
        return NULL;
    memset(&a, 0, sizeof(a));
    a.send_cq = fv_cq_of(init->send_cq)->h;
    a.recv_cq = fv_cq_of(init->recv_cq)->h;
    a.srq = init->srq ? fv_srq_of(init->srq)->h : NULL;
    a.qp_context = q;       /* async events name the fqp */
    fv_cap_in(&a.cap, &init->cap);
    a.qp_type = init->qp_type;
    a.sq_sig_all = init->sq_sig_all;
    if (fv_prov->create_qp(fv_pd_of(pd)->h, &a, &q->h, &qpn, &st) < 0)
        return obj_failed(q, &st);
    fv_cap_out(&init->cap, &a.cap);
    q->sq_sig_all = init->sq_sig_all;
    q->qp.qp_context = init->qp_context;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.srq = init->srq;
    q->qp.qp_num = qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = init->qp_type;
    sync_init(&q->qp.mutex, &q->qp.cond);
    IN_PD(&q->qp, pd);
    qp_uses(init->send_cq, init->recv_cq, init->srq, 1);
    return &q->qp;
}

EXPORT int
ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    FORWARD(int, ibv_modify_qp, "IBVERBS_1.1",
            (struct ibv_qp *, struct ibv_qp_attr *, int), qp->context,
            (qp, attr, mask), EINVAL);
    struct pyrdma_status st;
    struct pyrdma_qp_attr a;
    fv_qp_attr_in(&a, attr);
    if (fv_prov->modify_qp(fv_qp_of(qp)->h, &a, mask, &st) < 0)
        return fv_failed(&st);
    if (mask & IBV_QP_STATE)
        qp->state = attr->qp_state;
    return 0;
}

EXPORT int
ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
             struct ibv_qp_init_attr *init)
{
    FORWARD(int, ibv_query_qp, "IBVERBS_1.1",
            (struct ibv_qp *, struct ibv_qp_attr *, int,
             struct ibv_qp_init_attr *), qp->context,
            (qp, attr, mask, init), EINVAL);
    struct pyrdma_status st;
    struct pyrdma_qp_attr a;
    memset(&a, 0, sizeof(a));
    if (fv_prov->query_qp(fv_qp_of(qp)->h, &a, mask, &st) < 0)
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
        init->sq_sig_all = fv_qp_of(qp)->sq_sig_all;
    }
    qp->state = attr->qp_state;
    return 0;
}

EXPORT int
ibv_destroy_qp(struct ibv_qp *qp)
{
    FORWARD(int, ibv_destroy_qp, "IBVERBS_1.1", (struct ibv_qp *),
            qp->context, (qp), EINVAL);
    struct fqp *q = fv_qp_of(qp);
    int e = unmake(q->h, NULL, fv_prov->destroy_qp, NULL);
    if (e != 0)
        return e;
    fv_pd_use(qp->pd, -1);
    qp_uses(qp->send_cq, qp->recv_cq, qp->srq, -1);
    sync_fini(&qp->mutex, &qp->cond);
    free(q->x);
    free(q->sg);
    free(q->ib);
    free(q);
    return 0;
}

EXPORT struct ibv_qp_ex *
ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    FORWARD(struct ibv_qp_ex *, ibv_qp_to_qp_ex, "IBVERBS_1.6",
            (struct ibv_qp *), qp->context, (qp), NULL);
    if (fv_qp_of(qp)->send_ops != 0)
        return &fv_qp_of(qp)->qpx;
    errno = EOPNOTSUPP;     /* created without send_ops_flags */
    return NULL;
}

EXPORT int
ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    FORWARD(int, ibv_query_ece, "IBVERBS_1.10",
            (struct ibv_qp *, struct ibv_ece *), qp->context, (qp, ece),
            EINVAL);
    return EOPNOTSUPP;
}

EXPORT int
ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    FORWARD(int, ibv_set_ece, "IBVERBS_1.10",
            (struct ibv_qp *, struct ibv_ece *), qp->context, (qp, ece),
            EINVAL);
    return EOPNOTSUPP;
}

EXPORT int
ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                           uint32_t flags)
{
    FORWARD(int, ibv_query_qp_data_in_order, "IBVERBS_1.14",
            (struct ibv_qp *, enum ibv_wr_opcode, uint32_t), qp->context,
            (qp, op, flags), 0);
    return 0;   /* no guarantee is made about the order data lands in */
}

/* Attach (attach: 1) or detach QP qp of ucx0 to multicast group gid/lid. */
static int
mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid, int attach)
{
    struct pyrdma_status st;
    int (*op)(void *, const uint8_t *, uint16_t, struct pyrdma_status *) =
        attach ? fv_prov->attach_mcast : fv_prov->detach_mcast;
    if (op == NULL)
        return EOPNOTSUPP;
    if (op(fv_qp_of(qp)->h, gid->raw, lid, &st) < 0)
        return fv_failed(&st);
    return 0;
}

EXPORT int
ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    FORWARD(int, ibv_attach_mcast, "IBVERBS_1.1",
            (struct ibv_qp *, const union ibv_gid *, uint16_t), qp->context,
            (qp, gid, lid), EINVAL);
    return mcast(qp, gid, lid, 1);
}

EXPORT int
ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    FORWARD(int, ibv_detach_mcast, "IBVERBS_1.1",
            (struct ibv_qp *, const union ibv_gid *, uint16_t), qp->context,
            (qp, gid, lid), EINVAL);
    return mcast(qp, gid, lid, 0);
}

/* ------------------------------------------------------------------ */
/* AH                                                                  */

EXPORT struct ibv_ah *
ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    FORWARD(struct ibv_ah *, ibv_create_ah, "IBVERBS_1.1",
            (struct ibv_pd *, struct ibv_ah_attr *), pd->context,
            (pd, attr), (errno = EINVAL, NULL));
    struct pyrdma_status st;
    struct pyrdma_ah_attr a;
    int r;
    struct fah *h = obj_new(sizeof(*h));
    if (h == NULL)
        return NULL;
    fv_ah_in(&a, attr);
    fv_in_fabric++;
    r = fv_prov->create_ah(fv_pd_of(pd)->h, &a, &h->h, &st);
    fv_in_fabric--;
    if (r < 0)
        return obj_failed(h, &st);
    IN_PD(&h->ah, pd);
    return &h->ah;
}

EXPORT int
ibv_destroy_ah(struct ibv_ah *ah)
{
    FORWARD(int, ibv_destroy_ah, "IBVERBS_1.1", (struct ibv_ah *),
            ah->context, (ah), EINVAL);
    struct fah *h = container_of(ah, struct fah, ah);
    int e = unmake(h->h, NULL, fv_prov->destroy_ah, NULL);
    if (e == 0) {
        fv_pd_use(ah->pd, -1);
        free(h);
    }
    return e;
}

EXPORT int
ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
                    struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
    FORWARD(int, ibv_init_ah_from_wc, "IBVERBS_1.1",
            (struct ibv_context *, uint8_t, struct ibv_wc *,
             struct ibv_grh *, struct ibv_ah_attr *), ctx,
            (ctx, port, wc, grh, ah), EINVAL);
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
    FORWARD(struct ibv_ah *, ibv_create_ah_from_wc, "IBVERBS_1.1",
            (struct ibv_pd *, struct ibv_wc *, struct ibv_grh *, uint8_t),
            pd->context, (pd, wc, grh, port), (errno = EINVAL, NULL));
    struct ibv_ah_attr a;
    if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a) != 0)
        return NULL;
    return ibv_create_ah(pd, &a);
}

EXPORT int
ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr,
                            uint8_t eth_mac[6], uint16_t *vid)
{
    FORWARD(int, ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1",
            (struct ibv_context *, struct ibv_ah_attr *, uint8_t *,
             uint16_t *), ctx, (ctx, attr, eth_mac, vid), EINVAL);
    return EOPNOTSUPP;      /* the fabric is not Ethernet */
}

