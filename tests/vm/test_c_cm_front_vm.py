"""The librdmacm front end (``python -m rdma.fabric exec``) beside a real
device: rxe0 in the test VM.

Preloaded, a program's rdma_cm IDs whose address is a real device's
(192.0.2.1, rxe0's) must go to the real librdmacm and the kernel's
rdma_cm, so a preloaded rping talks to a plain one on rxe0 both ways,
while ucx0 still serves 127.0.0.1 in the same VM (RDMA_UCX_CM=ucx0 sends
every address to ucx0).  Every process is bounded by a timeout and killed
at the end.
"""
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "host"))
import fabric_helpers as fh  # noqa: E402

T = 60
ADDR = os.environ.get("RDMA_TESTVM_IP", "192.0.2.1")
N = 3
_ports = itertools.count(17500)

_REASON = fh.c_front_missing(("rping", "rdma_server", "rdma_client"))
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def env(tmp_path):
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    e = dict(os.environ, RDMA_UCX_DIR=str(d), UCX_WARN_UNUSED_ENV_VARS="n",
             UCX_TLS="shm,self")
    e.pop("LD_PRELOAD", None)
    e.pop("RDMA_UCX_CM", None)
    return e


def on_fabric(*cmd):
    return [sys.executable, "-P", "-m", "rdma.fabric", "exec", "--", *cmd]


def start(cmd, env):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def finish(proc, timeout=T):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{proc.args} hung:\n{out}")
    return proc.returncode, out


def client_until_listening(cmd, env, timeout=30.0):
    """Run a client until the server listens (REJECTED, "Connection
    refused" for a synchronous ID, before it does)."""
    end = time.monotonic() + timeout
    while True:
        rc, out = finish(start(cmd, env))
        refused = "REJECTED" in out or "Connection refused" in out
        if rc == 0 or not refused or time.monotonic() > end:
            return rc, out
        time.sleep(0.3)


def rping_pair(server, client, env, addr=ADDR):
    """rping -s with *server*'s wrapper, rping -c with *client*'s: the
    server's and the client's output once both ended with 0."""
    p = str(next(_ports))
    args = ["-a", addr, "-p", p, "-v", "-C", str(N)]
    srv = start(server("rping", "-s", *args), env)
    try:
        rc, cli = client_until_listening(client("rping", "-c", *args), env)
        assert rc == 0, cli
        rc, out = finish(srv)
        assert rc == 0, out
    finally:
        srv.kill()
        srv.wait()
    for i in range(N):
        assert f"ping data: rdma-ping-{i}: " in cli, cli
        assert f"server ping data: rdma-ping-{i}: " in out, out
    return out, cli


def plain(*cmd):
    return list(cmd)


def test_preloaded_rping_server_on_rxe0_plain_client(env):
    rping_pair(on_fabric, plain, env)


def test_plain_rping_server_on_rxe0_preloaded_client(env):
    rping_pair(plain, on_fabric, env)


def test_both_preloaded_on_rxe0_and_ucx0_on_loopback_at_once(env):
    """Two preloaded pairs at the same time: one on rxe0 (the kernel's
    rdma_cm carries it: a plain rping could be either side), one on
    127.0.0.1 (ucx0)."""
    p = str(next(_ports))
    lo = ["-a", "127.0.0.1", "-p", p, "-v", "-C", str(N)]
    lo_srv = start(on_fabric("rping", "-s", *lo), env)
    try:
        rping_pair(on_fabric, on_fabric, env)
        rc, cli = client_until_listening(on_fabric("rping", "-c", *lo), env)
        assert rc == 0, cli
        rc, out = finish(lo_srv)
        assert rc == 0, out
    finally:
        lo_srv.kill()
        lo_srv.wait()


@pytest.mark.parametrize("side", ["rxe0", "ucx0"])
def test_wildcard_listener_hears_both_sides(env, side):
    """A preloaded listener on 0.0.0.0 (rping -s without -a, perftest -R's
    server) listens on both: a plain client reaches it through rxe0's
    address, a preloaded one through 127.0.0.1 on ucx0."""
    p = str(next(_ports))
    srv = start(on_fabric("rping", "-s", "-v", "-C", str(N), "-p", p), env)
    addr, client = (ADDR, plain) if side == "rxe0" else ("127.0.0.1",
                                                         on_fabric)
    try:
        rc, cli = client_until_listening(
            client("rping", "-c", "-v", "-C", str(N), "-a", addr, "-p", p),
            env)
        assert rc == 0, cli
        rc, out = finish(srv)
        assert rc == 0, out
    finally:
        srv.kill()
        srv.wait()
    assert f"server ping data: rdma-ping-{N - 1}: " in out, out


def test_rdma_server_preloaded_rdma_client_plain(env):
    """rdma_create_ep/rdma_get_request (synchronous endpoints) on rxe0
    through the front end, against the plain tool, both ways."""
    for server, client in ((on_fabric, plain), (plain, on_fabric)):
        p = str(next(_ports))
        srv = start(server("rdma_server", "-s", ADDR, "-p", p), env)
        try:
            rc, cli = client_until_listening(
                client("rdma_client", "-s", ADDR, "-p", p), env)
            assert rc == 0, cli
            rc, out = finish(srv)
            assert rc == 0, out
        finally:
            srv.kill()
            srv.wait()
        assert "rdma_client: end 0" in cli, cli
        assert "rdma_server: end 0" in out, out


def test_rdma_ucx_cm_ucx0_keeps_every_address_on_ucx0(env):
    """RDMA_UCX_CM=ucx0: rxe0's address is served by ucx0 (both sides
    preloaded connect; the server's port is claimed in the rendezvous
    directory, which only ucx0 does)."""
    env["RDMA_UCX_CM"] = "ucx0"
    p = next(_ports)
    args = ["-a", ADDR, "-p", str(p), "-v", "-C", str(N)]
    srv = start(on_fabric("rping", "-s", *args), env)
    try:
        d = Path(env["RDMA_UCX_DIR"])
        end = time.monotonic() + T
        while not list(d.glob("cm-0106-%04x-*" % p)):
            assert time.monotonic() < end and srv.poll() is None, \
                "the ucx0 listener never claimed its port"
            time.sleep(0.1)
        rc, cli = finish(start(on_fabric("rping", "-c", *args), env))
        assert rc == 0, cli
        rc, out = finish(srv)
        assert rc == 0, out
    finally:
        srv.kill()
        srv.wait()


@pytest.fixture
def spare_rxe():
    """A second rxe device (rxe_cmrm on a dummy interface, 10.78.0.1/24)
    that a test may remove; removed at the end if it is still there."""
    cmd = ("ip link add cmrm0 type dummy && "
           "ip addr add 10.78.0.1/24 dev cmrm0 && ip link set cmrm0 up && "
           "rdma link add rxe_cmrm type rxe netdev cmrm0")
    res = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    yield "10.78.0.1"
    subprocess.run(["rdma", "link", "delete", "rxe_cmrm"],
                   capture_output=True, timeout=T)
    subprocess.run(["ip", "link", "del", "cmrm0"], capture_output=True)


def test_device_removal_reaches_a_preloaded_listener(env, spare_rxe):
    """The kernel's DEVICE_REMOVAL of a real device reaches a preloaded
    program's listener on it, with the program's ID in the event (rping
    says so and ends)."""
    p = str(next(_ports))
    srv = start(on_fabric("rping", "-s", "-v", "-a", spare_rxe, "-p", p),
                env)
    try:
        # listening when a plain client's REQ gets an answer other than
        # REJECTED: wait for the kernel's listener instead, by its port
        end = time.monotonic() + T
        while f":{p}" not in subprocess.run(
                ["rdma", "resource", "show", "cm_id"], capture_output=True,
                text=True, timeout=T).stdout:
            assert time.monotonic() < end and srv.poll() is None, \
                "the preloaded rping never listened on the spare rxe"
            time.sleep(0.2)
        res = subprocess.run(["rdma", "link", "delete", "rxe_cmrm"],
                             capture_output=True, text=True, timeout=T)
        assert res.returncode == 0, res.stderr
        rc, out = finish(srv)
    finally:
        srv.kill()
        srv.wait()
    assert "cma detected device removal" in out, out
