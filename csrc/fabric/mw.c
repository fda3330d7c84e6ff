/* mw.c - memory windows: alloc_mw and dealloc_mw, binding (a BIND_MW
   work request, which ibv_bind_mw of a type 1 window posts too),
   invalidation (LOCAL_INV, and SEND_WITH_INV at the responder), and the
   responder's check of a window's rkey (fab_mw_resolve).

   A window is a row of its own table (N.mws), not of the MR key table:
   its rkey's index is MW_IDX0 + row, so mr_lookup never returns a window
   (an rkey of a window is no lkey), and the one-sided fast path, which
   serves key indexes below SH_MR only, never sees one: every access
   through a window goes to the responder, which checks it here.  The
   rules are the IB spec's, as rxe applies them:
    - a bind needs an MR of the window's PD registered with
      IBV_ACCESS_MW_BIND, the window inside the MR, and an MR with
      IBV_ACCESS_LOCAL_WRITE for a window granting remote write or
      atomic access; the QP must be in the window's PD;
    - a type 1 window is bound by ibv_bind_mw (any number of times; a
      length of 0 unbinds it), is never invalidated by a work request
      and is never zero based;
    - a type 2 window is bound by a BIND_MW work request of a QP while it
      is free, and then serves that QP only, until LOCAL_INV (of a QP of
      its PD), a SEND_WITH_INV arriving on that QP, or dealloc_mw;
    - the 8 low bits of the rkey are the consumer's: a bind takes those
      of the work request (ibv_bind_mw: the next value), so a key given
      out before a rebind opens nothing any more;
    - an access checks the window's state, key, PD, QP (type 2), rights
      (and the QP's), and that it lies inside the window; the MR under it
      only has to still exist (its own remote rights do not matter);
    - an MR with windows bound cannot be deregistered (EINVAL, as rxe);
      destroying the QP of a type 2 window unbinds it. */
#include "fabric.h"

/* The window whose rkey is key, or NULL (N.lock held). */
struct umw *
fab_mw_lookup(uint32_t key)
{
    uint32_t idx = key >> 8;
    struct umw *w;
    if (idx < MW_IDX0 || idx - MW_IDX0 >= N.nmw)
        return NULL;
    w = N.mws[idx - MW_IDX0];
    return w != NULL && w->key == key ? w : NULL;
}

/* Window w is unbound (N.lock held). */
static void
mw_unbind(struct umw *w)
{
    if (w->bound) {
        w->mr->nmw--;
        N.mw_bound--;
    }
    w->bound = 0;
    w->mr = NULL;
    w->qp = NULL;
    w->len = 0;
    w->access = 0;
}

/* ------------------------------------------------------------------ */
/* the responder's check                                               */

/* The MR that an access (need: IBV_ACCESS_REMOTE_*, len bytes at *raddr)
   through window w on q reaches, or NULL if the window does not allow it;
   *raddr becomes the address in the MR (a zero-based window's addresses
   are offsets).  N.lock held. */
struct umr *
fab_mw_resolve(const struct uqp *q, const struct umw *w, unsigned need,
               uint64_t *raddr, uint64_t len)
{
    uint64_t off;
    if (!w->bound || w->pd != q->pd ||
        (w->type == IBV_MW_TYPE_2 && w->qp != q) ||
        (w->access & need) != need)
        return NULL;
    if (w->access & IBV_ACCESS_ZERO_BASED)
        off = *raddr;
    else if (*raddr < w->addr)
        return NULL;
    else
        off = *raddr - w->addr;
    if (len > w->len || off > w->len - len)
        return NULL;
    *raddr = w->addr + off;
    return w->mr;
}

/* ------------------------------------------------------------------ */
/* binding and invalidation: local work requests (N.lock held)         */

/* May window w be bound on q as bi asks?  0, or IBV_WC_MW_BIND_ERR. */
static int
bind_check(const struct uqp *q, const struct umw *w, uint32_t new_key,
           const struct pyrdma_mw_bind_info *bi)
{
    const struct umr *mr = bi->mr;
    unsigned acc = bi->mw_access_flags;
    if (w->pd != q->pd || (new_key >> 8) != (w->key >> 8))
        return IBV_WC_MW_BIND_ERR;
    if (w->type == IBV_MW_TYPE_2 && w->bound)
        return IBV_WC_MW_BIND_ERR;      /* invalidate it first */
    if (w->type == IBV_MW_TYPE_1 && (acc & IBV_ACCESS_ZERO_BASED))
        return IBV_WC_MW_BIND_ERR;
    if (acc & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                          IBV_ACCESS_ZERO_BASED))
        return IBV_WC_MW_BIND_ERR;
    if (bi->length == 0)
        return mr == NULL && bi->addr != 0 ? IBV_WC_MW_BIND_ERR : 0;
    if (mr == NULL || mr->pd != w->pd ||
        !(mr->access & IBV_ACCESS_MW_BIND) ||
        ((acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
         !(mr->access & IBV_ACCESS_LOCAL_WRITE)) ||
        !in_mr(mr, bi->addr, bi->length) ||
        __atomic_load_n(&mr->gone, __ATOMIC_RELAXED))
        return IBV_WC_MW_BIND_ERR;
    return 0;
}

/* Execute the BIND_MW work request wr of q: 0 or an IBV_WC_* status. */
int
fab_mw_bind_wr(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    struct umw *w = wr->bind_mw.mw;
    const struct pyrdma_mw_bind_info *bi = &wr->bind_mw.bind_info;
    uint32_t i;
    int status;

    /* the handle must be a live window (the front ends pass the
       fabric's own handles; a stale one fails as a bad key would) */
    for (i = 0; i < N.nmw; i++)
        if (N.mws[i] == w)
            break;
    if (w == NULL || i == N.nmw)
        return IBV_WC_MW_BIND_ERR;
    if (q->type != IBV_QPT_RC && q->type != IBV_QPT_UC)
        return IBV_WC_LOC_QP_OP_ERR;
    status = bind_check(q, w, wr->bind_mw.rkey, bi);
    if (status)
        return status;
    mw_unbind(w);
    w->key = wr->bind_mw.rkey;
    if (bi->length == 0)
        return 0;               /* unbound, under its new key */
    w->bound = 1;
    w->mr = bi->mr;
    w->mr->nmw++;
    N.mw_bound++;
    w->qp = w->type == IBV_MW_TYPE_2 ? q : NULL;
    w->addr = bi->addr;
    w->len = bi->length;
    w->access = bi->mw_access_flags;
    return 0;
}

/* Invalidate the window of rkey key for q: by LOCAL_INV (remote 0) or
   by a SEND_WITH_INV that arrived on q (remote 1).  0, or -1 if key is
   not a bound type 2 window q may invalidate (an MR's key included: the
   fabric's MRs are not fast-registered ones). */
int
fab_mw_invalidate(struct uqp *q, uint32_t key, int remote)
{
    struct umw *w = fab_mw_lookup(key);
    if (w == NULL || w->type != IBV_MW_TYPE_2 || !w->bound ||
        w->pd != q->pd || (remote && w->qp != q))
        return -1;
    mw_unbind(w);
    return 0;
}

/* QP q is destroyed: the type 2 windows bound to it are unbound (N.lock
   held). */
void
fab_mw_unbind_qp(struct uqp *q)
{
    uint32_t i;
    for (i = 0; N.mw_bound > 0 && i < N.nmw; i++)
        if (N.mws[i] != NULL && N.mws[i]->bound && N.mws[i]->qp == q)
            mw_unbind(N.mws[i]);
}

/* ------------------------------------------------------------------ */
/* the verbs                                                           */

/* A free row of the window table for w, growing it (N.lock held):
   the row, or -1 when MAX_MW windows exist. */
static int
mw_row(struct umw *w)
{
    uint32_t i, nn;
    struct umw **m;
    uint8_t *g;
    for (i = 0; i < N.nmw; i++)
        if (N.mws[i] == NULL)
            break;
    if (i == N.nmw) {
        nn = N.nmw ? N.nmw * 2 : 64;
        if (nn > MAX_MW)
            return -1;
        m = realloc(N.mws, sizeof(*m) * nn);
        if (m == NULL)
            return -1;
        N.mws = m;
        g = realloc(N.mw_gen, nn);
        if (g == NULL)
            return -1;
        N.mw_gen = g;
        memset(N.mws + N.nmw, 0, sizeof(*m) * (nn - N.nmw));
        memset(N.mw_gen + N.nmw, 0, nn - N.nmw);
        N.nmw = nn;
    }
    N.mw_gen[i]++;
    w->key = ((MW_IDX0 + i) << 8) | N.mw_gen[i];
    N.mws[i] = w;
    return (int)i;
}

int
fab_alloc_mw(void *pd, int type, void **out, uint32_t *rkey,
             struct pyrdma_status *st)
{
    struct umw *w;
    int row;
    if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
        return pyrdma_fail(st, EINVAL, "ibv_alloc_mw", "type %d is neither "
                           "IBV_MW_TYPE_1 nor IBV_MW_TYPE_2", type);
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    w->pd = pd;
    w->type = type;
    LOCK();
    row = mw_row(w);
    UNLOCK();
    if (row < 0) {
        free(w);
        return pyrdma_fail(st, ENOMEM, "ibv_alloc_mw", "%d memory windows "
                           "exist (max_mw)", MAX_MW);
    }
    *rkey = w->key;
    *out = w;
    return 0;
}

/* Dealloc: a bound window is unbound first (its rkey opens nothing
   after). */
int
fab_dealloc_mw(void *vmw, struct pyrdma_status *st)
{
    struct umw *w = vmw;
    (void)st;
    LOCK();
    mw_unbind(w);
    N.mws[(w->key >> 8) - MW_IDX0] = NULL;
    UNLOCK();
    free(w);
    return 0;
}

/* ibv_bind_mw (type 1): a BIND_MW work request to the next rkey. */
int
fab_bind_mw(void *qp, void *mw, uint64_t wr_id, unsigned int flags,
            const struct pyrdma_mw_bind_info *bi, uint32_t *rkey,
            struct pyrdma_status *st)
{
    struct umw *w = mw;
    struct pyrdma_send_wr wr, *bad = NULL;
    uint32_t key;
    int rc;
    if (w->type != IBV_MW_TYPE_1)
        return pyrdma_fail(st, EINVAL, "ibv_bind_mw", "a type 2 window is "
                           "bound by posting IBV_WR_BIND_MW");
    LOCK();
    key = w->key;
    UNLOCK();
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = flags;
    wr.bind_mw.mw = w;
    wr.bind_mw.rkey = (key & ~0xffu) | ((key + 1) & 0xffu);
    wr.bind_mw.bind_info = *bi;
    rc = fab_post_send(qp, &wr, &bad);
    if (rc)
        return pyrdma_fail(st, rc, "ibv_bind_mw", "the QP refused the bind");
    *rkey = wr.bind_mw.rkey;
    return 0;
}

/* The fabric keeps a window's key itself (fab_mw_bind_wr). */
void
fab_mw_rekeyed(void *mw, uint32_t rkey)
{
    (void)mw;
    (void)rkey;
}
