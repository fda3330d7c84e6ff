"""``ibtool ibtracert``: the route between two ports, printed as
infiniband-diags prints it.

::

    ibtool ibtracert [-n] [-r] SLID DLID   # the route between two LIDs
    ibtool ibtracert -G SGUID DGUID        # ... two port GUIDs
    ibtool ibtracert [-n] -m MLID SLID DLID  # through a multicast tree

``ibtracert`` discovers the subnet with the forwarding tables
(:mod:`rdma.discovery`) and follows the links and the tables from the
source port to the destination LID; with ``-m`` it walks the multicast
tree breadth first down the switches' MFT entries for the MLID, as
infiniband-diags does.
"""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any, Generator, List, Tuple

from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_node_name_map, add_sa_option, any_lid,
                              get_end_port, load_node_name_map, node_name,
                              unicast_lid)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibtracert", "trace", "mcast_trace", "TraceError"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibtracert`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="END",
                   help="the source and the destination (LIDs, or port "
                        "GUIDs with -G)")
    p.add_argument("-n", "--no_info", action="store_true",
                   help="simple format: GUIDs and port numbers only")
    p.add_argument("-m", "--mlid", metavar="MLID", default=None,
                   help="trace the multicast tree of MLID (0xc000 and "
                        "up) from the source to the destination")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-G", "--Guid", dest="addr_guid", action="store_true",
                   help="the source and destination are port GUIDs (hex)")
    g.add_argument("-L", "--Lid", dest="addr_lid", action="store_true",
                   help="the source and destination are LIDs (default)")
    p.add_argument("-r", "--reverse", action="store_true",
                   help="swap the source and the destination "
                        "(python-rdma's option)")
    p.add_argument("--ports-file", metavar="FILE", default=None,
                   help="trace each 'SOURCE DESTINATION' line of FILE "
                        "instead of the arguments")
    p.add_argument("-f", "--force", action="store_true",
                   help="trace towards a destination LID that is not in "
                        "the subnet, as far as the forwarding tables lead")
    add_device_options(p)
    add_node_name_map(p)
    add_sa_option(p)
    return p


def _lids(port: Any) -> Tuple[int, int]:
    lmc = port.pinf.LMC if port.pinf is not None else 0
    return port.LID, port.LID + (1 << lmc) - 1


def _kind(node: Any) -> str:
    return {"Switch": "switch", "CA": "ca", "Router": "router"}[
        type(node).__name__]


class TraceError(CmdError):
    """A route that cannot be followed to its end; :attr:`lines` are the
    lines of the route printed up to there."""

    def __init__(self, msg: str, lines: List[str]):
        super().__init__(msg)
        #: The lines ``ibtracert`` prints before the failure.
        self.lines = list(lines)


def trace(sbn: Any, slid: int, dlid: int, brief: bool = False,
          names: Any = None, force: bool = False) -> List[str]:
    """The lines ``ibtracert SLID DLID`` prints (``ibtracert -n`` with
    *brief*), from a subnet database with the forwarding tables
    (``all_LFDB``).  *names* maps node GUIDs to the names to print
    (``--node-name-map``).  With *force* (``-f``) a destination LID that
    is not in the subnet is still traced, as far as the forwarding tables
    lead, and the trace ends at a port with that LID.

    :raises TraceError: where the route cannot be followed (with the
        lines up to there)."""
    def end_of(lid: int, what: str) -> Any:
        port = sbn.lids[lid] if 0 < lid < len(sbn.lids) else None
        if port is None:
            raise CmdError(f"{what} LID {lid} is not in the subnet")
        return port

    def name(n: Any) -> str:
        return node_name(names, n.ninf.nodeGUID, n.desc)

    def arrived(ep: Any) -> bool:
        if dst is not None:
            return ep is dst
        lo, hi = _lids(ep) if ep.LID else (0, -1)
        return lo <= dlid <= hi

    def out_of(sw: Any) -> int:
        lfdb = sw.lfdb or []
        return lfdb[dlid] if dlid < len(lfdb) else 0xFF

    src = end_of(slid, "source")
    try:
        dst = end_of(dlid, "destination")
    except CmdError:
        if not force:
            raise
        dst = None
    node = src.parent
    a, b = _lids(src)
    if brief:
        out = [f"From {{0x{int(node.ninf.nodeGUID):016x}}}"
               f"[{src.port_id}]"]
    else:
        out = [f"From {_kind(node)} {{0x{int(node.ninf.nodeGUID):016x}}} "
               f"portnum {src.port_id} lid {a}-{b} \"{name(node)}\""]
    hops = 0
    here = src
    while not arrived(here.to_end_port()):
        if type(node).__name__ == "Switch":
            out_port = out_of(node)
            if out_port == 0xFF:
                raise TraceError(f"no route to LID {dlid} at switch "
                                 f"\"{name(node)}\"", out)
            port = node.ports[out_port]
        else:
            port = here
        peer = sbn.topology.get(port)
        if peer is None:
            raise TraceError(f"\"{name(node)}\" port {port.port_id} has "
                             f"no link", out)
        hops += 1
        if hops > 64:
            raise TraceError(f"routing loop towards LID {dlid}", out)
        node, here = peer.parent, peer
        ep = peer.to_end_port()
        if type(node).__name__ == "Switch" and not arrived(ep) and \
                out_of(node) == 0xFF:
            # As infiniband-diags: the next switch's table is read before
            # the hop to it is shown.
            raise TraceError(f"no route to LID {dlid} at switch "
                             f"\"{name(node)}\"", out)
        a, b = _lids(ep)
        if brief:
            out.append(f"[{port.port_id}] -> {{0x{int(ep.portGUID):016x}}}"
                       f"[{peer.port_id}]")
        else:
            out.append(f"[{port.port_id}] -> {_kind(node)} port "
                       f"{{0x{int(ep.portGUID):016x}}}[{peer.port_id}] lid "
                       f"{a}-{b} \"{name(node)}\"")
        if type(node).__name__ != "Switch" and not arrived(ep):
            raise TraceError(f"the route to LID {dlid} ends at "
                             f"\"{name(node)}\"", out)
    dst = here.to_end_port()
    a, b = _lids(dst)
    if brief:
        out.append(f"To {{0x{int(node.ninf.nodeGUID):016x}}}"
                   f"[{dst.port_id}]")
    else:
        out.append(f"To {_kind(node)} {{0x{int(node.ninf.nodeGUID):016x}}} "
                   f"portnum {dst.port_id} lid {a}-{b} \"{name(node)}\"")
    return out


def _ingress(sbn: Any, slid: int, dlid: int, at: Any = None) -> Any:
    """The port a unicast route from LID *slid* to LID *dlid* enters
    node *at* by (default: the node of *dlid*); None if the route does
    not enter it."""
    src = sbn.lids[slid]
    dst = sbn.lids[dlid]
    if at is None:
        at = dst.parent
    node, here = src.parent, src
    for _ in range(64):
        if here.to_end_port() is dst:
            return None
        if isinstance(node, _subnet().Switch):
            lfdb = node.lfdb or []
            out_port = lfdb[dlid] if dlid < len(lfdb) else 0xFF
            port = node.get_port_nc(out_port) if out_port != 0xFF else None
        else:
            port = here
        peer = sbn.topology.get(port) if port is not None else None
        if peer is None:
            return None
        node, here = peer.parent, peer
        if node is at:
            return peer.port_id
    return None


def _subnet() -> ModuleType:
    import rdma.subnet
    return rdma.subnet


class _MNode:
    """A node of the multicast tree walk (``ibtracert -m``)."""

    def __init__(self, node: Any, port: Any, up: Any, egress: int,
                 upport: int) -> None:
        self.node, self.port, self.up = node, port, up
        self.egress, self.upport = egress, upport
        self.shown_port = 0     # the port number shown for the root


def mcast_trace(sbn: Any, mft_entry: Any, slid: int, dlid: int,
                mlid: int, brief: bool = False,
                local_lid: int = 0, names: Any = None) -> List[str]:
    """The lines ``ibtracert -m MLID SLID DLID`` prints: a breadth-first
    walk from the source down the multicast forwarding tables
    (``mft_entry(switch, mlid)`` returns a switch's port mask, or None
    if the switch has no such entry) until the destination's port.
    *local_lid* is the LID of the port the trace is run from (a switch
    source is shown with the port the route from there enters it by)."""
    import collections
    Switch = _subnet().Switch

    def end_of(lid: int, what: str) -> Any:
        port = sbn.lids[lid] if 0 < lid < len(sbn.lids) else None
        if port is None:
            raise CmdError(f"{what} LID {lid} is not in the subnet")
        return port

    src, dst = end_of(slid, "source"), end_of(dlid, "destination")
    if src is dst:
        raise CmdError(f"a multicast trace needs two different ports "
                       f"(source and destination are LID {slid})")
    is_sw = isinstance(src.parent, Switch)
    if is_sw:
        ing = _ingress(sbn, local_lid, slid) if local_lid else None
        root = _MNode(src.parent, src, None, 0, 0)
        root.shown_port = ing if ing is not None else 0
    else:
        root = _MNode(src.parent, src, None, 0, 0)
        root.shown_port = src.port_id
    seen = {src.parent}
    skipped: List[str] = []
    found = None
    todo = collections.deque([root])
    while todo and found is None:
        cur = todo.popleft()
        node = cur.node
        if isinstance(node, Switch):
            mask = mft_entry(node, mlid)
            if mask is None:
                skipped.append(node.desc)
                continue
            outs = [i for i in range(1, node.ninf.numPorts + 1)
                    if mask >> i & 1 and i != cur.upport]
        elif cur is root:
            outs = [src.port_id]
        else:
            continue
        for i in outs:
            port = node.get_port_nc(i)
            if port is None:
                continue
            if port.pinf is not None and port.pinf.portPhysicalState != 5:
                continue                # not LinkUp
            peer = sbn.topology.get(port)
            if peer is None:
                continue
            child = _MNode(peer.parent, peer.to_end_port(), cur, i,
                           peer.port_id)
            if child.port is dst:
                found = child
                break
            if peer.parent in seen:
                continue
            seen.add(peer.parent)
            todo.append(child)
    if found is None:
        why = ""
        if skipped:
            why = (f" (no entry for it in the multicast table of "
                   f"{', '.join(repr(d) for d in skipped)}: past its "
                   f"capacity, or unreadable)")
        raise CmdError(f"no multicast route for MLID {mlid:#x} from LID "
                       f"{slid} to LID {dlid}{why}")
    if not is_sw and found.up is root and \
            isinstance(found.node, Switch) and local_lid and \
            local_lid not in range(*_lids(src)[:1], _lids(src)[1] + 1):
        # infiniband-diags reaches a remote CA's switch by the route from
        # the local port and shows the port that route enters it by.
        ing = _ingress(sbn, local_lid, slid, found.node)
        if ing is not None:
            found.upport = ing
    chain = []
    n = found
    while n is not None:
        chain.append(n)
        n = n.up
    chain.reverse()

    def desc(n: Any) -> str:
        return node_name(names, n.node.ninf.nodeGUID, n.node.desc)

    a, b = _lids(src)
    out = [f"From {_kind(src.parent)} 0x{int(src.parent.ninf.nodeGUID):x} "
           f"port {root.shown_port} lid {a}-{b} \"{desc(root)}\""]
    for n in chain[1:]:
        guid = int(n.node.ninf.nodeGUID)
        if brief:
            out.append(f"[{n.egress}] -> {_kind(n.node)} "
                       f"{{0x{guid:016x}}}[{n.upport}]")
        else:
            out.append(f"[{n.egress}] -> {_kind(n.node)} 0x{guid:x}"
                       f"[{n.upport}] lid {n.port.LID} \"{desc(n)}\"")
    a, b = _lids(dst)
    out.append(f"To {_kind(dst.parent)} 0x{int(dst.parent.ninf.nodeGUID):x}"
               f" port {found.upport} lid {a}-{b} \"{desc(found)}\"")
    return out


def _pairs_from_file(name: str) -> List[Tuple[int, List[str]]]:
    """``(line number, words)`` for each line of a ``--ports-file`` that
    is not blank or a ``#`` comment.

    :raises CmdError: if the file cannot be read."""
    try:
        with open(name) as f:
            text = f.read()
    except OSError as e:
        raise CmdError(f"cannot open ports-file {name}: "
                       f"{e.strerror}") from None
    pairs = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        pairs.append((n, words))
    return pairs


def ibtracert(args: argparse.Namespace) -> int:
    """Run ``ibtool ibtracert``; return the exit status."""
    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    import rdma.IBA as IBA
    what = "port GUID" if args.addr_guid else "LID"
    if args.ports_file is not None:
        # As infiniband-diags: the file's pairs, the arguments ignored.
        pairs = _pairs_from_file(args.ports_file)
    else:
        if len(args.rest) != 2:
            raise CmdError(f"give the source and the destination {what}")
        pairs = [(0, list(args.rest))]
        _ends(pairs[0][1], args)            # bad arguments: before MADs
    names = load_node_name_map(args.node_name_map)
    mlid = None
    if args.mlid is not None:
        mlid = any_lid(args.mlid, "MLID")
        if not IBA.LID_MULTICAST <= mlid < IBA.LID_PERMISSIVE:
            raise CmdError(f"MLID {mlid:#x} is not a multicast LID "
                           f"(0xc000..0xfffe)")
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        rdma.discovery.load(sched, sbn, ["all_NodeInfo",
                                         "all_NodeDescription",
                                         "all_PortInfo",
                                         "all_topology", "all_LFDB"],
                            sa=args.use_sa)

        def entry(sw: Any, m: int) -> Any:
            return _mft_entry(sched, sbn, sw, m)
        for n, ends in pairs:
            try:
                src, dst = _ends(ends, args)
                if args.addr_guid:
                    src = _lid_of_guid(sbn, src, "source")
                    dst = _lid_of_guid(sbn, dst, "destination")
                if mlid is None:
                    lines = trace(sbn, src, dst, args.no_info, names,
                                  args.force)
                else:
                    lines = mcast_trace(sbn, entry, src, dst, mlid,
                                        args.no_info, end_port.lid, names)
            except TraceError as e:
                if args.force:
                    # Show how far the route goes, as ibtracert -f does.
                    print("\n".join(e.lines), flush=True)
                raise _at_line(e, args, n) from None
            except CmdError as e:
                raise _at_line(e, args, n) from None
            print("\n".join(lines), flush=True)
    if args.ports_file is not None:
        print(f"{len(pairs)} lid/guid pairs processed from "
              f"{args.ports_file}")
    return 0


def _ends(words: List[str], args: argparse.Namespace) -> List[int]:
    """The source and destination of one trace (LIDs, or port GUIDs with
    ``-G``), swapped with ``-r``."""
    if len(words) != 2:
        raise CmdError(f"want a source and a destination, not "
                       f"{' '.join(words)!r}")
    if args.reverse:
        words = words[::-1]
    if args.addr_guid:
        return [_guid(t, w) for t, w in zip(words, ("source",
                                                    "destination"))]
    return [unicast_lid(words[0], "source LID"),
            unicast_lid(words[1], "destination LID")]


def _at_line(e: CmdError, args: argparse.Namespace, n: int) -> CmdError:
    """*e*, naming the line of the ports file it comes from."""
    if args.ports_file is None:
        return e
    return CmdError(f"{e} (at line {n} of {args.ports_file})")


def _guid(text: str, what: str) -> int:
    try:
        v = int(text, 16)
    except ValueError:
        raise CmdError(f"bad {what} port GUID {text!r} (hex)") from None
    if not 0 < v < 1 << 64:
        raise CmdError(f"{what} port GUID {text!r} is not 64 bits")
    return v


def _lid_of_guid(sbn: Any, guid: int, what: str) -> int:
    """The LID of the end port with port GUID *guid* in the discovered
    subnet."""
    port = sbn.ports.get(guid)
    if port is None or not port.LID:
        raise CmdError(f"{what} port GUID 0x{guid:016x} is not in the "
                       f"subnet")
    lid: int = port.LID
    return lid


def _mft_entry(sched: Any, sbn: Any, sw: Any, mlid: int) -> Any:
    """The port mask of *mlid* in switch *sw*'s multicast forwarding
    table (every position of its block, read by SMPs), or None when the
    MLID is past the switch's ``multicastFDBCap`` or cannot be read."""
    import rdma.IBA as IBA
    from rdma._errors import RDMAError
    idx = mlid - IBA.LID_MULTICAST
    if sw.swinf is None or idx >= sw.swinf.multicastFDBCap:
        return None
    path = sbn.get_path_smp(sched, sw.get_port(0))
    block = [0] * 32

    import rdma.subnet

    def one(pos: int) -> Generator[Any, Any, None]:
        inf = yield sched.SubnGet(
            IBA.SMPMulticastForwardingTable, path,
            rdma.subnet.mft_attribute_modifier(idx // 32, pos))
        for i, v in enumerate(inf.portMaskBlock):
            block[i] |= int(v) << (16 * pos)
    try:
        sched.run(mqueue=(one(pos) for pos in range(sw.mfdb_positions)))
    except (IBA.MADError, RDMAError):
        return None
    return block[idx % 32]
