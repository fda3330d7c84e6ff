"""MR.rereg (ibv_rereg_mr) on every provider: a new access (the keys stay,
remote access follows the new rights at once), a new PD (the MR serves
that PD's QPs only), a new range (new keys; a peer's rkey of the old
range fails with REM_ACCESS_ERR and writes nothing), the arguments a NIC
refuses.  rxe re-registers nothing: rdma-core's rxe provider has no
rereg_mr (libibverbs answers EOPNOTSUPP, or EINVAL for a new PD or
range), though the kernel's rxe could change PD and access; ucx0 follows
the IB spec ([rereg-mr]), and on rxe each test checks the refusal leaves
the MR as it was."""
import errno

import pytest

import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import MR_ALL, check_ok, differs, pattern, poll_cq

pytest_plugins = ["verbs_fixtures"]

RC = ibv.IBV_QPT_RC
W, R = ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WR_RDMA_READ
LW = ibv.IBV_ACCESS_LOCAL_WRITE
CH_T = ibv.IBV_REREG_MR_CHANGE_TRANSLATION
CH_PD = ibv.IBV_REREG_MR_CHANGE_PD
CH_ACC = ibv.IBV_REREG_MR_CHANGE_ACCESS


@pytest.fixture
def pair(pair_factory):
    return pair_factory


def refused(provider, mr, *args, **kw):
    """On a provider without rereg_mr (rxe): MR.rereg(*args, **kw) fails
    with EOPNOTSUPP or EINVAL, the MR as it was; True.  Elsewhere False
    (the test goes on and calls rereg itself)."""
    if differs(provider, "rereg-mr"):
        return False
    keys, pd = (mr.lkey, mr.rkey, mr.addr, mr.length, mr.access), mr.pd
    with pytest.raises(rdma.SysError) as ei:
        mr.rereg(*args, **kw)
    assert ei.value.errno in (errno.EOPNOTSUPP, errno.EINVAL)
    assert (mr.lkey, mr.rkey, mr.addr, mr.length, mr.access) == keys
    assert mr.pd is pd
    return True


def remote(a, b, opcode, remote_off, data, rkey=None, remote_addr=None,
           wr_id=1):
    """A writes data to (or reads len(data) bytes from) b at remote_off
    (or remote_addr) through rkey (b.mr's by default); A's completion."""
    a.buf[:len(data)] = data
    kw = {"rkey": b.mr.rkey if rkey is None else rkey}
    if remote_addr is not None:
        kw["remote_addr"] = remote_addr
    a.qp.post_send(a.send_wr(b, opcode, wr_id=wr_id, length=len(data),
                             remote_off=remote_off, **kw))
    return poll_cq(a.send_cq)[0]


def test_rereg_access(pair, provider):
    """IBV_REREG_MR_CHANGE_ACCESS: the keys stay; a READ the new access
    grants works, a WRITE it no longer grants is REM_ACCESS_ERR and
    leaves the target's bytes alone."""
    a, b = pair(RC)
    check_ok(remote(a, b, W, 64, pattern(32, 1)), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[64:96]) == pattern(32, 1)
    lkey, rkey = b.mr.lkey, b.mr.rkey
    if refused(provider, b.mr, CH_ACC, access=LW | ibv.IBV_ACCESS_REMOTE_READ):
        return
    b.mr.rereg(CH_ACC, access=LW | ibv.IBV_ACCESS_REMOTE_READ)
    assert (b.mr.lkey, b.mr.rkey) == (lkey, rkey)
    assert b.mr.access == LW | ibv.IBV_ACCESS_REMOTE_READ
    b.buf[200:208] = b"readable"
    check_ok(remote(a, b, R, 200, bytes(8)), ibv.IBV_WC_RDMA_READ)
    assert bytes(a.buf[:8]) == b"readable"
    before = bytes(b.buf)
    wc = remote(a, b, W, 64, pattern(32, 2))
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(b.buf) == before


def test_rereg_access_grants(pair, provider):
    """An MR registered without remote access, re-registered with
    REMOTE_WRITE: the peer's WRITE lands."""
    a, b = pair(RC, side_b={"access": LW})
    if refused(provider, b.mr, CH_ACC, access=MR_ALL):
        return
    b.mr.rereg(CH_ACC, access=MR_ALL)
    check_ok(remote(a, b, W, 8, pattern(24, 3)), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[8:32]) == pattern(24, 3)


def test_rereg_pd(pair, ctx, provider):
    """IBV_REREG_MR_CHANGE_PD: the MR belongs to the new PD (MR.pd); a
    remote WRITE through a QP of the old PD is REM_ACCESS_ERR."""
    a, b = pair(RC)
    pd2 = ctx.pd()
    try:
        rkey = b.mr.rkey
        if refused(provider, b.mr, CH_PD, pd=pd2):
            return
        b.mr.rereg(CH_PD, pd=pd2)
        assert b.mr.pd is pd2 and b.mr.rkey == rkey
        before = bytes(b.buf)
        wc = remote(a, b, W, 0, pattern(16, 4))
        assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
        assert bytes(b.buf) == before
        b.mr.rereg(CH_PD, pd=b.pd)
        assert b.mr.pd is b.pd
    finally:
        b.mr.close()
        pd2.close()


def test_rereg_translation(pair, provider):
    """IBV_REREG_MR_CHANGE_TRANSLATION: the MR covers a new buffer with
    new keys; the peer writes there with the new rkey, and its rkey of
    the old range fails (REM_ACCESS_ERR) without touching either buffer."""
    a, b = pair(RC)
    old_buf, old_rkey, old_addr = b.buf, b.mr.rkey, b.mr.addr
    new = bytearray(8192)
    if refused(provider, b.mr, CH_T, buf=new):
        check_ok(remote(a, b, W, 0, pattern(8, 5)), ibv.IBV_WC_RDMA_WRITE)
        return
    b.mr.rereg(CH_T, buf=new)
    assert b.mr.buf is new and b.mr.length == 8192
    assert b.mr.rkey != old_rkey and b.mr.lkey == b.mr.rkey
    b.buf = new
    check_ok(remote(a, b, W, 4096, pattern(40, 6)), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(new[4096:4136]) == pattern(40, 6)
    old_before, new_before = bytes(old_buf), bytes(new)
    wc = remote(a, b, W, 0, pattern(40, 7), rkey=old_rkey,
                remote_addr=old_addr)
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(old_buf) == old_before and bytes(new) == new_before


def test_rereg_bad_arguments(ctx):
    """The arguments refused before the provider is asked, and what the
    provider refuses: the MR is as it was after each."""
    with ctx.pd() as pd:
        buf = bytearray(4096)
        mr = pd.mr(buf, MR_ALL)
        keys = (mr.lkey, mr.rkey)
        with pytest.raises(ValueError, match="flags"):
            mr.rereg(0)
        with pytest.raises(ValueError, match="flags"):
            mr.rereg(8)
        with pytest.raises(TypeError, match="pd"):
            mr.rereg(CH_PD)
        with pytest.raises(TypeError, match="buf"):
            mr.rereg(CH_T)
        with pytest.raises(TypeError, match="read-only"):
            mr.rereg(CH_T, buf=b"read-only bytes")
        ro = pd.mr(bytes(64), ibv.IBV_ACCESS_REMOTE_READ)
        with pytest.raises(TypeError, match="read-only"):
            ro.rereg(CH_ACC, access=LW)
        ro.close()
        assert (mr.lkey, mr.rkey) == keys and mr.buf is buf
        amr = pd.alloc_mr(4096, MR_ALL)
        with pytest.raises(ValueError, match="alloc_mr"):
            amr.rereg(CH_T, buf=bytearray(64))
        amr.close()
        mr.close()
        with pytest.raises(ValueError):
            mr.rereg(CH_ACC, access=LW)


def test_rereg_access_alloc_mr(pair, provider):
    """The same on memory from PD.alloc_mr (on ucx0 the one-sided fast
    path's, published in the key page): a peer that wrote through the MR
    before the rereg has its rkey cached, and its next WRITE is refused
    all the same."""
    a, b = pair(RC)
    mr = b.pd.alloc_mr(4096, MR_ALL)
    try:
        mem = mr.buf
        for i in range(3):
            check_ok(remote(a, b, W, 0, pattern(16, i), rkey=mr.rkey,
                            remote_addr=mr.addr), ibv.IBV_WC_RDMA_WRITE)
        assert bytes(mem[:16]) == pattern(16, 2)
        if refused(provider, mr, CH_ACC,
                   access=LW | ibv.IBV_ACCESS_REMOTE_READ):
            return
        mr.rereg(CH_ACC, access=LW | ibv.IBV_ACCESS_REMOTE_READ)
        check_ok(remote(a, b, R, 0, bytes(16), rkey=mr.rkey,
                        remote_addr=mr.addr), ibv.IBV_WC_RDMA_READ)
        assert bytes(a.buf[:16]) == pattern(16, 2)
        wc = remote(a, b, W, 0, pattern(16, 9), rkey=mr.rkey,
                    remote_addr=mr.addr)
        assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
        assert bytes(mem[:16]) == pattern(16, 2)
        del mem
    finally:
        mr.close()


def test_rereg_with_window_bound(pair, provider):
    """An MR with a memory window bound to it is not re-registered
    (EINVAL, as dereg_mr; the IB spec): the window still works; once it
    is unbound the rereg goes through."""
    a, b = pair(RC, side_b={"access": MR_ALL | ibv.IBV_ACCESS_MW_BIND})
    mw = b.pd.mw(ibv.IBV_MW_TYPE_1)
    try:
        acc = LW | ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_MW_BIND
        rkey = b.qp.bind_mw(mw, ibv.mw_bind_info(
            mr=b.mr, addr=b.mr.addr, length=256,
            mw_access_flags=ibv.IBV_ACCESS_REMOTE_WRITE))
        check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
        if refused(provider, b.mr, CH_ACC, access=acc):
            return
        keys = (b.mr.lkey, b.mr.rkey, b.mr.access)
        with pytest.raises(rdma.SysError) as ei:
            b.mr.rereg(CH_ACC, access=acc)
        assert ei.value.errno == errno.EINVAL
        assert (b.mr.lkey, b.mr.rkey, b.mr.access) == keys
        check_ok(remote(a, b, W, 16, pattern(16, 8), rkey=rkey),
                 ibv.IBV_WC_RDMA_WRITE)
        assert bytes(b.buf[16:32]) == pattern(16, 8)
        b.qp.bind_mw(mw, ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr,
                                          length=0, mw_access_flags=0))
        check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
        b.mr.rereg(CH_ACC, access=acc)
        assert b.mr.access == acc
    finally:
        mw.close()
