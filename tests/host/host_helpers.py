"""Helpers shared by the host-tier tests (imported by name; conftest.py
modules of several tiers cannot be imported as "conftest")."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def run_py(code, *, pythonpath=None, env=None, timeout=60):
    """Run code in a fresh interpreter (-P: the cwd is not on sys.path)."""
    e = dict(os.environ)
    e.pop("RDMA_PROVIDER", None)
    if pythonpath is not None:
        e["PYTHONPATH"] = str(pythonpath)
    e.update(env or {})
    return subprocess.run([sys.executable, "-P", "-c", code], env=e,
                          capture_output=True, text=True, timeout=timeout)
