"""The software fabric against unlucky and hostile situations (#17): a peer
that is killed but not reaped, a rendezvous directory or file that another
user made, a child process after fork(), an initiator stopped in the middle
of a one-sided WRITE while its target deregisters the memory.

Each test runs the nodes it needs in their own processes, with their own
rendezvous directory where the test plants or changes files.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import fabric_helpers as fh
import rdma.ibverbs as ibv

pytestmark = pytest.mark.skipif(not fh.providers_with_devices()
                                or "ucx" not in fh.providers_with_devices(),
                                reason="no software fabric device")

TIMEOUT = 30
SHM = {"UCX_TLS": "shm,self", "UCX_WARN_UNUSED_ENV_VARS": "n"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo",
       "UCX_WARN_UNUSED_ENV_VARS": "n"}
#: a uid and gid no one on the test machine uses
STRANGER = 43210


class Peer(fh.PeerProcess):
    def __init__(self, role, env):
        super().__init__(fh.__file__, role, env=env, timeout=TIMEOUT)


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# -- a peer killed and not reaped (a zombie) ---------------------------------

@pytest.mark.parametrize("path", ["fast", "am-shm", "am-tcp"])
def test_writes_to_a_zombie_fail(path):
    """A responder is SIGKILLed while RDMA WRITEs stream to it, and its
    parent does not reap it (it stays a zombie, which kill(pid, 0) still
    finds).  The streamer gets RETRY_EXC_ERR within about the documented
    100 ms of liveness checking, far sooner than its ACK timeout (timeout
    18: ~8.6 s with 7 retries), on the one-sided fast path (alloc_mr
    memory, no ACK at all: before, WRITEs into the dead process's memory
    kept completing with SUCCESS) and on the active-message path over
    shared memory (the error came at the ACK timeout).  Over TCP the
    connection's end already told the streamer at once: a control case."""
    env = {**(TCP if path == "am-tcp" else SHM), "FABRIC_QP_TIMEOUT": "18"}
    b = Peer("responder", {**env, **({"FABRIC_ALLOC_MR": "1"}
                                     if path == "fast" else {})})
    a = Peer("streamer", env)
    try:
        fh.handshake(a, b)
        a.send({"go": 1})
        assert a.read()["running"] >= 100
        before = fh.node_stats(a.pid)
        os.kill(b.pid, signal.SIGKILL)
        t0 = time.monotonic()
        while _proc_state(b.pid) != "Z":
            assert time.monotonic() - t0 < 5, "the responder did not die"
            time.sleep(0.005)
        rep = a.read(timeout=TIMEOUT)
        assert _proc_state(b.pid) == "Z"       # never reaped meanwhile
        assert rep["status"] == ibv.IBV_WC_RETRY_EXC_ERR, rep
        assert rep["after"] < 2.0, rep
        assert set(rep["rest"]) <= {ibv.IBV_WC_WR_FLUSH_ERR}, rep
        assert rep["state"] == ibv.IBV_QPS_ERR
        if path == "fast":
            assert before["fast_write"] >= 100, before
    finally:
        a.close()
        b.close()


# -- the rendezvous directory and its files belong to this user alone --------

_OPEN = """
import rdma, rdma.ibverbs
try:
    with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as ctx:
        print("OPENED", ctx.end_port.lid)
except rdma.SysError as e:
    print("ERROR", e.errno, e.func, e)
"""


def _open_fabric(d, **kw) -> str:
    env = dict(os.environ, **SHM, RDMA_UCX_DIR=str(d))
    env.pop("RDMA_PROVIDER", None)
    r = subprocess.run([sys.executable, "-c", _OPEN], env=env, text=True,
                       capture_output=True, timeout=TIMEOUT, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to act as another user")


@needs_root
def test_directory_of_another_user_is_refused(tmp_path):
    """A rendezvous directory that another user made first (mode 0777, as
    an attacker would) is refused with an error naming it and its owner,
    never used: whoever can write there can delete a node's records or
    plant a key page its peers trust."""
    d = tmp_path / "fabric"
    d.mkdir()
    os.chown(d, STRANGER, STRANGER)
    d.chmod(0o777)
    out = _open_fabric(d)
    assert out.startswith("ERROR"), out
    assert str(d) in out and f"uid {STRANGER}" in out, out
    assert os.listdir(d) == []                  # nothing written there


def test_directory_open_to_others_or_a_symlink_is_refused(tmp_path):
    """A directory of ours that group or others can use, or a symbolic
    link in place of the directory, is refused with its path named."""
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o755)
    out = _open_fabric(d)
    assert out.startswith("ERROR") and str(d) in out and "0755" in out, out
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    out = _open_fabric(link)
    assert out.startswith("ERROR") and str(link) in out, out
    assert "not a directory" in out, out
    good = tmp_path / "good"
    good.mkdir(mode=0o700)
    assert _open_fabric(good).startswith("OPENED")


@needs_root
def test_key_page_of_another_user_is_not_trusted(tmp_path, monkeypatch):
    """A peer's key page (what a same-host initiator trusts for the
    one-sided checks) that is not the user's own private file is not
    mapped: the initiator takes the active-message path, whose responder
    checks everything itself.  With the real key page the same requests
    take the fast path (the control run)."""
    for planted in (False, True):
        d = tmp_path / f"fabric-{planted}"
        d.mkdir(mode=0o700)
        monkeypatch.setenv("RDMA_UCX_DIR", str(d))      # for fh.key_page
        env = {**SHM, "RDMA_UCX_DIR": str(d), "FABRIC_ALLOC_MR": "1"}
        b = Peer("responder", env)
        a = Peer("requester", env)
        try:
            ib, ia = b.read(), a.read()
            if planted:
                # the page now belongs to someone else (an attacker who
                # could write the directory would plant such a file)
                os.chown(fh.key_page(b.pid), STRANGER, STRANGER)
            fh.handshake(a, b, ia, ib)
            a.send({"go": 1})
            rep = a.read()
            assert rep["statuses"] == [ibv.IBV_WC_SUCCESS] * 4, rep
            assert rep["read_ok"] and rep["faa_old"] == 0, rep
            stats = fh.node_stats(b.pid)
            # WRITE, READ and FETCH_AND_ADD executed by the responder, or
            # by the requester in the responder's memory; the SEND always
            # by the responder
            if planted:
                assert stats["am_req"] == 4, stats
            else:
                assert stats["am_req"] == 1, stats
            b.send({"op": "recv"})
            assert b.read()["imm"] == 0x1234
        finally:
            a.close()
            b.close()


# -- no byte lands after MR.close() returns -----------------------------------

FENCE_SIZE = 512 << 20


class FencePeer(fh.PeerProcess):
    def __init__(self, role):
        super().__init__(os.path.join(os.path.dirname(fh.__file__),
                                      "fabric_fence_peer.py"),
                         role, str(FENCE_SIZE), env=SHM, timeout=TIMEOUT)


def test_no_byte_lands_after_dereg_returns():
    """An initiator is stopped (SIGSTOP) in the middle of a 512 MiB
    one-sided WRITE into alloc_mr memory; the target closes the MR.  The
    close waits about a second for the initiator, then fences it out (the
    target's view of the memory becomes private).  When the initiator
    resumes, its copy goes on, but not one more byte lands in the
    target's memory, and its WRITE completes with REM_ACCESS_ERR, not
    SUCCESS (before: every byte landed, and SUCCESS)."""
    for attempt in range(4):
        t, i = FencePeer("target"), FencePeer("initiator")
        stopped = False
        try:
            it, ii = t.read(), i.read()
            t.send(ii)
            i.send(it)
            assert t.read() == {"ready": True}
            i.send("target ready")
            assert i.read()["fast_write"] == 1     # the fast path is used
            i.send("go")
            assert i.read() == {"posting": True}
            time.sleep(0.02 + 0.03 * attempt)
            os.kill(i.pid, signal.SIGSTOP)
            stopped = True
            t.send("count")
            c0 = t.read()["count"]
            if not 0 < c0 < FENCE_SIZE:
                continue                # not caught inside the copy: again
            t.send("close")
            rep = t.read(timeout=TIMEOUT)
            assert rep["closed"] >= 0.9, rep        # it waited, then fenced
            assert rep["revoked"] == 1, rep
            t.send("count")
            assert t.read()["count"] == c0
            os.kill(i.pid, signal.SIGCONT)
            stopped = False
            done = i.read(timeout=TIMEOUT)
            assert done["status"] == ibv.IBV_WC_REM_ACCESS_ERR, done
            t.send("count")
            assert t.read()["count"] == c0     # nothing landed after close
            i.send("exit")
            return
        finally:
            if stopped:
                os.kill(i.pid, signal.SIGCONT)
            i.close(exit_msg="exit")
            t.close(exit_msg="exit")
    pytest.skip("the initiator was never stopped inside its copy")
