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
 *  - an optional op a provider lacks is NULL (those pyrdma_provider_fill
 *    knows: queries, async events, object creation, memory windows,
 *    resize_cq); the object model calls the tables pyrdma_provider_fill
 *    made, where each such op is a stub failing with EOPNOTSUPP naming
 *    the verb, so it never checks an op for NULL.  Exceptions: async_fd
 *    (no status to fail with: checked where it is used) and
 *    alloc_mr_mem/free_mr_mem (NULL means the object model maps the
 *    memory itself).
 * Keep the ops sorted by object, in the order the verbs appear in
 * <infiniband/verbs.h>.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Why a control-path op failed. */
struct pyrdma_status {
    int err;               /* errno value (positive) */
    const char *func;      /* the C function that failed, e.g. "ibv_open_device" */
    char msg[512];         /* extra detail, may be empty */
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


/* The hot-path structs (pyrdma_sge, pyrdma_send_wr, pyrdma_recv_wr,
   pyrdma_wc) are public: they live in rdma/include/pyrdma.h, the header of
   the C API for Cython and C users. */
#include "pyrdma.h"

/* ---- Control-path structs: provider neutral, converted by providers. ---- */

/* Global route (struct ibv_global_route). */
struct pyrdma_global_route {
    uint8_t dgid[16];        /* destination GID, network order */
    uint32_t flow_label;     /* IPv6 flow label */
    uint8_t sgid_index;      /* index of the source GID */
    uint8_t hop_limit;       /* hop limit */
    uint8_t traffic_class;   /* traffic class */
};

/* Address vector (struct ibv_ah_attr). */
struct pyrdma_ah_attr {
    struct pyrdma_global_route grh; /* used when is_global */
    uint16_t dlid;           /* destination LID */
    uint8_t sl;              /* service level */
    uint8_t src_path_bits;   /* source path bits */
    uint8_t static_rate;     /* IBV_RATE_* */
    uint8_t is_global;       /* 1: a GRH is used */
    uint8_t port_num;        /* local port */
};

/* QP capacities (struct ibv_qp_cap). */
struct pyrdma_qp_cap {
    uint32_t max_send_wr;     /* send queue depth */
    uint32_t max_recv_wr;     /* receive queue depth */
    uint32_t max_send_sge;    /* s/g entries per send WR */
    uint32_t max_recv_sge;    /* s/g entries per receive WR */
    uint32_t max_inline_data; /* bytes of inline data */
};

/* QP attributes (struct ibv_qp_attr); which are valid says a PYRDMA_QP_*
 * mask (the IBV_QP_* bit values). */
struct pyrdma_qp_attr {
    int32_t qp_state;            /* IBV_QPS_* */
    int32_t cur_qp_state;        /* IBV_QPS_* */
    int32_t path_mtu;            /* IBV_MTU_* */
    int32_t path_mig_state;      /* IBV_MIG_* */
    uint32_t qkey;               /* Q_Key (UD) */
    uint32_t rq_psn;             /* receive PSN */
    uint32_t sq_psn;             /* send PSN */
    uint32_t dest_qp_num;        /* remote QP number */
    uint32_t qp_access_flags;    /* IBV_ACCESS_* for remote access */
    struct pyrdma_qp_cap cap;    /* capacities */
    struct pyrdma_ah_attr ah_attr;     /* primary path */
    struct pyrdma_ah_attr alt_ah_attr; /* alternate path */
    uint16_t pkey_index;         /* P_Key index */
    uint16_t alt_pkey_index;     /* alternate P_Key index */
    uint8_t en_sqd_async_notify; /* notify when SQ drained */
    uint8_t sq_draining;         /* SQ is draining (query) */
    uint8_t max_rd_atomic;       /* outstanding RDMA read/atomic as initiator */
    uint8_t max_dest_rd_atomic;  /* responder resources */
    uint8_t min_rnr_timer;       /* RNR NAK timer encoding */
    uint8_t port_num;            /* local port */
    uint8_t timeout;             /* local ack timeout encoding */
    uint8_t retry_cnt;           /* transport retries */
    uint8_t rnr_retry;           /* RNR retries (7: infinite) */
    uint8_t alt_port_num;        /* alternate port */
    uint8_t alt_timeout;         /* alternate ack timeout */
    uint32_t rate_limit;         /* kbps, 0: unlimited */
};

/* The IBV_QP_* attribute mask bits (the ABI values). */
enum {
    PYRDMA_QP_STATE = 1 << 0, PYRDMA_QP_CUR_STATE = 1 << 1,
    PYRDMA_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2, PYRDMA_QP_ACCESS_FLAGS = 1 << 3,
    PYRDMA_QP_PKEY_INDEX = 1 << 4, PYRDMA_QP_PORT = 1 << 5,
    PYRDMA_QP_QKEY = 1 << 6, PYRDMA_QP_AV = 1 << 7,
    PYRDMA_QP_PATH_MTU = 1 << 8, PYRDMA_QP_TIMEOUT = 1 << 9,
    PYRDMA_QP_RETRY_CNT = 1 << 10, PYRDMA_QP_RNR_RETRY = 1 << 11,
    PYRDMA_QP_RQ_PSN = 1 << 12, PYRDMA_QP_MAX_QP_RD_ATOMIC = 1 << 13,
    PYRDMA_QP_ALT_PATH = 1 << 14, PYRDMA_QP_MIN_RNR_TIMER = 1 << 15,
    PYRDMA_QP_SQ_PSN = 1 << 16, PYRDMA_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
    PYRDMA_QP_PATH_MIG_STATE = 1 << 18, PYRDMA_QP_CAP = 1 << 19,
    PYRDMA_QP_DEST_QPN = 1 << 20, PYRDMA_QP_RATE_LIMIT = 1 << 25,
};

/* QP creation attributes (struct ibv_qp_init_attr, handles resolved). */
struct pyrdma_qp_init_attr {
    void *send_cq;           /* provider CQ handle */
    void *recv_cq;           /* provider CQ handle */
    void *srq;               /* provider SRQ handle or NULL */
    void *qp_context;        /* returned in async events */
    struct pyrdma_qp_cap cap; /* requested; the provider writes the actual */
    int32_t qp_type;         /* IBV_QPT_* */
    int32_t sq_sig_all;      /* 1: every send WR is signaled */
};

/* SRQ attributes (struct ibv_srq_attr); mask bits PYRDMA_SRQ_*. */
struct pyrdma_srq_attr {
    uint32_t max_wr;         /* depth */
    uint32_t max_sge;        /* s/g entries per WR */
    uint32_t srq_limit;      /* low watermark for IBV_EVENT_SRQ_LIMIT_REACHED */
};
enum { PYRDMA_SRQ_MAX_WR = 1 << 0, PYRDMA_SRQ_LIMIT = 1 << 1 };
/* ibv_rereg_mr's flags (IBV_REREG_MR_CHANGE_*) */
enum {
    PYRDMA_REREG_TRANSLATION = 1 << 0, PYRDMA_REREG_PD = 1 << 1,
    PYRDMA_REREG_ACCESS = 1 << 2, PYRDMA_REREG_ALL = 7,
};

/* What the element of an async event is. */
enum { PYRDMA_EV_NONE, PYRDMA_EV_QP, PYRDMA_EV_CQ, PYRDMA_EV_SRQ,
       PYRDMA_EV_PORT };

/* An asynchronous event, already acknowledged by the provider. */
struct pyrdma_async_event {
    int32_t event_type;      /* IBV_EVENT_* */
    int32_t element_kind;    /* PYRDMA_EV_* */
    int32_t port_num;        /* for port events */
    void *element;           /* the qp/cq/srq context pointer, or NULL */
};

/* What a registered MR is (keys and where it is). */
struct pyrdma_mr_info {
    uint32_t lkey;           /* local key */
    uint32_t rkey;           /* remote key */
};

/* Opcodes and QP types the object model looks at (the ABI values). */
enum {
    PYRDMA_WR_RDMA_WRITE = 0, PYRDMA_WR_RDMA_WRITE_WITH_IMM = 1,
    PYRDMA_WR_SEND = 2, PYRDMA_WR_SEND_WITH_IMM = 3, PYRDMA_WR_RDMA_READ = 4,
    PYRDMA_WR_ATOMIC_CMP_AND_SWP = 5, PYRDMA_WR_ATOMIC_FETCH_AND_ADD = 6,
    PYRDMA_WR_LOCAL_INV = 7, PYRDMA_WR_BIND_MW = 8, PYRDMA_WR_SEND_WITH_INV = 9,
};
enum { PYRDMA_QPT_RC = 2, PYRDMA_QPT_UC = 3, PYRDMA_QPT_UD = 4 };
enum {
    PYRDMA_ACCESS_LOCAL_WRITE = 1, PYRDMA_ACCESS_REMOTE_WRITE = 2,
    PYRDMA_ACCESS_REMOTE_READ = 4, PYRDMA_ACCESS_REMOTE_ATOMIC = 8,
    PYRDMA_ACCESS_MW_BIND = 16,
};
enum { PYRDMA_SEND_SIGNALED = 2 };

/* ---- Connection manager structs (librdmacm's model, provider neutral) ---- */

/* Port spaces (enum rdma_port_space values). */
enum { PYRDMA_PS_IPOIB = 0x0002, PYRDMA_PS_IB = 0x013F,
       PYRDMA_PS_TCP = 0x0106, PYRDMA_PS_UDP = 0x0111 };

/* The event the object model looks at (enum rdma_cm_event_type value). */
enum { PYRDMA_CM_EVENT_CONNECT_REQUEST = 4 };

/* The most private data a CM message carries (the field is a uint8_t). */
#define PYRDMA_CM_PRIVATE_MAX 255

/* Connection parameters of connect/accept/establish and of events
   (struct rdma_conn_param and struct rdma_ud_param in one). */
struct pyrdma_cm_param {
    uint8_t private_data[PYRDMA_CM_PRIVATE_MAX + 1]; /* copied, not pointed */
    uint8_t private_data_len;    /* bytes of private_data used */
    uint8_t responder_resources; /* RDMA reads/atomics we accept */
    uint8_t initiator_depth;     /* RDMA reads/atomics we issue */
    uint8_t flow_control;        /* 1: the QP does end-to-end flow control */
    uint8_t retry_count;         /* transport retries (connect only) */
    uint8_t rnr_retry_count;     /* RNR retries (7: infinite) */
    uint8_t srq;                 /* 1: the QP receives from an SRQ */
    uint8_t has_ah;              /* UD events: ah_attr is valid */
    uint32_t qp_num;             /* the caller's QP (requests: the peer's) */
    uint32_t qkey;               /* UD: the peer's Q_Key */
    struct pyrdma_ah_attr ah_attr; /* UD events: how to reach the peer */
};

/* A CM event, already acknowledged by the provider (its private data is
   copied into param). */
struct pyrdma_cm_event {
    int32_t event;               /* RDMA_CM_EVENT_* */
    int32_t status;              /* 0, or a negative errno or a CM reason */
    void *id;                    /* the ID; CONNECT_REQUEST: a new one */
    void *listen_id;             /* CONNECT_REQUEST: the listening ID */
    struct pyrdma_cm_param param; /* connection or UD parameters */
};

/* One path record of a resolved route (struct ibv_sa_path_rec). */
struct pyrdma_cm_path {
    uint8_t dgid[16];            /* network order */
    uint8_t sgid[16];            /* network order */
    uint16_t dlid;               /* host order */
    uint16_t slid;               /* host order */
    uint16_t pkey;               /* host order */
    uint32_t flow_label;         /* host order */
    uint8_t hop_limit;           /* GRH hop limit */
    uint8_t traffic_class;       /* GRH traffic class */
    uint8_t sl;                  /* service level */
    uint8_t mtu;                 /* IBV_MTU_* */
    uint8_t rate;                /* IBV_RATE_* */
    uint8_t packet_life_time;    /* 4.096us * 2^x */
};

/* What an ID is bound to and where it goes (rdma_cm_id's public fields). */
struct pyrdma_cm_info {
    char device[64];             /* device the ID is bound to, "" if none */
    uint8_t port_num;            /* its port, 0 if none */
    int32_t ps;                  /* PYRDMA_PS_* */
    int32_t num_paths;           /* path records of the route (0..1 used) */
    struct sockaddr_storage src; /* source address (AF_UNSPEC if none) */
    struct sockaddr_storage dst; /* destination address */
    uint8_t sgid[16];            /* the source GID, after resolve_addr */
    uint8_t dgid[16];            /* the destination GID */
    uint16_t pkey;               /* host order */
    struct pyrdma_cm_path path;  /* the primary path, if num_paths > 0 */
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
    /* Async events: a pollable fd, and read one (non-blocking, acked);
       return 1 if one was read, 0 if none is pending, -1 on error. */
    int (*async_fd)(void *ctx);
    int (*get_async_event)(void *ctx, struct pyrdma_async_event *ev,
                           struct pyrdma_status *st);

    /* Protection domain. */
    int (*alloc_pd)(void *ctx, void **pd, struct pyrdma_status *st);
    int (*dealloc_pd)(void *pd, struct pyrdma_status *st);

    /* Memory regions and windows. */
    int (*reg_mr)(void *pd, void *addr, size_t length, unsigned int access,
                  void **mr, struct pyrdma_mr_info *info,
                  struct pyrdma_status *st);
    int (*dereg_mr)(void *mr, struct pyrdma_status *st);
    /* Re-register (ibv_rereg_mr): flags IBV_REREG_MR_CHANGE_*; pd, addr
       and length, access only where flags name them.  The new keys in
       *info.  On an error the MR is as it was. */
    int (*rereg_mr)(void *mr, int flags, void *pd, void *addr, size_t length,
                    unsigned int access, struct pyrdma_mr_info *info,
                    struct pyrdma_status *st);
    /* Memory for PD.alloc_mr (optional; NULL: the object model mmaps it):
       length bytes, page aligned and zeroed, at *mem.  free_mr_mem(cookie)
       releases it once no MR and no buffer view uses it any more. */
    int (*alloc_mr_mem)(void *pd, size_t length, void **mem, void **cookie,
                        struct pyrdma_status *st);
    void (*free_mr_mem)(void *cookie);
    int (*alloc_mw)(void *pd, int type, void **mw, uint32_t *rkey,
                    struct pyrdma_status *st);
    int (*dealloc_mw)(void *mw, struct pyrdma_status *st);
    /* Bind a type 1 window (ibv_bind_mw); *rkey gets its new rkey.  NULL
       when the provider has no memory windows. */
    int (*bind_mw)(void *qp, void *mw, uint64_t wr_id, unsigned int flags,
                   const struct pyrdma_mw_bind_info *bi, uint32_t *rkey,
                   struct pyrdma_status *st);
    /* A type 2 window was bound to rkey by a posted IBV_WR_BIND_MW: the
       provider's MW object takes that rkey (the next bind names it). */
    void (*mw_rekeyed)(void *mw, uint32_t rkey);

    /* Completion channel: a pollable fd; get_cq_event is non-blocking and
       returns 1 with *cq_context set, 0 if none is pending, -1 on error. */
    int (*create_comp_channel)(void *ctx, void **cc, int *fd,
                               struct pyrdma_status *st);
    int (*destroy_comp_channel)(void *cc, struct pyrdma_status *st);
    int (*get_cq_event)(void *cc, void **cq_context, struct pyrdma_status *st);
    void (*ack_cq_events)(void *cq, unsigned int n);

    /* Completion queue. */
    int (*create_cq)(void *ctx, int cqe, void *cq_context, void *cc,
                     int comp_vector, void **cq, int *actual_cqe,
                     struct pyrdma_status *st);
    int (*destroy_cq)(void *cq, struct pyrdma_status *st);
    int (*resize_cq)(void *cq, int cqe, int *actual_cqe,
                     struct pyrdma_status *st);
    /* Return 0 or a positive errno. */
    int (*req_notify_cq)(void *cq, int solicited_only);
    /* Return the number of completions written to wc (0..n) or -errno. */
    int (*poll_cq)(void *cq, int n, struct pyrdma_wc *wc);

    /* Shared receive queue. */
    int (*create_srq)(void *pd, struct pyrdma_srq_attr *attr, void *srq_context,
                      void **srq, struct pyrdma_status *st);
    int (*modify_srq)(void *srq, struct pyrdma_srq_attr *attr, int mask,
                      struct pyrdma_status *st);
    int (*query_srq)(void *srq, struct pyrdma_srq_attr *attr,
                     struct pyrdma_status *st);
    int (*destroy_srq)(void *srq, struct pyrdma_status *st);
    /* Return 0 or a positive errno with *bad the rejected WR. */
    int (*post_srq_recv)(void *srq, struct pyrdma_recv_wr *wr,
                         struct pyrdma_recv_wr **bad);

    /* Queue pair. */
    int (*create_qp)(void *pd, struct pyrdma_qp_init_attr *attr, void **qp,
                     uint32_t *qp_num, struct pyrdma_status *st);
    int (*modify_qp)(void *qp, struct pyrdma_qp_attr *attr, int mask,
                     struct pyrdma_status *st);
    int (*query_qp)(void *qp, struct pyrdma_qp_attr *attr, int mask,
                    struct pyrdma_status *st);
    int (*destroy_qp)(void *qp, struct pyrdma_status *st);
    /* Return 0 or a positive errno with *bad the rejected WR. */
    int (*post_send)(void *qp, struct pyrdma_send_wr *wr,
                     struct pyrdma_send_wr **bad);
    int (*post_recv)(void *qp, struct pyrdma_recv_wr *wr,
                     struct pyrdma_recv_wr **bad);
    int (*attach_mcast)(void *qp, const uint8_t gid[16], uint16_t lid,
                        struct pyrdma_status *st);
    int (*detach_mcast)(void *qp, const uint8_t gid[16], uint16_t lid,
                        struct pyrdma_status *st);

    /* Address handle. */
    int (*create_ah)(void *pd, struct pyrdma_ah_attr *attr, void **ah,
                     struct pyrdma_status *st);
    int (*destroy_ah)(void *ah, struct pyrdma_status *st);

    /* Connection manager (librdmacm's semantics; IDs are opaque handles
       of the provider).  A channel has a pollable fd; cm_get_event is
       non-blocking and returns 1 with *ev filled (and acknowledged), 0
       if none is pending, -1 on error.  The QP of an ID is the caller's
       (created with create_qp on a Context of the device cm_query
       names): cm_init_qp_attr gives the attributes of each transition.
       cm_create_channel, cm_join_multicast and cm_leave_multicast are
       optional (EOPNOTSUPP stubs); the others need a channel. */
    int (*cm_create_channel)(void **ch, int *fd, struct pyrdma_status *st);
    int (*cm_destroy_channel)(void *ch, struct pyrdma_status *st);
    int (*cm_get_event)(void *ch, struct pyrdma_cm_event *ev,
                        struct pyrdma_status *st);
    int (*cm_create_id)(void *ch, int ps, void **id,
                        struct pyrdma_status *st);
    int (*cm_destroy_id)(void *id, struct pyrdma_status *st);
    int (*cm_bind_addr)(void *id, const struct sockaddr *addr,
                        struct pyrdma_status *st);
    int (*cm_resolve_addr)(void *id, const struct sockaddr *src,
                           const struct sockaddr *dst, int timeout_ms,
                           struct pyrdma_status *st);
    int (*cm_resolve_route)(void *id, int timeout_ms,
                            struct pyrdma_status *st);
    int (*cm_listen)(void *id, int backlog, struct pyrdma_status *st);
    int (*cm_connect)(void *id, const struct pyrdma_cm_param *p,
                      struct pyrdma_status *st);
    int (*cm_accept)(void *id, const struct pyrdma_cm_param *p,
                     struct pyrdma_status *st);
    int (*cm_reject)(void *id, const void *data, uint8_t len,
                     struct pyrdma_status *st);
    /* Active side, after CONNECT_RESPONSE with the QP in RTS. */
    int (*cm_establish)(void *id, struct pyrdma_status *st);
    int (*cm_disconnect)(void *id, struct pyrdma_status *st);
    /* The attributes to move the caller's QP to attr->qp_state. */
    int (*cm_init_qp_attr)(void *id, struct pyrdma_qp_attr *attr, int *mask,
                           struct pyrdma_status *st);
    int (*cm_query)(void *id, struct pyrdma_cm_info *info,
                    struct pyrdma_status *st);
    int (*cm_join_multicast)(void *id, const struct sockaddr *addr,
                             struct pyrdma_status *st);
    int (*cm_leave_multicast)(void *id, const struct sockaddr *addr,
                              struct pyrdma_status *st);
};

/* Copy *p into *out with every optional op p lacks pointed at a stub that
   fails with EOPNOTSUPP naming the verb (provider_stubs.c). */
void pyrdma_provider_fill(struct pyrdma_provider *out,
                          const struct pyrdma_provider *p);

/* The providers compiled in (provider_verbs.c; the software fabric's in
   csrc/fabric/ops.c). */
extern const struct pyrdma_provider pyrdma_provider_verbs;
extern const struct pyrdma_provider pyrdma_provider_ucx;

#endif /* PYRDMA_PROVIDER_H */
