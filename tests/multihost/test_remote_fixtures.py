"""The plugin's remote-host fixtures (--rdma-hosts) between namespaces:
the example of docs/validation.rst (cross_host_example.py) runs in a
pytest child against two simulated hosts, and without --rdma-hosts its
tests skip with the reason."""
import os
import subprocess
import sys

from conftest import run_env

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "cross_host_example.py")


def pytest_child(args, tmp_path):
    cmd = [sys.executable, "-m", "pytest", EXAMPLE, "-p", "no:cacheprovider",
           "-q", "-rs", "-p", "rdma.pytest_plugin", *args]
    env = run_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=env, cwd=str(tmp_path))


def test_example_across_namespaces(make_cluster, tmp_path):
    c = make_cluster(2)
    before = c.counters(1)["rx_bytes"]
    args = []
    for s in c.specs():
        args += ["--rdma-hosts", s]
    r = pytest_child(args, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout, r.stdout
    assert c.counters(1)["rx_bytes"] > before


def test_example_skips_without_hosts(tmp_path):
    r = pytest_child([], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 skipped" in r.stdout
    assert "give --rdma-hosts" in r.stdout
