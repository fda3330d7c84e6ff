"""``ibtool smpdump``: any SMP attribute, read with a SubnGet and dumped
as raw bytes, as infiniband-diags' ``smpdump`` (and python-rdma's
``ibtool smpdump``) do.

::

    ibtool smpdump [-s] TARGET ATTR [MOD]   # TARGET: a LID, or -D ROUTE

The 64 bytes of the reply's data are printed as 16-bit hex words, eight
to a line (``-s``: as text, up to the first NUL), then ``SMP status:
0x...`` when the reply's status is not 0 (a directed-route reply always
has its direction bit, 0x8000, set).
"""
from __future__ import annotations

import argparse
from typing import Dict, List

from rdma.binstruct import BinStruct, F
from rdma.cli._ibopts import (CmdError, add_device_options,
                              add_target_options, get_end_port, smp_path)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "smpdump", "raw_attribute", "hex_lines"]

_RAW: Dict[int, type] = {}


def raw_attribute(attr_id: int) -> type:
    """A payload class for SMP attribute *attr_id* whose 64 bytes stay
    uninterpreted (its ``data`` row), made once per attribute ID.

    :raises CmdError: if *attr_id* is not a 16-bit attribute ID."""
    if not 0 < attr_id <= 0xFFFF:
        raise CmdError(f"attribute ID {attr_id:#x} is not 1..0xffff")
    cls = _RAW.get(attr_id)
    if cls is None:
        cls = type(f"SMPRaw_{attr_id:04x}", (BinStruct,), {
            "__doc__": f"SMP attribute {attr_id:#06x} as 64 raw bytes.",
            "MAD_LENGTH": 64, "MAD_ATTRIBUTE_ID": attr_id,
            "METHODS": ("SubnGet",), "FIELDS": [F("data", 8, count=64)]})
        _RAW[attr_id] = cls
    return cls


def hex_lines(data: bytes) -> List[str]:
    """*data* as big-endian 16-bit hex words, eight to a line."""
    words = [data[i:i + 2].hex() for i in range(0, len(data), 2)]
    return [" ".join(words[i:i + 8]) for i in range(0, len(words), 8)]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``smpdump`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    p.add_argument("rest", nargs="*", metavar="ARG",
                   help="the target (LID, or -D route), the attribute ID "
                        "and its modifier (default 0)")
    p.add_argument("-s", "--string", action="store_true",
                   help="print the data as text")
    p.add_argument("-t", "--timeout", type=int, default=None, metavar="MS",
                   help="timeout of the SMP in ms")
    add_device_options(p)
    add_target_options(p)
    return p


def _number(text: str, what: str, top: int) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise CmdError(f"bad {what} {text!r}") from None
    if not 0 <= v <= top:
        raise CmdError(f"{what} {text} is out of range 0..{top:#x}")
    return v


def smpdump(args: argparse.Namespace) -> int:
    """Run ``ibtool smpdump``; return the exit status."""
    import rdma.umad
    if len(args.rest) not in (2, 3):
        raise CmdError("give the target, the attribute ID and optionally "
                       "its modifier")
    attr = raw_attribute(_number(args.rest[1], "attribute ID", 0xFFFF))
    amod = _number(args.rest[2], "attribute modifier", 0xFFFFFFFF) \
        if len(args.rest) > 2 else 0
    end_port = get_end_port(args)
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    with rdma.umad.UMAD(end_port, **kw) as umad:
        path = smp_path(args.rest[0], args, end_port, umad)
        value = umad.SubnGet(attr, path, amod)
        fmt = umad.reply_fmt
        status = int(fmt.status) | (int(getattr(fmt, "D", 0)) << 15)
    data = bytes(value.data)
    if args.string:
        print(data.split(b"\0", 1)[0].decode("utf-8", "replace"))
    else:
        print("\n".join(hex_lines(data)))
    if status:
        print(f"SMP status: {status:#06x}")
    return 0
