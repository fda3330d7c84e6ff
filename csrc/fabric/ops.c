/* ops.c - what provider.h sees: the device, context and port verbs,
   async events, PDs, AHs, multicast, the CM ops over fab_cm_* and the
   ops table pyrdma_provider_ucx that points at every verb of the
   fabric. */
#include "fabric.h"
#include "../fabric_lib.h"

/* ------------------------------------------------------------------ */
/* asynchronous events of a context                                   */

void
fab_ctx_event(struct uctx *c, int type, int kind, void *element)
{
    uint64_t one = 1;
    if (c->ev_tail - c->ev_head == c->ev_cap) {
        uint32_t ncap = c->ev_cap ? c->ev_cap * 2 : 16, i;
        struct aev *n = malloc(sizeof(*n) * ncap);
        if (n == NULL)
            return;
        for (i = 0; i < c->ev_tail - c->ev_head; i++)
            n[i] = c->ev[(c->ev_head + i) % (c->ev_cap ? c->ev_cap : 1)];
        free(c->ev);
        c->ev = n;
        c->ev_tail -= c->ev_head;
        c->ev_head = 0;
        c->ev_cap = ncap;
    }
    c->ev[c->ev_tail % c->ev_cap] = (struct aev){type, kind, element};
    c->ev_tail++;
    if (write(c->async_fd, &one, sizeof(one)) < 0) {
        /* the counter cannot overflow in practice */
    }
}

/* ------------------------------------------------------------------ */
/* device, context, port                                               */

static int
get_devices(struct pyrdma_devinfo **out, int *n, struct pyrdma_status *st)
{
    struct pyrdma_devinfo *d;

    *out = NULL;
    *n = 0;
    if (fab_node_up(st) < 0)
        return -1;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    snprintf(d->name, sizeof(d->name), "%s", DEV_NAME);
    d->node_guid = N.guid;
    d->node_type = IBV_NODE_CA;
    d->transport_type = IBV_TRANSPORT_IB;
    *out = d;
    *n = 1;
    return 0;
}

static int
open_device(const char *name, void **out, struct pyrdma_status *st)
{
    struct uctx *c;

    if (strcmp(name, DEV_NAME) != 0)
        return pyrdma_fail(st, ENODEV, "ibv_open_device", "no device %s "
                           "(the ucx provider has %s)", name, DEV_NAME);
    if (fab_node_up(st) < 0)
        return -1;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    c->async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->async_fd < 0) {
        free(c);
        return pyrdma_fail(st, errno, "eventfd", "");
    }
    *out = c;
    return 0;
}

static int
close_device(void *vc, struct pyrdma_status *st)
{
    struct uctx *c = vc;
    (void)st;
    LOCK();
    close(c->async_fd);
    free(c->ev);
    free(c);
    UNLOCK();
    return 0;
}

static int
query_device(void *vc, struct pyrdma_device_attr *a, struct pyrdma_status *st)
{
    unsigned maj = 0, min = 0, rel = 0;
    (void)vc;
    (void)st;
    U.get_version(&maj, &min, &rel);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "ucx-%u.%u.%u", maj, min, rel);
    a->node_guid = N.guid;
    a->sys_image_guid = N.guid;
    a->max_mr_size = MAX_MR_SIZE;
    a->page_size_cap = 0xfffff000;
    /* no IEEE OUI of its own: the value rxe gives a software device */
    a->vendor_id = 0xffffff;
    a->vendor_part_id = 0x5543;
    a->hw_ver = 1;
    a->max_qp = MAX_QP - 2;
    a->max_qp_wr = MAX_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN |
                          IBV_DEVICE_SHUTDOWN_PORT | IBV_DEVICE_SYS_IMAGE_GUID |
                          IBV_DEVICE_MEM_WINDOW |
                          IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a->max_sge = MAX_SGE;
    a->max_sge_rd = MAX_SGE;
    a->max_cq = 1 << 16;
    a->max_cqe = MAX_CQE;
    a->max_mr = 1 << 20;
    a->max_mw = MAX_MW;
    a->max_mcast_grp = MAX_MCG;
    a->max_mcast_qp_attach = MAX_MCG_QP;
    a->max_total_mcast_qp_attach = MAX_MCG * MAX_MCG_QP;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = MAX_RD_ATOM;
    a->max_res_rd_atom = MAX_RD_ATOM * (MAX_QP - 2);
    a->max_qp_init_rd_atom = MAX_RD_ATOM;
    a->atomic_cap = IBV_ATOMIC_HCA;
    a->max_ah = 1 << 16;
    a->max_srq = 1 << 16;
    a->max_srq_wr = MAX_WR;
    a->max_srq_sge = MAX_SGE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 15;
    a->phys_port_cnt = 1;
    return 0;
}

static int
query_port(void *vc, uint8_t port, struct pyrdma_port_attr *a,
           struct pyrdma_status *st)
{
    (void)vc;
    if (port != 1)
        return pyrdma_fail(st, EINVAL, "ibv_query_port", "port %u: the "
                           "fabric device has port 1 only", port);
    memset(a, 0, sizeof(*a));
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = PORT_MTU;
    a->active_mtu = PORT_MTU;
    a->gid_tbl_len = GID_TBL_LEN;
    a->port_cap_flags = 0;
    a->max_msg_sz = MAX_MSG;
    a->pkey_tbl_len = 1;
    a->lid = N.lid;
    a->sm_lid = 0;
    a->lmc = 0;
    a->max_vl_num = 1;
    a->subnet_timeout = 18;
    a->active_width = 1;
    a->active_speed = 1;
    a->phys_state = 5;
    a->link_layer = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

static int
query_gid(void *vc, uint8_t port, int index, struct pyrdma_gid_entry *e,
          struct pyrdma_status *st)
{
    (void)vc;
    if (port != 1 || index < 0 || index >= GID_TBL_LEN)
        return pyrdma_fail(st, EINVAL, "ibv_query_gid", "port %u index %d: "
                           "the fabric device has port 1, GID indexes "
                           "0..%d", port, index, GID_TBL_LEN - 1);
    memset(e, 0, sizeof(*e));
    e->gid_index = (uint32_t)index;
    e->gid_type = 0;        /* IBV_GID_TYPE_IB */
    if (index == 0)         /* the others are empty: a zero GID */
        memcpy(e->gid, N.gid, 16);
    return 0;
}

static int
query_pkey(void *vc, uint8_t port, int index, uint16_t *pkey,
           struct pyrdma_status *st)
{
    (void)vc;
    if (port != 1 || index != 0)
        return pyrdma_fail(st, EINVAL, "ibv_query_pkey", "port %u index %d",
                           port, index);
    *pkey = 0xffff;
    return 0;
}

int
fab_async_fd(void *vc)
{
    return ((struct uctx *)vc)->async_fd;
}

static int
get_async_event(void *vc, struct pyrdma_async_event *ev,
                struct pyrdma_status *st)
{
    struct uctx *c = vc;
    uint64_t v;
    (void)st;
    LOCK();
    if (c->ev_head == c->ev_tail) {
        UNLOCK();
        return 0;
    }
    memset(ev, 0, sizeof(*ev));
    ev->event_type = c->ev[c->ev_head % c->ev_cap].type;
    ev->element_kind = c->ev[c->ev_head % c->ev_cap].kind;
    ev->element = c->ev[c->ev_head % c->ev_cap].element;
    c->ev_head++;
    if (c->ev_head == c->ev_tail && read(c->async_fd, &v, sizeof(v)) < 0) {
        /* already drained */
    }
    UNLOCK();
    return 1;
}

/* ------------------------------------------------------------------ */
/* PD, multicast                                                      */

static int
alloc_pd(void *vc, void **out, struct pyrdma_status *st)
{
    struct upd *pd = calloc(1, sizeof(*pd));
    if (pd == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    pd->ctx = vc;
    *out = pd;
    return 0;
}

static int
dealloc_pd(void *pd, struct pyrdma_status *st)
{
    (void)st;
    free(pd);
    return 0;
}

/* ------------------------------------------------------------------ */
/* AH                                                                  */

static int
create_ah(void *pd, struct pyrdma_ah_attr *a, void **out,
          struct pyrdma_status *st)
{
    struct uah *ah = calloc(1, sizeof(*ah));
    if (ah == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    pthread_mutex_init(&ah->mp_lock, NULL);
    if (fab_ah_is_mcast(a)) {
        /* a group: its members are looked up when sending (mcast.c) */
        if (a->port_num > 1 || (a->is_global && a->grh.sgid_index != 0)) {
            free(ah);
            return pyrdma_fail(st, EINVAL, "ibv_create_ah", "port %u, "
                               "sgid_index %u: the fabric device has one "
                               "port and one GID", a->port_num,
                               a->grh.sgid_index);
        }
        ah->mcast = 1;
    }
    else if (fab_ah_resolve(a, &ah->peer, st, "ibv_create_ah") < 0) {
        free(ah);
        return -1;
    }
    ah->pd = pd;
    ah->attr = *a;
    *out = ah;
    return 0;
}

static int
destroy_ah(void *vah, struct pyrdma_status *st)
{
    struct uah *ah = vah;
    (void)st;
    pthread_mutex_destroy(&ah->mp_lock);
    free(ah->mp);
    free(ah);
    return 0;
}

/* ------------------------------------------------------------------ */
/* connection manager: the CM ops over fab_cm_* (csrc/fabric/cm.c)     */

static int
cm_create_channel(void **ch, int *fd, struct pyrdma_status *st)
{
    struct fab_cm_channel *c;

    if (fab_cm_create_channel(&c, fd, st) < 0)
        return -1;
    *ch = c;
    return 0;
}

static int
cm_destroy_channel(void *ch, struct pyrdma_status *st)
{
    return fab_cm_destroy_channel(ch, st);
}

/* Is id one of the UD port spaces (its events carry an ah_attr)? */
static int
cm_id_is_ud(struct fab_cm_id *id)
{
    struct pyrdma_status st = {0};
    struct fab_cm_route r;

    if (id == NULL || fab_cm_query_route(id, &r, &st) < 0)
        return 0;
    return r.ps == FAB_CM_PS_UDP || r.ps == FAB_CM_PS_IPOIB;
}

/* Copy the fabric's event e into *ev. */
static void
cm_event_copy(struct pyrdma_cm_event *ev, const struct fab_cm_event *e)
{
    struct pyrdma_cm_param *p = &ev->param;

    memset(ev, 0, sizeof(*ev));
    ev->event = e->event;
    ev->status = e->status;
    ev->id = e->id;
    ev->listen_id = e->listen_id;
    p->private_data_len = e->private_data_len;
    memcpy(p->private_data, e->private_data, e->private_data_len);
    p->responder_resources = e->responder_resources;
    p->initiator_depth = e->initiator_depth;
    p->flow_control = e->flow_control;
    p->retry_count = e->retry_count;
    p->rnr_retry_count = e->rnr_retry_count;
    p->srq = e->srq;
    p->qp_num = e->qp_num;
    p->qkey = e->qkey;
    p->has_ah = (e->event == FAB_CM_EVENT_ESTABLISHED ||
                 e->event == FAB_CM_EVENT_MULTICAST_JOIN) &&
                cm_id_is_ud(e->id);
    if (p->has_ah)
        p->ah_attr = e->ah_attr;
}

static int
cm_get_event(void *ch, struct pyrdma_cm_event *ev, struct pyrdma_status *st)
{
    struct fab_cm_event *e;

    if (fab_cm_get_event(ch, 0, &e, st) < 0)
        return st->err == EAGAIN ? 0 : -1;
    cm_event_copy(ev, e);
    return fab_cm_ack_event(e, st) < 0 ? -1 : 1;
}

static int
cm_create_id(void *ch, int ps, void **id, struct pyrdma_status *st)
{
    struct fab_cm_id *i;

    if (fab_cm_create_id(ch, NULL, ps, &i, st) < 0)
        return -1;
    *id = i;
    return 0;
}

static int
cm_destroy_id(void *id, struct pyrdma_status *st)
{
    return fab_cm_destroy_id(id, st);
}

static int
cm_bind_addr(void *id, const struct sockaddr *addr, struct pyrdma_status *st)
{
    return fab_cm_bind_addr(id, addr, st);
}

static int
cm_resolve_addr(void *id, const struct sockaddr *src,
                const struct sockaddr *dst, int timeout_ms,
                struct pyrdma_status *st)
{
    return fab_cm_resolve_addr(id, src, dst, timeout_ms, st);
}

static int
cm_resolve_route(void *id, int timeout_ms, struct pyrdma_status *st)
{
    return fab_cm_resolve_route(id, timeout_ms, st);
}

static int
cm_listen(void *id, int backlog, struct pyrdma_status *st)
{
    return fab_cm_listen(id, backlog, st);
}

/* Our connection parameters as the fabric's (private data pointed at). */
static void
cm_param_to_fab(struct fab_cm_conn_param *f, const struct pyrdma_cm_param *p)
{
    memset(f, 0, sizeof(*f));
    f->private_data = p->private_data_len ? p->private_data : NULL;
    f->private_data_len = p->private_data_len;
    f->responder_resources = p->responder_resources;
    f->initiator_depth = p->initiator_depth;
    f->flow_control = p->flow_control;
    f->retry_count = p->retry_count;
    f->rnr_retry_count = p->rnr_retry_count;
    f->srq = p->srq;
    f->qp_num = p->qp_num;
    f->qkey = p->qkey;
}

static int
cm_connect(void *id, const struct pyrdma_cm_param *p, struct pyrdma_status *st)
{
    struct fab_cm_conn_param f;

    cm_param_to_fab(&f, p);
    return fab_cm_connect(id, &f, st);
}

static int
cm_accept(void *id, const struct pyrdma_cm_param *p, struct pyrdma_status *st)
{
    struct fab_cm_conn_param f;

    cm_param_to_fab(&f, p);
    return fab_cm_accept(id, &f, st);
}

static int
cm_reject(void *id, const void *data, uint8_t len, struct pyrdma_status *st)
{
    return fab_cm_reject(id, data, len, st);
}

static int
cm_establish(void *id, struct pyrdma_status *st)
{
    /* rdma_establish: the RTU, and no ESTABLISHED here (as the kernel's
       for a user-managed QP on the active side). */
    return fab_cm_complete(id, st);
}

static int
cm_disconnect(void *id, struct pyrdma_status *st)
{
    return fab_cm_disconnect(id, st);
}

static int
cm_init_qp_attr(void *id, struct pyrdma_qp_attr *attr, int *mask,
                struct pyrdma_status *st)
{
    return fab_cm_init_qp_attr(id, attr, mask, st);
}

static int
cm_query(void *id, struct pyrdma_cm_info *info, struct pyrdma_status *st)
{
    struct fab_cm_route r;

    memset(info, 0, sizeof(*info));
    if (fab_cm_query_route(id, &r, st) < 0)
        return -1;
    info->ps = r.ps;
    memcpy(&info->src, &r.src, sizeof(info->src));
    memcpy(&info->dst, &r.dst, sizeof(info->dst));
    memcpy(info->sgid, r.sgid, 16);
    memcpy(info->dgid, r.dgid, 16);
    info->pkey = 0xffff;
    /* Bound to the device once it has a source GID (resolved or bound
       to a node's address). */
    if (r.port_num != 0) {
        snprintf(info->device, sizeof(info->device), "%s", DEV_NAME);
        info->port_num = r.port_num;
    }
    info->num_paths = r.num_paths;
    if (r.num_paths > 0) {
        struct pyrdma_cm_path *p = &info->path;
        memcpy(p->sgid, r.sgid, 16);
        memcpy(p->dgid, r.dgid, 16);
        p->slid = r.slid;
        p->dlid = r.dlid;
        p->pkey = 0xffff;
        p->mtu = r.path_mtu;
        p->hop_limit = 1;
    }
    return 0;
}

static int
cm_join_multicast(void *id, const struct sockaddr *addr,
                  struct pyrdma_status *st)
{
    return fab_cm_join_multicast(id, addr, 0, NULL, st);
}

static int
cm_leave_multicast(void *id, const struct sockaddr *addr,
                   struct pyrdma_status *st)
{
    return fab_cm_leave_multicast(id, addr, st);
}

const struct pyrdma_provider pyrdma_provider_ucx = {
    .name = "ucx",
    .library = "libucp.so.0",
    .package = "libucx0",
    .load = fab_load,
    .get_devices = get_devices,
    .open_device = open_device,
    .close_device = close_device,
    .query_device = query_device,
    .query_port = query_port,
    .query_gid = query_gid,
    .query_pkey = query_pkey,
    .async_fd = fab_async_fd,
    .get_async_event = get_async_event,
    .alloc_pd = alloc_pd,
    .dealloc_pd = dealloc_pd,
    .reg_mr = fab_reg_mr,
    .dereg_mr = fab_dereg_mr,
    .rereg_mr = fab_rereg_mr,
    .alloc_mr_mem = fab_alloc_mr_mem,
    .free_mr_mem = fab_free_mr_mem,
    .alloc_mw = fab_alloc_mw,
    .dealloc_mw = fab_dealloc_mw,
    .bind_mw = fab_bind_mw,
    .mw_rekeyed = fab_mw_rekeyed,
    .create_comp_channel = fab_create_comp_channel,
    .destroy_comp_channel = fab_destroy_comp_channel,
    .get_cq_event = fab_get_cq_event,
    .ack_cq_events = fab_ack_cq_events,
    .create_cq = fab_create_cq,
    .destroy_cq = fab_destroy_cq,
    .resize_cq = fab_resize_cq,
    .req_notify_cq = fab_req_notify_cq,
    .poll_cq = fab_poll_cq,
    .create_srq = fab_create_srq,
    .modify_srq = fab_modify_srq,
    .query_srq = fab_query_srq,
    .destroy_srq = fab_destroy_srq,
    .post_srq_recv = fab_post_srq_recv,
    .create_qp = fab_create_qp,
    .modify_qp = fab_modify_qp,
    .query_qp = fab_query_qp,
    .destroy_qp = fab_destroy_qp,
    .post_send = fab_post_send,
    .post_recv = fab_post_recv,
    .attach_mcast = fab_attach_mcast,
    .detach_mcast = fab_detach_mcast,
    .create_ah = create_ah,
    .destroy_ah = destroy_ah,
    .cm_create_channel = cm_create_channel,
    .cm_destroy_channel = cm_destroy_channel,
    .cm_get_event = cm_get_event,
    .cm_create_id = cm_create_id,
    .cm_destroy_id = cm_destroy_id,
    .cm_bind_addr = cm_bind_addr,
    .cm_resolve_addr = cm_resolve_addr,
    .cm_resolve_route = cm_resolve_route,
    .cm_listen = cm_listen,
    .cm_connect = cm_connect,
    .cm_accept = cm_accept,
    .cm_reject = cm_reject,
    .cm_establish = cm_establish,
    .cm_disconnect = cm_disconnect,
    .cm_init_qp_attr = cm_init_qp_attr,
    .cm_query = cm_query,
    .cm_join_multicast = cm_join_multicast,
    .cm_leave_multicast = cm_leave_multicast,
};
