"""BUSY, REDIRECT and error answers from a real peer: tests/sa/mad_server.py
runs as a client of ibsim on its own node (SM-capable, ``SIM_SET_ISSM=1``,
so that ibsim passes it the node's GMP requests; this needs the fixed
shim, Debian's crashes with it) and answers Baseboard Management Gets the
way its mode says; the requester is our UMAD (and MADSchedule) on Hca2.
A fabric of its own per test: the SM-capable peers must not disturb the
other tests' fabric, and ibsim serves at most 10 clients, which a module's
worth of peers exceeds (their slots are not all given back)."""
import json
import os
import select
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import rdma.IBA as IBA

HERE = Path(__file__).resolve().parent


@pytest.fixture
def peers(tmp_path_factory):
    from conftest import TOPOLOGIES, _missing
    from fabric import Fabric
    why = _missing()
    if why:
        pytest.skip(why)
    f = Fabric(TOPOLOGIES["2sw4hca"], tmp_path_factory.mktemp("peers"))
    try:
        f.start()
        yield f
    finally:
        f.close()


class Peer:
    """A running mad_server.py on a node."""

    def __init__(self, fabric, node, mode, count, target=0):
        old = os.environ.get("SIM_SET_ISSM")
        os.environ["SIM_SET_ISSM"] = "1"
        try:
            self.proc = fabric.popen(
                [sys.executable, str(HERE / "mad_server.py"), mode,
                 str(count), str(target)], node, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True)
        finally:
            if old is None:
                del os.environ["SIM_SET_ISSM"]
            else:
                os.environ["SIM_SET_ISSM"] = old
        line = self._line(15)
        assert line.startswith("ready "), line
        self.lid = int(line.split()[1])

    def _line(self, timeout):
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            self.proc.kill()
            raise AssertionError("mad_server.py did not answer")
        return self.proc.stdout.readline()

    def summary(self, timeout=15):
        """Wait for the peer to end; its JSON summary."""
        line = self._line(timeout)
        while line.startswith("req "):
            line = self._line(timeout)
        assert line.startswith("done "), line
        self.proc.wait(5)
        return json.loads(line[5:])

    def got_none(self):
        """True if the peer has received no request (a request ibsim lost:
        see call())."""
        fd = self.proc.stdout.fileno()
        return not select.select([fd], [], [], 0.5)[0]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def start(peers):
    started = []

    def go(node, mode, count, target=0):
        p = Peer(peers, node, mode, count, target)
        started.append(p)
        return p
    yield go
    for p in started:
        p.kill()


def call(start, peers, node, mode, count, requester, **kw):
    """Start a peer on *node* and make one BM Get to it from *requester*:
    (peer, result).  Where the result is a timeout and the peer got no
    request at all (the simulator lost it: rare, on a loaded machine),
    once more with a new peer; a request the peer got and answered that
    then times out is the requester's failure and is returned."""
    for attempt, where in enumerate((node, "Hca4")):
        # (the second peer on another node: ibsim may keep the first
        # one's place as the SM client of its node)
        p = start(where, mode, count)
        got = peers.worker(requester).call("madop", "bm_get", p.lid, **kw)
        if not (isinstance(got, IBA.MADTimeoutError) and attempt == 0
                and p.got_none()):
            return p, got
        warnings.warn(f"ibsim lost the request to the peer on {node}: "
                      "once more, to a peer on Hca4")
        p.kill()
    raise AssertionError("unreachable")


@pytest.mark.parametrize("sched", [False, True], ids=["umad", "sched"])
def test_busy_is_sent_again(peers, start, sched):
    """Two BUSY answers, then the real one: the RPC returns it; the peer
    saw the same transaction three times."""
    # (5 s per answer: a timeout would be a try of its own)
    p, got = call(start, peers, "Hca3", "busy:2", 3, "Hca2", sched=sched,
                  timeout_ms=5000)
    assert got == p.lid
    assert p.summary()["tries"] == [3]


def test_busy_forever_is_an_error(peers, start):
    p, err = call(start, peers, "Hca3", "busy:99", 3, "Hca2",
                  busy_retries=2, timeout_ms=5000)
    assert isinstance(err, IBA.MADError), err
    assert "BMGet(MADClassPortInfo)" in str(err)
    assert "still BUSY after 3 tries" in str(err)
    assert p.summary()["tries"] == [3]


@pytest.mark.parametrize("sched", [False, True], ids=["umad", "sched"])
def test_redirect_is_followed_and_kept(peers, start, sched):
    """The peer on Hca3 redirects to the one on Hca4: the answer comes
    from Hca4; the next RPC to Hca3's LID goes to Hca4 directly."""
    target = start("Hca4", "ok", 2)
    redirector = start("Hca3", "redirect", 1, target.lid)
    w = peers.worker("Hca2") if not sched else peers.worker("Hca1")
    assert w.call("madop", "bm_get", redirector.lid, sched=sched) == \
        target.lid
    assert w.call("madop", "bm_get", redirector.lid, sched=sched) == \
        target.lid
    assert redirector.summary()["handled"] == 1
    assert target.summary()["handled"] == 2


def test_gone_redirect_target_falls_back(peers, start):
    """The remembered target no longer answers: the request goes to the
    original target again, which redirects anew (to a peer on another
    node)."""
    w = peers.worker("Hca1")
    target = start("Hca4", "ok", 1)
    redirector = start("Hca3", "redirect", 1, target.lid)
    w.call("madop", "bm_set_timeout", 200, 0)
    try:
        assert w.call("madop", "bm_get", redirector.lid) == target.lid
        target.summary()
        redirector.summary()
        target = start("Hca2", "ok", 1)
        redirector = start("Hca3", "redirect", 1, target.lid)
        assert w.call("madop", "bm_get", redirector.lid) == target.lid
        assert redirector.summary()["handled"] == 1
    finally:
        w.call("madop", "bm_set_timeout", None, None)


def test_error_status_names_the_rpc_and_path(peers, start):
    p, err = call(start, peers, "Hca3", "error", 1, "Hca2")
    assert isinstance(err, IBA.MADError) and not isinstance(
        err, IBA.MADTimeoutError), err
    assert err.status == IBA.MAD_STATUS_INVALID_ATTR_OR_MODIFIER
    assert f"BMGet(MADClassPortInfo) to LIDPath(DLID={p.lid})" in str(err)
    assert "invalid attribute" in str(err)
    p.summary()


@pytest.mark.parametrize("case", ["deadline", "max_bytes"])
def test_endless_rmpp_answer_is_bounded(peers, start, case):
    """A peer answers a GetTable with RMPP DATA segments for 30 s, none
    flagged Last; the requester joins RMPP in user space
    (``rmpp_in_user``).  The call ends with an error naming the cause at
    ``rmpp_deadline`` (2 s here), or as soon as the answer passes
    ``rmpp_max_bytes`` (8 KiB: 40 segments), instead of staying busy with
    its memory growing while the peer goes on."""
    p = start("Hca3", "rmpp-endless:30", 1)
    deadline, max_bytes = (2, 1 << 30) if case == "deadline" else \
        (60, 8192)
    r = peers.run([sys.executable, str(HERE / "rmpp_user.py"),
                   "SANodeRecord", str(p.lid), str(deadline),
                   str(max_bytes)], "Hca2", timeout=60)
    out = json.loads(r.stdout)
    if case == "deadline":
        assert out["error"] == "MADTimeoutError", out
        assert "did not end within 2 s" in out["msg"], out
        assert "none flagged Last" in out["msg"], out
        assert 2 <= out["seconds"] < 6, out
    else:
        assert out["error"] == "MADFormatError", out
        assert "RMPP transfer longer than 8192 bytes" in out["msg"], out
        assert out["seconds"] < 6, out
    p.kill()
