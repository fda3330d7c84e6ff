"""UD multicast between processes on the software fabric (csrc/fabric/
mcast.c), over shared memory and over TCP: a SEND to a group reaches the
attached QPs of every node (another process's, and the sender's own
node's), with the group's GID as the GRH's DGID, addressed by GID or by
the multicast LID alone; a node whose QPs all detached gets nothing more;
a node that ended leaves the registry."""
import os
import time

import pytest

import rdma
import rdma.ibverbs as ibv
from rdma.IBA import GID

import fabric_helpers as fh

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "mcast_peer.py")
QKEY = 0x22222222
GRH = 40
MCAST_QPN = 0xFFFFFF
SHM = {"UCX_TLS": "shm,self", "UCX_WARN_UNUSED_ENV_VARS": "n"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo",
       "UCX_WARN_UNUSED_ENV_VARS": "n"}

pytestmark = pytest.mark.skipif(
    "ucx" not in fh.providers_with_devices(),
    reason="needs the software fabric (provider ucx)")


class Local:
    """This process's end: a sender UD QP and a receiver attached too."""

    def __init__(self, ctx):
        self.pd = ctx.pd()
        self.cq = self.pd.cq(32)
        self.buf = bytearray(8192)
        self.mr = self.pd.mr(self.buf, ibv.IBV_ACCESS_LOCAL_WRITE)
        self.tx = self.qp()
        self.rx = self.qp()

    def qp(self):
        qp = self.pd.qp(ibv.IBV_QPT_UD, 8, self.cq, 8, self.cq)
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                              port_num=1, qkey=QKEY))
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR))
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0))
        return qp

    def send(self, attr, data, wr_id):
        self.buf[:len(data)] = data
        ah = self.pd.ah(attr)
        self.tx.post_send(ibv.send_wr(
            wr_id=wr_id, opcode=ibv.IBV_WR_SEND,
            send_flags=ibv.IBV_SEND_SIGNALED,
            sg_list=self.mr.sge(length=len(data)), ah=ah,
            remote_qpn=MCAST_QPN, remote_qkey=QKEY))
        wc = rdma.pytest_plugin.poll_cq(self.cq, 1, 10)[0]
        assert wc.status == ibv.IBV_WC_SUCCESS and wc.wr_id == wr_id, wc
        ah.close()

    def close(self):
        for o in (self.tx, self.rx, self.mr, self.cq, self.pd):
            o.close()


def group_attr(mgid, mlid, by_lid):
    if by_lid:
        return ibv.ah_attr(is_global=0, port_num=1, dlid=mlid)
    return ibv.ah_attr(is_global=1, port_num=1, dlid=mlid,
                       grh=ibv.global_route(dgid=mgid, sgid_index=0,
                                            hop_limit=1))


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("by_lid", [False, True], ids=["gid", "lid"])
def test_multicast_between_processes(tmp_path, monkeypatch, tls, by_lid):
    env = SHM if tls == "shm" else TCP
    rdv = tmp_path / "rdv"
    rdv.mkdir(mode=0o700)
    env = {**env, "RDMA_UCX_DIR": str(rdv)}
    mgid, mlid = GID("ff12:401b:ffff::7:8:9"), 0xC123
    peers = [fh.PeerProcess(PEER, env=env) for _ in range(2)]
    try:
        for p in peers:
            p.send({"mgid": str(mgid), "mlid": mlid})
        for p in peers:
            assert p.read()["ready"]
        # this process's node is a third member (in a child: UCX_TLS is
        # read once per process, so the sender runs as its own peer too)
        sender = fh.PeerProcess(os.path.join(HERE, "test_fabric_mcast.py"),
                                "sender", env=env)
        try:
            sender.send({"mgid": str(mgid), "mlid": mlid, "by_lid": by_lid})
            report = sender.read()
            assert report["sent"] == 1, report
            for p in peers:
                p.send({"op": "poll", "n": 1})
                got = p.read()
                assert got["more"] == 0
                g = got["got"][0]
                assert g["status"] == 0 and g["grh"], g
                assert g["data"] == "to all nodes"
                if not by_lid:
                    assert GID(g["dgid"]) == mgid
            assert report["local"] == "to all nodes"
            # one node leaves (its QP detaches): the next SEND reaches the
            # other node and the sender's own
            peers[1].send({"op": "detach"})
            assert peers[1].read()["detached"]
            sender.send({"op": "again"})
            report = sender.read()
            assert report["local"] == "again"
            peers[0].send({"op": "poll", "n": 1})
            assert peers[0].read()["got"][0]["data"] == "again"
            time.sleep(0.2)
            peers[1].send({"op": "poll", "n": 0})
            assert peers[1].read() == {"got": [], "more": 0}
            sender.close({"op": "exit"})
        finally:
            sender.close()
        # a node that ends leaves the registry
        for p in peers:
            p.close({"op": "exit"})
        assert os.listdir(rdv / "mcast") == []
    finally:
        for p in peers:
            p.close()


def sender_main():
    """The sending node (run by the test as a peer): a sender and an
    attached receiver of its own."""
    import json
    import sys
    cmd = json.loads(sys.stdin.readline())
    mgid, mlid = GID(cmd["mgid"]), cmd["mlid"]
    attr = group_attr(mgid, mlid, cmd["by_lid"])
    ep = rdma.get_end_port(provider="ucx")
    with rdma.get_verbs(ep) as ctx:
        me = Local(ctx)
        me.rx.attach_mcast(mgid, mlid)
        for n, text in enumerate((b"to all nodes", b"again")):
            me.rx.post_recv(ibv.recv_wr(wr_id=100 + n, sg_list=me.mr.sge(
                length=512, off=4096)))
            me.send(attr, text, n + 1)
            wc = rdma.pytest_plugin.poll_cq(me.cq, 1, 10)[0]
            assert wc.status == 0 and wc.qp_num == me.rx.qp_num, wc
            local = bytes(me.buf[4096 + GRH:4096 + wc.byte_len]).decode()
            sys.stdout.write(json.dumps({"sent": n + 1, "local": local})
                             + "\n")
            sys.stdout.flush()
            if json.loads(sys.stdin.readline()).get("op") != "again":
                break
        me.rx.detach_mcast(mgid, mlid)
        me.close()
    return 0


if __name__ == "__main__":
    import sys

    import rdma.pytest_plugin  # noqa: F401 - poll_cq
    sys.exit(sender_main())
