"""rdma.sched.MADSchedule on opensm + ibsim: many SMPs in flight from
coroutines, the same answers as the synchronous transactor and as
infiniband-diags, timeouts thrown into the coroutine that sent the MAD,
nested coroutines, contexts to wait on."""
import re

import pytest

import rdma.IBA as IBA

LIDS = [1, 2, 3, 4, 5, 6]      # net.2sw2path4hca under opensm


@pytest.mark.parametrize("outstanding", [1, 4, 16])
def test_many_in_flight_equal_the_synchronous_answers(worker, outstanding):
    """PortInfo of all 26 ports: a coroutine per node and per port, up to
    ``outstanding`` MADs at once; the answers equal one-at-a-time
    SubnGets (MKeyViolations aside: nothing changes them here)."""
    par, peak, _, sent = worker.call("madop", "port_infos", LIDS,
                                     max_outstanding=outstanding)
    seq, _ = worker.call("madop", "port_infos_sync", LIDS)
    assert len(par) == 26 and par == seq
    assert sent == 32                       # 6 NodeInfo + 26 PortInfo
    # The 6 NodeInfo coroutines start together; then each node's ports.
    if outstanding < 6:
        assert peak == outstanding
    else:
        assert peak >= 6


def test_directed_walk_finds_what_ibnetdiscover_finds(fabric, worker):
    """A directed-route walk, a coroutine per node found: the nodes and
    links equal ibnetdiscover's on the same fabric."""
    guids, links, peak = worker.call("madop", "dr_walk")
    res = fabric.run(["ibnetdiscover"], "Hca2")
    want_guids = {int(g, 16) for g in re.findall(
        r"^(?:switchguid|caguid)=0x([0-9a-f]+)", res.stdout, re.M)}
    assert set(guids) == want_guids and len(guids) == 6
    want_links = set()
    node = None
    for line in res.stdout.splitlines():
        m = re.match(r'^(?:Switch|Ca)\s+\d+\s+"[SH]-([0-9a-f]+)"', line)
        if m:
            node = int(m.group(1), 16)
            continue
        m = re.match(r'^\[(\d+)\].*"[SH]-([0-9a-f]+)"\[(\d+)\]', line)
        if m and node is not None:
            a = (node, int(m.group(1)))
            b = (int(m.group(2), 16), int(m.group(3)))
            want_links.add(tuple(sorted((a, b))))
    assert {tuple(map(tuple, link)) for link in links} == want_links
    assert peak > 1


def test_timeouts_go_to_the_coroutine_that_sent(worker):
    log = worker.call("madop", "with_failures", 2, 0x77)
    assert ("timeout", True) in log
    assert ("good", 0x200000, "Switch1") in log
    # The waiter on the failing coroutine's context ran after it ended.
    assert log.index(("timeout", True)) < [e[0] for e in log].index(
        "waited")


def test_uncaught_exception_ends_run(worker):
    text = worker.call("madop", "uncaught", 0x77)
    assert text and "SubnGet(SMPNodeInfo)" in text
    assert "after 1 tries (timeout 50 ms each)" in text


def test_do_async_on_the_synchronous_transactor(worker):
    result, got = worker.call("madop", "sync_do_async", 2)
    assert result == "done" and got == [8]


def test_bad_yield_is_a_type_error(worker):
    with pytest.raises(TypeError, match="yielded int"):
        worker.call("madop", "bad_yield")


def test_arun_from_asyncio(worker):
    got, ticks = worker.call("madop", "from_asyncio", 2)
    assert got == [8] * 20 and ticks > 1


@pytest.mark.parametrize("busy_first", [False, True])
def test_mget_batch_equals_the_synchronous_answers(worker, busy_first):
    """sched.mget: good answers, an error status (port 200 does not
    exist) and a timeout (LID 0x77) each in its place, equal to one
    SubnGet at a time; alone it runs in one Port.transact call, with
    another MAD in flight MAD by MAD."""
    got, sync, transacts, sent, attr, no_path = worker.call(
        "madop", "mget_batch", LIDS, 0x77, busy_first=busy_first)
    assert got == sync
    assert len(got) == 6 + 12 + 1
    assert got[-1] == "MADTimeoutError"
    assert got.count("MADError") == 6          # every port 200
    assert all(isinstance(g, dict) for g in got[:-1] if g != "MADError")
    assert transacts == (0 if busy_first else 1)
    # 18 answered + the dead LID twice (1 re-send), + the other MAD.
    assert sent == 18 + 2 + (1 if busy_first else 0)
    if not busy_first:
        assert attr == IBA.SMPPortInfo.MAD_ATTRIBUTE_ID and no_path


def test_fast_path_reply_fmt_and_path(worker):
    got, name, method, attr, guid, lids, sync_lids = worker.call(
        "madop", "fast_reply_state", 2)
    assert name == "SMPFormat" and method == IBA.MAD_METHOD_GET_RESP
    assert attr == IBA.SMPNodeInfo.MAD_ATTRIBUTE_ID
    assert got == [guid] and guid
    assert lids == sync_lids


def test_port_transact_in_c(worker):
    out = worker.call("madop", "transact_raw", 2, 0x77)
    assert out["types"] == ["bytes", "NoneType"]
    assert out["sends"] == 1 + 2 and out["unmatched"] == 0
    assert out["tid"] == "00001234" and out["guid"]
    e = out["errors"]
    assert e[0].startswith("ValueError: transact: window is 1 to 4096")
    assert e[1].startswith("TypeError: transact: request 0 is not a tuple")
    assert e[2].startswith("ValueError: transact: request 0: a MAD is 24")
    assert e[3].startswith("ValueError: transact: request 0:")
    assert e[4].startswith("TypeError: transact: requests must be a")
    assert out["empty"] == ([], 0, 0)
