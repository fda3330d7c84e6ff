#!/usr/bin/env python3
"""Register memory and manage send/receive buffers (python-rdma "Memory").

Everything a work request points at must be registered memory.  ``pd.mr()``
registers any object with the buffer protocol:

* ``bytes`` (read-only) for access the device only reads (local reads,
  ``IBV_ACCESS_REMOTE_READ``);
* ``bytearray`` or ``mmap`` for access that writes.  Verbs require
  ``IBV_ACCESS_LOCAL_WRITE`` with ``REMOTE_WRITE`` (or ``REMOTE_ATOMIC``):
  without it registration fails with EINVAL.

The MR keeps the buffer exported while it lives, so a ``bytearray`` cannot
be resized (nor an ``mmap`` closed) under the device: ``BufferError``.
``mr.sge()`` and ``mr.sge(length, off)`` make scatter/gather entries.

``rdma.vtools.BufferPool`` manages a pool of fixed-size buffers in one MR
(buffer indexes travel in ``wr_id``); the script uses it, as the python-rdma
documentation does, to send and receive datagrams on a UD QP, and shows an
RDMA READ of a registered ``bytes`` object over RC.

Run:  python examples/memory_and_bufferpool.py [--device D] [--provider P]
Exit status 0 when all checks pass.
"""
import mmap
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util

GRH = 40
QKEY = 0x55555555


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        # Registrations.
        s = b"Hello"
        ro = pd.mr(s, ibv.IBV_ACCESS_REMOTE_READ)
        print(f"bytes     -> MR addr {ro.addr:#x} length {ro.length} "
              f"lkey {ro.lkey:#x} rkey {ro.rkey:#x}")
        try:
            pd.mr(b"immutable", ibv.IBV_ACCESS_LOCAL_WRITE)
            raise RuntimeError("a read-only buffer was registered writable")
        except TypeError as e:
            print("  writable access to bytes:", e)
        b = bytearray(256)
        rw = pd.mr(b, ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE)
        print(f"bytearray -> MR length {rw.length}, sge() = {rw.sge()}")
        sge = rw.sge(length=128, off=10)
        util.check((sge.addr, sge.length) == (rw.addr + 10, 128), "bad sge")
        print(f"  sge(length=128, off=10) = {sge}")
        try:
            b.extend(b"more")
            raise RuntimeError("a registered bytearray was resized")
        except BufferError as e:
            print("  resizing it:", e)
        try:
            pd.mr(bytearray(16), ibv.IBV_ACCESS_REMOTE_WRITE)
            print("  REMOTE_WRITE without LOCAL_WRITE: accepted by this "
                  "provider")
        except rdma.SysError as e:
            print("  REMOTE_WRITE without LOCAL_WRITE:", e)
        m = mmap.mmap(-1, 4096)
        mm = pd.mr(m, ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE)
        print(f"mmap      -> MR addr {mm.addr:#x} (page aligned: "
              f"{mm.addr % mmap.PAGESIZE == 0})")
        try:
            m.close()
            raise RuntimeError("a registered mmap was closed")
        except BufferError as e:
            print("  closing it:", e)
        mm.close()          # deregistered: now the mmap may go
        m.close()

        # A BufferPool for SENDs on a UD QP (sending to itself here).
        cq = pd.cq(64)
        path = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                   qkey=QKEY))
        qp = pd.qp(ibv.IBV_QPT_UD, 16, cq, 16, cq)
        path.sqpn = path.dqpn = qp.qp_num
        qp.establish(path)
        pool = rdma.vtools.BufferPool(pd, count=32, size=GRH + 1024)
        pool.post_recvs(qp, 8)
        print(f"BufferPool: {pool.count} buffers of {pool.size} bytes, "
              f"{len(pool)} free after posting 8 receives")
        buf_idx = pool.pop()
        text = b"Hello message!"
        pool.copy_to(text, buf_idx)
        qp.post_send(ibv.send_wr(wr_id=buf_idx,
                                 sg_list=pool.make_sge(buf_idx, len(text)),
                                 opcode=ibv.IBV_WR_SEND,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 ah=pd.ah(path),
                                 remote_qpn=path.dqpn,
                                 remote_qkey=path.qkey))
        got = None
        poller = rdma.vtools.CQPoller(cq)
        for wc in poller.iterwc(count=2, timeout=args.timeout):
            if wc.opcode == ibv.IBV_WC_RECV and \
                    wc.status == ibv.IBV_WC_SUCCESS:
                got = bytes(pool.copy_from(wc.wr_id, GRH, wc.byte_len - GRH))
            # Gives the buffer back (and re-posts a receive for a RECV).
            pool.finish_wcs(qp, wc)
        util.check(not poller.timedout, "timed out")
        print(f"  received {got!r}; {len(pool)} buffers free again")
        util.check(got == text, f"received {got!r}")
        util.check(len(pool) == pool.count - 8, "a buffer was lost")

        # RDMA READ of the read-only bytes MR, over an RC loopback.
        qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        pa = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                 dqpn=qb.qp_num))
        pb = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                 dqpn=qa.qp_num))
        rdma.path.fill_path(qa, pa)
        rdma.path.fill_path(qb, pb)
        pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
        qa.establish(pa)
        qb.establish(pb, ibv.IBV_ACCESS_REMOTE_READ)
        qa.post_send(ibv.send_wr(wr_id=7, opcode=ibv.IBV_WR_RDMA_READ,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=rw.sge(len(s)),
                                 remote_addr=ro.addr, rkey=ro.rkey))
        for wc in poller.iterwc(count=1, timeout=args.timeout):
            if wc.status != ibv.IBV_WC_SUCCESS:
                raise ibv.WCError(wc, qp=qa)
        util.check(not poller.timedout, "timed out")
        print(f"RDMA READ of the bytes MR: {bytes(b[:len(s)])!r}")
        util.check(bytes(b[:len(s)]) == s, "RDMA READ returned wrong data")
        pool.close()
    print("OK")
    return 0


main.parser = util.parser(__doc__)

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
