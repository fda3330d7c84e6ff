"""Fabric validation across many hosts, on execnet.

Each host is an execnet gateway (``ssh=node1//python=/opt/venv/bin/python``,
``popen//python=...``, ``socket=...``); an agent
(:mod:`rdma.multihost.agent`) on it opens the RDMA device and runs its end
of every check.  The controlling process runs no RDMA itself: it relays
the two ends' messages (the halves of an :class:`rdma.path.IBPath` as
plain data, checked on arrival; MR keys; results) between the gateways'
channels.

Modules: :mod:`~rdma.multihost.hosts` (specs, gateways, timeouts),
:mod:`~rdma.multihost.schedule` (pairs and rounds),
:mod:`~rdma.multihost.checks` (the two ends of each check),
:mod:`~rdma.multihost.engine` (the run and the outlier analysis),
:mod:`~rdma.multihost.report` (JUnit XML, table, matrices, heatmap).

Used by ``ibtool validate --hosts`` and by the pytest plugin's
``--rdma-hosts`` fixtures.
"""
from rdma.multihost.engine import Options, Result, run  # noqa: F401
from rdma.multihost.hosts import (CheckError, Host, HostError,  # noqa: F401
                                  parse_spec, start_hosts, stop_hosts)
