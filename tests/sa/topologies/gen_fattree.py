#!/usr/bin/env python3
"""Write a two-level fat-tree as an ibsim topology file (ibnetdiscover's
format, as in ``/usr/share/doc/ibsim-utils/net-examples/``).

A fat-tree of radix *k* has *k* leaf switches and *k*/2 spine switches of
*k* ports each.  Leaf port 1..k/2 go down to HCAs, leaf port k/2+1..k up:
one link to every spine.  So it has k*k/2 HCAs and 3k/2 switches; every HCA
reaches every other through at most three switches (full bisection).
Fewer HCAs per leaf (``--hcas``) or fewer leaves (``--leaves``) make
smaller trees with the same shape.

Names: ``Hca1``... (the first HCA is where the fabric runs opensm),
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

#: ibsim's limits (printed when it starts).
MAX_NODES = 2048
MAX_SWITCHES = 256
MAX_PORTS = 13312


class Tree:
    """The shape of a two-level fat-tree."""

    def __init__(self, radix: int, leaves: Optional[int] = None,
                 spines: Optional[int] = None, hcas: Optional[int] = None):
        if radix < 2 or radix % 2 or radix > 254:
            raise ValueError(f"radix must be even and in 2..254, not {radix}")
        half = radix // 2
        #: Ports of every switch.
        self.radix = radix
        #: Leaf switches (default: radix).
        self.leaves = radix if leaves is None else leaves
        #: Spine switches (default: radix / 2): one uplink per spine.
        self.spines = half if spines is None else spines
        #: HCAs per leaf (default: radix / 2).
        self.hcas = half if hcas is None else hcas
        if not 1 <= self.leaves:
            raise ValueError(f"at least one leaf, not {self.leaves}")
        if not 0 <= self.spines or self.spines > radix - self.hcas:
            raise ValueError(f"{self.spines} spines do not fit the "
                             f"{radix - self.hcas} uplinks of a leaf")
        if not 1 <= self.hcas <= radix - (1 if self.leaves > 1 else 0):
            raise ValueError(f"{self.hcas} HCAs per leaf do not fit "
                             f"{radix} ports")
        if self.leaves > 1 and self.spines == 0:
            raise ValueError("several leaves need at least one spine")
        if self.leaves > radix:
            raise ValueError(f"a spine of {radix} ports links at most "
                             f"{radix} leaves, not {self.leaves}")
        n_sw = self.leaves + self.spines
        n_hca = self.leaves * self.hcas
        ports = n_sw * (radix + 1) + n_hca * 2
        if n_sw > MAX_SWITCHES or n_sw + n_hca > MAX_NODES or \
                ports > MAX_PORTS:
            raise ValueError(f"{n_hca} HCAs and {n_sw} switches ({ports} "
                             f"ports) exceed ibsim's limits ({MAX_NODES} "
                             f"nodes, {MAX_SWITCHES} switches, {MAX_PORTS} "
                             f"ports)")

    @property
    def num_hcas(self) -> int:
        return self.leaves * self.hcas

    @property
    def num_switches(self) -> int:
        return self.leaves + self.spines

    def text(self) -> str:
        """The topology file."""
        k, h = self.radix, self.hcas
        out: List[str] = [
            f"# Two-level fat-tree: {self.leaves} leaves, {self.spines} "
            f"spines of {k} ports, {h} HCAs per leaf ({self.num_hcas} HCAs).",
            "# Written by tests/sa/topologies/gen_fattree.py.", ""]
        for leaf in range(1, self.leaves + 1):
            out.append(f'Switch\t{k} "Leaf{leaf}"')
            for i in range(1, h + 1):
                out.append(f'[{i}]\t"Hca{(leaf - 1) * h + i}"[1]')
            for s in range(1, self.spines + 1):
                out.append(f'[{h + s}]\t"Spine{s}"[{leaf}]')
            out.append("")
        for s in range(1, self.spines + 1):
            out.append(f'Switch\t{k} "Spine{s}"')
            for leaf in range(1, self.leaves + 1):
                out.append(f'[{leaf}]\t"Leaf{leaf}"[{h + s}]')
            out.append("")
        for n in range(1, self.num_hcas + 1):
            leaf, i = divmod(n - 1, h)
            out.append(f'Hca\t1 "Hca{n}"')
            out.append(f'[1]\t"Leaf{leaf + 1}"[{i + 1}]')
            out.append("")
        return "\n".join(out)


def fattree(radix: int, leaves: Optional[int] = None,
            spines: Optional[int] = None, hcas: Optional[int] = None) -> str:
    """Return the topology file of a two-level fat-tree (see :class:`Tree`).

    :raises ValueError: if the shape is impossible or beyond ibsim."""
    return Tree(radix, leaves, spines, hcas).text()


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
