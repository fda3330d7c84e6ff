"""Target parsing of ``ibtool``'s management commands (infiniband-diags'
conventions: LID by default, -G port GUID in hex, -D directed route)."""
import argparse

import pytest

import rdma.path
from rdma.cli._ibopts import CmdError, parse_target


def ns(**kw):
    base = {"addr_direct": False, "addr_guid": False, "addr_lid": False}
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("text,dlid", [("3", 3), ("0x10", 16),
                                       ("49151", 49151)])
def test_lid(text, dlid):
    p = parse_target(text, ns())
    assert isinstance(p, rdma.path.IBPath) and p.DLID == dlid
    assert parse_target(text, ns(addr_lid=True)).DLID == dlid


@pytest.mark.parametrize("text,route", [("0,1,3", b"\0\1\3"), ("0", b"\0"),
                                        ("0,1,3,", b"\0\1\3")])
def test_direct(text, route):
    p = parse_target(text, ns(addr_direct=True))
    assert isinstance(p, rdma.path.IBDRPath) and p.drPath == route


@pytest.mark.parametrize("text", ["100003", "0x100003", "0x0000000000100003"])
def test_guid_is_hex_like_infiniband_diags(text):
    p = parse_target(text, ns(addr_guid=True))
    assert str(p.DGID) == "fe80::10:3"


@pytest.mark.parametrize("text,args,words", [
    ("zz", ns(), "zz"), ("0", ns(), "LID"), ("70000", ns(), "LID"),
    ("3", ns(addr_direct=True), "directed route"),
    ("0,1", ns(addr_lid=True), "not a LID"),
    ("g", ns(addr_guid=True), "GUID"), ("0", ns(addr_guid=True), "GUID"),
    ("1" * 20, ns(addr_guid=True), "64-bit"),
])
def test_bad_targets_name_the_problem(text, args, words):
    with pytest.raises(CmdError) as ei:
        parse_target(text, args)
    assert words in str(ei.value) and isinstance(ei.value, ValueError)
