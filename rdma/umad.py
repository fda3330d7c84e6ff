"""User MADs: :func:`get_umad` and the :class:`UMAD` transactor.

The end ports are those of the one device model (:mod:`rdma.devices`):
:func:`get_end_port` is :func:`rdma.get_end_port`, and a port works here
when libibumad reports its device (``umad_get_cas_names``,
``umad_get_ca``), which includes CAs that only umad knows (the CA of
rdma's ibsim shim, :mod:`rdma.simnet`).
:class:`UMAD` sends MADs, waits for the reply whose transaction ID matches
(the low 32 bits: the kernel owns the upper half), retries on timeout and
decodes SA replies; the SA RPCs have python-rdma's names
(:meth:`UMAD.SubnAdmGet`, :meth:`~UMAD.SubnAdmGetTable`,
:meth:`~UMAD.SubnAdmSet`, :meth:`~UMAD.SubnAdmDelete`).
"""
from __future__ import annotations

import errno
import os
import time
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from rdma import _umad
from rdma import devices as _devices
from rdma._errors import RDMAError, SysError
from rdma._mad import (BinStruct,
                       MADHeader, SAReply, decode_sa_reply, encode_sa_request)
from rdma.devices import DemandList, Device, EndPort
from rdma.IBA import GID, GUID, IB_DEFAULT_QP1_QKEY
from rdma.path import IBPath

__all__ = ["UMAD", "UMADDevice", "UMADEndPort", "SAPath", "get_umad",
           "get_umad_devices", "get_end_port", "sa_path"]

#: Port states of umad_port.state (IBA PortState).
PORT_ACTIVE = 4


class SAPath(IBPath):
    """The path to a port's SA: an :class:`rdma.path.IBPath` (as
    python-rdma's ``end_port.sa_path`` is) with ``DLID`` = SM LID, ``SL`` =
    SM SL, ``dqpn``/``sqpn`` 1, ``qkey`` the QP1 Q_Key and the default
    partition's P_Key.  ``copy(dqpn=0, ...)`` gives a plain path to the
    SM itself."""

    def __init__(self, end_port: Any = None, DLID: int = 0, SL: int = 0,
                 SLID: int = 0, pkey: int = 0xFFFF, pkey_index: int = 0,
                 **kwargs: Any):
        kwargs.setdefault("dqpn", 1)
        kwargs.setdefault("sqpn", 1)
        kwargs.setdefault("qkey", IB_DEFAULT_QP1_QKEY)
        IBPath.__init__(self, end_port, DLID=DLID, SL=SL, SLID=SLID,
                        pkey=pkey, **kwargs)
        # Index of ``pkey`` in the port's P_Key table (known already; the
        # IBPath property looks it up again after any change).
        self.__dict__["_cached_pkey_index"] = pkey_index

    # (a plain IBPath on purpose, not an SAPath: the override is meant)
    def copy(self, **kwargs: Any) -> IBPath:  # type: ignore[override]
        """An :class:`rdma.path.IBPath` equal to this path, with *kwargs*
        applied."""
        from rdma.path import _copy_path
        return _copy_path(self, IBPath, kwargs)

    def __repr__(self) -> str:
        return (f"SAPath(end_port={self.end_port}, DLID={self.DLID}, "
                f"SL={self.SL})")


def _no_sm(end_port: Any) -> RDMAError:
    return RDMAError(f"{end_port} has no subnet manager (SM LID 0): "
                     f"is a subnet manager running?")


def sa_path(end_port: Any, require_sm: bool = True) -> SAPath:
    """Return the :class:`SAPath` of any end port that has ``sm_lid``
    (a :class:`UMADEndPort` or a verbs :class:`rdma.EndPort`).

    :raises RDMAError: the port knows no SM (SM LID 0), unless
        ``require_sm`` is False: then the path's DLID is 0 (what
        ``end_port.sa_path`` gives, as python-rdma's does)."""
    sm_lid = getattr(end_port, "sm_lid", 0)
    if not sm_lid and require_sm:
        raise _no_sm(end_port)
    sm_sl = getattr(end_port, "sm_sl", None)
    if sm_sl is None:
        attr = getattr(end_port, "attr", None)
        sm_sl = getattr(attr, "sm_sl", 0) if attr is not None else 0
    pkeys = list(getattr(end_port, "pkeys", []) or [])
    index = 0
    for i, k in enumerate(pkeys):
        if k & 0x7FFF == 0x7FFF:
            index = i
            break
    return SAPath(end_port, sm_lid, sm_sl, getattr(end_port, "lid", 0),
                  pkeys[index] if pkeys else 0xFFFF, index)


#: An end port with umad: the one device model's :class:`rdma.devices.EndPort`.
UMADEndPort = EndPort
#: A device seen by libibumad: :class:`rdma.devices.Device`.
UMADDevice = Device
#: The same function as :func:`rdma.get_end_port`.
get_end_port = _devices.get_end_port


def get_umad_devices() -> DemandList[Device]:
    """Return the devices libibumad reports (empty without umad support),
    with their verbs side merged in where they have one: the same
    :class:`rdma.devices.Device` objects as ``rdma.get_devices("umad")``.

    Raises :class:`rdma.SysError` if libibumad is not installed.
    """
    return _devices.get_devices(_devices.UMAD)


def _resolve_port(end_port: Any) -> Tuple[str, int, Any]:
    """The umad CA name and port number of *end_port* (an end port, a
    name for :func:`get_end_port`, or None), and the end port."""
    default = end_port is None
    if end_port is None or isinstance(end_port, (str, GID, GUID)):
        end_port = get_end_port(end_port)
    if not isinstance(end_port, EndPort):
        parent = getattr(end_port, "parent", None)
        port_id = getattr(end_port, "port_id", None)
        if parent is None or port_id is None:
            raise TypeError(f"get_umad() needs an end port, not "
                            f"{type(end_port).__name__}")
        return getattr(parent, "name", str(parent)), port_id, end_port
    if end_port.has_umad:
        return end_port.parent.name, end_port.port_id, end_port
    if end_port.provider == _devices.SOFTWARE:
        what = "no umad devices: the default end port " if default else ""
        raise RDMAError(f"{what}{end_port} is the software fabric, which has "
                        f"no umad (MADs need an InfiniBand device or the "
                        f"ibsim shim)")
    # Listed without umad: look again (ib_umad may have been loaded since).
    for d in get_umad_devices():
        if d.name == end_port.parent.name:
            p = d.end_ports.get(end_port.port_id)
            if p is not None:
                return d.name, p.port_id, end_port
    raise RDMAError(f"{end_port} has no umad device (is ib_umad loaded?)")


# ---- the transactor (below: only MADs; devices and end ports are above) ----

from rdma.madtransactor import (MADTransactor, TimedSends,  # noqa: E402
                                TRACE_UNEXPECTED, _key)
from rdma._mad import MADError, describe  # noqa: E402
import rdma.IBA as _IBA  # noqa: E402

_SMP_CLASSES = (_IBA.MAD_SUBNET, _IBA.MAD_SUBNET_DIRECTED)


class UMADReplyPath:
    """Where a received MAD came from, as python-rdma's reply paths
    describe it: the packet as it was on the wire (``SLID`` the sender,
    ``DLID`` us, ``sqpn`` the sender's QP).  :meth:`reverse` turns it into
    the path back to the sender (what :meth:`UMAD.send_reply` uses)."""

    has_grh = False
    SGID = None
    DGID = None

    def __init__(self, end_port: Any, agent: int, addr: Tuple[Any, ...],
                 dqpn: int):
        (lid, qpn, qkey, sl, path_bits, grh, gid, hop_limit, tclass, flow,
         pkey_index, gid_index) = addr
        #: The local end port.
        self.end_port = end_port
        #: The umad agent that received the MAD.
        self.umad_agent_id = agent
        #: The sender's LID and QP, our LID (plus path bits) and QP.
        self.SLID = lid
        self.sqpn = qpn
        self.DLID = (getattr(end_port, "lid", 0) or 0) | path_bits
        self.dqpn = dqpn
        #: Q_Key, SL and P_Key index of the packet.
        self.qkey = qkey
        self.SL = sl
        self.pkey_index = pkey_index
        if grh:
            self.has_grh = True
            self.SGID = GID(gid)
            #: The index of our GID the packet arrived on (a reply leaves
            #: from it: on RoCE the address family must match).
            self.SGID_index = gid_index
            gids = getattr(end_port, "gids", None) or ()
            if gid_index < len(gids) and gids[gid_index] is not None:
                self.DGID = GID(gids[gid_index])
            self.hop_limit = hop_limit
            self.traffic_class = tclass
            self.flow_label = flow

    def reverse(self, for_reply: bool = True) -> "UMADReplyPath":
        """Swap the ends in place (the path back to the sender)."""
        self.SLID, self.DLID = self.DLID, self.SLID
        self.sqpn, self.dqpn = self.dqpn, self.sqpn
        if self.has_grh:
            self.SGID, self.DGID = self.DGID, self.SGID
        return self

    def copy(self) -> "UMADReplyPath":
        import copy as _copy
        return _copy.copy(self)

    def __repr__(self) -> str:
        return (f"UMADReplyPath(SLID={self.SLID}, DLID={self.DLID}, "
                f"sqpn={self.sqpn}, dqpn={self.dqpn}, SL={self.SL})")

    __str__ = __repr__


class UMAD(TimedSends, MADTransactor):
    """A umad port: python-rdma's MAD transactor over libibumad; a context
    manager.

    Every RPC of :class:`rdma.madtransactor.MADTransactor` works
    (``SubnGet``/``SubnSet`` LID-routed or directed, ``PerformanceGet``,
    ``SubnAdmGet``/``GetTable``/``Set``/``Delete``, ``BMGet``...).  The
    wait for one reply and the number of re-sends come from the
    ``timeout_ms``/``retries`` given here (or assigned later), else from
    the path (``mad_timeout`` seconds, ``retries``), else 1000 ms and 2.
    A dead target is reported after about ``timeout * (retries + 1)`` as
    :class:`rdma.IBA.MADTimeoutError`.

    SA agents are registered with the kernel's RMPP, so GetTable answers
    of many MADs arrive reassembled.
    """

    #: Join multi-MAD (RMPP) SA answers here instead of in the kernel:
    #: the SA agent is registered without RMPP, each DATA segment is
    #: acknowledged and the segments are joined by
    #: :class:`rdma._rmpp.RMPPReassembler`.  For umad layers that pass
    #: segments through; set before the first SA query.
    rmpp_in_user = False
    #: With :attr:`rmpp_in_user`: the longest a whole answer may take to
    #: arrive, in seconds (the kernel's RMPP receive timeout, 40 s), and
    #: its largest size in bytes; past either the call fails
    #: (:class:`rdma.IBA.MADTimeoutError`, :class:`rdma.IBA.MADFormatError`).
    rmpp_deadline = 40.0
    rmpp_max_bytes = 64 << 20

    def __init__(self, end_port: Any = None, path: Any = None, *,
                 timeout_ms: Optional[int] = None,
                 retries: Optional[int] = None):
        ca, port_id, ep = _resolve_port(end_port)
        #: The end port this umad is open on.
        self.end_port = ep
        self._port = _umad.Port(ca, port_id)
        # (class, version, rmpp, methods) -> agent id; agent id -> QP
        self._agents: Dict[Tuple[int, int, bool, Tuple[int, ...]], int] = {}
        self._agent_dqpn: Dict[int, int] = {}
        self._tid = int.from_bytes(os.urandom(4), "big")
        self._sa_path: Optional[Any] = path
        self._pending: List[Any] = []
        if timeout_ms is not None:
            self.timeout_ms = timeout_ms
        if retries is not None:
            self.retries = retries
        #: Replies that matched no outstanding request (dropped).
        self.unmatched = 0

    @property
    def parent(self) -> Any:
        """The end port this umad is open on (python-rdma's name for
        :attr:`end_port`)."""
        return self.end_port

    # -- lifetime

    def close(self) -> None:
        """Close the port (idempotent)."""
        self._port.close()

    @property
    def closed(self) -> bool:
        return self._port.closed

    def __enter__(self) -> "UMAD":
        if self.closed:
            raise ValueError("operation on a closed UMAD")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rdma.umad.UMAD {self._port.ca_name}/{self._port.port_num}>"

    # -- agents

    def register(self, mgmt_class: int, mgmt_version: int,
                 rmpp: bool = False, methods: Optional[List[int]] = None
                 ) -> int:
        """Register (once) an agent for a class; return its agent id.

        ``rmpp`` makes the kernel run RMPP for it (large SA replies arrive
        reassembled); ``methods`` lists the request methods to receive
        (a server agent).
        """
        key = (mgmt_class, mgmt_version, rmpp, tuple(methods or ()))
        agent = self._agents.get(key)
        if agent is None:
            mask = None
            if methods:
                bits = 0
                for m in methods:
                    bits |= 1 << m
                mask = bits.to_bytes(16, "little")
            agent = self._port.register(mgmt_class, mgmt_version,
                                        1 if rmpp else 0, mask)
            self._agents[key] = agent
            self._agent_dqpn[agent] = 0 if mgmt_class in _SMP_CLASSES else 1
        return agent

    def register_client(self, mgmt_class: int, class_version: int,
                        oui: int = 0) -> int:
        """The agent that sends requests of a class (RMPP for the SA)."""
        return self.register(mgmt_class, class_version,
                             rmpp=mgmt_class == _IBA.MAD_SUBNET_ADMIN
                             and not self.rmpp_in_user)

    def register_server(self, mgmt_class: int, class_version: int,
                        oui: int = 0, method_mask: int = 0) -> int:
        """Receive requests of a class whose method bit is in
        ``method_mask`` (python-rdma's server registration)."""
        methods = [m for m in range(128) if method_mask >> m & 1]
        return self.register(mgmt_class, class_version,
                             rmpp=mgmt_class == _IBA.MAD_SUBNET_ADMIN,
                             methods=methods or None)

    def register_server_fmt(self, fmt: Any) -> int:
        """:meth:`register_server` for a ``*Format`` class (Get and Set)."""
        return self.register_server(fmt.MAD_CLASS, fmt.MAD_CLASS_VERSION,
                                    getattr(fmt, "MAD_CLASS_OUI", 0),
                                    getattr(fmt, "MAD_METHOD_MASK", 6))

    def _get_new_TID(self) -> int:
        self._tid = (self._tid + 1) & 0xFFFFFFFF
        return self._tid

    next_tid = _get_new_TID

    # -- raw MADs

    def sendto(self, buf: Any, path: Any, agent_id: Optional[int] = None,
               timeout_ms: int = 0) -> None:
        """Send one MAD along ``path`` (``DLID``, ``dqpn``, ``SL``,
        ``qkey``, ``pkey_index``; a GRH when ``has_grh`` is set).  SMPs
        go to QP0 with Q_Key 0, GMPs to QP1 with the well-known Q_Key
        unless the path names another QP.  ``timeout_ms`` keeps the
        kernel waiting for the response (needed for RMPP)."""
        if agent_id is None:
            agent_id = getattr(path, "umad_agent_id", None)
        if agent_id is None:
            agent_id = self.register_client(buf[1], buf[2])
        if buf[1] in _SMP_CLASSES:
            dqpn, qkey, pkey_index = 0, 0, 0
        else:
            dqpn = getattr(path, "dqpn", 1)
            if dqpn is None:
                dqpn = 1
            qkey = (IB_DEFAULT_QP1_QKEY if dqpn == 1
                    else getattr(path, "qkey", IB_DEFAULT_QP1_QKEY))
            pkey_index = getattr(path, "pkey_index", 0) or 0
        grh = None
        if getattr(path, "has_grh", False):
            grh = (bytes(GID(path.DGID)), getattr(path, "SGID_index", 0),
                   getattr(path, "hop_limit", 0xFF) or 0xFF,
                   getattr(path, "traffic_class", 0),
                   getattr(path, "flow_label", 0))
        self._port.send(agent_id, bytes(buf), dlid=path.DLID, dqpn=dqpn,
                        sl=getattr(path, "SL", 0) or 0, qkey=qkey,
                        pkey_index=pkey_index, timeout_ms=timeout_ms,
                        retries=0, grh=grh)

    def _recv(self, wakeat: Optional[float]
              ) -> Optional[Tuple[bytes, int, Tuple[Any, ...], int]]:
        """One umad_recv until the monotonic time ``wakeat`` (None:
        forever): ``(mad, status, addr, agent)`` or None."""
        if wakeat is None:
            ms = -1
        else:
            ms = int((wakeat - time.monotonic()) * 1000)
            if ms <= 0:
                return None
        r = self._port.recv(ms)
        if r is None:
            return None
        agent, status, mad, addr = r
        return mad, status, addr, agent

    def recvfrom(self, wakeat: Optional[float]
                 ) -> Optional[Tuple[bytearray, UMADReplyPath]]:
        """Receive one MAD before the monotonic time ``wakeat`` (None:
        wait forever; Ctrl-C interrupts): ``(buf, path)`` or None.

        Sends the kernel gave back (our own timed-out requests) are
        skipped; another failed send raises :class:`rdma.SysError`."""
        while True:
            got = self._recv(wakeat)
            if got is None:
                return None
            mad, status, addr, agent = got
            if status:
                if status == errno.ETIMEDOUT:
                    continue
                raise SysError(status, "umad_send",
                               f"a sent MAD came back failed "
                               f"({_describe_raw(mad)})")
            return (bytearray(mad),
                    UMADReplyPath(self.end_port, agent, addr,
                                  self._agent_dqpn.get(agent, 1)))

    def _execute(self, buf: Any, path: Any, sendOnly: bool = False
                 ) -> Optional[Tuple[bytearray, Any]]:
        """Send ``buf`` and wait for the reply with the same class and
        TID (low 32 bits); re-send on timeout.  None when every try timed
        out (or ibsim/the kernel gave the request back undeliverable)."""
        ms, retries = self._timing(path)
        self._last_timing = (retries + 1, ms)
        if sendOnly:
            self.sendto(buf, path, timeout_ms=ms)
            return None
        match = _key(buf)
        for _ in range(retries + 1):
            self.sendto(buf, path, timeout_ms=ms)
            # The kernel gives a request back (ETIMEDOUT) when its own
            # timer of ms ends; ours is the backstop for transports that
            # do not.
            deadline = time.monotonic() + ms * 1.25 / 1000
            while True:
                got = self._recv(deadline)
                if got is None:
                    break
                mad, status, addr, agent = got
                if len(mad) < 24 or _key(mad) != match:
                    self.unmatched += 1
                    if self.trace_func is not None:
                        self.trace_func(self, TRACE_UNEXPECTED, path=path,
                                        ret=(mad, addr))
                    continue
                if status:
                    if status != errno.ETIMEDOUT:
                        raise SysError(status, "umad_send",
                                       f"{_describe_raw(buf)} to "
                                       f"{_where(path)} failed")
                    break       # given back undeliverable: next try
                if not mad[3] & 0x80:
                    self.unmatched += 1
                    continue
                if self.rmpp_in_user and len(mad) > 26 and mad[26] & 1 \
                        and mad[1] == _IBA.MAD_SUBNET_ADMIN:
                    whole = self._rmpp_rest(mad, agent, addr, ms)
                    if whole is None:
                        break           # a segment did not come: retry
                    mad = whole
                return (bytearray(mad),
                        UMADReplyPath(self.end_port, agent, addr,
                                      self._agent_dqpn.get(agent, 1)))
        return None

    def _rmpp_rest(self, first: bytes, agent: int, addr: Tuple[Any, ...],
                   ms: int) -> Optional[bytes]:
        """Receive and acknowledge the rest of an RMPP answer whose first
        segment is ``first``; the joined message, or None when a segment
        does not come within ``ms`` of the one before.  The whole answer
        must come within :attr:`rmpp_deadline` and hold at most
        :attr:`rmpp_max_bytes`."""
        from rdma._rmpp import RMPPReassembler
        back = UMADReplyPath(self.end_port, agent, addr,
                             self._agent_dqpn.get(agent, 1)).reverse()
        r = RMPPReassembler(_IBA.SAHeader.MAD_LENGTH,
                            max_bytes=self.rmpp_max_bytes)
        match = _key(first)
        mad = first
        end = time.monotonic() + self.rmpp_deadline
        while True:
            ack, msg = r.add(mad)
            if ack is not None:
                self.sendto(ack, back, agent_id=agent)
            if msg is not None:
                return msg
            deadline = time.monotonic() + ms * 1.25 / 1000
            while True:
                got = self._recv(min(deadline, end))
                if got is None:
                    if deadline < end:
                        return None
                    raise _IBA.MADTimeoutError(
                        msg=f"the RMPP answer to {_describe_raw(first)} "
                            f"did not end within {self.rmpp_deadline:g} s "
                            f"({r.segments} segments received, none "
                            f"flagged Last)")
                mad, status, _addr, _agent = got
                if status == 0 and len(mad) >= 24 and _key(mad) == match:
                    break
                self.unmatched += 1

    # -- the SA

    @property
    def sa_path(self) -> Any:
        """The path to the SA of this port (read when first needed)."""
        if self._sa_path is None:
            ep = self.end_port
            if isinstance(ep, UMADEndPort):
                # Read the port again: the SM may have come up since.
                ep = get_end_port(str(ep))
                self.end_port = ep
            sp = getattr(ep, "sa_path", None)
            if sp is None or callable(sp):
                sp = sa_path(ep)
            if not sp.DLID:
                raise _no_sm(ep)        # not kept: an SM may come up
            self._sa_path = sp
        return self._sa_path

    def sa_rpc(self, method: int, payload: Union[BinStruct, Type[BinStruct]],
               path: Any = None, attributeModifier: int = 0,
               comp_mask: Optional[int] = None) -> SAReply:
        """Run one SA RPC and return the whole decoded :class:`SAReply`
        (header, records, data).  Errors as for the RPC methods."""
        if isinstance(payload, type):
            payload = payload()
        path = self.sa_path if path is None else path
        mad = bytearray(encode_sa_request(method, payload,
                                          self._get_new_TID(), comp_mask,
                                          attribute_modifier=
                                          attributeModifier))
        fmt = _IBA.SAFormat(mad)
        ret = self._execute(mad, path)
        self._completeMAD(ret, fmt, path, type(payload), None)
        assert ret is not None      # (_completeMAD raised on a timeout)
        return decode_sa_reply(ret[0], type(payload))


def _where(path: Any) -> str:
    return str(path) if path is not None else "?"


def _describe_raw(buf: Any) -> str:
    try:
        return describe(MADHeader(bytes(buf[:24])))
    except MADError:
        return f"{len(buf)}-byte MAD"


def get_umad(end_port: Any = None, path: Any = None, **kw: Any) -> UMAD:
    """Open a :class:`UMAD` on an end port (a :class:`UMADEndPort`, a verbs
    :class:`rdma.EndPort`, a name for :func:`get_end_port`, or None for the
    first ACTIVE umad port); ``path`` is the SA path to use.

    Raises :class:`rdma.SysError` if libibumad is missing or the port
    cannot be opened, :class:`rdma.RDMAError` if there is no such port.
    """
    return UMAD(end_port, path, **kw)
