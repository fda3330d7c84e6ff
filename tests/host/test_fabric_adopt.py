"""Adopted user memory on the software fabric (prototype, issue 15).

With RDMA_UCX_ADOPT=1, ``reg_mr`` with remote access over whole pages of
private anonymous memory replaces those pages by a UCX shared segment at
the same address (same contents), so that the MR takes the one-sided fast
path (tests/host/test_fabric_onesided.py shows the fast path itself);
``dereg_mr`` gives the pages back.  These checks run in one process of
their own (the switch is read once per process): which memory is adopted
and which is refused, two MRs over the same pages, and what a child of
``fork`` sees.

Run as a program, this module performs the checks and prints the results
as one JSON line.
"""
import json
import mmap
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PAGE = mmap.PAGESIZE


def _mapping(addr):
    """The /proc/self/maps line of the mapping holding *addr*."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line.strip()
    return ""


def _shared(addr):
    return "/SYSV" in _mapping(addr)


def _private_anon(n):
    return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def checks():
    import rdma
    import fabric_helpers as fh
    out = {}
    ctx = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
    pd = ctx.pd()

    def adopted():
        return fh.node_stats()["adopted"]

    # two MRs over the same pages: the second lies in the first's adopted
    # memory; the pages go back only with the last
    m = _private_anon(4 * PAGE)
    m[:] = bytes(range(256)) * (4 * PAGE // 256)
    mr1 = pd.mr(m, fh.MR_ALL)
    mr2 = pd.mr(memoryview(m)[PAGE:2 * PAGE], fh.MR_ALL)
    addr = mr1.addr
    out["two_adopted"] = adopted()
    out["two_shared"] = _shared(addr)
    mr1.close()
    out["two_after_first"] = _shared(addr)
    m[5:8] = b"xyz"
    mr2.close()
    out["two_after_last"] = _shared(addr)
    out["two_data"] = bytes(m[:16]).hex()

    # an MR overlapping adopted memory in part is not adopted
    m2 = _private_anon(4 * PAGE)
    mv = memoryview(m2)
    a = pd.mr(mv[:2 * PAGE], fh.MR_ALL)
    n0 = adopted()
    b = pd.mr(mv[PAGE:3 * PAGE], fh.MR_ALL)
    out["overlap"] = [adopted() - n0, _shared(a.addr + 2 * PAGE)]
    b.close()
    a.close()

    # refused: local access only, not whole pages, file-backed, shared
    # anonymous
    n0 = adopted()
    m3 = _private_anon(PAGE)
    r = pd.mr(m3, 1)                    # IBV_ACCESS_LOCAL_WRITE
    out["local_only"] = [adopted() - n0, _shared(r.addr)]
    r.close()
    m4 = _private_anon(2 * PAGE)
    r = pd.mr(memoryview(m4)[64:PAGE + 64], fh.MR_ALL)
    out["unaligned"] = [adopted() - n0, _shared(r.addr)]
    r.close()
    with tempfile.TemporaryFile() as f:
        f.truncate(PAGE)
        m5 = mmap.mmap(f.fileno(), PAGE, flags=mmap.MAP_PRIVATE)
        r = pd.mr(m5, fh.MR_ALL)
        out["file"] = [adopted() - n0, _shared(r.addr)]
        r.close()
    m6 = mmap.mmap(-1, PAGE)            # MAP_SHARED anonymous
    r = pd.mr(m6, fh.MR_ALL)
    out["shared_anon"] = [adopted() - n0, _shared(r.addr)]
    r.close()

    # alloc_mr memory is UCX's already: an MR over it adopts nothing
    am = pd.alloc_mr(2 * PAGE, fh.MR_ALL)
    r = pd.mr(am.buf, fh.MR_ALL)
    out["alloc_mr"] = adopted() - n0
    r.close()
    am.close()

    # fork: adopted pages are MADV_DONTFORK (as a NIC's after
    # ibv_fork_init): a child that touches them gets SIGSEGV, the rest of
    # its memory is there
    m7 = _private_anon(PAGE)
    m7[0:4] = b"abcd"
    r = pd.mr(m7, fh.MR_ALL)
    addr = r.addr
    pid = os.fork()
    if pid == 0:
        os._exit(7 if bytes(m7[0:4]) == b"abcd" else 8)
    _, status = os.waitpid(pid, 0)
    out["fork_child"] = os.waitstatus_to_exitcode(status)
    out["fork_parent"] = bytes(m7[0:4]).decode()
    r.close()
    out["fork_after"] = _shared(addr)
    ctx.close()
    return out


@pytest.fixture(scope="module")
def res():
    import rdma
    env = dict(os.environ, RDMA_UCX_ADOPT="1", UCX_TLS="shm,self",
               UCX_WARN_UNUSED_ENV_VARS="n")
    env.pop("RDMA_PROVIDER", None)
    env["PYTHONPATH"] = os.pathsep.join(
        (str(HERE), os.path.dirname(os.path.dirname(rdma.__file__))))
    p = subprocess.run([sys.executable, __file__], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_two_mrs_over_the_same_pages(res):
    assert res["two_adopted"] == 1
    assert res["two_shared"] is True
    assert res["two_after_first"] is True       # the second MR keeps it
    assert res["two_after_last"] is False
    want = bytearray(range(16))
    want[5:8] = b"xyz"
    assert res["two_data"] == want.hex()


def test_partial_overlap_is_not_adopted(res):
    assert res["overlap"] == [0, False]


@pytest.mark.parametrize("case", ["local_only", "unaligned", "file",
                                  "shared_anon"])
def test_refused(res, case):
    assert res[case] == [0, False]


def test_alloc_mr_memory_is_not_adopted(res):
    assert res["alloc_mr"] == 0


def test_fork_child_has_no_adopted_pages(res):
    assert res["fork_child"] == -11             # SIGSEGV
    assert res["fork_parent"] == "abcd"
    assert res["fork_after"] is False


if __name__ == "__main__":
    print(json.dumps(checks()))
