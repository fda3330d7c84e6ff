"""A verdict of slow is confirmed before it is reported: a pair that
looks slow is measured again, alone, and only what is still slow fails.

Four simulated hosts (network namespaces), ``perf`` only.  While the
measuring rounds run, h2's link is rate-limited (as a neighbour's load
would slow it); it is lifted when the engine starts measuring again.
h2's pairs must come out healthy, each measured twice, and the progress
lines must say what happened.  With the limit kept, test_netns_validate's
test_slow_host_is_named still names h2."""
import pytest

from conftest import run_env
from rdma.multihost import engine, schedule
from rdma.multihost.command import host_specs
from rdma.multihost.hosts import start_hosts, stop_hosts

N = 4


@pytest.fixture
def cluster_hosts(make_cluster, monkeypatch):
    for k, v in run_env().items():
        monkeypatch.setenv(k, v)
    c = make_cluster(N)
    group, hosts = start_hosts(host_specs(c.specs()), timeout=120)
    try:
        assert all(h.usable for h in hosts), [h.dead for h in hosts]
        yield c, hosts
    finally:
        stop_hosts(group, hosts)


def test_slow_only_under_load_is_not_reported(cluster_hosts):
    c, hosts = cluster_hosts
    lines, state = [], {"slow": False}

    def progress(msg):
        lines.append(msg)
        if msg.startswith("perf round 1/") and not state["slow"]:
            # About 3 % of the typical bandwidth here, well under the
            # 20 % line; 50 Mbit/s took 4x as long for nothing more.
            c.slow(2, "200mbit")
            state["slow"] = True
        elif "measuring again, alone" in msg and state["slow"]:
            c.unslow(2)
            state["slow"] = False

    opts = engine.Options(checks=["perf"], quick=True, slow_fraction=0.2,
                          lat_factor=10)
    res = engine.run(hosts, schedule.pairs_for("all", [h.name for h in
                                                      hosts]),
                     opts, progress=progress)
    text = "\n".join(lines)
    again = [ln for ln in lines if "measuring again, alone" in ln]
    assert {ln.split(":")[0].strip() for ln in again} >= \
        {"h0-h2", "h1-h2", "h2-h3"}, text
    assert "not slow when measured alone" in text, text
    assert "still slow" not in text, text
    assert res.passed, (text, [(x.where, x.result, x.detail)
                               for x in res.failed], res.outliers.hosts)
    perf = {x.where: x for x in res.cases if x.check == "perf"}
    assert "the better of two measures" in perf["h0-h2"].detail
    # The progress line of a measured pair does not call it passed.
    assert any("measured (judged against the other pairs at the end)" in ln
               for ln in lines), text
    assert not any(ln.rstrip().endswith("1 passed") for ln in lines), text
