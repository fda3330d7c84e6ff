"""Options and checks shared by ``ibtool``'s commands (``--provider`` of
``devices``, ``devinfo`` and ``demo``; device names)."""
from __future__ import annotations

import argparse
from typing import Optional, TypeAlias

__all__ = ["Subparsers", "add_provider", "check_end_port_name"]

#: What each command's ``add_parser`` is given: ``ibtool``'s sub-parsers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_provider(p: argparse.ArgumentParser) -> None:
    """``--provider``: which provider's devices the command sees."""
    p.add_argument("--provider", default=None,
                   help="provider: verbs, ucx or auto (default: "
                        "$RDMA_PROVIDER, else auto)")


def check_end_port_name(name: str, provider: Optional[str] = None) -> None:
    """Raise :exc:`ValueError` (``ibtool``: bad usage, exit 2) naming
    *name* as given when it matches none of the devices or ports there
    are.  Nothing is raised when there is no device at all (the command
    reports that itself, as a runtime failure) or when *name* is found."""
    import rdma
    try:
        rdma.get_end_port(name, provider=provider)
    except rdma.RDMAError as e:
        try:
            devices = rdma.get_devices(provider)
        except (rdma.RDMAError, ValueError):
            return
        if devices:
            raise ValueError(str(e)) from None
