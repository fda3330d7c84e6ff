"""Target parsing of ``ibtool``'s management commands (infiniband-diags'
conventions: LID by default, -G port GUID in hex, -D directed route)."""
import argparse

import pytest

import rdma.path
from rdma.cli._ibopts import CmdError, parse_target


def ns(**kw):
    base = {"addr_direct": False, "addr_guid": False, "addr_lid": False}
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("text,dlid", [("3", 3), ("0x10", 16),
                                       ("49151", 49151)])
def test_lid(text, dlid):
    p = parse_target(text, ns())
    assert isinstance(p, rdma.path.IBPath) and p.DLID == dlid
    assert parse_target(text, ns(addr_lid=True)).DLID == dlid


@pytest.mark.parametrize("text,route", [("0,1,3", b"\0\1\3"), ("0", b"\0"),
                                        ("0,1,3,", b"\0\1\3")])
def test_direct(text, route):
    p = parse_target(text, ns(addr_direct=True))
    assert isinstance(p, rdma.path.IBDRPath) and p.drPath == route


@pytest.mark.parametrize("text", ["100003", "0x100003", "0x0000000000100003"])
def test_guid_is_hex_like_infiniband_diags(text):
    p = parse_target(text, ns(addr_guid=True))
    assert str(p.DGID) == "fe80::10:3"


@pytest.mark.parametrize("text,args,words", [
    ("zz", ns(), "zz"), ("0", ns(), "LID"), ("70000", ns(), "LID"),
    ("3", ns(addr_direct=True), "directed route"),
    ("0,1", ns(addr_lid=True), "not a LID"),
    ("g", ns(addr_guid=True), "GUID"), ("0", ns(addr_guid=True), "GUID"),
    ("1" * 20, ns(addr_guid=True), "64-bit"),
])
def test_bad_targets_name_the_problem(text, args, words):
    with pytest.raises(CmdError) as ei:
        parse_target(text, args)
    assert words in str(ei.value) and isinstance(ei.value, ValueError)


def _run(*args, env=None):
    import os
    import subprocess
    import sys
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "rdma", *args],
                          capture_output=True, text=True, timeout=60, env=e)


def test_set_nodedesc_reads_and_writes_node_desc(tmp_path):
    """set_nodedesc works on the kernel's node_desc files (here a copy of
    their layout: the host has no InfiniBand device)."""
    for ca in ("mlx5_0", "mlx5_1"):
        (tmp_path / ca).mkdir()
        (tmp_path / ca / "node_desc").write_text(f"old {ca}\n")
    env = {"RDMA_SYSFS_INFINIBAND": str(tmp_path)}
    res = _run("set_nodedesc", env=env)
    assert res.stdout.splitlines() == ["mlx5_0: old mlx5_0",
                                       "mlx5_1: old mlx5_1"]
    res = _run("set_nodedesc", "-C", "mlx5_1", "-v", "host-b", env=env)
    assert res.returncode == 0 and res.stdout == "mlx5_1: host-b\n"
    assert (tmp_path / "mlx5_0" / "node_desc").read_text() == "old mlx5_0\n"
    res = _run("set_nodedesc", "-C", "mlx9", env=env)
    assert res.returncode == 2 and "mlx9" in res.stderr
    res = _run("set_nodedesc", "x" * 65, env=env)
    assert res.returncode == 2 and "64" in res.stderr


def test_management_commands_are_listed():
    res = _run("--help")
    for cmd in ("ibstat", "ibaddr", "sminfo", "smpquery", "perfquery",
                "ibroute", "ibtracert", "ibportstate", "ibqueryerrors",
                "saquery", "set_nodedesc", "ibswitches", "ibhosts",
                "ibnetdiscover", "devices", "devinfo", "pingpong", "perf",
                "validate", "demo"):
        assert cmd in res.stdout, cmd


def test_management_commands_without_infiniband():
    """No umad device (this host): one clear line, no traceback."""
    res = _run("ibstat")
    assert res.returncode == 2 and "no InfiniBand CA" in res.stderr
    for argv in (["smpquery", "nodeinfo", "3"], ["perfquery"],
                 ["ibnetdiscover"]):
        res = _run(*argv)
        assert res.returncode == 1, argv
        assert "software fabric, which has no umad" in res.stderr, argv
        assert "Traceback" not in res.stderr
