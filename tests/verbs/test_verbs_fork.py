"""fork(): objects inherited by a child process are unusable there.

libibverbs without ``ibv_fork_init`` leaves a child's use of its parent's
objects undefined; on the fabric a child that posted on them used to break
the parent's QPs (even ones it never touched) or deadlock on a lock the
parent's progress thread held at fork time.  Here every method of an
inherited object raises ``SysError(EPERM, "fork")`` in the child, closing
one there only forgets it (the resource is the parent's), and a Context the
child opens itself works.  The parent's objects go on as if nothing
happened.
"""
import errno
import os
import pickle
import select
import signal
import time


import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import check_ok, make_pair, pattern, poll_cq

CHILD_TIMEOUT = 60


def _child_checks(end_port, provider, a, b):
    """What the child does; returns a dict of results (pickled to the
    parent)."""
    out = {}
    attempts = {
        "post_send": lambda: a.qp.post_send(a.send_wr(b, wr_id=7)),
        "post_recv": lambda: b.post_recv(wr_id=7),
        "poll": lambda: a.send_cq.poll(),
        "query_qp": lambda: a.qp.query(ibv.IBV_QP_STATE),
        "modify_qp": lambda: a.qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR),
                                         ibv.IBV_QP_STATE),
        "pd": lambda: a.ctx.pd(),
        "cq": lambda: a.ctx.cq(4),
        "reg_mr": lambda: a.pd.mr(bytearray(64), ibv.IBV_ACCESS_LOCAL_WRITE),
        "query_port": lambda: a.ctx.query_port(1),
    }
    for name, call in attempts.items():
        try:
            call()
            out[name] = "no error"
        except rdma.SysError as e:
            out[name] = (e.errno, e.func, "fork" in str(e))
        except Exception as e:                   # noqa: BLE001
            out[name] = repr(e)
    # closing inherited objects forgets them (the parent's stay)
    a.close()
    out["ctx_close"] = repr(a.ctx.close())
    # a Context of the child's own works: a SEND between two of its QPs.
    # On the fabric every process is its own node: the end port the
    # parent read is read again for the child (its GID changes)
    tls = os.environ.get("UCX_TLS", "")
    if provider == "ucx" and tls and "shm" not in tls:
        # UCX's tcp transport does not survive fork(): a clear error
        try:
            rdma.get_verbs(end_port).close()
            out["own"] = "no error"
        except rdma.SysError as e:
            out["own"] = (e.errno, "fork()" in str(e))
        return out
    parent_gid = end_port.gids[0]
    with rdma.get_verbs(end_port) as ctx:
        out["gid_changed"] = (provider != "ucx" or
                              ctx.end_port.gids[0] != parent_gid)
        x, y = make_pair(ctx, ctx, ibv.IBV_QPT_RC)
        y.post_recv(wr_id=1)
        x.buf[:8] = b"childok!"
        x.qp.post_send(x.send_wr(y, wr_id=2))
        check_ok(poll_cq(x.send_cq, 1)[0])
        check_ok(poll_cq(y.recv_cq, 1)[0])
        out["own"] = bytes(y.buf[:8])
        x.close()
        y.close()
    return out


def _fork_and_run(end_port, provider, a, b):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                 # the child
        code = 0
        try:
            os.close(r)
            res = _child_checks(end_port, provider, a, b)
        except BaseException as e:               # noqa: BLE001
            res = {"crash": repr(e)}
            code = 1
        try:
            os.write(w, pickle.dumps(res))
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([r], [], [], max(left, 0))
            if not ready:
                raise AssertionError("the child hung (deadlock?)")
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL) if not data else None
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    assert data, f"the child ended without a result ({status:#x})"
    return pickle.loads(data), status


def test_objects_inherited_across_fork(end_port, provider):
    """The child's calls on inherited objects raise SysError(EPERM) naming
    fork; its own Context works; the parent's QPs (the ones the child
    tried, and another) still carry traffic afterwards."""
    ctx = rdma.get_verbs(end_port)
    try:
        a, b = make_pair(ctx, ctx, ibv.IBV_QPT_RC)
        c, d = make_pair(ctx, ctx, ibv.IBV_QPT_RC)
        for s, r in ((a, b), (c, d)):
            r.post_recv(wr_id=1)
            s.buf[:8] = pattern(8, 1)
            s.qp.post_send(s.send_wr(r))
            check_ok(poll_cq(s.send_cq, 1)[0])
            check_ok(poll_cq(r.recv_cq, 1)[0])
        res, status = _fork_and_run(end_port, provider, a, b)
        assert "crash" not in res, res
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        for name in ("post_send", "post_recv", "poll", "query_qp",
                     "modify_qp", "pd", "cq", "reg_mr", "query_port"):
            assert res[name] == (errno.EPERM, "fork", True), (name, res[name])
        assert res["ctx_close"] == "None"
        tls = os.environ.get("UCX_TLS", "")
        if provider == "ucx" and tls and "shm" not in tls:
            assert res["own"] == (errno.EOPNOTSUPP, True), res["own"]
        else:
            assert res["own"] == b"childok!"
            assert res["gid_changed"]
        # the parent: both pairs still work, in both directions
        for s, r in ((a, b), (b, a), (c, d), (d, c)):
            r.post_recv(wr_id=3)
            s.buf[:8] = pattern(8, 2)
            s.qp.post_send(s.send_wr(r, wr_id=4))
            check_ok(poll_cq(s.send_cq, 1)[0], wr_id=4)
            check_ok(poll_cq(r.recv_cq, 1)[0], wr_id=3)
            assert bytes(r.buf[:8]) == pattern(8, 2)
        for s in (a, b, c, d):
            s.close()
    finally:
        ctx.close()
