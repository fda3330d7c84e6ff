"""The writer of test_fabric_rereg_stress: RDMA WRITEs, continuously, into
an MR of the test process while that process re-registers it.

``python rereg_writer_peer.py ROUNDS``: one RC QP per round; prints its
address (``gid``, ``lid``, ``qpns``); reads the owner's (``gid``, ``lid``,
``qpns``).  Then per round, on ``{"go": r, "addr": A, "rkey": K, "len":
L, "byte": B}``: connects QP r, and WRITEs 4 KiB of byte B at offsets
cycling through [A, A+L) through K, keeping 8 in flight, until a
completion is not a success or 10 s have passed; says ``{"started": r}``
after the first success and, at the end, ``{"round": r, "ok": N,
"status": S, "statuses": [...]}`` (S: the first status that is not a
success, or -1).  ``exit`` ends it.  JSON lines (fabric_helpers.PeerProcess).
"""
import json
import sys
import time

import rdma
import rdma.ibverbs as ibv
from fabric_helpers import connect_to_peer

CHUNK = 4096
DEPTH = 8


def emit(obj):
    print(json.dumps(obj), flush=True)


def read():
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("stdin closed")
    return json.loads(line)


def run_round(qp, cq, mr, cmd):
    """WRITE until the first completion that is not a success."""
    mr.buf[:] = bytes([cmd["byte"]]) * len(mr.buf)
    n_chunks = cmd["len"] // CHUNK
    posted = done = ok = 0
    first_bad, statuses, started = -1, [], False
    end = time.monotonic() + 10
    while time.monotonic() < end:
        while first_bad < 0 and posted - done < DEPTH:
            off = (posted % n_chunks) * CHUNK
            qp.post_send(ibv.send_wr(
                wr_id=posted, opcode=ibv.IBV_WR_RDMA_WRITE,
                sg_list=mr.sge(length=CHUNK), remote_addr=cmd["addr"] + off,
                rkey=cmd["rkey"], send_flags=ibv.IBV_SEND_SIGNALED))
            posted += 1
        for wc in cq.poll(16):
            done += 1
            if wc.status == ibv.IBV_WC_SUCCESS:
                ok += 1
                if not started:
                    started = True
                    emit({"started": cmd["go"]})
            else:
                statuses.append(wc.status)
                if first_bad < 0:
                    first_bad = wc.status
        if first_bad >= 0 and done == posted:
            break
    return {"round": cmd["go"], "ok": ok, "status": first_bad,
            "statuses": sorted(set(statuses)), "posted": posted,
            "done": done}


def main(rounds):
    ctx = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
    pd = ctx.pd()
    cq = ctx.cq(64)
    qps = [pd.qp(ibv.IBV_QPT_RC, DEPTH, cq, 1, cq) for _ in range(rounds)]
    mr = pd.mr(bytearray(CHUNK), ibv.IBV_ACCESS_LOCAL_WRITE)
    ep = ctx.end_port
    emit({"gid": str(ep.gids[0]), "lid": ep.lid,
          "qpns": [q.qp_num for q in qps]})
    owner = read()
    while True:
        cmd = read()
        if cmd == "exit":
            break
        r = cmd["go"]
        connect_to_peer(qps[r], {"gid": owner["gid"], "lid": owner["lid"],
                                 "qpn": owner["qpns"][r]})
        emit(run_round(qps[r], cq, mr, cmd))
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
