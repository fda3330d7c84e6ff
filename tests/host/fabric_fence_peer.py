"""The two processes of test_fabric_reliability's fencing test.

``python fabric_fence_peer.py target SIZE``: alloc_mr memory of SIZE bytes
as an RDMA WRITE target; commands on stdin: ``count`` (how many bytes are
0xAB), ``close`` (deregister the MR, keeping a view of the memory),
``exit``.

``python fabric_fence_peer.py initiator SIZE``: on ``go``, one RDMA WRITE
of SIZE bytes of 0xAB into the target (the one-sided fast path: the copy
runs inside post_send), then reports its completion status.

Both speak JSON lines (fabric_helpers.PeerProcess).
"""
import json
import sys

import numpy as np

import rdma
import rdma.ibverbs as ibv
from fabric_helpers import check_ok, connect_to_peer, node_stats, poll_cq


def emit(obj):
    print(json.dumps(obj), flush=True)


def read():
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("stdin closed")
    return json.loads(line)


def main(role, size):
    ctx = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
    pd = ctx.pd()
    cq = ctx.cq(16)
    qp = pd.qp(ibv.IBV_QPT_RC, 8, cq, 8, cq)
    access = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
              ibv.IBV_ACCESS_REMOTE_READ)
    if role == "target":
        mr = pd.alloc_mr(size, access)
    else:
        src = bytearray(b"\xab") * size
        mr = pd.mr(src, access)
        zeros = pd.mr(bytearray(8), access)
    ep = ctx.end_port
    emit({"gid": str(ep.gids[0]), "lid": ep.lid, "qpn": qp.qp_num,
          "addr": mr.addr, "rkey": mr.rkey})
    peer = read()
    connect_to_peer(qp, peer)
    if role == "target":
        view = mr.buf
        emit({"ready": True})
        while True:
            cmd = read()
            if cmd == "count":
                a = np.frombuffer(view, dtype=np.uint8)
                emit({"count": int(np.count_nonzero(a == 0xAB))})
            elif cmd == "close":
                import time
                t = time.monotonic()
                mr.close()
                emit({"closed": time.monotonic() - t,
                      "revoked": node_stats()["revoked"]})
            else:
                break
        del view
        ctx.close()
        return 0
    read()                          # the target is ready
    # initiator: an 8-byte WRITE of zeros first, so that the rkey is known
    qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                             sg_list=zeros.sge(), remote_addr=peer["addr"],
                             rkey=peer["rkey"],
                             send_flags=ibv.IBV_SEND_SIGNALED))
    check_ok(poll_cq(cq, 1)[0])
    emit({"ready": True, "fast_write": node_stats()["fast_write"]})
    read()
    emit({"posting": True})
    qp.post_send(ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_RDMA_WRITE,
                             sg_list=mr.sge(), remote_addr=peer["addr"],
                             rkey=peer["rkey"],
                             send_flags=ibv.IBV_SEND_SIGNALED))
    wc = poll_cq(cq, 1, timeout=30)[0]
    emit({"status": wc.status, "fast_write": node_stats()["fast_write"]})
    read()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
