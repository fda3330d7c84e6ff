"""The code is linted and typed.

- ``ruff check`` with the project's configuration (pyproject.toml
  ``[tool.ruff]``) over the whole tree;
- ``mypy`` with the project's configuration (``[tool.mypy]``: strict on
  rdma/, a short list of reasoned exceptions);
- mypy's ``stubtest`` of the C extensions' stubs (rdma/_ibverbs.pyi,
  rdma/_umad.pyi) against the built extensions: every name, class,
  method and signature the stubs give must be what the extension has.

Each runs as a subprocess of this venv's Python, from the top of the
tree, and fails with the tool's whole report.  A tool that is not
installed skips its test (``.ci/setup`` installs them from
.ci/requirements.txt).  mypy keeps its cache in build/mypy-cache.
"""
import importlib.util
import os
import subprocess
import sys

import pytest

from host_helpers import ROOT


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -r "
                    f".ci/requirements.txt)")


def _run(*args: str, timeout: float = 900) -> str:
    """Run ``python -m ARGS`` at the top of the tree, this tree first on
    the path; return the output if it exited 0, else fail with it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    res = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{' '.join(args)}:\n{out}"
    return out


def test_ruff():
    _need("ruff")
    _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")


def test_mypy_strict_on_rdma():
    _need("mypy")
    _run("mypy", "--config-file", "pyproject.toml")


def test_stubs_match_the_extensions():
    _need("mypy")
    _run("mypy.stubtest", "--mypy-config-file", "pyproject.toml",
         "rdma._ibverbs", "rdma._umad")


def test_iba_struct_all_lists_every_structure():
    """rdma.IBA_struct.__all__ is written out (type checkers read it):
    it must still name exactly the structure classes the module
    defines."""
    import rdma.IBA_struct as S
    from rdma.binstruct import BinFormat, BinStruct
    defined = {n for n, v in vars(S).items()
               if isinstance(v, type) and issubclass(v, BinStruct)
               and v not in (BinStruct, BinFormat) and not n.startswith("_")}
    listed = set(S.__all__) - {"CLASS_TO_STRUCT", "ATTR_TO_STRUCT"}
    assert listed == defined, (f"missing from __all__: {defined - listed}; "
                               f"not defined: {listed - defined}")
