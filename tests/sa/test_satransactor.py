"""rdma.satransactor.SATransactor on the session's ibsim fabric: SubnGets
answered through opensm's SA records are compared, field by field, with
the SMP answers of the same nodes (read-only: the fabric is shared)."""
import json
import sys

import pytest

import diags
from conftest import HERE

OPS = str(HERE / "mcast_ops.py")


def ops(fabric, *argv):
    return json.loads(fabric.run([sys.executable, OPS, *argv],
                                 "Hca2").stdout)


@pytest.fixture(scope="module")
def lids(fabric):
    out = fabric.run(["saquery", "-N"], "Hca2").stdout
    found = sorted({int(line.split(".")[-1], 0)
                    for line in out.splitlines()
                    if line.strip().startswith("lid.")})
    assert len(found) == 6
    return found


def test_sa_answers_equal_smp_answers(fabric, lids):
    """Every node: NodeInfo, NodeDescription, PortInfo of each port that
    is not Down, P_Key tables, SwitchInfo, LFT and MFT blocks, GUIDInfo:
    the SA's answers equal the SMPs' (PortInfo's localPortNum, M_Key and
    key-violation counters aside).  SL-to-VL and VL arbitration tables,
    which opensm keeps no copy of with QoS off, come back as their SMP
    attribute classes."""
    diffs, n, kinds, not_kept = ops(fabric, "sa_vs_smp", *map(str, lids))
    assert diffs == []
    assert n >= 40
    assert kinds == ["SMPGUIDInfo", "SMPLinearForwardingTable",
                     "SMPMulticastForwardingTable", "SMPNodeDescription",
                     "SMPNodeInfo", "SMPPKeyTable", "SMPPortInfo",
                     "SMPSwitchInfo"]
    assert set(not_kept) == {"SMPSLToVLMappingTable",
                             "SMPVLArbitrationTable"}


def test_sa_transactor_on_the_scheduler(fabric, lids):
    """Wrapping the (asynchronous) MAD scheduler: many SubnGets in
    flight, answered by the SA, equal to the SMP answers."""
    got = ops(fabric, "sa_sched", *map(str, lids))
    assert len(got) == 6
    for lid, (guid_sa, lid_sa, guid_smp, lid_smp) in got.items():
        assert guid_sa == guid_smp and lid_sa == lid_smp == int(lid)


@pytest.mark.parametrize("route", ["0", "0,1", "0,1,3", "0,1,3,1"])
def test_directed_route_resolved_by_link_records(fabric, route):
    """A directed route becomes a LID by LinkRecord queries; the node
    read through the SA is the node the SMP along the route reaches."""
    lid, guid_sa, guid_smp = ops(fabric, "sa_dr", route)
    assert guid_sa == guid_smp and 0 < lid < 0xC000


def test_sa_transactor_errors_name_the_problem(fabric):
    """A LID the SA has no record of, a directed route into an unlinked
    port: the exception names the record, the SA's status, the port."""
    errs = dict(ops(fabric, "sa_errors"))
    assert "SANodeRecord" in errs["lid"] and "ERR_NO_RECORDS" in errs["lid"]
    assert "no link out of port 7" in errs["dr"]


def test_switch_lfdb_through_the_sa(fabric, lids):
    """Switch.get_switch_fdb on an SATransactor reads the linear
    forwarding table with one GetTable of LinearForwardingTableRecords:
    the same table as by SMPs, for both switches."""
    tables = 0
    for lid in lids:
        ni = fabric.run(["smpquery", "nodeinfo", str(lid)], "Hca2").stdout
        if "Switch" not in ni:
            continue
        by_smp = ops(fabric, "lfdb", str(lid))
        by_sa = ops(fabric, "lfdb", str(lid), "sa")
        assert by_sa == by_smp and len(by_smp) == 7
        tables += 1
    assert tables == 2


def test_discovery_load_through_an_sa_transactor(fabric, lids):
    """rdma.discovery.load on an SATransactor (python-rdma's libibtool
    does this for its --sa option): every node, and each switch's LFT
    read with one GetTable equals the SMP-read table."""
    tables, nodes = ops(fabric, "sa_load")
    assert nodes == 6 and len(tables) == 2
    by_smp = {}
    for lid in lids:
        ni = diags.fields(fabric.run(["smpquery", "nodeinfo", str(lid)],
                                     "Hca2").stdout)
        if ni["NodeType"] == "Switch":
            by_smp[str(int(ni["Guid"], 16))] = ops(fabric, "lfdb",
                                                       str(lid))
    assert tables == by_smp
