"""Benchmark of rdma's verbs hot path (post/poll), as the C loop measures it.

Two RC QPs in one process and one thread on one device (rxe0 loopback),
the same shapes as ``tests/bench/c/verbs_loop.c``:

=================  ========================================================
``write-rate``     8-byte RDMA WRITE, signaled, at most 64 in flight
``send-rate``      8-byte SEND, signaled, at most 64 in flight (receives
                   reposted as they complete)
``pingpong``       8-byte SEND/RECV round trip A->B->A (usec per round trip)
``write-bw``       64 KiB RDMA WRITE, at most 16 in flight (MiB/s)
=================  ========================================================

and three ways to use the API (``--api``):

``reuse``   one ``ibv.send_wr`` built once and posted again and again,
            ``cq.poll()``
``new``     a new ``send_wr`` + ``sge`` per post (what typical code does)
``batch``   a prepared ``ibv.SendBatch``/``ibv.RecvBatch`` of 16 WRs and
            ``cq.poll_into(WCArray)``

Run it in the VM (``tests/bench/run_in_vm.py`` does, pinned, beside the C
loop and pyverbs).  Prints one ``RESULT {json}`` line per measurement.
Not a test: pytest does not collect it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import rdma
import rdma.ibverbs as ibv

DEPTH = 64
CHUNK = 16
ACCESS = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE
          | ibv.IBV_ACCESS_REMOTE_READ)


class End:
    """A PD-less end: CQs, an RC QP and a registered buffer."""

    def __init__(self, pd, size: int):
        self.scq = pd.cq(4 * DEPTH)
        self.rcq = pd.cq(4 * DEPTH)
        self.qp = pd.qp(ibv.IBV_QPT_RC, 2 * DEPTH, self.scq, 2 * DEPTH,
                        self.rcq)
        self.buf = bytearray(max(size, 4096))
        self.mr = pd.mr(self.buf, ACCESS)


def bring_up(me: End, peer: End, gid, gid_index: int):
    me.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                             port_num=1, qp_access_flags=ACCESS & ~1))
    me.qp.modify(ibv.qp_attr(
        qp_state=ibv.IBV_QPS_RTR, path_mtu=ibv.IBV_MTU_1024,
        dest_qp_num=peer.qp.qp_num, rq_psn=0, max_dest_rd_atomic=1,
        min_rnr_timer=1,
        ah_attr=ibv.ah_attr(is_global=1, port_num=1, grh=ibv.global_route(
            dgid=gid, sgid_index=gid_index, hop_limit=1))))
    me.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0, timeout=14,
                             retry_cnt=7, rnr_retry=7, max_rd_atomic=1))


def _check(wcs):
    for wc in wcs:
        if wc.status:
            raise ibv.WCError(wc)


def stream(a: End, b: End, opcode: int, size: int, window: int, api: str,
           seconds: float) -> tuple[int, float]:
    """Keep at most *window* WRs in flight for *seconds*; return (ops, s)."""
    send = opcode == ibv.IBV_WR_SEND
    sge = a.mr.sge(length=size)
    rsge = b.mr.sge(length=size)
    remote = {} if send else dict(remote_addr=b.mr.addr, rkey=b.mr.rkey)
    flags = ibv.IBV_SEND_SIGNALED
    if send:
        rwr = ibv.recv_wr(wr_id=2, sg_list=rsge)
        b.qp.post_recv([rwr] * (2 * DEPTH - CHUNK))
    done = posted = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    if api == "batch":
        # chunks of a quarter window: the pipe never drains
        chunk = min(CHUNK, window // 4)
        batch = ibv.SendBatch([ibv.send_wr(wr_id=1, sg_list=sge, opcode=opcode,
                                           send_flags=flags, **remote)
                               for _ in range(chunk)])
        rbatch = ibv.RecvBatch([ibv.recv_wr(wr_id=2, sg_list=rsge)
                                for _ in range(CHUNK)])
        arr = ibv.WCArray(DEPTH)
        rarr = ibv.WCArray(DEPTH)
        received = 0
        post, poll_into = a.qp.post_send, a.scq.poll_into
        # without receives to repost, spin in C until a chunk completed
        need = 0 if send else chunk
        while True:
            while posted - done <= window - chunk:
                post(batch)
                posted += chunk
            n = poll_into(arr, None, need)
            if arr.first_error() is not None:
                raise ibv.WCError(arr[arr.first_error()])
            done += n
            if send:
                received += b.rcq.poll_into(rarr)
                while received >= CHUNK:
                    b.qp.post_recv(rbatch)
                    received -= CHUNK
            if n and time.perf_counter() > deadline:
                break
    elif api == "reuse":
        wr = ibv.send_wr(wr_id=1, sg_list=sge, opcode=opcode, send_flags=flags,
                         **remote)
        post = a.qp.post_send
        poll = a.scq.poll
        while True:
            while posted - done < window:
                post(wr)
                posted += 1
            wcs = poll()
            _check(wcs)
            done += len(wcs)
            if send:
                for _ in b.rcq.poll():
                    b.qp.post_recv(rwr)
            if wcs and time.perf_counter() > deadline:
                break
    elif api == "new":
        while True:
            while posted - done < window:
                a.qp.post_send(ibv.send_wr(
                    wr_id=1, sg_list=ibv.sge(addr=a.mr.addr, length=size,
                                             lkey=a.mr.lkey),
                    opcode=opcode, send_flags=flags, **remote))
                posted += 1
            wcs = a.scq.poll()
            _check(wcs)
            done += len(wcs)
            if send:
                for _ in b.rcq.poll():
                    b.qp.post_recv(ibv.recv_wr(wr_id=2, sg_list=ibv.sge(
                        addr=b.mr.addr, length=size, lkey=b.mr.lkey)))
            if wcs and time.perf_counter() > deadline:
                break
    else:
        raise ValueError(api)
    while done < posted:
        wcs = a.scq.poll()
        _check(wcs)
        done += len(wcs)
    elapsed = time.perf_counter() - t0
    if send:   # drain so the next measurement starts clean
        while b.rcq.poll():
            pass
    return done, elapsed


def pingpong(a: End, b: End, size: int, api: str, seconds: float):
    """Round trips A->B->A of *size*-byte SENDs; return (iters, seconds)."""
    def mk(e):
        return ibv.send_wr(wr_id=1, sg_list=e.mr.sge(length=size),
                           opcode=ibv.IBV_WR_SEND,
                           send_flags=ibv.IBV_SEND_SIGNALED)
    wa, wb = mk(a), mk(b)
    ra = ibv.recv_wr(wr_id=2, sg_list=a.mr.sge(length=size))
    rb = ibv.recv_wr(wr_id=2, sg_list=b.mr.sge(length=size))
    a.qp.post_recv(ra)
    b.qp.post_recv(rb)
    iters = 0
    if api == "batch":
        return _pingpong_batch(a, b, ra, rb, wa, wb, seconds)

    def wait(cq):
        while True:
            wcs = cq.poll()
            if wcs:
                _check(wcs)
                return
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(16):
            if api == "new":
                wa, wb = mk(a), mk(b)
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


def _pingpong_batch(a, b, ra, rb, wa, wb, seconds):
    """The ping-pong written for speed: prepared batches, bound methods,
    and poll_into(min=1), which spins in C until the completion is there
    (the same protocol as the C loop: both receive and both send
    completions every round trip)."""
    sa, sb = a.qp.post_send, b.qp.post_send
    qa, qb = a.qp.post_recv, b.qp.post_recv
    wa, wb = ibv.SendBatch([wa]), ibv.SendBatch([wb])
    ra, rb = ibv.RecvBatch([ra]), ibv.RecvBatch([rb])
    par, pbr = a.rcq.poll_into, b.rcq.poll_into
    pas, pbs = a.scq.poll_into, b.scq.poll_into
    w = [ibv.WCArray(1) for _ in range(4)]
    w0, w1, w2, w3 = w
    iters = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        for _ in range(16):
            sa(wa)
            pbr(w0, 1, 1)
            qb(rb)
            sb(wb)
            par(w1, 1, 1)
            qa(ra)
            pas(w2, 1, 1)
            pbs(w3, 1, 1)
        iters += 16
        # an error moves its QP to ERR and every later completion of that
        # QP fails too: the last one of each CQ tells
        for x in w:
            if x.status(0) != ibv.IBV_WC_SUCCESS:
                raise ibv.WCError(x[0])
        if time.perf_counter() > deadline:
            break
    return iters, time.perf_counter() - t0


def run(mode: str, api: str, seconds: float, size: int | None = None,
        device: str | None = None, gid_index: int | None = None) -> dict:
    device = device or os.environ.get("BENCH_DEVICE", "rxe0")
    gid_index = int(os.environ.get("BENCH_GID_INDEX", "1")
                    if gid_index is None else gid_index)
    size = size or (65536 if mode == "write-bw" else 8)
    end_port = rdma.get_end_port(device)
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        a, b = End(pd, size), End(pd, size)
        gid = end_port.gids[gid_index]
        bring_up(a, b, gid, gid_index)
        bring_up(b, a, gid, gid_index)
        if mode == "write-rate":
            ops, el = stream(a, b, ibv.IBV_WR_RDMA_WRITE, size, DEPTH, api,
                             seconds)
        elif mode == "send-rate":
            ops, el = stream(a, b, ibv.IBV_WR_SEND, size, DEPTH, api, seconds)
        elif mode == "write-bw":
            ops, el = stream(a, b, ibv.IBV_WR_RDMA_WRITE, size, 16, api,
                             seconds)
        elif mode == "pingpong":
            ops, el = pingpong(a, b, size, api, seconds)
        else:
            raise ValueError(mode)
    return {"impl": "rdma", "mode": mode, "api": api, "size": size, "ops": ops,
            "seconds": el, "mops": ops / el / 1e6, "usec": el * 1e6 / ops,
            "mib_s": ops * size / el / (1 << 20)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="rdma verbs hot-path benchmark")
    ap.add_argument("modes", nargs="*",
                    default=["write-rate", "send-rate", "pingpong",
                             "write-bw"])
    ap.add_argument("--api", action="append",
                    help="reuse, new, batch (default: all)")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--size", type=int)
    ap.add_argument("-d", "--device")
    ap.add_argument("-g", "--gid-index", type=int)
    a = ap.parse_args(argv)
    for mode in a.modes:
        for api in a.api or ["reuse", "new", "batch"]:
            if mode == "write-bw" and api == "new":
                continue
            r = run(mode, api, a.seconds, a.size, a.device, a.gid_index)
            print("RESULT " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
