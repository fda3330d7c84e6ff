"""The outlier analysis (rdma.multihost.engine.find_outliers) on result
tables: which host or link it blames for which bad pairs.  (The same
analysis runs on real measurements in test_netns_validate.py.)"""
import itertools

import pytest

from rdma.multihost.engine import Case, Options, Result, find_outliers
from rdma.multihost.hosts import Host, HostSpec


def result(n, bw, failed=(), lat=None):
    """A Result of n hosts whose perf cases measured bw(a, b) MiB/s (and
    lat(a, b) us); pairs in *failed* have a failed transfer check."""
    hosts = [Host(HostSpec("popen", f"h{i}", None, None)) for i in range(n)]
    res = Result(hosts, [], Options(slow_fraction=0.5, lat_factor=5))
    for i in range(n):
        res.cases.append(Case("port", (f"h{i}",), "PASSED"))
    for a, b in itertools.combinations(range(n), 2):
        pa, pb = f"h{a}", f"h{b}"
        ok = (a, b) not in failed
        res.cases.append(Case("transfer[RC-SEND]", (pa, pb),
                              "PASSED" if ok else "FAILED", "x"))
        if ok:
            d = {"bw_ab": bw(a, b), "bw_ba": bw(b, a),
                 "lat_us": lat(a, b) if lat else 20.0}
            res.cases.append(Case("perf", (pa, pb), "PASSED", "", 0, d))
            res.bw[pa][pb], res.bw[pb][pa] = d["bw_ab"], d["bw_ba"]
            res.lat[pa][pb] = res.lat[pb][pa] = d["lat_us"]
    return res


@pytest.mark.parametrize("n", [4, 8, 16])
def test_slow_host(n):
    o = find_outliers(result(n, lambda a, b: 10.0 if 2 in (a, b) else 1000))
    assert list(o.hosts) == ["h2"] and not o.links
    assert set(o.bad_pairs) == {tuple(sorted((f"h{i}", "h2"),
                                             key=lambda s: int(s[1:])))
                                for i in range(n) if i != 2}


def test_slow_one_way_link():
    """Only h1 -> h3 is slow: the link is blamed, no host."""
    o = find_outliers(result(6, lambda a, b: 50.0 if (a, b) == (1, 3)
                             else 1000))
    assert not o.hosts and list(o.links) == [("h1", "h3")]
    assert "h1->h3 50.0 MiB/s" in o.links[("h1", "h3")]


def test_broken_host_and_link():
    """h5 fails with everyone, and h0-h1 alone: h5 and the link h0-h1."""
    failed = {(i, 5) for i in range(5)} | {(0, 1)}
    o = find_outliers(result(6, lambda a, b: 1000, failed=failed))
    assert list(o.hosts) == ["h5"]
    assert list(o.links) == [("h0", "h1")]


def test_high_latency_host():
    o = find_outliers(result(4, lambda a, b: 1000,
                             lat=lambda a, b: 900 if 0 in (a, b) else 20))
    assert list(o.hosts) == ["h0"]


def test_healthy_noise_is_not_an_outlier():
    o = find_outliers(result(8, lambda a, b: 600 + 50 * ((a * 7 + b) % 7)))
    assert o.clean


def test_two_hosts_blame_the_link():
    o = find_outliers(result(2, lambda a, b: 1000, failed={(0, 1)}))
    assert not o.hosts and list(o.links) == [("h0", "h1")]
    assert "cannot be told" in o.links[("h0", "h1")]


def test_host_whose_port_failed_is_named():
    res = result(3, lambda a, b: 1000)
    res.cases[1] = Case("port", ("h1",), "FAILED", "ucx0/1 is not ACTIVE")
    o = find_outliers(res)
    assert o.hosts == {"h1": "port: ucx0/1 is not ACTIVE"}
