"""rdma.madtransactor through rdma.umad.UMAD on opensm + ibsim: SMPs
(LID-routed and directed route), PerfMgt and SA RPCs, checked field by
field against infiniband-diags (smpquery, perfquery, saquery) on the same
fabric; timeouts and errors name the RPC, the attribute and the path."""
import re

import pytest

import rdma.IBA as IBA
from rdma import _mad as mad


def diag(fabric, node, *argv):
    """Run an infiniband-diags tool shimmed on ``node``; return its
    ``Key:....value`` lines as a dict."""
    res = fabric.run(list(argv), node)
    out = {}
    for line in res.stdout.splitlines():
        m = re.match(r"^([A-Za-z0-9 ]+?):?\.{2,}(.*)$", line)
        if m:
            out[m.group(1).rstrip(":")] = m.group(2).strip()
    return out


def _i(text):
    return int(text, 0)


_NODE_TYPES = {"Channel Adapter": 1, "Switch": 2, "Router": 3}
_STATES = {"Down": 1, "Initialize": 2, "Armed": 3, "Active": 4}
_PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3,
         "PortConfigurationTraining": 4, "LinkUp": 5}
_WIDTH = {"1X": 1, "4X": 2, "8X": 4, "12X": 8, "2X": 16}
_MTU = {"256": 1, "512": 2, "1024": 3, "2048": 4, "4096": 5}


def node_info_want(d):
    return {"baseVersion": _i(d["BaseVers"]),
            "classVersion": _i(d["ClassVers"]),
            "nodeType": _NODE_TYPES[d["NodeType"]],
            "numPorts": _i(d["NumPorts"]),
            "systemImageGUID": _i(d["SystemGuid"]),
            "nodeGUID": _i(d["Guid"]), "portGUID": _i(d["PortGuid"]),
            "partitionCap": _i(d["PartCap"]), "deviceID": _i(d["DevId"]),
            "revision": _i(d["Revision"]),
            "localPortNum": _i(d["LocalPort"]),
            "vendorID": _i(d["VendorId"])}


def port_info_want(d):
    return {"GIDPrefix": _i(d["GidPrefix"]), "LID": _i(d["Lid"]),
            "masterSMLID": _i(d["SMLid"]),
            "capabilityMask": _i(d["CapMask"]),
            "localPortNum": _i(d["LocalPort"]),
            "linkWidthActive": _WIDTH[d["LinkWidthActive"]],
            "portState": _STATES[d["LinkState"]],
            "portPhysicalState": _PHYS[d["PhysLinkState"]],
            "LMC": _i(d["LMC"]), "neighborMTU": _MTU[d["NeighborMTU"]],
            "masterSMSL": _i(d["SMSL"]), "VLHighLimit": _i(d["VLHighLimit"]),
            "VLArbitrationHighCap": _i(d["VLArbHighCap"]),
            "VLArbitrationLowCap": _i(d["VLArbLowCap"]),
            "MTUCap": _MTU[d["MtuCap"]],
            "VLStallCount": _i(d["VLStallCount"]),
            "HOQLife": _i(d["HoqLife"]),
            "MKeyViolations": _i(d["MkeyViolations"]),
            "PKeyViolations": _i(d["PkeyViolations"]),
            "QKeyViolations": _i(d["QkeyViolations"]),
            "GUIDCap": _i(d["GuidCap"]),
            "subnetTimeOut": _i(d["SubnetTimeout"]),
            "respTimeValue": _i(d["RespTimeVal"])}


def _sub(ours, want):
    return {k: ours[k] for k in want}


@pytest.fixture(scope="module")
def lids(worker):
    """LID -> NodeRecord of every node (one SubnAdmGet per LID, from when
    the tier ran on Debian's shim, which cut a GetTable answer to its
    first MAD)."""
    out = {}
    for lid in range(1, 16):
        try:
            out[lid] = worker.call("sa_get", IBA.SANodeRecord(LID=lid))
        except IBA.SAError:
            pass
    assert len(out) == 6        # net.2sw2path4hca: 2 switches, 4 HCAs
    return out


def test_node_info_lid_routed_matches_smpquery(fabric, worker, lids):
    for lid in lids:
        ours, hops, fmt = worker.call("madop", "smp_get", "SMPNodeInfo",
                                      lid=lid)
        assert fmt == "SMPFormat"
        want = node_info_want(diag(fabric, "Hca2", "smpquery", "nodeinfo",
                                   str(lid)))
        assert _sub(ours, want) == want, lid


def test_port_info_lid_routed_matches_smpquery(fabric, worker, lids):
    for lid, rec in lids.items():
        for port in range(1, rec.nodeInfo.numPorts + 1):
            ours, _, _ = worker.call("madop", "smp_get", "SMPPortInfo",
                                     lid=lid, mod=port)
            want = port_info_want(diag(fabric, "Hca2", "smpquery",
                                       "portinfo", str(lid), str(port)))
            assert _sub(ours, want) == want, (lid, port)


@pytest.mark.parametrize("hops", [(1,), (1, 1), (1, 3), (1, 3, 2)])
def test_directed_route_matches_smpquery_D(fabric, worker, hops):
    """DR SMPs (class 0x81): the reply is a directed-route response
    (D bit set, hop pointer at the end) with the same NodeInfo, PortInfo
    and NodeDescription smpquery -D reads."""
    route = ",".join(["0"] + [str(h) for h in hops])
    ours, (d, hp, hc), fmt = worker.call("madop", "smp_get", "SMPNodeInfo",
                                         dr=hops)
    assert fmt == "SMPFormatDirected" and d == 1 and hc == len(hops)
    want = node_info_want(diag(fabric, "Hca2", "smpquery", "-D",
                               "nodeinfo", route))
    assert _sub(ours, want) == want
    port = want["localPortNum"] or 1
    ours, _, _ = worker.call("madop", "smp_get", "SMPPortInfo", dr=hops,
                             mod=port)
    want = port_info_want(diag(fabric, "Hca2", "smpquery", "-D",
                               "portinfo", route, str(port)))
    assert _sub(ours, want) == want
    ours, _, _ = worker.call("madop", "smp_get", "SMPNodeDescription",
                             dr=hops)
    res = fabric.run(["smpquery", "-D", "nodedesc", route], "Hca2")
    assert res.stdout.split("....")[-1].strip(". \n") == ours["nodeString"]


def test_switch_info_matches_smpquery(fabric, worker, lids):
    switches = [lid for lid, r in lids.items() if r.nodeInfo.nodeType == 2]
    assert switches
    for lid in switches:
        ours, _, _ = worker.call("madop", "smp_get", "SMPSwitchInfo", lid=lid)
        d = diag(fabric, "Hca2", "smpquery", "switchinfo", str(lid))
        want = {"linearFDBCap": _i(d["LinearFdbCap"]),
                "randomFDBCap": _i(d["RandomFdbCap"]),
                "multicastFDBCap": _i(d["McastFdbCap"]),
                "linearFDBTop": _i(d["LinearFdbTop"]),
                "defaultPort": _i(d["DefPort"]),
                "lifeTimeValue": _i(d["LifeTime"]),
                "partitionEnforcementCap": _i(d["PartEnforceCap"]),
                "filterRawInboundCap": _i(d["FilterRawInbound"]),
                "filterRawOutboundCap": _i(d["FilterRawOutbound"])}
        assert _sub(ours, want) == want
        # The LFT block 0 as the SM programmed it: every HCA LID maps to
        # a port of the switch (ibroute's view).
        lft, _, _ = worker.call("madop", "smp_get",
                                "SMPLinearForwardingTable", lid=lid, mod=0)
        for hca in (x for x, r in lids.items() if r.nodeInfo.nodeType == 1):
            assert 1 <= lft["portBlock"][hca] <= ours["linearFDBTop"] + 8


_ERRORS = ("symbolErrorCounter", "linkErrorRecoveryCounter",
           "linkDownedCounter", "portRcvErrors",
           "portRcvRemotePhysicalErrors", "portRcvSwitchRelayErrors",
           "portXmitDiscards", "portXmitConstraintErrors",
           "portRcvConstraintErrors", "localLinkIntegrityErrors",
           "excessiveBufferOverrunErrors", "VL15Dropped")


def _pq(fabric, *args):
    d = diag(fabric, "Hca2", "perfquery", *args)
    return {k[0].lower() + k[1:]: _i(v) for k, v in d.items()}


def test_port_counters_match_perfquery(fabric, worker, lids):
    """PerformanceGet(PortCounters) through each node's PMA: the error
    counters equal perfquery's, the traffic counters lie between two
    perfquery readings taken around ours (each query is traffic)."""
    for lid in sorted(lids)[:3]:
        before = _pq(fabric, str(lid), "1")
        ours = worker.call("madop", "pm_get", "PMPortCounters", lid, 1)
        after = _pq(fabric, str(lid), "1")
        assert ours["portSelect"] == 1
        for k in _ERRORS:
            want = before["vL15Dropped" if k == "VL15Dropped" else k]
            assert ours[k] == want, k
        for k in ("portXmitData", "portRcvData", "portXmitPkts",
                  "portRcvPkts"):
            assert before[k] <= ours[k] <= after[k], k
        ext = worker.call("madop", "pm_get", "PMPortCountersExt", lid, 1)
        after = _pq(fabric, "-x", str(lid), "1")
        assert 0 < ext["portXmitPkts"] <= after["portXmitPkts"]


def test_port_counters_reset_like_perfquery_R(fabric, worker, lids):
    """PerformanceSet with CounterSelect all ones clears the counters (what
    perfquery -R does); perfquery reads them small afterwards."""
    lid = max(lid for lid, r in lids.items() if r.nodeInfo.nodeType == 1)
    assert _pq(fabric, str(lid), "1")["portXmitPkts"] > 10
    worker.call("madop", "pm_reset", lid, 1)
    after = _pq(fabric, str(lid), "1")
    assert after["portXmitPkts"] <= 4 and after["portRcvPkts"] <= 4


def test_sa_the_python_rdma_way(worker, lids):
    rec, n, mask = worker.call("madop", "sa_component_mask", min(lids))
    assert mask == 1 and rec["LID"] == min(lids)
    assert n == len(lids)          # the whole table (RMPP)


def test_sa_records_wrapping_smp_attributes(fabric, worker, lids):
    """SwitchInfoRecord, LinearForwardingTableRecord, PortInfoRecord,
    SMInfoRecord... each decoded from opensm's answer, compared with what
    the SMP to the node itself says."""
    sw = min(lid for lid, r in lids.items() if r.nodeInfo.nodeType == 2)
    got = worker.call("madop", "sa_record_types", sw)
    si = got["SASwitchInfoRecord"]
    assert len(si) == 1 and si[0]["LID"] == sw
    smp, _, _ = worker.call("madop", "smp_get", "SMPSwitchInfo", lid=sw)
    assert si[0]["switchInfo"]["linearFDBTop"] == smp["linearFDBTop"]
    lft = got["SALinearForwardingTableRecord"]
    smp, _, _ = worker.call("madop", "smp_get", "SMPLinearForwardingTable",
                            lid=sw, mod=0)
    assert lft and lft[0]["linearForwardingTable"]["portBlock"] == \
        smp["portBlock"]
    pir = got["SAPortInfoRecord"]
    assert len(pir) == 1 and pir[0]["portInfo"]["localPortNum"] in (0, 1)
    smi = got["SASMInfoRecord"]
    assert smi and smi[0]["SMInfo"]["SMState"] == 3        # MASTER
    assert got["SALinkRecord"] and all(
        r["fromLID"] == sw for r in got["SALinkRecord"])


def test_timeout_names_the_rpc_and_the_path(worker):
    """A LID nobody has: MADTimeoutError (also a TimeoutError) naming the
    RPC, the attribute and the path, after every try."""
    err, elapsed = worker.call("madop", "rpc_error", "SubnGet", "SMPNodeInfo",
                               lid=0x77, timeout_ms=100, retries=1)
    assert isinstance(err, IBA.MADTimeoutError), err
    assert isinstance(err, TimeoutError)
    text = str(err)
    assert "SubnGet(SMPNodeInfo)" in text and "LIDPath(DLID=119)" in text
    assert "after 2 tries (timeout 100 ms each)" in text
    assert elapsed < 0.2 * 2 + 0.5


def test_wrong_directed_route_times_out(worker):
    """A DR path through a port that leads nowhere: the SMP is lost; the
    error names the route."""
    err, _ = worker.call("madop", "rpc_error", "SubnGet", "SMPNodeInfo",
                         dr=(1, 8, 8), timeout_ms=100, retries=0)
    assert isinstance(err, IBA.MADTimeoutError), err
    assert "DR Path (0, 1, 8, 8)" in str(err)


def test_bad_requests_raise_before_sending(worker):
    err, _ = worker.call("madop", "rpc_error", "SubnSet", "SMPNodeInfo",
                         lid=1)
    assert isinstance(err, TypeError) and "SubnSet" in str(err)
    err, _ = worker.call("madop", "rpc_error", "SubnGet", "SMPNodeInfo",
                         dr=tuple(range(1, 70)))
    assert isinstance(err, ValueError) and "drPath" in str(err)


def test_error_status_is_a_mad_error(worker, lids):
    """PortInfo of a port the HCA does not have: the SMA answers with
    status 'invalid attribute or modifier'; MADError says so."""
    hca = min(lid for lid, r in lids.items() if r.nodeInfo.nodeType == 1)
    err, _ = worker.call("madop", "rpc_error", "SubnGet", "SMPPortInfo",
                         lid=hca, mod=77, timeout_ms=300, retries=0)
    if isinstance(err, IBA.MADTimeoutError):
        pytest.skip("ibsim does not answer an invalid port number")
    assert isinstance(err, mad.MADError) and not isinstance(
        err, IBA.MADTimeoutError), err
    assert err.status & 0x1C and "SubnGet(SMPPortInfo, modifier 0x4d)" in \
        str(err)


@pytest.mark.parametrize("attr", ["SANodeRecord", "SAPortInfoRecord"])
def test_get_table_rmpp_kernel_and_user(fabric, worker, lids, attr):
    """A GetTable answer of several MADs: through the RMPP agent (the
    kernel's job; rdma's ibsim shim's here) and joined in user space by
    rdma._rmpp (an agent without RMPP, each segment acknowledged): the
    same records, every node's."""
    import json
    import sys
    from pathlib import Path
    kern = [r.to_dict() for r in worker.call("sa_table", getattr(IBA,
                                                                 attr)())]
    res = fabric.run([sys.executable, str(Path(__file__).parent /
                                          "rmpp_user.py"), attr], "Hca3")
    user = json.loads(res.stdout)
    assert user["agents"] == [[3, 2, False, []]]
    assert user["records"] == kern
    if attr == "SANodeRecord":
        assert sorted(r["LID"] for r in kern) == sorted(lids)
    # 108-byte records 112 apart, 200 data bytes per segment.
    stride = {"SANodeRecord": 112, "SAPortInfoRecord": 72}[attr]
    segs = -(-(stride * len(kern)) // 200)
    assert len(kern) > 4 and user["acks"] == list(range(1, segs + 1))


def test_rdma_path_classes(fabric, worker, lids):
    """rdma.path.IBPath and rdma.path.IBDRPath (python-rdma's path
    objects) drive the same SMPs; the DR reply's ReturnPath holds the
    ingress ports, as smpquery -D sees the route."""
    sw = min(lid for lid, r in lids.items() if r.nodeInfo.nodeType == 2)
    a, b, ret, text = worker.call("madop", "smp_real_paths", sw, "0,1")
    assert a["nodeGUID"] == lids[sw].nodeInfo.nodeGUID
    # Hca2's port 1 leads to a switch.
    assert b["nodeType"] == 2 and b["nodeGUID"] in {
        r.nodeInfo.nodeGUID for r in lids.values()}
    assert text == "DR Path (0, 1)"
    assert ret[1] == b["localPortNum"]     # the switch port it entered
