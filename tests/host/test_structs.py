"""Struct objects: keyword construction, range checks, repr, equality,
pickle."""
import pickle

import pytest

import rdma.ibverbs as ibv
from rdma.IBA import GID


def test_keyword_construction_sets_fields():
    a = ibv.port_attr(state=ibv.IBV_PORT_ACTIVE, lid=3,
                      max_mtu=ibv.IBV_MTU_4096)
    assert (a.state, a.lid, a.max_mtu) == (4, 3, 5)
    assert a.sm_lid == 0  # unset fields are zero


def test_positional_arguments_rejected():
    with pytest.raises(TypeError, match="keyword arguments only"):
        ibv.port_attr(4)


def test_unknown_field_named_in_error():
    with pytest.raises(TypeError, match="'bogus'"):
        ibv.device_attr(bogus=1)
    a = ibv.device_attr()
    with pytest.raises(AttributeError):
        a.bogus = 1


@pytest.mark.parametrize("field,bad,exc", [
    ("lid", 1 << 16, ValueError),        # uint16
    ("lid", -1, ValueError),
    ("lmc", 256, ValueError),            # uint8
    ("max_msg_sz", 1 << 32, ValueError),  # uint32
    ("state", 1 << 31, ValueError),       # int32
    ("lid", "3", TypeError),
    ("lid", 3.0, TypeError),
])
def test_range_and_type_errors_name_the_field(field, bad, exc):
    with pytest.raises(exc, match=field):
        ibv.port_attr(**{field: bad})


def test_limits_accepted():
    a = ibv.port_attr(lid=0xFFFF, state=-(1 << 31), max_msg_sz=0xFFFFFFFF)
    assert (a.lid, a.state, a.max_msg_sz) == (0xFFFF, -(1 << 31), 0xFFFFFFFF)
    d = ibv.device_attr(max_mr_size=(1 << 64) - 1)
    assert d.max_mr_size == (1 << 64) - 1
    with pytest.raises(ValueError, match="max_mr_size"):
        ibv.device_attr(max_mr_size=1 << 64)


def test_string_field():
    d = ibv.device_attr(fw_ver="1.2.3")
    assert d.fw_ver == "1.2.3"
    with pytest.raises(ValueError, match="fw_ver"):
        d.fw_ver = "x" * 64
    assert d.fw_ver == "1.2.3"  # a rejected value leaves the field alone


def test_gid_field_accepts_text_bytes_and_gid():
    e = ibv.gid_entry(gid="fe80::1", gid_index=1,
                      gid_type=ibv.IBV_GID_TYPE_ROCE_V2)
    assert isinstance(e.gid, GID) and str(e.gid) == "fe80::1"
    e.gid = bytes(range(16))
    assert bytes(e.gid) == bytes(range(16))
    with pytest.raises(ValueError, match="gid"):
        e.gid = b"short"
    with pytest.raises(ValueError):
        e.gid = "not a gid"


def test_repr_and_equality():
    a = ibv.port_attr(lid=7)
    b = ibv.port_attr(lid=7)
    assert a == b and not (a != b)
    b.lid = 8
    assert a != b
    assert "lid=7" in repr(a) and repr(a).startswith("port_attr(")
    assert a != ibv.device_attr()
    with pytest.raises(TypeError):  # mutable: not hashable
        hash(a)


def test_pickle_round_trip():
    a = ibv.device_attr(fw_ver="9.9", max_qp=123, node_guid=0x1122334455667788)
    b = pickle.loads(pickle.dumps(a))
    assert a == b and b.fw_ver == "9.9"


def test_fields_lists_c_order():
    f = ibv.port_attr._fields()
    assert f[:3] == ("state", "max_mtu", "active_mtu")
    assert "port_cap_flags2" in f


def test_cannot_delete_field():
    a = ibv.port_attr()
    with pytest.raises(AttributeError, match="delete"):
        del a.lid


_DEEP_CHAIN_SCRIPT = r"""
import gc, pickle, sys
import rdma.ibverbs as ibv

n = int(sys.argv[1])
for cls in (ibv.send_wr, ibv.recv_wr):
    # freed by reference counting when the head goes away
    head = None
    for i in range(n):
        head = cls(wr_id=i, next=head)
    for what in (repr, pickle.dumps):
        try:
            what(head)
        except RecursionError:
            pass
    del head
    # freed by the cycle collector (the tail points back to the head)
    tail = head = cls(wr_id=0)
    for i in range(1, n):
        head = cls(wr_id=i, next=head)
    tail.next = head
    del head, tail
    gc.collect()
    # a chain of a subclass, and a chain shared by two heads
    class Sub(cls):
        pass
    head = None
    for i in range(n // 4):
        head = Sub(wr_id=i, next=head)
    other = cls(next=head)
    del head
    assert other.next.next.wr_id == n // 4 - 2
    del other
print("freed", flush=True)
"""


def test_deep_next_chain_frees_without_recursion():
    """A send_wr/recv_wr chain of a million links built with next= is freed
    iteratively (it used to overflow the C stack at about 200k links); repr
    and pickle of it may raise RecursionError but must not crash."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-P", "-c", _DEEP_CHAIN_SCRIPT,
                        "1000000"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and r.stdout.strip() == "freed", (
        r.returncode, r.stdout[-2000:], r.stderr[-2000:])
