"""InfiniBand Architecture definitions: constants and the GID type.

A leaf module: it imports nothing else of the rdma package, so every layer
may use it.
"""
from __future__ import annotations

import ipaddress

__all__ = ["GID", "GUID", "GID_DEFAULT_PREFIX", "IB_DEFAULT_QP1_QKEY", "IB_DEFAULT_QP0_QKEY",
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
_RATES = {2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120,
          11: 14, 12: 56, 13: 112, 14: 168, 15: 25, 16: 100, 17: 200,
          18: 300}


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

    def __new__(cls, value: object = 0) -> "GID":
        if isinstance(value, GID):
            return bytes.__new__(cls, value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            if len(raw) != 16:
                raise ValueError(f"a GID is 16 bytes, not {len(raw)}")
            return bytes.__new__(cls, raw)
        if isinstance(value, bool):
            raise TypeError("a GID cannot be made from a bool")
        if isinstance(value, int):
            if not 0 <= value < 1 << 128:
                raise ValueError(f"GID value out of range: {value:#x}")
            return bytes.__new__(cls, value.to_bytes(16, "big"))
        if isinstance(value, ipaddress.IPv6Address):
            return bytes.__new__(cls, value.packed)
        if isinstance(value, str):
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
        addr = ipaddress.IPv6Address(bytes(self))
        if addr.ipv4_mapped is not None:      # as inet_ntop prints it
            return f"::ffff:{addr.ipv4_mapped}"
        return str(addr)

    def __repr__(self) -> str:
        return f"GID('{self}')"

    def __bool__(self) -> bool:
        return any(self)

    def __reduce__(self):
        return (GID, (bytes(self),))


class GUID(int):
    """A 64-bit GUID printed the ibv_devinfo way (``0002:c903:0000:1234``)."""

    def __new__(cls, value: object = 0) -> "GUID":
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
            v = int(value)
        if not 0 <= v < 1 << 64:
            raise ValueError(f"GUID value out of range: {v:#x}")
        return int.__new__(cls, v)

    def __str__(self) -> str:
        h = f"{int(self):016x}"
        return ":".join(h[i:i + 4] for i in range(0, 16, 4))

    def __repr__(self) -> str:
        return f"GUID('{self}')"


# MAD and SA structures (rdma._mad imports GID from here at run time only,
# so importing it last makes no cycle).
from rdma._mad import (  # noqa: E402
    MADHeader, RMPPHeader, SAHeader, SAFormat, SMPNodeInfo, SMPPortInfo,
    MADInformInfo, MADClassPortInfo, SAPathRecord, SANodeRecord,
    SAPortInfoRecord, SAServiceRecord, SAMCMemberRecord, SALinkRecord,
    SAInformInfoRecord, BinStruct, MADError, SAError, MADTimeoutError,
    MADFormatError, mad_status_words, sa_status_word, lifetime_to_us,
    MCMEMBER_JOIN_FULL)

__all__ += ["MADHeader", "RMPPHeader", "SAHeader", "SAFormat", "SMPNodeInfo",
            "SMPPortInfo", "MADInformInfo", "MADClassPortInfo",
            "SAPathRecord", "SANodeRecord", "SAPortInfoRecord",
            "SAServiceRecord", "SAMCMemberRecord", "SALinkRecord",
            "SAInformInfoRecord", "BinStruct", "MADError", "SAError",
            "MADTimeoutError", "MADFormatError", "mad_status_words",
            "sa_status_word", "lifetime_to_us", "MCMEMBER_JOIN_FULL"]
