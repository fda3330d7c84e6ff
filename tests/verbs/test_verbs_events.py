"""Completion channels and asynchronous events, on every provider (the
port down/up event needs rxe's netdev: tests/vm/test_verbs_rxe.py)."""
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import (Side, connect_pair, check_ok, differs, poll_cq,
                            qp_state, run_py, wait_for)

pytest_plugins = ["verbs_fixtures"]

RC = ibv.IBV_QPT_RC
HERE = Path(__file__).resolve().parent


@pytest.fixture
def evpair(ctx):
    """(cc, a, b): RC pair; b's receive CQ is bound to completion channel
    cc."""
    cc = ctx.comp_channel()
    a = Side(ctx, RC)
    b = Side(ctx, RC)
    # swap b's receive CQ for one on the channel: build the QP by hand
    b.qp.close()
    b.recv_cq.close()
    b.recv_cq = b.pd.cq(16, cc)
    b.qp = b.pd.qp(RC, 16, b.send_cq, 16, b.recv_cq)
    connect_pair(a, b)
    yield cc, a, b
    a.close()
    b.close()
    cc.close()


def test_comp_channel_fileno(ctx):
    """ibv_create_comp_channel: fileno() is a real, non-blocking-pollable
    fd."""
    with ctx.comp_channel() as cc:
        fd = cc.fileno()
        assert isinstance(fd, int) and fd >= 0
        os.fstat(fd)
        assert select.select([fd], [], [], 0)[0] == []


def test_get_cq_event(evpair):
    """ibv_req_notify_cq + ibv_get_cq_event returns the CQ; ack_events."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    assert cc.get_cq_event(timeout=0.05) is None          # nothing yet
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b))
    cq = cc.get_cq_event(timeout=10)
    assert cq is b.recv_cq
    cq.ack_events(1)
    check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 1)
    # not re-armed: no second event
    b.post_recv(wr_id=2)
    a.qp.post_send(a.send_wr(b))
    check_ok(poll_cq(b.recv_cq)[0])
    assert cc.get_cq_event(timeout=0.1) is None


def test_cqpoller_can_leave_the_channel_alone(evpair):
    """vtools.CQPoller(cq, use_channel=False) polls a CQ that has a
    channel without arming it or taking its events (what the test
    helpers' poll_cq uses): the program's own event is still there."""
    import rdma.vtools
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    b.post_recv(wr_id=1)
    poller = rdma.vtools.CQPoller(b.recv_cq, use_channel=False)
    assert list(poller.iterwc(timeout=0.05)) == [] and poller.timedout
    a.qp.post_send(a.send_wr(b))
    wcs = list(poller.iterwc(count=1, timeout=10))
    assert len(wcs) == 1 and not poller.timedout
    check_ok(wcs[0], ibv.IBV_WC_RECV, 1)
    assert cc.get_cq_event(timeout=10) is b.recv_cq
    b.recv_cq.ack_events(1)


def test_get_cq_event_timeout(evpair):
    """get_cq_event(timeout) returns None after about that long."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    t0 = time.monotonic()
    assert cc.get_cq_event(timeout=0.3) is None
    dt = time.monotonic() - t0
    assert 0.25 <= dt < 3, dt
    assert cc.get_cq_event(timeout=0) is None


def test_solicited_only(evpair):
    """req_notify_cq(solicited_only=True): an unsolicited SEND raises no event,
    a SEND with IBV_SEND_SOLICITED does."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq(solicited_only=True)
    b.post_recv(wr_id=1)
    b.post_recv(wr_id=2)
    a.qp.post_send(a.send_wr(b, wr_id=1))
    check_ok(poll_cq(a.send_cq)[0])
    assert cc.get_cq_event(timeout=0.2) is None
    a.qp.post_send(a.send_wr(b, wr_id=2, send_flags=ibv.IBV_SEND_SIGNALED
                             | ibv.IBV_SEND_SOLICITED))
    assert cc.get_cq_event(timeout=10) is b.recv_cq
    b.recv_cq.ack_events(1)
    assert [w.wr_id for w in poll_cq(b.recv_cq, 2)] == [1, 2]


def test_get_cq_event_releases_gil(evpair):
    """A thread blocked in get_cq_event lets the main thread post the work
    that wakes it."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    b.post_recv(wr_id=1)
    out = []
    t = threading.Thread(
        target=lambda: out.append(cc.get_cq_event(timeout=20)))
    t.start()
    time.sleep(0.05)          # let the thread block (not a readiness wait)
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.2:   # the main thread runs meanwhile
        n += 1
    a.qp.post_send(a.send_wr(b))
    t.join(30)
    assert not t.is_alive()
    assert out == [b.recv_cq]
    b.recv_cq.ack_events(1)
    assert n > 1000


def test_register_poll_and_check_poll(evpair):
    """cc.register_poll(poll) + cc.check_poll(event) -> CQ (acked and
    re-armed), the loop of python-rdma's documentation."""
    cc, a, b = evpair
    p = select.poll()
    cc.register_poll(p)
    b.recv_cq.req_notify_cq()
    got = []
    for i in range(3):
        b.post_recv(wr_id=i)
        a.qp.post_send(a.send_wr(b, wr_id=i))
        deadline = time.monotonic() + 10
        wcs = []
        while not wcs:
            assert time.monotonic() < deadline, "no event"
            for ev in p.poll(1000):
                if cc.check_poll(ev) is b.recv_cq:
                    wcs = b.recv_cq.poll()
        got += [w.wr_id for w in wcs]
    assert got == [0, 1, 2]
    # check_poll on an unrelated fd's event returns None
    r, w = os.pipe()
    try:
        assert cc.check_poll((r, select.POLLIN)) is None
    finally:
        os.close(r)
        os.close(w)


def _send_one(a, b, flags=ibv.IBV_SEND_SIGNALED):
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b, send_flags=flags))
    check_ok(poll_cq(a.send_cq)[0])


@pytest.mark.parametrize("how", ["select", "poll", "epoll"])
def test_comp_channel_fd_readiness(evpair, how):
    """The channel's fd is a real fd: select/poll/epoll see the event, and
    get_cq_event then returns the CQ at once."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    _send_one(a, b)
    fd = cc.fileno()
    if how == "select":
        assert select.select([fd], [], [], 10)[0] == [fd]
    elif how == "poll":
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(10000)
    else:
        with select.epoll() as ep:
            ep.register(fd, select.EPOLLIN)
            assert ep.poll(10)
    assert cc.get_cq_event(timeout=0) is b.recv_cq
    b.recv_cq.ack_events()
    check_ok(poll_cq(b.recv_cq)[0])
    assert cc.get_cq_event(timeout=0.01) is None


def test_comp_channel_asyncio(evpair):
    """loop.add_reader on the channel fd wakes a coroutine."""
    import asyncio
    cc, a, b = evpair

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        loop.add_reader(cc.fileno(), lambda: fut.done() or fut.set_result(1))
        b.recv_cq.req_notify_cq()
        _send_one(a, b)
        try:
            await asyncio.wait_for(fut, 10)
        finally:
            loop.remove_reader(cc.fileno())
        return cc.get_cq_event(timeout=1)
    assert asyncio.run(main()) is b.recv_cq
    b.recv_cq.ack_events()


def test_two_cqs_one_channel(ctx):
    """Two CQs on one channel: the event names the CQ that completed."""
    with ctx.comp_channel() as cc:
        a = Side(ctx, RC)
        b = Side(ctx, RC)
        try:
            cq1, cq2 = b.pd.cq(8, cc), b.pd.cq(8, cc)
            b.qp.close()
            b.qp = b.pd.qp(RC, 8, cq1, 8, cq2)
            connect_pair(a, b)
            cq1.req_notify_cq()
            cq2.req_notify_cq()
            b.post_recv(wr_id=1)
            a.qp.post_send(a.send_wr(b))
            assert cc.get_cq_event(timeout=10) is cq2
            cq2.ack_events(1)
            b.qp.post_send(b.send_wr(a, ibv.IBV_WR_RDMA_WRITE))
            assert cc.get_cq_event(timeout=10) is cq1
            cq1.ack_events(1)
            check_ok(poll_cq(cq1)[0])
            check_ok(poll_cq(cq2)[0])
            b.qp.close()
            cq1.close()
            cq2.close()
        finally:
            a.close()
            b.close()


SCRIPT_PRELUDE = f"""
import os, sys, time
sys.path.insert(0, {str(HERE)!r})
import rdma, rdma.ibverbs as ibv
from verbs_fixtures import Side, connect_pair, open_end_port
ctx = rdma.get_verbs(open_end_port(os.environ["TEST_PROVIDER"]))
cc = ctx.comp_channel()
cq = ctx.cq(8, cc)
cq.req_notify_cq()
"""


def test_get_cq_event_ctrl_c(provider):
    """Ctrl-C (SIGINT) interrupts a get_cq_event() without timeout:
    KeyboardInterrupt, and the process closes everything and exits."""
    code = SCRIPT_PRELUDE + (
        "print('ready', flush=True)\n"
        "try:\n"
        "    cc.get_cq_event()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "cq.close(); cc.close(); ctx.close()\n"
        "print('closed', flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, TEST_PROVIDER=provider))
    try:
        assert p.stdout.readline().strip() == "ready"
        # wait until the process sleeps in the kernel (inside the call)
        def sleeping():
            with open(f"/proc/{p.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "S"
        wait_for(sleeping, what="the child blocked in get_cq_event")
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert "interrupted" in out and "closed" in out, (out, err)
    assert p.returncode == 0, err


def test_unacked_events_acked_on_close(provider):
    """Closing a CQ with an un-acked event does not hang (ibv_destroy_cq
    waits for acks: the binding acks them itself)."""
    code = SCRIPT_PRELUDE + (
        "a = Side(ctx, ibv.IBV_QPT_RC)\n"
        "b = Side(ctx, ibv.IBV_QPT_RC)\n"
        "b.qp.close()\n"
        "b.qp = b.pd.qp(ibv.IBV_QPT_RC, 4, b.send_cq, 4, cq)\n"
        "connect_pair(a, b)\n"
        "b.post_recv(wr_id=1)\n"
        "a.qp.post_send(a.send_wr(b))\n"
        "assert cc.get_cq_event(timeout=20) is cq\n"
        "b.qp.close()\n"
        "cq.close()\n"
        "print('cq closed', flush=True)\n"
        "cq2 = ctx.cq(8, cc); cq2.req_notify_cq()\n"
        "b.qp = b.pd.qp(ibv.IBV_QPT_RC, 4, b.send_cq, 4, cq2)\n"
        "ctx.close()\n"
        "print('ctx closed', flush=True)\n")
    res = run_py(code, env={"TEST_PROVIDER": provider})
    assert "cq closed" in res.stdout and "ctx closed" in res.stdout, res.stderr
    assert res.returncode == 0, res.stderr


def test_closing_cq_wakes_no_one_badly(evpair):
    """get_cq_event after its CQ was closed: no crash (None or a closed CQ
    object that raises ValueError on use)."""
    cc, a, b = evpair
    b.recv_cq.req_notify_cq()
    b.post_recv(wr_id=1)
    a.qp.post_send(a.send_wr(b))
    check_ok(poll_cq(a.send_cq)[0])
    wait_for(lambda: select.select([cc.fileno()], [], [], 0)[0],
             what="event fd")
    b.qp.close()
    b.recv_cq.close()
    r = cc.get_cq_event(timeout=0.2)
    if r is not None:
        with pytest.raises(ValueError):
            r.poll()


# --------------------------------------------------------------------------
# asynchronous events

def test_async_event_timeout(ctx):
    """ibv_get_async_event with a timeout and nothing pending -> None."""
    t0 = time.monotonic()
    assert ctx.get_async_event(timeout=0.2) is None
    assert time.monotonic() - t0 >= 0.15


def test_async_event_is_per_context(end_port, ctx, ctx2):
    """An SRQ event is delivered on the SRQ's own Context only."""
    recv = Side(ctx2, RC, use_srq=True)
    snd = Side(ctx, RC)
    try:
        connect_pair(snd, recv)
        recv.post_recv(wr_id=1)
        recv.post_recv(wr_id=2)
        recv.srq.modify(ibv.srq_attr(srq_limit=2))
        snd.qp.post_send(snd.send_wr(recv))
        check_ok(poll_cq(recv.recv_cq)[0])
        ev = ctx2.get_async_event(timeout=10)
        assert ev is not None and ev.element is recv.srq
        assert ctx.get_async_event(timeout=0.1) is None
    finally:
        snd.close()
        recv.close()


def test_get_async_event_releases_gil(ctx):
    """A thread blocked in get_async_event does not block the main thread."""
    out = []
    t = threading.Thread(
        target=lambda: out.append(ctx.get_async_event(timeout=1.0)))
    t0 = time.monotonic()
    t.start()
    n = 0
    while t.is_alive() and time.monotonic() - t0 < 0.5:
        n += 1
    t.join(10)
    assert out == [None]
    assert n > 1000


def test_close_channel_with_waiter(provider):
    """Closing a CompChannel (and its Context) while another thread waits in
    get_cq_event: no crash; the waiter returns or raises."""
    code = SCRIPT_PRELUDE + (
        "import threading\n"
        "res = []\n"
        "def waiter():\n"
        "    try:\n"
        "        res.append(cc.get_cq_event(timeout=5))\n"
        "    except Exception as e:\n"
        "        res.append(type(e).__name__)\n"
        "t = threading.Thread(target=waiter, daemon=True)\n"
        "t.start(); time.sleep(0.3)\n"
        "try:\n"
        "    cc.close()\n"
        "except Exception as e:\n"
        "    print('close raised', type(e).__name__, e, flush=True)\n"
        "t.join(10)\n"
        "print('waiter', 'blocked' if t.is_alive() else res, flush=True)\n"
        "ctx.close()\n"
        "print('exit', flush=True)\n")
    res = run_py(code, env={"TEST_PROVIDER": provider})
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "exit" in res.stdout, (res.stdout, res.stderr)
    assert "waiter blocked" not in res.stdout, res.stdout


def test_cq_overflow_event(ctx):
    """More completions than a CQ holds: IBV_EVENT_CQ_ERR with
    event.element the CQ object."""
    a = Side(ctx, RC, cqe=4, max_send_wr=64)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        n = a.send_cq.cqe + 8
        a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i)
                        for i in range(n)])
        ev = ctx.get_async_event(timeout=10)
        assert ev is not None, "no async event for the CQ overrun"
        assert ev.event_type == ibv.IBV_EVENT_CQ_ERR, ev
        assert ev.element is a.send_cq
    finally:
        a.close()
        b.close()


def _events_until(ctx, want, timeout=10.0):
    """Collect async events until every (event_type, element) of *want* has
    been seen; return them all."""
    seen = []
    deadline = time.monotonic() + timeout
    while not all(any(e.event_type == t and e.element is el for e in seen)
                  for t, el in want):
        left = deadline - time.monotonic()
        ev = ctx.get_async_event(timeout=max(left, 0)) if left > 0 else None
        if ev is None:
            break
        seen.append(ev)
    return seen


def test_recv_cq_overrun_moves_qp_to_error(ctx, provider):
    """A receive CQ that overflows: IBV_EVENT_CQ_ERR on the CQ, and the QP
    whose completion was lost goes to ERR (rxe's responder: RESPST_ERROR);
    the fabric also raises IBV_EVENT_QP_FATAL on it, as a NIC does."""
    a = Side(ctx, RC, max_send_wr=64)
    b = Side(ctx, RC, cqe=4, max_recv_wr=64)
    try:
        n = b.recv_cq.cqe + 8          # rxe may round the CQ up
        assert n <= 64, b.recv_cq.cqe
        connect_pair(a, b)
        for i in range(n):
            b.post_recv(wr_id=i, off=0, length=64)
        a.qp.post_send([a.send_wr(b, wr_id=i) for i in range(n)])
        want = [(ibv.IBV_EVENT_CQ_ERR, b.recv_cq)]
        if differs(provider, "cq-overrun"):
            want.append((ibv.IBV_EVENT_QP_FATAL, b.qp))
        evs = _events_until(ctx, want)
        got = [(e.event_type, e.element) for e in evs]
        for t, el in want:
            assert any(e.event_type == t and e.element is el for e in evs), \
                (t, got)
        wait_for(lambda: qp_state(b.qp) == ibv.IBV_QPS_ERR, 10,
                 "the QP whose completion was lost to go to ERR")
    finally:
        a.close()
        b.close()


def test_send_cq_overrun_qp_state(ctx, provider):
    """A send CQ that overflows: IBV_EVENT_CQ_ERR; on the fabric the QP
    goes to ERR with IBV_EVENT_QP_FATAL and later WRs flush, as on a NIC
    (rxe, kernel 6.1, drops the completion and leaves the QP in RTS)."""
    a = Side(ctx, RC, cqe=4, max_send_wr=64)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        n = a.send_cq.cqe + 8
        a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i)
                        for i in range(n)])
        want = [(ibv.IBV_EVENT_CQ_ERR, a.send_cq)]
        fabric = differs(provider, "cq-overrun")
        if fabric:
            want.append((ibv.IBV_EVENT_QP_FATAL, a.qp))
        evs = _events_until(ctx, want)
        got = [(e.event_type, e.element) for e in evs]
        for t, el in want:
            assert any(e.event_type == t and e.element is el for e in evs), \
                (t, got)
        if not fabric:
            return
        assert qp_state(a.qp) == ibv.IBV_QPS_ERR
        a.send_cq.poll(64)              # make room: later WRs flush
        a.qp.post_send(a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=99))
        wc = poll_cq(a.send_cq)[-1]
        assert (wc.wr_id, wc.status) == (99, ibv.IBV_WC_WR_FLUSH_ERR)
    finally:
        a.close()
        b.close()
