"""rdma: a Python binding for RDMA verbs.

``import rdma`` and ``import rdma.ibverbs as ibv`` follow python-rdma:
:func:`get_devices`, :func:`get_end_port` and :func:`get_verbs` find a
device and open it; verbs errors raise :class:`SysError`.
"""
from rdma._errors import RDMAError, SysError, WRError
from rdma.devices import (Device, EndPort, get_devices, get_end_port,
                          get_verbs)

__version__ = "0.1.0"


def get_umad(end_port=None, **kwargs):
    """Open a :class:`rdma.umad.UMAD` (MADs through libibumad) on
    *end_port*; see :func:`rdma.umad.get_umad`."""
    from rdma.umad import get_umad as _get_umad
    return _get_umad(end_port, **kwargs)


def get_include() -> str:
    """The directory of ``pyrdma.h`` (the C API) and, beside the package,
    ``rdma/capi.pxd``: pass it as an include dir to C/Cython extensions."""
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "include")

__all__ = ["RDMAError", "SysError", "WRError", "WCError", "Device", "EndPort", "get_devices",
           "get_end_port", "get_verbs", "get_umad", "get_include", "__version__"]


def __getattr__(name):
    # Lazily: rdma.WCError lives in rdma.ibverbs, rdma.get_umad in rdma.umad.
    if name == "WCError":
        from rdma.ibverbs import WCError
        return WCError
    if name in ("path", "vtools", "aio", "ibverbs", "IBA", "sa", "umad"):
        import importlib
        return importlib.import_module(f"rdma.{name}")
    raise AttributeError(f"module 'rdma' has no attribute {name!r}")
