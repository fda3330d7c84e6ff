"""Virtual QPs (issue 24) next to one plain RC QP, measured in the same run
(not a test): ``python tests/bench/bench_vqp.py [--quick] [--device D]``.

- large messages: RDMA WRITE bandwidth for 1 MiB .. 64 MiB messages with
  1, 2, 4, 8 data QPs in both modes (dqplb, spray), next to one plain QP
  writing the same messages (a few in flight each);
- small messages: the rate of 8 B .. 4 KiB WRs posted one by one from
  Python on a VirtualQP (one data QP, and four; dqplb and spray) against
  the same WRs on one plain QP (32 in flight), and the overhead in
  percent, as two honest pairs (the same user-visible work on both sides):

  (a) ``WRITE_WITH_IMM``: the user posts RDMA_WRITE_WITH_IMM.  Plain row:
      one RC QP, and the receiver polls its CQ and reposts one receive WR
      per message.  Virtual rows: the VirtualQP, and the receiver polls
      the VirtualCQ and reposts one virtual receive WR per message (one
      virtual completion with the immediate per message, as on the QP).
  (b) ``WRITE``: the user posts RDMA_WRITE; no completion at the receiver
      on either side.  Plain row: one RC QP; the receiver does nothing.
      Virtual rows: the VirtualQP; its receiver's VirtualCQ is polled
      when the sender's is idle, because dqplb carries every fragment as
      a WRITE_WITH_IMM whose internal receive the receiver must repost
      (the user sees no completion there).  That is dqplb's protocol
      cost, counted here against the plain WRITE.

Both ends live in this process on two Contexts of the device (two UCX
workers on ucx0: its transport is UCX_TLS's; rxe0 in the Soft-RoCE VM,
``--device rxe0``).  ``--fragments`` measures one size against several
fragment sizes (the notebook's second plot).  ``--json FILE`` writes the
numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.virtual

MiB = 1 << 20
REMOTE = ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE
WWI = ibv.IBV_WR_RDMA_WRITE_WITH_IMM


#: receive WRs the receiver keeps posted for WRITE_WITH_IMM (over the 32
#: in flight; under the VirtualQP's max_wr of 64)
RX_PRIME = 48


class Plain:
    """Two connected RC QPs (one per Context), a send CQ on side a."""

    def __init__(self, ca, cb, pda, pdb, depth: int):
        self.cq = ca.cq(depth * 2 + 8)
        self.cqb = cb.cq(RX_PRIME + 16)
        self.qa = pda.qp(ibv.IBV_QPT_RC, depth + 2, self.cq, 1, self.cq)
        self.qb = pdb.qp(ibv.IBV_QPT_RC, 2, self.cqb, RX_PRIME + 2,
                         self.cqb)
        self.rw = ibv.recv_wr(wr_id=1)
        self.rx = ibv.WCArray(64)
        self.primed = 0
        ia = rdma.virtual.local_info(_One(self.qa, pda), ca.end_port)
        ib = rdma.virtual.local_info(_One(self.qb, pdb), cb.end_port)
        pa = rdma.virtual.path_to(_One(self.qa, pda), ca.end_port, ia, ib)
        pb = rdma.virtual.path_to(_One(self.qb, pdb), cb.end_port, ib, ia)
        self.qa.establish(pa)
        self.qb.establish(pb, REMOTE)

    def post(self, wr):
        self.qa.post_send(wr)

    def poll_into(self, wcs):
        return self.cq.poll_into(wcs)

    def rx_prime(self):
        """Keep RX_PRIME receive WRs posted (from the first run on)."""
        for _ in range(RX_PRIME - self.primed):
            self.qb.post_recv(self.rw)
        self.primed = RX_PRIME

    def rx_poll(self):
        """The receiver: poll its CQ, repost a receive WR per message."""
        n = self.cqb.poll_into(self.rx)
        if n and self.rx.first_error() is not None:
            e = self.rx.first_error()
            raise RuntimeError(f"receive error: {self.rx[e]}")
        for _ in range(n):
            self.qb.post_recv(self.rw)
        return n

    def rx_idle(self):
        pass

    def close(self):
        for o in (self.qa, self.qb, self.cq, self.cqb):
            o.close()


class _One:
    """A plain QP seen as a one-QP VirtualQP by rdma.virtual's helpers."""

    def __init__(self, qp, pd):
        self.qp_num, self.pd = qp.qp_num, pd

    def info(self):
        return {"qpns": [self.qp_num]}


class Virtual:
    """Two connected VirtualQPs (one per Context)."""

    def __init__(self, ca, cb, pda, pdb, n, mode, fragment, depth):
        mm = max(4, min(64, depth * ((1 << 26) // fragment) // n + 2))
        self.cqa = pda.virtual_cq(n * 2 * (mm + 2) + 64)
        self.cqb = pdb.virtual_cq(n * 2 * (mm + 2) + 64)
        kw = dict(mode=mode, fragment=fragment, max_msgs=mm,
                  max_wr=max(64, depth * 2))
        self.a = pda.virtual_qp(n, self.cqa, **kw)
        self.b = pdb.virtual_qp(n, self.cqb, **kw)
        rdma.virtual.connect_pair(self.a, self.b, ca.end_port, cb.end_port)
        self.rx = ibv.WCArray(64)
        self.rw = ibv.recv_wr(wr_id=1)
        self.primed = 0

    def post(self, wr):
        self.a.post_send(wr)

    def poll_into(self, wcs):
        return self.cqa.poll_into(wcs)

    def rx_prime(self):
        """Keep RX_PRIME receive WRs posted (from the first run on)."""
        for _ in range(RX_PRIME - self.primed):
            self.b.post_recv(self.rw)
        self.primed = RX_PRIME

    def rx_poll(self):
        """The receiver: poll the VirtualCQ, repost a virtual receive WR
        per message."""
        n = self.cqb.poll_into(self.rx)
        if n and self.rx.first_error() is not None:
            e = self.rx.first_error()
            raise RuntimeError(f"receive error: {self.rx[e]}")
        for _ in range(n):
            self.b.post_recv(self.rw)
        return n

    def rx_idle(self):
        """WRITE: no virtual completion at the receiver, but dqplb's data
        QPs' internal receives are reposted when its VirtualCQ is polled."""
        self.cqb.poll_into(self.rx)

    def close(self):
        self.a.close()
        self.b.close()
        self.cqa.close()
        self.cqb.close()


#: time.perf_counter, or with --cpu time.process_time: the CPU time of
#: this process (both ends and the fabric's threads), which a machine
#: shared with other work disturbs much less than the wall clock; the
#: rates are then what the process would reach with the CPU to itself
#: (on ucx0 every end's work is one thread's: nothing runs in parallel)
CLOCK = time.perf_counter


def run(ep, size: int, depth: int, seconds: float, src, dst, wcs,
        reps: int = 3, imm: bool = False) -> float:
    """Keep *depth* WRITEs (*imm*: WRITE_WITH_IMMs) of *size* bytes in
    flight for about *seconds*, *reps* times; return the best rate in
    bytes per second (the machine is shared: the best run is the least
    disturbed one)."""
    return max(run1(ep, size, depth, seconds / reps, src, dst, wcs, imm)
               for _ in range(reps))


def drive(ep, wr, depth: int, wcs, imm: bool, seconds: float = 0.0,
          count: int = 0):
    """Post *wr* one post_send at a time, *depth* in flight, for *seconds*
    (or until *count* WRs completed); with *imm* the receiver polls its
    (virtual) CQ every round and reposts a receive WR per message, and
    every message must arrive there.  Return (WRs done, seconds)."""
    done = posted = received = 0
    if imm:
        ep.rx_prime()
    clock = CLOCK
    t0 = clock()
    end = t0 + seconds
    while posted < depth and (not count or posted < count):
        ep.post(wr)
        posted += 1
    while True:
        n = ep.poll_into(wcs)
        if imm:
            received += ep.rx_poll()
        elif n == 0:
            ep.rx_idle()
        if n:
            if wcs.first_error() is not None:
                raise RuntimeError("completion error: "
                                   f"{wcs[wcs.first_error()]}")
            done += n
            k = (min(n, count - posted) if count
                 else n if clock() < end else 0)
            for _ in range(k):
                ep.post(wr)
            posted += k
        if (done == posted and (not imm or received == posted) and
                (clock() >= end if not count else done >= count)):
            break
    return done, clock() - t0


def run1(ep, size: int, depth: int, seconds: float, src, dst,
         wcs, imm: bool = False) -> float:
    wr = ibv.send_wr(wr_id=0, opcode=WWI if imm else ibv.IBV_WR_RDMA_WRITE,
                     send_flags=ibv.IBV_SEND_SIGNALED,
                     sg_list=src.sge(size), remote_addr=dst.addr,
                     rkey=dst.rkey, imm_data=7 if imm else 0)
    done, dt = drive(ep, wr, depth, wcs, imm, seconds=seconds)
    return done * size / dt


def make(kind, ca, cb, pda, pdb, n=1, mode="dqplb", fragment=MiB,
         depth=4):
    if kind == "plain":
        return Plain(ca, cb, pda, pdb, depth)
    return Virtual(ca, cb, pda, pdb, n, mode, fragment, depth)


def large(ca, cb, pda, pdb, src, dst, args, out):
    sizes = [MiB, 4 * MiB, 16 * MiB, 64 * MiB]
    qps = [1, 2, 4, 8]
    if args.quick:
        sizes, qps = [MiB, 16 * MiB], [1, 4]
    wcs = ibv.WCArray(64)
    print(f"\nlarge messages: RDMA WRITE bandwidth, MB/s ({args.depth} in "
          f"flight; fragment {args.fragment} B)")
    head = f"{'size':>8} {'plain':>8}" + "".join(
        f" {m[:5]}x{n:<2}" .rjust(9) for m in ("dqplb", "spray") for n in qps)
    print(head)
    for size in sizes:
        row = {"size": size}
        ep = make("plain", ca, cb, pda, pdb, depth=args.depth)
        row["plain"] = run(ep, size, args.depth, args.seconds, src, dst, wcs)
        ep.close()
        line = f"{size // MiB:>6}Mi {row['plain'] / 1e6:8.0f}"
        for mode in ("dqplb", "spray"):
            for n in qps:
                ep = make("v", ca, cb, pda, pdb, n, mode, args.fragment,
                          args.depth)
                bw = run(ep, size, args.depth, args.seconds, src, dst, wcs)
                ep.close()
                row[f"{mode}x{n}"] = bw
                line += f" {bw / 1e6:8.0f}"
        print(line, flush=True)
        out["large"].append(row)


def small(ca, cb, pda, pdb, src, dst, args, out):
    sizes = [8, 64, 512, 4096] if not args.quick else [8, 4096]
    wcs = ibv.WCArray(64)
    kinds = (("plain", "plain", 1, ""), ("dqplb x1", "v", 1, "dqplb"),
             ("dqplb x4", "v", 4, "dqplb"), ("spray x1", "v", 1, "spray"),
             ("spray x4", "v", 4, "spray"))
    for imm, title in ((True, "(a) RDMA_WRITE_WITH_IMM, the receiver "
                        "polls and reposts a receive WR per message"),
                       (False, "(b) RDMA_WRITE, nothing for the user at "
                        "the receiver")):
        print(f"\nsmall messages {title}: WRs per second, one post_send "
              "per WR (32 in flight); overhead vs the plain QP")
        print(f"{'size':>6} {'plain':>9}" + "".join(
            f" {k[0]:>9} {'ovh':>6}" for k in kinds[1:]))
        for size in sizes:
            row = {"size": size, "imm": imm}
            for key, kind, n, mode in kinds:
                ep = make(kind, ca, cb, pda, pdb, n, mode, 65536, 32)
                row[key] = run(ep, size, 32, args.seconds, src, dst, wcs,
                               imm=imm) / size
                ep.close()
            p = row["plain"]
            print(f"{size:>6} {p:9.0f}" + "".join(
                f" {row[k[0]]:9.0f} {100 * (p / row[k[0]] - 1):5.1f}%"
                for k in kinds[1:]), flush=True)
            out["small"].append(row)


def fragments(ca, cb, pda, pdb, src, dst, args, out):
    size = 16 * MiB
    wcs = ibv.WCArray(64)
    print(f"\nfragment size: {size // MiB} MiB messages, 4 data QPs, MB/s")
    for frag in (16 << 10, 64 << 10, 256 << 10, MiB, 4 * MiB):
        row = {"fragment": frag}
        for mode in ("dqplb", "spray"):
            ep = make("v", ca, cb, pda, pdb, 4, mode, frag, args.depth)
            row[mode] = run(ep, size, args.depth, args.seconds, src, dst, wcs)
            ep.close()
        print(f"{frag >> 10:>6}Ki {row['dqplb'] / 1e6:8.0f} "
              f"{row['spray'] / 1e6:8.0f}", flush=True)
        out["fragments"].append(row)


def count_loop(ca, cb, pda, pdb, src, dst, args):
    """--count KIND N: N 8-byte WRs, one post_send each, 32 in flight, on
    a plain QP or a one-QP VirtualQP (KIND plain, dqplb or spray; with
    --imm WRITE_WITH_IMMs, the receiver reposting a receive per message;
    --qps: data QPs), for instruction counts: run under valgrind
    --tool=callgrind with two N and divide the difference by theirs (both
    ends are in this process)."""
    kind, n = args.count[0], int(args.count[1])
    ep = make("plain" if kind == "plain" else "v", ca, cb, pda, pdb,
              args.qps, kind, 65536, 32)
    wr = ibv.send_wr(wr_id=0, opcode=WWI if args.imm
                     else ibv.IBV_WR_RDMA_WRITE,
                     send_flags=ibv.IBV_SEND_SIGNALED, sg_list=src.sge(8),
                     remote_addr=dst.addr, rkey=dst.rkey, imm_data=7)
    wcs = ibv.WCArray(64)
    drive(ep, wr, 32, wcs, args.imm, count=n)
    ep.close()
    print(f"{kind}: {n} WRs")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default=None, help="e.g. rxe0 (default: "
                   "the software fabric's ucx0)")
    p.add_argument("--device-b", default=None, help="the receiver's "
                   "device (e.g. rxe2 with --device rxe1: the VM's "
                   "two-host pair); default: --device")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--fragment", type=int, default=65536)
    p.add_argument("--fragments", action="store_true",
                   help="also measure against the fragment size")
    p.add_argument("--no-small", action="store_true")
    p.add_argument("--no-large", action="store_true",
                   help="only the small-message table")
    p.add_argument("--json", default=None)
    p.add_argument("--cpu", action="store_true",
                   help="rates over the process's CPU time, not the wall "
                        "clock's (a shared, loaded machine)")
    p.add_argument("--count", nargs=2, metavar=("KIND", "N"), default=None,
                   help="only N 8-byte WRITEs on KIND (plain, dqplb, "
                        "spray), for callgrind")
    p.add_argument("--imm", action="store_true",
                   help="--count: WRITE_WITH_IMMs, received")
    p.add_argument("--qps", type=int, default=1,
                   help="--count: data QPs of the VirtualQP")
    args = p.parse_args(argv)
    if args.cpu:
        global CLOCK
        CLOCK = time.process_time
    ep = (rdma.get_end_port(args.device) if args.device
          else rdma.get_end_port(provider="ucx"))
    epb = rdma.get_end_port(args.device_b) if args.device_b else ep
    out = {"device": str(ep), "large": [], "small": [], "fragments": []}
    with rdma.get_verbs(ep) as ca, rdma.get_verbs(epb) as cb:
        pda, pdb = ca.pd(), cb.pd()
        src = pda.alloc_mr(64 * MiB, ibv.IBV_ACCESS_LOCAL_WRITE)
        dst = pdb.alloc_mr(64 * MiB, REMOTE)
        if args.count:
            count_loop(ca, cb, pda, pdb, src, dst, args)
            return 0
        print(f"{ep} -> {epb}: both ends in one process, two Contexts")
        if not args.no_large:
            large(ca, cb, pda, pdb, src, dst, args, out)
        if not args.no_small:
            small(ca, cb, pda, pdb, src, dst, args, out)
        if args.fragments:
            fragments(ca, cb, pda, pdb, src, dst, args, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
