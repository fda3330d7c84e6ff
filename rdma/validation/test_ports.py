"""The end ports: found, ACTIVE, with sane GID and P_Key tables."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Tuple

import pytest

from rdma.pytest_plugin import (describe_gids,
                                gid_problem, port_problem)
from rdma.validation import MAX_SIZE, fmt_size, require

if TYPE_CHECKING:
    from rdma.validation import Record
    from rdma.devices import EndPort
    from rdma.pytest_plugin import RdmaSetup

pytestmark = require

_GID_TYPES = {0: "IB", 1: "RoCE v1", 2: "RoCE v2"}


def _ports(setup: RdmaSetup, ep: EndPort,
           peer: EndPort) -> List[Tuple[EndPort, int]]:
    """(end port, GID index) of each port under test."""
    out = [(ep, setup.gid_index())]
    if peer != ep:
        out.append((peer, setup.peer_gid_index()))
    return out


def test_device(rdma_setup: RdmaSetup, rdma_end_port: EndPort,
                rdma_peer_end_port: EndPort,
                record_property: Record,
                record_testsuite_property: Record) -> None:
    """The device opens and reports usable limits."""
    import rdma
    details = []
    for ep in {rdma_end_port: 0, rdma_peer_end_port: 0}:
        with rdma.get_verbs(ep) as ctx:
            a = ctx.query_device()
        problems = []
        if a.phys_port_cnt < 1:
            problems.append("no ports")
        for name in ("max_qp", "max_cq", "max_cqe", "max_mr", "max_pd",
                     "max_qp_wr", "max_sge"):
            if getattr(a, name) < 1:
                problems.append(f"{name} is {getattr(a, name)}")
        if a.max_mr_size < 2 * MAX_SIZE:
            problems.append(f"max_mr_size {a.max_mr_size} < 2 MiB")
        assert not problems, f"{ep.parent}: " + ", ".join(problems)
        details.append(f"{ep.parent} ({ep.provider}, "
                       f"{ep.parent.transport_name}, fw {a.fw_ver or '-'})")
    idx = rdma_setup.gid_index()
    record_testsuite_property("rdma_end_port", str(rdma_end_port))
    record_testsuite_property("rdma_provider", rdma_end_port.provider)
    record_testsuite_property("rdma_link_layer", rdma_end_port.link_layer)
    record_testsuite_property("rdma_gid_index", str(idx))
    record_testsuite_property(
        "rdma_peer", "loopback" if rdma_peer_end_port == rdma_end_port
        else str(rdma_peer_end_port))
    record_property("detail", "; ".join(details))


def test_port_active(rdma_end_port: EndPort, rdma_peer_end_port: EndPort,
                     record_property: Record) -> None:
    """Every port under test is ACTIVE (physical link up)."""
    details = []
    for ep in {rdma_end_port: 0, rdma_peer_end_port: 0}:
        ep.refresh()
        problem = port_problem(ep)
        assert problem is None, problem
        a = ep.attr
        details.append(f"{ep} ACTIVE, {ep.link_layer}, MTU "
                       f"{fmt_size(128 << a.active_mtu)}"
                       + (f", LID {ep.lid}" if ep.link_layer != "Ethernet"
                          else ""))
    record_property("detail", "; ".join(details))


def test_port_limits(rdma_end_port: EndPort, rdma_peer_end_port: EndPort,
                     record_property: Record) -> None:
    """The ports carry 1 MiB messages and their MTU is valid."""
    for ep in {rdma_end_port: 0, rdma_peer_end_port: 0}:
        a = ep.attr
        assert 1 <= a.active_mtu <= 5, \
            f"{ep}: invalid active MTU {a.active_mtu}"
        assert a.active_mtu <= a.max_mtu, \
            f"{ep}: active MTU {a.active_mtu} above max MTU {a.max_mtu}"
        assert a.max_msg_sz >= MAX_SIZE, \
            f"{ep}: max_msg_sz {a.max_msg_sz} is below 1 MiB"
    record_property("detail", f"max_msg_sz "
                              f"{fmt_size(rdma_end_port.attr.max_msg_sz)}")


def test_gid_table(rdma_setup: RdmaSetup, rdma_end_port: EndPort,
                   rdma_peer_end_port: EndPort,
                   record_property: Record) -> None:
    """GID tables: the default GID (index 0) is set, no GID appears twice,
    types fit the link layer, InfiniBand GIDs carry the port GUID."""
    details = []
    for ep in {rdma_end_port: 0, rdma_peer_end_port: 0}:
        ep.refresh()
        gids = [(i, g, t) for i, (g, t) in
                enumerate(zip(ep.gids, ep.gid_types)) if g]
        assert gids, (f"the GID table of {ep} is empty "
                      + ("(does its network interface have an address and "
                         "is it up?)" if ep.link_layer == "Ethernet" else ""))
        assert ep.gids[0], (f"GID index 0 (the default GID) of {ep} is empty;"
                            f" non-empty GIDs: {describe_gids(ep)}")
        seen: Dict[Tuple[bytes, int], int] = {}
        for i, g, t in gids:
            key = (bytes(g), t)
            assert key not in seen, (f"{ep}: GID {g} ({_GID_TYPES.get(t, t)})"
                                     f" is at index {seen[key]} and {i}")
            seen[key] = i
        if ep.link_layer == "Ethernet":
            bad = [f"{i} {g} (type {t})" for i, g, t in gids
                   if t not in (1, 2)]
            assert not bad, \
                f"{ep}: RoCE GIDs of no RoCE type: {', '.join(bad)}"
        elif ep.provider == "verbs":
            guid = bytes(ep.gids[0])[8:]
            assert guid != b"\0" * 8, \
                f"{ep}: GID 0 {ep.gids[0]} has no port GUID"
            bad = [f"{i} {g}" for i, g, t in gids if bytes(g)[8:] != guid]
            assert not bad, (f"{ep}: GIDs with another interface ID than "
                             f"GID 0 ({ep.gids[0]}): {', '.join(bad)}")
        details.append(f"{ep}: {len(gids)} GIDs")
    record_property("detail", "; ".join(details))


def test_gid_index(rdma_setup: RdmaSetup, rdma_end_port: EndPort,
                   rdma_peer_end_port: EndPort,
                   record_property: Record) -> None:
    """The GID index in use (--rdma-gid-index, or the default) holds a GID
    that can source traffic."""
    details = []
    for ep, idx in _ports(rdma_setup, rdma_end_port, rdma_peer_end_port):
        problem = gid_problem(ep, idx)
        assert problem is None, problem
        t = ep.gid_types[idx]
        if ep.link_layer == "Ethernet":
            assert t in (1, 2), f"{ep}: GID index {idx} has no RoCE type ({t})"
        chosen = "given" if rdma_setup.gid_index_opt is not None else "default"
        details.append(f"{ep} GID[{idx}] {ep.gids[idx]} "
                       f"({_GID_TYPES.get(t, t)}, {chosen})")
    if rdma_peer_end_port != rdma_end_port and \
            rdma_end_port.link_layer == "Ethernet":
        g1 = rdma_end_port.gids[rdma_setup.gid_index()]
        g2 = rdma_peer_end_port.gids[rdma_setup.peer_gid_index()]
        v4 = [bytes(g)[:12] == b"\0" * 10 + b"\xff\xff" for g in (g1, g2)]
        assert v4[0] == v4[1], (f"the GIDs in use are of different families "
                                f"({g1} and {g2}): choose GID indexes of the "
                                f"same IP family")
    record_property("detail", "; ".join(details))


def test_pkey_table(rdma_end_port: EndPort, rdma_peer_end_port: EndPort,
                    record_property: Record) -> None:
    """The default partition (0xFFFF, or 0x7FFF limited) is in the P_Key
    table."""
    for ep in {rdma_end_port: 0, rdma_peer_end_port: 0}:
        assert ep.pkeys, f"the P_Key table of {ep} is empty"
        full = [k for k in ep.pkeys if k & 0x7FFF == 0x7FFF]
        assert full, (f"{ep} is not in the default partition: P_Keys "
                      f"{', '.join(hex(k) for k in ep.pkeys if k)}")
    record_property("detail", f"{rdma_end_port}: P_Key[0] "
                              f"{rdma_end_port.pkeys[0]:#06x}")


def test_peer_reachable(rdma_setup: RdmaSetup, rdma_end_port: EndPort,
                        rdma_peer_end_port: EndPort,
                        record_property: Record) -> None:
    """Two ports: same link layer, and the peer's GID/LID is usable."""
    if rdma_peer_end_port == rdma_end_port:
        pytest.skip(f"loopback on {rdma_end_port} (give --rdma-peer-device "
                    f"to check a second port)")
    a, b = rdma_end_port, rdma_peer_end_port
    assert a.link_layer == b.link_layer, (
        f"{a} is {a.link_layer} but {b} is {b.link_layer}: they cannot talk")
    if a.link_layer != "Ethernet" and a.provider == "verbs":
        assert b.lid and a.lid, f"no LID: {a} LID {a.lid}, {b} LID {b.lid}"
    g = b.gids[rdma_setup.peer_gid_index()]
    assert g not in a.gids or a.parent == b.parent, (
        f"{b}'s GID {g} is also on {a}: the 'two' ports share an address")
    record_property("detail", f"{a} -> {b} ({g})")
