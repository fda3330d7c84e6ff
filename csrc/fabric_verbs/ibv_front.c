/* ibv_front.c - the software fabric as a verbs device ("ucx0") for
   unmodified C programs: an LD_PRELOAD library that interposes libibverbs. */

/*
 * How it coexists with the real libibverbs (which the program links, and
 * which UCX's own InfiniBand transport uses inside the fabric):
 *
 *  - This library is preloaded, so the program's references to the
 *    exported ibv_* functions bind here first (ibv_front.map gives each the
 *    version libibverbs gives it).  Each one looks at its object: an object
 *    of ucx0 (its context's device is fab_dev) is handled here through the
 *    fabric's ops table (struct pyrdma_provider, librdma_fabric.so); any
 *    other object goes to the real function, found with dlvsym(RTLD_NEXT).
 *  - UCX also calls ibv_get_device_list (its IB transport, while the fabric
 *    node starts): such calls, and every call made while the fabric runs
 *    on this thread, see the real devices only, so UCX never opens ucx0.
 *  - The objects are genuine: a struct verbs_context (abi_compat says
 *    "extended"), ibv_pd, ibv_cq, ibv_qp, ibv_srq, ibv_mr, ibv_ah and
 *    ibv_comp_channel with their public fields filled, each embedded in a
 *    struct of this file with the provider's handle.  The inline data-path
 *    calls (ibv_post_send, ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq,
 *    ibv_req_notify_cq) reach the fabric through context->ops; the inline
 *    _ex calls through verbs_get_ctx_op find query_port and query_device_ex
 *    and NULL for the rest, so they fail with EOPNOTSUPP as on a provider
 *    that lacks them.
 *  - Completion channels and the async event queue have real file
 *    descriptors: an epoll fd watching the fabric's eventfd, so poll()
 *    works on it and its O_NONBLOCK flag is the program's own (a blocking
 *    ibv_get_cq_event waits in poll()).
 *  - The work request and completion structs of the fabric have the ABI
 *    layout of ibv_send_wr, ibv_recv_wr and ibv_wc: they go through as they
 *    are, except UD sends, whose ibv_ah is swapped for the fabric's handle.
 */

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
#include <unistd.h>

#include <infiniband/verbs.h>

#include "fabric_lib.h"

/* verbs.h wraps these in macros; here they are the functions themselves */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

#define EXPORT __attribute__((visibility("default")))
#define container_of(p, type, member) \
    ((type *)((char *)(p) - offsetof(type, member)))

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
/* objects                                                             */

/* A ucx0 context. */
struct fctx {
    struct verbs_context vctx; /* what the program sees: vctx.context */
    void *h;                   /* fabric context handle */
    int users;                 /* PDs, CQs and channels not yet destroyed
                                  (while any is, close leaves it open) */
};

/* A protection domain. */
struct fpd {
    struct ibv_pd pd;          /* what the program sees */
    void *h;                   /* fabric PD handle */
    int users;                 /* MRs, QPs, SRQs and AHs in it */
};

/* A memory region. */
struct fmr {
    struct ibv_mr mr;          /* what the program sees */
    void *h;                   /* fabric MR handle */
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
};

/* An address handle. */
struct fah {
    struct ibv_ah ah;          /* what the program sees */
    void *h;                   /* fabric AH handle */
};

/* A device list handed out by ibv_get_device_list. */
struct flist {
    struct flist *next;        /* registry of lists handed out */
    struct ibv_device **real;  /* the real list inside it (or NULL) */
    struct ibv_device *devs[]; /* NULL-terminated: real devices, then ucx0 */
};

/* ------------------------------------------------------------------ */
/* state                                                               */

static const struct pyrdma_provider *P;   /* the fabric, once loaded */
static int p_state;                        /* 0 unknown, 1 loaded, -1 failed */
/* guards lists; never held while the fabric or UCX runs (UCX calls
   ibv_get_device_list and ibv_free_device_list while the node starts) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* serializes loading the fabric (fabric()) */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device fab_dev;          /* the ucx0 device */
static uint64_t fab_guid;                  /* its node GUID (host order) */
static struct flist *lists;                /* lists handed out */
static uint32_t next_handle = 1;           /* for the handle fields */
/* >0 while this thread runs the fabric (UCX may call libibverbs then) */
static __thread int in_fabric;

/* Log a failure when RDMA_FABRIC_VERBS_DEBUG is set. */
static void
debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
debug(const char *fmt, ...)
{
    static int on = -1;
    va_list ap;
    if (on < 0) {
        const char *e = getenv("RDMA_FABRIC_VERBS_DEBUG");
        on = e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
    }
    if (!on)
        return;
    va_start(ap, fmt);
    fputs("rdma-fabric-verbs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Set errno from a failed fabric call; return its errno value. */
static int
failed(const struct pyrdma_status *st)
{
    debug("%s failed: %s (%s)", st->func ? st->func : "?", strerror(st->err),
          st->msg);
    errno = st->err ? st->err : EIO;
    return errno;
}

/* Load the fabric once; return 1 if it is usable. */
static int
fabric(void)
{
    struct pyrdma_status st;
    struct pyrdma_devinfo *d = NULL;
    int n = 0, ok;

    pthread_mutex_lock(&init_lock);
    if (p_state == 0) {
        const struct pyrdma_provider *p = pyrdma_fabric_provider();
        in_fabric++;
        memset(&st, 0, sizeof(st));
        if (p->load(&st) == 0 && p->get_devices(&d, &n, &st) == 0 && n > 0) {
            fab_dev.node_type = d[0].node_type;
            fab_dev.transport_type = d[0].transport_type;
            snprintf(fab_dev.name, sizeof(fab_dev.name), "%s", d[0].name);
            snprintf(fab_dev.dev_name, sizeof(fab_dev.dev_name), "uverbs-%.32s",
                     d[0].name);
            /* no sysfs entry: reading its files fails cleanly */
            snprintf(fab_dev.dev_path, sizeof(fab_dev.dev_path),
                     "/nonexistent/rdma-fabric/%.32s", d[0].name);
            snprintf(fab_dev.ibdev_path, sizeof(fab_dev.ibdev_path),
                     "/nonexistent/rdma-fabric/%.32s", d[0].name);
            fab_guid = d[0].node_guid;
            P = p;
            p_state = 1;
        }
        else {
            failed(&st);
            p_state = -1;
        }
        free(d);
        in_fabric--;
    }
    ok = p_state == 1;
    pthread_mutex_unlock(&init_lock);
    return ok;
}

/* Return 1 if the caller at ret is part of UCX (libucp, libuct*, libucs,
   libucm): it must see the real devices only. */
static int
from_ucx(const void *ret)
{
    Dl_info info;
    const char *base;
    if (in_fabric)
        return 1;
    if (ret == NULL || dladdr(ret, &info) == 0 || info.dli_fname == NULL)
        return 0;
    base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libuc", 5) == 0;
}

/* The real libibverbs function name@version (NULL if not loaded). */
static void *
real_sym(const char *name, const char *version)
{
    void *f = dlvsym(RTLD_NEXT, name, version);
    if (f == NULL)
        f = dlsym(RTLD_NEXT, name);
    return f;
}

#define REAL(ret, name, ver, params) \
    static ret (*real_fn) params; \
    if (real_fn == NULL) \
        *(void **)&real_fn = real_sym(#name, ver)

static int
ours_ctx(const struct ibv_context *c)
{
    return c != NULL && c->device == &fab_dev;
}

static struct fctx *
fctx_of(struct ibv_context *c)
{
    return container_of(c, struct fctx, vctx.context);
}

/* Use counts: a NIC refuses to destroy an object that others still use
   (EBUSY); the fabric itself leaves that to its caller. */
static void
use(int *users, int d)
{
    __atomic_add_fetch(users, d, __ATOMIC_ACQ_REL);
}

static int
in_use(int *users)
{
    return __atomic_load_n(users, __ATOMIC_ACQUIRE) != 0;
}

static struct fpd *
pd_of(struct ibv_pd *p)
{
    return container_of(p, struct fpd, pd);
}

static struct fcq *
cq_of(struct ibv_cq *c)
{
    return container_of(c, struct fcq, cq);
}

static struct fsrq *
srq_of(struct ibv_srq *s)
{
    return container_of(s, struct fsrq, srq);
}

static uint32_t
new_handle(void)
{
    return __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
}

/* An epoll fd watching fd (for the fds the program polls); -1 on error. */
static int
watch_fd(int fd)
{
    struct epoll_event ev;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return -1;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        close(ep);
        errno = e;
        return -1;
    }
    return ep;
}

/* Wait until fd is readable, unless the program made it non-blocking;
   return 0, or -1 with errno (EAGAIN when non-blocking). */
static int
wait_fd(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
        errno = EAGAIN;
        return -1;
    }
    for (;;) {
        int r = poll(&p, 1, -1);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* ------------------------------------------------------------------ */
/* conversions                                                         */

static void
ah_in(struct pyrdma_ah_attr *o, const struct ibv_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid, a->grh.dgid.raw, 16);
    o->grh.flow_label = a->grh.flow_label;
    o->grh.sgid_index = a->grh.sgid_index;
    o->grh.hop_limit = a->grh.hop_limit;
    o->grh.traffic_class = a->grh.traffic_class;
    o->dlid = a->dlid;
    o->sl = a->sl;
    o->src_path_bits = a->src_path_bits;
    o->static_rate = a->static_rate;
    o->is_global = a->is_global;
    o->port_num = a->port_num;
}

static void
ah_out(struct ibv_ah_attr *o, const struct pyrdma_ah_attr *a)
{
    memset(o, 0, sizeof(*o));
    memcpy(o->grh.dgid.raw, a->grh.dgid, 16);
    o->grh.flow_label = a->grh.flow_label;
    o->grh.sgid_index = a->grh.sgid_index;
    o->grh.hop_limit = a->grh.hop_limit;
    o->grh.traffic_class = a->grh.traffic_class;
    o->dlid = a->dlid;
    o->sl = a->sl;
    o->src_path_bits = a->src_path_bits;
    o->static_rate = a->static_rate;
    o->is_global = a->is_global;
    o->port_num = a->port_num;
}

static void
cap_in(struct pyrdma_qp_cap *o, const struct ibv_qp_cap *c)
{
    o->max_send_wr = c->max_send_wr;
    o->max_recv_wr = c->max_recv_wr;
    o->max_send_sge = c->max_send_sge;
    o->max_recv_sge = c->max_recv_sge;
    o->max_inline_data = c->max_inline_data;
}

static void
cap_out(struct ibv_qp_cap *o, const struct pyrdma_qp_cap *c)
{
    o->max_send_wr = c->max_send_wr;
    o->max_recv_wr = c->max_recv_wr;
    o->max_send_sge = c->max_send_sge;
    o->max_recv_sge = c->max_recv_sge;
    o->max_inline_data = c->max_inline_data;
}

static void
qp_attr_in(struct pyrdma_qp_attr *o, const struct ibv_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->qp_state = a->qp_state;
    o->cur_qp_state = a->cur_qp_state;
    o->path_mtu = a->path_mtu;
    o->path_mig_state = a->path_mig_state;
    o->qkey = a->qkey;
    o->rq_psn = a->rq_psn;
    o->sq_psn = a->sq_psn;
    o->dest_qp_num = a->dest_qp_num;
    o->qp_access_flags = (uint32_t)a->qp_access_flags;
    cap_in(&o->cap, &a->cap);
    ah_in(&o->ah_attr, &a->ah_attr);
    ah_in(&o->alt_ah_attr, &a->alt_ah_attr);
    o->pkey_index = a->pkey_index;
    o->alt_pkey_index = a->alt_pkey_index;
    o->en_sqd_async_notify = a->en_sqd_async_notify;
    o->sq_draining = a->sq_draining;
    o->max_rd_atomic = a->max_rd_atomic;
    o->max_dest_rd_atomic = a->max_dest_rd_atomic;
    o->min_rnr_timer = a->min_rnr_timer;
    o->port_num = a->port_num;
    o->timeout = a->timeout;
    o->retry_cnt = a->retry_cnt;
    o->rnr_retry = a->rnr_retry;
    o->alt_port_num = a->alt_port_num;
    o->alt_timeout = a->alt_timeout;
    o->rate_limit = a->rate_limit;
}

static void
qp_attr_out(struct ibv_qp_attr *o, const struct pyrdma_qp_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->qp_state = a->qp_state;
    o->cur_qp_state = a->cur_qp_state;
    o->path_mtu = a->path_mtu;
    o->path_mig_state = a->path_mig_state;
    o->qkey = a->qkey;
    o->rq_psn = a->rq_psn;
    o->sq_psn = a->sq_psn;
    o->dest_qp_num = a->dest_qp_num;
    o->qp_access_flags = (int)a->qp_access_flags;
    cap_out(&o->cap, &a->cap);
    ah_out(&o->ah_attr, &a->ah_attr);
    ah_out(&o->alt_ah_attr, &a->alt_ah_attr);
    o->pkey_index = a->pkey_index;
    o->alt_pkey_index = a->alt_pkey_index;
    o->en_sqd_async_notify = a->en_sqd_async_notify;
    o->sq_draining = a->sq_draining;
    o->max_rd_atomic = a->max_rd_atomic;
    o->max_dest_rd_atomic = a->max_dest_rd_atomic;
    o->min_rnr_timer = a->min_rnr_timer;
    o->port_num = a->port_num;
    o->timeout = a->timeout;
    o->retry_cnt = a->retry_cnt;
    o->rnr_retry = a->rnr_retry;
    o->alt_port_num = a->alt_port_num;
    o->alt_timeout = a->alt_timeout;
    o->rate_limit = a->rate_limit;
}

static void
port_out(struct ibv_port_attr *o, const struct pyrdma_port_attr *a)
{
    memset(o, 0, sizeof(*o));
    o->state = a->state;
    o->max_mtu = a->max_mtu;
    o->active_mtu = a->active_mtu;
    o->gid_tbl_len = a->gid_tbl_len;
    o->port_cap_flags = a->port_cap_flags;
    o->max_msg_sz = a->max_msg_sz;
    o->bad_pkey_cntr = a->bad_pkey_cntr;
    o->qkey_viol_cntr = a->qkey_viol_cntr;
    o->pkey_tbl_len = a->pkey_tbl_len;
    o->lid = a->lid;
    o->sm_lid = a->sm_lid;
    o->lmc = a->lmc;
    o->max_vl_num = a->max_vl_num;
    o->sm_sl = a->sm_sl;
    o->subnet_timeout = a->subnet_timeout;
    o->init_type_reply = a->init_type_reply;
    o->active_width = a->active_width;
    o->active_speed = a->active_speed;
    o->phys_state = a->phys_state;
    o->link_layer = a->link_layer;
    o->flags = a->flags;
    o->port_cap_flags2 = a->port_cap_flags2;
}

static void
device_out(struct ibv_device_attr *o, const struct pyrdma_device_attr *a)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->fw_ver, sizeof(o->fw_ver), "%s", a->fw_ver);
    o->node_guid = htobe64(a->node_guid);
    o->sys_image_guid = htobe64(a->sys_image_guid);
    o->max_mr_size = a->max_mr_size;
    o->page_size_cap = a->page_size_cap;
    o->vendor_id = a->vendor_id;
    o->vendor_part_id = a->vendor_part_id;
    o->hw_ver = a->hw_ver;
    o->max_qp = a->max_qp;
    o->max_qp_wr = a->max_qp_wr;
    o->device_cap_flags = a->device_cap_flags;
    o->max_sge = a->max_sge;
    o->max_sge_rd = a->max_sge_rd;
    o->max_cq = a->max_cq;
    o->max_cqe = a->max_cqe;
    o->max_mr = a->max_mr;
    o->max_pd = a->max_pd;
    o->max_qp_rd_atom = a->max_qp_rd_atom;
    o->max_ee_rd_atom = a->max_ee_rd_atom;
    o->max_res_rd_atom = a->max_res_rd_atom;
    o->max_qp_init_rd_atom = a->max_qp_init_rd_atom;
    o->max_ee_init_rd_atom = a->max_ee_init_rd_atom;
    o->atomic_cap = a->atomic_cap;
    o->max_ee = a->max_ee;
    o->max_rdd = a->max_rdd;
    o->max_mw = a->max_mw;
    o->max_raw_ipv6_qp = a->max_raw_ipv6_qp;
    o->max_raw_ethy_qp = a->max_raw_ethy_qp;
    o->max_mcast_grp = a->max_mcast_grp;
    o->max_mcast_qp_attach = a->max_mcast_qp_attach;
    o->max_total_mcast_qp_attach = a->max_total_mcast_qp_attach;
    o->max_ah = a->max_ah;
    o->max_fmr = a->max_fmr;
    o->max_map_per_fmr = a->max_map_per_fmr;
    o->max_srq = a->max_srq;
    o->max_srq_wr = a->max_srq_wr;
    o->max_srq_sge = a->max_srq_sge;
    o->max_pkeys = a->max_pkeys;
    o->local_ca_ack_delay = a->local_ca_ack_delay;
    o->phys_port_cnt = a->phys_port_cnt;
}

/* ------------------------------------------------------------------ */
/* the data path: context->ops                                         */

static int
op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct fcq *c = container_of(cq, struct fcq, cq);
    return P->poll_cq(c->h, n, (struct pyrdma_wc *)wc);
}

static int
op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    struct fcq *c = container_of(cq, struct fcq, cq);
    return P->req_notify_cq(c->h, solicited_only);
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
        if (wr->wr.ud.ah == NULL || !ours_ctx(wr->wr.ud.ah->context)) {
            *bad = wr;
            return EINVAL;
        }
        w.wr.ud.ah = container_of(wr->wr.ud.ah, struct fah, ah)->h;
        rc = P->post_send(q->h, &w, &b);
        if (rc != 0) {
            *bad = wr;
            return rc;
        }
    }
    return 0;
}

static int
op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
             struct ibv_send_wr **bad)
{
    struct fqp *q = container_of(qp, struct fqp, qp);
    struct ibv_send_wr *w;
    int rc;

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
    rc = P->post_send(q->h, (struct pyrdma_send_wr *)wr,
                      (struct pyrdma_send_wr **)bad);
    return rc;
}

static int
op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
             struct ibv_recv_wr **bad)
{
    struct fqp *q = container_of(qp, struct fqp, qp);
    return P->post_recv(q->h, (struct pyrdma_recv_wr *)wr,
                        (struct pyrdma_recv_wr **)bad);
}

static int
op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                 struct ibv_recv_wr **bad)
{
    struct fsrq *s = container_of(srq, struct fsrq, srq);
    return P->post_srq_recv(s->h, (struct pyrdma_recv_wr *)wr,
                            (struct pyrdma_recv_wr **)bad);
}

static struct ibv_mw *
op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
    (void)pd;
    (void)type;
    errno = EOPNOTSUPP;
    return NULL;
}

static int
op_dealloc_mw(struct ibv_mw *mw)
{
    (void)mw;
    return EOPNOTSUPP;
}

static int
op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
    (void)qp;
    (void)mw;
    (void)b;
    return EOPNOTSUPP;
}

static int
vop_query_port(struct ibv_context *ctx, uint8_t port,
               struct ibv_port_attr *attr, size_t len)
{
    struct pyrdma_status st;
    struct pyrdma_port_attr a;
    struct ibv_port_attr full;
    if (P->query_port(fctx_of(ctx)->h, port, &a, &st) < 0)
        return failed(&st);
    port_out(&full, &a);
    memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
    return 0;
}

static int
vop_query_device_ex(struct ibv_context *ctx,
                    const struct ibv_query_device_ex_input *input,
                    struct ibv_device_attr_ex *attr, size_t len)
{
    struct pyrdma_status st;
    struct pyrdma_device_attr a;
    struct ibv_device_attr_ex full;
    (void)input;
    if (len < sizeof(attr->orig_attr))
        return EINVAL;
    if (P->query_device(fctx_of(ctx)->h, &a, &st) < 0)
        return failed(&st);
    memset(&full, 0, sizeof(full));
    device_out(&full.orig_attr, &a);
    /* the fabric has none of the extended capabilities (ODP, TSO, RSS,
       timestamps...): they stay 0 */
    memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
    return 0;
}

/* the _ex verbs of the verbs_context (with the CQs and QPs below) */
static struct ibv_cq_ex *vop_create_cq_ex(struct ibv_context *ctx,
                                          struct ibv_cq_init_attr_ex *a);
static struct ibv_qp *vop_create_qp_ex(struct ibv_context *ctx,
                                       struct ibv_qp_init_attr_ex *a);

/* ------------------------------------------------------------------ */
/* devices                                                             */

EXPORT struct ibv_device **
ibv_get_device_list(int *num)
{
    REAL(struct ibv_device **, ibv_get_device_list, "IBVERBS_1.1", (int *));
    struct ibv_device **real = NULL;
    struct flist *l;
    int n = 0, i, add;

    if (from_ucx(__builtin_return_address(0))) {
        debug("ibv_get_device_list from UCX: the real devices only");
        return real_fn ? real_fn(num) : (errno = ENOSYS, NULL);
    }
    if (real_fn != NULL) {
        in_fabric++;
        real = real_fn(&n);
        in_fabric--;
        if (real == NULL)
            n = 0;
    }
    add = fabric();
    l = calloc(1, sizeof(*l) + sizeof(l->devs[0]) * (size_t)(n + 2));
    if (l == NULL) {
        if (real != NULL) {
            REAL(void, ibv_free_device_list, "IBVERBS_1.1",
                 (struct ibv_device **));
            if (real_fn != NULL)
                real_fn(real);
        }
        errno = ENOMEM;
        return NULL;
    }
    l->real = real;
    for (i = 0; i < n; i++)
        l->devs[i] = real[i];
    if (add)
        l->devs[n++] = &fab_dev;
    l->devs[n] = NULL;
    pthread_mutex_lock(&lock);
    l->next = lists;
    lists = l;
    pthread_mutex_unlock(&lock);
    if (num != NULL)
        *num = n;
    return l->devs;
}

EXPORT void
ibv_free_device_list(struct ibv_device **list)
{
    REAL(void, ibv_free_device_list, "IBVERBS_1.1", (struct ibv_device **));
    struct flist **pp, *l = NULL;

    pthread_mutex_lock(&lock);
    for (pp = &lists; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->devs == list) {
            l = *pp;
            *pp = l->next;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (l == NULL) {
        if (real_fn != NULL && list != NULL)
            real_fn(list);
        return;
    }
    if (l->real != NULL && real_fn != NULL)
        real_fn(l->real);
    free(l);
}

EXPORT const char *
ibv_get_device_name(struct ibv_device *dev)
{
    REAL(const char *, ibv_get_device_name, "IBVERBS_1.1",
         (struct ibv_device *));
    if (dev == &fab_dev)
        return fab_dev.name;
    return real_fn ? real_fn(dev) : NULL;
}

EXPORT __be64
ibv_get_device_guid(struct ibv_device *dev)
{
    REAL(__be64, ibv_get_device_guid, "IBVERBS_1.1", (struct ibv_device *));
    if (dev == &fab_dev)
        return htobe64(fab_guid);
    return real_fn ? real_fn(dev) : 0;
}

EXPORT int
ibv_get_device_index(struct ibv_device *dev)
{
    REAL(int, ibv_get_device_index, "IBVERBS_1.9", (struct ibv_device *));
    if (dev == &fab_dev)
        return -1;      /* no kernel device index */
    return real_fn ? real_fn(dev) : -1;
}

EXPORT struct ibv_context *
ibv_open_device(struct ibv_device *dev)
{
    REAL(struct ibv_context *, ibv_open_device, "IBVERBS_1.1",
         (struct ibv_device *));
    struct pyrdma_status st;
    struct fctx *c;
    struct ibv_context *ctx;

    if (dev != &fab_dev) {
        if (real_fn == NULL) {
            errno = ENOSYS;
            return NULL;
        }
        return real_fn(dev);
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    in_fabric++;
    if (P->open_device(fab_dev.name, &c->h, &st) < 0) {
        in_fabric--;
        failed(&st);
        free(c);
        return NULL;
    }
    in_fabric--;
    ctx = &c->vctx.context;
    ctx->async_fd = watch_fd(P->async_fd(c->h));
    if (ctx->async_fd < 0) {
        int e = errno;
        P->close_device(c->h, &st);
        free(c);
        errno = e;
        return NULL;
    }
    c->vctx.sz = sizeof(c->vctx);
    c->vctx.query_port = vop_query_port;
    c->vctx.query_device_ex = vop_query_device_ex;
    c->vctx.create_cq_ex = vop_create_cq_ex;
    c->vctx.create_qp_ex = vop_create_qp_ex;
    ctx->device = dev;
    ctx->cmd_fd = -1;           /* no kernel command channel */
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->ops.poll_cq = op_poll_cq;
    ctx->ops.req_notify_cq = op_req_notify_cq;
    ctx->ops.post_send = op_post_send;
    ctx->ops.post_recv = op_post_recv;
    ctx->ops.post_srq_recv = op_post_srq_recv;
    ctx->ops.alloc_mw = op_alloc_mw;
    ctx->ops.dealloc_mw = op_dealloc_mw;
    ctx->ops.bind_mw = op_bind_mw;
    return ctx;
}

EXPORT int
ibv_close_device(struct ibv_context *ctx)
{
    REAL(int, ibv_close_device, "IBVERBS_1.1", (struct ibv_context *));
    struct pyrdma_status st;
    struct fctx *c;

    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx) : EINVAL;
    c = fctx_of(ctx);
    if (in_use(&c->users)) {
        /* the kernel destroys what is left of a closed context; the
           objects left here still use it: they and it stay allocated (and
           work) until the process ends, and the call succeeds as on a NIC
           (perftest closes its device with objects left) */
        debug("ibv_close_device: objects are left; the context stays");
        return 0;
    }
    close(ctx->async_fd);
    if (P->close_device(c->h, &st) < 0)
        return failed(&st);
    pthread_mutex_destroy(&ctx->mutex);
    free(c);
    return 0;
}

EXPORT int
ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
    REAL(int, ibv_get_async_event, "IBVERBS_1.1",
         (struct ibv_context *, struct ibv_async_event *));
    struct pyrdma_status st;
    struct pyrdma_async_event e;

    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, event) : (errno = EINVAL, -1);
    for (;;) {
        int r = P->get_async_event(fctx_of(ctx)->h, &e, &st);
        if (r < 0) {
            failed(&st);
            return -1;
        }
        if (r == 1)
            break;
        if (wait_fd(ctx->async_fd) < 0)
            return -1;
    }
    memset(event, 0, sizeof(*event));
    event->event_type = e.event_type;
    switch (e.element_kind) {
    case PYRDMA_EV_QP:
        event->element.qp = &((struct fqp *)e.element)->qp;
        break;
    case PYRDMA_EV_CQ:
        event->element.cq = &((struct fcq *)e.element)->cq;
        break;
    case PYRDMA_EV_SRQ:
        event->element.srq = &((struct fsrq *)e.element)->srq;
        break;
    default:
        event->element.port_num = e.port_num;
        break;
    }
    return 0;
}

EXPORT void
ibv_ack_async_event(struct ibv_async_event *event)
{
    REAL(void, ibv_ack_async_event, "IBVERBS_1.1", (struct ibv_async_event *));
    struct ibv_context *ctx = NULL;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        ctx = event->element.cq->context;
        break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        ctx = event->element.srq->context;
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        ctx = event->element.qp->context;
        break;
    default:
        /* port and device events: nothing to count for ucx0 either */
        break;
    }
    if (ctx != NULL && ours_ctx(ctx))
        return;     /* the fabric acknowledged it when it was read */
    if (ctx == NULL && !real_fn)
        return;
    if (real_fn != NULL)
        real_fn(event);
}

EXPORT int
ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    REAL(int, ibv_query_device, "IBVERBS_1.1",
         (struct ibv_context *, struct ibv_device_attr *));
    struct pyrdma_status st;
    struct pyrdma_device_attr a;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, attr) : EINVAL;
    if (P->query_device(fctx_of(ctx)->h, &a, &st) < 0)
        return failed(&st);
    device_out(attr, &a);
    return 0;
}

/* The exported ibv_query_port takes the old, shorter struct: fill what it
   has (everything before flags). */
EXPORT int
ibv_query_port(struct ibv_context *ctx, uint8_t port,
               struct _compat_ibv_port_attr *attr)
{
    REAL(int, ibv_query_port, "IBVERBS_1.1",
         (struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *));
    struct ibv_port_attr full;
    int rc;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, attr) : EINVAL;
    rc = vop_query_port(ctx, port, &full, sizeof(full));
    if (rc == 0)
        memcpy(attr, &full, offsetof(struct ibv_port_attr, flags));
    return rc;
}

EXPORT int
ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
              union ibv_gid *gid)
{
    REAL(int, ibv_query_gid, "IBVERBS_1.1",
         (struct ibv_context *, uint8_t, int, union ibv_gid *));
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, index, gid) : -1;
    if (P->query_gid(fctx_of(ctx)->h, port, index, &e, &st) < 0) {
        failed(&st);
        return -1;
    }
    memcpy(gid->raw, e.gid, 16);
    return 0;
}

EXPORT int
_ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                  struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
    REAL(int, _ibv_query_gid_ex, "IBVERBS_1.11",
         (struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *,
          uint32_t, size_t));
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    struct ibv_gid_entry out;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, index, entry, flags, size)
                       : EINVAL;
    if (flags != 0)
        return EINVAL;
    if (port > 255 || index > INT32_MAX)
        return EINVAL;
    if (P->query_gid(fctx_of(ctx)->h, (uint8_t)port, (int)index, &e,
                     &st) < 0)
        return failed(&st) == EINVAL ? ENODATA : errno;
    memset(&out, 0, sizeof(out));
    memcpy(out.gid.raw, e.gid, 16);
    out.gid_index = e.gid_index;
    out.port_num = port;
    out.gid_type = e.gid_type;
    out.ndev_ifindex = e.ndev_ifindex;
    memcpy(entry, &out, size < sizeof(out) ? size : sizeof(out));
    return 0;
}

EXPORT ssize_t
_ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
                     size_t max, uint32_t flags, size_t size)
{
    REAL(ssize_t, _ibv_query_gid_table, "IBVERBS_1.11",
         (struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t,
          size_t));
    struct pyrdma_status st;
    struct pyrdma_device_attr da;
    ssize_t n = 0;
    uint32_t port;

    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, entries, max, flags, size) : -EINVAL;
    if (flags != 0 || size < sizeof(struct ibv_gid_entry))
        return -EINVAL;
    if (P->query_device(fctx_of(ctx)->h, &da, &st) < 0)
        return -failed(&st);
    for (port = 1; port <= da.phys_port_cnt; port++) {
        struct pyrdma_port_attr pa;
        int i;
        if (P->query_port(fctx_of(ctx)->h, (uint8_t)port, &pa, &st) < 0)
            return -failed(&st);
        for (i = 0; i < pa.gid_tbl_len; i++) {
            struct ibv_gid_entry *o;
            if ((size_t)n >= max)
                return -EINVAL;
            o = (struct ibv_gid_entry *)((char *)entries + (size_t)n * size);
            if (_ibv_query_gid_ex(ctx, port, (uint32_t)i, o, 0, size) != 0)
                continue;
            n++;
        }
    }
    return n;
}

/* A private libibverbs call (driver.h) that ibv_devinfo uses: the GID's
   type as sysfs names it (0: IB or RoCE v1, 1: RoCE v2).  Declared here
   since no installed header has it. */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port,
                       unsigned int index, int *type);

EXPORT int
ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
                   int *type)
{
    REAL(int, ibv_query_gid_type, "IBVERBS_PRIVATE_34",
         (struct ibv_context *, uint8_t, unsigned int, int *));
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, index, type) : -1;
    if (index > INT32_MAX ||
        P->query_gid(fctx_of(ctx)->h, port, (int)index, &e, &st) < 0) {
        errno = EINVAL;
        return -1;
    }
    *type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
    return 0;
}

EXPORT int
ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index,
               __be16 *pkey)
{
    REAL(int, ibv_query_pkey, "IBVERBS_1.1",
         (struct ibv_context *, uint8_t, int, __be16 *));
    struct pyrdma_status st;
    uint16_t p;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, index, pkey) : -1;
    if (P->query_pkey(fctx_of(ctx)->h, port, index, &p, &st) < 0) {
        failed(&st);
        return -1;
    }
    *pkey = htobe16(p);
    return 0;
}

EXPORT int
ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
    REAL(int, ibv_get_pkey_index, "IBVERBS_1.5",
         (struct ibv_context *, uint8_t, __be16));
    int i;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, pkey) : -1;
    for (i = 0; i < 128; i++) {
        __be16 p;
        if (ibv_query_pkey(ctx, port, i, &p) != 0)
            break;
        if (p == pkey)
            return i;
    }
    errno = ENOENT;
    return -1;
}

/* ------------------------------------------------------------------ */
/* PD, MR                                                              */

EXPORT struct ibv_pd *
ibv_alloc_pd(struct ibv_context *ctx)
{
    REAL(struct ibv_pd *, ibv_alloc_pd, "IBVERBS_1.1", (struct ibv_context *));
    struct pyrdma_status st;
    struct fpd *p;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx) : (errno = EINVAL, NULL);
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (P->alloc_pd(fctx_of(ctx)->h, &p->h, &st) < 0) {
        failed(&st);
        free(p);
        return NULL;
    }
    p->pd.context = ctx;
    p->pd.handle = new_handle();
    use(&fctx_of(ctx)->users, 1);
    return &p->pd;
}

EXPORT int
ibv_dealloc_pd(struct ibv_pd *pd)
{
    REAL(int, ibv_dealloc_pd, "IBVERBS_1.1", (struct ibv_pd *));
    struct pyrdma_status st;
    struct fpd *p;
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd) : EINVAL;
    p = container_of(pd, struct fpd, pd);
    if (in_use(&p->users))
        return EBUSY;
    if (P->dealloc_pd(p->h, &st) < 0)
        return failed(&st);
    use(&fctx_of(pd->context)->users, -1);
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
    if (P->reg_mr(container_of(pd, struct fpd, pd)->h, addr, length, access,
                  &m->h, &info, &st) < 0) {
        failed(&st);
        free(m);
        return NULL;
    }
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = new_handle();
    m->mr.lkey = info.lkey;
    m->mr.rkey = info.rkey;
    use(&pd_of(pd)->users, 1);
    return &m->mr;
}

EXPORT struct ibv_mr *
ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    REAL(struct ibv_mr *, ibv_reg_mr, "IBVERBS_1.1",
         (struct ibv_pd *, void *, size_t, int));
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, addr, length, access)
                       : (errno = EINVAL, NULL);
    return reg_mr(pd, addr, length, (unsigned int)access);
}

EXPORT struct ibv_mr *
ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                int access)
{
    REAL(struct ibv_mr *, ibv_reg_mr_iova, "IBVERBS_1.7",
         (struct ibv_pd *, void *, size_t, uint64_t, int));
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, addr, length, iova, access)
                       : (errno = EINVAL, NULL);
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
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, addr, length, iova, access)
                       : (errno = EINVAL, NULL);
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
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, offset, length, iova, fd, access)
                       : (errno = EINVAL, NULL);
    errno = EOPNOTSUPP;
    return NULL;
}

EXPORT int
ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
             size_t length, int access)
{
    REAL(int, ibv_rereg_mr, "IBVERBS_1.1",
         (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int));
    if (!ours_ctx(mr->context))
        return real_fn ? real_fn(mr, flags, pd, addr, length, access)
                       : IBV_REREG_MR_ERR_INPUT;
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;     /* the old MR stays valid */
}

EXPORT int
ibv_dereg_mr(struct ibv_mr *mr)
{
    REAL(int, ibv_dereg_mr, "IBVERBS_1.1", (struct ibv_mr *));
    struct pyrdma_status st;
    struct fmr *m;
    if (!ours_ctx(mr->context))
        return real_fn ? real_fn(mr) : EINVAL;
    m = container_of(mr, struct fmr, mr);
    if (P->dereg_mr(m->h, &st) < 0)
        return failed(&st);
    use(&pd_of(mr->pd)->users, -1);
    free(m);
    return 0;
}

EXPORT struct ibv_pd *
ibv_import_pd(struct ibv_context *ctx, uint32_t handle)
{
    REAL(struct ibv_pd *, ibv_import_pd, "IBVERBS_1.10",
         (struct ibv_context *, uint32_t));
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, handle) : (errno = EINVAL, NULL);
    errno = EOPNOTSUPP;
    return NULL;
}

EXPORT struct ibv_mr *
ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
    REAL(struct ibv_mr *, ibv_import_mr, "IBVERBS_1.10",
         (struct ibv_pd *, uint32_t));
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, handle) : (errno = EINVAL, NULL);
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
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx) : (errno = EINVAL, NULL);
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (P->create_comp_channel(fctx_of(ctx)->h, &c->h, &c->prov_fd,
                               &st) < 0) {
        failed(&st);
        free(c);
        return NULL;
    }
    c->cc.fd = watch_fd(c->prov_fd);
    if (c->cc.fd < 0) {
        int e = errno;
        P->destroy_comp_channel(c->h, &st);
        free(c);
        errno = e;
        return NULL;
    }
    c->cc.context = ctx;
    c->cc.refcnt = 0;
    use(&fctx_of(ctx)->users, 1);
    return &c->cc;
}

EXPORT int
ibv_destroy_comp_channel(struct ibv_comp_channel *cc)
{
    REAL(int, ibv_destroy_comp_channel, "IBVERBS_1.0",
         (struct ibv_comp_channel *));
    struct pyrdma_status st;
    struct fcc *c;
    if (!ours_ctx(cc->context))
        return real_fn ? real_fn(cc) : EINVAL;
    c = container_of(cc, struct fcc, cc);
    if (__atomic_load_n(&cc->refcnt, __ATOMIC_ACQUIRE) != 0)
        return EBUSY;
    if (P->destroy_comp_channel(c->h, &st) < 0)
        return failed(&st);
    use(&fctx_of(cc->context)->users, -1);
    close(cc->fd);
    free(c);
    return 0;
}

/* A new CQ of ucx0 (channel checked by the caller); NULL with errno. */
static struct fcq *
cq_new(struct ibv_context *ctx, int cqe, void *cq_context,
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
    if (P->create_cq(fctx_of(ctx)->h, cqe, &c->cq,
                     channel ? container_of(channel, struct fcc, cc)->h : NULL,
                     comp_vector, &c->h, &actual, &st) < 0) {
        failed(&st);
        free(c);
        return NULL;
    }
    c->cq.context = ctx;
    c->cq.channel = channel;
    c->cq.cq_context = cq_context;
    c->cq.handle = new_handle();
    c->cq.cqe = actual;
    pthread_mutex_init(&c->cq.mutex, NULL);
    pthread_cond_init(&c->cq.cond, NULL);
    if (channel != NULL)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
    use(&fctx_of(ctx)->users, 1);
    return c;
}

EXPORT struct ibv_cq *
ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
              struct ibv_comp_channel *channel, int comp_vector)
{
    REAL(struct ibv_cq *, ibv_create_cq, "IBVERBS_1.1",
         (struct ibv_context *, int, void *, struct ibv_comp_channel *, int));
    struct fcq *c;
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, cqe, cq_context, channel, comp_vector)
                       : (errno = EINVAL, NULL);
    c = cq_new(ctx, cqe, cq_context, channel, comp_vector);
    return c ? &c->cq : NULL;
}

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
    int n = P->poll_cq(c->h, 1, &c->cur);
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
static struct ibv_cq_ex *
vop_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
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
    c = cq_new(ctx, (int)a->cqe, a->cq_context, a->channel,
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
    (void)mw;
    (void)rkey;
    (void)bi;
    x_unsupported(qx);
}

static void
x_local_inv(struct ibv_qp_ex *qx, uint32_t rkey)
{
    (void)rkey;
    x_unsupported(qx);
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
    (void)rkey;
    x_unsupported(qx);
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
    if (ah == NULL || !ours_ctx(ah->context)) {
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
    rc = P->post_send(q->h, &q->x[0].wr, &bad);
    x_start(qx);
    return rc;
}

/* What the ibv_wr_* API can post on the fabric. */
#define X_SEND_OPS (IBV_QP_EX_WITH_RDMA_WRITE | \
                    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
                    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | \
                    IBV_QP_EX_WITH_RDMA_READ | \
                    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
                    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

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
   (XRC, RSS, TSO, memory windows...) is EOPNOTSUPP. */
static struct ibv_qp *
vop_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
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

EXPORT int
ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    REAL(int, ibv_resize_cq, "IBVERBS_1.1", (struct ibv_cq *, int));
    struct pyrdma_status st;
    int actual = 0;
    if (!ours_ctx(cq->context))
        return real_fn ? real_fn(cq, cqe) : EINVAL;
    if (P->resize_cq == NULL)
        return EOPNOTSUPP;
    if (P->resize_cq(container_of(cq, struct fcq, cq)->h, cqe, &actual,
                     &st) < 0)
        return failed(&st);
    cq->cqe = actual;
    return 0;
}

EXPORT int
ibv_destroy_cq(struct ibv_cq *cq)
{
    REAL(int, ibv_destroy_cq, "IBVERBS_1.1", (struct ibv_cq *));
    struct pyrdma_status st;
    struct fcq *c;
    if (!ours_ctx(cq->context))
        return real_fn ? real_fn(cq) : EINVAL;
    c = container_of(cq, struct fcq, cq);
    if (in_use(&c->users))
        return EBUSY;   /* a QP still uses it */
    if (P->destroy_cq(c->h, &st) < 0)
        return failed(&st);
    use(&fctx_of(cq->context)->users, -1);
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

    if (!ours_ctx(cc->context))
        return real_fn ? real_fn(cc, cq, cq_context) : (errno = EINVAL, -1);
    c = container_of(cc, struct fcc, cc);
    for (;;) {
        int r = P->get_cq_event(c->h, &got, &st);
        if (r < 0) {
            failed(&st);
            return -1;
        }
        if (r == 1)
            break;
        if (wait_fd(cc->fd) < 0)
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
    if (!ours_ctx(cq->context)) {
        if (real_fn != NULL)
            real_fn(cq, nevents);
        return;
    }
    P->ack_cq_events(container_of(cq, struct fcq, cq)->h, nevents);
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
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, init) : (errno = EINVAL, NULL);
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    a.max_wr = init->attr.max_wr;
    a.max_sge = init->attr.max_sge;
    a.srq_limit = init->attr.srq_limit;
    if (P->create_srq(container_of(pd, struct fpd, pd)->h, &a, s, &s->h,
                      &st) < 0) {
        failed(&st);
        free(s);
        return NULL;
    }
    init->attr.max_wr = a.max_wr;
    init->attr.max_sge = a.max_sge;
    s->srq.context = pd->context;
    s->srq.srq_context = init->srq_context;
    s->srq.pd = pd;
    s->srq.handle = new_handle();
    use(&pd_of(pd)->users, 1);
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
    if (!ours_ctx(srq->context))
        return real_fn ? real_fn(srq, attr, mask) : EINVAL;
    a.max_wr = attr->max_wr;
    a.max_sge = attr->max_sge;
    a.srq_limit = attr->srq_limit;
    if (P->modify_srq(container_of(srq, struct fsrq, srq)->h, &a, mask,
                      &st) < 0)
        return failed(&st);
    return 0;
}

EXPORT int
ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
    REAL(int, ibv_query_srq, "IBVERBS_1.1",
         (struct ibv_srq *, struct ibv_srq_attr *));
    struct pyrdma_status st;
    struct pyrdma_srq_attr a;
    if (!ours_ctx(srq->context))
        return real_fn ? real_fn(srq, attr) : EINVAL;
    if (P->query_srq(container_of(srq, struct fsrq, srq)->h, &a, &st) < 0)
        return failed(&st);
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
    if (!ours_ctx(srq->context))
        return real_fn ? real_fn(srq) : EINVAL;
    s = container_of(srq, struct fsrq, srq);
    if (in_use(&s->users))
        return EBUSY;   /* a QP still uses it */
    if (P->destroy_srq(s->h, &st) < 0)
        return failed(&st);
    use(&pd_of(srq->pd)->users, -1);
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

    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, init) : (errno = EINVAL, NULL);
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
    cap_in(&a.cap, &init->cap);
    a.qp_type = init->qp_type;
    a.sq_sig_all = init->sq_sig_all;
    if (P->create_qp(container_of(pd, struct fpd, pd)->h, &a, &q->h, &qpn,
                     &st) < 0) {
        failed(&st);
        free(q);
        return NULL;
    }
    cap_out(&init->cap, &a.cap);
    q->sq_sig_all = init->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = init->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.srq = init->srq;
    q->qp.handle = new_handle();
    q->qp.qp_num = qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = init->qp_type;
    use(&pd_of(pd)->users, 1);
    use(&cq_of(init->send_cq)->users, 1);
    use(&cq_of(init->recv_cq)->users, 1);
    if (init->srq != NULL)
        use(&srq_of(init->srq)->users, 1);
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
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, attr, mask) : EINVAL;
    qp_attr_in(&a, attr);
    if (P->modify_qp(container_of(qp, struct fqp, qp)->h, &a, mask,
                     &st) < 0)
        return failed(&st);
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
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, attr, mask, init) : EINVAL;
    memset(&a, 0, sizeof(a));
    if (P->query_qp(container_of(qp, struct fqp, qp)->h, &a, mask, &st) < 0)
        return failed(&st);
    qp_attr_out(attr, &a);
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
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp) : EINVAL;
    q = container_of(qp, struct fqp, qp);
    if (P->destroy_qp(q->h, &st) < 0)
        return failed(&st);
    use(&pd_of(qp->pd)->users, -1);
    use(&cq_of(qp->send_cq)->users, -1);
    use(&cq_of(qp->recv_cq)->users, -1);
    if (qp->srq != NULL)
        use(&srq_of(qp->srq)->users, -1);
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
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp) : NULL;
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
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, ece) : EINVAL;
    return EOPNOTSUPP;
}

EXPORT int
ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    REAL(int, ibv_set_ece, "IBVERBS_1.10", (struct ibv_qp *,
                                             struct ibv_ece *));
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, ece) : EINVAL;
    return EOPNOTSUPP;
}

EXPORT int
ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                           uint32_t flags)
{
    REAL(int, ibv_query_qp_data_in_order, "IBVERBS_1.14",
         (struct ibv_qp *, enum ibv_wr_opcode, uint32_t));
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, op, flags) : 0;
    return 0;   /* no guarantee is made about the order data lands in */
}

EXPORT int
ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    REAL(int, ibv_attach_mcast, "IBVERBS_1.1",
         (struct ibv_qp *, const union ibv_gid *, uint16_t));
    struct pyrdma_status st;
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, gid, lid) : EINVAL;
    if (P->attach_mcast == NULL)
        return EOPNOTSUPP;
    if (P->attach_mcast(container_of(qp, struct fqp, qp)->h, gid->raw, lid,
                        &st) < 0)
        return failed(&st);
    return 0;
}

EXPORT int
ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    REAL(int, ibv_detach_mcast, "IBVERBS_1.1",
         (struct ibv_qp *, const union ibv_gid *, uint16_t));
    struct pyrdma_status st;
    if (!ours_ctx(qp->context))
        return real_fn ? real_fn(qp, gid, lid) : EINVAL;
    if (P->detach_mcast == NULL)
        return EOPNOTSUPP;
    if (P->detach_mcast(container_of(qp, struct fqp, qp)->h, gid->raw, lid,
                        &st) < 0)
        return failed(&st);
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
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, attr) : (errno = EINVAL, NULL);
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    ah_in(&a, attr);
    in_fabric++;
    if (P->create_ah(container_of(pd, struct fpd, pd)->h, &a, &h->h,
                     &st) < 0) {
        in_fabric--;
        failed(&st);
        free(h);
        return NULL;
    }
    in_fabric--;
    h->ah.context = pd->context;
    h->ah.pd = pd;
    h->ah.handle = new_handle();
    use(&pd_of(pd)->users, 1);
    return &h->ah;
}

EXPORT int
ibv_destroy_ah(struct ibv_ah *ah)
{
    REAL(int, ibv_destroy_ah, "IBVERBS_1.1", (struct ibv_ah *));
    struct pyrdma_status st;
    struct fah *h;
    if (!ours_ctx(ah->context))
        return real_fn ? real_fn(ah) : EINVAL;
    h = container_of(ah, struct fah, ah);
    if (P->destroy_ah(h->h, &st) < 0)
        return failed(&st);
    use(&pd_of(ah->pd)->users, -1);
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
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, port, wc, grh, ah) : EINVAL;
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
    if (!ours_ctx(pd->context))
        return real_fn ? real_fn(pd, wc, grh, port) : (errno = EINVAL, NULL);
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
    if (!ours_ctx(ctx))
        return real_fn ? real_fn(ctx, attr, eth_mac, vid) : EINVAL;
    return EOPNOTSUPP;      /* the fabric is not Ethernet */
}
