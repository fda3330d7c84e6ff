"""MADs through a verbs UD QP: python-rdma's :class:`VMAD`.

A :class:`VMAD` is a :class:`~rdma.madtransactor.MADTransactor` whose MADs
leave from a UD QP of its own (not the GSI QP1) and whose answers come
back to that QP: GMPs (SA, PerfMgt...) to QP1 of a remote port work on a
device whose kernel runs a GSI agent (InfiniBand HCAs, rxe), without
umad.  SMPs need QP0 and umad: use :func:`rdma.get_umad`.

On rxe (RoCE) the round trip through QP1 works, but the kernel serves no
GMP class itself: a Get of a class that no process registered through
umad on the target port is answered "unsupported method/attribute"
(status 0x0C, a :class:`rdma.MADError`); SMPs are dropped (a
:class:`rdma.MADTimeoutError`).  See docs/mads.rst.

All MADs of one VMAD use the P_Key and Q_Key of the path it was made
with.  The software fabric (``ucx0``) has no QP0/QP1 and no management
agents: a VMAD there refuses a path to QP1 with a clear
:class:`rdma.RDMAError`; MADs between UD QPs of processes of the fabric
(a path with their QP numbers) do work.
"""
from __future__ import annotations

import collections
import random
import time
from typing import Any, Optional, Tuple

import rdma
import rdma.IBA as IBA
import rdma.ibverbs as ibv
import rdma.vtools
from rdma.madtransactor import (TRACE_UNEXPECTED, MADTransactor, TimedSends,
                                _key)

__all__ = ["VMAD"]

#: Bytes of a MAD, and of the GRH area in front of every UD receive.
_MAD = 256
_GRH = 40


def _provider(ctx: Any, parent: Any) -> str:
    for obj in (ctx, parent, getattr(parent, "parent", None)):
        p = getattr(obj, "provider", None)
        if isinstance(p, str):
            return p
    return "verbs"


class VMAD(TimedSends, MADTransactor):
    """``VMAD(parent, path, depth=16)``: *parent* is an end port (a
    Context is opened on it and closed with the VMAD) or an open
    :class:`rdma.ibverbs.Context`; *path* (an :class:`rdma.path.IBPath`)
    gives the P_Key and Q_Key, and is where the MADs go by default (the
    SA path of the port for :meth:`SubnAdmGet`).

    Timeouts and retries: ``timeout_ms``/``retries`` of the object when
    set, else the path's ``mad_timeout``/``retries``, else 1000 ms and 2.
    """

    # The verbs objects _setup() makes (close() closes and drops them;
    # it reads them with getattr, so a failed _setup() is closed too).
    _cc: ibv.CompChannel
    _cq: ibv.CQ
    _poller: rdma.vtools.CQPoller
    _pd: ibv.PD
    _pool: rdma.vtools.BufferPool
    _qp: ibv.QP

    def __init__(self, parent: Any, path: Any, depth: int = 16):
        self._ctx: Optional[ibv.Context] = None
        self._allocated_ctx = False
        if isinstance(parent, ibv.Context):
            ctx = parent
        else:
            ctx = rdma.get_verbs(parent)
            self._allocated_ctx = True
        self._ctx = ctx
        try:
            self._setup(ctx, parent, path, depth)
        except BaseException:
            self.close()
            raise

    def _setup(self, ctx: Any, parent: Any, path: Any, depth: int) -> None:
        #: The end port the MADs leave from.
        self.end_port = getattr(path, "end_port", None) or parent
        self._fabric = _provider(ctx, parent) == "ucx"
        # A path to QP0/QP1 of the software fabric is refused when a MAD
        # is sent on it (sendto), not here: python-rdma's programs make a
        # GMP transactor before they know they need one (rdma_bw, whose
        # resolve_path needs no SA off InfiniBand).
        self._cc = ctx.comp_channel()
        self._cq = ctx.cq(2 * depth, self._cc)
        self._poller = rdma.vtools.CQPoller(self._cq, self._cc)
        self._pd = ctx.pd()
        self._pool = rdma.vtools.BufferPool(self._pd, 2 * depth,
                                            _MAD + _GRH)
        self._qp = self._pd.qp(ibv.IBV_QPT_UD, depth, self._cq, depth,
                               self._cq)
        #: The Q_Key and P_Key every MAD of this VMAD uses.
        qkey: Optional[int] = getattr(path, "qkey", None)
        self.qkey: int = IBA.IB_DEFAULT_QP1_QKEY if qkey is None else qkey
        self.pkey = getattr(path, "pkey", IBA.PKEY_DEFAULT)
        own = path.copy(sqpn=self._qp.qp_num, qkey=self.qkey)
        self._qp.modify_to_init(own)
        self._qp.modify_to_rtr(own)
        self._qp.modify_to_rts(own)
        self._pool.post_recvs(self._qp, depth)
        while len(self._pool._buffers) > depth:
            self._pool._buffers.pop()
        self._recvs: collections.deque[ibv.wc] = collections.deque()
        self._tid = random.getrandbits(32)
        self._path = path
        self.sa_path = path

    @property
    def qp_num(self) -> int:
        """The QP number the MADs leave from (and answers come to)."""
        return self._qp.qp_num

    def _check_path(self, path: Any) -> None:
        if self._fabric and getattr(path, "dqpn", None) in (0, 1, None):
            raise rdma.RDMAError(
                f"rdma.vmad: the software fabric (ucx0) has no QP0/QP1 and "
                f"no subnet manager, SA or PMA behind them, so a MAD to "
                f"{path} reaches nothing; use a umad device "
                f"(rdma.get_umad) on InfiniBand or a verbs device with a "
                f"GSI agent (rxe, an HCA), or a path to the UD QP of "
                f"another VMAD of the fabric")

    def _get_new_TID(self) -> int:
        self._tid = (self._tid + 1) & 0xFFFFFFFF
        return self._tid

    # -- the QP

    def sendto(self, buf: Any, path: Any) -> None:
        """Send one MAD along *path* (its ``dqpn``, the VMAD's Q_Key)."""
        if getattr(path, "qkey", self.qkey) not in (None, self.qkey):
            raise rdma.RDMAError(f"{path} has Q_Key {path.qkey:#x}, this "
                                 f"VMAD sends with {self.qkey:#x}")
        self._check_path(path)
        while not self._pool._buffers:
            self._drain()
            if not self._pool._buffers:
                self._poller.sleep(time.monotonic() + 0.1)
        idx = self._pool.pop()
        self._pool.copy_to(buf, idx)
        wr = self._pool.make_send_wr(idx, len(buf), path)
        wr.remote_qkey = self.qkey
        self._qp.post_send(wr)

    def _drain(self) -> None:
        wcs = self._cq.poll()
        rest = []
        for wc in wcs:
            if wc.opcode == ibv.IBV_WC_RECV and \
                    wc.status == ibv.IBV_WC_SUCCESS:
                self._recvs.append(wc)
            else:
                rest.append(wc)
        self._pool.finish_wcs(self._qp, rest)

    def recvfrom(self, wakeat: Optional[float]) -> Optional[Tuple[bytearray,
                                                                  Any]]:
        """One received MAD before the monotonic time *wakeat* (None:
        forever): ``(buf, path)`` with the sender's path, or None."""
        import rdma.path
        while True:
            if self._recvs:
                wc = self._recvs.popleft()
                idx = wc.wr_id & self._pool.BUF_ID_MASK
                buf = self._pool.copy_from(idx, _GRH, wc.byte_len - _GRH)
                grh = self._pool.copy_from(idx, 0, _GRH)
                self._pool.finish_wcs(self._qp, [wc])
                path = rdma.path.WCPath(self.end_port, wc, grh, 0,
                                        qkey=self.qkey)
                return buf, path
            self._cq.req_notify()
            self._drain()
            if not self._recvs and not self._poller.sleep(wakeat):
                return None

    def _execute(self, buf: Any, path: Any, sendOnly: bool = False
                 ) -> Optional[Tuple[bytearray, Any]]:
        ms, retries = self._timing(path)
        self._last_timing = (retries + 1, ms)
        self.sendto(buf, path)
        if sendOnly:
            return None
        match = _key(buf)
        for attempt in range(retries + 1):
            if attempt:
                self.sendto(buf, path)
            deadline = time.monotonic() + ms / 1000
            while True:
                got = self.recvfrom(deadline)
                if got is None:
                    break
                if len(got[0]) >= 24 and _key(got[0]) == match and \
                        got[0][3] & 0x80:
                    return got
                if self.trace_func is not None:
                    self.trace_func(self, TRACE_UNEXPECTED, path=path,
                                    ret=got)
        return None

    def _get_sa_path(self) -> Any:
        return self._path

    # -- lifetime

    def close(self) -> None:
        """Free the QP, CQ, PD and buffers (and the Context if the VMAD
        opened it); idempotent."""
        for name in ("_qp", "_pool", "_pd", "_cq", "_cc"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
                setattr(self, name, None)
        if self._allocated_ctx and self._ctx is not None:
            self._ctx.close()
        self._ctx = None

    def __enter__(self) -> "VMAD":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rdma.vmad.VMAD for {self.end_port}>"
