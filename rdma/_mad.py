"""MAD constants, status decoding, the MAD errors and SA request/reply
helpers.

The structures themselves (``SAPathRecord``, ``SMPPortInfo``...) are
tables in :mod:`rdma.IBA_struct` on the codec of :mod:`rdma.binstruct`;
they are re-exported here (and by :mod:`rdma.IBA`, their public home) so
that ``from rdma._mad import SAPathRecord`` keeps working.

Errors follow python-rdma: :class:`MADError` carries the request format
(``req``), the reply (``rep``, ``rep_buf``), the ``path`` and the
``status``; :class:`MADTimeoutError`, :class:`MADClassError` (a
class-specific status, :class:`SAError` for the SA) and
:class:`MADFormatError` (a malformed MAD) derive from it.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from rdma._errors import RDMAError

# The constants live in rdma.IBA (which imports this module at its end,
# after defining them); they are re-exported here for older imports.
from rdma.IBA import (  # noqa: E402
    MAD_BASE_VERSION, MAD_LENGTH, MAD_METHOD_DELETE, MAD_METHOD_DELETE_RESP,
    MAD_METHOD_GET, MAD_METHOD_GET_RESP, MAD_METHOD_GET_TABLE,
    MAD_METHOD_GET_TABLE_RESP, MAD_METHOD_RESPONSE, MAD_METHOD_SET,
    MAD_SUBNET_ADMIN, MCMEMBER_JOIN_FULL, MGID_IPOIB_BROADCAST, MTU_256,
    MTU_512, MTU_1024, MTU_2048, MTU_4096, RMPP_FLAG_ACTIVE,
    RMPP_FLAG_FIRST, RMPP_FLAG_LAST, RMPP_TYPE_DATA, SA_CLASS_VERSION,
    SA_HEADER_LENGTH, SA_STATUS_NO_RECORDS, SA_STATUS_NO_RESOURCES,
    SA_STATUS_REQ_DENIED, SA_STATUS_REQ_INSUFFICIENT_COMPONENTS,
    SA_STATUS_REQ_INVALID, SA_STATUS_REQ_INVALID_GID,
    SA_STATUS_TOO_MANY_RECORDS, mtu_to_bytes, rate_to_gbps)

def lifetime_to_us(exponent: int) -> float:
    """Return the time in microseconds of a 4.096 us * 2**exponent value."""
    return 4.096 * (1 << exponent)


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
    """A MAD RPC failed.  As in python-rdma, the raiser fills in what it
    knows: ``req`` (the request ``*Format``), ``rep`` (the decoded reply
    format), ``rep_buf`` (the raw reply), ``path`` (where the request
    went), ``status`` (the reply's 16-bit status, None when there was no
    reply), ``exc_info`` (an unexpected exception while decoding) and
    ``messages`` (annotations; :meth:`message` adds one, the last is the
    text of the exception).

    ``MADError("text", status, request, reply)`` (message first) and
    ``MADError(req=..., path=..., msg=...)`` (python-rdma's keywords) both
    work.  ``words`` is the status decoded into words; ``request`` and
    ``reply`` are ``req`` and ``rep_buf``.
    """

    req: Any = None
    rep: Any = None
    rep_buf: Optional[bytes] = None
    req_buf: Optional[bytes] = None
    path: Any = None
    status: Optional[int] = None
    exc_info: Any = None
    messages: Optional[List[str]] = None

    def __init__(self, msg: Any = None, status: Optional[int] = None,
                 request: Any = None, reply: Optional[bytes] = None,
                 **kw: Any):
        RDMAError.__init__(self)
        if msg is not None and not isinstance(msg, str):
            # python-rdma style positional request format.
            kw.setdefault("req", msg)
            msg = None
        if request is not None:
            kw.setdefault("req", request)
        if reply is not None:
            kw.setdefault("rep_buf", reply)
        if status is not None:
            kw.setdefault("status", status)
        if "msg" in kw:
            msg = kw.pop("msg")
        for k, v in kw.items():
            setattr(self, k, v)
        if self.rep_buf is not None:
            self.rep_buf = bytes(self.rep_buf)
        if msg is not None:
            self.message(msg)
        elif self.req is not None and self.status is not None:
            self.message(f"RPC {describe(self.req)} got error status "
                         f"{self.status:#x} - {self.status_text()}")
        if self.exc_info is not None:
            self.message(f"Internal error, unexpected MAD exception: "
                         f"{self.exc_info[1]!r}")
        self.args = (str(self),)

    @property
    def words(self) -> List[str]:
        """The status decoded into words (common and SA bits)."""
        if self.status is None:
            return []
        words = mad_status_words(self.status)
        sa = sa_status_word(self.status)
        if sa and self._is_sa():
            words.append(sa)
        elif (self.status >> 8) & 0x7F:
            words.append(f"class-specific code {(self.status >> 8) & 0x7F}")
        return words

    def _is_sa(self) -> bool:
        req = self.req
        cls = getattr(req, "mgmtClass", None)
        return cls is None or cls == MAD_SUBNET_ADMIN

    def status_text(self) -> str:
        """``words`` as one string (``Ok`` for a zero status)."""
        return ", ".join(self.words) or "Ok"

    @property
    def request(self) -> Any:
        return self.req

    @property
    def reply(self) -> Optional[bytes]:
        return self.rep_buf

    def message(self, s: str) -> None:
        """Add an annotation (the newest is the exception's text)."""
        if self.messages is None:
            self.messages = [s]
        else:
            self.messages.append(s)
        self.args = (str(self),)

    def dump_detailed(self, F: Any = None, prefix: str = "",
                      level: int = 1) -> None:
        """Print the messages (level 0: the summary only), the path (level
        1) and the request and reply packets (level 2) to ``F``."""
        out = F if F is not None else sys.stderr
        msgs = list(reversed(self.messages or [str(self)]))
        out.write(f"{prefix} {msgs[0]}\n")
        if level == 0:
            return
        for m in msgs[1:]:
            out.write(f"{prefix} +{m}\n")
        if self.path is not None:
            out.write(f"{prefix} +MAD path was {self.path!r}\n")
        if level >= 2 and self.req is not None:
            out.write(f"{prefix} +Request Packet "
                      f"{type(self.req).__name__}\n")
            self.req.printer(out, header=False)
            if self.rep is not None:
                out.write(f"{prefix} +Reply Packet "
                          f"{type(self.rep).__name__}\n")
                self.rep.printer(out, header=False)

    def __str__(self) -> str:
        if self.messages:
            if len(self.messages) == 1:
                return self.messages[-1]
            return f"{self.messages[-1]} [{self.messages[-2]}]"
        return f"{type(self).__name__}"

    def __reduce__(self) -> Tuple[Any, ...]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("exc_info", "args")}
        return (_rebuild_error, (type(self), state))


def _rebuild_error(cls: Type[MADError], state: Dict[str, Any]) -> MADError:
    e = cls.__new__(cls)
    RDMAError.__init__(e)
    e.__dict__.update(state)
    e.args = (str(e),)
    return e


class MADTimeoutError(MADError, TimeoutError):
    """No reply arrived in time (after every retry).

    python-rdma's ``MADTimeoutError(req, path)`` works, and so does a
    message first.
    """

    def __init__(self, req: Any = None, path: Any = None, **kw: Any):
        if isinstance(req, str):
            kw.setdefault("msg", req)
            req = kw.pop("request", None)
        if req is not None:
            kw["req"] = req
        if path is not None:
            kw["path"] = path
        if "msg" not in kw:
            kw["msg"] = (f"RPC {describe(kw.get('req'))} timed out to "
                         f"'{kw.get('path')}'")
        MADError.__init__(self, **kw)


class MADClassError(MADError):
    """The reply carries a class-specific status (bits 8-14); ``code`` is
    that code.  python-rdma's ``MADClassError(req, code, ...)`` works, and
    so does a message first."""

    code: Optional[int] = None

    def __init__(self, *args: Any, **kw: Any):
        if args and not isinstance(args[0], str):
            kw.setdefault("req", args[0])
            if len(args) > 1:
                kw.setdefault("code", args[1])
            args = args[2:]
        MADError.__init__(self, *args, **kw)
        if self.code is None and self.status is not None:
            self.code = (self.status >> 8) & 0x7F
        if not self.messages and self.code is not None:
            self.message(f"RPC {describe(self.req)} got class specific "
                         f"error {self._code_text()}")

    def _code_text(self) -> str:
        return class_code_text(self.code or 0, self._is_sa())


def class_code_text(code: int, sa: bool) -> str:
    """A class-specific status code as text (``ERR_NO_RECORDS(3)`` for
    the SA, the number otherwise)."""
    if sa:
        w = _SA_STATUS.get(code)
        if w:
            return f"{w.split(' ', 1)[0]}({code})"
    return str(code)


class SAError(MADClassError):
    """The SA answered with an error status; ``sa_status`` is the SA
    class code (``SA_STATUS_NO_RECORDS``...), ``sa_word`` its name."""

    @property
    def sa_status(self) -> int:
        return ((self.status or 0) >> 8) & 0xFF

    @property
    def sa_word(self) -> Optional[str]:
        w = sa_status_word(self.status or 0)
        return w.split(" ", 1)[0] if w else None


class SAPathNotFoundError(SAError):
    """The SA has no PathRecord for the path asked for (it answered
    ``ERR_NO_RECORDS``): python-rdma's ``rdma.path.SAPathNotFoundError``,
    raised by :func:`rdma.path.resolve_path` and
    :func:`rdma.path.get_mad_path`."""

    @classmethod
    def from_error(cls, err: MADError, msg: str) -> "SAPathNotFoundError":
        """This error carrying everything ``err`` carries (request, reply,
        status, path), with ``msg`` added to its messages."""
        new = cls.__new__(cls)
        new.__dict__.update(err.__dict__)
        new.messages = list(getattr(err, "messages", None) or [])
        new.message(msg)
        return new


class MADFormatError(MADError, ValueError):
    """A MAD from the wire is malformed (too short, wrong class, an
    impossible RMPP or SA layout...)."""


_METHOD_NAMES = {0x01: "Get", 0x02: "Set", 0x03: "Send", 0x05: "Trap",
                 0x06: "Report", 0x07: "TrapRepress", 0x12: "GetTable",
                 0x13: "GetTraceTable", 0x14: "GetMulti", 0x15: "Delete"}
_CLASS_CALL = {0x01: "Subn", 0x81: "Subn", 0x03: "SubnAdm",
               0x04: "Performance", 0x05: "BM", 0x06: "DevMgt",
               0x07: "CommMgt", 0x08: "SNMP"}


def describe(req: Any) -> str:
    """A short text for a request: ``SubnGet(SMPPortInfo)``; accepts a
    ``*Format`` or any object with the MAD header rows (None: ``?``)."""
    if req is None:
        return "?"
    try:
        cls_id = req.mgmtClass
        import rdma.IBA as IBA
        fmt, attr = IBA.get_fmt_payload(
            cls_id, (req.baseVersion << 8) | req.classVersion,
            req.attributeID)
        method = req.method & ~MAD_METHOD_RESPONSE
        call = (_CLASS_CALL.get(cls_id, f"class {cls_id:#x} ")
                + _METHOD_NAMES.get(method, f"method {method:#x}"))
        what = attr.__name__ if attr is not None else \
            f"attribute {req.attributeID:#x}"
        mod = getattr(req, "attributeModifier", 0)
        return f"{call}({what}" + (f", modifier {mod:#x})" if mod else ")")
    except AttributeError:
        return repr(req)


# ---- SA requests and replies ----------------------------------------------

def encode_sa_request(method: int, record: BinStruct, tid: int,
                      comp_mask: Optional[int] = None, sm_key: int = 0,
                      attribute_modifier: int = 0) -> bytes:
    """Return one 256-byte SA MAD carrying ``record`` as a request.

    The component mask is ``record.component_mask()`` unless given.
    """
    if not isinstance(record, BinStruct) or not record.MAD_ATTRIBUTE_ID:
        raise TypeError(f"{type(record).__name__} is not an SA attribute")
    if record.MAD_LENGTH > MAD_LENGTH - SA_HEADER_LENGTH:
        raise ValueError(f"{type(record).__name__} does not fit in a MAD")
    hdr = SAHeader()
    hdr.baseVersion = MAD_BASE_VERSION
    hdr.mgmtClass = MAD_SUBNET_ADMIN
    hdr.classVersion = SA_CLASS_VERSION
    hdr.method = method
    hdr.transactionID = tid
    hdr.attributeID = record.MAD_ATTRIBUTE_ID
    hdr.attributeModifier = attribute_modifier
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
        return self.header.status

    @property
    def method(self) -> int:
        return self.header.method

    @property
    def transactionID(self) -> int:
        return self.header.transactionID

    def __repr__(self) -> str:
        return (f"<SAReply method={self.method:#x} status={self.status:#x} "
                f"records={len(self.records)}>")


def _meaningful_length(cls: Type[BinStruct]) -> int:
    """The bytes of a record up to the end of its last field that is not
    reserved.  A table's records may be packed closer than the whole
    structure when only reserved rows are left out: opensm sends
    InformInfoRecords 64 bytes apart, without the 20 reserved bytes that
    end the 80-byte structure; those read as zeros."""
    end = 0
    for f in cls.FIELDS:
        if not f.reserved:
            end = max(end, f.offset + f.bits * f.count)
    return min(cls.MAD_LENGTH, (end + 7) // 8)


def decode_sa_reply(buf: Union[bytes, bytearray],
                    record_cls: Optional[Type[BinStruct]] = None,
                    ) -> SAReply:
    """Decode an SA reply (one MAD, or a reassembled RMPP message).

    ``record_cls`` is the expected record type (default: found by the
    attribute ID).  GetTableResp, GetTraceTableResp and GetMultiResp
    carry a table: the number of records comes from the RMPP
    PayloadLength when the reply carries a complete RMPP header, else from
    the length of ``buf``; records are ``attributeOffset`` * 8 bytes
    apart.  Raises :class:`MADFormatError` on anything malformed; never
    anything else.
    """
    buf = bytes(buf)
    if len(buf) < SA_HEADER_LENGTH:
        raise MADFormatError(f"SA MAD too short: {len(buf)} bytes",
                             reply=buf)
    hdr = SAHeader(buf)
    if hdr.baseVersion != MAD_BASE_VERSION or \
            hdr.mgmtClass != MAD_SUBNET_ADMIN:
        raise MADFormatError(f"not an SA MAD (base version "
                             f"{hdr.baseVersion}, class "
                             f"{hdr.mgmtClass:#x})", reply=buf)
    cls = record_cls
    if cls is None:
        cls = _BY_ATTRIBUTE.get(hdr.attributeID)
    elif cls.MAD_ATTRIBUTE_ID != hdr.attributeID:
        raise MADFormatError(f"reply attribute {hdr.attributeID:#x} is not "
                             f"{cls.__name__} ({cls.MAD_ATTRIBUTE_ID:#x})",
                             status=hdr.status, reply=buf)
    data = buf[SA_HEADER_LENGTH:]
    if (hdr.RMPPVersion and hdr.RMPPType == RMPP_TYPE_DATA
            and hdr.RMPPFlags & RMPP_FLAG_ACTIVE
            and hdr.RMPPFlags & RMPP_FLAG_FIRST and hdr.data2):
        paylen = hdr.data2 - (SA_HEADER_LENGTH - 36)
        if 0 <= paylen < len(data):
            data = data[:paylen]
    records: List[BinStruct] = []
    if cls is not None and hdr.status == 0:
        if hdr.method in (MAD_METHOD_GET_TABLE_RESP, 0x93, 0x94):
            stride = hdr.attributeOffset * 8
            if stride == 0:
                if any(data):
                    raise MADFormatError("GetTableResp with records but "
                                         "AttributeOffset 0", reply=buf)
            else:
                need = _meaningful_length(cls)
                if stride < need:
                    raise MADFormatError(
                        f"AttributeOffset {hdr.attributeOffset} is smaller "
                        f"than {cls.__name__} ({need} bytes)", reply=buf)
                records.extend(cls._unpack_table(data, stride, need))
        elif len(data) >= cls.MAD_LENGTH:
            records.append(cls(data, 0))
        else:
            raise MADFormatError(f"reply too short for {cls.__name__}",
                                 reply=buf)
    return SAReply(hdr, records, data)


# ---- the structures (tables in rdma.IBA_struct) ---------------------------

from rdma.binstruct import BinFormat, BinStruct  # noqa: E402
from rdma.IBA_struct import *  # noqa: E402,F401,F403
from rdma.IBA_struct import (ATTR_TO_STRUCT, SAFormat,  # noqa: E402
                             SAHeader)
from rdma import IBA_struct as _structs  # noqa: E402

_BY_ATTRIBUTE: Dict[int, Type[BinStruct]] = {
    attr: c for (fmt, attr), c in ATTR_TO_STRUCT.items() if fmt is SAFormat}

__all__ = [
    "BinStruct", "BinFormat", "SA_RECORDS", "MADError", "SAError",
    "SAPathNotFoundError",
    "MADClassError", "MADTimeoutError", "MADFormatError",
    "mad_status_words", "sa_status_word", "describe",
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
    "SA_STATUS_NO_RESOURCES", "SA_STATUS_REQ_INVALID", "SA_STATUS_NO_RECORDS",
    "SA_STATUS_TOO_MANY_RECORDS", "SA_STATUS_REQ_INVALID_GID",
    "SA_STATUS_REQ_INSUFFICIENT_COMPONENTS", "SA_STATUS_REQ_DENIED",
]
__all__ += _structs.__all__

#: The SA record classes by their short names (as ``saquery`` names them).
SA_RECORDS: Dict[str, Type[BinStruct]] = {
    "PR": _structs.SAPathRecord, "NR": _structs.SANodeRecord,
    "PIR": _structs.SAPortInfoRecord, "SR": _structs.SAServiceRecord,
    "MCMR": _structs.SAMCMemberRecord, "LR": _structs.SALinkRecord,
    "IIR": _structs.SAInformInfoRecord,
    "SWIR": _structs.SASwitchInfoRecord,
    "LFTR": _structs.SALinearForwardingTableRecord,
    "MFTR": _structs.SAMulticastForwardingTableRecord,
    "SMIR": _structs.SASMInfoRecord, "GIR": _structs.SAGUIDInfoRecord,
    "PKTR": _structs.SAPKeyTableRecord,
    "SL2VL": _structs.SASLToVLMappingTableRecord,
    "VLAR": _structs.SAVLArbitrationTableRecord,
}
