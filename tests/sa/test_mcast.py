"""Multicast forwarding tables against infiniband-diags on one ibsim fabric
of this module's own (two 24-port switches, 32 HCAs: MFT entries have
two 16-port positions), with multicast groups joined through the SA:

- ``ibtool ibroute -M`` (every option) equal to ``ibroute -M``;
- ``ibtool ibtracert -m MLID`` and ``-n`` equal to ``ibtracert``;
- :meth:`rdma.subnet.Switch.get_switch_fdb` with ``do_mfdb`` (by SMPs and
  through an :class:`rdma.satransactor.SATransactor`) equal to the masks
  ``ibroute -M -n`` prints.
"""
import json
import sys

import pytest

import diags
from conftest import HERE
from fabric import Fabric

TOPOLOGY = HERE / "topologies" / "2sw32hca"
OPS = str(HERE / "mcast_ops.py")
#: Groups and the HCAs that join them: the IPoIB broadcast group (opensm
#: makes it, MLID 0xc000) and two groups the first joiner creates.
GROUPS = [("ff12:401b:ffff::ffff:ffff", False,
           ["Hca1", "Hca5", "Hca17", "Hca30"]),
          ("ff12:601b:ffff::1:ff00:1", True, ["Hca2", "Hca20", "Hca21"]),
          ("ff12:601b:ffff::1:ff00:2", True, ["Hca16", "Hca3"])]
#: MLIDs with ports in each switch's table.
ROWS = {"Switch1": 3, "Switch2": 2}


@pytest.fixture(scope="module")
def mfab(tmp_path_factory):
    """The module's fabric with the groups of GROUPS joined; yields
    (fabric, {group MGID: MLID}, {node name: LID})."""
    f = Fabric(TOPOLOGY, tmp_path_factory.mktemp("mcast"))
    try:
        f.start()
        mlids = {}
        for mgid, create, members in GROUPS:
            for node in members:
                argv = [sys.executable, OPS, "join", mgid]
                if create and node == members[0]:
                    argv.append("create")
                mlids[mgid] = json.loads(f.run(argv, node).stdout)
        out = f.run(["saquery", "-N"], "Hca2").stdout
        lids = {}
        lid = None
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("lid."):
                lid = int(line.split(".")[-1], 0)
            elif line.startswith("NodeDescription.") and lid is not None:
                lids[line.split(".", 1)[1].strip(".")] = lid
        yield f, mlids, lids
    finally:
        f.close()


def both(f, argv, node="Hca2"):
    """(infiniband-diags' result, ours): stdout and whether it failed."""
    t = f.run(list(argv), node, check=False)
    o = f.run([sys.executable, "-m", "rdma", *argv], node, check=False)
    return (t.stdout, t.returncode != 0), (o.stdout, o.returncode != 0), o


def test_groups_have_distinct_mlids(mfab):
    f, mlids, lids = mfab
    assert sorted(mlids.values()) == [0xC000, 0xC001, 0xC002]
    assert {"Switch1", "Switch2", "Hca1", "Hca32"} <= set(lids)


@pytest.mark.parametrize("opts", [[], ["-n"], ["-a"], ["-n", "-a"],
                                  ["@", "0xc001"],
                                  ["@", "0xc001", "0xc001"],
                                  ["@", "0xc3f0", "0xd000"],
                                  ["@", "0xbfff"]],
                         ids=lambda o: " ".join(o) or "plain")
@pytest.mark.parametrize("switch", ["Switch1", "Switch2"])
def test_ibroute_multicast(mfab, switch, opts):
    """ibroute -M: the header (25 ports: a tens row too), every MLID with
    a port mask, masks in both 16-port positions, the count line."""
    f, mlids, lids = mfab
    sw = str(lids[switch])
    if "@" in opts:
        i = opts.index("@")
        argv = ["ibroute", "-M", *opts[:i], sw, *opts[i + 1:]]
    else:
        argv = ["ibroute", "-M", *opts, sw]
    theirs, ours, res = both(f, argv)
    assert ours == theirs, res.stderr
    assert "mlids dumped" in ours[0]
    if not opts:
        rows = [ln for ln in ours[0].splitlines() if ln.startswith("0xc")]
        # Group 3 has members on Switch1 only.
        assert len(rows) == ROWS[switch]
        # A group spans both switches: an inter-switch port (17 or 18,
        # position 1) is in its mask.
        assert any(r[12 + 2 * 17] == "x" or r[12 + 2 * 18] == "x"
                   for r in rows)


def test_ibroute_multicast_by_route(mfab):
    f, _, _ = mfab
    theirs, ours, res = both(f, ["ibroute", "-M", "-D", "0,1,17"])
    assert ours == theirs and "DR path" in ours[0]


def test_ibroute_multicast_errors(mfab):
    """Not a switch, a start MLID that is not a number: one line, no
    traceback."""
    f, _, lids = mfab
    for argv, words in ((["ibroute", "-M", str(lids["Hca4"])],
                         "not a switch"),
                        (["ibroute", "-M", str(lids["Switch1"]), "zz"],
                         "zz"),
                        (["ibroute", "-M", str(lids["Switch1"]),
                          "0x1ffff"], "0x1ffff")):
        res = f.run([sys.executable, "-m", "rdma", *argv], "Hca2",
                    check=False)
        assert res.returncode == 2, res.stderr
        assert words in res.stderr and "Traceback" not in res.stderr


def _reference_masks(f, lid):
    """{mlid: mask} from infiniband-diags' ``ibroute -M -n``."""
    out = f.run(["ibroute", "-M", "-n", str(lid)], "Hca2").stdout
    masks = {}
    for line in out.splitlines():
        if line.startswith("0xc"):
            mlid, hexes = line.split()
            masks[f"0x{int(mlid, 16):04x}"] = sum(
                int(hexes[i:i + 4], 16) << (4 * i)
                for i in range(0, len(hexes), 4))
    return masks


@pytest.mark.parametrize("how", ["smp", "sa"])
def test_switch_get_switch_fdb_mfdb(mfab, how):
    """Switch.get_switch_fdb(do_mfdb=True): the whole table (capacity
    rounded to 32 MLIDs), every non-empty entry equal to ibroute's, read
    by SMPs or through the SA (MulticastForwardingTableRecords)."""
    f, _, lids = mfab
    for name in ("Switch1", "Switch2"):
        lid = lids[name]
        want = _reference_masks(f, lid)
        got = json.loads(f.run([sys.executable, OPS, "mfdb", str(lid),
                                how], "Hca2").stdout)
        assert got["masks"] == want and len(want) == ROWS[name]
        assert got["size"] % 32 == 0 and got["size"] >= 32


def test_mft_attribute_modifier_range(mfab):
    f, _, _ = mfab
    errs = json.loads(f.run([sys.executable, OPS, "bad_mft"],
                            "Hca2").stdout)
    assert "block 600" in errs[0] and "position 16" in errs[1]


def _pairs(lids):
    return [("Hca1", "Hca30"), ("Hca30", "Hca1"), ("Hca17", "Hca5"),
            ("Hca5", "Hca1"), ("Switch1", "Hca17"), ("Switch2", "Hca5"),
            ("Hca2", "Hca21"), ("Hca20", "Hca2"), ("Hca3", "Hca16"),
            ("Hca16", "Switch1"), ("Hca30", "Switch2"),
            ("Hca1", "Switch2")]


@pytest.mark.parametrize("brief", [False, True])
def test_ibtracert_multicast(mfab, brief):
    """ibtracert -m MLID SRC DST for members of each group (CA to CA on
    one switch and across, switch sources and destinations): the same
    hops, ports and LIDs as infiniband-diags'."""
    f, mlids, lids = mfab
    n = ["-n"] if brief else []
    checked = 0
    for mgid, _, members in GROUPS:
        mlid = f"0x{mlids[mgid]:x}"
        for s, d in _pairs(lids):
            if s.startswith("Hca") and s not in members:
                continue
            if d.startswith("Hca") and d not in members:
                continue
            theirs, ours, res = both(f, ["ibtracert", *n, "-m", mlid,
                                         str(lids[s]), str(lids[d])])
            assert ours[0] == theirs[0], (mgid, s, d, res.stderr)
            assert not ours[1] and not theirs[1]
            checked += 1
    assert checked >= 10


def test_ibtracert_multicast_no_route(mfab):
    """A destination that is not in the group, an MLID past the
    switches' tables, a unicast LID as MLID, source = destination: both
    tools fail; ours says why in one line."""
    f, mlids, lids = mfab
    for args, words in ((["0xc001", lids["Hca1"], lids["Hca5"]],
                         "no multicast route"),
                        (["0xc3ff", lids["Hca1"], lids["Hca5"]],
                         "no multicast route"),
                        (["0xd000", lids["Hca1"], lids["Hca5"]],
                         "multicast table of 'Switch1': past its "
                         "capacity"),
                        (["0xbfff", lids["Hca1"], lids["Hca5"]],
                         "not a multicast LID"),
                        (["0xc000", lids["Hca1"], lids["Hca1"]],
                         "two different ports")):
        argv = ["ibtracert", "-m", *map(str, args)]
        theirs, ours, res = both(f, argv)
        assert theirs[1] and ours[1]
        assert words in res.stderr and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_ibtracert_no_info(mfab):
    """ibtracert -n: GUIDs and ports only, for CA-CA across the
    switches, CA-switch and switch-CA."""
    f, _, lids = mfab
    for s, d in (("Hca1", "Hca32"), ("Hca17", "Switch1"),
                 ("Switch2", "Hca3"), ("Hca4", "Hca9")):
        theirs, ours, res = both(f, ["ibtracert", "-n", str(lids[s]),
                                     str(lids[d])])
        assert ours == theirs, res.stderr
        assert ours[0].startswith("From {0x")


def _port_guids(f):
    """{node description: port GUID} of every end port (saquery)."""
    out = f.run(["saquery", "-N"], "Hca2").stdout
    guids = {}
    for rec in diags.blocks(out, "NodeRecord dump"):
        guids[rec["NodeDescription"]] = rec["port_guid"]
    return guids


def test_ibtracert_by_guid_and_reversed(mfab):
    """-G: port GUIDs resolved through the discovered subnet give the
    route ibtracert prints for their LIDs (the installed ibtracert's own
    -G fails on ibsim: its SA PathRecord query does); -r (python-rdma's)
    swaps the ends; a GUID nobody has is one line naming it."""
    f, mlids, lids = mfab
    guids = _port_guids(f)
    ours = [sys.executable, "-m", "rdma", "ibtracert"]
    for s, d, extra in (("Hca1", "Hca32", []), ("Hca30", "Switch1", []),
                        ("Hca1", "Hca30", ["-m", "0xc000"])):
        want = f.run(["ibtracert", *extra, str(lids[s]), str(lids[d])],
                     "Hca2").stdout
        got = f.run(ours + ["-G", *extra, guids[s], guids[d]],
                    "Hca2").stdout
        assert got == want and want.startswith("From ")
        rev = f.run(ours + ["-r", *extra, str(lids[d]), str(lids[s])],
                    "Hca2").stdout
        assert rev == want
    bad = f.run(ours + ["-G", guids["Hca1"], "0x999"], "Hca2", check=False)
    assert bad.returncode == 2 and "0x0000000000000999" in bad.stderr


def test_ibtracert_ports_file(mfab):
    """--ports-file: every pair of the file traced (comments and blank
    lines skipped, the arguments ignored), then the count line; LIDs,
    -n, -G and -m; a pair that cannot be traced stops there, the traces
    before it printed, the error naming the line."""
    f, mlids, lids = mfab
    guids = _port_guids(f)
    L = {k: str(v) for k, v in lids.items()}
    files = {
        "lids.txt": f"# pairs\n{L['Hca1']} {L['Hca32']}\n\n"
                    f"{L['Hca17']}   {L['Switch1']}\n{L['Hca5']} "
                    f"{L['Hca4']}\n",
        "guids.txt": f"{guids['Hca1']} {guids['Hca30']}\n"
                     f"{guids['Switch2']} {guids['Hca3']}\n",
        # One pair: infiniband-diags keeps the switches of a multicast
        # walk for the next pair of the file (a static table in
        # find_mcpath), so its second trace reports a "circle" and a wrong
        # source; ours starts each walk afresh.
        "mcast.txt": f"# one pair\n{L['Hca17']} {L['Hca5']}\n",
        "bad.txt": f"{L['Hca1']} {L['Hca32']}\n999 {L['Hca1']}\n"
                   f"{L['Hca2']} {L['Hca3']}\n",
    }
    for name, text in files.items():
        (f.scratch / name).write_text(text)
    for opts, name in ((["--ports-file", "lids.txt", "1", "2"], "lids.txt"),
                       (["-n", "--ports-file", "lids.txt"], "lids.txt"),
                       (["-G", "--ports-file", "guids.txt"], "guids.txt"),
                       (["-m", "0xc000", "--ports-file", "mcast.txt"],
                        "mcast.txt")):
        theirs, ours, res = both(f, ["ibtracert", *opts])
        assert ours == theirs, (opts, res.stderr)
        assert ours[0].rstrip().endswith(f"pairs processed from {name}")
    theirs, ours, res = both(f, ["ibtracert", "--ports-file", "bad.txt"])
    # infiniband-diags prints its error line on stdout.
    t_lines = [ln for ln in theirs[0].splitlines() if "iberror" not in ln]
    assert theirs[1] and ours[1] and ours[0].splitlines() == t_lines
    assert ours[0].count("From ") == 1
    assert "999" in res.stderr and "line 2 of bad.txt" in res.stderr
    missing = f.run([sys.executable, "-m", "rdma", "ibtracert",
                     "--ports-file", "nowhere.txt"], "Hca2", check=False)
    assert missing.returncode == 2 and "nowhere.txt" in missing.stderr


@pytest.fixture(scope="module")
def fatfab(tmp_path_factory):
    """A two-level fat-tree (8 leaves, 4 spines, 32 HCAs) whose broadcast
    group has members under five leaves: a multicast tree across spines.
    Yields (fabric, {node name: LID})."""
    f = Fabric(HERE / "topologies" / "fattree8",
               tmp_path_factory.mktemp("mcast-fattree"))
    try:
        f.start()
        for node in ("Hca1", "Hca6", "Hca11", "Hca20", "Hca31"):
            f.run([sys.executable, OPS, "join", GROUPS[0][0]], node)
        out = f.run(["saquery", "-N"], "Hca2").stdout
        lids, lid = {}, None
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("lid."):
                lid = int(line.split(".")[-1], 0)
            elif line.startswith("NodeDescription.") and lid is not None:
                lids[line.split(".", 1)[1].strip(".")] = lid
        yield f, lids
    finally:
        f.close()


def test_fattree_multicast(fatfab):
    """On the fat-tree: ibroute -M of leaves and spines, and ibtracert -m
    between members under different leaves, from a leaf and to a spine,
    equal to infiniband-diags'."""
    f, lids = fatfab
    for sw in ("Leaf1", "Leaf5", "Spine1", "Spine4"):
        theirs, ours, res = both(f, ["ibroute", "-M", str(lids[sw])])
        assert ours == theirs, (sw, res.stderr)
    traced = 0
    for s, d in (("Hca1", "Hca31"), ("Hca20", "Hca6"), ("Hca11", "Hca1"),
                 ("Leaf1", "Hca31"), ("Hca1", "Spine2"),
                 ("Hca31", "Leaf3")):
        theirs, ours, res = both(f, ["ibtracert", "-m", "0xc000",
                                     str(lids[s]), str(lids[d])])
        # A spine the tree does not use: both fail (infiniband-diags
        # prints its error on stdout).
        t_lines = [ln for ln in theirs[0].splitlines()
                   if "iberror" not in ln]
        assert (ours[0].splitlines(), ours[1]) == (t_lines, theirs[1]), \
            (s, d, res.stderr)
        traced += not ours[1]
    assert traced >= 4
