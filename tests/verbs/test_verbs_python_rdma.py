"""python-rdma's verbs-side names on every provider: QP capacity
attributes, SRQ.modify(srq_limit, max_wr), async_event.obj,
Context.handle_async_event and ibv.AsyncError, Context.node and the async
fd's register_poll/check_poll.

The events are real: a CQ overrun (IBV_EVENT_CQ_ERR) and an SRQ limit
(IBV_EVENT_SRQ_LIMIT_REACHED) raised by the provider under test.  Port
events (LID/SM/P_Key changes) cannot be caused from here on every
provider; their dispatch to the end port is checked with an event built
from the same struct type, and tests/vm/test_verbs_rxe.py takes rxe0's
port down and up for real.
"""
import errno
import pickle
import select

import pytest

import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import Side, check_ok, connect_pair, poll_cq

pytest_plugins = ["verbs_fixtures"]

RC = ibv.IBV_QPT_RC


def test_qp_capacity_attributes(ctx):
    """QP.max_send_wr, max_recv_wr, max_send_sge, max_recv_sge and
    max_inline_data are what the QP got (at least what was asked), the
    same as qp.cap."""
    s = Side(ctx, RC, max_send_wr=8, max_recv_wr=6, max_send_sge=2,
             max_recv_sge=2, max_inline_data=32)
    try:
        qp, cap = s.qp, s.qp.cap
        for f in ("max_send_wr", "max_recv_wr", "max_send_sge",
                  "max_recv_sge", "max_inline_data"):
            assert getattr(qp, f) == getattr(cap, f), f
        assert qp.max_send_wr >= 8 and qp.max_recv_wr >= 6
        assert qp.max_send_sge >= 2 and qp.max_recv_sge >= 2
        assert qp.max_inline_data >= 32
        with pytest.raises(AttributeError):
            qp.max_send_wr = 1
    finally:
        s.close()


def test_srq_modify_python_rdma_form(ctx):
    """SRQ.modify(srq_limit=None, max_wr=None): None leaves a value; both
    positional; the older modify(ibv.srq_attr) still works."""
    with ctx.pd() as pd:
        srq = pd.srq(max_wr=20, max_sge=1)
        assert srq.ctx is ctx and srq.pd is pd
        depth = srq.query().max_wr
        srq.modify(5)
        assert srq.query().srq_limit == 5
        srq.modify(srq_limit=7)
        assert srq.query().srq_limit == 7
        srq.modify(ibv.srq_attr(srq_limit=4))
        assert srq.query().srq_limit == 4
        srq.modify(ibv.srq_attr(srq_limit=6, max_wr=1), ibv.IBV_SRQ_LIMIT)
        assert srq.query().srq_limit == 6 and srq.query().max_wr == depth
        with pytest.raises(ValueError, match="nothing to change"):
            srq.modify()
        with pytest.raises(ValueError, match="nothing to change"):
            srq.modify(None, None)
        with pytest.raises(TypeError, match="srq_limit"):
            srq.modify("5")
        with pytest.raises(ValueError, match="max_wr"):
            srq.modify(max_wr=-1)
        with pytest.raises(TypeError, match="not both"):
            srq.modify(ibv.srq_attr(srq_limit=1), max_wr=2)
        with pytest.raises(TypeError, match="attr given twice"):
            srq.modify(ibv.srq_attr(srq_limit=1), attr=ibv.srq_attr())
        with pytest.raises(TypeError):
            srq.modify(3, srq_limit=2)
        with pytest.raises(TypeError, match="mask"):
            srq.modify(srq_limit=1, mask=2)
        with pytest.raises(rdma.SysError) as ei:      # limit above the depth
            srq.modify(srq_limit=depth + 100)
        assert ei.value.errno == errno.EINVAL
        srq.close()
        with pytest.raises(ValueError):
            srq.modify(srq_limit=1)


def test_srq_modify_max_wr(ctx):
    """SRQ.modify(None, max_wr) grows the SRQ and keeps its limit (rxe
    resizes SRQs, and so does the software fabric)."""
    with ctx.pd() as pd:
        srq = pd.srq(max_wr=20, max_sge=1)
        depth = srq.query().max_wr
        srq.modify(srq_limit=6)
        srq.modify(None, depth + 16)
        a = srq.query()
        assert a.max_wr >= depth + 16 and a.srq_limit == 6


def _cq_overrun(ctx):
    a = Side(ctx, RC, cqe=4, max_send_wr=64)
    b = Side(ctx, RC)
    connect_pair(a, b)
    n = a.send_cq.cqe + 8
    a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=i)
                    for i in range(n)])
    return a, b


def test_async_error_from_a_cq_overrun(ctx):
    """A real IBV_EVENT_CQ_ERR: event.obj is the CQ (like event.element);
    handle_async_event raises ibv.AsyncError naming the event, with the
    event, its type and object; python-rdma's (type, obj) pair works too;
    the async fd is seen by poll through register_poll/check_poll."""
    poll = select.poll()
    ctx.register_poll(poll)
    a, b = _cq_overrun(ctx)
    try:
        ready = poll.poll(10000)
        assert ready and any(ctx.check_poll(p) for p in ready)
        assert not ctx.check_poll((ready[0][0] + 1000, select.POLLIN))
        ev = ctx.get_async_event(timeout=10)
        assert ev is not None and ev.event_type == ibv.IBV_EVENT_CQ_ERR
        assert ev.obj is a.send_cq and ev.element is a.send_cq
        with pytest.raises(ibv.AsyncError) as ei:
            ctx.handle_async_event(ev)
        e = ei.value
        assert isinstance(e, rdma.RDMAError)
        assert e.event is ev and e.obj is a.send_cq
        assert e.event_type == ibv.IBV_EVENT_CQ_ERR
        assert "IBV_EVENT_CQ_ERR" in str(e)
        with pytest.raises(ibv.AsyncError, match="IBV_EVENT_CQ_ERR") as ei:
            ctx.handle_async_event((ev.event_type, ev.obj))
        assert ei.value.obj is a.send_cq
        back = pickle.loads(pickle.dumps(ei.value))
        assert back.event_type == ibv.IBV_EVENT_CQ_ERR
    finally:
        a.close()
        b.close()


def test_srq_limit_event_is_not_an_error(ctx):
    """IBV_EVENT_SRQ_LIMIT_REACHED: obj is the SRQ; handle_async_event
    lets it pass (python-rdma raises only for the breaking events)."""
    recv = Side(ctx, RC, use_srq=True)
    snd = Side(ctx, RC)
    try:
        connect_pair(snd, recv)
        for i in range(3):
            recv.post_recv(wr_id=i, off=64 * i, length=64)
        recv.srq.modify(srq_limit=3)
        snd.qp.post_send(snd.send_wr(recv))
        check_ok(poll_cq(recv.recv_cq)[0])
        ev = ctx.get_async_event(timeout=10)
        assert ev is not None
        assert ev.event_type == ibv.IBV_EVENT_SRQ_LIMIT_REACHED
        assert ev.obj is recv.srq is ev.element
        assert ctx.handle_async_event(ev) is None
    finally:
        snd.close()
        recv.close()


def test_context_node_and_port_event_dispatch(ctx, end_port):
    """ctx.node is the end port's Device; a port event given to
    handle_async_event reaches the end port's python-rdma hooks (the port
    is read again: a new snapshot); other events are ignored."""
    assert ctx.node == end_port.parent and ctx.end_port == end_port
    ep = rdma.get_end_port(str(end_port), provider=end_port.provider)
    for ty in (ibv.IBV_EVENT_LID_CHANGE, ibv.IBV_EVENT_SM_CHANGE,
               ibv.IBV_EVENT_PKEY_CHANGE, ibv.IBV_EVENT_PORT_ACTIVE):
        before = ep.attr
        ev = ibv.async_event(event_type=ty, obj=ep, element=ep.port_id)
        assert ctx.handle_async_event(ev) is None
        assert ep.attr is not before and ep.lid == before.lid
    assert ctx.handle_async_event((ibv.IBV_EVENT_COMM_EST, None)) is None
    with pytest.raises(ibv.AsyncError, match="IBV_EVENT_DEVICE_FATAL"):
        ctx.handle_async_event((ibv.IBV_EVENT_DEVICE_FATAL, ctx.node))
    with pytest.raises(TypeError):
        ctx.handle_async_event(5)
    with pytest.raises(TypeError):
        ctx.handle_async_event(("x", None))


def test_context_from_an_end_port_or_device(end_port):
    """python-rdma's ibv.Context(end_port) and ibv.Context(device): the
    device's name and provider are used, end_port/node are set."""
    with ibv.Context(end_port) as c:
        assert c.end_port is end_port and c.node == end_port.parent
        assert c.name == end_port.parent.name
        assert c.provider == end_port.provider
        assert c.query_port().state == end_port.state
    with ibv.Context(end_port.parent) as c:
        assert c.end_port is None and c.node is None
        assert c.query_device().phys_port_cnt >= 1
    with pytest.raises(TypeError, match="device name"):
        ibv.Context(42)

    class UmadOnly:                 # what a simulated CA looks like
        name = "ibsim9"
        provider = "umad"
        end_ports = ()
    with pytest.raises(ValueError, match="no verbs device"):
        ibv.Context(UmadOnly())
