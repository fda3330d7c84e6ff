"""Load the fabric held in the second round of attacks, kept as tests:
every QP the device offers in one process, a million WRITEs with the
resident set flat, and churn of whole contexts with the descriptors and
mappings flat.  (A killed perftest server, a stopped target and a full
/dev/shm have tests of their own: test_c_front.py, test_fabric_stopped.py,
test_fabric_nodefiles.py.)"""
import gc
import os

import pytest

import rdma
import rdma.ibverbs as ibv
from fabric_helpers import check_ok, make_pair, pattern, poll_cq

RC = ibv.IBV_QPT_RC
#: Under AddressSanitizer freed memory sits in its quarantine: the
#: resident set says nothing there (descriptors and mappings still do).
ASAN = bool(os.environ.get("RDMA_TEST_ASAN"))
W = ibv.IBV_WR_RDMA_WRITE


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture
def ctx():
    with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as c:
        yield c


def test_every_qp_of_the_device(ctx):
    """max_qp (16,382) QPs in one process; one more fails with ENOMEM
    naming the limit; after closing them all, as many can be made again
    (their numbers are given back)."""
    n = ctx.query_device().max_qp
    assert n >= 16382
    pd = ctx.pd()
    cq = ctx.cq(16)
    for _ in range(2):
        qps = [pd.qp(RC, 1, cq, 1, cq) for _ in range(n)]
        assert len({q.qp_num for q in qps}) == n
        with pytest.raises(rdma.SysError) as e:
            pd.qp(RC, 1, cq, 1, cq)
        assert e.value.errno == 12 and "too many QPs" in str(e.value)
        for q in qps:
            q.close()
        del qps


def test_a_million_writes_keep_the_resident_set_flat(ctx):
    """1,000,000 RDMA WRITEs of 64 bytes (batches of 50, the last one
    signaled) between two QPs: the resident set after the first 100,000
    and after the million differ by less than 4 MiB, and the data of the
    last WRITE is where it belongs."""
    a, b = make_pair(ctx, ctx, RC, max_send_wr=64, sq_sig_all=0)
    try:
        a.buf[:64] = pattern(64, 5)
        wrs = [a.send_wr(b, W, wr_id=i, length=64, remote_off=64 * (i % 8),
                         send_flags=0 if i < 49 else ibv.IBV_SEND_SIGNALED)
               for i in range(50)]
        batch = ibv.SendBatch(wrs)
        rss = None
        for i in range(20000):
            a.qp.post_send(batch)
            check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 49)
            if i == 1999:
                gc.collect()
                rss = _rss_kib()
        gc.collect()
        grown = _rss_kib() - rss
        assert grown < 4096 or ASAN, \
            f"RSS grew by {grown} KiB over 900,000 WRITEs"
        assert bytes(b.buf[64:128]) == pattern(64, 5)
    finally:
        a.close()
        b.close()


def _round(ep) -> None:
    """One whole life: a Context, two connected RC QPs, an MR on Python
    memory and one allocated by the fabric, a WRITE and a SEND."""
    with rdma.get_verbs(ep) as c:
        a, b = make_pair(c, c, RC)
        a.buf[:32] = pattern(32, 3)
        a.qp.post_send(a.send_wr(b, W, wr_id=1, length=32, remote_off=128))
        check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_RDMA_WRITE, 1)
        b.post_recv(wr_id=2, off=512, length=64)
        a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, wr_id=3, length=32))
        check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 2)
        assert bytes(b.buf[128:160]) == bytes(b.buf[512:544]) == \
            pattern(32, 3)
        m = a.pd.alloc_mr(1 << 16, ibv.IBV_ACCESS_LOCAL_WRITE)
        m.close()
    _ROUNDS[0] += 1


_ROUNDS = [0]


def test_churn_keeps_descriptors_and_mappings_flat():
    """2,000 whole lives of a Context (after 30 to warm up): the process
    has the same number of open descriptors and of mappings afterwards,
    and its resident set grew by less than 8 MiB."""
    ep = rdma.get_end_port(provider="ucx")
    for _ in range(30):
        _round(ep)
    assert _ROUNDS[0] == 30
    gc.collect()
    fds, maps, rss = _fds(), _maps(), _rss_kib()
    for _ in range(2000):
        _round(ep)
    gc.collect()
    assert _fds() == fds, f"descriptors: {fds} -> {_fds()}"
    assert _maps() <= maps + 2, f"mappings: {maps} -> {_maps()}"
    grown = _rss_kib() - rss
    assert grown < 8192 or ASAN, f"RSS grew by {grown} KiB over 2,000 contexts"
