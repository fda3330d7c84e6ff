"""Build other variants of the extension beside the in-place build.

``python tests/variants.py linked asan`` builds each variant into
``build/variants/<name>/`` as a complete importable ``rdma`` package (the
Python sources are copied, the extension is compiled with that variant's
options).  Put that directory first on ``PYTHONPATH`` to use it.

Variants:
  linked  libibverbs linked at build time (RDMA_LINK_IBVERBS=1)
  asan    a debug build with AddressSanitizer (RDMA_DEBUG=asan)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "dlopen": {},
    "linked": {"RDMA_LINK_IBVERBS": "1"},
    "asan": {"RDMA_DEBUG": "asan"},
}


def variant_dir(name: str) -> Path:
    return ROOT / "build" / "variants" / name


#: What a variant is built from: a change to any of them makes it stale.
_SOURCES = ("rdma", "csrc", "setup.py")
_STAMP = "sources.sha256"


def _sources_digest(name: str) -> str:
    """SHA-256 of the variant's options and of every source file the
    build reads (names and contents; built objects and caches left out)."""
    import hashlib
    h = hashlib.sha256(repr((sys.executable, VARIANTS[name])).encode())
    files = []
    for top in _SOURCES:
        p = ROOT / top
        files += sorted(p.rglob("*")) if p.is_dir() else [p]
    for f in files:
        if not f.is_file() or f.suffix in (".so", ".pyc") or \
                "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(ROOT)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def current(name: str) -> Path:
    """The directory of variant ``name``, built only if it is missing or
    was built from other sources than the tree's now (.ci/run builds the
    variants before the tiers that use them: they are not built twice)."""
    out = variant_dir(name)
    stamp = out / _STAMP
    try:
        if stamp.read_text() == _sources_digest(name) and \
                any((out / "rdma").glob("_ibverbs*.so")):
            return out
    except FileNotFoundError:
        pass
    return build(name)


def build(name: str, quiet: bool = True) -> Path:
    """Build variant ``name``; return the directory to put on sys.path."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}: {', '.join(VARIANTS)}")
    out = variant_dir(name)
    (out / _STAMP).unlink(missing_ok=True)
    digest = _sources_digest(name)
    pkg = out / "rdma"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(ROOT / "rdma", pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = dict(os.environ, RDMA_WERROR="1", **VARIANTS[name])
    cmd = [sys.executable, "setup.py", "-q", "build_ext",
           "--build-lib", str(out),
           "--build-temp", str(ROOT / "build" / f"temp-{name}"), "--force"]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True,
                         text=True)
    if res.returncode != 0:
        raise RuntimeError(f"building variant {name} failed:\n"
                           f"{res.stdout}\n{res.stderr}")
    if not quiet:
        sys.stdout.write(res.stdout)
    (out / _STAMP).write_text(digest)
    return out


def build_cython_example() -> Path:
    """Compile examples/cython/fastloop.pyx against rdma.get_include() into
    build/variants/cython-example; return that directory."""
    out = variant_dir("cython-example")
    cmd = [sys.executable, str(ROOT / "examples" / "cython" / "setup.py"),
           "-q", "build_ext", "--build-lib", str(out), "--build-temp",
           str(ROOT / "build" / "temp-cython")]
    res = subprocess.run(cmd, cwd=ROOT / "build", capture_output=True,
                         text=True)
    if res.returncode != 0:
        raise RuntimeError(f"building the Cython example failed:\n"
                           f"{res.stdout}\n{res.stderr}")
    return out


def asan_runtime() -> str:
    """Path of the ASan runtime of the compiler that built the asan variant."""
    return subprocess.run(["gcc", "-print-file-name=libasan.so"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()


if __name__ == "__main__":
    for n in sys.argv[1:] or ["linked", "asan", "cython-example"]:
        d = build_cython_example() if n == "cython-example" else build(n)
        print(f"[variants] {n}: {d}")
