/* provider_ucx.c - the software fabric: verbs semantics on UCP active messages
   (and one-sided access to shared memory where UCX allows it). */

/*
 * A "NIC" in software.  Every process has one fabric node (device "ucx0"):
 * a UCP context and worker (thread mode MULTI), a sockaddr listener, a
 * progress thread and an entry in the rendezvous directory.  Contexts,
 * PDs, CQs, QPs... are plain C structs of this file, guarded by one mutex
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
 * on the same QP (F_ACK, see in_app_poll and piggyback_ack).
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
 *  - any check that fails, or any other case (tcp, user buffers, IMM,
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
 * (it drives progress in poll_cq), and a poll_cq that keeps finding
 * nothing yields the CPU once per 64 empty polls: on a small machine the
 * peer it waits for may need this CPU.
 *
 * Security: every endpoint's first message is a HELLO that proves the
 * sender's key (same host: the receiver's, from its 0600 node record;
 * other hosts: RDMA_UCX_SECRET) and gives a session id that every later
 * message carries; a message counts only under its sender's session and
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
#include <linux/tcp.h>   /* struct tcp_info with tcpi_bytes_received/acked */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>   /* enum values only: no libibverbs call */
#include <ucp/api/ucp.h>

#include "provider.h"

/* ------------------------------------------------------------------ */
/* libucp, loaded with dlopen                                          */

static struct {
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
} U;

/* ------------------------------------------------------------------ */
/* constants                                                           */

#define DEV_NAME "ucx0"
#define AM_REQ 17
#define AM_RESP 18
#define QPN_IDX_BITS 14
#define MAX_QP (1 << QPN_IDX_BITS)
#define MAX_WR 16384
#define MAX_SGE 16
#define MAX_INLINE 4096
#define MAX_CQE (1 << 20)
#define MAX_RD_ATOM 16
#define SLOT_SMALL 192          /* preallocated payload bytes per send slot */
#define GRH_LEN 40
#define PORT_MTU IBV_MTU_4096
#define MAX_MSG (1u << 31)
#define MAX_MR_SIZE (1ull << 47)    /* device_attr.max_mr_size */
#define SALT_TRIES 64
#define DEADLINE_UNSET 1        /* struct slot: the timer has not started */

/* REQ operations */
enum { OP_SEND, OP_WRITE, OP_READ, OP_CAS, OP_FAA };
/* REQ flags */
enum { F_IMM = 1, F_SOLICITED = 2, F_ACK = 4 };
/* RESP codes */
enum { R_ACK, R_READ, R_ATOMIC, R_RNR_WAIT, R_RNR_EXC, R_REM_ACCESS,
       R_REM_INV, R_REM_OP, R_NOQP };

/* The header of every message ("BTH" + "RETH"/"AtomicETH"/"DETH"). */
struct wire {
    uint8_t kind;        /* AM_REQ or AM_RESP */
    uint8_t op;          /* REQ: OP_*; RESP: R_* */
    uint8_t flags;       /* F_*; F_ACK: ack_psn/ack_epoch are valid */
    uint8_t rnr_retry;   /* requester's rnr_retry (REQ) */
    uint32_t dst_qpn;    /* the QP it is for */
    uint32_t src_qpn;    /* the QP it is from */
    uint32_t psn;        /* REQ: its PSN; ACK: last PSN acknowledged */
    uint32_t slot;       /* requester's SQ index (echoed) */
    uint32_t epoch;      /* requester QP incarnation (echoed) */
    uint64_t src_guid;   /* sending node */
    uint16_t src_lid;    /* sending node's LID */
    uint16_t qp_type;    /* IBV_QPT_* of the sender */
    uint32_t imm;        /* immediate data, network order */
    uint32_t rkey;       /* remote key */
    uint32_t qkey;       /* UD Q_Key */
    uint32_t len;        /* payload bytes (SEND/WRITE) or READ length */
    uint32_t ack_psn;    /* REQ with F_ACK: a cumulative ACK the request */
    uint64_t raddr;      /* remote address */
    uint64_t cmp;        /* atomic compare or add */
    uint64_t swap;       /* atomic swap */
    uint32_t ack_epoch;  /*   carries for the sender's own QP (piggyback) */
    uint32_t pad;
    uint64_t sid;        /* the sender's session with the receiver (its
                            HELLO): binds the message to src_guid */
};

/* ------------------------------------------------------------------ */
/* the key page: what a same-host initiator checks before a one-sided op */

#define SH_MAGIC 0x4b435855u    /* "UXCK" */
#define SH_VERSION 4            /* 3: struct wire has a session id (rings);
                                   4: three more counters */
#define SH_MR 4096              /* MR keys with an index below this can be
                                   the target of a one-sided op */
#define SH_RKEY_MAX 200         /* packed UCX rkey bytes */
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

/* An MR of this node in UCX-allocated memory. */
struct sh_mr {
    uint32_t key;          /* its rkey, 0: none (published last, cleared
                              first) */
    uint32_t access;       /* IBV_ACCESS_* */
    uint32_t inflight;     /* initiators inside an op on it */
    uint32_t rkey_len;     /* bytes in rkey */
    uint64_t pd;           /* PD identity */
    uint64_t addr, len;    /* the region */
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
    uint64_t pad1[7];        /* the QP table starts on a cache line */
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
 * through the same code as an active message (am_dispatch).
 * An entry is published by its `seq` (written last); the receiver polls
 * the next entry's seq, so a request costs the receiver the lines of its
 * entry only.
 * Waking a sleeping receiver: its progress thread sets `sleep` in each of
 * its rings, then looks at them once more before it sleeps; a writer
 * publishes an entry, then takes `sleep` (both seq_cst), and if it was
 * set sends a UCP message (AM_CTL_BELL) whose arrival wakes the thread.
 * A request that carries an ACK goes through UCP once its QP has sent a
 * NAK (through UCP): a cumulative ACK must not pass the NAK before it.
 */
#define RING_MAGIC 0x474e4952u  /* "RING" */
#define RING_SLOTS 256          /* a power of 2 */
#define RING_SLOT 512           /* bytes per entry */
#define RING_DATA (RING_SLOT - 8)
#define MAX_RX_RINGS 256        /* rings a node accepts */

struct ring_slot {
    uint32_t seq;          /* (entry number + 1) mod 2^32 once written
                              (release): the receiver polls this, in the
                              line it then reads anyway */
    uint32_t len;          /* bytes in data (struct wire + payload) */
    uint8_t data[RING_DATA];
};

struct ring {
    uint32_t magic, version;
    int32_t pid;           /* the sender (the stale-file sweep reads it) */
    uint32_t open;         /* set by the receiver once mapped */
    uint64_t src_guid, dst_guid;
    uint32_t sleep;        /* 1: the receiver's progress thread is about to
                              sleep or sleeps: the writer must ring (in
                              this line, which the writer reads anyway and
                              the receiver writes only around a sleep) */
    uint8_t pad0[28];
    uint64_t head;         /* entries executed (receiver; the writer reads
                              it only when the ring looks full) */
    uint8_t pad1[56];
    struct ring_slot s[RING_SLOTS];
};
_Static_assert(offsetof(struct ring, head) == 64 &&
               offsetof(struct ring, s) == 128, "struct ring layout");

/* control messages (struct wire with this kind, through UCP) */
#define AM_CTL_RINGOPEN 40      /* map my ring to you */
#define AM_CTL_BELL 41          /* look at your rings */

/* A cached unpacked rkey of a peer's MR (index: key >> 8). */
struct rkc {
    uint32_t key;          /* the full key it is for, 0: empty */
    uint64_t addr;         /* the region's address at the target */
    uint8_t *base;         /* where it is mapped here, NULL: not mappable */
    ucp_rkey_h rkey;       /* UCX handle */
};

/* Memory of alloc_mr_mem. */
struct umem {
    struct umem *next;
    uint8_t *addr;
    size_t len;
    size_t maplen;         /* bytes UCX mapped at addr (whole pages) */
    uint8_t *shadow;       /* revoked (mem_revoke): UCX's shared mapping
                              moved here, a private copy is at addr */
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
    uint32_t head, tail;   /* consumer / producer */
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
    pid_t pid;             /* same host: its pid (0: unknown) */
    uint64_t next_check;   /* next liveness check (ns) */
    struct sh_page *sh;    /* same host: its key page, or NULL */
    struct rkc *rk;        /* SH_MR cached rkeys (with sh) */
    int ring_state;        /* 0: none yet, 1: ring made (tx), -1: never */
    struct ring *tx;       /* request ring to it (usable once tx->open) */
    uint64_t tx_head;      /* tx->head as last read (N.lock) */
    uint64_t tx_tail;      /* entries written to tx (N.lock) */
    uint64_t tx_sid;       /* our session with it (our HELLO; in every
                              message we send it) */
    uint64_t rx_sid;       /* its session with us (its HELLO), 0: none:
                              its messages must carry it */
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
    /* send queue */
    struct slot *sq;       /* ring */
    uint32_t sq_mask;      /* ring size - 1 */
    uint32_t sq_head, sq_tail; /* oldest uncompleted, next free */
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
    /* a deferred ACK (see in_app_poll): held here, not in the outbox,
       until a request carries it or a full drain sends it */
    int dack;              /* one is held */
    int dack_listed;       /* q is on N.dack_head's list */
    uint32_t dack_psn, dack_slot, dack_epoch, dack_dst_qpn;
    ucp_ep_h dack_ep;      /* where it goes */
    struct uqp *dack_next; /* N.dack_head's list */
    unsigned n_inflight;   /* its slots with inflight set (N.lock) */
    int rx_seen;           /* executed a request since its last post_send */
    int alt;               /* receive/post alternations seen (max 4): its
                              ACKs are deferred from 2 on (in_app_poll) */
    int naked;             /* queued a NAK: its requests that carry an
                              ACK go through UCP (struct ring) */
    int destroyed;         /* being destroyed */
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
    struct peer *peer;     /* resolved node */
    struct pyrdma_ah_attr attr; /* as created */
};

/* Memory UCP may still use after its owner went away. */
struct grave {
    struct grave *next;
    struct slot *sq;       /* slots, freed at exit */
};

/* The process's fabric node. */
static struct node {
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
    uint64_t guid;         /* host order */
    uint16_t lid;
    uint8_t gid[16];
    uint32_t ip;           /* network order */
    uint16_t port;         /* host order, 0: no listener */
    char dir[200];         /* rendezvous directory */
    char nodefile[260], lidfile[260];
    char boot_id[40];
    unsigned long netns;
    /* tables */
    struct uqp *qps[MAX_QP];
    uint16_t qp_gen[MAX_QP];
    uint32_t qp_next;
    struct umr **mrs;
    uint8_t *mr_gen;
    uint32_t nmr;
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
} N = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .drain_lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* This process was forked from one whose node was up.  UCX's async thread
   (which serves its tcp transport's sockets) is not in the child, and UCX
   starts no new one: only shared memory works here. */
static int forked_from_node;
#define FORK_TCP_MSG "forked from a process whose fabric node was up: " \
    "UCX's tcp transport cannot work after fork() (its async thread is " \
    "not in the child); use shared memory (UCX_TLS unset or naming shm), " \
    "multiprocessing's 'spawn' method, or fork before using the fabric"

#define LOCK() pthread_mutex_lock(&N.lock)
#define UNLOCK() pthread_mutex_unlock(&N.lock)

static uint64_t
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int
ucs_fail(struct pyrdma_status *st, ucs_status_t s, const char *func,
         const char *what)
{
    return pyrdma_fail(st, s == UCS_ERR_NO_MEMORY ? ENOMEM : EIO, func,
                       "%s: %s", what, U.status_string ? U.status_string(s)
                                                       : "UCX error");
}

/* ------------------------------------------------------------------ */
/* loading                                                             */

static int
load(struct pyrdma_status *st)
{
    const char *lib;

    if (U.loaded)
        return 0;
    lib = getenv("RDMA_UCX_LIBRARY");
    if (lib == NULL || lib[0] == '\0')
        lib = "libucp.so.0";
    if (U.dl == NULL) {
        U.dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (U.dl == NULL) {
            const char *why = dlerror();
            return pyrdma_fail(st, ENOENT, "dlopen",
                               "cannot load %s (%s); install the Debian "
                               "package libucx0 (UCX)", lib,
                               why ? why : "unknown error");
        }
    }
#define REQ(field, name) \
    if ((*(void **)&U.field = dlsym(U.dl, name)) == NULL) { \
        pyrdma_fail(st, ENOSYS, "dlsym", "%s has no symbol %s (UCX too " \
                    "old? 1.13 or later is needed)", lib, name); \
        goto fail; \
    }
    REQ(config_read, "ucp_config_read");
    REQ(config_release, "ucp_config_release");
    REQ(config_modify, "ucp_config_modify");
    REQ(init_version, "ucp_init_version");
    REQ(cleanup, "ucp_cleanup");
    REQ(get_version, "ucp_get_version");
    REQ(worker_create, "ucp_worker_create");
    REQ(worker_get_address, "ucp_worker_get_address");
    REQ(worker_release_address, "ucp_worker_release_address");
    REQ(worker_progress, "ucp_worker_progress");
    REQ(worker_get_efd, "ucp_worker_get_efd");
    REQ(worker_arm, "ucp_worker_arm");
    REQ(worker_signal, "ucp_worker_signal");
    REQ(worker_set_am_recv_handler, "ucp_worker_set_am_recv_handler");
    REQ(listener_create, "ucp_listener_create");
    REQ(listener_query, "ucp_listener_query");
    REQ(listener_reject, "ucp_listener_reject");
    REQ(ep_create, "ucp_ep_create");
    REQ(ep_close_nbx, "ucp_ep_close_nbx");
    REQ(conn_request_query, "ucp_conn_request_query");
    REQ(am_send_nbx, "ucp_am_send_nbx");
    REQ(am_recv_data_nbx, "ucp_am_recv_data_nbx");
    REQ(request_free, "ucp_request_free");
    REQ(status_string, "ucs_status_string");
    REQ(mem_map, "ucp_mem_map");
    REQ(mem_unmap, "ucp_mem_unmap");
    REQ(mem_query, "ucp_mem_query");
    REQ(rkey_pack, "ucp_rkey_pack");
    REQ(rkey_buffer_release, "ucp_rkey_buffer_release");
    REQ(ep_rkey_unpack, "ucp_ep_rkey_unpack");
    REQ(rkey_ptr, "ucp_rkey_ptr");
    REQ(rkey_destroy, "ucp_rkey_destroy");
#undef REQ
    U.loaded = 1;
    return 0;
fail:
    dlclose(U.dl);
    U.dl = NULL;
    return -1;
}

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static uint32_t
pow2(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

/* Signed distance of 24-bit PSNs: a - b. */
static int32_t
psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b) << 8) >> 8;
}

static void
wake_progress(void)
{
    if (N.w != NULL)
        U.worker_signal(N.w);
}

static void
ctx_event(struct uctx *c, int type, int kind, void *element)
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

static struct umr *
mr_lookup(uint32_t key)
{
    uint32_t idx = key >> 8;
    if (idx == 0 || idx >= N.nmr || N.mrs[idx] == NULL ||
        N.mrs[idx]->key != key)
        return NULL;
    return N.mrs[idx];
}

/* Return 1 if [addr, addr+len) lies in mr. */
static int
in_mr(const struct umr *mr, uint64_t addr, uint64_t len)
{
    uint64_t start = (uint64_t)(uintptr_t)mr->addr;
    return addr >= start && len <= mr->len && addr - start <= mr->len - len;
}

/* Check a local s/g list against the key table: 0 or an IBV_WC_* status. */
static int
check_sges(struct upd *pd, const struct pyrdma_sge *sg, int n, int write,
           int bad_status)
{
    int i;
    for (i = 0; i < n; i++) {
        struct umr *mr;
        if (sg[i].length == 0)
            continue;
        mr = mr_lookup(sg[i].lkey);
        if (mr == NULL || mr->pd != pd || !in_mr(mr, sg[i].addr, sg[i].length)
            || (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
            return bad_status;
    }
    return 0;
}

/* Scatter len bytes of src into a checked s/g list; return bytes copied. */
static size_t
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

/* ------------------------------------------------------------------ */
/* the key page (one-sided fast path)                                  */

/* Publish q's responder state for one-sided initiators (N.lock held):
   RC, RTR/RTS, connected.  Withdrawing it only clears qpn; destroy_qp
   then waits for the initiators still inside an op (sh_quiesce). */
static void
sh_qp_sync(struct uqp *q)
{
    struct sh_qp *e;
    int ok;
    if (N.sh == NULL)
        return;
    e = &N.sh->qp[q->qpn & (MAX_QP - 1)];
    ok = !q->destroyed && q->type == IBV_QPT_RC && q->peer != NULL &&
         (q->attr.qp_state == IBV_QPS_RTR || q->attr.qp_state == IBV_QPS_RTS);
    if (!ok) {
        if (__atomic_load_n(&e->qpn, __ATOMIC_RELAXED) == q->qpn)
            __atomic_store_n(&e->qpn, 0, __ATOMIC_SEQ_CST);
        return;
    }
    if (__atomic_load_n(&e->qpn, __ATOMIC_RELAXED) == q->qpn &&
        e->dest_qpn == q->attr.dest_qp_num &&
        e->peer_guid == q->peer->guid) {
        __atomic_store_n(&e->access, q->attr.qp_access_flags,
                         __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_store_n(&e->qpn, 0, __ATOMIC_SEQ_CST);
    e->dest_qpn = q->attr.dest_qp_num;
    e->peer_guid = q->peer->guid;
    e->pd = (uint64_t)(uintptr_t)q->pd;
    e->access = q->attr.qp_access_flags;
    __atomic_store_n(&e->qpn, q->qpn, __ATOMIC_SEQ_CST);
}

/* Wait (bounded) until no initiator is inside an op counted by *ctr.  An
   initiator killed or stopped inside an op leaves the count up: after
   SH_WAIT_NS the count is reset.  Return 0, or 1 if it was reset (an
   initiator may still be inside: see mem_revoke). */
static int
sh_quiesce(uint32_t *ctr)
{
    uint64_t t0 = 0;
    while (__atomic_load_n(ctr, __ATOMIC_SEQ_CST) != 0) {
        uint64_t t = now_ns();
        if (t0 == 0)
            t0 = t;
        else if (t - t0 > SH_WAIT_NS) {
            __atomic_store_n(ctr, 0, __ATOMIC_SEQ_CST);
            return 1;
        }
        sched_yield();
    }
    return 0;
}

/* Is the open file fd private to this user: a regular file owned by
   the effective uid, no permission bits for group or others?  Every file
   of the rendezvous directory is (the node makes them 0600); one that is
   not was put there by someone else and is not trusted.  1 or 0. */
static int
fd_private(int fd, struct stat *sb)
{
    return fstat(fd, sb) == 0 && S_ISREG(sb->st_mode) &&
           sb->st_uid == geteuid() && (sb->st_mode & 077) == 0;
}

/* open(2) for a file of the rendezvous directory: never through a
   symbolic link, and only a private file (fd_private); -1 with errno
   EPERM for a file of someone else's. */
static int
priv_open(const char *path, int flags, mode_t mode)
{
    struct stat sb;
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -1;
    if (!fd_private(fd, &sb)) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Map the shared file at path, which must be size bytes (open flags
   oflags besides O_RDWR | O_CLOEXEC), anywhere (at NULL) or at address
   at; NULL if it cannot be (or is not private: priv_open). */
static void *
shm_file_map(const char *path, size_t size, int oflags, void *at)
{
    struct stat sb;
    void *m;
    int fd = priv_open(path, O_RDWR | oflags, 0);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != size) {
        close(fd);
        return NULL;
    }
    /* at: in place of what is mapped there (MAP_FIXED; not mremap, which
       UCX's memory hooks do not pass a new address to) */
    m = mmap(at, size, PROT_READ | PROT_WRITE,
             MAP_SHARED | (at != NULL ? MAP_FIXED : 0), fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* Create the temporary file tmp, size bytes of zeros, and map it (the
   caller fills it, then renames it into place); NULL (and no file) if it
   cannot be. */
static void *
shm_file_create(const char *tmp, size_t size)
{
    void *m;
    int fd = priv_open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return NULL;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        unlink(tmp);
        return NULL;
    }
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(tmp);
        return NULL;
    }
    return m;
}

/* Map the key page of a same-host node (NULL if it has none). */
static struct sh_page *
sh_map(uint64_t guid)
{
    char path[300];
    struct sh_page *sh;
    snprintf(path, sizeof(path), "%s/keys-%016llx", N.dir,
             (unsigned long long)guid);
    sh = shm_file_map(path, sizeof(*sh), 0, NULL);
    if (sh == NULL)
        return NULL;
    if (sh->magic != SH_MAGIC || sh->version != SH_VERSION ||
        sh->guid != guid) {
        munmap(sh, sizeof(*sh));
        return NULL;
    }
    return sh;
}

/* Create this node's key page; without it there is no fast path. */
static void
sh_create(void)
{
    char tmp[300];
    struct sh_page *sh;
    snprintf(N.shfile, sizeof(N.shfile), "%s/keys-%016llx", N.dir,
             (unsigned long long)N.guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", N.shfile, (int)getpid());
    sh = shm_file_create(tmp, sizeof(*sh));
    if (sh == NULL)
        return;
    sh->version = SH_VERSION;
    sh->pid = getpid();
    sh->guid = N.guid;
    __atomic_store_n(&sh->magic, SH_MAGIC, __ATOMIC_SEQ_CST);
    if (rename(tmp, N.shfile) != 0) {
        munmap(sh, sizeof(*sh));
        unlink(tmp);
        return;
    }
    N.sh = sh;
}

/* Unpack and cache the rkey of key at peer p (N.lock not held: UCP is
   called).  A key the page does not (or no longer) describe is not
   cached: its WRs keep the active-message path. */
static void
rk_fetch(struct peer *p, uint32_t key)
{
    struct sh_mr *m;
    uint8_t buf[SH_RKEY_MAX];
    uint32_t k1, len;
    uint64_t addr;
    ucp_rkey_h rkey = NULL, old = NULL;
    void *base = NULL;
    struct rkc *c;

    if (p->sh == NULL || (key >> 8) == 0 || (key >> 8) >= SH_MR)
        return;
    m = &p->sh->mr[key >> 8];
    k1 = __atomic_load_n(&m->key, __ATOMIC_SEQ_CST);
    len = m->rkey_len;
    addr = m->addr;
    if (k1 != key || len == 0 || len > SH_RKEY_MAX)
        return;
    memcpy(buf, m->rkey, len);
    if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) != key)
        return;                 /* changed while we copied */
    if (U.ep_rkey_unpack(p->ep, buf, &rkey) != UCS_OK)
        return;
    if (U.rkey_ptr(rkey, addr, &base) != UCS_OK)
        base = NULL;            /* not mappable: the AM path stays */
    LOCK();
    c = &p->rk[key >> 8];
    if (c->key == key) {
        old = rkey;             /* someone else was quicker */
    }
    else {
        old = c->rkey;
        c->addr = addr;
        c->base = base;
        c->rkey = rkey;
        __atomic_store_n(&c->key, key, __ATOMIC_RELEASE);
    }
    UNLOCK();
    if (old != NULL)
        U.rkey_destroy(old);
}

/* ------------------------------------------------------------------ */
/* completion queues and channels                                      */

static void
cc_push(struct ucc *cc, struct ucq *cq)
{
    uint64_t one = 1;
    if (cc->tail - cc->head == cc->cap) {
        uint32_t ncap = cc->cap ? cc->cap * 2 : 16, i, n = cc->tail - cc->head;
        void **q = malloc(sizeof(*q) * ncap);
        struct ucq **qc = malloc(sizeof(*qc) * ncap);
        if (q == NULL || qc == NULL) {
            free(q);
            free(qc);
            return;
        }
        for (i = 0; i < n; i++) {
            q[i] = cc->q[(cc->head + i) % cc->cap];
            qc[i] = cc->qcq[(cc->head + i) % cc->cap];
        }
        free(cc->q);
        free(cc->qcq);
        cc->q = q;
        cc->qcq = qc;
        cc->head = 0;
        cc->tail = n;
        cc->cap = ncap;
    }
    cc->q[cc->tail % cc->cap] = cq->cq_context;
    cc->qcq[cc->tail % cc->cap] = cq;
    cc->tail++;
    if (write(cc->fd, &one, sizeof(one)) < 0) {
        /* cannot overflow in practice */
    }
}

static struct uqp *qp_lookup(uint32_t qpn);
static void qp_enter_err(struct uqp *q);

/* A full CQ lost a completion of q: q goes to ERR with
   IBV_EVENT_QP_FATAL, as a NIC's QP does (its outstanding WRs flush; the
   caller, or the next ACK, completes them).  N.lock held. */
static void
qp_cq_lost(struct uqp *q)
{
    uint32_t i;
    if (q == NULL || q->attr.qp_state == IBV_QPS_ERR)
        return;
    for (i = q->sq_head; i != q->sq_tail; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        if (!s->done) {
            s->done = 1;
            s->status = IBV_WC_WR_FLUSH_ERR;
        }
    }
    q->err_pending = 1;
    qp_enter_err(q);
    ctx_event(q->pd->ctx, IBV_EVENT_QP_FATAL, PYRDMA_EV_QP, q->qp_context);
}

/* Append a completion; raise the CQ's event if it is armed for it. */
static void
cq_push(struct ucq *cq, const struct pyrdma_wc *wc, int solicited)
{
    if (cq->tail - cq->head >= cq->cqe) {
        if (!cq->overrun) {
            cq->overrun = 1;
            ctx_event(cq->ctx, IBV_EVENT_CQ_ERR, PYRDMA_EV_CQ,
                      cq->cq_context);
        }
        qp_cq_lost(qp_lookup(wc->qp_num));
        return;
    }
    cq->ring[cq->tail & cq->mask] = *wc;
    __atomic_store_n(&cq->tail, cq->tail + 1, __ATOMIC_RELEASE);
    if (cq->armed && cq->cc != NULL &&
        (cq->armed == 1 || solicited || wc->status != IBV_WC_SUCCESS)) {
        cq->armed = 0;
        cc_push(cq->cc, cq);
    }
}

/* ------------------------------------------------------------------ */
/* the outbox: responses, sent in order outside every lock             */

static struct obox *
ob_new_ep(struct uqp *q, ucp_ep_h ep, size_t len)
{
    struct obox *o = N.ob_free;
    if (o != NULL)
        N.ob_free = o->next;
    else if ((o = malloc(sizeof(*o))) == NULL)
        return NULL;
    o->next = NULL;
    o->qp = q;
    o->ep = ep;
    o->late = o->cancel = 0;
    o->len = len;
    o->buf = len <= sizeof(o->small) ? o->small : malloc(len);
    if (o->buf == NULL) {
        o->next = N.ob_free;
        N.ob_free = o;
        return NULL;
    }
    if (N.ob_tail)
        N.ob_tail->next = o;
    else
        N.ob_head = o;
    N.ob_tail = o;
    N.ob_plain++;
    return o;
}

static struct obox *
ob_new(struct uqp *q, size_t len)
{
    return ob_new_ep(q, q->peer->ep, len);
}

static void
ob_recycle(struct obox *o)
{
    if (o->buf != o->small)
        free(o->buf);
    o->buf = NULL;
    o->next = N.ob_free;
    N.ob_free = o;
}

static void
resp_header(struct wire *r, struct uqp *q, const struct wire *h, int code)
{
    memset(r, 0, sizeof(*r));
    r->kind = AM_RESP;
    r->op = (uint8_t)code;
    r->dst_qpn = h->src_qpn;
    r->src_qpn = q->qpn;
    r->psn = h->psn;
    r->slot = h->slot;
    r->epoch = h->epoch;
    r->src_guid = N.guid;
    r->src_lid = N.lid;
    r->sid = q->peer != NULL ? q->peer->tx_sid : 0;
}

/* Set while the application's own poll_cq makes progress: an ACK queued
   then may wait (uqp.dack) for the application's next request on that
   QP to carry it (F_ACK), if the QP has shown that pattern (uqp.alt: a
   post_send after requests came in, twice running; a deferred ACK that
   no request took sets it back below the mark, so that a QP that stopped
   replying does not defer again before it replies again).
   A deferred ACK is sent by the next full drain: an empty poll_cq, the
   progress thread (within about a millisecond), destroy_qp of its QP (a
   program that closes and exits right after its last receive), the end
   of the process (node_atexit) or a request's post_send taking it over.  Only drain(0) (a poll_cq that returns completions,
   post_recv) leaves it held.  A deferred ACK is held in its QP (no
   outbox entry made, then cancelled, per message); the QPs holding one
   are on N.dack_head's list, which a full drain empties. */
static __thread int in_app_poll __attribute__((tls_model("initial-exec")));

/* Is anything queued that drain(0) would send (N.lock held)?  Deferred
   ACKs wait, and ACKs a request carried are recycled by a later drain. */
static int
ob_urgent(void)
{
    return N.ob_plain != 0;
}

/* The deferred ACK q holds goes into the outbox (N.lock held): late, a
   full drain sends it because no request took it; else something must
   follow it (a response, an ACK of another epoch). */
static void
dack_queue(struct uqp *q, int late)
{
    struct obox *o;
    struct wire h;
    if (!q->dack)
        return;
    q->dack = 0;
    o = ob_new_ep(q, q->dack_ep, sizeof(struct wire));
    if (o == NULL)
        return;
    memset(&h, 0, sizeof(h));
    h.src_qpn = q->dack_dst_qpn;
    h.psn = q->dack_psn;
    h.slot = q->dack_slot;
    h.epoch = q->dack_epoch;
    resp_header((struct wire *)o->buf, q, &h, R_ACK);
    o->late = late;
    q->ack_item = o;
}

/* A full drain: every deferred ACK goes into the outbox (N.lock held). */
static void
dack_queue_all(void)
{
    struct uqp *q, *next;
    for (q = N.dack_head; q != NULL; q = next) {
        next = q->dack_next;
        q->dack_next = NULL;
        q->dack_listed = 0;
        dack_queue(q, 1);
    }
    N.dack_head = NULL;
}

/* q is going away: off N.dack_head's list (N.lock held). */
static void
dack_unlist(struct uqp *q)
{
    struct uqp **pp;
    if (!q->dack_listed)
        return;
    for (pp = &N.dack_head; *pp != NULL; pp = &(*pp)->dack_next)
        if (*pp == q) {
            *pp = q->dack_next;
            break;
        }
    q->dack_next = NULL;
    q->dack_listed = 0;
}

/* Queue a coalescing ACK of h->psn for q. */
static void
queue_ack(struct uqp *q, const struct wire *h)
{
    struct obox *o = q->ack_item;
    if (q->peer == NULL || q->peer->failed)
        return;
    q->rx_seen = 1;
    if (q->dack) {
        if (q->dack_epoch == h->epoch) {
            q->dack_psn = h->psn;       /* it acknowledges this one too */
            q->dack_slot = h->slot;
            return;
        }
        dack_queue(q, 0);               /* another epoch's: in order */
        o = q->ack_item;
    }
    if (o != NULL) {
        struct wire *r = (struct wire *)o->buf;
        if (r->epoch == h->epoch) {
            r->psn = h->psn;
            r->slot = h->slot;
            return;
        }
    }
    if (in_app_poll && q->alt >= 2) {
        /* held for the application's next request on q to carry */
        q->dack = 1;
        q->dack_psn = h->psn;
        q->dack_slot = h->slot;
        q->dack_epoch = h->epoch;
        q->dack_dst_qpn = h->src_qpn;
        q->dack_ep = q->peer->ep;
        q->ack_item = NULL;     /* later ACKs coalesce into this one */
        if (!q->dack_listed) {
            q->dack_listed = 1;
            q->dack_next = N.dack_head;
            N.dack_head = q;
        }
        return;
    }
    o = ob_new(q, sizeof(struct wire));
    if (o == NULL)
        return;
    resp_header((struct wire *)o->buf, q, h, R_ACK);
    q->ack_item = o;
}

/* Queue a response other than an ACK (data may be NULL). */
static void
queue_resp(struct uqp *q, const struct wire *h, int code, const void *data,
           size_t dlen)
{
    struct obox *o;
    if (q->peer == NULL || q->peer->failed)
        return;
    dack_queue(q, 0);       /* an ACK held for q goes first */
    o = ob_new(q, sizeof(struct wire) + dlen);
    if (o == NULL)
        return;
    resp_header((struct wire *)o->buf, q, h, code);
    if (code != R_READ && code != R_ATOMIC && code != R_RNR_WAIT)
        q->naked = 1;
    ((struct wire *)o->buf)->len = (uint32_t)dlen;
    if (dlen)
        memcpy(o->buf + sizeof(struct wire), data, dlen);
    q->ack_item = NULL;     /* later ACKs must come after this */
}

static void
ob_sent_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    LOCK();
    ob_recycle(user);
    UNLOCK();
    __atomic_fetch_sub(&N.ob_pending, 1, __ATOMIC_RELEASE);
    U.request_free(req);
}

/* Send the outbox.  Never called with N.lock held nor from a UCP callback;
   whoever holds drain_lock sends everything, in order.  all = 0 (on the
   application's critical path) sends all but the deferred ACKs, which
   stay held in their QPs, and does not look again for what others queued
   while it held drain_lock: the next full drain (an empty poll_cq, the
   progress thread within ~1 ms) sends that.  all = 2 is all = 1 that
   waits for drain_lock instead of leaving the work to its holder. */
static void
drain(int all)
{
    /* nothing queued (a racy hint: whoever queues drains afterwards) */
    if (__atomic_load_n(&N.ob_head, __ATOMIC_ACQUIRE) == NULL &&
        (!all || __atomic_load_n(&N.dack_head, __ATOMIC_ACQUIRE) == NULL))
        return;
    /* only ACKs requests carried: drain(0) leaves them (same hint) */
    if (!all && __atomic_load_n(&N.ob_plain, __ATOMIC_RELAXED) == 0)
        return;
    for (;;) {
        struct obox *list, *o, *next, *recycle = NULL;
        int busy;
        if (all == 2)
            pthread_mutex_lock(&N.drain_lock);
        else if (pthread_mutex_trylock(&N.drain_lock) != 0)
            return;
        for (;;) {
            struct obox *send = NULL, **send_end = &send;
            LOCK();
            if (all)
                dack_queue_all();
            list = N.ob_head;
            N.ob_head = N.ob_tail = NULL;
            N.ob_plain = 0;
            for (o = list; o; o = next) {
                next = o->next;
                o->next = NULL;
                if (o->cancel) {
                    ob_recycle(o);          /* a request carried it */
                    continue;
                }
                if (o->qp != NULL && o->qp->ack_item == o)
                    o->qp->ack_item = NULL;
                if (N.sh != NULL && ((struct wire *)o->buf)->op == R_ACK)
                    N.sh->st_ack_msg++;
                if (o->late && o->qp != NULL)
                    o->qp->alt = 1;     /* no reply took it: the next
                                           one must come first */
                if (o->late && N.sh != NULL)
                    N.sh->st_ack_late++;
                *send_end = o;
                send_end = &o->next;
            }
            UNLOCK();
            if (send == NULL)
                break;
            for (o = send; o; o = next) {
                ucp_request_param_t p;
                ucs_status_ptr_t r;
                next = o->next;
                memset(&p, 0, sizeof(p));
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                 UCP_OP_ATTR_FIELD_USER_DATA;
                p.cb.send = ob_sent_cb;
                p.user_data = o;
                __atomic_fetch_add(&N.ob_pending, 1, __ATOMIC_RELAXED);
                r = U.am_send_nbx(o->ep, AM_RESP, o->buf,
                                  sizeof(struct wire),
                                  o->buf + sizeof(struct wire),
                                  o->len - sizeof(struct wire), &p);
                if (!UCS_PTR_IS_PTR(r)) {
                    __atomic_fetch_sub(&N.ob_pending, 1, __ATOMIC_RELAXED);
                    o->next = recycle;
                    recycle = o;
                }
            }
            if (recycle) {
                LOCK();
                for (o = recycle; o; o = next) {
                    next = o->next;
                    ob_recycle(o);
                }
                UNLOCK();
                recycle = NULL;
            }
            if (!all)
                break;              /* what came meanwhile: the next one */
        }
        pthread_mutex_unlock(&N.drain_lock);
        if (!all)
            return;     /* the next full drain sends what came meanwhile */
        /* queued meanwhile by a thread that found drain_lock taken? */
        LOCK();
        o = N.ob_head;
        busy = N.dack_head != NULL;
        UNLOCK();
        if (o == NULL && !busy)
            return;
    }
}

/* Send everything queued and deferred (drain(2)) and let UCP hand it over
   (over TCP, to the kernel) for at most 200 ms: before a QP or the
   process goes.  No lock held. */
static void
drain_out(void)
{
    uint64_t t0 = now_ns();
    drain(2);
    while (__atomic_load_n(&N.ob_pending, __ATOMIC_ACQUIRE) != 0 &&
           now_ns() - t0 < 200000000ull)
        U.worker_progress(N.w);
}

/* ------------------------------------------------------------------ */
/* requester side: completions                                         */

static void rq_flush(struct uqp *q);

static void
qp_enter_err(struct uqp *q)
{
    if (q->attr.qp_state == IBV_QPS_ERR)
        return;
    q->attr.qp_state = IBV_QPS_ERR;
    sh_qp_sync(q);
    if (q->srq != NULL)
        ctx_event(q->pd->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, PYRDMA_EV_QP,
                  q->qp_context);
    else
        rq_flush(q);
}

static const int wc_opcode_of[] = {
    [IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
    [IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
    [IBV_WR_SEND] = IBV_WC_SEND,
    [IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
    [IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
    [IBV_WR_ATOMIC_CMP_AND_SWP] = IBV_WC_COMP_SWAP,
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = IBV_WC_FETCH_ADD,
};

/* Complete the done slots at the head of the SQ, in order. */
static void
sq_advance(struct uqp *q)
{
    while (q->sq_head != q->sq_tail) {
        struct slot *s = &q->sq[q->sq_head & q->sq_mask];
        if (!s->done)
            break;
        if (s->status != IBV_WC_SUCCESS || s->signaled) {
            struct pyrdma_wc wc;
            memset(&wc, 0, sizeof(wc));
            wc.wr_id = s->wr_id;
            wc.status = s->status;
            wc.opcode = (s->opcode >= 0 && s->opcode <= 6)
                        ? wc_opcode_of[s->opcode] : IBV_WC_SEND;
            wc.byte_len = s->byte_len;
            wc.qp_num = q->qpn;
            cq_push(q->scq, &wc, 0);
        }
        if (s->status != IBV_WC_SUCCESS && s->status != IBV_WC_WR_FLUSH_ERR)
            qp_enter_err(q);
        q->sq_head++;
    }
}

/* Fail slot i with status; every later WR flushes. */
static void
sq_fail(struct uqp *q, uint32_t i, int status)
{
    uint32_t k;
    struct slot *s = &q->sq[i & q->sq_mask];
    s->done = 1;
    s->status = status;
    for (k = i + 1; k != q->sq_tail; k++) {
        struct slot *t = &q->sq[k & q->sq_mask];
        if (!t->done) {
            t->done = 1;
            t->status = IBV_WC_WR_FLUSH_ERR;
        }
    }
    q->err_pending = 1;
}

/* Fail the first outstanding WR of q (peer gone, timeout). */
static void
sq_fail_outstanding(struct uqp *q, int status)
{
    uint32_t i;
    for (i = q->sq_head; i != q->sq_tail; i++)
        if (!q->sq[i & q->sq_mask].done) {
            sq_fail(q, i, status);
            break;
        }
    sq_advance(q);
}

/* ------------------------------------------------------------------ */
/* receive queues                                                      */

static int
rq_init(struct rq *r, uint32_t max_wr, uint32_t max_sge)
{
    uint32_t n = pow2(max_wr ? max_wr : 1), i;
    r->w = calloc(n, sizeof(*r->w));
    r->sges = calloc((size_t)n * (max_sge ? max_sge : 1), sizeof(*r->sges));
    if (r->w == NULL || r->sges == NULL) {
        free(r->w);
        free(r->sges);
        r->w = NULL;
        r->sges = NULL;
        return -1;
    }
    for (i = 0; i < n; i++)
        r->w[i].sge = r->sges + (size_t)i * (max_sge ? max_sge : 1);
    r->mask = n - 1;
    r->max_wr = max_wr;
    r->max_sge = max_sge;
    r->head = r->tail = 0;
    return 0;
}

static void
rq_free(struct rq *r)
{
    free(r->w);
    free(r->sges);
    r->w = NULL;
    r->sges = NULL;
}

/* Post receives; return 0 or an errno with *bad set. */
static int
rq_post(struct rq *r, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    for (; wr; wr = wr->next) {
        struct rwqe *w;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > r->max_sge) {
            *bad = wr;
            return EINVAL;
        }
        if (r->tail - r->head >= r->max_wr) {
            *bad = wr;
            return ENOMEM;
        }
        w = &r->w[r->tail & r->mask];
        w->wr_id = wr->wr_id;
        w->num_sge = wr->num_sge;
        if (wr->num_sge)
            memcpy(w->sge, wr->sg_list, sizeof(*w->sge) * (size_t)wr->num_sge);
        r->tail++;
    }
    return 0;
}

static void
rq_flush(struct uqp *q)
{
    while (q->rq.head != q->rq.tail) {
        struct rwqe *w = &q->rq.w[q->rq.head & q->rq.mask];
        struct pyrdma_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = w->wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = q->qpn;
        q->rq.head++;
        cq_push(q->rcq, &wc, 0);
    }
}

/* ------------------------------------------------------------------ */
/* responder                                                           */

static const double rnr_ms[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
    0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48,
    30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
};

/* Build the 40-byte GRH of a UD receive (IB: an IPv6-style header). */
static void
build_grh(uint8_t *g, const struct wire *h, size_t plen)
{
    uint32_t vtf = htonl(6u << 28);
    uint16_t paylen = htons((uint16_t)(12 + 8 + ((plen + 3) & ~(size_t)3) +
                                       4));
    uint64_t sg = htobe64(h->src_guid), dg = htobe64(N.guid);
    memcpy(g, &vtf, 4);
    memcpy(g + 4, &paylen, 2);
    g[6] = 0x1B;            /* next header: IBA BTH */
    g[7] = 64;              /* hop limit */
    memcpy(g + 8, N.gid, 8);
    memcpy(g + 16, &sg, 8);
    memcpy(g + 24, N.gid, 8);
    memcpy(g + 32, &dg, 8);
}

enum { RX_DONE, RX_HOLD };

/* Responder errors: NAK, responder QP to ERR. */
static void
rx_nak(struct uqp *q, const struct wire *h, int code)
{
    queue_resp(q, h, code, NULL, 0);
    q->dead_epoch = h->epoch;
    q->dead_valid = 1;
}

/* Execute one request on q; RX_HOLD if it must wait for a receive. */
static int
rx_exec(struct uqp *q, const struct wire *h, const uint8_t *pl, size_t plen,
        struct inmsg *held)
{
    int rc = q->type == IBV_QPT_RC;
    struct rq *r = q->srq ? &q->srq->rq : &q->rq;
    struct umr *mr = NULL;
    int need_recv = h->op == OP_SEND ||
                    (h->op == OP_WRITE && (h->flags & F_IMM));

    if (q->type == IBV_QPT_UD) {
        if (h->qkey != q->attr.qkey || h->op != OP_SEND)
            return RX_DONE;             /* dropped, like a bad Q_Key */
    }
    else if (q->dead_valid && h->epoch == q->dead_epoch)
        return RX_DONE;                 /* its requester went to ERR */
    if (need_recv && r->head == r->tail) {
        if (!rc)
            return RX_DONE;             /* UC/UD: silently dropped */
        if (h->rnr_retry == 0 || (held && held->hold_until &&
                                  !held->hold_forever &&
                                  now_ns() >= held->hold_until)) {
            rx_nak(q, h, R_RNR_EXC);
            return RX_DONE;
        }
        return RX_HOLD;
    }
    if (rc || q->type == IBV_QPT_UC) {
        if (h->op == OP_WRITE || h->op == OP_READ || h->op == OP_CAS ||
            h->op == OP_FAA) {
            unsigned need = h->op == OP_WRITE ? IBV_ACCESS_REMOTE_WRITE :
                            h->op == OP_READ ? IBV_ACCESS_REMOTE_READ :
                            IBV_ACCESS_REMOTE_ATOMIC;
            uint64_t len = h->op >= OP_CAS ? 8 : h->len;
            if (len != 0) {
                mr = mr_lookup(h->rkey);
                if (mr == NULL || mr->pd != q->pd || !(mr->access & need) ||
                    !(q->attr.qp_access_flags & need) ||
                    !in_mr(mr, h->raddr, len) ||
                    (h->op >= OP_CAS && (h->raddr & 7))) {
                    if (rc) {
                        rx_nak(q, h, R_REM_ACCESS);
                        ctx_event(q->pd->ctx, IBV_EVENT_QP_ACCESS_ERR,
                                  PYRDMA_EV_QP, q->qp_context);
                        qp_enter_err(q);
                    }
                    return RX_DONE;
                }
            }
        }
    }
    switch (h->op) {
    case OP_WRITE:
        if (h->len)
            memcpy((void *)(uintptr_t)h->raddr, pl, h->len);
        break;
    case OP_READ: {
        queue_resp(q, h, R_READ, h->len ? (const void *)(uintptr_t)h->raddr
                                        : NULL, h->len);
        return RX_DONE;
    }
    case OP_CAS:
    case OP_FAA: {
        uint64_t *p = (uint64_t *)(uintptr_t)h->raddr, old;
        if (h->op == OP_FAA)
            old = __atomic_fetch_add(p, h->cmp, __ATOMIC_SEQ_CST);
        else {
            old = h->cmp;
            __atomic_compare_exchange_n(p, &old, h->swap, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        }
        queue_resp(q, h, R_ATOMIC, &old, 8);
        return RX_DONE;
    }
    default:
        break;
    }
    if (need_recv) {
        struct rwqe *w = &r->w[r->head & r->mask];
        struct pyrdma_wc wc;
        size_t room = 0, want;
        int i, bad;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = w->wr_id;
        wc.qp_num = q->qpn;
        wc.opcode = h->op == OP_SEND ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
        if (h->flags & F_IMM) {
            wc.wc_flags |= IBV_WC_WITH_IMM;
            wc.imm_data = h->imm;
        }
        for (i = 0; i < w->num_sge; i++)
            room += w->sge[i].length;
        want = h->op == OP_SEND ? plen + (q->type == IBV_QPT_UD ? GRH_LEN : 0)
                                : 0;
        bad = check_sges(q->pd, w->sge, w->num_sge, 1, IBV_WC_LOC_PROT_ERR);
        r->head++;
        if (!bad && want > room)
            bad = IBV_WC_LOC_LEN_ERR;
        if (bad) {
            wc.status = bad;
            cq_push(q->rcq, &wc, 0);
            if (rc)
                rx_nak(q, h, bad == IBV_WC_LOC_LEN_ERR ? R_REM_INV : R_REM_OP);
            qp_enter_err(q);    /* UD too, as rxe and mlx5 do */
            return RX_DONE;
        }
        if (h->op == OP_SEND) {
            if (q->type == IBV_QPT_UD) {
                uint8_t grh[GRH_LEN];
                struct pyrdma_sge tmp[MAX_SGE];
                int k = 0;
                size_t skip = GRH_LEN;
                build_grh(grh, h, plen);
                scatter(w->sge, w->num_sge, grh, GRH_LEN);
                /* the payload goes after the GRH */
                for (i = 0; i < w->num_sge; i++) {
                    if (w->sge[i].length <= skip) {
                        skip -= w->sge[i].length;
                        continue;
                    }
                    tmp[k] = w->sge[i];
                    tmp[k].addr += skip;
                    tmp[k].length -= (uint32_t)skip;
                    skip = 0;
                    k++;
                }
                scatter(tmp, k, pl, plen);
                wc.wc_flags |= IBV_WC_GRH;
                wc.src_qp = h->src_qpn;
                wc.slid = h->src_lid;
            }
            else
                scatter(w->sge, w->num_sge, pl, plen);
            wc.byte_len = (uint32_t)want;
        }
        else
            wc.byte_len = h->len;
        if (q->srq != NULL && q->srq->limit &&
            r->tail - r->head < q->srq->limit) {
            q->srq->limit = 0;
            ctx_event(q->pd->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, PYRDMA_EV_SRQ,
                      q->srq->srq_context);
        }
        cq_push(q->rcq, &wc, h->flags & F_SOLICITED);
    }
    if (rc)
        queue_ack(q, h);
    return RX_DONE;
}

static void
inmsg_free(struct inmsg *m)
{
    free(m->data);
    free(m);
}

/* Process q's queued inbound messages from the head. */
static void
inq_run(struct uqp *q)
{
    while (q->inq != NULL) {
        struct inmsg *m = q->inq;
        const struct wire *h = (const struct wire *)m->data;
        int rc;
        if (!m->ready)
            return;
        if (m->lost || (q->attr.qp_state != IBV_QPS_RTR &&
                        q->attr.qp_state != IBV_QPS_RTS))
            rc = RX_DONE;       /* dropped */
        else
            rc = rx_exec(q, h, m->data + sizeof(*h), m->len - sizeof(*h), m);
        if (rc == RX_HOLD) {
            if (!m->hold_until) {
                double ms = rnr_ms[q->attr.min_rnr_timer & 31];
                m->hold_forever = h->rnr_retry >= 7;
                m->hold_until = now_ns() +
                                (uint64_t)(ms * 1e6 * h->rnr_retry) + 1;
                N.timers = 1;
            }
            if (!m->waited) {
                m->waited = 1;
                queue_resp(q, h, R_RNR_WAIT, NULL, 0);
            }
            return;
        }
        q->inq = m->next;
        if (q->inq == NULL)
            q->inq_tail = NULL;
        inmsg_free(m);
    }
}

static void
inq_append(struct uqp *q, struct inmsg *m)
{
    m->qp = q;
    m->next = NULL;
    if (q->inq_tail)
        q->inq_tail->next = m;
    else
        q->inq = m;
    q->inq_tail = m;
}

struct auth;
static struct auth *auth_find(uint64_t guid);
static int auth_ok(uint64_t guid, uint64_t sid);
static void rx_bad(void);
static void rx_denied(void);

static struct uqp *
qp_lookup(uint32_t qpn)
{
    uint32_t idx = qpn & (MAX_QP - 1);
    struct uqp *q = N.qps[idx];
    return (q != NULL && q->qpn == qpn && !q->destroyed) ? q : NULL;
}

/* A request arrived (N.lock held) with its payload pl (plen bytes), or,
   if rndv, with the payload still to be received: then *rndv_msg is set to
   the queued message whose data must receive it (after the header). */
/* A copy of an inbound request (the header, then the payload; with rndv
   the payload is still to come: *rndv_msg gets the message); NULL if out
   of memory. */
static struct inmsg *
inmsg_new(const struct wire *h, const uint8_t *pl, size_t plen, int rndv,
          struct inmsg **rndv_msg)
{
    struct inmsg *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->len = sizeof(*h) + plen;
    m->data = malloc(m->len);
    if (m->data == NULL) {
        free(m);
        return NULL;
    }
    memcpy(m->data, h, sizeof(*h));
    if (rndv) {
        m->inflight = 1;
        *rndv_msg = m;
    }
    else {
        if (plen)
            memcpy(m->data + sizeof(*h), pl, plen);
        m->ready = 1;
    }
    return m;
}

/* Free (or orphan, while UCP still writes into it) a list of messages. */
static void
inmsg_list_free(struct inmsg *m)
{
    struct inmsg *next;

    for (; m; m = next) {
        next = m->next;
        if (m->inflight)
            m->qp = NULL;       /* freed when UCP is done with it */
        else
            inmsg_free(m);
    }
}

/* Requests that arrived ahead of their turn and whose turn has come move,
   in PSN order, behind the in-order ones. */
static void
ooo_drain(struct uqp *q)
{
    for (;;) {
        struct inmsg **pp, *m = NULL;
        for (pp = &q->ooo; *pp; pp = &(*pp)->next)
            if (((const struct wire *)(*pp)->data)->psn == q->expect_psn) {
                m = *pp;
                *pp = m->next;
                break;
            }
        if (m == NULL)
            return;
        q->expect_psn = (q->expect_psn + 1) & 0xFFFFFF;
        inq_append(q, m);
    }
}

static void
on_req(const struct wire *h, const uint8_t *pl, size_t plen, int rndv,
       struct inmsg **rndv_msg)
{
    struct uqp *q = qp_lookup(h->dst_qpn);
    struct inmsg *m;
    int ok;

    if (N.sh != NULL)
        N.sh->st_am_req++;
    if ((h->op == OP_SEND || h->op == OP_WRITE) && plen != h->len) {
        rx_bad();
        return;                 /* malformed */
    }
    if (q == NULL || q->type != h->qp_type) {
        /* no such QP: an RC requester learns it at once (hardware would
           let it time out) */
        int i;
        if (!auth_ok(h->src_guid, h->sid)) {
            rx_denied();
            return;
        }
        if (h->qp_type != IBV_QPT_RC)
            return;
        for (i = 0; i < N.npeers; i++)
            if (N.peers[i]->guid == h->src_guid && !N.peers[i]->failed &&
                N.peers[i]->rx_sid == h->sid) {
                struct uqp fake;
                memset(&fake, 0, sizeof(fake));
                fake.peer = N.peers[i];
                fake.qpn = h->dst_qpn;
                queue_resp(&fake, h, R_NOQP, NULL, 0);
                if (N.ob_tail != NULL && N.ob_tail->qp == &fake)
                    N.ob_tail->qp = NULL;
                break;
            }
        return;
    }
    /* the sender is who it says (its session), and an RC/UC QP takes
       requests from the node it is connected to only */
    if (q->type == IBV_QPT_UD ? !auth_ok(h->src_guid, h->sid)
                              : (q->peer == NULL ||
                                 q->peer->guid != h->src_guid ||
                                 q->peer->rx_sid != h->sid)) {
        rx_denied();
        return;
    }
    ok = q->attr.qp_state == IBV_QPS_RTR || q->attr.qp_state == IBV_QPS_RTS;
    if (ok && q->type != IBV_QPT_UD && q->attr.dest_qp_num != h->src_qpn)
        ok = 0;
    if (!ok) {
        if (h->qp_type == IBV_QPT_RC && q->peer != NULL)
            queue_resp(q, h, R_NOQP, NULL, 0);
        return;
    }
    if (q->type != IBV_QPT_UD && h->psn != q->expect_psn) {
        /* UCP delivers active messages reliably but not always in order
           (over tcp a short message can pass a longer one): a request
           ahead of its turn waits for the ones before it.  A duplicate or
           one from beyond the send queue's reach is dropped (the requester
           times out, as with a wrong PSN). */
        int32_t d = psn_diff(h->psn, q->expect_psn);
        if (d <= 0 || d > MAX_WR)
            return;
        m = inmsg_new(h, pl, plen, rndv, rndv_msg);
        if (m == NULL)
            return;
        m->qp = q;
        m->next = q->ooo;
        q->ooo = m;
        return;
    }
    if (q->type != IBV_QPT_UD) {
        q->expect_psn = (q->expect_psn + 1) & 0xFFFFFF;
        if (q->ooo != NULL) {
            /* this one, then the early ones its arrival lets through */
            m = inmsg_new(h, pl, plen, rndv, rndv_msg);
            if (m == NULL)
                return;
            inq_append(q, m);
            ooo_drain(q);
            inq_run(q);
            return;
        }
    }
    if (!rndv && q->inq == NULL &&
        rx_exec(q, h, pl, plen, NULL) == RX_DONE)
        return;
    /* keep it: behind others, waiting for a receive, or for its data */
    m = inmsg_new(h, pl, plen, rndv, rndv_msg);
    if (m == NULL)
        return;
    inq_append(q, m);
    inq_run(q);
}

/* A response arrived (N.lock held). */
static void
on_resp(const struct wire *h, const uint8_t *pl, size_t plen)
{
    struct uqp *q = qp_lookup(h->dst_qpn);
    struct slot *s;
    uint32_t i;

    if (q == NULL || q->type != IBV_QPT_RC)
        return;
    if (q->peer == NULL || q->peer->guid != h->src_guid ||
        q->peer->rx_sid != h->sid) {
        rx_denied();            /* only the node it is connected to */
        return;
    }
    if (h->epoch != q->epoch)
        return;                 /* for an earlier incarnation */
    if (h->op == R_ACK) {
        for (i = q->sq_head; i != q->sq_tail; i++) {
            s = &q->sq[i & q->sq_mask];
            if (psn_diff(s->psn, h->psn) > 0)
                break;
            if (!s->done && (s->opcode == IBV_WR_SEND ||
                             s->opcode == IBV_WR_SEND_WITH_IMM ||
                             s->opcode == IBV_WR_RDMA_WRITE ||
                             s->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
                s->done = 1;
                s->status = IBV_WC_SUCCESS;
            }
        }
        sq_advance(q);
        return;
    }
    if ((uint32_t)(h->slot - q->sq_head) >= (uint32_t)(q->sq_tail - q->sq_head))
        return;
    s = &q->sq[h->slot & q->sq_mask];
    if (s->done || s->psn != h->psn)
        return;
    switch (h->op) {
    case R_READ:
    case R_ATOMIC: {
        int bad = check_sges(q->pd, s->sge, s->num_sge, 1,
                             IBV_WC_LOC_PROT_ERR);
        if (bad) {
            sq_fail(q, h->slot, bad);
            break;
        }
        if (h->op == R_ATOMIC) {
            if (plen >= 8)
                scatter(s->sge, s->num_sge, pl, 8);
            s->byte_len = 8;
        }
        else {
            scatter(s->sge, s->num_sge, pl, plen);
            s->byte_len = (uint32_t)plen;
        }
        s->done = 1;
        s->status = IBV_WC_SUCCESS;
        break;
    }
    case R_RNR_WAIT:
        s->rnr_wait = 1;
        s->deadline = 0;
        return;
    case R_RNR_EXC:
        sq_fail(q, h->slot, IBV_WC_RNR_RETRY_EXC_ERR);
        break;
    case R_REM_ACCESS:
        sq_fail(q, h->slot, IBV_WC_REM_ACCESS_ERR);
        break;
    case R_REM_INV:
        sq_fail(q, h->slot, IBV_WC_REM_INV_REQ_ERR);
        break;
    case R_REM_OP:
        sq_fail(q, h->slot, IBV_WC_REM_OP_ERR);
        break;
    default:
        sq_fail(q, h->slot, IBV_WC_RETRY_EXC_ERR);
        break;
    }
    sq_advance(q);
}

/* The cumulative ACK for our side of the QP that the peer's request h
   carries (piggyback_ack; N.lock held). */
static void
on_piggyback_ack(const struct wire *h)
{
    struct wire a;
    memset(&a, 0, sizeof(a));
    a.kind = AM_RESP;
    a.op = R_ACK;
    a.src_guid = h->src_guid;
    a.sid = h->sid;
    a.dst_qpn = h->dst_qpn;
    a.psn = h->ack_psn;
    a.epoch = h->ack_epoch;
    on_resp(&a, NULL, 0);
}

/* Rendezvous data of a message. */
struct rndv_rx {
    struct inmsg *m;       /* REQ: the queued message; NULL for RESP */
    struct wire h;         /* RESP: its header */
    uint8_t *buf;          /* RESP: its payload */
    size_t len;            /* RESP: payload bytes */
};

static void
rndv_done(void *req, ucs_status_t status, size_t length, void *user)
{
    struct rndv_rx *x = user;
    (void)length;
    LOCK();
    if (x->m != NULL) {
        struct inmsg *m = x->m;
        m->inflight = 0;
        if (m->qp == NULL)
            inmsg_free(m);          /* its QP is gone */
        else {
            m->ready = 1;
            m->lost = status != UCS_OK;
            inq_run(m->qp);
        }
    }
    else if (status == UCS_OK)
        on_resp(&x->h, x->buf, x->len);
    UNLOCK();
    free(x->buf);
    free(x);
    if (req != NULL)
        U.request_free(req);
}

/* Is h, with plen payload bytes, a well-formed request or response (its
   kind, op, type, flags, PSN and lengths in range, the payload as long
   as the header says)?  What the responder then checks against its
   state (QP, source, rkey, bounds, access) comes later. */
static int
msg_check(const struct wire *h, size_t plen)
{
    if (h->kind == AM_REQ) {
        if (h->op > OP_FAA || (h->flags & ~(F_IMM | F_SOLICITED | F_ACK)) ||
            (h->qp_type != IBV_QPT_RC && h->qp_type != IBV_QPT_UC &&
             h->qp_type != IBV_QPT_UD) || h->psn > 0xFFFFFF ||
            h->len > MAX_MSG || h->dst_qpn > 0xFFFFFF)
            return 0;
        if (h->op == OP_SEND)
            return plen == h->len;
        if (h->op == OP_WRITE)
            return plen == h->len && h->qp_type != IBV_QPT_UD;
        if (h->qp_type != IBV_QPT_RC || plen != 0)
            return 0;           /* READ and atomics: RC, no payload */
        return h->op == OP_READ || h->len == 8;
    }
    if (h->kind == AM_RESP) {
        if (h->op > R_NOQP || h->dst_qpn > 0xFFFFFF)
            return 0;
        if (h->op == R_READ)
            return plen == h->len;
        if (h->op == R_ATOMIC)
            return plen == 8 && h->len == 8;
        return plen == 0;
    }
    return 0;
}

/* Execute a whole message, from UCP or a ring (N.lock held). */
static void
am_dispatch(const struct wire *h, const uint8_t *pl, size_t plen)
{
    if (h->kind == AM_REQ) {
        if (h->flags & F_ACK)
            on_piggyback_ack(h);
        on_req(h, pl, plen, 0, NULL);
    }
    else if (h->kind == AM_RESP)
        on_resp(h, pl, plen);
}

static void
ring_name(char *buf, size_t n, uint64_t src, uint64_t dst)
{
    snprintf(buf, n, "%s/ring-%016llx-%016llx", N.dir,
             (unsigned long long)src, (unsigned long long)dst);
}

/* Execute the entries ring r holds (N.lock held); return how many. */
static unsigned
ring_run(struct ring *r)
{
    uint64_t head = r->head;
    unsigned n = 0;
    int k;
    for (k = 0; k < RING_SLOTS; k++, head++) {
        const struct ring_slot *e = &r->s[head & (RING_SLOTS - 1)];
        struct wire h;
        uint32_t len;
        if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != (uint32_t)(head + 1))
            break;
        len = e->len;
        if (len < sizeof(h) || len > RING_DATA) {
            rx_bad();
            continue;           /* corrupt: skipped */
        }
        memcpy(&h, e->data, sizeof(h));
        if (h.kind != AM_REQ || !msg_check(&h, len - sizeof(h)))
            rx_bad();
        else if (h.src_guid != r->src_guid)
            rx_denied();        /* the ring is its sender's only */
        else
            am_dispatch(&h, e->data + sizeof(h), len - sizeof(h));
        n++;
    }
    __atomic_store_n(&r->head, head, __ATOMIC_RELEASE);
    return n;
}

/* Execute what the request rings to this node hold; return how many. */
static unsigned
rings_poll(void)
{
    uint32_t i, nr = __atomic_load_n(&N.nrx, __ATOMIC_ACQUIRE);
    unsigned n = 0;

    for (i = 0; i < nr; i++) {
        struct ring *r = N.rx[i];
        uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
        if (__atomic_load_n(&r->s[head & (RING_SLOTS - 1)].seq,
                            __ATOMIC_ACQUIRE) != (uint32_t)(head + 1))
            continue;           /* nothing new */
        LOCK();
        n += ring_run(r);
        UNLOCK();
    }
    return n;
}

static int pid_alive(pid_t pid);

/* Release the rings of senders that died (every 100 ms, N.lock held):
   what a sender wrote before it died is executed (a NIC delivers what
   was on the wire), then its memory goes and the entry's address holds
   zeros for a reader that still looks at it, until the next ring
   accepted takes it (ring_accept).  Without this a node that outlives
   many senders would keep their rings mapped and looked at, and after
   MAX_RX_RINGS of them take no more rings. */
static void
rings_check(uint64_t t)
{
    uint32_t i;
    if (t < N.ring_check)
        return;
    N.ring_check = t + 100000000ull;
    for (i = 0; i < N.nrx; i++) {
        struct ring *r = N.rx[i];
        if (N.rx_free[i] || pid_alive(r->pid))
            continue;
        ring_run(r);
        if (mmap(r, sizeof(*r), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            continue;           /* stays as it is (looked at, harmless) */
        N.rx_free[i] = 1;
        if (N.sh != NULL)
            N.sh->st_ring_gone++;
    }
}

/* Is r a ring from src to this node? */
static int
ring_valid(const struct ring *r, uint64_t src)
{
    return r->magic == RING_MAGIC && r->version == SH_VERSION &&
           r->src_guid == src && r->dst_guid == N.guid;
}

/* Map the ring a same-host node made for its requests to this node (on
   its AM_CTL_RINGOPEN); on any failure it keeps using UCP. */
static void
ring_accept(uint64_t src)
{
    char path[300];
    struct ring *r, *at = NULL;
    uint32_t i;

    if (N.sh == NULL || src == N.guid)
        return;
    ring_name(path, sizeof(path), src, N.guid);
    r = shm_file_map(path, sizeof(*r), O_NOFOLLOW, NULL);
    if (r == NULL)
        return;
    if (!ring_valid(r, src)) {
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    r->head = 0;                /* the writer starts once open is set */
    /* the progress thread may be asleep without knowing this ring: its
       first writer rings once (the thread clears it when it wakes) */
    __atomic_store_n(&r->sleep, 1, __ATOMIC_SEQ_CST);
    LOCK();
    for (i = 0; i < N.nrx; i++)
        if (N.rx_free[i])
            break;
    if (i < N.nrx) {
        /* the entry of a dead sender's ring: the ring is mapped again at
           its address, in place of the zeros there (one mmap: a reader
           without N.lock sees zeros or this ring) */
        at = shm_file_map(path, sizeof(*r), O_NOFOLLOW, N.rx[i]);
        if (at != N.rx[i] || !ring_valid(at, src)) {
            if (at != NULL)     /* (the file changed meanwhile) */
                mmap(N.rx[i], sizeof(*r), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            UNLOCK();
            munmap(r, sizeof(*r));
            unlink(path);
            return;
        }
        N.rx_free[i] = 0;
    }
    else if (N.nrx == MAX_RX_RINGS) {
        UNLOCK();
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    else {
        N.rx[N.nrx] = r;
        __atomic_store_n(&N.nrx, N.nrx + 1, __ATOMIC_RELEASE);
    }
    UNLOCK();
    unlink(path);               /* both sides have it mapped now */
    if (at != NULL) {
        munmap(r, sizeof(*r));  /* the first mapping: not needed */
        r = at;
    }
    __atomic_store_n(&r->open, 1, __ATOMIC_RELEASE);
}

static void
ctl_sent_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    free(user);
    U.request_free(req);
}

/* Send a control message (AM_CTL_*) to p through UCP (no lock held). */
static void
ctl_send(struct peer *p, int kind)
{
    struct wire *h = calloc(1, sizeof(*h));
    ucp_request_param_t prm;
    ucs_status_ptr_t r;

    if (h == NULL)
        return;
    h->kind = (uint8_t)kind;
    h->src_guid = N.guid;
    h->sid = p->tx_sid;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = ctl_sent_cb;
    prm.user_data = h;
    r = U.am_send_nbx(p->ep, AM_REQ, h, sizeof(*h), NULL, 0, &prm);
    if (!UCS_PTR_IS_PTR(r))
        free(h);
}

static int tls_shm(void);

/* Rings are shared memory: used when UCX may use it too (UCX_TLS unset,
   or naming a shared-memory transport), so that UCX_TLS=tcp still means
   TCP; RDMA_UCX_NO_RING=1 turns them off. */
static int
ring_allowed(void)
{
    const char *no = getenv("RDMA_UCX_NO_RING");
    if (no != NULL && no[0] != '\0' && strcmp(no, "0") != 0)
        return 0;
    return tls_shm();
}

/* May UCX use shared memory (UCX_TLS unset, or naming a shared-memory
   transport)?  1 or 0. */
static int
tls_shm(void)
{
    const char *tls = getenv("UCX_TLS");
    int shm;
    if (tls == NULL || tls[0] == '\0')
        return 1;
    shm = strstr(tls, "shm") != NULL || strstr(tls, "sm") != NULL ||
          strstr(tls, "posix") != NULL || strstr(tls, "sysv") != NULL;
    if (tls[0] == '^')                  /* all but those listed */
        return !shm;
    return shm || strstr(tls, "all") != NULL;
}

/* Make the request ring to same-host peer p and ask it to map it (once
   per peer; no lock held). */
static void
ring_make(struct peer *p)
{
    char path[300], tmp[320];
    struct ring *r;
    int zero = 0;

    if (!__atomic_compare_exchange_n(&p->ring_state, &zero, -1, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;                 /* made, or being made, or never */
    if (!ring_allowed())
        return;
    ring_name(path, sizeof(path), N.guid, p->guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
    r = shm_file_create(tmp, sizeof(*r));
    if (r == NULL)
        return;
    r->magic = RING_MAGIC;
    r->version = SH_VERSION;
    r->pid = (int32_t)getpid();
    r->src_guid = N.guid;
    r->dst_guid = p->guid;
    if (rename(tmp, path) != 0) {
        munmap(r, sizeof(*r));
        unlink(tmp);
        return;
    }
    LOCK();
    if (p->failed) {            /* gone meanwhile */
        UNLOCK();
        munmap(r, sizeof(*r));
        unlink(path);
        return;
    }
    p->tx = r;
    p->tx_head = p->tx_tail = 0;
    __atomic_store_n(&p->ring_state, 1, __ATOMIC_RELEASE);
    UNLOCK();
    ctl_send(p, AM_CTL_RINGOPEN);
}

/* Put request slot s (its header is final) into p's ring (N.lock held);
   0: done, -1: it goes through UCP (no ring, full, too big). */
static int
ring_put(struct peer *p, const struct slot *s)
{
    struct ring *r = p->tx;
    uint64_t tail;
    struct ring_slot *e;

    if (r == NULL || s->len > RING_DATA || p->failed ||
        !__atomic_load_n(&r->open, __ATOMIC_ACQUIRE))
        return -1;
    tail = p->tx_tail;
    if (tail - p->tx_head >= RING_SLOTS) {
        p->tx_head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
        if (tail - p->tx_head >= RING_SLOTS)
            return -1;
    }
    e = &r->s[tail & (RING_SLOTS - 1)];
    e->len = (uint32_t)s->len;
    memcpy(e->data, s->buf, s->len);
    __atomic_store_n(&e->seq, (uint32_t)(tail + 1), __ATOMIC_RELEASE);
    p->tx_tail = tail + 1;
    return 0;
}

/* After ring_put: does p's progress thread sleep (then it must be rung)? */
static int
ring_bell_needed(struct peer *p)
{
    struct ring *r = p->tx;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->sleep, __ATOMIC_RELAXED) == 0)
        return 0;
    return __atomic_exchange_n(&r->sleep, 0, __ATOMIC_SEQ_CST) != 0;
}

/* The progress thread is about to sleep (1) or awake (0): tell the
   writers of this node's rings. */
static void
rings_sleep(uint32_t v)
{
    uint32_t i, nr = __atomic_load_n(&N.nrx, __ATOMIC_ACQUIRE);
    for (i = 0; i < nr; i++)
        if (!__atomic_load_n(&N.rx_free[i], __ATOMIC_RELAXED) &&
            __atomic_load_n(&N.rx[i]->sleep, __ATOMIC_RELAXED) != v)
            __atomic_store_n(&N.rx[i]->sleep, v, __ATOMIC_SEQ_CST);
}

/* Wake p's progress thread (no lock held). */
static void
ring_bell(struct peer *p)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_ring_bell, 1, __ATOMIC_RELAXED);
    ctl_send(p, AM_CTL_BELL);
}

/* ------------------------------------------------------------------ */
/* authentication and the listener's guard                             */

/*
 * Who may talk to this node (docs/fabric.rst, "Security model").
 *
 * HELLO: the first message on every endpoint a node makes to another
 * (peer_get) is AM_CTL_HELLO, sent with UCP_AM_SEND_FLAG_REPLY so that
 * the receiver learns the endpoint it came on.  It carries the sender's
 * GUID, LID and pid, a random session id (sid) and a MAC: SipHash-2-4 of
 * (receiver GUID, sender GUID, sid, pid) under a 128-bit key, in wire
 * fields (op: key mode, cmp: MAC, imm: pid):
 *  - HELLO_NODE, a node of the same host (same boot id, any network
 *    namespace): the receiver's own key, random, in its node record (a
 *    0600 file in the user's 0700 rendezvous directory: only the same
 *    user can read it);
 *  - HELLO_SHARED, another host: the key derived from RDMA_UCX_SECRET;
 *  - HELLO_NONE: no key; accepted only in open mode (RDMA_UCX_SECRET
 *    unset and the listener on a non-loopback RDMA_UCX_ADDR).
 * An accepted HELLO makes an auth entry (sender GUID -> sid).  Every later
 * message of the sender carries its sid, and a request, response or
 * control message counts only if (src_guid, sid) is an entry's: for RC
 * and UC through q->peer->rx_sid (one comparison on the hot path), for
 * UD, control messages and requests to unknown QPs through the table.
 * So a sender can neither act as another node nor reach a QP that is not
 * connected to it.  An entry is replaced only by a HELLO of the same pid
 * or once its node is gone (same host: its pid; else: the endpoint its
 * HELLO came on failed).
 *
 * The guard: the listener (the port in the GUID) accepts every
 * connection request into an endpoint (struct acc); one without a valid
 * HELLO after AUTH_DEADLINE_NS is closed, and beyond MAX_PENDING such
 * endpoints a request is rejected.  Below UCP, UCX itself accepts every
 * TCP connection to its listening sockets (this listener's, and the tcp
 * transport's own) and holds an fd for it until the peer speaks, forever;
 * the guard watches those sockets (edge-triggered in the progress
 * thread's epoll set; UCX's async thread may accept a connection before
 * that thread sees the edge, which then never comes, so the guard also
 * looks every GUARD_IDLE_NS), finds the connections among the process's fds,
 * and shuts down (UCX then closes them) those that have not become a
 * connection request (listener) or sent anything (tcp transport) after
 * AUTH_DEADLINE_NS, and at once those beyond MAX_PENDING.
 */
#define AM_CTL_HELLO 42         /* authenticate (the first message) */
enum { HELLO_NONE, HELLO_NODE, HELLO_SHARED };
#define AUTH_DEADLINE_NS 2000000000ull /* to authenticate after connecting */
#define MAX_PENDING 32          /* unauthenticated connections held */
#define GUARD_EVERY_NS 100000000ull    /* guard passes while any pend */
#define GUARD_IDLE_NS 500000000ull     /* and at least this often */
#define GUARD_TAG 0x47415244ull /* epoll data of a listening socket */
#define LOG_EVERY_NS 10000000000ull    /* the guard logs at most this often */

/* A sender that said HELLO. */
struct auth {
    uint64_t guid;         /* its GUID */
    uint64_t sid;          /* its session id (never 0) */
    pid_t pid;             /* its pid, as it says (checked on this host) */
    int same_host;         /* HELLO_NODE: its pid tells whether it lives */
    uint32_t acc;          /* acc_ref of the endpoint it came on, 0: not
                              one the listener accepted */
};

/* An endpoint the listener accepted. */
struct acc {
    ucp_ep_h ep;           /* NULL: the entry is free */
    uint32_t gen;          /* incremented when the entry is reused */
    int authed;            /* a valid HELLO came on it */
    int dead;              /* it failed: close it */
    uint64_t deadline;     /* close it then unless authed */
    struct sockaddr_in client; /* the connecting socket's address */
};
#define MAX_ACC 4096            /* accepted endpoints at a time */
static struct acc acc_tab[MAX_ACC];
static uint32_t acc_hi;     /* entries in use are below this */

/* A TCP connection accepted by one of UCX's listening sockets. */
struct tsock {
    int fd;                /* its fd (UCX's: only shut down, never closed) */
    uint64_t ino;          /* its inode: a reused fd is another socket */
    uint64_t seen;         /* first seen (ns) */
    int cm;                /* 1: on the listener's port, 0: tcp transport */
    int ok;                /* proven: left alone */
    struct sockaddr_in peer; /* the other end */
};

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND() do { \
        v0 += v1; v1 = ROTL64(v1, 13); v1 ^= v0; v0 = ROTL64(v0, 32); \
        v2 += v3; v3 = ROTL64(v3, 16); v3 ^= v2; \
        v0 += v3; v3 = ROTL64(v3, 21); v3 ^= v0; \
        v2 += v1; v1 = ROTL64(v1, 17); v1 ^= v2; v2 = ROTL64(v2, 32); \
    } while (0)

/* SipHash-2-4 of n 64-bit words under key k. */
static uint64_t
siphash(const uint64_t k[2], const uint64_t *m, int n)
{
    uint64_t v0 = k[0] ^ 0x736f6d6570736575ull;
    uint64_t v1 = k[1] ^ 0x646f72616e646f6dull;
    uint64_t v2 = k[0] ^ 0x6c7967656e657261ull;
    uint64_t v3 = k[1] ^ 0x7465646279746573ull;
    uint64_t b = (uint64_t)(n * 8) << 56;
    int i;
    for (i = 0; i < n; i++) {
        v3 ^= m[i];
        SIPROUND();
        SIPROUND();
        v0 ^= m[i];
    }
    v3 ^= b;
    SIPROUND();
    SIPROUND();
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND();
    SIPROUND();
    SIPROUND();
    SIPROUND();
    return v0 ^ v1 ^ v2 ^ v3;
}

/* The MAC of a HELLO from src to dst. */
static uint64_t
hello_mac(const uint64_t k[2], uint64_t dst, uint64_t src, uint64_t sid,
          uint32_t pid)
{
    uint64_t m[4] = {dst, src, sid, pid};
    return siphash(k, m, 4);
}

/* The key of a secret string (RDMA_UCX_SECRET). */
static void
secret_key(const char *s, uint64_t k[2])
{
    static const uint64_t k0[2] = {0x72646d6175637831ull, 1};
    static const uint64_t k1[2] = {0x72646d6175637831ull, 2};
    uint64_t m[33];
    size_t len = strlen(s), i;
    int n;
    if (len > 256)
        len = 256;
    memset(m, 0, sizeof(m));
    for (i = 0; i < len; i++)
        m[i / 8] |= (uint64_t)(uint8_t)s[i] << (8 * (i % 8));
    n = (int)((len + 7) / 8);
    m[n++] = len;
    k[0] = siphash(k0, m, n);
    k[1] = siphash(k1, m, n);
}

/* Random bytes (getrandom; 0 or -1). */
static int
random_bytes(void *buf, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t k;
    if (fd < 0)
        return -1;
    k = read(fd, buf, n);
    close(fd);
    return k == (ssize_t)n ? 0 : -1;
}

/* A new session id (never 0). */
static uint64_t
new_sid(void)
{
    uint64_t sid = 0;
    while (sid == 0)
        if (random_bytes(&sid, sizeof(sid)) < 0)
            sid = now_ns() ^ ((uint64_t)getpid() << 32);
    return sid;
}

/* Count a dropped message: malformed (bad) or not allowed. */
static void
rx_bad(void)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_rx_bad, 1, __ATOMIC_RELAXED);
}

static void
rx_denied(void)
{
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_rx_denied, 1, __ATOMIC_RELAXED);
}

/* The auth entry of guid (N.lock held), or NULL. */
static struct auth *
auth_find(uint64_t guid)
{
    int i;
    for (i = 0; i < N.nauth; i++)
        if (N.auth[i].guid == guid)
            return &N.auth[i];
    return NULL;
}

/* Is (guid, sid) an authenticated sender?  (N.lock held) */
static int
auth_ok(uint64_t guid, uint64_t sid)
{
    struct auth *a = auth_find(guid);
    return a != NULL && a->sid == sid;
}

/* The acc_ref (index and generation, never 0) of accepted entry i. */
static uint32_t
acc_ref(uint32_t i)
{
    return ((acc_tab[i].gen & 0xFFFFF) << 12 | i) + 1;
}

/* The entry an acc_ref names, or NULL if it has been reused since. */
static struct acc *
acc_get(uint32_t ref)
{
    uint32_t i;
    if (ref == 0)
        return NULL;
    i = (ref - 1) & (MAX_ACC - 1);
    if (i >= acc_hi || acc_tab[i].ep == NULL || acc_ref(i) != ref)
        return NULL;
    return &acc_tab[i];
}

/* The senders whose HELLO came on accepted entry ref lose their entry
   (the endpoint failed or was closed; N.lock held). */
static void
auth_drop_acc(uint32_t ref)
{
    int i, k;
    for (i = 0; i < N.nauth;) {
        if (N.auth[i].acc != ref) {
            i++;
            continue;
        }
        for (k = 0; k < N.npeers; k++)
            if (N.peers[k]->guid == N.auth[i].guid)
                N.peers[k]->rx_sid = 0;
        N.auth[i] = N.auth[--N.nauth];
    }
}

/* A rate-limited line on stderr: connections closed, messages denied. */
static void
guard_log(uint64_t t)
{
    if (N.log_closed + N.log_denied == 0 || t < N.log_at)
        return;
    fprintf(stderr, "rdma (ucx fabric node %016llx): closed %llu "
            "unauthenticated connection(s), refused %llu HELLO(s) "
            "(logged at most every %llu s)\n",
            (unsigned long long)N.guid, (unsigned long long)N.log_closed,
            (unsigned long long)N.log_denied,
            (unsigned long long)(LOG_EVERY_NS / 1000000000ull));
    N.log_closed = N.log_denied = 0;
    N.log_at = t + LOG_EVERY_NS;
}

/* A HELLO arrived on endpoint ep (the reply endpoint; NULL if the sender
   did not say it).  N.lock not held. */
static void
hello_rx(const struct wire *h, ucp_ep_h ep)
{
    const uint64_t *key = NULL;
    struct auth *a;
    uint32_t ref = 0, i;
    int ok, k;

    if (h->op == HELLO_NODE)
        key = N.secret;
    else if (h->op == HELLO_SHARED && N.have_shared)
        key = N.shared;
    ok = h->sid != 0 && h->src_guid != 0 &&
         (key != NULL ? hello_mac(key, N.guid, h->src_guid, h->sid, h->imm)
                        == h->cmp
                      : h->op == HELLO_NONE && N.open_mode);
    LOCK();
    for (i = 0; ep != NULL && i < acc_hi; i++)
        if (acc_tab[i].ep == ep) {
            ref = acc_ref(i);
            break;
        }
    a = ok ? auth_find(h->src_guid) : NULL;
    if (a != NULL && a->sid != h->sid && a->pid != (pid_t)h->imm) {
        /* another sender says it is that node: only if it is gone */
        struct acc *x = acc_get(a->acc);
        int gone = a->same_host ? !pid_alive(a->pid)
                                : a->acc != 0 && (x == NULL || x->dead);
        if (!gone)
            ok = 0;
    }
    if (!ok) {
        rx_denied();
        N.log_denied++;
        if (ref != 0 && !acc_tab[(ref - 1) & (MAX_ACC - 1)].authed)
            acc_tab[(ref - 1) & (MAX_ACC - 1)].deadline = 0; /* close it */
        N.guard_at = 1;
        UNLOCK();
        return;
    }
    if (a == NULL && N.nauth == N.cauth) {
        /* full: first forget the nodes of this host that ended (those of
           other hosts go with their endpoint) */
        int j;
        for (j = 0; j < N.nauth;) {
            if (N.auth[j].same_host && !pid_alive(N.auth[j].pid)) {
                for (k = 0; k < N.npeers; k++)
                    if (N.peers[k]->guid == N.auth[j].guid)
                        N.peers[k]->rx_sid = 0;
                N.auth[j] = N.auth[--N.nauth];
            }
            else
                j++;
        }
    }
    if (a == NULL) {
        if (N.nauth == N.cauth) {
            int nc = N.cauth ? N.cauth * 2 : 16;
            struct auth *na = realloc(N.auth, sizeof(*na) * (size_t)nc);
            if (na == NULL) {
                UNLOCK();
                return;
            }
            N.auth = na;
            N.cauth = nc;
        }
        a = &N.auth[N.nauth++];
    }
    a->guid = h->src_guid;
    a->sid = h->sid;
    a->pid = (pid_t)h->imm;
    a->same_host = h->op == HELLO_NODE;
    a->acc = ref;
    if (ref != 0 && !acc_tab[(ref - 1) & (MAX_ACC - 1)].authed) {
        acc_tab[(ref - 1) & (MAX_ACC - 1)].authed = 1;
        N.npending--;
    }
    for (k = 0; k < N.npeers; k++)
        if (N.peers[k]->guid == h->src_guid)
            N.peers[k]->rx_sid = h->sid;
    UNLOCK();
}

static void
close_cb(void *req, ucs_status_t status, void *user)
{
    (void)status;
    (void)user;
    U.request_free(req);
}

/* Close an endpoint at once (no lock held). */
static void
ep_close_force(ucp_ep_h ep)
{
    ucp_request_param_t prm;
    ucs_status_ptr_t r;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
    prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    prm.cb.send = close_cb;
    r = U.ep_close_nbx(ep, &prm);
    (void)r;                    /* a request: close_cb frees it */
}

/* An accepted endpoint failed. */
static void
acc_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct acc *a;
    (void)ep;
    (void)status;
    LOCK();
    a = acc_get((uint32_t)(uintptr_t)arg);
    if (a != NULL) {
        a->dead = 1;
        N.guard_at = 1;
    }
    UNLOCK();
}

static void
conn_cb(ucp_conn_request_h req, void *arg)
{
    ucp_conn_request_attr_t ca;
    ucp_ep_params_t ep;
    ucp_ep_h h;
    uint32_t i;
    (void)arg;

    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (U.conn_request_query(req, &ca) != UCS_OK)
        ca.client_address.ss_family = AF_UNSPEC;
    LOCK();
    for (i = 0; i < acc_hi; i++)
        if (acc_tab[i].ep == NULL)
            break;
    if (N.npending >= MAX_PENDING || i == MAX_ACC) {
        /* too many unauthenticated (or at all): refused */
        rx_denied();
        N.log_closed++;
        N.guard_at = 1;
        UNLOCK();
        U.listener_reject(N.listener, req);
        return;
    }
    if (i == acc_hi)
        acc_hi++;
    acc_tab[i].gen++;
    acc_tab[i].ep = (ucp_ep_h)1;        /* taken */
    acc_tab[i].authed = acc_tab[i].dead = 0;
    acc_tab[i].deadline = now_ns() + AUTH_DEADLINE_NS;
    memset(&acc_tab[i].client, 0, sizeof(acc_tab[i].client));
    if (ca.client_address.ss_family == AF_INET)
        memcpy(&acc_tab[i].client, &ca.client_address,
               sizeof(acc_tab[i].client));
    N.npending++;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = req;
    ep.err_handler.cb = acc_err_cb;
    ep.err_handler.arg = (void *)(uintptr_t)acc_ref(i);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    N.guard_at = 1;
    UNLOCK();
    if (U.ep_create(N.w, &ep, &h) != UCS_OK) {
        LOCK();
        acc_tab[i].ep = NULL;
        N.npending--;
        UNLOCK();
        return;
    }
    LOCK();
    acc_tab[i].ep = h;
    UNLOCK();
}

/* A HELLO being sent. */
struct hello_tx {
    struct wire h;         /* the message */
    int state;             /* 0: in flight, 1: sent (or failed), 2: its
                              sender stopped waiting */
};

static void
hello_sent_cb(void *req, ucs_status_t status, void *user)
{
    struct hello_tx *x = user;
    (void)status;
    if (__atomic_exchange_n(&x->state, 1, __ATOMIC_ACQ_REL) == 2)
        free(x);
    U.request_free(req);
}

/* Say HELLO to p on its new endpoint (its first message; no lock held):
   our session with it, proven with key (mode HELLO_*).  It is sent with
   UCP_AM_SEND_FLAG_REPLY (the receiver learns the endpoint), which UCX
   may hold back until the endpoint is connected while later messages
   without the flag go ahead: so this waits (at most 5 s, driving
   progress) until UCX has sent it, and the peer's requests follow it. */
static void
hello_send(struct peer *p, const uint64_t *key, int mode)
{
    struct hello_tx *x = calloc(1, sizeof(*x));
    struct wire *h;
    ucp_request_param_t prm;
    ucs_status_ptr_t r;
    uint64_t t0;

    p->tx_sid = new_sid();
    if (x == NULL)
        return;                 /* its messages will be dropped */
    h = &x->h;
    h->kind = AM_CTL_HELLO;
    h->op = (uint8_t)mode;
    h->src_guid = N.guid;
    h->src_lid = N.lid;
    h->sid = p->tx_sid;
    h->imm = (uint32_t)getpid();
    h->cmp = key != NULL ? hello_mac(key, p->guid, N.guid, h->sid, h->imm)
                         : 0;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_REPLY;     /* tells the endpoint */
    prm.cb.send = hello_sent_cb;
    prm.user_data = x;
    r = U.am_send_nbx(p->ep, AM_REQ, h, sizeof(*h), NULL, 0, &prm);
    if (!UCS_PTR_IS_PTR(r)) {
        free(x);
        return;
    }
    t0 = now_ns();
    while (__atomic_load_n(&x->state, __ATOMIC_ACQUIRE) == 0 &&
           now_ns() - t0 < 5000000000ull)
        if (U.worker_progress(N.w) == 0)
            sched_yield();
    if (__atomic_exchange_n(&x->state, 2, __ATOMIC_ACQ_REL) == 1)
        free(x);
}

/* Find UCX's listening sockets: the AF_INET listening sockets of this
   process (inode, fd, port), at most max; return how many. */
static int
listen_scan(uint64_t *ino, int *fds, uint16_t *ports, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL && n < max) {
        struct sockaddr_in la;
        socklen_t sl = sizeof(la);
        struct stat sb;
        int fd, on = 0;
        socklen_t ol = sizeof(on);
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d) || fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) != 0 || !on ||
            getsockname(fd, (struct sockaddr *)&la, &sl) != 0 ||
            la.sin_family != AF_INET)
            continue;
        ino[n] = (uint64_t)sb.st_ino;
        fds[n] = fd;
        ports[n] = ntohs(la.sin_port);
        n++;
    }
    closedir(d);
    return n;
}

/* Look at the TCP connections UCX's listening sockets accepted (no lock
   held); shut down those that did not prove themselves in time, or at
   once beyond MAX_PENDING.  Return 1 if some wait for their deadline. */
static int
sock_scan(uint64_t t)
{
    DIR *d;
    struct dirent *e;
    struct tsock *cur = NULL;
    int ncur = 0, ccur = 0, i, k, waiting = 0, room;

    if (N.nlsn == 0)
        return 0;
    /* Connections still in a listening socket's accept queue: UCX has not
       accepted them yet, so they are not among the fds below, and the
       edge that woke the guard has passed.  Look again soon.  (Checked
       before the scan: one accepted after it is checked by the next.) */
    for (k = 0; k < N.nlsn; k++) {
        struct tcp_info li;
        socklen_t ll = sizeof(li);
        memset(&li, 0, sizeof(li));
        if (getsockopt(N.lsn_fd[k], IPPROTO_TCP, TCP_INFO, &li, &ll) == 0 &&
            li.tcpi_state == 10 /* TCP_LISTEN */ && li.tcpi_unacked > 0)
            waiting = 1;        /* tcpi_unacked: the accept queue's length */
    }
    if ((d = opendir("/proc/self/fd")) == NULL)
        return waiting;
    while ((e = readdir(d)) != NULL) {
        struct sockaddr_in la, pa;
        socklen_t sl = sizeof(la);
        struct stat sb;
        int fd;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d) || fstat(fd, &sb) != 0 || !S_ISSOCK(sb.st_mode) ||
            getsockname(fd, (struct sockaddr *)&la, &sl) != 0 ||
            la.sin_family != AF_INET)
            continue;
        for (k = 0; k < N.nlsn; k++)
            if (ntohs(la.sin_port) == N.lsn_port[k] && fd != N.lsn_fd[k])
                break;
        sl = sizeof(pa);
        if (k == N.nlsn ||
            getpeername(fd, (struct sockaddr *)&pa, &sl) != 0 ||
            pa.sin_family != AF_INET)
            continue;
        if (ncur == ccur) {
            int nc = ccur ? ccur * 2 : 64;
            struct tsock *nt = realloc(cur, sizeof(*nt) * (size_t)nc);
            if (nt == NULL)
                break;
            cur = nt;
            ccur = nc;
        }
        memset(&cur[ncur], 0, sizeof(cur[ncur]));
        cur[ncur].fd = fd;
        cur[ncur].ino = (uint64_t)sb.st_ino;
        cur[ncur].seen = t;
        cur[ncur].cm = N.lsn_port[k] == N.port;
        cur[ncur].peer = pa;
        ncur++;
    }
    closedir(d);
    /* what was seen before: when, and whether it proved itself */
    for (i = 0; i < ncur; i++)
        for (k = 0; k < N.nts; k++)
            if (N.ts[k].fd == cur[i].fd && N.ts[k].ino == cur[i].ino) {
                cur[i].seen = N.ts[k].seen;
                cur[i].ok = N.ts[k].ok;
                break;
            }
    LOCK();
    for (i = 0; i < ncur; i++) {
        struct tsock *c = &cur[i];
        if (c->ok)
            continue;
        if (c->cm) {
            /* a connection request became an endpoint (which has a
               deadline of its own) */
            uint32_t j;
            for (j = 0; j < acc_hi && !c->ok; j++)
                c->ok = acc_tab[j].ep != NULL &&
                        acc_tab[j].client.sin_port == c->peer.sin_port &&
                        acc_tab[j].client.sin_addr.s_addr ==
                        c->peer.sin_addr.s_addr;
        }
        else {
            /* the tcp transport: a peer's UCX sends its connection
               request at once and ours answers it; a byte or two that
               UCX waits to complete does not count */
            struct tcp_info ti;
            socklen_t tl = sizeof(ti);
            memset(&ti, 0, sizeof(ti));
            c->ok = getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0
                    && ti.tcpi_bytes_received > 0 && ti.tcpi_bytes_acked > 0;
        }
    }
    /* the unproven: the oldest MAX_PENDING wait for their deadline */
    room = MAX_PENDING;
    for (k = 0; k < 2; k++)
        for (i = 0; i < ncur; i++) {
            struct tsock *c = &cur[i];
            if (c->ok || (k == 0) != (c->seen < t))
                continue;
            if (c->ok == 0 && t - c->seen < AUTH_DEADLINE_NS && room > 0) {
                room--;
                waiting = 1;
                continue;
            }
            /* UCX sees the connection end and closes its fd; not seen
               again unless UCX keeps it (then it is shut down again) */
            shutdown(c->fd, SHUT_RDWR);
            c->ok = -1;
            rx_denied();
            N.log_closed++;
        }
    UNLOCK();
    free(N.ts);
    N.ts = cur;
    N.nts = ncur;
    return waiting;
}

/* The guard's pass (progress thread, no lock held): close accepted
   endpoints that failed or did not authenticate in time, look at the
   connections UCX accepted.  Runs when a listening socket has a new
   connection, and every GUARD_EVERY_NS while anything is pending. */
static void
guard_pass(uint64_t t)
{
    ucp_ep_h eps[64];
    int n = 0, k, waiting = 0;
    uint32_t i;

    LOCK();
    if (N.guard_at == 0 || t < N.guard_at) {
        UNLOCK();
        return;
    }
    N.guard_at = 0;
    for (i = 0; i < acc_hi; i++) {
        struct acc *a = &acc_tab[i];
        if (a->ep == NULL || a->ep == (ucp_ep_h)1)
            continue;
        if (a->dead || (!a->authed && t >= a->deadline)) {
            if (n == (int)(sizeof(eps) / sizeof(eps[0]))) {
                waiting = 1;
                break;
            }
            if (!a->authed) {
                N.npending--;
                if (!a->dead) {
                    rx_denied();
                    N.log_closed++;
                }
            }
            auth_drop_acc(acc_ref(i));
            eps[n++] = a->ep;
            a->ep = NULL;
            continue;
        }
        if (!a->authed)
            waiting = 1;
    }
    UNLOCK();
    for (k = 0; k < n; k++)
        ep_close_force(eps[k]);
    N.guard_scan = t;
    if (sock_scan(t))
        waiting = 1;
    LOCK();
    if (waiting && (N.guard_at == 0 || N.guard_at > t + GUARD_EVERY_NS))
        N.guard_at = t + GUARD_EVERY_NS;
    guard_log(t);
    UNLOCK();
}

/* The guard's pass if one is due (progress thread). */
static void
guard_maybe(uint64_t t)
{
    if (N.nlsn != 0 && t - N.guard_scan >= GUARD_IDLE_NS) {
        LOCK();
        if (N.guard_at == 0 || N.guard_at > t)
            N.guard_at = t;
        UNLOCK();
    }
    if (__atomic_load_n(&N.guard_at, __ATOMIC_RELAXED) != 0)
        guard_pass(t);
}

/* Something for the guard in epoll events ev[0..n)? */
static void
guard_events(const struct epoll_event *ev, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (ev[i].data.u64 == GUARD_TAG) {
            LOCK();
            N.guard_at = 1;
            UNLOCK();
            return;
        }
}

static ucs_status_t
am_cb(void *arg, const void *header, size_t header_length, void *data,
      size_t length, const ucp_am_recv_param_t *param)
{
    struct wire h;
    struct rndv_rx *x;
    struct inmsg *m = NULL;
    ucp_request_param_t p;
    ucs_status_ptr_t r;
    void *dst;

    (void)arg;
    if (header_length != sizeof(h)) {
        rx_bad();
        return UCS_OK;
    }
    memcpy(&h, header, sizeof(h));
    switch (h.kind) {
    case AM_CTL_HELLO:
        hello_rx(&h, (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                     ? param->reply_ep : NULL);
        return UCS_OK;
    case AM_CTL_RINGOPEN:
    case AM_CTL_BELL: {
        int ok;
        LOCK();
        ok = auth_ok(h.src_guid, h.sid);
        UNLOCK();
        if (!ok)
            rx_denied();
        else if (h.kind == AM_CTL_RINGOPEN)
            ring_accept(h.src_guid);
        else
            rings_poll();
        return UCS_OK;
    }
    case AM_REQ:
    case AM_RESP:
        if (msg_check(&h, length))
            break;
        /* fall through */
    default:
        rx_bad();
        return UCS_OK;
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        LOCK();
        am_dispatch(&h, data, length);
        UNLOCK();
        return UCS_OK;
    }
    if (h.kind == AM_REQ && (h.flags & F_ACK)) {
        LOCK();
        on_piggyback_ack(&h);
        UNLOCK();
    }
    /* rendezvous: reserve the message's place, then fetch the data */
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_am_rndv, 1, __ATOMIC_RELAXED);
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return UCS_OK;
    if (h.kind == AM_REQ) {
        LOCK();
        on_req(&h, NULL, length, 1, &m);
        UNLOCK();
        if (m == NULL) {
            free(x);
            return UCS_OK;      /* dropped */
        }
        x->m = m;
        dst = m->data + sizeof(h);
    }
    else {
        struct uqp *q;
        int ok;
        LOCK();
        q = qp_lookup(h.dst_qpn);
        ok = q != NULL && q->peer != NULL && q->peer->guid == h.src_guid &&
             q->peer->rx_sid == h.sid;
        UNLOCK();
        if (!ok) {
            rx_denied();
            free(x);
            return UCS_OK;
        }
        x->h = h;
        x->len = length;
        x->buf = malloc(length ? length : 1);
        if (x->buf == NULL) {
            free(x);
            return UCS_OK;
        }
        dst = x->buf;
    }
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = rndv_done;
    p.user_data = x;
    r = U.am_recv_data_nbx(N.w, data, dst, length, &p);
    if (UCS_PTR_IS_ERR(r))
        rndv_done(NULL, UCS_PTR_STATUS(r), 0, x);
    else if (r == NULL)
        rndv_done(NULL, UCS_OK, length, x);
    return UCS_OK;
}

/* ------------------------------------------------------------------ */
/* peers and addressing                                                */

static void peer_fail_locked(struct peer *p);

static void
ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct peer *p = arg;
    (void)ep;
    (void)status;
    LOCK();
    if (p != NULL)
        peer_fail_locked(p);
    UNLOCK();
}

/* The rendezvous record of a node. */
struct record {
    uint32_t magic;        /* REC_MAGIC */
    pid_t pid;             /* owner */
    unsigned long netns;   /* inode of its network namespace */
    char boot_id[40];      /* of its host */
    uint64_t guid;         /* its GUID */
    uint16_t lid;          /* its LID */
    uint64_t secret[2];    /* its HELLO key (authentication): the file is
                              0600, so only the same user reads it */
    uint32_t alen;         /* worker address bytes that follow */
};
#define REC_MAGIC 0x52554359u   /* ...59: the record has the HELLO key */

/* Is process pid alive?  kill(pid, 0) also succeeds for a zombie (a
   process that was killed and not yet reaped by its parent: its memory
   and its node are gone, but writes "to" it kept completing), so the
   state in /proc/<pid>/stat decides: Z (zombie) and X (dead) are dead.
   Where /proc cannot be read the kill answer stands.  1 or 0. */
static int
pid_alive(pid_t pid)
{
    char path[40], buf[512];
    const char *rp;
    ssize_t n;
    int fd;

    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;     /* ENOENT: it went meanwhile */
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    /* "pid (comm) S ...": comm may hold spaces and parentheses */
    rp = strrchr(buf, ')');
    if (rp == NULL || rp[1] != ' ')
        return 1;
    return rp[2] != 'Z' && rp[2] != 'X';
}

/* Read the record of guid into *rec and a malloc'd address; 0 or -1. */
static int
record_read(uint64_t guid, struct record *rec, void **addr)
{
    char path[300];
    int fd;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/node-%016llx", N.dir,
             (unsigned long long)guid);
    fd = priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return -1;
    n = read(fd, rec, sizeof(*rec));
    if (n != (ssize_t)sizeof(*rec) || rec->magic != REC_MAGIC ||
        rec->alen > (1 << 20)) {
        close(fd);
        return -1;
    }
    *addr = malloc(rec->alen ? rec->alen : 1);
    if (*addr == NULL || read(fd, *addr, rec->alen) != (ssize_t)rec->alen) {
        free(*addr);
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Read a LID claim ("<pid> <guid>\n", claim_lid) from fd; 0 or -1. */
static int
lid_claim_read(int fd, int *pid, uint64_t *guid)
{
    char buf[64];
    unsigned long long g;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%d %llx", pid, &g) != 2)
        return -1;
    *guid = g;
    return 0;
}

/* The GUID that owns lid on this host, or 0. */
static uint64_t
lid_owner(uint16_t lid)
{
    char path[300];
    int fd, pid = 0, rc;
    uint64_t g = 0;

    snprintf(path, sizeof(path), "%s/lid-%04x", N.dir, lid);
    fd = priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    rc = lid_claim_read(fd, &pid, &g);
    close(fd);
    if (rc < 0 || !pid_alive(pid))
        return 0;
    return g;
}

/* The pid that owns a file of the rendezvous directory (0: unknown, or not
   one of this boot's: leave it alone). */
static pid_t
file_owner(const char *name)
{
    char path[600];
    const char *tmp = strstr(name, ".tmp");
    int fd;
    pid_t pid = 0;

    if (strncmp(name, "node-", 5) != 0 && strncmp(name, "keys-", 5) != 0 &&
        strncmp(name, "lid-", 4) != 0 && strncmp(name, "ring-", 5) != 0)
        return 0;                       /* not ours */
    if (tmp != NULL)                    /* <name>.tmp<writer's pid> */
        return (pid_t)atoi(tmp + 4);
    snprintf(path, sizeof(path), "%s/%s", N.dir, name);
    fd = priv_open(path, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    if (name[0] == 'n') {
        struct record r;
        if (read(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) &&
            r.magic == REC_MAGIC &&
            strncmp(r.boot_id, N.boot_id, sizeof(r.boot_id)) == 0)
            pid = r.pid;
    }
    else if (name[0] == 'k' || name[0] == 'r') {
        uint32_t head[3];               /* magic, version, pid */
        if (read(fd, head, sizeof(head)) == (ssize_t)sizeof(head) &&
            head[0] == (name[0] == 'k' ? SH_MAGIC : RING_MAGIC))
            pid = (pid_t)head[2];
    }
    else {
        int p;
        uint64_t g;
        if (lid_claim_read(fd, &p, &g) == 0)
            pid = p;
    }
    close(fd);
    return pid;
}

/* Remove what dead processes left in the rendezvous directory (node
   record, key page, LID claim, temporary files).  A node removes its own
   files at exit; a crash or SIGKILL leaves them, and they used to pile
   up (thousands after many test runs).  Only a file whose owner pid is
   known and no longer exists goes. */
static void
sweep_stale(void)
{
    DIR *d = opendir(N.dir);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        pid_t pid;
        if (e->d_name[0] == '.')
            continue;
        pid = file_owner(e->d_name);
        if (pid > 0 && !pid_alive(pid)) {
            char path[600];
            snprintf(path, sizeof(path), "%s/%s", N.dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

static int
same_host(const struct record *r)
{
    return r->netns == N.netns && strcmp(r->boot_id, N.boot_id) == 0;
}

/* Find or make the peer for (guid, lid); dgid_known: guid came from a
   GID.  Return 0 or -1 with *st set, naming func (the verb resolving the
   address).  Called without N.lock. */
static int
peer_get(uint64_t guid, uint16_t lid, struct peer **out,
         struct pyrdma_status *st, const char *func)
{
    struct peer *p = NULL;
    struct record rec;
    void *addr = NULL;
    ucp_ep_params_t ep;
    ucs_status_t s;
    struct sockaddr_in sin;
    int i, have_rec = 0, rec_ok = 0;
    const uint64_t *key = NULL;
    uint64_t nkey[2];
    int mode = HELLO_NONE;

    if (guid == 0 && lid != 0) {
        if (lid == N.lid)
            guid = N.guid;
        else
            guid = lid_owner(lid);
        if (guid == 0)
            return pyrdma_fail(st, EHOSTUNREACH, func,
                               "no fabric node has LID 0x%x on this host "
                               "(rendezvous directory %s); use the GID to "
                               "reach another host", lid, N.dir);
    }
    LOCK();
    for (i = 0; i < N.npeers; i++)
        if (N.peers[i]->guid == guid && !N.peers[i]->failed) {
            *out = N.peers[i];
            UNLOCK();
            return 0;
        }
    UNLOCK();
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    p->guid = guid;
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.err_handler.cb = ep_err_cb;
    ep.err_handler.arg = p;
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (guid == N.guid) {
        ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = N.waddr;
        p->lid = N.lid;
        p->pid = getpid();
    }
    else if ((rec_ok = record_read(guid, &rec, &addr) == 0) &&
             same_host(&rec) && pid_alive(rec.pid)) {
        have_rec = 1;
        ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = addr;
        p->lid = rec.lid;
        p->pid = rec.pid;
    }
    else {
        uint32_t ip;
        uint16_t port;
        uint64_t be = htobe64(guid);
        memcpy(&ip, (uint8_t *)&be, 4);
        memcpy(&port, (uint8_t *)&be + 4, 2);
        if (forked_from_node) {
            free(addr);
            free(p);
            return pyrdma_fail(st, EOPNOTSUPP, "ibv_modify_qp",
                               "fabric node %016llx is reached over tcp, "
                               "and " FORK_TCP_MSG,
                               (unsigned long long)guid);
        }
        if (port == 0 || ip == 0) {
            free(addr);
            free(p);
            return pyrdma_fail(st, EHOSTUNREACH, func,
                               "fabric node %016llx is not on this host and "
                               "has no listener (set RDMA_UCX_ADDR on both "
                               "hosts)", (unsigned long long)guid);
        }
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = ip;
        sin.sin_port = port;
        ep.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR |
                         UCP_EP_PARAM_FIELD_FLAGS;
        ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        ep.sockaddr.addr = (struct sockaddr *)&sin;
        ep.sockaddr.addrlen = sizeof(sin);
        ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    }
    /* the key of our HELLO: a node of this host (any network
       namespace) publishes its own, else RDMA_UCX_SECRET, else none */
    if (guid == N.guid) {
        key = N.secret;
        mode = HELLO_NODE;
    }
    else if (rec_ok && strcmp(rec.boot_id, N.boot_id) == 0) {
        memcpy(nkey, rec.secret, sizeof(nkey));
        key = nkey;
        mode = HELLO_NODE;
    }
    else if (N.have_shared) {
        key = N.shared;
        mode = HELLO_SHARED;
    }
    s = U.ep_create(N.w, &ep, &p->ep);
    free(addr);
    if (s != UCS_OK) {
        free(p);
        return ucs_fail(st, s, "ucp_ep_create", "connecting to a fabric node");
    }
    hello_send(p, key, mode);
    /* same host: its key page opens the one-sided fast path */
    if (guid == N.guid)
        p->sh = N.sh;
    else if (have_rec && N.sh != NULL)
        p->sh = sh_map(guid);
    if (p->sh != NULL && (p->rk = calloc(SH_MR, sizeof(*p->rk))) == NULL) {
        if (p->sh != N.sh)
            munmap(p->sh, sizeof(*p->sh));
        p->sh = NULL;
    }
    LOCK();
    if (N.npeers == N.cpeers) {
        int nc = N.cpeers ? N.cpeers * 2 : 16;
        struct peer **np = realloc(N.peers, sizeof(*np) * (size_t)nc);
        if (np == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "realloc", "");
        }
        N.peers = np;
        N.cpeers = nc;
    }
    {
        struct auth *a = auth_find(guid);
        p->rx_sid = a != NULL ? a->sid : 0;
    }
    N.peers[N.npeers++] = p;
    UNLOCK();
    wake_progress();
    *out = p;
    return 0;
}

/* Resolve an address vector to a peer. */
static int
ah_resolve(const struct pyrdma_ah_attr *a, struct peer **out,
           struct pyrdma_status *st, const char *func)
{
    uint64_t guid = 0;
    if (a->port_num > 1)
        return pyrdma_fail(st, EINVAL, func, "port_num %u: the fabric "
                           "device has one port", a->port_num);
    if (a->is_global) {
        if (a->grh.sgid_index != 0)
            return pyrdma_fail(st, EINVAL, func, "sgid_index %u: the GID "
                               "table has one entry", a->grh.sgid_index);
        if (a->grh.dgid[0] == 0xff)
            return pyrdma_fail(st, EOPNOTSUPP, func, "multicast is not "
                               "supported by the ucx fabric");
        memcpy(&guid, a->grh.dgid + 8, 8);
        guid = be64toh(guid);
        if (guid == 0)
            return pyrdma_fail(st, EINVAL, func, "the DGID has no GUID");
        return peer_get(guid, 0, out, st, func);
    }
    if (a->dlid == 0 || a->dlid >= 0xC000)
        return pyrdma_fail(st, EINVAL, func, "dlid 0x%x is not a unicast "
                           "LID (and the ah_attr has no GRH)", a->dlid);
    return peer_get(0, a->dlid, out, st, func);
}

/* ------------------------------------------------------------------ */
/* timers and the progress thread                                      */

/* A peer is gone: its QPs' outstanding WRs fail, the request ring to it
   goes (ring_put takes no ring of a failed peer).  N.lock held. */
static void
peer_fail_locked(struct peer *p)
{
    int k;
    p->failed = 1;
    if (p->tx != NULL) {
        if (!__atomic_load_n(&p->tx->open, __ATOMIC_ACQUIRE)) {
            char path[300];     /* never mapped: its file is still there */
            ring_name(path, sizeof(path), N.guid, p->guid);
            unlink(path);
        }
        munmap(p->tx, sizeof(*p->tx));
        p->tx = NULL;
    }
    for (k = 0; k < (int)N.qp_hi; k++) {
        struct uqp *q = N.qps[k];
        if (q != NULL && q->peer == p && !q->destroyed)
            sq_fail_outstanding(q, IBV_WC_RETRY_EXC_ERR);
    }
}

static void
timers(void)
{
    uint64_t t = now_ns();
    int i, any = 0;

    LOCK();
    for (i = 0; i < N.npeers; i++) {
        struct peer *p = N.peers[i];
        if (!p->failed && p->pid && p->pid != getpid() &&
            t >= p->next_check) {
            p->next_check = t + 100000000ull;
            if (!pid_alive(p->pid))
                peer_fail_locked(p);
        }
    }
    rings_check(t);
    for (i = 0; i < (int)N.qp_hi; i++) {
        struct uqp *q = N.qps[i];
        uint32_t k;
        if (q == NULL || q->destroyed)
            continue;
        for (k = q->sq_head; k != q->sq_tail; k++) {
            struct slot *s = &q->sq[k & q->sq_mask];
            if (s->done)
                continue;
            any = 1;
            if (s->deadline == DEADLINE_UNSET)
                s->deadline = t + s->tmo;
            if ((s->deadline && t >= s->deadline) ||
                (q->peer && q->peer->failed))
                sq_fail_outstanding(q, IBV_WC_RETRY_EXC_ERR);
            break;
        }
        if (q->inq != NULL && q->inq->hold_until) {
            any = 1;
            if (!q->inq->hold_forever && t >= q->inq->hold_until)
                inq_run(q);
        }
    }
    N.timers = any;
    UNLOCK();
}

static void *
progress_main(void *arg)
{
    struct epoll_event ev[4];
    sigset_t all;
    int idle = 0;
    uint64_t last_timers = 0, seen_polls = 0, app_at = 0;

    (void)arg;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (!N.stop) {
        unsigned n = 0, k;
        uint64_t t = now_ns(), polls;
        polls = __atomic_load_n(&N.app_polls, __ATOMIC_RELAXED);
        if (polls != seen_polls) {
            seen_polls = polls;
            app_at = t;
        }
        if (app_at != 0 && t - app_at < 2000000ull) {
            /* the application polls (and so progresses and drains)
               itself: stay off the worker entirely (no lock contention
               with it on a small machine), keep only the timers */
            if ((N.timers && t - last_timers > 1000000ull) ||
                t - last_timers > 100000000ull) {
                timers();
                last_timers = t;
            }
            /* ACKs the application deferred and has not sent (it got
               its completion and is busy elsewhere), requests in rings
               while it polls another CQ: at most ~1 ms late */
            if (N.nrx)
                rings_poll();
            drain(1);
            k = (unsigned)epoll_wait(N.quietfd, ev, 4, 1);
            if ((int)k > 0)
                guard_events(ev, (int)k);
            guard_maybe(now_ns());
            idle = 0;
            continue;
        }
        while ((k = U.worker_progress(N.w)) != 0 && n < 10000) {
            uint64_t t2;
            n += k;
            /* a long burst (a stream of large messages) does not hold
               back the responses it queued: ACKs leave at least every
               ~100 us, not once the burst is over (which took 100s of
               ms for 224 1 MiB WRITEs, near a requester's ACK timeout) */
            if (__atomic_load_n(&N.ob_head, __ATOMIC_RELAXED) != NULL &&
                (t2 = now_ns()) - t > 100000ull) {
                drain(1);
                t = t2;
            }
        }
        if (N.nrx)
            n += rings_poll();
        drain(1);
        t = now_ns();
        if ((N.timers && t - last_timers > 1000000ull) ||
            t - last_timers > 100000000ull) {
            timers();
            drain(1);
            last_timers = t;
            guard_maybe(t);
        }
        if (n) {
            idle = 0;
            continue;
        }
        if (++idle < 64)
            continue;           /* spin a little before sleeping */
        if (U.worker_arm(N.w) == UCS_ERR_BUSY)
            continue;
        if (N.nrx) {
            /* ring writers ring from now on (struct ring) */
            rings_sleep(1);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (rings_poll() != 0) {
                rings_sleep(0);
                drain(1);
                idle = 0;
                continue;
            }
        }
        __atomic_store_n(&N.pt_asleep, 1, __ATOMIC_SEQ_CST);
        k = (unsigned)epoll_wait(N.epfd, ev, 4,
                                 N.timers || N.guard_at ? 5 : 100);
        __atomic_store_n(&N.pt_asleep, 0, __ATOMIC_RELAXED);
        if ((int)k > 0)
            guard_events(ev, (int)k);
        guard_maybe(now_ns());
        if (N.nrx)
            rings_sleep(0);
        idle = 0;
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* the node                                                            */

static void
read_boot_id(void)
{
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = 0;
    struct stat sb;
    if (fd >= 0) {
        n = read(fd, N.boot_id, sizeof(N.boot_id) - 1);
        close(fd);
    }
    N.boot_id[n > 0 ? n : 0] = '\0';
    if (n > 0 && N.boot_id[n - 1] == '\n')
        N.boot_id[n - 1] = '\0';
    N.netns = stat("/proc/self/ns/net", &sb) == 0 ? (unsigned long)sb.st_ino
                                                   : 0;
}

static void
node_atexit(void)
{
    int i;
    if (!N.up || N.pid != getpid())
        return;
    /* what the outbox holds, deferred ACKs too, goes out: a process that
       ends right after its last poll (exit(3), sooner than the progress
       thread's next look) has received what its peer sent, and a NIC
       would have acknowledged it */
    drain_out();
    N.stop = 1;
    if (N.stopfd >= 0) {
        uint64_t one = 1;
        if (write(N.stopfd, &one, sizeof(one)) < 0) {
            /* nothing to do at exit */
        }
    }
    pthread_join(N.thr, NULL);
    for (i = 0; i < N.npeers; i++) {
        /* a ring its receiver never mapped (and so never unlinked) */
        struct peer *p = N.peers[i];
        if (p->tx != NULL && !__atomic_load_n(&p->tx->open, __ATOMIC_ACQUIRE)) {
            char path[300];
            ring_name(path, sizeof(path), N.guid, p->guid);
            unlink(path);
        }
    }
    if (N.sh != NULL)
        unlink(N.shfile);
    unlink(N.nodefile);
    unlink(N.lidfile);
}

/* Claim a LID near hint in the rendezvous directory; 0 or -1. */
static int
claim_lid(uint16_t hint)
{
    int tries;
    for (tries = 0; tries < 4096; tries++) {
        uint16_t lid = (uint16_t)(1 + (hint + tries) % 0xBFFE);
        char path[260], buf[64];
        int fd, len;
        snprintf(path, sizeof(path), "%s/lid-%04x", N.dir, lid);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
        if (fd < 0) {
            if (errno == EEXIST && lid_owner(lid) == 0) {
                /* stale: its owner died */
                unlink(path);
                tries--;
                continue;
            }
            if (errno != EEXIST)
                return -1;
            continue;
        }
        len = snprintf(buf, sizeof(buf), "%d %016llx\n", (int)getpid(),
                       (unsigned long long)N.guid);
        if (write(fd, buf, (size_t)len) != len) {
            close(fd);
            unlink(path);
            return -1;
        }
        close(fd);
        N.lid = lid;
        snprintf(N.lidfile, sizeof(N.lidfile), "%s", path);
        return 0;
    }
    return -1;
}

static int
write_record(void)
{
    struct record rec;
    char tmp[300];
    int fd;

    memset(&rec, 0, sizeof(rec));
    rec.magic = REC_MAGIC;
    rec.pid = getpid();
    rec.netns = N.netns;
    snprintf(rec.boot_id, sizeof(rec.boot_id), "%s", N.boot_id);
    rec.guid = N.guid;
    rec.lid = N.lid;
    memcpy(rec.secret, N.secret, sizeof(rec.secret));
    rec.alen = (uint32_t)N.waddr_len;
    snprintf(N.nodefile, sizeof(N.nodefile), "%s/node-%016llx", N.dir,
             (unsigned long long)N.guid);
    snprintf(tmp, sizeof(tmp), "%s.tmp%d", N.nodefile, (int)getpid());
    fd = priv_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    if (write(fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec) ||
        write(fd, N.waddr, N.waddr_len) != (ssize_t)N.waddr_len) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    return rename(tmp, N.nodefile);
}

/* Choose the rendezvous directory and make sure it is ours alone: a
   directory (not a symbolic link) owned by the effective uid with no
   permission bits for group or others.  Anyone who can write there can
   remove a node's records or plant a key page its peers would trust, and
   /dev/shm is shared by every user, so a directory someone else made
   first is refused, never used.  0 or -1 with *st set. */
static int
pick_dir(struct pyrdma_status *st)
{
    const char *d = getenv("RDMA_UCX_DIR");
    struct stat sb;
    if (d != NULL && d[0])
        snprintf(N.dir, sizeof(N.dir), "%s", d);
    else
        snprintf(N.dir, sizeof(N.dir), "/dev/shm/rdma-ucx-%u",
                 (unsigned)getuid());
    if (mkdir(N.dir, 0700) != 0 && errno != EEXIST)
        return pyrdma_fail(st, errno, "mkdir", "cannot make the rendezvous "
                           "directory %s (set RDMA_UCX_DIR)", N.dir);
    if (lstat(N.dir, &sb) != 0)
        return pyrdma_fail(st, errno, "lstat", "rendezvous directory %s",
                           N.dir);
    if (!S_ISDIR(sb.st_mode))
        return pyrdma_fail(st, ENOTDIR, "lstat", "the rendezvous directory "
                           "%s is not a directory (a symbolic link or a "
                           "file is refused): remove it or set "
                           "RDMA_UCX_DIR", N.dir);
    if (sb.st_uid != geteuid())
        return pyrdma_fail(st, EPERM, "lstat", "the rendezvous directory "
                           "%s belongs to uid %u, not to this user (uid "
                           "%u): refusing it (another user may have made "
                           "it); set RDMA_UCX_DIR to a directory of "
                           "yours", N.dir, (unsigned)sb.st_uid,
                           (unsigned)geteuid());
    if ((sb.st_mode & 077) != 0)
        return pyrdma_fail(st, EPERM, "lstat", "the rendezvous directory "
                           "%s has mode %04o: it must be 0700 (not "
                           "readable or writable by group or others); "
                           "chmod 700 it or set RDMA_UCX_DIR", N.dir,
                           (unsigned)(sb.st_mode & 07777));
    return 0;
}

/* Bring the node up once per process; 0 or -1 with *st set. */
static int
node_up(struct pyrdma_status *st)
{
    ucp_config_t *cfg = NULL;
    ucp_params_t pp;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t ap;
    ucs_status_t s;
    const char *ipstr;
    struct epoll_event ev;
    uint8_t salt[2];
    uint64_t be, before[64], after[64];
    int lfd[64], nbefore;
    uint16_t lport[64];
    int rc = -1;

    pthread_mutex_lock(&init_lock);
    if (N.up && N.pid == getpid()) {
        pthread_mutex_unlock(&init_lock);
        return 0;
    }
    if (N.up) {
        /* a forked child: the parent's node is not ours; start afresh
           (its memory is left alone: UCP may map it) */
        struct node fresh = {.lock = PTHREAD_MUTEX_INITIALIZER,
                             .drain_lock = PTHREAD_MUTEX_INITIALIZER};
        memcpy(&N, &fresh, sizeof(N));
        forked_from_node = 1;
    }
    if (forked_from_node && !tls_shm()) {
        pyrdma_fail(st, EOPNOTSUPP, "ucp_init", FORK_TCP_MSG " (UCX_TLS=%s)",
                    getenv("UCX_TLS"));
        pthread_mutex_unlock(&init_lock);
        return -1;
    }
    N.stopfd = N.efd = N.epfd = -1;
    memset(acc_tab, 0, sizeof(acc_tab));
    acc_hi = 0;
    read_boot_id();
    if (pick_dir(st) < 0)
        goto out;
    /* authentication: this node's key (in its record), the shared one */
    if (random_bytes(N.secret, sizeof(N.secret)) < 0) {
        pyrdma_fail(st, errno ? errno : EIO, "read", "/dev/urandom: no "
                    "random bytes for the node's key");
        goto out;
    }
    {
        const char *sec = getenv("RDMA_UCX_SECRET");
        N.have_shared = sec != NULL && sec[0] != '\0';
        if (N.have_shared)
            secret_key(sec, N.shared);
    }
    if (access(N.dir, W_OK) != 0) {
        pyrdma_fail(st, errno, "mkdir", "rendezvous directory %s is not "
                    "writable (set RDMA_UCX_DIR)", N.dir);
        goto out;
    }
    sweep_stale();
    /* UCP */
    s = U.config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) {
        ucs_fail(st, s, "ucp_config_read", "reading the UCX configuration");
        goto out;
    }
    /* Two threads share the worker (the application's poll_cq and the
       progress thread): a spinlock held by a preempted thread makes the
       other spin for a whole time slice on a small machine (ms round
       trips); a mutex sleeps instead.  UCX_USE_MT_MUTEX=n overrides. */
    if (getenv("UCX_USE_MT_MUTEX") == NULL)
        U.config_modify(cfg, "USE_MT_MUTEX", "y");
    /* Messages up to 256 KiB go eagerly (UCX's "auto" threshold picks its
       rendezvous protocol lower, from 64 KiB over tcp): a responder here
       is usually a progress thread asleep in epoll, not a busy poller, and
       every step of a rendezvous (RTS in, RTR out, data in, ATP) wakes it
       (64 KiB WRITEs over tcp: 1.7 GB/s with it, 2.7 without; over shm
       eager is as fast or faster at every size).  Above that a rendezvous
       spares the receiver a whole message in its buffers (1 MiB over
       tcp is faster with it).  UCX_RNDV_THRESH overrides. */
    if (getenv("UCX_RNDV_THRESH") == NULL)
        U.config_modify(cfg, "RNDV_THRESH", "256K");
    /* alloc_mr memory: SysV shared memory (made mode 0600 there), else
       anonymous memory; never a POSIX segment, whose allocation writes
       every byte of it to /dev/shm first (see alloc_mr_mem) */
    U.config_modify(cfg, "ALLOC_PRIO", "md:sysv,mmap");
    memset(&pp, 0, sizeof(pp));
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
    s = U.init_version(UCP_API_MAJOR, UCP_API_MINOR, &pp, cfg, &N.uctx);
    U.config_release(cfg);
    if (s != UCS_OK) {
        ucs_fail(st, s, "ucp_init", "initializing UCX");
        goto out;
    }
    nbefore = listen_scan(before, lfd, lport, 64);
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    s = U.worker_create(N.uctx, &wp, &N.w);
    if (s != UCS_OK) {
        ucs_fail(st, s, "ucp_worker_create", "creating the UCX worker");
        goto out;
    }
    memset(&ap, 0, sizeof(ap));
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    ap.flags = UCP_AM_FLAG_WHOLE_MSG;
    ap.cb = am_cb;
    ap.id = AM_REQ;
    ap.arg = NULL;
    if ((s = U.worker_set_am_recv_handler(N.w, &ap)) != UCS_OK) {
        ucs_fail(st, s, "ucp_worker_set_am_recv_handler", "AM handler");
        goto out;
    }
    ap.id = AM_RESP;
    if ((s = U.worker_set_am_recv_handler(N.w, &ap)) != UCS_OK) {
        ucs_fail(st, s, "ucp_worker_set_am_recv_handler", "AM handler");
        goto out;
    }
    s = U.worker_get_address(N.w, &N.waddr, &N.waddr_len);
    if (s != UCS_OK) {
        ucs_fail(st, s, "ucp_worker_get_address", "worker address");
        goto out;
    }
    /* the listener: the one setting, RDMA_UCX_ADDR, says where */
    ipstr = getenv("RDMA_UCX_ADDR");
    if (ipstr == NULL || ipstr[0] == '\0')
        ipstr = "127.0.0.1";
    if (inet_pton(AF_INET, ipstr, &N.ip) != 1) {
        pyrdma_fail(st, EINVAL, "inet_pton", "RDMA_UCX_ADDR=%s is not an "
                    "IPv4 address", ipstr);
        goto out;
    }
    {
        ucp_listener_params_t lp;
        ucp_listener_attr_t la;
        struct sockaddr_in sin;
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        sin.sin_addr.s_addr = N.ip;
        memset(&lp, 0, sizeof(lp));
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                        UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = (struct sockaddr *)&sin;
        lp.sockaddr.addrlen = sizeof(sin);
        lp.conn_handler.cb = conn_cb;
        s = U.listener_create(N.w, &lp, &N.listener);
        if (s == UCS_OK) {
            memset(&la, 0, sizeof(la));
            la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
            if (U.listener_query(N.listener, &la) == UCS_OK)
                N.port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
        }
        else if (getenv("RDMA_UCX_ADDR") && getenv("RDMA_UCX_ADDR")[0]) {
            ucs_fail(st, s, "ucp_listener_create", "listening on "
                     "RDMA_UCX_ADDR (does UCX_TLS include tcp?)");
            goto out;
        }
        else
            N.listener = NULL;      /* same-host only */
        /* open mode: no secret and a listener others can reach */
        N.open_mode = !N.have_shared && N.listener != NULL &&
                      (ntohl(N.ip) >> 24) != 127;
    }
    /* the guard: UCX's listening sockets are those that are new now */
    {
        int n = listen_scan(after, lfd, lport, 64), i, k;
        N.nlsn = 0;
        for (i = 0; i < n && N.nlsn < 32; i++) {
            for (k = 0; k < nbefore; k++)
                if (before[k] == after[i])
                    break;
            if (k < nbefore)
                continue;
            N.lsn_fd[N.nlsn] = lfd[i];
            N.lsn_port[N.nlsn] = lport[i];
            N.nlsn++;
        }
    }
    /* identity: GUID = IPv4 | port | salt, LID unique on this host */
    {
        int tries, fd;
        char path[300];
        for (tries = 0; tries < SALT_TRIES; tries++) {
            uint8_t g[8];
            int rfd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            if (rfd < 0 || read(rfd, salt, 2) != 2) {
                salt[0] = (uint8_t)getpid();
                salt[1] = (uint8_t)(getpid() >> 8) ^ (uint8_t)tries;
            }
            if (rfd >= 0)
                close(rfd);
            memcpy(g, &N.ip, 4);
            g[4] = (uint8_t)(N.port >> 8);
            g[5] = (uint8_t)N.port;
            g[6] = salt[0];
            g[7] = salt[1];
            memcpy(&be, g, 8);
            N.guid = be64toh(be);
            snprintf(path, sizeof(path), "%s/node-%016llx", N.dir,
                     (unsigned long long)N.guid);
            fd = priv_open(path, O_RDONLY, 0);
            if (fd < 0)
                break;
            {
                struct record r;
                ssize_t n = read(fd, &r, sizeof(r));
                close(fd);
                if (n != (ssize_t)sizeof(r) || !pid_alive(r.pid)) {
                    unlink(path);
                    snprintf(path, sizeof(path), "%s/keys-%016llx", N.dir,
                             (unsigned long long)N.guid);
                    unlink(path);
                    break;
                }
            }
        }
        memset(N.gid, 0, 16);
        N.gid[0] = 0xfe;
        N.gid[1] = 0x80;
        be = htobe64(N.guid);
        memcpy(N.gid + 8, &be, 8);
        if (claim_lid((uint16_t)(N.guid ^ (N.guid >> 16) ^ (N.guid >> 32))) < 0
            || write_record() < 0) {
            pyrdma_fail(st, errno ? errno : EIO, "open",
                        "cannot register in %s", N.dir);
            goto out;
        }
        sh_create();
    }
    /* wake-ups */
    if ((s = U.worker_get_efd(N.w, &N.efd)) != UCS_OK) {
        ucs_fail(st, s, "ucp_worker_get_efd", "event fd");
        goto out;
    }
    N.epfd = epoll_create1(EPOLL_CLOEXEC);
    N.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (N.epfd < 0 || N.stopfd < 0) {
        pyrdma_fail(st, errno, "epoll_create1", "");
        goto out;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.efd, &ev);
    epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.stopfd, &ev);
    N.quietfd = epoll_create1(EPOLL_CLOEXEC);
    if (N.quietfd < 0) {
        pyrdma_fail(st, errno, "epoll_create1", "");
        goto out;
    }
    epoll_ctl(N.quietfd, EPOLL_CTL_ADD, N.stopfd, &ev);
    {
        /* a new connection to a listening socket wakes the guard */
        int i;
        struct epoll_event le;
        memset(&le, 0, sizeof(le));
        le.events = EPOLLIN | EPOLLET;
        le.data.u64 = GUARD_TAG;
        for (i = 0; i < N.nlsn; i++) {
            epoll_ctl(N.epfd, EPOLL_CTL_ADD, N.lsn_fd[i], &le);
            epoll_ctl(N.quietfd, EPOLL_CTL_ADD, N.lsn_fd[i], &le);
        }
    }
    N.pid = getpid();
    N.qp_next = 2;
    if (pthread_create(&N.thr, NULL, progress_main, NULL) != 0) {
        pyrdma_fail(st, EAGAIN, "pthread_create", "progress thread");
        goto out;
    }
    {
        static int registered;
        if (!registered) {
            registered = 1;
            atexit(node_atexit);
        }
    }
    N.up = 1;
    rc = 0;
out:
    if (rc < 0) {
        /* leave UCP objects alone (a retry makes new ones); close fds */
        if (N.epfd >= 0)
            close(N.epfd);
        if (N.stopfd >= 0)
            close(N.stopfd);
        if (N.lidfile[0])
            unlink(N.lidfile);
        N.epfd = N.stopfd = -1;
    }
    pthread_mutex_unlock(&init_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* device, context, port                                               */

static int
get_devices(struct pyrdma_devinfo **out, int *n, struct pyrdma_status *st)
{
    struct pyrdma_devinfo *d;

    *out = NULL;
    *n = 0;
    if (node_up(st) < 0)
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
    if (node_up(st) < 0)
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
    a->vendor_id = 0;
    a->vendor_part_id = 0x5543;
    a->hw_ver = 1;
    a->max_qp = MAX_QP - 2;
    a->max_qp_wr = MAX_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN |
                          IBV_DEVICE_SHUTDOWN_PORT | IBV_DEVICE_SYS_IMAGE_GUID;
    a->max_sge = MAX_SGE;
    a->max_sge_rd = MAX_SGE;
    a->max_cq = 1 << 16;
    a->max_cqe = MAX_CQE;
    a->max_mr = 1 << 20;
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
    a->gid_tbl_len = 1;
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
    if (port != 1 || index != 0)
        return pyrdma_fail(st, EINVAL, "ibv_query_gid", "port %u index %d: "
                           "the fabric port has one GID (1/0)", port, index);
    memset(e, 0, sizeof(*e));
    memcpy(e->gid, N.gid, 16);
    e->gid_type = 0;        /* IBV_GID_TYPE_IB */
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

static int
async_fd(void *vc)
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
/* PD, MR                                                              */

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

static int
mr_insert(struct umr *mr, struct pyrdma_mr_info *info,
          struct pyrdma_status *st)
{
    uint32_t i;
    LOCK();
    for (i = 1; i < N.nmr; i++)
        if (N.mrs[i] == NULL)
            break;
    if (i >= N.nmr) {
        uint32_t nn = N.nmr ? N.nmr * 2 : 256;
        struct umr **m;
        uint8_t *g;
        if (nn > (1u << 24)) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "too many MRs");
        }
        m = realloc(N.mrs, sizeof(*m) * nn);
        if (m == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "");
        }
        N.mrs = m;
        g = realloc(N.mr_gen, nn);
        if (g == NULL) {
            UNLOCK();
            return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "");
        }
        N.mr_gen = g;
        memset(N.mrs + N.nmr, 0, sizeof(*m) * (nn - N.nmr));
        memset(N.mr_gen + N.nmr, 0, nn - N.nmr);
        if (N.nmr == 0)
            i = 1;
        else
            i = N.nmr;
        N.nmr = nn;
    }
    N.mr_gen[i]++;
    mr->key = (i << 8) | N.mr_gen[i];
    N.mrs[i] = mr;
    UNLOCK();
    info->lkey = info->rkey = mr->key;
    return 0;
}

/* Read the first number in file path into *v; return 0, or -1 if there
   is none ("max", no file). */
static int
read_num(const char *path, unsigned long long *v)
{
    FILE *f = fopen(path, "re");
    int n;
    if (f == NULL)
        return -1;
    n = fscanf(f, "%llu", v);
    fclose(f);
    return n == 1 ? 0 : -1;
}

/* The smallest memory limit of the process's memory cgroup and its
   ancestors (cgroup v2 memory.max, v1 memory.limit_in_bytes);
   ULLONG_MAX if none. */
static unsigned long long
cgroup_mem_limit(void)
{
    unsigned long long lim = ULLONG_MAX, v;
    char line[512], v1[1024] = "", v2[1024] = "", *path, *slash;
    const char *file;
    size_t root;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return lim;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *c = strchr(line, ':'), *d = c ? strchr(c + 1, ':') : NULL;
        if (d == NULL)
            continue;
        line[strcspn(line, "\n")] = 0;
        *d = 0;
        if (strcmp(line, "0") == 0 && c[1] == 0)            /* v2 */
            snprintf(v2, sizeof(v2), "/sys/fs/cgroup%s", d + 1);
        else if (strstr(c + 1, "memory") != NULL)          /* v1 */
            snprintf(v1, sizeof(v1), "/sys/fs/cgroup/memory%s", d + 1);
    }
    fclose(f);
    /* v1's memory controller if it has one (a hybrid layout), else v2 */
    path = v1[0] ? v1 : v2;
    file = v1[0] ? "memory.limit_in_bytes" : "memory.max";
    root = strlen(v1[0] ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup");
    while (path[0]) {           /* the cgroup, then each ancestor */
        char fp[1100];
        snprintf(fp, sizeof(fp), "%s/%s", path, file);
        if (read_num(fp, &v) == 0 && v < lim)
            lim = v;
        slash = strrchr(path, '/');
        if (slash == NULL || (size_t)(slash - path) < root)
            break;
        *slash = 0;
    }
    return lim;
}

/* The memory the process can have backed: RAM and swap, the memory
   cgroup's limit (and swap); *as_left: the address space RLIMIT_AS leaves
   (ULLONG_MAX: no limit). */
static unsigned long long
mem_backable(unsigned long long *as_left)
{
    unsigned long long lim = ULLONG_MAX, swap = 0, cg, vm;
    struct sysinfo si;
    struct rlimit rl;
    if (sysinfo(&si) == 0) {
        swap = (unsigned long long)si.totalswap * si.mem_unit;
        lim = (unsigned long long)si.totalram * si.mem_unit + swap;
    }
    cg = cgroup_mem_limit();
    if (cg < lim && cg + swap < lim)
        lim = cg + swap;
    *as_left = ULLONG_MAX;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        if (read_num("/proc/self/statm", &vm) < 0)
            vm = 0;
        vm *= (unsigned long long)sysconf(_SC_PAGESIZE);
        *as_left = rl.rlim_cur > vm ? rl.rlim_cur - vm : 0;
    }
    return lim;
}

/* What UCX mapped at addr: 1 a SysV segment (its id in *shmid), 0
   anonymous memory (mmap), -1 anything else or not found. */
static int
mem_kind(const void *addr, int *shmid)
{
    char line[4096];
    int kind = -1;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long start, end, ino;
        char name[4096] = "";
        /* anonymous mappings may have merged with a neighbour */
        if (sscanf(line, "%llx-%llx %*s %*s %*s %llu %4095s", &start, &end,
                   &ino, name) < 3 || start > (uintptr_t)addr ||
            end <= (uintptr_t)addr)
            continue;
        if (strncmp(name, "/SYSV", 5) == 0 && ino <= INT32_MAX &&
            start == (uintptr_t)addr) {
            *shmid = (int)ino;  /* a SysV segment's inode is its id */
            kind = 1;
        }
        else if (name[0] == 0 && ino == 0)
            kind = 0;
        break;
    }
    fclose(f);
    return kind;
}

/* Make the SysV segment shmid, just created by this process and attached
   once (here), private: mode 0600 instead of UCX's 0660.  Return 0, or -1
   if it cannot be, or if another process attached it in the meantime. */
static int
shm_private(int shmid, size_t length)
{
    struct shmid_ds ds;
    if (shmctl(shmid, IPC_STAT, &ds) < 0 || ds.shm_cpid != getpid() ||
        ds.shm_segsz < length)
        return -1;
    ds.shm_perm.mode = (ds.shm_perm.mode & ~0777u) | 0600;
    if (shmctl(shmid, IPC_SET, &ds) < 0 || shmctl(shmid, IPC_STAT, &ds) < 0)
        return -1;
    return (ds.shm_perm.mode & 0777) == 0600 && ds.shm_nattch == 1 ? 0 : -1;
}

/* PD.alloc_mr memory: UCX allocates it (shared memory a same-host peer
   can map: the one-sided fast path).  UCX is asked only for what max_mr_size
   allows and memory can back (it would otherwise fall back to a POSIX
   segment and write every byte of it); only SysV segments (made private
   to the user) or anonymous memory are used (ALLOC_PRIO at init), both
   zero-filled by the kernel, so no page is touched here. */
static int
alloc_mr_mem(void *pd, size_t length, void **mem, void **cookie,
             struct pyrdma_status *st)
{
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t a;
    struct umem *u;
    ucs_status_t s;
    size_t rlen = 0;
    void *rbuf = NULL;
    unsigned long long can, as_left, held = 0;
    int kind, shmid = -1;
    (void)pd;
    if (length > MAX_MR_SIZE)
        return pyrdma_fail(st, ENOMEM, "ibv_reg_mr", "alloc_mr(): %zu bytes "
                           "is more than max_mr_size (%llu)", length,
                           MAX_MR_SIZE);
    /* what a NIC would pin: the live alloc_mr memory of this process
       holds part of what memory can back */
    can = mem_backable(&as_left);
    LOCK();
    for (u = N.umems; u != NULL; u = u->next)
        held += u->len;
    UNLOCK();
    if (length > as_left || length > can || held > can - length)
        return pyrdma_fail(st, ENOMEM, "mmap", "alloc_mr(): %zu bytes "
                           "cannot be backed: RAM and swap or the memory "
                           "cgroup allow %llu (alloc_mr memory holds %llu), "
                           "RLIMIT_AS leaves %llu", length, can, held,
                           as_left);
    u = calloc(1, sizeof(*u));
    if (u == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                    UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = NULL;
    mp.length = length;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    s = U.mem_map(N.uctx, &mp, &u->memh);
    if (s != UCS_OK) {
        free(u);
        return ucs_fail(st, s, "ucp_mem_map", "alloc_mr()");
    }
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if (U.mem_query(u->memh, &a) != UCS_OK ||
        ((uintptr_t)a.address & 4095) != 0 || a.length < length) {
        U.mem_unmap(N.uctx, u->memh);
        free(u);
        return pyrdma_fail(st, ENOMEM, "ucp_mem_map", "alloc_mr(): UCX "
                           "gave no page-aligned memory");
    }
    u->addr = a.address;
    u->len = length;
    u->maplen = (a.length + 4095) & ~(size_t)4095;
    kind = mem_kind(u->addr, &shmid);
    if (kind == 1 && shm_private(shmid, length) < 0) {
        U.mem_unmap(N.uctx, u->memh);
        free(u);
        return pyrdma_fail(st, EACCES, "shmctl", "alloc_mr(): could not make "
                           "the shared memory segment private (mode 0600)");
    }
    if (kind < 0)
        memset(u->addr, 0, length);     /* not known to be zero-filled */
    if (U.rkey_pack(N.uctx, u->memh, &rbuf, &rlen) == UCS_OK) {
        if (rlen <= SH_RKEY_MAX && (u->rkey = malloc(rlen)) != NULL) {
            memcpy(u->rkey, rbuf, rlen);
            u->rkey_len = rlen;
        }
        U.rkey_buffer_release(rbuf);
    }
    LOCK();
    u->next = N.umems;
    N.umems = u;
    UNLOCK();
    *mem = u->addr;
    *cookie = u;
    return 0;
}

/* Move the mapping of len bytes at from to to (replacing what is there),
   with the system call itself: UCX's memory hooks intercept mremap(3)
   and do not pass a new address on.  to, or MAP_FAILED. */
static void *
raw_mremap(void *from, size_t len, void *to)
{
    long r = syscall(SYS_mremap, from, len, len,
                     MREMAP_MAYMOVE | MREMAP_FIXED, to);
    return r == -1 ? MAP_FAILED : (void *)r;
}

/* The last view of alloc_mr memory is gone and its MR is deregistered. */
static void
free_mr_mem(void *cookie)
{
    struct umem *u = cookie, **pp;
    LOCK();
    for (pp = &N.umems; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            break;
        }
    if (u->shadow != NULL) {
        /* UCX's own mapping goes back where UCX unmaps it (in place of
           the private copy) */
        if (raw_mremap(u->shadow, u->maplen, u->addr) == MAP_FAILED)
            munmap(u->shadow, u->maplen);
        u->shadow = NULL;
    }
    UNLOCK();
    U.mem_unmap(N.uctx, u->memh);
    free(u->rkey);
    free(u);
}

/* An initiator is still inside a one-sided op on memory u after its MR
   was deregistered and the wait for it ran out (stopped with SIGSTOP, or
   descheduled for a second, in the middle of a large copy): it writes or
   reads through its own mapping of UCX's shared memory, which only
   ending the sharing can stop.  So this process's view of u becomes a
   private copy (no byte an initiator writes from now on lands in it, and
   no read sees what the owner writes from now on), every other MR in u
   leaves the key page (they go on through the active-message path, into
   the private copy), and UCX's mapping moves aside until free_mr_mem.
   N.lock held (the responder touches user memory only under it).
   0 or -1 (then nothing changed but the withdrawals). */
static int
mem_revoke(struct umem *u)
{
    uint8_t *copy, *aside;
    uint32_t i;

    if (u->shadow != NULL)
        return 0;
    for (i = 1; i < N.nmr && i < SH_MR; i++) {
        struct umr *m = N.mrs[i];
        if (m != NULL && m->umem == u && m->shared) {
            __atomic_store_n(&N.sh->mr[i].key, 0, __ATOMIC_SEQ_CST);
            m->shared = 0;
        }
    }
    copy = mmap(NULL, u->maplen, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    aside = mmap(NULL, u->maplen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    if (copy == MAP_FAILED || aside == MAP_FAILED) {
        if (copy != MAP_FAILED)
            munmap(copy, u->maplen);
        if (aside != MAP_FAILED)
            munmap(aside, u->maplen);
        return -1;
    }
    memcpy(copy, u->addr, u->maplen);
    /* the shared pages move aside (into the reservation), the copy takes
       their place: a few microseconds in which addr is unmapped, under
       N.lock (Python code runs under the GIL, held by the caller) */
    if (raw_mremap(u->addr, u->maplen, aside) == MAP_FAILED) {
        munmap(copy, u->maplen);
        munmap(aside, u->maplen);
        return -1;
    }
    if (raw_mremap(copy, u->maplen, u->addr) == MAP_FAILED) {
        /* put the shared pages back: the owner keeps its memory */
        raw_mremap(aside, u->maplen, u->addr);
        munmap(copy, u->maplen);
        return -1;
    }
    u->shadow = aside;
    if (N.sh != NULL)
        __atomic_fetch_add(&N.sh->st_revoked, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Publish mr in the key page if it lies in UCX-allocated memory (N.lock
   held). */
static void
sh_mr_publish(struct umr *mr)
{
    struct umem *u;
    struct sh_mr *e;
    uint32_t idx = mr->key >> 8;
    if (N.sh == NULL || idx >= SH_MR)
        return;
    for (u = N.umems; u; u = u->next)
        if (mr->addr >= u->addr && mr->len <= u->len &&
            (size_t)(mr->addr - u->addr) <= u->len - mr->len)
            break;
    if (u == NULL)
        return;
    mr->umem = u;
    if (u->rkey == NULL || u->shadow != NULL)
        return;                 /* no rkey, or revoked (mem_revoke) */
    e = &N.sh->mr[idx];
    __atomic_store_n(&e->key, 0, __ATOMIC_SEQ_CST);
    e->access = mr->access;
    e->pd = (uint64_t)(uintptr_t)mr->pd;
    e->addr = (uint64_t)(uintptr_t)mr->addr;
    e->len = mr->len;
    memcpy(e->rkey, u->rkey, u->rkey_len);
    e->rkey_len = (uint32_t)u->rkey_len;
    __atomic_store_n(&e->key, mr->key, __ATOMIC_SEQ_CST);
    mr->shared = 1;
}

static int
reg_mr(void *pd, void *addr, size_t length, unsigned int access, void **out,
       struct pyrdma_mr_info *info, struct pyrdma_status *st)
{
    struct umr *mr;
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return pyrdma_fail(st, EINVAL, "ibv_reg_mr", "remote write or atomic "
                           "access needs IBV_ACCESS_LOCAL_WRITE");
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    mr->pd = pd;
    mr->addr = addr;
    mr->len = length;
    mr->access = access;
    if (mr_insert(mr, info, st) < 0) {
        free(mr);
        return -1;
    }
    LOCK();
    sh_mr_publish(mr);
    UNLOCK();
    *out = mr;
    return 0;
}

static int
dereg_mr(void *vmr, struct pyrdma_status *st)
{
    struct umr *mr = vmr;
    struct sh_mr *e = NULL;
    (void)st;
    LOCK();
    N.mrs[mr->key >> 8] = NULL;
    if (mr->shared) {
        /* no new one-sided op can start; wait for those inside one */
        e = &N.sh->mr[mr->key >> 8];
        __atomic_store_n(&e->key, 0, __ATOMIC_SEQ_CST);
    }
    UNLOCK();
    if (e != NULL && sh_quiesce(&e->inflight)) {
        /* an initiator is still inside an op on it: fence it out */
        LOCK();
        if (mr->umem != NULL)
            mem_revoke(mr->umem);
        UNLOCK();
    }
    free(mr);
    return 0;
}

/* ------------------------------------------------------------------ */
/* completion channels and CQs                                         */

static int
create_comp_channel(void *vc, void **out, int *fd, struct pyrdma_status *st)
{
    struct ucc *cc = calloc(1, sizeof(*cc));
    (void)vc;
    if (cc == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    cc->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cc->fd < 0) {
        free(cc);
        return pyrdma_fail(st, errno, "eventfd", "");
    }
    *out = cc;
    *fd = cc->fd;
    return 0;
}

static int
destroy_comp_channel(void *vcc, struct pyrdma_status *st)
{
    struct ucc *cc = vcc;
    (void)st;
    close(cc->fd);
    free(cc->q);
    free(cc->qcq);
    free(cc);
    return 0;
}

static int
get_cq_event(void *vcc, void **cq_context, struct pyrdma_status *st)
{
    struct ucc *cc = vcc;
    uint64_t v;
    (void)st;
    LOCK();
    if (cc->head == cc->tail) {
        UNLOCK();
        return 0;
    }
    *cq_context = cc->q[cc->head % cc->cap];
    cc->head++;
    if (cc->head == cc->tail && read(cc->fd, &v, sizeof(v)) < 0) {
        /* already drained */
    }
    UNLOCK();
    return 1;
}

static void
ack_cq_events(void *cq, unsigned int n)
{
    (void)cq;
    (void)n;
}

static int
create_cq(void *vc, int cqe, void *cq_context, void *vcc, int vector,
          void **out, int *actual, struct pyrdma_status *st)
{
    struct ucq *cq;
    uint32_t n;
    (void)vector;
    if (cqe < 1 || cqe > MAX_CQE)
        return pyrdma_fail(st, EINVAL, "ibv_create_cq", "cqe %d not in "
                           "1..%d", cqe, MAX_CQE);
    cq = calloc(1, sizeof(*cq));
    if (cq == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    n = pow2((uint32_t)cqe + 1);
    cq->ring = calloc(n, sizeof(*cq->ring));
    if (cq->ring == NULL) {
        free(cq);
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    }
    cq->ctx = vc;
    cq->cc = vcc;
    cq->cq_context = cq_context;
    cq->mask = n - 1;
    cq->cqe = (uint32_t)cqe;
    *out = cq;
    *actual = cqe;
    return 0;
}

static int
destroy_cq(void *vcq, struct pyrdma_status *st)
{
    struct ucq *cq = vcq;
    (void)st;
    LOCK();
    if (cq->cc != NULL) {
        /* forget its unread events */
        struct ucc *cc = cq->cc;
        uint32_t i, k = cc->head;
        for (i = cc->head; i != cc->tail; i++)
            if (cc->qcq[i % cc->cap] != cq) {
                cc->q[k % cc->cap] = cc->q[i % cc->cap];
                cc->qcq[k % cc->cap] = cc->qcq[i % cc->cap];
                k++;
            }
        cc->tail = k;
        if (cc->head == cc->tail) {
            uint64_t v;
            if (read(cc->fd, &v, sizeof(v)) < 0) {
                /* nothing pending */
            }
        }
    }
    UNLOCK();
    free(cq->ring);
    free(cq);
    return 0;
}

static int
resize_cq(void *vcq, int cqe, int *actual, struct pyrdma_status *st)
{
    struct ucq *cq = vcq;
    struct pyrdma_wc *ring;
    uint32_t n, i, used;
    if (cqe < 1 || cqe > MAX_CQE)
        return pyrdma_fail(st, EINVAL, "ibv_resize_cq", "cqe %d", cqe);
    n = pow2((uint32_t)cqe + 1);
    ring = calloc(n, sizeof(*ring));
    if (ring == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    LOCK();
    used = cq->tail - cq->head;
    if (used > (uint32_t)cqe) {
        UNLOCK();
        free(ring);
        return pyrdma_fail(st, EINVAL, "ibv_resize_cq", "%u completions "
                           "are queued", used);
    }
    for (i = 0; i < used; i++)
        ring[i] = cq->ring[(cq->head + i) & cq->mask];
    free(cq->ring);
    cq->ring = ring;
    cq->mask = n - 1;
    cq->head = 0;
    cq->tail = used;
    cq->cqe = (uint32_t)cqe;
    UNLOCK();
    *actual = cqe;
    return 0;
}

static int
req_notify_cq(void *vcq, int solicited_only)
{
    struct ucq *cq = vcq;
    LOCK();
    cq->armed = solicited_only ? 2 : 1;
    UNLOCK();
    return 0;
}

static int
cq_take(struct ucq *cq, int n, struct pyrdma_wc *wc)
{
    int got = 0;
    LOCK();
    while (got < n && cq->head != cq->tail) {
        wc[got++] = cq->ring[cq->head & cq->mask];
        cq->head++;
    }
    UNLOCK();
    return got;
}

static __thread unsigned empty_polls __attribute__((tls_model("initial-exec")));   /* consecutive empty poll_cq */

static int
poll_cq(void *vcq, int n, struct pyrdma_wc *wc)
{
    struct ucq *cq = vcq;
    int got;
    if (n <= 0)
        return 0;
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) != cq->head)
        return cq_take(cq, n, wc);
    /* empty: make progress here (no thread hop), then look again */
    __atomic_store_n(&N.app_polls,
                     __atomic_load_n(&N.app_polls, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
    in_app_poll = 1;
    /* UCP every time too: while the application polls, its poll_cq is
       the only progress UCP gets (the progress thread stands back) */
    if (N.nrx)
        rings_poll();
    U.worker_progress(N.w);
    if (N.nrx && __atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head)
        rings_poll();           /* what landed during UCP's turn */
    in_app_poll = 0;
    /* Responses queued by callbacks (ours or the progress thread's) go out
       now: the progress thread is standing back while we poll.  When
       there are completions to return, an ACK may stay for the reply the
       application is likely to post next (see in_app_poll). */
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head)
        drain(1);
    else
        drain(0);
    /* The progress thread sleeps while the application polls: the
       messages this poll consumed did not wake it.  Wake it once, so it
       stands back and keeps draining what the application leaves queued
       (deferred ACKs: at most ~1 ms late, not a whole sleep). */
    if (__atomic_load_n(&N.pt_asleep, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&N.pt_asleep, 0, __ATOMIC_RELAXED))
        wake_progress();
    if (__atomic_load_n(&cq->tail, __ATOMIC_ACQUIRE) == cq->head) {
        /* Busy polling on an oversubscribed machine: the peer we wait
           for may need this very CPU.  After a run of empty polls, give
           it up once (costs nothing when no one else is runnable). */
        if (++empty_polls >= 64) {
            empty_polls = 0;
            sched_yield();
        }
        return 0;
    }
    empty_polls = 0;
    got = cq_take(cq, n, wc);
    return got;
}

/* ------------------------------------------------------------------ */
/* SRQ                                                                 */

static int
create_srq(void *pd, struct pyrdma_srq_attr *a, void *ctxp, void **out,
           struct pyrdma_status *st)
{
    struct usrq *s;
    if (a->max_wr < 1 || a->max_wr > MAX_WR || a->max_sge > MAX_SGE)
        return pyrdma_fail(st, EINVAL, "ibv_create_srq", "max_wr %u / "
                           "max_sge %u (limits %d / %d)", a->max_wr,
                           a->max_sge, MAX_WR, MAX_SGE);
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    if (rq_init(&s->rq, a->max_wr, a->max_sge ? a->max_sge : 1) < 0) {
        free(s);
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    }
    s->pd = pd;
    s->srq_context = ctxp;
    s->limit = a->srq_limit;
    a->max_sge = s->rq.max_sge;
    *out = s;
    return 0;
}

static int
modify_srq(void *vs, struct pyrdma_srq_attr *a, int mask,
           struct pyrdma_status *st)
{
    struct usrq *s = vs;
    if (mask & PYRDMA_SRQ_MAX_WR)
        return pyrdma_fail(st, EINVAL, "ibv_modify_srq", "resizing an SRQ "
                           "is not supported by the ucx fabric");
    if (mask & PYRDMA_SRQ_LIMIT) {
        if (a->srq_limit > s->rq.max_wr)
            return pyrdma_fail(st, EINVAL, "ibv_modify_srq", "srq_limit %u "
                               "> max_wr %u", a->srq_limit, s->rq.max_wr);
        LOCK();
        s->limit = a->srq_limit;
        UNLOCK();
    }
    return 0;
}

static int
query_srq(void *vs, struct pyrdma_srq_attr *a, struct pyrdma_status *st)
{
    struct usrq *s = vs;
    (void)st;
    a->max_wr = s->rq.max_wr;
    a->max_sge = s->rq.max_sge;
    a->srq_limit = s->limit;
    return 0;
}

static int
destroy_srq(void *vs, struct pyrdma_status *st)
{
    struct usrq *s = vs;
    (void)st;
    rq_free(&s->rq);
    free(s);
    return 0;
}

/* Run the held messages of the QPs that take receives from r. */
static void
rq_refilled(struct usrq *srq, struct uqp *own)
{
    int i;
    if (own != NULL) {
        if (own->inq)
            inq_run(own);
        return;
    }
    for (i = 0; i < (int)N.qp_hi; i++) {
        struct uqp *q = N.qps[i];
        if (q != NULL && q->srq == srq && q->inq != NULL && !q->destroyed)
            inq_run(q);
    }
}

static int
post_srq_recv(void *vs, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    struct usrq *s = vs;
    int rc, any;
    LOCK();
    rc = rq_post(&s->rq, wr, bad);
    rq_refilled(s, NULL);
    any = ob_urgent();
    UNLOCK();
    if (any)
        drain(0);       /* a reply may follow: deferred ACKs stay */
    return rc;
}

/* ------------------------------------------------------------------ */
/* QP                                                                  */

static int
create_qp(void *vpd, struct pyrdma_qp_init_attr *a, void **out, uint32_t *qpn,
          struct pyrdma_status *st)
{
    struct uqp *q;
    struct pyrdma_qp_cap *c = &a->cap;
    uint32_t n, i, idx;

    if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC &&
        a->qp_type != IBV_QPT_UD)
        return pyrdma_fail(st, EINVAL, "ibv_create_qp", "qp_type %d",
                           a->qp_type);
    if (c->max_send_wr > MAX_WR || c->max_recv_wr > MAX_WR ||
        c->max_send_sge > MAX_SGE || c->max_recv_sge > MAX_SGE ||
        c->max_inline_data > MAX_INLINE)
        return pyrdma_fail(st, EINVAL, "ibv_create_qp", "capacities beyond "
                           "the device's (wr %d, sge %d, inline %d)", MAX_WR,
                           MAX_SGE, MAX_INLINE);
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return pyrdma_fail(st, ENOMEM, "calloc", "");
    q->pd = vpd;
    q->scq = a->send_cq;
    q->rcq = a->recv_cq;
    q->srq = a->srq;
    q->qp_context = a->qp_context;
    q->type = a->qp_type;
    q->sq_sig_all = a->sq_sig_all;
    if (c->max_send_sge == 0)
        c->max_send_sge = 1;
    if (c->max_recv_sge == 0)
        c->max_recv_sge = 1;
    if (q->srq != NULL) {
        c->max_recv_wr = 0;
        c->max_recv_sge = 0;
    }
    q->cap = *c;
    n = pow2(c->max_send_wr ? c->max_send_wr : 1);
    q->sq = calloc(n, sizeof(*q->sq));
    if (q->sq == NULL)
        goto nomem;
    for (i = 0; i < n; i++) {
        q->sq[i].sge = calloc(c->max_send_sge, sizeof(struct pyrdma_sge));
        if (q->sq[i].sge == NULL)
            goto nomem;
        q->sq[i].buf = q->sq[i].small;
        q->sq[i].cap = SLOT_SMALL;
    }
    q->sq_mask = n - 1;
    if (q->srq == NULL && rq_init(&q->rq, c->max_recv_wr, c->max_recv_sge) < 0)
        goto nomem;
    pthread_mutex_init(&q->post_lock, NULL);
    q->attr.qp_state = IBV_QPS_RESET;
    q->attr.cap = *c;
    q->attr.path_mtu = PORT_MTU;
    q->attr.port_num = 1;
    LOCK();
    for (i = 0; i < MAX_QP; i++) {
        idx = (N.qp_next + i) & (MAX_QP - 1);
        if (idx >= 2 && N.qps[idx] == NULL)
            break;
    }
    if (i == MAX_QP) {
        UNLOCK();
        pyrdma_fail(st, ENOMEM, "ibv_create_qp", "too many QPs");
        goto fail;
    }
    N.qp_next = idx + 1;
    if (idx + 1 > N.qp_hi)
        N.qp_hi = idx + 1;
    N.qp_gen[idx] = (uint16_t)((N.qp_gen[idx] + 1) & 0x3ff);
    q->qpn = ((uint32_t)N.qp_gen[idx] << QPN_IDX_BITS) | idx;
    N.qps[idx] = q;
    UNLOCK();
    *out = q;
    *qpn = q->qpn;
    return 0;
nomem:
    pyrdma_fail(st, ENOMEM, "calloc", "");
fail:
    if (q->sq)
        for (i = 0; i <= q->sq_mask || (q->sq_mask == 0 && i < n); i++) {
            if (i >= n)
                break;
            free(q->sq[i].sge);
        }
    free(q->sq);
    rq_free(&q->rq);
    free(q);
    return -1;
}

/* The IBA modify_qp table: required and optional attributes. */
#define M(x) PYRDMA_QP_##x
static int
qp_table(int type, int cur, int next, int *req, int *opt)
{
    int ud = type == IBV_QPT_UD, rc = type == IBV_QPT_RC;
    *req = *opt = 0;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return 1;
    switch (cur) {
    case IBV_QPS_RESET:
        if (next != IBV_QPS_INIT)
            return 0;
        *req = M(PKEY_INDEX) | M(PORT) | (ud ? M(QKEY) : M(ACCESS_FLAGS));
        return 1;
    case IBV_QPS_INIT:
        if (next == IBV_QPS_INIT) {
            *opt = M(PKEY_INDEX) | M(PORT) | (ud ? M(QKEY) : M(ACCESS_FLAGS));
            return 1;
        }
        if (next != IBV_QPS_RTR)
            return 0;
        if (!ud)
            *req = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
                   (rc ? M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER) : 0);
        *opt = M(PKEY_INDEX) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH));
        return 1;
    case IBV_QPS_RTR:
        if (next != IBV_QPS_RTS)
            return 0;
        *req = M(SQ_PSN) | (rc ? M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) |
                                 M(MAX_QP_RD_ATOMIC) : 0);
        *opt = M(CUR_STATE) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH) |
                               M(PATH_MIG_STATE) |
                               (rc ? M(MIN_RNR_TIMER) : 0));
        return 1;
    case IBV_QPS_RTS:
    case IBV_QPS_SQE:
        if (next != IBV_QPS_RTS)
            return 0;
        *opt = M(CUR_STATE) | (ud ? M(QKEY) : M(ACCESS_FLAGS) | M(ALT_PATH) |
                               M(PATH_MIG_STATE) |
                               (rc ? M(MIN_RNR_TIMER) : 0));
        return 1;
    case IBV_QPS_ERR:
        return 0;
    default:
        return 0;
    }
}

/* Forget everything in flight (RESET).  N.lock held. */
static void
qp_reset(struct uqp *q)
{
    q->sq_head = q->sq_tail;
    q->err_pending = 0;
    q->epoch++;
    q->rx_seen = q->alt = 0;
    q->naked = 0;
    q->dead_valid = 0;
    q->rq.head = q->rq.tail;
    inmsg_list_free(q->inq);
    inmsg_list_free(q->ooo);
    q->inq = q->inq_tail = q->ooo = NULL;
    q->peer = NULL;
    memset(&q->attr, 0, sizeof(q->attr));
    q->attr.cap = q->cap;
    q->attr.path_mtu = PORT_MTU;
    q->attr.port_num = 1;
}

static int
modify_qp(void *vq, struct pyrdma_qp_attr *a, int mask,
          struct pyrdma_status *st)
{
    struct uqp *q = vq;
    int cur, next, req, opt;
    struct peer *peer = NULL;
    const int known = M(STATE) | M(CUR_STATE) | M(EN_SQD_ASYNC_NOTIFY) |
                      M(ACCESS_FLAGS) | M(PKEY_INDEX) | M(PORT) | M(QKEY) |
                      M(AV) | M(PATH_MTU) | M(TIMEOUT) | M(RETRY_CNT) |
                      M(RNR_RETRY) | M(RQ_PSN) | M(MAX_QP_RD_ATOMIC) |
                      M(ALT_PATH) | M(MIN_RNR_TIMER) | M(SQ_PSN) |
                      M(MAX_DEST_RD_ATOMIC) | M(PATH_MIG_STATE) | M(CAP) |
                      M(DEST_QPN) | M(RATE_LIMIT);

    if (mask & ~known)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "unknown attribute "
                           "mask bits 0x%x", mask & ~known);
    LOCK();
    cur = q->attr.qp_state;
    UNLOCK();
    next = (mask & M(STATE)) ? a->qp_state : cur;
    if ((mask & M(CUR_STATE)) && a->cur_qp_state != cur)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "cur_qp_state %d but "
                           "the QP is in state %d", a->cur_qp_state, cur);
    if (next == IBV_QPS_SQD)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "SQD is not supported "
                           "by the ucx fabric");
    if (!qp_table(q->type, cur, next, &req, &opt))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "illegal transition "
                           "%d -> %d", cur, next);
    opt |= M(STATE) | M(CUR_STATE);
    if ((mask & req) != req)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "transition %d -> %d "
                           "needs attribute mask 0x%x (missing 0x%x)", cur,
                           next, req, req & ~mask);
    if (mask & ~(req | opt))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "attribute mask 0x%x "
                           "not allowed in transition %d -> %d",
                           mask & ~(req | opt), cur, next);
    if ((mask & M(PORT)) && a->port_num != 1)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "port_num %u",
                           a->port_num);
    if ((mask & M(PKEY_INDEX)) && a->pkey_index != 0)
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "pkey_index %u",
                           a->pkey_index);
    if ((mask & M(PATH_MTU)) && (a->path_mtu < IBV_MTU_256 ||
                                 a->path_mtu > PORT_MTU))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "path_mtu %d",
                           a->path_mtu);
    if (((mask & M(TIMEOUT)) && a->timeout > 31) ||
        ((mask & M(RETRY_CNT)) && a->retry_cnt > 7) ||
        ((mask & M(RNR_RETRY)) && a->rnr_retry > 7) ||
        ((mask & M(MIN_RNR_TIMER)) && a->min_rnr_timer > 31) ||
        ((mask & M(MAX_QP_RD_ATOMIC)) && a->max_rd_atomic > MAX_RD_ATOM) ||
        ((mask & M(MAX_DEST_RD_ATOMIC)) &&
         a->max_dest_rd_atomic > MAX_RD_ATOM) ||
        ((mask & M(DEST_QPN)) && a->dest_qp_num > 0xFFFFFF))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "attribute out of "
                           "range");
    if ((mask & M(ACCESS_FLAGS)) &&
        (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE |
                                          IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ |
                                          IBV_ACCESS_REMOTE_ATOMIC |
                                          IBV_ACCESS_MW_BIND)))
        return pyrdma_fail(st, EINVAL, "ibv_modify_qp", "qp_access_flags "
                           "0x%x", a->qp_access_flags);
    if (mask & M(AV)) {
        if (ah_resolve(&a->ah_attr, &peer, st, "ibv_modify_qp") < 0)
            return -1;
    }
    LOCK();
    if (q->attr.qp_state != cur) {
        UNLOCK();
        return pyrdma_fail(st, EAGAIN, "ibv_modify_qp", "the QP changed "
                           "state meanwhile");
    }
    if (next == IBV_QPS_RESET) {
        qp_reset(q);
        sh_qp_sync(q);
        UNLOCK();
        return 0;
    }
    if (mask & M(ACCESS_FLAGS))
        q->attr.qp_access_flags = a->qp_access_flags;
    if (mask & M(PKEY_INDEX))
        q->attr.pkey_index = a->pkey_index;
    if (mask & M(PORT))
        q->attr.port_num = a->port_num;
    if (mask & M(QKEY))
        q->attr.qkey = a->qkey;
    if (mask & M(AV)) {
        q->attr.ah_attr = a->ah_attr;
        q->peer = peer;
    }
    if (mask & M(PATH_MTU))
        q->attr.path_mtu = a->path_mtu;
    if (mask & M(TIMEOUT))
        q->attr.timeout = a->timeout;
    if (mask & M(RETRY_CNT))
        q->attr.retry_cnt = a->retry_cnt;
    if (mask & M(RNR_RETRY))
        q->attr.rnr_retry = a->rnr_retry;
    if (mask & M(RQ_PSN)) {
        q->attr.rq_psn = a->rq_psn & 0xFFFFFF;
        q->expect_psn = q->attr.rq_psn;
    }
    if (mask & M(MAX_QP_RD_ATOMIC))
        q->attr.max_rd_atomic = a->max_rd_atomic;
    if (mask & M(MIN_RNR_TIMER))
        q->attr.min_rnr_timer = a->min_rnr_timer;
    if (mask & M(SQ_PSN)) {
        q->attr.sq_psn = a->sq_psn & 0xFFFFFF;
        q->next_psn = q->attr.sq_psn;
    }
    if (mask & M(MAX_DEST_RD_ATOMIC))
        q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & M(DEST_QPN))
        q->attr.dest_qp_num = a->dest_qp_num;
    if (mask & M(ALT_PATH)) {
        q->attr.alt_ah_attr = a->alt_ah_attr;
        q->attr.alt_pkey_index = a->alt_pkey_index;
        q->attr.alt_port_num = a->alt_port_num;
        q->attr.alt_timeout = a->alt_timeout;
    }
    if (mask & M(PATH_MIG_STATE))
        q->attr.path_mig_state = a->path_mig_state;
    if (next == IBV_QPS_ERR) {
        uint32_t i;
        for (i = q->sq_head; i != q->sq_tail; i++) {
            struct slot *s = &q->sq[i & q->sq_mask];
            if (!s->done) {
                s->done = 1;
                s->status = IBV_WC_WR_FLUSH_ERR;
            }
        }
        q->err_pending = 1;
        qp_enter_err(q);
        sq_advance(q);
    }
    else {
        q->attr.qp_state = next;
        if (next == IBV_QPS_RTS)
            q->err_pending = 0;
    }
    sh_qp_sync(q);
    UNLOCK();
    return 0;
}
#undef M

static int
query_qp(void *vq, struct pyrdma_qp_attr *a, int mask, struct pyrdma_status *st)
{
    struct uqp *q = vq;
    (void)mask;
    (void)st;
    LOCK();
    *a = q->attr;
    a->cur_qp_state = q->attr.qp_state;
    a->cap = q->cap;
    UNLOCK();
    return 0;
}

static int
destroy_qp(void *vq, struct pyrdma_status *st)
{
    struct uqp *q = vq;
    struct obox *o;
    uint32_t i;
    int busy = 0;
    (void)st;
    pthread_mutex_lock(&q->post_lock);
    LOCK();
    q->destroyed = 1;
    sh_qp_sync(q);              /* no new one-sided op can start */
    N.qps[q->qpn & (MAX_QP - 1)] = NULL;
    inmsg_list_free(q->inq);
    inmsg_list_free(q->ooo);
    q->inq = q->inq_tail = q->ooo = NULL;
    dack_queue(q, 0);           /* no reply will carry it: send it now */
    dack_unlist(q);
    for (o = N.ob_head; o; o = o->next)
        if (o->qp == q)
            o->qp = NULL;
    for (i = 0; i <= q->sq_mask; i++) {
        q->sq[i].qp = NULL;
        if (q->sq[i].inflight)
            busy = 1;
    }
    if (busy) {
        /* UCP still reads some slot buffers: keep them until exit */
        struct grave *g = malloc(sizeof(*g));
        if (g != NULL) {
            g->sq = q->sq;
            g->next = N.graves;
            N.graves = g;
        }
        q->sq = NULL;
    }
    UNLOCK();
    if (N.sh != NULL)           /* wait for those inside one */
        sh_quiesce(&N.sh->qp[q->qpn & (MAX_QP - 1)].inflight);
    pthread_mutex_unlock(&q->post_lock);
    pthread_mutex_destroy(&q->post_lock);
    /* its ACKs (deferred ones too) go out before the process may end */
    drain_out();
    if (q->sq != NULL) {
        for (i = 0; i <= q->sq_mask; i++) {
            if (q->sq[i].buf != q->sq[i].small)
                free(q->sq[i].buf);
            free(q->sq[i].sge);
        }
        free(q->sq);
    }
    rq_free(&q->rq);
    free(q);
    return 0;
}

/* UCP finished sending a request (not called for immediate completions). */
static void
req_sent_cb(void *req, ucs_status_t status, void *user)
{
    struct slot *s = user;
    struct uqp *q;
    LOCK();
    q = s->qp;                  /* NULL: the QP is gone (slot in a grave) */
    if (s->inflight && q != NULL)
        q->n_inflight--;
    s->inflight = 0;
    if (q != NULL && (uint32_t)(s->idx - q->sq_head) <
                     (uint32_t)(q->sq_tail - q->sq_head) && !s->done &&
        s->need_send == 0) {
        if (status != UCS_OK)
            sq_fail(q, s->idx, IBV_WC_RETRY_EXC_ERR);
        else if (q->type != IBV_QPT_RC) {
            s->done = 1;        /* UC/UD: complete once sent */
            s->status = IBV_WC_SUCCESS;
        }
        sq_advance(q);
    }
    else if (q != NULL && status != UCS_OK)
        s->imm_done = -1;       /* post_send is still finishing it */
    UNLOCK();
    U.request_free(req);
}

/* Copy the local s/g data of a WR into the slot buffer after the header;
   return 0 or an IBV_WC_* status. */
static int
gather(struct uqp *q, struct slot *s, const struct pyrdma_send_wr *wr,
       size_t total, int inline_data)
{
    size_t need = sizeof(struct wire) + total, off = sizeof(struct wire);
    int i;
    if (!inline_data) {
        int bad = check_sges(q->pd, wr->sg_list, wr->num_sge, 0,
                             IBV_WC_LOC_QP_OP_ERR);
        if (bad)
            return bad;
    }
    if (need > s->cap) {
        uint8_t *b = malloc(need);
        if (b == NULL)
            return IBV_WC_LOC_QP_OP_ERR;
        if (s->buf != s->small)
            free(s->buf);
        s->buf = b;
        s->cap = need;
    }
    for (i = 0; i < wr->num_sge; i++) {
        if (wr->sg_list[i].length)
            memcpy(s->buf + off, (void *)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
        off += wr->sg_list[i].length;
    }
    s->len = need;
    return 0;
}

static int
mtu_bytes(int mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 4096;
}

/* Complete slot s (being filled, not yet counted in the SQ) with an error
   at once; later WRs flush. */
static void
fill_fail(struct uqp *q, struct slot *s, int status)
{
    s->done = 1;
    s->status = status;
    q->err_pending = 1;
}

/* The one-sided fast path (N.lock held): execute an RC WRITE, READ or
   atomic directly in the target's memory, mapped here by UCX (shared
   memory, memory of alloc_mr), if every check a responder makes passes
   on the target's key page and nothing of q is outstanding on the
   active-message path (RC order).  Return 1 if done (the data is in
   place), 0 to take the active-message path, which also produces every
   error completion exactly as before; -1 if the MR was withdrawn while
   the op ran (it fails with REM_ACCESS_ERR).  No malloc, lock or
   syscall. */
/* The in-flight counts a post_send call holds (one atomic add per target
   QP and MR per call, not per WR; dropped before post_send returns). */
struct fhold {
    uint32_t *qp, *mr;
    /* the local MR a one-sided WR of this post_send call last read from
       (N.lock is held throughout: it cannot go away): later WRs within
       it skip the key lookup */
    const struct umr *lmr;
    uint32_t lkey;
};

/* Count an initiator out of *ctr, never below 0: a target that gave up
   waiting for it (sh_quiesce) has reset the count already. */
static void
inflight_out(uint32_t *ctr)
{
    uint32_t v = __atomic_load_n(ctr, __ATOMIC_RELAXED);
    while (v != 0 && !__atomic_compare_exchange_n(ctr, &v, v - 1, 0,
                                                  __ATOMIC_SEQ_CST,
                                                  __ATOMIC_RELAXED))
        ;
}

static void
fhold_drop(struct fhold *h)
{
    if (h->mr != NULL)
        inflight_out(h->mr);
    if (h->qp != NULL)
        inflight_out(h->qp);
    h->mr = h->qp = NULL;
}

static int
fast_op(struct uqp *q, uint32_t *byte_len, const struct pyrdma_send_wr *wr,
        int op, size_t total, int inline_data, struct fhold *h)
{
    struct peer *p = q->peer;
    int atomic = op >= OP_CAS, ok, i;
    uint32_t rkey = atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey;
    uint64_t raddr = atomic ? wr->wr.atomic.remote_addr
                            : wr->wr.rdma.remote_addr;
    uint64_t len = atomic ? 8 : total;
    unsigned need = op == OP_WRITE ? IBV_ACCESS_REMOTE_WRITE :
                    op == OP_READ ? IBV_ACCESS_REMOTE_READ :
                    IBV_ACCESS_REMOTE_ATOMIC;
    uint32_t idx = rkey >> 8, dqpn = q->attr.dest_qp_num;
    struct rkc *c;
    struct sh_qp *t;
    struct sh_mr *m;

    if (len == 0 || idx == 0 || idx >= SH_MR)
        return 0;
    c = &p->rk[idx];
    if (c->key != rkey || c->base == NULL)
        return 0;               /* not mapped (post_send tried) */
    if (q->sq_head != q->sq_tail) {
        sq_advance(q);
        if (q->sq_head != q->sq_tail)
            return 0;           /* an active-message WR is outstanding */
    }
    if (!inline_data) {
        const struct pyrdma_sge *sg = wr->sg_list;
        if (op == OP_WRITE && wr->num_sge == 1 && h->lmr != NULL &&
            sg->lkey == h->lkey && in_mr(h->lmr, sg->addr, sg->length))
            ;                   /* the same local MR as the last WR */
        else if (check_sges(q->pd, sg, wr->num_sge, op != OP_WRITE, 1))
            return 0;
        else if (op == OP_WRITE && wr->num_sge == 1 && sg->length) {
            h->lmr = mr_lookup(sg->lkey);
            h->lkey = sg->lkey;
        }
    }
    t = &p->sh->qp[dqpn & (MAX_QP - 1)];
    m = &p->sh->mr[idx];
    /* count ourselves in, then check: the target withdraws first, then
       waits for the count (seq_cst on both sides) */
    if (h->qp != &t->inflight) {
        if (h->qp != NULL)
            __atomic_fetch_sub(h->qp, 1, __ATOMIC_SEQ_CST);
        h->qp = &t->inflight;
        __atomic_fetch_add(h->qp, 1, __ATOMIC_SEQ_CST);
    }
    if (h->mr != &m->inflight) {
        if (h->mr != NULL)
            __atomic_fetch_sub(h->mr, 1, __ATOMIC_SEQ_CST);
        h->mr = &m->inflight;
        __atomic_fetch_add(h->mr, 1, __ATOMIC_SEQ_CST);
    }
    ok = __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn &&
         t->dest_qpn == q->qpn && t->peer_guid == N.guid &&
         (__atomic_load_n(&t->access, __ATOMIC_RELAXED) & need) &&
         __atomic_load_n(&m->key, __ATOMIC_SEQ_CST) == rkey &&
         m->pd == t->pd && (m->access & need) && m->addr == c->addr &&
         raddr >= m->addr && len <= m->len &&
         raddr - m->addr <= m->len - len && !(atomic && (raddr & 7)) &&
         __atomic_load_n(&t->qpn, __ATOMIC_SEQ_CST) == dqpn;
    if (ok) {
        uint8_t *dst = c->base + (raddr - m->addr);
        switch (op) {
        case OP_WRITE: {
            size_t off = 0;
            for (i = 0; i < wr->num_sge; i++) {
                if (wr->sg_list[i].length)
                    memcpy(dst + off,
                           (const void *)(uintptr_t)wr->sg_list[i].addr,
                           wr->sg_list[i].length);
                off += wr->sg_list[i].length;
            }
            N.sh->st_fast_write++;
            break;
        }
        case OP_READ:
            scatter(wr->sg_list, wr->num_sge, dst, len);
            *byte_len = (uint32_t)len;
            N.sh->st_fast_read++;
            break;
        default: {
            uint64_t *pp = (uint64_t *)(void *)dst, old;
            if (op == OP_FAA)
                old = __atomic_fetch_add(pp, wr->wr.atomic.compare_add,
                                         __ATOMIC_SEQ_CST);
            else {
                old = wr->wr.atomic.compare_add;
                __atomic_compare_exchange_n(pp, &old, wr->wr.atomic.swap, 0,
                                            __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST);
            }
            scatter(wr->sg_list, wr->num_sge, (const uint8_t *)&old, 8);
            *byte_len = 8;
            N.sh->st_fast_atomic++;
            break;
        }
        }
        /* the target withdrew the MR meanwhile (deregistered it; if we
           were stopped long enough, it also took its memory away from
           the mapping we wrote: mem_revoke): the op did not reliably
           happen; it fails as on a NIC whose target found no MR
           (REM_ACCESS_ERR: -1) */
        if (__atomic_load_n(&m->key, __ATOMIC_SEQ_CST) != rkey)
            ok = -1;
    }
    return ok;
}

/* Fill slot s from wr (N.lock held); return 0, an errno for a post-time
   rejection, or -1 if the WR was executed one-sided (no slot used, its
   completion already in the CQ if signaled). */
static int
fill_slot(struct uqp *q, struct slot *s, struct pyrdma_send_wr *wr,
          struct fhold *hold)
{
    struct wire *h;
    size_t total = 0;
    int i, op, status = 0, fast = 0;
    int inline_data = (wr->send_flags & IBV_SEND_INLINE) != 0;
    struct peer *peer = q->peer;

    for (i = 0; i < wr->num_sge; i++)
        total += wr->sg_list[i].length;
    switch (wr->opcode) {
    case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: op = OP_SEND; break;
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM:
        op = OP_WRITE; break;
    case IBV_WR_RDMA_READ: op = OP_READ; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: op = OP_CAS; break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: op = OP_FAA; break;
    default: return EINVAL;     /* LOCAL_INV, BIND_MW, SEND_WITH_INV... */
    }
    if (inline_data && op <= OP_WRITE && total > q->cap.max_inline_data)
        return EINVAL;
    if (total > MAX_MSG)
        return EINVAL;
    if (op >= OP_CAS && (wr->wr.atomic.remote_addr & 7))
        return EINVAL;
    if (q->type == IBV_QPT_UD && wr->wr.ud.ah == NULL)
        return EINVAL;
    if (op >= OP_CAS && total < 8)
        return EINVAL;
    /* one-sided: done here, no slot used, nothing on the wire (no PSN) */
    if (q->type == IBV_QPT_RC && peer != NULL && peer->sh != NULL &&
        !peer->failed && N.sh != NULL && !q->err_pending &&
        q->attr.qp_state != IBV_QPS_ERR &&
        (op >= OP_READ || wr->opcode == IBV_WR_RDMA_WRITE)) {
        uint32_t byte_len = 0;
        fast = fast_op(q, &byte_len, wr, op, total, inline_data, hold);
        if (fast > 0) {
            if (q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED)) {
                struct pyrdma_wc wc;
                memset(&wc, 0, sizeof(wc));
                wc.wr_id = wr->wr_id;
                wc.status = IBV_WC_SUCCESS;
                wc.opcode = wc_opcode_of[wr->opcode];
                wc.byte_len = byte_len;
                wc.qp_num = q->qpn;
                cq_push(q->scq, &wc, 0);
            }
            return -1;
        }
    }
    if (s->inflight)
        return ENOMEM;          /* UCP still reads this slot */
    s->qp = q;
    s->idx = q->sq_tail;
    s->wr_id = wr->wr_id;
    s->opcode = wr->opcode;
    s->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    s->done = 0;
    s->status = IBV_WC_SUCCESS;
    s->need_send = 0;
    s->imm_done = 0;
    s->rnr_wait = 0;
    s->byte_len = 0;
    s->deadline = 0;
    s->num_sge = 0;
    s->psn = q->next_psn;
    q->next_psn = (q->next_psn + 1) & 0xFFFFFF;
    if (q->attr.qp_state == IBV_QPS_ERR || q->err_pending) {
        s->done = 1;
        s->status = IBV_WC_WR_FLUSH_ERR;
        return 0;
    }
    if (fast < 0) {
        fill_fail(q, s, IBV_WC_REM_ACCESS_ERR);
        return 0;
    }
    /* the transport table (seed 004): rxe fails these on the wire */
    if ((q->type == IBV_QPT_UC && op > OP_WRITE) ||
        (q->type == IBV_QPT_UD && op != OP_SEND)) {
        fill_fail(q, s, IBV_WC_LOC_QP_OP_ERR);
        return 0;
    }
    if (q->type == IBV_QPT_UD)
        peer = ((struct uah *)wr->wr.ud.ah)->peer;
    if (op <= OP_WRITE)
        status = gather(q, s, wr, total, inline_data);
    else {
        /* READ / atomics: the local s/g list is written on completion */
        status = check_sges(q->pd, wr->sg_list, wr->num_sge, 1,
                            IBV_WC_LOC_PROT_ERR);
        memcpy(s->sge, wr->sg_list, sizeof(*s->sge) * (size_t)wr->num_sge);
        s->num_sge = wr->num_sge;
        s->len = sizeof(struct wire);
    }
    if (status) {
        fill_fail(q, s, status);
        return 0;
    }
    h = (struct wire *)s->buf;
    memset(h, 0, sizeof(*h));
    h->kind = AM_REQ;
    h->op = (uint8_t)op;
    h->flags = (uint8_t)(((wr->opcode == IBV_WR_SEND_WITH_IMM ||
                           wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ? F_IMM
                                                                     : 0) |
                         ((wr->send_flags & IBV_SEND_SOLICITED) ? F_SOLICITED
                                                                : 0));
    h->rnr_retry = (uint8_t)q->attr.rnr_retry;
    h->src_qpn = q->qpn;
    h->psn = s->psn;
    h->slot = s->idx;
    h->epoch = q->epoch;
    h->src_guid = N.guid;
    h->src_lid = N.lid;
    h->sid = peer != NULL ? peer->tx_sid : 0;
    h->qp_type = (uint16_t)q->type;
    h->imm = wr->imm_data;
    h->len = (uint32_t)(op <= OP_READ ? total : 8);
    if (q->type == IBV_QPT_UD) {
        h->dst_qpn = wr->wr.ud.remote_qpn;
        h->qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? q->attr.qkey
                                                         : wr->wr.ud.remote_qkey;
        if (total > (size_t)mtu_bytes(PORT_MTU)) {
            /* a UD message is at most one MTU */
            fill_fail(q, s, IBV_WC_LOC_LEN_ERR);
            return 0;
        }
    }
    else {
        h->dst_qpn = q->attr.dest_qp_num;
        if (op == OP_WRITE || op == OP_READ) {
            h->raddr = wr->wr.rdma.remote_addr;
            h->rkey = wr->wr.rdma.rkey;
        }
        else if (op >= OP_CAS) {
            h->raddr = wr->wr.atomic.remote_addr;
            h->rkey = wr->wr.atomic.rkey;
            h->cmp = wr->wr.atomic.compare_add;
            h->swap = wr->wr.atomic.swap;
        }
    }
    if (peer == NULL || peer->failed) {
        fill_fail(q, s, IBV_WC_RETRY_EXC_ERR);
        return 0;
    }
    s->ep = peer->ep;
    if (q->type == IBV_QPT_RC && q->attr.timeout) {
        double us = 4.096 * (double)(1ull << q->attr.timeout) *
                    (q->attr.retry_cnt + 1);
        /* no clock read per WR: the timer starts when timers() (every
           ~1 ms while something waits) first sees the WR outstanding */
        s->tmo = (uint64_t)(us * 1000.0);
        s->deadline = DEADLINE_UNSET;
        N.timers = 1;
    }
    s->need_send = 1;
    s->inflight = 1;
    q->n_inflight++;
    return 0;
}

/* A WR completes when its ACK arrives, which can be before UCP reports
   the send of its slot done: a slot about to be reused may still be read
   by UCP.  Make progress (outside N.lock, post_lock held) until the slots
   these WRs may take are free, for at most a second (then post_send says
   ENOMEM, as for a full queue). */
static void
slots_settle(struct uqp *q, const struct pyrdma_send_wr *wr)
{
    uint32_t i = q->sq_tail, n = 0;
    uint64_t give_up = 0;

    /* none in flight: nothing to wait for (only post_send, which holds
       post_lock, sets inflight; a stale non-zero only costs the scan) */
    if (__atomic_load_n(&q->n_inflight, __ATOMIC_RELAXED) == 0)
        return;
    for (; wr != NULL && n <= q->sq_mask; wr = wr->next, i++, n++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        while (__atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE)) {
            uint64_t t = now_ns();
            if (give_up == 0)
                give_up = t + 1000000000ull;
            else if (t > give_up)
                return;
            U.worker_progress(N.w);
        }
    }
}

/* The ACK q owes its peer (queued, not sent yet) rides in the first
   request of [first, last) instead of a message of its own (N.lock held). */
static void
piggyback_ack(struct uqp *q, uint32_t first, uint32_t last)
{
    struct obox *o = q->ack_item;
    const struct wire *a = o != NULL ? (const struct wire *)o->buf : NULL;
    ucp_ep_h ep = o != NULL ? o->ep : q->dack_ep;
    uint32_t i;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        struct wire *h;
        if (s->need_send != 1 || s->ep != ep)
            continue;
        h = (struct wire *)s->buf;
        h->flags |= F_ACK;
        if (o != NULL) {        /* queued, not sent yet: now it need not */
            h->ack_psn = a->psn;
            h->ack_epoch = a->epoch;
            o->cancel = 1;
            N.ob_plain--;
            q->ack_item = NULL;
        }
        else {                  /* deferred (held in q) */
            h->ack_psn = q->dack_psn;
            h->ack_epoch = q->dack_epoch;
            q->dack = 0;
            if (N.dack_head == q) {     /* else the next full drain */
                N.dack_head = q->dack_next;
                q->dack_next = NULL;
                q->dack_listed = 0;
            }
        }
        if (N.sh != NULL)
            N.sh->st_ack_piggy++;
        return;
    }
}

static int
post_send(void *vq, struct pyrdma_send_wr *wr, struct pyrdma_send_wr **bad)
{
    struct uqp *q = vq;
    uint32_t first, last, i;
    int rc = 0, signal = 0, n_ucp = 0;
    struct peer *p, *bell = NULL;
    struct fhold hold = {NULL, NULL};

    /* one-sided candidates: map the target MRs not mapped yet (UCP is
       called, so before N.lock; a racy look at the cache is enough) */
    p = q->type == IBV_QPT_RC ? __atomic_load_n(&q->peer, __ATOMIC_ACQUIRE)
                              : NULL;
    if (p != NULL && p->sh != NULL) {
        struct pyrdma_send_wr *w;
        for (w = wr; w; w = w->next) {
            uint32_t k;
            if (w->opcode == IBV_WR_RDMA_WRITE ||
                w->opcode == IBV_WR_RDMA_READ)
                k = w->wr.rdma.rkey;
            else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                     w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
                k = w->wr.atomic.rkey;
            else
                continue;
            if ((k >> 8) != 0 && (k >> 8) < SH_MR &&
                __atomic_load_n(&p->rk[k >> 8].key, __ATOMIC_RELAXED) != k)
                rk_fetch(p, k);
        }
        if (p->sh != N.sh &&
            __atomic_load_n(&p->ring_state, __ATOMIC_RELAXED) == 0)
            ring_make(p);
    }
    pthread_mutex_lock(&q->post_lock);
    slots_settle(q, wr);
    LOCK();
    if (q->attr.qp_state == IBV_QPS_RESET || q->attr.qp_state == IBV_QPS_INIT
        || q->attr.qp_state == IBV_QPS_RTR) {
        UNLOCK();
        pthread_mutex_unlock(&q->post_lock);
        *bad = wr;
        return EINVAL;
    }
    first = q->sq_tail;
    for (; wr; wr = wr->next) {
        struct slot *s;
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge) {
            rc = EINVAL;
            break;
        }
        if (q->sq_tail - q->sq_head >= q->cap.max_send_wr) {
            rc = ENOMEM;
            break;
        }
        s = &q->sq[q->sq_tail & q->sq_mask];
        rc = fill_slot(q, s, wr, &hold);
        if (rc == -1) {
            rc = 0;             /* done one-sided, without a slot */
            continue;
        }
        if (rc)
            break;
        q->sq_tail++;
    }
    fhold_drop(&hold);
    if (rc)
        *bad = wr;
    last = q->sq_tail;
    if (q->rx_seen && first != last) {
        q->rx_seen = 0;
        if (q->alt < 4)
            q->alt++;
    }
    if ((q->ack_item != NULL || q->dack) && q->type == IBV_QPT_RC)
        piggyback_ack(q, first, last);
    /* RC requests to a same-host node: through its ring while they fit
       (then the rest of this call's through UCP, in order) */
    p = q->type == IBV_QPT_RC ? q->peer : NULL;
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        if (s->need_send != 1)
            continue;
        if (n_ucp == 0 && p != NULL && p->ring_state == 1 &&
            s->ep == p->ep &&
            !(q->naked && (((struct wire *)s->buf)->flags & F_ACK)) &&
            ring_put(p, s) == 0) {
            s->need_send = 0;
            s->inflight = 0;
            q->n_inflight--;
            bell = p;
            if (N.sh != NULL)
                N.sh->st_ring_req++;
            continue;
        }
        n_ucp++;
    }
    if (bell != NULL && !ring_bell_needed(bell))
        bell = NULL;
    if (n_ucp == 0) {
        sq_advance(q);
        UNLOCK();
        pthread_mutex_unlock(&q->post_lock);
        if (bell != NULL)
            ring_bell(bell);
        return rc;
    }
    UNLOCK();
    if (bell != NULL)
        ring_bell(bell);
    /* transmit, outside N.lock, in order */
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        ucp_request_param_t p;
        ucs_status_ptr_t r;
        if (s->need_send != 1)
            continue;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = req_sent_cb;
        p.user_data = s;
        r = U.am_send_nbx(s->ep, AM_REQ, s->buf, sizeof(struct wire),
                          s->buf + sizeof(struct wire),
                          s->len - sizeof(struct wire), &p);
        if (UCS_PTR_IS_PTR(r))
            signal = 1;         /* req_sent_cb will finish it */
        else
            s->imm_done = UCS_PTR_IS_ERR(r) ? -1 : 1;
    }
    LOCK();
    for (i = first; i != last; i++) {
        struct slot *s = &q->sq[i & q->sq_mask];
        int imm = s->imm_done;
        if (s->need_send != 1)
            continue;
        s->need_send = 0;
        if ((imm == 1 || imm == -1) && s->inflight) {
            s->inflight = 0;
            q->n_inflight--;
        }
        if ((uint32_t)(i - q->sq_head) >= (uint32_t)(q->sq_tail - q->sq_head)
            || s->done)
            continue;           /* already completed (flushed) */
        if (imm < 0)
            sq_fail(q, i, IBV_WC_RETRY_EXC_ERR);
        else if (imm == 1 && q->type != IBV_QPT_RC) {
            s->done = 1;        /* UC/UD complete once handed to UCP */
            s->status = IBV_WC_SUCCESS;
        }
        else if (!s->inflight && q->type != IBV_QPT_RC) {
            s->done = 1;        /* req_sent_cb ran before we got here */
            s->status = IBV_WC_SUCCESS;
        }
    }
    sq_advance(q);
    UNLOCK();
    pthread_mutex_unlock(&q->post_lock);
    if (signal)
        wake_progress();
    return rc;
}

static int
post_recv(void *vq, struct pyrdma_recv_wr *wr, struct pyrdma_recv_wr **bad)
{
    struct uqp *q = vq;
    int rc, any;
    LOCK();
    if (q->srq != NULL || q->attr.qp_state == IBV_QPS_RESET) {
        UNLOCK();
        *bad = wr;
        return EINVAL;
    }
    rc = rq_post(&q->rq, wr, bad);
    if (q->attr.qp_state == IBV_QPS_ERR)
        rq_flush(q);
    else
        rq_refilled(NULL, q);
    any = ob_urgent();
    UNLOCK();
    if (any)
        drain(0);       /* a reply may follow: deferred ACKs stay */
    return rc;
}

static int
attach_mcast(void *qp, const uint8_t gid[16], uint16_t lid,
             struct pyrdma_status *st)
{
    (void)qp;
    (void)gid;
    (void)lid;
    return pyrdma_fail(st, EOPNOTSUPP, "ibv_attach_mcast", "multicast is "
                       "not supported by the ucx fabric");
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
    if (ah_resolve(a, &ah->peer, st, "ibv_create_ah") < 0) {
        free(ah);
        return -1;
    }
    ah->pd = pd;
    ah->attr = *a;
    *out = ah;
    return 0;
}

static int
destroy_ah(void *ah, struct pyrdma_status *st)
{
    (void)st;
    free(ah);
    return 0;
}

const struct pyrdma_provider pyrdma_provider_ucx = {
    .name = "ucx",
    .library = "libucp.so.0",
    .package = "libucx0",
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
    .alloc_mr_mem = alloc_mr_mem,
    .free_mr_mem = free_mr_mem,
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
    .detach_mcast = attach_mcast,
    .create_ah = create_ah,
    .destroy_ah = destroy_ah,
};
