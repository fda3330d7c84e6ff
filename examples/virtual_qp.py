#!/usr/bin/env python3
"""Stripe messages over several QPs with a virtual QP (IBVerbX's
``IbvVirtualQp`` usage overview, in rdma).

A :class:`rdma.ibverbs.VirtualQP` owns ``--qps`` RC data QPs; each message
posted to it is cut into fragments of at most ``--fragment`` bytes, spread
over the data QPs, and reported as ONE completion on its
:class:`rdma.ibverbs.VirtualCQ`.  The flow is that of one QP:

1. create: ``cq = pd.virtual_cq()``, ``vqp = pd.virtual_qp(4, cq,
   mode="dqplb")`` (or ``"spray"``);
2. connect: exchange :func:`rdma.virtual.local_info` records (and the MR's
   address and rkey) over a TCP side channel, then
   :func:`rdma.virtual.connect` brings every data QP to RTS;
3. post: the receiver (side B) posts one receive WR per
   ``RDMA_WRITE_WITH_IMM`` message with ``vqp.post_recv``, the sender
   (side A) posts its send WRs with ``vqp.post_send``;
4. poll: both poll their virtual CQ until every virtual completion came
   (``cq.poll(1)`` in a loop, as the seed's ``pollCq(1)``).

A writes ``--messages`` messages of ``--size`` bytes into B's buffer;
B checks, for each completion, its ``imm_data``, ``byte_len`` and that
the whole message is in its memory when the completion is seen; A checks
that its completions came in posting order with its ``wr_id``\\ s.

Run: both sides yourself (two shells or two hosts):
      python examples/virtual_qp.py --listen 7472 [--mode spray]
      python examples/virtual_qp.py --connect HOST:7472 [--mode spray]
or let the script start both as two processes on this machine:
      python examples/virtual_qp.py --loopback [--device D]
          [--peer-device D2] [--mode dqplb|spray] [--qps N]
(``--peer-device rxe2 --device rxe1``: the test VM's two-host pair).
Exit status 0 when both sides saw every message land and complete once,
in order; 1 otherwise, 124 after --timeout.
"""
import json
import os
import socket
import subprocess
import sys
import time

import rdma
import rdma.ibverbs as ibv
import rdma.virtual

import _example_util as util

REMOTE = ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE


def send_line(s, obj):
    s.sendall(json.dumps(obj).encode() + b"\n")


_pending = bytearray()       # what came after the last line read


def recv_line(s):
    """The next JSON line from the other side."""
    while b"\n" not in _pending:
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("the other side closed the connection")
        _pending.extend(chunk)
    end = _pending.index(b"\n")
    line = bytes(_pending[:end])
    del _pending[:end + 1]
    return json.loads(line)


def side_channel(args):
    """The TCP connection to the other side."""
    if args.listen is not None:
        with socket.create_server(("", args.listen)) as ls:
            print(f"listening on port {ls.getsockname()[1]}", flush=True)
            ls.settimeout(args.timeout)
            s, _ = ls.accept()
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


def pattern(i, n):
    """Message i's bytes (never all zero)."""
    return (bytes(range(1, 252)) * (n // 251 + 2))[i % 251:i % 251 + n]


def poll_until(vcq, n, timeout):
    """Poll the virtual CQ until n virtual completions came (the seed's
    loop); return them."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        got += vcq.poll(1)
        util.check(time.monotonic() < deadline,
                   f"timed out with {len(got)} of {n} completions")
    return got


def sender(args, vqp, vcq, mr, peer):
    """Side A: post every message, then poll for one completion each."""
    n, size = args.messages, args.size
    for i in range(n):
        mr.buf[i * size:(i + 1) * size] = pattern(i, size)
    wrs = [ibv.send_wr(wr_id=100 + i,
                       opcode=ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                       imm_data=0x1000 + i,
                       send_flags=ibv.IBV_SEND_SIGNALED,
                       sg_list=mr.sge(size, i * size),
                       remote_addr=peer["mr"]["addr"] + i * size,
                       rkey=peer["mr"]["rkey"]) for i in range(n)]
    vqp.post_send(wrs)
    wcs = poll_until(vcq, n, args.timeout)
    for i, wc in enumerate(wcs):
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc)
        util.check(wc.wr_id == 100 + i, f"A: completion {i} has wr_id "
                   f"{wc.wr_id}, expected {100 + i} (posting order)")
    print(f"A: {n} virtual completions in posting order", flush=True)


def receiver(args, vqp, vcq, mr):
    """Side B: one receive WR per message; each completion's message must
    be in memory when it is seen."""
    for i in range(args.messages):
        vqp.post_recv(ibv.recv_wr(wr_id=200 + i))
    return lambda: check_received(args, vcq, mr)


def check_received(args, vcq, mr):
    n, size = args.messages, args.size
    deadline = time.monotonic() + args.timeout
    for i in range(n):
        wc, = poll_until(vcq, 1, deadline - time.monotonic())
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc)
        util.check(wc.opcode == ibv.IBV_WC_RECV_RDMA_WITH_IMM,
                   f"B: opcode {wc.opcode}")
        util.check((wc.wr_id, wc.imm_data, wc.byte_len) ==
                   (200 + i, 0x1000 + i, size),
                   f"B: completion {i}: wr_id {wc.wr_id}, imm "
                   f"{wc.imm_data:#x}, byte_len {wc.byte_len}")
        got = bytes(mr.buf[i * size:(i + 1) * size])
        util.check(got == pattern(i, size),
                   f"B: message {i} is not all there at its completion")
    print(f"B: {n} messages of {size} bytes, each whole at its "
          f"completion", flush=True)


def run_side(args):
    side_a = args.listen is not None
    name = "A" if side_a else "B"
    end_port = util.get_end_port(args)
    gid_index = (util.pick_gid_index(end_port, args.gid_index)
                 if end_port.link_layer == "Ethernet" else -1)
    s = side_channel(args)
    with s, rdma.get_verbs(end_port) as ctx:
        # 1. create
        pd = ctx.pd()
        vcq = pd.virtual_cq()
        vqp = pd.virtual_qp(args.qps, vcq, mode=args.mode,
                            fragment=args.fragment)
        mr = pd.alloc_mr(args.messages * args.size, REMOTE)
        # 2. connect: one record each way, then every data QP to RTS
        mine = rdma.virtual.local_info(vqp, end_port, gid_index)
        send_line(s, dict(mine, mr={"addr": mr.addr, "rkey": mr.rkey}))
        peer = recv_line(s)
        rdma.virtual.connect(vqp, end_port, mine, peer)
        print(f"{name}: {vqp.mode} VirtualQP, data QPs "
              f"{[hex(q) for q in vqp.qp_nums]} -> "
              f"{[hex(q) for q in peer['qpns']]}", flush=True)
        # 3. post (B's receives first), 4. poll
        if side_a:
            recv_line(s)                    # B's receives are posted
            sender(args, vqp, vcq, mr, peer)
            recv_line(s)                    # B saw everything
        else:
            check = receiver(args, vqp, vcq, mr)
            send_line(s, "ready")
            check()
            send_line(s, "done")
        mr.close()
    print(f"{name}: OK", flush=True)
    return 0


def run_loopback(args):
    """Start side A, read its port, start side B; both must succeed."""
    common = [f"--timeout={args.timeout}", f"--mode={args.mode}",
              f"--qps={args.qps}", f"--fragment={args.fragment}",
              f"--size={args.size}", f"--messages={args.messages}"]
    for opt in ("provider", "gid_index"):
        v = getattr(args, opt)
        if v is not None:
            common.append(f"--{opt.replace('_', '-')}={v}")
    dev_a = [f"--device={args.device}"] if args.device else []
    dev_b = ([f"--device={args.peer_device or args.device}"]
             if args.peer_device or args.device else [])
    me = os.path.abspath(__file__)
    a = subprocess.Popen([sys.executable, me, "--listen", "0"] + common +
                         dev_a, stdout=subprocess.PIPE, text=True)
    b = None
    try:
        line = a.stdout.readline()
        if not line.startswith("listening on port "):
            raise RuntimeError(f"side A did not start: {line!r}")
        port = int(line.split()[-1])
        b = subprocess.Popen([sys.executable, me, "--connect",
                              f"127.0.0.1:{port}"] + common + dev_b)
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
                         help="be side A (the sender): wait for side B on "
                              "this TCP port (0: any free port)")
main.parser.add_argument("--connect", metavar="HOST:PORT",
                         help="be side B (the receiver): connect to side A")
main.parser.add_argument("--loopback", action="store_true",
                         help="run side A and side B as two processes here")
main.parser.add_argument("--peer-device", default=None,
                         help="--loopback: side B's device (default: "
                              "--device)")
main.parser.add_argument("--mode", choices=("dqplb", "spray"),
                         default="dqplb", help="load balancing mode "
                         "(default dqplb)")
main.parser.add_argument("--qps", type=int, default=4,
                         help="data QPs per virtual QP (default 4)")
main.parser.add_argument("--fragment", type=int, default=4096,
                         help="largest fragment in bytes (default 4096)")
main.parser.add_argument("--size", type=int, default=100000,
                         help="bytes per message (default 100000: not a "
                              "multiple of the fragment)")
main.parser.add_argument("--messages", type=int, default=8,
                         help="messages to write (default 8)")

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
