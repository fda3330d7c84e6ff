"""``ibtool validate --hosts`` across simulated hosts: network namespaces on
a bridge, the software fabric over TCP between them, one execnet gateway
per namespace (``popen//python=<wrapper that enters the namespace>``).

A healthy run passes and its traffic crossed the veths; a host whose link
is cut or rate-limited fails or flags exactly its own pairs and is named;
a gateway that cannot start or an agent that dies is an error naming the
host, within the timeouts."""
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET


from conftest import run_env
from rdma.multihost import engine, schedule
from rdma.multihost.hosts import parse_spec, start_hosts, stop_hosts

N = 4
CHECKS_PER_PAIR = 13        # 11 transfer cases, atomics, perf


def validate(cluster, *args, timeout=600):
    cmd = [sys.executable, "-m", "rdma", "validate", *args]
    for s in cluster.specs():
        cmd += ["--hosts", s]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=run_env())
    return r.returncode, r.stdout, r.stderr


def junit_cases(path):
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        where = tc.get("classname").rsplit(".", 1)[1]
        res = "PASSED"
        for tag in ("failure", "error", "skipped"):
            if tc.find(tag) is not None:
                res = tag
        out[(where, tc.get("name"))] = res
    return out


def bad_pairs(cases):
    return {w for (w, _), r in cases.items() if r != "PASSED" and "-" in w}


def pairs_with(host, n=N):
    return {f"h{min(i, host)}-h{max(i, host)}" for i in range(n) if i != host}


def test_healthy_run(make_cluster, tmp_path):
    """All checks pass on 4 hosts; one JUnit case per check and pair; the
    matrix and the heatmap are there; every host's veth carried the
    traffic (its interface counters grew by megabytes both ways)."""
    c = make_cluster(N)
    before = [c.counters(i) for i in range(N)]
    xml, png = tmp_path / "v.xml", tmp_path / "m.png"
    # The thresholds are relaxed (bandwidth 0.5 -> 0.2 of the typical,
    # latency 5x -> 10x): pairs measured at the same time share 2 cores
    # with whatever else runs (healthy pairs were seen at 45 % of the
    # median bandwidth and 3.3x the median latency under load); the
    # rate-limited host of test_slow_host_is_named is at 2 %.
    rc, out, err = validate(c, "--junitxml", str(xml), "--plot", str(png),
                            "--slow-fraction", "0.2", "--lat-factor", "10")
    assert rc == 0, out + err
    cases = junit_cases(xml)
    pairs = {f"h{a}-h{b}" for a in range(N) for b in range(a + 1, N)}
    assert len(cases) == N + len(pairs) * CHECKS_PER_PAIR
    assert {w for w, _ in cases} == pairs | {f"h{i}" for i in range(N)}
    assert set(cases.values()) == {"PASSED"}
    assert "no slow or broken host or link" in out
    assert "RDMA WRITE bandwidth, MiB/s" in out
    # A full 4x4 matrix: every off-diagonal cell has a number.
    row = next(ln for ln in out.splitlines() if ln.startswith("h0 "))
    assert len(re.findall(r"\d+(?:\.\d)?", row[3:])) == N - 1
    assert png.stat().st_size > 1000
    assert "perf round 3/3" in err          # progress while it runs
    for i in range(N):
        after = c.counters(i)
        # perf alone writes 3 x 100 x 64 KiB each way per pair, and each
        # host is in 3 pairs: at least 3 x 18.75 MiB out and in.
        assert after["tx_bytes"] - before[i]["tx_bytes"] > 55 << 20, i
        assert after["rx_bytes"] - before[i]["rx_bytes"] > 55 << 20, i


def test_slow_host_is_named(make_cluster, tmp_path):
    """tbf on h2's veth: exactly h2's pairs are flagged slow; h2 is named."""
    c = make_cluster(N)
    c.slow(2, "200mbit")
    xml = tmp_path / "v.xml"
    # Thresholds relaxed as in test_healthy_run (a healthy pair was
    # seen at 48 % of the typical bandwidth in a CI run); h2's pairs are
    # at about 3 % of it (22.7 MiB/s against a typical 730 MiB/s on a
    # busy 2-core machine).  200 Mbit/s rather than 50: each slow pair
    # moves the same bytes (measured twice), and at 50 Mbit/s this test
    # took 42 s instead of 12.
    rc, out, err = validate(c, "--quick", "--checks", "atomics,perf",
                            "--slow-fraction", "0.2", "--lat-factor", "10",
                            "--junitxml", str(xml))
    assert rc == 1, out + err
    cases = junit_cases(xml)
    assert bad_pairs(cases) == pairs_with(2), out
    assert {k[1] for k, r in cases.items() if r != "PASSED"} == {"perf"}
    assert "SUSPECT HOST h2:" in out
    assert "SUSPECT HOST h0" not in out and "SUSPECT LINK" not in out
    assert re.search(r"h0-h2::perf\s+FAILED\s+slow: h0->h2", out), out


def test_cut_after_start(make_cluster):
    """h2's link goes down after every agent opened its device: exactly
    h2's pairs fail (their other checks are not run), h2 is the suspect,
    the other pairs pass, and it ends within the timeouts."""
    c = make_cluster(N)
    specs = [parse_spec(s, i) for i, s in enumerate(c.specs())]
    group, hosts = start_hosts(specs, timeout=60)
    try:
        assert all(h.usable for h in hosts), [h.dead for h in hosts]
        c.cut(2)
        t0 = time.monotonic()
        res = engine.run(hosts, schedule.all_pairs_rounds(N),
                         engine.Options(checks=("transfer", "perf"),
                                        quick=True, timeout=3,
                                        slow_fraction=0.2))
        took = time.monotonic() - t0
    finally:
        stop_hosts(group, hosts)
    bad = {c.where for c in res.failed}
    assert bad == pairs_with(2), [(c.where, c.check, c.detail)
                                  for c in res.failed]
    # The controlling process ran no RDMA of its own: it never even
    # loaded UCX (the provider loads libucp when a device is opened).
    with open("/proc/self/maps") as f:
        assert "libucp" not in f.read()
    assert list(res.outliers.hosts) == ["h2"]
    assert not res.outliers.links
    first = [c for c in res.cases if c.where == "h0-h2"][0]
    assert "RETRY_EXC_ERR" in first.detail or "no completion" in first.detail
    assert took < 120


def test_cut_before_start(make_cluster, tmp_path):
    """A host whose link is down from the start: its port check fails
    with UCX's reason, its pairs are errors, and it is named."""
    c = make_cluster(N)
    c.cut(1)
    xml = tmp_path / "v.xml"
    rc, out, err = validate(c, "--quick", "--checks", "atomics",
                            "--junitxml", str(xml))
    assert rc == 1, out + err
    cases = junit_cases(xml)
    assert cases[("h1", "port")] == "failure"
    assert bad_pairs(cases) == pairs_with(1)
    assert "SUSPECT HOST h1: port:" in out


def test_gateway_that_cannot_start(make_cluster, tmp_path):
    """A spec whose Python does not exist: an error naming the host and
    the spec, quickly, and the run still checks the others."""
    c = make_cluster(3)
    cmd = [sys.executable, "-m", "rdma", "validate", "--quick", "--checks",
           "atomics", "--hosts", "popen//id=ghost//python=/nonexistent/python"]
    for s in c.specs():
        cmd += ["--hosts", s]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=run_env())
    assert time.monotonic() - t0 < 120
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"ghost::port\s+ERROR\s+the gateway "
                     r"'popen//id=ghost//python=/nonexistent/python' could "
                     r"not start", r.stdout), r.stdout
    assert "SUSPECT HOST ghost" in r.stdout
    assert re.search(r"h0-h1::atomics\s+PASSED", r.stdout)


def test_agent_that_dies(make_cluster):
    """An agent killed between rounds: its pairs are errors that say the
    agent died, naming the host; the others pass."""
    c = make_cluster(N)
    specs = [parse_spec(s, i) for i, s in enumerate(c.specs())]
    group, hosts = start_hosts(specs, timeout=60)
    try:
        os.kill(hosts[3].info["pid"], 9)
        res = engine.run(hosts, schedule.all_pairs_rounds(N),
                         engine.Options(checks=("atomics",), timeout=3))
    finally:
        stop_hosts(group, hosts)
    bad = {c.where: c for c in res.failed}
    assert set(bad) == pairs_with(3)
    assert all(c.result == "ERROR" and "h3" in c.detail for c in bad.values())
    assert any("died" in c.detail or "closed" in c.detail
               for c in bad.values()), [c.detail for c in bad.values()]
    assert list(res.outliers.hosts) == ["h3"]


def test_bad_usage(tmp_path):
    """Wrong --hosts values are usage errors (exit 2), before any gateway."""
    base = [sys.executable, "-m", "rdma", "validate"]
    for args, text in ((["--hosts", "popen"], "at least two hosts"),
                       (["--hosts", "nosuchfile", "--hosts", "popen"],
                        "neither an execnet spec"),
                       (["--hosts", "popen", "--hosts", "popen//id=h0"],
                        "used twice"),
                       (["--hosts", "popen", "--hosts", "popen",
                         "--checks", "bogus"], "unknown check"),
                       (["--plot", str(tmp_path / "x.png")], "needs --hosts"),
                       (["--pairs", "ring"], "--pairs needs --hosts")):
        r = subprocess.run(base + args, capture_output=True, text=True,
                           timeout=60, env=run_env())
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert text in r.stderr, (args, r.stderr)


def test_ring_and_pairs_file(make_cluster, tmp_path):
    """--pairs ring checks h0-h1, h1-h2, h2-h3, h3-h0 (2 rounds); --pairs
    FILE exactly the pairs of the file."""
    c = make_cluster(N)
    xml = tmp_path / "ring.xml"
    rc, out, err = validate(c, "--checks", "atomics", "--pairs", "ring",
                            "--junitxml", str(xml))
    assert rc == 0, out + err
    assert {w for w, _ in junit_cases(xml) if "-" in w} == \
        {"h0-h1", "h1-h2", "h2-h3", "h0-h3"}
    assert "4 pairs (ring) in 2 rounds" in out
    f = tmp_path / "pairs"
    f.write_text("h3 h1\n")
    rc, out, err = validate(c, "--checks", "atomics", "--pairs", str(f),
                            "--junitxml", str(xml))
    assert rc == 0, out + err
    assert {w for w, _ in junit_cases(xml) if "-" in w} == {"h1-h3"}


def test_broken_link_is_named(make_cluster, tmp_path):
    """Only h0 and h3 cannot reach each other (blackhole routes): exactly
    that pair fails, and the report blames the link, not a host."""
    c = make_cluster(N)
    c.block(0, 3)
    xml = tmp_path / "v.xml"
    rc, out, err = validate(c, "--quick", "--checks", "atomics,perf",
                            "--pair-timeout", "3", "--slow-fraction", "0.2",
                            "--lat-factor", "10", "--junitxml", str(xml))
    assert rc == 1, out + err
    assert bad_pairs(junit_cases(xml)) == {"h0-h3"}
    assert "SUSPECT LINK h0-h3:" in out
    assert "SUSPECT HOST" not in out
