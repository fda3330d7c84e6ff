"""The connection manager's speed (not a test): run
``python tests/bench/bench_cm_py.py --provider ucx|verbs [-n N]``
(``verbs`` inside the VM: ``python -m rdma.testvm -- python
tests/bench/bench_cm_py.py --provider verbs``).

1. Connections per second, one client against one server in another
   process, each connection made and torn down in turn (connect,
   establish, disconnect, destroy): rdma.cm from Python
   (``rdma.cm.connect`` against ``rdma.cm.listen``) next to librdmacm's
   ``cmtime -c N`` (N connections set up side by side, each step for all
   of them at once; its rate is N over the sum of its step totals) and
   ``ucmatose -c N -C 0`` (wall clock, process start included), on the
   same device (ucx0 through ``python -m rdma.fabric exec``).  The issue's
   goal: rdma.cm at least 0.8x the C tool.
2. The data path of a CM-connected RC QP next to a hand-connected one
   (IBPath-less ``modify`` to RTS, as tests/verbs does) on the same
   device: 8-byte RDMA WRITE message rate and 64 KiB RDMA WRITE
   bandwidth, the same loop for both.  Goal: ratio at least 0.95.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "verbs"))

import rdma.cm as cm  # noqa: E402
import rdma.ibverbs as ibv  # noqa: E402

ADDRS = {"verbs": "192.0.2.1", "ucx": "127.0.0.1"}
SERVER = textwrap.dedent("""
    import sys
    import rdma.cm as cm
    n, addr, port, prov = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), \\
        sys.argv[4]
    with cm.listen(port, addr, provider=prov, backlog=64) as lst:
        print("listening", flush=True)
        for _ in range(n):
            c = lst.accept(timeout=60)
            lst.channel.wait_event(c.id, cm.CMEventType.DISCONNECTED,
                                   timeout=60)
            c.id.disconnect()
            c.id.close()
""")


def _env(provider: str, d: str) -> dict:
    e = dict(os.environ, PYTHONPATH=str(ROOT), RDMA_PROVIDER=provider,
             UCX_WARN_UNUSED_ENV_VARS="n")
    if provider == "ucx":
        e["RDMA_UCX_DIR"] = d
    return e


def _c(provider: str, *cmd: str) -> list:
    if provider == "ucx":
        return [sys.executable, "-P", "-m", "rdma.fabric", "exec", "--", *cmd]
    return list(cmd)


def py_rate(provider: str, addr: str, port: int, n: int, d: str) -> float:
    """Connections/s of rdma.cm.connect against rdma.cm.listen."""
    env = _env(provider, d)
    os.environ.update({k: v for k, v in env.items() if k == "RDMA_UCX_DIR"})
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(n), addr,
                            str(port), provider], env=env,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "listening"
        t0 = time.perf_counter()
        for _ in range(n):
            with cm.connect(addr, port, provider=provider):
                pass
        dt = time.perf_counter() - t0
        srv.wait(60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return n / dt


def py_rate_channel(provider: str, addr: str, port: int, n: int,
                    d: str) -> float:
    """The same with the event API on one channel, one PD and one CQ
    (what cmtime and librdmacm share between connections): per connection
    an ID, a QP, connect, establish, disconnect, destroy."""
    env = _env(provider, d)
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(n), addr,
                            str(port), provider], env=env,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "listening"
        with cm.EventChannel(provider) as ch:
            pd = cq = None
            t0 = time.perf_counter()
            for _ in range(n):
                cid = ch.create_id()
                cid.resolve((addr, port))
                if pd is None:
                    pd = cid.context.pd()
                    cq = pd.cq(256)
                qp = cid.create_qp(pd=pd, send_cq=cq, recv_cq=cq)
                cid.connect_qp()
                cid.disconnect()
                ch.wait_event(cid, cm.CMEventType.DISCONNECTED)
                qp.close()
                cid.close()
            dt = time.perf_counter() - t0
        srv.wait(60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return n / dt


PAR_SERVER = textwrap.dedent("""
    import sys
    import rdma.cm as cm
    import rdma.ibverbs as ibv
    E = cm.CMEventType
    n, addr, port, prov = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), \\
        sys.argv[4]
    with cm.EventChannel(prov) as ch:
        lid = ch.create_id()
        lid.bind_addr((addr, port))
        lid.listen(n)
        print("listening", flush=True)
        pd = cq = None
        gone = 0
        while gone < n:
            ev = ch.get_event(timeout=60)
            if ev.event == E.CONNECT_REQUEST:
                if pd is None:
                    pd = ev.id.context.pd()
                    cq = pd.cq(n + 16)
                ev.id.create_qp(pd=pd, send_cq=cq, recv_cq=cq)
                ev.id.accept_qp(timeout=0)
            elif ev.event == E.DISCONNECTED:
                ev.id.disconnect()
                ev.id.close()
                gone += 1
""")


def py_rate_parallel(provider: str, addr: str, port: int, n: int,
                     d: str) -> float:
    """ucmatose -c N style: N connections set up side by side on one
    channel (each step started as the previous event of its ID comes),
    then all torn down; one PD and CQ.  Connections/s over the whole."""
    E = cm.CMEventType
    env = _env(provider, d)
    srv = subprocess.Popen([sys.executable, "-c", PAR_SERVER, str(n), addr,
                            str(port), provider], env=env,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "listening"
        with cm.EventChannel(provider) as ch:
            pd = cq = None
            t0 = time.perf_counter()
            ids = [ch.create_id() for _ in range(n)]
            for cid in ids:
                cid.resolve_addr((addr, port))
            up = down = 0
            while up < n:
                ev = ch.get_event(timeout=60)
                assert ev is not None and ev.id is not None, "stalled"
                if ev.event == E.ADDR_RESOLVED:
                    ev.id.resolve_route()
                elif ev.event == E.ROUTE_RESOLVED:
                    if pd is None:
                        pd = ev.id.context.pd()
                        cq = pd.cq(n + 16)
                    ev.id.create_qp(pd=pd, send_cq=cq, recv_cq=cq)
                    ev.id.connect()
                elif ev.event == E.CONNECT_RESPONSE:
                    ev.id.modify_qp(None, ibv.IBV_QPS_RTR)
                    ev.id.modify_qp(None, ibv.IBV_QPS_RTS)
                    ev.id.establish()
                    up += 1
                else:
                    raise RuntimeError(f"unexpected {ev}")
            for cid in ids:
                cid.disconnect()
            while down < n:
                ev = ch.get_event(timeout=60)
                assert ev is not None, "stalled"
                if ev.event == E.DISCONNECTED:
                    down += 1
            for cid in ids:
                cid.close()
            dt = time.perf_counter() - t0
        srv.wait(60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return n / dt


def c_rate(provider: str, addr: str, port: int, n: int, d: str,
           tool: str) -> tuple:
    """Connections/s of a C tool pair (wall clock of the client), and the
    client's output."""
    env = _env(provider, d)
    if tool == "cmtime":
        server = ["cmtime", "-b", addr, "-p", str(port), "-c", str(n)]
        client = ["cmtime", "-s", addr, "-p", str(port), "-c", str(n)]
    else:
        server = ["ucmatose", "-b", addr, "-p", str(port), "-c", str(n),
                  "-C", "0"]
        client = ["ucmatose", "-s", addr, "-p", str(port), "-c", str(n),
                  "-C", "0"]
    srv = subprocess.Popen(_c(provider, *server), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        time.sleep(1.5)
        t0 = time.perf_counter()
        res = subprocess.run(_c(provider, *client), env=env,
                             capture_output=True, text=True, timeout=300)
        dt = time.perf_counter() - t0
        try:
            srv.wait(5)         # cmtime's server serves until killed
        except subprocess.TimeoutExpired:
            pass
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    if res.returncode != 0:
        return None, res.stdout + res.stderr
    if tool == "cmtime":
        # Its own step totals: the process start is not a connection.
        ms = [float(line.split(":")[1].split()[0])
              for line in res.stdout.splitlines()
              if ":" in line and line.split(":")[0].strip() in _STEPS]
        if len(ms) == len(_STEPS):
            dt = sum(ms) / 1000
    return n / dt, res.stdout


_STEPS = ("create id", "resolve addr", "resolve route", "create qp",
          "connect", "disconnect", "destroy")


# ---- data path ---------------------------------------------------------

def _writes(qp, cq, mr, raddr, rkey, size, iters, depth=32):
    """iters RDMA WRITEs of size bytes, depth in flight; seconds taken."""
    wr = ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                     sg_list=mr.sge(size), send_flags=ibv.IBV_SEND_SIGNALED,
                     remote_addr=raddr, rkey=rkey)
    posted = done = 0
    t0 = time.perf_counter()
    while done < iters:
        while posted < iters and posted - done < depth:
            qp.post_send(wr)
            posted += 1
        for wc in cq.poll(depth):
            if wc.status != ibv.IBV_WC_SUCCESS:
                raise RuntimeError(ibv.wc_status_str(wc.status))
            done += 1
    return time.perf_counter() - t0


def cm_pair(provider, addr, port):
    lst = cm.listen(port, addr, provider=provider)
    box = {}
    t = threading.Thread(target=lambda: box.update(
        s=lst.accept(timeout=30, max_send_wr=64, cq_size=256)))
    t.start()
    c = cm.connect(addr, port, provider=provider, max_send_wr=64,
                   cq_size=256)
    t.join(30)
    return lst, c, box["s"]


def data_path(provider: str, addr: str, port: int, iters: int, reps: int):
    import verbs_fixtures as vf
    end_port = vf.open_end_port(provider)
    out = {}
    # Two contexts, as the two CM channels have (one each).
    with ibv.Context(end_port) as ctx, ibv.Context(end_port) as ctx2:
        a, b = vf.make_pair(ctx, ctx2, ibv.IBV_QPT_RC, size=1 << 16,
                            max_send_wr=64, cqe=256)
        lst, c, s = cm_pair(provider, addr, port)
        cbuf = c.pd.mr(bytearray(1 << 16), vf.MR_ALL)
        sbuf = s.pd.mr(bytearray(1 << 16), vf.MR_ALL)
        for size, n in ((8, iters), (65536, max(iters // 20, 50))):
            hand, cmc = [], []
            for _ in range(reps):
                hand.append(n / _writes(a.qp, a.send_cq, a.mr, b.mr.addr,
                                        b.mr.rkey, size, n))
                cmc.append(n / _writes(c.qp, c.cq, cbuf, sbuf.addr,
                                       sbuf.rkey, size, n))
            out[size] = (statistics.median(hand), statistics.median(cmc))
        c.close()
        s.close()
        lst.close()
        a.close()
        b.close()
    return out


TLS = {"shm": {"UCX_TLS": "shm,self"},
       "tcp": {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "lo"}}


def rate_table(provider: str, addr: str, port: int, n: int, d: str,
               reps: int) -> None:
    """The same work R times, alternating (load on the machine hits both
    alike): rdma.cm's N side by side against cmtime -c N; medians and
    their ratio."""
    py, c = [], []
    for r in range(reps):
        py.append(py_rate_parallel(provider, addr, port + 20 * r, n, d))
        rate, out = c_rate(provider, addr, port + 20 * r + 1, n, d,
                           "cmtime")
        if rate is None:
            print(f"  cmtime: failed:\n{textwrap.indent(out, '    ')}")
            return
        c.append(rate)
    mp, mc = statistics.median(py), statistics.median(c)
    print(f"  rdma.cm, N side by side: median {mp:8.1f} conn/s  "
          f"(runs {', '.join(f'{x:.0f}' for x in py)})")
    print(f"  cmtime -c {n}:            median {mc:8.1f} conn/s  "
          f"(runs {', '.join(f'{x:.0f}' for x in c)})")
    print(f"  rdma.cm / cmtime = {mp / mc:.2f}  (goal of issue 23: 0.8)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", default="ucx", choices=("ucx", "verbs"))
    ap.add_argument("--addr", default=None)
    ap.add_argument("-n", type=int, default=200,
                    help="connections (default 200)")
    ap.add_argument("--iters", type=int, default=20000,
                    help="8-byte writes per repetition (default 20000)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tls", action="append", choices=sorted(TLS),
                    help="ucx: the UCX transport (repeatable; default "
                    "shm and tcp)")
    ap.add_argument("--rate-only", action="store_true",
                    help="only the rdma.cm / cmtime table")
    args = ap.parse_args()
    addr = args.addr or ADDRS[args.provider]
    port = 20000 + os.getpid() % 5000
    tls = (args.tls or sorted(TLS, reverse=True)) if args.provider == "ucx" \
        else [None]
    if len(tls) > 1:
        # A process's fabric node keeps the transport it started with:
        # one process per transport.
        rest = [a for i, a in enumerate(sys.argv[1:])
                if a != "--tls" and (i == 0 or sys.argv[i] != "--tls")]
        for t in tls:
            rc = subprocess.call([sys.executable, __file__, *rest,
                                  "--tls", str(t)])
            if rc != 0:
                return rc
        return 0
    if tls[0] is not None:
        os.environ.update(TLS[tls[0]])
    run_one(args, addr, port, tls[0])
    return 0


def run_one(args: argparse.Namespace, addr: str, port: int,
            tls: Optional[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        if args.provider == "ucx":
            os.environ["RDMA_UCX_DIR"] = d
        print(f"provider {args.provider}"
              f"{'' if tls is None else ' over ' + tls}, address {addr}, "
              f"{args.n} connections")
        rate_table(args.provider, addr, port + 100, args.n, d, args.reps)
        if args.rate_only:
            return
        py = py_rate(args.provider, addr, port, args.n, d)
        print(f"  rdma.cm.connect() (Python, a channel each): {py:8.1f} "
              "conn/s")
        py = py_rate_channel(args.provider, addr, port + 5, args.n, d)
        print(f"  rdma.cm event API (Python, one channel):   {py:8.1f} "
              "conn/s")
        py = py_rate_parallel(args.provider, addr, port + 6, args.n, d)
        print(f"  rdma.cm event API, all N side by side:     {py:8.1f} "
              "conn/s (compared below)")
        for i, tool in enumerate(("cmtime", "ucmatose")):
            rate, out = c_rate(args.provider, addr, port + 1 + i, args.n,
                               d, tool)
            if rate is None:
                print(f"  {tool}: failed:\n{textwrap.indent(out, '    ')}")
                continue
            how = ("its step totals" if tool == "cmtime" else
                   "wall clock, with process start")
            print(f"  {tool} -c {args.n} (C, {how}): {rate:8.1f} conn/s"
                  f"   rdma.cm/C = {py / rate:.2f}")
            if tool == "cmtime":
                print(textwrap.indent(out.strip(), "    | "))
        res = data_path(args.provider, addr, port + 10, args.iters,
                        args.reps)
        for size, (hand, cmc) in res.items():
            unit = (f"{hand / 1e3:8.1f} vs {cmc / 1e3:8.1f} kmsg/s"
                    if size == 8 else
                    f"{hand * size / 1e9:8.2f} vs {cmc * size / 1e9:8.2f} "
                    "GB/s")
            print(f"  RDMA WRITE {size:6d} B, hand- vs CM-connected: {unit}"
                  f"   ratio {cmc / hand:.3f}")


if __name__ == "__main__":
    sys.exit(main())
