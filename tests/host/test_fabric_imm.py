"""RDMA WRITE with immediate data on the software fabric, between two real
processes: its data goes by the same one-sided carrier as a plain WRITE's
(mapped memory, or cross-memory attach for the target's own memory), its
immediate by a request the target executes after the data is in place
(F_PLACED), so that the receive completion the target sees has the whole
message in its memory, as on a NIC.  Over TCP (no one-sided carrier) it
stays an active message.

The peer program is test_fabric_onesided.py's.
"""
import pytest

from test_fabric_onesided import (ADOPT, SHM, SIZE, TCP, _ibv, pair, pat,
                                  post_ok, warm)

__all__ = ["pair"]              # (the fixture, used by name)

CMA0 = dict(SHM, RDMA_UCX_CMA_MIN="0")


def write_imm(a, b, mrs, name, off, length, imm, wr_id):
    """A WRITE_WITH_IMM of *length* bytes of a's "local" MR at offset 0 to
    b's MR *name* at *off*; a receive waiting for it on b."""
    ibv = _ibv()
    addr, rkey = mrs[name]
    assert b("recv", wr_id=wr_id, mr="mr", len=8, off=SIZE - 8) == \
        {"ok": True}
    return {"opcode": ibv.IBV_WR_RDMA_WRITE_WITH_IMM, "raddr": addr + off,
            "rkey": rkey, "off": 0, "len": length, "imm": imm,
            "wr_id": wr_id}


def check_landed(a, b, name, cases, stats_key):
    """Post the WRITE_WITH_IMMs of *cases* ((off, length, imm, wr_id,
    seed), their data already in a's "local" MR at the offset each
    posts from) one by one; each receive completion is polled on b, and
    at that moment the whole message must be in b's memory.  Returns
    how much a's *stats_key* counter and b's requests executed grew."""
    ibv = _ibv()
    sa0, sb0 = a("stats"), b("stats")
    for w, (off, length, imm, wr_id, seed) in cases:
        a("fill", mr="local", off=0, hex=pat(length, seed).hex())
        post_ok(a, w)
        got = b("poll", n=1, recv=1)["wcs"][0]
        assert got == [wr_id, 0, ibv.IBV_WC_RECV_RDMA_WITH_IMM, length, imm]
        here = bytes.fromhex(b("dump", mr=name, off=off, len=length)["hex"])
        assert here == pat(length, seed), f"{length} bytes: not all there"
        sent = a("poll", n=1)["wcs"][0]
        assert sent[:3] == [wr_id, 0, ibv.IBV_WC_RDMA_WRITE], sent
    sa1, sb1 = a("stats"), b("stats")
    return sa1[stats_key] - sa0[stats_key], sb1["am_req"] - sb0["am_req"]


def _cases(a, b, mrs, name, sizes):
    out = []
    for i, n in enumerate(sizes):
        off = (i * 4099) % 64 if name == "user" else (i * 997) % (SIZE - n)
        out.append((write_imm(a, b, mrs, name, off, n, 0x1000 + i, 10 + i),
                    (off, n, 0x1000 + i, 10 + i, 40 + i)))
    return out


SIZES_MAPPED = [1, 100, 4095, 4096, 65536 - 1024]


def test_write_imm_data_by_the_mapped_carrier(pair):
    """Into alloc_mr memory (mapped by UCX): the data is copied one-sided
    (the initiator's fast_write count grows by one per WR), the target
    executes one request per WR (the immediate), and the data is whole
    when the receive completes, from 1 byte to 63 KiB."""
    a, b, mrs = pair
    warm(a, mrs)
    fast, reqs = check_landed(a, b, "mr", _cases(a, b, mrs, "mr",
                                                 SIZES_MAPPED), "fast_write")
    assert fast == len(SIZES_MAPPED)
    assert reqs == len(SIZES_MAPPED)


@pytest.mark.parametrize("pair", [CMA0], indirect=True,
                         ids=["RDMA_UCX_CMA_MIN=0"])
def test_write_imm_data_by_cross_memory_attach(pair):
    """Into the target's own memory (an MR over a bytearray): the data
    goes by process_vm_writev (cma_write grows by one per WR), the
    immediate after it."""
    a, b, mrs = pair
    sizes = [1, 1000, 4000]
    cma, reqs = check_landed(a, b, "user", _cases(a, b, mrs, "user", sizes),
                             "cma_write")
    assert cma == len(sizes) and reqs == len(sizes)


@pytest.mark.parametrize("pair", [ADOPT], indirect=True, ids=["adopt"])
def test_write_imm_data_into_adopted_memory(pair):
    """Into the target's adopted memory: mapped, as alloc_mr's."""
    a, b, mrs = pair
    warm(a, mrs, "adopt")
    sizes = [8, 30000]
    fast, reqs = check_landed(a, b, "adopt",
                              _cases(a, b, mrs, "adopt", sizes),
                              "fast_write")
    assert fast == len(sizes) and reqs == len(sizes)


@pytest.mark.parametrize("pair", [TCP], indirect=True, ids=["tcp"])
def test_write_imm_over_tcp_stays_an_active_message(pair):
    """Over TCP there is no one-sided carrier: the data travels with the
    request, and lands before the receive completes all the same."""
    a, b, mrs = pair
    sizes = [1, 4096, 65536 - 1024]
    fast, reqs = check_landed(a, b, "mr", _cases(a, b, mrs, "mr", sizes),
                              "fast_write")
    assert fast == 0 and reqs >= len(sizes)


def test_write_imm_batch_keeps_rc_order(pair):
    """A batch mixing WRITE_WITH_IMMs and plain WRITEs to one target:
    receives complete in posting order with their immediates, every
    byte lands, and a plain WRITE posted after an immediate's request
    does not overtake it (it waits for it: RC order)."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    a("fill", mr="local", off=0, hex=pat(40000, 7).hex())
    wrs = []
    for i in range(4):
        assert b("recv", wr_id=20 + i, mr="mr", len=8, off=SIZE - 8) == \
            {"ok": True}
        wrs.append({"opcode": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                    "raddr": addr + i * 10000, "rkey": rkey,
                    "off": i * 10000, "len": 9000, "imm": 0x77 + i,
                    "wr_id": 20 + i})
        wrs.append({"opcode": ibv.IBV_WR_RDMA_WRITE,
                    "raddr": addr + i * 10000 + 9000, "rkey": rkey,
                    "off": i * 10000 + 9000, "len": 1000, "wr_id": 30 + i})
    post_ok(a, *wrs)
    got = b("poll", n=4, recv=1)["wcs"]
    assert [(w[0], w[1], w[3], w[4]) for w in got] == \
        [(20 + i, 0, 9000, 0x77 + i) for i in range(4)]
    sent = a("poll", n=8)["wcs"]
    assert [w[0] for w in sent] == [x for i in range(4)
                                    for x in (20 + i, 30 + i)]
    assert all(w[1] == 0 for w in sent)
    assert bytes.fromhex(b("dump", mr="mr", off=0, len=40000)["hex"]) == \
        pat(40000, 7)


def test_write_imm_bad_rkey_fails_as_before(pair):
    """A WRITE_WITH_IMM the one-sided checks refuse (out of the MR's
    bounds) takes the responder's path: REM_ACCESS_ERR, no receive
    consumed, nothing written."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    b("fill", mr="mr", off=SIZE - 200, hex=bytes(100).hex())
    a("fill", mr="local", off=0, hex=pat(300, 3).hex())
    assert b("recv", wr_id=5, mr="mr", len=8, off=0) == {"ok": True}
    post_ok(a, {"opcode": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                "raddr": addr + SIZE - 200, "rkey": rkey, "off": 0,
                "len": 300, "imm": 9, "wr_id": 6})
    assert a("poll", n=1)["wcs"][0][:2] == [6, ibv.IBV_WC_REM_ACCESS_ERR]
    assert b("dump", mr="mr", off=SIZE - 200, len=100)["hex"] == \
        bytes(100).hex()


def test_write_imm_pipelined_all_go_one_sided(pair):
    """WRITE_WITH_IMMs posted back to back (each one's immediate still
    outstanding when the next is posted, as a virtual QP's fragments
    are): every one's data goes one-sided; the receives complete in
    order, each message whole."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    n, size = 8, 6000
    a("fill", mr="local", off=0, hex=pat(n * size, 11).hex())
    for i in range(n):
        assert b("recv", wr_id=40 + i, mr="mr", len=8, off=SIZE - 8) == \
            {"ok": True}
    sa0 = a("stats")
    post_ok(a, *[{"opcode": ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                  "raddr": addr + i * size, "rkey": rkey, "off": i * size,
                  "len": size, "imm": 0x500 + i, "wr_id": 40 + i}
                 for i in range(n)])
    assert a("stats")["fast_write"] - sa0["fast_write"] == n
    got = b("poll", n=n, recv=1)["wcs"]
    assert [(w[0], w[1], w[3], w[4]) for w in got] == \
        [(40 + i, 0, size, 0x500 + i) for i in range(n)]
    assert bytes.fromhex(b("dump", mr="mr", off=0, len=n * size)["hex"]) \
        == pat(n * size, 11)
    assert [w[:2] for w in a("poll", n=n)["wcs"]] == \
        [[40 + i, 0] for i in range(n)]
