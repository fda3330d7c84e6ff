"""rdma: a Python binding for RDMA verbs.

``import rdma`` and ``import rdma.ibverbs as ibv`` follow python-rdma:
:func:`get_devices`, :func:`get_end_port` and :func:`get_verbs` find a
device and open it; verbs errors raise :class:`SysError`.
"""
from rdma._errors import RDMAError, SysError
from rdma.devices import (Device, EndPort, get_devices, get_end_port,
                          get_verbs)

__version__ = "0.1.0"

__all__ = ["RDMAError", "SysError", "Device", "EndPort", "get_devices",
           "get_end_port", "get_verbs", "__version__"]
