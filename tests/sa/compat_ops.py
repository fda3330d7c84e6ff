"""Worker operations for tests/sa/test_python_rdma_api.py: the behaviour
python-rdma's programs rely on, on the real fabric (see sa_ops.compat)."""
import rdma
import rdma.discovery
import rdma.IBA as IBA
import rdma.path
import rdma.sched
import rdma.subnet


def sa_path_and_parent(u):
    """umad.parent, end_port.sa_path (an IBPath, the same object while
    the SM stays) and its copy() as the SMP path to the SM."""
    ep = u.end_port
    sp = ep.sa_path
    sp.SMKey = 1
    smp = sp.copy(dqpn=0, qkey=IBA.IB_DEFAULT_QP0_QKEY)
    sinf = u.SubnGet(IBA.SMPSMInfo, smp)
    return {"parent_is_end_port": u.parent is ep,
            "sa_path_is_ibpath": isinstance(sp, rdma.path.IBPath),
            "same_object": ep.sa_path is sp, "smkey_kept": ep.sa_path.SMKey,
            "sm_lid": sp.DLID, "sm_guid": int(sinf.GUID),
            "sm_state": sinf.SMState}


def path_not_found(u, dlid):
    """get_mad_path to a LID nobody has: the error python-rdma raises."""
    try:
        rdma.path.get_mad_path(u, dlid)
    except rdma.path.SAPathNotFoundError as exc:
        return (type(exc).__name__, isinstance(exc, rdma.MADClassError),
                str(exc))
    return None


def path_on_scheduler(u, dlid, missing):
    """get_mad_path as a coroutine of a MADSchedule (python-rdma's
    ibcheck* do this): one that resolves, one that is not found."""
    sched = rdma.sched.MADSchedule(u)
    out = {}

    def co():
        p = yield rdma.path.get_mad_path(sched, dlid, dqpn=1,
                                         qkey=IBA.IB_DEFAULT_QP1_QKEY)
        out["found"] = (p.DLID, p.SLID, str(p.DGID), p.dqpn)
        try:
            yield rdma.path.get_mad_path(sched, missing)
        except rdma.path.SAPathNotFoundError as exc:
            out["missing"] = type(exc).__name__
    sched.run(co())
    return out


def surround(u, node_guid):
    """ibprintca's walk: NodeInfo of all CAs, then topo_surround_SMP of
    one: its own description and its peers' are known after."""
    sched = rdma.sched.MADSchedule(u)
    sbn = rdma.subnet.Subnet()
    rdma.discovery.load(sched, sbn, ["all_NodeInfo %u" % IBA.NODE_CA])
    node = sbn.nodes[node_guid]
    sched.run(queue=rdma.discovery.topo_surround_SMP(sched, sbn, node))
    peers = []
    for port in node.iterend_ports():
        peer = sbn.topology.get(port)
        peers.append((peer.parent.desc, peer.port_id))
    return node.desc, peers


def turn_back_at_ca(u, ca_guid):
    """Directed discovery, then advance_dr out of a remote CA through its
    own port: the route is cut back to the switch before it, which
    answers a NodeInfo."""
    sched = rdma.sched.MADSchedule(u)
    sbn = rdma.subnet.Subnet()
    sbn.lid_routed = False
    rdma.discovery.load(sched, sbn, ["all_NodeInfo", "all_topology"])
    ca = sbn.nodes[ca_guid]
    ep = next(iter(ca.iterend_ports()))
    path = sbn.get_path_smp(sched, ep)
    back = sbn.advance_dr(path, ep.port_id)
    ninf = u.SubnGet(IBA.SMPNodeInfo, back)
    peer = sbn.topology[ep]
    return {"to_ca": tuple(path.drPath), "back": tuple(back.drPath),
            "guid": int(ninf.nodeGUID), "want_guid": int(peer.parent.ninf.
                                                          nodeGUID),
            "port": back.__dict__.get("_cached_subnet_localPortNum"),
            "want_port": peer.port_id}


def no_sm_sa_path(u):
    """end_port.sa_path without an SM, and an SA query through it."""
    sp = u.end_port.sa_path
    try:
        u.SubnAdmGet(IBA.SANodeRecord())
    except rdma.RDMAError as exc:
        return sp.DLID, type(sp).__name__, str(exc)
    return sp.DLID, type(sp).__name__, None
