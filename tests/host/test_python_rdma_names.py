"""Names and behaviour python-rdma's management programs rely on (found by
running its own ``ibtool`` on this package, see
``tests/sa/test_python_rdma_compat.py``), tested here in our own words so
that CI keeps them without python-rdma."""
import io
import pickle
import time

import pytest

import rdma
import rdma.IBA as IBA
import rdma.IBA_describe as D
import rdma.binstruct
import rdma.path
import rdma.tools
import rdma.umad


# -- rdma.IBA_describe --------------------------------------------------------


def test_describe_enumerations():
    assert D.node_type(IBA.NODE_SWITCH) == "Switch"
    assert D.node_type(IBA.NODE_CA) == "Channel Adapter"
    assert D.node_type(9) == "?? 9"
    assert D.link_state(IBA.PORT_STATE_ACTIVE) == "Active"
    assert D.link_state(IBA.PORT_STATE_INIT) == "Init"
    assert D.phys_link_state(IBA.PHYS_PORT_STATE_LINK_UP) == "Link UP"
    assert D.phys_link_state(IBA.PHYS_PORT_STATE_POLLING) == "Polling"
    assert D.phys_link_state(42) == "?? 42"


def test_describe_link_speed_and_width():
    assert D.link_speed(7) == "SDR,DDR,QDR"
    assert D.link_speed(IBA.LINK_SPEED_5Gb0) == "DDR"
    assert D.link_speed(0) == ""
    assert D.link_speed_ext(3) == "FDR,EDR"
    assert D.link_width(IBA.LINK_WIDTH_4x) == 4
    assert D.link_width(IBA.LINK_WIDTH_12x) == 12
    assert D.link_width(IBA.LINK_WIDTH_1x | IBA.LINK_WIDTH_4x) == 0
    with pytest.raises(TypeError, match="link width"):
        D.link_width("4x")


def test_describe_rates_round_trip():
    assert D.rate(IBA.PR_RATE_10Gb0) == 10_000_000_000
    assert D.rate(IBA.PR_RATE_5Gb0) == 5_000_000_000
    for code in range(2, 19):
        assert D.to_rate(D.rate(code)) == code
    assert D.to_rate(11_000_000_000) == IBA.PR_RATE_10Gb0
    assert D.to_rate(1) == IBA.PR_RATE_2Gb5
    with pytest.raises(ValueError, match="not an IBA rate code"):
        D.rate(1)


def test_describe_mad_status():
    assert D.mad_status(0) == "Ok"
    assert D.mad_status(IBA.MAD_STATUS_BUSY) == "BUSY Ok"
    assert D.mad_status(IBA.MAD_STATUS_UNSUP_METHOD_ATTR_COMBO) == \
        "Unsupported method+attr"
    assert D.mad_status(7 << 2) == "Invalid attr or modifier"


def test_describe_strings():
    assert D.description(bytearray(b"Hca1\0\0junk")) == "Hca1"
    assert D.description(b"\xff\xfeok\0") == "\ufffd\ufffdok"
    assert D.dstr("a\nb") == "a\\nb"
    assert D.dstr("x", quotes=True) == "'x'"
    assert D.dstr(None) == "None"
    assert D.dstr(bytearray(b"Switch1\0\0")) == "Switch1"
    with pytest.raises(TypeError, match="description"):
        D.description(5)


def test_struct_dotted_options():
    """colon, name_map, dump_list and column: infiniband-diags' layouts."""
    ni = IBA.SMPNodeInfo(numPorts=3, nodeType=2, partitionCap=8)
    out = io.StringIO()
    D.struct_dotted(out, ni, colon=True, column=20,
                    name_map={"NumPorts": "Ports"})
    lines = out.getvalue().splitlines()
    assert "Ports:" + "." * 14 + "3" in lines      # values at column 20
    assert "NodeType:" + "." * 11 + "2" in lines
    out = io.StringIO()
    D.struct_dotted(out, IBA.SMPPKeyTable(), dump_list=True)
    assert out.getvalue().count("PKeyBlock[") == 32
    with pytest.raises(TypeError, match="BinStruct"):
        D.struct_dotted(io.StringIO(), object())


def test_printer_takes_python_rdma_arguments():
    pi = IBA.SMPPortInfo(LID=7)
    out = io.StringIO()
    pi.printer(out, header=False, colon=True, format="dotted",
               name_map={"LID": "Lid"}, column=33, skip_reserved=False)
    text = out.getvalue()
    assert "Lid:" + "." * 29 + "7\n" in text
    assert "Reserved_" in text          # skip_reserved=False shows them
    out = io.StringIO()
    D.struct_dump(out, pi)
    assert "LID=7" in out.getvalue()


def test_member_formats():
    assert IBA.MEMBER_FORMATS["capabilityMask"] == "hex"
    assert IBA.MEMBER_FORMATS["nodeString"] == "str"
    out = io.StringIO()
    IBA.MEMBER_FORMATS["numPorts"] = "hex"      # a program's own entry
    try:
        IBA.SMPNodeInfo(numPorts=10).printer(out, format="dotted",
                                             header=False)
    finally:
        del IBA.MEMBER_FORMATS["numPorts"]
    assert "NumPorts" + "." * 25 + "0x0a" in out.getvalue()


# -- rdma.tools, rdma top level -----------------------------------------------


def test_clock_monotonic():
    a = rdma.tools.clock_monotonic()
    time.sleep(0.01)
    assert 0.005 < rdma.tools.clock_monotonic() - a < 5


def test_top_level_names():
    assert issubclass(rdma.MADClassError, rdma.MADError)
    assert rdma.IBA_describe is D
    assert rdma.tools.clock_monotonic
    assert rdma.path.SAPathNotFoundError is rdma.sa.SAPathNotFoundError
    assert issubclass(rdma.path.SAPathNotFoundError, rdma.MADClassError)


def test_missing_submodule_is_an_attribute_error(monkeypatch):
    import importlib

    def missing(name, *a, **kw):
        exc = ModuleNotFoundError(f"No module named {name!r}")
        exc.name = name
        raise exc
    monkeypatch.setattr(importlib, "import_module", missing)
    assert not hasattr(rdma, "satransactor")
    with pytest.raises(AttributeError, match="not in this build"):
        rdma.satransactor


# -- GID / GUID ---------------------------------------------------------------


def test_gid_from_prefix_and_guid():
    g = IBA.GID(prefix=IBA.GID_DEFAULT_PREFIX, guid=IBA.GUID(0x100004))
    assert str(g) == "fe80::10:4"
    assert IBA.GID(prefix=IBA.GID("fe80::1"), guid=5) == IBA.GID("fe80::5")
    assert IBA.GID(prefix=bytes.fromhex("fe80000000000000"), guid=1) == \
        IBA.GID("fe80::1")
    assert IBA.GID(None) == IBA.ZERO_GID == IBA.GID(0)
    assert IBA.GID(bytes(16), raw=True) == IBA.ZERO_GID
    with pytest.raises(TypeError, match="go together"):
        IBA.GID(prefix=1)
    with pytest.raises(TypeError, match="not both"):
        IBA.GID("fe80::1", prefix=1, guid=2)
    with pytest.raises(ValueError, match="prefix is 8 bytes"):
        IBA.GID(prefix=b"\0", guid=1)
    with pytest.raises(TypeError, match="raw=True"):
        IBA.GID("fe80::1", raw=True)


def test_guid_forms():
    assert IBA.GUID(None) == IBA.ZERO_GUID == 0
    assert IBA.GUID(b"\0\0\0\0\0\x10\0\x04", raw=True) == 0x100004
    with pytest.raises(TypeError, match="raw=True"):
        IBA.GUID(5, raw=True)


def test_rate_names_of_python_rdma():
    assert (IBA.PR_RATE_5Gb0, IBA.PR_RATE_10Gb0, IBA.PR_RATE_25Gb0,
            IBA.PR_RATE_300Gb0) == (IBA.PR_RATE_5Gb, IBA.PR_RATE_10Gb,
                                    IBA.PR_RATE_25Gb, IBA.PR_RATE_300Gb)
    assert IBA.const_str("PR_RATE_", 3) == "PR_RATE_10Gb"


# -- structures ---------------------------------------------------------------


def test_vend_oui_format_layout():
    f = IBA.VendOUIFormat(mgmtClass=0x33, OUI=0x001405, data1=7)
    raw = f.pack()
    assert len(raw) == 256
    assert raw[1] == 0x33
    assert raw[36:40] == b"\x00\x00\x14\x05"     # reserved byte, then OUI
    assert raw[28:32] == b"\0\0\0\7"
    assert IBA.CLASS_TO_STRUCT[(0x30, 0x101)] is IBA.VendOUIFormat


class Ping(rdma.binstruct.BinStruct):
    """Written the way python-rdma's generator writes structures: MEMBERS,
    __slots__, MAD_LENGTH longer than the rows, its own zero()."""
    __slots__ = ("cookie", "tag")
    MAD_LENGTH = 16
    MAD_ATTRIBUTE_ID = 0x10
    MEMBERS = [("cookie", 64, 1), ("tag", 16, 1)]

    def zero(self):
        rdma.binstruct.BinStruct.zero(self)
        self.tag = 0xABCD


def test_structure_described_by_members():
    p = Ping(cookie=0x1122334455667788)
    assert p.tag == 0xABCD
    raw = p.pack()
    assert raw == bytes.fromhex("1122334455667788abcd") + bytes(6)
    assert Ping(raw).cookie == 0x1122334455667788
    assert pickle.loads(pickle.dumps(p)).tag == 0xABCD
    with pytest.raises(TypeError, match="not \\(name, bits, count\\)"):
        class Bad(rdma.binstruct.BinStruct):
            MAD_LENGTH = 4
            MEMBERS = [("x", 32)]


def test_structure_subclass_attribute_may_be_set():
    class Raw(rdma.binstruct.BinStruct):
        buf = None

        def unpack_from(self, buf, offset=0):
            self.buf = bytes(buf[offset:])

    r = Raw()
    r.unpack_from(b"abc")
    assert r.buf == b"abc"
    with pytest.raises(AttributeError, match="no field 'nope'"):
        r.nope = 1
    with pytest.raises(AttributeError, match="no field"):
        IBA.SMPNodeInfo().pack = 1
    with pytest.raises(AttributeError, match="no field"):
        IBA.SMPNodeInfo().MAD_SUBNGET = 2


def test_nested_row_set_to_none_is_left_out():
    rec = IBA.SANodeRecord(LID=4)
    rec.nodeInfo = None
    out = io.StringIO()
    rec.printer(out, format="dotted", header=False)
    assert "NumPorts" not in out.getvalue() and "LID" in out.getvalue()
    out = io.StringIO()
    rec.printer(out, format="dump")
    assert "nodeInfo" not in out.getvalue()
    assert rec.to_dict()["nodeInfo"] is None
    with pytest.raises(ValueError, match="nodeInfo is None"):
        rec.pack()
    with pytest.raises(TypeError, match="must be a SMPNodeInfo"):
        rec.nodeInfo = 5


# -- paths --------------------------------------------------------------------


def test_directed_route_from_python2_strings():
    p = rdma.path.IBDRPath(None, drPath="\0" + chr(1))
    assert p.drPath == b"\0\1"
    p.drPath += chr(3)                  # python-rdma's idiom
    assert p.drPath == b"\0\1\3" and str(p) == "DR Path (0, 1, 3)"
    assert rdma.path.IBDRPath(None, drPath="0,1,2").drPath == b"\0\1\2"
    with pytest.raises(ValueError, match="0..254"):
        rdma.path.IBDRPath(None, drPath="\0" + chr(300))
    with pytest.raises(ValueError, match="port 255"):
        rdma.path.IBDRPath(None, drPath="\0" + chr(255))


def test_copy_keeps_attributes_a_program_added():
    p = rdma.path.IBPath(None, DLID=3, SL=1)
    p.SMKey = 7
    q = p.copy(dqpn=0)
    assert (q.DLID, q.SL, q.dqpn, q.SMKey) == (3, 1, 0, 7)
    with pytest.raises(AttributeError, match="no attribute 'bogus'"):
        rdma.path.IBPath(None, bogus=1)


def test_sa_path_is_an_ibpath():
    sp = rdma.umad.SAPath(None, 1, 0, 4, pkey_index=0)
    assert isinstance(sp, rdma.path.IBPath)
    assert (sp.DLID, sp.SLID, sp.dqpn, sp.qkey) == \
        (1, 4, 1, IBA.IB_DEFAULT_QP1_QKEY)
    sp.SMKey = 1
    smp = sp.copy(dqpn=0, qkey=IBA.IB_DEFAULT_QP0_QKEY)
    assert type(smp) is rdma.path.IBPath
    assert (smp.DLID, smp.dqpn, smp.qkey, smp.SMKey) == \
        (1, 0, IBA.IB_DEFAULT_QP0_QKEY, 1)


def test_resolve_path_coroutine_on_an_async_transactor():
    """On an asynchronous transactor resolve_path returns a coroutine
    whose yield is the PathRecord query; NO_RECORDS becomes
    SAPathNotFoundError."""
    import rdma.sa as sa

    class Async:
        is_async = True
        end_port = None

        def SubnAdmGet(self, rec):
            return ("query", rec)

    path = rdma.path.IBPath(None, DLID=9, SLID=4)
    gen = sa.resolve_path(Async(), path)
    kind, rec = next(gen)
    assert kind == "query" and rec.DLID == 9 and rec.SLID == 4
    err = sa.SAError(status=sa.SA_STATUS_NO_RECORDS << 8,
                     msg="no records")
    with pytest.raises(rdma.path.SAPathNotFoundError,
                       match="no path record to DLID 9") as info:
        gen.throw(err)
    assert info.value.status == sa.SA_STATUS_NO_RECORDS << 8


def test_component_mask_can_be_assigned():
    """python-rdma's set_guid: one GUID of the block is a component of
    its own (GUIDInfoRecord GUID0..GUID7), added by hand to the mask."""
    rec = IBA.SAGUIDInfoRecord()
    cm = IBA.ComponentMask(rec)
    cm.LID = 6
    rec.GUIDInfo.GUIDBlock[2] = IBA.GUID(0x2C0FFEE)
    cm.component_mask = cm.component_mask | (
        1 << (rec.COMPONENT_MASK["GUIDInfo.GUIDBlock"] + 2))
    assert cm.component_mask == (1 << 0) | (1 << 6)
    assert IBA.SAGUIDInfoRecord.NUM_COMPONENTS == 12
    assert IBA.SAGUIDInfoRecord.component_bit("GUIDInfo.GUIDBlock") == \
        0xFF << 4
    with pytest.raises(ValueError, match="64-bit mask"):
        cm.component_mask = -1
