"""InfiniBand subnet validation (``ibtool validate-subnet``, the pytest
suite rdma.validation.ib_suite) on ibsim: it passes on the healthy subnet
and fails, naming node, port and value, when ibsim's console breaks it
(Unlink, PerformanceSet) or when the SM or a forwarding entry is gone."""
import sys
from pathlib import Path

import pytest

from conftest import TOPOLOGIES
from fabric import Fabric, _stop

sys.path.insert(0, str(Path(__file__).resolve().parent / "topologies"))


def validate(fabric, *args, node="Hca2"):
    return fabric.run([sys.executable, "-m", "rdma", "validate-subnet",
                       *args], node, timeout=60, check=False)


@pytest.fixture(scope="module")
def sub(tmp_path_factory):
    """2sw4hca with ibsim's console, and its expected topology written by
    ``ibtool ibnetdiscover`` while it is healthy."""
    scratch = tmp_path_factory.mktemp("ibval")
    f = Fabric(TOPOLOGIES["2sw4hca"], scratch, console=True)
    try:
        f.start()
        f.expected = scratch / "expected.topo"
        f.run([sys.executable, "-m", "rdma", "ibnetdiscover",
               str(f.expected)], "Hca2")
        yield f
    finally:
        f.close()


def test_healthy_subnet_passes(sub):
    res = validate(sub, "--topology", str(sub.expected))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 passed" in res.stdout


def test_report_is_a_table(sub):
    """The report is ``ibtool validate``'s: a header, one row per check
    (test, result, detail), the verdict; a failed check's whole message
    follows the table.  It used to be pytest's raw output (dots, "[100%]",
    "short test summary info")."""
    res = validate(sub, "--topology", str(sub.expected))
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    lines = out.splitlines()
    assert lines[0].startswith("ibtool validate-subnet: the subnet of "), out
    assert f"expected topology {sub.expected}" in lines[0]
    assert any(line.split()[:2] == ["test", "result"] for line in lines), out
    for check in ("test_topology_matches", "test_link_rates",
                  "test_error_counters", "test_every_lid_pair_routes",
                  "test_one_master_sm"):
        assert any(line.split()[:2] == [check, "PASSED"]
                   for line in lines), out
    assert lines[-1].startswith("PASSED: 5 passed in "), out
    assert "[100%]" not in out and "short test summary" not in out, out
    res = validate(sub, "--rate", "4xQDR", "-k", "rates")
    assert res.returncode == 1
    row = next(line for line in res.stdout.splitlines()
               if line.startswith("test_link_rates "))
    assert row.split()[1] == "FAILED" and "links at the wrong rate" in row
    assert "\ntest_link_rates:\n  " in res.stdout, res.stdout
    assert res.stdout.splitlines()[-1].startswith("FAILED: 1 failed"), \
        res.stdout


def test_unlinked_port_is_named(sub):
    """Unlink "Hca4"[1]: the topology check names the missing link's two
    ends; after ReLink it passes again."""
    sub.console('Unlink "Hca4"[1]')
    try:
        res = validate(sub, "--topology", str(sub.expected), "-k",
                       "topology")
        assert res.returncode == 1
        assert '"Hca4" (H-0000000000100009) port 1 <-> "Switch2"' in \
            res.stdout or '"Switch2" (S-0000000000200001) port 2 <-> ' \
            '"Hca4"' in res.stdout, res.stdout
        assert "is missing" in res.stdout
    finally:
        sub.console('ReLink "Hca4"[1]')
    res = validate(sub, "--topology", str(sub.expected), "-k", "topology")
    assert res.returncode == 0, res.stdout


def test_error_counter_is_named(sub):
    """PerformanceSet an error counter: the counter check names the node,
    port, counter and value; a threshold above it passes."""
    sub.console('PerformanceSet "Switch2"[5] PortCounters.PortRcvErrors=3')
    try:
        res = validate(sub, "-k", "error_counters")
        assert res.returncode == 1
        assert ('"Switch2" (S-0000000000200001) port 5: PortRcvErrors == 3 '
                '(threshold 0)') in res.stdout, res.stdout
        res = validate(sub, "-k", "error_counters", "--threshold",
                       "PortRcvErrors=3")
        assert res.returncode == 0, res.stdout
    finally:
        sub.console('PerformanceSet "Switch2"[5] PortCounters.PortRcvErrors=0')


def test_wrong_rate_is_named(sub):
    res = validate(sub, "--rate", "4xQDR", "-k", "rates")
    assert res.returncode == 1
    assert "runs at 4xSDR, expected 4xQDR" in res.stdout
    assert '"Hca1" (H-0000000000100000) port 1' in res.stdout


def test_broken_route_is_named(sub):
    """A forwarding entry set to 255 on Switch2 (LID 6, Hca4): the route
    check names the switch and the LID."""
    script = ("import rdma.umad, rdma.IBA as IBA, rdma.path\n"
              "ep = rdma.umad.get_end_port()\n"
              "u = rdma.umad.UMAD(ep)\n"
              "p = rdma.path.IBPath(ep, DLID=3, SLID=ep.lid, dqpn=0, sqpn=0,"
              " qkey=0)\n"
              "t = u.SubnGet(IBA.SMPLinearForwardingTable, p, 0)\n"
              "t.portBlock[6] = 255\n"
              "u.SubnSet(t, p, 0)\n")
    sub.run([sys.executable, "-c", script], "Hca2")
    res = validate(sub, "-k", "routes")
    assert res.returncode == 1
    assert '"Switch2" (S-0000000000200001) has no route to LID 6' in \
        res.stdout, res.stdout


def test_no_master_sm_is_named(tmp_path):
    """With opensm stopped, no port says MASTER: the SM check fails."""
    with Fabric(TOPOLOGIES["1sw4hca"], tmp_path) as f:
        res = validate(f, "-k", "sm")
        assert res.returncode == 0, res.stdout
        _stop(f.opensm)
        res = validate(f, "-k", "sm")
        assert res.returncode == 1
        assert "0 master SMs, expected 1" in res.stdout, res.stdout


def test_bad_usage(sub):
    res = validate(sub, "--topology", "/nonexistent.topo")
    assert res.returncode == 2 and "nonexistent" in res.stderr


def test_fat_tree(tmp_path):
    """A radix-16 fat-tree (128 HCAs, 24 switches, 3 switch hops): our
    ibnetdiscover equals infiniband-diags' node block by node block, and
    the whole subnet validates against it (every one of the 152x152 LID
    pairs routes through the forwarding tables opensm computed)."""
    from gen_fattree import write_fattree
    from test_ibtool import _topology_blocks
    topo = write_fattree(tmp_path / "ft16", 16)
    with Fabric(topo, tmp_path / "fabric") as f:
        expected = tmp_path / "ft16.expected"
        f.run([sys.executable, "-m", "rdma", "ibnetdiscover",
               str(expected)], "Hca2")
        theirs = f.run(["ibnetdiscover"], "Hca2").stdout
        assert _topology_blocks(expected.read_text()) == \
            _topology_blocks(theirs)
        assert len(_topology_blocks(theirs)[1]) == 152
        res = validate(f, "--topology", str(expected))
        assert res.returncode == 0, res.stdout + res.stderr
        assert "5 passed" in res.stdout
