"""Type stubs for the C extension rdma._umad (csrc/umad.c), used by
rdma.umad and rdma.devices.  Written by hand from the C method, getset
and member tables; checked against the built extension by mypy's
stubtest in the host tier (tests/host/test_lint.py):

    PYTHONPATH=. python -m mypy.stubtest rdma._ibverbs rdma._umad
"""
from collections.abc import Sequence
from types import TracebackType
from typing import TypeAlias, TypedDict, final, type_check_only

from _typeshed import ReadableBuffer
from typing_extensions import Self

SLICE_MS: int

@type_check_only
class _PortInfo(TypedDict):
    port_id: int
    lid: int
    lmc: int
    sm_lid: int
    sm_sl: int
    state: int
    phys_state: int
    rate: int
    capmask: int
    gid_prefix: int
    port_guid: int
    pkeys: list[int]
    link_layer: str

@type_check_only
class _CAInfo(TypedDict):
    name: str
    node_type: int
    numports: int
    fw_ver: str
    ca_type: str
    hw_ver: str
    node_guid: int
    system_guid: int
    ports: list[_PortInfo]

# A received MAD's address: (slid, sqpn, qkey, sl, path_bits, grh_present,
# sgid, hop_limit, traffic_class, flow_label, pkey_index, gid_index).
_Addr: TypeAlias = tuple[int, int, int, int, int, int, bytes, int, int, int,
                         int, int]
# A send's GRH: (dgid, sgid_index, hop_limit, traffic_class, flow_label).
_GRH: TypeAlias = tuple[ReadableBuffer, int, int, int, int]
# A request of Port.transact: (agent_id, mad, dlid, sl, timeout_ms,
# retries).
_Request: TypeAlias = tuple[int, ReadableBuffer, int, int, int, int]

def _load() -> None: ...
def get_ca(name: str, /) -> _CAInfo: ...
def get_ca_names() -> list[str]: ...

@final
class Port:
    """An open umad port (umad_open_port); a context manager."""
    def __init__(self, ca_name: str, port_num: int) -> None: ...
    @property
    def ca_name(self) -> str: ...
    @property
    def port_num(self) -> int: ...
    @property
    def fd(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None,
                 exc: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...
    def register(self, mgmt_class: int, mgmt_version: int,
                 rmpp_version: int = 0,
                 method_mask: ReadableBuffer | None = None) -> int: ...
    def unregister(self, agent_id: int, /) -> None: ...
    def send(self, agent_id: int, mad: ReadableBuffer, /, *, dlid: int,
             dqpn: int = 1, sl: int = 0, qkey: int = 0x80010000,
             pkey_index: int = 0, timeout_ms: int = 0, retries: int = 0,
             grh: _GRH | None = None) -> None: ...
    def recv(self, timeout_ms: int = -1
             ) -> tuple[int, int, bytes, _Addr] | None: ...
    def transact(self, requests: Sequence[_Request], window: int
                 ) -> tuple[list[bytes | int | None], int, int]: ...
