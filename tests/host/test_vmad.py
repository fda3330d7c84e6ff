"""rdma.vmad.VMAD on the software fabric: MADs between the UD QPs of two
VMADs (a requester and a responder thread, real verbs objects of ucx0),
and the clear refusal of QP0/QP1, which the fabric does not have."""
import threading
import time

import pytest

import rdma
import rdma.IBA as IBA
import rdma.path
import rdma.vmad

import fabric_helpers as fh

QKEY = 0x00C0FFEE


@pytest.fixture
def ep():
    return rdma.get_end_port(provider="ucx")


@pytest.fixture
def pair(ep):
    """A responder VMAD and a requester VMAD aimed at it."""
    made = []

    def make():
        srv = rdma.vmad.VMAD(ep, rdma.path.IBPath(
            ep, DLID=ep.lid, SLID=ep.lid, dqpn=2, qkey=QKEY))
        made.append(srv)
        path = rdma.path.IBPath(ep, DLID=ep.lid, SLID=ep.lid,
                                dqpn=srv.qp_num, qkey=QKEY)
        cli = rdma.vmad.VMAD(ep, path)
        made.append(cli)
        return srv, cli, path
    yield make
    for v in made:
        v.close()


def test_qp1_on_the_fabric_is_refused(ep):
    """The VMAD is made (python-rdma's programs make one before they know
    they need it); a MAD to QP1 on the fabric is refused, saying why."""
    sa = rdma.path.IBPath(ep, DLID=ep.lid, dqpn=1,
                          qkey=IBA.IB_DEFAULT_QP1_QKEY)
    with rdma.vmad.VMAD(ep, sa) as v:
        with pytest.raises(rdma.RDMAError, match="software fabric .* has "
                                                 "no QP0/QP1"):
            v.SubnAdmGet(IBA.SANodeRecord())
        with pytest.raises(rdma.RDMAError, match="software fabric .* has "
                                                 "no QP0/QP1"):
            v.PerformanceGet(IBA.PMPortCounters, sa)


def test_rpcs_between_two_vmads(pair):
    srv, cli, path = pair()
    seen = []
    t = threading.Thread(
        target=lambda: seen.extend(fh.vmad_serve(srv, [0, 0])))
    t.start()
    try:
        assert cli.BMGet(IBA.MADClassPortInfo, path).capabilityMask == \
            srv.qp_num & 0xFFFF
        assert cli.PerformanceGet(IBA.MADClassPortInfo, path) \
            .capabilityMask == srv.qp_num & 0xFFFF
        assert cli.reply_path.sqpn == srv.qp_num
    finally:
        t.join(15)
    assert len(seen) == 2 and seen[0] != seen[1]


def test_busy_and_error_answers(pair):
    srv, cli, path = pair()
    cli.busy_delay = 0.001
    t = threading.Thread(target=fh.vmad_serve, args=(srv, [
        IBA.MAD_STATUS_BUSY, IBA.MAD_STATUS_BUSY, 0,
        IBA.MAD_STATUS_UNSUP_METHOD_ATTR_COMBO]))
    t.start()
    try:
        assert cli.BMGet(IBA.MADClassPortInfo, path).baseVersion == 1
        with pytest.raises(IBA.MADError, match="got error status 0xc"):
            cli.BMGet(IBA.MADClassPortInfo, path)
    finally:
        t.join(15)


def test_no_answer_times_out(pair):
    srv, cli, path = pair()
    cli.timeout_ms, cli.retries = 50, 1
    t0 = time.monotonic()
    with pytest.raises(IBA.MADTimeoutError,
                       match=r"BMGet\(MADClassPortInfo\) to .*no reply "
                             r"after 2 tries \(timeout 50 ms each\)"):
        cli.BMGet(IBA.MADClassPortInfo, path)
    assert time.monotonic() - t0 < 2
