#!/usr/bin/env python3
"""One UD QP talking to several destinations (python-rdma "UD QP Setup",
multiple destinations).

Three receiver UD QPs stand for three remote end ports.  Their paths are
resolved with the same Q_Key and P_Key (``properties={'PKey': ...}``), the
sender QP is set up with ``paths[-1]`` and then every path is used in turn
in a send work request: a UD QP needs no connection, only an address handle
(``pd.ah(path)``, cached on the path) and the remote QPN and Q_Key per work
request.  Each receiver checks it got its own message.

Run:  python examples/ud_several_destinations.py [--device D] [--provider P]
      [--count N]
Exit status 0 when every destination received its message.
"""
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma import IBA
from rdma.path import IBPath

import _example_util as util

GRH = 40
QKEY = 0x22222222   # all destinations of one UD QP share its Q_Key


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        cq = pd.cq(8 * args.count + 8)
        # The destinations (in real life: QPs on other hosts, known by GID
        # and QPN).
        receivers = []
        for _ in range(args.count):
            p = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                    qkey=QKEY))
            qp = pd.qp(ibv.IBV_QPT_UD, 4, cq, 4, cq)
            p.sqpn = qp.qp_num
            qp.establish(p)                 # INIT, RTR, RTS in one call
            pool = rdma.vtools.BufferPool(pd, count=4, size=GRH + 64)
            pool.post_recvs(qp, 2)
            receivers.append((qp, pool))

        # Resolve every destination with the same P_Key and Q_Key.
        destinations = [(gid, qp.qp_num) for qp, _ in receivers]
        paths = [rdma.path.resolve_path(None,
                                        IBPath(end_port, DGID=dgid, dqpn=dqpn,
                                               qkey=QKEY),
                                        reversible=True,
                                        properties={"PKey": IBA.DEFAULT_PKEY})
                 for dgid, dqpn in destinations]
        # paths[-1] sets the QP up; all paths are interchangeable in WRs.
        sender = pd.qp(ibv.IBV_QPT_UD, 2 * args.count, cq, 1, cq)
        paths[-1].sqpn = sender.qp_num
        sender.modify_to_init(paths[-1])
        sender.modify_to_rtr(paths[-1])
        sender.modify_to_rts(paths[-1])
        spool = rdma.vtools.BufferPool(pd, count=args.count, size=64)
        for i, path in enumerate(paths):
            idx = spool.pop()
            msg = b"to destination %d" % i
            spool.copy_to(msg, idx)
            sender.post_send(spool.make_send_wr(idx, len(msg), path))
        print(f"posted {len(paths)} sends through {len(paths)} AHs "
              f"from QP {sender.qp_num:#x}")

        received = {}
        poller = rdma.vtools.CQPoller(cq)
        for wc in poller.iterwc(count=2 * args.count, timeout=args.timeout):
            if wc.qp_num == sender.qp_num:
                spool.finish_wcs(sender, wc)     # raises WCError on failure
                continue
            for qp, pool in receivers:
                if wc.qp_num == qp.qp_num:
                    if wc.status != ibv.IBV_WC_SUCCESS:
                        raise ibv.WCError(wc, qp=qp)
                    received[qp.qp_num] = bytes(
                        pool.copy_from(wc.wr_id, GRH, wc.byte_len - GRH))
                    pool.finish_wcs(qp, wc)
        util.check(not poller.timedout, "timed out waiting for completions")
        for i, (qp, _) in enumerate(receivers):
            print(f"  QP {qp.qp_num:#x} received {received.get(qp.qp_num)!r}")
            util.check(received.get(qp.qp_num) == b"to destination %d" % i,
                       f"destination {i} got {received.get(qp.qp_num)!r}")
        # The AH of each path was made once and is cached on the path.
        util.check(all(pd.ah(p) is pd.ah(p) for p in paths), "AH not cached")
    print("OK")
    return 0


main.parser = util.parser(__doc__)
main.parser.add_argument("--count", type=int, default=3,
                         help="number of destinations (default 3)")

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
