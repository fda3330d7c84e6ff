"""MAD and SA structures: the IBA wire layouts and their codec.

Every structure is a :class:`BinStruct` subclass whose ``FIELDS`` list the
IBA table of the attribute in order, reserved fields included, with their
widths in bits.  Offsets are the running sum, so a layout reads like the
table in the specification and its total is checked against ``LENGTH``.
All fields are big endian and packed most significant bit first, the way
IBA numbers bits (bit 0 of a table is the MSB of byte 0).

SA records know their *component mask*: every component of the record
(reserved ones included, a nested struct contributing one component per
field, an array one per element) has the bit of its position in the table.
Assigning a field, or passing it to the constructor, marks it as set;
:meth:`BinStruct.component_mask` ORs the bits of the set fields, which is
what a query sends.

Field names follow python-rdma (``SAPathRecord.DGID``, ``.SLID``,
``.MTU``, ``.packetLifeTime``...).  Values are ints, :class:`rdma.IBA.GID`
for 128-bit addresses, ``bytes`` for strings (``nodeDescription``,
``serviceName``), tuples for arrays and nested :class:`BinStruct` objects.
"""
from __future__ import annotations

import sys
from typing import (Any, ClassVar, Dict, Iterator, List, Optional, TextIO,
                    Tuple, Type)

from rdma._errors import RDMAError

__all__ = [
    "BinStruct", "MADHeader", "RMPPHeader", "SAHeader", "SAFormat",
    "SMPNodeInfo", "SMPPortInfo", "MADInformInfo", "MADClassPortInfo",
    "SAPathRecord", "SANodeRecord", "SAPortInfoRecord", "SAServiceRecord",
    "SAMCMemberRecord", "SALinkRecord", "SAInformInfoRecord",
    "SA_RECORDS", "MADError", "SAError", "MADTimeoutError",
    "MADFormatError", "mad_status_words", "sa_status_word",
    "decode_sa_reply", "SAReply", "encode_sa_request",
    "MAD_BASE_VERSION", "MAD_SUBNET_ADMIN", "SA_CLASS_VERSION",
    "MAD_METHOD_GET", "MAD_METHOD_SET", "MAD_METHOD_GET_RESP",
    "MAD_METHOD_GET_TABLE", "MAD_METHOD_GET_TABLE_RESP",
    "MAD_METHOD_DELETE", "MAD_METHOD_DELETE_RESP", "MAD_METHOD_RESPONSE",
    "MAD_LENGTH", "SA_HEADER_LENGTH", "RMPP_FLAG_ACTIVE",
    "RMPP_FLAG_FIRST", "RMPP_FLAG_LAST", "RMPP_TYPE_DATA",
    "MTU_256", "MTU_512", "MTU_1024", "MTU_2048", "MTU_4096",
    "mtu_to_bytes", "rate_to_gbps", "lifetime_to_us",
    "MCMEMBER_JOIN_FULL", "MGID_IPOIB_BROADCAST",
]

#: The base version of every MAD.
MAD_BASE_VERSION = 1
#: Management class of the Subnet Administrator.
MAD_SUBNET_ADMIN = 0x03
#: SA class version.
SA_CLASS_VERSION = 2
#: A MAD on the wire is 256 bytes (RMPP messages are several of them).
MAD_LENGTH = 256
#: The MAD, RMPP and SA headers together; SA data starts here.
SA_HEADER_LENGTH = 56

MAD_METHOD_GET = 0x01
MAD_METHOD_SET = 0x02
MAD_METHOD_GET_RESP = 0x81
MAD_METHOD_GET_TABLE = 0x12
MAD_METHOD_GET_TABLE_RESP = 0x92
MAD_METHOD_DELETE = 0x15
MAD_METHOD_DELETE_RESP = 0x95
#: The R bit of ``method``: set in every response.
MAD_METHOD_RESPONSE = 0x80

RMPP_TYPE_DATA = 1
RMPP_FLAG_ACTIVE = 0x1
RMPP_FLAG_FIRST = 0x2
RMPP_FLAG_LAST = 0x4

#: MTU encodings (IBA 14.2.5.6 / 15.2.5.16).
MTU_256, MTU_512, MTU_1024, MTU_2048, MTU_4096 = 1, 2, 3, 4, 5

#: JoinState bit of a full member (MCMemberRecord).
MCMEMBER_JOIN_FULL = 0x1
#: The IPoIB broadcast group of the default partition (full P_Key).
MGID_IPOIB_BROADCAST = "ff12:401b:ffff::ffff:ffff"

_RATES = {2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120,
          11: 14, 12: 56, 13: 112, 14: 168, 15: 25, 16: 100, 17: 200,
          18: 300, 19: 28, 20: 50, 21: 400, 22: 600}


def mtu_to_bytes(mtu: int) -> int:
    """Return the byte size of an MTU encoding (1 -> 256 ... 5 -> 4096)."""
    if not 1 <= mtu <= 5:
        raise ValueError(f"invalid MTU encoding {mtu}")
    return 128 << mtu


def rate_to_gbps(rate: int) -> float:
    """Return the data rate in Gb/s of a rate encoding (3 -> 10)."""
    try:
        return _RATES[rate]
    except KeyError:
        raise ValueError(f"invalid rate encoding {rate}") from None


def lifetime_to_us(exponent: int) -> float:
    """Return the time in microseconds of a 4.096 us * 2**exponent value."""
    return 4.096 * (1 << exponent)


# ---- the codec ------------------------------------------------------------

class _Field:
    """One row of an IBA table: a named run of bits."""

    __slots__ = ("name", "bits", "kind", "count", "struct", "comp", "fmt",
                 "offset", "comp_index")

    def __init__(self, name: Optional[str], bits: int, kind: str = "int",
                 count: int = 1, struct: Optional[type] = None,
                 comp: Optional[int] = None, fmt: str = "d"):
        self.name = name            # None for a reserved field
        self.bits = bits            # width of one element
        self.kind = kind            # int, gid, str, struct
        self.count = count          # elements (arrays)
        self.struct = struct        # BinStruct subclass for kind == struct
        self.fmt = fmt              # print format of ints: d or x
        self.offset = 0             # bit offset, set by the class
        self.comp_index = 0         # first component bit, set by the class
        if comp is None:
            comp = (struct.NUM_COMPONENTS if kind == "struct" else count)
        self.comp = comp            # component bits it occupies


def F(name: str, bits: int, fmt: str = "d", *, count: int = 1,
      comp: Optional[int] = None) -> _Field:
    """An integer field (``fmt`` ``x`` prints it in hex)."""
    return _Field(name, bits, "int", count=count, comp=comp, fmt=fmt)


def G(name: str) -> _Field:
    """A 128-bit GID field."""
    return _Field(name, 128, "gid")


def S(name: str, nbytes: int) -> _Field:
    """A fixed-size string field (bytes, NUL padded)."""
    return _Field(name, nbytes * 8, "str")


def N(name: str, struct: type) -> _Field:
    """A nested structure."""
    return _Field(name, struct.LENGTH * 8, "struct", struct=struct)


def R(bits: int) -> _Field:
    """A reserved field (one component)."""
    return _Field(None, bits, "int")


def _gid_type():
    import rdma.IBA as iba
    return iba.GID


def _get_bits(buf: bytes, off: int, bits: int) -> int:
    start = off >> 3
    end = (off + bits + 7) >> 3
    v = int.from_bytes(buf[start:end], "big")
    return (v >> ((end << 3) - off - bits)) & ((1 << bits) - 1)


def _put_bits(buf: bytearray, off: int, bits: int, value: int) -> None:
    start = off >> 3
    end = (off + bits + 7) >> 3
    shift = (end << 3) - off - bits
    mask = ((1 << bits) - 1) << shift
    v = int.from_bytes(buf[start:end], "big")
    v = (v & ~mask) | ((value << shift) & mask)
    buf[start:end] = v.to_bytes(end - start, "big")


class BinStruct:
    """Base of the MAD structures: a fixed-size, big-endian record.

    ``Cls(**fields)`` builds one (the named fields are marked as set),
    ``Cls.unpack(buf)`` decodes one, ``obj.pack()`` encodes it.
    Assigning an unknown attribute raises :class:`AttributeError`, and a
    value that does not fit its field raises :class:`ValueError` at pack
    time naming the field.
    """

    #: The IBA table of the structure, set by each subclass.
    FIELDS: ClassVar[List[_Field]] = []
    #: Size in bytes.
    LENGTH: ClassVar[int] = 0
    #: The SA attribute ID (records only).
    ATTRIBUTE_ID: ClassVar[int] = 0
    #: Number of component mask bits the structure spans.
    NUM_COMPONENTS: ClassVar[int] = 0
    _by_name: ClassVar[Dict[str, _Field]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        off = comp = 0
        by_name: Dict[str, _Field] = {}
        for f in cls.FIELDS:
            f.offset = off
            f.comp_index = comp
            off += f.bits * f.count
            comp += f.comp
            if f.name is not None:
                by_name[f.name] = f
        if off != cls.LENGTH * 8:
            raise TypeError(f"{cls.__name__}: fields are {off} bits, "
                            f"LENGTH says {cls.LENGTH * 8}")
        cls.NUM_COMPONENTS = comp
        cls._by_name = by_name

    def __init__(self, **fields: Any):
        object.__setattr__(self, "_set", set())
        for f in self.FIELDS:
            if f.name is not None:
                object.__setattr__(self, f.name, self._zero(f))
        for name, value in fields.items():
            setattr(self, name, value)

    @staticmethod
    def _zero(f: _Field) -> Any:
        if f.kind == "struct":
            return f.struct()
        if f.kind == "gid":
            one: Any = _gid_type()(0)
        elif f.kind == "str":
            one = b""
        else:
            one = 0
        return tuple([one] * f.count) if f.count > 1 else one

    def __setattr__(self, name: str, value: Any) -> None:
        f = self._by_name.get(name)
        if f is None:
            raise AttributeError(f"{type(self).__name__} has no field "
                                 f"{name!r}")
        if f.kind == "gid" and not isinstance(value, _gid_type()):
            value = _gid_type()(value)
        elif f.kind == "str" and isinstance(value, str):
            value = value.encode()
        elif f.count > 1:
            value = tuple(value)
            if len(value) != f.count:
                raise ValueError(f"{type(self).__name__}.{name} has "
                                 f"{f.count} elements, not {len(value)}")
        elif f.kind == "struct" and not isinstance(value, f.struct):
            raise TypeError(f"{type(self).__name__}.{name} must be a "
                            f"{f.struct.__name__}")
        object.__setattr__(self, name, value)
        self._set.add(name)

    # -- encoding

    def pack(self) -> bytes:
        """Return the structure's ``LENGTH`` bytes."""
        buf = bytearray(self.LENGTH)
        self.pack_into(buf, 0)
        return bytes(buf)

    def pack_into(self, buf: bytearray, offset: int = 0) -> None:
        """Encode into ``buf`` at byte ``offset``."""
        base = offset * 8
        for f in self.FIELDS:
            if f.name is None:
                continue
            value = getattr(self, f.name)
            values = value if f.count > 1 else (value,)
            for i, v in enumerate(values):
                off = base + f.offset + i * f.bits
                if f.kind == "struct":
                    v.pack_into(buf, off >> 3)
                elif f.kind == "gid":
                    buf[off >> 3:(off >> 3) + 16] = bytes(v)
                elif f.kind == "str":
                    raw = bytes(v)
                    n = f.bits >> 3
                    if len(raw) > n:
                        raise ValueError(f"{type(self).__name__}.{f.name} "
                                         f"is at most {n} bytes")
                    buf[off >> 3:(off >> 3) + n] = raw.ljust(n, b"\0")
                else:
                    if not isinstance(v, int) or not 0 <= v < (1 << f.bits):
                        raise ValueError(
                            f"{type(self).__name__}.{f.name} = {v!r} does "
                            f"not fit in {f.bits} bits")
                    _put_bits(buf, off, f.bits, v)

    @classmethod
    def unpack(cls, buf: bytes, offset: int = 0) -> "BinStruct":
        """Decode from ``buf`` at byte ``offset`` (nothing marked as set).

        Raises :class:`MADFormatError` if ``buf`` is too short.
        """
        buf = bytes(buf)
        if len(buf) < offset + cls.LENGTH:
            raise MADFormatError(f"{cls.__name__} needs {cls.LENGTH} bytes "
                                 f"at offset {offset}, have "
                                 f"{max(0, len(buf) - offset)}")
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_set", set())
        base = offset * 8
        gid = _gid_type()
        for f in cls.FIELDS:
            if f.name is None:
                continue
            vals = []
            for i in range(f.count):
                off = base + f.offset + i * f.bits
                if f.kind == "struct":
                    v: Any = f.struct.unpack(buf, off >> 3)
                elif f.kind == "gid":
                    v = gid(buf[off >> 3:(off >> 3) + 16])
                elif f.kind == "str":
                    v = buf[off >> 3:(off >> 3) + (f.bits >> 3)]
                else:
                    v = _get_bits(buf, off, f.bits)
                vals.append(v)
            object.__setattr__(obj, f.name,
                               tuple(vals) if f.count > 1 else vals[0])
        return obj

    # -- component masks

    def component_mask(self) -> int:
        """Return the SA component mask of the fields that were set."""
        mask = 0
        for f in self.FIELDS:
            if f.name is None:
                continue
            if f.kind == "struct":
                sub = getattr(self, f.name)
                mask |= sub.component_mask() << f.comp_index
                if f.name in self._set and not sub._set:
                    mask |= ((1 << f.comp) - 1) << f.comp_index
            elif f.name in self._set:
                mask |= ((1 << f.comp) - 1) << f.comp_index
        return mask

    @classmethod
    def component_bit(cls, name: str) -> int:
        """Return the component mask bits of one field (by name)."""
        f = cls._by_name[name]
        return ((1 << f.comp) - 1) << f.comp_index

    def fields_set(self) -> List[str]:
        """Return the names of the fields that were assigned."""
        return [f.name for f in self.FIELDS if f.name in self._set]

    # -- Python protocol

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        for f in self.FIELDS:
            if f.name is not None:
                yield f.name, getattr(self, f.name)

    def to_dict(self) -> Dict[str, Any]:
        """Return the fields as a JSON-friendly dict (GIDs and strings as
        text, nested structs as dicts)."""
        out: Dict[str, Any] = {}
        for f in self.FIELDS:
            if f.name is None:
                continue
            v = getattr(self, f.name)
            if f.kind == "struct":
                v = v.to_dict()
            elif f.kind == "gid":
                v = [str(x) for x in v] if f.count > 1 else str(v)
            elif f.kind == "str":
                v = _text(v)
            elif f.count > 1:
                v = list(v)
            out[f.name] = v
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.pack() == other.pack()      # type: ignore[union-attr]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={v!r}" for n, v in self
                          if not _is_zero(v))
        return f"{type(self).__name__}({parts})"

    def __reduce__(self):
        return (_rebuild, (type(self), self.pack(), sorted(self._set)))

    def printer(self, file: Optional[TextIO] = None, indent: int = 2,
                header: bool = True) -> None:
        """Print the fields the way ``saquery`` dumps a record."""
        out = file if file is not None else sys.stdout
        if header:
            name = type(self).__name__
            for p in ("SA", "SMP", "MAD"):
                if name.startswith(p) and name not in ("SAHeader",
                                                       "SAFormat"):
                    name = name[len(p):]
                    break
            out.write(f"{name} dump:\n")
        tab = "\t" * indent
        for f in self.FIELDS:
            if f.name is None:
                continue
            v = getattr(self, f.name)
            if f.kind == "struct":
                out.write(f"{tab}{f.name}:\n")
                v.printer(out, indent + 1, header=False)
                continue
            text = (", ".join(_fmt(f, x) for x in v) if f.count > 1
                    else _fmt(f, v))
            out.write(f"{tab}{f.name:.<24}{text}\n")

    def __str__(self) -> str:
        import io
        s = io.StringIO()
        self.printer(s)
        return s.getvalue()


def _rebuild(cls: Type[BinStruct], raw: bytes, set_names: List[str]):
    obj = cls.unpack(raw)
    obj._set.update(set_names)
    return obj


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _is_zero(v: Any) -> bool:
    if isinstance(v, BinStruct):
        return not any(v.pack())
    if isinstance(v, tuple):
        return all(_is_zero(x) for x in v)
    if isinstance(v, bytes):
        return not any(v)
    return not v


def _fmt(f: _Field, v: Any) -> str:
    if f.kind == "gid":
        return str(v)
    if f.kind == "str":
        return _text(v)
    if f.fmt == "x":
        return f"0x{v:0{(f.bits + 3) // 4}x}"
    return str(v)


# ---- MAD headers (IBA 13.4.2, 13.6.2.1, 15.2.1.1) -------------------------

class MADHeader(BinStruct):
    """The common MAD header (IBA 13.4.2); ``method`` includes the R bit."""
    LENGTH = 24
    FIELDS = [
        F("baseVersion", 8), F("mgmtClass", 8, "x"), F("classVersion", 8),
        F("method", 8, "x"), F("status", 16, "x"),
        F("classSpecific", 16, "x"), F("transactionID", 64, "x"),
        F("attributeID", 16, "x"), R(16), F("attributeModifier", 32, "x"),
    ]


class RMPPHeader(BinStruct):
    """The RMPP header (IBA 13.6.2.1); data1/data2 are SegmentNumber and
    PayloadLength/NewWindowLast."""
    LENGTH = 12
    FIELDS = [
        F("RMPPVersion", 8), F("RMPPType", 8), F("RRespTime", 5),
        F("RMPPFlags", 3, "x"), F("RMPPStatus", 8), F("data1", 32),
        F("data2", 32),
    ]


class SAHeader(BinStruct):
    """The three headers of an SA MAD (56 bytes, IBA 15.2.1.1)."""
    LENGTH = 56
    FIELDS = [
        N("MADHeader", MADHeader), N("RMPPHeader", RMPPHeader),
        F("SMKey", 64, "x"), F("attributeOffset", 16), R(16),
        F("componentMask", 64, "x"),
    ]


class SAFormat(BinStruct):
    """A whole single SA MAD: the headers and 200 bytes of data."""
    LENGTH = 256
    FIELDS = [N("SAHeader", SAHeader), S("data", 200)]


# ---- SMP attributes carried inside SA records (IBA 14.2.5) ---------------

class SMPNodeInfo(BinStruct):
    """NodeInfo (IBA 14.2.5.3)."""
    LENGTH = 40
    FIELDS = [
        F("baseVersion", 8), F("classVersion", 8), F("nodeType", 8),
        F("numPorts", 8), F("systemImageGUID", 64, "x"),
        F("nodeGUID", 64, "x"), F("portGUID", 64, "x"),
        F("partitionCap", 16), F("deviceID", 16, "x"),
        F("revision", 32, "x"), F("localPortNum", 8), F("vendorID", 24, "x"),
    ]


class SMPPortInfo(BinStruct):
    """PortInfo (IBA 14.2.5.6), 64 bytes."""
    LENGTH = 64
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


class MADInformInfo(BinStruct):
    """InformInfo (IBA 13.4.8.3), the subscription to traps."""
    LENGTH = 36
    ATTRIBUTE_ID = 0x0003
    FIELDS = [
        G("GID"), F("LIDRangeBegin", 16), F("LIDRangeEnd", 16), R(16),
        F("isGeneric", 8), F("subscribe", 8), F("type", 16),
        F("trapNumber", 16), F("QPN", 24), R(3), F("respTimeValue", 5),
        R(8), F("producerType", 24, "x"),
    ]


class MADClassPortInfo(BinStruct):
    """ClassPortInfo (IBA 13.4.8.1)."""
    LENGTH = 72
    ATTRIBUTE_ID = 0x0001
    FIELDS = [
        F("baseVersion", 8), F("classVersion", 8),
        F("capabilityMask", 16, "x"), F("capabilityMask2", 27, "x"),
        F("respTimeValue", 5), G("redirectGID"), F("redirectTC", 8),
        F("redirectSL", 4), F("redirectFL", 20), F("redirectLID", 16),
        F("redirectPKey", 16, "x"), R(8), F("redirectQP", 24, "x"),
        F("redirectQKey", 32, "x"), G("trapGID"), F("trapTC", 8),
        F("trapSL", 4), F("trapFL", 20), F("trapLID", 16),
        F("trapPKey", 16, "x"), F("trapHL", 8), F("trapQP", 24, "x"),
        F("trapQKey", 32, "x"),
    ]


# ---- SA records (IBA 15.2.5) ----------------------------------------------

class SAPathRecord(BinStruct):
    """PathRecord (IBA 15.2.5.16): how to reach DGID/DLID from SGID/SLID.

    ``MTU``, ``rate`` and ``packetLifeTime`` are IBA encodings; the
    ``*Selector`` fields say how a query compares them (0 greater than,
    1 less than, 2 exactly, 3 largest available).
    """
    LENGTH = 64
    ATTRIBUTE_ID = 0x0035
    FIELDS = [
        F("serviceID", 64, "x", comp=2), G("DGID"), G("SGID"),
        F("DLID", 16), F("SLID", 16), F("rawTraffic", 1), R(3),
        F("flowLabel", 20, "x"), F("hopLimit", 8), F("TClass", 8),
        F("reversible", 1), F("numbPath", 7), F("PKey", 16, "x"),
        F("QOSClass", 12), F("SL", 4), F("MTUSelector", 2), F("MTU", 6),
        F("rateSelector", 2), F("rate", 6), F("packetLifeTimeSelector", 2),
        F("packetLifeTime", 6), F("preference", 8), R(48),
    ]


class SANodeRecord(BinStruct):
    """NodeRecord (IBA 15.2.5.2): a node's NodeInfo and description."""
    LENGTH = 108
    ATTRIBUTE_ID = 0x0011
    FIELDS = [
        F("LID", 16), R(16), N("nodeInfo", SMPNodeInfo),
        S("nodeDescription", 64),
    ]


class SAPortInfoRecord(BinStruct):
    """PortInfoRecord (IBA 15.2.5.3)."""
    LENGTH = 68
    ATTRIBUTE_ID = 0x0012
    FIELDS = [
        F("endportLID", 16), F("portNum", 8), F("options", 8, "x"),
        N("portInfo", SMPPortInfo),
    ]


class SAServiceRecord(BinStruct):
    """ServiceRecord (IBA 15.2.5.14): a service registered with the SA."""
    LENGTH = 176
    ATTRIBUTE_ID = 0x0031
    FIELDS = [
        F("serviceID", 64, "x"), G("serviceGID"), F("servicePKey", 16, "x"),
        R(16), F("serviceLease", 32), G("serviceKey"),
        S("serviceName", 64), F("serviceData8", 8, "x", count=16),
        F("serviceData16", 16, "x", count=8),
        F("serviceData32", 32, "x", count=4),
        F("serviceData64", 64, "x", count=2),
    ]


class SAMCMemberRecord(BinStruct):
    """MCMemberRecord (IBA 15.2.5.17): a multicast group membership."""
    LENGTH = 52
    ATTRIBUTE_ID = 0x0038
    FIELDS = [
        G("MGID"), G("portGID"), F("QKey", 32, "x"), F("MLID", 16, "x"),
        F("MTUSelector", 2), F("MTU", 6), F("TClass", 8),
        F("PKey", 16, "x"), F("rateSelector", 2), F("rate", 6),
        F("packetLifeTimeSelector", 2), F("packetLifeTime", 6), F("SL", 4),
        F("flowLabel", 20, "x"), F("hopLimit", 8), F("scope", 4),
        F("joinState", 4, "x"), F("proxyJoin", 1), R(23),
    ]


class SALinkRecord(BinStruct):
    """LinkRecord (IBA 15.2.5.13): one link between two ports."""
    LENGTH = 8
    ATTRIBUTE_ID = 0x0020
    FIELDS = [F("fromLID", 16), F("fromPort", 8), F("toPort", 8),
              F("toLID", 16), R(16)]


class SAInformInfoRecord(BinStruct):
    """InformInfoRecord (IBA 15.2.5.12): a subscription held by the SA."""
    LENGTH = 80
    ATTRIBUTE_ID = 0x00F3
    FIELDS = [G("subscriberGID"), F("enumeration", 16), R(48),
              N("informInfo", MADInformInfo), R(160)]


#: The SA record classes by their short names (as ``saquery`` names them).
SA_RECORDS: Dict[str, Type[BinStruct]] = {
    "PR": SAPathRecord, "NR": SANodeRecord, "PIR": SAPortInfoRecord,
    "SR": SAServiceRecord, "MCMR": SAMCMemberRecord, "LR": SALinkRecord,
    "IIR": SAInformInfoRecord,
}


# ---- status and errors ----------------------------------------------------

_INVALID_FIELD = {
    1: "bad base or class version",
    2: "method not supported",
    3: "method/attribute combination not supported",
    7: "invalid attribute or attribute modifier value",
}

_SA_STATUS = {
    1: "ERR_NO_RESOURCES (the SA has no resources to answer)",
    2: "ERR_REQ_INVALID (the request is invalid)",
    3: "ERR_NO_RECORDS (no records match the query)",
    4: "ERR_TOO_MANY_RECORDS (more than one record for a Get)",
    5: "ERR_REQ_INVALID_GID (invalid GID in the request)",
    6: "ERR_REQ_INSUFFICIENT_COMPONENTS (too few components in the query)",
    7: "ERR_REQ_DENIED (the request was denied)",
    8: "ERR_STATUS_PRIO_SUGGESTED (a priority is suggested)",
}

#: SA class-specific status codes (bits 8-14 of the MAD status).
SA_STATUS_NO_RESOURCES = 1
SA_STATUS_REQ_INVALID = 2
SA_STATUS_NO_RECORDS = 3
SA_STATUS_TOO_MANY_RECORDS = 4
SA_STATUS_REQ_INVALID_GID = 5
SA_STATUS_REQ_INSUFFICIENT_COMPONENTS = 6
SA_STATUS_REQ_DENIED = 7


def mad_status_words(status: int) -> List[str]:
    """Decode the common bits (0-4) of a MAD status into words."""
    words = []
    if status & 0x1:
        words.append("busy")
    if status & 0x2:
        words.append("redirect required")
    code = (status >> 2) & 0x7
    if code:
        words.append(_INVALID_FIELD.get(code, f"reserved invalid-field "
                                              f"code {code}"))
    return words


def sa_status_word(status: int) -> Optional[str]:
    """Decode the SA class-specific bits (8-15) of a MAD status."""
    code = (status >> 8) & 0xFF
    if not code:
        return None
    return _SA_STATUS.get(code, f"SA status {code:#x}")


class MADError(RDMAError):
    """A MAD transaction failed: ``status`` is the reply's status field
    (``None`` when there was no reply), ``words`` its decoded meaning,
    ``request`` the request header and ``reply`` the reply bytes."""

    def __init__(self, msg: str, status: Optional[int] = None,
                 request: Optional[MADHeader] = None,
                 reply: Optional[bytes] = None):
        super().__init__(msg)
        self.status = status
        self.request = request
        self.reply = reply
        self.words: List[str] = []
        if status is not None:
            self.words = mad_status_words(status)
            sa = sa_status_word(status)
            if sa:
                self.words.append(sa)

    def __reduce__(self):
        return (type(self), (self.args[0], self.status, self.request,
                             self.reply))


class SAError(MADError):
    """The SA answered with an error status; ``sa_status`` is the SA
    class code (``SA_STATUS_NO_RECORDS``...), ``sa_word`` its name."""

    @property
    def sa_status(self) -> int:
        return ((self.status or 0) >> 8) & 0xFF

    @property
    def sa_word(self) -> Optional[str]:
        w = sa_status_word(self.status or 0)
        return w.split(" ", 1)[0] if w else None


class MADTimeoutError(MADError, TimeoutError):
    """No reply arrived in time (after every retry)."""

    def __init__(self, msg: str, status: Optional[int] = None,
                 request: Optional[MADHeader] = None,
                 reply: Optional[bytes] = None):
        MADError.__init__(self, msg, status, request, reply)


class MADFormatError(MADError, ValueError):
    """A MAD from the wire is malformed (too short, wrong class...)."""

    def __init__(self, msg: str, status: Optional[int] = None,
                 request: Optional[MADHeader] = None,
                 reply: Optional[bytes] = None):
        MADError.__init__(self, msg, status, request, reply)


# ---- SA requests and replies ----------------------------------------------

def encode_sa_request(method: int, record: BinStruct, tid: int,
                      comp_mask: Optional[int] = None, sm_key: int = 0,
                      attribute_modifier: int = 0) -> bytes:
    """Return one 256-byte SA MAD carrying ``record`` as a request.

    The component mask is ``record.component_mask()`` unless given.
    """
    if not isinstance(record, BinStruct) or not record.ATTRIBUTE_ID:
        raise TypeError(f"{type(record).__name__} is not an SA attribute")
    if record.LENGTH > MAD_LENGTH - SA_HEADER_LENGTH:
        raise ValueError(f"{type(record).__name__} does not fit in a MAD")
    hdr = SAHeader()
    m = hdr.MADHeader
    m.baseVersion = MAD_BASE_VERSION
    m.mgmtClass = MAD_SUBNET_ADMIN
    m.classVersion = SA_CLASS_VERSION
    m.method = method
    m.transactionID = tid
    m.attributeID = record.ATTRIBUTE_ID
    m.attributeModifier = attribute_modifier
    hdr.SMKey = sm_key
    hdr.componentMask = (record.component_mask() if comp_mask is None
                         else comp_mask)
    buf = bytearray(MAD_LENGTH)
    hdr.pack_into(buf, 0)
    record.pack_into(buf, SA_HEADER_LENGTH)
    return bytes(buf)


class SAReply:
    """A decoded SA reply: ``header`` (:class:`SAHeader`), ``records``
    (a list of record objects), ``status`` and the raw ``data``."""

    def __init__(self, header: SAHeader, records: List[BinStruct],
                 data: bytes):
        self.header = header
        self.records = records
        self.data = data

    @property
    def status(self) -> int:
        return self.header.MADHeader.status

    @property
    def method(self) -> int:
        return self.header.MADHeader.method

    @property
    def transactionID(self) -> int:
        return self.header.MADHeader.transactionID

    def __repr__(self) -> str:
        return (f"<SAReply method={self.method:#x} status={self.status:#x} "
                f"records={len(self.records)}>")


def decode_sa_reply(buf: bytes, record_cls: Optional[Type[BinStruct]] = None,
                    ) -> SAReply:
    """Decode an SA reply (one MAD, or a kernel-reassembled RMPP message).

    ``record_cls`` is the expected record type (default: found by the
    attribute ID).  The number of records comes from the RMPP
    PayloadLength when the reply carries a complete RMPP header, else from
    the length of ``buf``; records are ``attributeOffset`` * 8 bytes
    apart.  Raises :class:`MADFormatError` on anything malformed; never
    anything else.
    """
    buf = bytes(buf)
    if len(buf) < SA_HEADER_LENGTH:
        raise MADFormatError(f"SA MAD too short: {len(buf)} bytes",
                             reply=buf)
    hdr = SAHeader.unpack(buf)
    m = hdr.MADHeader
    if m.baseVersion != MAD_BASE_VERSION or m.mgmtClass != MAD_SUBNET_ADMIN:
        raise MADFormatError(f"not an SA MAD (base version {m.baseVersion}, "
                             f"class {m.mgmtClass:#x})", reply=buf)
    cls = record_cls
    if cls is None:
        cls = _BY_ATTRIBUTE.get(m.attributeID)
    elif cls.ATTRIBUTE_ID != m.attributeID:
        raise MADFormatError(f"reply attribute {m.attributeID:#x} is not "
                             f"{cls.__name__} ({cls.ATTRIBUTE_ID:#x})",
                             status=m.status, reply=buf)
    data = buf[SA_HEADER_LENGTH:]
    r = hdr.RMPPHeader
    if (r.RMPPVersion and r.RMPPType == RMPP_TYPE_DATA
            and r.RMPPFlags & RMPP_FLAG_ACTIVE
            and r.RMPPFlags & RMPP_FLAG_FIRST and r.data2):
        paylen = r.data2 - (SA_HEADER_LENGTH - 36)
        if 0 <= paylen < len(data):
            data = data[:paylen]
    records: List[BinStruct] = []
    if cls is not None and m.status == 0:
        if m.method == MAD_METHOD_GET_TABLE_RESP:
            stride = hdr.attributeOffset * 8
            if stride == 0:
                if any(data):
                    raise MADFormatError("GetTableResp with records but "
                                         "AttributeOffset 0", reply=buf)
            else:
                if stride < cls.LENGTH:
                    raise MADFormatError(
                        f"AttributeOffset {hdr.attributeOffset} is smaller "
                        f"than {cls.__name__} ({cls.LENGTH} bytes)",
                        reply=buf)
                for off in range(0, len(data) - cls.LENGTH + 1, stride):
                    records.append(cls.unpack(data, off))
        elif len(data) >= cls.LENGTH:
            records.append(cls.unpack(data, 0))
        else:
            raise MADFormatError(f"reply too short for {cls.__name__}",
                                 reply=buf)
    return SAReply(hdr, records, data)


_BY_ATTRIBUTE: Dict[int, Type[BinStruct]] = {
    c.ATTRIBUTE_ID: c for c in (SAPathRecord, SANodeRecord,
                                SAPortInfoRecord, SAServiceRecord,
                                SAMCMemberRecord, SALinkRecord,
                                SAInformInfoRecord, MADClassPortInfo,
                                MADInformInfo)
}
