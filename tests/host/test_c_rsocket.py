"""Unmodified rsocket programs on the software fabric (``ucx0``): the
front end's rsocket calls (csrc/fabric_verbs/rsocket*.c) between real
processes, over UCX shared memory and over TCP.

What runs: rdma-core's ``rstream`` in its test modes (blocking, non-
blocking, rpoll, data verified, every size, plain sockets), ``riostream``
(riomap and riowrite), ``rcopy`` (a file copied and compared byte for
byte); and ``c_rsocket_probe.c`` (compiled here against librdmacm) for
the error paths: ECONNREFUSED for a port nobody listens on (blocking, and
non-blocking through rpoll and SO_ERROR), EADDRINUSE, bad input, read
after the peer closed (0), write after it (ECONNRESET, no SIGPIPE), write
after SHUT_WR (EPIPE) with the peer reading everything then 0, rclose with
4 MiB in flight, and non-blocking connect, EAGAIN, rpoll and rselect with
a pipe mixed in, and the socket names.  Every process is bounded by a
timeout and killed at the end.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import fabric_helpers as fh

T = 120         # seconds for any one process
ASAN = bool(os.environ.get("RDMA_TEST_ASAN"))
T_ALL = 300    # rstream -S all (8-25 s on shm)
TOOLS = ("rstream", "riostream", "rcopy")
SHM = {"UCX_TLS": "shm,self"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
PS_TCP = 0x0106
RESULT = re.compile(r"^(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+s\s+"
                    r"([\d.]+)\s+([\d.]+)$", re.M)


def _missing():
    why = fh.c_front_missing(())
    if why is None and not all(shutil.which(t) for t in TOOLS):
        why = ("rdma-core's rsocket tools are not installed (Debian "
               "package rdmacm-utils)")
    return why


_REASON = _missing()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def env(tmp_path):
    """A private rendezvous directory for one test's processes."""
    return fh.rendezvous_env(tmp_path)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return fh.build_c("c_rsocket_probe.c",
                      tmp_path_factory.mktemp("rs") / "c_rsocket_probe",
                      "rdma/rsocket.h", ("-O1", "-Wall"),
                      ("-lrdmacm", "-libverbs"))


on_fabric = fh.on_fabric


def claimed(env, port) -> bool:
    """Does a fabric node listen on TCP port space *port* (the fabric's
    CM claim, csrc/fabric/cm_addr.c, says " L" once it listens)?"""
    netns = os.stat("/proc/self/ns/net").st_ino
    path = (Path(env["RDMA_UCX_DIR"]) /
            f"cm-{PS_TCP:04x}-{port:04x}-{netns:x}")
    try:
        return path.read_text().rstrip().endswith(" L")
    except OSError:
        return False


def pair(server, client, port, env, plain=False, timeout=T):
    return fh.pair(on_fabric(*server), on_fabric(*client), port, env,
                   timeout=timeout,
                   ready=None if plain else lambda p: claimed(env, p))


def ok(res):
    for rc, out, err in res:
        assert rc == 0, out + err
    return res[0][1] + res[0][2], res[1][1] + res[1][2]


def tls_env(env, tls):
    env.update(SHM if tls == "shm" else TCP)
    return env


# ---- the front end's library -------------------------------------------

def test_front_end_exports_rsockets():
    """librdma_fabric_verbs.so exports librdmacm's rsocket calls under
    librdmacm's version."""
    from rdma import fabric
    out = subprocess.run(["nm", "-D", "--defined-only",
                          fabric.library_path()], capture_output=True,
                         text=True, timeout=T, check=True).stdout
    syms = {line.split()[-1] for line in out.splitlines()}
    for name in ("rsocket", "rbind", "rlisten", "raccept", "rconnect",
                 "rshutdown", "rclose", "rrecv", "rrecvfrom", "rrecvmsg",
                 "rsend", "rsendto", "rsendmsg", "rread", "rreadv",
                 "rwrite", "rwritev", "rpoll", "rselect", "rgetpeername",
                 "rgetsockname", "rsetsockopt", "rgetsockopt", "rfcntl",
                 "riomap", "riounmap", "riowrite"):
        assert f"{name}@@RDMACM_1.0" in syms, name


# ---- rstream ---------------------------------------------------------------

def rstream(env, *args, plain=False, timeout=T):
    port = fh.free_port()
    base = ["rstream", "-p", str(port), *args]
    srv, cli = ok(pair(base, [*base, "-s", "127.0.0.1"], port, env,
                       plain=plain, timeout=timeout))
    rows = RESULT.findall(cli)
    assert rows, cli
    return rows, srv, cli


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("mode", ["b", "n", "a", "v"])
def test_rstream_modes(env, tls, mode):
    """-T b blocking, n non-blocking (MSG_DONTWAIT, EAGAIN loops), a
    rpoll before every call, v the data verified."""
    size = "65536" if tls == "shm" else "16384"
    rows, _, cli = rstream(tls_env(env, tls), "-T", mode, "-S", size,
                           "-C", "200")
    assert rows[0][0] == "custom", cli
    print(cli)


@pytest.mark.skipif(ASAN, reason="under ASan -S all takes about 270 s; "
                    "the other rstream tests run the same paths there")
def test_rstream_all_sizes_shm(env):
    """-S all: every size from 64 bytes to 6 MiB, latency and bandwidth
    (rstream prints its own throughput)."""
    rows, _, cli = rstream(tls_env(env, "shm"), "-S", "all",
                           timeout=T_ALL)
    names = [r[0] for r in rows]
    assert "64_lat" in names and "6m_bw" in names, cli
    print(cli)


def test_rstream_some_sizes_tcp(env):
    """Over TCP: small and large transfers, data verified."""
    env = tls_env(env, "tcp")
    for size, count in (("64", "2000"), ("1048576", "20")):
        rows, _, cli = rstream(env, "-T", "v", "-S", size, "-C", count)
        assert rows, cli


def test_rstream_plain_sockets(env):
    """-T s: rstream over plain sockets under the front end (no rsocket
    call): still works."""
    rows, _, cli = rstream(tls_env(env, "shm"), "-T", "s", "-S", "4096",
                           "-C", "100", plain=True)
    assert rows, cli


# ---- riostream, rcopy ------------------------------------------------------

@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("args", [["-S", "65536", "-C", "100"],
                                  ["-T", "v", "-S", "4096", "-C", "50"],
                                  ["-T", "a", "-S", "8192", "-C", "50"]])
def test_riostream(env, tls, args):
    """riomap on both sides, riowrite into the peer's mapping (the
    receiver spins on the mapped buffer's last byte), rsend/rrecv."""
    env = tls_env(env, tls)
    port = fh.free_port()
    base = ["riostream", "-p", str(port), *args]
    srv, cli = ok(pair(base, [*base, "-s", "127.0.0.1"], port, env))
    assert RESULT.search(cli), cli


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_rcopy(env, tls, tmp_path):
    """rcopy copies a 3 MB file; the copy is byte for byte the same."""
    env = tls_env(env, tls)
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(os.urandom(3_000_000))
    port = fh.free_port()
    srv = fh.popen(on_fabric("rcopy", "-p", str(port)), env)
    try:
        fh.wait_listening(srv, port, T, None, lambda p: claimed(env, p))
        cli = subprocess.run(on_fabric("rcopy", str(src),
                                       f"127.0.0.1:{dst}", "-p", str(port)),
                             env=env, capture_output=True, text=True,
                             timeout=T)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "done" in cli.stdout, cli.stdout
    finally:
        fh.kill(srv)
    assert dst.read_bytes() == src.read_bytes()


# ---- the probe: errors and socket semantics --------------------------------

def run_probe(probe, env, mode, port):
    res = subprocess.run(on_fabric(probe, mode, str(port)), env=env,
                         capture_output=True, text=True, timeout=T)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.rstrip().endswith("alive"), res.stdout + res.stderr
    return res.stdout


def test_connect_refused(env, probe):
    out = run_probe(probe, tls_env(env, "shm"), "refused", fh.free_port())
    assert "blocking connect: -1 ECONNREFUSED" in out, out
    assert "nonblocking connect: EINPROGRESS" in out, out
    assert "poll: 1 POLLOUT POLLERR" in out, out
    assert "SO_ERROR: ECONNREFUSED" in out, out


def test_listen_on_port_in_use(env, probe):
    out = run_probe(probe, tls_env(env, "shm"), "inuse", fh.free_port())
    assert "first: 0" in out and "second: EADDRINUSE" in out, out


def test_bad_input(env, probe):
    out = run_probe(probe, tls_env(env, "shm"), "badinput", fh.free_port())
    for line in ("send unconnected: ENOTCONN", "recv unconnected: ENOTCONN",
                 "shutdown unconnected: ENOTCONN", "connect NULL: EFAULT",
                 "bind short: EINVAL", "setsockopt unknown: ENOPROTOOPT",
                 "setsockopt short: EINVAL", "getsockopt rcvbuf: 0",
                 "getpeername unconnected: ENOTCONN", "fcntl: O_NONBLOCK"):
        assert line in out, out


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_close_shutdown_and_nonblocking(env, probe, tls):
    """Against one server (c_rsocket_probe server): the peer closes
    (read 0, write ECONNRESET, no SIGPIPE); SHUT_WR (EPIPE for us, the
    server reads all then 0 and answers); rclose with 4 MiB in flight
    (all arrives, verified); a non-blocking client (EINPROGRESS, POLLOUT,
    SO_ERROR 0, EAGAIN, rpoll and rselect with a pipe, the names)."""
    env = tls_env(env, tls)
    port = fh.free_port()
    srv = fh.popen(on_fabric(probe, "server", str(port)), env)
    try:
        fh.wait_listening(srv, port, T, None, lambda p: claimed(env, p))
        out = {m: run_probe(probe, env, m, port)
               for m in ("peerclose", "halfclose", "inflight", "nonblock")}
    finally:
        fh.kill(srv)
    s_out = srv.stdout.read() if srv.stdout else ""
    assert "read after peer close: 0" in out["peerclose"], out
    assert re.search(r"write after peer close: (ECONNRESET|EPIPE)",
                     out["peerclose"]), out
    assert "write after shutdown: EPIPE" in out["halfclose"], out
    assert "answer: 5 done!" in out["halfclose"], out
    assert "then: 0" in out["halfclose"], out
    assert "sent 4194304" in out["inflight"], out
    n = out["nonblock"]
    for line in ("connect: EINPROGRESS", "poll connect: 1 POLLOUT",
                 "SO_ERROR: 0", "recv nothing: EAGAIN",
                 "poll mixed: 1 rsocket idle pipe POLLIN",
                 "select: 2 pipe 1 rsocket-writable 1", "peer port ok: 1",
                 "local family ok: 1"):
        assert line in n, n
    assert "server peerclose read 10" in s_out, s_out
    assert "server h read 100000 bad 0 end 0" in s_out, s_out
    assert "server i read 4194304 bad 0 end 0" in s_out, s_out
