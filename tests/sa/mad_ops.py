"""Transactor operations run in a shimmed worker (see sa_ops.madop): each
takes the worker's UMAD first and returns plain picklable values."""
import time

import rdma.IBA as IBA


class LIDPath:
    """The attributes of a LID-routed path the transactor reads."""

    def __init__(self, DLID, **kw):
        self.DLID = DLID
        self.SL = 0
        self.__dict__.update(kw)

    def __repr__(self):
        return f"LIDPath(DLID={self.DLID})"


class DRPath:
    """python-rdma's IBDRPath attributes: drPath (first byte 0), the
    permissive DLID, drSLID and drDLID."""

    def __init__(self, hops):
        self.drPath = bytes([0] + list(hops))
        self.DLID = self.SLID = 0xFFFF
        self.drSLID = self.drDLID = 0xFFFF

    def __repr__(self):
        return "DR Path " + str(tuple(self.drPath))


def _path(lid=None, dr=None):
    return DRPath(dr) if dr is not None else LIDPath(lid)


def smp_get(u, attr, lid=None, dr=None, mod=0):
    """SubnGet of IBA.<attr>: (reply dict, reply format's hop fields)."""
    res = u.SubnGet(getattr(IBA, attr), _path(lid, dr), mod)
    f = u.reply_fmt
    hops = (getattr(f, "D", None), getattr(f, "hopPointer", None),
            getattr(f, "hopCount", None))
    return res.to_dict(), hops, type(f).__name__


def pm_get(u, attr, lid, port):
    return u.PerformanceGet(getattr(IBA, attr)(portSelect=port),
                            LIDPath(lid)).to_dict()


def pm_reset(u, lid, port, ext=False):
    cls = IBA.PMPortCountersExt if ext else IBA.PMPortCounters
    sel = 0xFF if ext else 0xFFFF
    return u.PerformanceSet(cls(portSelect=port, counterSelect=sel),
                            LIDPath(lid)).to_dict()


def rpc_error(u, call, attr, lid=None, dr=None, mod=0, timeout_ms=None,
              retries=None):
    """Run an RPC expected to fail: (exception, seconds)."""
    old = (u.timeout_ms, u.retries)
    if timeout_ms is not None:
        u.timeout_ms = timeout_ms
    if retries is not None:
        u.retries = retries
    t = time.monotonic()
    try:
        getattr(u, call)(getattr(IBA, attr), _path(lid, dr), mod)
    except Exception as e:      # noqa: BLE001 - returned to the test
        return e, time.monotonic() - t
    finally:
        u.timeout_ms, u.retries = old
    return None, time.monotonic() - t


def sa_component_mask(u, lid):
    """python-rdma's way: a ComponentMask-wrapped NodeRecord query."""
    cm = IBA.ComponentMask(IBA.SANodeRecord())
    cm.LID = lid
    rec = u.SubnAdmGet(cm)
    table = u.SubnAdmGetTable(IBA.SANodeRecord)
    return rec.to_dict(), len(table), cm.component_mask


def sa_record_types(u, lid):
    """One query of each SMP-wrapping SA record the SA serves."""
    out = {}
    for name, rec in (
            ("SASwitchInfoRecord", IBA.SASwitchInfoRecord(LID=lid)),
            ("SALinearForwardingTableRecord",
             IBA.SALinearForwardingTableRecord(LID=lid, blockNum=0)),
            ("SAPortInfoRecord", IBA.SAPortInfoRecord(endportLID=lid,
                                                      portNum=1)),
            ("SASMInfoRecord", IBA.SASMInfoRecord()),
            ("SAPKeyTableRecord", IBA.SAPKeyTableRecord(LID=lid)),
            ("SAGUIDInfoRecord", IBA.SAGUIDInfoRecord()),
            ("SALinkRecord", IBA.SALinkRecord(fromLID=lid))):
        try:
            recs = u.SubnAdmGetTable(rec)
            out[name] = [r.to_dict() for r in recs]
        except IBA.MADError as e:
            out[name] = e
    return out



def bm_get(u, lid, busy_retries=None, sched=False, timeout_ms=None):
    """BMGet(ClassPortInfo) to ``lid`` (a tests/sa/mad_server.py peer):
    the answering peer's LID (its capabilityMask), or the exception.
    *timeout_ms*: the wait for each answer, for this call only (tests
    that count the peer's tries give it room on a loaded machine)."""
    import rdma.sched
    old = u.busy_retries
    old_timeout = u.timeout_ms
    if busy_retries is not None:
        u.busy_retries = busy_retries
    if timeout_ms is not None:
        u.timeout_ms = timeout_ms
    u.busy_delay = 0.005
    try:
        if not sched:
            return u.BMGet(IBA.MADClassPortInfo, LIDPath(lid)).capabilityMask
        s = rdma.sched.MADSchedule(u)
        s.busy_retries, s.busy_delay = u.busy_retries, u.busy_delay
        got = []

        def co():
            cpi = yield s.BMGet(IBA.MADClassPortInfo, LIDPath(lid))
            got.append(cpi.capabilityMask)
        s.run(queue=co())
        return got[0]
    except IBA.MADError as e:
        return e
    finally:
        u.busy_retries = old
        u.timeout_ms = old_timeout


def bm_set_timeout(u, timeout_ms, retries):
    u.timeout_ms, u.retries = timeout_ms, retries


def smp_real_paths(u, lid, route):
    """SubnGet through rdma.path's own classes: an IBPath to a LID and an
    IBDRPath from its string form ("0,1,3"); python-rdma programs build
    these.  Returns both NodeInfos and the DR reply's returnPath."""
    import rdma.path
    lp = rdma.path.IBPath(u.end_port, DLID=lid, dqpn=0,
                          qkey=IBA.IB_DEFAULT_QP0_QKEY, retries=1)
    dp = rdma.path.IBDRPath(u.end_port, drPath=bytes(
        int(x) for x in route.split(",")))
    a = u.SubnGet(IBA.SMPNodeInfo, lp).to_dict()
    b = u.SubnGet(IBA.SMPNodeInfo, dp).to_dict()
    ret = bytes(u.reply_fmt.returnPath[:len(dp.drPath)])
    return a, b, list(ret), str(dp)
