"""The verbs front end (``python -m rdma.fabric exec``) beside real devices:
Soft-RoCE's rxe in the test VM.

Preloaded, a program sees the real devices and ``ucx0``; calls on the real
devices and their objects must reach the real libibverbs unchanged, and so
must UCX's own calls (its rc_verbs transport on rxe), while ``ucx0`` works
in the same machine.  Shown with rdma-core's tools, perftest, pyverbs and
``ucx_perftest``, each preloaded process against a preloaded or a plain
peer.  Every process is bounded by a timeout and killed at the end.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "host"))
import fabric_helpers as fh  # noqa: E402
from verbs_fixtures import DEVICE, GID_INDEX  # noqa: E402

T = 120         # seconds for any one process (the VM emulates its CPU)
HOST = Path(__file__).resolve().parent.parent / "host"
IP = os.environ.get("RDMA_TESTVM_IP", "192.0.2.1")
SHM = {"UCX_TLS": "shm,self"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}

_REASON = fh.c_front_missing(("ibv_devices", "ibv_devinfo",
                              "ibv_rc_pingpong"))
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def env(tmp_path):
    """The environment of one test's processes: a private rendezvous
    directory for ucx0, the front end's notes on stderr, no preload (the
    commands ask for it)."""
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    e = dict(os.environ, RDMA_UCX_DIR=str(d), UCX_WARN_UNUSED_ENV_VARS="n")
    e.pop("LD_PRELOAD", None)
    return e


def on_fabric(*cmd):
    """CMD run through the front end."""
    return [sys.executable, "-P", "-m", "rdma.fabric", "exec", "--", *cmd]


def run(cmd, env):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=T,
                         env=env)
    assert res.returncode == 0, f"{cmd}:\n{res.stdout}\n{res.stderr}"
    return res


check_pingpong = fh.check_pingpong


# ---- the device list and the queries ----------------------------------

def _devices(out):
    """{name: node GUID} of ibv_devices' output, in its order."""
    rows = [line.split() for line in out.splitlines()[2:]]
    return {r[0]: r[1] for r in rows if len(r) == 2}


def test_device_list_real_devices_then_ucx0(env):
    plain = _devices(run(["ibv_devices"], env).stdout)
    pre = _devices(run(on_fabric("ibv_devices"), env).stdout)
    assert DEVICE in plain and "ucx0" not in plain, plain
    # the real devices as libibverbs lists them, ucx0 last
    assert list(pre) == list(plain) + ["ucx0"], pre
    assert {k: pre[k] for k in plain} == plain


def test_devinfo_of_the_real_device_is_unchanged(env):
    """ibv_devinfo -v on rxe: every line the same with and without the
    front end (the queries reach the real libibverbs and rxe)."""
    cmd = ["ibv_devinfo", "-v", "-d", DEVICE]
    plain = run(cmd, env).stdout
    assert f"hca_id:\t{DEVICE}" in plain and "PORT_ACTIVE" in plain, plain
    assert run(on_fabric(*cmd), env).stdout == plain


def test_devinfo_of_ucx0_beside_rxe(env):
    out = run(on_fabric("ibv_devinfo", "-v", "-d", "ucx0"), env).stdout
    assert "hca_id:\tucx0" in out and "PORT_ACTIVE" in out, out
    assert DEVICE not in out


# ---- rdma-core's pingpongs on rxe ---------------------------------------

RXE_PINGPONGS = [
    # (tool, extra arguments, server preloaded, client preloaded)
    ("ibv_rc_pingpong", [], True, True),
    ("ibv_rc_pingpong", [], True, False),
    ("ibv_rc_pingpong", [], False, True),
    ("ibv_rc_pingpong", ["-e"], True, True),    # completion channel
    ("ibv_uc_pingpong", [], True, True),
    ("ibv_ud_pingpong", [], True, False),       # the real ibv_create_ah
    ("ibv_srq_pingpong", ["-q", "4"], True, True),
]


def _side(preloaded):
    return "preloaded" if preloaded else "plain"


@pytest.mark.parametrize(
    "tool,extra,srv_pre,cli_pre", RXE_PINGPONGS,
    ids=[" ".join([t, *e, _side(s), "to", _side(c)])
         for t, e, s, c in RXE_PINGPONGS])
def test_pingpong_on_rxe(env, tool, extra, srv_pre, cli_pre):
    """A C tool on rxe through the front end, against a preloaded or a
    plain peer.  UCX_TLS is left alone: the preloaded processes' fabric
    nodes may open rxe through UCX meanwhile."""
    port = fh.free_port()
    iters = 200
    args = [tool, "-d", DEVICE, "-g", str(GID_INDEX), "-p", str(port),
            "-n", str(iters), *extra]
    srv = on_fabric(*args) if srv_pre else args
    cli = [*on_fabric(*args), "127.0.0.1"] if cli_pre else \
        [*args, "127.0.0.1"]
    res = fh.pair(srv, cli, port, env, timeout=T)
    s, c = check_pingpong(res, iters)
    # RoCE v2: both sides on rxe's IPv4-mapped GID
    assert s.group(3) == c.group(3) == f"::ffff:{IP}", (s, c)


@pytest.mark.parametrize("tls", ["shm", "tcp", "unset"])
def test_ucx0_pingpong_beside_rxe(env, tls):
    """ibv_rc_pingpong on ucx0 in the machine that has rxe: the fabric's
    UCX kept to shared memory or TCP, by UCX_TLS or by the fabric's own
    default when it is unset (UCX's verbs transports on rxe made RC fail:
    see docs/c_programs.rst)."""
    env.pop("UCX_TLS", None)
    if tls != "unset":
        env.update(SHM if tls == "shm" else TCP)
    port = fh.free_port()
    args = ["ibv_rc_pingpong", "-d", "ucx0", "-g", "0", "-p", str(port),
            "-n", "200"]
    res = fh.pair(on_fabric(*args), on_fabric(*args, "127.0.0.1"), port,
                  env, timeout=T)
    s, c = check_pingpong(res, 200)
    assert s.group(3).startswith("fe80::") and s.group(3) != c.group(3)


def test_rxe_and_ucx0_at_once(env):
    """A pingpong on rxe and one on ucx0 running at the same time, all
    four processes preloaded."""
    env.update(SHM)
    p1, p2 = fh.free_port(), fh.free_port()
    rxe = ["ibv_rc_pingpong", "-d", DEVICE, "-g", str(GID_INDEX), "-p",
           str(p1), "-n", "500"]
    ucx = ["ibv_rc_pingpong", "-d", "ucx0", "-g", "0", "-p", str(p2),
           "-n", "500"]
    procs = []
    try:
        for port, args in ((p1, rxe), (p2, ucx)):
            srv = fh.popen(on_fabric(*args), env)
            procs.append(srv)
            fh.wait_listening(srv, port, T)
        for args in (rxe, ucx):
            procs.append(fh.popen(on_fabric(*args, "127.0.0.1"), env))
        res = []
        for p in procs:
            out, err = p.communicate(timeout=T)
            res.append((p.returncode, out, err))
    finally:
        for p in procs:
            fh.kill(p)
    addrs = check_pingpong(res, 500)
    assert addrs[0].group(3) == f"::ffff:{IP}"
    assert addrs[1].group(3).startswith("fe80::")


# ---- perftest on rxe ----------------------------------------------------

def rdma_cm_listening(port):
    """True once an rdma_cm ID listens on port (iproute2's rdma tool: an
    rdma_cm listener has no TCP socket)."""
    tool = shutil.which("rdma", path="/usr/sbin:/sbin:/usr/bin:/bin")
    out = subprocess.run([tool, "resource", "show", "cm_id"],
                         capture_output=True, text=True, timeout=T).stdout
    return any("LISTEN" in line and re.search(rf"[:\]]{port}\b", line)
               for line in out.splitlines())


PERFTESTS = [("ib_write_bw", []), ("ib_send_lat", []),
             ("ib_write_bw", ["-R"])]    # rdma_cm: librdmacm's device list


@pytest.mark.parametrize("tool,extra", PERFTESTS,
                         ids=[" ".join([t, *e]) for t, e in PERFTESTS])
def test_perftest_on_rxe(env, tool, extra):
    """perftest on rxe, both sides preloaded; with -R the connection is
    made by librdmacm (which lists the devices itself)."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian package perftest)")
    for _ in range(3):
        port = fh.free_port()
        args = [tool, "-d", DEVICE, "-x", str(GID_INDEX), "-p", str(port),
                "-n", "200", *extra]
        if "-R" in extra:
            res = fh.pair(on_fabric(*args), on_fabric(*args, IP), port,
                          env, timeout=T, ready=rdma_cm_listening)
        else:
            res = fh.pair(on_fabric(*args), on_fabric(*args, "127.0.0.1"),
                          port, env, timeout=T)
        # perftest's cycle-counter calibration can fail on a loaded
        # (here: emulated) CPU; the transfer was fine: run it again
        if not any("Can't produce a report" in out + err
                   for _, out, err in res):
            break
    for rc, out, err in res:
        assert rc == 0, out + err
        assert f"Device         : {DEVICE}" in out, out
    assert re.search(r"^\s*\d+\s+200\s+[\d.]+", res[1][1], re.M), res[1][1]


# ---- pyverbs ------------------------------------------------------------

def test_pyverbs_on_rxe_and_ucx0(env):
    """Debian's pyverbs (its libibverbs is dlopen()ed by Python, so not in
    the global scope): one preloaded process lists both devices and runs a
    SEND and an RDMA WRITE between two RC QPs on rxe (by GID), then on
    ucx0 (by LID)."""
    py = "/usr/bin/python3"
    if not os.path.exists(py) or subprocess.run(
            [py, "-c", "import pyverbs.device"], capture_output=True,
            timeout=T).returncode != 0:
        pytest.skip("pyverbs is not installed (Debian package "
                    "python3-pyverbs)")
    env.update(SHM)
    res = run(on_fabric(py, str(HOST / "c_front_pyverbs.py"),
                        f"{DEVICE}:{GID_INDEX}", "ucx0"), env)
    assert res.stdout.strip() == "ok", res.stdout + res.stderr


# ---- UCX's own libibverbs -----------------------------------------------

def test_ucx_lists_rxe_under_preload(env):
    """ucx_info -d preloaded: UCX still finds its verbs transports on rxe
    (its ibv_get_device_list reaches the real libibverbs, which it
    loaded with dlopen)."""
    if shutil.which("ucx_info") is None:
        pytest.skip("ucx_info is not installed (Debian package ucx-utils)")
    plain = run(["ucx_info", "-d"], env).stdout
    pre = run(on_fabric("ucx_info", "-d"), env)
    tls = re.compile(r"Transport: (\w+)\n#\s+Device: (\S+)")
    want = [m for m in tls.findall(plain) if m[1] == f"{DEVICE}:1"]
    assert ("rc_verbs", f"{DEVICE}:1") in want, plain
    assert [m for m in tls.findall(pre.stdout)
            if m[1] == f"{DEVICE}:1"] == want, pre.stdout + pre.stderr


@pytest.mark.parametrize("test", ["am_lat", "put_lat"])
def test_ucx_rc_verbs_under_preload(env, test):
    """ucx_perftest on UCT's rc_verbs transport over rxe, both processes
    preloaded: UCX's QPs, MRs and CQs are rxe's, through the real
    libibverbs.  (UCX 1.13's ud_verbs aborts on rxe with or without the
    front end, and so UCP's rc, which needs it: not tested.)"""
    if shutil.which("ucx_perftest") is None:
        pytest.skip("ucx_perftest is not installed (Debian package "
                    "ucx-utils)")
    env.update(RDMA_FABRIC_VERBS_DEBUG="1")
    port = fh.free_port()
    res = fh.pair(on_fabric("ucx_perftest", "-p", str(port)),
                  on_fabric("ucx_perftest", "127.0.0.1", "-p", str(port),
                            "-d", f"{DEVICE}:1", "-x", "rc_verbs", "-t",
                            test, "-n", "200", "-w", "10"),
                  port, env, timeout=T)
    for rc, out, err in res:
        assert rc == 0 and "ERROR" not in out + err, out + err
        # the front end was there, and sent UCX to the real devices
        assert "ibv_get_device_list from UCX: the real devices only" in err
    assert re.search(r"^Final:\s+200\s", res[1][1], re.M), res[1][1]
