"""The fabric validation suite: ``ibtool validate`` or
``pytest --pyargs rdma.validation``.

It checks one end port (``--rdma-device``/``--rdma-port``) and, with
``--rdma-peer-device``, the path to a second one; otherwise the QP pairs are
loopback on the one port.  Its modules, in the order they run:

``test_ports``      the device opens, the port is ACTIVE, the GID and P_Key
                    tables are sane, the GID index in use holds a GID
``test_transfers``  every verb of RC, UC and UD (SEND, SEND with immediate,
                    RDMA WRITE, WRITE with immediate, RDMA READ) at message
                    sizes from 1 B to 1 MiB (powers of 4, plus the MTU
                    boundaries; UD up to the path MTU), both directions, with
                    the data verified byte for byte and the bytes after it
                    untouched
``test_atomics``    fetch-and-add and compare-and-swap results, and both
                    under contention from several QPs on one counter
``test_features``   shared receive queues, memory windows, UD multicast
                    (each skipped, with the reason, if the device lacks it)
``test_paths``      path resolution: the local (RoCE, software fabric) one
                    always, SA PathRecords where a subnet manager exists

Every test records a one-line ``detail`` property (shown by ``rdma
validate``'s summary table and kept in the JUnit XML).  A missing device or
a port that is not ACTIVE fails the suite (the modules carry the
``rdma_require`` marker): a fabric check without a fabric must not pass.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, List, Optional, Union

import pytest

if TYPE_CHECKING:
    import rdma.ibverbs as ibv
    from rdma.pytest_plugin import RdmaSetup

#: What pytest's ``record_property`` fixture is: record(name, value).
Record = Callable[[str, object], None]
#: The data a check compares (what a buffer object or a slice of it is).
_Data = Union[bytes, bytearray, memoryview]

#: The modules of the suite, in the order they run and are reported.
MODULES = ("test_ports", "test_transfers", "test_atomics", "test_features",
           "test_paths")

#: Largest message of the size sweep.
MAX_SIZE = 1 << 20
#: Bytes checked after each message (must stay untouched).
GUARD = 64
#: The poison that fills receive areas before a transfer.
POISON = 0xA5
#: Seconds to wait for one completion.
TIMEOUT = 30.0


def fmt_size(n: int) -> str:
    """1 B, 4 KiB, 1 MiB..."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def message_sizes(limit: int, mtu: int, quick: bool = False) -> List[int]:
    """Sizes 1 B..*limit* stepping by powers of 4, plus MTU-1, MTU and
    MTU+1 (the single/multi-packet boundary) when they fit."""
    sizes = set()
    n = 1
    while n <= limit:
        sizes.add(n)
        n *= 4
    if limit not in sizes:
        sizes.add(limit)
    if not quick:
        for m in (mtu - 1, mtu, mtu + 1):
            if 1 <= m <= limit:
                sizes.add(m)
    return sorted(sizes)


def random_bytes(n: int) -> bytes:
    """*n* bytes of fresh random data (so stale data never matches)."""
    return os.urandom(n)


def first_difference(got: _Data, want: _Data) -> int:
    """Index of the first byte that differs (-1 if none)."""
    g = memoryview(got).cast("B")
    w = memoryview(want).cast("B")
    n = min(len(g), len(w))
    step = 4096
    for start in range(0, n, step):
        if g[start:start + step] != w[start:start + step]:
            for i in range(start, min(start + step, n)):
                if g[i] != w[i]:
                    return i
    return -1 if len(g) == len(w) else n


def check_data(what: str, got: _Data, want: _Data) -> None:
    """Assert that *got* == *want*, naming the first differing byte."""
    if memoryview(got) == memoryview(want):
        return
    i = first_difference(got, want)
    g = bytes(got[i:i + 8]).hex() if i < len(got) else "(end)"
    w = bytes(want[i:i + 8]).hex() if i < len(want) else "(end)"
    raise AssertionError(f"{what}: data differs at byte {i} of "
                         f"{len(want)}: got {g}, expected {w}")


def wait_data(what: str, buf: _Data, off: int, want: _Data,
              timeout: float = TIMEOUT) -> None:
    """Wait until buf[off:off+len(want)] equals *want* (one-sided writes
    land without a completion at the target)."""
    view = memoryview(buf)[off:off + len(want)]
    deadline = time.monotonic() + timeout
    while view != want:
        if time.monotonic() > deadline:
            check_data(f"{what} (after {timeout:g} s)", view, want)
        time.sleep(0.0005)


def wc_text(wc: ibv.wc) -> str:
    import rdma.ibverbs as ibv
    return (f"{ibv.wc_status_str(wc.status)}, opcode "
            f"{ibv.wc_opcode_str(wc.opcode)}, byte_len {wc.byte_len}, "
            f"qp {wc.qp_num:#x}, vendor_err {wc.vendor_err:#x}")


def check_wc(what: str, wc: ibv.wc, opcode: Optional[int] = None) -> None:
    """Assert *wc* succeeded (with *opcode*)."""
    import rdma.ibverbs as ibv
    if wc.status != ibv.IBV_WC_SUCCESS:
        raise AssertionError(f"{what}: completion failed: {wc_text(wc)}")
    if opcode is not None and wc.opcode != opcode:
        raise AssertionError(f"{what}: completion opcode "
                             f"{ibv.wc_opcode_str(wc.opcode)}, expected "
                             f"{ibv.wc_opcode_str(opcode)}")


def iterations(setup: RdmaSetup) -> int:
    """Repetitions of each size (1 with --rdma-quick)."""
    return 1 if setup.quick else 2


def volume(n: int) -> str:
    """A byte count for people: 5.3 MiB, 12.0 KiB, 17 B."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def mib_per_s(nbytes: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{nbytes / seconds / (1 << 20):.1f} MiB/s"


require = pytest.mark.rdma_require
