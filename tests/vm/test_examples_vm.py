"""The example scripts on a real kernel driver (Soft-RoCE, rxe0).

Each examples/*.py runs as a user would run it, with --device naming the
VM's device and a timeout sized for the emulated VM; multicast must work
here (rxe supports it), so ud_multicast.py may not skip.  With
RDMA_VM_NOTEBOOKS=1 the notebooks are executed too (slow under TCG).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TWO_HOST

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = ROOT / "notebooks"
DEVICE = os.environ.get("RDMA_TESTVM_DEVICE", "rxe0")

CASES = {
    "ud_qp_setup.py": [],
    "ud_several_destinations.py": [],
    "ud_response_path.py": [],
    "nocm_rc.py": ["--loopback"],
    "wc_errors.py": [],
    "completion_channels.py": [],
    "memory_and_bufferpool.py": [],
    "rc_application.py": [],
    "ud_multicast.py": [],
    "virtual_qp.py": ["--loopback"],
}


def test_every_example_is_run_here():
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    assert scripts - {"list_devices.py", "sa_resolve_path.py",
                      "_example_util.py"} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_on_rxe(name):
    env = dict(os.environ)
    env.pop("RDMA_PROVIDER", None)
    res = subprocess.run([sys.executable, str(EXAMPLES / name),
                          "--device", DEVICE, "--timeout", "150",
                          *CASES[name]],
                         capture_output=True, text=True, env=env,
                         timeout=240, cwd=str(ROOT))
    assert res.returncode == 0, \
        f"{name} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert res.stdout.strip().splitlines()[-1] == "OK", res.stdout


def run_virtual_qp(*args):
    env = dict(os.environ)
    env.pop("RDMA_PROVIDER", None)
    res = subprocess.run([sys.executable, str(EXAMPLES / "virtual_qp.py"),
                          "--loopback", "--timeout", "150", *args],
                         capture_output=True, text=True, env=env,
                         timeout=240, cwd=str(ROOT))
    assert res.returncode == 0, \
        f"virtual_qp.py exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert res.stdout.strip().splitlines()[-1] == "OK", res.stdout
    return res.stdout


def test_virtual_qp_example_spray_on_rxe():
    """virtual_qp.py in its other mode (CASES runs dqplb)."""
    run_virtual_qp("--device", DEVICE, "--mode", "spray")


@pytest.mark.parametrize("mode", ["dqplb", "spray"])
def test_virtual_qp_example_on_the_two_host_pair(mode):
    """virtual_qp.py with side A on rxe1 and side B on rxe2 (the two-host
    VM's pair: the fragments cross the veth pair)."""
    if not TWO_HOST:
        pytest.skip("needs the two-host VM (python -m rdma.testvm --two-host)")
    out = run_virtual_qp("--device", "rxe1", "--peer-device", "rxe2",
                         "--mode", mode)
    assert "B: 8 messages of 100000 bytes" in out


@pytest.mark.skipif(os.environ.get("RDMA_VM_NOTEBOOKS") != "1",
                    reason="notebooks in the VM: set RDMA_VM_NOTEBOOKS=1 "
                           "(slow under TCG; the host tier runs them on "
                           "the software fabric)")
@pytest.mark.parametrize("name", sorted(p.stem for p in
                                        NOTEBOOKS.glob("*.ipynb")))
def test_notebook_on_rxe(name, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    spec = tmp_path / "kernels" / "rdma-vm"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                 "{connection_file}"],
        "display_name": "rdma VM", "language": "python"}))
    os.environ["JUPYTER_PATH"] = str(tmp_path)
    os.environ["RDMA_DEVICE"] = DEVICE
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbclient.NotebookClient(nb, kernel_name="rdma-vm", timeout=300,
                            startup_timeout=180,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}
                            ).execute()
