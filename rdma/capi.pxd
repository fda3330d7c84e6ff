# rdma/capi.pxd - Cython declarations of the rdma C API (rdma/include/pyrdma.h).
#
#     from rdma.capi cimport *
#     cdef const pyrdma_capi *api = pyrdma_import_capi()
#     api.post_send(<void *>qp, &wr, &bad)
#
# Compile with include_dirs=[rdma.get_include()].  The structs have the
# libibverbs ABI layout; the calls reach the provider directly, with the GIL
# held and no Python object per work request.  post_send/post_recv/poll_cq
# also take a VirtualQP/VirtualCQ (one completion per virtual WR).

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "pyrdma.h":
    struct pyrdma_sge:
        uint64_t addr
        uint32_t length
        uint32_t lkey

    struct _rdma_wr:
        uint64_t remote_addr
        uint32_t rkey

    struct _atomic_wr:
        uint64_t remote_addr
        uint64_t compare_add
        uint64_t swap
        uint32_t rkey

    struct _ud_wr:
        void *ah
        uint32_t remote_qpn
        uint32_t remote_qkey

    union _wr_union:
        _rdma_wr rdma
        _atomic_wr atomic
        _ud_wr ud

    struct pyrdma_send_wr:
        uint64_t wr_id
        pyrdma_send_wr *next
        pyrdma_sge *sg_list
        int num_sge
        int opcode
        unsigned int send_flags
        uint32_t imm_data
        uint32_t invalidate_rkey
        _wr_union wr

    struct pyrdma_recv_wr:
        uint64_t wr_id
        pyrdma_recv_wr *next
        pyrdma_sge *sg_list
        int num_sge

    struct pyrdma_wc:
        uint64_t wr_id
        int status
        int opcode
        uint32_t vendor_err
        uint32_t byte_len
        uint32_t imm_data
        uint32_t qp_num
        uint32_t src_qp
        uint32_t wc_flags
        uint16_t pkey_index
        uint16_t slid
        uint8_t sl
        uint8_t dlid_path_bits

    ctypedef struct pyrdma_capi:
        int version
        int (*post_send)(void *qp, pyrdma_send_wr *wr, pyrdma_send_wr **bad)
        int (*post_recv)(void *qp_or_srq, pyrdma_recv_wr *wr,
                         pyrdma_recv_wr **bad)
        int (*poll_cq)(void *cq, int n, pyrdma_wc *wc)
        int (*mr_info)(void *mr, uint64_t *addr, uint64_t *length,
                       uint32_t *lkey, uint32_t *rkey)
        void *(*ah_handle)(void *ah)

    const pyrdma_capi *pyrdma_import_capi() except NULL
