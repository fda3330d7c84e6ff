#!/usr/bin/env python3
"""Write a two-level fat-tree as an ibsim topology file (ibnetdiscover's
format, as in ``/usr/share/doc/ibsim-utils/net-examples/``).

A fat-tree of radix *k* has *k* leaf switches and *k*/2 spine switches of
*k* ports each.  Leaf port 1..k/2 go down to HCAs, leaf port k/2+1..k up:
one link to every spine.  So it has k*k/2 HCAs and 3k/2 switches; every HCA
reaches every other through at most three switches (full bisection).
Fewer HCAs per leaf (``--hcas``) or fewer leaves (``--leaves``) make
smaller trees with the same shape.

The generator is :mod:`rdma.simtopo`'s (this script is its command
line).  Names: ``Hca1``... (the first HCA is where the fabric runs opensm),
``Leaf1``..., ``Spine1``....  ibsim accepts at most 2048 nodes, 256 switches
and 13312 ports (each node counts its ports plus port 0); :func:`fattree`
refuses a tree beyond those limits.

Usage::

    gen_fattree.py 16 > ft16              # radix 16: 128 HCAs, 24 switches
    gen_fattree.py 36 --hcas 12 -o ft36   # 36 leaves x 12 HCAs = 432 HCAs
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

# The generator is rdma's (``ibtool simnet up --topology fat-tree:K``).
from rdma.simtopo import (MAX_NODES, MAX_PORTS, MAX_SWITCHES,  # noqa: F401
                          fattree)
from rdma.simtopo import FatTree as Tree  # noqa: F401


def write_fattree(path: Path, radix: int, **kw: Optional[int]) -> Path:
    """Write :func:`fattree` to *path* and return it."""
    path = Path(path)
    path.write_text(fattree(radix, **kw))
    return path


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("radix", type=int, help="ports per switch (even)")
    p.add_argument("--leaves", type=int, help="leaf switches (radix)")
    p.add_argument("--spines", type=int, help="spine switches (radix/2)")
    p.add_argument("--hcas", type=int, help="HCAs per leaf (radix/2)")
    p.add_argument("-o", "--output", type=Path, help="file (stdout)")
    a = p.parse_args(argv)
    try:
        text = fattree(a.radix, a.leaves, a.spines, a.hcas)
    except ValueError as e:
        p.error(str(e))
    if a.output:
        a.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
