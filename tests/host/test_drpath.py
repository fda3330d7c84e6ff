"""rdma.path.IBDRPath: directed routes (IBA 14.2.2), their text forms,
pickling and reversal."""
import pickle

import pytest

from rdma import IBA
from rdma.path import IBDRPath, IBPath, from_spec_string, from_string

P = IBA.LID_PERMISSIVE


def test_defaults_are_the_local_port():
    p = IBDRPath(None)
    assert p.drPath == b"\0" and p.hop_count == 0
    assert (p.DLID, p.SLID, p.drSLID, p.drDLID) == (P, P, P, P)
    assert (p.dqpn, p.sqpn, p.qkey) == (0, 0, IBA.IB_DEFAULT_QP0_QKEY)
    assert p.has_grh is False
    assert str(p) == "DR Path (0,)"
    assert repr(p) == "IBDRPath(end_port=None)"
    assert isinstance(p, IBPath)


@pytest.mark.parametrize("text,route", [
    ("0,1,3", b"\0\1\3"), ("0,1,", b"\0\1"), ("0,", b"\0"),
    (" 0, 12 ,254 ", b"\0\x0c\xfe"),
])
def test_from_string_dr_forms(text, route):
    p = from_string(text)
    assert type(p) is IBDRPath and p.drPath == route
    assert p.dr_string() == ",".join(str(i) for i in route)


@pytest.mark.parametrize("bad", [
    "1,2", "0,a", "0,255", "0,-1", "0,,1", ",", "0," + ",".join(["1"] * 64),
    "IBDRPath(drPath=1:2:)", "IBDRPath(drPath=0:x:)", "IBDRPath(has_grh=1)",
    "IBDRPath(DLID=0x10000)", "IBDRPath(SGID_index=1)",
])
def test_bad_routes_raise_valueerror(bad):
    with pytest.raises(ValueError):
        from_string(bad)


def test_assigning_checks_the_route():
    p = IBDRPath(None)
    p.drPath = [0, 1, 2]
    assert p.drPath == b"\0\1\2"
    p.drPath = bytearray(b"\0\5")
    assert p.drPath == b"\0\5"
    with pytest.raises(ValueError, match="start with 0"):
        p.drPath = b"\1"
    with pytest.raises(ValueError, match="empty"):
        p.drPath = b""
    with pytest.raises(ValueError, match="at most 63"):
        p.drPath = bytes(65)
    with pytest.raises(TypeError):
        p.drPath = 5
    with pytest.raises(ValueError, match="LID"):
        p.drDLID = -1
    with pytest.raises(AttributeError):
        p.has_grh = True
    with pytest.raises(AttributeError):
        p.SGID_index


def test_longest_route():
    route = [0] + [1] * 63
    p = IBDRPath(None, drPath=route)
    assert p.hop_count == 63
    assert from_string(p.dr_string()) == p


@pytest.mark.parametrize("p", [
    IBDRPath(None, drPath=b"\0\1\3"),
    IBDRPath(None, drPath=b"\0\2", DLID=5, SLID=3, drSLID=3),
    IBDRPath(None, drPath=b"\0\2\7", drDLID=9, retries=3),
    IBDRPath(None, drPath=b"\0\1\2", returnPath=b"\0\4\5"),
])
def test_repr_and_pickle_round_trip(p):
    q = from_string(repr(p))
    assert type(q) is IBDRPath and q == p and repr(q) == repr(p)
    r = pickle.loads(pickle.dumps(p))
    assert r == p and r.drPath == p.drPath
    assert from_spec_string(repr(p)) == p


def test_str_forms_of_python_rdma():
    assert str(IBDRPath(None, drPath=b"\0\1\3")) == "DR Path (0, 1, 3)"
    assert str(IBDRPath(None, drPath=b"\0\2", DLID=5, drSLID=3)) == \
        "DR Path 5 -> (0, 2)"
    assert str(IBDRPath(None, drPath=b"\0\2", drDLID=9)) == \
        "DR Path (0, 2) -> 9"
    assert str(IBDRPath(None, drPath=b"\0\2", DLID=5, drSLID=3,
                        drDLID=9)) == "DR Path 5 -> (0, 2) -> 9"


def test_reverse_uses_the_return_path():
    # Out of port 1 of the HCA, port 3 of the first switch; arrives at the
    # first switch on port 7 and at the target on port 5.
    p = IBDRPath(None, drPath=b"\0\1\3", returnPath=b"\0\7\5")
    assert p.reverse() is p
    assert p.drPath == b"\0\5\7" and p.returnPath == b"\0\3\1"
    p.reverse()
    assert p.drPath == b"\0\1\3" and p.returnPath == b"\0\7\5"
    local = IBDRPath(None)
    assert local.reverse().drPath == b"\0"


def test_reverse_needs_what_it_cannot_guess():
    with pytest.raises(ValueError, match="returnPath"):
        IBDRPath(None, drPath=b"\0\1").reverse()
    with pytest.raises(ValueError, match="returnPath"):
        IBDRPath(None, drPath=b"\0\1", returnPath=b"\0").reverse()
    with pytest.raises(ValueError, match="directed all the way"):
        IBDRPath(None, drPath=b"\0\1", returnPath=b"\0\1", DLID=4,
                 drSLID=2).reverse()


def test_copy_keeps_the_route():
    p = IBDRPath(None, drPath=b"\0\1", drDLID=7)
    q = p.copy(drPath=b"\0\1\2")
    assert q.drPath == b"\0\1\2" and q.drDLID == 7 and p.drPath == b"\0\1"


def test_extend_is_one_hop_more():
    p = IBDRPath(None, drPath=b"\0\1", drDLID=7, retries=2,
                 returnPath=b"\0\3")
    q = p.extend(5)
    assert q.drPath == b"\0\1\5" and q.drDLID == 7 and q.retries == 2
    assert q.returnPath is None and p.drPath == b"\0\1"
    assert q == IBDRPath(None, drPath=b"\0\1\5", drDLID=7, retries=2)
    for bad in (0, 255, -1, "3"):
        with pytest.raises(ValueError):
            p.extend(bad)
    with pytest.raises(ValueError, match="63 hops"):
        IBDRPath(None, drPath=[0] + [1] * 63).extend(1)
