"""Connection-manager rate on ucx0 (and rxe0 in the VM), with rdma-core's
``cmtime`` (not a test): run
``python tests/bench/bench_cm.py [-c N] [--reps R] [--vm]``.

``cmtime -c N`` (one client process against one server process) creates N
IDs, resolves their addresses and routes, creates their QPs, connects all
of them (all REQs out, then the events), disconnects and destroys them,
and prints each step's total time.  Here: connections per second of the
connect step (N / its total) and of the whole cycle (N / the sum of the
steps), over UCX shared memory and TCP (two processes on one host,
``python -m rdma.fabric exec``), the median of R runs.  With ``--vm`` the
same runs on rxe0 (Soft-RoCE, 192.0.2.1) in the test VM
(``python -m rdma.testvm``), and the ratio ucx0 / rxe0 is printed (goal of
issue 23: at least 5).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from bench_ucx import TLS, _free_port  # noqa: E402

STEP = re.compile(r"^(create id|resolve addr|resolve route|create qp|"
                  r"connect|disconnect|destroy)\s*:\s*([\d.]+)", re.M)


def cmtime(n: int, env: dict, addr: str, fabric: bool) -> dict:
    """One cmtime run of *n* connections; the steps' total ms."""
    port = _free_port()
    pre = [sys.executable, "-m", "rdma.fabric", "exec", "--"] if fabric \
        else []
    srv = subprocess.Popen([*pre, "cmtime", "-b", addr, "-p", str(port),
                            "-c", str(n)], env=env,
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5 if fabric else 3)
        res = subprocess.run([*pre, "cmtime", "-s", addr, "-p", str(port),
                              "-c", str(n)], env=env, capture_output=True,
                             text=True, timeout=600)
    finally:
        srv.kill()
        srv.wait()
    steps = {m.group(1): float(m.group(2)) for m in STEP.finditer(res.stdout)}
    if res.returncode != 0 or "connect" not in steps:
        raise RuntimeError(res.stdout + res.stderr)
    return steps


def rates(runs: list, n: int) -> tuple:
    """(connect/s, cycle/s): medians over *runs*."""
    conn = statistics.median(n / (s["connect"] / 1000) for s in runs)
    cycle = statistics.median(n / (sum(s.values()) / 1000) for s in runs)
    return conn, cycle


def measure_ucx(n: int, reps: int) -> dict:
    out = {}
    for tls, extra in TLS.items():
        runs = []
        for _ in range(reps):
            with tempfile.TemporaryDirectory() as d:
                os.chmod(d, 0o700)
                env = dict(os.environ, RDMA_UCX_DIR=d,
                           UCX_WARN_UNUSED_ENV_VARS="n", **extra)
                runs.append(cmtime(n, env, "127.0.0.1", True))
        out[f"ucx0 {tls}"] = rates(runs, n)
    return out


def measure_rxe(n: int, reps: int) -> dict:
    addr = os.environ.get("RDMA_TESTVM_IPV4", "192.0.2.1")
    runs = [cmtime(n, dict(os.environ), addr, False) for _ in range(reps)]
    return {"rxe0": rates(runs, n)}


def in_vm(n: int, reps: int) -> dict:
    """Run this script with --guest in the test VM; its figures."""
    res = subprocess.run(
        [sys.executable, "-m", "rdma.testvm", "--timeout", "1200", "--",
         sys.executable, str(Path(__file__).resolve()), "--guest", "-c",
         str(n), "--reps", str(reps)], capture_output=True, text=True,
        cwd=ROOT, timeout=1800)
    got = {}
    for line in res.stdout.splitlines():
        m = re.match(r"^(rxe0)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            got[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if not got:
        raise RuntimeError(res.stdout + res.stderr)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", type=int, default=200, help="connections per run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vm", action="store_true",
                    help="also measure rxe0 in the test VM")
    ap.add_argument("--guest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.guest:
        for k, (c, y) in measure_rxe(args.c, args.reps).items():
            print(f"{k} {c:.1f} {y:.1f}")
        return 0
    got = measure_ucx(args.c, args.reps)
    if args.vm:
        got.update(in_vm(args.c, args.reps))
    print(f"cmtime -c {args.c}, median of {args.reps}")
    print(f"{'device':<12} {'connect/s':>10} {'cycle/s':>10}")
    for k, (c, y) in got.items():
        print(f"{k:<12} {c:>10.0f} {y:>10.0f}")
    if "rxe0" in got:
        base = got["rxe0"][0]
        for k, (c, _) in got.items():
            if k != "rxe0":
                print(f"{k}: {c / base:.1f}x rxe0's connect rate (goal 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
