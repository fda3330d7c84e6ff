"""pytest plugin for InfiniBand subnet validation
(:mod:`rdma.validation.ib_suite`).

Options (group "rdma-ib"):

``--ib-port CA/PORT``        the local umad port to discover from (default:
                             the first ACTIVE one)
``--ib-topology FILE``       the expected topology (ibnetdiscover format)
``--ib-rate RATE``           the expected rate of every link (``4xSDR``);
                             default: each link's rate in the topology file
``--ib-threshold NAME=N``    an error counter's threshold (repeatable)
``--ib-max-errors N``        the threshold of the other counters (default 0)

Fixtures: ``ib_umad`` (a :class:`rdma.umad.UMAD` on that port),
``ib_subnet`` (the subnet :func:`rdma.validation.ib_subnet.discover`
finds, once per session), ``ib_topology`` (the parsed expected topology;
the test is skipped without ``--ib-topology``), ``ib_thresholds``.

It is registered as the ``rdma_ib`` pytest11 entry point; ``ibtool
validate-subnet`` loads it explicitly.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Generator

import pytest

if TYPE_CHECKING:
    from rdma.umad import UMAD
    from rdma.validation.ib_subnet import Topology


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("rdma-ib", "InfiniBand subnet validation "
                                   "(rdma.validation.ib_plugin)")
    g.addoption("--ib-port", dest="ib_port", default=None,
                metavar="CA/PORT", help="the local umad port")
    g.addoption("--ib-topology", dest="ib_topology", default=None,
                metavar="FILE", help="the expected topology "
                                     "(ibnetdiscover format)")
    g.addoption("--ib-rate", dest="ib_rate", default=None, metavar="RATE",
                help="expected width and speed of every link, e.g. 4xSDR")
    g.addoption("--ib-threshold", dest="ib_threshold", action="append",
                default=[], metavar="NAME=N",
                help="threshold of one error counter (repeatable)")
    g.addoption("--ib-max-errors", dest="ib_max_errors", type=int,
                default=0, metavar="N",
                help="threshold of the other error counters (default 0)")


@pytest.fixture(scope="session")
def ib_umad(pytestconfig: pytest.Config) -> Generator[UMAD, None, None]:
    """A UMAD on the port under test (``--ib-port``)."""
    import rdma.umad
    name = pytestconfig.getoption("ib_port")
    try:
        end_port = rdma.umad.get_end_port(name)
    except Exception as e:          # noqa: BLE001 - a check that fails
        pytest.fail(f"no InfiniBand port to validate from: {e}",
                    pytrace=False)
    umad = rdma.umad.UMAD(end_port)
    yield umad
    umad.close()


@pytest.fixture(scope="session")
def ib_subnet(ib_umad: UMAD) -> Any:
    """The subnet discovered from ``ib_umad``'s port (with the LFDBs)."""
    from rdma.validation.ib_subnet import discover
    return discover(ib_umad)


@pytest.fixture(scope="session")
def ib_topology(pytestconfig: pytest.Config) -> Topology:
    """The expected topology of ``--ib-topology`` (skip without it)."""
    from rdma.validation.ib_subnet import parse_topology
    path = pytestconfig.getoption("ib_topology")
    if not path:
        pytest.skip("no expected topology (--ib-topology FILE)")
    return parse_topology(path)


@pytest.fixture(scope="session")
def ib_thresholds(pytestconfig: pytest.Config) -> Dict[str, int]:
    """``--ib-threshold`` as ``{counter name: threshold}``."""
    out: Dict[str, int] = {}
    for spec in pytestconfig.getoption("ib_threshold"):
        name, sep, value = spec.partition("=")
        if not sep:
            raise pytest.UsageError(f"--ib-threshold {spec!r}: want NAME=N")
        out[name] = int(value, 0)
    return out
