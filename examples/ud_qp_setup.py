#!/usr/bin/env python3
"""UD QP setup for a single destination (python-rdma "UD QP Setup").

A receiver UD QP and a sender UD QP live on the same end port; the sender
is set up from an IBPath exactly as the python-rdma documentation shows
(resolve the path, create CQ and QP, set ``path.sqpn``, post receives,
``modify_to_init/rtr/rts`` with the path) and sends one datagram whose AH
comes from ``pd.ah(path)``.  The receiver checks the payload, which starts
after the 40 bytes that every UD receive reserves for the GRH.

Run:  python examples/ud_qp_setup.py [--device rxe0] [--provider ucx]
      (on this machine without RDMA hardware: RDMA_PROVIDER=ucx, or inside
      the test VM: python -m rdma.testvm -- python examples/ud_qp_setup.py)
Exit status 0 when the datagram arrived intact.
"""
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util

GRH = 40            # bytes reserved at the start of every UD receive
QKEY = 0x11111111   # Q_Keys with bit 31 set are privileged: keep it clear
DEPTH = 16


def ud_qp(pd, cq, path):
    """A UD QP brought to RTS with *path* (its pkey and qkey)."""
    qp = pd.qp(ibv.IBV_QPT_UD, DEPTH, cq, DEPTH, cq)
    path.sqpn = qp.qp_num
    qp.modify_to_init(path)     # P_Key index, port, Q_Key
    qp.modify_to_rtr(path)      # nothing more for UD
    qp.modify_to_rts(path)      # the send PSN
    return qp


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    message = b"Hello from a UD QP"
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        cq = pd.cq(2 * DEPTH)
        # The destination: a UD QP with receives posted (40 + payload bytes).
        rpath = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                    qkey=QKEY))
        receiver = ud_qp(pd, cq, rpath)
        rbuf = bytearray(GRH + 256)
        rmr = pd.mr(rbuf, ibv.IBV_ACCESS_LOCAL_WRITE)
        receiver.post_recv(ibv.recv_wr(wr_id=1, sg_list=rmr.sge()))

        # The sender, set up as the python-rdma documentation shows.
        path = IBPath(end_port, dqpn=receiver.qp_num, qkey=QKEY, DGID=gid)
        rdma.path.resolve_path(None, path, reversible=True)
        print("path", path)
        mtu = rdma.IBA.mtu_to_bytes(path.MTU)
        util.check(len(message) <= mtu, "a UD message must fit in one MTU")
        qp = ud_qp(pd, cq, path)
        sbuf = bytearray(message)
        smr = pd.mr(sbuf, ibv.IBV_ACCESS_LOCAL_WRITE)
        qp.post_send(ibv.send_wr(wr_id=2,
                                 sg_list=smr.sge(),
                                 opcode=ibv.IBV_WR_SEND,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 ah=pd.ah(path),
                                 remote_qpn=path.dqpn,
                                 remote_qkey=path.qkey))

        got = {}
        poller = rdma.vtools.CQPoller(cq)
        for wc in poller.iterwc(count=2, timeout=args.timeout):
            if wc.status != ibv.IBV_WC_SUCCESS:
                raise ibv.WCError(wc, qp=qp if wc.wr_id == 2 else receiver)
            got[wc.wr_id] = wc
        util.check(not poller.timedout, "no completion within the timeout")
        wc = got[1]
        payload = bytes(rbuf[GRH:wc.byte_len])
        print(f"send completed: {ibv.wc_opcode_str(got[2].opcode)}")
        print(f"received {wc.byte_len} bytes ({GRH} of GRH + "
              f"{wc.byte_len - GRH} of payload) from QP {wc.src_qp:#x}, "
              f"GRH present: {bool(wc.wc_flags & ibv.IBV_WC_GRH)}")
        print("payload:", payload)
        util.check(payload == message, f"payload {payload!r} != {message!r}")
        util.check(wc.src_qp == qp.qp_num, "wrong source QP in the completion")
    print("OK")
    return 0


main.parser = util.parser(__doc__)

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
