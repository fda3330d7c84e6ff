"""Every topology comes up under opensm and our PathRecords agree with
saquery's for every ordered pair of connected HCAs (ibsim's shipped
examples, multi-switch ones included, and our one-switch file)."""
import itertools

import pytest

import saquery_out as sq
from conftest import TOPOLOGIES
from fabric import hca_nodes
from rdma import _mad as mad


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_topology_paths(fabrics, name):
    f = fabrics(name)
    nodes = hca_nodes(f.topology)
    assert len(nodes) >= 2
    # The shim gives a client port 1 of its node only; in ibsim's "net"
    # example Hca2 is cabled on port 2, so query from the SM's node.
    client = nodes[0]
    w = f.worker(client)
    lids = {}
    for lid in range(1, 16):
        try:
            rec = w.call("sa_get", mad.SANodeRecord(LID=lid))
        except mad.SAError:
            continue
        if rec.nodeInfo.nodeType == 1:
            lids[lid] = rec
    # One NodeRecord per port LID: a two-port HCA has two.
    guids = {r.nodeInfo.nodeGUID for r in lids.values()}
    assert len(guids) == len(nodes), (name, nodes, sorted(lids))
    for s, d in itertools.permutations(sorted(lids), 2):
        ours = w.call("path_query", SLID=s, DLID=d)
        out = f.run(["saquery", "-p", "--src-to-dst", f"{s}:{d}"], client)
        (theirs,) = sq.parse(out.stdout)
        want = sq.path_record(theirs)
        assert sq.ours(ours, want) == want, (name, s, d)
    # Done with this fabric: free its processes for the next ones.
    f.close()
