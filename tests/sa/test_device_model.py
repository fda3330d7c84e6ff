"""The one device model (rdma.get_devices/get_end_port) on ibsim.

Inside a process that has rdma's ibsim shim preloaded, libibumad
reports the simulated CA and libibverbs reports nothing: the device model
must list that CA (provider "umad") before the software fabric, prefer its
port, and report what infiniband-diags' ``ibstat`` reports on the same
node field by field.
"""
import ipaddress
import json
import sys

import pytest

from fabric import HERE

STATES = {"Down": 1, "Initializing": 2, "Armed": 3, "Active": 4}
PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3,
        "PortConfigurationTraining": 4, "LinkUp": 5, "LinkErrorRecovery": 6,
        "Phy Test": 7}


def guid_of(gid):
    return int(ipaddress.IPv6Address(gid)) & (1 << 64) - 1


def prefix_of(gid):
    return int(ipaddress.IPv6Address(gid)) >> 64


def probe(fabric, node, what, *args, env=None):
    argv = [sys.executable, str(HERE / "devmodel_probe.py"), what] + \
        [json.dumps(a) for a in args]
    if env:
        argv = ["env"] + [f"{k}={v}" for k, v in env.items()] + argv
    res = fabric.run(argv, node, timeout=30)
    return json.loads(res.stdout)


def ibstat(fabric, node):
    """ibstat's output as {ca: {"ca": {...}, "ports": {n: {...}}}}."""
    cas, ca, port = {}, None, None
    for line in fabric.run(["ibstat"], node).stdout.splitlines():
        if line.startswith("CA '"):
            ca = cas.setdefault(line[4:-1], {"ca": {}, "ports": {}})
            port = None
            continue
        key, _, value = line.strip().partition(":")
        if key.startswith("Port ") and not value.strip():
            port = ca["ports"].setdefault(int(key.split()[1]), {})
        elif port is not None:
            port[key] = value.strip()
        elif ca is not None:
            ca["ca"][key] = value.strip()
    return cas


@pytest.mark.parametrize("topology,node", [
    ("2sw4hca", "Hca1"), ("2sw4hca", "Hca2"), ("2sw4hca", "Hca4"),
    ("2sw2hca2port", "Hca2"), ("1sw4hca", "Hca3")])
def test_devices_match_ibstat(fabrics, topology, node):
    """get_devices() on a shimmed node: the simulated CA first (umad only,
    no verbs), the software fabric last; node and port fields equal
    ibstat's on the same node (the SM's node too: its capability mask
    has IsSM)."""
    fabric = fabrics(topology)
    ref = ibstat(fabric, node)
    ours = probe(fabric, node, "devices")
    assert [d["name"] for d in ours][-1] == "ucx0"
    sim = [d for d in ours if d["provider"] == "umad"]
    assert [d["name"] for d in sim] == list(ref)
    for d in sim:
        r = ref[d["name"]]
        assert d["has_umad"] and not d["has_verbs"]
        assert d["node_guid"] == int(r["ca"]["Node GUID"], 16)
        assert d["sys_image_guid"] == int(r["ca"]["System image GUID"], 16)
        assert d["fw_ver"] == r["ca"]["Firmware version"]
        assert d["hw_ver"] == r["ca"]["Hardware version"]
        assert d["hca_type"] == r["ca"]["CA type"]
        assert d["phys_port_cnt"] == int(r["ca"]["Number of ports"])
        assert [p["port_id"] for p in d["ports"]] == sorted(r["ports"])
        for p in d["ports"]:
            rp = r["ports"][p["port_id"]]
            assert p["state"] == STATES[rp["State"]]
            assert p["phys_state"] == PHYS[rp["Physical state"]]
            assert p["lid"] == int(rp["Base lid"])
            assert p["lmc"] == int(rp["LMC"])
            assert p["sm_lid"] == int(rp["SM lid"])
            assert p["cap_mask"] == int(rp["Capability mask"], 16)
            assert p["port_guid"] == int(rp["Port GUID"], 16)
            assert p["rate"] == f"{rp['Rate']} Gb/sec"
            assert p["rate_gbps"] == float(rp["Rate"])
            # The shim writes ports/N/link_layer as the kernel does
            # (Debian's shim had none: libibumad then says "IB").
            assert rp["Link layer"] == p["link_layer"] == "InfiniBand"
            assert p["default_gid"] == p["gids"][0]
            assert guid_of(p["default_gid"]) == p["port_guid"]
            assert prefix_of(p["default_gid"]) == 0xFE80 << 48
            assert p["pkeys"][0] == 0xFFFF


def test_default_end_port_is_the_simulated_ca(fabric):
    """get_end_port() prefers the simulated CA's ACTIVE port over ucx0;
    every python-rdma way of naming it finds it; get_umad and get_gmp_mad
    open it, get_verbs says plainly that it has no verbs."""
    res = probe(fabric, "Hca3", "lookups")
    ref = ibstat(fabric, "Hca3")
    ca = next(iter(ref))
    for k in ("none", "device", "device/port", "port_guid", "port_guid_str",
              "gid", "gid_str", "node_guid", "umad_get_end_port", "first",
              "by_name", "by_guid"):
        assert res[k] == f"{ca}/1", k
    assert res["get_device"] == res["device_by_guid"] == \
        res["device_by_guid_str"] == ca
    assert res["same_function"] is True
    assert all(res["errors"].values()), res["errors"]
    assert "no verbs device" in res["verbs"]
    assert res["umad"] == f"<rdma.umad.UMAD {ca}/1>"
    assert res["gmp"] == "UMAD"


def test_software_fabric_is_brought_up_only_when_reached(fabric):
    """With a simulated CA present, get_end_port() and devices.first() do
    not load UCX; listing every device does (ucx0 last)."""
    res = probe(fabric, "Hca2", "lazy_fabric")
    ca = next(iter(ibstat(fabric, "Hca2")))
    assert res["import"] is False
    assert res["get_end_port"] == [f"{ca}/1", False]
    assert res["first"] == [ca, False]
    assert res["all"] == [[ca, "ucx0"], True]


def test_provider_selection_in_a_shimmed_process(fabric):
    """provider= and RDMA_PROVIDER still select: "ucx" only the fabric,
    "umad" only the simulated CA, "verbs" nothing (libibverbs sees no
    device here)."""
    assert [d["name"] for d in probe(fabric, "Hca2", "devices", "ucx")] \
        == ["ucx0"]
    assert [d["provider"] for d in probe(fabric, "Hca2", "devices",
                                         "umad")] == ["umad"]
    assert probe(fabric, "Hca2", "devices", "verbs") == []
    env = probe(fabric, "Hca2", "devices", env={"RDMA_PROVIDER": "ucx"})
    assert [d["name"] for d in env] == ["ucx0"]


def test_without_sm_the_simulated_port_is_still_preferred(fabrics):
    """No SM: the simulated port is INIT (ibstat: Initializing) and the
    software fabric's ACTIVE, yet get_end_port() returns the simulated
    port, as python-rdma returns the first port of the first device."""
    f = fabrics("1sw2hca", sm=False)
    ref = ibstat(f, "Hca1")
    ca = next(iter(ref))
    assert ref[ca]["ports"][1]["State"] == "Initializing"
    devs = probe(f, "Hca1", "devices")
    port = devs[0]["ports"][0]
    assert port["state"] == 2 and port["sm_lid"] == 0
    assert port["phys_state"] == PHYS[ref[ca]["ports"][1]["Physical state"]]
    code = ("import rdma; print(rdma.get_end_port(), "
            "rdma.get_end_port(provider='ucx'))")
    out = f.run([sys.executable, "-c", code], "Hca1").stdout.split()
    assert out == [f"{ca}/1", "ucx0/1"]


def test_seed_ud_example_resolves_through_the_sa(fabric):
    """The seed's UD example on ibsim: end_port = rdma.get_end_port(),
    rdma.get_umad(end_port), resolve_path() to another HCA's GID; the path
    has the LIDs ibstat reports on both nodes."""
    src = ibstat(fabric, "Hca2")
    dst = ibstat(fabric, "Hca4")
    sport = next(iter(src.values()))["ports"][1]
    dport = next(iter(dst.values()))["ports"][1]
    dgid = str(ipaddress.IPv6Address(
        (0xFE80 << 112) | int(dport["Port GUID"], 16)))
    res = probe(fabric, "Hca2", "seed_ud", dgid)
    assert res["end_port"] == f"{next(iter(src))}/1"
    assert res["DLID"] == int(dport["Base lid"])
    assert res["SLID"] == int(sport["Base lid"])
    assert res["dqpn"] == 1
    assert guid_of(res["DGID"]) == int(dport["Port GUID"], 16)
    assert guid_of(res["SGID"]) == int(sport["Port GUID"], 16)
