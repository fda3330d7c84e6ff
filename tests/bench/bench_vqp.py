"""Virtual QPs (issue 24) next to one plain RC QP, measured in the same run
(not a test): ``python tests/bench/bench_vqp.py [--quick] [--device D]``.

- large messages: RDMA WRITE bandwidth for 1 MiB .. 64 MiB messages with
  1, 2, 4, 8 data QPs in both modes (dqplb, spray), next to one plain QP
  writing the same messages (a few in flight each);
- small messages: the rate of 8 B .. 4 KiB RDMA WRITEs posted one by one
  from Python on a VirtualQP (one data QP, and four) against the same WRs
  on one plain QP (32 in flight), and the overhead in percent.

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


class Plain:
    """Two connected RC QPs (one per Context), a send CQ on side a."""

    def __init__(self, ca, cb, pda, pdb, depth: int):
        self.cq = ca.cq(depth * 2 + 8)
        self.cqb = cb.cq(80)
        self.qa = pda.qp(ibv.IBV_QPT_RC, depth + 2, self.cq, 1, self.cq)
        self.qb = pdb.qp(ibv.IBV_QPT_RC, 2, self.cqb, 64, self.cqb)
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

    def post(self, wr):
        self.a.post_send(wr)

    def poll_into(self, wcs):
        n = self.cqa.poll_into(wcs)
        if n == 0:      # idle: let the receiver repost its receives (dqplb)
            self.cqb.poll_into(self.rx)
        return n

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
        reps: int = 3) -> float:
    """Keep *depth* WRITEs of *size* bytes in flight for about *seconds*,
    *reps* times; return the best rate in bytes per second (the machine is
    shared: the best run is the least disturbed one)."""
    return max(run1(ep, size, depth, seconds / reps, src, dst, wcs)
               for _ in range(reps))


def run1(ep, size: int, depth: int, seconds: float, src, dst,
         wcs) -> float:
    wr = ibv.send_wr(wr_id=0, opcode=ibv.IBV_WR_RDMA_WRITE,
                     send_flags=ibv.IBV_SEND_SIGNALED,
                     sg_list=src.sge(size), remote_addr=dst.addr,
                     rkey=dst.rkey)
    done = posted = 0
    for _ in range(depth):
        ep.post(wr)
        posted += 1
    clock = CLOCK
    t0 = clock()
    end = t0 + seconds
    while True:
        n = ep.poll_into(wcs)
        if n:
            if wcs.first_error() is not None:
                raise RuntimeError("completion error: "
                                   f"{wcs[wcs.first_error()]}")
            done += n
            now = clock()
            if now < end:
                for _ in range(n):
                    ep.post(wr)
                posted += n
        if done == posted and clock() >= end:
            break
    return done * size / (clock() - t0)


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
    print("\nsmall messages: RDMA WRITEs per second, one post_send per WR "
          "(32 in flight); overhead vs the plain QP")
    print(f"{'size':>6} {'plain':>9} {'dqplb x1':>9} {'ovh':>6} "
          f"{'dqplb x4':>9} {'ovh':>6} {'spray x1':>9} {'ovh':>6}")
    for size in sizes:
        row = {"size": size}
        for key, kind, n, mode in (("plain", "plain", 1, ""),
                                   ("dqplb x1", "v", 1, "dqplb"),
                                   ("dqplb x4", "v", 4, "dqplb"),
                                   ("spray x1", "v", 1, "spray")):
            ep = make(kind, ca, cb, pda, pdb, n, mode, 65536, 32)
            row[key] = run(ep, size, 32, args.seconds, src, dst, wcs) / size
            ep.close()
        p = row["plain"]
        print(f"{size:>6} {p:9.0f}" + "".join(
            f" {row[k]:9.0f} {100 * (p / row[k] - 1):5.1f}%"
            for k in ("dqplb x1", "dqplb x4", "spray x1")), flush=True)
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
    """--count KIND N: N 8-byte WRITEs, one post_send each, 32 in flight,
    on a plain QP or a one-QP VirtualQP (KIND plain, dqplb or spray), for
    instruction counts: run under valgrind --tool=callgrind with two N and
    divide the difference by theirs (both ends are in this process)."""
    kind, n = args.count[0], int(args.count[1])
    ep = make("plain" if kind == "plain" else "v", ca, cb, pda, pdb, 1,
              kind, 65536, 32)
    wr = ibv.send_wr(wr_id=0, opcode=ibv.IBV_WR_RDMA_WRITE,
                     send_flags=ibv.IBV_SEND_SIGNALED, sg_list=src.sge(8),
                     remote_addr=dst.addr, rkey=dst.rkey)
    wcs = ibv.WCArray(64)
    posted = done = 0
    while done < n:
        while posted < n and posted - done < 32:
            ep.post(wr)
            posted += 1
        k = ep.poll_into(wcs)
        if k and wcs.first_error() is not None:
            raise RuntimeError(f"completion error: {wcs[wcs.first_error()]}")
        done += k
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
