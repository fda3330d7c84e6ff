#!/usr/bin/env python3
"""UD multicast: one datagram, several receivers.

Multicast is a UD feature.  Receivers attach their UD QP to a multicast
group, named by a multicast GID (MGID, first byte 0xff on InfiniBand; on
RoCE v2 over IPv4 an IPv4-mapped multicast address such as
``::ffff:239.1.2.3``) and, on InfiniBand, a multicast LID (0xC000 and up).
A sender needs no attachment: it sends to destination QPN 0xFFFFFF with an
AH whose DGID is the MGID.  Every attached QP with the right Q_Key gets a
copy; a multicast receive always carries a GRH.

Attaching a QP only tells the device which packets to deliver; the network
must also be told to forward the group to this port:

* on InfiniBand, a join through the subnet administrator (an MCMemberRecord
  SET) creates the group and programs the switches; this script does not do
  it, so there it needs a group that already exists;
* on RoCE v2 over IPv4 the group is an IP multicast group, joined with IGMP
  on the port's network interface (what rdma_cm does for RoCE); the script
  joins with a UDP socket (``IP_ADD_MEMBERSHIP``), which also makes the
  kernel loop the sender's own datagrams back to this host;
* the software fabric needs nothing more.

If the provider or device cannot attach QPs to multicast groups the script
prints "SKIP: ..." and exits 0.

Run:  python examples/ud_multicast.py [--device D] [--provider P]
      [--receivers N] [--mgid GID]
Exit status 0 when every receiver got the datagram (or on SKIP).
"""
import errno
import socket
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma import IBA
from rdma.IBA import GID
from rdma.path import IBPath

import _example_util as util

GRH = 40
QKEY = 0x66666666
MCAST_QPN = 0xFFFFFF


def default_mgid(end_port, sgid):
    if end_port.link_layer == "Ethernet" and \
            bytes(sgid)[:12] == b"\0" * 10 + b"\xff\xff":
        return GID("::ffff:239.1.2.3")
    return GID("ff12:401b:ffff::1:2:3")     # link-local scope, IPoIB-like


def ip_join(mgid, sgid):
    """Join the IPv4 multicast group of *mgid* on the interface whose
    address is in the IPv4-mapped *sgid*; return the socket (close it to
    leave), or None if the GIDs are not IPv4-mapped."""
    prefix = b"\0" * 10 + b"\xff\xff"
    if bytes(mgid)[:12] != prefix or bytes(sgid)[:12] != prefix:
        return None
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 bytes(mgid)[12:] + bytes(sgid)[12:])
    return s


def main(args):
    end_port = util.get_end_port(args)
    sgid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    mgid = GID(args.mgid) if args.mgid else default_mgid(end_port, sgid)
    mlid = 0 if end_port.link_layer == "Ethernet" else IBA.LID_MULTICAST
    with rdma.get_verbs(end_port) as ctx, ctx.pd() as pd:
        dev = ctx.query_device()
        print(f"device: max_mcast_grp {dev.max_mcast_grp}, "
              f"max_mcast_qp_attach {dev.max_mcast_qp_attach}")
        cq = pd.cq(16 * (args.receivers + 1))
        rpath = rdma.path.resolve_path(None, IBPath(end_port, DGID=sgid,
                                                    qkey=QKEY))
        receivers = []
        for _ in range(args.receivers):
            qp = pd.qp(ibv.IBV_QPT_UD, 4, cq, 4, cq)
            rpath.sqpn = qp.qp_num
            qp.establish(rpath)
            pool = rdma.vtools.BufferPool(pd, count=4, size=GRH + 256)
            pool.post_recvs(qp, 2)
            try:
                qp.attach_mcast(mgid, mlid)
            except rdma.SysError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL,
                               errno.EPERM):
                    print(f"SKIP: {end_port} cannot attach a QP to multicast "
                          f"group {mgid}: {e}")
                    return 0
                raise
            receivers.append((qp, pool))
        print(f"{len(receivers)} QPs attached to group {mgid} (MLID "
              f"{mlid:#x})")
        igmp = None
        if end_port.link_layer == "Ethernet":
            igmp = ip_join(mgid, sgid)
            if igmp is not None:
                print(f"joined IPv4 group {socket.inet_ntoa(bytes(mgid)[12:])}"
                      f" on {socket.inet_ntoa(bytes(sgid)[12:])} (IGMP)")

        # The sender: an ordinary UD QP; the AH points at the group.
        mpath = rdma.path.resolve_path(None, IBPath(end_port, DGID=mgid,
                                                    DLID=mlid,
                                                    dqpn=MCAST_QPN,
                                                    qkey=QKEY))
        if not mpath.SGID:
            mpath.SGID = sgid
        sender = pd.qp(ibv.IBV_QPT_UD, 4, cq, 1, cq)
        mpath.sqpn = sender.qp_num
        sender.establish(mpath)
        spool = rdma.vtools.BufferPool(pd, count=2, size=256)
        idx = spool.pop()
        text = b"to everyone in the group"
        spool.copy_to(text, idx)
        sender.post_send(spool.make_send_wr(idx, len(text), mpath))

        got = {}
        poller = rdma.vtools.CQPoller(cq)
        for wc in poller.iterwc(count=1 + len(receivers),
                                timeout=args.wait):
            if wc.qp_num == sender.qp_num:
                spool.finish_wcs(sender, wc)
                continue
            for qp, pool in receivers:
                if wc.qp_num == qp.qp_num:
                    if wc.status != ibv.IBV_WC_SUCCESS:
                        raise ibv.WCError(wc, qp=qp)
                    got[qp.qp_num] = bytes(pool.copy_from(
                        wc.wr_id, GRH, wc.byte_len - GRH))
                    util.check(wc.wc_flags & ibv.IBV_WC_GRH,
                               "a multicast receive without GRH")
                    pool.finish_wcs(qp, wc)
        for qp, _ in receivers:
            print(f"  QP {qp.qp_num:#x} received {got.get(qp.qp_num)!r}")
            qp.detach_mcast(mgid, mlid)
        if igmp is not None:
            igmp.close()                # leaves the IP group
        util.check(all(got.get(qp.qp_num) == text for qp, _ in receivers),
                   f"not every receiver got the datagram within "
                   f"{args.wait:g} s")
    print("OK")
    return 0


main.parser = util.parser(__doc__)
main.parser.add_argument("--receivers", type=int, default=2,
                         help="number of attached QPs (default 2)")
main.parser.add_argument("--mgid", help="multicast GID to use")
main.parser.add_argument("--wait", type=float, default=10.0,
                         help="seconds to wait for the datagrams (default 10)")

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
