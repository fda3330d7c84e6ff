"""The verbs interface: objects, structs and IBV_* constants.

``import rdma.ibverbs as ibv`` gives the C extension's types (``Context``,
struct types such as ``ibv.port_attr``) and every ``IBV_*`` constant of the
installed rdma-core, plus the Python helpers that belong to this namespace.
"""
from rdma import _ibverbs
from rdma._errors import RDMAError, SysError
from rdma._ibverbs import *  # noqa: F401,F403  (types and IBV_* constants)

Context = _ibverbs.Context
device_attr = _ibverbs.device_attr
port_attr = _ibverbs.port_attr
gid_entry = _ibverbs.gid_entry

__all__ = ["Context", "device_attr", "port_attr", "gid_entry", "RDMAError",
           "SysError"] + [n for n in dir(_ibverbs) if n.startswith("IBV_")]
