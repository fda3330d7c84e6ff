/* fabric.h - the internal header of the software fabric (csrc/fabric/):
   its constants, the key page and request ring layouts, the objects, the
   node (N) and libucp (U), the functions its files share, and the small
   helpers of the data path, inline.  No Python here. */

/*
 * Where things live (docs/fabric.rst, "Where things live"):
 *   wire.h  the message header (struct wire) and its codes
 *   wire.c  messages in: the UCP active-message callback, rendezvous
 *           data, header checks, dispatch to the responder or completer
 *   node.c  the node: libucp (dlopen), UCP context and worker, listener,
 *           rendezvous directory, node record, LID, progress thread
 *   peer.c  peers and addressing: records, endpoints, liveness, AHs
 *   auth.c  HELLO, sessions and the listener's guard
 *   ring.c  same-host request rings
 *   mr.c    MRs, keys, alloc_mr memory and the key page
 *   mw.c    memory windows: alloc, bind, invalidate, the rkey check of
 *           a window (BIND_MW and LOCAL_INV are local WRs: req.c)
 *   mcast.c UD multicast: attach/detach, the groups' registry, a
 *           multicast AH's members
 *   adopt.c adopted user memory (reg_mr of the program's own pages)
 *   cq.c    CQs and completion channels
 *   qp.c    QP and SRQ objects and the QP state machine
 *   req.c   the requester: post_send and the one-sided fast path
 *   resp.c  the responder: receive queues, executing requests
 *   rel.c   reliability: the outbox, ACKs (coalesced, deferred,
 *           piggybacked), NAK/RNR at the requester, SQ completions, timers
 *   ops.c   device, context, port, PD and AH verbs and the ops table
 *   cm.c    the connection manager: event channels, CM IDs, the API
 *   cm_msg.c  its messages (REQ, REP, RTU, REJ, DREQ, DREP, SIDR) and
 *           its thread; cm_addr.c: IP addresses to nodes, port claims
 */

/*
 * A "NIC" in software.  Every process has one fabric node (device "ucx0"):
 * a UCP context and worker (thread mode MULTI), a sockaddr listener, a
 * progress thread and an entry in the rendezvous directory.  Contexts,
 * PDs, CQs, QPs... are plain C structs (declared here), guarded by one mutex
 * (N.lock); UCP is never called with N.lock held, so the only lock order is
 * "UCP worker lock, then N.lock" (inside UCP callbacks).
 *
 * The wire: every operation is one active message (AM_REQ) carrying a
 * header (struct wire) and the payload; the responder validates it (QP,
 * rkey, bounds, access) and executes it in its AM callback, which runs in
 * the responder's progress thread (or in its poll_cq), never in Python.
 * Responses (AM_RESP: cumulative ACKs, NAKs, READ/atomic data) go through
 * an ordered outbox that is sent outside every lock.  A requester completes
 * an RC WR when its response arrives, UC/UD WRs when UCP has sent them.
 * An ACK may instead ride in the header of a request going the other way
 * on the same QP (F_ACK, see fab_in_app_poll and piggyback_ack).
 * Nothing is ever DMA'd from or into user memory outside N.lock, and an MR
 * is removed from the key table under N.lock, so a deregistered MR or a
 * stale key can only produce an error completion (on the fast path below,
 * the key page gives the same guarantee across processes).
 *
 * The one-sided fast path: an RC RDMA WRITE (not WITH_IMM), READ or
 * 8-byte atomic to a same-host peer, into an MR whose memory UCX allocated
 * (PD.alloc_mr -> alloc_mr_mem -> ucp_mem_map(ALLOCATE): shared memory),
 * is executed by the initiator itself in the target memory that UCX maps
 * into its process (ucp_rkey_ptr of an rkey unpacked once per MR, cached
 * per peer).  No UCP call, malloc, lock or syscall per WR; the target's
 * threads do nothing.  What a responder checks is read from the target's
 * key page (struct sh_page, file keys-<GUID> in the rendezvous directory,
 * mapped by same-host peers): its QPs in RTR/RTS with their peer, PD and
 * qp_access_flags, its MRs in UCX memory with key, PD, access, bounds and
 * packed rkey, and an in-flight count per QP and MR.  Rules:
 *  - the initiator counts itself in (once per post_send call), then checks
 *    (seq_cst); the owner withdraws an entry first and, in dereg_mr and
 *    destroy_qp, then waits for the count to drop to 0, so after they
 *    return no one-sided op touches the memory.  The wait is bounded
 *    (SH_WAIT_NS): an initiator killed inside an op cannot hang it;
 *  - any check that fails, or any other case (tcp, user buffers that
 *    were not adopted (adopt.c) nor reachable by cross-memory attach, IMM,
 *    zero length, an rkey not yet mapped), takes the active-message path,
 *    whose responder produces the error completions exactly as before;
 *  - RC order: the fast path is used only when the QP has nothing
 *    outstanding on the AM path; a fast op completes (data in place, so
 *    remotely visible) inside post_send, before any later WR is sent.
 *    It uses no PSN (the responder does not see it);
 *  - a dead peer is noticed as before (pid check within 100 ms): its WRs
 *    then fail with RETRY_EXC_ERR.
 * The key page also holds the node's statistics (fast ops initiated, AM
 * requests executed) for tests and benchmarks.
 *
 * Request rings: same-host RC requests go through shared memory instead of
 * a UCP active message (see struct ring).
 *
 * Scheduling: the worker lock is a mutex (UCX_USE_MT_MUTEX=y unless set),
 * the progress thread keeps off the worker while the application polls
 * (it drives progress in poll_cq; while the request rings carry the
 * traffic, UCP gets a turn every fifth empty poll: cq.c, UCP_SKIP), and a
 * poll_cq that keeps finding nothing yields the CPU once per 64 empty
 * polls, once per 4 when a ring's writer last polled on this very CPU
 * (struct ring.wcpu): on a small machine the peer it waits for may need
 * this CPU.
 *
 * Security: every endpoint's first messages (HELLO, the receiver's
 * CHALLENGE with a fresh nonce, PROOF) prove the sender's key (same
 * host: the receiver's, from its 0600 node record; other hosts:
 * RDMA_UCX_SECRET) and open a session whose id every later message
 * carries; a message counts only under its sender's session and
 * reaches only the QPs connected to that sender; malformed ones are
 * dropped and counted.  A guard bounds what unauthenticated connections
 * to the listener (and to UCX's TCP transport) may hold, and for how
 * long.  See "authentication and the listener's guard".
 *
 * Addressing: the port GID is fe80::<GUID> where the GUID holds the IPv4
 * address (4 bytes) and TCP port (2 bytes) of the node's sockaddr listener
 * and a 2-byte salt; the LID is unique among the nodes of one host (claimed
 * in the rendezvous directory).  docs/fabric.rst describes it.
 */

#ifndef PYRDMA_FABRIC_H
#define PYRDMA_FABRIC_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h> /* capget/capset: CAP_SYS_PTRACE (req.c) */
#include <linux/tcp.h>   /* struct tcp_info with tcpi_bytes_received/acked */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>   /* enum values only: no libibverbs call */
#include <ucp/api/ucp.h>
#include "../provider.h"
#include "../settings.h"

/* ------------------------------------------------------------------ */
/* libucp, loaded with dlopen (fab_load, node.c)                      */

struct fab_ucp {
    int loaded;
    void *dl;
    ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **);
    void (*config_release)(ucp_config_t *);
    ucs_status_t (*config_modify)(ucp_config_t *, const char *, const char *);
    ucs_status_t (*init_version)(unsigned, unsigned, const ucp_params_t *,
                                 const ucp_config_t *, ucp_context_h *);
    void (*cleanup)(ucp_context_h);
    void (*get_version)(unsigned *, unsigned *, unsigned *);
    ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *,
                                  ucp_worker_h *);
    ucs_status_t (*worker_get_address)(ucp_worker_h, ucp_address_t **,
                                       size_t *);
    void (*worker_release_address)(ucp_worker_h, ucp_address_t *);
    unsigned (*worker_progress)(ucp_worker_h);
    ucs_status_t (*worker_get_efd)(ucp_worker_h, int *);
    ucs_status_t (*worker_arm)(ucp_worker_h);
    ucs_status_t (*worker_signal)(ucp_worker_h);
    ucs_status_ptr_t (*worker_flush_nbx)(ucp_worker_h,
                                         const ucp_request_param_t *);
    ucs_status_t (*worker_set_am_recv_handler)(ucp_worker_h,
                                               const ucp_am_handler_param_t *);
    ucs_status_t (*listener_create)(ucp_worker_h, const ucp_listener_params_t *,
                                    ucp_listener_h *);
    ucs_status_t (*listener_query)(ucp_listener_h, ucp_listener_attr_t *);
    ucs_status_t (*listener_reject)(ucp_listener_h, ucp_conn_request_h);
    ucs_status_t (*ep_create)(ucp_worker_h, const ucp_ep_params_t *,
                              ucp_ep_h *);
    ucs_status_ptr_t (*ep_close_nbx)(ucp_ep_h, const ucp_request_param_t *);
    ucs_status_t (*conn_request_query)(ucp_conn_request_h,
                                       ucp_conn_request_attr_t *);
    ucs_status_ptr_t (*am_send_nbx)(ucp_ep_h, unsigned, const void *, size_t,
                                    const void *, size_t,
                                    const ucp_request_param_t *);
    ucs_status_ptr_t (*am_recv_data_nbx)(ucp_worker_h, void *, void *, size_t,
                                         const ucp_request_param_t *);
    void (*request_free)(void *);
    const char *(*status_string)(ucs_status_t);
    /* memory and one-sided access (the fast path) */
    ucs_status_t (*mem_map)(ucp_context_h, const ucp_mem_map_params_t *,
                            ucp_mem_h *);
    ucs_status_t (*mem_unmap)(ucp_context_h, ucp_mem_h);
    ucs_status_t (*mem_query)(const ucp_mem_h, ucp_mem_attr_t *);
    ucs_status_t (*rkey_pack)(ucp_context_h, ucp_mem_h, void **, size_t *);
    void (*rkey_buffer_release)(void *);
    ucs_status_t (*ep_rkey_unpack)(ucp_ep_h, const void *, ucp_rkey_h *);
    ucs_status_t (*rkey_ptr)(ucp_rkey_h, uint64_t, void **);
    void (*rkey_destroy)(ucp_rkey_h);
};
extern struct fab_ucp U;

/* ------------------------------------------------------------------ */
/* constants                                                           */

#define DEV_NAME "ucx0"
#define QPN_IDX_BITS 14
#define MAX_QP (1 << QPN_IDX_BITS)
#define QP_WIN_MIN 1024    /* QP table rows new QPs take turns over, at
                              least (qp.c qp_window) */
#define MAX_WR 16384
#define MAX_SGE 16
#define MAX_INLINE 4096
#define MAX_CQE (1 << 20)
#define NUM_COMP_VECTORS 1     /* the context's num_comp_vectors */
#define GID_TBL_LEN 16         /* the port's GID table: entry 0 holds its
                                  GID, the others are empty, as on an IB
                                  HCA */
#define MAX_RD_ATOM 16
#define SLOT_SMALL 192          /* preallocated payload bytes per send slot */
#define PORT_MTU IBV_MTU_4096
#define MAX_MSG (1u << 31)
#define MAX_MR_SIZE (1ull << 47)    /* device_attr.max_mr_size */
#define MW_IDX0 (1u << 23)      /* key indexes from here on name memory
                                   windows (mw.c), below it MRs: a
                                   window's rkey is never an MR's, and
                                   never the target of the one-sided fast
                                   path (its index is >= SH_MR) */
#define MAX_MW (1 << 16)        /* device_attr.max_mw */
#define MAX_MCG 1024            /* device_attr.max_mcast_grp */
#define MAX_MCG_QP 56           /* device_attr.max_mcast_qp_attach */
#define MCAST_QPN 0xFFFFFFu     /* the QPN of a multicast SEND */
#define SALT_TRIES 64
#define GUARD_TAG 0x47415244ull /* epoll data of a listening socket (auth.c) */
#define DEADLINE_UNSET 1        /* struct slot: the timer has not started */

#include "wire.h"

/* A setting of the node (settings.h), read when it started: its number
   (flag, size, choice) and the environment's text (NULL: unset). */
#define FAB_SET_NUM(id) (N.set.num[PYRDMA_SET_##id])
#define FAB_SET_TEXT(id) ((const char *)N.set.text[PYRDMA_SET_##id])
#define FAB_SET_DEFAULT(id) (pyrdma_settings_table[PYRDMA_SET_##id].dflt)

/* ------------------------------------------------------------------ */
/* the key page: what a same-host initiator checks before a one-sided op */

#define SH_MAGIC 0x4b435855u    /* "UXCK" */
#define SH_VERSION 7            /* 3: struct wire has a session id (rings);
                                   4: three more counters;
                                   5: MRs in the owner's own memory
                                   (rkey_len 0, cross-memory attach);
                                   6: struct sh_mr has xaddr (adopted
                                   user memory), st_adopted;
                                   7: st_local_req */
#define SH_MR 4096              /* MR keys with an index below this can be
                                   the target of a one-sided op */
#define SH_RKEY_MAX 192         /* packed UCX rkey bytes */
#define CMA_MIN_DEFAULT 4096     /* RDMA_UCX_CMA_MIN's default */
#define CMA_MIN_CAP 65536        /* ... for an initiator with
                                    CAP_SYS_PTRACE (root) */
#define SH_WAIT_NS 1000000000ull /* dereg/destroy wait at most this long
                                   for initiators inside an op */

/* A QP of this node as a one-sided target (written by its owner under
   N.lock; read lock-free by initiators). */
struct sh_qp {
    uint32_t qpn;          /* the QP, 0: not a target (not RTR/RTS) */
    uint32_t dest_qpn;     /* the only QP that may access it */
    uint64_t peer_guid;    /* and its node */
    uint64_t pd;           /* PD identity */
    uint32_t access;       /* qp_access_flags */
    uint32_t inflight;     /* initiators inside an op on it */
};

/* An MR of this node that same-host initiators may reach one-sided: in
   UCX-allocated memory (through UCX's mapping of it), or in the owner's
   own memory (rkey_len 0: through cross-memory attach, process_vm_writev
   and process_vm_readv at addr in the owner, sh_page.pid). */
struct sh_mr {
    uint32_t key;          /* its rkey, 0: none (published last, cleared
                              first) */
    uint32_t access;       /* IBV_ACCESS_* */
    uint32_t inflight;     /* initiators inside an op on it */
    uint32_t rkey_len;     /* bytes in rkey, 0: the owner's own memory */
    uint64_t pd;           /* PD identity */
    uint64_t addr, len;    /* the region */
    uint64_t xaddr;        /* the address UCX knows for addr (rkey_ptr):
                              addr, or in UCX's mapping of adopted user
                              memory (mem_adopt) */
    uint8_t rkey[SH_RKEY_MAX]; /* packed UCX rkey of its memory */
};

/* The page (a file in the rendezvous directory, keys-<GUID>). */
struct sh_page {
    uint32_t magic, version;
    int32_t pid;           /* owner */
    uint32_t pad0;
    uint64_t guid;         /* owner's GUID */
    /* statistics of the owner (tests and benchmarks read them) */
    uint64_t st_fast_write;  /* one-sided WRITEs it initiated */
    uint64_t st_fast_read;   /* one-sided READs */
    uint64_t st_fast_atomic; /* one-sided atomics */
    uint64_t st_am_req;      /* requests it executed as a responder */
    uint64_t st_ack_msg;     /* ACKs it sent as messages of their own */
    uint64_t st_ack_piggy;   /* ACKs it sent inside a request (piggyback) */
    uint64_t st_ack_late;    /* deferred ACKs no request took (sent alone) */
    uint64_t st_ring_req;    /* requests it sent through a request ring */
    uint64_t st_ring_gone;   /* rings of dead senders it released */
    uint64_t st_ring_bell;   /* receivers it woke (AM_CTL_BELL) */
    uint64_t st_am_rndv;     /* messages whose payload came by UCX's
                                rendezvous protocol */
    uint64_t st_revoked;     /* alloc_mr memory it made private because
                                an initiator outstayed a dereg_mr */
    uint64_t st_rx_bad;      /* malformed messages dropped */
    uint64_t st_rx_denied;   /* messages dropped: sender not authenticated,
                                forged source, or a QP not connected to
                                it; HELLOs refused; connections closed
                                unauthenticated */
    uint64_t st_cma_write;   /* WRITEs it initiated by cross-memory
                                attach (into a peer's own memory) */
    uint64_t st_cma_read;    /* READs it initiated that way */
    uint64_t st_cma_fenced;  /* dereg_mr fenced out an initiator that
                                outstayed it (closes cross-memory attach
                                to this process: cma_open 0) */
    uint64_t cma_open;       /* 1: its own memory may be reached by
                                cross-memory attach (same user) */
    uint64_t st_adopted;     /* user memory reg_mr adopted (mem_adopt) */
    uint64_t st_local_req;   /* requests to a QP of its own that its
                                post_send executed (CARRY_LOCAL) */
    uint64_t pad1[1];        /* the QP table starts on a cache line */
    struct sh_qp qp[MAX_QP];
    struct sh_mr mr[SH_MR];
};

/* The layout is read by peers (and tests): keep it fixed. */
_Static_assert(sizeof(struct sh_qp) == 32, "struct sh_qp layout");
_Static_assert(sizeof(struct sh_mr) == 240, "struct sh_mr layout");
_Static_assert(offsetof(struct sh_page, qp) == 192, "struct sh_page layout");

/* ------------------------------------------------------------------ */
/* request rings: same-host RC requests without UCP                    */

/*
 * A node sends RC requests (struct wire + payload, up to RING_DATA bytes)
 * to a same-host node through a ring in shared memory instead of a UCP
 * active message: one single-producer ring per (sender, receiver) pair,
 * file ring-<SENDER>-<RECEIVER> in the rendezvous directory.  The sender
 * creates it, asks the receiver to map it (AM_CTL_RINGOPEN through UCP)
 * and uses it once the receiver has set `open`; until then, and for
 * anything that does not fit or finds the ring full, UCP as before (the
 * responder's PSN order puts requests that took different ways back in
 * order).  Writers hold the sender's N.lock; the receiver executes the
 * entries under its N.lock, in poll_cq (empty) and in its progress thread,
 * through the same code as an active message (fab_am_dispatch).
 * An entry is published by its `seq` (written last); the receiver polls
 * the next entry's seq, so a request costs the receiver the lines of its
 * entry only: one for a SEND with up to 8 bytes (struct ring_short).
 * Waking a sleeping receiver: its progress thread sets `sleep` in each of
 * its rings, then looks at them once more before it sleeps; a writer
 * publishes an entry, then takes `sleep` (both seq_cst), and if it was
 * set sends a UCP message (AM_CTL_BELL) whose arrival wakes the thread.
 * A request that carries an ACK goes through UCP once its QP has sent a
 * NAK (through UCP): a cumulative ACK must not pass the NAK before it.
 */
#define RING_MAGIC 0x474e4952u  /* "RING" */
#define RING_VERSION 5          /* 5: short entries, struct ring.wcpu */
#define RING_SLOTS 256          /* a power of 2 */
#define RING_SLOT 512           /* bytes per entry */
#define RING_DATA (RING_SLOT - 8)
#define RING_SHORT 0x80000000u  /* in ring_slot.len: a short entry */
#define MAX_RX_RINGS 256        /* rings a node accepts */

struct ring_slot {
    uint32_t seq;          /* (entry number + 1) mod 2^32 once written
                              (release): the receiver polls this, in the
                              line it then reads anyway */
    uint32_t len;          /* bytes in data (struct wire + payload), or
                              RING_SHORT | bytes (struct ring_short +
                              payload) */
    uint8_t data[RING_DATA];
};

/* The header of a short entry: a SEND (with or without immediate data)
   without the fields of struct wire a SEND leaves zero (rkey, qkey,
   raddr, cmp, swap) or a ring implies (src_guid: the ring's sender; len:
   the payload's bytes), so that seq, len, this and 8 bytes of payload
   are one cache line: the receiver's one miss per request, as with a UCX
   shared-memory message (struct wire is 96 bytes: two lines).  Its
   fields are struct wire's, in runs of the same layout (copied as such);
   ring_run makes the whole struct wire again before any check. */
struct ring_short {
    uint8_t kind, op, flags, rnr_retry; /* AM_REQ, OP_SEND, F_*, ... */
    uint32_t dst_qpn, src_qpn, psn, slot, epoch; /* (struct wire: 0-23) */
    uint16_t src_lid, qp_type; /* (32-35) */
    uint32_t imm;          /* (36-39) */
    uint32_t ack_psn;      /* (52-55) with F_ACK: the ACK it carries */
    uint32_t ack_epoch;    /* (80-83) */
    uint64_t sid;          /* (88-95) the sender's session */
};
_Static_assert(sizeof(struct ring_short) == 48 &&
               8 + sizeof(struct ring_short) + 8 == 64 &&
               offsetof(struct ring_short, src_lid) == 24 &&
               offsetof(struct ring_short, ack_psn) == 32 &&
               offsetof(struct wire, epoch) == 20 &&
               offsetof(struct wire, src_lid) == 32 &&
               offsetof(struct wire, imm) == 36 &&
               offsetof(struct wire, ack_psn) == 52 &&
               offsetof(struct wire, ack_epoch) == 80 &&
               offsetof(struct wire, sid) == 88, "struct ring_short");

struct ring {
    uint32_t magic, version;
    int32_t pid;           /* the sender (the stale-file sweep reads it) */
    uint32_t open;         /* set by the receiver once mapped */
    uint64_t src_guid, dst_guid;
    uint32_t sleep;        /* 1: the receiver's progress thread is about to
                              sleep or sleeps: the writer must ring (in
                              this line, which the writer reads anyway and
                              the receiver writes only around a sleep) */
    uint32_t wcpu;         /* 1 + the CPU the writer's poll_cq last
                              waited on (4 empty polls running), 0:
                              unknown (written when it changes): a
                              receiver polling on that CPU yields sooner,
                              the writer cannot run while it spins */
    uint8_t pad0[24];
    uint64_t head;         /* entries executed (receiver; the writer reads
                              it only when the ring looks full) */
    uint8_t pad1[56];
    struct ring_slot s[RING_SLOTS];
};
_Static_assert(offsetof(struct ring, head) == 64 &&
               offsetof(struct ring, s) == 128, "struct ring layout");

/* A cached unpacked rkey of a peer's MR (index: key >> 8). */
struct rkc {
    uint32_t key;          /* the full key it is for, 0: empty */
    uint64_t addr;         /* the region's address at the target */
    uint8_t *base;         /* where it is mapped here, NULL: not mappable */
    int cma;               /* the target's own memory: reached with
                              process_vm_writev/readv (base NULL) */
    int self;              /* this process's own memory, a QP of its own
                              the target: base is its address (memcpy) */
    ucp_rkey_h rkey;       /* UCX handle (NULL for cma) */
};

/* Memory of alloc_mr_mem. */
struct umem {
    struct umem *next;
    uint8_t *addr;
    size_t len;
    size_t maplen;         /* bytes UCX mapped at addr (whole pages) */
    uint8_t *shadow;       /* revoked (mem_revoke): UCX's shared mapping
                              moved here, a private copy is at addr */
    uint8_t *xaddr;        /* adopted user memory (mem_adopt): where UCX
                              mapped the segment (what its rkey knows);
                              addr is the user's range, the same segment
                              attached again; NULL: alloc_mr memory */
    int shmid;             /* adopted: the SysV segment */
    int refs;              /* adopted: MRs that lie in it */
    int detached;          /* adopted: the program unmapped or replaced
                              the range (fab_adopt_check); its MRs keep
                              the segment, no new MR lies in it */
    ucp_mem_h memh;
    void *rkey;            /* packed rkey, NULL if too big */
    size_t rkey_len;
};

/* ------------------------------------------------------------------ */
/* objects                                                             */

struct uctx;
struct ucq;
struct usrq;
struct uqp;
struct peer;

/* A pending asynchronous event of a context. */
struct aev {
    int32_t type;          /* IBV_EVENT_* */
    int32_t kind;          /* PYRDMA_EV_* */
    void *element;         /* qp/srq/cq context pointer */
};

/* An open device. */
struct uctx {
    int async_fd;          /* eventfd, readable while events are queued */
    struct aev *ev;        /* ring of pending async events */
    uint32_t ev_head, ev_tail, ev_cap;
};

/* A protection domain. */
struct upd {
    struct uctx *ctx;      /* its context */
};

/* A memory region (a row of the key table). */
struct umr {
    struct upd *pd;        /* PD it belongs to */
    uint8_t *addr;         /* start */
    size_t len;            /* bytes */
    unsigned int access;   /* IBV_ACCESS_* */
    uint32_t key;          /* lkey == rkey */
    struct umem *umem;     /* UCX-allocated memory it lies in, or NULL */
    int shared;            /* published in the key page */
    int own;               /* in the program's own memory, watched for
                              unmapping (fab_own_watch) */
    int gone;              /* the program unmapped, replaced or moved
                              (part of) it: nothing reaches it any more */
    struct umr *own_next;  /* the watched MRs (mr.c) */
    int nmw;               /* memory windows bound to it (mw.c) */
};

/* A memory window (mw.c): a row of the window table, N.mws. */
struct umw {
    struct upd *pd;        /* PD it belongs to */
    int type;              /* IBV_MW_TYPE_1 or IBV_MW_TYPE_2 */
    uint32_t key;          /* its rkey now ((MW_IDX0 + row) << 8 | byte) */
    int bound;             /* remote access through key reaches mr */
    struct umr *mr;        /* bound: the MR under it */
    struct uqp *qp;        /* bound, type 2: the only QP it serves */
    uint64_t addr, len;    /* bound: the window, in mr's addresses */
    unsigned access;       /* bound: the IBV_ACCESS_* it grants */
};

/* A completion channel. */
struct ucc {
    int fd;                /* eventfd, readable while events are queued */
    void **q;              /* ring of cq_context pointers */
    struct ucq **qcq;      /* the CQ of each queued event */
    uint32_t head, tail, cap;
};

/* A completion queue. */
struct ucq {
    struct uctx *ctx;      /* its context */
    struct ucc *cc;        /* completion channel or NULL */
    void *cq_context;      /* returned by get_cq_event */
    struct pyrdma_wc *ring; /* entries */
    uint32_t mask;         /* ring size - 1 */
    uint32_t cqe;          /* usable entries */
    uint32_t head, tail;   /* consumer (under take) / producer (under
                              N.lock), each published with release */
    uint32_t take;         /* consumers' lock (poll_cq takes entries
                              without N.lock; resize_cq holds both) */
    int armed;             /* 0, 1: any completion, 2: solicited only */
    int overrun;           /* an entry was lost */
};

/* A posted receive. */
struct rwqe {
    uint64_t wr_id;        /* returned in the completion */
    int num_sge;           /* entries used */
    struct pyrdma_sge *sge; /* max_sge entries */
};

/* A receive queue (of a QP or an SRQ). */
struct rq {
    struct rwqe *w;        /* ring */
    struct pyrdma_sge *sges; /* storage of every WQE's s/g list */
    uint32_t mask, max_wr, max_sge;
    uint32_t head, tail;
};

/* A shared receive queue. */
struct usrq {
    struct upd *pd;        /* PD it belongs to */
    void *srq_context;     /* for async events */
    struct rq rq;          /* the receives */
    uint32_t limit;        /* SRQ limit (0: disarmed) */
};

/* A message the responder keeps for later (RNR, or behind a rendezvous). */
struct inmsg {
    struct inmsg *next;    /* next in the QP's inbound queue */
    struct uqp *qp;        /* owner; NULL once the QP is gone */
    int ready;             /* the data has arrived */
    int inflight;          /* UCP still writes into data */
    uint64_t hold_until;   /* RNR: NAK after this time (0: not held yet) */
    int hold_forever;      /* RNR with rnr_retry 7 */
    int waited;            /* an RNR_WAIT was sent */
    int lost;              /* the data never arrived: drop it */
    size_t len;            /* bytes of data */
    uint8_t *data;         /* struct wire + payload */
};

/* A send work request in flight. */
struct slot {
    struct uqp *qp;        /* owner; NULL once the QP is gone */
    uint32_t idx;          /* absolute SQ index */
    ucp_ep_h ep;           /* where it goes */
    uint64_t wr_id;        /* returned in the completion */
    int opcode;            /* IBV_WR_* */
    int signaled;          /* make a completion on success */
    int done;              /* completed (status valid) */
    int status;            /* IBV_WC_* */
    int need_send;         /* post_send must transmit it */
    int carrier;           /* how: CARRY_RING or CARRY_AM (req.c) */
    int imm_done;          /* post_send saw UCP complete it immediately */
    int inflight;          /* UCP still reads buf */
    int rnr_wait;          /* responder holds it for RNR: no ack timer */
    uint32_t psn;          /* PSN */
    uint32_t byte_len;     /* for READ/atomic completions */
    uint64_t deadline;     /* ack timeout (ns), 0: none, DEADLINE_UNSET:
                              tmo from when timers() first sees it */
    uint64_t tmo;          /* ack timeout (ns) */
    int num_sge;           /* local s/g (READ/atomic targets) */
    struct pyrdma_sge *sge; /* max_send_sge entries */
    uint8_t *buf;          /* wire + payload to send */
    size_t len;            /* bytes in buf */
    size_t cap;            /* capacity of buf */
    uint8_t small[SLOT_SMALL]; /* buf when it fits */
};

/* A node reachable over the fabric. */
struct peer {
    uint64_t guid;         /* its GUID */
    uint16_t lid;          /* its LID (0 if unknown) */
    ucp_ep_h ep;           /* endpoint to it */
    int failed;            /* the endpoint failed or the process died */
    int ended;             /* same host: its process was found gone
                              (fab_timers fails it once what it sent
                              is taken in) */
    pid_t pid;             /* same host: its pid (0: unknown, or in
                              another pid namespace) */
    int rec_live;          /* same host, another pid namespace: its
                              liveness is its record's lock */
    int cma_off;           /* cross-memory attach to it was refused */
    int stopped;           /* same host: stopped (SIGSTOP) at the last
                              liveness check: its WRs' timers wait */
    uint64_t next_check;   /* next liveness check (ns) */
    struct sh_page *sh;    /* same host: its key page, or NULL */
    struct rkc *rk;        /* SH_MR cached rkeys (with sh) */
    int ring_state;        /* 0: none yet, 1: ring made (tx), -1: never */
    int local;             /* it is this node, and rings are allowed: its
                              requests are executed by post_send
                              (CARRY_LOCAL) */
    struct ring *tx;       /* request ring to it (usable once tx->open) */
    uint64_t tx_head;      /* tx->head as last read (N.lock) */
    uint64_t tx_tail;      /* entries written to tx (N.lock) */
    uint64_t tx_sid;       /* our session with it (our HELLO; in every
                              message we send it) */
    uint64_t rx_sid;       /* its session with us (its HELLO), 0: none:
                              its messages must carry it */
    int unanswered;        /* our HELLO got no answer in time, or was
                              refused: what we send it is dropped there */
};

/* A queue pair. */
struct uqp {
    struct upd *pd;        /* PD */
    struct ucq *scq, *rcq; /* CQs */
    struct usrq *srq;      /* SRQ or NULL */
    void *qp_context;      /* for async events */
    uint32_t qpn;          /* QP number */
    int type;              /* IBV_QPT_* */
    int sq_sig_all;        /* every WR signaled */
    struct pyrdma_qp_cap cap; /* capacities */
    struct pyrdma_qp_attr attr; /* as modified (state in attr.qp_state) */
    uint32_t epoch;        /* incremented at RESET */
    pthread_mutex_t post_lock; /* serializes post_send callers */
    int posting;           /* a post_send holding post_lock is between its
                              first and last N.lock (req.c: post_quick,
                              which takes N.lock only, stays out) */
    /* send queue */
    struct slot *sq;       /* ring */
    uint32_t sq_mask;      /* ring size - 1 */
    uint32_t sq_head, sq_tail; /* oldest uncompleted, next free */
    uint32_t sq_unplaced;  /* 1 + the index of the last slot that is not
                              an F_PLACED immediate (req.c) */
    uint32_t next_psn;     /* next PSN to send */
    int err_pending;       /* a WR failed: later WRs flush */
    struct peer *peer;     /* RC/UC: the remote node */
    /* receive side */
    struct rq rq;          /* own receives (no SRQ) */
    uint32_t expect_psn;   /* responder: next PSN */
    uint32_t dead_epoch;   /* drop requests of this requester epoch */
    int dead_valid;        /* dead_epoch is set */
    struct inmsg *inq, *inq_tail; /* held/ordered inbound messages */
    struct inmsg *ooo;     /* requests that arrived ahead of expect_psn */
    struct obox *ack_item; /* its pending ACK in the outbox */
    /* a deferred ACK (see fab_in_app_poll): held here, not in the outbox,
       until a request carries it or a full drain sends it */
    int dack;              /* one is held */
    int dack_listed;       /* q is on N.dack_head's list */
    uint32_t dack_psn, dack_slot, dack_epoch, dack_dst_qpn;
    ucp_ep_h dack_ep;      /* where it goes */
    struct uqp *dack_next; /* N.dack_head's list */
    unsigned n_inflight;   /* its slots with inflight set (N.lock) */
    int rx_seen;           /* executed a request since its last post_send */
    int alt;               /* receive/post alternations seen (max 4): its
                              ACKs are deferred from 2 on (fab_in_app_poll) */
    int naked;             /* queued a NAK: its requests that carry an
                              ACK go through UCP (struct ring) */
    int destroyed;         /* being destroyed */
    int mc_queued;         /* post_send queued multicast copies (UD):
                              the outbox is to be drained */
    /* send WRs posted in SQD, waiting for RTS (sqd.c; N.lock) */
    struct pyrdma_send_wr *held, *held_last;
    uint32_t n_held;
};

/* A response waiting to be sent. */
struct obox {
    struct obox *next;
    struct uqp *qp;        /* for ACK coalescing (may be stale: checked) */
    ucp_ep_h ep;           /* where */
    int late;              /* a deferred ACK no request took */
    int cancel;            /* carried by a request: not to be sent */
    size_t len;            /* bytes */
    uint8_t *buf;          /* small or heap */
    uint8_t small[sizeof(struct wire) + 8];
};

/* An address handle. */
struct uah {
    struct upd *pd;        /* PD */
    struct peer *peer;     /* resolved node (NULL: multicast) */
    struct pyrdma_ah_attr attr; /* as created */
    int mcast;             /* a multicast group's address (mcast.c) */
    pthread_mutex_t mp_lock; /* multicast: guards the members below */
    struct peer **mp;      /* the group's member nodes, as last looked */
    int nmp;
    int mp_valid;          /* mp is what the registry said at mp_mtime */
    struct timespec mp_mtime; /* the registry folder's mtime then */
};

/* A multicast group this node's QPs are attached to (mcast.c). */
struct mcg {
    uint8_t gid[16];       /* its GID */
    uint16_t lid;          /* its LID */
    uint32_t nqp;          /* QPs attached (0: a free entry) */
    uint32_t qpn[MAX_MCG_QP];
};

/* Memory UCP may still use after its owner went away. */
struct grave {
    struct grave *next;
    struct slot *sq;       /* slots, freed at exit */
};

/* The process's fabric node (N, defined in node.c). */
struct node {
    int up;                /* initialized */
    pid_t pid;             /* process that initialized it */
    pthread_mutex_t lock;  /* guards everything below */
    ucp_context_h uctx;
    ucp_worker_h w;
    ucp_listener_h listener;
    ucp_address_t *waddr;
    size_t waddr_len;
    int efd, epfd, stopfd;
    pthread_t thr;
    volatile int stop;
    struct pyrdma_settings set; /* read once when the node starts */
    uint64_t guid;         /* host order */
    uint16_t lid;
    uint8_t gid[16];
    uint32_t ip;           /* network order */
    uint16_t port;         /* host order, 0: no listener */
    char dir[200];         /* rendezvous directory */
    char nodefile[260], lidfile[260];
    int recfd, lidfd;      /* the node record and the LID claim, open and
                              locked (fab_file_hold) while the node lives:
                              its liveness in every pid namespace */
    char boot_id[40];
    unsigned long netns;
    unsigned long pidns;   /* inode of its pid namespace */
    /* tables */
    struct uqp *qps[MAX_QP];
    uint16_t qp_gen[MAX_QP];
    uint32_t qp_next;
    uint32_t qp_live;      /* QPs in N.qps */
    struct umr **mrs;
    uint8_t *mr_gen;
    uint32_t nmr;
    struct umw **mws;      /* memory windows (mw.c), row = key index -
                              MW_IDX0 */
    uint8_t *mw_gen;
    uint32_t nmw;          /* rows allocated */
    uint32_t mw_bound;     /* windows bound (0: nothing to unbind when an
                              MR or QP goes) */
    struct mcg *mcg;       /* multicast groups (MAX_MCG entries) */
    uint32_t nmcg;         /* entries used so far */
    uint32_t mcg_total;    /* attachments (QP, group) */
    struct peer **peers;
    int npeers, cpeers;
    /* authentication and the listener's guard (see "authentication") */
    uint64_t secret[2];    /* this node's key (in its 0600 node record) */
    uint64_t shared[2];    /* the key of RDMA_UCX_SECRET */
    int have_shared;       /* RDMA_UCX_SECRET is set */
    int open_mode;         /* no secret and a non-loopback listener: a
                              HELLO without a key is accepted */
    struct auth *auth;     /* senders that said HELLO */
    int nauth, cauth;
    int npending;          /* endpoints the listener accepted (acc_tab)
                              that have not authenticated yet */
    int lsn_fd[32];        /* UCX's listening sockets (fds) */
    uint16_t lsn_port[32]; /* and their ports (host order) */
    int nlsn;
    struct tsock *ts;      /* connections accepted on them, as last seen */
    int nts;
    uint64_t guard_at;     /* next guard pass (ns), 0: none due */
    uint64_t guard_scan;   /* the last look at UCX's connections (ns) */
    uint64_t log_at;       /* the guard's next log line (ns) */
    uint64_t log_closed, log_denied; /* not logged yet */
    struct obox *ob_head, *ob_tail, *ob_free;
    unsigned ob_pending;   /* outbox sends UCP has not finished */
    unsigned ob_plain;     /* queued items a request did not carry
                              (cancel): what drain(0) would send */
    struct uqp *dack_head; /* QPs that may hold a deferred ACK (dack) */
    pthread_mutex_t drain_lock;
    struct grave *graves;
    int timers;            /* something waits on a timer */
    uint32_t qp_hi;        /* QP table entries in use are below this */
    uint64_t app_polls;    /* poll_cq drove progress (a count: changes
                              while the application polls) */
    int pt_asleep;         /* the progress thread sleeps up to 100 ms */
    int quietfd;           /* epoll set of stopfd only */
    struct sh_page *sh;    /* own key page (NULL: no fast path) */
    char shfile[260];
    struct umem *umems;    /* alloc_mr_mem memory */
    struct ring *rx[MAX_RX_RINGS]; /* request rings to this node (an
                              entry's address never changes: a reader
                              without N.lock may still hold it) */
    uint32_t nrx;          /* entries of rx in use (grows only) */
    uint8_t rx_free[MAX_RX_RINGS]; /* its sender died: the entry's address
                              holds zeros (no entry ever looks new) and
                              takes the next ring accepted */
    uint64_t ring_check;   /* next look for dead senders (ns) */
    int cma_out;           /* may initiate cross-memory attach (not
                              RDMA_UCX_CMA=0) */
    uint64_t cma_min;      /* smaller WRs do not use it
                              (RDMA_UCX_CMA_MIN, CMA_MIN_DEFAULT) */
    int cma_cap;           /* this process had CAP_SYS_PTRACE at start:
                              its cross-memory copies lower it (req.c) */
    int yama;              /* Yama's ptrace_scope (0: none) */
    int cma_in;            /* same-host peers may reach this process's
                              memory by cross-memory attach (fab_cma_policy) */
    uint32_t poll_cpu;     /* 1 + the CPU poll_cq last waited on, as the
                              receivers of this node's rings know it
                              (struct ring.wcpu), 0: none yet */
};
extern struct node N;

#define FORK_TCP_MSG "forked from a process whose fabric node was up: " \
    "UCX's tcp transport cannot work after fork() (its async thread is " \
    "not in the child); use shared memory (UCX_TLS unset or naming shm), " \
    "multiprocessing's 'spawn' method, or fork before using the fabric"

#define LOCK() pthread_mutex_lock(&N.lock)
#define UNLOCK() pthread_mutex_unlock(&N.lock)

/* The rendezvous record of a node. */
struct record {
    uint32_t magic;        /* REC_MAGIC */
    pid_t pid;             /* owner, in its pid namespace */
    unsigned long netns;   /* inode of its network namespace */
    unsigned long pidns;   /* inode of its pid namespace: pid means
                              nothing in another */
    char boot_id[40];      /* of its host */
    uint64_t guid;         /* its GUID */
    uint16_t lid;          /* its LID */
    uint64_t secret[2];    /* its HELLO key (authentication): the file is
                              0600, so only the same user reads it */
    uint32_t alen;         /* worker address bytes that follow */
};
#define REC_MAGIC 0x5255435Au   /* ...59: the record has the HELLO key;
                                   5A: and the pid namespace (pidns) */

/* A sender that said HELLO. */
struct auth {
    uint64_t guid;         /* its GUID */
    uint64_t sid;          /* its session id (never 0) */
    pid_t pid;             /* its pid, as it says (checked on this host) */
    int same_host;         /* HELLO_NODE: its pid tells whether it lives */
    uint32_t acc;          /* acc_ref of the endpoint it came on, 0: not
                              one the listener accepted */
};

/* ------------------------------------------------------------------ */
/* functions and globals shared by the files of the fabric             */

extern __thread int fab_in_app_poll __attribute__((tls_model("initial-exec")));
extern const int fab_wc_opcode_of[];
extern int fab_forked_from_node;

/* wire.c */
int fab_msg_check(const struct wire *h, size_t plen);
void fab_am_dispatch(const struct wire *h, const uint8_t *pl, size_t plen);
ucs_status_t fab_am_cb(void *arg, const void *header, size_t header_length,
                       void *data, size_t length,
                       const ucp_am_recv_param_t *param);

/* node.c */
int fab_load(struct pyrdma_status *st);
int fab_priv_open(const char *path, int flags, mode_t mode);
void *fab_shm_file_map(const char *path, size_t size, int oflags, void *at);
void *fab_shm_file_create(const char *tmp, size_t size);
int fab_node_up(struct pyrdma_status *st);

/* peer.c */
int fab_file_hold(int fd);
int fab_file_held(int fd);
int fab_record_alive(uint64_t guid);
int fab_pid_alive(pid_t pid);
char fab_pid_state(pid_t pid);
uint64_t fab_lid_owner(uint16_t lid);
void fab_sweep_stale(void);
int fab_same_host(const struct record *r);
int fab_ah_resolve(const struct pyrdma_ah_attr *a, struct peer **out,
                   struct pyrdma_status *st, const char *func);
void fab_peer_fail_locked(struct peer *p);
int fab_peer_of(uint64_t guid, struct peer **out, struct pyrdma_status *st);
int fab_peer_known(uint64_t guid);
int fab_node_alive(uint64_t guid);
int fab_node_netns(uint64_t guid, unsigned long *netns);

/* cm_msg.c */
void fab_cm_rx(const struct wire *h, const void *data, size_t length);

/* auth.c */
void fab_auth_init(void);
void fab_secret_key(const char *s, uint64_t k[2]);
int fab_random_bytes(void *buf, size_t n);
void fab_rx_bad(void);
void fab_rx_denied(void);
struct auth *fab_auth_find(uint64_t guid);
int fab_auth_ok(uint64_t guid, uint64_t sid);
void fab_hello_rx(const struct wire *h, ucp_ep_h ep);
void fab_proof_rx(const struct wire *h, ucp_ep_h ep);
void fab_challenge_rx(const struct wire *h);
void fab_ctl_post(ucp_ep_h ep, const struct wire *h);
void fab_conn_cb(ucp_conn_request_h req, void *arg);
void fab_hello_send(struct peer *p, const uint64_t *key, int mode);
int fab_listen_scan(uint64_t *ino, int *fds, uint16_t *ports, int max);
void fab_guard_maybe(uint64_t t);
void fab_guard_events(const struct epoll_event *ev, int n);

/* ring.c */
void fab_ring_name(char *buf, size_t n, uint64_t src, uint64_t dst);
unsigned fab_rings_poll(void);
void fab_rings_check(uint64_t t);
void fab_ring_accept(uint64_t src);
int fab_tls_shm(void);
/* Request rings (and CARRY_LOCAL) allowed: RDMA_UCX_NO_RING unset, UCX
   may use shared memory. */
int fab_ring_allowed(void);
void fab_ring_make(struct peer *p);
void fab_rings_sleep(uint32_t v);
void fab_ring_bell(struct peer *p);
void fab_rings_cpu(uint32_t cpu1);
int fab_rings_near(uint32_t cpu1);

/* adopt.c */
extern pthread_mutex_t fab_adopt_lock;
int fab_adopt_enabled(void);
void fab_mem_adopt(uint8_t *addr, size_t len);
void fab_mem_unadopt(struct umem *u);
void fab_adopt_check(const uint8_t *addr, size_t len);
int fab_adopt_moved(struct umem *u);

/* mr.c */
/* one line of /proc/self/maps (fab_maps_parse) */
struct maps_line {
    uintptr_t start, end;
    char perms[8];         /* "rw-p"... */
    unsigned long long ino;
    char name[4096];       /* "" for anonymous memory */
};
int fab_maps_parse(const char *line, struct maps_line *m);
int fab_maps_find(uintptr_t addr, struct maps_line *m);
int fab_mem_kind(const void *addr, int *shmid);
int fab_umem_alloc(struct umem *u, size_t len, ucp_mem_attr_t *a,
                   ucs_status_t *s);
void fab_umem_add(struct umem *u);
void fab_umem_unlink(struct umem *u);
void fab_umem_free(struct umem *u);
int fab_shm_private(int shmid, size_t length);
void *fab_raw_mremap(void *from, size_t len, void *to);
int fab_check_sges(struct upd *pd, const struct pyrdma_sge *sg, int n,
                   int write, int bad_status);
void fab_sh_qp_sync(struct uqp *q);
int fab_sh_quiesce(uint32_t *ctr);
struct sh_page *fab_sh_map(uint64_t guid);
void fab_sh_create(void);
int fab_cma_policy(void);
void fab_cma_ptracer(void);
void fab_rk_fetch(struct peer *p, uint32_t key);
extern int fab_cma_debug_stop;
int fab_alloc_mr_mem(void *pd, size_t length, void **mem, void **cookie,
                     struct pyrdma_status *st);
void fab_free_mr_mem(void *cookie);
int fab_reg_mr(void *pd, void *addr, size_t length, unsigned int access,
               void **out, struct pyrdma_mr_info *info,
               struct pyrdma_status *st);
int fab_dereg_mr(void *vmr, struct pyrdma_status *st);
int fab_rereg_mr(void *vmr, int flags, void *pd, void *addr, size_t length,
                 unsigned int access, struct pyrdma_mr_info *info,
                 struct pyrdma_status *st);

/* mw.c */
struct umw *fab_mw_lookup(uint32_t key);
int fab_mw_bind_wr(struct uqp *q, const struct pyrdma_send_wr *wr);
int fab_mw_invalidate(struct uqp *q, uint32_t key, int remote);
struct umr *fab_mw_resolve(const struct uqp *q, const struct umw *w,
                           unsigned need, uint64_t *raddr, uint64_t len);
void fab_mw_unbind_qp(struct uqp *q);
int fab_alloc_mw(void *pd, int type, void **out, uint32_t *rkey,
                 struct pyrdma_status *st);
int fab_dealloc_mw(void *vmw, struct pyrdma_status *st);
int fab_bind_mw(void *qp, void *mw, uint64_t wr_id, unsigned int flags,
                const struct pyrdma_mw_bind_info *bi, uint32_t *rkey,
                struct pyrdma_status *st);
void fab_mw_rekeyed(void *mw, uint32_t rkey);

/* mcast.c */
const struct mcg *fab_mcg_of(const struct wire *h);
int fab_attach_mcast(void *vq, const uint8_t gid[16], uint16_t lid,
                     struct pyrdma_status *st);
int fab_detach_mcast(void *vq, const uint8_t gid[16], uint16_t lid,
                     struct pyrdma_status *st);
int fab_mcast_qp_attached(const struct uqp *q);
int fab_mcast_qpn(uint32_t qpn, const uint8_t gid[16], uint16_t lid,
                  int attach, struct pyrdma_status *st);
void fab_mcast_node_end(void);
int fab_ah_is_mcast(const struct pyrdma_ah_attr *a);
void fab_mcast_members(struct uah *ah);

/* cq.c */
void fab_cq_push(struct ucq *cq, const struct pyrdma_wc *wc, int solicited);
void fab_cc_push(struct ucc *cc, struct ucq *cq);
void fab_qp_cq_lost(struct uqp *q);
int fab_create_comp_channel(void *vc, void **out, int *fd,
                            struct pyrdma_status *st);
int fab_destroy_comp_channel(void *vcc, struct pyrdma_status *st);
int fab_get_cq_event(void *vcc, void **cq_context, struct pyrdma_status *st);
void fab_ack_cq_events(void *cq, unsigned int n);
int fab_create_cq(void *vc, int cqe, void *cq_context, void *vcc, int vector,
                  void **out, int *actual, struct pyrdma_status *st);
int fab_destroy_cq(void *vcq, struct pyrdma_status *st);
int fab_resize_cq(void *vcq, int cqe, int *actual, struct pyrdma_status *st);
int fab_req_notify_cq(void *vcq, int solicited_only);
int fab_poll_cq(void *vcq, int n, struct pyrdma_wc *wc);

/* qp.c */
void fab_qp_enter_err(struct uqp *q);
void fab_qp_flush_to_err(struct uqp *q);
int fab_create_srq(void *pd, struct pyrdma_srq_attr *a, void *ctxp, void **out,
                   struct pyrdma_status *st);
int fab_modify_srq(void *vs, struct pyrdma_srq_attr *a, int mask,
                   struct pyrdma_status *st);
int fab_query_srq(void *vs, struct pyrdma_srq_attr *a,
                  struct pyrdma_status *st);
int fab_destroy_srq(void *vs, struct pyrdma_status *st);
int fab_create_qp(void *vpd, struct pyrdma_qp_init_attr *a, void **out,
                  uint32_t *qpn, struct pyrdma_status *st);
int fab_modify_qp(void *vq, struct pyrdma_qp_attr *a, int mask,
                  struct pyrdma_status *st);
int fab_query_qp(void *vq, struct pyrdma_qp_attr *a, int mask,
                 struct pyrdma_status *st);
int fab_destroy_qp(void *vq, struct pyrdma_status *st);

/* req.c */
int fab_post_send(void *vq, struct pyrdma_send_wr *wr,
                  struct pyrdma_send_wr **bad);
int fab_post_check(const struct uqp *q, const struct pyrdma_send_wr *wr);

/* sqd.c */
int fab_sqd_hold(struct uqp *q, struct pyrdma_send_wr *wr,
                 struct pyrdma_send_wr **bad);
struct pyrdma_send_wr *fab_sqd_take(struct uqp *q);
void fab_sqd_put_back(struct uqp *q, struct pyrdma_send_wr *l,
                      struct pyrdma_send_wr *rest);
void fab_sqd_forget(struct uqp *q);
void fab_sqd_flush(struct uqp *q);

/* resp.c */
int fab_rq_init(struct rq *r, uint32_t max_wr, uint32_t max_sge);
void fab_rq_free(struct rq *r);
void fab_rq_flush(struct uqp *q);
void fab_inmsg_free(struct inmsg *m);
void fab_inq_run(struct uqp *q);
void fab_inmsg_list_free(struct inmsg *m);
void fab_on_req(const struct wire *h, const uint8_t *pl, size_t plen, int rndv,
                struct inmsg **rndv_msg);
int fab_post_srq_recv(void *vs, struct pyrdma_recv_wr *wr,
                      struct pyrdma_recv_wr **bad);
int fab_post_recv(void *vq, struct pyrdma_recv_wr *wr,
                  struct pyrdma_recv_wr **bad);

/* rel.c */
void fab_dack_queue(struct uqp *q, int late);
void fab_dack_unlist(struct uqp *q);
void fab_queue_ack(struct uqp *q, const struct wire *h);
void fab_queue_resp(struct uqp *q, const struct wire *h, int code,
                    const void *data, size_t dlen);
int fab_queue_copy(ucp_ep_h ep, const uint8_t *buf, size_t len);
void fab_drain(int all);
void fab_drain_out(void);
void fab_sq_advance(struct uqp *q);
void fab_sq_drained(struct uqp *q);
void fab_cq_clean(struct ucq *cq, uint32_t qpn, int sends_only);
void fab_sq_fail(struct uqp *q, uint32_t i, int status);
void fab_sq_fail_outstanding(struct uqp *q, int status);
void fab_on_resp(const struct wire *h, const uint8_t *pl, size_t plen);
void fab_on_piggyback_ack(const struct wire *h);
void fab_timers(void);

/* ops.c */
void fab_ctx_event(struct uctx *c, int type, int kind, void *element);
int fab_async_fd(void *vc);

/* ------------------------------------------------------------------ */
/* small helpers of the data path (inline: no call across files)       */

static inline uint64_t
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline int
ucs_fail(struct pyrdma_status *st, ucs_status_t s, const char *func,
         const char *what)
{
    return pyrdma_fail(st, s == UCS_ERR_NO_MEMORY ? ENOMEM : EIO, func,
                       "%s: %s", what, U.status_string ? U.status_string(s)
                                                       : "UCX error");
}

static inline uint32_t
pow2(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

/* Signed distance of 24-bit PSNs: a - b. */
static inline int32_t
psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b) << 8) >> 8;
}

static inline void
wake_progress(void)
{
    if (N.w != NULL)
        U.worker_signal(N.w);
}

static inline struct umr *
mr_lookup(uint32_t key)
{
    uint32_t idx = key >> 8;
    if (idx == 0 || idx >= N.nmr || N.mrs[idx] == NULL ||
        N.mrs[idx]->key != key)
        return NULL;
    return N.mrs[idx];
}

/* Return 1 if [addr, addr+len) lies in mr. */
static inline int
in_mr(const struct umr *mr, uint64_t addr, uint64_t len)
{
    uint64_t start = (uint64_t)(uintptr_t)mr->addr;
    return addr >= start && len <= mr->len && addr - start <= mr->len - len;
}

/* The responder is inside a landing in the program's own memory
   (fab_land_begin); the unmapping hook (mr.c) waits for its end. */
extern int fab_landing;
/* How many MRs are watched (fab_own_watch). */
extern int fab_own_count;
/* Set while this thread replaces pages under MRs itself (adoption): the
   unmapping hook ignores what it does. */
extern __thread int fab_self_remap;

/* Begin touching mr's memory for a peer (N.lock held): 1, or 0 if the
   program no longer has it (mr->gone; then nothing may touch it).  For
   the program's own memory the hook that sees it unmapped (mr.c) sets
   gone, then waits while a landing is on: so memory that passes here
   stays mapped until fab_land_end.  Nothing inside may allocate memory
   or take a lock (the unmapping thread may hold malloc's). */
static inline int
fab_land_begin(struct umr *mr)
{
    if (!mr->own)
        return 1;
    __atomic_store_n(&fab_landing, 1, __ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&mr->gone, __ATOMIC_SEQ_CST))
        return 1;
    __atomic_store_n(&fab_landing, 0, __ATOMIC_RELEASE);
    return 0;
}

static inline void
fab_land_end(struct umr *mr)
{
    if (mr != NULL && mr->own)
        __atomic_store_n(&fab_landing, 0, __ATOMIC_RELEASE);
}

/* The same around a check of local s/g lists (fab_check_sges, which
   refuses gone MRs) and the scatter of a peer's data into them: 1 if a
   landing was begun (some MR is watched), for fab_land_sges_end. */
static inline int
fab_land_sges_begin(void)
{
    if (__atomic_load_n(&fab_own_count, __ATOMIC_RELAXED) == 0)
        return 0;
    __atomic_store_n(&fab_landing, 1, __ATOMIC_SEQ_CST);
    return 1;
}

static inline void
fab_land_sges_end(int began)
{
    if (began)
        __atomic_store_n(&fab_landing, 0, __ATOMIC_RELEASE);
}

/* Where the responder reaches raddr, an address in mr: for adopted
   memory, UCX's own mapping of the segment, which stays the MR's
   whatever the program does with its range (unmaps it, maps other
   memory there, makes it read-only), as a NIC's pinned pages; else raddr
   itself.  (Revoked memory, mem_revoke: the private copy at the
   program's address.) */
static inline uint8_t *
mr_at(const struct umr *mr, uint64_t raddr)
{
    const struct umem *u = mr != NULL ? mr->umem : NULL;
    if (u != NULL && u->xaddr != NULL && u->shadow == NULL)
        return u->xaddr + (raddr - (uint64_t)(uintptr_t)u->addr);
    return (uint8_t *)(uintptr_t)raddr;
}

/* Scatter len bytes of src into a checked s/g list; return bytes copied. */
static inline size_t
scatter(const struct pyrdma_sge *sg, int n, const uint8_t *src, size_t len)
{
    size_t done = 0;
    int i;
    for (i = 0; i < n && done < len; i++) {
        size_t k = sg[i].length;
        if (k > len - done)
            k = len - done;
        memcpy((void *)(uintptr_t)sg[i].addr, src + done, k);
        done += k;
    }
    return done;
}

static inline struct uqp *
qp_lookup(uint32_t qpn)
{
    uint32_t idx = qpn & (MAX_QP - 1);
    struct uqp *q = N.qps[idx];
    return (q != NULL && q->qpn == qpn && !q->destroyed) ? q : NULL;
}

/* Is anything queued that fab_drain(0) would send (N.lock held)?  Deferred
   ACKs wait, and ACKs a request carried are recycled by a later drain. */
static inline int
ob_urgent(void)
{
    return N.ob_plain != 0;
}

/* Put request slot s (its header is final) into p's ring (N.lock held);
   0: done, -1: it goes through UCP (no ring, full, too big). */
static inline int
ring_put(struct peer *p, const struct slot *s)
{
    struct ring *r = p->tx;
    const struct wire *h = (const struct wire *)s->buf;
    size_t plen = s->len - sizeof(*h);
    int shrt = h->op == OP_SEND && h->kind == AM_REQ &&
               h->qp_type == IBV_QPT_RC;
    uint64_t tail;
    struct ring_slot *e;

    if (r == NULL || p->failed ||
        (shrt ? sizeof(struct ring_short) + plen : s->len) > RING_DATA ||
        !__atomic_load_n(&r->open, __ATOMIC_ACQUIRE))
        return -1;
    tail = p->tx_tail;
    if (tail - p->tx_head >= RING_SLOTS) {
        p->tx_head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
        if (tail - p->tx_head >= RING_SLOTS)
            return -1;
    }
    e = &r->s[tail & (RING_SLOTS - 1)];
    if (shrt) {
        struct ring_short *k = (struct ring_short *)(void *)e->data;
        memcpy(k, h, 24);
        memcpy(&k->src_lid, &h->src_lid, 8);
        k->ack_psn = h->ack_psn;
        k->ack_epoch = h->ack_epoch;
        k->sid = h->sid;
        memcpy(e->data + sizeof(*k), s->buf + sizeof(*h), plen);
        e->len = RING_SHORT | (uint32_t)(sizeof(*k) + plen);
    }
    else {
        e->len = (uint32_t)s->len;
        memcpy(e->data, s->buf, s->len);
    }
    __atomic_store_n(&e->seq, (uint32_t)(tail + 1), __ATOMIC_RELEASE);
    p->tx_tail = tail + 1;
    return 0;
}

/* After ring_put: does p's progress thread sleep (then it must be rung)? */
static inline int
ring_bell_needed(struct peer *p)
{
    struct ring *r = p->tx;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->sleep, __ATOMIC_RELAXED) == 0)
        return 0;
    return __atomic_exchange_n(&r->sleep, 0, __ATOMIC_SEQ_CST) != 0;
}

#endif /* PYRDMA_FABRIC_H */
