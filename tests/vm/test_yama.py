"""Yama's ptrace_scope 1 and the fabric's cross-memory attach (issue #21).

Under scope 1 a process's memory is open to ``process_vm_readv`` /
``process_vm_writev`` (and ``ptrace``) only from its ancestors and the
processes it names as ptracer.  A process that opens ucx0 must not name
every process (``PR_SET_PTRACER_ANY``) unless asked to
(``RDMA_UCX_CMA=1``): neither the fabric's own cross-memory attach
(csrc/fabric/mr.c) nor UCX's ``cma`` transport, which does so when it is
loaded.  Yama's exceptions are not visible in /proc, so the test tries:
a sibling process (not the target's parent) reads the target's memory.

The processes run as root without CAP_SYS_PTRACE (which would pass Yama
whatever the scope); this needs the VM, where the test may set the
scope::

    python -m rdma.testvm -- python -m pytest tests/vm/test_yama.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PEER = ROOT / "tests" / "host" / "fabric_node_peer.py"
SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
# no CAP_SYS_PTRACE, in any set the command could get it from
NOCAP = ("setpriv", "--inh-caps", "-sys_ptrace", "--ambient-caps",
         "-sys_ptrace", "--bounding-set", "-sys_ptrace", "--")

READER = r"""
import ctypes, json, os, sys
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
pid, addr, n = (int(x) for x in sys.argv[1:4])
buf = ctypes.create_string_buffer(n)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), n)
remote = iovec(addr, n)
libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p,
                                  ctypes.c_ulong, ctypes.c_void_p,
                                  ctypes.c_ulong, ctypes.c_ulong]
libc.process_vm_readv.restype = ctypes.c_ssize_t
r = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote),
                          1, 0)
print(json.dumps({"r": r, "errno": ctypes.get_errno(),
                  "data": buf.raw[:max(r, 0)].hex()}))
"""


@pytest.fixture
def scope1():
    if not SCOPE.exists():
        pytest.skip("this kernel has no Yama")
    old = SCOPE.read_text().strip()
    SCOPE.write_text("1\n")
    yield
    SCOPE.write_text(old + "\n")


def env_with(**kw):
    e = dict(os.environ)
    e.pop("RDMA_UCX_CMA", None)
    e["PYTHONPATH"] = os.pathsep.join((str(ROOT / "tests" / "host"),
                                       str(ROOT)))
    e["UCX_LOG_FILE"] = "stderr"
    e.update(kw)
    return e


class Node:
    """A fabric node (tests/host/fabric_node_peer.py) without
    CAP_SYS_PTRACE."""

    def __init__(self, **env):
        self.p = subprocess.Popen([*NOCAP, sys.executable, "-u", str(PEER)],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True,
                                  env=env_with(**env))
        self.info = self.read()
        assert "error" not in self.info, self.info

    def read(self):
        line = self.p.stdout.readline()
        assert line, f"the node exited ({self.p.wait(10)})"
        return json.loads(line)

    def ask(self, cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.p.stdin.write('{"op": "exit"}\n')
            self.p.stdin.close()
            self.p.wait(20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()


def read_from_sibling(node, n=16):
    """process_vm_readv of node's MR from a process that is not its
    parent (nor anything else of its)."""
    r = subprocess.run([*NOCAP, sys.executable, "-c", READER,
                        str(node.info["pid"]), str(node.info["addr"]),
                        str(n)], capture_output=True, text=True, timeout=60,
                       env=env_with())
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("cma", [None, "0"])
def test_scope1_closed_by_default(scope1, cma):
    """Opening ucx0 (and registering memory) does not open the process
    to every other process of the user: EPERM, as without the fabric.
    RDMA_UCX_CMA=0 too (before the fix UCX's cma transport still named
    any process as ptracer)."""
    node = Node(**({} if cma is None else {"RDMA_UCX_CMA": cma}))
    try:
        r = read_from_sibling(node)
        assert r["r"] == -1 and r["errno"] == 1, r          # EPERM
    finally:
        node.close()


def test_scope1_opt_in(scope1):
    """RDMA_UCX_CMA=1 is the documented switch: the node names any
    process as ptracer, a sibling can read its memory, and peers' WRITEs
    into its own memory go by cross-memory attach."""
    # not adopted: a bytearray whose pages the fabric adopts into UCX
    # memory (as the heap happens to place it) is written through that
    # mapping, not by cross-memory attach (seen once in a CI run)
    target = Node(RDMA_UCX_CMA="1", RDMA_UCX_ADOPT="0")
    init = Node(RDMA_UCX_CMA_MIN="0")
    try:
        r = read_from_sibling(target, 4)
        assert r["r"] == 4, r
        ti, ii = target.info, init.info
        assert init.ask({"op": "connect", "lid": ti["lid"],
                         "qpn": ti["qpn"]}) == {"ok": 1}
        assert target.ask({"op": "connect", "lid": ii["lid"],
                           "qpn": ii["qpn"]}) == {"ok": 1}
        w = init.ask({"op": "write", "addr": ti["addr"] + 100,
                      "rkey": ti["rkey"], "len": 64})
        assert w["status"] == 0, w
        assert w["stats"]["cma_write"] >= 1, w
        assert target.ask({"op": "peek", "off": 100, "len": 64}) == \
            {"data": "5a" * 64}
    finally:
        init.close()
        target.close()


def test_scope1_default_writes_take_the_message_path(scope1):
    """Without the switch, WRITEs into a node's own memory still work
    (active messages through the target), just not by cross-memory
    attach."""
    target = Node()
    init = Node(RDMA_UCX_CMA_MIN="0")
    try:
        ti, ii = target.info, init.info
        assert init.ask({"op": "connect", "lid": ti["lid"],
                         "qpn": ti["qpn"]}) == {"ok": 1}
        assert target.ask({"op": "connect", "lid": ii["lid"],
                           "qpn": ii["qpn"]}) == {"ok": 1}
        w = init.ask({"op": "write", "addr": ti["addr"] + 100,
                      "rkey": ti["rkey"], "len": 64})
        assert w["status"] == 0, w
        assert w["stats"]["cma_write"] == 0, w
        assert target.ask({"op": "peek", "off": 100, "len": 64}) == \
            {"data": "5a" * 64}
    finally:
        init.close()
        target.close()
