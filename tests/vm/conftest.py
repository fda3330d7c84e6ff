"""The VM tier: tests that need a real RDMA device (Soft-RoCE, rdma_rxe).

Run them inside the test VM, which sets RDMA_TESTVM=1 and brings up rxe0
(and rxe1/rxe2 with --two-host):

    python -m rdma.testvm --two-host -- python -m pytest tests/vm

Outside the VM every test here is skipped with that instruction.  Inside
the VM a missing device is a failure, never a skip.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "verbs"))     # verbs_fixtures
# Its asserts get pytest's messages; registered before anything imports it.
pytest.register_assert_rewrite("verbs_fixtures", "fabric_helpers")
# ctx and variant (fixtures shared with the other tier) come from there
from verbs_fixtures import ctx, variant  # noqa: E402,F401
from verbs_fixtures import run_py  # noqa: E402,F401  (tests import it from here)

IN_VM = os.environ.get("RDMA_TESTVM") == "1"
DEVICE = os.environ.get("RDMA_TESTVM_DEVICE", "rxe0")
TWO_HOST = os.environ.get("RDMA_TESTVM_TWO_HOST") == "1"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.vm)
            if not IN_VM:
                item.add_marker(pytest.mark.skip(
                    reason="needs the Soft-RoCE VM: python -m rdma.testvm "
                           "--two-host -- python -m pytest tests/vm"))


def run(cmd, *, env=None, timeout=120, check=False, cwd=None):
    """Run a command; return the CompletedProcess (text)."""
    e = dict(os.environ)
    e.update(env or {})
    res = subprocess.run(cmd, capture_output=True, text=True, env=e,
                         timeout=timeout, cwd=cwd)
    if check and res.returncode != 0:
        raise AssertionError(f"{cmd} failed ({res.returncode}):\n"
                             f"{res.stdout}\n{res.stderr}")
    return res


@pytest.fixture(scope="session")
def provider():
    """The provider of the VM's devices (what verbs_fixtures asks for)."""
    return "verbs"


@pytest.fixture(scope="session")
def device():
    """The name of the VM's main RDMA device (rxe0)."""
    return DEVICE


@pytest.fixture(scope="session")
def end_port(device):
    import rdma
    return rdma.get_end_port(device)


