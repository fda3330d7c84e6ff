/* rsocket.h - librdmacm's rsocket API on ucx0 (rsocket.c, rsocket_io.c,
   rsocket_poll.c): its socket object and the stream protocol between two
   of the front end's rsockets.

   An rsocket on a fabric address is a CM ID of the front end's (the
   fabric's connection manager, cm_front.c) with an RC QP on ucx0.  Its
   descriptor is an epoll fd of its own (watching the ID's event channel
   and the CQ's completion channel), so it never collides with a real
   descriptor and poll() on it wakes for either.  An rsocket whose address
   belongs to the kernel (fv_cm_real_side, as for CM IDs) is handed to the
   real librdmacm's rsocket and every call forwards to it.

   The protocol (both ends are ours; librdmacm's rsockets are not spoken):
   at connect and accept each side gives the other, in the CM private data
   (struct rs_hello), its receive ring (address, rkey, size) and how many
   receives it posted.  Data is an RDMA WRITE WITH IMMEDIATE into the
   peer's ring at the sender's running offset, the immediate its length;
   control messages (struct rs_ctl: credits, FIN, riomap) are inline
   SENDs.  Every control message carries the sender's credits: bytes of
   its ring the program has read and receives it has posted, so a sender
   never overruns the ring nor the receive queue (two receives are kept
   for control messages). */
#ifndef PYRDMA_FABRIC_VERBS_RSOCKET_H
#define PYRDMA_FABRIC_VERBS_RSOCKET_H

#include "cm_front.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <infiniband/ib.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <sys/socket.h>

#define RS_HELLO_MAGIC 0x72736b31u   /* "rsk1": the protocol's version */

/* The CM private data of connect and accept. */
struct rs_hello {
    uint32_t magic;
    uint32_t rkey;       /* of the receive ring */
    uint64_t addr;
    uint32_t size;       /* bytes */
    uint32_t rq;         /* receives posted */
};

enum { RS_CTL_CREDIT = 1, RS_CTL_FIN, RS_CTL_IOMAP, RS_CTL_IOUNMAP };

/* A control message (an inline SEND). */
struct rs_ctl {
    uint32_t op;
    uint32_t rkey;       /* IOMAP */
    uint64_t addr;       /* IOMAP: the mapped buffer */
    uint64_t off;        /* IOMAP, IOUNMAP: its offset */
    uint64_t len;        /* IOMAP */
    uint64_t consumed;   /* credits: bytes of the ring read so far */
    uint64_t posted;     /* credits: receives posted so far */
};

#define RS_SLOT 64       /* bytes of one receive (a control message) */

enum rs_state {
    RS_NEW, RS_BOUND, RS_LISTEN, RS_ADDR, RS_ROUTE, RS_CONNECTING,
    RS_ACCEPTING, RS_CONNECTED, RS_FAILED
};

/* A region of riomap: ours (mr set) or the peer's. */
struct rs_map {
    uint64_t addr, off, len;
    uint32_t rkey;
    struct ibv_mr *mr;
};

struct rsk {
    int fd;                      /* the program's descriptor (epoll) */
    int real_fd;                 /* >= 0: the real librdmacm's rsocket */
    int domain;
    enum rs_state state;
    int err;                     /* SO_ERROR pending */
    int nonblock;
    int rd_shut, wr_shut;        /* rshutdown */
    int fin_rcvd, fin_sent, fin_pending;
    int hup;                     /* the peer disconnected */
    int broken;                  /* a send failed: the QP is in error */
    int reuse, keepalive, nodelay, keepidle;
    struct linger linger;
    uint32_t sbuf_size, rbuf_size, sq_size, rq_size, inline_size;
    uint32_t iomap_size;
    pthread_mutex_t lock;

    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct rdma_cm_event *req;   /* a listener's pending request */
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    char *rbuf, *sbuf, *slots;
    struct ibv_mr *rmr, *smr, *slot_mr;

    /* the peer's ring and credits */
    uint64_t peer_addr;
    uint32_t peer_rkey, peer_size;
    uint64_t tx_bytes, peer_consumed;
    uint64_t sent_msgs, peer_posted;
    /* our send buffer: bytes posted and bytes whose WRs completed */
    uint64_t s_head, s_tail;
    uint32_t sq_out;
    /* our ring: bytes arrived, bytes read, and what the peer was told */
    uint64_t rx_tail, rx_head, told_consumed;
    uint64_t posted, told_posted;

    struct rs_map *lmaps, *rmaps;
    int n_lmaps, n_rmaps;
    uint64_t next_map_off;
};

/* rsocket.c */
struct rsk *rs_get(int fd);
void *rs_real(const char *name);
int rs_cm_step(struct rsk *rs);
int rs_pending_request(struct rsk *l);

/* rsocket_io.c */
int rs_setup(struct rsk *rs);
void rs_teardown(struct rsk *rs);
int rs_progress(struct rsk *rs);
int rs_wait(struct rsk *rs, int timeout_ms);
int rs_arm(struct rsk *rs);
int rs_send_fin(struct rsk *rs);
int rs_can_send(const struct rsk *rs);
ssize_t rs_send(struct rsk *rs, const void *buf, size_t len, int flags);
ssize_t rs_recv(struct rsk *rs, void *buf, size_t len, int flags);
off_t rs_iomap(struct rsk *rs, void *buf, size_t len, int prot,
               off_t offset);
int rs_iounmap(struct rsk *rs, void *buf, size_t len);
size_t rs_iowrite(struct rsk *rs, const void *buf, size_t count,
                  off_t offset, int flags);

/* rsocket_poll.c */
short rs_revents(struct rsk *rs, short events);

/* Forward to the real librdmacm's function name when the descriptor is
   not ours (or ours was handed to the real library). */
#define RS_REAL(ret, name, params) \
    static ret (*real_fn) params; \
    if (real_fn == NULL) \
        *(void **)&real_fn = rs_real(#name)
#define RS_LOOKUP(rs, fd, call, fail) \
    do { \
        (rs) = rs_get(fd); \
        if ((rs) == NULL || (rs)->real_fd >= 0) { \
            int fd_ = (rs) ? (rs)->real_fd : (fd); \
            (void)fd_; \
            if (real_fn == NULL) { \
                errno = (rs) ? ENOSYS : EBADF; \
                return fail; \
            } \
            return call; \
        } \
    } while (0)

#endif /* PYRDMA_FABRIC_VERBS_RSOCKET_H */
