"""CQ.poll_into(wcs, min=, timeout=): busy-polling in C until completions
arrive, on every provider under test (rxe in the VM, the fabric on the
host).  The same call is timed against the C loop on rxe in tests/bench
(bench_verbs.py, api "batch")."""
import os
import signal
import threading
import time

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import make_pair

pytest_plugins = ["verbs_fixtures"]


def test_min_waits_for_a_completion_posted_later(ctx):
    a, b = make_pair(ctx, ctx, ibv.IBV_QPT_RC)
    try:
        b.post_recv(wr_id=77)
        a.buf[:8] = b"spinspin"
        wr = a.send_wr(b, ibv.IBV_WR_SEND, wr_id=5)
        timer = threading.Timer(0.2, a.qp.post_send, (wr,))
        arr = ibv.WCArray(4)
        t0 = time.monotonic()
        timer.start()
        n = b.recv_cq.poll_into(arr, min=1, timeout=10)
        elapsed = time.monotonic() - t0
        timer.join()
        assert n == 1 and len(arr) == 1
        assert arr.wr_id(0) == 77 and arr.status(0) == ibv.IBV_WC_SUCCESS
        assert bytes(b.buf[:8]) == b"spinspin"
        assert 0.15 < elapsed < 2     # the poster got the GIL at once
        # the sender's completion is there too, with min=1 and no wait
        assert a.send_cq.poll_into(arr, 4, 1, 10) == 1
        assert arr.wr_id(0) == 5
    finally:
        a.close()
        b.close()


def test_min_collects_across_polls(ctx):
    """min=3 with completions arriving one by one: all three land in the
    array, in order."""
    a, b = make_pair(ctx, ctx, ibv.IBV_QPT_RC)
    try:
        for i in range(3):
            b.post_recv(wr_id=100 + i, off=8 * i, length=8)

        def sender():
            for i in range(3):
                time.sleep(0.05)
                a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, wr_id=i))
        t = threading.Thread(target=sender)
        arr = ibv.WCArray(8)
        t.start()
        n = b.recv_cq.poll_into(arr, min=3, timeout=10)
        t.join()
        assert n == 3
        assert [arr.wr_id(i) for i in range(3)] == [100, 101, 102]
    finally:
        a.close()
        b.close()


def test_timeout_returns_what_arrived(ctx):
    cq = ctx.cq(8)
    arr = ibv.WCArray(4)
    t0 = time.monotonic()
    assert cq.poll_into(arr, min=1, timeout=0.3) == 0
    assert 0.25 < time.monotonic() - t0 < 3
    assert len(arr) == 0
    assert cq.poll_into(arr, min=0, timeout=0) == 0
    cq.close()


def test_other_threads_run_while_spinning(ctx):
    cq = ctx.cq(8)
    count = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1
    t = threading.Thread(target=counter)
    t.start()
    try:
        cq.poll_into(ibv.WCArray(1), min=1, timeout=0.5)
        during = count[0]
    finally:
        stop.set()
        t.join()
    assert during > 1000
    cq.close()


def test_ctrl_c_interrupts_the_spin(ctx):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    cq = ctx.cq(8)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        cq.poll_into(ibv.WCArray(1), min=1, timeout=30)
    timer.join()
    assert time.monotonic() - t0 < 2
    cq.close()


def test_close_from_another_thread_ends_the_spin(ctx):
    cq = ctx.cq(8)
    timer = threading.Timer(0.2, cq.close)
    timer.start()
    with pytest.raises(ValueError, match="closed"):
        cq.poll_into(ibv.WCArray(1), min=1, timeout=30)
    timer.join()


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(min=2), ValueError, "min=2 is more than the 1 entries"),
    (dict(min=-1), ValueError, "min must be >= 0"),
    (dict(timeout=-1), ValueError, "timeout"),
    (dict(timeout="soon"), TypeError, "timeout must be a number"),
    (dict(mn=1), TypeError, "unexpected keyword argument 'mn'"),
])
def test_bad_arguments(ctx, kw, exc, msg):
    cq = ctx.cq(8)
    with pytest.raises(exc, match=msg):
        cq.poll_into(ibv.WCArray(1), **kw)
    with pytest.raises(TypeError, match="WCArray"):
        cq.poll_into([], min=1)
    cq.close()
