"""``ibtool ibaddr``: a port's GID and LID range, printed as
infiniband-diags' ``ibaddr`` prints them.

::

    ibtool ibaddr [-g | -l] [TARGET]          # GID and LID range of a port
"""
from __future__ import annotations

import argparse

from rdma.cli._ibopts import (add_query_options, get_end_port,
                              open_umad, smp_get, smp_path, target_words,
                              transactor)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibaddr"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibaddr`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="TARGET",
                   help="LID, -G GUID or -D route (default: local port)")
    p.add_argument("-g", "--gid_show", action="store_true",
                   help="only the GID")
    p.add_argument("-l", "--lid_show", action="store_true",
                   help="only the LID range")
    add_query_options(p)
    return p


def ibaddr(args: argparse.Namespace) -> int:
    """Run ``ibtool ibaddr``; return the exit status."""
    import rdma.IBA as IBA
    rest = target_words(args, 1)
    end_port = get_end_port(args)
    with open_umad(args, end_port) as raw:
        umad = transactor(raw, args)
        path = smp_path(rest[0] if rest else None, args, end_port, raw)
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
