"""Many MADs in flight at once: python-rdma's coroutine scheduler.

A coroutine is a generator that yields work and is sent back its result:

- ``yield sched.SubnGet(IBA.SMPNodeInfo, path)`` (any RPC of
  :class:`rdma.madtransactor.MADTransactor` called on the scheduler
  returns the work instead of doing it) resumes with the decoded reply,
  or with the exception (:class:`rdma.IBA.MADTimeoutError`...) thrown at
  the ``yield``;
- ``yield other_coroutine()`` runs it to its end first (its return value,
  or :attr:`MADSchedule.result` if it set one, is sent back);
- ``yield context`` (what :meth:`MADSchedule.queue`/:meth:`~MADSchedule.mqueue`
  return, or what a parallel parent is sent) waits for that work to end.

:meth:`MADSchedule.run` runs coroutines until every one has ended, with up
to :attr:`MADSchedule.max_outstanding` MADs outstanding; ``run(mqueue=g)``
takes a generator of coroutines that all run in parallel (a discovery
walk yields a coroutine per node as it finds them).  An exception a
coroutine does not catch ends :meth:`~MADSchedule.run` with it.

::

    sched = rdma.sched.MADSchedule(umad)
    def get_node(path):
        ni = yield sched.SubnGet(IBA.SMPNodeInfo, path)
        nodes[path.DLID] = ni
    sched.run(mqueue=(get_node(p) for p in paths))

The loop waits on the umad port itself (``umad_recv`` with a timeout):
the ibsim shim intercepts ``poll()`` only, not the epoll an asyncio event
loop uses, so the scheduler does not sit on asyncio; :meth:`arun` runs it
from asyncio code in a worker thread.
"""
from __future__ import annotations

import collections
import errno
import heapq
import itertools
import struct
import sys
import time
from types import GeneratorType
from typing import (Any, Deque, Dict, Generator, List, Optional, Set,
                    Tuple)

from rdma import IBA
from rdma.madtransactor import MADTransactor, _Busy, _Redirect, _key

__all__ = ["MADSchedule", "Context", "Batch"]


class Context:
    """The running state of one coroutine (opaque to users: yield it to
    wait for the coroutine to end)."""

    __slots__ = ("_op", "_opstack", "_parent", "_children", "_gengen",
                 "_done", "_result", "_exc", "_work", "_retries", "_busy",
                 "_redirects", "_key", "_gen", "_first")

    def __init__(self, op: Any, gengen: bool,
                 parent: Optional["Context"] = None):
        self._op = op                   # the generator being advanced
        self._opstack: List[Any] = []   # callers of a nested coroutine
        self._parent = parent           # the mqueue context that made us
        self._children: Set[Context] = set()  # running children (mqueue)
        self._gengen = gengen           # True: op yields coroutines
        self._done = False              # ended (waiters were woken)
        self._result: Any = None        # value to send at the next step
        self._exc: Any = None           # exc_info to throw instead
        self._work: Any = None          # the MAD in flight
        self._retries = 0               # re-sends left on timeout
        self._busy = 0                  # BUSY answers seen
        self._redirects = 0             # redirects followed
        self._key: Optional[int] = None  # match key of the MAD in flight
        self._gen = 0                   # send generation (stale timers)
        self._first = True              # not started yet
        if parent is not None:
            parent._children.add(self)

    def __repr__(self) -> str:
        return (f"<rdma.sched.Context {getattr(self._op, '__name__', '?')}"
                f"{' done' if self._done else ''}>")


#: A MAD to send: the request bytes and format, the path, the reply's
#: attribute class, the completer, the path the request was meant for
#: when a remembered redirect sends it elsewhere (else None), and for a
#: SubnGet laid out by the fast path (``fmt`` None until needed) the
#: format's class.
Work = collections.namedtuple("Work",
                              "buf fmt path newer completer original "
                              "fmt_cls", defaults=(None,))


class Batch:
    """Many RPCs for one coroutine (ours, not python-rdma's): what
    :meth:`MADSchedule.mget` returns; ``yield`` it."""

    __slots__ = ("works",)

    def __init__(self, works: List[Work]):
        self.works = works      # the RPCs' work, in order

    def __repr__(self) -> str:
        return f"<rdma.sched.Batch of {len(self.works)} MADs>"


#: The header of a LID-routed SMP up to M_Key (IBA 14.2.1.1), and of a
#: directed-route one up to DrDLID (14.2.1.2): what the SubnGet fast path
#: lays out.
_LID_HEAD = struct.Struct(">BBBBHBBQHHIQ")
_DR_HEAD = struct.Struct(">BBBBHBBQHHIQHH")
#: Where a directed-route SMP's initial path starts, and its data.
_DR_PATH_OFF = 128
_SMP_DATA_OFF = 64


class MADSchedule(MADTransactor):
    """A :class:`~rdma.madtransactor.MADTransactor` for coroutines over a
    :class:`rdma.umad.UMAD`: RPC calls return work to ``yield``.

    Timeouts and retries are the umad's (``timeout_ms``/``retries``, or
    the path's); BUSY answers are sent again after a pause and REDIRECT
    answers are followed, as the synchronous transactor does.
    """

    #: MADs outstanding at most (python-rdma's default is 4; a discovery
    #: of a large fabric wants more).
    max_outstanding = 16
    #: Set by a coroutine to return a value from a nested coroutine.
    result: Any = None

    def __init__(self, umad: Any):
        # What the last answer was, decoded when asked for (reply_fmt,
        # reply_path): (bytes, format class, agent, address) or None.
        self._last_raw: Optional[Tuple[bytes, Any, Optional[int],
                                       Optional[Tuple[Any, ...]]]] = None
        self._reply_fmt: Any = None
        self._reply_path: Any = None
        self.end_port = umad.end_port
        self._umad = umad
        self.trace_func = umad.trace_func
        self._keys: Dict[int, Context] = {}
        self._timers: List[Tuple[float, int, int, Context]] = []
        self._seq = itertools.count()
        self._runq: Deque[Context] = collections.deque()
        self._blocked: Deque[Context] = collections.deque()
        self._waiters: Dict[Context, List[Context]] = \
            collections.defaultdict(list)
        #: The most MADs that were outstanding at once in the last run.
        self.peak_outstanding = 0
        #: MADs sent (re-sends included) and replies that matched nothing.
        self.sent = 0
        self.unmatched = 0
        # The umad agent of each SMP class (fast path).
        self._smp_agents: Dict[int, int] = {}
        # The attribute ID of each payload class the fast path sends (0:
        # not a SubnGet attribute).
        self._fast_ids: Dict[type, int] = {}

    @property
    def is_async(self) -> bool:
        return True

    # The last reply, as the transactor keeps it; the fast path records
    # the raw answer and these decode it only when read.

    @property
    def reply_fmt(self) -> Any:
        """The decoded ``*Format`` of the last reply."""
        if self._last_raw is not None:
            self._decode_last()
        return self._reply_fmt

    @reply_fmt.setter
    def reply_fmt(self, value: Any) -> None:
        self._last_raw = None
        self._reply_fmt = value

    @property
    def reply_path(self) -> Any:
        """The path of the last reply."""
        if self._last_raw is not None:
            self._decode_last()
        return self._reply_path

    @reply_path.setter
    def reply_path(self, value: Any) -> None:
        self._last_raw = None
        self._reply_path = value

    def _decode_last(self) -> None:
        from rdma.umad import UMADReplyPath
        assert self._last_raw is not None     # (the callers check)
        mad, fmt_cls, agent, addr = self._last_raw
        self._last_raw = None
        umad = self._umad
        self._reply_fmt = fmt_cls(mad.ljust(fmt_cls.MAD_LENGTH, b"\0"))
        self._reply_path = None if agent is None or addr is None else \
            UMADReplyPath(umad.end_port, agent, addr,
                          umad._agent_dqpn.get(agent, 1))

    def _get_new_TID(self) -> int:
        tid: int = self._umad._get_new_TID()
        return tid

    @property
    def sa_path(self) -> Any:
        return self._umad.sa_path

    # -- RPCs return work

    def _subn_do(self, payload: Any, path: Any, attributeModifier: int,
                 method: int) -> Work:
        # The fast path of discovery: a SubnGet of an attribute class is
        # laid out here with one struct.pack_into (building and packing an
        # SMPFormat costs ten times more) and its reply, when it is a plain
        # good answer, decodes only the attribute (see _answer).  A Set,
        # a payload object, a trace function, a GRH, an agent of the
        # path's own or a bad route go through the transactor's generic
        # path.
        attr_id = self._fast_ids.get(payload) \
            if isinstance(payload, type) else 0
        if attr_id is None:
            attr_id = getattr(payload, "MAD_ATTRIBUTE_ID", 0)
            if "SubnGet" not in getattr(payload, "METHODS", ()):
                attr_id = 0
            self._fast_ids[payload] = attr_id
        route = self._smp_route(path) if attr_id else None
        if route is None or method != IBA.MAD_METHOD_GET or \
                self.trace_func is not None:
            work: Work = MADTransactor._subn_do(self, payload, path,
                                                attributeModifier, method)
            return work
        dr, mkey, dr_slid, dr_dlid = route
        buf = bytearray(256)
        tid = self._umad._get_new_TID()
        if dr is not None:
            _DR_HEAD.pack_into(buf, 0, IBA.MAD_BASE_VERSION,
                               IBA.MAD_SUBNET_DIRECTED, 1, method, 0, 0,
                               len(dr) - 1, tid, attr_id, 0,
                               attributeModifier & 0xFFFFFFFF, mkey,
                               dr_slid, dr_dlid)
            buf[_DR_PATH_OFF:_DR_PATH_OFF + len(dr)] = dr
            return Work(buf, None, path, payload, None, None,
                        IBA.SMPFormatDirected)
        _LID_HEAD.pack_into(buf, 0, IBA.MAD_BASE_VERSION, IBA.MAD_SUBNET, 1,
                            method, 0, 0, 0, tid, attr_id, 0,
                            attributeModifier & 0xFFFFFFFF, mkey)
        return Work(buf, None, path, payload, None, None, IBA.SMPFormat)

    @staticmethod
    def _smp_route(path: Any) -> Optional[Tuple[Any, int, int, int]]:
        """What the SubnGet fast path needs from *path*: ``(drPath bytes
        or None, M_Key, drSLID, drDLID)``, or None when the path must take
        the generic path (a bad route, a GRH, an agent of its own).
        Remembered in an :class:`rdma.path.Path` (a change of its
        attributes drops it); discovery sends dozens of SMPs along one
        route."""
        d = getattr(path, "__dict__", None)
        if d is not None:
            got = d.get("_cached_sched_smp")
            if got is not None:
                return got or None
        dr = getattr(path, "drPath", None)
        ok = True
        if dr is not None:
            dr = bytes(dr)
            ok = 1 <= len(dr) <= 64 and dr[0] == 0
        route: Any = False
        if ok and not getattr(path, "has_grh", False) and \
                getattr(path, "umad_agent_id", None) is None:
            route = (dr, getattr(path, "MKey", 0) or 0,
                     getattr(path, "drSLID", IBA.LID_PERMISSIVE),
                     getattr(path, "drDLID", IBA.LID_PERMISSIVE))
        if d is not None:
            from rdma.path import Path
            if isinstance(path, Path):
                d["_cached_sched_smp"] = route
        return route or None

    @staticmethod
    def _fast_reply(work: Work, mad: bytes) -> Any:
        """The attribute of a good answer to a fast-path SubnGet, or None
        when the generic path must judge it (an error status, a short
        or odd reply)."""
        newer = work.newer
        buf = work.buf
        if len(mad) < _SMP_DATA_OFF + newer.MAD_LENGTH or \
                mad[1] != buf[1] or mad[3] != IBA.MAD_METHOD_GET_RESP or \
                mad[16] != buf[16] or mad[17] != buf[17]:
            return None
        if (mad[4] & (0x7F if mad[1] == IBA.MAD_SUBNET_DIRECTED else 0xFF)) \
                or mad[5]:
            return None
        # newer(mad, 64) without the constructor's generic steps.
        decode = newer.__dict__.get("_decode") or newer._compile_decoder()
        obj = newer.__new__(newer)
        decode(obj, int.from_bytes(
            mad[_SMP_DATA_OFF:_SMP_DATA_OFF + newer.MAD_LENGTH], "big"))
        return obj

    def _doMAD(self, fmt: Any, payload: Any, path: Any,
               attributeModifier: int, method: int,
               completer: Any = None) -> Work:
        key = self._redirect_key(fmt, path)
        redirects = getattr(self._umad, "_redirects", None)
        original = None
        if key is not None and redirects and key in redirects:
            original, path = path, redirects[key]
        buf = self._prepareMAD(fmt, payload, attributeModifier, method, path)
        newer = payload if isinstance(payload, type) else type(payload)
        return Work(buf, fmt, path, newer, completer, original)

    def mget(self, works: Any) -> Batch:
        """Many RPCs at once (ours): ``res = yield sched.mget(
        [sched.SubnGet(...), ...])`` sends all of them (up to
        :attr:`max_outstanding` in flight) and resumes the coroutine with
        the list of their results in the same order; an RPC that failed
        (timeout, error status...) has its exception in its place instead
        of raising.  When nothing else is in flight and every RPC is a
        plain SubnGet, the whole batch runs in C
        (``rdma._umad.Port.transact``): this is how discovery keeps the
        Python cost per SMP low.  :attr:`reply_path` is None after a
        batch."""
        works = list(works)
        for w in works:
            if not isinstance(w, Work):
                raise TypeError(f"mget() takes the work of RPC calls of "
                                f"this scheduler, not {type(w).__name__}")
        return Batch(works)

    def _can_pump(self, batch: Batch) -> bool:
        """Whether *batch* can run in one ``Port.transact`` call now."""
        if self._keys or self._blocked or self.trace_func is not None or \
                not hasattr(self._umad._port, "transact"):
            return False
        if any(t[2] == -1 for t in self._timers):
            return False        # a delayed re-send is waiting
        return all(w.fmt is None for w in batch.works)

    def _pump(self, works: List[Work]) -> Tuple[List[Any], List[int]]:
        """Run fast-path SubnGets in C; their results (exceptions in
        place of failures) and the indexes of those that must go through
        the per-MAD path (BUSY or REDIRECT answers)."""
        umad = self._umad
        agents = self._smp_agents
        reqs = []
        for w in works:
            path = w.path
            ms, retries = self._timing(path)
            buf = w.buf
            agent = agents.get(buf[1])
            if agent is None:
                agent = agents[buf[1]] = umad.register_client(buf[1], buf[2])
            reqs.append((agent, buf, path.DLID, getattr(path, "SL", 0) or 0,
                         ms, retries))
        replies, sends, unmatched = umad._port.transact(
            reqs, self.max_outstanding)
        self.sent += sends
        self.unmatched += unmatched
        self.peak_outstanding = max(self.peak_outstanding,
                                    min(len(works), self.max_outstanding))
        out: List[Any] = []
        again: List[int] = []
        fast = self._fast_reply
        last = None
        for i, (w, r) in enumerate(zip(works, replies)):
            if type(r) is bytes:
                res = fast(w, r)
                if res is not None:
                    out.append(res)
                    last = (r, w)
                    continue
            fmt = w.fmt_cls(w.buf)
            try:
                if r is None:
                    ms, retries = self._timing(w.path)
                    self._last_timing = (retries + 1, ms)
                    self._completeMAD(None, fmt, w.path, w.newer, None)
                elif type(r) is int:
                    from rdma._errors import SysError
                    raise SysError(r, "umad_send", f"{w.path}: the MAD came "
                                                   f"back failed")
                res = self._completeMAD((bytearray(r), None), fmt, w.path,
                                        w.newer, None)
            except (_Busy, _Redirect):
                again.append(i)
                res = None
            except Exception as e:      # noqa: BLE001 - to the coroutine
                res = e
            out.append(res)
        if last is not None:
            self._last_raw = (last[0], last[1].fmt_cls, None, None)
        else:
            self.reply_path = None
        return out, again

    def _batch_gen(self, works: List[Work], out: Optional[List[Any]] = None,
                   which: Optional[List[int]] = None
                   ) -> Generator[Any, Any, List[Any]]:
        """A coroutine running a batch MAD by MAD (each in a child
        context): the list of results, exceptions in place."""
        if out is None:
            out = [None] * len(works)
            which = list(range(len(works)))
        res = out
        assert which is not None        # (given with out)

        def one(i: int) -> Generator[Any, Any, None]:
            try:
                res[i] = yield works[i]
            except Exception as e:      # noqa: BLE001 - to the caller
                res[i] = e

        yield self.mqueue(one(i) for i in which)
        return res

    # -- contexts

    def queue(self, work: Any) -> Optional[Context]:
        """Start a coroutine (or each of a tuple of them); return its
        context."""
        if isinstance(work, tuple):
            for w in work:
                self.queue(w)
            return None
        if not isinstance(work, GeneratorType):
            raise TypeError(f"queue() takes a coroutine (a generator), not "
                            f"{type(work).__name__}")
        ctx = Context(work, False)
        self._runq.append(ctx)
        return ctx

    def mqueue(self, works: Any) -> Context:
        """Start a generator of coroutines that all run in parallel; its
        context ends when the generator and every coroutine have."""
        if not isinstance(works, GeneratorType):
            raise TypeError(f"mqueue() takes a generator of coroutines, not "
                            f"{type(works).__name__}")
        ctx = Context(works, True)
        self._runq.append(ctx)
        return ctx

    def _finish(self, ctx: Context) -> None:
        if ctx._gengen and ctx._children:
            ctx._done = True        # generator over; children still run
            return
        ctx._done = True
        for w in self._waiters.pop(ctx, ()):
            w._result = None
            self._runq.append(w)
        parent = ctx._parent
        if parent is not None:
            parent._children.discard(ctx)
            if parent._done and not parent._children:
                self._finish(parent)

    def _step(self, ctx: Context) -> None:
        """Advance ``ctx`` until it waits for a MAD or a context, or
        ends."""
        while True:
            exc, ctx._exc = ctx._exc, None
            res, ctx._result = ctx._result, None
            try:
                if exc is not None:
                    work = ctx._op.throw(exc[1].with_traceback(exc[2]))
                elif ctx._first:
                    ctx._first = False
                    work = next(ctx._op)
                else:
                    work = ctx._op.send(res)
            except StopIteration as stop:
                if ctx._opstack:
                    ctx._op = ctx._opstack.pop()
                    ctx._result = stop.value
                    if self.result is not None:
                        ctx._result, self.result = self.result, None
                    continue
                self._finish(ctx)
                return
            except BaseException:
                if ctx._opstack:
                    ctx._op = ctx._opstack.pop()
                    ctx._exc = sys.exc_info()
                    continue
                self._finish(ctx)
                raise
            if isinstance(work, Work):
                ctx._work = work
                ctx._busy = ctx._redirects = 0
                if len(self._keys) >= self.max_outstanding:
                    self._blocked.append(ctx)
                    return
                try:
                    self._send(ctx, first=True)
                except Exception:       # noqa: BLE001 - to the coroutine
                    ctx._exc = sys.exc_info()
                    continue
                return
            if type(work) is Batch:
                if self._can_pump(work):
                    try:
                        out, again = self._pump(work.works)
                    except Exception:   # noqa: BLE001 - to the coroutine
                        ctx._exc = sys.exc_info()
                        continue
                    if not again:
                        ctx._result = out
                        continue
                    gen = self._batch_gen(work.works, out, again)
                else:
                    gen = self._batch_gen(work.works)
                ctx._opstack.append(ctx._op)
                ctx._op = gen
                ctx._first = True
                continue
            if isinstance(work, Context):
                if work._done and not work._children:
                    continue
                self._waiters[work].append(ctx)
                return
            if work is None:
                ctx._result, self.result = self.result, None
                continue
            if isinstance(work, GeneratorType):
                if ctx._gengen:
                    child = Context(work, False, ctx)
                    ctx._result = child
                    self._runq.append(ctx)
                    ctx = child
                else:
                    ctx._opstack.append(ctx._op)
                    ctx._op = work
                    ctx._first = True
                continue
            ctx._exc = (TypeError, TypeError(
                f"a coroutine yielded {type(work).__name__}: yield an RPC "
                f"of the scheduler, a coroutine or a context"), None)

    # -- MADs

    def _timing(self, path: Any) -> Tuple[int, int]:
        """``umad._timing(path)``, remembered in the path (discovery
        sends dozens of SMPs along one route); a change of the path's
        attributes drops it (:meth:`rdma.path.Path.drop_cache`), a change
        of the umad's ``timeout_ms``/``retries`` does not match it."""
        umad = self._umad
        d = getattr(path, "__dict__", None)
        t: Tuple[int, int]
        if d is None:
            t = umad._timing(path)
            return t
        got = d.get("_cached_sched_timing")
        if got is not None and got[0] == umad.timeout_ms and \
                got[1] == umad.retries:
            t = got[2]
            return t
        t = umad._timing(path)
        d["_cached_sched_timing"] = (umad.timeout_ms, umad.retries, t)
        return t

    def _send(self, ctx: Context, first: bool = False) -> None:
        work = ctx._work
        path = work.path
        ms, retries = self._timing(path)
        if first:
            ctx._retries = retries
        if work.fmt is None:
            # A fast-path SubnGet (no GRH, no agent of the path's own):
            # what umad.sendto does for an SMP, without its look-ups.
            buf = work.buf
            agent = self._smp_agents.get(buf[1])
            if agent is None:
                agent = self._smp_agents[buf[1]] = \
                    self._umad.register_client(buf[1], buf[2])
            self._umad._port.send(agent, buf, dlid=path.DLID, dqpn=0,
                                  sl=getattr(path, "SL", 0) or 0, qkey=0,
                                  timeout_ms=ms)
        else:
            self._umad.sendto(work.buf, path, timeout_ms=ms)
        self.sent += 1
        key = ctx._key = _key(work.buf)
        ctx._gen += 1
        keys = self._keys
        keys[key] = ctx
        if len(keys) > self.peak_outstanding:
            self.peak_outstanding = len(keys)
        heapq.heappush(self._timers, (time.monotonic() + ms * 0.00125,
                                      next(self._seq), ctx._gen, ctx))

    def _release(self, ctx: Context) -> None:
        """The MAD of ``ctx`` is over: free its slot for a blocked one."""
        if ctx._key is not None:
            self._keys.pop(ctx._key, None)
        ctx._key = None
        ctx._gen += 1
        while self._blocked and len(self._keys) < self.max_outstanding:
            nxt = self._blocked.popleft()
            try:
                self._send(nxt, first=True)
            except Exception:           # noqa: BLE001 - to the coroutine
                nxt._exc = sys.exc_info()
                self._runq.append(nxt)

    def _timed_out(self, ctx: Context) -> None:
        """The try of ``ctx`` is over without an answer: re-send or fail."""
        if ctx._retries > 0:
            ctx._retries -= 1
            if ctx._key is not None:
                self._keys.pop(ctx._key, None)
            self._send(ctx)
            return
        work = ctx._work
        if work.original is not None:
            # The remembered redirect target is gone: ask the original
            # target again (it may redirect anew).
            key = self._redirect_key(work.fmt, work.original)
            getattr(self._umad, "_redirects", {}).pop(key, None)
            work.fmt.transactionID = self._get_new_TID()
            work.fmt.pack_into(work.buf)
            ctx._work = work._replace(path=work.original, original=None)
            if ctx._key is not None:
                self._keys.pop(ctx._key, None)
            self._send(ctx, first=True)
            return
        self._release(ctx)
        if work.fmt is None:
            work = ctx._work = work._replace(fmt=work.fmt_cls(work.buf))
        ms, retries = self._umad._timing(work.path)
        self._last_timing = (retries + 1, ms)
        try:
            self._completeMAD(None, work.fmt, work.path, work.newer,
                              work.completer)
        except Exception:               # noqa: BLE001 - to the coroutine
            ctx._exc = sys.exc_info()
        self._runq.append(ctx)

    def _answer(self, ctx: Context, mad: bytes, agent: int,
                addr: Tuple[Any, ...]) -> None:
        work = ctx._work
        self._release(ctx)
        if work.fmt is None:
            res = self._fast_reply(work, mad)
            if res is not None:
                self._last_raw = (mad, work.fmt_cls, agent, addr)
                ctx._result = res
                self._runq.append(ctx)
                return
            work = ctx._work = work._replace(fmt=work.fmt_cls(work.buf))
        from rdma.umad import UMADReplyPath
        umad = self._umad
        path = UMADReplyPath(umad.end_port, agent, addr,
                             umad._agent_dqpn.get(agent, 1))
        try:
            ctx._result = self._completeMAD((bytearray(mad), path), work.fmt,
                                            work.path, work.newer,
                                            work.completer)
        except _Busy as e:
            ctx._busy += 1
            if ctx._busy > self.busy_retries:
                ctx._exc = (type(e), e, None)
            else:
                # Sent again after the pause (a timer with no MAD out).
                heapq.heappush(self._timers, (
                    time.monotonic() + self.busy_delay * (1 << (ctx._busy
                                                               - 1)),
                    next(self._seq), -1, ctx))
                return
        except _Redirect as e:
            ctx._redirects += 1
            if ctx._redirects > self.max_redirects:
                ctx._exc = (type(e), e, None)
            else:
                path = self._redirected_path(work.path, e.cpi)
                key = self._redirect_key(work.fmt, work.path)
                if key is not None:
                    if getattr(self._umad, "_redirects", None) is None:
                        self._umad._redirects = {}
                    self._umad._redirects[key] = path
                work.fmt.transactionID = self._get_new_TID()
                work.fmt.pack_into(work.buf)
                ctx._work = work._replace(path=path)
                self._resend_later(ctx)
                return
        except Exception:               # noqa: BLE001 - to the coroutine
            ctx._exc = sys.exc_info()
        self._runq.append(ctx)

    def _resend_later(self, ctx: Context) -> None:
        heapq.heappush(self._timers, (time.monotonic(), next(self._seq), -1,
                                      ctx))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, gen, ctx = heapq.heappop(self._timers)
            if gen == -1:
                # A delayed (re-)send: BUSY pause over, or a redirect.
                if len(self._keys) >= self.max_outstanding:
                    self._blocked.append(ctx)
                    continue
                try:
                    self._send(ctx, first=True)
                except Exception:       # noqa: BLE001 - to the coroutine
                    ctx._exc = sys.exc_info()
                    self._runq.append(ctx)
            elif gen == ctx._gen and ctx._key is not None:
                self._timed_out(ctx)

    # -- the loop

    def run(self, queue: Any = None, mqueue: Any = None) -> None:
        """Run coroutines until all have ended (``queue`` and ``mqueue``
        go to :meth:`queue` and :meth:`mqueue` first)."""
        self._keys.clear()
        self._timers.clear()
        self._blocked.clear()
        self._waiters.clear()
        self.peak_outstanding = 0
        if queue is not None:
            self.queue(queue)
        if mqueue is not None:
            self.mqueue(mqueue)
        port = self._umad._port
        while True:
            while self._runq:
                self._step(self._runq.popleft())
            timers = self._timers
            while timers and timers[0][2] != -1 and (
                    timers[0][2] != timers[0][3]._gen
                    or timers[0][3]._key is None):
                heapq.heappop(timers)       # stale: answered or re-sent
            if not self._keys and not timers and not self._blocked:
                break
            wake = timers[0][0] if timers else None
            if wake is None:
                ms = -1
            else:
                ms = int((wake - time.monotonic()) * 1000)
                if ms <= 0:
                    self._fire_timers()
                    continue
            got = port.recv(ms)
            if got is None:
                self._fire_timers()
                continue
            agent, status, mad, addr = got
            ctx = self._keys.get(_key(mad)) if len(mad) >= 24 else None
            if ctx is None:
                self.unmatched += 1
                continue
            if status:
                if status == errno.ETIMEDOUT:
                    # Given back undeliverable: this try is over.
                    self._timed_out(ctx)
                    continue
                work = ctx._work
                self._release(ctx)
                from rdma._errors import SysError
                ctx._exc = (SysError, SysError(
                    status, "umad_send", f"{work.path}: the MAD came back "
                                         f"failed"), None)
                self._runq.append(ctx)
                continue
            if not mad[3] & 0x80:
                self.unmatched += 1
                continue
            self._answer(ctx, mad, agent, addr)
        self._fire_timers()

    async def arun(self, queue: Any = None, mqueue: Any = None) -> None:
        """:meth:`run` from asyncio code (in a worker thread, so the event
        loop keeps running)."""
        import asyncio
        await asyncio.get_running_loop().run_in_executor(
            None, self.run, queue, mqueue)
