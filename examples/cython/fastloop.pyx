# cython: language_level=3
"""RDMA WRITE message rate from Cython through the rdma C API.

Build: python examples/cython/setup.py build_ext --inplace
Use:   fastloop.write_loop(qp, cq, mr, remote_addr, rkey, iters, depth)
"""
from rdma.capi cimport *


def write_loop(qp, cq, mr, unsigned long long remote_addr, unsigned int rkey,
               int iters, int depth=64, unsigned int size=8):
    """Post `iters` signaled RDMA WRITEs of `size` bytes from the start of
    `mr`, at most `depth` outstanding; return the number of completions."""
    cdef const pyrdma_capi *api = pyrdma_import_capi()
    cdef pyrdma_sge sge
    cdef pyrdma_send_wr wr
    cdef pyrdma_send_wr *bad
    cdef pyrdma_wc wc[32]
    cdef uint64_t addr, length
    cdef uint32_t lkey, rk
    cdef int posted = 0, done = 0, outstanding = 0, n, i, rc
    if api.mr_info(<void *>mr, &addr, &length, &lkey, &rk) != 0:
        raise ValueError("mr is not an open MR")
    sge.addr = addr
    sge.length = size
    sge.lkey = lkey
    wr.wr_id = 0
    wr.next = NULL
    wr.sg_list = &sge
    wr.num_sge = 1
    wr.opcode = 0            # IBV_WR_RDMA_WRITE
    wr.send_flags = 2        # IBV_SEND_SIGNALED
    wr.wr.rdma.remote_addr = remote_addr
    wr.wr.rdma.rkey = rkey
    while done < iters:
        while posted < iters and outstanding < depth:
            wr.wr_id = posted
            rc = api.post_send(<void *>qp, &wr, &bad)
            if rc != 0:
                raise OSError(rc, "post_send failed")
            posted += 1
            outstanding += 1
        n = api.poll_cq(<void *>cq, 32, wc)
        if n < 0:
            raise OSError(-n, "poll_cq failed")
        for i in range(n):
            if wc[i].status != 0:
                raise RuntimeError(f"completion error {wc[i].status}")
        done += n
        outstanding -= n
    return done
