"""``ibtool sminfo``: the subnet manager's SMInfo, printed as
infiniband-diags' ``sminfo`` prints it.

::

    ibtool sminfo [TARGET]      # the SM (default: the local port's SM LID)
"""
from __future__ import annotations

import argparse

from rdma.cli._ibopts import (CmdError, add_query_options, get_end_port,
                              open_umad, smp_get, smp_path, target_words,
                              transactor)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "sminfo"]

SM_STATES = {0: "SMINFO_NOTACT", 1: "SMINFO_DISCOVER", 2: "SMINFO_STANDBY",
             3: "SMINFO_MASTER"}


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``sminfo`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="the SM's LID, -G GUID or -D route (default: the "
                        "local port's SM LID)")
    add_query_options(p)
    return p


def sminfo(args: argparse.Namespace) -> int:
    """Run ``ibtool sminfo``; return the exit status."""
    import rdma.IBA as IBA
    rest = target_words(args, 1)
    end_port = get_end_port(args)
    target = rest[0] if rest else None
    if target is None:
        if not end_port.sm_lid:
            raise CmdError(f"{end_port} knows no SM LID (no SM on the "
                           f"subnet?): give the SM's LID")
        target = str(end_port.sm_lid)
        args.addr_direct = args.addr_guid = False
    with open_umad(args, end_port) as raw:
        path = smp_path(target, args, end_port, raw)
        si = smp_get(transactor(raw, args), IBA.SMPSMInfo, path)
    lid = getattr(path, "DLID", 0)
    if lid in (0, 0xFFFF):
        lid = 0
    print(f"sminfo: sm lid {lid} sm guid 0x{int(si.GUID):x}, activity "
          f"count {si.actCount} priority {si.priority} state {si.SMState} "
          f"{SM_STATES.get(si.SMState, '???')}")
    return 0
