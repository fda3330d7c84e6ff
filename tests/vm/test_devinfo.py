"""ibtool devinfo and the Python queries, field by field against
ibv_devinfo -v."""
import re
import sys

import pytest

import rdma
import rdma.ibverbs as ibv
from conftest import run


def parse_devinfo(text):
    """Parse ibv_devinfo-style output into {device: {"dev": {...},
    "ports": {n: {...}}}}; GID lines land in ports[n]["GID[i]"]."""
    devices, cur, port = {}, None, None
    for line in text.splitlines():
        if not line.strip() or ":" not in line:
            continue                      # blank lines and flag-name lines
        indent = len(line) - len(line.lstrip("\t"))
        key, _, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            cur = devices.setdefault(value, {"dev": {}, "ports": {}})
            port = None
        elif key == "port" and indent == 2:
            port = cur["ports"].setdefault(int(value), {})
        elif port is not None and indent >= 3:
            port[re.sub(r"\s+", "", key)] = value
        elif cur is not None:
            cur["dev"][key] = value
    return devices


@pytest.fixture(scope="module")
def both(device):
    ref = run(["ibv_devinfo", "-v", "-d", device], check=True).stdout
    ours = run([sys.executable, "-m", "rdma", "devinfo", "-v", "-d", device],
               check=True).stdout
    return parse_devinfo(ref)[device], parse_devinfo(ours)[device], ref, ours


# Fields the issue names, plus every other one both tools print.
KEY_DEV = ["node_guid", "sys_image_guid", "max_qp", "max_cqe", "max_mr_size",
           "transport", "vendor_id", "vendor_part_id", "hw_ver",
           "phys_port_cnt", "page_size_cap", "max_qp_wr",
           "device_cap_flags", "max_sge", "max_cq", "max_mr", "max_pd",
           "atomic_cap", "max_srq", "max_pkeys"]
KEY_PORT = ["state", "max_mtu", "active_mtu", "port_lid", "sm_lid",
            "port_lmc", "link_layer", "max_msg_sz", "port_cap_flags",
            "gid_tbl_len", "pkey_tbl_len"]


def test_device_fields_match(both):
    ref, ours, _, _ = both
    for k in KEY_DEV:
        assert k in ref["dev"], f"ibv_devinfo has no {k}"
        assert ours["dev"].get(k) == ref["dev"][k], k
    # Every field printed by both tools agrees.
    common = set(ref["dev"]) & set(ours["dev"])
    assert len(common) >= 30
    diff = {k: (ours["dev"][k], ref["dev"][k]) for k in common
            if ours["dev"][k] != ref["dev"][k]}
    assert not diff


def test_port_fields_and_gid_table_match(both):
    ref, ours, _, _ = both
    assert set(ours["ports"]) == set(ref["ports"]) == {1}
    rp, op = ref["ports"][1], ours["ports"][1]
    for k in KEY_PORT:
        assert op.get(k) == rp[k], k
    common = set(rp) & set(op)
    diff = {k: (op[k], rp[k]) for k in common if op[k] != rp[k]}
    assert not diff
    ref_gids = {k: v for k, v in rp.items() if k.startswith("GID[")}
    our_gids = {k: v for k, v in op.items() if k.startswith("GID[")}
    assert ref_gids, "rxe0 should have GIDs"
    assert our_gids == ref_gids


def test_python_queries_match_ibv_devinfo(both, end_port, ctx):
    """The Python objects (not our printer) against ibv_devinfo's text."""
    ref = both[0]
    a = ctx.query_device()
    assert str(rdma.IBA.GUID(a.node_guid)) == ref["dev"]["node_guid"]
    assert str(end_port.parent.node_guid) == ref["dev"]["node_guid"]
    assert a.max_qp == int(ref["dev"]["max_qp"])
    assert a.max_cqe == int(ref["dev"]["max_cqe"])
    assert a.max_mr_size == int(ref["dev"]["max_mr_size"], 16)
    p = ctx.query_port(1)
    rp = ref["ports"][1]
    assert p.state == int(re.search(r"\((\d+)\)", rp["state"]).group(1))
    assert p.active_mtu == int(re.search(r"\((\d+)\)",
                                         rp["active_mtu"]).group(1))
    assert p.lid == int(rp["port_lid"]) == end_port.lid
    assert rp["link_layer"] == end_port.link_layer == "Ethernet"
    for k, v in rp.items():
        if not k.startswith("GID["):
            continue
        idx = int(k[4:-1])
        text = v.split(",")[0]
        g = ctx.query_gid(1, idx)
        assert g == end_port.gids[idx]
        if "RoCE v2" in v:
            assert str(g) == text
            assert end_port.gid_types[idx] == ibv.IBV_GID_TYPE_ROCE_V2
        else:
            assert bytes(g).hex() == text.replace(":", "")
