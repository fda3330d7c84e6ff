"""``ibtool ibqueryerrors``: every port's error counters, reported when
above a threshold, as infiniband-diags' ``ibqueryerrors`` reports them.

::

    ibtool ibqueryerrors [-c] [-k | -K] [--switch | --ca]
        [--threshold NAME=VALUE ...]

The subnet is discovered (:mod:`rdma.discovery`), then the PortCounters of
every switch port (and of the switch as a whole, ``port ALL``, where the
PMA supports AllPortSelect) and of every linked CA port are read through
the PerfMgt class.  A counter is an error when it is above its threshold
(default 0).  The exit status is 1 when a port is reported, as with
``ibqueryerrors``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Tuple

from rdma import IBA
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_node_name_map, add_sa_option,
                              get_end_port, load_node_name_map, node_name)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibqueryerrors", "ERROR_COUNTERS", "port_errors"]

#: PortCounters error counters (:data:`rdma.IBA.PC_ERROR_COUNTERS`).
ERROR_COUNTERS = IBA.PC_ERROR_COUNTERS
_ALL_PORT_SELECT = 0x100      # ClassPortInfo:CapabilityMask bit (PerfMgt)


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibqueryerrors`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("-c", "--suppress-common", action="store_true",
                   help="suppress PortRcvSwitchRelayErrors")
    p.add_argument("-k", "--clear", action="store_true",
                   help="clear the error counters after reading them")
    p.add_argument("-K", "--clear-all", action="store_true",
                   help="clear all counters after reading them")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--switch", action="store_true", help="switches only")
    g.add_argument("--ca", action="store_true", help="CAs only")
    p.add_argument("--threshold", action="append", default=[],
                   metavar="NAME=VALUE",
                   help="report NAME only above VALUE (default 0)")
    add_device_options(p)
    add_node_name_map(p)
    add_sa_option(p)
    return p


def port_errors(pc: Any, thresholds: Dict[str, int],
                suppressed: List[str]) -> List[Tuple[str, int]]:
    """``(name, value)`` of the counters of ``pc`` above their threshold."""
    out = []
    for field, name in ERROR_COUNTERS:
        if name in suppressed:
            continue
        value = getattr(pc, field)
        if value > thresholds.get(name, 0):
            out.append((name, value))
    return out


def _thresholds(specs: List[str]) -> Dict[str, int]:
    names = {n for _, n in ERROR_COUNTERS}
    out = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or name not in names:
            raise CmdError(f"bad threshold {spec!r}: want NAME=VALUE with "
                           f"NAME one of {', '.join(sorted(names))}")
        try:
            out[name] = int(value, 0)
        except ValueError:
            raise CmdError(f"bad threshold value in {spec!r}") from None
    return out


def _pm_path(end_port: Any, lid: int) -> Any:
    import rdma.path
    return rdma.path.IBPath(end_port, DLID=lid, SLID=end_port.lid, dqpn=1,
                            sqpn=1, qkey=IBA.IB_DEFAULT_QP1_QKEY)


def ibqueryerrors(args: argparse.Namespace) -> int:
    """Run ``ibtool ibqueryerrors``; return the exit status."""
    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    thresholds = _thresholds(args.threshold)
    names = load_node_name_map(args.node_name_map)
    suppressed = ["PortRcvSwitchRelayErrors"] if args.suppress_common else []
    end_port = get_end_port(args)
    nodes = ports = bad_nodes = bad_ports = 0
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        rdma.discovery.load(sched, sbn, ["all_NodeInfo",
                                         "all_NodeDescription",
                                         "all_topology"], sa=args.use_sa)
        for node in sbn.iternodes():
            if node.ninf is None:
                continue
            is_switch = type(node).__name__ == "Switch"
            if (args.switch and not is_switch) or (args.ca and is_switch):
                continue
            nodes += 1
            report: List[str] = []
            # (label, PortSelect, LID, GUID the line shows: a switch's node
            # GUID, a CA port's port GUID)
            selects: List[Tuple[str, int, int, int]] = []
            nguid = int(node.ninf.nodeGUID)
            if is_switch:
                port0 = node.ports[0] if node.ports else None
                if port0 is None or port0.LID is None:
                    continue        # not reached: a discovered switch
                lid: int = port0.LID
                path = _pm_path(end_port, lid)
                try:
                    cpi = umad.PerformanceGet(IBA.MADClassPortInfo, path)
                    if cpi.capabilityMask & _ALL_PORT_SELECT:
                        selects.append(("ALL", 0xFF, lid, nguid))
                except IBA.MADError as e:
                    print(f"ibtool: warning: {node.desc}: {e}",
                          file=sys.stderr)
                selects += [(str(i), i, lid, nguid)
                            for i in range(1, node.ninf.numPorts + 1)]
            else:
                for port, i in node.iterports():
                    plid, pguid = port.LID, port.portGUID
                    if (i and plid and pguid is not None and
                            sbn.topology.get(port) is not None):
                        selects.append((str(i), i, plid, int(pguid)))
            for label, sel, lid, guid in selects:
                path = _pm_path(end_port, lid)
                try:
                    pc = umad.PerformanceGet(
                        IBA.PMPortCounters(portSelect=sel), path)
                except IBA.MADError as e:
                    print(f"ibtool: warning: {node.desc} port {label}: {e}",
                          file=sys.stderr)
                    continue
                if label != "ALL":
                    ports += 1
                errs = port_errors(pc, thresholds, suppressed)
                if errs:
                    if label != "ALL":
                        bad_ports += 1
                    report.append(
                        f"   GUID 0x{guid:x} port {label}: " + " ".join(
                            f"[{n} == {v}]" for n, v in errs))
                if (args.clear or args.clear_all) and label != "ALL":
                    umad.PerformanceSet(IBA.PMPortCounters(
                        portSelect=sel, counterSelect=0xFFFF if
                        args.clear_all else 0x0FFF), path)
            if report:
                bad_nodes += 1
                # infiniband-diags names a switch by GUID, a CA by name
                name = node_name(names, nguid, node.desc)
                print(f"Errors for 0x{nguid:x} \"{name}\"" if is_switch
                      else f"Errors for \"{name}\"")
                print("\n".join(report))
    print()
    print(f"## Summary: {nodes} nodes checked, {bad_nodes} bad nodes found")
    print(f"##          {ports} ports checked, {bad_ports} ports have "
          f"errors beyond threshold")
    print("## Thresholds: " + ", ".join(
        f"{k}={v}" for k, v in sorted(thresholds.items())))
    print("## Suppressed:" + "".join(f" {s}" for s in suppressed))
    return 1 if bad_nodes else 0
