"""RDMA devices and their end ports, found through the providers.

A *device* is an RDMA adapter (``rxe0``, ``mlx5_0``, the software fabric's
device); an *end port* is one of its ports (``rxe0/1``).  Both are plain
snapshots taken when the device list is read; ``EndPort.refresh()`` reads a
port again.
"""
from __future__ import annotations

import os
from typing import Iterator, List, Optional, Union

from rdma import _ibverbs
from rdma._errors import RDMAError, SysError
from rdma.IBA import GID, GUID

__all__ = ["Device", "EndPort", "get_devices", "get_end_port", "get_verbs",
           "PROVIDER_ENV", "select_providers"]

#: Environment variable that forces a provider: ``verbs``, ``ucx`` or ``auto``.
PROVIDER_ENV = "RDMA_PROVIDER"

_NODE_TYPES = {1: "CA", 2: "switch", 3: "router", 4: "RNIC", 5: "usNIC",
               6: "usNIC UDP", 7: "unspecified"}
_TRANSPORTS = {0: "InfiniBand", 1: "iWARP", 2: "usNIC", 3: "usNIC UDP",
               4: "unspecified"}


def select_providers(provider: Optional[str] = None) -> List[str]:
    """Return the providers to look at, in order.

    ``provider`` (or ``$RDMA_PROVIDER`` when it is None) is a provider name
    or ``"auto"``: every provider compiled in, verbs devices first.
    """
    name = provider if provider is not None else os.environ.get(PROVIDER_ENV, "")
    name = name.strip() or "auto"
    built = list(_ibverbs._providers())
    if name == "auto":
        return built
    if name not in built:
        raise ValueError(f"unknown RDMA provider {name!r} "
                         f"(this build has: {', '.join(built)}, auto)")
    return [name]


class EndPort:
    """One port of a device: ``parent``, ``port_id`` and what the port
    reported when it was read (``lid``, ``gids``, ``state``...)."""

    def __init__(self, parent: "Device", port_id: int):
        #: The :class:`Device` this port belongs to.
        self.parent = parent
        #: The port number (1-based).
        self.port_id = port_id
        self._attr = None
        #: The GID table, index for index (empty slots are zero GIDs).
        self.gids: List[GID] = []
        #: The type of each GID (``rdma.IBA.GID_TYPE_*``), same indexes.
        self.gid_types: List[int] = []
        #: The P_Key table.
        self.pkeys: List[int] = []

    def _load(self, ctx: "_ibverbs.Context") -> None:
        self._attr = ctx.query_port(self.port_id)
        gids, types = [], []
        for i in range(self._attr.gid_tbl_len):
            e = ctx.query_gid_ex(self.port_id, i)
            gids.append(e.gid)
            types.append(e.gid_type)
        self.gids, self.gid_types = gids, types
        pkeys = []
        for i in range(self._attr.pkey_tbl_len):
            try:
                pkeys.append(ctx.query_pkey(self.port_id, i))
            except SysError:
                break
        self.pkeys = pkeys

    def refresh(self) -> "EndPort":
        """Read the port's attributes and tables again; return self."""
        with self.parent.open() as ctx:
            self._load(ctx)
        return self

    @property
    def attr(self):
        """The port's :class:`rdma.ibverbs.port_attr` snapshot."""
        if self._attr is None:
            self.refresh()
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
    def sa_path(self):
        """How to reach this port's subnet administrator (SM LID, SL,
        P_Key, QP1 Q_Key): an :class:`rdma.umad.SAPath`."""
        from rdma import umad
        return umad.sa_path(self)

    @property
    def subnet_timeout(self) -> int:
        """The subnet timeout encoding of the port (4.096 us * 2**t)."""
        return self.attr.subnet_timeout

    @property
    def sm_sl(self) -> int:
        """The SL to reach the subnet manager."""
        return self.attr.sm_sl

    @property
    def state(self) -> int:
        """The logical port state (``IBV_PORT_*``)."""
        return self.attr.state

    @property
    def link_layer(self) -> str:
        """``"InfiniBand"`` or ``"Ethernet"``."""
        return "Ethernet" if self.attr.link_layer == 2 else "InfiniBand"

    @property
    def default_gid(self) -> GID:
        """GID index 0 of the port."""
        if self._attr is None:
            self.refresh()
        return self.gids[0] if self.gids else GID(0)

    @property
    def port_guid(self) -> GUID:
        """The port GUID (the lower half of the default GID)."""
        return GUID(self.default_gid.guid)

    @property
    def provider(self) -> str:
        return self.parent.provider

    def __str__(self) -> str:
        return f"{self.parent.name}/{self.port_id}"

    def __repr__(self) -> str:
        return f"<rdma.devices.EndPort {self}>"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, EndPort) and other.port_id == self.port_id
                and other.parent == self.parent)

    def __hash__(self) -> int:
        return hash((self.parent, self.port_id))

    def __reduce__(self):
        # A path pickled on one host names the port by device and number.
        return (_end_port_by_name, (str(self), self.parent.provider))


def _end_port_by_name(name: str, provider: str) -> EndPort:
    return get_end_port(name, provider=provider)


class Device:
    """An RDMA device: ``name``, ``node_guid``, ``provider`` and
    ``end_ports``."""

    def __init__(self, name: str, node_guid: int, node_type: int,
                 transport_type: int, provider: str):
        #: The device name (``rxe0``).
        self.name = name
        #: The node GUID.
        self.node_guid = GUID(node_guid)
        #: The node type (``IBV_NODE_*``).
        self.node_type = node_type
        #: The transport (``IBV_TRANSPORT_*``).
        self.transport_type = transport_type
        #: The provider that serves it (``verbs`` or ``ucx``).
        self.provider = provider
        self._end_ports: Optional[List[EndPort]] = None
        self._attr = None

    @property
    def node_type_name(self) -> str:
        return _NODE_TYPES.get(self.node_type, f"unknown ({self.node_type})")

    @property
    def transport_name(self) -> str:
        return _TRANSPORTS.get(self.transport_type,
                               f"unknown ({self.transport_type})")

    def open(self, end_port: Optional[EndPort] = None) -> "_ibverbs.Context":
        """Open the device: a new :class:`rdma.ibverbs.Context`."""
        return _ibverbs.Context(self.name, provider=self.provider,
                                end_port=end_port)

    def _load(self) -> None:
        with self.open() as ctx:
            self._attr = ctx.query_device()
            ports = [EndPort(self, i + 1)
                     for i in range(self._attr.phys_port_cnt)]
            for p in ports:
                p._load(ctx)
        self._end_ports = ports

    @property
    def attr(self):
        """The :class:`rdma.ibverbs.device_attr` snapshot."""
        if self._attr is None:
            self._load()
        return self._attr

    @property
    def end_ports(self) -> List[EndPort]:
        """The device's ports, port 1 first."""
        if self._end_ports is None:
            self._load()
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


def get_devices(provider: Optional[str] = None) -> List[Device]:
    """Return the RDMA devices of the selected providers.

    ``provider``: a provider name or ``"auto"`` (default: ``$RDMA_PROVIDER``,
    else auto).  In auto mode a provider whose library is missing is
    skipped; naming it explicitly raises :class:`rdma.SysError` that names
    the missing package.
    """
    names = select_providers(provider)
    devices: List[Device] = []
    errors: List[SysError] = []
    for name in names:
        try:
            found = _ibverbs._list_devices(name)
        except SysError as e:
            if len(names) == 1:
                raise
            errors.append(e)
            continue
        devices.extend(Device(n, g, t, tr, name) for n, g, t, tr in found)
        if devices and len(names) > 1:
            break           # auto: the first provider that has devices
    if not devices and errors and len(errors) == len(names):
        raise errors[0]
    return devices


def _describe(devices: List[Device]) -> str:
    if not devices:
        return "no RDMA devices"
    return ", ".join(f"{p} ({'ACTIVE' if p.state == 4 else 'state ' + str(p.state)})"
                     for d in devices for p in d.end_ports)


def get_end_port(name: Union[str, GID, None] = None,
                 provider: Optional[str] = None) -> EndPort:
    """Return an end port.

    ``name`` is ``None`` (the first ACTIVE port), a device name (its first
    port), ``"device/port"``, a GID of the port, or its port GUID.
    Raises :class:`rdma.RDMAError` when nothing matches.
    """
    devices = get_devices(provider)
    if not devices:
        raise RDMAError("no RDMA devices found (providers: "
                        f"{', '.join(select_providers(provider))}); without "
                        "RDMA hardware use the software fabric "
                        "(RDMA_PROVIDER=ucx, needs libucx0) or the Soft-RoCE "
                        "VM (python -m rdma.testvm)")
    if name is None:
        for d in devices:
            for p in d.end_ports:
                if p.state == _ibverbs.IBV_PORT_ACTIVE:
                    return p
        raise RDMAError(f"no ACTIVE RDMA port: {_describe(devices)}")
    if isinstance(name, GID):
        return _by_gid(devices, name)
    if not isinstance(name, str):
        raise TypeError(f"end port name must be a str or GID, not "
                        f"{type(name).__name__}")
    dev_name, sep, port = name.partition("/")
    for d in devices:
        if d.name != dev_name:
            continue
        if not sep:
            if not d.end_ports:
                raise RDMAError(f"device {d.name} has no ports")
            return d.end_ports[0]
        try:
            port_id = int(port, 0)
        except ValueError:
            raise ValueError(f"invalid port number in {name!r}") from None
        for p in d.end_ports:
            if p.port_id == port_id:
                return p
        raise RDMAError(f"device {d.name} has no port {port_id} "
                        f"(ports: {', '.join(str(p.port_id) for p in d.end_ports)})")
    # Not a device name: maybe a GID or a port GUID.
    try:
        return _by_gid(devices, GID(name))
    except ValueError:
        pass
    try:
        guid = GUID(name)
    except ValueError:
        guid = None
    if guid is not None and ":" in name:
        for d in devices:
            for p in d.end_ports:
                if p.port_guid == guid:
                    return p
    raise RDMAError(f"no RDMA end port {name!r}; have: "
                    f"{', '.join(str(p) for d in devices for p in d.end_ports)}")


def _by_gid(devices: List[Device], gid: GID) -> EndPort:
    for d in devices:
        for p in d.end_ports:
            if gid in p.gids:
                return p
    raise RDMAError(f"no RDMA end port has GID {gid}")


def get_verbs(port: Union[EndPort, Device, str, None] = None,
              provider: Optional[str] = None) -> "_ibverbs.Context":
    """Open a verbs :class:`rdma.ibverbs.Context` for an end port or device.

    ``port`` may also be a name accepted by :func:`get_end_port`, or None
    for the first active port.  The context is a context manager.
    """
    if port is None or isinstance(port, (str, GID)):
        port = get_end_port(port, provider=provider)
    if isinstance(port, Device):
        return port.open(port.end_ports[0] if port.end_ports else None)
    if isinstance(port, EndPort):
        return port.parent.open(port)
    raise TypeError(f"get_verbs() needs an EndPort or Device, not "
                    f"{type(port).__name__}")
