"""``ibtool smpquery``: read SMP attributes of a node, printed as
infiniband-diags' ``smpquery`` prints them.

::

    ibtool smpquery nodeinfo 3          # by LID
    ibtool smpquery -D nodedesc 0,1     # by directed route
    ibtool smpquery nodeinfo            # the local port

Implemented operations: ``nodeinfo`` (``NI``), ``nodedesc`` (``ND``),
``portinfo`` (``PI``, optional port number after the target),
``switchinfo`` (``SI``), ``pkeys``, ``sl2vl``, ``vlarb`` and ``guids``
(a port's GUIDInfo; the installed ``smpquery`` lacks it).  The capability
bit names under ``CapMask`` are the IBA specification's.
The SMPs go through the MAD transactor (:meth:`rdma.umad.UMAD.SubnGet`).
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, Tuple

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_node_name_map, add_sa_option,
                              add_target_options, get_end_port,
                              load_node_name_map, smp_get, smp_path,
                              transactor)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "smpquery", "format_fields"]

_NODE_TYPES = {1: "Channel Adapter", 2: "Switch", 3: "Router"}


def format_fields(rows: List[Tuple[str, str]], width: int = 33) -> List[str]:
    """``Key:.....value`` lines, the key and its dots ``width`` wide."""
    return [f"{k}:".ljust(width, ".") + v for k, v in rows]


def _nodeinfo(ni: Any) -> List[str]:
    return format_fields([
        ("BaseVers", str(ni.baseVersion)),
        ("ClassVers", str(ni.classVersion)),
        ("NodeType", _NODE_TYPES.get(ni.nodeType, "???")),
        ("NumPorts", str(ni.numPorts)),
        ("SystemGuid", f"0x{int(ni.systemImageGUID):016x}"),
        ("Guid", f"0x{int(ni.nodeGUID):016x}"),
        ("PortGuid", f"0x{int(ni.portGUID):016x}"),
        ("PartCap", str(ni.partitionCap)),
        ("DevId", f"0x{ni.deviceID:04x}"),
        ("Revision", f"0x{ni.revision:08x}"),
        ("LocalPort", str(ni.localPortNum)),
        ("VendorId", f"0x{ni.vendorID:06x}"),
    ])


def _nodedesc(nd: Any) -> List[str]:
    raw = nd.nodeString
    text = raw if isinstance(raw, str) else bytes(raw).decode(
        "utf-8", "replace")
    # smpquery right-aligns the description in 32 columns of dots
    return ["Node Description:" + text.split("\0", 1)[0].rjust(32, ".")]


#: operation -> (attribute name in rdma.IBA, header title, formatter,
#: whether the attribute modifier is a port number)
_OPS: Dict[str, Tuple[str, str, Callable[..., List[str]], bool]] = {
    "nodeinfo": ("SMPNodeInfo", "Node info", _nodeinfo, False),
    "nodedesc": ("SMPNodeDescription", "Node Description", _nodedesc,
                 False),
    "portinfo": ("SMPPortInfo", "Port info", _ibfmt.portinfo_lines, True),
    "switchinfo": ("SMPSwitchInfo", "Switch info", _ibfmt.switchinfo_lines,
                   False),
}
_ALIASES = {"NI": "nodeinfo", "ND": "nodedesc", "PI": "portinfo",
            "SI": "switchinfo", "PKeyTable": "pkeys", "PKEY": "pkeys",
            "SL2VL": "sl2vl", "VLArb": "vlarb", "GI": "guids"}
#: Operations that read several attributes (see _TABLES).
_TABLE_OPS = ("pkeys", "sl2vl", "vlarb", "guids")


def _text(nd: Any) -> str:
    raw = nd.nodeString
    text = raw if isinstance(raw, str) else bytes(raw).decode(
        "utf-8", "replace")
    return text.split("\0", 1)[0]


def _pkeys(umad: Any, path: Any, port: int, where: str) -> List[str]:
    """``smpquery pkeys``: the P_Key table, 8 per line, and its size
    (a CA's or switch port 0's PartitionCap, a switch external port's
    PartitionEnforcementCap)."""
    import rdma.IBA as IBA
    ni = smp_get(umad, IBA.SMPNodeInfo, path)
    switch = ni.nodeType == 2
    cap = ni.partitionCap
    if switch and port:
        cap = smp_get(umad, IBA.SMPSwitchInfo, path).partitionEnforcementCap
    keys: List[int] = []
    for block in range((cap + 31) // 32):
        amod = (port << 16 | block) if switch else block
        keys += list(smp_get(umad, IBA.SMPPKeyTable, path, amod).PKeyBlock)
    keys = keys[:cap]
    out = [f"{i:4d}: " + " ".join(f"0x{k:04x}" for k in keys[i:i + 8])
           for i in range(0, len(keys), 8)]
    return out + [f"{cap} pkeys capacity for this port"]


def _sl2vl(umad: Any, path: Any, port: int, where: str) -> List[str]:
    """``smpquery sl2vl``: a CA port's SL to VL table, or a switch's for
    every input port towards output port ``port``."""
    import rdma.IBA as IBA
    ni = smp_get(umad, IBA.SMPNodeInfo, path)
    out = [f"# SL2VL table: {where}",
           "#                 SL: |" + "".join(f"{i:2d}|"
                                                for i in range(16))]
    pairs = [(i, port) for i in range(ni.numPorts + 1)] \
        if ni.nodeType == 2 else [(0, 0)]
    for inp, outp in pairs:
        t = smp_get(umad, IBA.SMPSLToVLMappingTable, path, inp << 8 | outp)
        out.append(f"ports: in {inp:2d}, out {outp:2d}: |" +
                   "".join(f"{v:2d}|" for v in t.SLtoVL))
    return out


def _vlarb(umad: Any, path: Any, port: int, where: str) -> List[str]:
    """``smpquery vlarb``: the low and high priority VL arbitration
    tables of a port (as many entries as its caps say)."""
    import rdma.IBA as IBA
    ni = smp_get(umad, IBA.SMPNodeInfo, path)
    if ni.nodeType == 2 and port == 0:
        si = smp_get(umad, IBA.SMPSwitchInfo, path)
        if not si.enhancedPort0:
            return [f"# No VLArbitration tables (BSP0): {where} port 0"]
    pi = smp_get(umad, IBA.SMPPortInfo, path, port)
    low, high = pi.VLArbitrationLowCap, pi.VLArbitrationHighCap
    out = [f"# VLArbitration tables: {where} port {port} LowCap {low} "
           f"HighCap {high}"]
    for name, first, cap in (("Low", 1, low), ("High", 3, high)):
        entries: List[int] = []
        for b in range((cap + 31) // 32):
            t = smp_get(umad, IBA.SMPVLArbitrationTable, path,
                        (first + b) << 16 | port)
            entries += list(t.VLWeightBlock)
        entries = entries[:cap]
        out.append(f"# {name} priority VL Arbitration Table:")
        out.append("VL    : |" + "".join(f"0x{e >> 8 & 0xF:<2x}|"
                                         for e in entries))
        out.append("WEIGHT: |" + "".join(f"0x{e & 0xFF:<2x}|"
                                         for e in entries))
    return out


def _guids(umad: Any, path: Any, port: int, where: str) -> List[str]:
    """The GUIDInfo table of a port (``GUIDCap`` entries, 8 per block)."""
    import rdma.IBA as IBA
    pi = smp_get(umad, IBA.SMPPortInfo, path, port)
    guids: List[int] = []
    for block in range((pi.GUIDCap + 7) // 8):
        guids += [int(g) for g in smp_get(umad, IBA.SMPGUIDInfo, path,
                                          block).GUIDBlock]
    guids = guids[:pi.GUIDCap]
    out = [f"# GUIDInfo: {where}"]
    out += [f"{i:4d}: " + " ".join(f"0x{g:016x}" for g in guids[i:i + 4])
            for i in range(0, len(guids), 4)]
    return out + [f"{pi.GUIDCap} guids capacity for this port"]


_TABLES = {"pkeys": _pkeys, "sl2vl": _sl2vl, "vlarb": _vlarb,
           "guids": _guids}


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``smpquery`` to ``ibtool``'s subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Query SMP attributes: " + ", ".join(
            f"{op} ({a})" for a, op in _ALIASES.items()))
    p.add_argument("op", metavar="OP",
                   help="nodeinfo (NI), nodedesc (ND), portinfo (PI) or "
                        "switchinfo (SI)")
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="LID (default), -G port GUID or -D route "
                        "(default: the local port); portinfo: the port "
                        "(default 0: the port the SMP arrives on)")
    add_device_options(p)
    add_target_options(p)
    p.add_argument("-t", "--timeout", type=int, default=None, metavar="MS",
                   help="timeout of each SMP in ms")
    add_node_name_map(p)
    add_sa_option(p)
    return p


def _header(title: str, path: Any) -> str:
    import rdma.path
    if isinstance(path, rdma.path.IBDRPath):
        route = ",".join(str(b) for b in bytes(path.drPath))
        return (f"# {title}: DR path slid {path.drSLID}; "
                f"dlid {path.drDLID}; {route}")
    return f"# {title}: Lid {path.DLID}"


def smpquery(args: argparse.Namespace) -> int:
    """Run ``ibtool smpquery``; return the exit status."""
    import rdma.IBA as IBA
    import rdma.umad
    op = _ALIASES.get(args.op, args.op)
    if op not in _OPS and op not in _TABLES:
        raise CmdError(f"unknown operation {args.op!r} (implemented: "
                       f"{', '.join(list(_OPS) + list(_TABLES))})")
    if len(args.rest) > 2:
        raise CmdError(f"too many arguments: {' '.join(args.rest)}")
    args.target = args.rest[0] if args.rest else None
    try:
        args.portnum = int(args.rest[1], 0) if len(args.rest) > 1 else None
    except ValueError:
        raise CmdError(f"bad port number {args.rest[1]!r}") from None
    if op in _TABLES:
        return _table(args, op)
    attr, title, fmt, by_port = _OPS[op]
    if args.portnum is not None and not by_port:
        raise CmdError(f"{op} takes no port number")
    amod = args.portnum or 0
    if not 0 <= amod <= 255:
        raise CmdError(f"port {amod} is out of range 0-255")
    names = load_node_name_map(args.node_name_map)
    end_port = get_end_port(args)
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    with rdma.umad.UMAD(end_port, **kw) as raw:
        umad = transactor(raw, args)
        path = smp_path(args.target, args, end_port, raw)
        value = smp_get(umad, getattr(IBA, attr), path, amod)
        lines = fmt(value)
        if op == "nodedesc" and names:
            # --node-name-map: the node's name, if the map has its GUID
            ni = smp_get(umad, IBA.SMPNodeInfo, path)
            name = names.get(int(ni.nodeGUID))
            if name is not None:
                lines = ["Node Description:" + name.rjust(32, ".")]
        if op == "portinfo" and value.capabilityMask == 0 and amod:
            # a switch's external port: its capabilities are port 0's
            port0 = smp_get(umad, IBA.SMPPortInfo, path, 0)
            lines = fmt(value, port0.capabilityMask)
    if op != "nodedesc":
        head = _header(title, path)
        print(f"{head} port {amod}" if by_port else head)
    print("\n".join(lines))
    return 0


def _table(args: argparse.Namespace, op: str) -> int:
    import rdma.umad
    port = args.portnum or 0
    if not 0 <= port <= 254:
        raise CmdError(f"port {port} is out of range 0-254")
    end_port = get_end_port(args)
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    with rdma.umad.UMAD(end_port, **kw) as raw:
        umad = transactor(raw, args)
        path = smp_path(args.target, args, end_port, raw)
        lines = _TABLES[op](umad, path, port, _where(path))
    print("\n".join(lines))
    return 0


def _where(path: Any) -> str:
    return _header("", path)[len("# : "):]
