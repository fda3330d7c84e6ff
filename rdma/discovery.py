"""Discover a subnet with SMPs and fill a :class:`rdma.subnet.Subnet`.

python-rdma's ``rdma.discovery``: the functions are coroutines for the MAD
scheduler (:class:`rdma.sched.MADSchedule`): they ``yield
sched.SubnGet(...)`` and get the reply back, ``yield`` another coroutine
to run it, and ``yield sched.mqueue(...)`` to run many in parallel, so
that many SMPs are in flight at once.  :func:`load` runs what a caller
asks for::

    umad = rdma.get_umad(end_port)
    sched = rdma.sched.MADSchedule(umad)
    sbn = rdma.subnet.Subnet()
    rdma.discovery.load(sched, sbn, ["all_NodeInfo", "all_topology",
                                     "all_SwitchInfo", "all_LFDB"])

The topology is walked breadth first by directed route from the local
port (as ``ibnetdiscover`` does), one hop count at a time, so every node
is recorded with a shortest route (``sbn.paths``).  An SMP that fails
(a node that does not answer, a link that went down) is recorded in
``sbn.errors`` and discovery goes on without what lay behind it; only a
failure to read the local port itself raises.
"""
from __future__ import annotations

import sys
from typing import (Any, Dict, Generator, Iterable, List, Optional, Set,
                    Tuple)

import rdma
from rdma import IBA
from rdma._mad import MADError
from rdma._errors import RDMAError
from rdma.subnet import PORT_STATE_DOWN, Node, Port, Subnet, Switch

#: A discovery coroutine (for rdma.sched, or do_async on a transactor): it
#: yields work and takes its result.
_Co = Generator[Any, Any, Any]

__all__ = ["load", "topo_SMP", "subnet_ninf_SMP", "subnet_pinf_SMP",
           "subnet_swinf_SMP", "subnet_lfdb_SMP", "topo_peer_SMP",
           "topo_surround_SMP", "subnet_fill_port", "subnet_get_port",
           "subnet_ninf_LIDS_SMP", "LOADABLE", "scheduler_class",
           "subnet_summary", "main", "subnet_ninf_SA", "subnet_ninf_GUID",
           "subnet_swinf_SA", "subnet_pinf_SA", "subnet_topology_SA"]

#: What :func:`load` knows how to load.
LOADABLE = ("all_NodeInfo", "all_NodeDescription", "all_PortInfo",
            "all_LIDs", "all_topology", "all_SwitchInfo", "all_LFDB")


def _errors_of(sbn: Subnet) -> List[Tuple[Any, BaseException]]:
    errs = getattr(sbn, "errors", None)
    if errs is None:
        errs = sbn.errors = []
    return errs


def _lid_path(sched: Any, lid: int) -> Any:
    import rdma.path
    ep = sched.end_port
    return rdma.path.IBPath(ep, SLID=ep.lid, DLID=lid, dqpn=0, sqpn=0,
                            qkey=IBA.IB_DEFAULT_QP0_QKEY)


# -- single queries -----------------------------------------------------------

def subnet_pinf_SMP(sched: Any, sbn: Subnet, sel: int, path: Any) -> _Co:
    """Coroutine: read the PortInfo of port *sel* through *path* into
    *sbn*; its result (``sched.result``) is the :class:`~rdma.subnet.Port`."""
    pinf = yield sched.SubnGet(IBA.SMPPortInfo, path, sel)
    sched.result = sbn.get_port_pinf(pinf, port_select=sel, path=path)
    return sched.result


def _is_sa(sched: Any) -> bool:
    """Whether *sched* answers SMP reads through the SA (python-rdma's
    test for the default of *use_sa*)."""
    from rdma.satransactor import SATransactor
    return isinstance(sched, SATransactor)


def _apply_node_record(sbn: Subnet, path: Any, lid: int,
                       rec: Any) -> Tuple[Node, Port]:
    """Record the NodeRecord *rec* of LID *lid* (reached by *path*) in
    *sbn*: NodeInfo and NodeDescription; return ``(node, port)``."""
    ninf = rec.nodeInfo
    bad = _bad_ninf(ninf)
    if bad:
        raise MADError(path=path, msg=f"NodeRecord of LID {lid}: {bad}")
    result = sbn.get_node_ninf(ninf, path, LID=lid)
    result[0].set_desc(rec.nodeDescription.nodeString)
    path.__dict__["_cached_node_type"] = ninf.nodeType
    return result


def subnet_ninf_SMP(sched: Any, sbn: Subnet, path: Any,
                    get_desc: bool = True, use_sa: Optional[bool] = None,
                    done_desc: Optional[Set[Node]] = None) -> _Co:
    """Coroutine: read the NodeInfo (and NodeDescription) of the node at
    the end of *path* into *sbn*; its result is ``(node, port)`` as
    :meth:`~rdma.subnet.Subnet.get_node_ninf` returns.

    With *use_sa* (default: whether *sched* is a
    :class:`rdma.satransactor.SATransactor`, as in python-rdma) both come
    from one NodeRecord SubnAdmGet to the SA instead of two SMPs (the
    description is then always read: it is in the record).  *sched* may
    then also be a synchronous transactor (a :class:`rdma.umad.UMAD`, run
    with ``do_async``), and a directed-route *path* is resolved to its
    LID by LinkRecord queries, one per hop.

    :raises rdma.MADError: if the node, or the SA, does not answer.
    :raises rdma.RDMAError: if the SA knows no such LID or link."""
    if use_sa is None:
        use_sa = _is_sa(sched)
    if use_sa:
        # Flat (RPCs only, no nested coroutine on a synchronous
        # transactor), so that do_async runs it too.
        from rdma.satransactor import SATransactor
        sa = sched if isinstance(sched, SATransactor) else \
            SATransactor(sched)
        if sched.is_async:
            lid = yield sa.prepare_path_lid(path)
        else:
            lid = sa.get_path_lid(path)
        if not lid or lid >= IBA.LID_MULTICAST:
            raise RDMAError(f"{path}: LID {lid} is not a unicast LID; the "
                            f"SA keeps NodeRecords by LID")
        req = IBA.ComponentMask(IBA.SANodeRecord())
        req.LID = lid
        rec = yield sched.SubnAdmGet(req)
        result = _apply_node_record(sbn, path, lid, rec)
        sched.result = result
        return result
    ninf = yield sched.SubnGet(IBA.SMPNodeInfo, path)
    result = sbn.get_node_ninf(ninf, path)
    node = result[0]
    if get_desc and node.desc is None and \
            (done_desc is None or node not in done_desc):
        if done_desc is not None:
            done_desc.add(node)
        yield node.get_desc(sched, path)
    sched.result = result
    return result


def subnet_ninf_LIDS_SMP(sched: Any, sbn: Subnet, LIDs: List[int],
                         get_desc: bool = True) -> _Co:
    """Coroutine: read NodeInfo (and NodeDescription) by LID-routed SMPs
    for every LID in *LIDs* whose node is not known yet, in parallel."""
    if not LIDs:
        return
    sbn.set_max_lid(max(LIDs))
    done_desc: Optional[Set[Node]] = set() if get_desc else None
    use_sa = _is_sa(sched)

    def one(lid: int) -> _Co:
        port = sbn.lids[lid]
        if port is not None and port.parent.ninf is not None:
            if get_desc and port.parent.desc is None and \
                    done_desc is not None and port.parent not in done_desc:
                done_desc.add(port.parent)
                yield port.parent.get_desc(sched, _lid_path(sched, lid))
            return
        yield subnet_ninf_SMP(sched, sbn, _lid_path(sched, lid), get_desc,
                              use_sa, done_desc)

    yield sched.mqueue(one(lid) for lid in sorted(set(LIDs)))


def subnet_swinf_SMP(sched: Any, sbn: Subnet) -> _Co:
    """Coroutine: read the SwitchInfo of every switch that lacks it, in
    parallel (a switch that does not answer goes to ``sbn.errors``)."""
    errors = _errors_of(sbn)

    def one(sw: Switch) -> _Co:
        path = None
        try:
            path = sbn.get_path_smp(sched, sw.get_port(0))
            yield sw.get_switch_inf(sched, path)
        except (MADError, RDMAError) as e:
            errors.append((path, e))

    yield sched.mqueue(one(sw) for sw in list(sbn.iterswitches())
                       if sw.swinf is None)
    sbn.loaded.add("all_SwitchInfo")


def subnet_lfdb_SMP(sched: Any, sbn: Subnet) -> _Co:
    """Coroutine: read the linear forwarding table of every switch (its
    SwitchInfo first if needed), every block of every switch in parallel.
    A switch that fails goes to ``sbn.errors`` with ``lfdb`` None."""
    errors = _errors_of(sbn)

    def one(sw: Switch) -> _Co:
        path = None
        try:
            path = sbn.get_path_smp(sched, sw.get_port(0))
            yield sw.get_switch_fdb(sched, True, False, path)
        except (MADError, RDMAError) as e:
            sw.lfdb = None
            errors.append((path, e))

    yield sched.mqueue(one(sw) for sw in list(sbn.iterswitches()))
    sbn.loaded.add("all_LFDB")


# -- the topology walk --------------------------------------------------------

def _bad_ninf(ninf: Any) -> Optional[str]:
    """Why a NodeInfo cannot be used (a broken or hostile node), or
    None."""
    if ninf.nodeType not in (1, 2, 3):
        return f"unknown node type {ninf.nodeType}"
    if not 1 <= ninf.numPorts <= 254:
        return f"{ninf.numPorts} ports"
    if ninf.nodeType == 2:
        if ninf.localPortNum > ninf.numPorts:
            return (f"arrived at port {ninf.localPortNum} of "
                    f"{ninf.numPorts}")
    elif not 1 <= ninf.localPortNum <= ninf.numPorts:
        return f"arrived at port {ninf.localPortNum} of {ninf.numPorts}"
    if not ninf.nodeGUID:
        return "node GUID 0"
    return None


class _TopoWalk:
    """A breadth-first walk by directed route: hop count *n* is read (all
    its SMPs in parallel) before any node at *n + 1*, so the first route
    to reach a node is a shortest one.

    With a scheduler that has ``mget`` (:class:`rdma.sched.MADSchedule`)
    each hop count is two batches: the NodeInfos of every route of the
    level, then the PortInfos and NodeDescriptions of the nodes they
    found (in request order, so the result does not depend on the order
    replies arrive in).  With another scheduler every node is a coroutine
    of its own (python-rdma's way).  Both apply the replies with the same
    methods below."""

    def __init__(self, sched: Any, sbn: Subnet, get_desc: bool):
        self.sched = sched
        self.sbn = sbn
        self.get_desc = get_desc
        self.errors = _errors_of(sbn)
        #: Nodes whose ports were read.
        self.scanned: Set[Node] = set()
        #: (route, port it leaves through) for the next hop count.
        self.next: List[Tuple[Any, Port]] = []
        self.NodeInfo = IBA.SMPNodeInfo
        self.PortInfo = IBA.SMPPortInfo
        self.batched = callable(getattr(sched, "mget", None))

    def run(self, root: Any) -> _Co:
        yield self.do_node(root, None, must=True)
        while self.next:
            level, self.next = self.next, []
            topo = self.sbn.topology
            if self.batched:
                yield self.do_level([(path, peer) for path, peer in level
                                     if peer not in topo])
            else:
                yield self.sched.mqueue(self.do_node(path, peer)
                                        for path, peer in level
                                        if peer not in topo)

    # -- one hop count in two batches

    def do_level(self, level: List[Tuple[Any, Port]]) -> _Co:
        sched = self.sched
        ninfs = yield sched.mget(sched.SubnGet(self.NodeInfo, path)
                                 for path, _ in level)
        works, todo = [], []
        for (path, peer), ninf in zip(level, ninfs):
            if isinstance(ninf, BaseException):
                if not isinstance(ninf, MADError):
                    raise ninf
                self.errors.append((path, ninf))
                continue
            got = self.on_ninf(path, peer, ninf)
            if got is None:
                continue
            node, sels, desc = got
            for i in sels:
                works.append(sched.SubnGet(self.PortInfo, path, i))
                todo.append((node, path, i))
            if desc:
                works.append(sched.SubnGet(IBA.SMPNodeDescription, path))
                todo.append((node, path, None))
        replies = yield sched.mget(works)
        for (node, path, sel), rep in zip(todo, replies):
            if isinstance(rep, BaseException):
                if not isinstance(rep, MADError):
                    raise rep
                self.errors.append((path, rep))
            elif sel is None:
                node.set_desc(rep.nodeString)
            else:
                self.on_pinf(node, path, sel, rep)

    # -- one node as a coroutine

    def do_node(self, path: Any, peer: Optional[Port],
                must: bool = False) -> _Co:
        try:
            ninf = yield self.sched.SubnGet(self.NodeInfo, path)
        except MADError as e:
            if must:
                raise
            self.errors.append((path, e))
            return
        got = self.on_ninf(path, peer, ninf, must)
        if got is None:
            return
        node, sels, desc = got
        works = [self.do_port(node, path, i) for i in sels]
        if desc:
            works.append(self.do_desc(node, path))
        # The PortInfos and the NodeDescription in flight together.
        yield self.sched.mqueue(w for w in works)

    def do_desc(self, node: Node, path: Any) -> _Co:
        try:
            yield node.get_desc(self.sched, path)
        except MADError as e:
            self.errors.append((path, e))

    def do_port(self, node: Node, path: Any, sel: int) -> _Co:
        try:
            pinf = yield self.sched.SubnGet(self.PortInfo, path, sel)
        except MADError as e:
            self.errors.append((path, e))
            return
        self.on_pinf(node, path, sel, pinf)

    # -- applying replies

    def on_ninf(self, path: Any, peer: Optional[Port], ninf: Any,
                must: bool = False
                ) -> Optional[Tuple[Node, Any, bool]]:
        """Record the NodeInfo *ninf* read through *path* (arriving from
        *peer*); return ``(node, ports to read, read its description)``,
        or None when there is nothing more to read there."""
        sbn = self.sbn
        bad = _bad_ninf(ninf)
        if bad:
            if must:
                raise MADError(path=path, msg=f"NodeInfo of {path}: {bad}")
            self.errors.append((path, MADError(
                path=path, msg=f"NodeInfo of {path}: {bad}")))
            return None
        try:
            node, port = sbn.get_node_ninf(ninf, path)
        except RDMAError as e:
            # Contradicts what other replies said (a GUID seen with two
            # node types...): keep the first story.
            if must:
                raise
            self.errors.append((path, e))
            return None
        if peer is not None:
            here = node.get_port(ninf.localPortNum)
            old = sbn.topology.get(here)
            if old is not None and old is not peer:
                # A second cable into the same port: the subnet changed
                # under us, or two nodes share a GUID.
                self.errors.append((path, RDMAError(
                    f"port {ninf.localPortNum} of {node!r} is linked to "
                    f"{old!r} and {peer!r}")))
            else:
                sbn.topology[here] = peer
                sbn.topology[peer] = here
        if isinstance(node, Switch):
            if node in self.scanned:
                return None
            sels: Any = range(ninf.numPorts + 1)
        else:
            # A CA is read port by port, through the port each route
            # arrives at (its other ports are reached from their peers).
            if node.get_port(ninf.localPortNum).pinf is not None:
                return None
            sels = (ninf.localPortNum,)
        first = node not in self.scanned
        self.scanned.add(node)
        return node, sels, first and self.get_desc and node.desc is None

    def on_pinf(self, node: Node, path: Any, sel: int, pinf: Any) -> None:
        """Record the PortInfo *pinf* of port *sel* of *node*; queue the
        route through it for the next hop count."""
        sbn = self.sbn
        if sel != 0 and isinstance(node, Switch):
            # External switch ports share port 0's LID; do not let one
            # that says otherwise move the switch's LID.
            port = node.get_port(sel)
            port.pinf = pinf
        else:
            try:
                port = sbn.get_port_pinf(pinf, portIdx=sel, path=path)
            except (RDMAError, ValueError) as e:
                self.errors.append((path, e))
                return
        if sel == 0 or pinf.portState == PORT_STATE_DOWN or \
                port in sbn.topology:
            return
        try:
            nxt = sbn.advance_dr(path, sel)
        except RDMAError as e:
            self.errors.append((path, e))
            return
        self.next.append((nxt, port))


def topo_SMP(sched: Any, sbn: Subnet, get_desc: bool = True) -> _Co:
    """Coroutine: discover every node, port, link and LID reachable from
    ``sched.end_port`` by directed-route SMPs (NodeInfo, PortInfo and,
    with *get_desc*, NodeDescription), breadth first.  Replaces the
    topology and the PortInfos known before."""
    import rdma.path
    sbn.topology = {}
    sbn.paths = {}
    for port, _ in list(sbn.iterports()):
        port.pinf = None
    walk = _TopoWalk(sched, sbn, get_desc)
    yield walk.run(rdma.path.IBDRPath(sched.end_port))
    sbn.loaded.update(("all_LIDs", "all_NodeInfo", "all_topology",
                       "all_PortInfo"))
    if get_desc:
        sbn.loaded.add("all_NodeDescription")


def topo_peer_SMP(sched: Any, sbn: Subnet, port: Port, get_desc: bool = True,
                  path: Any = None, peer_path: Any = None) -> _Co:
    """Coroutine: find what is cabled to *port* (a known port) and link it
    in ``sbn.topology``; nothing to do if the link is known."""
    peer = sbn.topology.get(port)
    if peer is not None:
        if get_desc and peer.parent.desc is None:
            # Linked by an earlier walk without descriptions.
            yield peer.parent.get_desc(
                sched, sbn.get_path_smp(sched, peer.to_end_port()))
        return
    idx = port.port_id
    if path is None:
        path = sbn.get_path_smp(sched, port.to_end_port())
    if port.pinf is None:
        yield subnet_pinf_SMP(sched, sbn, idx, path)
    if idx == 0 or port.pinf is None or \
            port.pinf.portState == PORT_STATE_DOWN:
        return
    if peer_path is None:
        peer_path = sbn.advance_dr(path, idx)
    if _is_sa(sched):
        # The SA knows the link: one LinkRecord names the peer's LID and
        # port, one NodeRecord the peer (python-rdma's way).
        from_lid = yield sched.prepare_path_lid(path)
        req = IBA.ComponentMask(IBA.SALinkRecord())
        req.fromLID = from_lid
        req.fromPort = idx
        rep = yield sched.SubnAdmGet(req)
        peer_path.__dict__["_cached_resolved_dlid"] = rep.toLID
        node, here = yield subnet_ninf_SMP(sched, sbn, peer_path, get_desc,
                                           True)
        if isinstance(node, Switch):
            here = node.get_port(rep.toPort)
        sbn.topology[here] = port
        sbn.topology[port] = here
        return
    ninf = yield sched.SubnGet(IBA.SMPNodeInfo, peer_path)
    node, _ = sbn.get_node_ninf(ninf, peer_path)
    # advance_dr shortens a route that turns back at a CA: it then knows
    # the peer's port better than the NodeInfo read over the short route.
    here = node.get_port(peer_path.__dict__.get(
        "_cached_subnet_localPortNum", ninf.localPortNum))
    sbn.topology[here] = port
    sbn.topology[port] = here
    if get_desc and node.desc is None:
        yield node.get_desc(sched, peer_path)


def topo_surround_SMP(sched: Any, sbn: Subnet, node: Node,
                      get_desc: bool = True) -> _Co:
    """Coroutine: link everything cabled to the ports of *node* (a known
    node), in parallel."""
    ports = [p for p, i in node.iterports() if i != 0] \
        if isinstance(node, Switch) else list(node.iterend_ports())
    if get_desc and node.desc is None:
        # The node's own description too (python-rdma's ibprintca prints it).
        for end in node.iterend_ports():
            yield node.get_desc(sched, sbn.get_path_smp(sched, end))
            break
    yield sched.mqueue(topo_peer_SMP(sched, sbn, p, get_desc)
                       for p in ports)


def subnet_fill_port(sched: Any, sbn: Subnet, port: Port, path: Any = None,
                     get_desc: bool = True) -> _Co:
    """Coroutine: fill the NodeInfo, NodeDescription and PortInfo (of
    *port* and of its end port) that are missing."""
    node = port.parent
    end = port.to_end_port()
    if path is None:
        path = sbn.get_path_smp(sched, end)
    if node.ninf is None:
        yield subnet_ninf_SMP(sched, sbn, path, get_desc)
        get_desc = False
    if get_desc and node.desc is None:
        yield node.get_desc(sched, path)
    if port.pinf is None:
        yield subnet_pinf_SMP(sched, sbn, port.port_id, path)
    if end is not port and end.pinf is None:
        yield subnet_pinf_SMP(sched, sbn, end.port_id, path)


def subnet_get_port(sched: Any, sbn: Subnet, path: Any,
                    get_desc: bool = True) -> _Co:
    """Coroutine: make sure the end port *path* leads to is in *sbn* with
    its NodeInfo, NodeDescription and PortInfo
    (:meth:`~rdma.subnet.Subnet.path_to_port` then finds it)."""
    port = sbn.path_to_port(path)
    if port is None:
        yield subnet_ninf_SMP(sched, sbn, path, get_desc)
        port = sbn.path_to_port(path)
        get_desc = False
        if port is None:
            raise RDMAError(f"{path}: the node answered, its port is not "
                            f"in the subnet")
    yield subnet_fill_port(sched, sbn, port, path, get_desc)


# -- from the SA --------------------------------------------------------------
#
# Flat coroutines (each yields RPCs only), so that they run on a scheduler
# (sched.run) and on a synchronous transactor (do_async) alike.

def subnet_ninf_SA(sched: Any, sbn: Subnet,
                   node_type: Optional[int] = None) -> _Co:
    """Coroutine: every NodeRecord from the SA (of *node_type* only, if
    given) into *sbn*, NodeInfo and NodeDescription."""
    req = IBA.ComponentMask(IBA.SANodeRecord())
    if node_type is not None:
        req.nodeInfo.nodeType = node_type
    res = yield sched.SubnAdmGetTable(req)
    if res:
        sbn.set_max_lid(max(r.LID for r in res))
    for r in res:
        node, _ = sbn.get_node_ninf(r.nodeInfo, LID=r.LID)
        node.set_desc(r.nodeDescription.nodeString)
    if node_type is None:
        sbn.loaded.update(("all_NodeInfo", "all_NodeDescription"))
    else:
        sbn.loaded.update((f"all_NodeInfo {node_type}",
                           f"all_NodeDescription {node_type}"))


def subnet_ninf_GUID(sched: Any, sbn: Subnet, node_guid: int) -> _Co:
    """Coroutine: the NodeRecords of one node (one per CA port) into
    *sbn*."""
    req = IBA.ComponentMask(IBA.SANodeRecord())
    req.nodeInfo.nodeGUID = int(node_guid)
    res = yield sched.SubnAdmGetTable(req)
    for r in res:
        node, _ = sbn.get_node_ninf(r.nodeInfo, LID=r.LID)
        node.set_desc(r.nodeDescription.nodeString)


def subnet_swinf_SA(sched: Any, sbn: Subnet) -> _Co:
    """Coroutine: every SwitchInfoRecord into its switch (the switches'
    NodeInfo must be loaded)."""
    res = yield sched.SubnAdmGetTable(IBA.SASwitchInfoRecord())
    for r in res:
        port = sbn.lids[r.LID] if r.LID < len(sbn.lids) else None
        if port is not None and isinstance(port.parent, Switch):
            port.parent.swinf = r.switchInfo
    sbn.loaded.add("all_SwitchInfo")


def subnet_pinf_SA(sched: Any, sbn: Subnet) -> _Co:
    """Coroutine: every PortInfoRecord into its port (NodeInfo must be
    loaded): LIDs with their LMC, switch ports included."""
    res = yield sched.SubnAdmGetTable(IBA.SAPortInfoRecord())
    for r in res:
        end = sbn.lids[r.endportLID] if r.endportLID < len(sbn.lids) \
            else None
        if end is None:
            continue
        node = end.parent
        if isinstance(node, Switch):
            port = node.get_port(r.portNum)
            port.pinf = r.portInfo
            if r.portNum == 0:
                sbn.link_end_port(port, LID=r.endportLID,
                                  LMC=r.portInfo.LMC)
        else:
            sbn.get_port_pinf(r.portInfo, portIdx=r.portNum,
                              LID=r.endportLID)
    sbn.loaded.update(("all_PortInfo", "all_LIDs"))


def subnet_topology_SA(sched: Any, sbn: Subnet) -> _Co:
    """Coroutine: every LinkRecord into ``sbn.topology`` (NodeInfo must
    be loaded)."""
    res = yield sched.SubnAdmGetTable(IBA.SALinkRecord())
    sbn.topology = {}
    for r in res:
        ends = []
        for lid, num in ((r.fromLID, r.fromPort), (r.toLID, r.toPort)):
            end = sbn.lids[lid] if lid < len(sbn.lids) else None
            if end is None:
                break
            node = end.parent
            ends.append(node.get_port(num) if isinstance(node, Switch)
                        else end)
        if len(ends) == 2:
            sbn.topology[ends[0]] = ends[1]
            sbn.topology[ends[1]] = ends[0]
    sbn.loaded.add("all_topology")


def _run_flat(sched: Any, coroutine: Any) -> None:
    if hasattr(sched, "run") and hasattr(sched, "mqueue"):
        sched.run(queue=coroutine)
    else:
        sched.do_async(coroutine)


def _load_SA(sched: Any, sbn: Subnet, want: Set[str]) -> None:
    if want & {"all_NodeInfo", "all_NodeDescription", "all_PortInfo",
               "all_LIDs", "all_topology", "all_SwitchInfo"} and \
            "all_NodeInfo" not in sbn.loaded:
        _run_flat(sched, subnet_ninf_SA(sched, sbn))
    if want & {"all_PortInfo", "all_LIDs"}:
        _run_flat(sched, subnet_pinf_SA(sched, sbn))
    if "all_topology" in want:
        _run_flat(sched, subnet_topology_SA(sched, sbn))
    if "all_SwitchInfo" in want:
        _run_flat(sched, subnet_swinf_SA(sched, sbn))


# -- load ---------------------------------------------------------------------

def scheduler_class(name: Optional[str] = None) -> type:
    """The MAD scheduler class: :class:`rdma.sched.MADSchedule` (*name*
    None or ``"sched"``; the one scheduler: discovery also runs on any
    other with python-rdma's interface, passed to :func:`load`).

    :raises ValueError: for another name."""
    if name in (None, "sched"):
        from rdma.sched import MADSchedule
        return MADSchedule
    raise ValueError(f"unknown scheduler {name!r}: only 'sched' (the "
                     f"interim scheduler was folded into rdma.sched)")


def _as_sched(sched: Any) -> Any:
    if hasattr(sched, "mqueue") and hasattr(sched, "run"):
        return sched
    return scheduler_class()(sched)


def load(sched: Any, sbn: Subnet, stuff: Iterable[str],
         sa: bool = False) -> Subnet:
    """Fill *sbn* with the items of *stuff* that it lacks (see
    ``sbn.loaded``), by SMPs through *sched* (a
    :class:`rdma.sched.MADSchedule`; a UMAD is wrapped in one):

    - ``all_NodeInfo``, ``all_NodeDescription``, ``all_PortInfo``,
      ``all_LIDs``, ``all_topology``: the directed-route walk of
      :func:`topo_SMP` (one walk loads them all);
    - ``all_SwitchInfo``: every switch's SwitchInfo;
    - ``all_LFDB`` (ours): every switch's linear forwarding table
      (``Switch.lfdb``).

    With *sa*, or when *sched* is a
    :class:`rdma.satransactor.SATransactor` (python-rdma chose by that
    class alone), the items come from the SA instead, by GetTable of
    NodeRecords, PortInfoRecords, LinkRecords and SwitchInfoRecords (a
    scheduler or a synchronous transactor; ``all_LFDB`` still reads
    SMPs).

    Returns *sbn*.  What could not be read is in ``sbn.errors``.

    :raises ValueError: for an unknown item.
    :raises rdma.MADError: if the local port itself cannot be read."""
    if isinstance(stuff, str):
        stuff = [stuff]
    want = set()
    for item in stuff:
        base = item.split(" ")[0]
        if base not in LOADABLE:
            raise ValueError(f"cannot load {item!r}; known: "
                             f"{', '.join(LOADABLE)}")
        want.add(base)
    _errors_of(sbn)
    if "all_LFDB" in want:
        want.add("all_SwitchInfo")
    if "all_SwitchInfo" in want:
        want.add("all_NodeInfo")
    if not sa:
        from rdma.satransactor import SATransactor
        sa = isinstance(sched, SATransactor)
    if sa:
        _load_SA(sched, sbn, want - sbn.loaded)
    want -= sbn.loaded
    if not want:
        return sbn
    sched = _as_sched(sched)
    walk = {"all_NodeInfo", "all_NodeDescription", "all_PortInfo",
            "all_LIDs", "all_topology"}
    if want & walk:
        sched.run(queue=topo_SMP(sched, sbn,
                                 "all_NodeDescription" in want))
    if "all_SwitchInfo" in want:
        sched.run(queue=subnet_swinf_SMP(sched, sbn))
    if "all_LFDB" in want:
        sched.run(queue=subnet_lfdb_SMP(sched, sbn))
    return sbn


# -- a dump for scripts and tests ---------------------------------------------

def subnet_summary(sbn: Subnet) -> Dict[str, Any]:
    """A JSON-friendly summary of *sbn*: ``nodes`` (type, GUIDs, ports
    with LID, LMC, port GUID and state), ``links`` (``[guid, port, guid,
    port]``, each once) and ``errors`` (text)."""
    nodes: List[Dict[str, Any]] = []
    for n in sorted(sbn.iternodes(), key=lambda n: n.ninf.nodeGUID
                    if n.ninf is not None else -1):
        if n.ninf is None:
            continue
        ports: Dict[int, Dict[str, Any]] = {}
        for p, i in n.iterports():
            ep = p.to_end_port()
            d: Dict[str, Any] = {}
            if p.pinf is not None:
                d["state"] = p.pinf.portState
                d["width"] = p.pinf.linkWidthActive
                d["speed"] = p.pinf.linkSpeedActive
            if ep is p:
                d["lid"] = p.LID
                d["lmc"] = p.pinf.LMC if p.pinf is not None else None
                d["guid"] = f"{int(p.portGUID):#x}" \
                    if p.portGUID is not None else None
            ports[i] = d
        entry: Dict[str, Any] = {
            "type": type(n).__name__, "guid": f"{n.ninf.nodeGUID:#x}",
            "numPorts": n.ninf.numPorts, "desc": n.desc, "ports": ports}
        if isinstance(n, Switch) and n.lfdb is not None:
            entry["lfdb"] = list(n.lfdb)
        nodes.append(entry)
    links = set()
    for a, b in sbn.topology.items():
        if a.parent.ninf is None or b.parent.ninf is None:
            continue
        x = (a.parent.ninf.nodeGUID, a.port_id)
        y = (b.parent.ninf.nodeGUID, b.port_id)
        links.add((min(x, y), max(x, y)))
    return {"nodes": nodes,
            "links": [[f"{x[0]:#x}", x[1], f"{y[0]:#x}", y[1]]
                      for x, y in sorted(links)],
            "errors": [f"{p}: {e}" for p, e in sbn.errors]}


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m rdma.discovery [--lfdb] [--dr] [--sched S] [end_port]``:
    discover the subnet and print :func:`subnet_summary` as JSON (with
    the wall and CPU time ``load()`` took and the number of SMPs)."""
    import json
    import time
    from rdma.cli import Parser
    ap = Parser(prog="python -m rdma.discovery",
                description=(main.__doc__ or "").split("\n")[0])
    ap.add_argument("end_port", nargs="?", default=None)
    ap.add_argument("--lfdb", action="store_true",
                    help="also read SwitchInfo and the forwarding tables")
    ap.add_argument("--outstanding", type=int, default=None,
                    help="SMPs in flight at most")
    ap.add_argument("--repeat", type=int, default=1,
                    help="discover this many times (print the last)")
    ap.add_argument("--dr", action="store_true",
                    help="directed routes only, also after the walk "
                         "(Subnet.lid_routed False)")
    ap.add_argument("--sa", action="store_true",
                    help="ask the SA instead of sending SMPs")
    a = ap.parse_args(argv)
    umad = rdma.get_umad(a.end_port)
    try:
        sched = scheduler_class()(umad)
        if a.outstanding:
            sched.max_outstanding = a.outstanding
        stuff = ["all_NodeInfo", "all_NodeDescription", "all_topology"]
        if a.lfdb:
            stuff.append("all_LFDB")
        times, cpu = [], []
        for _ in range(a.repeat):
            sbn = Subnet()
            sbn.lid_routed = not a.dr
            t0, c0 = time.monotonic(), time.process_time()
            load(sched, sbn, stuff, sa=a.sa)
            times.append(time.monotonic() - t0)
            cpu.append(time.process_time() - c0)
        out = subnet_summary(sbn)
        out["times"] = times
        out["cpu_times"] = cpu
        out["smps"] = getattr(sched, "sent", None)
        sys.stdout.write(json.dumps(out) + "\n")
    finally:
        umad.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
