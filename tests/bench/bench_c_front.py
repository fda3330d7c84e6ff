"""C verbs programs on the software fabric (perftest through the verbs front
end, ``python -m rdma.fabric exec``) next to UCX's own ucx_perftest (not a
test): run ``python tests/bench/bench_c_front.py [--quick] [--reps N]``.

For each transport (UCX_TLS=shm,self and tcp on lo), two processes each:

- 8-byte RDMA WRITE message rate: ``ib_write_bw -s 8`` vs
  ``ucp_put_bw -s 8``, one WR per ``ibv_post_send`` (perftest's default;
  goal of issue 22: at least 0.6);
- the same with perftest's ``-l 32`` (``--post_list``: 32 WRs per
  ``ibv_post_send`` call, how NIC message rates are usually measured;
  goal of issue 15: at least 0.8);
- 64 KiB RDMA WRITE bandwidth: ``ib_write_bw -s 65536`` vs
  ``ucp_put_bw -s 65536`` (goal of issue 15: at least 0.9);
- 8-byte SEND latency (one way, typical): ``ib_send_lat -s 8`` vs
  ``tag_lat -s 8`` (goal of issue 22: at most 1.3).

perftest registers its own page-aligned buffers (``ibv_reg_mr``); the
fabric adopts them into UCX shared memory, so its WRITEs take the
one-sided fast path ("The program's own memory: adoption" in
docs/fabric.rst; ``RDMA_UCX_ADOPT=0`` in the environment measures the
paths without it).  ``python tests/bench/bench_ucx.py`` gives the same
measures for Python.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_ucx import PIN, TLS, _free_port, _pin, run_perftest  # noqa: E402
sys.path.insert(0, str(HERE.parent / "host"))
from fabric_helpers import listening  # noqa: E402


def run_c(tool: str, size: int, iters: int, env: dict,
          extra: tuple = ()) -> dict:
    """Run perftest's *tool* (with the options *extra*) between two
    processes on ucx0; return the client's figures: msg_s and mb_s (bw
    tools) or lat_us (lat tools)."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        e = dict(os.environ, RDMA_UCX_DIR=d, UCX_WARN_UNUSED_ENV_VARS="n",
                 **env)
        args = [sys.executable, "-m", "rdma.fabric", "exec", "--", tool,
                "-d", "ucx0", "-p", str(port), "-s", str(size), "-n",
                str(iters), *extra]
        srv = subprocess.Popen(args, env=e, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL,
                               preexec_fn=_pin("server"))
        try:
            deadline = time.monotonic() + 60
            while not listening(port):
                if srv.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{tool} server did not start")
                time.sleep(0.02)
            res = subprocess.run(args + ["127.0.0.1"], env=e,
                                 capture_output=True, text=True, timeout=600,
                                 preexec_fn=_pin("client"))
        finally:
            try:
                srv.wait(60)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
    if res.returncode != 0:
        raise RuntimeError(f"{tool} failed:\n{res.stdout}\n{res.stderr}")
    lines = res.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            nums = [float(x) for x in lines[i + 1].split()]
            if "_lat" in tool:
                # bytes, iterations, t_min, t_max, t_typical, ...
                return {"lat_us": nums[4]}
            # bytes, iterations, BW peak, BW average (MiB/s), MsgRate (Mpps)
            return {"mb_s": nums[3] * 1.048576, "msg_s": nums[4] * 1e6}
    raise RuntimeError(f"no result from {tool}:\n{res.stdout}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--reps", type=int, default=1,
                    help="runs of every pair (medians are printed)")
    ap.add_argument("--tls", choices=sorted(TLS), action="append",
                    help="only this transport (repeatable)")
    ap.add_argument("--pin", action="store_true",
                    help="pin the two processes of each run (perftest's and "
                         "ucx_perftest's alike) to two CPUs")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    cpus = sorted(os.sched_getaffinity(0))
    if a.pin and len(cpus) >= 2:
        PIN.update(server=cpus[0], client=cpus[1])
    q = 10 if a.quick else 1
    rows, runs = [], []
    for name in a.tls or list(TLS):
        env = TLS[name]
        # shm: at least half a second of the measured loop per run (short
        # runs are mostly the start of the first WRs)
        n_rate = 20000000 // q if name == "shm" else 200000 // q
        n_lat = 200000 // q if name == "shm" else 20000 // q
        n_bw = 200000 // q if name == "shm" else 3000 // q
        measures = [
            ("8 B WRITE rate (msg/s)", "ib_write_bw / ucp_put_bw", ">= 0.6",
             lambda: run_c("ib_write_bw", 8, n_rate, env)["msg_s"],
             lambda: run_perftest("ucp_put_bw", 8, n_rate, env)["msg_s"]),
            ("8 B WRITE rate, lists of 32", "ib_write_bw -l 32 / ucp_put_bw",
             ">= 0.8",
             lambda: run_c("ib_write_bw", 8, n_rate, env,
                           ("-l", "32"))["msg_s"],
             lambda: run_perftest("ucp_put_bw", 8, n_rate, env)["msg_s"]),
            ("64 KiB WRITE bandwidth (MB/s)", "ib_write_bw / ucp_put_bw",
             ">= 0.9",
             lambda: run_c("ib_write_bw", 65536, n_bw, env)["mb_s"],
             lambda: run_perftest("ucp_put_bw", 65536, n_bw, env)["mb_s"]),
            ("8 B SEND latency (us)", "ib_send_lat / tag_lat", "<= 1.3",
             lambda: run_c("ib_send_lat", 8, n_lat, env)["lat_us"],
             lambda: run_perftest("tag_lat", 8, n_lat, env)["lat_us"]),
        ]
        for what, how, goal, ours_f, ref_f in measures:
            ours, ref = [], []
            for _ in range(a.reps):
                ours.append(ours_f())
                ref.append(ref_f())
            ratio = statistics.median(o / r for o, r in zip(ours, ref))
            rows.append((name, what, statistics.median(ours),
                         statistics.median(ref), ratio, how, goal))
            runs.append((name, what, ours, ref))
    pin = "not pinned" if PIN["server"] is None else \
        f"pinned to CPUs {PIN['server']} and {PIN['client']}"
    print(f"({a.reps} run(s) of each, medians; ratio: median of the per-run "
          f"ratios; processes {pin})")
    print(f"{'tls':<5}{'measure':<32}{'perftest':>14}{'ucx_perftest':>14}"
          f"{'ratio':>8}  {'goal':<8}tools")
    for tls, what, ours, ref, ratio, how, goal in rows:
        print(f"{tls:<5}{what:<32}{ours:>14.6g}{ref:>14.6g}{ratio:>8.3f}"
              f"  {goal:<8}{how}")
    if a.reps > 1:
        print("every run (perftest / ucx_perftest):")
        for tls, what, ours, ref in runs:
            print(f"  {tls} {what:<32}" + ", ".join(
                f"{o:.4g}/{r:.4g}" for o, r in zip(ours, ref)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
