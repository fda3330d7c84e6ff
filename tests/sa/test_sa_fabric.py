"""SA queries against opensm on ibsim, compared with infiniband-diags'
saquery field by field.

The main fabric is ibsim's two-switch, four-HCA example with opensm on
Hca1; our library runs in one shimmed worker on Hca2 (see conftest.py).
These tests were written when the sa tier ran on Debian's ibsim shim,
which has no RMPP and loses the last 32 bytes of every MAD, so they
compare answers that fit in one MAD, before byte 224; multi-MAD answers
are also tested on recorded data in test_mad_codec.py, and whole tables
through rdma's own shim in test_umad2sim.py.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import saquery_out as sq
from rdma import _mad as mad
from rdma._errors import RDMAError
from rdma.IBA import GID

from fabric import ROOT, Fabric

SA_NO_RECORDS = 0x0300
#: x86-64 system call numbers (/proc/PID/syscall) of poll and ppoll.
POLL, PPOLL = 7, 271


@pytest.fixture(scope="module")
def lids(worker):
    """LID -> NodeRecord of every node, found with NodeRecord Gets."""
    found = {}
    misses = 0
    lid = 1
    while misses < 3:
        try:
            found[lid] = worker.call("sa_get", mad.SANodeRecord(LID=lid))
            misses = 0
        except mad.SAError as e:
            assert e.sa_status == mad.SA_STATUS_NO_RECORDS
            misses += 1
        lid += 1
    return found


@pytest.fixture(scope="module")
def hcas(lids):
    """LID -> port GID of the HCAs."""
    return {lid: GID.from_parts(0xFE80 << 48, r.nodeInfo.portGUID)
            for lid, r in lids.items() if r.nodeInfo.nodeType == 1}


def saquery(fabric, *args, node="Hca3"):
    return sq.parse(fabric.run(["saquery", *args], node).stdout)


def test_fabric_is_up(fabric, worker, hcas, lids):
    """opensm assigned LIDs: 4 HCAs and 2 switches, SM LID on every port."""
    ep = worker.call("end_port")
    assert ep["state"] == 4 and ep["sm_lid"] in hcas and ep["lid"] in hcas
    assert len(hcas) == 4 and len(lids) == 6
    assert ep["pkeys"][0] == 0xFFFF
    assert fabric.startup_s < 20


def test_path_records_by_lids_match_saquery(fabric, worker, hcas):
    """PathRecord Get by (SLID, DLID) for every ordered pair of HCAs equals
    ``saquery -p --src-to-dst`` field by field."""
    for s in hcas:
        for d in hcas:
            if s == d:
                continue
            ours = worker.call("path_query", SLID=s, DLID=d)
            theirs = saquery(fabric, "-p", "--src-to-dst", f"{s}:{d}")
            assert len(theirs) == 1
            want = sq.path_record(theirs[0])
            assert sq.ours(ours, want) == want, (s, d)
            assert (ours.SLID, ours.DLID) == (s, d)
            assert ours.SGID == hcas[s] and ours.DGID == hcas[d]


def test_path_records_by_gids_match_saquery(fabric, worker, hcas):
    """PathRecord Get by (SGID, DGID) equals ``saquery PR --sgid-to-dgid``."""
    lids = sorted(hcas)
    for s, d in zip(lids, lids[1:] + lids[:1]):
        sgid, dgid = hcas[s], hcas[d]
        ours = worker.call("path_query", SGID=sgid, DGID=dgid)
        theirs = saquery(fabric, "PR", "--sgid-to-dgid", f"{sgid}-{dgid}")
        want = sq.path_record(theirs[0])
        assert sq.ours(ours, want) == want
        assert (ours.SLID, ours.DLID) == (s, d)


def test_node_records_match_saquery(fabric, lids):
    """NodeRecord Get by LID equals ``saquery NR <lid>`` for every node."""
    for lid, ours in lids.items():
        theirs = saquery(fabric, "NR", str(lid))
        assert len(theirs) == 1
        want = sq.node_record(theirs[0])
        assert sq.ours(ours, want) == want


def test_port_info_records_match_saquery(fabric, worker, hcas, lids):
    """PortInfoRecord GetTable by LID equals ``saquery PIR <lid>`` (an HCA
    has one record, a switch port 0 and its linked ports)."""
    for lid in list(hcas)[:2] + [min(set(lids) - set(hcas))]:
        ours = worker.call("sa_table", mad.SAPortInfoRecord(endportLID=lid))
        theirs = saquery(fabric, "PIR", str(lid))
        assert ours and len(ours) <= len(theirs)
        for o, t in zip(ours, theirs):
            want = sq.port_info_record(t)
            assert sq.ours(o, want) == want


def test_link_records_match_saquery(fabric, worker):
    """LinkRecord GetTable (all links, 8 bytes each: fits in one MAD)
    equals ``saquery -x``."""
    ours = worker.call("sa_table", mad.SALinkRecord())
    theirs = [sq.link_record(r) for r in saquery(fabric, "-x")]
    assert len(ours) == len(theirs) == 12
    assert [sq.ours(o, t) for o, t in zip(ours, theirs)] == theirs


def test_service_record_set_get_delete(fabric, worker):
    """ServiceRecord: Set, then Get it back and find it with ``saquery SR``
    field by field; Delete, then Get says ERR_NO_RECORDS.

    The shim loses the last 32 bytes of every MAD: ServiceData64[1]
    (MAD bytes 224-231) is neither sent nor received intact, so the
    comparison stops at ServiceData64 (record byte 168 = MAD byte 224).
    """
    ep = worker.call("end_port")
    rec = mad.SAServiceRecord(
        serviceID=0x1000_0000_0000_00AB, serviceGID=ep["gid"],
        servicePKey=0xFFFF, serviceLease=0xFFFFFFFF,
        serviceName=b"rdma-sa-test",
        serviceData8=tuple(range(1, 17)),
        serviceData16=tuple(range(0x100, 0x108)),
        serviceData32=(0xDEADBEEF, 1, 2, 3),
        serviceData64=(0x0123456789ABCDEF, 0))
    intact = 168
    got = worker.call("sa_set", rec)
    assert got.pack()[:intact] == rec.pack()[:intact]
    # opensm matches a delete on the P_Key too.
    key = mad.SAServiceRecord(serviceID=rec.serviceID,
                              serviceGID=rec.serviceGID, servicePKey=0xFFFF)
    back = worker.call("sa_get", key)
    assert back.pack()[:intact] == rec.pack()[:intact]
    assert back.serviceData64[0] == 0x0123456789ABCDEF
    theirs = [sq.service_record(r) for r in saquery(fabric, "SR")]
    mine = [t for t in theirs if t["serviceID"] == rec.serviceID]
    assert len(mine) == 1
    del mine[0]["serviceData64"]     # past MAD byte 224: lost by the shim
    assert sq.ours(back, mine[0]) == mine[0]
    worker.call("sa_delete", key)
    with pytest.raises(mad.SAError) as ei:
        worker.call("sa_get", key)
    assert ei.value.status == SA_NO_RECORDS
    assert "ERR_NO_RECORDS" in str(ei.value)


def test_mcmember_join_query_leave(fabric, worker):
    """MCMemberRecord: create+join a group, find it with a GetTable and
    with ``saquery -g``/``-m`` field by field, then leave it."""
    ep = worker.call("end_port")
    # Not an IPoIB MGID (ff1x:401b/601b): opensm would force the IPoIB
    # broadcast group's Q_Key on those.
    mgid = "ff12:e001::1:2345"
    join = mad.SAMCMemberRecord(
        MGID=mgid, portGID=ep["gid"], QKey=0x11111111, PKey=0xFFFF,
        TClass=0, SL=0, flowLabel=0, joinState=mad.MCMEMBER_JOIN_FULL,
        MTUSelector=2, MTU=mad.MTU_2048, rateSelector=2, rate=3)
    got = worker.call("sa_set", join)
    assert str(got.MGID) == str(GID(mgid)) and got.MLID >= 0xC000
    assert got.QKey == 0x11111111 and got.joinState == 1
    table = worker.call("sa_table", mad.SAMCMemberRecord(MGID=mgid))
    # opensm hides PortGID and JoinState from untrusted (SM_Key 0)
    # queries; saquery -m shows the same.
    assert [(str(r.MGID), r.MLID) for r in table] == [(str(GID(mgid)),
                                                        got.MLID)]
    groups = [sq.mcmember_group(r) for r in saquery(fabric, "-g")]
    want = [g for g in groups if g["MGID"] == str(GID(mgid))]
    assert len(want) == 1 and sq.ours(got, want[0]) == want[0]
    members = [sq.mcmember_member(r) for r in saquery(fabric, "-m")]
    want = [m for m in members if m["MGID"] == str(GID(mgid))]
    assert len(want) == 1 and sq.ours(table[0], want[0]) == want[0]
    worker.call("sa_delete", mad.SAMCMemberRecord(
        MGID=mgid, portGID=ep["gid"], joinState=mad.MCMEMBER_JOIN_FULL))
    assert worker.call("sa_table", mad.SAMCMemberRecord(MGID=mgid)) == []


def test_resolve_path_every_pair(worker, hcas):
    """resolve_path fills exactly what the SA's PathRecord says, for every
    ordered pair of HCAs, by LIDs and by GIDs."""
    for s in hcas:
        for d in hcas:
            if s == d:
                continue
            pr = worker.call("path_query", SLID=s, DLID=d, reversible=1,
                             numbPath=1)
            want = {"SGID": str(pr.SGID), "DGID": str(pr.DGID),
                    "SLID": pr.SLID, "DLID": pr.DLID, "SL": pr.SL,
                    "pkey": pr.PKey, "MTU": pr.MTU, "rate": pr.rate,
                    "packet_life_time": pr.packetLifeTime,
                    "flow_label": pr.flowLabel, "hop_limit": pr.hopLimit,
                    "traffic_class": pr.TClass, "has_grh": False}
            by_lid = worker.call("resolve", SLID=s, DLID=d)
            by_gid = worker.call("resolve", SGID=str(hcas[s]),
                                 DGID=str(hcas[d]))
            for got in (by_lid, by_gid):
                assert {k: got[k] for k in want} == want, (s, d)
            assert 1 <= want["MTU"] <= 5 and want["rate"] >= 2


def test_resolve_path_defaults_and_properties(worker, hcas):
    """Without SGID the end port's GID is the source; properties become
    query components (a P_Key the port does not have: no path)."""
    ep = worker.call("end_port")
    dst = next(lid for lid in hcas if lid != ep["lid"])
    got = worker.call("resolve", DGID=str(hcas[dst]))
    assert got["SGID"] == ep["gid"] and got["DLID"] == dst
    got = worker.call("resolve", DLID=dst, properties={"PKey": 0xFFFF})
    assert got["SLID"] == ep["lid"] and got["pkey"] == 0xFFFF
    with pytest.raises(mad.SAError) as ei:
        worker.call("resolve", DLID=dst, properties={"PKey": 0x8123})
    assert ei.value.sa_word == "ERR_NO_RECORDS"


def test_unknown_lid_and_gid_give_no_records(worker, hcas):
    """A destination nobody has: the SA's status decoded, not a crash."""
    with pytest.raises(mad.SAError) as ei:
        worker.call("path_query", SLID=min(hcas), DLID=0x77)
    assert ei.value.status == SA_NO_RECORDS
    assert ei.value.words == [mad.sa_status_word(SA_NO_RECORDS)]
    with pytest.raises(mad.SAError) as ei:
        worker.call("resolve", DGID="fe80::99:1")
    assert ei.value.sa_status in (mad.SA_STATUS_NO_RECORDS,
                                  mad.SA_STATUS_REQ_INVALID_GID)
    assert worker.call("sa_table", mad.SAPathRecord(SLID=min(hcas),
                                                    DLID=0x77)) == []


def test_missing_device_and_port(worker):
    """Opening a CA or port that does not exist is a clear error."""
    with pytest.raises(RDMAError, match="no umad end port 'nope/1'|nope"):
        worker.call("open_port", "nope", 1)
    with pytest.raises(RDMAError, match="has no port 7"):
        worker.call("open_port", "ibsim0", 7)
    assert "ibsim0/1" in worker.call("open_port", "ibsim0", 1)


def test_gil_is_released_while_waiting(worker):
    """Another thread runs while recv() waits for a MAD."""
    ticks, waited = worker.call("gil_check", 300)
    assert 0.25 <= waited < 1.0
    assert ticks > 50


def test_path_query_cost(worker, hcas):
    """A PathRecord Get costs well under a millisecond of SA time plus our
    overhead; record the figure."""
    per = worker.call("time_path_queries", 50, max(hcas))
    print(f"PathRecord Get round trip: {per * 1e3:.3f} ms")
    assert per < 0.05


def test_cli_saquery_json_matches_saquery(fabric, hcas):
    """``ibtool saquery PR --src-to-dst --json`` equals saquery's output:
    the same fields under saquery's names, with the values it prints."""
    s, d = sorted(hcas)[:2]
    res = fabric.run([sys.executable, "-m", "rdma", "saquery", "PR",
                      "--src-to-dst", f"{s}:{d}", "--json"], "Hca4")
    ours = json.loads(res.stdout)
    want = saquery(fabric, "-p", "--src-to-dst", f"{s}:{d}")[0]
    del want["_kind"]
    assert len(ours) == 1 and ours[0]["type"] == "PathRecord"
    assert len(want) == 16
    assert {k: str(ours[0][k]) for k in want} == want
    res = fabric.run([sys.executable, "-m", "rdma", "saquery", "NR",
                      str(s)], "Hca4")
    assert res.stdout.startswith("NodeRecord dump:")
    res = fabric.run([sys.executable, "-m", "rdma", "saquery", "PR",
                      "--src-to-dst", "1"], "Hca4", check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_example_resolves_and_builds_ah(fabric, hcas):
    """examples/sa_resolve_path.py prints the path to a GID."""
    dst = max(hcas)
    res = fabric.run([sys.executable, str(ROOT / "examples" /
                                          "sa_resolve_path.py"),
                      str(hcas[dst])], "Hca2")
    assert f"DLID {dst}" in res.stdout
    assert "ah_attr" in res.stdout


def test_ctrl_c_interrupts_a_wait(fabric):
    """SIGINT during a blocking recv() raises KeyboardInterrupt promptly."""
    code = ("import rdma.umad as u, sys\n"
            "m = u.get_umad()\n"
            "m.register(3, 2, rmpp=True)\n"
            "print('waiting', flush=True)\n"
            "try:\n"
            "    m.recvfrom(None)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True)\n"
            "    m.close()\n"
            "    sys.exit(3)\n")
    p = fabric.popen([sys.executable, "-c", code], "Hca4",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        # The only child of coreutils timeout is the Python process.
        kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
        assert len(kids) == 1
        kid = int(kids[0])
        # Ready: its main thread blocked in recvfrom()'s poll (a SIGINT
        # still in print() would be raised outside the try).
        deadline = time.monotonic() + 60
        while open(f"/proc/{kid}/syscall").read().split()[0] not in \
                (str(POLL), str(PPOLL)):
            assert time.monotonic() < deadline, "recvfrom() never waited"
            time.sleep(0.01)
        os.kill(kid, signal.SIGINT)
        out, err = p.communicate(timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
    assert "interrupted" in out, err
    assert p.returncode == 3


def test_dead_sm_times_out_in_bounded_time(tmp_path):
    """opensm gone after SUBNET UP: a query ends in MADTimeoutError within
    timeout * (retries + 1), never hangs.  (ibsim hands an undeliverable
    MAD back at once with status ETIMEDOUT, as the kernel does after the
    timeout, so here it is fast.)"""
    from conftest import TOPOLOGIES
    with Fabric(TOPOLOGIES["1sw2hca"], tmp_path) as f:
        w = f.worker("Hca2")
        assert w.call("end_port")["sm_lid"] > 0
        f.opensm.send_signal(signal.SIGTERM)
        f.opensm.wait(10)
        elapsed, err = w.call("timed_query", 1, 150, 2)
    assert isinstance(err, mad.MADTimeoutError), err
    assert isinstance(err, TimeoutError)
    assert "after 3 tries (timeout 150 ms each)" in str(err)
    assert elapsed < 0.15 * 3 + 0.5


def test_no_sm_at_all(fabrics):
    """ibsim without a subnet manager: no SM LID is a clear error, and a
    MAD to a LID nobody has times out."""
    f = fabrics("1sw2hca", sm=False)
    w = f.worker("Hca2")
    assert w.call("end_port")["sm_lid"] == 0
    with pytest.raises(RDMAError, match="no subnet manager"):
        w.call("path_query", DLID=1)
    elapsed, err = w.call("timed_query", 1, 100, 1)
    assert isinstance(err, mad.MADTimeoutError) and elapsed < 0.7


def test_send_arguments_are_range_checked(fabric):
    """umad send's qkey and GRH fields are range-checked, naming the field
    (PyArg_Parse's "k"/"I" used to wrap: qkey=2**64+5 sent qkey 5)."""
    code = ("import rdma.umad as u\n"
            "m = u.get_umad()\n"
            "agent = m.register(3, 2, rmpp=True)\n"
            "mad = bytes(256)\n"
            "gid = bytes(16)\n"
            "cases = [dict(qkey=2**64 + 5), dict(qkey=-1), dict(qkey=2**32),\n"
            "         dict(grh=(gid, 2**32 + 1, 64, 0, 0)),\n"
            "         dict(grh=(gid, 0, 2**64 + 64, 0, 0)),\n"
            "         dict(grh=(gid, 0, 64, 0, 2**64 + 1)),\n"
            "         dict(grh=(gid, 0, 64, -1, 0))]\n"
            "for kw in cases:\n"
            "    try:\n"
            "        m._port.send(agent, mad, dlid=1, **kw)\n"
            "    except (ValueError, OverflowError) as e:\n"
            "        print('refused', e, flush=True)\n"
            "    else:\n"
            "        print('sent', kw, flush=True)\n"
            "m.close()\n")
    res = fabric.run([sys.executable, "-c", code], "Hca3")
    lines = res.stdout.splitlines()
    assert len(lines) == 7 and all(ln.startswith("refused") for ln in lines), \
        res.stdout
    for ln, field in zip(lines, ["qkey"] * 3 + ["sgid_index", "hop_limit",
                                                "flow_label",
                                                "traffic_class"]):
        assert field in ln, ln


def test_session_fabric_outlives_a_slow_tier(fabric, worker):
    """The session's fabrics and workers live as long as the whole tier
    may take (CI's 90 minutes), not a test's 900 s: under load the tier
    took 16 minutes and a fabric started by an early test was gone by
    a late one.  Their processes are bounded by coreutils timeout with
    that lifetime."""
    assert fabric.lifetime >= 90 * 60
    cmd = open(f"/proc/{worker.proc.pid}/cmdline").read().split("\0")
    assert cmd[:3] == ["timeout", "-k", "5"], cmd
    assert int(cmd[3]) >= 90 * 60, cmd
