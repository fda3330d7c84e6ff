"""Devices, end ports and Context queries on a real rxe device."""
import errno
import gc
import os
import warnings

import pytest

import rdma
import rdma.ibverbs as ibv
from rdma.IBA import GID
from conftest import TWO_HOST


def test_get_devices_lists_rxe(device):
    names = [d.name for d in rdma.get_devices()]
    assert device in names
    if TWO_HOST:
        assert {"rxe1", "rxe2"} <= set(names)
    d = next(d for d in rdma.get_devices() if d.name == device)
    assert d.provider == "verbs" and d.node_guid != 0
    assert [p.port_id for p in d.end_ports] == [1]


def test_get_end_port_forms(device, end_port):
    first = rdma.get_end_port()
    assert first.state == ibv.IBV_PORT_ACTIVE
    assert rdma.get_end_port(device) == end_port
    assert rdma.get_end_port(f"{device}/1") == end_port
    assert str(end_port) == f"{device}/1" and end_port.port_id == 1
    gid = end_port.gids[int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))]
    assert rdma.get_end_port(gid) == end_port
    assert rdma.get_end_port(str(gid)) == end_port
    assert isinstance(end_port.default_gid, GID)
    assert end_port.default_gid == end_port.gids[0]
    assert end_port.lid == 0                  # RoCE has no LIDs
    assert rdma.get_end_port(device, provider="verbs") == end_port


def test_get_end_port_errors(device):
    with pytest.raises(rdma.RDMAError, match="no port 2"):
        rdma.get_end_port(f"{device}/2")
    with pytest.raises(rdma.RDMAError, match="no RDMA end port 'nosuch0'"):
        rdma.get_end_port("nosuch0")
    with pytest.raises(ValueError, match="invalid port number"):
        rdma.get_end_port(f"{device}/x")
    with pytest.raises(rdma.RDMAError, match="no RDMA end port has GID"):
        rdma.get_end_port(GID("fe80::dead:beef"))


def test_gid_table_ipv4_mapped_roce_v2(end_port):
    idx = int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))
    ip = os.environ.get("RDMA_TESTVM_IP", "192.0.2.1")
    assert str(end_port.gids[idx]) == f"::ffff:{ip}"
    assert end_port.gid_types[idx] == ibv.IBV_GID_TYPE_ROCE_V2


def test_context_queries(ctx, end_port):
    a = ctx.query_device()
    assert a.phys_port_cnt == 1 and a.max_qp > 0
    assert ctx.query_port() == ctx.query_port(1) == end_port.refresh().attr
    assert ctx.query_pkey(1, 0) == 0xFFFF
    e = ctx.query_gid_ex(1, 1)
    assert e.gid_index == 1 and e.ndev_ifindex > 0
    assert ctx.end_port is end_port and ctx.name == end_port.parent.name
    assert ctx.provider == "verbs"


def test_query_errors(ctx):
    with pytest.raises(rdma.SysError) as ei:
        ctx.query_port(2)
    assert ei.value.func == "ibv_query_port" and ei.value.errno == errno.EINVAL
    with pytest.raises(rdma.SysError) as ei:
        ctx.query_gid(1, 100000)
    assert ei.value.func.startswith("ibv_query_gid")
    with pytest.raises(ValueError, match="port_id"):
        ctx.query_port(0)
    with pytest.raises(ValueError, match="port_id"):
        ctx.query_port(256)
    with pytest.raises(TypeError, match="port_id"):
        ctx.query_port("1")
    with pytest.raises(ValueError, match="index"):
        ctx.query_gid(1, -1)


def test_close_is_idempotent_and_use_after_close_raises(end_port):
    ctx = rdma.get_verbs(end_port)
    assert not ctx.closed
    ctx.close()
    ctx.close()
    assert ctx.closed and "closed" in repr(ctx)
    for call in (ctx.query_device, lambda: ctx.query_port(1),
                 lambda: ctx.query_gid(1, 0), lambda: ctx.query_pkey(1, 0)):
        with pytest.raises(ValueError, match="closed Context"):
            call()
    with pytest.raises(ValueError, match="closed"):
        with ctx:
            pass


def test_context_manager_closes(end_port):
    with rdma.get_verbs(end_port) as ctx:
        ctx.query_device()
    assert ctx.closed


def test_forgotten_context_warns_and_closes(end_port):
    ctx = rdma.get_verbs(end_port)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del ctx
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) and "unclosed" in
               str(x.message) for x in w)


def test_many_contexts(end_port):
    ctxs = [rdma.get_verbs(end_port) for _ in range(20)]
    for c in ctxs:
        assert c.query_port(1).state == ibv.IBV_PORT_ACTIVE
        c.close()


def test_get_verbs_forms(device):
    with rdma.get_verbs() as c:
        assert c.query_port().state == ibv.IBV_PORT_ACTIVE
    with rdma.get_verbs(device) as c:
        assert c.name == device
    d = next(d for d in rdma.get_devices() if d.name == device)
    with rdma.get_verbs(d) as c:
        assert c.end_port == d.end_ports.first()
    with pytest.raises(TypeError):
        rdma.get_verbs(42)


def test_demo_runs():
    from conftest import run
    import sys
    res = run([sys.executable, "-m", "rdma", "demo"])
    assert res.returncode == 0, res.stderr
    assert "rxe0" in res.stdout and "ACTIVE" in res.stdout


def test_rxe_is_one_device_for_verbs_and_umad(device, end_port):
    """With ib_umad loaded, libibumad reports rxe0 too: it is the same
    Device (provider verbs, has_umad), and one end port opens both a verbs
    Context and a UMAD; ibstat's port GUID and state agree."""
    from conftest import run
    d = rdma.get_devices()[device]
    assert d.provider == "verbs" and d.has_verbs and d.has_umad
    assert [x.name for x in rdma.get_devices("umad")].count(device) == 1
    assert rdma.get_devices("umad")[device] == d
    ep = d.end_ports[1]
    assert ep == end_port and ep.has_umad
    with rdma.get_verbs(ep) as ctx, rdma.get_umad(ep) as umad:
        assert ctx.end_port == ep and umad.end_port == ep
    out = run(["ibstat", device, "1"], check=True).stdout
    assert f"Port GUID: 0x{int(ep.port_guid):016x}" in out
    assert "State: Active" in out and ep.state == ibv.IBV_PORT_ACTIVE
    assert rdma.get_devices()[-1].name == "ucx0" or \
        "ucx" not in rdma.devices.select_providers()
