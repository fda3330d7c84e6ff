"""The one device model on the host: the software fabric (ucx0) is the
only device here, and libibumad finds no CA (the ibsim side is in
tests/sa/test_device_model.py)."""
import pickle

import pytest

import rdma
import rdma.devices
import rdma.umad
from rdma.devices import DemandList
from rdma.IBA import GID, GUID
from host_helpers import run_py


@pytest.fixture(scope="module")
def ep():
    try:
        return rdma.get_end_port(provider="ucx")
    except rdma.RDMAError as e:
        pytest.skip(f"no software fabric: {e}")


def test_demand_list_is_python_rdmas_collection():
    made = []

    def conv(k):
        made.append(k)
        return f"v{k}"
    dl = DemandList(["a", "b", "c"], conv, positional=True)
    assert made == []                         # values are made on demand
    assert dl["b"] == "vb" and made == ["b"]
    assert dl.first() == "va" and dl[0] == "va" and dl[-1] == "vc"
    assert list(dl) == ["va", "vb", "vc"] == dl.values()
    assert list(dl.iterkeys()) == ["a", "b", "c"] == dl.keys()
    assert dl.index("vc") == "c" and len(dl) == 3
    assert "a" in dl and "vb" in dl and "x" not in dl
    assert dl == ["va", "vb", "vc"] and repr(dl) == "['va', 'vb', 'vc']"
    with pytest.raises(KeyError):
        dl["x"]
    with pytest.raises(ValueError):
        dl.index("nope")
    assert dl.get("x") is None
    dl.clear()
    assert dl["a"] == "va" and made.count("a") == 2
    empty = DemandList([], conv)
    assert empty == [] and not empty and repr(empty) == "[]"
    with pytest.raises(IndexError):
        empty.first()


def test_devices_collection_and_lookups(ep):
    devs = rdma.get_devices()
    dev = ep.parent
    assert isinstance(devs, DemandList)
    assert devs[dev.name] == dev and devs[dev.node_guid] == dev
    assert devs.first() == devs[0]
    assert list(devs)[-1].name == "ucx0"      # the software fabric is last
    assert dev.end_ports[1] == ep == dev.end_ports.first()
    assert dev.end_ports[ep.port_guid] == ep
    assert isinstance(dev, rdma.RDMADevice) and rdma.Device is rdma.RDMADevice
    assert rdma.get_devices(True) == devs     # python-rdma: (refresh)


def test_end_port_and_device_attributes(ep):
    """python-rdma's attribute names, with values from the port."""
    a = ep.attr
    assert (ep.lid, ep.lmc, ep.sm_lid, ep.sm_sl, ep.state, ep.phys_state) \
        == (a.lid, a.lmc, a.sm_lid, a.sm_sl, a.state, a.phys_state)
    assert ep.state == 4 and ep.phys_state == 5
    assert ep.rate == "2.5 Gb/sec (1X SDR)"   # active_width 1, speed SDR
    assert ep.rate_gbps == 2.5
    assert ep.default_gid == ep.gids[0]
    assert ep.port_guid == GUID(ep.default_gid.guid)
    assert ep.pkeys[0] == 0xFFFF and ep.pkey_index(0xFFFF) == 0
    assert ep.cap_mask == a.port_cap_flags and not ep.has_umad
    d = ep.parent
    assert d.fw_ver == d.attr.fw_ver and d.phys_port_cnt == 1
    assert d.sys_image_guid == GUID(d.attr.sys_image_guid) == d.system_guid
    assert ep.gid_prefix == ep.default_gid.prefix
    assert d.has_verbs and not d.has_umad and d.node_desc is None
    assert str(ep) == "ucx0/1"


def test_get_end_port_forms(ep):
    """Every form python-rdma accepts finds the same port."""
    for name in (None, "ucx0", "ucx0/1", ep.port_guid, str(ep.port_guid),
                 ep.default_gid, str(ep.default_gid), ep.parent.node_guid,
                 f"0x{int(ep.port_guid):x}"):
        assert rdma.get_end_port(name, provider="ucx") == ep, name
    for bad in ("xxx", "ucx0/99", GID("::"), GUID(0), "0000:0000:0000:0000",
                GID("fe80::dead:beef")):
        with pytest.raises(rdma.RDMAError):
            rdma.get_end_port(bad, provider="ucx")
    with pytest.raises(ValueError, match="port number"):
        rdma.get_end_port("ucx0/x", provider="ucx")
    with pytest.raises(TypeError):
        rdma.get_end_port(3.5)
    assert rdma.umad.get_end_port is rdma.get_end_port
    assert rdma.umad.UMADEndPort is rdma.EndPort


def test_get_device(ep):
    d = ep.parent
    assert rdma.get_device(provider="ucx") == d
    assert rdma.get_device("ucx0") == d
    assert rdma.get_device(d.node_guid) == d
    assert rdma.get_device(str(d.node_guid)) == d
    with pytest.raises(rdma.RDMAError, match="nosuch0"):
        rdma.get_device("nosuch0")
    with pytest.raises(rdma.RDMAError):
        rdma.get_device(GUID(1))


def test_one_end_port_for_verbs_and_a_clear_umad_error(ep):
    with rdma.get_verbs(ep) as ctx:
        assert ctx.end_port == ep
    with rdma.get_verbs(ep.parent) as ctx:
        assert ctx.end_port == ep
    with pytest.raises(rdma.RDMAError, match="software fabric"):
        rdma.get_umad(ep)
    with pytest.raises(rdma.RDMAError, match="software fabric"):
        rdma.get_gmp_mad(ep)
    assert pickle.loads(pickle.dumps(ep)) == ep


def test_mad_errors_at_top_level():
    import rdma.IBA
    assert rdma.MADError is rdma.IBA.MADError
    assert issubclass(rdma.MADTimeoutError, rdma.MADError)
    assert issubclass(rdma.MADError, rdma.RDMAError)


def test_missing_libibumad_is_skipped_in_auto_mode():
    """Without libibumad the verbs and fabric devices are still listed;
    asking for umad devices names the missing package."""
    code = ("import rdma\n"
            "print([d.name for d in rdma.get_devices()])\n"
            "try:\n"
            "    rdma.get_devices('umad')\n"
            "except rdma.SysError as e:\n"
            "    print('ERR', e.func, e)\n")
    res = run_py(code,
                 env={"RDMA_UMAD_LIBRARY": "/nonexistent/libibumad.so.3"})
    assert res.returncode == 0, res.stderr
    assert "'ucx0'" in res.stdout
    assert "ERR dlopen" in res.stdout and "libibumad3" in res.stdout


def test_unknown_provider_lists_the_choices():
    with pytest.raises(ValueError, match="verbs, umad, ucx, auto"):
        rdma.get_devices("nope")
    with pytest.raises(TypeError, match="provider must be a str"):
        rdma.get_end_port(provider=5)
    with pytest.raises(TypeError):
        rdma.get_device(3.0)


def test_gmp_mad_through_verbs_closes_the_context_it_opened(ep):
    """get_gmp_mad on a port without umad, given a path, opens a Context
    for its rdma.vmad.VMAD: closing the VMAD closes that Context too
    (python-rdma's behaviour; a misspelt flag once leaked it)."""
    import rdma.path
    path = rdma.path.IBPath(ep, DLID=ep.lid or 1, dqpn=1,
                            qkey=0x80010000)
    g = rdma.get_gmp_mad(ep, path=path)
    ctx = g._ctx
    assert ctx is not None and not ctx.closed
    g.close()
    assert ctx.closed
