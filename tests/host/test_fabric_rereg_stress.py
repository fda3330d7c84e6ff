"""ibv_rereg_mr (MR.rereg) against RDMA WRITEs in flight, between real
processes: a writer process (rereg_writer_peer.py) keeps 8 WRITEs of
4 KiB in flight into an MR of this process, which re-registers the MR
under it, alternately with a new range (IBV_REREG_MR_CHANGE_TRANSLATION:
new keys) and with an access that no longer grants remote write
(IBV_REREG_MR_CHANGE_ACCESS: the keys stay).  Every round: no crash in
either process, rereg returns 0, the writer's WRITEs end with
IBV_WC_REM_ACCESS_ERR (then flushes) as the IB spec has it, and once
rereg has returned not one byte lands in memory the MR no longer opens
to the writer -- the old range, and the new range through the old key."""
import os
import random

import pytest

import fabric_helpers as fh
import rdma
import rdma.ibverbs as ibv

ROUNDS = 12
SIZE = 256 << 10
TIMEOUT = 30
TRANSPORTS = {"shm": {"UCX_TLS": "shm,self"},
              "tcp": {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}}
ACC = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
       ibv.IBV_ACCESS_REMOTE_READ)
SENTINEL = 0xEE


class Writer(fh.PeerProcess):
    def __init__(self, env):
        super().__init__(os.path.join(os.path.dirname(fh.__file__),
                                      "rereg_writer_peer.py"),
                         str(ROUNDS), env=env, timeout=TIMEOUT)


def one_round(w, qp, mr, bufs, r, writer):
    """Round r: the writer WRITEs through mr's current key while mr is
    re-registered; return what the writer reported."""
    kind = "translation" if r % 2 == 0 else "access"
    cur = bufs[r // 2 % 2] if kind == "translation" else bufs[0]
    other = bufs[1 - r // 2 % 2]
    fh.connect_to_peer(qp, {"gid": writer["gid"], "lid": writer["lid"],
                            "qpn": writer["qpns"][r]})
    cur[:] = bytes(SIZE)
    other[:] = bytes(SIZE)
    w.send({"go": r, "addr": mr.addr, "rkey": mr.rkey, "len": SIZE,
            "byte": r + 1})
    assert w.read() == {"started": r}
    if random.random() < 0.5:
        os.sched_yield()
    if kind == "translation":
        mr.rereg(ibv.IBV_REREG_MR_CHANGE_TRANSLATION, buf=other)
    else:
        mr.rereg(ibv.IBV_REREG_MR_CHANGE_ACCESS,
                 access=ibv.IBV_ACCESS_LOCAL_WRITE)
    # from here on the writer's key opens nothing: cur (the old range, or
    # the range whose remote write was withdrawn) and other (the new range,
    # behind new keys) must keep what this process puts there
    cur[:] = bytes([SENTINEL]) * SIZE
    rep = w.read(timeout=TIMEOUT)
    assert rep["round"] == r
    assert rep["ok"] >= 1, rep
    assert rep["status"] == ibv.IBV_WC_REM_ACCESS_ERR, (kind, rep)
    assert set(rep["statuses"]) <= {ibv.IBV_WC_REM_ACCESS_ERR,
                                    ibv.IBV_WC_WR_FLUSH_ERR}, rep
    assert rep["done"] == rep["posted"], rep
    assert bytes(cur) == bytes([SENTINEL]) * SIZE, \
        f"{kind}: a WRITE landed after rereg returned"
    if kind == "translation":
        assert bytes(other) == bytes(SIZE), \
            "the old key reached the new range"
    else:
        mr.rereg(ibv.IBV_REREG_MR_CHANGE_ACCESS, access=ACC)
    return rep


@pytest.mark.parametrize("tls", sorted(TRANSPORTS))
def test_rereg_against_writes_in_flight(tls):
    """ROUNDS rounds, alternately a new range and a narrower access, each
    with the writer's WRITEs in flight (over shared memory the one-sided
    paths, over TCP active messages).  The writer keeps to one transport;
    this process's node has both (the fabric's default)."""
    w = Writer(dict(TRANSPORTS[tls], UCX_WARN_UNUSED_ENV_VARS="n"))
    try:
        writer = w.read()
        with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as ctx:
            pd = ctx.pd()
            cq = ctx.cq(16)
            qps = [pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
                   for _ in range(ROUNDS)]
            ep = ctx.end_port
            w.send({"gid": str(ep.gids[0]), "lid": ep.lid,
                    "qpns": [q.qp_num for q in qps]})
            bufs = [bytearray(SIZE), bytearray(SIZE)]
            mr = pd.mr(bufs[0], ACC)
            reps = [one_round(w, qps[r], mr, bufs, r, writer)
                    for r in range(ROUNDS)]
            assert sum(rep["ok"] for rep in reps) >= ROUNDS
            mr.close()
        w.send("exit")
    finally:
        w.close(exit_msg="exit")
