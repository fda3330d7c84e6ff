"""Optional device features: shared receive queues, memory windows and UD
multicast.  Each test is skipped, with the reason, when the device does
not have the feature."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import random

import pytest

import rdma.ibverbs as ibv
from rdma.IBA import GID, mtu_to_bytes
from rdma.pytest_plugin import GRH_LEN, poll_cq
from rdma.validation import (GUARD, POISON, TIMEOUT, check_data, check_wc,
                             random_bytes, require)

if TYPE_CHECKING:
    from rdma.validation import Record
    from rdma.devices import EndPort
    from rdma.pytest_plugin import QPPair, RdmaSetup

pytestmark = require


@pytest.mark.rdma_srq
@pytest.mark.parametrize("transport", ["RC", "UD"])
def test_srq(rdma_setup: RdmaSetup, rdma_pair: Callable[..., QPPair],
             rdma_end_port: EndPort,
             record_property: Record,
             transport: str) -> None:
    """Receives posted to a shared receive queue serve SENDs of several
    sizes; completions name the QP."""
    qpt = ibv.IBV_QPT_RC if transport == "RC" else ibv.IBV_QPT_UD
    mtu = mtu_to_bytes(rdma_end_port.attr.active_mtu)
    sizes = [1, 100, mtu] if transport == "UD" else [1, 100, 5000, 65536]
    grh = GRH_LEN if transport == "UD" else 0
    slot = grh + max(sizes) + GUARD
    n = len(sizes)
    pair = rdma_pair(qpt, size=2 * n * slot, depth=2 * n, srq=True)
    a, b = pair.a, pair.b
    for i in range(n):
        b.post_recv(slot, off=n * slot + i * slot, wr_id=50 + i)
    b.buf[n * slot:2 * n * slot] = bytes([POISON]) * (n * slot)
    msgs = [random_bytes(s) for s in sizes]
    for i, m in enumerate(msgs):
        a.buf[i * slot:i * slot + len(m)] = m
    a.qp.post_send([a.send_wr(ibv.IBV_WR_SEND, len(m), off=i * slot,
                              wr_id=i) for i, m in enumerate(msgs)])
    for wc in poll_cq(a.cq, n, TIMEOUT, f"{transport} SENDs to an SRQ"):
        check_wc(f"{transport} SEND to an SRQ", wc, ibv.IBV_WC_SEND)
    got = {}
    for wc in poll_cq(b.cq, n, TIMEOUT, f"{transport} SRQ receives"):
        check_wc(f"{transport} SRQ receive", wc, ibv.IBV_WC_RECV)
        assert wc.qp_num == b.qp.qp_num, \
            f"SRQ receive reports QP {wc.qp_num:#x}, not {b.qp.qp_num:#x}"
        got[wc.wr_id - 50] = wc.byte_len - grh
    assert sorted(got) == list(range(n)), f"SRQ receives used {sorted(got)}"
    # The SRQ hands out receives in its own order: match by length.
    by_len = {len(m): m for m in msgs}
    for slot_i, length in got.items():
        off = n * slot + slot_i * slot + grh
        assert length in by_len, f"SRQ receive of unexpected length {length}"
        check_data(f"{transport} SRQ message of {length} B",
                   memoryview(b.buf)[off:off + length], by_len[length])
    record_property("detail", f"{n} SENDs ({', '.join(map(str, sizes))} B) "
                              f"through an SRQ")


@pytest.mark.rdma_mw
def test_memory_window(rdma_end_port: EndPort, rdma_pd: ibv.PD,
                       record_property: Record) -> None:
    """Memory windows can be allocated (type 1, and type 2 where the device
    says so) and have an rkey."""
    a = rdma_end_port.parent.attr
    types = [("type 1", ibv.IBV_MW_TYPE_1)]
    if a.device_cap_flags & (ibv.IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                             ibv.IBV_DEVICE_MEM_WINDOW_TYPE_2B):
        types.append(("type 2", ibv.IBV_MW_TYPE_2))
    done = []
    for name, t in types:
        try:
            mw = rdma_pd.mw(t)
        except NotImplementedError as e:
            pytest.skip(f"memory windows are not implemented here: {e}")
        with mw:
            assert mw.type == t, f"MW {name}: type {mw.type}"
        done.append(name)
    record_property("detail", f"allocated {', '.join(done)} (binding is not "
                              f"checked)")


def _mgid(end_port: EndPort, gid_index: int) -> GID:
    """A multicast GID of the family of the GID in use."""
    g = bytes(end_port.gids[gid_index])
    if g[:12] == b"\0" * 10 + b"\xff\xff":            # RoCE v2 over IPv4
        return GID(b"\0" * 10 + b"\xff\xff" +
                   bytes([239, 1, random.randrange(256),
                          random.randrange(1, 255)]))
    return GID(bytes([0xff, 0x0e]) + b"\0" * 10 +
               random.getrandbits(32).to_bytes(4, "big"))


@pytest.mark.rdma_ud_multicast
def test_ud_multicast(rdma_setup: RdmaSetup, rdma_pair: Callable[..., QPPair],
                      rdma_end_port: EndPort, rdma_peer_end_port: EndPort,
                      record_property: Record) -> None:
    """A UD SEND to a multicast group reaches every QP attached to it
    (only with --rdma-multicast: delivery needs multicast routing in the
    fabric, which a basic check should not demand)."""
    if not rdma_setup.multicast:
        pytest.skip("multicast delivery is checked only on request "
                    "(--rdma-multicast; ibtool validate --multicast): it "
                    "needs multicast routing in the fabric")
    if rdma_end_port.link_layer != "Ethernet":
        pytest.skip("multicast on InfiniBand needs an SA MCMemberRecord join, "
                    "which this suite does not do")
    pair = rdma_pair(ibv.IBV_QPT_UD, size=8192)
    second = rdma_pair(ibv.IBV_QPT_UD, size=8192)
    a = pair.a                                   # the sender
    members = [pair.b, second.b]                 # on the peer port
    mgid = _mgid(rdma_peer_end_port, rdma_setup.peer_gid_index())
    for m in members:
        m.qp.attach_mcast(mgid, 0)
    try:
        msg = random_bytes(min(512,
                               mtu_to_bytes(rdma_end_port.attr.active_mtu)))
        for m in members:
            m.post_recv(GRH_LEN + len(msg) + GUARD, off=4096, wr_id=77)
        a.buf[0:len(msg)] = msg
        assert a.path is not None and a.path.qkey is not None
        path = a.path.copy(DGID=mgid, dqpn=0xFFFFFF)
        wr = ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_SEND,
                         send_flags=ibv.IBV_SEND_SIGNALED,
                         sg_list=a.mr.sge(len(msg), 0), ah=a.pd.ah(path),
                         remote_qpn=0xFFFFFF, remote_qkey=a.path.qkey)
        a.qp.post_send(wr)
        check_wc("multicast SEND",
                 poll_cq(a.cq, 1, TIMEOUT, "multicast SEND")[0],
                 ibv.IBV_WC_SEND)
        for k, m in enumerate(members):
            wc = poll_cq(m.cq, 1, 10.0, f"multicast receive on member {k} "
                                        f"(group {mgid})")[0]
            check_wc(f"multicast receive on member {k}", wc, ibv.IBV_WC_RECV)
            check_data(f"multicast message on member {k}",
                       memoryview(m.buf)[4096 + GRH_LEN:
                                         4096 + GRH_LEN + len(msg)],
                       msg)
    finally:
        for m in members:
            try:
                m.qp.detach_mcast(mgid, 0)
            except Exception:
                pass
    record_property("detail", f"group {mgid}: {len(members)} members received")
