"""``ibtool ibportstate``: show a port's state, or change it with a
PortInfo SubnSet, as infiniband-diags' ``ibportstate`` does.

::

    ibtool ibportstate TARGET PORT [OP [VALUE]]...

One state operation at most: ``query`` (the default), ``enable`` /
``on`` and ``reset`` (PhysPortState Polling; ``on`` only from Disabled),
``disable`` / ``off`` (Disabled), ``down``, ``arm``, ``active``
(PortState).  Any number of field settings: ``speed N``
(LinkSpeedEnabled, 0..15), ``espeed N`` (LinkSpeedExtEnabled, 0..31),
``width N`` (LinkWidthEnabled, 0..31 or 255), ``vls N``
(OperationalVLs, 1..5), ``mtu N`` (NeighborMTU, 1..5), ``lid``,
``smlid`` (1..0xBFFF), ``lmc`` (0..7), ``mkey``, ``mkeylease``
(0..0xFFFF), ``mkeyprot`` (0..3; the M_Key fields only on a CA port or
a switch's port 0).  The PortInfo is read, the fields are changed
(PortState and PhysPortState "no change" unless an operation sets them;
a LID or SM LID of 0 becomes 0x1234, which the SMA accepts), it is
written back, and the SMA's answer is shown.  ``fdr10`` needs
Mellanox's vendor PortInfo and is refused.  The peer port of a switch
port is not shown (infiniband-diags reaches it by a LID-then-directed
route, which ibsim does not forward).
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional, Tuple

from rdma.cli import _ibfmt
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, smp_get,
                              smp_path)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibportstate", "state_lines", "parse_ops",
           "apply_ops"]

#: Operations without a value; one at most.
_STATE_OPS = ("query", "enable", "disable", "on", "off", "reset", "down",
              "arm", "active")
#: Operations with a value: (PortInfo field, lowest, highest).
_VALUE_OPS: Dict[str, Tuple[str, int, int]] = {
    "speed": ("linkSpeedEnabled", 0, 15),
    "espeed": ("linkSpeedExtEnabled", 0, 31),
    "width": ("linkWidthEnabled", 0, 255),
    "vls": ("operationalVLs", 1, 5),
    "mtu": ("neighborMTU", 1, 5),
    "lid": ("LID", 1, 0xBFFF),
    "smlid": ("masterSMLID", 1, 0xBFFF),
    "lmc": ("LMC", 0, 7),
    "mkey": ("MKey", 0, (1 << 64) - 1),
    "mkeylease": ("MKeyLeasePeriod", 0, 0xFFFF),
    "mkeyprot": ("MKeyProtectBits", 0, 3),
}
_MKEY_OPS = ("mkey", "mkeylease", "mkeyprot")
_PHYS_POLLING = 2
_PHYS_DISABLED = 3
#: PortState values of down, arm, active.
_PORT_STATES = {"down": 1, "arm": 3, "active": 4}
#: A LID the SMA accepts where the port has none yet (infiniband-diags'
#: choice).
_PLACEHOLDER_LID = 0x1234


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibportstate`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="the node (LID, -G GUID or -D route), the port, "
                        "then query (default), enable, disable, on, off, "
                        "reset, down, arm or active, and settings: speed, "
                        "espeed, width, vls, mtu, lid, smlid, lmc, mkey, "
                        "mkeylease, mkeyprot with a value each")
    p.add_argument("-K", "--show_keys", action="store_true",
                   help="show the M_Key")
    add_device_options(p)
    add_target_options(p)
    return p


def state_lines(pi: Any, head: str, is_switch: bool, port: int = 1,
                show_keys: bool = False) -> List[str]:
    """The PortInfo block ``ibportstate`` prints (the M_Key fields for a
    CA port or a switch's port 0)."""
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
        ("LinkSpeedExtSupported",
         _ibfmt.ext_speed_str(pi.linkSpeedExtSupported)),
        ("LinkSpeedExtEnabled", _ibfmt.ext_speed_str(pi.linkSpeedExtEnabled)),
        ("LinkSpeedExtActive", "No Extended Speed"
         if pi.linkSpeedExtActive == 0
         else _ibfmt.ext_speed_str(pi.linkSpeedExtActive)),
    ]
    if not is_switch or port == 0:
        rows += [("Mkey", f"0x{pi.MKey:016x}" if show_keys
                  else "<not displayed>"),
                 ("MkeyLeasePeriod", str(pi.MKeyLeasePeriod)),
                 ("ProtectBits", str(pi.MKeyProtectBits))]
    return [head] + _ibfmt.dotted(rows)


def parse_ops(words: List[str]) -> Tuple[str, Dict[str, int]]:
    """``(state operation, {value operation: value})`` from the words
    after the port number.

    :raises CmdError: naming an unknown operation, a missing or bad value,
        or a second state operation."""
    op: Optional[str] = None
    values: Dict[str, int] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w in _STATE_OPS:
            if op is not None:
                raise CmdError(f"{w}: only one of {', '.join(_STATE_OPS)} "
                               f"can be given (already {op})")
            op = w
        elif w == "fdr10":
            raise CmdError("fdr10 needs Mellanox's extended PortInfo, "
                           "which ibtool does not implement")
        elif w in _VALUE_OPS:
            i += 1
            if i >= len(words):
                raise CmdError(f"{w} needs a value")
            try:
                v = int(words[i], 0)
            except ValueError:
                raise CmdError(f"bad {w} value {words[i]!r}") from None
            _, lo, hi = _VALUE_OPS[w]
            bad = not lo <= v <= hi or (w == "width" and 31 < v < 255)
            if bad:
                allowed = "0..31 or 255" if w == "width" else \
                    f"{lo:#x}..{hi:#x}" if hi > 255 else f"{lo}..{hi}"
                raise CmdError(f"invalid {w} value {words[i]} (allowed: "
                               f"{allowed})")
            values[w] = v
        else:
            raise CmdError(f"unknown operation {w!r} (one of "
                           f"{', '.join(_STATE_OPS)}, or "
                           f"{', '.join(_VALUE_OPS)} with a value)")
        i += 1
    return op or "query", values


def apply_ops(pi: Any, op: str, values: Dict[str, int]) -> Any:
    """Change the PortInfo *pi* (as read) into the one to SubnSet for
    state operation *op* and the field *values*; return it."""
    if not values.get("lid") and pi.LID in (0, 0xFFFF):
        pi.LID = _PLACEHOLDER_LID
    if not values.get("smlid") and pi.masterSMLID in (0, 0xFFFF):
        pi.masterSMLID = _PLACEHOLDER_LID
    pi.portState = 0                    # no change
    pi.portPhysicalState = 0            # no change
    if op in ("enable", "on", "reset"):
        pi.portPhysicalState = _PHYS_POLLING
    elif op in ("disable", "off"):
        pi.portPhysicalState = _PHYS_DISABLED
    elif op in _PORT_STATES:
        pi.portState = _PORT_STATES[op]
    # Enabled speeds and width: 0 is "no change" unless given.
    pi.linkSpeedEnabled = values.get("speed", 0)
    pi.linkSpeedExtEnabled = values.get("espeed", 0)
    pi.linkWidthEnabled = values.get("width", 0)
    for name in ("vls", "mtu", "lid", "smlid", "lmc", "mkey", "mkeylease",
                 "mkeyprot"):
        if name in values:
            setattr(pi, _VALUE_OPS[name][0], values[name])
    return pi


def ibportstate(args: argparse.Namespace) -> int:
    """Run ``ibtool ibportstate``; return the exit status."""
    import rdma.IBA as IBA
    import rdma.umad
    rest = list(args.rest)
    if len(rest) < 2:
        raise CmdError("give the node, the port and optionally operations "
                       "(query, enable, disable, reset, speed N...)")
    op, values = parse_ops(rest[2:])
    try:
        port = int(rest[1], 0)
    except ValueError:
        raise CmdError(f"bad port number {rest[1]!r}") from None
    if not 0 <= port <= 254:
        raise CmdError(f"port {port} is out of range")
    changing = op != "query" or bool(values)
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        path = smp_path(rest[0], args, end_port, umad)
        ni = smp_get(umad, IBA.SMPNodeInfo, path)
        is_switch = ni.nodeType == 2
        if port > ni.numPorts:
            raise CmdError(f"the node has {ni.numPorts} ports, not {port}")
        if is_switch and port != 0 and any(k in values for k in _MKEY_OPS):
            raise CmdError("the M_Key fields can only be set on a CA port "
                           "or a switch's port 0")
        where = "Switch" if is_switch else "CA/RT"
        print(f"{'Initial ' if changing else ''}{where} PortInfo:")
        pi = smp_get(umad, IBA.SMPPortInfo, path, port)
        espeed = bool(pi.capabilityMask & IBA.isExtendedSpeedsSupported)
        head = f"# Port info: {_where(path)} port {port}"
        keys = getattr(args, "show_keys", False)
        print("\n".join(state_lines(pi, head, is_switch, port, keys)))
        if not changing:
            return 0
        if op == "on" and pi.portPhysicalState != _PHYS_DISABLED:
            print("Port is already in enable state")
            return 0
        if op in ("disable", "off"):
            print("Disable may be irreversible")
        pi = apply_ops(pi, op, values)
        amod = port | (1 << 31 if espeed else 0)
        pi = umad.SubnSet(pi, path, amod)
        print()
        print("After PortInfo set:")
        print("\n".join(state_lines(pi, head, is_switch, port, keys)))
    return 0


def _where(path: Any) -> str:
    import rdma.path
    if isinstance(path, rdma.path.IBDRPath):
        route = ",".join(str(b) for b in bytes(path.drPath))
        return f"DR path slid {path.drSLID}; dlid {path.drDLID}; {route}"
    return f"Lid {path.DLID}"
