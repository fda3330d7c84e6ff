"""Every verb on the providers that have a device here (on a host without
RDMA: the ucx software fabric), held to what rxe does (tests/vm/
test_verbs_*.py assert the same behaviours on Soft-RoCE).

The module runs over UCX shared memory in this process, and once more over
TCP in a subprocess (test_whole_module_over_tcp) with UCX_TLS=tcp.
"""
import asyncio
import errno
import os
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import rdma
import rdma.ibverbs as ibv
from fabric_helpers import (GRH_LEN, MR_ALL, TRANSPORTS, Side, check_ok,
                            expect_no_completion, make_pair, pattern, poll_cq,
                            providers_with_devices, qp_state, to_init, to_rtr,
                            to_rts, wait_for)

RC, UC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UC, ibv.IBV_QPT_UD
W, R, A = (ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WR_RDMA_READ,
           ibv.IBV_WR_ATOMIC_FETCH_AND_ADD)
LW = ibv.IBV_ACCESS_LOCAL_WRITE
PROVIDERS = providers_with_devices() or ["ucx"]


@pytest.fixture(scope="module", params=PROVIDERS)
def ctx(request):
    with rdma.get_verbs(rdma.get_end_port(provider=request.param)) as c:
        yield c


@pytest.fixture
def pair(ctx):
    made = []

    def make(qp_type, **kw):
        a, b = make_pair(ctx, ctx, qp_type, **kw)
        made.extend((a, b))
        return a, b
    yield make
    for s in made:
        s.close()


OPS = {"SEND": ibv.IBV_WR_SEND, "SEND_WITH_IMM": ibv.IBV_WR_SEND_WITH_IMM,
       "RDMA_WRITE": W, "RDMA_WRITE_WITH_IMM": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
       "RDMA_READ": R, "ATOMIC_CMP_AND_SWP": ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
       "ATOMIC_FETCH_AND_ADD": A}
SUPPORTED = {"RC": set(OPS),
             "UC": {"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM"},
             "UD": {"SEND", "SEND_WITH_IMM"}}
WC_OP = {"SEND": ibv.IBV_WC_SEND, "SEND_WITH_IMM": ibv.IBV_WC_SEND,
         "RDMA_WRITE": ibv.IBV_WC_RDMA_WRITE,
         "RDMA_WRITE_WITH_IMM": ibv.IBV_WC_RDMA_WRITE,
         "RDMA_READ": ibv.IBV_WC_RDMA_READ,
         "ATOMIC_CMP_AND_SWP": ibv.IBV_WC_COMP_SWAP,
         "ATOMIC_FETCH_AND_ADD": ibv.IBV_WC_FETCH_ADD}
IMM = 0xDEADBEEF


def do_op(a, b, op, length=48, seed=1):
    """Run op from a to b and check every byte it moved."""
    ud = a.qp_type == UD
    data = pattern(length, seed)
    a.buf[:length] = data
    b.buf[1024:1624] = b"\xee" * 600
    b.buf[256:256 + length] = bytes(length)
    kw = {"imm_data": IMM} if op.endswith("IMM") else {}
    if op == "RDMA_READ":
        b.buf[256:256 + length] = data[::-1]
    if op.startswith("ATOMIC"):
        length = 8
        old = 0x0102030405060708 + seed
        struct.pack_into("<Q", b.buf, 256, old)
        kw.update(compare_add=old, swap=0xAAAABBBBCCCCDDDD) \
            if op == "ATOMIC_CMP_AND_SWP" else kw.update(compare_add=0x1111)
    if op in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE_WITH_IMM"):
        b.post_recv(wr_id=0xABCD, off=1024, length=512)
    a.qp.post_send(a.send_wr(b, OPS[op], wr_id=2**64 - 3, length=length,
                             remote_off=256, **kw))
    wc = check_ok(poll_cq(a.send_cq)[0], WC_OP[op], 2**64 - 3)
    assert wc.qp_num == a.qpn
    if op in ("SEND", "SEND_WITH_IMM"):
        wc = check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 0xABCD)
        assert wc.byte_len == length + (GRH_LEN if ud else 0)
        off = 1024 + (GRH_LEN if ud else 0)
        assert bytes(b.buf[off:off + length]) == data
        assert b.buf[off + length] == 0xEE
        if ud:
            assert wc.src_qp == a.qpn and wc.wc_flags & ibv.IBV_WC_GRH
            assert wc.slid == a.lid
        assert bool(wc.wc_flags & ibv.IBV_WC_WITH_IMM) == op.endswith("IMM")
        if op.endswith("IMM"):
            assert wc.imm_data == IMM
    elif op.startswith("RDMA_WRITE"):
        if op.endswith("IMM"):
            wc = check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV_RDMA_WITH_IMM)
            assert wc.imm_data == IMM and wc.byte_len == length
            assert bytes(b.buf[1024:1624]) == b"\xee" * 600
        wait_for(lambda: bytes(b.buf[256:256 + length]) == data, what="write")
    elif op == "RDMA_READ":
        assert wc.byte_len == length
        assert bytes(a.buf[:length]) == data[::-1]
    elif op == "ATOMIC_CMP_AND_SWP":
        assert struct.unpack_from("<Q", a.buf, 0)[0] == old
        assert struct.unpack_from("<Q", b.buf, 256)[0] == 0xAAAABBBBCCCCDDDD
    else:
        assert struct.unpack_from("<Q", a.buf, 0)[0] == old
        assert struct.unpack_from("<Q", b.buf, 256)[0] == old + 0x1111


@pytest.mark.parametrize("transport,op", [(t, o) for t in TRANSPORTS for o in OPS])
def test_operation_table(pair, transport, op):
    """ibv_post_send: each opcode on each transport moves the right bytes,
    or ends as rxe ends an unsupported one (LOC_QP_OP_ERR, QP to ERR)."""
    a, b = pair(TRANSPORTS[transport])
    if op in SUPPORTED[transport]:
        do_op(a, b, op)
        do_op(a, b, op, seed=2)
        assert qp_state(a.qp) == ibv.IBV_QPS_RTS
        return
    a.qp.post_send(a.send_wr(b, OPS[op], wr_id=99, compare_add=1))
    wc = poll_cq(a.send_cq)[0]
    assert (wc.wr_id, wc.status) == (99, ibv.IBV_WC_LOC_QP_OP_ERR)
    assert qp_state(a.qp) == ibv.IBV_QPS_ERR
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, wr_id=100))
    wc = poll_cq(a.send_cq)[0]
    assert (wc.wr_id, wc.status) == (100, ibv.IBV_WC_WR_FLUSH_ERR)


def test_lid_addressing(ctx):
    """RC connected with LIDs only (ah_attr.dlid, no GRH), as on IB."""
    a, b = make_pair(ctx, ctx, RC, use_lid=True)
    try:
        assert a.qp.query().ah_attr.is_global == 0
        do_op(a, b, "RDMA_WRITE")
        do_op(b, a, "SEND_WITH_IMM")
    finally:
        a.close()
        b.close()


def test_ud_grh(pair):
    """UD receive: a 40-byte IB GRH (IPv6-style: version 6, next header
    0x1B, SGID and DGID), payload at byte 40."""
    a, b = pair(UD)
    b.buf[:200] = b"\xee" * 200
    a.buf[:33] = pattern(33, 3)
    b.post_recv(wr_id=1, length=200)
    a.qp.post_send(a.send_wr(b, length=33))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    assert wc.byte_len == 73 and wc.wc_flags & ibv.IBV_WC_GRH
    grh = bytes(b.buf[:40])
    assert grh[0] >> 4 == 6 and grh[6] == 0x1B
    assert grh[8:24] == bytes(a.gid) and grh[24:40] == bytes(b.gid)
    assert bytes(b.buf[40:73]) == pattern(33, 3) and b.buf[73] == 0xEE


def test_ud_larger_than_mtu(pair):
    """A UD SEND of exactly the MTU arrives; one byte more ends in
    IBV_WC_LOC_LEN_ERR, never arrives, and later WRs flush."""
    a, b = pair(UD, size=16384)
    mtu = 128 << ctx_port_mtu(a)
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b, length=mtu))
    check_ok(poll_cq(a.send_cq)[0])
    assert poll_cq(b.recv_cq)[0].byte_len == mtu + GRH_LEN
    b.post_recv(wr_id=2)
    a.qp.post_send([a.send_wr(b, wr_id=5, length=mtu + 1),
                    a.send_wr(b, wr_id=6, length=8)])
    wcs = poll_cq(a.send_cq, 2)
    assert [(w.wr_id, w.status) for w in wcs] == [
        (5, ibv.IBV_WC_LOC_LEN_ERR), (6, ibv.IBV_WC_WR_FLUSH_ERR)]
    expect_no_completion(b.recv_cq, 0.1)


def ctx_port_mtu(side):
    return side.ctx.query_port(1).active_mtu


@pytest.mark.parametrize("transport", ["RC", "UC"])
def test_unsignaled(pair, transport):
    """sq_sig_all=0: only IBV_SEND_SIGNALED WRs complete."""
    a, b = pair(TRANSPORTS[transport], side_a={"sq_sig_all": 0})
    wrs = []
    for i in range(6):
        a.buf[i * 8:(i + 1) * 8] = bytes([i + 1]) * 8
        wrs.append(a.send_wr(b, W, wr_id=i, off=i * 8, remote_off=i * 8,
                             send_flags=0 if i % 3 != 2 else ibv.IBV_SEND_SIGNALED))
    a.qp.post_send(wrs)
    assert [w.wr_id for w in poll_cq(a.send_cq, 2)] == [2, 5]
    expect_no_completion(a.send_cq, 0.05)
    wait_for(lambda: bytes(b.buf[:48]) == bytes(a.buf[:48]), what="writes")


@pytest.mark.parametrize("transport,op", [("RC", "SEND"), ("RC", "RDMA_WRITE"),
                                          ("UC", "RDMA_WRITE_WITH_IMM"),
                                          ("UD", "SEND_WITH_IMM")])
def test_inline(pair, transport, op):
    """IBV_SEND_INLINE: copied at post time, the lkey is not looked at."""
    a, b = pair(TRANSPORTS[transport], side_a={"max_inline_data": 64})
    assert a.qp.cap.max_inline_data >= 64
    a.buf[:40] = pattern(40, 4)
    if "SEND" in op or op.endswith("IMM"):
        b.post_recv(wr_id=3, off=1024, length=512)
    wr = a.send_wr(b, OPS[op], wr_id=8, length=40, remote_off=300,
                   send_flags=ibv.IBV_SEND_SIGNALED | ibv.IBV_SEND_INLINE,
                   imm_data=7 if op.endswith("IMM") else 0)
    wr.sg_list = ibv.sge(addr=a.mr.addr, length=40, lkey=0)
    a.qp.post_send(wr)
    a.buf[:40] = bytes(40)
    check_ok(poll_cq(a.send_cq)[0], wr_id=8)
    if op.startswith("SEND"):
        check_ok(poll_cq(b.recv_cq)[0])
        off = 1024 + (GRH_LEN if transport == "UD" else 0)
        assert bytes(b.buf[off:off + 40]) == pattern(40, 4)
    else:
        if op.endswith("IMM"):
            check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV_RDMA_WITH_IMM)
        wait_for(lambda: bytes(b.buf[300:340]) == pattern(40, 4),
                 what="inline write")
    too_long = a.send_wr(b, W, wr_id=9, length=65,
                         send_flags=ibv.IBV_SEND_INLINE)
    with pytest.raises(ibv.WRError) as ei:
        a.qp.post_send(too_long)
    assert ei.value.errno == errno.EINVAL


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_scatter_gather(pair, transport):
    """3 SGEs gathered and scattered (UD: the GRH fills the first SGE)."""
    a, b = pair(TRANSPORTS[transport], max_send_sge=3, max_recv_sge=3)
    a.buf[0:10], a.buf[100:105], a.buf[200:217] = b"A" * 10, b"B" * 5, b"C" * 17
    first = 46 if transport == "UD" else 6
    b.qp.post_recv(ibv.recv_wr(wr_id=4, sg_list=[
        b.mr.sge(length=first, off=0), b.mr.sge(length=10, off=500),
        b.mr.sge(length=64, off=1000)]))
    wr = a.send_wr(b, wr_id=9)
    wr.sg_list = [a.mr.sge(length=10, off=0), a.mr.sge(length=5, off=100),
                  a.mr.sge(length=17, off=200)]
    a.qp.post_send(wr)
    check_ok(poll_cq(a.send_cq)[0])
    assert check_ok(poll_cq(b.recv_cq)[0]).byte_len == 32 + first - 6
    got = bytes(b.buf[first - 6:first]) + bytes(b.buf[500:510]) + \
        bytes(b.buf[1000:1016])
    assert got == b"A" * 10 + b"B" * 5 + b"C" * 17


@pytest.mark.parametrize("transport", ["RC", "UD"])
def test_srq_shared_by_two_qps(ctx, transport):
    """One SRQ feeds two QPs; wc.qp_num tells which one received."""
    t = TRANSPORTS[transport]
    srv = Side(ctx, t, use_srq=True, max_recv_wr=8)
    qp2 = srv.pd.qp(t, 4, srv.send_cq, 0, srv.recv_cq, srq=srv.srq)
    c1, c2 = Side(ctx, t), Side(ctx, t)
    try:
        class S2:                        # the second QP, seen as a Side
            qp, gid, lid, qp_type = qp2, srv.gid, srv.lid, t
            qpn = qp2.qp_num
            mr = srv.mr
        from fabric_helpers import connect
        connect(c1, srv)
        connect(c2, S2)
        for i in range(4):
            srv.post_recv(wr_id=i, off=256 * i, length=256)
        c1.buf[:8], c2.buf[:8] = b"first..1", b"second.2"
        c1.qp.post_send(c1.send_wr(srv))
        c2.qp.post_send(c2.send_wr(S2))
        check_ok(poll_cq(c1.send_cq)[0])
        check_ok(poll_cq(c2.send_cq)[0])
        wcs = poll_cq(srv.recv_cq, 2)
        by_qp = {w.qp_num: w for w in wcs}
        assert set(by_qp) == {srv.qpn, qp2.qp_num}
        off = GRH_LEN if t == UD else 0
        for qpn, want in ((srv.qpn, b"first..1"), (qp2.qp_num, b"second.2")):
            w = by_qp[qpn]
            assert bytes(srv.buf[256 * w.wr_id + off:256 * w.wr_id + off + 8]) == want
    finally:
        qp2.close()
        for s in (c1, c2, srv):
            s.close()


def test_batch_and_wcarray(pair):
    """SendBatch/RecvBatch posted repeatedly; poll_into a WCArray."""
    a, b = pair(RC, max_send_wr=16, max_recv_wr=16)
    sb = ibv.SendBatch([a.send_wr(b, wr_id=i, off=8 * i) for i in range(4)])
    rb = ibv.RecvBatch([ibv.recv_wr(wr_id=i, sg_list=b.mr.sge(length=8, off=8 * i))
                        for i in range(4)])
    arr = ibv.WCArray(8)
    for rnd in range(5):
        a.buf[:32] = pattern(32, rnd)
        b.qp.post_recv(rb)
        a.qp.post_send(sb)
        ids = []
        wait_for(lambda: ids.extend(arr.wr_id(i) for i in range(
            a.send_cq.poll_into(arr))) or len(ids) >= 4, what="4 completions")
        assert ids == [0, 1, 2, 3]
        assert [w.wr_id for w in poll_cq(b.recv_cq, 4)] == [0, 1, 2, 3]
        assert bytes(b.buf[:32]) == bytes(a.buf[:32])


def test_large_transfers(pair):
    """RC SEND, WRITE and READ of 1 MiB (UCX rendezvous) are byte-exact."""
    a, b = pair(RC, size=1 << 21)
    data = pattern(1 << 16, 11) * 16
    a.buf[:1 << 20] = data
    b.post_recv(wr_id=1, off=1 << 20, length=1 << 20)
    a.qp.post_send(a.send_wr(b, length=1 << 20))
    check_ok(poll_cq(a.send_cq)[0])
    assert check_ok(poll_cq(b.recv_cq)[0]).byte_len == 1 << 20
    assert bytes(b.buf[1 << 20:]) == data
    b.buf[:1 << 20] = data[::-1]
    a.qp.post_send(a.send_wr(b, R, length=1 << 20, off=1 << 20))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_READ)
    assert bytes(a.buf[1 << 20:]) == data[::-1]
    a.qp.post_send(a.send_wr(b, W, length=1 << 20, remote_off=0))
    check_ok(poll_cq(a.send_cq)[0])
    assert bytes(b.buf[:1 << 20]) == data


# --------------------------------------------------------------------------
# errors

def _fail_then_flush(a, b, bad_wr, status):
    a.qp.post_send([bad_wr, a.send_wr(b, W, wr_id=2)])
    wcs = poll_cq(a.send_cq, 2)
    assert (wcs[0].wr_id, wcs[0].status) == (bad_wr.wr_id, status), \
        ibv.WCError(wcs[0], qp=a.qp)
    assert (wcs[1].wr_id, wcs[1].status) == (2, ibv.IBV_WC_WR_FLUSH_ERR)
    assert qp_state(a.qp) == ibv.IBV_QPS_ERR
    a.qp.post_send(a.send_wr(b, W, wr_id=3))
    assert poll_cq(a.send_cq)[0].status == ibv.IBV_WC_WR_FLUSH_ERR


NO_W = LW | ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_REMOTE_ATOMIC
NO_R = LW | ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_REMOTE_ATOMIC
NO_A = LW | ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_REMOTE_READ
REMOTE_CASES = {
    "bad_rkey_write": (W, MR_ALL, True, 0), "bad_rkey_read": (R, MR_ALL, True, 0),
    "bad_rkey_atomic": (A, MR_ALL, True, 0), "no_remote_write": (W, NO_W, False, 0),
    "no_remote_read": (R, NO_R, False, 0), "no_remote_atomic": (A, NO_A, False, 0),
    "write_past_end": (W, MR_ALL, False, None),
    "read_past_end": (R, MR_ALL, False, None),
    "atomic_past_end": (A, MR_ALL, False, None),
}


@pytest.mark.parametrize("case", list(REMOTE_CASES))
def test_remote_access_error(pair, case):
    """Bad rkey, missing right, out of bounds: REM_ACCESS_ERR, both QPs in
    ERR, the target memory untouched."""
    op, access, bad_rkey, roff = REMOTE_CASES[case]
    a, b = pair(RC, side_b={"access": access})
    kw = {"rkey": b.mr.rkey ^ 0x0F0F00} if bad_rkey else {}
    if roff is None:
        roff = len(b.buf) if op == A else len(b.buf) - 4
    b.buf[:8], b.buf[-4:] = b"original", b"tail"
    _fail_then_flush(a, b, a.send_wr(b, op, wr_id=1, remote_off=roff, **kw),
                     ibv.IBV_WC_REM_ACCESS_ERR)
    assert bytes(b.buf[:8]) == b"original" and bytes(b.buf[-4:]) == b"tail"
    wait_for(lambda: qp_state(b.qp) == ibv.IBV_QPS_ERR, what="responder ERR")


def test_deregistered_mr(pair):
    """An rkey whose MR was deregistered: REM_ACCESS_ERR, nothing written."""
    a, b = pair(RC)
    spare = bytearray(64)
    mr = b.pd.mr(spare, MR_ALL)
    rkey, addr = mr.rkey, mr.addr
    mr.close()
    _fail_then_flush(a, b, a.send_wr(b, W, wr_id=1, rkey=rkey,
                                     remote_addr=addr),
                     ibv.IBV_WC_REM_ACCESS_ERR)
    assert spare == bytearray(64)


def test_destroyed_remote_qp(ctx):
    """A request to a QP that was destroyed: RETRY_EXC_ERR (at once here;
    hardware would time out first), then flushes."""
    a, b = make_pair(ctx, ctx, RC, timeout=10, retry_cnt=1)
    try:
        b.qp.close()
        _fail_then_flush(a, b, a.send_wr(b, W, wr_id=1),
                         ibv.IBV_WC_RETRY_EXC_ERR)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("opcode", [ibv.IBV_WR_SEND, ibv.IBV_WR_RDMA_WRITE_WITH_IMM])
def test_rnr_retry_exceeded(pair, opcode):
    """No receive posted, rnr_retry=0: RNR_RETRY_EXC_ERR; responder in RTS."""
    a, b = pair(RC, rnr_retry=0, min_rnr_timer=1)
    _fail_then_flush(a, b, a.send_wr(b, opcode, wr_id=1, imm_data=1),
                     ibv.IBV_WC_RNR_RETRY_EXC_ERR)
    assert qp_state(b.qp) == ibv.IBV_QPS_RTS
    expect_no_completion(b.recv_cq, 0.05)


def test_rnr_retry_counts_timer(pair):
    """rnr_retry=3 with min_rnr_timer 20 (10.24 ms): fails after about
    3 x 10 ms, not at once."""
    import time
    a, b = pair(RC, rnr_retry=3, min_rnr_timer=20)
    t0 = time.monotonic()
    a.qp.post_send(a.send_wr(b, wr_id=1))
    wc = poll_cq(a.send_cq)[0]
    assert wc.status == ibv.IBV_WC_RNR_RETRY_EXC_ERR
    assert 0.025 <= time.monotonic() - t0 < 2.0


def test_rnr_recovers_when_receive_posted(pair):
    """rnr_retry=7 (infinite): the SEND waits for a receive posted late."""
    a, b = pair(RC, rnr_retry=7, min_rnr_timer=1)
    a.qp.post_send(a.send_wr(b, wr_id=1))
    a.qp.post_send(a.send_wr(b, W, wr_id=2))   # ordered behind the SEND
    expect_no_completion(a.send_cq, 0.05)
    b.post_recv(wr_id=9)
    assert [w.wr_id for w in poll_cq(a.send_cq, 2)] == [1, 2]
    check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 9)


@pytest.mark.parametrize("op,status", [
    (ibv.IBV_WR_SEND, ibv.IBV_WC_LOC_QP_OP_ERR),
    (ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WC_LOC_QP_OP_ERR),
    (ibv.IBV_WR_RDMA_READ, ibv.IBV_WC_LOC_PROT_ERR)], ids=["SEND", "WRITE", "READ"])
def test_bad_lkey(pair, op, status):
    """A bad lkey: SEND/WRITE -> LOC_QP_OP_ERR, READ -> LOC_PROT_ERR (rxe)."""
    a, b = pair(RC)
    b.post_recv(wr_id=5)
    bad = a.send_wr(b, op, wr_id=1)
    bad.sg_list = ibv.sge(addr=a.mr.addr, length=8, lkey=a.mr.lkey ^ 0x0F0F00)
    _fail_then_flush(a, b, bad, status)


def test_receive_too_small(pair):
    """A SEND longer than the receive: LOC_LEN_ERR at the responder,
    REM_INV_REQ_ERR at the requester."""
    a, b = pair(RC)
    b.post_recv(wr_id=5, length=4)
    a.qp.post_send(a.send_wr(b, wr_id=1, length=8))
    assert poll_cq(a.send_cq)[0].status == ibv.IBV_WC_REM_INV_REQ_ERR
    assert poll_cq(b.recv_cq)[0].status == ibv.IBV_WC_LOC_LEN_ERR


def test_receive_flush_and_reset_recovery(pair):
    """Receives flush when the QP goes to ERR; RESET->INIT->RTR->RTS makes
    it work again."""
    a, b = pair(RC)
    for i in range(3):
        b.post_recv(wr_id=10 + i, off=64 * i, length=64)
    b.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR))
    wcs = poll_cq(b.recv_cq, 3)
    assert [(w.wr_id, w.status) for w in wcs] == \
        [(10 + i, ibv.IBV_WC_WR_FLUSH_ERR) for i in range(3)]
    for s in (a, b):
        s.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RESET))
    for me, peer in ((a, b), (b, a)):
        to_init(me.qp)
        to_rtr(me.qp, remote_qpn=peer.qpn, dgid=peer.gid, rq_psn=100)
        to_rts(me.qp, sq_psn=100)
    do_op(a, b, "SEND")


def test_state_machine(ctx):
    """ibv_modify_qp follows the IBA table: illegal transitions and missing
    attributes -> EINVAL; post_send/post_recv on a RESET QP -> EINVAL."""
    s = Side(ctx, RC)
    try:
        with pytest.raises(rdma.SysError) as ei:
            s.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0))
        assert ei.value.errno == errno.EINVAL
        with pytest.raises(rdma.SysError):
            s.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, port_num=1))
        with pytest.raises(rdma.SysError) as ei:
            s.qp.post_recv(ibv.recv_wr(wr_id=1, sg_list=s.mr.sge(length=8)))
        assert ei.value.errno == errno.EINVAL
        with pytest.raises(rdma.SysError) as ei:
            s.qp.post_send(ibv.send_wr(opcode=ibv.IBV_WR_SEND,
                                       sg_list=s.mr.sge(length=8)))
        assert ei.value.errno == errno.EINVAL
        assert qp_state(s.qp) == ibv.IBV_QPS_RESET
        to_init(s.qp)
        with pytest.raises(rdma.SysError):     # RTR needs the AV, PSN...
            s.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR))
        assert qp_state(s.qp) == ibv.IBV_QPS_INIT
        with pytest.raises(rdma.SysError) as ei:   # a GID nobody has
            to_rtr(s.qp, remote_qpn=5, dgid=rdma.IBA.GID("fe80::7f00:1:0:5"))
        assert ei.value.errno == errno.EHOSTUNREACH
    finally:
        s.close()


def test_post_time_rejections(pair):
    """Misaligned atomic -> WRError EINVAL with its index; queue full ->
    ENOMEM; earlier WRs were posted."""
    a, b = pair(RC, max_send_wr=4)
    with pytest.raises(ibv.WRError) as ei:
        a.qp.post_send([a.send_wr(b, W, wr_id=0),
                        a.send_wr(b, A, wr_id=1, remote_off=4)])
    assert ei.value.errno == errno.EINVAL and ei.value.index == 1
    assert [w.wr_id for w in poll_cq(a.send_cq)] == [0]
    with pytest.raises(ibv.WRError) as ei:
        a.qp.post_send([a.send_wr(b, W, wr_id=i) for i in range(6)])
    assert ei.value.errno == errno.ENOMEM and ei.value.index == 4
    assert len(poll_cq(a.send_cq, 4)) == 4


# --------------------------------------------------------------------------
# completion channels

@pytest.fixture
def evpair(ctx):
    cc = ctx.comp_channel()
    a = Side(ctx, RC)
    b = Side(ctx, RC, comp_channel=cc)
    from fabric_helpers import connect
    connect(a, b)
    yield cc, a, b
    a.close()
    b.close()
    cc.close()


def _send_one(a, b, flags=ibv.IBV_SEND_SIGNALED):
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b, send_flags=flags))
    check_ok(poll_cq(a.send_cq)[0])


@pytest.mark.parametrize("how", ["select", "poll", "epoll", "get_cq_event"])
def test_comp_channel_fd(evpair, how):
    """The channel's fd is a real fd: select/poll/epoll see the event."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    assert cc.get_cq_event(timeout=0.01) is None
    _send_one(a, b)
    fd = cc.fileno()
    if how == "select":
        assert select.select([fd], [], [], 5)[0] == [fd]
    elif how == "poll":
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(5000)
    elif how == "epoll":
        with select.epoll() as ep:
            ep.register(fd, select.EPOLLIN)
            assert ep.poll(5)
    assert cc.get_cq_event(timeout=5) is b.recv_cq
    b.recv_cq.ack_events()
    check_ok(poll_cq(b.recv_cq)[0])
    assert cc.get_cq_event(timeout=0.01) is None


def test_comp_channel_asyncio(evpair):
    """loop.add_reader on the channel fd wakes a coroutine."""
    cc, a, b = evpair

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        loop.add_reader(cc.fileno(), lambda: fut.done() or fut.set_result(1))
        b.recv_cq.req_notify_cq()
        _send_one(a, b)
        try:
            await asyncio.wait_for(fut, 5)
        finally:
            loop.remove_reader(cc.fileno())
        return cc.get_cq_event(timeout=1)
    assert asyncio.run(main()) is b.recv_cq
    b.recv_cq.ack_events()


def test_solicited_only(evpair):
    """req_notify_cq(solicited_only=True): only IBV_SEND_SOLICITED wakes."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq(solicited_only=True)
    _send_one(a, b)
    assert cc.get_cq_event(timeout=0.1) is None
    _send_one(a, b, ibv.IBV_SEND_SIGNALED | ibv.IBV_SEND_SOLICITED)
    assert cc.get_cq_event(timeout=5) is b.recv_cq
    b.recv_cq.ack_events()


def test_srq_limit_event(ctx):
    """IBV_EVENT_SRQ_LIMIT_REACHED on the async fd, element the SRQ."""
    ctx = rdma.get_verbs(ctx.end_port)      # its own: no older events
    a, b = make_pair(ctx, ctx, RC, side_b={"use_srq": True, "max_recv_wr": 8})
    try:
        for i in range(4):
            b.post_recv(wr_id=i, off=64 * i, length=64)
        b.srq.modify(ibv.srq_attr(srq_limit=3))
        for i in range(2):
            a.qp.post_send(a.send_wr(b, wr_id=i))
        poll_cq(a.send_cq, 2)
        ev = ctx.get_async_event(timeout=5)
        assert ev is not None and ev.event_type == ibv.IBV_EVENT_SRQ_LIMIT_REACHED
        assert ev.element is b.srq
    finally:
        a.close()
        b.close()
        ctx.close()


# --------------------------------------------------------------------------
# the same module over TCP

def test_whole_module_over_tcp():
    """This module once more in a subprocess with UCX_TLS=tcp (loopback
    through the TCP transport instead of shared memory)."""
    if os.environ.get("FABRIC_IN_TCP_RUN"):
        pytest.skip("already the TCP run")
    env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES="lo",
               UCX_WARN_UNUSED_ENV_VARS="n", FABRIC_IN_TCP_RUN="1",
               RDMA_PROVIDER="ucx")
    here = Path(__file__).resolve().parent
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x",
                          "-p", "no:cacheprovider", str(Path(__file__)),
                          "-k", "not whole_module"],
                         cwd=str(here.parent.parent), env=env,
                         capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
