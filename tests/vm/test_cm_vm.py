"""rdma.cm against librdmacm's own programs on rxe0, both directions.

Each test runs one side on rdma.cm (tests/vm/cm_peers.py: the same
exchange as the C program) and the unmodified C program as the other:
rping (RDMA READ/WRITE of advertised buffers, validated), ucmatose (RC
messages), udaddy (UD over SIDR) and rdma_server/rdma_client.  Then the
same pairs across the two-host veth pair (rxe1 <-> rxe2) when the VM has
it.  The behavioural CM tests shared with the fabric are in
tests/verbs/test_cm.py.
"""
import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cm_peers  # noqa: E402

import rdma.cm as cm  # noqa: E402

ADDR = "192.0.2.1"
TWO_HOST = os.environ.get("RDMA_TESTVM_TWO_HOST") == "1"
_ports = itertools.count(17000)


def port():
    return next(_ports)


def start(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=60):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{proc.args} hung:\n{out}")
    return proc.returncode, out


def retry_connect(fn, *args, timeout=20.0, **kw):
    """Call a client peer until the C server listens (REJECTED before;
    UNREACHABLE for a SIDR request)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return fn(*args, **kw)
        except cm.CMEventError as e:
            if (e.event.event not in (cm.CMEventType.REJECTED,
                                      cm.CMEventType.UNREACHABLE) or
                    time.monotonic() > end):
                raise
            time.sleep(0.2)


def serve(fn, *args, **kw):
    """Run a server peer in a thread; return (thread, result, ready)."""
    res = {}
    ready = threading.Event()

    def run():
        try:
            res.update(fn(*args, ready=ready.set, **kw))
        except BaseException as e:     # reported by the test
            res["error"] = e
            ready.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(30), "the rdma.cm server did not start listening"
    return t, res


def joined(t, res, timeout=60):
    t.join(timeout)
    assert not t.is_alive(), "the rdma.cm server hung"
    if "error" in res:
        raise res["error"]
    return res


def addresses():
    pairs = [pytest.param(ADDR, ADDR, id="rxe0")]
    if TWO_HOST:
        pairs.append(pytest.param("198.51.100.2", "198.51.100.2",
                                  id="two-host"))
    return pairs


# ---- rping ------------------------------------------------------------

@pytest.mark.parametrize("addr,_", addresses())
def test_our_client_against_rping_server(addr, _):
    p = port()
    srv = start(["rping", "-s", "-v", "-a", addr, "-p", str(p), "-C", "3"])
    try:
        got = retry_connect(cm_peers.rping_client, addr, p, 3)
    finally:
        rc, out = finish(srv)
    assert got["pings"] == 3
    assert "rdma-ping-0" in out and "rdma-ping-2" in out, out


@pytest.mark.parametrize("addr,_", addresses())
def test_rping_client_against_our_server(addr, _):
    p = port()
    t, res = serve(cm_peers.rping_server, addr, p, 3)
    rc, out = finish(start(["rping", "-c", "-v", "-V", "-a", addr,
                            "-p", str(p), "-C", "3"]))
    joined(t, res)
    assert rc == 0, out
    assert res["pings"] == 3
    assert all(d.startswith(b"rdma-ping-") for d in res["data"]), res


# ---- ucmatose ---------------------------------------------------------

@pytest.mark.parametrize("addr,_", addresses())
def test_our_client_against_ucmatose(addr, _):
    p = port()
    srv = start(["ucmatose", "-b", addr, "-p", str(p), "-C", "10"])
    try:
        got = retry_connect(cm_peers.ucmatose_client, addr, p, 10)
    finally:
        rc, out = finish(srv)
    assert rc == 0, out
    assert got["recvs"] == 10


@pytest.mark.parametrize("addr,_", addresses())
def test_ucmatose_client_against_our_server(addr, _):
    p = port()
    t, res = serve(cm_peers.ucmatose_server, addr, p, 10)
    rc, out = finish(start(["ucmatose", "-s", addr, "-p", str(p),
                            "-C", "10"]))
    joined(t, res)
    assert rc == 0, out
    assert res["recvs"] == 10


# ---- udaddy -----------------------------------------------------------

@pytest.fixture(scope="module")
def udaddy_works():
    """udaddy against udaddy first: the Debian build of rdma-core this VM
    runs fails its own rdma_create_id with EINVAL (an uninitialized port
    space, seen with strace), and then neither direction can be tried."""
    p = port()
    srv = start(["udaddy", "-b", ADDR, "-p", str(p), "-C", "1"])
    time.sleep(1)
    res = subprocess.run(["udaddy", "-s", ADDR, "-p", str(p), "-C", "1"],
                         capture_output=True, text=True, timeout=60)
    rc, out = finish(srv)
    if rc != 0 or res.returncode != 0:
        pytest.skip(f"udaddy fails against udaddy here (server: {out!r}, "
                    f"client rc {res.returncode})")


@pytest.mark.parametrize("addr,_", addresses())
def test_our_client_against_udaddy(addr, _, udaddy_works):
    p = port()
    srv = start(["udaddy", "-b", addr, "-p", str(p), "-C", "10"])
    try:
        got = retry_connect(cm_peers.udaddy_client, addr, p, 10)
    finally:
        rc, out = finish(srv)
    assert rc == 0, out
    assert got["recvs"] == 10
    assert got["qkey"] == cm.RDMA_UDP_QKEY


@pytest.mark.parametrize("addr,_", addresses())
def test_udaddy_client_against_our_server(addr, _, udaddy_works):
    p = port()
    t, res = serve(cm_peers.udaddy_server, addr, p, 10)
    rc, out = finish(start(["udaddy", "-s", addr, "-p", str(p),
                            "-C", "10"]))
    joined(t, res)
    assert rc == 0, out
    assert res["recvs"] == 10


# ---- rdma_server / rdma_client ---------------------------------------

@pytest.mark.parametrize("addr,_", addresses())
def test_our_client_against_rdma_server(addr, _):
    p = port()
    srv = start(["rdma_server", "-s", addr, "-p", str(p)])
    try:
        got = retry_connect(cm_peers.rdma_client, addr, p)
    finally:
        rc, out = finish(srv)
    assert rc == 0, out
    assert len(got["reply"]) == 16      # rdma_server answers 16 zero bytes


@pytest.mark.parametrize("addr,_", addresses())
def test_rdma_client_against_our_server(addr, _):
    p = port()
    t, res = serve(cm_peers.rdma_server, addr, p)
    rc, out = finish(start(["rdma_client", "-s", addr, "-p", str(p)]))
    joined(t, res)
    assert rc == 0, out
    assert len(res["got"]) == 16


# ---- ibtool cm-pingpong against rping ---------------------------------

def ibtool_cm(*args):
    return [sys.executable, "-m", "rdma", "cm-pingpong", *args]


def test_ibtool_cm_pingpong_client_against_rping_server():
    p = str(port())
    srv = start(["rping", "-s", "-v", "-a", ADDR, "-p", p, "-C", "3"])
    try:
        rc, out = finish(start(ibtool_cm(ADDR, "-p", p, "-C", "3", "-V",
                                         "--wait", "20")))
    finally:
        _, sout = finish(srv)
    assert rc == 0, out
    assert "3 pings of 64 bytes" in out
    assert "rdma-ping-2" in sout, sout


def test_rping_client_against_ibtool_cm_pingpong_server():
    p = str(port())
    srv = start(ibtool_cm("-a", ADDR, "-p", p, "-C", "3", "-v"))
    line = srv.stdout.readline()
    assert "listening on" in line, line
    rc, out = finish(start(["rping", "-c", "-v", "-V", "-a", ADDR, "-p", p,
                            "-C", "3"]))
    src, sout = finish(srv)
    assert rc == 0, out
    assert src == 0, sout
    assert "server ping data: rdma-ping-2" in sout


# ---- ADDR_ERROR: an address with no RDMA device behind it --------------

@pytest.fixture
def plain_netdev():
    """A dummy interface with an address (10.77.0.1/24) and no rxe on it."""
    cmd = ("ip link add cmtest0 type dummy && "
           "ip addr add 10.77.0.1/24 dev cmtest0 && ip link set cmtest0 up")
    res = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    yield "10.77.0.2"
    subprocess.run(["ip", "link", "del", "cmtest0"], capture_output=True)


def test_addr_error_when_no_rdma_device_is_behind_the_address(plain_netdev):
    """The route leads to a netdev without an RDMA device: ADDR_ERROR with
    -ENODEV, from the event API and from connect()."""
    import errno
    with cm.EventChannel("verbs") as ch:
        cid = ch.create_id()
        cid.resolve_addr((plain_netdev, 5000), timeout_ms=1000)
        ev = ch.get_event(timeout=10)
        assert ev.event == cm.CMEventType.ADDR_ERROR and ev.id is cid
        assert ev.status == -errno.ENODEV
        assert cid.device_name == ""
    with pytest.raises(cm.CMEventError) as ei:
        cm.connect(plain_netdev, 5000, provider="verbs")
    assert ei.value.event.event == cm.CMEventType.ADDR_ERROR
    assert "ADDR_ERROR" in str(ei.value) and "No such device" in str(ei.value)
