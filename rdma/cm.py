"""The RDMA connection manager: connect QPs by IP address and port.

The model is librdmacm's (``rdma_cm``): an :class:`EventChannel` reports
the events of its :class:`CMID` objects; an active side resolves an address
and a route, then connects; a passive side binds, listens and accepts the
new ID of each ``CONNECT_REQUEST``.  The QP of an ID is an ordinary QP of
this package, on a :class:`rdma.ibverbs.Context` of the device the CM
resolved (:attr:`CMID.context`): our PD, CQs, MRs, ``SendBatch`` and
``poll_into`` all work on it.  :meth:`CMID.modify_qp` moves it with the
attributes the CM gives (``rdma_init_qp_attr``).

For scripts and notebooks::

    with rdma.cm.listen(7471) as server:          # one side
        with server.accept() as conn:
            ...conn.qp, conn.pd, conn.cq...

    with rdma.cm.connect("192.0.2.1", 7471) as conn:   # the other
        ...

Providers: ``verbs`` (rdma-core, through librdmacm loaded with dlopen) and
``ucx`` (the software fabric's CM); ``provider=None`` takes
``$RDMA_PROVIDER``, else (or with ``auto``) ``verbs`` where the kernel has
the RDMA CM and ``ucx`` elsewhere.  See docs/cm.rst.
"""
from __future__ import annotations

import dataclasses
import enum
import os
import socket
from collections import deque
from typing import (Any, Deque, Dict, Iterable, List, Optional, Tuple,
                    Union)

import rdma
import rdma.ibverbs as ibv
from rdma import _ibverbs
from rdma.IBA import GID

__all__ = ["RDMA_PS_TCP", "RDMA_PS_UDP", "RDMA_PS_IB", "RDMA_PS_IPOIB",
           "CMEventType", "ConnParam", "CMEvent", "CMEventError", "AddrInfo",
           "EventChannel", "CMEventChannel", "CMID", "Connection",
           "Listener", "getaddrinfo", "connect", "listen"]

#: Port spaces (enum rdma_port_space).
RDMA_PS_IPOIB = 0x0002
RDMA_PS_IB = 0x013F
RDMA_PS_TCP = 0x0106
RDMA_PS_UDP = 0x0111

#: The Q_Key librdmacm gives UD QPs of RDMA_PS_UDP.
RDMA_UDP_QKEY = 0x01234567

Address = Tuple[str, int]


class CMEventType(enum.IntEnum):
    """The events of enum rdma_cm_event_type."""
    ADDR_RESOLVED = 0
    ADDR_ERROR = 1
    ROUTE_RESOLVED = 2
    ROUTE_ERROR = 3
    CONNECT_REQUEST = 4
    CONNECT_RESPONSE = 5
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    DEVICE_REMOVAL = 11
    MULTICAST_JOIN = 12
    MULTICAST_ERROR = 13
    ADDR_CHANGE = 14
    TIMEWAIT_EXIT = 15


def _event_type(v: int) -> Union[CMEventType, int]:
    try:
        return CMEventType(v)
    except ValueError:
        return v


@dataclasses.dataclass
class ConnParam:
    """Connection parameters (struct rdma_conn_param, pyverbs' ConnParam)."""
    private_data: bytes = b""
    responder_resources: int = 1
    initiator_depth: int = 1
    flow_control: int = 1
    retry_count: int = 7
    rnr_retry_count: int = 7
    srq: int = 0
    qp_num: int = 0
    qkey: int = 0

    def _kwargs(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class CMEvent:
    """One CM event with its data (acknowledged already).

    ``param`` holds what the event carries: for RC the peer's connection
    parameters (``CONNECT_REQUEST``: its QP number, depths, private data);
    for UD ``ESTABLISHED`` and ``MULTICAST_JOIN`` also ``qp_num``, ``qkey``
    and :attr:`ah_attr` (how to reach the peer or the group)."""
    event: Union[CMEventType, int]
    status: int
    id: Optional["CMID"]
    listen_id: Optional["CMID"]
    param: ConnParam
    ah_attr: Optional[ibv.ah_attr] = None

    @property
    def private_data(self) -> bytes:
        return self.param.private_data

    @property
    def qp_num(self) -> int:
        return self.param.qp_num

    @property
    def qkey(self) -> int:
        return self.param.qkey

    def __str__(self) -> str:
        name = getattr(self.event, "name", str(self.event))
        return f"{name} (status {self.status})"


class CMEventError(rdma.RDMAError):
    """An ID got an event other than the one awaited (``REJECTED``,
    ``ADDR_ERROR``, ``UNREACHABLE``...); :attr:`event` has its data."""

    def __init__(self, func: str, event: CMEvent,
                 expected: Iterable[CMEventType]):
        self.func = func
        self.event = event
        self.expected = tuple(expected)
        want = "/".join(e.name for e in self.expected)
        detail = ""
        if event.status:
            detail = f", status {event.status}"
            if event.status < 0:
                detail += f" ({os.strerror(-event.status)})"
        if event.private_data.strip(b"\0"):
            detail += f", private data {event.private_data[:16]!r}"
        got = getattr(event.event, "name", event.event)
        super().__init__(f"{func}: got {got} instead of {want}{detail}")


def _default_provider(provider: Optional[str]) -> str:
    """provider, else $RDMA_PROVIDER; "auto" (or neither): ``verbs``
    where the kernel has the RDMA CM (/dev/infiniband/rdma_cm), else the
    software fabric ``ucx``."""
    p = provider or os.environ.get("RDMA_PROVIDER") or "auto"
    if p == "auto":
        return "verbs" if os.path.exists("/dev/infiniband/rdma_cm") else "ucx"
    return p


class EventChannel:
    """A CM event channel (``rdma_create_event_channel``).

    A context manager: :meth:`close` destroys its IDs, then the contexts it
    opened for their QPs (and so their PDs, CQs and QPs).  :meth:`fileno`
    works with ``select`` and asyncio (``rdma.aio.AsyncEventChannel``)."""

    def __init__(self, provider: Optional[str] = None):
        self.provider = _default_provider(provider)
        self._raw = _ibverbs.CMEventChannel(provider=self.provider)
        self._ids: Dict[Any, CMID] = {}
        self._contexts: Dict[str, ibv.Context] = {}
        self._pending: Deque[CMEvent] = deque()

    def __enter__(self) -> "EventChannel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"fd {self._raw.fileno()}"
        return f"<rdma.cm.EventChannel {self.provider} {state}>"

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    def fileno(self) -> int:
        return int(self._raw.fileno())

    def close(self) -> None:
        """Destroy every ID, then close the contexts opened for them."""
        for cid in list(self._ids.values()):
            cid._close_resources()
        self._raw.close()
        self._ids.clear()
        self._pending.clear()
        for ctx in self._contexts.values():
            ctx.close()
        self._contexts.clear()

    def create_id(self, ps: int = RDMA_PS_TCP) -> "CMID":
        """A new ID (``rdma_create_id``) in port space ``ps``."""
        return self._wrap(self._raw.create_id(ps))

    def context(self, device: str) -> ibv.Context:
        """Our Context for ``device`` (opened once per channel)."""
        ctx = self._contexts.get(device)
        if ctx is None or ctx.closed:
            ctx = ibv.Context(device, provider=self.provider)
            self._contexts[device] = ctx
        return ctx

    def _wrap(self, raw: Any) -> "CMID":
        cid = self._ids.get(raw)
        if cid is None:
            cid = CMID(self, raw)
            self._ids[raw] = cid
        return cid

    def _event(self, t: Tuple[Any, ...]) -> CMEvent:
        (ev, status, raw, lraw, data, rr, idep, fc, retry, rnr, srq,
         qpn, qkey, ah) = t
        e = self._make_event(ev, status, raw, lraw, data, rr, idep, fc,
                             retry, rnr, srq, qpn, qkey, ah)
        if e.id is not None and e.event in (CMEventType.MULTICAST_JOIN,
                                            CMEventType.MULTICAST_ERROR):
            e.id._joined(e)
        return e

    def _make_event(self, ev: int, status: int, raw: Any, lraw: Any,
                    data: bytes, rr: int, idep: int, fc: int, retry: int,
                    rnr: int, srq: int, qpn: int, qkey: int,
                    ah: Optional[ibv.ah_attr]) -> CMEvent:
        return CMEvent(
            event=_event_type(ev), status=status,
            id=self._wrap(raw) if raw is not None else None,
            listen_id=self._wrap(lraw) if lraw is not None else None,
            param=ConnParam(private_data=data, responder_resources=rr,
                            initiator_depth=idep, flow_control=fc,
                            retry_count=retry, rnr_retry_count=rnr, srq=srq,
                            qp_num=qpn, qkey=qkey),
            ah_attr=ah)

    def read_event(self, timeout: Optional[float] = 0) -> Optional[CMEvent]:
        """One event from the channel itself (not the queue of events
        set aside by :meth:`wait_event`), or None after ``timeout``."""
        t = self._raw.get_event(timeout=timeout)
        return None if t is None else self._event(t)

    def get_event(self, timeout: Optional[float] = None) -> Optional[CMEvent]:
        """The next event (``rdma_get_cm_event``, acknowledged at once), or
        None after ``timeout`` seconds (None: wait for ever).  Ctrl-C
        interrupts the wait with KeyboardInterrupt."""
        if self._pending:
            return self._pending.popleft()
        return self.read_event(timeout)

    def wait_event(self, cid: Optional["CMID"],
                   expected: Union[CMEventType, Iterable[CMEventType]],
                   func: str = "wait_event",
                   timeout: Optional[float] = 10.0) -> CMEvent:
        """The next event of ``cid`` (any ID if None; a listening ID's
        include the CONNECT_REQUESTs it gets), checked to be one of
        ``expected``: raise :class:`CMEventError` for another event of
        that ID, TimeoutError after ``timeout`` seconds.  Events of other
        IDs wait in a queue for later :meth:`get_event` calls."""
        want = ((expected,) if isinstance(expected, CMEventType)
                else tuple(expected))
        for i, ev in enumerate(self._pending):
            if _is_for(ev, cid):
                del self._pending[i]
                return _check(func, ev, want)
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = (None if deadline is None
                    else max(0.0, deadline - time.monotonic()))
            ev2 = self.read_event(left)
            if ev2 is None:
                names = "/".join(e.name for e in want)
                raise TimeoutError(f"{func}: no {names} event within "
                                   f"{timeout} s")
            if _is_for(ev2, cid):
                return _check(func, ev2, want)
            self._pending.append(ev2)


#: pyverbs' name.
CMEventChannel = EventChannel


def _is_for(ev: CMEvent, cid: Optional["CMID"]) -> bool:
    """Is ev an event of cid (its own, or a request to it listening)?"""
    return cid is None or ev.id is cid or ev.listen_id is cid


def _check(func: str, ev: CMEvent,
           want: Tuple[CMEventType, ...]) -> CMEvent:
    if ev.event not in want:
        raise CMEventError(func, ev, want)
    return ev


class CMID:
    """A CM ID (``rdma_cm_id``): :meth:`EventChannel.create_id`, or the
    ``id`` of a ``CONNECT_REQUEST`` event.

    :meth:`create_qp` makes its QP on our object model (a PD and a CQ made
    for it unless given); :meth:`modify_qp` moves any QP of ours with the
    attributes the CM gives.  Closing the ID closes what create_qp made."""

    def __init__(self, channel: EventChannel, raw: Any):
        self.channel = channel
        self._raw = raw
        self.qp: Optional[ibv.QP] = None
        self.pd: Optional[ibv.PD] = None
        self.cq: Optional[ibv.CQ] = None
        self._owned: List[Any] = []
        # multicast: the groups asked for (join order), and those joined
        # with the QP attached to them (address -> (MGID, MLID))
        self._joining: Deque[Optional[str]] = deque()
        self._attached: Dict[Optional[str], Tuple[GID, int]] = {}

    def __enter__(self) -> "CMID":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<rdma.cm.CMID closed>"
        return f"<rdma.cm.CMID ps 0x{self.ps:x} {self.device_name or '-'}>"

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    @property
    def ps(self) -> int:
        return int(self._raw.ps)

    def _close_resources(self) -> None:
        for key in list(self._attached):
            self._detach(key)   # an attached QP cannot be destroyed
        for o in reversed(self._owned):
            o.close()
        self._owned.clear()

    def close(self) -> None:
        """Destroy the ID (``rdma_destroy_id``) and what create_qp made;
        the ID's QP leaves its multicast groups first."""
        self._close_resources()
        self._raw.close()
        self.channel._ids.pop(self._raw, None)

    # -- addresses and routes
    def bind_addr(self, addr: Address) -> None:
        self._raw.bind_addr(_numeric(addr))

    def resolve_addr(self, dst: Address, src: Optional[Address] = None,
                     timeout_ms: int = 2000) -> None:
        self._raw.resolve_addr(_numeric(dst),
                               None if src is None else _numeric(src),
                               timeout_ms)

    def resolve_route(self, timeout_ms: int = 2000) -> None:
        self._raw.resolve_route(timeout_ms)

    def query(self) -> Tuple[Any, ...]:
        """The raw (device, port_num, ps, src, dst, sgid, dgid, pkey, path)
        of ``CMID.query`` in rdma.ibverbs."""
        return tuple(self._raw.query())

    @property
    def device_name(self) -> str:
        """The device the ID is bound to ("" before resolve_addr/bind)."""
        return str(self._raw.query()[0])

    @property
    def port_num(self) -> int:
        return int(self._raw.query()[1])

    @property
    def src_addr(self) -> Optional[Address]:
        return self._raw.query()[3]  # type: ignore[no-any-return]

    @property
    def dst_addr(self) -> Optional[Address]:
        return self._raw.query()[4]  # type: ignore[no-any-return]

    @property
    def context(self) -> ibv.Context:
        """Our Context for the device the ID is bound to."""
        dev = self.device_name
        if not dev:
            raise rdma.SysError(19, "rdma_cm_id.verbs",
                                "the ID is not bound to a device yet "
                                "(resolve_addr or a connection request "
                                "first)")
        return self.channel.context(dev)

    def path(self) -> "rdma.path.IBPath":
        """An :class:`rdma.path.IBPath` from the resolved route (the CM's
        path record: GIDs, LIDs, P_Key, MTU, SL, rate, traffic class...)."""
        from rdma.path import IBPath
        dev, port, _ps, _src, _dst, sgid, dgid, pkey, rec = self.query()
        end_port = _end_port(self.channel.provider, dev, port)
        p = IBPath(end_port, SGID=GID(sgid), DGID=GID(dgid), pkey=pkey,
                   has_grh=True)
        if rec is not None:
            (rdgid, rsgid, dlid, slid, rpkey, flow, hop, tclass, sl, mtu,
             rate, plt) = rec
            if self._ethernet(port):
                dlid = slid = 0          # RoCE: the CM's LIDs mean nothing
            p = IBPath(end_port, SGID=GID(rsgid), DGID=GID(rdgid),
                       DLID=dlid, SLID=slid, pkey=rpkey, flow_label=flow,
                       hop_limit=hop, traffic_class=tclass, SL=sl, MTU=mtu,
                       rate=rate, has_grh=hop > 1 or dlid == 0)
            p.packet_life_time = plt
        return p

    def _ethernet(self, port: int) -> bool:
        """Is the ID's port RoCE (link layer Ethernet)?"""
        try:
            attr = self.context.query_port(port)
        except rdma.RDMAError:
            return False
        return bool(attr.link_layer == ibv.IBV_LINK_LAYER_ETHERNET)

    # -- the QP
    def create_qp(self, qp_type: int = ibv.IBV_QPT_RC, *,
                  pd: Optional[ibv.PD] = None,
                  send_cq: Optional[ibv.CQ] = None,
                  recv_cq: Optional[ibv.CQ] = None,
                  max_send_wr: int = 64, max_recv_wr: int = 64,
                  max_send_sge: int = 1, max_recv_sge: int = 1,
                  max_inline_data: int = 0, sq_sig_all: int = 1,
                  cq_size: int = 256) -> ibv.QP:
        """Create the ID's QP on our object model and move it to INIT
        (after ROUTE_RESOLVED, or on a CONNECT_REQUEST's new ID)."""
        if pd is None:
            pd = self.context.pd()
            self._owned.append(pd)
        if send_cq is None or recv_cq is None:
            cq = pd.cq(cq_size)
            self._owned.append(cq)
            send_cq = send_cq or cq
            recv_cq = recv_cq or cq
        qp = pd.qp(qp_type, max_send_wr=max_send_wr, send_cq=send_cq,
                   max_recv_wr=max_recv_wr, recv_cq=recv_cq,
                   sq_sig_all=sq_sig_all, max_send_sge=max_send_sge,
                   max_recv_sge=max_recv_sge,
                   max_inline_data=max_inline_data)
        self._owned.append(qp)
        self.qp, self.pd, self.cq = qp, pd, recv_cq
        if qp_type == ibv.IBV_QPT_UD:
            self.modify_qp(qp, ibv.IBV_QPS_INIT)
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR),
                      ibv.IBV_QP_STATE)
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS, sq_psn=0),
                      ibv.IBV_QP_STATE | ibv.IBV_QP_SQ_PSN)
        else:
            self.modify_qp(qp, ibv.IBV_QPS_INIT)
        return qp

    def init_qp_attr(self, qp_state: int) -> Tuple[ibv.qp_attr, int]:
        """(attr, mask) moving this ID's QP to ``qp_state``."""
        attr, mask = self._raw.init_qp_attr(qp_state)
        return attr, int(mask)

    def modify_qp(self, qp: Union[ibv.QP, None], qp_state: int) -> None:
        """Move ``qp`` (default: the ID's) to ``qp_state`` with the CM's
        attributes (``rdma_init_qp_attr`` + ``ibv_modify_qp``)."""
        qp = qp or self.qp
        if qp is None:
            raise ValueError("modify_qp(): the ID has no QP")
        if qp_state == ibv.IBV_QPS_ERR:
            qp.modify(ibv.qp_attr(qp_state=qp_state), ibv.IBV_QP_STATE)
            return
        if qp_state == ibv.IBV_QPS_RTR and qp.qp_type != ibv.IBV_QPT_UD:
            # INIT -> INIT first, as librdmacm does: the access flags the
            # CM gives depend on the negotiated responder resources,
            # unknown when the QP went to INIT before the request.
            attr, mask = self.init_qp_attr(ibv.IBV_QPS_INIT)
            qp.modify(attr, mask)
        attr, mask = self.init_qp_attr(qp_state)
        qp.modify(attr, mask)

    # -- connections
    def _param(self, param: Optional[ConnParam],
               kw: Dict[str, Any]) -> Dict[str, Any]:
        d = (param or ConnParam())._kwargs()
        d.update(kw)
        if not d.get("qp_num") and self.qp is not None:
            d["qp_num"] = self.qp.qp_num
        return d

    def listen(self, backlog: int = 0) -> None:
        self._raw.listen(backlog)

    def connect(self, param: Optional[ConnParam] = None,
                **kw: Any) -> None:
        """Send the connection request (``rdma_connect``); the ID's QP
        number unless ``qp_num`` is given."""
        self._raw.connect(**self._param(param, kw))

    def accept(self, param: Optional[ConnParam] = None,
               **kw: Any) -> None:
        """Accept a connection request (``rdma_accept``).  An RC QP must
        be in RTR already (:meth:`accept_qp` does the whole step)."""
        self._raw.accept(**self._param(param, kw))

    def reject(self, private_data: bytes = b"") -> None:
        self._raw.reject(private_data)

    def establish(self) -> None:
        """After CONNECT_RESPONSE with the QP in RTS (``rdma_establish``)."""
        self._raw.establish()

    def disconnect(self) -> None:
        self._raw.disconnect()

    def join_multicast(self, addr: Address) -> None:
        """Join the multicast group of IP address ``addr`` (a UD ID,
        bound or resolved; ``rdma_join_multicast``).  When its
        ``MULTICAST_JOIN`` event is read, the ID's QP (:meth:`create_qp`)
        is attached to the group the event names (``ah_attr``), as
        librdmacm attaches the QP it made; :meth:`leave_multicast` and
        :meth:`close` detach it."""
        a = _numeric(addr)
        self._raw.join_multicast(a)
        self._joining.append(a[0])

    def leave_multicast(self, addr: Address) -> None:
        """Leave the group (``rdma_leave_multicast``), detaching the
        ID's QP first."""
        a = _numeric(addr)
        self._detach(a[0])
        self._raw.leave_multicast(a)

    def _joined(self, ev: CMEvent) -> None:
        """A join's event was read: attach the QP (MULTICAST_JOIN)."""
        if not self._joining:
            return
        key = self._joining.popleft()
        if (ev.event != CMEventType.MULTICAST_JOIN or ev.ah_attr is None
                or self.qp is None or self.qp.closed
                or self.qp.qp_type != ibv.IBV_QPT_UD):
            return
        gid, lid = ev.ah_attr.grh.dgid, ev.ah_attr.dlid
        self.qp.attach_mcast(gid, lid)
        self._attached[key] = (gid, lid)

    def _detach(self, key: Optional[str]) -> None:
        g = self._attached.pop(key, None)
        if g is not None and self.qp is not None and not self.qp.closed:
            self.qp.detach_mcast(*g)

    # -- the usual sequences, synchronous
    def resolve(self, dst: Address, src: Optional[Address] = None,
                timeout: float = 5.0) -> None:
        """resolve_addr, then resolve_route, waiting for each event."""
        ms = int(timeout * 1000)
        self.resolve_addr(dst, src, ms)
        self.channel.wait_event(self, CMEventType.ADDR_RESOLVED,
                                "rdma_resolve_addr", timeout + 5)
        self.resolve_route(ms)
        self.channel.wait_event(self, CMEventType.ROUTE_RESOLVED,
                                "rdma_resolve_route", timeout + 5)

    def connect_qp(self, param: Optional[ConnParam] = None,
                   timeout: float = 10.0, **kw: Any) -> CMEvent:
        """Active side, the QP in INIT: connect and wait.  RC: on
        CONNECT_RESPONSE move the QP to RTR and RTS and establish; UD:
        ESTABLISHED (its ``qp_num``, ``qkey`` and ``ah_attr`` are the
        peer's).  Return the event; raise CMEventError on REJECTED,
        UNREACHABLE, CONNECT_ERROR..."""
        self.connect(param, **kw)
        if self.ps == RDMA_PS_UDP or self.ps == RDMA_PS_IPOIB:
            return self.channel.wait_event(self, CMEventType.ESTABLISHED,
                                           "rdma_connect", timeout)
        ev = self.channel.wait_event(self, CMEventType.CONNECT_RESPONSE,
                                     "rdma_connect", timeout)
        self.modify_qp(None, ibv.IBV_QPS_RTR)
        self.modify_qp(None, ibv.IBV_QPS_RTS)
        self.establish()
        return ev

    def accept_qp(self, param: Optional[ConnParam] = None,
                  timeout: Optional[float] = 10.0, **kw: Any) -> None:
        """Passive side, the QP in INIT: RC moves it to RTR and RTS,
        accepts and waits for ESTABLISHED; UD accepts (SIDR has no
        ESTABLISHED on the passive side)."""
        ud = self.ps == RDMA_PS_UDP or self.ps == RDMA_PS_IPOIB
        if not ud:
            self.modify_qp(None, ibv.IBV_QPS_RTR)
            self.modify_qp(None, ibv.IBV_QPS_RTS)
        if ud and self.qp is not None and "qkey" not in kw:
            kw["qkey"] = self.qp.query(ibv.IBV_QP_QKEY).qkey
        self.accept(param, **kw)
        if not ud and timeout != 0:
            self.channel.wait_event(self, CMEventType.ESTABLISHED,
                                    "rdma_accept", timeout)


def _end_port(provider: str, dev: str, port: int) -> Any:
    try:
        return rdma.get_end_port(f"{dev}/{port}")
    except Exception:
        return None


def _numeric(addr: Address) -> Tuple[Optional[str], int]:
    """(host, port) with the host made numeric (getaddrinfo)."""
    if not isinstance(addr, tuple) or len(addr) != 2:
        raise TypeError(f"an address is a (host, port) tuple, not {addr!r}")
    host, port = addr
    if not host:
        return ("", port)
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET,
                         host.split("%")[0])
        return (host, port)
    except (OSError, ValueError):
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise rdma.SysError(22, "getaddrinfo", f"{host}: {e.strerror}") from e
    return (str(infos[0][4][0]), port)


@dataclasses.dataclass
class AddrInfo:
    """One result of :func:`getaddrinfo` (struct rdma_addrinfo's
    address fields)."""
    family: int
    port_space: int
    src_addr: Optional[Address]
    dst_addr: Optional[Address]
    src_canonname: Optional[str] = None
    dst_canonname: Optional[str] = None


def getaddrinfo(node: Optional[str] = None,
                service: Union[str, int, None] = None, *,
                passive: bool = False,
                port_space: int = RDMA_PS_TCP) -> List[AddrInfo]:
    """Resolve ``node`` and ``service`` to CM addresses (``rdma_getaddrinfo``
    for IP addresses: the system resolver's answers, passive ones as the
    source address).  Raises SysError(EINVAL, "getaddrinfo") when the name
    does not resolve."""
    flags = socket.AI_PASSIVE if passive else 0
    if node:
        flags |= socket.AI_CANONNAME
    try:
        infos = socket.getaddrinfo(node, service, type=socket.SOCK_STREAM,
                                   flags=flags)
    except socket.gaierror as e:
        raise rdma.SysError(22, "getaddrinfo",
                            f"{node}:{service}: {e.strerror}") from e
    out = []
    for fam, _t, _p, canon, sa in infos:
        a = (str(sa[0]), int(sa[1]))
        out.append(AddrInfo(int(fam), port_space,
                            a if passive else None,
                            None if passive else a,
                            canon or None if passive else None,
                            None if passive else canon or None))
    return out


class Connection:
    """A connected RC QP with its PD and CQ (one CQ for sends and
    receives), from :func:`connect` or :meth:`Listener.accept`.

    ``private_data`` is what the peer sent with its request or reply.
    A context manager: :meth:`close` disconnects (``DISCONNECTED`` on both
    sides), then destroys the ID, the QP, the CQ and the PD."""

    def __init__(self, cid: CMID, private_data: bytes,
                 own_channel: bool):
        self.id = cid
        self.private_data = private_data
        self._own_channel = own_channel
        assert cid.qp is not None and cid.pd is not None
        self.qp: ibv.QP = cid.qp
        self.pd: ibv.PD = cid.pd
        assert cid.cq is not None
        self.cq: ibv.CQ = cid.cq
        self.ctx: ibv.Context = self.pd.ctx

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<rdma.cm.Connection qp 0x{self.qp.qp_num:x} "
                f"{self.id.src_addr} -> {self.id.dst_addr}>"
                if not self.id.closed else "<rdma.cm.Connection closed>")

    @property
    def closed(self) -> bool:
        return self.id.closed

    def path(self) -> "rdma.path.IBPath":
        """The route of the connection as an IBPath (``dqpn`` set)."""
        p = self.id.path()
        p.dqpn = self.qp.query(ibv.IBV_QP_DEST_QPN).dest_qp_num
        p.sqpn = self.qp.qp_num
        return p

    def close(self, timeout: float = 2.0) -> None:
        """Disconnect, wait for DISCONNECTED (up to ``timeout`` s), close."""
        if self.id.closed:
            return
        ch = self.id.channel
        try:
            self.id.disconnect()
            ch.wait_event(self.id, CMEventType.DISCONNECTED,
                          "rdma_disconnect", timeout)
        except (rdma.SysError, CMEventError, TimeoutError):
            pass     # the peer went first, or is gone: nothing to wait for
        finally:
            self.id.close()
            if self._own_channel:
                ch.close()


def connect(host: str, port: int, *, private_data: bytes = b"",
            provider: Optional[str] = None, timeout: float = 10.0,
            src: Optional[Address] = None, max_send_wr: int = 64,
            max_recv_wr: int = 64, max_inline_data: int = 0,
            cq_size: int = 256, responder_resources: int = 1,
            initiator_depth: int = 1) -> Connection:
    """Connect an RC QP to ``host``:``port`` (a :func:`listen`, ``rping
    -s``...): resolve, create the QP, connect, establish.  Raise
    :class:`CMEventError` on REJECTED (the peer's private data in
    ``.event.private_data``), ADDR_ERROR, UNREACHABLE..."""
    ch = EventChannel(provider)
    try:
        cid = ch.create_id(RDMA_PS_TCP)
        cid.resolve((host, port), src, min(timeout, 5.0))
        cid.create_qp(ibv.IBV_QPT_RC, max_send_wr=max_send_wr,
                      max_recv_wr=max_recv_wr, cq_size=cq_size,
                      max_inline_data=max_inline_data)
        ev = cid.connect_qp(private_data=private_data, timeout=timeout,
                            responder_resources=responder_resources,
                            initiator_depth=initiator_depth)
        return Connection(cid, ev.private_data, own_channel=True)
    except BaseException:
        ch.close()
        raise


class Listener:
    """A listening ID (from :func:`listen`); :meth:`accept` gives a
    :class:`Connection` per request.  A context manager; closing it closes
    its channel and every connection accepted on it."""

    def __init__(self, port: int, host: str = "", *, backlog: int = 16,
                 provider: Optional[str] = None, ps: int = RDMA_PS_TCP):
        self.channel = EventChannel(provider)
        try:
            self.id = self.channel.create_id(ps)
            self.id.bind_addr((host, port))
            self.id.listen(backlog)
        except BaseException:
            self.channel.close()
            raise

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        a = self.id.src_addr
        return a[1] if a else 0

    def close(self) -> None:
        self.channel.close()

    def get_request(self, timeout: Optional[float] = None) -> CMEvent:
        """Wait for the next CONNECT_REQUEST (its ``id`` is the new ID)."""
        return self.channel.wait_event(None, CMEventType.CONNECT_REQUEST,
                                       "rdma_listen", timeout)

    def accept(self, *, private_data: bytes = b"",
               timeout: Optional[float] = None, max_send_wr: int = 64,
               max_recv_wr: int = 64, max_inline_data: int = 0,
               cq_size: int = 256) -> Connection:
        """Wait for a request, give it an RC QP and accept it.  Post
        receives on ``conn.qp`` soon: the peer's sends wait for them
        (RNR retries) meanwhile."""
        req = self.get_request(timeout)
        cid = req.id
        assert cid is not None
        try:
            cid.create_qp(ibv.IBV_QPT_RC, max_send_wr=max_send_wr,
                          max_recv_wr=max_recv_wr, cq_size=cq_size,
                          max_inline_data=max_inline_data)
            cid.accept_qp(private_data=private_data,
                          responder_resources=min(
                              1, req.param.initiator_depth),
                          initiator_depth=min(
                              1, req.param.responder_resources))
        except BaseException:
            cid.close()
            raise
        return Connection(cid, req.private_data, own_channel=False)


def listen(port: int, host: str = "", *, backlog: int = 16,
           provider: Optional[str] = None) -> Listener:
    """Listen for RC connections on ``host``:``port`` (host "" = every
    address); ``Listener.accept()`` gives each connection."""
    return Listener(port, host, backlog=backlog, provider=provider)
