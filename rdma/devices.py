"""RDMA devices and their end ports: one model for verbs and umad.

A *device* is an RDMA adapter (``mlx5_0``, ``rxe0``, a CA simulated by
ibsim, the software fabric's ``ucx0``); an *end port* is one of its ports
(``rxe0/1``).  :func:`get_devices` lists them from three sources and merges
what describes the same device:

- the verbs provider (libibverbs): devices that can run QPs;
- libibumad: devices that can send MADs.  A real InfiniBand HCA is both,
  and is one :class:`Device`; a CA that only libibumad reports (rdma's
  ibsim shim, :mod:`rdma.simnet`, presents its simulated CA that way) is
  a device of provider ``"umad"``;
- the software fabric (provider ``"ucx"``), always last.

So one :class:`EndPort` works with :func:`rdma.get_umad` and
:func:`rdma.get_verbs` alike.  Devices and end ports carry python-rdma's
attributes (``node_guid``, ``fw_ver``, ``lid``, ``sm_lid``, ``state``,
``gids``, ``pkeys``...).  They are snapshots taken when first read:
:meth:`EndPort.refresh` (or the python-rdma hooks :meth:`EndPort.lid_change`,
:meth:`~EndPort.sm_change`, :meth:`~EndPort.pkey_change`, called by
:meth:`rdma.ibverbs.Context.handle_async_event`) reads a port again.

Collections are :class:`DemandList` objects, python-rdma's type: ordered,
iterated by value, indexed by key (a device name, a port number) or by GUID,
with :meth:`DemandList.first`.
"""
from __future__ import annotations

import errno
import os
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generic, Hashable,
                    Iterable, Iterator, List, Mapping, Optional, Tuple,
                    TypeVar, Union, overload)

from rdma import _ibverbs
from rdma._errors import RDMAError, SysError
from rdma.IBA import GID, GID_DEFAULT_PREFIX, GUID

if TYPE_CHECKING:
    from rdma.umad import SAPath

__all__ = ["Device", "RDMADevice", "EndPort", "DemandList", "get_devices",
           "get_device", "get_end_port", "get_verbs", "PROVIDER_ENV",
           "select_providers", "find_port_gid", "find_port_guid",
           "find_node_guid", "find_port_name", "SYS_INFINIBAND"]

#: Environment variable that forces a provider: ``verbs``, ``umad``,
#: ``ucx`` or ``auto``.
PROVIDER_ENV = "RDMA_PROVIDER"

#: Where the kernel describes its RDMA devices (read for the attributes
#: python-rdma takes from sysfs when the file is there).
SYS_INFINIBAND = "/sys/class/infiniband/"

#: The pseudo-provider of devices that only libibumad reports.
UMAD = "umad"
#: The software fabric's provider: listed last, chosen last.
SOFTWARE = "ucx"

_NODE_TYPES = {1: "CA", 2: "switch", 3: "router", 4: "RNIC", 5: "usNIC",
               6: "usNIC UDP", 7: "unspecified"}
_TRANSPORTS = {0: "InfiniBand", 1: "iWARP", 2: "usNIC", 3: "usNIC UDP",
               4: "unspecified"}
#: IBV_PORT_ACTIVE, IBA PortState Active.
_ACTIVE = 4
#: IBA PortPhysicalState LinkUp.
_LINK_UP = 5
#: active_width encoding -> lanes.
_WIDTHS = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}
#: active_speed encoding -> (tenths of Gb/s per lane, name).
_SPEEDS = {1: (25, "SDR"), 2: (50, "DDR"), 4: (100, "QDR"),
           8: (100, "FDR10"), 16: (140, "FDR"), 32: (250, "EDR"),
           64: (500, "HDR"), 128: (1000, "NDR"), 256: (2000, "XDR")}


def _sysfs(path: str) -> Optional[str]:
    """The stripped text of a sysfs file, or None when it is not there."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


# -- the collection type ------------------------------------------------------

_V = TypeVar("_V")


class DemandList(Generic[_V]):
    """python-rdma's collection: an ordered list whose index is a key.

    Iterating yields the values (devices, end ports) in order;
    ``dl[key]`` looks one up by its key (a device name, a port number), by
    :class:`rdma.IBA.GUID` (the node GUID of a device, the port GUID of an
    end port) or, for device lists, by position (``devices[0]``,
    ``devices[:2]`` gives a list).  Values are made on demand by *conv*
    (``conv(key)``) the first time they are needed; *more*, if given,
    returns ``(key, value)`` pairs that end the list and is called only
    when the list is looked at past its known keys (the software fabric is
    brought up only when it is reached).  A missing key raises
    :exc:`KeyError`.  ``len()``, ``in`` (a value or a key), :meth:`first`,
    :meth:`index` and comparison with a list of the same values work as
    for a list.
    """

    def __init__(self, keys: Iterable[Hashable],
                 conv: Callable[[Any], _V],
                 guid_attr: Optional[str] = None,
                 positional: bool = False,
                 more: Optional[Callable[[], Iterable[Tuple[Hashable, _V]]]]
                 = None):
        self._okeys: Tuple[Hashable, ...] = tuple(keys)
        self._data: Dict[Hashable, Optional[_V]] = dict.fromkeys(self._okeys)
        self._conv = conv
        self._guid_attr = guid_attr
        self._positional = positional
        self._more = more

    def _expand(self) -> None:
        """Append what *more* gives (once)."""
        more, self._more = self._more, None
        if more is None:
            return
        for k, v in more():
            if k not in self._data:
                self._okeys += (k,)
                self._data[k] = v

    def _keys(self) -> Tuple[Hashable, ...]:
        self._expand()
        return self._okeys

    def __len__(self) -> int:
        return len(self._keys())

    def __bool__(self) -> bool:
        return bool(self._okeys) or bool(len(self))

    def __iter__(self) -> Iterator[_V]:
        i = 0
        while True:
            if i == len(self._okeys):
                self._expand()
                if i == len(self._okeys):
                    return
            yield self[self._okeys[i]]
            i += 1

    def itervalues(self) -> Iterator[_V]:
        """The values in order (python-rdma's name)."""
        return iter(self)

    def values(self) -> List[_V]:
        """The values in order."""
        return list(self)

    def iterkeys(self) -> Iterator[Hashable]:
        """The keys in order (python-rdma's name)."""
        return iter(self._keys())

    def keys(self) -> List[Hashable]:
        """The keys in order."""
        return list(self._keys())

    def items(self) -> List[Tuple[Hashable, _V]]:
        """``(key, value)`` pairs in order."""
        return [(k, self[k]) for k in self._keys()]

    def first(self) -> _V:
        """The first value.  :raises IndexError: if the list is empty."""
        if not self._okeys:
            self._expand()
        if not self._okeys:
            raise IndexError("first() of an empty list")
        return self[self._okeys[0]]

    @overload
    def __getitem__(self, idx: slice) -> List[_V]: ...

    @overload
    def __getitem__(self, idx: Any) -> _V: ...

    def __getitem__(self, idx: Any) -> Union[_V, List[_V]]:
        if isinstance(idx, GUID) and self._guid_attr:
            for v in self:
                if getattr(v, self._guid_attr) == idx:
                    return v
            raise KeyError(idx)
        try:
            hit = idx in self._data
        except TypeError:
            hit = False
        if not hit and self._more is not None and not isinstance(idx, slice):
            self._expand()
            hit = idx in self._data
        if hit:
            val = self._data[idx]
            if val is None:
                val = self._conv(idx)
                self._data[idx] = val
            return val
        if self._positional and isinstance(idx, int) and \
                not isinstance(idx, bool):
            return self[self._keys()[idx]]         # IndexError if out
        if self._positional and isinstance(idx, slice):
            return [self[k] for k in self._keys()[idx]]
        raise KeyError(idx)

    def get(self, idx: Any, default: Optional[_V] = None) -> Optional[_V]:
        """``self[idx]``, or *default* when there is no such key."""
        try:
            v: Optional[_V] = self[idx]
        except (KeyError, IndexError):
            return default
        return v

    def index(self, value: Any) -> Hashable:
        """The key ``k`` with ``self[k] == value``.

        :raises ValueError: if no value is equal."""
        for k in self._keys():
            if self[k] == value:
                return k
        raise ValueError(f"{value!r} is not in the list")

    def clear(self) -> None:
        """Forget the values made so far; they are made again on demand."""
        self._data = dict.fromkeys(self._keys())

    def __contains__(self, x: Any) -> bool:
        try:
            if x in self._data:
                return True
        except TypeError:
            pass
        return any(v == x for v in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (DemandList, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(v) for v in self) + "]"


# -- end ports ----------------------------------------------------------------

class EndPort:
    """One port of a :class:`Device`: ``parent``, ``port_id`` and what the
    port reported when it was read (``lid``, ``gids``, ``state``...).

    An IB switch's end port is port 0; a CA's are 1 and up.  The values come
    from verbs when the device has verbs, else from libibumad (a simulated
    CA: its GID table is the default GID only).
    """

    #: The port number.
    port_id: int = 0

    def __init__(self, parent: "Device", port_id: int,
                 umad: Optional[Mapping[str, Any]] = None):
        #: The :class:`Device` this port belongs to.
        self.parent = parent
        #: The port number (1-based on a CA).
        self.port_id = port_id
        self._attr: Optional[_ibverbs.port_attr] = None
        self._umad = umad
        #: The GID table, index for index (empty slots are zero GIDs).
        self.gids: List[GID] = []
        #: The type of each GID (``rdma.IBA.GID_TYPE_*``), same indexes.
        self.gid_types: List[int] = []
        #: The P_Key table.
        self.pkeys: List[int] = []
        if umad is not None and not parent.has_verbs:
            self._load_umad(umad)

    # -- loading

    def _load(self, ctx: "_ibverbs.Context") -> None:
        """Read the port through an open verbs context."""
        attr = self._attr = ctx.query_port(self.port_id)
        gids, types = [], []
        for i in range(attr.gid_tbl_len):
            e = ctx.query_gid_ex(self.port_id, i)
            gids.append(e.gid)
            types.append(e.gid_type)
        self.gids, self.gid_types = gids, types
        pkeys = []
        for i in range(attr.pkey_tbl_len):
            try:
                pkeys.append(ctx.query_pkey(self.port_id, i))
            except SysError:
                break
        self.pkeys = pkeys

    def _load_umad(self, info: Mapping[str, Any]) -> None:
        """Take the port's values from a libibumad port description."""
        from rdma import ibverbs as ibv
        self._umad = info
        ll = str(info.get("link_layer") or "")
        self._attr = ibv.port_attr(
            state=info["state"], lid=info["lid"], lmc=info["lmc"],
            sm_lid=info["sm_lid"], sm_sl=info["sm_sl"],
            phys_state=info["phys_state"],
            port_cap_flags=info["capmask"] & 0xFFFFFFFF,
            gid_tbl_len=1, pkey_tbl_len=len(info["pkeys"]),
            subnet_timeout=18,
            link_layer=2 if ll.lower().startswith("eth") else 1)
        self.gids = [GID.from_parts(info["gid_prefix"], info["port_guid"])]
        self.gid_types = [0]
        self.pkeys = list(info["pkeys"])

    def refresh(self) -> "EndPort":
        """Read the port's attributes and tables again; return self."""
        if self.parent.has_verbs:
            with self.parent.open() as ctx:
                self._load(ctx)
        else:
            info = _umad_info(self.parent.name)
            for p in info["ports"]:
                if p["port_id"] == self.port_id:
                    self._load_umad(p)
                    break
            else:
                raise RDMAError(f"{self} is gone")
        return self

    # python-rdma's hooks (called by Context.handle_async_event).
    def lid_change(self) -> None:
        """The port's LID changed: read the port again."""
        self.refresh()

    def sm_change(self) -> None:
        """The port's SM changed: read the port again."""
        self.refresh()

    def pkey_change(self) -> None:
        """The port's P_Key table changed: read the port again."""
        self.refresh()

    # -- attributes

    @property
    def attr(self) -> _ibverbs.port_attr:
        """The port's :class:`rdma.ibverbs.port_attr` snapshot (for a
        umad-only device, made from what libibumad reports; fields it does
        not report are 0)."""
        if self._attr is None:
            self.refresh()
        assert self._attr is not None     # (refresh() sets it or raises)
        return self._attr

    @property
    def lid(self) -> int:
        """The port's base LID (0 on RoCE)."""
        return self.attr.lid

    @property
    def lmc(self) -> int:
        """The port's LID mask control."""
        return self.attr.lmc

    @property
    def sm_lid(self) -> int:
        """The LID of the subnet manager."""
        return self.attr.sm_lid

    @property
    def sm_sl(self) -> int:
        """The SL to reach the subnet manager."""
        return self.attr.sm_sl

    @property
    def state(self) -> int:
        """The logical port state (``rdma.IBA.PORT_STATE_*``, the values of
        ``IBV_PORT_*``: 4 is ACTIVE)."""
        return self.attr.state

    @property
    def phys_state(self) -> int:
        """The physical port state (``rdma.IBA.PHYS_PORT_STATE_*``: 5 is
        LinkUp)."""
        return self.attr.phys_state

    @property
    def subnet_timeout(self) -> int:
        """The subnet timeout encoding of the port (4.096 us * 2**t)."""
        return self.attr.subnet_timeout

    @property
    def cap_mask(self) -> int:
        """The port's capability mask (PortInfo.CapabilityMask)."""
        return self.attr.port_cap_flags

    capmask = cap_mask

    @property
    def link_layer(self) -> str:
        """``"InfiniBand"`` or ``"Ethernet"``."""
        return "Ethernet" if self.attr.link_layer == 2 else "InfiniBand"

    @property
    def rate(self) -> str:
        """The port's rate as the kernel prints it (``"10 Gb/sec (4X
        QDR)"``); a simulated port knows only its Gb/s (``"10 Gb/sec"``)."""
        dev = self.parent
        if dev.provider != SOFTWARE:
            text = _sysfs(f"{SYS_INFINIBAND}{dev.name}/ports/"
                          f"{self.port_id}/rate")
            if text:
                return text
        if not self.parent.has_verbs and self._umad is not None:
            return f"{self._umad['rate']} Gb/sec"
        a = self.attr
        lanes = _WIDTHS.get(a.active_width, 0)
        per_lane, name = _SPEEDS.get(a.active_speed, (25, "SDR"))
        r = per_lane * lanes
        return (f"{r // 10}{'.5' if r % 10 else ''} Gb/sec "
                f"({lanes}X {name})")

    @property
    def rate_gbps(self) -> float:
        """The port's rate in Gb/s (what ``ibstat`` prints as ``Rate``):
        lanes times the lane speed, or libibumad's figure for a simulated
        port."""
        if not self.parent.has_verbs and self._umad is not None:
            return float(self._umad["rate"])
        a = self.attr
        per_lane = _SPEEDS.get(a.active_speed, (25, "SDR"))[0]
        return per_lane * _WIDTHS.get(a.active_width, 0) / 10

    @property
    def default_gid(self) -> GID:
        """GID index 0 of the port."""
        if self._attr is None:
            self.refresh()
        return self.gids[0] if self.gids else GID(0)

    @property
    def gid_prefix(self) -> int:
        """The subnet prefix of the default GID (an int)."""
        return self.default_gid.prefix

    @property
    def port_guid(self) -> GUID:
        """The port GUID (the lower half of the default GID)."""
        if self._umad is not None:
            return GUID(self._umad["port_guid"])
        return GUID(self.default_gid.guid)

    @property
    def provider(self) -> str:
        """The provider of the device (``verbs``, ``umad``, ``ucx``)."""
        return self.parent.provider

    @property
    def has_umad(self) -> bool:
        """True if libibumad reports the port (``rdma.get_umad`` works)."""
        return self._umad is not None

    @property
    def sa_path(self) -> SAPath:
        """How to reach this port's subnet administrator (SM LID, SL,
        P_Key, QP1 Q_Key): see :func:`rdma.umad.sa_path`.

        The same :class:`rdma.path.IBPath` is returned while the port's
        LID, SM LID and SM SL stay the same, so that what a program sets
        on it (python-rdma's tools set ``sa_path.SMKey``) is kept.  A port
        that knows no SM (SM LID 0) gets a path with DLID 0, as in
        python-rdma; an SA query through it raises :class:`RDMAError`."""
        from rdma import umad
        key = (self.lid, self.sm_lid, self.sm_sl)
        cached: Optional[Tuple[Tuple[int, int, int], SAPath]] = \
            self.__dict__.get("_cached_sa_path")
        if cached is not None and cached[0] == key:
            return cached[1]
        path = umad.sa_path(self, require_sm=False)
        self.__dict__["_cached_sa_path"] = (key, path)
        return path

    def pkey_index(self, pkey: int) -> int:
        """The index of *pkey* in the port's P_Key table.

        :raises ValueError: if the table does not hold it."""
        return self.pkeys.index(pkey)

    # -- identity

    def __str__(self) -> str:
        return f"{self.parent.name}/{self.port_id}"

    def __repr__(self) -> str:
        return f"<rdma.devices.EndPort {self}>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, EndPort) and other.port_id == self.port_id
                and other.parent == self.parent)

    def __hash__(self) -> int:
        return hash((self.parent, self.port_id))

    def __reduce__(self) -> Tuple[Any, ...]:
        # A path pickled on one host names the port by device and number.
        return (_end_port_by_name, (str(self), self.parent.provider))


def _end_port_by_name(name: str,
                      provider: str) -> Union[EndPort, RemoteEndPort]:
    try:
        return get_end_port(name, provider=provider)
    except RDMAError:
        # unpickled where that device is not (a path or a MADError sent by
        # another process or host): the name, not an open port
        return RemoteEndPort(name, provider)


class RemoteEndPort:
    """An end port named in a pickle that this process has no device for
    (a path or an exception from another process or host).  It keeps the
    name and provider, prints as the port it names, pickles back to it,
    and has no attributes of a local port."""

    def __init__(self, name: str, provider: str):
        #: The port as ``device/port``.
        self.name = name
        #: The provider of its device.
        self.provider = provider

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<rdma.devices.RemoteEndPort {self.name} (not on this host)>"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_end_port_by_name, (self.name, self.provider))


# -- devices ------------------------------------------------------------------

class Device:
    """An RDMA device: ``name``, ``node_guid``, ``provider``, ``end_ports``
    and python-rdma's other device attributes.

    ``provider`` is ``"verbs"`` (libibverbs; the device may also have
    umad), ``"umad"`` (only libibumad reports it: no verbs) or ``"ucx"``
    (the software fabric).
    """

    #: The device name (``rxe0``).
    name: str = ""

    def __init__(self, name: str, node_guid: int, node_type: int,
                 transport_type: int, provider: str,
                 umad: Optional[Mapping[str, Any]] = None):
        #: The device name.
        self.name = name
        #: The node GUID.
        self.node_guid = GUID(node_guid)
        #: The node type (``rdma.IBA.NODE_*``: 1 CA, 2 switch, 3 router).
        self.node_type = node_type
        #: The transport (``IBV_TRANSPORT_*``).
        self.transport_type = transport_type
        #: The provider that serves its verbs (``verbs``, ``ucx``), or
        #: ``umad`` for a device without verbs.
        self.provider = provider
        self._umad = umad
        self._end_ports: Optional[DemandList[EndPort]] = None
        self._attr: Optional[_ibverbs.device_attr] = None
        # the process that read it: on the software fabric every process
        # is its own node (its GUID, GIDs and LID), so a child after fork()
        # must not go on with what its parent read
        self._pid = os.getpid()

    # -- what it can do

    @property
    def has_verbs(self) -> bool:
        """True if :func:`rdma.get_verbs` can open the device."""
        return self.provider != UMAD

    @property
    def has_umad(self) -> bool:
        """True if libibumad reports the device (:func:`rdma.get_umad`
        works on its ports)."""
        return self._umad is not None

    # -- attributes

    @property
    def node_type_name(self) -> str:
        return _NODE_TYPES.get(self.node_type, f"unknown ({self.node_type})")

    @property
    def transport_name(self) -> str:
        return _TRANSPORTS.get(self.transport_type,
                               f"unknown ({self.transport_type})")

    def _sys(self, name: str) -> Optional[str]:
        if self.provider == SOFTWARE:
            return None
        return _sysfs(f"{SYS_INFINIBAND}{self.name}/{name}")

    @property
    def attr(self) -> _ibverbs.device_attr:
        """The :class:`rdma.ibverbs.device_attr` snapshot (for a umad-only
        device, made from what libibumad reports)."""
        if self._attr is None:
            self._load()
        assert self._attr is not None       # (_load() sets it or raises)
        return self._attr

    @property
    def fw_ver(self) -> Optional[str]:
        """The firmware version string (None if the device has none)."""
        v = self._sys("fw_ver")
        if v is None:
            v = (self._umad or {}).get("fw_ver") if not self.has_verbs \
                else self.attr.fw_ver
        return v or None

    @property
    def sys_image_guid(self) -> GUID:
        """The system image GUID."""
        if not self.has_verbs:
            return GUID((self._umad or {})["system_guid"])
        return GUID(self.attr.sys_image_guid)

    #: The name ``rdma.umad.UMADDevice`` had for :attr:`sys_image_guid`.
    system_guid = sys_image_guid

    @property
    def hw_ver(self) -> str:
        """The hardware version string."""
        v = self._sys("hw_rev")
        if v is None:
            v = str((self._umad or {}).get("hw_ver", "")) \
                if not self.has_verbs else f"0x{self.attr.hw_ver:x}"
        return v

    @property
    def hca_type(self) -> str:
        """The HCA type string."""
        v = self._sys("hca_type")
        if v is None:
            v = str((self._umad or {}).get("ca_type", "")) or self.name
        return v

    @property
    def board_id(self) -> str:
        """The board ID string (the HCA type where there is none)."""
        v = self._sys("board_id")
        return v if v is not None else self.hca_type

    @property
    def node_desc(self) -> Optional[str]:
        """The node description (the kernel's; None where the device has
        no sysfs entry, such as a simulated CA)."""
        return self._sys("node_desc")

    @property
    def phys_port_cnt(self) -> int:
        """The number of physical ports."""
        return len(self.end_ports)

    def open(self, end_port: Optional[EndPort] = None) -> "_ibverbs.Context":
        """Open the device: a new :class:`rdma.ibverbs.Context`.

        :raises rdma.RDMAError: if the device has no verbs (umad only)."""
        if not self.has_verbs:
            raise RDMAError(f"{self.name} has no verbs device: libibumad "
                            f"reports it, libibverbs does not (a simulated "
                            f"CA, or ib_uverbs is not loaded); only "
                            f"rdma.get_umad() works on it")
        if self.provider == "ucx" and self._pid != os.getpid():
            self._reread()
        return _ibverbs.Context(self.name, provider=self.provider,
                                end_port=end_port)

    def _reread(self) -> None:
        """Read the node again in this process (a child after fork() of a
        process that read it), keeping the objects users hold."""
        self._pid = os.getpid()
        with _ibverbs.Context(self.name, provider=self.provider) as ctx:
            attr = self._attr = ctx.query_device()
            self.node_guid = GUID(attr.node_guid)
            if self._end_ports is not None:
                for p in self._end_ports:
                    p._load(ctx)

    def _load(self) -> None:
        if not self.has_verbs:
            from rdma import ibverbs as ibv
            info = self._umad
            assert info is not None     # (a device without verbs has umad)
            self._attr = ibv.device_attr(
                fw_ver=str(info.get("fw_ver") or ""),
                node_guid=int(self.node_guid),
                sys_image_guid=int(info["system_guid"]),
                phys_port_cnt=len(info["ports"]))
            ports = {p["port_id"]: EndPort(self, p["port_id"], p)
                     for p in info["ports"]}
        else:
            umad_ports = {p["port_id"]: p
                          for p in (self._umad or {}).get("ports", ())}
            with self.open() as ctx:
                attr = self._attr = ctx.query_device()
                first = 0 if self.node_type == 2 else 1
                ports = {}
                for n in range(first, first + attr.phys_port_cnt):
                    p = EndPort(self, n, umad_ports.get(n))
                    p._load(ctx)
                    ports[n] = p
        self._end_ports = DemandList(ports, ports.__getitem__,
                                     guid_attr="port_guid")

    @property
    def end_ports(self) -> DemandList[EndPort]:
        """The device's end ports, a :class:`DemandList` indexed by port
        number (``dev.end_ports[1]``; ``dev.end_ports.first()``)."""
        if self._end_ports is None:
            self._load()
        assert self._end_ports is not None      # (_load() sets it)
        return self._end_ports

    def __iter__(self) -> Iterator[EndPort]:
        return iter(self.end_ports)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<rdma.devices.Device {self.name} ({self.provider})>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Device) and other.name == self.name
                and other.provider == self.provider)

    def __hash__(self) -> int:
        return hash((self.name, self.provider))


#: python-rdma's name of :class:`Device`.
RDMADevice = Device


# -- listing ------------------------------------------------------------------

def select_providers(provider: Optional[str] = None) -> List[str]:
    """Return the providers to look at, in order.

    ``provider`` (or ``$RDMA_PROVIDER`` when it is None) is a provider name
    or ``"auto"``: verbs devices, then devices only libibumad reports
    (``"umad"``), then the software fabric.
    """
    name = provider if provider is not None else \
        os.environ.get(PROVIDER_ENV, "")
    if not isinstance(name, str):
        raise TypeError(f"provider must be a str, not "
                        f"{type(name).__name__}")
    name = name.strip() or "auto"
    built = list(_ibverbs._providers())
    order = [p for p in built if p != SOFTWARE] + [UMAD] + \
        [p for p in built if p == SOFTWARE]
    if name == "auto":
        return order
    if name not in order:
        raise ValueError(f"unknown RDMA provider {name!r} "
                         f"(this build has: {', '.join(order)}, auto)")
    return [name]


def _umad_info(name: str) -> Mapping[str, Any]:
    """libibumad's description of CA *name* (``_umad.get_ca``)."""
    from rdma import _umad
    return _umad.get_ca(name)


def _umad_infos() -> List[Mapping[str, Any]]:
    """Every CA libibumad reports.  A name it makes up when the kernel has
    no umad (it names a default CA) is dropped.

    :raises rdma.SysError: if libibumad is not installed."""
    from rdma import _umad
    infos: List[Mapping[str, Any]] = []
    for name in _umad.get_ca_names():
        try:
            infos.append(_umad.get_ca(name))
        except SysError as e:
            if e.errno not in (errno.ENOENT, errno.ENODEV):
                raise
    return infos


def _umad_device(info: Mapping[str, Any]) -> Device:
    return Device(info["name"], info["node_guid"], info["node_type"],
                  0, UMAD, umad=info)


def _list(scan: List[str], strict: Optional[str]
          ) -> Tuple[List[Device], List[Tuple[str, SysError]]]:
    """The devices of the sources in *scan*, umad merged into verbs.  A
    source whose library is missing is skipped (its error returned), unless
    it is *strict*."""
    devices: List[Device] = []
    errors: List[Tuple[str, SysError]] = []
    for name in scan:
        try:
            if name == UMAD:
                infos = _umad_infos()
            else:
                found = _ibverbs._list_devices(name)
        except SysError as e:
            if name == strict:
                raise
            errors.append((name, e))
            continue
        if name != UMAD:
            devices.extend(Device(n, g, t, tr, name)
                           for n, g, t, tr in found)
            continue
        for info in infos:
            # A device with verbs and umad is one device (same kernel
            # name; the node GUID confirms it where the name differs).
            twin = next((d for d in devices if d.provider != SOFTWARE and (
                d.name == info["name"] or
                (info["node_guid"] and d.node_guid == info["node_guid"]))),
                None)
            if twin is not None:
                twin._umad = info
            else:
                devices.append(_umad_device(info))
    return devices, errors


def get_devices(provider: Union[str, bool, None] = None,
                refresh: bool = False) -> DemandList[Device]:
    """Return the RDMA devices of the machine, a :class:`DemandList`
    (iterate it, ``devices["rxe0"]``, ``devices[GUID(...)]`` by node GUID,
    ``devices.first()``).

    Verbs devices come first, then CAs that only libibumad reports (the
    ibsim shim's simulated CA), then the software fabric.  A device with
    both verbs and umad is one device.

    ``provider``: ``"verbs"``, ``"umad"``, ``"ucx"`` or ``"auto"``
    (default: ``$RDMA_PROVIDER``, else auto).  ``"verbs"`` lists verbs
    devices only (with their umad side when they have one), ``"umad"``
    every device libibumad reports.  In auto mode a source whose library
    is missing is skipped; naming it explicitly raises
    :class:`rdma.SysError` that names the missing package.  The list is
    read afresh at every call; *refresh* (python-rdma's argument, also
    accepted first as a bool) is accepted for compatibility.
    """
    if isinstance(provider, bool):
        provider = None                # python-rdma: get_devices(refresh)
    names = select_providers(provider)
    strict = names[0] if len(names) == 1 else None
    scan = list(names)
    # verbs and umad are read together so that the two sides of a device
    # meet; the one not asked for only completes the other.
    built = _ibverbs._providers()
    if "verbs" in scan and UMAD not in scan:
        scan.insert(scan.index("verbs") + 1, UMAD)
    elif UMAD in scan and "verbs" not in scan and "verbs" in built:
        scan.insert(scan.index(UMAD), "verbs")
    # The software fabric comes last: when other devices are found in auto
    # mode, it is listed (and its node brought up) only when reached.
    lazy = SOFTWARE in scan and len(names) > 1
    devices, errors = _list([n for n in scan if not (lazy and n == SOFTWARE)],
                            strict)
    devices = [d for d in devices if d.provider in names or
               (UMAD in names and d.has_umad)]
    more = None
    if lazy and devices:
        def more() -> List[Tuple[str, Device]]:
            found, _ = _list([SOFTWARE], None)
            return [(d.name, d) for d in found]
    elif lazy:
        found, errs = _list([SOFTWARE], None)
        devices += found
        errors += errs
    failed = [e for n, e in errors if n in names]
    if not devices and failed and len(failed) == len(names):
        raise failed[0]
    by_name: Dict[str, Device] = {}
    for d in devices:
        by_name.setdefault(d.name, d)    # a name twice: the first wins
    return DemandList(list(by_name), by_name.__getitem__,
                      guid_attr="node_guid", positional=True, more=more)


def _describe(devices: Iterable[Device]) -> str:
    ports = [p for d in devices for p in d.end_ports]
    if not ports:
        return "no RDMA ports"
    return ", ".join(
        f"{p} ({'ACTIVE' if p.state == _ACTIVE else f'state {p.state}'})"
        for p in ports)


def _no_devices(provider: Optional[str]) -> RDMAError:
    return RDMAError("no RDMA devices found (providers: "
                     f"{', '.join(select_providers(provider))}); without "
                     "RDMA hardware use the software fabric "
                     "(RDMA_PROVIDER=ucx, needs libucx0) or the Soft-RoCE "
                     "VM (python -m rdma.testvm)")


def _default_port(devices: DemandList[Device]) -> EndPort:
    """No name given: an ACTIVE port of a real or simulated device; if such
    devices exist but none is ACTIVE, the first of their ports whose link
    is up, else their first port (python-rdma's default); without them, an
    ACTIVE port of the software fabric."""
    # The devices listed so far are the real and simulated ones (the
    # software fabric is appended when the list is looked at further).
    hw = [d for d in (devices[k] for k in devices._okeys)
          if d.provider != SOFTWARE]
    for d in hw:
        for p in d.end_ports:
            if p.state == _ACTIVE:
                return p
    for d in hw:
        for p in d.end_ports:
            if p.phys_state == _LINK_UP:
                return p
    for d in hw:
        if len(d.end_ports):
            return d.end_ports.first()
    for d in devices:
        for p in d.end_ports:
            if p.state == _ACTIVE:
                return p
    raise RDMAError(f"no ACTIVE RDMA port: {_describe(devices)}")


def find_port_gid(devices: Iterable[Device], gid: GID) -> Tuple[EndPort, int]:
    """The end port of *devices* that has *gid*, and the GID's index.

    A link-local GID (``fe80::``) is matched by its port GUID.

    :raises rdma.RDMAError: if no end port has it."""
    if gid.prefix == GID_DEFAULT_PREFIX and gid.guid:
        for d in devices:
            for p in d.end_ports:
                if p.port_guid == gid.guid:
                    return p, (p.gids.index(gid) if gid in p.gids else 0)
    if gid.guid:
        for d in devices:
            for p in d.end_ports:
                if gid in p.gids:
                    return p, p.gids.index(gid)
    raise RDMAError(f"no RDMA end port has GID {gid}")


def find_port_guid(devices: Iterable[Device], guid: GUID) -> EndPort:
    """The end port of *devices* whose port GUID is *guid*.

    :raises rdma.RDMAError: if there is none."""
    if guid:
        for d in devices:
            for p in d.end_ports:
                if p.port_guid == guid:
                    return p
    raise RDMAError(f"no RDMA end port has port GUID {GUID(guid)}")


def find_node_guid(devices: Iterable[Device], guid: GUID) -> Device:
    """The device of *devices* whose node GUID is *guid*.

    :raises rdma.RDMAError: if there is none."""
    if guid:
        for d in devices:
            if d.node_guid == guid:
                return d
    raise RDMAError(f"no RDMA device has node GUID {GUID(guid)}")


def find_port_name(devices: DemandList[Device], name: str) -> EndPort:
    """The end port ``"device"`` (its first port) or ``"device/port"``.

    :raises rdma.RDMAError: if there is no such device or port;
        :exc:`ValueError` for a malformed port number."""
    dev_name, sep, port = name.partition("/")
    d = devices.get(dev_name) if dev_name else None
    if not isinstance(d, Device):
        have = ", ".join(str(p) for d in devices for p in d.end_ports)
        raise RDMAError(f"no RDMA end port {name!r}; have: {have}")
    if not sep:
        if not len(d.end_ports):
            raise RDMAError(f"device {d.name} has no ports")
        return d.end_ports.first()
    try:
        port_id = int(port, 0)
    except ValueError:
        raise ValueError(f"invalid port number in {name!r}") from None
    p = d.end_ports.get(port_id)
    if p is None:
        have = ", ".join(str(p.port_id) for p in d.end_ports)
        raise RDMAError(f"device {d.name} has no port {port_id} "
                        f"(ports: {have})")
    return p


def _guid_text(name: str) -> Optional[GUID]:
    """A GUID written as ``0002:c903:0000:1491`` or ``0x...``, else None."""
    if ":" not in name and not name.lower().startswith("0x"):
        return None
    text = name[2:] if name.lower().startswith("0x") else name
    try:
        return GUID(text)
    except ValueError:
        return None


def get_end_port(name: Union[str, GID, GUID, None] = None,
                 provider: Optional[str] = None) -> EndPort:
    """Return an end port (python-rdma's ``rdma.get_end_port``).

    ``name`` is one of:

    ============  ==================================================
    ``None``      an ACTIVE port of a real or simulated device, else
                  (none of those) an ACTIVE port of the software
                  fabric; see :ref:`the default end port <default-end-port>`
    device        ``mlx5_0`` (its first port)
    device/port   ``mlx5_0/1``
    port GID      ``fe80::2:c903:0:1491`` or a :class:`rdma.IBA.GID`
    port GUID     ``0002:c903:0000:1491`` or a :class:`rdma.IBA.GUID`
                  (a node GUID gives that device's first port)
    ============  ==================================================

    :raises rdma.RDMAError: when nothing matches.
    """
    devices = get_devices(provider)
    if not devices:
        raise _no_devices(provider)
    if name is None:
        return _default_port(devices)
    if isinstance(name, GID):
        return find_port_gid(devices, name)[0]
    if isinstance(name, GUID):
        return _by_guid(devices, name)
    if not isinstance(name, str):
        raise TypeError(f"end port name must be a str, GID or GUID, not "
                        f"{type(name).__name__}")
    name = name.strip()
    if name.partition("/")[0] in devices._data:     # a listed device
        return find_port_name(devices, name)
    guid = _guid_text(name)
    if guid is not None and "::" not in name and \
            (name.count(":") == 3 or ":" not in name):
        return _by_guid(devices, guid)
    try:
        gid = GID(name)
    except ValueError:
        gid = None
    if gid is not None:
        return find_port_gid(devices, gid)[0]
    return find_port_name(devices, name)        # raises, listing the ports


def _by_guid(devices: DemandList[Device], guid: GUID) -> EndPort:
    try:
        return find_port_guid(devices, guid)
    except RDMAError:
        pass
    try:
        d = find_node_guid(devices, guid)
    except RDMAError:
        raise RDMAError(f"no RDMA end port has port or node GUID "
                        f"{GUID(guid)}") from None
    return d.end_ports.first()


def get_device(name: Union[str, GUID, None] = None,
               provider: Optional[str] = None) -> Device:
    """Return a device (python-rdma's ``rdma.get_device``): the first one
    for ``None``, else by name or by node GUID (``0002:c903:0000:1491`` or
    a :class:`rdma.IBA.GUID`).

    :raises rdma.RDMAError: when nothing matches."""
    devices = get_devices(provider)
    if not devices:
        raise _no_devices(provider)
    if name is None:
        return devices.first()
    if isinstance(name, GUID):
        return find_node_guid(devices, name)
    if not isinstance(name, str):
        raise TypeError(f"device name must be a str or GUID, not "
                        f"{type(name).__name__}")
    d = devices.get(name)
    if isinstance(d, Device):
        return d
    guid = _guid_text(name)
    if guid is not None:
        return find_node_guid(devices, guid)
    raise RDMAError(f"RDMA device {name!r} not found; have: "
                    f"{', '.join(d.name for d in devices)}")


def get_verbs(port: Union[EndPort, Device, str, None] = None,
              provider: Optional[str] = None) -> "_ibverbs.Context":
    """Open a verbs :class:`rdma.ibverbs.Context` for an end port or device.

    ``port`` may also be a name accepted by :func:`get_end_port`, or None
    for the default end port.  The context is a context manager.

    :raises rdma.RDMAError: if the device has no verbs (a simulated CA).
    """
    if port is None or isinstance(port, (str, GID, GUID)):
        port = get_end_port(port, provider=provider)
    if isinstance(port, Device):
        return port.open(port.end_ports.first() if len(port.end_ports)
                         else None)
    if isinstance(port, EndPort):
        return port.parent.open(port)
    raise TypeError(f"get_verbs() needs an EndPort or Device, not "
                    f"{type(port).__name__}")
