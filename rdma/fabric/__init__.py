"""The software fabric (``ucx0``) for C programs.

Two shared libraries with no Python in them are built next to this file:

``librdma_fabric.so``
    the fabric itself (``csrc/fabric/``; its provider ops table is in
    ``csrc/fabric/ops.c``),
    exporting ``pyrdma_fabric_provider()`` (``csrc/fabric_lib.h``);
``librdma_fabric_verbs.so``
    a verbs front end: preloaded into an unmodified C program linked against
    libibverbs, it adds ``ucx0`` to the program's devices and sends every
    call on a real device to the real libibverbs.

Importing this package does nothing but define the functions below; the
command line is ``python -m rdma.fabric`` (see :mod:`rdma.fabric.__main__`
and ``docs/c_programs.rst``).
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

__all__ = ["FRONT_END", "FABRIC_LIBRARY", "library_path", "preload_value",
           "environ"]

#: File name of the verbs front end (what goes into ``LD_PRELOAD``).
FRONT_END = "librdma_fabric_verbs.so"
#: File name of the standalone fabric library the front end loads.
FABRIC_LIBRARY = "librdma_fabric.so"

_HERE = os.path.dirname(os.path.abspath(__file__))


def library_path(name: str = FRONT_END) -> str:
    """Return the absolute path of one of the fabric's shared libraries.

    :param name: :data:`FRONT_END` (default) or :data:`FABRIC_LIBRARY`.
    :raises ValueError: for another name.
    :raises FileNotFoundError: if it was not built (the message says how).
    """
    if name not in (FRONT_END, FABRIC_LIBRARY):
        raise ValueError(f"unknown fabric library {name!r}: expected "
                         f"{FRONT_END!r} or {FABRIC_LIBRARY!r}")
    path = os.path.join(_HERE, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} is missing: build it with 'python setup.py build_ext "
            f"--inplace' (or 'pip install -e .'), which builds the fabric "
            f"libraries with the extension")
    return path


def preload_value(current: Optional[str] = None) -> str:
    """Return the ``LD_PRELOAD`` value that adds the front end.

    :param current: the value to extend (default: none).  Its entries stay
        first, in their order (the ASan runtime, for one, must come first),
        and the front end follows them, once.  What matters to the front
        end is only that it comes before libibverbs, which a program links
        (it is never preloaded).
    """
    lib = library_path()
    rest = [p for p in (current or "").replace(":", " ").split()
            if p and p != lib]
    return " ".join(rest + [lib])


def environ(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Return a copy of *base* (default ``os.environ``) in which a C verbs
    program sees ``ucx0``: the front end is added to ``LD_PRELOAD``
    (see :func:`preload_value`)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = preload_value(env.get("LD_PRELOAD"))
    return env
