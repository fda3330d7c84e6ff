"""Helpers of the software-fabric tests (tests/host/test_fabric_*.py).

Side, make_pair, the QP transitions, the polling and checking helpers and
the constants are verbs_fixtures' (tests/verbs), re-exported here; this
module adds the multi-process plumbing (:class:`PeerProcess`).  Run as a
script, it is also the peer program of the multi-process tests::

    python fabric_helpers.py responder|requester|streamer

It prints its connection data as one JSON line, reads the peer's as one
JSON line, connects an RC QP and plays its role (see :func:`peer_main`).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid

import rdma
import rdma.ibverbs as ibv

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve()
                       .parent.parent / "verbs"))
from verbs_fixtures import (GRH_LEN, MR_ALL, PORT, QKEY,  # noqa: E402,F401
                            REMOTE_ALL, TRANSPORTS, Side, ah_attr_to,
                            check_ok, connect_pair, connect_qp,
                            connect_to_peer, expect_no_completion,
                            make_pair, pattern, poll_cq, qp_state, to_init,
                            to_rtr, to_rts, wait_for)


#: the head of a fabric node's key page (struct sh_page in
#: csrc/fabric/fabric.h): magic, version, owner pid, pad, GUID, counters
STATS = struct.Struct("<IIiIQ" + "Q" * 20)
STAT_NAMES = ("fast_write", "fast_read", "fast_atomic", "am_req", "ack_msg",
              "ack_piggy", "ack_late", "ring_req", "ring_gone", "ring_bell",
              "am_rndv", "revoked", "rx_bad", "rx_denied", "cma_write",
              "cma_read", "cma_fenced", "cma_open", "adopted", "local_req")


def _key_pages():
    """(path, head fields) of every node's key page in the rendezvous
    directory."""
    d = os.environ.get("RDMA_UCX_DIR") or f"/dev/shm/rdma-ucx-{os.getuid()}"
    for name in os.listdir(d):
        if not name.startswith("keys-") or ".tmp" in name:
            continue
        path = os.path.join(d, name)
        try:
            with open(path, "rb") as f:
                head = f.read(STATS.size)
        except OSError:
            continue            # its node ended meanwhile
        if len(head) == STATS.size:
            yield path, STATS.unpack(head)


def key_page(pid: int) -> str:
    """The path of process *pid*'s key page."""
    for path, head in _key_pages():
        if head[2] == pid:
            return path
    raise AssertionError(f"no key page of pid {pid}")


def node_stats(pid: int | None = None) -> dict | None:
    """The statistics of process *pid*'s fabric node (default: this
    process's), or None if it has no node."""
    pid = os.getpid() if pid is None else pid
    for _, head in _key_pages():
        if head[2] == pid:
            return dict(zip(STAT_NAMES, head[5:]), guid=head[4])
    return None


def mapping(addr: int) -> str:
    """The /proc/self/maps line of the mapping holding *addr* ("" if
    none)."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line.strip()
    return ""


def build_c(src: str, out, header: str, flags: tuple, libs: tuple) -> str:
    """Compile tests/host/*src* into *out* with the system's C compiler
    (*flags*, linked with *libs*); skip the test without a compiler or
    without the development header /usr/include/*header*.  Returns the
    program's path."""
    import pytest
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists(os.path.join("/usr/include",
                                                     header)):
        pytest.skip(f"needs a C compiler and /usr/include/{header}")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([cc, *flags, "-o", str(out), os.path.join(here, src),
                    *libs], check=True, timeout=120)
    return str(out)


# ---- processes talking over a TCP port (the C tools, ibtool) ----------

def free_port() -> int:
    """A TCP port that is free now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _proc_net_tcp(netns: str | None = None) -> list[str]:
    """The socket lines of /proc/net/tcp and tcp6 (of network namespace
    *netns*)."""
    if netns is not None:
        res = subprocess.run(["ip", "netns", "exec", netns, "cat",
                              "/proc/net/tcp", "/proc/net/tcp6"],
                             capture_output=True, text=True, timeout=60)
        return [line for line in res.stdout.splitlines()
                if not line.lstrip().startswith("sl")]
    lines = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines += f.readlines()[1:]
        except FileNotFoundError:
            continue
    return lines


def listening(port: int, netns: str | None = None) -> bool:
    """True once a TCP socket listens on *port* (IPv4 or IPv6; in network
    namespace *netns*)."""
    for line in _proc_net_tcp(netns):
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A" and \
                int(parts[1].rsplit(":", 1)[1], 16) == port:
            return True
    return False


def popen(cmd: list, env: dict) -> subprocess.Popen:
    """Start *cmd* in a session of its own, its output piped (text)."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def kill(p: subprocess.Popen) -> None:
    """Kill *p*'s session if it still runs; reap it."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def wait_listening(srv: subprocess.Popen, port: int, timeout: float,
                   netns: str | None = None, ready=None) -> None:
    """Wait until server *srv* listens on *port* (``ready(port)`` is true;
    default: a TCP socket listens, in network namespace *netns*); fail
    with its output if it ends first or *timeout* seconds pass."""
    deadline = time.monotonic() + timeout
    while not (ready(port) if ready else listening(port, netns)):
        assert srv.poll() is None, srv.communicate()
        assert time.monotonic() < deadline, "server not listening"
        time.sleep(0.02)


def pair(server_cmd: list, client_cmd: list, port: int, env: dict, *,
         client_env: dict | None = None, netns: str | None = None,
         timeout: float = 60, ready=None) -> tuple:
    """Run a server, wait until it listens on *port* (in network namespace
    *netns*; or until ``ready(port)``), run the client; return ((rc, out,
    err) of the server, the same of the client).  Each waits at most
    *timeout* seconds; both are killed at the end."""
    srv = popen(server_cmd, env)
    cli = None
    try:
        wait_listening(srv, port, timeout, netns, ready)
        cli = popen(client_cmd, env if client_env is None else client_env)
        c_out, c_err = cli.communicate(timeout=timeout)
        s_out, s_err = srv.communicate(timeout=timeout)
        return (srv.returncode, s_out, s_err), (cli.returncode, c_out, c_err)
    finally:
        kill(srv)
        if cli is not None:
            kill(cli)


# ---- C verbs programs through the verbs front end --------------------

#: a pingpong tool's summary line, and its local address line
PINGPONG_ITERS = re.compile(r"^(\d+) iters in [\d.]+ seconds = [\d.]+ "
                            r"usec/iter$", re.M)
PINGPONG_LOCAL = re.compile(r"local address:\s+LID 0x([0-9a-f]+), QPN "
                            r"0x([0-9a-f]+).*GID ([0-9a-f:.]+)")


def on_fabric(*cmd) -> list:
    """CMD run through the verbs front end (``python -m rdma.fabric
    exec``)."""
    return [sys.executable, "-P", "-m", "rdma.fabric", "exec", "--", *cmd]


def rendezvous_env(tmp_path, **extra) -> dict:
    """The environment of one test's processes: a private rendezvous
    directory under *tmp_path*, so that they see each other and no one
    else; *extra* on top."""
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    return dict(os.environ, RDMA_UCX_DIR=str(d),
                UCX_WARN_UNUSED_ENV_VARS="n", **extra)


def c_front_missing(tools) -> str | None:
    """Why C programs cannot run through the verbs front end here (its
    library, rdma-core's *tools*), or None."""
    from rdma import fabric
    try:
        fabric.library_path()
    except FileNotFoundError as e:
        return str(e)
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return ("rdma-core's tools are not installed (Debian package "
                f"ibverbs-utils): {', '.join(absent)}")
    return None


def check_pingpong(res, iters: int) -> list:
    """Both sides of a pingpong ((rc, out, err) each) ran *iters* round
    trips; return their local-address matches (LID, QPN, GID)."""
    addrs = []
    for rc, out, err in res:
        assert rc == 0, out + err
        m = PINGPONG_ITERS.search(out)
        assert m and int(m.group(1)) == iters, out + err
        addrs.append(PINGPONG_LOCAL.search(out))
    return addrs


# ---- a VMAD answering requests ----------------------------------------

def vmad_serve(srv, answers, timeout: float = 10) -> list:
    """Answer requests on VMAD *srv* in turn with the statuses in
    *answers* (a ClassPortInfo whose capabilityMask is srv's QP number);
    return the low 32 bits of each request's TID.  Stops early when no
    request comes within *timeout* seconds."""
    import rdma.IBA as IBA
    seen = []
    for status in answers:
        got = srv.recvfrom(time.monotonic() + timeout)
        if got is None:
            break
        buf, path = got
        fmt, _ = srv.parse_request(buf, path)
        seen.append(fmt.transactionID & 0xFFFFFFFF)
        cpi = IBA.MADClassPortInfo(baseVersion=1, classVersion=1,
                                   capabilityMask=srv.qp_num & 0xFFFF)
        srv.send_reply(fmt, cpi, path, status=status)
    return seen


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True,
                          timeout=20, check=check)


@contextlib.contextmanager
def netns_pair(prefix: str):
    """Two network namespaces joined by a veth, 198.51.100.1 and .2
    (names start with *prefix*); yields their names and always removes
    them.  Skips the test without root or iproute2."""
    import pytest
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    tag = uuid.uuid4().hex[:6]
    a, b = f"{prefix}a{tag}", f"{prefix}b{tag}"
    va, vb = f"{prefix[-2:]}a{tag}", f"{prefix[-2:]}b{tag}"
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a)
        _ip("link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "198.51.100.1/24"),
                              (b, vb, "198.51.100.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        _ip("netns", "del", a, check=False)
        _ip("netns", "del", b, check=False)


class PeerProcess:
    """A Python program (*script* *args*) run as a peer that speaks JSON
    lines on stdin/stdout, with the rdma package this process imported
    first on its path (this tree's, or a build variant such as
    build/variants/asan; the venv may be shared with another tree).
    RDMA_PROVIDER is not passed on;
    *env* is added; *prefix* wraps the command (``ip netns exec NS``)."""

    def __init__(self, script, *args, env=None, prefix=(), timeout=30):
        here = os.path.dirname(os.path.abspath(__file__))
        e = dict(os.environ)
        e.pop("RDMA_PROVIDER", None)
        e.update(env or {})
        e["PYTHONPATH"] = os.pathsep.join(
            (here, os.path.dirname(os.path.dirname(rdma.__file__))))
        self.timeout = timeout
        self.p = subprocess.Popen([*prefix, sys.executable, "-u", str(script),
                                   *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=e)

    @property
    def pid(self):
        return self.p.pid

    def read(self, timeout=None):
        """The peer's next JSON line; AssertionError if it is silent for
        *timeout* seconds or exits (with its stderr)."""
        r, _, _ = select.select([self.p.stdout], [], [],
                                self.timeout if timeout is None else timeout)
        if not r:
            raise AssertionError("peer did not answer in time")
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(5)
            raise AssertionError(f"peer exited ({self.p.returncode}): "
                                 f"{self.p.stderr.read()}")
        return json.loads(line)

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def close(self, exit_msg=None):
        """Ask the peer to exit with *exit_msg* (else kill it); reap it.
        AssertionError if it ended with an AddressSanitizer report (exit
        code 99, tests/asan_tier.sh)."""
        if self.p.poll() is None:
            try:
                if exit_msg is None:
                    raise OSError
                self.send(exit_msg)
                self.p.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
        self.p.wait(10)
        err = self.p.stderr.read() if self.p.returncode == 99 else ""
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            f.close()
        if self.p.returncode == 99:
            raise AssertionError(f"peer: AddressSanitizer report:\n{err}")


def handshake(a: PeerProcess, b: PeerProcess, ia: dict | None = None,
              ib: dict | None = None, *, extra: dict | None = None
              ) -> tuple[dict, dict]:
    """The peers' handshake (:func:`peer_main`): *b* and *a* print their
    connection data (*ib*, *ia*: already read), each is sent the other's
    (with *extra* added, e.g. ``use_lid``), and both report they are
    ready.  Returns ``(ia, ib)``."""
    if ib is None:
        ib = b.read()
    if ia is None:
        ia = a.read()
    b.send({**ia, **(extra or {})})
    a.send({**ib, **(extra or {})})
    assert b.read() == {"ready": True}
    assert a.read() == {"ready": True}
    return ia, ib


def providers_with_devices():
    """The providers of this build that have a device here."""
    out = []
    from rdma import _ibverbs
    for p in _ibverbs._providers():
        try:
            if rdma.get_devices(p):
                out.append(p)
        except rdma.SysError:
            pass
    return out


# --------------------------------------------------------------------------
# the peer program of the multi-process tests

def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _read():
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("peer: stdin closed")
    return json.loads(line)


def peer_main(role: str) -> int:
    """responder: serves one-sided ops and receives SENDs, reports them.
    requester: WRITE/READ/atomic/SEND against a responder, checks bytes.
    streamer: RDMA WRITEs in a loop until an error completion, then reports
    how long after the last success it came (the peer is killed meanwhile).
    """
    ep = rdma.get_end_port(os.environ.get("FABRIC_DEVICE") or None,
                           provider=os.environ.get("FABRIC_PROVIDER", "ucx"))
    ctx = rdma.get_verbs(ep)
    timeout = int(os.environ.get("FABRIC_QP_TIMEOUT", "14"))
    s = Side(ctx, ibv.IBV_QPT_RC, size=1 << 16, max_send_wr=64,
             max_recv_wr=64)
    if os.environ.get("FABRIC_ALLOC_MR"):
        # memory the library allocates: same-host one-sided ops into it
        # take the fast path (the initiator writes it directly)
        s.mr = s.pd.alloc_mr(1 << 16, MR_ALL)
        s.buf = s.mr.buf
    _emit({"gid": str(s.gid), "lid": s.lid, "qpn": s.qpn, "addr": s.mr.addr,
           "rkey": s.mr.rkey, "pid": os.getpid()})
    peer = _read()
    connect_to_peer(s.qp, peer, use_lid=bool(peer.get("use_lid")),
                    timeout=timeout)
    if role == "responder":
        for i in range(8):
            s.post_recv(wr_id=i, off=32768 + 1024 * i, length=1024)
        s.buf[:4096] = pattern(4096, 7)
        _emit({"ready": True})
        while True:
            cmd = _read()
            if cmd["op"] == "recv":
                wc = poll_cq(s.recv_cq, 1, timeout=20)[0]
                off = 32768 + 1024 * wc.wr_id
                _emit({"wr_id": wc.wr_id, "status": wc.status,
                       "imm": wc.imm_data, "byte_len": wc.byte_len,
                       "data": bytes(s.buf[off:off + wc.byte_len]).hex()})
            elif cmd["op"] == "dump":
                _emit({"data": bytes(
                    s.buf[cmd["off"]:cmd["off"] + cmd["len"]]).hex()})
            else:
                break
        ctx.close()
        return 0
    other = ("remote", peer["addr"], peer["rkey"])
    _emit({"ready": True})
    _read()                                    # the responder is ready
    def wr(op, off, length, roff, **kw):
        return ibv.send_wr(wr_id=off, opcode=op,
                           sg_list=s.mr.sge(length=length, off=off),
                           remote_addr=other[1] + roff, rkey=other[2],
                           send_flags=ibv.IBV_SEND_SIGNALED, **kw)
    if role == "requester":
        data = pattern(3000, 1)
        s.buf[:3000] = data
        s.qp.post_send(wr(ibv.IBV_WR_RDMA_WRITE, 0, 3000, 8192))
        s.qp.post_send(wr(ibv.IBV_WR_RDMA_READ, 4096, 4096, 0))
        struct.pack_into("<Q", s.buf, 12288, 0)
        s.qp.post_send(wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, 12288, 8, 16384,
                          compare_add=5))
        s.qp.post_send(ibv.send_wr(wr_id=9, opcode=ibv.IBV_WR_SEND_WITH_IMM,
                                   sg_list=s.mr.sge(length=100, off=0),
                                   imm_data=0x1234,
                                   send_flags=ibv.IBV_SEND_SIGNALED))
        wcs = poll_cq(s.send_cq, 4, timeout=20)
        _emit({"statuses": [w.status for w in wcs],
               "read_ok": bytes(s.buf[4096:8192]) == pattern(4096, 7)[:4096],
               "faa_old": struct.unpack_from("<Q", s.buf, 12288)[0]})
        ctx.close()
        return 0
    # streamer
    s.buf[:64] = pattern(64, 3)
    # one WRITE alone first: its rkey is then known, and with nothing
    # outstanding the stream can take the one-sided fast path at once
    s.qp.post_send(wr(ibv.IBV_WR_RDMA_WRITE, 0, 64, 0))
    check_ok(poll_cq(s.send_cq, 1, timeout=20)[0])
    ok = 0
    last_ok = time.monotonic()
    announced = False
    outstanding = 0
    while True:
        while outstanding < 32:
            s.qp.post_send(wr(ibv.IBV_WR_RDMA_WRITE, 0, 64, 0))
            outstanding += 1
        wcs = s.send_cq.poll()
        for i, w in enumerate(wcs):
            outstanding -= 1
            if w.status != ibv.IBV_WC_SUCCESS:
                rest = wcs[i + 1:]
                outstanding -= len(rest)
                if outstanding:
                    rest += poll_cq(s.send_cq, outstanding, timeout=20)
                _emit({"status": w.status, "ok": ok,
                       "after": time.monotonic() - last_ok,
                       "rest": sorted({r.status for r in rest}),
                       "state": qp_state(s.qp)})
                ctx.close()
                return 0
            ok += 1
            last_ok = time.monotonic()
        if ok >= 100 and not announced:
            announced = True
            _emit({"running": ok})


if __name__ == "__main__":
    sys.exit(peer_main(sys.argv[1]))
