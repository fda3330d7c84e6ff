"""The fabric node's files under hostile conditions (issue #21, round 2):

- a full /dev/shm (shared by every user of the machine) is an error at a
  call that can fail, never SIGBUS in a running process;
- nodes in other pid namespaces that share /dev/shm: liveness of a node
  record holds across them.

These tests need root (a private mount namespace with a small tmpfs on
/dev/shm; pid namespaces), and run real fabric nodes
(tests/host/fabric_node_peer.py).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric_helpers import PeerProcess

HERE = Path(__file__).resolve().parent
PEER = HERE / "fabric_node_peer.py"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a private "
                       "mount namespace with a small tmpfs on /dev/shm, "
                       "pid namespaces"),
    pytest.mark.skipif(shutil.which("unshare") is None or
                       shutil.which("nsenter") is None,
                       reason="needs unshare and nsenter (util-linux)"),
]


class SmallShm:
    """A private mount namespace whose /dev/shm is a tmpfs of *size*,
    held open by a sleeping process; ``prefix`` runs a command in it."""

    def __init__(self, size="32m"):
        self.p = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f"mount -t tmpfs -o size={size},mode=1777 tmpfs /dev/shm && "
             "echo up && exec sleep 3600"],
            stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if line.strip() != "up":
            self.p.kill()
            self.p.wait()
            pytest.skip("cannot mount a tmpfs in a private mount namespace")
        self.prefix = ("nsenter", "-t", str(self.p.pid), "-m")

    def run(self, cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.prefix, "sh", "-c", cmd],
                              capture_output=True, text=True, timeout=60)

    def fill(self) -> None:
        """Fill /dev/shm to the last byte (the file stays)."""
        r = self.run("cat /dev/zero > /dev/shm/filler; "
                     "df -k /dev/shm | tail -1")
        assert "No space left" in r.stderr, r
        assert r.stdout.split()[3] == "0", r.stdout

    def close(self) -> None:
        self.p.kill()
        self.p.wait()
        self.p.stdout.close()


@pytest.fixture
def shm():
    s = SmallShm()
    yield s
    s.close()


def node(shm_ns, env=None):
    e = {"RDMA_UCX_DIR": "", "UCX_LOG_FILE": "stderr"}
    e.update(env or {})
    return PeerProcess(PEER, env=e, prefix=shm_ns.prefix if shm_ns else ())


def ask(peer, cmd, timeout=40):
    """Send *cmd* and read the answer; a peer killed by a signal fails
    the test with the signal's name."""
    peer.send(cmd)
    try:
        return peer.read(timeout)
    except AssertionError:
        rc = peer.p.poll()
        if rc is not None and rc < 0:
            raise AssertionError(f"the node died of "
                                 f"{signal.Signals(-rc).name} at {cmd}")
        raise


def test_full_shm_at_start_is_a_clean_error(shm):
    shm.fill()
    a = node(shm)
    try:
        first = a.read(40)
        assert "error" in first, first
        assert first["errno"] in (28, 12), first          # ENOSPC, ENOMEM
    finally:
        a.close({"op": "exit"})
    assert a.p.returncode == 0


def test_full_shm_reg_mr_in_running_node(shm):
    """A running node registers MRs after /dev/shm filled up: each entry
    of its key page is a page of /dev/shm it has not touched yet (before
    the fix: SIGBUS)."""
    a = node(shm)
    try:
        info = a.read(40)
        assert "error" not in info, info
        shm.fill()
        r = ask(a, {"op": "reg", "n": 600})
        # the key page's space was reserved when it was made: the MRs
        # register (or, at worst, fail with an error code)
        assert r.get("ok") == 600 or r.get("errno") in (28, 12), r
        r = ask(a, {"op": "reg", "n": 1})
        assert "ok" in r or r.get("errno") in (28, 12), r
    finally:
        a.close({"op": "exit"})
    assert a.p.returncode == 0


@pytest.mark.parametrize("how", ["gid", "lid"])
def test_full_shm_send_to_new_peer(shm, how):
    """Two running nodes; /dev/shm fills up; the first SEND of one to the
    other makes a request ring in /dev/shm (before the fix: SIGBUS at the
    first write into it).  The SEND is delivered (over UCX) or fails with
    an error completion; neither node dies."""
    a, b = node(shm), node(shm)
    try:
        ia, ib = a.read(40), b.read(40)
        assert "error" not in ia and "error" not in ib, (ia, ib)
        shm.fill()
        ra = ask(a, {"op": "connect", how: ib[how], "qpn": ib["qpn"]})
        rb = ask(b, {"op": "connect", how: ia[how], "qpn": ia["qpn"]})
        if "error" in ra or "error" in rb:
            # a connect that fails for want of space is a clean error too
            assert {ra.get("errno"), rb.get("errno")} & {28, 12}, (ra, rb)
            return
        for data in ("68656c6c6f", "00"):       # the second: no signal
            assert ask(b, {"op": "recv"}) == {"posted": 1}
            r = ask(a, {"op": "send", "data": data})
            assert "status" in r, r
            if r["status"] != 0:
                break
            assert b.read(40) == {"status": 0, "data": data}
    finally:
        a.close({"op": "exit"})
        b.close({"op": "exit"})
    assert (a.p.returncode, b.p.returncode) == (0, 0)
