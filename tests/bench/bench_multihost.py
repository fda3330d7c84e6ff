"""Cost of ``ibtool validate --hosts`` against the number of hosts.

    python tests/bench/bench_multihost.py [--sizes 2,4,8,16] [--full]

For each N: N simulated hosts (network namespaces, tests/multihost/
netns.py; needs root), all pairs on the round-robin schedule, the software
fabric over TCP.  Prints the wall time (gateways started, checks run), the
rounds, the peak RSS of each host's agent (median and max) and of the
controlling process, and how many checks failed.  The transfer sizes
are ``--quick``'s (1 B..1 MiB in powers of 4) unless ``--full`` (which
adds the MTU boundaries).
"""
import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multihost"))
from netns import Cluster  # noqa: E402

from rdma.multihost import engine, schedule  # noqa: E402
from rdma.multihost.hosts import parse_spec, start_hosts, stop_hosts  # noqa: E402


def one(n: int, quick: bool) -> dict:
    with Cluster(n) as c:
        specs = [parse_spec(s, i) for i, s in enumerate(c.specs())]
        t0 = time.monotonic()
        group, hosts = start_hosts(specs, timeout=120)
        t_start = time.monotonic() - t0
        try:
            rounds = schedule.all_pairs_rounds(n)
            t1 = time.monotonic()
            res = engine.run(hosts, rounds, engine.Options(
                quick=quick, slow_fraction=0.2))
            t_run = time.monotonic() - t1
        finally:
            stop_hosts(group, hosts)
    rss = [m["maxrss_kib"] / 1024 for m in res.memory.values()]
    return {"n": n, "pairs": sum(len(r) for r in rounds),
            "rounds": len(rounds), "start_s": t_start, "run_s": t_run,
            "per_round_s": t_run / max(1, len(rounds)),
            "agent_rss_med": statistics.median(rss) if rss else 0,
            "agent_rss_max": max(rss) if rss else 0,
            "ctl_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            / 1024,
            "cases": len(res.cases), "failed": len(res.failed),
            "outliers": dict(res.outliers.hosts, **{
                f"{a}-{b}": w for (a, b), w in res.outliers.links.items()})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2,4,8,16")
    ap.add_argument("--full", action="store_true")
    args = ap.parse_args()
    print(f"{'N':>3} {'pairs':>5} {'rounds':>6} {'start s':>8} {'run s':>7} "
          f"{'s/round':>7} {'agent MiB (med/max)':>20} {'ctl MiB':>8} "
          f"{'cases':>6} {'failed':>6}", flush=True)
    for n in [int(x) for x in args.sizes.split(",")]:
        r = one(n, not args.full)
        print(f"{r['n']:>3} {r['pairs']:>5} {r['rounds']:>6} "
              f"{r['start_s']:>8.1f} {r['run_s']:>7.1f} "
              f"{r['per_round_s']:>7.1f} "
              f"{r['agent_rss_med']:>11.1f}/{r['agent_rss_max']:<8.1f} "
              f"{r['ctl_rss']:>8.1f} {r['cases']:>6} {r['failed']:>6}"
              + (f"  outliers: {r['outliers']}" if r["outliers"] else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
