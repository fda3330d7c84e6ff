"""rdma.vmad.VMAD on rxe (RoCE), in the Soft-RoCE VM: MADs from a UD QP of
our own, without umad.

What rxe's kernel (ib_core's MAD layer, 6.1) does with what arrives at a
port's QP1, as measured here:

- a GMP Get of a class no agent on that port serves (PerfMgt, CM's
  ClassPortInfo, BM, DevMgt, SA: RoCE has no SA, rxe no PMA) is answered
  by the kernel itself with the status "unsupported method/attribute"
  (0x0C): the round trip through QP1 works, the answer is a refusal;
- an SMP sent to QP1 is dropped (SMPs belong to QP0, which RoCE lacks):
  a timeout;
- a class that a process registered through umad on that port is
  delivered to that process: a PerfMgt agent in user space
  (tests/vm/pma_listener.py) receives a VMAD's PerformanceGet
  (PortCounters) through QP1 and answers it through rdma.umad (the reply
  leaves with a GRH from the GID index the request arrived on).

Between two VMADs (their UD QPs, by GID) any GMP works, as on the
software fabric (tests/host/test_vmad.py).
"""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rdma
import rdma.IBA as IBA
import rdma.path
import rdma.vmad

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "host"))
import fabric_helpers as fh  # noqa: E402
from verbs_fixtures import (DEVICE, GID_INDEX, HOST1_DEVICE, HOST2_DEVICE,
                            TWO_HOST)

HERE = Path(__file__).resolve().parent
QKEY = 0x00C0FFEE
#: requester and target device: the two hosts' ports (traffic crosses the
#: veth pair) with --two-host, else rxe0 to itself
PAIR = (HOST1_DEVICE, HOST2_DEVICE) if TWO_HOST else (DEVICE, DEVICE)


def gid_path(src, dst, dqpn, qkey):
    """A resolved path from end port src to the RoCE v2 GID of dst."""
    return rdma.path.resolve_path(None, rdma.path.IBPath(
        src, DGID=dst.gids[GID_INDEX], dqpn=dqpn, qkey=qkey))


@pytest.fixture
def qp1():
    """A VMAD on the first port and a path to QP1 of the second."""
    src, dst = (rdma.get_end_port(n) for n in PAIR)
    path = gid_path(src, dst, 1, IBA.IB_DEFAULT_QP1_QKEY)
    with rdma.vmad.VMAD(src, path) as v:
        v.timeout_ms, v.retries = 2000, 1
        yield v, path


GETS = [
    ("PerformanceGet", IBA.PMPortCounters),
    ("PerformanceGet", IBA.MADClassPortInfo),
    ("CommMgtGet", IBA.MADClassPortInfo),
    ("BMGet", IBA.MADClassPortInfo),
    ("DevMgtGet", IBA.MADClassPortInfo),
    ("SubnAdmGet", IBA.MADClassPortInfo),
]


@pytest.mark.parametrize("method,attr", GETS,
                         ids=[f"{m}({a.__name__})" for m, a in GETS])
def test_gmp_to_qp1_is_answered_unsupported_by_the_kernel(qp1, method,
                                                          attr):
    """The GMP reaches QP1 and the kernel's answer comes back to our UD QP:
    a MADError with status 0x0C, at once (not a timeout)."""
    v, path = qp1
    t0 = time.monotonic()
    with pytest.raises(IBA.MADError,
                       match=rf"{method}\({attr.__name__}\) to .* got "
                             r"error status 0xc - method/attribute "
                             r"combination not supported") as ei:
        getattr(v, method)(attr, path)
    assert not isinstance(ei.value, IBA.MADTimeoutError)
    assert time.monotonic() - t0 < 2 * v.timeout_ms / 1000


def test_smp_to_qp1_is_not_answered(qp1):
    """An SMP through QP1 is dropped (RoCE has no QP0 and no SM): a
    MADTimeoutError that names the attribute and the path."""
    v, path = qp1
    v.timeout_ms, v.retries = 300, 1
    with pytest.raises(IBA.MADTimeoutError,
                       match=r"SubnGet\(SMPNodeInfo\) to .*DQPN=1.* no reply "
                             r"after 2 tries \(timeout 300 ms each\)"):
        v.SubnGet(IBA.SMPNodeInfo, path)


def test_perfmgt_get_is_answered_by_a_umad_agent_through_qp1(qp1):
    """A PerfMgt agent registered through umad on the target port (another
    process) receives a VMAD's PerformanceGet(PortCounters) from QP1 (the
    kernel hands it over instead of refusing it) and answers it through
    rdma.umad: the answer carries the agent's mark and comes from QP1.
    (Before rdma.umad set the GRH's source GID index, the reply left from
    GID 0, the link-local one, and umad_send failed with EIO.)"""
    v, path = qp1
    v.timeout_ms, v.retries = 2000, 1
    srv = subprocess.Popen(
        [sys.executable, str(HERE / "pma_listener.py"), PAIR[1], "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        line = srv.stdout.readline()
        assert line.strip() == "ready", line + srv.communicate(timeout=30)[1]
        pc = v.PerformanceGet(IBA.PMPortCounters(portSelect=1), path)
        out, err = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert srv.returncode == 0 and "done 1" in out, out + err
    assert isinstance(pc, IBA.PMPortCounters)
    assert pc.portSelect == 1 and pc.symbolErrorCounter == 0x42, pc
    assert v.reply_path.sqpn == 1
    # the request came from our UD QP and GID
    sender = f"got {v.qp_num} {path.SGID} PMPortCounters 1"
    assert out.count(sender) == 1, (sender, out)


def test_gmps_between_two_vmads():
    """A requester VMAD and a responder VMAD (a thread) on the two ports,
    addressed by GID and QP number: answers, BUSY retries and an error
    status, as on the software fabric."""
    src, dst = (rdma.get_end_port(n) for n in PAIR)
    with rdma.vmad.VMAD(dst, gid_path(dst, src, 2, QKEY)) as srv:
        path = gid_path(src, dst, srv.qp_num, QKEY)
        with rdma.vmad.VMAD(src, path) as cli:
            cli.busy_delay = 0.001
            answers = [0, IBA.MAD_STATUS_BUSY, 0,
                       IBA.MAD_STATUS_INVALID_ATTR_OR_MODIFIER]
            seen = []
            t = threading.Thread(target=lambda: seen.extend(
                fh.vmad_serve(srv, answers, timeout=30)))
            t.start()
            try:
                got = cli.PerformanceGet(IBA.MADClassPortInfo, path)
                assert got.capabilityMask == srv.qp_num & 0xFFFF
                assert cli.reply_path.sqpn == srv.qp_num
                # BUSY, then the answer (the same transaction, retried)
                assert cli.BMGet(IBA.MADClassPortInfo, path) \
                    .capabilityMask == srv.qp_num & 0xFFFF
                with pytest.raises(IBA.MADError,
                                   match="got error status 0x1c"):
                    cli.BMGet(IBA.MADClassPortInfo, path)
            finally:
                t.join(30)
            assert len(seen) == 4 and seen[1] == seen[2] and \
                len({seen[0], seen[1], seen[3]}) == 3


def test_qp0_path_is_not_reachable(qp1):
    """RoCE has no QP0: an SMP along a path to QP0 gets no answer."""
    v, path = qp1
    p0 = path.copy(dqpn=0)
    v.timeout_ms, v.retries = 300, 0
    with pytest.raises((IBA.MADTimeoutError, rdma.RDMAError)):
        v.SubnGet(IBA.SMPNodeInfo, p0)
