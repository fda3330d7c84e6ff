"""Verbs behaviour specific to rxe (Soft-RoCE), outside the shared
behavioural suite (tests/verbs): it needs the VM's netdevs.

The provider-independent verbs tests live in tests/verbs and run here on
rxe too (``python -m pytest tests/verbs tests/vm`` inside the VM).
"""
import os
import subprocess


import rdma.ibverbs as ibv
from verbs_fixtures import wait_for


def test_async_event_port_down_up(ctx, end_port):
    """IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE when the netdev under rxe0
    goes down and up; event.element is the port number, event.obj the
    end port (python-rdma), and handle_async_event reads the port again."""
    netdev = os.environ.get("RDMA_TESTVM_NETDEV", "dummy0")
    try:
        subprocess.run(["ip", "link", "set", netdev, "down"], check=True)
        ev = ctx.get_async_event(timeout=10)
        assert ev is not None and ev.event_type == ibv.IBV_EVENT_PORT_ERR, ev
        assert ev.element == 1
        assert ev.obj == end_port and ctx.node == end_port.parent
        before = ev.obj.attr
        assert ctx.handle_async_event(ev) is None
        assert ev.obj.attr is not before
    finally:
        subprocess.run(["ip", "link", "set", netdev, "up"], check=True)
    ev = ctx.get_async_event(timeout=10)
    assert ev is not None and ev.event_type == ibv.IBV_EVENT_PORT_ACTIVE, ev
    assert ev.element == 1 and ev.obj == end_port
    ctx.handle_async_event(ev)
    wait_for(lambda: ctx.query_port().state == ibv.IBV_PORT_ACTIVE,
             what="port ACTIVE again")
