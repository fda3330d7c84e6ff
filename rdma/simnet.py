"""A simulated InfiniBand subnet: rdma's ibsim client shim.

``librdma_umad2sim.so`` (``csrc/umad2sim/``, built by ``setup.py`` next
to the fabric libraries in ``rdma/fabric/``) is preloaded into a process
that uses libibumad (opensm, infiniband-diags, rdma itself).  The process
then sees one CA, ``ibsim0``, whose port is a node of the fabric an
``ibsim`` server (Debian's ``ibsim-utils``) simulates, and its MADs travel
through that server.  See ``docs/sa.rst`` for what the shim does.

The environment the shim reads:

``IBSIM_SOCKNAME``
    the server's socket name (``ibsim`` started with the same variable);
``SIM_HOST``
    the node (name or NodeDescription) to sit on, else ibsim's default;
``SIM_SET_ISSM``
    set: the port is SM-capable from the start;
``UMAD2SIM_WAIT``
    seconds to wait for the server (default 30);
``UMAD2SIM_DEBUG``
    set: say on stderr what the shim does.
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional

__all__ = ["SHIM_LIBRARY", "shim_path", "environ"]

#: File name of the shim, in ``rdma/fabric/``.
SHIM_LIBRARY = "librdma_umad2sim.so"

_FABRIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "fabric")


def shim_path() -> str:
    """Return the absolute path of the shim.

    :raises FileNotFoundError: if it was not built (the message says how).
    """
    path = os.path.join(_FABRIC_DIR, SHIM_LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} is missing: build it with 'python setup.py build_ext "
            f"--inplace' (or 'pip install -e .'), which builds the ibsim "
            f"shim with the fabric libraries")
    return path


def environ(node: Optional[str], sockname: str,
            base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Return a copy of *base* (default ``os.environ``) for a process on
    ``node`` of the ibsim server named ``sockname``: the shim is added to
    ``LD_PRELOAD`` (after what is there), ``SIM_HOST`` and
    ``IBSIM_SOCKNAME`` are set."""
    env = dict(os.environ if base is None else base)
    lib = shim_path()
    rest = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
            if p and p != lib]
    env["LD_PRELOAD"] = " ".join(rest + [lib])
    env["IBSIM_SOCKNAME"] = sockname
    if node is not None:
        env["SIM_HOST"] = node
    return env
