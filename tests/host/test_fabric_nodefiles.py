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
        assert "/dev/shm" in first["error"], first
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


# --------------------------------------------------------------------------
# pid namespaces: two containers that share /dev/shm

PIDNS = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


@pytest.fixture
def rdir():
    """A rendezvous directory of this test's own (other tests' nodes
    are not swept or seen)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="rdma-ucx-test-", dir="/dev/shm")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def files_of(d, info):
    """The rendezvous files of the node whose address is *info*."""
    guid = "".join(f"{b:02x}" for b in __import__("ipaddress")
                   .IPv6Address(info["gid"]).packed[8:])
    return [os.path.join(d, n) for n in (f"node-{guid}", f"keys-{guid}",
                                         f"lid-{info['lid']:04x}")]


def pidns_node(d, pidns=False):
    return PeerProcess(PEER, env={"RDMA_UCX_DIR": d,
                                  "UCX_LOG_FILE": "stderr"},
                       prefix=PIDNS if pidns else ())


def talk(x, ix, y, iy, how):
    """Connect x and y (by LID or GID) and SEND one message from x to y."""
    assert ask(x, {"op": "connect", how: iy[how], "qpn": iy["qpn"]}) == \
        {"ok": 1}
    assert ask(y, {"op": "connect", how: ix[how], "qpn": ix["qpn"]}) == \
        {"ok": 1}
    assert ask(y, {"op": "recv"}) == {"posted": 1}
    assert ask(x, {"op": "send", "data": "abcd"}) == {"status": 0}
    assert y.read(40) == {"status": 0, "data": "abcd"}


def test_pid_namespace_keeps_live_records(rdir):
    """A (this pid namespace), B (its own pid namespace, same /dev/shm),
    then C: B's start must not sweep A's files (A's pid means nothing in
    B's namespace, B's own pid is 1), and C reaches both by LID."""
    nodes = []
    try:
        a = pidns_node(rdir)
        nodes.append(a)
        ia = a.read(40)
        assert "error" not in ia, ia
        b = pidns_node(rdir, pidns=True)
        nodes.append(b)
        ib = b.read(40)
        assert "error" not in ib, ib
        assert ib["pid"] == 1, ib               # it is in its own namespace
        gone = [f for f in files_of(rdir, ia) if not os.path.exists(f)]
        assert not gone, f"B's start swept live node A's files {gone}"
        c1 = pidns_node(rdir)
        nodes.append(c1)
        ic1 = c1.read(40)
        talk(c1, ic1, a, ia, "lid")
        c2 = pidns_node(rdir)
        nodes.append(c2)
        ic2 = c2.read(40)
        talk(c2, ic2, b, ib, "lid")
        # both stay up: a liveness check that misread the other
        # namespace's pids would fail them within 100 ms
        time.sleep(0.5)
        assert ask(c2, {"op": "recv"}) == {"posted": 1}
        assert ask(b, {"op": "send", "data": "ef"}) == {"status": 0}
        assert c2.read(40) == {"status": 0, "data": "ef"}
    finally:
        for n in nodes:
            n.close({"op": "exit"})


def test_dead_nodes_records_are_swept(rdir):
    """A node killed (SIGKILL: no clean-up of its own) leaves its files;
    the next node to start removes them, whether the dead node was in
    this pid namespace or in another (whose record says pid 1)."""
    b = pidns_node(rdir, pidns=True)
    ib = b.read(40)
    a = pidns_node(rdir)
    try:
        ia = a.read(40)
        assert "error" not in ia and "error" not in ib, (ia, ib)
        fa, fb = files_of(rdir, ia), files_of(rdir, ib)
        assert all(map(os.path.exists, fa + fb))
        with open(f"/proc/{b.pid}/task/{b.pid}/children") as f:
            inner = int(f.read().split()[0])    # B's python, seen from here
        a.p.kill()
        b.p.kill()                              # --kill-child: B too
        a.p.wait(10)
        b.p.wait(10)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{inner}") and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{inner}")
        assert all(map(os.path.exists, fa + fb))  # nothing cleaned up
        c = pidns_node(rdir)
        try:
            assert "error" not in c.read(40)
            left = [f for f in fa + fb if os.path.exists(f)]
            assert not left, f"dead nodes' files not swept: {left}"
        finally:
            c.close({"op": "exit"})
    finally:
        a.close()
        b.close()


def test_forked_child_does_not_keep_a_dead_node_alive(rdir):
    """A forked child shares its parent's open files: it must not keep
    the liveness lock of the parent's record once the parent is dead."""
    a = pidns_node(rdir)
    child = None
    try:
        ia = a.read(40)
        assert "error" not in ia, ia
        child = ask(a, {"op": "fork"})["child"]
        fa = files_of(rdir, ia)
        a.p.kill()
        a.p.wait(10)
        assert os.path.exists(f"/proc/{child}")
        c = pidns_node(rdir)
        try:
            assert "error" not in c.read(40)
            left = [f for f in fa if os.path.exists(f)]
            assert not left, f"the dead parent's files stayed: {left}"
        finally:
            c.close({"op": "exit"})
    finally:
        a.close()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
