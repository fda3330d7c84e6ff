"""``ibtool ibportstate`` set operations against infiniband-diags'
``ibportstate`` on ibsim.

A set changes the fabric, so each operation runs on fabrics of its own:
a fresh 1-switch fabric without an SM (nothing changes port states
behind the test) for infiniband-diags, another for ours.  Both tools'
outputs (the PortInfo before, the SMA's answer after the set) must be
equal line for line, and so must the port's state read back afterwards
by ``smpquery`` in each fabric.  Targets are reached by directed route
(no SM: no LIDs); the route runs from Hca1 through switch port 1, which
no test disables.
"""
import sys

import pytest

import diags
from conftest import TOPOLOGIES
from fabric import Fabric

#: (target route, port, operation words)
CASES = [
    ("0,1", "4", ["disable"]), ("0,1", "4", ["enable"]),
    ("0,1", "3", ["reset"]), ("0,1", "4", ["on"]),
    ("0,1", "2", ["off"]), ("0,1", "4", ["speed", "3"]),
    ("0,1", "4", ["speed", "1"]), ("0,1", "4", ["width", "1"]),
    ("0,1", "3", ["width", "3"]), ("0,1", "4", ["width", "255"]),
    ("0,1", "4", ["vls", "2"]), ("0,1", "4", ["mtu", "4"]),
    ("0,1", "4", ["espeed", "1"]), ("0,1", "4", ["arm"]),
    ("0,1", "4", ["down"]), ("0,1", "0", ["lid", "9", "smlid", "3"]),
    ("0,1,2", "1", ["width", "1"]), ("0,1,3", "1", ["speed", "3"]),
    ("0,1,2", "1", ["lid", "0x20", "lmc", "2", "arm"]),
    ("0,1,4", "1", ["mkeylease", "60", "mkeyprot", "1"]),
    # The SMA disables the port the SMP came in by: no answer comes back
    # (both tools fail) and the CA is out of reach afterwards.
    ("0,1,3", "1", ["disable"]),
]


def _run_on_fresh_fabric(tmp_path, tag, argv):
    """Run *argv* on Hca1 of a fresh SM-less 1sw4hca fabric; return (its
    result, the target port's PortInfo as smpquery shows it after)."""
    route, port = argv[argv.index("-D") + 1], argv[argv.index("-D") + 2]
    hops = route.split(",")
    reads = [(route, port)]
    if len(hops) > 2:
        # A CA port: also read its switch's side of the link (the CA is
        # out of reach once its link is down).
        reads.append((",".join(hops[:-1]), hops[-1]))
    with Fabric(TOPOLOGIES["1sw4hca"], tmp_path / tag, sm_node=None) as f:
        res = f.run(argv, "Hca1", check=False)
        after = []
        for r, p in reads:
            q = f.run(["smpquery", "-D", "portinfo", r, p], "Hca1",
                      check=False)
            after.append((q.returncode, q.stdout))
    return res, after


@pytest.mark.parametrize("route,port,words", CASES,
                         ids=lambda v: v if isinstance(v, str)
                         else " ".join(v))
def test_ibportstate_set(tmp_path, route, port, words):
    """The same PortInfo before and after the set, the same state read
    back, the same exit status."""
    argv = ["ibportstate", "-D", route, port, *words]
    theirs, t_after = _run_on_fresh_fabric(tmp_path, "diags", argv)
    ours, o_after = _run_on_fresh_fabric(
        tmp_path, "ours", [sys.executable, "-m", "rdma", *argv])
    answered = not (len(route.split(",")) > 2 and words == ["disable"])
    if answered:
        assert ours.returncode == theirs.returncode == 0, ours.stderr
        assert ours.stdout.splitlines() == theirs.stdout.splitlines()
        assert "After PortInfo set:" in ours.stdout or words == ["on"]
    else:
        assert theirs.returncode != 0 and ours.returncode == 1
        assert "timed out" in ours.stderr and "(0, 1, 3)" in ours.stderr
        # The PortInfo before the set is the same.
        assert ours.stdout.splitlines() == \
            theirs.stdout.splitlines()[:len(ours.stdout.splitlines())]
        assert o_after[0][0] != 0       # the CA no longer answers
    assert o_after == t_after
    assert diags.fields(o_after[-1][1])["PhysLinkState"]


def test_ibportstate_state_changes_are_real(tmp_path):
    """Read back with infiniband-diags after our sets: disable makes the
    link Disabled, enable brings it back to Polling, width 1 makes it
    1X, width 2 enables 4X again, arm makes the port Armed."""
    ours = [sys.executable, "-m", "rdma", "ibportstate", "-D", "0,1", "4"]
    with Fabric(TOPOLOGIES["1sw4hca"], tmp_path, sm_node=None) as f:
        def state():
            return diags.fields(f.run(["smpquery", "-D", "portinfo", "0,1",
                                       "4"], "Hca1").stdout)
        assert state()["PhysLinkState"] == "LinkUp"
        f.run(ours + ["disable"], "Hca1")
        assert state()["PhysLinkState"] == "Disabled"
        f.run(ours + ["enable"], "Hca1")
        assert state()["PhysLinkState"] in ("Polling", "LinkUp")
        f.run(ours + ["width", "1"], "Hca1")
        assert state()["LinkWidthEnabled"] == "1X"
        assert state()["LinkWidthActive"] == "1X"
        f.run(ours + ["width", "2"], "Hca1")
        f.run(ours + ["arm"], "Hca1")
        st = state()
        assert st["LinkState"] == "Armed" and st["LinkWidthEnabled"] == "4X"


@pytest.mark.parametrize("words,message", [
    (["speed", "16"], "invalid speed value 16"),
    (["width", "40"], "invalid width value 40"),
    (["vls", "0"], "invalid vls value 0"),
    (["lid", "0xc000"], "invalid lid value 0xc000"),
    (["lmc", "8"], "invalid lmc value 8"),
    (["speed"], "speed needs a value"),
    (["speed", "fast"], "bad speed value 'fast'"),
    (["arm", "active"], "only one of"),
    (["explode"], "unknown operation 'explode'"),
    (["fdr10", "1"], "fdr10 needs Mellanox"),
    (["mkeyprot", "1"], "M_Key fields can only be set"),
])
def test_ibportstate_bad_operations(fabric, words, message):
    """Bad operations and values: exit 2, one line naming the problem,
    nothing sent (the session fabric is shared, so a set here would be
    a bug)."""
    res = fabric.run([sys.executable, "-m", "rdma", "ibportstate", "2",
                      "4", *words], "Hca2", check=False)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert "After PortInfo set" not in res.stdout


def test_ibportstate_port_out_of_range(fabric):
    for port, message in (("9", "has 8 ports, not 9"),
                          ("300", "out of range"), ("x", "bad port")):
        res = fabric.run([sys.executable, "-m", "rdma", "ibportstate", "2",
                          port, "disable"], "Hca2", check=False)
        assert res.returncode == 2 and message in res.stderr, res.stderr


def test_ibportstate_refused_set(tmp_path):
    """A transition the SMA refuses (Active on a port that is not Armed):
    infiniband-diags fails too; ours exits 1 with one line naming the
    SubnSet, the port and the SMA's status."""
    argv = ["ibportstate", "-D", "0,1", "4", "active"]
    with Fabric(TOPOLOGIES["1sw4hca"], tmp_path, sm_node=None) as f:
        theirs = f.run(argv, "Hca1", check=False)
        ours = f.run([sys.executable, "-m", "rdma", *argv], "Hca1",
                     check=False)
    assert theirs.returncode != 0
    assert ours.returncode == 1
    err = ours.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "SubnSet(SMPPortInfo" in err and "(0, 1)" in err
    assert "invalid attribute" in err


@pytest.mark.parametrize("argv", [["2", "0"], ["3", "0"], ["-K", "2", "0"],
                                  ["-K", "4", "1"]],
                         ids=lambda a: " ".join(a))
def test_ibportstate_query_port0_and_keys(fabric, argv):
    """A switch's port 0 shows the M_Key fields as a CA port does; -K
    shows the M_Key itself (read-only: the session fabric)."""
    theirs = fabric.run(["ibportstate", *argv], "Hca2", check=False).stdout
    ours = fabric.run([sys.executable, "-m", "rdma", "ibportstate", *argv],
                      "Hca2").stdout
    t_lines = [ln for ln in theirs.splitlines() if "iberror" not in ln]
    assert ours.splitlines() == t_lines
    assert "Mkey:" in ours
