"""``ibtool ibroute``, ``dump_lfts`` and ``dump_mfts``: a switch's
unicast or multicast forwarding table, printed as infiniband-diags
prints it.

::

    ibtool ibroute [-a] [-n] SWITCH [STARTLID [ENDLID]]     # a switch's LFT
    ibtool ibroute -M [-a] [-n] SWITCH [STARTMLID [ENDMLID]]  # its MFT
    ibtool dump_lfts [-a] [-n] [STARTLID [ENDLID]]   # every switch's LFT
    ibtool dump_mfts [-a] [-n] [STARTMLID [ENDMLID]]   # every switch's MFT

``ibroute`` reads SwitchInfo and the LinearForwardingTable blocks of the
switch and, for each LID in use, the NodeInfo and NodeDescription of its
destination (LID-routed SMPs); with ``-M`` the MulticastForwardingTable
blocks (every 16-port position of a block in parallel).  ``dump_lfts``
and ``dump_mfts`` (aliases of this module in ``ibtool``'s table, like
infiniband-diags' ``dump_fts`` and ``dump_fts -M``) discover the subnet
and do the same for every switch.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Tuple

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_node_name_map, add_sa_option,
                              add_target_options, any_lid, get_end_port,
                              load_node_name_map, node_name, smp_get,
                              smp_path, transactor, unicast_lid)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibroute", "dump_fts", "mcast_range",
           "mcast_line"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibroute``, ``dump_lfts`` or ``dump_mfts`` (*name*) to
    ``ibtool``."""
    if name != "ibroute":
        return _add_dump_parser(subparsers, name, help)
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="SWITCH",
                   help="the switch (LID, -G GUID or -D route), then the "
                        "first and last LID to show")
    p.add_argument("-a", "--all", action="store_true",
                   help="show invalid entries (port 255) too")
    p.add_argument("-n", "--no_dests", action="store_true",
                   help="do not query the destinations (with -M: show "
                        "the port masks in hex)")
    p.add_argument("-M", "--Multicast", action="store_true",
                   dest="multicast",
                   help="show the multicast forwarding table (MLIDs "
                        "0xC000 and up)")
    add_device_options(p)
    add_target_options(p)
    add_node_name_map(p)
    add_sa_option(p)
    return p


def _add_dump_parser(subparsers: Subparsers, name: str,
                     help: str) -> argparse.ArgumentParser:
    mcast = {"dump_lfts": False, "dump_mfts": True}[name]
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="START",
                   help=f"the first and last {'M' if mcast else ''}LID "
                        f"to show")
    p.add_argument("-a", "--all", action="store_true",
                   help="show invalid entries too")
    p.add_argument("-n", "--no_dests", action="store_true",
                   help="do not query the destinations (multicast: "
                        "show the port masks in hex)")
    add_device_options(p)
    add_node_name_map(p)
    p.set_defaults(multicast=mcast)
    return p


def _header(path: Any, discovered: bool = False) -> str:
    """How ``ibroute`` names the switch at *path*.  A directed route
    that discovery found (*discovered*, ``dump_fts``) is shown with SLID
    and DLID 0 where a route from the command line shows the permissive
    LID, as infiniband-diags does."""
    import rdma.path
    if isinstance(path, rdma.path.IBDRPath):
        route = ",".join(str(b) for b in bytes(path.drPath))
        slid, dlid = path.drSLID, path.drDLID
        if discovered:
            slid, dlid = (0 if x == 0xFFFF else x for x in (slid, dlid))
        return f"DR path slid {slid}; dlid {dlid}; {route}"
    return f"Lid {path.DLID}"


def _dest(umad: Any, end_port: Any, lid: int,
          cache: Dict[int, str], names: Any = None) -> str:
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
        desc = node_name(names, ni.nodeGUID, desc.split(chr(0))[0])
        text = (f"({_ibfmt.NODE_TYPES.get(ni.nodeType, '???')} portguid "
                f"0x{int(ni.portGUID):016x}: '{desc}')")
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
    names = load_node_name_map(args.node_name_map)
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as raw:
        umad = transactor(raw, args)
        path = smp_path(args.rest[0], args, end_port, raw)
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        if ni.nodeType != 2:
            raise CmdError(f"{args.rest[0]} is not a switch")
        return _dump_switch(args, umad, end_port, path, ni, args.rest[1:],
                            names, {})


def _dump_switch(args: argparse.Namespace, umad: Any, end_port: Any,
                 path: Any, ni: Any, rng: List[str], names: Any,
                 cache: Dict[int, str], discovered: bool = False) -> int:
    """Print the forwarding table (``args.multicast``: the multicast
    one) of the switch at *path* whose NodeInfo is *ni*, for the range
    *rng* of the command line, as ``ibroute`` does (*discovered*: *path*
    is a route discovery found, see :func:`_header`)."""
    import rdma.IBA as IBA
    head = _header(path, discovered)
    nd = smp_get(umad, IBA.SMPNodeDescription, path)
    si = smp_get(umad, IBA.SMPSwitchInfo, path)
    if args.multicast:
        return _ibroute_mcast(args, umad, path, ni, nd, si, rng, names,
                              head)
    top = si.linearFDBTop
    first = unicast_lid(rng[0], "start LID") if len(rng) > 0 else 0
    last = unicast_lid(rng[1], "end LID") if len(rng) > 1 else top
    last = min(last, top)
    desc = nd.nodeString
    desc = desc if isinstance(desc, str) else bytes(desc).decode(
        "utf-8", "replace")
    desc = node_name(names, ni.nodeGUID, desc.split(chr(0))[0])
    print(f"Unicast lids [0x{first:x}-0x{last:x}] of switch "
          f"{head} guid 0x{int(ni.nodeGUID):016x} "
          f"({desc}):")
    print("  Lid  Out   Destination")
    print("       Port     Info ")
    blocks: Dict[int, List[int]] = {}
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
                  f"{_dest(umad, end_port, lid, cache, names)}")
    print(f"{shown} {'lids' if args.all else 'valid lids'} dumped ")
    return 0


def mcast_range(cap: int, top: int, first: int, last: int,
                show_all: bool) -> Tuple[int, int, List[str]]:
    """The MLIDs ``ibroute -M`` shows for a switch with
    ``multicastFDBCap`` *cap* and ``multicastFDBTop`` *top*, given the
    start and end MLID of the command line (0: not given), and warnings
    about MLIDs it had to move, as infiniband-diags does: the end is the
    top of the table (or the capacity, or 0xFFFE) and a start below
    0xC000 becomes 0xC000."""
    import rdma.IBA as IBA
    warns = []
    if not last or last > IBA.LID_MULTICAST + cap - 1:
        last = IBA.LID_MULTICAST + cap - 1
    if not show_all and top and top < last:
        if top < IBA.LID_MULTICAST - 1:
            warns.append(f"the switch's MulticastFDBTop {top:#x} is not a "
                         f"multicast LID; ignored")
        else:
            last = top
    if not first:
        first = IBA.LID_MULTICAST
    elif first < IBA.LID_MULTICAST:
        warns.append(f"start MLID {first:#x} is below 0xc000: starting at "
                     f"0xc000")
        first = IBA.LID_MULTICAST
    if last > IBA.LID_MULTICAST + IBA.LID_COUNT_MULTICAST - 1:
        warns.append(f"end MLID {last:#x} is above 0xfffe: ending at "
                     f"0xfffe")
        last = IBA.LID_MULTICAST + IBA.LID_COUNT_MULTICAST - 1
    return first, last, warns


def mcast_line(mlid: int, mask: int, nports: int, brief: bool,
               show_all: bool) -> Any:
    """One line of ``ibroute -M`` for *mlid* forwarded to the ports of
    *mask* (None when it is empty and *show_all* is not set)."""
    if not mask and not show_all:
        return None
    if brief:
        chunks = (nports + 1 + 15) // 16
        text = "".join(f"{(mask >> (16 * i)) & 0xFFFF:04x}"
                       for i in range(chunks))
    else:
        text = "".join("x " if mask >> i & 1 else "  "
                       for i in range(nports + 1))
    return f"0x{mlid:04x}      {text}"


def _ibroute_mcast(args: argparse.Namespace, umad: Any, path: Any,
                   ni: Any, nd: Any, si: Any, rng: List[str],
                   names: Any = None, head: str = "") -> int:
    """``ibroute -M``: the multicast forwarding table, the blocks of the
    range read in parallel with :meth:`rdma.subnet.Switch`'s block
    reader."""
    import sys

    import rdma.discovery
    import rdma.IBA as IBA
    import rdma.subnet
    first = any_lid(rng[0], "start MLID") if len(rng) > 0 else 0
    last = any_lid(rng[1], "end MLID") if len(rng) > 1 else 0
    first, last, warns = mcast_range(si.multicastFDBCap,
                                     si.multicastFDBTop, first, last,
                                     args.all)
    for w in warns:
        print(f"ibtool ibroute: warning: {w}", file=sys.stderr)
    nports = ni.numPorts
    desc = node_name(names, ni.nodeGUID,
                     rdma.subnet.node_description(nd.nodeString))
    print(f"Multicast mlids [0x{first:x}-0x{last:x}] of switch "
          f"{head or _header(path)} guid 0x{int(ni.nodeGUID):016x} ({desc}):")
    if args.no_dests:
        print(" MLid       Port Mask")
    else:
        if nports > 9:
            print("            " + "".join(
                f"{chr(48 + i // 10) if i % 10 == 0 else ' '} "
                for i in range(nports + 1)))
        print("     Ports: " + "".join(f"{i % 10} "
                                       for i in range(nports + 1)))
        print(" MLid")
    sw = rdma.subnet.Switch()
    sw.ninf, sw.swinf = ni, si
    sw.mfdb = [0] * sw.mfdb_size
    from rdma.satransactor import SATransactor
    if isinstance(umad, SATransactor):
        # --sa: every MulticastForwardingTableRecord of the switch, one
        # GetTable (synchronous: a directed route is resolved on the way).
        umad.do_async(sw._get_MFDB_SA(umad, path))
    else:
        sched = rdma.discovery.scheduler_class()(umad)
        # Every block of the range, every position, in parallel.
        blocks = range((first - IBA.LID_MULTICAST) // 32,
                       (last - IBA.LID_MULTICAST) // 32 + 1)
        sched.run(mqueue=(sw._get_MFDB(sched, blk, pos, path)
                          for blk in blocks
                          for pos in range(sw.mfdb_positions)))
    shown = 0
    for mlid in range(first, last + 1):
        line = mcast_line(mlid, sw.mfdb[mlid - IBA.LID_MULTICAST], nports,
                          args.no_dests, args.all)
        if line is not None:
            print(line)
            shown += 1
    print(f"{shown} {'' if args.all else 'valid '}mlids dumped ")
    return 0


def dump_fts(args: argparse.Namespace) -> int:
    """Run ``ibtool dump_lfts`` / ``dump_mfts``: discover the subnet by
    directed routes, then print every switch's forwarding table as
    ``ibroute`` does, reached by the directed route discovery found (the
    header says ``DR path ...``, as infiniband-diags' ``dump_fts``)."""
    import sys

    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    from rdma._errors import RDMAError
    from rdma._mad import MADError
    if len(args.rest) > 2:
        raise CmdError(f"too many arguments: {' '.join(args.rest)} (give "
                       f"the first and the last LID)")
    check = any_lid if args.multicast else unicast_lid
    for text, what in zip(args.rest, ("start", "end")):
        check(text, f"{what} {'M' if args.multicast else ''}LID")
    names = load_node_name_map(args.node_name_map)
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        sbn.lid_routed = False
        rdma.discovery.load(sched, sbn, ["all_NodeInfo", "all_topology"])
        for path, err in getattr(sbn, "errors", []):
            print(f"ibtool {args.command}: warning: {path}: {err}",
                  file=sys.stderr)
        cache: Dict[int, str] = {}
        failed = 0
        for sw in list(sbn.iterswitches()):
            port0 = sw.ports[0] if sw.ports else None
            path = (sbn.paths.get(port0) if port0 is not None and
                    sbn.paths is not None else None)
            if path is None:
                continue
            try:
                _dump_switch(args, umad, end_port, path, sw.ninf,
                             list(args.rest), names, cache, discovered=True)
            except (MADError, RDMAError) as e:
                # A switch that stops answering: the others are dumped.
                failed += 1
                print(f"ibtool {args.command}: {sw.desc}: {e}",
                      file=sys.stderr, flush=True)
    return 1 if failed else 0
