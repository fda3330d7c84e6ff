"""rdma.cm, the connection manager, on every provider.

``verbs``: librdmacm on rxe0 in the VM (address 192.0.2.1); ``ucx``: the
fabric's CM on ucx0 (127.0.0.1).  Client and server are two channels of
one process unless a test says otherwise (a peer process for the tests of
a peer that dies).  The interop tests against librdmacm's C programs are
in tests/vm/test_cm_vm.py.
"""
import asyncio
import errno
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import rdma
import rdma.aio
import rdma.cm as cm
import rdma.ibverbs as ibv
from rdma.path import IBPath
from verbs_fixtures import MR_ALL, pattern, poll_cq

ROOT = Path(__file__).resolve().parent.parent.parent
ADDRS = {"verbs": "192.0.2.1", "ucx": "127.0.0.1"}
_ports = itertools.count(18000 + os.getpid() % 1000 * 20)
E = cm.CMEventType


@pytest.fixture
def addr(provider):
    return ADDRS[provider]


@pytest.fixture
def port():
    return next(_ports)


def fds():
    return len(os.listdir("/proc/self/fd"))


class Server(threading.Thread):
    """cm.listen + accept in a thread; .conn is the connection, kept open
    until stop()."""

    def __init__(self, provider, addr, port, private_data=b"", recvs=1):
        super().__init__(daemon=True)
        self.lst = cm.listen(port, addr, provider=provider)
        self.private_data = private_data
        self.recvs = recvs
        self.conn = None
        self.mr = None
        self.error = None
        self.done = threading.Event()
        self.start()

    def run(self):
        try:
            req = self.lst.get_request(timeout=20)
            cid = req.id
            cid.create_qp(ibv.IBV_QPT_RC)
            self.mr = cid.pd.mr(bytearray(4096), MR_ALL)
            for i in range(self.recvs):
                cid.qp.post_recv(ibv.recv_wr(wr_id=i,
                                             sg_list=self.mr.sge(64, 64 * i)))
            cid.accept_qp(private_data=self.private_data)
            self.conn = cm.Connection(cid, req.private_data, False)
        except BaseException as e:
            self.error = e
        self.done.set()

    def wait(self):
        assert self.done.wait(30), "the server thread hung"
        if self.error:
            raise self.error
        return self.conn

    def stop(self):
        self.lst.close()


def test_connect_rc_private_data_send_and_rdma_write(provider, addr, port):
    """connect()/listen(): private data both ways, a SEND and an RDMA
    WRITE on the CM-connected QP, DISCONNECTED on both sides."""
    srv = Server(provider, addr, port, private_data=b"from-server")
    try:
        with cm.connect(addr, port, private_data=b"from-client",
                        provider=provider) as conn:
            sconn = srv.wait()
            assert conn.private_data.startswith(b"from-server")
            assert sconn.private_data.startswith(b"from-client")
            assert conn.qp.query(ibv.IBV_QP_STATE).qp_state == ibv.IBV_QPS_RTS
            data = pattern(64, 1)
            mr = conn.pd.mr(bytearray(data), MR_ALL)
            conn.qp.post_send(ibv.send_wr(
                wr_id=7, opcode=ibv.IBV_WR_SEND, sg_list=mr.sge(),
                send_flags=ibv.IBV_SEND_SIGNALED))
            poll_cq(conn.cq, 1)
            wc, = poll_cq(sconn.cq, 1)
            assert wc.status == ibv.IBV_WC_SUCCESS and wc.byte_len == 64
            assert bytes(srv.mr.buf[:64]) == data
            conn.qp.post_send(ibv.send_wr(
                wr_id=8, opcode=ibv.IBV_WR_RDMA_WRITE, sg_list=mr.sge(),
                send_flags=ibv.IBV_SEND_SIGNALED,
                remote_addr=srv.mr.addr + 1024, rkey=srv.mr.rkey))
            wc, = poll_cq(conn.cq, 1)
            assert wc.status == ibv.IBV_WC_SUCCESS
            assert bytes(srv.mr.buf[1024:1088]) == data
            path = conn.path()
            assert isinstance(path, IBPath)
            assert path.dqpn == sconn.qp.qp_num
            if provider == "verbs":          # RoCE: GIDs, no LIDs
                assert path.DLID == 0 and path.has_grh
            conn.id.disconnect()
            ev = srv.lst.channel.wait_event(sconn.id, E.DISCONNECTED)
            assert ev.status == 0
            # The kernel's CM sends the DREP when the passive side answers
            # with rdma_disconnect (as librdmacm programs do).
            sconn.id.disconnect()
            ev = conn.id.channel.wait_event(conn.id, E.DISCONNECTED)
            assert ev.status == 0
    finally:
        srv.stop()


@pytest.mark.parametrize("ps", [cm.RDMA_PS_TCP, cm.RDMA_PS_IB],
                         ids=["PS_TCP", "PS_IB"])
def test_events_in_order_with_their_data(provider, addr, port, ps):
    """The low-level API: each event of both sides, in librdmacm's order,
    with the peer's QP number and private data (RC in both port spaces)."""
    with cm.EventChannel(provider) as sch, cm.EventChannel(provider) as cch:
        lid = sch.create_id(ps)
        lid.bind_addr((addr, port))
        lid.listen(backlog=4)
        assert lid.src_addr == (addr, port)
        cid = cch.create_id(ps)
        assert cid.ps == ps
        cid.resolve_addr((addr, port), timeout_ms=2000)
        ev = cch.get_event(timeout=10)
        assert ev.event == E.ADDR_RESOLVED and ev.id is cid
        assert ev.status == 0
        assert cid.device_name
        cid.resolve_route(2000)
        assert cch.get_event(timeout=10).event == E.ROUTE_RESOLVED
        cqp = cid.create_qp()
        cid.connect(private_data=b"req")
        req = sch.get_event(timeout=10)
        assert req.event == E.CONNECT_REQUEST
        assert req.listen_id is lid and req.id is not lid
        assert req.id.ps == ps
        assert req.qp_num == cqp.qp_num
        assert req.private_data[:3] == b"req"
        sid = req.id
        sqp = sid.create_qp()
        sid.modify_qp(None, ibv.IBV_QPS_RTR)
        sid.modify_qp(None, ibv.IBV_QPS_RTS)
        sid.accept(private_data=b"rep")
        rsp = cch.get_event(timeout=10)
        assert rsp.event == E.CONNECT_RESPONSE
        assert rsp.qp_num == sqp.qp_num
        assert rsp.private_data[:3] == b"rep"
        cid.modify_qp(None, ibv.IBV_QPS_RTR)
        cid.modify_qp(None, ibv.IBV_QPS_RTS)
        cid.establish()
        est = sch.get_event(timeout=10)
        assert est.event == E.ESTABLISHED and est.id is sid
        assert cch.get_event(timeout=0.2) is None
        sid.disconnect()
        assert cch.get_event(timeout=10).event == E.DISCONNECTED
        cid.disconnect()                     # the DREP (see above)
        assert sch.get_event(timeout=10).event == E.DISCONNECTED


def test_ud_sidr(provider, addr, port):
    """RDMA_PS_UDP: the active side's ESTABLISHED carries the server QP's
    number, Q_Key and an ah_attr that reaches it."""
    with cm.EventChannel(provider) as sch, cm.EventChannel(provider) as cch:
        lid = sch.create_id(cm.RDMA_PS_UDP)
        lid.bind_addr((addr, port))
        lid.listen()
        cid = cch.create_id(cm.RDMA_PS_UDP)
        cid.resolve((addr, port))
        cqp = cid.create_qp(ibv.IBV_QPT_UD)
        cid.connect(private_data=b"sidr")
        req = sch.wait_event(lid, E.CONNECT_REQUEST)
        assert req.private_data[:4] == b"sidr"
        sid = req.id
        sqp = sid.create_qp(ibv.IBV_QPT_UD)
        rmr = sid.pd.mr(bytearray(4096), MR_ALL)
        sqp.post_recv(ibv.recv_wr(wr_id=1, sg_list=rmr.sge(2048)))
        sid.accept_qp()
        est = cch.wait_event(cid, E.ESTABLISHED)
        assert est.qp_num == sqp.qp_num
        assert est.qkey == cm.RDMA_UDP_QKEY
        assert est.ah_attr is not None
        ah = cid.pd.ah(est.ah_attr)
        data = pattern(100, 3)
        smr = cid.pd.mr(bytearray(data), MR_ALL)
        cqp.post_send(ibv.send_wr(
            wr_id=2, opcode=ibv.IBV_WR_SEND, sg_list=smr.sge(),
            send_flags=ibv.IBV_SEND_SIGNALED, ah=ah,
            remote_qpn=est.qp_num, remote_qkey=est.qkey))
        poll_cq(cid.cq, 1)
        wc, = poll_cq(sid.cq, 1)
        assert wc.src_qp == cqp.qp_num
        assert bytes(rmr.buf[40:140]) == data


def test_address_with_nothing_behind_it(provider):
    """rxe: no route, rdma_resolve_addr fails at once (ENETUNREACH);
    ucx0: no node has the address, ADDR_ERROR (-EHOSTUNREACH).  Either
    way the error names the call and no ID leaks."""
    with cm.EventChannel(provider) as ch:
        cid = ch.create_id()
        if provider == "verbs":
            with pytest.raises(rdma.SysError) as ei:
                cid.resolve_addr(("203.0.113.9", 5000), timeout_ms=500)
            assert ei.value.errno == errno.ENETUNREACH
            assert "rdma_resolve_addr" in str(ei.value)
        else:
            cid.resolve_addr(("203.0.113.9", 5000), timeout_ms=500)
            with pytest.raises(cm.CMEventError) as ce:
                ch.wait_event(cid, E.ADDR_RESOLVED, "rdma_resolve_addr")
            assert ce.value.event.event == E.ADDR_ERROR
            assert ce.value.event.status == -errno.EHOSTUNREACH
        cid.close()
    expected = rdma.SysError if provider == "verbs" else cm.CMEventError
    with pytest.raises(expected):
        cm.connect("203.0.113.9", 5000, provider=provider, timeout=2)


def test_connect_to_a_port_nobody_listens_on(provider, addr, port):
    """REJECTED with the IB CM's reason 8 (invalid service ID)."""
    with pytest.raises(cm.CMEventError) as ei:
        cm.connect(addr, port, provider=provider)
    ev = ei.value.event
    assert ev.event == E.REJECTED
    assert ev.status == 8
    assert "REJECTED" in str(ei.value)


def test_reject_with_private_data(provider, addr, port):
    with cm.listen(port, addr, provider=provider) as lst:
        def reject():
            req = lst.get_request(timeout=20)
            req.id.reject(b"go away")
        t = threading.Thread(target=reject)
        t.start()
        with pytest.raises(cm.CMEventError) as ei:
            cm.connect(addr, port, provider=provider)
        t.join(20)
    ev = ei.value.event
    assert ev.event == E.REJECTED
    assert ev.status == 28                   # consumer defined
    assert ev.private_data[:7] == b"go away"


def test_listen_on_a_port_in_use(provider, addr, port):
    with cm.listen(port, addr, provider=provider):
        with pytest.raises(rdma.SysError) as ei:
            cm.listen(port, addr, provider=provider)
    assert ei.value.errno == errno.EADDRINUSE
    assert "rdma_bind_addr" in str(ei.value)
    with cm.listen(port, addr, provider=provider):   # free again
        pass


@pytest.mark.parametrize("n", [57, 256, 1000])
def test_private_data_over_the_limit(provider, addr, port, n):
    """A REQ carries 56 bytes after rdma_cm's header: more is EINVAL
    from rdma_connect, before anything is sent."""
    with cm.listen(port, addr, provider=provider) as lst:
        with cm.EventChannel(provider) as ch:
            cid = ch.create_id()
            cid.resolve((addr, port))
            cid.create_qp()
            with pytest.raises(rdma.SysError) as ei:
                cid.connect(private_data=b"x" * n)
            assert ei.value.errno == errno.EINVAL
            assert "rdma_connect" in str(ei.value)
            cid.connect(private_data=b"y" * 56)     # the limit itself
            req = lst.get_request(timeout=20)
            assert req.private_data == b"y" * 56


def test_channel_closed_with_ids_alive(provider, addr, port):
    """Closing the channel destroys its IDs (and what their create_qp
    made) first; using them afterwards is a clear error, not a crash."""
    before = fds()
    ch = cm.EventChannel(provider)
    lid = ch.create_id()
    lid.bind_addr((addr, port))
    lid.listen()
    cid = ch.create_id()
    cid.resolve((addr, port))
    qp = cid.create_qp()
    ch.close()
    assert lid.closed and cid.closed and qp.closed
    with pytest.raises(ValueError):
        cid.resolve_route()
    with pytest.raises(ValueError):
        ch.get_event(timeout=0)
    ch.close()                                  # twice is fine
    with cm.listen(port, addr, provider=provider):   # the port is free
        pass
    assert fds() <= before + 1    # the fabric may keep one fd per process


def test_listener_closed_with_a_request_nobody_took(provider, addr, port):
    """The new ID of a CONNECT_REQUEST still queued is destroyed with the
    channel (the fabric refused to destroy a channel with it: EBUSY)."""
    lst = cm.listen(port, addr, provider=provider)
    with cm.EventChannel(provider) as ch:
        cid = ch.create_id()
        cid.resolve((addr, port))
        cid.create_qp()
        cid.connect()
        time.sleep(0.5)                  # the request reaches the listener
        lst.close()
        assert lst.channel.closed
        ev = ch.wait_event(cid, (E.REJECTED, E.UNREACHABLE, E.CONNECT_ERROR,
                                 E.DISCONNECTED), timeout=60)
        assert ev.id is cid


def test_ctrl_c_while_waiting_for_an_event(provider):
    with cm.EventChannel(provider) as ch:
        ch.create_id()
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            ch.get_event(timeout=30)
        assert time.monotonic() - t0 < 5
        timer.join()
        assert ch.get_event(timeout=0) is None      # still usable


def test_asyncio_awaits_cm_events(provider, addr, port):
    async def main():
        with cm.EventChannel(provider) as ch:
            ach = rdma.aio.AsyncEventChannel(ch)
            lid = ch.create_id()
            lid.bind_addr((addr, port))
            lid.listen()
            cid = ch.create_id()
            cid.resolve_addr((addr, port))
            ev = await asyncio.wait_for(ach.get(), 10)
            assert ev.event == E.ADDR_RESOLVED
            cid.resolve_route()
            ev = await asyncio.wait_for(ach.get(), 10)
            assert ev.event == E.ROUTE_RESOLVED
            cid.create_qp()
            cid.connect()
            ev = await asyncio.wait_for(ach.get(), 10)
            assert ev.event == E.CONNECT_REQUEST
            return True
    assert asyncio.run(main())


def test_connect_disconnect_loop_fds_flat(provider, addr, port):
    """Connections made and torn down in a loop leave no fd behind
    (1,000 on the fabric; fewer on rxe in the emulated VM)."""
    n = 1000 if provider == "ucx" else 40
    with cm.listen(port, addr, provider=provider) as lst:
        def serve():
            for _ in range(n):
                c = lst.accept(timeout=30)
                lst.channel.wait_event(c.id, E.DISCONNECTED, timeout=30)
                c.id.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        for i in range(n):
            with cm.connect(addr, port, provider=provider):
                pass
            if i == 9:
                base = fds()
        t.join(60)
        assert not t.is_alive()
    assert fds() <= base


def test_multicast(provider, addr):
    """UD multicast: MULTICAST_JOIN with the group's ah_attr (global; an
    MGID and MLID on ucx0, the IPv4-mapped group on RoCE), qp_num
    0xFFFFFF and RDMA_UDP_QKEY; a datagram sent to
    the group from one ID's QP arrives at a second ID's QP (attached when
    its join's event was read); after leaving, the QPs close."""
    group = ("239.1.2.3", 0)
    with cm.EventChannel(provider) as ch:
        ids, evs = [], []
        for _ in range(2):
            cid = ch.create_id(cm.RDMA_PS_UDP)
            cid.resolve_addr(group, src=(addr, 0))
            ch.wait_event(cid, E.ADDR_RESOLVED)
            cid.create_qp(ibv.IBV_QPT_UD)
            ids.append(cid)
        tx, rx = ids
        rmr = rx.pd.mr(bytearray(4096), MR_ALL)
        rx.qp.post_recv(ibv.recv_wr(wr_id=1, sg_list=rmr.sge(2048)))
        for cid in ids:
            cid.join_multicast(group)
            ev = ch.wait_event(cid, E.MULTICAST_JOIN)
            assert ev.ah_attr is not None and ev.ah_attr.is_global
            if provider == "ucx":   # an IB port: MGID ff12:4001:..., MLID
                assert ev.ah_attr.grh.dgid[0] == 0xff
                assert 0xC000 <= ev.ah_attr.dlid < 0xFFFF
            else:   # RoCE: the group's IPv4 address, mapped into a GID
                assert bytes(ev.ah_attr.grh.dgid)[-4:] == bytes(
                    [239, 1, 2, 3])
            assert ev.qp_num == 0xFFFFFF
            assert ev.qkey == cm.RDMA_UDP_QKEY
            evs.append(ev)
        assert evs[0].ah_attr.grh.dgid == evs[1].ah_attr.grh.dgid
        ah = tx.pd.ah(evs[0].ah_attr)
        data = pattern(100, 5)
        smr = tx.pd.mr(bytearray(data), MR_ALL)
        tx.qp.post_send(ibv.send_wr(
            wr_id=2, opcode=ibv.IBV_WR_SEND, sg_list=smr.sge(),
            send_flags=ibv.IBV_SEND_SIGNALED, ah=ah,
            remote_qpn=0xFFFFFF, remote_qkey=evs[0].qkey))
        poll_cq(tx.cq, 1)
        wc, = poll_cq(rx.cq, 1)
        assert wc.status == ibv.IBV_WC_SUCCESS
        assert wc.src_qp == tx.qp.qp_num
        assert bytes(rmr.buf[40:140]) == data
        ah.close()
        for cid in ids:
            cid.leave_multicast(group)
        with pytest.raises(rdma.SysError):
            rx.leave_multicast(group)   # not joined any more
        for cid in ids:
            cid.close()


def test_multicast_id_closed_while_joined(provider, addr):
    """Closing a joined ID leaves its groups: its QP is detached (it
    could not be destroyed while attached) and the ID closes cleanly."""
    with cm.EventChannel(provider) as ch:
        cid = ch.create_id(cm.RDMA_PS_UDP)
        cid.resolve_addr(("239.1.2.4", 0), src=(addr, 0))
        ch.wait_event(cid, E.ADDR_RESOLVED)
        qp = cid.create_qp(ibv.IBV_QPT_UD)
        cid.join_multicast(("239.1.2.4", 0))
        ch.wait_event(cid, E.MULTICAST_JOIN)
        if provider == "ucx":
            # IPv6 groups: the IPoIB mapping with the UDP port space's
            # signature, and an MGID given as the address taken as it is
            for group, mgid in ((("ff0e::1:2", 0), "ff12:6001:ffff::1:2"),
                                (("ff12:a01b::7", 0), "ff12:a01b::7")):
                cid.join_multicast(group)
                ev = ch.wait_event(cid, E.MULTICAST_JOIN)
                assert str(ev.ah_attr.grh.dgid) == mgid
        cid.close()
        assert qp.closed


def test_peer_process_dies_after_connecting(provider, addr, port, tmp_path):
    """A server in another process accepts, then is killed: the client
    sees DISCONNECTED (the kernel's CM, and the fabric's, tell it)."""
    code = textwrap.dedent(f"""
        import sys, time
        import rdma.cm as cm
        with cm.listen({port}, {addr!r}, provider={provider!r}) as lst:
            print("listening", flush=True)
            conn = lst.accept(timeout=30)
            print("accepted", flush=True)
            time.sleep(60)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "listening"
        conn = cm.connect(addr, port, provider=provider, timeout=30)
        assert proc.stdout.readline().strip() == "accepted"
        proc.kill()
        proc.wait(10)
        ev = conn.id.channel.wait_event(conn.id, E.DISCONNECTED, timeout=60)
        assert ev.id is conn.id
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_getaddrinfo():
    ai = cm.getaddrinfo("127.0.0.1", 7471)
    assert ai[0].dst_addr == ("127.0.0.1", 7471)
    ai = cm.getaddrinfo(None, 7471, passive=True)
    assert ai[0].src_addr is not None and ai[0].src_addr[1] == 7471
    with pytest.raises(rdma.SysError) as ei:
        cm.getaddrinfo("no-such-host.invalid", 1)
    assert ei.value.errno == errno.EINVAL
