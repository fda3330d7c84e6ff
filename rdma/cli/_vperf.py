"""``ibtool perf write --qps N --mode dqplb|spray``: the striped half of
``perf`` (a :class:`rdma.ibverbs.VirtualQP` next to the single QP).

Each side keeps its ordinary RC QP and adds one VirtualQP of ``--qps``
data QPs on the same PD and MR.  For every size the client measures the
single QP first, then the VirtualQP writing the same messages, and
reports both in one row; the server polls its VirtualCQ while the client
runs (in dqplb mode that reposts the data QPs' receives) and checks the
VirtualQP's data with ``-c``.

The out-of-band exchange gains, in both ``hello`` messages, ``vqp``: the
record of :func:`rdma.virtual.local_info` (mode, data QPNs, first
sequence number, LID, GID, PSN), and in the client's ``qps``,
``lb_mode`` and ``fragment``.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List, Tuple

from rdma.cli._oob import PeerError

__all__ = ["LB_MODES", "VBW_FIELDS", "check_args", "VSide", "bw_client",
           "serve_until_message", "SEED"]

LB_MODES = ("dqplb", "spray")
#: the row of a striped run: the VirtualQP's numbers in the usual fields,
#: the single QP's of the same run next to them
VBW_FIELDS = ["test", "mode", "bytes", "iterations", "qps", "lb_mode",
              "fragment", "bw_peak_mb_s", "bw_avg_mb_s", "msg_rate_mpps",
              "single_bw_peak_mb_s", "single_bw_avg_mb_s", "speedup"]
#: the VirtualQP writes another pattern than the single QP, so that -c
#: sees its data and not what the single QP left there
SEED = 3


def check_args(args: argparse.Namespace) -> None:
    """The combinations ``--qps`` allows (a ValueError naming the
    problem)."""
    if args.qps is None:
        if args.lb_mode is not None or args.fragment is not None:
            raise ValueError("--mode and --fragment need --qps N (the "
                             "number of data QPs to stripe over)")
        return
    if args.test != "write":
        raise ValueError(f"--qps: a VirtualQP carries RDMA WRITEs only, "
                         f"not {args.test!r}; use 'ibtool perf write'")
    if args.mode == "lat":
        raise ValueError("--qps measures bandwidth (--bw), not --lat")
    if args.lb_mode is None:
        args.lb_mode = "dqplb"
    if args.fragment is None:
        args.fragment = 65536


class VSide:
    """This side's VirtualQP (``--qps`` data QPs) and VirtualCQ, on the
    PD and MR of *side* (perf's ``_Side``)."""

    def __init__(self, side: Any, args: argparse.Namespace):
        import rdma.ibverbs as ibv
        self.ibv = ibv
        self.side = side
        self.depth = side.tx_depth
        self.vcq = side.pd.virtual_cq(max(4096, 2 * self.depth + 64))
        self.vqp = side.pd.virtual_qp(args.qps, self.vcq, mode=args.lb_mode,
                                      fragment=args.fragment,
                                      max_wr=self.depth)
        self.wcs = ibv.WCArray(64)
        self.batches: Dict[int, Any] = {}
        import rdma.virtual
        self.mine: Dict[str, Any] = rdma.virtual.local_info(
            self.vqp, side.end_port, gid_index=side.gidx)

    def describe(self) -> Dict[str, Any]:
        """This end's record for the peer (``hello``'s ``vqp``)."""
        return self.mine

    def connect(self, peer: Dict[str, Any], mtu: int) -> None:
        import rdma.virtual
        if not isinstance(peer, dict):
            raise PeerError("the peer has no VirtualQP (is it an older "
                            "ibtool without --qps?)")
        try:
            rdma.virtual.connect(self.vqp, self.side.end_port, self.mine,
                                 peer, MTU=mtu)
        except (KeyError, TypeError) as e:
            raise PeerError(f"the peer sent an invalid VirtualQP record: "
                            f"{e}") from None

    def check_wcs(self) -> None:
        bad = self.wcs.first_error()
        if bad is not None:
            raise self.ibv.WCError(self.wcs[bad])

    def post(self, wr: Any, n: int) -> None:
        """Post *n* copies of *wr* in one call."""
        b = self.batches.get(n)
        if b is None:
            b = self.batches[n] = self.ibv.SendBatch([wr] * n)
        self.vqp.post_send(b)


def bw_client(vs: VSide, args: argparse.Namespace, size: int, beat: Any,
              idle: Any) -> Tuple[float, float, List[float], int]:
    """Keep up to tx-depth virtual WRITEs of *size* bytes in flight until
    ``--iters`` completed; return (t0, t1, stamps, depth): the times of
    the first post and last completion, one stamp per completion."""
    ibv, side = vs.ibv, vs.side
    iters = args.iters
    wr = ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_RDMA_WRITE,
                     send_flags=ibv.IBV_SEND_SIGNALED,
                     sg_list=side.mr.sge(size, side.s0),
                     remote_addr=side.peer["addr"], rkey=side.peer["rkey"])
    vs.batches.clear()
    depth = max(1, min(vs.depth, vs.vqp.max_wr, iters))
    vcq, wcs = vs.vcq, vs.wcs
    stamps: List[float] = []
    posted = done = 0
    clock = time.perf_counter
    t0 = clock()
    vs.post(wr, depth)
    posted = depth
    while done < iters:
        n = vcq.poll_into(wcs)
        if not n:
            idle.idle()
            continue
        now = clock()
        vs.check_wcs()
        done += n
        stamps.extend([now] * n)
        more = min(n, iters - posted)
        if more > 0:
            vs.post(wr, more)
            posted += more
        idle.progress()
        beat.tick(done)
    return t0, clock(), stamps, depth


def serve_until_message(vs: VSide, chan: Any) -> None:
    """The server's part of a run: poll the VirtualCQ (which reposts the
    data QPs' receives in dqplb mode) until the client's next message
    arrives."""
    vcq, wcs = vs.vcq, vs.wcs
    while not chan.ready():
        for _ in range(64):
            if vcq.poll_into(wcs):
                vs.check_wcs()
