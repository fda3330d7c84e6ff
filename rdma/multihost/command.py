"""``ibtool validate --hosts ...``: the command-line side of
:mod:`rdma.multihost` (options parsed by :mod:`rdma.cli.validate`).

Exit status as the one-host command: 0 every check passed and no host or
link is an outlier, 1 a check failed or an outlier was found (the report
names it), 2 bad usage, 3 the run could not be made (no host started).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List

from rdma.multihost import engine, report, schedule
from rdma.multihost.hosts import (HostSpec, parse_spec, read_spec_file,
                                  start_hosts, stop_hosts)

__all__ = ["validate_hosts", "host_specs"]


def host_specs(values: List[str]) -> List[HostSpec]:
    """The :class:`~rdma.multihost.hosts.HostSpec` of ``--hosts`` values
    (each a spec or a file of specs)."""
    texts: List[str] = []
    for v in values:
        if "//" not in v and "=" not in v and v != "popen" and \
                os.path.isfile(v):
            texts.extend(read_spec_file(v))
        elif "//" not in v and "=" not in v and v != "popen":
            raise ValueError(f"--hosts {v!r}: neither an execnet spec "
                             f"(popen//..., ssh=HOST//...) nor a file")
        else:
            texts.append(v)
    return [parse_spec(t, i) for i, t in enumerate(texts)]


def validate_hosts(args: argparse.Namespace) -> int:
    specs = host_specs(args.hosts)
    if len(specs) < 2:
        raise ValueError("--hosts: give at least two hosts (the checks "
                         "run between pairs of them)")
    checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    options = engine.Options(checks=checks, quick=args.quick,
                             timeout=args.pair_timeout,
                             slow_fraction=args.slow_fraction,
                             lat_factor=args.lat_factor)
    names = [s.name for s in specs]
    rounds = schedule.pairs_for(args.pairs, names)
    if args.junitxml:
        d = os.path.dirname(os.path.abspath(args.junitxml))
        if not os.path.isdir(d):
            raise ValueError(f"--junitxml: directory {d} does not exist")
    if args.plot:
        d = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(d):
            raise ValueError(f"--plot: directory {d} does not exist")
    if args.pytest_args:
        raise ValueError("pytest arguments (after --) do not apply with "
                         "--hosts")

    def progress(msg: str) -> None:
        print(f"[ibtool validate] {msg}", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    progress(f"starting {len(specs)} gateways")
    group, hosts = start_hosts(specs, timeout=min(args.timeout, 120.0),
                               device=args.device, provider=args.provider,
                               gid_index=args.gid_index)
    try:
        for h in hosts:
            if h.dead or h.info.get("problem"):
                progress(f"{h.name}: {h.dead or h.info['problem']}")
        if not any(h.usable for h in hosts):
            print("ibtool validate: no host could be used:", file=sys.stderr)
            for h in hosts:
                print(f"  {h.name} ({h.spec.spec}): "
                      f"{h.dead or h.info.get('problem')}", file=sys.stderr)
            return 3
        res = engine.run(hosts, rounds, options, progress=progress,
                         deadline=t0 + args.timeout)
    finally:
        stop_hosts(group, hosts)
    res.seconds = time.monotonic() - t0
    if args.junitxml:
        report.write_junit(res, args.junitxml)
    from rdma.cli.validate import format_table
    pairs = sum(len(r) for r in rounds)
    print(f"ibtool validate: {len(hosts)} hosts, {pairs} "
          f"pair{'s' if pairs != 1 else ''} ({args.pairs}) in {len(rounds)} "
          f"round{'s' if len(rounds) != 1 else ''}")
    for h in hosts:
        i = h.info
        where = i.get("end_port", "-")
        print(f"  {h.name:<8} {h.spec.spec}  {where}"
              + (f" on {i['hostname']}" if i.get("hostname") else ""))
    print()
    print(format_table(report.table_rows(res)))
    print()
    if "perf" in options.checks:
        print(report.matrix_text(res))
        print()
    print(report.outlier_text(res))
    if args.plot:
        report.plot(res, args.plot)
        print(f"heatmap: {args.plot}")
    counts: Dict[str, int] = {}
    for c in res.cases:
        counts[c.result] = counts.get(c.result, 0) + 1
    summary = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items()))
    verdict = "PASSED" if res.passed else "FAILED"
    print()
    print(f"{verdict}: {summary} in {res.seconds:.1f} s"
          + (f"; JUnit XML: {args.junitxml}" if args.junitxml else ""))
    return 0 if res.passed else 1
