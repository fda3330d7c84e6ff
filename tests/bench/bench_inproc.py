"""RDMA WRITE and READ between two QPs of this process, next to memcpy of
the same size in the same run (not a test; issue 26 item 4):
``python tests/bench/bench_inproc.py [--memory KIND] [--reps N] [--device D]``.

Both QPs are in this process, connected to each other, as in notebook 08.
For each size (64 KiB .. 16 MiB) the script times:

- ``memcpy``: ``ctypes.memmove`` from the source buffer to the
  destination buffer, the size at a time, called from Python as the WRs
  are posted from Python;
- ``write`` and ``read``: batches of WINDOW WRs of the size (each WR
  signaled, re-posted as one ``ibv.SendBatch``, completions polled into a
  reusable ``ibv.WCArray``), bytes divided by the time;

alternating the three, REPS rounds of about BUDGET seconds each, and
prints the medians and the ratio to memcpy.  ``--memory`` picks what the
MRs are over: ``bytearray`` (default), ``numpy``, ``mmap`` or ``alloc_mr``.
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import statistics
import sys
import time

import rdma
import rdma.ibverbs as ibv
import rdma.path
from rdma.path import IBPath

KiB, MiB = 1 << 10, 1 << 20
SIZES = [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB]
WINDOW = 16
ACCESS = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
          ibv.IBV_ACCESS_REMOTE_READ)


def connect(end_port, pd, cq, depth):
    """Two RC QPs of *pd* connected to each other, in RTS."""
    gid = next(g for g in end_port.gids if g)
    qa = pd.qp(ibv.IBV_QPT_RC, depth, cq, depth, cq)
    qb = pd.qp(ibv.IBV_QPT_RC, depth, cq, depth, cq)
    pa = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                             dqpn=qb.qp_num))
    pb = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                             dqpn=qa.qp_num))
    rdma.path.fill_path(qa, pa)
    rdma.path.fill_path(qb, pb)
    pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
    qa.establish(pa, ACCESS)
    qb.establish(pb, ACCESS)
    return qa, qb


def buffers(kind, pd, size):
    """Two MRs of *size* bytes over memory of *kind*, and their buffers
    (kept alive by the caller)."""
    out = []
    for _ in range(2):
        if kind == "alloc_mr":
            mr = pd.alloc_mr(size, ACCESS)
            out.append((mr, mr.buf))
            continue
        if kind == "bytearray":
            buf = bytearray(size)
        elif kind == "numpy":
            import numpy
            buf = numpy.zeros(size, dtype=numpy.uint8)
        else:
            buf = mmap.mmap(-1, size)
        out.append((pd.mr(buf, ACCESS), buf))
    return out


def address(buf) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory", default="bytearray",
                    choices=["bytearray", "numpy", "mmap", "alloc_mr"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.1,
                    help="seconds per measurement (default 0.1)")
    ap.add_argument("--device", default="ucx0")
    args = ap.parse_args(argv)

    end_port = rdma.get_end_port(args.device)
    ctx = rdma.get_verbs(end_port)
    pd = ctx.pd()
    cq = ctx.cq(4 * WINDOW)
    qa, _qb = connect(end_port, pd, cq, WINDOW + 2)
    (smr, sbuf), (dmr, dbuf) = buffers(args.memory, pd, max(SIZES))
    src, dst = address(sbuf), address(dbuf)
    ctypes.memset(src, 0x5A, max(SIZES))
    wcs = ibv.WCArray(WINDOW)

    def drain(n):
        got = 0
        deadline = time.monotonic() + 20
        while got < n:
            k = cq.poll_into(wcs)
            if k:
                if wcs.first_error() is not None:
                    raise ibv.WCError(wcs[wcs.first_error()], qp=qa)
                got += k
            elif time.monotonic() > deadline:
                raise TimeoutError(f"{got} of {n} completions")

    def rdma_bw(op, size):
        lmr, rmr = (smr, dmr) if op == ibv.IBV_WR_RDMA_WRITE else (dmr, smr)
        batch = ibv.SendBatch([
            ibv.send_wr(wr_id=i, opcode=op,
                        send_flags=ibv.IBV_SEND_SIGNALED,
                        sg_list=lmr.sge(size, 0), remote_addr=rmr.addr,
                        rkey=rmr.rkey)
            for i in range(WINDOW)])
        qa.post_send(batch)         # warm
        drain(WINDOW)
        n, t0 = 0, time.perf_counter()
        while n < 2 or time.perf_counter() - t0 < args.budget:
            qa.post_send(batch)
            drain(WINDOW)
            n += 1
        return n * WINDOW * size / (time.perf_counter() - t0)

    def memcpy_bw(size):
        move = ctypes.memmove
        for _ in range(WINDOW):
            move(dst, src, size)    # warm
        n, t0 = 0, time.perf_counter()
        while n < 2 or time.perf_counter() - t0 < args.budget:
            for _ in range(WINDOW):
                move(dst, src, size)
            n += 1
        return n * WINDOW * size / (time.perf_counter() - t0)

    print(f"{end_port} ({end_port.provider}), memory {args.memory}, "
          f"{WINDOW} WRs per post, medians of {args.reps} rounds")
    print(f"{'size':>8}  {'memcpy MB/s':>12}  {'WRITE MB/s':>11}  "
          f"{'ratio':>5}  {'READ MB/s':>10}  {'ratio':>5}")
    worst = None
    for size in SIZES:
        runs: dict[str, list[float]] = {"m": [], "w": [], "r": []}
        for _ in range(args.reps):
            runs["m"].append(memcpy_bw(size))
            runs["w"].append(rdma_bw(ibv.IBV_WR_RDMA_WRITE, size))
            runs["r"].append(rdma_bw(ibv.IBV_WR_RDMA_READ, size))
        m, w, r = (statistics.median(runs[k]) for k in "mwr")
        label = f"{size // MiB} MiB" if size >= MiB else f"{size // KiB} KiB"
        print(f"{label:>8}  {m / 1e6:12.0f}  {w / 1e6:11.0f}  {w / m:5.2f}"
              f"  {r / 1e6:10.0f}  {r / m:5.2f}")
        worst = min(w / m, r / m, worst if worst is not None else 9)
    print(f"lowest ratio to memcpy: {worst:.2f}")
    smr.close()
    dmr.close()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
