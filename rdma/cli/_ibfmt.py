"""Text formats of infiniband-diags (libibmad's ``Key:....value`` dumps)
for ``ibtool``'s management commands.

Each ``*_rows`` function turns a decoded :mod:`rdma.IBA` attribute into
``(key, value)`` rows named and valued as infiniband-diags prints them;
:func:`dotted` lays them out.  The value names (link widths, speeds,
states, MTUs, VL counts, capability bits) are the IBA specification's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

Rows = List[Tuple[str, str]]

NODE_TYPES = {1: "Channel Adapter", 2: "Switch", 3: "Router"}
LINK_STATES = {0: "NoChange", 1: "Down", 2: "Initialize", 3: "Armed",
               4: "Active"}
PHYS_STATES = {0: "NoChange", 1: "Sleep", 2: "Polling", 3: "Disabled",
               4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "PhyTest"}
DOWN_DEF_STATES = {0: "NoChange", 1: "Sleep", 2: "Polling"}
MTUS = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
VL_CAPS = {1: "VL0", 2: "VL0-1", 3: "VL0-3", 4: "VL0-7", 5: "VL0-14"}
WIDTHS = ((1, "1X"), (2, "4X"), (4, "8X"), (8, "12X"), (16, "2X"))
SPEEDS = ((1, "2.5 Gbps"), (2, "5.0 Gbps"), (4, "10.0 Gbps"))
EXT_SPEEDS = ((1, "14.0625 Gbps"), (2, "25.78125 Gbps"), (4, "53.125 Gbps"),
              (8, "106.25 Gbps"))
#: PortInfo:CapabilityMask bits (IBA 14.2.5.6, table 155).
CAP_MASK = {
    1: "IsSM", 2: "IsNoticeSupported", 3: "IsTrapSupported",
    4: "IsOptionalIPDSupported", 5: "IsAutomaticMigrationSupported",
    6: "IsSLMappingSupported", 7: "IsMKeyNVRAM", 8: "IsPKeyNVRAM",
    9: "IsLedInfoSupported", 10: "IsSMdisabled",
    11: "IsSystemImageGUIDsupported",
    12: "IsPkeySwitchExternalPortTrapSupported",
    14: "IsExtendedSpeedsSupported", 15: "IsCapabilityMask2Supported",
    16: "IsCommunicatonManagementSupported",
    17: "IsSNMPTunnelingSupported", 18: "IsReinitSupported",
    19: "IsDeviceManagementSupported", 20: "IsVendorClassSupported",
    21: "IsDRNoticeSupported", 22: "IsCapabilityMaskNoticeSupported",
    23: "IsBootManagementSupported", 24: "IsLinkRoundTripLatencySupported",
    25: "IsClientRegistrationSupported",
    26: "IsOtherLocalChangesNoticeSupported",
    27: "IsLinkSpeedWidthPairsTableSupported",
    28: "IsVendorSpecificMadsTableSupported",
    29: "IsMcastPkeyTrapSuppressionSupported",
    30: "IsMulticastFDBTopSupported", 31: "IsHierarchyInfoSupported",
}
#: PortInfo:CapabilityMask2 bits.
CAP_MASK2 = {
    0: "IsSetNodeDescriptionSupported", 1: "IsPortInfoExtendedSupported",
    2: "IsVirtualizationSupported", 3: "IsSwitchPortStateTableSupported",
    4: "IsLinkWidth2xSupported", 5: "IsLinkSpeedHDRSupported",
    6: "IsMKeyProtectBitsExtSupported", 7: "IsEnhancedTrap128Supported",
    8: "IsPartitionTopSupported", 9: "IsLinkSpeedNDRSupported",
}


def dotted(rows: Rows, width: int = 33) -> List[str]:
    """``Key:.....value`` lines; the key and its dots ``width`` wide."""
    return [f"{k}:".ljust(width, ".") + v for k, v in rows]


def _name(table: Dict[int, str], v: int) -> str:
    return table.get(v, f"?({v})")


def _bits(table: Any, v: int, what: str) -> str:
    names = [n for bit, n in table if v & bit]
    if not v or v & ~sum(b for b, _ in table):
        return f"undefined ({v})" + (" (IBA extension)" if what else "")
    return " or ".join(names)


def width_str(v: int, what: str = "") -> str:
    """A LinkWidth value (one bit or a set, ``1X or 4X``)."""
    return _bits(WIDTHS, v, what)


def speed_str(v: int, what: str = "") -> str:
    """A LinkSpeed value (``2.5 Gbps``...)."""
    return _bits(SPEEDS, v, what)


def ext_speed_str(v: int) -> str:
    """A LinkSpeedExtSupported/Enabled value as libibmad prints it: ``0``,
    or the extended speeds (``14.0625 Gbps or 25.78125 Gbps``)."""
    if v == 0:
        return "0"
    return _bits(EXT_SPEEDS, v, "")


def cap_lines(table: Dict[int, str], mask: int) -> List[str]:
    """The indented capability names infiniband-diags prints under a
    capability mask."""
    return ["\t\t\t\t" + n for bit, n in sorted(table.items())
            if mask >> bit & 1]


def portinfo_lines(pi: Any, port0_capmask: Any = None) -> List[str]:
    """PortInfo as ``smpquery portinfo`` prints it.

    The CapabilityMask2 and extended-speed lines depend on capability
    bits; a switch's external ports have a zero CapabilityMask and go by
    port 0's (``port0_capmask``)."""
    caps = pi.capabilityMask if port0_capmask is None else port0_capmask
    out = dotted([
        ("Mkey", "<not displayed>"),
        ("GidPrefix", f"0x{pi.GIDPrefix:016x}"),
        ("Lid", str(pi.LID)), ("SMLid", str(pi.masterSMLID)),
        ("CapMask", f"0x{pi.capabilityMask:x}")])
    out += cap_lines(CAP_MASK, pi.capabilityMask)
    active = pi.linkSpeedActive
    out += dotted([
        ("DiagCode", f"0x{pi.diagCode:04x}"),
        ("MkeyLeasePeriod", str(pi.MKeyLeasePeriod)),
        ("LocalPort", str(pi.localPortNum)),
        ("LinkWidthEnabled", width_str(pi.linkWidthEnabled)),
        ("LinkWidthSupported", width_str(pi.linkWidthSupported, "ext")),
        ("LinkWidthActive", width_str(pi.linkWidthActive)),
        ("LinkSpeedSupported", speed_str(pi.linkSpeedSupported, "ext")),
        ("LinkState", _name(LINK_STATES, pi.portState)),
        ("PhysLinkState", _name(PHYS_STATES, pi.portPhysicalState)),
        ("LinkDownDefState", _name(DOWN_DEF_STATES,
                                   pi.linkDownDefaultState)),
        ("ProtectBits", str(pi.MKeyProtectBits)), ("LMC", str(pi.LMC)),
        ("LinkSpeedActive", speed_str(active) if active
         else "Extended speed"),
        ("LinkSpeedEnabled", speed_str(pi.linkSpeedEnabled, "ext")),
        ("NeighborMTU", _name(MTUS, pi.neighborMTU)),
        ("SMSL", str(pi.masterSMSL)),
        ("VLCap", _name(VL_CAPS, pi.VLCap)),
        ("InitType", f"0x{pi.initType:02x}"),
        ("VLHighLimit", str(pi.VLHighLimit)),
        ("VLArbHighCap", str(pi.VLArbitrationHighCap)),
        ("VLArbLowCap", str(pi.VLArbitrationLowCap)),
        ("InitReply", f"0x{pi.initTypeReply:02x}"),
        ("MtuCap", _name(MTUS, pi.MTUCap)),
        ("VLStallCount", str(pi.VLStallCount)),
        ("HoqLife", str(pi.HOQLife)),
        ("OperVLs", "No change" if pi.operationalVLs == 0
         else _name(VL_CAPS, pi.operationalVLs)),
        ("PartEnforceInb", str(pi.partitionEnforcementInbound)),
        ("PartEnforceOutb", str(pi.partitionEnforcementOutbound)),
        ("FilterRawInb", str(pi.filterRawInbound)),
        ("FilterRawOutb", str(pi.filterRawOutbound)),
        ("MkeyViolations", str(pi.MKeyViolations)),
        ("PkeyViolations", str(pi.PKeyViolations)),
        ("QkeyViolations", str(pi.QKeyViolations)),
        ("GuidCap", str(pi.GUIDCap)),
        ("ClientReregister", str(pi.clientReregister)),
        ("McastPkeyTrapSuppressionEnabled",
         str(pi.multicastPKeyTrapSuppressionEnabled)),
        ("SubnetTimeout", str(pi.subnetTimeOut)),
        ("RespTimeVal", str(pi.respTimeValue)),
        ("LocalPhysErr", str(pi.localPhyErrors)),
        ("OverrunErr", str(pi.overrunErrors)),
        ("MaxCreditHint", str(pi.maxCreditHint)),
        ("RoundTrip", str(pi.linkRoundTripLatency))])
    if caps >> 15 & 1:                  # IsCapabilityMask2Supported
        out += dotted([("CapabilityMask2", f"0x{pi.capabilityMask2:x}")])
        out += cap_lines(CAP_MASK2, pi.capabilityMask2)
    if caps >> 14 & 1:                  # IsExtendedSpeedsSupported
        ext = pi.linkSpeedExtActive
        out += dotted([
            ("LinkSpeedExtActive", "No Extended Speed" if ext == 0
             else _bits(EXT_SPEEDS, ext, "")),
            ("LinkSpeedExtSupported",
             ext_speed_str(pi.linkSpeedExtSupported)),
            ("LinkSpeedExtEnabled", ext_speed_str(pi.linkSpeedExtEnabled))])
    return out


def switchinfo_lines(si: Any) -> List[str]:
    """SwitchInfo as ``smpquery switchinfo`` prints it."""
    return dotted([
        ("LinearFdbCap", str(si.linearFDBCap)),
        ("RandomFdbCap", str(si.randomFDBCap)),
        ("McastFdbCap", str(si.multicastFDBCap)),
        ("LinearFdbTop", str(si.linearFDBTop)),
        ("DefPort", str(si.defaultPort)),
        ("DefMcastPrimPort", str(si.defaultMulticastPrimaryPort)),
        ("DefMcastNotPrimPort", str(si.defaultMulticastNotPrimaryPort)),
        ("LifeTime", str(si.lifeTimeValue)),
        ("StateChange", str(si.portStateChange)),
        ("OptSLtoVLMapping", str(si.optimizedSLtoVLMappingProgramming)),
        ("LidsPerPort", str(si.LIDsPerPort)),
        ("PartEnforceCap", str(si.partitionEnforcementCap)),
        ("InboundPartEnf", str(si.inboundEnforcementCap)),
        ("OutboundPartEnf", str(si.outboundEnforcementCap)),
        ("FilterRawInbound", str(si.filterRawInboundCap)),
        ("FilterRawOutbound", str(si.filterRawOutboundCap)),
        ("EnhancedPort0", str(si.enhancedPort0)),
        ("MulticastFDBTop", f"0x{si.multicastFDBTop:04x}"),
    ])
