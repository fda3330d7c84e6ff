"""``ibtool validate-subnet``: validate an InfiniBand subnet with pytest
(:mod:`rdma.validation.ib_suite`): the topology equals an expected
ibnetdiscover file, every link at its expected width and speed, no error
counter above its threshold, every LID pair routes, one master SM.

::

    ibtool ibnetdiscover expected.topo          # on the healthy subnet
    ibtool validate-subnet --topology expected.topo [--rate 4xSDR]
        [--threshold SymbolErrorCounter=10] [--junitxml out.xml]

Exit status: 0 when every check passes, 1 when one fails (its message
lists every node, port and value at fault), 2 for bad usage.
"""
from __future__ import annotations

import argparse
import os
from typing import List

from rdma.cli._ibopts import CmdError
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "validate_subnet"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``validate-subnet`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("--topology", metavar="FILE",
                   help="the expected topology (ibnetdiscover format)")
    p.add_argument("--rate", metavar="RATE",
                   help="expected width and speed of every link (4xSDR); "
                        "default: the topology file's")
    p.add_argument("--threshold", action="append", default=[],
                   metavar="NAME=N", help="an error counter's threshold")
    p.add_argument("--max-errors", type=int, default=0, metavar="N",
                   help="threshold of the other error counters (default 0)")
    p.add_argument("-C", "--Ca", dest="CA", default=None,
                   help="the local CA to discover from")
    p.add_argument("-P", "--Port", dest="port", default=None,
                   help="its port")
    p.add_argument("--junitxml", metavar="FILE", help="JUnit XML report")
    p.add_argument("-k", dest="keyword", default=None,
                   help="only the checks matching this pytest expression")
    return p


def validate_subnet(args: argparse.Namespace) -> int:
    """Run ``ibtool validate-subnet``; return the exit status."""
    import subprocess
    import sys
    if args.topology and not os.path.exists(args.topology):
        raise CmdError(f"no topology file {args.topology!r}")
    argv: List[str] = ["--pyargs", "rdma.validation.ib_suite", "-q",
                       "-p", "no:cacheprovider", "--tb=line", "-rfEs"]
    port = None
    if args.CA or args.port:
        port = f"{args.CA or ''}{'/' if args.CA and args.port else ''}" \
               f"{args.port or ''}"
    for opt, value in (("--ib-port", port), ("--ib-topology", args.topology),
                       ("--ib-rate", args.rate),
                       ("--junitxml", args.junitxml), ("-k", args.keyword)):
        if value:
            argv += [opt, value]
    for t in args.threshold:
        argv += ["--ib-threshold", t]
    argv += ["--ib-max-errors", str(args.max_errors)]
    # pytest in a child: this process has imported rdma already, so
    # pytest could not rewrite the suite's asserts here
    rc = subprocess.call([sys.executable, "-m", "pytest", *argv])
    return 0 if rc == 0 else (2 if rc in (3, 4) else 1)
