"""The parts of the multicast-table readers and of ``ibportstate``'s set
operations that need no fabric: the MFT attribute modifier, the MLID
range and line ``ibroute -M`` prints, the operation parser and the
PortInfo a set sends (the comparisons with infiniband-diags on ibsim are
in tests/sa/test_mcast.py and tests/sa/test_portstate.py)."""
import pytest

from rdma import IBA
from rdma.cli._ibopts import CmdError
from rdma.cli.ibportstate import apply_ops, parse_ops
from rdma.cli.ibroute import mcast_line, mcast_range
from rdma.subnet import Switch, mft_attribute_modifier


def test_mft_attribute_modifier():
    assert mft_attribute_modifier(0, 0) == 0
    assert mft_attribute_modifier(511, 15) == 0xF00001FF
    assert mft_attribute_modifier(3, 1) == (1 << 28) | 3
    with pytest.raises(ValueError, match="block 512"):
        mft_attribute_modifier(512, 0)
    with pytest.raises(ValueError, match="position 16"):
        mft_attribute_modifier(0, 16)


def test_switch_mfdb_geometry():
    sw = Switch()
    sw.swinf = IBA.SMPSwitchInfo(multicastFDBCap=1000)
    sw.ninf = IBA.SMPNodeInfo(nodeType=2, numPorts=24)
    assert sw.mfdb_size == 1024 and sw.mfdb_positions == 2
    sw.ninf.numPorts = 15
    assert sw.mfdb_positions == 1
    sw.swinf.multicastFDBCap = 0xFFFF
    assert sw.mfdb_size == (IBA.LID_COUNT_MULTICAST + 31) // 32 * 32
    sw.mfdb = [0] * 64
    sw._merge_mfdb(1, 1, [0x8000] * 32)
    sw._merge_mfdb(1, 0, [0x0002] * 32)
    assert sw.mfdb[32] == (0x8000 << 16) | 2 and sw.mfdb[31] == 0
    sw.mfdb.extend([5] * (IBA.LID_COUNT_MULTICAST + 10))
    sw.trim_db()
    assert len(sw.mfdb) == IBA.LID_COUNT_MULTICAST


def test_switch_mfdb_needs_nodeinfo():
    sw = Switch()
    sw.swinf = IBA.SMPSwitchInfo(multicastFDBCap=64)
    with pytest.raises(ValueError, match="NodeInfo"):
        next(sw.get_switch_fdb(object(), False, True, None))


@pytest.mark.parametrize("cap,top,first,last,all_,want,warned", [
    (1024, 0, 0, 0, False, (0xC000, 0xC3FF), False),
    (1024, 0xC010, 0, 0, False, (0xC000, 0xC010), False),
    (1024, 0xC010, 0, 0, True, (0xC000, 0xC3FF), False),
    (1024, 0, 0xBFFF, 0, False, (0xC000, 0xC3FF), True),
    (1024, 0, 0xC001, 0xC500, False, (0xC001, 0xC3FF), False),
    (0x4000, 0, 0, 0, False, (0xC000, 0xFFFE), True),
    (1024, 5, 0, 0, False, (0xC000, 0xC3FF), True),
])
def test_mcast_range(cap, top, first, last, all_, want, warned):
    a, b, warns = mcast_range(cap, top, first, last, all_)
    assert (a, b) == want and bool(warns) == warned


def test_mcast_line():
    assert mcast_line(0xC000, 0, 8, False, False) is None
    assert mcast_line(0xC000, 0, 8, False, True) == "0xc000      " + \
        "  " * 9
    assert mcast_line(0xC001, 0b1010, 3, False, False) == \
        "0xc001        x   x "
    assert mcast_line(0xC002, (1 << 17) | 2, 24, True, False) == \
        "0xc002      00020002"


def test_parse_ops():
    assert parse_ops([]) == ("query", {})
    assert parse_ops(["reset"]) == ("reset", {})
    assert parse_ops(["lid", "0x20", "lmc", "2", "arm"]) == \
        ("arm", {"lid": 0x20, "lmc": 2})
    assert parse_ops(["width", "255"]) == ("query", {"width": 255})
    for words, msg in ((["width", "32"], "invalid width value 32"),
                       (["espeed", "32"], "invalid espeed value"),
                       (["mkeyprot", "4"], "invalid mkeyprot"),
                       (["smlid", "0"], "invalid smlid value 0"),
                       (["on", "off"], "only one of"),
                       (["lid"], "lid needs a value"),
                       (["bogus"], "unknown operation 'bogus'")):
        with pytest.raises(CmdError, match=msg):
            parse_ops(words)


def test_apply_ops():
    """The PortInfo a set sends: states "no change" unless asked, LIDs
    of 0 replaced by 0x1234, enabled speed and width 0 (no change)
    unless given, the other fields as read."""
    read = dict(LID=0, masterSMLID=0, portState=4, portPhysicalState=5,
                linkSpeedEnabled=1, linkWidthEnabled=2,
                linkDownDefaultState=2, operationalVLs=4, neighborMTU=4)
    pi = apply_ops(IBA.SMPPortInfo(**read), "query", {"width": 1})
    assert (pi.LID, pi.masterSMLID) == (0x1234, 0x1234)
    assert (pi.portState, pi.portPhysicalState) == (0, 0)
    assert (pi.linkWidthEnabled, pi.linkSpeedEnabled) == (1, 0)
    assert pi.linkDownDefaultState == 2 and pi.operationalVLs == 4
    pi = apply_ops(IBA.SMPPortInfo(**read), "disable", {})
    assert pi.portPhysicalState == 3
    pi = apply_ops(IBA.SMPPortInfo(**read), "reset", {"lid": 7})
    assert pi.portPhysicalState == 2 and pi.LID == 7
    pi = apply_ops(IBA.SMPPortInfo(**read), "arm", {"vls": 2, "mtu": 5})
    assert pi.portState == 3 and (pi.operationalVLs, pi.neighborMTU) == \
        (2, 5)
