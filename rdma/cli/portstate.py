"""``ibtool ibportstate``: show a port's state, or enable, disable or
reset its link, as infiniband-diags' ``ibportstate`` does.

::

    ibtool ibportstate TARGET PORT [query|enable|disable|reset]

``enable`` sets the port's physical state to Polling, ``disable`` to
Disabled, ``reset`` does both; the port's other fields are written back as
read, with PortState "no change".  The peer port of a switch port is not
shown (infiniband-diags reaches it by a LID-then-directed route, which
ibsim does not forward).
"""
from __future__ import annotations

import argparse
from typing import Any, List

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, smp_get,
                              smp_path)

__all__ = ["add_parser", "ibportstate", "state_lines"]

_OPS = ("query", "enable", "disable", "reset")
_PHYS_POLLING = 2
_PHYS_DISABLED = 3


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``ibportstate`` to ``ibtool``."""
    p = subparsers.add_parser(
        "ibportstate", help="show, enable, disable or reset a port "
                            "(like ibportstate)")
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="the node (LID, -G GUID or -D route), the port, "
                        "then query (default), enable, disable or reset")
    add_device_options(p)
    add_target_options(p)
    p.set_defaults(func=ibportstate)
    return p


def state_lines(pi: Any, head: str, is_switch: bool) -> List[str]:
    """The PortInfo block ``ibportstate`` prints."""
    rows = [
        ("LinkState", _ibfmt.LINK_STATES.get(pi.portState, "?")),
        ("PhysLinkState", _ibfmt.PHYS_STATES.get(pi.portPhysicalState,
                                                  "?")),
        ("Lid", str(pi.LID)), ("SMLid", str(pi.masterSMLID)),
        ("LMC", str(pi.LMC)),
        ("LinkWidthSupported", _ibfmt.width_str(pi.linkWidthSupported,
                                                "ext")),
        ("LinkWidthEnabled", _ibfmt.width_str(pi.linkWidthEnabled)),
        ("LinkWidthActive", _ibfmt.width_str(pi.linkWidthActive)),
        ("LinkSpeedSupported", _ibfmt.speed_str(pi.linkSpeedSupported,
                                                "ext")),
        ("LinkSpeedEnabled", _ibfmt.speed_str(pi.linkSpeedEnabled, "ext")),
        ("LinkSpeedActive", _ibfmt.speed_str(pi.linkSpeedActive)
         if pi.linkSpeedActive else "Extended speed"),
        ("LinkSpeedExtSupported", str(pi.linkSpeedExtSupported)),
        ("LinkSpeedExtEnabled", str(pi.linkSpeedExtEnabled)),
        ("LinkSpeedExtActive", "No Extended Speed"
         if pi.linkSpeedExtActive == 0 else str(pi.linkSpeedExtActive)),
    ]
    if not is_switch:
        rows += [("Mkey", "<not displayed>"),
                 ("MkeyLeasePeriod", str(pi.MKeyLeasePeriod)),
                 ("ProtectBits", str(pi.MKeyProtectBits))]
    return [head] + _ibfmt.dotted(rows)


def ibportstate(args: argparse.Namespace) -> int:
    """Run ``ibtool ibportstate``; return the exit status."""
    import rdma.IBA as IBA
    import rdma.umad
    rest = list(args.rest)
    if len(rest) < 2 or len(rest) > 3:
        raise CmdError("give the node, the port and optionally an "
                       "operation (query, enable, disable, reset)")
    op = rest[2] if len(rest) > 2 else "query"
    if op not in _OPS:
        raise CmdError(f"unknown operation {op!r} (one of "
                       f"{', '.join(_OPS)})")
    try:
        port = int(rest[1], 0)
    except ValueError:
        raise CmdError(f"bad port number {rest[1]!r}") from None
    if not 0 <= port <= 254:
        raise CmdError(f"port {port} is out of range")
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        path = smp_path(rest[0], args, end_port, umad)
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        is_switch = ni.nodeType == 2
        if port > ni.numPorts:
            raise CmdError(f"the node has {ni.numPorts} ports, not {port}")
        pi = smp_get(umad, IBA.SMPPortInfo, path, port)
        where = "Switch" if is_switch else "CA/RT"
        head = f"# Port info: {_where(path)} port {port}"
        if op == "query":
            print(f"{where} PortInfo:")
            print("\n".join(state_lines(pi, head, is_switch)))
            return 0
        print(f"Initial {where} PortInfo:")
        print("\n".join(state_lines(pi, head, is_switch)))
        if op == "disable":
            print("Disable may be irreversible")
        steps = {"enable": [_PHYS_POLLING], "disable": [_PHYS_DISABLED],
                 "reset": [_PHYS_DISABLED, _PHYS_POLLING]}[op]
        for phys in steps:
            pi.portState = 0                # no change
            pi.portPhysicalState = phys
            pi.linkDownDefaultState = 0     # no change
            pi = umad.SubnSet(pi, path, port)
        print()
        print("After PortInfo set:")
        print("\n".join(state_lines(pi, head, is_switch)))
    return 0


def _where(path: Any) -> str:
    import rdma.path
    if isinstance(path, rdma.path.IBDRPath):
        route = ",".join(str(b) for b in bytes(path.drPath))
        return f"DR path slid {path.drSLID}; dlid {path.drDLID}; {route}"
    return f"Lid {path.DLID}"
