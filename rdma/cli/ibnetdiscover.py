"""``ibtool ibnetdiscover``, ``ibswitches``, ``ibhosts``, ``ibrouters``
and ``ibnodes`` (the last four are aliases of this module in ``ibtool``'s
table): the subnet as :mod:`rdma.discovery` finds it (directed-route
SMPs, many in flight), printed as infiniband-diags prints it.

::

    ibtool ibnetdiscover [FILE]      # the topology file (ibsim reads it)
    ibtool ibswitches                # one line per switch
    ibtool ibhosts                   # one line per CA
    ibtool ibrouters                 # one line per router
    ibtool ibnodes                   # ibhosts, then ibswitches

Each takes ``--node-name-map FILE``: the names it gives node GUIDs are
printed instead of their descriptions (``ibnetdiscover`` as
infiniband-diags 44 does it: in switch lines and in the far end of each
link, not in a CA's or router's own line).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, List

from rdma import IBA
from rdma.cli._ibopts import (add_device_options, add_node_name_map,
                              add_sa_option, get_end_port,
                              load_node_name_map, node_name)
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "discover", "topology_lines", "ibnetdiscover",
           "ibswitches", "ibhosts", "ibrouters", "ibnodes"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``ibnetdiscover``, or one of its aliases in ``ibtool``'s
    table (``ibswitches``, ``ibhosts``, ``ibrouters``, ``ibnodes``: the
    same discovery, listed)."""
    p = subparsers.add_parser(name, help=help)
    if name != "ibnetdiscover":
        add_device_options(p)
        add_node_name_map(p)
        add_sa_option(p)
        return p
    p.add_argument("topology_file", nargs="?", default=None,
                   help="write the topology here (default: stdout)")
    g = p.add_mutually_exclusive_group()
    for short, long, what in (("-l", "--list", "every node"),
                              ("-H", "--Hca_list", "the CAs"),
                              ("-S", "--Switch_list", "the switches"),
                              ("-R", "--Router_list", "the routers")):
        g.add_argument(short, long, dest="list", action="append_const",
                       const=short[1], help=f"list {what}, one a line")
    g.add_argument("-p", "--ports", action="store_true",
                   help="a ports report: one line per port and its peer")
    p.add_argument("-f", "--full", action="store_true",
                   help="add each link's speed, width and VL capability "
                        "codes (s=, w=, v=)")
    add_device_options(p)
    add_node_name_map(p)
    add_sa_option(p)
    return p


def discover(args: argparse.Namespace) -> Any:
    """Discover the subnet from the end port ``args`` name (with
    ``--sa``: from the SA's NodeRecords, PortInfoRecords and LinkRecords);
    return ``(end_port, subnet)``."""
    import rdma.discovery
    import rdma.subnet
    import rdma.umad
    end_port = get_end_port(args)
    with rdma.umad.UMAD(end_port) as umad:
        sched = rdma.discovery.scheduler_class()(umad)
        sbn = rdma.subnet.Subnet()
        stuff = ["all_NodeInfo", "all_NodeDescription", "all_topology"]
        if getattr(args, "use_sa", False):
            stuff.append("all_PortInfo")        # the link rates
        rdma.discovery.load(sched, sbn, stuff,
                            sa=getattr(args, "use_sa", False))
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


def topology_lines(sbn: Any, end_port: Any, names: Any = None,
                   full: bool = False) -> List[str]:
    """The subnet as an ibnetdiscover topology file (switches first);
    *names* (node GUID to name, ``--node-name-map``) replaces the
    descriptions of switches and of the far ends of links."""
    def name(n: Any) -> str:
        return node_name(names, n.ninf.nodeGUID, n.desc)

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
                           f'# "{name(n)}" {_lid_info(n)}')
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
                if full and port.pinf is not None:
                    pi = port.pinf
                    rate += (f" s={pi.linkSpeedActive} "
                             f"w={pi.linkWidthActive} v={pi.VLCap}")
                if kind == "Switch":
                    out.append(f"[{idx}]\t{far}\t\t# \"{name(pn)}\" "
                               f"lid {pep.LID} {rate}")
                else:
                    ep = port.to_end_port()
                    lmc = ep.pinf.LMC if ep.pinf is not None else 0
                    out.append(f"[{idx}]({int(ep.portGUID):x}) \t{far}\t\t"
                               f"# lid {ep.LID} lmc {lmc} \"{name(pn)}\" "
                               f"lid {pep.LID} {rate}")
    out.append("")
    return out


def node_list(sbn: Any, kinds: List[str], names: Any = None) -> List[str]:
    """``ibnetdiscover -l`` (-H, -S, -R): one line per node of *kinds*
    (``CA``, ``Switch``, ``Router``), in that order."""
    word = {"CA": "Ca", "Switch": "Switch", "Router": "Router"}
    out = []
    for kind in kinds:
        for n in _nodes(sbn, kind):
            ni = n.ninf
            nm = node_name(names, ni.nodeGUID, n.desc)
            out.append(f"{word[kind]}\t : 0x{int(ni.nodeGUID):016x} ports "
                       f"{ni.numPorts} devid 0x{ni.deviceID:x} vendid "
                       f"0x{ni.vendorID:x} \"{nm}\"")
    return out


def _short_rate(pinf: Any) -> str:
    """``4x SDR`` (ibnetdiscover's ports report)."""
    rate = IBA.link_rate_str(pinf)
    return f"{rate[:-3]} {rate[-3:]}" if len(rate) > 3 else rate


def ports_report(sbn: Any, names: Any = None) -> List[str]:
    """``ibnetdiscover -p``: for every node, each port read (the highest
    number first) with its LID, GUID and rate, and its peer."""
    kinds = {"Switch": "SW", "CA": "CA", "Router": "RT"}

    def lid(port: Any) -> int:
        ep = port.to_end_port()
        return ep.LID or 0

    def guid(port: Any) -> int:
        ep = port.to_end_port()
        return int(ep.portGUID) if ep.portGUID is not None else 0

    out = []
    for n in sbn.iternodes():
        if n.ninf is None:
            continue
        nm = node_name(names, n.ninf.nodeGUID, n.desc)
        for i in range(n.ninf.numPorts, 0, -1):
            port = n.get_port_nc(i) if hasattr(n, "get_port_nc") else None
            if port is None or port.pinf is None:
                continue
            line = (f"{kinds[type(n).__name__]:>2} {lid(port):5d} {i:2d} "
                    f"0x{guid(port):016x} {_short_rate(port.pinf)}")
            peer = sbn.topology.get(port)
            if peer is not None and peer.parent.ninf is not None:
                pn = peer.parent
                pnm = node_name(names, pn.ninf.nodeGUID, pn.desc)
                line += (f" - {kinds[type(pn).__name__]:>2} {lid(peer):5d} "
                         f"{peer.port_id:2d} 0x{guid(peer):016x} "
                         f"( '{nm}' - '{pnm}' )")
            else:
                line += f"{'':36s}'{nm}'"
            out.append(line)
    return out


def ibnetdiscover(args: argparse.Namespace) -> int:
    """Run ``ibtool ibnetdiscover``; return the exit status."""
    names = load_node_name_map(args.node_name_map)
    end_port, sbn = discover(args)
    if args.ports:
        lines = ports_report(sbn, names)
    elif args.list:
        kinds = {"l": ["CA", "Switch", "Router"], "H": ["CA"],
                 "S": ["Switch"], "R": ["Router"]}[args.list[-1]]
        lines = node_list(sbn, kinds, names)
    else:
        lines = topology_lines(sbn, end_port, names, args.full)
    text = "\n".join(lines) + "\n" if lines else ""
    if args.topology_file:
        with open(args.topology_file, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _list_lines(sbn: Any, kind: str, names: Any) -> List[str]:
    """The lines ``ibswitches`` (*kind* ``Switch``), ``ibhosts``
    (``CA``) or ``ibrouters`` (``Router``) prints."""
    word = {"Switch": "Switch", "CA": "Ca", "Router": "Rt"}[kind]
    out = []
    for n in _nodes(sbn, kind):
        nm = node_name(names, n.ninf.nodeGUID, n.desc)
        line = (f"{word}\t: 0x{int(n.ninf.nodeGUID):016x} ports "
                f'{n.ninf.numPorts} "{nm}"')
        if kind == "Switch":
            line += f" {_lid_info(n)}"
        out.append(line)
    return out


def _list(args: argparse.Namespace, kinds: List[str]) -> int:
    names = load_node_name_map(args.node_name_map)
    _, sbn = discover(args)
    for kind in kinds:
        for line in _list_lines(sbn, kind, names):
            print(line)
    return 0


def ibswitches(args: argparse.Namespace) -> int:
    """Run ``ibtool ibswitches``; return the exit status."""
    return _list(args, ["Switch"])


def ibhosts(args: argparse.Namespace) -> int:
    """Run ``ibtool ibhosts``; return the exit status."""
    return _list(args, ["CA"])


def ibrouters(args: argparse.Namespace) -> int:
    """Run ``ibtool ibrouters``; return the exit status."""
    return _list(args, ["Router"])


def ibnodes(args: argparse.Namespace) -> int:
    """Run ``ibtool ibnodes`` (``ibhosts`` then ``ibswitches``, as
    infiniband-diags' script); return the exit status."""
    return _list(args, ["CA", "Switch"])
