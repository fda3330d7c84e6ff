"""``ibtool``'s InfiniBand management commands against infiniband-diags on
the same ibsim fabric: each command runs both tools with the same
arguments on the same node and compares the outputs field by field."""
import sys

import pytest

import diags


def both(fabric, argv, node):
    """(infiniband-diags' output, ours) for the same command line."""
    theirs = fabric.run(list(argv), node).stdout
    ours = fabric.run([sys.executable, "-m", "rdma", *argv], node).stdout
    return theirs, ours


def colon_fields(text):
    """``Key: value`` lines (ibstat's format) as (indent, key, value)."""
    out = []
    for line in text.splitlines():
        if ":" in line and line.strip():
            key, _, value = line.partition(":")
            out.append((len(key) - len(key.lstrip("\t")), key.strip(),
                        value.strip()))
    return out


@pytest.mark.parametrize("node,argv", [
    ("Hca1", ["ibstat"]), ("Hca4", ["ibstat"]), ("Hca2", ["ibstat", "-s"]),
    ("Hca2", ["ibstat", "-l"]), ("Hca2", ["ibstat", "-p"]),
    ("Hca2", ["ibstat", "ibsim0", "1"])], ids=lambda a: str(a))
def test_ibstat(fabric, node, argv):
    """ibstat: every field, in order, as infiniband-diags prints it."""
    theirs, ours = both(fabric, argv, node)
    if argv[1:] in (["-l"], ["-p"]):
        assert ours.split() == theirs.split() and ours.split()
    else:
        assert colon_fields(ours) == colon_fields(theirs)
        assert len(colon_fields(ours)) >= 6


def test_ibstat_bad_ca(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "ibstat", "mlx9"],
                     "Hca2", check=False)
    assert res.returncode == 2 and "mlx9" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def all_lids(fabric):
    """Every LID of the fabric (from saquery's NodeRecords)."""
    out = fabric.run(["saquery", "-N"], "Hca2").stdout
    lids = sorted({diags.as_int(r["lid"])
                   for r in diags.blocks(out, "NodeRecord dump")})
    assert len(lids) == 6
    return lids


@pytest.mark.parametrize("op", ["nodeinfo", "ND", "PI"])
def test_smpquery_by_lid(fabric, all_lids, op):
    """smpquery OP LID: the same lines for every node of the fabric."""
    for lid in all_lids:
        theirs, ours = both(fabric, ["smpquery", op, str(lid)], "Hca2")
        assert ours.splitlines() == theirs.splitlines(), lid
        assert len(diags.fields(ours)) in (1, 12, 51)


@pytest.mark.parametrize("route", ["0", "0,1", "0,1,2", "0,1,3,1"])
@pytest.mark.parametrize("op", ["nodeinfo", "nodedesc"])
def test_smpquery_directed_route(fabric, route, op):
    """smpquery -D OP ROUTE: the same lines, header included."""
    theirs, ours = both(fabric, ["smpquery", "-D", op, route], "Hca2")
    assert ours.splitlines() == theirs.splitlines()


def test_smpquery_errors_are_clear(fabric):
    for argv, words in ((["smpquery", "nodeinfo", "zz"], "zz"),
                        (["smpquery", "bogus", "1"], "bogus"),
                        (["smpquery", "-D", "nodeinfo", "3,1"],
                         "directed route")):
        res = fabric.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                         check=False)
        assert res.returncode == 2, res.stderr
        assert words in res.stderr and "Traceback" not in res.stderr


def test_smpquery_portinfo_every_port(fabric, all_lids):
    """smpquery portinfo LID PORT: every port of Switch1 (linked and not),
    ports 0, 4 and 8 of Switch2 and every HCA port, line for line
    (capability names included)."""
    for lid in all_lids:
        info = diags.fields(fabric.run(["smpquery", "nodeinfo", str(lid)],
                                       "Hca2").stdout)
        for port in range(diags.as_int(info["NumPorts"]) + 1):
            if info["NodeType"] != "Switch" and port == 0:
                continue
            if lid == 3 and port not in (0, 4, 8):
                continue
            theirs, ours = both(fabric, ["smpquery", "portinfo", str(lid),
                                         str(port)], "Hca2")
            assert ours.splitlines() == theirs.splitlines(), (lid, port)


def test_smpquery_switchinfo(fabric, all_lids):
    switches = 0
    for lid in all_lids:
        theirs = fabric.run(["smpquery", "switchinfo", str(lid)], "Hca2",
                            check=False)
        if theirs.returncode != 0:
            continue                    # an HCA has no SwitchInfo
        switches += 1
        ours = fabric.run([sys.executable, "-m", "rdma", "smpquery", "SI",
                           str(lid)], "Hca2").stdout
        assert ours.splitlines() == theirs.stdout.splitlines()
    assert switches == 2


@pytest.mark.parametrize("argv", [["smpquery", "-D", "switchinfo", "0,1"],
                                  ["smpquery", "switchinfo", "-D", "0,1"],
                                  ["smpquery", "portinfo", "-D", "0,1", "3"],
                                  ["smpquery", "-D", "portinfo", "0"]])
def test_smpquery_options_anywhere(fabric, argv):
    """Options before or after the positionals, as with getopt."""
    theirs, ours = both(fabric, argv, "Hca2")
    assert ours.splitlines() == theirs.splitlines()


def _sminfo_fields(text):
    """sminfo's one line without the activity count (it ticks)."""
    line = text.strip()
    head, _, tail = line.partition(", activity count ")
    return head, tail.split(" ", 1)[1]


@pytest.mark.parametrize("argv", [["sminfo"], ["sminfo", "1"],
                                  ["sminfo", "-D", "0,1,3,1"]])
def test_sminfo(fabric, argv):
    theirs, ours = both(fabric, argv, "Hca2")
    assert _sminfo_fields(ours) == _sminfo_fields(theirs)
    assert "SMINFO_MASTER" in ours


@pytest.mark.parametrize("argv", [["ibaddr"], ["ibaddr", "4"],
                                  ["ibaddr", "-l", "2"], ["ibaddr", "-g", "4"],
                                  ["ibaddr", "-D", "0,1"],
                                  ["ibaddr", "-D", "0,1,3,1"]])
def test_ibaddr(fabric, argv):
    theirs, ours = both(fabric, argv, "Hca4")
    assert ours == theirs and ours.strip()


def test_ibaddr_by_guid(fabric):
    """-G: the port GUID is resolved to a LID through the SA (the
    installed ibaddr cannot: its SA path query fails on ibsim)."""
    want = fabric.run(["ibaddr", "4"], "Hca2").stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "ibaddr", "-G",
                       "0x100004"], "Hca2").stdout
    assert ours == want


TRAFFIC = {"PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts",
           "PortUnicastXmitPkts", "PortUnicastRcvPkts",
           "PortMulticastXmitPkts", "PortMulticastRcvPkts", "PortXmitWait"}


@pytest.mark.parametrize("argv", [["perfquery"], ["perfquery", "2", "3"],
                                  ["perfquery", "4", "1"],
                                  ["perfquery", "-x", "2", "3"],
                                  ["perfquery", "-x"]])
def test_perfquery(fabric, argv):
    """perfquery: the same header and fields; error counters equal,
    traffic counters no lower than the reference read just before (the
    queries themselves are traffic)."""
    theirs, ours = both(fabric, argv, "Hca2")
    assert ours.splitlines()[0] == theirs.splitlines()[0]
    t, o = diags.fields(theirs), diags.fields(ours)
    assert list(o) == list(t) and len(o) >= 10
    for k in t:
        if k in TRAFFIC:
            assert diags.as_int(o[k]) >= diags.as_int(t[k]), k
        else:
            assert o[k] == t[k], k


@pytest.mark.parametrize("ext", [False, True])
def test_perfquery_reset(fabric, ext):
    """-R resets the port's counters (read back with perfquery); -r reads,
    then resets."""
    x = ["-x"] if ext else []
    ref = ["perfquery", *x, "2", "3"]
    fabric.run(ref, "Hca2")
    before = diags.fields(fabric.run(ref, "Hca2").stdout)
    assert diags.as_int(before["PortXmitPkts"]) > 3
    res = fabric.run([sys.executable, "-m", "rdma", "perfquery", *x, "-R",
                      "2", "3"], "Hca2")
    assert res.stdout == ""
    after = diags.fields(fabric.run(ref, "Hca2").stdout)
    assert diags.as_int(after["PortXmitPkts"]) <= 3
    mine = fabric.run([sys.executable, "-m", "rdma", "perfquery", *x, "-r",
                       "2", "3"], "Hca2").stdout
    assert diags.as_int(diags.fields(mine)["PortXmitPkts"]) >= \
        diags.as_int(after["PortXmitPkts"])
    again = diags.fields(fabric.run(ref, "Hca2").stdout)
    assert diags.as_int(again["PortXmitPkts"]) <= 3


def test_gmp_over_directed_route_is_refused(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "perfquery",
                      "--Direct", "0,1"], "Hca2", check=False)
    assert res.returncode == 2 and "directed route" in res.stderr
    assert "Traceback" not in res.stderr


def _topology_blocks(text):
    """ibnetdiscover output as a set of node blocks (the header with its
    date dropped; the order of nodes is discovery order, not compared)."""
    blocks = [b.strip("\n") for b in text.split("\n\n")]
    assert blocks[0].startswith("#\n# Topology file: generated on ")
    head = blocks[0].splitlines()[-1]
    return head, sorted(b for b in blocks[1:] if b)


@pytest.mark.parametrize("topology", ["2sw4hca", "2sw2hca2port", "1sw4hca",
                                      "net"])
def test_ibnetdiscover(fabrics, topology):
    """ibnetdiscover: every node block (GUIDs, descriptions, LIDs, links,
    widths and speeds) equal to infiniband-diags'."""
    fabric = fabrics(topology)
    theirs, ours = both(fabric, ["ibnetdiscover"], "Hca1")
    th, tb = _topology_blocks(theirs)
    oh, ob = _topology_blocks(ours)
    assert oh == th and ob == tb and len(ob) >= 3


@pytest.mark.parametrize("cmd", ["ibswitches", "ibhosts"])
@pytest.mark.parametrize("topology", ["2sw4hca", "2sw2hca2port"])
def test_ibswitches_ibhosts(fabrics, topology, cmd):
    theirs, ours = both(fabrics(topology), [cmd], "Hca1")
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
    assert ours.strip()



@pytest.mark.parametrize("argv", [["ibroute", "2"], ["ibroute", "3"],
                                  ["ibroute", "-n", "2"],
                                  ["ibroute", "-a", "3", "0", "8"],
                                  ["ibroute", "3", "4"],
                                  ["ibroute", "2", "1", "3"],
                                  ["ibroute", "-D", "0,1"],
                                  ["ibroute", "-D", "0,1,3"]])
def test_ibroute(fabric, argv):
    """ibroute: the header, every forwarding entry and destination."""
    theirs, ours = both(fabric, argv, "Hca2")
    assert ours.splitlines() == theirs.splitlines()
    assert "dumped" in ours


def test_ibroute_not_a_switch(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "ibroute", "4"], "Hca2",
                     check=False)
    assert res.returncode == 2 and "not a switch" in res.stderr


def test_ibtracert_every_pair(fabric, all_lids):
    """ibtracert SLID DLID from an HCA on each switch and from a switch to
    every LID: the same hops (CA-CA across both switches, CA-switch,
    switch-CA, to itself)."""
    for s in (1, 4, 2):
        for d in all_lids:
            theirs, ours = both(fabric, ["ibtracert", str(s), str(d)],
                                "Hca2")
            assert ours.splitlines() == theirs.splitlines(), (s, d)


def test_ibtracert_unknown_lid(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "ibtracert", "4", "99"],
                     "Hca2", check=False)
    assert res.returncode == 2 and "99" in res.stderr
    assert "Traceback" not in res.stderr


def _error_report(text):
    """ibqueryerrors output as (set of per-node blocks, summary lines)."""
    body, _, summary = text.partition("\n## Summary")
    blocks, cur = [], []
    for line in body.splitlines():
        if line.startswith("Errors for "):
            cur = [line]
            blocks.append(cur)
        elif line.strip() and cur:
            cur.append(line)
    return sorted(tuple(b) for b in blocks), summary


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """2sw4hca with error counters set through ibsim's console."""
    from conftest import TOPOLOGIES
    from fabric import Fabric
    f = Fabric(TOPOLOGIES["2sw4hca"], tmp_path_factory.mktemp("faulty"),
               console=True)
    try:
        f.start()
        for c in ('PerformanceSet "Switch2"[5] PortCounters.PortRcvErrors=3',
                  'PerformanceSet "Hca4"[1] '
                  'PortCounters.SymbolErrorCounter=7',
                  'PerformanceSet "Switch1"[2] '
                  'PortCounters.PortRcvSwitchRelayErrors=2'):
            f.console(c)
        yield f
    finally:
        f.close()


@pytest.mark.parametrize("argv", [["ibqueryerrors"], ["ibqueryerrors", "-c"],
                                  ["ibqueryerrors", "--switch"],
                                  ["ibqueryerrors", "--ca"]])
def test_ibqueryerrors(faulty, argv):
    """Counters set in ibsim are reported node by node as ibqueryerrors
    reports them (port ALL included), with the same summary and status."""
    theirs = faulty.run(argv, "Hca2", check=False)
    ours = faulty.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                      check=False)
    assert ours.returncode == theirs.returncode == 1
    assert _error_report(ours.stdout) == _error_report(theirs.stdout)
    assert "[SymbolErrorCounter == 7]" in ours.stdout or \
        argv[-1] == "--switch"


def test_ibqueryerrors_clean_fabric(fabric):
    theirs = fabric.run(["ibqueryerrors"], "Hca2", check=False)
    ours = fabric.run([sys.executable, "-m", "rdma", "ibqueryerrors"],
                      "Hca2", check=False)
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout


def test_ibqueryerrors_threshold_and_clear(faulty):
    """--threshold hides a counter at or under it; -k clears what it read
    (read back with perfquery)."""
    res = faulty.run([sys.executable, "-m", "rdma", "ibqueryerrors",
                      "--ca", "--threshold", "SymbolErrorCounter=7"],
                     "Hca2", check=False)
    assert res.returncode == 0 and "Hca4" not in res.stdout
    assert "SymbolErrorCounter=7" in res.stdout
    res = faulty.run([sys.executable, "-m", "rdma", "ibqueryerrors", "--ca",
                      "-k"], "Hca2", check=False)
    assert res.returncode == 1 and "SymbolErrorCounter == 7" in res.stdout
    pc = diags.fields(faulty.run(["perfquery", "6", "1"], "Hca2").stdout)
    assert pc["SymbolErrorCounter"] == "0"
    bad = faulty.run([sys.executable, "-m", "rdma", "ibqueryerrors",
                      "--threshold", "Bogus=1"], "Hca2", check=False)
    assert bad.returncode == 2 and "Bogus" in bad.stderr


def _first_block(text):
    """ibportstate's output up to its peer query (which infiniband-diags
    sends by a LID-then-DR route that ibsim does not forward)."""
    return text.split("ibportstate: iberror")[0].rstrip().splitlines()


@pytest.mark.parametrize("argv", [["ibportstate", "4", "1"],
                                  ["ibportstate", "2", "1"],
                                  ["ibportstate", "3", "5"],
                                  ["ibportstate", "-D", "0", "1"],
                                  ["ibportstate", "3", "7", "query"]])
def test_ibportstate_query(fabric, argv):
    theirs = fabric.run(argv, "Hca2", check=False).stdout
    ours = fabric.run([sys.executable, "-m", "rdma", *argv], "Hca2").stdout
    assert _first_block(ours) == _first_block(theirs)
    assert "PortInfo:" in ours


def test_ibportstate_disable_enable(tmp_path):
    """disable takes a switch port's link down (PhysLinkState Disabled
    read back with smpquery), enable brings it back to Polling/LinkUp.
    On a fabric of its own: the others stay intact."""
    from conftest import TOPOLOGIES
    from fabric import Fabric
    with Fabric(TOPOLOGIES["1sw4hca"], tmp_path) as f:
        _disable_enable(f)


def _disable_enable(f):
    ours = [sys.executable, "-m", "rdma", "ibportstate"]
    out = f.run(ours + ["2", "4", "disable"], "Hca1").stdout
    assert "Disable may be irreversible" in out and "After PortInfo set" in out
    pi = diags.fields(f.run(["smpquery", "portinfo", "2", "4"],
                            "Hca1").stdout)
    assert pi["PhysLinkState"] == "Disabled"
    f.run(ours + ["2", "4", "enable"], "Hca1")
    pi = diags.fields(f.run(["smpquery", "portinfo", "2", "4"],
                            "Hca1").stdout)
    assert pi["PhysLinkState"] in ("Polling", "LinkUp")
    bad = f.run(ours + ["2", "4", "explode"], "Hca1", check=False)
    assert bad.returncode == 2 and "explode" in bad.stderr


@pytest.mark.parametrize("op", ["pkeys", "sl2vl", "vlarb"])
def test_smpquery_tables(fabric, all_lids, op):
    """pkeys, sl2vl, vlarb: switch ports 0, 1, 3 and 8 and every CA port,
    line for line."""
    for lid in all_lids:
        info = diags.fields(fabric.run(["smpquery", "nodeinfo", str(lid)],
                                       "Hca2").stdout)
        ports = (0, 1, 3, 8) if info["NodeType"] == "Switch" else (1,)
        for port in ports:
            theirs, ours = both(fabric, ["smpquery", op, str(lid),
                                         str(port)], "Hca2")
            assert ours.splitlines() == theirs.splitlines(), (lid, port)


def test_smpquery_guids(fabric):
    """guids (GUIDInfo, which the installed smpquery does not have): entry
    0 is the port GUID smpquery nodeinfo reports."""
    ours = fabric.run([sys.executable, "-m", "rdma", "smpquery", "guids",
                       "4", "1"], "Hca2").stdout.splitlines()
    info = diags.fields(fabric.run(["smpquery", "nodeinfo", "4"],
                                   "Hca2").stdout)
    assert ours[0] == "# GUIDInfo: Lid 4"
    assert ours[1].split()[1] == info["PortGuid"]
    assert ours[-1] == "32 guids capacity for this port"


@pytest.mark.parametrize("argv,words", [
    (["smpquery", "-t", "100", "nodeinfo", "99"], "SMPNodeInfo"),
    (["smpquery", "-D", "nodeinfo", "0,7"], "(0, 7)"),
    (["perfquery", "-t", "100", "99"], "PerformanceGet"),
    (["ibroute", "-D", "0,1,7"], "(0, 1, 7)")])
def test_unreachable_targets_are_one_line_errors(fabric, argv, words):
    """A LID nobody has or a route into an unlinked port: exit 1 and one
    line naming the RPC and the path, within the timeout."""
    res = fabric.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                     check=False, timeout=30)
    assert res.returncode == 1, res.stderr
    assert words in res.stderr and "timed out" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- dump_lfts / dump_mfts, ibnodes / ibrouters, --node-name-map, -f ---------

#: A node name map: Switch1, Hca1 (decimal GUID, a tab), Hca2, and a GUID
#: that is in no fabric.
NODE_NAME_MAP = """# node name map for the tests
0x0000000000200000 "core-sw-1"
1048576\t"host one"   # Hca1
0x100003 "host-two"
0x00000000deadbeef "nobody"
"""


@pytest.fixture(scope="module")
def name_map(tmp_path_factory):
    path = tmp_path_factory.mktemp("nnmap") / "node-name-map"
    path.write_text(NODE_NAME_MAP)
    return str(path)


def _fts_blocks(text):
    """dump_lfts/dump_mfts output as a sorted list of per-switch blocks
    (the order of switches is discovery order; infiniband-diags' scripts
    end with a warning that the command was replaced)."""
    text = text.split("\n*** WARNING ***")[0]
    blocks, cur = [], None
    for line in text.splitlines():
        if line.startswith(("Unicast lids [", "Multicast mlids [")):
            cur = [line]
            blocks.append(cur)
        elif cur is not None and line.strip():
            cur.append(line)
    return sorted(tuple(b) for b in blocks)


@pytest.mark.parametrize("argv", [["dump_lfts"], ["dump_lfts", "-n"],
                                  ["dump_lfts", "-a", "0", "8"],
                                  ["dump_lfts", "3"],
                                  ["dump_lfts", "2", "4"],
                                  ["dump_mfts"], ["dump_mfts", "-n"],
                                  ["dump_mfts", "-a", "0xc000", "0xc003"]])
def test_dump_fts(fabric, argv):
    """dump_lfts/dump_mfts: every switch's table, reached by the directed
    route discovery found, block for block as infiniband-diags' scripts
    (dump_fts) print them."""
    theirs, ours = both(fabric, argv, "Hca2")
    assert _fts_blocks(ours) == _fts_blocks(theirs)
    assert len(_fts_blocks(ours)) == 2
    assert "DR path slid 0; dlid 0; 0,1" in ours


@pytest.mark.parametrize("topology", ["net", "2sw2hca2port"])
def test_dump_lfts_other_topologies(fabrics, topology):
    theirs, ours = both(fabrics(topology), ["dump_lfts"], "Hca1")
    assert _fts_blocks(ours) == _fts_blocks(theirs) and ours.strip()


def test_dump_fts_bad_range(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "dump_lfts", "zz"],
                     "Hca2", check=False)
    assert res.returncode == 2 and "zz" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("cmd", ["ibnodes", "ibrouters"])
@pytest.mark.parametrize("topology", ["2sw4hca", "net"])
def test_ibnodes_ibrouters(fabrics, topology, cmd):
    theirs = fabrics(topology).run([cmd], "Hca1")
    ours = fabrics(topology).run([sys.executable, "-m", "rdma", cmd], "Hca1")
    assert sorted(ours.stdout.splitlines()) == \
        sorted(theirs.stdout.splitlines())
    assert ours.returncode == theirs.returncode == 0
    assert bool(ours.stdout.strip()) == (cmd == "ibnodes")


@pytest.mark.parametrize("argv", [["ibroute", "2"], ["ibroute", "3"],
                                  ["ibroute", "-M", "2"],
                                  ["ibtracert", "4", "1"],
                                  ["ibtracert", "1", "6"],
                                  ["ibtracert", "2", "4"],
                                  ["ibtracert", "-n", "4", "1"],
                                  ["smpquery", "nodedesc", "2"],
                                  ["smpquery", "nodedesc", "4"],
                                  ["smpquery", "nodedesc", "3"],
                                  ["dump_lfts"]])
def test_node_name_map(fabric, name_map, argv):
    """--node-name-map: the mapped nodes are shown by their names, the
    others by their descriptions, as infiniband-diags shows them."""
    theirs, ours = both(fabric, [argv[0], "--node-name-map", name_map,
                                 *argv[1:]], "Hca2")
    if argv[0] == "dump_lfts":
        assert _fts_blocks(ours) == _fts_blocks(theirs)
    else:
        assert ours.splitlines() == theirs.splitlines()
    if argv[0] != "smpquery" and "-n" not in argv:
        assert "core-sw-1" in ours


def test_node_name_map_ibnetdiscover_ibswitches(fabric, name_map, tmp_path):
    """ibnetdiscover --node-name-map: the same node blocks; ibswitches
    --node-name-map: what infiniband-diags' ibswitches reads from that
    topology file (its script takes no map but a file)."""
    theirs, ours = both(fabric, ["ibnetdiscover", "--node-name-map",
                                 name_map], "Hca2")
    assert _topology_blocks(ours) == _topology_blocks(theirs)
    assert '"core-sw-1"' in ours and '"host one"' in ours
    topo = tmp_path / "topo"
    topo.write_text(theirs)
    want = fabric.run(["ibswitches", str(topo)], "Hca2").stdout
    got = fabric.run([sys.executable, "-m", "rdma", "ibswitches",
                      "--node-name-map", name_map], "Hca2").stdout
    assert sorted(got.splitlines()) == sorted(want.splitlines())
    hosts = fabric.run([sys.executable, "-m", "rdma", "ibhosts",
                        "--node-name-map", name_map], "Hca2").stdout
    plain = fabric.run(["ibhosts"], "Hca2").stdout
    assert sorted(hosts.splitlines()) == sorted(
        plain.replace('"Hca1"', '"host one"').replace(
            '"Hca2"', '"host-two"').splitlines())


def test_node_name_map_ibqueryerrors(faulty, name_map):
    """ibqueryerrors --node-name-map names the switch and the CA with
    errors by the map, node block by block as infiniband-diags."""
    m = ["--node-name-map", name_map]
    theirs = faulty.run(["ibqueryerrors", *m], "Hca2", check=False)
    ours = faulty.run([sys.executable, "-m", "rdma", "ibqueryerrors", *m],
                      "Hca2", check=False)
    assert ours.returncode == theirs.returncode == 1
    assert _error_report(ours.stdout) == _error_report(theirs.stdout)
    assert '0x200000 "core-sw-1"' in ours.stdout


@pytest.mark.parametrize("text,words", [
    ("0xzz \"x\"\n", "line 1"), ("\n# c\n0x10\n", "line 3"),
    ("0x10 \"open\n", "quote")])
def test_node_name_map_bad_file(fabric, tmp_path, text, words):
    bad = tmp_path / "bad-map"
    bad.write_text(text)
    for argv in (["ibroute", "--node-name-map", str(bad), "2"],
                 ["ibnetdiscover", "--node-name-map", str(bad)],
                 ["ibroute", "--node-name-map", str(tmp_path / "none"),
                  "2"]):
        res = fabric.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                         check=False)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr
        assert (words if "none" not in argv[2] else "cannot read") in \
            res.stderr


@pytest.mark.parametrize("ends", [("4", "1"), ("1", "6"), ("2", "4"),
                                  ("4", "4")])
def test_ibtracert_force_known_ends(fabric, ends):
    """-f changes nothing when both ends are in the subnet."""
    theirs, ours = both(fabric, ["ibtracert", "-f", *ends], "Hca2")
    assert ours.splitlines() == theirs.splitlines() and ours.strip()


def test_ibtracert_force_unknown_destination(fabric):
    """-f to a LID nobody has: the trace is shown as far as
    infiniband-diags' goes (the source; the first switch has no entry),
    then both fail."""
    theirs = fabric.run(["ibtracert", "-f", "4", "99"], "Hca2", check=False)
    ours = fabric.run([sys.executable, "-m", "rdma", "ibtracert", "-f", "4",
                       "99"], "Hca2", check=False)
    assert theirs.returncode != 0 and ours.returncode != 0
    assert ours.stdout.splitlines() == [
        line for line in theirs.stdout.splitlines()
        if not line.startswith("ibtracert:")]
    assert ours.stdout.startswith("From ca ")
    assert "99" in ours.stderr and "Traceback" not in ours.stderr
    plain = fabric.run([sys.executable, "-m", "rdma", "ibtracert", "4",
                        "99"], "Hca2", check=False)
    assert plain.returncode == 2 and plain.stdout == ""


def _linkinfo_blocks(text):
    """iblinkinfo output as a sorted list of node blocks (a header line
    and its ports; in line mode every line is a block): the order of
    nodes is discovery order."""
    blocks, cur = [], None
    for line in text.splitlines():
        if line.startswith(("Switch: ", "CA: ", "Router: ", "0x")):
            cur = [line]
            blocks.append(cur)
        elif cur is not None and line.strip():
            cur.append(line)
    return sorted(tuple(b) for b in blocks)


@pytest.mark.parametrize("argv", [[], ["-l"], ["-p"], ["-d"], ["-l", "-p"],
                                  ["--switches-only"], ["--cas-only", "-l"],
                                  ["-D", "0,1"], ["-D", "0,1,3"],
                                  ["-D", "0,1", "-l"]],
                         ids=lambda a: " ".join(a) or "all")
def test_iblinkinfo(fabric, argv):
    """iblinkinfo: every node block (each port's LID, width, speed,
    states, peer and what the link could be) as infiniband-diags."""
    theirs, ours = both(fabric, ["iblinkinfo", *argv], "Hca2")
    assert _linkinfo_blocks(ours) == _linkinfo_blocks(theirs)
    assert ours.strip()


@pytest.mark.parametrize("topology", ["net", "2sw2hca2port", "1sw4hca"])
def test_iblinkinfo_topologies(fabrics, topology):
    theirs, ours = both(fabrics(topology), ["iblinkinfo"], "Hca1")
    assert _linkinfo_blocks(ours) == _linkinfo_blocks(theirs)
    assert len(_linkinfo_blocks(ours)) >= 3


def test_iblinkinfo_node_name_map(fabric, name_map):
    for extra in ([], ["-l"]):
        theirs, ours = both(fabric, ["iblinkinfo", "--node-name-map",
                                     name_map, *extra], "Hca2")
        assert _linkinfo_blocks(ours) == _linkinfo_blocks(theirs)
        assert "core-sw-1" in ours and "host one" in ours


@pytest.mark.parametrize("guid,header", [
    ("0x200001", "Switch: 0x0000000000200001 Switch2:"),
    ("0x100001", "CA: Hca1:")])
def test_iblinkinfo_by_guid(fabric, guid, header):
    """-G/-S PORTGUID: the block of the node that port is on, as in
    infiniband-diags' full iblinkinfo (the installed iblinkinfo resolves
    a GUID by a PathRecord, which fails on ibsim, and its -D partial scan
    of a CA shows the peer port wrong)."""
    full = fabric.run(["iblinkinfo"], "Hca2").stdout
    want = [b for b in _linkinfo_blocks(full) if b[0] == header]
    assert len(want) == 1
    for opt in ("-G", "-S"):
        ours = fabric.run([sys.executable, "-m", "rdma", "iblinkinfo", opt,
                           guid], "Hca2").stdout
        assert _linkinfo_blocks(ours) == want


def test_iblinkinfo_bad_guid(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "iblinkinfo", "-G",
                      "0x999"], "Hca2", check=False)
    assert res.returncode == 2 and "0x0000000000000999" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("argv", [["2", "0x11"], ["-D", "0,1", "0x11"],
                                  ["4", "0x11"], ["2", "0x15", "1"],
                                  ["-D", "0,1", "0x15", "3"],
                                  ["-D", "0,1,3", "0x12"],
                                  ["3", "0x19", "0"], ["-s", "4", "16"],
                                  ["-s", "-D", "0,1", "0x10"],
                                  ["6", "0x15", "1"]],
                         ids=lambda a: " ".join(a))
def test_smpdump(fabric, argv):
    """smpdump: the reply's 64 data bytes and the status line, byte for
    byte as infiniband-diags'."""
    theirs, ours = both(fabric, ["smpdump", *argv], "Hca2")
    assert ours == theirs and ours.strip()


@pytest.mark.parametrize("argv,words", [
    (["smpdump", "2"], "attribute ID"), (["smpdump", "2", "zz"], "zz"),
    (["smpdump", "2", "0x10000"], "0x10000"),
    (["smpdump", "-D", "0,1", "0x11", "-1"], "-1")])
def test_smpdump_bad_arguments(fabric, argv, words):
    res = fabric.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                     check=False)
    assert res.returncode == 2 and words in res.stderr
    assert "Traceback" not in res.stderr


def test_smpdump_unreachable(fabric):
    res = fabric.run([sys.executable, "-m", "rdma", "smpdump", "-t", "200",
                      "99", "0x11"], "Hca2", check=False, timeout=30)
    assert res.returncode == 1 and "timed out" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- --sa: the same answers from the SA's records -----------------------------

def _sa_view(text, switch_port):
    """smpquery output without a switch PortInfo's LocalPort: through
    the SA it is the port the SM's SMP came in by, not ours (IBA
    14.2.5.6)."""
    return [line for line in text.splitlines()
            if not (switch_port and line.startswith("LocalPort:"))]


@pytest.mark.parametrize("op", ["NI", "ND", "PI", "SI"])
def test_smpquery_sa(fabric, all_lids, op):
    """smpquery --sa OP LID (python-rdma's option: the attribute read from
    the SA's record for the LID) prints what infiniband-diags' smpquery
    reads by SMP, for every node."""
    for lid in all_lids:
        theirs = fabric.run(["smpquery", op, str(lid)], "Hca2", check=False)
        ours = fabric.run([sys.executable, "-m", "rdma", "smpquery", "--sa",
                           op, str(lid)], "Hca2", check=False)
        if theirs.returncode != 0:
            assert op == "SI" and ours.returncode != 0    # not a switch
            continue
        switch = op == "PI" and lid in (2, 3)
        assert _sa_view(ours.stdout, switch) == \
            _sa_view(theirs.stdout, switch), lid
        assert len(ours.stdout.splitlines()) == \
            len(theirs.stdout.splitlines())


@pytest.mark.parametrize("argv", [["ND", "0,1,3"], ["PI", "0,1", "3"],
                                  ["PI", "0,1,3,1"], ["SI", "0,1"],
                                  ["NI", "0,1,3,1"]])
def test_smpquery_sa_directed_route(fabric, argv):
    """--sa with a directed route: the route becomes a LID by LinkRecords,
    then the record of that LID answers."""
    theirs = fabric.run(["smpquery", "-D", *argv], "Hca2").stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "smpquery", "--sa",
                       "-D", *argv], "Hca2").stdout
    switch = argv[:2] == ["PI", "0,1"]
    assert _sa_view(ours, switch) == _sa_view(theirs, switch)
    assert len(ours.splitlines()) == len(theirs.splitlines())


@pytest.mark.parametrize("argv", [["2"], ["3"], ["-a", "3", "0", "8"],
                                  ["-M", "2"], ["-D", "0,1"]])
def test_ibroute_sa(fabric, argv):
    """ibroute --sa: LinearForwardingTableRecords (and NodeRecords for
    the destinations) give infiniband-diags' ibroute output."""
    theirs = fabric.run(["ibroute", *argv], "Hca2").stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "ibroute", "--sa",
                       *argv], "Hca2").stdout
    assert ours.splitlines() == theirs.splitlines()


@pytest.mark.parametrize("topology", ["2sw4hca", "net"])
def test_ibnetdiscover_sa(fabrics, topology):
    """ibnetdiscover --sa: the topology from NodeRecords, PortInfoRecords
    and LinkRecords, node block by node block as ibnetdiscover's SMP
    walk; ibswitches/ibhosts/ibnodes --sa as sets of lines."""
    fabric = fabrics(topology)
    theirs = fabric.run(["ibnetdiscover"], "Hca1").stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "ibnetdiscover",
                       "--sa"], "Hca1").stdout
    assert _topology_blocks(ours) == _topology_blocks(theirs)
    for cmd in ("ibswitches", "ibhosts", "ibnodes"):
        theirs = fabric.run([cmd], "Hca1").stdout
        ours = fabric.run([sys.executable, "-m", "rdma", cmd, "--sa"],
                          "Hca1").stdout
        assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
        assert ours.strip()


@pytest.mark.parametrize("argv", [[], ["-l", "-p"], ["-d"]])
def test_iblinkinfo_sa(fabric, argv):
    """iblinkinfo --sa: the same node blocks from the SA's records."""
    theirs = fabric.run(["iblinkinfo", *argv], "Hca2").stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "iblinkinfo", "--sa",
                       *argv], "Hca2").stdout
    assert _linkinfo_blocks(ours) == _linkinfo_blocks(theirs)
    assert ours.strip()


@pytest.mark.parametrize("opt", ["-l", "-H", "-S", "-R", "-p"])
@pytest.mark.parametrize("topology", ["2sw4hca", "net"])
def test_ibnetdiscover_lists_and_ports(fabrics, topology, opt):
    """ibnetdiscover -l/-H/-S/-R (node lists) and -p (ports report): the
    same lines as infiniband-diags' (in discovery order: compared as
    sets)."""
    theirs, ours = both(fabrics(topology), ["ibnetdiscover", opt], "Hca1")
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
    assert bool(ours.strip()) == (opt != "-R")


def test_ibnetdiscover_full_and_name_map(fabric, name_map):
    """-f adds s=/w=/v= to every link; -l and -p take --node-name-map."""
    theirs, ours = both(fabric, ["ibnetdiscover", "-f"], "Hca2")
    assert _topology_blocks(ours) == _topology_blocks(theirs)
    assert " s=1 w=2 v=4" in ours
    for opt in ("-l", "-p"):
        theirs, ours = both(fabric, ["ibnetdiscover", opt, "--node-name-map",
                                     name_map], "Hca2")
        assert sorted(ours.splitlines()) == sorted(theirs.splitlines())
        assert "core-sw-1" in ours


def _pc_blocks(text):
    """perfquery output as [(header, {field: value})], one per port."""
    return [(b.splitlines()[0], diags.fields(b))
            for b in ("\n" + text).split("\n# ")[1:]]


@pytest.mark.parametrize("argv", [["-a", "2", "1,3"], ["-l", "2", "1-3"],
                                  ["-l", "-a", "2"], ["2", "255"],
                                  ["-a", "2"], ["-x", "-a", "2", "1,3"],
                                  ["-l", "3", "1,5,8"], ["-a", "3", "2-5"],
                                  ["-x", "-l", "-a", "3"]],
                         ids=lambda a: " ".join(a))
def test_perfquery_ports(fabric, argv):
    """perfquery -a (PortSelect 255, or the sum of the ports given), -l
    (each port) and port lists/ranges: the same blocks, error counters
    equal, traffic counters no lower than infiniband-diags' read just
    before."""
    theirs, ours = both(fabric, ["perfquery", *argv], "Hca2")
    t, o = _pc_blocks(theirs), _pc_blocks(ours)
    assert [h for h, _ in o] == [h for h, _ in t] and o
    for (_, tf), (_, of) in zip(t, o):
        assert list(of) == list(tf)
        for k in tf:
            if k in TRAFFIC:
                assert diags.as_int(of[k]) >= diags.as_int(tf[k]), k
            else:
                assert of[k] == tf[k], k


@pytest.mark.parametrize("argv", [["4", "255"], ["-a", "4"],
                                  ["2", "3-1"]])
def test_perfquery_ports_refused(fabric, argv):
    """Port 255 of a PMA without AllPortSelect, -a on a CA whose second
    port does not answer, a backwards range, a bad list: both fail, ours
    with one line naming the problem."""
    theirs = fabric.run(["perfquery", *argv], "Hca2", check=False)
    ours = fabric.run([sys.executable, "-m", "rdma", "perfquery", *argv],
                      "Hca2", check=False)
    assert theirs.returncode != 0 and ours.returncode != 0
    assert "Traceback" not in ours.stderr and ours.stdout == ""
    assert ours.stderr.strip().splitlines()[-1].startswith(
        "ibtool perfquery: ")


def test_perfquery_bad_port_list(fabric):
    """A port list with a word in it (infiniband-diags reads it as port
    0): ours refuses it."""
    res = fabric.run([sys.executable, "-m", "rdma", "perfquery", "2",
                      "1,zz"], "Hca2", check=False)
    assert res.returncode == 2 and "1,zz" in res.stderr


@pytest.mark.parametrize("argv", [["-E", "2", "1"], ["-D", "2", "3"],
                                  ["-E", "4", "1"], ["-D", "6", "1"],
                                  ["--rcverr", "3", "5"],
                                  ["--xmtdisc", "3", "2"],
                                  ["--flowctlcounters", "2", "1"],
                                  ["--oprcvcounters", "4", "1"],
                                  ["--vloppackets", "3", "3"],
                                  ["--vlopdata", "4", "1"],
                                  ["--vlxmitflowctlerrors", "2", "1"],
                                  ["--vlxmitcounters", "3", "5"]],
                         ids=lambda a: " ".join(a))
def test_perfquery_details(fabric, argv):
    """-E (PortRcvErrorDetails), -D (PortXmitDiscardDetails, -D as in
    infiniband-diags and python-rdma) and the flow-control, op-code and
    per-VL counters: line for line."""
    theirs, ours = both(fabric, ["perfquery", *argv], "Hca2")
    assert ours.splitlines() == theirs.splitlines()
    assert len(ours.splitlines()) >= 5 and ours.startswith("# Port")


@pytest.mark.parametrize("ours,theirs", [("-F", "--flowctlcounters"),
                                         ("--vl-xmit-errs",
                                          "--vlxmitflowctlerrors"),
                                         ("--vl-xmit-wait",
                                          "--vlxmitcounters")])
def test_perfquery_python_rdma_names(fabric, ours, theirs):
    """python-rdma's option names read what infiniband-diags' do."""
    want = fabric.run(["perfquery", theirs, "3", "1"], "Hca2").stdout
    got = fabric.run([sys.executable, "-m", "rdma", "perfquery", ours, "3",
                      "1"], "Hca2").stdout
    assert got == want and got.strip()


def test_sminfo_ibaddr_ibtracert_sa(fabric, all_lids):
    """sminfo --sa (SMInfoRecord), ibaddr --sa (NodeRecord and
    PortInfoRecord) and ibtracert --sa (the subnet from the SA's records)
    print what infiniband-diags reads by SMPs."""
    ours = [sys.executable, "-m", "rdma"]
    theirs = fabric.run(["sminfo"], "Hca2").stdout
    mine = fabric.run(ours + ["sminfo", "--sa"], "Hca2").stdout
    assert _sminfo_fields(mine) == _sminfo_fields(theirs)
    for argv in (["4"], ["-l", "2"], ["-D", "0,1"], ["-g", "6"]):
        theirs = fabric.run(["ibaddr", *argv], "Hca2").stdout
        mine = fabric.run(ours + ["ibaddr", "--sa", *argv], "Hca2").stdout
        assert mine == theirs and mine.strip(), argv
    for d in all_lids:
        theirs = fabric.run(["ibtracert", "1", str(d)], "Hca2").stdout
        mine = fabric.run(ours + ["ibtracert", "--sa", "1", str(d)],
                          "Hca2").stdout
        assert mine.splitlines() == theirs.splitlines(), d


def test_perfquery_qp1dropped_is_its_own_field(faulty):
    """QP1Dropped is bytes 20-21 of PortCounters: with PortXmitData past
    16 bits (set through ibsim's console) it still reads as
    infiniband-diags reads it, not as PortXmitData's upper half."""
    faulty.console('PerformanceSet "Hca3"[1] PortCounters.PortXmitData='
                   '327680')
    theirs = diags.fields(faulty.run(["perfquery", "5", "1"],
                                     "Hca2").stdout)
    ours = diags.fields(faulty.run([sys.executable, "-m", "rdma",
                                    "perfquery", "5", "1"], "Hca2").stdout)
    assert diags.as_int(theirs["PortXmitData"]) >= 327680
    assert ours["QP1Dropped"] == theirs["QP1Dropped"]


@pytest.mark.parametrize("argv", [["ibqueryerrors"], ["ibqueryerrors", "-c"],
                                  ["ibqueryerrors", "--switch"]])
def test_ibqueryerrors_sa(faulty, argv):
    """ibqueryerrors --sa: the subnet from the SA's records, the counters
    from the PMAs: the same report as infiniband-diags' (the switches'
    counters set by the fixture; the CAs' may have been cleared by -k
    above)."""
    theirs = faulty.run(argv, "Hca2", check=False)
    ours = faulty.run([sys.executable, "-m", "rdma", *argv, "--sa"], "Hca2",
                      check=False)
    assert ours.returncode == theirs.returncode == 1
    assert _error_report(ours.stdout) == _error_report(theirs.stdout)
    assert "Errors for 0x200001" in ours.stdout
