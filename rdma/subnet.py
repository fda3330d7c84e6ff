"""The database of an InfiniBand subnet: nodes, ports, links and LIDs.

:class:`Subnet` is what :mod:`rdma.discovery` fills (python-rdma's
``rdma.subnet``): :class:`Node` objects (:class:`CA`, :class:`Switch`,
:class:`Router`) holding their :class:`Port` objects, the links between
ports (:attr:`Subnet.topology`), the ports by GUID and by LID, and the
SMP paths that reach each end port.

An *end port* is a port with a LID and a GUID of its own: every port of
a CA or router, and port 0 of a switch (its physical ports 1..N share port
0's LID and GUID).  ``Subnet.ports`` and ``Subnet.lids`` map to end ports;
``Subnet.topology`` maps physical port to physical port, both ways.

The database can be pickled (paths and the DR cache are left out: they
belong to the machine that discovered it).
"""
from __future__ import annotations

import collections
from types import ModuleType
from typing import (Any, Deque, Dict, Generator, Iterator, List, Optional, Set,
                    Tuple, Type, TypeVar)

from rdma import IBA
from rdma._errors import RDMAError
from rdma.IBA import GID, GUID

__all__ = ["Node", "CA", "Switch", "Router", "Port", "Subnet",
           "NODE_CA", "NODE_SWITCH", "NODE_ROUTER", "PORT_STATE_DOWN",
           "lid_lmc_range", "node_description",
           "mft_attribute_modifier"]

#: NodeInfo.nodeType values (IBA 14.2.5.3).
NODE_CA = 1
NODE_SWITCH = 2
NODE_ROUTER = 3
#: PortInfo.portState of a port whose link is down.
PORT_STATE_DOWN = 1


def lid_lmc_range(lid: int, lmc: int) -> range:
    """The LIDs a port with base *lid* and *lmc* answers to."""
    base = lid & ~((1 << lmc) - 1) & 0xFFFF
    return range(base, base + (1 << lmc))


#: What the discovery coroutines are (for rdma.sched: they yield work and
#: take its result).
Coroutine = Generator[Any, Any, None]


def _path_mod() -> ModuleType:
    import rdma.path
    return rdma.path


def node_description(node_string: bytes) -> str:
    """A NodeDescription's text: up to the first NUL, UTF-8 (bad bytes
    replaced)."""
    if isinstance(node_string, str):
        return node_string
    raw = bytes(node_string)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class Node:
    """One node of the subnet (a switch, a CA or a router): one
    ``nodeGUID``, several ports.  The fields are filled as discovery
    learns them and stay ``None`` until then."""

    #: The :class:`rdma.IBA.SMPNodeInfo` of the node (its ``portGUID``
    #: and ``localPortNum`` are those of the port it was read through).
    ninf: Optional[IBA.SMPNodeInfo] = None
    #: The NodeDescription as text.
    desc: Optional[str] = None
    #: The ports, by port number (``ports[1]`` is port 1; a CA has no port
    #: 0: ``ports[0]`` is None).  None until a port is known.
    ports: Optional[List[Optional["Port"]]] = None

    def get_port_nc(self, portIdx: int) -> Optional["Port"]:
        """Return port *portIdx*, or None if it is not known (never
        creates one)."""
        if self.ports is None or not 0 <= portIdx < len(self.ports):
            return None
        return self.ports[portIdx]

    def get_port(self, portIdx: int) -> "Port":
        """Return port *portIdx*, making it if it does not exist yet."""
        port = self.get_port_nc(portIdx)
        if port is None:
            port = Port(self)
            self.set_port(portIdx, port)
        return port

    def set_port(self, portIdx: int, port: "Port") -> None:
        """Store *port* as port number *portIdx*."""
        if not 0 <= portIdx <= 254:
            raise ValueError(f"port number {portIdx} is not in 0..254")
        want = portIdx + 1
        if self.ninf is not None:
            want = max(want, self.ninf.numPorts + 1)
        if self.ports is None:
            self.ports = [None] * want
        elif len(self.ports) < want:
            self.ports.extend([None] * (want - len(self.ports)))
        self.ports[portIdx] = port
        port.parent = self
        port._port_id = portIdx

    def set_desc(self, nodeString: Any) -> None:
        """Set :attr:`desc` from a NodeDescription's ``nodeString``."""
        self.desc = node_description(nodeString)

    def get_desc(self, sched: Any, path: Any) -> Coroutine:
        """Coroutine (for :mod:`rdma.sched`): read the NodeDescription
        through *path* into :attr:`desc`."""
        ns = yield sched.SubnGet(IBA.SMPNodeDescription, path)
        self.set_desc(ns.nodeString)

    def iterports(self) -> Iterator[Tuple["Port", int]]:
        """Yield ``(port, portIdx)`` for the ports that are in the subnet
        (a CA port nobody could reach is left out)."""
        if self.ports is None:
            return
        for i in range(1, len(self.ports)):
            p = self.ports[i]
            if p is not None and (p.portGUID is not None or
                                  p.LID is not None):
                yield p, i

    def iterend_ports(self) -> Iterator["Port"]:
        """Yield the end ports that are in the subnet."""
        for p, _ in self.iterports():
            yield p

    def to_end_port(self, port: "Port") -> "Port":
        """The end port of *port*: itself (switches: port 0)."""
        return port

    @property
    def guid(self) -> Optional[GUID]:
        """The node GUID (None before NodeInfo is known)."""
        return None if self.ninf is None else GUID(self.ninf.nodeGUID)

    def __repr__(self) -> str:
        g = "?" if self.ninf is None else f"{self.guid}"
        return f"<{type(self).__name__} {g} {self.desc!r}>"


class CA(Node):
    """A channel adapter (HCA or TCA)."""


class Router(Node):
    """A router."""


class Switch(Node):
    """A switch: its physical ports share the LID and GUID of port 0."""

    #: The :class:`rdma.IBA.SMPSwitchInfo`.
    swinf: Optional[IBA.SMPSwitchInfo] = None
    #: The linear forwarding table: ``lfdb[lid]`` is the egress port (255:
    #: none); a :class:`bytearray` from LID 0 (None until loaded).
    lfdb: Optional[bytearray] = None
    #: The multicast forwarding table: ``mfdb[i]`` is the port mask of
    #: MLID 0xC000 + i (bit *n* set: forward out of port *n*; all
    #: positions joined into one int), None until loaded.
    mfdb: Optional[List[int]] = None

    def iterports(self) -> Iterator[Tuple["Port", int]]:
        """Yield ``(port, portIdx)`` for every port, 0 included."""
        n = (self.ninf.numPorts + 1 if self.ninf is not None
             else len(self.ports or ()))
        for i in range(n):
            yield self.get_port(i), i

    def iterend_ports(self) -> Iterator["Port"]:
        """Yield port 0."""
        yield self.get_port(0)

    def to_end_port(self, port: "Port") -> "Port":
        """Port 0."""
        return self.get_port(0)

    @property
    def top_unicast_lid(self) -> int:
        """The LIDs of the linear forwarding table to read: up to
        ``linearFDBTop`` (capped at ``linearFDBCap``), rounded up to a
        block of 64."""
        swinf = _known(self.swinf, "SwitchInfo", self)
        top: int = min(swinf.linearFDBTop, swinf.linearFDBCap)
        return (top + 64) // 64 * 64

    @property
    def mfdb_size(self) -> int:
        """The MLIDs of the multicast forwarding table to read:
        ``multicastFDBCap`` rounded up to a block of 32 (capped at the
        multicast LID space)."""
        cap: int = min(_known(self.swinf, "SwitchInfo", self).multicastFDBCap,
                       IBA.LID_COUNT_MULTICAST)
        return (cap + 31) // 32 * 32

    @property
    def mfdb_positions(self) -> int:
        """How many 16-port position masks cover the switch's ports
        (port 0 included)."""
        ports: int = _known(self.ninf, "NodeInfo", self).numPorts
        return (ports + 1 + 15) // 16

    def trim_db(self) -> None:
        """Drop unused entries (255) at the end of :attr:`lfdb`, and the
        entries of :attr:`mfdb` past the last multicast LID (0xFFFE)."""
        if self.lfdb:
            n = len(self.lfdb)
            while n and self.lfdb[n - 1] == 255:
                n -= 1
            del self.lfdb[n:]
        if self.mfdb:
            del self.mfdb[IBA.LID_COUNT_MULTICAST:]

    def get_switch_inf(self, sched: Any, path: Any) -> Coroutine:
        """Coroutine: read the SwitchInfo into :attr:`swinf`."""
        self.swinf = yield sched.SubnGet(IBA.SMPSwitchInfo, path)

    def _get_LFDB(self, sched: Any, idx: int, path: Any) -> Coroutine:
        """Coroutine: read block *idx* (64 LIDs) of the LFT."""
        inf = yield sched.SubnGet(IBA.SMPLinearForwardingTable, path, idx)
        lfdb = _known(self.lfdb, "lfdb", self)
        lfdb[idx * 64:idx * 64 + 64] = bytes(inf.portBlock)

    def _get_LFDB_SA(self, sched: Any, path: Any) -> Coroutine:
        """Coroutine: read the whole LFT from the SA (one GetTable of
        LinearForwardingTableRecords)."""
        req = IBA.ComponentMask(IBA.SALinearForwardingTableRecord())
        req.LID = sched.get_path_lid(path)
        res = yield sched.SubnAdmGetTable(req)
        lfdb = _known(self.lfdb, "lfdb", self)
        for rec in res:
            idx = rec.blockNum
            if idx * 64 < len(lfdb):
                lfdb[idx * 64:idx * 64 + 64] = bytes(
                    rec.linearForwardingTable.portBlock)

    def _merge_mfdb(self, idx: int, pos: int, masks: Any) -> None:
        base = idx * 32
        shift = pos * 16
        mfdb = _known(self.mfdb, "mfdb", self)
        for i, v in enumerate(masks):
            if base + i < len(mfdb):
                mfdb[base + i] |= int(v) << shift

    def _get_MFDB(self, sched: Any, idx: int, pos: int,
                  path: Any) -> Coroutine:
        """Coroutine: read block *idx* (32 MLIDs from 0xC000 + 32 *
        *idx*) of position *pos* (ports 16 * *pos* .. 16 * *pos* + 15) of
        the multicast forwarding table into :attr:`mfdb`."""
        inf = yield sched.SubnGet(IBA.SMPMulticastForwardingTable, path,
                                  mft_attribute_modifier(idx, pos))
        self._merge_mfdb(idx, pos, inf.portMaskBlock)

    def _get_MFDB_SA(self, sched: Any, path: Any) -> Coroutine:
        """Coroutine: read the whole MFT from the SA (one GetTable of
        MulticastForwardingTableRecords)."""
        req = IBA.ComponentMask(IBA.SAMulticastForwardingTableRecord())
        req.LID = sched.get_path_lid(path)
        res = yield sched.SubnAdmGetTable(req)
        for rec in res:
            self._merge_mfdb(rec.blockNum, rec.position,
                             rec.multicastForwardingTable.portMaskBlock)

    def get_switch_fdb(self, sched: Any, do_lfdb: bool, do_mfdb: bool,
                       path: Any) -> Coroutine:
        """Coroutine: read the linear forwarding table (one SMP per block
        of 64 LIDs) into :attr:`lfdb` and/or the multicast forwarding
        table (one SMP per block of 32 MLIDs and position of 16 ports)
        into :attr:`mfdb`, all blocks in parallel.  The SwitchInfo is
        read first if :attr:`swinf` is not known; the multicast table
        needs the NodeInfo (:attr:`ninf`, for the number of ports).
        Through a :class:`rdma.satransactor.SATransactor` the tables come
        from the SA (one GetTable each), as python-rdma does.

        :raises ValueError: for the multicast table of a switch whose
            NodeInfo is not known."""
        if do_mfdb and self.ninf is None:
            raise ValueError(f"{self!r}: the multicast forwarding table "
                             f"needs the switch's NodeInfo (its number of "
                             f"ports) first")
        if self.swinf is None:
            yield self.get_switch_inf(sched, path)
        by_sa = _is_sa_transactor(sched)
        if do_lfdb:
            lfdb = self.lfdb = bytearray(b"\xff" * self.top_unicast_lid)
            if by_sa:
                yield self._get_LFDB_SA(sched, path)
            else:
                yield sched.mqueue(self._get_LFDB(sched, i, path)
                                   for i in range(len(lfdb) // 64))
        if do_mfdb:
            mfdb = self.mfdb = [0] * self.mfdb_size
            if by_sa:
                yield self._get_MFDB_SA(sched, path)
            else:
                positions = self.mfdb_positions
                yield sched.mqueue(
                    self._get_MFDB(sched, idx, pos, path)
                    for idx in range(len(mfdb) // 32)
                    for pos in range(positions))


def mft_attribute_modifier(block: int, position: int) -> int:
    """The attribute modifier of a MulticastForwardingTable SMP (IBA
    14.2.5.12): *block* of 32 MLIDs (0..511, block 0 is MLID 0xC000) in
    bits 8:0 and *position* of 16 ports (0..15) in bits 31:28.

    :raises ValueError: if either is out of range."""
    if not 0 <= block <= 511:
        raise ValueError(f"MulticastForwardingTable block {block} is not "
                         f"in 0..511 (MLIDs 0xC000..0xFFFF, 32 a block)")
    if not 0 <= position <= 15:
        raise ValueError(f"MulticastForwardingTable position {position} "
                         f"is not in 0..15 (16 ports a position)")
    return block | (position << 28)


_T = TypeVar("_T")


def _known(value: Optional[_T], what: str, owner: object) -> _T:
    """*value*, which discovery fills in before it is needed."""
    if value is None:
        raise AttributeError(f"{owner!r}: its {what} is not known yet")
    return value


def _is_sa_transactor(sched: Any) -> bool:
    try:
        import rdma.satransactor
    except ImportError:             # pragma: no cover - same package
        return False
    return isinstance(sched, rdma.satransactor.SATransactor)


class Port:
    """One port of a node.  For an end port :attr:`LID` and
    :attr:`portGUID` are its own; a switch's physical ports have neither
    (see :meth:`to_end_port`)."""

    #: The :class:`Node` this port belongs to (a port is made with its
    #: node: only python-rdma's bare ``Port()`` has none).
    parent: Node = None  # type: ignore[assignment]
    #: The :class:`rdma.IBA.SMPPortInfo` of the port.
    pinf: Optional[IBA.SMPPortInfo] = None
    #: The port GUID (end ports).
    portGUID: Optional[GUID] = None
    #: The base LID (end ports).
    LID: Optional[int] = None
    _port_id: Optional[int] = None

    def __init__(self, parent: Optional[Node] = None):
        if parent is not None:
            self.parent = parent

    def to_end_port(self) -> "Port":
        """The end port of this port (port 0 for a switch port)."""
        return self.parent.to_end_port(self)

    @property
    def port_id(self) -> int:
        """The port number."""
        if self._port_id is not None:
            return self._port_id
        return _known(self.parent.ports, "ports", self.parent).index(self)

    def __repr__(self) -> str:
        ep = self.to_end_port() if self.parent is not None else self
        return f"<Port #{self.port_id} {ep.portGUID} {ep.LID} " \
               f"0x{id(self):x}>"


class Subnet:
    """Everything known about one subnet (python-rdma's ``Subnet``).

    The accessors (:meth:`get_node_ninf`, :meth:`get_port_pinf`...) join
    what a MAD reply says with what is known already, so the database can
    be filled in any order.  :attr:`loaded` names what discovery has done
    (``all_NodeInfo``, ``all_topology``...).
    """

    #: nodeGUID -> :class:`Node`.
    nodes: Dict[int, Node]
    #: portGUID -> end :class:`Port`.
    ports: Dict[int, Port]
    #: LID -> end :class:`Port` (None where unused).
    lids: List[Optional[Port]]
    #: Every :class:`Node`.
    all_nodes: Set[Node]
    #: Port -> peer Port, for every link (both directions).
    topology: Dict[Port, Port]
    #: End Port -> the SMP path that reached it (None: not recorded).
    paths: Optional[Dict[Port, Any]] = None
    #: What discovery has loaded (strings, see :func:`rdma.discovery.load`).
    loaded: Set[str]
    #: Prefer LID-routed SMP paths (:meth:`get_path_smp`) once LIDs are
    #: known; False: directed routes only (a subnet without an SM).
    lid_routed = True
    #: ``(path, exception)`` for every SMP discovery gave up on (a node
    #: that did not answer, a dead link): discovery goes on without it.
    errors: List[Tuple[Any, BaseException]]

    def __init__(self) -> None:
        self.nodes = {}
        self.ports = {}
        self.lids = []
        self.all_nodes = set()
        self.topology = {}
        self.loaded = set()
        self.errors = []

    # -- LIDs and paths ----------------------------------------------------

    def set_max_lid(self, max_lid: int) -> None:
        """Make :attr:`lids` long enough to hold *max_lid*."""
        if len(self.lids) <= max_lid:
            self.lids.extend([None] * (max_lid + 1 - len(self.lids)))

    def _resolve_dr_path(self, path: Any) -> Optional[Port]:
        dr = bytes(path.drPath)
        if path.DLID == IBA.LID_PERMISSIVE:
            ep = path.end_port
            start = self.ports.get(int(ep.port_guid)) if ep else None
        elif path.DLID < len(self.lids):
            start = self.lids[path.DLID]
        else:
            return None
        if start is None or not dr or dr[0] != 0:
            return None
        if len(dr) == 1:
            return start
        if not isinstance(start.parent, Switch) and dr[1] != start.port_id:
            return None
        cur: Port = start
        for hop in dr[1:]:
            out = cur.parent.get_port_nc(hop)
            if out is None:
                return None
            nxt = self.topology.get(out)
            if nxt is None:
                return None
            cur = nxt
        return cur.to_end_port()

    def path_to_port(self, path: Any) -> Optional[Port]:
        """The end :class:`Port` *path* leads to, or None if unknown."""
        ret: Optional[Port] = getattr(path, "_cached_subnet_end_port", None)
        if ret is not None:
            return ret
        if isinstance(path, _path_mod().IBDRPath):
            ret = self._resolve_dr_path(path)
        else:
            if path.DGID is not None:
                ret = self.ports.get(int(GID(path.DGID).guid))
            if ret is None and 0 < path.DLID < len(self.lids):
                ret = self.lids[path.DLID]
        if ret is not None:
            path.__dict__["_cached_subnet_end_port"] = ret
        return ret

    def get_path_smp(self, sched: Any, end_port: Port) -> Any:
        """Return an SMP path to *end_port* from ``sched.end_port``: LID
        routed when :attr:`lid_routed` and its LID is known, else the
        directed route discovery recorded.

        :raises rdma.RDMAError: if there is no way to reach it."""
        if end_port is not end_port.to_end_port():
            raise ValueError(f"{end_port!r} is not an end port")
        lid = end_port.LID
        lid_ok = lid is not None and 0 < lid < IBA.LID_MULTICAST
        if self.paths is not None and (not self.lid_routed or not lid_ok):
            path = self.paths.get(end_port)
            if path is not None:
                return path
        if not lid_ok:
            raise RDMAError(f"cannot make a LID-routed path to end port "
                            f"{end_port.portGUID}: it has no LID, and no "
                            f"directed route is known")
        local = sched.end_port
        path = _path_mod().IBPath(local, SLID=local.lid, DLID=lid, dqpn=0,
                                  sqpn=0, qkey=IBA.IB_DEFAULT_QP0_QKEY)
        path.__dict__["_cached_subnet_end_port"] = end_port
        return path

    def advance_dr(self, path: Any, portIdx: int) -> Any:
        """Return a new :class:`~rdma.path.IBDRPath`: *path* and then out
        of port *portIdx* of the node it reaches.  From a LID-routed path
        it extends the directed route :attr:`paths` holds for the same
        port, else it makes a route with a LID-routed start.

        :raises rdma.RDMAError: past 63 hops."""
        P = _path_mod()
        dr = bytes(getattr(path, "drPath", b"\0")) + bytes([portIdx])
        if len(dr) - 1 > P.DR_MAX_HOPS:
            raise RDMAError(f"a directed route has at most "
                            f"{P.DR_MAX_HOPS} hops: {tuple(dr)}")
        if isinstance(path, P.IBDRPath):
            return self._extend_dr(path, self.path_to_port(path), portIdx)
        # LID routed: extend the directed route known to the same port, if
        # any (not every SMA takes a LID-routed start; ibsim does not).
        ep = self.path_to_port(path) if self.paths else None
        if ep is not None and self.paths is not None and ep in self.paths:
            return self._extend_dr(self.paths[ep], ep, portIdx)
        local = path.end_port
        if path.DLID in (0, IBA.LID_PERMISSIVE) or \
                path.DLID == getattr(local, "lid", None):
            return P.IBDRPath(local, drPath=dr, retries=path.retries)
        return P.IBDRPath(local, SLID=path.SLID, drSLID=path.SLID,
                          DLID=path.DLID, drPath=dr, retries=path.retries)

    @staticmethod
    def _extend_dr(path: Any, ep: Optional[Port], portIdx: int) -> Any:
        """*path* (directed, to end port *ep* if known) then out of port
        *portIdx*.  Out of a CA through the port the route came in by is
        the switch before it (a CA forwards no SMP; python-rdma does the
        same): the route is cut instead, and the port it reaches the
        switch by is kept for discovery."""
        dr = bytes(path.drPath)
        if ep is not None and not isinstance(ep.parent, Switch) and \
                len(dr) >= 3 and ep.port_id == portIdx:
            ret = path.copy(drPath=dr[:-1])
            ret.__dict__["_cached_subnet_localPortNum"] = dr[-1]
            return ret
        return path.extend(portIdx)

    # -- joining what MADs say ---------------------------------------------

    def link_end_port(self, port: Port, portIdx: Optional[int] = None,
                      nodeGUID: Optional[int] = None,
                      portGUID: Optional[int] = None, path: Any = None,
                      LID: Optional[int] = None,
                      LMC: Optional[int] = 0) -> Port:
        """Record what is known about the end port *port* (its number,
        GUID, LID and LMC, the path that reached it) and return it.
        For a switch *portIdx* must be 0."""
        if LID is None and path is not None and \
                not isinstance(path, _path_mod().IBDRPath) and \
                0 < path.DLID < IBA.LID_MULTICAST:
            # A LID-routed path reached it: that is its LID.
            LID = path.DLID
        node = port.parent
        if portIdx is not None:
            node.set_port(portIdx, port)
        if portGUID is not None and port.portGUID is None:
            port.portGUID = GUID(portGUID)
            self.ports[int(portGUID)] = port
        if LID is not None and 0 < LID < IBA.LID_MULTICAST:
            port.LID = LID
            rng = lid_lmc_range(LID, LMC or 0)
            self.set_max_lid(rng[-1])
            for i in rng:
                self.lids[i] = port
        if path is not None:
            path.__dict__["_cached_subnet_end_port"] = port
            if self.paths is not None and \
                    isinstance(path, _path_mod().IBDRPath):
                self.paths.setdefault(port, path)
        return port

    def search_end_port(self, portIdx: Optional[int] = None,
                        portGUID: Optional[int] = None,
                        nodeGUID: Optional[int] = None, path: Any = None,
                        LID: Optional[int] = None,
                        LMC: Optional[int] = 0) -> Optional[Port]:
        """Return the known end :class:`Port` matching the arguments (the
        port GUID first, then the node GUID and port number, then the
        LID), or None."""
        if path is not None:
            port: Optional[Port] = path.__dict__.get(
                "_cached_subnet_end_port")
            if port is not None:
                return port
        if portGUID is not None:
            port = self.ports.get(int(portGUID))
            if port is not None:
                return port
        node = self.nodes.get(int(nodeGUID)) if nodeGUID is not None \
            else None
        if node is not None:
            if isinstance(node, Switch):
                return node.get_port(0)
            if portIdx is not None:
                return node.get_port(portIdx)
        if LID is None and path is not None and \
                not isinstance(path, _path_mod().IBDRPath):
            LID = path.DLID
        if LID is not None and 0 < LID < len(self.lids):
            return self.lids[LID]
        return None

    def get_node(self, type_: Type[Node], **kwargs: Any
                 ) -> Tuple[Node, Port]:
        """Return ``(node, end port)`` for the end port described by
        *kwargs* (as for :meth:`search_end_port`), making them if they do
        not exist.  A node first made as a plain :class:`Node` takes
        *type_* when it is known.

        :raises rdma.RDMAError: if the node exists with another type."""
        port = self.search_end_port(**kwargs)
        if port is None:
            node = type_()
            self.all_nodes.add(node)
        else:
            node = port.parent
        if not isinstance(node, type_):
            if type(node) is Node:
                node.__class__ = type_
                if isinstance(node, Switch) and port is not None and \
                        port.port_id != 0:
                    raise RDMAError(f"node {node!r} became a switch after "
                                    f"its port {port.port_id} was stored")
            elif type_ is not Node:
                raise RDMAError(f"node {node!r} was a "
                                f"{type(node).__name__}, a MAD now says "
                                f"{type_.__name__}")
        if isinstance(node, Switch):
            kwargs["portIdx"] = 0
            port = node.get_port(0)
        if port is None:
            port = Port(node)
        self.link_end_port(port, **kwargs)
        return node, port

    def get_node_ninf(self, ninf: Any, path: Any = None,
                      LID: Optional[int] = None) -> Tuple[Node, Port]:
        """Return ``(node, end port)`` for the node of a NodeInfo *ninf*
        (read through *path*, or from LID *LID*), recording them."""
        portIdx = ninf.localPortNum
        type_ = {NODE_SWITCH: Switch, NODE_CA: CA,
                 NODE_ROUTER: Router}.get(ninf.nodeType, Node)
        if type_ is Switch:
            portIdx = 0
        node = self.nodes.get(ninf.nodeGUID)
        if node is not None and node.ninf is None:
            node.ninf = ninf
        if node is None:
            node, port = self.get_node(type_, portIdx=portIdx,
                                       nodeGUID=ninf.nodeGUID,
                                       portGUID=ninf.portGUID, path=path,
                                       LID=LID)
        else:
            if not isinstance(node, type_):
                raise RDMAError(f"node {node!r} was a "
                                f"{type(node).__name__}, its NodeInfo now "
                                f"says type {ninf.nodeType}")
            port = node.get_port(portIdx)
            self.link_end_port(port, portIdx=portIdx,
                               portGUID=ninf.portGUID, path=path, LID=LID)
        self.nodes[ninf.nodeGUID] = node
        if node.ninf is None or node.ninf.nodeGUID == ninf.nodeGUID:
            node.ninf = ninf
        return node, port

    def get_port(self, port_select: Optional[int] = None,
                 localPortNum: Optional[int] = None,
                 portIdx: Optional[int] = None, **kwargs: Any) -> Port:
        """Return any :class:`Port` (a switch's physical ports too) from
        what an SMP reply says: *portIdx* if known, else the attribute
        modifier *port_select* (0 means "the port the SMP arrived on",
        *localPortNum*, except on a switch).

        :raises ValueError: if the node type is needed and not known."""
        if portIdx is None and port_select:
            portIdx = port_select
        if portIdx is not None:
            if portIdx == 0:
                node, port = self.get_node(Switch, portIdx=0, **kwargs)
                return port
            end = self.search_end_port(portIdx=portIdx, **kwargs)
            if end is None:
                node, end = self.get_node(Node, portIdx=portIdx, **kwargs)
            else:
                self.link_end_port(end, **kwargs)
            node = end.parent
            if isinstance(node, Switch):
                return node.get_port(portIdx)
            port = node.get_port(portIdx)
            self.link_end_port(port, portIdx=portIdx, **kwargs)
            return port
        end = self.search_end_port(**kwargs)
        if end is None or type(end.parent) is Node:
            raise ValueError("a port 0 query needs the node type: read "
                             "its NodeInfo first")
        node = end.parent
        if isinstance(node, Switch):
            port0 = node.get_port(0)
            self.link_end_port(port0, **kwargs)
            return port0
        if localPortNum is None:
            self.link_end_port(end, **kwargs)
            return end
        self.link_end_port(end, **kwargs)
        return node.get_port(localPortNum)

    def get_port_pinf(self, pinf: Any, port_select: Optional[int] = None,
                      portIdx: Optional[int] = None, path: Any = None,
                      LID: Optional[int] = None) -> Port:
        """Return the :class:`Port` a PortInfo *pinf* describes and store
        it there (its LID and LMC too, unless it is a switch's physical
        port)."""
        LMC = None
        if (LID is None or LID == pinf.LID) and \
                0 < pinf.LID < IBA.LID_MULTICAST:
            LID, LMC = pinf.LID, pinf.LMC
        port = self.get_port(port_select=port_select,
                             localPortNum=pinf.localPortNum,
                             portIdx=portIdx, path=path, LID=LID, LMC=LMC)
        port.pinf = pinf
        return port

    # -- iteration ------------------------------------------------------------

    def iternodes(self) -> Iterator[Node]:
        """Every node."""
        return iter(self.all_nodes)

    def iterswitches(self) -> Iterator[Switch]:
        """Every switch."""
        return (n for n in self.all_nodes if isinstance(n, Switch))

    def iterports(self) -> Iterator[Tuple[Port, int]]:
        """``(port, portIdx)`` of every port in the subnet."""
        for n in self.all_nodes:
            yield from n.iterports()

    def iterend_ports(self) -> Iterator[Port]:
        """Every end port in the subnet."""
        for n in self.all_nodes:
            yield from n.iterend_ports()

    def iterpeers(self, start: Port) -> Iterator[Tuple[Port, Port]]:
        """``(peer, local port)`` for each link of the node of the end
        port *start* (every physical port of a switch)."""
        if isinstance(start.parent, Switch):
            for p in _known(start.parent.ports, "ports", start.parent)[1:]:
                peer = self.topology.get(p) if p is not None else None
                if peer is not None and p is not None:
                    yield peer, p
        else:
            peer = self.topology.get(start)
            if peer is not None:
                yield peer, start

    def iterbfs(self, start: Port, priors: Optional[Dict[Port, Port]] = None
                ) -> Iterator[Port]:
        """Yield the end ports in breadth-first order from the end port
        *start*.  *priors*, if given, is filled with end port -> the
        egress port of the previous hop (*start* maps to itself)."""
        todo: Deque[Port] = collections.deque([start])
        if priors is None:
            priors = {}
        else:
            priors.clear()
        priors[start] = start
        yield start
        while todo:
            prior = todo.popleft()
            for cur, cur_prior in self.iterpeers(prior):
                ep = cur.to_end_port()
                if ep in priors:
                    continue
                priors[ep] = cur_prior
                todo.append(ep)
                yield ep

    class DRCacher:
        """Directed routes from one end port to many others (the shortest,
        by a BFS over the discovered topology); see
        :meth:`Subnet.get_dr_cache`."""

        def __init__(self, sbn: "Subnet", end_port: Any,
                     start: Optional[Port] = None):
            self._sbn = sbn
            self._priors: Dict[Port, Port] = {}
            #: The local end port the routes leave from.
            self.end_port = end_port
            self._dlid: Optional[int]
            if start is None:
                self._start = sbn.ports[int(end_port.port_guid)]
                self._dlid = IBA.LID_PERMISSIVE
            else:
                self._start = start
                self._dlid = start.LID
            self._iter = sbn.iterbfs(self._start, self._priors)

        def get_links(self, target: Port) -> Iterator[Port]:
            """The egress ports from *target* back to the start.

            :raises ValueError: if *target* cannot be reached."""
            if target not in self._priors:
                for ep in self._iter:
                    if ep is target:
                        break
                else:
                    raise ValueError(f"cannot reach {target!r} by a "
                                     f"directed route")
            prior = self._priors[target]
            if target is self._start:
                return
            yield prior
            while prior.to_end_port() is not self._start:
                prior = self._priors[prior.to_end_port()]
                yield prior

        def get_path(self, target: Port) -> Any:
            """A directed route from the start to the end port *target*.

            :raises ValueError: if *target* cannot be reached."""
            hops = [p.port_id for p in self.get_links(target)]
            dr = bytes([0] + hops[::-1])
            P = _path_mod()
            if self._dlid != IBA.LID_PERMISSIVE:
                lid = self.end_port.lid
                return P.IBDRPath(self.end_port, SLID=lid, drSLID=lid,
                                  DLID=self._dlid, drPath=dr)
            return P.IBDRPath(self.end_port, drPath=dr)

    def get_dr_cache(self, end_port: Any, start: Optional[Port] = None
                     ) -> "Subnet.DRCacher":
        """Return a :class:`DRCacher` whose ``get_path(target)`` gives the
        directed route from *start* (default: the port of *end_port*, the
        local end port) to an end port."""
        return self.DRCacher(self, end_port, start)

    # -- pickling ----------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        return {"all_nodes": self.all_nodes, "topology": self.topology,
                "loaded": self.loaded, "lid_routed": self.lid_routed}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        init: Any = getattr(self, "__init__")
        init()
        self.all_nodes = state["all_nodes"]
        self.topology = state["topology"]
        self.loaded = state["loaded"]
        self.lid_routed = state["lid_routed"]
        for n in self.all_nodes:
            if n.ninf is not None:
                self.nodes[n.ninf.nodeGUID] = n
        for p in self.iterend_ports():
            if p.portGUID is not None:
                self.ports[int(p.portGUID)] = p
            if p.LID is not None:
                lmc = p.pinf.LMC if p.pinf is not None else 0
                rng = lid_lmc_range(p.LID, lmc)
                self.set_max_lid(rng[-1])
                for i in rng:
                    self.lids[i] = p
