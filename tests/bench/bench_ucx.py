"""Benchmarks of the ucx software fabric next to UCX's own ucx_perftest
(not tests): run ``python tests/bench/bench_ucx.py [--quick]``.

For each transport (UCX_TLS=shm,self and tcp on lo) it runs, in the same
invocation and with two processes each:

- 8-byte RDMA WRITE message rate, posted from Python with a SendBatch
  (unsignaled except the last WR of each batch) into memory of
  ``PD.alloc_mr`` (the one-sided fast path over shared memory) vs
  ``ucp_put_bw -s 8``;
- 8-byte SEND/RECV round trip (ping-pong, both sides in Python) vs
  ``tag_lat -s 8`` (one-way latency x 2);
- 64 KiB RDMA WRITE bandwidth (``PD.alloc_mr`` memory) vs
  ``ucp_put_bw -s 65536``;

and prints the numbers side by side with the ratio.  Both sides of a
pair run the same number of iterations after the same warm-up (WARMUP,
ucx_perftest's default ``-w``), untimed.  ``--reps N`` runs
every pair N times, interleaved (ours, then the C tool), and prints the
medians and the median of the per-run ratios.  ``--pin`` pins the two
processes of every run (ours and ucx_perftest alike) to two CPUs: that
steadies ucx_perftest's round trip on a 2-core machine but slows ours
(each process's progress and UCX threads then share its one CPU), so
the default leaves scheduling to the kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: untimed iterations before each measure (ucx_perftest's default -w)
WARMUP = 10000
TLS = {"shm": {"UCX_TLS": "shm,self"},
       "tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}}


# --------------------------------------------------------------------------
# the Python side (a process per role)

def _check_rts(qp, ibv) -> None:
    """A figure is only printed for a run in which every WR succeeded: an
    error completion (or a flushed one) would have moved the RC QP to ERR
    and made the loop end early with a meaningless number."""
    state = qp.query(ibv.IBV_QP_STATE).qp_state
    if state != ibv.IBV_QPS_RTS:
        raise SystemExit(f"the QP is in state {state}, not RTS: a work "
                         "request failed during the run")


def role(which: str, test: str, iters: int) -> None:
    import rdma
    import rdma.ibverbs as ibv
    sys.path.insert(0, str(HERE.parent / "host"))
    from fabric_helpers import Side, to_init, to_rtr, to_rts
    from rdma.IBA import GID
    ep = rdma.get_end_port(provider="ucx")
    ctx = rdma.get_verbs(ep)
    size = 65536 if test == "bw" else 8
    depth = 256
    s = Side(ctx, ibv.IBV_QPT_RC, size=max(size, 4096) * 2,
             max_send_wr=depth, max_recv_wr=depth, cqe=2 * depth,
             sq_sig_all=0)
    if test != "lat":
        # the WRITE tests use memory of PD.alloc_mr on both sides: on the
        # ucx fabric over shared memory that is the one-sided fast path
        from fabric_helpers import MR_ALL
        s.mr = s.pd.alloc_mr(max(size, 4096) * 2, MR_ALL)
    print(json.dumps({"gid": str(s.gid), "qpn": s.qpn, "addr": s.mr.addr,
                      "rkey": s.mr.rkey}), flush=True)
    peer = json.loads(sys.stdin.readline())
    to_init(s.qp)
    to_rtr(s.qp, remote_qpn=peer["qpn"], dgid=GID(peer["gid"]))
    to_rts(s.qp)
    arr = ibv.WCArray(64)
    if test == "lat":
        rb = ibv.RecvBatch([ibv.recv_wr(wr_id=1, sg_list=s.mr.sge(length=8))])
        sb = ibv.SendBatch([ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_SEND,
                                        sg_list=s.mr.sge(length=8, off=8),
                                        send_flags=ibv.IBV_SEND_SIGNALED)])
        for _ in range(4):
            s.qp.post_recv(rb)
        print(json.dumps({"ready": 1}), flush=True)
        sys.stdin.readline()
        ping = which == "client"
        n = 0
        if ping:
            s.qp.post_send(sb)
        # spin in C for the peer's message, reply at once (the critical
        # path), then repost the receive and reap send completions; the
        # first WARMUP round trips are not timed
        poll_r, poll_s = s.recv_cq.poll_into, s.send_cq.poll_into
        post_r, post_s = s.qp.post_recv, s.qp.post_send
        sarr = ibv.WCArray(64)
        t0 = None
        for end in (WARMUP, WARMUP + iters):
            while n < end:
                n += poll_r(arr, 1, 1)
                post_s(sb)
                post_r(rb)
                poll_s(sarr)
            t0 = time.perf_counter() if t0 is None else t0
        dt = time.perf_counter() - t0
        _check_rts(s.qp, ibv)
        if ping:
            print(json.dumps({"rtt_us": dt / iters * 1e6}), flush=True)
        ctx.close()
        return
    if which == "server":              # the target: does nothing at all
        print(json.dumps({"ready": 1}), flush=True)
        sys.stdin.readline()
        sys.stdin.readline()
        ctx.close()
        return
    batch = 32
    wrs = [ibv.send_wr(wr_id=i, opcode=ibv.IBV_WR_RDMA_WRITE,
                       sg_list=s.mr.sge(length=size),
                       remote_addr=peer["addr"] + (size if size > 8 else 0),
                       rkey=peer["rkey"],
                       send_flags=(ibv.IBV_SEND_SIGNALED if i == batch - 1
                                   else 0))
           for i in range(batch)]
    sb = ibv.SendBatch(wrs)
    print(json.dumps({"ready": 1}), flush=True)
    sys.stdin.readline()
    outstanding = 0
    done = 0
    t0 = None
    for end in (WARMUP, WARMUP + iters):  # the first WARMUP: untimed
        while done < end:
            while outstanding < depth - batch:
                s.qp.post_send(sb)
                outstanding += batch
            k = s.send_cq.poll_into(arr)
            if k and (i := arr.first_error()) is not None:
                raise SystemExit(f"WR {arr.wr_id(i)} failed: status "
                                 f"{arr.status(i)} after {done} WRs")
            outstanding -= k * batch
            done += k * batch
        if t0 is None:
            t0, base = time.perf_counter(), done
    done -= base
    dt = time.perf_counter() - t0
    _check_rts(s.qp, ibv)
    print(json.dumps({"msg_s": done / dt, "mb_s": done * size / dt / 1e6}),
          flush=True)
    ctx.close()


#: CPU of the server and of the client process (None: not pinned)
PIN = {"server": None, "client": None}


def _pin(which):
    cpu = PIN[which]
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _spawn(which, test, iters, env):
    e = dict(os.environ, **env, UCX_WARN_UNUSED_ENV_VARS="n")
    return subprocess.Popen([sys.executable, __file__, "--role", which, test,
                             str(iters)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=e,
                            preexec_fn=_pin(which))


def run_python(test: str, iters: int, env: dict) -> dict:
    srv, cli = (_spawn("server", test, iters, env),
                _spawn("client", test, iters, env))
    try:
        i_s, i_c = srv.stdout.readline(), cli.stdout.readline()
        srv.stdin.write(i_c)
        srv.stdin.flush()
        cli.stdin.write(i_s)
        cli.stdin.flush()
        srv.stdout.readline()
        cli.stdout.readline()
        srv.stdin.write("go\n")
        srv.stdin.flush()
        cli.stdin.write("go\n")
        cli.stdin.flush()
        line = cli.stdout.readline()
        if not line:            # it said why on its stderr
            raise RuntimeError(f"the {test} client ended without a result "
                               f"(exit {cli.wait(30)})")
        res = json.loads(line)
        try:
            srv.stdin.write("end\n")
            srv.stdin.flush()
        except BrokenPipeError:
            pass                # the ping-pong's server ends by itself
        return res
    finally:
        for p in (srv, cli):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


# --------------------------------------------------------------------------
# ucx_perftest

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_perftest(test: str, size: int, iters: int, env: dict) -> dict:
    port = _free_port()
    e = dict(os.environ, **env, UCX_WARN_UNUSED_ENV_VARS="n")
    args = ["-t", test, "-s", str(size), "-n", str(iters), "-w", str(WARMUP),
            "-p", str(port)]
    srv = subprocess.Popen(["ucx_perftest", *args], env=e,
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           preexec_fn=_pin("server"))
    time.sleep(0.3)
    try:
        out = subprocess.run(["ucx_perftest", *args, "127.0.0.1"], env=e,
                             capture_output=True, text=True, timeout=120,
                             preexec_fn=_pin("client")).stdout
    finally:
        srv.wait(30)
    # the "Final:" line: latency(avg) ... bandwidth(avg) ... msgrate(avg)
    for line in out.splitlines():
        if line.strip().startswith("Final:"):
            nums = [float(x) for x in re.findall(r"[-\d.]+", line)]
            # iterations, typical lat, avg lat, overall lat, avg bw,
            # overall bw, avg msgrate, overall msgrate
            return {"lat_us": nums[2], "mb_s": nums[5] * 1.048576,
                    "msg_s": nums[7]}
    raise RuntimeError(f"no result from ucx_perftest:\n{out}")


def main(argv=None) -> int:
    import statistics
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--reps", type=int, default=1,
                    help="runs of every pair (medians are printed)")
    ap.add_argument("--tls", choices=sorted(TLS), action="append",
                    help="only this transport (repeatable)")
    ap.add_argument("--pin", action="store_true",
                    help="pin the two processes of each run to two CPUs")
    ap.add_argument("--role", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.role:
        role(a.role[0], a.role[1], int(a.role[2]))
        return 0
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    cpus = sorted(os.sched_getaffinity(0))
    if a.pin and len(cpus) >= 2:
        PIN.update(server=cpus[0], client=cpus[1])
    q = 10 if a.quick else 1
    rows = []
    for name in a.tls or list(TLS):
        env = TLS[name]
        # iterations of each side of a pair (the same for both)
        n_rate = 20000000 // q if name == "shm" else 500000 // q
        n_lat = 200000 // q if name == "shm" else 50000 // q
        n_bw = 20000 // q if name == "shm" else 3000 // q
        measures = [
            ("8 B WRITE rate (msg/s)", "ucp_put_bw",
             lambda: run_python("rate", n_rate, env)["msg_s"],
             lambda: run_perftest("ucp_put_bw", 8, n_rate, env)["msg_s"]),
            ("8 B SEND round trip (us)", "tag_lat x2",
             lambda: run_python("lat", n_lat, env)["rtt_us"],
             lambda: 2 * run_perftest("tag_lat", 8, n_lat, env)["lat_us"]),
            ("64 KiB WRITE bandwidth (MB/s)", "ucp_put_bw",
             lambda: run_python("bw", n_bw, env)["mb_s"],
             lambda: run_perftest("ucp_put_bw", 65536, n_bw, env)["mb_s"]),
        ]
        for what, how, ours_f, ref_f in measures:
            ours, ref = [], []
            for _ in range(a.reps):
                ours.append(ours_f())
                ref.append(ref_f())
            ratio = statistics.median(o / r for o, r in zip(ours, ref))
            rows.append((name, what, statistics.median(ours),
                         statistics.median(ref), ratio, how, ours, ref))
    pin = "not pinned" if PIN["server"] is None else \
        f"pinned to CPUs {PIN['server']} and {PIN['client']}"
    print(f"({a.reps} run(s) of each, medians; ratio: median of the per-run "
          f"ratios; processes {pin})")
    print(f"{'tls':<5}{'measure':<32}{'rdma (Python)':>16}{'ucx_perftest':>16}"
          f"{'ratio':>8}  reference")
    for tls, what, ours, ref, ratio, how, _, _ in rows:
        print(f"{tls:<5}{what:<32}{ours:>16.6g}{ref:>16.6g}{ratio:>8.3f}"
              f"  {how}")
    if a.reps > 1:
        print("\nevery run (ours / ucx_perftest):")
        for tls, what, _, _, _, _, ours, ref in rows:
            runs = ", ".join(f"{o:.4g}/{r:.4g}" for o, r in zip(ours, ref))
            print(f"  {tls:<4}{what:<31} {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
