"""``ibtool saquery``: query the Subnet Administrator and print what
infiniband-diags' ``saquery`` prints, with its query names and options.

::

    ibtool saquery                        # every NodeRecord
    ibtool saquery NR 4 | Hca3            # NodeRecord of a LID or a name
    ibtool saquery PIR [lid/port/options] # PortInfoRecords (also SL2VL,
                                          # PKTR, VLAR, LFTR, MFTR, GIR,
                                          # SWIR, SMIR, IIR, LR, SR, MCMR)
    ibtool saquery -p --src-to-dst 1:Hca3 # PathRecords
    ibtool saquery -N|-L|-l|-G NAME, -O LID, -U GUID, -D   # node lookups
    ibtool saquery -s | -g | -m [MLID] | -c | -x | -S | -I
    ibtool saquery --json ...             # the same fields as JSON
    ibtool saquery --dotted ...           # python-rdma's dotted dumps

Each record prints as infiniband-diags' ``saquery`` prints it
(:mod:`rdma.cli._safmt`); ``--json`` gives one list of the same records
under the same field names.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from rdma.cli._ibopts import (CmdError, add_node_name_map, get_end_port,
                              load_node_name_map, node_name)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "saquery", "QUERIES"]

#: Query names as ``saquery --help`` lists them: name -> (alias, what its
#: argument is).
QUERIES: Dict[str, Tuple[str, str]] = {
    "ClassPortInfo": ("CPI", ""),
    "NodeRecord": ("NR", "[lid]"),
    "PortInfoRecord": ("PIR", "[[lid]/[port]/[options]]"),
    "SL2VLTableRecord": ("SL2VL", "[[lid]/[in_port]/[out_port]]"),
    "PKeyTableRecord": ("PKTR", "[[lid]/[port]/[block]]"),
    "VLArbitrationTableRecord": ("VLAR", "[[lid]/[port]/[block]]"),
    "InformInfoRecord": ("IIR", "[subscriber_gid]"),
    "LinkRecord": ("LR", "[[from_lid]/[from_port]] [[to_lid]/[to_port]]"),
    "ServiceRecord": ("SR", ""),
    "PathRecord": ("PR", ""),
    "MCMemberRecord": ("MCMR", ""),
    "LFTRecord": ("LFTR", "[[lid]/[block]]"),
    "MFTRecord": ("MFTR", "[[mlid]/[position]/[block]]"),
    "GUIDInfoRecord": ("GIR", "[[lid]/[block]]"),
    "SwitchInfoRecord": ("SWIR", "[lid]"),
    "SMInfoRecord": ("SMIR", "[lid]"),
}
_BY_NAME = {k.upper(): a for k, (a, _) in QUERIES.items()}
_BY_NAME.update({a: a for a, _ in QUERIES.values()})

#: PortInfo:CapabilityMask bits of ``-s``: IsSM, IsSMdisabled.
_IS_SM, _IS_SM_DISABLED = 1 << 1, 1 << 10


def _epilog() -> str:
    lines = ["query names (and aliases):"]
    lines += [f"  {k} ({a}) {u}".rstrip() for k, (a, u) in QUERIES.items()]
    lines.append("NodeRecords are queried by default.")
    return "\n".join(lines)


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``saquery`` to the ``ibtool`` command's subparsers."""
    p = subparsers.add_parser(
        name, help=help, epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Query the subnet administrator's records and print "
                    "them as infiniband-diags' saquery does.")
    p.add_argument("rest", nargs="*", metavar="[query-name] [name|lid|guid]",
                   help="the query (default NodeRecord) and its argument")
    _add_commands(p)
    _add_record_options(p)
    add_node_name_map(p)
    p.add_argument("--smkey", type=_int, default=0, metavar="VAL",
                   help="the SM_Key of the queries (default 0, untrusted)")
    p.add_argument("-K", "--show_keys", action="store_true",
                   help="print keys (ServiceKey, InformInfo QPN)")
    p.add_argument("-C", "--Ca", dest="CA", default=None,
                   help="the RDMA device to use")
    p.add_argument("-P", "--Port", dest="port", default=None,
                   help="the port of the device")
    p.add_argument("-t", "--timeout", type=int, default=1000, metavar="MS",
                   help="wait for each reply (default 1000 ms)")
    p.add_argument("--retries", type=int, default=2,
                   help="re-sends after a timeout (default 2)")
    for opt, long in (("-e", "--errors"), ("-v", "--verbose"),
                      ("-d", "--debug")):
        p.add_argument(opt, long, action="count", default=0,
                       help="accepted for infiniband-diags' sake; no effect")
    p.add_argument("--json", action="store_true",
                   help="print the records as one JSON list, under the "
                        "names the text uses")
    p.add_argument("--dotted", action="store_true",
                   help="print records in python-rdma's dotted style "
                        "(nodeInfo.NodeType.....1)")
    return p


def _add_commands(p: argparse.ArgumentParser) -> None:
    def flag(short: str, long: str, dest: str, const: str, text: str,
             ) -> None:
        p.add_argument(short, long, dest=dest, action="store_const",
                       const=const, help=text)
    flag("-p", "--p", "kind", "PR", "get PathRecord info")
    flag("-S", "--S", "kind", "SR", "get ServiceRecord info")
    flag("-I", "--I", "kind", "IIR", "get InformInfoRecord info")
    flag("-x", "--x", "kind", "LR", "get LinkRecord info")
    flag("-N", "--N", "sa_command", "N", "get NodeRecord info")
    flag("-L", "--L", "sa_command", "L", "the LIDs of the name given")
    flag("-l", "--l", "sa_command", "l", "the unique LID of the name given")
    flag("-G", "--G", "sa_command", "G", "the port GUIDs of the name given")
    flag("-O", "--O", "sa_command", "O", "the name of the LID given")
    flag("-U", "--U", "sa_command", "U", "the name of the port GUID given")
    flag("-D", "--list", "sa_command", "D", "the node descriptions of the CAs")
    flag("-s", "--s", "sa_command", "s", "the PortInfoRecords with the IsSM "
         "or IsSMdisabled capability bit on")
    flag("-g", "--g", "sa_command", "g", "get multicast group info")
    flag("-m", "--m", "sa_command", "m", "get multicast member info (only "
         "the member GIDs of one group with an MLID: -m 0xC000)")
    flag("-c", "--c", "sa_command", "c", "get the SA's ClassPortInfo")
    p.add_argument("--src-to-dst", metavar="SRC:DST",
                   help="PathRecords from SRC to DST (node names or LIDs)")
    p.add_argument("--sgid-to-dgid", metavar="SGID-DGID",
                   help="PathRecords between two GIDs (IPv6 format)")


#: Options that select records: (flags, dest, type, help).
_RECORD_OPTS: List[Tuple[Tuple[str, ...], str, Callable[[str], Any], str]] = [
    (("--slid",), "slid", int, "source LID (PathRecord)"),
    (("--dlid",), "dlid", int, "destination LID (PathRecord)"),
    (("--mlid",), "mlid", int, "multicast LID (MCMemberRecord)"),
    (("--sgid",), "sgid", str, "source GID (PathRecord)"),
    (("--dgid",), "dgid", str, "destination GID (PathRecord)"),
    (("--gid",), "gid", str, "port GID (MCMemberRecord)"),
    (("--mgid",), "mgid", str, "multicast GID (MCMemberRecord)"),
    (("-r", "--reversible"), "reversible", int, "reversible (PathRecord)"),
    (("-n", "--numb_path"), "numb_path", int, "number of paths "
     "(PathRecord)"),
    (("--pkey",), "pkey", int, "P_Key (PathRecord, MCMemberRecord)"),
    (("-Q", "--qos_class"), "qos_class", int, "QoS class (PathRecord)"),
    (("--sl",), "sl", int, "service level (PathRecord, MCMemberRecord)"),
    (("-M", "--mtu"), "mtu", int, "MTU and its selector (PathRecord, "
     "MCMemberRecord)"),
    (("-R", "--rate"), "rate", int, "rate and its selector"),
    (("--pkt_lifetime",), "pkt_life", int, "packet lifetime and its "
     "selector"),
    (("-q", "--qkey"), "qkey", int, "Q_Key (MCMemberRecord)"),
    (("-T", "--tclass"), "tclass", int, "traffic class"),
    (("-F", "--flow_label"), "flow_label", int, "flow label"),
    (("-H", "--hop_limit"), "hop_limit", int, "hop limit"),
    (("--scope",), "scope", int, "scope (MCMemberRecord)"),
    (("-J", "--join_state"), "join_state", int, "join state "
     "(MCMemberRecord)"),
    (("-X", "--proxy_join"), "proxy_join", int, "proxy join "
     "(MCMemberRecord)"),
    (("--service_id", "--service-id"), "service_id", int, "ServiceID "
     "(PathRecord)"),
]


def _add_record_options(p: argparse.ArgumentParser) -> None:
    for flags, dest, kind, text in _RECORD_OPTS:
        p.add_argument(*flags, dest=dest, default=None, help=text,
                       metavar="VAL", type=_int if kind is int else _gid)


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")


def _gid(text: str) -> str:
    try:
        socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a GID (IPv6 "
                                         f"format)") from None
    return text


# ---- the session: an SA handle, names, output


class _Session:
    """What one run of ``saquery`` needs: the umad, the options, the
    node name map and the output (text, JSON or dotted)."""

    def __init__(self, umad: Any, args: argparse.Namespace) -> None:
        self.umad = umad
        self.args = args
        self.names = load_node_name_map(args.node_name_map)
        self.out: List[Any] = []
        self._nodes: Optional[List[Any]] = None

    def table(self, rec: Any, amod: int = 0) -> List[Any]:
        """SubnAdmGetTable of *rec* (a ComponentMask or a record)."""
        path = self.umad.sa_path
        if self.args.smkey:
            path = path.copy() if hasattr(path, "copy") else path
            path.SMKey = self.args.smkey
        return list(self.umad.SubnAdmGetTable(rec, path, amod))

    def nodes(self) -> List[Any]:
        """Every NodeRecord (cached)."""
        if self._nodes is None:
            from rdma import IBA
            self._nodes = self.table(IBA.SANodeRecord())
        return self._nodes

    def name(self, rec: Any) -> str:
        """A NodeRecord's name: the node name map's, else its
        description."""
        from rdma.cli._safmt import node_desc
        return node_name(self.names, int(rec.nodeInfo.nodeGUID),
                         node_desc(rec))

    def lid(self, text: str) -> int:
        """A LID given as a number or a node's name (as saquery: a word
        that starts with a letter is a NodeDescription)."""
        from rdma.cli._safmt import node_desc
        if text[:1].isalpha():
            for rec in self.nodes():
                if node_desc(rec) == text:
                    lid: int = rec.LID
                    return lid
            raise CmdError(f"no node is named {text!r}")
        try:
            v = int(text, 0)
        except ValueError:
            raise CmdError(f"invalid LID {text!r}") from None
        if not 0 < v <= 0xFFFF:
            raise CmdError(f"invalid LID {text!r}")
        return v

    def emit(self, dump: Any, rec: Any = None) -> None:
        """Print one record now (text) or keep it (JSON)."""
        if self.args.json:
            self.out.append(dump.data)
        elif self.args.dotted and rec is not None:
            sys.stdout.write(f"{type(rec).__name__[2:]} dump:\n")
            rec.printer(sys.stdout, header=False, format="dotted")
        else:
            sys.stdout.write("".join(line + "\n" for line in dump.lines))

    def text(self, line: str) -> None:
        """A line that is not a record (headers of ``-s``, ``-D``...)."""
        if not self.args.json:
            sys.stdout.write(line + "\n")

    def finish(self) -> None:
        if self.args.json:
            json.dump(self.out, sys.stdout, indent=1)
            sys.stdout.write("\n")


def _slashes(text: str, n: int) -> List[Optional[str]]:
    """``a/b/c`` cut into *n* parts (None for a missing or empty one)."""
    parts: List[Optional[str]] = [w or None for w in text.split("/", n - 1)]
    return parts + [None] * (n - len(parts))


def _num(text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        raise CmdError(f"invalid number {text!r}") from None


def _lid_parts(s: _Session, word: Optional[str], n: int,
               ) -> Tuple[Optional[int], List[Optional[int]]]:
    """``lid[/a[/b]]``: the LID (a name resolved; None if not given) and
    the numbers after it."""
    if word is None:
        return None, [None] * (n - 1)
    parts = _slashes(word, n)
    lid = s.lid(parts[0]) if parts[0] is not None else None
    return lid, [_num(p) for p in parts[1:]]


def _set(cm: Any, **fields: Optional[int]) -> None:
    """Set (and mark as components) the fields given, skip the Nones."""
    for k, v in fields.items():
        if v is not None:
            setattr(cm, k, v)


# ---- one function per query: the record to ask for, then the dumps


def _q_simple(kind: str) -> Callable[[_Session, List[str]], None]:
    """A query whose argument is ``lid/a/b`` selecting fields of
    ``record`` (kind -> record class, its fields, dump)."""
    from rdma import IBA
    from rdma.cli import _safmt as f
    cls, fields = {
        "PIR": (IBA.SAPortInfoRecord, ("endportLID", "portNum",
                                       "reserved_24")),
        "SL2VL": (IBA.SASLToVLMappingTableRecord,
                  ("LID", "inputPortNum", "outputPortNum")),
        "PKTR": (IBA.SAPKeyTableRecord, ("LID", "portNum", "blockNum")),
        "VLAR": (IBA.SAVLArbitrationTableRecord,
                 ("LID", "outputPortNum", "blockNum")),
        "LFTR": (IBA.SALinearForwardingTableRecord, ("LID", "blockNum")),
        "MFTR": (IBA.SAMulticastForwardingTableRecord,
                 ("LID", "position", "blockNum")),
        "GIR": (IBA.SAGUIDInfoRecord, ("LID", "blockNum")),
        "SMIR": (IBA.SASMInfoRecord, ("LID",)),
    }[kind]

    def run(s: _Session, words: List[str]) -> None:
        cm = IBA.ComponentMask(cls())
        lid, rest = _lid_parts(s, words[0] if words else None, len(fields))
        _set(cm, **dict(zip(fields, [lid] + rest)))
        for rec in s.table(cm):
            s.emit(f.DUMPERS[kind](rec), rec)
    return run


def _q_node(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_node
    cm = IBA.ComponentMask(IBA.SANodeRecord())
    lid, _ = _lid_parts(s, words[0] if words else None, 1)
    _set(cm, LID=lid)
    for rec in s.table(cm):
        s.emit(dump_node(rec, s.name(rec)), rec)


def _q_switch(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_switchinfo
    top = bool(_cpi(s).capabilityMask2 & 1 << 3)  # IsMulticastTopSupported
    cm = IBA.ComponentMask(IBA.SASwitchInfoRecord())
    lid, _ = _lid_parts(s, words[0] if words else None, 1)
    _set(cm, LID=lid)
    for rec in s.table(cm):
        s.emit(dump_switchinfo(rec, top), rec)


def _q_link(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_link
    cm = IBA.ComponentMask(IBA.SALinkRecord())
    flid, (fport,) = _lid_parts(s, words[0] if words else None, 2)
    tlid, (tport,) = _lid_parts(s, words[1] if len(words) > 1 else None, 2)
    _set(cm, fromLID=flid, fromPort=fport, toLID=tlid, toPort=tport)
    for rec in s.table(cm):
        s.emit(dump_link(rec), rec)


def _q_inform(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_informinfo
    cm = IBA.ComponentMask(IBA.SAInformInfoRecord())
    if words:
        try:
            cm.subscriberGID = IBA.GID(_gid(words[0]))
        except argparse.ArgumentTypeError as e:
            raise CmdError(f"invalid SubscriberGID: {e}") from None
    for rec in s.table(cm):
        s.emit(dump_informinfo(rec, s.args.show_keys), rec)


def _q_service(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_service
    for rec in s.table(IBA.ComponentMask(IBA.SAServiceRecord())):
        s.emit(dump_service(rec, s.args.show_keys), rec)


def _sel(cm: Any, value: Optional[int], sel: str, field: str) -> None:
    """A value byte with its selector in the top 2 bits (MTU, rate,
    packet lifetime); 0 means not given, as for saquery."""
    if value:
        setattr(cm, sel, (value >> 6) & 3)
        setattr(cm, field, value & 0x3F)


def _q_path(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_path
    a = s.args
    cm = IBA.ComponentMask(IBA.SAPathRecord())
    slid, dlid, numb = a.slid, a.dlid, a.numb_path
    if a.src_to_dst is not None:
        src, sep, dst = a.src_to_dst.partition(":")
        if not sep:
            raise CmdError("--src-to-dst needs SRC:DST")
        slid = s.lid(src) if src else slid
        dlid = s.lid(dst) if dst else dlid
        numb = 0x7F if numb is None else numb
    sgid, dgid = a.sgid, a.dgid
    if a.sgid_to_dgid is not None:
        sgid, sep, dgid = a.sgid_to_dgid.partition("-")
        if not sep:
            raise CmdError("--sgid-to-dgid needs SGID-DGID")
        _gid_or_usage(sgid)
        _gid_or_usage(dgid)
        numb = 0x7F if numb is None else numb
    _set(cm, serviceID=a.service_id or None, SLID=slid or None,
         DLID=dlid or None, hopLimit=a.hop_limit, TClass=a.tclass or None,
         reversible=a.reversible, numbPath=numb, PKey=a.pkey or None,
         SL=a.sl, QOSClass=a.qos_class)
    if a.flow_label:
        cm.flowLabel = a.flow_label
    for name, gid in (("SGID", sgid), ("DGID", dgid)):
        if gid and IBA.GID(gid) != IBA.GID("::"):
            setattr(cm, name, IBA.GID(gid))
    _sel(cm, a.mtu, "MTUSelector", "MTU")
    _sel(cm, a.rate, "rateSelector", "rate")
    _sel(cm, a.pkt_life, "packetLifeTimeSelector", "packetLifeTime")
    for rec in s.table(cm):
        s.emit(dump_path(rec), rec)


def _gid_or_usage(text: str) -> None:
    try:
        _gid(text)
    except argparse.ArgumentTypeError as e:
        raise CmdError(str(e)) from None


def _q_mcmember(s: _Session, words: List[str]) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_mcmr
    a = s.args
    cm = IBA.ComponentMask(IBA.SAMCMemberRecord())
    for name, gid in (("MGID", a.mgid), ("portGID", a.gid)):
        if gid and IBA.GID(gid) != IBA.GID("::"):
            setattr(cm, name, IBA.GID(gid))
    _set(cm, MLID=a.mlid or None, QKey=a.qkey or None,
         TClass=a.tclass or None, PKey=a.pkey or None, SL=a.sl,
         flowLabel=a.flow_label or None, hopLimit=a.hop_limit,
         scope=a.scope or None, joinState=a.join_state or None,
         proxyJoin=a.proxy_join)
    _sel(cm, a.mtu, "MTUSelector", "MTU")
    _sel(cm, a.rate, "rateSelector", "rate")
    _sel(cm, a.pkt_life, "packetLifeTimeSelector", "packetLifeTime")
    for rec in s.table(cm):
        s.emit(dump_mcmr(rec), rec)


def _cpi(s: _Session) -> Any:
    """The SA's ClassPortInfo (a Get)."""
    from rdma import IBA
    return s.umad.SubnAdmGet(IBA.MADClassPortInfo())


def _q_cpi(s: _Session, words: List[str]) -> None:
    from rdma.cli._safmt import dump_cpi
    cpi = _cpi(s)
    s.emit(dump_cpi(cpi), cpi)


_QUERY_FUNCS: Dict[str, Callable[[_Session, List[str]], None]] = {
    "CPI": _q_cpi, "NR": _q_node, "SWIR": _q_switch, "LR": _q_link,
    "IIR": _q_inform, "SR": _q_service, "PR": _q_path, "MCMR": _q_mcmember,
}


def _query_func(kind: str) -> Callable[[_Session, List[str]], None]:
    return _QUERY_FUNCS.get(kind) or _q_simple(kind)


# ---- the commands that are not one query: -N -L -l -G -O -U -D -s -g -m


def _node_records(s: _Session, how: str, want: Optional[str]) -> None:
    """``-N``/``-L``/``-l``/``-G``/``-O``/``-U``/``-D``: NodeRecords
    filtered by name, LID or GUID, printed whole or as one value."""
    from rdma.cli._safmt import dump_node, node_desc
    if how == "D":
        s.text('   LID "name"')
        s.text("================")
    for rec in s.nodes():
        nm = s.name(rec)
        if how == "D":
            if rec.nodeInfo.nodeType == 1:
                _line(s, f'{rec.LID:6d}  "{nm}"', LID=rec.LID, name=nm)
            continue
        if how == "O":
            if want is not None and rec.LID == (int(want, 0) & 0xFFFF):
                _line(s, nm, LID=rec.LID, name=nm)
            continue
        if how == "U":
            if want is not None and int(rec.nodeInfo.portGUID) == \
                    (int(want, 0) & (1 << 64) - 1):
                guid = f"0x{int(rec.nodeInfo.portGUID):016x}"
                _line(s, nm, port_guid=guid, name=nm)
            continue
        if want is not None and want not in (node_desc(rec), nm):
            continue
        if how in ("L", "l"):
            _line(s, str(rec.LID), LID=rec.LID, name=nm)
            if how == "l":
                return
        elif how == "G":
            guid = f"0x{int(rec.nodeInfo.portGUID):016x}"
            _line(s, guid, port_guid=guid, name=nm)
        else:
            s.emit(dump_node(rec, nm), rec)


def _line(s: _Session, text: str, **data: Any) -> None:
    """A one-line answer (``-L``, ``-O``...) and its JSON object."""
    from rdma.cli._safmt import Dump
    d = Dump("NodeRecord")
    d.lines.append(text)
    d.data.update(data)
    s.emit(d)


def _issm(s: _Session) -> None:
    """``-s``: the ports with IsSM, then those with IsSMdisabled."""
    from rdma import IBA
    from rdma.cli._safmt import dump_portinfo_short
    for title, bit in (("IsSM ports", _IS_SM),
                       ("\nIsSMdisabled ports", _IS_SM_DISABLED)):
        cm = IBA.ComponentMask(IBA.SAPortInfoRecord())
        cm.portInfo.capabilityMask = bit
        recs = s.table(cm, 1 << 31)     # any of the mask's bits matches
        s.text(title)
        for rec in recs:
            d = dump_portinfo_short(rec)
            d.data["list"] = title.strip()
            s.emit(d, rec)


def _groups(s: _Session) -> None:
    from rdma import IBA
    from rdma.cli._safmt import dump_mcmr_group
    for rec in s.table(IBA.SAMCMemberRecord()):
        s.emit(dump_mcmr_group(rec), rec)


def _members(s: _Session, want: Optional[str]) -> None:
    """``-m [MLID]``: every membership with its node's name; with an
    MLID, just that group's member GIDs."""
    from rdma import IBA
    from rdma.cli._safmt import dump_mcmr_member
    recs = s.table(IBA.SAMCMemberRecord())
    by_guid = {int(n.nodeInfo.portGUID): s.name(n) for n in s.nodes()}
    mlid = None
    if want is not None:
        try:
            mlid = int(want, 0)
        except ValueError:
            mlid = 0                    # saquery: strtol gives 0
    for rec in recs:
        iid = int.from_bytes(bytes(rec.portGID)[8:], "big")
        nm = by_guid.get(iid, "<unknown>")
        if mlid is not None:
            if rec.MLID == mlid:
                s.emit(dump_mcmr_member(rec, nm, True), rec)
        else:
            s.emit(dump_mcmr_member(rec, nm, False), rec)


# ---- main


def _plan(args: argparse.Namespace) -> Tuple[str, str, List[str]]:
    """(command, query alias, its words) from the command line, as
    saquery reads it; raises CmdError for bad usage."""
    words = list(args.rest)
    command = args.sa_command or "query"
    kind = args.kind
    if args.src_to_dst is not None or args.sgid_to_dgid is not None:
        kind = "PR"
    if command == "query" and kind is None:
        if words and words[0].upper() in _BY_NAME:
            kind = _BY_NAME[words.pop(0).upper()]
        else:
            kind = "NR"
    if command in ("L", "l", "G") and not words:
        raise CmdError("name not specified")
    if command == "O" and (not words or not _nonzero(words[0])):
        raise CmdError("lid not specified" if not words else "lid invalid")
    if command == "U" and not words:
        raise CmdError("guid not specified")
    if command in ("O", "U") and words:
        try:
            int(words[0], 0)
        except ValueError:
            raise CmdError(f"invalid number {words[0]!r}") from None
    return command, kind or "NR", words


def _nonzero(text: str) -> bool:
    try:
        return int(text, 0) & 0xFFFF != 0
    except ValueError:
        return False


def saquery(args: argparse.Namespace) -> int:
    """Run ``ibtool saquery``; return the exit code."""
    import rdma.umad
    command, kind, words = _plan(args)
    end_port = get_end_port(args)
    with rdma.umad.get_umad(end_port, timeout_ms=args.timeout,
                            retries=args.retries) as umad:
        s = _Session(umad, args)
        want = words[0] if words else None
        if command in ("N", "L", "l", "G", "O", "U", "D"):
            _node_records(s, command, want)
        elif command == "c":
            _q_cpi(s, words)
        elif command == "s":
            _issm(s)
        elif command == "g":
            _groups(s)
        elif command == "m":
            _members(s, want)
        else:
            _query_func(kind)(s, words)
        s.finish()
    return 0
