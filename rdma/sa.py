"""The Subnet Administrator client: record queries and path resolution.

::

    import rdma, rdma.sa
    end_port = rdma.umad.get_end_port()          # or rdma.get_end_port()
    with rdma.get_umad(end_port) as umad:
        path = MyPath(end_port, DGID="fe80::20:1")   # any IBPath-like object
        rdma.sa.resolve_path(umad, path)
        print(path.DLID, path.SL, path.MTU)

Errors: :class:`SAError` carries the SA status decoded into words
(``ERR_NO_RECORDS``...), :class:`MADTimeoutError` means no SA answered.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Type, Union

from rdma._mad import (BinStruct, MADError, MADFormatError, MADTimeoutError,
                       SAError, SAPathNotFoundError, SALinkRecord,
                       SAMCMemberRecord, SANodeRecord, SAPathRecord,
                       SAPortInfoRecord, SAServiceRecord)
from rdma.IBA import GID, SA_STATUS_NO_RECORDS

__all__ = ["SAError", "SAPathNotFoundError", "MADError", "MADTimeoutError",
           "MADFormatError",
           "get", "get_table", "set", "delete", "path_record_query",
           "resolve_path", "SA_STATUS_NO_RECORDS", "SALinkRecord",
           "SAMCMemberRecord", "SANodeRecord", "SAPathRecord",
           "SAPortInfoRecord", "SAServiceRecord"]

_Payload = Union[BinStruct, Type[BinStruct]]


def get(umad: Any, payload: _Payload, **kw: Any) -> BinStruct:
    """SubnAdmGet: the one record matching ``payload`` (fields set are the
    query).  Raises :class:`SAError` (``ERR_NO_RECORDS``...)."""
    rec: BinStruct = umad.SubnAdmGet(payload, **kw)
    return rec


def get_table(umad: Any, payload: _Payload, **kw: Any) -> List[BinStruct]:
    """SubnAdmGetTable: every record matching ``payload`` (may be empty)."""
    rec: List[BinStruct] = umad.SubnAdmGetTable(payload, **kw)
    return rec


def set(umad: Any, payload: BinStruct, **kw: Any) -> BinStruct:  # noqa: A001
    """SubnAdmSet: register ``payload`` (a ServiceRecord, an
    MCMemberRecord join); return the SA's answer."""
    rec: BinStruct = umad.SubnAdmSet(payload, **kw)
    return rec


def delete(umad: Any, payload: BinStruct, **kw: Any) -> Optional[BinStruct]:
    """SubnAdmDelete: remove ``payload`` (unregister, leave a group)."""
    rec: Optional[BinStruct] = umad.SubnAdmDelete(payload, **kw)
    return rec


def path_record_query(umad: Any, *, table: bool = False, **fields: Any
                      ) -> Union[SAPathRecord, List[SAPathRecord]]:
    """Query PathRecords by fields (``DGID=``, ``SLID=``, ``PKey=``...).

    Returns the one :class:`SAPathRecord` of a SubnAdmGet, or the list of a
    SubnAdmGetTable with ``table=True``.
    """
    rec = SAPathRecord(**fields)
    if table:
        recs: List[SAPathRecord] = umad.SubnAdmGetTable(rec)
        return recs
    one: SAPathRecord = umad.SubnAdmGet(rec)
    return one


def _is_set(v: Any) -> bool:
    return v is not None and bool(v)


def resolve_path(umad: Any, path: Any, reversible: bool = True,
                 properties: Optional[Dict[str, Any]] = None) -> Any:
    """Complete ``path`` from the SA's PathRecord; return ``path``.

    The query uses what ``path`` has: ``DGID`` (with ``SGID``, default the
    end port's GID) or else ``DLID`` (with ``SLID``, default the end port's
    LID); ``properties`` adds PathRecord fields to the query (for example
    ``{"PKey": 0x8001, "SL": 1}``).  ``reversible`` asks for a reversible
    path and NumbPath 1.  The answer's SGID, DGID, SLID, DLID, SL, MTU,
    rate, packet lifetime (IBA encodings), P_Key, flow label, hop limit and
    traffic class are written back; ``has_grh`` is set when the path
    leaves the subnet (hop limit above 1).

    When ``umad`` is asynchronous (a :class:`rdma.sched.MADSchedule`,
    ``umad.is_async``), this returns a coroutine to ``yield`` to the
    scheduler instead, as python-rdma does; its result is ``path``.

    Raises :class:`SAPathNotFoundError` (an :class:`SAError`) when the SA
    has no such path (``ERR_NO_RECORDS``), another :class:`SAError`, or
    :class:`MADTimeoutError`.
    """
    gen = _resolve_path_gen(umad, path, reversible, properties)
    if getattr(umad, "is_async", False):
        return gen
    return _drive(gen)


def _drive(gen: Any) -> Any:
    """Run a coroutine whose yields are RPCs of a synchronous transactor
    (they have run already: send each value back); return its result."""
    value = None
    try:
        value = next(gen)
        while True:
            value = gen.send(value)
    except StopIteration as stop:
        return stop.value


def _resolve_path_gen(umad: Any, path: Any, reversible: bool,
                      properties: Optional[Dict[str, Any]]) -> Any:
    rec = SAPathRecord()
    end_port = getattr(path, "end_port", None) or getattr(umad, "end_port",
                                                          None)
    dgid = getattr(path, "DGID", None)
    dlid = getattr(path, "DLID", None)
    if _is_set(dgid):
        rec.DGID = GID(dgid)
        sgid = getattr(path, "SGID", None)
        if not _is_set(sgid) and end_port is not None:
            sgid = getattr(end_port, "default_gid", None)
        if _is_set(sgid):
            rec.SGID = GID(sgid)
    elif _is_set(dlid):
        rec.DLID = dlid
        slid = getattr(path, "SLID", None)
        if not _is_set(slid) and end_port is not None:
            slid = getattr(end_port, "lid", None)
        if _is_set(slid):
            rec.SLID = slid
    else:
        raise ValueError("resolve_path() needs a path with a DGID or a DLID")
    if reversible:
        rec.reversible = 1
        rec.numbPath = 1
    for name, value in (properties or {}).items():
        setattr(rec, name, value)
    try:
        rep = yield umad.SubnAdmGet(rec)
    except SAError as err:
        if err.sa_status != SA_STATUS_NO_RECORDS:
            raise
        where = (f"DGID {rec.DGID}" if _is_set(dgid) else f"DLID {dlid}")
        raise SAPathNotFoundError.from_error(
            err, f"the SA has no path record to {where}") from None
    path.SGID = rep.SGID
    path.DGID = rep.DGID
    path.SLID = rep.SLID
    path.DLID = rep.DLID
    path.SL = rep.SL
    path.pkey = rep.PKey
    path.MTU = rep.MTU
    path.rate = rep.rate
    path.packet_life_time = rep.packetLifeTime
    path.flow_label = rep.flowLabel
    path.hop_limit = rep.hopLimit
    path.traffic_class = rep.TClass
    path.has_grh = rep.hopLimit > 1
    return path
