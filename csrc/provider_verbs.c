/* provider_verbs.c - the rdma-core provider: libibverbs, dlopen'd or linked. */

/*
 * By default libibverbs.so.1 is loaded with dlopen() the first time a device
 * is needed, so the extension imports on machines without rdma-core.  With
 * PYRDMA_LINK_IBVERBS defined (RDMA_LINK_IBVERBS=1 at build time) the same
 * table is filled with the linked functions instead.  Only the types and the
 * static inline ops-table dispatchers of <infiniband/verbs.h> are used
 * directly; every exported libibverbs function is called through V so that
 * the dlopen build has no undefined ibv_* symbol (a test checks this).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "dlload.h"
#include "provider.h"

/* The exported libibverbs functions this provider uses. */
static struct {
    int loaded;                         /* 1 once every symbol is resolved */
    void *dl;                           /* dlopen handle (dlopen build only) */
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    __be64 (*get_device_guid)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *ctx, uint8_t port,
                      struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index,
                     union ibv_gid *gid);
    int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port,
                        uint32_t index, struct ibv_gid_entry *entry,
                        uint32_t flags, size_t entry_size); /* optional */
    int (*query_pkey)(struct ibv_context *ctx, uint8_t port, int index,
                      __be16 *pkey);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *e);
    void (*ack_async_event)(struct ibv_async_event *e);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                             int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
                    void *addr, size_t length, int access);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *cc);
    int (*get_cq_event)(struct ibv_comp_channel *cc, struct ibv_cq **cq,
                        void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *user,
                                struct ibv_comp_channel *cc, int vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*resize_cq)(struct ibv_cq *cq, int cqe);
    struct ibv_srq *(*create_srq)(struct ibv_pd *pd,
                                  struct ibv_srq_init_attr *attr);
    int (*modify_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr,
                      int mask);
    int (*query_srq)(struct ibv_srq *srq, struct ibv_srq_attr *attr);
    int (*destroy_srq)(struct ibv_srq *srq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
                                struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                    struct ibv_qp_init_attr *init);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*attach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                        uint16_t lid);
    int (*detach_mcast)(struct ibv_qp *qp, const union ibv_gid *gid,
                        uint16_t lid);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*destroy_ah)(struct ibv_ah *ah);
} V;

/* The hot-path structs of provider.h must be the libibverbs ABI. */
#define SAME(a, b, f) \
    _Static_assert(offsetof(struct a, f) == offsetof(struct b, f) && \
                   sizeof(((struct a *)0)->f) == sizeof(((struct b *)0)->f), \
                   #a "." #f)
_Static_assert(sizeof(struct pyrdma_sge) == sizeof(struct ibv_sge), "sge");
SAME(pyrdma_sge, ibv_sge, addr);
SAME(pyrdma_sge, ibv_sge, length);
SAME(pyrdma_sge, ibv_sge, lkey);
_Static_assert(sizeof(struct pyrdma_send_wr) == sizeof(struct ibv_send_wr),
               "send_wr");
SAME(pyrdma_send_wr, ibv_send_wr, wr_id);
SAME(pyrdma_send_wr, ibv_send_wr, next);
SAME(pyrdma_send_wr, ibv_send_wr, sg_list);
SAME(pyrdma_send_wr, ibv_send_wr, num_sge);
SAME(pyrdma_send_wr, ibv_send_wr, opcode);
SAME(pyrdma_send_wr, ibv_send_wr, send_flags);
SAME(pyrdma_send_wr, ibv_send_wr, imm_data);
SAME(pyrdma_send_wr, ibv_send_wr, invalidate_rkey);
SAME(pyrdma_send_wr, ibv_send_wr, wr.rdma.remote_addr);
SAME(pyrdma_send_wr, ibv_send_wr, wr.rdma.rkey);
SAME(pyrdma_send_wr, ibv_send_wr, wr.atomic.remote_addr);
SAME(pyrdma_send_wr, ibv_send_wr, wr.atomic.compare_add);
SAME(pyrdma_send_wr, ibv_send_wr, wr.atomic.swap);
SAME(pyrdma_send_wr, ibv_send_wr, wr.atomic.rkey);
SAME(pyrdma_send_wr, ibv_send_wr, wr.ud.ah);
SAME(pyrdma_send_wr, ibv_send_wr, wr.ud.remote_qpn);
SAME(pyrdma_send_wr, ibv_send_wr, wr.ud.remote_qkey);
SAME(pyrdma_send_wr, ibv_send_wr, qp_type.xrc.remote_srqn);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.mw);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.rkey);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.bind_info.mr);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.bind_info.addr);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.bind_info.length);
SAME(pyrdma_send_wr, ibv_send_wr, bind_mw.bind_info.mw_access_flags);
SAME(pyrdma_send_wr, ibv_send_wr, tso.hdr);
SAME(pyrdma_send_wr, ibv_send_wr, tso.hdr_sz);
SAME(pyrdma_send_wr, ibv_send_wr, tso.mss);
_Static_assert(sizeof(struct pyrdma_recv_wr) == sizeof(struct ibv_recv_wr),
               "recv_wr");
SAME(pyrdma_recv_wr, ibv_recv_wr, wr_id);
SAME(pyrdma_recv_wr, ibv_recv_wr, next);
SAME(pyrdma_recv_wr, ibv_recv_wr, sg_list);
SAME(pyrdma_recv_wr, ibv_recv_wr, num_sge);
_Static_assert(sizeof(struct pyrdma_wc) == sizeof(struct ibv_wc), "wc");
SAME(pyrdma_wc, ibv_wc, wr_id);
SAME(pyrdma_wc, ibv_wc, status);
SAME(pyrdma_wc, ibv_wc, opcode);
SAME(pyrdma_wc, ibv_wc, vendor_err);
SAME(pyrdma_wc, ibv_wc, byte_len);
SAME(pyrdma_wc, ibv_wc, imm_data);
SAME(pyrdma_wc, ibv_wc, qp_num);
SAME(pyrdma_wc, ibv_wc, src_qp);
SAME(pyrdma_wc, ibv_wc, wc_flags);
SAME(pyrdma_wc, ibv_wc, pkey_index);
SAME(pyrdma_wc, ibv_wc, slid);
SAME(pyrdma_wc, ibv_wc, sl);
SAME(pyrdma_wc, ibv_wc, dlid_path_bits);
#undef SAME
_Static_assert((int)PYRDMA_QP_STATE == (int)IBV_QP_STATE, "PYRDMA_QP_STATE");
_Static_assert((int)PYRDMA_QP_CUR_STATE == (int)IBV_QP_CUR_STATE, "PYRDMA_QP_CUR_STATE");
_Static_assert((int)PYRDMA_QP_AV == (int)IBV_QP_AV, "PYRDMA_QP_AV");
_Static_assert((int)PYRDMA_QP_PORT == (int)IBV_QP_PORT, "PYRDMA_QP_PORT");
_Static_assert((int)PYRDMA_QP_DEST_QPN == (int)IBV_QP_DEST_QPN, "PYRDMA_QP_DEST_QPN");
_Static_assert((int)PYRDMA_QP_CAP == (int)IBV_QP_CAP, "PYRDMA_QP_CAP");
_Static_assert((int)PYRDMA_QP_RATE_LIMIT == (int)IBV_QP_RATE_LIMIT, "PYRDMA_QP_RATE_LIMIT");
_Static_assert((int)PYRDMA_QP_ALT_PATH == (int)IBV_QP_ALT_PATH, "PYRDMA_QP_ALT_PATH");
_Static_assert((int)PYRDMA_QP_PATH_MIG_STATE == (int)IBV_QP_PATH_MIG_STATE, "PYRDMA_QP_PATH_MIG_STATE");
_Static_assert((int)PYRDMA_SRQ_MAX_WR == (int)IBV_SRQ_MAX_WR, "PYRDMA_SRQ_MAX_WR");
_Static_assert((int)PYRDMA_SRQ_LIMIT == (int)IBV_SRQ_LIMIT, "PYRDMA_SRQ_LIMIT");
_Static_assert((int)PYRDMA_REREG_TRANSLATION ==
               (int)IBV_REREG_MR_CHANGE_TRANSLATION, "PYRDMA_REREG_*");
_Static_assert((int)PYRDMA_REREG_PD == (int)IBV_REREG_MR_CHANGE_PD,
               "PYRDMA_REREG_PD");
_Static_assert((int)PYRDMA_REREG_ACCESS == (int)IBV_REREG_MR_CHANGE_ACCESS,
               "PYRDMA_REREG_ACCESS");
_Static_assert((int)PYRDMA_WR_RDMA_WRITE == (int)IBV_WR_RDMA_WRITE, "PYRDMA_WR_RDMA_WRITE");
_Static_assert((int)PYRDMA_WR_RDMA_WRITE_WITH_IMM == (int)IBV_WR_RDMA_WRITE_WITH_IMM, "PYRDMA_WR_RDMA_WRITE_WITH_IMM");
_Static_assert((int)PYRDMA_WR_SEND == (int)IBV_WR_SEND, "PYRDMA_WR_SEND");
_Static_assert((int)PYRDMA_WR_SEND_WITH_IMM == (int)IBV_WR_SEND_WITH_IMM, "PYRDMA_WR_SEND_WITH_IMM");
_Static_assert((int)PYRDMA_WR_RDMA_READ == (int)IBV_WR_RDMA_READ, "PYRDMA_WR_RDMA_READ");
_Static_assert((int)PYRDMA_WR_ATOMIC_CMP_AND_SWP == (int)IBV_WR_ATOMIC_CMP_AND_SWP, "PYRDMA_WR_ATOMIC_CMP_AND_SWP");
_Static_assert((int)PYRDMA_WR_ATOMIC_FETCH_AND_ADD == (int)IBV_WR_ATOMIC_FETCH_AND_ADD, "PYRDMA_WR_ATOMIC_FETCH_AND_ADD");
_Static_assert((int)PYRDMA_WR_LOCAL_INV == (int)IBV_WR_LOCAL_INV, "PYRDMA_WR_LOCAL_INV");
_Static_assert((int)PYRDMA_WR_BIND_MW == (int)IBV_WR_BIND_MW, "PYRDMA_WR_BIND_MW");
_Static_assert((int)PYRDMA_WR_SEND_WITH_INV == (int)IBV_WR_SEND_WITH_INV, "PYRDMA_WR_SEND_WITH_INV");
_Static_assert((int)PYRDMA_QPT_RC == (int)IBV_QPT_RC, "PYRDMA_QPT_RC");
_Static_assert((int)PYRDMA_QPT_UC == (int)IBV_QPT_UC, "PYRDMA_QPT_UC");
_Static_assert((int)PYRDMA_QPT_UD == (int)IBV_QPT_UD, "PYRDMA_QPT_UD");
_Static_assert((int)PYRDMA_ACCESS_LOCAL_WRITE == (int)IBV_ACCESS_LOCAL_WRITE, "PYRDMA_ACCESS_LOCAL_WRITE");
_Static_assert((int)PYRDMA_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE, "PYRDMA_ACCESS_REMOTE_WRITE");
_Static_assert((int)PYRDMA_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ, "PYRDMA_ACCESS_REMOTE_READ");
_Static_assert((int)PYRDMA_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC, "PYRDMA_ACCESS_REMOTE_ATOMIC");
_Static_assert((int)PYRDMA_ACCESS_MW_BIND == (int)IBV_ACCESS_MW_BIND, "PYRDMA_ACCESS_MW_BIND");
_Static_assert((int)PYRDMA_SEND_SIGNALED == (int)IBV_SEND_SIGNALED, "PYRDMA_SEND_SIGNALED");

#ifdef PYRDMA_LINK_IBVERBS

/* Return 0: the linked build always has every function. */
static int
load(struct pyrdma_status *st)
{
    (void)st;
    if (V.loaded)
        return 0;
    V.get_device_list = ibv_get_device_list;
    V.free_device_list = ibv_free_device_list;
    V.get_device_name = ibv_get_device_name;
    V.get_device_guid = ibv_get_device_guid;
    V.open_device = ibv_open_device;
    V.close_device = ibv_close_device;
    V.query_device = ibv_query_device;
    V.query_port = ibv_query_port;
    V.query_gid = ibv_query_gid;
    V.query_gid_ex = _ibv_query_gid_ex;
    V.query_pkey = ibv_query_pkey;
    V.get_async_event = ibv_get_async_event;
    V.ack_async_event = ibv_ack_async_event;
    V.alloc_pd = ibv_alloc_pd;
    V.dealloc_pd = ibv_dealloc_pd;
    V.reg_mr = ibv_reg_mr;
    V.dereg_mr = ibv_dereg_mr;
    V.rereg_mr = ibv_rereg_mr;
    V.create_comp_channel = ibv_create_comp_channel;
    V.destroy_comp_channel = ibv_destroy_comp_channel;
    V.get_cq_event = ibv_get_cq_event;
    V.ack_cq_events = ibv_ack_cq_events;
    V.create_cq = ibv_create_cq;
    V.destroy_cq = ibv_destroy_cq;
    V.resize_cq = ibv_resize_cq;
    V.create_srq = ibv_create_srq;
    V.modify_srq = ibv_modify_srq;
    V.query_srq = ibv_query_srq;
    V.destroy_srq = ibv_destroy_srq;
    V.create_qp = ibv_create_qp;
    V.modify_qp = ibv_modify_qp;
    V.query_qp = ibv_query_qp;
    V.destroy_qp = ibv_destroy_qp;
    V.attach_mcast = ibv_attach_mcast;
    V.detach_mcast = ibv_detach_mcast;
    V.create_ah = ibv_create_ah;
    V.destroy_ah = ibv_destroy_ah;
    V.loaded = 1;
    return 0;
}

#else /* dlopen */

/* libibverbs, loaded by load(). */
static const struct pyrdma_dllib libibverbs = {
    .setting = PYRDMA_SET_IBVERBS_LIBRARY,
    .package = "libibverbs1 (rdma-core)",
    .name = "libibverbs",
    .too_old = "rdma-core too old?",
};

#define SYM(field, name) {name, (void **)&V.field, 0}
static const struct pyrdma_dlsym verbs_syms[] = {
    SYM(get_device_list, "ibv_get_device_list"),
    SYM(free_device_list, "ibv_free_device_list"),
    SYM(get_device_name, "ibv_get_device_name"),
    SYM(get_device_guid, "ibv_get_device_guid"),
    SYM(open_device, "ibv_open_device"),
    SYM(close_device, "ibv_close_device"),
    SYM(query_device, "ibv_query_device"),
    SYM(query_port, "ibv_query_port"),
    SYM(query_gid, "ibv_query_gid"),
    SYM(query_pkey, "ibv_query_pkey"),
    SYM(get_async_event, "ibv_get_async_event"),
    SYM(ack_async_event, "ibv_ack_async_event"),
    SYM(alloc_pd, "ibv_alloc_pd"),
    SYM(dealloc_pd, "ibv_dealloc_pd"),
    SYM(reg_mr, "ibv_reg_mr"),
    SYM(dereg_mr, "ibv_dereg_mr"),
    SYM(rereg_mr, "ibv_rereg_mr"),
    SYM(create_comp_channel, "ibv_create_comp_channel"),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel"),
    SYM(get_cq_event, "ibv_get_cq_event"),
    SYM(ack_cq_events, "ibv_ack_cq_events"),
    SYM(create_cq, "ibv_create_cq"),
    SYM(destroy_cq, "ibv_destroy_cq"),
    SYM(resize_cq, "ibv_resize_cq"),
    SYM(create_srq, "ibv_create_srq"),
    SYM(modify_srq, "ibv_modify_srq"),
    SYM(query_srq, "ibv_query_srq"),
    SYM(destroy_srq, "ibv_destroy_srq"),
    SYM(create_qp, "ibv_create_qp"),
    SYM(modify_qp, "ibv_modify_qp"),
    SYM(query_qp, "ibv_query_qp"),
    SYM(destroy_qp, "ibv_destroy_qp"),
    SYM(attach_mcast, "ibv_attach_mcast"),
    SYM(detach_mcast, "ibv_detach_mcast"),
    SYM(create_ah, "ibv_create_ah"),
    SYM(destroy_ah, "ibv_destroy_ah"),
    {"_ibv_query_gid_ex", (void **)&V.query_gid_ex, 1},   /* optional */
    {NULL, NULL, 0},
};
#undef SYM

/* Load libibverbs (or $RDMA_IBVERBS_LIBRARY); return 0 or -1 with *st set. */
static int
load(struct pyrdma_status *st)
{
    if (V.loaded)
        return 0;
    V.dl = pyrdma_dlopen(&libibverbs, verbs_syms, st);
    if (V.dl == NULL)
        return -1;
    V.loaded = 1;
    return 0;
}

#endif /* PYRDMA_LINK_IBVERBS */

/* Fill *st from errno (or EIO when a verb returned NULL without one). */
static int
fail_errno(struct pyrdma_status *st, int rc, const char *func)
{
    int err = rc > 0 ? rc : errno;
    return pyrdma_fail(st, err ? err : EIO, func, "");
}

static int
get_devices(struct pyrdma_devinfo **out, int *n, struct pyrdma_status *st)
{
    struct ibv_device **list;
    struct pyrdma_devinfo *res;
    int num = 0, i;

    *out = NULL;
    *n = 0;
    errno = 0;
    list = V.get_device_list(&num);
    if (list == NULL) {
        /* No kernel support at all is "no devices", not an error. */
        if (errno == ENOSYS || errno == 0)
            return 0;
        return fail_errno(st, 0, "ibv_get_device_list");
    }
    res = calloc(num ? num : 1, sizeof(*res));
    if (res == NULL) {
        V.free_device_list(list);
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    }
    for (i = 0; i < num; i++) {
        snprintf(res[i].name, sizeof(res[i].name), "%s",
                 V.get_device_name(list[i]));
        res[i].node_guid = be64toh(V.get_device_guid(list[i]));
        res[i].node_type = list[i]->node_type;
        res[i].transport_type = list[i]->transport_type;
    }
    V.free_device_list(list);
    *out = res;
    *n = num;
    return 0;
}

static int
open_device(const char *name, void **ctx, struct pyrdma_status *st)
{
    struct ibv_device **list;
    struct ibv_context *c = NULL;
    int num = 0, i, found = 0;

    errno = 0;
    list = V.get_device_list(&num);
    if (list == NULL) {
        if (errno == ENOSYS || errno == 0)
            return pyrdma_fail(st, ENODEV, "ibv_open_device",
                               "no RDMA device named '%s' (the kernel has "
                               "no RDMA support)", name);
        return fail_errno(st, 0, "ibv_get_device_list");
    }
    for (i = 0; i < num; i++) {
        if (strcmp(V.get_device_name(list[i]), name) == 0) {
            found = 1;
            errno = 0;
            c = V.open_device(list[i]);
            break;
        }
    }
    if (c == NULL) {
        int err = errno;
        V.free_device_list(list);
        if (!found)
            return pyrdma_fail(st, ENODEV, "ibv_get_device_list",
                               "no RDMA device named '%s'", name);
        return fail_errno(st, err, "ibv_open_device");
    }
    V.free_device_list(list);
    *ctx = c;
    return 0;
}

static int
close_device(void *ctx, struct pyrdma_status *st)
{
    int rc = V.close_device(ctx);
    return rc ? fail_errno(st, rc, "ibv_close_device") : 0;
}

static int
query_device(void *ctx, struct pyrdma_device_attr *a, struct pyrdma_status *st)
{
    struct ibv_device_attr d;
    int rc;

    memset(&d, 0, sizeof(d));
    rc = V.query_device(ctx, &d);
    if (rc)
        return fail_errno(st, rc, "ibv_query_device");
    memcpy(a->fw_ver, d.fw_ver, sizeof(a->fw_ver));
    a->fw_ver[sizeof(a->fw_ver) - 1] = '\0';
    a->node_guid = be64toh(d.node_guid);
    a->sys_image_guid = be64toh(d.sys_image_guid);
#define C(f) a->f = d.f
    C(max_mr_size); C(page_size_cap); C(vendor_id); C(vendor_part_id);
    C(hw_ver); C(max_qp); C(max_qp_wr); C(device_cap_flags); C(max_sge);
    C(max_sge_rd); C(max_cq); C(max_cqe); C(max_mr); C(max_pd);
    C(max_qp_rd_atom); C(max_ee_rd_atom); C(max_res_rd_atom);
    C(max_qp_init_rd_atom); C(max_ee_init_rd_atom); C(atomic_cap); C(max_ee);
    C(max_rdd); C(max_mw); C(max_raw_ipv6_qp); C(max_raw_ethy_qp);
    C(max_mcast_grp); C(max_mcast_qp_attach); C(max_total_mcast_qp_attach);
    C(max_ah); C(max_fmr); C(max_map_per_fmr); C(max_srq); C(max_srq_wr);
    C(max_srq_sge); C(max_pkeys); C(local_ca_ack_delay); C(phys_port_cnt);
#undef C
    return 0;
}

static int
query_port(void *vctx, uint8_t port, struct pyrdma_port_attr *a,
           struct pyrdma_status *st)
{
    struct ibv_context *ctx = vctx;
    struct verbs_context *vc = verbs_get_ctx_op(ctx, query_port);
    struct ibv_port_attr p;
    int rc;

    /* The same choice as the header's inline ibv_query_port(). */
    memset(&p, 0, sizeof(p));
    if (vc != NULL)
        rc = vc->query_port(ctx, port, &p, sizeof(p));
    else
        rc = V.query_port(ctx, port, (struct _compat_ibv_port_attr *)&p);
    if (rc)
        return fail_errno(st, rc, "ibv_query_port");
#define C(f) a->f = p.f
    C(state); C(max_mtu); C(active_mtu); C(gid_tbl_len); C(port_cap_flags);
    C(max_msg_sz); C(bad_pkey_cntr); C(qkey_viol_cntr); C(pkey_tbl_len);
    C(lid); C(sm_lid); C(lmc); C(max_vl_num); C(sm_sl); C(subnet_timeout);
    C(init_type_reply); C(active_width); C(active_speed); C(phys_state);
    C(link_layer); C(flags); C(port_cap_flags2);
#undef C
    return 0;
}

static int
query_gid(void *ctx, uint8_t port, int index, struct pyrdma_gid_entry *e,
          struct pyrdma_status *st)
{
    int rc;

    memset(e, 0, sizeof(*e));
    e->gid_index = (uint32_t)index;
    if (V.query_gid_ex != NULL) {
        struct ibv_gid_entry g;
        memset(&g, 0, sizeof(g));
        rc = V.query_gid_ex(ctx, port, (uint32_t)index, &g, 0, sizeof(g));
        if (rc == 0) {
            memcpy(e->gid, g.gid.raw, 16);
            e->gid_type = g.gid_type;
            e->ndev_ifindex = g.ndev_ifindex;
            return 0;
        }
        /* ENODATA: an empty slot of the table; report a zero GID. */
        if (rc == ENODATA || rc == -ENODATA)
            return 0;
        if (rc != EOPNOTSUPP && rc != -EOPNOTSUPP)
            return fail_errno(st, rc < 0 ? -rc : rc, "ibv_query_gid_ex");
    }
    {
        union ibv_gid gid;
        rc = V.query_gid(ctx, port, index, &gid);
        if (rc)
            return fail_errno(st, rc, "ibv_query_gid");
        memcpy(e->gid, gid.raw, 16);
    }
    return 0;
}

static int
query_pkey(void *ctx, uint8_t port, int index, uint16_t *pkey,
           struct pyrdma_status *st)
{
    __be16 p = 0;
    int rc = V.query_pkey(ctx, port, index, &p);
    if (rc)
        return fail_errno(st, rc, "ibv_query_pkey");
    *pkey = be16toh(p);
    return 0;
}

/* Make fd non-blocking; return 0 or -1 with *st set. */
static int
set_nonblock(int fd, const char *what, struct pyrdma_status *st)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return pyrdma_fail(st, errno, "fcntl", "%s fd", what);
    return 0;
}

static int
async_fd(void *ctx)
{
    return ((struct ibv_context *)ctx)->async_fd;
}

static int
get_async_event(void *vctx, struct pyrdma_async_event *ev,
                struct pyrdma_status *st)
{
    struct ibv_context *ctx = vctx;
    struct ibv_async_event e;
    int fl = fcntl(ctx->async_fd, F_GETFL);

    if (fl >= 0 && !(fl & O_NONBLOCK) &&
        set_nonblock(ctx->async_fd, "async", st) < 0)
        return -1;
    if (V.get_async_event(ctx, &e) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return fail_errno(st, 0, "ibv_get_async_event");
    }
    memset(ev, 0, sizeof(*ev));
    ev->event_type = e.event_type;
    switch (e.event_type) {
    case IBV_EVENT_CQ_ERR:
        ev->element_kind = PYRDMA_EV_CQ;
        ev->element = e.element.cq->cq_context;
        break;
    case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
        ev->element_kind = PYRDMA_EV_QP;
        ev->element = e.element.qp->qp_context;
        break;
    case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED:
        ev->element_kind = PYRDMA_EV_SRQ;
        ev->element = e.element.srq->srq_context;
        break;
    case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE: case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
        ev->element_kind = PYRDMA_EV_PORT;
        ev->port_num = e.element.port_num;
        break;
    default:
        ev->element_kind = PYRDMA_EV_NONE;
        break;
    }
    V.ack_async_event(&e);
    return 1;
}

static int
alloc_pd(void *ctx, void **pd, struct pyrdma_status *st)
{
    errno = 0;
    *pd = V.alloc_pd(ctx);
    return *pd ? 0 : fail_errno(st, 0, "ibv_alloc_pd");
}

static int
dealloc_pd(void *pd, struct pyrdma_status *st)
{
    int rc = V.dealloc_pd(pd);
    return rc ? fail_errno(st, rc, "ibv_dealloc_pd") : 0;
}

static int
reg_mr(void *pd, void *addr, size_t length, unsigned int access, void **mr,
       struct pyrdma_mr_info *info, struct pyrdma_status *st)
{
    struct ibv_mr *m;

    errno = 0;
    m = V.reg_mr(pd, addr, length, (int)access);
    if (m == NULL)
        return fail_errno(st, 0, "ibv_reg_mr");
    info->lkey = m->lkey;
    info->rkey = m->rkey;
    *mr = m;
    return 0;
}

static int
dereg_mr(void *mr, struct pyrdma_status *st)
{
    int rc = V.dereg_mr(mr);
    return rc ? fail_errno(st, rc, "ibv_dereg_mr") : 0;
}

/* libibverbs returns an IBV_REREG_MR_ERR_* code and sets errno (the
   MR stays as it was for ERR_INPUT and ERR_CMD). */
static int
rereg_mr(void *mr, int flags, void *pd, void *addr, size_t length,
         unsigned int access, struct pyrdma_mr_info *info,
         struct pyrdma_status *st)
{
    struct ibv_mr *m = mr;
    int rc;
    errno = 0;
    rc = V.rereg_mr(m, flags, pd, addr, length, (int)access);
    if (rc != 0)
        return fail_errno(st, errno ? errno : EINVAL, "ibv_rereg_mr");
    info->lkey = m->lkey;
    info->rkey = m->rkey;
    return 0;
}

static int
alloc_mw(void *pd, int type, void **mw, uint32_t *rkey,
         struct pyrdma_status *st)
{
    struct ibv_mw *m;

    errno = 0;
    m = ibv_alloc_mw(pd, type);   /* inline: dispatches through ctx ops */
    if (m == NULL)
        return fail_errno(st, errno ? errno : EOPNOTSUPP, "ibv_alloc_mw");
    *rkey = m->rkey;
    *mw = m;
    return 0;
}

static int
bind_mw(void *qp, void *mw, uint64_t wr_id, unsigned int flags,
        const struct pyrdma_mw_bind_info *bi, uint32_t *rkey,
        struct pyrdma_status *st)
{
    struct ibv_mw_bind b;
    int rc;

    memset(&b, 0, sizeof(b));
    b.wr_id = wr_id;
    b.send_flags = flags;
    b.bind_info.mr = bi->mr;
    b.bind_info.addr = bi->addr;
    b.bind_info.length = bi->length;
    b.bind_info.mw_access_flags = bi->mw_access_flags;
    rc = ibv_bind_mw(qp, mw, &b);  /* inline: dispatches through ctx ops */
    if (rc)
        return fail_errno(st, rc, "ibv_bind_mw");
    *rkey = ((struct ibv_mw *)mw)->rkey;
    return 0;
}

static void
mw_rekeyed(void *mw, uint32_t rkey)
{
    ((struct ibv_mw *)mw)->rkey = rkey;
}

static int
dealloc_mw(void *mw, struct pyrdma_status *st)
{
    int rc = ibv_dealloc_mw(mw);
    return rc ? fail_errno(st, rc, "ibv_dealloc_mw") : 0;
}

static int
create_comp_channel(void *ctx, void **cc, int *fd, struct pyrdma_status *st)
{
    struct ibv_comp_channel *c;

    errno = 0;
    c = V.create_comp_channel(ctx);
    if (c == NULL)
        return fail_errno(st, 0, "ibv_create_comp_channel");
    if (set_nonblock(c->fd, "completion channel", st) < 0) {
        V.destroy_comp_channel(c);
        return -1;
    }
    *cc = c;
    *fd = c->fd;
    return 0;
}

static int
destroy_comp_channel(void *cc, struct pyrdma_status *st)
{
    int rc = V.destroy_comp_channel(cc);
    return rc ? fail_errno(st, rc, "ibv_destroy_comp_channel") : 0;
}

static int
get_cq_event(void *cc, void **cq_context, struct pyrdma_status *st)
{
    struct ibv_cq *cq;

    if (V.get_cq_event(cc, &cq, cq_context) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return fail_errno(st, 0, "ibv_get_cq_event");
    }
    return 1;
}

static void
ack_cq_events(void *cq, unsigned int n)
{
    V.ack_cq_events(cq, n);
}

static int
create_cq(void *ctx, int cqe, void *cq_context, void *cc, int vector,
          void **cq, int *actual, struct pyrdma_status *st)
{
    struct ibv_cq *c;

    errno = 0;
    c = V.create_cq(ctx, cqe, cq_context, cc, vector);
    if (c == NULL)
        return fail_errno(st, 0, "ibv_create_cq");
    *cq = c;
    *actual = c->cqe;
    return 0;
}

static int
destroy_cq(void *cq, struct pyrdma_status *st)
{
    int rc = V.destroy_cq(cq);
    return rc ? fail_errno(st, rc, "ibv_destroy_cq") : 0;
}

static int
resize_cq(void *cq, int cqe, int *actual, struct pyrdma_status *st)
{
    int rc = V.resize_cq(cq, cqe);
    if (rc)
        return fail_errno(st, rc, "ibv_resize_cq");
    *actual = ((struct ibv_cq *)cq)->cqe;
    return 0;
}

static int
req_notify_cq(void *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}

static int
poll_cq(void *cq, int n, struct pyrdma_wc *wc)
{
    int rc = ibv_poll_cq(cq, n, (struct ibv_wc *)wc);
    return rc >= 0 ? rc : -EIO;
}

static int
create_srq(void *pd, struct pyrdma_srq_attr *a, void *srq_context, void **srq,
           struct pyrdma_status *st)
{
    struct ibv_srq_init_attr ia;
    struct ibv_srq *s;

    memset(&ia, 0, sizeof(ia));
    ia.srq_context = srq_context;
    ia.attr.max_wr = a->max_wr;
    ia.attr.max_sge = a->max_sge;
    ia.attr.srq_limit = a->srq_limit;
    errno = 0;
    s = V.create_srq(pd, &ia);
    if (s == NULL)
        return fail_errno(st, 0, "ibv_create_srq");
    a->max_wr = ia.attr.max_wr;
    a->max_sge = ia.attr.max_sge;
    *srq = s;
    return 0;
}

static int
modify_srq(void *srq, struct pyrdma_srq_attr *a, int mask,
           struct pyrdma_status *st)
{
    struct ibv_srq_attr sa = {.max_wr = a->max_wr, .max_sge = a->max_sge,
                              .srq_limit = a->srq_limit};
    int rc = V.modify_srq(srq, &sa, mask);
    return rc ? fail_errno(st, rc, "ibv_modify_srq") : 0;
}

static int
query_srq(void *srq, struct pyrdma_srq_attr *a, struct pyrdma_status *st)
{
    struct ibv_srq_attr sa;
    int rc;

    memset(&sa, 0, sizeof(sa));
    rc = V.query_srq(srq, &sa);
    if (rc)
        return fail_errno(st, rc, "ibv_query_srq");
    a->max_wr = sa.max_wr;
    a->max_sge = sa.max_sge;
    a->srq_limit = sa.srq_limit;
    return 0;
}

static int
destroy_srq(void *srq, struct pyrdma_status *st)
{
    int rc = V.destroy_srq(srq);
    return rc ? fail_errno(st, rc, "ibv_destroy_srq") : 0;
}

static int
post_srq_recv(void *srq, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    return ibv_post_srq_recv(srq, (struct ibv_recv_wr *)wr,
                             (struct ibv_recv_wr **)bad);
}

/* The fields with the same name and meaning on both sides, listed once;
   each conversion below applies COPY to them in its own direction. */
#define GRH_FIELDS(X) X(flow_label) X(sgid_index) X(hop_limit) X(traffic_class)
#define AH_FIELDS(X) X(dlid) X(sl) X(src_path_bits) X(static_rate) \
    X(is_global) X(port_num)
#define CAP_FIELDS(X) X(max_send_wr) X(max_recv_wr) X(max_send_sge) \
    X(max_recv_sge) X(max_inline_data)
#define QP_ATTR_FIELDS(X) X(qp_state) X(cur_qp_state) X(path_mtu) \
    X(path_mig_state) X(qkey) X(rq_psn) X(sq_psn) X(dest_qp_num) \
    X(qp_access_flags) X(pkey_index) X(alt_pkey_index) \
    X(en_sqd_async_notify) X(sq_draining) X(max_rd_atomic) \
    X(max_dest_rd_atomic) X(min_rnr_timer) X(port_num) X(timeout) \
    X(retry_cnt) X(rnr_retry) X(alt_port_num) X(alt_timeout) X(rate_limit)
#define COPY(f) d->f = s->f;
#define GRH_COPY(f) d->grh.f = s->grh.f;

static void
ah_to_ibv(struct ibv_ah_attr *d, const struct pyrdma_ah_attr *s)
{
    memcpy(d->grh.dgid.raw, s->grh.dgid, 16);
    GRH_FIELDS(GRH_COPY)
    AH_FIELDS(COPY)
}

static void
ah_from_ibv(struct pyrdma_ah_attr *d, const struct ibv_ah_attr *s)
{
    memcpy(d->grh.dgid, s->grh.dgid.raw, 16);
    GRH_FIELDS(GRH_COPY)
    AH_FIELDS(COPY)
}

static void
cap_to_ibv(struct ibv_qp_cap *d, const struct pyrdma_qp_cap *s)
{
    CAP_FIELDS(COPY)
}

static void
cap_from_ibv(struct pyrdma_qp_cap *d, const struct ibv_qp_cap *s)
{
    CAP_FIELDS(COPY)
}

static int
create_qp(void *pd, struct pyrdma_qp_init_attr *a, void **qp, uint32_t *qpn,
          struct pyrdma_status *st)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp *q;

    memset(&ia, 0, sizeof(ia));
    ia.qp_context = a->qp_context;
    ia.send_cq = a->send_cq;
    ia.recv_cq = a->recv_cq;
    ia.srq = a->srq;
    cap_to_ibv(&ia.cap, &a->cap);
    ia.qp_type = a->qp_type;
    ia.sq_sig_all = a->sq_sig_all;
    errno = 0;
    q = V.create_qp(pd, &ia);
    if (q == NULL)
        return fail_errno(st, 0, "ibv_create_qp");
    cap_from_ibv(&a->cap, &ia.cap);
    *qp = q;
    *qpn = q->qp_num;
    return 0;
}

static void
qp_attr_to_ibv(struct ibv_qp_attr *d, const struct pyrdma_qp_attr *s)
{
    memset(d, 0, sizeof(*d));
    QP_ATTR_FIELDS(COPY)
    cap_to_ibv(&d->cap, &s->cap);
    ah_to_ibv(&d->ah_attr, &s->ah_attr);
    ah_to_ibv(&d->alt_ah_attr, &s->alt_ah_attr);
}

static void
qp_attr_from_ibv(struct pyrdma_qp_attr *d, const struct ibv_qp_attr *s)
{
    memset(d, 0, sizeof(*d));
    QP_ATTR_FIELDS(COPY)
    cap_from_ibv(&d->cap, &s->cap);
    ah_from_ibv(&d->ah_attr, &s->ah_attr);
    ah_from_ibv(&d->alt_ah_attr, &s->alt_ah_attr);
}

static int
modify_qp(void *qp, struct pyrdma_qp_attr *a, int mask,
          struct pyrdma_status *st)
{
    struct ibv_qp_attr ia;
    int rc;

    qp_attr_to_ibv(&ia, a);
    rc = V.modify_qp(qp, &ia, mask);
    return rc ? fail_errno(st, rc, "ibv_modify_qp") : 0;
}

static int
query_qp(void *qp, struct pyrdma_qp_attr *a, int mask,
         struct pyrdma_status *st)
{
    struct ibv_qp_attr ia;
    struct ibv_qp_init_attr init;
    int rc;

    memset(&ia, 0, sizeof(ia));
    memset(&init, 0, sizeof(init));
    rc = V.query_qp(qp, &ia, mask, &init);
    if (rc)
        return fail_errno(st, rc, "ibv_query_qp");
    qp_attr_from_ibv(a, &ia);
    return 0;
}

static int
destroy_qp(void *qp, struct pyrdma_status *st)
{
    int rc = V.destroy_qp(qp);
    return rc ? fail_errno(st, rc, "ibv_destroy_qp") : 0;
}

static int
post_send(void *qp, struct pyrdma_send_wr *wr, struct pyrdma_send_wr **bad)
{
    return ibv_post_send(qp, (struct ibv_send_wr *)wr,
                         (struct ibv_send_wr **)bad);
}

static int
post_recv(void *qp, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    return ibv_post_recv(qp, (struct ibv_recv_wr *)wr,
                         (struct ibv_recv_wr **)bad);
}

static int
attach_mcast(void *qp, const uint8_t gid[16], uint16_t lid,
             struct pyrdma_status *st)
{
    union ibv_gid g;
    int rc;

    memcpy(g.raw, gid, 16);
    rc = V.attach_mcast(qp, &g, lid);
    return rc ? fail_errno(st, rc, "ibv_attach_mcast") : 0;
}

static int
detach_mcast(void *qp, const uint8_t gid[16], uint16_t lid,
             struct pyrdma_status *st)
{
    union ibv_gid g;
    int rc;

    memcpy(g.raw, gid, 16);
    rc = V.detach_mcast(qp, &g, lid);
    return rc ? fail_errno(st, rc, "ibv_detach_mcast") : 0;
}

static int
create_ah(void *pd, struct pyrdma_ah_attr *a, void **ah,
          struct pyrdma_status *st)
{
    struct ibv_ah_attr ia;

    memset(&ia, 0, sizeof(ia));
    ah_to_ibv(&ia, a);
    errno = 0;
    *ah = V.create_ah(pd, &ia);
    return *ah ? 0 : fail_errno(st, 0, "ibv_create_ah");
}

static int
destroy_ah(void *ah, struct pyrdma_status *st)
{
    int rc = V.destroy_ah(ah);
    return rc ? fail_errno(st, rc, "ibv_destroy_ah") : 0;
}

/* ---- Connection manager: librdmacm, always loaded with dlopen ---- */

/* The librdmacm functions the CM ops use (loaded on the first channel, so
   that the module works where librdmacm is not installed). */
static struct {
    void *dl;                           /* dlopen handle once loaded */
    struct rdma_event_channel *(*create_event_channel)(void);
    void (*destroy_event_channel)(struct rdma_event_channel *ch);
    int (*get_cm_event)(struct rdma_event_channel *ch,
                        struct rdma_cm_event **ev);
    int (*ack_cm_event)(struct rdma_cm_event *ev);
    int (*create_id)(struct rdma_event_channel *ch, struct rdma_cm_id **id,
                     void *context, enum rdma_port_space ps);
    int (*destroy_id)(struct rdma_cm_id *id);
    int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
    int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src,
                        struct sockaddr *dst, int timeout_ms);
    int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
    int (*listen)(struct rdma_cm_id *id, int backlog);
    int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *p);
    int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *p);
    int (*reject)(struct rdma_cm_id *id, const void *data, uint8_t len);
    int (*establish)(struct rdma_cm_id *id);
    int (*disconnect)(struct rdma_cm_id *id);
    int (*init_qp_attr)(struct rdma_cm_id *id, struct ibv_qp_attr *attr,
                        int *mask);
    int (*join_multicast)(struct rdma_cm_id *id, struct sockaddr *addr,
                          void *context);
    int (*leave_multicast)(struct rdma_cm_id *id, struct sockaddr *addr);
} R;

static const struct pyrdma_dllib librdmacm = {
    .setting = PYRDMA_SET_RDMACM_LIBRARY,
    .package = "librdmacm1 (rdma-core)",
    .name = "librdmacm",
    .too_old = "rdma-core too old? rdma_establish needs v29",
};

#define SYM(field, name) {name, (void **)&R.field, 0}
static const struct pyrdma_dlsym rdmacm_syms[] = {
    SYM(create_event_channel, "rdma_create_event_channel"),
    SYM(destroy_event_channel, "rdma_destroy_event_channel"),
    SYM(get_cm_event, "rdma_get_cm_event"),
    SYM(ack_cm_event, "rdma_ack_cm_event"),
    SYM(create_id, "rdma_create_id"),
    SYM(destroy_id, "rdma_destroy_id"),
    SYM(bind_addr, "rdma_bind_addr"),
    SYM(resolve_addr, "rdma_resolve_addr"),
    SYM(resolve_route, "rdma_resolve_route"),
    SYM(listen, "rdma_listen"),
    SYM(connect, "rdma_connect"),
    SYM(accept, "rdma_accept"),
    SYM(reject, "rdma_reject"),
    SYM(establish, "rdma_establish"),
    SYM(disconnect, "rdma_disconnect"),
    SYM(init_qp_attr, "rdma_init_qp_attr"),
    SYM(join_multicast, "rdma_join_multicast"),
    SYM(leave_multicast, "rdma_leave_multicast"),
    {NULL, NULL, 0},
};
#undef SYM

/* A librdmacm call returned -1 with errno set: fill *st naming it. */
static int
cm_fail(struct pyrdma_status *st, const char *func)
{
    return pyrdma_fail(st, errno ? errno : EIO, func, "");
}

/* Load librdmacm (and libibverbs, whose ah/qp structs it fills). */
static int
cm_load(struct pyrdma_status *st)
{
    if (R.dl != NULL)
        return 0;
    if (load(st) < 0)
        return -1;
    R.dl = pyrdma_dlopen(&librdmacm, rdmacm_syms, st);
    return R.dl != NULL ? 0 : -1;
}

static int
cm_create_channel(void **ch, int *fd, struct pyrdma_status *st)
{
    struct rdma_event_channel *c;
    int flags;

    if (cm_load(st) < 0)
        return -1;
    errno = 0;
    c = R.create_event_channel();
    if (c == NULL)
        return cm_fail(st, "rdma_create_event_channel");
    /* Non-blocking: the object model waits on the fd itself. */
    flags = fcntl(c->fd, F_GETFL);
    if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        int err = errno;
        R.destroy_event_channel(c);
        return pyrdma_fail(st, err, "fcntl", "O_NONBLOCK on the CM channel");
    }
    *ch = c;
    *fd = c->fd;
    return 0;
}

static int
cm_destroy_channel(void *ch, struct pyrdma_status *st)
{
    (void)st;
    R.destroy_event_channel(ch);
    return 0;
}

/* Copy the parameters of event e (of an ID of port space ps) into *p. */
static void
cm_param_from_event(struct pyrdma_cm_param *p, const struct rdma_cm_event *e,
                    int ud)
{
    const void *data;
    uint8_t len;

    memset(p, 0, sizeof(*p));
    if (ud) {
        data = e->param.ud.private_data;
        len = e->param.ud.private_data_len;
        p->qp_num = e->param.ud.qp_num;
        p->qkey = e->param.ud.qkey;
        ah_from_ibv(&p->ah_attr, &e->param.ud.ah_attr);
        p->has_ah = e->event == RDMA_CM_EVENT_ESTABLISHED ||
                    e->event == RDMA_CM_EVENT_MULTICAST_JOIN;
    }
    else {
        data = e->param.conn.private_data;
        len = e->param.conn.private_data_len;
        p->responder_resources = e->param.conn.responder_resources;
        p->initiator_depth = e->param.conn.initiator_depth;
        p->flow_control = e->param.conn.flow_control;
        p->retry_count = e->param.conn.retry_count;
        p->rnr_retry_count = e->param.conn.rnr_retry_count;
        p->srq = e->param.conn.srq;
        p->qp_num = e->param.conn.qp_num;
    }
    if (data != NULL && len > 0) {
        memcpy(p->private_data, data, len);
        p->private_data_len = len;
    }
}

static int
cm_get_event(void *ch, struct pyrdma_cm_event *ev, struct pyrdma_status *st)
{
    struct rdma_cm_event *e;
    struct rdma_cm_id *id;

    errno = 0;
    if (R.get_cm_event(ch, &e) < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return cm_fail(st, "rdma_get_cm_event");
    }
    id = e->id;
    ev->event = e->event;
    ev->status = e->status;
    ev->id = id;
    ev->listen_id = e->listen_id;
    cm_param_from_event(&ev->param, e,
                        id->ps == RDMA_PS_UDP || id->ps == RDMA_PS_IPOIB);
    if (R.ack_cm_event(e) < 0)
        return cm_fail(st, "rdma_ack_cm_event");
    return 1;
}

static int
cm_create_id(void *ch, int ps, void **id, struct pyrdma_status *st)
{
    struct rdma_cm_id *i = NULL;

    errno = 0;
    if (R.create_id(ch, &i, NULL, (enum rdma_port_space)ps) < 0)
        return cm_fail(st, "rdma_create_id");
    *id = i;
    return 0;
}

static int
cm_destroy_id(void *id, struct pyrdma_status *st)
{
    errno = 0;
    return R.destroy_id(id) < 0 ? cm_fail(st, "rdma_destroy_id") : 0;
}

static int
cm_bind_addr(void *id, const struct sockaddr *addr, struct pyrdma_status *st)
{
    errno = 0;
    if (R.bind_addr(id, (struct sockaddr *)addr) < 0)
        return cm_fail(st, "rdma_bind_addr");
    return 0;
}

static int
cm_resolve_addr(void *id, const struct sockaddr *src,
                const struct sockaddr *dst, int timeout_ms,
                struct pyrdma_status *st)
{
    errno = 0;
    if (R.resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst,
                       timeout_ms) < 0)
        return cm_fail(st, "rdma_resolve_addr");
    return 0;
}

static int
cm_resolve_route(void *id, int timeout_ms, struct pyrdma_status *st)
{
    errno = 0;
    if (R.resolve_route(id, timeout_ms) < 0)
        return cm_fail(st, "rdma_resolve_route");
    return 0;
}

static int
cm_listen(void *id, int backlog, struct pyrdma_status *st)
{
    errno = 0;
    return R.listen(id, backlog) < 0 ? cm_fail(st, "rdma_listen") : 0;
}

/* Fill librdmacm's conn param from ours (private data pointed at p's). */
static void
cm_param_to_rdmacm(struct rdma_conn_param *c, const struct pyrdma_cm_param *p)
{
    memset(c, 0, sizeof(*c));
    c->private_data = p->private_data_len ? p->private_data : NULL;
    c->private_data_len = p->private_data_len;
    c->responder_resources = p->responder_resources;
    c->initiator_depth = p->initiator_depth;
    c->flow_control = p->flow_control;
    c->retry_count = p->retry_count;
    c->rnr_retry_count = p->rnr_retry_count;
    c->srq = p->srq;
    c->qp_num = p->qp_num;
}

static int
cm_connect(void *id, const struct pyrdma_cm_param *p, struct pyrdma_status *st)
{
    struct rdma_conn_param c;

    cm_param_to_rdmacm(&c, p);
    errno = 0;
    return R.connect(id, &c) < 0 ? cm_fail(st, "rdma_connect") : 0;
}

static int
cm_accept(void *id, const struct pyrdma_cm_param *p, struct pyrdma_status *st)
{
    struct rdma_conn_param c;

    cm_param_to_rdmacm(&c, p);
    errno = 0;
    return R.accept(id, &c) < 0 ? cm_fail(st, "rdma_accept") : 0;
}

static int
cm_reject(void *id, const void *data, uint8_t len, struct pyrdma_status *st)
{
    errno = 0;
    return R.reject(id, len ? data : NULL, len) < 0 ?
        cm_fail(st, "rdma_reject") : 0;
}

static int
cm_establish(void *id, struct pyrdma_status *st)
{
    errno = 0;
    return R.establish(id) < 0 ? cm_fail(st, "rdma_establish") : 0;
}

static int
cm_disconnect(void *id, struct pyrdma_status *st)
{
    errno = 0;
    return R.disconnect(id) < 0 ? cm_fail(st, "rdma_disconnect") : 0;
}

static int
cm_init_qp_attr(void *id, struct pyrdma_qp_attr *attr, int *mask,
                struct pyrdma_status *st)
{
    struct ibv_qp_attr ia;

    memset(&ia, 0, sizeof(ia));
    ia.qp_state = attr->qp_state;
    errno = 0;
    if (R.init_qp_attr(id, &ia, mask) < 0)
        return cm_fail(st, "rdma_init_qp_attr");
    qp_attr_from_ibv(attr, &ia);
    return 0;
}

/* Copy the primary path record of a resolved route. */
static void
cm_path_from_rec(struct pyrdma_cm_path *d, const struct ibv_sa_path_rec *r)
{
    memcpy(d->dgid, r->dgid.raw, 16);
    memcpy(d->sgid, r->sgid.raw, 16);
    d->dlid = be16toh(r->dlid);
    d->slid = be16toh(r->slid);
    d->pkey = be16toh(r->pkey);
    d->flow_label = be32toh(r->flow_label);
    d->hop_limit = r->hop_limit;
    d->traffic_class = r->traffic_class;
    d->sl = r->sl;
    d->mtu = r->mtu;
    d->rate = r->rate;
    d->packet_life_time = r->packet_life_time;
}

static int
cm_query(void *vid, struct pyrdma_cm_info *info, struct pyrdma_status *st)
{
    const struct rdma_cm_id *id = vid;
    const struct rdma_addr *a = &id->route.addr;

    (void)st;
    memset(info, 0, sizeof(*info));
    if (id->verbs != NULL)
        snprintf(info->device, sizeof(info->device), "%s",
                 id->verbs->device->name);
    info->port_num = id->port_num;
    info->ps = id->ps;
    memcpy(&info->src, &a->src_storage, sizeof(info->src));
    memcpy(&info->dst, &a->dst_storage, sizeof(info->dst));
    memcpy(info->sgid, a->addr.ibaddr.sgid.raw, 16);
    memcpy(info->dgid, a->addr.ibaddr.dgid.raw, 16);
    info->pkey = be16toh(a->addr.ibaddr.pkey);
    info->num_paths = id->route.num_paths;
    if (id->route.num_paths > 0 && id->route.path_rec != NULL)
        cm_path_from_rec(&info->path, id->route.path_rec);
    return 0;
}

static int
cm_join_multicast(void *id, const struct sockaddr *addr,
                  struct pyrdma_status *st)
{
    errno = 0;
    if (R.join_multicast(id, (struct sockaddr *)addr, NULL) < 0)
        return cm_fail(st, "rdma_join_multicast");
    return 0;
}

static int
cm_leave_multicast(void *id, const struct sockaddr *addr,
                   struct pyrdma_status *st)
{
    errno = 0;
    if (R.leave_multicast(id, (struct sockaddr *)addr) < 0)
        return cm_fail(st, "rdma_leave_multicast");
    return 0;
}

const struct pyrdma_provider pyrdma_provider_verbs = {
    .name = "verbs",
    .library = "libibverbs.so.1",
    .package = "libibverbs1",
    .load = load,
    .get_devices = get_devices,
    .open_device = open_device,
    .close_device = close_device,
    .query_device = query_device,
    .query_port = query_port,
    .query_gid = query_gid,
    .query_pkey = query_pkey,
    .async_fd = async_fd,
    .get_async_event = get_async_event,
    .alloc_pd = alloc_pd,
    .dealloc_pd = dealloc_pd,
    .reg_mr = reg_mr,
    .dereg_mr = dereg_mr,
    .rereg_mr = rereg_mr,
    .alloc_mw = alloc_mw,
    .dealloc_mw = dealloc_mw,
    .bind_mw = bind_mw,
    .mw_rekeyed = mw_rekeyed,
    .create_comp_channel = create_comp_channel,
    .destroy_comp_channel = destroy_comp_channel,
    .get_cq_event = get_cq_event,
    .ack_cq_events = ack_cq_events,
    .create_cq = create_cq,
    .destroy_cq = destroy_cq,
    .resize_cq = resize_cq,
    .req_notify_cq = req_notify_cq,
    .poll_cq = poll_cq,
    .create_srq = create_srq,
    .modify_srq = modify_srq,
    .query_srq = query_srq,
    .destroy_srq = destroy_srq,
    .post_srq_recv = post_srq_recv,
    .create_qp = create_qp,
    .modify_qp = modify_qp,
    .query_qp = query_qp,
    .destroy_qp = destroy_qp,
    .post_send = post_send,
    .post_recv = post_recv,
    .attach_mcast = attach_mcast,
    .detach_mcast = detach_mcast,
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
