"""rdma.SysError: an OSError carrying errno and the failing C function."""
import errno
import pickle

import rdma


def test_syserror_is_oserror_with_func():
    e = rdma.SysError(errno.EINVAL, "ibv_modify_qp", "bad state")
    assert isinstance(e, OSError) and isinstance(e, rdma.RDMAError)
    assert e.errno == errno.EINVAL and e.func == "ibv_modify_qp"
    assert "ibv_modify_qp" in str(e) and "bad state" in str(e)
    assert "Invalid argument" in str(e)


def test_syserror_pickles():
    e = rdma.SysError(errno.ENOMEM, "ibv_reg_mr", "no memory left")
    f = pickle.loads(pickle.dumps(e))
    assert (f.errno, f.func, str(f)) == (e.errno, e.func, str(e))


def test_a_verb_the_provider_lacks_is_eopnotsupp_naming_it(tmp_path):
    """A provider that leaves an optional op NULL gets, from
    pyrdma_provider_fill (csrc/provider_stubs.c), a stub that fails with
    EOPNOTSUPP naming the verb, so the object model never checks an op for
    NULL.  Both built-in providers now implement every op (the fabric has
    memory windows, resize, the CM), so the stubs are checked on a table
    with none, compiled from the real sources."""
    import os
    import subprocess
    from fabric_helpers import build_c
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    csrc = os.path.join(root, "csrc")
    exe = build_c("provider_stubs_check.c", tmp_path / "stubs_check",
                  "stdio.h", ("-Wall", "-Wextra", "-Werror", "-I" + csrc,
                              "-I" + os.path.join(root, "rdma", "include"),
                              os.path.join(csrc, "provider_stubs.c"),
                              os.path.join(csrc, "status.c")), ())
    out = subprocess.run([exe], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split("\n")
    got = {line.split()[0]: line.split()[1:] for line in out if line}
    assert got == {
        "alloc_mw": ["-1", str(errno.EOPNOTSUPP), "ibv_alloc_mw"],
        "resize_cq": ["-1", str(errno.EOPNOTSUPP), "ibv_resize_cq"],
        "cm_create_channel": ["-1", str(errno.EOPNOTSUPP),
                              "rdma_create_event_channel"],
    }
