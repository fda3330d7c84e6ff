/* cm_front_real.c - the librdmacm front end's other side: an ID whose
   address belongs to the kernel (a real RDMA device's, e.g. rxe0's) is
   carried by the real librdmacm, as ibv_* calls on a real device go to
   the real libibverbs.

   An ID is made on the fabric (cm_front.c) and decided at rdma_bind_addr,
   rdma_resolve_addr or rdma_create_ep by its address (fv_cm_real_side):
   if it is the kernel's, the front end makes a real librdmacm ID on the
   real event channel of the program's channel (made then), drops the
   fabric's, and from then on forwards every call on the program's ID to
   the real one (CM_FORWARD), copying the real ID's public fields back
   (fv_cm_sync).  The program keeps the pointer it was given; events of
   real IDs are handed out with the program's IDs in them (a real
   CONNECT_REQUEST's new ID is wrapped the same way), so a program never
   sees a struct rdma_cm_id of librdmacm's.  See docs/c_programs.rst. */
#include "cm_front.h"

#include <dirent.h>

__thread int fv_cm_in_real;

/* RDMA_UCX_CM=ucx0: every ID on ucx0, as if no real device were here
   (a value that is neither auto nor ucx0: auto). */
static int
mode_ucx0(void)
{
    const char *m = pyrdma_setting_env(PYRDMA_SET_UCX_CM);
    unsigned long long v = 0;
    char err[128];
    return m != NULL && pyrdma_setting_parse(PYRDMA_SET_UCX_CM, m, &v, err,
                                             sizeof(err)) == 0 && v == 1;
}

/* Has this machine a kernel rdma_cm with an RDMA device, and the program
   the real librdmacm?  Decided once. */
static int
real_cm_present(void)
{
    static int present = -1;
    DIR *d;
    struct dirent *e;
    int n = 0;

    if (__atomic_load_n(&present, __ATOMIC_ACQUIRE) >= 0)
        return present;
    if (access("/dev/infiniband/rdma_cm", R_OK | W_OK) == 0 &&
        fv_cm_real("rdma_create_id") != NULL &&
        (d = opendir("/sys/class/infiniband")) != NULL) {
        while ((e = readdir(d)) != NULL)
            n += e->d_name[0] != '.';
        closedir(d);
    }
    __atomic_store_n(&present, n > 0, __ATOMIC_RELEASE);
    return n > 0;
}

/* Does addr belong to the real librdmacm (only)?  Loopback, this
   node's own address and other fabric nodes' are ucx0's; the wildcard is
   both sides' (fv_cm_wildcard_both); the host's other addresses and the
   rest are the kernel's when it has an RDMA device, unless
   RDMA_UCX_CM=ucx0. */
int
fv_cm_real_side(const struct sockaddr *addr)
{
    int kind;
    if (addr == NULL || mode_ucx0() || !real_cm_present())
        return 0;
    kind = fab_cm_addr_kind(addr);
    return kind == FAB_CM_ADDR_HOST || kind == FAB_CM_ADDR_OTHER;
}

/* Is addr the wildcard, to be bound on both sides (a listener then
   hears the kernel's connection requests and ucx0's)? */
int
fv_cm_wildcard_both(const struct sockaddr *addr)
{
    return addr != NULL && !mode_ucx0() && real_cm_present() &&
           fab_cm_addr_kind(addr) == FAB_CM_ADDR_ANY;
}

/* Copy the real ID's public fields into the program's ID (its context,
   channel and ps stay the program's). */
void
fv_cm_sync(struct fid *f)
{
    struct rdma_cm_id *r = f->real, *id = &f->id;
    if (r == NULL)
        return;
    id->verbs = r->verbs;
    id->route = r->route;
    id->port_num = r->port_num;
    id->qp_type = r->qp_type;
    id->qp = r->qp;
    id->pd = r->pd;
    id->srq = r->srq;
    id->send_cq_channel = r->send_cq_channel;
    id->recv_cq_channel = r->recv_cq_channel;
    id->send_cq = r->send_cq;
    id->recv_cq = r->recv_cq;
    id->event = r->event;
}

/* c's real event channel, made (non-blocking, watched by c's fd) at the
   first need; NULL with errno. */
struct rdma_event_channel *
fv_cm_real_channel(struct fch *c)
{
    CM_REAL(struct rdma_event_channel *, rdma_create_event_channel, (void));
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    struct rdma_event_channel *r;
    struct epoll_event pe;

    pthread_mutex_lock(&m);
    r = c->real;
    if (r == NULL && real_fn != NULL && (r = CM_CALL(real_fn())) != NULL) {
        memset(&pe, 0, sizeof(pe));
        pe.events = EPOLLIN;
        pe.data.fd = r->fd;
        if (fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK) < 0 ||
            epoll_ctl(c->ch.fd, EPOLL_CTL_ADD, r->fd, &pe) < 0) {
            int e = errno;
            CM_REAL(void, rdma_destroy_event_channel,
                    (struct rdma_event_channel *));
            CM_CALL(real_fn(r));
            r = NULL;
            errno = e;
        }
        else
            __atomic_store_n(&c->real, r, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&m);
    if (r == NULL && errno == 0)
        errno = ENODEV;
    return r;
}

/* f, still undecided, goes to the real librdmacm: a real ID on its
   channel's real channel (a synchronous ID: a synchronous real one),
   and the fabric's ID is dropped unless keep_fabric.  0 or -1 with
   errno. */
int
fv_cm_go_real(struct fid *f, int keep_fabric)
{
    CM_REAL(int, rdma_create_id, (struct rdma_event_channel *,
                                  struct rdma_cm_id **, void *,
                                  enum rdma_port_space));
    struct rdma_event_channel *rc = NULL;
    struct pyrdma_status st;

    if (real_fn == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (f->own_ch == NULL &&
        (rc = fv_cm_real_channel(container_of(f->id.channel, struct fch,
                                              ch))) == NULL)
        return -1;
    if (CM_CALL(real_fn(rc, &f->real, f, f->id.ps)) < 0) {
        f->real = NULL;
        return -1;
    }
    if (!keep_fabric && f->h != NULL && fab_cm_destroy_id(f->h, &st) == 0)
        f->h = NULL;
    fv_cm_sync(f);
    return 0;
}

/* A program's ID for a real ID librdmacm made (a connection request's,
   rdma_create_ep's): made like `like` (its context and channel; NULL:
   none).  NULL with errno. */
struct fid *
fv_cm_wrap(struct rdma_cm_id *real, const struct fid *like)
{
    struct fid *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    f->real = real;
    f->id.ps = real->ps;
    if (like != NULL) {
        f->id.context = like->id.context;
        f->id.channel = like->id.channel;
    }
    real->context = f;
    fv_cm_sync(f);
    return f;
}

/* Acknowledge a real event the program will not see (and destroy the
   new ID of a connection request nobody can answer). */
static void
drop_event(struct rdma_cm_event *rev, int destroy_id)
{
    CM_REAL(int, rdma_ack_cm_event, (struct rdma_cm_event *));
    struct rdma_cm_id *id = rev->id;
    CM_CALL(real_fn(rev));
    if (destroy_id) {
        CM_REAL(int, rdma_destroy_id, (struct rdma_cm_id *));
        CM_CALL(real_fn(id));
    }
}

/* The next event of c's real channel, with the program's IDs in it:
   1 (*out set), 0 if there is none, -1 with errno. */
int
fv_cm_real_event(struct fch *c, struct rdma_cm_event **out)
{
    CM_REAL(int, rdma_get_cm_event, (struct rdma_event_channel *,
                                     struct rdma_cm_event **));
    struct rdma_event_channel *r = __atomic_load_n(&c->real,
                                                   __ATOMIC_ACQUIRE);
    struct rdma_cm_event *rev;
    struct fid *f, *l = NULL;
    struct fev *e;

    if (r == NULL || real_fn == NULL)
        return 0;
    if (CM_CALL(real_fn(r, &rev)) < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    if (rev->listen_id != NULL)
        l = rev->listen_id->context;
    if (rev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
        f = fv_cm_wrap(rev->id, l);
    else
        f = rev->id->context;
    e = f ? calloc(1, sizeof(*e)) : NULL;
    if (e == NULL) {
        drop_event(rev, f == NULL);
        errno = ENOMEM;
        return -1;
    }
    e->real = rev;
    e->ev = *rev;
    e->ev.id = &f->id;
    e->ev.listen_id = l ? &l->id : NULL;
    fv_cm_sync(f);
    *out = &e->ev;
    return 1;
}

/* rdma_create_ep for an address of the kernel's: the real one, its ID
   wrapped.  0 or -1 with errno. */
int
fv_cm_real_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
              struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
    CM_REAL(int, rdma_create_ep, (struct rdma_cm_id **,
                                  struct rdma_addrinfo *, struct ibv_pd *,
                                  struct ibv_qp_init_attr *));
    struct rdma_cm_id *r;
    struct fid *f;

    if (real_fn == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (CM_CALL(real_fn(&r, res, pd, qp_init_attr)) < 0)
        return -1;
    f = fv_cm_wrap(r, NULL);
    if (f == NULL) {
        CM_REAL(void, rdma_destroy_ep, (struct rdma_cm_id *));
        CM_CALL(real_fn(r));
        errno = ENOMEM;
        return -1;
    }
    *id = &f->id;
    return 0;
}
