"""Shared helpers and fixtures of the behavioural verbs tests
(tests/verbs/test_verbs_*.py), written once for every provider.

Test modules load the fixtures with ``pytest_plugins = ["verbs_fixtures"]``
and import the helpers by name.  This module imports nothing from the tests'
conftest, so a plain script can use the helpers too (the ASan test runs
:func:`exercise` in a fresh interpreter of the ASan build).

Providers (``provider`` fixture, tests/verbs/conftest.py):

* ``verbs``: rdma-core on Soft-RoCE in the test VM.  Every QP talks RoCEv2
  through GID index ``$RDMA_TESTVM_GID_INDEX`` (1, the IPv4-mapped GID).
  Loopback pairs live on one Context of rxe0; two-host pairs put side A on
  rxe1 and side B on rxe2, so their packets cross the veth.
* ``ucx``: the software fabric (device ucx0, one GID at index 0, a LID).
  Loopback pairs share one Context; "two-host" pairs use two Contexts (two
  UCX workers).  The transport is whatever ``UCX_TLS`` says (shared memory
  by default; CI runs the suite again with ``UCX_TLS=tcp``).

The helpers hide the addressing difference: :func:`gid_index` gives the
GID index of a Context's provider and every ah_attr built here uses it.
"""
from __future__ import annotations

import gc
import os
import random
import struct
import sys
import time
import warnings

import rdma
import rdma.ibverbs as ibv
import rdma.pytest_plugin

if "pytest" in sys.modules:
    import pytest
    fixture = pytest.fixture
else:   # a plain script (ASan run, subprocess tests): skip pytest's import
    pytest = None

    def fixture(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda f: f)

DEVICE = os.environ.get("RDMA_TESTVM_DEVICE", "rxe0")
GID_INDEX = int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))
TWO_HOST = os.environ.get("RDMA_TESTVM_TWO_HOST") == "1"
HOST1_DEVICE = os.environ.get("RDMA_TESTVM_HOST1_DEVICE", "rxe1")
HOST2_DEVICE = os.environ.get("RDMA_TESTVM_HOST2_DEVICE", "rxe2")
#: GID index of each provider's end port used for addressing.
GID_INDEXES = {"verbs": GID_INDEX, "ucx": 0}
PORT = 1
QKEY = 0x11111111
GRH_LEN = 40
#: Every remote right (the MR flag set that needs LOCAL_WRITE too).
REMOTE_ALL = (ibv.IBV_ACCESS_REMOTE_WRITE | ibv.IBV_ACCESS_REMOTE_READ
              | ibv.IBV_ACCESS_REMOTE_ATOMIC)
MR_ALL = ibv.IBV_ACCESS_LOCAL_WRITE | REMOTE_ALL

TRANSPORTS = {"RC": ibv.IBV_QPT_RC, "UC": ibv.IBV_QPT_UC, "UD": ibv.IBV_QPT_UD}

__all__ = [
    "DEVICE", "GID_INDEX", "GID_INDEXES", "gid_index", "open_end_port",
    "DIFFERENCES", "differs", "TWO_HOST", "HOST1_DEVICE", "HOST2_DEVICE",
    "PORT",
    "QKEY", "GRH_LEN", "REMOTE_ALL", "MR_ALL", "TRANSPORTS", "Side",
    "poll_cq", "expect_no_completion", "wait_for", "ah_attr_to", "to_init",
    "to_rtr", "to_rts", "connect_qp", "connect_to_peer", "connect_pair",
    "make_pair", "qp_state", "check_ok",
    "buffer_address", "run_py", "pattern", "exercise", "own_ah_attr",
]


# --------------------------------------------------------------------------
# polling

def poll_cq(cq, n: int = 1, timeout: float = 10.0) -> list:
    """Poll *cq* until *n* completions arrived; return exactly those.

    :func:`rdma.pytest_plugin.poll_cq` (a :class:`rdma.vtools.CQPoller`),
    which fails after *timeout* seconds saying what did arrive; this one
    also fails when more than *n* completions are there.
    """
    got = rdma.pytest_plugin.poll_cq(cq, n, timeout)
    more = cq.poll()
    assert not more, (f"expected {n} completions, got {n + len(more)}: "
                      f"{got + more!r}")
    return got


def expect_no_completion(cq, wait: float = 0.2) -> None:
    """Assert that nothing completes on *cq* within *wait* seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        wcs = cq.poll()
        assert not wcs, f"unexpected completion(s): {wcs!r}"
        time.sleep(0.005)


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """Call *predicate* until it returns a true value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what}")
        time.sleep(0.01)


def check_ok(wc, opcode=None, wr_id=None):
    """Assert that *wc* succeeded (and has *opcode*/*wr_id* when given)."""
    assert wc.status == ibv.IBV_WC_SUCCESS, f"{ibv.WCError(wc)} ({wc!r})"
    if opcode is not None:
        assert wc.opcode == opcode, wc
    if wr_id is not None:
        assert wc.wr_id == wr_id, wc
    return wc


# --------------------------------------------------------------------------
# providers

def open_end_port(provider: str):
    """The end port the tests use on *provider* (rxe0 for verbs, ucx0)."""
    if provider == "verbs":
        return rdma.get_end_port(DEVICE)
    return rdma.get_end_port(provider=provider)


def gid_index(obj) -> int:
    """The GID index used for addressing on *obj* (a provider name, or an
    object with a ``provider`` or ``ctx`` attribute)."""
    while not isinstance(obj, str):
        obj = getattr(obj, "provider", None) or obj.ctx
    return GID_INDEXES[obj]


#: The fabric's deliberate differences from rxe: key -> what differs.  Each
#: key is listed, as ``[key]``, in docs/fabric.rst ("Deliberate differences
#: from rxe"); test_differences.py checks both lists agree.
DIFFERENCES = {
    "addressing": "one GID at index 0 and a LID (rxe: RoCE GIDs, no LID)",
    "ib-grh": "UD receives carry an InfiniBand GRH (rxe: an IPv4 header in "
              "bytes 20..39)",
    "no-retransmit": "PSNs are checked but nothing is retransmitted",
    "dead-peer-at-once": "with no ACK timer (timeout 0), a request to a "
                         "missing QP fails at once with RETRY_EXC_ERR (rxe: "
                         "waits forever)",
    "mw-spec": "an access through a memory window must lie in the window, "
               "a SEND_WITH_INV receive has IBV_WC_WITH_INV, one that "
               "fails to invalidate is NAKed (rxe: only in the MR under "
               "it; the kernel's flag value untranslated; ACKed)",
    "sqd-resume": "send WRs held in SQD go on SQD -> RTS by themselves "
                  "(rxe: with the next post_send)",
    "rereg-mr": "ibv_rereg_mr changes an MR's PD, access and range "
                "(rxe: EOPNOTSUPP / EINVAL, its provider has no rereg_mr)",
    "reset-cleans-cq": "a QP's move to RESET takes its completions out "
                       "of its CQs, as mlx4/mlx5 do (rxe: they stay)",
    "unreachable-at-rtr": "modify(RTR) to an unknown address: EHOSTUNREACH",
    "ud-over-mtu": "a UD SEND longer than the MTU fails with LOC_LEN_ERR "
                   "(rxe: completes and is dropped on the wire)",
    "len-err-status": "a receive too small ends as LOC_LEN_ERR (RC "
                      "requester: REM_INV_REQ_ERR); rxe: LOC_QP_OP_ERR "
                      "(REM_OP_ERR)",
    "cq-overrun": "a QP whose completion a full CQ lost goes to ERR with "
                  "IBV_EVENT_QP_FATAL, send side too (rxe: the responder "
                  "goes to ERR without the event; the requester stays in "
                  "RTS)",
}
#: The providers that show each difference (every other one behaves as rxe).
DIFFERENT_PROVIDERS = {"ucx"}


def differs(provider: str, key: str) -> bool:
    """True if *provider* deliberately differs from rxe in *key* (one of
    :data:`DIFFERENCES`); the test then checks the provider's documented
    behaviour instead of rxe's."""
    if key not in DIFFERENCES:
        raise KeyError(f"{key!r} is not a documented difference")
    return provider in DIFFERENT_PROVIDERS


# --------------------------------------------------------------------------
# addressing and QP state transitions (attribute masks derived from the
# fields given, the way users write it)

def ah_attr_to(dgid, hop_limit: int = 1, sgid_index: int = GID_INDEX, *,
               dlid: int = 0):
    """An ah_attr reaching *dgid* (with a GRH: RoCEv2 on rxe) from GID
    *sgid_index*; with *dgid* None, one reaching *dlid* by LID alone (the
    fabric's LID addressing)."""
    if dgid is None:
        return ibv.ah_attr(is_global=0, port_num=PORT, sl=0, dlid=dlid)
    return ibv.ah_attr(is_global=1, port_num=PORT, sl=0, dlid=dlid,
                       grh=ibv.global_route(dgid=dgid, sgid_index=sgid_index,
                                            hop_limit=hop_limit))


def own_ah_attr(end_port):
    """An ah_attr from *end_port* to itself (its own addressing GID)."""
    i = gid_index(end_port)
    return ah_attr_to(end_port.gids[i], sgid_index=i)


def to_init(qp, access: int = REMOTE_ALL, qkey: int = QKEY):
    if qp.qp_type == ibv.IBV_QPT_UD:
        attr = ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                           port_num=PORT, qkey=qkey)
    else:
        attr = ibv.qp_attr(qp_state=ibv.IBV_QPS_INIT, pkey_index=0,
                           port_num=PORT, qp_access_flags=access)
    qp.modify(attr)


def to_rtr(qp, remote_qpn: int = 0, dgid=None, rq_psn: int = 0,
           min_rnr_timer: int = 1, path_mtu: int = ibv.IBV_MTU_1024,
           max_dest_rd_atomic: int = 1, *, dlid: int = 0):
    """RTR towards *dgid* (GRH), or towards *dlid* alone if *dgid* is None."""
    if qp.qp_type == ibv.IBV_QPT_UD:
        qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTR))
        return
    kw = dict(qp_state=ibv.IBV_QPS_RTR, path_mtu=path_mtu,
              dest_qp_num=remote_qpn, rq_psn=rq_psn,
              ah_attr=ah_attr_to(dgid, sgid_index=gid_index(qp), dlid=dlid))
    if qp.qp_type == ibv.IBV_QPT_RC:
        kw.update(max_dest_rd_atomic=max_dest_rd_atomic,
                  min_rnr_timer=min_rnr_timer)
    qp.modify(ibv.qp_attr(**kw))


def to_rts(qp, sq_psn: int = 0, timeout: int = 14, retry_cnt: int = 7,
           rnr_retry: int = 7, max_rd_atomic: int = 1):
    kw = dict(qp_state=ibv.IBV_QPS_RTS, sq_psn=sq_psn)
    if qp.qp_type == ibv.IBV_QPT_RC:
        kw.update(timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                  max_rd_atomic=max_rd_atomic)
    qp.modify(ibv.qp_attr(**kw))


def qp_state(qp) -> int:
    """The QP's current state, as ibv_query_qp reports it."""
    return qp.query(ibv.IBV_QP_STATE).qp_state


# --------------------------------------------------------------------------
# one end of a connection

class Side:
    """One end: its own PD, send CQ, recv CQ, optional SRQ, a QP and an MR.

    ``buf`` is a bytearray of *size* bytes registered as ``mr`` with
    *access*; ``gid`` is the end port's GID at :func:`gid_index`.
    """

    def __init__(self, ctx, qp_type: int, *, size: int = 4096,
                 access: int = MR_ALL, use_srq: bool = False,
                 sq_sig_all: int = 1, max_inline_data: int = 0,
                 max_send_wr: int = 16, max_recv_wr: int = 16,
                 max_send_sge: int = 1, max_recv_sge: int = 1,
                 cqe: int = 64, comp_channel=None):
        self.ctx = ctx
        self.qp_type = qp_type
        self.pd = ctx.pd()
        self.send_cq = self.pd.cq(cqe)
        self.recv_cq = self.pd.cq(cqe, comp_channel)
        self.srq = self.pd.srq(max_wr=max_recv_wr, max_sge=max_recv_sge) \
            if use_srq else None
        self.qp = self.pd.qp(qp_type, max_send_wr, self.send_cq, max_recv_wr,
                             self.recv_cq, srq=self.srq, sq_sig_all=sq_sig_all,
                             max_send_sge=max_send_sge,
                             max_recv_sge=max_recv_sge,
                             max_inline_data=max_inline_data)
        self.buf = bytearray(size)
        self.mr = self.pd.mr(self.buf, access)
        self.gid_index = gid_index(ctx)
        self.gid = ctx.end_port.gids[self.gid_index]
        self.lid = ctx.end_port.lid
        self._ahs: dict = {}

    @property
    def qpn(self) -> int:
        return self.qp.qp_num

    def ah_to(self, other: "Side"):
        """An AH (cached) from this side's PD to *other*'s GID."""
        key = bytes(other.gid)
        if key not in self._ahs:
            self._ahs[key] = self.pd.ah(ah_attr_to(
                other.gid, sgid_index=self.gid_index))
        return self._ahs[key]

    def post_recv(self, wr_id: int = 0, off: int = 0,
                  length: int | None = None):
        """Post one receive of buf[off:off+length] (to the SRQ if any)."""
        if length is None:
            length = len(self.buf) - off
        wr = ibv.recv_wr(wr_id=wr_id,
                         sg_list=self.mr.sge(length=length, off=off))
        (self.srq or self.qp).post_recv(wr)
        return wr

    def send_wr(self, other: "Side", opcode: int = ibv.IBV_WR_SEND, *,
                wr_id: int = 1, off: int = 0, length: int = 8,
                remote_off: int = 0, send_flags: int = ibv.IBV_SEND_SIGNALED,
                **kw):
        """A send_wr from buf[off:off+length] to *other* (buf[remote_off])."""
        fields = dict(wr_id=wr_id, opcode=opcode, send_flags=send_flags,
                      sg_list=self.mr.sge(length=length, off=off))
        if opcode in (ibv.IBV_WR_RDMA_WRITE, ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                      ibv.IBV_WR_RDMA_READ, ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
                      ibv.IBV_WR_ATOMIC_FETCH_AND_ADD):
            fields.update(remote_addr=other.mr.addr + remote_off,
                          rkey=other.mr.rkey)
        if self.qp_type == ibv.IBV_QPT_UD:
            fields.update(ah=self.ah_to(other), remote_qpn=other.qpn,
                          remote_qkey=QKEY)
        fields.update(kw)
        return ibv.send_wr(**fields)

    def close(self):
        """Close children before parents (the explicit, well-behaved way)."""
        for o in (self.qp, *self._ahs.values(), self.srq, self.mr,
                  self.send_cq, self.recv_cq, self.pd):
            if o is not None:
                o.close()


def connect_qp(qp, remote_qpn: int, *, dgid=None, dlid: int = 0,
               rq_psn: int = 0, sq_psn: int = 0, access: int = REMOTE_ALL,
               **kw):
    """Bring *qp* from RESET to RTS, addressed to the remote QP
    *remote_qpn* (by GID *dgid*, or by LID *dlid* alone when *dgid* is
    None).  ``min_rnr_timer``, ``path_mtu`` and ``max_dest_rd_atomic`` in
    *kw* go to :func:`to_rtr`, the rest to :func:`to_rts`."""
    rtr_kw = {k: kw.pop(k) for k in ("min_rnr_timer", "path_mtu",
                                     "max_dest_rd_atomic") if k in kw}
    to_init(qp, access)
    to_rtr(qp, remote_qpn=remote_qpn, dgid=dgid, dlid=dlid, rq_psn=rq_psn,
           **rtr_kw)
    to_rts(qp, sq_psn=sq_psn, **kw)


def connect_to_peer(qp, peer: dict, *, use_lid: bool = False, **kw):
    """:func:`connect_qp` towards a peer process's QP, described by the
    JSON object it printed: ``qpn``, ``gid`` (text) and ``lid``."""
    gid = peer.get("gid")
    connect_qp(qp, peer["qpn"],
               dgid=None if use_lid or not gid else rdma.IBA.GID(gid),
               dlid=peer.get("lid", 0), **kw)


def connect_pair(a, b, end_port=None, *, a_psn: int = 0, b_psn: int = 0,
                 use_lid: bool = False, **kw):
    """Connect two QPs to each other and bring both to RTS: the one helper
    of the tests for a connected pair.

    *a* and *b* are :class:`Side` objects (or anything with ``qp``,
    ``qpn``, ``gid`` and ``lid``): each QP is set up with verbs
    attributes (:func:`connect_qp`, the route the verbs suite tests),
    addressed by GID (by LID alone with *use_lid*: the fabric's), with the
    PSNs *a_psn*/*b_psn*; *kw* as for :func:`connect_qp`.

    With *end_port*, *a* and *b* are bare RC QPs of that end port, joined
    the way applications do it, through :mod:`rdma.path`: an ``IBPath``
    each way (``dgid=`` or, by default, ``dlid=`` the end port's LID;
    ``retries=`` for *a*'s path), ``resolve_path``, ``fill_path`` (random
    PSNs, exchanged; ``max_rd_atomic``) and ``establish`` (*b* with
    ``access_b``, default IBV_ACCESS_REMOTE_WRITE).  Returns the two paths
    then.
    """
    if end_port is not None:
        return _connect_by_path(end_port, a, b, **kw)
    for me, peer, my_psn, peer_psn in ((a, b, a_psn, b_psn),
                                       (b, a, b_psn, a_psn)):
        connect_qp(me.qp, peer.qpn, dgid=None if use_lid else peer.gid,
                   dlid=peer.lid, rq_psn=peer_psn, sq_psn=my_psn, **kw)
    return None


def _connect_by_path(end_port, qa, qb, *, dgid=None, dlid=None,
                     retries=None, access_b=ibv.IBV_ACCESS_REMOTE_WRITE,
                     max_rd_atomic: int = 255, **path_kw):
    import rdma.path
    if dgid is not None:
        where = dict(DGID=dgid)
    else:
        where = dict(DLID=end_port.lid if dlid is None else dlid)
    a_kw = dict(path_kw, **({} if retries is None else {"retries": retries}))
    pa = rdma.path.resolve_path(None, rdma.path.IBPath(
        end_port, dqpn=qb.qp_num, **where, **a_kw))
    pb = rdma.path.resolve_path(None, rdma.path.IBPath(
        end_port, dqpn=qa.qp_num, **where, **path_kw))
    rdma.path.fill_path(qa, pa, max_rd_atomic)
    rdma.path.fill_path(qb, pb, max_rd_atomic)
    pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
    qa.establish(pa)
    qb.establish(pb, access_b)
    return pa, pb


def make_pair(ctx_a, ctx_b, qp_type: int, *, side_a: dict | None = None,
              side_b: dict | None = None, **kw):
    """Two connected Sides (RTS).  *kw* goes to both Sides; *side_a*/*side_b*
    override per side; ``rnr_retry``, ``timeout``, ``retry_cnt``,
    ``min_rnr_timer`` and ``use_lid`` go to :func:`connect_pair`."""
    conn = {k: kw.pop(k) for k in ("rnr_retry", "timeout", "retry_cnt",
                                   "min_rnr_timer", "use_lid") if k in kw}
    a = Side(ctx_a, qp_type, **{**kw, **(side_a or {})})
    b = Side(ctx_b, qp_type, **{**kw, **(side_b or {})})
    connect_pair(a, b, **conn)
    return a, b


def buffer_address(obj) -> int:
    """The address of the first byte of a writable buffer *obj*."""
    import ctypes
    c = ctypes.c_char.from_buffer(obj)
    try:
        return ctypes.addressof(c)
    finally:
        del c


def run_py(code: str, *, pythonpath=None, env=None, timeout: float = 120):
    """Run Python *code* in a fresh interpreter (-P: cwd not on sys.path);
    return the CompletedProcess (text)."""
    import subprocess
    e = dict(os.environ)
    e.update(env or {})
    e.pop("RDMA_PROVIDER", None)
    if pythonpath is not None:
        e["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-P", "-c", code],
                          capture_output=True, text=True, env=e,
                          timeout=timeout)


def pattern(n: int, seed: int = 0) -> bytes:
    """*n* bytes that differ from run to run of *seed* (never all zero)."""
    r = random.Random(seed)
    return bytes(r.randrange(1, 256) for _ in range(n))


# --------------------------------------------------------------------------
# fixtures

@fixture
def ctx(end_port):
    """An open Context on the end port under test, always closed
    afterwards."""
    with rdma.get_verbs(end_port) as c:
        yield c


@fixture(scope="session")
def variant():
    """Return a function that gives the directory of a built variant
    (tests/variants.py; built on first use)."""
    import variants

    def get(name):
        d = variants.variant_dir(name)
        if not any((d / "rdma").glob("_ibverbs*.so")):
            d = variants.build(name)
        return d
    return get


@fixture
def ctx2(end_port):
    """A second Context on the provider's device."""
    with rdma.get_verbs(end_port) as c:
        yield c


@fixture(params=["loopback", "two_host"])
def ctx_pair(request, provider, end_port):
    """(ctx_a, ctx_b): both on rxe0 (loopback), or rxe1 and rxe2 (two
    hosts); on the fabric: one Context, or two (two UCX workers)."""
    if request.param == "loopback":
        with rdma.get_verbs(end_port) as c:
            yield c, c
        return
    if provider != "verbs":
        with rdma.get_verbs(end_port) as c1, rdma.get_verbs(end_port) as c2:
            yield c1, c2
        return
    if not TWO_HOST:
        pytest.skip("needs the two-host VM (python -m rdma.testvm --two-host)")
    with rdma.get_verbs(rdma.get_end_port(HOST1_DEVICE)) as c1, \
            rdma.get_verbs(rdma.get_end_port(HOST2_DEVICE)) as c2:
        yield c1, c2


@fixture
def pair_factory(ctx):
    """make(qp_type, **kw) -> (a, b): a connected pair on one Context of
    the provider's device; every Side is closed (children first) at
    teardown."""
    made = []

    def make(qp_type, ctx_a=None, ctx_b=None, **kw):
        a, b = make_pair(ctx_a or ctx, ctx_b or ctx, qp_type, **kw)
        made.extend((a, b))
        return a, b
    yield make
    for s in made:
        s.close()


# --------------------------------------------------------------------------
# a self-contained workout of the object model (for the ASan run)

def exercise(seed: int = 0, rounds: int = 3, provider: str = "verbs") -> None:
    """Data path on RC/UC/UD, error completions, and closing/forgetting
    objects in random orders; raises on any wrong result."""
    rnd = random.Random(seed)
    end_port = open_end_port(provider)
    warnings.simplefilter("ignore", ResourceWarning)
    for r in range(rounds):
        ctx = rdma.get_verbs(end_port)
        sides = []
        for name, t in TRANSPORTS.items():
            a, b = make_pair(ctx, ctx, t, max_inline_data=32)
            sides += [a, b]
            data = pattern(64, seed * 100 + r)
            a.buf[:64] = data
            off = GRH_LEN if t == ibv.IBV_QPT_UD else 0
            b.post_recv(wr_id=7)
            a.qp.post_send(a.send_wr(b, ibv.IBV_WR_SEND_WITH_IMM, length=64,
                                     imm_data=0x80000001 + r))
            check_ok(poll_cq(a.send_cq)[0], ibv.IBV_WC_SEND)
            wc = check_ok(poll_cq(b.recv_cq)[0], ibv.IBV_WC_RECV, 7)
            assert wc.imm_data == 0x80000001 + r
            assert bytes(b.buf[off:off + 64]) == data
            batch = ibv.SendBatch([a.send_wr(b, wr_id=i, length=8,
                                             send_flags=ibv.IBV_SEND_SIGNALED
                                             | ibv.IBV_SEND_INLINE)
                                   for i in range(4)])
            b.qp.post_recv(ibv.RecvBatch([ibv.recv_wr(wr_id=i,
                                                      sg_list=b.mr.sge(
                length=64, off=64 * i)) for i in range(4)]))
            a.qp.post_send(batch)
            arr = ibv.WCArray(8)
            ids = []
            deadline = time.monotonic() + 10
            while len(ids) < 4:
                k = a.send_cq.poll_into(arr)
                ids += [arr[i].wr_id for i in range(k)]
                assert time.monotonic() < deadline, ids
            assert ids == [0, 1, 2, 3]
            assert len(poll_cq(b.recv_cq, 4)) == 4
            if t == ibv.IBV_QPT_RC:
                struct.pack_into("<Q", b.buf, 512, 41)
                a.qp.post_send(a.send_wr(b, ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                         off=16, remote_off=512,
                                         compare_add=1))
                check_ok(poll_cq(a.send_cq)[0])
                assert struct.unpack_from("<Q", a.buf, 16)[0] == 41
                assert struct.unpack_from("<Q", b.buf, 512)[0] == 42
                # an error completion, then a flush
                a.qp.post_send([a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=1,
                                          rkey=b.mr.rkey ^ 0x5500),
                                a.send_wr(b, ibv.IBV_WR_RDMA_WRITE, wr_id=2)])
                wcs = poll_cq(a.send_cq, 2)
                assert [w.status for w in wcs] == [ibv.IBV_WC_REM_ACCESS_ERR,
                                                   ibv.IBV_WC_WR_FLUSH_ERR]
                str(ibv.WCError(wcs[0], qp=a.qp))
        cc = ctx.comp_channel()
        cq = ctx.cq(8, cc)
        cq.req_notify_cq()
        assert cc.get_cq_event(timeout=0.01) is None
        objs = [ctx, cc, cq] + [o for s in sides for o in
                                (s.pd, s.qp, s.mr, s.send_cq, s.recv_cq,
                                 *s._ahs.values())]
        rnd.shuffle(objs)
        how = rnd.choice(["close", "forget", "mixed"])
        for o in objs:
            if how == "close" or (how == "mixed" and rnd.random() < 0.5):
                o.close()
        if how == "close":
            for o in objs:
                try:
                    o.close()
                except Exception as e:  # close must never fail
                    raise AssertionError(f"second close of {o!r} raised {e!r}")
        del objs, sides, a, b, cc, cq, ctx, batch
        gc.collect()
