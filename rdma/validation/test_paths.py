"""Path resolution: the local one (RoCE GIDs, the software fabric's own
addressing) always; SA PathRecords where a subnet manager exists."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pickle

import rdma.path
from rdma.path import IBPath
from rdma.pytest_plugin import path_between
from rdma.validation import require

if TYPE_CHECKING:
    from rdma.validation import Record
    import rdma.ibverbs as ibv
    from rdma.devices import EndPort
    from rdma.pytest_plugin import RdmaSetup
    from rdma.umad import UMAD

pytestmark = require


def _check_path(p: IBPath, ep: EndPort, peer: EndPort, what: str) -> None:
    a = ep.attr
    assert p.end_port == ep, f"{what}: end port {p.end_port}"
    assert 1 <= p.MTU <= a.active_mtu, (
        f"{what}: MTU {p.MTU} outside 1..active MTU {a.active_mtu}")
    if ep.link_layer == "Ethernet":
        assert p.has_grh, f"{what}: a RoCE path without GRH"
        assert p.SGID in ep.gids, f"{what}: SGID {p.SGID} is not on {ep}"
        assert p.DGID in peer.gids, f"{what}: DGID {p.DGID} is not on {peer}"
        assert p.hop_limit > 0, f"{what}: hop limit 0"
    else:
        assert p.DLID == peer.lid or p.has_grh, (
            f"{what}: DLID {p.DLID}, {peer} has LID {peer.lid}")


def test_local_path_resolution(rdma_setup: RdmaSetup, rdma_end_port: EndPort,
                               rdma_peer_end_port: EndPort,
                               rdma_ctx: ibv.Context,
                               record_property: Record) -> None:
    """resolve_path() without an SA gives complete paths both ways that
    make address handles, survive pickling and reverse into each other."""
    ep, peer = rdma_end_port, rdma_peer_end_port
    for p in {ep: False, peer: True}.items():
        try:
            rdma_setup.ready_port(peer=p[1])
        except Exception as e:                 # not ACTIVE, bad GID index
            raise AssertionError(str(e)) from None
    pa = path_between(ep, rdma_setup.gid_index(), peer,
                      rdma_setup.peer_gid_index(), dqpn=1)
    pb = path_between(peer, rdma_setup.peer_gid_index(), ep,
                      rdma_setup.gid_index(), dqpn=1)
    _check_path(pa, ep, peer, f"path {ep} -> {peer}")
    _check_path(pb, peer, ep, f"path {peer} -> {ep}")
    assert pa.complete(), f"path {pa} is not complete"
    with rdma_ctx.pd() as pd:
        ah = pd.ah(pa)
        assert not ah.closed
    q = pickle.loads(pickle.dumps(pa))
    q.end_port = ep
    assert q == pa, f"path changed through pickle: {q!r} != {pa!r}"
    r = pa.copy().reverse(for_reply=False)
    if ep.link_layer == "Ethernet":
        assert (r.SGID, r.DGID) == (pa.DGID, pa.SGID), \
            "reverse() kept the GIDs"
    record_property("detail", str(pa))


def test_sa_path_record(rdma_setup: RdmaSetup, rdma_sa: UMAD,
                        rdma_peer_end_port: EndPort,
                        record_property: Record) -> None:
    """The SA answers PathRecord queries to this port and to the peer, with
    LIDs, MTU and P_Key that match the ports."""
    ep = rdma_sa.end_port
    peer = rdma_peer_end_port
    found = []
    for dst in {ep: 0, peer: 0}:
        p = IBPath(ep, DGID=dst.gids[0] if dst.gids else None)
        if p.DGID is None:
            p = IBPath(ep, DLID=dst.lid)
        try:
            rdma.path.resolve_path(rdma_sa, p, reversible=True)
        except Exception as e:
            raise AssertionError(f"the SA could not resolve a path {ep} -> "
                                 f"{dst}: {e}") from None
        assert p.SLID == ep.lid, \
            f"PathRecord SLID {p.SLID}, {ep} has {ep.lid}"
        assert p.DLID == dst.lid, \
            f"PathRecord DLID {p.DLID}, {dst} has {dst.lid}"
        assert p.MTU <= ep.attr.active_mtu, (
            f"PathRecord MTU {p.MTU} above the active MTU "
            f"{ep.attr.active_mtu}")
        assert p.pkey & 0x7FFF in [k & 0x7FFF for k in ep.pkeys], (
            f"PathRecord P_Key {p.pkey:#x} is not in {ep}'s table")
        found.append(f"{p.SLID}->{p.DLID} MTU {p.MTU} SL {p.SL}")
    record_property("detail", "; ".join(found))
