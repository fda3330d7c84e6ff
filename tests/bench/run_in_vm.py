"""Side-by-side benchmark of rdma vs C and pyverbs, in one boot of the test VM.

    .venv/bin/python tests/bench/run_in_vm.py [--reps 3] [--seconds 1]
                                              [--out DIR] [--no-tools]

On the host it boots the Soft-RoCE VM (rdma.testvm) and runs itself there
with ``--guest``.  In the guest, on rxe0 (loopback, GID index 1):

1. compiles ``tests/bench/c/verbs_loop.c`` with ``gcc -O2`` (no
   -march=native: TCG would SIGILL);
2. runs the C references: the C loop (one process, one thread, both QPs),
   and the C tools ``ibv_rc_pingpong``, ``ib_write_bw`` (8 B and 64 KiB) and
   ``ib_send_lat`` (two processes, not pinned);
3. ``--reps`` rounds of: the C loop, ours (``bench_verbs.py``, .venv's
   python) and pyverbs (``bench_pyverbs.py``, Debian's /usr/bin/python3 --
   the only interpreter pyverbs works with), interleaved so that the VM's
   speed drift (FACTS.md) hits all three alike;
4. the C references again;

every single-process measurement pinned with ``taskset -c 1`` to the same
vCPU; it prints medians and ratios (against the median of every C-loop
run).  With
``--out DIR`` the raw results land in DIR/bench.json and the table in
DIR/bench.md.  Not a test: pytest does not collect it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CPU = "1"            # our code, the C loop and the C clients
VENV_PY = ROOT / ".venv" / "bin" / "python"
DEBIAN_PY = "/usr/bin/python3"


# ---------------------------------------------------------------------------
# guest side

def log(*a):
    print("[bench]", *a, file=sys.stderr, flush=True)


def pinned(cmd, cpu=CPU):
    return ["taskset", "-c", cpu] + [str(c) for c in cmd]


def run_results(cmd, timeout, env=None) -> list[dict]:
    """Run a bench script; return its RESULT lines (json)."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})}, cwd=ROOT)
    if res.returncode != 0:
        log(f"FAILED {' '.join(map(str, cmd))} ({res.returncode}):\n"
            f"{res.stderr[-2000:]}")
        return []
    return [json.loads(line[7:]) for line in res.stdout.splitlines()
            if line.startswith("RESULT ")]


def c_loop(binary: Path, seconds: float) -> list[dict]:
    out = []
    for mode in ("write-rate", "send-rate", "pingpong", "write-bw"):
        try:
            res = subprocess.run(pinned([binary, mode, seconds]),
                                 capture_output=True,
                                 text=True, timeout=60 + 10 * seconds)
        except subprocess.TimeoutExpired:
            log(f"C loop {mode} timed out")
            continue
        m = dict(re.findall(r"(\w+)=([\d.]+)", res.stdout))
        if res.returncode != 0 or "mops" not in m:
            log(f"C loop {mode} failed: {res.stdout}{res.stderr}")
            continue
        out.append({"impl": "c-loop", "mode": mode, "api": "-",
                    **{k: float(v) for k, v in m.items()}})
    return out


def _listening(port: int) -> bool:
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in Path(f).read_text().splitlines()[1:]:
                p = line.split()
                if p[3] == "0A" and int(p[1].rsplit(":", 1)[1], 16) == port:
                    return True
        except FileNotFoundError:
            pass
    return False


_port = [19000]


def client_server(server_cmd, client_cmd, timeout=120):
    """Run a C tool's server and client on a fresh port, not pinned (two
    busy-polling processes on one vCPU starve each other); return the
    client's stdout, or None."""
    _port[0] += 1
    port = str(_port[0])
    srv = subprocess.Popen(server_cmd + ["-p", port],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        deadline = time.monotonic() + 30
        while not _listening(int(port)):
            if srv.poll() is not None or time.monotonic() > deadline:
                log(f"server {server_cmd[0]} not listening: "
                    f"{srv.communicate()[1][-500:]}")
                return None
            time.sleep(0.02)
        cli = subprocess.run(client_cmd + ["-p", port, "127.0.0.1"],
                             capture_output=True, text=True, timeout=timeout)
        srv.communicate(timeout=timeout)
        if cli.returncode != 0:
            log(f"client {client_cmd[0]} failed ({cli.returncode}): "
                f"{cli.stdout[-500:]}{cli.stderr[-500:]}")
            return None
        return cli.stdout
    except subprocess.TimeoutExpired:
        log(f"{server_cmd[0]} timed out")
        return None
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()


def _perftest_row(out: str, size: int):
    for line in out.splitlines():
        f = line.split()
        if (len(f) >= 4 and f[0] == str(size) and
                re.fullmatch(r"[\d.]+", f[-1])):
            return [float(x) for x in f]
    return None


def pingpong_pair(dev: str, gidx: str) -> list[dict]:
    """ibv_rc_pingpong, then ``ibtool pingpong rc`` (ours, the same
    two-process protocol and wire exchange): round trip per iteration."""
    out = []
    # ibv_rc_pingpong: round trip per iteration, 8 B
    common = ["-d", dev, "-g", gidx, "-s", "8", "-n", "20000"]
    s = client_server(["ibv_rc_pingpong"] + common,
                      ["ibv_rc_pingpong"] + common)
    m = s and re.search(r"= ([\d.]+) usec/iter", s)
    if m:
        out.append({"impl": "ibv_rc_pingpong", "mode": "pingpong", "api": "-",
                    "usec": float(m.group(1))})
    # ours, the same two-process protocol and wire exchange
    ours = [str(VENV_PY), "-m", "rdma", "pingpong", "rc"]
    s = client_server(ours + common, ours + common)
    m = s and re.search(r"= ([\d.]+) usec/iter", s)
    if m:
        out.append({"impl": "ibtool pingpong rc", "mode": "pingpong",
                    "api": "-",
                    "usec": float(m.group(1))})
    return out


def c_tools(dev: str, gidx: str) -> list[dict]:
    out = []
    out += pingpong_pair(dev, gidx)
    # ib_send_lat: one-way latency (t_typical); RTT = 2x
    common = ["-d", dev, "-x", gidx, "-s", "8", "-n", "3000", "-F"]
    s = client_server(["ib_send_lat"] + common, ["ib_send_lat"] + common)
    row = s and _perftest_row(s, 8)
    if row:
        out.append({"impl": "ib_send_lat", "mode": "pingpong",
                    "api": "2 x t_typical",
                    "usec": 2 * row[4]})
    # ib_write_bw: 8 B message rate, 64 KiB bandwidth
    for size, n, mode in ((8, 30000, "write-rate"), (65536, 1500, "write-bw")):
        common = ["-d", dev, "-x", gidx, "-s", str(size), "-n", str(n), "-F"]
        s = client_server(["ib_write_bw"] + common, ["ib_write_bw"] + common)
        row = s and _perftest_row(s, size)
        if row:
            out.append({"impl": "ib_write_bw", "mode": mode, "api": "-",
                        "mops": row[4], "mib_s": row[3]})
    return out


def guest(args) -> int:
    dev = os.environ.get("RDMA_TESTVM_DEVICE", "rxe0")
    gidx = os.environ.get("RDMA_TESTVM_GID_INDEX", "1")
    env = {"BENCH_DEVICE": dev, "BENCH_GID_INDEX": gidx}
    os.environ.update(env)
    tmp = Path(tempfile.mkdtemp(prefix="bench-"))
    binary = tmp / "verbs_loop"
    subprocess.run(["gcc", "-O2", "-o", str(binary),
                    str(HERE / "c" / "verbs_loop.c"),
                    "-libverbs"], check=True)
    results: list[dict] = []

    def add(rows, phase, rnd=None):
        for r in rows:
            r["phase"] = phase
            r["round"] = rnd
        results.extend(rows)

    sec = str(args.seconds)

    def refs(phase):
        log(f"C references ({phase})")
        add(c_loop(binary, args.seconds), phase)
        if not args.no_tools:
            add(c_tools(dev, gidx), phase)

    refs("before")
    for rep in range(args.reps):        # interleaved: drift hits all alike
        log(f"round {rep + 1}/{args.reps}: C loop, rdma, pyverbs")
        add(c_loop(binary, args.seconds), "interleaved", rep)
        add(run_results(pinned([VENV_PY, HERE / "bench_verbs.py",
                                "--seconds", sec]), 900, env),
            "interleaved", rep)
        add(run_results(pinned([DEBIAN_PY, HERE / "bench_pyverbs.py",
                                "--seconds", sec]), 900, env),
            "interleaved", rep)
        if not args.no_tools:
            add(pingpong_pair(dev, gidx), "interleaved", rep)
    refs("after")
    table = render(results, args.reps)
    print(table)
    outdir = os.environ.get("RDMA_TESTVM_OUT")
    if outdir:
        Path(outdir, "bench.json").write_text(json.dumps(results, indent=1))
        Path(outdir, "bench.md").write_text(table + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


# ---------------------------------------------------------------------------
# the table

METRIC = {"write-rate": ("mops", "Mops/s", True),
          "send-rate": ("mops", "Mops/s", True),
          "pingpong": ("usec", "usec/round trip", False),
          "write-bw": ("mib_s", "MiB/s", True)}
TITLE = {"write-rate": "8 B RDMA WRITE message rate (signaled, <=64 in "
                        "flight)",
         "send-rate": "8 B SEND message rate (signaled, <=64 in flight)",
         "pingpong": "RC SEND/RECV ping-pong, 8 B",
         "write-bw": "64 KiB RDMA WRITE bandwidth (<=16 in flight)"}


def _median(results, impl, mode, api=None, phase=None):
    key = METRIC[mode][0]
    vals = [r[key] for r in results if r["impl"] == impl and r["mode"] == mode
            and (api is None or r["api"] == api)
            and (phase is None or r.get("phase") == phase) and key in r]
    return statistics.median(vals) if vals else None


def _round_ratio(results, mode, num, den):
    """Median over rounds of num/den (each (impl, api)), 'better' > 1."""
    key, _, higher = METRIC[mode]
    rounds = {r["round"] for r in results if r.get("round") is not None}
    ratios = []
    for rnd in rounds:
        def val(impl, api):
            for r in results:
                if (r["impl"], r["api"], r["mode"], r.get("round")) == \
                        (impl, api, mode, rnd) and key in r:
                    return r[key]
            return None
        n, d = val(*num), val(*den)
        if n and d:
            ratios.append(n / d if higher else d / n)
    return statistics.median(ratios) if ratios else None


def _pair_ratio(results, mode, ours, ref):
    """Median of ref/ours latency over the phases that ran both."""
    key = METRIC[mode][0]
    ratios = []
    for run in {(r.get("phase"), r.get("round")) for r in results}:
        got = {r["impl"]: r[key] for r in results
               if r["mode"] == mode and (r.get("phase"), r.get("round")) == run
               and key in r}
        if got.get(ours) and got.get(ref):
            ratios.append(got[ref] / got[ours])
    return statistics.median(ratios) if ratios else None


def render(results, reps) -> str:
    def fmt(v, key):
        if v is None:
            return "n/a"
        return f"{v:.4f}" if key == "mops" else f"{v:.1f}"

    lines = ["# rdma vs C vs pyverbs on rxe0 (Soft-RoCE, TCG VM), medians of "
             f"{reps}",
             ""]
    for mode, (key, unit, higher) in METRIC.items():
        c_all = _median(results, "c-loop", mode)
        c_before = _median(results, "c-loop", mode, phase="before")
        c_mid = _median(results, "c-loop", mode, phase="interleaved")
        c_after = _median(results, "c-loop", mode, phase="after")
        lines += [f"## {TITLE[mode]} ({unit})", "",
                  "| implementation | API | value | vs C loop "
                  "| vs pyverbs (same API) |",
                  "|---|---|---|---|---|",
                  f"| C loop (before / interleaved / after) | - | "
                  f"{fmt(c_before, key)} / {fmt(c_mid, key)} / "
                  f"{fmt(c_after, key)} | 1.00 | |"]
        for impl, apis in (("rdma", ("reuse", "new", "batch")),
                           ("pyverbs", ("reuse", "new"))):
            for api in apis:
                v = _median(results, impl, mode, api)
                if v is None:
                    continue
                vc = _round_ratio(results, mode, (impl, api), ("c-loop", "-"))
                vp = ""
                if impl == "rdma":
                    r = _round_ratio(results, mode, (impl, api),
                                     ("pyverbs",
                                      "reuse" if api == "batch" else api))
                    vp = "n/a" if r is None else f"{r:.2f}x"
                lines.append(f"| {impl} | {api} | {fmt(v, key)} | "
                             f"{'n/a' if vc is None else f'{vc:.2f}x'} | {vp} "
                             "|")
        for impl in ("ibv_rc_pingpong", "ibtool pingpong rc", "ib_send_lat",
                     "ib_write_bw"):
            rows = [r for r in results if r["impl"] == impl
                    and r["mode"] == mode]
            if rows:
                v = _median(results, impl, mode)
                vc = ((v / c_all if higher else c_all / v)
                      if (c_all and v) else None)
                lines.append(f"| {impl} (2 processes) | {rows[0]['api']} | "
                             f"{fmt(v, key)} | "
                             f"{'n/a' if vc is None else f'{vc:.2f}x'} | |")
        vc = _pair_ratio(results, mode, "ibtool pingpong rc",
                         "ibv_rc_pingpong")
        if vc is not None:
            lines.append("| ibtool pingpong rc vs ibv_rc_pingpong (2 "
                         "processes,"
                         f" run back to back) | - | | {vc:.2f}x | |")
        lines.append("")
    lines += ["Ratios are 'how many times as good' (>1 better): rate and "
              "bandwidth "
              "divide ours by theirs, latency theirs by ours; for rdma and "
              "pyverbs they are medians of per-round ratios (each round runs "
              "the C loop, rdma and pyverbs back to back), for the C tools "
              "ratios of medians.",
              "The two-process ping-pong ratio is the median over the runs "
              "(before, each round, after) of ibv_rc_pingpong's time over "
              "ours, measured back to back. "
              "Goals: latency and bandwidth within 10% of C (>= 0.90x), "
              "message "
              "rate >= 3x pyverbs."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# host side

def host(args) -> int:
    sys.path.insert(0, str(ROOT))
    from rdma import testvm
    cmd = [str(VENV_PY), str(Path(__file__).resolve()), "--guest",
           "--reps", str(args.reps), "--seconds", str(args.seconds)]
    if args.no_tools:
        cmd.append("--no-tools")
    res = testvm.run(cmd, timeout=args.timeout, out_dir=args.out, cwd=ROOT,
                     stream=sys.stdout)
    return res.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guest", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", help="directory for bench.json and bench.md")
    ap.add_argument("--no-tools", action="store_true",
                    help="skip ibv_rc_pingpong/ib_write_bw/ib_send_lat")
    args = ap.parse_args(argv)
    if args.guest or os.environ.get("RDMA_TESTVM") == "1":
        return guest(args)
    return host(args)


if __name__ == "__main__":
    sys.exit(main())
