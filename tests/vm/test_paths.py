"""The usage examples of the python-rdma documentation, on Soft-RoCE.

Each test follows one example of seeds/002 (UD QP setup, several UD
destinations, UD response path, No-CM RC setup between two processes,
WC error handling, completion channels, memory and BufferPool), ported to
Python 3 and run as written.
"""
import asyncio
import mmap
import os
import select
import sys
import time
from pathlib import Path

import pytest

import rdma
import rdma.aio
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma import IBA
from rdma.path import IBPath
from conftest import TWO_HOST, run
from verbs_fixtures import connect_pair

GIDX = int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))
PEER = Path(__file__).parent / "peers" / "nocm_side.py"


def ud_qp(pd, cq, path, depth=16):
    qp = pd.qp(ibv.IBV_QPT_UD, depth, cq, depth, cq)
    path.sqpn = qp.qp_num
    qp.modify_to_init(path)
    qp.modify_to_rtr(path)
    qp.modify_to_rts(path)
    return qp


def test_ud_qp_setup_and_response_path(end_port, ctx):
    """UD QP setup, a send to a resolved path, and the reply path of the
    received packet built with WCPath(...).reverse()."""
    gid = end_port.gids[GIDX]
    with ctx.pd() as pd:
        cq = pd.cq(64)
        # Server side: a UD QP with a BufferPool of receives.
        spath = IBPath(end_port, qkey=IBA.IB_DEFAULT_QP1_QKEY, DGID=gid)
        rdma.path.resolve_path(None, spath, reversible=True)
        server = ud_qp(pd, cq, spath.copy())
        pool = rdma.vtools.BufferPool(pd, count=16, size=256)
        pool.post_recvs(server, 8)
        # Client side: path to the server, as the seed writes it.
        path = IBPath(end_port, dqpn=server.qp_num,
                      qkey=IBA.IB_DEFAULT_QP1_QKEY, DGID=gid)
        rdma.path.resolve_path(None, path, reversible=True)
        client = ud_qp(pd, cq, path)
        cpool = rdma.vtools.BufferPool(pd, count=4, size=256)
        cpool.post_recvs(client, 2)
        idx = cpool.pop()
        cpool.copy_to(b"Hello message!", idx)
        client.post_send(ibv.send_wr(wr_id=idx,
                                     sg_list=cpool.make_sge(idx, 14),
                                     opcode=ibv.IBV_WR_SEND,
                                     send_flags=ibv.IBV_SEND_SIGNALED,
                                     ah=pd.ah(path),
                                     remote_qpn=path.dqpn,
                                     remote_qkey=path.qkey))
        assert pd.ah(path) is pd.ah(path)          # the path caches its AH
        poller = rdma.vtools.CQPoller(cq)
        request = None
        for wc in poller.iterwc(count=2, timeout=20):
            if wc.status != ibv.IBV_WC_SUCCESS:
                raise ibv.WCError(wc, qp=server)
            if wc.qp_num == server.qp_num:
                request = wc
                data = pool.copy_from(wc.wr_id, 40, wc.byte_len - 40)
                buf_off = (wc.wr_id & pool.BUF_ID_MASK) * pool.size
                request_path = ibv.WCPath(end_port, wc, pool.mr.buf, buf_off,
                                          pkey=spath.pkey, qkey=spath.qkey)
                pool.finish_wcs(server, wc)
            else:
                cpool.finish_wcs(client, wc)
        assert not poller.timedout
        assert data == b"Hello message!"
        assert (request.wc_flags & ibv.IBV_WC_GRH and
                request.src_qp == client.qp_num)
        assert request_path.SGID == gid and request_path.sqpn == client.qp_num
        # Reply on the reversed path.
        reply_path = request_path.reverse()
        assert reply_path.dqpn == client.qp_num and reply_path.DGID == gid
        ah = pd.ah(reply_path)
        idx = pool.pop()
        pool.copy_to(b"reply", idx)
        server.post_send(pool.make_send_wr(idx, 5, reply_path))
        got = None
        for wc in poller.iterwc(count=2, timeout=20):
            if wc.qp_num == client.qp_num and wc.opcode == ibv.IBV_WC_RECV:
                got = bytes(cpool.copy_from(wc.wr_id, 40, wc.byte_len - 40))
                cpool.finish_wcs(client, wc)
            elif wc.qp_num == server.qp_num:
                pool.finish_wcs(server, wc)
        assert got == b"reply"
        assert not ah.closed


def test_several_ud_destinations(end_port, ctx):
    """Several UD destinations sharing P_Key and Q_Key, all usable from one
    QP set up with paths[-1]."""
    gid = end_port.gids[GIDX]
    qkey = IBA.IB_DEFAULT_QP1_QKEY
    with ctx.pd() as pd:
        cq = pd.cq(128)
        servers, pools = [], []
        for _ in range(3):
            p = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                    qkey=qkey))
            q = ud_qp(pd, cq, p)
            pool = rdma.vtools.BufferPool(pd, 4, 128)
            pool.post_recvs(q, 2)
            servers.append(q)
            pools.append(pool)
        paths = [rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                     qkey=qkey, dqpn=q.qp_num),
                                        reversible=True,
                                        properties={"PKey": IBA.DEFAULT_PKEY})
                 for q in servers]
        qp = ud_qp(pd, cq, paths[-1])
        spool = rdma.vtools.BufferPool(pd, 4, 128)
        for i, p in enumerate(paths):
            idx = spool.pop()
            spool.copy_to(b"to %d" % i, idx)
            qp.post_send(spool.make_send_wr(idx, 4, p))
        received = {}
        for wc in rdma.vtools.CQPoller(cq).iterwc(count=6, timeout=20):
            assert wc.status == ibv.IBV_WC_SUCCESS, ibv.WCError(wc)
            for q, pool in zip(servers, pools):
                if wc.qp_num == q.qp_num:
                    received[q.qp_num] = bytes(pool.copy_from(wc.wr_id, 40, 4))
                    pool.finish_wcs(q, wc)
            if wc.qp_num == qp.qp_num:
                spool.finish_wcs(qp, wc)
        assert received == {q.qp_num: b"to %d" % i
                            for i, q in enumerate(servers)}


@pytest.mark.parametrize("hosts", ["loopback", "two-host"])
def test_no_cm_rc_setup_between_processes(device, hosts):
    """No-CM RC setup: two processes exchange pickled paths over a socket,
    go to RTS with modify_to_*, then RDMA WRITE and SEND."""
    if hosts == "two-host":
        if not TWO_HOST:
            pytest.skip("needs --two-host")
        dev_a = os.environ["RDMA_TESTVM_HOST1_DEVICE"]
        dev_b = os.environ["RDMA_TESTVM_HOST2_DEVICE"]
    else:
        dev_a = dev_b = device
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import subprocess
    a = subprocess.Popen([sys.executable, str(PEER), "a", dev_a, str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        b = run([sys.executable, str(PEER), "b", dev_b, str(port)],
                timeout=120)
        out_a, err_a = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    assert b.returncode == 0, b.stderr
    assert a.returncode == 0, err_a
    assert b.stdout.startswith("OK b") and out_a.startswith("OK a")


def test_wc_error_handling(end_port, ctx):
    """A failed completion raised as ibv.WCError(wc, qp=qp)."""
    gid = end_port.gids[GIDX]
    with ctx.pd() as pd:
        cq = pd.cq(16)
        qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        connect_pair(qa, qb, end_port, dgid=gid, retries=1)
        buf = bytearray(64)
        mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE)   # no remote write
        qa.post_send(ibv.send_wr(wr_id=9, opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=mr.sge(8), remote_addr=mr.addr,
                                 rkey=mr.rkey))
        wcs = []
        for wc in rdma.vtools.CQPoller(cq).iterwc(count=1, timeout=20):
            wcs.append(wc)
        assert wcs and wcs[0].status != ibv.IBV_WC_SUCCESS
        err = ibv.WCError(wcs[0], qp=qa)
        assert err.qp is qa and err.status == ibv.IBV_WC_REM_ACCESS_ERR
        assert "IBV_WC_REM_ACCESS_ERR" in str(err) and "wr_id 9" in str(err)
        assert qa.state == ibv.IBV_QPS_ERR


def test_completion_channels_poll_and_cqpoller(end_port, ctx):
    """CompChannel.register_poll/check_poll with select.poll, then the
    same through vtools.CQPoller(cq, cc)."""
    gid = end_port.gids[GIDX]
    depth = 8
    cc = ctx.comp_channel()
    cq = ctx.cq(2 * depth, cc)
    poll = select.poll()
    cc.register_poll(poll)
    cq.req_notify_cq()
    with ctx.pd() as pd:
        path = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                   qkey=0x11))
        qp = ud_qp(pd, cq, path)
        path.dqpn = qp.qp_num
        pool = rdma.vtools.BufferPool(pd, 8, 128)
        pool.post_recvs(qp, 4)

        def get_wcs():
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                for ev in poll.poll(1000):
                    if cc.check_poll(ev) is not None:
                        wcs = cq.poll()
                        if wcs:
                            return wcs
            raise AssertionError("no completion event")

        idx = pool.pop()
        qp.post_send(pool.make_send_wr(idx, 16, path))
        got = []
        while len(got) < 2:
            got += get_wcs()
        pool.finish_wcs(qp, got)
        # CQPoller sleeping on the channel.
        poller = rdma.vtools.CQPoller(cq, cc)
        idx = pool.pop()
        qp.post_send(pool.make_send_wr(idx, 16, path))
        wcs = list(poller.iterwc(count=2, timeout=20))
        assert len(wcs) == 2 and not poller.timedout
        pool.finish_wcs(qp, wcs)
        assert list(poller.iterwc(timeout=0.2)) == [] and poller.timedout
    cq.close()
    assert cc.get_cq_event(timeout=0) is None


def test_memory_registrations(ctx):
    """pd.mr() on bytes (read-only), bytearray and mmap; mr.sge()."""
    with ctx.pd() as pd:
        s = b"Hello"
        mr = pd.mr(s, ibv.IBV_ACCESS_REMOTE_READ)
        assert mr.length == 5 and mr.buf is s
        with pytest.raises(TypeError, match="read-only"):
            pd.mr(b"x" * 8, ibv.IBV_ACCESS_REMOTE_WRITE |
                  ibv.IBV_ACCESS_LOCAL_WRITE)
        b = bytearray(256)
        mr = pd.mr(b, ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_LOCAL_WRITE)
        sge = mr.sge()
        assert (sge.addr, sge.length, sge.lkey) == (mr.addr, 256, mr.lkey)
        sge = mr.sge(length=128, off=10)
        assert (sge.addr, sge.length) == (mr.addr + 10, 128)
        with pytest.raises(ValueError):
            mr.sge(length=250, off=10)
        m = mmap.mmap(-1, 256)
        mr2 = pd.mr(m,
                    ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_LOCAL_WRITE)
        with pytest.raises(BufferError):
            m.close()                         # the MR pins it
        mr2.close()
        m.close()


def test_asyncio_ping_pong_no_busy_loop(end_port, ctx):
    """Two coroutines ping-pong over RC on completion channels; while idle
    the process uses (almost) no CPU."""
    gid = end_port.gids[GIDX]
    with ctx.pd() as pd:
        cca, ccb = ctx.comp_channel(), ctx.comp_channel()
        cqa, cqb = ctx.cq(16, cca), ctx.cq(16, ccb)
        qa = pd.qp(ibv.IBV_QPT_RC, 8, cqa, 8, cqa)
        qb = pd.qp(ibv.IBV_QPT_RC, 8, cqb, 8, cqb)
        connect_pair(qa, qb, end_port, dgid=gid, access_b=0)
        bufa = rdma.vtools.BufferPool(pd, 8, 64)
        bufb = rdma.vtools.BufferPool(pd, 8, 64)
        bufa.post_recvs(qa, 4)
        bufb.post_recvs(qb, 4)
        rounds = 10

        async def side(qp, pool, acq, first):
            n = 0
            if first:
                i = pool.pop()
                pool.copy_to(b"0", i)
                qp.post_send(pool.make_send_wr(i, 1))
            while n < rounds:
                wc = await asyncio.wait_for(acq.get(), 30)
                assert wc.status == ibv.IBV_WC_SUCCESS, ibv.WCError(wc, qp=qp)
                if wc.opcode == ibv.IBV_WC_RECV:
                    n += 1
                    val = int(pool.copy_from(wc.wr_id, 0, wc.byte_len))
                    pool.finish_wcs(qp, wc)
                    if not (first and n == rounds):
                        i = pool.pop()
                        pool.copy_to(b"%d" % (val + 1), i)
                        qp.post_send(pool.make_send_wr(i,
                                                       len(b"%d" % (val + 1))))
                else:
                    pool.finish_wcs(qp, wc)
            return n

        async def main():
            acqa, acqb = rdma.aio.AsyncCQ(cqa), rdma.aio.AsyncCQ(cqb)
            r = await asyncio.gather(side(qa, bufa, acqa, True),
                                     side(qb, bufb, acqb, False))
            # Idle: wait on an empty CQ for 1 s and measure our CPU time.
            t0 = time.process_time()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(acqa.get(), 1.0)
            idle_cpu = time.process_time() - t0
            acqa.close()
            acqb.close()
            return r, idle_cpu

        (na, nb), idle_cpu = asyncio.run(main())
        assert (na, nb) == (rounds, rounds)
        assert idle_cpu < 0.2, f"{idle_cpu:.3f} s of CPU while idle"
