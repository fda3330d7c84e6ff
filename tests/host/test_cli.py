"""The rdma command line on a host without RDMA devices."""
import subprocess
import sys

from rdma.cli import main


def rdma_cli(*args):
    return subprocess.run([sys.executable, "-m", "rdma", *args],
                          capture_output=True, text=True, timeout=60)


def test_help_lists_commands():
    res = rdma_cli("--help")
    assert res.returncode == 0
    for cmd in ("devices", "devinfo", "demo"):
        assert cmd in res.stdout


def test_devinfo_without_devices():
    res = rdma_cli("devinfo", "--provider", "verbs")
    assert res.returncode == 1 and "No IB devices found" in res.stdout


def test_devices_quiet_exit_code():
    assert rdma_cli("devices", "-q", "--provider", "verbs").returncode == 1


def test_errors_are_one_line_without_traceback():
    res = rdma_cli("devinfo", "--provider", "nope")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("ibtool devinfo: unknown RDMA provider")
    res = rdma_cli("devinfo", "-d", "rxe9", "--provider", "verbs")
    assert res.returncode == 1 and "rxe9" in res.stderr


def test_bad_usage_exit_2():
    assert rdma_cli("no-such-command").returncode == 2


def test_main_returns_code(capsys):
    assert main(["devices", "-q", "--provider", "verbs"]) == 1


def test_console_script_is_ibtool_not_rdma():
    """The console script is ``ibtool``: a script called ``rdma`` would
    shadow iproute2's ``rdma`` (``rdma link add rxe0 ...``) on PATH."""
    from importlib.metadata import entry_points
    scripts = {ep.name: ep.value
               for ep in entry_points(group="console_scripts")
               if ep.value.startswith("rdma.")}
    assert scripts == {"ibtool": "rdma.cli:main"}
    res = subprocess.run([sys.executable, "-m", "rdma", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("usage: ibtool ")
