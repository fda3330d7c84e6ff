"""``ibtool pingpong``: libibverbs' ``ibv_rc_pingpong``, ``ibv_uc_pingpong``,
``ibv_ud_pingpong`` and ``ibv_srq_pingpong``, on the wire compatible with
them.

::

    ibtool pingpong rc                 # server: wait for a client
    ibtool pingpong rc SERVER -g 1     # client
    ibtool pingpong srq SERVER -q 4 -n 200 -e

How the C tools (and this command) talk, so that any pair interoperates:

- Out of band, over TCP (port 18515, ``-p``): each side describes each of
  its QPs in one 52-byte, NUL-terminated text message
  ``"LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG"`` (LID, QP number
  and initial PSN in hex, the GID as 32 hex digits in wire order; zero
  without ``-g``).  The client sends first; the server brings its QPs to
  RTS and then answers; the client ends with ``"done\\0"``.  ``srq`` always
  sends 256 messages (unused ones zero) and uses the first *num-qp*.
- Then *iters* messages of *size* bytes go each way: the client sends
  first (on every QP for ``srq``); a side sends again on a QP once its
  previous send completed and a message arrived on it.  Every message is
  sent from the buffer the last one was received into, so each side
  echoes the other.  For ``srq`` *iters* counts over all QPs.
- ``ud`` messages carry a 40-byte GRH area in front of the receive buffer
  and must fit the port MTU; the Q_Key is 0x11111111.

``-c`` validates: the client fills its buffer with a known pattern (zero
at each page start, which is what a C client with ``-c`` checks) and,
at the end, checks that the whole buffer came back unchanged; the server
checks that every message is the same as the first one.  A failure exits
with status 3.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, Optional

from rdma.cli import _oob
from rdma.cli._oob import (Deadline, Dest, DEST_LEN, OOBTimeout, PeerError,
                           ValidationError)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "pingpong", "MODES"]

#: The transports, as the C tool names: ibv_<mode>_pingpong.
MODES = ("rc", "uc", "ud", "srq")
_DEFAULT_SIZE = {"rc": 4096, "uc": 4096, "ud": 1024, "srq": 4096}
#: srq_pingpong always exchanges this many address messages.
MAX_QP = 256
RECV_WRID = 1
SEND_WRID = 2
UD_QKEY = 0x11111111
GRH = 40
PAGE = 4096
DONE = b"done\0"


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``pingpong`` to the ``rdma`` command's subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Send messages back and forth between two QPs and report "
                    "the bandwidth and round-trip time, exactly as "
                    "libibverbs' ibv_rc_pingpong, ibv_uc_pingpong, "
                    "ibv_ud_pingpong and ibv_srq_pingpong do; either side "
                    "may be the C tool.  Without SERVERNAME, wait for a "
                    "client.",
        epilog="exit status: 0 ok, 1 RDMA/runtime failure, 2 bad usage, "
               "3 data validation failed (-c), 124 a step timed out "
               "(--timeout).  Example (Soft-RoCE): ibtool pingpong rc -g 1 & "
               "ibtool pingpong rc -g 1 --wait 5 127.0.0.1")
    p.add_argument("mode", choices=MODES,
                   help="rc, uc, ud or srq (RC QPs sharing a receive queue)")
    p.add_argument("servername", nargs="?", default=None,
                   help="connect to this server (default: be the server)")
    _oob.add_common(p, gid_flag="-g")
    p.add_argument("-s", "--size", type=_oob.positive_int, default=None,
                   help="message size in bytes (default 4096; ud 1024)")
    p.add_argument("-m", "--mtu", type=_oob.mtu_bytes, default=None,
                   metavar="BYTES",
                   help="path MTU: 256..4096 (default 1024, at most the "
                        "port's)")
    p.add_argument("-r", "--rx-depth", type=_oob.positive_int, default=500,
                   help="receives to keep posted (default 500)")
    p.add_argument("-n", "--iters", type=_oob.positive_int, default=1000,
                   help="messages each way (default 1000; srq: over all QPs)")
    p.add_argument("-l", "--sl", type=int, default=0,
                   help="service level (default 0)")
    p.add_argument("-e", "--events", action="store_true",
                   help="sleep on the completion channel instead of polling")
    p.add_argument("-q", "--num-qp", type=_oob.positive_int, default=16,
                   help="srq: number of QPs (default 16, at most 255)")
    p.add_argument("-c", "--chk", action="store_true",
                   help="validate the received data (exit 3 if wrong)")
    p.add_argument("--output", choices=("text", "json"), default="text",
                   help="text (the C tools' lines) or one JSON object")
    p.add_argument("--json", dest="output", action="store_const",
                   const="json", help="the same as --output json")
    return _oob.intermixed(p)


def pingpong(args: argparse.Namespace) -> int:
    """Run ``ibtool pingpong``; return the exit status."""
    return _oob.run_command("pingpong", _run, args)


def _check_args(args: argparse.Namespace) -> None:
    if args.size is None:
        args.size = _DEFAULT_SIZE[args.mode]
    if args.mtu is None:
        from rdma import IBA
        args.mtu = IBA.MTU_1024
    if not 0 <= args.sl <= 15:
        raise ValueError(f"-l: service level {args.sl} is not in 0..15")
    if args.mode == "srq":
        if args.num_qp >= MAX_QP:
            raise ValueError(f"-q: at most {MAX_QP - 1} QPs, not "
                             f"{args.num_qp}")
        if args.num_qp > args.rx_depth:
            raise ValueError(f"-r: rx depth {args.rx_depth} is less than the "
                             f"number of QPs {args.num_qp}: there must be at "
                             f"least one receive per QP")


def _pattern(size: int) -> bytes:
    """What a client with -c sends: never 0, except 0 at each page start."""
    b = bytearray((j % 251) + 1 for j in range(min(size, 251 * 17)))
    b = (b * (size // len(b) + 1))[:size]
    for j in range(0, size, PAGE):
        b[j] = 0
    return bytes(b)


def _say(args: argparse.Namespace, text: str) -> None:
    if args.output == "text":
        print(text, flush=True)


def _run(args: argparse.Namespace) -> int:
    import rdma
    import rdma.ibverbs as ibv

    _check_args(args)
    mode, size, server = args.mode, args.size, args.servername is None
    ud, srq = mode == "ud", mode == "srq"
    nqp = args.num_qp if srq else 1
    end_port = _oob.open_end_port(args.ib_dev, args.ib_port, args.provider)
    gidx = _oob.pick_gid_index(end_port, args.gid_idx)
    if ud:
        from rdma import IBA
        mtu = IBA.mtu_to_bytes(end_port.attr.active_mtu)
        if size > mtu:
            raise ValueError(f"-s: a UD message of {size} bytes is larger "
                             f"than the port MTU ({mtu})")
    extra = GRH if ud else 0
    qp_type = {"rc": ibv.IBV_QPT_RC, "uc": ibv.IBV_QPT_UC,
               "ud": ibv.IBV_QPT_UD, "srq": ibv.IBV_QPT_RC}[mode]

    with rdma.get_verbs(end_port) as ctx:
        # -- resources, as the C tool makes them ------------------------------
        buf = bytearray(b"\0" if srq else b"\x7b") * (size + extra)
        cc = ctx.comp_channel() if args.events else None
        pd = ctx.pd()
        mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE)
        cq = ctx.cq(args.rx_depth + nqp if srq else args.rx_depth + 1, cc)
        shared = pd.srq(max_wr=args.rx_depth, max_sge=1) if srq else None
        qps = [pd.qp(qp_type, 1, cq, 0 if srq else args.rx_depth, cq,
                     srq=shared) for _ in range(nqp)]
        send_flags = ibv.IBV_SEND_SIGNALED
        if qps[0].cap.max_inline_data >= size:
            send_flags |= ibv.IBV_SEND_INLINE
        import rdma.path
        init = rdma.path.IBPath(end_port, qkey=UD_QKEY if ud else None)
        init.pkey_index = 0
        for qp in qps:
            qp.modify_to_init(init, 0)
        recv_wr = ibv.recv_wr(wr_id=RECV_WRID,
                              sg_list=mr.sge(size + extra, 0))
        target = qps[0] if shared is None else shared   # SRQ: the SRQ
        target.post_recv(ibv.RecvBatch([recv_wr] * args.rx_depth))
        if args.events:
            cq.req_notify_cq()

        gid = _oob.local_gid(end_port, gidx)
        mine = [Dest(end_port.lid, qp.qp_num, _oob.random_psn(), gid)
                for qp in qps]
        for d in mine:
            _say(args, f"  local address:  {d.describe()}")

        # -- out-of-band exchange ---------------------------------------------
        nmsg = MAX_QP if srq else 1
        padding = Dest(0, 0, 0, bytes(16))

        def encode_all() -> bytes:
            return b"".join((mine[i] if i < nqp else padding).encode()
                            for i in range(nmsg))

        def decode_all(data: bytes) -> List[Dest]:
            return [Dest.decode(data[i * DEST_LEN:(i + 1) * DEST_LEN])
                    for i in range(nqp)]

        ahs: List[Any] = []

        def connect_qps(remote: List[Dest]) -> None:
            for i, qp in enumerate(qps):
                # srq_pingpong takes the GID of the first address for all
                path = _oob.connect_path(
                    end_port, qp_type, remote[i], mine[i].psn,
                    gid_index=gidx, mtu=args.mtu, sl=args.sl,
                    remote_gid=remote[0].gid, qkey=UD_QKEY if ud else None)
                qp.modify_to_rtr(path)
                qp.modify_to_rts(path)
                if ud:
                    ahs.append((pd.ah(path), path.dqpn))

        step = Deadline(args.timeout)
        if server:
            lsock = _oob.listen(args.port)
            conn = _oob.accept(lsock, step)
            with conn:
                step = Deadline(args.timeout)
                remote = decode_all(_oob.recv_exact(
                    conn, nmsg * DEST_LEN, step, "the client's address"))
                connect_qps(remote)
                _oob.send_all(conn, encode_all(), step, "our address")
                _oob.recv_exact(conn, len(DONE), step, "'done'")
                _send_mode(conn, mode, step)
                peer_mode = _read_mode(conn, step)
        else:
            conn = _oob.connect(args.servername, args.port, step,
                                wait=args.wait)
            with conn:
                step = Deadline(args.timeout)
                _oob.send_all(conn, encode_all(), step, "our address")
                remote = decode_all(_oob.recv_exact(
                    conn, nmsg * DEST_LEN, step, "the server's address"))
                _oob.send_all(conn, DONE, step, "'done'")
                peer_mode = _read_mode(conn, step)
                if peer_mode is not None:
                    _send_mode(conn, mode, step)
            connect_qps(remote)
        _check_modes(mode, peer_mode, server)
        for d in remote:
            _say(args, f"  remote address: {d.describe()}")

        # -- ping-pong --------------------------------------------------------
        send_sge = mr.sge(size, extra)
        batches = []
        for i, qp in enumerate(qps):
            wr = ibv.send_wr(wr_id=SEND_WRID, sg_list=send_sge,
                             opcode=ibv.IBV_WR_SEND, send_flags=send_flags)
            if ud:
                wr.ah, wr.remote_qpn, wr.remote_qkey = ahs[i][0], ahs[i][1], \
                    UD_QKEY
            batches.append(ibv.SendBatch([wr], qp_type=qp_type))
        if not server and args.chk:
            buf[extra:] = _pattern(size)
        loop = _Loop(args, ibv, cq, cc, qps, batches, target, recv_wr,
                     buf, extra, server)
        elapsed = loop.run()
        if args.events:
            cq.ack_events()
        if args.chk and not server:
            _check_final(buf[extra:], _pattern(size))

    usec = max(elapsed * 1e6, 1e-3)
    nbytes = size * args.iters * 2
    if args.output == "json":
        print(json.dumps({
            "mode": mode, "role": "server" if server else "client",
            "size": size, "iters": args.iters, "bytes": nbytes,
            "seconds": usec / 1e6, "mbit_per_sec": nbytes * 8 / usec,
            "usec_per_iter": usec / args.iters, "num_qp": nqp,
            "local": [_oob.jsonable(d) for d in mine],
            "remote": [_oob.jsonable(d) for d in remote]}))
    else:
        print(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = "
              f"{nbytes * 8 / usec:.2f} Mbit/sec")
        print(f"{args.iters} iters in {usec / 1e6:.2f} seconds = "
              f"{usec / args.iters:.2f} usec/iter", flush=True)
    return 0


# -- the mode check -----------------------------------------------------------
#
# The C tools' exchange carries no mode: an rc server and a ud client
# connect, and both wait out the whole --timeout for messages that never
# arrive.  After the client's "done" a server of ours sends a tag naming
# its mode; a client of ours that receives it answers with its own, and
# each side compares.  A C server reads "done" (which comes alone, as it
# wants it) and closes, sending no tag: the client sees EOF and sends
# none.  A C client closes after "done": the server sees EOF (or a reset,
# its tag arriving at a closed socket).  With the C tools, and older
# versions of this command, nothing is checked and nothing they read
# changes.

MODE_TAG = b"ibtool-pingpong-mode:"


def _mode_tag(mode: str) -> bytes:
    return MODE_TAG + mode.encode("ascii") + b"\0"


def _read_mode(conn: Any, step: Deadline) -> Optional[str]:
    """The mode the peer's tag names, or None when the peer sends none
    (the C tools, older versions of this command) and closes."""
    import socket
    data = b""
    while len(data) < 64 and not data.endswith(b"\0"):
        conn.settimeout(step.remaining())
        try:
            chunk = conn.recv(64 - len(data))
        except socket.timeout:
            raise step.error("waiting for the peer to close the "
                             "exchange") from None
        except ConnectionError:
            break               # a C server that did not read the tag
        if not chunk:
            break
        data += chunk
    if data.startswith(MODE_TAG) and data.endswith(b"\0"):
        return data[len(MODE_TAG):-1].decode("ascii", "replace")
    return None


def _send_mode(conn: Any, mode: str, step: Deadline) -> None:
    """Send our mode's tag (a C client has closed already: the error is
    ignored)."""
    conn.settimeout(step.remaining())
    try:
        conn.sendall(_mode_tag(mode))
    except OSError:
        pass


def _check_modes(mode: str, peer_mode: Optional[str], server: bool) -> None:
    if peer_mode is None or peer_mode == mode:
        return
    peer, me = ("client", "server") if server else ("server", "client")
    raise PeerError(f"the {peer} runs 'pingpong {peer_mode}' and this {me} "
                    f"'pingpong {mode}': they cannot talk (no message would "
                    f"ever arrive); start both sides with the same mode")


def _check_final(got: bytes, want: bytes) -> None:
    if got != want:
        diff = next(i for i in range(len(want)) if got[i] != want[i])
        raise ValidationError(
            f"data validation failed: the buffer differs from what was sent "
            f"at byte {diff} (page {diff // PAGE}): "
            f"{bytes(got[diff:diff + 8]).hex()} != "
            f"{want[diff:diff + 8].hex()}")


class _Loop:
    """The completion loop of the C tools, with the fast APIs: prepared
    SendBatch/RecvBatch and poll_into a WCArray."""

    def __init__(self, args: argparse.Namespace, ibv: Any, cq: Any, cc: Any,
                 qps: List[Any], batches: List[Any], target: Any,
                 recv_wr: Any, buf: bytearray, extra: int,
                 server: bool) -> None:
        self.args, self.ibv, self.cq, self.cc = args, ibv, cq, cc
        self.qps, self.batches, self.target = qps, batches, target
        self.buf, self.extra, self.server = buf, extra, server
        self.recv_wr = recv_wr
        self.refills: Dict[int, Any] = {}
        self.wcs = ibv.WCArray(max(16, len(qps) + args.rx_depth)
                               if len(qps) > 1 else 16)
        self.index = {qp.qp_num: i for i, qp in enumerate(qps)}
        self.first: Optional[bytes] = None

    def refill(self, n: int) -> None:
        b = self.refills.get(n)
        if b is None:
            b = self.refills[n] = self.ibv.RecvBatch([self.recv_wr] * n)
        self.target.post_recv(b)

    def run(self) -> float:
        if len(self.qps) == 1 and self.cc is None and not self.args.chk:
            return self.run_polling()
        return self.run_general()

    def run_polling(self) -> float:
        """The common case (one QP, polling, no -c), with as little Python
        per round trip as the protocol allows: one poll_into that spins in
        C until the completions this side waits for (its send and the
        peer's message) are both there, then one post."""
        args = self.args
        iters, rx_depth = args.iters, args.rx_depth
        poll, wcs, post = self.cq.poll_into, self.wcs, self.qps[0].post_send
        batch = self.batches[0]
        wr_id, first_error = wcs.wr_id, wcs.first_error
        timeout = args.timeout if args.timeout and args.timeout > 0 else None
        both = RECV_WRID | SEND_WRID
        scnt = rcnt = 0
        routs = rx_depth
        pending = RECV_WRID
        t0 = time.perf_counter()
        if not self.server:
            post(batch)
            pending = both
        while rcnt < iters or scnt < iters:
            # both outstanding: wait for both, unless no message is due
            n = poll(wcs, None, 2 if pending == both and rcnt < iters else 1,
                     timeout)
            if not n:
                raise self._stalled(scnt, rcnt)
            # Our send and the peer's message are in: the next message is
            # on the round trip's critical path, so post it first and do
            # the accounting after (it checks what the two were).
            early = n == 2 and pending == both and scnt + 1 < iters
            if early:
                post(batch)
            if first_error() is not None:
                wc = wcs[first_error()]
                raise self.ibv.WCError(wc, msg=f"completion for wr_id "
                                               f"{wc.wr_id} failed")
            for k in range(n):
                w = wr_id(k)
                if w == SEND_WRID:
                    scnt += 1
                elif w == RECV_WRID:
                    rcnt += 1
                    routs -= 1
                    if routs <= 1:
                        self.refill(rx_depth - routs)
                        routs = rx_depth
                else:
                    raise PeerError(f"completion for unknown wr_id {w}")
                pending &= ~w
            if early:
                if pending:
                    raise PeerError("two completions of one kind in a round "
                                    "trip: the peer broke the protocol")
                pending = both
            elif not pending and scnt < iters:
                post(batch)
                pending = both
        return time.perf_counter() - t0

    def run_general(self) -> float:
        args, ibv = self.args, self.ibv
        iters, rx_depth = args.iters, args.rx_depth
        nqp = len(self.qps)
        low = nqp if nqp > 1 else 1
        cq, wcs, qps, batches = self.cq, self.wcs, self.qps, self.batches
        multi = nqp > 1
        want_len = args.size + self.extra
        chk = args.chk
        pending = [RECV_WRID] * nqp
        scnt = rcnt = 0
        routs = rx_depth
        if not self.server:
            for i in range(nqp):
                qps[i].post_send(batches[i])
                pending[i] |= SEND_WRID
        timeout = args.timeout if args.timeout and args.timeout > 0 else None
        t0 = time.perf_counter()
        while rcnt < iters or scnt < iters:
            if self.cc is not None:
                got = self.cc.get_cq_event(timeout=timeout)
                if got is None:
                    raise self._stalled(scnt, rcnt)
                if cq.unacked_events >= 64:
                    cq.ack_events()
                cq.req_notify_cq()
                n = cq.poll_into(wcs)
            else:
                # spins in C until a completion is there (or the timeout)
                n = cq.poll_into(wcs, None, 1, timeout)
                if not n:
                    raise self._stalled(scnt, rcnt)
            while n:
                bad = wcs.first_error()
                if bad is not None:
                    wc = wcs[bad]
                    raise ibv.WCError(wc, msg=f"completion for wr_id "
                                              f"{wc.wr_id} failed")
                for k in range(n):
                    wr_id = wcs.wr_id(k)
                    i = self.index[wcs[k].qp_num] if multi else 0
                    if wr_id == SEND_WRID:
                        scnt += 1
                    elif wr_id == RECV_WRID:
                        if chk:
                            self._check(wcs.byte_len(k), want_len)
                        routs -= 1
                        if routs <= low:
                            self.refill(rx_depth - routs)
                            routs = rx_depth
                        rcnt += 1
                    else:
                        raise PeerError(f"completion for unknown wr_id "
                                        f"{wr_id}")
                    pending[i] &= ~wr_id
                    if scnt < iters and not pending[i]:
                        qps[i].post_send(batches[i])
                        pending[i] = RECV_WRID | SEND_WRID
                n = cq.poll_into(wcs) if self.cc is not None else 0
        return time.perf_counter() - t0

    def _check(self, byte_len: int, want_len: int) -> None:
        if byte_len != want_len:
            raise ValidationError(f"data validation failed: received "
                                  f"{byte_len} bytes, expected {want_len} "
                                  f"(does the peer use the same -s?)")
        if self.server:
            data = bytes(self.buf[self.extra:])
            if self.first is None:
                self.first = data
            elif data != self.first:
                want = self.first
                diff = next(i for i in range(len(want))
                            if data[i] != want[i])
                raise ValidationError(
                    f"data validation failed: a message differs from the "
                    f"first one at byte {diff}: {data[diff:diff + 8].hex()} "
                    f"!= {want[diff:diff + 8].hex()}")

    def _stalled(self, scnt: int, rcnt: int) -> OOBTimeout:
        return OOBTimeout(f"timed out: no completion for {self.args.timeout:g}"
                          f" s (sent {scnt}, received {rcnt} of "
                          f"{self.args.iters}); is the peer gone?")
