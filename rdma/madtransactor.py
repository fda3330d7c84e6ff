"""The MAD RPC interface: :class:`MADTransactor`, python-rdma's mixin.

Every RPC (:meth:`~MADTransactor.SubnGet`,
:meth:`~MADTransactor.PerformanceGet`,
:meth:`~MADTransactor.SubnAdmGetTable`, :meth:`~MADTransactor.BMGet`...) is
a thin call onto one core: :meth:`~MADTransactor._doMAD` builds the
request format (``SMPFormat``, ``SMPFormatDirected``, ``SAFormat``,
``PMFormat``...) around the payload, hands the 256 bytes to the
subclass's :meth:`~MADTransactor._execute` (send, wait, resend) and
decodes the reply with :meth:`~MADTransactor._completeMAD`:

- a timeout raises :class:`rdma.IBA.MADTimeoutError`;
- a BUSY status is retried after a pause (:attr:`~MADTransactor.busy_retries`);
- a REDIRECT status (a ClassPortInfo in the reply, IBA 13.5.3.3) sends the
  request again to the redirected LID/GID, QP, Q_Key, P_Key and SL, and
  keeps using that target for the class;
- an error status raises :class:`rdma.IBA.MADError` (common bits) or
  :class:`~rdma.IBA.MADClassError` (:class:`~rdma.IBA.SAError` for the SA)
  naming the RPC, the attribute and the path;
- a malformed or short reply raises :class:`rdma.IBA.MADFormatError`.

Payloads may be a structure instance or its class (all zeros, as
python-rdma allows for a Get).  An SA payload may be wrapped in
:class:`rdma.IBA.ComponentMask`; a plain record sends the component mask
of the fields that were assigned.

Paths: a LID-routed path needs ``DLID`` (GMPs also ``dqpn``, ``qkey``,
``SL``, ``pkey_index``, a GRH with ``has_grh``/``DGID``); a path with a
``drPath`` (:class:`rdma.path.IBDRPath`: ``drPath`` bytes whose first byte
is 0, ``DLID``, ``drSLID``, ``drDLID``) sends a directed-route SMP.
``MKey`` (SMPs), ``SMKey`` (SA), ``mad_timeout`` and ``retries`` are used
when the path has them.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

import rdma.IBA as IBA
from rdma._mad import (MADClassError, MADError, MADFormatError,
                       MADTimeoutError, SAError, class_code_text,
                       decode_sa_reply, describe)
from rdma.binstruct import BinFormat, BinStruct

__all__ = ["MADTransactor", "TRACE_SEND", "TRACE_COMPLETE",
           "TRACE_UNEXPECTED", "TRACE_RECEIVE", "TRACE_REPLY",
           "simple_tracer", "dumper_tracer"]

TRACE_SEND = 0
TRACE_COMPLETE = 1
TRACE_UNEXPECTED = 2
TRACE_RECEIVE = 3
TRACE_REPLY = 4

_Payload = Union[BinStruct, Type[BinStruct], "IBA.ComponentMask"]


def simple_tracer(mt: "MADTransactor", kind: int, fmt: Any = None,
                  path: Any = None, ret: Any = None) -> None:
    """Print a line per RPC event to stdout; assign to
    :attr:`MADTransactor.trace_func`."""
    if kind == TRACE_COMPLETE:
        if ret is None:
            print(f"D: RPC {describe(fmt)} TIMED OUT to '{path}'.")
        else:
            print(f"D: RPC {describe(fmt)} completed to '{path}' len "
                  f"{len(ret[0])}.")
    elif kind == TRACE_RECEIVE:
        if ret is None:
            print(f"D: RPC {describe(fmt)} retry to '{path}'.")
        else:
            print(f"D: RPC {describe(fmt)} received from '{path}' len "
                  f"{len(ret[0])}.")
    elif kind == TRACE_REPLY:
        print(f"D: RPC {describe(fmt)} reply to '{path}'")
    elif kind == TRACE_UNEXPECTED:
        print(f"D: Got unexpected MAD from '{ret[1] if ret else path}'.")


def dumper_tracer(mt: "MADTransactor", kind: int, fmt: Any = None,
                  path: Any = None, ret: Any = None) -> None:
    """Like :func:`simple_tracer`, with the packets dumped."""
    simple_tracer(mt, kind, fmt=fmt, path=path, ret=ret)
    if kind == TRACE_COMPLETE:
        print(f"D: Request {describe(fmt)}")
        fmt.printer(sys.stdout, header=False)
        if ret is not None:
            try:
                type(fmt)(bytes(ret[0]).ljust(fmt.MAD_LENGTH, b"\0")) \
                    .printer(sys.stdout, header=False)
            except MADError:
                pass
    elif kind == TRACE_UNEXPECTED and ret is not None \
            and len(ret[0]) >= IBA.MADHeader.MAD_LENGTH:
        IBA.MADHeader(bytes(ret[0])).printer(sys.stdout)


class _Busy(MADError):
    """A reply with the BUSY status bit (internal: retried)."""


class _Redirect(MADError):
    """A reply with the REDIRECT status bit (internal: followed)."""

    def __init__(self, cpi: Any, **kw: Any):
        MADError.__init__(self, **kw)
        self.cpi = cpi


#: SA requests answered with a table of records.
_TABLE_METHODS = (IBA.MAD_METHOD_GET_TABLE, IBA.MAD_METHOD_GET_TRACE_TABLE,
                  IBA.MAD_METHOD_GET_MULTI)


def _data_offset(fmt_cls: Type[BinFormat]) -> int:
    """Byte offset of a format's ``data`` row."""
    return fmt_cls._by_name["data"].offset // 8


def _key(buf: Union[bytes, bytearray, memoryview]) -> int:
    """mgmtClass || TransactionID[31:0] (C13-19.1.1)."""
    return (buf[1] << 32) | int.from_bytes(bytes(buf[12:16]), "big")


class TimedSends:
    """Timeouts and re-sends of a transactor that sends its MADs itself
    (:class:`rdma.umad.UMAD`, :class:`rdma.vmad.VMAD`): ``timeout_ms`` and
    ``retries`` of the object when set, else the path's ``mad_timeout``
    and ``retries``, else the defaults."""

    #: Wait for one reply (ms) and re-sends; None: from the path.
    timeout_ms: Optional[int] = None
    retries: Optional[int] = None
    #: Defaults when neither this object nor the path says.
    DEFAULT_TIMEOUT_MS = 1000
    DEFAULT_RETRIES = 2

    def _timing(self, path: Any) -> Tuple[int, int]:
        """(ms per try, re-sends) for a request on ``path``."""
        ms = self.timeout_ms
        if ms is None:
            t = getattr(path, "mad_timeout", None)
            ms = int(t * 1000) if t else self.DEFAULT_TIMEOUT_MS
        r = self.retries
        if r is None:
            r = getattr(path, "retries", None)
            if r is None:
                r = self.DEFAULT_RETRIES
        return max(1, ms), max(0, r)


class MADTransactor:
    """The MAD RPC mixin: subclasses provide :meth:`_execute` (send a
    MAD, return the reply) and :meth:`_get_new_TID`.

    Not thread safe: use one transactor per thread.  After an RPC,
    :attr:`reply_fmt` and :attr:`reply_path` hold the last reply.
    """

    #: The path of the last reply.
    reply_path: Any = None
    #: The decoded ``*Format`` of the last reply.
    reply_fmt: Any = None
    #: A function ``f(mt, kind, fmt=, path=, ret=)`` called on RPC events
    #: (:func:`simple_tracer`, :func:`dumper_tracer`).
    trace_func: Optional[Callable[..., None]] = None
    #: The end port the transactor is bound to.
    end_port: Any = None
    #: Result slot of :meth:`do_async` coroutines.
    result: Any = None
    #: Times a request answered BUSY is sent again, and the first pause
    #: (seconds, doubled each time).
    busy_retries = 4
    busy_delay = 0.01
    #: Redirects followed for one request.
    max_redirects = 2
    #: The request being completed, while a completer runs.
    req_fmt: Optional[BinFormat]
    req_path: Any
    _redirects: Dict[Any, Any]

    @property
    def is_async(self) -> bool:
        """True for transactors whose RPC calls return work to yield
        (:class:`rdma.sched.MADSchedule`), not results."""
        return False

    # -- what subclasses provide

    def _execute(self, buf: bytearray, path: Any,
                 sendOnly: bool = False
                 ) -> Optional[Tuple[Union[bytes, bytearray], Any]]:
        """Send ``buf`` along ``path``; return ``(reply bytes, reply
        path)``, or None after the last retry timed out."""
        raise NotImplementedError

    def _get_new_TID(self) -> int:
        raise NotImplementedError

    # -- matching

    _get_match_key = staticmethod(_key)
    _get_reply_match_key = staticmethod(_key)

    @staticmethod
    def get_request_match_key(buf: Any) -> Tuple[int, int, int]:
        """``((oui << 8) | mgmtClass, (baseVersion << 8) | classVersion,
        attributeID)`` of a request MAD (oui 0 unless a vendor OUI
        class)."""
        cls = buf[1]
        oui = 0
        if 0x30 <= cls <= 0x4F and len(buf) >= 40:
            oui = int.from_bytes(bytes(buf[37:40]), "big")
        return ((oui << 8) | cls, (buf[0] << 8) | buf[2],
                int.from_bytes(bytes(buf[16:18]), "big"))

    # -- the core

    def _prepareMAD(self, fmt: BinFormat, payload: Any,
                    attributeModifier: int, method: int,
                    path: Any) -> bytearray:
        fmt.baseVersion = IBA.MAD_BASE_VERSION
        fmt.mgmtClass = fmt.MAD_CLASS
        fmt.classVersion = fmt.MAD_CLASS_VERSION
        fmt.method = method
        fmt.transactionID = self._get_new_TID()
        fmt.attributeID = payload.MAD_ATTRIBUTE_ID
        fmt.attributeModifier = attributeModifier
        if not isinstance(payload, type):
            if payload.MAD_LENGTH > len(fmt.data):
                raise ValueError(f"{type(payload).__name__} "
                                 f"({payload.MAD_LENGTH} bytes) does not "
                                 f"fit in {type(fmt).__name__}")
            payload.pack_into(fmt.data)
        buf = bytearray(fmt.MAD_LENGTH)
        fmt.pack_into(buf)
        if self.trace_func is not None:
            self.trace_func(self, TRACE_SEND, fmt=fmt, path=path)
        return buf

    def _timeout_text(self) -> str:
        t = getattr(self, "_last_timing", None)
        if not t:
            return ""
        return f" after {t[0]} tries (timeout {t[1]} ms each)"

    def _completeMAD(self, ret: Optional[Tuple[Any, Any]], fmt: BinFormat,
                     path: Any, newer: Type[BinStruct],
                     completer: Any) -> Any:
        if self.trace_func is not None:
            self.trace_func(self, TRACE_COMPLETE, ret=ret, fmt=fmt, path=path)
        if ret is None:
            raise MADTimeoutError(
                req=fmt, path=path,
                msg=f"RPC {describe(fmt)} to {path} timed out: no reply"
                    f"{self._timeout_text()}")
        rbuf, self.reply_path = ret
        rbuf = bytes(rbuf)
        data_off = _data_offset(type(fmt))
        is_sa = isinstance(fmt, IBA.SAFormat)
        if len(rbuf) < IBA.MADHeader.MAD_LENGTH:
            raise MADFormatError(req=fmt, path=path, rep_buf=rbuf,
                                 msg=f"RPC {describe(fmt)} to {path}: reply "
                                     f"of {len(rbuf)} bytes has no MAD "
                                     f"header")
        hdr = IBA.MADHeader(rbuf)
        if not is_sa and hdr.status & (IBA.MAD_STATUS_BUSY
                                       | IBA.MAD_STATUS_REDIRECT) \
                == 0 and hdr.status & 0x1C == 0 \
                and (hdr.status >> 8) & 0x7F == 0 \
                and len(rbuf) < data_off + newer.MAD_LENGTH:
            raise MADFormatError(
                req=fmt, path=path, rep_buf=rbuf,
                msg=f"RPC {describe(fmt)} to {path}: reply of {len(rbuf)} "
                    f"bytes is too short for {newer.__name__} "
                    f"({newer.MAD_LENGTH} bytes at {data_off})")
        # Some transports lose the unused tail of a MAD (the stock ibsim
        # shim drops the last 32 bytes): decode what the attribute needs.
        full = rbuf.ljust(fmt.MAD_LENGTH, b"\0")
        self.reply_fmt = rfmt = type(fmt)(full)
        if rfmt.mgmtClass != fmt.mgmtClass or \
                not rfmt.method & IBA.MAD_METHOD_RESPONSE:
            raise MADFormatError(
                req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                msg=f"RPC {describe(fmt)} to {path}: the reply is class "
                    f"{rfmt.mgmtClass:#x} method {rfmt.method:#x}, not a "
                    f"response of class {fmt.mgmtClass:#x}")
        status = rfmt.status
        if status & IBA.MAD_STATUS_BUSY:
            raise _Busy(req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                        status=status)
        if status & IBA.MAD_STATUS_REDIRECT:
            off = IBA.SAHeader.MAD_LENGTH if is_sa else data_off
            cpi = IBA.MADClassPortInfo(full, off)
            raise _Redirect(cpi, req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                            status=status)
        if status & 0x1C:
            raise MADError(req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                           status=status,
                           msg=f"RPC {describe(fmt)} to {path} got error "
                               f"status {status:#x} - "
                               f"{', '.join(IBA.mad_status_words(status))}")
        code = (status >> IBA.MAD_STATUS_CLASS_SHIFT) & \
            IBA.MAD_STATUS_CLASS_MASK
        if code:
            if isinstance(completer, tuple):
                self.req_fmt, self.req_path = fmt, path
                res = completer[1](rfmt, code)
                if res is not None:
                    res = completer[0](res)
                self.req_fmt = self.req_path = None
                if res is not None:
                    return res
            err = SAError if is_sa else MADClassError
            raise err(req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                      status=status, code=code,
                      msg=f"RPC {describe(fmt)} to {path} got class "
                          f"specific error {class_code_text(code, is_sa)}")
        want = (IBA.MAD_METHOD_GET_RESP if fmt.method == IBA.MAD_METHOD_SET
                else fmt.method | IBA.MAD_METHOD_RESPONSE)
        if rfmt.method != want:
            raise MADFormatError(
                req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                msg=f"RPC {describe(fmt)} to {path}: the reply's method is "
                    f"{rfmt.method:#x}, not {want:#x}")
        if rfmt.attributeID != fmt.attributeID:
            raise MADFormatError(
                req=fmt, rep=rfmt, path=path, rep_buf=rbuf,
                msg=f"RPC {describe(fmt)} to {path}: the reply carries "
                    f"attribute {rfmt.attributeID:#x}")
        if is_sa:
            try:
                rep = _sa_decode(rbuf, newer)
            except MADFormatError as e:
                e.req, e.path = fmt, path
                e.message(f"RPC {describe(fmt)} to {path}")
                raise
            if fmt.method in _TABLE_METHODS:
                rpayload: Any = rep.records
            elif rep.records:
                rpayload = rep.records[0]
            else:
                rpayload = None
        else:
            rpayload = newer(full, data_off)
        if completer:
            self.req_fmt, self.req_path = fmt, path
            fn = completer[0] if isinstance(completer, tuple) else completer
            try:
                return fn(rpayload)
            finally:
                self.req_fmt = self.req_path = None
        return rpayload

    # -- busy and redirect

    def _redirect_key(self, fmt: BinFormat, path: Any) -> Any:
        if fmt.MAD_CLASS in (IBA.MAD_SUBNET, IBA.MAD_SUBNET_DIRECTED):
            return None
        return (fmt.MAD_CLASS, getattr(path, "DLID", None),
                bytes(getattr(path, "DGID", None) or b""))

    def _redirected_path(self, path: Any, cpi: Any) -> Any:
        """A copy of ``path`` aimed where ClassPortInfo ``cpi`` says."""
        if hasattr(path, "copy") and not isinstance(path, dict):
            new = path.copy()
        else:
            import copy
            new = copy.copy(path)
        if cpi.redirectLID:
            new.DLID = cpi.redirectLID
        elif int(cpi.redirectGID):
            new.DGID = cpi.redirectGID
            try:
                new.has_grh = True
            except AttributeError:
                pass
        else:
            raise MADError(path=path, msg=f"redirect to {path} names neither "
                                          f"a LID nor a GID")
        new.dqpn = cpi.redirectQP
        new.qkey = cpi.redirectQKey
        new.SL = cpi.redirectSL
        pkeys = list(getattr(getattr(path, "end_port", None), "pkeys",
                             None) or [])
        if cpi.redirectPKey:
            if hasattr(new, "pkey"):
                try:
                    new.pkey = cpi.redirectPKey
                except AttributeError:
                    pass
            for i, k in enumerate(pkeys):
                if k & 0x7FFF == cpi.redirectPKey & 0x7FFF:
                    try:
                        new.pkey_index = i
                    except AttributeError:
                        pass
                    break
        return new

    def _doMAD(self, fmt: BinFormat, payload: Any, path: Any,
               attributeModifier: int, method: int,
               completer: Any = None) -> Any:
        """Build, send and complete one RPC (asynchronous transactors
        return work here instead)."""
        key = self._redirect_key(fmt, path)
        redirects: Optional[Dict[Any, Any]] = getattr(self, "_redirects",
                                                      None)
        original = None
        if key is not None and redirects and key in redirects:
            original, path = path, redirects[key]
        buf = self._prepareMAD(fmt, payload, attributeModifier, method, path)
        newer = payload if isinstance(payload, type) else type(payload)
        busy = followed = 0
        while True:
            ret = self._execute(buf, path)
            if ret is None and original is not None and \
                    redirects is not None:
                # The remembered redirect target is gone: ask the
                # original target again (it may redirect anew).
                del redirects[key]
                path, original = original, None
                fmt.transactionID = self._get_new_TID()
                fmt.pack_into(buf)
                continue
            try:
                return self._completeMAD(ret, fmt, path, newer, completer)
            except _Busy as e:
                busy += 1
                if busy > self.busy_retries:
                    raise MADError(
                        req=fmt, rep=e.rep, path=path, rep_buf=e.rep_buf,
                        status=e.status,
                        msg=f"RPC {describe(fmt)} to {path} still BUSY "
                            f"after {busy} tries") from None
                time.sleep(self.busy_delay * (1 << (busy - 1)))
            except _Redirect as e:
                followed += 1
                if followed > self.max_redirects:
                    raise MADError(
                        req=fmt, path=path, status=e.status,
                        msg=f"RPC {describe(fmt)} to {path}: more than "
                            f"{self.max_redirects} redirects") from None
                path = self._redirected_path(path, e.cpi)
                if key is not None:
                    if redirects is None:
                        redirects = self._redirects = {}
                    redirects[key] = path
                # A new TID: the target changed.
                fmt.transactionID = self._get_new_TID()
                fmt.pack_into(buf)

    # -- the RPCs

    @staticmethod
    def _method(payload: Any, name: str, call: str) -> int:
        try:
            method: int = getattr(payload, name)
            return method
        except AttributeError:
            cls = payload if isinstance(payload, type) else type(payload)
            raise TypeError(f"{cls.__name__} cannot be sent with {call}"
                            ) from None

    def _subn_do(self, payload: Any, path: Any, attributeModifier: int,
                 method: int) -> Any:
        dr = getattr(path, "drPath", None)
        if dr is not None:
            dr = bytes(dr)
            if not 1 <= len(dr) <= 64 or dr[0] != 0:
                raise ValueError(f"directed route {dr!r}: drPath is 1 to 64 "
                                 f"bytes and starts with 0")
            fmt: BinFormat = IBA.SMPFormatDirected()
            fmt.drSLID = getattr(path, "drSLID", IBA.LID_PERMISSIVE)
            fmt.drDLID = getattr(path, "drDLID", IBA.LID_PERMISSIVE)
            fmt.initialPath[:len(dr)] = dr
            fmt.hopCount = len(dr) - 1
        else:
            fmt = IBA.SMPFormat()
        fmt.MKey = getattr(path, "MKey", 0) or 0
        return self._doMAD(fmt, payload, path, attributeModifier, method)

    def SubnGet(self, payload: _Payload, path: Any,
                attributeModifier: int = 0) -> Any:
        """SubnGet an SMP attribute (LID-routed or directed route)."""
        return self._subn_do(payload, path, attributeModifier,
                             self._method(payload, "MAD_SUBNGET", "SubnGet"))

    def SubnSet(self, payload: BinStruct, path: Any,
                attributeModifier: int = 0) -> Any:
        """SubnSet an SMP attribute; return the reply's attribute."""
        return self._subn_do(payload, path, attributeModifier,
                             self._method(payload, "MAD_SUBNSET", "SubnSet"))

    def PerformanceGet(self, payload: _Payload, path: Any,
                       attributeModifier: int = 0) -> Any:
        """PerformanceGet a PerfMgt attribute (PortCounters...)."""
        return self._doMAD(IBA.PMFormat(), payload, path, attributeModifier,
                           self._method(payload, "MAD_PERFORMANCEGET",
                                        "PerformanceGet"))

    def PerformanceSet(self, payload: BinStruct, path: Any,
                       attributeModifier: int = 0) -> Any:
        """PerformanceSet (reset counters, start sampling...)."""
        return self._doMAD(IBA.PMFormat(), payload, path, attributeModifier,
                           self._method(payload, "MAD_PERFORMANCESET",
                                        "PerformanceSet"))

    def _gmp(self, fmt_cls: Type[BinFormat], call: str, payload: Any,
             path: Any, attributeModifier: int) -> Any:
        return self._doMAD(fmt_cls(), payload, path, attributeModifier,
                           self._method(payload, "MAD_" + call.upper(),
                                        call))

    def BMGet(self, payload: _Payload, path: Any,
              attributeModifier: int = 0) -> Any:
        """Baseboard management Get."""
        return self._gmp(IBA.BMFormat, "BMGet", payload, path,
                         attributeModifier)

    def BMSet(self, payload: BinStruct, path: Any,
              attributeModifier: int = 0) -> Any:
        """Baseboard management Set."""
        return self._gmp(IBA.BMFormat, "BMSet", payload, path,
                         attributeModifier)

    def CommMgtGet(self, payload: _Payload, path: Any,
                   attributeModifier: int = 0) -> Any:
        """Communication management Get."""
        return self._gmp(IBA.CMFormat, "CommMgtGet", payload, path,
                         attributeModifier)

    def CommMgtSet(self, payload: BinStruct, path: Any,
                   attributeModifier: int = 0) -> Any:
        """Communication management Set."""
        return self._gmp(IBA.CMFormat, "CommMgtSet", payload, path,
                         attributeModifier)

    def DevMgtGet(self, payload: _Payload, path: Any,
                  attributeModifier: int = 0) -> Any:
        """Device management Get."""
        return self._gmp(IBA.DMFormat, "DevMgtGet", payload, path,
                         attributeModifier)

    def DevMgtSet(self, payload: BinStruct, path: Any,
                  attributeModifier: int = 0) -> Any:
        """Device management Set."""
        return self._gmp(IBA.DMFormat, "DevMgtSet", payload, path,
                         attributeModifier)

    def SNMPGet(self, payload: _Payload, path: Any,
                attributeModifier: int = 0) -> Any:
        """SNMP tunneling Get."""
        return self._gmp(IBA.SNMPFormat, "SNMPGet", payload, path,
                         attributeModifier)

    def VendGet(self, payload: _Payload, path: Any,
                attributeModifier: int = 0) -> Any:
        """Vendor class Get (the payload's ``FORMAT`` or VendFormat)."""
        fmt = getattr(payload, "FORMAT", IBA.VendFormat)
        return self._gmp(fmt, "VendGet", payload, path, attributeModifier)

    def VendSet(self, payload: BinStruct, path: Any,
                attributeModifier: int = 0) -> Any:
        """Vendor class Set."""
        fmt = getattr(payload, "FORMAT", IBA.VendFormat)
        return self._gmp(fmt, "VendSet", payload, path, attributeModifier)

    def _subn_adm_do(self, payload: Any, path: Any, attributeModifier: int,
                     call: str, completer: Any = None) -> Any:
        if path is None:
            path = self._get_sa_path()
        fmt = IBA.SAFormat()
        if isinstance(payload, IBA.ComponentMask):
            fmt.componentMask = payload.component_mask
            payload = payload.payload
        elif isinstance(payload, BinStruct):
            fmt.componentMask = payload.component_mask()
        fmt.SMKey = getattr(path, "SMKey", 0) or 0
        method = self._method(payload, "MAD_" + call.upper(), call)
        return self._doMAD(fmt, payload, path, attributeModifier, method,
                           completer)

    def _get_sa_path(self) -> Any:
        sa = getattr(self, "sa_path", None)
        if sa is None:
            sa = getattr(self.end_port, "sa_path", None)
        if sa is None or not (getattr(sa, "DLID", 1) or
                              getattr(sa, "has_grh", False)):
            raise MADError(msg="no path to the SA: pass one, or use an end "
                               "port with an SM (its SM LID is 0)")
        return sa

    def SubnAdmGet(self, payload: _Payload, path: Any = None,
                   attributeModifier: int = 0) -> Any:
        """SubnAdmGet: the one record matching ``payload``."""
        return self._subn_adm_do(payload, path, attributeModifier,
                                 "SubnAdmGet", _one_record)

    def SubnAdmGetTable(self, payload: _Payload, path: Any = None,
                        attributeModifier: int = 0) -> List[Any]:
        """SubnAdmGetTable: every record matching ``payload`` (a list)."""
        records: List[Any] = self._subn_adm_do(
            payload, path, attributeModifier, "SubnAdmGetTable")
        return records

    def SubnAdmSet(self, payload: _Payload, path: Any = None,
                   attributeModifier: int = 0) -> Any:
        """SubnAdmSet: register/update a record; the SA's copy."""
        return self._subn_adm_do(payload, path, attributeModifier,
                                 "SubnAdmSet", _one_record)

    def SubnAdmDelete(self, payload: _Payload, path: Any = None,
                      attributeModifier: int = 0) -> Any:
        """SubnAdmDelete: remove a record; the SA's copy (or None)."""
        return self._subn_adm_do(payload, path, attributeModifier,
                                 "SubnAdmDelete")

    def SubnAdmGetTraceTable(self, payload: _Payload, path: Any = None,
                             attributeModifier: int = 0) -> List[Any]:
        """SubnAdmGetTraceTable: the TraceRecords of a path."""
        records: List[Any] = self._subn_adm_do(
            payload, path, attributeModifier, "SubnAdmGetTraceTable")
        return records

    def SubnAdmGetMulti(self, payload: _Payload, path: Any = None,
                        attributeModifier: int = 0) -> List[Any]:
        """SubnAdmGetMulti (MultiPathRecord)."""
        records: List[Any] = self._subn_adm_do(
            payload, path, attributeModifier, "SubnAdmGetMulti")
        return records

    # -- serving requests

    def parse_request(self, rbuf: Any, path: Any) -> Tuple[Any, Any]:
        """Decode a received request into ``(format, payload)``.

        Raises :class:`rdma.IBA.MADError` whose ``reply_status`` is the
        status an error reply should carry (0: do not reply)."""
        rbuf = bytes(rbuf)
        if len(rbuf) < IBA.MADHeader.MAD_LENGTH:
            raise MADError(req_buf=rbuf, path=path, reply_status=0,
                           msg=f"request of {len(rbuf)} bytes is shorter "
                               f"than a MAD header")
        match = self.get_request_match_key(rbuf)
        if match[1] >> 8 != IBA.MAD_BASE_VERSION:
            raise MADError(req_buf=rbuf, path=path,
                           reply_status=IBA.MAD_STATUS_BAD_VERSION,
                           msg=f"bad base version in request {match!r}")
        fmt_cls, attr = IBA.get_fmt_payload(*match)
        if fmt_cls is None:
            known = any(c == match[0] for c, _ in IBA.CLASS_TO_STRUCT)
            raise MADError(req_buf=rbuf, path=path,
                           reply_status=(IBA.MAD_STATUS_BAD_VERSION if known
                                         else IBA.MAD_STATUS_UNSUP_METHOD),
                           msg=f"unsupported class/version {match!r}")
        if len(rbuf) < fmt_cls.MAD_LENGTH:
            raise MADError(req_buf=rbuf, path=path, reply_status=0,
                           msg=f"request of {len(rbuf)} bytes, "
                               f"{fmt_cls.__name__} is "
                               f"{fmt_cls.MAD_LENGTH}")
        fmt = fmt_cls(rbuf)
        if self.trace_func is not None:
            self.trace_func(self, TRACE_RECEIVE, fmt=fmt, path=path,
                            ret=(rbuf, path))
        if attr is None:
            raise MADError(req=fmt, req_buf=rbuf, path=path,
                           reply_status=IBA.MAD_STATUS_UNSUP_METHOD_ATTR_COMBO,
                           msg=f"unsupported attribute for "
                               f"{fmt.describe()}")
        return fmt, attr(rbuf, _data_offset(fmt_cls))

    def _reply_fmt(self, ofmt: Any, status: int, class_code: int) -> Any:
        fmt = type(ofmt)()
        fmt.baseVersion = IBA.MAD_BASE_VERSION
        fmt.mgmtClass = ofmt.mgmtClass
        fmt.classVersion = ofmt.classVersion
        fmt.status = (status & 0x1F) | (
            (class_code & IBA.MAD_STATUS_CLASS_MASK)
            << IBA.MAD_STATUS_CLASS_SHIFT)
        if ofmt.method == IBA.MAD_METHOD_SET:
            fmt.method = IBA.MAD_METHOD_GET_RESP
        elif ofmt.method == IBA.MAD_METHOD_TRAP:
            fmt.method = IBA.MAD_METHOD_TRAP_REPRESS
        else:
            fmt.method = ofmt.method | IBA.MAD_METHOD_RESPONSE
        fmt.transactionID = ofmt.transactionID
        fmt.attributeID = ofmt.attributeID
        return fmt

    def send_reply(self, ofmt: Any, payload: Any, path: Any,
                   attributeModifier: int = 0, status: int = 0,
                   class_code: int = 0) -> None:
        """Answer the request ``ofmt`` (from :meth:`parse_request`) with
        ``payload`` along ``path`` (the request's path: reversed here)."""
        if ofmt.method == IBA.MAD_METHOD_TRAP and status:
            return
        fmt = self._reply_fmt(ofmt, status, class_code)
        fmt.attributeModifier = attributeModifier
        if payload is not None and not isinstance(payload, type):
            payload.pack_into(fmt.data)
        buf = bytearray(fmt.MAD_LENGTH)
        fmt.pack_into(buf)
        path.reverse()
        if self.trace_func is not None:
            self.trace_func(self, TRACE_REPLY, fmt=fmt, path=path)
        self.sendto(buf, path)

    def send_error_reply(self, buf: Any, path: Any, status: int,
                         class_code: int = 0) -> None:
        """Answer the raw request ``buf`` with an error ``status``."""
        hdr = IBA.MADHeader(bytes(buf))
        if hdr.method == IBA.MAD_METHOD_TRAP:
            return
        hdr.status = (status & 0x1F) | (
            (class_code & IBA.MAD_STATUS_CLASS_MASK)
            << IBA.MAD_STATUS_CLASS_SHIFT)
        hdr.method = (IBA.MAD_METHOD_GET_RESP
                      if hdr.method == IBA.MAD_METHOD_SET
                      else hdr.method | IBA.MAD_METHOD_RESPONSE)
        out = bytearray(buf)
        hdr.pack_into(out)
        path.reverse()
        self.sendto(out, path)

    def send_error_exc(self, exc: MADError) -> None:
        """:meth:`send_error_reply` for the request of a
        :meth:`parse_request` error."""
        status = getattr(exc, "reply_status", IBA.MAD_STATUS_UNSUP_METHOD)
        if status and exc.req_buf is not None:
            self.send_error_reply(exc.req_buf, exc.path, status)

    def sendto(self, buf: Any, path: Any) -> None:
        raise NotImplementedError

    # -- coroutines on a synchronous transactor

    def do_async(self, op: Any) -> Any:
        """Run a :mod:`rdma.sched`-style coroutine synchronously: each
        yielded RPC has already run (a synchronous transactor's RPC
        returns its result), so the generator is sent back what it
        yielded.  Returns :attr:`result`."""
        if op is None:
            return self.result
        self.result = None
        res = None
        first = True
        while True:
            try:
                res = next(op) if first else op.send(res)
                first = False
            except StopIteration:
                return self.result


def _one_record(records: Any) -> Any:
    if isinstance(records, list):
        if not records:
            raise MADFormatError(msg="the SA reply carries no record")
        return records[0]
    if records is None:
        raise MADFormatError(msg="the SA reply carries no record")
    return records


def _sa_decode(rbuf: bytes, newer: Type[BinStruct]) -> Any:
    """The records of an SA reply (rdma._mad.decode_sa_reply)."""
    return decode_sa_reply(rbuf, newer)
