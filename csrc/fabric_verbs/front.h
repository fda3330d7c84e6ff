/* front.h - the internal header of the verbs front end
   (csrc/fabric_verbs/): its objects, its state and the helpers its files
   share.  See device.c for how the front end coexists with libibverbs. */
#ifndef PYRDMA_FABRIC_VERBS_FRONT_H
#define PYRDMA_FABRIC_VERBS_FRONT_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "fabric_lib.h"
#include "settings.h"

/* verbs.h wraps these in macros; here they are the functions themselves */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

#define EXPORT __attribute__((visibility("default")))
#define container_of(p, type, member) \
    ((type *)((char *)(p) - offsetof(type, member)))

/* ------------------------------------------------------------------ */
/* objects                                                             */

/* A ucx0 context. */
struct fctx {
    struct verbs_context vctx; /* what the program sees: vctx.context */
    void *h;                   /* fabric context handle */
    int users;                 /* PDs, CQs and channels not yet destroyed
                                  (while any is, close leaves it open) */
    unsigned gen;              /* fv_gen when opened (another value: a
                                  child process inherited it by fork()) */
    pthread_mutex_t mrs_lock;  /* guards mrs and mws */
    struct fmr *mrs;           /* its MRs not yet deregistered (closing it
                                  with objects left revokes them) */
    struct fmw *mws;           /* its memory windows (revoked first: an MR
                                  with windows bound stays registered) */
    int *refs;                 /* contexts on h: this one and those
                                  imported from it (import.c) */
    struct fctx *rnext;        /* in import.c's list of contexts */
};

/* A protection domain. */
struct fpd {
    struct ibv_pd pd;          /* what the program sees */
    void *h;                   /* fabric PD handle */
    int users;                 /* MRs, QPs, SRQs and AHs in it, and its
                                  imports */
    struct fpd *orig;          /* imported (ibv_import_pd): the PD it is
                                  a view of, else NULL */
    int released;              /* a view unimported while objects made in
                                  it were left: freed with the last */
    struct fpd *rnext;         /* in import.c's list of PDs */
};

/* A memory region. */
struct fmr {
    struct ibv_mr mr;          /* what the program sees */
    void *h;                   /* fabric MR handle (NULL: revoked when its
                                  context was closed) */
    unsigned int access;       /* IBV_ACCESS_* as registered */
    struct fmr *next, *prev;   /* in fctx.mrs */
    struct fmr *orig;          /* imported (ibv_import_mr): the MR it is
                                  a view of, else NULL */
    int imports;               /* views of it not yet released */
    struct fmr *rnext;         /* in import.c's list of MRs */
};

/* A memory window. */
struct fmw {
    struct ibv_mw mw;          /* what the program sees */
    void *h;                   /* fabric MW handle (NULL: revoked when its
                                  context was closed) */
    struct fmw *next, *prev;   /* in fctx.mws */
};

/* A completion channel. */
struct fcc {
    struct ibv_comp_channel cc; /* what the program sees (fd: an epoll fd) */
    void *h;                    /* fabric channel handle */
    int prov_fd;                /* the fabric's eventfd, watched by cc.fd */
};

/* A completion queue (ibv_create_cq or ibv_create_cq_ex). */
struct fcq {
    union {
        struct ibv_cq cq;      /* what the program sees */
        struct ibv_cq_ex cqx;  /* the same, extended (it begins as an
                                  ibv_cq: ibv_cq_ex_to_cq is a cast) */
    };
    void *h;                   /* fabric CQ handle */
    int users;                 /* QPs using it (as send and as recv CQ) */
    struct pyrdma_wc cur;      /* cq_ex: the completion being read */
};

/* A shared receive queue. */
struct fsrq {
    struct ibv_srq srq;        /* what the program sees */
    void *h;                   /* fabric SRQ handle */
    int users;                 /* QPs using it */
};

/* A queue pair. */
struct fqp {
    union {
        struct ibv_qp qp;      /* what the program sees */
        struct ibv_qp_ex qpx;  /* the same with the ibv_wr_* API (it begins
                                  with the ibv_qp) */
    };
    void *h;                   /* fabric QP handle */
    int sq_sig_all;            /* as created (for ibv_query_qp) */
    uint64_t send_ops;         /* IBV_QP_EX_WITH_* it was created with; 0:
                                  no ibv_wr_* API (ibv_qp_to_qp_ex NULL) */
    struct xwr *x;             /* ibv_wr_*: the WRs since wr_start */
    int nx, capx;              /*   how many, allocated */
    struct pyrdma_sge *sg;     /*   their s/g entries */
    int nsg, capsg;            /*   how many, allocated */
    uint8_t *ib;               /*   their inline data */
    size_t nib, capib;         /*   bytes, allocated */
    int xerr;                  /*   an errno for wr_complete, or 0 */
};

/* A work request being built with the ibv_wr_* API. */
struct xwr {
    struct pyrdma_send_wr wr;  /* sg_list and next are set by wr_complete */
    int sge_first;             /* its first entry in fqp.sg */
    int nsge;                  /* its entries */
    int inl;                   /* 1: its entries' addr are offsets in fqp.ib */
    struct ibv_mw *mw;         /* BIND_MW: the program's window */
};

/* An address handle. */
struct fah {
    struct ibv_ah ah;          /* what the program sees */
    void *h;                   /* fabric AH handle */
};

/* A device list handed out by ibv_get_device_list.  A program that
   free()s devs instead of calling ibv_free_device_list leaves its entry
   (and the real list) behind, as libibverbs leaves its device references;
   the newest entry of an address is found first. */
struct flist {
    struct flist *next;        /* registry of lists handed out */
    struct ibv_device **real;  /* the real list inside it (or NULL) */
    struct ibv_device **devs;  /* NULL-terminated: real devices, then ucx0;
                                  malloc'ed on its own */
};

/* ------------------------------------------------------------------ */
/* state and helpers (device.c unless said)                            */

/* objects.c: deregister every MR of a context closed with objects left,
   as the kernel does (no access reaches their memory afterwards). */
void fv_revoke_mrs(struct fctx *c);

extern const struct pyrdma_provider *fv_prov; /* the fabric, once loaded */
extern struct ibv_device fv_dev;               /* the ucx0 device */
extern __thread int fv_in_fabric;              /* >0: this thread runs the
                                                  fabric (UCX may call
                                                  libibverbs then) */
extern unsigned fv_gen;                        /* fork() generation: +1 in
                                                  each child */

/* Log a failure when RDMA_FABRIC_VERBS_DEBUG is set. */
void fv_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set errno from a failed fabric call; return its errno value. */
int fv_failed(const struct pyrdma_status *st);
/* Must the caller at ret (a return address) see the real libraries? */
int fv_real_caller(const void *ret);
/* The real libibverbs function name@version (NULL if not loaded). */
void *fv_real_sym(const char *name, const char *version);
/* A new value for an object's handle field. */
uint32_t fv_new_handle(void);
/* An epoll fd watching fd; -1 with errno. */
int fv_watch_fd(int fd);
/* Wait until fd is readable unless it is O_NONBLOCK; 0, or -1 with errno. */
int fv_wait_fd(int fd);

/* In each interposer: real_fn, the real libibverbs function. */
#define REAL(ret, name, ver, params) \
    static ret (*real_fn) params; \
    if (real_fn == NULL) \
        *(void **)&real_fn = fv_real_sym(#name, ver)

static inline int
fv_ours(const struct ibv_context *c)
{
    return c != NULL && c->device == &fv_dev;
}

static inline struct fctx *
fv_ctx_of(struct ibv_context *c)
{
    return container_of(c, struct fctx, vctx.context);
}

/* 1 if ucx0 context c was opened before a fork() of this process (a child
   inherited it): its objects are the parent's and every verb on them fails
   (EINVAL, errno or NULL as the verb returns), as Python's do. */
static inline int
fv_stale(struct ibv_context *c)
{
    return fv_ctx_of(c)->gen != __atomic_load_n(&fv_gen, __ATOMIC_RELAXED);
}

/* The head of most interposers: real_fn (see REAL), then the dispatch.
   A call on an object of another device goes to the real libibverbs
   function (args: its arguments in parentheses); one on a ucx0 object
   inherited across fork() fails.  bad is what the verb returns on failure
   (with errno set where the verb sets it), also when libibverbs lacks the
   function. */
#define FORWARD(ret, name, ver, params, ctx, args, bad) \
    REAL(ret, name, ver, params); \
    if (!fv_ours(ctx)) \
        return real_fn ? real_fn args : (bad); \
    if (fv_stale(ctx)) \
        return (bad)

/* Use counts: a NIC refuses to destroy an object that others still use
   (EBUSY); the fabric itself leaves that to its caller. */
static inline void
fv_use(int *users, int d)
{
    __atomic_add_fetch(users, d, __ATOMIC_ACQ_REL);
}

static inline int
fv_in_use(int *users)
{
    return __atomic_load_n(users, __ATOMIC_ACQUIRE) != 0;
}

static inline struct fpd *
fv_pd_of(struct ibv_pd *p)
{
    return container_of(p, struct fpd, pd);
}

static inline struct fcq *
fv_cq_of(struct ibv_cq *c)
{
    return container_of(c, struct fcq, cq);
}

static inline struct fsrq *
fv_srq_of(struct ibv_srq *s)
{
    return container_of(s, struct fsrq, srq);
}

static inline struct fqp *
fv_qp_of(struct ibv_qp *q)
{
    return container_of(q, struct fqp, qp);
}

static inline struct fmw *
fv_mw_of(struct ibv_mw *m)
{
    return container_of(m, struct fmw, mw);
}

/* The fabric's form of a BIND_MW WR's window and MR (w: a copy of the
   program's WR); 0 or EINVAL for objects not of ucx0 (datapath.c). */
int fv_bind_wr_in(struct pyrdma_send_wr *w, struct ibv_mw *mw,
                  struct ibv_mr *mr);

/* conversions between libibverbs' and the fabric's structs (convert.c) */
void fv_ah_in(struct pyrdma_ah_attr *o, const struct ibv_ah_attr *a);
void fv_ah_out(struct ibv_ah_attr *o, const struct pyrdma_ah_attr *a);
void fv_cap_in(struct pyrdma_qp_cap *o, const struct ibv_qp_cap *c);
void fv_cap_out(struct ibv_qp_cap *o, const struct pyrdma_qp_cap *c);
void fv_qp_attr_in(struct pyrdma_qp_attr *o, const struct ibv_qp_attr *a);
void fv_qp_attr_out(struct ibv_qp_attr *o, const struct pyrdma_qp_attr *a);
void fv_port_out(struct ibv_port_attr *o, const struct pyrdma_port_attr *a);
void fv_device_out(struct ibv_device_attr *o,
                   const struct pyrdma_device_attr *a);

/* context->ops, the inline data path (datapath.c) */
int fv_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int fv_op_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int fv_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                    struct ibv_send_wr **bad);
int fv_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                    struct ibv_recv_wr **bad);
int fv_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad);
struct ibv_mw *fv_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int fv_op_dealloc_mw(struct ibv_mw *mw);
int fv_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b);

/* objects (objects.c): a new CQ of ucx0, NULL with errno */
struct fcq *fv_cq_new(struct ibv_context *ctx, int cqe, void *cq_context,
                      struct ibv_comp_channel *channel, int comp_vector);

/* the _ex verbs of the verbs_context (extended.c) */
struct ibv_cq_ex *fv_create_cq_ex(struct ibv_context *ctx,
                                  struct ibv_cq_init_attr_ex *a);
/* import.c */
void fv_ctx_setup(struct fctx *c, struct ibv_device *dev);
struct ibv_context *fv_import_ctx(int cmd_fd);
void fv_reg_ctx(struct fctx *c, int in);
void fv_reg_pd(struct fpd *p, int in);
void fv_reg_mr(struct fmr *m, int in);
int fv_ctx_release(struct fctx *c);
int fv_pd_release_import(struct fpd *p);
void fv_pd_use(struct ibv_pd *pd, int d);
int fv_mr_release_import(struct fmr *m);
int fv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
                 uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge);
struct ibv_qp *fv_create_qp_ex(struct ibv_context *ctx,
                               struct ibv_qp_init_attr_ex *a);

#endif /* PYRDMA_FABRIC_VERBS_FRONT_H */
