"""Unmodified librdmacm programs on the software fabric (``ucx0``): the
fabric's connection manager (csrc/fabric/cm*.c) behind the rdma_* front
end (csrc/fabric_verbs/cm_front*.c), between real processes.

What runs: rdma-core's ``rping`` (-v, -C), ``ucmatose`` (several
connections), ``udaddy`` (UD, SIDR), ``rdma_server``/``rdma_client``
(synchronous endpoints) and ``cmtime``, over UCX shared memory and over
TCP; and ``c_cm_probe.c`` (compiled here against librdmacm) for the
events and errors: ADDR_ERROR for an address with no node, REJECTED
(reason 8) for a port nobody listens on and (28, with the peer's private
data) for a reject, EADDRINUSE, private data over the IB CM's limits
(EINVAL), UNREACHABLE when the peer dies mid-handshake, DISCONNECTED on
both sides and TIMEWAIT_EXIT, and a hostile peer's malformed CM
messages (dropped and counted, the node goes on); ``mckey`` (multicast:
rdma_join_multicast and its errors, the group's MGID, leaving, and a
destroyed ID's groups through the probe).  Every process is bounded by a
timeout and killed at the end.
"""
import os
import random
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

import fabric_helpers as fh

T = 60          # seconds for any one process
CM_TOOLS = ("rping", "ucmatose", "udaddy", "rdma_server", "rdma_client",
            "cmtime", "mckey")
SHM = {"UCX_TLS": "shm,self"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
PS_TCP, PS_UDP = 0x0106, 0x0111
UDADDY_PORT = 7174      # udaddy's fixed port (its -p is the port space)


def _missing():
    why = fh.c_front_missing(())
    if why is None and not all(shutil.which(t) for t in CM_TOOLS):
        why = ("rdma-core's librdmacm tools are not installed (Debian "
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
    return fh.build_c("c_cm_probe.c",
                      tmp_path_factory.mktemp("cm") / "c_cm_probe",
                      "rdma/rdma_cma.h", ("-O1", "-Wall"),
                      ("-lrdmacm", "-libverbs"))


on_fabric = fh.on_fabric


def claimed(env, ps, port, netns=None, listening=True) -> bool:
    """Does a node hold *port* in port space *ps* (of network namespace
    *netns*, default this one's), listening on it unless *listening* is
    false (csrc/fabric/cm_addr.c: the claim says " L" once it listens)?"""
    netns = netns or os.stat("/proc/self/ns/net").st_ino
    path = Path(env["RDMA_UCX_DIR"]) / f"cm-{ps:04x}-{port:04x}-{netns:x}"
    try:
        text = path.read_text()
    except OSError:
        return False
    return not listening or text.rstrip().endswith(" L")


def pair(server, client, port, env, ps=PS_TCP):
    """Run *server*, wait for its listener, run *client*; return
    ((rc, out, err) of the server, the same of the client)."""
    return fh.pair(on_fabric(*server), on_fabric(*client), port, env,
                   timeout=T, ready=lambda p: claimed(env, ps, p))


def ok(res):
    """Both ran and ended with 0: their stdout (and stderr, after it)."""
    for rc, out, err in res:
        assert rc == 0, out + err
    return res[0][1] + res[0][2], res[1][1] + res[1][2]


# ---- the front end's library -------------------------------------------

def test_front_end_exports_librdmacm():
    """librdma_fabric_verbs.so exports librdmacm's entry points under
    librdmacm's versions (its rsocket calls: test_c_rsocket.py)."""
    from rdma import fabric
    out = subprocess.run(["nm", "-D", "--defined-only",
                          fabric.library_path()], capture_output=True,
                         text=True, timeout=T, check=True).stdout
    syms = [line.split()[-1] for line in out.splitlines()]
    for s in ("rdma_create_id@@RDMACM_1.0", "rdma_get_cm_event@@RDMACM_1.0",
              "rdma_create_ep@@RDMACM_1.0", "rdma_establish@@RDMACM_1.2",
              "rdma_init_qp_attr@@RDMACM_1.2"):
        assert s in syms, s


# ---- rdma-core's tools ---------------------------------------------------

@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_rping(env, tls):
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    n = 5
    args = ["rping", "-a", "127.0.0.1", "-p", str(port), "-v", "-C", str(n)]
    srv, cli = ok(pair([*args, "-s"], [*args, "-c"], port, env))
    for i in range(n):
        assert f"ping data: rdma-ping-{i}: " in cli, cli
        assert f"server ping data: rdma-ping-{i}: " in srv, srv
    assert "server DISCONNECT EVENT" in srv, srv


@pytest.mark.parametrize("tls,extra", [("shm", []), ("tcp", []),
                                       ("shm", ["-m"])],
                         ids=["shm", "tcp", "shm-migrate"])
def test_ucmatose_several_connections(env, tls, extra):
    """Four connections, ten messages each way; -m: the IDs move to a new
    event channel (rdma_migrate_id) before disconnecting."""
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    common = ["-p", str(port), "-c", "4", "-C", "10", *extra]
    srv, cli = ok(pair(["ucmatose", "-b", "127.0.0.1", *common],
                       ["ucmatose", "-s", "127.0.0.1", *common], port, env))
    for out in (srv, cli):
        assert "data transfers complete" in out and "return status 0" in out
    assert "disconnected" in srv, srv


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_udaddy(env, tls):
    env.update(SHM if tls == "shm" else TCP)
    common = ["-c", "3", "-C", "5"]
    srv, cli = ok(pair(["udaddy", "-b", "127.0.0.1", *common],
                       ["udaddy", "-s", "127.0.0.1", *common], UDADDY_PORT,
                       env, ps=PS_UDP))
    for out in (srv, cli):
        assert "data transfers complete" in out and "return status 0" in out


def mcast_members(env) -> list:
    """The fabric's multicast registry: a file per (group, member node)
    (csrc/fabric/mcast.c)."""
    d = Path(env["RDMA_UCX_DIR"]) / "mcast"
    return sorted(os.listdir(d)) if d.is_dir() else []


@pytest.mark.parametrize("tls,extra", [("shm", []), ("tcp", []),
                                       ("shm", ["-o"])],
                         ids=["shm", "tcp", "shm-sendonly"])
def test_mckey(env, tls, extra):
    """mckey's receiver joins 239.1.1.1 (its QP is attached: the node
    is in the group's registry), then the sender joins (-o: as a
    send-only member, through rdma_join_multicast_ex, its QP not
    attached) and sends ten datagrams to the group; the receiver gets
    them all.  Both leave: the registry is empty after."""
    env.update(SHM if tls == "shm" else TCP)
    common = ["-m", "239.1.1.1", "-b", "127.0.0.1"]
    srv, cli = ok(fh.pair(on_fabric("mckey", *common),
                          on_fabric("mckey", *common, "-s", *extra), 0, env,
                          timeout=T, ready=lambda _p: mcast_members(env)))
    mgid = "joined dgid: ff12:4001:ffff::f01:101 mlid 0x"
    for out in (srv, cli):
        assert mgid in out, out
        assert "data transfers complete" in out and "return status 0" in out
    assert "receiving data transfers" in srv, srv
    assert mcast_members(env) == []


def test_multicast_join_errors_and_leave(env, probe):
    """rdma_join_multicast: EINVAL on a TCP ID, an unbound ID, a unicast
    address and an _ex without an address; leaving a group not joined:
    EADDRNOTAVAIL.  A join gives MULTICAST_JOIN with the IPoIB-mapped
    MGID (the rdma_cm's signature for the UDP port space), an MLID from
    0xc000, qp_num 0xffffff, RDMA_UDP_QKEY and the join's context; an
    attached QP cannot be destroyed (EBUSY) until its ID is."""
    res = run([probe, "mcast", "224.5.6.7"], env)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    for call in ("(tcp)", "(unbound)", "(unicast)", "_ex(no address)"):
        assert f"ERR rdma_join_multicast{call} 22" in out, out
    assert "ERR rdma_leave_multicast(not joined) 99" in out, out
    m = re.findall(r"^MCAST dgid=(\S+) dlid=0x([0-9a-f]+) global=1 "
                   r"qp_num=0xffffff qkey=0x1234567 ctx=1$", out, re.M)
    assert len(m) == 2 and m[0] == m[1], out
    assert m[0][0] == "ff12:4001:ffff::5:607", out
    assert 0xC000 <= int(m[0][1], 16) < 0xFFFF
    assert "OK rdma_leave_multicast" in out
    assert "ERR rdma_leave_multicast(again) 99" in out, out
    assert "ERR ibv_destroy_qp(attached) 16" in out, out
    assert "OK ibv_destroy_qp" in out, out
    assert mcast_members(env) == []


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_rdma_server_client(env, tls):
    """Synchronous endpoints: rdma_getaddrinfo, rdma_create_ep,
    rdma_get_request, rdma_accept/connect, one SEND each way."""
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    srv, cli = ok(pair(["rdma_server", "-s", "127.0.0.1", "-p", str(port)],
                       ["rdma_client", "-s", "127.0.0.1", "-p", str(port)],
                       port, env))
    assert "rdma_server: end 0" in srv, srv
    assert "rdma_client: end 0" in cli, cli


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_cmtime(env, tls):
    """50 connections set up and torn down (the server runs until it is
    killed)."""
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    srv = fh.popen(on_fabric("cmtime", "-b", "127.0.0.1", "-p", str(port),
                             "-c", "50"), env)
    try:
        fh.wait_listening(srv, port, T,
                          ready=lambda p: claimed(env, PS_TCP, p))
        res = run(["cmtime", "-s", "127.0.0.1", "-p", str(port), "-c", "50"],
                  env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert re.search(r"^connect\s*:", res.stdout, re.M), res.stdout
        assert srv.poll() is None
    finally:
        fh.kill(srv)


@pytest.mark.parametrize("tool,tls", [("ib_send_bw", "shm"),
                                      ("ib_read_bw", "tcp"),
                                      ("ib_send_lat", "shm"),
                                      ("ib_write_lat", "tcp")])
def test_perftest_rdma_cm(env, tool, tls):
    """perftest with -R: its control channel and then its QPs connected
    by rdma_cm (the server closes the first listener and listens again on
    the same port while the client already connects: the CM looks for the
    listener for up to 100 ms before it rejects).  The server is up first:
    a perftest client that is rejected retries with memory it freed."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} (Debian package perftest) is not installed")
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    args = [tool, "-d", "ucx0", "-R", "-p", str(port), "-n", "100"]
    srv, cli = ok(pair(args, [*args, "127.0.0.1"], port, env))
    assert "Data ex. method : rdma_cm" in cli, cli
    assert re.search(r"^\s*\d+\s+100\s", cli, re.M), cli


# ---- events and errors (c_cm_probe) ---------------------------------------

def events(out: str) -> list:
    """The probe's EVENT lines as (name, status, pdata_len, pdata)."""
    return [(m.group(1), int(m.group(2)), int(m.group(3)), m.group(4))
            for m in re.finditer(r"^EVENT RDMA_CM_EVENT_(\w+) status=(-?\d+) "
                                 r"pdata_len=(\d+) pdata=(.*)$", out, re.M)]


def run(cmd, env):
    return subprocess.run(on_fabric(*cmd), capture_output=True, text=True,
                          timeout=T, env=env)


def test_address_with_no_node_is_addr_error(env, probe):
    """192.0.2.1 (TEST-NET-1): no address of this host, no node claims
    it."""
    out = run([probe, "resolve", "192.0.2.1"], env).stdout
    assert events(out) == [("ADDR_ERROR", -113, 0, "")], out
    out = run([probe, "resolve", "127.0.0.1"], env).stdout
    assert events(out) == [("ADDR_RESOLVED", 0, 0, "")], out


def test_destroy_id_waits_for_its_events_acknowledgement(env, probe):
    """rdma_destroy_id (and rdma_migrate_id) returns only once the ID's
    events handed out are acknowledged (librdmacm's rule; another thread
    acknowledges 300 ms later and still reads event->id); a
    CONNECT_REQUEST counts against
    its listener, so its new ID may be destroyed before the request is
    acknowledged without waiting."""
    res = run([probe, "held", "127.0.0.1"], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "DESTROY after-ack" in res.stdout, res.stdout + res.stderr
    res = run([probe, "held", "127.0.0.1", "migrate"], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "MIGRATE after-ack" in res.stdout, res.stdout + res.stderr
    res = run([probe, "reqdestroy", str(fh.free_port())], env)
    assert "OK reqdestroy" in res.stdout, res.stdout + res.stderr
    assert events(res.stdout)[-1][0] == "REJECTED", res.stdout


def test_set_option_errors_and_effects(env, probe):
    """rdma_set_option as the kernel's ucma answers it: ENOSYS for an
    unknown level or option, EINVAL for a wrong length, a UD ID's
    ACK_TIMEOUT, AFONLY once the address is resolved, an IB_PATH with
    no primary bidirectional GMP path or before the address; EFAULT for
    a NULL value; TOS, REUSEADDR, AFONLY and ACK_TIMEOUT accepted, the
    TOS is the route's traffic class, and IB_PATH resolves the route
    (ROUTE_RESOLVED)."""
    res = run([probe, "options"], env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(re.findall(r"^OPT (\S+) (\d+)$", res.stdout, re.M))
    assert got == {
        "bad-level": "38", "bad-name": "38", "bad-ib-name": "38",
        "tos-len": "22", "reuse-len": "22", "null": "14",
        "ud-ack-timeout": "22", "tos": "0", "reuse": "0", "afonly": "0",
        "ack-timeout": "0", "path-early": "22", "afonly-resolved": "22",
        "path-flags": "22", "path-len": "22", "path": "0",
    }, res.stdout + res.stderr
    assert [e[0] for e in events(res.stdout)] == [
        "ADDR_RESOLVED", "ROUTE_RESOLVED"], res.stdout
    assert "TCLASS 40" in res.stdout, res.stdout


def test_getaddrinfo_takes_hinted_addresses(env, probe):
    """rdma_getaddrinfo as librdmacm's: no node, no service and no hints
    is EINVAL; with no node and no service the result carries the hints'
    addresses (libfabric's verbs provider looks its endpoints up so); a
    node's lookup keeps the hints' source address."""
    out = run([probe, "addrinfo"], env).stdout
    assert out.splitlines() == [
        "ERR nothing 22",
        "AI hints flags=0 ps=0x106 qpt=2 src=127.0.0.2:4791 "
        "dst=127.0.0.3:7471",
        "AI node flags=0 ps=0x106 qpt=2 src=127.0.0.2:4791 "
        "dst=127.0.0.1:7472",
    ], out


def test_connect_to_unlistened_port_is_rejected(env, probe):
    """REJECTED with the IB CM's reason 8 (invalid service ID), as the
    kernel's CM answers a REQ no listener takes; the REJ's private data
    field (148 bytes) is all zeros."""
    out = run([probe, "client", "127.0.0.1", str(fh.free_port())],
              env).stdout
    assert events(out)[-1] == ("REJECTED", 8, 148, ""), out


def test_listen_on_port_in_use(env, probe):
    """EADDRINUSE in the same process, from another process, and the
    port is free again once its holder is gone (killed)."""
    port = fh.free_port()
    out = run([probe, "bind", str(port), str(port)], env).stdout
    assert out.splitlines() == [f"OK bind {port}", "ERR rdma_bind_addr 98"]
    assert not claimed(env, PS_TCP, port, listening=False)  # released
    holder = fh.popen(on_fabric(probe, "server", str(port), "hold"), env)
    try:
        assert holder.stdout.readline().startswith("LISTENING")
        out = run([probe, "bind", str(port)], env).stdout
        assert out.splitlines() == ["ERR rdma_bind_addr 98"], out
    finally:
        fh.kill(holder)
    out = run([probe, "bind", str(port)], env).stdout
    assert out.splitlines() == [f"OK bind {port}"], out


def test_private_data_over_the_limit(env, probe):
    """EINVAL for 57 bytes on connect (56 fit in a REQ after rdma_cm's
    header), 197 on accept (196), 149 on reject (148); at the limits the
    handshake goes on."""
    port = fh.free_port()
    srv, cli = pair([probe, "server", str(port), "limits"],
                    [probe, "limits", "127.0.0.1", str(port)], port, env)
    assert "ERR rdma_connect 22" in cli[1], cli
    assert ("CONNECT_RESPONSE", 0, 196, "welcome") in events(cli[1]), cli
    assert "ERR rdma_accept 22" in srv[1] and "ERR rdma_reject 22" in srv[1]


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_connect_disconnect_both_sides(env, probe, tls):
    """Private data both ways (the REQ's field is 56 bytes, the REP's
    196), ESTABLISHED on both sides, DISCONNECTED on both, then
    TIMEWAIT_EXIT on both."""
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    srv, cli = ok(pair([probe, "server", str(port), "accept"],
                       [probe, "client", "127.0.0.1", str(port)], port, env))
    assert events(cli) == [
        ("ADDR_RESOLVED", 0, 0, ""), ("ROUTE_RESOLVED", 0, 0, ""),
        ("CONNECT_RESPONSE", 0, 196, "welcome"), ("ESTABLISHED", 0, 0, ""),
        ("DISCONNECTED", 0, 0, ""), ("TIMEWAIT_EXIT", 0, 0, "")], cli
    assert events(srv) == [
        ("CONNECT_REQUEST", 0, 56, "hello"), ("ESTABLISHED", 0, 0, ""),
        ("DISCONNECTED", 0, 0, ""), ("TIMEWAIT_EXIT", 0, 0, "")], srv


def test_reject_carries_private_data(env, probe):
    """rdma_reject: REJECTED, reason 28 (consumer defined), with the
    rejecter's private data in the REJ's 148-byte field."""
    port = fh.free_port()
    srv, cli = ok(pair([probe, "server", str(port), "reject"],
                       [probe, "client", "127.0.0.1", str(port)], port, env))
    assert events(cli)[-1] == ("REJECTED", 28, 148, "nope"), cli
    assert events(srv) == [("CONNECT_REQUEST", 0, 56, "hello")], srv


def _kill_when(proc, line, timeout=T):
    """Read *proc*'s stdout until *line* comes, then SIGKILL it."""
    end = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < end:
        got = proc.stdout.readline()
        seen += got
        if got.startswith(line):
            fh.kill(proc)
            return seen
        assert got or proc.poll() is None, seen + proc.stderr.read()
    raise AssertionError(seen)


@pytest.mark.parametrize("tls", ["shm", "tcp"])
def test_server_killed_mid_handshake(env, probe, tls):
    """The server dies holding a CONNECT_REQUEST: the client gets
    UNREACHABLE (-ETIMEDOUT, as when the IB CM's retries run out), in
    well under its 10 s wait, and no hang."""
    env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    srv = fh.popen(on_fabric(probe, "server", str(port), "hold"), env)
    cli = None
    try:
        fh.wait_listening(srv, port, T,
                          ready=lambda p: claimed(env, PS_TCP, p))
        cli = fh.popen(on_fabric(probe, "client", "127.0.0.1", str(port)),
                       env)
        _kill_when(srv, "EVENT RDMA_CM_EVENT_CONNECT_REQUEST")
        t0 = time.monotonic()
        out, err = cli.communicate(timeout=T)
        assert time.monotonic() - t0 < 5
        assert events(out)[-1] == ("UNREACHABLE", -110, 0, ""), out + err
    finally:
        fh.kill(srv)
        if cli is not None:
            fh.kill(cli)


def test_client_killed_mid_handshake(env, probe):
    """The client dies after the REP (before its RTU): the server's
    accepted ID gets UNREACHABLE."""
    port = fh.free_port()
    srv = fh.popen(on_fabric(probe, "server", str(port), "accept"), env)
    cli = None
    try:
        fh.wait_listening(srv, port, T,
                          ready=lambda p: claimed(env, PS_TCP, p))
        cli = fh.popen(on_fabric(probe, "client", "127.0.0.1", str(port),
                                 "hold"), env)
        _kill_when(cli, "HOLDING")
        out, err = srv.communicate(timeout=T)
        assert events(out) == [("CONNECT_REQUEST", 0, 56, "hello"),
                               ("UNREACHABLE", -110, 0, "")], out + err
    finally:
        fh.kill(srv)
        if cli is not None:
            fh.kill(cli)


def test_peer_killed_when_connected(env, probe):
    """A connected server is killed: the client gets DISCONNECTED (the
    kernel's CM sends a DREQ for a process that ends)."""
    port = fh.free_port()
    srv = fh.popen(on_fabric(probe, "server", str(port), "accept"), env)
    cli = None
    try:
        fh.wait_listening(srv, port, T,
                          ready=lambda p: claimed(env, PS_TCP, p))
        cli = fh.popen(on_fabric(probe, "client", "127.0.0.1", str(port),
                                 "nodisc"), env)
        seen = ""
        while "CONNECTED" not in seen:
            line = cli.stdout.readline()
            assert line, seen + cli.stderr.read()
            seen += line
        fh.kill(srv)
        out, err = cli.communicate(timeout=T)
        evs = events(seen + out)
        assert ("DISCONNECTED", 0, 0, "") in evs, seen + out + err
        assert evs[-1] == ("TIMEWAIT_EXIT", 0, 0, ""), seen + out + err
    finally:
        fh.kill(srv)
        if cli is not None:
            fh.kill(cli)


# ---- a hostile peer --------------------------------------------------------

#: struct cm_msg (csrc/fabric/wire.h): version, local and remote ids, qpn,
#: psn, qkey, src and dst IP, src and dst port, port space, resp_res,
#: init_depth, flow_control, retry, rnr_retry, srq, reason, pdata_len,
#: private data
CM_MSG = struct.Struct("<8I3H8B2x256s")
AM_CTL_CM = 45
CM_REQ, CM_REP, CM_RTU, CM_REJ, CM_DREQ, CM_DREP = 1, 2, 3, 4, 5, 6
CM_SIDR_REQ = 7


def cm_msg(version=1, local_id=1, remote_id=0, qpn=5, psn=0, port=1,
           ps=PS_TCP, retry=7, pdata_len=0, reason=0) -> bytes:
    return CM_MSG.pack(version, local_id, remote_id, qpn, psn, 0,
                       0x0100007F, 0x0100007F, 0, port, ps, 1, 1, 0, retry,
                       7, 0, reason, pdata_len, b"")


@pytest.fixture(scope="module")
def rogue_bin(tmp_path_factory):
    return fh.build_c("fabric_rogue.c",
                      tmp_path_factory.mktemp("rogue") / "fabric_rogue",
                      "ucp/api/ucp.h", ("-O1", "-Wall"), ("-lucp", "-lucs"))


def test_malformed_cm_messages_are_dropped(env, probe, rogue_bin,
                                           monkeypatch):
    """A raw UCP peer with a session sends CM messages of the wrong
    length, version, op, ids, QPN, PSN, retry count, port space and
    private data length: each is dropped and counted (rx_bad); one
    without a session is denied (rx_denied); well-formed answers to IDs
    that do not exist change nothing.  The node's CM goes on: a real
    client connects and disconnects afterwards."""
    import test_fabric_security as sec
    monkeypatch.setenv("RDMA_UCX_DIR", env["RDMA_UCX_DIR"])
    port = fh.free_port()
    srv = fh.popen(on_fabric(probe, "server", str(port), "accept"), env)
    rogue = None
    try:
        fh.wait_listening(srv, port, T,
                          ready=lambda p: claimed(env, PS_TCP, p))
        guid = int(re.match(r"LISTENING guid=([0-9a-f]+)",
                            srv.stdout.readline()).group(1), 16)
        path, _, key = sec.record(guid)
        rogue = sec.Rogue(rogue_bin, "addr", path)
        r_guid, r_sid = 0x0BAD0000000000C1, random.getrandbits(63) | 1
        assert rogue.handshake(guid, r_guid, r_sid, rogue.p.pid, key)[0]

        def hdr(op, sid=r_sid):
            return sec.wire(AM_CTL_CM, op, src_guid=r_guid, sid=sid)
        bad = [
            (hdr(CM_REQ), cm_msg()[:100]),                  # short
            (hdr(CM_REQ), cm_msg() + b"\0" * 8),            # long
            (hdr(CM_REQ), cm_msg(version=2)),
            (hdr(0), cm_msg()),
            (hdr(99), cm_msg()),
            (hdr(CM_REQ), cm_msg(local_id=0)),
            (hdr(CM_REP), cm_msg(remote_id=0)),
            (hdr(CM_REQ), cm_msg(qpn=1 << 24)),
            (hdr(CM_REQ), cm_msg(psn=1 << 24)),
            (hdr(CM_REQ), cm_msg(retry=9)),
            (hdr(CM_REQ), cm_msg(ps=0x999)),
            (hdr(CM_REQ), cm_msg(ps=PS_UDP)),               # UD in a REQ
            (hdr(CM_SIDR_REQ), cm_msg(ps=PS_TCP)),          # RC in SIDR
            (hdr(CM_REQ), cm_msg(pdata_len=57)),
            (hdr(CM_REJ), cm_msg(remote_id=7, pdata_len=149)),
        ]
        pid = srv.pid
        before = fh.node_stats(pid)
        for h, payload in bad:
            rogue.send(h, payload)
        want = before["rx_bad"] + len(bad)
        end = time.monotonic() + 5
        while fh.node_stats(pid)["rx_bad"] < want and time.monotonic() < end:
            time.sleep(0.01)
        assert fh.node_stats(pid)["rx_bad"] == want
        rogue.send(hdr(CM_REQ, sid=r_sid ^ 1), cm_msg(port=port))
        end = time.monotonic() + 5
        while fh.node_stats(pid)["rx_denied"] <= before["rx_denied"] and \
                time.monotonic() < end:
            time.sleep(0.01)
        assert fh.node_stats(pid)["rx_denied"] == before["rx_denied"] + 1
        for op in (CM_REP, CM_RTU, CM_REJ, CM_DREQ, CM_DREP):
            rogue.send(hdr(op), cm_msg(remote_id=0x12345678))
        assert rogue.wait(100) == "alive"
        assert srv.poll() is None
        res = run([probe, "client", "127.0.0.1", str(port)], env)
        assert events(res.stdout)[-1] == ("TIMEWAIT_EXIT", 0, 0, ""), \
            res.stdout + res.stderr
        out, err = srv.communicate(timeout=T)
        assert ("ESTABLISHED", 0, 0, "") in events(out), out + err
    finally:
        if rogue is not None:
            rogue.close()
        fh.kill(srv)


# ---- two "hosts" ------------------------------------------------------------

@pytest.fixture
def netns_pair():
    """Two network namespaces joined by a veth: 198.51.100.1 and .2."""
    with fh.netns_pair("rdmcm") as pair:
        yield pair


def _netns_ino(ns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "stat", "-L", "-c",
                          "%i", "/proc/self/ns/net"], capture_output=True,
                         text=True, timeout=T, check=True).stdout
    return int(out)


def test_rping_two_network_namespaces(env, netns_pair):
    """rping between two "hosts" (network namespaces over a veth, TCP):
    the client resolves the server's host address, which the server's
    node claims with RDMA_UCX_ADDR, to that node."""
    na, nb = netns_pair
    env.update(UCX_TLS="tcp", RDMA_UCX_ADDR="198.51.100.1")
    env_b = dict(env, RDMA_UCX_ADDR="198.51.100.2")
    port = fh.free_port()
    ino = _netns_ino(na)
    args = ["rping", "-a", "198.51.100.1", "-p", str(port), "-v", "-C", "3"]
    res = fh.pair(["ip", "netns", "exec", na, *on_fabric(*args, "-s")],
                  ["ip", "netns", "exec", nb, *on_fabric(*args, "-c")],
                  port, env, client_env=env_b, timeout=T,
                  ready=lambda p: claimed(env, PS_TCP, p, ino))
    srv, cli = ok(res)
    for i in range(3):
        assert f"ping data: rdma-ping-{i}: " in cli, cli
        assert f"server ping data: rdma-ping-{i}: " in srv, srv
