"""rdma.binstruct and the IBA structure tables: python-rdma's interface,
byte layouts written by hand from the IBA tables, every structure's
round trip, pickling and printing, and a fuzzed decoder."""
import io
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rdma.IBA as IBA
import rdma.IBA_struct
from rdma.binstruct import BinFormat, BinStruct

ALL = [getattr(rdma.IBA_struct, n) for n in rdma.IBA_struct.__all__
       if isinstance(getattr(rdma.IBA_struct, n), type)]


def test_every_python_rdma_name_is_there():
    for name in ("SMPNodeInfo", "SMPNodeDescription", "SMPPortInfo",
                 "SMPSwitchInfo", "SMPGUIDInfo", "SMPPKeyTable",
                 "SMPSLToVLMappingTable", "SMPVLArbitrationTable",
                 "SMPLinearForwardingTable", "SMPRandomForwardingTable",
                 "SMPMulticastForwardingTable", "SMPSMInfo", "SMPVendorDiag",
                 "SMPLedInfo", "SMPNoticeTrap", "MADNotice",
                 "MADClassPortInfo", "MADInformInfo", "SMPFormat",
                 "SMPFormatDirected", "SAFormat", "PMFormat", "MADHeader",
                 "SALinearForwardingTableRecord",
                 "SAMulticastForwardingTableRecord", "SASwitchInfoRecord",
                 "SASMInfoRecord", "SAGUIDInfoRecord", "SAPKeyTableRecord",
                 "SAVLArbitrationTableRecord", "SASLToVLMappingTableRecord",
                 "SALinkRecord", "SATraceRecord", "SAMultiPathRecord",
                 "SAPathRecord", "SANodeRecord", "SAPortInfoRecord",
                 "PMPortSamplesCtl", "PMPortSamplesRes", "PMPortCounters",
                 "PMPortCountersExt", "PMPortRcvErrorDetails",
                 "PMPortXmitDiscardDetails", "ComponentMask"):
        assert hasattr(IBA, name), name
    import rdma.binstruct
    assert rdma.binstruct.BinStruct is IBA.BinStruct


def test_class_attributes_as_python_rdma_has_them():
    pi = IBA.SMPPortInfo
    assert (pi.MAD_LENGTH, pi.MAD_ATTRIBUTE_ID) == (64, 0x15)
    assert (pi.MAD_SUBNGET, pi.MAD_SUBNSET) == (IBA.MAD_METHOD_GET,
                                                IBA.MAD_METHOD_SET)
    assert not hasattr(IBA.SMPNodeInfo, "MAD_SUBNSET")
    assert IBA.SAPathRecord.MAD_SUBNADMGETTABLE == IBA.MAD_METHOD_GET_TABLE
    assert IBA.SAServiceRecord.MAD_SUBNADMDELETE == IBA.MAD_METHOD_DELETE
    assert IBA.PMPortCounters.MAD_PERFORMANCESET == IBA.MAD_METHOD_SET
    assert IBA.SATraceRecord.MAD_SUBNADMGETTRACETABLE == 0x13
    assert pi.MEMBERS[:3] == [("MKey", 64, 1), ("GIDPrefix", 64, 1),
                              ("LID", 16, 1)]
    assert ("reserved_274", 3, 1) in pi.MEMBERS
    assert IBA.SMPFormat.MAD_CLASS == IBA.MAD_SUBNET
    assert IBA.SMPFormatDirected.MAD_CLASS == IBA.MAD_SUBNET_DIRECTED
    assert (IBA.SAFormat.MAD_CLASS, IBA.SAFormat.MAD_CLASS_VERSION) == (3, 2)
    assert IBA.PMFormat.MAD_CLASS == IBA.MAD_PERFORMANCE
    assert issubclass(IBA.SMPFormat, BinFormat)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_structure_round_trips_and_pickles(cls):
    """The table's total equals MAD_LENGTH (checked at class creation);
    arbitrary bytes decode and encode back to the same bytes, reserved
    bits included; pickle, copy and both printers work."""
    raw = bytes((i * 37 + 11) & 0xFF for i in range(cls.MAD_LENGTH))
    obj = cls(raw)
    assert obj.pack() == raw
    buf = bytearray(cls.MAD_LENGTH + 8)
    obj.pack_into(buf, 8)
    assert bytes(buf[8:]) == raw
    other = cls()
    other.unpack_from(bytes(buf), 8)
    assert other == obj
    assert pickle.loads(pickle.dumps(obj)) == obj
    assert cls(obj) == obj                      # from another structure
    for fmt in ("dump", "dotted"):
        out = io.StringIO()
        obj.printer(out, format=fmt)
        assert out.getvalue().startswith(cls.__name__ + "\n")
    assert cls().pack() == bytes(cls.MAD_LENGTH)
    repr(obj)
    obj.to_dict()


def test_short_buffer_is_a_format_error():
    with pytest.raises(IBA.MADFormatError, match="SMPPortInfo needs 64 "
                                                 "bytes at offset 4, have 60"):
        IBA.SMPPortInfo(bytes(64), 4)
    with pytest.raises(ValueError, match="needs 40 bytes"):
        IBA.SMPNodeInfo().pack_into(bytearray(39))


def test_node_info_guids_and_description():
    ni = IBA.SMPNodeInfo(bytes([1, 1, 2, 36]) + (0x0002C90300001234)
                         .to_bytes(8, "big") * 3 + bytes(12))
    assert ni.nodeType == IBA.NODE_SWITCH and ni.numPorts == 36
    assert isinstance(ni.nodeGUID, IBA.GUID)
    assert str(ni.nodeGUID) == "0002:c903:0000:1234"
    nd = IBA.SMPNodeDescription(b"switch-1".ljust(64, b"\0"))
    assert isinstance(nd.nodeString, bytearray)
    assert bytes(nd.nodeString).rstrip(b"\0") == b"switch-1"


def test_smp_directed_layout_by_hand():
    """IBA 14.2.1.2: D bit, 15-bit status, hop pointer and count; DrSLID
    and DrDLID at 32, data at 64, the paths at 128 and 192."""
    f = IBA.SMPFormatDirected()
    f.baseVersion, f.mgmtClass, f.classVersion = 1, 0x81, 1
    f.method, f.D, f.status, f.hopPointer, f.hopCount = 1, 1, 0x0004, 2, 3
    f.transactionID, f.attributeID = 0x0102030405060708, 0x15
    f.attributeModifier, f.MKey = 1, 0x1112131415161718
    f.drSLID, f.drDLID = 0xFFFF, 0xFFFF
    f.initialPath[1:4] = b"\x01\x05\x02"
    f.returnPath[1] = 9
    raw = f.pack()
    assert raw[:12] == bytes([1, 0x81, 1, 1, 0x80, 0x04, 2, 3, 1, 2, 3, 4])
    assert raw[16:24] == bytes([0, 0x15, 0, 0, 0, 0, 0, 1])
    assert raw[24:36] == bytes(range(0x11, 0x19)) + b"\xff" * 4
    assert raw[128:132] == b"\x00\x01\x05\x02" and raw[193] == 9
    back = IBA.SMPFormatDirected(raw)
    assert (back.D, back.status, back.hopPointer, back.hopCount) == \
        (1, 4, 2, 3)


def test_port_info_via_smp_format():
    pi = IBA.SMPPortInfo(LID=0x1234, portState=IBA.PORT_STATE_ACTIVE,
                         linkWidthActive=IBA.LINK_WIDTH_4x)
    f = IBA.SMPFormat()
    pi.pack_into(f.data)
    raw = f.pack()
    assert raw[64 + 16:64 + 18] == b"\x12\x34"
    assert raw[64 + 31] == 2 and raw[64 + 32] == 0x04
    assert IBA.SMPPortInfo(IBA.SMPFormat(raw).data).LID == 0x1234


def test_forwarding_tables_are_mutable_arrays():
    lft = IBA.SMPLinearForwardingTable()
    lft.portBlock[3] = 7
    assert lft.pack()[3] == 7
    rft = IBA.SMPRandomForwardingTable()
    rft.LIDPortBlock[1].LID = 0x10
    rft.LIDPortBlock[1].valid = 1
    rft.LIDPortBlock[1].port = 4
    assert rft.pack()[4:8] == bytes([0, 0x10, 0x80, 4])
    pk = IBA.SMPPKeyTable()
    pk.PKeyBlock[0] = 0xFFFF
    assert pk.pack()[:2] == b"\xff\xff"
    sl = IBA.SMPSLToVLMappingTable(SLtoVL=list(range(16)))
    assert sl.pack() == bytes([0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD,
                               0xEF])


def test_pm_port_counters_layout_by_hand():
    """IBA 16.1.3.5: the 4-bit pair at byte 19, VL15Dropped at 22, the
    32-bit counters from byte 24."""
    pc = IBA.PMPortCounters(portSelect=1, counterSelect=0xFFFF,
                            symbolErrorCounter=0x0102,
                            linkErrorRecoveryCounter=3, linkDownedCounter=4,
                            localLinkIntegrityErrors=0xA,
                            excessiveBufferOverrunErrors=0xB,
                            VL15Dropped=5, portXmitData=0x11223344,
                            portXmitWait=9)
    raw = pc.pack()
    assert len(raw) == 44
    assert raw[:8] == bytes([0, 1, 0xFF, 0xFF, 1, 2, 3, 4])
    assert raw[19] == 0xAB and raw[22:24] == b"\x00\x05"
    assert raw[24:28] == b"\x11\x22\x33\x44" and raw[40:44] == bytes(
        [0, 0, 0, 9])


def test_pm_samples_control_layout_by_hand():
    """IBA 16.1.3.2: the counter masks packed 3 bits each around a
    reserved bit, counter selects from byte 34."""
    c = IBA.PMPortSamplesCtl(counterMask0=7, counterMask9=1,
                             counterMask10=7, sampleStatus=2,
                             counterSelect0=0x1234, counterSelect14=0x5678)
    raw = c.pack()
    assert len(raw) == 192
    assert int.from_bytes(raw[4:8], "big") == (7 << 27) | (1 << 0) \
        and raw[8:11] == bytes([0x70, 0, 0]) and raw[11] == 2
    assert raw[38:40] == b"\x12\x34" and raw[66:68] == b"\x56\x78"


def test_notice_and_sminfo():
    n = IBA.MADNotice(isGeneric=1, noticeType=IBA.MAD_NOTICE_INFO,
                      trapNumber=64, issuerLID=3, issuerGID="fe80::1")
    raw = n.pack()
    assert len(raw) == 80 and raw[0] == 0x84 and raw[4:6] == b"\x00\x40"
    assert raw[64:80] == bytes(IBA.GID("fe80::1"))
    sm = IBA.SMPSMInfo(GUID=0x1234, priority=3, SMState=3)
    assert sm.pack()[20] == 0x33 and isinstance(sm.GUID, IBA.GUID)


def test_component_mask_wrapper_as_python_rdma():
    cm = IBA.ComponentMask(IBA.SAPathRecord())
    cm.DGID = IBA.GID("fe80::1")
    cm.SGID = IBA.GID("fe80::2")
    assert cm.component_mask == (1 << 2) | (1 << 3)
    assert cm.payload.DGID == IBA.GID("fe80::1")
    nr = IBA.ComponentMask(IBA.SANodeRecord())
    nr.nodeInfo.nodeGUID = 5
    assert nr.component_mask == 1 << 7
    nr.unmask("nodeInfo.nodeGUID")
    assert nr.component_mask == 0
    nr.touch("LID")
    assert nr.component_mask == 1
    with pytest.raises(ValueError, match="no component 'bogus'"):
        nr.touch("bogus")
    sr = IBA.ComponentMask(IBA.SAServiceRecord())
    sr.serviceData8[0] = 1          # reading an array touches it
    assert sr.component_mask == 0xFFFF << 7
    assert IBA.SAServiceRecord.COMPONENT_MASK["serviceData8_3"] == 10
    assert IBA.SAPathRecord.COMPONENT_MASK["reversePathPKeyMemberBit"] == 23


def test_wrappers_of_smp_attributes():
    lft = IBA.SALinearForwardingTableRecord(LID=2, blockNum=1)
    lft.linearForwardingTable.portBlock[0] = 3
    raw = lft.pack()
    assert raw[:4] == b"\x00\x02\x00\x01" and raw[8] == 3
    assert lft.component_mask() == 0b11
    # opensm and saquery: position in bits 15:12, block in bits 8:0.
    mft = IBA.SAMulticastForwardingTableRecord(position=0xF, blockNum=0x1FF)
    assert mft.pack()[2:4] == b"\xf1\xff"
    assert IBA.SAMulticastForwardingTableRecord(position=1).pack()[2:4] \
        == b"\x10\x00"
    assert IBA.SASwitchInfoRecord.COMPONENT_MASK["switchInfo.linearFDBTop"] \
        == 5


def test_values_are_checked_with_the_field_named():
    with pytest.raises(ValueError, match="SMPPortInfo.LMC = 8 does not fit"):
        IBA.SMPPortInfo(LMC=8).pack()
    with pytest.raises(AttributeError, match="no field 'lid'"):
        IBA.SMPPortInfo().lid = 1
    with pytest.raises(ValueError, match="64 elements, not 3"):
        IBA.SMPLinearForwardingTable(portBlock=[1, 2, 3])
    with pytest.raises(TypeError, match="must be a SMPNodeInfo"):
        IBA.SANodeRecord(nodeInfo=5)


def test_const_str_and_lookups():
    assert IBA.const_str("MAD_METHOD_", 0x12) == "MAD_METHOD_GET_TABLE"
    assert IBA.const_str("MAD_METHOD_", 0x77, True) == "MAD_METHOD_??(119)"
    assert IBA.get_fmt_payload(0x01, 0x101, 0x15) == (IBA.SMPFormat,
                                                      IBA.SMPPortInfo)
    assert IBA.get_fmt_payload(0x03, 0x102, 0x11) == (IBA.SAFormat,
                                                      IBA.SANodeRecord)
    assert IBA.get_fmt_payload(0x04, 0x101, 0x12)[1] is IBA.PMPortCounters
    assert IBA.get_fmt_payload(0x55, 0x101, 0x12) == (None, None)
    assert IBA.conv_lid("0x10") == 16
    with pytest.raises(ValueError, match="not a unicast LID"):
        IBA.conv_lid("0xC000")
    assert list(IBA.lid_lmc_range(5, 1)) == [4, 5]


@settings(max_examples=300, deadline=None)
@given(cls=st.sampled_from(ALL), raw=st.binary(max_size=300),
       offset=st.integers(0, 8))
def test_fuzz_every_decoder(cls, raw, offset):
    """Any bytes: a structure that packs back to the same bytes, or
    MADFormatError when too short; nothing else."""
    try:
        obj = cls(raw, offset)
    except IBA.MADFormatError:
        assert len(raw) < offset + cls.MAD_LENGTH
        return
    assert obj.pack() == raw[offset:offset + cls.MAD_LENGTH]
    obj.printer(io.StringIO())
    obj.printer(io.StringIO(), format="dotted")


def test_format_printer_decodes_the_attribute():
    """As python-rdma's printer: a format's data shows as the attribute
    its attributeID names."""
    f = IBA.SMPFormat()
    f.attributeID = IBA.SMPPortInfo.MAD_ATTRIBUTE_ID
    IBA.SMPPortInfo(LID=7).pack_into(f.data)
    out = io.StringIO()
    f.printer(out)
    text = out.getvalue()
    assert "   + data SMPPortInfo\n 64 " in text
    assert " 80 00070000 LID=7,masterSMLID=0\n" in text
    out = io.StringIO()
    f.printer(out, format="dotted")
    assert "data.LID" + "." * 25 + "7\n" in out.getvalue()


def _same_fields(a, b, where):
    assert a.__dict__.keys() == b.__dict__.keys(), where
    for k, x in a.__dict__.items():
        y = b.__dict__[k]
        assert type(x) is type(y), f"{where}.{k}: {type(x)} {type(y)}"
        if isinstance(x, BinStruct):
            _same_fields(x, y, f"{where}.{k}")
        elif isinstance(x, list) and x and isinstance(x[0], BinStruct):
            for i, (xi, yi) in enumerate(zip(x, y)):
                _same_fields(xi, yi, f"{where}.{k}[{i}]")
        else:
            assert x == y, f"{where}.{k}: {x!r} != {y!r}"


@settings(max_examples=300, deadline=None)
@given(cls=st.sampled_from(ALL), data=st.data())
def test_compiled_decoder_equals_the_table_walk(cls, data):
    """The decoder compiled from a class's table (the one the
    constructor uses) fills the same fields, with the same types and
    values, as the generic walk over the table."""
    raw = data.draw(st.binary(min_size=cls.MAD_LENGTH,
                              max_size=cls.MAD_LENGTH))
    fast = cls(raw)
    ref = cls.__new__(cls)
    ref._from_int_generic(int.from_bytes(raw, "big"))
    _same_fields(fast, ref, cls.__name__)
    assert "_decode" in cls.__dict__
