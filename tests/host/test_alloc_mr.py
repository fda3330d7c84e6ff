"""PD.alloc_mr: library-owned registered memory, on the software fabric."""
import errno
import gc
import os

import pytest

import rdma
import rdma.ibverbs as ibv
import rdma.vtools
from fabric_helpers import connect_pair


def _fabric_port():
    try:
        return rdma.get_end_port(provider="ucx")
    except (rdma.RDMAError, ValueError) as e:
        pytest.skip(f"no software fabric device: {e}")


def test_alloc_mr_memory_and_lifetime():
    """alloc_mr gives zeroed, page-aligned, writable memory whose views
    outlive close() safely."""
    with rdma.get_verbs(_fabric_port()) as ctx:
        pd = ctx.pd()
        mr = pd.alloc_mr(3 * 4096 + 5, ibv.IBV_ACCESS_LOCAL_WRITE |
                         ibv.IBV_ACCESS_REMOTE_WRITE)
        assert mr.length == 3 * 4096 + 5 and mr.addr % 4096 == 0
        view = mr.buf
        assert view.nbytes == mr.length and not view.readonly
        assert bytes(view[:64]) == bytes(64)
        view[100:105] = b"abcde"
        assert bytes(memoryview(mr)[100:105]) == b"abcde"
        sge = mr.sge(5, 100)
        assert (sge.addr, sge.lkey) == (mr.addr + 100, mr.lkey)
        mr.close()
        assert bytes(view[100:105]) == b"abcde"     # still mapped
        with pytest.raises(BufferError, match="closed"):
            memoryview(mr)
        with pytest.raises(ValueError, match="closed MR"):
            mr.buf
        del view, mr
        gc.collect()
        with pytest.raises(ValueError, match="length"):
            pd.alloc_mr(0)
        with pytest.raises(BufferError, match="alloc_mr"):
            memoryview(pd.mr(bytearray(8), ibv.IBV_ACCESS_LOCAL_WRITE))


def test_alloc_mr_rdma_write_between_qps():
    """An RC WRITE into alloc_mr memory lands in mr.buf."""
    ep = _fabric_port()
    with rdma.get_verbs(ep) as ctx:
        pd = ctx.pd()
        cq = ctx.cq(16)
        qa = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 4, cq, 4, cq)
        connect_pair(qa, qb, ep, max_rd_atomic=1)
        src = pd.alloc_mr(4096)
        dst = pd.alloc_mr(4096, ibv.IBV_ACCESS_LOCAL_WRITE |
                          ibv.IBV_ACCESS_REMOTE_WRITE)
        src.buf[:8] = b"fabric!!"
        qa.post_send(ibv.send_wr(opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=src.sge(8), remote_addr=dst.addr + 64,
                                 rkey=dst.rkey))
        wcs = list(rdma.vtools.CQPoller(cq).iterwc(count=1, timeout=10))
        assert wcs and wcs[0].status == ibv.IBV_WC_SUCCESS
        assert bytes(dst.buf[64:72]) == b"fabric!!"


def _mapping_of(addr):
    """(inode, path) of the mapping that starts at addr in this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if int(parts[0].split("-")[0], 16) == addr:
                path = parts[5].strip() if len(parts) > 5 else ""
                return int(parts[4]), path
    raise AssertionError(f"no mapping starts at {addr:#x}")


def _rss_kib():
    """Resident anonymous + shared memory of this process, in KiB."""
    with open("/proc/self/status") as f:
        st = dict(line.split(":", 1) for line in f)
    return sum(int(st[k].split()[0]) for k in ("RssAnon", "RssShmem"))


def test_alloc_mr_touches_no_page():
    """alloc_mr(256 MiB) maps zero-filled memory without writing it (it used
    to memset every byte, so a huge alloc_mr filled RAM)."""
    with rdma.get_verbs(_fabric_port()) as ctx:
        pd = ctx.pd()
        before = _rss_kib()
        mr = pd.alloc_mr(256 << 20)
        grown = _rss_kib() - before
        assert grown < 32 << 10, f"alloc_mr made {grown} KiB resident"
        view = mr.buf
        assert view[0] == 0 and view[(128 << 20) + 5] == 0 and view[-1] == 0
        del view
        mr.close()


def _attach_as(shmid, uid=None, gid=None):
    """shmat(shmid) in a forked child, as uid/gid if given (no exec: the
    interpreter need not be reachable by that user); "attached" or
    "refused: <reason>"."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: no Python teardown
        code = 1
        try:
            os.close(r)
            if gid is not None:
                os.setgroups([gid])
                os.setgid(gid)
            if uid is not None:
                os.setuid(uid)
            a = libc.shmat(shmid, None, 0)
            if a in (None, ctypes.c_void_p(-1).value):
                msg = "refused: " + os.strerror(ctypes.get_errno())
            else:
                msg = "attached"
            os.write(w, msg.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch uid")
def test_alloc_mr_memory_is_private_to_the_user():
    """alloc_mr's shared memory segment is mode 0600: a process of another
    user in the owner's group cannot attach it (UCX makes SysV segments
    0660, which let that process read and write the memory)."""
    with rdma.get_verbs(_fabric_port()) as ctx:
        pd = ctx.pd()
        mr = pd.alloc_mr(1 << 20, ibv.IBV_ACCESS_LOCAL_WRITE |
                         ibv.IBV_ACCESS_REMOTE_WRITE)
        ino, path = _mapping_of(mr.addr)
        assert path.startswith("/SYSV"), path   # the one-sided fast path's
        with open("/proc/sysvipc/shm") as f:
            rows = [r.split() for r in f.read().splitlines()[1:]]
        row = {int(r[1]): r for r in rows}[ino]  # inode = segment id
        mode, gid = int(row[2], 8) & 0o777, int(row[8])
        got = _attach_as(ino, uid=65534, gid=gid)
        assert mode == 0o600 and got.startswith("refused"), (oct(mode), got)
        # the owner (same uid) still attaches it: the fast path's peers
        assert _attach_as(ino) == "attached"
        mr.close()


def test_alloc_mr_counts_memory_already_held():
    """Like registration on a NIC (which pins), live alloc_mr memory counts
    against what memory can back: two allocations of 60 % of RAM + swap
    cannot both succeed (each alone could; nothing is touched, so trying is
    harmless)."""
    with open("/proc/meminfo") as f:
        info = {k: int(v.split()[0]) * 1024 for k, v in
                (line.split(":", 1) for line in f)}
    n = int((info["MemTotal"] + info["SwapTotal"]) * 0.6) // 4096 * 4096
    with rdma.get_verbs(_fabric_port()) as ctx:
        pd = ctx.pd()
        held = []
        with pytest.raises(rdma.SysError) as ei:
            for _ in range(2):
                held.append(pd.alloc_mr(n))
        assert ei.value.errno == errno.ENOMEM and ei.value.func == "mmap"
        assert len(held) <= 1
        if held:
            held.pop().close()          # the last reference: memory freed
            gc.collect()
            # once released, the memory is available again
            pd.alloc_mr(n).close()
