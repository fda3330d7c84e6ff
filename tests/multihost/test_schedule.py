"""Pairs, rounds and host specs of rdma.multihost (no hosts needed)."""
import itertools

import pytest

from rdma.multihost.hosts import parse_spec, read_spec_file
from rdma.multihost.schedule import (all_pairs_rounds, pairs_for, read_pairs,
                                     ring_pairs, rounds_of)


@pytest.mark.parametrize("n", range(2, 18))
def test_tournament(n):
    """Every pair exactly once; no host twice in a round; N-1 rounds of
    N/2 pairs (N odd: N rounds of (N-1)/2)."""
    rounds = all_pairs_rounds(n)
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts))
    if n % 2 == 0:
        assert len(rounds) == n - 1
        assert all(len(r) == n // 2 for r in rounds)
    else:
        assert len(rounds) == n
        assert all(len(r) == (n - 1) // 2 for r in rounds)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring(n):
    pairs = ring_pairs(n)
    assert len(pairs) == (1 if n == 2 else n)
    rounds = rounds_of(pairs)
    assert sorted(p for r in rounds for p in r) == sorted(pairs)
    assert len(rounds) <= 3
    for r in rounds:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts))


def test_pairs_file(tmp_path):
    f = tmp_path / "pairs"
    f.write_text("# the links to check\nh0 h2\nh1,h3\nh2 h0\n")
    assert read_pairs(str(f), ["h0", "h1", "h2", "h3"]) == [(0, 2), (1, 3)]
    assert pairs_for(str(f), ["h0", "h1", "h2", "h3"]) == [[(0, 2), (1, 3)]]
    f.write_text("h0 h9\n")
    with pytest.raises(ValueError, match="unknown host 'h9'"):
        read_pairs(str(f), ["h0", "h1"])
    f.write_text("h0 h0\n")
    with pytest.raises(ValueError, match="itself"):
        read_pairs(str(f), ["h0", "h1"])
    f.write_text("h0\n")
    with pytest.raises(ValueError, match="two host names"):
        read_pairs(str(f), ["h0", "h1"])


def test_parse_spec():
    s = parse_spec("ssh=node1//python=/opt/venv/bin/python//device=mlx5_0/1"
                   "//gid_index=3", 4)
    assert s.name == "h4"
    assert s.device == "mlx5_0/1" and s.gid_index == 3
    assert s.spec == "ssh=node1//id=h4//python=/opt/venv/bin/python"
    s = parse_spec("popen//id=left", 0)
    assert s.name == "left" and s.spec == "popen//id=left"
    with pytest.raises(ValueError, match="not an execnet gateway spec"):
        parse_spec("node1", 0)
    with pytest.raises(ValueError, match="gid_index"):
        parse_spec("popen//gid_index=x", 0)
    with pytest.raises(ValueError, match="empty"):
        parse_spec("  ", 0)


def test_spec_file(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# cluster\nssh=a//python=/p\n\nssh=b//python=/p  # b\n")
    assert read_spec_file(str(f)) == ["ssh=a//python=/p", "ssh=b//python=/p"]
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no host specs"):
        read_spec_file(str(f))


def test_hosts_values(tmp_path):
    """--hosts takes specs and files of specs, in order."""
    from rdma.multihost.command import host_specs
    f = tmp_path / "hosts"
    f.write_text("ssh=b//python=/p\nssh=c//id=cee//python=/p\n")
    specs = host_specs(["popen//python=/x", str(f)])
    assert [s.name for s in specs] == ["h0", "h1", "cee"]
    assert specs[1].spec == "ssh=b//id=h1//python=/p"
    with pytest.raises(ValueError, match="neither an execnet spec"):
        host_specs([str(tmp_path / "missing")])
