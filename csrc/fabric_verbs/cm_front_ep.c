/* cm_front_ep.c - librdmacm's QP and endpoint calls for ucx0
   (rdma_create_qp, rdma_create_ep, rdma_get_request...), rdma_getaddrinfo
   and the small calls (options, ports, devices).  See cm_front.c. */
#include "cm_front.h"

/* Move f's QP to state with the attributes the CM gives; 0 or -1 with
   errno. */
int
fv_cm_qp_to(struct fid *f, int state)
{
    struct ibv_qp_attr a;
    int mask, rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = (enum ibv_qp_state)state;
    if (rdma_init_qp_attr(&f->id, &a, &mask) < 0)
        return -1;
    rc = ibv_modify_qp(f->id.qp, &a, mask);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

/* CQs (with completion channels) for a QP made without them. */
static int
make_cqs(struct fid *f, struct ibv_qp_init_attr *a)
{
    struct rdma_cm_id *id = &f->id;
    if (a->send_cq != NULL && a->recv_cq != NULL)
        return 0;
    id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
    id->send_cq_channel = ibv_create_comp_channel(id->verbs);
    if (id->recv_cq_channel == NULL || id->send_cq_channel == NULL)
        return -1;
    id->recv_cq = ibv_create_cq(id->verbs, (int)a->cap.max_recv_wr + 1,
                                id, id->recv_cq_channel, 0);
    id->send_cq = ibv_create_cq(id->verbs, (int)a->cap.max_send_wr + 1,
                                id, id->send_cq_channel, 0);
    f->own_cqs = 1;
    if (id->recv_cq == NULL || id->send_cq == NULL)
        return -1;
    if (a->recv_cq == NULL)
        a->recv_cq = id->recv_cq;
    if (a->send_cq == NULL)
        a->send_cq = id->send_cq;
    return 0;
}

static void
free_cqs(struct fid *f)
{
    struct rdma_cm_id *id = &f->id;
    if (!f->own_cqs)
        return;
    if (id->recv_cq != NULL)
        ibv_destroy_cq(id->recv_cq);
    if (id->send_cq != NULL)
        ibv_destroy_cq(id->send_cq);
    if (id->recv_cq_channel != NULL)
        ibv_destroy_comp_channel(id->recv_cq_channel);
    if (id->send_cq_channel != NULL)
        ibv_destroy_comp_channel(id->send_cq_channel);
    id->recv_cq = id->send_cq = NULL;
    id->recv_cq_channel = id->send_cq_channel = NULL;
    f->own_cqs = 0;
}

/* Bring a new QP to where librdmacm leaves it: RC INIT, UD RTS. */
static int
qp_ready(struct fid *f)
{
    struct pyrdma_status st;
    if (fab_cm_set_qp(f->h, f->id.qp->qp_num, &st) < 0)
        return -fv_failed(&st);
    if (fv_cm_qp_to(f, IBV_QPS_INIT) < 0)
        return -1;
    if (f->id.qp_type == IBV_QPT_UD &&
        (fv_cm_qp_to(f, IBV_QPS_RTR) < 0 || fv_cm_qp_to(f, IBV_QPS_RTS) < 0))
        return -1;
    return 0;
}

EXPORT int
rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
               struct ibv_qp_init_attr *qp_init_attr)
{
    CM_REAL(int, rdma_create_qp, (struct rdma_cm_id *, struct ibv_pd *,
                                  struct ibv_qp_init_attr *));
    struct fid *f = container_of(id, struct fid, id);
    struct ibv_qp_init_attr a;
    int e;

    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, pd, qp_init_attr)) : -1;
    CM_FORWARD(f, pd, qp_init_attr);
    if (pd == NULL)
        pd = id->pd;
    if (pd == NULL && (pd = f->own_pd = ibv_alloc_pd(id->verbs)) == NULL)
        return -1;
    a = *qp_init_attr;
    if (make_cqs(f, &a) < 0)
        goto fail;
    id->qp = ibv_create_qp(pd, &a);
    if (id->qp == NULL)
        goto fail;
    if (qp_ready(f) < 0) {
        e = errno;
        ibv_destroy_qp(id->qp);
        id->qp = NULL;
        errno = e;
        goto fail;
    }
    qp_init_attr->cap = a.cap;
    id->pd = pd;
    return 0;
fail:
    e = errno;
    free_cqs(f);
    errno = e;
    return -1;
}

EXPORT int
rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
    CM_REAL(int, rdma_create_qp_ex, (struct rdma_cm_id *,
                                     struct ibv_qp_init_attr_ex *));
    struct ibv_qp_init_attr a;
    int rc;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, attr)) : -1;
    CM_FORWARD(container_of(id, struct fid, id), attr);
    memset(&a, 0, sizeof(a));
    a.qp_context = attr->qp_context;
    a.send_cq = attr->send_cq;
    a.recv_cq = attr->recv_cq;
    a.srq = attr->srq;
    a.cap = attr->cap;
    a.qp_type = attr->qp_type;
    a.sq_sig_all = attr->sq_sig_all;
    rc = rdma_create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ?
                        attr->pd : NULL, &a);
    if (rc == 0)
        attr->cap = a.cap;
    return rc;
}

EXPORT void
rdma_destroy_qp(struct rdma_cm_id *id)
{
    CM_REAL(void, rdma_destroy_qp, (struct rdma_cm_id *));
    struct fid *f = container_of(id, struct fid, id);
    if (CM_CALLER_REAL()) {
        if (real_fn)
            CM_CALL(real_fn(id));
        return;
    }
    if (f->real != NULL) {
        CM_CALL(real_fn(f->real));
        fv_cm_sync(f);
        return;
    }
    if (id->qp != NULL)
        ibv_destroy_qp(id->qp);
    id->qp = NULL;
    free_cqs(f);
    if (f->own_pd != NULL && ibv_dealloc_pd(f->own_pd) == 0) {
        if (id->pd == f->own_pd)
            id->pd = NULL;
        f->own_pd = NULL;
    }
}

/* ------------------------------------------------------------------ */
/* endpoints (synchronous IDs)                                         */

static int
ep_passive(struct fid *f, struct rdma_addrinfo *res,
           struct ibv_qp_init_attr *qp_init_attr, struct ibv_pd *pd)
{
    if (rdma_bind_addr(&f->id, res->ai_src_addr) < 0)
        return -1;
    f->id.pd = pd;
    if (qp_init_attr != NULL) {
        f->qp_init = malloc(sizeof(*f->qp_init));
        if (f->qp_init == NULL) {
            errno = ENOMEM;
            return -1;
        }
        *f->qp_init = *qp_init_attr;
    }
    return 0;
}

EXPORT int
rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
               struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
    CM_REAL(int, rdma_create_ep, (struct rdma_cm_id **,
                                  struct rdma_addrinfo *, struct ibv_pd *,
                                  struct ibv_qp_init_attr *));
    struct rdma_cm_id *cid;
    struct fid *f;
    int rc, e;

    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, res, pd, qp_init_attr)) : -1;
    if (res == NULL || id == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (fv_cm_real_side((res->ai_flags & RAI_PASSIVE) ? res->ai_src_addr
                                                      : res->ai_dst_addr))
        return fv_cm_real_ep(id, res, pd, qp_init_attr);
    if (rdma_create_id(NULL, &cid, NULL,
                       (enum rdma_port_space)res->ai_port_space) < 0)
        return -1;
    f = container_of(cid, struct fid, id);
    if (qp_init_attr != NULL)
        qp_init_attr->qp_type = res->ai_qp_type
                                ? (enum ibv_qp_type)res->ai_qp_type
                                : cid->qp_type;
    if (res->ai_flags & RAI_PASSIVE)
        rc = ep_passive(f, res, qp_init_attr, pd);
    else {
        rc = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr,
                               2000);
        if (rc == 0)
            rc = rdma_resolve_route(cid, 2000);
        if (rc == 0 && qp_init_attr != NULL)
            rc = rdma_create_qp(cid, pd, qp_init_attr);
    }
    if (rc < 0) {
        e = errno;
        rdma_destroy_ep(cid);
        errno = e;
        return -1;
    }
    *id = cid;
    return 0;
}

EXPORT void
rdma_destroy_ep(struct rdma_cm_id *id)
{
    CM_REAL(void, rdma_destroy_ep, (struct rdma_cm_id *));
    struct fid *f = container_of(id, struct fid, id);
    if (CM_CALLER_REAL()) {
        if (real_fn)
            CM_CALL(real_fn(id));
        return;
    }
    if (f->real != NULL) {
        CM_CALL(real_fn(f->real));       /* its QP, its ID */
        free(f);
        return;
    }
    if (id->qp != NULL)
        rdma_destroy_qp(id);
    rdma_destroy_id(id);
}

/* rdma_get_request on a listener the real librdmacm carries. */
static int
real_request(struct fid *l, struct rdma_cm_id **id)
{
    CM_REAL(int, rdma_get_request, (struct rdma_cm_id *,
                                    struct rdma_cm_id **));
    struct rdma_cm_id *r;
    struct fid *f;
    if (CM_CALL(real_fn(l->real, &r)) < 0)
        return -1;
    f = fv_cm_wrap(r, NULL);
    if (f == NULL) {
        CM_REAL(void, rdma_destroy_ep, (struct rdma_cm_id *));
        CM_CALL(real_fn(r));
        errno = ENOMEM;
        return -1;
    }
    f->id.context = l->id.context;
    *id = &f->id;
    return 0;
}

EXPORT int
rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
    CM_REAL(int, rdma_get_request, (struct rdma_cm_id *,
                                    struct rdma_cm_id **));
    struct fid *l = container_of(listen, struct fid, id), *f;
    struct rdma_cm_event *ev;
    int e;

    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(listen, id)) : -1;
    if (l->real != NULL)
        return real_request(l, id);
    if (l->own_ch == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (rdma_get_cm_event(&l->own_ch->ch, &ev) < 0)
        return -1;
    if (ev->status != 0 || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        e = ev->status ? -ev->status : EINVAL;
        rdma_ack_cm_event(ev);
        errno = e > 0 ? e : EINVAL;
        return -1;
    }
    f = container_of(ev->id, struct fid, id);
    if (rdma_migrate_id(&f->id, NULL) < 0 ||
        (l->qp_init != NULL &&
         rdma_create_qp(&f->id, listen->pd, l->qp_init) < 0)) {
        e = errno;
        rdma_reject(&f->id, NULL, 0);
        rdma_ack_cm_event(ev);
        rdma_destroy_ep(&f->id);
        errno = e;
        return -1;
    }
    f->last = ev;
    f->id.event = ev;
    *id = &f->id;
    return 0;
}

/* ------------------------------------------------------------------ */
/* addresses                                                           */

static int
qp_type_of_ps(int ps)
{
    return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

static struct sockaddr *
addr_dup(const struct sockaddr *sa, socklen_t len)
{
    struct sockaddr *c = malloc(len);
    if (c != NULL)
        memcpy(c, sa, len);
    return c;
}

/* The addresses of node and service (getaddrinfo, IPv4): the source of
   a passive lookup, the destination of an active one. */
static int
rai_resolve(struct rdma_addrinfo *r, const char *node, const char *service,
            int passive, int numeric)
{
    struct addrinfo h, *ai;
    struct sockaddr **sa = passive ? &r->ai_src_addr : &r->ai_dst_addr;
    socklen_t *len = passive ? &r->ai_src_len : &r->ai_dst_len;
    int rc;

    memset(&h, 0, sizeof(h));
    h.ai_family = AF_INET;
    h.ai_flags = (passive ? AI_PASSIVE : 0) | (numeric ? AI_NUMERICHOST : 0);
    rc = getaddrinfo(node, service, &h, &ai);
    if (rc != 0)
        return rc;
    *sa = addr_dup(ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return *sa == NULL ? EAI_MEMORY : 0;
}

/* An address the hints give (ai_src_addr, ai_dst_addr) into an empty
   slot of the result, as librdmacm does: libfabric's verbs provider
   passes its endpoints' addresses so, with no node and no service. */
static int
rai_take_hint(struct sockaddr **sa, socklen_t *len,
              const struct sockaddr *hint, socklen_t hint_len)
{
    if (*len != 0 || hint == NULL || hint_len == 0)
        return 0;
    *sa = addr_dup(hint, hint_len);
    if (*sa == NULL)
        return EAI_MEMORY;
    *len = hint_len;
    return 0;
}

EXPORT int
rdma_getaddrinfo(const char *node, const char *service,
                 const struct rdma_addrinfo *hints,
                 struct rdma_addrinfo **res)
{
    CM_REAL(int, rdma_getaddrinfo, (const char *, const char *,
                                    const struct rdma_addrinfo *,
                                    struct rdma_addrinfo **));
    struct rdma_addrinfo *r;
    int rc = 0, passive = hints != NULL && (hints->ai_flags & RAI_PASSIVE);

    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(node, service, hints, res)) : -1;
    if (node == NULL && service == NULL && hints == NULL) {
        errno = EINVAL;
        return -1;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return EAI_MEMORY;
    r->ai_flags = hints ? hints->ai_flags : 0;
    r->ai_family = AF_INET;
    r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
                                                     : RDMA_PS_TCP;
    r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                    : qp_type_of_ps(r->ai_port_space);
    if (node != NULL || service != NULL)
        rc = rai_resolve(r, node, service, passive,
                         hints && (hints->ai_flags & RAI_NUMERICHOST));
    if (rc == 0 && hints != NULL)
        rc = rai_take_hint(&r->ai_dst_addr, &r->ai_dst_len,
                           hints->ai_dst_addr, hints->ai_dst_len);
    if (rc == 0 && hints != NULL)
        rc = rai_take_hint(&r->ai_src_addr, &r->ai_src_len,
                           hints->ai_src_addr, hints->ai_src_len);
    if (rc != 0) {
        rdma_freeaddrinfo(r);
        return rc;
    }
    *res = r;
    return 0;
}

EXPORT void
rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    CM_REAL(void, rdma_freeaddrinfo, (struct rdma_addrinfo *));
    if (CM_CALLER_REAL()) {
        if (real_fn)
            CM_CALL(real_fn(res));
        return;
    }
    while (res != NULL) {
        struct rdma_addrinfo *n = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = n;
    }
}

static uint16_t
port_of(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET
           ? ((const struct sockaddr_in *)(const void *)sa)->sin_port : 0;
}

EXPORT __be16
rdma_get_src_port(struct rdma_cm_id *id)
{
    CM_REAL(__be16, rdma_get_src_port, (struct rdma_cm_id *));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id)) : 0;
    return port_of(&id->route.addr.src_addr);
}

EXPORT __be16
rdma_get_dst_port(struct rdma_cm_id *id)
{
    CM_REAL(__be16, rdma_get_dst_port, (struct rdma_cm_id *));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id)) : 0;
    return port_of(&id->route.addr.dst_addr);
}

/* ------------------------------------------------------------------ */
/* the rest                                                            */

/* RDMA_OPTION_ID's options (the kernel's checks): 0 or an errno. */
static int
option_id(struct fid *f, int optname, const void *v, size_t len)
{
    int bound = f->listening ||
                f->id.route.addr.dst_addr.sa_family != 0;
    switch (optname) {
    case RDMA_OPTION_ID_TOS:
        if (len != sizeof(uint8_t))
            return EINVAL;
        f->tos = *(const uint8_t *)v;
        f->tos_set = 1;
        if (f->id.route.path_rec != NULL)
            f->path.traffic_class = f->tos;
        return 0;
    case RDMA_OPTION_ID_REUSEADDR:
        if (len != sizeof(int))
            return EINVAL;
        if (*(const int *)v ? f->listening : f->decided)
            return EINVAL;  /* the kernel's: idle, or on, not listening */
        f->reuseaddr = *(const int *)v != 0;
        return 0;
    case RDMA_OPTION_ID_AFONLY:
        if (len != sizeof(int))
            return EINVAL;
        if (bound)
            return EINVAL;  /* idle or bound only */
        f->afonly = *(const int *)v != 0;
        return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (len != sizeof(uint8_t) || f->id.qp_type != IBV_QPT_RC)
            return EINVAL;
        f->ack_timeout = *(const uint8_t *)v;
        f->ack_timeout_set = 1;
        return 0;
    default:
        return ENOSYS;
    }
}

/* RDMA_OPTION_IB_PATH: an array of struct ibv_path_data, one of them
   the primary bidirectional path of a GMP; the route is then resolved
   (ROUTE_RESOLVED), on the fabric's own path.  0 or an errno. */
static int
option_ib_path(struct fid *f, const void *v, size_t len)
{
    const uint32_t want = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY |
                          IBV_PATH_FLAG_BIDIRECTIONAL;
    const struct ibv_path_data *p = v;
    struct pyrdma_status st;
    size_t i, n = len / sizeof(*p);

    if (len == 0 || len % sizeof(*p) != 0)
        return EINVAL;
    for (i = 0; i < n && (p[i].flags & want) != want; i++)
        ;
    if (i == n)
        return EINVAL;
    if (fab_cm_resolve_route(f->h, 0, &st) < 0)
        return fv_failed(&st);
    if (f->own_ch != NULL &&
        fv_cm_wait(f, RDMA_CM_EVENT_ROUTE_RESOLVED) < 0)
        return errno;
    return 0;
}

EXPORT int
rdma_set_option(struct rdma_cm_id *id, int level, int optname,
                void *optval, size_t optlen)
{
    CM_REAL(int, rdma_set_option, (struct rdma_cm_id *, int, int, void *,
                                   size_t));
    struct fid *f = container_of(id, struct fid, id);
    int e;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, level, optname, optval, optlen))
                         : -1;
    CM_FORWARD(f, level, optname, optval, optlen);
    if (optlen > (1u << 22))
        e = EINVAL;             /* the kernel's size limit */
    else if (optval == NULL && optlen != 0)
        e = EFAULT;             /* the kernel cannot copy it */
    else if (level == RDMA_OPTION_ID)
        e = option_id(f, optname, optval, optlen);
    else if (level == RDMA_OPTION_IB)
        e = optname == RDMA_OPTION_IB_PATH
            ? option_ib_path(f, optval, optlen) : ENOSYS;
    else
        e = ENOSYS;
    if (e != 0) {
        errno = e;
        return -1;
    }
    return 0;
}

EXPORT int
rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
    CM_REAL(int, rdma_notify, (struct rdma_cm_id *, enum ibv_event_type));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, event)) : -1;
    CM_FORWARD(container_of(id, struct fid, id), event);
    return 0;
}

EXPORT struct ibv_context **
rdma_get_devices(int *num_devices)
{
    CM_REAL(struct ibv_context **, rdma_get_devices, (int *));
    struct ibv_context **l;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(num_devices)) : NULL;
    l = calloc(2, sizeof(*l));
    if (l == NULL)
        return NULL;
    l[0] = fv_cm_verbs();
    if (num_devices != NULL)
        *num_devices = l[0] != NULL;
    return l;
}

EXPORT void
rdma_free_devices(struct ibv_context **list)
{
    CM_REAL(void, rdma_free_devices, (struct ibv_context **));
    if (CM_CALLER_REAL()) {
        if (real_fn)
            CM_CALL(real_fn(list));
        return;
    }
    free(list);
}

/* A failed multicast call: -1 with errno. */
static int
mc_fail(const struct pyrdma_status *st)
{
    fv_failed(st);
    return -1;
}

EXPORT int
rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr,
                    void *context)
{
    CM_REAL(int, rdma_join_multicast, (struct rdma_cm_id *,
                                       struct sockaddr *, void *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, addr, context)) : -1;
    CM_FORWARD(f, addr, context);
    if (fab_cm_join_multicast(f->h, addr, 0, context, &st) < 0)
        return mc_fail(&st);
    return 0;
}

EXPORT int
rdma_join_multicast_ex(struct rdma_cm_id *id,
                       struct rdma_cm_join_mc_attr_ex *mc_join_attr,
                       void *context)
{
    CM_REAL(int, rdma_join_multicast_ex, (struct rdma_cm_id *,
                                          struct rdma_cm_join_mc_attr_ex *,
                                          void *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    uint32_t flags;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, mc_join_attr, context)) : -1;
    CM_FORWARD(f, mc_join_attr, context);
    if (mc_join_attr == NULL ||
        !(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
        (mc_join_attr->comp_mask & ~(uint32_t)(RDMA_CM_JOIN_MC_ATTR_ADDRESS |
                                               RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))) {
        errno = EINVAL;
        return -1;
    }
    flags = (mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)
        ? mc_join_attr->join_flags : RDMA_MC_JOIN_FLAG_FULLMEMBER;
    if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
        flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
        errno = EINVAL;         /* a join state the fabric has no use for */
        return -1;
    }
    if (fab_cm_join_multicast(f->h, mc_join_attr->addr,
                              flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
                              ? FAB_CM_MC_SENDONLY : 0, context, &st) < 0)
        return mc_fail(&st);
    return 0;
}

EXPORT int
rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
    CM_REAL(int, rdma_leave_multicast, (struct rdma_cm_id *,
                                        struct sockaddr *));
    struct fid *f = container_of(id, struct fid, id);
    struct pyrdma_status st;
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, addr)) : -1;
    CM_FORWARD(container_of(id, struct fid, id), addr);
    if (fab_cm_leave_multicast(f->h, addr, &st) < 0)
        return mc_fail(&st);
    return 0;
}

EXPORT int
rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    CM_REAL(int, rdma_set_local_ece, (struct rdma_cm_id *, struct ibv_ece *));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, ece)) : -1;
    CM_FORWARD(container_of(id, struct fid, id), ece);
    return 0;
}

EXPORT int
rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    CM_REAL(int, rdma_get_remote_ece, (struct rdma_cm_id *,
                                       struct ibv_ece *));
    if (CM_CALLER_REAL())
        return real_fn ? CM_CALL(real_fn(id, ece)) : -1;
    CM_FORWARD(container_of(id, struct fid, id), ece);
    memset(ece, 0, sizeof(*ece));
    return 0;
}
