"""``ibtool devinfo``: what ``ibv_devinfo`` prints, from rdma's own queries.

The output is ibv_devinfo's text, tab for tab (``name:<tabs>value`` lines,
ports indented under the device), so that the two can be compared line
by line; on the software fabric (ucx0) ``ibtool devinfo [-v]`` and
``python -m rdma.fabric exec -- ibv_devinfo [-v]`` differ only in the
values each process has of its own (node GUID, LID, GID).
"""
from __future__ import annotations

import argparse
from typing import Dict, List

import rdma
import rdma.ibverbs as ibv
from rdma.IBA import GID, GUID, GID_TYPE_ROCE_V2
from rdma.cli._common import Subparsers, add_provider

__all__ = ["add_parser", "devinfo"]

_TRANSPORT = {0: "InfiniBand", 1: "iWARP", 2: "usNIC", 3: "usNIC UDP",
              4: "unspecified"}
_PORT_STATE = {1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED",
               4: "PORT_ACTIVE"}
_PHYS_STATE = {1: "SLEEP", 2: "POLLING", 3: "DISABLED",
               4: "PORT_CONFIGURATION TRAINNING", 5: "LINK_UP",
               6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
_MTU = {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}
_ATOMIC = {0: "ATOMIC_NONE", 1: "ATOMIC_HCA", 2: "ATOMIC_GLOB"}
_LINK_LAYER = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
_WIDTH = {1: "1", 2: "4", 4: "8", 8: "12", 16: "2"}
_SPEED = {1: "2.5 Gbps", 2: "5.0 Gbps", 4: "10.0 Gbps", 8: "10.0 Gbps",
          16: "14.0 Gbps", 32: "25.0 Gbps", 64: "50.0 Gbps",
          128: "100.0 Gbps", 256: "200.0 Gbps"}
_VL = {1: "1", 2: "2", 3: "4", 4: "8", 5: "15"}


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``devinfo`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    add_provider(p)
    p.add_argument("-d", "--ib-dev", metavar="DEVICE",
                   help="use this device (default: all devices)")
    p.add_argument("-i", "--ib-port", metavar="PORT", type=int, default=0,
                   help="use this port of the device (default: all ports)")
    p.add_argument("-l", "--list", action="store_true",
                   help="print only the device names")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print all the attributes of the device")
    return p


def _line(indent: int, key: str, value: object) -> str:
    """``key:<tabs>value`` indented by *indent* tabs as ibv_devinfo prints
    it: the value at column 40 for a device's fields (one tab level),
    48 for a port's, always after at least one tab."""
    col = 40 if indent == 1 else 48
    width = indent * 8 + len(key) + 1
    tabs = max(1, (col - width + 7) // 8)
    return "\t" * indent + key + ":" + "\t" * tabs + str(value)


def _fabric_extended_lines() -> List[str]:
    """The extended part of ``ibv_devinfo -v`` (what it reads with
    ibv_query_device_ex, then ``num_comp_vectors``) for the software
    fabric: its query_device_ex reports explicit ODP (the fabric never
    pins memory) and none of the other extended capabilities (no
    timestamps, TSO, RSS, WQs, packet pacing or tag matching: all 0,
    csrc/fabric_verbs/device.c), and its contexts have one completion
    vector.  rdma's bindings have no ibv_query_device_ex, so for a verbs
    device this part is not printed."""
    caps = {"general": ["ODP_SUPPORT"],
            "rc": ["SEND", "RECV", "WRITE", "READ", "ATOMIC", "SRQ"],
            "uc": ["SEND", "RECV", "WRITE", "SRQ"],
            "ud": ["SEND", "RECV", "SRQ"],
            "xrc": []}
    lines = []
    for t, names in caps.items():
        lines.append(f"\t{t}_odp_caps:")
        if t != "general":
            names = ["SUPPORT_" + n for n in names]
        lines += ["\t" * 5 + n for n in names or ["NO SUPPORT"]]
    lines += ["\tcompletion_timestamp_mask not supported",
              "\tcore clock not supported",
              _line(1, "device_cap_flags_ex", "0x0"),
              "\ttso_caps:",
              "\t\tmax_tso:\t\t\t0",
              "\trss_caps:"]
    for key, tabs, value in (("max_rwq_indirection_tables", 3, "0"),
                             ("max_rwq_indirection_table_size", 3, "0"),
                             ("rx_hash_function", 4, "0x0"),
                             ("rx_hash_fields_mask", 4, "0x0")):
        lines.append(f"\t\t{key}:" + "\t" * tabs + value)
    lines += [_line(1, "max_wq_type_rq", 0),
              "\tpacket_pacing_caps:",
              "\t\tqp_rate_limit_min:\t0kbps",
              "\t\tqp_rate_limit_max:\t0kbps",
              "\ttag matching not supported",
              _line(1, "num_comp_vectors", 1)]
    return lines


def _flag_names(prefix: str, value: int) -> List[str]:
    names: Dict[int, str] = {}
    for n in dir(ibv):
        if n.startswith(prefix):
            v = getattr(ibv, n)
            if isinstance(v, int) and v and (v & (v - 1)) == 0:
                names.setdefault(v, n[len(prefix):])
    return [names.get(1 << b, f"unknown (bit {b})")
            for b in range(32) if value & (1 << b)]


def _gid_text(gid: GID, gid_type: int) -> str:
    if gid_type == GID_TYPE_ROCE_V2:
        return str(gid)
    raw = bytes(gid)
    return ":".join(f"{raw[i]:02x}{raw[i + 1]:02x}" for i in range(0, 16, 2))


def _print_device(dev: rdma.Device, port_filter: int, verbose: bool) -> int:
    out = print
    with dev.open() as ctx:
        a = ctx.query_device()
        if port_filter and port_filter > a.phys_port_cnt:
            raise ValueError(f"device {dev.name} has no port {port_filter}")
        out(f"hca_id:\t{dev.name}")
        out(_line(1, "transport",
                  f"{_TRANSPORT.get(dev.transport_type, 'invalid transport')} "
                  f"({dev.transport_type})"))
        if a.fw_ver:
            out(_line(1, "fw_ver", a.fw_ver))
        out(_line(1, "node_guid", GUID(a.node_guid)))
        out(_line(1, "sys_image_guid", GUID(a.sys_image_guid)))
        out(_line(1, "vendor_id", f"0x{a.vendor_id:04x}"))
        out(_line(1, "vendor_part_id", a.vendor_part_id))
        out(_line(1, "hw_ver", f"0x{a.hw_ver:X}"))
        out(_line(1, "phys_port_cnt", a.phys_port_cnt))
        if verbose:
            out(_line(1, "max_mr_size", f"0x{a.max_mr_size:x}"))
            out(_line(1, "page_size_cap", f"0x{a.page_size_cap:x}"))
            out(_line(1, "max_qp", a.max_qp))
            out(_line(1, "max_qp_wr", a.max_qp_wr))
            out(_line(1, "device_cap_flags", f"0x{a.device_cap_flags:08x}"))
            for name in _flag_names("IBV_DEVICE_", a.device_cap_flags):
                out("\t" * 5 + name)
            for f in ("max_sge", "max_sge_rd", "max_cq", "max_cqe", "max_mr",
                      "max_pd", "max_qp_rd_atom", "max_ee_rd_atom",
                      "max_res_rd_atom", "max_qp_init_rd_atom",
                      "max_ee_init_rd_atom"):
                out(_line(1, f, getattr(a, f)))
            cap = _ATOMIC.get(a.atomic_cap, "invalid atomic capability")
            out(_line(1, "atomic_cap", f"{cap} ({a.atomic_cap})"))
            for f in ("max_ee", "max_rdd", "max_mw", "max_raw_ipv6_qp",
                      "max_raw_ethy_qp", "max_mcast_grp",
                      "max_mcast_qp_attach", "max_total_mcast_qp_attach",
                      "max_ah", "max_fmr"):
                out(_line(1, f, getattr(a, f)))
            if a.max_fmr:
                out(_line(1, "max_map_per_fmr", a.max_map_per_fmr))
            out(_line(1, "max_srq", a.max_srq))
            if a.max_srq:
                out(_line(1, "max_srq_wr", a.max_srq_wr))
                out(_line(1, "max_srq_sge", a.max_srq_sge))
            out(_line(1, "max_pkeys", a.max_pkeys))
            out(_line(1, "local_ca_ack_delay", a.local_ca_ack_delay))
            if dev.provider == "ucx":
                for line in _fabric_extended_lines():
                    out(line)
        for port in range(1, a.phys_port_cnt + 1):
            if port_filter and port != port_filter:
                continue
            p = ctx.query_port(port)
            out(f"\t\tport:\t{port}")
            out(_line(3, "state",
                      f"{_PORT_STATE.get(p.state, 'invalid state')} "
                      f"({p.state})"))
            out(_line(3, "max_mtu",
                      f"{_MTU.get(p.max_mtu, 'invalid MTU')} ({p.max_mtu})"))
            out(_line(3, "active_mtu",
                      f"{_MTU.get(p.active_mtu, 'invalid MTU')} "
                      f"({p.active_mtu})"))
            out(_line(3, "sm_lid", p.sm_lid))
            out(_line(3, "port_lid", p.lid))
            out(_line(3, "port_lmc", f"0x{p.lmc:02x}"))
            out(_line(3, "link_layer",
                      _LINK_LAYER.get(p.link_layer, "Unknown")))
            if verbose:
                out(_line(3, "max_msg_sz", f"0x{p.max_msg_sz:x}"))
                out(_line(3, "port_cap_flags", f"0x{p.port_cap_flags:08x}"))
                out(_line(3, "port_cap_flags2", f"0x{p.port_cap_flags2:04x}"))
                out(_line(3, "max_vl_num",
                          f"{_VL.get(p.max_vl_num, 'invalid value')} "
                          f"({p.max_vl_num})"))
                out(_line(3, "bad_pkey_cntr", f"0x{p.bad_pkey_cntr:x}"))
                out(_line(3, "qkey_viol_cntr", f"0x{p.qkey_viol_cntr:x}"))
                out(_line(3, "sm_sl", p.sm_sl))
                out(_line(3, "pkey_tbl_len", p.pkey_tbl_len))
                out(_line(3, "gid_tbl_len", p.gid_tbl_len))
                out(_line(3, "subnet_timeout", p.subnet_timeout))
                out(_line(3, "init_type_reply", p.init_type_reply))
                out(_line(3, "active_width",
                          f"{_WIDTH.get(p.active_width, 'invalid width')}X "
                          f"({p.active_width})"))
                out(_line(3, "active_speed",
                          f"{_SPEED.get(p.active_speed, 'invalid speed')} "
                          f"({p.active_speed})"))
                if dev.transport_type == 0 and p.link_layer != 2:
                    phys = _PHYS_STATE.get(p.phys_state,
                                           "invalid physical state")
                    out(_line(3, "phys_state", f"{phys} ({p.phys_state})"))
                for i in range(p.gid_tbl_len):
                    e = ctx.query_gid_ex(port, i)
                    if not e.gid.guid:     # ibv_devinfo skips null GIDs
                        continue
                    suffix = ""
                    if p.link_layer == 2:
                        suffix = (", RoCE v2" if e.gid_type == GID_TYPE_ROCE_V2
                                  else ", RoCE v1")
                    out(_line(3, f"GID[{i:3d}]",
                              _gid_text(e.gid, e.gid_type) + suffix))
            out("")
    return 0


def devinfo(args: argparse.Namespace) -> int:
    """Run ``ibtool devinfo``; return the exit status."""
    # Verbs devices only, as ibv_devinfo (a umad-only CA has no verbs).
    devices = [d for d in rdma.get_devices(args.provider) if d.has_verbs]
    if args.list:
        print(f"{len(devices)} HCA{'s' if len(devices) != 1 else ''} found:")
        for d in devices:
            print(f"\t{d.name}")
        return 0
    if args.ib_dev:
        named = [d for d in devices if d.name == args.ib_dev]
        if not named:
            # ibv_devinfo's words.  A -d naming none of the devices there
            # are is bad usage (exit 2); no device at all is not.
            msg = f"IB device '{args.ib_dev}' wasn't found"
            raise ValueError(msg) if devices else rdma.RDMAError(msg)
        devices = named
    elif args.ib_port:
        raise ValueError("-i/--ib-port needs -d/--ib-dev")
    if not devices:
        print("No IB devices found")
        return 1
    rc = 0
    for d in devices:
        rc |= _print_device(d, args.ib_port, args.verbose)
    return rc
