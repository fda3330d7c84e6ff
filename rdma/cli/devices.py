"""``ibtool devices``: the RDMA devices, as ``ibv_devices`` lists them."""
from __future__ import annotations

import argparse

from rdma.cli._common import Subparsers, add_provider

__all__ = ["add_parser", "devices"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``devices`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    add_provider(p)
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing; exit 0 if a device exists, else 1")
    return p


def devices(args: argparse.Namespace) -> int:
    """Run ``ibtool devices``; return the exit status."""
    import rdma
    found = rdma.get_devices(args.provider)
    if args.quiet:
        return 0 if found else 1
    print(f"    {'device':<16}\t   node GUID")
    print(f"    {'------':<16}\t----------------")
    for d in found:
        print(f"    {d.name:<16}\t{int(d.node_guid):016x}")
    return 0
