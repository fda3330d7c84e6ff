"""SMP reads answered by the SA (python-rdma's ``rdma.satransactor``).

:class:`SATransactor` wraps another transactor (a :class:`rdma.umad.UMAD`,
a :class:`rdma.sched.MADSchedule`...).  Its :meth:`SubnGet` of an SMP
attribute that the SA keeps a record of becomes a SubnAdmGet of that
record, to the SA, and returns the attribute inside the record:

=========================  ================================================
SMP attribute              SA record (fields set from the path and modifier)
=========================  ================================================
NodeInfo                   NodeRecord (LID)
NodeDescription            NodeRecord (LID)
PortInfo                   PortInfoRecord (endportLID, portNum; modifier 0
                           of a node not known to be a switch: a GetTable,
                           the port 0 record if there is one, else the first)
SwitchInfo                 SwitchInfoRecord (LID)
LinearForwardingTable      LinearForwardingTableRecord (LID, blockNum)
MulticastForwardingTable   MulticastForwardingTableRecord (LID, blockNum =
                           modifier bits 8:0, position = bits 31:28)
GUIDInfo                   GUIDInfoRecord (LID, blockNum)
PKeyTable                  P_KeyTableRecord (LID, blockNum, portNum of a
                           switch)
SLtoVLMappingTable         SLtoVLMappingTableRecord (LID, input, output port)
VLArbitrationTable         VLArbitrationTableRecord (LID, outputPortNum,
                           blockNum)
SMInfo                     SMInfoRecord (LID)
=========================  ================================================

Every other RPC (SubnSet included: the SA cannot write a node's
attributes) goes to the wrapped transactor unchanged, as in python-rdma.
A table block the SA has no record for (opensm answers
ERR_NO_RECORDS for a block nobody programmed) reads as an empty block,
as python-rdma does; a LinearForwardingTable block reads as 255
everywhere (no port), which is what a switch answers for an unused
block.  A directed-route path is turned into a LID by LinkRecord
queries, one per hop, and the LID is cached in the path.

Differences from python-rdma: the MulticastForwardingTable position is
taken from modifier bits 31:28 (IBA 14.2.5.12), and a synchronous
transactor resolves a directed route with synchronous LinkRecord queries
(an asynchronous one must run :meth:`prepare_path_lid` first, as in
python-rdma).
"""
from __future__ import annotations

from typing import Any, Callable, Generator, Optional

import rdma.IBA as IBA
from rdma._errors import RDMAError
from rdma.madtransactor import MADTransactor

__all__ = ["SATransactor"]


def _empty_on_no_records(record_cls: type,
                         fill: Optional[Callable[[Any], None]] = None
                         ) -> Callable[[Any, int], Any]:
    """A class-error handler (for a completer tuple): an empty record of
    *record_cls* (passed through *fill*) for ERR_NO_RECORDS, else None
    (the error is raised)."""
    def handler(rfmt: Any, code: int) -> Any:
        if code != IBA.MAD_STATUS_SA_NO_RECORDS:
            return None
        rec = record_cls()
        if fill is not None:
            fill(rec)
        return rec
    return handler


class SATransactor(MADTransactor):
    """Wrap the transactor *parent*: SubnGet of the SMP attributes listed
    in the module's table is answered through the SA at *sa_path*
    (default: the parent's SA path); everything else is the parent's.
    A context manager whose exit closes the parent."""

    def __init__(self, parent: MADTransactor, sa_path: Any = None):
        self._parent = parent
        #: The end port of the wrapped transactor.
        self.end_port = parent.end_port
        self._sa_path = sa_path

    # -- what is the parent's

    @property
    def sa_path(self) -> Any:
        """The path SA queries take."""
        if self._sa_path is None:
            sa = getattr(self._parent, "sa_path", None)
            if sa is None:
                sa = self._parent._get_sa_path()
            self._sa_path = sa
        return self._sa_path

    def _get_sa_path(self) -> Any:
        return self.sa_path

    def _get_new_TID(self) -> int:
        return self._parent._get_new_TID()

    def _doMAD(self, fmt: Any, payload: Any, path: Any,
               attributeModifier: int, method: int,
               completer: Any = None) -> Any:
        return self._parent._doMAD(fmt, payload, path, attributeModifier,
                                   method, completer)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_parent":
            raise AttributeError(name)
        return getattr(self._parent, name)

    @property
    def is_async(self) -> bool:
        """Whether the wrapped transactor is asynchronous."""
        return self._parent.is_async

    @property
    def result(self) -> Any:
        """The wrapped transactor's :attr:`result` slot."""
        return self._parent.result

    @result.setter
    def result(self, value: Any) -> None:
        self._parent.result = value

    @property
    def reply_fmt(self) -> Any:
        """The last reply's format (the wrapped transactor's)."""
        return self._parent.reply_fmt

    @property
    def reply_path(self) -> Any:
        """The last reply's path (the wrapped transactor's)."""
        return self._parent.reply_path

    def close(self) -> None:
        """Close the wrapped transactor."""
        close: Callable[[], None] = getattr(self._parent, "close")
        close()

    def __enter__(self) -> "SATransactor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- paths to LIDs

    def get_path_lid(self, path: Any) -> int:
        """The LID *path* leads to: its DLID, or for a directed route the
        LID found by LinkRecord queries (cached in the path).

        :raises rdma.RDMAError: for a directed route on an asynchronous
            transactor that :meth:`prepare_path_lid` has not resolved."""
        dr = getattr(path, "drPath", None)
        if dr is None:
            return int(path.DLID)
        if path.drDLID != IBA.LID_PERMISSIVE:
            return int(path.drDLID)
        lid: Optional[int] = path.__dict__.get("_cached_resolved_dlid")
        if lid is not None:
            return lid
        if len(bytes(dr)) <= 1:
            lid = self._start_lid(path)
            path.__dict__["_cached_resolved_dlid"] = lid
            return lid
        if self._parent.is_async:
            raise RDMAError(f"{path}: an asynchronous SATransactor needs "
                            f"prepare_path_lid() run on a directed route "
                            f"first")
        res: int = self._parent.do_async(self.prepare_path_lid(path))
        return res

    def _start_lid(self, path: Any) -> int:
        if path.DLID != IBA.LID_PERMISSIVE and path.DLID:
            return int(path.DLID)
        return int(self.end_port.lid)

    def prepare_path_lid(self, path: Any) -> Generator[Any, Any, None]:
        """Coroutine: resolve the directed route *path* to a LID with one
        LinkRecord query per hop (the result is in :attr:`result` and
        cached in the path)."""
        if getattr(path, "drPath", None) is None or \
                path.drDLID != IBA.LID_PERMISSIVE or \
                path.__dict__.get("_cached_resolved_dlid") is not None:
            self._parent.result = self.get_path_lid(path)
            return
        lid = self._start_lid(path)
        for hop in bytes(path.drPath)[1:]:
            req = IBA.ComponentMask(IBA.SALinkRecord())
            req.fromLID = lid
            req.fromPort = hop
            try:
                rep = yield self._parent.SubnAdmGet(req, self.sa_path)
            except IBA.MADError as e:
                raise RDMAError(f"{path}: the SA knows no link out of port "
                                f"{hop} of LID {lid}: {e}") from e
            lid = rep.toLID
        path.__dict__["_cached_resolved_dlid"] = lid
        self._parent.result = lid

    # -- SubnGet through the SA

    def _sa_get(self, req: Any, unwrap: Callable[[Any], Any],
                on_error: Any = None, table: bool = False) -> Any:
        completer = unwrap if on_error is None else (unwrap, on_error)
        return self._subn_adm_do(req, self.sa_path, 0,
                                 "SubnAdmGetTable" if table else
                                 "SubnAdmGet", completer)

    def SubnGet(self, payload: Any, path: Any,
                attributeModifier: int = 0) -> Any:
        """SubnGet *payload*'s attribute from the node *path* leads to:
        through the SA for the attributes it keeps (see the module),
        else an SMP through the wrapped transactor."""
        ID = payload.MAD_ATTRIBUTE_ID
        amod = attributeModifier

        def lid_req(cls: type) -> Any:
            req = IBA.ComponentMask(cls())
            req.LID = self.get_path_lid(path)
            return req

        def note_type(rec: Any) -> Any:
            path.__dict__["_cached_node_type"] = rec.nodeInfo.nodeType
            return rec

        if ID == IBA.SMPNodeInfo.MAD_ATTRIBUTE_ID:
            return self._sa_get(lid_req(IBA.SANodeRecord),
                                lambda r: note_type(r).nodeInfo)
        if ID == IBA.SMPNodeDescription.MAD_ATTRIBUTE_ID:
            return self._sa_get(lid_req(IBA.SANodeRecord),
                                lambda r: note_type(r).nodeDescription)
        if ID == IBA.SMPSwitchInfo.MAD_ATTRIBUTE_ID:
            return self._sa_get(lid_req(IBA.SASwitchInfoRecord),
                                lambda r: r.switchInfo)
        if ID == IBA.SMPSMInfo.MAD_ATTRIBUTE_ID:
            return self._sa_get(lid_req(IBA.SASMInfoRecord),
                                lambda r: r.SMInfo)
        if ID == IBA.SMPGUIDInfo.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SAGUIDInfoRecord)
            req.blockNum = amod & 0xFF
            return self._sa_get(req, lambda r: r.GUIDInfo)
        if ID == IBA.SMPLinearForwardingTable.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SALinearForwardingTableRecord)
            req.blockNum = amod & 0xFFFF

            def unused(rec: Any) -> None:
                rec.linearForwardingTable.portBlock = [0xFF] * 64
            return self._sa_get(
                req, lambda r: r.linearForwardingTable,
                _empty_on_no_records(IBA.SALinearForwardingTableRecord,
                                     unused))
        if ID == IBA.SMPMulticastForwardingTable.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SAMulticastForwardingTableRecord)
            req.blockNum = amod & 0x1FF
            req.position = (amod >> 28) & 0xF
            return self._sa_get(
                req, lambda r: r.multicastForwardingTable,
                _empty_on_no_records(IBA.SAMulticastForwardingTableRecord))
        if ID == IBA.SMPPKeyTable.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SAPKeyTableRecord)
            nt = path.__dict__.get("_cached_node_type")
            if nt is None or nt == IBA.NODE_SWITCH:
                req.portNum = (amod >> 16) & 0xFF
            req.blockNum = amod & 0xFFFF
            return self._sa_get(
                req, lambda r: r.PKeyTable,
                _empty_on_no_records(IBA.SAPKeyTableRecord))
        if ID == IBA.SMPSLToVLMappingTable.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SASLToVLMappingTableRecord)
            req.inputPortNum = (amod >> 8) & 0xFF
            req.outputPortNum = amod & 0xFF
            return self._sa_get(
                req, lambda r: r.SLToVLMappingTable,
                _empty_on_no_records(IBA.SASLToVLMappingTableRecord))
        if ID == IBA.SMPVLArbitrationTable.MAD_ATTRIBUTE_ID:
            req = lid_req(IBA.SAVLArbitrationTableRecord)
            req.outputPortNum = amod & 0xFF
            req.blockNum = (amod >> 16) & 0xFF
            return self._sa_get(
                req, lambda r: r.VLArbitrationTable,
                _empty_on_no_records(IBA.SAVLArbitrationTableRecord))
        if ID == IBA.SMPPortInfo.MAD_ATTRIBUTE_ID:
            req = IBA.ComponentMask(IBA.SAPortInfoRecord())
            req.endportLID = self.get_path_lid(path)
            if amod == 0 and \
                    path.__dict__.get("_cached_node_type") != \
                    IBA.NODE_SWITCH:
                # Port 0 of a switch, or "the port the SMP came in by"
                # of a CA: the SA cannot tell; read every port's record.
                def pick(recs: Any) -> Any:
                    if not recs:
                        raise IBA.MADError(
                            msg=f"SubnGet(SMPPortInfo) through the SA: no "
                                f"PortInfoRecord for LID {req.endportLID}")
                    for r in recs:
                        if r.portNum == 0:
                            return r.portInfo
                    return recs[0].portInfo
                return self._sa_get(req, pick, table=True)
            req.portNum = amod & 0xFF
            return self._sa_get(req, lambda r: r.portInfo)
        return self._parent.SubnGet(payload, path, attributeModifier)
