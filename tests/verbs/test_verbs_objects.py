"""The verbs object model on every provider: creation, attributes, queries,
modify, memory registration of every kind of buffer, and lifetime
(ordered close, close in any order, use after close, GC without close, ASan).
"""
import errno
import gc
import mmap
import os
import random
import warnings

import pytest

from hypothesis import HealthCheck, given, settings, strategies as st

import rdma
import rdma.ibverbs as ibv
from verbs_fixtures import (MR_ALL, PORT, ah_attr_to, buffer_address,
                            check_ok, expect_no_completion,
                            own_ah_attr, poll_cq, qp_state, run_py, to_init)

pytest_plugins = ["verbs_fixtures"]

RC, UC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UC, ibv.IBV_QPT_UD
LW = ibv.IBV_ACCESS_LOCAL_WRITE


# --------------------------------------------------------------------------
# creation and attributes

def test_pd_and_cq(ctx):
    """ibv_alloc_pd, ibv_create_cq (ctx.cq and pd.cq), cq.cqe,
    ibv_resize_cq."""
    with ctx.pd() as pd:
        cq = ctx.cq(10)
        assert cq.cqe >= 10
        cq2 = pd.cq(nelems=33, comp_channel=None, vec=0)
        assert cq2.cqe >= 33
        cq2.resize(200)
        assert cq2.cqe >= 200
        assert cq.poll() == [] and cq.poll(5) == []
        cq.close()
        cq2.close()
    with pytest.raises(rdma.SysError):
        ctx.cq(1 << 30)                       # more than max_cqe
    with pytest.raises((ValueError, TypeError)):
        ctx.cq(-1)


@pytest.mark.parametrize("qp_type", [RC, UC, UD])
def test_qp_create_and_cap(ctx, qp_type):
    """ibv_create_qp: qp_num, qp_type and the actual qp.cap (>= requested)."""
    with ctx.pd() as pd:
        cq = pd.cq(32)
        qp = pd.qp(qp_type, 10, cq, 12, cq, max_send_sge=2, max_recv_sge=3,
                   max_inline_data=48)
        assert 0 < qp.qp_num < 1 << 24
        assert qp.qp_type == qp_type
        cap = qp.cap
        assert isinstance(cap, ibv.qp_cap)
        assert cap.max_send_wr >= 10 and cap.max_recv_wr >= 12
        assert cap.max_send_sge >= 2 and cap.max_recv_sge >= 3
        assert cap.max_inline_data >= 48
        assert qp_state(qp) == ibv.IBV_QPS_RESET
        qp2 = pd.qp(qp_type, 4, cq, 4, cq)
        assert qp2.qp_num != qp.qp_num


def test_qp_from_init_attr(ctx):
    """pd.qp(ibv.qp_init_attr(...)): the struct form of ibv_create_qp."""
    with ctx.pd() as pd:
        scq, rcq = pd.cq(8), pd.cq(8)
        init = ibv.qp_init_attr(qp_type=RC, send_cq=scq, recv_cq=rcq,
                                sq_sig_all=0,
                                cap=ibv.qp_cap(max_send_wr=5, max_recv_wr=6,
                                               max_send_sge=1, max_recv_sge=1))
        qp = pd.qp(init)
        assert qp.qp_type == RC
        assert qp.cap.max_send_wr >= 5 and qp.cap.max_recv_wr >= 6
        with pytest.raises(TypeError):
            pd.qp(ibv.qp_init_attr(qp_type=RC, send_cq=5, recv_cq=rcq))


def test_qp_create_errors(ctx):
    """ibv_create_qp rejects impossible capacities (SysError) and bad
    argument types (TypeError), never crashes."""
    with ctx.pd() as pd:
        cq = pd.cq(8)
        attr = ctx.query_device()
        with pytest.raises(rdma.SysError) as ei:
            pd.qp(RC, attr.max_qp_wr + 1, cq, 1, cq)
        assert ei.value.errno == errno.EINVAL and ei.value.func
        with pytest.raises(TypeError):
            pd.qp(RC, 1, "cq", 1, cq)
        with pytest.raises(TypeError):
            pd.qp(RC, 1, cq, 1, cq, srq=cq)
        other = ctx.pd()
        srq = other.srq(max_wr=4)
        # an SRQ of another PD: refused by the binding (ValueError) or by
        # the kernel (SysError); never a half-made QP
        with pytest.raises((ValueError, rdma.SysError), match="PD|pd|srq"):
            pd.qp(RC, 1, cq, 1, cq, srq=srq)
        other.close()
        ctx2 = rdma.get_verbs(ctx.end_port)
        try:
            with pytest.raises((ValueError, rdma.SysError)):
                pd.qp(RC, 1, ctx2.cq(4), 1, cq)     # a CQ of another Context
        finally:
            ctx2.close()


def test_modify_and_query_round_trip(ctx, end_port, gid_index):
    """ibv_modify_qp with a mask derived from the assigned fields, then
    ibv_query_qp returns them (nested ah_attr/grh included)."""
    with ctx.pd() as pd:
        cq = pd.cq(8)
        qp = pd.qp(RC, 4, cq, 4, cq)
        peer = pd.qp(RC, 4, cq, 4, cq)
        acc = ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_REMOTE_READ
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                              port_num=PORT, qp_access_flags=acc))
        a = qp.query(ibv.IBV_QP_STATE | ibv.IBV_QP_ACCESS_FLAGS |
                     ibv.IBV_QP_PORT | ibv.IBV_QP_PKEY_INDEX)
        assert isinstance(a, ibv.qp_attr)
        assert (a.qp_state, a.qp_access_flags, a.port_num, a.pkey_index) == \
            (ibv.IBV_QPS_INIT, acc, PORT, 0)
        gid = end_port.gids[gid_index]
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR,
                              path_mtu=ibv.IBV_MTU_512,
                              dest_qp_num=peer.qp_num, rq_psn=0x123456,
                              max_dest_rd_atomic=1, min_rnr_timer=5,
                              ah_attr=ibv.ah_attr(
                                  is_global=1, port_num=PORT, sl=0,
                                  grh=ibv.global_route(
                                      dgid=gid, sgid_index=gid_index,
                                      hop_limit=7, traffic_class=0x20,
                                      flow_label=0x12345))))
        a = qp.query(ibv.IBV_QP_STATE | ibv.IBV_QP_AV | ibv.IBV_QP_PATH_MTU
                     | ibv.IBV_QP_DEST_QPN | ibv.IBV_QP_RQ_PSN
                     | ibv.IBV_QP_MIN_RNR_TIMER)
        assert a.qp_state == ibv.IBV_QPS_RTR
        assert a.path_mtu == ibv.IBV_MTU_512
        assert a.dest_qp_num == peer.qp_num and a.rq_psn == 0x123456
        assert a.min_rnr_timer == 5
        assert isinstance(a.ah_attr, ibv.ah_attr)
        assert isinstance(a.ah_attr.grh, ibv.global_route)
        assert a.ah_attr.is_global == 1
        assert a.ah_attr.grh.dgid == gid
        assert a.ah_attr.grh.sgid_index == gid_index
        assert a.ah_attr.grh.traffic_class == 0x20
        assert a.ah_attr.grh.flow_label == 0x12345
        # RoCE: the kernel replaces hop_limit by the route's (IPv4 TTL 64)
        assert a.ah_attr.grh.hop_limit in (7, 64)
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0xABCDE,
                              timeout=9,
                              retry_cnt=3, rnr_retry=2, max_rd_atomic=1))
        a = qp.query(ibv.IBV_QP_STATE | ibv.IBV_QP_SQ_PSN | ibv.IBV_QP_TIMEOUT
                     | ibv.IBV_QP_RETRY_CNT | ibv.IBV_QP_RNR_RETRY)
        assert (a.qp_state, a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry) == \
            (ibv.IBV_QPS_RTS, 0xABCDE, 9, 3, 2)
        full = qp.query()                       # default mask: everything
        assert full.qp_state == ibv.IBV_QPS_RTS and full.sq_psn == 0xABCDE


def test_modify_explicit_mask(ctx):
    """qp.modify(attr, mask): only the masked fields are applied."""
    with ctx.pd() as pd:
        cq = pd.cq(8)
        qp = pd.qp(UD, 4, cq, 4, cq)
        attr = ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                           port_num=PORT, qkey=0x1234)
        qp.modify(attr, ibv.IBV_QP_STATE | ibv.IBV_QP_PKEY_INDEX
                  | ibv.IBV_QP_PORT | ibv.IBV_QP_QKEY)
        assert qp.query(ibv.IBV_QP_QKEY).qkey == 0x1234
        # qkey assigned but not in the mask: not applied
        attr = ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR, qkey=0x9999)
        qp.modify(attr, ibv.IBV_QP_STATE)
        a = qp.query(ibv.IBV_QP_STATE | ibv.IBV_QP_QKEY)
        assert a.qp_state == ibv.IBV_QPS_RTR and a.qkey == 0x1234


def test_modify_errors(ctx):
    """ibv_modify_qp: an illegal transition or missing attribute -> SysError
    EINVAL naming ibv_modify_qp; the QP keeps its state."""
    with ctx.pd() as pd:
        cq = pd.cq(8)
        qp = pd.qp(RC, 4, cq, 4, cq)
        with pytest.raises(rdma.SysError) as ei:
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS))   # RESET -> RTS
        assert ei.value.errno == errno.EINVAL
        assert ei.value.func == "ibv_modify_qp"
        with pytest.raises(rdma.SysError):                      # INIT misses
            # port/pkey/access
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT))
        assert qp_state(qp) == ibv.IBV_QPS_RESET
        with pytest.raises(TypeError):
            qp.modify("RTS")
        with pytest.raises((TypeError, ValueError)):
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT), mask="x")


def test_structs_keyword_repr_eq():
    """ibv.qp_attr/ah_attr/global_route/sge/send_wr/recv_wr/wc/qp_cap/
    srq_attr/qp_init_attr: keyword construction, C field names, repr, ==."""
    g = ibv.global_route(dgid="fe80::1", flow_label=5, sgid_index=1,
                         hop_limit=64, traffic_class=3)
    assert str(g.dgid) == "fe80::1"
    ah = ibv.ah_attr(grh=g, dlid=3, sl=1, src_path_bits=0, static_rate=0,
                     is_global=1, port_num=1)
    a = ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR, ah_attr=ah, alt_ah_attr=ah)
    assert a.ah_attr.grh.flow_label == 5 and a.alt_ah_attr.dlid == 3
    assert a == ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR, ah_attr=ah,
                            alt_ah_attr=ah)
    assert "qp_state" in repr(a) and repr(a).startswith("qp_attr(")
    ah.grh.dgid = bytes(range(16))
    assert bytes(ah.grh.dgid) == bytes(range(16))
    s = ibv.sge(addr=1 << 40, length=100, lkey=7)
    assert (s.addr, s.length, s.lkey) == (1 << 40, 100, 7)
    assert s == ibv.sge(addr=1 << 40, length=100, lkey=7)
    w = ibv.send_wr(wr_id=1, sg_list=[s, s], opcode=ibv.IBV_WR_SEND,
                    send_flags=ibv.IBV_SEND_SIGNALED, imm_data=0xFFFFFFFF,
                    remote_addr=5, rkey=6, compare_add=7, swap=8,
                    remote_qpn=9, remote_qkey=10, invalidate_rkey=11)
    assert w.imm_data == 0xFFFFFFFF and w.remote_qpn == 9 and w.swap == 8
    assert list(w.sg_list) == [s, s]
    assert "wr_id=1" in repr(w)
    r = ibv.recv_wr(wr_id=3, sg_list=s)
    r.next = ibv.recv_wr(wr_id=4)
    assert r.next.wr_id == 4
    wc = ibv.wc(wr_id=1, status=0, opcode=ibv.IBV_WC_RECV, byte_len=3,
                imm_data=0x80000000, qp_num=4, src_qp=5, wc_flags=0,
                pkey_index=0, slid=0, sl=0, dlid_path_bits=0, vendor_err=0)
    assert wc.imm_data == 0x80000000 and wc == ibv.wc(**{
        f: getattr(wc, f) for f in ("wr_id", "status", "opcode", "byte_len",
                                    "imm_data", "qp_num", "src_qp")})
    c = ibv.qp_cap(max_send_wr=1, max_recv_wr=2, max_send_sge=3,
                   max_recv_sge=4, max_inline_data=5)
    assert c.max_inline_data == 5
    assert ibv.srq_attr(max_wr=3, max_sge=1, srq_limit=2).srq_limit == 2
    with pytest.raises(TypeError, match="bogus"):
        ibv.qp_attr(bogus=1)
    with pytest.raises(ValueError, match="qp_state"):
        ibv.qp_attr(qp_state=1 << 40)
    with pytest.raises(TypeError, match="ah_attr"):
        ibv.qp_attr(ah_attr=5)


def test_ah(ctx, end_port, gid_index):
    """ibv_create_ah from an ah_attr; a bad sgid_index -> SysError."""
    with ctx.pd() as pd:
        ah = pd.ah(own_ah_attr(end_port))
        ah.close()
        ah.close()
        with pytest.raises(rdma.SysError):
            pd.ah(ah_attr_to(end_port.gids[gid_index], sgid_index=200))
        with pytest.raises(TypeError):
            pd.ah("nowhere")


def test_mw(ctx, provider):
    """ibv_alloc_mw type 1 and 2 / ibv_dealloc_mw."""
    with ctx.pd() as pd:
        try:
            mw = pd.mw(ibv.IBV_MW_TYPE_1)
        except rdma.SysError as e:
            pytest.fail(f"rxe supports MW type 1 but pd.mw failed: {e}")
        assert isinstance(mw.rkey, int)
        mw.close()
        mw.close()
        mw2 = pd.mw(type=ibv.IBV_MW_TYPE_2)
        mw2.close()


# --------------------------------------------------------------------------
# memory registration of buffers

def test_mr_attributes_and_sge(ctx):
    """ibv_reg_mr on a bytearray: addr/length/lkey/rkey, mr.sge() forms."""
    buf = bytearray(1000)
    with ctx.pd() as pd, pd.mr(buf, MR_ALL) as mr:
        assert mr.addr == buffer_address(buf)
        assert mr.length == 1000
        assert mr.lkey and mr.rkey is not None
        s = mr.sge()
        assert (s.addr, s.length, s.lkey) == (mr.addr, 1000, mr.lkey)
        s = mr.sge(length=10, off=990)
        assert (s.addr, s.length) == (mr.addr + 990, 10)
        s = mr.sge(off=100)
        assert (s.addr, s.length) == (mr.addr + 100, 900)
        for bad in ({"off": 1001}, {"length": 1001},
                    {"length": 11, "off": 990},
                    {"off": -1}, {"length": -1}):
            with pytest.raises(ValueError):
                mr.sge(**bad)


def test_mr_pins_bytearray(ctx):
    """An MR holds the buffer: resizing a registered bytearray raises
    BufferError; after mr.close() it works again."""
    buf = bytearray(64)
    with ctx.pd() as pd:
        mr = pd.mr(buf, LW)
        with pytest.raises(BufferError):
            buf.extend(b"x")
        with pytest.raises(BufferError):
            del buf[0:10]
        mr.close()
        buf.extend(b"x")
        assert len(buf) == 65
        mr = pd.mr(buf, LW)
    # closing the PD closed the MR and released the buffer
    buf.extend(b"y")


def test_mr_released_when_context_closes(end_port):
    """Closing the Context deregisters its MRs and releases their buffers."""
    buf = bytearray(64)
    ctx = rdma.get_verbs(end_port)
    pd = ctx.pd()
    mr = pd.mr(buf, LW)
    ctx.close()
    buf.extend(b"z")
    with pytest.raises(ValueError, match="closed"):
        mr.sge()


def test_mr_read_only_buffers(ctx):
    """bytes (read-only) can be registered with REMOTE_READ only; writable
    rights on a read-only buffer are refused."""
    with ctx.pd() as pd:
        data = b"read-only payload"
        mr = pd.mr(data, ibv.IBV_ACCESS_REMOTE_READ)
        assert mr.length == len(data)
        mr.close()
        mr = pd.mr(data)                                    # access=0
        mr.close()
        for acc in (LW, LW | ibv.IBV_ACCESS_REMOTE_WRITE,
                    LW | ibv.IBV_ACCESS_REMOTE_ATOMIC):
            with pytest.raises((BufferError, TypeError, ValueError)):
                pd.mr(data, acc)
        with pytest.raises(TypeError):
            pd.mr(12345, LW)


def test_mr_bytes_as_rdma_read_source(pair_factory, ctx):
    """RDMA READ from a bytes object registered with REMOTE_READ."""
    a, b = pair_factory(RC)
    data = bytes(range(200, 256)) * 2
    ro = b.pd.mr(data, ibv.IBV_ACCESS_REMOTE_READ)
    try:
        a.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_READ,
                                   sg_list=a.mr.sge(length=len(data)),
                                   remote_addr=ro.addr, rkey=ro.rkey,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        check_ok(poll_cq(a.send_cq)[0])
        assert bytes(a.buf[:len(data)]) == data
    finally:
        ro.close()


def test_mr_mmap(pair_factory):
    """An mmap registered for REMOTE_WRITE receives RDMA WRITEs; it cannot be
    closed while registered."""
    a, b = pair_factory(RC)
    m = mmap.mmap(-1, 8192)
    mr = b.pd.mr(m, MR_ALL)
    try:
        a.buf[:16] = b"into the mmap!!!"
        a.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                                   sg_list=a.mr.sge(length=16),
                                   remote_addr=mr.addr + 4096, rkey=mr.rkey,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        check_ok(poll_cq(a.send_cq)[0])
        assert m[4096:4112] == b"into the mmap!!!"
        assert mr.addr % mmap.PAGESIZE == 0 and mr.length == 8192
        with pytest.raises(BufferError):
            m.close()
    finally:
        mr.close()
    m.close()


def test_mr_memoryview_slice(pair_factory):
    """A memoryview slice registers exactly that slice; the view cannot be
    released while registered."""
    a, b = pair_factory(RC)
    backing = bytearray(4096)
    mv = memoryview(backing)[1000:1100]
    mr = b.pd.mr(mv, MR_ALL)
    try:
        assert mr.addr == buffer_address(backing) + 1000 and mr.length == 100
        a.buf[:100] = bytes(range(100))
        a.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                                   sg_list=a.mr.sge(length=100),
                                   remote_addr=mr.addr, rkey=mr.rkey,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        check_ok(poll_cq(a.send_cq)[0])
        assert bytes(backing[1000:1100]) == bytes(range(100))
        assert bytes(backing[:1000]) == bytes(1000)
        # one byte past the slice is out of the MR
        a.qp.post_send(ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_RDMA_WRITE,
                                   sg_list=a.mr.sge(length=1),
                                   remote_addr=mr.addr + 100, rkey=mr.rkey,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        assert poll_cq(a.send_cq)[0].status == ibv.IBV_WC_REM_ACCESS_ERR
        with pytest.raises(BufferError):
            mv.release()
    finally:
        mr.close()
    mv.release()
    with pytest.raises((BufferError, TypeError, ValueError)):
        b.pd.mr(memoryview(backing)[::2], LW)     # not contiguous


def test_mr_numpy(pair_factory):
    """A numpy array as an MR: RDMA WRITE and atomics land in it;
    non-contiguous and read-only arrays are refused for writable rights."""
    np = pytest.importorskip("numpy")
    a, b = pair_factory(RC)
    arr = np.zeros(16, dtype=np.uint64)
    mr = b.pd.mr(arr, MR_ALL)
    try:
        assert mr.addr == arr.ctypes.data and mr.length == arr.nbytes
        src = np.arange(1, 17, dtype=np.uint64)
        a.buf[:128] = src.tobytes()
        a.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_WRITE,
                                   sg_list=a.mr.sge(length=128),
                                   remote_addr=mr.addr, rkey=mr.rkey,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        check_ok(poll_cq(a.send_cq)[0])
        assert (arr == src).all()
        # atomics on an array element
        a.qp.post_send(ibv.send_wr(wr_id=2,
                                   opcode=ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                   sg_list=a.mr.sge(length=8, off=256),
                                   remote_addr=mr.addr + 8 * 3, rkey=mr.rkey,
                                   compare_add=100,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        check_ok(poll_cq(a.send_cq)[0])
        assert arr[3] == 104
    finally:
        mr.close()
    with pytest.raises((BufferError, TypeError, ValueError)):
        b.pd.mr(np.zeros((4, 4))[:, 1], LW)
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises((BufferError, TypeError, ValueError)):
        b.pd.mr(ro, LW)
    b.pd.mr(ro, ibv.IBV_ACCESS_REMOTE_READ).close()


# --------------------------------------------------------------------------
# lifetime

def _probe(kind, o):
    """Call a cheap method of object *o* (raises ValueError if closed)."""
    if kind == "ctx":
        o.query_port()
    elif kind == "pd":
        o.mr(bytearray(8)).close()
    elif kind in ("cq", "cq_cc"):
        o.poll()
    elif kind == "cc":
        o.fileno()
    elif kind == "qp":
        o.query(ibv.IBV_QP_STATE)
    elif kind == "srq":
        o.query()
    elif kind == "mr":
        o.sge()
    else:
        raise AssertionError(kind)


#: object -> its parents (a QP is a child of its PD, both CQs and its SRQ;
#: a CQ with a completion channel is a child of that channel too)
PARENTS = {
    "ctx": [], "pd": ["ctx"], "cq": ["ctx"], "cc": ["ctx"],
    "cq_cc": ["ctx", "cc"], "srq": ["pd"], "qp": ["pd", "cq", "cq_cc", "srq"],
    "mr": ["pd"], "ah": ["pd"], "mw": ["pd"],
}
PROBED = ["ctx", "pd", "cq", "cc", "cq_cc", "srq", "qp", "mr"]


def _build(end_port, provider):
    ctx = rdma.get_verbs(end_port)
    o = {"ctx": ctx}
    o["pd"] = ctx.pd()
    o["cq"] = ctx.cq(8)
    o["cc"] = ctx.comp_channel()
    o["cq_cc"] = ctx.cq(8, o["cc"])
    o["cq_cc"].req_notify_cq()
    o["srq"] = o["pd"].srq(max_wr=8)
    o["qp"] = o["pd"].qp(RC, 4, o["cq"], 4, o["cq_cc"], srq=o["srq"])
    buf = bytearray(64)
    o["mr"] = o["pd"].mr(buf, LW)
    o["ah"] = o["pd"].ah(own_ah_attr(end_port))
    o["mw"] = o["pd"].mw(ibv.IBV_MW_TYPE_1)
    o["srq"].post_recv(ibv.recv_wr(wr_id=1, sg_list=o["mr"].sge(length=8)))
    to_init(o["qp"])                       # not RESET: something to tear down
    return o, buf


def _closed_set(closed):
    out = set(closed)
    changed = True
    while changed:
        changed = False
        for k, ps in PARENTS.items():
            if k not in out and any(p in out for p in ps):
                out.add(k)
                changed = True
    return out


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(order=st.permutations(list(PARENTS)))
def test_close_in_any_order(end_port, provider, order):
    """close() in any order: closing a parent closes its children; closed
    objects raise ValueError; the rest keep working; close is idempotent."""
    o, buf = _build(end_port, provider)
    done = []
    for name in order:
        if name not in o:           # no MW where the provider has none
            continue
        o[name].close()
        done.append(name)
        closed = _closed_set(done)
        for k in PROBED:
            if k in closed:
                with pytest.raises(ValueError, match="closed"):
                    _probe(k, o[k])
            else:
                _probe(k, o[k])
        if "mr" in closed:
            buf.append(0)           # the buffer is released with its MR
            buf.pop()
        else:
            with pytest.raises(BufferError):
                buf.append(0)
    for v in o.values():
        v.close()


@pytest.mark.parametrize("seed", range(4))
def test_forget_in_random_order(end_port, provider, seed):
    """Dropping the last references in random orders (no close): a
    ResourceWarning per unclosed object, no crash."""
    rnd = random.Random(seed)
    o, buf = _build(end_port, provider)
    names = list(o)
    rnd.shuffle(names)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always", ResourceWarning)
        for n in names:
            del o[n]
            gc.collect()
        del o
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) for x in w), w
    buf.append(1)  # every MR is gone


@pytest.mark.parametrize("kind", ["ctx", "pd", "cq", "cc", "qp", "srq", "mr",
                                  "ah", "mw"])
def test_resource_warning(end_port, provider, kind):
    """An object dropped without close() warns ResourceWarning at GC (and is
    released: a forgotten MR unpins its buffer)."""
    buf = bytearray(8)
    with rdma.get_verbs(end_port) as ctx:
        pd = ctx.pd()
        cq = ctx.cq(4)
        make = {
            "ctx": lambda: rdma.get_verbs(end_port),
            "pd": ctx.pd, "cq": lambda: ctx.cq(4), "cc": ctx.comp_channel,
            "qp": lambda: pd.qp(RC, 2, cq, 2, cq), "srq": pd.srq,
            "mr": lambda: pd.mr(buf, LW),
            "ah": lambda: pd.ah(own_ah_attr(end_port)),
            "mw": lambda: pd.mw(ibv.IBV_MW_TYPE_1)}
        target = make[kind]()
        with pytest.warns(ResourceWarning):
            del target
            gc.collect()
        buf.append(0)
        pd.close()
        cq.close()


def test_use_after_close_raises(end_port, pair_factory):
    """Every method of a closed object raises ValueError('... closed ...')."""
    a, b = pair_factory(RC)
    wr = a.send_wr(b, ibv.IBV_WR_RDMA_WRITE)
    for o, calls in (
            (a.qp, [lambda: a.qp.post_send(wr),
                    lambda: a.qp.post_recv(ibv.recv_wr(wr_id=1)),
                    lambda: a.qp.query(), lambda: a.qp.modify(
                        ibv.qp_attr(qp_state=ibv.IBV_QPS_ERR)),
                    lambda: a.qp.attach_mcast("ff0e::1", 0)]),
            (a.send_cq,
             [lambda: a.send_cq.poll(), lambda: a.send_cq.req_notify_cq(),
                         lambda: a.send_cq.resize(100),
                         lambda: a.send_cq.poll_into(ibv.WCArray(2))]),
            (a.mr, [lambda: a.mr.sge()]),
            (a.pd, [lambda: a.pd.mr(bytearray(8)), lambda: a.pd.cq(2),
                    lambda: a.pd.srq(),
                    lambda: a.pd.qp(RC, 1, b.send_cq, 1, b.recv_cq),
                    lambda: a.pd.ah(ah_attr_to(b.gid))])):
        o.close()
        o.close()
        for c in calls:
            with pytest.raises(ValueError, match="closed"):
                c()
    ctx = rdma.get_verbs(end_port)
    ctx.close()
    for c in (ctx.pd, ctx.cq, ctx.comp_channel,
              lambda: ctx.get_async_event(timeout=0)):
        with pytest.raises(ValueError, match="closed"):
            c()


def test_post_with_closed_ah(pair_factory):
    """A send_wr, or a SendBatch prepared earlier, naming an AH closed since
    is refused (ValueError), never posted with a freed ibv_ah."""
    a, b = pair_factory(UD)
    wr = a.send_wr(b)
    batch = ibv.SendBatch([a.send_wr(b, wr_id=5)])
    a.ah_to(b).close()
    with pytest.raises(ValueError, match="closed"):
        a.qp.post_send(wr)
    with pytest.raises(ValueError, match="closed"):
        ibv.SendBatch([wr])
    with pytest.raises(ValueError, match="closed"):
        a.qp.post_send(batch)
    expect_no_completion(a.send_cq, 0.05)


def test_context_managers(end_port):
    """Every object is a context manager closed on exit."""
    with rdma.get_verbs(end_port) as ctx:
        with ctx.pd() as pd, pd.cq(4) as cq, ctx.comp_channel() as cc, \
                pd.srq() as srq, pd.mr(bytearray(16), LW) as mr, \
                pd.qp(UD, 2, cq, 2, cq) as qp, \
                pd.ah(own_ah_attr(end_port)) as ah:
            pass
        for call in (pd.cq, cq.poll, cc.fileno, srq.query, mr.sge, qp.query):
            with pytest.raises(ValueError):
                call()
        ah.close()


def test_qp_keeps_parents_alive(end_port):
    """A QP alone keeps its PD, CQs and Context alive (strong refs)."""
    ctx = rdma.get_verbs(end_port)
    pd = ctx.pd()
    cq = pd.cq(4)
    qp = pd.qp(RC, 2, cq, 2, cq)
    del ctx, pd, cq
    gc.collect()
    to_init(qp)
    assert qp_state(qp) == ibv.IBV_QPS_INIT
    qp.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del qp
        gc.collect()


def test_exit_without_close(provider):
    """An interpreter exiting with open verbs objects (and posted work)
    exits normally."""
    from pathlib import Path
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r})\n"
        "import rdma, rdma.ibverbs as ibv\n"
        "from verbs_fixtures import make_pair, open_end_port\n"
        f"ctx = rdma.get_verbs(open_end_port({provider!r}))\n"
        "a, b = make_pair(ctx, ctx, ibv.IBV_QPT_RC)\n"
        "b.post_recv(wr_id=1)\n"
        "a.qp.post_send(a.send_wr(b))\n"
        "cc = ctx.comp_channel(); cq = ctx.cq(4, cc); cq.req_notify_cq()\n"
        "print('bye')\n")
    res = run_py(code, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "bye"
    assert "Fatal" not in res.stderr and "Segmentation" not in res.stderr


def test_lifetime_and_data_path_under_asan(variant, provider):
    """The ASan build runs the data path (RC/UC/UD, batches, atomics, errors)
    and random close/forget orders with zero AddressSanitizer reports."""
    import variants
    from pathlib import Path
    d = variant("asan")
    here = Path(__file__).resolve().parent
    code = ("import verbs_fixtures as f, rdma._ibverbs as m\n"
            "print(m.__file__)\n"
            "for seed in range(2):\n"
            f"    f.exercise(seed, rounds=2, provider={provider!r})\n"
            "print('done')\n")
    res = run_py(code, pythonpath=f"{d}:{here}", timeout=900, env={
        "LD_PRELOAD": variants.asan_runtime(),
        "ASAN_OPTIONS": "detect_leaks=0:exitcode=99",
        "PYTHONMALLOC": "malloc"})
    assert "AddressSanitizer" not in res.stderr, res.stderr[-6000:]
    assert res.returncode == 0 and "done" in res.stdout, res.stderr[-6000:]
    assert res.stdout.startswith(str(d)), res.stdout   # the ASan build ran


# --------------------------------------------------------------------------
# PD.alloc_mr larger than memory (issue 17 item 1)

_ALLOC_HUGE = r"""
import errno, os, resource, sys
sys.path.insert(0, os.environ["TEST_DIR"])
import rdma
from verbs_fixtures import open_end_port

ctx = rdma.get_verbs(open_end_port(os.environ["TEST_PROVIDER"]))
pd = ctx.pd()
page = os.sysconf("SC_PAGE_SIZE")
with open("/proc/self/statm") as f:
    vm = int(f.read().split()[0]) * page
# safety belts: no file (a /dev/shm segment included) grows past 64 MiB
# (Python ignores SIGXFSZ: the write fails with EFBIG), and 1 GiB more
# address space
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
mr = pd.alloc_mr(16 << 20)
assert bytes(mr.buf[:64]) == bytes(64) and bytes(mr.buf[-64:]) == bytes(64)
mr.close()
del mr
for n in (2 << 30, 64 << 30, 1 << 40, 1 << 62):
    try:
        pd.alloc_mr(n)
    except rdma.SysError as e:
        print("RESULT", n, errno.errorcode.get(e.errno), e.func, flush=True)
    else:
        print("RESULT", n, "allocated -", flush=True)
ctx.close()
print("done", flush=True)
"""


def _shm_state():
    """The ucx_shm_posix_* files in /dev/shm and the ids of SysV segments."""
    posix = {n for n in os.listdir("/dev/shm") if n.startswith("ucx_shm_")}
    with open("/proc/sysvipc/shm") as f:
        rows = [line.split() for line in f.read().splitlines()[1:]]
    return posix, {(int(r[1]), int(r[4])) for r in rows}


def test_alloc_mr_larger_than_memory(provider):
    """pd.alloc_mr(n) beyond what memory (here: RLIMIT_AS) or max_mr_size
    can back fails with ENOMEM naming the call, at once, and leaves no
    shared memory segment behind.  On the fabric it used to fall back to a
    POSIX segment and write every byte of it (filling /dev/shm); the child
    runs with RLIMIT_FSIZE, which stops such a write at 64 MiB."""
    import subprocess
    import sys
    from pathlib import Path
    posix0, sysv0 = _shm_state()
    p = subprocess.Popen([sys.executable, "-P", "-c", _ALLOC_HUGE],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True,
                         env=dict(os.environ, TEST_PROVIDER=provider,
                                  TEST_DIR=str(Path(__file__).parent)))
    try:
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    posix1, sysv1 = _shm_state()
    left = posix1 - posix0
    for n in left:                  # never leave them on the machine
        try:
            os.unlink(os.path.join("/dev/shm", n))
        except OSError:
            pass
    assert p.returncode == 0 and out.endswith("done\n"), (
        p.returncode, out, err[-3000:])
    lines = [ln.split()[1:] for ln in out.splitlines()
             if ln.startswith("RESULT ")]
    assert len(lines) == 4, out
    for n, errname, func in lines:
        assert errname == "ENOMEM" and func in ("mmap", "ibv_reg_mr"), (
            n, errname, func, out)
    # the fabric refuses before UCX is asked: no POSIX segment was written
    assert "mm_posix" not in out + err, out + err
    assert not left, f"POSIX segments left behind: {left}"
    leaked = [s for s in sysv1 - sysv0 if s[1] == p.pid]
    assert not leaked, f"SysV segments of the exited child: {leaked}"
