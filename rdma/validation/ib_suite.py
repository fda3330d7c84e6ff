"""InfiniBand subnet checks (``ibtool validate-subnet``, or ``pytest
--pyargs rdma.validation.ib_suite --ib-topology FILE``).

Not named ``test_*``: ``pytest --pyargs rdma.validation`` (the verbs suite
of ``ibtool validate``) does not collect it; named explicitly, it is.

Each test collects every failure of its kind before failing, and its
message lists them, one line each, naming node, port and value
(:mod:`rdma.validation.ib_subnet`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

import pytest

from rdma.validation import ib_subnet as ibs

if TYPE_CHECKING:
    from rdma.umad import UMAD
    from rdma.validation.ib_subnet import Topology


def _fail_if(failures: List[str], what: str) -> None:
    if failures:
        pytest.fail(f"{len(failures)} {what}:\n" + "\n".join(failures),
                    pytrace=False)


def test_topology_matches(ib_subnet: Any, ib_topology: Topology) -> None:
    """The discovered nodes and links equal the expected topology file."""
    _fail_if(ibs.check_topology(ib_subnet, ib_topology),
             "topology differences")


def test_link_rates(pytestconfig: pytest.Config, ib_subnet: Any,
                    request: pytest.FixtureRequest) -> None:
    """Every link runs at its expected width and speed."""
    rate = pytestconfig.getoption("ib_rate")
    topo = None
    if rate is None:
        if not pytestconfig.getoption("ib_topology"):
            pytest.skip("no expected rate (--ib-rate or --ib-topology)")
        topo = request.getfixturevalue("ib_topology")
    _fail_if(ibs.check_link_rates(ib_subnet, topo, rate),
             "links at the wrong rate")


def test_error_counters(pytestconfig: pytest.Config, ib_umad: UMAD,
                        ib_subnet: Any, ib_thresholds: Dict[str, int]) -> None:
    """No port has an error counter above its threshold."""
    _fail_if(ibs.check_error_counters(
        ib_umad, ib_subnet, ib_thresholds,
        pytestconfig.getoption("ib_max_errors")),
        "error counters above threshold")


def test_every_lid_pair_routes(ib_subnet: Any) -> None:
    """Every end port reaches every LID through the forwarding tables."""
    _fail_if(ibs.check_routes(ib_subnet), "LID pairs without a route")


def test_one_master_sm(ib_umad: UMAD, ib_subnet: Any) -> None:
    """Exactly one subnet manager is MASTER."""
    _fail_if(ibs.check_sm(ib_umad, ib_subnet), "SM problems")
