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
    found (queued while the scheduler runs), a nested one for its ports.  Returns the sorted node
    GUIDs, the links as (guid, port, peer guid, peer port), and the
    scheduler's peak outstanding."""
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
