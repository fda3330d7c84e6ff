"""``ibtool`` keeps the conventions of command-line tools: ``--version``,
exit status 2 for every usage error (naming what the user typed), quiet
exit on Ctrl-C."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def ibtool(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "rdma", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=env)


def _device():
    """The first device ``ibtool devices`` lists (the software fabric's
    ucx0 on a host without RDMA hardware), or None."""
    res = ibtool("devices")
    lines = res.stdout.splitlines()[2:] if res.returncode == 0 else []
    return lines[0].split()[0] if lines else None


DEVICE = _device()
needs_device = pytest.mark.skipif(DEVICE is None,
                                  reason="no RDMA device (not even ucx0)")


def test_version():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        want = tomllib.load(f)["project"]["version"]
    res = ibtool("--version")
    assert (res.returncode, res.stdout, res.stderr) == \
        (0, f"ibtool {want}\n", "")
    assert "--version" in ibtool("--help").stdout


@needs_device
@pytest.mark.parametrize("argv", [
    ["devinfo", "-d", "foo"],
    ["pingpong", "rc", "-d", "foo"],
    ["perf", "write", "-d", "foo"],
    ["validate", "-d", "foo"],
    ["saquery", "-C", "foo"],
    ["ibaddr", "-C", "foo"],
    ["smpquery", "-C", "foo", "nodeinfo", "1"],
    ["validate-subnet", "-C", "foo"],
])
def test_a_device_that_is_not_there_is_bad_usage(argv):
    """Exit 2 and one line naming the device as typed (it used to be
    exit 1 and, for pingpong/perf, ``'foo/1'``)."""
    res = ibtool(*argv)
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip()
    assert err.startswith(f"ibtool {argv[0]}: ") and "\n" not in err
    assert "'foo'" in err and "foo/" not in err


@needs_device
@pytest.mark.parametrize("argv", [
    ["pingpong", "rc", "-d", "{dev}", "-i", "9"],
    ["perf", "write", "-i", "9"],
    ["devinfo", "-d", "{dev}", "-i", "9"],
    ["validate", "-d", "{dev}", "-i", "9"],
    ["ibaddr", "-C", "{dev}", "-P", "9"],
])
def test_a_port_that_is_not_there_is_bad_usage(argv):
    res = ibtool(*[a.format(dev=DEVICE) for a in argv])
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip()
    assert err.startswith(f"ibtool {argv[0]}: ") and "\n" not in err
    assert re.search(r"\bport 9\b", err) or f"{DEVICE}/9" in err, err


@pytest.mark.parametrize("argv", [
    ["no-such-command"],
    ["devinfo", "--no-such-option"],
    ["devinfo", "-i", "x"],
    ["pingpong", "xx"],
    ["perf", "write", "-s", "0"],
    ["smpquery", "nodeinfo", "--bogus"],
    ["ibroute", "-M", "--bogus"],
])
def test_argparse_errors_exit_2(argv):
    res = ibtool(*argv)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "error:" in res.stderr
