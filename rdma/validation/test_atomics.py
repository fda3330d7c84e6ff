"""Atomic operations: fetch-and-add and compare-and-swap results, alone and
under contention from several QPs on one counter.

The counter is a 64-bit integer in the responder's byte order (the verbs
rule), 8-byte aligned."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Tuple

import random
import struct
import time

import pytest

import rdma.ibverbs as ibv
from rdma.pytest_plugin import poll_cq
from rdma.validation import TIMEOUT, check_wc, require

if TYPE_CHECKING:
    from rdma.validation import Record
    from rdma.pytest_plugin import QPEnd, QPPair, RdmaSetup

pytestmark = [require, pytest.mark.rdma_atomics]

U64 = struct.Struct("=Q")
MASK = (1 << 64) - 1
FAA, CAS = ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, ibv.IBV_WR_ATOMIC_CMP_AND_SWP


def aligned(end: QPEnd, off: int = 0) -> int:
    """The first 8-byte aligned offset >= *off* in end's buffer."""
    return off + (-(end.mr.addr + off)) % 8


def atomic(req: QPEnd, resp: QPEnd, opcode: int, remote_off: int,
           local_off: int, wr_id: int, **kw: Any) -> ibv.send_wr:
    return req.send_wr(opcode, 8, off=local_off, remote=resp,
                       remote_off=remote_off, wr_id=wr_id, **kw)


def read_u64(end: QPEnd, off: int) -> int:
    v: int = U64.unpack_from(end.buf, off)[0]
    return v


def test_fetch_add_and_compare_swap(rdma_setup: RdmaSetup,
                                    rdma_pair: Callable[..., QPPair],
                                    record_property: Record) -> None:
    """Each atomic returns the old value and leaves the right new one."""
    pair = rdma_pair(ibv.IBV_QPT_RC, size=256)
    checks = 0
    for direction in ((pair.a, pair.b), (pair.b, pair.a)):
        req, resp = direction
        roff, loff = aligned(resp, 64), aligned(req, 0)
        value = random.getrandbits(64)
        U64.pack_into(resp.buf, roff, value)
        steps: List[Tuple[int, Any]] = [
            (FAA, dict(compare_add=1)),
            (FAA, dict(compare_add=random.getrandbits(64))),     # wraps
            (FAA, dict(compare_add=MASK)),                      # -1
            (CAS, "hit"), (CAS, "miss"), (CAS, "hit"),
        ]
        for i, (op, kw) in enumerate(steps):
            U64.pack_into(req.buf, loff, 0x5A5A5A5A5A5A5A5A)
            if op == CAS:
                swap = random.getrandbits(64)
                compare = value if kw == "hit" else (value ^ 1)
                kw = dict(compare_add=compare, swap=swap)
                expect = swap if compare == value else value
                same = "equal" if compare == value else "different"
                name = f"compare-and-swap ({same})"
            else:
                expect = (value + kw["compare_add"]) & MASK
                name = f"fetch-and-add {kw['compare_add']:#x}"
            what = f"{name} {req.end_port} -> {resp.end_port}"
            req.qp.post_send(atomic(req, resp, op, roff, loff, i, **kw))
            wc = poll_cq(req.cq, 1, TIMEOUT, what)[0]
            check_wc(what, wc, ibv.IBV_WC_FETCH_ADD if op == FAA
                     else ibv.IBV_WC_COMP_SWAP)
            got_old = read_u64(req, loff)
            assert got_old == value, (f"{what}: returned {got_old:#018x}, "
                                      f"the counter held {value:#018x}")
            now = read_u64(resp, roff)
            assert now == expect, (f"{what}: counter is {now:#018x}, "
                                   f"expected {expect:#018x}")
            value = now
            checks += 1
        if rdma_setup.quick:
            break
    record_property("detail", f"{checks} atomics checked (old value "
                              f"returned, new value in memory)")


def _contention_pairs(rdma_pair: Callable[..., QPPair], n: int,
                      depth: int) -> List[QPPair]:
    first = rdma_pair(ibv.IBV_QPT_RC, size=8 * (depth + 2), depth=depth)
    pairs = [first]
    for _ in range(n - 1):
        pairs.append(rdma_pair(ibv.IBV_QPT_RC, size=8 * (depth + 2),
                               depth=depth, pd_b=first.b.pd))
    return pairs


def test_atomics_under_contention(rdma_setup: RdmaSetup,
                                  rdma_pair: Callable[..., QPPair],
                                  record_property: Record) -> None:
    """Several QPs hammer one counter: every fetch-and-add returns a
    distinct old value, the total is exact, and a compare-and-swap
    increment loop loses no update."""
    nqp = 2 if rdma_setup.quick else 4
    depth = 8
    rounds = 2 if rdma_setup.quick else 4
    pairs = _contention_pairs(rdma_pair, nqp, depth)
    target = pairs[0].b                 # the counter lives here
    roff = aligned(target, 0)
    start = random.getrandbits(40)
    U64.pack_into(target.buf, roff, start)
    reqs = [p.a for p in pairs]
    t0 = time.monotonic()
    # 1. fetch-and-add 1, depth outstanding on every QP at once.
    olds: List[int] = []
    for r in range(rounds):
        for q in reqs:
            base = aligned(q, 8)
            q.qp.post_send([atomic(q, target, FAA, roff, base + 8 * i, i,
                                   compare_add=1) for i in range(depth)])
        for k, q in enumerate(reqs):
            wcs = poll_cq(q.cq, depth, TIMEOUT, f"fetch-and-add on QP {k}")
            for wc in wcs:
                check_wc(f"fetch-and-add on QP {k}", wc, ibv.IBV_WC_FETCH_ADD)
            base = aligned(q, 8)
            olds.extend(read_u64(q, base + 8 * i) for i in range(depth))
    total = nqp * depth * rounds
    final = read_u64(target, roff)
    assert final == start + total, (
        f"{total} fetch-and-adds of 1 from {nqp} QPs moved the counter by "
        f"{final - start}")
    dup = len(olds) - len(set(olds))
    assert dup == 0 and sorted(olds) == list(range(start, start + total)), (
        f"fetch-and-add under contention returned {dup} duplicate old "
        f"values (not atomic); range {min(olds)}..{max(olds)}")
    # 2. compare-and-swap increments: each QP retries with the value it saw.
    per_qp = 4 if rdma_setup.quick else 8
    value = final
    guess = [value] * nqp
    done = [0] * nqp
    wins = []
    attempts = 0
    deadline = time.monotonic() + 4 * TIMEOUT
    while min(done) < per_qp:
        assert time.monotonic() < deadline, \
            "compare-and-swap loop made no progress"
        active = [k for k in range(nqp) if done[k] < per_qp]
        for k in active:
            q = reqs[k]
            q.qp.post_send(atomic(q, target, CAS, roff, aligned(q, 8),
                                  attempts, compare_add=guess[k],
                                  swap=guess[k] + 1))
            attempts += 1
        for k in active:
            q = reqs[k]
            wc = poll_cq(q.cq, 1, TIMEOUT, f"compare-and-swap on QP {k}")[0]
            check_wc(f"compare-and-swap on QP {k}", wc, ibv.IBV_WC_COMP_SWAP)
            old = read_u64(q, aligned(q, 8))
            if old == guess[k]:
                wins.append(old)
                done[k] += 1
                guess[k] = old + 1
            else:
                guess[k] = old
    final2 = read_u64(target, roff)
    assert final2 == value + len(wins), (
        f"{len(wins)} successful compare-and-swap increments moved the "
        f"counter by {final2 - value} (lost or phantom updates)")
    assert len(set(wins)) == len(wins), \
        "two compare-and-swaps succeeded on the same value (not atomic)"
    dt = time.monotonic() - t0
    record_property("detail", (
        f"{nqp} QPs: {total} fetch-and-adds, {len(wins)} CAS increments in "
        f"{attempts} attempts, counter exact ({dt:.2f} s)"))
