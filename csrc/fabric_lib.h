/* fabric_lib.h - the interface of the standalone fabric library
   (librdma_fabric.so): the software fabric's provider ops table, with no
   Python in it. */
#ifndef PYRDMA_FABRIC_LIB_H
#define PYRDMA_FABRIC_LIB_H

#include "provider.h"
#include "settings.h"

/* Version of this interface (bumped when struct pyrdma_provider changes). */
#define PYRDMA_FABRIC_LIB_VERSION 1

/* The ops table of the software fabric (device "ucx0"); call its load()
   first.  Never NULL. */
const struct pyrdma_provider *pyrdma_fabric_provider(void);

/* PYRDMA_FABRIC_LIB_VERSION as this library was built. */
int pyrdma_fabric_version(void);

/* ------------------------------------------------------------------ */
/* The connection manager of the fabric (csrc/fabric/cm.c)             */

/*
 * librdmacm's model on ucx0: an event channel (a pollable fd) delivers
 * the events of the CM IDs created on it; an ID resolves an IPv4 address
 * to a fabric node and a route, then connects (RC: REQ, REP, RTU) or
 * resolves a UD peer (SIDR), or listens on a port.  The CM never creates
 * or modifies a QP: the caller creates an ordinary fabric QP, gives its
 * number to fab_cm_connect/fab_cm_accept, and moves it to INIT/RTR/RTS
 * with the attributes fab_cm_init_qp_attr gives (librdmacm does the same
 * for the QPs of rdma_create_qp).  Event numbers, port spaces, private
 * data limits and reject reasons are librdmacm's and the IB CM's.
 * Every function returns 0 or -1 with *st set (errno, function, message)
 * unless it says otherwise; all are thread-safe.  The node comes up
 * (as on opening ucx0) on the first call that needs it.
 */
#define FAB_CM_API_VERSION 1

#include <sys/socket.h>

/* port spaces (enum rdma_port_space) */
enum {
    FAB_CM_PS_IPOIB = 0x0002, FAB_CM_PS_IB = 0x013F,
    FAB_CM_PS_TCP = 0x0106, FAB_CM_PS_UDP = 0x0111
};

/* event types (enum rdma_cm_event_type: the same values) */
enum {
    FAB_CM_EVENT_ADDR_RESOLVED, FAB_CM_EVENT_ADDR_ERROR,
    FAB_CM_EVENT_ROUTE_RESOLVED, FAB_CM_EVENT_ROUTE_ERROR,
    FAB_CM_EVENT_CONNECT_REQUEST, FAB_CM_EVENT_CONNECT_RESPONSE,
    FAB_CM_EVENT_CONNECT_ERROR, FAB_CM_EVENT_UNREACHABLE,
    FAB_CM_EVENT_REJECTED, FAB_CM_EVENT_ESTABLISHED,
    FAB_CM_EVENT_DISCONNECTED, FAB_CM_EVENT_DEVICE_REMOVAL,
    FAB_CM_EVENT_MULTICAST_JOIN, FAB_CM_EVENT_MULTICAST_ERROR,
    FAB_CM_EVENT_ADDR_CHANGE, FAB_CM_EVENT_TIMEWAIT_EXIT
};

/* private data: the most a caller may give (more: EINVAL), as the IB CM
   and rdma_cm allow (rdma_cm's header takes 36 bytes of a REQ and a SIDR
   REQ); and the bytes an event carries (zero-padded, as the kernel's) */
#define FAB_CM_MAX_PRIVATE_DATA 256   /* RDMA_MAX_PRIVATE_DATA */
#define FAB_CM_REQ_PDATA 56           /* connect, RC */
#define FAB_CM_REP_PDATA 196          /* accept, RC */
#define FAB_CM_REJ_PDATA 148          /* reject */
#define FAB_CM_SIDR_REQ_PDATA 180     /* connect, UD */
#define FAB_CM_SIDR_REP_PDATA 136     /* accept, UD */
#define FAB_CM_DREQ_PDATA 220         /* disconnect (none is sent) */

/* reject reasons (event status of REJECTED; enum ib_cm_rej_reason) */
#define FAB_CM_REJ_NO_QP 1
#define FAB_CM_REJ_INVALID_SERVICE_ID 8   /* no listener on the port */
#define FAB_CM_REJ_CONSUMER_DEFINED 28    /* fab_cm_reject */

#define FAB_CM_UDP_QKEY 0x01234567u       /* RDMA_UDP_QKEY */

/* struct rdma_conn_param, plus what UD needs */
struct fab_cm_conn_param {
    const void *private_data;
    uint8_t private_data_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;       /* ignored on accept */
    uint8_t rnr_retry_count;
    uint8_t srq;               /* 1: the QP uses an SRQ */
    uint32_t qp_num;           /* the caller's QP (0: the one fab_cm_set_qp
                                  gave) */
    uint32_t qkey;             /* UD accept: the QP's Q_Key (0: the
                                  default, FAB_CM_UDP_QKEY) */
};

struct fab_cm_channel;         /* an event channel */
struct fab_cm_id;              /* a CM ID */

/* An event (fab_cm_get_event; released by fab_cm_ack_event). */
struct fab_cm_event {
    int event;                 /* FAB_CM_EVENT_* */
    int status;                /* 0, -errno, or a reject reason (REJECTED) */
    struct fab_cm_id *id;      /* the ID (CONNECT_REQUEST: the new one) */
    struct fab_cm_id *listen_id; /* CONNECT_REQUEST: the listening ID */
    void *context;             /* id's context (fab_cm_create_id) */
    /* conn (RC) or ud: what the peer sent */
    uint8_t private_data[FAB_CM_MAX_PRIVATE_DATA];
    uint8_t private_data_len;  /* as librdmacm gives it (the message's
                                  whole private data field) */
    uint8_t responder_resources, initiator_depth, flow_control;
    uint8_t retry_count, rnr_retry_count, srq;
    uint32_t qp_num;           /* the peer's QP */
    uint32_t qkey;             /* UD: its Q_Key */
    struct pyrdma_ah_attr ah_attr; /* UD (ESTABLISHED): how to reach it;
                                  MULTICAST_JOIN: the group */
    void *mc_context;          /* MULTICAST_JOIN/_ERROR: the context
                                  fab_cm_join_multicast was given */
};

/* The route of an ID (struct rdma_route and the ID's addresses). */
struct fab_cm_route {
    struct sockaddr_storage src, dst; /* AF_INET */
    uint8_t sgid[16], dgid[16];       /* fabric GIDs (fe80::<GUID>) */
    uint16_t slid, dlid;              /* LIDs (dlid 0: another host) */
    uint8_t port_num;                 /* 1 */
    uint8_t path_mtu;                 /* IBV_MTU_* */
    int num_paths;                    /* 1 once the route is resolved */
    int ps;                           /* FAB_CM_PS_* */
    int qp_type;                      /* IBV_QPT_RC or IBV_QPT_UD */
};

/* Event channel: *fd, readable while events wait, is the channel's (the
   caller may set O_NONBLOCK on it: get_event never reads it blocking);
   destroy fails with EBUSY while IDs live on it. */
int fab_cm_create_channel(struct fab_cm_channel **out, int *fd,
                          struct pyrdma_status *st);
int fab_cm_destroy_channel(struct fab_cm_channel *ch,
                           struct pyrdma_status *st);
/* The next event of ch: block (wait 1) until there is one or return
   -1 with EAGAIN; EINTR if a signal interrupts the wait. */
int fab_cm_get_event(struct fab_cm_channel *ch, int wait,
                     struct fab_cm_event **out, struct pyrdma_status *st);
/* Release an event; a CONNECT_REQUEST's new ID lives on. */
int fab_cm_ack_event(struct fab_cm_event *ev, struct pyrdma_status *st);

/* IDs.  ps: FAB_CM_PS_TCP (RC), _UDP and _IPOIB (UD), _IB (RC).
   destroy_id drops its unacknowledged events, disconnects (the peer
   sees DISCONNECTED) and releases its port; it waits for no event. */
int fab_cm_create_id(struct fab_cm_channel *ch, void *context, int ps,
                     struct fab_cm_id **out, struct pyrdma_status *st);
int fab_cm_destroy_id(struct fab_cm_id *id, struct pyrdma_status *st);
void *fab_cm_id_context(const struct fab_cm_id *id);
void fab_cm_set_context(struct fab_cm_id *id, void *context);
/* Move id (and its future events) to channel ch. */
int fab_cm_migrate_id(struct fab_cm_id *id, struct fab_cm_channel *ch,
                      struct pyrdma_status *st);

/* Addresses: bind (port 0: an ephemeral one at listen/connect); resolve
   dst (src may be NULL) to a node: ADDR_RESOLVED or ADDR_ERROR; the route:
   ROUTE_RESOLVED.  timeout_ms as librdmacm's (the fabric answers at once
   or not at all). */
int fab_cm_bind_addr(struct fab_cm_id *id, const struct sockaddr *addr,
                     struct pyrdma_status *st);
int fab_cm_resolve_addr(struct fab_cm_id *id, const struct sockaddr *src,
                        const struct sockaddr *dst, int timeout_ms,
                        struct pyrdma_status *st);
int fab_cm_resolve_route(struct fab_cm_id *id, int timeout_ms,
                         struct pyrdma_status *st);
int fab_cm_query_route(struct fab_cm_id *id, struct fab_cm_route *r,
                       struct pyrdma_status *st);

/* Which side an address belongs to (the librdmacm front end sends the
   kernel's to the real librdmacm): the wildcard 0.0.0.0; an address a
   fabric node serves (loopback, this node's RDMA_UCX_ADDR, another live
   node's); another address of this host's interfaces; anything else
   (no node behind it, or not IPv4). */
#define FAB_CM_ADDR_ANY 0
#define FAB_CM_ADDR_NODE 1
#define FAB_CM_ADDR_HOST 2
#define FAB_CM_ADDR_OTHER 3
int fab_cm_addr_kind(const struct sockaddr *sa);

/* Passive side: listen (EADDRINUSE if another ID of any node of this
   host holds the port in this port space); each connection request
   becomes a CONNECT_REQUEST with a new ID on the listener's channel. */
int fab_cm_listen(struct fab_cm_id *id, int backlog,
                  struct pyrdma_status *st);
/* Accept a CONNECT_REQUEST's ID (RC: REP, then ESTABLISHED when the RTU
   comes; UD: the SIDR reply, no event), or reject it (REJECTED with
   reason FAB_CM_REJ_CONSUMER_DEFINED at the peer). */
int fab_cm_accept(struct fab_cm_id *id, const struct fab_cm_conn_param *p,
                  struct pyrdma_status *st);
int fab_cm_reject(struct fab_cm_id *id, const void *private_data,
                  uint8_t private_data_len, struct pyrdma_status *st);

/* Active side, after ROUTE_RESOLVED: RC: REQ; then CONNECT_RESPONSE
   (always, as the kernel's to librdmacm: the caller moves its QP to
   RTR/RTS and calls fab_cm_establish, which sends the RTU and queues
   ESTABLISHED here; a librdmacm-like front end that owns the QP does
   that itself and shows the program ESTABLISHED), REJECTED or
   UNREACHABLE (the peer died or never answered).  UD:
   SIDR REQ; then ESTABLISHED with the peer's qp_num, qkey and ah_attr,
   or REJECTED/UNREACHABLE. */
int fab_cm_connect(struct fab_cm_id *id, const struct fab_cm_conn_param *p,
                   struct pyrdma_status *st);
int fab_cm_establish(struct fab_cm_id *id, struct pyrdma_status *st);
/* The same without the ESTABLISHED event (what librdmacm does for a QP
   it owns, showing the CONNECT_RESPONSE as ESTABLISHED). */
int fab_cm_complete(struct fab_cm_id *id, struct pyrdma_status *st);
/* DREQ: DISCONNECTED on both sides (here when the DREP comes, or at once
   if the peer is gone), then TIMEWAIT_EXIT here.  The caller moves its
   QP to ERR first (librdmacm does). */
int fab_cm_disconnect(struct fab_cm_id *id, struct pyrdma_status *st);

/* The attributes to move the caller's QP of id to state attr->qp_state
   (IBV_QPS_INIT, _RTR or _RTS; set by the caller): *mask says which are
   set (PYRDMA_QP_* bits).  INIT: port, pkey index, access flags (RC) or
   qkey (UD); RTR: path (ah_attr: the peer's GID and LID), path MTU,
   dest QP number, rq_psn, max_dest_rd_atomic, min_rnr_timer; RTS:
   sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic.  EINVAL before
   the peer is known (RTR/RTS). */
int fab_cm_init_qp_attr(struct fab_cm_id *id, struct pyrdma_qp_attr *attr,
                        int *mask, struct pyrdma_status *st);

/* Tell the CM id's QP number and type (rdma_create_qp on a front end): it
   is what connect and accept send when their qp_num is 0. */
int fab_cm_set_qp(struct fab_cm_id *id, uint32_t qp_num,
                  struct pyrdma_status *st);

/* Multicast (UD IDs, bound or resolved to an address of this host):
   join the group of IP address addr (IPv4 224.0.0.0/4 or IPv6 ff00::/8),
   named on the fabric by an MGID and MLID made from it as the kernel's
   rdma_cm makes them for an IB port: IPv4 a.b.c.d gives
   ff12:401b:ffff::<a & 15>.b.c.d (ff12:4001:... in the UDP port space),
   IPv6 ff12:601b:ffff:<its last 10 bytes> (601b -> 6001 for UDP), an
   IPv6 address that is an MGID already (ff1x:a01b::) itself; the MLID is
   0xc000 plus a hash of the MGID (0xc000..0xfffe).  The ID's QP (the one
   fab_cm_set_qp named) is attached to it, unless flags has
   FAB_CM_MC_SENDONLY; then MULTICAST_JOIN, with ah_attr (global, dgid the
   MGID, dlid the MLID), qp_num 0xffffff and qkey FAB_CM_UDP_QKEY; or
   MULTICAST_ERROR if the QP cannot be attached.  Both carry context in
   mc_context.  Leave detaches the QP (EADDRNOTAVAIL if id did not join
   addr); destroying the ID leaves its groups. */
#define FAB_CM_MC_SENDONLY 1          /* RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER */
int fab_cm_join_multicast(struct fab_cm_id *id, const struct sockaddr *addr,
                          int flags, void *context, struct pyrdma_status *st);
int fab_cm_leave_multicast(struct fab_cm_id *id, const struct sockaddr *addr,
                           struct pyrdma_status *st);

/* The event's name ("RDMA_CM_EVENT_ESTABLISHED"...), as rdma_event_str. */
const char *fab_cm_event_str(int event);

/* The table of settings (settings.h), *n rows; for `python -m rdma.fabric
   config` (rdma/fabric/settings.py reads it with ctypes). */
const struct pyrdma_setting *pyrdma_fabric_settings(int *n);

/* Check text as the value of setting id (pyrdma_setting_parse): 0, or -1
   with the message in err. */
int pyrdma_fabric_setting_check(int id, const char *text, char *err,
                                size_t errlen);

/* The setting whose name is closest to name, or NULL. */
const char *pyrdma_fabric_setting_closest(const char *name);

#endif /* PYRDMA_FABRIC_LIB_H */
