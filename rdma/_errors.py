"""Exceptions of the rdma package (a leaf module: imports nothing of rdma)."""
import os
from typing import Any, Tuple

__all__ = ["RDMAError", "SysError", "WRError", "AsyncError"]


class RDMAError(Exception):
    """Base class of every error raised by the rdma package."""


class SysError(RDMAError, OSError):
    """A system or library call failed.

    ``errno`` is the error number, ``func`` the C function that failed
    (for example ``"ibv_open_device"``) and ``strerror`` the message.
    """

    def __init__(self, errno: int, func: str, msg: str = ""):
        text = os.strerror(errno) if errno else "error"
        if msg:
            text = f"{text}: {msg}"
        OSError.__init__(self, errno, text)
        self.func = func

    def __str__(self) -> str:
        return f"{self.func}: [Errno {self.errno}] {self.strerror}"

    def __reduce__(self) -> Tuple[Any, ...]:
        msg = self.strerror or ""
        prefix = os.strerror(self.errno) if self.errno else "error"
        msg = msg[len(prefix) + 2:] if msg.startswith(prefix + ": ") else ""
        return (type(self), (self.errno, self.func, msg))


class WRError(SysError):
    """A posted work request was rejected (``ibv_post_send``,
    ``ibv_post_recv``, ``ibv_post_srq_recv``).

    ``index`` is the position of the rejected request in the posted list
    (the ones before it were posted), ``wr`` the request itself.
    """

    def __init__(self, errno: int, func: str, msg: str = "",
                 index: int = 0, wr: object = None):
        SysError.__init__(self, errno, func, msg)
        self.index = index
        self.wr = wr

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), SysError.__reduce__(self)[1] + (self.index, None))


def _event_name(event_type: int) -> str:
    # The IBV_EVENT_* names live in the extension; looked up when needed
    # (this module is imported by the extension, not the other way round).
    from rdma import _ibverbs
    for n in dir(_ibverbs):
        if n.startswith("IBV_EVENT_") and getattr(_ibverbs, n) == event_type:
            return n
    return f"event {event_type}"


class AsyncError(RDMAError):
    """An asynchronous error event (``rdma.ibverbs.AsyncError``), raised by
    :meth:`rdma.ibverbs.Context.handle_async_event` for the events that
    break something (``IBV_EVENT_QP_FATAL``, ``IBV_EVENT_CQ_ERR``,
    ``IBV_EVENT_DEVICE_FATAL``...).

    ``event`` is the :class:`rdma.ibverbs.async_event` (or python-rdma's
    ``(event_type, obj)`` pair), ``event_type`` and ``obj`` its parts: the
    QP, CQ, SRQ, end port or device it is about.
    """

    def __init__(self, event: object, msg: str = "Asynchronous error event"):
        if isinstance(event, tuple):
            event_type, obj = event
        else:
            event_type = getattr(event, "event_type")
            obj = getattr(event, "obj", None)
        self.event = event
        self.event_type = event_type
        self.obj = obj
        self.msg = msg
        RDMAError.__init__(self, f"{msg} - {_event_name(event_type)} "
                                 f"({event_type}) for {obj!r}")

    def __reduce__(self) -> Tuple[Any, ...]:
        # The object the event is about stays in this process.
        return (type(self), ((self.event_type, None), self.msg))


# Shown (and documented) as rdma.RDMAError, rdma.SysError, rdma.WRError.
for _cls in (RDMAError, SysError, WRError):
    _cls.__module__ = "rdma"
del _cls
AsyncError.__module__ = "rdma.ibverbs"
