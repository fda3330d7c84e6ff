"""Adopted user memory on the software fabric (issue 15; csrc/fabric/adopt.c).

By default (``RDMA_UCX_ADOPT=0`` turns it off), ``reg_mr`` with remote
access over whole pages of private anonymous memory replaces those pages
by a UCX shared segment at the same address (same contents), so that the
MR takes the one-sided fast path (tests/host/test_fabric_onesided.py shows
the fast path itself).  The pages stay adopted after ``dereg_mr``, until
the program unmaps them.  These checks run in one process of their own
(the switch is read once per process): which memory is adopted and which
is refused, two MRs over the same pages, registering again, what a child
of ``fork`` sees; and, with a C program (adopt_race.c), that stores other
threads make while their pages are adopted are not lost.

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


def _shared(addr):
    from fabric_helpers import mapping
    return "/SYSV" in mapping(addr)


def _sysv_count():
    with open("/proc/self/maps") as f:
        return sum("/SYSV" in line for line in f)


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
    # memory; the pages go back only with the last, with their data; an
    # MR over them again adopts them again; nothing is left behind
    sysv0 = _sysv_count()
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
    mr3 = pd.mr(m, fh.MR_ALL)
    out["again"] = [adopted(), _shared(addr)]
    m[9:10] = b"!"
    mr3.close()
    out["again_data"] = bytes(m[:16]).hex()
    out["sysv_left"] = _sysv_count() - sysv0
    m.close()

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

    # fork: the child gets a private copy of adopted pages as they were
    # at fork() (as a NIC's with a kernel that copies pinned pages): what
    # each side writes afterwards stays its own
    m7 = _private_anon(PAGE)
    m7[0:4] = b"abcd"
    r = pd.mr(m7, fh.MR_ALL)
    addr = r.addr
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 100
        try:
            os.close(rd)
            seen = bytes(m7[0:4])
            private = not _shared(addr)
            m7[0:4] = b"kid!"
            os.write(wr, b"1")
            code = (seen == b"abcd") + 2 * private
        finally:
            os._exit(code)
    os.close(wr)
    os.read(rd, 1)
    _, status = os.waitpid(pid, 0)
    out["fork_child"] = os.waitstatus_to_exitcode(status)
    out["fork_parent"] = bytes(m7[0:4]).decode()
    m7[0:4] = b"wxyz"
    r.close()
    out["fork_after"] = [_shared(addr), bytes(m7[0:4]).decode()]
    ctx.close()
    return out


@pytest.fixture(scope="module")
def res():
    import rdma
    env = dict(os.environ, UCX_TLS="shm,self", UCX_WARN_UNUSED_ENV_VARS="n")
    env.pop("RDMA_UCX_ADOPT", None)
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
    assert res["two_after_last"] is False       # given back
    want = bytearray(range(16))
    want[5:8] = b"xyz"
    assert res["two_data"] == want.hex()


def test_registered_again(res):
    assert res["again"] == [2, True]
    want = bytearray(range(16))
    want[5:8] = b"xyz"
    want[9:10] = b"!"
    assert res["again_data"] == want.hex()


def test_nothing_is_left_behind(res):
    # neither the program's attachment nor UCX's mapping of the segment
    assert res["sysv_left"] == 0


def test_partial_overlap_is_not_adopted(res):
    assert res["overlap"] == [0, False]


@pytest.mark.parametrize("case", ["local_only", "unaligned", "file",
                                  "shared_anon"])
def test_refused(res, case):
    assert res[case] == [0, False]


def test_alloc_mr_memory_is_not_adopted(res):
    assert res["alloc_mr"] == 0


def test_fork_child_gets_a_private_copy(res):
    assert res["fork_child"] == 3       # saw "abcd", and its pages private
    assert res["fork_parent"] == "abcd"     # the child's write stayed there
    assert res["fork_after"] == [False, "wxyz"]


@pytest.fixture(scope="module")
def adopt_race(tmp_path_factory):
    from fabric_helpers import build_c
    return build_c("adopt_race.c",
                   tmp_path_factory.mktemp("adopt") / "adopt_race",
                   "infiniband/verbs.h", ("-O2", "-Wall"),
                   ("-libverbs", "-lpthread"))


@pytest.mark.parametrize("wp", ["", "user", "none"])
def test_stores_during_adoption_are_kept(adopt_race, tmp_path, wp):
    """adopt_race.c: two threads store into 64 MiB while the main thread
    registers it (adopted), deregisters it (given back) and registers it
    again.  Every store is there at the end: stores made during a copy
    wait for the new pages (userfaultfd: write protection, then missing
    pages; "user": the unprivileged kind, which protects against stores
    from user mode).  RDMA_UCX_DEBUG_ADOPT_WP
    =none copies without protection: stores are lost, which shows the
    check can see them."""
    env = dict(os.environ, UCX_TLS="shm,self", UCX_WARN_UNUSED_ENV_VARS="n",
               RDMA_UCX_DIR=str(tmp_path / "d"))
    env.pop("RDMA_UCX_ADOPT", None)
    if wp:
        env["RDMA_UCX_DEBUG_ADOPT_WP"] = wp
    p = subprocess.run([sys.executable, "-m", "rdma.fabric", "exec", "--",
                        str(adopt_race)], env=env, capture_output=True,
                       text=True, timeout=120)
    if wp == "none":
        assert p.returncode == 1 and "words lost" in p.stdout, \
            p.stdout + p.stderr
    else:
        assert p.returncode == 0, p.stdout + p.stderr
        assert "adopted OK" in p.stdout


if __name__ == "__main__":
    print(json.dumps(checks()))
