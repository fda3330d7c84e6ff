"""``ibtool perfquery``: a port's PortCounters, printed as
infiniband-diags' ``perfquery`` prints them.

::

    ibtool perfquery [-x] [-r | -R] [TARGET [PORT]]   # PortCounters
"""
from __future__ import annotations

import argparse
from typing import Any, List

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_timeout_option, get_end_port, gmp_path,
                              open_umad, smp_get, target_words)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "perfquery", "counters_lines", "counters_ext_lines",
           "aggregate"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``perfquery`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="LID or -G GUID (default: the local port), then "
                        "the port (default: the local port's number), "
                        "or ports: 1,4,8 or 1-10")
    p.add_argument("-x", "--extended", action="store_true",
                   help="PortCountersExtended (64-bit traffic counters)")
    p.add_argument("-a", "--all_ports", action="store_true",
                   help="all ports (PortSelect 255), or the sum of the "
                        "ports given")
    p.add_argument("-l", "--loop_ports", action="store_true",
                   help="with -a: each port in turn")
    p.add_argument("-r", "--reset_after_read", action="store_true",
                   help="reset the counters after reading them")
    p.add_argument("-R", "--Reset_only", action="store_true",
                   help="reset the counters, print nothing")
    g = p.add_mutually_exclusive_group()
    for flags, key in ((("-E", "--rcverr"), "rcverr"),
                       (("-D", "--xmtdisc"), "xmtdisc"),
                       (("-F", "--flow", "--flowctlcounters"), "flow"),
                       (("--oprcvcounters",), "oprcv"),
                       (("--vloppackets",), "vloppackets"),
                       (("--vlopdata",), "vlopdata"),
                       (("--vl-xmit-errs", "--vlxmitflowctlerrors"),
                        "vlxmiterrs"),
                       (("--vl-xmit-wait", "--vlxmitcounters"),
                        "vlxmitwait")):
        g.add_argument(*flags, action="store_const", dest="details",
                       const=key, help=_DETAILS[key][1])
    add_device_options(p)
    # perfquery's -D is --xmtdisc (infiniband-diags and python-rdma); a
    # GMP goes by LID anyway, so the directed-route form is --Direct only.
    t = p.add_mutually_exclusive_group()
    t.add_argument("--Direct", dest="addr_direct", action="store_true",
                   help="the target is a directed route (refused: a GMP "
                        "needs a LID)")
    t.add_argument("-G", "--Guid", dest="addr_guid", action="store_true",
                   help="the target is a port GUID (hex)")
    t.add_argument("-L", "--Lid", dest="addr_lid", action="store_true",
                   help="the target is a LID (the default)")
    add_timeout_option(p)
    p.set_defaults(details=None)
    return p


def counters_lines(pc: Any) -> List[str]:
    """PortCounters as ``perfquery`` prints them."""
    # QP1Dropped: bytes 20-21, the row the 1.2.1 table calls reserved.
    qp1 = int.from_bytes(pc.pack()[20:22], "big")
    return _ibfmt.dotted([
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


#: PerfMgt ClassPortInfo.CapabilityMask bits perfquery looks at.
_PM_ALL_PORT_SELECT = 1 << 8
_PM_XMIT_WAIT = 1 << 12


def _ports_spec(text: str) -> List[int]:
    """The port argument of perfquery: ``3``, ``1,4,8`` or ``1-10``.

    :raises CmdError: for anything else, or a port past 255."""
    try:
        if "," in text:
            ports = [int(x, 0) for x in text.split(",") if x]
        elif "-" in text[1:]:
            lo, hi = (int(x, 0) for x in text.split("-", 1))
            if lo >= hi:
                raise CmdError(f"port range {text!r}: the last port must "
                               f"be above the first")
            ports = list(range(lo, hi + 1))
        else:
            ports = [int(text, 0)]
    except ValueError:
        raise CmdError(f"bad port number {text!r}") from None
    for port in ports:
        if not 0 <= port <= 255:
            raise CmdError(f"port {port} is out of range 0-255")
    return ports


def aggregate(pcs: List[Any]) -> Any:
    """The sum of the PortCounters (or PortCountersExtended) *pcs*, each
    counter stopping at its largest value as the counters themselves do,
    with PortSelect 255 (what perfquery prints when it emulates
    AllPortSelect)."""
    cls = type(pcs[0])
    out = cls()
    keep = ("portSelect", "counterSelect", "counterSelect2")
    for name, bits, count in cls.MEMBERS:
        if name in keep or name in ("reserved_0", "reserved_32") or \
                count != 1:
            continue
        top = (1 << bits) - 1
        setattr(out, name, min(top, sum(int(getattr(pc, name))
                                        for pc in pcs)))
    for name in ("counterSelect", "counterSelect2"):
        if hasattr(pcs[-1], name):
            setattr(out, name, getattr(pcs[-1], name))
    out.portSelect = 255
    return out


def _node_ports(umad: Any, end_port: Any, path: Any) -> range:
    """The ports of the node at *path* perfquery loops over: 1..N, from 0
    on a switch with an enhanced port 0."""
    import rdma.IBA as IBA
    import rdma.path
    smp = rdma.path.IBPath(end_port, SLID=end_port.lid, DLID=path.DLID,
                           dqpn=0, sqpn=0, qkey=IBA.IB_DEFAULT_QP0_QKEY)
    ni = smp_get(umad, IBA.SMPNodeInfo, smp)
    first = 1
    if ni.nodeType == IBA.NODE_SWITCH:
        si = smp_get(umad, IBA.SMPSwitchInfo, smp)
        if si.enhancedPort0:
            first = 0
    return range(first, ni.numPorts + 1)


def _per_vl(label: str, name: str) -> List[Any]:
    return [(f"{label}{i}", (name, i)) for i in range(16)]


#: perfquery's one-port attributes: option key -> (attribute, title,
#: [(label, field or (array field, index))]).
_DETAILS = {
    "rcverr": ("PMPortRcvErrorDetails", "PortRcvErrorDetails", [
        ("PortLocalPhysicalErrors", "portLocalPhysicalErrors"),
        ("PortMalformedPktErrors", "portMalformedPacketErrors"),
        ("PortBufferOverrunErrors", "portBufferOverrunErrors"),
        ("PortDLIDMappingErrors", "portDLIDMappingErrors"),
        ("PortVLMappingErrors", "portVLMappingErrors"),
        ("PortLoopingErrors", "portLoopingErrors")]),
    "xmtdisc": ("PMPortXmitDiscardDetails", "PortXmitDiscardDetails", [
        ("PortInactiveDiscards", "portInactiveDiscards"),
        ("PortNeighborMTUDiscards", "portNeighborMTUDiscards"),
        ("PortSwLifetimeLimitDiscards", "portSwLifetimeLimitDiscards"),
        ("PortSwHOQLifetimeLimitDiscards", "portSwHOQLimitDiscards")]),
    "flow": ("PMPortFlowCtlCounters", "PortFlowCtlCounters", [
        ("PortXmitFlowPkts", "portXmitFlowPkts"),
        ("PortRcvFlowPkts", "portRcvFlowPkts")]),
    "oprcv": ("PMPortOpRcvCounters", "PortOpRcvCounters", [
        ("PortOpRcvPkts", "portOpRcvPkts"),
        ("PortOpRcvData", "portOpRcvData")]),
    "vloppackets": ("PMPortVLOpPackets", "PortVLOpPackets",
                    _per_vl("PortVLOpPackets", "portVLOpPackets")),
    "vlopdata": ("PMPortVLOpData", "PortVLOpData",
                 _per_vl("PortVLOpData", "portVLOpData")),
    "vlxmiterrs": ("PMPortVLXmitFlowCtlUpdateErrors",
                   "PortVLXmitFlowCtlUpdateErrors",
                   _per_vl("PortVLXmitFlowCtlUpdateErrors",
                           "portVLXmitFlowCtlUpdateErrors")),
    "vlxmitwait": ("PMPortVLXmitWaitCounters", "PortVLXmitWaitCounters",
                   _per_vl("PortVLXmitWait", "portVLXmitWait")),
}


def _field(val: Any, name: Any) -> int:
    if isinstance(name, tuple):
        return int(getattr(val, name[0])[name[1]])
    return int(getattr(val, name))


def _details(args: argparse.Namespace, rest: List[str], end_port: Any,
             port: int) -> int:
    """``perfquery -E`` / ``-D``: one port's error or discard details."""
    import rdma.IBA as IBA
    attr, title, rows = _DETAILS[args.details]
    with open_umad(args, end_port) as umad:
        path = gmp_path(rest[0] if rest else None, args, end_port, umad)
        val = umad.PerformanceGet(getattr(IBA, attr)(portSelect=port), path)
    print(f"# {title} counters: Lid {path.DLID} port {port}")
    print("\n".join(_ibfmt.dotted(
        [("PortSelect", str(val.portSelect)),
         ("CounterSelect", f"0x{val.counterSelect:04x}")] +
        [(label, str(_field(val, name))) for label, name in rows])))
    return 0


def perfquery(args: argparse.Namespace) -> int:
    """Run ``ibtool perfquery``; return the exit status."""
    import rdma.IBA as IBA
    import sys
    rest = target_words(args, 2)
    end_port = get_end_port(args)
    ports = _ports_spec(rest[1]) if len(rest) > 1 else []
    # As perfquery: -a means port 255; a port argument replaces it, and
    # without a target the local port does.
    port = ports[0] if ports else (255 if args.all_ports else 0)
    if not rest or not (ports or args.all_ports):
        port = end_port.port_id     # ours: perfquery's default is port 0
    if args.details:
        if args.extended or args.loop_ports or args.reset_after_read or \
                args.Reset_only or len(ports) > 1:
            raise CmdError(f"--{args.details} reads one port's details: "
                           f"not with -x, -l, -r, -R or a port list")
        return _details(args, rest, end_port, port)
    cls = IBA.PMPortCountersExt if args.extended else IBA.PMPortCounters
    with open_umad(args, end_port) as umad:
        path = gmp_path(rest[0] if rest else None, args, end_port, umad)
        cpi = umad.PerformanceGet(IBA.MADClassPortInfo, path)
        cap = cpi.capabilityMask
        emulate = False
        if not cap & _PM_ALL_PORT_SELECT and port == 255:
            if not args.all_ports:
                raise CmdError(f"{path.DLID}: the PMA has no AllPortSelect "
                               f"(port 255)")
            emulate = True
        if emulate or (args.loop_ports and port == 255):
            sel = list(_node_ports(umad, end_port, path))
            summed = emulate and not args.loop_ports
            if summed:
                print("ibtool perfquery: warning: emulating AllPortSelect "
                      "by iterating through all ports", file=sys.stderr)
        elif len(ports) > 1:
            sel = ports
            summed = args.all_ports and not args.loop_ports
        else:
            sel, summed = [port], False
        pcs = []
        if not args.Reset_only:
            for i in sel:
                pc = umad.PerformanceGet(cls(portSelect=i), path)
                if not args.extended and not cap & _PM_XMIT_WAIT:
                    pc.portXmitWait = 0
                pcs.append(pc)
        if args.Reset_only or args.reset_after_read:
            for i in sel:
                # CounterSelect: every counter of the attribute
                umad.PerformanceSet(cls(portSelect=i, counterSelect=(
                    0xFF if args.extended else 0xFFFF)), path)
    if args.Reset_only:
        return 0
    shown = [(255, aggregate(pcs))] if summed else list(zip(sel, pcs))
    for i, pc in shown:
        if args.extended:
            print(f"# Port extended counters: Lid {path.DLID} port {i} "
                  f"(CapMask: 0x{cap:04X} CapMask2: "
                  f"0x{cpi.capabilityMask2:07x})")
            print("\n".join(counters_ext_lines(pc)))
        else:
            print(f"# Port counters: Lid {path.DLID} port {i} "
                  f"(CapMask: 0x{cap:04X})")
            print("\n".join(counters_lines(pc)))
    return 0
