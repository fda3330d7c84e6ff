"""infiniband-diags' ``saquery`` dumps of SA records, for ``ibtool
saquery``.

Each ``dump_*`` function turns one decoded record of :mod:`rdma.IBA` into
a :class:`Dump`: the lines ``saquery`` prints for it (names, order, dot
padding, number bases and tabs as infiniband-diags' ``saquery`` lays them
out) and the same fields as a dict for ``--json``, under the same names.
JSON values are the printed text, except that plain decimal numbers
become numbers; GUIDs and masks stay hex strings, as they are printed.
"""
from __future__ import annotations

import socket
import sys
from typing import (Any, Callable, Dict, List, Optional, Sequence, Tuple,
                    Union)

from rdma.cli._ibfmt import NODE_TYPES, portinfo_lines

__all__ = ["Dump", "DUMPERS", "dump_node", "dump_path", "dump_cpi",
           "dump_portinfo_short", "dump_mcmr_group", "dump_mcmr_member",
           "gid_str", "json_value"]

#: A row: (key, printed value), or (text, None) for a line without dots.
Row = Tuple[str, Optional[str]]
Value = Union[str, int, List[Any], Dict[str, Any]]

NOT_DISPLAYED = "<not displayed>"


class Dump:
    """One record as ``saquery`` prints it (``lines``) and as ``--json``
    gives it (``data``: the type, then the printed fields by name)."""

    def __init__(self, kind: str) -> None:
        self.lines: List[str] = []
        self.data: Dict[str, Any] = {"type": kind}

    def title(self, text: str) -> "Dump":
        self.lines.append(text)
        return self

    def rows(self, rows: Sequence[Row], width: int, indent: str = "\t\t",
             into: Optional[Dict[str, Any]] = None) -> "Dump":
        """Lines ``key....value`` with key and dots ``width`` wide."""
        target = self.data if into is None else into
        for key, value in rows:
            if value is None:
                self.lines.append(indent + key)
                continue
            self.lines.append(indent + key.ljust(width, ".") + value)
            target[key] = json_value(value)
        return self

    def raw(self, lines: List[str], key: str, value: Any) -> "Dump":
        """Lines printed as they are, given to JSON as ``key: value``."""
        self.lines.extend(lines)
        self.data[key] = value
        return self


def json_value(text: str) -> Value:
    """A printed value for JSON: a plain decimal number as a number,
    anything else (hex, GIDs, names) as the text."""
    if text.isdigit():
        return int(text)
    return text


def gid_str(gid: Any) -> str:
    """A GID as ``inet_ntop`` writes it (as ``saquery`` prints GIDs)."""
    return socket.inet_ntop(socket.AF_INET6, bytes(gid))


def _desc(raw: Any) -> str:
    """A NodeDescription's text: up to its first NUL, other control
    characters as blanks."""
    data = bytes(raw).split(b"\0", 1)[0]
    text = data.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else " " for c in text)


def node_desc(rec: Any) -> str:
    """The NodeDescription of a NodeRecord."""
    return _desc(rec.nodeDescription.nodeString)


def _u(raw: bytes, start: int, end: int) -> int:
    return int.from_bytes(raw[start:end], "big")


def dump_node(rec: Any, name: str) -> Dump:
    """NodeRecord; *name* is the node's description or its name in the
    node name map."""
    ni = rec.nodeInfo
    return Dump("NodeRecord").title("NodeRecord dump:").rows([
        ("lid", str(rec.LID)), ("reserved", f"0x{rec.reserved_16:X}"),
        ("base_version", f"0x{ni.baseVersion:X}"),
        ("class_version", f"0x{ni.classVersion:X}"),
        ("node_type", NODE_TYPES.get(ni.nodeType, "???")),
        ("num_ports", str(ni.numPorts)),
        ("sys_guid", f"0x{int(ni.systemImageGUID):016x}"),
        ("node_guid", f"0x{int(ni.nodeGUID):016x}"),
        ("port_guid", f"0x{int(ni.portGUID):016x}"),
        ("partition_cap", f"0x{ni.partitionCap:X}"),
        ("device_id", f"0x{ni.deviceID:X}"),
        ("revision", f"0x{ni.revision:X}"),
        ("port_num", str(ni.localPortNum)),
        ("vendor_id", f"0x{ni.vendorID:X}"),
        ("NodeDescription", name)], 24)


def dump_path(rec: Any) -> Dump:
    """PathRecord: the compound bytes (hop/flow, MTU and its selector...)
    as the raw values ``saquery`` prints."""
    raw = bytes(rec.pack())
    resv2 = raw[58:64].hex().upper()
    return Dump("PathRecord").title("PathRecord dump:").rows([
        ("service_id", f"0x{rec.serviceID:016x}"),
        ("dgid", gid_str(rec.DGID)), ("sgid", gid_str(rec.SGID)),
        ("dlid", str(rec.DLID)), ("slid", str(rec.SLID)),
        ("hop_flow_raw", f"0x{_u(raw, 44, 48):X}"),
        ("tclass", f"0x{raw[48]:X}"), ("num_path_revers", f"0x{raw[49]:X}"),
        ("pkey", f"0x{rec.PKey:X}"), ("qos_class", f"0x{rec.QOSClass:X}"),
        ("sl", f"0x{rec.SL:X}"), ("mtu", f"0x{raw[54]:X}"),
        ("rate", f"0x{raw[55]:X}"), ("pkt_life", f"0x{raw[56]:X}"),
        ("preference", f"0x{raw[57]:X}"), ("resv2", f"0x{resv2}")], 24)


def dump_cpi(cpi: Any) -> Dump:
    """The SA's ClassPortInfo."""
    raw = bytes(cpi.pack())
    return Dump("ClassPortInfo").title("SA ClassPortInfo:").rows([
        ("Base version", str(cpi.baseVersion)),
        ("Class version", str(cpi.classVersion)),
        ("Capability mask", f"0x{cpi.capabilityMask:04X}"),
        ("Capability mask 2", f"0x{cpi.capabilityMask2:08X}"),
        ("Response time value", f"0x{cpi.respTimeValue:02X}"),
        ("Redirect GID", gid_str(cpi.redirectGID)),
        ("Redirect TC/SL/FL", f"0x{_u(raw, 24, 28):08X}"),
        ("Redirect LID", str(cpi.redirectLID)),
        ("Redirect PKey", f"0x{cpi.redirectPKey:04X}"),
        ("Redirect QP", f"0x{_u(raw, 32, 36):08X}"),
        ("Redirect QKey", f"0x{cpi.redirectQKey:08X}"),
        ("Trap GID", gid_str(cpi.trapGID)),
        ("Trap TC/SL/FL", f"0x{_u(raw, 56, 60):08X}"),
        ("Trap LID", str(cpi.trapLID)),
        ("Trap PKey", f"0x{cpi.trapPKey:04X}"),
        ("Trap HL/QP", f"0x{_u(raw, 64, 68):08X}"),
        ("Trap QKey", f"0x{cpi.trapQKey:08X}")], 25)


def dump_portinfo_short(rec: Any) -> Dump:
    """PortInfoRecord as ``saquery -s`` lists IsSM ports."""
    pi = rec.portInfo
    return Dump("PortInfoRecord").title("PortInfoRecord dump:").rows([
        ("EndPortLid", str(rec.endportLID)), ("PortNum", str(rec.portNum)),
        ("base_lid", str(pi.LID)),
        ("master_sm_base_lid", str(pi.masterSMLID)),
        ("capability_mask", f"0x{pi.capabilityMask:X}")], 24)


#: CapabilityMask bits 14 and 15: saquery prints CapabilityMask2 and the
#: extended speeds of every PortInfo, whatever its capability mask says.
_ALL_PORTINFO = 1 << 14 | 1 << 15


def dump_portinfo_record(rec: Any) -> Dump:
    """PortInfoRecord: its RID, then the whole PortInfo as libibmad
    prints it (capability names on their own lines)."""
    d = Dump("PortInfoRecord").title("PortInfoRecord dump:")
    d.rows([("RID", None)], 0, indent="\t")
    d.rows([("EndPortLid", str(rec.endportLID)),
            ("PortNum", str(rec.portNum)),
            ("Options", f"0x{rec.reserved_24:x}")], 24)
    d.rows([("PortInfo dump:", None)], 0, indent="\t")
    info: Dict[str, Any] = {}
    for line in portinfo_lines(rec.portInfo, _ALL_PORTINFO):
        if line.startswith("\t"):
            d.lines.append(line)            # a capability's name
            continue
        d.lines.append("\t\t" + line)
        key, _, rest = line.partition(":")
        info[key] = json_value(rest.lstrip("."))
    d.data["PortInfo"] = info
    return d


def _mcmr_parts(rec: Any) -> Tuple[bytes, int, int, int]:
    """The record's bytes, and its MTU, rate and packet lifetime bytes
    (each a value with its selector)."""
    raw = bytes(rec.pack())
    return raw, raw[38], raw[42], raw[43]


def dump_mcmr(rec: Any) -> Dump:
    """MCMemberRecord (``saquery MCMR``)."""
    _, mtu, rate, life = _mcmr_parts(rec)
    return Dump("MCMemberRecord").title("MCMember Record dump:").rows([
        ("MGID", gid_str(rec.MGID)), ("PortGid", gid_str(rec.portGID)),
        ("qkey", f"0x{rec.QKey:x}"), ("mlid", f"0x{rec.MLID:x}"),
        ("mtu", f"0x{mtu:x}"), ("TClass", f"0x{rec.TClass:x}"),
        ("pkey", f"0x{rec.PKey:x}"), ("rate", f"0x{rate:x}"),
        ("pkt_life", f"0x{life:x}"), ("SL", f"0x{rec.SL:x}"),
        ("FlowLabel", f"0x{rec.flowLabel:x}"),
        ("HopLimit", f"0x{rec.hopLimit:x}"), ("Scope", f"0x{rec.scope:x}"),
        ("JoinState", f"0x{rec.joinState:x}"),
        ("ProxyJoin", f"0x{rec.proxyJoin:x}")], 24)


def dump_mcmr_group(rec: Any) -> Dump:
    """MCMemberRecord as ``saquery -g`` lists groups."""
    _, mtu, rate, _ = _mcmr_parts(rec)
    return Dump("MCMemberRecord").title("MCMemberRecord group dump:").rows([
        ("MGID", gid_str(rec.MGID)), ("Mlid", f"0x{rec.MLID:X}"),
        ("Mtu", f"0x{mtu:X}"), ("pkey", f"0x{rec.PKey:X}"),
        ("Rate", f"0x{rate:X}"), ("SL", f"0x{rec.SL:X}")], 24)


def dump_mcmr_member(rec: Any, name: str, only_gid: bool) -> Dump:
    """MCMemberRecord as ``saquery -m`` lists members; with *only_gid*
    (``saquery -m MLID``) just the member's GID and node."""
    if only_gid:
        d = Dump("MCMemberRecord")
        d.lines.append("\t\tPortGid".ljust(26, ".") +
                       f"{gid_str(rec.portGID)} ({name})")
        d.data.update(PortGid=gid_str(rec.portGID), NodeDescription=name)
        return d
    raw = bytes(rec.pack())
    return Dump("MCMemberRecord").title("MCMemberRecord member dump:").rows([
        ("MGID", gid_str(rec.MGID)), ("Mlid", f"0x{rec.MLID:X}"),
        ("PortGid", gid_str(rec.portGID)),
        ("ScopeState", f"0x{raw[48]:X}"),
        ("ProxyJoin", f"0x{rec.proxyJoin:X}"),
        ("NodeDescription", name)], 24)


def dump_service(rec: Any, show_keys: bool) -> Dump:
    """ServiceRecord; the ServiceKey only with ``-K``."""
    key = "0x" + bytes(rec.serviceKey).hex()
    rows: List[Row] = [
        ("ServiceID", f"0x{rec.serviceID:016x}"),
        ("ServiceGID", gid_str(rec.serviceGID)),
        ("ServiceP_Key", f"0x{rec.servicePKey:X}"),
        ("ServiceLease", f"0x{rec.serviceLease:X}"),
        ("ServiceKey", key if show_keys else NOT_DISPLAYED),
        ("ServiceName", _desc(rec.serviceName))]
    for bits, values in ((8, rec.serviceData8), (16, rec.serviceData16),
                         (32, rec.serviceData32)):
        rows += [(f"ServiceData{bits}.{i}", f"0x{v:X}")
                 for i, v in enumerate(values, 1)]
    rows += [(f"ServiceData64.{i}", f"0x{v:016x}")
             for i, v in enumerate(rec.serviceData64, 1)]
    return Dump("ServiceRecord").title("ServiceRecord dump:").rows(rows, 24)


def dump_sminfo(rec: Any) -> Dump:
    """SMInfoRecord."""
    si = rec.SMInfo
    return Dump("SMInfoRecord").title("SMInfoRecord dump:").rows([
        ("RID", None), ("LID", str(rec.LID)), ("SMInfo dump:", None),
        ("GUID", f"0x{int(si.GUID):016x}"), ("SM_Key", f"0x{si.SMKey:016x}"),
        ("ActCount", str(si.actCount)), ("Priority", str(si.priority)),
        ("SMState", str(si.SMState))], 22)


def dump_switchinfo(rec: Any, mcast_top: bool) -> Dump:
    """SwitchInfoRecord; MulticastFDBTop only when the SA's
    ClassPortInfo says it supports it (*mcast_top*)."""
    si = rec.switchInfo
    raw = bytes(rec.pack())[4:]
    rows: List[Row] = [
        ("RID", None), ("LID", str(rec.LID)), ("SwitchInfo dump:", None),
        ("LinearFDBCap", f"0x{si.linearFDBCap:X}"),
        ("RandomFDBCap", f"0x{si.randomFDBCap:X}"),
        ("MulticastFDBCap", f"0x{si.multicastFDBCap:X}"),
        ("LinearFDBTop", f"0x{si.linearFDBTop:X}"),
        ("DefaultPort", str(si.defaultPort)),
        ("DefaultMulticastPrimaryPort", str(si.defaultMulticastPrimaryPort)),
        ("DefaultMulticastNotPrimaryPort",
         str(si.defaultMulticastNotPrimaryPort)),
        ("LifeTimeValue/PortStateChange/OpSL2VL", f"0x{raw[11]:X}"),
        ("LIDsPerPort", f"0x{si.LIDsPerPort:X}"),
        ("PartitionEnforcementCap", f"0x{si.partitionEnforcementCap:X}"),
        ("flags", f"0x{raw[16]:X}")]
    if mcast_top:
        rows.append(("MulticastFDBTop", f"0x{si.multicastFDBTop:X}"))
    return Dump("SwitchInfoRecord").title("SwitchInfoRecord dump:").rows(
        rows, 40)


def dump_informinfo(rec: Any, show_keys: bool) -> Dump:
    """InformInfoRecord (a generic or a vendor subscription)."""
    ii = rec.informInfo
    generic = ii.isGeneric != 0
    rows: List[Row] = [
        ("RID", None), ("SubscriberGID", gid_str(rec.subscriberGID)),
        ("SubscriberEnum", f"0x{rec.enumeration:X}"),
        ("InformInfo dump:", None), ("gid", gid_str(ii.GID)),
        ("lid_range_begin", str(ii.LIDRangeBegin)),
        ("lid_range_end", str(ii.LIDRangeEnd)),
        ("is_generic", f"0x{ii.isGeneric:X}"),
        ("subscribe", f"0x{ii.subscribe:X}"),
        ("trap_type", f"0x{ii.type:X}"),
        ("trap_num", str(ii.trapNumber)) if generic
        else ("dev_id", f"0x{ii.trapNumber:X}"),
        ("qpn", f"0x{ii.QPN:06X}" if show_keys else NOT_DISPLAYED),
        ("resp_time_val", f"0x{ii.respTimeValue:X}"),
        ("node_type" if generic else "vendor_id",
         f"0x{ii.producerType:06X}")]
    return Dump("InformInfoRecord").title("InformInfoRecord dump:").rows(
        rows, 24)


def dump_link(rec: Any) -> Dump:
    """LinkRecord."""
    return Dump("LinkRecord").title("LinkRecord dump:").rows([
        ("FromLID", str(rec.fromLID)), ("FromPort", str(rec.fromPort)),
        ("ToPort", str(rec.toPort)), ("ToLID", str(rec.toLID))], 27)


def _bars(label: str, values: List[int]) -> str:
    return "\t\t" + label + "".join(f"{v:2d}|" for v in values)


def dump_sl2vl(rec: Any) -> Dump:
    """SLtoVLMappingTableRecord: the 16 SLs' VLs as a bar table."""
    vls = list(rec.SLToVLMappingTable.SLtoVL)
    d = Dump("SL2VLTableRecord").title("SL2VLTableRecord dump:").rows([
        ("LID", str(rec.LID)), ("InPort", str(rec.inputPortNum)),
        ("OutPort", str(rec.outputPortNum))], 27)
    return d.raw([_bars("SL:", list(range(16))), _bars("VL:", vls)],
                 "VL", vls)


def dump_vlarb(rec: Any) -> Dump:
    """VLArbitrationTableRecord: 32 (VL, weight) entries, 16 a row."""
    words = list(rec.VLArbitrationTable.VLWeightBlock)
    vls = [(w >> 8) & 0xFF for w in words]
    weights = [w & 0xFF for w in words]
    d = Dump("VLArbTableRecord").title("VLArbTableRecord dump:").rows([
        ("LID", str(rec.LID)), ("Port", str(rec.outputPortNum)),
        ("Block", str(rec.blockNum))], 27)
    lines: List[str] = []
    for i in (0, 16):
        lines += [_bars("VL    :", vls[i:i + 16]),
                  _bars("Weight:", weights[i:i + 16])]
    d.raw(lines, "VL", vls)
    d.data["Weight"] = weights
    return d


def dump_pkey(rec: Any) -> Dump:
    """P_KeyTableRecord: 32 P_Keys, 8 a line, then a blank line."""
    keys = [f"0x{k:04x}" for k in rec.PKeyTable.PKeyBlock]
    # opensm fills BlockNum in its host's order (little-endian here) and
    # saquery prints it without swapping: read it the way it was written.
    block = int.from_bytes(bytes(rec.pack())[2:4], sys.byteorder)
    d = Dump("PKeyTableRecord").title("PKeyTableRecord dump:").rows([
        ("LID", str(rec.LID)), ("Port", str(rec.portNum)),
        ("Block", str(block)), ("PKey Table:", None)], 27)
    lines = ["\t\t" + " ".join(keys[i:i + 8]) for i in range(0, 32, 8)]
    return d.raw(lines + [""], "PKey Table", keys)


def dump_lft(rec: Any) -> Dump:
    """LinearForwardingTableRecord: LID and port of its 64 entries."""
    base = rec.blockNum * 64
    ports = list(rec.linearForwardingTable.portBlock)
    d = Dump("LFTRecord").title("LFT Record dump:").rows([
        ("LID", str(rec.LID)), ("Block", str(rec.blockNum)),
        ("LFT:", None), ("LID\tPort Number", None)], 27)
    lines = [f"\t\t{base + i}\t{p}" for i, p in enumerate(ports)]
    return d.raw(lines + [""], "LFT",
                 [[base + i, p] for i, p in enumerate(ports)])


def dump_mft(rec: Any) -> Dump:
    """MulticastForwardingTableRecord: MLID and port mask of 32 entries."""
    base = 0xC000 + rec.blockNum * 32
    masks = list(rec.multicastForwardingTable.portMaskBlock)
    d = Dump("MFTRecord").title("MFT Record dump:").rows([
        ("LID", str(rec.LID)), ("Position", str(rec.position)),
        ("Block", str(rec.blockNum)), ("MFT:", None),
        ("MLID\tPort Mask", None)], 27)
    pairs = [[f"0x{base + i:04x}", f"0x{m:04x}"] for i, m in enumerate(masks)]
    lines = [f"\t\t{a}\t{b}" for a, b in pairs]
    return d.raw(lines + [""], "MFT", pairs)


def dump_guidinfo(rec: Any) -> Dump:
    """GUIDInfoRecord: its block of 8 GUIDs."""
    guids = list(rec.GUIDInfo.GUIDBlock)
    return Dump("GUIDInfoRecord").title("GUIDInfo Record dump:").rows(
        [("LID", str(rec.LID)), ("Block", str(rec.blockNum))] +
        [(f"GUID {i}", f"0x{int(g):016x}") for i, g in enumerate(guids)],
        27)


#: Dumpers that need only the record, by query alias.
DUMPERS: Dict[str, Callable[[Any], Dump]] = {
    "PR": dump_path, "PIR": dump_portinfo_record, "SL2VL": dump_sl2vl,
    "PKTR": dump_pkey, "VLAR": dump_vlarb, "LR": dump_link,
    "MCMR": dump_mcmr, "LFTR": dump_lft, "MFTR": dump_mft,
    "GIR": dump_guidinfo, "SMIR": dump_sminfo,
}
