"""``ibtool validate --hosts`` on real verbs: the two-host Soft-RoCE pair of
the test VM (rxe1 on veth0, rxe2 on veth1; ``--two-host``).  Each "host"
is a local execnet gateway (``popen``) whose agent opens one of the two
devices, so the same flow as across machines runs on the kernel driver,
and the traffic crosses the veth pair (its counters are checked).  Then
netem (in the VM's kernel) drops everything on veth1: the pair fails and
the report names the link."""
import re
import subprocess
import sys

import pytest

from conftest import TWO_HOST, run
from rdma.cli.validate import read_junit

HOST1, HOST2 = "rxe1", "rxe2"


def counter(dev, name):
    with open(f"/sys/class/net/{dev}/statistics/{name}") as f:
        return int(f.read())


def validate(*args, timeout=900):
    cmd = [sys.executable, "-m", "rdma", "validate",
           "--hosts", f"popen//id={HOST1}//device={HOST1}",
           "--hosts", f"popen//id={HOST2}//device={HOST2}", *args]
    r = run(cmd, timeout=timeout)
    sys.stdout.write(r.stdout + r.stderr)
    return r


@pytest.fixture
def two_host():
    if not TWO_HOST:
        pytest.skip("needs the two-host VM (python -m rdma.testvm --two-host)")


def test_hosts_on_rxe_pair(two_host, tmp_path):
    xml = tmp_path / "mh.xml"
    before = counter("veth0", "tx_bytes"), counter("veth1", "tx_bytes")
    r = validate("--quick", "--junitxml", str(xml), "--plot",
                 str(tmp_path / "m.png"))
    assert r.returncode == 0, r.stdout + r.stderr
    rows, _ = read_junit(str(xml))
    assert len(rows) == 2 + 13
    assert {x["result"] for x in rows} == {"PASSED"}
    assert any(x["test"] == f"{HOST1}-{HOST2}::perf" for x in rows)
    # RoCE v2 over the veth pair: both ends sent megabytes through it.
    after = counter("veth0", "tx_bytes"), counter("veth1", "tx_bytes")
    assert after[0] - before[0] > 10 << 20
    assert after[1] - before[1] > 10 << 20


def test_lossy_link_is_named(two_host, tmp_path):
    tc = ["tc", "qdisc", "add", "dev", "veth1", "root", "netem", "loss",
          "100%"]
    r = subprocess.run(tc, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.fail(f"netem is not usable in the VM: {r.stderr.strip()}")
    try:
        r = validate("--quick", "--checks", "transfer", "--pair-timeout",
                     "5")
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", "veth1", "root"],
                       timeout=30)
    assert r.returncode == 1, r.stdout
    assert re.search(rf"SUSPECT LINK {HOST1}-{HOST2}", r.stdout), r.stdout
    assert re.search(rf"{HOST1}::port\s+PASSED", r.stdout)

