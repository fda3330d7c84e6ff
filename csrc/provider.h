/* provider.h - the ops table between the object model and a provider. */
#ifndef PYRDMA_PROVIDER_H
#define PYRDMA_PROVIDER_H

/*
 * The object model (context.c, module.c, ...) calls a provider only through
 * struct pyrdma_provider.  This header includes no provider header and no
 * Python header: providers never touch Python objects, and the object model
 * never sees a provider's types.  Handles are opaque pointers owned by the
 * provider.
 *
 * Conventions:
 *  - control-path ops take a struct pyrdma_status * and return 0 on success
 *    or -1 with the status filled (errno, failing C function, message);
 *  - an op a provider lacks is NULL; the object model raises
 *    SysError(EOPNOTSUPP) naming the verb.
 * Keep the ops sorted by object, in the order the verbs appear in
 * <infiniband/verbs.h>.
 */

#include <stddef.h>
#include <stdint.h>

/* Why a control-path op failed. */
struct pyrdma_status {
    int err;               /* errno value (positive) */
    const char *func;      /* the C function that failed, e.g. "ibv_open_device" */
    char msg[256];         /* extra detail, may be empty */
};

/* Fill *st and return -1 (for "return pyrdma_fail(st, ...)"). */
int pyrdma_fail(struct pyrdma_status *st, int err, const char *func,
                const char *fmt, ...);

/* One device as listed by a provider. */
struct pyrdma_devinfo {
    char name[64];          /* kernel/provider name, e.g. "rxe0" */
    uint64_t node_guid;     /* host byte order */
    int node_type;          /* IBV_NODE_* value */
    int transport_type;     /* IBV_TRANSPORT_* value */
};

/* A GID table entry. */
struct pyrdma_gid_entry {
    uint8_t gid[16];        /* network byte order, as on the wire */
    uint32_t gid_index;     /* index in the port's table */
    uint32_t gid_type;      /* IBV_GID_TYPE_* value (IB, RoCE v1, RoCE v2) */
    uint32_t ndev_ifindex;  /* netdev index for RoCE, 0 otherwise */
};

/* Device attributes; the fields of ibv_device_attr, in host byte order. */
struct pyrdma_device_attr {
    char fw_ver[64];                 /* firmware version string */
    uint64_t node_guid;              /* node GUID */
    uint64_t sys_image_guid;         /* system image GUID */
    uint64_t max_mr_size;            /* largest contiguous block to register */
    uint64_t page_size_cap;          /* supported page sizes (bit mask) */
    uint32_t vendor_id;              /* IEEE OUI */
    uint32_t vendor_part_id;         /* vendor's part id */
    uint32_t hw_ver;                 /* hardware version */
    int32_t max_qp;                  /* maximum number of QPs */
    int32_t max_qp_wr;               /* maximum outstanding WRs per queue */
    uint32_t device_cap_flags;       /* IBV_DEVICE_* capability flags */
    int32_t max_sge;                 /* maximum s/g entries per WR (non-RD) */
    int32_t max_sge_rd;              /* maximum s/g entries per RD WR */
    int32_t max_cq;                  /* maximum number of CQs */
    int32_t max_cqe;                 /* maximum entries per CQ */
    int32_t max_mr;                  /* maximum number of MRs */
    int32_t max_pd;                  /* maximum number of PDs */
    int32_t max_qp_rd_atom;          /* max outstanding RDMA read/atomic as target */
    int32_t max_ee_rd_atom;          /* same, per EE context */
    int32_t max_res_rd_atom;         /* responder resources for all QPs */
    int32_t max_qp_init_rd_atom;     /* max outstanding RDMA read/atomic as initiator */
    int32_t max_ee_init_rd_atom;     /* same, per EE context */
    int32_t atomic_cap;              /* IBV_ATOMIC_* */
    int32_t max_ee;                  /* maximum EE contexts */
    int32_t max_rdd;                 /* maximum RD domains */
    int32_t max_mw;                  /* maximum memory windows */
    int32_t max_raw_ipv6_qp;         /* maximum raw IPv6 datagram QPs */
    int32_t max_raw_ethy_qp;         /* maximum raw ethertype QPs */
    int32_t max_mcast_grp;           /* maximum multicast groups */
    int32_t max_mcast_qp_attach;     /* maximum QPs per multicast group */
    int32_t max_total_mcast_qp_attach; /* maximum QP attachments in total */
    int32_t max_ah;                  /* maximum address handles */
    int32_t max_fmr;                 /* maximum FMRs */
    int32_t max_map_per_fmr;         /* maximum remaps per FMR */
    int32_t max_srq;                 /* maximum SRQs */
    int32_t max_srq_wr;              /* maximum WRs per SRQ */
    int32_t max_srq_sge;             /* maximum s/g entries per SRQ WR */
    uint16_t max_pkeys;              /* P_Key table size */
    uint8_t local_ca_ack_delay;      /* local CA ack delay */
    uint8_t phys_port_cnt;           /* number of physical ports */
};

/* Port attributes; the fields of ibv_port_attr. */
struct pyrdma_port_attr {
    int32_t state;             /* IBV_PORT_* logical state */
    int32_t max_mtu;           /* IBV_MTU_* */
    int32_t active_mtu;        /* IBV_MTU_* */
    int32_t gid_tbl_len;       /* GID table length */
    uint32_t port_cap_flags;   /* IBV_PORT_*_SUP capability mask */
    uint32_t max_msg_sz;       /* maximum message size */
    uint32_t bad_pkey_cntr;    /* bad P_Key counter */
    uint32_t qkey_viol_cntr;   /* Q_Key violation counter */
    uint16_t pkey_tbl_len;     /* P_Key table length */
    uint16_t lid;              /* base LID */
    uint16_t sm_lid;           /* subnet manager LID */
    uint8_t lmc;               /* LID mask control */
    uint8_t max_vl_num;        /* maximum number of VLs */
    uint8_t sm_sl;             /* SL to reach the subnet manager */
    uint8_t subnet_timeout;    /* subnet propagation delay */
    uint8_t init_type_reply;   /* InitTypeReply from the SM */
    uint8_t active_width;      /* IBV_WIDTH_* style encoding */
    uint8_t active_speed;      /* IB speed encoding */
    uint8_t phys_state;        /* physical port state */
    uint8_t link_layer;        /* IBV_LINK_LAYER_* */
    uint8_t flags;             /* IBV_QPF_* port flags */
    uint16_t port_cap_flags2;  /* IBV_PORT_*2 capability mask */
};

/* The ops of one provider. */
struct pyrdma_provider {
    const char *name;       /* "verbs", "ucx" */
    const char *library;    /* what it loads, for messages ("libibverbs.so.1") */
    const char *package;    /* Debian package that ships it ("libibverbs1") */

    /* Load the provider's libraries once.  Return 0 or -1 with *st set. */
    int (*load)(struct pyrdma_status *st);
    /* List devices into a malloc'd array (*out, *n); caller frees. */
    int (*get_devices)(struct pyrdma_devinfo **out, int *n,
                       struct pyrdma_status *st);

    /* Context. */
    int (*open_device)(const char *name, void **ctx, struct pyrdma_status *st);
    int (*close_device)(void *ctx, struct pyrdma_status *st);
    int (*query_device)(void *ctx, struct pyrdma_device_attr *attr,
                        struct pyrdma_status *st);
    int (*query_port)(void *ctx, uint8_t port, struct pyrdma_port_attr *attr,
                      struct pyrdma_status *st);
    int (*query_gid)(void *ctx, uint8_t port, int index,
                     struct pyrdma_gid_entry *entry, struct pyrdma_status *st);
    int (*query_pkey)(void *ctx, uint8_t port, int index, uint16_t *pkey,
                      struct pyrdma_status *st);
};

/* The providers compiled in. */
extern const struct pyrdma_provider pyrdma_provider_verbs;

#endif /* PYRDMA_PROVIDER_H */
