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
import ctypes
import errno
import mmap
import os
import subprocess
import sys

import pytest

import fabric_helpers as fh

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
