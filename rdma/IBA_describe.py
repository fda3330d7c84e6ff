"""IBA values as text, under python-rdma's names (``rdma.IBA_describe``).

Programs written for python-rdma's management API (its ``libibtool``
among them) print MAD fields through these functions: the node type, the
port and physical states, link width and speed, path-record rates, MAD
status codes, the NUL-padded strings of MADs (:func:`description`,
:func:`dstr`), and the two structure printers :func:`struct_dump` and
:func:`struct_dotted` behind :meth:`rdma.binstruct.BinStruct.printer`.

Unknown values never raise: they come back as ``?? <value>`` (or ``0``
lanes, an empty speed list), which is what a tool printing a MAD from a
newer device wants.  Arguments of the wrong type raise :class:`TypeError`.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, Optional, TextIO, Union

import rdma.IBA as IBA

__all__ = ["mad_status", "node_type", "link_state", "phys_link_state",
           "link_speed", "link_speed_ext", "link_width", "rate", "to_rate",
           "description", "dstr", "struct_dump", "struct_dotted"]


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not "
                        f"{type(value).__name__}")
    return value


def _unknown(value: int) -> str:
    return f"?? {value}"


# The MAD status code (bits 2-4 of the status word) as words.
_STATUS_CODES = {0: "Ok", 1: "Bad version", 2: "Unsupported method",
                 3: "Unsupported method+attr",
                 7: "Invalid attr or modifier"}


def mad_status(status: int) -> str:
    """A MAD ``status`` word as words: the BUSY and REDIRECT flags, then
    the status code (``"BUSY Ok"``, ``"Unsupported method"``)."""
    status = _int(status, "status")
    flags = ""
    if status & IBA.MAD_STATUS_BUSY:
        flags += "BUSY "
    if status & IBA.MAD_STATUS_REDIRECT:
        flags += "REDIRECT "
    return flags + _STATUS_CODES.get((status >> 2) & 7, "??")


_NODE_TYPES = {IBA.NODE_CA: "Channel Adapter", IBA.NODE_SWITCH: "Switch",
               IBA.NODE_ROUTER: "Router"}
_LINK_STATES = {IBA.PORT_STATE_DOWN: "Down", IBA.PORT_STATE_INIT: "Init",
                IBA.PORT_STATE_ARMED: "Armed",
                IBA.PORT_STATE_ACTIVE: "Active"}
_PHYS_STATES = {IBA.PHYS_PORT_STATE_SLEEP: "Sleep",
                IBA.PHYS_PORT_STATE_POLLING: "Polling",
                IBA.PHYS_PORT_STATE_DISABLED: "Disabled",
                IBA.PHYS_PORT_STATE_CFG_TRAIN: "Config.Train",
                IBA.PHYS_PORT_STATE_LINK_UP: "Link UP",
                IBA.PHYS_PORT_STATE_LINK_ERR_RECOVERY: "Error Recovery",
                IBA.PHYS_PORT_STATE_PHY_TEST: "Phy Test"}


def node_type(value: int) -> str:
    """NodeInfo.nodeType as text (``"Channel Adapter"``, ``"Switch"``,
    ``"Router"``)."""
    value = _int(value, "node type")
    return _NODE_TYPES.get(value) or _unknown(value)


def link_state(value: int) -> str:
    """PortInfo.portState as text (``"Down"``, ``"Init"``, ``"Armed"``,
    ``"Active"``)."""
    value = _int(value, "port state")
    return _LINK_STATES.get(value) or _unknown(value)


def phys_link_state(value: int) -> str:
    """PortInfo.portPhysicalState as text (``"Polling"``, ``"Link UP"``...)."""
    value = _int(value, "physical port state")
    return _PHYS_STATES.get(value) or _unknown(value)


def _bits_text(value: int, names: Any) -> str:
    return ",".join(text for bit, text in names if value & bit)


def link_speed(value: int) -> str:
    """A PortInfo link speed bit set (``linkSpeedActive``,
    ``linkSpeedEnabled``...) as ``"SDR,DDR,QDR"`` (the bits that are set)."""
    return _bits_text(_int(value, "link speed"),
                      ((IBA.LINK_SPEED_2Gb5, "SDR"),
                       (IBA.LINK_SPEED_5Gb0, "DDR"),
                       (IBA.LINK_SPEED_10Gb0, "QDR")))


def link_speed_ext(value: int) -> str:
    """A PortInfo extended link speed bit set (``linkSpeedExtActive``...)
    as ``"FDR,EDR"``."""
    return _bits_text(_int(value, "extended link speed"),
                      ((IBA.LINK_SPEED_EXT_14Gb0, "FDR"),
                       (IBA.LINK_SPEED_EXT_25Gb7, "EDR")))


_LANES = {IBA.LINK_WIDTH_1x: 1, IBA.LINK_WIDTH_2x: 2, IBA.LINK_WIDTH_4x: 4,
          IBA.LINK_WIDTH_8x: 8, IBA.LINK_WIDTH_12x: 12}


def link_width(width: int) -> int:
    """A PortInfo link width code (``linkWidthActive``) as its number of
    lanes (``LINK_WIDTH_4x`` -> 4); 0 for a code that is not one width."""
    return _LANES.get(_int(width, "link width"), 0)


# Path record rate code -> bits per second (IBA table 205 and its
# extensions: the data rate of the link, after encoding).
_RATES = {IBA.PR_RATE_2Gb5: 2_500_000_000, IBA.PR_RATE_5Gb: 5_000_000_000,
          IBA.PR_RATE_10Gb: 10_000_000_000, IBA.PR_RATE_14Gb: 14_000_000_000,
          IBA.PR_RATE_20Gb: 20_000_000_000, IBA.PR_RATE_25Gb: 25_000_000_000,
          IBA.PR_RATE_30Gb: 30_000_000_000, IBA.PR_RATE_40Gb: 40_000_000_000,
          IBA.PR_RATE_56Gb: 56_000_000_000, IBA.PR_RATE_60Gb: 60_000_000_000,
          IBA.PR_RATE_80Gb: 80_000_000_000,
          IBA.PR_RATE_100Gb: 100_000_000_000,
          IBA.PR_RATE_112Gb: 112_000_000_000,
          IBA.PR_RATE_120Gb: 120_000_000_000,
          IBA.PR_RATE_168Gb: 168_000_000_000,
          IBA.PR_RATE_200Gb: 200_000_000_000,
          IBA.PR_RATE_300Gb: 300_000_000_000}


def rate(value: int) -> int:
    """A path record rate code (``SAPathRecord.rate``) in bits per second.

    :raises ValueError: ``value`` is not a rate code.
    """
    value = _int(value, "rate")
    try:
        return _RATES[value]
    except KeyError:
        raise ValueError(f"{value} is not an IBA rate code (2..18)") \
            from None


def to_rate(value: int) -> int:
    """The rate code of the fastest IBA rate that is not above ``value``
    bits per second (``PR_RATE_2Gb5`` below 2.5 Gb/s)."""
    value = _int(value, "bits per second")
    best, best_bps = IBA.PR_RATE_2Gb5, 0
    for code, bps in _RATES.items():
        if best_bps < bps <= value:
            best, best_bps = code, bps
    return best


def description(value: Union[bytes, bytearray, memoryview]) -> str:
    """A fixed-size, NUL-padded UTF-8 string of a MAD
    (``SMPNodeDescription.nodeString``) as text, up to its first NUL;
    invalid UTF-8 is replaced, never raised."""
    if isinstance(value, str):
        return value.split("\0", 1)[0]
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"description() takes bytes, not "
                        f"{type(value).__name__}")
    return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")


def dstr(value: Any, quotes: bool = False) -> str:
    """``value`` as a display string with unprintable characters escaped
    the way :func:`repr` escapes them; ``quotes`` keeps repr's quotes.
    ``None`` gives ``"None"``."""
    if value is None:
        return "None"
    if isinstance(value, (bytes, bytearray)):
        value = description(value)
    if not isinstance(value, str):
        value = str(value)
    r = repr(value)
    return r if quotes else r[1:-1]


def struct_dump(F: Optional[TextIO], s: Any, offset: int = 0,
                name_prefix: str = "") -> None:
    """Print structure ``s`` as python-rdma's hex dump: one line per
    32-bit word with the fields that start in it (see
    :meth:`rdma.binstruct.BinStruct.printer`)."""
    from rdma.binstruct import BinStruct, _dump
    if not isinstance(s, BinStruct):
        raise TypeError(f"struct_dump() takes a BinStruct, not "
                        f"{type(s).__name__}")
    _dump(F if F is not None else sys.stdout, s, offset, name_prefix)


def struct_dotted(F: Optional[TextIO], s: Any, name_prefix: str = "",
                  dump_list: bool = False, skip_reserved: bool = True,
                  column: int = 33, colon: bool = False,
                  name_map: Optional[Dict[str, str]] = None) -> None:
    """Print structure ``s`` one ``Name.....value`` line per field, the
    way infiniband-diags prints attributes.  ``colon`` puts a ``:`` after
    the name, ``name_map`` renames fields (keys are the names with their
    first letter upper case), ``dump_list`` prints every array element on
    its own line, ``column`` is where values start."""
    from rdma.binstruct import BinStruct, _dotted
    if not isinstance(s, BinStruct):
        raise TypeError(f"struct_dotted() takes a BinStruct, not "
                        f"{type(s).__name__}")
    _dotted(F if F is not None else sys.stdout, s, name_prefix, column,
            skip_reserved, colon=colon, name_map=name_map,
            dump_list=dump_list)
