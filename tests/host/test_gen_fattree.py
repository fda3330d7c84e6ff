"""tests/sa/topologies/gen_fattree.py: the fat-trees it writes for ibsim
(shape, limits) and the checked-in files it made."""
import re
import sys

import pytest

from host_helpers import ROOT

TOPO = ROOT / "tests" / "sa" / "topologies"
sys.path.insert(0, str(TOPO))
from gen_fattree import Tree, fattree, main  # noqa: E402


def parse(text):
    """{node: {port: (peer, peer port)}} and {node: (kind, ports)}."""
    links, kinds, cur = {}, {}, None
    for line in text.splitlines():
        m = re.match(r'^(Switch|Hca)\s+(\d+)\s+"(\w+)"', line)
        if m:
            cur = m.group(3)
            kinds[cur] = (m.group(1), int(m.group(2)))
            links[cur] = {}
            continue
        m = re.match(r'^\[(\d+)\]\s+"(\w+)"\[(\d+)\]', line)
        if m:
            links[cur][int(m.group(1))] = (m.group(2), int(m.group(3)))
    return links, kinds


@pytest.mark.parametrize("radix", [4, 8, 16, 62])
def test_shape(radix):
    t = Tree(radix)
    links, kinds = parse(t.text())
    half = radix // 2
    assert t.num_hcas == radix * half and t.num_switches == radix + half
    assert sum(k == "Hca" for k, _ in kinds.values()) == t.num_hcas
    # Every link is written from both ends, the same way.
    for node, ports in links.items():
        for port, (peer, pport) in ports.items():
            assert links[peer][pport] == (node, port)
    # Every leaf reaches every spine once; every HCA hangs off one leaf.
    for leaf in range(1, radix + 1):
        ups = [p for p, (peer, _) in links[f"Leaf{leaf}"].items()
               if peer.startswith("Spine")]
        assert len(ups) == half
    assert all(len(links[f"Hca{i}"]) == 1
               for i in range(1, t.num_hcas + 1))


@pytest.mark.parametrize("args,why", [
    ((64,), "exceed ibsim"), ((7,), "even"), ((0,), "even"),
    ((8, 9), "at most 8 leaves"), ((8, None, None, 8), "do not fit"),
    ((8, None, 5), "do not fit"), ((8, 2, 0), "at least one spine"),
])
def test_impossible_trees_raise(args, why):
    with pytest.raises(ValueError, match=why):
        fattree(*args)


def test_largest_fits_ibsim():
    t = Tree(62)
    assert t.num_hcas + t.num_switches <= 2048 and t.num_switches <= 256


@pytest.mark.parametrize("name,radix", [("fattree8", 8),
                                        ("fattree16", 16)])
def test_checked_in_files_are_the_generators(name, radix):
    assert (TOPO / name).read_text() == fattree(radix)


def test_command_line(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["8", "--hcas", "2", "-o", str(out)]) == 0
    assert parse(out.read_text())[1]["Leaf1"] == ("Switch", 8)
    with pytest.raises(SystemExit):
        main(["9"])
    assert "even" in capsys.readouterr().err
