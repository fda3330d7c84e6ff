"""The hot path's contracts: prepared batches, WCArray, poll, threads."""
import gc
import threading
import warnings

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import (check_ok, expect_no_completion, pattern, poll_cq,
                            wait_for)

pytest_plugins = ["verbs_fixtures"]

RC, UD = ibv.IBV_QPT_RC, ibv.IBV_QPT_UD
W = ibv.IBV_WR_RDMA_WRITE


def test_send_batch_is_a_snapshot(pair_factory):
    """SendBatch converts once: changing the send_wr objects afterwards does
    not change what the batch posts."""
    a, b = pair_factory(RC)
    wrs = [a.send_wr(b, W, wr_id=i, off=8 * i, remote_off=8 * i)
           for i in range(3)]
    batch = ibv.SendBatch(wrs)
    for w in wrs:
        w.wr_id += 100
        w.remote_addr += 512
    a.buf[:24] = b"abcdefgh" * 3
    a.qp.post_send(batch)
    assert [w.wr_id for w in poll_cq(a.send_cq, 3)] == [0, 1, 2]
    assert bytes(b.buf[:24]) == b"abcdefgh" * 3
    assert bytes(b.buf[512:536]) == bytes(24)


def test_recv_batch_reposted_while_outstanding(pair_factory):
    """A RecvBatch can be posted again before its WRs completed (each post
    is a new set of receives)."""
    a, b = pair_factory(RC, max_recv_wr=32)
    rb = ibv.RecvBatch([ibv.recv_wr(wr_id=i,
                                    sg_list=b.mr.sge(length=16, off=16 * i))
                        for i in range(4)])
    b.qp.post_recv(rb)
    b.qp.post_recv(rb)
    a.qp.post_send([a.send_wr(b, wr_id=i, length=16) for i in range(8)])
    poll_cq(a.send_cq, 8)
    assert [w.wr_id for w in poll_cq(b.recv_cq, 8)] == [0, 1, 2, 3] * 2


def test_wcarray_entries(pair_factory):
    """WCArray: len and indexing cover the entries of the last poll only, wc
    objects that stay valid after the next poll, bad sizes refused."""
    a, b = pair_factory(RC)
    arr = ibv.WCArray(8)
    assert len(arr) == 0                      # len: entries of the last poll
    a.qp.post_send([a.send_wr(b, W, wr_id=10 + i) for i in range(3)])
    got = []
    wait_for(lambda: got.extend([arr[i]
                                 for i in range(a.send_cq.poll_into(arr))])
             or len(got) >= 3, what="3 completions")
    first = got[0]
    assert [w.wr_id for w in got] == [10, 11, 12]
    assert len(arr) in (1, 2, 3)
    assert all(isinstance(w, ibv.wc) for w in got)
    a.qp.post_send(a.send_wr(b, W, wr_id=99))
    wait_for(lambda: a.send_cq.poll_into(arr), what="one completion")
    assert arr[0].wr_id == 99
    assert first.wr_id == 10                 # a copy, not a view of the slot
    with pytest.raises(IndexError):
        arr[1]                                # only 1 valid entry now
    assert arr[-1].wr_id == 99
    for bad in (0, -1):
        with pytest.raises(ValueError):
            ibv.WCArray(bad)
    with pytest.raises(TypeError):
        ibv.WCArray("8")
    with pytest.raises(TypeError):
        a.send_cq.poll_into([None] * 8)


def test_poll_into_does_not_overflow_array(pair_factory):
    """poll_into(arr) takes at most len(arr) completions; the rest stay."""
    a, b = pair_factory(RC, max_send_wr=16)
    a.qp.post_send([a.send_wr(b, W, wr_id=i) for i in range(10)])
    small = ibv.WCArray(3)
    ids = []

    def step():
        n = a.send_cq.poll_into(small)
        assert n <= 3
        ids.extend(small[i].wr_id for i in range(n))
        return len(ids) >= 10
    wait_for(step, what="10 completions")
    assert ids == list(range(10))


def test_concurrent_posters_one_qp(pair_factory):
    """Four threads post on one QP while a fifth polls: every wr_id
    completes exactly once."""
    a, b = pair_factory(RC, max_send_wr=256, cqe=512)
    n_threads, per = 4, 30
    errors = []
    sem = threading.Semaphore(200)       # never more in flight than the SQ

    def poster(t):
        try:
            for i in range(per):
                sem.acquire()
                a.qp.post_send(a.send_wr(b, W, wr_id=t * 1000 + i,
                                         off=8 * t, remote_off=8 * t))
        except Exception as e:            # pragma: no cover - reported below
            errors.append(e)
    got = []

    def poller():
        while len(got) < n_threads * per and not errors:
            for w in a.send_cq.poll():
                check_ok(w)
                got.append(w.wr_id)
                sem.release()
    threads = [threading.Thread(target=poster, args=(t,))
               for t in range(n_threads)]
    pt = threading.Thread(target=poller)
    pt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    pt.join(60)
    assert not errors, errors
    assert sorted(got) == sorted(t * 1000 + i for t in range(n_threads)
                                 for i in range(per))


def test_mr_keeps_unreferenced_buffer_alive(pair_factory):
    """An MR keeps its buffer alive after the last user reference is gone:
    an RDMA READ from it later returns the original bytes."""
    a, b = pair_factory(RC)
    data = pattern(256, 5)
    mr = b.pd.mr(bytearray(data),
                 ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_LOCAL_WRITE)
    gc.collect()
    # reuse freed memory, if any
    junk = [bytearray(256) for _ in range(1000)]
    a.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_RDMA_READ,
                               sg_list=a.mr.sge(length=256),
                               remote_addr=mr.addr, rkey=mr.rkey,
                               send_flags=ibv.IBV_SEND_SIGNALED))
    check_ok(poll_cq(a.send_cq)[0])
    assert bytes(a.buf[:256]) == data
    del junk
    mr.close()


def test_forgotten_mr_with_work_in_flight(pair_factory):
    """Dropping an MR that a posted WR uses (no close): ResourceWarning, the
    WR completes (success or error), no crash."""
    a, b = pair_factory(RC)
    buf = bytearray(b"z" * 64)
    mr = a.pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE)
    wr = ibv.send_wr(wr_id=5, opcode=W, sg_list=mr.sge(),
                     remote_addr=b.mr.addr, rkey=b.mr.rkey,
                     send_flags=ibv.IBV_SEND_SIGNALED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        a.qp.post_send(wr)
        del mr, wr
        gc.collect()
    wc = poll_cq(a.send_cq)[0]
    assert wc.wr_id == 5


def test_qp_attr_pickle_nested():
    """ibv.qp_attr with a nested ah_attr/grh pickles and compares equal."""
    import pickle
    a = ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR, dest_qp_num=7,
                    ah_attr=ibv.ah_attr(is_global=1, port_num=1,
                                        grh=ibv.global_route(dgid="::ffff:192.0.2.1",
                                                             sgid_index=1)))
    b = pickle.loads(pickle.dumps(a))
    assert a == b and b.ah_attr.grh.sgid_index == 1
    assert str(b.ah_attr.grh.dgid) == "::ffff:192.0.2.1"
    w = ibv.send_wr(wr_id=3, sg_list=[ibv.sge(addr=1, length=2, lkey=3)],
                    opcode=ibv.IBV_WR_SEND)
    assert pickle.loads(pickle.dumps(w)).sg_list[0].lkey == 3


def test_unsignaled_send_queue_wraps(pair_factory):
    """sq_sig_all=0 with one signaled WR in 8, many times the queue depth:
    the send queue keeps being recycled (no ENOMEM)."""
    a, b = pair_factory(RC, max_send_wr=16, side_a={"sq_sig_all": 0})
    batch = ibv.SendBatch([a.send_wr(b, W, wr_id=i, send_flags=0 if i < 7
                                     else ibv.IBV_SEND_SIGNALED)
                           for i in range(8)])
    for _ in range(20):
        a.qp.post_send(batch)
        assert [w.wr_id for w in poll_cq(a.send_cq)] == [7]
    expect_no_completion(a.send_cq, 0.02)


def test_huge_sg_lists_are_refused(pair_factory):
    """A send_wr/recv_wr with thousands of SGEs is refused (ValueError, or
    WRError EINVAL from rxe: more than max_sge), never overflows a buffer."""
    a, b = pair_factory(RC)
    sges = [a.mr.sge(length=1, off=i % 64) for i in range(5000)]
    with pytest.raises((ValueError, ibv.WRError)) as ei:
        a.qp.post_send(ibv.send_wr(wr_id=1, opcode=W, sg_list=sges,
                                   remote_addr=b.mr.addr, rkey=b.mr.rkey))
    if isinstance(ei.value, ibv.WRError):
        assert ei.value.errno == 22
    with pytest.raises((ValueError, ibv.WRError)):
        b.qp.post_recv(ibv.recv_wr(wr_id=1, sg_list=sges))
    with pytest.raises((ValueError, ibv.WRError)):
        ibv.SendBatch([ibv.send_wr(wr_id=1, opcode=W, sg_list=sges)]) and \
            a.qp.post_send(ibv.SendBatch([ibv.send_wr(wr_id=1, opcode=W,
                                                      sg_list=sges)]))
    expect_no_completion(a.send_cq, 0.05)
    a.qp.post_send(a.send_wr(b, W, wr_id=2))
    assert poll_cq(a.send_cq)[0].wr_id == 2


def test_long_next_chain(pair_factory):
    """A `next` chain of 100000 send WRs (30000 recv WRs): converted without
    recursion; rxe takes a queue-full of them and rejects the rest (WRError
    ENOMEM)."""
    a, b = pair_factory(RC, max_send_wr=16)
    depth = a.qp.query(ibv.IBV_QP_CAP).cap.max_send_wr
    head = prev = a.send_wr(b, W, wr_id=0, send_flags=0)
    for i in range(1, 100000):
        w = a.send_wr(b, W, wr_id=i, send_flags=0)
        prev.next = w
        prev = w
    with pytest.raises(ibv.WRError) as ei:
        a.qp.post_send(head)
    assert ei.value.errno == 12 and depth <= ei.value.index < 100000
    poll_cq(a.send_cq, ei.value.index)
    # and a long recv chain
    rhead = rprev = ibv.recv_wr(wr_id=0, sg_list=b.mr.sge(length=8))
    for i in range(1, 30000):
        r = ibv.recv_wr(wr_id=i, sg_list=b.mr.sge(length=8))
        rprev.next = r
        rprev = r
    with pytest.raises(ibv.WRError) as ei:
        b.qp.post_recv(rhead)
    assert ei.value.errno == 12


def test_poll_huge_counts(pair_factory):
    """cq.poll(n) with an enormous n and WCArray(enormous) fail cleanly
    (or poll returns what is there); never a crash."""
    a, b = pair_factory(RC)
    a.qp.post_send(a.send_wr(b, W, wr_id=1))
    wait_for(lambda: True)
    for n in (1 << 20, 1 << 31, 1 << 40):
        try:
            got = a.send_cq.poll(n)
        except (ValueError, OverflowError, MemoryError):
            continue
        assert len(got) <= 1
    for n in (1 << 40, 1 << 62):
        with pytest.raises((ValueError, OverflowError, MemoryError)):
            ibv.WCArray(n)


def test_post_while_other_thread_closes(pair_factory):
    """One thread posts in a loop while another closes the QP: the poster
    gets ValueError('closed'), nothing crashes."""
    a, b = pair_factory(RC, max_send_wr=64, side_a={"sq_sig_all": 0})
    wr = a.send_wr(b, W, send_flags=0)
    errs = []
    started = threading.Event()

    def poster():
        try:
            while True:
                try:
                    a.qp.post_send(wr)
                except ibv.WRError:
                    pass                      # queue full: keep trying
                started.set()
        except ValueError as e:
            errs.append(e)
        except Exception as e:
            errs.append(e)
    t = threading.Thread(target=poster)
    t.start()
    started.wait(10)
    a.qp.close()
    t.join(20)
    assert not t.is_alive()
    assert len(errs) == 1 and isinstance(errs[0], ValueError), errs
    assert "closed" in str(errs[0])


def test_c_style_struct_building(pair_factory, ctx):
    """qp_attr built C-style (empty constructor, then field and nested-field
    assignment) derives the same modify mask as the keyword form."""
    a, b = pair_factory(RC)
    from verbs_fixtures import Side, PORT
    s = Side(ctx, RC)
    try:
        attr = ibv.qp_attr()
        attr.qp_state = ibv.IBV_QPS_INIT
        attr.pkey_index = 0
        attr.port_num = PORT
        attr.qp_access_flags = ibv.IBV_ACCESS_REMOTE_WRITE
        s.qp.modify(attr)
        attr = ibv.qp_attr()
        attr.qp_state = ibv.IBV_QPS_RTR
        attr.path_mtu = ibv.IBV_MTU_1024
        attr.dest_qp_num = b.qpn
        attr.rq_psn = 0
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 1
        attr.ah_attr.is_global = 1              # nested, in place
        attr.ah_attr.port_num = PORT
        attr.ah_attr.grh.dgid = b.gid
        attr.ah_attr.grh.sgid_index = s.gid_index
        attr.ah_attr.grh.hop_limit = 1
        assert attr.ah_attr.grh.sgid_index == s.gid_index
        s.qp.modify(attr)
        q = s.qp.query(ibv.IBV_QP_AV | ibv.IBV_QP_DEST_QPN)
        assert q.dest_qp_num == b.qpn
        assert q.ah_attr.grh.dgid == b.gid and q.ah_attr.is_global == 1
    finally:
        s.close()


def test_zero_length_mr(ctx):
    """pd.mr of an empty buffer: a clean error or a usable zero-length MR."""
    import rdma
    with ctx.pd() as pd:
        for buf in (bytearray(), b""):
            try:
                mr = pd.mr(buf, 0)
            except (rdma.SysError, ValueError):
                continue
            assert mr.length == 0
            mr.close()
