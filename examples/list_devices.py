#!/usr/bin/env python3
"""List every RDMA device and port with its GIDs, the python-rdma way."""
import rdma
import rdma.ibverbs as ibv

STATES = {ibv.IBV_PORT_DOWN: "DOWN", ibv.IBV_PORT_INIT: "INIT",
          ibv.IBV_PORT_ARMED: "ARMED", ibv.IBV_PORT_ACTIVE: "ACTIVE"}


def main():
    devices = rdma.get_devices()
    if not devices:
        print("no RDMA devices (try: python -m rdma.testvm -- python "
              "examples/list_devices.py)")
        return 1
    for dev in devices:
        print(f"{dev.name} ({dev.provider}) node GUID {dev.node_guid}"
              f"{', umad' if dev.has_umad else ''}")
        for port in dev.end_ports:
            print(f"  {port}: {STATES.get(port.state, port.state)} "
                  f"{port.link_layer} LID {port.lid}")
            for i, gid in enumerate(port.gids):
                if gid:
                    print(f"    GID[{i}] {gid}")
        if not dev.has_verbs:         # a CA only libibumad reports (ibsim)
            continue
        with rdma.get_verbs(dev) as ctx:
            attr = ctx.query_device()
            print(f"  max_qp {attr.max_qp}, max_cqe {attr.max_cqe}, "
                  f"max_mr_size {attr.max_mr_size:#x}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
