"""Memory windows: rate of IBV_WR_BIND_MW + IBV_WR_LOCAL_INV pairs on ucx0
against rxe0 in the test VM (issue 22, "Performance"; not a test):

    .venv/bin/python tests/bench/bench_mw.py [--reps 3] [--seconds 1]
                                             [--size 8] [--no-vm]

The same C program, ``tests/bench/c/verbs_loop.c mw-rate`` (one process,
one thread, one RC QP connected to a second one on the same device: a
type 2 window bound over SIZE bytes of an MR and invalidated again, each
WR signaled and posted with its own ``ibv_post_send``, at most 32 pairs in
flight), is compiled with ``gcc -O2`` and run

- on the host on ucx0 through the verbs front end
  (``python -m rdma.fabric exec``), over shared memory (UCX_TLS=shm,self);
- in the Soft-RoCE VM (rdma.testvm, one boot) on rxe0, compiled there.

It prints the medians of ``--reps`` runs of each and their ratio
(ucx0 / rxe0: above 1, ucx0 binds and invalidates faster).  The VM runs
under TCG where the host has no KVM: its rate is that of an emulated CPU,
so the ratio says how the two compare on this machine, not on hardware.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SRC = HERE / "c" / "verbs_loop.c"
LINE = re.compile(r"^mw-rate size=(\d+) ops=(\d+) seconds=([\d.]+) "
                  r"mops=([\d.]+)", re.M)


def rates(out: str) -> list[float]:
    """The pair rates (pairs/s) of verbs_loop's mw-rate lines in out."""
    return [float(m.group(4)) * 1e6 for m in LINE.finditer(out)]


def on_ucx0(reps: int, seconds: float, size: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        exe = Path(d) / "verbs_loop"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(SRC), "-libverbs"],
                       check=True)
        rdv = Path(d) / "rdv"
        rdv.mkdir(mode=0o700)
        env = dict(os.environ, RDMA_UCX_DIR=str(rdv), UCX_TLS="shm,self",
                   UCX_WARN_UNUSED_ENV_VARS="n", BENCH_DEVICE="ucx0",
                   BENCH_GID_INDEX="0")
        out = []
        for _ in range(reps):
            res = subprocess.run(
                [sys.executable, "-m", "rdma.fabric", "exec", "--", str(exe),
                 "mw-rate", str(seconds), str(size)],
                env=env, capture_output=True, text=True, timeout=120,
                cwd=ROOT)
            if res.returncode != 0:
                raise RuntimeError(f"mw-rate on ucx0 failed:\n{res.stdout}"
                                   f"\n{res.stderr}")
            out += rates(res.stdout)
        return out


def on_rxe0(reps: int, seconds: float, size: int) -> list[float]:
    sys.path.insert(0, str(ROOT))
    from rdma import testvm
    script = (
        "set -e; d=$(mktemp -d); "
        f"gcc -O2 -o $d/verbs_loop {shlex.quote(str(SRC))} -libverbs; "
        f"for i in $(seq {reps}); do "
        "BENCH_DEVICE=${RDMA_TESTVM_DEVICE:-rxe0} "
        "BENCH_GID_INDEX=${RDMA_TESTVM_GID_INDEX:-1} "
        f"$d/verbs_loop mw-rate {seconds} {size}; done")
    res = testvm.run(script, timeout=600, cwd=ROOT, stream=sys.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"mw-rate on rxe0 failed ({res.returncode})")
    return rates(res.output)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int, default=8,
                    help="bytes of the MR the window covers")
    ap.add_argument("--no-vm", action="store_true",
                    help="ucx0 only (no VM boot)")
    a = ap.parse_args(argv)
    if a.reps < 1 or a.seconds <= 0 or a.size < 1:
        ap.error("--reps, --seconds and --size must be positive")
    ucx = on_ucx0(a.reps, a.seconds, a.size)
    rxe = [] if a.no_vm else on_rxe0(a.reps, a.seconds, a.size)
    print(f"BIND_MW + LOCAL_INV pairs/s, {a.size}-byte window, median of "
          f"{a.reps} run(s) each")
    print(f"{'device':<8}{'pairs/s':>14}  runs")
    for name, r in (("ucx0", ucx), ("rxe0", rxe)):
        if r:
            print(f"{name:<8}{statistics.median(r):>14.6g}  "
                  + ", ".join(f"{x:.4g}" for x in r))
    if ucx and rxe:
        print(f"ratio ucx0 / rxe0: "
              f"{statistics.median(ucx) / statistics.median(rxe):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
