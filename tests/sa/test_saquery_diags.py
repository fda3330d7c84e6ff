"""``ibtool saquery`` against infiniband-diags' ``saquery``, line by line.

Both tools run with the same arguments on the same node of an ibsim +
opensm fabric (the sa tier's fixtures); their stdout must be identical,
for every query name ``saquery --help`` lists, for its options and
record selectors, on several topologies.  ``--json`` must carry the
same fields under the same names, ``--dotted`` python-rdma's dumps.
"""
import json
import re
import subprocess
import sys

import pytest

from conftest import HERE, TOPOLOGIES
from fabric import Fabric
from rdma import _mad as mad

OURS = [sys.executable, "-m", "rdma", "saquery"]
MCAST_OPS = str(HERE / "mcast_ops.py")
SA_OPS = str(HERE / "saquery_ops.py")

#: Every query name of ``saquery --help``, then its aliases.
QUERY_NAMES = ["ClassPortInfo", "NodeRecord", "PortInfoRecord",
               "SL2VLTableRecord", "PKeyTableRecord",
               "VLArbitrationTableRecord", "InformInfoRecord", "LinkRecord",
               "ServiceRecord", "PathRecord", "MCMemberRecord", "LFTRecord",
               "MFTRecord", "GUIDInfoRecord", "SwitchInfoRecord",
               "SMInfoRecord"]
ALIASES = ["CPI", "NR", "PIR", "SL2VL", "PKTR", "VLAR", "IIR", "LR", "SR",
           "PR", "MCMR", "LFTR", "MFTR", "GIR", "SWIR", "SMIR"]
OPTIONS = ["", "-s", "-g", "-m", "-c", "-x", "-S", "-I", "-D", "-N",
           "-p", "-L Hca3", "-l Hca3", "-G Hca3", "-O 4", "-U 0x100001",
           "-U 0x0000000000100007", "-N Hca3", "Hca3", "4", "-m 0xC000",
           "-m 0xc000 x", "-O 99"]
SELECTORS = [
    "NR 4", "NR Hca2", "PIR 1/1", "PIR 1/1/0", "PIR 2//0", "PIR 2/3",
    "SL2VL 2/1/2", "SL2VL 3//4", "VLAR 2/1/1", "VLAR 3", "GIR 4/0",
    "LFTR 2/0", "LFTR Switch1/0", "SWIR 2", "SWIR Switch2", "SMIR 1",
    "LR 2/1", "LR 2 3", "-x 2/1", "LR 1 2/1",
    "-p --src-to-dst Hca1:Hca3", "-p --src-to-dst 1:5",
    "--src-to-dst 4:6", "PR --slid 1 --dlid 5", "PR --slid 1",
    "PR --sgid-to-dgid fe80::10:1-fe80::10:7",
    "PR --sgid fe80::10:1 --dgid fe80::10:a",
    "PR -M 0x84 --slid 1", "PR --sl 0 --slid 1 --dlid 4",
    "PR -n 1 --slid 1 --dlid 5", "PR -r 1 --slid 1",
    "PR --pkey 0xffff --slid 1", "PR -Q 0 --slid 1 --dlid 4",
    "PR --service_id 0x10 --slid 1 --dlid 4",
    "PR -T 0 -F 0 -H 0 --slid 1 --dlid 5", "PR -R 0x83 --slid 1 --dlid 5",
    "PR --pkt_lifetime 0x80 --slid 1 --dlid 5",
    "MCMR --mlid 0xc000", "MCMR --mgid ff12:401b:ffff::ffff:ffff",
    "MCMR -J 1", "MCMR --scope 2", "MCMR -q 0xb1b", "-g --mlid 0xc000",
    "--smkey 0 NR 1", "--smkey 1 PKTR 2/1", "--smkey 1 PKTR 2/1/0",
    "--smkey 1 PKTR 4", "--smkey 0x1 PKTR 4//0", "-t 2000 NR 1",
    "-C ibsim0 NR 4", "-C ibsim0 -P 1 -N Hca4",
]


def both(fabric, args, node="Hca2"):
    """(saquery's stdout, ours) for the same arguments on *node*."""
    argv = args.split() if isinstance(args, str) else list(args)
    theirs = fabric.run(["saquery", *argv], node).stdout
    ours = fabric.run([*OURS, *argv], node).stdout
    return theirs, ours


def same(theirs, ours):
    """Line by line; the SM's ActCount moves between two runs."""
    def fix(text):
        return re.sub(r"(ActCount\.+)\d+", r"\1N", text).splitlines()
    assert fix(ours) == fix(theirs)


@pytest.mark.parametrize("query", QUERY_NAMES + ALIASES)
def test_every_query_name(fabric, query):
    # opensm answers P_KeyTableRecords to a trusted SM_Key only (its
    # default SM_Key is 1); untrusted, both tools fail alike (see below).
    args = f"--smkey 1 {query}" if query.startswith("PKey") or \
        query == "PKTR" else query
    theirs, ours = both(fabric, args)
    same(theirs, ours)
    if query not in ("InformInfoRecord", "IIR", "ServiceRecord", "SR",
                     "MFTRecord", "MFTR"):
        assert ours.strip(), query          # not a match of two blanks


@pytest.mark.parametrize("args", OPTIONS)
def test_options(fabric, args):
    theirs, ours = both(fabric, args)
    same(theirs, ours)
    if args not in ("-O 99", "-S", "-I"):     # no such node, no records
        assert ours.strip()


@pytest.mark.parametrize("args", SELECTORS)
def test_record_selectors(fabric, args):
    theirs, ours = both(fabric, args)
    same(theirs, ours)
    assert ours.strip()


@pytest.mark.parametrize("topo", ["1sw2hca", "2sw2hca2port", "1sw4hca"])
@pytest.mark.parametrize("args", ["NR", "PIR", "PR", "LR", "SWIR", "LFTR",
                                  "SL2VL", "GIR", "-D", "-s", "-g", "-m",
                                  "-c", "SMIR"])
def test_other_topologies(fabrics, topo, args):
    f = fabrics(topo)
    theirs, ours = both(f, args)
    same(theirs, ours)
    assert ours.strip()


def test_node_name_map(fabric, tmp_path):
    """``--node-name-map``: the map's names replace NodeDescriptions in
    node dumps, ``-D``, ``-O`` and ``-m``, as in saquery."""
    nmap = tmp_path / "names"
    nmap.write_text("# test map\n0x0000000000100006 \"rack1 host3\"\n"
                    "0x100003 hca-two\n")
    for args in ("-D", "NR", "-N", "-O 5", "-O 4", "-m", "5", "-U 0x100007"):
        theirs, ours = both(fabric, f"--node-name-map {nmap} {args}")
        same(theirs, ours)
        assert ours.strip()
    assert "rack1 host3" in ours


@pytest.fixture
def service(fabric, worker):
    """A ServiceRecord registered with the SA for one test."""
    ep = worker.call("end_port")
    rec = mad.SAServiceRecord(
        serviceID=0x1000_0000_0000_0CDE, serviceGID=ep["gid"],
        servicePKey=0xFFFF, serviceLease=0xFFFFFFFF,
        serviceKey="fe80::1234", serviceName=b"saquery-diags",
        serviceData8=tuple(range(1, 17)),
        serviceData16=tuple(range(0x100, 0x108)),
        serviceData32=(0xDEADBEEF, 1, 2, 3),
        serviceData64=(0x0123456789ABCDEF, 0xFEDCBA9876543210))
    worker.call("sa_set", rec)
    key = mad.SAServiceRecord(serviceID=rec.serviceID,
                              serviceGID=rec.serviceGID, servicePKey=0xFFFF)
    try:
        yield rec
    finally:
        worker.call("sa_delete", key)


def test_service_records(fabric, service):
    """ServiceRecords (``SR``, ``-S``; ``-K`` shows the ServiceKey, which
    opensm gives a trusted SM_Key only)."""
    for args in ("SR", "-S", "ServiceRecord", "-K SR", "--smkey 1 -K SR"):
        theirs, ours = both(fabric, args)
        same(theirs, ours)
        assert "saquery-diags" in ours
    assert "ServiceKey..............0xfe800000000000000000000000001234" \
        in ours


def _text_records(text):
    """saquery's ``key....value`` lines, one dict per record dump."""
    recs = []
    for line in text.splitlines():
        if not line.startswith("\t"):
            if line.endswith(("dump:", "ClassPortInfo:")):
                recs.append({})
            continue
        m = re.match(r"^\t+([A-Za-z][A-Za-z0-9_ ./]*?):?\.{2,}(.*)$",
                     line)
        if m and recs:
            recs[-1].setdefault(m.group(1).strip(), m.group(2))
    return recs


def _flat(d):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v))
        else:
            out.setdefault(k, v)
    return out


@pytest.mark.parametrize("args", ["NR", "PR", "PIR 1/1", "-c", "SWIR",
                                  "SMIR", "LR", "-g", "-m", "MCMR",
                                  "-s"])
def test_json_uses_the_text_names(fabric, args):
    """``--json``: one object per record, under the names the text
    prints, with the same values (GUIDs and masks in hex)."""
    text = fabric.run([*OURS, *args.split()], "Hca2").stdout
    data = json.loads(fabric.run([*OURS, "--json", *args.split()],
                                 "Hca2").stdout)
    recs = _text_records(text)
    assert len(data) == len(recs) > 0
    for obj, rec in zip(data, recs):
        flat = _flat(obj)
        assert "type" in flat
        assert len(rec) >= 4, rec       # saquery's tab-indented fields
        for key, value in rec.items():
            if key == "ActCount":
                continue
            assert str(flat[key]) == value, (key, flat[key], value)


def test_json_guids_are_hex(fabric):
    data = json.loads(fabric.run([*OURS, "--json", "NR", "4"],
                                 "Hca2").stdout)
    assert data == [dict(data[0])]
    rec = data[0]
    assert rec["type"] == "NodeRecord" and rec["lid"] == 4
    assert rec["node_type"] == "Channel Adapter"
    assert rec["node_guid"] == "0x0000000000100003"
    assert rec["port_guid"] == "0x0000000000100004"
    assert rec["NodeDescription"] == "Hca2"
    pr = json.loads(fabric.run([*OURS, "--json", "-p", "--src-to-dst",
                                "1:5"], "Hca2").stdout)[0]
    assert pr["mtu"] == "0x84" and pr["sgid"] == "fe80::10:1"


def test_dotted_keeps_python_rdma_style(fabric):
    out = fabric.run([*OURS, "--dotted", "NR", "4"], "Hca2").stdout
    assert out.startswith("NodeRecord dump:\n")
    assert re.search(r"nodeInfo\.NodeType\.*1$", out, re.M), out
    out = fabric.run([*OURS, "--dotted", "-p", "--src-to-dst", "1:5"],
                     "Hca2").stdout
    assert re.search(r"MTU\.*4$", out, re.M), out


def test_help_is_saquerys():
    """``ibtool saquery --help`` lists saquery's queries and options
    (``-s`` among them: it used to fall through to the top-level
    usage)."""
    res = subprocess.run([*OURS, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0
    assert res.stdout.startswith("usage: ibtool saquery")
    for word in QUERY_NAMES + ALIASES + ["-s", "-N", "-O", "-U", "-c",
                                         "-m", "-g", "-L", "-l", "-G",
                                         "-D", "--node-name-map",
                                         "--src-to-dst", "--sgid-to-dgid",
                                         "--smkey", "--json", "--dotted"]:
        assert word in res.stdout, word


@pytest.mark.parametrize("args,code,words", [
    ("-L", 2, "name not specified"), ("-O", 2, "lid not specified"),
    ("-O 0", 2, "lid invalid"), ("-U", 2, "guid not specified"),
    ("NR Hca9", 2, "Hca9"), ("PR --src-to-dst 1", 2, "SRC:DST"),
    ("PR --sgid-to-dgid fe80::1", 2, "SGID-DGID"),
    ("PR --sgid nogid", 2, "nogid"), ("PKTR", 1, "ERR_REQ_INVALID"),
    ("LR 0x10000", 2, "0x10000"),
])
def test_bad_usage_is_one_line(fabric, args, code, words):
    res = fabric.run([*OURS, *args.split()], "Hca2", check=False)
    assert res.returncode == code, res.stderr
    assert words in res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def regfab(fabrics, tmp_path_factory):
    """A fabric of this module's own (ibsim's net.2sw2path4hca) whose SA
    holds what the shared one has not: multicast members of two groups
    (so MFTRecords too) and InformInfo subscriptions, generic and
    vendor.  ``fabrics`` is only asked for its skip when ibsim, opensm
    or saquery is missing."""
    f = Fabric(TOPOLOGIES["2sw4hca"], tmp_path_factory.mktemp("saq-reg"))
    try:
        f.start()
        py = sys.executable
        for node, argv in (
                ("Hca1", [MCAST_OPS, "join", "ff12:401b:ffff::ffff:ffff"]),
                ("Hca3", [MCAST_OPS, "join", "ff12:401b:ffff::ffff:ffff"]),
                ("Hca2", [MCAST_OPS, "join", "ff12:601b:ffff::1:ff00:1",
                          "create"]),
                ("Hca4", [MCAST_OPS, "join", "ff12:601b:ffff::1:ff00:1"]),
                ("Hca3", [SA_OPS, "subscribe", "64"]),
                ("Hca4", [SA_OPS, "subscribe", "66"]),
                ("Hca4", [SA_OPS, "subscribe", "0x10", "vendor"])):
            f.run([py, *argv], node)
        yield f
    finally:
        f.close()


@pytest.mark.parametrize("args", [
    "IIR", "-I", "-K IIR", "InformInfoRecord", "IIR fe80::10:7",
    "IIR fe80::10:1", "-m", "-m 0xc000", "-m 0xC001", "--smkey 1 -m",
    "--smkey 1 -m 0xC001", "-g", "MCMR", "--smkey 1 MCMR",
    "MCMR --mlid 0xc001", "MCMR --mgid ff12:601b:ffff::1:ff00:1",
    "--smkey 1 MCMR --gid fe80::10:7", "MFTR", "MFTR 2", "MFTR 2//0",
    "MFTR 3/0/0", "MFTRecord"])
def test_registered_records(regfab, args):
    """InformInfoRecords (opensm packs them 64 bytes apart: the 80-byte
    structure's last 20 reserved bytes are left out), multicast members
    with their nodes' names, MFTRecords."""
    theirs, ours = both(regfab, args)
    same(theirs, ours)
    if args not in ("IIR fe80::10:1",):
        assert ours.strip()


def test_registered_records_node_name_map(regfab, tmp_path):
    nmap = tmp_path / "names"
    nmap.write_text("0x100000 \"sm host\"\n0x0000000000100006 h3\n")
    for args in ("--smkey 1 -m", "--smkey 1 -m 0xc000"):
        theirs, ours = both(regfab, f"--node-name-map {nmap} {args}")
        same(theirs, ours)
        assert "sm host" in ours and "h3" in ours


def _table_reply(cls, records, stride):
    """A GetTableResp MAD (SA header, no RMPP) carrying *records* (raw
    bytes) *stride* bytes apart."""
    hdr = bytes([1, 3, 2, mad.MAD_METHOD_GET_TABLE_RESP]) + bytes(8) + \
        bytes(4) + cls.MAD_ATTRIBUTE_ID.to_bytes(2, "big") + bytes(6) + \
        bytes(12) + bytes(8) + (stride // 8).to_bytes(2, "big") + bytes(10)
    return hdr + b"".join(r.ljust(stride, b"\0") for r in records)


def test_records_closer_than_their_structure():
    """A table whose records are packed closer than the structure, the
    left-out bytes all reserved (opensm's InformInfoRecords): every record
    decodes, its missing reserved bytes as zeros.  Closer than the last
    field that is not reserved is still malformed."""
    cls = mad.SAInformInfoRecord
    recs = []
    for n in (64, 66):
        r = cls()
        r.subscriberGID = "fe80::10:7"
        r.informInfo.trapNumber = n
        r.informInfo.isGeneric = 1
        r.informInfo.producerType = 0xFFFFFF
        recs.append(r)
    raw = [r.pack()[:64] for r in recs]
    rep = mad.decode_sa_reply(_table_reply(cls, raw, 64), cls)
    assert [r.informInfo.trapNumber for r in rep.records] == [64, 66]
    assert [r.pack() for r in rep.records] == [r.pack() for r in recs]
    with pytest.raises(mad.MADFormatError, match="smaller than"):
        mad.decode_sa_reply(_table_reply(cls, [x[:56] for x in raw], 56),
                            cls)
