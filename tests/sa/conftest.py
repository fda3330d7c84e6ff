"""Fixtures of the sa tier: simulated fabrics (ibsim + opensm).

One fabric per topology and test session, started on first use and torn
down at the end of the session even when tests fail.  Tests talk to it
through shimmed subprocesses only (the shim must be preloaded before a
process starts): ``fabric.worker(node)`` for our library, ``fabric.run``
for infiniband-diags' ``saquery`` and our ``ibtool saquery``.
"""
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fabric import NET_EXAMPLES, SHIM, Fabric  # noqa: E402

#: How long the processes of a session's fabric may live (Fabric's
#: ``lifetime``, enforced by coreutils timeout): the whole tier, not one
#: test.  Fabric's default of 900 s is a test's; the tier took 16 minutes
#: on the loaded 2-core machine, and a fabric started by an early test
#: was killed under a late one ("no ibsim server ... Connection
#: refused").  CI's limit for the whole suite is 90 minutes; nothing
#: outlives a crashed run by more than that.
SESSION_LIFETIME = 90 * 60

#: The topologies: ibsim's shipped examples and our own.
TOPOLOGIES = {
    "2sw4hca": NET_EXAMPLES / "net.2sw2path4hca",
    "2sw2hca": NET_EXAMPLES / "net.2sw2path",
    "2sw2hca2port": NET_EXAMPLES / "net.2sw2path4hca2port",
    "1sw2hca": NET_EXAMPLES / "net.1",
    "net": NET_EXAMPLES / "net",
    "1sw4hca": HERE / "topologies" / "1sw4hca",
}


def _missing():
    for tool in ("ibsim", "opensm", "saquery", "timeout"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not SHIM.exists():
        return (f"{SHIM} is missing (build rdma: setup.py build_ext "
                f"--inplace, or .ci/setup)")
    return None


@pytest.fixture(scope="session")
def fabrics(tmp_path_factory):
    """A factory ``fabrics(name, sm=True)`` of started fabrics, cached for
    the session; everything is stopped at the end of the session."""
    why = _missing()
    if why:
        pytest.skip(why)
    started = {}

    def get(name, sm=True):
        key = (name, sm)
        if key not in started:
            scratch = tmp_path_factory.mktemp(f"fabric-{name}-{int(sm)}")
            f = Fabric(TOPOLOGIES[name], scratch,
                       sm_node="Hca1" if sm else None,
                       lifetime=SESSION_LIFETIME)
            started[key] = f     # registered before start: always closed
            f.start()
        return started[key]

    try:
        yield get
    finally:
        for f in started.values():
            f.close()


@pytest.fixture(scope="session")
def fabric(fabrics):
    """The main fabric: two switches, four HCAs (ibsim's
    net.2sw2path4hca), opensm on Hca1."""
    return fabrics("2sw4hca")


@pytest.fixture(scope="session")
def worker(fabric):
    """Our library in a shimmed process on Hca2 of the main fabric."""
    return fabric.worker("Hca2")
