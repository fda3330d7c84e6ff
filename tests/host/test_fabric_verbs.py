"""The fabric's own verbs behaviour: what the shared behavioural suite
(tests/verbs, run on the fabric over shared memory and over TCP) cannot
say, because rxe has no counterpart (LID addressing, transfers sent
eagerly and over UCX's rendezvous protocol, unreachable addresses at
modify time) or the fabric deliberately differs in a way the shared suite
cannot observe on rxe at all (a request to a vanished QP without an ACK
timer fails at once).

The module runs over UCX shared memory in this process, and once more over
TCP in a subprocess (test_whole_module_over_tcp) with UCX_TLS=tcp.
"""
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rdma
import rdma.ibverbs as ibv
from fabric_helpers import (Side, check_ok, make_pair, node_stats, pattern,
                            poll_cq, qp_state, to_init, to_rtr)

RC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UD
W, R = ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WR_RDMA_READ


@pytest.fixture(scope="module")
def ctx():
    with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as c:
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


def test_lid_addressing(ctx):
    """RC connected with LIDs only (ah_attr.dlid, no GRH), as on IB: WRITE
    and SEND_WITH_IMM arrive byte-exact."""
    a, b = make_pair(ctx, ctx, RC, use_lid=True)
    try:
        assert a.qp.query().ah_attr.is_global == 0
        assert a.qp.query().ah_attr.dlid == b.lid
        a.buf[:48] = pattern(48, 1)
        a.qp.post_send(a.send_wr(b, W, wr_id=1, length=48, remote_off=256))
        check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 1)
        assert bytes(b.buf[256:304]) == pattern(48, 1)
        b.buf[:32] = pattern(32, 2)
        a.post_recv(wr_id=7, off=1024, length=512)
        b.qp.post_send(b.send_wr(a, ibv.IBV_WR_SEND_WITH_IMM, wr_id=2,
                                 length=32, imm_data=0xDEADBEEF))
        check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_SEND, 2)
        wc = check_ok(poll_cq(a.recv_cq)[0], ibv.IBV_WC_RECV, 7)
        assert wc.imm_data == 0xDEADBEEF and wc.byte_len == 32
        assert bytes(a.buf[1024:1056]) == pattern(32, 2)
    finally:
        a.close()
        b.close()


def test_ud_source_lid(pair):
    """A UD receive reports the sender's LID in wc.slid (rxe, RoCE: 0)."""
    a, b = pair(UD)
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b, length=8))
    check_ok(poll_cq(a.send_cq)[0])
    wc = check_ok(poll_cq(b.recv_cq)[0])
    assert wc.src_qp == a.qpn and wc.slid == a.lid != 0


@pytest.mark.parametrize("n64k", [3, 16], ids=["192KiB", "1MiB"])
def test_large_transfers(pair, n64k):
    """RC SEND, WRITE and READ of 192 KiB (sent eagerly: the fabric's
    rendezvous threshold is 256 KiB) and of 1 MiB (UCX rendezvous: the
    SEND, the READ's response and the WRITE) are byte-exact.  Between two
    QPs of one process a READ or WRITE alone is a memcpy (the one-sided
    fast path, test_fabric_inproc.py): each goes in one post_send behind
    an 8-byte SEND, which it may not overtake (RC order), so that the
    responder executes it."""
    n = n64k << 16
    rndv0 = node_stats()["am_rndv"]
    a, b = pair(RC, size=2 * n)
    data = pattern(1 << 16, 11) * n64k
    a.buf[:n] = data
    b.post_recv(wr_id=1, off=n, length=n)
    a.qp.post_send(a.send_wr(b, length=n))
    check_ok(poll_cq(a.send_cq)[0])
    assert check_ok(poll_cq(b.recv_cq)[0]).byte_len == n
    assert bytes(b.buf[n:]) == data
    b.buf[:n] = data[::-1]
    b.post_recv(wr_id=2, off=n, length=8)
    a.qp.post_send([a.send_wr(b, length=8, wr_id=3),
                    a.send_wr(b, R, length=n, off=n, wr_id=4)])
    wcs = poll_cq(a.send_cq, 2)
    check_ok(wcs[0], ibv.IBV_WC_SEND, 3)
    check_ok(wcs[1], ibv.IBV_WC_RDMA_READ, 4)
    check_ok(poll_cq(b.recv_cq)[0])
    assert bytes(a.buf[n:]) == data[::-1]
    b.post_recv(wr_id=5, off=n, length=8)
    a.qp.post_send([a.send_wr(b, length=8, wr_id=6),
                    a.send_wr(b, W, length=n, remote_off=0, wr_id=7)])
    wcs = poll_cq(a.send_cq, 2)
    check_ok(wcs[0], ibv.IBV_WC_SEND, 6)
    check_ok(wcs[1], ibv.IBV_WC_RDMA_WRITE, 7)
    check_ok(poll_cq(b.recv_cq)[0])
    assert bytes(b.buf[:n]) == data
    assert node_stats()["am_rndv"] - rndv0 == (3 if n > 256 << 10 else 0)


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


def test_destroyed_remote_qp_without_ack_timer(ctx):
    """A request to a QP that was destroyed, from a QP with no ACK timer
    (timeout 0, infinite on a NIC): RETRY_EXC_ERR at once instead of
    waiting forever, then flushes (docs/fabric.rst: dead-peer-at-once;
    with a timer: tests/verbs test_request_to_destroyed_qp_times_out)."""
    a, b = make_pair(ctx, ctx, RC, timeout=0, retry_cnt=1)
    try:
        b.qp.close()
        _fail_then_flush(a, b, a.send_wr(b, W, wr_id=1),
                         ibv.IBV_WC_RETRY_EXC_ERR)
    finally:
        a.close()
        b.close()


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


def test_state_machine(ctx):
    """ibv_modify_qp follows the IBA table: illegal transitions and missing
    attributes -> EINVAL; post_send/post_recv on a RESET QP -> EINVAL; an
    unknown GID at RTR -> EHOSTUNREACH (docs/fabric.rst:
    unreachable-at-rtr)."""
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
