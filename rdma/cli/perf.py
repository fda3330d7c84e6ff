"""``ibtool perf``: perftest-style bandwidth and latency of RDMA WRITE, RDMA
READ, SEND and atomics between two processes.

::

    ibtool perf write --bw                       # server
    ibtool perf write --bw -a --max-size 65536 SERVER
    ibtool perf send --lat -n 1000 --output json SERVER
    ibtool perf write --qps 4 --mode spray -s 16777216 SERVER

The client drives the test; the server answers and prints the same
results.  It does not talk to perftest's ``ib_*_bw``/``ib_*_lat``: its
out-of-band exchange is its own.

The out-of-band exchange
------------------------
One TCP connection (port 18515, ``-p``) carries JSON objects, one per line
(UTF-8, ``\\n``-terminated).  Each has a ``"cmd"``:

1. client -> server ``hello``: ``proto`` (``"rdma-perf"``), ``version``
   (1), the test parameters (``test``, ``mode``, ``sizes``, ``iters``,
   ``tx_depth``, ``cq_mod``, ``atomic``, ``check``) and its ``qp`` (``lid``,
   ``qpn``, ``psn``, ``gid`` as text, ``rd_atomic``: the RDMA reads and
   atomics it can initiate and accept, ``mtu``) and ``mr`` (``addr``,
   ``rkey``) of the region the peer may access; with ``--qps`` also
   ``qps``, ``lb_mode``, ``fragment`` and ``vqp`` (see ``_vperf``).
2. server -> client ``hello`` with its ``qp`` and ``mr`` (its QP is at RTS
   already; with ``--qps`` its ``vqp``), or ``error`` with a ``msg``.  Both sides then use the smaller
   ``rd_atomic`` and MTU.
3. For each size: client -> ``run`` (``size``); server -> ``go`` once its
   receives are posted and its buffer is prepared; the client runs the test
   (in latency tests the server runs its half); client -> ``result`` with
   the row of the table; server -> ``ok``, or ``error`` with ``code`` 3
   when ``-c`` found wrong data on its side.  While a run lasts longer than
   a second the client sends ``beat`` every second, so the server's
   ``--timeout`` only fires when the client is really gone.
4. client -> ``bye``.

Measurements
------------
- ``--bw``: WRs are posted in prepared batches of ``--cq-mod`` with only
  the last one signaled, at most ``--tx-depth`` outstanding; the time runs
  from the first post to the last completion.  BW average = bytes / time;
  BW peak = the best rate over any window of completions covering a
  tenth of the run (at least ``tx-depth`` requests);
  MB = 2**20 bytes, as perftest.  ``send`` counts on the client; the
  server keeps ``--rx-depth`` receives posted.
- ``--lat``: one operation at a time.  ``write`` and ``send`` are
  ping-pongs (each side writes into the other's buffer, or sends, when it
  has seen the peer's) and report half the round trip, as perftest;
  ``read`` and ``atomic`` report the whole operation.  t_typical is the
  median.
"""
from __future__ import annotations

import argparse
import json
import math
import select
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from rdma.cli import _oob, _vperf
from rdma.cli._oob import (Deadline, OOBTimeout, PeerError, ValidationError,
                           CLIError)
from rdma.cli._common import Subparsers

if TYPE_CHECKING:
    import rdma.ibverbs as ibv_t
    from rdma.devices import EndPort

__all__ = ["add_parser", "perf", "TESTS"]

TESTS = ("write", "read", "send", "atomic")
PROTO = "rdma-perf"
VERSION = 1
MB = 1 << 20
_TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send",
           "atomic": "Atomic"}
BW_FIELDS = ["test", "mode", "bytes", "iterations", "bw_peak_mb_s",
             "bw_avg_mb_s", "msg_rate_mpps"]
LAT_FIELDS = ["test", "mode", "bytes", "iterations", "t_min_us", "t_max_us",
              "t_typical_us", "t_avg_us", "t_stdev_us", "t_p99_us",
              "t_p999_us"]
_LINE = "-" * 87


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``perf`` to the ``rdma`` command's subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Measure RDMA WRITE, RDMA READ, SEND or atomic bandwidth "
                    "(--bw) or latency (--lat) between two processes, with "
                    "perftest-like tables.  Without SERVERNAME, wait for a "
                    "client; the client drives the test and both print the "
                    "results.  Not wire compatible with perftest.",
        epilog="exit status: 0 ok, 1 RDMA/runtime failure, 2 bad usage, "
               "3 data validation failed (-c), 124 a step timed out "
               "(--timeout).")
    p.add_argument("test", choices=TESTS, help="write, read, send or atomic")
    p.add_argument("servername", nargs="?", default=None,
                   help="connect to this server (default: be the server)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bw", dest="mode", action="store_const", const="bw",
                   help="measure bandwidth (the default)")
    g.add_argument("--lat", dest="mode", action="store_const", const="lat",
                   help="measure latency")
    _oob.add_common(p, gid_flag="-x")
    p.add_argument("-s", "--size", type=_oob.positive_int, default=None,
                   help="message size (default 65536 for --bw, 2 for --lat; "
                        "atomic: 8)")
    p.add_argument("-a", "--all", action="store_true",
                   help="run every size 2, 4, ... 2**23 up to --max-size")
    p.add_argument("--max-size", type=_oob.positive_int, default=1 << 23,
                   help="largest size for -a (default 8388608)")
    p.add_argument("-n", "--iters", type=_oob.positive_int, default=None,
                   help="iterations per size (default 5000 for --bw, 1000 "
                        "for --lat)")
    p.add_argument("-t", "--tx-depth", type=_oob.positive_int, default=128,
                   help="--bw: work requests outstanding (default 128)")
    p.add_argument("-Q", "--cq-mod", type=_oob.positive_int, default=100,
                   help="--bw: one completion every N work requests "
                        "(default 100)")
    p.add_argument("-r", "--rx-depth", type=_oob.positive_int, default=512,
                   help="send: receives the server keeps posted "
                        "(default 512)")
    p.add_argument("-A", "--atomic-type", choices=("FETCH_AND_ADD",
                                                   "CMP_AND_SWAP"),
                   default="FETCH_AND_ADD", help="atomic: the operation")
    p.add_argument("-m", "--mtu", type=_oob.mtu_bytes, default=None,
                   metavar="BYTES", help="path MTU (default: the port's)")
    p.add_argument("-c", "--check", action="store_true",
                   help="check the data that arrived (exit 3 if wrong)")
    p.add_argument("--qps", type=_oob.positive_int, default=None,
                   metavar="N",
                   help="write --bw: also stripe each message over a "
                        "VirtualQP of N data QPs, measured next to the "
                        "single QP in the same run")
    p.add_argument("--mode", dest="lb_mode", choices=_vperf.LB_MODES,
                   default=None,
                   help="--qps: dqplb (every fragment a WRITE_WITH_IMM, "
                        "the default) or spray (plain WRITEs)")
    p.add_argument("--fragment", type=_oob.positive_int, default=None,
                   metavar="SIZE",
                   help="--qps: the largest fragment in bytes (default "
                        "65536)")
    p.add_argument("--output", choices=("text", "csv", "json"),
                   default="text",
                   help="text (a perftest-like table), csv or json")
    p.add_argument("--json", dest="output", action="store_const",
                   const="json", help="the same as --output json")
    p.add_argument("--progress", choices=("auto", "always", "never"),
                   default="auto",
                   help="progress bar on stderr: auto = when stdout is a "
                        "terminal and --output text")
    p.set_defaults(mode=None)
    return _oob.intermixed(p)


def perf(args: Any) -> int:
    """Run ``ibtool perf``; return the exit status."""
    return _oob.run_command("perf", _run, args)


# -- parameters ---------------------------------------------------------------

def _sizes(args: Any) -> List[int]:
    if args.test == "atomic":
        if args.size not in (None, 8):
            raise ValueError("-s: atomics are 8 bytes")
        return [8]
    if args.all:
        if args.size is not None:
            raise ValueError("-a and -s exclude each other")
        sizes = [1 << k for k in range(1, 24) if 1 << k <= args.max_size]
        if not sizes:
            raise ValueError("--max-size must be at least 2 with -a")
        return sizes
    if args.size is not None:
        return [args.size]
    return [65536 if args.mode == "bw" else 2]


def _pattern(size: int, seed: int = 0) -> bytes:
    """Deterministic test data (never all zero)."""
    block = bytes(((j * 7 + seed * 13) % 251) + 1 for j in range(251))
    return (block * (size // 251 + 1))[:size]


class _Channel:
    """JSON objects, one per line, over the TCP connection."""

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock = sock
        self.timeout = timeout
        self.pending = b""
        self.quiet_since: Optional[float] = None

    def send(self, **msg: Any) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        _oob.send_all(self.sock, data, Deadline(self.timeout),
                      f"{msg.get('cmd')!r}")

    def ready(self) -> bool:
        """Without blocking: has a message other than a ``beat`` arrived
        (or the connection ended)?  Beats are dropped; a whole --timeout
        without any message raises OOBTimeout."""
        if self.quiet_since is None:
            self.quiet_since = time.monotonic()
        while True:
            line, nl, rest = self.pending.partition(b"\n")
            if nl:
                if not _is_beat(line):
                    self.quiet_since = None
                    return True
                self.pending = rest
                self.quiet_since = time.monotonic()
                continue
            if not select.select([self.sock], [], [], 0)[0]:
                quiet = time.monotonic() - self.quiet_since
                if self.timeout and 0 < self.timeout < quiet:
                    raise OOBTimeout(f"timed out: nothing from the peer for "
                                     f"{self.timeout:g} s during a run; is "
                                     f"it gone?")
                return False
            try:
                self.sock.settimeout(0)
                chunk = self.sock.recv(65536)
            except (BlockingIOError, socket.timeout):
                return False
            except ConnectionError:
                return True         # recv() says what happened
            if not chunk:
                return True
            self.pending += chunk

    def recv(self, what: str, expect: Optional[str] = None) -> Dict[str, Any]:
        """The next message other than a ``beat`` (each beat restarts the
        timeout)."""
        while True:
            deadline = Deadline(self.timeout)
            while b"\n" not in self.pending:
                if len(self.pending) > 1 << 20:
                    raise PeerError("the peer sent an oversized message")
                self.sock.settimeout(deadline.remaining())
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    raise deadline.error(f"waiting for {what}") from None
                except ConnectionError as e:
                    raise PeerError(f"connection lost waiting for {what}: "
                                    f"{e.strerror or e}") from None
                if not chunk:
                    raise PeerError(f"the peer closed the connection "
                                    f"(waiting for {what})")
                self.pending += chunk
            line, _, self.pending = self.pending.partition(b"\n")
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    raise ValueError
            except ValueError:
                raise PeerError(f"the peer does not speak {PROTO} (got "
                                f"{line[:40]!r})") from None
            cmd = msg.get("cmd")
            if cmd == "beat":
                continue
            if cmd == "error":
                err = CLIError(f"the peer failed: {msg.get('msg')}")
                err.exit_code = int(msg.get("code", 1))
                raise err
            if expect is not None and cmd != expect:
                raise PeerError(f"protocol error: expected {expect!r}, got "
                                f"{cmd!r}")
            return msg


def _is_beat(line: bytes) -> bool:
    try:
        msg = json.loads(line)
    except ValueError:
        return False
    return isinstance(msg, dict) and msg.get("cmd") == "beat"


class _Beat:
    """Heartbeats and the progress bar, checked every few operations."""

    def __init__(self, chan: _Channel, bar: "_Progress"):
        self.chan, self.bar = chan, bar
        self.next = time.monotonic() + 1.0

    def tick(self, done: int) -> None:
        """Called after every completion batch or latency iteration (outside
        the timed part)."""
        if self.bar.enabled:
            self.bar.update(done)
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + 1.0
            self.chan.send(cmd="beat")


class _Progress:
    """A progress bar on stderr: tqdm when installed, else a plain one."""

    def __init__(self, enabled: bool, total: int, desc: str):
        self.enabled, self.total, self.base, self.shown = enabled, total, 0, 0
        self.bar = None
        self.last = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit="op",
                            file=sys.stderr, leave=False)
        except Exception:
            self.bar = None
        self.desc = desc

    def update(self, done_in_size: int) -> None:
        if not self.enabled:
            return
        now = self.base + done_in_size
        if self.bar is not None:
            self.bar.update(now - self.shown)
        elif time.monotonic() - self.last > 0.1 or now >= self.total:
            self.last = time.monotonic()
            frac = now / self.total if self.total else 1.0
            n = int(frac * 30)
            sys.stderr.write(f"\r{self.desc} [{'#' * n}{' ' * (30 - n)}] "
                             f"{frac * 100:5.1f}%")
            sys.stderr.flush()
        self.shown = now

    def next_size(self, iters: int) -> None:
        self.update(iters)
        self.base += iters
        self.shown = self.base

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        else:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


# -- the run ------------------------------------------------------------------

class _Side:
    """This side's verbs resources: one RC QP, its CQs, and one MR with two
    regions: ``A`` (the peer writes, reads or adds there; receives land
    there) and ``S`` (what we send or write from, where reads and atomic
    results land)."""

    def __init__(self, ctx: ibv_t.Context, end_port: EndPort,
                 args: Any, max_size: int,
                 gidx: int) -> None:
        import rdma.ibverbs as ibv
        self.ibv = ibv
        self.end_port = end_port
        self.max_size = max(max_size, 8)
        region = (self.max_size + 63) & ~63
        self.buf = bytearray(2 * region + 64)
        self.pd = ctx.pd()
        self.mr = self.pd.mr(self.buf, ibv.IBV_ACCESS_LOCAL_WRITE |
                             ibv.IBV_ACCESS_REMOTE_WRITE |
                             ibv.IBV_ACCESS_REMOTE_READ |
                             ibv.IBV_ACCESS_REMOTE_ATOMIC)
        skip = (-self.mr.addr) % 64          # 8-byte aligned for atomics
        self.a0, self.s0 = skip, skip + region
        lat = args.mode == "lat"
        self.tx_depth = 16 if lat else args.tx_depth
        self.rx_depth = (16 if lat else args.rx_depth) \
            if args.test == "send" else 1
        self.scq = ctx.cq(self.tx_depth + 1)
        self.rcq = ctx.cq(self.rx_depth + 1)
        self.qp = self.pd.qp(ibv.IBV_QPT_RC, self.tx_depth, self.scq,
                             self.rx_depth, self.rcq, sq_sig_all=0)
        dev = ctx.query_device()
        self.rd_atomic = max(1, min(dev.max_qp_rd_atom,
                                    dev.max_qp_init_rd_atom, 16))
        self.gidx = gidx
        self.psn = _oob.random_psn()
        import rdma.path
        init = rdma.path.IBPath(end_port)
        init.pkey_index = 0
        self.qp.modify_to_init(init, ibv.IBV_ACCESS_REMOTE_WRITE |
                               ibv.IBV_ACCESS_REMOTE_READ |
                               ibv.IBV_ACCESS_REMOTE_ATOMIC)
        self.recv_wr = ibv.recv_wr(wr_id=1, sg_list=self.mr.sge(
            self.max_size, self.a0))
        if args.test == "send":
            self.qp.post_recv(ibv.RecvBatch([self.recv_wr] * self.rx_depth))
        self.recv_batches: Dict[int, Any] = {}
        self.peer: Dict[str, Any] = {}
        self.wcs = ibv.WCArray(64)
        self.vside = (_vperf.VSide(self, args) if getattr(args, "qps", None)
                      else None)

    def describe(self, mtu: int) -> Dict[str, Any]:
        gid = _oob.local_gid(self.end_port, self.gidx)
        extra = {} if self.vside is None else {"vqp": self.vside.describe()}
        return {**extra, "qp": {"lid": self.end_port.lid, "qpn": self.qp.qp_num,
                       "psn": self.psn,
                       "gid": socket.inet_ntop(socket.AF_INET6, gid),
                       "rd_atomic": self.rd_atomic, "mtu": mtu},
                "mr": {"addr": self.mr.addr + self.a0, "rkey": self.mr.rkey}}

    def connect(self, peer: Dict[str, Any], mtu: int, sl: int = 0) -> None:
        try:
            q, m = peer["qp"], peer["mr"]
            remote = _oob.Dest(int(q["lid"]), int(q["qpn"]), int(q["psn"]),
                               socket.inet_pton(socket.AF_INET6, q["gid"]))
            rd = max(1, min(self.rd_atomic, int(q["rd_atomic"])))
            mtu = min(mtu, int(q["mtu"]))
            self.peer = {"addr": int(m["addr"]), "rkey": int(m["rkey"])}
        except (KeyError, TypeError, ValueError, OSError):
            raise PeerError("the peer sent an invalid hello") from None
        path = _oob.connect_path(self.end_port, self.ibv.IBV_QPT_RC, remote,
                                 self.psn, gid_index=self.gidx, mtu=mtu,
                                 sl=sl, rd_atomic=rd)
        self.qp.modify_to_rtr(path)
        self.qp.modify_to_rts(path)
        self.remote = remote
        if self.vside is not None:
            vqp = peer.get("vqp")
            if vqp is None:
                raise PeerError("the peer offers no VirtualQP: is it an "
                                "ibtool perf without --qps?")
            self.vside.connect(vqp, mtu)

    # -- work requests ---------------------------------------------------

    def wr(self, test: str, size: int, signaled: bool, atomic: str = "",
           wr_id: int = 2) -> Any:
        ibv = self.ibv
        flags = ibv.IBV_SEND_SIGNALED if signaled else 0
        if test == "write":
            return ibv.send_wr(wr_id=wr_id, opcode=ibv.IBV_WR_RDMA_WRITE,
                               send_flags=flags,
                               sg_list=self.mr.sge(size, self.s0),
                               remote_addr=self.peer["addr"],
                               rkey=self.peer["rkey"])
        if test == "read":
            return ibv.send_wr(wr_id=wr_id, opcode=ibv.IBV_WR_RDMA_READ,
                               send_flags=flags,
                               sg_list=self.mr.sge(size, self.s0),
                               remote_addr=self.peer["addr"],
                               rkey=self.peer["rkey"])
        if test == "send":
            return ibv.send_wr(wr_id=wr_id, opcode=ibv.IBV_WR_SEND,
                               send_flags=flags,
                               sg_list=self.mr.sge(size, self.s0))
        if atomic == "CMP_AND_SWAP":
            return ibv.send_wr(wr_id=wr_id,
                               opcode=ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
                               send_flags=flags,
                               sg_list=self.mr.sge(8, self.s0),
                               remote_addr=self.peer["addr"],
                               rkey=self.peer["rkey"], compare_add=0,
                               swap=1)
        return ibv.send_wr(wr_id=wr_id, opcode=ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                           send_flags=flags, sg_list=self.mr.sge(8, self.s0),
                           remote_addr=self.peer["addr"],
                           rkey=self.peer["rkey"], compare_add=1)

    def repost(self, n: int) -> None:
        b = self.recv_batches.get(n)
        if b is None:
            b = self.recv_batches[n] = self.ibv.RecvBatch([self.recv_wr] * n)
        self.qp.post_recv(b)

    def check_wcs(self, n: int) -> None:
        bad = self.wcs.first_error()
        if bad is not None:
            raise self.ibv.WCError(self.wcs[bad], qp=self.qp)


class _Idle:
    """Raise OOBTimeout when nothing happened for *timeout* seconds;
    ``poll()`` is cheap (reads the clock every 4096 calls)."""

    def __init__(self, timeout: float, what: str):
        self.timeout = timeout if timeout and timeout > 0 else None
        self.what = what
        self.count = 0
        self.last = time.monotonic()

    def progress(self) -> None:
        self.count = 0
        self.last = 0.0     # re-read at the next idle check

    def idle(self) -> None:
        self.count += 1
        if self.count < 4096:
            return
        self.count = 0
        now = time.monotonic()
        if self.last == 0.0:
            self.last = now
        elif self.timeout is not None and now - self.last > self.timeout:
            raise OOBTimeout(f"timed out: nothing happened for "
                             f"{self.timeout:g} s {self.what}; is the peer "
                             f"gone?")


def _bw_client(side: _Side, args: Any, size: int, beat: _Beat) -> Dict[str, Any]:
    ibv = side.ibv
    iters = args.iters
    # at least two batches in flight, so that the queue never runs dry
    chunk = max(1, min(args.cq_mod, side.tx_depth // 2, iters))
    nchunks = -(-iters // chunk)
    last_n = iters - (nchunks - 1) * chunk
    unsig = side.wr(args.test, size, False, args.atomic_type)
    sig = side.wr(args.test, size, True, args.atomic_type)
    full = ibv.SendBatch([unsig] * (chunk - 1) + [sig])
    last = full if last_n == chunk else \
        ibv.SendBatch([unsig] * (last_n - 1) + [sig])
    max_out = max(1, side.tx_depth // chunk)
    qp, cq, wcs = side.qp, side.scq, side.wcs
    idle = _Idle(args.timeout, f"waiting for {args.test} completions")
    stamps: List[float] = []
    posted = done = 0
    clock = time.perf_counter
    t0 = clock()
    while done < nchunks:
        while posted < nchunks and posted - done < max_out:
            qp.post_send(full if posted < nchunks - 1 else last)
            posted += 1
        n = cq.poll_into(wcs)
        if not n:
            idle.idle()
            continue
        now = clock()
        side.check_wcs(n)
        done += n
        stamps.extend([now] * n)
        idle.progress()
        beat.tick(done * chunk)
    return _bw_stats(args, size, iters, t0, clock(), stamps, max_out, chunk)


def _bw_stats(args: Any, size: int, iters: int, t0: float, t1: float,
              stamps: List[float], max_out: int, chunk: int
              ) -> Dict[str, Any]:
    """The bandwidth row of a run from its first post (t0) to its last
    completion (t1); *stamps*: the time of each completion, each covering
    *chunk* WRs, at most *max_out* of them outstanding."""
    elapsed = max(t1 - t0, 1e-9)
    total = size * iters
    peak = total / elapsed
    # the peak is taken over windows of at least a tenth of the run (and a
    # full send queue), so that bursty completions do not inflate it
    w = min(max(max_out, len(stamps) // 10), len(stamps) - 1)
    if w >= 1:
        for i in range(w, len(stamps)):
            dt = stamps[i] - stamps[i - w]
            if dt > 0:
                peak = max(peak, w * chunk * size / dt)
    return {"test": args.test, "mode": "bw", "bytes": size,
            "iterations": iters, "bw_peak_mb_s": peak / MB,
            "bw_avg_mb_s": total / elapsed / MB,
            "msg_rate_mpps": iters / elapsed / 1e6}


def _vbw_client(side: "_Side", args: Any, size: int, beat: _Beat,
                single: Dict[str, Any]) -> Dict[str, Any]:
    """The VirtualQP's run of *size* after the single QP's (*single*, its
    row): one row with both."""
    side.buf[side.s0:side.s0 + size] = _pattern(size, _vperf.SEED)
    idle = _Idle(args.timeout, "waiting for VirtualQP completions")
    assert side.vside is not None       # --qps made it
    t0, t1, stamps, depth = _vperf.bw_client(side.vside, args, size, beat,
                                             idle)
    row = _bw_stats(args, size, args.iters, t0, t1, stamps, depth, 1)
    row.update(qps=args.qps, lb_mode=args.lb_mode, fragment=args.fragment,
               single_bw_peak_mb_s=single["bw_peak_mb_s"],
               single_bw_avg_mb_s=single["bw_avg_mb_s"],
               speedup=row["bw_avg_mb_s"] / max(single["bw_avg_mb_s"],
                                                1e-12))
    return row


def _send_bw_server(side: _Side, args: Any, iters: int) -> None:
    """Count *iters* receives, keeping the receive queue full."""
    cq, wcs = side.rcq, side.wcs
    got = 0
    outstanding = side.rx_depth
    refill = max(1, min(32, side.rx_depth // 4))
    idle = _Idle(args.timeout, "waiting for sends")
    while got < iters:
        n = cq.poll_into(wcs)
        if not n:
            idle.idle()
            continue
        side.check_wcs(n)
        idle.progress()
        got += n
        outstanding -= n
        if side.rx_depth - outstanding >= refill:
            side.repost(side.rx_depth - outstanding)
            outstanding = side.rx_depth


def _lat_stats(args: Any, size: int, times_ns: List[int], half: bool
               ) -> Dict[str, Any]:
    div = 2000.0 if half else 1000.0
    t = sorted(x / div for x in times_ns)
    n = len(t)
    avg = sum(t) / n
    sd = math.sqrt(sum((x - avg) ** 2 for x in t) / n)

    def pct(p: float) -> float:
        return t[min(n - 1, max(0, math.ceil(p * n) - 1))]
    return {"test": args.test, "mode": "lat", "bytes": size,
            "iterations": n, "t_min_us": t[0], "t_max_us": t[-1],
            "t_typical_us": t[n // 2] if n % 2 else (t[n // 2 - 1] +
                                                     t[n // 2]) / 2,
            "t_avg_us": avg, "t_stdev_us": sd, "t_p99_us": pct(0.99),
            "t_p999_us": pct(0.999)}


def _spin_until(buf: bytearray, pos: int, value: int, idle: _Idle) -> None:
    while buf[pos] != value:
        idle.idle()
    idle.progress()


def _drain(side: _Side) -> None:
    n = side.scq.poll_into(side.wcs)
    if n:
        side.check_wcs(n)


def _wait_one(side: _Side, cq: ibv_t.CQ, idle: _Idle) -> None:
    wcs = side.wcs
    while True:
        n = cq.poll_into(wcs, 1)
        if n:
            side.check_wcs(n)
            idle.progress()
            return
        idle.idle()


def _lat_run(side: _Side, args: Any, size: int, client: bool,
             beat: Optional[_Beat]) -> Optional[Dict[str, Any]]:
    """One latency test; the client returns its row."""
    ibv = side.ibv
    iters, test = args.iters, args.test
    qp, buf = side.qp, side.buf
    idle = _Idle(args.timeout, f"in the {test} latency loop")
    clock = time.perf_counter_ns
    times: List[int] = []
    record = times.append
    batch = ibv.SendBatch([side.wr(test, size, True, args.atomic_type)])
    if test == "write":
        mark_s, mark_a = side.s0 + size - 1, side.a0 + size - 1
        for i in range(iters):
            m = i % 255 + 1
            if client:
                buf[mark_s] = m
                t = clock()
                qp.post_send(batch)
                _spin_until(buf, mark_a, m, idle)
                record(clock() - t)
            else:
                _spin_until(buf, mark_a, m, idle)
                buf[mark_s] = m
                qp.post_send(batch)
            _drain(side)
            if beat is not None:
                beat.tick(i)
    elif test == "send":
        one = 1
        for i in range(iters):
            if client:
                t = clock()
                qp.post_send(batch)
                _wait_one(side, side.rcq, idle)
                record(clock() - t)
            else:
                _wait_one(side, side.rcq, idle)
                qp.post_send(batch)
            side.repost(one)
            _drain(side)
            if beat is not None:
                beat.tick(i)
    else:
        if not client:
            return None
        for i in range(iters):
            t = clock()
            qp.post_send(batch)
            _wait_one(side, side.scq, idle)
            record(clock() - t)
            if beat is not None:
                beat.tick(i)
    if not client:
        return None
    return _lat_stats(args, size, times, half=test in ("write", "send"))


# -- checks -------------------------------------------------------------------

def _prepare(side: _Side, args: Any, size: int, client: bool) -> None:
    """Fill our source region with the pattern, clear the target region."""
    a, s = side.a0, side.s0
    side.buf[a:a + max(size, 8)] = bytes(max(size, 8))
    seed = 1 if client else 2
    side.buf[s:s + size] = _pattern(size, seed)
    if args.test == "read" and not client:
        side.buf[a:a + size] = _pattern(size, 2)
    if args.test == "atomic":
        side.buf[s:s + 8] = bytes(8)


def _verify(side: _Side, args: Any, size: int, client: bool) -> Optional[str]:
    """With -c: what went wrong on this side, or None."""
    if not args.check:
        return None
    a, s, buf = side.a0, side.s0, side.buf
    test, lat = args.test, args.mode == "lat"
    if test in ("write", "send"):
        if client and not lat:
            return None
        n = size - 1 if (test == "write" and lat) else size
        seed = 2 if client else _vperf.SEED if args.qps else 1
        want = _pattern(size, seed)[:n]
        got = bytes(buf[a:a + n])
    elif test == "read":
        if not client:
            return None
        want, got = _pattern(size, 2), bytes(buf[s:s + size])
    else:
        if client:
            return None
        value = struct.unpack_from("<Q", buf, a)[0]
        if args.atomic_type == "CMP_AND_SWAP":
            return None if value == 1 else \
                f"the atomic target is {value}, expected 1"
        return None if value == args.iters else \
            f"the atomic counter is {value}, expected {args.iters}"
    if got == want:
        return None
    diff = next(i for i in range(len(want)) if got[i] != want[i])
    return (f"data validation failed ({size} bytes): byte {diff} is "
            f"{got[diff]:#04x}, expected {want[diff]:#04x}")


# -- output -------------------------------------------------------------------

def _header(args: Any, end_port: EndPort, side: _Side, mtu: int, role: str) -> None:
    from rdma import IBA
    title = f"{_TITLES[args.test]} {'BW' if args.mode == 'bw' else 'Latency'}"
    title += " Test"
    print(_LINE)
    print(f"{title:^87}".rstrip())
    print(f" Device         : {end_port}\t\tRole           : {role}")
    print(f" Connection type: RC\t\tLink type      : {end_port.link_layer}")
    print(f" TX depth       : {side.tx_depth}\t\tCQ moderation  : "
          f"{args.cq_mod if args.mode == 'bw' else 1}")
    print(f" Mtu            : {IBA.mtu_to_bytes(mtu)}[B]\t\tGID index      : "
          f"{side.gidx if side.gidx >= 0 else '-'}")
    if args.test == "atomic":
        print(f" Atomic type    : {args.atomic_type}")
    local = _oob.Dest(end_port.lid, side.qp.qp_num, side.psn,
                      _oob.local_gid(end_port, side.gidx))
    print(f" local address:  {local.describe()}")
    print(f" remote address: {side.remote.describe()}")
    print(_LINE)
    if args.qps:
        print(f" VirtualQP      : {args.qps} data QPs, {args.lb_mode}, "
              f"fragment {args.fragment} B")
        print(_LINE)
        print(" #bytes     #iterations  BW peak[MB/sec]  "
              "BW average[MB/sec]  MsgRate[Mpps]  1-QP BW avg[MB/sec]  "
              "x 1-QP")
    elif args.mode == "bw":
        print(" #bytes     #iterations    BW peak[MB/sec]    "
              "BW average[MB/sec]   MsgRate[Mpps]")
    else:
        print(" #bytes #iterations    t_min[usec]    t_max[usec]  "
              "t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
              "99% percentile[usec]   99.9% percentile[usec]")
    sys.stdout.flush()


def _text_row(row: Dict[str, Any]) -> str:
    if "qps" in row:
        return (f" {row['bytes']:<10} {row['iterations']:<12} "
                f"{row['bw_peak_mb_s']:<16.2f} {row['bw_avg_mb_s']:<19.2f} "
                f"{row['msg_rate_mpps']:<14.6f} "
                f"{row['single_bw_avg_mb_s']:<20.2f} {row['speedup']:.2f}")
    if row["mode"] == "bw":
        return (f" {row['bytes']:<10} {row['iterations']:<14} "
                f"{row['bw_peak_mb_s']:<18.2f} {row['bw_avg_mb_s']:<20.2f} "
                f"{row['msg_rate_mpps']:.6f}")
    return (f" {row['bytes']:<6} {row['iterations']:<13} "
            f"{row['t_min_us']:<14.2f} {row['t_max_us']:<12.2f} "
            f"{row['t_typical_us']:<18.2f} {row['t_avg_us']:<14.2f} "
            f"{row['t_stdev_us']:<15.2f} {row['t_p99_us']:<22.2f} "
            f"{row['t_p999_us']:.2f}")


class _Output:
    def __init__(self, args: Any, role: str) -> None:
        self.args, self.role = args, role
        self.rows: List[Dict[str, Any]] = []
        self.fields = (LAT_FIELDS if args.mode != "bw" else
                       _vperf.VBW_FIELDS if args.qps else BW_FIELDS)
        self.meta: Dict[str, Any] = {}

    def start(self, end_port: EndPort, side: _Side, mtu: int) -> None:
        from rdma import IBA
        self.meta = {"test": self.args.test, "mode": self.args.mode,
                     "role": self.role, "device": str(end_port),
                     "mtu": IBA.mtu_to_bytes(mtu), "tx_depth": side.tx_depth,
                     "iters": self.args.iters}
        if self.args.test == "atomic":
            self.meta["atomic_type"] = self.args.atomic_type
        if self.args.qps:
            self.meta.update(qps=self.args.qps, lb_mode=self.args.lb_mode,
                             fragment=self.args.fragment)
        if self.args.output == "text":
            _header(self.args, end_port, side, mtu, self.role)
        elif self.args.output == "csv":
            print(",".join(self.fields), flush=True)

    def row(self, row: Dict[str, Any]) -> None:
        row = {k: row[k] for k in self.fields}
        self.rows.append(row)
        if self.args.output == "text":
            print(_text_row(row), flush=True)
        elif self.args.output == "csv":
            print(",".join(f"{row[k]:.6g}" if isinstance(row[k], float)
                           else str(row[k]) for k in self.fields),
                  flush=True)

    def finish(self) -> None:
        if self.args.output == "text":
            print(_LINE, flush=True)
        elif self.args.output == "json":
            print(json.dumps(dict(self.meta, results=self.rows)), flush=True)


# -- main ---------------------------------------------------------------------

def _run(args: Any) -> int:
    import rdma
    if args.mode is None:
        args.mode = "bw"
    if args.iters is None:
        args.iters = 5000 if args.mode == "bw" else 1000
    if args.servername is not None:
        _vperf.check_args(args)
    elif args.qps or args.lb_mode or args.fragment:
        raise ValueError("--qps, --mode and --fragment are the client's "
                         "choice; the server takes them from its hello")
    end_port = _oob.open_end_port(args.ib_dev, args.ib_port, args.provider)
    gidx = _oob.pick_gid_index(end_port, args.gid_idx)
    mtu = args.mtu or end_port.attr.active_mtu
    mtu = min(mtu, end_port.attr.active_mtu)
    client = args.servername is not None
    enabled = (args.progress == "always" or
               (args.progress == "auto" and args.output == "text" and
                sys.stdout.isatty()))
    # The client chooses the test parameters; a server ignores its own.
    sizes = _sizes(args) if client else []
    step = Deadline(args.timeout)
    with rdma.get_verbs(end_port) as ctx:
        if client:
            conn = _oob.connect(args.servername, args.port, step,
                                wait=args.wait)
            return _client(ctx, end_port, args, conn, sizes, gidx, mtu,
                           enabled)
        lsock = _oob.listen(args.port)
        conn = _oob.accept(lsock, step)
        return _server(ctx, end_port, args, conn, gidx, mtu)


def _client(ctx: ibv_t.Context, end_port: EndPort, args: Any,
            conn: socket.socket, sizes: List[int], gidx: int, mtu: int,
            enabled: bool) -> int:
    with conn:
        chan = _Channel(conn, args.timeout)
        side = _Side(ctx, end_port, args, max(sizes), gidx)
        chan.send(cmd="hello", proto=PROTO, version=VERSION, test=args.test,
                  mode=args.mode, sizes=sizes, iters=args.iters,
                  tx_depth=args.tx_depth, cq_mod=args.cq_mod,
                  rx_depth=args.rx_depth, atomic=args.atomic_type,
                  check=args.check, qps=args.qps, lb_mode=args.lb_mode,
                  fragment=args.fragment, **side.describe(mtu))
        peer = chan.recv("the server's hello", "hello")
        side.connect(peer, mtu)
        out = _Output(args, "client")
        out.start(end_port, side, mtu)
        runs = 2 if args.qps else 1
        bar = _Progress(enabled, len(sizes) * args.iters * runs,
                        f"{args.test} {args.mode}")
        beat = _Beat(chan, bar)
        failure: Optional[CLIError] = None
        try:
            for size in sizes:
                _prepare(side, args, size, True)
                chan.send(cmd="run", size=size)
                chan.recv("the server to be ready", "go")
                row: Optional[Dict[str, Any]]
                if args.mode == "bw":
                    row = _bw_client(side, args, size, beat)
                    if side.vside is not None:
                        bar.next_size(args.iters)
                        row = _vbw_client(side, args, size, beat, row)
                else:
                    row = _lat_run(side, args, size, True, beat)
                bar.next_size(args.iters)
                problem = _verify(side, args, size, True)
                chan.send(cmd="result", row=row)
                chan.recv("the server's check", "ok")
                if problem:
                    failure = ValidationError(problem)
                    chan.send(cmd="error", msg=problem, code=3)
                    break
                assert row is not None      # a client's run has its row
                out.row(row)
        finally:
            bar.close()
        if failure is None:
            chan.send(cmd="bye")
        out.finish()
        if failure is not None:
            raise failure
    return 0


def _server(ctx: ibv_t.Context, end_port: EndPort, args: Any,
            conn: socket.socket, gidx: int, mtu: int) -> int:
    with conn:
        chan = _Channel(conn, args.timeout)
        hello = chan.recv("the client's hello", "hello")
        if hello.get("proto") != PROTO or hello.get("version") != VERSION:
            chan.send(cmd="error", msg=f"unsupported protocol "
                      f"{hello.get('proto')!r} {hello.get('version')!r}")
            raise PeerError("the client speaks another protocol")
        try:
            for k in ("test", "mode", "iters", "tx_depth", "cq_mod",
                      "rx_depth", "atomic", "check"):
                setattr(args, {"atomic": "atomic_type"}.get(k, k), hello[k])
            sizes = [int(s) for s in hello["sizes"]]
            if args.test not in TESTS or args.mode not in ("bw", "lat"):
                raise ValueError
            args.qps = hello.get("qps")
            args.lb_mode = hello.get("lb_mode")
            args.fragment = hello.get("fragment")
            _vperf.check_args(args)
        except (KeyError, TypeError, ValueError):
            chan.send(cmd="error", msg="invalid hello")
            raise PeerError("the client sent an invalid hello") from None
        side = _Side(ctx, end_port, args, max(sizes), gidx)
        side.connect(hello, mtu)
        chan.send(cmd="hello", proto=PROTO, version=VERSION,
                  **side.describe(mtu))
        out = _Output(args, "server")
        out.start(end_port, side, mtu)
        failure: Optional[CLIError] = None
        while True:
            msg = chan.recv("the client's next command")
            cmd = msg.get("cmd")
            if cmd == "bye":
                break
            if cmd != "run":
                raise PeerError(f"protocol error: unexpected {cmd!r}")
            size = int(msg["size"])
            _prepare(side, args, size, False)
            chan.send(cmd="go")
            if args.mode == "lat":
                _lat_run(side, args, size, False, None)
            elif args.test == "send":
                _send_bw_server(side, args, args.iters)
            elif side.vside is not None:
                _vperf.serve_until_message(side.vside, chan)
            res = chan.recv("the client's result", "result")
            problem = _verify(side, args, size, False)
            if problem:
                chan.send(cmd="error", msg=problem, code=3)
                failure = ValidationError(problem)
                break
            chan.send(cmd="ok")
            out.row(res["row"])
        out.finish()
        if failure is not None:
            raise failure
    return 0
