"""``ibtool saquery``: query the Subnet Administrator like infiniband-diags'
``saquery``, for the records path tools need.

::

    ibtool saquery PR --src-to-dst 1:3        # PathRecord by LIDs
    ibtool saquery PR --sgid-to-dgid A-B      # PathRecord by GIDs
    ibtool saquery NR [lid]                   # NodeRecords
    ibtool saquery PIR [lid[/port]]           # PortInfoRecords
    ibtool saquery SR                         # ServiceRecords
    ibtool saquery MCMR [--mgid G] [--mlid L] # MCMemberRecords (also -g)
    ibtool saquery LR [lid[/port]] [lid[/port]]  # LinkRecords
    ibtool saquery --json ...                 # one JSON list of records
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, List, Optional, Tuple

__all__ = ["add_parser", "saquery"]

_TYPES = {"PR": "PathRecord", "NR": "NodeRecord", "PIR": "PortInfoRecord",
          "SR": "ServiceRecord", "MCMR": "MCMemberRecord", "LR": "LinkRecord"}
_ALIASES = {"PATHRECORD": "PR", "NODERECORD": "NR", "PORTINFORECORD": "PIR",
            "SERVICERECORD": "SR", "MCMEMBERRECORD": "MCMR",
            "LINKRECORD": "LR"}


def add_parser(subparsers: Any, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``saquery`` to the ``rdma`` command's subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Query SA records: " + ", ".join(
            f"{k} ({v})" for k, v in _TYPES.items()))
    p.add_argument("query", nargs="?", default="NR", metavar="TYPE",
                   help="PR, NR, PIR, SR, MCMR or LR (default NR)")
    p.add_argument("selector", nargs="*",
                   help="NR: lid; PIR: lid[/port]; LR: from[/port] "
                        "[to[/port]]")
    p.add_argument("-C", "--Ca", dest="ca", default=None,
                   help="the CA to use (default: the first active port)")
    p.add_argument("-P", "--Port", dest="port", type=int, default=None,
                   help="the port of the CA")
    p.add_argument("-p", dest="force", action="store_const", const="PR",
                   help="query PathRecords")
    p.add_argument("-g", dest="force", action="store_const", const="MCMR",
                   help="query MCMemberRecords")
    p.add_argument("-S", dest="force", action="store_const", const="SR",
                   help="query ServiceRecords")
    p.add_argument("-x", dest="force", action="store_const", const="LR",
                   help="query LinkRecords")
    p.add_argument("--src-to-dst", metavar="SLID:DLID",
                   help="PathRecord between two LIDs")
    p.add_argument("--sgid-to-dgid", metavar="SGID-DGID",
                   help="PathRecord between two GIDs")
    p.add_argument("--slid", type=_int, help="PathRecord SLID")
    p.add_argument("--dlid", type=_int, help="PathRecord DLID")
    p.add_argument("--sgid", help="PathRecord SGID")
    p.add_argument("--dgid", help="PathRecord DGID")
    p.add_argument("--pkey", type=_int, help="P_Key (PR, MCMR)")
    p.add_argument("--sl", type=_int, help="SL (PR)")
    p.add_argument("--mgid", help="MCMemberRecord MGID")
    p.add_argument("--mlid", type=_int, help="MCMemberRecord MLID")
    p.add_argument("--service-id", type=_int, help="ServiceRecord ID")
    p.add_argument("--json", action="store_true",
                   help="print the records as one JSON list")
    p.add_argument("--timeout", type=int, default=1000, metavar="MS",
                   help="wait for each reply (default 1000 ms)")
    p.add_argument("--retries", type=int, default=2,
                   help="re-sends after a timeout (default 2)")
    return p


def _int(text: str) -> int:
    return int(text, 0)


def _lid_port(text: str) -> Tuple[Optional[int], Optional[int]]:
    lid, _, port = text.partition("/")
    return (int(lid, 0) if lid else None, int(port, 0) if port else None)


def _query(args: argparse.Namespace) -> Tuple[str, Any, bool]:
    """Return (type, record to send, use GetTable)."""
    from rdma import _mad as m
    kind = (args.force or args.query).upper()
    kind = _ALIASES.get(kind, kind)
    sel = list(args.selector)
    if (args.force and args.query
            and args.query.upper() not in set(_TYPES) | set(_ALIASES)):
        sel.insert(0, args.query)     # "-g 0xc000": the operand is a value
        kind = args.force
    if kind not in _TYPES:
        raise ValueError(f"unknown query {kind!r} (use one of "
                         f"{', '.join(_TYPES)})")
    if kind == "PR":
        rec = m.SAPathRecord()
        if args.src_to_dst:
            s, _, d = args.src_to_dst.partition(":")
            if not d:
                raise ValueError("--src-to-dst needs SLID:DLID")
            rec.SLID, rec.DLID = int(s, 0), int(d, 0)
        if args.sgid_to_dgid:
            s, sep, d = args.sgid_to_dgid.partition("-")
            if not sep:
                raise ValueError("--sgid-to-dgid needs SGID-DGID")
            rec.SGID, rec.DGID = s, d
        for opt, field in (("slid", "SLID"), ("dlid", "DLID"),
                           ("sgid", "SGID"), ("dgid", "DGID"),
                           ("pkey", "PKey"), ("sl", "SL")):
            v = getattr(args, opt)
            if v is not None:
                setattr(rec, field, v)
        return kind, rec, True
    if kind == "NR":
        rec = m.SANodeRecord()
        if sel:
            rec.LID = int(sel[0], 0)
        return kind, rec, True
    if kind == "PIR":
        rec = m.SAPortInfoRecord()
        if sel:
            lid, port = _lid_port(sel[0])
            if lid is not None:
                rec.endportLID = lid
            if port is not None:
                rec.portNum = port
        return kind, rec, True
    if kind == "SR":
        rec = m.SAServiceRecord()
        if args.service_id is not None:
            rec.serviceID = args.service_id
        return kind, rec, True
    if kind == "MCMR":
        rec = m.SAMCMemberRecord()
        if args.mgid:
            rec.MGID = args.mgid
        if args.mlid is not None:
            rec.MLID = args.mlid
        if args.pkey is not None:
            rec.PKey = args.pkey
        return kind, rec, True
    rec = m.SALinkRecord()
    if sel:
        lid, port = _lid_port(sel[0])
        if lid is not None:
            rec.fromLID = lid
        if port is not None:
            rec.fromPort = port
    if len(sel) > 1:
        lid, port = _lid_port(sel[1])
        if lid is not None:
            rec.toLID = lid
        if port is not None:
            rec.toPort = port
    return kind, rec, True


def saquery(args: argparse.Namespace) -> int:
    """Run ``ibtool saquery``; return the exit code."""
    import rdma.umad
    from rdma.cli._common import check_end_port_name
    kind, rec, table = _query(args)
    name = args.ca
    if name is not None and args.port is not None:
        name = f"{name}/{args.port}"
    if name is not None:
        check_end_port_name(name)
    end_port = rdma.umad.get_end_port(name)
    with rdma.umad.get_umad(end_port, timeout_ms=args.timeout,
                            retries=args.retries) as umad:
        records: List[Any] = (umad.SubnAdmGetTable(rec) if table
                              else [umad.SubnAdmGet(rec)])
    if args.json:
        json.dump([dict(type=_TYPES[kind], **r.to_dict()) for r in records],
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for r in records:
            sys.stdout.write(f"{type(r).__name__[2:]} dump:\n")
            r.printer(sys.stdout, header=False, format="dotted")
    return 0
