"""Type stubs for the C extension rdma._ibverbs (csrc/*.c).

Its public names are re-exported by rdma.ibverbs, which is what programs
import.  The object classes and structs are written by hand from the C
method and getset tables; the IBV_* block lists csrc/constants.inc (which
csrc/gen_constants.py makes from the installed <infiniband/verbs.h>) and
is regenerated with

    python -c "import rdma._ibverbs as m; print(''.join(f'{n}: int\\n'
        for n in sorted(dir(m)) if n.startswith('IBV_')), end='')"

Checked against the built extension by mypy's stubtest in the host tier
(tests/host/test_lint.py):

    PYTHONPATH=. python -m mypy.stubtest rdma._ibverbs rdma._umad
"""
import select
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import (Any, ClassVar, Literal, TypeAlias, final,
                    type_check_only)

from _typeshed import ReadableBuffer
from typing_extensions import CapsuleType, Self, disjoint_base

from rdma._errors import SysError as SysError
from rdma.devices import Device, EndPort
from rdma.IBA import GID
from rdma.path import IBPath

_C_API: CapsuleType
_VERBS_LINKAGE: Literal["linked", "dlopen"]

def _list_devices(provider: str, /) -> list[tuple[str, int, int, int]]: ...
def _load_provider(name: str, /) -> None: ...
def _providers() -> tuple[str, ...]: ...

@type_check_only
class _Object:
    """What every verbs object has: close(), closed, a context manager."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None,
                 exc: BaseException | None,
                 tb: TracebackType | None, /) -> None: ...

@final
class Context(_Object):
    """An open RDMA device (ibv_open_device)."""
    def __init__(self, name: str | EndPort | Device, *,
                 provider: str = "verbs",
                 end_port: EndPort | None = None) -> None: ...
    @property
    def node(self) -> Device | None: ...
    @property
    def provider(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def end_port(self) -> EndPort | None: ...
    def query_device(self) -> device_attr: ...
    def query_port(self, port_id: int | None = None) -> port_attr: ...
    def query_gid(self, port_id: int, index: int) -> GID: ...
    def query_gid_ex(self, port_id: int, index: int) -> gid_entry: ...
    def query_pkey(self, port_id: int, index: int) -> int: ...
    def pd(self) -> PD: ...
    def cq(self, nelems: int = 100, comp_channel: CompChannel | None = None,
           vec: int = 0) -> CQ: ...
    def comp_channel(self) -> CompChannel: ...
    def get_async_event(
        self, timeout: float | None = None) -> async_event | None: ...
    def handle_async_event(
        self, event: async_event | tuple[int, object], /) -> None: ...
    def register_poll(self, poll: select.poll, /) -> None: ...
    def check_poll(self, pevent: tuple[int, int], /) -> bool: ...
    def async_fileno(self) -> int: ...

@final
class PD(_Object):
    """A protection domain: Context.pd()."""
    @property
    def ctx(self) -> Context: ...
    def qp(self, qp_type: int | qp_init_attr,
           max_send_wr: int | None = None, send_cq: CQ | None = None,
           max_recv_wr: int | None = None, recv_cq: CQ | None = None,
           srq: SRQ | None = None, sq_sig_all: int = 1,
           max_send_sge: int = 1, max_recv_sge: int = 1,
           max_inline_data: int = 0) -> QP: ...
    def srq(self, max_wr: int = 100, max_sge: int = 1,
            srq_limit: int = 0) -> SRQ: ...
    def mr(self, buf: ReadableBuffer, access: int = 0) -> MR: ...
    def alloc_mr(self, length: int, access: int = ...) -> MR: ...
    def mw(self, type: int = ...) -> MW: ...
    def ah(self, attr: ah_attr | IBPath, /) -> AH: ...
    def cq(self, nelems: int = 100, comp_channel: CompChannel | None = None,
           vec: int = 0) -> CQ: ...
    def virtual_qp(self, n_qps: int, cq: VirtualCQ, mode: str = "dqplb",
                   fragment: int = 65536, max_msgs: int = 64,
                   max_wr: int = 256, max_sge: int = 4,
                   choose: str = "round_robin",
                   port: int = 1) -> VirtualQP: ...
    def virtual_cq(self, nelems: int = 4096) -> VirtualCQ: ...

@final
class VirtualCQ(_Object):
    """The completion queue of virtual QPs: PD.virtual_cq()."""
    @property
    def cqe(self) -> int: ...
    @property
    def ctx(self) -> Context: ...
    def poll(self, n: int = -1) -> list[wc]: ...
    def poll_into(self, wcs: WCArray, n: int | None = None) -> int: ...

@final
class VirtualQP(_Object):
    """A virtual queue pair striping each message over n_qps RC data QPs:
    PD.virtual_qp()."""
    @property
    def qp_nums(self) -> tuple[int, ...]: ...
    @property
    def qp_num(self) -> int: ...
    @property
    def n_qps(self) -> int: ...
    @property
    def fragment(self) -> int: ...
    @property
    def max_msgs(self) -> int: ...
    @property
    def outstanding(self) -> int: ...
    @property
    def max_wr(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def choose(self) -> str: ...
    @property
    def connected(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def send_seq(self) -> int: ...
    @send_seq.setter
    def send_seq(self, value: int) -> None: ...
    @property
    def pd(self) -> PD: ...
    @property
    def cq(self) -> VirtualCQ: ...
    def post_send(self, wr: send_wr | Sequence[send_wr] | SendBatch,
                  /) -> None: ...
    def post_recv(self, wr: recv_wr | Sequence[recv_wr] | RecvBatch,
                  /) -> None: ...
    def connect(self, path: IBPath, peer: Mapping[str, Any],
                qp_access_flags: int = ...) -> None: ...
    def info(self) -> dict[str, Any]: ...

@final
class CQ(_Object):
    """A completion queue: Context.cq()."""
    @property
    def cqe(self) -> int: ...
    @property
    def unacked_events(self) -> int: ...
    @property
    def comp_channel(self) -> CompChannel | None: ...
    @property
    def comp_chan(self) -> CompChannel | None: ...
    @property
    def ctx(self) -> Context: ...
    def poll(self, n: int = -1) -> list[wc]: ...
    def poll_into(self, wcs: WCArray, n: int | None = None, min: int = 0,
                  timeout: float | None = None) -> int: ...
    def req_notify_cq(self, solicited_only: bool = False) -> None: ...
    def req_notify(self, solicited_only: bool = False) -> None: ...
    def ack_events(self, n: int | None = None) -> None: ...
    def resize(self, cqe: int, /) -> None: ...

@final
class CompChannel(_Object):
    """A completion channel: Context.comp_channel()."""
    def fileno(self) -> int: ...
    def get_cq_event(self, timeout: float | None = None) -> CQ | None: ...
    def register_poll(self, poll: select.poll, /) -> None: ...
    def check_poll(self, event: tuple[int, int], /) -> CQ | None: ...

@final
class CMEventChannel(_Object):
    """A connection manager event channel (rdma_create_event_channel)."""
    def __init__(self, provider: str = "verbs") -> None: ...
    @property
    def provider(self) -> str | None: ...
    def fileno(self) -> int: ...
    def create_id(self, ps: int = 0x0106) -> CMID: ...
    def get_event(self, timeout: float | None = None) -> tuple[
        int, int, CMID | None, CMID | None, bytes, int, int, int, int, int,
        int, int, int, ah_attr | None] | None: ...

_Addr: TypeAlias = tuple[str | None, int]
_Path: TypeAlias = tuple[bytes, bytes, int, int, int, int, int, int, int,
                         int, int, int]

@final
class CMID(_Object):
    """A connection manager ID: CMEventChannel.create_id()."""
    @property
    def ps(self) -> int: ...
    @property
    def channel(self) -> CMEventChannel: ...
    def bind_addr(self, addr: _Addr, /) -> None: ...
    def resolve_addr(self, dst: _Addr, src: _Addr | None = None,
                     timeout_ms: int = 2000) -> None: ...
    def resolve_route(self, timeout_ms: int = 2000) -> None: ...
    def listen(self, backlog: int = 0) -> None: ...
    def connect(self, private_data: ReadableBuffer | None = None,
                qp_num: int = 0, responder_resources: int = 1,
                initiator_depth: int = 1, flow_control: int = 1,
                retry_count: int = 7, rnr_retry_count: int = 7,
                srq: int = 0, qkey: int = 0) -> None: ...
    def accept(self, private_data: ReadableBuffer | None = None,
               qp_num: int = 0, responder_resources: int = 1,
               initiator_depth: int = 1, flow_control: int = 1,
               retry_count: int = 7, rnr_retry_count: int = 7,
               srq: int = 0, qkey: int = 0) -> None: ...
    def reject(self, private_data: ReadableBuffer | None = None) -> None: ...
    def establish(self) -> None: ...
    def disconnect(self) -> None: ...
    def init_qp_attr(self, qp_state: int, /) -> tuple[qp_attr, int]: ...
    def query(self) -> tuple[str, int, int, tuple[str, int] | None,
                             tuple[str, int] | None, bytes, bytes, int,
                             _Path | None]: ...
    def join_multicast(self, addr: _Addr, /) -> None: ...
    def leave_multicast(self, addr: _Addr, /) -> None: ...

@final
class QP(_Object):
    """A queue pair: PD.qp()."""
    @property
    def qp_num(self) -> int: ...
    @property
    def qp_type(self) -> int: ...
    @property
    def cap(self) -> qp_cap: ...
    @property
    def max_send_wr(self) -> int: ...
    @property
    def max_recv_wr(self) -> int: ...
    @property
    def max_send_sge(self) -> int: ...
    @property
    def max_recv_sge(self) -> int: ...
    @property
    def max_inline_data(self) -> int: ...
    @property
    def sq_sig_all(self) -> bool: ...
    @property
    def state(self) -> int: ...
    @property
    def pd(self) -> PD: ...
    @property
    def ctx(self) -> Context: ...
    @property
    def send_cq(self) -> CQ: ...
    @property
    def recv_cq(self) -> CQ: ...
    @property
    def srq(self) -> SRQ | None: ...
    def post_send(self,
                  wr: send_wr | Sequence[send_wr] | SendBatch, /) -> None: ...
    def post_recv(self,
                  wr: recv_wr | Sequence[recv_wr] | RecvBatch, /) -> None: ...
    def bind_mw(self, mw: MW, bind_info: mw_bind_info, wr_id: int = 0,
                send_flags: int = ...) -> int: ...
    def modify(self, attr: qp_attr, mask: int | None = None) -> None: ...
    def query(self, mask: int = ...) -> qp_attr: ...
    def modify_to_init(self, path: IBPath,
                       qp_access_flags: int = 0) -> None: ...
    def modify_to_rtr(self, path: IBPath, /) -> None: ...
    def modify_to_rts(self, path: IBPath, /) -> None: ...
    def establish(self, path: IBPath, qp_access_flags: int = 0) -> None: ...
    def attach_mcast(self, gid: GID | str | bytes | IBPath,
                     lid: int = 0, /) -> None: ...
    def detach_mcast(self, gid: GID | str | bytes | IBPath,
                     lid: int = 0, /) -> None: ...

@final
class SRQ(_Object):
    """A shared receive queue: PD.srq()."""
    @property
    def pd(self) -> PD: ...
    @property
    def ctx(self) -> Context: ...
    def post_recv(self,
                  wr: recv_wr | Sequence[recv_wr] | RecvBatch, /) -> None: ...
    def modify(self, srq_limit: int | srq_attr | None = None,
               max_wr: int | None = None, attr: srq_attr | None = None,
               mask: int | None = None) -> None: ...
    def query(self) -> srq_attr: ...

@final
class MR(_Object):
    """A registered memory region: PD.mr()."""
    @property
    def lkey(self) -> int: ...
    @property
    def rkey(self) -> int: ...
    @property
    def addr(self) -> int: ...
    @property
    def length(self) -> int: ...
    # The buffer object that was registered: its type is the caller's.
    @property
    def buf(self) -> Any: ...
    @property
    def access(self) -> int: ...
    @property
    def pd(self) -> PD: ...
    def sge(self, length: int | None = None, off: int = 0) -> sge: ...
    def rereg(self, flags: int, pd: PD | None = None, buf: Any = None,
              access: int = 0) -> None: ...

@final
class MW(_Object):
    """A memory window: PD.mw()."""
    @property
    def rkey(self) -> int: ...
    @property
    def type(self) -> int: ...
    @property
    def pd(self) -> PD: ...

@final
class AH(_Object):
    """An address handle: PD.ah()."""
    @property
    def ah_attr(self) -> ah_attr: ...
    @property
    def pd(self) -> PD: ...

@final
class SendBatch:
    """Send work requests converted once, to post many times."""
    def __new__(cls, wrs: Sequence[send_wr], qp_type: int = 0) -> Self: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> send_wr: ...

@final
class RecvBatch:
    """Receive work requests converted once, to post many times."""
    def __new__(cls, wrs: Sequence[recv_wr]) -> Self: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> recv_wr: ...

@final
class WCArray:
    """A reusable array of work completions for CQ.poll_into()."""
    def __new__(cls, capacity: int = 64) -> Self: ...
    @property
    def capacity(self) -> int: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> wc: ...
    def wr_id(self, i: int, /) -> int: ...
    def status(self, i: int, /) -> int: ...
    def byte_len(self, i: int, /) -> int: ...
    def first_error(self) -> int | None: ...

@type_check_only
class _Struct:
    """What every struct type has: keyword construction, copy(), equality
    and ordering by fields (unhashable)."""
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def copy(self) -> Self: ...
    def __copy__(self) -> Self: ...
    @classmethod
    def _fields(cls) -> tuple[str, ...]: ...
    def _mask(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __lt__(self, value: Self, /) -> bool: ...
    def __le__(self, value: Self, /) -> bool: ...
    def __gt__(self, value: Self, /) -> bool: ...
    def __ge__(self, value: Self, /) -> bool: ...

@disjoint_base
class device_attr(_Struct):
    """Device attributes, as returned by Context.query_device()."""
    fw_ver: str
    node_guid: int
    sys_image_guid: int
    max_mr_size: int
    page_size_cap: int
    vendor_id: int
    vendor_part_id: int
    hw_ver: int
    max_qp: int
    max_qp_wr: int
    device_cap_flags: int
    max_sge: int
    max_sge_rd: int
    max_cq: int
    max_cqe: int
    max_mr: int
    max_pd: int
    max_qp_rd_atom: int
    max_ee_rd_atom: int
    max_res_rd_atom: int
    max_qp_init_rd_atom: int
    max_ee_init_rd_atom: int
    atomic_cap: int
    max_ee: int
    max_rdd: int
    max_mw: int
    max_raw_ipv6_qp: int
    max_raw_ethy_qp: int
    max_mcast_grp: int
    max_mcast_qp_attach: int
    max_total_mcast_qp_attach: int
    max_ah: int
    max_fmr: int
    max_map_per_fmr: int
    max_srq: int
    max_srq_wr: int
    max_srq_sge: int
    max_pkeys: int
    local_ca_ack_delay: int
    phys_port_cnt: int
    def __init__(
        self, *,
        fw_ver: str = ...,
        node_guid: int = ...,
        sys_image_guid: int = ...,
        max_mr_size: int = ...,
        page_size_cap: int = ...,
        vendor_id: int = ...,
        vendor_part_id: int = ...,
        hw_ver: int = ...,
        max_qp: int = ...,
        max_qp_wr: int = ...,
        device_cap_flags: int = ...,
        max_sge: int = ...,
        max_sge_rd: int = ...,
        max_cq: int = ...,
        max_cqe: int = ...,
        max_mr: int = ...,
        max_pd: int = ...,
        max_qp_rd_atom: int = ...,
        max_ee_rd_atom: int = ...,
        max_res_rd_atom: int = ...,
        max_qp_init_rd_atom: int = ...,
        max_ee_init_rd_atom: int = ...,
        atomic_cap: int = ...,
        max_ee: int = ...,
        max_rdd: int = ...,
        max_mw: int = ...,
        max_raw_ipv6_qp: int = ...,
        max_raw_ethy_qp: int = ...,
        max_mcast_grp: int = ...,
        max_mcast_qp_attach: int = ...,
        max_total_mcast_qp_attach: int = ...,
        max_ah: int = ...,
        max_fmr: int = ...,
        max_map_per_fmr: int = ...,
        max_srq: int = ...,
        max_srq_wr: int = ...,
        max_srq_sge: int = ...,
        max_pkeys: int = ...,
        local_ca_ack_delay: int = ...,
        phys_port_cnt: int = ...,
    ) -> None: ...

@disjoint_base
class port_attr(_Struct):
    """Port attributes, as returned by Context.query_port()."""
    state: int
    max_mtu: int
    active_mtu: int
    gid_tbl_len: int
    port_cap_flags: int
    max_msg_sz: int
    bad_pkey_cntr: int
    qkey_viol_cntr: int
    pkey_tbl_len: int
    lid: int
    sm_lid: int
    lmc: int
    max_vl_num: int
    sm_sl: int
    subnet_timeout: int
    init_type_reply: int
    active_width: int
    active_speed: int
    phys_state: int
    link_layer: int
    flags: int
    port_cap_flags2: int
    def __init__(
        self, *,
        state: int = ...,
        max_mtu: int = ...,
        active_mtu: int = ...,
        gid_tbl_len: int = ...,
        port_cap_flags: int = ...,
        max_msg_sz: int = ...,
        bad_pkey_cntr: int = ...,
        qkey_viol_cntr: int = ...,
        pkey_tbl_len: int = ...,
        lid: int = ...,
        sm_lid: int = ...,
        lmc: int = ...,
        max_vl_num: int = ...,
        sm_sl: int = ...,
        subnet_timeout: int = ...,
        init_type_reply: int = ...,
        active_width: int = ...,
        active_speed: int = ...,
        phys_state: int = ...,
        link_layer: int = ...,
        flags: int = ...,
        port_cap_flags2: int = ...,
    ) -> None: ...

@disjoint_base
class gid_entry(_Struct):
    """A GID table entry, as returned by Context.query_gid_ex()."""
    gid: GID
    gid_index: int
    gid_type: int
    ndev_ifindex: int
    def __init__(
        self, *,
        gid: GID = ...,
        gid_index: int = ...,
        gid_type: int = ...,
        ndev_ifindex: int = ...,
    ) -> None: ...

@disjoint_base
class global_route(_Struct):
    """The GRH part of an address vector."""
    @property
    def dgid(self) -> GID: ...
    @dgid.setter
    def dgid(self, value: GID | str | bytes) -> None: ...
    flow_label: int
    sgid_index: int
    hop_limit: int
    traffic_class: int
    def __init__(
        self, *,
        dgid: GID | str | bytes = ...,
        flow_label: int = ...,
        sgid_index: int = ...,
        hop_limit: int = ...,
        traffic_class: int = ...,
    ) -> None: ...

@disjoint_base
class ah_attr(_Struct):
    """An address vector: for PD.ah() and qp_attr.ah_attr."""
    grh: global_route
    dlid: int
    sl: int
    src_path_bits: int
    static_rate: int
    is_global: int
    port_num: int
    def __init__(
        self, *,
        grh: global_route = ...,
        dlid: int = ...,
        sl: int = ...,
        src_path_bits: int = ...,
        static_rate: int = ...,
        is_global: int = ...,
        port_num: int = ...,
    ) -> None: ...

@disjoint_base
class qp_cap(_Struct):
    """QP capacities."""
    max_send_wr: int
    max_recv_wr: int
    max_send_sge: int
    max_recv_sge: int
    max_inline_data: int
    def __init__(
        self, *,
        max_send_wr: int = ...,
        max_recv_wr: int = ...,
        max_send_sge: int = ...,
        max_recv_sge: int = ...,
        max_inline_data: int = ...,
    ) -> None: ...

# qp_attr's field ah_attr hides the type's name in its class body.
_ah_attr: TypeAlias = ah_attr

@disjoint_base
class qp_attr(_Struct):
    """QP attributes for QP.modify() and from QP.query().  The attribute mask
    of modify() is made from the fields that were assigned."""
    qp_state: int
    cur_qp_state: int
    path_mtu: int
    path_mig_state: int
    qkey: int
    rq_psn: int
    sq_psn: int
    dest_qp_num: int
    qp_access_flags: int
    cap: qp_cap
    ah_attr: _ah_attr
    alt_ah_attr: _ah_attr
    pkey_index: int
    alt_pkey_index: int
    en_sqd_async_notify: int
    sq_draining: int
    max_rd_atomic: int
    max_dest_rd_atomic: int
    min_rnr_timer: int
    port_num: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    alt_port_num: int
    alt_timeout: int
    rate_limit: int
    def __init__(
        self, *,
        qp_state: int = ...,
        cur_qp_state: int = ...,
        path_mtu: int = ...,
        path_mig_state: int = ...,
        qkey: int = ...,
        rq_psn: int = ...,
        sq_psn: int = ...,
        dest_qp_num: int = ...,
        qp_access_flags: int = ...,
        cap: qp_cap = ...,
        ah_attr: _ah_attr = ...,
        alt_ah_attr: _ah_attr = ...,
        pkey_index: int = ...,
        alt_pkey_index: int = ...,
        en_sqd_async_notify: int = ...,
        sq_draining: int = ...,
        max_rd_atomic: int = ...,
        max_dest_rd_atomic: int = ...,
        min_rnr_timer: int = ...,
        port_num: int = ...,
        timeout: int = ...,
        retry_cnt: int = ...,
        rnr_retry: int = ...,
        alt_port_num: int = ...,
        alt_timeout: int = ...,
        rate_limit: int = ...,
    ) -> None: ...

@disjoint_base
class qp_init_attr(_Struct):
    """What PD.qp() creates."""
    cap: qp_cap
    qp_type: int
    sq_sig_all: int
    send_cq: CQ | None
    recv_cq: CQ | None
    srq: SRQ | None
    def __init__(
        self, *,
        cap: qp_cap = ...,
        qp_type: int = ...,
        sq_sig_all: int = ...,
        send_cq: CQ | None = ...,
        recv_cq: CQ | None = ...,
        srq: SRQ | None = ...,
    ) -> None: ...

@disjoint_base
class srq_attr(_Struct):
    """SRQ attributes for SRQ.modify() and from SRQ.query()."""
    max_wr: int
    max_sge: int
    srq_limit: int
    def __init__(
        self, *,
        max_wr: int = ...,
        max_sge: int = ...,
        srq_limit: int = ...,
    ) -> None: ...

@disjoint_base
class sge(_Struct):
    """A scatter/gather element; MR.sge() makes one."""
    addr: int
    length: int
    lkey: int
    def __init__(
        self, *,
        addr: int = ...,
        length: int = ...,
        lkey: int = ...,
    ) -> None: ...

@disjoint_base
class send_wr(_Struct):
    """A send work request for QP.post_send().  The fields are flat:
    remote_addr/rkey serve RDMA and atomics, ah/remote_qpn/remote_qkey
    serve UD."""
    wr_id: int
    @property
    def sg_list(self) -> sge | list[sge] | None: ...
    @sg_list.setter
    def sg_list(self, value: sge | Sequence[sge] | None) -> None: ...
    opcode: int
    send_flags: int
    imm_data: int
    remote_addr: int
    rkey: int
    compare_add: int
    swap: int
    ah: AH | None
    remote_qpn: int
    remote_qkey: int
    invalidate_rkey: int
    next: send_wr | None
    mw: MW | None
    bind_info: mw_bind_info | None
    def __init__(
        self, *,
        wr_id: int = ...,
        sg_list: sge | Sequence[sge] | None = ...,
        opcode: int = ...,
        send_flags: int = ...,
        imm_data: int = ...,
        remote_addr: int = ...,
        rkey: int = ...,
        compare_add: int = ...,
        swap: int = ...,
        ah: AH | None = ...,
        remote_qpn: int = ...,
        remote_qkey: int = ...,
        invalidate_rkey: int = ...,
        next: send_wr | None = ...,
        mw: MW | None = ...,
        bind_info: mw_bind_info | None = ...,
    ) -> None: ...

@disjoint_base
class recv_wr(_Struct):
    """A receive work request for QP.post_recv() and SRQ.post_recv()."""
    wr_id: int
    @property
    def sg_list(self) -> sge | list[sge] | None: ...
    @sg_list.setter
    def sg_list(self, value: sge | Sequence[sge] | None) -> None: ...
    next: recv_wr | None
    def __init__(
        self, *,
        wr_id: int = ...,
        sg_list: sge | Sequence[sge] | None = ...,
        next: recv_wr | None = ...,
    ) -> None: ...

@disjoint_base
class wc(_Struct):
    """A work completion, from CQ.poll()."""
    wr_id: int
    status: int
    opcode: int
    vendor_err: int
    byte_len: int
    imm_data: int
    invalidated_rkey: int
    qp_num: int
    src_qp: int
    wc_flags: int
    pkey_index: int
    slid: int
    sl: int
    dlid_path_bits: int
    def __init__(
        self, *,
        wr_id: int = ...,
        status: int = ...,
        opcode: int = ...,
        vendor_err: int = ...,
        byte_len: int = ...,
        imm_data: int = ...,
        invalidated_rkey: int = ...,
        qp_num: int = ...,
        src_qp: int = ...,
        wc_flags: int = ...,
        pkey_index: int = ...,
        slid: int = ...,
        sl: int = ...,
        dlid_path_bits: int = ...,
    ) -> None: ...

@disjoint_base
class async_event(_Struct):
    """An asynchronous event, from Context.get_async_event()."""
    event_type: int
    element: QP | CQ | SRQ | int | None
    obj: QP | CQ | SRQ | Device | EndPort | int | None
    def __init__(
        self, *,
        event_type: int = ...,
        element: QP | CQ | SRQ | int | None = ...,
        obj: QP | CQ | SRQ | Device | EndPort | int | None = ...,
    ) -> None: ...

@disjoint_base
class mw_bind_info(_Struct):
    """What a memory window is bound to: QP.bind_mw() (type 1) or a send_wr
    with opcode IBV_WR_BIND_MW (type 2)."""
    mr: MR | None
    addr: int
    length: int
    mw_access_flags: int
    def __init__(
        self, *,
        mr: MR | None = ...,
        addr: int = ...,
        length: int = ...,
        mw_access_flags: int = ...,
    ) -> None: ...

# The IBV_* constants of csrc/constants.inc.
IBV_ACCESS_HUGETLB: int
IBV_ACCESS_LOCAL_WRITE: int
IBV_ACCESS_MW_BIND: int
IBV_ACCESS_ON_DEMAND: int
IBV_ACCESS_RELAXED_ORDERING: int
IBV_ACCESS_REMOTE_ATOMIC: int
IBV_ACCESS_REMOTE_READ: int
IBV_ACCESS_REMOTE_WRITE: int
IBV_ACCESS_ZERO_BASED: int
IBV_ATOMIC_GLOB: int
IBV_ATOMIC_HCA: int
IBV_ATOMIC_NONE: int
IBV_CQ_ATTR_MODERATE: int
IBV_CQ_INIT_ATTR_MASK_FLAGS: int
IBV_CQ_INIT_ATTR_MASK_PD: int
IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: int
IBV_CREATE_CQ_ATTR_SINGLE_THREADED: int
IBV_CREATE_CQ_SUP_WC_FLAGS: int
IBV_DEVICE_AUTO_PATH_MIG: int
IBV_DEVICE_BAD_PKEY_CNTR: int
IBV_DEVICE_BAD_QKEY_CNTR: int
IBV_DEVICE_CHANGE_PHY_PORT: int
IBV_DEVICE_CURR_QP_STATE_MOD: int
IBV_DEVICE_INIT_TYPE: int
IBV_DEVICE_MANAGED_FLOW_STEERING: int
IBV_DEVICE_MEM_MGT_EXTENSIONS: int
IBV_DEVICE_MEM_WINDOW: int
IBV_DEVICE_MEM_WINDOW_TYPE_2A: int
IBV_DEVICE_MEM_WINDOW_TYPE_2B: int
IBV_DEVICE_N_NOTIFY_CQ: int
IBV_DEVICE_PORT_ACTIVE_EVENT: int
IBV_DEVICE_RAW_IP_CSUM: int
IBV_DEVICE_RAW_MULTI: int
IBV_DEVICE_RC_IP_CSUM: int
IBV_DEVICE_RC_RNR_NAK_GEN: int
IBV_DEVICE_RESIZE_MAX_WR: int
IBV_DEVICE_SHUTDOWN_PORT: int
IBV_DEVICE_SRQ_RESIZE: int
IBV_DEVICE_SYS_IMAGE_GUID: int
IBV_DEVICE_UD_AV_PORT_ENFORCE: int
IBV_DEVICE_UD_IP_CSUM: int
IBV_DEVICE_XRC: int
IBV_DM_MASK_HANDLE: int
IBV_EVENT_CLIENT_REREGISTER: int
IBV_EVENT_COMM_EST: int
IBV_EVENT_CQ_ERR: int
IBV_EVENT_DEVICE_FATAL: int
IBV_EVENT_GID_CHANGE: int
IBV_EVENT_LID_CHANGE: int
IBV_EVENT_PATH_MIG: int
IBV_EVENT_PATH_MIG_ERR: int
IBV_EVENT_PKEY_CHANGE: int
IBV_EVENT_PORT_ACTIVE: int
IBV_EVENT_PORT_ERR: int
IBV_EVENT_QP_ACCESS_ERR: int
IBV_EVENT_QP_FATAL: int
IBV_EVENT_QP_LAST_WQE_REACHED: int
IBV_EVENT_QP_REQ_ERR: int
IBV_EVENT_SM_CHANGE: int
IBV_EVENT_SQ_DRAINED: int
IBV_EVENT_SRQ_ERR: int
IBV_EVENT_SRQ_LIMIT_REACHED: int
IBV_EVENT_WQ_FATAL: int
IBV_FLOW_ATTR_ALL_DEFAULT: int
IBV_FLOW_ATTR_FLAGS_DONT_TRAP: int
IBV_FLOW_ATTR_FLAGS_EGRESS: int
IBV_FLOW_ATTR_MC_DEFAULT: int
IBV_FLOW_ATTR_NORMAL: int
IBV_FLOW_ATTR_SNIFFER: int
IBV_FORK_DISABLED: int
IBV_FORK_ENABLED: int
IBV_FORK_UNNEEDED: int
IBV_GID_TYPE_IB: int
IBV_GID_TYPE_ROCE_V1: int
IBV_GID_TYPE_ROCE_V2: int
IBV_LINK_LAYER_ETHERNET: int
IBV_LINK_LAYER_INFINIBAND: int
IBV_LINK_LAYER_UNSPECIFIED: int
IBV_MIG_ARMED: int
IBV_MIG_MIGRATED: int
IBV_MIG_REARM: int
IBV_MTU_1024: int
IBV_MTU_2048: int
IBV_MTU_256: int
IBV_MTU_4096: int
IBV_MTU_512: int
IBV_MW_TYPE_1: int
IBV_MW_TYPE_2: int
IBV_NODE_CA: int
IBV_NODE_RNIC: int
IBV_NODE_ROUTER: int
IBV_NODE_SWITCH: int
IBV_NODE_UNKNOWN: int
IBV_NODE_UNSPECIFIED: int
IBV_NODE_USNIC: int
IBV_NODE_USNIC_UDP: int
IBV_ODP_SUPPORT: int
IBV_ODP_SUPPORT_ATOMIC: int
IBV_ODP_SUPPORT_IMPLICIT: int
IBV_ODP_SUPPORT_READ: int
IBV_ODP_SUPPORT_RECV: int
IBV_ODP_SUPPORT_SEND: int
IBV_ODP_SUPPORT_SRQ_RECV: int
IBV_ODP_SUPPORT_WRITE: int
IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP: int
IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP: int
IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP: int
IBV_PORT_ACTIVE: int
IBV_PORT_ACTIVE_DEFER: int
IBV_PORT_ARMED: int
IBV_PORT_AUTO_MIGR_SUP: int
IBV_PORT_BOOT_MGMT_SUP: int
IBV_PORT_CAP_MASK2_SUP: int
IBV_PORT_CAP_MASK_NOTICE_SUP: int
IBV_PORT_CLIENT_REG_SUP: int
IBV_PORT_CM_SUP: int
IBV_PORT_DEVICE_MGMT_SUP: int
IBV_PORT_DOWN: int
IBV_PORT_DR_NOTICE_SUP: int
IBV_PORT_EXTENDED_SPEEDS_SUP: int
IBV_PORT_INFO_EXT_SUP: int
IBV_PORT_INIT: int
IBV_PORT_IP_BASED_GIDS: int
IBV_PORT_LED_INFO_SUP: int
IBV_PORT_LINK_LATENCY_SUP: int
IBV_PORT_LINK_SPEED_HDR_SUP: int
IBV_PORT_LINK_SPEED_NDR_SUP: int
IBV_PORT_LINK_WIDTH_2X_SUP: int
IBV_PORT_MKEY_NVRAM: int
IBV_PORT_NOP: int
IBV_PORT_NOTICE_SUP: int
IBV_PORT_OPT_IPD_SUP: int
IBV_PORT_PKEY_NVRAM: int
IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP: int
IBV_PORT_REINIT_SUP: int
IBV_PORT_SET_NODE_DESC_SUP: int
IBV_PORT_SL_MAP_SUP: int
IBV_PORT_SM: int
IBV_PORT_SNMP_TUNNEL_SUP: int
IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP: int
IBV_PORT_SYS_IMAGE_GUID_SUP: int
IBV_PORT_TRAP_SUP: int
IBV_PORT_VENDOR_CLASS_SUP: int
IBV_PORT_VIRT_SUP: int
IBV_QPS_ERR: int
IBV_QPS_INIT: int
IBV_QPS_RESET: int
IBV_QPS_RTR: int
IBV_QPS_RTS: int
IBV_QPS_SQD: int
IBV_QPS_SQE: int
IBV_QPS_UNKNOWN: int
IBV_QPT_DRIVER: int
IBV_QPT_RAW_PACKET: int
IBV_QPT_RC: int
IBV_QPT_UC: int
IBV_QPT_UD: int
IBV_QPT_XRC_RECV: int
IBV_QPT_XRC_SEND: int
IBV_QP_ACCESS_FLAGS: int
IBV_QP_ALT_PATH: int
IBV_QP_AV: int
IBV_QP_CAP: int
IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: int
IBV_QP_CREATE_CVLAN_STRIPPING: int
IBV_QP_CREATE_PCI_WRITE_END_PADDING: int
IBV_QP_CREATE_SCATTER_FCS: int
IBV_QP_CREATE_SOURCE_QPN: int
IBV_QP_CUR_STATE: int
IBV_QP_DEST_QPN: int
IBV_QP_EN_SQD_ASYNC_NOTIFY: int
IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: int
IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: int
IBV_QP_EX_WITH_ATOMIC_WRITE: int
IBV_QP_EX_WITH_BIND_MW: int
IBV_QP_EX_WITH_LOCAL_INV: int
IBV_QP_EX_WITH_RDMA_READ: int
IBV_QP_EX_WITH_RDMA_WRITE: int
IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: int
IBV_QP_EX_WITH_SEND: int
IBV_QP_EX_WITH_SEND_WITH_IMM: int
IBV_QP_EX_WITH_SEND_WITH_INV: int
IBV_QP_EX_WITH_TSO: int
IBV_QP_INIT_ATTR_CREATE_FLAGS: int
IBV_QP_INIT_ATTR_IND_TABLE: int
IBV_QP_INIT_ATTR_MAX_TSO_HEADER: int
IBV_QP_INIT_ATTR_PD: int
IBV_QP_INIT_ATTR_RX_HASH: int
IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: int
IBV_QP_INIT_ATTR_XRCD: int
IBV_QP_MAX_DEST_RD_ATOMIC: int
IBV_QP_MAX_QP_RD_ATOMIC: int
IBV_QP_MIN_RNR_TIMER: int
IBV_QP_OPEN_ATTR_CONTEXT: int
IBV_QP_OPEN_ATTR_NUM: int
IBV_QP_OPEN_ATTR_TYPE: int
IBV_QP_OPEN_ATTR_XRCD: int
IBV_QP_PATH_MIG_STATE: int
IBV_QP_PATH_MTU: int
IBV_QP_PKEY_INDEX: int
IBV_QP_PORT: int
IBV_QP_QKEY: int
IBV_QP_RATE_LIMIT: int
IBV_QP_RETRY_CNT: int
IBV_QP_RNR_RETRY: int
IBV_QP_RQ_PSN: int
IBV_QP_SQ_PSN: int
IBV_QP_STATE: int
IBV_QP_TIMEOUT: int
IBV_RATE_100_GBPS: int
IBV_RATE_10_GBPS: int
IBV_RATE_112_GBPS: int
IBV_RATE_1200_GBPS: int
IBV_RATE_120_GBPS: int
IBV_RATE_14_GBPS: int
IBV_RATE_168_GBPS: int
IBV_RATE_200_GBPS: int
IBV_RATE_20_GBPS: int
IBV_RATE_25_GBPS: int
IBV_RATE_28_GBPS: int
IBV_RATE_2_5_GBPS: int
IBV_RATE_300_GBPS: int
IBV_RATE_30_GBPS: int
IBV_RATE_400_GBPS: int
IBV_RATE_40_GBPS: int
IBV_RATE_50_GBPS: int
IBV_RATE_56_GBPS: int
IBV_RATE_5_GBPS: int
IBV_RATE_600_GBPS: int
IBV_RATE_60_GBPS: int
IBV_RATE_800_GBPS: int
IBV_RATE_80_GBPS: int
IBV_RATE_MAX: int
IBV_RAW_PACKET_CAP_CVLAN_STRIPPING: int
IBV_RAW_PACKET_CAP_DELAY_DROP: int
IBV_RAW_PACKET_CAP_IP_CSUM: int
IBV_RAW_PACKET_CAP_SCATTER_FCS: int
IBV_READ_COUNTERS_ATTR_PREFER_CACHED: int
IBV_REREG_MR_CHANGE_ACCESS: int
IBV_REREG_MR_CHANGE_PD: int
IBV_REREG_MR_CHANGE_TRANSLATION: int
IBV_REREG_MR_ERR_CMD: int
IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: int
IBV_REREG_MR_ERR_DONT_FORK_NEW: int
IBV_REREG_MR_ERR_DO_FORK_OLD: int
IBV_REREG_MR_ERR_INPUT: int
IBV_REREG_MR_FLAGS_SUPPORTED: int
IBV_SEND_FENCE: int
IBV_SEND_INLINE: int
IBV_SEND_IP_CSUM: int
IBV_SEND_SIGNALED: int
IBV_SEND_SOLICITED: int
IBV_SRQT_BASIC: int
IBV_SRQT_TM: int
IBV_SRQT_XRC: int
IBV_SRQ_INIT_ATTR_CQ: int
IBV_SRQ_INIT_ATTR_PD: int
IBV_SRQ_INIT_ATTR_TM: int
IBV_SRQ_INIT_ATTR_TYPE: int
IBV_SRQ_INIT_ATTR_XRCD: int
IBV_SRQ_LIMIT: int
IBV_SRQ_MAX_WR: int
IBV_SYSFS_NAME_MAX: int
IBV_SYSFS_PATH_MAX: int
IBV_TRANSPORT_IB: int
IBV_TRANSPORT_IWARP: int
IBV_TRANSPORT_UNKNOWN: int
IBV_TRANSPORT_UNSPECIFIED: int
IBV_TRANSPORT_USNIC: int
IBV_TRANSPORT_USNIC_UDP: int
IBV_VALUES_MASK_RAW_CLOCK: int
IBV_WC_ATOMIC_WRITE: int
IBV_WC_BAD_RESP_ERR: int
IBV_WC_BIND_MW: int
IBV_WC_COMP_SWAP: int
IBV_WC_DRIVER1: int
IBV_WC_DRIVER2: int
IBV_WC_DRIVER3: int
IBV_WC_EX_WITH_BYTE_LEN: int
IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: int
IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: int
IBV_WC_EX_WITH_CVLAN: int
IBV_WC_EX_WITH_DLID_PATH_BITS: int
IBV_WC_EX_WITH_FLOW_TAG: int
IBV_WC_EX_WITH_IMM: int
IBV_WC_EX_WITH_QP_NUM: int
IBV_WC_EX_WITH_SL: int
IBV_WC_EX_WITH_SLID: int
IBV_WC_EX_WITH_SRC_QP: int
IBV_WC_EX_WITH_TM_INFO: int
IBV_WC_FATAL_ERR: int
IBV_WC_FETCH_ADD: int
IBV_WC_GENERAL_ERR: int
IBV_WC_GRH: int
IBV_WC_INV_EECN_ERR: int
IBV_WC_INV_EEC_STATE_ERR: int
IBV_WC_IP_CSUM_OK: int
IBV_WC_IP_CSUM_OK_SHIFT: int
IBV_WC_LOCAL_INV: int
IBV_WC_LOC_ACCESS_ERR: int
IBV_WC_LOC_EEC_OP_ERR: int
IBV_WC_LOC_LEN_ERR: int
IBV_WC_LOC_PROT_ERR: int
IBV_WC_LOC_QP_OP_ERR: int
IBV_WC_LOC_RDD_VIOL_ERR: int
IBV_WC_MW_BIND_ERR: int
IBV_WC_RDMA_READ: int
IBV_WC_RDMA_WRITE: int
IBV_WC_RECV: int
IBV_WC_RECV_RDMA_WITH_IMM: int
IBV_WC_REM_ABORT_ERR: int
IBV_WC_REM_ACCESS_ERR: int
IBV_WC_REM_INV_RD_REQ_ERR: int
IBV_WC_REM_INV_REQ_ERR: int
IBV_WC_REM_OP_ERR: int
IBV_WC_RESP_TIMEOUT_ERR: int
IBV_WC_RETRY_EXC_ERR: int
IBV_WC_RNR_RETRY_EXC_ERR: int
IBV_WC_SEND: int
IBV_WC_STANDARD_FLAGS: int
IBV_WC_SUCCESS: int
IBV_WC_TM_ADD: int
IBV_WC_TM_DATA_VALID: int
IBV_WC_TM_DEL: int
IBV_WC_TM_ERR: int
IBV_WC_TM_MATCH: int
IBV_WC_TM_NO_TAG: int
IBV_WC_TM_RECV: int
IBV_WC_TM_RNDV_INCOMPLETE: int
IBV_WC_TM_SYNC: int
IBV_WC_TM_SYNC_REQ: int
IBV_WC_TSO: int
IBV_WC_WITH_IMM: int
IBV_WC_WITH_INV: int
IBV_WC_WR_FLUSH_ERR: int
IBV_WQS_ERR: int
IBV_WQS_RDY: int
IBV_WQS_RESET: int
IBV_WQS_UNKNOWN: int
IBV_WQT_RQ: int
IBV_WR_ATOMIC_CMP_AND_SWP: int
IBV_WR_ATOMIC_FETCH_AND_ADD: int
IBV_WR_ATOMIC_WRITE: int
IBV_WR_BIND_MW: int
IBV_WR_DRIVER1: int
IBV_WR_LOCAL_INV: int
IBV_WR_RDMA_READ: int
IBV_WR_RDMA_WRITE: int
IBV_WR_RDMA_WRITE_WITH_IMM: int
IBV_WR_SEND: int
IBV_WR_SEND_WITH_IMM: int
IBV_WR_SEND_WITH_INV: int
IBV_WR_TAG_ADD: int
IBV_WR_TAG_DEL: int
IBV_WR_TAG_SYNC: int
IBV_WR_TSO: int
IBV_XRCD_INIT_ATTR_FD: int
IBV_XRCD_INIT_ATTR_OFLAGS: int
