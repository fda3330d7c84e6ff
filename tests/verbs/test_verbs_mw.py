"""Memory windows, on rxe and ucx0 alike: type 1 bound with QP.bind_mw(),
type 2 bound with an IBV_WR_BIND_MW work request, remote access through
the window's rkey only inside the window and with its rights, unbinding
and invalidation (LOCAL_INV, SEND_WITH_INV), binds a NIC refuses."""
import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import (MR_ALL, check_ok, differs, pattern, poll_cq,
                            qp_state)

pytest_plugins = ["verbs_fixtures"]

RC = ibv.IBV_QPT_RC
W, R = ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WR_RDMA_READ
RW = ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_REMOTE_READ
BINDABLE = {"access": MR_ALL | ibv.IBV_ACCESS_MW_BIND}


@pytest.fixture
def pair(pair_factory):
    return pair_factory


def write_via(a, b, rkey, remote_off, data, wr_id=1, opcode=W):
    """A writes (or reads) len(data) bytes at b.buf[remote_off] through
    rkey; return A's completion."""
    a.buf[:len(data)] = data
    a.qp.post_send(a.send_wr(b, opcode, wr_id=wr_id, length=len(data),
                             remote_off=remote_off, rkey=rkey))
    return poll_cq(a.send_cq)[0]


def test_type1_bind_access_and_unbind(pair):
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_1)
    assert mw.type == ibv.IBV_MW_TYPE_1
    old = mw.rkey
    info = ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr + 256, length=128,
                            mw_access_flags=RW)
    rkey = b.qp.bind_mw(mw, info, wr_id=42)
    assert rkey == mw.rkey and rkey != old
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW, 42)
    data = pattern(16, 1)
    check_ok(write_via(a, b, rkey, 256, data), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[256:272]) == data
    b.buf[300:308] = b"windowed"
    a.buf[:8] = bytes(8)
    check_ok(write_via(a, b, rkey, 300, bytes(8), opcode=R),
             ibv.IBV_WC_RDMA_READ)
    assert bytes(a.buf[:8]) == b"windowed"
    # unbind (length 0): the window's rkey opens nothing any more
    rkey2 = b.qp.bind_mw(mw, ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr,
                                              length=0, mw_access_flags=0))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
    before = bytes(b.buf)
    wc = write_via(a, b, rkey2, 256, b"zzzzzzzz")
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(b.buf) == before
    mw.close()


# rxe checks a window's rights but, for the range, only the MR under it
# (rxe_resp.c check_rkey -> mr_check_range): an access outside the window
# but inside the MR succeeds there, so the range case writes past the MR.
@pytest.mark.parametrize("case", ["past_mr_end", "no_read_right",
                                  "no_write_right"])
def test_type1_window_rights_and_range(pair, case):
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_1)
    rights = {"no_read_right": ibv.IBV_ACCESS_REMOTE_WRITE,
              "no_write_right": ibv.IBV_ACCESS_REMOTE_READ}.get(case, RW)
    size = len(b.buf)
    rkey = b.qp.bind_mw(mw, ibv.mw_bind_info(
        mr=b.mr, addr=b.mr.addr + size - 128, length=128,
        mw_access_flags=rights))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
    off, op = {"past_mr_end": (size - 4, W), "no_read_right": (size - 64, R),
               "no_write_right": (size - 64, W)}[case]
    before = bytes(b.buf)
    wc = write_via(a, b, rkey, off, pattern(8, 2), opcode=op)
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR, ibv.WCError(wc)
    assert bytes(b.buf) == before
    assert qp_state(a.qp) == ibv.IBV_QPS_ERR


def test_type2_bind_by_work_request_and_invalidate(pair, provider):
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    new = ibv.inc_rkey(mw.rkey)
    b.qp.post_send(ibv.send_wr(
        wr_id=7, opcode=ibv.IBV_WR_BIND_MW, send_flags=ibv.IBV_SEND_SIGNALED,
        mw=mw, rkey=new, bind_info=ibv.mw_bind_info(
            mr=b.mr, addr=b.mr.addr, length=512,
            mw_access_flags=ibv.IBV_ACCESS_REMOTE_WRITE)))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW, 7)
    assert mw.rkey == new
    data = pattern(8, 3)
    check_ok(write_via(a, b, new, 64, data), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[64:72]) == data
    # A sends with invalidate: B's receive reports the rkey it invalidated
    b.post_recv(wr_id=5, off=1024, length=64)
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND_WITH_INV, wr_id=8,
                             invalidate_rkey=new))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_SEND, 8)
    wc = poll_cq(b.recv_cq)[0]
    check_ok(wc, ibv.IBV_WC_RECV, 5)
    # rxe passes the kernel's IB_WC_WITH_INVALIDATE (1 << 2) through
    # untranslated, which the user ABI reads as IBV_WC_IP_CSUM_OK, so the
    # flag is not checked here; the key it carries and its effect are
    assert wc.invalidated_rkey == new
    if differs(provider, "mw-spec"):
        assert wc.wc_flags & ibv.IBV_WC_WITH_INV
    before = bytes(b.buf)
    wc = write_via(a, b, new, 64, b"nomore!!")
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(b.buf) == before


def test_type2_local_invalidate_and_rebind(pair):
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)

    def bind(length):
        rkey = ibv.inc_rkey(mw.rkey)
        b.qp.post_send(ibv.send_wr(
            wr_id=1, opcode=ibv.IBV_WR_BIND_MW,
            send_flags=ibv.IBV_SEND_SIGNALED, mw=mw, rkey=rkey,
            bind_info=ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr,
                                       length=length, mw_access_flags=RW)))
        check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
        return rkey

    first = bind(64)
    b.qp.post_send(ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_LOCAL_INV,
                               send_flags=ibv.IBV_SEND_SIGNALED,
                               invalidate_rkey=first))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_LOCAL_INV, 2)
    second = bind(64)
    assert second != first
    data = pattern(8, 4)
    check_ok(write_via(a, b, second, 0, data), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[:8]) == data
    # the invalidated key stays dead
    wc = write_via(a, b, first, 0, b"stalekey", wr_id=3)
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR


def test_bind_argument_errors(pair):
    a, b = pair(RC, side_b=BINDABLE)
    mw1, mw2 = b.pd.mw(ibv.IBV_MW_TYPE_1), b.pd.mw(ibv.IBV_MW_TYPE_2)
    info = ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr, length=8,
                            mw_access_flags=RW)
    with pytest.raises(ValueError, match="type 2 window is bound by posting"):
        b.qp.bind_mw(mw2, info)
    with pytest.raises(ValueError, match="bind_info.mr"):
        b.qp.bind_mw(mw1, ibv.mw_bind_info(length=8))
    with pytest.raises(TypeError):
        b.qp.bind_mw(b.mr, info)
    with pytest.raises(ValueError, match=r"needs mw"):
        b.qp.post_send(ibv.send_wr(opcode=ibv.IBV_WR_BIND_MW, bind_info=info))
    with pytest.raises(ValueError, match="not in a batch"):
        ibv.SendBatch([ibv.send_wr(opcode=ibv.IBV_WR_BIND_MW, mw=mw2,
                                   bind_info=info)])
    mw1.close()
    with pytest.raises(ValueError, match="closed"):
        b.qp.bind_mw(mw1, info)
    with pytest.raises(ValueError, match=r"\.mw is closed"):
        mw2c = b.pd.mw(ibv.IBV_MW_TYPE_2)
        wr = ibv.send_wr(opcode=ibv.IBV_WR_BIND_MW, mw=mw2c, bind_info=info)
        mw2c.close()
        b.qp.post_send(wr)
    # an MR without IBV_ACCESS_MW_BIND: the device refuses the bind
    plain = b.pd.mr(bytearray(64), MR_ALL)
    try:
        b.qp.bind_mw(b.pd.mw(ibv.IBV_MW_TYPE_1),
                     ibv.mw_bind_info(mr=plain, addr=plain.addr, length=8,
                                      mw_access_flags=RW))
    except ibv.SysError as e:
        assert e.func == "ibv_bind_mw"
    else:
        wc = poll_cq(b.send_cq)[0]
        assert wc.status != ibv.IBV_WC_SUCCESS


def bind2(b, mw, length, rights=RW, off=0, wr_id=1):
    """Bind type 2 window mw on B's QP to [off, off + length) of B's MR
    with the next rkey; return it (the bind's completion checked)."""
    rkey = ibv.inc_rkey(mw.rkey)
    b.qp.post_send(ibv.send_wr(
        wr_id=wr_id, opcode=ibv.IBV_WR_BIND_MW,
        send_flags=ibv.IBV_SEND_SIGNALED, mw=mw, rkey=rkey,
        bind_info=ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr + off,
                                   length=length, mw_access_flags=rights)))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW, wr_id)
    return rkey


def test_type1_rebind_kills_the_old_rkey(pair):
    """A rebind gives the window a new rkey; the old one opens nothing."""
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_1)
    info = ibv.mw_bind_info(mr=b.mr, addr=b.mr.addr, length=256,
                            mw_access_flags=RW)
    first = b.qp.bind_mw(mw, info)
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
    second = b.qp.bind_mw(mw, info)
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
    assert second != first and (second >> 8) == (first >> 8)
    check_ok(write_via(a, b, second, 0, pattern(8, 5)),
             ibv.IBV_WC_RDMA_WRITE)
    before = bytes(b.buf)
    wc = write_via(a, b, first, 0, b"oldgener", wr_id=2)
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(b.buf) == before


def test_window_range_inside_the_mr(pair, provider):
    """An access outside the window but inside its MR: refused on ucx0 as
    the IB spec says (mw-spec); rxe checks only the MR's range."""
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    rkey = bind2(b, mw, 64, off=128)
    check_ok(write_via(a, b, rkey, 128 + 56, pattern(8, 6)),
             ibv.IBV_WC_RDMA_WRITE)
    before = bytes(b.buf)
    wc = write_via(a, b, rkey, 128 + 60, b"straddle", wr_id=2)
    if differs(provider, "mw-spec"):
        assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
        assert bytes(b.buf) == before
        assert qp_state(a.qp) == ibv.IBV_QPS_ERR
    else:
        check_ok(wc, ibv.IBV_WC_RDMA_WRITE)


def test_type2_dealloc_while_bound(pair):
    """Deallocating a bound window closes it to remote access."""
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    rkey = bind2(b, mw, 64)
    check_ok(write_via(a, b, rkey, 0, pattern(8, 7)), ibv.IBV_WC_RDMA_WRITE)
    mw.close()
    before = bytes(b.buf)
    wc = write_via(a, b, rkey, 0, b"deadwind", wr_id=2)
    assert wc.status == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes(b.buf) == before


def test_type2_bound_twice_fails(pair):
    """A type 2 window must be invalidated before it is bound again."""
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    rkey = bind2(b, mw, 64)
    b.qp.post_send(ibv.send_wr(
        wr_id=9, opcode=ibv.IBV_WR_BIND_MW, send_flags=ibv.IBV_SEND_SIGNALED,
        mw=mw, rkey=ibv.inc_rkey(rkey), bind_info=ibv.mw_bind_info(
            mr=b.mr, addr=b.mr.addr, length=64, mw_access_flags=RW)))
    wc = poll_cq(b.send_cq)[0]
    assert wc.status == ibv.IBV_WC_MW_BIND_ERR, ibv.WCError(wc)
    assert qp_state(b.qp) == ibv.IBV_QPS_ERR


@pytest.mark.parametrize("case", ["no_mw_bind", "outside_mr",
                                  "write_without_local_write"])
def test_bind_refused_by_the_device(pair, case):
    """Binds a NIC refuses: an MR without IBV_ACCESS_MW_BIND, a window not
    inside its MR, remote write over an MR without LOCAL_WRITE.  The bind
    completes with MW_BIND_ERR, the QP goes to ERR, the rkey opens
    nothing."""
    a, b = pair(RC, side_b=BINDABLE)
    acc = {"no_mw_bind": MR_ALL,
           "outside_mr": MR_ALL | ibv.IBV_ACCESS_MW_BIND,
           "write_without_local_write":
               ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_MW_BIND}[case]
    buf = bytearray(256)
    mr = b.pd.mr(buf, acc)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    rkey = ibv.inc_rkey(mw.rkey)
    length = 512 if case == "outside_mr" else 64
    rights = (ibv.IBV_ACCESS_REMOTE_WRITE
              if case == "write_without_local_write" else RW)
    b.qp.post_send(ibv.send_wr(
        wr_id=3, opcode=ibv.IBV_WR_BIND_MW, send_flags=ibv.IBV_SEND_SIGNALED,
        mw=mw, rkey=rkey, bind_info=ibv.mw_bind_info(
            mr=mr, addr=mr.addr, length=length, mw_access_flags=rights)))
    wc = poll_cq(b.send_cq)[0]
    assert wc.status == ibv.IBV_WC_MW_BIND_ERR, ibv.WCError(wc)
    assert qp_state(b.qp) == ibv.IBV_QPS_ERR
    assert bytes(buf) == bytes(256)


def test_local_invalidate_of_an_mr_key_fails(pair):
    """LOCAL_INV of a (not fast-registered) MR's key fails; the QP goes to
    ERR."""
    a, b = pair(RC, side_b=BINDABLE)
    b.qp.post_send(ibv.send_wr(wr_id=4, opcode=ibv.IBV_WR_LOCAL_INV,
                               send_flags=ibv.IBV_SEND_SIGNALED,
                               invalidate_rkey=b.mr.rkey))
    wc = poll_cq(b.send_cq)[0]
    assert wc.status != ibv.IBV_WC_SUCCESS
    assert qp_state(b.qp) == ibv.IBV_QPS_ERR


def test_send_with_inv_of_a_bad_key(pair, provider):
    """A SEND_WITH_INV naming an rkey that is no window of the receiver's
    (the window's next generation): the receive fails; on ucx0 the SEND
    too, NAKed as an invalid request (mw-spec; rxe acknowledges it)."""
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_2)
    rkey = bind2(b, mw, 64)
    b.post_recv(wr_id=5, off=1024, length=64)
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND_WITH_INV, wr_id=8,
                             invalidate_rkey=ibv.inc_rkey(rkey)))
    swc = poll_cq(a.send_cq)[0]
    rwc = poll_cq(b.recv_cq)[0]
    assert rwc.status != ibv.IBV_WC_SUCCESS, rwc
    if differs(provider, "mw-spec"):
        assert swc.status == ibv.IBV_WC_REM_INV_REQ_ERR
        assert rwc.status == ibv.IBV_WC_REM_INV_REQ_ERR
    mw.close()


def test_requests_after_local_work_requests(pair):
    """BIND_MW and LOCAL_INV go nowhere on the wire: the requests the same
    QP posts after them (a WRITE, a SEND) arrive and complete."""
    a, b = pair(RC, side_a=BINDABLE, side_b=BINDABLE)
    mw = a.pd.mw(ibv.IBV_MW_TYPE_2)
    key = bind2(a, mw, 64)
    a.qp.post_send(ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_LOCAL_INV,
                               send_flags=ibv.IBV_SEND_SIGNALED,
                               invalidate_rkey=key))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_LOCAL_INV, 2)
    mw1 = a.pd.mw(ibv.IBV_MW_TYPE_1)
    a.qp.bind_mw(mw1, ibv.mw_bind_info(mr=a.mr, addr=a.mr.addr, length=64,
                                       mw_access_flags=RW), wr_id=3)
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_BIND_MW, 3)
    data = pattern(8, 9)
    check_ok(write_via(a, b, b.mr.rkey, 0, data, wr_id=4),
             ibv.IBV_WC_RDMA_WRITE, 4)
    assert bytes(b.buf[:8]) == data
    b.post_recv(wr_id=5, off=1024, length=64)
    a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND, wr_id=6))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_SEND, 6)
    check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 5)



def test_dereg_with_a_window_bound_keeps_the_mr(pair):
    """MR.close() while a window is bound to the MR is refused (EINVAL, as
    rxe's dereg_mr says) and the MR stays open: its keys still work, its
    window too; once the window is gone the MR closes."""
    import errno

    import rdma
    a, b = pair(RC, side_b=BINDABLE)
    mw = b.pd.mw(ibv.IBV_MW_TYPE_1)
    rkey = b.qp.bind_mw(mw, ibv.mw_bind_info(
        mr=b.mr, addr=b.mr.addr + 256, length=128, mw_access_flags=RW))
    check_ok(poll_cq(b.send_cq)[0], ibv.IBV_WC_BIND_MW)
    with pytest.raises(rdma.SysError) as ei:
        b.mr.close()
    assert ei.value.errno == errno.EINVAL
    assert "ibv_dereg_mr" in str(ei.value)
    assert not b.mr.closed
    data = pattern(16, 7)
    check_ok(write_via(a, b, b.mr.rkey, 64, data), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[64:80]) == data
    check_ok(write_via(a, b, rkey, 256, data[::-1]), ibv.IBV_WC_RDMA_WRITE)
    assert bytes(b.buf[256:272]) == data[::-1]
    mw.close()
    b.mr.close()
    assert b.mr.closed
    b.mr.close()                # closed: a no-op
