"""``ibtool set_nodedesc``: show or set the NodeDescription of local CAs,
as rdma-core's ``set_nodedesc.sh`` does, through the kernel's
``/sys/class/infiniband/<CA>/node_desc`` (the SMA answers NodeDescription
SMPs from it; IBA gives no SMP to set it remotely).

::

    ibtool set_nodedesc                 # print every CA's description
    ibtool set_nodedesc -C mlx5_0 "host-a mlx5_0"   # set it (root)
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, List

from rdma.cli._ibopts import CmdError
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "set_nodedesc", "SYSFS"]

#: Where the kernel lists its InfiniBand devices.
SYSFS = Path("/sys/class/infiniband")


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``set_nodedesc`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("desc", nargs="?", default=None,
                   help="the new description (at most 64 bytes of UTF-8)")
    p.add_argument("-C", "--Ca", dest="CA", default=None,
                   help="only this CA (default: all)")
    p.add_argument("-v", "--view", action="store_true",
                   help="print the descriptions (the default without DESC)")
    return p


def _cas(root: Path, only: Any) -> List[Path]:
    names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    if only is not None:
        if only not in names:
            raise CmdError(f"no CA called {only!r} in {root} (CAs: "
                           f"{', '.join(names) or 'none'})")
        names = [only]
    if not names:
        raise CmdError(f"no RDMA device in {root}")
    return [root / n for n in names]


def set_nodedesc(args: argparse.Namespace) -> int:
    """Run ``ibtool set_nodedesc``; return the exit status."""
    root = Path(os.environ.get("RDMA_SYSFS_INFINIBAND", SYSFS))
    cas = _cas(root, args.CA)
    if args.desc is not None:
        raw = args.desc.encode()
        if len(raw) > 64:
            raise CmdError(f"the description is {len(raw)} bytes; "
                           f"NodeDescription holds 64")
        for ca in cas:
            try:
                (ca / "node_desc").write_bytes(raw)
            except OSError as e:
                raise CmdError(f"cannot set {ca / 'node_desc'}: "
                               f"{e.strerror}") from None
    if args.desc is None or args.view:
        for ca in cas:
            text = (ca / "node_desc").read_text(errors="replace").rstrip()
            print(f"{ca.name}: {text}")
    return 0
