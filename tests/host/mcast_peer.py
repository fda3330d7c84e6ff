"""A multicast receiver for test_fabric_mcast.py, run as a peer process
(JSON lines on stdin/stdout): a UD QP on ucx0 attached to the group it is
told, with receives posted; it reports what each receive got."""
import json
import sys

import rdma
import rdma.ibverbs as ibv
from rdma.IBA import GID

QKEY = 0x22222222
GRH = 40


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ep = rdma.get_end_port(provider="ucx")
    cmd = json.loads(sys.stdin.readline())
    mgid, mlid = GID(cmd["mgid"]), cmd["mlid"]
    with rdma.get_verbs(ep) as ctx, ctx.pd() as pd:
        cq = pd.cq(16)
        qp = pd.qp(ibv.IBV_QPT_UD, 4, cq, 8, cq)
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                              port_num=1, qkey=QKEY))
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR))
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0))
        buf = bytearray(4096)
        mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE)
        for i in range(4):
            qp.post_recv(ibv.recv_wr(wr_id=i, sg_list=mr.sge(
                length=512, off=512 * i)))
        qp.attach_mcast(mgid, mlid)
        emit({"ready": True, "qpn": qp.qp_num})
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "poll":
                got = []
                for wc in rdma.pytest_plugin.poll_cq(cq, cmd["n"], 10):
                    off = 512 * wc.wr_id
                    got.append({"status": wc.status,
                                "grh": bool(wc.wc_flags & ibv.IBV_WC_GRH),
                                "dgid": str(GID(bytes(
                                    buf[off + 24:off + 40]))),
                                "data": bytes(buf[off + GRH:off + wc.byte_len])
                                .decode()})
                emit({"got": got, "more": len(cq.poll())})
            elif cmd["op"] == "detach":
                qp.detach_mcast(mgid, mlid)
                emit({"detached": True})
            elif cmd["op"] == "exit":
                break
        qp.close()
    return 0


if __name__ == "__main__":
    import rdma.pytest_plugin  # noqa: F401 - poll_cq
    sys.exit(main())
