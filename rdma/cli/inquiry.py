"""``ibtool ibaddr``, ``ibtool sminfo`` and ``ibtool perfquery``: one-node
inquiries printed as infiniband-diags prints them.

::

    ibtool ibaddr [-g | -l] [TARGET]          # GID and LID range of a port
    ibtool sminfo [TARGET]                     # the SM (default: the local
                                               # port's SM LID)
    ibtool perfquery [-x] [-r | -R] [TARGET [PORT]]   # PortCounters
"""
from __future__ import annotations

import argparse
from typing import Any, List

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, gmp_path,
                              smp_get, smp_path)

__all__ = ["add_parsers", "ibaddr", "sminfo", "perfquery"]

SM_STATES = {0: "SMINFO_NOTACT", 1: "SMINFO_DISCOVER", 2: "SMINFO_STANDBY",
             3: "SMINFO_MASTER"}


def _common(p: argparse.ArgumentParser) -> None:
    add_device_options(p)
    add_target_options(p)
    p.add_argument("-t", "--timeout", type=int, default=None, metavar="MS",
                   help="timeout of each MAD in ms")


def add_parsers(subparsers: Any) -> None:
    """Add ``ibaddr``, ``sminfo`` and ``perfquery`` to ``ibtool``."""
    p = subparsers.add_parser(
        "ibaddr", help="a port's GID and LID range (like ibaddr)")
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="LID, -G GUID or -D route (default: local port)")
    p.add_argument("-g", "--gid_show", action="store_true",
                   help="only the GID")
    p.add_argument("-l", "--lid_show", action="store_true",
                   help="only the LID range")
    _common(p)
    p.set_defaults(func=ibaddr)

    p = subparsers.add_parser(
        "sminfo", help="the subnet manager's SMInfo (like sminfo)")
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="the SM's LID, -G GUID or -D route (default: the "
                        "local port's SM LID)")
    _common(p)
    p.set_defaults(func=sminfo)

    p = subparsers.add_parser(
        "perfquery", help="a port's PortCounters (like perfquery)")
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="LID or -G GUID (default: the local port), then "
                        "the port (default: the local port's number)")
    p.add_argument("-x", "--extended", action="store_true",
                   help="PortCountersExtended (64-bit traffic counters)")
    p.add_argument("-r", "--reset_after_read", action="store_true",
                   help="reset the counters after reading them")
    p.add_argument("-R", "--Reset_only", action="store_true",
                   help="reset the counters, print nothing")
    _common(p)
    p.set_defaults(func=perfquery)


def _umad(args: argparse.Namespace, end_port: Any) -> Any:
    import rdma.umad
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    return rdma.umad.UMAD(end_port, **kw)


def _target(args: argparse.Namespace, most: int) -> List[str]:
    if len(args.rest) > most:
        raise CmdError(f"too many arguments: {' '.join(args.rest)}")
    return list(args.rest)


def ibaddr(args: argparse.Namespace) -> int:
    """Run ``ibtool ibaddr``; return the exit status."""
    import rdma.IBA as IBA
    rest = _target(args, 1)
    end_port = get_end_port(args)
    with _umad(args, end_port) as umad:
        path = smp_path(rest[0] if rest else None, args, end_port, umad)
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        pi = smp_get(umad, IBA.SMPPortInfo, path)
    gid = IBA.GID.from_parts(pi.GIDPrefix, int(ni.portGUID))
    first, last = pi.LID, pi.LID + (1 << pi.LMC) - 1
    show_gid = args.gid_show or not args.lid_show
    show_lid = args.lid_show or not args.gid_show
    parts = []
    if show_gid:
        parts.append(f"GID {gid} ")
    if show_lid:
        parts.append(f"LID start 0x{first:x} end 0x{last:x}")
    print("".join(parts))
    return 0


def sminfo(args: argparse.Namespace) -> int:
    """Run ``ibtool sminfo``; return the exit status."""
    import rdma.IBA as IBA
    rest = _target(args, 1)
    end_port = get_end_port(args)
    target = rest[0] if rest else None
    if target is None:
        if not end_port.sm_lid:
            raise CmdError(f"{end_port} knows no SM LID (no SM on the "
                           f"subnet?): give the SM's LID")
        target = str(end_port.sm_lid)
        args.addr_direct = args.addr_guid = False
    with _umad(args, end_port) as umad:
        path = smp_path(target, args, end_port, umad)
        si = smp_get(umad, IBA.SMPSMInfo, path)
    lid = getattr(path, "DLID", 0)
    if lid in (0, 0xFFFF):
        lid = 0
    print(f"sminfo: sm lid {lid} sm guid 0x{int(si.GUID):x}, activity "
          f"count {si.actCount} priority {si.priority} state {si.SMState} "
          f"{SM_STATES.get(si.SMState, '???')}")
    return 0


def counters_lines(pc: Any) -> List[str]:
    """PortCounters as ``perfquery`` prints them."""
    qp1 = int.from_bytes(pc.pack()[24:26], "big")   # QP1Dropped (reserved
    return _ibfmt.dotted([                          # in the 1.2.1 table)
        ("PortSelect", str(pc.portSelect)),
        ("CounterSelect", f"0x{pc.counterSelect:04x}"),
        ("SymbolErrorCounter", str(pc.symbolErrorCounter)),
        ("LinkErrorRecoveryCounter", str(pc.linkErrorRecoveryCounter)),
        ("LinkDownedCounter", str(pc.linkDownedCounter)),
        ("PortRcvErrors", str(pc.portRcvErrors)),
        ("PortRcvRemotePhysicalErrors",
         str(pc.portRcvRemotePhysicalErrors)),
        ("PortRcvSwitchRelayErrors", str(pc.portRcvSwitchRelayErrors)),
        ("PortXmitDiscards", str(pc.portXmitDiscards)),
        ("PortXmitConstraintErrors", str(pc.portXmitConstraintErrors)),
        ("PortRcvConstraintErrors", str(pc.portRcvConstraintErrors)),
        ("CounterSelect2", f"0x{pc.counterSelect2:02x}"),
        ("LocalLinkIntegrityErrors", str(pc.localLinkIntegrityErrors)),
        ("ExcessiveBufferOverrunErrors",
         str(pc.excessiveBufferOverrunErrors)),
        ("QP1Dropped", str(qp1)),
        ("VL15Dropped", str(pc.VL15Dropped)),
        ("PortXmitData", str(pc.portXmitData)),
        ("PortRcvData", str(pc.portRcvData)),
        ("PortXmitPkts", str(pc.portXmitPkts)),
        ("PortRcvPkts", str(pc.portRcvPkts)),
        ("PortXmitWait", str(pc.portXmitWait)),
    ])


def counters_ext_lines(pc: Any) -> List[str]:
    """PortCountersExtended as ``perfquery -x`` prints them."""
    return _ibfmt.dotted([
        ("PortSelect", str(pc.portSelect)),
        ("CounterSelect", f"0x{pc.counterSelect:04x}"),
        ("PortXmitData", str(pc.portXmitData)),
        ("PortRcvData", str(pc.portRcvData)),
        ("PortXmitPkts", str(pc.portXmitPkts)),
        ("PortRcvPkts", str(pc.portRcvPkts)),
        ("PortUnicastXmitPkts", str(pc.portUnicastXmitPkts)),
        ("PortUnicastRcvPkts", str(pc.portUnicastRcvPkts)),
        ("PortMulticastXmitPkts", str(pc.portMulticastXmitPkts)),
        ("PortMulticastRcvPkts", str(pc.portMulticastRcvPkts)),
    ])


def perfquery(args: argparse.Namespace) -> int:
    """Run ``ibtool perfquery``; return the exit status."""
    import rdma.IBA as IBA
    rest = _target(args, 2)
    end_port = get_end_port(args)
    try:
        port = int(rest[1], 0) if len(rest) > 1 else end_port.port_id
    except ValueError:
        raise CmdError(f"bad port number {rest[1]!r}") from None
    if not 0 <= port <= 255:
        raise CmdError(f"port {port} is out of range 0-255")
    cls = IBA.PMPortCountersExt if args.extended else IBA.PMPortCounters
    with _umad(args, end_port) as umad:
        path = gmp_path(rest[0] if rest else None, args, end_port, umad)
        if not args.Reset_only:
            cpi = umad.PerformanceGet(IBA.MADClassPortInfo, path)
            pc = umad.PerformanceGet(cls(portSelect=port), path)
        if args.Reset_only or args.reset_after_read:
            # CounterSelect: every counter of the attribute
            umad.PerformanceSet(cls(portSelect=port, counterSelect=(
                0xFF if args.extended else 0xFFFF)), path)
    if args.Reset_only:
        return 0
    if args.extended:
        print(f"# Port extended counters: Lid {path.DLID} port {port} "
              f"(CapMask: 0x{cpi.capabilityMask:04X} CapMask2: "
              f"0x{cpi.capabilityMask2:07x})")
        print("\n".join(counters_ext_lines(pc)))
    else:
        print(f"# Port counters: Lid {path.DLID} port {port} "
              f"(CapMask: 0x{cpi.capabilityMask:04X})")
        print("\n".join(counters_lines(pc)))
    return 0
