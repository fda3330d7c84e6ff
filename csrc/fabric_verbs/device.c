/* device.c - the verbs front end's device: ucx0 in the device list, its
   context (verbs_context), async events and the queries; the front end's
   state and shared helpers.  The front end (csrc/fabric_verbs/) is the
   software fabric as a verbs device for unmodified C programs: an
   LD_PRELOAD library that interposes libibverbs. */

/*
 * How it coexists with the real libibverbs (which the program links, and
 * which UCX's own InfiniBand transport uses inside the fabric):
 *
 *  - This library is preloaded, so the program's references to the
 *    exported ibv_* functions bind here first (ibv_front.map gives each the
 *    version libibverbs gives it).  Each one looks at its object: an object
 *    of ucx0 (its context's device is fv_dev) is handled here through the
 *    fabric's ops table (struct pyrdma_provider, librdma_fabric.so); any
 *    other object goes to the real function, found with dlvsym(RTLD_NEXT).
 *  - UCX also calls ibv_get_device_list (its IB transport, while the fabric
 *    node starts): such calls, and every call made while the fabric runs
 *    on this thread, see the real devices only, so UCX never opens ucx0.
 *  - The objects are genuine: a struct verbs_context (abi_compat says
 *    "extended"), ibv_pd, ibv_cq, ibv_qp, ibv_srq, ibv_mr, ibv_ah and
 *    ibv_comp_channel with their public fields filled, each embedded in a
 *    struct of front.h with the fabric's handle (objects.c).  The inline
 *    data-path calls (ibv_post_send, ibv_post_recv, ibv_post_srq_recv,
 *    ibv_poll_cq, ibv_req_notify_cq) reach the fabric through context->ops
 *    (datapath.c); the inline
 *    _ex calls through verbs_get_ctx_op find query_port, query_device_ex,
 *    create_cq_ex and create_qp_ex (extended.c) and NULL for the rest, so
 *    they fail with EOPNOTSUPP as on a provider that lacks them.
 *  - Completion channels and the async event queue have real file
 *    descriptors: an epoll fd watching the fabric's eventfd, so poll()
 *    works on it and its O_NONBLOCK flag is the program's own (a blocking
 *    ibv_get_cq_event waits in poll()).
 *  - The work request and completion structs of the fabric have the ABI
 *    layout of ibv_send_wr, ibv_recv_wr and ibv_wc: they go through as they
 *    are, except UD sends, whose ibv_ah is swapped for the fabric's handle
 *    (datapath.c).
 */

#include "front.h"

/* ------------------------------------------------------------------ */
/* state                                                               */

const struct pyrdma_provider *fv_prov; /* the fabric, once loaded */
struct ibv_device fv_dev;              /* the ucx0 device */
__thread int fv_in_fabric;             /* >0: this thread runs the fabric */
unsigned fv_gen;                       /* fork() generation (see fv_stale) */
static int p_state;                    /* 0 unknown, 1 loaded, -1 failed */
/* guards lists; never held while the fabric or UCX runs (UCX calls
   ibv_get_device_list and ibv_free_device_list while the node starts) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* serializes loading the fabric (fabric()) */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t fv_guid;               /* ucx0's node GUID (host order) */
static struct flist *lists;            /* lists handed out */
static uint32_t next_handle = 1;       /* for the handle fields */

/* Log a failure when RDMA_FABRIC_VERBS_DEBUG is set. */
void
fv_debug(const char *fmt, ...)
{
    static int on = -1;
    va_list ap;
    if (on < 0) {
        const char *e = pyrdma_setting_env(PYRDMA_SET_FABRIC_VERBS_DEBUG);
        unsigned long long v = 1;
        char err[128];
        on = e != NULL &&       /* a value that is no flag is on, too */
             (pyrdma_setting_parse(PYRDMA_SET_FABRIC_VERBS_DEBUG, e, &v, err,
                                   sizeof(err)) < 0 || v != 0);
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
int
fv_failed(const struct pyrdma_status *st)
{
    fv_debug("%s failed: %s (%s)", st->func ? st->func : "?",
             strerror(st->err), st->msg);
    errno = st->err ? st->err : EIO;
    return errno;
}

/* In a child process after fork(): the contexts it inherited are stale. */
static void
forked_child(void)
{
    __atomic_add_fetch(&fv_gen, 1, __ATOMIC_RELAXED);
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
        pthread_atfork(NULL, NULL, forked_child);
        fv_in_fabric++;
        memset(&st, 0, sizeof(st));
        if (p->load(&st) == 0 && p->get_devices(&d, &n, &st) == 0 && n > 0) {
            fv_dev.node_type = d[0].node_type;
            fv_dev.transport_type = d[0].transport_type;
            snprintf(fv_dev.name, sizeof(fv_dev.name), "%s", d[0].name);
            snprintf(fv_dev.dev_name, sizeof(fv_dev.dev_name), "uverbs-%.32s",
                     d[0].name);
            /* no sysfs entry: reading its files fails cleanly */
            snprintf(fv_dev.dev_path, sizeof(fv_dev.dev_path),
                     "/nonexistent/rdma-fabric/%.32s", d[0].name);
            snprintf(fv_dev.ibdev_path, sizeof(fv_dev.ibdev_path),
                     "/nonexistent/rdma-fabric/%.32s", d[0].name);
            fv_guid = d[0].node_guid;
            fv_prov = p;
            p_state = 1;
        }
        else {
            /* said once, always (libibverbs warns about a driver it
               cannot load the same way): the program sees no ucx0 */
            fprintf(stderr, "rdma-fabric-verbs: no ucx0: %s failed: %s "
                    "(%s)\n", st.func ? st.func : "?", strerror(st.err),
                    st.msg);
            errno = st.err ? st.err : EIO;
            p_state = -1;
        }
        free(d);
        fv_in_fabric--;
    }
    ok = p_state == 1;
    pthread_mutex_unlock(&init_lock);
    return ok;
}

/* Return 1 if the caller at ret must see the real devices only: UCX
   (libucp, libuct*, libucs, libucm), and librdmacm, which lists the
   devices to match them with the kernel's rdma_cm (ucx0 has none) while
   holding its own lock: UCX's rdmacm transport, which the fabric's node
   starts, takes that lock again. */
static int
from_ucx(const void *ret)
{
    Dl_info info;
    const char *base;
    if (fv_in_fabric)
        return 1;
    if (ret == NULL || dladdr(ret, &info) == 0 || info.dli_fname == NULL)
        return 0;
    base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libuc", 5) == 0 ||
           strncmp(base, "librdmacm.", 10) == 0;
}

/* For the rdma_* front end (cm_front.c): must the caller at ret get the
   real librdmacm (UCX's own rdmacm transport, librdmacm calling itself,
   or the fabric running)? */
int
fv_real_caller(const void *ret)
{
    return from_ucx(ret);
}

/* The real libibverbs function name@version (NULL if there is none).
   RTLD_NEXT finds it when the program links libibverbs.  When libibverbs
   came with a library that was dlopen()ed (UCX's libuct_ib, pyverbs in a
   Python process), it is not in the global scope, yet the preloaded front
   end still comes first for that library's calls: look in libibverbs
   itself then. */
void *
fv_real_sym(const char *name, const char *version)
{
    static void *lib;   /* libibverbs.so.1, opened at the first need */
    void *h, *f = dlvsym(RTLD_NEXT, name, version);
    if (f == NULL)
        f = dlsym(RTLD_NEXT, name);
    if (f != NULL)
        return f;
    h = __atomic_load_n(&lib, __ATOMIC_ACQUIRE);
    if (h == NULL) {
        h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            fv_debug("no real %s: %s", name, dlerror());
            return NULL;
        }
        /* another thread may have opened it too: that only counts twice */
        __atomic_store_n(&lib, h, __ATOMIC_RELEASE);
    }
    f = dlvsym(h, name, version);
    if (f == NULL)
        f = dlsym(h, name);
    return f;
}

uint32_t
fv_new_handle(void)
{
    return __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
}

/* An epoll fd watching fd (for the fds the program polls); -1 on error. */
int
fv_watch_fd(int fd)
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
   return 0, or -1 with errno (EAGAIN when non-blocking, EINTR when a
   signal handler ran: libibverbs' read() of the kernel's event file
   returns then, and programs rely on it, e.g. qperf's SIGALRM ending a
   test blocked in ibv_get_cq_event). */
int
fv_wait_fd(int fd)
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
        if (r < 0)
            return -1;
    }
}

/* ------------------------------------------------------------------ */
/* verbs_context ops of the device                                     */

static int
vop_query_port(struct ibv_context *ctx, uint8_t port,
               struct ibv_port_attr *attr, size_t len)
{
    struct pyrdma_status st;
    struct pyrdma_port_attr a;
    struct ibv_port_attr full;
    if (fv_prov->query_port(fv_ctx_of(ctx)->h, port, &a, &st) < 0)
        return fv_failed(&st);
    fv_port_out(&full, &a);
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
    if (fv_prov->query_device(fv_ctx_of(ctx)->h, &a, &st) < 0)
        return fv_failed(&st);
    memset(&full, 0, sizeof(full));
    fv_device_out(&full.orig_attr, &a);
    full.phys_port_cnt_ex = a.phys_port_cnt;
    /* on-demand paging: the fabric never pins memory (a WR reads and
       writes it when it runs), so an IBV_ACCESS_ON_DEMAND MR is any MR;
       explicit ODP on every transport and operation it has.  No
       implicit ODP (an MR over the whole address space).  The other
       extended capabilities (TSO, RSS, timestamps...) stay 0. */
    full.odp_caps.general_caps = IBV_ODP_SUPPORT;
    full.odp_caps.per_transport_caps.rc_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
        IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
        IBV_ODP_SUPPORT_SRQ_RECV;
    full.odp_caps.per_transport_caps.uc_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
        IBV_ODP_SUPPORT_SRQ_RECV;
    full.odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
        IBV_ODP_SUPPORT_SRQ_RECV;
    memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
    return 0;
}

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
        fv_debug("ibv_get_device_list from UCX: the real devices only");
        return real_fn ? real_fn(num) : (errno = ENOSYS, NULL);
    }
    if (real_fn != NULL) {
        fv_in_fabric++;
        real = real_fn(&n);
        fv_in_fabric--;
        if (real == NULL)
            n = 0;
    }
    add = fabric();
    /* the array is an allocation of its own, as libibverbs' is: programs
       (qperf) release it with free() instead of ibv_free_device_list */
    l = calloc(1, sizeof(*l));
    if (l != NULL && (l->devs = calloc((size_t)n + 2, sizeof(*l->devs))) ==
        NULL) {
        free(l);
        l = NULL;
    }
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
        l->devs[n++] = &fv_dev;
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
    free(l->devs);
    free(l);
}

EXPORT const char *
ibv_get_device_name(struct ibv_device *dev)
{
    REAL(const char *, ibv_get_device_name, "IBVERBS_1.1",
         (struct ibv_device *));
    if (dev == &fv_dev)
        return fv_dev.name;
    return real_fn ? real_fn(dev) : NULL;
}

EXPORT __be64
ibv_get_device_guid(struct ibv_device *dev)
{
    REAL(__be64, ibv_get_device_guid, "IBVERBS_1.1", (struct ibv_device *));
    if (dev == &fv_dev)
        return htobe64(fv_guid);
    return real_fn ? real_fn(dev) : 0;
}

EXPORT int
ibv_get_device_index(struct ibv_device *dev)
{
    REAL(int, ibv_get_device_index, "IBVERBS_1.9", (struct ibv_device *));
    if (dev == &fv_dev)
        return -1;      /* no kernel device index */
    return real_fn ? real_fn(dev) : -1;
}

/* The name of a ucx0 context's cmd_fd (a memfd). */
#define CMD_FD_NAME "rdma-fabric-verbs-ucx0"

/* A context's cmd_fd: no kernel command channel, but a real descriptor
   of its own, as programs dup() it to share the context
   (ibv_import_device, which ucx0 refuses as rxe does); -1 with errno. */
static int
make_cmd_fd(void)
{
    return memfd_create(CMD_FD_NAME, MFD_CLOEXEC);
}

/* 1 if fd is (a dup of) a ucx0 context's cmd_fd. */
static int
is_cmd_fd(int fd)
{
    char path[64], target[128];
    ssize_t n;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return 0;
    target[n] = 0;
    return strncmp(target, "/memfd:" CMD_FD_NAME " ",
                   strlen("/memfd:" CMD_FD_NAME " ")) == 0;
}

EXPORT struct ibv_context *
ibv_import_device(int cmd_fd)
{
    REAL(struct ibv_context *, ibv_import_device, "IBVERBS_1.10", (int));
    if (is_cmd_fd(cmd_fd)) {
        /* a ucx0 context of this process: a new context on it; one of
           another process (its cmd_fd passed over a socket) cannot be
           shared (EOPNOTSUPP, as rxe gives) */
        struct ibv_context *c = fv_import_ctx(cmd_fd);
        if (c == NULL && errno == EOPNOTSUPP)
            fv_debug("ibv_import_device: a ucx0 context of another "
                     "process cannot be imported");
        return c;
    }
    if (real_fn == NULL) {
        errno = ENOSYS;
        return NULL;
    }
    return real_fn(cmd_fd);
}

EXPORT struct ibv_context *
ibv_open_device(struct ibv_device *dev)
{
    REAL(struct ibv_context *, ibv_open_device, "IBVERBS_1.1",
         (struct ibv_device *));
    struct pyrdma_status st;
    struct fctx *c;
    struct ibv_context *ctx;

    if (dev != &fv_dev) {
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
    fv_in_fabric++;
    if (fv_prov->open_device(fv_dev.name, &c->h, &st) < 0) {
        fv_in_fabric--;
        fv_failed(&st);
        free(c);
        return NULL;
    }
    fv_in_fabric--;
    ctx = &c->vctx.context;
    ctx->async_fd = fv_watch_fd(fv_prov->async_fd(c->h));
    ctx->cmd_fd = ctx->async_fd < 0 ? -1 : make_cmd_fd();
    if (ctx->cmd_fd < 0) {
        int e = errno;
        if (ctx->async_fd >= 0)
            close(ctx->async_fd);
        fv_prov->close_device(c->h, &st);
        free(c);
        errno = e;
        return NULL;
    }
    c->refs = malloc(sizeof(*c->refs));
    if (c->refs == NULL) {
        close(ctx->async_fd);
        close(ctx->cmd_fd);
        fv_prov->close_device(c->h, &st);
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    *c->refs = 1;
    fv_ctx_setup(c, dev);
    fv_reg_ctx(c, 1);
    return ctx;
}

/* The fields and ops of ucx0 context c (its fabric handle, async_fd and
   cmd_fd set) for device dev: ibv_open_device's, ibv_import_device's. */
void
fv_ctx_setup(struct fctx *c, struct ibv_device *dev)
{
    struct ibv_context *ctx = &c->vctx.context;
    c->gen = __atomic_load_n(&fv_gen, __ATOMIC_RELAXED);
    c->vctx.sz = sizeof(c->vctx);
    c->vctx.query_port = vop_query_port;
    c->vctx.query_device_ex = vop_query_device_ex;
    c->vctx.create_cq_ex = fv_create_cq_ex;
    c->vctx.create_qp_ex = fv_create_qp_ex;
    c->vctx.advise_mr = fv_advise_mr;
    ctx->device = dev;
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    pthread_mutex_init(&c->mrs_lock, NULL);
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->ops.poll_cq = fv_op_poll_cq;
    ctx->ops.req_notify_cq = fv_op_req_notify_cq;
    ctx->ops.post_send = fv_op_post_send;
    ctx->ops.post_recv = fv_op_post_recv;
    ctx->ops.post_srq_recv = fv_op_post_srq_recv;
    ctx->ops.alloc_mw = fv_op_alloc_mw;
    ctx->ops.dealloc_mw = fv_op_dealloc_mw;
    ctx->ops.bind_mw = fv_op_bind_mw;
}

EXPORT int
ibv_close_device(struct ibv_context *ctx)
{
    FORWARD(int, ibv_close_device, "IBVERBS_1.1", (struct ibv_context *), ctx,
            (ctx), EINVAL);
    struct pyrdma_status st;
    struct fctx *c;
    int last;

    c = fv_ctx_of(ctx);
    if (fv_in_use(&c->users)) {
        /* the kernel destroys what is left of a closed context; the
           objects left here still use it: they and it stay allocated
           until the process ends, and the call succeeds as on a NIC
           (perftest closes its device with objects left).  Its MRs are
           deregistered, as the kernel does: no access, local or remote,
           reaches memory the program may free now */
        fv_debug("ibv_close_device: objects are left; the context stays, "
                 "its MRs are deregistered");
        fv_revoke_mrs(c);
        return 0;
    }
    /* the fabric context goes with the last context on it (the one
       opened and those imported from it: import.c) */
    last = fv_ctx_release(c);
    if (last && fv_prov->close_device(c->h, &st) < 0) {
        fv_use(c->refs, 1);     /* refused: the context stays */
        fv_reg_ctx(c, 1);
        return fv_failed(&st);
    }
    if (last)
        free(c->refs);
    close(ctx->async_fd);
    close(ctx->cmd_fd);
    pthread_mutex_destroy(&ctx->mutex);
    pthread_mutex_destroy(&c->mrs_lock);
    free(c);
    return 0;
}

EXPORT int
ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
    FORWARD(int, ibv_get_async_event, "IBVERBS_1.1",
            (struct ibv_context *, struct ibv_async_event *), ctx,
            (ctx, event), (errno = EINVAL, -1));
    struct pyrdma_status st;
    struct pyrdma_async_event e;

    for (;;) {
        int r = fv_prov->get_async_event(fv_ctx_of(ctx)->h, &e, &st);
        if (r < 0) {
            fv_failed(&st);
            return -1;
        }
        if (r == 1)
            break;
        if (fv_wait_fd(ctx->async_fd) < 0)
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
    if (ctx != NULL && fv_ours(ctx))
        return;     /* the fabric acknowledged it when it was read */
    if (real_fn != NULL)
        real_fn(event);
}

EXPORT int
ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    FORWARD(int, ibv_query_device, "IBVERBS_1.1",
            (struct ibv_context *, struct ibv_device_attr *), ctx, (ctx, attr),
            EINVAL);
    struct pyrdma_status st;
    struct pyrdma_device_attr a;
    if (fv_prov->query_device(fv_ctx_of(ctx)->h, &a, &st) < 0)
        return fv_failed(&st);
    fv_device_out(attr, &a);
    return 0;
}

/* The exported ibv_query_port takes the old, shorter struct: fill what it
   has (everything before flags). */
EXPORT int
ibv_query_port(struct ibv_context *ctx, uint8_t port,
               struct _compat_ibv_port_attr *attr)
{
    FORWARD(int, ibv_query_port, "IBVERBS_1.1",
            (struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *),
            ctx, (ctx, port, attr), EINVAL);
    struct ibv_port_attr full;
    int rc;
    rc = vop_query_port(ctx, port, &full, sizeof(full));
    if (rc == 0)
        memcpy(attr, &full, offsetof(struct ibv_port_attr, flags));
    return rc;
}

EXPORT int
ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
              union ibv_gid *gid)
{
    FORWARD(int, ibv_query_gid, "IBVERBS_1.1",
            (struct ibv_context *, uint8_t, int, union ibv_gid *), ctx,
            (ctx, port, index, gid), -1);
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    if (fv_prov->query_gid(fv_ctx_of(ctx)->h, port, index, &e, &st) < 0) {
        fv_failed(&st);
        return -1;
    }
    memcpy(gid->raw, e.gid, 16);
    return 0;
}

static int
gid_is_zero(const uint8_t *gid)
{
    static const uint8_t zero[16];
    return memcmp(gid, zero, 16) == 0;
}

EXPORT int
_ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                  struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
    FORWARD(int, _ibv_query_gid_ex, "IBVERBS_1.11",
            (struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *,
             uint32_t, size_t), ctx, (ctx, port, index, entry, flags, size),
            EINVAL);
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    struct ibv_gid_entry out;
    if (flags != 0)
        return EINVAL;
    if (port > 255 || index > INT32_MAX)
        return EINVAL;
    if (fv_prov->query_gid(fv_ctx_of(ctx)->h, (uint8_t)port, (int)index, &e,
                     &st) < 0)
        return fv_failed(&st) == EINVAL ? ENODATA : errno;
    if (gid_is_zero(e.gid))
        return ENODATA;         /* an empty entry, as the kernel says */
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
    FORWARD(ssize_t, _ibv_query_gid_table, "IBVERBS_1.11",
            (struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t,
             size_t), ctx, (ctx, entries, max, flags, size), -EINVAL);
    struct pyrdma_status st;
    struct pyrdma_device_attr da;
    ssize_t n = 0;
    uint32_t port;

    if (flags != 0 || size < sizeof(struct ibv_gid_entry))
        return -EINVAL;
    if (fv_prov->query_device(fv_ctx_of(ctx)->h, &da, &st) < 0)
        return -fv_failed(&st);
    for (port = 1; port <= da.phys_port_cnt; port++) {
        struct pyrdma_port_attr pa;
        int i;
        if (fv_prov->query_port(fv_ctx_of(ctx)->h, (uint8_t)port, &pa,
                                &st) < 0)
            return -fv_failed(&st);
        for (i = 0; i < pa.gid_tbl_len; i++) {
            struct ibv_gid_entry got;
            if (_ibv_query_gid_ex(ctx, port, (uint32_t)i, &got, 0,
                                  sizeof(got)) != 0)
                continue;       /* empty */
            if ((size_t)n >= max)
                return -EINVAL;
            memcpy((char *)entries + (size_t)n * size, &got, sizeof(got));
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
    FORWARD(int, ibv_query_gid_type, "IBVERBS_PRIVATE_34",
            (struct ibv_context *, uint8_t, unsigned int, int *), ctx,
            (ctx, port, index, type), -1);
    struct pyrdma_status st;
    struct pyrdma_gid_entry e;
    if (index > INT32_MAX ||
        fv_prov->query_gid(fv_ctx_of(ctx)->h, port, (int)index, &e, &st) < 0) {
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
    FORWARD(int, ibv_query_pkey, "IBVERBS_1.1",
            (struct ibv_context *, uint8_t, int, __be16 *), ctx,
            (ctx, port, index, pkey), -1);
    struct pyrdma_status st;
    uint16_t p;
    if (fv_prov->query_pkey(fv_ctx_of(ctx)->h, port, index, &p, &st) < 0) {
        fv_failed(&st);
        return -1;
    }
    *pkey = htobe16(p);
    return 0;
}

EXPORT int
ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
    FORWARD(int, ibv_get_pkey_index, "IBVERBS_1.5",
            (struct ibv_context *, uint8_t, __be16), ctx, (ctx, port, pkey),
            -1);
    int i;
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

