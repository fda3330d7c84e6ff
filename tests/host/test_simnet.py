"""rdma.simnet: the ibsim client shim is built next to the fabric libraries,
exports only the libc entry points it takes over, and without an ibsim
server says so and leaves the process with no CA (no ibsim needed here;
the shim on a real simulated fabric: tests/sa/test_umad2sim.py)."""
import os
import shutil
import subprocess
import time

import pytest

import rdma.fabric
from rdma import simnet

ENTRY_POINTS = {"open", "close", "read", "write", "ioctl", "opendir",
                "scandir"}


def test_shim_is_next_to_the_fabric_libraries():
    path = simnet.shim_path()
    assert os.path.dirname(path) == \
        os.path.dirname(rdma.fabric.library_path())
    if shutil.which("nm") is None:
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", path],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[2] for line in out.splitlines()
                if len(line.split()) == 3 and line.split()[1] == "T"}
    assert exported == ENTRY_POINTS


def test_environ_adds_the_shim_last():
    env = simnet.environ("Hca2", "rdma-sa-1",
                         {"LD_PRELOAD": "/x/libasan.so", "PATH": "/bin"})
    assert env["LD_PRELOAD"] == "/x/libasan.so " + simnet.shim_path()
    assert env["SIM_HOST"] == "Hca2" and env["IBSIM_SOCKNAME"] == "rdma-sa-1"
    assert env["PATH"] == "/bin"
    again = simnet.environ(None, "s", env)
    assert again["LD_PRELOAD"].split() == env["LD_PRELOAD"].split()
    assert again["SIM_HOST"] == "Hca2"


def test_no_server_is_a_clear_error(tmp_path):
    """ibstat through the shim with no ibsim server behind the socket
    name: a message naming the socket after $UMAD2SIM_WAIT, no CA, and
    no sysfs tree left in the working directory."""
    if shutil.which("ibstat") is None:
        pytest.skip("ibstat (infiniband-diags) is not installed")
    env = simnet.environ("Hca1", f"rdma-nobody-{os.getpid()}")
    env["UMAD2SIM_WAIT"] = "0.3"
    t = time.monotonic()
    res = subprocess.run(["ibstat"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert time.monotonic() - t < 10
    assert "no ibsim server at @rdma-nobody-" in res.stderr
    assert "ibsim0" not in res.stdout
    assert list(tmp_path.iterdir()) == []
