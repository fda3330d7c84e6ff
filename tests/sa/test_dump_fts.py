"""``ibtool dump_mfts`` and ``dump_lfts`` against infiniband-diags'
``dump_mfts``/``dump_lfts`` scripts on fabrics with multicast groups
joined through the SA (the fixtures of ``test_mcast.py``: two 24-port
switches with 32 HCAs, and a fat-tree of 12 switches): every switch's
table, reached by the directed route discovery found, block for block.
"""
import sys

import pytest

from test_ibtool import _fts_blocks
from test_mcast import fatfab, mfab  # noqa: F401 - fixtures


def _both(f, argv, node="Hca2"):
    theirs = f.run(list(argv), node, timeout=120).stdout
    ours = f.run([sys.executable, "-m", "rdma", *argv], node,
                 timeout=120).stdout
    return _fts_blocks(theirs), _fts_blocks(ours)


@pytest.mark.parametrize("argv", [["dump_mfts"], ["dump_mfts", "-n"],
                                  ["dump_mfts", "-a", "0xc000", "0xc004"],
                                  ["dump_mfts", "0xc001"], ["dump_lfts"],
                                  ["dump_lfts", "-n", "1", "9"]],
                         ids=lambda a: " ".join(a))
def test_dump_fts_multicast_groups(mfab, argv):
    """Both switches' tables: the MLIDs of the three groups with their
    ports in 25-port rows (the tens row too), and the unicast tables."""
    f, _, _ = mfab
    theirs, ours = _both(f, argv)
    assert ours == theirs and len(ours) == 2
    if argv[0] == "dump_mfts" and "-a" not in argv:
        assert any("0xc000" in line for b in ours for line in b[1:]) or \
            "0xc001" in argv


@pytest.mark.parametrize("cmd", ["dump_mfts", "dump_lfts"])
def test_dump_fts_fattree(fatfab, cmd):
    """Twelve switches, each reached by the same shortest directed route
    as infiniband-diags' discovery takes."""
    f, _ = fatfab
    theirs, ours = _both(f, [cmd, "-n"])
    assert ours == theirs and len(ours) == 12
