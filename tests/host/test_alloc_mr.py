"""PD.alloc_mr: library-owned registered memory, on the software fabric."""
import gc

import pytest

import rdma
import rdma.ibverbs as ibv
import rdma.vtools


def _fabric_port():
    try:
        return rdma.get_end_port(provider="ucx")
    except (rdma.RDMAError, ValueError) as e:
        pytest.skip(f"no software fabric device: {e}")


def test_alloc_mr_memory_and_lifetime():
    """alloc_mr gives zeroed, page-aligned, writable memory whose views
    outlive close() safely."""
    with rdma.get_verbs(_fabric_port()) as ctx:
        pd = ctx.pd()
        mr = pd.alloc_mr(3 * 4096 + 5, ibv.IBV_ACCESS_LOCAL_WRITE |
                         ibv.IBV_ACCESS_REMOTE_WRITE)
        assert mr.length == 3 * 4096 + 5 and mr.addr % 4096 == 0
        view = mr.buf
        assert view.nbytes == mr.length and not view.readonly
        assert bytes(view[:64]) == bytes(64)
        view[100:105] = b"abcde"
        assert bytes(memoryview(mr)[100:105]) == b"abcde"
        sge = mr.sge(5, 100)
        assert (sge.addr, sge.lkey) == (mr.addr + 100, mr.lkey)
        mr.close()
        assert bytes(view[100:105]) == b"abcde"     # still mapped
        with pytest.raises(BufferError, match="closed"):
            memoryview(mr)
        with pytest.raises(ValueError, match="closed MR"):
            mr.buf
        del view, mr
        gc.collect()
        with pytest.raises(ValueError, match="length"):
            pd.alloc_mr(0)
        with pytest.raises(BufferError, match="alloc_mr"):
            memoryview(pd.mr(bytearray(8), ibv.IBV_ACCESS_LOCAL_WRITE))


def test_alloc_mr_rdma_write_between_qps():
    """An RC WRITE into alloc_mr memory lands in mr.buf."""
    ep = _fabric_port()
    import rdma.path
    with rdma.get_verbs(ep) as ctx:
        pd = ctx.pd()
        cq = ctx.cq(16)
        qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        pa = rdma.path.resolve_path(None, rdma.path.IBPath(
            ep, DLID=ep.lid, dqpn=qb.qp_num))
        pb = rdma.path.resolve_path(None, rdma.path.IBPath(
            ep, DLID=ep.lid, dqpn=qa.qp_num))
        rdma.path.fill_path(qa, pa, 1)
        rdma.path.fill_path(qb, pb, 1)
        pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
        qa.establish(pa)
        qb.establish(pb, ibv.IBV_ACCESS_REMOTE_WRITE)
        src = pd.alloc_mr(4096)
        dst = pd.alloc_mr(4096, ibv.IBV_ACCESS_LOCAL_WRITE |
                          ibv.IBV_ACCESS_REMOTE_WRITE)
        src.buf[:8] = b"fabric!!"
        qa.post_send(ibv.send_wr(opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=src.sge(8), remote_addr=dst.addr + 64,
                                 rkey=dst.rkey))
        wcs = list(rdma.vtools.CQPoller(cq).iterwc(count=1, timeout=10))
        assert wcs and wcs[0].status == ibv.IBV_WC_SUCCESS
        assert bytes(dst.buf[64:72]) == b"fabric!!"
