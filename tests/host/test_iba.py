"""rdma.IBA.GID and GUID: parsing, printing, bytes, comparison."""
import pickle

import pytest

from rdma.IBA import GID, GUID


@pytest.mark.parametrize("text,canonical", [
    ("fe80::1", "fe80::1"),
    ("fe80:0000:0000:0000:0002:c903:0000:1234", "fe80::2:c903:0:1234"),
    ("::ffff:192.0.2.1", "::ffff:192.0.2.1"),
    ("::ffff:c000:201", "::ffff:192.0.2.1"),
    ("::", "::"),
    ("  FE80::ABCD ", "fe80::abcd"),
])
def test_parse_and_print(text, canonical):
    assert str(GID(text)) == canonical
    assert GID(str(GID(text))) == GID(text)


@pytest.mark.parametrize("bad", ["fe80::1::2", "fe80:1", "192.0.2.1", "gid",
                                 "1:2:3:4:5:6:7:8:9", ""])
def test_bad_text(bad):
    with pytest.raises(ValueError):
        GID(bad)


def test_bytes_int_and_halves():
    g = GID.from_parts(0xFE80000000000000, 0x0002C90300001234)
    assert len(g) == 16 and bytes(g)[:2] == b"\xfe\x80"
    assert g.prefix == 0xFE80000000000000 and g.guid == 0x0002C90300001234
    assert int(g) == (0xFE80000000000000 << 64) | 0x0002C90300001234
    assert GID(int(g)) == g == GID(bytes(g))
    with pytest.raises(ValueError):
        GID(b"\x00" * 15)
    with pytest.raises(ValueError):
        GID(1 << 128)
    with pytest.raises(TypeError):
        GID(1.5)


def test_hash_compare_pickle():
    a, b = GID("fe80::1"), GID("fe80::0:1")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert GID("fe80::1") < GID("fe80::2")
    assert pickle.loads(pickle.dumps(a)) == a
    assert not GID(0) and GID(1)
    assert repr(a) == "GID('fe80::1')"


def test_guid():
    g = GUID("0002:c903:0000:1234")
    assert int(g) == 0x0002C90300001234
    assert str(g) == "0002:c903:0000:1234"
    assert GUID(0x1) == 1 and str(GUID(1)) == "0000:0000:0000:0001"
    with pytest.raises(ValueError):
        GUID("zz")
    with pytest.raises(ValueError):
        GUID(1 << 64)


def test_mad_constants_live_in_iba_only():
    """rdma.IBA is the one home of the MAD constants (python-rdma's): the
    names rdma._mad still offers are the same objects, and _mad defines
    no number or string constant of its own."""
    import ast
    import rdma.IBA as IBA
    import rdma._mad as mad
    from pathlib import Path
    tree = ast.parse(Path(mad.__file__).read_text())
    own = [t.id for node in tree.body if isinstance(node, ast.Assign)
           and isinstance(node.value, (ast.Constant, ast.Tuple))
           for t in node.targets if isinstance(t, ast.Name)
           and t.id.isupper()]
    assert own == [], f"constants defined in rdma/_mad.py: {own}"
    shared = [n for n in mad.__all__ if n.isupper() and hasattr(IBA, n)]
    assert len(shared) >= 16
    # what tests and python-rdma-era code import from rdma._mad
    for n in ("SA_STATUS_NO_RECORDS", "SA_STATUS_REQ_INVALID_GID",
              "MAD_METHOD_GET_TABLE_RESP", "RMPP_FLAG_LAST", "MTU_4096"):
        assert n in shared, n
    for n in shared:
        assert getattr(mad, n) is getattr(IBA, n), n
    assert mad.rate_to_gbps is IBA.rate_to_gbps
    assert mad.mtu_to_bytes is IBA.mtu_to_bytes
