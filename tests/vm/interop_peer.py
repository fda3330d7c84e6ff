"""Our side of libibverbs' ``ibv_rc_pingpong`` / ``ibv_ud_pingpong``.

It speaks their out-of-band exchange over TCP: each side sends one
fixed-size, NUL-terminated text message ``"LLLL:QQQQQQ:PPPPPP:GGGG...G"`` (LID,
QPN and PSN in hex, the GID as 32 hex digits in wire order), 52 bytes in
all; the client sends first, the server connects its QP before answering,
and the client ends with a 5-byte ``"done\\0"``.  Then both ping-pong
*iters* messages of *size* bytes: the client sends first, each side sends
its next message once its previous send completed and a message arrived.

Because the C tools send from the buffer they receive into, every message
they send is the one they received last: we send a distinct pattern each
time and check that it comes back (the C client's first message is its
initial buffer: 0x7b bytes, with a 0 at each page start when run with -c).

Usable as a module (:func:`run_peer`) or a script::

    python tests/vm/interop_peer.py rc|ud [--server | --connect HOST]
        [-p PORT] [-d DEV] [-g GIDX] [-s SIZE] [-n ITERS] [-r RX_DEPTH]
"""
from __future__ import annotations

import argparse
import random
import socket
import sys
import time

import rdma
import rdma.ibverbs as ibv

MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1
DONE = b"done\0"
UD_QKEY = 0x11111111
GRH = 40
PAGE = 4096

__all__ = ["run_peer", "encode_dest", "decode_dest", "initial_c_buffer",
           "PeerError"]


class PeerError(Exception):
    """The exchange or the ping-pong went wrong (message says how)."""


def encode_dest(lid: int, qpn: int, psn: int, gid) -> bytes:
    """The 52-byte message the pingpong tools exchange."""
    text = f"{lid:04x}:{qpn:06x}:{psn:06x}:{bytes(gid).hex()}".encode()
    assert len(text) == MSG_LEN - 1
    return text + b"\0"


def decode_dest(msg: bytes) -> tuple[int, int, int, bytes]:
    """(lid, qpn, psn, gid bytes) from a pingpong message."""
    text = msg.split(b"\0", 1)[0].decode("ascii")
    lid, qpn, psn, gid = text.split(":")
    g = bytes.fromhex(gid)
    if len(g) != 16:
        raise PeerError(f"bad GID in {text!r}")
    return int(lid, 16), int(qpn, 16), int(psn, 16), g


def initial_c_buffer(size: int, validate: bool) -> bytes:
    """What a C pingpong client sends first (its buffer at start)."""
    b = bytearray(b"\x7b" * size)
    if validate:
        for i in range(0, size, PAGE):
            b[i] = 0
    return bytes(b)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise PeerError(f"peer closed the exchange after {len(data)} of "
                            f"{n} bytes")
        data += chunk
    return data


def _our_pattern(i: int, size: int) -> bytes:
    """Our i-th message: 64 pseudo-random bytes repeated (distinct per i),
    with a 0 at each page start so that a C server run with -c finds the
    byte it checks."""
    r = random.Random(1000 + i)
    block = bytes(r.randrange(1, 256) for _ in range(64))
    b = bytearray((block * (size // 64 + 1))[:size])
    for j in range(0, size, PAGE):
        b[j] = 0
    return bytes(b)


def run_peer(kind: str, *, server: bool, host: str = "127.0.0.1",
             port: int = 18515, device: str = "rxe0", gid_index: int = 1,
             size: int = 4096, iters: int = 20, rx_depth: int = 50,
             ib_port: int = 1, mtu: int = ibv.IBV_MTU_1024,
             listen_sock: socket.socket | None = None, validate: bool = False,
             timeout: float = 60.0, log=None) -> dict:
    """Run one ping-pong against a C pingpong tool; return statistics.

    *kind* is ``"rc"`` or ``"ud"``.  As a server, *listen_sock* (already
    listening) may be given so the caller knows the port is ready before it
    starts the C client.  Raises :class:`PeerError` on any mismatch.
    """
    if kind not in ("rc", "ud"):
        raise ValueError("kind must be 'rc' or 'ud'")
    ud = kind == "ud"
    deadline = time.monotonic() + timeout
    say = log or (lambda *a: None)
    end_port = rdma.get_end_port(device if "/" in device
                                 else f"{device}/{ib_port}")
    with rdma.get_verbs(end_port) as ctx:
        pd = ctx.pd()
        cq = pd.cq(rx_depth + 1)
        qp = pd.qp(ibv.IBV_QPT_UD if ud else ibv.IBV_QPT_RC, 1, cq, rx_depth,
                   cq)
        extra = GRH if ud else 0
        buf = bytearray(size + extra)
        mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE)
        recv_wr = ibv.recv_wr(wr_id=2, sg_list=mr.sge(length=size + extra))
        if ud:
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                                  port_num=ib_port, qkey=UD_QKEY))
        else:
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                                  port_num=ib_port, qp_access_flags=0))
        qp.post_recv([recv_wr] * rx_depth)
        routs = rx_depth
        gid = end_port.gids[gid_index]
        my_psn = random.getrandbits(24)
        my_msg = encode_dest(end_port.lid or 0, qp.qp_num, my_psn, gid)

        def connect_qp(rem):
            lid, qpn, psn, rgid = rem
            ah_attr = ibv.ah_attr(dlid=lid, sl=0, src_path_bits=0,
                                  port_num=ib_port,
                                  is_global=0)
            if any(rgid[8:]):           # the C tools test the interface id
                ah_attr.is_global = 1
                ah_attr.grh = ibv.global_route(dgid=rgid, sgid_index=gid_index,
                                               hop_limit=64 if ud else 1)
            if ud:
                qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR))
                qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=my_psn))
                return pd.ah(ah_attr)
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR, path_mtu=mtu,
                                  dest_qp_num=qpn, rq_psn=psn,
                                  max_dest_rd_atomic=1, min_rnr_timer=12,
                                  ah_attr=ah_attr))
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, timeout=14,
                                  retry_cnt=7, rnr_retry=7, sq_psn=my_psn,
                                  max_rd_atomic=1))
            return None

        # --- out-of-band exchange -------------------------------------------
        if server:
            own = listen_sock is None
            if own:
                listen_sock = socket.create_server(("", port),
                                                   reuse_port=False)
            listen_sock.settimeout(max(1.0, deadline - time.monotonic()))
            conn, _ = listen_sock.accept()
            if own:
                listen_sock.close()
            with conn:
                conn.settimeout(max(1.0, deadline - time.monotonic()))
                rem = decode_dest(_recv_exact(conn, MSG_LEN))
                ah = connect_qp(rem)
                conn.sendall(my_msg)
                if _recv_exact(conn, len(DONE)) != DONE:
                    raise PeerError("no 'done' from the client")
        else:
            with socket.create_connection((host, port), timeout=10) as conn:
                conn.settimeout(max(1.0, deadline - time.monotonic()))
                conn.sendall(my_msg)
                rem = decode_dest(_recv_exact(conn, MSG_LEN))
                conn.sendall(DONE)
            ah = connect_qp(rem)
        say(f"local QPN {qp.qp_num:#x} PSN {my_psn:#x}; remote QPN "
            f"{rem[1]:#x} "
            f"PSN {rem[2]:#x} GID {rem[3].hex()}")

        # --- ping-pong -----------------------------------------------------
        send_kw = {}
        if ud:
            send_kw = dict(ah=ah, remote_qpn=rem[1], remote_qkey=UD_QKEY)
        send_sge = mr.sge(length=size, off=extra)

        def post_send(i):
            buf[extra:extra + size] = _our_pattern(i, size)
            qp.post_send(ibv.send_wr(wr_id=1, sg_list=send_sge,
                                     opcode=ibv.IBV_WR_SEND,
                                     send_flags=ibv.IBV_SEND_SIGNALED,
                                     **send_kw))

        received: list[bytes] = []
        scnt = rcnt = 0
        pending = 2
        t0 = time.monotonic()
        if not server:
            post_send(0)
            pending |= 1
        while scnt < iters or rcnt < iters:
            if time.monotonic() > deadline:
                raise PeerError(f"timed out: sent {scnt}, received {rcnt} of "
                                f"{iters}")
            for wc in cq.poll():
                if wc.status != ibv.IBV_WC_SUCCESS:
                    raise PeerError(f"{ibv.WCError(wc, qp=qp)} (wr_id "
                                    f"{wc.wr_id})")
                if wc.wr_id == 1:
                    scnt += 1
                elif wc.wr_id == 2:
                    if wc.byte_len != size + extra:
                        raise PeerError(f"received {wc.byte_len} bytes, "
                                        f"expected {size + extra}")
                    received.append(bytes(buf[extra:extra + size]))
                    rcnt += 1
                    routs -= 1
                    if routs <= 1:
                        qp.post_recv([recv_wr] * (rx_depth - routs))
                        routs = rx_depth
                else:
                    raise PeerError(f"completion for unknown wr_id {wc.wr_id}")
                pending &= ~wc.wr_id
                if scnt < iters and not pending:
                    post_send(scnt)
                    pending = 3
        elapsed = time.monotonic() - t0

        # --- check the echoes ----------------------------------------------
        # the server's k-th message echoes our (k-1)-th (client: k-th); a C
        # client's first message is its initial buffer
        for k, got in enumerate(received):
            if server:
                want = (initial_c_buffer(size, validate) if k == 0
                        else _our_pattern(k - 1, size))
            else:
                want = _our_pattern(k, size)
            if got != want:
                diff = next(i for i in range(size) if got[i] != want[i])
                raise PeerError(f"message {k}: first difference at byte "
                                f"{diff}: "
                                f"{got[diff:diff + 8].hex()} != "
                                f"{want[diff:diff + 8].hex()}")
        if ah is not None:
            ah.close()
        qp.close()
        mr.close()
        cq.close()
        pd.close()
    return {"iters": iters, "size": size, "seconds": elapsed,
            "usec_per_iter": elapsed * 1e6 / iters, "remote": rem}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["rc", "ud"])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--server", action="store_true")
    g.add_argument("--connect", metavar="HOST")
    ap.add_argument("-p", "--port", type=int, default=18515)
    ap.add_argument("-d", "--device", default="rxe0")
    ap.add_argument("-i", "--ib-port", type=int, default=1)
    ap.add_argument("-g", "--gid-index", type=int, default=1)
    ap.add_argument("-s", "--size", type=int, default=None)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-r", "--rx-depth", type=int, default=50)
    ap.add_argument("-c", "--chk", action="store_true",
                    help="the C client was started with -c")
    a = ap.parse_args(argv)
    size = a.size or (4096 if a.kind == "rc" else 1024)
    res = run_peer(a.kind, server=a.server, host=a.connect or "127.0.0.1",
                   port=a.port, device=a.device, gid_index=a.gid_index,
                   size=size, iters=a.iters, rx_depth=a.rx_depth,
                   ib_port=a.ib_port, validate=a.chk,
                   log=lambda m: print(m, file=sys.stderr))
    print(f"{res['iters']} iters in {res['seconds']:.2f} seconds = "
          f"{res['usec_per_iter']:.2f} usec/iter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
