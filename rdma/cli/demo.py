"""``rdma demo``: find RDMA devices, open the first active port and show it."""
from __future__ import annotations

import argparse

import rdma
from rdma.IBA import GID_TYPE_ROCE_V2

_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE"}
_MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def demo(args: argparse.Namespace) -> int:
    devices = rdma.get_devices(args.provider)
    if not devices:
        raise rdma.RDMAError("no RDMA devices found")
    print(f"Found {len(devices)} RDMA device(s):")
    for d in devices:
        print(f"  {d.name:<10} provider={d.provider:<6} "
              f"node_guid={d.node_guid}  {d.transport_name}")
        for p in d.end_ports:
            gids = [f"[{i}] {g}{' (RoCE v2)' if t == GID_TYPE_ROCE_V2 else ''}"
                    for i, (g, t) in enumerate(zip(p.gids, p.gid_types)) if g]
            print(f"    port {p.port_id}: {_STATES.get(p.state, p.state)}, "
                  f"{p.link_layer}, lid {p.lid}, "
                  f"MTU {_MTU.get(p.attr.active_mtu, '?')}")
            for g in gids:
                print(f"      GID {g}")
    end_port = rdma.get_end_port(provider=args.provider)
    with rdma.get_verbs(end_port) as ctx:
        a = ctx.query_device()
        print(f"\nOpened {end_port} with rdma.get_verbs(): {ctx!r}")
        print(f"  max_qp={a.max_qp} max_cqe={a.max_cqe} "
              f"max_mr_size={a.max_mr_size:#x} max_sge={a.max_sge} "
              f"atomic_cap={a.atomic_cap}")
    return 0
