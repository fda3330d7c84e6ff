"""rdma: a Python binding for RDMA verbs and InfiniBand management.

``import rdma`` and ``import rdma.ibverbs as ibv`` follow python-rdma:
:func:`get_devices`, :func:`get_device` and :func:`get_end_port` find a
device or port (verbs and umad devices are one model, see
:mod:`rdma.devices`); :func:`get_verbs`, :func:`get_umad` and
:func:`get_gmp_mad` open one.  Verbs errors raise :class:`SysError`, MAD
errors :class:`MADError`.
"""
# First, before any import that takes time (os and sys are loaded already).
import os as _os
import sys as _sys


# (typing is imported after the hook is in place: it takes time, and
# the hook is what makes a Ctrl-C during the imports quiet)
def _quiet_interrupt(tp, value, tb,  # type: ignore[no-untyped-def]
                     _prev=_sys.excepthook) -> None:
    """sys.excepthook of the package's own commands: Ctrl-C is no bug, so
    a KeyboardInterrupt nobody caught prints no traceback (Python still
    ends the process by SIGINT: the shell sees status 130)."""
    if issubclass(tp, KeyboardInterrupt):
        return
    _prev(tp, value, tb)


# ``python -m rdma`` (or ``-m rdma.fabric`` ...): while runpy imports this
# package, argv[0] is still "-m"; the ibtool console script imports it
# first thing.  A Ctrl-C from here on is quiet; rdma.cli.main catches it
# once the command runs (exit 130).
if getattr(_sys, "argv", [""])[:1] == ["-m"] or \
        _os.path.basename(getattr(_sys, "argv", [""])[0] or "") == "ibtool":
    _sys.excepthook = _quiet_interrupt

from typing import TYPE_CHECKING, Any, Union  # noqa: E402

from rdma._errors import RDMAError, SysError, WRError  # noqa: E402
from rdma.devices import (Device, EndPort, RDMADevice,  # noqa: E402
                          get_device, get_devices, get_end_port, get_verbs)
# The MAD errors live with the MAD structures (rdma.IBA, which rdma.devices
# has imported already).
from rdma.IBA import MADClassError, MADError, MADTimeoutError  # noqa: E402

if TYPE_CHECKING:
    from rdma.umad import UMAD
    from rdma.vmad import VMAD

__version__ = "0.1.0"


def get_umad(end_port: Any = None, path: Any = None,
             **kwargs: Any) -> "UMAD":
    """Open a :class:`rdma.umad.UMAD` (SMPs and GMPs through libibumad) on
    *end_port* (an :class:`EndPort`, a name for :func:`get_end_port`, or
    None for the default end port).  *path* (python-rdma's argument) and
    *kwargs* go to :class:`rdma.umad.UMAD` when given.

    :raises RDMAError: if the port's device has no umad (the software
        fabric, or ib_umad not loaded)."""
    from rdma.umad import get_umad as _get_umad
    if path is not None:
        kwargs["path"] = path
    return _get_umad(end_port, **kwargs)


def get_gmp_mad(port: Any = None, path: Any = None, verbs: Any = None,
                **kwargs: Any) -> "Union[UMAD, VMAD]":
    """Return a GMP transactor for *port* (python-rdma's
    ``rdma.get_gmp_mad``): something with ``SubnAdmGet``,
    ``PerformanceGet``... for general MADs (not SMPs).

    A port whose device has umad gets a :class:`rdma.umad.UMAD`.  Otherwise,
    or when an open verbs :class:`rdma.ibverbs.Context` is passed as
    *verbs*, MADs go through a verbs UD QP (:class:`rdma.vmad.VMAD`, where
    this build has :mod:`rdma.vmad`); *path* is the path of that QP
    (default: the port's ``sa_path``).  *kwargs* go to the transactor.

    :raises RDMAError: if the port can send no GMPs (the software fabric
        has no umad; see :mod:`rdma.vmad`)."""
    if port is None or isinstance(port, str) or \
            not hasattr(port, "parent"):
        port = get_end_port(port)
    if verbs is None and getattr(port, "has_umad", False):
        return get_umad(port, path, **kwargs)
    if verbs is None and path is None and \
            getattr(port, "provider", None) == "ucx":
        raise RDMAError(f"{port} is the software fabric, which has no umad "
                        f"and no subnet manager, SA or PMA behind QP1 for "
                        f"MADs through a verbs QP (rdma.vmad): GMPs need an "
                        f"InfiniBand device or the ibsim shim")
    try:
        from rdma.vmad import VMAD
    except ImportError:
        if verbs is not None:
            raise RDMAError("get_gmp_mad(verbs=...): this build has no "
                            "rdma.vmad (MADs through a verbs QP)")
        return get_umad(port, path, **kwargs)   # raises, naming what lacks
    if path is None:
        path = port.sa_path
    if verbs is not None:
        return VMAD(verbs, path, **kwargs)
    ctx = get_verbs(port)
    try:
        ret = VMAD(ctx, path, **kwargs)
    except BaseException:
        ctx.close()
        raise
    ret._allocated_ctx = True       # python-rdma: the VMAD closes the ctx
    return ret


def get_include() -> str:
    """The directory of ``pyrdma.h`` (the C API) and, beside the package,
    ``rdma/capi.pxd``: pass it as an include dir to C/Cython extensions."""
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "include")


__all__ = ["RDMAError", "SysError", "WRError", "WCError", "MADError",
           "MADClassError",
           "MADTimeoutError", "Device", "RDMADevice", "EndPort",
           "get_devices", "get_device", "get_end_port", "get_verbs",
           "get_umad", "get_gmp_mad", "get_include", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazily: rdma.WCError lives in rdma.ibverbs, the submodules where
    # they are.
    if name == "WCError":
        from rdma.ibverbs import WCError
        return WCError
    # python-rdma's submodules, imported on first use: its programs reach
    # e.g. rdma.satransactor.SATransactor having imported only rdma.
    if name in ("path", "vtools", "aio", "ibverbs", "IBA", "sa", "umad",
                "devices", "IBA_describe", "tools", "binstruct",
                "madtransactor", "sched", "subnet", "discovery", "vmad",
                "satransactor"):
        import importlib
        try:
            return importlib.import_module(f"rdma.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rdma.{name}":
                raise
            raise AttributeError(f"module 'rdma' has no attribute {name!r} "
                                 f"(rdma.{name} is not in this build)") \
                from exc
    raise AttributeError(f"module 'rdma' has no attribute {name!r}")
