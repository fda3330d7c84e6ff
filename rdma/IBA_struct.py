"""The IBA management structures, one table per structure.

Each class lists the rows of its table in the InfiniBand Architecture
specification (volume 1; the section is in the docstring) in order, with
widths in bits; :mod:`rdma.binstruct` turns the table into the codec.
Names follow python-rdma (``SMPPortInfo.portState``,
``SAPathRecord.DGID``, ``PMPortCounters.symbolErrorCounter``...).
Import these through :mod:`rdma.IBA`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Tuple, Type

from rdma.binstruct import F, G, N, R, S, U, BinFormat, BinStruct, _Field



def _mad_header() -> List[_Field]:
    """The common MAD header rows (13.4.2), flattened into formats."""
    return [F("baseVersion", 8), F("mgmtClass", 8, "x"),
            F("classVersion", 8), F("method", 8, "x"),
            F("status", 16, "x"), F("classSpecific", 16, "x"),
            F("transactionID", 64, "x"), F("attributeID", 16, "x"), R(16),
            F("attributeModifier", 32, "x")]


def _mad_header_directed() -> List[_Field]:
    """The header of a directed-route SMP (14.2.1.2): D bit, 15-bit
    status, hop pointer and hop count in place of status/classSpecific."""
    return [F("baseVersion", 8), F("mgmtClass", 8, "x"),
            F("classVersion", 8), F("method", 8, "x"), F("D", 1),
            F("status", 15, "x"), F("hopPointer", 8), F("hopCount", 8),
            F("transactionID", 64, "x"), F("attributeID", 16, "x"), R(16),
            F("attributeModifier", 32, "x")]


def _rmpp_rows() -> List[_Field]:
    """The RMPP rows after the MAD header (13.6.2.1)."""
    return [F("RMPPVersion", 8), F("RMPPType", 8), F("RRespTime", 5),
            F("RMPPFlags", 3, "x"), F("RMPPStatus", 8), F("data1", 32),
            F("data2", 32)]


# ---- 13.4: MAD headers and the common attributes --------------------------

class MADHeader(BinStruct):
    """MAD Base Header (13.4.2); ``method`` includes the R bit."""
    MAD_LENGTH = 24
    FIELDS = _mad_header()
    if TYPE_CHECKING:
        # (the rows, as attributes for type checkers)
        baseVersion: int
        mgmtClass: int
        classVersion: int
        method: int
        status: int
        classSpecific: int
        transactionID: int
        attributeID: int
        attributeModifier: int


class MADHeaderDirected(BinStruct):
    """MAD Base Header of a directed-route SMP (14.2.1.2)."""
    MAD_LENGTH = 24
    FIELDS = _mad_header_directed()


class MADClassPortInfo(BinStruct):
    """ClassPortInfo (13.4.8.1): capabilities, redirect and trap targets."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x01
    METHODS = ("SubnAdmGet", "PerformanceGet", "PerformanceSet", "BMGet",
               "BMSet", "CommMgtGet", "CommMgtSet", "DevMgtGet",
               "DevMgtSet", "SNMPGet", "VendGet", "VendSet")
    FIELDS = [
        F("baseVersion", 8), F("classVersion", 8),
        F("capabilityMask", 16, "x"), F("capabilityMask2", 27, "x"),
        F("respTimeValue", 5), G("redirectGID"), F("redirectTC", 8),
        F("redirectSL", 4), F("redirectFL", 20, "x"), F("redirectLID", 16),
        F("redirectPKey", 16, "x"), R(8), F("redirectQP", 24, "x"),
        F("redirectQKey", 32, "x"), G("trapGID"), F("trapTC", 8),
        F("trapSL", 4), F("trapFL", 20, "x"), F("trapLID", 16),
        F("trapPKey", 16, "x"), F("trapHL", 8), F("trapQP", 24, "x"),
        F("trapQKey", 32, "x"),
    ]


class MADInformInfo(BinStruct):
    """InformInfo (13.4.8.3): a subscription to traps."""
    MAD_LENGTH = 36
    MAD_ATTRIBUTE_ID = 0x03
    METHODS = ("SubnAdmSet",)
    FIELDS = [
        G("GID"), F("LIDRangeBegin", 16), F("LIDRangeEnd", 16), R(16),
        F("isGeneric", 8), F("subscribe", 8), F("type", 16),
        F("trapNumber", 16), F("QPN", 24, "x"), R(3), F("respTimeValue", 5),
        R(8), F("producerType", 24, "x"),
    ]


class MADNotice(BinStruct):
    """Notice (13.4.8.2): a trap or report; ``dataDetails`` are the 54
    bytes whose layout depends on ``trapNumber``."""
    MAD_LENGTH = 80
    MAD_ATTRIBUTE_ID = 0x02
    METHODS = ("SubnTrap", "SubnTrapRepress", "SubnAdmReport")
    FIELDS = [
        F("isGeneric", 1), F("noticeType", 7), F("nodeType", 24, "x"),
        F("trapNumber", 16), F("issuerLID", 16), F("noticeToggle", 1),
        F("noticeCount", 15), F("dataDetails", 432), G("issuerGID"),
    ]


class RMPPHeader(BinStruct):
    """RMPP Header (13.6.2.1): the MAD header, then the RMPP rows;
    ``data1``/``data2`` are SegmentNumber and PayloadLength (DATA) or
    NewWindowLast (ACK)."""
    MAD_LENGTH = 36
    FIELDS = [N("MADHeader", MADHeader)] + _rmpp_rows()
    if TYPE_CHECKING:
        MADHeader: MADHeader
        RMPPVersion: int
        RMPPType: int
        RRespTime: int
        RMPPFlags: int
        RMPPStatus: int
        data1: int
        data2: int


# ---- 14: subnet management ------------------------------------------------

class SMPFormat(BinFormat):
    """SMP Format, LID routed (14.2.1.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x01
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [F("MKey", 64, "x"), R(256), F("data", 512),
                              R(1024)]


class SMPFormatDirected(BinFormat):
    """SMP Format, directed route (14.2.1.2): ``initialPath`` and
    ``returnPath`` hold one port number per hop (entry 0 unused)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x81
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header_directed() + [
        F("MKey", 64, "x"), F("drSLID", 16), F("drDLID", 16), R(224),
        F("data", 512), F("initialPath", 8, count=64),
        F("returnPath", 8, count=64)]
    if TYPE_CHECKING:
        D: int
        hopPointer: int
        hopCount: int
        MKey: int
        drSLID: int
        drDLID: int
        initialPath: bytearray
        returnPath: bytearray


class SMPLIDPortBlock(BinStruct):
    """LID/Port Block Element of the RandomForwardingTable (14.2.5.11)."""
    MAD_LENGTH = 4
    FIELDS = [F("LID", 16), F("valid", 1), F("LMC", 3), R(4), F("port", 8)]


class SMPNodeDescription(BinStruct):
    """NodeDescription (14.2.5.2): 64 bytes of UTF-8 text."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x10
    METHODS = ("SubnGet",)
    FIELDS = [S("nodeString", 64)]


class SMPNodeInfo(BinStruct):
    """NodeInfo (14.2.5.3)."""
    MAD_LENGTH = 40
    MAD_ATTRIBUTE_ID = 0x11
    METHODS = ("SubnGet",)
    FIELDS = [
        F("baseVersion", 8), F("classVersion", 8), F("nodeType", 8),
        F("numPorts", 8), U("systemImageGUID"), U("nodeGUID"),
        U("portGUID"), F("partitionCap", 16), F("deviceID", 16, "x"),
        F("revision", 32, "x"), F("localPortNum", 8), F("vendorID", 24, "x"),
    ]


class SMPSwitchInfo(BinStruct):
    """SwitchInfo (14.2.5.4)."""
    MAD_LENGTH = 20
    MAD_ATTRIBUTE_ID = 0x12
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [
        F("linearFDBCap", 16), F("randomFDBCap", 16),
        F("multicastFDBCap", 16), F("linearFDBTop", 16),
        F("defaultPort", 8), F("defaultMulticastPrimaryPort", 8),
        F("defaultMulticastNotPrimaryPort", 8), F("lifeTimeValue", 5),
        F("portStateChange", 1), F("optimizedSLtoVLMappingProgramming", 2),
        F("LIDsPerPort", 16), F("partitionEnforcementCap", 16),
        F("inboundEnforcementCap", 1), F("outboundEnforcementCap", 1),
        F("filterRawInboundCap", 1), F("filterRawOutboundCap", 1),
        F("enhancedPort0", 1), R(3), R(8), F("multicastFDBTop", 16, "x"),
    ]


class SMPGUIDInfo(BinStruct):
    """GUIDInfo (14.2.5.5): a block of 8 port GUIDs."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x14
    METHODS = ("SubnGet", "SubnSet")
    # each GUID is an SA component (GUIDInfoRecord: GUID0..GUID7)
    FIELDS = [U("GUIDBlock", count=8, comp=8)]


class SMPPortInfo(BinStruct):
    """PortInfo (14.2.5.6)."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x15
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [
        F("MKey", 64, "x"), F("GIDPrefix", 64, "x"), F("LID", 16),
        F("masterSMLID", 16), F("capabilityMask", 32, "x"),
        F("diagCode", 16, "x"), F("MKeyLeasePeriod", 16),
        F("localPortNum", 8), F("linkWidthEnabled", 8),
        F("linkWidthSupported", 8), F("linkWidthActive", 8),
        F("linkSpeedSupported", 4), F("portState", 4),
        F("portPhysicalState", 4), F("linkDownDefaultState", 4),
        F("MKeyProtectBits", 2), R(3), F("LMC", 3),
        F("linkSpeedActive", 4), F("linkSpeedEnabled", 4),
        F("neighborMTU", 4), F("masterSMSL", 4), F("VLCap", 4),
        F("initType", 4), F("VLHighLimit", 8),
        F("VLArbitrationHighCap", 8), F("VLArbitrationLowCap", 8),
        F("initTypeReply", 4), F("MTUCap", 4), F("VLStallCount", 3),
        F("HOQLife", 5), F("operationalVLs", 4),
        F("partitionEnforcementInbound", 1),
        F("partitionEnforcementOutbound", 1), F("filterRawInbound", 1),
        F("filterRawOutbound", 1), F("MKeyViolations", 16),
        F("PKeyViolations", 16), F("QKeyViolations", 16), F("GUIDCap", 8),
        F("clientReregister", 1),
        F("multicastPKeyTrapSuppressionEnabled", 2), F("subnetTimeOut", 5),
        R(3), F("respTimeValue", 5), F("localPhyErrors", 4),
        F("overrunErrors", 4), F("maxCreditHint", 16), R(8),
        F("linkRoundTripLatency", 24), F("capabilityMask2", 16, "x"),
        F("linkSpeedExtActive", 4), F("linkSpeedExtSupported", 4), R(3),
        F("linkSpeedExtEnabled", 5),
    ]


class SMPPKeyTable(BinStruct):
    """P_KeyTable (14.2.5.7): a block of 32 P_Keys."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x16
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("PKeyBlock", 16, "x", count=32)]


class SMPSLToVLMappingTable(BinStruct):
    """SLtoVLMappingTable (14.2.5.8): the VL of each of the 16 SLs."""
    MAD_LENGTH = 8
    MAD_ATTRIBUTE_ID = 0x17
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("SLtoVL", 4, count=16)]


class SMPVLArbitrationTable(BinStruct):
    """VLArbitrationTable (14.2.5.9): 32 (VL, weight) entries of 16 bits."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x18
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("VLWeightBlock", 16, "x", count=32)]


class SMPLinearForwardingTable(BinStruct):
    """LinearForwardingTable (14.2.5.10): the output port of 64 LIDs."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x19
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("portBlock", 8, count=64)]


class SMPRandomForwardingTable(BinStruct):
    """RandomForwardingTable (14.2.5.11): 16 LID/port blocks."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x1A
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [N("LIDPortBlock", SMPLIDPortBlock, count=16)]


class SMPMulticastForwardingTable(BinStruct):
    """MulticastForwardingTable (14.2.5.12): 32 port masks of 16 bits."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x1B
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("portMaskBlock", 16, "x", count=32)]


class SMPSMInfo(BinStruct):
    """SMInfo (14.2.5.13): a subnet manager's GUID, priority and state."""
    MAD_LENGTH = 24
    MAD_ATTRIBUTE_ID = 0x20
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [U("GUID"), F("SMKey", 64, "x"), F("actCount", 32),
              F("priority", 4), F("SMState", 4), R(24)]


class SMPVendorDiag(BinStruct):
    """VendorDiag (14.2.5.14)."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x30
    METHODS = ("SubnGet",)
    FIELDS = [F("nextIndex", 16), R(16), F("diagData", 480)]


class SMPLedInfo(BinStruct):
    """LedInfo (14.2.5.15)."""
    MAD_LENGTH = 4
    MAD_ATTRIBUTE_ID = 0x31
    METHODS = ("SubnGet", "SubnSet")
    FIELDS = [F("ledMask", 1), R(31)]


class SMPNoticeTrap(BinStruct):
    """The first 64 bytes of a Notice (13.4.8.2) as python-rdma lays them
    out for SMP traps (``dataDetails`` split in 16-bit words); see
    :class:`MADNotice` for the whole attribute."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x02
    FIELDS = [
        F("isGeneric", 1), F("noticeType", 7), F("nodeType", 24, "x"),
        F("trapNumber", 16), F("issuerLID", 16), F("noticeToggle", 1),
        F("noticeCount", 15), F("dataDetails", 16, "x"),
        F("dataDetails2", 16, "x", count=26),
    ]


# ---- 15: subnet administration --------------------------------------------

def _sa_rows() -> List[_Field]:
    return _mad_header() + _rmpp_rows() + [
        F("SMKey", 64, "x"), F("attributeOffset", 16), R(16),
        F("componentMask", 64, "x")]


class SAHeader(BinStruct):
    """The MAD, RMPP and SA headers of an SA MAD (15.2.1.1), 56 bytes."""
    MAD_LENGTH = 56
    MAD_CLASS = 0x03
    MAD_CLASS_VERSION = 0x02
    FIELDS = _sa_rows()
    if TYPE_CHECKING:
        # (the rows, as attributes for type checkers)
        baseVersion: int
        mgmtClass: int
        classVersion: int
        method: int
        status: int
        classSpecific: int
        transactionID: int
        attributeID: int
        attributeModifier: int
        RMPPVersion: int
        RMPPType: int
        RRespTime: int
        RMPPFlags: int
        RMPPStatus: int
        data1: int
        data2: int
        SMKey: int
        attributeOffset: int
        componentMask: int


class SAFormat(BinFormat):
    """SA Format (15.2.1.1): the headers and 200 bytes of data."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x03
    MAD_CLASS_VERSION = 0x02
    FIELDS = _sa_rows() + [F("data", 1600)]
    if TYPE_CHECKING:
        classSpecific: int
        RMPPVersion: int
        RMPPType: int
        RRespTime: int
        RMPPFlags: int
        RMPPStatus: int
        data1: int
        data2: int
        SMKey: int
        attributeOffset: int
        componentMask: int


_SA_GET = ("SubnAdmGet", "SubnAdmGetTable")
_SA_ALL = _SA_GET + ("SubnAdmSet", "SubnAdmDelete")


class SANodeRecord(BinStruct):
    """NodeRecord (15.2.5.2): a node's NodeInfo and description."""
    MAD_LENGTH = 108
    MAD_ATTRIBUTE_ID = 0x11
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), R(16), N("nodeInfo", SMPNodeInfo),
              N("nodeDescription", SMPNodeDescription)]


class SAPortInfoRecord(BinStruct):
    """PortInfoRecord (15.2.5.3)."""
    MAD_LENGTH = 68
    MAD_ATTRIBUTE_ID = 0x12
    METHODS = _SA_GET
    FIELDS = [F("endportLID", 16), F("portNum", 8), R(8),
              N("portInfo", SMPPortInfo)]


class SASLToVLMappingTableRecord(BinStruct):
    """SLtoVLMappingTableRecord (15.2.5.4)."""
    MAD_LENGTH = 16
    MAD_ATTRIBUTE_ID = 0x13
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("inputPortNum", 8), F("outputPortNum", 8),
              R(32), N("SLToVLMappingTable", SMPSLToVLMappingTable)]


class SASwitchInfoRecord(BinStruct):
    """SwitchInfoRecord (15.2.5.5)."""
    MAD_LENGTH = 24
    MAD_ATTRIBUTE_ID = 0x14
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), R(16), N("switchInfo", SMPSwitchInfo)]


class SALinearForwardingTableRecord(BinStruct):
    """LinearForwardingTableRecord (15.2.5.6)."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x15
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("blockNum", 16), R(32),
              N("linearForwardingTable", SMPLinearForwardingTable)]


class SARandomForwardingTableRecord(BinStruct):
    """RandomForwardingTableRecord (15.2.5.7)."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x16
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("blockNum", 16), R(32),
              N("randomForwardingTable", SMPRandomForwardingTable)]


class SAMulticastForwardingTableRecord(BinStruct):
    """MulticastForwardingTableRecord (15.2.5.8).  The position is the
    top nibble of the second 16-bit word and the block number its low 9
    bits, as opensm fills them and saquery reads them."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x17
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("position", 4), R(3), F("blockNum", 9),
              R(32), N("multicastForwardingTable",
                       SMPMulticastForwardingTable)]


class SAVLArbitrationTableRecord(BinStruct):
    """VLArbitrationTableRecord (15.2.5.9)."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x36
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("outputPortNum", 8), F("blockNum", 8), R(32),
              N("VLArbitrationTable", SMPVLArbitrationTable)]


class SASMInfoRecord(BinStruct):
    """SMInfoRecord (15.2.5.10)."""
    MAD_LENGTH = 28
    MAD_ATTRIBUTE_ID = 0x18
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), R(16), N("SMInfo", SMPSMInfo)]


class SAPKeyTableRecord(BinStruct):
    """P_KeyTableRecord (15.2.5.11)."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x33
    METHODS = _SA_GET
    FIELDS = [F("LID", 16), F("blockNum", 16), F("portNum", 8), R(24),
              N("PKeyTable", SMPPKeyTable)]


class SAInformInfoRecord(BinStruct):
    """InformInfoRecord (15.2.5.12): a subscription held by the SA."""
    MAD_LENGTH = 80
    MAD_ATTRIBUTE_ID = 0xF3
    METHODS = _SA_GET
    FIELDS = [G("subscriberGID"), F("enumeration", 16), R(48),
              N("informInfo", MADInformInfo), R(160)]


class SALinkRecord(BinStruct):
    """LinkRecord (15.2.5.13): one link between two ports."""
    MAD_LENGTH = 8
    MAD_ATTRIBUTE_ID = 0x20
    METHODS = _SA_GET
    FIELDS = [F("fromLID", 16), F("fromPort", 8), F("toPort", 8),
              F("toLID", 16), R(16)]


class SAServiceRecord(BinStruct):
    """ServiceRecord (15.2.5.14): a service registered with the SA."""
    MAD_LENGTH = 176
    MAD_ATTRIBUTE_ID = 0x31
    METHODS = _SA_ALL
    FIELDS = [
        F("serviceID", 64, "x"), G("serviceGID"), F("servicePKey", 16, "x"),
        R(16), F("serviceLease", 32), G("serviceKey"),
        S("serviceName", 64),
        F("serviceData8", 8, "x", count=16, comp=16),
        F("serviceData16", 16, "x", count=8, comp=8),
        F("serviceData32", 32, "x", count=4, comp=4),
        F("serviceData64", 64, "x", count=2, comp=2),
    ]


class SAServiceAssociationRecord(BinStruct):
    """ServiceAssociationRecord (15.2.5.15)."""
    MAD_LENGTH = 80
    MAD_ATTRIBUTE_ID = 0x3B
    METHODS = _SA_GET
    FIELDS = [G("serviceKey"), S("serviceName", 64)]


class SAPathRecord(BinStruct):
    """PathRecord (15.2.5.16): how to reach DGID/DLID from SGID/SLID.

    ``MTU``, ``rate`` and ``packetLifeTime`` are IBA encodings; the
    ``*Selector`` rows say how a query compares them (0 greater than,
    1 less than, 2 exactly, 3 largest available).
    """
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x35
    METHODS = _SA_GET
    FIELDS = [
        F("serviceID", 64, "x", comp=2), G("DGID"), G("SGID"),
        F("DLID", 16), F("SLID", 16), F("rawTraffic", 1), R(3),
        F("flowLabel", 20, "x"), F("hopLimit", 8), F("TClass", 8),
        F("reversible", 1), F("numbPath", 7), F("PKey", 16, "x"),
        F("QOSClass", 12), F("SL", 4), F("MTUSelector", 2), F("MTU", 6),
        F("rateSelector", 2), F("rate", 6), F("packetLifeTimeSelector", 2),
        F("packetLifeTime", 6), F("preference", 8),
        F("reversePathPKeyMemberBit", 2), R(14), R(32),
    ]


class SAMCMemberRecord(BinStruct):
    """MCMemberRecord (15.2.5.17): a multicast group membership."""
    MAD_LENGTH = 52
    MAD_ATTRIBUTE_ID = 0x38
    METHODS = _SA_ALL
    FIELDS = [
        G("MGID"), G("portGID"), F("QKey", 32, "x"), F("MLID", 16, "x"),
        F("MTUSelector", 2), F("MTU", 6), F("TClass", 8),
        F("PKey", 16, "x"), F("rateSelector", 2), F("rate", 6),
        F("packetLifeTimeSelector", 2), F("packetLifeTime", 6), F("SL", 4),
        F("flowLabel", 20, "x"), F("hopLimit", 8), F("scope", 4),
        F("joinState", 4, "x"), F("proxyJoin", 1), R(23),
    ]


class SAGUIDInfoRecord(BinStruct):
    """GUIDInfoRecord (15.2.5.18)."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x30
    METHODS = _SA_ALL
    FIELDS = [F("LID", 16), F("blockNum", 8), R(8), R(32),
              N("GUIDInfo", SMPGUIDInfo)]


class SATraceRecord(BinStruct):
    """TraceRecord (15.2.5.19): one hop of a path trace."""
    MAD_LENGTH = 48
    MAD_ATTRIBUTE_ID = 0x39
    METHODS = ("SubnAdmGetTraceTable",)
    FIELDS = [F("GIDPrefix", 64, "x"), F("IDGeneration", 16, "x"), R(8),
              F("nodeType", 8), F("nodeID", 64, "x"),
              F("chassisID", 64, "x"), F("entryPortID", 64, "x"),
              F("exitPortID", 64, "x"), F("entryPort", 8),
              F("exitPort", 8), R(16)]


class SAMultiPathRecord(BinStruct):
    """MultiPathRecord (15.2.5.20) with its first SDGID."""
    MAD_LENGTH = 40
    MAD_ATTRIBUTE_ID = 0x3A
    METHODS = ("SubnAdmGetMulti",)
    FIELDS = [
        F("rawTraffic", 1), R(3), F("flowLabel", 20, "x"), F("hopLimit", 8),
        F("TClass", 8), F("reversible", 1), F("numbPath", 7),
        F("PKey", 16, "x"), R(12), F("SL", 4), F("MTUSelector", 2),
        F("MTU", 6), F("rateSelector", 2), F("rate", 6),
        F("packetLifeTimeSelector", 2), F("packetLifeTime", 6), R(8),
        F("independenceSelector", 2), R(6), F("SGIDCount", 8),
        F("DGIDCount", 8), R(24), R(32), G("SDGID"),
    ]


# ---- 16.1: performance management -----------------------------------------

class PMFormat(BinFormat):
    """Performance Management MAD Format (16.1.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x04
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [R(320), F("data", 1536)]


_PM = ("PerformanceGet", "PerformanceSet")


class PMPortSamplesCtl(BinStruct):
    """PortSamplesControl (16.1.3.2)."""
    MAD_LENGTH = 192
    MAD_ATTRIBUTE_ID = 0x10
    METHODS = _PM
    FIELDS = (
        [F("opCode", 8), F("portSelect", 8), F("tick", 8), R(5),
         F("counterWidth", 3), R(2)]
        + [F(f"counterMask{i}", 3) for i in range(10)] + [R(1)]
        + [F(f"counterMask{i}", 3) for i in range(10, 15)]
        + [F("sampleMechanisms", 8), R(6), F("sampleStatus", 2),
           F("optionMask", 64, "x"), F("vendorMask", 64, "x"),
           F("sampleStart", 32), F("sampleInterval", 32), F("tag", 16, "x")]
        + [F(f"counterSelect{i}", 16, "x") for i in range(15)]
        + [R(32), F("samplesOnlyOptionMask", 64, "x"), R(896)])


class PMPortSamplesRes(BinStruct):
    """PortSamplesResult (16.1.3.4)."""
    MAD_LENGTH = 64
    MAD_ATTRIBUTE_ID = 0x11
    METHODS = ("PerformanceGet",)
    FIELDS = [F("tag", 16, "x"), R(14), F("sampleStatus", 2),
              F("counter", 32, count=15)]


class PMPortCounters(BinStruct):
    """PortCounters (16.1.3.5): the basic error and traffic counters."""
    MAD_LENGTH = 44
    MAD_ATTRIBUTE_ID = 0x12
    METHODS = _PM
    FIELDS = [
        R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
        F("symbolErrorCounter", 16), F("linkErrorRecoveryCounter", 8),
        F("linkDownedCounter", 8), F("portRcvErrors", 16),
        F("portRcvRemotePhysicalErrors", 16),
        F("portRcvSwitchRelayErrors", 16), F("portXmitDiscards", 16),
        F("portXmitConstraintErrors", 8), F("portRcvConstraintErrors", 8),
        F("counterSelect2", 8, "x"), F("localLinkIntegrityErrors", 4),
        F("excessiveBufferOverrunErrors", 4), R(16), F("VL15Dropped", 16),
        F("portXmitData", 32), F("portRcvData", 32), F("portXmitPkts", 32),
        F("portRcvPkts", 32), F("portXmitWait", 32),
    ]


class PMPortRcvErrorDetails(BinStruct):
    """PortRcvErrorDetails (16.1.4.1)."""
    MAD_LENGTH = 16
    MAD_ATTRIBUTE_ID = 0x15
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portLocalPhysicalErrors", 16),
              F("portMalformedPacketErrors", 16),
              F("portBufferOverrunErrors", 16),
              F("portDLIDMappingErrors", 16), F("portVLMappingErrors", 16),
              F("portLoopingErrors", 16)]


class PMPortXmitDiscardDetails(BinStruct):
    """PortXmitDiscardDetails (16.1.4.2)."""
    MAD_LENGTH = 12
    MAD_ATTRIBUTE_ID = 0x16
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portInactiveDiscards", 16),
              F("portNeighborMTUDiscards", 16),
              F("portSwLifetimeLimitDiscards", 16),
              F("portSwHOQLimitDiscards", 16)]


class PMPortOpRcvCounters(BinStruct):
    """PortOpRcvCounters (16.1.4.3)."""
    MAD_LENGTH = 12
    MAD_ATTRIBUTE_ID = 0x17
    METHODS = _PM
    FIELDS = [F("opCode", 8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portOpRcvPkts", 32), F("portOpRcvData", 32)]


class PMPortFlowCtlCounters(BinStruct):
    """PortFlowCtlCounters (16.1.4.4)."""
    MAD_LENGTH = 12
    MAD_ATTRIBUTE_ID = 0x18
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portXmitFlowPkts", 32), F("portRcvFlowPkts", 32)]


class PMPortVLOpPackets(BinStruct):
    """PortVLOpPackets (16.1.4.5)."""
    MAD_LENGTH = 36
    MAD_ATTRIBUTE_ID = 0x19
    METHODS = _PM
    FIELDS = [F("opCode", 8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portVLOpPackets", 16, count=16)]


class PMPortVLOpData(BinStruct):
    """PortVLOpData (16.1.4.6)."""
    MAD_LENGTH = 68
    MAD_ATTRIBUTE_ID = 0x1A
    METHODS = _PM
    FIELDS = [F("opCode", 8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portVLOpData", 32, count=16)]


class PMPortVLXmitFlowCtlUpdateErrors(BinStruct):
    """PortVLXmitFlowCtlUpdateErrors (16.1.4.7)."""
    MAD_LENGTH = 8
    MAD_ATTRIBUTE_ID = 0x1B
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portVLXmitFlowCtlUpdateErrors", 2, count=16)]


class PMPortVLXmitWaitCounters(BinStruct):
    """PortVLXmitWaitCounters (16.1.4.8)."""
    MAD_LENGTH = 36
    MAD_ATTRIBUTE_ID = 0x1C
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portVLXmitWait", 16, count=16)]


class PMSwPortVLCongestion(BinStruct):
    """SwPortVLCongestion (16.1.4.9)."""
    MAD_LENGTH = 36
    MAD_ATTRIBUTE_ID = 0x30
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("swPortVLCongestion", 16, count=16)]


class PMPortSamplesResExt(BinStruct):
    """PortSamplesResultExtended (16.1.4.10)."""
    MAD_LENGTH = 128
    MAD_ATTRIBUTE_ID = 0x1E
    METHODS = _PM
    FIELDS = [F("tag", 16, "x"), R(14), F("sampleStatus", 2),
              F("extendedWidth", 2), R(30), F("counter", 64, count=15)]


class PMPortCountersExt(BinStruct):
    """PortCountersExtended (16.1.4.11): 64-bit traffic counters."""
    MAD_LENGTH = 72
    MAD_ATTRIBUTE_ID = 0x1D
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"), R(32),
              F("portXmitData", 64), F("portRcvData", 64),
              F("portXmitPkts", 64), F("portRcvPkts", 64),
              F("portUnicastXmitPkts", 64), F("portUnicastRcvPkts", 64),
              F("portMulticastXmitPkts", 64),
              F("portMulticastRcvPkts", 64)]


class PMPortXmitDataSL(BinStruct):
    """PortXmitDataSL (annex A13): data sent per SL."""
    MAD_LENGTH = 68
    MAD_ATTRIBUTE_ID = 0x36
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portXmitDataSL", 32, count=16)]


class PMPortRcvDataSL(BinStruct):
    """PortRcvDataSL (annex A13): data received per SL."""
    MAD_LENGTH = 68
    MAD_ATTRIBUTE_ID = 0x37
    METHODS = _PM
    FIELDS = [R(8), F("portSelect", 8), F("counterSelect", 16, "x"),
              F("portRcvDataSL", 32, count=16)]


# ---- 16.2-16.5: the other GMP classes (formats only) -----------------------

class BMFormat(BinFormat):
    """Baseboard Management MAD Format (16.2.1.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x05
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [F("BKey", 64, "x"), R(256), F("data", 1536)]


class DMFormat(BinFormat):
    """Device Management MAD Format (16.3.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x06
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [R(320), F("data", 1536)]


class CMFormat(BinFormat):
    """Communication Management MAD Format (12.6, 16.7)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x07
    MAD_CLASS_VERSION = 0x02
    FIELDS = _mad_header() + [F("data", 1856)]


class SNMPFormat(BinFormat):
    """SNMP Tunneling MAD Format (16.4.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x08
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [R(256), F("RAddress", 32, "x"),
                              F("payloadLength", 8), F("segmentNumber", 8),
                              F("sourceLID", 16), F("data", 1536)]


class VendFormat(BinFormat):
    """Vendor Specific MAD Format (16.5.1)."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x09
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + [F("data", 1856)]


class VendOUIFormat(BinFormat):
    """Vendor Specific MAD Format with OUI (16.5.1): the classes
    0x30..0x4F, whose MADs carry the RMPP header and the vendor's 24-bit
    ``OUI`` before 216 bytes of data.  A vendor's format subclasses it
    with its own ``MAD_CLASS`` and ``MAD_CLASS_OUI``."""
    MAD_LENGTH = 256
    MAD_CLASS = 0x30
    MAD_CLASS_VERSION = 0x01
    FIELDS = _mad_header() + _rmpp_rows() + [R(8), F("OUI", 24, "x"),
                                             F("data", 1728)]


#: Every format, by (management class, (base version << 8) | class
#: version) (python-rdma's CLASS_TO_STRUCT).
CLASS_TO_STRUCT: Dict[Tuple[int, int], Type[BinFormat]] = {
    (c.MAD_CLASS, (1 << 8) | c.MAD_CLASS_VERSION): c
    for c in (SMPFormat, SMPFormatDirected, SAFormat, PMFormat, BMFormat,
              DMFormat, CMFormat, SNMPFormat, VendFormat, VendOUIFormat)
}

#: The formats that carry the attributes of each transactor call prefix.
_CALL_FORMATS: Dict[str, Tuple[Type[BinFormat], ...]] = {
    "SubnAdm": (SAFormat,), "Subn": (SMPFormat, SMPFormatDirected),
    "Performance": (PMFormat,), "BM": (BMFormat,), "CommMgt": (CMFormat,),
    "DevMgt": (DMFormat,), "SNMP": (SNMPFormat,), "Vend": (VendFormat,),
}

#: (format class, attribute ID) -> attribute class (python-rdma's
#: ATTR_TO_STRUCT).
ATTR_TO_STRUCT: Dict[Tuple[Type[BinFormat], int], Type[BinStruct]] = {}

# Every structure class, listed for readers and type checkers
# (tests/host/test_lint.py checks it against the classes defined here).
__all__ = [
    "MADHeader", "MADHeaderDirected", "MADClassPortInfo", "MADInformInfo",
    "MADNotice", "RMPPHeader", "SMPFormat", "SMPFormatDirected",
    "SMPLIDPortBlock", "SMPNodeDescription", "SMPNodeInfo",
    "SMPSwitchInfo", "SMPGUIDInfo", "SMPPortInfo", "SMPPKeyTable",
    "SMPSLToVLMappingTable", "SMPVLArbitrationTable",
    "SMPLinearForwardingTable", "SMPRandomForwardingTable",
    "SMPMulticastForwardingTable", "SMPSMInfo", "SMPVendorDiag",
    "SMPLedInfo", "SMPNoticeTrap", "SAHeader", "SAFormat", "SANodeRecord",
    "SAPortInfoRecord", "SASLToVLMappingTableRecord", "SASwitchInfoRecord",
    "SALinearForwardingTableRecord", "SARandomForwardingTableRecord",
    "SAMulticastForwardingTableRecord", "SAVLArbitrationTableRecord",
    "SASMInfoRecord", "SAPKeyTableRecord", "SAInformInfoRecord",
    "SALinkRecord", "SAServiceRecord", "SAServiceAssociationRecord",
    "SAPathRecord", "SAMCMemberRecord", "SAGUIDInfoRecord",
    "SATraceRecord", "SAMultiPathRecord", "PMFormat", "PMPortSamplesCtl",
    "PMPortSamplesRes", "PMPortCounters", "PMPortRcvErrorDetails",
    "PMPortXmitDiscardDetails", "PMPortOpRcvCounters",
    "PMPortFlowCtlCounters", "PMPortVLOpPackets", "PMPortVLOpData",
    "PMPortVLXmitFlowCtlUpdateErrors", "PMPortVLXmitWaitCounters",
    "PMSwPortVLCongestion", "PMPortSamplesResExt", "PMPortCountersExt",
    "PMPortXmitDataSL", "PMPortRcvDataSL", "BMFormat", "DMFormat",
    "CMFormat", "SNMPFormat", "VendFormat", "VendOUIFormat",
    "CLASS_TO_STRUCT", "ATTR_TO_STRUCT"]
_STRUCTS = [n for n in __all__ if n not in ("CLASS_TO_STRUCT",
                                            "ATTR_TO_STRUCT")]
for _n in _STRUCTS:
    _cls = globals()[_n]
    for _call in _cls.METHODS:
        for _prefix in ("SubnAdm", "Subn", "Performance", "BM", "CommMgt",
                        "DevMgt", "SNMP", "Vend"):
            if _call.startswith(_prefix):
                for _fmt in _CALL_FORMATS[_prefix]:
                    ATTR_TO_STRUCT.setdefault((_fmt, _cls.MAD_ATTRIBUTE_ID),
                                              _cls)
                break
# The whole Notice is what a trap or report carries.
ATTR_TO_STRUCT[(SMPFormat, 0x02)] = MADNotice
ATTR_TO_STRUCT[(SMPFormatDirected, 0x02)] = MADNotice
