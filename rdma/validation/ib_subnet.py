"""Checks of an InfiniBand subnet, for :mod:`rdma.validation.ib_suite` and
scripts.

Each ``check_*`` function looks at a subnet discovered with
:func:`discover` (and, for counters and the SM, asks the nodes through a
:class:`rdma.umad.UMAD`) and returns a list of failure messages, empty
when the subnet passes.  Every message names the node (its description
and GUID), the port and the value at fault.

- :func:`check_topology`: the links equal an expected topology file
  (ibnetdiscover's format, e.g. written by ``ibtool ibnetdiscover`` on the
  healthy subnet);
- :func:`check_link_rates`: every link at its expected width and speed
  (the file's ``4xSDR`` comments, or given values);
- :func:`check_error_counters`: no PortCounters error counter above its
  threshold;
- :func:`check_routes`: every LID reachable from every end port through
  the switches' forwarding tables;
- :func:`check_sm`: exactly one master SM.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from rdma import IBA

__all__ = ["discover", "Topology", "parse_topology", "check_topology",
           "check_link_rates", "check_error_counters", "check_routes",
           "check_sm", "node_name", "ERROR_COUNTERS"]

#: PortCounters error counters (:data:`rdma.IBA.PC_ERROR_COUNTERS`).
ERROR_COUNTERS = IBA.PC_ERROR_COUNTERS
_IS_SM = 1 << 1               # PortInfo:CapabilityMask IsSM
_SM_MASTER = 3


def discover(umad: Any) -> Any:
    """The subnet seen from ``umad``'s port: nodes, descriptions, links,
    PortInfo, LIDs and the switches' forwarding tables."""
    import rdma.discovery
    import rdma.subnet
    sched = rdma.discovery.scheduler_class()(umad)
    sbn = rdma.subnet.Subnet()
    rdma.discovery.load(sched, sbn, ["all_NodeInfo", "all_NodeDescription",
                                     "all_topology", "all_LFDB"])
    return sbn


def node_name(node: Any) -> str:
    """A node as ibnetdiscover names it: ``S-<guid>``, ``H-<guid>``."""
    prefix = {"Switch": "S", "CA": "H", "Router": "R"}[type(node).__name__]
    return f"{prefix}-{int(node.ninf.nodeGUID):016x}"


def _who(node: Any) -> str:
    return f"\"{node.desc}\" ({node_name(node)})"


# -- the expected topology ---------------------------------------------------

class Topology:
    """An ibnetdiscover topology file: node names, descriptions and the
    links (each once, as a sorted pair of ``(name, port)``) with the rate
    its comment gives (``4xSDR``), if any."""

    def __init__(self) -> None:
        #: name -> (type word ``Switch``/``Ca``/``Rt``, description).
        self.nodes: Dict[str, Tuple[str, str]] = {}
        #: ((name, port), (name, port)) -> rate text or None.
        self.links: Dict[Tuple[Tuple[str, int], Tuple[str, int]],
                         Optional[str]] = {}


_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*(?:#\s*"([^"]*)")?')
_LINK = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s*"([^"]+)"\[(\d+)\]'
                   r'(?:\([0-9a-fA-F]+\))?\s*(?:#(.*))?$')
_RATE = re.compile(r"\b(\d+x(?:SDR|DDR|QDR|FDR|EDR|HDR|NDR|FDR10))\b")


def parse_topology(path: Any) -> Topology:
    """Read an ibnetdiscover topology file.

    :raises ValueError: naming the line that is neither a node, a link,
        a comment nor one of the ``key=value`` lines."""
    topo = Topology()
    current = None
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#") or re.match(r"^\w+=", s):
            continue
        m = _NODE.match(s)
        if m:
            current = m.group(3)
            topo.nodes[current] = (m.group(1), m.group(4) or current)
            continue
        m = _LINK.match(s)
        if m and current is not None:
            a = (current, int(m.group(1)))
            b = (m.group(2), int(m.group(3)))
            rate = _RATE.search(m.group(4) or "")
            topo.links[(min(a, b), max(a, b))] = rate.group(1) \
                if rate else None
            continue
        raise ValueError(f"{path}:{n}: not a topology line: {line!r}")
    return topo


def _links(sbn: Any) -> Dict[Tuple[Tuple[str, int], Tuple[str, int]], Any]:
    out = {}
    for a, b in sbn.topology.items():
        if a.parent.ninf is None or b.parent.ninf is None:
            continue
        x = (node_name(a.parent), a.port_id)
        y = (node_name(b.parent), b.port_id)
        out[(min(x, y), max(x, y))] = a if x <= y else b
    return out


def _describe_end(sbn_nodes: Dict[str, Any], topo: Topology,
                  end: Tuple[str, int]) -> str:
    name, port = end
    node = sbn_nodes.get(name)
    desc = node.desc if node is not None else topo.nodes.get(
        name, ("", name))[1]
    return f"\"{desc}\" ({name}) port {port}"


def check_topology(sbn: Any, expected: Topology) -> List[str]:
    """Failures: nodes and links of ``expected`` that are missing, and
    links that are there but not expected."""
    nodes = {node_name(n): n for n in sbn.iternodes() if n.ninf is not None}
    found = _links(sbn)
    out = []
    for name, (_, desc) in sorted(expected.nodes.items()):
        if name not in nodes:
            out.append(f"node \"{desc}\" ({name}) is missing")
    for (a, b) in sorted(set(expected.links) - set(found)):
        out.append(f"link {_describe_end(nodes, expected, a)} <-> "
                   f"{_describe_end(nodes, expected, b)} is missing")
    for (a, b) in sorted(set(found) - set(expected.links)):
        out.append(f"link {_describe_end(nodes, expected, a)} <-> "
                   f"{_describe_end(nodes, expected, b)} is not expected")
    return out


def check_link_rates(sbn: Any, expected: Optional[Topology] = None,
                     rate: Optional[str] = None) -> List[str]:
    """Failures: links whose active width and speed (``4xSDR``) differ
    from ``rate``, else from the rate ``expected`` gives the link."""
    if rate is None and expected is None:
        raise ValueError("give the expected rate or topology")
    nodes = {node_name(n): n for n in sbn.iternodes() if n.ninf is not None}
    out = []
    for key, port in sorted(_links(sbn).items()):
        want = rate if rate is not None else (
            expected.links.get(key) if expected is not None else None)
        if want is None or port.pinf is None:
            continue
        have = IBA.link_rate_str(port.pinf)
        if have.lower() != want.lower():
            a, b = key
            known = expected or Topology()
            out.append(f"link {_describe_end(nodes, known, a)} <-> "
                       f"{_describe_end(nodes, known, b)}"
                       f" runs at {have}, expected {want}")
    return out


def _pm_path(umad: Any, lid: int) -> Any:
    import rdma.path
    ep = umad.end_port
    return rdma.path.IBPath(ep, DLID=lid, SLID=ep.lid, dqpn=1, sqpn=1,
                            qkey=IBA.IB_DEFAULT_QP1_QKEY)


def check_error_counters(umad: Any, sbn: Any,
                         thresholds: Optional[Dict[str, int]] = None,
                         default: int = 0) -> List[str]:
    """Failures: every linked port's PortCounters error counter above its
    threshold (``thresholds`` by infiniband-diags' counter name, else
    ``default``), and ports whose counters cannot be read."""
    thresholds = dict(thresholds or {})
    known = {n for _, n in ERROR_COUNTERS}
    bad = set(thresholds) - known
    if bad:
        raise ValueError(f"unknown counters {sorted(bad)}; known: "
                         f"{sorted(known)}")
    out = []
    for port in sorted(sbn.topology, key=lambda p: (
            int(p.parent.ninf.nodeGUID) if p.parent.ninf else 0, p.port_id)):
        node = port.parent
        if node.ninf is None:
            continue
        ep = port.to_end_port()
        if not ep.LID:
            continue
        try:
            pc = umad.PerformanceGet(IBA.PMPortCounters(
                portSelect=port.port_id), _pm_path(umad, ep.LID))
        except IBA.MADError as e:
            out.append(f"{_who(node)} port {port.port_id}: PortCounters "
                       f"cannot be read: {e}")
            continue
        for field, name in ERROR_COUNTERS:
            value = getattr(pc, field)
            limit = thresholds.get(name, default)
            if value > limit:
                out.append(f"{_who(node)} port {port.port_id}: {name} == "
                           f"{value} (threshold {limit})")
    return out


def route(sbn: Any, src: Any, dlid: int) -> List[Tuple[Any, int]]:
    """The hops ``(node, out port)`` from end port ``src`` to ``dlid``
    through the forwarding tables.

    :raises LookupError: naming the switch or link where the route ends."""
    hops: List[Tuple[Any, int]] = []
    node, here = src.parent, src
    dst = sbn.lids[dlid] if 0 < dlid < len(sbn.lids) else None
    if dst is None:
        raise LookupError(f"LID {dlid} belongs to no port")
    while here.to_end_port() is not dst:
        if type(node).__name__ == "Switch":
            lfdb = node.lfdb or []
            out = lfdb[dlid] if dlid < len(lfdb) else 0xFF
            if out == 0xFF or out > node.ninf.numPorts:
                raise LookupError(f"switch {_who(node)} has no route to "
                                  f"LID {dlid} (forwarding entry {out})")
            port = node.ports[out] if out < len(node.ports) else None
        else:
            port = here
            out = here.port_id
        peer = sbn.topology.get(port) if port is not None else None
        if peer is None:
            raise LookupError(f"{_who(node)} port {out} towards LID {dlid} "
                              f"has no link")
        hops.append((node, out))
        if len(hops) > 64:
            raise LookupError(f"routing loop towards LID {dlid} at "
                              f"{_who(node)}")
        node, here = peer.parent, peer
        if type(node).__name__ != "Switch" and peer.to_end_port() is not dst:
            raise LookupError(f"the route to LID {dlid} ends at "
                              f"{_who(node)} port {peer.port_id}")
    return hops


def check_routes(sbn: Any) -> List[str]:
    """Failures: every (source end port, destination LID) pair that does
    not route."""
    ends = [p for p in sbn.iterend_ports() if p.LID]
    lids = sorted({p.LID for p in ends})
    out = []
    for src in ends:
        for dlid in lids:
            try:
                route(sbn, src, dlid)
            except LookupError as e:
                out.append(f"from {_who(src.parent)} port {src.port_id} "
                           f"(LID {src.LID}): {e}")
    return out


def check_sm(umad: Any, sbn: Any) -> List[str]:
    """Failures unless exactly one port's SMInfo says MASTER (asked of
    every end port whose CapabilityMask has IsSM)."""
    import rdma.path
    masters, out = [], []
    for p in sbn.iterend_ports():
        if not p.LID or p.pinf is None or not p.pinf.capabilityMask & _IS_SM:
            continue
        path = rdma.path.IBPath(umad.end_port, DLID=p.LID,
                                SLID=umad.end_port.lid, dqpn=0, sqpn=0,
                                qkey=IBA.IB_DEFAULT_QP0_QKEY)
        try:
            si = umad.SubnGet(IBA.SMPSMInfo, path)
        except IBA.MADError as e:
            out.append(f"SM port {_who(p.parent)} port {p.port_id}: SMInfo "
                       f"cannot be read: {e}")
            continue
        if si.SMState == _SM_MASTER:
            masters.append(f"{_who(p.parent)} port {p.port_id} "
                           f"(LID {p.LID})")
    if len(masters) != 1:
        out.append(f"{len(masters)} master SMs, expected 1"
                   + (": " + ", ".join(masters) if masters else ""))
    return out


def names_of(items: Iterable[str]) -> Set[str]:
    """The quoted descriptions in failure messages (for tests)."""
    return {m for s in items for m in re.findall(r'"([^"]+)"', s)}
