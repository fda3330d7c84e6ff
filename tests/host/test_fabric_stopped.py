"""A stopped target on the software fabric (issue 15): a process that
owns MRs is stopped with SIGSTOP while a same-host peer works on it.

On a NIC, one-sided operations do not need the target's CPU.  On the
fabric, WRITE and READ into the target's memory go on while it is
stopped: into ``alloc_mr`` memory through UCX's shared mapping, into the
program's own memory (``pd.mr`` over a bytearray) by cross-memory attach.
What does need the target's CPU (a SEND into its receive queue, an atomic
on its own memory) waits: the requester's ACK timer does not run out
while the target is stopped, and the WR completes when it goes on.
``docs/fabric.rst`` ("A stopped target") says the same.

The peers are test_fabric_onesided's peer program.
"""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import time

import pytest

from test_fabric_onesided import SHM, Peer, _ibv, pat, post_ok, wr  # noqa: F401
from test_fabric_onesided import pair  # noqa: F401  (the fixture)


def _state(pid: int) -> str:
    """The states of all threads of process *pid*, one letter if they
    agree (a stop reaches each thread in turn: the first may show "T"
    while the fabric's progress thread still runs)."""
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.add(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue                # the thread ended meanwhile
    return "".join(sorted(states))


def _wait_state(pid: int, want: str, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while _state(pid) != want:
        assert time.monotonic() < end, f"pid {pid} never in state {want}"
        time.sleep(0.01)


@contextlib.contextmanager
def stopped(peer: Peer):
    """*peer* stopped (SIGSTOP) inside the block, going on after it."""
    os.kill(peer.pid, signal.SIGSTOP)
    try:
        _wait_state(peer.pid, "T")
        yield
    finally:
        os.kill(peer.pid, signal.SIGCONT)


# every size by cross-memory attach (the default keeps small WRs on the
# request ring, which is faster while the target runs: they then wait)
ALL_CMA = dict(SHM, RDMA_UCX_CMA_MIN="0")


@pytest.mark.parametrize("pair", [ALL_CMA], indirect=True,
                         ids=["RDMA_UCX_CMA_MIN=0"])
@pytest.mark.parametrize("mr", ["user", "mr"])
def test_one_sided_ops_go_on_while_the_target_is_stopped(pair, mr):
    """5 s of WRITEs, then READs, into a stopped target: every one
    completes with SUCCESS (before: RETRY_EXC_ERR after about 4 s and the
    QP lost), the last value is in its memory when it goes on, and it
    executed nothing."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs[mr]
    sb0 = b("stats")
    with stopped(b):
        w = a("repeat", wr=wr(ibv.IBV_WR_RDMA_WRITE, addr + 128, rkey,
                               off=0, length=64), secs=5)
        assert w["bad"] is None and w["n"] > 100, w
        r = a("repeat", wr=wr(ibv.IBV_WR_RDMA_READ, addr + 128, rkey,
                               off=4096, length=64), secs=0.5)
        assert r["bad"] is None and r["n"] > 10, r
        assert _state(b.pid) == "T"
    # the READs brought back what the last WRITE put there
    assert bytes.fromhex(a("dump", mr="local", off=4096, len=8)["hex"]) \
        == struct.pack("<Q", w["n"])
    assert bytes.fromhex(b("dump", mr=mr, off=128, len=8)["hex"]) \
        == struct.pack("<Q", w["n"])
    assert b("stats")["am_req"] == sb0["am_req"]
    sa = a("stats")
    if mr == "user":
        assert sa["cma_write"] >= w["n"] and sa["cma_read"] >= r["n"]
    else:
        assert sa["fast_write"] >= w["n"] and sa["fast_read"] >= r["n"]
    assert a("state")["state"] == ibv.IBV_QPS_RTS


# an ACK timeout of 8 ms in all (timeout 10, retry_cnt 1): without the
# pause, a WR waiting for a stopped target fails with RETRY_EXC_ERR at once
SHORT = dict(SHM, RDMA_TEST_QP_TIMEOUT="10,1")


@pytest.mark.parametrize("pair", [SHORT], indirect=True, ids=["8ms"])
@pytest.mark.parametrize("what", ["send", "atomic", "small-write"])
def test_what_needs_the_target_waits_for_it(pair, what):
    """A SEND (the target's receive queue), an atomic on the target's own
    memory (atomic with its CPU's accesses) and a WRITE below
    RDMA_UCX_CMA_MIN (the request ring) need the target: they wait while
    it is stopped, 2 s against an ACK timeout of 8 ms, and complete when
    it goes on; the QP stays usable."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    b("fill", mr="user", off=512, hex=struct.pack("<Q", 40).hex())
    assert b("recv", mr="mr", off=0, len=64, wr_id=5) == {"ok": True}
    a("fill", mr="local", off=0, hex=pat(64, 7).hex())
    with stopped(b):
        if what == "send":
            post_ok(a, wr(ibv.IBV_WR_SEND, off=0, length=64, wr_id=1))
        elif what == "small-write":
            # below RDMA_UCX_CMA_MIN (default): the request ring
            post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 1024, rkey, 0, 64,
                          wr_id=1))
        else:
            post_ok(a, wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, addr + 512, rkey,
                          8192, 8, add=2, wr_id=1))
        assert a("quiet", wait=2.0)["n"] == 0       # nothing completes
        assert a("state")["state"] == ibv.IBV_QPS_RTS
    wcs = a("poll", n=1)["wcs"]
    assert wcs[0][:2] == [1, ibv.IBV_WC_SUCCESS], wcs
    if what == "small-write":
        assert b("dump", mr="user", off=1024, len=64)["hex"] == \
            pat(64, 7).hex()
    elif what == "send":
        rw = b("poll", n=1, recv=True)["wcs"]
        assert rw[0][:2] == [5, ibv.IBV_WC_SUCCESS]
        assert b("dump", mr="mr", off=0, len=64)["hex"] == pat(64, 7).hex()
    else:
        assert struct.unpack("<Q", bytes.fromhex(
            b("dump", mr="user", off=512, len=8)["hex"]))[0] == 42
        assert struct.unpack("<Q", bytes.fromhex(
            a("dump", mr="local", off=8192, len=8)["hex"]))[0] == 40
    # and the QP goes on
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64, wr_id=2))
    assert a("poll", n=1)["wcs"][0][:2] == [2, ibv.IBV_WC_SUCCESS]


@pytest.mark.parametrize("pair", [dict(ALL_CMA, RDMA_UCX_DEBUG_CMA_STOP="1")],
                         indirect=True, ids=["initiator-stops"])
def test_dereg_fences_an_initiator_stopped_before_its_copy(pair):
    """The initiator stops after its checks and before its cross-memory
    copy (the test hook RDMA_UCX_DEBUG_CMA_STOP).  dereg_mr waits for it
    (about 1 s), then fences it out and returns; when the initiator goes
    on, its copy is refused by the kernel: no byte lands, and the WR fails
    with REM_ACCESS_ERR as on a NIC whose target found no MR.  Cross-memory
    attach to the target stays closed afterwards."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    a("fill", mr="local", off=0, hex=pat(64, 9).hex())
    a.send({"op": "post", "wrs": [wr(ibv.IBV_WR_RDMA_WRITE, addr + 256,
                                     rkey, 0, 64, wr_id=1)]})
    try:
        _wait_state(a.pid, "T")
        t0 = time.monotonic()
        assert b("dereg", mr="user") == {"ok": True}
        took = time.monotonic() - t0
        sb = b("stats")
        assert sb["cma_fenced"] == 1 and sb["cma_open"] == 0, sb
        assert 0.9 < took < 10, took
        assert b("dump", mr="user", off=256, len=64)["hex"] == "00" * 64
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.read() == {"ok": True}
    wc = a("poll", n=1)["wcs"][0]
    assert wc[:2] == [1, ibv.IBV_WC_REM_ACCESS_ERR], wc
    time.sleep(0.3)
    assert b("dump", mr="user", off=256, len=64)["hex"] == "00" * 64
    assert a("stats")["cma_write"] == 0


@pytest.mark.parametrize("pair", [dict(ALL_CMA, RDMA_UCX_DEBUG_CMA_STOP="1")],
                         indirect=True, ids=["initiator-killed"])
def test_dereg_after_an_initiator_killed_before_its_copy(pair):
    """An initiator killed where the one above stops cannot write: dereg_mr
    returns after its wait without fencing, and cross-memory attach to the
    target stays open."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    a.send({"op": "post", "wrs": [wr(ibv.IBV_WR_RDMA_WRITE, addr + 256,
                                     rkey, 0, 64, wr_id=1)]})
    _wait_state(a.pid, "T")
    os.kill(a.pid, signal.SIGKILL)
    a.p.wait(10)
    assert b("dereg", mr="user") == {"ok": True}
    sb = b("stats")
    assert sb["cma_fenced"] == 0 and sb["cma_open"] == 1, sb
    assert b("dump", mr="user", off=256, len=64)["hex"] == "00" * 64
