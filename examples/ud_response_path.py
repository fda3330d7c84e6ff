#!/usr/bin/env python3
"""Reply to a UD datagram with the path of its completion (python-rdma
"UD response path").

A server UD QP does not know who will talk to it.  When a request arrives,
``ibv.WCPath(end_port, wc, buf, off, pkey=..., qkey=...)`` builds the path
the packet came on from the work completion (source QPN, SLID, SL) and the
40-byte GRH at the start of the receive buffer (source and destination GID,
traffic class, flow label, hop limit; on RoCE v2 over IPv4 the IPv4 header
in bytes 20..39).  ``.reverse()`` turns it into the path back to the sender,
and ``pd.ah(reply_path)`` the address handle for the reply.

Run:  python examples/ud_response_path.py [--device D] [--provider P]
      [--requests N]
Exit status 0 when every request got its reply.
"""
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util

GRH = 40
QKEY = 0x33333333


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        cq = pd.cq(64)
        # The server: a UD QP with a pool of receive buffers.
        spath = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                    qkey=QKEY))
        server = pd.qp(ibv.IBV_QPT_UD, 16, cq, 16, cq)
        spath.sqpn = server.qp_num
        server.establish(spath)
        spool = rdma.vtools.BufferPool(pd, count=16, size=GRH + 256)
        spool.post_recvs(server, 8)

        # A client that knows the server's GID and QPN.
        cpath = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                    dqpn=server.qp_num,
                                                    qkey=QKEY))
        client = pd.qp(ibv.IBV_QPT_UD, 16, cq, 16, cq)
        cpath.sqpn = client.qp_num
        client.establish(cpath)
        cpool = rdma.vtools.BufferPool(pd, count=16, size=GRH + 256)
        cpool.post_recvs(client, 8)
        for n in range(args.requests):
            idx = cpool.pop()
            msg = b"request %d" % n
            cpool.copy_to(msg, idx)
            client.post_send(cpool.make_send_wr(idx, len(msg), cpath))

        replies = []
        poller = rdma.vtools.CQPoller(cq)
        for wc in poller.iterwc(timeout=args.timeout):
            if wc.qp_num == client.qp_num:
                if wc.opcode == ibv.IBV_WC_RECV and \
                        wc.status == ibv.IBV_WC_SUCCESS:
                    replies.append(bytes(cpool.copy_from(
                        wc.wr_id, GRH, wc.byte_len - GRH)))
                cpool.finish_wcs(client, wc)
            elif wc.opcode == ibv.IBV_WC_RECV:
                if wc.status != ibv.IBV_WC_SUCCESS:
                    raise ibv.WCError(wc, qp=server)
                # The buffer and offset the receive was posted with.
                off = (wc.wr_id & spool.BUF_ID_MASK) * spool.size
                request_path = ibv.WCPath(end_port, wc, spool.mr.buf, off,
                                          pkey=spath.pkey, qkey=spath.qkey)
                request = bytes(spool.copy_from(wc.wr_id, GRH,
                                                wc.byte_len - GRH))
                print(f"server got {request!r} on {request_path}")
                reply_path = request_path.reverse()
                util.check(reply_path.dqpn == client.qp_num,
                           "the reply path does not lead to the client")
                spool.finish_wcs(server, wc)        # re-post the receive
                idx = spool.pop()
                reply = b"reply to " + request
                spool.copy_to(reply, idx)
                server.post_send(spool.make_send_wr(idx, len(reply),
                                                    reply_path))
            else:
                spool.finish_wcs(server, wc)
            if len(replies) == args.requests:
                break
        util.check(not poller.timedout,
                   f"timed out with {len(replies)} of {args.requests} replies")
        print("client got", replies)
        util.check(sorted(replies) ==
                   sorted(b"reply to request %d" % n
                          for n in range(args.requests)),
                   f"unexpected replies {replies}")
    print("OK")
    return 0


main.parser = util.parser(__doc__)
main.parser.add_argument("--requests", type=int, default=3,
                         help="number of requests (default 3, at most 8)")

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
