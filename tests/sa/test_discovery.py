"""rdma.discovery against infiniband-diags on ibsim fabrics.

Our discovery runs as ``python -m rdma.discovery`` in a shimmed process on
one node and prints the subnet as JSON; ``ibnetdiscover`` and ``ibroute``
run on the same node of the same fabric.  Nodes (type, GUID, port count,
description), links port to port, LIDs and port GUIDs must be equal; so
must every switch's linear forwarding table and ``ibroute``'s.  Faults
come from ibsim's console: an unlinked port and a node that stops
answering.
"""
import json
import re
import sys
import time
from pathlib import Path

import pytest

from conftest import TOPOLOGIES, _missing
from fabric import Fabric

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "topologies"))
from gen_fattree import write_fattree  # noqa: E402

#: The node our discovery and ibnetdiscover run on.
CLIENT = "Hca2"

_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"[SHR]-([0-9a-f]+)"\s*'
                   r'#\s*"(.*?)"(.*)$')
_SWPORT = re.compile(r'^\[(\d+)\]\s+"[SHR]-([0-9a-f]+)"\[(\d+)\]')
_CAPORT = re.compile(r'^\[(\d+)\]\(([0-9a-f]+)\)\s+"[SHR]-([0-9a-f]+)"'
                     r'\[(\d+)\]\s*#\s*lid (\d+) lmc (\d+)')


def parse_ibnetdiscover(text):
    """Nodes, links, LIDs and CA port GUIDs of ibnetdiscover's output:
    ``({guid: (type, ports, desc)}, {frozenset of two (guid, port)},
    {(guid, port): lid}, {(guid, port): port guid})``; switch LIDs are
    keyed by port 0."""
    nodes, links, lids, pguids = {}, set(), {}, {}
    cur = None
    for line in text.splitlines():
        line = line.strip()
        m = _NODE.match(line)
        if m:
            kind, nports, guid, desc, rest = m.groups()
            cur = int(guid, 16)
            nodes[cur] = ({"Switch": "Switch", "Ca": "CA",
                           "Rt": "Router"}[kind], int(nports), desc)
            lm = re.search(r"\blid (\d+)", rest)
            if kind == "Switch" and lm:
                lids[(cur, 0)] = int(lm.group(1))
            continue
        m = _CAPORT.match(line)
        if m and cur is not None:
            port, pguid, rguid, rport, lid, _lmc = m.groups()
            lids[(cur, int(port))] = int(lid)
            pguids[(cur, int(port))] = int(pguid, 16)
            links.add(frozenset({(cur, int(port)),
                                 (int(rguid, 16), int(rport))}))
            continue
        m = _SWPORT.match(line)
        if m and cur is not None:
            port, rguid, rport = m.groups()
            links.add(frozenset({(cur, int(port)),
                                 (int(rguid, 16), int(rport))}))
    return nodes, links, lids, pguids


def ours(summary):
    """The same four views of ``rdma.discovery.subnet_summary``."""
    nodes, links, lids, pguids = {}, set(), {}, {}
    for n in summary["nodes"]:
        g = int(n["guid"], 16)
        nodes[g] = (n["type"], n["numPorts"], n["desc"])
        for port, d in n["ports"].items():
            port = int(port)
            if "lid" in d and d["lid"] is not None:
                lids[(g, port)] = d["lid"]
            if n["type"] != "Switch" and d.get("guid"):
                pguids[(g, port)] = int(d["guid"], 16)
        if n["type"] == "Switch":
            port0 = n["ports"].get("0", {})
            if port0.get("lid"):
                lids[(g, 0)] = port0["lid"]
    for a, pa, b, pb in summary["links"]:
        links.add(frozenset({(int(a, 16), pa), (int(b, 16), pb)}))
    return nodes, links, lids, pguids


def wait_active(fabric, node=CLIENT, timeout=20):
    """Wait until a new shimmed process on *node* sees its port ACTIVE
    (the shim reads the port state when the process starts; "SUBNET UP"
    comes a little before the ports are ACTIVE)."""
    deadline = time.monotonic() + timeout
    while True:
        out = fabric.run(["ibstat"], node).stdout
        if "State: Active" in out:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{node} not ACTIVE: {out}")
        time.sleep(0.1)


def discover(fabric, *args, node=CLIENT, timeout=120):
    """Run ``python -m rdma.discovery`` on *node*; return its JSON."""
    res = fabric.run([sys.executable, "-m", "rdma.discovery", *args], node,
                     timeout=timeout)
    return json.loads(res.stdout)


def ibnetdiscover(fabric, node=CLIENT, timeout=120):
    return parse_ibnetdiscover(
        fabric.run(["ibnetdiscover"], node, timeout=timeout).stdout)


def assert_same(theirs, mine):
    names = ("nodes", "links", "LIDs", "port GUIDs")
    for name, t, m in zip(names, theirs, mine):
        if isinstance(t, dict):
            diff = {k: (t.get(k), m.get(k)) for k in set(t) | set(m)
                    if t.get(k) != m.get(k)}
        else:
            diff = {"only ibnetdiscover": sorted(map(sorted, t - m))[:5],
                    "only ours": sorted(map(sorted, m - t))[:5]} \
                if t != m else {}
        assert not diff, f"{name} differ (ibnetdiscover, ours): " \
                         f"{dict(list(diff.items())[:8])}"


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """A factory of started fabrics (cached per module, all stopped at
    the end): ``started(name, console=False)``."""
    why = _missing()
    if why:
        pytest.skip(why)
    made = {}

    def get(name, console=False, sm=True):
        key = (name, console, sm)
        old = made.get(key)
        if old is None or old.ibsim is None or old.ibsim.poll() is not None:
            # New, or closed by a test that was done with it.
            scratch = tmp_path_factory.mktemp(f"disc-{name}")
            if name.startswith("fattree"):
                topo = write_fattree(scratch / name,
                                     int(name[len("fattree"):]))
            else:
                topo = TOPOLOGIES[name]
            f = made[key] = Fabric(topo, scratch, console=console,
                                   sm_node="Hca1" if sm else None)
            f.start()
            if sm:
                wait_active(f)
        return made[key]

    try:
        yield get
    finally:
        for f in made.values():
            f.close()


@pytest.mark.parametrize("name", ["1sw4hca", "2sw4hca", "2sw2hca2port",
                                  "fattree36"])
def test_topology_equals_ibnetdiscover(started, name):
    """Every node, link, LID and port GUID equals ibnetdiscover's (ibsim's
    examples, two-port HCAs included, and a 648-HCA fat-tree)."""
    f = started(name)
    theirs = ibnetdiscover(f)
    assert len(theirs[0]) >= 3
    mine = discover(f)
    assert mine["errors"] == []
    assert_same(theirs, ours(mine))
    if name == "fattree36":
        kinds = [n[0] for n in theirs[0].values()]
        assert kinds.count("CA") == 648 and kinds.count("Switch") == 54
    # Done with it: free its processes for the next fabric.
    f.close()


@pytest.mark.parametrize("name", ["2sw2hca2port", "fattree36"])
def test_sa_discovery_equals_ibnetdiscover(started, name):
    """``load(..., sa=True)``: NodeRecords, PortInfoRecords and LinkRecords
    by GetTable give the subnet ibnetdiscover finds by SMPs."""
    f = started(name)
    theirs = ibnetdiscover(f)
    mine = discover(f, "--sa")
    assert mine["errors"] == []
    assert_same(theirs, ours(mine))
    f.close()


#: python-rdma's partial-discovery calls, as its ibtool uses them.
PARTIAL = """
import json, sys
import rdma, rdma.discovery, rdma.path, rdma.sched, rdma.subnet
umad = rdma.get_umad(None)
sched = rdma.sched.MADSchedule(umad)
out = {}
for lid_routed in (True, False):
    sbn = rdma.subnet.Subnet()
    sbn.lid_routed = lid_routed
    sbn.paths = {}
    path = rdma.path.from_string("0,1", require_ep=umad.end_port)
    sched.run(queue=rdma.discovery.subnet_get_port(sched, sbn, path))
    port = sbn.path_to_port(path)
    sw = port.parent
    sched.run(queue=rdma.discovery.topo_surround_SMP(sched, sbn, sw))
    out[str(lid_routed)] = {
        "guid": int(sw.ninf.nodeGUID), "lid": port.LID,
        "peers": sorted([q.port_id, int(sbn.topology[q].parent.ninf.nodeGUID),
                         sbn.topology[q].port_id]
                        for q, i in sw.iterports() if q in sbn.topology)}
sbn = rdma.subnet.Subnet()
sched.run(queue=rdma.discovery.subnet_ninf_LIDS_SMP(
    sched, sbn, [int(x) for x in sys.argv[1].split(",")]))
out["by_lid"] = sorted([p.LID, int(p.parent.ninf.nodeGUID), p.port_id]
                       for p in sbn.iterend_ports() if p.LID)
print(json.dumps(out))
"""


def test_partial_discovery_calls(started):
    """python-rdma's subnet_get_port + topo_surround_SMP (the switch
    behind our port and everything cabled to it; LID routed or not) and
    subnet_ninf_LIDS_SMP (NodeInfo by LID) agree with ibnetdiscover."""
    f = started("2sw4hca")
    nodes, links, lids, _ = ibnetdiscover(f)
    res = json.loads(f.run([sys.executable, "-c", PARTIAL,
                            ",".join(str(x) for x in lids.values())],
                           CLIENT).stdout)
    for mode in ("True", "False"):
        sw = res[mode]
        assert nodes[sw["guid"]][0] == "Switch"
        assert sw["lid"] == lids[(sw["guid"], 0)]
        want = sorted([p, rg, rp] for lk in links for (g, p) in lk
                      if g == sw["guid"]
                      for (rg, rp) in lk if (rg, rp) != (g, p))
        assert sw["peers"] == want, mode
    by_lid = {lid: (g, port) for lid, g, port in res["by_lid"]}
    assert by_lid == {lid: key for key, lid in lids.items()}


def test_lfdb_equals_ibroute(started):
    """Every switch's linear forwarding table equals ibroute's, on the
    two-switch fabric."""
    f = started("2sw4hca")
    mine = discover(f, "--lfdb")
    assert mine["errors"] == []
    switches = [n for n in mine["nodes"] if n["type"] == "Switch"]
    assert len(switches) == 2
    for sw in switches:
        lid = sw["ports"]["0"]["lid"]
        out = f.run(["ibroute", str(lid)], CLIENT).stdout
        theirs = {int(m.group(1), 16): int(m.group(2))
                  for m in re.finditer(r"^(0x[0-9a-f]+) (\d+) :", out, re.M)}
        assert theirs, out
        lfdb = sw["lfdb"]
        mine_valid = {lid: port for lid, port in enumerate(lfdb)
                      if port != 255}
        assert mine_valid == theirs, (sw["desc"], out)
    f.close()


def test_lfdb_by_directed_route(started):
    """With ``lid_routed`` off every SMP after the walk (SwitchInfo, the
    forwarding table blocks) goes by directed route: same tables."""
    f = started("2sw4hca")
    by_lid = discover(f, "--lfdb")
    by_dr = discover(f, "--lfdb", "--dr")
    assert by_dr["errors"] == []
    assert by_dr["nodes"] == by_lid["nodes"]
    assert all(n.get("lfdb") for n in by_dr["nodes"]
               if n["type"] == "Switch")


def test_without_subnet_manager(started):
    """No SM: every port is INIT with LID 0, and discovery (on the port
    named, since none is ACTIVE) still finds every node and link by
    directed route, as ibnetdiscover does, and reads the (empty)
    forwarding tables by directed route too."""
    f = started("2sw4hca", sm=False)
    mine = discover(f, "--lfdb", "ibsim0/1")
    assert mine["errors"] == []
    nodes, links, lids, pguids = ibnetdiscover(f)
    assert set(lids.values()) == {0}
    got = ours(mine)
    assert got[2] == {}                       # no LIDs
    assert_same((nodes, links, {}, pguids), got)
    for n in mine["nodes"]:
        if n["type"] == "Switch":
            assert set(n["lfdb"]) == {255}
        for num, p in n["ports"].items():
            if num != "0":                    # ibsim: switch port 0 ACTIVE
                assert p["state"] in (1, 2)   # DOWN or INIT
    f.close()


def test_unlinked_port_and_relink(started):
    """A port unlinked on ibsim's console is DOWN: the node behind it is
    not in the subnet and nothing is reported as an error; linked again,
    the node comes back.  ibnetdiscover agrees both times."""
    f = started("1sw4hca", console=True)
    full = ours(discover(f))
    f.console('Unlink "Hca3"[1]')
    try:
        mine = discover(f)
        assert mine["errors"] == []
        cut = ours(mine)
        assert_same(ibnetdiscover(f), cut)
        gone = {g for g in full[0]} - set(cut[0])
        assert [full[0][g][2] for g in gone] == ["Hca3"]
        sw = next(n for n in mine["nodes"] if n["type"] == "Switch")
        assert sw["ports"]["3"]["state"] == 1          # DOWN
    finally:
        f.console('Link "Switch1"[3] "Hca3"[1]')
    wait_active(f, "Hca3")
    back = ours(discover(f))
    assert_same(ibnetdiscover(f), back)
    assert set(back[0]) == set(full[0])
    assert back[1] == full[1]


def test_node_that_does_not_answer(started):
    """A node that drops every SMP (ibsim ``Error`` at rate 100) costs a
    timeout per route to it, is reported in ``errors`` with its directed
    route, and the rest of the subnet is discovered."""
    f = started("1sw4hca", console=True)
    full = ours(discover(f))
    f.console('Error "Hca4" 100')
    try:
        t0 = time.monotonic()
        mine = discover(f, timeout=60)
        took = time.monotonic() - t0
    finally:
        f.console('Error "Hca4" 0')
    assert len(mine["errors"]) == 1, mine["errors"]
    err = mine["errors"][0]
    assert "DR Path (0, 1, 4)" in err and "timed out" in err, err
    got = ours(mine)
    descs = sorted(n[2] for n in got[0].values())
    assert descs == ["Hca1", "Hca2", "Hca3", "Switch1"]
    # Everything else is there, links included.
    assert got[1] == {lk for lk in full[1]
                      if not any(full[0][g][2] == "Hca4" for g, _ in lk)}
    assert took < 30
    # It answers again.
    assert_same(full, ours(discover(f)))


def test_local_port_must_answer(started):
    """When the local node itself does not answer, load() raises (a
    MADTimeoutError naming the route) instead of returning nothing."""
    f = started("1sw4hca", console=True)
    f.console(f'Error "{CLIENT}" 100')
    try:
        res = f.run([sys.executable, "-m", "rdma.discovery"], CLIENT,
                    timeout=60, check=False)
    finally:
        f.console(f'Error "{CLIENT}" 0')
    assert res.returncode != 0
    assert "MADTimeoutError" in res.stderr and "DR Path (0,)" in \
        res.stderr, res.stderr[-2000:]
