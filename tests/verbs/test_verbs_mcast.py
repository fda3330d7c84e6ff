"""UD multicast, on rxe and ucx0 alike: ibv_attach_mcast/ibv_detach_mcast
(their argument checks), a SEND to a group reaching every attached QP with
a GRH whose DGID is the group's, and no other QP; a detached QP gets
nothing more.  On rxe (RoCE) the group is an IPv4-mapped GID whose IPv4
group the test joins on the receiving interface, as a RoCE application
does (examples/ud_multicast.py)."""
import errno
import socket

import pytest

import rdma
import rdma.IBA
import rdma.ibverbs as ibv
from verbs_fixtures import (GRH_LEN, QKEY, Side, ah_attr_to, check_ok,
                            differs, expect_no_completion, poll_cq, to_init,
                            to_rtr, to_rts)

pytest_plugins = ["verbs_fixtures"]

UD = ibv.IBV_QPT_UD
MLID = 0xC001               # a multicast LID (ignored on RoCE)
MCAST_QPN = 0xFFFFFF


def group_of(side):
    """A multicast GID for side's port, and the IPv4 join (a socket, close
    it to leave) RoCE needs, or None."""
    sgid = bytes(side.gid)
    prefix = b"\0" * 10 + b"\xff\xff"
    if side.ctx.end_port.link_layer == "Ethernet" and sgid[:12] == prefix:
        mgid = prefix + socket.inet_aton("239.1.2.4")
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     mgid[12:] + sgid[12:])
        return rdma.IBA.GID(mgid), s
    return rdma.IBA.GID("ff12:401b:ffff::4:5:6"), None


def ud_side(ctx):
    s = Side(ctx, UD)
    to_init(s.qp)
    to_rtr(s.qp)
    to_rts(s.qp)
    return s


@pytest.fixture
def trio(ctx):
    """A sender and three receivers (UD QPs in RTS) on ctx."""
    sides = [ud_side(ctx) for _ in range(4)]
    yield sides
    for s in sides:
        s.close()


def send_to_group(a, mgid, data, wr_id=1):
    a.buf[:len(data)] = data
    ah = a.pd.ah(ah_attr_to(mgid, sgid_index=a.gid_index, dlid=MLID))
    a.qp.post_send(ibv.send_wr(
        wr_id=wr_id, opcode=ibv.IBV_WR_SEND,
        send_flags=ibv.IBV_SEND_SIGNALED,
        sg_list=a.mr.sge(length=len(data)), ah=ah, remote_qpn=MCAST_QPN,
        remote_qkey=QKEY))
    check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_SEND, wr_id)
    return ah


def check_got(side, data, mgid):
    """side received data sent to group mgid: the GRH's DGID is the group's
    (RoCE v2 over IPv4: the IPv4 header's destination, ib-grh)."""
    wc = poll_cq(side.recv_cq)[0]
    check_ok(wc, ibv.IBV_WC_RECV)
    assert wc.wc_flags & ibv.IBV_WC_GRH
    assert wc.byte_len == GRH_LEN + len(data)
    assert bytes(side.buf[GRH_LEN:GRH_LEN + len(data)]) == data
    if differs(side.ctx.provider, "ib-grh"):
        assert bytes(side.buf[24:40]) == bytes(mgid)
    else:
        assert bytes(side.buf[36:40]) == bytes(mgid)[12:]


def test_send_reaches_every_attached_qp(trio):
    a, b1, b2, other = trio
    mgid, join = group_of(a)
    try:
        for s in (b1, b2):
            s.qp.attach_mcast(mgid, MLID)
        for s in (b1, b2, other):
            s.post_recv(wr_id=7)
        data = b"to the whole group"
        send_to_group(a, mgid, data)
        for s in (b1, b2):
            check_got(s, data, mgid)
        expect_no_completion(other.recv_cq)
        # b2 leaves: the next SEND reaches b1 only
        b2.qp.detach_mcast(mgid, MLID)
        b1.post_recv(wr_id=8)
        b2.post_recv(wr_id=8)
        send_to_group(a, mgid, b"b1 only", wr_id=2)
        check_got(b1, b"b1 only", mgid)
        expect_no_completion(b2.recv_cq)
        expect_no_completion(other.recv_cq)
        b1.qp.detach_mcast(mgid, MLID)
    finally:
        if join is not None:
            join.close()


def test_wrong_qkey_is_dropped(trio):
    """A member whose Q_Key differs drops the datagram, as for unicast."""
    a, b1, b2, _ = trio
    mgid, join = group_of(a)
    try:
        b2.qp.modify(ibv.qp_attr(qkey=QKEY + 1))
        for s in (b1, b2):
            s.qp.attach_mcast(mgid, MLID)
            s.post_recv(wr_id=3)
        send_to_group(a, mgid, b"qkey")
        check_got(b1, b"qkey", mgid)
        expect_no_completion(b2.recv_cq)
        for s in (b1, b2):
            s.qp.detach_mcast(mgid, MLID)
    finally:
        if join is not None:
            join.close()


def test_attach_detach_argument_errors(pair_factory, ctx):
    """EINVAL for what ib_attach_mcast refuses: a QP that is not UD, a GID
    that is not multicast; detaching a QP that is not attached; attaching
    twice is no error."""
    a, b = pair_factory(UD)
    mgid, join = group_of(b)
    if join is not None:
        join.close()
    rc = pair_factory(ibv.IBV_QPT_RC)[0]
    with pytest.raises(rdma.SysError) as ei:
        rc.qp.attach_mcast(mgid, MLID)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(rdma.SysError) as ei:
        b.qp.attach_mcast(b.gid, MLID)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(rdma.SysError) as ei:
        b.qp.detach_mcast(mgid, MLID)
    assert ei.value.errno == errno.EINVAL
    b.qp.attach_mcast(mgid, MLID)
    b.qp.attach_mcast(mgid, MLID)
    b.qp.detach_mcast(mgid, MLID)
    with pytest.raises(rdma.SysError) as ei:
        b.qp.detach_mcast(mgid, MLID)
    assert ei.value.errno == errno.EINVAL


def test_destroy_attached_qp(ctx):
    """Closing a QP attached to a group is EBUSY, as the kernel says, and
    the QP stays open and attached (it still receives the group's SENDs),
    and so does its PD when the PD's close meets it; detached, it closes,
    and the group goes on for the others."""
    sides = [ud_side(ctx) for _ in range(3)]
    a, b, c = sides
    mgid, join = group_of(a)
    try:
        for s in (b, c):
            s.qp.attach_mcast(mgid, MLID)
        with pytest.raises(rdma.SysError) as ei:
            c.qp.close()
        assert ei.value.errno == errno.EBUSY
        assert "ibv_destroy_qp" in str(ei.value)
        assert not c.qp.closed
        c.post_recv(wr_id=2)
        send_to_group(a, mgid, b"still attached")
        check_got(c, b"still attached", mgid)
        # its PD's close meets it: the PD stays open (its other children
        # closed), the QP's error is raised
        with pytest.raises(rdma.SysError) as ei:
            c.pd.close()
        assert ei.value.errno == errno.EBUSY
        assert not c.pd.closed and not c.qp.closed and c.mr.closed
        c.qp.detach_mcast(mgid, MLID)
        c.qp.close()
        assert c.qp.closed
        b.post_recv(wr_id=1)
        send_to_group(a, mgid, b"after a destroy")
        check_got(b, b"after a destroy", mgid)
        b.qp.detach_mcast(mgid, MLID)
    finally:
        if join is not None:
            join.close()
        for s in sides:
            s.close()


def test_device_limits(ctx):
    """query_device reports the multicast limits (non-zero)."""
    d = ctx.query_device()
    assert d.max_mcast_grp > 0 and d.max_mcast_qp_attach > 0
    assert d.max_total_mcast_qp_attach >= d.max_mcast_qp_attach
