"""``ibtool validate`` on Soft-RoCE: it passes on rxe0 (loopback) and on the
rxe1/rxe2 pair, and fails, saying what is wrong, on a broken setup (a GID
index that holds no GID, a port whose network interface is down).

Each test runs the real command (``python -m rdma validate``) in a child
process and checks its exit status, its summary table and its JUnit XML.
"""
import os
import subprocess
import sys
import time

import pytest

from conftest import DEVICE, TWO_HOST, run
from rdma.cli.validate import read_junit

NETDEV = os.environ.get("RDMA_TESTVM_NETDEV", "dummy0")
HOST1 = os.environ.get("RDMA_TESTVM_HOST1_DEVICE", "rxe1")
HOST2 = os.environ.get("RDMA_TESTVM_HOST2_DEVICE", "rxe2")


def validate(*args, timeout=1200):
    r = run([sys.executable, "-m", "rdma", "validate", *args], timeout=timeout)
    sys.stdout.write(r.stdout)          # the table, for the log
    return r


def results(xml):
    rows, props = read_junit(str(xml))
    return {r["test"]: r for r in rows}, props


def test_validate_passes_on_rxe0(tmp_path):
    xml = tmp_path / "rxe0.xml"
    t0 = time.monotonic()
    r = validate("--device", DEVICE, "--junitxml", str(xml))
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED:" in r.stdout and "ibtool validate: rxe0/1" in r.stdout
    rows, props = results(xml)
    assert props["rdma_end_port"] == f"{DEVICE}/1"
    assert props["rdma_link_layer"] == "Ethernet"
    bad = {k: v for k, v in rows.items() if v["result"] in ("FAILED", "ERROR")}
    assert not bad, bad
    # Every verb ran (and was checked), nothing of it was skipped.
    transfers = [v for k, v in rows.items()
                 if k.startswith("test_transfers::test_transfer[")]
    assert len(transfers) == 11
    assert all(v["result"] == "PASSED" and "1 MiB" in v["detail"]
               for v in transfers if "UD-" not in v["test"]), transfers
    assert (rows["test_atomics::test_atomics_under_contention"]["result"]
            == "PASSED")
    assert rows["test_features::test_srq[RC]"]["result"] == "PASSED"
    # RoCE has no SA: skipped, with the reason.
    sa = rows["test_paths::test_sa_path_record"]
    assert (sa["result"] == "SKIPPED" and
            "no subnet administrator" in sa["detail"])
    print(f"ibtool validate on {DEVICE}: {elapsed:.1f} s")


def test_validate_passes_on_the_two_host_pair(tmp_path):
    if not TWO_HOST:
        pytest.skip("needs --two-host")
    xml = tmp_path / "pair.xml"
    r = validate("--device", HOST1, "--peer-device", HOST2, "--quick",
                 "--junitxml", str(xml))
    assert r.returncode == 0, r.stdout + r.stderr
    rows, props = results(xml)
    assert props["rdma_peer"] == f"{HOST2}/1"
    peer = rows["test_ports::test_peer_reachable"]
    assert peer["result"] == "PASSED", peer
    for k, v in rows.items():
        if k.startswith("test_transfers::"):
            assert v["result"] == "PASSED", v
            if "UD-" not in k and "burst" not in k:
                assert f"{HOST1}/1 QP" not in v["detail"]


def _empty_gid_index(device):
    import rdma
    ep = rdma.get_end_port(device)
    return next(i for i, g in enumerate(ep.gids) if not g)


def test_validate_fails_on_an_empty_gid_index(tmp_path):
    idx = _empty_gid_index(DEVICE)
    xml = tmp_path / "gid.xml"
    r = validate("--device", DEVICE, "--gid-index", str(idx), "--quick",
                 "--junitxml", str(xml))
    assert r.returncode == 1, r.stdout + r.stderr
    want = f"GID index {idx} of {DEVICE}/1 is empty (::)"
    assert f"first problem: test_ports::test_gid_index: {want}" in r.stdout
    rows, _ = results(xml)
    assert rows["test_ports::test_gid_index"]["result"] == "FAILED"
    assert rows["test_ports::test_port_active"]["result"] == "PASSED"
    assert rows["test_transfers::test_transfer[RC-SEND]"]["result"] == "ERROR"
    assert want in rows["test_transfers::test_transfer[RC-SEND]"]["detail"]


def _port_state(device):
    import rdma
    return rdma.get_end_port(device).state


def _wait_state(device, active, timeout=30):
    deadline = time.monotonic() + timeout
    while (_port_state(device) == 4) != active:
        if time.monotonic() > deadline:
            raise AssertionError(f"{device} did not become "
                                 f"{'ACTIVE' if active else 'inactive'}")
        time.sleep(0.2)


def test_validate_fails_on_a_port_that_is_down(tmp_path):
    assert _port_state(DEVICE) == 4
    xml = tmp_path / "down.xml"
    subprocess.run(["ip", "link", "set", NETDEV, "down"], check=True,
                   timeout=30)
    try:
        _wait_state(DEVICE, active=False)
        r = validate("--device", DEVICE, "--quick", "--junitxml", str(xml))
    finally:
        subprocess.run(["ip", "link", "set", NETDEV, "up"], check=True,
                       timeout=30)
        _wait_state(DEVICE, active=True)
    assert r.returncode == 1, r.stdout + r.stderr
    want = (f"{DEVICE}/1 is not ACTIVE: state DOWN (1), physical state "
            f"Disabled; its network interface {NETDEV} is down "
            f"(ip link set {NETDEV} up)")
    assert f"first problem: test_ports::test_port_active: {want}" in r.stdout
    rows, _ = results(xml)
    assert rows["test_ports::test_port_active"]["result"] == "FAILED"
    assert (want in
            rows["test_atomics::test_atomics_under_contention"]["detail"])
