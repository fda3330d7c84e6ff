"""A QP's move to RESET and the completions of its previous life still in
its CQs: mlx4 and mlx5 purge them (their providers clean the CQs of the
QP on RESET), and so does ucx0, so a QP brought back up does not see the
flushes of its error state; rxe leaves them ([reset-cleans-cq]).
rdma-core's own test_mr rereg tests count on the purge."""
import time

import rdma.ibverbs as ibv
from verbs_fixtures import (Side, check_ok, connect_pair, differs,
                            expect_no_completion, pattern, poll_cq, qp_state)

pytest_plugins = ["verbs_fixtures"]

RC = ibv.IBV_QPT_RC
STATE = ibv.IBV_QP_STATE


def test_reset_purges_flushed_completions(ctx, provider):
    """Receives flushed by ERR, then RESET before they are polled: gone
    from the CQ on ucx0 (rxe: still there); the QPs reconnected work."""
    a = Side(ctx, RC)
    b = Side(ctx, RC)
    try:
        connect_pair(a, b)
        for i in range(3):
            b.post_recv(wr_id=10 + i, off=64 * i, length=64)
        b.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR), STATE)
        time.sleep(0.3)         # (rxe flushes from its tasks)
        for s in (a, b):
            s.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RESET), STATE)
        assert qp_state(b.qp) == ibv.IBV_QPS_RESET
        if differs(provider, "reset-cleans-cq"):
            expect_no_completion(b.recv_cq)
        else:
            wcs = poll_cq(b.recv_cq, 3)
            assert [w.wr_id for w in wcs] == [10, 11, 12]
            assert all(w.status == ibv.IBV_WC_WR_FLUSH_ERR for w in wcs)
            expect_no_completion(b.recv_cq)
        connect_pair(a, b)
        b.post_recv(wr_id=20, length=64)
        a.buf[:16] = pattern(16, 1)
        a.qp.post_send(a.send_wr(b, length=16))
        check_ok(poll_cq(a.send_cq)[0])
        check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 20)
        assert bytes(b.buf[:16]) == pattern(16, 1)
    finally:
        a.close()
        b.close()
