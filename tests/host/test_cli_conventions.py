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
    ["saquery", "-C", "foo"],
    ["ibaddr", "-C", "foo"],
    ["smpquery", "-C", "foo", "nodeinfo", "1"],
    ["validate", "--device", "foo", "--quick"],
])
def test_a_device_that_is_not_there_is_bad_usage(argv):
    """Exit 2 and one line naming the device as typed (it used to be
    exit 1 and, for pingpong/perf, ``'foo/1'``; for validate, 29 ERROR
    rows).  ``validate-subnet`` is not here: it discovers the subnet
    through a umad port, whose absence its checks report."""
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


def _our_tracebacks(stderr):
    """The tracebacks in *stderr* that went through the rdma package.  A
    SIGINT that lands while Python itself starts (site, runpy finding
    the module, the console script's first line) is before the package's
    first line and cannot be caught by it."""
    blocks = stderr.split("Traceback (most recent call last):")[1:]
    pkg = os.path.join(ROOT, "rdma") + os.sep
    return [b for b in blocks if pkg in b]


@pytest.mark.parametrize("entry", ["-m", "script"])
def test_ctrl_c_at_any_moment_is_quiet(entry):
    """SIGINT to a freshly started ``ibtool devices`` at delays from 0 to
    0.4 s: never a traceback from the package (it used to print one from
    rdma/__init__.py, the command modules' imports and build_parser);
    the status is 130 (exit or death by SIGINT) or 0 (already done)."""
    import signal
    import time
    if entry == "-m":
        argv = [sys.executable, "-m", "rdma", "devices"]
    else:
        # what the ibtool console script runs, under its name
        argv = [sys.executable, "-c",
                "import sys; sys.argv[0] = 'ibtool'; "
                "from rdma.cli import main; sys.exit(main())", "devices"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p]))
    seen = []
    for i in range(21):
        delay = i * 0.02
        p = subprocess.Popen(argv, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert not _our_tracebacks(err), f"after {delay:.2f} s:\n{err}"
        if "Traceback" in err or "Fatal Python error" in err:
            continue        # Python's own start (site, runpy, io): status 1
        assert p.returncode in (0, 130, -signal.SIGINT), (delay, err)
        seen.append(p.returncode)
    assert set(seen) & {130, -signal.SIGINT}, seen


@needs_device
def test_validate_hints_name_its_own_options():
    """The suite's skip reason says "give --rdma-peer-device" (the pytest
    plugin's option); ``ibtool validate``'s option is --peer-device."""
    res = ibtool("validate", "--quick", "--", "-k", "peer_reachable")
    assert res.returncode == 0, res.stdout + res.stderr
    text = " ".join(res.stdout.split())      # the table wraps details
    assert "give --peer-device" in text, res.stdout
    assert "--rdma-" not in text
    from rdma.cli.validate import own_option_names
    assert own_option_names("give --rdma-hosts twice") == \
        "give --hosts twice"
    assert own_option_names("--rdma-require") == "--rdma-require"


@needs_device
def test_validate_json():
    """``ibtool validate --json``: one JSON object with the fields of the
    text (device, provider, peer, the table's test/result/detail, counts,
    verdict, first_problem) and the exit status it exits with."""
    import json
    res = ibtool("validate", "--quick", "--json", "--", "-k", "ports")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"] == "PASSED" and out["exit_status"] == 0
    assert out["device"] and out["provider"] and out["peer"] == "loopback"
    assert out["first_problem"] is None
    names = {t["test"]: t for t in out["tests"]}
    assert names["test_ports::test_port_active"]["result"] == "PASSED"
    assert set(names["test_ports::test_device"]) == {"test", "result",
                                                     "detail", "time"}
    assert sum(out["counts"].values()) == len(out["tests"])
    # a failed check (a device that is not there is bad usage instead:
    # test_a_device_that_is_not_there_is_bad_usage)
    res = ibtool("validate", "--quick", "--json", "--gid-index", "99",
                 "--", "-k", "ports")
    assert res.returncode == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"] == "FAILED" and out["exit_status"] == 1
    assert out["first_problem"]["test"] == "test_ports::test_gid_index"
    assert "GID index 99" in out["first_problem"]["detail"]


def test_library_users_keep_their_excepthook():
    """The quiet-Ctrl-C hook is for the package's own commands only: a
    program that imports rdma keeps sys.excepthook, and a
    KeyboardInterrupt it does not catch still shows its traceback."""
    res = subprocess.run(
        [sys.executable, "-c", "import sys; h = sys.excepthook; "
                               "import rdma; assert sys.excepthook is h; "
                               "raise KeyboardInterrupt"],
        capture_output=True, text=True, timeout=60)
    assert "Traceback" in res.stderr and "KeyboardInterrupt" in res.stderr


def test_validate_subnet_help_describes_it():
    """``ibtool validate-subnet --help`` says what it checks, what it
    prints and its exit statuses (it showed only the usage and options)."""
    res = ibtool("validate-subnet", "--help")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "Validate an InfiniBand subnet" in text, res.stdout
    assert "exactly one SM is MASTER" in text and "table" in text
    assert "exit status: 0 every check passed" in text, res.stdout
