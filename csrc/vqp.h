/* vqp.h - the structs of VirtualQP and VirtualCQ (vqp.c, vqp_data.c). */
#ifndef PYRDMA_VQP_H
#define PYRDMA_VQP_H

#include "rdma.h"

/* The immediate data of a dqplb fragment (host order; sent big endian). */
#define VQP_SEQ_MASK 0x3fffffffu   /* 30-bit sequence number */
#define VQP_IMM_LAST (1u << 30)    /* last fragment of a message */
#define VQP_IMM_NOTIFY (1u << 31)  /* a receive WR is consumed (the user
                                      immediate follows on that QP) */
/* wr_id of an internal WR: bit 63 marks receives; sends carry the message
   serial (bits 32..62) and the fragment index, VQP_TRAILER for the extra
   zero-byte WRITE_WITH_IMMs that carry the immediate and the length. */
#define VQP_RECV_TAG (1ull << 63)
#define VQP_TRAILER 0xffffffffu

enum { VQP_DQPLB, VQP_SPRAY };

/* The protocol between two virtual QPs (info()'s "proto", checked by
   connect()).  2: spray sends a one-fragment WRITE_WITH_IMM message as
   one WRITE_WITH_IMM with data (no length and immediate trailers). */
#define VQP_PROTO 2
enum { VQP_ROUND_ROBIN, VQP_LEAST_OUTSTANDING };

/* One virtual send WR, from posting to its virtual completion. */
struct vqp_msg {
    uint64_t wr_id;          /* the user's */
    uint64_t remote_addr;    /* where fragment 0 goes */
    uint32_t length;         /* bytes in all */
    uint32_t rkey;
    uint32_t imm;            /* the user's immediate, network order */
    int opcode;              /* IBV_WR_RDMA_WRITE or _WITH_IMM */
    uint32_t nfrags;         /* fragments in all (at least one) */
    uint32_t next_frag;      /* the next fragment to post */
    uint32_t posted;         /* data QP WRs posted for it */
    uint32_t done;           /* of them completed */
    uint32_t cur_sge;        /* where the next fragment starts: s/g entry */
    uint32_t cur_off;        /* and offset in it */
    int nsge;                /* entries in sge */
    int closed;              /* nothing more will be posted for it */
    int status;              /* IBV_WC_*: first failure, else success */
    uint32_t vendor_err;     /* of the first failure */
    uint32_t err_qpn;        /* data QP of the first failure */
    struct pyrdma_sge *sge;  /* its s/g list (max_sge slots) */
};

/* One data QP of a virtual QP. */
struct vqp_dqp {
    void *h;                 /* provider QP handle */
    uint32_t qpn;
    uint32_t out;            /* send WRs in flight */
    uint32_t *seq;           /* dqplb: sequence numbers in flight, FIFO */
    uint32_t seq_head;       /* index of the oldest in seq */
    uint32_t seq_n;          /* how many */
    uint32_t rx_posted;      /* internal receive WRs posted */
    uint32_t rx_owed;        /* of them consumed, to repost after the
                                batch of completions */
    int rx_trailer;          /* the next receive is a trailer */
    uint32_t rx_seq;         /* dqplb: the fragment that trailer is for */
    uint32_t rx_len;         /* spray: the length trailer received */
};

/* The receiver's state of one sequence number (dqplb), in a window. */
struct vqp_rxent {
    uint32_t len;            /* bytes the fragment wrote */
    uint32_t imm;            /* the user's immediate (network order) */
    uint8_t flags;           /* VQP_RX_* */
};
enum { VQP_RX_HERE = 1, VQP_RX_LAST = 2, VQP_RX_NOTIFY = 4, VQP_RX_IMM = 8 };

typedef struct pyrdma_VCQ pyrdma_VCQ;

/* A virtual QP. */
typedef struct {
    pyrdma_obj o;            /* parents: [0] PD, [1] VirtualCQ; h: q */
    pyrdma_VCQ *vcq;         /* borrowed (parents[1] holds it) */
    int mode;                /* VQP_DQPLB / VQP_SPRAY */
    int choose;              /* VQP_ROUND_ROBIN / _LEAST_OUTSTANDING */
    uint32_t n;              /* data QPs */
    uint32_t fragment;       /* bytes per fragment */
    uint32_t max_msgs;       /* fragments in flight per data QP */
    uint32_t depth;          /* data QP send/recv queue depth */
    uint32_t max_sge;        /* s/g entries per virtual WR */
    uint32_t cap;            /* virtual WRs in flight (power of two) */
    struct vqp_dqp *q;       /* the data QPs */
    struct vqp_msg *msgs;    /* ring of cap virtual send WRs, by serial */
    struct pyrdma_sge *sges; /* cap * max_sge */
    struct pyrdma_sge *tmp;  /* max_sge: a fragment's s/g list */
    uint32_t serial_next;    /* serial of the next posted WR */
    uint32_t head;           /* serial of the oldest not reported */
    uint32_t post_at;        /* serial of the first not fully posted */
    uint32_t notify_at;      /* spray: first whose notify is not posted */
    uint32_t rr;             /* next data QP for round robin */
    uint32_t seq_next;       /* dqplb: next sequence number to send */
    uint32_t window;         /* dqplb: receiver window (power of two) */
    /* receiver */
    struct vqp_rxent *rx;    /* window entries, by sequence number */
    uint32_t rx_next;        /* the next sequence number in order */
    uint32_t rx_bytes;       /* bytes of the message being received */
    int rx_owed;             /* a data QP has receive WRs to repost */
    uint64_t *rwr;           /* ring (cap): the user's receive wr_ids */
    uint32_t rwr_head, rwr_n;
    uint32_t *note_len;      /* ring (cap): messages that arrived before */
    uint32_t *note_imm;      /* a receive WR was posted: length, imm */
    uint32_t note_head, note_n;
    int connected;
    int err;                 /* in the error state */
    char errmsg[256];        /* why */
    uint32_t cq_share;       /* CQ entries it reserved on the VirtualCQ */
} pyrdma_VQP;

/* Which data QP of which virtual QP a QP number is. */
struct vcq_reg {
    uint32_t qpn;
    uint32_t idx;
    pyrdma_VQP *vqp;
};

/* A virtual CQ: a CQ its virtual QPs' data QPs share, and the virtual
   completions made from theirs. */
struct pyrdma_VCQ {
    pyrdma_obj o;            /* parents[0]: Context; h: the CQ */
    int cqe;                 /* its size */
    uint32_t reserved;       /* entries the virtual QPs may use */
    struct vcq_reg *reg;     /* data QPs of the open virtual QPs */
    uint32_t nreg, capreg, last;
    struct pyrdma_wc *out;   /* ring of virtual completions to report */
    uint32_t out_head, out_n, out_cap;
    struct pyrdma_wc *dst;   /* during pyrdma_vcq_poll(): its array, */
    uint32_t dst_n, dst_room; /* filled so far, and room in it */
};

/* vqp_data.c: the data path. */
int pyrdma_vqp_send(pyrdma_VQP *q, struct pyrdma_send_wr *wr,
                    struct pyrdma_send_wr **bad, char *why, size_t len);
int pyrdma_vqp_recv(pyrdma_VQP *q, struct pyrdma_recv_wr *wr,
                    struct pyrdma_recv_wr **bad, char *why, size_t len);
int pyrdma_vcq_poll(pyrdma_VCQ *c, int n, struct pyrdma_wc *wc);
/* Post n internal receive WRs on data QP i; 0 or an errno. */
int pyrdma_vqp_post_rx(pyrdma_VQP *q, uint32_t i, uint32_t n);
/* Add/remove a virtual QP's data QPs to/from its VirtualCQ's table. */
int pyrdma_vcq_register(pyrdma_VCQ *c, pyrdma_VQP *q);
void pyrdma_vcq_unregister(pyrdma_VCQ *c, pyrdma_VQP *q);

#endif /* PYRDMA_VQP_H */
