"""Shared fixtures of the host tier (no RDMA device needed)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def run_py(code, *, pythonpath=None, env=None, timeout=60):
    """Run code in a fresh interpreter (-P: the cwd is not on sys.path)."""
    e = dict(os.environ)
    e.pop("RDMA_PROVIDER", None)
    if pythonpath is not None:
        e["PYTHONPATH"] = str(pythonpath)
    e.update(env or {})
    return subprocess.run([sys.executable, "-P", "-c", code], env=e,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def linked_variant():
    """The linked build of the extension (build/variants/linked)."""
    import variants
    return variants.build("linked")
