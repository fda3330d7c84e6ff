"""InfiniBand Architecture definitions: constants and the GID type.

A leaf module: it imports nothing else of the rdma package, so every layer
may use it.
"""
from __future__ import annotations

import sys as _sys
from typing import Any, Dict, Optional, SupportsInt, Tuple, Type, cast

__all__ = ["GID", "GUID", "GID_DEFAULT_PREFIX", "IB_DEFAULT_QP1_QKEY",
           "IB_DEFAULT_QP0_QKEY",
           "DEFAULT_PKEY", "PKEY_DEFAULT", "PKEY_MEMBERSHIP_BIT",
           "IB_DEFAULT_PKEY_FULL", "IB_PKEY_FULL_MASK", "GID_TYPE_IB",
           "GID_TYPE_ROCE_V1", "GID_TYPE_ROCE_V2", "LID_MULTICAST",
           "LID_PERMISSIVE", "MTU_256", "MTU_512", "MTU_1024", "MTU_2048",
           "MTU_4096", "mtu_to_bytes", "bytes_to_mtu", "to_timer",
           "from_timer", "PR_RATE_2Gb5", "PR_RATE_10Gb", "PR_RATE_30Gb",
           "PR_RATE_5Gb", "PR_RATE_20Gb", "PR_RATE_40Gb", "PR_RATE_60Gb",
           "PR_RATE_80Gb", "PR_RATE_120Gb", "PR_RATE_14Gb", "PR_RATE_56Gb",
           "PR_RATE_112Gb", "PR_RATE_168Gb", "PR_RATE_25Gb", "PR_RATE_100Gb",
           "PR_RATE_200Gb", "PR_RATE_300Gb", "rate_to_gbps"]

#: The well-known Q_Key of QP1 (GSI).
IB_DEFAULT_QP1_QKEY = 0x80010000
#: The Q_Key of QP0 (SMI).
IB_DEFAULT_QP0_QKEY = 0
#: The default partition key, full membership.
DEFAULT_PKEY = 0xFFFF
PKEY_DEFAULT = 0xFFFF
IB_DEFAULT_PKEY_FULL = 0xFFFF
#: The membership bit of a P_Key.
IB_PKEY_FULL_MASK = 0x8000
PKEY_MEMBERSHIP_BIT = 0x8000

#: LIDs at or above this are multicast.
LID_MULTICAST = 0xC000
#: The permissive LID.
LID_PERMISSIVE = 0xFFFF

#: MTU encodings (IBA 9.6.3; the values of IBV_MTU_*).
MTU_256, MTU_512, MTU_1024, MTU_2048, MTU_4096 = 1, 2, 3, 4, 5


def mtu_to_bytes(mtu: int) -> int:
    """Bytes of an MTU encoding (``MTU_1024`` -> 1024)."""
    if not MTU_256 <= mtu <= MTU_4096:
        raise ValueError(f"invalid MTU encoding {mtu}")
    return 128 << mtu


def bytes_to_mtu(n: int) -> int:
    """The largest MTU encoding not above n bytes (1024 -> ``MTU_1024``)."""
    for mtu in range(MTU_4096, MTU_256 - 1, -1):
        if 128 << mtu <= n:
            return mtu
    raise ValueError(f"no MTU fits in {n} bytes")


#: PathRecord / static rate encodings (IBA 15.2.5.16; the IBV_RATE_* values).
PR_RATE_2Gb5, PR_RATE_10Gb, PR_RATE_30Gb, PR_RATE_5Gb = 2, 3, 4, 5
PR_RATE_20Gb, PR_RATE_40Gb, PR_RATE_60Gb, PR_RATE_80Gb = 6, 7, 8, 9
PR_RATE_120Gb, PR_RATE_14Gb, PR_RATE_56Gb, PR_RATE_112Gb = 10, 11, 12, 13
PR_RATE_168Gb, PR_RATE_25Gb, PR_RATE_100Gb, PR_RATE_200Gb = 14, 15, 16, 17
PR_RATE_300Gb = 18
#: python-rdma's spelling of the same codes (``PR_RATE_10Gb0``...).
PR_RATE_5Gb0, PR_RATE_10Gb0, PR_RATE_14Gb0 = PR_RATE_5Gb, PR_RATE_10Gb, \
    PR_RATE_14Gb
PR_RATE_20Gb0, PR_RATE_25Gb0, PR_RATE_30Gb0 = PR_RATE_20Gb, PR_RATE_25Gb, \
    PR_RATE_30Gb
PR_RATE_40Gb0, PR_RATE_56Gb0, PR_RATE_60Gb0 = PR_RATE_40Gb, PR_RATE_56Gb, \
    PR_RATE_60Gb
PR_RATE_80Gb0, PR_RATE_100Gb0, PR_RATE_112Gb0 = PR_RATE_80Gb, \
    PR_RATE_100Gb, PR_RATE_112Gb
PR_RATE_120Gb0, PR_RATE_168Gb0, PR_RATE_200Gb0 = PR_RATE_120Gb, \
    PR_RATE_168Gb, PR_RATE_200Gb
PR_RATE_300Gb0 = PR_RATE_300Gb
_RATES = {2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120,
          11: 14, 12: 56, 13: 112, 14: 168, 15: 25, 16: 100, 17: 200,
          18: 300, 19: 28, 20: 50, 21: 400, 22: 600}


def rate_to_gbps(rate: int) -> float:
    """Gb/s of a rate encoding (``PR_RATE_10Gb`` -> 10.0)."""
    try:
        return float(_RATES[rate])
    except KeyError:
        raise ValueError(f"invalid rate encoding {rate}") from None


def to_timer(seconds: float) -> int:
    """The 5-bit timer encoding (4.096 us * 2**t) that covers *seconds*:
    the smallest t with 4.096 us * 2**t >= seconds, at most 31."""
    if seconds <= 4.096e-6:
        return 1 if seconds > 0 else 0
    t = 0
    while t < 31 and 4.096e-6 * (1 << t) < seconds:
        t += 1
    return t


def from_timer(t: int) -> float:
    """Seconds of a 5-bit timer encoding (0 means infinite: returns inf)."""
    if not 0 <= t <= 31:
        raise ValueError(f"invalid timer encoding {t}")
    return float("inf") if t == 0 else 4.096e-6 * (1 << t)

#: The link-local GID subnet prefix, fe80::/64, as an int (the upper 64
#: bits of a GID: ``gid.prefix == GID_DEFAULT_PREFIX``).
GID_DEFAULT_PREFIX = 0xFE80 << 48

#: GID types (the values of IBV_GID_TYPE_*).
GID_TYPE_IB = 0
GID_TYPE_ROCE_V1 = 1
GID_TYPE_ROCE_V2 = 2


class GID(bytes):
    """A 128-bit Global Identifier, stored as its 16 bytes (network order).

    ``GID(x)`` accepts 16 raw bytes, an ``int``, another ``GID``, an
    :class:`ipaddress.IPv6Address` or any textual IPv6 form
    (``"fe80::1"``, ``"::ffff:192.0.2.1"``, the full form with every
    group).  ``str()`` prints the canonical IPv6 form; ``prefix`` and
    ``guid`` give the two 64-bit halves.
    """

    __slots__ = ()

    def __new__(cls, value: object = 0, raw: bool = False,
                prefix: object = None, guid: object = None) -> "GID":
        # python-rdma's forms: GID(None) is the zero GID, GID(b, raw=True)
        # takes 16 bytes, GID(prefix=P, guid=G) joins a subnet prefix (an
        # int, 8 bytes or a GID whose prefix is taken) and a GUID.
        if prefix is not None or guid is not None:
            if value not in (0, None):
                raise TypeError("GID(): give either a value or prefix= "
                                "and guid=, not both")
            if prefix is None or guid is None:
                raise TypeError("GID(): prefix= and guid= go together")
            return cls.from_parts(_prefix_int(prefix), int(GUID(guid)))
        if value is None:
            value = 0
        if raw and not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"GID(raw=True) takes 16 bytes, not "
                            f"{type(value).__name__}")
        if isinstance(value, GID):
            return bytes.__new__(cls, value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            if len(data) != 16:
                raise ValueError(f"a GID is 16 bytes, not {len(data)}")
            return bytes.__new__(cls, data)
        if isinstance(value, bool):
            raise TypeError("a GID cannot be made from a bool")
        if isinstance(value, int):
            if not 0 <= value < 1 << 128:
                raise ValueError(f"GID value out of range: {value:#x}")
            return bytes.__new__(cls, value.to_bytes(16, "big"))
        # ipaddress is imported when first needed (it takes a millisecond
        # of every command's start); a value cannot be an IPv6Address
        # before it is.
        ipa = _sys.modules.get("ipaddress")
        if ipa is not None and isinstance(value, ipa.IPv6Address):
            return bytes.__new__(cls, value.packed)
        if isinstance(value, str):
            import ipaddress
            try:
                addr = ipaddress.IPv6Address(value.strip())
            except ipaddress.AddressValueError as e:
                raise ValueError(f"invalid GID {value!r}: {e}") from None
            return bytes.__new__(cls, addr.packed)
        raise TypeError(f"cannot make a GID from {type(value).__name__}")

    @classmethod
    def from_parts(cls, prefix: int, guid: int) -> "GID":
        """Build a GID from its 64-bit subnet prefix and interface GUID."""
        return cls((prefix << 64) | guid)

    @property
    def prefix(self) -> int:
        """The upper 64 bits (subnet prefix)."""
        return int.from_bytes(self[:8], "big")

    @property
    def guid(self) -> int:
        """The lower 64 bits (interface ID / port GUID)."""
        return int.from_bytes(self[8:], "big")

    def __int__(self) -> int:
        return int.from_bytes(self, "big")

    def __str__(self) -> str:
        import ipaddress
        addr = ipaddress.IPv6Address(bytes(self))
        if addr.ipv4_mapped is not None:      # as inet_ntop prints it
            return f"::ffff:{addr.ipv4_mapped}"
        return str(addr)

    def __repr__(self) -> str:
        return f"GID('{self}')"

    def __bool__(self) -> bool:
        return any(self)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (GID, (bytes(self),))


def _prefix_int(prefix: object) -> int:
    """A GID subnet prefix given as an int, 8 bytes or a GID."""
    if isinstance(prefix, GID):
        return prefix.prefix
    if isinstance(prefix, (bytes, bytearray)):
        if len(prefix) != 8:
            raise ValueError(f"a GID prefix is 8 bytes, not {len(prefix)}")
        return int.from_bytes(prefix, "big")
    if isinstance(prefix, bool) or not isinstance(prefix, int):
        raise TypeError(f"a GID prefix is an int, 8 bytes or a GID, not "
                        f"{type(prefix).__name__}")
    if not 0 <= prefix < 1 << 64:
        raise ValueError(f"GID prefix out of range: {prefix:#x}")
    return prefix


class GUID(int):
    """A 64-bit GUID printed the ibv_devinfo way (``0002:c903:0000:1234``)."""

    def __new__(cls, value: object = 0, raw: bool = False) -> "GUID":
        if value is None:               # python-rdma: GUID(None) is zero
            value = 0
        if raw and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"GUID(raw=True) takes 8 bytes, not "
                            f"{type(value).__name__}")
        if isinstance(value, str):
            text = value.replace(":", "")
            try:
                v = int(text, 16)
            except ValueError:
                raise ValueError(f"invalid GUID {value!r}") from None
        elif isinstance(value, (bytes, bytearray)):
            if len(value) != 8:
                raise ValueError(f"a GUID is 8 bytes, not {len(value)}")
            v = int.from_bytes(value, "big")
        else:
            # (anything int() takes; it raises TypeError for the rest)
            v = int(cast(SupportsInt, value))
        if not 0 <= v < 1 << 64:
            raise ValueError(f"GUID value out of range: {v:#x}")
        return int.__new__(cls, v)

    def __str__(self) -> str:
        h = f"{int(self):016x}"
        return ":".join(h[i:i + 4] for i in range(0, 16, 4))

    def __repr__(self) -> str:
        return f"GUID('{self}')"


# ---- management: constants, structures, component masks ------------------
# (python-rdma's names; the structures are the tables of rdma.IBA_struct.
# rdma._mad and rdma.binstruct import GID/GUID from here at run time only,
# so importing them last makes no cycle.)


#: Node types (NodeInfo.nodeType).
NODE_CA = 1
NODE_SWITCH = 2
NODE_ROUTER = 3

#: General limits.
MAX_PORTS = 254
INVALID_PORT = 255
MAX_PKEYS = 65536
MAX_GUIDS = 256

LID_RESERVED = 0
LID_COUNT_UNICAST = 0xC000
LID_COUNT_MULTICAST = (0xFFFE - 0xC000) + 1
PKEY_PARTIAL_DEFAULT = 0x7FFF
PKEY_INVALID = 0

#: PortInfo link widths.
LINK_WIDTH_1x = 0x1
LINK_WIDTH_4x = 0x2
LINK_WIDTH_8x = 0x4
LINK_WIDTH_12x = 0x8
LINK_WIDTH_2x = 0x10
#: PortInfo link speeds.
LINK_SPEED_2Gb5 = 0x1
LINK_SPEED_5Gb0 = 0x2
LINK_SPEED_10Gb0 = 0x4
#: PortInfo extended link speeds.
LINK_SPEED_EXT_14Gb0 = 0x1
LINK_SPEED_EXT_25Gb7 = 0x2

#: PortCounters fields that count errors: (our field, infiniband-diags'
#: name), in the order ibqueryerrors prints them.
PC_ERROR_COUNTERS = (
    ("symbolErrorCounter", "SymbolErrorCounter"),
    ("linkErrorRecoveryCounter", "LinkErrorRecoveryCounter"),
    ("linkDownedCounter", "LinkDownedCounter"),
    ("portRcvErrors", "PortRcvErrors"),
    ("portRcvRemotePhysicalErrors", "PortRcvRemotePhysicalErrors"),
    ("portRcvSwitchRelayErrors", "PortRcvSwitchRelayErrors"),
    ("portXmitDiscards", "PortXmitDiscards"),
    ("portXmitConstraintErrors", "PortXmitConstraintErrors"),
    ("portRcvConstraintErrors", "PortRcvConstraintErrors"),
    ("localLinkIntegrityErrors", "LocalLinkIntegrityErrors"),
    ("excessiveBufferOverrunErrors", "ExcessiveBufferOverrunErrors"),
    ("VL15Dropped", "VL15Dropped"),
)

_WIDTH_STR = {LINK_WIDTH_1x: "1x", LINK_WIDTH_4x: "4x", LINK_WIDTH_8x: "8x",
              LINK_WIDTH_12x: "12x", LINK_WIDTH_2x: "2x"}
_SPEED_STR = {LINK_SPEED_2Gb5: "SDR", LINK_SPEED_5Gb0: "DDR",
              LINK_SPEED_10Gb0: "QDR"}
_EXT_SPEED_STR = {1: "FDR", 2: "EDR", 4: "HDR", 8: "NDR"}


def link_rate_str(pinf: BinStruct) -> str:
    """A PortInfo's active link as ibnetdiscover writes it: ``4xSDR``
    (``?`` for a width or speed it does not know)."""
    ext = getattr(pinf, "linkSpeedExtActive", 0)
    speed = (_EXT_SPEED_STR.get(ext) if ext
             else _SPEED_STR.get(pinf.linkSpeedActive))
    return f"{_WIDTH_STR.get(pinf.linkWidthActive, '?')}{speed or '?'}"


#: PortInfo port states.
PORT_STATE_NOP = 0
PORT_STATE_DOWN = 1
PORT_STATE_INIT = 2
PORT_STATE_ARMED = 3
PORT_STATE_ACTIVE = 4
#: PortInfo physical port states.
PHYS_PORT_STATE_NOP = 0
PHYS_PORT_STATE_SLEEP = 1
PHYS_PORT_STATE_POLLING = 2
PHYS_PORT_STATE_DISABLED = 3
PHYS_PORT_STATE_CFG_TRAIN = 4
PHYS_PORT_STATE_LINK_UP = 5
PHYS_PORT_STATE_LINK_ERR_RECOVERY = 6
PHYS_PORT_STATE_PHY_TEST = 7

#: MAD methods.
MAD_METHOD_GET = 0x01
MAD_METHOD_SET = 0x02
MAD_METHOD_SEND = 0x03
MAD_METHOD_TRAP = 0x05
MAD_METHOD_REPORT = 0x06
MAD_METHOD_TRAP_REPRESS = 0x07
MAD_METHOD_GET_TABLE = 0x12
MAD_METHOD_GET_TRACE_TABLE = 0x13
MAD_METHOD_GET_MULTI = 0x14
MAD_METHOD_DELETE = 0x15
MAD_METHOD_RESPONSE = 0x80
MAD_METHOD_GET_RESP = 0x81
MAD_METHOD_REPORT_RESP = 0x86
MAD_METHOD_GET_TABLE_RESP = MAD_METHOD_GET_TABLE | MAD_METHOD_RESPONSE
MAD_METHOD_DELETE_RESP = MAD_METHOD_DELETE | MAD_METHOD_RESPONSE

#: The base version of every MAD.
MAD_BASE_VERSION = 1
#: A MAD on the wire is 256 bytes (RMPP messages are several of them).
MAD_LENGTH = 256
#: SA class version.
SA_CLASS_VERSION = 2
#: The MAD, RMPP and SA headers together; SA data starts here.
SA_HEADER_LENGTH = 56

#: Notice types.
MAD_NOTICE_FATAL = 0
MAD_NOTICE_URGENT = 1
MAD_NOTICE_SECURITY = 2
MAD_NOTICE_SM = 3
MAD_NOTICE_INFO = 4

#: MAD status bits and codes (13.4.7).
MAD_STATUS_BUSY = 1 << 0
MAD_STATUS_REDIRECT = 1 << 1
MAD_STATUS_BAD_VERSION = 1 << 2
MAD_STATUS_UNSUP_METHOD = 2 << 2
MAD_STATUS_UNSUP_METHOD_ATTR_COMBO = 3 << 2
MAD_STATUS_INVALID_ATTR_OR_MODIFIER = 7 << 2
MAD_STATUS_DIRECTED_RESPONSE = 1 << 15
#: SA class-specific status codes.
MAD_STATUS_SA_NO_RESOURCE = 1
MAD_STATUS_SA_REQ_INVALID = 2
MAD_STATUS_SA_NO_RECORDS = 3
MAD_STATUS_SA_TOO_MANY_RECORDS = 4
MAD_STATUS_SA_INVALID_GID = 5
MAD_STATUS_SA_INSUFFICIENT_COMPONENTS = 6
MAD_STATUS_SA_DENIED = 7
#: The same codes by the names of :mod:`rdma.sa` (``e.sa_status``).
SA_STATUS_NO_RESOURCES = MAD_STATUS_SA_NO_RESOURCE
SA_STATUS_REQ_INVALID = MAD_STATUS_SA_REQ_INVALID
SA_STATUS_NO_RECORDS = MAD_STATUS_SA_NO_RECORDS
SA_STATUS_TOO_MANY_RECORDS = MAD_STATUS_SA_TOO_MANY_RECORDS
SA_STATUS_REQ_INVALID_GID = MAD_STATUS_SA_INVALID_GID
SA_STATUS_REQ_INSUFFICIENT_COMPONENTS = MAD_STATUS_SA_INSUFFICIENT_COMPONENTS
SA_STATUS_REQ_DENIED = MAD_STATUS_SA_DENIED
MAD_STATUS_CLASS_SHIFT = 8
MAD_STATUS_CLASS_MASK = 0x7F

#: Management classes.
MAD_SUBNET = 0x01
MAD_SUBNET_DIRECTED = 0x81
MAD_SUBNET_ADMIN = 0x03
MAD_PERFORMANCE = 0x04
MAD_BOARD_MANAGEMENT = 0x05
MAD_DEVICE = 0x06
MAD_COMMUNICATIONS = 0x07
MAD_SNMP = 0x08

#: RMPP flags and types.
RMPP_ACTIVE = 1 << 0
RMPP_FIRST = 1 << 1
RMPP_LAST = 1 << 2
RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_FLAG_LAST = \
    RMPP_ACTIVE, RMPP_FIRST, RMPP_LAST
RMPP_TYPE_DATA = 1
RMPP_TYPE_ACK = 2
RMPP_TYPE_STOP = 3
RMPP_TYPE_ABORT = 4

#: JoinState bit of a full member (MCMemberRecord).
MCMEMBER_JOIN_FULL = 0x1
#: The IPoIB broadcast group of the default partition (full P_Key).
MGID_IPOIB_BROADCAST = "ff12:401b:ffff::ffff:ffff"

#: ClassPortInfo capabilityMask bits.
generatesTraps = 1 << 0
implementsNotice = 1 << 1
#: PMA ClassPortInfo capabilityMask bits.
allPortSelect = 1 << 8
portCountersXmitWaitSupported = 1 << 12
isExtendedWidthSupported = 1 << 9
isExtendedWidthSupportedNoIETF = 1 << 10

#: PortInfo capabilityMask bits.
isSM = 1 << 1
isNoticeSupported = 1 << 2
isTrapSupported = 1 << 3
isAutomaticMigrationSupported = 1 << 5
isSLMappingSupported = 1 << 6
isMKeyNVRAM = 1 << 7
isPKeyNVRAM = 1 << 8
isLEDInfoSupported = 1 << 9
isSMdisabled = 1 << 10
isSystemImageGUIDSupported = 1 << 11
isPKeySwitchExternalPortTrapSupported = 1 << 12
isExtendedSpeedsSupported = 1 << 14
isCommunicationManagementSupported = 1 << 16
isSNMPTunnelingSupported = 1 << 17
isReinitSupported = 1 << 18
isDeviceManagementSupported = 1 << 19
isVendorClassSupported = 1 << 20
isDRNoticeSupported = 1 << 21
isCapabilityMaskNoticeSupported = 1 << 22
isBootManagementSupported = 1 << 23
isLinkRoundTripLatencySupported = 1 << 24
isClientReregistrationSupported = 1 << 25
isOtherLocalChangesNoticeSupported = 1 << 26
isLinkSpeedWidthPairsTableSupported = 1 << 27

#: Attribute IDs (the same numbers as each class's MAD_ATTRIBUTE_ID).
MAD_ATTR_CLASS_PORT_INFO = 0x0001
MAD_ATTR_NOTICE = 0x0002
MAD_ATTR_INFORM_INFO = 0x0003
MAD_ATTR_NODE_DESCRIPTION = 0x0010
MAD_ATTR_NODE_INFO = 0x0011
MAD_ATTR_SWITCH_INFO = 0x0012
MAD_ATTR_GUID_INFO = 0x0014
MAD_ATTR_PORT_INFO = 0x0015
MAD_ATTR_PKEY_TABLE = 0x0016
MAD_ATTR_SL_TO_VL_MAPPING_TABLE = 0x0017
MAD_ATTR_VL_ARBITRATION_TABLE = 0x0018
MAD_ATTR_LINEAR_FORWARDING_TABLE = 0x0019
MAD_ATTR_RANDOM_FORWARDING_TABLE = 0x001A
MAD_ATTR_MULTICAST_FORWARDING_TABLE = 0x001B
MAD_ATTR_SM_INFO = 0x0020
MAD_ATTR_VENDOR_DIAG = 0x0030
MAD_ATTR_LED_INFO = 0x0031


#: The all-zero GUID and GID (python-rdma's names).
ZERO_GUID = GUID(0)
ZERO_GID = GID(0)


def conv_lid(s: str, multicast: "bool | None" = False) -> int:
    """A LID from text (``int(s, 0)``): unicast when ``multicast`` is
    False, multicast when True, any 16-bit value when None.

    Raises :class:`ValueError` naming the text."""
    lid = int(s, 0)
    if multicast is None:
        if not 0 <= lid <= 0xFFFF:
            raise ValueError(f"{s!r} is not a LID")
        return lid
    if multicast:
        if lid < LID_MULTICAST or lid >= LID_PERMISSIVE:
            raise ValueError(f"{s!r} is not a multicast LID")
    elif lid >= LID_MULTICAST or lid <= LID_RESERVED:
        raise ValueError(f"{s!r} is not a unicast LID")
    return lid


def lid_lmc_range(lid: int, lmc: int) -> range:
    """Every LID that ``lid`` with ``lmc`` covers."""
    n = 1 << lmc
    lid &= ~(n - 1)
    return range(lid, lid + n)


def const_str(prefix: str, value: int, with_int: bool = False,
              me: object = None) -> str:
    """The name of the constant of this module that starts with
    ``prefix`` and equals ``value`` (``MAD_METHOD_GET``); with
    ``with_int`` the number follows in brackets."""
    mod = me if me is not None else _sys.modules[__name__]
    for k, v in vars(mod).items():
        if k.startswith(prefix) and type(v) is int and v == value:
            return f"{k}({value})" if with_int else k
    return f"{prefix}??({value})" if with_int else f"{prefix}?{value}"


def get_fmt_payload(
        class_id: int, class_version: int, attribute_id: int
) -> Tuple[Optional[Type[BinFormat]], Optional[Type[BinStruct]]]:
    """The ``(format class, attribute class)`` of a MAD; ``class_version``
    is ``(baseVersion << 8) | classVersion``.  None for what is unknown."""
    fmt = CLASS_TO_STRUCT.get((class_id, class_version))
    if fmt is None:
        return (None, None)
    return (fmt, ATTR_TO_STRUCT.get((fmt, attribute_id)))


class ComponentMask:
    """python-rdma's wrapper that builds an SA component mask as an
    attribute is used: ``cm = ComponentMask(SAPathRecord()); cm.DGID =
    gid; umad.SubnAdmGet(cm)`` sends DGID's component bit.  Reading an
    array or a nested structure's row through the wrapper touches it too
    (``cm.nodeInfo.nodeGUID = x``)."""

    #: The component mask built so far.
    component_mask = 0
    _obj: BinStruct

    def __init__(self, obj: "BinStruct", mask: int = 0):
        object.__setattr__(self, "component_mask", mask)
        object.__setattr__(self, "_obj", obj)

    @property
    def payload(self) -> "BinStruct":
        """The wrapped structure."""
        return self._obj

    def _bits(self, name: str) -> int:
        try:
            return type(self._obj).component_bit(name)
        except (KeyError, AttributeError):
            raise ValueError(f"{type(self._obj).__name__} has no component "
                             f"{name!r}") from None

    def touch(self, name: str) -> None:
        """Include component ``name`` (a dotted name reaches into a nested
        structure).  Raises :class:`ValueError` for an unknown name."""
        object.__setattr__(self, "component_mask",
                           self.component_mask | self._bits(name))

    def unmask(self, name: str) -> None:
        """Exclude component ``name``."""
        object.__setattr__(self, "component_mask",
                           self.component_mask & ~self._bits(name))

    def _touch(self, name: str) -> None:
        try:
            self.touch(name)
        except ValueError:
            pass

    def __getattr__(self, name: str) -> Any:
        res = getattr(self._obj, name)
        if isinstance(res, BinStruct):
            return ComponentMask._Proxy(self, name, res)
        if isinstance(res, (bytearray, list)):
            self._touch(name)
        return res

    def __setattr__(self, name: str, value: object) -> None:
        if name == "component_mask":
            # python-rdma's programs add bits the wrapper cannot see
            # (one element of an array: ``cm.component_mask |= 1 << n``).
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value < 1 << 64:
                raise ValueError(f"component_mask must be a 64-bit mask, "
                                 f"not {value!r}")
            object.__setattr__(self, name, value)
            return
        setattr(self._obj, name, value)
        self._touch(name)

    class _Proxy:
        _parent: ComponentMask
        _name: str
        _obj: BinStruct

        def __init__(self, parent: "ComponentMask", name: str,
                     obj: "BinStruct"):
            object.__setattr__(self, "_parent", parent)
            object.__setattr__(self, "_name", name)
            object.__setattr__(self, "_obj", obj)

        def __getattr__(self, name: str) -> Any:
            res = getattr(self._obj, name)
            full = f"{self._name}.{name}"
            if isinstance(res, BinStruct):
                return ComponentMask._Proxy(self._parent, full, res)
            if isinstance(res, (bytearray, list)):
                self._parent._touch(full)
            return res

        def __setattr__(self, name: str, value: object) -> None:
            setattr(self._obj, name, value)
            self._parent._touch(f"{self._name}.{name}")


from rdma.binstruct import BinFormat, BinStruct  # noqa: E402
from rdma.IBA_struct import *  # noqa: E402,F401,F403
from rdma.IBA_struct import ATTR_TO_STRUCT, CLASS_TO_STRUCT  # noqa: E402
from rdma import IBA_struct as _structs  # noqa: E402
from rdma._mad import (  # noqa: E402
    SAError, MADError, MADClassError, MADTimeoutError, MADFormatError,
    mad_status_words, sa_status_word, lifetime_to_us)



def _member_formats() -> Dict[str, str]:
    """python-rdma's ``MEMBER_FORMATS``: row name -> ``"hex"`` or
    ``"str"`` for the names that print that way in every structure."""
    seen: Dict[str, set[Optional[str]]] = {}
    for cls in ATTR_TO_STRUCT.values():
        for f in cls.FIELDS:
            if f.reserved or f.kind != "int":
                continue
            fmt = {"x": "hex", "s": "str"}.get(f.fmt)
            seen.setdefault(f.name, set()).add(fmt)
    out: Dict[str, str] = {}
    for k, v in seen.items():
        fmt = v.pop() if len(v) == 1 else None
        if fmt is not None:
            out[k] = fmt
    return out


#: Row name -> python-rdma display format (``"hex"``, ``"str"``) for
#: names that print so everywhere; programs may add their own rows
#: (a ``"hex"`` entry makes a decimal row print in hex).
MEMBER_FORMATS = _member_formats()

# (one form per statement, so that type checkers follow them)
__all__ += _structs.__all__
__all__ += [
    "BinStruct", "BinFormat", "ComponentMask", "MADError", "SAError",
    "MADClassError", "MADTimeoutError", "MADFormatError",
    "mad_status_words", "sa_status_word", "lifetime_to_us",
    "MCMEMBER_JOIN_FULL", "conv_lid", "lid_lmc_range", "const_str",
    "get_fmt_payload", "PC_ERROR_COUNTERS", "link_rate_str", "ZERO_GUID",
    "ZERO_GID", "MEMBER_FORMATS"]
__all__ += [n for n in list(globals()) if n.startswith("PR_RATE_") and
            n.endswith("Gb0")]
