"""Verbs helpers: a pool of fixed-size buffers and a completion poller.

:class:`BufferPool` removes the bookkeeping of send and receive buffers;
:class:`CQPoller` turns a CQ (and its completion channel) into an iterator
of work completions that sleeps instead of spinning.
"""
from __future__ import annotations

import collections
import select
import time
from typing import TYPE_CHECKING, Iterable, Iterator, List, Optional, Union

import rdma.ibverbs as ibv

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from rdma.path import IBPath

__all__ = ["BufferPool", "CQPoller"]


class BufferPool:
    """*count* buffers of *size* bytes in one registered MR of *pd*.

    Buffer indexes travel in ``wr_id``: receives are posted with
    ``RECV_FLAG`` set, so :meth:`finish_wcs` knows which completions give a
    buffer back and which need a new receive posted.  The qp arguments may
    be a :class:`rdma.ibverbs.QP` or :class:`rdma.ibverbs.SRQ`.
    """

    #: wr_id of work requests that carry no pool buffer.
    NO_WR_ID = 0xFFFFFFFF

    def __init__(self, pd: "ibv.PD", count: int, size: int):
        if count < 1 or size < 1:
            raise ValueError("BufferPool needs count >= 1 and size >= 1")
        #: Number of buffers.
        self.count = count
        #: Size of one buffer in bytes.
        self.size = size
        self._mem = bytearray(count * size)
        self._mr: Optional[ibv.MR] = pd.mr(self._mem,
                                           ibv.IBV_ACCESS_LOCAL_WRITE)
        self._buffers = collections.deque(range(count), count)
        #: Flag or'ed into the wr_id of posted receives.
        self.RECV_FLAG = 1 << count.bit_length()
        #: Mask from a wr_id back to the buffer index.
        self.BUF_ID_MASK = self.RECV_FLAG - 1

    @property
    def mr(self) -> Optional["ibv.MR"]:
        """The MR holding every buffer (None once closed)."""
        return self._mr

    def _live_mr(self) -> "ibv.MR":
        if self._mr is None:
            raise ValueError("BufferPool is closed")
        return self._mr

    def close(self) -> None:
        """Deregister the memory (idempotent)."""
        if self._mr is not None:
            self._mr.close()
            self._mr = None

    def __enter__(self) -> "BufferPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Buffers currently free in the pool."""
        return len(self._buffers)

    def pop(self) -> int:
        """Take a free buffer; return its index.

        :raises IndexError: when every buffer is in use."""
        try:
            return self._buffers.pop()
        except IndexError:
            raise IndexError("BufferPool: no free buffer") from None

    def push(self, buf_idx: int) -> None:
        """Give buffer *buf_idx* (or a wr_id) back to the pool."""
        idx = buf_idx & self.BUF_ID_MASK
        if not 0 <= idx < self.count:
            raise ValueError(f"BufferPool: no buffer {buf_idx}")
        self._buffers.append(idx)

    def _check(self, buf_idx: int) -> int:
        idx = buf_idx & self.BUF_ID_MASK
        if not 0 <= idx < self.count:
            raise ValueError(f"BufferPool: no buffer {buf_idx}")
        return idx

    def post_recvs(self, qp: Union["ibv.QP", "ibv.SRQ"], count: int) -> None:
        """Post *count* free buffers as receives on *qp* (a QP or SRQ)."""
        if count <= 0:
            return
        if count > len(self._buffers):
            raise IndexError(f"BufferPool: {count} receives asked, "
                             f"{len(self._buffers)} buffers free")
        idx = [self._buffers.pop() for _ in range(count)]
        wrs = [ibv.recv_wr(wr_id=i | self.RECV_FLAG,
                           sg_list=self.make_sge(i, self.size)) for i in idx]
        try:
            qp.post_recv(wrs)
        except ibv.WRError as e:
            # The ones from e.index on were not posted: take them back.
            for i in idx[e.index:]:
                self._buffers.append(i)
            raise

    def finish_wcs(self, qp: Union["ibv.QP", "ibv.SRQ"],
                   wcs: Union["ibv.wc", Iterable[Optional["ibv.wc"]]]
                   ) -> None:
        """Take the buffers of completed work back and re-post receives.

        Every WR that carries a pool buffer must be signaled for its buffer
        to come back.  :raises rdma.ibverbs.WCError: for the first failed
        completion (after every buffer was recovered)."""
        if isinstance(wcs, ibv.wc):
            wcs = (wcs,)
        new_recvs = 0
        err = None
        for wc in wcs:
            if wc is None:
                continue
            if wc.wr_id != self.NO_WR_ID:
                self._buffers.append(wc.wr_id & self.BUF_ID_MASK)
                if wc.wr_id & self.RECV_FLAG:
                    new_recvs += 1
            if wc.status != ibv.IBV_WC_SUCCESS and err is None:
                err = wc
        if err is not None:
            raise ibv.WCError(err, qp=qp if isinstance(qp, ibv.QP) else None)
        self.post_recvs(qp, new_recvs)

    def make_sge(self, buf_idx: int, buf_len: int,
                 offset: int = 0) -> "ibv.sge":
        """An sge of *buf_len* bytes of buffer *buf_idx* (from *offset*)."""
        idx = self._check(buf_idx)
        if offset < 0 or buf_len < 0 or offset + buf_len > self.size:
            raise ValueError(f"BufferPool: {buf_len} bytes at {offset} do "
                             f"not fit a {self.size}-byte buffer")
        return self._live_mr().sge(buf_len, idx * self.size + offset)

    def make_send_wr(self, buf_idx: int, buf_len: int,
                     path: Optional[IBPath] = None) -> "ibv.send_wr":
        """A signaled SEND of *buf_len* bytes of buffer *buf_idx*; with a
        *path* (UD) it carries the AH, remote QPN and Q_Key."""
        wr = ibv.send_wr(wr_id=buf_idx,
                         sg_list=self.make_sge(buf_idx, buf_len),
                         opcode=ibv.IBV_WR_SEND,
                         send_flags=ibv.IBV_SEND_SIGNALED)
        if path is not None:
            if path.dqpn is None or path.qkey is None:
                raise TypeError(f"make_send_wr(): the path needs dqpn and "
                                f"qkey (UD): {path!r}")
            wr.ah = self._live_mr().pd.ah(path)
            wr.remote_qpn = path.dqpn
            wr.remote_qkey = path.qkey
        return wr

    def copy_from(self, buf_idx: int, offset: int = 0,
                  length: int = 0xFFFFFFFF) -> bytearray:
        """A copy of buffer *buf_idx* (a wr_id works too) from *offset*."""
        idx = self._check(buf_idx)
        if not 0 <= offset <= self.size:
            raise ValueError(f"BufferPool: offset {offset} outside the buffer")
        length = min(length, self.size - offset)
        start = idx * self.size + offset
        return bytearray(self._mem[start:start + length])

    def copy_to(self, buf: ReadableBuffer, buf_idx: int, offset: int = 0,
                length: int = 0xFFFFFFFF) -> int:
        """Copy *buf* (bytes-like) into buffer *buf_idx* at *offset*; return
        the number of bytes copied.

        :raises ValueError: if it does not fit (nothing is cut silently)."""
        idx = self._check(buf_idx)
        data = memoryview(buf).cast("B")
        n = min(len(data), length)
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"BufferPool: {n} bytes at {offset} do not fit "
                             f"a {self.size}-byte buffer")
        start = idx * self.size + offset
        self._mem[start:start + n] = data[:n]
        return n

    def buffer(self, buf_idx: int) -> memoryview:
        """A writable view of buffer *buf_idx* (no copy)."""
        idx = self._check(buf_idx)
        return memoryview(self._mem)[idx * self.size:(idx + 1) * self.size]


class CQPoller:
    """Iterate the work completions of a CQ, sleeping on its completion
    channel when there are none.

    ``CQPoller(cq, comp_channel=None)``: the channel defaults to the CQ's
    own; ``use_channel=False`` ignores it (the events stay for the
    program).  Without a channel it polls in a loop: :attr:`spin` empty
    polls, then with short sleeps.  Sleep follows the race-free order: arm
    the CQ, poll again, then wait; events are acknowledged in batches.
    """

    #: Acknowledge events after this many (and when iteration stops).
    ACK_BATCH = 32
    #: Without a channel: empty polls in a row before sleeping 0.5 ms
    #: between polls (a completion a few microseconds away costs no sleep).
    spin = 50

    def __init__(self, cq: "ibv.CQ",
                 comp_channel: Union["ibv.CompChannel", bool, None] = None,
                 async_events: bool = False, solicited_only: bool = False,
                 *, use_channel: bool = True):
        if isinstance(comp_channel, bool):
            # python-rdma's signature: CQPoller(cq, async_events, ...)
            async_events, comp_channel = comp_channel, None
        self._cq = cq
        self._cc: Optional[ibv.CompChannel] = \
            comp_channel if comp_channel is not None else cq.comp_channel
        if not use_channel:
            self._cc = comp_channel = None
        if self._cc is not None and cq.comp_channel is not self._cc:
            raise ValueError("CQPoller: the CQ does not report to that "
                             "completion channel")
        self._solicited_only = solicited_only
        self._poll: Optional[select.poll] = None
        self._async_fd: Optional[int] = None
        if self._cc is not None:
            self._poll = select.poll()
            self._cc.register_poll(self._poll)
            if async_events:
                self._async_fd = cq.ctx.async_fileno()
                self._poll.register(self._async_fd, select.POLLIN)
        #: True if the last iteration stopped because of its timeout.
        self.timedout = False
        #: time.monotonic() deadline of the running iteration; may be moved.
        self.wakeat: Optional[float] = None
        #: Async events seen while sleeping (with async_events=True).
        self.async_events: List[ibv.async_event] = []
        self._unacked = 0

    def __iter__(self) -> Iterator["ibv.wc"]:
        return self.iterwc()

    def _ack(self) -> None:
        if self._unacked:
            self._cq.ack_events(self._unacked)
            self._unacked = 0

    def sleep(self, wakeat: Optional[float]) -> Optional[bool]:
        """Wait for the channel to fire; return True, or None once
        *wakeat* (a time.monotonic() value) has passed.  Arm the CQ and
        poll it before calling this, or an event can be missed."""
        if self._poll is None:
            if wakeat is not None and time.monotonic() >= wakeat:
                return None
            time.sleep(0.0005)
            return True
        while True:
            if wakeat is None:
                ms = None
            else:
                left = wakeat - time.monotonic()
                if left <= 0:
                    return None
                ms = max(1, int(left * 1000))
            for fd, _ in self._poll.poll(ms):
                if fd == self._async_fd:
                    ev = self._cq.ctx.get_async_event(timeout=0)
                    if ev is not None:
                        self.async_events.append(ev)
                    continue
                cq = self._cc.get_cq_event(timeout=0) \
                    if self._cc is not None else None
                if cq is not None:
                    self._unacked += 1
                    if self._unacked >= self.ACK_BATCH:
                        self._ack()
                    return True

    def iterwc(self, count: Optional[int] = None,
               timeout: Optional[float] = None,
               wakeat: Optional[float] = None) -> Iterator["ibv.wc"]:
        """Yield work completions: at most *count*, for at most *timeout*
        seconds (or until time.monotonic() reaches *wakeat*).  Sets
        :attr:`timedout` when time ran out."""
        self.timedout = False
        self.wakeat = wakeat
        if timeout is not None:
            self.wakeat = time.monotonic() + timeout
        limit = -1 if count is None else count
        try:
            while limit != 0:
                wcs = self._cq.poll(16 if limit < 0 else min(limit, 16))
                idle = 0
                while not wcs:
                    if self._cc is not None:
                        self._cq.req_notify_cq(self._solicited_only)
                    wcs = self._cq.poll(1)
                    if wcs:
                        break
                    idle += 1
                    if self._cc is None and idle <= self.spin and (
                            self.wakeat is None or
                            time.monotonic() < self.wakeat):
                        continue
                    if self.sleep(self.wakeat) is None:
                        self.timedout = True
                        return
                for wc in wcs:
                    yield wc
                    if limit > 0:
                        limit -= 1
        finally:
            self._ack()
