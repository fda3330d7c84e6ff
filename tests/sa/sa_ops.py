"""Operations the shimmed worker runs (see worker.py): small functions
that use the rdma package against the simulated fabric and return plain,
picklable values."""
import os
import time

import rdma.sa as sa
import rdma.umad as umad_mod
from rdma import _mad as mad
from pathstub import StubPath

_umad = None


def _port_name():
    """The first ACTIVE port, else the first port (no SM: none is ACTIVE;
    in ibsim's "net" example Hca2 is cabled on port 2)."""
    try:
        return str(umad_mod.get_end_port())
    except umad_mod.RDMAError:
        return "ibsim0/1"


def ping():
    return os.getpid()


def close():
    global _umad
    if _umad is not None:
        _umad.close()
        _umad = None


def get(timeout_ms=1000, retries=2):
    """The worker's UMAD on the first active port (opened once)."""
    global _umad
    if _umad is None or _umad.closed:
        _umad = umad_mod.get_umad(_port_name(), timeout_ms=timeout_ms,
                                  retries=retries)
    _umad.timeout_ms, _umad.retries = timeout_ms, retries
    return _umad


def end_port():
    ep = umad_mod.get_end_port(_port_name())
    return {"name": str(ep), "lid": ep.lid, "sm_lid": ep.sm_lid,
            "sm_sl": ep.sm_sl, "gid": str(ep.default_gid),
            "guid": int(ep.port_guid), "state": ep.state,
            "pkeys": ep.pkeys[:4]}


def devices():
    return [(d.name, int(d.node_guid), [p.port_id for p in d.end_ports])
            for d in umad_mod.get_umad_devices()]


def sa_get(record, **kw):
    """SubnAdmGet of a record object; returns the record."""
    return get(**kw).SubnAdmGet(record)


def sa_table(record, **kw):
    return get(**kw).SubnAdmGetTable(record)


def sa_set(record, **kw):
    return get(**kw).SubnAdmSet(record)


def sa_delete(record, **kw):
    return get(**kw).SubnAdmDelete(record)


def sa_raw(method, record, **kw):
    """An SA RPC returning the reply bytes and the records."""
    rep = get(**kw).sa_rpc(method, record)
    return rep.header.pack() + rep.data, rep.records


def path_query(**fields):
    return sa.path_record_query(get(), **fields)


def resolve(reversible=True, properties=None, **path_fields):
    """rdma.path.resolve_path on a real rdma.path.IBPath (it hands
    InfiniBand ports to the SA client); returns the path's attributes."""
    import rdma.path
    u = get()
    p = rdma.path.IBPath(u.end_port, **path_fields)
    rdma.path.resolve_path(u, p, reversible=reversible,
                           properties=properties)
    return {f: (str(getattr(p, f)) if f in ("SGID", "DGID")
                else getattr(p, f))
            for f in StubPath.FIELDS if f != "end_port"}


def time_path_queries(n, dlid):
    u = get()
    t = time.perf_counter()
    for _ in range(n):
        sa.path_record_query(u, DLID=dlid, SLID=u.end_port.lid)
    return (time.perf_counter() - t) / n


def open_port(ca, port):
    """Open a umad port by name (for the missing device/port errors)."""
    with umad_mod.get_umad(f"{ca}/{port}") as u:
        return repr(u)


def timed_query(path_dlid, timeout_ms, retries):
    """A PathRecord Get sent to ``path_dlid`` as if it were the SA;
    returns (elapsed seconds, exception or None)."""
    u = get(timeout_ms=timeout_ms, retries=retries)
    path = umad_mod.SAPath(u.end_port, path_dlid)
    t = time.monotonic()
    try:
        u.SubnAdmGet(mad.SAPathRecord(DLID=1, SLID=u.end_port.lid), path)
    except Exception as e:      # noqa: BLE001 - returned to the test
        return time.monotonic() - t, e
    return time.monotonic() - t, None


def gil_check(ms):
    """Count ticks of another thread while recvfrom() waits ``ms``."""
    import threading
    u = get()
    u.register(3, 2, rmpp=True)
    ticks = 0
    stop = threading.Event()

    def spin():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)
    t = threading.Thread(target=spin)
    t.start()
    t0 = time.monotonic()
    u.recvfrom(time.monotonic() + ms / 1000)
    waited = time.monotonic() - t0
    stop.set()
    t.join()
    return ticks, waited


def madop(op, *args, **kw):
    """Run ``mad_ops.<op>`` or ``sched_ops.<op>`` (the transactor and
    scheduler tests) on the worker's UMAD."""
    import mad_ops
    import sched_ops
    mod = sched_ops if hasattr(sched_ops, op) else mad_ops
    return getattr(mod, op)(get(), *args, **kw)


def compat(op, *args, **kw):
    """Run ``compat_ops.<op>`` (python-rdma's behaviour, see
    test_python_rdma_api.py) on the worker's UMAD."""
    import compat_ops
    return getattr(compat_ops, op)(get(), *args, **kw)


def agent_churn(n, per_umad=False):
    """Register and unregister umad agents ``n`` times in this one
    process, then ask the SA for its NodeRecord table; return how many
    records came.

    ``per_umad`` False: one agent registered and unregistered on the
    worker's UMAD (libibumad's umad_register/umad_unregister).  True: ``n``
    times a new UMAD whose SMP, SA and PerfMgt agents are registered and
    which is then closed with them still registered, as a tool run per
    command in a long-lived process does (closing the file frees them)."""
    import rdma.IBA as IBA
    if per_umad:
        name = _port_name()
        for _ in range(n):
            with umad_mod.get_umad(name) as u:
                for cls, ver in ((0x01, 1), (0x81, 1), (0x03, 2), (0x04, 1)):
                    u.register_client(cls, ver)
    else:
        port = get()._port
        for _ in range(n):
            port.unregister(port.register(0x04, 1, 0, None))
    return len(get().SubnAdmGetTable(IBA.SANodeRecord))


def umad_file_contract():
    """The kernel's umad file contract, through libibumad and plain file
    calls on the descriptor it opened (ctypes; no rdma code between):
    returns what each step gave."""
    import ctypes
    import errno
    import select
    lib = ctypes.CDLL("libibumad.so.3", use_errno=True)
    ca = ctypes.create_string_buffer(b"ibsim0")
    fd = lib.umad_open_port(ca, 0)
    out = {"fd": fd}
    try:
        ids = [lib.umad_register(fd, 0x04, 1, 0, None) for _ in range(33)]
        out["ids"] = ids[:32]
        out["33rd"] = (ids[32], ctypes.get_errno())
        out["unregister 5"] = lib.umad_unregister(fd, 5)
        out["again"] = lib.umad_register(fd, 0x04, 1, 0, None)
        out["unregister 40"] = (lib.umad_unregister(fd, 40),
                                ctypes.get_errno())
        out["poll empty"] = select.select([fd], [], [], 0)[0]
        try:
            os.read(fd, 320)
            out["read empty"] = "data"
        except OSError as e:
            out["read empty"] = errno.errorcode[e.errno]
        try:
            os.read(fd, 8)
            out["read tiny"] = "data"
        except OSError as e:
            out["read tiny"] = errno.errorcode[e.errno]
    finally:
        lib.umad_close_port(fd)
    return out


def short_read_keeps_mad(lid):
    """Send a PortInfo SMP to ``lid`` through libibumad (ctypes), wait
    for the answer with epoll, read it first into a buffer too small
    (ENOSPC: the header says the length needed, the MAD stays queued),
    then whole.  Returns (errno name of the short read, length in its
    header, bytes of the whole read, TID and status of the answer)."""
    import ctypes
    import errno
    import select
    import struct
    lib = ctypes.CDLL("libibumad.so.3", use_errno=True)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = lib.umad_open_port(ctypes.create_string_buffer(b"ibsim0"), 0)
    try:
        agent = lib.umad_register(fd, 0x01, 1, 0, None)
        hdr = lib.umad_size()
        buf = ctypes.create_string_buffer(hdr + 256)
        mad = bytearray(256)
        mad[0:4] = bytes([1, 0x01, 1, 0x01])           # Get, LID routed
        mad[8:16] = struct.pack(">Q", 0x1234_5678)
        mad[16:18] = struct.pack(">H", 0x0015)          # PortInfo
        buf.raw = bytes(hdr) + bytes(mad)
        lib.umad_set_addr(buf, lid, 0, 0, 0)
        assert lib.umad_send(fd, agent, buf, 256, 1000, 0) == 0
        ep = select.epoll()
        ep.register(fd, select.EPOLLIN)
        ready = ep.poll(5)
        ep.close()
        assert ready == [(fd, select.EPOLLIN)], ready
        small = ctypes.create_string_buffer(hdr + 100)
        n = libc.read(fd, small, ctypes.c_size_t(hdr + 100))
        first = errno.errorcode.get(ctypes.get_errno(), "?") if n < 0 \
            else n
        need = struct.unpack_from("<I", small.raw, 16)[0]
        whole = os.read(fd, hdr + 256)
        status = struct.unpack_from("<I", whole, 4)[0]
        tid = struct.unpack_from(">Q", whole, hdr + 8)[0] & 0xFFFFFFFF
    finally:
        lib.umad_close_port(fd)
    return first, need, len(whole), tid, status
