"""The verbs interface: objects, structs and IBV_* constants.

``import rdma.ibverbs as ibv`` gives the C extension's types (``Context``,
``PD``, ``CQ``, ``QP``..., struct types such as ``ibv.qp_attr``), every
``IBV_*`` constant of the installed rdma-core, and the Python helpers that
belong to this namespace (:class:`WCError`, :class:`AsyncError`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from rdma import _ibverbs
from rdma._errors import AsyncError, RDMAError, SysError, WRError
from rdma._ibverbs import *  # noqa: F401,F403  (types and IBV_* constants)
from rdma._ibverbs import (AH, CQ, MR, MW, PD, QP, SRQ, IBV_WC_SUCCESS,
                           CompChannel, Context, RecvBatch, SendBatch,
                           WCArray, ah_attr, async_event, device_attr,
                           gid_entry, global_route, mw_bind_info, port_attr,
                           qp_attr, qp_cap, qp_init_attr, recv_wr, send_wr,
                           sge, srq_attr, wc)

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from rdma.devices import EndPort
    from rdma.path import IBPath


def _names(prefix: str, exclude: Tuple[str, ...] = ()) -> Dict[int, str]:
    out: Dict[int, str] = {}
    for n in dir(_ibverbs):
        if n.startswith(prefix) and not any(n.startswith(e) for e in exclude):
            out.setdefault(getattr(_ibverbs, n), n)
    return out


_WC_STATUS = _names("IBV_WC_", ("IBV_WC_EX_", "IBV_WC_STANDARD", "IBV_WC_IP",
                                "IBV_WC_WITH", "IBV_WC_GRH", "IBV_WC_TM",
                                "IBV_WC_SEND", "IBV_WC_RDMA", "IBV_WC_COMP",
                                "IBV_WC_FETCH", "IBV_WC_BIND",
                                "IBV_WC_LOCAL_INV",
                                "IBV_WC_TSO", "IBV_WC_RECV", "IBV_WC_DRIVER",
                                "IBV_WC_ATOMIC_WRITE", "IBV_WC_FLUSH"))
_WC_OPCODE = {getattr(_ibverbs, n): n for n in (
    "IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ",
    "IBV_WC_COMP_SWAP", "IBV_WC_FETCH_ADD", "IBV_WC_BIND_MW",
    "IBV_WC_LOCAL_INV", "IBV_WC_TSO", "IBV_WC_RECV",
    "IBV_WC_RECV_RDMA_WITH_IMM") if hasattr(_ibverbs, n)}


def inc_rkey(rkey: int) -> int:
    """The next rkey of a memory window (libibverbs' ibv_inc_rkey): the
    low byte (the key part the consumer owns) plus one, wrapping."""
    if not 0 <= rkey <= 0xFFFFFFFF:
        raise ValueError(f"inc_rkey(): rkey {rkey} is not a 32-bit value")
    return (rkey & 0xFFFFFF00) | ((rkey + 1) & 0xFF)


def wc_status_str(status: int) -> str:
    """The IBV_WC_* name of a work completion status."""
    return _WC_STATUS.get(status, f"unknown status {status}")


def wc_opcode_str(opcode: int) -> str:
    """The IBV_WC_* name of a work completion opcode."""
    return _WC_OPCODE.get(opcode, f"unknown opcode {opcode}")


class WCError(RDMAError):
    """A work completion with an error status.

    ``WCError(wc, qp=None, msg=None)``: ``wc`` is the failed
    :class:`rdma.ibverbs.wc`; ``qp`` the QP it belongs to, when known (use
    it to tear the QP down).  ``status``, ``opcode``, ``vendor_err`` and
    ``qp_num`` are copied from the completion.  python-rdma's form
    ``WCError(wc, cq, msg, obj=qp_or_srq, is_rq=...)`` works too.
    """

    def __init__(self, wc: _ibverbs.wc, qp: QP | CQ | None = None,
                 msg: Optional[str] = None, obj: QP | SRQ | None = None,
                 is_rq: Optional[bool] = None, cq: Optional[CQ] = None):
        if qp is not None and isinstance(qp, CQ):
            qp, cq = None, qp            # python-rdma: WCError(wc, cq, ...)
        if qp is None and isinstance(obj, QP):
            qp = obj
        self.wc = wc
        self.qp = qp
        self.cq = cq
        self.srq = obj if isinstance(obj, SRQ) else None
        self.is_rq = is_rq
        self.status = wc.status
        self.opcode = wc.opcode
        self.vendor_err = wc.vendor_err
        self.qp_num = wc.qp_num
        # Verbs leave the opcode undefined in a failed completion.
        op = (f", opcode {wc_opcode_str(wc.opcode)}"
              if wc.status == IBV_WC_SUCCESS else "")
        text = (f"{wc_status_str(wc.status)} ({wc.status}) on QP "
                f"{wc.qp_num:#x}{op}, wr_id {wc.wr_id}, "
                f"vendor_err {wc.vendor_err:#x}")
        if is_rq is not None:
            text += ", receive queue" if is_rq else ", send queue"
        if msg:
            text = f"{msg}: {text}"
        super().__init__(text)


def WCPath(end_port: Optional[EndPort], wc: _ibverbs.wc,
           buf: Optional[ReadableBuffer] = None, off: int = 0,
           **kwargs: Any) -> IBPath:
    """The path of a received UD packet (see :func:`rdma.path.WCPath`)."""
    from rdma.path import WCPath as _wcpath
    return _wcpath(end_port, wc, buf, off, **kwargs)


__all__ = ["WCPath", "Context", "PD", "CQ", "CompChannel", "QP", "SRQ", "MR",
           "MW", "AH", "SendBatch", "RecvBatch", "WCArray", "WCError",
           "WRError", "AsyncError",
           "RDMAError", "SysError", "wc_status_str", "wc_opcode_str",
           "device_attr", "port_attr", "gid_entry", "global_route", "ah_attr",
           "qp_cap", "qp_attr", "qp_init_attr", "srq_attr", "sge", "send_wr",
           "recv_wr", "wc", "async_event", "mw_bind_info", "inc_rkey"]
__all__ += [n for n in dir(_ibverbs) if n.startswith("IBV_")]
