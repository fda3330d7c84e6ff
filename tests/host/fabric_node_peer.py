"""A fabric node driven by JSON lines on stdin, for the tests of the node's
files (tests/host/test_fabric_nodefiles.py): a full /dev/shm, pid
namespaces.

    python fabric_node_peer.py

It opens ucx0, makes an RC QP and a 64 KiB MR over a bytearray and prints
its address as one JSON line (gid, lid, qpn, pid, addr, rkey of the MR, or
{"error": ...} if the device cannot be opened).
Then it answers commands, one JSON line each:

- {"op": "connect", "gid"|"lid": ..., "qpn": N}: the QP to RTS, {"ok": 1}
  or {"error": "...", "errno": N};
- {"op": "reg", "n": N}: registers N more MRs, {"ok": N} or the error;
- {"op": "recv"}: posts a receive, waits for it, {"status": S, "data": hex};
- {"op": "send", "data": hex}: one SEND, {"status": S};
- {"op": "write", "addr": A, "rkey": K, "len": N}: one RDMA WRITE of N
  bytes 0x5a there, {"status": S, "stats": this node's key-page counters};
- {"op": "peek", "off": O, "len": N}: {"data": hex} of its own buffer;
- {"op": "fork"}: forks a child that sleeps 60 s, {"child": pid};
- {"op": "exit"}.
"""
from __future__ import annotations

import json
import os
import sys

import rdma
import rdma.ibverbs as ibv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fabric_helpers import (MR_ALL, Side, connect_to_peer,  # noqa: E402
                            node_stats, poll_cq)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def error(e):
    return {"error": str(e), "errno": getattr(e, "errno", None)}


def main() -> int:
    try:
        ep = rdma.get_end_port(None, provider="ucx")
        ctx = rdma.get_verbs(ep)
        s = Side(ctx, ibv.IBV_QPT_RC, size=1 << 16, max_send_wr=16,
                 max_recv_wr=16)
    except rdma.SysError as e:
        emit(error(e))
        return 0
    emit({"gid": str(s.gid), "lid": s.lid, "qpn": s.qpn, "pid": os.getpid(),
          "addr": s.mr.addr, "rkey": s.mr.rkey})
    mrs = []
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "connect":
                connect_to_peer(s.qp, cmd, timeout=cmd.get("timeout", 14))
                emit({"ok": 1})
            elif op == "reg":
                for _ in range(cmd["n"]):
                    mrs.append(s.pd.mr(bytearray(4096), MR_ALL))
                emit({"ok": len(mrs)})
            elif op == "recv":
                s.post_recv(wr_id=1, off=0, length=1024)
                emit({"posted": 1})
                wc = poll_cq(s.recv_cq, 1, timeout=20)[0]
                emit({"status": wc.status,
                      "data": bytes(s.buf[:wc.byte_len]).hex()})
            elif op == "send":
                data = bytes.fromhex(cmd["data"])
                s.buf[4096:4096 + len(data)] = data
                s.qp.post_send(ibv.send_wr(
                    wr_id=2, opcode=ibv.IBV_WR_SEND,
                    sg_list=s.mr.sge(length=len(data), off=4096),
                    send_flags=ibv.IBV_SEND_SIGNALED))
                wc = poll_cq(s.send_cq, 1, timeout=30)[0]
                emit({"status": wc.status})
            elif op == "write":
                n = cmd["len"]
                s.buf[8192:8192 + n] = bytes([cmd.get("byte", 0x5a)]) * n
                s.qp.post_send(ibv.send_wr(
                    wr_id=3, opcode=ibv.IBV_WR_RDMA_WRITE,
                    sg_list=s.mr.sge(length=n, off=8192),
                    remote_addr=cmd["addr"], rkey=cmd["rkey"],
                    send_flags=ibv.IBV_SEND_SIGNALED))
                wc = poll_cq(s.send_cq, 1, timeout=30)[0]
                emit({"status": wc.status, "stats": node_stats()})
            elif op == "peek":
                emit({"data": bytes(s.buf[cmd["off"]:cmd["off"] + cmd["len"]])
                      .hex()})
            elif op == "fork":
                child = os.fork()
                if child == 0:          # lives on, does nothing
                    import time
                    time.sleep(cmd.get("sleep", 60))
                    os._exit(0)
                emit({"child": child})
            else:
                break
        except (rdma.SysError, OSError) as e:
            emit(error(e))
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
