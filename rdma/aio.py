"""asyncio glue: await work completions without busy polling.

::

    acq = rdma.aio.AsyncCQ(cq)          # cq made with a comp_channel
    wc = await acq.get()                # one completion
    async for wc in acq:                # forever
        ...

The completion channel's fd is watched with ``loop.add_reader``; the CQ is
armed, polled again, and only then does the coroutine wait, so no event is
missed.  One AsyncCQ per CQ; several coroutines may await it.

Connection manager events the same way::

    ach = rdma.aio.AsyncEventChannel(channel)   # an rdma.cm.EventChannel
    ev = await ach.get()                        # the next CMEvent
    ev = await ach.wait(cid, CMEventType.ESTABLISHED)
"""
from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Iterable, List, Optional, Union

import rdma.ibverbs as ibv

if TYPE_CHECKING:
    import rdma.cm

__all__ = ["AsyncCQ", "AsyncEventChannel"]


async def _readable(fd: int) -> None:
    """Wait until fd is readable (loop.add_reader)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await fut
    finally:
        loop.remove_reader(fd)


class AsyncCQ:
    """Awaitable completions of a CQ that has a completion channel."""

    #: Acknowledge events after this many.
    ACK_BATCH = 32

    def __init__(self, cq: "ibv.CQ", solicited_only: bool = False):
        if cq.comp_channel is None:
            raise ValueError("AsyncCQ needs a CQ made with a comp_channel")
        self._cq = cq
        self._cc = cq.comp_channel
        self._solicited_only = solicited_only
        self._ready: collections.deque[ibv.wc] = collections.deque()
        self._unacked = 0

    @property
    def cq(self) -> "ibv.CQ":
        return self._cq

    def _ack(self) -> None:
        if self._unacked and not self._cq.closed:
            self._cq.ack_events(self._unacked)
        self._unacked = 0

    async def _wait_readable(self) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = self._cc.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await fut
        finally:
            loop.remove_reader(fd)

    async def poll(self, n: int = -1) -> List["ibv.wc"]:
        """Return the available completions (at most *n*), waiting for at
        least one."""
        while True:
            if self._ready:
                out: List[ibv.wc] = []
                while self._ready and (n < 0 or len(out) < n):
                    out.append(self._ready.popleft())
                return out
            wcs = self._cq.poll(n)
            if wcs:
                return wcs
            self._cq.req_notify_cq(self._solicited_only)
            wcs = self._cq.poll(n)
            if wcs:
                return wcs
            await self._wait_readable()
            if self._cc.get_cq_event(timeout=0) is not None:
                self._unacked += 1
                if self._unacked >= self.ACK_BATCH:
                    self._ack()

    async def get(self) -> "ibv.wc":
        """The next completion."""
        if not self._ready:
            self._ready.extend(await self.poll())
        return self._ready.popleft()

    def __aiter__(self) -> "AsyncCQ":
        return self

    async def __anext__(self) -> "ibv.wc":
        if self._cq.closed:
            raise StopAsyncIteration
        return await self.get()

    def close(self) -> None:
        """Acknowledge outstanding events (the CQ stays open)."""
        self._ack()


class AsyncEventChannel:
    """Awaitable events of an :class:`rdma.cm.EventChannel` (its fd is
    watched with ``loop.add_reader``; events are read without blocking)."""

    def __init__(self, channel: "rdma.cm.EventChannel"):
        self._ch = channel

    @property
    def channel(self) -> "rdma.cm.EventChannel":
        return self._ch

    async def get(self) -> "rdma.cm.CMEvent":
        """The next event of the channel."""
        while True:
            ev = self._ch.get_event(timeout=0)
            if ev is not None:
                return ev
            await _readable(self._ch.fileno())

    async def wait(self, cid: Optional["rdma.cm.CMID"],
                   expected: Union["rdma.cm.CMEventType",
                                   Iterable["rdma.cm.CMEventType"]],
                   func: str = "wait") -> "rdma.cm.CMEvent":
        """The next event of ``cid`` checked as
        :meth:`rdma.cm.EventChannel.wait_event` does (events of other IDs
        are set aside for later)."""
        while True:
            try:
                return self._ch.wait_event(cid, expected, func, timeout=0)
            except TimeoutError:
                await _readable(self._ch.fileno())

    def __aiter__(self) -> "AsyncEventChannel":
        return self

    async def __anext__(self) -> "rdma.cm.CMEvent":
        if self._ch.closed:
            raise StopAsyncIteration
        return await self.get()
