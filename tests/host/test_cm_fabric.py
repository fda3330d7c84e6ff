"""``ibtool cm-pingpong`` between processes on the software fabric, and
against librdmacm's ``rping`` run through the verbs front end
(``python -m rdma.fabric exec``), both directions: rdma.cm on ucx0 with
the fabric's connection manager, C to Python and Python to C."""
import os
import shutil
import signal
import subprocess
import sys

import pytest

import fabric_helpers as fh
from host_helpers import ROOT

T = 90


@pytest.fixture
def env(tmp_path):
    return fh.rendezvous_env(tmp_path, RDMA_PROVIDER="ucx")


def ibtool(*args):
    return [sys.executable, "-m", "rdma", "cm-pingpong", *args]


on_fabric = fh.on_fabric


def run_pair(server, client, env, wait_line=None):
    """Start server; once it printed wait_line (if given) run client;
    return ((rc, out) of the server, (rc, out) of the client)."""
    srv = subprocess.Popen(server, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        if wait_line:
            line = srv.stdout.readline()
            assert wait_line in line, line
        cli = subprocess.run(client, env=env, capture_output=True, text=True,
                             timeout=T)
        s_out, _ = srv.communicate(timeout=T)
        return (srv.returncode, s_out), (cli.returncode,
                                          cli.stdout + cli.stderr)
    finally:
        fh.kill(srv)


def test_cm_pingpong_between_processes(env):
    port = str(fh.free_port())
    (src, sout), (crc, cout) = run_pair(
        ibtool("-a", "127.0.0.1", "-p", port, "-C", "20", "-v"),
        ibtool("127.0.0.1", "-p", port, "-C", "20", "-V"), env,
        wait_line="listening on 127.0.0.1")
    assert crc == 0, cout
    assert src == 0, sout
    assert "20 pings of 64 bytes" in cout
    assert "server ping data: rdma-ping-19" in sout


def test_cm_pingpong_to_nobody_is_one_line(env):
    port = str(fh.free_port())
    res = subprocess.run(ibtool("127.0.0.1", "-p", port), env=env,
                         capture_output=True, text=True, timeout=T)
    assert res.returncode == 1
    err = res.stderr.strip()
    assert err.startswith("ibtool cm-pingpong: ") and "\n" not in err
    assert "REJECTED" in err


needs_rping = pytest.mark.skipif(shutil.which("rping") is None,
                                 reason="rping (rdmacm-utils) missing")


@needs_rping
def test_rping_client_against_ibtool_server(env):
    port = str(fh.free_port())
    (src, sout), (crc, cout) = run_pair(
        ibtool("-a", "127.0.0.1", "-p", port, "-C", "5", "-v"),
        on_fabric("rping", "-c", "-a", "127.0.0.1", "-p", port, "-C", "5",
                  "-v", "-V"), env, wait_line="listening on 127.0.0.1")
    assert crc == 0, cout
    assert src == 0, sout
    assert cout.count("ping data: rdma-ping-") == 5
    assert "server ping data: rdma-ping-4" in sout


@needs_rping
def test_ibtool_client_against_rping_server(env):
    port = str(fh.free_port())
    (src, sout), (crc, cout) = run_pair(
        on_fabric("rping", "-s", "-a", "127.0.0.1", "-p", port, "-C", "5",
                  "-v"),
        ibtool("127.0.0.1", "-p", port, "-C", "5", "-V", "--wait", "20"),
        env)
    assert crc == 0, cout
    assert "5 pings of 64 bytes" in cout
    assert "server ping data: rdma-ping-4" in sout


def test_verbs_cm_without_librdmacm(env, tmp_path):
    """librdmacm is loaded on the first channel: import rdma (and rdma.cm)
    work without it, and the channel fails naming the file and the Debian
    package."""
    code = (
        "import errno, rdma, rdma.cm as cm\n"
        "try:\n"
        "    cm.EventChannel('verbs')\n"
        "except rdma.SysError as e:\n"
        "    assert e.errno == errno.ENOENT, e\n"
        "    print(e)\n")
    e = dict(env, RDMA_RDMACM_LIBRARY=str(tmp_path / "librdmacm.so.1"),
             PYTHONPATH=os.pathsep.join([
                 p for p in os.environ.get("PYTHONPATH", "").split(
                     os.pathsep) if p] + [str(ROOT)]))
    res = subprocess.run([sys.executable, "-c", code], env=e,
                         capture_output=True, text=True, timeout=T)
    assert res.returncode == 0, res.stderr
    assert "dlopen" in res.stdout and "librdmacm1" in res.stdout, res.stdout


_SILENT = """
import sys, time
import rdma.cm as cm
with cm.listen(int(sys.argv[1]), "127.0.0.1", provider="ucx"):
    print("listening", flush=True)
    time.sleep(120)
"""
_LOCAL = """
import sys
import rdma.cm as cm
with cm.listen(int(sys.argv[1]), "127.0.0.1", provider="ucx") as lst:
    print("listening", flush=True)
    c = lst.accept(timeout=60)
    lst.channel.wait_event(c.id, cm.CMEventType.DISCONNECTED, timeout=60)
    c.close()
"""
_CLIENT = """
import sys, time
import rdma.cm as cm
with cm.EventChannel("ucx") as ch:
    far = ch.create_id()
    far.resolve(("127.0.0.1", int(sys.argv[1])))
    far.create_qp()
    far.connect()              # its node does not answer its HELLO
    time.sleep(0.3)
    t0 = time.monotonic()
    with cm.connect("127.0.0.1", int(sys.argv[2]), provider="ucx",
                    timeout=30):
        print(f"LOCAL {time.monotonic() - t0:.3f}", flush=True)
    ev = ch.get_event(timeout=20)
    print(f"FAR {ev} {time.monotonic() - t0:.1f}", flush=True)
"""


def test_cm_thread_goes_on_while_a_node_does_not_answer(env):
    """A connect towards a node that lives but does not answer (stopped:
    its HELLO waits up to 5 s) must not hold up the CM's thread: another
    ID's connection to a node that answers completes meanwhile.  The
    first ID then hears UNREACHABLE (-ETIMEDOUT), as when the IB CM's
    retries run out, instead of waiting for ever."""
    silent_port, local_port = fh.free_port(), fh.free_port()
    pyenv = dict(env, PYTHONPATH=str(ROOT))
    procs = []
    try:
        for code, port in ((_SILENT, silent_port), (_LOCAL, local_port)):
            p = subprocess.Popen([sys.executable, "-c", code, str(port)],
                                 env=pyenv, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
            procs.append(p)
            line = p.stdout.readline()
            assert "listening" in line, line + p.stdout.read()
        os.kill(procs[0].pid, signal.SIGSTOP)
        res = subprocess.run([sys.executable, "-c", _CLIENT,
                              str(silent_port), str(local_port)],
                             env=pyenv, capture_output=True, text=True,
                             timeout=T)
        assert res.returncode == 0, res.stdout + res.stderr
        took = float(res.stdout.split("LOCAL ")[1].split()[0])
        assert took < 2.5, res.stdout
        assert "FAR UNREACHABLE (status -110)" in res.stdout, res.stdout
    finally:
        if procs:
            os.kill(procs[0].pid, signal.SIGCONT)
        for p in procs:
            fh.kill(p)
