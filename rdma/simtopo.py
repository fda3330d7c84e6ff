"""Topology files for a simulated subnet (ibsim's input).

ibsim reads ibnetdiscover's format (``Switch``/``Hca`` blocks, one
``[port] "peer"[peer port]`` line per link; examples in
``/usr/share/doc/ibsim-utils/net-examples/``).  This module writes the
two shapes :class:`rdma.simnet.SimNet` (``ibtool simnet up --topology``)
names:

``fat-tree:K``
    a two-level fat-tree of radix *K* (:class:`FatTree`): *K* leaf and
    *K*/2 spine switches of *K* ports, *K*\\ :sup:`2`/2 HCAs;
``line:N``
    *N* switches in a chain, one HCA on each (:func:`line`): the HCAs at
    the two ends are *N* switch hops apart.

HCAs are named ``Hca1``, ``Hca2``...; :func:`hca_nodes` lists the
connected HCAs of any topology file.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple, Union

__all__ = ["MAX_NODES", "MAX_SWITCHES", "MAX_PORTS", "FatTree", "fattree",
           "line", "hca_nodes", "topology_text"]

#: ibsim's limits (printed when it starts).
MAX_NODES = 2048
MAX_SWITCHES = 256
MAX_PORTS = 13312


class FatTree:
    """The shape of a two-level fat-tree.

    Leaf ports 1..hcas go down to HCAs, the next ones up: one link to
    every spine.  By default (radix *k*): *k* leaves, *k*/2 spines, *k*/2
    HCAs per leaf, so every HCA reaches every other through at most three
    switches (full bisection).  Fewer HCAs per leaf or fewer leaves make
    smaller trees of the same shape.

    :raises ValueError: if the shape is impossible or beyond ibsim.
    """

    def __init__(self, radix: int, leaves: Optional[int] = None,
                 spines: Optional[int] = None,
                 hcas: Optional[int] = None) -> None:
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
        self._check()

    def _check(self) -> None:
        radix = self.radix
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
        _check_limits(self.num_switches, self.num_hcas,
                      self.num_switches * (radix + 1) + self.num_hcas * 2)

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
            "# Written by rdma.simtopo.", ""]
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


def _check_limits(switches: int, hcas: int, ports: int) -> None:
    if switches > MAX_SWITCHES or switches + hcas > MAX_NODES or \
            ports > MAX_PORTS:
        raise ValueError(f"{hcas} HCAs and {switches} switches ({ports} "
                         f"ports) exceed ibsim's limits ({MAX_NODES} "
                         f"nodes, {MAX_SWITCHES} switches, {MAX_PORTS} "
                         f"ports)")


def fattree(radix: int, leaves: Optional[int] = None,
            spines: Optional[int] = None, hcas: Optional[int] = None) -> str:
    """Return the topology file of a two-level fat-tree (see
    :class:`FatTree`)."""
    return FatTree(radix, leaves, spines, hcas).text()


def line(n: int) -> str:
    """Return the topology file of *n* switches ``Sw1``..``Sw<n>`` in a
    chain (port 2 to the previous switch, port 3 to the next), with HCA
    ``Hca<i>`` on port 1 of ``Sw<i>``.

    :raises ValueError: unless 1 <= *n* <= ibsim's switch limit."""
    if not 1 <= n <= MAX_SWITCHES:
        raise ValueError(f"a line has 1..{MAX_SWITCHES} switches, not {n}")
    out: List[str] = [f"# {n} switches in a line, one HCA on each.",
                      "# Written by rdma.simtopo.", ""]
    for i in range(1, n + 1):
        out.append(f'Switch\t3 "Sw{i}"')
        out.append(f'[1]\t"Hca{i}"[1]')
        if i > 1:
            out.append(f'[2]\t"Sw{i - 1}"[3]')
        if i < n:
            out.append(f'[3]\t"Sw{i + 1}"[2]')
        out.append("")
    for i in range(1, n + 1):
        out.append(f'Hca\t1 "Hca{i}"')
        out.append(f'[1]\t"Sw{i}"[1]')
        out.append("")
    return "\n".join(out)


def topology_text(spec: Union[str, Path]) -> Tuple[str, str]:
    """The topology file that *spec* names, and a short description:
    ``fat-tree:K``, ``line:N`` or the path of a topology file.

    :raises ValueError: for a malformed shape; :raises FileNotFoundError:
        for a missing file."""
    s = str(spec)
    kind, sep, arg = s.partition(":")
    if sep and kind in ("fat-tree", "line"):
        try:
            n = int(arg)
        except ValueError:
            raise ValueError(f"{s!r}: {kind}: takes a number, as in "
                             f"{kind}:4") from None
        text = fattree(n) if kind == "fat-tree" else line(n)
        return text, s
    path = Path(s)
    if not path.is_file():
        raise FileNotFoundError(
            f"no topology file {s!r} (give a file in ibnetdiscover's "
            f"format, fat-tree:K or line:N)")
    return path.read_text(), str(path.resolve())


def hca_nodes(text: str) -> List[str]:
    """The names of the HCAs of the topology file *text* that have at
    least one connected port, in file order."""
    nodes: List[str] = []
    current: Optional[str] = None
    connected = False
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith(("Hca", "Switch", "Rt")):
            if current and connected:
                nodes.append(current)
            current = s.split('"')[1] if s.startswith("Hca") and '"' in s \
                else None
            connected = False
        elif s.startswith("[") and '"' in s:
            connected = True
    if current and connected:
        nodes.append(current)
    return nodes
