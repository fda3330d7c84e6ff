"""PD.alloc_mr on the rdma-core provider (rxe)."""
import gc
import os


import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from verbs_fixtures import connect_pair

GIDX = int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))


def test_alloc_mr_on_verbs(end_port, ctx):
    """alloc_mr memory is registered with ibv_reg_mr and usable as an RDMA
    WRITE target; views outlive close()."""
    gid = end_port.gids[GIDX]
    with ctx.pd() as pd:
        cq = ctx.cq(16)
        qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        connect_pair(qa, qb, end_port, dgid=gid, max_rd_atomic=1)
        src = pd.alloc_mr(8192)
        dst = pd.alloc_mr(8192, ibv.IBV_ACCESS_LOCAL_WRITE |
                          ibv.IBV_ACCESS_REMOTE_WRITE)
        assert src.addr % 4096 == 0 and bytes(dst.buf[:16]) == bytes(16)
        src.buf[:6] = b"rxe!!!"
        qa.post_send(ibv.send_wr(opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=src.sge(6),
                                 remote_addr=dst.addr + 4100,
                                 rkey=dst.rkey))
        wcs = list(rdma.vtools.CQPoller(cq).iterwc(count=1, timeout=20))
        assert wcs and wcs[0].status == ibv.IBV_WC_SUCCESS
        view = dst.buf
        assert bytes(view[4100:4106]) == b"rxe!!!"
    assert dst.closed and bytes(view[4100:4106]) == b"rxe!!!"
    del view, dst, src
    gc.collect()
