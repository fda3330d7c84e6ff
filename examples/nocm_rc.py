#!/usr/bin/env python3
"""Connect two RC QPs without a CM, over a TCP side channel (python-rdma
"No CM RC QP Setup").

Side A (``--listen PORT``) and side B (``--connect HOST:PORT``) exchange
pickled :class:`rdma.path.IBPath` objects, exactly as the python-rdma
documentation describes:

* A fills the QP side of a path (``fill_path``: its QPN, a random initial
  PSN, its responder resources), reverses it and sends it to B;
* B sets ``end_port`` on what it received, fills its own QP side, resolves
  the path (``resolve_path``: GIDs/MTU on RoCE and the software fabric, the
  SA on InfiniBand) and sends it back; A reverses it again;
* both move their QP to INIT, RTR and RTS, then synchronize over the socket
  so neither sends before the other can receive.

Then A RDMA-writes into B's buffer (its address and rkey travelled with the
path) and SENDs a message; B checks both and replies with a SEND.

Run: both sides yourself (two shells or two hosts):
      python examples/nocm_rc.py --listen 7471
      python examples/nocm_rc.py --connect HOST:7471
or let the script start both as two processes on this machine:
      python examples/nocm_rc.py --loopback [--device D] [--provider P]
Exit status 0 when both sides saw the data they expected.

pickle runs code chosen by whoever wrote the bytes: only unpickle paths
from a peer you trust (``repr(path)`` and ``rdma.path.from_string`` are a
safe text alternative).
"""
import os
import pickle
import socket
import struct
import subprocess
import sys
import time

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools

import _example_util as util

OFFSET = 100            # where A writes into B's buffer


def send_obj(s, obj):
    data = pickle.dumps(obj)
    s.sendall(struct.pack("!I", len(data)) + data)


def recv_obj(s):
    def exact(n):
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                raise EOFError("the other side closed the connection")
            out += chunk
        return out
    return pickle.loads(exact(struct.unpack("!I", exact(4))[0]))


def side_channel(args):
    """The TCP connection to the other side."""
    if args.listen is not None:
        with socket.create_server(("", args.listen)) as ls:
            print(f"listening on port {ls.getsockname()[1]}", flush=True)
            ls.settimeout(args.timeout)
            s, peer = ls.accept()
        print("connected from", peer[0], flush=True)
    else:
        host, _, port = args.connect.rpartition(":")
        deadline = time.monotonic() + args.timeout
        while True:
            try:
                s = socket.create_connection((host or "127.0.0.1", int(port)),
                                             timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    s.settimeout(args.timeout)
    return s


def run_side(args):
    side_a = args.listen is not None
    name = "A" if side_a else "B"
    end_port = util.get_end_port(args)
    s = side_channel(args)
    with s, rdma.get_verbs(end_port) as ctx:
        pd = ctx.pd()
        cq = ctx.cq(32)
        qp = pd.qp(ibv.IBV_QPT_RC, 8, cq, 8, cq)
        buf = bytearray(1024)
        mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE |
                   ibv.IBV_ACCESS_REMOTE_WRITE)
        if side_a:
            gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
            path = rdma.path.IBPath(end_port, SGID=gid)
            rdma.path.fill_path(qp, path)
            path.reverse(for_reply=False)
            send_obj(s, (path, mr.addr, mr.rkey))
            path, raddr, rkey = recv_obj(s)
            path.reverse(for_reply=False)
            path.end_port = end_port
        else:
            path, raddr, rkey = recv_obj(s)
            path.end_port = end_port
            rdma.path.fill_path(qp, path)
            if args.gid_index is not None:
                path.SGID_index = args.gid_index
            rdma.path.resolve_path(None, path)
            send_obj(s, (path, mr.addr, mr.rkey))
        print(f"{name}: QP {qp.qp_num:#x} -> {path}", flush=True)

        qp.modify_to_init(path, ibv.IBV_ACCESS_REMOTE_WRITE)
        qp.modify_to_rtr(path)
        qp.modify_to_rts(path)
        pool = rdma.vtools.BufferPool(pd, count=8, size=64)
        pool.post_recvs(qp, 4)
        # Synchronize the transition to RTS (receives are posted now).
        if side_a:
            send_obj(s, True)
            recv_obj(s)
        else:
            recv_obj(s)
            send_obj(s, True)

        poller = rdma.vtools.CQPoller(cq)
        if side_a:
            text = b"written by A with RDMA WRITE"
            buf[:len(text)] = text
            qp.post_send(ibv.send_wr(wr_id=pool.NO_WR_ID,
                                     opcode=ibv.IBV_WR_RDMA_WRITE,
                                     send_flags=ibv.IBV_SEND_SIGNALED,
                                     sg_list=mr.sge(len(text)),
                                     remote_addr=raddr + OFFSET, rkey=rkey))
            idx = pool.pop()
            msg = b"hello B, look at offset %d" % OFFSET
            pool.copy_to(msg, idx)
            # RC delivers in order: B sees the write before this message.
            qp.post_send(pool.make_send_wr(idx, len(msg)))
            got = []
            for wc in poller.iterwc(count=3, timeout=args.timeout):
                pool.finish_wcs(qp, wc)          # raises WCError on errors
                if wc.opcode == ibv.IBV_WC_RECV:
                    got.append(bytes(pool.copy_from(wc.wr_id, 0,
                                                    wc.byte_len)))
            util.check(not poller.timedout, "A: timed out")
            print("A: got", got, flush=True)
            util.check(got == [b"ack from B"], f"A: unexpected {got!r}")
        else:
            msg = None
            for wc in poller.iterwc(count=1, timeout=args.timeout):
                pool.finish_wcs(qp, wc)
                msg = bytes(pool.copy_from(wc.wr_id, 0, wc.byte_len))
            util.check(not poller.timedout, "B: timed out")
            written = bytes(buf[OFFSET:OFFSET + 28])
            print(f"B: got {msg!r}; buffer at {OFFSET}: {written!r}",
                  flush=True)
            util.check(msg == b"hello B, look at offset %d" % OFFSET,
                       f"B: unexpected message {msg!r}")
            util.check(written == b"written by A with RDMA WRITE",
                       f"B: the RDMA WRITE did not land: {written!r}")
            idx = pool.pop()
            pool.copy_to(b"ack from B", idx)
            qp.post_send(pool.make_send_wr(idx, 10))
            for wc in poller.iterwc(count=1, timeout=args.timeout):
                pool.finish_wcs(qp, wc)
            util.check(not poller.timedout, "B: timed out")
            # Wait until A is done before tearing the QP down.
            recv_obj(s)
        if side_a:
            send_obj(s, "done")
        pool.close()
    print(f"{name}: OK", flush=True)
    return 0


def run_loopback(args):
    """Start side A, read its port, start side B; both must succeed."""
    common = [f"--timeout={args.timeout}"]
    for opt in ("device", "provider", "gid_index"):
        v = getattr(args, opt)
        if v is not None:
            common.append(f"--{opt.replace('_', '-')}={v}")
    me = os.path.abspath(__file__)
    a = subprocess.Popen([sys.executable, me, "--listen", "0"] + common,
                         stdout=subprocess.PIPE, text=True)
    b = None
    try:
        line = a.stdout.readline()
        if not line.startswith("listening on port "):
            raise RuntimeError(f"side A did not start: {line!r}")
        port = int(line.split()[-1])
        b = subprocess.Popen([sys.executable, me, "--connect",
                              f"127.0.0.1:{port}"] + common)
        rc_b = b.wait()             # --timeout bounds us and both sides
        out_a = a.stdout.read()
        rc_a = a.wait()
        sys.stdout.write(out_a)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    util.check(rc_a == 0 and rc_b == 0,
               f"side A exited with {rc_a}, side B with {rc_b}")
    print("OK")
    return 0


def main(args):
    modes = [args.listen is not None, args.connect is not None, args.loopback]
    if sum(modes) != 1:
        main.parser.error("give exactly one of --listen, --connect, "
                          "--loopback")
    if args.loopback:
        return run_loopback(args)
    return run_side(args)


main.parser = util.parser(__doc__)
main.parser.add_argument("--listen", type=int, metavar="PORT",
                         help="be side A: wait for side B on this TCP port "
                              "(0: any free port)")
main.parser.add_argument("--connect", metavar="HOST:PORT",
                         help="be side B: connect to side A")
main.parser.add_argument("--loopback", action="store_true",
                         help="run side A and side B as two processes here")

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
