"""Resolve a UD destination through the Subnet Administrator.

Usage: python examples/sa_resolve_path.py DGID [END_PORT]

Asks the SA for a reversible PathRecord from this port to DGID, prints the
path (LIDs, SL, MTU, rate, packet lifetime, P_Key) and the address handle
attributes a UD QP would use to send there.  Needs an InfiniBand port with
a subnet manager (or ibsim + opensm with rdma's ibsim shim preloaded; see
docs/sa.rst).
"""
import sys

import rdma
import rdma.path
from rdma._mad import lifetime_to_us, mtu_to_bytes, rate_to_gbps
from rdma.IBA import GID


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    # The default end port is the InfiniBand (or ibsim) port, not ucx0.
    end_port = rdma.get_end_port(argv[2] if len(argv) > 2 else None)
    path = rdma.path.IBPath(end_port, DGID=GID(argv[1]))
    with rdma.get_umad(end_port) as umad:
        rdma.path.resolve_path(umad, path, reversible=True)
    print(f"path from {end_port} ({path.SGID}) to {path.DGID}:")
    print(f"  SLID {path.SLID} -> DLID {path.DLID}, SL {path.SL}, "
          f"P_Key {path.pkey:#06x}")
    print(f"  MTU {mtu_to_bytes(path.MTU)} ({path.MTU}), rate "
          f"{rate_to_gbps(path.rate)} Gb/s ({path.rate}), packet lifetime "
          f"{lifetime_to_us(path.packet_life_time):.0f} us "
          f"({path.packet_life_time})")
    print(f"  ah_attr {path.ah_attr()}")
    # With verbs: pd.ah(path) makes the address handle of the path.
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
