"""rdma's ibsim client shim (csrc/umad2sim/): whole RMPP answers and
whole MADs, checked with infiniband-diags on a 34-node fabric.

Every SA table below spans many RMPP segments (34 NodeRecords of 112
bytes, 82 PortInfoRecords, 1156 PathRecords); each record is compared
field by field with what ``smpquery`` reads from the node itself.  Debian's
shim delivers only the first segment and loses bytes 224-255 of every
MAD (the second NodeRecord of the first segment lies across them);
:func:`test_debian_shim_cuts_the_same_table` shows that on the same
fabric, so these tests can tell the two apart.
"""
from pathlib import Path

import pytest

import diags
import saquery_out as sq
from rdma.IBA import GID
from fabric import OUR_SHIM, SHIM, STOCK_SHIM, Fabric, hca_nodes

TOPOLOGY = Path(__file__).resolve().parent / "topologies" / "2sw32hca"
NODE_INFO = {  # saquery NodeRecord key -> smpquery nodeinfo key
    "base_version": "BaseVers", "class_version": "ClassVers",
    "num_ports": "NumPorts", "sys_guid": "SystemGuid", "node_guid": "Guid",
    "port_guid": "PortGuid", "partition_cap": "PartCap",
    "device_id": "DevId", "revision": "Revision", "port_num": "LocalPort",
    "vendor_id": "VendorId",
}
#: PortInfo fields that are not state: the M_Key is never displayed.
NOT_COMPARED = {"Mkey"}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is missing")
    f = Fabric(TOPOLOGY, tmp_path_factory.mktemp("fabric-2sw32hca"))
    try:
        f.start()
        yield f
    finally:
        f.close()


def run(fabric, *argv, node="Hca2"):
    return fabric.run(list(argv), node).stdout


def test_our_shim_is_used():
    """setup.py built rdma's shim and the sa tier preloads it (unless
    ``$RDMA_UMAD2SIM`` names another build to compare)."""
    import os
    if os.environ.get("RDMA_UMAD2SIM"):
        pytest.skip(f"$RDMA_UMAD2SIM chose {SHIM}")
    assert SHIM == OUR_SHIM and SHIM.exists(), \
        f"the sa tier runs on {SHIM}, not on {OUR_SHIM}"


def test_node_record_table_is_whole(big):
    """``saquery -N``: one NodeRecord per node (34, ~19 RMPP segments),
    each equal to ``smpquery nodeinfo``/``nodedesc`` of its LID."""
    recs = sq.parse(run(big, "saquery", "-N"))
    names = sorted(r["NodeDescription"] for r in recs)
    assert names == sorted(hca_nodes(TOPOLOGY) + ["Switch1", "Switch2"])
    assert len({r["lid"] for r in recs}) == 34
    for r in recs:
        lid = r["lid"]
        info = diags.fields(run(big, "smpquery", "nodeinfo", lid))
        desc = diags.fields(run(big, "smpquery", "nodedesc", lid))
        assert desc["Node Description"] == r["NodeDescription"]
        assert info["NodeType"] == r["node_type"]
        for theirs, mine in NODE_INFO.items():
            assert diags.as_int(info[mine]) == diags.as_int(r[theirs]), \
                (lid, theirs)


def test_port_info_record_table_is_whole(big):
    """``saquery PIR``: every port of the fabric (82), each equal field by
    field to ``smpquery portinfo LID PORT``.

    Not compared: the M_Key (never shown), a switch port's LocalPort (the
    port the query entered the switch by: the SM's and ours differ) and,
    on the 12 unlinked switch ports, all but the link state (opensm keeps
    a zero PortInfo with only the state for a port that is down)."""
    text = run(big, "saquery", "PIR")
    recs = diags.blocks(text, "PortInfoRecord dump")
    assert len(recs) == 82
    assert len({(r["EndPortLid"], r["PortNum"]) for r in recs}) == 82
    switch_lids = {r["lid"] for r in sq.parse(run(big, "saquery", "-N"))
                   if r["node_type"] == "Switch"}
    compared, differ, down = 0, [], 0
    for r in recs:
        lid, port = r["EndPortLid"], r["PortNum"]
        mine = diags.fields(run(big, "smpquery", "portinfo", lid, port))
        keys = set(mine) - {"Mkey"}
        if lid in switch_lids:
            keys.discard("LocalPort")
        if mine["LinkState"] == "Down":
            keys = {"LinkState", "PhysLinkState"}
            down += 1
        for k in sorted(keys):
            if r.get(k) != mine[k]:
                differ.append((lid, port, k, r.get(k), mine[k]))
            compared += 1
    assert not differ
    assert down == 12 and compared > 3000


def test_path_record_table_every_pair(big):
    """``saquery PR``: 1156 PathRecords (~370 RMPP segments), one per
    ordered pair of the 34 LIDs, each with SLID/DLID and GIDs consistent
    with the NodeRecords."""
    nodes = {r["lid"]: r for r in sq.parse(run(big, "saquery", "-N"))}
    prs = [sq.path_record(r) for r in sq.parse(run(big, "saquery", "PR"))]
    pairs = {(p["SLID"], p["DLID"]) for p in prs}
    lids = {int(lid) for lid in nodes}
    assert len(prs) == len(pairs) == len(lids) ** 2
    assert pairs == {(s, d) for s in lids for d in lids}
    guid = {int(lid): int(r["port_guid"], 16) for lid, r in nodes.items()}
    for p in prs:
        assert p["SGID"] == str(GID.from_parts(0xFE80 << 48,
                                               guid[p["SLID"]]))
        assert p["DGID"] == str(GID.from_parts(0xFE80 << 48,
                                               guid[p["DLID"]]))
        assert p["PKey"] == 0xFFFF and p["reversible"] == 1


def test_debian_shim_cuts_the_same_table(tmp_path):
    """The negative control: the same fabric with Debian's shim everywhere
    answers ``saquery -N`` with one record (the first MAD of 19) and
    ``saquery PR`` with 3 of 1156."""
    if not STOCK_SHIM.exists():
        pytest.skip(f"{STOCK_SHIM} is missing")
    with Fabric(TOPOLOGY, tmp_path, shim=STOCK_SHIM) as stock:
        assert len(sq.parse(run(stock, "saquery", "-N"))) == 1
        assert len(sq.parse(run(stock, "saquery", "PR"))) == 3


def test_service_record_last_32_bytes(big):
    """A ServiceRecord's ServiceData64[1] sits at MAD bytes 224-231, in
    the 32 bytes Debian's shim loses: Set through our library, it reaches
    opensm whole and comes back whole, to us (Get) and to ``saquery SR``.
    (On this module's fabric: in full sa runs a worker on the main
    fabric's Hca2 was dead, and a new one did not answer, after earlier
    tests.)"""
    from rdma import _mad as mad
    fabric = big
    worker = fabric.worker("Hca2")
    ep = worker.call("end_port")
    rec = mad.SAServiceRecord(
        serviceID=0x1000_0000_0000_00CD, serviceGID=ep["gid"],
        servicePKey=0xFFFF, serviceLease=0xFFFFFFFF,
        serviceName=b"rdma-last-32-bytes",
        serviceData64=(0x0123456789ABCDEF, 0xFEDCBA9876543210))
    key = mad.SAServiceRecord(serviceID=rec.serviceID,
                              serviceGID=rec.serviceGID, servicePKey=0xFFFF)
    worker.call("sa_set", rec)
    try:
        back = worker.call("sa_get", key)
        assert back.pack() == rec.pack()
        theirs = [sq.service_record(r) for r in
                  sq.parse(run(fabric, "saquery", "SR", node="Hca3"))]
        (mine,) = [t for t in theirs if t["serviceID"] == rec.serviceID]
        assert mine["serviceData64"] == [0x0123456789ABCDEF,
                                         0xFEDCBA9876543210]
        assert mine["serviceName"] == "rdma-last-32-bytes"
    finally:
        worker.call("sa_delete", key)


#: NodeRecords of this module's fabric: its HCAs and two switches.
NODES = len(hca_nodes(TOPOLOGY)) + 2


def test_agents_do_not_pile_up(big):
    """In one process, an agent registered and unregistered 2000 times
    (libibumad's umad_register/umad_unregister), then an SA GetTable: an
    agent id freed by unregister is used again, as with the kernel."""
    worker = big.worker("Hca2")
    assert worker.call("agent_churn", 2000, timeout=120) == NODES


def test_closing_a_umad_frees_its_agents(big):
    """300 times in one process a UMAD with four agents, closed with them
    still registered (what a tool run per command does), then an SA
    GetTable.  Closing the file frees all its agents, as the kernel does:
    ibsim's own shim freed one per close, and umad_register failed with
    ENOMEM ("Cannot allocate memory") after about ten rounds."""
    worker = big.worker("Hca3")
    assert worker.call("agent_churn", 300, per_umad=True,
                       timeout=300) == NODES


def test_umad_file_contract(big):
    """A file holds 32 agents (the 33rd: ENOMEM), ids are the lowest free
    ones, unregistering an unknown id is EINVAL; an empty file is not
    readable (select), read() on it is EAGAIN (libibumad opens it
    O_NONBLOCK) and a buffer smaller than the header is EINVAL."""
    import errno
    r = big.worker("Hca4").call("umad_file_contract")
    assert r["fd"] >= 0
    assert r["ids"] == list(range(32))
    assert r["33rd"] == (-errno.EPERM, errno.ENOMEM)
    assert r["unregister 5"] == 0 and r["again"] == 5
    assert r["unregister 40"] == (-1, errno.EINVAL)
    assert r["poll empty"] == []
    assert r["read empty"] == "EAGAIN" and r["read tiny"] == "EINVAL"


def test_short_read_keeps_the_mad(big):
    """A MAD read into a buffer too small: ENOSPC, the header carries the
    length needed, and the MAD stays queued for the next read (which
    gets the PortInfo answer whole, with our TID).  The wait for it is
    an epoll on the umad descriptor."""
    worker = big.worker("Hca4")
    sm = worker.call("end_port")["sm_lid"]
    first, need, whole, tid, status = worker.call("short_read_keeps_mad",
                                                  sm)
    assert (first, need, whole) == ("ENOSPC", 64 + 256, 64 + 256)
    assert tid == 0x1234_5678 and status == 0
