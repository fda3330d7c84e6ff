"""Multicast and SA-transactor operations for the sa tier, run as a
shimmed script on one node of a fabric (``fabric.run([python,
"mcast_ops.py", OP, ...], node)``); each prints one JSON value.

- ``join MGID [create]``: join the local port to the multicast group
  MGID (a full-member MCMemberRecord SubnAdmSet); with ``create`` the
  record carries what opensm needs to create a new group.  Prints the
  group's MLID.
- ``mfdb LID [sa]``: read the multicast forwarding table of the switch
  at LID with :meth:`rdma.subnet.Switch.get_switch_fdb` (by SMPs through
  the scheduler, or with ``sa`` through an
  :class:`rdma.satransactor.SATransactor`).  Prints ``{"size": N,
  "masks": {"0xc000": mask, ...}}`` (non-zero entries only).
- ``bad_mft``: the attribute modifier of MFT block 600 and of
  position 16: prints the two errors.
"""
import json
import sys

import rdma
import rdma.IBA as IBA
import rdma.path

#: The IPoIB broadcast group's Q_Key: opensm wants it on every IPoIB
#: MGID (ff12:401b / ff12:601b).
IPOIB_QKEY = 0xB1B


def _lid_path(ep, lid):
    return rdma.path.IBPath(ep, SLID=ep.lid, DLID=lid, dqpn=0, sqpn=0,
                            qkey=IBA.IB_DEFAULT_QP0_QKEY)


def join(u, ep, mgid, create=None):
    cm = IBA.ComponentMask(IBA.SAMCMemberRecord())
    cm.MGID = IBA.GID(mgid)
    cm.portGID = ep.gids[0]
    cm.joinState = 1
    if create:
        cm.QKey = IPOIB_QKEY
        cm.PKey = 0xFFFF
        cm.SL = 0
        cm.flowLabel = 0
        cm.TClass = 0
    return u.SubnAdmSet(cm).MLID


def mfdb(u, ep, lid, how="smp"):
    import rdma.discovery
    import rdma.subnet
    path = _lid_path(ep, int(lid, 0))
    sw = rdma.subnet.Switch()
    sw.ninf = u.SubnGet(IBA.SMPNodeInfo, path)
    sched = rdma.discovery.scheduler_class()(u)
    if how == "sa":
        import rdma.satransactor
        sched = rdma.satransactor.SATransactor(sched)
    sched.run(queue=sw.get_switch_fdb(sched, False, True, path))
    return {"size": len(sw.mfdb),
            "masks": {f"0x{IBA.LID_MULTICAST + i:04x}": m
                      for i, m in enumerate(sw.mfdb) if m}}


def lfdb(u, ep, lid, how="smp"):
    """The linear forwarding table of the switch at LID, read with
    :meth:`rdma.subnet.Switch.get_switch_fdb` by SMPs or (``sa``) through
    an SATransactor on the scheduler: ``[entries up to the last used]``."""
    import rdma.discovery
    import rdma.subnet
    path = _lid_path(ep, int(lid, 0))
    sw = rdma.subnet.Switch()
    sw.ninf = u.SubnGet(IBA.SMPNodeInfo, path)
    sched = rdma.discovery.scheduler_class()(u)
    if how == "sa":
        import rdma.satransactor
        sched = rdma.satransactor.SATransactor(sched)
    sched.run(queue=sw.get_switch_fdb(sched, True, False, path))
    sw.trim_db()
    return list(sw.lfdb)


def sa_load(u, ep):
    """python-rdma's way to discover through the SA: an SATransactor on
    the scheduler given to :func:`rdma.discovery.load` (which then reads
    SA records, as python-rdma's did, without ``sa=True``):
    ``{switch node GUID: trimmed LFT}`` and the number of nodes."""
    import rdma.discovery
    import rdma.satransactor
    import rdma.subnet
    sat = rdma.satransactor.SATransactor(
        rdma.discovery.scheduler_class()(u))
    sbn = rdma.subnet.Subnet()
    rdma.discovery.load(sat, sbn, ["all_NodeInfo", "all_SwitchInfo",
                                   "all_LFDB"])
    out = {}
    for sw in sbn.iterswitches():
        sw.trim_db()
        out[str(int(sw.ninf.nodeGUID))] = list(sw.lfdb)
    return [out, len(sbn.all_nodes)]


def bad_mft(u, ep):
    import rdma.subnet
    out = []
    for block, pos in ((600, 0), (0, 16)):
        try:
            rdma.subnet.mft_attribute_modifier(block, pos)
            out.append("no error")
        except ValueError as e:
            out.append(f"ValueError: {e}")
    return out


def _reads(ni, port_states):
    """(attribute name, attribute modifier) of the SubnGets compared by
    :func:`sa_vs_smp` for a node (NodeInfo *ni*) whose ports in
    *port_states* are not Down."""
    is_switch = ni.nodeType == 2
    up = [p for p, st in port_states.items() if st > 1]
    out = [("SMPNodeInfo", 0), ("SMPNodeDescription", 0)]
    out += [("SMPPortInfo", p) for p in up]
    if is_switch:
        out += [("SMPPKeyTable", p << 16) for p in up]
        out += [("SMPSwitchInfo", 0), ("SMPLinearForwardingTable", 0),
                ("SMPMulticastForwardingTable", 0),
                ("SMPMulticastForwardingTable", 1 << 28)]
    else:
        # Modifier 0 of a CA: "the port the SMP came in by"; through the
        # SA a GetTable of the LID's PortInfoRecords.
        out += [("SMPPortInfo", 0), ("SMPPKeyTable", 0),
                ("SMPGUIDInfo", 0)]
    return out


#: Attributes opensm keeps no copy of unless it programs them (QoS is
#: off): its records hold zeros.  Read through the SA for the record's
#: shape only.
NOT_KEPT = [("SMPSLToVLMappingTable", 0), ("SMPVLArbitrationTable",
                                           (1 << 16) | 1)]
#: PortInfo fields that differ by nature between the port and the SA's
#: copy: the port the SMP came in by, the M_Key (opensm hides it) and
#: the key violation counters.
PORTINFO_VOLATILE = {"localPortNum", "MKey", "MKeyViolations",
                     "PKeyViolations", "QKeyViolations"}


def sa_vs_smp(u, ep, *lids):
    """For each LID: SubnGet the attributes of :func:`_reads` by SMP and
    through an SATransactor (trusted: opensm's SM_Key 1, which P_Key
    records need); return ``[diffs, reads, kinds, not_kept]``: every
    read whose fields differ or that failed, the number of reads, the
    attribute names compared, and the classes of the :data:`NOT_KEPT`
    answers."""
    import copy

    import rdma.satransactor
    sa = copy.copy(u.sa_path)
    sa.SMKey = 1
    sat = rdma.satransactor.SATransactor(u, sa)
    diffs, kinds, not_kept = [], set(), []
    n = 0
    for lid in map(lambda x: int(x, 0), lids):
        path = _lid_path(ep, lid)
        ni = u.SubnGet(IBA.SMPNodeInfo, path)
        first = 0 if ni.nodeType == 2 else 1
        states = {p: u.SubnGet(IBA.SMPPortInfo, path, p).portState
                  for p in range(first, ni.numPorts + 1)}
        for name, amod in _reads(ni, states):
            cls = getattr(IBA, name)
            a = u.SubnGet(cls, _lid_path(ep, lid), amod).to_dict()
            try:
                b = sat.SubnGet(cls, _lid_path(ep, lid), amod).to_dict()
            except IBA.MADError as e:
                diffs.append([name, lid, amod, f"{type(e).__name__}: {e}"])
                continue
            n += 1
            kinds.add(name)
            d = {k: (repr(a[k]), repr(b.get(k))) for k in a
                 if a[k] != b.get(k) and not (
                     name == "SMPPortInfo" and k in PORTINFO_VOLATILE)}
            if d:
                diffs.append([name, lid, amod, d])
        for name, amod in NOT_KEPT:
            amod = amod | ((1 << 8) if ni.nodeType == 2 and
                           name == "SMPSLToVLMappingTable" else 0)
            not_kept.append(type(sat.SubnGet(getattr(IBA, name),
                                             _lid_path(ep, lid),
                                             amod)).__name__)
    return [diffs, n, sorted(kinds), not_kept]


def sa_sched(u, ep, *lids):
    """NodeInfo, SwitchInfo (switches) and PortInfo port 1 of every LID
    at once through an SATransactor wrapping the MAD scheduler (an
    asynchronous transactor): ``{lid: [nodeGUID by SA, by SMP, ...]}``."""
    import rdma.discovery
    import rdma.satransactor
    sched = rdma.discovery.scheduler_class()(u)
    sat = rdma.satransactor.SATransactor(sched)
    got = {}

    def one(lid):
        path = _lid_path(ep, lid)
        ni = yield sat.SubnGet(IBA.SMPNodeInfo, path)
        pi = yield sat.SubnGet(IBA.SMPPortInfo, path,
                               0 if ni.nodeType == 2 else 1)
        got[lid] = [int(ni.nodeGUID), pi.LID]
    lids = [int(x, 0) for x in lids]
    sat.run(mqueue=(one(lid) for lid in lids))
    out = {}
    for lid in lids:
        ni = u.SubnGet(IBA.SMPNodeInfo, _lid_path(ep, lid))
        pi = u.SubnGet(IBA.SMPPortInfo, _lid_path(ep, lid),
                       0 if ni.nodeType == 2 else 1)
        out[str(lid)] = got[lid] + [int(ni.nodeGUID), pi.LID]
    return out


def sa_dr(u, ep, route):
    """SubnGet NodeInfo through an SATransactor along the directed route
    *route* ("0,1,3"): the LID it resolved and the node GUID, and the
    same read by SMP."""
    import rdma.satransactor
    hops = [int(x) for x in route.split(",")]
    sat = rdma.satransactor.SATransactor(u)
    dr = rdma.path.IBDRPath(ep, drPath=bytes(hops))
    ni_sa = sat.SubnGet(IBA.SMPNodeInfo, dr)
    lid = sat.get_path_lid(dr)
    ni_smp = u.SubnGet(IBA.SMPNodeInfo,
                       rdma.path.IBDRPath(ep, drPath=bytes(hops)))
    return [lid, int(ni_sa.nodeGUID), int(ni_smp.nodeGUID)]


def sa_errors(u, ep):
    """Reads the SA cannot answer: a LID nobody has, a directed route
    into an unlinked port, SubnSet (an SMP through the parent)."""
    import rdma.satransactor
    sat = rdma.satransactor.SATransactor(u)
    out = []
    for what, fn in (
            ("lid", lambda: sat.SubnGet(IBA.SMPNodeInfo,
                                        _lid_path(ep, 999))),
            ("dr", lambda: sat.SubnGet(
                IBA.SMPNodeInfo,
                rdma.path.IBDRPath(ep, drPath=bytes([0, 1, 7]))))):
        try:
            fn()
            out.append([what, "no error"])
        except Exception as e:      # noqa: BLE001 - reported to the test
            out.append([what, f"{type(e).__name__}: {e}"])
    return out


def main(argv):
    ep = rdma.get_end_port()
    with rdma.get_umad(ep) as u:
        print(json.dumps(globals()[argv[0]](u, ep, *argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
