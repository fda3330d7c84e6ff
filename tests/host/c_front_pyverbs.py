"""rdma-core's pyverbs (Cython over libibverbs) on ucx0 through the verbs
front end: run with Debian's /usr/bin/python3 under ``python -m rdma.fabric
exec`` by tests/host/test_c_front.py (and, beside rxe, by
tests/vm/test_c_front_vm.py).  Two RC QPs of one process, connected by LID
(or by GID with ``DEV:GID_INDEX``): a SEND and an RDMA WRITE, checked byte
for byte, on each device named (default: ucx0), all in one process.
Prints "ok"::

    c_front_pyverbs.py [DEV[:GID_INDEX]...]
"""
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR


def poll(cq, n=1):
    for _ in range(1000000):
        got, wcs = cq.poll(n)
        if got:
            return wcs
    raise SystemExit("no completion")


def main(argv):
    names = [x.name.decode() for x in d.get_device_list()]
    for spec in argv or ["ucx0"]:
        dev, _, gid_index = spec.partition(":")
        assert dev in names, names
        two_qps(dev, int(gid_index) if gid_index else None)
    print("ok")
    return 0


def two_qps(dev, gid_index):
    """A SEND and an RDMA WRITE between two RC QPs of device dev."""
    with d.Context(name=dev) as ctx:
        lid = ctx.query_port(1).lid
        pd = PD(ctx)
        acc = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
               e.IBV_ACCESS_REMOTE_READ)
        mrs = [MR(pd, 4096, acc) for _ in range(2)]
        cqs = [CQ(ctx, 16) for _ in range(2)]
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                    max_recv_sge=1)
        qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                 cap=cap)) for cq in cqs]
        for me, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
            attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
            attr.qp_access_flags = acc
            me.to_init(attr)
            attr = QPAttr(qp_state=e.IBV_QPS_RTR, port_num=1)
            attr.dest_qp_num = peer.qp_num
            attr.path_mtu = e.IBV_MTU_1024
            if gid_index is None:
                attr.ah_attr = AHAttr(dlid=lid, port_num=1)
            else:
                gr = GlobalRoute(dgid=ctx.query_gid(1, gid_index),
                                 sgid_index=gid_index)
                attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
            me.to_rtr(attr)
            attr.qp_state = e.IBV_QPS_RTS
            me.to_rts(attr)
        assert qps[0].qp_state == e.IBV_QPS_RTS
        # SEND
        text = f"pyverbs on {dev:5}".encode()[:15]
        mrs[0].write(text, 15)
        qps[1].post_recv(RecvWR(wr_id=1, num_sge=1,
                                sg=[SGE(mrs[1].buf, 64, mrs[1].lkey)]))
        qps[0].post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(mrs[0].buf, 15, mrs[0].lkey)]))
        wc = poll(cqs[0])[0]
        assert wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 2, wc
        wc = poll(cqs[1])[0]
        assert wc.status == e.IBV_WC_SUCCESS and wc.byte_len == 15, wc
        assert mrs[1].read(15, 0) == text
        # RDMA WRITE into the second MR at offset 1024
        mrs[0].write(bytes(range(256)), 256)
        wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(mrs[0].buf, 256, mrs[0].lkey)])
        wr.set_wr_rdma(mrs[1].rkey, mrs[1].buf + 1024)
        qps[0].post_send(wr)
        wc = poll(cqs[0])[0]
        assert wc.status == e.IBV_WC_SUCCESS and wc.wr_id == 3, wc
        assert mrs[1].read(256, 1024) == bytes(range(256))
        for o in qps + mrs + cqs + [pd]:
            o.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
