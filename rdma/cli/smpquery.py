"""``ibtool smpquery``: read SMP attributes of a node, printed as
infiniband-diags' ``smpquery`` prints them.

::

    ibtool smpquery nodeinfo 3          # by LID
    ibtool smpquery -D nodedesc 0,1     # by directed route
    ibtool smpquery nodeinfo            # the local port

Implemented operations: ``nodeinfo`` (``NI``), ``nodedesc`` (``ND``),
``portinfo`` (``PI``, optional port number after the target) and
``switchinfo`` (``SI``).  The capability bit names under ``CapMask`` are
the IBA specification's.
The SMPs go through the MAD transactor (:meth:`rdma.umad.UMAD.SubnGet`).
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, Tuple

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, smp_get,
                              smp_path)

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
_OPS: Dict[str, Tuple[str, str, Callable[[Any], List[str]], bool]] = {
    "nodeinfo": ("SMPNodeInfo", "Node info", _nodeinfo, False),
    "nodedesc": ("SMPNodeDescription", "Node Description", _nodedesc,
                 False),
    "portinfo": ("SMPPortInfo", "Port info", _ibfmt.portinfo_lines, True),
    "switchinfo": ("SMPSwitchInfo", "Switch info", _ibfmt.switchinfo_lines,
                   False),
}
_ALIASES = {"NI": "nodeinfo", "ND": "nodedesc", "PI": "portinfo",
            "SI": "switchinfo"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``smpquery`` to ``ibtool``'s subparsers."""
    p = subparsers.add_parser(
        "smpquery", help="read a node's SMP attributes (like smpquery)",
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
    p.set_defaults(func=smpquery)
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
    if op not in _OPS:
        raise CmdError(f"unknown operation {args.op!r} (implemented: "
                       f"{', '.join(_OPS)})")
    if len(args.rest) > 2:
        raise CmdError(f"too many arguments: {' '.join(args.rest)}")
    args.target = args.rest[0] if args.rest else None
    try:
        args.portnum = int(args.rest[1], 0) if len(args.rest) > 1 else None
    except ValueError:
        raise CmdError(f"bad port number {args.rest[1]!r}") from None
    attr, title, fmt, by_port = _OPS[op]
    if args.portnum is not None and not by_port:
        raise CmdError(f"{op} takes no port number")
    amod = args.portnum or 0
    if not 0 <= amod <= 255:
        raise CmdError(f"port {amod} is out of range 0-255")
    end_port = get_end_port(args)
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    with rdma.umad.UMAD(end_port, **kw) as umad:
        path = smp_path(args.target, args, end_port, umad)
        value = smp_get(umad, getattr(IBA, attr), path, amod)
        lines = fmt(value)
        if op == "portinfo" and value.capabilityMask == 0 and amod:
            # a switch's external port: its capabilities are port 0's
            port0 = smp_get(umad, IBA.SMPPortInfo, path, 0)
            lines = fmt(value, port0.capabilityMask)
    if op != "nodedesc":
        head = _header(title, path)
        print(f"{head} port {amod}" if by_port else head)
    print("\n".join(lines))
    return 0
