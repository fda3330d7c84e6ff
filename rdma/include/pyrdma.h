/* pyrdma.h - the C API of the rdma package, for C and Cython extensions.
 *
 * The structs below have the ABI layout of libibverbs' ibv_sge,
 * ibv_send_wr, ibv_recv_wr and ibv_wc (the build checks every offset), so
 * code written for verbs can fill them directly.  The functions reach the
 * same provider calls as QP.post_send / QP.post_recv / CQ.poll, with no
 * Python object per work request or completion.
 *
 *     #include "pyrdma.h"          (include dir: rdma.get_include())
 *     const pyrdma_capi *api = pyrdma_import_capi();   (NULL + exception)
 *     api->post_send(qp_object, &wr, &bad);
 *
 * Every call checks its object (type and open) and never raises: it returns
 * an errno value (EINVAL for a wrong or closed object, or one inherited
 * across fork()).  Call with the GIL
 * held.  Handles are borrowed: keep the Python objects alive.
 */
#ifndef PYRDMA_PUBLIC_H
#define PYRDMA_PUBLIC_H

#include <stdint.h>

/* ---- Hot-path structs: the ABI layout of the libibverbs structs, so the
 * verbs provider passes them through without copying (provider_verbs.c
 * checks every offset against <infiniband/verbs.h> at compile time). ---- */

/* A scatter/gather element (struct ibv_sge). */
struct pyrdma_sge {
    uint64_t addr;     /* start address */
    uint32_t length;   /* bytes */
    uint32_t lkey;     /* local key of the MR that covers it */
};

/* Where a memory window is bound (struct ibv_mw_bind_info). */
struct pyrdma_mw_bind_info {
    void *mr;                    /* provider MR handle */
    uint64_t addr;               /* start of the window */
    uint64_t length;             /* length of the window */
    unsigned int mw_access_flags; /* IBV_ACCESS_* */
};

/* A send work request (struct ibv_send_wr). */
struct pyrdma_send_wr {
    uint64_t wr_id;                    /* returned in the completion */
    struct pyrdma_send_wr *next;       /* next WR of the list, or NULL */
    struct pyrdma_sge *sg_list;        /* scatter/gather array */
    int num_sge;                       /* entries in sg_list */
    int opcode;                        /* IBV_WR_* */
    unsigned int send_flags;           /* IBV_SEND_* */
    union {
        uint32_t imm_data;             /* network byte order */
        uint32_t invalidate_rkey;
    };
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            void *ah;                  /* provider AH handle */
            uint32_t remote_qpn;
            uint32_t remote_qkey;
        } ud;
    } wr;
    union {
        struct {
            uint32_t remote_srqn;
        } xrc;
    } qp_type;
    union {
        struct {
            void *mw;                  /* provider MW handle */
            uint32_t rkey;
            struct pyrdma_mw_bind_info bind_info;
        } bind_mw;
        struct {
            void *hdr;
            uint16_t hdr_sz;
            uint16_t mss;
        } tso;
    };
};

/* A receive work request (struct ibv_recv_wr). */
struct pyrdma_recv_wr {
    uint64_t wr_id;                    /* returned in the completion */
    struct pyrdma_recv_wr *next;       /* next WR of the list, or NULL */
    struct pyrdma_sge *sg_list;        /* scatter/gather array */
    int num_sge;                       /* entries in sg_list */
};

/* A work completion (struct ibv_wc). */
struct pyrdma_wc {
    uint64_t wr_id;          /* of the completed WR */
    int32_t status;          /* IBV_WC_* status */
    int32_t opcode;          /* IBV_WC_* opcode */
    uint32_t vendor_err;     /* vendor syndrome */
    uint32_t byte_len;       /* bytes received */
    uint32_t imm_data;       /* network order; or the invalidated rkey */
    uint32_t qp_num;         /* local QP number */
    uint32_t src_qp;         /* remote QP number (UD) */
    uint32_t wc_flags;       /* IBV_WC_GRH, IBV_WC_WITH_IMM, ... */
    uint16_t pkey_index;     /* P_Key index (GSI QPs) */
    uint16_t slid;           /* source LID (UD) */
    uint8_t sl;              /* service level (UD) */
    uint8_t dlid_path_bits;  /* DLID path bits (UD) */
};


/* The table behind the capsule rdma._ibverbs._C_API. */
#define PYRDMA_CAPI_VERSION 1
typedef struct pyrdma_capi {
    int version;    /* PYRDMA_CAPI_VERSION */
    /* QP.post_send (or VirtualQP.post_send): 0 or an errno, *bad the
       rejected WR. */
    int (*post_send)(void *qp, struct pyrdma_send_wr *wr,
                     struct pyrdma_send_wr **bad);
    /* QP.post_recv / SRQ.post_recv / VirtualQP.post_recv: 0 or an errno,
       *bad the rejected WR. */
    int (*post_recv)(void *qp_or_srq, struct pyrdma_recv_wr *wr,
                     struct pyrdma_recv_wr **bad);
    /* CQ.poll (or VirtualCQ.poll: virtual completions): completions
       written (0..n) or -errno. */
    int (*poll_cq)(void *cq, int n, struct pyrdma_wc *wc);
    /* MR: its address, length and keys; 0 or an errno. */
    int (*mr_info)(void *mr, uint64_t *addr, uint64_t *length,
                   uint32_t *lkey, uint32_t *rkey);
    /* AH: the handle to put in send_wr.wr.ud.ah (NULL if not an open AH). */
    void *(*ah_handle)(void *ah);
} pyrdma_capi;

#ifdef Py_PYTHON_H
/* Import the API (needs Python.h first); NULL with an exception set. */
static inline const pyrdma_capi *
pyrdma_import_capi(void)
{
    const pyrdma_capi *api = (const pyrdma_capi *)PyCapsule_Import(
        "rdma._ibverbs._C_API", 0);
    if (api != NULL && api->version != PYRDMA_CAPI_VERSION) {
        PyErr_SetString(PyExc_ImportError,
                        "rdma C API version mismatch: rebuild against "
                        "this rdma");
        return NULL;
    }
    return api;
}
#endif

#endif /* PYRDMA_PUBLIC_H */
