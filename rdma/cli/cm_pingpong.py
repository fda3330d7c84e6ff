"""``ibtool cm-pingpong``: ping over a connection made by the RDMA
connection manager, on the wire compatible with librdmacm's ``rping``.

::

    ibtool cm-pingpong -a 192.0.2.1 -C 10          # server (rping -s)
    ibtool cm-pingpong 192.0.2.1 -C 10 -V          # client (rping -c)

Either side may be ``rping``.  The exchange, per ping: the client sends
a 16-byte advert (buffer address, rkey, size; big-endian) of a buffer
holding the ping text; the server RDMA READs it and answers with a "go
ahead" send; the client advertises a second buffer, the server RDMA
WRITEs what it read into it and answers again.  ``-V`` (client) checks
that the second buffer came back equal to the first.  Exit status: 0
ok, 1 RDMA failure (a rejected or lost connection), 2 bad usage, 3 data
validation failed.
"""
from __future__ import annotations

import argparse
import struct
import time
from typing import Any, List

from rdma.cli._common import Subparsers

__all__ = ["add_parser", "cm_pingpong", "INFO"]

#: struct rping_rdma_info: buf (be64), rkey (be32), size (be32).
INFO = struct.Struct(">QII")
_RW = 1 | 2 | 4          # IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``cm-pingpong`` to ``ibtool``."""
    p = subparsers.add_parser(
        name, help=help,
        description="Connect by IP address and port with the RDMA "
                    "connection manager and ping with RDMA READ and WRITE, "
                    "exactly as librdmacm's rping does; either side may be "
                    "rping.  Without SERVER, wait for a client.",
        epilog="exit status: 0 ok, 1 RDMA/runtime failure, 2 bad usage, "
               "3 data validation failed (-V).  Example: ibtool "
               "cm-pingpong -a 127.0.0.1 & ibtool cm-pingpong 127.0.0.1")
    p.add_argument("server", nargs="?", default=None,
                   help="connect to this address (default: be the server)")
    p.add_argument("-a", "--addr", default="",
                   help="server: the address to listen on (default: all)")
    p.add_argument("-p", "--port", type=int, default=7174,
                   help="port (default 7174, rping's)")
    p.add_argument("-C", "--count", type=_positive, default=10,
                   help="pings (default 10)")
    p.add_argument("-S", "--size", type=_size, default=64,
                   help="ping data size, 16..65536 (default 64)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each ping's data")
    p.add_argument("-V", "--validate", action="store_true",
                   help="client: check the data that came back")
    p.add_argument("--provider", default=None,
                   help="provider: verbs, ucx or auto (default: "
                        "$RDMA_PROVIDER, else auto)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for each step (default 30)")
    p.add_argument("--wait", type=float, default=0.0,
                   help="client: retry for this many seconds while the "
                        "server does not listen yet (REJECTED)")
    return p


def _positive(s: str) -> int:
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{s}: must be positive")
    return v


def _size(s: str) -> int:
    v = int(s)
    if not 16 <= v <= 65536:
        raise argparse.ArgumentTypeError(f"{s}: must be 16..65536")
    return v


def _wait(cq: Any, n: int, timeout: float, what: str) -> List[Any]:
    import rdma
    import rdma.ibverbs as ibv
    got: List[Any] = []
    end = time.monotonic() + timeout
    while len(got) < n:
        got += cq.poll(n - len(got))
        if len(got) < n and time.monotonic() > end:
            raise rdma.RDMAError(f"{what}: no completion within {timeout} s")
    for wc in got:
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc)
    return got


def _post(qp: Any, mr: Any, n: int, **kw: Any) -> None:
    import rdma.ibverbs as ibv
    qp.post_send(ibv.send_wr(wr_id=1, opcode=kw.pop("opcode", ibv.IBV_WR_SEND),
                             sg_list=mr.sge(n),
                             send_flags=ibv.IBV_SEND_SIGNALED, **kw))


def _recv(qp: Any, mr: Any) -> None:
    import rdma.ibverbs as ibv
    qp.post_recv(ibv.recv_wr(wr_id=0, sg_list=mr.sge()))


def _connect(args: argparse.Namespace) -> Any:
    """cm.connect, retried while REJECTED for up to --wait seconds."""
    import rdma.cm as cm
    end = time.monotonic() + args.wait
    while True:
        try:
            return cm.connect(args.server, args.port, provider=args.provider,
                              timeout=args.timeout)
        except cm.CMEventError as e:
            if (e.event.event != cm.CMEventType.REJECTED or
                    time.monotonic() >= end):
                raise
            time.sleep(0.1)


def _client(args: argparse.Namespace) -> int:
    size = args.size
    with _connect(args) as conn:
        pd, qp, cq = conn.pd, conn.qp, conn.cq
        start = pd.mr(bytearray(size), _RW)
        back = pd.mr(bytearray(size), _RW)
        adv = pd.mr(bytearray(INFO.size), _RW)
        rcv = pd.mr(bytearray(INFO.size), _RW)
        t0 = time.monotonic()
        for i in range(args.count):
            text = (b"rdma-ping-%d: " % i).ljust(size - 1, b"x")[:size - 1]
            start.buf[:size] = text + b"\0"
            for mr in (start, back):
                _recv(qp, rcv)
                adv.buf[:] = INFO.pack(mr.addr, mr.rkey, size)
                _post(qp, adv, INFO.size)
                _wait(cq, 2, args.timeout, "ping")
            if args.verbose:
                print(f"ping data: {text.decode(errors='replace')}")
            if args.validate and bytes(back.buf) != bytes(start.buf):
                print(f"ibtool cm-pingpong: data mismatch in ping {i}")
                return 3
        dt = time.monotonic() - t0
    print(f"{args.count} pings of {size} bytes in {dt:.3f} s: "
          f"{dt / args.count * 1e6:.1f} usec/ping")
    return 0


def _server(args: argparse.Namespace) -> int:
    import rdma.cm as cm
    import rdma.ibverbs as ibv
    with cm.listen(args.port, args.addr, provider=args.provider) as lst:
        print(f"listening on {args.addr or '*'}:{args.port}", flush=True)
        req = lst.get_request(timeout=None)
        cid = req.id
        assert cid is not None
        cid.create_qp(ibv.IBV_QPT_RC)
        assert cid.pd is not None and cid.qp is not None
        rcv = cid.pd.mr(bytearray(INFO.size), _RW)
        _recv(cid.qp, rcv)
        cid.accept_qp(timeout=args.timeout)
        with cm.Connection(cid, req.private_data, False) as conn:
            buf = conn.pd.mr(bytearray(args.size), _RW)
            go = conn.pd.mr(bytearray(INFO.size), _RW)
            pings = 0
            while pings < args.count:
                for op in (ibv.IBV_WR_RDMA_READ, ibv.IBV_WR_RDMA_WRITE):
                    _wait(conn.cq, 1, args.timeout, "advert")
                    raddr, rkey, rsize = INFO.unpack(bytes(rcv.buf))
                    _recv(conn.qp, rcv)
                    n = min(rsize, args.size)
                    _post(conn.qp, buf, n, opcode=op, remote_addr=raddr,
                          rkey=rkey)
                    _wait(conn.cq, 1, args.timeout, "rdma")
                    if op == ibv.IBV_WR_RDMA_READ and args.verbose:
                        text = bytes(buf.buf[:n]).split(b"\0")[0]
                        print("server ping data: "
                              f"{text.decode(errors='replace')}")
                    _post(conn.qp, go, INFO.size)
                    _wait(conn.cq, 1, args.timeout, "go ahead")
                pings += 1
            lst.channel.wait_event(conn.id, cm.CMEventType.DISCONNECTED,
                                   timeout=args.timeout)
    print(f"{pings} pings served")
    return 0


def cm_pingpong(args: argparse.Namespace) -> int:
    """Run ``ibtool cm-pingpong``."""
    return _client(args) if args.server else _server(args)
