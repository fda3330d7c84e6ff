"""``ibtool iblinkinfo``: every port of the subnet with its link and what
is at the other end, printed as infiniband-diags' ``iblinkinfo`` prints
it (python-rdma's ``ibtool`` has the command too).

::

    ibtool iblinkinfo [-l] [-d] [-p] [--switches-only | --cas-only]
                      [-G GUID | -D ROUTE] [--node-name-map FILE] [--sa]

The subnet is discovered by directed routes (:mod:`rdma.discovery`, with
every PortInfo); a node is a header line then one line per port that
discovery read: the port's LID and number, its active width, speed,
state and physical state, then the peer's LID, port and name, and what
the link could be if both ends support more ("Could be 12X Could be
10.0 Gbps").  With ``--sa`` all of it comes from the SA's NodeRecords,
PortInfoRecords and LinkRecords instead.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_node_name_map, add_sa_option,
                              get_end_port, load_node_name_map, node_name,
                              parse_target)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "iblinkinfo", "port_line", "link_text"]

#: PortInfo.capabilityMask bit: extended link speeds are supported.
_CAP_EXT_SPEEDS = 1 << 14


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``iblinkinfo`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("-l", "--line", action="store_true",
                   help="one line per port with the node's GUID and name")
    p.add_argument("-d", "--down", action="store_true",
                   help="only ports whose link is down")
    p.add_argument("-p", "--additional", action="store_true",
                   help="also HOQ life and VL stall count of active ports")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--switches-only", action="store_true",
                   help="only switches")
    g.add_argument("--cas-only", action="store_true", help="only CAs")
    g2 = p.add_mutually_exclusive_group()
    g2.add_argument("-S", "-G", "--switch", "--port-guid", dest="guid",
                    metavar="GUID", default=None,
                    help="only the node with this port GUID (hex)")
    g2.add_argument("-D", "--Direct", dest="route", metavar="ROUTE",
                    default=None,
                    help="only the node at this directed route")
    add_device_options(p)
    add_node_name_map(p)
    add_sa_option(p)
    return p


def _pick(table: Any, v: int) -> str:
    text: str = dict(table).get(v, f"undefined ({v})")
    return text


def _width(v: int) -> str:
    return _pick(_ibfmt.WIDTHS, v)


def _speed(v: int) -> str:
    return _pick(_ibfmt.SPEEDS, v)


def _capmask(port: Any) -> int:
    """The capability mask that speaks for *port* (a switch's is port
    0's)."""
    node = port.parent
    if type(node).__name__ == "Switch":
        p0 = node.ports[0] if node.ports else None
        return p0.pinf.capabilityMask if p0 is not None and \
            p0.pinf is not None else 0
    return port.pinf.capabilityMask if port.pinf is not None else 0


def _widest(mask: int) -> int:
    """The widest width of a LinkWidthSupported set (12X, 8X, 4X, 2X,
    else 1X)."""
    for bit in (8, 4, 2, 16):
        if mask & bit:
            return bit
    return 1


def _top_bit(mask: int) -> int:
    return 1 << (mask.bit_length() - 1) if mask else 1


def could_be(port: Any, peer: Any) -> str:
    """``(Could be 12X Could be 10.0 Gbps)``: what the link of *port* to
    *peer* could run at when both support more than it does (each part
    empty when it already does)."""
    a, b = port.pinf, peer.pinf
    wide = _widest(a.linkWidthSupported & b.linkWidthSupported)
    wmsg = "" if wide & a.linkWidthActive else f"Could be {_width(wide)}"
    smsg = ""
    ext_a = getattr(a, "linkSpeedExtSupported", 0)
    ext_b = getattr(b, "linkSpeedExtSupported", 0)
    if _capmask(port) & _CAP_EXT_SPEEDS and \
            _capmask(peer) & _CAP_EXT_SPEEDS and ext_a and ext_b:
        top = _top_bit(ext_a & ext_b)
        if not top & getattr(a, "linkSpeedExtActive", 0):
            smsg = f"Could be {_pick(_ibfmt.EXT_SPEEDS, top)}"
    else:
        top = _top_bit(a.linkSpeedSupported & b.linkSpeedSupported)
        if not top & a.linkSpeedActive:
            smsg = f"Could be {_speed(top)}"
    return f"({wmsg} {smsg})"


def link_text(port: Any, additional: bool = False) -> str:
    """The ``( 4X  2.5 Gbps Active/  LinkUp)`` part of a port's line."""
    pi = port.pinf
    state = _ibfmt.LINK_STATES.get(pi.portState, "?")
    phys = _ibfmt.PHYS_STATES.get(pi.portPhysicalState, "?")
    if pi.portState == 1:
        # A down port's other PortInfo fields may be anything (C14-24.2.1).
        return f"(              {state:>6}/{phys:>8})"
    ext = getattr(pi, "linkSpeedExtActive", 0) \
        if _capmask(port) & _CAP_EXT_SPEEDS else 0
    speed = _pick(_ibfmt.EXT_SPEEDS, ext) if ext else \
        _speed(pi.linkSpeedActive)
    text = (f"({_width(pi.linkWidthActive):>3} {speed:>18} "
            f"{state:>6}/{phys:>8})")
    if additional:
        text += f" (HOQ:{pi.HOQLife} VL_Stall:{pi.VLStallCount})"
    return text


def _guid_of(port: Any) -> int:
    ep = port.to_end_port()
    return int(ep.portGUID) if ep.portGUID is not None else 0


def _lid_of(port: Any) -> int:
    return port.to_end_port().LID or 0


def port_line(sbn: Any, port: Any, args: argparse.Namespace,
              names: Dict[int, str]) -> str:
    """The line ``iblinkinfo`` prints for *port* (``-l``: line mode)."""
    node = port.parent
    is_switch = type(node).__name__ == "Switch"
    peer = sbn.topology.get(port)
    down = port.pinf.portState == 1
    if peer is not None and peer.pinf is not None:
        pn = peer.parent
        rguid = f"0x{_guid_of(peer):016x} " if args.line else ""
        remote = (f"{rguid}{_lid_of(peer):6d} {peer.port_id:4d}[  ] "
                  f"\"{node_name(names, pn.ninf.nodeGUID, pn.desc)}\" "
                  f"{could_be(port, peer)}")
    elif down:
        remote = "           [  ] \"\" ( )"
    else:
        remote = "    \"Port not available\""
    if args.line:
        name = node_name(names, node.ninf.nodeGUID, node.desc)
        head = f"0x{_guid_of(port):016x} \"{name:>30}\" "
    else:
        head = "      "
        if not is_switch:
            head += f"0x{_guid_of(port):016x} "
    return (f"{head}{_lid_of(port):6d} {port.port_id:4d}[  ] =="
            f"{link_text(port, args.additional)}==>  {remote}")


def node_lines(sbn: Any, node: Any, args: argparse.Namespace,
               names: Dict[int, str]) -> List[str]:
    """A node's header and port lines (none if no port is shown)."""
    kind = type(node).__name__
    ports = [p for p, i in node.iterports()
             if i != 0 and p.pinf is not None and
             (not args.down or p.pinf.portState == 1)]
    if not ports:
        return []
    out = []
    if not args.line:
        name = node_name(names, node.ninf.nodeGUID, node.desc)
        if kind == "Switch":
            out.append(f"Switch: 0x{_guid_of(node.ports[0]):016x} {name}:")
        else:
            out.append(f"{'CA' if kind == 'CA' else 'Router'}: {name}:")
    out += [port_line(sbn, p, args, names) for p in ports]
    return out


def _only(sbn: Any, args: argparse.Namespace, end_port: Any,
          umad: Any) -> Optional[Any]:
    """The node ``-G``/``-D`` names, or None for every node."""
    import rdma.path
    if args.guid is not None:
        try:
            guid = int(args.guid, 16)
        except ValueError:
            raise CmdError(f"{args.guid!r} is not a port GUID (hex)") \
                from None
        port = sbn.ports.get(guid)
        if port is None:
            raise CmdError(f"port GUID 0x{guid:016x} is not in the subnet")
        return port.parent
    if args.route is not None:
        path = parse_target(args.route, argparse.Namespace(
            addr_direct=True), end_port)
        if not isinstance(path, rdma.path.IBDRPath):
            raise CmdError(f"{args.route!r} is not a directed route")
        import rdma.IBA as IBA
        ninf = umad.SubnGet(IBA.SMPNodeInfo, path)
        port = sbn.ports.get(int(ninf.portGUID))
        if port is None:
            raise CmdError(f"the node at {args.route} is not in the "
                           f"subnet")
        return port.parent
    return None


def iblinkinfo(args: argparse.Namespace) -> int:
    """Run ``ibtool iblinkinfo``; return the exit status."""
    import sys

    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    names = load_node_name_map(args.node_name_map)
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        rdma.discovery.load(sched, sbn, ["all_NodeInfo",
                                         "all_NodeDescription",
                                         "all_PortInfo", "all_topology"],
                            sa=args.use_sa)
        only = _only(sbn, args, end_port, umad)
    for path, err in getattr(sbn, "errors", []):
        print(f"ibtool iblinkinfo: warning: {path}: {err}", file=sys.stderr)
    for node in sbn.iternodes():
        if node.ninf is None or (only is not None and node is not only):
            continue
        kind = type(node).__name__
        if (args.switches_only and kind != "Switch") or \
                (args.cas_only and kind != "CA"):
            continue
        for line in node_lines(sbn, node, args, names):
            print(line)
    return 0
