"""``ibtool pingpong`` on Soft-RoCE: against libibverbs' C ``ibv_*_pingpong``
in both directions, against itself, across two hosts, and its errors.

Servers are started in the background; a client starts only once the
server's port is listening (read from /proc/net/tcp, so that no probe
connection is used up), and every process is killed at the end.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from conftest import TWO_HOST

GIDX = os.environ.get("RDMA_TESTVM_GID_INDEX", "1")
DEV = os.environ.get("RDMA_TESTVM_DEVICE", "rxe0")
ITERS = 50
MODES = ("rc", "uc", "ud", "srq")
SIZE = {"rc": 4096, "uc": 4096, "ud": 1024, "srq": 4096}
#: Per-process bound: Python under TCG is slow, and the host may be busy.
T = 300

SUMMARY = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec"
                     r"\n(\d+) iters in ([\d.]+) seconds = ([\d.]+) "
                     r"usec/iter$", re.M)


# -- helpers (test_cli_perf.py uses them too) ---------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def listening(port):
    """True if a TCP socket listens on *port* (IPv4 or IPv6)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state = parts[1], parts[3]
                    if state == "0A" and \
                            int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        except FileNotFoundError:
            continue
    return False


class Proc:
    """A background process in its own session (killed as a group)."""

    def __init__(self, cmd, env=None):
        self.cmd = cmd
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  start_new_session=True, env=e)
        self.result = None

    def wait_listening(self, port, timeout=T):
        deadline = time.monotonic() + timeout
        while not listening(port):
            if self.p.poll() is not None:
                out, err = self.p.communicate()
                raise AssertionError(f"{self.cmd} exited {self.p.returncode} "
                                     f"before listening:\n{out}\n{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.cmd}: port {port} not listening "
                                     f"after {timeout} s")
            time.sleep(0.05)

    def finish(self, timeout=T):
        """(returncode, stdout, stderr); kills the process on timeout."""
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"{self.cmd} did not finish in {timeout} s:"
                                 f"\n{out}\n{err}")
        self.result = (self.p.returncode, out, err)
        return self.result

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait()


@contextmanager
def server(cmd, port, env=None):
    """Start *cmd* and wait until it listens on *port*; kill it at the end."""
    proc = Proc(cmd, env)
    try:
        proc.wait_listening(port)
        yield proc
    finally:
        proc.kill()


def run(cmd, timeout=T, env=None):
    proc = Proc(cmd, env)
    try:
        return proc.finish(timeout)
    finally:
        proc.kill()


def pair(server_cmd, client_cmd, port, env=None):
    """Run a server and a client; return both (rc, out, err)."""
    with server(server_cmd, port, env) as srv:
        cli = run(client_cmd, env=env)
        res = srv.finish()
    return res, cli


def rdma_cmd(*args):
    return [sys.executable, "-m", "rdma", *args]


def ours(mode, port, *extra, dev=DEV):
    return rdma_cmd("pingpong", mode, "-d", dev, "-g", GIDX, "-n", str(ITERS),
                    "-p", str(port), "--timeout", "60", *extra)


def c_tool(mode, port, *extra, dev=DEV):
    return [f"ibv_{mode}_pingpong", "-d", dev, "-g", GIDX, "-n", str(ITERS),
            "-p", str(port), *extra]


def summary(out, size, iters=ITERS):
    """The two summary lines, checked; returns usec/iter."""
    m = SUMMARY.search(out)
    assert m, f"no summary in:\n{out}"
    assert int(m.group(1)) == size * iters * 2
    assert int(m.group(4)) == iters
    return float(m.group(6))


def ok(res, what):
    rc, out, err = res
    assert rc == 0, f"{what} failed ({rc}):\n{out}\n{err}"
    return out


# -- interoperability with the C tools ----------------------------------------

@pytest.mark.parametrize("ours_as", ["server", "client"])
@pytest.mark.parametrize("mode", MODES)
def test_interop_with_c_tool(mode, ours_as):
    """ibtool pingpong MODE with ibv_MODE_pingpong as the other side, both
    validating (-c): same exchange, sizes, counting and summary lines."""
    port = free_port()
    extra = ["-q", "4"] if mode == "srq" else []
    o, c = ours(mode, port, "-c", *extra), c_tool(mode, port, "-c", *extra)
    if ours_as == "server":
        srv, cli = pair(o, c + ["127.0.0.1"], port)
    else:
        srv, cli = pair(c, o + ["127.0.0.1"], port)
    for res, who in ((srv, "server"), (cli, "client")):
        out = ok(res, who)
        summary(out, SIZE[mode])
        assert "invalid data" not in out
        assert "remote address:" in out and "local address:" in out
    # each side reports the other's QPN
    s_out, c_out = srv[1], cli[1]
    local_s = re.findall(r"local address: +LID \w+, QPN (\w+)", s_out)
    remote_c = re.findall(r"remote address: +LID \w+, QPN (\w+)", c_out)
    assert local_s and local_s == remote_c


# -- ours against ours --------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_ours_with_ours(mode):
    """Both sides ours, validating; the client reports JSON; rc and srq
    sleep on the completion channel (-e) on the server side."""
    port = free_port()
    extra = ["-q", "3", "-r", "30"] if mode == "srq" else []
    events = ["-e"] if mode in ("rc", "srq") else []
    srv, cli = pair(ours(mode, port, "-c", *extra, *events),
                    ours(mode, port, "-c", "--output", "json", *extra,
                         "127.0.0.1"), port)
    summary(ok(srv, "server"), SIZE[mode])
    rec = json.loads(ok(cli, "client"))
    assert rec["mode"] == mode and rec["role"] == "client"
    assert rec["iters"] == ITERS and rec["bytes"] == SIZE[mode] * ITERS * 2
    assert rec["usec_per_iter"] > 0
    assert len(rec["remote"]) == (3 if mode == "srq" else 1)


def test_ours_events_both_sides_small_rx_depth():
    """-e on both sides with a receive queue refilled often (-r 3)."""
    port = free_port()
    srv, cli = pair(ours("rc", port, "-e", "-r", "3", "-s", "64"),
                    ours("rc", port, "-e", "-r", "3", "-s", "64",
                         "127.0.0.1"), port)
    summary(ok(srv, "server"), 64)
    summary(ok(cli, "client"), 64)


@pytest.mark.skipif(not TWO_HOST, reason="needs python -m rdma.testvm "
                                         "--two-host")
@pytest.mark.parametrize("ours_as", ["server", "client"])
def test_two_host_rc_with_c_tool(ours_as):
    """rc across the veth: one side on rxe1, the other on rxe2."""
    dev1 = os.environ["RDMA_TESTVM_HOST1_DEVICE"]
    dev2 = os.environ["RDMA_TESTVM_HOST2_DEVICE"]
    port = free_port()
    if ours_as == "server":
        srv_cmd = ours("rc", port, "-c", dev=dev1)
        cli_cmd = c_tool("rc", port, "-c", "127.0.0.1", dev=dev2)
    else:
        srv_cmd = c_tool("rc", port, "-c", dev=dev1)
        cli_cmd = ours("rc", port, "-c", "127.0.0.1", dev=dev2)
    srv, cli = pair(srv_cmd, cli_cmd, port)
    summary(ok(srv, "server"), 4096)
    summary(ok(cli, "client"), 4096)
    ip1 = os.environ["RDMA_TESTVM_HOST1_IP"]
    ip2 = os.environ["RDMA_TESTVM_HOST2_IP"]
    assert f"GID ::ffff:{ip2}" in srv[1] and f"GID ::ffff:{ip1}" in cli[1]


# -- errors -------------------------------------------------------------------

def one_line_error(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ibtool pingpong: "), err
    assert "Traceback" not in err


def test_no_server_fails_fast():
    port = free_port()
    t0 = time.monotonic()
    rc, out, err = run(ours("rc", port, "127.0.0.1"))
    assert rc == 1
    one_line_error(err)
    assert "couldn't connect" in err
    assert time.monotonic() - t0 < 120


def test_wait_gives_up_when_nobody_listens():
    port = free_port()
    rc, _, err = run(ours("rc", port, "--wait", "1", "127.0.0.1"))
    assert rc == 1
    one_line_error(err)


def test_server_without_client_times_out():
    port = free_port()
    # (1 s: nothing but the wait for a client is timed)
    rc, _, err = run(ours("rc", port, "--timeout", "1"))
    assert rc == 124
    one_line_error(err)
    assert "waiting for a client" in err


def test_silent_server_times_out():
    """A TCP server that accepts and never answers: exit 124."""
    with socket.create_server(("127.0.0.1", 0)) as ls:
        port = ls.getsockname()[1]
        # (1 s: the connection to the listening socket is there at once,
        # then only the wait for the server's address is timed)
        rc, _, err = run(ours("uc", port, "--timeout", "1", "127.0.0.1"))
    assert rc == 124
    one_line_error(err)
    assert "server's address" in err


@pytest.mark.parametrize("hold", [False, True], ids=["closes", "holds"])
def test_peer_gone_after_exchange_times_out(hold):
    """A client that exchanges addresses and then never sends: our server
    gives up after --timeout with exit 124.  A client that closes the
    socket after "done", as the C tools do, leaves the server waiting for
    a completion ("no completion"); one that holds it open and never
    answers the server's mode tag, for the exchange to end."""
    port = free_port()
    with server(ours("rc", port, "--timeout", "4"), port) as srv:
        with socket.create_connection(("127.0.0.1", port), timeout=T) as s:
            gid = socket.inet_pton(socket.AF_INET6, "::ffff:192.0.2.1").hex()
            s.sendall(f"0000:000abc:000123:{gid}".encode() + b"\0")
            reply = b""
            while len(reply) < 52:
                chunk = s.recv(52 - len(reply))
                assert chunk, "server closed the exchange"
                reply += chunk
            s.sendall(b"done\0")
            if not hold:
                s.close()
            rc, out, err = srv.finish()
    assert re.match(rb"[0-9a-f]{4}:[0-9a-f]{6}:[0-9a-f]{6}:[0-9a-f]{32}\0",
                    reply)
    assert rc == 124, err
    one_line_error(err)
    if hold:
        assert "waiting for the peer to close the exchange" in err
    else:
        assert "no completion" in err


def test_size_mismatch_is_a_validation_failure():
    """The server validates (-c) and gets 2048-byte messages where it
    expects 4096: exit 3.  The server's --timeout bounds its wait for
    the client too, which starts once the server listens: it is the
    per-process bound T, not a guess at how long the client takes to
    start (20 s ran out under TCG; the server exits 3 as soon as the
    first message is in, so a passing run takes no longer).  The
    client's --timeout bounds each step of its address exchange with the
    listening server, then its wait for a reply that never comes (it is
    waited out in every run): 5 s."""
    port = free_port()
    with server(ours("rc", port, "-c", "--timeout", str(T)), port) as srv:
        cli = run(ours("rc", port, "-s", "2048", "--timeout", "5",
                       "127.0.0.1"))
        rc, out, err = srv.finish()
    assert rc == 3, err
    one_line_error(err)
    assert "validation failed" in err
    assert cli[0] in (1, 124)


@pytest.mark.parametrize("argv", [
    ["pingpong"],
    ["pingpong", "xx"],
    ["pingpong", "rc", "-m", "333"],
    ["pingpong", "rc", "-p", "70000"],
    ["pingpong", "rc", "-n", "0"],
    ["pingpong", "rc", "a", "b"],
    ["pingpong", "srq", "-q", "300"],
    ["pingpong", "srq", "-q", "20", "-r", "10"],
    ["pingpong", "ud", "-s", "100000", "-d", DEV],
    ["pingpong", "rc", "-g", "999", "-d", DEV],
])
def test_bad_usage_exits_2(argv):
    rc, _, err = run(rdma_cmd(*argv))
    assert rc == 2, err
    assert "Traceback" not in err
