"""Every verb of RC, UC and UD at message sizes from 1 B to 1 MiB, with the
data verified byte for byte (and the bytes after it left untouched)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import random
import time

import pytest

import rdma.ibverbs as ibv
from rdma.IBA import mtu_to_bytes
from rdma.pytest_plugin import GRH_LEN, poll_cq
from rdma.validation import (GUARD, MAX_SIZE, POISON, TIMEOUT, check_data,
                             check_wc, fmt_size, iterations, message_sizes,
                             mib_per_s, random_bytes, require, volume,
                             wait_data)

if TYPE_CHECKING:
    from rdma.validation import Record
    from rdma.devices import EndPort
    from rdma.pytest_plugin import QPEnd, QPPair, RdmaSetup

pytestmark = require

QPT = {"RC": ibv.IBV_QPT_RC, "UC": ibv.IBV_QPT_UC, "UD": ibv.IBV_QPT_UD}
OPCODES = {"SEND": ibv.IBV_WR_SEND,
           "SEND_WITH_IMM": ibv.IBV_WR_SEND_WITH_IMM,
           "RDMA_WRITE": ibv.IBV_WR_RDMA_WRITE,
           "RDMA_WRITE_WITH_IMM": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
           "RDMA_READ": ibv.IBV_WR_RDMA_READ}
SEND_WC = {"SEND": ibv.IBV_WC_SEND, "SEND_WITH_IMM": ibv.IBV_WC_SEND,
           "RDMA_WRITE": ibv.IBV_WC_RDMA_WRITE,
           "RDMA_WRITE_WITH_IMM": ibv.IBV_WC_RDMA_WRITE,
           "RDMA_READ": ibv.IBV_WC_RDMA_READ}
CASES = [("RC", v) for v in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE",
                             "RDMA_WRITE_WITH_IMM", "RDMA_READ")] + \
        [("UC", v) for v in ("SEND", "SEND_WITH_IMM", "RDMA_WRITE",
                             "RDMA_WRITE_WITH_IMM")] + \
        [("UD", v) for v in ("SEND", "SEND_WITH_IMM")]


class Transfer:
    """Moves messages from one QPEnd to the other and checks them.

    Each end's buffer holds a source area at 0 and a target area at
    ``area`` (a GRH, the largest message and a guard)."""

    def __init__(self, pair: QPPair, transport: str, verb: str,
                 max_size: int):
        self.pair = pair
        self.transport = transport
        self.verb = verb
        self.ud = transport == "UD"
        self.area = GRH_LEN + max_size + GUARD

    def run(self, src: QPEnd, dst: QPEnd, size: int, what: str) -> None:
        verb, area = self.verb, self.area
        data = random_bytes(size)
        imm = random.getrandbits(32)
        grh = GRH_LEN if self.ud else 0
        # The target area: poison (after the GRH room) so stale or short
        # data shows.
        tgt, org = dst, src      # data always flows src -> dst
        tgt.buf[area:area + grh + size + GUARD] = \
            bytes([POISON]) * (grh + size + GUARD)
        org.buf[0:size] = data
        if verb == "RDMA_READ":
            # dst reads src: the reply lands in dst's target area.
            wr = dst.send_wr(ibv.IBV_WR_RDMA_READ, size, off=area,
                             remote=src, remote_off=0, wr_id=7)
            initiator = dst
        else:
            kw = {"imm_data": imm} if verb.endswith("WITH_IMM") else {}
            wr = src.send_wr(OPCODES[verb], size, off=0, remote=dst,
                             remote_off=area, wr_id=7, **kw)
            initiator = src
        consumes_recv = verb in ("SEND", "SEND_WITH_IMM",
                                 "RDMA_WRITE_WITH_IMM")
        if consumes_recv:
            # Receives of SENDs get the whole target area; a WRITE with
            # immediate consumes a receive but places no data in it.
            if verb.startswith("SEND"):
                dst.post_recv(grh + size + GUARD, off=area, wr_id=9)
            else:
                dst.post_recv(0, off=0, wr_id=9)
        initiator.qp.post_send(wr)
        wc = poll_cq(initiator.cq, 1, TIMEOUT, f"{what} (requester)")[0]
        check_wc(f"{what} (requester)", wc, SEND_WC[verb])
        assert wc.wr_id == 7, f"{what}: requester wr_id {wc.wr_id}, expected 7"
        if verb == "RDMA_READ":
            assert wc.byte_len in (0, size), \
                f"{what}: RDMA READ completion byte_len {wc.byte_len}"
        if consumes_recv:
            rwc = poll_cq(dst.cq, 1, TIMEOUT, f"{what} (responder receive)")[0]
            want_op = ibv.IBV_WC_RECV_RDMA_WITH_IMM \
                if verb == "RDMA_WRITE_WITH_IMM" else ibv.IBV_WC_RECV
            check_wc(f"{what} (responder receive)", rwc, want_op)
            assert rwc.wr_id == 9, f"{what}: receive wr_id {rwc.wr_id}"
            assert rwc.byte_len == grh + size, (
                f"{what}: receive byte_len {rwc.byte_len}, expected "
                f"{grh + size}" + (" (GRH 40 + payload)" if grh else ""))
            if verb.endswith("WITH_IMM"):
                assert rwc.wc_flags & ibv.IBV_WC_WITH_IMM, \
                    f"{what}: receive without IBV_WC_WITH_IMM"
                assert rwc.imm_data == imm, (
                    f"{what}: immediate data {rwc.imm_data:#010x}, sent "
                    f"{imm:#010x}")
            else:
                assert not rwc.wc_flags & ibv.IBV_WC_WITH_IMM, \
                    f"{what}: IBV_WC_WITH_IMM set on a plain SEND"
            if self.ud:
                assert rwc.src_qp == src.qp.qp_num, (
                    f"{what}: src_qp {rwc.src_qp:#x}, sender is "
                    f"{src.qp.qp_num:#x}")
                if src.end_port.link_layer == "Ethernet":
                    assert rwc.wc_flags & ibv.IBV_WC_GRH, \
                        f"{what}: RoCE UD receive without IBV_WC_GRH"
            assert rwc.qp_num == dst.qp.qp_num, \
                f"{what}: receive on QP {rwc.qp_num:#x}"
        start = area + grh
        view = memoryview(tgt.buf)
        if verb == "RDMA_WRITE":
            # Nothing completes at the target of a WRITE (and on UC the
            # requester's completion does not mean the data landed).
            wait_data(what, tgt.buf, start, data)
        check_data(what, view[start:start + size], data)
        check_data(f"{what}: the {GUARD} bytes after the message",
                   view[start + size:start + size + GUARD],
                   bytes([POISON]) * GUARD)
        view.release()


@pytest.mark.parametrize("transport,verb", CASES,
                         ids=[f"{t}-{v}" for t, v in CASES])
def test_transfer(rdma_setup: RdmaSetup, rdma_pair: Callable[..., QPPair],
                  rdma_end_port: EndPort, rdma_peer_end_port: EndPort,
                  record_property: Record,
                  transport: str, verb: str) -> None:
    """One verb on one transport, every size, both directions."""
    mtu = mtu_to_bytes(min(rdma_end_port.attr.active_mtu,
                           rdma_peer_end_port.attr.active_mtu))
    limit = min(MAX_SIZE, rdma_end_port.attr.max_msg_sz,
                rdma_peer_end_port.attr.max_msg_sz)
    if transport == "UD":
        limit = mtu
    sizes = message_sizes(limit, mtu, rdma_setup.quick)
    pair = rdma_pair(QPT[transport], size=2 * (GRH_LEN + limit + GUARD),
                     depth=8)
    t = Transfer(pair, transport, verb, limit)
    directions = [(pair.a, pair.b)]
    if not rdma_setup.quick:
        directions.append((pair.b, pair.a))
    n = iterations(rdma_setup)
    moved = 0
    t0 = time.monotonic()
    for src, dst in directions:
        arrow = (f"{src.end_port} QP {src.qp.qp_num:#x} -> {dst.end_port} "
                 f"QP {dst.qp.qp_num:#x}")
        for size in sizes:
            for i in range(n):
                what = f"{transport} {verb} of {fmt_size(size)} {arrow}"
                t.run(src, dst, size, what)
                moved += size
    dt = time.monotonic() - t0
    lim = f" (UD max = MTU {mtu})" if transport == "UD" else ""
    record_property("detail", (
        f"{fmt_size(sizes[0])}..{fmt_size(sizes[-1])}{lim}, {len(sizes)} "
        f"sizes x{n} x{len(directions)} directions, {volume(moved)} "
        f"verified, {mib_per_s(moved, dt)}"))


@pytest.mark.parametrize("transport", ["RC", "UC", "UD"])
def test_burst(rdma_setup: RdmaSetup, rdma_pair: Callable[..., QPPair],
               rdma_end_port: EndPort,
               record_property: Record,
               transport: str) -> None:
    """Many SENDs outstanding at once (one post_send of a list), arriving
    in order with their data."""
    mtu = mtu_to_bytes(rdma_end_port.attr.active_mtu)
    depth = 16
    size = min(mtu, 512) if transport == "UD" else 3000
    slot = GRH_LEN + size
    pair = rdma_pair(QPT[transport], size=2 * depth * slot, depth=depth)
    a, b = pair.a, pair.b
    rounds = 1 if rdma_setup.quick else 3
    for r in range(rounds):
        msgs = [random_bytes(1 + (i * 997 + r * 31) % size)
                for i in range(depth)]
        for i in range(depth):
            b.post_recv(slot, off=depth * slot + i * slot, wr_id=100 + i)
        wrs = []
        for i, m in enumerate(msgs):
            a.buf[i * slot:i * slot + len(m)] = m
            wrs.append(a.send_wr(ibv.IBV_WR_SEND, len(m), off=i * slot,
                                 wr_id=i))
        a.qp.post_send(wrs)
        swcs = poll_cq(a.cq, depth, TIMEOUT, f"{transport} burst sends")
        for i, wc in enumerate(swcs):
            check_wc(f"{transport} burst send {i}", wc, ibv.IBV_WC_SEND)
        rwcs = poll_cq(b.cq, depth, TIMEOUT, f"{transport} burst receives")
        grh = GRH_LEN if transport == "UD" else 0
        for i, wc in enumerate(rwcs):
            check_wc(f"{transport} burst receive {i}", wc, ibv.IBV_WC_RECV)
            assert wc.wr_id == 100 + i, (
                f"{transport} burst: receive {i} completed wr_id "
                f"{wc.wr_id}, expected {100 + i} (out of order)")
            off = depth * slot + i * slot + grh
            check_data(f"{transport} burst message {i}",
                       memoryview(b.buf)[off:off + len(msgs[i])], msgs[i])
            assert wc.byte_len == grh + len(msgs[i])
    record_property("detail", f"{rounds} x {depth} SENDs of up to "
                              f"{fmt_size(size)} in one post")
