"""MRs over memory that is not, or no longer, what was registered, on the
software fabric (issue 21; csrc/fabric/mr.c, adopt.c).

* Registration checks the range as the kernel's ``ib_umem_get`` does:
  memory that is not mapped, or not mapped writable while write access
  (local write, remote write or atomic) is asked, fails with ``EFAULT``;
  a peer can never make the target write into read-only memory.
* An MR keeps what a NIC keeps: after the program unmaps a registered
  buffer (still registered) and maps other memory there, a peer's WRITE
  through the MR never lands in that other memory -- adopted memory stays
  the MR's (a NIC's pinned pages), other memory ends the WR with
  ``REM_ACCESS_ERR``.
* New memory mapped where adopted memory was, and registered, is the new
  MR's: READs and WRITEs through it see the new memory, not the old
  segment.
* A signal handler of the registering thread storing into the range while
  it is adopted or given back neither hangs the registration nor loses a
  store.

The C checks (tests/host/mr_safety.c) run through the verbs front end,
one process per check, with a QP connected to itself as the peer.
"""
import mmap
import os
import subprocess
import sys

import pytest

import fabric_helpers as fh
# the two-process pair of the one-sided tests (its peer has the MR "own")
from test_fabric_onesided import pair, post_ok, wr  # noqa: F401

PAGE = mmap.PAGESIZE


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return fh.build_c("mr_safety.c",
                      tmp_path_factory.mktemp("mr_safety") / "mr_safety",
                      "infiniband/verbs.h", ("-O2", "-Wall", "-Wextra"),
                      ("-libverbs",))


def run(prog, tmp_path, *args, adopt=True, timeout=60):
    """Run mr_safety ARGS on ucx0; its "name=value" lines as a dict (the
    process must end by itself with 0 within *timeout* seconds)."""
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, RDMA_UCX_DIR=str(d), UCX_TLS="shm,self",
               UCX_WARN_UNUSED_ENV_VARS="n")
    env.pop("RDMA_UCX_ADOPT", None)
    if not adopt:
        env["RDMA_UCX_ADOPT"] = "0"
    try:
        p = subprocess.run([sys.executable, "-P", "-m", "rdma.fabric",
                            "exec", "--", prog, *args], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mr_safety {' '.join(args)} still running after "
                    f"{timeout} s: {e.stdout!r}")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return dict(line.split("=", 1) for line in p.stdout.splitlines()
                if "=" in line)


# ---- a signal handler storing into the range during adoption ----------

@pytest.mark.parametrize("adopt", [True, False])
def test_signal_handler_stores_during_registration(prog, tmp_path, adopt):
    """A timer signal (every 50 us, to the registering thread) whose
    handler stores into the buffer while the thread registers (adopts)
    and deregisters (gives back) it 200 times: the copies under
    userfaultfd's protection used to wait for the handler's store, which
    waited for the copy (ibv_reg_mr hung for good).  Every store of the
    handler is there at the end."""
    res = run(prog, tmp_path, "signal", "200", adopt=adopt, timeout=60)
    assert res == {"adopted": str(int(adopt)), "rounds": "200",
                   "signals": "some", "lost": "0"}


# ---- registration checks the range (EFAULT) ---------------------------

def test_c_registration_of_memory_not_there(prog, tmp_path):
    """ibv_reg_mr with write access over PROT_READ memory, or over a range
    that is (in part) not mapped, fails with EFAULT, as the kernel's
    ib_umem_get does (pinning for write without FOLL_FORCE).  Before,
    the registration succeeded and a peer's 8-byte WRITE into the
    read-only pages killed the target with SIGSEGV.  Read-only access
    over them is allowed; a peer's READ works and its WRITE ends in
    REM_ACCESS_ERR (the MR has no remote write)."""
    res = run(prog, tmp_path, "ro")
    assert res == {"ro_remote_write": "Bad address",
                   "ro_local_write": "Bad address",
                   "unmapped": "Bad address",
                   "unmapped_read": "Bad address",
                   "half_unmapped": "Bad address",
                   "ro_read_only": "ok",
                   "ro_read": "success",
                   "ro_write": "remote access error",
                   "end": "ok"}


PY_CHECK = r"""
import ctypes, errno, json, mmap
import rdma, rdma.ibverbs as ibv
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
W = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
     ibv.IBV_ACCESS_REMOTE_READ)
ctx = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
pd = ctx.pd()
out = {}

def reg(buf, access):
    try:
        pd.mr(buf, access).close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    except TypeError:
        return "TypeError"

# a read-only mapping, as Python sees it (a read-only buffer)
ro = mmap.mmap(-1, 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
               prot=mmap.PROT_READ)
out["ro_view_read"] = reg(memoryview(ro), ibv.IBV_ACCESS_REMOTE_READ)
out["ro_view_write"] = reg(memoryview(ro), W)
# the same kind of pages through a writable buffer (ctypes)
a = libc.mmap(None, 2 * PAGE, mmap.PROT_READ,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
out["ro_ctypes_write"] = reg((ctypes.c_char * (2 * PAGE)).from_address(a), W)
out["ro_ctypes_read"] = reg((ctypes.c_char * (2 * PAGE)).from_address(a),
                            ibv.IBV_ACCESS_REMOTE_READ)
# memory that is not there
b = libc.mmap(None, 2 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
libc.munmap(b, 2 * PAGE)
out["unmapped"] = reg((ctypes.c_char * 64).from_address(b + 8),
                      ibv.IBV_ACCESS_REMOTE_READ)
try:
    pd.mr((ctypes.c_char * PAGE).from_address(b), W)
except OSError as e:
    out["message"] = str(e)
ctx.close()
print(json.dumps(out))
"""


def test_python_registration_of_memory_not_there(tmp_path):
    """PD.mr: write access over a read-only buffer is refused by the
    binding (TypeError, as before); over read-only pages seen through a
    writable buffer (ctypes), or over pages that are not mapped, the
    fabric refuses it with EFAULT, naming the address.  Read-only access
    over read-only pages is allowed."""
    import json
    import rdma
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    env = dict(os.environ, RDMA_UCX_DIR=str(d), UCX_TLS="shm,self",
               UCX_WARN_UNUSED_ENV_VARS="n",
               PYTHONPATH=os.path.dirname(os.path.dirname(rdma.__file__)))
    p = subprocess.run([sys.executable, "-c", PY_CHECK], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    msg = res.pop("message")
    assert res == {"ro_view_read": "ok", "ro_view_write": "TypeError",
                   "ro_ctypes_write": "EFAULT", "ro_ctypes_read": "ok",
                   "unmapped": "EFAULT"}
    assert "not mapped" in msg, msg


# ---- what a NIC keeps after the program unmaps registered memory ------

@pytest.mark.parametrize("how", ["", "imm"])
def test_unmapped_adopted_memory_stays_the_mrs(prog, tmp_path, how):
    """The program unmaps an adopted buffer it still has registered and
    maps other memory at the same address.  A peer's WRITE through the
    MR lands in the MR's pages (the segment, as a NIC's pinned pages),
    never in the new memory; a READ gives back what it wrote.  "imm":
    WRITE_WITH_IMM, which the target executes itself (before, it wrote
    at the program's address: into the new memory)."""
    res = run(prog, tmp_path, "unmap", how)
    assert res == {"adopted": "1", "write": "success",
                   "other_untouched": "1", "read_back": "WWWWWWWW",
                   "other_after_dereg": "1"}


# ---- new memory where adopted memory was ------------------------------

@pytest.mark.parametrize("how", ["keep", "dereg"])
def test_new_memory_at_an_adopted_address(prog, tmp_path, how):
    """An adopted buffer is unmapped (its MR still registered: "keep", or
    deregistered first: "dereg"), new memory is mapped at the same
    address and registered.  A WRITE and a READ through the new MR see
    the new memory; before ("keep"), they went to the old segment: the
    WRITE was lost to the program and the READ returned the old bytes."""
    res = run(prog, tmp_path, "stale", how)
    assert res == {"write": "success", "write_seen": "1", "read": "success",
                   "read_got": "Rnnnnnnn"}


@pytest.mark.parametrize("how", ["", "imm", "unaligned", "unaligned,imm"])
def test_unmapped_own_memory_is_refused(prog, tmp_path, how):
    """The same with memory that is not adopted (RDMA_UCX_ADOPT=0, or a
    buffer that does not start a page): its pages cannot be kept, so once
    the program unmaps it (UCX's memory hooks tell the fabric, before the
    pages go) the MR reaches nothing: the peer's WRITE ends in
    REM_ACCESS_ERR, and the new memory at that address is untouched.
    Before, the WRITE completed with SUCCESS into the new memory."""
    res = run(prog, tmp_path, "unmap", how, adopt=False)
    assert res == {"adopted": "0", "write": "remote access error",
                   "other_untouched": "1", "other_after_dereg": "1"}


def test_unmapped_local_buffer_is_refused(prog, tmp_path):
    """The requester's side: the program unmaps a buffer registered for
    its own WRs (not adopted: local access only) and maps other memory
    there; a READ into it through the old MR ends in LOC_PROT_ERR, and
    the peer's bytes land nowhere.  Before, the READ completed with
    SUCCESS into the new memory."""
    res = run(prog, tmp_path, "local")
    assert res == {"read": "local protection error", "other_untouched": "1"}


@pytest.mark.parametrize("pair", [{"UCX_TLS": "shm,self",
                                   "UCX_WARN_UNUSED_ENV_VARS": "n",
                                   "RDMA_UCX_CMA_MIN": "0"}],
                         indirect=True, ids=["cma"])
def test_unmapped_own_memory_cross_memory_attach(pair):
    """Two processes: the target's MR over its own memory (not adopted),
    reached by the initiator itself with cross-memory attach.  The target
    unmaps the memory under the MR and maps other memory at the same
    address: the initiator's next WRITE must not land there (the target's
    unmapping withdraws the MR from its key page first, and waits for
    initiators inside a copy); it ends in REM_ACCESS_ERR."""
    import rdma.ibverbs as ibv
    a, b, mrs = pair
    addr, rkey = mrs["own"]
    a("fill", mr="local", off=0, hex=(b"W" * 64).hex())
    s0 = a("stats")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr, rkey, 0, 64))
    assert a("poll", n=1)["wcs"][0][1] == ibv.IBV_WC_SUCCESS
    assert a("stats")["cma_write"] == s0["cma_write"] + 1
    r = b("remap")
    if not r["placed"]:
        pytest.skip("the system mapped the new memory elsewhere")
    post_ok(a, wr(ibv.IBV_WR_RDMA_WRITE, addr + 128, rkey, 0, 64))
    assert a("poll", n=1)["wcs"][0][1] == ibv.IBV_WC_REM_ACCESS_ERR
    assert bytes.fromhex(b("peek", addr=r["base"], len=3 * PAGE)["hex"]) \
        == b"o" * (3 * PAGE)
