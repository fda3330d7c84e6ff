/* import.c - sharing a ucx0 context inside its process: ibv_import_device
   on (a dup of) a context's cmd_fd gives a second context on the same
   fabric context, as the kernel gives one on the same uverbs file;
   ibv_import_pd and ibv_import_mr give views of that context's PDs and
   MRs by handle, ibv_unimport_pd/_mr drop them.  The fabric context goes
   with the last context on it.  A view counts as a user of what it
   shows, and so do the objects made in a PD view (the original's
   dealloc_pd / dereg_mr is EBUSY until they are gone); destroying a view
   (dealloc_pd, dereg_mr) releases it, as unimport does.  Another process's cmd_fd is EOPNOTSUPP: the fabric
   context lives in its process. */
#include <sys/stat.h>

#include "front.h"

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fctx *ctxs;       /* open ucx0 contexts */
static struct fpd *pds;         /* PDs (not views) */
static struct fmr *mrs;         /* MRs (not views) */

/* Put o in (in: 1) or take it out of the list at *head, whose link is
   the member at offset off. */
static void
reg(void **head, void *o, size_t off, int in)
{
    void **pp;
    pthread_mutex_lock(&reg_lock);
    if (in) {
        *(void **)((char *)o + off) = *head;
        *head = o;
    }
    else {
        for (pp = head; *pp != NULL; pp = (void **)((char *)*pp + off))
            if (*pp == o) {
                *pp = *(void **)((char *)o + off);
                break;
            }
    }
    pthread_mutex_unlock(&reg_lock);
}

void
fv_reg_ctx(struct fctx *c, int in)
{
    reg((void **)&ctxs, c, offsetof(struct fctx, rnext), in);
}

void
fv_reg_pd(struct fpd *p, int in)
{
    reg((void **)&pds, p, offsetof(struct fpd, rnext), in);
}

void
fv_reg_mr(struct fmr *m, int in)
{
    reg((void **)&mrs, m, offsetof(struct fmr, rnext), in);
}

/* c is closed: out of the list, one context less on its fabric context;
   1 if it was the last (the caller closes the fabric context). */
int
fv_ctx_release(struct fctx *c)
{
    fv_reg_ctx(c, 0);
    return __atomic_sub_fetch(c->refs, 1, __ATOMIC_ACQ_REL) == 0;
}

/* The open context whose cmd_fd is the file fd is (a dup of), or NULL. */
static struct fctx *
ctx_of_cmd_fd(int fd)
{
    struct stat want, st;
    struct fctx *c;
    if (fstat(fd, &want) < 0)
        return NULL;
    pthread_mutex_lock(&reg_lock);
    for (c = ctxs; c != NULL; c = c->rnext)
        if (fstat(c->vctx.context.cmd_fd, &st) == 0 &&
            st.st_dev == want.st_dev && st.st_ino == want.st_ino &&
            !fv_stale(&c->vctx.context)) {
            fv_use(c->refs, 1);         /* taken while listed: alive */
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return c;
}

struct ibv_context *
fv_import_ctx(int cmd_fd)
{
    struct fctx *o = ctx_of_cmd_fd(cmd_fd), *c;
    struct ibv_context *ctx;
    if (o == NULL) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c != NULL) {
        ctx = &c->vctx.context;
        c->h = o->h;
        c->refs = o->refs;
        ctx->async_fd = fv_watch_fd(fv_prov->async_fd(c->h));
        if (ctx->async_fd >= 0) {
            ctx->cmd_fd = cmd_fd;       /* the context's now (closed with
                                           it, as libibverbs does) */
            fv_ctx_setup(c, o->vctx.context.device);
            fv_reg_ctx(c, 1);
            return ctx;
        }
        free(c);
    }
    __atomic_sub_fetch(o->refs, 1, __ATOMIC_ACQ_REL);
    errno = ENOMEM;
    return NULL;
}

EXPORT struct ibv_pd *
ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
    FORWARD(struct ibv_pd *, ibv_import_pd, "IBVERBS_1.10",
            (struct ibv_context *, uint32_t), ctx, (ctx, handle),
            (errno = EINVAL, NULL));
    struct fpd *o, *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&reg_lock);
    for (o = pds; o != NULL; o = o->rnext)
        if (o->pd.handle == handle && o->h != NULL &&
            fv_ctx_of(o->pd.context)->h == fv_ctx_of(ctx)->h) {
            fv_use(&o->users, 1);       /* the view uses it */
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    if (o == NULL) {
        free(p);
        errno = EINVAL;                 /* no such PD in this context */
        return NULL;
    }
    p->pd.context = ctx;
    p->pd.handle = handle;
    p->h = o->h;
    p->orig = o;
    return &p->pd;
}

/* One object more (d 1) or less (-1) in pd; in a view, in the PD it
   shows too (the PD's dealloc waits for them).  A released view goes with
   its last object. */
void
fv_pd_use(struct ibv_pd *pd, int d)
{
    struct fpd *p = fv_pd_of(pd);
    int gone;
    if (p->orig == NULL) {
        fv_use(&p->users, d);
        return;
    }
    pthread_mutex_lock(&reg_lock);      /* against a concurrent release */
    p->users += d;
    fv_use(&p->orig->users, d);
    gone = p->users == 0 && p->released;
    pthread_mutex_unlock(&reg_lock);
    if (gone)
        free(p);
}

/* Release view p of a PD (ibv_unimport_pd, ibv_dealloc_pd on it): it no
   longer holds the PD; freed now, or with the last object made in it. */
int
fv_pd_release_import(struct fpd *p)
{
    int gone;
    pthread_mutex_lock(&reg_lock);
    if (p->released) {
        pthread_mutex_unlock(&reg_lock);
        return 0;
    }
    p->released = 1;
    fv_use(&p->orig->users, -1);
    gone = p->users == 0;
    pthread_mutex_unlock(&reg_lock);
    if (gone)
        free(p);
    return 0;
}

EXPORT void
ibv_unimport_pd(struct ibv_pd *pd)
{
    REAL(void, ibv_unimport_pd, "IBVERBS_1.10", (struct ibv_pd *));
    if (!fv_ours(pd->context)) {
        if (real_fn != NULL)
            real_fn(pd);
        return;
    }
    if (fv_pd_of(pd)->orig != NULL)
        fv_pd_release_import(fv_pd_of(pd));
}

EXPORT struct ibv_mr *
ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
    FORWARD(struct ibv_mr *, ibv_import_mr, "IBVERBS_1.10",
            (struct ibv_pd *, uint32_t), pd->context, (pd, handle),
            (errno = EINVAL, NULL));
    struct fmr *o, *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&reg_lock);
    for (o = mrs; o != NULL; o = o->rnext)
        if (o->mr.handle == handle && o->h != NULL &&
            fv_pd_of(o->mr.pd)->h == fv_pd_of(pd)->h) {
            o->imports++;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    if (o == NULL) {
        free(m);
        errno = EINVAL;                 /* no such MR in this PD */
        return NULL;
    }
    /* as the kernel's import: keys and length, no address */
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.handle = handle;
    m->mr.length = o->mr.length;
    m->mr.lkey = o->mr.lkey;
    m->mr.rkey = o->mr.rkey;
    m->h = o->h;
    m->access = o->access;
    m->orig = o;
    return &m->mr;
}

/* Release view m of an MR. */
int
fv_mr_release_import(struct fmr *m)
{
    pthread_mutex_lock(&reg_lock);
    m->orig->imports--;
    pthread_mutex_unlock(&reg_lock);
    free(m);
    return 0;
}

EXPORT void
ibv_unimport_mr(struct ibv_mr *mr)
{
    REAL(void, ibv_unimport_mr, "IBVERBS_1.10", (struct ibv_mr *));
    if (!fv_ours(mr->context)) {
        if (real_fn != NULL)
            real_fn(mr);
        return;
    }
    if (container_of(mr, struct fmr, mr)->orig != NULL)
        fv_mr_release_import(container_of(mr, struct fmr, mr));
}
