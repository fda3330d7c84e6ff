"""Exceptions of the rdma package (a leaf module: imports nothing of rdma)."""
import os

__all__ = ["RDMAError", "SysError", "WRError"]


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

    def __reduce__(self):
        msg = self.strerror
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

    def __reduce__(self):
        return (type(self), SysError.__reduce__(self)[1] + (self.index, None))


# Shown (and documented) as rdma.RDMAError, rdma.SysError, rdma.WRError.
for _cls in (RDMAError, SysError, WRError):
    _cls.__module__ = "rdma"
del _cls
