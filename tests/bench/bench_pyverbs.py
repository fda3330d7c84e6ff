"""The same benchmark shapes as bench_verbs.py, written with pyverbs.

Debian's python3-pyverbs only works with Debian's own interpreter: run this
file with ``/usr/bin/python3`` (run_in_vm.py does).  ``--api reuse`` posts
one SendWR built once; ``--api new`` builds a SendWR and an SGE per post,
as typical pyverbs code does.  Prints one ``RESULT {json}`` line per
measurement.  Not a test: pytest does not collect it.
"""
import argparse
import json
import os
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

DEPTH = 64
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
          | e.IBV_ACCESS_REMOTE_READ)


class End:
    def __init__(self, ctx, pd, size):
        self.scq = CQ(ctx, 4 * DEPTH)
        self.rcq = CQ(ctx, 4 * DEPTH)
        cap = QPCap(max_send_wr=2 * DEPTH, max_recv_wr=2 * DEPTH,
                    max_send_sge=1, max_recv_sge=1)
        self.qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq,
                                    rcq=self.rcq, cap=cap, sq_sig_all=1))
        self.mr = MR(pd, max(size, 4096), ACCESS)


def bring_up(me, peer, gid, gid_index):
    a = QPAttr()
    a.qp_state = e.IBV_QPS_INIT
    a.pkey_index = 0
    a.port_num = 1
    a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    me.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                 | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr()
    a.qp_state = e.IBV_QPS_RTR
    a.path_mtu = e.IBV_MTU_1024
    a.dest_qp_num = peer.qp.qp_num
    a.rq_psn = 0
    a.max_dest_rd_atomic = 1
    a.min_rnr_timer = 1
    a.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=gid_index,
                                      hop_limit=1),
                       is_global=1, port_num=1)
    me.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                 | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                 | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    a = QPAttr()
    a.qp_state = e.IBV_QPS_RTS
    a.sq_psn = 0
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    a.max_rd_atomic = 1
    me.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT
                 | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                 | e.IBV_QP_MAX_QP_RD_ATOMIC)


def _check(wcs):
    for wc in wcs:
        if wc.status:
            raise RuntimeError(f"completion error {wc.status}")


def _wr(end, peer, opcode, size):
    wr = SendWR(wr_id=1, opcode=opcode, num_sge=1,
                sg=[SGE(end.mr.buf, size, end.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    if opcode == e.IBV_WR_RDMA_WRITE:
        wr.set_wr_rdma(peer.mr.rkey, peer.mr.buf)
    return wr


def stream(a, b, opcode, size, window, api, seconds):
    send = opcode == e.IBV_WR_SEND
    if send:
        rwr = RecvWR(wr_id=2, num_sge=1, sg=[SGE(b.mr.buf, size, b.mr.lkey)])
        for _ in range(2 * DEPTH - 16):
            b.qp.post_recv(rwr)
    wr = _wr(a, b, opcode, size)
    done = posted = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        while posted - done < window:
            if api == "new":
                wr = _wr(a, b, opcode, size)
            a.qp.post_send(wr)
            posted += 1
        n, wcs = a.scq.poll(DEPTH)
        _check(wcs[:n])
        done += n
        if send:
            m, _ = b.rcq.poll(DEPTH)
            for _ in range(m):
                if api == "new":
                    rwr = RecvWR(wr_id=2, num_sge=1,
                                 sg=[SGE(b.mr.buf, size, b.mr.lkey)])
                b.qp.post_recv(rwr)
        if n and time.perf_counter() > deadline:
            break
    while done < posted:
        n, wcs = a.scq.poll(DEPTH)
        _check(wcs[:n])
        done += n
    el = time.perf_counter() - t0
    if send:
        while b.rcq.poll(DEPTH)[0]:
            pass
    return done, el


def pingpong(a, b, size, api, seconds):
    wa, wb = _wr(a, b, e.IBV_WR_SEND, size), _wr(b, a, e.IBV_WR_SEND, size)
    ra = RecvWR(wr_id=2, num_sge=1, sg=[SGE(a.mr.buf, size, a.mr.lkey)])
    rb = RecvWR(wr_id=2, num_sge=1, sg=[SGE(b.mr.buf, size, b.mr.lkey)])
    a.qp.post_recv(ra)
    b.qp.post_recv(rb)

    def wait(cq):
        while True:
            n, wcs = cq.poll()
            if n:
                _check(wcs[:n])
                return
    iters = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(16):
            if api == "new":
                wa = _wr(a, b, e.IBV_WR_SEND, size)
                wb = _wr(b, a, e.IBV_WR_SEND, size)
            a.qp.post_send(wa)
            wait(b.rcq)
            b.qp.post_recv(rb)
            b.qp.post_send(wb)
            wait(a.rcq)
            a.qp.post_recv(ra)
            wait(a.scq)
            wait(b.scq)
            iters += 1
        if time.perf_counter() > deadline:
            break
    return iters, time.perf_counter() - t0


def run(mode, api, seconds, size=None, device=None, gid_index=None):
    device = device or os.environ.get("BENCH_DEVICE", "rxe0")
    gid_index = int(os.environ.get("BENCH_GID_INDEX", "1")
                    if gid_index is None else gid_index)
    size = size or (65536 if mode == "write-bw" else 8)
    with Context(name=device) as ctx:
        pd = PD(ctx)
        a, b = End(ctx, pd, size), End(ctx, pd, size)
        gid = ctx.query_gid(1, gid_index)
        bring_up(a, b, gid, gid_index)
        bring_up(b, a, gid, gid_index)
        if mode == "write-rate":
            ops, el = stream(a, b, e.IBV_WR_RDMA_WRITE, size, DEPTH, api,
                             seconds)
        elif mode == "send-rate":
            ops, el = stream(a, b, e.IBV_WR_SEND, size, DEPTH, api, seconds)
        elif mode == "write-bw":
            ops, el = stream(a, b, e.IBV_WR_RDMA_WRITE, size, 16, api, seconds)
        elif mode == "pingpong":
            ops, el = pingpong(a, b, size, api, seconds)
        else:
            raise ValueError(mode)
    return {"impl": "pyverbs", "mode": mode, "api": api, "size": size,
            "ops": ops, "seconds": el, "mops": ops / el / 1e6,
            "usec": el * 1e6 / ops, "mib_s": ops * size / el / (1 << 20)}


def main(argv=None):
    ap = argparse.ArgumentParser(description="pyverbs hot-path benchmark")
    ap.add_argument("modes", nargs="*",
                    default=["write-rate", "send-rate", "pingpong",
                             "write-bw"])
    ap.add_argument("--api", action="append",
                    help="reuse, new (default: both)")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int)
    ap.add_argument("-d", "--device")
    ap.add_argument("-g", "--gid-index", type=int)
    a = ap.parse_args(argv)
    for mode in a.modes:
        for api in a.api or ["reuse", "new"]:
            if mode == "write-bw" and api == "new":
                continue
            r = run(mode, api, a.seconds, a.size, a.device, a.gid_index)
            print("RESULT " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
