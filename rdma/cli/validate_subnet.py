"""``ibtool validate-subnet``: validate an InfiniBand subnet with pytest
(:mod:`rdma.validation.ib_suite`): the topology equals an expected
ibnetdiscover file, every link at its expected width and speed, no error
counter above its threshold, every LID pair routes, one master SM.

::

    ibtool ibnetdiscover expected.topo          # on the healthy subnet
    ibtool validate-subnet --topology expected.topo [--rate 4xSDR]
        [--threshold SymbolErrorCounter=10] [--junitxml out.xml]

It prints a table of the checks, as ``ibtool validate`` does, and for each
check that failed its whole message, which lists every node, port and
value at fault.  Exit status: 0 when every check passes, 1 when one
fails, 2 for bad usage, 3 when pytest could not run or timed out.
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, List

from rdma.cli._ibopts import CmdError
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "validate_subnet"]


DESCRIPTION = (
    "Validate an InfiniBand subnet against what it should be: the "
    "topology equals an expected ibnetdiscover file, every link runs at "
    "its expected width and speed, no error counter is above its "
    "threshold, every LID pair routes through the forwarding tables, and "
    "exactly one SM is MASTER.  Prints a table of the checks (as ibtool "
    "validate does) and, for each check that failed, every node, port and "
    "value at fault.  Runs the pytest suite rdma.validation.ib_suite in a "
    "child process; -v shows pytest's own output.")


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``validate-subnet`` to ``ibtool``."""
    p = subparsers.add_parser(
        name, help=help, description=DESCRIPTION,
        epilog="exit status: 0 every check passed (or was skipped), 1 a "
               "check failed, 2 bad usage, 3 pytest could not run or timed "
               "out")
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
    p.add_argument("--timeout", type=float, default=1800, metavar="S",
                   help="stop the run after S seconds (default 1800)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show pytest's output (progress and tracebacks)")
    return p


def _plugin_args() -> List[str]:
    """-p options that load the suite's plugin exactly once (run_suite
    turns the autoloading of plugins off)."""
    try:
        from importlib.metadata import entry_points
        if any(ep.name == "rdma_ib" and
               ep.value == "rdma.validation.ib_plugin"
               for ep in entry_points(group="pytest11")):
            return ["-p", "rdma_ib"]
    except Exception:       # noqa: BLE001 - then by module name
        pass
    return ["-p", "rdma.validation.ib_plugin"]


def _pytest_args(args: argparse.Namespace, junit: str) -> List[str]:
    argv: List[str] = ["-m", "pytest", "--pyargs", "rdma.validation.ib_suite",
                       *_plugin_args(),
                       "-p", "no:cacheprovider", f"--junitxml={junit}",
                       "-o", "junit_family=xunit1", "-o", "junit_logging=no"]
    argv += ["-rN", "--tb=short"] if args.verbose else \
        ["-q", "--tb=no", "-rN", "--no-header"]
    port = None
    if args.CA or args.port:
        port = f"{args.CA or ''}{'/' if args.CA and args.port else ''}" \
               f"{args.port or ''}"
    for opt, value in (("--ib-port", port), ("--ib-topology", args.topology),
                       ("--ib-rate", args.rate), ("-k", args.keyword)):
        if value:
            argv += [opt, value]
    for t in args.threshold:
        argv += ["--ib-threshold", t]
    return argv + ["--ib-max-errors", str(args.max_errors)]


def _faults(junit: str) -> Dict[str, str]:
    """The whole message of each failed check whose message has more
    than the line the table shows (test name: text): the list of every
    node, port and value at fault."""
    import xml.etree.ElementTree as ET
    out: Dict[str, str] = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            el = tc.find(tag)
            if el is None:
                continue
            text = (el.get("message") or el.text or "").strip()
            for prefix in ("Failed: ", "AssertionError: "):
                if text.startswith(prefix):
                    text = text[len(prefix):]
            if "\n" in text:
                out[tc.get("name", "")] = text
            break
    return out


def _report(args: argparse.Namespace, rc: int, junit: str,
            elapsed: float) -> int:
    """Print the header, the table, the faults and the verdict; return
    the exit status."""
    from rdma.cli.validate import format_table, read_junit
    rows, _ = read_junit(junit)
    for r in rows:          # one module: the check's name is enough
        r["test"] = r["test"].rsplit("::", 1)[-1]
    port = f"{args.CA or 'the first CA'}" + (f" port {args.port}"
                                              if args.port else "")
    print(f"ibtool validate-subnet: the subnet of {port}"
          + (f", expected topology {args.topology}" if args.topology else "")
          + (f", rate {args.rate}" if args.rate else ""))
    print()
    print(format_table(rows))
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r["result"].lower()] = counts.get(r["result"].lower(), 0) + 1
    failed = counts.get("failed", 0) + counts.get("error", 0)
    faults = _faults(junit)
    for name, text in faults.items():
        print()
        print(f"{name}:")
        for line in text.splitlines():
            print(f"  {line}")
    print()
    verdict = "FAILED" if failed or rc == 1 else "PASSED"
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{verdict}: {summary or 'no checks ran'} in {elapsed:.1f} s"
          + (f"; JUnit XML: {args.junitxml}" if args.junitxml else ""))
    return 1 if failed or rc == 1 else 0


def validate_subnet(args: argparse.Namespace) -> int:
    """Run ``ibtool validate-subnet``; return the exit status."""
    import shutil
    import sys
    import tempfile
    import time
    from rdma.cli.validate import run_suite
    if args.topology and not os.path.exists(args.topology):
        raise CmdError(f"no topology file {args.topology!r}")
    if args.timeout <= 0:
        raise ValueError("--timeout must be positive")
    tmpdir = tempfile.mkdtemp(prefix="rdma-validate-subnet-")
    if args.topology:
        args.topology = os.path.abspath(args.topology)
    junit = os.path.abspath(args.junitxml) if args.junitxml else \
        os.path.join(tmpdir, "subnet.xml")
    try:
        if os.path.exists(junit):
            os.unlink(junit)
        t0 = time.monotonic()
        # pytest in a child: this process has imported rdma already, so
        # pytest could not rewrite the suite's asserts here
        rc, output = run_suite(_pytest_args(args, junit), args.timeout,
                               args.verbose)
        elapsed = time.monotonic() - t0
        if rc < 0 or not os.path.exists(junit):
            print(output.rstrip(), file=sys.stderr)
            print("ibtool validate-subnet: "
                  + (f"stopped after {args.timeout:g} s" if rc < 0 else
                     f"pytest wrote no report (exit status {rc})"),
                  file=sys.stderr)
            return 2 if rc == 4 else 3
        if args.verbose:
            print()
        return _report(args, rc, junit, elapsed)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
