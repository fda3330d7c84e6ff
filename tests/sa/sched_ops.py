"""Scheduler operations run in a shimmed worker (see sa_ops.madop and
test_sched.py): coroutines on rdma.sched.MADSchedule over the worker's
UMAD; plain picklable results."""
import time

import rdma.IBA as IBA
import rdma.sched

from mad_ops import DRPath, LIDPath


def port_infos(u, lids, max_outstanding=16):
    """PortInfo of every port of every LID, one coroutine per node that
    reads NodeInfo then starts a coroutine per port, all in parallel.
    Returns ({(lid, port): PortInfo dict}, peak outstanding, seconds)."""
    sched = rdma.sched.MADSchedule(u)
    sched.max_outstanding = max_outstanding
    out = {}

    def one_port(lid, port):
        pi = yield sched.SubnGet(IBA.SMPPortInfo, LIDPath(lid), port)
        out[lid, port] = pi.to_dict()

    def node(lid):
        ni = yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
        first = 0 if ni.nodeType == IBA.NODE_SWITCH else 1
        for port in range(first, ni.numPorts + 1):
            yield one_port(lid, port)

    def nodes():
        for lid in lids:
            yield node(lid)

    t = time.perf_counter()
    sched.run(mqueue=nodes())
    return out, sched.peak_outstanding, time.perf_counter() - t, sched.sent


def port_infos_sync(u, lids):
    out = {}
    t = time.perf_counter()
    for lid in lids:
        ni = u.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
        first = 0 if ni.nodeType == IBA.NODE_SWITCH else 1
        for port in range(first, ni.numPorts + 1):
            out[lid, port] = u.SubnGet(IBA.SMPPortInfo, LIDPath(lid),
                                       port).to_dict()
    return out, time.perf_counter() - t


def dr_walk(u):
    """A directed-route walk of the whole fabric: a coroutine per node
    found (queued while the scheduler runs), a nested one for its ports.
    Returns the sorted node GUIDs, the links as (guid, port, peer guid,
    peer port), and the scheduler's peak outstanding."""
    sched = rdma.sched.MADSchedule(u)
    seen = {}
    links = set()

    def ports(path, ni):
        for port in range(1, ni.numPorts + 1):
            pi = yield sched.SubnGet(IBA.SMPPortInfo, path, port)
            if pi.portState < IBA.PORT_STATE_INIT:
                continue
            # Each neighbour is a coroutine of its own: all run in
            # parallel with this one.
            sched.queue(visit(list(path.drPath[1:]) + [port], ni.nodeGUID,
                              port))

    def visit(hops, from_guid=None, from_port=None):
        path = DRPath(hops)
        try:
            ni = yield sched.SubnGet(IBA.SMPNodeInfo, path)
        except IBA.MADError:
            return
        if from_guid is not None:
            links.add(tuple(sorted(((int(from_guid), from_port),
                                    (int(ni.nodeGUID), ni.localPortNum)))))
        if int(ni.nodeGUID) in seen:
            return
        seen[int(ni.nodeGUID)] = ni.nodeType
        if ni.nodeType == IBA.NODE_SWITCH or not hops:
            yield ports(path, ni)

    sched.run(queue=visit([]))
    return sorted(seen), sorted(links), sched.peak_outstanding


def with_failures(u, good_lid, dead_lid):
    """Coroutines where one MAD times out: the coroutine catches it and
    the others finish; a nested coroutine's value comes back through
    ``return`` and through sched.result; yielding a context waits."""
    sched = rdma.sched.MADSchedule(u)
    log = []

    def dead():
        try:
            yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(dead_lid))
        except IBA.MADTimeoutError as e:
            log.append(("timeout", "SubnGet(SMPNodeInfo)" in str(e)))

    def inner():
        ni = yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(good_lid))
        return int(ni.nodeGUID)

    def inner_result():
        nd = yield sched.SubnGet(IBA.SMPNodeDescription, LIDPath(good_lid))
        sched.result = bytes(nd.nodeString).rstrip(b"\0").decode()

    def good():
        guid = yield inner()
        desc = yield inner_result()
        log.append(("good", guid, desc))

    def waiter(ctx):
        yield ctx
        log.append(("waited", len(log)))

    u.timeout_ms, u.retries = 100, 1
    try:
        c = sched.queue(dead())
        sched.queue(good())
        sched.queue(waiter(c))
        sched.run()
    finally:
        u.timeout_ms = u.retries = None
    return log


def uncaught(u, dead_lid):
    """An exception no coroutine catches ends run() with it."""
    sched = rdma.sched.MADSchedule(u)
    u.timeout_ms, u.retries = 50, 0

    def dead():
        yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(dead_lid))
    try:
        sched.run(queue=dead())
    except IBA.MADTimeoutError as e:
        return str(e)
    finally:
        u.timeout_ms = u.retries = None
    return None


def sync_do_async(u, lid):
    """python-rdma's do_async: the same coroutine on the synchronous
    UMAD (each yielded RPC already ran)."""
    got = []

    def co():
        ni = yield u.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
        got.append(ni.numPorts)
        u.result = "done"
    return u.do_async(co()), got


def bad_yield(u):
    sched = rdma.sched.MADSchedule(u)

    def co():
        yield 5
    sched.run(queue=co())


def from_asyncio(u, lid):
    """MADSchedule.arun from asyncio code: the event loop keeps running
    (a ticker task counts) while the MADs are in flight."""
    import asyncio
    sched = rdma.sched.MADSchedule(u)
    got = []

    def co():
        for _ in range(20):
            ni = yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
            got.append(ni.numPorts)

    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)
        t = asyncio.create_task(ticker())
        await sched.arun(queue=co())
        done.set()
        await t
        return ticks
    ticks = asyncio.run(main())
    return got, ticks


class _CountingPort:
    """The worker's umad port, counting the calls of Port.transact."""

    def __init__(self, port):
        self._p = port
        self.transacts = 0

    def transact(self, *a, **kw):
        self.transacts += 1
        return self._p.transact(*a, **kw)

    def __getattr__(self, name):
        return getattr(self._p, name)


def mget_batch(u, lids, dead_lid, busy_first=False):
    """sched.mget of the NodeInfo of every LID, the PortInfo of port 1
    and of a port that does not exist (200) on each, and a NodeInfo of a
    LID nobody has.  With *busy_first*, another coroutine's MAD is in
    flight when the batch is yielded (so it goes MAD by MAD).  Returns
    (results as dicts or exception class names, the same by synchronous
    SubnGets, Port.transact calls, sent, reply_fmt's attribute ID,
    whether reply_path is None)."""
    sched = rdma.sched.MADSchedule(u)
    counting = u._port = _CountingPort(u._port)
    reqs = [(IBA.SMPNodeInfo, LIDPath(lid), 0) for lid in lids]
    reqs += [(IBA.SMPPortInfo, LIDPath(lid), p) for lid in lids
             for p in (1, 200)]
    reqs.append((IBA.SMPNodeInfo, LIDPath(dead_lid), 0))
    got = []

    def show(r):
        return type(r).__name__ if isinstance(r, Exception) else r.to_dict()

    def batch():
        res = yield sched.mget(sched.SubnGet(a, p, m) for a, p, m in reqs)
        got.extend(show(r) for r in res)

    def other():
        yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(lids[0]))

    u.timeout_ms, u.retries = 100, 1
    try:
        if busy_first:
            sched.queue(other())
        sched.queue(batch())
        sched.run()
        sync = []
        for a, p, m in reqs:
            try:
                sync.append(show(u.SubnGet(a, p, m)))
            except IBA.MADError as e:
                sync.append(type(e).__name__)
    finally:
        u.timeout_ms = u.retries = None
        u._port = counting._p
    fmt = sched.reply_fmt
    return (got, sync, counting.transacts, sched.sent,
            fmt.attributeID if fmt is not None else None,
            sched.reply_path is None)


def fast_reply_state(u, lid):
    """One SubnGet through the scheduler's fast path: reply_fmt and
    reply_path describe its answer (decoded when read); the reply path
    of the same SubnGet on the synchronous transactor."""
    sched = rdma.sched.MADSchedule(u)
    got = []

    def co():
        ni = yield sched.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
        got.append(int(ni.nodeGUID))
    sched.run(queue=co())
    fmt, path = sched.reply_fmt, sched.reply_path
    u.SubnGet(IBA.SMPNodeInfo, LIDPath(lid))
    return (got, type(fmt).__name__, fmt.method, fmt.attributeID,
            int(fmt.data[12:20].hex(), 16), (path.DLID, path.SLID),
            (u.reply_path.DLID, u.reply_path.SLID))


def transact_raw(u, lid, dead_lid):
    """rdma._umad.Port.transact directly: a NodeInfo SMP to *lid* and to
    *dead_lid* (20 ms, 1 re-send), and its argument checks."""
    port = u._port
    agent = u.register_client(IBA.MAD_SUBNET, 1)

    def smp(tid):
        f = IBA.SMPFormat(baseVersion=1, mgmtClass=IBA.MAD_SUBNET,
                          classVersion=1, method=IBA.MAD_METHOD_GET,
                          transactionID=tid,
                          attributeID=IBA.SMPNodeInfo.MAD_ATTRIBUTE_ID)
        return f.pack()

    res, sends, unmatched = port.transact(
        [(agent, smp(0x1234), lid, 0, 20, 1),
         (agent, smp(0x1235), dead_lid, 0, 20, 1)], 4)
    out = {"types": [type(r).__name__ for r in res], "sends": sends,
           "unmatched": unmatched,
           "guid": int.from_bytes(res[0][64 + 12:64 + 20], "big")
           if isinstance(res[0], bytes) else None,
           "tid": res[0][12:16].hex() if isinstance(res[0], bytes)
           else None}
    errors = []
    for args in (([], 0), ([5], 4), ([(agent, b"x", lid, 0, 20, 1)], 4),
                 ([(agent, smp(1), lid, 0, 0, 1)], 4), (7, 4)):
        try:
            port.transact(*args)
            errors.append(None)
        except (ValueError, TypeError) as e:
            errors.append(f"{type(e).__name__}: {e}")
    out["errors"] = errors
    out["empty"] = port.transact([], 1)
    return out
