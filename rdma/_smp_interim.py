"""Interim SMP support for :mod:`rdma.discovery` (to be replaced).

The transactor with directed-route SMPs and ``rdma.sched`` are being
written on another branch.  Until they land, discovery runs on this
module: :class:`MADSchedule`, a scheduler with
python-rdma's coroutine interface (``yield sched.SubnGet(...)``,
``sched.mqueue``, ``sched.queue``, ``sched.run``) that keeps up to
:attr:`MADSchedule.max_outstanding` SMPs in flight on a
:class:`rdma.umad.UMAD`.  It does SubnGet/SubnSet only.

:func:`rdma.discovery.scheduler_class` prefers ``rdma.sched.MADSchedule``
when it exists.
"""
from __future__ import annotations

import collections
import heapq
import inspect
import time
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from rdma import IBA
from rdma._mad import MADError, MADFormatError, MADTimeoutError
from rdma.binstruct import BinStruct

__all__ = ["MADSchedule", "encode_smp"]

MGMT_CLASS_SMP_LID = 0x01
MGMT_CLASS_SMP_DR = 0x81
METHOD_GET = 0x01
METHOD_SET = 0x02
METHOD_GET_RESP = 0x81


def _attr_id(cls: type) -> int:
    aid = getattr(cls, "MAD_ATTRIBUTE_ID", 0)
    if not aid:
        raise TypeError(f"{cls.__name__} is not an SMP attribute")
    return aid


def _is_dr(path: Any) -> bool:
    return hasattr(path, "drPath")


def encode_smp(method: int, cls: type, payload: Optional[BinStruct],
               path: Any, tid: int, amod: int = 0) -> bytes:
    """One 256-byte SMP: directed route (class 0x81) on an
    :class:`rdma.path.IBDRPath`, else LID routed (class 0x01)."""
    buf = bytearray(256)
    dr = _is_dr(path)
    buf[0] = 1
    buf[1] = MGMT_CLASS_SMP_DR if dr else MGMT_CLASS_SMP_LID
    buf[2] = 1
    buf[3] = method
    buf[8:16] = tid.to_bytes(8, "big")
    buf[16:18] = _attr_id(cls).to_bytes(2, "big")
    buf[20:24] = (amod & 0xFFFFFFFF).to_bytes(4, "big")
    buf[24:32] = getattr(path, "MKey", 0).to_bytes(8, "big")
    if dr:
        route = bytes(path.drPath)
        buf[7] = len(route) - 1
        buf[32:34] = path.drSLID.to_bytes(2, "big")
        buf[34:36] = path.drDLID.to_bytes(2, "big")
        buf[128:128 + len(route)] = route
    if payload is not None:
        payload.pack_into(buf, 64)
    return bytes(buf)


def _req(work: "_Work") -> Any:
    fmt = IBA.SMPFormatDirected if work.buf[1] == MGMT_CLASS_SMP_DR \
        else IBA.SMPFormat
    return fmt.unpack(work.buf, 0)


def _describe(cls: type, path: Any, amod: int) -> str:
    where = str(path)
    return f"SubnGet({cls.__name__}, amod {amod}) on {where}"


class _Ctx:
    """A running coroutine stack (or, for mqueue, a generator of them)."""

    __slots__ = ("stack", "gengen", "parent", "children", "ended", "done",
                 "waiters")

    def __init__(self, gen: Any, gengen: bool, parent: "Optional[_Ctx]"):
        self.stack = [gen]
        self.gengen = gengen
        self.parent = parent
        self.children: Set[_Ctx] = set()
        self.ended = False          # its own generator is exhausted
        self.done = False           # ...and all its children too
        self.waiters: List[_Ctx] = []
        if parent is not None:
            parent.children.add(self)


class _Work:
    """One SMP to send: what :meth:`MADSchedule.SubnGet` returns."""

    __slots__ = ("method", "cls", "payload", "path", "amod", "ctx", "buf",
                 "tries")

    def __init__(self, method: int, cls: type, payload: Any, path: Any,
                 amod: int):
        self.method = method
        self.cls = cls
        self.payload = payload
        self.path = path
        self.amod = amod
        self.ctx: Optional[_Ctx] = None
        self.buf = b""
        self.tries = 0


class MADSchedule:
    """Run coroutines that issue SMPs, many SMPs in flight at once
    (python-rdma's ``rdma.sched.MADSchedule`` interface)."""

    #: SMPs in flight at most.
    max_outstanding = 16
    #: Seconds to wait for a reply before re-sending.
    timeout = 0.25
    #: Re-sends before :class:`rdma.IBA.MADTimeoutError`.
    retries = 2
    #: A coroutine sets this to pass a result to the one that yielded it.
    result = None

    def __init__(self, umad: Any, max_outstanding: Optional[int] = None,
                 timeout: Optional[float] = None,
                 retries: Optional[int] = None):
        self._umad = umad
        #: The local end port (SMP paths start here).
        self.end_port = umad.end_port
        if max_outstanding is not None:
            self.max_outstanding = max_outstanding
        if timeout is not None:
            self.timeout = timeout
        if retries is not None:
            self.retries = retries
        self._reset()
        #: SMPs sent and replies that matched nothing (statistics).
        self.sent = 0
        self.unmatched = 0

    @property
    def is_async(self) -> bool:
        return True

    def _reset(self) -> None:
        self._ready: Deque[Tuple[_Ctx, Any, Optional[BaseException]]] = \
            collections.deque()
        self._sendq: Deque[_Work] = collections.deque()
        self._pending: Dict[int, Tuple[float, _Work]] = {}
        self._timers: List[Tuple[float, int]] = []
        self._error: Optional[BaseException] = None

    # -- the MADTransactor calls: they return work to yield

    def SubnGet(self, payload: Any, path: Any, attributeModifier: int = 0
                ) -> _Work:
        cls = payload if isinstance(payload, type) else type(payload)
        return _Work(METHOD_GET, cls, None, path, attributeModifier)

    def SubnSet(self, payload: BinStruct, path: Any,
                attributeModifier: int = 0) -> _Work:
        return _Work(METHOD_SET, type(payload), payload, path,
                     attributeModifier)

    # -- queueing

    def mqueue(self, works: Any) -> _Ctx:
        """Run every coroutine *works* (a generator of coroutines) yields,
        in parallel.  Yield the returned context to wait for all."""
        if not inspect.isgenerator(works):
            raise TypeError("mqueue() needs a generator of coroutines")
        ctx = _Ctx(works, True, None)
        self._ready.append((ctx, None, None))
        return ctx

    def queue(self, work: Any) -> Optional[_Ctx]:
        """Start one coroutine (or a tuple of them) without waiting."""
        if isinstance(work, tuple):
            for w in work:
                self.queue(w)
            return None
        if not inspect.isgenerator(work):
            raise TypeError("queue() needs a coroutine (a generator)")
        ctx = _Ctx(work, False, None)
        self._ready.append((ctx, None, None))
        return ctx

    def run(self, queue: Any = None, mqueue: Any = None) -> None:
        """Run *queue* (a coroutine) and *mqueue* (a generator of them)
        and everything they start, until all is done.  An exception
        nobody caught in a coroutine stops the run and is raised here."""
        self._reset()
        if queue is not None:
            self.queue(queue)
        if mqueue is not None:
            self.mqueue(mqueue)
        try:
            self._loop()
        finally:
            self._reset()

    # -- the engine

    def _finish(self, ctx: _Ctx) -> None:
        ctx.ended = True
        if ctx.children:
            return
        ctx.done = True
        for w in ctx.waiters:
            self._ready.appendleft((w, None, None))
        ctx.waiters = []
        p = ctx.parent
        if p is not None:
            p.children.discard(ctx)
            if p.ended and not p.children:
                self._finish(p)

    def _step(self, ctx: _Ctx, value: Any, exc: Optional[BaseException]
              ) -> None:
        while True:
            gen = ctx.stack[-1]
            try:
                item = gen.throw(exc) if exc is not None else gen.send(value)
            except StopIteration as si:
                ctx.stack.pop()
                value, exc = si.value, None
                if value is None:
                    value, self.result = self.result, None
                if not ctx.stack:
                    self._finish(ctx)
                    return
                continue
            except Exception as e:      # noqa: BLE001 - flows to the caller
                ctx.stack.pop()
                if not ctx.stack:
                    if self._error is None:
                        self._error = e
                    self._finish(ctx)
                    return
                value, exc = None, e
                continue
            value, exc = None, None
            if isinstance(item, _Work):
                item.ctx = ctx
                self._sendq.append(item)
                return
            if inspect.isgenerator(item):
                if ctx.gengen:
                    child = _Ctx(item, False, ctx)
                    self._ready.appendleft((child, None, None))
                    if len(self._pending) + len(self._sendq) >= \
                            self.max_outstanding:
                        self._ready.append((ctx, child, None))
                        return
                    value = child
                else:
                    ctx.stack.append(item)
                continue
            if isinstance(item, _Ctx):
                if not item.done:
                    item.waiters.append(ctx)
                    return
                continue
            if item is None:
                value, self.result = self.result, None
                continue
            exc = TypeError(f"a coroutine yielded {item!r}: yield "
                            f"sched.SubnGet(...), a coroutine or a context")

    def _send(self, work: _Work) -> None:
        tid = self._umad.next_tid()
        work.buf = encode_smp(work.method, work.cls, work.payload,
                              work.path, tid, work.amod)
        self._transmit(work, tid)

    def _transmit(self, work: _Work, tid: int) -> None:
        work.tries += 1
        deadline = time.monotonic() + self.timeout
        self._pending[tid] = (deadline, work)
        heapq.heappush(self._timers, (deadline, tid))
        self.sent += 1
        try:
            self._umad.sendto(work.buf, work.path)
        except Exception as e:          # noqa: BLE001 - to the coroutine
            del self._pending[tid]
            self._ready.appendleft((work.ctx, None, e))

    def _complete(self, work: _Work, data: bytes) -> None:
        if len(data) < 128:
            raise MADFormatError(f"{_describe(work.cls, work.path, work.amod)}"
                                 f": reply of {len(data)} bytes", reply=data)
        status = int.from_bytes(data[4:6], "big")
        if data[1] == MGMT_CLASS_SMP_DR:
            status &= 0x7FFF
        if status:
            raise MADError(f"{_describe(work.cls, work.path, work.amod)}: "
                           f"status {status:#x}", status, _req(work), data,
                           path=work.path)
        return work.cls.unpack(data, 64)

    def _loop(self) -> None:
        umad = self._umad
        while True:
            if self._error is not None:
                raise self._error
            while self._sendq and len(self._pending) < self.max_outstanding:
                self._send(self._sendq.popleft())
            while self._ready and \
                    len(self._pending) + len(self._sendq) < \
                    self.max_outstanding:
                self._step(*self._ready.popleft())
                if self._error is not None:
                    raise self._error
            if self._sendq and len(self._pending) < self.max_outstanding:
                continue
            if not self._pending:
                if self._ready or self._sendq:
                    continue
                return
            wakeat = self._timers[0][0]
            got = umad.recvfrom(wakeat) if wakeat > time.monotonic() \
                else None
            if got is None:
                self._expire()
                continue
            data = got[0]
            if len(data) < 24 or not data[3] & 0x80:
                self.unmatched += 1
                continue
            tid = int.from_bytes(data[12:16], "big")
            ent = self._pending.pop(tid, None)
            if ent is None:
                self.unmatched += 1
                continue
            work = ent[1]
            try:
                res, exc = self._complete(work, data), None
            except MADError as e:
                res, exc = None, e
            self._ready.appendleft((work.ctx, res, exc))

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, tid = heapq.heappop(self._timers)
            ent = self._pending.get(tid)
            if ent is None or ent[0] > now:
                continue
            del self._pending[tid]
            work = ent[1]
            if work.tries <= self.retries:
                self._transmit(work, tid)
                continue
            self._ready.appendleft((work.ctx, None, MADTimeoutError(
                f"no reply to {_describe(work.cls, work.path, work.amod)} "
                f"after {work.tries} tries ({self.timeout} s each)",
                request=_req(work), path=work.path)))
