"""rdma.subnet.Subnet: the database discovery fills, built here from real
NodeInfo/PortInfo structures (what SMP replies decode to): joining, LIDs,
links, BFS, directed routes from the topology, pickling."""
import pickle

import pytest

import rdma
from rdma import IBA
from rdma.path import IBDRPath, IBPath
from rdma.subnet import CA, Switch, Subnet


class _EndPort:
    """The local end port as discovery sees it (GUID and LID)."""
    port_guid = IBA.GUID(0x100001)
    lid = 1
    port_id = 1


def ninf(guid, ntype, nports, local, port_guid=None):
    return IBA.SMPNodeInfo(nodeGUID=guid, nodeType=ntype, numPorts=nports,
                           localPortNum=local,
                           portGUID=port_guid if port_guid else guid)


def pinf(lid, local, state=4, lmc=0):
    return IBA.SMPPortInfo(LID=lid, localPortNum=local, portState=state,
                           LMC=lmc)


def build():
    """HCA A (port 1) - switch S port 1; S port 2 - HCA B port 1;
    S port 3 - HCA C port 2 (C's port 1 unconnected)."""
    s = Subnet()
    ep = _EndPort()
    root = IBDRPath(ep)
    a, ap = s.get_node_ninf(ninf(0x100000, 1, 1, 1, 0x100001), root)
    s.get_port_pinf(pinf(1, 1), portIdx=1, path=root)
    to_s = s.advance_dr(root, 1)
    sw, sp0 = s.get_node_ninf(ninf(0x200000, 2, 3, 1), to_s)
    s.get_port_pinf(pinf(2, 0), portIdx=0, path=to_s)
    s.topology[sw.get_port(1)] = ap
    s.topology[ap] = sw.get_port(1)
    for idx, guid, lid, rport in ((2, 0x100002, 3, 1), (3, 0x100004, 4, 2)):
        path = s.advance_dr(to_s, idx)
        n, p = s.get_node_ninf(ninf(guid, 1, 2, rport, guid + 1), path)
        s.get_port_pinf(pinf(lid, rport, lmc=1 if lid == 4 else 0),
                        portIdx=rport, path=path)
        s.topology[sw.get_port(idx)] = p
        s.topology[p] = sw.get_port(idx)
    return s, ep


def test_nodes_ports_and_lids():
    s, _ = build()
    assert len(s.all_nodes) == 4
    sw = s.nodes[0x200000]
    assert isinstance(sw, Switch) and sw.ports[0].LID == 2
    assert s.lids[2] is sw.get_port(0)
    c = s.nodes[0x100004]
    assert isinstance(c, CA) and c.get_port_nc(1) is None
    assert s.lids[4] is c.ports[2] and s.lids[5] is c.ports[2]   # LMC 1
    assert s.ports[0x100005] is c.ports[2]
    assert sorted(p.LID for p in s.iterend_ports()) == [1, 2, 3, 4]
    assert len(list(s.iterswitches())) == 1
    assert sw.ports[3].to_end_port() is sw.ports[0]


def test_type_change_is_an_error():
    s, _ = build()
    with pytest.raises(rdma.RDMAError, match="type"):
        s.get_node_ninf(ninf(0x200000, 1, 3, 1))


def test_paths_bfs_and_dr_cache():
    s, ep = build()
    c_port = s.nodes[0x100004].ports[2]
    dr = IBDRPath(ep, drPath=b"\0\1\3")
    assert s.path_to_port(IBDRPath(ep, drPath=b"\0\1\3")) is c_port
    assert s.path_to_port(IBDRPath(ep, drPath=b"\0\1\7")) is None
    assert s.path_to_port(IBDRPath(ep, drPath=b"\0\2")) is None
    assert s.path_to_port(IBPath(ep, DLID=3)) is s.lids[3]
    order = list(s.iterbfs(s.ports[0x100001]))
    assert order[0] is s.ports[0x100001] and len(order) == 4
    cache = s.get_dr_cache(ep)
    assert cache.get_path(c_port).drPath == dr.drPath
    assert cache.get_path(s.ports[0x100001]).drPath == b"\0"
    s.lid_routed = True
    p = s.get_path_smp(type("Sched", (), {"end_port": ep})(), c_port)
    assert type(p) is IBPath and p.DLID == 4 and p.dqpn == 0


def test_advance_dr_limits():
    s, ep = build()
    path = IBDRPath(ep, drPath=[0] + [1] * 63)
    with pytest.raises(rdma.RDMAError, match="63 hops"):
        s.advance_dr(path, 2)
    lid = IBPath(ep, SLID=1, DLID=7)
    nxt = s.advance_dr(lid, 4)
    assert (nxt.DLID, nxt.drSLID, nxt.drPath) == (7, 1, b"\0\4")


def test_pickle_round_trip():
    s, ep = build()
    t = pickle.loads(pickle.dumps(s))
    assert {n.ninf.nodeGUID for n in t.all_nodes} == \
        {n.ninf.nodeGUID for n in s.all_nodes}
    assert sorted(i for i, p in enumerate(t.lids) if p) == [1, 2, 3, 4, 5]
    sw = t.nodes[0x200000]
    peer = t.topology[sw.ports[3]]
    assert peer.parent is t.nodes[0x100004] and peer.port_id == 2
    assert t.path_to_port(IBDRPath(ep, drPath=b"\0\1\2")) is \
        t.nodes[0x100002].ports[1]


def test_load_rejects_unknown_items():
    import rdma.discovery
    with pytest.raises(ValueError, match="all_Bogus"):
        rdma.discovery.load(None, Subnet(), ["all_NodeInfo", "all_Bogus"])
    with pytest.raises(ValueError, match="unknown scheduler"):
        rdma.discovery.scheduler_class("nope")


@pytest.mark.parametrize("fields,why", [
    (dict(nodeType=7), "node type"),
    (dict(numPorts=0), "0 ports"),
    (dict(numPorts=255), "255 ports"),
    (dict(localPortNum=3, numPorts=2), "port 3 of 2"),
    (dict(nodeType=2, localPortNum=9, numPorts=8), "port 9 of 8"),
    (dict(localPortNum=0), "port 0 of"),
    (dict(nodeGUID=0), "GUID 0"),
])
def test_nodeinfo_a_walk_refuses(fields, why):
    """What a broken or hostile node can say in its NodeInfo that the walk
    records as an error instead of storing."""
    from rdma.discovery import _bad_ninf
    good = dict(nodeGUID=0x10, portGUID=0x11, nodeType=1, numPorts=2,
                localPortNum=1)
    assert _bad_ninf(IBA.SMPNodeInfo(**good)) is None
    good.update(fields)
    assert why in _bad_ninf(IBA.SMPNodeInfo(**good))


@pytest.mark.parametrize("path,attr,amod", [
    (IBDRPath(None, drPath=b"\0\1\7\3"), IBA.SMPPortInfo, 5),
    (IBDRPath(None, drPath=b"\0", DLID=9, SLID=1, drSLID=1, drDLID=4),
     IBA.SMPNodeInfo, 0),
    (IBPath(None, DLID=7, SLID=1, dqpn=0, sqpn=0, qkey=0),
     IBA.SMPLinearForwardingTable, 3),
])
def test_sched_fast_smp_equals_the_generic_path(path, attr, amod):
    """rdma.sched lays out a SubnGet by hand (fmt None: the fast path):
    byte for byte what the transactor's generic path packs through the
    SMPFormat codec; a Set or a payload object takes the generic path."""
    from rdma.madtransactor import MADTransactor
    from rdma.sched import MADSchedule

    class TIDs:          # what the layout needs from a UMAD
        end_port = None
        trace_func = None

        def _get_new_TID(self):
            return 0x1234

    sched = MADSchedule(TIDs())
    fast = sched.SubnGet(attr, path, amod)
    generic = MADTransactor._subn_do(sched, attr, path, amod,
                                     IBA.MAD_METHOD_GET)
    assert fast.fmt is None and generic.fmt is not None
    assert bytes(fast.buf) == bytes(generic.buf)
    assert sched.SubnGet(attr(), path, amod).fmt is not None
    sched.trace_func = lambda *a, **kw: None
    assert sched.SubnGet(attr, path, amod).fmt is not None


def test_sched_fast_path_follows_a_changed_path():
    """The fast path remembers what it read from an rdma.path.Path; a
    change of the path's attributes is seen by the next SubnGet (and a
    plain object, which cannot say it changed, is not remembered)."""
    from rdma.sched import MADSchedule

    class TIDs:
        end_port = None
        trace_func = None

        def _get_new_TID(self):
            return 7

    class Plain:
        def __init__(self, dr):
            self.drPath = dr
            self.DLID = self.drSLID = self.drDLID = 0xFFFF

    sched = MADSchedule(TIDs())
    for path in (IBDRPath(None, drPath=b"\0\1\2"), Plain(b"\0\1\2")):
        first = sched.SubnGet(IBA.SMPNodeInfo, path)
        assert bytes(first.buf[128:131]) == b"\0\1\2" and first.buf[7] == 2
        path.drPath = b"\0\4"
        again = sched.SubnGet(IBA.SMPNodeInfo, path)
        assert bytes(again.buf[128:131]) == b"\0\4\0" and again.buf[7] == 1
        assert again.fmt is None
    path = IBDRPath(None, drPath=b"\0\1")
    assert sched.SubnGet(IBA.SMPNodeInfo, path).buf[32:34] == b"\xff\xff"
    path.drSLID = 5
    assert sched.SubnGet(IBA.SMPNodeInfo, path).buf[32:34] == b"\0\5"
