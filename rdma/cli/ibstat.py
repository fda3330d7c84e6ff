"""``ibtool ibstat``: the local InfiniBand CAs and ports, printed as
infiniband-diags' ``ibstat`` prints them, from libibumad's view
(``umad_get_ca``; on ibsim that is the simulated CA of rdma's ibsim
shim, :mod:`rdma.simnet`).

::

    ibtool ibstat               # every CA, every port
    ibtool ibstat -l            # CA names
    ibtool ibstat -p            # port GUIDs
    ibtool ibstat -s            # CAs without their ports
    ibtool ibstat ibsim0 1      # one port of one CA
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Tuple

from rdma.cli._ibopts import CmdError
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "ibstat", "format_ca", "format_port"]

#: PortInfo PortState names as ibstat prints them (IBA 14.2.5.6).
PORT_STATES = ("???", "Down", "Initializing", "Armed", "Active")
#: PortInfo PortPhysicalState names as ibstat prints them.
PHYS_STATES = ("No state change", "Sleep", "Polling", "Disabled",
               "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery",
               "PhyTest")


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibstat`` to ``ibtool``'s subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Show the local InfiniBand CAs and their ports as "
                    "infiniband-diags' ibstat does.")
    p.add_argument("ca_name", nargs="?", help="only this CA")
    p.add_argument("portnum", nargs="?", type=int, help="only this port")
    p.add_argument("-l", "--list_of_cas", action="store_true",
                   help="list the CA names")
    p.add_argument("-s", "--short", action="store_true",
                   help="the CAs without their ports")
    p.add_argument("-p", "--port_list", action="store_true",
                   help="list the port GUIDs")
    return p


def _name(table: Tuple[str, ...], value: int) -> str:
    return table[value] if 0 <= value < len(table) else "???"


def format_port(port: Dict[str, Any], indent: str = "\t\t") -> List[str]:
    """The lines ``ibstat`` prints for one port (a ``umad_get_ca`` port)."""
    return [f"{indent}State: {_name(PORT_STATES, port['state'])}",
            f"{indent}Physical state: "
            f"{_name(PHYS_STATES, port['phys_state'])}",
            f"{indent}Rate: {port['rate']}",
            f"{indent}Base lid: {port['lid']}",
            f"{indent}LMC: {port['lmc']}",
            f"{indent}SM lid: {port['sm_lid']}",
            f"{indent}Capability mask: 0x{port['capmask']:08x}",
            f"{indent}Port GUID: 0x{port['port_guid']:016x}",
            f"{indent}Link layer: {port['link_layer']}"]


def format_ca(ca: Dict[str, Any], ports: bool = True) -> List[str]:
    """The lines ``ibstat`` prints for one CA (a ``umad_get_ca`` dict)."""
    out = [f"CA '{ca['name']}'",
           f"\tCA type: {ca.get('ca_type', '')}",
           f"\tNumber of ports: {ca['numports']}",
           f"\tFirmware version: {ca.get('fw_ver', '')}",
           f"\tHardware version: {ca.get('hw_ver', '')}",
           f"\tNode GUID: 0x{ca['node_guid']:016x}",
           f"\tSystem image GUID: 0x{ca['system_guid']:016x}"]
    if ports:
        for p in ca["ports"]:
            out.append(f"\tPort {p['port_id']}:")
            out.extend(format_port(p))
    return out


def _cas(names: List[str]) -> List[Dict[str, Any]]:
    from rdma import _umad
    return [dict(_umad.get_ca(n)) for n in names]


def _ca_names() -> List[str]:
    """The CAs libibumad can open (it names a default CA, e.g. mthca0,
    where the kernel has no umad at all: that one is left out)."""
    import errno
    from rdma import _umad
    from rdma._errors import SysError
    names = []
    for n in _umad.get_ca_names():
        try:
            _umad.get_ca(n)
        except SysError as e:
            if e.errno not in (errno.ENOENT, errno.ENODEV):
                raise
            continue
        names.append(n)
    return names


def ibstat(args: argparse.Namespace) -> int:
    """Run ``ibtool ibstat``; return the exit status."""
    names = _ca_names()
    if args.list_of_cas:
        for n in names:
            print(n)
        return 0
    if args.ca_name is not None:
        if args.ca_name not in names:
            raise CmdError(f"no CA called {args.ca_name!r} (CAs: "
                           f"{', '.join(names) or 'none'})")
        names = [args.ca_name]
    if not names:
        raise CmdError("no InfiniBand CA (no umad device; on ibsim, "
                       "preload rdma's ibsim shim, see rdma.simnet)")
    cas = _cas(names)
    if args.port_list:
        for ca in cas:
            for p in ca["ports"]:
                print(f"0x{p['port_guid']:016x}")
        return 0
    if args.portnum is not None:
        (ca,) = cas
        ports = [p for p in ca["ports"] if p["port_id"] == args.portnum]
        if not ports:
            raise CmdError(f"{ca['name']} has no port {args.portnum}")
        print(f"CA: '{ca['name']}'")
        print(f"Port {args.portnum}:")
        print("\n".join(format_port(ports[0], indent="")))
        return 0
    for ca in cas:
        print("\n".join(format_ca(ca, ports=not args.short)))
    return 0
