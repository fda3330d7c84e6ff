"""The software fabric against hostile peers (issue 17, items 7 and 9).

- The listener: idle TCP connections to a node's listener port (the port
  in its GUID), or to UCX's own TCP transport ports, cannot exhaust its
  file descriptors; a connection that never authenticates is closed
  after the deadline (2 s).
- Other hosts (network namespaces that cannot read each other's node
  records) authenticate with RDMA_UCX_SECRET, or not at all in open mode.
- Authentication and forged headers: a raw UCP peer (fabric_rogue.c,
  compiled here against libucp) that sends its own headers can affect
  only the QPs connected to it: a forged source (node, QP, session) is
  dropped and counted (``rx_denied`` in the node's key page); malformed
  messages (header length, kind, op, type, flags, PSN, lengths, payload
  shorter or longer than the header says) are dropped and counted
  (``rx_bad``), and the node goes on working.  The same holds for the
  entries of a request ring (shared memory its writer controls), short
  (struct ring_short) or whole.

docs/fabric.rst, "Security model", describes what is checked.
"""
import ipaddress
import mmap
import os
import random
import select
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fabric_helpers as fh
import rdma
import rdma.ibverbs as ibv

HERE = Path(__file__).resolve().parent
HELPER = str(HERE / "fabric_helpers.py")
SHM = {"UCX_TLS": "shm,self", "UCX_WARN_UNUSED_ENV_VARS": "n"}
#: struct wire (csrc/fabric/wire.h), the header of every message
WIRE = struct.Struct("<BBBBIIIIIQHHIIIIIQQQIIQ")
#: the head of a node record (struct record): magic, pid, netns, pidns,
#: boot id, GUID, LID, key
RECORD = struct.Struct("<IiQQ40sQH6x2QI4x")
AM_REQ, AM_RESP = 17, 18
AM_CTL_HELLO, AM_CTL_CHALLENGE, AM_CTL_PROOF = 42, 43, 44
HELLO_NONE, HELLO_NODE, HELLO_SHARED = 0, 1, 2
WIRE_VERSION = 3
AM_CTL_RINGOPEN = 40
#: struct ring (csrc/fabric/fabric.h): magic, version, pid, open, src and
#: dst GUIDs, sleep, wcpu, head; the slots follow
RING_HEAD = struct.Struct("<IIiIQQII24xQ56x")
RING_MAGIC, RING_VERSION, RING_SLOTS, RING_SLOT = 0x474E4952, 5, 256, 512
RING_SHORT = 0x80000000
#: struct ring_short, the header of a short ring entry
SHORT = struct.Struct("<BBBBIIIIIHHIIIQ")
OP_SEND, OP_WRITE, OP_READ, OP_CAS = 0, 1, 2, 3
R_ACK, R_READ, R_ATOMIC = 0, 1, 2
DEADLINE = 2.0      # AUTH_DEADLINE_NS
MAX_PENDING = 32
M64 = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def siphash24(k0: int, k1: int, words) -> int:
    """SipHash-2-4 of 64-bit words (the HELLO's MAC)."""
    v0 = k0 ^ 0x736f6d6570736575
    v1 = k1 ^ 0x646f72616e646f6d
    v2 = k0 ^ 0x6c7967656e657261
    v3 = k1 ^ 0x7465646279746573

    def rnd():
        nonlocal v0, v1, v2, v3
        v0 = (v0 + v1) & M64
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 = (v2 + v3) & M64
        v3 = _rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & M64
        v3 = _rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & M64
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)

    words = list(words) + [(len(words) * 8) << 56 & M64]
    for m in words:
        v3 ^= m
        rnd()
        rnd()
        v0 ^= m
    v2 ^= 0xff
    for _ in range(4):
        rnd()
    return v0 ^ v1 ^ v2 ^ v3


def wire(kind=AM_REQ, op=OP_WRITE, *, flags=0, dst_qpn=0, src_qpn=0, psn=0,
         src_guid=0, qp_type=ibv.IBV_QPT_RC, rkey=0, length=0, raddr=0,
         cmp=0, imm=0, sid=0, src_lid=0, qkey=0, swap=0) -> bytes:
    return WIRE.pack(kind, op, flags, 7, dst_qpn, src_qpn, psn, 0, 0,
                     src_guid, src_lid, qp_type, imm, rkey, qkey, length, 0,
                     raddr, cmp, swap, 0, 0, sid)


def rdv_dir() -> str:
    return os.environ.get("RDMA_UCX_DIR") or f"/dev/shm/rdma-ucx-{os.getuid()}"


def guid_of(gid) -> int:
    return int.from_bytes(ipaddress.IPv6Address(str(gid)).packed[8:], "big")


def record(guid: int):
    """(path, pid, key) of node *guid*'s record."""
    path = os.path.join(rdv_dir(), f"node-{guid:016x}")
    with open(path, "rb") as f:
        head = RECORD.unpack(f.read(RECORD.size))
    return path, head[1], (head[7], head[8])


def hello(dst: int, src: int, sid: int, pid: int, key, na: int = 0,
          mode=None) -> bytes:
    """The HELLO that opens session *sid* of process *pid* of node *src*
    with node *dst*, with nonce *na* (random if 0), proven with *key*
    (None: open mode, no key); mode: HELLO_NODE, or HELLO_SHARED."""
    na = na or random.getrandbits(63) | 1
    if key is None:
        return wire(AM_CTL_HELLO, HELLO_NONE, src_guid=src, sid=sid,
                    imm=pid, raddr=na, qkey=WIRE_VERSION)
    mac = siphash24(key[0], key[1], [dst, src, sid, pid, na, 0, 1])
    return wire(AM_CTL_HELLO, mode or HELLO_NODE, src_guid=src, sid=sid,
                imm=pid, raddr=na, qkey=WIRE_VERSION, cmp=mac)


def proof(dst: int, src: int, sid: int, pid: int, key, na: int, nb: int,
          mode=None) -> bytes:
    """The PROOF that answers node *dst*'s CHALLENGE (nonce *nb*) to the
    HELLO with nonce *na*."""
    mac = 0 if key is None else siphash24(key[0], key[1],
                                          [dst, src, sid, pid, na, nb, 2])
    return wire(AM_CTL_PROOF, HELLO_NONE if key is None else
                mode or HELLO_NODE, src_guid=src, sid=sid, imm=pid,
                raddr=na, swap=nb, qkey=WIRE_VERSION, cmp=mac)


@pytest.fixture(scope="module")
def rogue_bin(tmp_path_factory):
    return fh.build_c("fabric_rogue.c",
                      tmp_path_factory.mktemp("rogue") / "fabric_rogue",
                      "ucp/api/ucp.h", ("-O1", "-Wall"), ("-lucp", "-lucs"))


class Rogue:
    """fabric_rogue connected to a node (by worker address or sockaddr)."""

    def __init__(self, exe, *args, env=None, prefix=()):
        e = dict(os.environ, **(env or {}))
        e.pop("LD_PRELOAD", None)       # not an ASan build
        self.p = subprocess.Popen([*prefix, exe, *args],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=e)
        assert self._line(10) == "ready"

    def _line(self, timeout):
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert r, "fabric_rogue did not answer"
        return self.p.stdout.readline().strip()

    def send(self, header: bytes, payload: bytes = b"", am_id=AM_REQ,
             reply=False):
        self.p.stdin.write(f"send {am_id} {int(reply)} {header.hex()} "
                           f"{payload.hex() or '-'}\n")
        self.p.stdin.flush()
        assert self._line(10).startswith("sent ")

    def recv(self, ms: int):
        """The header of the next active message the node sent this
        process within *ms* ms (bytes), or None."""
        self.p.stdin.write(f"recv {ms}\n")
        self.p.stdin.flush()
        line = self._line(ms / 1000 + 10)
        return bytes.fromhex(line[4:]) if line.startswith("got ") else None

    def handshake(self, dst: int, src: int, sid: int, pid: int, key,
                  mode=None):
        """Say HELLO to node *dst* as (*src*, *pid*), session *sid*, and
        answer its CHALLENGE with the PROOF (under *key*; None: open
        mode).  Return (nb, messages): the node's nonce (0: it refused
        the HELLO, None: no answer) and the HELLO and PROOF as sent."""
        na = random.getrandbits(63) | 1
        h = hello(dst, src, sid, pid, key, na, mode)
        self.send(h, reply=True)
        c = self.recv(3000)
        if c is None:
            return None, [h]
        f = WIRE.unpack(c)
        assert f[0] == AM_CTL_CHALLENGE and f[9] == dst and f[17] == na, f
        nb = f[18]
        if nb == 0:
            return 0, [h]
        p = proof(dst, src, sid, pid, key, na, nb, mode)
        self.send(p, reply=True)
        return nb, [h, p]

    def wait(self, ms: int) -> str:
        self.p.stdin.write(f"wait {ms}\n")
        self.p.stdin.flush()
        return self._line(ms / 1000 + 10)

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
        self.p.wait(5)
        self.p.stdin.close()
        self.p.stdout.close()


@pytest.fixture
def victim():
    """This process's node with a connected RC pair and a UD pair."""
    ctx = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
    a, b = fh.make_pair(ctx, ctx, ibv.IBV_QPT_RC, size=4096)
    ua, ub = fh.make_pair(ctx, ctx, ibv.IBV_QPT_UD, size=4096)
    yield ctx, a, b, ua, ub
    for s in (a, b, ua, ub):
        s.close()
    ctx.close()


def stats() -> dict:
    return fh.node_stats()


def wait_stat(name: str, want: int, timeout=5.0) -> int:
    """Wait until this node's counter *name* reaches *want*; return it."""
    end = time.monotonic() + timeout
    while True:
        v = stats()[name]
        if v >= want or time.monotonic() > end:
            return v
        time.sleep(0.01)


def still_works(a, b):
    """A SEND from b to a on the victim's RC pair completes."""
    a.post_recv(wr_id=5, off=1024, length=64)
    b.buf[:8] = b"legit!!!"
    b.qp.post_send(b.send_wr(a, ibv.IBV_WR_SEND, wr_id=6, length=8))
    fh.check_ok(fh.poll_cq(b.send_cq, 1)[0], wr_id=6)
    fh.check_ok(fh.poll_cq(a.recv_cq, 1)[0], wr_id=5)
    assert bytes(a.buf[1024:1032]) == b"legit!!!"
    assert fh.qp_state(a.qp) == ibv.IBV_QPS_RTS


def test_forged_sources_are_rejected(victim, rogue_bin):
    """An authenticated raw peer cannot reach a QP connected to another
    node: a WRITE (valid rkey and address) claiming the victim's own node
    and QP, a random session, its own node to a QP not connected to it,
    and a HELLO that claims a live node are all refused and counted."""
    ctx, a, b, ua, ub = victim
    me = guid_of(a.gid)
    path, pid, key = record(me)
    assert pid == os.getpid()
    rogue = Rogue(rogue_bin, "addr", path)
    try:
        r_guid, r_sid = 0x0BAD000000000001, random.getrandbits(63) | 1
        r_pid = rogue.p.pid
        before = stats()
        assert rogue.handshake(me, r_guid, r_sid, r_pid, key)[0]
        rogue.wait(100)
        evil = b"EVILEVIL"

        def write(src_guid, sid, src_qpn=b.qpn, dst_qpn=a.qpn):
            rogue.send(wire(op=OP_WRITE, dst_qpn=dst_qpn, src_qpn=src_qpn,
                            src_guid=src_guid, sid=sid, rkey=a.mr.rkey,
                            raddr=a.mr.addr, length=len(evil)), evil)

        write(me, r_sid)                        # as the victim's own node
        write(me, random.getrandbits(64) | 1)   # a guessed session
        write(r_guid, r_sid)                    # itself, to a's QP
        # a UD SEND is for anyone, but not under another node's name
        ua.post_recv(wr_id=1)
        rogue.send(wire(op=OP_SEND, dst_qpn=ua.qpn, src_qpn=1,
                        src_guid=me, sid=r_sid, qp_type=ibv.IBV_QPT_UD,
                        qkey=fh.QKEY, length=4), b"ud!!")
        # a HELLO as the victim's node (valid key, another process)
        sid2 = random.getrandbits(63) | 1
        assert rogue.handshake(me, me, sid2, r_pid, key)[0] == 0
        write(me, sid2)
        # a HELLO with a wrong key
        assert rogue.handshake(me, 0x0BAD000000000002, sid2, r_pid,
                               (key[0] ^ 1, key[1]))[0] == 0
        want = before["rx_denied"] + 7
        assert wait_stat("rx_denied", want) == want
        assert rogue.wait(100) == "alive"
        assert evil not in bytes(a.buf)
        fh.expect_no_completion(ua.recv_cq)
        # the rogue under its own name: the UD SEND arrives, and its GRH
        # names the rogue's node (the one its session proves)
        rogue.send(wire(op=OP_SEND, dst_qpn=ua.qpn, src_qpn=1,
                        src_guid=r_guid, sid=r_sid, qp_type=ibv.IBV_QPT_UD,
                        qkey=fh.QKEY, length=4), b"ud!!")
        wc = fh.poll_cq(ua.recv_cq, 1)[0]
        fh.check_ok(wc, wr_id=1)
        assert bytes(ua.buf[40:44]) == b"ud!!"
        assert int.from_bytes(bytes(ua.buf[16:24]), "big") == r_guid
        assert stats()["rx_bad"] == before["rx_bad"]
        still_works(a, b)
    finally:
        rogue.close()


def test_malformed_messages_are_dropped_and_counted(victim, rogue_bin):
    """Headers of the wrong length, unknown kinds and ops, out-of-range
    types, flags, PSNs, QPNs and lengths, a payload shorter or longer
    than the header says: each is dropped and counted, the node lives."""
    ctx, a, b, ua, ub = victim
    me = guid_of(a.gid)
    path, _, key = record(me)
    rogue = Rogue(rogue_bin, "addr", path)
    try:
        r_guid, r_sid = 0x0BAD000000000003, random.getrandbits(63) | 1
        assert rogue.handshake(me, r_guid, r_sid, rogue.p.pid, key)[0]
        ok = dict(dst_qpn=a.qpn, src_qpn=b.qpn, src_guid=r_guid, sid=r_sid,
                  rkey=a.mr.rkey, raddr=a.mr.addr)
        full = wire(op=OP_WRITE, length=8, **ok)
        bad = [
            (full[:50], b"12345678", AM_REQ),           # short header
            (full + b"\0" * 8, b"12345678", AM_REQ),    # long header
            (wire(kind=77, **ok), b"", AM_REQ),         # unknown kind
            (wire(op=99, **ok), b"", AM_REQ),           # unknown op
            (wire(op=OP_SEND, qp_type=9, **ok), b"", AM_REQ),
            (wire(op=OP_SEND, flags=0x80, **ok), b"", AM_REQ),
            (wire(op=OP_SEND, psn=1 << 24, **ok), b"", AM_REQ),
            (wire(op=OP_SEND, length=1000, **ok), b"x" * 10, AM_REQ),
            (wire(op=OP_WRITE, length=4, **ok), b"x" * 100, AM_REQ),
            (wire(op=OP_WRITE, length=(1 << 31) + 1, **ok), b"", AM_REQ),
            (wire(op=OP_READ, length=8, **ok), b"x" * 10, AM_REQ),
            (wire(op=OP_CAS, length=4, **ok), b"", AM_REQ),
            (wire(op=OP_WRITE, qp_type=ibv.IBV_QPT_UD, length=1, **ok),
             b"x", AM_REQ),
            (wire(kind=AM_RESP, op=99, **ok), b"", AM_RESP),
            (wire(kind=AM_RESP, op=R_READ, length=100, **ok), b"x" * 10,
             AM_RESP),
            (wire(kind=AM_RESP, op=R_ATOMIC, length=8, **ok), b"x" * 4,
             AM_RESP),
            (wire(kind=AM_RESP, op=R_ACK, **ok), b"x", AM_RESP),
            (wire(op=OP_SEND, **{**ok, "dst_qpn": 1 << 24}), b"", AM_REQ),
            # F_PLACED (32): only a WRITE with immediate data (F_IMM), RC,
            # without payload
            (wire(op=OP_WRITE, flags=32 | 1, length=8, **ok), b"x" * 8,
             AM_REQ),
            (wire(op=OP_WRITE, flags=32, length=8, **ok), b"", AM_REQ),
            (wire(op=OP_SEND, flags=32 | 1, length=8, **ok), b"", AM_REQ),
            (wire(op=OP_WRITE, flags=32 | 1, qp_type=ibv.IBV_QPT_UC,
                  length=8, **ok), b"", AM_REQ),
            # F_INV (8) on a WRITE; F_MCAST (16) on RC, or UD not to 0xFFFFFF
            (wire(op=OP_WRITE, flags=8, length=1, **ok), b"x", AM_REQ),
            (wire(op=OP_SEND, flags=16, **ok), b"", AM_REQ),
            (wire(op=OP_SEND, flags=16, qp_type=ibv.IBV_QPT_UD, **ok), b"",
             AM_REQ),
        ]
        before = stats()
        for hdr, payload, am_id in bad:
            rogue.send(hdr, payload, am_id=am_id)
        want = before["rx_bad"] + len(bad)
        assert wait_stat("rx_bad", want) == want
        # well formed, from the rogue's own (authenticated) node, but to
        # QPs not connected to it, with bogus keys and addresses: denied
        denied = [
            wire(op=OP_WRITE, length=8, **{**ok, "rkey": 0xDEAD00,
                                           "raddr": 8}),
            wire(op=OP_READ, length=1 << 20, **{**ok, "raddr": 0}),
            wire(kind=AM_RESP, op=R_ACK, **{**ok, "dst_qpn": b.qpn}),
            wire(kind=AM_RESP, op=R_READ, length=8,
                 **{**ok, "dst_qpn": b.qpn}),
        ]
        before = stats()
        for i, hdr in enumerate(denied):
            kind = hdr[0]
            rogue.send(hdr, b"x" * 8 if i in (0, 3) else b"",
                       am_id=AM_RESP if kind == AM_RESP else AM_REQ)
        want = before["rx_denied"] + len(denied)
        assert wait_stat("rx_denied", want) == want
        assert stats()["rx_bad"] == before["rx_bad"]
        assert rogue.wait(100) == "alive"
        still_works(a, b)
    finally:
        rogue.close()


def test_malformed_ring_entries_are_dropped_and_counted(victim, rogue_bin):
    """A same-host node's request ring is shared memory its writer
    controls: a raw peer that authenticated, made a ring to the victim's
    node and had it mapped (AM_CTL_RINGOPEN) writes entries of its own.
    Short entries (struct ring_short: not a SEND, unknown kind, flags or
    type, a PSN out of range, shorter than their header, longer than a
    slot) and whole ones (shorter than struct wire, a payload shorter than
    the header says) are dropped and counted (rx_bad); a well-formed short
    SEND to a QP not connected to the writer is denied (rx_denied); the
    node goes on working."""
    ctx, a, b, ua, ub = victim
    me = guid_of(a.gid)
    path, _, key = record(me)
    rogue = Rogue(rogue_bin, "addr", path)
    mm = None
    try:
        r_guid, r_sid = 0x0BAD000000000004, random.getrandbits(63) | 1
        assert rogue.handshake(me, r_guid, r_sid, rogue.p.pid, key)[0]
        size = RING_HEAD.size + RING_SLOTS * RING_SLOT
        name = os.path.join(rdv_dir(), f"ring-{r_guid:016x}-{me:016x}")
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        mm[:RING_HEAD.size] = RING_HEAD.pack(RING_MAGIC, RING_VERSION,
                                             rogue.p.pid, 0, r_guid, me, 0,
                                             0, 0)
        rogue.send(wire(AM_CTL_RINGOPEN, 0, src_guid=r_guid, sid=r_sid))
        end = time.monotonic() + 5
        while struct.unpack_from("<I", mm, 12)[0] != 1:     # open
            assert time.monotonic() < end, "the ring was not accepted"
            time.sleep(0.01)
        assert not os.path.exists(name)     # mapped, then unlinked
        k = 0

        def put(data: bytes, length: int):
            nonlocal k
            off = RING_HEAD.size + (k % RING_SLOTS) * RING_SLOT
            mm[off + 8:off + 8 + len(data)] = data
            struct.pack_into("<I", mm, off + 4, length)
            struct.pack_into("<I", mm, off, k + 1)      # seq, last
            k += 1

        def short(kind=AM_REQ, op=OP_SEND, flags=0, psn=0,
                  qp_type=ibv.IBV_QPT_RC) -> bytes:
            return SHORT.pack(kind, op, flags, 7, a.qpn, b.qpn, psn, 0, 0,
                              0, qp_type, 0, 0, 0, r_sid)

        pay = b"evil!!!!"
        bad = [
            (short(op=OP_WRITE) + pay, 56),     # a short entry is a SEND
            (short(kind=77) + pay, 56),         # unknown kind
            (short(flags=0x80) + pay, 56),      # unknown flags
            (short(psn=1 << 24) + pay, 56),     # PSN out of range
            (short(qp_type=9) + pay, 56),       # unknown QP type
            (short()[:40], 40),                 # shorter than its header
            (b"", RING_SLOT - 8 + 1),           # longer than a slot
        ]
        whole = [
            (b"x" * 40, 40),                    # shorter than struct wire
            (wire(op=OP_SEND, dst_qpn=a.qpn, src_qpn=b.qpn, src_guid=r_guid,
                  sid=r_sid, length=8) + b"x" * 4, WIRE.size + 4),
        ]
        before = stats()
        for data, length in bad:
            put(data, RING_SHORT | length)
        for data, length in whole:
            put(data, length)
        want = before["rx_bad"] + len(bad) + len(whole)
        assert wait_stat("rx_bad", want) == want
        # well formed, but to a QP connected to another node: denied
        before = stats()
        put(short() + pay, RING_SHORT | 56)
        want = before["rx_denied"] + 1
        assert wait_stat("rx_denied", want) == want
        assert stats()["rx_bad"] == before["rx_bad"]
        assert rogue.wait(100) == "alive"
        fh.expect_no_completion(a.recv_cq)
        still_works(a, b)
    finally:
        if mm is not None:
            mm.close()
        rogue.close()


def _listener_port(gid) -> int:
    return int.from_bytes(ipaddress.IPv6Address(str(gid)).packed[12:14],
                          "big")


#: UCX over TCP on the loopback interface alone (a rogue client's, or a
#: node's that must listen).
LOOPBACK_TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo",
                "UCX_WARN_UNUSED_ENV_VARS": "n"}


def _listener_of(side):
    """(node GUID, node key, listener port) of the node of Side *side*;
    skips the test when the node has no listener."""
    me = guid_of(side.gid)
    _, _, key = record(me)
    port = _listener_port(side.gid)
    if port == 0:
        pytest.skip("the node has no listener (UCX_TLS without tcp)")
    return me, key, port


def test_unauthenticated_endpoint_is_closed(victim, rogue_bin):
    """A UCP client of the listener that never says HELLO is closed after
    the deadline; one that says a valid HELLO stays; one whose HELLO has
    a wrong key is closed at once."""
    ctx, a, *_ = victim
    me, key, port = _listener_of(a)
    env = LOOPBACK_TCP
    mute = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
    good = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
    liar = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
    try:
        sid = random.getrandbits(63) | 1
        assert good.handshake(me, 0x0BAD000000000004, sid, good.p.pid,
                              key)[0]
        liar.send(hello(me, 0x0BAD000000000005, sid, liar.p.pid,
                        (key[1], key[0])), reply=True)
        t0 = time.monotonic()
        assert liar.wait(int(DEADLINE * 1000)) == "closed"
        assert time.monotonic() - t0 < DEADLINE
        assert mute.wait(int((DEADLINE + 3) * 1000)) == "closed"
        assert DEADLINE - 0.5 < time.monotonic() - t0 < DEADLINE + 3
        assert good.wait(500) == "alive"
    finally:
        for r in (mute, good, liar):
            r.close()


def _fds(pid) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


#: the attacker: N idle TCP connections to 127.0.0.1:PORT, held in a
#: process of their own (this one's select() stops at fd 1024); prints
#: how many it made, then on "watch T" how many the node has not closed
#: after T seconds at most
_FLOOD = """
import select, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks, t0 = [], time.monotonic()
while len(socks) < n and time.monotonic() - t0 < 20:
    try:
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        break
print(len(socks), flush=True)
t = float(sys.stdin.readline().split()[1])
p = select.poll()
left = {s.fileno(): s for s in socks}
for fd in left:
    p.register(fd, select.POLLIN)
end = time.monotonic() + t
while left and time.monotonic() < end:
    for fd, _ in p.poll(200):
        try:
            data = left[fd].recv(1)
        except OSError:
            data = b""
        if not data:
            p.unregister(fd)
            del left[fd]
print(len(left), flush=True)
sys.stdin.readline()
"""


def test_idle_connections_cannot_exhaust_fds():
    """About 1,000 idle TCP connections to a node's listener port (the
    port in its GID), with the node limited to 1,024 descriptors: its fd
    count stays bounded, every one of them is closed after the deadline,
    and an RC connection to the node still works meanwhile (this used to
    end in 'Too many open files')."""
    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    b = fh.PeerProcess(HELPER, "responder", env=SHM,
                       prefix=("prlimit", "--nofile=1024:1024"), timeout=30)
    a = flood = None
    try:
        ib = b.read()
        base = _fds(b.pid)
        port = _listener_port(ib["gid"])
        flood = subprocess.Popen(["prlimit", "--nofile=4096:4096",
                                  sys.executable, "-c", _FLOOD, str(port),
                                  "1000"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        made = int(flood.stdout.readline())
        assert made >= 900, made
        # bounded: at most MAX_PENDING waiting for their deadline
        end = time.monotonic() + 3
        while _fds(b.pid) > base + MAX_PENDING + 16 and \
                time.monotonic() < end:
            time.sleep(0.05)
        assert _fds(b.pid) <= base + MAX_PENDING + 16, (_fds(b.pid), base)
        # a peer connects to it and runs its work requests
        a = fh.PeerProcess(HELPER, "requester", env=SHM, timeout=30)
        fh.handshake(a, b, ib=ib)
        a.send({"go": 1})
        report = a.read()
        assert report["statuses"] == [0, 0, 0, 0], report
        # every idle connection is closed by the node
        flood.stdin.write(f"watch {DEADLINE + 5}\n")
        flood.stdin.flush()
        left = int(flood.stdout.readline())
        assert left == 0, f"{left} of {made} still open"
        # and UCX has closed its descriptors (it does once it sees the
        # connection shut down)
        end = time.monotonic() + 5
        while _fds(b.pid) > base + 16 and time.monotonic() < end:
            time.sleep(0.05)
        assert _fds(b.pid) <= base + 16, (_fds(b.pid), base)
        b.send({"op": "exit"})
    finally:
        _stop(flood, a, b)


def _stop(flood, *peers):
    """Kill the flood process and close the peers (each if started)."""
    if flood is not None:
        flood.kill()
        flood.wait(10)
        flood.stdin.close()
        flood.stdout.close()
    for p in peers:
        if p is not None:
            p.close()


def _ucx_tcp_ports(pid, skip):
    """The 127.0.0.1 TCP ports process *pid* listens on, but *skip*."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True,
                         timeout=20).stdout
    ports = set()
    for line in out.splitlines():
        f = line.split()
        if f"pid={pid}," in line and f[3].startswith("127.0.0.1:"):
            ports.add(int(f[3].rsplit(":", 1)[1]))
    return sorted(ports - {skip})


def test_connections_to_ucx_tcp_transport_are_bounded():
    """UCX's TCP transport listens on ports of its own (not in the GID,
    but anyone can list them): connections that send a byte and then
    nothing (UCX waits for the rest of its header) are closed after the
    deadline as well, and their number stays bounded meanwhile."""
    if shutil.which("ss") is None or shutil.which("prlimit") is None:
        pytest.skip("needs ss (iproute2) and prlimit (util-linux)")
    env = LOOPBACK_TCP
    b = fh.PeerProcess(HELPER, "responder", env=env, timeout=30)
    socks = []
    try:
        ib = b.read()
        base = _fds(b.pid)
        ports = _ucx_tcp_ports(b.pid, _listener_port(ib["gid"]))
        if not ports:
            pytest.skip("UCX's tcp transport does not listen on 127.0.0.1")
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", ports[0]), timeout=2)
            s.sendall(b"\x01")
            socks.append(s)
        # Those beyond MAX_PENDING are shut down at the guard's first look
        # (at most GUARD_IDLE, 0.5 s, after they are accepted: UCX's
        # thread may accept them before the guard sees the listening
        # socket's edge), well before the others' 2 s deadline.
        end = time.monotonic() + 1.5
        while (_fds(b.pid) > base + MAX_PENDING + 16
               and time.monotonic() < end):
            time.sleep(0.05)
        assert _fds(b.pid) <= base + MAX_PENDING + 16, (_fds(b.pid), base)
        end = time.monotonic() + DEADLINE + 5
        left = list(socks)
        while left and time.monotonic() < end:
            r, _, _ = select.select(left, [], [], 0.2)
            for s in r:
                try:
                    data = s.recv(1)
                except OSError:
                    data = b""
                if not data:
                    left.remove(s)
        assert not left, f"{len(left)} of {len(socks)} still open"
        assert fh.node_stats(b.pid)["rx_denied"] >= len(socks)
        b.send({"op": "exit"})
    finally:
        for s in socks:
            s.close()
        b.close()


# --------------------------------------------------------------------------
# other hosts: RDMA_UCX_SECRET (network namespaces with rendezvous
# directories of their own, so that neither finds the other's record)

from test_fabric_processes import netns_pair  # noqa: E402,F401  (fixture)


def _hosts(netns_pair, tmp_path, secret_a, secret_b):
    """The two "hosts"' environments and command prefixes."""
    na, nb = netns_pair
    envs = []
    for ns, addr, secret in ((na, "198.51.100.1", secret_a),
                             (nb, "198.51.100.2", secret_b)):
        d = tmp_path / ns
        d.mkdir(mode=0o700)
        env = {"UCX_TLS": "tcp", "RDMA_UCX_ADDR": addr,
               "RDMA_UCX_DIR": str(d), "UCX_WARN_UNUSED_ENV_VARS": "n"}
        if secret is not None:
            env["RDMA_UCX_SECRET"] = secret
        envs.append((env, ("ip", "netns", "exec", ns)))
    return envs


def _requester_report(hosts):
    """Run a requester on host a against a responder on host b; return
    the requester's report."""
    (env_a, pre_a), (env_b, pre_b) = hosts
    b = fh.PeerProcess(HELPER, "responder", env=env_b, prefix=pre_b,
                       timeout=40)
    a = fh.PeerProcess(HELPER, "requester", env={**env_a,
                                                 "FABRIC_QP_TIMEOUT": "12"},
                       prefix=pre_a, timeout=40)
    try:
        fh.handshake(a, b)
        a.send({"go": 1})
        return a.read()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("secret_a,secret_b,works", [
    ("s3cret", "s3cret", True),
    ("s3cret", "other", False),
    (None, None, True),
], ids=["same-secret", "other-secret", "open-mode"])
def test_other_hosts_authenticate_with_the_shared_secret(
        netns_pair, tmp_path, secret_a, secret_b, works):
    """Nodes that cannot read each other's records prove RDMA_UCX_SECRET;
    with different secrets every HELLO is refused and the work requests
    fail (RETRY_EXC_ERR), nothing lands; without any secret, listeners on
    non-loopback addresses accept each other (open mode)."""
    report = _requester_report(_hosts(netns_pair, tmp_path, secret_a,
                                      secret_b))
    if works:
        assert report["statuses"] == [0, 0, 0, 0], report
        assert report["read_ok"]
    else:
        assert report["statuses"][0] == ibv.IBV_WC_RETRY_EXC_ERR, report
        assert not report["read_ok"]



def test_captured_hello_cannot_be_replayed(victim, rogue_bin):
    """A session is opened by HELLO, CHALLENGE (the node's fresh nonce)
    and PROOF (the key's MAC over both nonces).  The messages of a
    session that was accepted (here through the listener, with the node's
    key), replayed verbatim on another connection, are refused: while
    their sender is alive, and after it exited (when its GUID is free);
    a UD SEND under the replayed session is then dropped.  (With a HELLO
    alone, the replay was accepted and the SEND arrived.)"""
    ctx, a, b, ua, ub = victim
    me, key, port = _listener_of(a)
    env = LOOPBACK_TCP
    g, sid = 0x0BAD000000000010, random.getrandbits(63) | 1

    def ud_send(rogue):
        rogue.send(wire(op=OP_SEND, dst_qpn=ua.qpn, src_qpn=1, src_guid=g,
                        sid=sid, qp_type=ibv.IBV_QPT_UD, qkey=fh.QKEY,
                        length=4), b"ud!!")

    orig = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
    rogues = [orig]
    try:
        nb, captured = orig.handshake(me, g, sid, orig.p.pid, key)
        assert nb and len(captured) == 2
        ua.post_recv(wr_id=1)
        ud_send(orig)
        fh.check_ok(fh.poll_cq(ua.recv_cq, 1)[0], wr_id=1)
        for alive in (True, False):
            if not alive:
                orig.close()        # its endpoint closes: its GUID is free
                time.sleep(0.5)
            r = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
            rogues.append(r)
            before = stats()["rx_denied"]
            r.send(captured[0], reply=True)
            c = r.recv(3000)        # a challenge: another nonce
            assert c is not None and WIRE.unpack(c)[18] not in (0, nb)
            r.send(captured[1], reply=True)     # the old PROOF: refused
            assert wait_stat("rx_denied", before + 1) >= before + 1
            assert r.wait(int(DEADLINE * 500)) == "closed", alive
        # nothing under the session from another connection once its
        # sender is gone
        r = Rogue(rogue_bin, "sock", "127.0.0.1", str(port), env=env)
        rogues.append(r)
        r.send(captured[0], reply=True)
        assert r.recv(3000) is not None
        ua.post_recv(wr_id=2)
        before = stats()["rx_denied"]
        ud_send(r)
        assert wait_stat("rx_denied", before + 1) == before + 1
        fh.expect_no_completion(ua.recv_cq)
        still_works(a, b)
    finally:
        for r in rogues:
            r.close()


def secret_key(secret: str):
    """The key of RDMA_UCX_SECRET *secret* (fab_secret_key)."""
    b = secret.encode()[:256]
    words = [int.from_bytes(b[i:i + 8], "little")
             for i in range(0, len(b), 8)] + [len(b)]
    return tuple(siphash24(0x72646d6175637831, j, words) for j in (1, 2))


@pytest.mark.parametrize("secret", [None, "s3cret"],
                         ids=["open-mode", "shared-secret"])
def test_live_session_cannot_be_taken_over(netns_pair, tmp_path, rogue_bin,
                                           secret):
    """Other hosts, in open mode (no RDMA_UCX_SECRET, listeners on the
    hosts' addresses) or with a secret the raw peer holds too: a HELLO
    that names a connected, live node's GUID and pid is refused, and a
    WRITE the raw peer then sends through the QP connected to that node,
    with the right rkey, address and PSN, does not land; the real node's
    work requests then complete (it used to replace the node's session:
    the WRITE landed)."""
    hosts = _hosts(netns_pair, tmp_path, secret, secret)
    (env_a, pre_a), (env_b, pre_b) = hosts
    b = fh.PeerProcess(HELPER, "responder", env=env_b, prefix=pre_b,
                       timeout=40)
    a = fh.PeerProcess(HELPER, "requester", env={**env_a,
                                                 "FABRIC_QP_TIMEOUT": "12"},
                       prefix=pre_a, timeout=40)
    rogue = None
    try:
        ia, ib = fh.handshake(a, b)
        victim, live = guid_of(ib["gid"]), guid_of(ia["gid"])
        rogue = Rogue(rogue_bin, "sock", "198.51.100.2",
                      str(_listener_port(ib["gid"])),
                      env={"UCX_TLS": "tcp", "UCX_WARN_UNUSED_ENV_VARS": "n"},
                      prefix=pre_a)
        sid = random.getrandbits(63) | 1
        nb, _ = rogue.handshake(victim, live, sid, ia["pid"],
                                secret and secret_key(secret),
                                HELLO_SHARED)
        assert not nb, "the HELLO was accepted"
        evil = b"EVILEVIL"
        rogue.send(wire(op=OP_WRITE, dst_qpn=ib["qpn"], src_qpn=ia["qpn"],
                        src_guid=live, sid=sid, rkey=ib["rkey"],
                        raddr=ib["addr"] + 20000, length=len(evil)), evil)
        rogue.wait(300)
        b.send({"op": "dump", "off": 20000, "len": len(evil)})
        assert bytes.fromhex(b.read()["data"]) != evil
        a.send({"go": 1})
        report = a.read()
        assert report["statuses"] == [0, 0, 0, 0], report
        assert report["read_ok"]
        b.send({"op": "dump", "off": 20000, "len": len(evil)})
        assert bytes.fromhex(b.read()["data"]) != evil
        b.send({"op": "exit"})
    finally:
        if rogue is not None:
            rogue.close()
        a.close()
        b.close()


#: a sustained flood: keeps N idle TCP connections to IP:PORT open (one
#: source address), opening a new one whenever the node closes one, until
#: a line comes on stdin; prints how many it held at first, then how many
#: it opened in all
_SUSTAINED = """
import select, socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks, made = set(), 0
def more():
    global made
    while len(socks) < n:
        try:
            socks.add(socket.create_connection((ip, port), timeout=2))
        except OSError:
            return
        made += 1
more()
print(len(socks), flush=True)
while True:
    r, _, _ = select.select(list(socks) + [sys.stdin], [], [], 0.05)
    if sys.stdin in r:
        break
    for s in r:
        try:
            data = s.recv(1)
        except OSError:
            data = b""
        if not data:
            socks.discard(s)
            s.close()
    more()
print(made, flush=True)
"""


def _netns_tcp_ports(netns, pid, addr, skip):
    """The TCP ports process *pid* listens on at *addr* in network
    namespace *netns*, but *skip*."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltnp"],
                         capture_output=True, text=True, timeout=20).stdout
    ports = set()
    for line in out.splitlines():
        f = line.split()
        if f"pid={pid}," in line and f[3].startswith(addr + ":"):
            ports.add(int(f[3].rsplit(":", 1)[1]))
    return sorted(ports - {skip})


@pytest.mark.parametrize("target", ["listener", "tcp-transport"])
def test_silent_flood_does_not_lock_out_authenticated_peers(netns_pair,
                                                            tmp_path,
                                                            target):
    """200 idle TCP connections to a node's listener (or to the TCP
    transport's own port) from one source, held open (each one the node
    closes is opened again), while a peer with the right RDMA_UCX_SECRET,
    from the same source address, connects and runs its work requests:
    they complete, in every round (the guard used to shut down the
    newest connections beyond 32 waiting ones, the legitimate peer's
    among them: RETRY_EXC_ERR, in round 0 of 3 runs of 3)."""
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2)")
    hosts = _hosts(netns_pair, tmp_path, "s3cret", "s3cret")
    (env_a, pre_a), (env_b, pre_b) = hosts
    for rnd in range(4):
        b = fh.PeerProcess(HELPER, "responder", env=env_b, prefix=pre_b,
                           timeout=40)
        a = flood = None
        try:
            ib = b.read()
            port = _listener_port(ib["gid"])
            if target == "tcp-transport":
                ports = _netns_tcp_ports(pre_b[-1], b.pid, "198.51.100.2",
                                         port)
                assert ports, "UCX's tcp transport does not listen"
                port = ports[0]
            flood = subprocess.Popen(
                [*pre_a, sys.executable, "-c", _SUSTAINED, "198.51.100.2",
                 str(port), "200"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
            assert int(flood.stdout.readline()) >= 150
            time.sleep(0.5)     # the node closes them, the flood reopens
            a = fh.PeerProcess(HELPER, "requester",
                               env={**env_a, "FABRIC_QP_TIMEOUT": "12"},
                               prefix=pre_a, timeout=40)
            fh.handshake(a, b, ib=ib)
            a.send({"go": 1})
            report = a.read()
            assert report["statuses"] == [0, 0, 0, 0], (rnd, report)
            assert report["read_ok"], (rnd, report)
            flood.stdin.write("stop\n")
            flood.stdin.flush()
            # the node kept closing the flood's connections meanwhile
            assert int(flood.stdout.readline()) > 200
            b.send({"op": "exit"})
        finally:
            _stop(flood, a, b)
