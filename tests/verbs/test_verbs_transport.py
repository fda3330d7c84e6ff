"""The transport/operation table on every provider: what RC, UC and UD
move, and how rxe rejects what a transport does not support.

Every supported operation is checked byte for byte at the far end, with
immediate data where it applies; unsupported ones must end the way rxe ends
them (observed with a C program on Debian's 6.1 kernel + rdma-core 44): the
post succeeds, the send completion is IBV_WC_LOC_QP_OP_ERR and the QP goes
to IBV_QPS_ERR.
"""
import struct

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import (GRH_LEN, TRANSPORTS, Side, check_ok, differs,
                            expect_no_completion, make_pair, pattern,
                            poll_cq, qp_state, wait_for)

pytest_plugins = ["verbs_fixtures"]

RC, UC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UC, ibv.IBV_QPT_UD
OPS = {
    "SEND": ibv.IBV_WR_SEND,
    "SEND_WITH_IMM": ibv.IBV_WR_SEND_WITH_IMM,
    "RDMA_WRITE": ibv.IBV_WR_RDMA_WRITE,
    "RDMA_WRITE_WITH_IMM": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
    "RDMA_READ": ibv.IBV_WR_RDMA_READ,
    "ATOMIC_CMP_AND_SWP": ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
    "ATOMIC_FETCH_AND_ADD": ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
}
#: seed 004's table
SUPPORTED = {
    "RC": set(OPS),
    "UC": {"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM"},
    "UD": {"SEND", "SEND_WITH_IMM"},
}
SEND_WC_OPCODE = {
    "SEND": ibv.IBV_WC_SEND, "SEND_WITH_IMM": ibv.IBV_WC_SEND,
    "RDMA_WRITE": ibv.IBV_WC_RDMA_WRITE,
    "RDMA_WRITE_WITH_IMM": ibv.IBV_WC_RDMA_WRITE,
    "RDMA_READ": ibv.IBV_WC_RDMA_READ,
    "ATOMIC_CMP_AND_SWP": ibv.IBV_WC_COMP_SWAP,
    "ATOMIC_FETCH_AND_ADD": ibv.IBV_WC_FETCH_ADD,
}
# top bit set: must come back as the same unsigned int
IMM = 0xDEADBEEF
LEN = 48


def _matrix():
    for t in TRANSPORTS:
        for op in OPS:
            yield pytest.param(t, op, id=f"{t}-{op}")


def do_op(a: Side, b: Side, op: str, *, length: int = LEN, seed: int = 1,
          send_flags: int = ibv.IBV_SEND_SIGNALED):
    """Run operation *op* from a to b and check every byte it moved."""
    opcode = OPS[op]
    ud = a.qp_type == UD
    data = pattern(length, seed)
    a.buf[0:length] = data
    recv_off = 1024                       # where b's receive buffer starts
    remote = 256                          # target of one-sided operations
    b.buf[recv_off:recv_off + 600] = b"\xee" * 600
    b.buf[remote:remote + length] = b"\x00" * length
    kw = {}
    if op.endswith("WITH_IMM"):
        kw["imm_data"] = IMM
    if op == "RDMA_READ":
        b.buf[remote:remote + length] = data[::-1]
    if op.startswith("ATOMIC"):
        length = 8
        old = 0x0102030405060708 + seed
        struct.pack_into("<Q", b.buf, remote, old)
        a.buf[0:8] = b"\xff" * 8
        if op == "ATOMIC_CMP_AND_SWP":
            kw.update(compare_add=old, swap=0xAAAABBBBCCCCDDDD)
        else:
            kw.update(compare_add=0x1111)
    if op in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE_WITH_IMM"):
        b.post_recv(wr_id=0xABCD, off=recv_off, length=512)
    wr = a.send_wr(b, opcode, wr_id=0x1234_5678_9ABC_DEF0, length=length,
                   remote_off=remote, send_flags=send_flags, **kw)
    a.qp.post_send(wr)
    wc = check_ok(poll_cq(a.send_cq)[0], SEND_WC_OPCODE[op],
                  0x1234_5678_9ABC_DEF0)
    assert wc.qp_num == a.qpn
    if op == "RDMA_READ":
        assert wc.byte_len == length
    # --- the far end ------------------------------------------------------
    if op in ("SEND", "SEND_WITH_IMM"):
        wc = check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 0xABCD)
        assert wc.qp_num == b.qpn
        assert wc.byte_len == length + (GRH_LEN if ud else 0)
        off = recv_off + (GRH_LEN if ud else 0)
        assert bytes(b.buf[off:off + length]) == data
        assert b.buf[off + length] == 0xEE          # nothing more written
        if ud:
            assert wc.src_qp == a.qpn
            assert wc.wc_flags & ibv.IBV_WC_GRH
        if op == "SEND_WITH_IMM":
            assert wc.wc_flags & ibv.IBV_WC_WITH_IMM
            assert wc.imm_data == IMM
        else:
            assert not wc.wc_flags & ibv.IBV_WC_WITH_IMM
    elif op in ("RDMA_WRITE", "RDMA_WRITE_WITH_IMM"):
        if op == "RDMA_WRITE_WITH_IMM":
            wc = check_ok(poll_cq(b.recv_cq)[0],
                          ibv.IBV_WC_RECV_RDMA_WITH_IMM, 0xABCD)
            assert wc.imm_data == IMM and wc.wc_flags & ibv.IBV_WC_WITH_IMM
            assert wc.byte_len == length
            assert wc.qp_num == b.qpn
            # the receive buffer is consumed but not written
            assert bytes(b.buf[recv_off:recv_off + 600]) == b"\xee" * 600
        else:
            expect_no_completion(b.recv_cq, 0.05)
        if a.qp_type == UC:  # no ack: the completion is local
            wait_for(lambda: bytes(b.buf[remote:remote + length]) == data,
                     what="RDMA WRITE data")
        assert bytes(b.buf[remote:remote + length]) == data
    elif op == "RDMA_READ":
        assert bytes(a.buf[0:length]) == data[::-1]
        expect_no_completion(b.recv_cq, 0.05)
    elif op == "ATOMIC_CMP_AND_SWP":
        assert struct.unpack_from("<Q", a.buf, 0)[0] == old
        assert struct.unpack_from("<Q", b.buf, remote)[0] == 0xAAAABBBBCCCCDDDD
    elif op == "ATOMIC_FETCH_AND_ADD":
        assert struct.unpack_from("<Q", a.buf, 0)[0] == old
        assert struct.unpack_from("<Q", b.buf, remote)[0] == old + 0x1111


@pytest.mark.parametrize("transport,op", list(_matrix()))
def test_operation_table(pair_factory, transport, op):
    """ibv_post_send: each opcode on each transport moves the right bytes,
    or ends as rxe ends an unsupported one (LOC_QP_OP_ERR, QP in ERR)."""
    a, b = pair_factory(TRANSPORTS[transport])
    if op in SUPPORTED[transport]:
        do_op(a, b, op)
        assert qp_state(a.qp) == ibv.IBV_QPS_RTS
        do_op(a, b, op, seed=2)            # and again on the same QPs
        return
    b.post_recv(wr_id=5)
    a.qp.post_send(a.send_wr(b, OPS[op], wr_id=99, compare_add=1, swap=2))
    wc = poll_cq(a.send_cq)[0]
    assert wc.wr_id == 99
    assert wc.status == ibv.IBV_WC_LOC_QP_OP_ERR, ibv.WCError(wc)
    assert "IBV_WC_LOC_QP_OP_ERR" in str(ibv.WCError(wc, qp=a.qp))
    assert qp_state(a.qp) == ibv.IBV_QPS_ERR
    expect_no_completion(b.recv_cq, 0.1)
    assert qp_state(b.qp) == ibv.IBV_QPS_RTS
    # a WR posted to the failed QP is flushed
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, wr_id=100))
    wc = poll_cq(a.send_cq)[0]
    assert (wc.wr_id, wc.status) == (100, ibv.IBV_WC_WR_FLUSH_ERR)


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_supported_ops_across_hosts(ctx_pair, transport):
    """ibv_post_send between two contexts (rxe0 loopback, rxe1<->rxe2 veth)."""
    ca, cb = ctx_pair
    a, b = make_pair(ca, cb, TRANSPORTS[transport])
    try:
        for i, op in enumerate(sorted(SUPPORTED[transport])):
            do_op(a, b, op, seed=10 + i)
            do_op(b, a, op, seed=20 + i)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_ud_grh_and_payload(pair_factory, provider, transport):
    """UD receive: 40-byte GRH (RoCEv2/IPv4 header in bytes 20..39; the
    fabric: an IB GRH), payload at 40; RC/UC receives start at byte 0."""
    a, b = pair_factory(TRANSPORTS[transport])
    b.buf[:200] = b"\xee" * 200
    data = pattern(33, 3)
    a.buf[:33] = data
    b.post_recv(wr_id=1, length=200)
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, length=33))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    if transport != "UD":
        assert wc.byte_len == 33 and bytes(b.buf[:33]) == data
        return
    assert wc.byte_len == 40 + 33
    grh = bytes(b.buf[:40])
    assert bytes(b.buf[40:73]) == data
    assert b.buf[73] == 0xEE
    if differs(provider, "ib-grh"):
        assert wc.wc_flags & ibv.IBV_WC_GRH
        assert grh[0] >> 4 == 6 and grh[6] == 0x1B     # IPv6-style, IB
        assert grh[8:24] == bytes(a.gid) and grh[24:40] == bytes(b.gid)
        return
    ip = grh[20:40]
    assert ip[0] == 0x45, grh.hex()                  # IPv4, IHL 5
    assert ip[9] == 17                               # UDP
    total = struct.unpack(">H", ip[2:4])[0]
    # IP + UDP(8) + BTH(12) + DETH(8) + payload padded to 4 bytes + ICRC(4)
    assert total == 20 + 8 + 12 + 8 + 36 + 4
    src = bytes(a.gid)[12:]
    dst = bytes(b.gid)[12:]
    assert ip[12:16] == src and ip[16:20] == dst


@pytest.mark.parametrize("transport", ["RC", "UC"])
def test_unsignaled_sends(pair_factory, transport):
    """sq_sig_all=0: only WRs with IBV_SEND_SIGNALED complete."""
    a, b = pair_factory(TRANSPORTS[transport], side_a={"sq_sig_all": 0})
    wrs = []
    for i in range(6):
        a.buf[i * 8:(i + 1) * 8] = bytes([i + 1]) * 8
        wrs.append(a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i, off=i * 8,
                             remote_off=i * 8, send_flags=0 if i % 3 != 2
                             else ibv.IBV_SEND_SIGNALED))
    a.qp.post_send(wrs)
    wcs = poll_cq(a.send_cq, 2)
    assert [w.wr_id for w in wcs] == [2, 5]
    expect_no_completion(a.send_cq, 0.05)
    wait_for(lambda: bytes(b.buf[:48]) == bytes(a.buf[:48]), what="writes")


def test_unsignaled_ud_send(pair_factory):
    """UD with sq_sig_all=0: the unsignaled SEND arrives, no send
    completion."""
    a, b = pair_factory(UD, side_a={"sq_sig_all": 0})
    b.post_recv(wr_id=1)
    b.post_recv(wr_id=2)
    a.buf[:4] = b"abcd"
    a.qp.post_send([a.send_wr(b, wr_id=10, length=4, send_flags=0),
                    a.send_wr(b, wr_id=11, length=4,
                              send_flags=ibv.IBV_SEND_SIGNALED)])
    assert [w.wr_id for w in poll_cq(a.send_cq)] == [11]
    assert [w.wr_id for w in poll_cq(b.recv_cq, 2)] == [1, 2]


def test_sq_sig_all_signals_everything(pair_factory):
    """sq_sig_all=1 (the default): WRs without IBV_SEND_SIGNALED complete."""
    a, b = pair_factory(RC)
    a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i, send_flags=0)
                    for i in range(3)])
    assert [w.wr_id for w in poll_cq(a.send_cq, 3)] == [0, 1, 2]


@pytest.mark.parametrize("transport,op", [
    ("RC", "SEND"), ("RC", "SEND_WITH_IMM"), ("RC", "RDMA_WRITE"),
    ("RC", "RDMA_WRITE_WITH_IMM"), ("UC", "SEND"), ("UC", "RDMA_WRITE"),
    ("UD", "SEND"), ("UD", "SEND_WITH_IMM")])
def test_inline(pair_factory, transport, op):
    """IBV_SEND_INLINE: data is copied at post time (the lkey is not used)."""
    a, b = pair_factory(TRANSPORTS[transport], side_a={"max_inline_data": 64})
    assert a.qp.cap.max_inline_data >= 64
    data = pattern(40, 4)
    a.buf[:40] = data
    if op in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE_WITH_IMM"):
        b.post_recv(wr_id=3, off=1024, length=512)
    wr = a.send_wr(b, OPS[op], wr_id=8, length=40, remote_off=300,
                   send_flags=ibv.IBV_SEND_SIGNALED | ibv.IBV_SEND_INLINE,
                   imm_data=7 if op.endswith("IMM") else 0)
    wr.sg_list = ibv.sge(addr=a.mr.addr, length=40, lkey=0)   # lkey ignored
    a.qp.post_send(wr)
    a.buf[:40] = b"\x00" * 40             # too late to change what is sent
    check_ok(poll_cq(a.send_cq)[0], wr_id=8)
    if op.startswith("SEND"):
        check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV)
        off = 1024 + (GRH_LEN if transport == "UD" else 0)
        assert bytes(b.buf[off:off + 40]) == data
    else:
        if op.endswith("IMM"):
            check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV_RDMA_WITH_IMM)
        wait_for(lambda: bytes(b.buf[300:340]) == data, what="inline write")


def test_inline_too_long_is_rejected(pair_factory):
    """ibv_post_send: INLINE longer than cap.max_inline_data -> EINVAL."""
    a, b = pair_factory(RC, side_a={"max_inline_data": 32})
    n = a.qp.cap.max_inline_data
    ok = a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=1, length=n,
                   send_flags=ibv.IBV_SEND_SIGNALED | ibv.IBV_SEND_INLINE)
    bad = a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=2, length=n + 1,
                    send_flags=ibv.IBV_SEND_SIGNALED | ibv.IBV_SEND_INLINE)
    with pytest.raises(ibv.WRError) as ei:
        a.qp.post_send([ok, bad])
    import errno
    assert ei.value.errno == errno.EINVAL and ei.value.index == 1
    assert [w.wr_id for w in poll_cq(a.send_cq)] == [1]


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_scatter_gather(pair_factory, transport):
    """ibv_post_send/ibv_post_recv with 3 SGEs each: gathered and scattered."""
    a, b = pair_factory(TRANSPORTS[transport], max_send_sge=3, max_recv_sge=3)
    a.buf[0:10] = b"A" * 10
    a.buf[100:105] = b"B" * 5
    a.buf[200:217] = b"C" * 17
    ud = transport == "UD"
    first = 40 + 6 if ud else 6           # the GRH lands in the first SGE
    rsges = [b.mr.sge(length=first, off=0), b.mr.sge(length=10, off=500),
             b.mr.sge(length=64, off=1000)]
    b.qp.post_recv(ibv.recv_wr(wr_id=4, sg_list=rsges))
    sges = [a.mr.sge(length=10, off=0), a.mr.sge(length=5, off=100),
            a.mr.sge(length=17, off=200)]
    a.qp.post_send(ibv.send_wr(wr_id=9, sg_list=sges, opcode=ibv.IBV_WR_SEND,
                               send_flags=ibv.IBV_SEND_SIGNALED,
                               **({"ah": a.ah_to(b), "remote_qpn": b.qpn,
                                   "remote_qkey": 0x11111111} if ud else {})))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    assert wc.byte_len == 32 + (40 if ud else 0)
    got = bytes(b.buf[first - 6:first]) + bytes(b.buf[500:510]) + \
        bytes(b.buf[1000:1016])
    assert got == b"A" * 10 + b"B" * 5 + b"C" * 17


def test_post_list_chain_and_batch(pair_factory):
    """post_send with a list, a `next` chain and a SendBatch; post_recv with
    a RecvBatch; poll_into a WCArray."""
    a, b = pair_factory(RC, max_send_wr=32, max_recv_wr=32)
    for i in range(12):
        a.buf[i * 16:(i + 1) * 16] = bytes([65 + i]) * 16
    rb = ibv.RecvBatch([ibv.recv_wr(wr_id=100 + i,
                                    sg_list=b.mr.sge(length=16,
                                                     off=2048 + 16 * i))
                        for i in range(12)])
    b.qp.post_recv(rb)

    def wr(i):
        return a.send_wr(b, wr_id=i, off=16 * i, length=16)
    a.qp.post_send([wr(0), wr(1), wr(2), wr(3)])          # a list
    w4, w5, w6, w7 = wr(4), wr(5), wr(6), wr(7)
    w4.next = w5
    w5.next = w6
    w6.next = w7
    a.qp.post_send(w4)                                     # a chain
    a.qp.post_send(ibv.SendBatch([wr(8), wr(9), wr(10), wr(11)]))  # a batch
    arr = ibv.WCArray(5)
    ids = []

    def drain():
        n = a.send_cq.poll_into(arr)
        assert 0 <= n <= 5
        ids.extend(arr[i].wr_id for i in range(n))
        return len(ids) >= 12
    wait_for(drain, what="12 send completions")
    assert ids == list(range(12))
    rwcs = poll_cq(b.recv_cq, 12)
    assert [w.wr_id for w in rwcs] == [100 + i for i in range(12)]
    assert bytes(b.buf[2048:2048 + 192]) == bytes(a.buf[:192])


def test_batch_reposted(pair_factory):
    """A SendBatch/RecvBatch posted many times moves the same bytes each
    time."""
    a, b = pair_factory(RC, max_send_wr=16, max_recv_wr=16)
    sb = ibv.SendBatch([a.send_wr(b, wr_id=i, off=8 * i, length=8)
                        for i in range(4)])
    rb = ibv.RecvBatch([ibv.recv_wr(wr_id=i,
                                    sg_list=b.mr.sge(length=8, off=8 * i))
                        for i in range(4)])
    for rnd in range(5):
        a.buf[:32] = pattern(32, rnd)
        b.buf[:32] = b"\x00" * 32
        b.qp.post_recv(rb)
        a.qp.post_send(sb)
        assert [w.wr_id for w in poll_cq(a.send_cq, 4)] == [0, 1, 2, 3]
        assert [w.wr_id for w in poll_cq(b.recv_cq, 4)] == [0, 1, 2, 3]
        assert bytes(b.buf[:32]) == bytes(a.buf[:32])


def test_poll_limits(pair_factory):
    """cq.poll(n) returns at most n; poll() (n<0) returns everything."""
    a, b = pair_factory(RC, max_send_wr=16)
    a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i)
                    for i in range(7)])
    got = []

    def two():
        wcs = a.send_cq.poll(2)
        assert len(wcs) <= 2, wcs
        got.extend(wcs)
        return len(got) >= 3
    wait_for(two, what="3 completions")
    assert len(got) <= 4
    rest = poll_cq(a.send_cq, 7 - len(got))
    assert [w.wr_id for w in got + rest] == list(range(7))
    assert a.send_cq.poll() == [] and a.send_cq.poll(0) == []


def test_atomics_semantics(pair_factory):
    """IBV_WR_ATOMIC_*: CAS swaps only on match; FAA wraps at 2**64."""
    a, b = pair_factory(RC)

    def atomic(opcode, remote_off, local_off, **kw):
        a.qp.post_send(a.send_wr(b, opcode, off=local_off,
                                 remote_off=remote_off,
                                 **kw))
        check_ok(poll_cq(a.send_cq)[0])
        return struct.unpack_from("<Q", a.buf, local_off)[0]
    struct.pack_into("<Q", b.buf, 64, 5)
    assert atomic(ibv.IBV_WR_ATOMIC_CMP_AND_SWP, 64, 0, compare_add=4,
                  swap=9) == 5
    assert struct.unpack_from("<Q", b.buf, 64)[0] == 5          # no match
    assert atomic(ibv.IBV_WR_ATOMIC_CMP_AND_SWP, 64, 8, compare_add=5,
                  swap=9) == 5
    assert struct.unpack_from("<Q", b.buf, 64)[0] == 9
    struct.pack_into("<Q", b.buf, 128, 2**64 - 1)
    assert atomic(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, 128, 16,
                  compare_add=3) == 2**64 - 1
    assert struct.unpack_from("<Q", b.buf, 128)[0] == 2
    # neighbours untouched
    assert (bytes(b.buf[56:64]) == bytes(8) and
            bytes(b.buf[136:144]) == bytes(8))


def test_wr_id_and_imm_full_range(pair_factory):
    """wr_id is 64-bit, imm_data a 32-bit host-order int, both unsigned."""
    a, b = pair_factory(RC)
    for wr_id, imm in ((0, 0), (2**64 - 1, 2**32 - 1), (2**63, 0x80000000),
                       (0x0102030405060708, 0x01020304)):
        b.post_recv(wr_id=wr_id)
        a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND_WITH_IMM, wr_id=wr_id,
                                 imm_data=imm))
        assert poll_cq(a.send_cq)[0].wr_id == wr_id
        wc = check_ok(poll_cq(b.recv_cq)[0])
        assert (wc.wr_id, wc.imm_data) == (wr_id, imm)


def test_zero_length_send(pair_factory):
    """A SEND with no SGE (sg_list=[]) completes with byte_len 0."""
    a, b = pair_factory(RC)
    b.post_recv(wr_id=1)
    a.qp.post_send(ibv.send_wr(wr_id=2, sg_list=[],
                               opcode=ibv.IBV_WR_SEND_WITH_IMM,
                               imm_data=5, send_flags=ibv.IBV_SEND_SIGNALED))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    assert wc.byte_len == 0 and wc.imm_data == 5


def test_solicited_flag_reaches_receiver(pair_factory):
    """ibv_post_send with IBV_SEND_SOLICITED: accepted, data delivered (the
    event side is in test_verbs_events)."""
    a, b = pair_factory(RC)
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b, send_flags=ibv.IBV_SEND_SIGNALED
                             | ibv.IBV_SEND_SOLICITED))
    check_ok(poll_cq(a.send_cq)[0])
    check_ok(poll_cq(b.recv_cq)[0])


def test_multicast_attach_detach(pair_factory):
    """ibv_attach_mcast/ibv_detach_mcast on a UD QP (a multicast LID: the
    IB port's rule; RoCE ignores it); test_verbs_mcast.py sends."""
    a, b = pair_factory(UD)
    mgid = "ff0e::ffff:e000:0101"
    b.qp.attach_mcast(mgid, 0xC001)
    b.qp.detach_mcast(mgid, 0xC001)
    with pytest.raises(ValueError):
        b.qp.attach_mcast("not a gid", 0)


def test_uc_write_without_ack_semantics(pair_factory):
    """UC RDMA WRITE larger than the path MTU (3 packets) arrives whole."""
    a, b = pair_factory(UC, size=8192)
    data = pattern(3000, 9)
    a.buf[:3000] = data
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, length=3000,
                             remote_off=4096))
    check_ok(poll_cq(a.send_cq)[0])
    wait_for(lambda: bytes(b.buf[4096:7096]) == data, what="UC write data")


def test_rc_large_send_and_read(pair_factory):
    """RC SEND and RDMA READ of 64 KiB (many packets) are byte-exact."""
    a, b = pair_factory(RC, size=1 << 17)
    data = pattern(1 << 16, 11)
    a.buf[:1 << 16] = data
    b.post_recv(wr_id=1, off=1 << 16, length=1 << 16)
    a.qp.post_send(a.send_wr(b, length=1 << 16))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    assert wc.byte_len == 1 << 16
    assert bytes(b.buf[1 << 16:]) == data
    b.buf[:1 << 16] = data[::-1]
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_RDMA_READ, length=1 << 16,
                             off=1 << 16, remote_off=0))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_READ)
    assert bytes(a.buf[1 << 16:]) == data[::-1]
