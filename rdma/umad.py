"""User MADs: :func:`get_umad` and the :class:`UMAD` transactor.

The ports here are found through libibumad itself (``umad_get_cas_names``,
``umad_get_ca``), not through verbs, so they also exist where only a umad
device is present (the ibsim shim, ``LD_PRELOAD=libumad2sim.so``).
:class:`UMAD` sends MADs, waits for the reply whose transaction ID matches
(the low 32 bits: the kernel owns the upper half), retries on timeout and
decodes SA replies; the SA RPCs have python-rdma's names
(:meth:`UMAD.SubnAdmGet`, :meth:`~UMAD.SubnAdmGetTable`,
:meth:`~UMAD.SubnAdmSet`, :meth:`~UMAD.SubnAdmDelete`).
"""
from __future__ import annotations

import errno
import random
import time
from typing import Any, List, Optional, Tuple, Type, Union

from rdma import _umad
from rdma._errors import RDMAError, SysError
from rdma._mad import (MAD_METHOD_DELETE,
                       MAD_METHOD_GET, MAD_METHOD_GET_RESP,
                       MAD_METHOD_GET_TABLE,
                       MAD_METHOD_RESPONSE, MAD_METHOD_SET,
                       MAD_SUBNET_ADMIN, SA_CLASS_VERSION, BinStruct,
                       MADFormatError, MADHeader, MADTimeoutError, SAError,
                       SAReply, decode_sa_reply, encode_sa_request)
from rdma.IBA import GID, GUID, IB_DEFAULT_QP1_QKEY

__all__ = ["UMAD", "UMADDevice", "UMADEndPort", "SAPath", "get_umad",
           "get_umad_devices", "get_end_port", "sa_path"]

#: Port states of umad_port.state (IBA PortState).
PORT_ACTIVE = 4


class SAPath:
    """Where the SA of a port is: the attributes of python-rdma's
    ``IBPath`` that a GMP to the SA needs (``DLID`` = SM LID, ``SL`` = SM
    SL, ``dqpn`` 1, ``qkey`` the QP1 Q_Key, P_Key index 0)."""

    def __init__(self, end_port: Any, DLID: int, SL: int = 0,
                 SLID: int = 0, pkey: int = 0xFFFF, pkey_index: int = 0):
        #: The local port the SA is reached from.
        self.end_port = end_port
        #: The SM's LID.
        self.DLID = DLID
        #: The local LID.
        self.SLID = SLID
        #: The SM's SL.
        self.SL = SL
        #: The GSI QP of the SA.
        self.dqpn = 1
        #: The well-known QP1 Q_Key.
        self.qkey = IB_DEFAULT_QP1_QKEY
        #: The default partition.
        self.pkey = pkey
        #: Index of ``pkey`` in the port's P_Key table.
        self.pkey_index = pkey_index
        #: No GRH to the SA on one subnet.
        self.has_grh = False

    def __repr__(self) -> str:
        return (f"SAPath(end_port={self.end_port}, DLID={self.DLID}, "
                f"SL={self.SL})")


def sa_path(end_port: Any) -> SAPath:
    """Return the :class:`SAPath` of any end port that has ``sm_lid``
    (a :class:`UMADEndPort` or a verbs :class:`rdma.EndPort`)."""
    sm_lid = getattr(end_port, "sm_lid", 0)
    if not sm_lid:
        raise RDMAError(f"{end_port} has no subnet manager (SM LID 0): "
                        f"is a subnet manager running?")
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


class UMADEndPort:
    """One port of a umad device, as libibumad reported it."""

    def __init__(self, parent: "UMADDevice", info: dict):
        #: The :class:`UMADDevice`.
        self.parent = parent
        #: The port number.
        self.port_id: int = info["port_id"]
        #: The base LID.
        self.lid: int = info["lid"]
        #: LID mask control.
        self.lmc: int = info["lmc"]
        #: The subnet manager's LID and SL.
        self.sm_lid: int = info["sm_lid"]
        self.sm_sl: int = info["sm_sl"]
        #: Logical port state (4 = ACTIVE) and physical state.
        self.state: int = info["state"]
        self.phys_state: int = info["phys_state"]
        #: The rate in Gb/s as the kernel reports it.
        self.rate: int = info["rate"]
        #: The capability mask.
        self.capmask: int = info["capmask"]
        #: The port GUID.
        self.port_guid = GUID(info["port_guid"])
        #: The GID prefix.
        self.gid_prefix: int = info["gid_prefix"]
        #: The P_Key table.
        self.pkeys: List[int] = list(info["pkeys"])
        #: ``IB`` or ``Ethernet``.
        self.link_layer: str = info["link_layer"]

    @property
    def default_gid(self) -> GID:
        """GID index 0: the GID prefix and the port GUID."""
        return GID.from_parts(self.gid_prefix, int(self.port_guid))

    @property
    def gids(self) -> List[GID]:
        """The GID table as far as umad knows it (index 0 only)."""
        return [self.default_gid]

    @property
    def sa_path(self) -> SAPath:
        """How to reach this port's SA."""
        return sa_path(self)

    def __str__(self) -> str:
        return f"{self.parent.name}/{self.port_id}"

    def __repr__(self) -> str:
        return f"<rdma.umad.UMADEndPort {self} lid={self.lid}>"


class UMADDevice:
    """A CA as libibumad sees it."""

    def __init__(self, info: dict):
        #: The CA name (``mlx5_0``, ``ibsim0``).
        self.name: str = info["name"]
        #: The node type (1 CA, 2 switch, 3 router).
        self.node_type: int = info["node_type"]
        #: The node GUID and system image GUID.
        self.node_guid = GUID(info["node_guid"])
        self.system_guid = GUID(info["system_guid"])
        #: The ports, lowest number first.
        self.end_ports = [UMADEndPort(self, p) for p in info["ports"]]

    def __iter__(self):
        return iter(self.end_ports)

    def __repr__(self) -> str:
        return f"<rdma.umad.UMADDevice {self.name}>"


def get_umad_devices() -> List[UMADDevice]:
    """Return the CAs libibumad sees (empty without umad support).

    Raises :class:`rdma.SysError` if libibumad is not installed.
    """
    devices = []
    for name in _umad.get_ca_names():
        try:
            devices.append(UMADDevice(_umad.get_ca(name)))
        except SysError as e:
            # libibumad names a default CA when the kernel has no umad.
            if e.errno not in (errno.ENOENT, errno.ENODEV):
                raise
    return devices


def get_end_port(name: Union[str, GID, None] = None) -> UMADEndPort:
    """Return a umad end port: the first ACTIVE one for ``None``, else a
    CA name, ``"ca/port"``, a port GID or a port GUID."""
    devices = get_umad_devices()
    if not devices:
        raise RDMAError("no umad devices (no InfiniBand port, or the ibsim "
                        "shim is not preloaded)")
    ports = [p for d in devices for p in d.end_ports]
    if name is None:
        for p in ports:
            if p.state == PORT_ACTIVE:
                return p
        raise RDMAError("no ACTIVE umad port: " + ", ".join(
            f"{p} (state {p.state})" for p in ports))
    if isinstance(name, str):
        ca, sep, num = name.partition("/")
        for d in devices:
            if d.name == ca:
                if not sep:
                    return d.end_ports[0]
                for p in d.end_ports:
                    if str(p.port_id) == num.strip():
                        return p
                raise RDMAError(f"umad device {ca} has no port {num}")
        try:
            name = GID(name)
        except ValueError:
            try:
                guid = GUID(name)
            except ValueError:
                guid = None
            for p in ports:
                if guid is not None and p.port_guid == guid:
                    return p
            raise RDMAError(f"no umad end port {name!r}; have: "
                            + ", ".join(str(p) for p in ports)) from None
    for p in ports:
        if p.default_gid == name:
            return p
    raise RDMAError(f"no umad end port has GID {name}")


def _resolve_port(end_port: Any) -> Tuple[str, int, Any]:
    if end_port is None or isinstance(end_port, (str, GID)):
        end_port = get_end_port(end_port)
    if isinstance(end_port, UMADEndPort):
        return end_port.parent.name, end_port.port_id, end_port
    parent = getattr(end_port, "parent", None)
    port_id = getattr(end_port, "port_id", None)
    if parent is None or port_id is None:
        raise TypeError(f"get_umad() needs an end port, not "
                        f"{type(end_port).__name__}")
    # A verbs EndPort: the umad device has the same name as the verbs one.
    name = getattr(parent, "name", str(parent))
    for d in get_umad_devices():
        if d.name == name:
            for p in d.end_ports:
                if p.port_id == port_id:
                    return name, port_id, end_port
    raise RDMAError(f"{name}/{port_id} has no umad device (is ib_umad "
                    f"loaded?)")


class UMAD:
    """A umad port with MAD transactions on top; a context manager.

    ``timeout_ms`` and ``retries`` are the defaults of every transaction:
    a request is sent up to ``retries + 1`` times and each wait lasts
    ``timeout_ms``, so a dead SA is reported after about
    ``timeout_ms * (retries + 1)`` as :class:`rdma.IBA.MADTimeoutError`.
    """

    #: Default wait for one reply, in milliseconds.
    timeout_ms = 1000
    #: Default number of re-sends after a timeout.
    retries = 2

    def __init__(self, end_port: Any = None, *, timeout_ms: Optional[int] = None,
                 retries: Optional[int] = None):
        ca, port_id, ep = _resolve_port(end_port)
        #: The end port this umad is open on.
        self.end_port = ep
        self._port = _umad.Port(ca, port_id)
        self._agents: dict = {}
        self._tid = random.getrandbits(32)
        self._sa_path: Optional[SAPath] = None
        if timeout_ms is not None:
            self.timeout_ms = timeout_ms
        if retries is not None:
            self.retries = retries
        #: Replies that matched no outstanding request (dropped).
        self.unmatched = 0

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

    # -- agents and raw MADs

    def register(self, mgmt_class: int, mgmt_version: int,
                 rmpp: bool = False, methods: Optional[List[int]] = None
                 ) -> int:
        """Register (once) an agent for a class; return its agent id.

        ``rmpp`` makes the kernel run RMPP for it (large SA replies arrive
        reassembled); ``methods`` lists the request methods to receive.
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
        return agent

    def next_tid(self) -> int:
        """Return a new transaction ID (32 bits; the kernel adds the
        upper half)."""
        self._tid = (self._tid + 1) & 0xFFFFFFFF
        return self._tid

    def sendto(self, agent: int, mad: bytes, path: Any,
               timeout_ms: int = 0) -> None:
        """Send one MAD along ``path`` (``DLID``, ``dqpn``, ``SL``,
        ``qkey``, ``pkey_index``; a GRH when ``has_grh`` is set)."""
        grh = None
        if getattr(path, "has_grh", False):
            grh = (bytes(GID(path.DGID)), getattr(path, "sgid_index", 0),
                   getattr(path, "hop_limit", 0xFF) or 0xFF,
                   getattr(path, "traffic_class", 0),
                   getattr(path, "flow_label", 0))
        self._port.send(agent, mad, dlid=path.DLID,
                        dqpn=getattr(path, "dqpn", 1),
                        sl=getattr(path, "SL", 0),
                        qkey=getattr(path, "qkey", IB_DEFAULT_QP1_QKEY),
                        pkey_index=getattr(path, "pkey_index", 0),
                        timeout_ms=timeout_ms, retries=0, grh=grh)

    def recvfrom(self, timeout_ms: int = -1
                 ) -> Optional[Tuple[bytes, int, tuple, int]]:
        """Wait for one MAD; return ``(mad, status, addr, agent_id)`` or
        None after ``timeout_ms`` (-1: forever).  Ctrl-C interrupts."""
        r = self._port.recv(timeout_ms)
        if r is None:
            return None
        agent, status, mad, addr = r
        return mad, status, addr, agent

    def transact(self, agent: int, mad: bytes, path: Any,
                 timeout_ms: Optional[int] = None,
                 retries: Optional[int] = None) -> bytes:
        """Send a request and return the reply with the same transaction ID
        (low 32 bits) and class; re-send up to ``retries`` times.

        Raises :class:`rdma.IBA.MADTimeoutError` when nothing matched.
        """
        timeout = self.timeout_ms if timeout_ms is None else timeout_ms
        tries = 1 + (self.retries if retries is None else retries)
        req = MADHeader.unpack(mad)
        tid = req.transactionID & 0xFFFFFFFF
        last_status = 0
        for _ in range(tries):
            self.sendto(agent, mad, path, timeout_ms=timeout)
            # The kernel reports its own timeout as a send status; the
            # deadline covers transports that do not (the ibsim shim).
            deadline = time.monotonic() + timeout * 1.25 / 1000
            while True:
                left = int((deadline - time.monotonic()) * 1000)
                if left <= 0:
                    break
                got = self.recvfrom(left)
                if got is None:
                    break
                data, status, _addr, _agent = got
                if len(data) < 24:
                    self.unmatched += 1
                    continue
                rep = MADHeader.unpack(data)
                if (rep.transactionID & 0xFFFFFFFF) != tid:
                    self.unmatched += 1
                    continue
                if status:
                    # The kernel (or the shim) gave our request back: it
                    # timed out (ETIMEDOUT) or could not be sent.
                    last_status = status
                    break
                if (rep.mgmtClass != req.mgmtClass
                        or not rep.method & MAD_METHOD_RESPONSE):
                    self.unmatched += 1
                    continue
                return data
        if last_status and last_status != errno.ETIMEDOUT:
            raise SysError(last_status, "umad_send",
                           f"{_describe(req)} to LID {path.DLID} failed")
        raise MADTimeoutError(
            f"no reply to {_describe(req)} from LID {path.DLID} after "
            f"{tries} tries (timeout {timeout} ms each)", request=req)

    # -- the SA

    @property
    def sa_path(self) -> SAPath:
        """The path to the SA of this port (read when first needed)."""
        if self._sa_path is None:
            ep = self.end_port
            if isinstance(ep, UMADEndPort):
                # Read the port again: the SM may have come up since.
                ep = get_end_port(str(ep))
                self.end_port = ep
            self._sa_path = sa_path(ep)
        return self._sa_path

    def sa_rpc(self, method: int, payload: Union[BinStruct, Type[BinStruct]],
               path: Any = None, attributeModifier: int = 0,
               comp_mask: Optional[int] = None, timeout_ms: Optional[int] = None,
               retries: Optional[int] = None) -> SAReply:
        """Run one SA RPC and return the decoded :class:`SAReply`.

        Raises :class:`rdma.IBA.SAError` (status decoded) when the SA
        answers with an error, :class:`~rdma.IBA.MADTimeoutError`,
        :class:`~rdma.IBA.MADFormatError` for a malformed reply.
        """
        if isinstance(payload, type):
            payload = payload()
        path = self.sa_path if path is None else path
        agent = self.register(MAD_SUBNET_ADMIN, SA_CLASS_VERSION, rmpp=True)
        tid = self.next_tid()
        mad = encode_sa_request(method, payload, tid, comp_mask,
                                attribute_modifier=attributeModifier)
        data = self.transact(agent, mad, path, timeout_ms, retries)
        rep = decode_sa_reply(data, type(payload))
        m = rep.header
        if m.status:
            req = MADHeader.unpack(mad)
            words = ", ".join(SAError("", m.status).words)
            raise SAError(f"SA {_describe(req)}: status {m.status:#06x} "
                          f"({words})", m.status, req, data)
        # IBA 15.4: a Set is answered by a GetResp.
        expect = (MAD_METHOD_GET_RESP if method == MAD_METHOD_SET
                  else method | MAD_METHOD_RESPONSE)
        if m.method != expect:
            raise MADFormatError(f"SA replied with method {m.method:#x}, "
                                 f"expected {expect:#x}", reply=data)
        return rep

    def SubnAdmGet(self, payload: Union[BinStruct, Type[BinStruct]],
                   path: Any = None, attributeModifier: int = 0) -> BinStruct:
        """SubnAdmGet: return the one record matching ``payload``."""
        rep = self.sa_rpc(MAD_METHOD_GET, payload, path, attributeModifier)
        if not rep.records:
            raise MADFormatError("SubnAdmGetResp carries no record",
                                 reply=rep.data)
        return rep.records[0]

    def SubnAdmGetTable(self, payload: Union[BinStruct, Type[BinStruct]],
                        path: Any = None, attributeModifier: int = 0
                        ) -> List[BinStruct]:
        """SubnAdmGetTable: return every record matching ``payload``."""
        return self.sa_rpc(MAD_METHOD_GET_TABLE, payload, path,
                           attributeModifier).records

    def SubnAdmSet(self, payload: BinStruct, path: Any = None,
                   attributeModifier: int = 0) -> BinStruct:
        """SubnAdmSet: create/update a record; return the SA's copy."""
        rep = self.sa_rpc(MAD_METHOD_SET, payload, path, attributeModifier)
        if not rep.records:
            raise MADFormatError("SubnAdmSet reply carries no record",
                                 reply=rep.data)
        return rep.records[0]

    def SubnAdmDelete(self, payload: BinStruct, path: Any = None,
                      attributeModifier: int = 0) -> Optional[BinStruct]:
        """SubnAdmDelete: remove a record; return the SA's copy."""
        rep = self.sa_rpc(MAD_METHOD_DELETE, payload, path,
                          attributeModifier)
        return rep.records[0] if rep.records else None


_METHODS = {MAD_METHOD_GET: "SubnAdmGet", MAD_METHOD_SET: "SubnAdmSet",
            MAD_METHOD_GET_TABLE: "SubnAdmGetTable",
            MAD_METHOD_DELETE: "SubnAdmDelete"}


def _describe(req: MADHeader) -> str:
    if req.mgmtClass == MAD_SUBNET_ADMIN:
        from rdma._mad import _BY_ATTRIBUTE
        cls = _BY_ATTRIBUTE.get(req.attributeID)
        name = cls.__name__ if cls else f"attribute {req.attributeID:#x}"
        return f"{_METHODS.get(req.method, hex(req.method))}({name})"
    return (f"class {req.mgmtClass:#x} method {req.method:#x} attribute "
            f"{req.attributeID:#x}")


def get_umad(end_port: Any = None, **kw: Any) -> UMAD:
    """Open a :class:`UMAD` on an end port (a :class:`UMADEndPort`, a verbs
    :class:`rdma.EndPort`, a name for :func:`get_end_port`, or None for the
    first ACTIVE umad port).

    Raises :class:`rdma.SysError` if libibumad is missing or the port
    cannot be opened, :class:`rdma.RDMAError` if there is no such port.
    """
    return UMAD(end_port, **kw)

