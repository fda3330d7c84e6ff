"""Small helpers under python-rdma's module name ``rdma.tools``.

python-rdma's management programs time MAD round trips and sampling
intervals with :func:`clock_monotonic`; Python 3 has the monotonic clock
in the standard library, so it is :func:`time.monotonic` here.
"""
from __future__ import annotations

import time

__all__ = ["clock_monotonic"]


def clock_monotonic() -> float:
    """Seconds (float) of the system's monotonic clock (CLOCK_MONOTONIC):
    only differences between two calls mean something."""
    return time.monotonic()
