"""Connecting virtual QPs (:class:`rdma.ibverbs.VirtualQP`).

A VirtualQP owns several RC data QPs and stripes each message over them
(IBVerbX's ``IbvVirtualQp``).  Both ends exchange one record out of band
(:func:`local_info`: the VirtualQP's :meth:`~rdma.ibverbs.VirtualQP.info`
-- mode, data QP numbers, first sequence number -- plus the port's LID, GID
and a PSN), then each calls :func:`connect`, which builds the one
:class:`rdma.path.IBPath` to the peer and hands it to
``VirtualQP.connect`` (the peer's mode and number of data QPs are checked
there)::

    cq = pd.virtual_cq()
    vqp = pd.virtual_qp(4, cq, mode="dqplb", fragment=65536)
    mine = rdma.virtual.local_info(vqp, end_port)
    peer = exchange_somehow(mine)            # e.g. rdma.virtual.exchange()
    rdma.virtual.connect(vqp, end_port, mine, peer)

:func:`exchange` does the out-of-band step over a connected TCP socket (a
JSON line each way, as the ``ibtool`` commands exchange their records);
:func:`connect_pair` connects two VirtualQPs of one process (tests,
notebooks).
"""
from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Any, Dict, Optional

import rdma.path
from rdma import IBA
from rdma.IBA import GID

if TYPE_CHECKING:
    from rdma.devices import EndPort
    from rdma.ibverbs import VirtualQP

__all__ = ["gid_index_for", "local_info", "path_to", "connect", "exchange",
           "connect_pair"]


def gid_index_for(end_port: "EndPort") -> int:
    """The GID index to address with: -1 (LID only) on InfiniBand and the
    software fabric, on RoCE the first IPv4-mapped RoCE v2 GID (then any
    non-zero one)."""
    if end_port.link_layer != "Ethernet":
        return -1
    v4 = b"\0" * 10 + b"\xff\xff"
    gids, types = end_port.gids, end_port.gid_types
    for want_v4 in (True, False):
        for i, g in enumerate(gids):
            if (any(bytes(g)) and types[i] == IBA.GID_TYPE_ROCE_V2
                    and (bytes(g)[:12] == v4) == want_v4):
                return i
    for i, g in enumerate(gids):
        if any(bytes(g)):
            return i
    raise rdma.RDMAError(f"{end_port} has no GID")


def local_info(vqp: "VirtualQP", end_port: "EndPort",
               gid_index: Optional[int] = None,
               psn: Optional[int] = None) -> Dict[str, Any]:
    """This end's record for the peer: ``vqp.info()`` plus ``lid``,
    ``gid`` (text, or None without a GRH), ``gid_index`` and ``psn``
    (random unless given).  JSON-serialisable."""
    if gid_index is None:
        gid_index = gid_index_for(end_port)
    d = dict(vqp.info())
    d["lid"] = end_port.lid
    d["gid_index"] = gid_index
    d["gid"] = str(end_port.gids[gid_index]) if gid_index >= 0 else None
    d["psn"] = (int.from_bytes(os.urandom(3), "big") if psn is None
                else psn) & 0xFFFFFF
    return d


def path_to(vqp: "VirtualQP", end_port: "EndPort", mine: Dict[str, Any],
            peer: Dict[str, Any],
            **path_options: Any) -> "rdma.path.IBPath":
    """The :class:`rdma.path.IBPath` from this end (*mine*, from
    :func:`local_info`) to the peer's record *peer*; *path_options* set
    path attributes (``retries``, ``packet_life_time``, ``MTU``...)."""
    opts = dict(retries=7, min_rnr_timer=12, packet_life_time=12)
    opts.update(path_options)
    path = rdma.path.IBPath(end_port, dqpn=peer["qpns"][0],
                            dqpsn=peer["psn"], sqpsn=mine["psn"], **opts)
    path.pkey_index = 0
    if peer.get("gid") and mine.get("gid_index", -1) >= 0:
        path.has_grh = True
        path.DGID = GID(peer["gid"])
        path.SGID_index = mine["gid_index"]
    else:
        path.DLID = peer["lid"]
    if end_port.link_layer == "Ethernet" or end_port.provider != "verbs":
        rdma.path.resolve_path(None, path)
    else:
        path.SLID = end_port.lid
    sqpsn, dqpsn = path.sqpsn, path.dqpsn
    rdma.path.fill_path(vqp, path, 1)
    path.sqpsn, path.dqpsn = sqpsn, dqpsn
    return path


def connect(vqp: "VirtualQP", end_port: "EndPort", mine: Dict[str, Any],
            peer: Dict[str, Any],
            **path_options: Any) -> "rdma.path.IBPath":
    """Bring *vqp*'s data QPs to RTS towards the peer's; return the path.
    ``ValueError`` if the peer's mode or number of data QPs differ."""
    path = path_to(vqp, end_port, mine, peer, **path_options)
    vqp.connect(path, peer)
    return path


def exchange(sock: socket.socket, vqp: "VirtualQP", end_port: "EndPort",
             gid_index: Optional[int] = None,
             timeout: Optional[float] = 30.0) -> Dict[str, Any]:
    """Send this end's record over the connected socket *sock* (one JSON
    line), read the peer's and connect; return the peer's record."""
    mine = local_info(vqp, end_port, gid_index)
    sock.settimeout(timeout)
    sock.sendall(json.dumps(mine).encode() + b"\n")
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise rdma.RDMAError("the peer closed the connection before "
                                 "sending its VirtualQP record")
        buf += chunk
        if len(buf) > 1 << 20:
            raise rdma.RDMAError("the peer's VirtualQP record is too long")
    peer: Dict[str, Any] = json.loads(buf)
    connect(vqp, end_port, mine, peer)
    return peer


def connect_pair(a: "VirtualQP", b: "VirtualQP", end_port_a: "EndPort",
                 end_port_b: "Optional[EndPort]" = None,
                 **path_options: Any) -> None:
    """Connect two VirtualQPs of this process to each other."""
    end_port_b = end_port_b or end_port_a
    ma = local_info(a, end_port_a)
    mb = local_info(b, end_port_b)
    connect(a, end_port_a, ma, mb, **path_options)
    connect(b, end_port_b, mb, ma, **path_options)
