"""``ibtool ibnetdiscover``, ``ibswitches`` and ``ibhosts``: the subnet
as :mod:`rdma.discovery` finds it (directed-route SMPs, many in flight),
printed as infiniband-diags prints it.

::

    ibtool ibnetdiscover [-o FILE]   # the topology file (ibsim reads it)
    ibtool ibswitches                # one line per switch
    ibtool ibhosts                   # one line per CA
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, List

from rdma import IBA
from rdma.cli._ibopts import add_device_options, get_end_port

__all__ = ["add_parsers", "discover", "topology_lines", "ibnetdiscover",
           "ibswitches", "ibhosts"]



def add_parsers(subparsers: Any) -> None:
    """Add ``ibnetdiscover``, ``ibswitches`` and ``ibhosts``."""
    p = subparsers.add_parser(
        "ibnetdiscover", help="discover the subnet and print its topology "
                              "file (like ibnetdiscover)")
    p.add_argument("topology_file", nargs="?", default=None,
                   help="write the topology here (default: stdout)")
    add_device_options(p)
    p.set_defaults(func=ibnetdiscover)
    for name, what in (("ibswitches", "switches"), ("ibhosts", "CAs")):
        p = subparsers.add_parser(
            name, help=f"list the {what} of the subnet (like {name})")
        add_device_options(p)
        p.set_defaults(func=ibswitches if name == "ibswitches" else ibhosts)


def discover(args: argparse.Namespace) -> Any:
    """Discover the subnet from the end port ``args`` name; return
    ``(end_port, subnet)``."""
    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        rdma.discovery.load(sched, sbn, ["all_NodeInfo",
                                         "all_NodeDescription",
                                         "all_topology"])
    for path, err in getattr(sbn, "errors", []):
        print(f"ibtool: warning: {path}: {err}", file=sys.stderr)
    return end_port, sbn


def _nodes(sbn: Any, kind: str) -> List[Any]:
    return [n for n in sbn.iternodes()
            if n.ninf is not None and type(n).__name__ == kind]


def _lid_info(node: Any) -> str:
    ep = node.ports[0] if node.ports else None
    lid = ep.LID if ep is not None else 0
    lmc = ep.pinf.LMC if ep is not None and ep.pinf is not None else 0
    return f"base port 0 lid {lid} lmc {lmc}"


def _rate(pinf: Any) -> str:
    return "" if pinf is None else IBA.link_rate_str(pinf)


def _name(node: Any) -> str:
    prefix = {"Switch": "S", "CA": "H", "Router": "R"}[type(node).__name__]
    return f'"{prefix}-{node.ninf.nodeGUID:016x}"'


def topology_lines(sbn: Any, end_port: Any) -> List[str]:
    """The subnet as an ibnetdiscover topology file (switches first)."""
    out = ["#", "# Topology file: generated on " +
           time.strftime("%a %b %e %H:%M:%S %Y"), "#",
           f"# Initiated from node {int(end_port.parent.node_guid):016x} "
           f"port {int(end_port.port_guid):016x}"]
    for kind in ("Switch", "CA", "Router"):
        for n in _nodes(sbn, kind):
            ni = n.ninf
            out += ["", f"vendid=0x{ni.vendorID:x}",
                    f"devid=0x{ni.deviceID:x}",
                    f"sysimgguid=0x{int(ni.systemImageGUID):x}"]
            if kind == "Switch":
                p0 = n.ports[0]
                out.append(f"switchguid=0x{int(ni.nodeGUID):x}"
                           f"({int(p0.portGUID):x})")
                out.append(f"Switch\t{ni.numPorts} {_name(n)}\t\t"
                           f'# "{n.desc}" {_lid_info(n)}')
            else:
                tag = "caguid" if kind == "CA" else "rtguid"
                word = "Ca" if kind == "CA" else "Rt"
                out.append(f"{tag}=0x{int(ni.nodeGUID):x}")
                out.append(f'{word}\t{ni.numPorts} {_name(n)}\t\t'
                           f'# "{n.desc}"')
            for port, idx in n.iterports():
                peer = sbn.topology.get(port)
                if peer is None or idx == 0:
                    continue
                pn, pidx = peer.parent, peer.port_id
                pep = peer.to_end_port()
                far = f"{_name(pn)}[{pidx}]"
                if type(pn).__name__ != "Switch":
                    far += f"({int(pep.portGUID):x}) "
                rate = _rate(port.pinf)
                if kind == "Switch":
                    out.append(f"[{idx}]\t{far}\t\t# \"{pn.desc}\" "
                               f"lid {pep.LID} {rate}")
                else:
                    ep = port.to_end_port()
                    lmc = ep.pinf.LMC if ep.pinf is not None else 0
                    out.append(f"[{idx}]({int(ep.portGUID):x}) \t{far}\t\t"
                               f"# lid {ep.LID} lmc {lmc} \"{pn.desc}\" "
                               f"lid {pep.LID} {rate}")
    out.append("")
    return out


def ibnetdiscover(args: argparse.Namespace) -> int:
    """Run ``ibtool ibnetdiscover``; return the exit status."""
    end_port, sbn = discover(args)
    text = "\n".join(topology_lines(sbn, end_port)) + "\n"
    if args.topology_file:
        with open(args.topology_file, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def ibswitches(args: argparse.Namespace) -> int:
    """Run ``ibtool ibswitches``; return the exit status."""
    _, sbn = discover(args)
    for n in _nodes(sbn, "Switch"):
        print(f"Switch\t: 0x{int(n.ninf.nodeGUID):016x} ports "
              f'{n.ninf.numPorts} "{n.desc}" {_lid_info(n)}')
    return 0


def ibhosts(args: argparse.Namespace) -> int:
    """Run ``ibtool ibhosts``; return the exit status."""
    _, sbn = discover(args)
    for n in _nodes(sbn, "CA"):
        print(f"Ca\t: 0x{int(n.ninf.nodeGUID):016x} ports "
              f'{n.ninf.numPorts} "{n.desc}"')
    return 0
