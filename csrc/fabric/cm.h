/* cm.h - the internal header of the fabric's connection manager (cm.c,
   cm_msg.c, cm_addr.c): its objects and the functions its files share.
   The public interface is fab_cm_* in csrc/fabric_lib.h. */
#ifndef PYRDMA_FABRIC_CM_H
#define PYRDMA_FABRIC_CM_H

#include "fabric.h"
#include "../fabric_lib.h"

/*
 * One lock (cm_lock, cm.c) guards every channel, ID and queue of the CM;
 * it is never held with N.lock nor across a UCP call.  Messages come in
 * through the node's active-message callback (fab_cm_rx: checked,
 * authenticated, queued) and are handled, like everything that sends,
 * by the CM's thread (cm_msg.c), which may wait for a new peer's HELLO
 * without holding up the node's progress thread.
 */

/* ID states (after the kernel's rdma_cm and IB CM) */
enum {
    CS_IDLE, CS_BOUND, CS_ADDR, CS_ROUTE, CS_LISTEN,
    CS_REQ_SENT,           /* active: REQ or SIDR_REQ sent */
    CS_REQ_RCVD,           /* passive: CONNECT_REQUEST given */
    CS_REP_SENT,           /* passive RC: accepted, waits for the RTU */
    CS_REP_RCVD,           /* active RC: CONNECT_RESPONSE given */
    CS_ESTABLISHED,        /* connected (UD: resolved or accepted) */
    CS_DREQ_SENT,          /* disconnecting: waits for the DREP */
    CS_DISCONNECTED,       /* DISCONNECTED given */
    CS_DONE                /* rejected, unreachable: only destroy */
};

/* A queued event. */
struct cmev {
    struct fab_cm_event ev; /* first: what the caller gets */
    struct cmev *next;
    uint32_t lid_of;        /* local_id of the ID it is for (dropped when
                               it is destroyed) */
};

struct fab_cm_channel {
    int fd;                 /* eventfd (semaphore): count == queued events */
    struct cmev *head, *tail;
    int nids;               /* IDs on it */
};

/* A multicast group an ID joined (cm_mcast.c). */
struct cm_mc {
    struct cm_mc *next;
    struct sockaddr_storage addr; /* the group's IP address, as given */
    uint8_t mgid[16];       /* its MGID and MLID */
    uint16_t mlid;
    uint32_t qpn;           /* the QP attached to it, 0: none (no QP,
                               or a send-only join) */
};

struct fab_cm_id {
    struct fab_cm_channel *ch;
    void *context;
    int ps, qp_type;        /* FAB_CM_PS_*, IBV_QPT_RC or _UD */
    int state;              /* CS_* */
    uint32_t local_id;      /* ours (the hash key), remote_id: the peer's */
    uint32_t remote_id;
    struct sockaddr_in src, dst;
    int bound;              /* src was bound (by bind or listen) */
    unsigned long dst_netns; /* the network namespace of dst's nodes */
    uint64_t peer_guid;     /* the node at the other end, 0: none yet */
    uint16_t peer_lid;
    uint32_t qpn, psn;      /* our QP (caller's) and its first PSN */
    uint32_t peer_qpn, peer_psn, qkey;
    uint8_t resp_res, init_depth, retry, rnr_retry, srq;
    int backlog, pending;   /* listener: CONNECT_REQUESTs not yet taken */
    uint32_t listener;      /* passive: local_id of its listener */
    int claim_fd;           /* the port claim (-1: none) */
    char claim[300];        /* its path */
    uint64_t timewait_at;   /* TIMEWAIT_EXIT due (ns), 0: none */
    struct cm_mc *mc;       /* multicast groups joined */
    struct fab_cm_id *hnext; /* hash chain */
};

/* Something the CM thread sends. */
struct cmout {
    struct cmout *next;
    uint64_t guid;          /* to this node */
    int op;                 /* CM_* */
    uint32_t from;          /* the local_id it is for (failure: its ID
                               hears), 0: none */
    struct cm_msg m;
};

extern pthread_mutex_t cm_lock;

/* cm.c (cm_lock held) */
struct fab_cm_id *cm_id_find(uint32_t local_id);
struct fab_cm_id *cm_id_new(struct fab_cm_channel *ch, void *context,
                            int ps);
struct cmev *cm_event(struct fab_cm_id *id, int type, int status);
void cm_event_pdata(struct cmev *e, const struct cm_msg *m, int len);
void cm_event_post(struct cmev *e);
void cm_peer_gone(struct fab_cm_id *id, int status);
void cm_timewait(struct fab_cm_id *id);
void cm_tell_peer(struct fab_cm_id *id);
struct fab_cm_id *cm_id_first(void);
struct fab_cm_id *cm_id_next(struct fab_cm_id *id);
int cm_qp_type(int ps);

/* cm_msg.c */
int cm_thread_start(struct pyrdma_status *st);
void cm_send(struct fab_cm_id *id, int op, struct cmout *o);
struct cmout *cm_out_new(uint64_t guid, int op);
void cm_out_post(struct cmout *o);
void cm_wake(void);

/* cm_mcast.c */
void cm_mc_leave_all(struct cm_mc *list);

/* cm_addr.c */
int cm_addr_local(uint32_t ip);
int cm_resolve_ip(uint32_t ip, unsigned long *netns, uint32_t *src_ip);
int cm_claim(struct fab_cm_id *id, uint16_t port, struct pyrdma_status *st);
void cm_unclaim(struct fab_cm_id *id);
int cm_claim_listening(struct fab_cm_id *id);
uint64_t cm_claim_owner(int ps, uint16_t port, unsigned long netns,
                        uint16_t *lid, int need_listen);
uint16_t cm_ephemeral(void);

#endif /* PYRDMA_FABRIC_CM_H */
