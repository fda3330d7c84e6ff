"""Interop on the wire: our RC and UD QPs against rdma-core's C
``ibv_rc_pingpong`` / ``ibv_ud_pingpong`` (our code as client and as
server, on rxe0 loopback and across the rxe1<->rxe2 veth), and immediate
data byte order against pyverbs (Debian's /usr/bin/python3)."""
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import (DEVICE, GID_INDEX, HOST1_DEVICE, HOST2_DEVICE,
                            TWO_HOST, Side, check_ok, poll_cq)
import interop_peer

pytest_plugins = ["verbs_fixtures"]

HERE = Path(__file__).resolve().parent
TOOLS = {"rc": "ibv_rc_pingpong", "ud": "ibv_ud_pingpong"}
SIZES = {"rc": 4096, "ud": 512}
ITERS = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """True if some socket listens on TCP *port* (IPv4 or IPv6)."""
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            if (parts[3] == "0A" and
                    int(parts[1].rsplit(":", 1)[1], 16) == port):
                return True
    return False


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 30):
    """Wait until *proc* listens on *port* (never connect to probe: the C
    servers accept exactly one connection)."""
    deadline = time.monotonic() + timeout
    while not listening(port):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"C server exited early "
                                 f"({proc.returncode}):\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"C server not listening on {port} after "
                                 f"{timeout} s")
        time.sleep(0.02)


def finish(proc: subprocess.Popen, timeout: float = 60) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"C peer timed out:\n{out}\n{err}")
    assert proc.returncode == 0, \
        f"C peer failed ({proc.returncode}):\n{out}\n{err}"
    assert f"{ITERS} iters in" in out, out
    assert "invalid data" not in out, out
    return out


def c_cmd(kind, dev, port, server_host=None):
    cmd = [TOOLS[kind], "-d", dev, "-g", str(GID_INDEX), "-p", str(port),
           "-n", str(ITERS), "-s", str(SIZES[kind]), "-r", "50", "-c"]
    if server_host:
        cmd.append(server_host)
    return cmd


def _topology(name):
    if name == "loopback":
        return DEVICE, DEVICE
    if not TWO_HOST:
        pytest.skip("needs the two-host VM (python -m rdma.testvm --two-host)")
    return HOST1_DEVICE, HOST2_DEVICE


@pytest.mark.parametrize("topology", ["loopback", "two_host"])
@pytest.mark.parametrize("kind", ["rc", "ud"])
def test_we_are_client(kind, topology):
    """Our QP (client) ping-pongs with ibv_{rc,ud}_pingpong (server): same
    exchange format, every echoed byte checked, the C side validates ours."""
    ours, theirs = _topology(topology)
    port = free_port()
    proc = subprocess.Popen(c_cmd(kind, theirs, port), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, proc)
        res = interop_peer.run_peer(kind, server=False, host="127.0.0.1",
                                    port=port, device=ours,
                                    gid_index=GID_INDEX,
                                    size=SIZES[kind], iters=ITERS, rx_depth=50)
    except BaseException:
        proc.kill()
        out, err = proc.communicate()
        print(out, err)
        raise
    out = finish(proc)
    assert res["iters"] == ITERS
    # the C side saw our QPN
    assert "remote address" in out


@pytest.mark.parametrize("topology", ["loopback", "two_host"])
@pytest.mark.parametrize("kind", ["rc", "ud"])
def test_we_are_server(kind, topology):
    """ibv_{rc,ud}_pingpong (client, -c) ping-pongs with our QP (server)."""
    ours, theirs = _topology(topology)
    lsock = socket.create_server(("", 0))
    port = lsock.getsockname()[1]
    proc = subprocess.Popen(c_cmd(kind, theirs, port, "127.0.0.1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        res = interop_peer.run_peer(kind, server=True, port=port, device=ours,
                                    gid_index=GID_INDEX, size=SIZES[kind],
                                    iters=ITERS, rx_depth=50,
                                    listen_sock=lsock,
                                    validate=True)
    except BaseException:
        proc.kill()
        out, err = proc.communicate()
        print(out, err)
        raise
    finally:
        lsock.close()
    finish(proc)
    assert res["iters"] == ITERS


def test_exchange_message_format(end_port):
    """The 52-byte LID:QPN:PSN:GID message, as rc_pingpong.c formats it."""
    gid = end_port.gids[GID_INDEX]
    m = interop_peer.encode_dest(0, 0x11, 0xABCDEF, gid)
    assert len(m) == 52 and m.endswith(b"\0")
    assert m.startswith(b"0000:000011:abcdef:00000000000000000000ffff")
    assert interop_peer.decode_dest(m) == (0, 0x11, 0xABCDEF, bytes(gid))


PYVERBS_PEER = r'''
import socket, sys, time
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.qp import QPCap, QPInitAttr, QPAttr, QP
from pyverbs.mr import MR
from pyverbs.wr import SGE, RecvWR, SendWR
from pyverbs.addr import AH, AHAttr, GlobalRoute
dev, gidx = sys.argv[1], int(sys.argv[2])
ctx = Context(name=dev)
pd = PD(ctx)
cq = CQ(ctx, 8)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, sq_sig_all=1,
                       cap=QPCap(max_send_wr=4, max_recv_wr=4)))
a = QPAttr()
a.qp_state = e.IBV_QPS_INIT; a.pkey_index = 0
a.port_num = 1; a.qkey = 0x11111111
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
          e.IBV_QP_QKEY)
a.qp_state = e.IBV_QPS_RTR
qp.modify(a, e.IBV_QP_STATE)
a.qp_state = e.IBV_QPS_RTS; a.sq_psn = 0
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
mr = MR(pd, 256, e.IBV_ACCESS_LOCAL_WRITE)
qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 256, mr.lkey)]))
print(qp.qp_num, flush=True)
peer_qpn = int(sys.stdin.readline())
t0 = time.monotonic()
while True:
    n, wcs = cq.poll()
    if n:
        break
    assert time.monotonic() - t0 < 30, 'no message'
wc = wcs[0]
print(wc.status, wc.byte_len, socket.ntohl(wc.imm_data), mr.read(8, 40).hex(),
      flush=True)
gr = GlobalRoute(dgid=ctx.query_gid(1, gidx), sgid_index=gidx, hop_limit=1)
ah = AH(pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
mr.write(b'pyverbs!', 8, 0)
wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND_WITH_IMM, num_sge=1,
            sg=[SGE(mr.buf, 8, mr.lkey)], imm_data=socket.htonl(0xA1B2C3D4))
wr.set_wr_ud(ah, peer_qpn, 0x11111111)
qp.post_send(wr)
while True:
    n, wcs = cq.poll()
    if n:
        break
print('sent', wcs[0].status, flush=True)
'''


def test_imm_data_byte_order_against_pyverbs(ctx, tmp_path):
    """SEND_WITH_IMM between our UD QP and a pyverbs UD QP: imm_data is a
    host-order int on both sides and big-endian on the wire (an independent
    peer catches a missing htonl/ntohl that a round trip through ourselves
    would hide)."""
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        pytest.fail("Debian's /usr/bin/python3 (for pyverbs) is missing")
    proc = subprocess.Popen([py, "-c", PYVERBS_PEER, DEVICE, str(GID_INDEX)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    s = Side(ctx, ibv.IBV_QPT_UD)
    try:
        line = proc.stdout.readline()
        err = proc.stderr.read() if proc.poll() is not None else ""
        assert line.strip().isdigit(), (line, err)
        their_qpn = int(line)
        from verbs_fixtures import to_init, to_rtr, to_rts, ah_attr_to
        to_init(s.qp)
        to_rtr(s.qp)
        to_rts(s.qp)
        s.post_recv(wr_id=9)
        proc.stdin.write(f"{s.qpn}\n")
        proc.stdin.flush()
        s.buf[:8] = b"ours!!!!"
        ah = s.pd.ah(ah_attr_to(s.gid))
        s.qp.post_send(ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_SEND_WITH_IMM,
                                   sg_list=s.mr.sge(length=8),
                                   imm_data=0x11223344,
                                   send_flags=ibv.IBV_SEND_SIGNALED, ah=ah,
                                   remote_qpn=their_qpn,
                                   remote_qkey=0x11111111))
        check_ok(poll_cq(s.send_cq)[0])
        status, blen, imm, payload = proc.stdout.readline().split()
        assert (int(status), int(blen)) == (0, 48)
        assert int(imm) == 0x11223344, hex(int(imm))
        assert bytes.fromhex(payload) == b"ours!!!!"
        wc = check_ok(poll_cq(s.recv_cq, timeout=30)[0])
        assert wc.imm_data == 0xA1B2C3D4, hex(wc.imm_data)
        assert wc.wc_flags & ibv.IBV_WC_WITH_IMM
        assert bytes(s.buf[40:48]) == b"pyverbs!"
        assert wc.src_qp == their_qpn
        out, err = proc.communicate(timeout=30)
        assert out.startswith("sent 0"), (out, err)
        ah.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        s.close()
