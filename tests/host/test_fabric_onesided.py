"""The software fabric's one-sided fast path, between two real processes.

An RC RDMA WRITE / READ / atomic from a same-host peer (shared memory) into
memory of ``PD.alloc_mr`` executes directly in the target's memory (UCX
maps it): the target's progress thread does nothing.  These tests prove
the fast path is taken (each node's statistics in its key page) and that
it keeps a NIC's rules: bounds, access flags, a bad or stale rkey, a
deregistered MR, a destroyed QP and a killed peer end in the same error
completions as on the active-message path, and RC order holds when
one-sided and active-message WRs mix on one QP.

Run as a program, this module is the peer (a command loop on JSON lines).
"""
import json
import mmap
import os
import signal
import struct
import sys
import time
from pathlib import Path

import pytest

from fabric_helpers import (PeerProcess, handshake, key_page, mapping,
                            node_stats)

HERE = Path(__file__).resolve().parent
TIMEOUT = 30
SHM = {"UCX_TLS": "shm,self", "UCX_WARN_UNUSED_ENV_VARS": "n"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo",
       "UCX_WARN_UNUSED_ENV_VARS": "n"}
ADOPT = {**SHM, "RDMA_UCX_ADOPT": "1"}
SIZE = 1 << 16


# --------------------------------------------------------------------------
# the peer program

def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _unaligned(n):
    """n bytes of a bytearray that do not start a page: memory of the
    program's own that is not adopted (a bytearray's own bytes may start a
    page, by chance of the heap's layout)."""
    import ctypes
    b = bytearray(n + 64)
    start = ctypes.addressof(ctypes.c_char.from_buffer(b))
    off = 64 if start % mmap.PAGESIZE == 0 else 0
    return memoryview(b)[off:off + n]


def peer_main():
    import rdma
    import rdma.ibverbs as ibv
    import fabric_helpers as fh
    ep = rdma.get_end_port(provider="ucx")
    ctx = rdma.get_verbs(ep)
    pd = ctx.pd()
    scq, rcq = pd.cq(1024), pd.cq(256)
    qp = pd.qp(ibv.IBV_QPT_RC, 256, scq, 64, rcq, sq_sig_all=0)
    mrs = {"mr": pd.alloc_mr(SIZE, fh.MR_ALL),
           "ro": pd.alloc_mr(4096, ibv.IBV_ACCESS_LOCAL_WRITE
                             | ibv.IBV_ACCESS_REMOTE_READ),
           "local": pd.alloc_mr(SIZE, ibv.IBV_ACCESS_LOCAL_WRITE),
           "user": pd.mr(_unaligned(4096), fh.MR_ALL)}
    # page-aligned private anonymous memory of the program's own: adopted
    # into UCX memory by reg_mr with RDMA_UCX_ADOPT=1 (prototype)
    adopt_buf = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE
                          | mmap.MAP_ANONYMOUS)
    adopt_buf[0:SIZE] = pat(SIZE, 9)
    mrs["adopt"] = pd.mr(adopt_buf, fh.MR_ALL)
    # the program's own memory that is not adopted (it does not start a
    # page), mapped by the program itself: "remap" unmaps it under its MR
    # and maps other memory there (tests/host/test_fabric_mr_safety.py)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    rw, anon = (mmap.PROT_READ | mmap.PROT_WRITE,
                mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    own_base = libc.mmap(None, 3 * 4096, rw, anon, -1, 0)
    mrs["own"] = pd.mr((ctypes.c_char * (2 * 4096)).from_address(
        own_base + 64), fh.MR_ALL)
    views = {k: m.buf for k, m in mrs.items() if k not in ("adopt", "own")}
    views["adopt"] = memoryview(adopt_buf)
    _emit({"gid": str(ctx.end_port.gids[0]), "qpn": qp.qp_num,
           "pid": os.getpid(),
           "mrs": {k: [m.addr, m.rkey] for k, m in mrs.items()}})
    peer = json.loads(sys.stdin.readline())
    # (RDMA_TEST_QP_TIMEOUT="timeout,retry_cnt" for a test that must not
    # time out on a loaded machine)
    t, r = map(int, os.environ.get("RDMA_TEST_QP_TIMEOUT", "12,3").split(","))

    def connect(peer):
        fh.connect_to_peer(qp, peer, timeout=t, retry_cnt=r)

    def build(w):
        kw = {}
        if w.get("rkey") is not None:
            kw.update(remote_addr=w["raddr"], rkey=w["rkey"])
        if "add" in w:
            kw.update(compare_add=w["add"], swap=w.get("swap", 0))
        if "imm" in w:
            kw.update(imm_data=w["imm"])
        local = mrs["local"]
        # "raw": an s/g entry MR.sge() would refuse (out of bounds)
        sg = ibv.sge(addr=local.addr + w["off"], length=w["len"],
                     lkey=local.lkey) if w.get("raw") else \
            local.sge(length=w["len"], off=w["off"])
        return ibv.send_wr(
            wr_id=w.get("wr_id", 0), opcode=w["opcode"], sg_list=sg,
            send_flags=ibv.IBV_SEND_SIGNALED if w.get("sig", 1) else 0,
            **kw)

    connect(peer)
    _emit({"ready": True})
    for line in sys.stdin:
        c = json.loads(line)
        op = c["op"]
        if op == "post":
            wrs = [build(w) for w in c["wrs"]]
            try:
                qp.post_send(wrs)
                _emit({"ok": True})
            except Exception as e:              # noqa: BLE001
                _emit({"ok": False, "err": repr(e)})
        elif op == "poll":
            cq = rcq if c.get("recv") else scq
            try:
                wcs = fh.poll_cq(cq, c["n"], timeout=c.get("timeout", 10))
            except Exception as e:              # noqa: BLE001
                _emit({"error": repr(e)})
                continue
            _emit({"wcs": [[w.wr_id, w.status, w.opcode, w.byte_len,
                            w.imm_data] for w in wcs]})
        elif op == "quiet":
            t = time.monotonic() + c.get("wait", 0.3)
            n = 0
            while time.monotonic() < t:
                n += len((rcq if c.get("recv") else scq).poll())
            _emit({"n": n})
        elif op == "recv":
            qp.post_recv(ibv.recv_wr(wr_id=c.get("wr_id", 0),
                                     sg_list=mrs[c.get("mr", "mr")].sge(
                                         length=c["len"], off=c["off"])))
            _emit({"ok": True})
        elif op == "fill":
            v = views[c["mr"]]
            data = bytes.fromhex(c["hex"])
            v[c["off"]:c["off"] + len(data)] = data
            _emit({"ok": True})
        elif op == "dump":
            v = views[c["mr"]]
            _emit({"hex": bytes(v[c["off"]:c["off"] + c["len"]]).hex()})
        elif op == "stats":
            _emit(node_stats())
        elif op == "repeat":
            # the WR c["wr"] again and again for c["secs"] seconds, one at
            # a time, the first 8 bytes of its local buffer counting up
            # (WRITE); stops at the first error completion
            w = build(c["wr"])
            v = views["local"]
            off = c["wr"]["off"]
            end = time.monotonic() + c["secs"]
            n, bad = 0, None
            while time.monotonic() < end:
                v[off:off + 8] = struct.pack("<Q", n + 1)
                qp.post_send(w)
                try:
                    wc = fh.poll_cq(scq, 1, timeout=c.get("timeout", 10))[0]
                except Exception as e:          # noqa: BLE001
                    bad = repr(e)
                    break
                if wc.status != ibv.IBV_WC_SUCCESS:
                    bad = int(wc.status)
                    break
                n += 1
            _emit({"n": n, "bad": bad, "last": n,
                   "local": bytes(v[off:off + 8]).hex()})
        elif op == "remap":             # other memory in place of "own"
            libc.munmap(own_base, 3 * 4096)
            p = libc.mmap(own_base, 3 * 4096, rw, anon, -1, 0)
            ctypes.memset(p, ord("o"), 3 * 4096)
            _emit({"placed": p == own_base, "base": own_base})
        elif op == "peek":              # bytes at any address
            _emit({"hex": ctypes.string_at(c["addr"], c["len"]).hex()})
        elif op == "mapping":           # the /proc/self/maps line of addr
            _emit({"line": mapping(c["addr"])})
        elif op == "info":
            _emit({"gid": str(ctx.end_port.gids[0]), "qpn": qp.qp_num})
        elif op == "reconnect":         # RESET, then to this new peer
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RESET))
            connect(c)
            _emit({"ok": True})
        elif op == "dereg":
            mrs[c["mr"]].close()               # the view stays usable
            _emit({"ok": True})
        elif op == "destroy_qp":
            qp.close()
            _emit({"ok": True})
        elif op == "access":            # RTS -> RTS, new qp_access_flags
            qp.modify(ibv.qp_attr(qp_state=ibv.IBV_QPS_RTS,
                                  qp_access_flags=c["flags"]))
            _emit({"ok": True})
        elif op == "state":
            _emit({"state": fh.qp_state(qp)})
        elif op == "stream":
            # fast-path WRITEs until an error completion; report how long
            # after the last success it came
            sb = ibv.SendBatch([ibv.send_wr(
                wr_id=i, opcode=ibv.IBV_WR_RDMA_WRITE,
                sg_list=mrs["local"].sge(length=64),
                remote_addr=c["raddr"], rkey=c["rkey"],
                send_flags=ibv.IBV_SEND_SIGNALED if i == 15 else 0)
                for i in range(16)])
            arr = ibv.WCArray(16)
            ok, last_ok, told = 0, time.monotonic(), False
            while True:
                try:
                    qp.post_send(sb)
                except Exception:               # noqa: BLE001
                    pass
                k = scq.poll_into(arr)
                bad = [arr[i] for i in range(k)
                       if arr[i].status != ibv.IBV_WC_SUCCESS]
                if bad:
                    rest = [w.status for w in scq.poll(256)]
                    _emit({"status": bad[0].status, "ok": ok,
                           "after": time.monotonic() - last_ok,
                           "rest": sorted(set(rest)),
                           "state": fh.qp_state(qp)})
                    break
                if k:
                    ok += k * 16
                    last_ok = time.monotonic()
                if ok >= 20000 and not told:
                    told = True
                    _emit({"running": ok, "stats": node_stats()})
        elif op == "pingpong":
            # n SEND round trips of an 8-byte counter (ping starts), each
            # side polling in C, replying at once, then reposting
            n, ping = c["n"], c["ping"]
            rv, sv = views["mr"], views["local"]
            rwr = ibv.recv_wr(wr_id=1, sg_list=mrs["mr"].sge(length=8))
            swr = ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_SEND,
                              sg_list=mrs["local"].sge(length=8),
                              send_flags=ibv.IBV_SEND_SIGNALED)
            qp.post_recv([rwr, rwr])
            _emit({"ready": True})
            sys.stdin.readline()
            arr, sarr = ibv.WCArray(4), ibv.WCArray(64)
            bad, wrong, sent, done = [], 0, 0, 0
            if ping:
                sv[0:8] = struct.pack("<Q", 0)
                qp.post_send(swr)
                sent += 1
            for i in range(n):
                if rcq.poll_into(arr, 1, min=1, timeout=10) != 1:
                    bad.append("recv timeout")
                    break
                if arr[0].status != ibv.IBV_WC_SUCCESS:
                    bad.append(arr[0].status)
                    break
                v = struct.unpack("<Q", rv[0:8])[0]
                wrong += v != (2 * i + 1 if ping else 2 * i)
                if not ping or i < n - 1:
                    sv[0:8] = struct.pack("<Q", v + 1)
                    qp.post_send(swr)
                    sent += 1
                qp.post_recv(rwr)
                k = scq.poll_into(sarr)
                bad += [sarr[j].status for j in range(k)
                        if sarr[j].status != ibv.IBV_WC_SUCCESS]
                done += k
            while done < sent and not bad:
                k = scq.poll_into(sarr, min=1, timeout=10)
                if k == 0:
                    bad.append("send completion timeout")
                done += k
            _emit({"bad": bad, "wrong": wrong, "sent": sent, "done": done})
        elif op == "poll_close_exit":
            # take one receive (spinning in C), then close everything and
            # end the process at once, as a program that is done would
            arr1 = ibv.WCArray(1)
            n = rcq.poll_into(arr1, 1, min=1, timeout=10)
            wc1 = [arr1[0].wr_id, arr1[0].status, arr1[0].opcode,
                   arr1[0].byte_len] if n else []
            qp.close()
            ctx.close()
            _emit({"n": n, "wc": wc1})
            os._exit(0)
        elif op == "poll_exit":
            # take one receive, then end the process without closing
            # anything (a script that is done and just returns)
            import ctypes
            c_exit = ctypes.CDLL(None).exit
            arr1 = ibv.WCArray(1)
            n = rcq.poll_into(arr1, 1, min=1, timeout=10)
            _emit({"n": n, "wc": [arr1[0].wr_id, arr1[0].status] if n
                   else []})
            if c["how"] == "c_exit":
                # exit(3) at once: no Python finalization (nothing is
                # deallocated) and sooner than the progress thread's next
                # look (~1 ms)
                c_exit(0)
            sys.exit(0)
        elif op == "exit":
            break
    ctx.close()
    return 0


# --------------------------------------------------------------------------
# the test side

def _yama_scope() -> int:
    """Yama's ptrace_scope here (0 without Yama)."""
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


class Peer(PeerProcess):
    """This module run as the peer program."""

    def __init__(self, env):
        if _yama_scope() == 1 and "RDMA_UCX_CMA" not in env:
            # these tests reach the target's own memory by cross-memory
            # attach, which Yama's scope 1 keeps closed unless asked for
            env = {**env, "RDMA_UCX_CMA": "1"}
        super().__init__(__file__, "peer", env=env, timeout=TIMEOUT)
        self.env = env

    def __call__(self, op, **kw):
        self.send({"op": op, **kw})
        return self.read()

    def close(self):
        super().close({"op": "exit"})


@pytest.fixture
def pair(request):
    """(initiator a, target b, b's MRs) connected over RC."""
    env = getattr(request, "param", SHM)
    b, a = Peer(env), Peer(env)
    try:
        ia, ib = handshake(a, b)
        yield a, b, ib["mrs"]
    finally:
        a.close()
        b.close()


def _ibv():
    import rdma.ibverbs as ibv
    return ibv


def wr(opcode, raddr=None, rkey=None, off=0, length=8, **kw):
    return {"opcode": opcode, "raddr": raddr, "rkey": rkey, "off": off,
            "len": length, **kw}


def post_ok(a, *wrs):
    assert a("post", wrs=list(wrs)) == {"ok": True}


def pat(n, seed):
    import random
    r = random.Random(seed)
    return bytes(r.randrange(1, 256) for _ in range(n))


def warm(a, mrs, name="mr"):
    """One WRITE (or READ) to an MR: the initiator maps the MR (unpacks
    its rkey) when it first posts a WR to it."""
    ibv = _ibv()
    addr, rkey = mrs[name]
    op = ibv.IBV_WR_RDMA_READ if name == "ro" else ibv.IBV_WR_RDMA_WRITE
    post_ok(a, wr(op, addr, rkey, off=SIZE - 64, length=8, wr_id=77))
    assert a("poll", n=1)["wcs"][0][1] == ibv.IBV_WC_SUCCESS


def test_fast_path_bytes_and_no_target_work(pair):
    """WRITE, READ, FETCH_AND_ADD and CMP_AND_SWP go one-sided: right
    bytes, right completions, and the target executed no request."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    sa0, sb0 = a("stats"), b("stats")
    data = pat(3000, 1)
    a("fill", mr="local", off=0, hex=data.hex())
    b("fill", mr="mr", off=8192, hex=pat(4096, 2).hex())
    b("fill", mr="mr", off=16384, hex=struct.pack("<QQ", 40, 7).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 100, rkey, 0, 3000, wr_id=1),
            wr(ibv.IBV_WR_RDMA_READ, addr + 8192, rkey, 4096, 4096, wr_id=2),
            wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, addr + 16384, rkey, 12288, 8,
               add=2, wr_id=3),
            wr(ibv.IBV_WR_ATOMIC_CMP_AND_SWP, addr + 16392, rkey, 12296, 8,
               add=7, swap=99, wr_id=4),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + 4000, rkey, 0, 8, sig=0,
               wr_id=5))
    wcs = a("poll", n=4)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [(i, 0) for i in (1, 2, 3, 4)]
    assert [w[2] for w in wcs] == [ibv.IBV_WC_RDMA_WRITE,
                                   ibv.IBV_WC_RDMA_READ,
                                   ibv.IBV_WC_FETCH_ADD, ibv.IBV_WC_COMP_SWAP]
    assert wcs[1][3] == 4096 and wcs[2][3] == 8 and wcs[3][3] == 8
    assert a("quiet")["n"] == 0                   # the unsignaled WRITE
    got = bytes.fromhex(b("dump", mr="mr", off=100, len=3000)["hex"])
    assert got == data
    assert b("dump", mr="mr", off=4000, len=8)["hex"] == data[:8].hex()
    assert bytes.fromhex(a("dump", mr="local", off=4096, len=4096)["hex"]) \
        == pat(4096, 2)
    assert struct.unpack("<QQ", bytes.fromhex(
        b("dump", mr="mr", off=16384, len=16)["hex"])) == (42, 99)
    assert struct.unpack("<QQ", bytes.fromhex(
        a("dump", mr="local", off=12288, len=16)["hex"])) == (40, 7)
    sa1, sb1 = a("stats"), b("stats")
    assert sa1["fast_write"] - sa0["fast_write"] == 2
    assert sa1["fast_read"] - sa0["fast_read"] == 1
    assert sa1["fast_atomic"] - sa0["fast_atomic"] == 2
    assert sb1["am_req"] == sb0["am_req"], (sb0, sb1)


@pytest.mark.parametrize("pair", [dict(SHM, RDMA_UCX_CMA_MIN="0")],
                         indirect=True, ids=["RDMA_UCX_CMA_MIN=0"])
def test_user_buffer_goes_by_cross_memory_attach(pair):
    """An MR over a bytearray is the target's own memory, not UCX's: a
    same-host initiator WRITEs and READs it with process_vm_writev/readv
    (the target executes nothing; RDMA_UCX_CMA_MIN=0: small ones too);
    atomics on it still go to the target (active message), since they
    must be atomic with its own."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    data = pat(1000, 5)
    a("fill", mr="local", off=0, hex=data.hex())
    b("fill", mr="user", off=2048, hex=pat(512, 6).hex())
    b("fill", mr="user", off=3072, hex=struct.pack("<Q", 40).hex())
    sa0, sb0 = a("stats"), b("stats")
    assert sb0["cma_open"] == 1
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 64, rkey, 0, 1000, wr_id=1),
            wr(ibv.IBV_WR_RDMA_READ, addr + 2048, rkey, 4096, 512, wr_id=2))
    wcs = a("poll", n=2)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [(1, 0), (2, 0)]
    assert wcs[1][3] == 512
    assert bytes.fromhex(b("dump", mr="user", off=64, len=1000)["hex"]) \
        == data
    assert bytes.fromhex(a("dump", mr="local", off=4096, len=512)["hex"]) \
        == pat(512, 6)
    sa1, sb1 = a("stats"), b("stats")
    assert sa1["cma_write"] - sa0["cma_write"] == 1
    assert sa1["cma_read"] - sa0["cma_read"] == 1
    assert sb1["am_req"] == sb0["am_req"], (sb0, sb1)
    assert sa1["fast_write"] == sa0["fast_write"]
    post_ok(a, wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, addr + 3072, rkey, 8192,
                  8, add=2, wr_id=3))
    assert a("poll", n=1)["wcs"][0][:2] == [3, 0]
    assert struct.unpack("<Q", bytes.fromhex(
        b("dump", mr="user", off=3072, len=8)["hex"]))[0] == 42
    assert b("stats")["am_req"] > sb1["am_req"]


@pytest.mark.parametrize("pair", [dict(SHM, RDMA_UCX_CMA_MIN="2048")],
                         indirect=True, ids=["RDMA_UCX_CMA_MIN=2048"])
def test_cma_min_keeps_small_ones_on_the_ring(pair):
    """RDMA_UCX_CMA_MIN: a WRITE shorter than it goes to the target (active
    message), one as long goes by cross-memory attach."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    a("fill", mr="local", off=0, hex=pat(2048, 8).hex())
    sa0, sb0 = a("stats"), b("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 2047, wr_id=1))
    assert a("poll", n=1)["wcs"][0][:2] == [1, 0]
    sa1, sb1 = a("stats"), b("stats")
    assert sb1["am_req"] > sb0["am_req"] and sa1["cma_write"] == \
        sa0["cma_write"]
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 2048, wr_id=2))
    assert a("poll", n=1)["wcs"][0][:2] == [2, 0]
    assert a("stats")["cma_write"] == sa1["cma_write"] + 1
    assert b("stats")["am_req"] == sb1["am_req"]
    assert bytes.fromhex(b("dump", mr="user", off=0, len=2048)["hex"]) \
        == pat(2048, 8)


def test_cma_min_default(pair):
    """By default a WRITE shorter than 4096 bytes (65536 for an initiator
    with CAP_SYS_PTRACE, such as root: its copies cost two capset calls
    more) goes to the target through its request ring, which is faster
    for it while the target runs; one of that size goes by cross-memory
    attach."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    uaddr, urkey = mrs["user"]
    limit = 65536 if _has_cap_sys_ptrace() else 4096
    sa0, sb0 = a("stats"), b("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, uaddr, urkey, 0, 4000, wr_id=1))
    assert a("poll", n=1)["wcs"][0][:2] == [1, 0]
    assert b("stats")["am_req"] > sb0["am_req"]
    assert a("stats")["cma_write"] == sa0["cma_write"]
    if limit > 4096:
        return      # (the user MR is 4096 bytes: 65536 cannot go there)
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, uaddr, urkey, 0, 4096, wr_id=2))
    assert a("poll", n=1)["wcs"][0][:2] == [2, 0]
    assert a("stats")["cma_write"] == sa0["cma_write"] + 1


def _has_cap_sys_ptrace():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 19))
    return False


@pytest.mark.parametrize("pair", [dict(SHM, RDMA_UCX_CMA="0")],
                         indirect=True, ids=["RDMA_UCX_CMA=0"])
def test_user_buffer_keeps_active_messages_without_cma(pair):
    """With RDMA_UCX_CMA=0 the target's own memory is not offered to
    cross-memory attach: the target executes the WRITE (active message),
    with the same result."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["user"]
    assert b("stats")["cma_open"] == 0
    a("fill", mr="local", off=0, hex=pat(64, 5).hex())
    for _ in range(3):
        sb0 = b("stats")
        post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 64, rkey, 0, 64))
        assert a("poll", n=1)["wcs"][0][1] == 0
        assert b("stats")["am_req"] > sb0["am_req"]
    assert bytes.fromhex(b("dump", mr="user", off=64, len=64)["hex"]) \
        == pat(64, 5)
    assert a("stats")["fast_write"] == 0 and a("stats")["cma_write"] == 0


@pytest.mark.parametrize("pair", [{**SHM, "RDMA_UCX_ADOPT": "0"}],
                         indirect=True, ids=["off"])
def test_user_memory_not_adopted_when_off(pair):
    """With RDMA_UCX_ADOPT=0 (or unset, the default) the program's own
    page-aligned memory stays its private pages and takes the
    active-message path."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["adopt"]
    assert b("stats")["adopted"] == 0
    assert " rw-p " in b("mapping", addr=addr)["line"]
    warm(a, mrs, "adopt")
    sb0 = b("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 64, rkey, 0, 64))
    assert a("poll", n=1)["wcs"][0][1] == 0
    assert b("stats")["am_req"] > sb0["am_req"]
    assert a("stats")["fast_write"] == 0


@pytest.mark.parametrize("pair", [ADOPT], indirect=True, ids=["adopt"])
def test_adopted_user_memory_takes_fast_path(pair):
    """An MR over the program's own page-aligned private memory (an mmap,
    not PD.alloc_mr) is adopted (by default): its pages become a UCX
    shared segment at the same address, with the same contents, and
    WRITE, READ and atomics to it go one-sided (the target executes no
    request).  After dereg_mr the pages are private again, hold what the
    initiator wrote and the rest of the old contents, and a WRITE to the
    old rkey fails."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["adopt"]
    old = pat(SIZE, 9)
    assert b("stats")["adopted"] == 1
    assert "/SYSV" in b("mapping", addr=addr)["line"]
    # the contents survived the adoption
    assert bytes.fromhex(b("dump", mr="adopt", off=0, len=4096)["hex"]) \
        == old[:4096]
    warm(a, mrs, "adopt")
    sa0, sb0 = a("stats"), b("stats")
    data = pat(3000, 1)
    a("fill", mr="local", off=0, hex=data.hex())
    b("fill", mr="adopt", off=16384, hex=struct.pack("<Q", 40).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 100, rkey, 0, 3000, wr_id=1),
            wr(ibv.IBV_WR_RDMA_READ, addr + 8192, rkey, 4096, 4096, wr_id=2),
            wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, addr + 16384, rkey, 12288, 8,
               add=2, wr_id=3))
    wcs = a("poll", n=3)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [(1, 0), (2, 0), (3, 0)]
    assert bytes.fromhex(a("dump", mr="local", off=4096, len=4096)["hex"]) \
        == old[8192:12288]
    assert struct.unpack("<Q", bytes.fromhex(
        a("dump", mr="local", off=12288, len=8)["hex"]))[0] == 40
    sa1, sb1 = a("stats"), b("stats")
    assert sa1["fast_write"] - sa0["fast_write"] == 1
    assert sa1["fast_read"] - sa0["fast_read"] == 1
    assert sa1["fast_atomic"] - sa0["fast_atomic"] == 1
    assert sb1["am_req"] == sb0["am_req"], (sb0, sb1)
    # the target sees the bytes at the user's address, before and after
    # dereg_mr (which gives the pages back)
    assert bytes.fromhex(b("dump", mr="adopt", off=100, len=3000)["hex"]) \
        == data
    assert b("dereg", mr="adopt") == {"ok": True}
    line = b("mapping", addr=addr)["line"]
    assert " rw-p " in line and "/SYSV" not in line, line
    got = bytes.fromhex(b("dump", mr="adopt", off=0, len=SIZE)["hex"])
    want = bytearray(old)
    want[100:3100] = data
    want[16384:16392] = struct.pack("<Q", 42)
    want[0:8] = bytes.fromhex(                  # warm(): local SIZE-64
        a("dump", mr="local", off=SIZE - 64, len=8)["hex"])
    diff = [i for i in range(SIZE) if got[i] != want[i]]
    assert not diff, (len(diff), diff[:5], diff[-5:])
    a("fill", mr="local", off=0, hex=(b"\xcd" * 64).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    _expect_access_error(a, b)
    assert bytes.fromhex(b("dump", mr="adopt", off=0, len=64)["hex"]) \
        == want[:64]


@pytest.mark.parametrize("pair", [TCP], indirect=True, ids=["tcp"])
def test_tcp_keeps_active_messages(pair):
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    a("fill", mr="local", off=0, hex=pat(64, 6).hex())
    for _ in range(3):
        post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
        assert a("poll", n=1)["wcs"][0][1] == 0
    assert bytes.fromhex(b("dump", mr="mr", off=0, len=64)["hex"]) \
        == pat(64, 6)
    assert a("stats")["fast_write"] == 0


def _expect_access_error(a, b, before=None):
    ibv = _ibv()
    wc = a("poll", n=1)["wcs"][0]
    assert wc[1] == ibv.IBV_WC_REM_ACCESS_ERR, wc
    assert a("state")["state"] == ibv.IBV_QPS_ERR
    assert b("state")["state"] == ibv.IBV_QPS_ERR


@pytest.mark.parametrize("case", ["bounds", "access", "bad_rkey",
                                  "misaligned_atomic"])
def test_fast_path_errors(pair, case):
    """Every check of a responder, with the rkey already mapped by the
    initiator: the same REM_ACCESS_ERR (both QPs to ERR) as the
    active-message path, and the target memory untouched."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    ro_addr, ro_rkey = mrs["ro"]
    warm(a, mrs)
    warm(a, mrs, "ro")
    a("fill", mr="local", off=0, hex=(b"\xee" * 256).hex())
    if case == "bounds":        # straddles the end of the region
        w = wr(ibv.IBV_WR_RDMA_WRITE, addr + SIZE - 8, rkey, 0, 16)
    elif case == "access":      # the region has no REMOTE_WRITE
        w = wr(ibv.IBV_WR_RDMA_WRITE, ro_addr, ro_rkey, 0, 16)
    elif case == "bad_rkey":
        w = wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey ^ 0x100, 0, 16)
    else:
        w = wr(ibv.IBV_WR_ATOMIC_FETCH_AND_ADD, addr + 4, rkey, 0, 8, add=1)
    sa0 = a("stats")
    r = a("post", wrs=[w])
    if case == "misaligned_atomic":     # rejected at post time, as on rxe
        assert r["ok"] is False
        return
    assert r == {"ok": True}
    _expect_access_error(a, b)
    assert a("stats")["fast_write"] == sa0["fast_write"]
    assert bytes.fromhex(b("dump", mr="mr", off=SIZE - 8, len=8)["hex"]) \
        != b"\xee" * 8
    assert bytes.fromhex(b("dump", mr="ro", off=0, len=16)["hex"]) \
        == bytes(16)


def test_target_qp_access_flags(pair):
    """The target QP's qp_access_flags count, not only the MR's: READ
    allowed, WRITE refused once the target QP drops REMOTE_WRITE."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    b("fill", mr="mr", off=0, hex=bytes(64).hex())
    assert b("access", flags=ibv.IBV_ACCESS_REMOTE_READ) == {"ok": True}
    sa0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_READ, addr, rkey, 0, 64))
    assert a("poll", n=1)["wcs"][0][1] == ibv.IBV_WC_SUCCESS
    assert a("stats")["fast_read"] == sa0["fast_read"] + 1
    a("fill", mr="local", off=0, hex=(b"\xcd" * 64).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    _expect_access_error(a, b)
    assert a("stats")["fast_write"] == sa0["fast_write"]
    assert b("dump", mr="mr", off=0, len=64)["hex"] == "00" * 64


def test_write_after_dereg(pair):
    """Once the target's dereg_mr returned, no write lands: the initiator
    (which had mapped the MR) gets REM_ACCESS_ERR and the memory, still
    readable through a view, is untouched."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    a("fill", mr="local", off=0, hex=(b"\xab" * 64).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    assert a("poll", n=1)["wcs"][0][1] == 0
    assert b("dump", mr="mr", off=0, len=64)["hex"] == "ab" * 64
    b("fill", mr="mr", off=0, hex=bytes(64).hex())
    assert b("dereg", mr="mr") == {"ok": True}
    a("fill", mr="local", off=0, hex=(b"\xcd" * 64).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    _expect_access_error(a, b)
    assert b("dump", mr="mr", off=0, len=64)["hex"] == "00" * 64


# struct sh_page: a 192-byte header, 16384 struct sh_qp (32 bytes), then
# struct sh_mr (240 bytes; its in-flight count at offset 8)
MR_INFLIGHT = 192 + 16384 * 32 + 8


def test_dereg_waits_for_inflight_but_bounded(pair):
    """dereg_mr waits for initiators inside a one-sided op; one that died
    inside (simulated: a count nobody will drop) delays it by the bound
    (about 1 s), not forever."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    path = key_page(b.pid)
    fd = os.open(path, os.O_RDWR)
    try:
        off = MR_INFLIGHT + (rkey >> 8) * 240
        assert struct.unpack("<I", os.pread(fd, 4, off)) == (0,)
        os.pwrite(fd, struct.pack("<I", 1), off)
        t0 = time.monotonic()
        assert b("dereg", mr="mr") == {"ok": True}
        took = time.monotonic() - t0
        assert struct.unpack("<I", os.pread(fd, 4, off)) == (0,)
    finally:
        os.close(fd)
    assert 0.9 < took < 5.0, took
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 8))
    _expect_access_error(a, b)


def test_write_after_target_qp_destroyed(pair):
    """Once the target's destroy_qp returned, no write lands: error
    completion, memory untouched."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    b("fill", mr="mr", off=0, hex=bytes(64).hex())
    assert b("destroy_qp") == {"ok": True}
    a("fill", mr="local", off=0, hex=(b"\xcd" * 64).hex())
    sa0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    wc = a("poll", n=1, timeout=20)["wcs"][0]
    assert wc[1] != ibv.IBV_WC_SUCCESS, wc
    assert a("stats")["fast_write"] == sa0["fast_write"]
    assert b("dump", mr="mr", off=0, len=64)["hex"] == "00" * 64


def test_target_qp_error_state_stops_fast_path(pair):
    """A target QP in ERR (here after a bad access it detected itself)
    accepts no one-sided op: nothing in its memory changes."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + SIZE, rkey, 0, 8))
    _expect_access_error(a, b)


def test_order_with_active_messages(pair):
    """RC order across the two paths on one QP: a WRITE after a SEND into
    the same bytes must land after it (it may not overtake the SEND, which
    the target executes later), and a SEND after a WRITE lands after it."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    s_data, w_data = b"\x51" * 64, b"\x77" * 64
    a("fill", mr="local", off=0, hex=s_data.hex())
    a("fill", mr="local", off=64, hex=w_data.hex())
    rounds = 20
    for i in range(rounds):
        b("recv", off=1024 + 128 * i, len=64, wr_id=i)
    wrs = []
    for i in range(rounds):
        off = 1024 + 128 * i
        if i % 2 == 0:          # SEND, then WRITE the same bytes
            wrs += [wr(ibv.IBV_WR_SEND, off=0, length=64, wr_id=2 * i),
                    wr(ibv.IBV_WR_RDMA_WRITE, addr + off, rkey, 64, 64,
                       wr_id=2 * i + 1)]
        else:                   # WRITE, then SEND into the same bytes
            wrs += [wr(ibv.IBV_WR_RDMA_WRITE, addr + off, rkey, 64, 64,
                       wr_id=2 * i),
                    wr(ibv.IBV_WR_SEND, off=0, length=64, wr_id=2 * i + 1)]
    post_ok(a, *wrs[:20])
    post_ok(a, *wrs[20:])
    wcs = a("poll", n=2 * rounds)["wcs"]
    assert [w[1] for w in wcs] == [0] * (2 * rounds)
    assert [w[0] for w in wcs] == list(range(2 * rounds))
    got = b("poll", n=rounds, recv=True)["wcs"]
    assert [w[1] for w in got] == [0] * rounds
    for i in range(rounds):
        mem = bytes.fromhex(b("dump", mr="mr", off=1024 + 128 * i,
                              len=64)["hex"])
        want = w_data if i % 2 == 0 else s_data
        assert mem == want, f"round {i}: the later op did not land last"
    # and after the SENDs were acknowledged, WRITEs go one-sided again
    sa0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 64, 64, wr_id=99))
    assert a("poll", n=1)["wcs"][0][1] == 0
    assert a("stats")["fast_write"] == sa0["fast_write"] + 1


def test_peer_killed_mid_stream(pair):
    """The target SIGKILLed while fast-path WRITEs stream to it: the
    survivor gets RETRY_EXC_ERR within a bounded time, the rest flush, its
    QP is in ERR."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    a.send({"op": "stream", "raddr": addr, "rkey": rkey})
    r = a.read()
    assert r["running"] >= 20000 and r["stats"]["fast_write"] >= 20000, r
    t0 = time.monotonic()
    os.kill(b.p.pid, signal.SIGKILL)
    b.p.wait(10)
    rep = a.read()
    assert time.monotonic() - t0 < 5.0
    assert rep["status"] == ibv.IBV_WC_RETRY_EXC_ERR, rep
    assert rep["after"] < 5.0, rep
    assert set(rep["rest"]) <= {ibv.IBV_WC_WR_FLUSH_ERR}, rep
    assert rep["state"] == ibv.IBV_QPS_ERR


if __name__ == "__main__":
    if sys.argv[1:] == ["peer"]:
        sys.exit(peer_main())


def _pingpong(a, b, n):
    assert a("pingpong", n=n, ping=True) == {"ready": True}
    assert b("pingpong", n=n, ping=False) == {"ready": True}
    a.send("go")
    b.send("go")
    ra, rb = a.read(), b.read()
    assert ra == {"bad": [], "wrong": 0, "sent": n, "done": n}, ra
    assert rb == {"bad": [], "wrong": 0, "sent": n, "done": n}, rb


def _pingpong_counts(a, b, n, *keys):
    """Run _pingpong(a, b, n); {key: [a's, b's] growth of that statistic}."""
    s0 = a("stats"), b("stats")
    _pingpong(a, b, n)
    s1 = a("stats"), b("stats")
    return {k: [s1[i][k] - s0[i][k] for i in (0, 1)] for k in keys}


@pytest.mark.parametrize("pair", [SHM, TCP], indirect=True,
                         ids=["shm", "tcp"])
def test_ping_pong_acks_ride_in_the_replies(pair):
    """In a SEND ping-pong each side's ACK travels inside its reply (the
    responder's poll defers it, the reply's post_send carries it): almost
    no ACK goes as a message of its own, and every send completes."""
    a, b, _ = pair
    n = 2000
    c = _pingpong_counts(a, b, n, "ack_piggy", "ack_msg")
    piggy, alone = c["ack_piggy"], c["ack_msg"]
    # a's last ACK has no reply to ride in; on a loaded machine more go
    # alone (the progress thread sends one it finds waiting when the
    # application is preempted between its poll and its reply)
    assert min(piggy) >= n // 2, (piggy, alone)
    assert max(alone) <= n // 2, (piggy, alone)
    assert sum(piggy) + sum(alone) >= 2 * n - 2, (piggy, alone)


@pytest.mark.parametrize("pair", [
    {**SHM, "RDMA_TEST_QP_TIMEOUT": "14,7"},
    {**TCP, "RDMA_TEST_QP_TIMEOUT": "14,7"}], indirect=True,
    ids=["shm", "tcp"])
def test_deferred_ack_goes_out_without_more_polls(pair):
    """A QP that has been replying (a ping-pong) gets its ACKs deferred for
    the next reply.  When its application polls a receive once and then
    never again, the deferred ACK still reaches the requester (the progress
    thread sends it, ~1 ms) and the send completes successfully; the QP
    then stops deferring.  (Whether a request is executed in the
    application's poll, where ACKs are deferred, or by the progress thread
    is up to the scheduler: the test needs one deferral in 5 tries.  The
    QPs use the default-like timeout 14/7, so that a loaded machine cannot
    turn a late ACK into RETRY_EXC_ERR.)"""
    ibv = _ibv()
    a, b, mrs = pair
    deferred = 0
    for i in range(5):
        # b's QP replies after receives; its receives left posted are
        # 8-byte ones (hence 8-byte SENDs below)
        _pingpong(a, b, 8)
        late0 = b("stats")["ack_late"]
        b.send({"op": "poll", "recv": 1, "n": 1})     # b polls first
        time.sleep(0.05)
        post_ok(a, wr(ibv.IBV_WR_SEND, length=8, wr_id=10 + i))
        assert b.read()["wcs"][0][1] == ibv.IBV_WC_SUCCESS
        t0 = time.monotonic()
        wc = a("poll", n=1, timeout=5)["wcs"][0]
        assert wc[:2] == [10 + i, ibv.IBV_WC_SUCCESS], wc
        assert time.monotonic() - t0 < 1.0
        late = b("stats")["ack_late"] - late0
        assert late in (0, 1)
        deferred += late
        # after a late ACK, the next SEND is ACKed at once (no deferral)
        post_ok(a, wr(ibv.IBV_WR_SEND, length=8, wr_id=20 + i))
        assert b("poll", recv=1, n=1)["wcs"][0][1] == ibv.IBV_WC_SUCCESS
        assert a("poll", n=1, timeout=5)["wcs"][0][:2] == \
            [20 + i, ibv.IBV_WC_SUCCESS]
        if late:
            assert b("stats")["ack_late"] - late0 == late
    assert deferred >= 1


def test_fast_path_local_bounds_within_a_batch(pair):
    """WRs of one post_send reading the same local MR: the second reads
    past its end.  The first is written one-sided; the second fails with
    LOC_QP_OP_ERR, as a bad local s/g entry of a WRITE does on rxe (the
    local check is not skipped for a WR because the WR before it used the
    same MR), and the target memory it aimed at is untouched."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    a("fill", mr="local", off=0, hex=(b"\x5a" * 64).hex())
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64, wr_id=1),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + 1024, rkey, SIZE - 8, 16,
               wr_id=2, raw=True))
    wcs = a("poll", n=2)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [(1, ibv.IBV_WC_SUCCESS),
                                           (2, ibv.IBV_WC_LOC_QP_OP_ERR)], wcs
    assert bytes.fromhex(b("dump", mr="mr", off=0, len=64)["hex"]) \
        == b"\x5a" * 64
    assert bytes.fromhex(b("dump", mr="mr", off=1024, len=16)["hex"]) \
        == bytes(16)


def test_fast_path_remote_bounds_within_a_batch(pair):
    """WRITEs of one post_send to the same target MR (the later ones take
    the shortcut that re-checks only what can change: csrc/fabric/req.c
    fast_op): the third straddles the MR's end and fails with
    REM_ACCESS_ERR, the fourth flushes; the first two land, the bytes the
    third aimed at are untouched."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    warm(a, mrs)
    a("fill", mr="local", off=0, hex=(b"\x6b" * 64).hex())
    sa0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 8, wr_id=1),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + 64, rkey, 0, 8, wr_id=2),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + SIZE - 8, rkey, 0, 16,
               wr_id=3),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + 128, rkey, 0, 8, wr_id=4))
    wcs = a("poll", n=4)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [
        (1, ibv.IBV_WC_SUCCESS), (2, ibv.IBV_WC_SUCCESS),
        (3, ibv.IBV_WC_REM_ACCESS_ERR), (4, ibv.IBV_WC_WR_FLUSH_ERR)], wcs
    assert a("stats")["fast_write"] - sa0["fast_write"] == 2
    got = bytes.fromhex(b("dump", mr="mr", off=0, len=SIZE)["hex"])
    assert got[0:8] == got[64:72] == b"\x6b" * 8
    assert got[SIZE - 8:] != b"\x6b" * 8 and got[128:136] != b"\x6b" * 8


def test_fast_path_batch_across_two_mrs(pair):
    """One post_send: WRITE to one MR, READ from another, WRITE to the
    first again: all one-sided (the shortcut for the second WRITE is not
    taken once the READ moved our in-flight count to the other MR), and
    every byte right."""
    ibv = _ibv()
    a, b, mrs = pair
    addr, rkey = mrs["mr"]
    ro_addr, ro_rkey = mrs["ro"]
    warm(a, mrs)
    warm(a, mrs, "ro")
    a("fill", mr="local", off=0, hex=pat(64, 11).hex())
    sa0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 256, rkey, 0, 32, wr_id=1),
            wr(ibv.IBV_WR_RDMA_READ, ro_addr, ro_rkey, 1024, 16, wr_id=2),
            wr(ibv.IBV_WR_RDMA_WRITE, addr + 512, rkey, 32, 32, wr_id=3,
               send_flags=ibv.IBV_SEND_SIGNALED))
    wcs = a("poll", n=3)["wcs"]
    assert [(w[0], w[1]) for w in wcs] == [(1, 0), (2, 0), (3, 0)], wcs
    sa1 = a("stats")
    assert sa1["fast_write"] - sa0["fast_write"] == 2
    assert sa1["fast_read"] - sa0["fast_read"] == 1
    got = bytes.fromhex(b("dump", mr="mr", off=256, len=288)["hex"])
    assert got[:32] == pat(64, 11)[:32] and got[256:] == pat(64, 11)[32:]


@pytest.mark.parametrize("pair", [SHM, TCP], indirect=True,
                         ids=["shm", "tcp"])
def test_deferred_ack_sent_when_the_qp_is_destroyed(pair):
    """A replying QP's application takes a receive and then closes its QP
    and ends its process at once (no reply, no further poll): the ACK its
    poll deferred goes out when the QP is destroyed, so the requester's
    SEND completes successfully instead of failing as sent to a dead
    peer."""
    ibv = _ibv()
    a, b, mrs = pair
    _pingpong(a, b, 8)                  # b's QP replies: its ACKs wait
    b.send({"op": "poll_close_exit"})
    time.sleep(0.05)                    # b is spinning in its poll
    post_ok(a, wr(ibv.IBV_WR_SEND, length=8, wr_id=7))
    rb = b.read()                       # b's receive of that SEND
    assert rb["n"] == 1 and rb["wc"][:2] == [1, ibv.IBV_WC_SUCCESS], rb
    wc = a("poll", n=1, timeout=5)["wcs"][0]
    assert wc[:2] == [7, ibv.IBV_WC_SUCCESS], (wc, rb)


@pytest.mark.parametrize("how", ["return", "c_exit"])
@pytest.mark.parametrize("pair", [SHM, TCP], indirect=True,
                         ids=["shm", "tcp"])
def test_deferred_ack_sent_when_the_process_ends(pair, how):
    """As above, but the application closes nothing: it takes a receive
    and its script ends (its objects are deallocated), or the process
    calls exit(3) (nothing is deallocated).  A NIC would have acknowledged
    the SEND on its arrival; here the ACK the poll deferred goes out as
    the process ends, and the requester's SEND completes successfully."""
    ibv = _ibv()
    a, b, mrs = pair
    _pingpong(a, b, 8)                  # b's QP replies: its ACKs wait
    b.send({"op": "poll_exit", "how": how})
    time.sleep(0.05)                    # b is spinning in its poll
    post_ok(a, wr(ibv.IBV_WR_SEND, length=8, wr_id=7))
    rb = b.read()                       # b's receive of that SEND
    assert rb["n"] == 1 and rb["wc"] == [1, ibv.IBV_WC_SUCCESS], rb
    wc = a("poll", n=1, timeout=5)["wcs"][0]
    assert wc[:2] == [7, ibv.IBV_WC_SUCCESS], (wc, rb)


@pytest.mark.parametrize("pair", [SHM, TCP], indirect=True,
                         ids=["shm", "tcp"])
def test_requests_take_the_ring_over_shm(pair):
    """Between processes of one host with shared memory allowed, RC
    requests go through the sender's request ring (not UCP) once the
    receiver has mapped it; with UCX_TLS=tcp they keep going through UCP.
    The ring's file is gone from the rendezvous directory once mapped."""
    a, b, _ = pair
    n = 500
    ring = _pingpong_counts(a, b, n, "ring_req")["ring_req"]
    if a.env.get("UCX_TLS", "").startswith("tcp"):
        assert ring == [0, 0], ring
    else:
        # the first requests may go through UCP while the ring opens
        assert min(ring) >= n - 10, ring
    d = os.environ.get("RDMA_UCX_DIR") or f"/dev/shm/rdma-ucx-{os.getuid()}"
    mine = []
    for name in os.listdir(d):
        if name.startswith("ring-"):
            with open(os.path.join(d, name), "rb") as f:
                head = f.read(12)
            if len(head) == 12 and struct.unpack("<IIi", head)[2] in (
                    a.pid, b.pid):
                mine.append(name)
    assert mine == []


def _rings_mapped(pid):
    """{file name: address} of the request rings process pid maps."""
    out = {}
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            name = os.path.basename(line.split(None, 5)[-1].strip())
            if name.startswith("ring-"):
                out[name.split()[0]] = line.split("-", 1)[0]
    return out


def _wait_for(cond, timeout=5.0):
    t = time.monotonic() + timeout
    while not cond() and time.monotonic() < t:
        time.sleep(0.02)
    return cond()


@pytest.mark.parametrize("pair", [SHM], indirect=True, ids=["shm"])
def test_rings_of_ended_senders_are_released(pair):
    """A node that outlives the processes it talks to (a server, a kernel)
    releases the request rings to and from each one that ended, within
    about 100 ms of its end, and the next sender's ring takes the released
    entry (the same address): rings do not pile up, and new senders keep
    getting rings."""
    a, b, _ = pair
    guid_b = b("stats")["guid"]
    info_b = b("info")
    gone0 = b("stats")["ring_gone"]
    _pingpong(a, b, 50)                 # a ring each way
    rings = _rings_mapped(b.pid)
    rx = [n for n in rings if n.endswith(f"-{guid_b:016x}")]
    assert len(rings) == 2 and len(rx) == 1, rings
    rx_addr = rings[rx[0]]
    extra = []
    try:
        for k in range(3):
            a.close()                   # the sender ends (exit)
            assert _wait_for(lambda: _rings_mapped(b.pid) == {}), \
                _rings_mapped(b.pid)
            assert b("stats")["ring_gone"] == gone0 + k + 1
            a = Peer(SHM)               # the next one
            extra.append(a)
            ia = a.read()
            assert b("reconnect", **{k2: ia[k2] for k2 in ("gid", "qpn")}) \
                == {"ok": True}
            a.send(info_b)
            assert a.read() == {"ready": True}
            n = 200
            ring = _pingpong_counts(a, b, n, "ring_req")["ring_req"]
            assert min(ring) >= n - 10, ring
            rings = _rings_mapped(b.pid)
            rx = [n for n in rings if n.endswith(f"-{guid_b:016x}")]
            assert len(rings) == 2 and len(rx) == 1, rings
            assert rings[rx[0]] == rx_addr      # the released entry
    finally:
        for p in extra:
            p.close()


@pytest.mark.parametrize("pair", [SHM], indirect=True, ids=["shm"])
def test_a_sleeping_responder_is_rung(pair):
    """A responder whose application does not poll and whose progress
    thread sleeps is woken by the ring's writer (AM_CTL_BELL): a SEND to it
    completes in milliseconds, not at the thread's next timeout (100 ms)."""
    ibv = _ibv()
    a, b, _ = pair
    _pingpong(a, b, 8)                  # the rings are open
    bell0 = a("stats")["ring_bell"]
    took = []
    for i in range(5):
        time.sleep(0.3)                 # b's progress thread goes to sleep
        t0 = time.monotonic()
        post_ok(a, wr(ibv.IBV_WR_SEND, length=8, wr_id=30 + i))
        rep = a("poll", n=1, timeout=5)
        took.append(time.monotonic() - t0)
        assert "wcs" in rep, rep
        assert rep["wcs"][0][:2] == [30 + i, ibv.IBV_WC_SUCCESS], rep
        assert b("poll", recv=1, n=1)["wcs"][0][1] == ibv.IBV_WC_SUCCESS
        assert b("recv", len=8, off=0) == {"ok": True}
    assert a("stats")["ring_bell"] - bell0 >= 3, took
    assert sorted(took)[2] < 0.03, took
