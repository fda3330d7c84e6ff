#!/usr/bin/env python3
"""Handle failed work completions (python-rdma "WC Error handling").

A work request that fails is not reported by ``post_send`` (the request was
valid when posted) but by its completion: ``wc.status`` is not
``IBV_WC_SUCCESS``.  ``raise ibv.WCError(wc, qp=qp)`` turns it into an
exception that formats the completion and carries the QP, so the handler
knows what to tear down.  This script provokes two errors on an RC
connection within one process:

1. an RDMA WRITE to memory registered without ``IBV_ACCESS_REMOTE_WRITE``:
   the responder NAKs it, the requester completes it with
   ``IBV_WC_REM_ACCESS_ERR``, its QP goes to the ERROR state and the work
   request posted after it is flushed (``IBV_WC_WR_FLUSH_ERR``);
2. an sge whose lkey is not a valid key: a local error completion
   (``IBV_WC_LOC_PROT_ERR`` on most devices; Soft-RoCE reports
   ``IBV_WC_LOC_QP_OP_ERR``).

The opcode of a failed completion is not defined by verbs: only
``wr_id``, ``status``, ``qp_num`` and ``vendor_err`` are; so tell the work
requests apart by ``wr_id``.

After each error the QPs are torn down and a new connection is made, as an
application would, and a correct RDMA WRITE shows it works again.

Run:  python examples/wc_errors.py [--device D] [--provider P]
Exit status 0 when both errors were reported as expected.
"""
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util


def connect(pd, cq, end_port, gid, access):
    """Two RC QPs of *pd* connected to each other (RTS); the second one
    grants *access* to remote requests."""
    qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
    qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
    pa = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                             dqpn=qb.qp_num, retries=1))
    pb = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                             dqpn=qa.qp_num, retries=1))
    rdma.path.fill_path(qa, pa)
    rdma.path.fill_path(qb, pb)
    pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn   # each side's receive PSN
    qa.establish(pa)
    qb.establish(pb, access)
    return qa, qb


def wait(cq, count, timeout):
    """The next *count* completions of *cq*, as a list."""
    poller = rdma.vtools.CQPoller(cq)
    wcs = list(poller.iterwc(count=count, timeout=timeout))
    util.check(not poller.timedout, f"only {len(wcs)} of {count} "
                                    f"completions arrived")
    return wcs


def check_wcs(wcs, qp):
    """python-rdma's idiom: raise WCError for the first failed one."""
    for wc in wcs:
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc, qp=qp)


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        cq = pd.cq(32)
        local = bytearray(64)
        lmr = pd.mr(local, ibv.IBV_ACCESS_LOCAL_WRITE)
        target = bytearray(64)
        # Registered for local access only: no remote write.
        closed_mr = pd.mr(target, ibv.IBV_ACCESS_LOCAL_WRITE)

        # 1. Remote access error, and the flush of what follows it.
        qa, qb = connect(pd, cq, end_port, gid, ibv.IBV_ACCESS_REMOTE_WRITE)
        local[:5] = b"hello"
        qa.post_send([
            ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                        send_flags=ibv.IBV_SEND_SIGNALED, sg_list=lmr.sge(5),
                        remote_addr=closed_mr.addr, rkey=closed_mr.rkey),
            ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_RDMA_WRITE,
                        send_flags=ibv.IBV_SEND_SIGNALED, sg_list=lmr.sge(5),
                        remote_addr=closed_mr.addr, rkey=closed_mr.rkey)])
        wcs = wait(cq, 2, args.timeout)
        try:
            check_wcs(wcs, qa)
            raise RuntimeError("the RDMA WRITE to a local-only MR succeeded")
        except ibv.WCError as err:
            print("caught:", err)
            util.check(err.status == ibv.IBV_WC_REM_ACCESS_ERR,
                       f"expected IBV_WC_REM_ACCESS_ERR, got {err}")
            util.check(err.qp is qa, "WCError.qp is not the failed QP")
            util.check(err.qp.state == ibv.IBV_QPS_ERR,
                       "the requester QP is not in the ERROR state")
            print("  the QP is now in state", err.qp.state,
                  "(IBV_QPS_ERR =", ibv.IBV_QPS_ERR, ")")
        flushed = [wc for wc in wcs if wc.wr_id == 2]
        util.check(flushed and flushed[0].status == ibv.IBV_WC_WR_FLUSH_ERR,
                   f"wr_id 2 was not flushed: {wcs}")
        print("  the next work request:",
              ibv.wc_status_str(flushed[0].status))
        util.check(bytes(target[:5]) == bytes(5), "the target was modified")
        # An ERROR QP is of no further use: tear it (and its peer) down.
        qa.close()
        qb.close()

        # 2. A local protection error: an lkey that names no MR.
        qa, qb = connect(pd, cq, end_port, gid, ibv.IBV_ACCESS_REMOTE_WRITE)
        open_buf = bytearray(64)
        open_mr = pd.mr(open_buf, ibv.IBV_ACCESS_LOCAL_WRITE |
                        ibv.IBV_ACCESS_REMOTE_WRITE)
        bad_sge = ibv.sge(addr=lmr.addr, length=5, lkey=lmr.lkey ^ 0x5a5a00)
        qa.post_send(ibv.send_wr(wr_id=3, opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=bad_sge, remote_addr=open_mr.addr,
                                 rkey=open_mr.rkey))
        try:
            check_wcs(wait(cq, 1, args.timeout), qa)
            raise RuntimeError("a bad lkey was accepted")
        except ibv.WCError as err:
            print("caught:", err)
            util.check(err.status in (ibv.IBV_WC_LOC_PROT_ERR,
                                      ibv.IBV_WC_LOC_QP_OP_ERR),
                       f"expected a local protection error, got {err}")
            util.check(err.qp.state == ibv.IBV_QPS_ERR,
                       "the QP is not in the ERROR state")
            err.qp.close()
        qb.close()

        # A fresh connection works.
        qa, qb = connect(pd, cq, end_port, gid, ibv.IBV_ACCESS_REMOTE_WRITE)
        qa.post_send(ibv.send_wr(wr_id=4, opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=lmr.sge(5), remote_addr=open_mr.addr,
                                 rkey=open_mr.rkey))
        check_wcs(wait(cq, 1, args.timeout), qa)
        util.check(bytes(open_buf[:5]) == b"hello", "the write did not land")
        print("a new connection wrote", bytes(open_buf[:5]))
    print("OK")
    return 0


main.parser = util.parser(__doc__)

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
