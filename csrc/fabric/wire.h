/* wire.h - the fabric's wire format: the header of every message
   (struct wire) and its codes.  A message is a UCP active message
   (AM_REQ, AM_RESP, or a control kind AM_CTL_*) or an entry of a request
   ring (ring.c); wire.c receives and checks them. */
#ifndef PYRDMA_FABRIC_WIRE_H
#define PYRDMA_FABRIC_WIRE_H

#include <stdint.h>

/* active message ids (and struct wire.kind of requests and responses) */
#define AM_REQ 17
#define AM_RESP 18
/* control messages (struct wire with this kind, through UCP) */
#define AM_CTL_RINGOPEN 40      /* map my ring to you (ring.c) */
#define AM_CTL_BELL 41          /* look at your rings (ring.c) */
#define AM_CTL_HELLO 42         /* authenticate (the first message; auth.c) */
#define AM_CTL_CHALLENGE 43     /* the receiver's nonce for a HELLO */
#define AM_CTL_PROOF 44         /* the answer to it: the session begins */
#define AM_CTL_CM 45            /* a connection manager message: struct wire
                                   (op: CM_*) + struct cm_msg (cm_msg.c) */
/* HELLO key modes (struct wire.op of AM_CTL_HELLO and AM_CTL_PROOF) */
enum { HELLO_NONE, HELLO_NODE, HELLO_SHARED };
/* The version of the HELLO exchange (struct wire.qkey of AM_CTL_HELLO,
   CHALLENGE and PROOF); 2: challenge and proof (before: a HELLO alone);
   3: F_PLACED; requests may carry F_INV and F_MCAST */
#define WIRE_VERSION 3
#define GRH_LEN 40              /* the GRH in front of a UD receive */

/* REQ operations */
enum { OP_SEND, OP_WRITE, OP_READ, OP_CAS, OP_FAA };
/* REQ flags */
enum { F_IMM = 1, F_SOLICITED = 2, F_ACK = 4,
       F_INV = 8,       /* a SEND with invalidate: imm holds the rkey */
       F_MCAST = 16,    /* a UD SEND to a multicast group (mcast.c): the
                           group's GID in raddr and cmp, its LID in rkey */
       F_PLACED = 32 }; /* a WRITE with immediate data whose len bytes the
                           requester placed one-sided (req.c's fast_op)
                           before sending it: no payload follows, the
                           responder checks the rkey and completes the
                           receive */
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

/* Connection manager messages (AM_CTL_CM; struct wire.op), after the IB
   CM's: REQ, REP, RTU, REJ, DREQ, DREP, and SIDR_REQ/SIDR_REP for UD. */
enum { CM_REQ = 1, CM_REP, CM_RTU, CM_REJ, CM_DREQ, CM_DREP, CM_SIDR_REQ,
       CM_SIDR_REP, CM_MSG_LAST = CM_SIDR_REP };
#define CM_VERSION 1            /* struct cm_msg.version */
#define CM_PDATA_MAX 256

/* The payload of an AM_CTL_CM message (fixed size: a message of another
   length is malformed).  IP addresses and ports in network order. */
struct cm_msg {
    uint32_t version;      /* CM_VERSION */
    uint32_t local_id;     /* the sender's communication id (never 0) */
    uint32_t remote_id;    /* the receiver's (0 in REQ and SIDR_REQ) */
    uint32_t qpn;          /* the sender's QP (REQ, REP, SIDR_REP) */
    uint32_t psn;          /* its first PSN (REQ, REP) */
    uint32_t qkey;         /* SIDR_REP: the QP's Q_Key */
    uint32_t src_ip, dst_ip;     /* REQ, SIDR_REQ: the connection's */
    uint16_t src_port, dst_port; /* addresses (dst_port: the listener) */
    uint16_t ps;           /* port space (FAB_CM_PS_*) */
    uint8_t resp_res, init_depth, flow_control;
    uint8_t retry, rnr_retry, srq;
    uint8_t reason;        /* REJ: reject reason; SIDR_REP: status */
    uint8_t pdata_len;     /* bytes of pdata the sender gave */
    uint8_t pad[2];
    uint8_t pdata[CM_PDATA_MAX];
};
_Static_assert(sizeof(struct cm_msg) == 48 + CM_PDATA_MAX, "struct cm_msg");

#endif /* PYRDMA_FABRIC_WIRE_H */
