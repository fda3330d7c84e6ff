"""A PerfMgt agent in user space, for
tests/vm/test_vmad_vm.py: rxe's kernel has no Performance Management
agent (it answers every PerfMgt Get with "unsupported"); this process
registers one through umad on a port, so that the PerfMgt requests
arriving at that port's QP1 come to it instead.

``python pma_listener.py DEVICE COUNT`` prints ``ready``, then for each
PerfMgt request ``got QPN GID ATTRIBUTE PORTSELECT`` (the sender's QP and
GID, the attribute's name, the PortSelect of a PortCounters request) and,
after COUNT requests or 30 s, ``done N``.  It answers a PortCounters Get
with the request's PortSelect and SymbolErrorCounter = MARK (0x42), so
the requester can tell this agent's answer from anything else; the reply
leaves from the GID index the request arrived on (RoCE needs a GRH from
a GID of the right address family).
"""
import sys
import time

import rdma
import rdma.IBA as IBA
import rdma.umad

MARK = 0x42


def main() -> int:
    device, count = sys.argv[1], int(sys.argv[2])
    u = rdma.umad.get_umad(rdma.get_end_port(device))
    u.register_server(IBA.MAD_PERFORMANCE, 1,
                      method_mask=1 << IBA.MAD_METHOD_GET)
    print("ready", flush=True)
    handled = 0
    deadline = time.monotonic() + 30
    while handled < count and time.monotonic() < deadline:
        got = u.recvfrom(deadline)
        if got is None:
            break
        buf, path = got
        if buf[1] != IBA.MAD_PERFORMANCE:
            continue
        handled += 1
        fmt, req = u.parse_request(buf, path)
        print(f"got {path.sqpn} {path.SGID} {type(req).__name__} "
              f"{getattr(req, 'portSelect', '-')}", flush=True)
        if isinstance(req, IBA.PMPortCounters):
            u.send_reply(fmt, IBA.PMPortCounters(
                portSelect=req.portSelect, symbolErrorCounter=MARK), path)
    print(f"done {handled}", flush=True)
    u.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
