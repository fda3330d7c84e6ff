"""Parse infiniband-diags' ``saquery`` dumps and map them onto our record
fields, so that tests compare the two field by field."""
import re
from typing import Dict, List

from rdma.IBA import GID

_LINE = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_ .]*?):?\.{2,}(.*)$")


def parse(text: str) -> List[Dict[str, str]]:
    """Split saquery output into one ``{key: value}`` dict per record."""
    records: List[Dict[str, str]] = []
    for line in text.splitlines():
        if line.endswith("dump:") and not line.startswith(("\t", " ")):
            records.append({"_kind": line[:-len(" dump:")]})
            continue
        m = _LINE.match(line)
        if m and records:
            records[-1][m.group(1).strip()] = m.group(2).strip()
    return records


def _i(v: str) -> int:
    return int(v, 0)


def path_record(r: Dict[str, str]) -> Dict[str, object]:
    """saquery's PathRecord dump as our SAPathRecord field values."""
    hfr = _i(r["hop_flow_raw"])
    npr = _i(r["num_path_revers"])
    mtu, rate, life = _i(r["mtu"]), _i(r["rate"]), _i(r["pkt_life"])
    return {
        "serviceID": _i(r["service_id"]), "DGID": str(GID(r["dgid"])),
        "SGID": str(GID(r["sgid"])), "DLID": _i(r["dlid"]),
        "SLID": _i(r["slid"]), "rawTraffic": hfr >> 31,
        "flowLabel": (hfr >> 8) & 0xFFFFF, "hopLimit": hfr & 0xFF,
        "TClass": _i(r["tclass"]), "reversible": npr >> 7,
        "numbPath": npr & 0x7F, "PKey": _i(r["pkey"]),
        "QOSClass": _i(r["qos_class"]), "SL": _i(r["sl"]),
        "MTUSelector": mtu >> 6, "MTU": mtu & 0x3F,
        "rateSelector": rate >> 6, "rate": rate & 0x3F,
        "packetLifeTimeSelector": life >> 6, "packetLifeTime": life & 0x3F,
        "preference": _i(r["preference"]),
    }


_NODE_TYPES = {"Channel Adapter": 1, "Switch": 2, "Router": 3}


def node_record(r: Dict[str, str]) -> Dict[str, object]:
    """saquery's NodeRecord dump as our SANodeRecord (flattened)."""
    return {
        "LID": _i(r["lid"]), "baseVersion": _i(r["base_version"]),
        "classVersion": _i(r["class_version"]),
        "nodeType": _NODE_TYPES[r["node_type"]],
        "numPorts": _i(r["num_ports"]), "systemImageGUID": _i(r["sys_guid"]),
        "nodeGUID": _i(r["node_guid"]), "portGUID": _i(r["port_guid"]),
        "partitionCap": _i(r["partition_cap"]),
        "deviceID": _i(r["device_id"]), "revision": _i(r["revision"]),
        "localPortNum": _i(r["port_num"]), "vendorID": _i(r["vendor_id"]),
        "nodeString": r["NodeDescription"],
    }


_LINK_STATE = {"Down": 1, "Initialize": 2, "Armed": 3, "Active": 4}
_PHYS_STATE = {"Sleep": 1, "Polling": 2, "Disabled": 3,
               "PortConfigurationTraining": 4, "LinkUp": 5,
               "LinkErrorRecovery": 6, "PhyTest": 7}
_MTU = {"256": 1, "512": 2, "1024": 3, "2048": 4, "4096": 5}


def _mtu(v: str) -> int:
    """An MTU as libibmad prints it: ``2048``, or ``?(0)`` for a value
    with no name (a down port's zero PortInfo in a whole ``PIR`` table)."""
    if v.startswith("?(") and v.endswith(")"):
        return int(v[2:-1], 0)
    return _MTU[v]

#: saquery PortInfo key -> (our SMPPortInfo field, converter)
_PORTINFO = {
    "GidPrefix": ("GIDPrefix", _i), "Lid": ("LID", _i),
    "SMLid": ("masterSMLID", _i), "CapMask": ("capabilityMask", _i),
    "DiagCode": ("diagCode", _i), "MkeyLeasePeriod": ("MKeyLeasePeriod", _i),
    "LocalPort": ("localPortNum", _i),
    "LinkState": ("portState", _LINK_STATE.__getitem__),
    "PhysLinkState": ("portPhysicalState", _PHYS_STATE.__getitem__),
    "ProtectBits": ("MKeyProtectBits", _i), "LMC": ("LMC", _i),
    "NeighborMTU": ("neighborMTU", _mtu),
    "SMSL": ("masterSMSL", _i), "VLHighLimit": ("VLHighLimit", _i),
    "VLArbHighCap": ("VLArbitrationHighCap", _i),
    "VLArbLowCap": ("VLArbitrationLowCap", _i),
    "MtuCap": ("MTUCap", _mtu),
    "VLStallCount": ("VLStallCount", _i), "HoqLife": ("HOQLife", _i),
    "PartEnforceInb": ("partitionEnforcementInbound", _i),
    "PartEnforceOutb": ("partitionEnforcementOutbound", _i),
    "FilterRawInb": ("filterRawInbound", _i),
    "FilterRawOutb": ("filterRawOutbound", _i),
    "MkeyViolations": ("MKeyViolations", _i),
    "PkeyViolations": ("PKeyViolations", _i),
    "QkeyViolations": ("QKeyViolations", _i), "GuidCap": ("GUIDCap", _i),
    "ClientReregister": ("clientReregister", _i),
    "McastPkeyTrapSuppressionEnabled":
        ("multicastPKeyTrapSuppressionEnabled", _i),
    "SubnetTimeout": ("subnetTimeOut", _i),
    "RespTimeVal": ("respTimeValue", _i),
    "LocalPhysErr": ("localPhyErrors", _i),
    "OverrunErr": ("overrunErrors", _i),
    "MaxCreditHint": ("maxCreditHint", _i),
    "RoundTrip": ("linkRoundTripLatency", _i),
    "CapabilityMask2": ("capabilityMask2", _i),
}


def port_info_record(r: Dict[str, str]) -> Dict[str, object]:
    """saquery's PortInfoRecord dump as our fields (PortInfo flattened)."""
    out: Dict[str, object] = {"endportLID": _i(r["EndPortLid"]),
                              "portNum": _i(r["PortNum"])}
    for key, (field, conv) in _PORTINFO.items():
        if key in r:
            out[field] = conv(r[key])
    return out


def service_record(r: Dict[str, str]) -> Dict[str, object]:
    """saquery's ServiceRecord dump as our SAServiceRecord fields."""
    out: Dict[str, object] = {
        "serviceID": _i(r["ServiceID"]),
        "serviceGID": str(GID(r["ServiceGID"])),
        "servicePKey": _i(r["ServiceP_Key"]),
        "serviceLease": _i(r["ServiceLease"]),
        "serviceName": r["ServiceName"],
    }
    for n, count in ((8, 16), (16, 8), (32, 4), (64, 2)):
        out[f"serviceData{n}"] = [_i(r[f"ServiceData{n}.{i}"])
                                  for i in range(1, count + 1)]
    return out


def mcmember_group(r: Dict[str, str]) -> Dict[str, object]:
    """saquery -g (group dump) as our SAMCMemberRecord fields."""
    mtu, rate = _i(r["Mtu"]), _i(r["Rate"])
    return {"MGID": str(GID(r["MGID"])), "MLID": _i(r["Mlid"]),
            "MTUSelector": mtu >> 6, "MTU": mtu & 0x3F, "PKey": _i(r["pkey"]),
            "rateSelector": rate >> 6, "rate": rate & 0x3F,
            "SL": _i(r["SL"])}


def mcmember_member(r: Dict[str, str]) -> Dict[str, object]:
    """saquery -m (member dump) as our SAMCMemberRecord fields."""
    ss = _i(r["ScopeState"])
    return {"MGID": str(GID(r["MGID"])), "MLID": _i(r["Mlid"]),
            "portGID": str(GID(r["PortGid"])), "scope": ss >> 4,
            "joinState": ss & 0xF, "proxyJoin": _i(r["ProxyJoin"])}


def link_record(r: Dict[str, str]) -> Dict[str, object]:
    """saquery -x as our SALinkRecord fields."""
    return {"fromLID": _i(r["FromLID"]), "fromPort": _i(r["FromPort"]),
            "toPort": _i(r["ToPort"]), "toLID": _i(r["ToLID"])}


def ours(record, keys) -> Dict[str, object]:
    """Our record as a dict of ``keys`` (nested structs flattened)."""
    flat: Dict[str, object] = {}

    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v)
            else:
                flat[k] = v
    walk(record.to_dict())
    return {k: flat[k] for k in keys}
