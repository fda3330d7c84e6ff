"""Which host pairs run, and in which rounds.

All pairs run on a round-robin tournament (the circle method): with N
hosts, N-1 rounds of N/2 disjoint pairs (N odd: N rounds, one host rests
in each).  Every host is in at most one pair per round, so the pairs of a
round run at the same time and the wall time grows about linearly with N.
Other pair lists (a ring, a file) are split into rounds of disjoint pairs
greedily.
"""
from __future__ import annotations

from typing import List, Sequence, Set, Tuple

__all__ = ["all_pairs_rounds", "ring_pairs", "read_pairs", "rounds_of",
           "pairs_for"]

Pair = Tuple[int, int]


def all_pairs_rounds(n: int) -> List[List[Pair]]:
    """The circle-method tournament of *n* hosts: every pair exactly once."""
    if n < 2:
        return []
    ids = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        rnd = []
        for i in range(m // 2):
            a, b = ids[i], ids[m - 1 - i]
            if a >= 0 and b >= 0:
                rnd.append((min(a, b), max(a, b)))
        rounds.append(sorted(rnd))
        ids = [ids[0]] + [ids[-1]] + ids[1:-1]      # rotate all but the first
    return rounds


def ring_pairs(n: int) -> List[Pair]:
    """h0-h1, h1-h2, ..., h(n-1)-h0 (one pair for two hosts)."""
    if n < 2:
        return []
    if n == 2:
        return [(0, 1)]
    return [(min(i, (i + 1) % n), max(i, (i + 1) % n)) for i in range(n)]


def read_pairs(path: str, names: Sequence[str]) -> List[Pair]:
    """Pairs from a file: one ``NAME NAME`` (or ``NAME,NAME``) per line,
    host names as in the report (``h0`` or the spec's ``id=``)."""
    index = {n: i for i, n in enumerate(names)}
    out: List[Pair] = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.split("#", 1)[0].replace(",", " ").strip()
            if not line:
                continue
            words = line.split()
            if len(words) != 2:
                raise ValueError(f"{path}:{no}: expected two host names, "
                                 f"got {line!r}")
            for w in words:
                if w not in index:
                    raise ValueError(f"{path}:{no}: unknown host {w!r} "
                                     f"(hosts: {', '.join(names)})")
            a, b = index[words[0]], index[words[1]]
            if a == b:
                raise ValueError(f"{path}:{no}: a host paired with itself")
            p = (min(a, b), max(a, b))
            if p not in out:
                out.append(p)
    if not out:
        raise ValueError(f"{path}: no pairs in the file")
    return out


def rounds_of(pairs: Sequence[Pair]) -> List[List[Pair]]:
    """Split *pairs* into rounds in which no host appears twice (greedy,
    in the order given)."""
    left = list(pairs)
    rounds = []
    while left:
        busy: Set[int] = set()
        rnd, rest = [], []
        for a, b in left:
            if a in busy or b in busy:
                rest.append((a, b))
            else:
                rnd.append((a, b))
                busy.update((a, b))
        rounds.append(rnd)
        left = rest
    return rounds


def pairs_for(mode: str, names: Sequence[str]) -> List[List[Pair]]:
    """The rounds for ``--pairs`` *mode*: ``all``, ``ring`` or a file."""
    n = len(names)
    if mode == "all":
        return all_pairs_rounds(n)
    if mode == "ring":
        return rounds_of(ring_pairs(n))
    return rounds_of(read_pairs(mode, names))
