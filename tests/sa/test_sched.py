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
