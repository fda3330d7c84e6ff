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
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

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
} V;

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
    V.loaded = 1;
    return 0;
}

#else /* dlopen */

/* Resolve one symbol; return 0, or -1 with *st set when it is required. */
static int
sym(void **slot, const char *name, int required, struct pyrdma_status *st)
{
    *slot = dlsym(V.dl, name);
    if (*slot == NULL && required)
        return pyrdma_fail(st, ENOSYS, "dlsym",
                           "%s has no symbol %s (rdma-core too old?)",
                           "libibverbs", name);
    return 0;
}

/* Load libibverbs (or $RDMA_IBVERBS_LIBRARY); return 0 or -1 with *st set. */
static int
load(struct pyrdma_status *st)
{
    const char *lib;

    if (V.loaded)
        return 0;
    lib = getenv("RDMA_IBVERBS_LIBRARY");
    if (lib == NULL || lib[0] == '\0')
        lib = "libibverbs.so.1";
    if (V.dl == NULL) {
        V.dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (V.dl == NULL) {
            const char *why = dlerror();
            return pyrdma_fail(st, ENOENT, "dlopen",
                               "cannot load %s (%s); install the Debian "
                               "package libibverbs1 (rdma-core)",
                               lib, why ? why : "unknown error");
        }
    }
#define REQ(field, name) \
    if (sym((void **)&V.field, name, 1, st)) \
        goto fail
    REQ(get_device_list, "ibv_get_device_list");
    REQ(free_device_list, "ibv_free_device_list");
    REQ(get_device_name, "ibv_get_device_name");
    REQ(get_device_guid, "ibv_get_device_guid");
    REQ(open_device, "ibv_open_device");
    REQ(close_device, "ibv_close_device");
    REQ(query_device, "ibv_query_device");
    REQ(query_port, "ibv_query_port");
    REQ(query_gid, "ibv_query_gid");
    REQ(query_pkey, "ibv_query_pkey");
#undef REQ
    sym((void **)&V.query_gid_ex, "_ibv_query_gid_ex", 0, st);
    V.loaded = 1;
    return 0;
fail:
    dlclose(V.dl);
    V.dl = NULL;
    return -1;
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
};
