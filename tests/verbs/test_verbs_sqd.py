"""The SQD state on every provider (rxe has it: rxe_qp_drain): modify_qp
RTS -> SQD drains the send queue (the WRs posted before complete, then
IBV_EVENT_SQ_DRAINED when en_sqd_async_notify asked for it and
query_qp's sq_draining is 0), the responder side keeps working, SQD ->
SQD changes what a drained QP may change, SQD -> RTS sends again; the
transitions the IBA's table refuses are EINVAL."""
import errno
import time

import pytest

import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import (Side, check_ok, connect_pair, differs,
                            expect_no_completion, pattern, poll_cq, qp_state)

pytest_plugins = ["verbs_fixtures"]

RC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UD
W = ibv.IBV_WR_RDMA_WRITE
STATE = ibv.IBV_QP_STATE


def to_sqd(qp, notify=1):
    qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_SQD,
                          en_sqd_async_notify=notify),
              STATE | ibv.IBV_QP_EN_SQD_ASYNC_NOTIFY)


def drained_event(ctx, qp, timeout=10.0):
    """Wait for IBV_EVENT_SQ_DRAINED of qp (other events are skipped)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ev = ctx.get_async_event(timeout=max(end - time.monotonic(), 0.01))
        if ev is not None and ev.event_type == ibv.IBV_EVENT_SQ_DRAINED:
            assert ev.element is qp
            return ev
    raise AssertionError("no IBV_EVENT_SQ_DRAINED")


def test_sqd_drains_and_resumes(ctx):
    """WRITEs posted just before RTS -> SQD all complete successfully; the
    QP then reports SQD, sq_draining 0, and raises SQ_DRAINED; the peer
    still writes into it (its responder works in SQD); SQD -> RTS and a
    WRITE goes out again."""
    a = Side(ctx, RC, max_send_wr=32)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        a.buf[:64] = pattern(64, 1)
        a.qp.post_send([a.send_wr(b, W, wr_id=i, length=64,
                                  remote_off=64 * i) for i in range(8)])
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        wcs = poll_cq(a.send_cq, 8)
        assert [w.wr_id for w in wcs] == list(range(8))
        for w in wcs:
            check_ok(w, ibv.IBV_WC_RDMA_WRITE)
        assert bytes(b.buf[448:512]) == pattern(64, 1)
        attr = a.qp.query(STATE | ibv.IBV_QP_EN_SQD_ASYNC_NOTIFY)
        assert attr.qp_state == ibv.IBV_QPS_SQD
        assert attr.sq_draining == 0
        # the responder side of a QP in SQD still answers
        b.buf[:16] = pattern(16, 2)
        b.qp.post_send(b.send_wr(a, W, length=16, remote_off=1024))
        check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_RDMA_WRITE)
        assert bytes(a.buf[1024:1040]) == pattern(16, 2)
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS), STATE)
        assert qp_state(a.qp) == ibv.IBV_QPS_RTS
        a.buf[:8] = b"resumed!"
        a.qp.post_send(a.send_wr(b, W, wr_id=99, length=8, remote_off=2048))
        check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 99)
        assert bytes(b.buf[2048:2056]) == b"resumed!"
    finally:
        a.close()
        b.close()


def test_sqd_idle_qp_drains_at_once(ctx):
    """An RC QP with nothing outstanding is drained as soon as it is in
    SQD (the event follows); SQD -> SQD with attributes a drained QP may
    change (timeout, retry_cnt, min_rnr_timer) keeps it in SQD with them."""
    a = Side(ctx, RC)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_SQD, timeout=16,
                                retry_cnt=5, min_rnr_timer=14),
                    STATE | ibv.IBV_QP_TIMEOUT | ibv.IBV_QP_RETRY_CNT |
                    ibv.IBV_QP_MIN_RNR_TIMER)
        attr = a.qp.query(STATE | ibv.IBV_QP_TIMEOUT |
                          ibv.IBV_QP_RETRY_CNT | ibv.IBV_QP_MIN_RNR_TIMER)
        assert attr.qp_state == ibv.IBV_QPS_SQD
        assert (attr.timeout, attr.retry_cnt, attr.min_rnr_timer) == \
            (16, 5, 14)
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS), STATE)
        a.buf[:4] = b"back"
        a.qp.post_send(a.send_wr(b, W, length=4))
        check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE)
        assert bytes(b.buf[:4]) == b"back"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("state", ["INIT", "RTR"])
def test_sqd_only_from_rts(ctx, state):
    """RESET/INIT/RTR -> SQD is not in the IBA's table: EINVAL, the QP
    stays where it was."""
    a = Side(ctx, RC)
    b = Side(ctx, RC)
    try:
        from verbs_fixtures import to_init, to_rtr
        to_init(a.qp)
        want = ibv.IBV_QPS_INIT
        if state == "RTR":
            to_rtr(a.qp, remote_qpn=b.qpn, dgid=b.gid)
            want = ibv.IBV_QPS_RTR
        with pytest.raises(rdma.SysError) as ei:
            to_sqd(a.qp)
        assert ei.value.errno == errno.EINVAL
        assert qp_state(a.qp) == want
    finally:
        a.close()
        b.close()


def test_post_send_in_sqd(ctx, provider):
    """A send WR posted while the QP is in SQD is taken and held until
    SQD -> RTS, as on rxe: nothing is sent before RTS; then the held WR
    goes, before the ones posted later."""
    a = Side(ctx, RC)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        a.buf[:8] = b"held wr!"
        a.qp.post_send(a.send_wr(b, W, wr_id=7, length=8, remote_off=512))
        assert qp_state(a.qp) == ibv.IBV_QPS_SQD
        expect_no_completion(a.send_cq, 0.3)
        assert bytes(b.buf[512:520]) == bytes(8)
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS), STATE)
        if differs(provider, "sqd-resume"):
            # a NIC's send queue starts again on SQD -> RTS by itself
            check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 7)
            assert bytes(b.buf[512:520]) == b"held wr!"
            a.qp.post_send(a.send_wr(b, W, wr_id=8, length=8,
                                     remote_off=520))
            check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 8)
            assert bytes(b.buf[512:528]) == b"held wr!" * 2
            return
        # (rxe's requester does not look at its queue again on SQD -> RTS:
        # the held WR goes with the next one posted)
        a.qp.post_send(a.send_wr(b, W, wr_id=8, length=8, remote_off=520))
        wcs = poll_cq(a.send_cq, 2)
        assert [w.wr_id for w in wcs] == [7, 8]
        for w in wcs:
            check_ok(w, ibv.IBV_WC_RDMA_WRITE)
        assert bytes(b.buf[512:528]) == b"held wr!" * 2
    finally:
        a.close()
        b.close()


def test_post_send_in_sqd_order_and_inline(ctx):
    """WRs posted in SQD keep their order with those posted after RTS, and
    an inline WR's data is taken when it is posted (its buffer is reused at
    once, as the inline flag allows)."""
    a = Side(ctx, RC, max_inline_data=64, max_send_wr=8)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        wrs = []
        for i in range(3):
            a.buf[64 * i:64 * i + 16] = pattern(16, 10 + i)
            wrs.append(a.send_wr(b, W, wr_id=i, off=64 * i, length=16,
                                 remote_off=16 * i))
        a.qp.post_send(wrs)
        a.buf[256:272] = b"inline bytes now"
        a.qp.post_send(a.send_wr(b, W, wr_id=3, off=256, length=16,
                                 remote_off=48,
                                 send_flags=ibv.IBV_SEND_SIGNALED |
                                 ibv.IBV_SEND_INLINE))
        a.buf[256:272] = b"reused, not sent"
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS), STATE)
        a.buf[512:528] = pattern(16, 20)
        a.qp.post_send(a.send_wr(b, W, wr_id=4, off=512, length=16,
                                 remote_off=64))
        wcs = poll_cq(a.send_cq, 5)
        assert [w.wr_id for w in wcs] == [0, 1, 2, 3, 4]
        for w in wcs:
            check_ok(w, ibv.IBV_WC_RDMA_WRITE)
        assert bytes(b.buf[:48]) == b"".join(pattern(16, 10 + i)
                                             for i in range(3))
        assert bytes(b.buf[48:64]) == b"inline bytes now"
        assert bytes(b.buf[64:80]) == pattern(16, 20)
    finally:
        a.close()
        b.close()


def test_post_send_in_sqd_then_err(ctx):
    """WRs held in SQD when the QP goes to ERR flush (IBV_WC_WR_FLUSH_ERR,
    unsignaled ones too, in order) and never reach the peer."""
    a = Side(ctx, RC, sq_sig_all=0)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        a.buf[:8] = b"flushed!"
        a.qp.post_send([a.send_wr(b, W, wr_id=1, length=8),
                        a.send_wr(b, W, wr_id=2, length=8, remote_off=8,
                                  send_flags=0)])
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR), STATE)
        wcs = poll_cq(a.send_cq, 2)
        assert [w.wr_id for w in wcs] == [1, 2]
        assert all(w.status == ibv.IBV_WC_WR_FLUSH_ERR for w in wcs)
        expect_no_completion(a.send_cq, 0.2)
        assert bytes(b.buf[:16]) == bytes(16)
    finally:
        a.close()
        b.close()


def test_post_send_in_sqd_bad_wr(ctx):
    """In SQD a WR is checked when posted as in RTS: more s/g elements
    than max_send_sge is EINVAL, a full send queue ENOMEM; the WRs before
    the bad one are held (they flush on the move to ERR), nothing is
    sent."""
    a = Side(ctx, RC, max_send_wr=2)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        to_sqd(a.qp)
        drained_event(ctx, a.qp)
        two = [a.mr.sge(length=8), a.mr.sge(length=8, off=8)]
        with pytest.raises(rdma.SysError) as ei:
            a.qp.post_send(a.send_wr(b, W, wr_id=5, sg_list=two))
        assert ei.value.errno == errno.EINVAL
        cap = a.qp.query(STATE).cap.max_send_wr
        a.buf[:8] = b"queued.."
        wrs = [a.send_wr(b, W, wr_id=i, length=8, remote_off=8 * i)
               for i in range(cap + 1)]
        with pytest.raises(rdma.SysError) as ei:
            a.qp.post_send(wrs)
        assert ei.value.errno == errno.ENOMEM
        assert qp_state(a.qp) == ibv.IBV_QPS_SQD
        expect_no_completion(a.send_cq, 0.2)
        a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR), STATE)
        wcs = poll_cq(a.send_cq, cap)
        assert [w.wr_id for w in wcs] == list(range(cap))
        assert all(w.status == ibv.IBV_WC_WR_FLUSH_ERR for w in wcs)
        assert bytes(b.buf[:8 * (cap + 1)]) == bytes(8 * (cap + 1))
    finally:
        a.close()
        b.close()
