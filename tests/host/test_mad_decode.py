"""The transactor's reply decoder against hostile answers (hypothesis).

``_Replay`` is a MADTransactor whose ``_execute`` hands back the bytes
the test gives instead of sending anything: the decoding core
(``_completeMAD``, the BUSY/REDIRECT loop of ``_doMAD``) gets whatever a
broken or hostile peer could send.  Real answers are tested on ibsim in
tests/sa (test_madtransactor.py, test_mad_peers.py); this is the fuzzing
of the decoder the issue asks for.  Whatever the bytes, an RPC returns a
decoded attribute (or a list of records) or raises an rdma.IBA.MADError;
it never raises anything else and never loops forever.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rdma.IBA as IBA
from rdma.binstruct import BinStruct
from rdma.madtransactor import MADTransactor


class _Path:
    DLID = 5
    drPath = None

    def __repr__(self):
        return "Path(5)"


class _Replay(MADTransactor):
    busy_delay = 0

    def __init__(self, replies, fix_header=True):
        self.replies = list(replies)
        self.fix_header = fix_header
        self.sent = []
        self._tid = 0x1000

    def _get_new_TID(self):
        self._tid += 1
        return self._tid

    def _execute(self, buf, path, sendOnly=False):
        self.sent.append((bytes(buf), path))
        if not self.replies:
            return None
        rep = bytearray(self.replies.pop(0))
        if self.fix_header and len(rep) >= 16:
            # Make it match the request (class, TID) so that the decoder,
            # not the matching, sees it.
            rep[1] = buf[1]
            rep[12:16] = buf[12:16]
        return rep, path


_RPCS = [
    ("SubnGet", IBA.SMPNodeInfo, _Path()),
    ("SubnGet", IBA.SMPPortInfo, type("DR", (), {"drPath": b"\0\1\2",
                                                 "DLID": 0xFFFF})()),
    ("PerformanceGet", IBA.PMPortCounters(portSelect=1), _Path()),
    ("SubnAdmGet", IBA.SANodeRecord(LID=1), _Path()),
    ("SubnAdmGetTable", IBA.SAPathRecord(DLID=1), _Path()),
    ("BMGet", IBA.MADClassPortInfo, _Path()),
]


def _run(rpc, replies, fix_header=True):
    name, payload, path = rpc
    t = _Replay(replies, fix_header)
    try:
        res = getattr(t, name)(payload, path)
    except IBA.MADError as e:
        str(e)
        return t, e
    if isinstance(res, list):
        assert all(isinstance(r, BinStruct) for r in res)
    else:
        assert isinstance(res, BinStruct)
    return t, res


@settings(max_examples=400, deadline=None)
@given(rpc=st.sampled_from(_RPCS),
       replies=st.lists(st.binary(max_size=600), min_size=1, max_size=8),
       fix=st.booleans())
def test_fuzz_random_replies(rpc, replies, fix):
    t, _ = _run(rpc, replies, fix)
    # BUSY and REDIRECT are bounded: never more sends than allowed.
    assert len(t.sent) <= 1 + t.busy_retries + t.max_redirects + 1


@st.composite
def _header_reply(draw):
    """A reply that looks right up to the status/method/attribute."""
    hdr = bytearray(256)
    hdr[0] = draw(st.sampled_from([1, 1, 1, 2]))
    hdr[2] = draw(st.integers(0, 3))
    hdr[3] = draw(st.sampled_from([0x81, 0x92, 0x01, 0x95, 0x86]))
    hdr[4:6] = draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    hdr[16:18] = draw(st.sampled_from([0x01, 0x11, 0x12, 0x15, 0x35,
                                       0xFFFF])).to_bytes(2, "big")
    hdr[24:36] = draw(st.binary(min_size=12, max_size=12))
    hdr[36:56] = draw(st.binary(min_size=20, max_size=20))
    body = draw(st.binary(max_size=800))
    cut = draw(st.integers(0, 256))
    return bytes(hdr[:cut]) + body


@settings(max_examples=400, deadline=None)
@given(rpc=st.sampled_from(_RPCS),
       replies=st.lists(_header_reply(), min_size=1, max_size=8))
def test_fuzz_plausible_replies(rpc, replies):
    _run(rpc, replies)


def _reply_to(buf, status=0, data=b"", method=None):
    rep = bytearray(256)
    rep[:24] = buf[:24]
    rep[3] = method if method is not None else buf[3] | 0x80
    rep[4:6] = status.to_bytes(2, "big")
    off = {1: 64, 0x81: 64, 3: 56, 4: 64, 5: 64}[buf[1]]
    rep[off:off + len(data)] = data
    return bytes(rep)


class _Peer(_Replay):
    """Answers with what ``answer(buf, path, n)`` returns."""

    def __init__(self, answer):
        super().__init__([])
        self.answer = answer

    def _execute(self, buf, path, sendOnly=False):
        self.sent.append((bytes(buf), path))
        rep = self.answer(bytes(buf), path, len(self.sent))
        return None if rep is None else (bytearray(rep), path)


def test_decoder_status_words_and_short_replies():
    ni = IBA.SMPNodeInfo(numPorts=3, nodeType=2).pack()
    t = _Peer(lambda b, p, n: _reply_to(b, data=ni))
    assert t.SubnGet(IBA.SMPNodeInfo, _Path()).numPorts == 3
    t = _Peer(lambda b, p, n: _reply_to(b, status=0x1C))
    with pytest.raises(IBA.MADError, match=r"SubnGet\(SMPNodeInfo\) to "
                       r"Path\(5\) got error status 0x1c - invalid "
                       r"attribute"):
        t.SubnGet(IBA.SMPNodeInfo, _Path())
    t = _Peer(lambda b, p, n: _reply_to(b)[:90])
    with pytest.raises(IBA.MADFormatError, match="90 bytes is too short "
                                                 "for SMPNodeInfo"):
        t.SubnGet(IBA.SMPNodeInfo, _Path())
    t = _Peer(lambda b, p, n: _reply_to(b, status=3 << 8))
    with pytest.raises(IBA.SAError) as ei:
        t.SubnAdmGet(IBA.SANodeRecord(LID=1), _Path())
    assert ei.value.sa_word == "ERR_NO_RECORDS" and ei.value.code == 3
    t = _Peer(lambda b, p, n: _reply_to(b, method=0x01))
    with pytest.raises(IBA.MADFormatError, match="not a response"):
        t.SubnGet(IBA.SMPNodeInfo, _Path())
    t = _Peer(lambda b, p, n: None)
    with pytest.raises(IBA.MADTimeoutError, match=r"SubnGet\(SMPNodeInfo\)"
                                                  r" to Path\(5\)"):
        t.SubnGet(IBA.SMPNodeInfo, _Path())


def test_directed_route_request_encoding():
    """What SubnGet puts on the wire for an IBDRPath-like path."""
    class DR:
        drPath = b"\0\1\3"
        DLID = 0xFFFF
        drSLID = 0xFFFF
        drDLID = 0x0007
        MKey = 0x1122
    t = _Peer(lambda b, p, n: None)
    with pytest.raises(IBA.MADTimeoutError, match="DR"):
        t.SubnGet(IBA.SMPPortInfo, DR(), 2)
    raw = t.sent[0][0]
    f = IBA.SMPFormatDirected(raw)
    assert (f.mgmtClass, f.method, f.D, f.hopPointer, f.hopCount) == \
        (0x81, 1, 0, 0, 2)
    assert (f.drSLID, f.drDLID, f.MKey, f.attributeID,
            f.attributeModifier) == (0xFFFF, 7, 0x1122, 0x15, 2)
    assert bytes(f.initialPath[:4]) == b"\0\1\3\0"
