"""Paths: where a QP or a MAD talks to, and how to bring a QP to RTS.

:class:`IBPath` describes the headers of the packets on the wire (LRH, GRH
and BTH fields).  Our convention, as python-rdma's: a path to send with has
``SGID`` = this end port and ``DGID`` = the peer; a path made from a received
packet has them the other way round until :meth:`IBPath.reverse` is called.
The same class serves InfiniBand (LIDs, the SA), RoCE (GIDs, no SA) and the
software fabric.

The tables of the seed documentation, how a path fills a QP and an AH, live
here and only here: :meth:`IBPath.qp_attr` and :meth:`IBPath.ah_attr`.
``QP.modify_to_init/rtr/rts``, ``QP.establish`` and ``PD.ah(path)`` call
them.
"""
from __future__ import annotations

import os
import re
import struct
from typing import (TYPE_CHECKING, Any, Dict, List, Optional,
                    Tuple, Type, TypeVar)

import rdma
import rdma.ibverbs as ibv
from rdma import IBA
from rdma.IBA import GID, GUID
from rdma._mad import SAPathNotFoundError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from rdma.devices import Device, EndPort

_P = TypeVar("_P", bound="Path")

__all__ = ["SAPathNotFoundError", "Path", "IBPath", "IBDRPath", "fill_path",
           "resolve_path", "from_string", "from_spec_string", "WCPath",
           "get_mad_path", "DRBytes"]


def _end_port_arg(end_port: EndPort | str | None) -> Optional[EndPort]:
    if isinstance(end_port, str):
        return rdma.get_end_port(end_port)
    return end_port


def _copy_path(path: Path, cls: Type[_P], kwargs: Dict[str, Any]) -> _P:
    """A ``cls`` with ``path``'s state and ``kwargs``: the class's own
    attributes go to its constructor, the others are set afterwards."""
    d = path._state()
    d.update(kwargs)
    end_port = d.pop("end_port", path.end_port)
    known = {k: v for k, v in d.items() if hasattr(cls, k)}
    new = cls(end_port, **known)
    for k, v in d.items():
        if k not in known:
            setattr(new, k, v)
    return new


class Path:
    """Base class of paths: an ``end_port`` and attributes.

    ``Path(end_port, **attrs)`` sets the attributes given; the others keep
    their class defaults.  Cached derived data (AH, indexes) lives in
    attributes whose names start with ``_cached`` and is dropped by
    :meth:`drop_cache` (and by :meth:`IBPath.reverse`).
    """

    #: Times a MAD is resent, or the retry_cnt of an RC QP.
    retries = 0
    #: The :class:`rdma.devices.EndPort` this path leaves from.
    end_port: Optional[EndPort] = None

    def __init__(self, end_port: EndPort | str | None = None,
                 **kwargs: Any):
        self.end_port = _end_port_arg(end_port)
        for k, v in kwargs.items():
            if not hasattr(type(self), k):
                raise AttributeError(f"{type(self).__name__} has no "
                                     f"attribute {k!r}")
            setattr(self, k, v)

    def _state(self) -> Dict[str, Any]:
        cls = type(self)
        return {k: v for k, v in self.__dict__.items()
                if not k.startswith("_") and k != "end_port"
                and getattr(cls, k, None) != v}

    def copy(self: _P, **kwargs: Any) -> _P:
        """A copy of the path (without its caches), with *kwargs* applied.

        Attributes a program added to the path (``SMKey``, ``MKey``...)
        are copied too."""
        return _copy_path(self, type(self), kwargs)

    def drop_cache(self) -> None:
        """Forget cached derived data (AH, GID and P_Key indexes)."""
        for k in [k for k in self.__dict__ if k.startswith("_cached")]:
            del self.__dict__[k]

    def __setattr__(self, name: str, value: Any) -> None:
        # Any change of what the path says makes the caches stale.
        if not name.startswith("_"):
            self.drop_cache()
        object.__setattr__(self, name, value)

    def _need_end_port(self) -> EndPort:
        """The end port, for what needs one."""
        if self.end_port is None:
            raise AttributeError(f"the {type(self).__name__} has no "
                                 f"end_port")
        return self.end_port

    def __reduce__(self) -> Tuple[Any, ...]:
        # The end port is local to a machine: it is not pickled (python-rdma
        # semantics; set path.end_port after unpickling).
        return (type(self), (None,), self._state())

    def __setstate__(self, d: Dict[str, Any]) -> None:
        for k, v in d.items():
            setattr(self, k, v)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Path) and type(other) is type(self) and
                other._state() == self._state() and
                other.end_port == self.end_port)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def complete(self) -> bool:
        """True if the path can be used as it is."""
        return self.end_port is not None

    def __repr__(self) -> str:
        cls = type(self)
        keys = ", ".join(
            f"{k}={getattr(cls, '_format_' + k, repr)(v)}"
            for k, v in sorted(self._state().items()))
        ep = None if self.end_port is None else str(self.end_port)
        sep = ", " if keys else ""
        return f"{cls.__name__}(end_port={ep!r}{sep}{keys})"


def _hex(v: Any) -> str:
    return f"0x{v:x}" if isinstance(v, int) else repr(v)


def _gid_fmt(v: Any) -> str:
    return repr(GID(v)) if v is not None else "None"


class IBPath(Path):
    """A path on InfiniBand, RoCE or the software fabric.

    The attributes are the header fields of the packets sent on the path
    (python-rdma's names).  How they fill a QP and an AH:

    ================  ==========================
    Path attribute    Usage
    ================  ==========================
    end_port.port_id  qp_attr.port_num, ah_attr.port_num
    pkey              qp_attr.pkey_index (looked up in the port's table)
    qkey              qp_attr.qkey (UD)
    MTU               qp_attr.path_mtu
    retries           qp_attr.retry_cnt
    min_rnr_timer     qp_attr.min_rnr_timer
    packet_life_time  qp_attr.timeout (with dack_resp_time)
    dack_resp_time    qp_attr.timeout
    dqpn              qp_attr.dest_qp_num
    dqpsn             qp_attr.rq_psn
    sqpsn             qp_attr.sq_psn
    drdatomic         qp_attr.max_dest_rd_atomic
    srdatomic         qp_attr.max_rd_atomic
    has_grh           ah_attr.is_global
    DGID              ah_attr.grh.dgid
    SGID              ah_attr.grh.sgid_index (looked up)
    flow_label        ah_attr.grh.flow_label
    hop_limit         ah_attr.grh.hop_limit
    traffic_class     ah_attr.grh.traffic_class
    DLID              ah_attr.dlid
    SLID              ah_attr.src_path_bits (SLID_bits)
    SL                ah_attr.sl
    rate              ah_attr.static_rate
    ================  ==========================
    """

    #: Destination LID (LRH.DLID).
    DLID = 0
    #: Source LID (LRH.SLID).
    SLID = 0
    #: Service level (LRH.SL).
    SL = 0
    #: Partition key (BTH.P_Key).
    pkey = IBA.PKEY_DEFAULT
    #: True if a GRH is present (always on RoCE).
    has_grh = False
    #: Destination QP number (BTH.DestQP).
    dqpn: Optional[int] = None
    #: Source QP number (DETH.SrcQP).
    sqpn: Optional[int] = None
    #: Q_Key (DETH.Q_Key) for UD.
    qkey: Optional[int] = None
    #: Largest MTU to use on the path (``rdma.IBA.MTU_*``).
    MTU = IBA.MTU_256
    #: Injection rate (``rdma.IBA.PR_RATE_*``; the IBV_RATE_* values).
    rate = IBA.PR_RATE_2Gb5
    #: Source GID (GRH.SGID).
    SGID: Optional[GID] = None
    #: Destination GID (GRH.DGID).
    DGID: Optional[GID] = None
    #: GRH hop limit.
    hop_limit = 0
    #: GRH traffic class.
    traffic_class = 0
    #: GRH flow label.
    flow_label = 0
    #: Override of the UMAD agent id for MADs sent on the path.
    umad_agent_id: Optional[int] = None
    #: Response time encoding used for :attr:`mad_timeout`.
    resp_time = 20
    #: Minimum RNR NAK timer encoding (qp_attr.min_rnr_timer).
    min_rnr_timer = 0
    #: Destination ack response time (encoding), for :attr:`qp_timeout`.
    dack_resp_time = 20
    #: Source ack response time (encoding), from the device's ack delay.
    sack_resp_time = 20
    #: Initial PSN of the remote send queue (our rq_psn).
    dqpsn = 0
    #: Initial PSN of our send queue.
    sqpsn = 0
    #: RDMA read/atomic responder resources of the destination.
    drdatomic = 255
    #: RDMA read/atomic operations we may have outstanding.
    srdatomic = 255

    #: The forward direction's own path, when it differs (python-rdma's
    #: non-reversible paths); None: this path.  See :attr:`forward_path`.
    _forward_path: Optional[IBPath] = None
    #: The return direction's own path, when it differs.
    _return_path: Optional[IBPath] = None

    _format_pkey = staticmethod(_hex)
    _format_qkey = staticmethod(_hex)
    _format_SGID = staticmethod(_gid_fmt)
    _format_DGID = staticmethod(_gid_fmt)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("SGID", "DGID") and value is not None and \
                not isinstance(value, GID):
            value = GID(value)
        Path.__setattr__(self, name, value)

    # -- derived values --------------------------------------------------

    @property
    def dpqn(self) -> Optional[int]:
        """:attr:`dqpn` as the seed documentation's UD example spells it
        (``IBPath(end_port, dpqn=1, ...)``)."""
        return self.dqpn

    @dpqn.setter
    def dpqn(self, value: Optional[int]) -> None:
        self.dqpn = value

    @property
    def forward_path(self) -> "IBPath":
        """The path for packets in the forward direction (python-rdma): this
        path, or its own forward path when one was set (non-reversible
        routes), with this path's end port and QP parameters.  Assigning
        sets that path (None: this path)."""
        p = self._forward_path
        if p is None:
            return self
        p.end_port = self.end_port
        p.copy_qp_params(self)
        return p

    @forward_path.setter
    def forward_path(self, value: Optional["IBPath"]) -> None:
        self._forward_path = self._direction(value)

    @property
    def return_path(self) -> "IBPath":
        """The path for packets in the return direction (python-rdma): this
        path, or its own return path when one was set, with this path's
        end port and QP parameters.  Assigning sets that path."""
        p = self._return_path
        if p is None:
            return self
        p.end_port = self.end_port
        p.copy_qp_params(self)
        return p

    @return_path.setter
    def return_path(self, value: Optional["IBPath"]) -> None:
        self._return_path = self._direction(value)

    def _direction(self, value: Optional["IBPath"]) -> Optional["IBPath"]:
        if value is None or value is self:
            return None
        if not isinstance(value, IBPath):
            raise TypeError(f"a direction path must be an IBPath, not "
                            f"{type(value).__name__}")
        if value._forward_path is not None or value._return_path is not None:
            raise ValueError("a direction path cannot have directions "
                             "of its own")
        return value

    def set_end_port(self, node: Device) -> None:
        """Set :attr:`end_port` to the end port of *node* (a
        :class:`rdma.devices.Device`) whose GID table holds :attr:`SGID`.

        :raises rdma.RDMAError: if no end port of *node* has it."""
        for ep in node.end_ports:
            if self.SGID is not None and self.SGID in ep.gids:
                self.end_port = ep
                return
        raise rdma.RDMAError(f"no end port of {node} has GID {self.SGID}")

    @property
    def SGID_index(self) -> int:
        """Index of :attr:`SGID` in the end port's GID table (cached).
        Assigning sets :attr:`SGID` from the table."""
        try:
            cached: int = self.__dict__["_cached_SGID_index"]
            return cached
        except KeyError:
            pass
        if self.SGID is None:
            raise rdma.RDMAError("the path has no SGID")
        try:
            idx = self._need_end_port().gids.index(self.SGID)
        except ValueError:
            raise rdma.RDMAError(f"GID {self.SGID} is not on "
                                 f"{self.end_port}") from None
        self.__dict__["_cached_SGID_index"] = idx
        return idx

    @SGID_index.setter
    def SGID_index(self, value: int) -> None:
        self.SGID = self._need_end_port().gids[value]
        self.__dict__["_cached_SGID_index"] = value

    @property
    def pkey_index(self) -> int:
        """Index of :attr:`pkey` in the end port's P_Key table (cached;
        the limited-membership form matches too)."""
        try:
            cached: int = self.__dict__["_cached_pkey_index"]
            return cached
        except KeyError:
            pass
        pkeys = self._need_end_port().pkeys
        for k in (self.pkey, self.pkey ^ IBA.PKEY_MEMBERSHIP_BIT):
            if k in pkeys:
                self.__dict__["_cached_pkey_index"] = pkeys.index(k)
                return pkeys.index(k)
        raise rdma.RDMAError(f"P_Key 0x{self.pkey:x} is not on "
                             f"{self.end_port}")

    @pkey_index.setter
    def pkey_index(self, value: int) -> None:
        self.pkey = self._need_end_port().pkeys[value]
        self.__dict__["_cached_pkey_index"] = value

    @property
    def SLID_bits(self) -> int:
        """The path bits of :attr:`SLID` (ah_attr.src_path_bits)."""
        lmc: int = getattr(self.end_port, "lmc", 0) if self.end_port else 0
        return self.SLID & ((1 << lmc) - 1)

    @SLID_bits.setter
    def SLID_bits(self, value: int) -> None:
        self.SLID = value | self._need_end_port().lid

    @property
    def DLID_bits(self) -> int:
        """The path bits of :attr:`DLID`."""
        lmc: int = getattr(self.end_port, "lmc", 0) if self.end_port else 0
        return self.DLID & ((1 << lmc) - 1)

    @DLID_bits.setter
    def DLID_bits(self, value: int) -> None:
        self.DLID = value | self._need_end_port().lid

    @property
    def packet_life_time(self) -> int:
        """One-way transit time encoding (4.096 us * 2**t); defaults to the
        port's subnet timeout."""
        v: Optional[int] = self.__dict__.get("packet_life_time")
        if v is not None:
            return v
        if self.end_port is None:
            return 0
        return self.end_port.subnet_timeout

    @packet_life_time.setter
    def packet_life_time(self, value: int) -> None:
        self.__dict__["packet_life_time"] = value
        self.drop_cache()

    @property
    def mad_timeout(self) -> float:
        """Seconds to wait for a MAD reply on this path."""
        return float(4.096e-6 * (2 ** (self.packet_life_time + 1) +
                                 2 ** self.resp_time))

    @property
    def qp_timeout(self) -> float:
        """Seconds of the RC local ack timeout: 2 * packet_life_time +
        the destination's ack delay."""
        return float(4.096e-6 * (2 ** (self.packet_life_time + 1) +
                                 2 ** self.dack_resp_time))

    def _state(self) -> Dict[str, Any]:
        d = Path._state(self)
        if "packet_life_time" in self.__dict__:
            d["packet_life_time"] = self.__dict__["packet_life_time"]
        return d

    def complete(self) -> bool:
        """True if the path is enough to send on (a GID for RoCE, LIDs for
        InfiniBand, and a destination QP)."""
        if self.end_port is None or self.dqpn is None:
            return False
        if self.has_grh and (self.SGID is None or self.DGID is None):
            return False
        if self.end_port.link_layer == "Ethernet":
            return self.has_grh
        return (0 < self.DLID < IBA.LID_MULTICAST or self.has_grh) and \
            0 < self.SLID < IBA.LID_MULTICAST

    # -- transformations ---------------------------------------------------

    def reverse(self, for_reply: bool = True) -> "IBPath":
        """Reverse the path in place (IBA 13.5.4) and return it: source and
        destination LIDs, GIDs, QPNs, PSNs, ack times and RD atomics swap.
        With *for_reply* the hop limit becomes 255, as for a reply MAD."""
        d = self.__dict__
        for a, b in (("DLID", "SLID"), ("dqpn", "sqpn"), ("DGID", "SGID"),
                     ("dack_resp_time", "sack_resp_time"),
                     ("dqpsn", "sqpsn"), ("drdatomic", "srdatomic")):
            va, vb = getattr(self, a), getattr(self, b)
            object.__setattr__(self, a, vb)
            object.__setattr__(self, b, va)
            for k, v in ((a, vb), (b, va)):
                if getattr(type(self), k, None) == v:
                    d.pop(k, None)
        if self.has_grh and for_reply:
            object.__setattr__(self, "hop_limit", 0xFF)
        f, r = self._forward_path, self._return_path
        self._forward_path, self._return_path = r, f
        self.drop_cache()
        return self

    def _directions(self) -> Dict[str, "IBPath"]:
        return {k: self.__dict__[k] for k in ("_forward_path", "_return_path")
                if self.__dict__.get(k) is not None}

    def __reduce__(self) -> Tuple[Any, ...]:
        # The direction paths travel with a pickled path (python-rdma).
        d = self._state()
        d.update(self._directions())
        return (type(self), (None,), d)

    def copy(self, **kwargs: Any) -> "IBPath":
        """A copy of the path (and of its direction paths), with *kwargs*
        applied."""
        new = Path.copy(self, **kwargs)
        for k, v in self._directions().items():
            object.__setattr__(new, k, v.copy(end_port=None))
        return new

    def copy_qp_params(self, rhs: "IBPath") -> None:
        """Copy the QP related attributes from *rhs*."""
        for k in ("dqpn", "sqpn", "qkey", "min_rnr_timer", "dack_resp_time",
                  "sack_resp_time", "dqpsn", "sqpsn", "drdatomic",
                  "srdatomic"):
            setattr(self, k, getattr(rhs, k))

    # -- the tables --------------------------------------------------------

    def ah_attr(self) -> "ibv.ah_attr":
        """The ``ibv.ah_attr`` for this path (the AH table)."""
        a = ibv.ah_attr(dlid=self.DLID, sl=self.SL,
                        src_path_bits=self.SLID_bits,
                        static_rate=self.rate if self.rate else 0,
                        port_num=self._need_end_port().port_id)
        if self.has_grh:
            if self.DGID is None:
                raise rdma.RDMAError("the path has a GRH but no DGID")
            a.is_global = 1
            a.grh = ibv.global_route(dgid=self.DGID,
                                     sgid_index=self.SGID_index,
                                     flow_label=self.flow_label,
                                     hop_limit=self.hop_limit,
                                     traffic_class=self.traffic_class)
        return a

    def ah_attr_for(self, pd: "ibv.PD") -> "ibv.ah_attr":
        """``PD.ah()`` protocol: the ah_attr to build an AH from."""
        return self.ah_attr()

    def ah_for(self, pd: "ibv.PD") -> "ibv.AH":
        """``PD.ah(path)``: the AH of this path on *pd*, made once."""
        c: Optional[Tuple[ibv.PD, ibv.AH]] = self.__dict__.get("_cached_ah")
        if c is not None and c[0] is pd and not c[1].closed:
            return c[1]
        attr = self.ah_attr()
        try:
            ah = pd.ah(attr)
        except rdma.SysError as e:
            where = (f"GID index {attr.grh.sgid_index} of {self.end_port}"
                     if attr.is_global else f"port {self.end_port}")
            raise rdma.SysError(e.errno or 0, e.func,
                                f"cannot make the AH of {self} from "
                                f"{where}") from e
        self.__dict__["_cached_ah"] = (pd, ah)
        return ah

    def qp_attr(self, qp_type: int, state: int,
                qp_access_flags: int = 0) -> "ibv.qp_attr":
        """The ``ibv.qp_attr`` that moves a QP of *qp_type* to *state*
        (IBV_QPS_INIT, _RTR or _RTS) on this path (the QP table)."""
        if state == ibv.IBV_QPS_INIT:
            a = ibv.qp_attr(qp_state=state, pkey_index=self.pkey_index,
                            port_num=self._need_end_port().port_id)
            if qp_type == ibv.IBV_QPT_UD:
                if self.qkey is None:
                    raise rdma.RDMAError("a UD QP needs path.qkey")
                a.qkey = self.qkey
            else:
                a.qp_access_flags = qp_access_flags
            return a
        if state == ibv.IBV_QPS_RTR:
            a = ibv.qp_attr(qp_state=state)
            if qp_type == ibv.IBV_QPT_UD:
                return a
            if self.dqpn is None:
                raise rdma.RDMAError("a connected QP needs path.dqpn")
            a.path_mtu = self.MTU
            a.dest_qp_num = self.dqpn
            a.rq_psn = self.dqpsn & 0xFFFFFF
            a.ah_attr = self.ah_attr()
            if qp_type == ibv.IBV_QPT_RC:
                a.max_dest_rd_atomic = min(self.drdatomic, 255)
                a.min_rnr_timer = self.min_rnr_timer
            return a
        if state == ibv.IBV_QPS_RTS:
            a = ibv.qp_attr(qp_state=state, sq_psn=self.sqpsn & 0xFFFFFF)
            if qp_type == ibv.IBV_QPT_RC:
                a.timeout = IBA.to_timer(self.qp_timeout)
                a.retry_cnt = min(self.retries, 7)
                a.rnr_retry = 7
                a.max_rd_atomic = min(self.srdatomic, 255)
            return a
        raise ValueError(f"no path table for QP state {state}")

    # -- text --------------------------------------------------------------

    def __str__(self) -> str:
        if self.has_grh:
            res = (f"{self.SGID} {self.SLID} -> {self.DGID} {self.DLID} "
                   f"TC={self.traffic_class} FL={self.flow_label} "
                   f"HL={self.hop_limit}")
        else:
            res = f"{self.SLID} -> {self.DLID}"
        return f"Path {res} SL={self.SL} PKey=0x{self.pkey:x} DQPN={self.dqpn}"



#: The longest directed route: 63 hops (IBA 14.2.2: HopCount is 6 bits).
DR_MAX_HOPS = 63


class DRBytes(bytes):
    """The bytes of :attr:`IBDRPath.drPath`.  Programs converted from
    python-rdma's Python 2 kept its byte strings as ``str``
    (``path.drPath += chr(port)``): adding a ``str`` of code points below
    256 to it adds those bytes (Latin-1), so such code keeps working."""

    __slots__ = ()

    def __add__(self, other: Any) -> bytes:
        if isinstance(other, str):
            other = _latin1(other)
        return bytes.__add__(self, other)

    def __radd__(self, other: Any) -> bytes:
        if isinstance(other, str):
            return _latin1(other) + bytes(self)
        return NotImplemented


def _latin1(s: str) -> bytes:
    try:
        return s.encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError(f"directed route {s!r}: a port is 0..254, one "
                         f"character each") from None


def _dr_bytes(value: Any) -> bytes:
    """Check and convert a directed route to bytes: element 0 is 0, then
    one egress port (0..254) per hop, at most :data:`DR_MAX_HOPS` hops.
    Accepts bytes-like objects, sequences of ints, ``"0,1,3"`` and, for
    programs converted from python-rdma's Python 2, a ``str`` of one
    character per port (``"\\0" + chr(1)``: it starts with NUL, which
    the text form cannot)."""
    if isinstance(value, str):
        if value.startswith("\0"):
            return DRBytes(_dr_bytes(_latin1(value)))
        return DRBytes(_parse_dr(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    else:
        try:
            items = list(value)
        except TypeError:
            raise TypeError(f"drPath must be bytes or a sequence of port "
                            f"numbers, not {type(value).__name__}") from None
        for i in items:
            if not isinstance(i, int) or isinstance(i, bool):
                raise TypeError(f"drPath element {i!r} is not an int")
            if not 0 <= i <= 254:
                raise ValueError(f"drPath port {i} is not in 0..254")
        b = bytes(items)
    if not b:
        raise ValueError("drPath is empty: it starts with 0 (the local "
                         "port)")
    if b[0] != 0:
        raise ValueError(f"drPath must start with 0, not {b[0]}")
    if len(b) - 1 > DR_MAX_HOPS:
        raise ValueError(f"drPath has {len(b) - 1} hops; at most "
                         f"{DR_MAX_HOPS}")
    if 255 in b:
        raise ValueError("drPath port 255 is not a port")
    return DRBytes(b)


def _parse_dr(s: str, sep: str = ",") -> bytes:
    """Parse ``"0,1,3"`` (a trailing separator is allowed)."""
    parts = [p.strip() for p in s.strip().split(sep)]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    try:
        ports = [int(p, 10) for p in parts]
    except ValueError:
        raise ValueError(f"invalid directed route {s!r}: ports are "
                         f"decimal numbers separated by {sep!r}") from None
    try:
        return _dr_bytes(ports)
    except ValueError as e:
        raise ValueError(f"invalid directed route {s!r}: {e}") from None


def _format_dr(v: bytes) -> str:
    # python-rdma's repr form: "0:1:3:" (no commas, so that the path spec
    # parser can split on them).
    return "".join(f"{i}:" for i in v)


def _lid_fmt(v: int) -> str:
    return f"0x{v:x}" if v >= IBA.LID_MULTICAST else str(v)


class IBDRPath(IBPath):
    """A directed route to an SMP target (IBA 14.2.2): SMPs on VL15 to
    QP0, the route given hop by hop in :attr:`drPath`.

    ``drPath[0]`` is always 0; ``drPath[i]`` is the port the SMP leaves
    through at hop *i* (for an HCA the first is its own port number).
    ``IBDRPath(end_port)`` is the route to the local port (``drPath`` =
    ``b"\\0"``).  A route can start with a LID-routed part (:attr:`DLID`
    is the LID of the first node of the directed part and :attr:`drSLID`
    our LID) and end with one (:attr:`drDLID`); both are the permissive
    LID 0xFFFF for a route that is directed all the way.

    ``str(path)`` is python-rdma's ``DR Path (0, 1, 3)``; the string form
    of :func:`from_string` is ``0,1,3`` (infiniband-diags' ``-D``).
    """

    #: LRH.DLID: permissive unless the route starts LID-routed.
    DLID = IBA.LID_PERMISSIVE
    #: LRH.SLID: permissive unless the route starts LID-routed.
    SLID = IBA.LID_PERMISSIVE
    #: SMP DrSLID: the LID the reply is LID-routed to at its end.
    drSLID = IBA.LID_PERMISSIVE
    #: SMP DrDLID: the LID routed to after the directed part.
    drDLID = IBA.LID_PERMISSIVE
    #: SMP InitialPath: 0, then one egress port per hop (bytes);
    #: ``len(drPath) - 1`` is the SMP's HopCount.
    drPath = DRBytes(b"\0")
    #: The ingress port at each hop (SMP ReturnPath of a reply), when
    #: known: :meth:`reverse` needs it.  None, or bytes as long as
    #: :attr:`drPath` (element 0 unused).
    returnPath: Optional[bytes] = None
    #: SMPs go to QP0, from QP0, with the QP0 Q_Key.
    dqpn = 0
    sqpn = 0
    qkey = IBA.IB_DEFAULT_QP0_QKEY

    _format_drPath = staticmethod(_format_dr)
    _format_returnPath = staticmethod(
        lambda v: "None" if v is None else _format_dr(v))
    _format_DLID = staticmethod(_lid_fmt)
    _format_SLID = staticmethod(_lid_fmt)
    _format_drSLID = staticmethod(_lid_fmt)
    _format_drDLID = staticmethod(_lid_fmt)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "drPath":
            value = _dr_bytes(value)
        elif name == "returnPath" and value is not None:
            value = (_parse_dr(value) if isinstance(value, str)
                     else bytes(value))
        elif name in ("DLID", "SLID", "drSLID", "drDLID"):
            if not isinstance(value, int) or not 0 <= value <= 0xFFFF:
                raise ValueError(f"{name} must be a LID (0..0xFFFF), not "
                                 f"{value!r}")
        IBPath.__setattr__(self, name, value)

    @property
    def has_grh(self) -> bool:
        """Always False: SMPs on a directed route carry no GRH."""
        return False

    @has_grh.setter
    def has_grh(self, value: bool) -> None:
        raise AttributeError("IBDRPath.has_grh is always False")

    @property
    def SGID_index(self) -> int:
        """Raises :exc:`AttributeError`: a directed route has no GIDs."""
        raise AttributeError("IBDRPath has no SGID_index: directed routes "
                             "do not use GIDs")

    @SGID_index.setter
    def SGID_index(self, value: int) -> None:
        raise AttributeError("IBDRPath has no SGID_index: directed routes "
                             "do not use GIDs")

    @property
    def hop_count(self) -> int:
        """The SMP's HopCount: ``len(drPath) - 1``."""
        return len(self.drPath) - 1

    def complete(self) -> bool:
        """True with an end port and a route."""
        return self.end_port is not None and bool(self.drPath)

    def reverse(self, for_reply: bool = True) -> "IBDRPath":
        """Reverse the route in place and return it: the new route leaves
        the target through its ingress ports (:attr:`returnPath`, read
        from the reply of an SMP) and the new :attr:`returnPath` is the
        old route's egress ports, so that reversing twice gives the
        original.  Only routes that are directed all the way can be
        reversed.

        :raises ValueError: without :attr:`returnPath` or with a LID-routed
            part."""
        p = IBA.LID_PERMISSIVE
        if (self.DLID, self.drSLID, self.drDLID) != (p, p, p):
            raise ValueError(f"{self}: only a route directed all the way "
                             f"can be reversed")
        dr, ret = self.drPath, self.returnPath
        if len(dr) > 1 and (ret is None or len(ret) != len(dr)):
            raise ValueError(f"{self}: reversing a directed route needs "
                             f"returnPath (the ingress port of each hop, as "
                             f"long as drPath)")
        if len(dr) > 1:
            assert ret is not None      # (checked above)
            fwd = b"\0" + ret[:0:-1]
            back = b"\0" + dr[:0:-1]
            object.__setattr__(self, "drPath", _dr_bytes(fwd))
            object.__setattr__(self, "returnPath", back)
        self.drop_cache()
        return self

    def __str__(self) -> str:
        dr = tuple(self.drPath)
        p = IBA.LID_PERMISSIVE
        if self.drDLID == p and self.drSLID == p:
            return f"DR Path {dr!r}"
        if self.drDLID == p:
            return f"DR Path {self.DLID} -> {dr!r}"
        if self.drSLID == p:
            return f"DR Path {dr!r} -> {self.drDLID}"
        return f"DR Path {self.DLID} -> {dr!r} -> {self.drDLID}"

    def extend(self, port: int) -> "IBDRPath":
        """A copy of this route one hop longer, out of *port* of the node
        it reaches (``returnPath`` is not carried over).  Discovery makes
        one per link: this skips the checks of the hops already made.

        :raises ValueError: for a port outside 1..254 or past 63 hops."""
        if not isinstance(port, int) or not 1 <= port <= 254:
            raise ValueError(f"port {port!r} is not in 1..254")
        dr = self.drPath
        if len(dr) > DR_MAX_HOPS:
            raise ValueError(f"{self}: a directed route has at most "
                             f"{DR_MAX_HOPS} hops")
        new = object.__new__(type(self))
        d = new.__dict__
        for k, v in self.__dict__.items():
            if k[0] != "_" and k != "returnPath":
                d[k] = v
        d["drPath"] = dr + bytes((port,))
        return new

    def dr_string(self) -> str:
        """The route as infiniband-diags writes it: ``0,1,3``."""
        return ",".join(str(i) for i in self.drPath)


# -- helpers ----------------------------------------------------------------

def fill_path(qp: "ibv.QP", path: IBPath, max_rd_atomic: int = 255) -> IBPath:
    """Fill the QP side of *path* for *qp*: ``sqpn``, the ack delay, the RD
    atomic resources (at most *max_rd_atomic*, and what the device allows)
    and random initial PSNs where they are 0.  Returns *path*."""
    path.sqpn = qp.qp_num
    dev = qp.pd.ctx.query_device()
    path.sack_resp_time = dev.local_ca_ack_delay
    path.srdatomic = min(path.srdatomic, dev.max_qp_init_rd_atom,
                         max_rd_atomic)
    path.drdatomic = min(path.drdatomic, dev.max_qp_rd_atom, max_rd_atomic)
    if path.sqpsn == 0:
        path.sqpsn = int.from_bytes(os.urandom(3), "big")
    if path.dqpsn == 0:
        path.dqpsn = int.from_bytes(os.urandom(3), "big")
    return path


def _roce_sgid_index(end_port: EndPort, dgid: Optional[GID]) -> int:
    """Pick the source GID on a RoCE port for *dgid*: a RoCE v2 GID of the
    same family (IPv4-mapped or not), else any non-zero GID."""
    v4 = dgid is not None and bytes(dgid)[:12] == b"\0" * 10 + b"\xff\xff"
    best = None
    for i, (g, t) in enumerate(zip(end_port.gids, end_port.gid_types)):
        if not g:
            continue
        gv4 = bytes(g)[:12] == b"\0" * 10 + b"\xff\xff"
        if t == IBA.GID_TYPE_ROCE_V2 and gv4 == v4:
            return i
        if best is None and gv4 == v4:
            best = i
    if best is None:
        raise rdma.RDMAError(f"{end_port} has no GID to reach {dgid}")
    return best


def resolve_path(umad: Any, path: IBPath, reversible: bool = True,
                 properties: Optional[Dict[str, Any]] = None) -> IBPath:
    """Complete *path* (which has at least a DGID or a DLID) for use with a
    QP or AH, and return it.

    - RoCE (Ethernet link layer): no SA; the GRH is mandatory, the SGID is
      chosen from the port's GID table (a RoCE v2 GID of the DGID's family)
      unless set, the MTU is the port's active MTU (or the path's, if
      smaller and set), the hop limit 64 unless set.
    - InfiniBand with a subnet manager: a PathRecord query to the SA through
      *umad* (an :class:`rdma.umad.UMAD` of the end port), with
      *reversible* and the extra PathRecord fields in *properties*.
    - The software fabric: from its own addressing (like InfiniBand without
      an SA: LIDs and GIDs of the ports are the truth).

    On InfiniBand with an asynchronous *umad* (a
    :class:`rdma.sched.MADSchedule`) this returns a coroutine to ``yield``,
    as python-rdma does; :exc:`SAPathNotFoundError` means the SA has no
    such path.
    """
    if path.end_port is None:
        if umad is None or getattr(umad, "end_port", None) is None:
            raise rdma.RDMAError("resolve_path(): the path has no end_port")
        path.end_port = umad.end_port
    ep = path.end_port
    if path.DGID is None and not path.DLID:
        raise ValueError("resolve_path(): the path needs a DGID or a DLID")
    link_layer = getattr(ep, "link_layer", "InfiniBand")
    provider = getattr(ep, "provider", None)
    if link_layer == "Ethernet":
        if path.DGID is None:
            raise ValueError("resolve_path(): RoCE paths need a DGID")
        path.has_grh = True
        if path.SGID is None:
            path.SGID_index = _roce_sgid_index(ep, path.DGID)
        if not path.hop_limit:
            path.hop_limit = 64
        active = ep.attr.active_mtu
        if "MTU" not in path.__dict__ or path.MTU > active:
            path.MTU = active
        path.DLID = 0
        path.SLID = 0
        path.rate = 0
        for k, v in (properties or {}).items():
            _apply_property(path, k, v)
        return path
    if provider != "ucx":
        if umad is None:
            raise rdma.RDMAError(f"resolve_path(): {ep} is InfiniBand: the "
                                 f"path comes from the SA; pass "
                                 f"rdma.get_umad(end_port)")
        from rdma import sa
        # (a coroutine to yield when umad is asynchronous)
        resolved: IBPath = sa.resolve_path(umad, path, reversible=reversible,
                                           properties=properties)
        return resolved
    # The software fabric: no SM; the ports' LIDs and GIDs are the truth.
    path.SLID = ep.lid
    if path.DGID is not None:
        path.has_grh = True
        if path.SGID is None:
            path.SGID = ep.default_gid
        if not path.hop_limit:
            path.hop_limit = 64
    active = ep.attr.active_mtu
    if "MTU" not in path.__dict__ or path.MTU > active:
        path.MTU = active
    path.rate = 0
    for k, v in (properties or {}).items():
        _apply_property(path, k, v)
    return path


# PathRecord component names (python-rdma's properties=) -> path attributes.
_PR_NAMES = {"PKey": "pkey", "SL": "SL", "MTU": "MTU", "rate": "rate",
             "packetLifeTime": "packet_life_time", "flowLabel": "flow_label",
             "hopLimit": "hop_limit", "TClass": "traffic_class",
             "SGID": "SGID", "DGID": "DGID", "SLID": "SLID", "DLID": "DLID"}


def _apply_property(path: IBPath, k: str, v: Any) -> None:
    attr = _PR_NAMES.get(k, k)
    if not hasattr(IBPath, attr):
        raise ValueError(f"unknown path property {k!r}")
    setattr(path, attr, v)


def get_mad_path(umad: Any, ep_addr: str | int | GID,
                 **kwargs: Any) -> IBPath:
    """Resolve a path from *umad*'s end port to *ep_addr* (a string for
    :func:`from_string`, a LID, a GID or a port GUID).  On an
    asynchronous *umad* (a :class:`rdma.sched.MADSchedule`) this returns
    a coroutine, as :func:`resolve_path` does.

    :raises SAPathNotFoundError: the SA has no path to *ep_addr*."""
    path: Path
    if isinstance(ep_addr, str):
        path = from_string(ep_addr, require_ep=umad.end_port)
        for k, v in kwargs.items():
            setattr(path, k, v)
    elif isinstance(ep_addr, GID):
        path = IBPath(umad.end_port, DGID=ep_addr, **kwargs)
    elif isinstance(ep_addr, GUID):
        path = IBPath(umad.end_port,
                      DGID=GID.from_parts(IBA.GID_DEFAULT_PREFIX, ep_addr),
                      **kwargs)
    elif isinstance(ep_addr, int):
        path = IBPath(umad.end_port, DLID=ep_addr, **kwargs)
    else:
        raise ValueError(f"cannot make a path to {ep_addr!r}")
    if not isinstance(path, IBPath):
        raise ValueError(f"{ep_addr!r} is not a path to resolve")
    return resolve_path(umad, path)


# -- text forms --------------------------------------------------------------

#: Properties that a path specification may set (they store plain values).
_SPEC_PROPERTIES = ("packet_life_time", "dpqn")

_SPEC = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$", re.S)


def _split_args(body: str) -> List[str]:
    """Split 'a=1, b=GID('x'), c='y'' at top-level commas."""
    out: List[str] = []
    cur: List[str] = []
    depth = 0
    quote: Optional[str] = None
    for ch in body:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced parentheses")
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if quote or depth:
        raise ValueError("unbalanced quotes or parentheses")
    if "".join(cur).strip():
        out.append("".join(cur))
    return out


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    raise ValueError(f"expected a quoted string, got {v!r}")


def from_spec_string(s: str) -> Path:
    """Build a path from its ``repr``.  Safe on untrusted text: only known
    attributes, ints, GIDs, quoted end port names and None are accepted.

    :raises ValueError: if the string cannot be parsed."""
    m = _SPEC.match(s)
    if m is None:
        raise ValueError(f"invalid path specification {s!r}")
    cls = {"IBPath": IBPath, "IBDRPath": IBDRPath,
           "Path": Path}.get(m.group(1))
    if cls is None:
        raise ValueError(f"invalid path specification {s!r}: unknown path "
                         f"type {m.group(1)!r}")
    kwargs: Dict[str, Any] = {}
    items = _split_args(m.group(2))
    if not items:
        raise ValueError(f"invalid path specification {s!r}: no attributes "
                         f"(write at least end_port=None)")
    for item in items:
        k, eq, v = item.partition("=")
        k, v = k.strip(), v.strip()
        if not eq or not k or not v:
            raise ValueError(f"invalid path specification {s!r}: bad item "
                             f"{item.strip()!r}")
        if k in kwargs:
            raise ValueError(f"attribute {k!r} given twice")
        if k != "end_port" and (k.startswith("_") or not hasattr(cls, k) or
                                callable(getattr(cls, k)) or
                                (isinstance(getattr(cls, k), property) and
                                 k not in _SPEC_PROPERTIES)):
            raise ValueError(f"path attribute {k!r} is not known")
        if v == "None":
            kwargs[k] = None
        elif k == "end_port":
            kwargs[k] = _unquote(v)
        elif k in ("drPath", "returnPath") and cls is IBDRPath:
            kwargs[k] = _parse_dr(v, ":")
        elif v.startswith("GID(") and v.endswith(")"):
            kwargs[k] = GID(_unquote(v[4:-1].strip()))
        elif "GID" in k:
            kwargs[k] = GID(_unquote(v) if v[0] in "'\"" else v)
        elif v in ("True", "False"):
            kwargs[k] = v == "True"
        else:
            try:
                kwargs[k] = int(v, 0)
            except ValueError:
                raise ValueError(f"{k}={v!r} is not a valid integer") from None
    ep = kwargs.pop("end_port", None)
    if ep is not None:
        try:
            ep = rdma.get_end_port(ep)
        except rdma.RDMAError as e:
            raise ValueError(f"could not find end port {ep!r}: {e}") from None
    try:
        return cls(ep, **kwargs)
    except (AttributeError, TypeError) as e:
        raise ValueError(f"invalid path specification {s!r}: {e}") from None


def _check_ep(ep: Optional[EndPort], require_dev: Optional[Device] = None,
              require_ep: Optional[EndPort] = None) -> None:
    if require_dev is not None and (ep is None or ep.parent != require_dev):
        raise ValueError(f"path requires device {require_dev}, got {ep}")
    if require_ep is not None and ep != require_ep:
        raise ValueError(f"path requires end port {require_ep}, got {ep}")


def from_string(s: str, default_end_port: Optional[EndPort] = None,
                require_dev: Optional[Device] = None,
                require_ep: Optional[EndPort] = None) -> Path:
    """Parse a destination into a path.

    ====================  ===============================  ==================
    Form                  Example                          Sets
    ====================  ===============================  ==================
    Port GID              ``fe80::2:c903:0:1491``          ``DGID``
    Scoped GID            ``fe80::2:c903:0:1491%rxe0/1``   ``DGID``, end_port
    Port GUID             ``0002:c903:0000:1491``          ``DGID`` (fe80::)
    LID                   ``12`` or ``0xc``                ``DLID``
    Directed route        ``0,1,3`` (trailing ``,`` ok)    ``IBDRPath.drPath``
    Path spec (``repr``)  ``IBPath(DLID=2, SL=2)``         those attributes
    ====================  ===============================  ==================

    The end port is the scoped one, else *default_end_port* (*require_ep*
    if given).  :raises ValueError: if *s* cannot be parsed or names
    another end port than *require_dev*/*require_ep*."""
    if not isinstance(s, str):
        raise TypeError(f"from_string() needs a str, not {type(s).__name__}")
    if require_ep is not None:
        default_end_port = require_ep
    s = s.strip()
    if not s:
        raise ValueError("empty path string")
    if "(" in s:
        ret = from_spec_string(s)
        if ret.end_port is None:
            ret.end_port = default_end_port
        elif require_dev is not None or require_ep is not None:
            _check_ep(ret.end_port, require_dev, require_ep)
        return ret
    ep = default_end_port
    if "%" in s:
        s, _, scope = s.partition("%")
        try:
            ep = rdma.get_end_port(scope)
        except rdma.RDMAError as e:
            raise ValueError(f"could not find end port {scope!r}: {e}") \
                from None
        _check_ep(ep, require_dev, require_ep)
        return IBPath(ep, DGID=GID(s))
    if re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)", s):
        lid = int(s, 0)
        if not 0 < lid <= 0xFFFF:
            raise ValueError(f"invalid LID {s!r}")
        return IBPath(ep, DLID=lid)
    if re.fullmatch(r"[0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){3}", s):
        return IBPath(ep, DGID=GID.from_parts(IBA.GID_DEFAULT_PREFIX,
                                              int(GUID(s))))
    if "," in s:
        return IBDRPath(ep, drPath=_parse_dr(s))
    return IBPath(ep, DGID=GID(s))   # raises ValueError for bad GIDs


# -- the reply path of a UD receive ------------------------------------------

def _ipv4_header_ok(h: bytes) -> bool:
    """True for an IPv4 header without options whose checksum is right."""
    if len(h) < 20 or h[0] != 0x45:
        return False
    total: int = sum(struct.unpack("!10H", h[:20]))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def WCPath(end_port: Optional[EndPort], wc: ibv.wc,
           buf: Optional[ReadableBuffer] = None, off: int = 0,
           **kwargs: Any) -> IBPath:
    """The path of a received UD packet, from its work completion.

    *buf* is the receive buffer (any buffer object) and *off* where the
    receive started in it: its first 40 bytes hold the GRH, or on RoCE v2
    over IPv4 the IPv4 header in bytes 20..39.  The result describes the
    packet as received (``SGID`` = the sender); ``reverse()`` it to reply.
    *kwargs* (e.g. ``pkey=``, ``qkey=``) are set on the path."""
    path = IBPath(end_port, sqpn=wc.src_qp, dqpn=wc.qp_num, SLID=wc.slid,
                  SL=wc.sl, **kwargs)
    if end_port is not None and end_port.lid:
        path.DLID_bits = wc.dlid_path_bits
    if wc.wc_flags & ibv.IBV_WC_GRH and buf is not None:
        mv = memoryview(buf).cast("B")
        if off < 0 or len(mv) - off < 40:
            raise ValueError("WCPath(): buf must hold 40 bytes of GRH at off")
        grh = bytes(mv[off:off + 40])
        path.has_grh = True
        # An IPv6/IB GRH has version 6 in its first nibble; otherwise (and
        # when a checksummed IPv4 header is there) it is RoCE v2 over IPv4.
        if (grh[0] >> 4 != 6 and grh[20] >> 4 == 4) or \
                _ipv4_header_ok(grh[20:40]):
            # RoCE v2 over IPv4: the GIDs are IPv4-mapped addresses.
            path.traffic_class = grh[21]
            path.hop_limit = grh[28]
            path.SGID = GID(b"\0" * 10 + b"\xff\xff" + grh[32:36])
            path.DGID = GID(b"\0" * 10 + b"\xff\xff" + grh[36:40])
        else:
            vtf = struct.unpack_from("!I", grh, 0)[0]
            path.traffic_class = (vtf >> 20) & 0xFF
            path.flow_label = vtf & 0xFFFFF
            path.hop_limit = grh[7]
            path.SGID = GID(grh[8:24])
            path.DGID = GID(grh[24:40])
    return path
