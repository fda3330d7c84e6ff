"""An alternative MAD scheduler for :mod:`rdma.discovery`.

Written before :mod:`rdma.sched` existed, with the same interface
(python-rdma's coroutines: ``yield sched.SubnGet(...)``, ``sched.mqueue``,
``sched.queue``, ``sched.run``) on :class:`rdma.madtransactor.MADTransactor`
over a :class:`rdma.umad.UMAD`, up to :attr:`MADSchedule.max_outstanding`
MADs in flight.  What it does differently: a SubnGet is laid out by hand
and its reply checked by hand, only the attribute being decoded (errors,
Sets and traced calls go through the transactor), and SMPs are sent
without a kernel response timeout (which costs ~15x per send through the
ibsim shim).  That halves the CPU time of discovery; once
:mod:`rdma.sched` does the same this module can go.  A BUSY or REDIRECT
answer is an error here.  ``rdma.discovery.scheduler_class("interim")``
returns it.
"""
from __future__ import annotations

import collections
import heapq
import inspect
import time
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from rdma import IBA
from rdma.madtransactor import MADTransactor

__all__ = ["MADSchedule"]


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
    """One MAD to send: what the RPC calls of :class:`MADSchedule`
    return (``yield`` it)."""

    __slots__ = ("buf", "fmt", "path", "newer", "completer", "ctx", "tries",
                 "key", "fmt_cls")

    def __init__(self, buf: bytearray, fmt: Any, path: Any, newer: type,
                 completer: Any, fmt_cls: Any = None):
        self.buf = buf
        #: The request ``*Format`` (None on the fast path until needed).
        self.fmt = fmt
        #: Its class, for the fast path.
        self.fmt_cls = fmt_cls
        self.path = path
        self.newer = newer
        self.completer = completer
        self.ctx: Optional[_Ctx] = None
        self.tries = 0
        self.key = 0


class MADSchedule(MADTransactor):
    """Run coroutines that issue MADs, many in flight at once
    (python-rdma's ``rdma.sched.MADSchedule`` interface)."""

    #: MADs in flight at most.
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
        self.trace_func = getattr(umad, "trace_func", None)
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

    # -- the MADTransactor core: RPC calls return work to yield

    def _doMAD(self, fmt: Any, payload: Any, path: Any,
               attributeModifier: int, method: int,
               completer: Any = None) -> _Work:
        buf = self._prepareMAD(fmt, payload, attributeModifier, method, path)
        newer = payload if isinstance(payload, type) else type(payload)
        return _Work(buf, fmt, path, newer, completer)

    def _get_new_TID(self) -> int:
        return self._umad._get_new_TID()

    def _subn_do(self, payload: Any, path: Any, attributeModifier: int,
                 method: int) -> Any:
        # The fast path of discovery: a SubnGet is laid out here in a few
        # microseconds (building and packing an SMPFormat costs ~0.3 ms);
        # the reply is checked by hand and only its attribute decoded.
        # Anything unusual (a Set, a trace function, an error reply) goes
        # through the transactor's own _prepareMAD/_completeMAD.
        dr = getattr(path, "drPath", None)
        if not isinstance(payload, type) or \
                method != IBA.MAD_METHOD_GET or self.trace_func is not None \
                or (dr is not None and not 1 <= len(dr) <= 64):
            return MADTransactor._subn_do(self, payload, path,
                                          attributeModifier, method)
        buf = bytearray(256)
        buf[0] = 1
        buf[2] = 1
        buf[3] = method
        buf[12:16] = self._get_new_TID().to_bytes(4, "big")
        buf[16:18] = payload.MAD_ATTRIBUTE_ID.to_bytes(2, "big")
        buf[20:24] = (attributeModifier & 0xFFFFFFFF).to_bytes(4, "big")
        buf[24:32] = (getattr(path, "MKey", 0) or 0).to_bytes(8, "big")
        if dr is not None:
            dr = bytes(dr)
            buf[1] = IBA.MAD_SUBNET_DIRECTED
            buf[7] = len(dr) - 1
            buf[32:34] = getattr(path, "drSLID",
                                 IBA.LID_PERMISSIVE).to_bytes(2, "big")
            buf[34:36] = getattr(path, "drDLID",
                                 IBA.LID_PERMISSIVE).to_bytes(2, "big")
            buf[128:128 + len(dr)] = dr
            fmt = IBA.SMPFormatDirected
        else:
            buf[1] = IBA.MAD_SUBNET
            fmt = IBA.SMPFormat
        return _Work(buf, None, path, payload, None, fmt)

    def _complete_fast(self, work: _Work, rbuf: Any) -> Any:
        """The reply of a fast-path SubnGet: its attribute, or None when
        the generic path must judge it (an error, a short reply...)."""
        newer = work.newer
        if len(rbuf) < 64 + newer.MAD_LENGTH or rbuf[1] != work.buf[1] or \
                rbuf[3] != IBA.MAD_METHOD_GET_RESP or \
                rbuf[16:18] != work.buf[16:18]:
            return None
        status = int.from_bytes(rbuf[4:6], "big")
        if rbuf[1] == IBA.MAD_SUBNET_DIRECTED:
            status &= 0x7FFF
        if status:
            return None
        self.reply_path = None
        return newer(rbuf, 64)

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
        work.key = self._get_reply_match_key(work.buf)
        self._transmit(work)

    def _transmit(self, work: _Work) -> None:
        work.tries += 1
        deadline = time.monotonic() + self.timeout
        self._pending[work.key] = (deadline, work)
        heapq.heappush(self._timers, (deadline, work.key))
        self.sent += 1
        try:
            # The kernel needs a response timeout for RMPP (SA); it costs
            # ~15x per send through the ibsim shim, so SMPs go without.
            self._umad.sendto(work.buf, work.path,
                              timeout_ms=int(self.timeout * 1000)
                              if work.buf[1] == 0x03 else 0)
        except Exception as e:          # noqa: BLE001 - to the coroutine
            del self._pending[work.key]
            self._ready.appendleft((work.ctx, None, e))

    def _complete(self, work: _Work, ret: Any) -> None:
        """Decode a reply (or a timeout: *ret* None) into the result or
        the exception its coroutine gets."""
        if work.fmt is None:
            if ret is not None:
                res = self._complete_fast(work, ret[0])
                if res is not None:
                    self._ready.appendleft((work.ctx, res, None))
                    return
            # The generic path wants the request format: decode ours.
            work.fmt = work.fmt_cls(bytes(work.buf))
        try:
            res = self._completeMAD(ret, work.fmt, work.path, work.newer,
                                    work.completer)
        except Exception as e:          # noqa: BLE001 - to the coroutine
            self._ready.appendleft((work.ctx, None, e))
        else:
            self._ready.appendleft((work.ctx, res, None))

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
            timers, pending = self._timers, self._pending
            # Drop the timers of MADs already answered.
            while timers and (timers[0][1] not in pending or
                              pending[timers[0][1]][0] != timers[0][0]):
                heapq.heappop(timers)
            wakeat = timers[0][0]
            now = time.monotonic()
            # recvfrom() waits whole milliseconds: at least one.
            got = umad.recvfrom(max(wakeat, now + 0.001)) \
                if wakeat > now else None
            if got is None:
                self._expire()
                continue
            data = got[0]
            if len(data) < 24 or not data[3] & 0x80:
                self.unmatched += 1
                continue
            ent = self._pending.pop(self._get_match_key(data), None)
            if ent is None:
                self.unmatched += 1
                continue
            self._complete(ent[1], got)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, key = heapq.heappop(self._timers)
            ent = self._pending.get(key)
            if ent is None or ent[0] > now:
                continue
            del self._pending[key]
            work = ent[1]
            if work.tries <= self.retries:
                self._transmit(work)
                continue
            self._last_timing = (work.tries, int(self.timeout * 1000))
            self._complete(work, None)
