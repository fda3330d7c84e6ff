"""Shared receive queues on every provider: create/query/modify, receives
consumed by several QPs, UD over an SRQ, RecvBatch, the limit event."""
import errno

import pytest

import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import (GRH_LEN, Side, connect_pair, check_ok, poll_cq,
                            expect_no_completion, pattern, qp_state)

pytest_plugins = ["verbs_fixtures"]

RC, UC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UC, ibv.IBV_QPT_UD


def test_srq_create_query_modify(ctx):
    """ibv_create_srq, ibv_query_srq, ibv_modify_srq(IBV_SRQ_LIMIT)."""
    with ctx.pd() as pd:
        srq = pd.srq(max_wr=20, max_sge=2)
        a = srq.query()
        assert isinstance(a, ibv.srq_attr)
        assert a.max_wr >= 20 and a.max_sge >= 2 and a.srq_limit == 0
        srq.modify(ibv.srq_attr(srq_limit=5))
        assert srq.query().srq_limit == 5
        with pytest.raises(rdma.SysError) as ei:     # limit above the depth
            srq.modify(ibv.srq_attr(srq_limit=a.max_wr + 100))
        assert ei.value.errno == errno.EINVAL
        srq2 = pd.srq(max_wr=10, max_sge=1, srq_limit=0)
        assert srq2.query().max_wr >= 10
        with pytest.raises(rdma.SysError):
            pd.srq(max_wr=1 << 30)
        with pytest.raises(TypeError):
            srq.modify("limit")


def test_srq_resize_keeps_posted_receives(ctx):
    """ibv_modify_srq(IBV_SRQ_MAX_WR): the receives posted before a resize
    complete after it, in order, with their buffers; the grown SRQ takes
    as many more as its new depth; a depth below the receives posted, or
    above the device's max_srq_wr, is EINVAL and changes nothing."""
    recv = Side(ctx, RC, use_srq=True, max_recv_wr=8)
    send = Side(ctx, RC, max_send_wr=64)
    try:
        connect_pair(send, recv)
        srq = recv.srq
        depth = srq.query().max_wr
        for i in range(4):
            srq.post_recv(ibv.recv_wr(wr_id=200 + i,
                                      sg_list=recv.mr.sge(length=64,
                                                          off=64 * i)))
        with pytest.raises(rdma.SysError) as ei:
            srq.modify(None, 2)                # 4 receives are posted
        assert ei.value.errno == errno.EINVAL
        assert srq.query().max_wr == depth
        limit = ctx.query_device().max_srq_wr
        with pytest.raises(rdma.SysError) as ei:
            srq.modify(None, limit + 1)
        assert ei.value.errno == errno.EINVAL
        srq.modify(None, 40)
        assert srq.query().max_wr >= 40
        for i in range(4, 36):                 # 36 posted: beyond 8
            srq.post_recv(ibv.recv_wr(wr_id=200 + i,
                                      sg_list=recv.mr.sge(length=64,
                                                          off=64 * (i % 8))))
        send.buf[:20] = pattern(20, 3)
        for i in range(36):
            send.qp.post_send(send.send_wr(recv, wr_id=i, length=20))
            if i % 8 == 7:
                for w in poll_cq(send.send_cq, 8):
                    check_ok(w)
        for w in poll_cq(send.send_cq, 4):
            check_ok(w)
        wcs = poll_cq(recv.recv_cq, 36)
        assert [w.wr_id for w in wcs] == [200 + i for i in range(36)]
        for w in wcs:
            check_ok(w, ibv.IBV_WC_RECV)
            assert w.byte_len == 20
        assert bytes(recv.buf[64:84]) == pattern(20, 3)
    finally:
        send.close()
        recv.close()


@pytest.mark.parametrize("transport", ["RC", "UC", "UD"])
def test_srq_shared_by_two_qps(ctx, transport):
    """ibv_post_srq_recv: one SRQ feeds two QPs; wc.qp_num tells which QP
    received; contents checked (UD: GRH first)."""
    t = {"RC": RC, "UC": UC, "UD": UD}[transport]
    recv = Side(ctx, t, use_srq=True, max_recv_wr=16)
    # a second QP on the same PD/SRQ/CQs
    qp2 = recv.pd.qp(t, 4, recv.send_cq, 4, recv.recv_cq, srq=recv.srq)
    s1, s2 = Side(ctx, t), Side(ctx, t)
    try:
        connect_pair(s1, recv)

        class Shim:            # the receive side as seen through qp2
            pass
        r2 = Shim()
        r2.qp, r2.gid, r2.mr, r2.buf = qp2, recv.gid, recv.mr, recv.buf
        r2.qp_type, r2.lid = t, recv.lid
        r2.qpn = qp2.qp_num
        connect_pair(s2, r2)
        extra = GRH_LEN if t == UD else 0
        rb = ibv.RecvBatch([ibv.recv_wr(wr_id=100 + i,
                                        sg_list=recv.mr.sge(length=128,
                                                            off=128 * i))
                            for i in range(6)])
        recv.srq.post_recv(rb)
        d1, d2 = pattern(30, 1), pattern(30, 2)
        s1.buf[:30] = d1
        s2.buf[:30] = d2
        for i in range(3):
            s1.qp.post_send(s1.send_wr(recv, wr_id=i, length=30))
            s2.qp.post_send(s2.send_wr(r2, wr_id=i, length=30))
        check_ok(poll_cq(s1.send_cq, 3)[0])
        check_ok(poll_cq(s2.send_cq, 3)[0])
        wcs = poll_cq(recv.recv_cq, 6)
        assert sorted(w.wr_id for w in wcs) == [100 + i for i in range(6)]
        by_qp = {}
        for w in wcs:
            check_ok(w, ibv.IBV_WC_RECV)
            assert w.byte_len == 30 + extra
            by_qp.setdefault(w.qp_num, []).append(w.wr_id)
            off = 128 * (w.wr_id - 100) + extra
            got = bytes(recv.buf[off:off + 30])
            assert got == (d1 if w.qp_num == recv.qpn else d2)
            if t == UD:
                assert w.src_qp == (s1.qpn if w.qp_num == recv.qpn else s2.qpn)
        assert sorted(by_qp) == sorted([recv.qpn, qp2.qp_num])
        assert all(len(v) == 3 for v in by_qp.values())
    finally:
        qp2.close()
        for s in (s1, s2, recv):
            s.close()


def test_post_recv_on_srq_qp_is_rejected(ctx):
    """ibv_post_recv on a QP that uses an SRQ: rejected (EINVAL from rxe, or
    ValueError from the binding)."""
    s = Side(ctx, RC, use_srq=True)
    peer = Side(ctx, RC)
    try:
        connect_pair(s, peer)
        with pytest.raises((rdma.SysError, ValueError)) as ei:
            s.qp.post_recv(ibv.recv_wr(wr_id=1, sg_list=s.mr.sge(length=8)))
        if isinstance(ei.value, rdma.SysError):
            assert ei.value.errno == errno.EINVAL
    finally:
        s.close()
        peer.close()


def test_srq_limit_event(ctx):
    """IBV_EVENT_SRQ_LIMIT_REACHED: armed with srq.modify(srq_limit=3), fires
    when the SRQ drops below 3; event.element is the SRQ; the limit disarms."""
    recv = Side(ctx, RC, use_srq=True)
    snd = Side(ctx, RC)
    try:
        connect_pair(snd, recv)
        for i in range(4):
            recv.post_recv(wr_id=i, off=64 * i, length=64)
        recv.srq.modify(ibv.srq_attr(srq_limit=3))
        assert ctx.get_async_event(timeout=0.05) is None
        snd.qp.post_send(snd.send_wr(recv, wr_id=1))
        check_ok(poll_cq(snd.send_cq)[0])
        check_ok(poll_cq(recv.recv_cq)[0])
        # 3 left: not below the limit yet (rxe fires when count < limit)
        assert ctx.get_async_event(timeout=0.1) is None
        snd.qp.post_send(snd.send_wr(recv, wr_id=2))
        check_ok(poll_cq(snd.send_cq)[0])
        check_ok(poll_cq(recv.recv_cq)[0])
        ev = ctx.get_async_event(timeout=10)
        assert ev is not None, "no SRQ limit event"
        assert isinstance(ev, ibv.async_event)
        assert ev.event_type == ibv.IBV_EVENT_SRQ_LIMIT_REACHED
        assert ev.element is recv.srq
        assert recv.srq.query().srq_limit == 0
        assert ctx.get_async_event(timeout=0.05) is None
    finally:
        snd.close()
        recv.close()


def test_srq_close_closes_qp(ctx):
    """Closing an SRQ first closes the QPs attached to it."""
    s = Side(ctx, RC, use_srq=True)
    try:
        s.srq.close()
        with pytest.raises(ValueError, match="closed"):
            s.qp.query()
        s.mr.sge()          # the PD and the MR are still fine
    finally:
        s.close()


def test_srq_receives_survive_qp_error(ctx):
    """A QP on an SRQ going to ERR (and closing) does not flush the SRQ's
    receives: another QP still receives from the SRQ."""
    recv = Side(ctx, RC, use_srq=True)
    snd = Side(ctx, RC)
    try:
        connect_pair(snd, recv)
        recv.post_recv(wr_id=7, length=64)
        qp2 = recv.pd.qp(RC, 2, recv.send_cq, 2, recv.recv_cq, srq=recv.srq)
        from verbs_fixtures import to_init
        to_init(qp2)
        qp2.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR))
        expect_no_completion(recv.recv_cq, 0.05)    # SRQ receives not flushed
        qp2.close()
        snd.qp.post_send(snd.send_wr(recv, wr_id=1))
        check_ok(poll_cq(snd.send_cq)[0])
        wc = check_ok(poll_cq(recv.recv_cq)[0])
        assert wc.wr_id == 7 and wc.qp_num == recv.qpn
        assert qp_state(recv.qp) == ibv.IBV_QPS_RTS
    finally:
        snd.close()
        recv.close()
