"""``ibtool ibroute`` and ``ibtool ibtracert``: unicast forwarding, printed
as infiniband-diags prints it.

::

    ibtool ibroute [-a] [-n] SWITCH [STARTLID [ENDLID]]  # a switch's LFT
    ibtool ibtracert SLID DLID                          # the route between
                                                        # two LIDs

``ibroute`` reads SwitchInfo and the LinearForwardingTable blocks of the
switch and, for each LID in use, the NodeInfo and NodeDescription of its
destination (LID-routed SMPs).  ``ibtracert`` discovers the subnet with
the forwarding tables (:mod:`rdma.discovery`) and follows the links and
the tables from the source port to the destination LID.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Tuple

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, smp_get,
                              smp_path)

__all__ = ["add_parsers", "ibroute", "ibtracert"]


def add_parsers(subparsers: Any) -> None:
    """Add ``ibroute`` and ``ibtracert`` to ``ibtool``."""
    p = subparsers.add_parser(
        "ibroute", help="a switch's unicast forwarding table (like ibroute)")
    p.add_argument("rest", nargs="*", metavar="SWITCH",
                   help="the switch (LID, -G GUID or -D route), then the "
                        "first and last LID to show")
    p.add_argument("-a", "--all", action="store_true",
                   help="show invalid entries (port 255) too")
    p.add_argument("-n", "--no_dests", action="store_true",
                   help="do not query the destinations")
    add_device_options(p)
    add_target_options(p)
    p.set_defaults(func=ibroute)

    p = subparsers.add_parser(
        "ibtracert", help="the route between two LIDs (like ibtracert)")
    p.add_argument("rest", nargs="*", metavar="LID",
                   help="the source and the destination LID")
    add_device_options(p)
    p.set_defaults(func=ibtracert)


def _header(path: Any) -> str:
    import rdma.path
    if isinstance(path, rdma.path.IBDRPath):
        route = ",".join(str(b) for b in bytes(path.drPath))
        return f"DR path slid {path.drSLID}; dlid {path.drDLID}; {route}"
    return f"Lid {path.DLID}"


def _int(text: str, what: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise CmdError(f"bad {what} {text!r}") from None
    if not 0 <= v <= 0xBFFF:
        raise CmdError(f"{what} {v} is out of the unicast range")
    return v


def _dest(umad: Any, end_port: Any, lid: int,
          cache: Dict[int, str]) -> str:
    """``(Channel Adapter portguid 0x...: 'Hca1')`` for a LID."""
    import rdma.IBA as IBA
    import rdma.path
    if lid in cache:
        return cache[lid]
    path = rdma.path.IBPath(end_port, DLID=lid, SLID=end_port.lid, dqpn=0,
                            sqpn=0, qkey=IBA.IB_DEFAULT_QP0_QKEY)
    try:
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        nd = smp_get(umad, IBA.SMPNodeDescription, path)
    except IBA.MADError:
        text = "(unknown)"
    else:
        desc = nd.nodeString
        desc = desc if isinstance(desc, str) else bytes(desc).decode(
            "utf-8", "replace")
        text = (f"({_ibfmt.NODE_TYPES.get(ni.nodeType, '???')} portguid "
                f"0x{int(ni.portGUID):016x}: '{desc.split(chr(0))[0]}')")
    cache[lid] = text
    return text


def ibroute(args: argparse.Namespace) -> int:
    """Run ``ibtool ibroute``; return the exit status."""
    import rdma.IBA as IBA
    import rdma.umad
    if not args.rest:
        raise CmdError("give the switch (LID, -G GUID or -D route)")
    if len(args.rest) > 3:
        raise CmdError(f"too many arguments: {' '.join(args.rest)}")
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        path = smp_path(args.rest[0], args, end_port, umad)
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        if ni.nodeType != 2:
            raise CmdError(f"{args.rest[0]} is not a switch")
        nd = smp_get(umad, IBA.SMPNodeDescription, path)
        si = smp_get(umad, IBA.SMPSwitchInfo, path)
        top = si.linearFDBTop
        first = _int(args.rest[1], "start LID") if len(args.rest) > 1 else 0
        last = _int(args.rest[2], "end LID") if len(args.rest) > 2 else top
        last = min(last, top)
        desc = nd.nodeString
        desc = desc if isinstance(desc, str) else bytes(desc).decode(
            "utf-8", "replace")
        print(f"Unicast lids [0x{first:x}-0x{last:x}] of switch "
              f"{_header(path)} guid 0x{int(ni.nodeGUID):016x} "
              f"({desc.split(chr(0))[0]}):")
        print("  Lid  Out   Destination")
        print("       Port     Info ")
        blocks: Dict[int, List[int]] = {}
        cache: Dict[int, str] = {}
        shown = 0
        for lid in range(first, last + 1):
            blk = lid // 64
            if blk not in blocks:
                blocks[blk] = list(smp_get(
                    umad, IBA.SMPLinearForwardingTable, path, blk).portBlock)
            port = blocks[blk][lid % 64]
            if port == 0xFF and not args.all:
                continue
            shown += 1
            if args.no_dests:
                print(f"0x{lid:04x} {port:03d} ")
            elif port == 0xFF:
                print(f"0x{lid:04x} {port:03d} : (path #0 - illegal port)")
            else:
                print(f"0x{lid:04x} {port:03d} : "
                      f"{_dest(umad, end_port, lid, cache)}")
    print(f"{shown} {'lids' if args.all else 'valid lids'} dumped ")
    return 0


def _lids(port: Any) -> Tuple[int, int]:
    lmc = port.pinf.LMC if port.pinf is not None else 0
    return port.LID, port.LID + (1 << lmc) - 1


def _kind(node: Any) -> str:
    return {"Switch": "switch", "CA": "ca", "Router": "router"}[
        type(node).__name__]


def trace(sbn: Any, slid: int, dlid: int) -> List[str]:
    """The lines ``ibtracert SLID DLID`` prints, from a subnet database
    with the forwarding tables (``all_LFDB``)."""
    def end_of(lid: int, what: str) -> Any:
        port = sbn.lids[lid] if 0 < lid < len(sbn.lids) else None
        if port is None:
            raise CmdError(f"{what} LID {lid} is not in the subnet")
        return port

    src, dst = end_of(slid, "source"), end_of(dlid, "destination")
    node = src.parent
    a, b = _lids(src)
    out = [f"From {_kind(node)} {{0x{int(node.ninf.nodeGUID):016x}}} "
           f"portnum {src.port_id} lid {a}-{b} \"{node.desc}\""]
    hops = 0
    here = src
    while here.to_end_port() is not dst:
        if type(node).__name__ == "Switch":
            lfdb = node.lfdb or []
            out_port = lfdb[dlid] if dlid < len(lfdb) else 0xFF
            if out_port == 0xFF:
                raise CmdError(f"no route to LID {dlid} at switch "
                               f"\"{node.desc}\"")
            port = node.ports[out_port]
        else:
            port = here
        peer = sbn.topology.get(port)
        if peer is None:
            raise CmdError(f"\"{node.desc}\" port {port.port_id} has no "
                           f"link")
        hops += 1
        if hops > 64:
            raise CmdError(f"routing loop towards LID {dlid}")
        node, here = peer.parent, peer
        ep = peer.to_end_port()
        a, b = _lids(ep)
        out.append(f"[{port.port_id}] -> {_kind(node)} port "
                   f"{{0x{int(ep.portGUID):016x}}}[{peer.port_id}] lid "
                   f"{a}-{b} \"{node.desc}\"")
        if type(node).__name__ != "Switch" and ep is not dst:
            raise CmdError(f"the route to LID {dlid} ends at "
                           f"\"{node.desc}\"")
    a, b = _lids(dst)
    out.append(f"To {_kind(node)} {{0x{int(node.ninf.nodeGUID):016x}}} "
               f"portnum {dst.port_id} lid {a}-{b} \"{node.desc}\"")
    return out


def ibtracert(args: argparse.Namespace) -> int:
    """Run ``ibtool ibtracert``; return the exit status."""
    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    if len(args.rest) != 2:
        raise CmdError("give the source and the destination LID")
    slid = _int(args.rest[0], "source LID")
    dlid = _int(args.rest[1], "destination LID")
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        rdma.discovery.load(sched, sbn, ["all_NodeInfo",
                                         "all_NodeDescription",
                                         "all_topology", "all_LFDB"])
    print("\n".join(trace(sbn, slid, dlid)))
    return 0
