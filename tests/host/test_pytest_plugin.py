"""The pytest plugin (rdma.pytest_plugin) and ``ibtool validate`` on a host
without RDMA hardware.

Each test runs pytest in a child process on a temporary test file (the
plugin comes in through its ``pytest11`` entry point, as for users) and
reads the outcome from the JUnit XML.  Without a verbs device every test
that needs one must be skipped with a reason naming what was looked for;
where the software fabric (ucx) has a device the fixtures and markers are
exercised on it too.
"""
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import rdma
from rdma.cli.validate import format_table, read_junit

ROOT = Path(__file__).resolve().parent.parent.parent


def _devices(provider):
    try:
        return rdma.get_devices(provider)
    except Exception:
        return []


HAS_VERBS = bool(_devices("verbs"))
HAS_UCX = bool(_devices("ucx"))
needs_no_verbs = pytest.mark.skipif(
    HAS_VERBS, reason="this host has verbs devices: the skip tests need a "
                      "host without RDMA hardware")
needs_ucx = pytest.mark.skipif(not HAS_UCX,
                               reason="no software-fabric (ucx) device here")

DEVICE_TESTS = '''
import pytest
import rdma.ibverbs as ibv

def test_end_port(rdma_end_port):
    pass

def test_ctx(rdma_ctx):
    pass

def test_pd(rdma_pd):
    pass

def test_rc(rdma_rc_pair):
    pass

def test_uc(rdma_uc_pair):
    pass

def test_ud(rdma_ud_pair):
    pass

@pytest.mark.rdma_atomics
def test_marker_only():
    pass
'''


def run_pytest(tmp_path, source, *args, env=None, timeout=300):
    """Run pytest on *source* (a test module) in a child process; return
    (exit status, {test name: (result, detail)}, output)."""
    test = tmp_path / "test_sample.py"
    test.write_text(textwrap.dedent(source))
    xml = tmp_path / "out.xml"
    e = dict(os.environ)
    e.pop("RDMA_PROVIDER", None)
    e.pop("PYTEST_ADDOPTS", None)
    e.update(env or {})
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
         f"--junitxml={xml}", str(test), *args],
        cwd=tmp_path, env=e, capture_output=True, text=True, timeout=timeout)
    rows = {}
    if xml.exists():
        for r in read_junit(str(xml))[0]:
            rows[r["test"].split("::", 1)[1]] = (r["result"], r["detail"])
    return res.returncode, rows, res.stdout + res.stderr


def test_registered_through_the_entry_point():
    eps = [ep for ep in entry_points(group="pytest11") if ep.name == "rdma"]
    assert [ep.value for ep in eps] == ["rdma.pytest_plugin"]


def test_options_and_markers_are_listed(tmp_path):
    e = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "pytest", "--help"],
                         cwd=tmp_path, env=e, capture_output=True, text=True,
                         timeout=120).stdout
    for opt in ("--rdma-device", "--rdma-port", "--rdma-gid-index",
                "--rdma-provider", "--rdma-peer-device", "--rdma-quick",
                "--rdma-require"):
        assert opt in out, opt
    out = subprocess.run([sys.executable, "-m", "pytest", "--markers"],
                         cwd=tmp_path, env=e, capture_output=True, text=True,
                         timeout=120).stdout
    for m in ("rdma_atomics", "rdma_srq", "rdma_mw", "rdma_ud_multicast",
              "rdma_two_devices", "rdma_needs", "rdma_require"):
        assert f"@pytest.mark.{m}" in out, m


@needs_no_verbs
def test_no_device_skips_with_the_provider_named(tmp_path):
    rc, rows, out = run_pytest(tmp_path, DEVICE_TESTS, "--strict-markers",
                               "--rdma-provider", "verbs")
    assert rc == 0, out
    assert len(rows) == 7, out
    for name, (result, detail) in rows.items():
        assert result == "SKIPPED", (name, result, detail)
        assert "no RDMA device found (provider verbs)" in detail, detail


@needs_no_verbs
def test_missing_device_is_named(tmp_path):
    """A device the command line names that is not among those there (a
    typing error) stops the run before the first test: one line naming it
    and the devices there are, pytest's usage-error status 4 (it was a
    green run of 7 skips).  Without any device it stays a skip."""
    for option in ("--rdma-device", "--rdma-peer-device"):
        rc, rows, out = run_pytest(tmp_path, DEVICE_TESTS, option,
                                   "nosuch0")
        if not HAS_UCX:
            assert rc == 0, out
            assert all(r[0] == "SKIPPED" and "nosuch0" in r[1]
                       for r in rows.values()), rows
            continue
        assert rc == 4, out
        assert not any(r[0] == "PASSED" for r in rows.values()), rows
        errors = [line for line in out.splitlines()
                  if line.startswith("ERROR:")]
        assert errors == [f"ERROR: {option} nosuch0: RDMA device "
                          f"'nosuch0' not found (provider auto has: "
                          f"ucx0/1)"], out


def test_unknown_provider_is_named(tmp_path):
    rc, rows, out = run_pytest(tmp_path, DEVICE_TESTS, "--rdma-provider",
                               "nosuchprov")
    assert rc == 0, out
    for name, (result, detail) in rows.items():
        assert result == "SKIPPED", (name, result, detail)
        assert "RDMA provider 'nosuchprov' is not usable" in detail, detail


def test_ini_options_are_used(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nrdma_device = nosuch7\n"
                                         "rdma_gid_index = 3\n")
    rc, rows, out = run_pytest(tmp_path, DEVICE_TESTS)
    assert rc == 0, out
    assert all("nosuch7" in d for _, d in rows.values()), rows


@needs_no_verbs
def test_require_turns_skips_into_failures(tmp_path):
    # no device at all (the verbs provider on this host): a skip, which
    # --rdma-require makes an error
    rc, rows, out = run_pytest(tmp_path, DEVICE_TESTS, "--rdma-require",
                               "--rdma-provider", "verbs",
                               "--rdma-device", "nosuch0")
    assert rc == 1, out
    for name, (result, detail) in rows.items():
        assert result in ("ERROR", "FAILED"), (name, result)
        assert "nosuch0" in detail, detail
    # Each error once, not chained to the lookup's own exception.
    assert "During handling of the above exception" not in out, out
    assert out.count("wanted device 'nosuch0'") == len(rows), out


@needs_no_verbs
def test_require_marker(tmp_path):
    src = DEVICE_TESTS.replace("def test_end_port(rdma_end_port):",
                               "@pytest.mark.rdma_require\n"
                               "def test_end_port(rdma_end_port):")
    rc, rows, out = run_pytest(tmp_path, src, "--rdma-provider", "verbs",
                               "--rdma-device", "nosuch0")
    assert rc == 1, out
    assert rows["test_end_port"][0] == "ERROR"
    assert rows["test_ctx"][0] == "SKIPPED"


def test_unknown_capability_is_a_usage_error(tmp_path):
    src = '''
    import pytest
    @pytest.mark.rdma_needs("atomics", "teleport")
    def test_x():
        pass
    '''
    rc, rows, out = run_pytest(tmp_path, src)
    assert rc != 0 and "teleport" in out, out


@needs_ucx
def test_fixtures_and_markers_on_the_software_fabric(tmp_path):
    src = '''
    import pytest
    import rdma.ibverbs as ibv
    from rdma.pytest_plugin import poll_cq

    def test_rc_send(rdma_rc_pair, rdma_setup):
        a, b = rdma_rc_pair
        assert rdma_setup.quick
        b.post_recv(64, off=1024)
        a.buf[0:5] = b"hello"
        a.qp.post_send(a.send_wr(ibv.IBV_WR_SEND, 5))
        assert poll_cq(a.cq, 1)[0].status == ibv.IBV_WC_SUCCESS
        wc = poll_cq(b.cq, 1)[0]
        assert wc.status == ibv.IBV_WC_SUCCESS and wc.byte_len == 5
        assert bytes(b.buf[1024:1029]) == b"hello"

    def test_ud_send(rdma_ud_pair):
        a, b = rdma_ud_pair
        b.post_recv(40 + 64, off=1024)
        a.buf[0:3] = b"abc"
        a.qp.post_send(a.send_wr(ibv.IBV_WR_SEND, 3))
        poll_cq(a.cq, 1)
        wc = poll_cq(b.cq, 1)[0]
        assert wc.src_qp == a.qp.qp_num
        assert bytes(b.buf[1064:1067]) == b"abc"

    def test_objects(rdma_end_port, rdma_ctx, rdma_pd, rdma_gid_index):
        assert rdma_ctx.name == rdma_end_port.parent.name
        assert rdma_end_port.gids[rdma_gid_index]

    @pytest.mark.rdma_mw
    def test_mw():
        pass

    @pytest.mark.rdma_atomics
    def test_atomics():
        pass

    @pytest.mark.rdma_two_devices
    def test_two():
        pass

    def test_sa(rdma_sa):
        pass
    '''
    dev = _devices("ucx")[0]
    rc, rows, out = run_pytest(tmp_path, src, "--strict-markers",
                               "--rdma-provider", "ucx", "--rdma-quick")
    assert rc == 0, out
    for name in ("test_rc_send", "test_ud_send", "test_objects"):
        assert rows[name][0] == "PASSED", (name, rows[name], out)
    mw = rows["test_mw"]
    if dev.attr.max_mw == 0:
        assert mw == ("SKIPPED",
                      f"{dev.name} has no memory windows (max_mw 0)")
    assert rows["test_atomics"][0] == ("PASSED" if dev.attr.atomic_cap
                                       else "SKIPPED")
    assert rows["test_two"][0] == "SKIPPED"
    assert "--rdma-peer-device" in rows["test_two"][1]
    assert rows["test_sa"][0] == "SKIPPED"
    assert "no subnet administrator" in rows["test_sa"][1]


# -- ibtool validate ---------------------------------------------------------

def rdma_validate(*args, timeout=600, cwd=None):
    e = dict(os.environ)
    e.pop("RDMA_PROVIDER", None)
    return subprocess.run([sys.executable, "-m", "rdma", "validate", *args],
                          capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


def test_validate_names_a_missing_device_as_bad_usage(tmp_path):
    """A --device (or --peer-device) that is not there is bad usage: exit
    2 and one line naming it and the ports there are, before any check
    runs (no JUnit XML).  It used to run the suite and print 29 ERROR rows
    (exit 1)."""
    xml = tmp_path / "v.xml"
    for opts in (["--device", "nosuch0"], ["--peer-device", "nosuch0"]):
        r = rdma_validate(*opts, "--junitxml", str(xml), "--quick",
                          cwd=tmp_path)
        if "no RDMA device found" in r.stdout:
            pytest.skip("no RDMA device at all: the checks report that")
        assert r.returncode == 2, r.stdout + r.stderr
        err = r.stderr.strip()
        assert err.startswith("ibtool validate: ") and "\n" not in err, err
        assert "'nosuch0'" in err and "have: " in err, err
        assert r.stdout == "" and not xml.exists()
    assert not (tmp_path / ".pytest_cache").exists()


@needs_no_verbs
def test_validate_without_devices_fails(tmp_path):
    r = rdma_validate("--provider", "verbs", "--quick", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no RDMA device found (provider verbs)" in r.stdout


def test_validate_bad_usage():
    r = rdma_validate("--timeout", "0")
    assert r.returncode == 2 and "--timeout" in r.stderr
    r = rdma_validate("--junitxml", "/nonexistent-dir/x.xml")
    assert r.returncode == 2 and "does not exist" in r.stderr


@needs_ucx
def test_validate_on_the_software_fabric(tmp_path):
    xml = tmp_path / "ucx.xml"
    r = rdma_validate("--provider", "ucx", "--quick", "--junitxml", str(xml),
                      "--", "-k", "ports or atomics or burst", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows, props = read_junit(str(xml))
    names = {x["test"]: x for x in rows}
    assert names["test_ports::test_port_active"]["result"] == "PASSED"
    assert names["test_atomics::test_atomics_under_contention"]["result"] \
        == "PASSED"
    assert props["rdma_provider"] == "ucx"
    assert "test_ports::test_gid_index" in r.stdout and "PASSED:" in r.stdout


def test_table_format():
    rows = [{"test": "test_ports::test_port_active", "result": "FAILED",
             "detail": "rxe0/1 is not ACTIVE", "time": "0"},
            {"test": "test_transfers::test_transfer[RC-SEND]",
             "result": "ERROR", "detail": "rxe0/1 is not ACTIVE", "time": "0"},
            {"test": "test_paths::test_sa_path_record", "result": "SKIPPED",
             "detail": "x " * 80, "time": "0"}]
    t = format_table(rows, width=100).splitlines()
    assert t[0].split() == ["test", "result", "detail"]
    assert "rxe0/1 is not ACTIVE" in t[2]
    assert "(the same problem as above)" in t[3]
    assert len(t) > 5 and all(len(line) <= 100 for line in t)


def test_rdma_setup_repr():
    """RdmaSetup's repr shows the options given (as the constructor
    takes them) and, once looked up, the end ports (it was the default
    object repr)."""
    from rdma.pytest_plugin import RdmaSetup
    assert repr(RdmaSetup()) == "RdmaSetup()"
    s = RdmaSetup(device="nosuch0", port=2, quick=True, provider="ucx")
    assert repr(s) == ("RdmaSetup(device='nosuch0', port=2, "
                       "provider='ucx', quick=True)")
    assert eval(repr(s)).__dict__.keys() == s.__dict__.keys()


@needs_ucx
def test_rdma_setup_repr_names_the_end_port():
    from rdma.pytest_plugin import RdmaSetup
    s = RdmaSetup(provider="ucx")
    ep = s.end_port()
    assert repr(s) == f"RdmaSetup(provider='ucx') -> end_port {ep}"


@needs_ucx
def test_remote_pair_repr():
    """A RemotePair between two local execnet hosts (popen) on the
    software fabric: its repr names the QP type, both hosts with their
    end ports and QPNs, and its state (it was the default object repr)."""
    pytest.importorskip("execnet")
    import rdma.ibverbs as ibv
    from rdma.multihost.command import host_specs
    from rdma.multihost.hosts import start_hosts, stop_hosts
    from rdma.multihost.remote import RemoteHost, remote_pair
    env_before = os.environ.get("RDMA_PROVIDER")
    os.environ["RDMA_PROVIDER"] = "ucx"
    try:
        group, hosts = start_hosts(host_specs(["popen//id=left",
                                               "popen//id=right"]))
    finally:
        if env_before is None:
            os.environ.pop("RDMA_PROVIDER")
        else:
            os.environ["RDMA_PROVIDER"] = env_before
    try:
        assert all(h.usable for h in hosts), [h.dead for h in hosts]
        left, right = (RemoteHost(h) for h in hosts)
        pair = remote_pair(left, right, ibv.IBV_QPT_RC)
        with pair:
            text = repr(pair)
            qa = pair.a.info["path"]["sqpn"]
            qb = pair.b.info["path"]["sqpn"]
            ep = left.info["end_port"]
            assert text == (f"<RemotePair RC left {ep} QPN {qa:#x} <-> "
                            f"right {right.info['end_port']} QPN {qb:#x}, "
                            f"at RTS, key {pair.key}>")
        assert repr(pair).endswith(f", closed, key {pair.key}>")
    finally:
        stop_hosts(group, hosts)


SKIP_LOCATION_TESTS = '''
import pytest

@pytest.mark.rdma_two_devices
def test_two():
    pass

@pytest.mark.rdma_needs("two_devices")
def test_needs():
    pass

@pytest.mark.rdma_atomics
def test_marker_only():
    pass

def test_fixture(rdma_end_port):
    pass
'''


@needs_no_verbs
def test_skips_point_at_the_users_test(tmp_path):
    """pytest -rs reports each skip at the user's test (test_sample.py
    and the line of its test), whether a marker (checked in the plugin's
    pytest_runtest_setup) or a fixture skipped it.  The markers' skips
    pointed at rdma/pytest_plugin.py."""
    rc, rows, out = run_pytest(tmp_path, SKIP_LOCATION_TESTS,
                               "--rdma-provider", "verbs",
                               "--rdma-device", "nosuch0")
    assert rc == 0, out
    assert all(r[0] == "SKIPPED" for r in rows.values()), rows
    lines = [line for line in out.splitlines()
             if line.startswith("SKIPPED [")]
    assert len(lines) == 4, out
    assert not any("pytest_plugin.py" in line for line in lines), out
    where = sorted(int(line.split("test_sample.py:", 1)[1].split(":")[0])
                   for line in lines)
    assert where == [4, 8, 12, 16], out
    if HAS_UCX:
        rc, rows, out = run_pytest(tmp_path, SKIP_LOCATION_TESTS,
                                   "--rdma-provider", "ucx")
        assert rc == 0, out
        lines = [line for line in out.splitlines()
                 if line.startswith("SKIPPED [")]
        assert lines and all(line.startswith("SKIPPED [1] test_sample.py:")
                             for line in lines), out
