"""The two ends of each check that runs between two hosts.

A check is a class whose instance lives on one host (an *end*): the agent
makes it with ``role`` ``"a"`` or ``"b"``, the engine runs the same
*steps* on both ends in lockstep and hands each end what the other end
returned from the step before (over the execnet channels, through the
controlling process).  Every end starts with :meth:`PairEnd.hello`, which
makes its QP and returns its half of the path: a dictionary of plain
numbers (and GIDs as hex strings) holding the source fields of an
:class:`rdma.path.IBPath` (``SGID``, ``SLID``, ``sqpn``, ``sqpsn``...)
that describe this end, python-rdma style; the other end checks it
against :data:`HALF_PATH_FIELDS`, makes an IBPath of it, reverses it and
completes it with its own end port (:func:`complete_path`).

Nothing a peer host sends is unpickled or executed: a compromised host
can make a check fail, but not run code on the hosts it is paired with.
(The controller's channel is trusted: it sends the code the agent runs.)

Data is never shipped through the controller: both ends derive the bytes
of every message from the check's seed (:func:`payload`), so the receiver
knows what must arrive.
"""
from __future__ import annotations

import random
import struct
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from rdma.validation import (GUARD, POISON, check_data, check_wc, fmt_size,
                             message_sizes, wait_data)

if TYPE_CHECKING:
    import rdma.ibverbs as ibv
    from rdma.devices import EndPort
    from rdma.multihost.agent import Agent
    from rdma.path import IBPath
    from rdma.pytest_plugin import QPEnd

__all__ = ["CHECKS", "PAIR_CHECKS", "payload", "complete_path", "half_path",
           "check_half_path", "HALF_PATH_FIELDS", "PairEnd"]

#: Bytes of GRH in front of a UD receive.
GRH_LEN = 40
#: Q_Key of the UD checks.
QKEY = 0x11111111


def payload(seed: int, index: int, size: int) -> bytes:
    """The bytes of message *index* of a check with *seed* (both ends
    compute the same)."""
    return random.Random(seed * 1000003 + index).randbytes(size)


#: The fields a half path may carry, with the (inclusive) range of each
#: integer field; ``SGID``/``DGID`` are 32 hex digits, ``has_grh`` a bool.
HALF_PATH_FIELDS: Dict[str, Tuple[int, int]] = {
    "SLID": (0, 0xFFFF), "DLID": (0, 0xFFFF), "SL": (0, 15),
    "pkey": (0, 0xFFFF), "qkey": (0, 0xFFFFFFFF), "MTU": (1, 5),
    "rate": (0, 63), "hop_limit": (0, 255), "traffic_class": (0, 255),
    "flow_label": (0, 0xFFFFF), "retries": (0, 7),
    "min_rnr_timer": (0, 31), "dack_resp_time": (0, 31),
    "sack_resp_time": (0, 31), "packet_life_time": (0, 63),
    "sqpn": (0, 0xFFFFFF), "dqpn": (0, 0xFFFFFF),
    "sqpsn": (0, 0xFFFFFF), "dqpsn": (0, 0xFFFFFF),
    "srdatomic": (0, 255), "drdatomic": (0, 255),
}
_GID_FIELDS = ("SGID", "DGID")


def half_path(end_port: EndPort, gid_index: Optional[int], qp: ibv.QP, *,
              mtu: int, qp_type: int) -> Dict[str, Any]:
    """This end's half of the path, as plain data (see
    :func:`check_half_path`): the fields of an IBPath from this end (no
    destination yet) that the peer reverses."""
    import rdma.ibverbs as ibv
    from rdma.path import IBPath, fill_path
    p = IBPath(None, SLID=end_port.lid, MTU=mtu)
    gids = end_port.gids
    if gid_index is not None and 0 <= gid_index < len(gids) and \
            any(bytes(gids[gid_index])):
        p.SGID = gids[gid_index]
        p.has_grh = True
    if qp_type != ibv.IBV_QPT_UD:
        p.retries = 7
        p.min_rnr_timer = 12
    else:
        p.qkey = QKEY
    p.end_port = end_port
    fill_path(qp, p)
    out: Dict[str, Any] = {}
    for k, v in p._state().items():
        if k in _GID_FIELDS:
            out[k] = None if v is None else bytes(v).hex()
        elif k == "has_grh" or k in HALF_PATH_FIELDS:
            out[k] = v if k == "has_grh" else int(v)
    return out


def check_half_path(half: Any, who: str = "the peer") -> Dict[str, Any]:
    """*half* checked against :data:`HALF_PATH_FIELDS`, with GIDs as
    :class:`rdma.IBA.GID`: the keyword arguments of an IBPath.

    :raises ValueError: anything else than a dictionary of known fields
        of the right type and range (naming the field and *who* sent it)"""
    from rdma.IBA import GID
    if not isinstance(half, dict):
        raise ValueError(f"{who} sent {type(half).__name__} as its half of "
                         f"the path, not a dictionary of path fields")
    out: Dict[str, Any] = {}
    for k, v in half.items():
        if k == "has_grh":
            if not isinstance(v, bool):
                raise ValueError(f"{who} sent has_grh={v!r}: not a bool")
            out[k] = v
        elif k in _GID_FIELDS:
            if v is None:
                out[k] = None
                continue
            if not isinstance(v, str) or len(v) != 32 or \
                    any(c not in "0123456789abcdefABCDEF" for c in v):
                raise ValueError(f"{who} sent {k}={v!r}: not a GID of 32 "
                                 f"hex digits")
            out[k] = GID(bytes.fromhex(v))
        elif k in HALF_PATH_FIELDS:
            lo, hi = HALF_PATH_FIELDS[k]
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"{who} sent {k}={v!r}: not an integer in "
                                 f"{lo:#x}..{hi:#x}")
            out[k] = v
        else:
            raise ValueError(f"{who} sent an unknown path field {k!r}")
    return out


def complete_path(half: Any, mine: Dict[str, Any], end_port: EndPort,
                  gid_index: Optional[int]) -> IBPath:
    """The path from this end to the peer whose :func:`half_path` is
    *half* (*mine*: our own half): checked (:func:`check_half_path`),
    reversed, given our end port, QP, PSN and GID, resolved without an SA
    (RoCE: GIDs; the software fabric: its own addressing; InfiniBand:
    LIDs)."""
    from rdma.path import IBPath, resolve_path
    peer = IBPath(None, **check_half_path(half))
    me = IBPath(None, **check_half_path(mine, "this end"))
    p = peer.reverse(for_reply=False)
    # After reverse the D* fields describe the peer; the S* ones (our QP,
    # our send PSN, what we can have outstanding) come from our half.
    p.sqpn, p.sqpsn = me.sqpn, me.sqpsn
    p.sack_resp_time = me.sack_resp_time
    p.srdatomic = min(me.srdatomic, p.srdatomic)
    p.drdatomic = me.drdatomic
    p.end_port = end_port
    p.MTU = min(p.MTU, end_port.attr.active_mtu)
    gids = end_port.gids
    sgid = gids[gid_index] if gid_index is not None and \
        0 <= gid_index < len(gids) and any(bytes(gids[gid_index])) else None
    if p.DGID is not None and sgid is not None:
        p.SGID = sgid
    elif end_port.link_layer != "Ethernet":
        p.has_grh = False
        p.DGID = None
        p.SGID = None
    if end_port.link_layer == "Ethernet" or end_port.provider != "verbs":
        resolve_path(None, p)
    else:
        p.SLID = end_port.lid
    return p


def _aligned(end: QPEnd, off: int) -> int:
    return off + (-(end.mr.addr + off)) % 8


class PairEnd:
    """One end of a check between two hosts.

    :param agent: the host's :class:`rdma.multihost.agent.Agent`
    :param role: ``"a"`` or ``"b"``
    :param params: the check's parameters (the same on both ends)
    """

    #: The steps after ``hello`` and ``connect``, in order.
    steps: Tuple[str, ...] = ()
    #: The check's transport, for the QP of :meth:`hello` (ibv.IBV_QPT_RC).
    qp_type = 2

    def __init__(self, agent: Agent, role: str, params: Dict[str, Any]):
        self.agent = agent
        self.role = role
        self.params = params
        self.seed = int(params.get("seed", 1))
        self.timeout = float(params.get("timeout", 10.0))
        #: The QP and its buffer, made by :meth:`hello`.
        self.end: Optional[QPEnd] = None
        self.peer: Dict[str, Any] = {}

    # -- the common steps ------------------------------------------------

    def buffer_size(self) -> int:
        return 4096

    def hello(self, _peer: Any) -> Dict[str, Any]:
        """Make the QP; return our half of the path and our MR."""
        import rdma.ibverbs as ibv
        from rdma.pytest_plugin import QPEnd
        a = self.agent
        ep, ctx, gid_index = a.device()
        access = ibv.IBV_ACCESS_LOCAL_WRITE
        if self.qp_type in (ibv.IBV_QPT_RC, ibv.IBV_QPT_UC):
            access |= ibv.IBV_ACCESS_REMOTE_WRITE
        if self.qp_type == ibv.IBV_QPT_RC:
            access |= ibv.IBV_ACCESS_REMOTE_READ
            if ep.parent.attr.atomic_cap:
                access |= ibv.IBV_ACCESS_REMOTE_ATOMIC
        self.access = access
        end = self.end = QPEnd(ctx, ep, gid_index, self.qp_type,
                               size=self.buffer_size(),
                               depth=int(self.params.get("depth", 16)),
                               srq=False, access=access)
        mtu = ep.attr.active_mtu
        self.half = half_path(ep, gid_index, end.qp, mtu=mtu,
                              qp_type=self.qp_type)
        return {"path": self.half,
                "addr": end.mr.addr, "rkey": end.mr.rkey,
                "max_msg_sz": ep.attr.max_msg_sz,
                "atomics": bool(ep.parent.attr.atomic_cap)}

    def connect(self, peer: Dict[str, Any]) -> Dict[str, Any]:
        """Bring our QP to RTS addressed to the peer."""
        import rdma.ibverbs as ibv
        ep, _, gid_index = self.agent.device()
        self.peer = peer
        p = complete_path(peer["path"], self.half, ep, gid_index)
        if self.qp_type == ibv.IBV_QPT_UD:
            p.qkey = QKEY
        end = self._end()
        end.path = p
        end.qp.establish(p, self.access & ~ibv.IBV_ACCESS_LOCAL_WRITE)
        return {"mtu": p.MTU}

    def close(self) -> None:
        if self.end is not None:
            self.end.close()
            self.end = None

    # -- helpers ---------------------------------------------------------

    def _end(self) -> QPEnd:
        """The QP end :meth:`hello` made."""
        if self.end is None:
            raise RuntimeError(f"{type(self).__name__}: no QP (hello() "
                               f"has not run, or the check is closed)")
        return self.end

    def poll(self, n: int, what: str) -> List[ibv.wc]:
        from rdma.pytest_plugin import poll_cq
        return poll_cq(self._end().cq, n, self.timeout, what)

    @property
    def me(self) -> str:
        return self.agent.name

    @property
    def other(self) -> str:
        return str(self.params["hosts"][1 if self.role == "a" else 0])


class _Remote:
    """The peer's MR as QPEnd.send_wr wants it (``mr.addr``, ``mr.rkey``)."""

    class _MR:
        def __init__(self, addr: int, rkey: int):
            self.addr, self.rkey = addr, rkey

    def __init__(self, peer: Dict[str, Any]):
        self.mr = self._MR(int(peer["addr"]), int(peer["rkey"]))


class Transfer(PairEnd):
    """One verb of one transport at every size, both directions, each
    message checked byte for byte (and the guard after it untouched).

    Steps ``prepare_ab``/``go_ab`` move data a -> b, ``prepare_ba``/
    ``go_ba`` b -> a; ``prepare`` fills sources and poisons targets and
    posts receives, so that ``go`` (both ends at once) only moves data."""

    steps = ("prepare_ab", "go_ab", "prepare_ba", "go_ba")

    def __init__(self, agent: Agent, role: str, params: Dict[str, Any]):
        super().__init__(agent, role, params)
        import rdma.ibverbs as ibv
        self.transport = params["transport"]
        self.verb = params["verb"]
        self.qp_type = {"RC": ibv.IBV_QPT_RC, "UC": ibv.IBV_QPT_UC,
                        "UD": ibv.IBV_QPT_UD}[self.transport]
        self.sizes: List[int] = list(params["sizes"])
        self.grh = GRH_LEN if self.transport == "UD" else 0
        # Source slots, then target slots (GRH + message + guard each).
        self.src_off: List[int] = []
        self.dst_off: List[int] = []
        off = 0
        for s in self.sizes:
            self.src_off.append(off)
            off += (s + 63) & ~63
        for s in self.sizes:
            self.dst_off.append(off)
            off += (self.grh + s + GUARD + 63) & ~63
        self.total = off
        self.moved = 0
        self.t_go = 0.0

    def buffer_size(self) -> int:
        return self.total

    def _msg(self, direction: str, i: int) -> bytes:
        return payload(self.seed + (0 if direction == "ab" else 7),
                       i, self.sizes[i])

    def _imm(self, direction: str, i: int) -> int:
        return random.Random(self.seed * 31 + i +
                             (0 if direction == "ab" else 99)).getrandbits(32)

    def _is_src(self, direction: str) -> bool:
        return (direction == "ab") == (self.role == "a")

    def _prepare(self, direction: str) -> Dict[str, Any]:
        end = self._end()
        if self._is_src(direction):
            for i, s in enumerate(self.sizes):
                end.buf[self.src_off[i]:self.src_off[i] + s] = \
                    self._msg(direction, i)
        else:
            for i, s in enumerate(self.sizes):
                o = self.dst_off[i]
                end.buf[o:o + self.grh + s + GUARD] = \
                    bytes([POISON]) * (self.grh + s + GUARD)
                if self.verb.startswith("SEND"):
                    end.post_recv(self.grh + s + GUARD, off=o, wr_id=100 + i)
                elif self.verb == "RDMA_WRITE_WITH_IMM":
                    end.post_recv(0, off=0, wr_id=100 + i)
        return {}

    def _go(self, direction: str) -> Dict[str, Any]:
        import rdma.ibverbs as ibv
        end, verb = self._end(), self.verb
        src = self._is_src(direction)
        peer = _Remote(self.peer)
        arrow = (f"{self.me} -> {self.other}" if src else
                 f"{self.other} -> {self.me}")
        t0 = time.monotonic()
        opcode = {"SEND": ibv.IBV_WR_SEND,
                  "SEND_WITH_IMM": ibv.IBV_WR_SEND_WITH_IMM,
                  "RDMA_WRITE": ibv.IBV_WR_RDMA_WRITE,
                  "RDMA_WRITE_WITH_IMM": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                  "RDMA_READ": ibv.IBV_WR_RDMA_READ}[verb]
        want_wc = {"SEND": ibv.IBV_WC_SEND,
                   "SEND_WITH_IMM": ibv.IBV_WC_SEND,
                   "RDMA_WRITE": ibv.IBV_WC_RDMA_WRITE,
                   "RDMA_WRITE_WITH_IMM": ibv.IBV_WC_RDMA_WRITE,
                   "RDMA_READ": ibv.IBV_WC_RDMA_READ}[verb]
        initiator = (not src) if verb == "RDMA_READ" else src
        if initiator:
            for i, s in enumerate(self.sizes):
                what = (f"{self.transport} {verb} of {fmt_size(s)} {arrow}")
                if verb == "RDMA_READ":
                    wr = end.send_wr(opcode, s, off=self.dst_off[i],
                                     remote=peer,
                                     remote_off=self._peer_src_off(i),
                                     wr_id=i)
                else:
                    kw = {}
                    if verb.endswith("WITH_IMM"):
                        kw["imm_data"] = self._imm(direction, i)
                    wr = end.send_wr(opcode, s, off=self.src_off[i],
                                     remote=peer,
                                     remote_off=self._peer_dst_off(i),
                                     wr_id=i, **kw)
                end.qp.post_send(wr)
                wc = self.poll(1, f"{what} (requester)")[0]
                check_wc(f"{what} (requester)", wc, want_wc)
        if not src:
            self._verify(direction, arrow)
        dt = time.monotonic() - t0
        n = sum(self.sizes)
        self.moved += n
        return {"bytes": n, "seconds": dt}

    def _peer_src_off(self, i: int) -> int:
        return self.src_off[i]       # the same layout on both ends

    def _peer_dst_off(self, i: int) -> int:
        return self.dst_off[i]

    def _verify(self, direction: str, arrow: str) -> None:
        import rdma.ibverbs as ibv
        end, verb = self._end(), self.verb
        consumes = verb in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE_WITH_IMM")
        for i, s in enumerate(self.sizes):
            what = f"{self.transport} {verb} of {fmt_size(s)} {arrow}"
            data = self._msg(direction, i)
            if consumes:
                rwc = self.poll(1, f"{what} (receive)")[0]
                want = ibv.IBV_WC_RECV_RDMA_WITH_IMM \
                    if verb == "RDMA_WRITE_WITH_IMM" else ibv.IBV_WC_RECV
                check_wc(f"{what} (receive)", rwc, want)
                assert rwc.wr_id == 100 + i, (
                    f"{what}: receive wr_id {rwc.wr_id}, expected {100 + i}")
                assert rwc.byte_len == self.grh + s, (
                    f"{what}: receive byte_len {rwc.byte_len}, expected "
                    f"{self.grh + s}")
                if verb.endswith("WITH_IMM"):
                    imm = self._imm(direction, i)
                    assert rwc.imm_data == imm, (
                        f"{what}: immediate data {rwc.imm_data:#010x}, sent "
                        f"{imm:#010x}")
            start = self.dst_off[i] + self.grh
            if verb in ("RDMA_WRITE", "RDMA_READ"):
                wait_data(what, end.buf, start, data, self.timeout)
            view = memoryview(end.buf)
            check_data(what, view[start:start + s], data)
            check_data(f"{what}: the {GUARD} bytes after the message",
                       view[start + s:start + s + GUARD],
                       bytes([POISON]) * GUARD)
            view.release()

    def prepare_ab(self, _peer: Any) -> Dict[str, Any]:
        return self._prepare("ab")

    def go_ab(self, _peer: Any) -> Dict[str, Any]:
        return self._go("ab")

    def prepare_ba(self, _peer: Any) -> Dict[str, Any]:
        return self._prepare("ba")

    def go_ba(self, _peer: Any) -> Dict[str, Any]:
        return self._go("ba")


class Atomics(PairEnd):
    """Fetch-and-add and compare-and-swap (hit and miss) across the pair,
    both directions: the old value comes back, the new one is in the
    responder's memory."""

    steps = ("prepare_ab", "go_ab", "check_ab", "prepare_ba", "go_ba",
             "check_ba")
    U64 = struct.Struct("=Q")
    MASK = (1 << 64) - 1

    def buffer_size(self) -> int:
        return 256

    def _plan(self, direction: str
              ) -> Tuple[int, List[Tuple[str, Any, int]]]:
        r = random.Random(self.seed + (0 if direction == "ab" else 5))
        start = r.getrandbits(64)
        ops = [("faa", 1, 0), ("faa", r.getrandbits(64), 0),
               ("cas", "hit", r.getrandbits(64)),
               ("cas", "miss", r.getrandbits(64)),
               ("faa", self.MASK, 0)]
        return start, ops

    def _requester(self, direction: str) -> bool:
        return (direction == "ab") == (self.role == "a")

    def _prepare(self, direction: str) -> Dict[str, Any]:
        if not self._requester(direction):
            start, _ = self._plan(direction)
            end = self._end()
            self.U64.pack_into(end.buf, _aligned(end, 64), start)
        return {}

    def _go(self, direction: str) -> Dict[str, Any]:
        import rdma.ibverbs as ibv
        if not self._requester(direction):
            return {}
        end = self._end()
        peer = _Remote(self.peer)
        roff = int(self.peer["counter_off"])
        value, ops = self._plan(direction)
        loff = _aligned(end, 0)
        for i, (op, arg, swap) in enumerate(ops):
            self.U64.pack_into(end.buf, loff, 0x5A5A5A5A5A5A5A5A)
            if op == "faa":
                kw = dict(compare_add=arg)
                opcode, want_wc = (ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                   ibv.IBV_WC_FETCH_ADD)
                new = (value + arg) & self.MASK
                name = f"fetch-and-add {arg:#x}"
            else:
                compare = value if arg == "hit" else value ^ 1
                kw = dict(compare_add=compare, swap=swap)
                opcode, want_wc = (ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
                                   ibv.IBV_WC_COMP_SWAP)
                new = swap if arg == "hit" else value
                name = ("compare-and-swap (" +
                        ("equal" if arg == "hit" else "different") + ")")
            what = f"{name} {self.me} -> {self.other}"
            end.qp.post_send(end.send_wr(opcode, 8, off=loff, remote=peer,
                                         remote_off=roff, wr_id=i, **kw))
            wc = self.poll(1, what)[0]
            check_wc(what, wc, want_wc)
            old = self.U64.unpack_from(end.buf, loff)[0]
            assert old == value, (f"{what}: returned {old:#018x}, the "
                                  f"counter held {value:#018x}")
            value = new
        return {"final": value, "n": len(ops)}

    def _check(self, direction: str, peer: Dict[str, Any]
               ) -> Dict[str, Any]:
        if self._requester(direction):
            return {}
        end = self._end()
        got = self.U64.unpack_from(end.buf, _aligned(end, 64))[0]
        want = int(peer["final"])
        assert got == want, (f"atomics {self.other} -> {self.me}: the "
                             f"counter is {got:#018x}, expected {want:#018x}")
        return {}

    def hello(self, peer: Any) -> Dict[str, Any]:
        out = super().hello(peer)
        out["counter_off"] = _aligned(self._end(), 64)
        return out

    def prepare_ab(self, p: Any) -> Dict[str, Any]:
        return self._prepare("ab")

    def go_ab(self, p: Any) -> Dict[str, Any]:
        return self._go("ab")

    def check_ab(self, p: Any) -> Dict[str, Any]:
        return self._check("ab", p)

    def prepare_ba(self, p: Any) -> Dict[str, Any]:
        return self._prepare("ba")

    def go_ba(self, p: Any) -> Dict[str, Any]:
        return self._go("ba")

    def check_ba(self, p: Any) -> Dict[str, Any]:
        return self._check("ba", p)


class _PerfArgs:
    """The subset of ``ibtool perf``'s options its measuring loops read."""

    def __init__(self, test: str, mode: str, iters: int, size: int,
                 timeout: float, tx_depth: int = 16, cq_mod: int = 4):
        self.test, self.mode, self.iters, self.size = test, mode, iters, size
        self.timeout = timeout
        self.tx_depth, self.cq_mod, self.rx_depth = tx_depth, cq_mod, 16
        self.atomic_type = "FETCH_AND_ADD"
        self.check = False


class _NoBeat:
    def tick(self, done: int) -> None:
        pass


class Perf(PairEnd):
    """Bandwidth (RDMA WRITE, each direction, the best of ``bw_reps`` runs)
    and latency (SEND ping-pong) measured by ``ibtool perf``'s own loops
    (:mod:`rdma.cli.perf`): its
    ``_Side`` (one RC QP, perf's QP parameters), ``_bw_client`` and
    ``_lat_run``; the address exchange is perf's ``hello`` dictionary."""

    steps = ("bw_ab", "bw_ba", "latency")

    def hello(self, _peer: Any) -> Dict[str, Any]:
        from rdma.cli import perf
        ep, ctx, gid_index = self.agent.device()
        p = self.params
        self.bw_args = _PerfArgs("write", "bw", int(p["bw_iters"]),
                                 int(p["bw_size"]), self.timeout,
                                 tx_depth=int(p.get("tx_depth", 16)),
                                 cq_mod=int(p.get("cq_mod", 4)))
        self.lat_args = _PerfArgs("send", "lat", int(p["lat_iters"]),
                                  int(p["lat_size"]), self.timeout)
        gidx = gid_index if ep.link_layer == "Ethernet" or \
            ep.provider != "verbs" else -1
        if gidx is not None and gidx >= 0 and not any(
                bytes(ep.gids[gidx])):
            gidx = -1
        mtu = ep.attr.active_mtu
        if gidx is None:
            gidx = -1
        self.bw = perf._Side(ctx, ep, self.bw_args,
                             self.bw_args.size, gidx)
        self.lat = perf._Side(ctx, ep, self.lat_args,
                              self.lat_args.size, gidx)
        self.mtu = mtu
        return {"bw": self.bw.describe(mtu), "lat": self.lat.describe(mtu)}

    def connect(self, peer: Dict[str, Any]) -> Dict[str, Any]:
        self.bw.connect(peer["bw"], self.mtu)
        self.lat.connect(peer["lat"], self.mtu)
        return {}

    def _bw(self, direction: str) -> Dict[str, Any]:
        from rdma.cli import perf
        if (direction == "ab") != (self.role == "a"):
            return {}          # WRITE: the target does nothing, as a NIC
        perf._prepare(self.bw, self.bw_args, self.bw_args.size, True)
        # The best of a few runs: a busy machine only ever slows a run
        # down, while a slow link is slow every time.
        best = None
        for _ in range(max(1, int(self.params.get("bw_reps", 3)))):
            beat: Any = _NoBeat()       # (perf._Beat's tick(), doing nothing)
            row = perf._bw_client(self.bw, self.bw_args, self.bw_args.size,
                                  beat)
            if best is None or row["bw_avg_mb_s"] > best["bw_avg_mb_s"]:
                best = row
        return {"row": best}

    def bw_ab(self, _p: Any) -> Dict[str, Any]:
        return self._bw("ab")

    def bw_ba(self, _p: Any) -> Dict[str, Any]:
        return self._bw("ba")

    def latency(self, _p: Any) -> Dict[str, Any]:
        from rdma.cli import perf
        client = self.role == "a"
        perf._prepare(self.lat, self.lat_args, self.lat_args.size, client)
        row = perf._lat_run(self.lat, self.lat_args, self.lat_args.size,
                            client, None)
        return {"row": row} if row else {}

    def close(self) -> None:
        for s in (getattr(self, "bw", None), getattr(self, "lat", None)):
            if s is None:
                continue
            for o in (s.qp, s.scq, s.rcq, s.mr, s.pd):
                try:
                    o.close()
                except Exception:
                    pass


#: Transfer cases (transport, verb), as :mod:`rdma.validation.test_transfers`.
TRANSFER_CASES = [("RC", v) for v in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE",
                                      "RDMA_WRITE_WITH_IMM", "RDMA_READ")] + \
    [("UC", v) for v in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE",
                         "RDMA_WRITE_WITH_IMM")] + \
    [("UD", v) for v in ("SEND", "SEND_WITH_IMM")]

class UserQP(PairEnd):
    """A connected QP pair for users' own cross-host tests (the remote
    pair fixture): ``params`` ``qp_type``, ``size`` and ``depth``; no
    steps of its own: user functions run on :attr:`end`."""

    def __init__(self, agent: Agent, role: str, params: Dict[str, Any]):
        super().__init__(agent, role, params)
        self.qp_type = int(params.get("qp_type", 2))

    def buffer_size(self) -> int:
        return int(self.params.get("size", 4096))


#: Check name -> the class of its ends.
PAIR_CHECKS = {"transfer": Transfer, "atomics": Atomics, "perf": Perf,
               "qp": UserQP}

#: Every check, as named in reports.
CHECKS = ("port", "transfer", "atomics", "perf")


def transfer_sizes(limit: int, mtu: int, transport: str,
                   quick: bool) -> List[int]:
    """The message sizes of a transfer case (UD: up to the MTU)."""
    if transport == "UD":
        limit = mtu
    return message_sizes(limit, mtu, quick)
