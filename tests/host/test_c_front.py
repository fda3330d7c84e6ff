"""Unmodified C verbs programs on the software fabric (``ucx0``) through the
verbs front end (``python -m rdma.fabric exec``), between real processes.

What runs: rdma-core's ``ibv_devices``, ``ibv_devinfo -v`` and the four
``ibv_*_pingpong`` tools (two C processes, over UCX shared memory and over
TCP, with a GID and with LIDs), interop of ``ibv_rc_pingpong`` with
``python -m rdma pingpong`` both ways, and perftest's ``ib_*`` tools.  The
pingpongs exchange their addresses over TCP on 127.0.0.1, as they always
do.  Every process is bounded by a timeout and killed at the end.
"""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rdma import fabric

import fabric_helpers as fh

T = 60          # seconds for any one process
IBV_TOOLS = ("ibv_devices", "ibv_devinfo", "ibv_rc_pingpong",
             "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong")
SHM = {"UCX_TLS": "shm,self"}
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}


_REASON = fh.c_front_missing(IBV_TOOLS)
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def env(tmp_path):
    """The environment of one test's processes: a private rendezvous
    directory, so that they see each other and no one else."""
    return fh.rendezvous_env(tmp_path)


on_fabric = fh.on_fabric


def run(cmd, env, timeout=T):
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout, env=env)


free_port = fh.free_port
listening = fh.listening
popen = fh.popen
kill = fh.kill


def pair(server_cmd, client_cmd, port, env, client_env=None, netns=None):
    """fabric_helpers.pair with this file's timeout."""
    return fh.pair(server_cmd, client_cmd, port, env, client_env=client_env,
                   netns=netns, timeout=T)


check_pingpong = fh.check_pingpong


@contextlib.contextmanager
def running(args, port, env):
    """The C tool *args* on the fabric as a server (on *port*) and as its
    client (to 127.0.0.1), running; yields (server, client), and kills
    both at the end."""
    srv = popen(on_fabric(*args), env)
    cli = None
    try:
        fh.wait_listening(srv, port, T)
        cli = popen(on_fabric(*args, "127.0.0.1"), env)
        yield srv, cli
    finally:
        kill(srv)
        if cli is not None:
            kill(cli)


def wait_counters(cli, pids, ready, what, every=0.02):
    """The key-page counters of the processes *pids* once ``ready(*their
    counters)`` is true; fail with *what* after T seconds, or with the
    client *cli*'s output if it ends first."""
    deadline = time.monotonic() + T
    while True:
        st = [fh.node_stats(pid) for pid in pids]
        if all(st) and ready(*st):
            return st
        assert cli.poll() is None, cli.communicate()
        assert time.monotonic() < deadline, (what, st)
        time.sleep(every)


# ---- the libraries ---------------------------------------------------

def _dynsyms(path, *flags):
    out = subprocess.run(["nm", "-D", *flags, path], capture_output=True,
                         text=True, timeout=T, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def test_fabric_library_exports_only_its_interface():
    """librdma_fabric.so: no Python; the provider, its version, the table
    of settings and the connection manager's fab_cm_* (csrc/fabric_lib.h)
    are all it exports."""
    lib = fabric.library_path(fabric.FABRIC_LIBRARY)
    defined = set(_dynsyms(lib, "--defined-only"))
    cm = {s for s in defined if s.startswith("fab_cm_")}
    assert defined - cm == {"pyrdma_fabric_provider",
                            "pyrdma_fabric_version",
                            "pyrdma_fabric_settings",
                            "pyrdma_fabric_setting_check",
                            "pyrdma_fabric_setting_closest"}
    assert "fab_cm_create_id" in cm and "fab_cm_init_qp_attr" in cm
    undefined = _dynsyms(lib, "--undefined-only")
    assert not [s for s in undefined if s.startswith(("Py", "_Py"))]
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True,
                         timeout=T).stdout
    assert "python" not in ldd.lower() and "libucp" not in ldd, ldd


def test_front_end_exports_only_verbs():
    """librdma_fabric_verbs.so: the ibv_* entry points, each under
    libibverbs' version, and librdmacm's rdma_* and rsocket calls under
    librdmacm's (tests/host/test_c_cm.py, test_c_rsocket.py), needing the
    fabric library and nothing of Python."""
    lib = fabric.library_path()
    defined = _dynsyms(lib, "--defined-only")
    funcs = [s for s in defined if not s.startswith(("IBVERBS_", "RDMACM_"))]
    assert funcs and all(
        re.fullmatch(r"_?ibv_\w+@@IBVERBS_[0-9A-Z_.]+", s) or
        re.fullmatch(r"rdma_\w+@@RDMACM_1\.[0-9]+", s) or
        re.fullmatch(r"r(socket|bind|listen|accept|connect|shutdown|close|"
                     r"recv|recvfrom|recvmsg|send|sendto|sendmsg|read|readv|"
                     r"write|writev|poll|select|getpeername|getsockname|"
                     r"setsockopt|getsockopt|fcntl|iomap|iounmap|iowrite)"
                     r"@@RDMACM_1\.0", s) for s in funcs), \
        funcs
    assert "ibv_get_device_list@@IBVERBS_1.1" in funcs
    assert "ibv_create_comp_channel@@IBVERBS_1.0" in funcs
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True,
                         timeout=T).stdout
    assert fabric.FABRIC_LIBRARY in ldd and "python" not in ldd.lower(), ldd
    assert not [s for s in _dynsyms(lib, "--undefined-only")
                if s.startswith(("Py", "_Py"))]


def test_import_has_no_side_effects():
    """import rdma.fabric loads neither library nor UCX and leaves the
    environment alone."""
    code = ("import os; before = dict(os.environ); import rdma.fabric; "
            "maps = open('/proc/self/maps').read(); "
            "print(dict(os.environ) == before, 'libucp' in maps, "
            "'librdma_fabric' in maps)")
    res = run([sys.executable, "-P", "-c", code], dict(os.environ))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "False"], res.stdout


def test_preload_prints_the_front_end(env):
    res = run([sys.executable, "-P", "-m", "rdma.fabric", "preload"], env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == fabric.library_path()
    assert os.path.isabs(res.stdout.strip())


def test_exec_keeps_an_existing_preload(env):
    # (what is there already, e.g. the ASan runtime of the ASan tier, stays)
    before = env.get("LD_PRELOAD", "").split() + ["libfoo-absent.so"]
    env = dict(env, LD_PRELOAD=" ".join(before))
    res = run(on_fabric("sh", "-c", "echo $LD_PRELOAD"), env)
    # ld.so warns about the absent library, and runs sh anyway
    assert res.stdout.split() == before + [fabric.library_path()]


@pytest.mark.parametrize("argv,rc,msg", [
    ([], 2, "no command given"),
    (["--", "/nonexistent/prog"], 127, "cannot run '/nonexistent/prog'"),
])
def test_exec_bad_command(env, argv, rc, msg):
    res = run([sys.executable, "-P", "-m", "rdma.fabric", "exec", *argv], env)
    assert res.returncode == rc and msg in res.stderr, res.stderr


# ---- devices ---------------------------------------------------------

def test_ibv_devices_lists_ucx0(env):
    res = run(on_fabric("ibv_devices"), env)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^\s+ucx0\s+[0-9a-f]{16}$", res.stdout, re.M), \
        res.stdout


def test_ibv_devices_without_front_end_has_no_ucx0(env):
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    res = run(["ibv_devices"], env)
    assert "ucx0" not in res.stdout


@pytest.mark.parametrize("setting,why", [
    ({"RDMA_UCX_LIBRARY": "/nonexistent/libucp.so.0"},
     "cannot load /nonexistent/libucp.so.0"),
    ({"RDMA_UCX_DIR": None}, "has mode 0777: it must be 0700"),
], ids=["no-ucx", "open-rendezvous-dir"])
def test_fabric_unavailable(env, tmp_path, setting, why):
    """When the fabric cannot start, the program sees no ucx0 (its other
    devices stay), and one line on stderr says why."""
    if setting.get("RDMA_UCX_DIR", "") is None:
        d = tmp_path / "open"
        d.mkdir()
        d.chmod(0o777)
        setting = {"RDMA_UCX_DIR": str(d)}
    env.update(setting)
    res = run(on_fabric("ibv_devices"), env)
    assert res.returncode == 0, res.stderr
    assert "ucx0" not in res.stdout
    assert "rdma-fabric-verbs: no ucx0: " in res.stderr, res.stderr
    assert why in res.stderr, res.stderr
    res = run(on_fabric("ibv_devinfo", "-d", "ucx0"), env)
    assert res.returncode != 0
    assert "ucx0" in res.stdout + res.stderr


def test_ucx_sees_only_real_devices(env):
    """UCX's own InfiniBand transport (libuct_ib) lists devices while the
    fabric starts: it gets the real ones only, never ucx0 (which would make
    the fabric run on itself)."""
    import glob
    if not glob.glob("/usr/lib/*/ucx/libuct_ib.so*"):
        pytest.skip("UCX's InfiniBand transport (libuct_ib) is not installed")
    env = dict(env, RDMA_FABRIC_VERBS_DEBUG="1")
    res = run(on_fabric("ibv_devices"), env)
    assert res.returncode == 0, res.stderr
    assert "ucx0" in res.stdout
    assert "ibv_get_device_list from UCX: the real devices only" in \
        res.stderr, res.stderr


def test_ibv_devinfo_verbose(env):
    res = run(on_fabric("ibv_devinfo", "-v", "-d", "ucx0"), env)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    for pattern in (r"hca_id:\s+ucx0", r"transport:\s+InfiniBand",
                    r"fw_ver:\s+ucx-\d+\.\d+\.\d+", r"phys_port_cnt:\s+1",
                    r"max_qp_wr:\s+\d+", r"atomic_cap:\s+ATOMIC_HCA",
                    r"state:\s+PORT_ACTIVE", r"active_mtu:\s+4096",
                    r"port_lid:\s+[1-9]\d*", r"link_layer:\s+InfiniBand",
                    r"GID\[\s*0\]:\s+fe80:0000:0000:0000:"):
        assert re.search(pattern, out), (pattern, out)


def test_ibv_devinfo_unknown_device(env):
    res = run(on_fabric("ibv_devinfo", "-d", "ucx9"), env)
    assert res.returncode != 0
    assert "ucx9" in res.stdout + res.stderr


# ---- one C program: objects, fds, missing verbs, errors ---------------

PROBE_EXPECTED = {
    "lid_nonzero": "1",
    "async_nonblock": "-1 Resource temporarily unavailable",
    "cq_fields": "1 1 1",
    "cq_event_nonblock": "-1 Resource temporarily unavailable",
    "destroy_busy_channel": "Device or resource busy",
    "mr_fields": "1 1 1 1",
    "create_cq_ex_pd": "1 Operation not supported",
    "qp_fields": "1 1 1 1 1",
    "qp_to_qp_ex": "1 Operation not supported",
    "post_send_reset": "1",
    "qp_state_rts": "1",
    "channel_readable": "1",
    "cq_event": "0 1 1",
    "wc7": "success 1",
    "wc8": "success 1",
    "payload": "fabric!",
    # what rxe gives for a SEND whose source has a bad lkey
    "bad_lkey": "local QP operation error",
    # extended CQ (ibv_start_poll...) and QP (ibv_create_qp_ex)
    "cq_ex_timestamp": "1 Operation not supported",
    "cq_ex_wc21": "success 128 16 1",       # IBV_WC_RECV, 16 bytes
    "cq_ex_wc22": "success 0 0 1",          # IBV_WC_SEND
    # two threads poll one CQ (and it is resized 4 times meanwhile): 2000
    # SENDs and their 2000 receives, each once, none failed
    "mt_poll": "4000 0 0 1",
    # the ibv_wr_* API (ibv_qp_to_qp_ex)
    "qp_ex_tso": "1 Operation not supported",
    "qp_to_qp_ex_ops": "1",
    "wr_complete": "0",
    "wr_api_wc30": "success",               # the receive of the SEND
    "wr_api_wc31": "success",               # RDMA WRITE
    "wr_api_wc32": "success",               # inline SEND
    "wr_api_wc33": "success",               # FETCH_AND_ADD
    # written | received | counter after | value fetched
    "wr_api_data": "written by wr_*|inline!|42|40",
    "wr_not_enabled": "Invalid argument",
    # a bad rkey: the requester's completion, the responder's async event
    "bad_rkey": "remote access error",
    "async_readable": "1",
    "async_event": "0 local access violation work queue error 1",
    # fork(): the child's inherited post/poll/destroy fail with EINVAL, its
    # own context works; the parent's objects go on
    "fork_child": "1 1 1 1",
    "fork_parent": "1",
    "busy": ", ".join(["Device or resource busy"] * 2),
    "closed": "1",
}


def test_probe_program(env, tmp_path):
    """tests/host/c_front_probe.c, compiled against libibverbs: public
    fields of the objects, O_NONBLOCK on the async and channel fds, poll()
    on a channel fd, ibv_get_cq_event's CQ and context, EOPNOTSUPP for
    parent domains, TSO and ibv_qp_to_qp_ex, a WR refused in
    RESET, a loopback SEND by LID, a bad lkey's error completion,
    ibv_create_cq_ex (standard fields; timestamps EOPNOTSUPP) polled with
    ibv_start_poll/ibv_next_poll, ibv_create_qp_ex, two threads polling one
    CQ that the main thread resizes (each completion once), the ibv_wr_* API (a
    WRITE, an inline SEND and a FETCH_AND_ADD in one wr_complete; an op
    the QP was not created for: EINVAL), a bad rkey's REM_ACCESS_ERR and
    the responder's IBV_EVENT_QP_ACCESS_ERR through poll() on the async fd,
    fork() (a child's inherited objects refuse verbs, its own context
    works, the parent's objects go on), and EBUSY for a CQ or PD still in
    use."""
    exe = fh.build_c("c_front_probe.c", tmp_path / "probe",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == PROBE_EXPECTED


MW_EXPECTED = {
    "caps": "1 1 1",
    "mw1_fields": "1 1 1",
    "bind1": "0 1 success",
    "write_in": "success window!",
    "rebind": "success 1",
    "write_old_key": "remote access error",
    "bind2": "0 success",
    "write2": "success type 2!",
    "write2_outside": "remote access error",
    "bind2_again": "0 success",
    "send_inv": "success",
    "recv_inv": "success 1 1",
    "write_invalidated": "remote access error",
    "wr_bind": "0 success 1",
    "wr_write": "success wr api!",
    "wr_local_inv": "0 success",
    "wr_write_after_inv": "remote access error",
    "bind_no_mw_bind": "0 memory management operation error",  # MW_BIND_ERR
    "bind_for_dereg": "0 success",
    "dereg_bound": "Invalid argument",
    "dereg_unbound": "0 success 0",
    "dealloc_pd_busy": "Device or resource busy",
    "alloc_type3": "1 Invalid argument",
}


def test_memory_windows_c(env, tmp_path):
    """tests/host/c_front_mw.c, an unmodified libibverbs program: type 1
    windows (ibv_alloc_mw, ibv_bind_mw, a rebind kills the old rkey), type
    2 (IBV_WR_BIND_MW by ibv_post_send, an access past the window refused,
    SEND_WITH_INV with IBV_WC_WITH_INV and the rkey), ibv_wr_bind_mw and
    ibv_wr_local_inv, a bind to an MR without IBV_ACCESS_MW_BIND
    (MW_BIND_ERR), ibv_dereg_mr of an MR with a window bound (EINVAL until
    it is unbound), ibv_dealloc_pd with a window left (EBUSY), a type 3
    window (EINVAL)."""
    exe = fh.build_c("c_front_mw.c", tmp_path / "mw",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == MW_EXPECTED


REREG_EXPECTED = {
    "write_before": "success",
    "access": "0 1",                    # keys kept, as rxe keeps them
    "write_denied": "remote access error before!",
    "access_back": "0 success",
    "translation": "0 1 1 1",           # new keys for a new range
    "write_new": "success newrng",
    "write_old_key": "remote access error oldrng!",
    "pd": "0 1",
    "write_old_pd": "remote access error pd-one",
    "dealloc_new_pd": "Device or resource busy",
    "pd_back": "0 1 0",
    "bad_flags": "-1 Invalid argument",
    "access_without_flag": "-1 Invalid argument",
    "no_range": "-1 Invalid argument",
    "no_flags": "-4 Invalid argument 1",
}


def test_rereg_mr_c(env, tmp_path):
    """tests/host/c_front_rereg.c, an unmodified libibverbs program:
    ibv_rereg_mr with a new access (keys kept, a WRITE no longer granted
    is REM_ACCESS_ERR and lands nowhere), a new range (new keys; the old
    rkey reaches neither range), a new PD (mr->pd follows, the old PD's QP
    is refused, the new PD is busy while the MR is in it); libibverbs'
    input errors (IBV_REREG_MR_ERR_INPUT) and the device's
    (IBV_REREG_MR_ERR_CMD)."""
    exe = fh.build_c("c_front_rereg.c", tmp_path / "rereg",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == REREG_EXPECTED


SQD_EXPECTED = {
    "sqd": "0 1",
    "posted_in_sqd": "0 0 0 0",         # taken, nothing sent or completed
    "rts": "0",
    "completed": "2 1 2 success success",
    "data": "held-wr inline!",
    "sqd2": "0 1",
    "err": "0 0 0",
    "flushed": "2 3 4 Work Request Flushed Error Work Request Flushed "
               "Error 0",
}


def test_post_send_in_sqd_c(env, tmp_path):
    """tests/host/c_front_sqd.c, an unmodified libibverbs program: send WRs
    posted while the QP is in SQD are taken and held (an inline WR's data
    copied then), go in order on SQD -> RTS, and flush on a move to ERR."""
    exe = fh.build_c("c_front_sqd.c", tmp_path / "sqd",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == SQD_EXPECTED


ODP_EXPECTED = {
    # IBV_ODP_SUPPORT; RC: send, recv, write, read, atomic, SRQ recv; UC:
    # send, recv, write, SRQ recv; UD: send, recv, SRQ recv
    "odp_caps": "0x1 0x3f 0x27 0x23",
    "connect": "0",                     # ON_DEMAND in qp_access_flags
    "write": "success odp-write",
    "read": "success odp-read",
    "advise": "0 0 0",
    "advise_errors": "Invalid argument|Invalid argument|Invalid argument|"
                     "Invalid argument",
}


def test_on_demand_paging_c(env, tmp_path):
    """tests/host/c_front_odp.c, an unmodified libibverbs program: the
    ODP caps in ibv_query_device_ex, an IBV_ACCESS_ON_DEMAND MR over
    memory not touched yet written and read through, ibv_advise_mr's
    prefetch (its advices; a range outside the MR, a non-ODP MR, unknown
    flags, no s/g element: EINVAL)."""
    exe = fh.build_c("c_front_odp.c", tmp_path / "odp",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == ODP_EXPECTED


IMPORT_EXPECTED = {
    "import_device": "1",
    "import_pd": "1 1",
    "import_mr": "1 1 1 1",     # no address; length and keys the MR's
    "bad_pd_handle": "1 Invalid argument",
    "bad_mr_handle": "1 Invalid argument",
    "write": "success imported",
    "busy": "Device or resource busy Device or resource busy",
    "close_imported": "0",
    "close": "0 0 0",
}


def test_import_context_c(env, tmp_path):
    """tests/host/c_front_import.c, an unmodified libibverbs program:
    ibv_import_device on a dup of a context's cmd_fd, ibv_import_pd and
    ibv_import_mr by handle, traffic through the imported objects, the
    originals busy while imported, unknown handles EINVAL; unimported,
    both contexts and the originals close.  (Before: EOPNOTSUPP.)"""
    exe = fh.build_c("c_front_import.c", tmp_path / "import",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == IMPORT_EXPECTED


MCAST_EXPECTED = {
    "limits": "1 1 1",
    "attach0": "0",
    "attach1": "0",
    "first": "1 1 1",           # each attached QP once, GRH DGID the group's
    "detach1": "0",
    "second": "1 0 1",
    "attach_rc": "Invalid argument",
    "attach_unicast_gid": "Invalid argument",
    "attach_unicast_lid": "Invalid argument",
    "detach_not_attached": "Invalid argument",
    "destroy_attached": "Device or resource busy",
}


def test_multicast_c(env, tmp_path):
    """tests/host/c_front_mcast.c, an unmodified libibverbs program: two UD
    QPs attached to a group (ibv_attach_mcast) get a datagram sent to it,
    with the group's GID as the GRH's DGID; after ibv_detach_mcast only the
    other does; EINVAL for an RC QP, a unicast GID or LID, and detaching a
    QP that is not attached; EBUSY destroying a QP still attached."""
    exe = fh.build_c("c_front_mcast.c", tmp_path / "mcast",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == MCAST_EXPECTED


def test_pyverbs(env):
    """rdma-core's pyverbs (Debian's python3-pyverbs, with Debian's own
    /usr/bin/python3) on ucx0: tests/host/c_front_pyverbs.py connects two
    RC QPs by LID and checks a SEND and an RDMA WRITE."""
    py = "/usr/bin/python3"
    if not os.path.exists(py) or run([py, "-c", "import pyverbs.device"],
                                     env).returncode != 0:
        pytest.skip("pyverbs is not installed (Debian package "
                    "python3-pyverbs)")
    script = os.path.join(os.path.dirname(__file__), "c_front_pyverbs.py")
    res = run(on_fabric(py, script), env)
    assert res.returncode == 0 and res.stdout.strip() == "ok", \
        res.stdout + res.stderr


def _pyverbs_python(env):
    """Debian's /usr/bin/python3 if it has pyverbs, else skip."""
    py = "/usr/bin/python3"
    if not os.path.exists(py) or run([py, "-c", "import pyverbs.device"],
                                     env).returncode != 0:
        pytest.skip("pyverbs is not installed (Debian package "
                    "python3-pyverbs)")
    return py


def test_pyverbs_device_checks(env):
    """What rdma-core's provider tests (test_device, test_cq, test_cqex,
    test_shared_pd) check of a device, through pyverbs: a non-zero vendor
    id, phys_port_cnt_ex equal to phys_port_cnt, a GID table with empty
    entries (ENODATA from query_gid_ex, left out of query_gid_table),
    EINVAL for a CQ larger than max_cqe or with a comp_vector past
    num_comp_vectors (plain and extended), a cmd_fd that is a real
    descriptor, and a context imported from a dup of it."""
    py = _pyverbs_python(env)
    script = os.path.join(os.path.dirname(__file__),
                          "c_front_pyverbs_device.py")
    res = run(on_fabric(py, script), env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == {
        "vendor_id_set": "1",
        "phys_port_cnt": "1 1 1",
        "gid_tbl_len_over_1": "1",
        "gid_ex_empty": "ENODATA",
        "gid_empty": "0000:0000:0000:0000:0000:0000:0000:0000",
        "gid_table": "1",
        "gid_table_too_small": "EINVAL",
        "num_comp_vectors": "1",
        "cq_too_big": "EINVAL",
        "cq_bad_vector": "EINVAL",
        "cq_last_vector": "ok",
        "cqex_too_big": "EINVAL",
        "cqex_bad_vector": "EINVAL",
        "cmd_fd_dup": "ok",
        "import_device": "ok",
    }, res.stdout + res.stderr


TEARDOWN_EXPECTED = {
    "cq_before_qp": "Device or resource busy",
    "pd_before_mr": "Device or resource busy",
    "dereg_freed_buffer": "0",
    "pd_before_qp": "Device or resource busy",
    "close_with_objects": "0",
    "dereg_unmapped": "0 0",                # no byte of the new mapping
    "after_unmapped": "0 0",
    # a peer's WRITE to the MR of a device closed with it alive: refused,
    # no byte lands (the kernel deregisters what a closed context left)
    "close_with_mr": "0",
    "write_after_close": "remote access error 0",
    "get_cq_event_signal": "-1 Interrupted system call",
    "destroy_after": "0 0 0",
    "done": "1",
}


def test_teardown_orders(env, tmp_path):
    """tests/host/c_front_teardown.c: the teardown orders libibverbs
    allows get what a NIC gives -- EBUSY for a CQ before its QP and a PD
    before its MR or QP, a buffer freed before ibv_dereg_mr (and one
    unmapped, its address mapped again: the new mapping is untouched), the
    device
    closed with a QP, CQ and PD alive, EINTR from a blocked
    ibv_get_cq_event when a signal handler runs, and the device list
    released with free() (as qperf does) -- with glibc's heap checks on,
    never a crash or a corrupted heap."""
    exe = fh.build_c("c_front_teardown.c", tmp_path / "teardown",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs",))
    res = run(on_fabric(exe), dict(env, MALLOC_CHECK_="3",
                                   MALLOC_PERTURB_="165"))
    assert res.returncode == 0, (res.returncode, res.stdout + res.stderr)
    got = dict(line.split("=", 1) for line in res.stdout.splitlines())
    assert got == TEARDOWN_EXPECTED, res.stdout + res.stderr


# ---- C to C ----------------------------------------------------------

PINGPONGS = [
    # (tool, extra arguments)
    ("ibv_rc_pingpong", []),
    ("ibv_rc_pingpong", ["-e"]),            # completion channel, poll()
    ("ibv_rc_pingpong", ["-N"]),            # the ibv_wr_* post API
    ("ibv_uc_pingpong", []),
    ("ibv_ud_pingpong", []),
    ("ibv_srq_pingpong", ["-q", "4"]),
]


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("gid", [True, False], ids=["gid", "lid"])
@pytest.mark.parametrize("tool,extra", PINGPONGS,
                         ids=[" ".join([t] + e) for t, e in PINGPONGS])
def test_pingpong_c_to_c(env, tool, extra, gid, tls):
    env.update(SHM if tls == "shm" else TCP)
    port = free_port()
    iters = 200
    args = [tool, "-d", "ucx0", "-p", str(port), "-n", str(iters), "-c",
            *extra, *(["-g", "0"] if gid else [])]
    res = pair(on_fabric(*args), on_fabric(*args, "127.0.0.1"), port, env)
    srv, cli = check_pingpong(res, iters)
    # two fabric nodes: distinct LIDs; with -g distinct GIDs in fe80::/64
    # (without, the tools send none: "::")
    assert srv.group(1) != cli.group(1)
    if gid:
        assert srv.group(3) != cli.group(3)
        assert srv.group(3).startswith("fe80::")
    else:
        assert srv.group(3) == cli.group(3) == "::"


#: the key-page counters of both nodes that count a stream's operations,
#: whichever path they take (requests, rings, one-sided, cross-memory)
STREAM_COUNTERS = ("am_req", "ring_req", "fast_write", "cma_write")


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("tool", ["ib_send_bw", "ib_write_bw"])
def test_peer_killed_mid_transfer(env, monkeypatch, tool, tls):
    """A C process killed (SIGKILL) while its peer streams SENDs (through
    the peer's receive queue) or WRITEs (one-sided, into its adopted
    buffer) to it: the peer's outstanding WRs fail with RETRY_EXC_ERR
    (perftest: "Failed status 12") and it exits; it does not hang.

    A streaming client always has WRs outstanding.  (A program that only
    waits on receives when its peer dies waits, as on a NIC: nothing in
    RC tells a receiver that its sender is gone; docs/fabric.rst.)"""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian package perftest)")
    monkeypatch.setenv("RDMA_UCX_DIR", env["RDMA_UCX_DIR"])
    env.update(SHM if tls == "shm" else TCP)
    port = free_port()
    args = [tool, "-d", "ucx0", "-p", str(port), "-n", "100000000"]
    with running(args, port, env) as (srv, cli):
        wait_counters(cli, [srv.pid, cli.pid],
                      lambda *st: sum(s[k] for s in st
                                      for k in STREAM_COUNTERS) > 1000,
                      "no traffic")
        kill(srv)
        t0 = time.monotonic()
        out, err = cli.communicate(timeout=T)
        took = time.monotonic() - t0
    assert cli.returncode not in (0, None), out + err
    assert "Failed status 12:" in out + err, out + err
    assert took < 15, took


@pytest.fixture
def netns_pair():
    """Two network namespaces joined by a veth: 198.51.100.1 and .2."""
    with fh.netns_pair("rdmac") as pair:
        yield pair


@pytest.mark.parametrize("gid", [True, False], ids=["gid", "lid"])
def test_pingpong_two_network_namespaces(env, netns_pair, gid):
    """Two "hosts" (network namespaces over a veth, TCP): ibv_rc_pingpong
    with each node's listener on its host's address (RDMA_UCX_ADDR)."""
    na, nb = netns_pair
    env.update(UCX_TLS="tcp", RDMA_UCX_ADDR="198.51.100.1")
    env_b = dict(env, RDMA_UCX_ADDR="198.51.100.2")
    port = free_port()
    args = ["ibv_rc_pingpong", "-d", "ucx0", "-p", str(port), "-n", "200",
            "-c", *(["-g", "0"] if gid else [])]
    res = pair(["ip", "netns", "exec", na, *on_fabric(*args)],
               ["ip", "netns", "exec", nb, *on_fabric(*args, "198.51.100.1")],
               port, env, client_env=env_b, netns=na)
    srv, cli = check_pingpong(res, 200)
    if gid:
        # the GUID (GID's low half) holds the node's IPv4 address
        assert srv.group(3).startswith("fe80::c633:6401:")
        assert cli.group(3).startswith("fe80::c633:6402:")


# ---- C and Python ----------------------------------------------------

@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("gid", [True, False], ids=["gid", "lid"])
@pytest.mark.parametrize("c_is_server", [True, False],
                         ids=["c-server", "py-server"])
@pytest.mark.parametrize("mode", ["rc", "uc", "ud", "srq"])
def test_pingpong_c_and_python(env, mode, c_is_server, gid, tls):
    """ibv_<mode>_pingpong and python -m rdma pingpong <mode> (which speaks
    the C tools' exchange), each as server and as client."""
    env.update(SHM if tls == "shm" else TCP, RDMA_PROVIDER="ucx")
    port = free_port()
    iters = 200
    g = ["-g", "0"] if gid else []
    q = ["-q", "4"] if mode == "srq" else []
    c = [f"ibv_{mode}_pingpong", "-d", "ucx0", "-p", str(port), "-n",
         str(iters), *q, *g]
    py = [sys.executable, "-P", "-m", "rdma", "pingpong", mode, "-p",
          str(port),
          "-n", str(iters), "--timeout", str(T // 2), *q, *g]
    if c_is_server:
        res = pair(on_fabric(*c), py + ["127.0.0.1"], port, env)
    else:
        res = pair(py, on_fabric(*c, "127.0.0.1"), port, env)
    check_pingpong(res, iters)


# ---- perftest --------------------------------------------------------

PERFTEST = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw",
            "ib_write_lat", "ib_send_lat"]


@pytest.mark.parametrize("tls", ["shm", "tcp"])
@pytest.mark.parametrize("tool", PERFTEST)
def test_perftest(env, tool, tls):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian package perftest)")
    env.update(SHM if tls == "shm" else TCP)
    port = free_port()
    for _ in range(3):
        args = [tool, "-d", "ucx0", "-p", str(port), "-n", "200"]
        res = pair(on_fabric(*args), on_fabric(*args, "127.0.0.1"), port, env)
        # perftest times with the CPU's cycle counter, whose rate it measures
        # first; on a loaded machine that measure can fail ("Correlation
        # coefficient r^2: ... < 0.9", "Can't produce a report"): the
        # transfer was fine, only perftest's clock was not; run it again
        if not any("Can't produce a report" in out + err
                   for _, out, err in res):
            break
        port = free_port()
    for rc, out, err in res:
        assert rc == 0, out + err
    out = res[1][1]
    # the result row: message size, then the iteration count
    assert re.search(r"^\s*\d+\s+200\s+[\d.]+", out, re.M), out


@pytest.mark.parametrize("path", ["adopted", "cma"])
def test_perftest_writes_go_on_into_a_stopped_server(env, monkeypatch, path):
    """ib_write_bw's server is stopped (SIGSTOP) while its client streams
    WRITEs into the server's own ibv_reg_mr buffer: the WRITEs go on
    (docs/fabric.rst "A stopped target"): into the adopted buffer (the
    default), or by cross-memory attach (RDMA_UCX_ADOPT=0), and both
    finish normally once the server goes on."""
    if shutil.which("ib_write_bw") is None:
        pytest.skip("ib_write_bw is not installed (Debian package perftest)")
    from fabric_helpers import node_stats
    env.update(SHM)
    env["RDMA_UCX_CMA_MIN"] = "0"       # (root's default would be 64 KiB)
    env["RDMA_UCX_ADOPT"] = "1" if path == "adopted" else "0"
    counter = "fast_write" if path == "adopted" else "cma_write"
    port = free_port()
    args = ["ib_write_bw", "-d", "ucx0", "-p", str(port), "-s", "4096",
            "-D", "4"]
    monkeypatch.setenv("RDMA_UCX_DIR", env["RDMA_UCX_DIR"])   # node_stats
    with running(args, port, env) as (srv, cli):
        wait_counters(cli, [cli.pid], lambda c: c[counter] > 0,
                      f"no {counter}", every=0.01)
        os.kill(srv.pid, signal.SIGSTOP)
        try:
            n0 = node_stats(cli.pid)[counter]
            time.sleep(2)
            n1 = node_stats(cli.pid)[counter]
            srv_stats = node_stats(srv.pid)
        finally:
            os.kill(srv.pid, signal.SIGCONT)
        assert n1 - n0 > 100, (n0, n1)
        out, err = cli.communicate(timeout=T)
        assert cli.returncode == 0, out + err
        sout, serr = srv.communicate(timeout=T)
        assert srv.returncode == 0, sout + serr
        assert srv_stats["am_req"] == 0, srv_stats
        assert (srv_stats["adopted"] > 0) == (path == "adopted"), srv_stats


ADOPT_TOOLS = {"ib_write_bw": "fast_write", "ib_read_bw": "fast_read",
               "ib_atomic_bw": "fast_atomic"}


@pytest.mark.parametrize("tool", sorted(ADOPT_TOOLS))
def test_perftest_adopted_memory_goes_one_sided(env, monkeypatch, tool):
    """perftest's own buffers (``ibv_reg_mr`` of page-aligned heap or mmap
    memory) are adopted into UCX memory (RDMA_UCX_ADOPT=1, the default):
    the client's WRITEs, READs or atomics take the one-sided fast path and
    the server's node executes no request for them."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian package perftest)")
    monkeypatch.setenv("RDMA_UCX_DIR", env["RDMA_UCX_DIR"])
    env.update(SHM, RDMA_UCX_ADOPT="1")
    port = free_port()
    # 2 s of traffic: about 1,000,000 WRITEs on this 2-core machine, the
    # check needs 10,000 (4 s only made the test wait longer)
    args = [tool, "-d", "ucx0", "-p", str(port), "-D", "2"]
    with running(args, port, env) as (srv, cli):
        s, c = wait_counters(cli, [srv.pid, cli.pid],
                             lambda s, c: c[ADOPT_TOOLS[tool]] > 10000,
                             "not one-sided", every=0.05)
        assert s["adopted"] >= 1 and c["adopted"] >= 1, (s, c)
        assert s["am_req"] + s["ring_req"] == 0, s
        out, err = cli.communicate(timeout=T)
        assert cli.returncode == 0, out + err


#: Values each process on the fabric has of its own (its node's GUID, LID
#: and GID): masked, tabs kept, to compare two processes' devinfo.
_OWN_VALUES = re.compile(r"^(\t+(?:node_guid|sys_image_guid|port_lid|"
                         r"GID\[\s*\d+\]):\t+).*$", re.M)


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_ibtool_devinfo_is_ibv_devinfo_text(env, verbose):
    """``ibtool devinfo [-v]`` prints ibv_devinfo's text tab for tab,
    the extended section of -v included (it had one tab too few on every
    device line and on the port line, and no extended section)."""
    ref = run(on_fabric("ibv_devinfo", *verbose, "-d", "ucx0"), env)
    ours = run([sys.executable, "-m", "rdma", "devinfo", *verbose, "-d",
                "ucx0", "--provider", "ucx"], env)
    assert ref.returncode == 0 and ours.returncode == 0, \
        ref.stderr + ours.stderr
    want = _OWN_VALUES.sub(r"\1X", ref.stdout).splitlines()
    got = _OWN_VALUES.sub(r"\1X", ours.stdout).splitlines()
    assert len(want) > (60 if verbose else 15)
    assert got == want


def test_one_wr_write_is_cheap(env, tmp_path):
    """perftest's default, one 8-byte WRITE per ``ibv_post_send`` into
    adopted memory of a same-host peer, takes the one-WR shortcut
    (post_quick in req.c): the fabric's ``post_send`` executes at most 450
    instructions per call, counted by callgrind (about 300 with it, 720
    before it: the post lock, the hold, the SQ and ACK bookkeeping of the
    general way)."""
    if shutil.which("ib_write_bw") is None:
        pytest.skip("ib_write_bw is not installed (Debian package perftest)")
    if shutil.which("valgrind") is None or \
            shutil.which("callgrind_annotate") is None:
        pytest.skip("valgrind is not installed")
    if os.environ.get("RDMA_TEST_ASAN"):
        pytest.skip("valgrind does not run an AddressSanitizer build")
    env.update(SHM, RDMA_UCX_ADOPT="1")
    n = 5000
    pre = subprocess.run([sys.executable, "-P", "-m", "rdma.fabric",
                          "preload"], capture_output=True, text=True,
                         env=env, timeout=T, check=True).stdout.strip()
    port = free_port()
    args = ["ib_write_bw", "-d", "ucx0", "-s", "8", "-n", str(n), "-p",
            str(port)]
    out = tmp_path / "cg.out"
    srv = popen(on_fabric(*args), env)
    try:
        fh.wait_listening(srv, port, T)
        cli = run(["valgrind", "--tool=callgrind",
                   f"--callgrind-out-file={out}",
                   "--toggle-collect=fab_post_send", *args, "127.0.0.1"],
                  dict(env, LD_PRELOAD=pre), timeout=4 * T)
        assert cli.returncode == 0, cli.stdout + cli.stderr
    finally:
        kill(srv)
    ann = run(["callgrind_annotate", str(out)], env).stdout
    total = int(re.search(r"^([\d,]+)\s.*PROGRAM TOTALS", ann,
                          re.M).group(1).replace(",", ""))
    assert total / n <= 450, (total / n, ann[:2000])


def test_threads_post_on_one_qp_c(env, tmp_path):
    """tests/host/c_front_mt_post.c, an unmodified libibverbs program: three
    threads post lone 8-byte WRITEs on one QP (the one-WR shortcut, under
    the node lock only) while a fourth posts SENDs on it (the general way,
    which drops the node lock to hand requests to UCP or the ring): every
    signaled WR completes once, in each thread's order, every WRITE lands
    and the SENDs arrive in order."""
    exe = fh.build_c("c_front_mt_post.c", tmp_path / "mt",
                     "infiniband/verbs.h", ("-Wall", "-Wextra", "-Werror"),
                     ("-libverbs", "-lpthread"))
    for tls in (SHM, TCP):
        res = run(on_fabric(exe), dict(env, **tls), timeout=3 * T)
        assert res.returncode == 0, (tls, res.stdout + res.stderr)
        assert res.stdout.strip() == "ok sends=3875 recvs=2000", res.stdout
