"""Options shared by ``ibtool``'s verbs commands (``devices``,
``devinfo``, ``demo``)."""
from __future__ import annotations

import argparse

__all__ = ["add_provider"]


def add_provider(p: argparse.ArgumentParser) -> None:
    """``--provider``: which provider's devices the command sees."""
    p.add_argument("--provider", default=None,
                   help="provider: verbs, ucx or auto (default: "
                        "$RDMA_PROVIDER, else auto)")
