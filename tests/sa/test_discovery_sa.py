"""rdma.discovery through the SA (``use_sa``) against SMPs and
infiniband-diags on ibsim with opensm.

The client side is this file run as a program (``python
test_discovery_sa.py CASE``) in a shimmed process on Hca2: it reads each
node once by SMPs and once through the SA, into two subnets, and prints
both as JSON.  The tests compare them node by node, and with what
``smpquery nodeinfo``/``nodedesc`` (infiniband-diags) print for the same
LIDs.
"""
import json
import sys
from pathlib import Path

import pytest

#: The node the client runs on.
CLIENT = "Hca2"
#: Directed routes from Hca2 on net.2sw2path4hca: its switch, the other
#: switch, and CAs behind each (also one that turns back at a CA).
ROUTES = ["0", "0,1", "0,1,3", "0,1,3,1", "0,1,2", "0,1,3,5", "0,1,1"]

NINF_FIELDS = ("nodeType", "numPorts", "systemImageGUID", "nodeGUID",
               "portGUID", "partitionCap", "deviceID", "revision",
               "localPortNum", "vendorID", "baseVersion", "classVersion")


# -- the client (runs in the shimmed process) ---------------------------------

def _node_view(sbn, result):
    """One node as JSON: its NodeInfo fields, description and the end
    port (GUID, LID) the read arrived at."""
    node, port = result
    ninf = {k: int(getattr(node.ninf, k)) for k in NINF_FIELDS}
    return {"ninf": ninf, "desc": node.desc, "type": type(node).__name__,
            "port_guid": int(port.portGUID) if port.portGUID is not None
            else None, "lid": port.LID}


def _subnet_view(sbn):
    """Every node of *sbn* by node GUID: NodeInfo fields and description;
    every link as sorted ((guid, port), (guid, port)) pairs."""
    nodes = {}
    for n in sbn.iternodes():
        if n.ninf is None:
            continue
        nodes[f"{int(n.ninf.nodeGUID):#x}"] = {
            "type": type(n).__name__, "desc": n.desc,
            "numPorts": int(n.ninf.numPorts),
            "sysimg": int(n.ninf.systemImageGUID)}
    links = set()
    for a, b in sbn.topology.items():
        x = (f"{int(a.parent.ninf.nodeGUID):#x}", a.port_id)
        y = (f"{int(b.parent.ninf.nodeGUID):#x}", b.port_id)
        links.add((min(x, y), max(x, y)))
    return {"nodes": nodes, "links": sorted(links)}


def client(case, args):
    import rdma
    import rdma.discovery as D
    import rdma.IBA as IBA
    import rdma.path
    import rdma.sched
    import rdma.subnet
    from rdma.satransactor import SATransactor

    umad = rdma.get_umad(None)
    ep = umad.end_port
    out = {}

    def lid_path(lid):
        return rdma.path.IBPath(ep, SLID=ep.lid, DLID=lid, dqpn=0, sqpn=0,
                                qkey=IBA.IB_DEFAULT_QP0_QKEY)

    def dr_path(route):
        return rdma.path.from_string(route if "," in route else route + ",",
                                     ep)

    def one(sched, path, use_sa, sync=False):
        sbn = rdma.subnet.Subnet()
        co = D.subnet_ninf_SMP(sched, sbn, path, True, use_sa)
        if sync:
            res = sched.do_async(co)
        else:
            sched.run(queue=co)
            res = sched.result
        return _node_view(sbn, res)

    try:
        if case == "lids":
            lids = [int(x) for x in args]
            for lid in lids:
                row = {}
                sched = rdma.sched.MADSchedule(umad)
                row["smp"] = one(sched, lid_path(lid), False)
                row["smp_mads"] = sched.sent
                sched = rdma.sched.MADSchedule(umad)
                row["sa"] = one(sched, lid_path(lid), True)
                row["sa_mads"] = sched.sent
                sched = rdma.sched.MADSchedule(umad)
                sat = SATransactor(sched)
                row["sa_default"] = one(sat, lid_path(lid), None)
                row["sa_default_mads"] = sched.sent
                row["sa_sync"] = one(umad, lid_path(lid), True, sync=True)
                out[str(lid)] = row
        elif case == "routes":
            for route in args:
                row = {}
                sched = rdma.sched.MADSchedule(umad)
                row["smp"] = one(sched, dr_path(route), False)
                sched = rdma.sched.MADSchedule(umad)
                row["sa"] = one(sched, dr_path(route), True)
                row["sa_mads"] = sched.sent
                row["sa_sync"] = one(umad, dr_path(route), True, sync=True)
                out[route] = row
        elif case == "lids_smp":
            # subnet_ninf_LIDS_SMP and every node's surroundings on an
            # SATransactor (NodeRecords, LinkRecords), and the SMP walk.
            lids = [int(x) for x in args]
            sched = rdma.sched.MADSchedule(umad)
            sbn = rdma.subnet.Subnet()
            sched.run(queue=D.topo_SMP(sched, sbn))
            out["smp"] = _subnet_view(sbn)
            sched = rdma.sched.MADSchedule(umad)
            sbn = rdma.subnet.Subnet()
            sat = SATransactor(sched)
            sched.run(queue=D.subnet_ninf_LIDS_SMP(sat, sbn, list(lids)))
            out["sa_ninf_mads"] = sched.sent
            sched.run(mqueue=(D.topo_surround_SMP(sat, sbn, n)
                              for n in list(sbn.iternodes())))
            out["sa"] = _subnet_view(sbn)
        elif case == "bad":
            sched = rdma.sched.MADSchedule(umad)
            sbn = rdma.subnet.Subnet()
            try:
                sched.run(queue=D.subnet_ninf_SMP(sched, sbn, lid_path(99),
                                                  True, True))
            except Exception as e:       # noqa: BLE001 - reported
                out["error"] = f"{type(e).__name__}: {e}"
            try:
                sched.run(queue=D.subnet_ninf_SMP(sched, sbn,
                                                  dr_path("0,1,7"), True,
                                                  True))
            except Exception as e:       # noqa: BLE001 - reported
                out["dr_error"] = f"{type(e).__name__}: {e}"
    finally:
        umad.close()
    sys.stdout.write(json.dumps(out) + "\n")


# -- the tests ----------------------------------------------------------------

def _run(fabric, case, *args):
    res = fabric.run([sys.executable, str(Path(__file__).resolve()), case,
                      *map(str, args)], CLIENT, timeout=90)
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def all_lids(fabric):
    import diags
    out = fabric.run(["saquery", "-N"], CLIENT).stdout
    lids = sorted({diags.as_int(r["lid"])
                   for r in diags.blocks(out, "NodeRecord dump")})
    assert len(lids) == 6
    return lids


def _diags_node(fabric, target, direct=False):
    """infiniband-diags' smpquery nodeinfo and nodedesc of *target*."""
    import diags
    d = ["-D"] if direct else []
    ni = diags.fields(fabric.run(["smpquery", *d, "nodeinfo", target],
                                 CLIENT).stdout)
    nd = diags.fields(fabric.run(["smpquery", *d, "nodedesc", target],
                                 CLIENT).stdout)
    return ni, nd["Node Description"]


def _switch_arrival_dropped(view):
    """The NodeInfo fields of *view* without a switch's localPortNum:
    an SMP's says which port it arrived by, a NodeRecord's which port
    the SM's arrived by (IBA 14.2.5.3)."""
    n = dict(view["ninf"])
    if view["type"] == "Switch":
        n.pop("localPortNum")
    return n


def _check_against_diags(view, ni, desc):
    import diags
    n = view["ninf"]
    assert n["nodeGUID"] == diags.as_int(ni["Guid"])
    assert n["portGUID"] == diags.as_int(ni["PortGuid"])
    if view["type"] != "Switch":
        assert n["localPortNum"] == diags.as_int(ni["LocalPort"])
    assert n["numPorts"] == diags.as_int(ni["NumPorts"])
    assert n["systemImageGUID"] == diags.as_int(ni["SystemGuid"])
    assert n["vendorID"] == diags.as_int(ni["VendorId"])
    assert n["partitionCap"] == diags.as_int(ni["PartCap"])
    assert n["revision"] == diags.as_int(ni["Revision"])
    assert n["deviceID"] == diags.as_int(ni["DevId"])
    assert view["desc"] == desc


def test_ninf_by_lid_through_the_sa(fabric, all_lids):
    """subnet_ninf_SMP(use_sa=True) of every LID: NodeInfo, description
    and end port equal the SMP reads and smpquery's, with one MAD (a
    NodeRecord) instead of two SMPs; an SATransactor defaults to it, and
    a synchronous UMAD runs it with do_async."""
    got = _run(fabric, "lids", *all_lids)
    for lid in all_lids:
        row = got[str(lid)]
        assert row["sa"] == row["smp"], lid
        assert row["sa_default"] == row["smp"], lid
        assert row["sa_sync"] == row["smp"], lid
        assert row["sa"]["lid"] == lid
        assert row["smp_mads"] == 2 and row["sa_mads"] == 1
        assert row["sa_default_mads"] == 1
        _check_against_diags(row["sa"], *_diags_node(fabric, str(lid)))


def test_ninf_by_directed_route_through_the_sa(fabric):
    """A directed route is resolved to a LID by LinkRecords (one per hop)
    and then read from its NodeRecord: the same node as by SMPs and as
    smpquery -D (but for the port a switch was entered by)."""
    got = _run(fabric, "routes", *ROUTES)
    for route in ROUTES:
        row = got[route]
        smp, sa = row["smp"], row["sa"]
        assert sa["type"] == smp["type"], route
        assert _switch_arrival_dropped(sa) == \
            _switch_arrival_dropped(smp), route
        assert sa["desc"] == smp["desc"], route
        assert sa["port_guid"] == smp["port_guid"], route
        assert row["sa_sync"] == sa, route
        hops = len(route.split(",")) - 1
        assert row["sa_mads"] == max(hops, 0) + 1, route
        _check_against_diags(sa, *_diags_node(fabric, route, direct=True))


def test_lids_and_surroundings_through_the_sa(fabric, all_lids):
    """subnet_ninf_LIDS_SMP and topo_surround_SMP on an SATransactor
    (NodeRecords and LinkRecords) find the same nodes, descriptions and
    links as the SMP walk (topo_SMP) and as ibnetdiscover; one NodeRecord
    per node."""
    from test_discovery import ibnetdiscover
    got = _run(fabric, "lids_smp", *all_lids)
    assert got["sa_ninf_mads"] == len(all_lids)
    assert got["sa"]["nodes"] == got["smp"]["nodes"]
    assert got["sa"]["links"] == got["smp"]["links"]
    nodes, links, _, _ = ibnetdiscover(fabric)
    assert {int(g, 16): (v["type"], v["numPorts"], v["desc"])
            for g, v in got["sa"]["nodes"].items()} == nodes
    assert {frozenset({(int(a[0], 16), a[1]), (int(b[0], 16), b[1])})
            for a, b in got["sa"]["links"]} == links


def test_bad_targets_through_the_sa(fabric):
    """A LID the SA does not know and a route into an unlinked port fail
    with an error naming the problem, not a hang or a crash."""
    got = _run(fabric, "bad")
    assert got["error"].startswith("SAError:")
    assert "SubnAdmGet(SANodeRecord)" in got["error"]
    assert "ERR_NO_RECORDS" in got["error"]
    assert "RDMAError" in got["dr_error"] and "port 7" in got["dr_error"]


if __name__ == "__main__":
    client(sys.argv[1], sys.argv[2:])
