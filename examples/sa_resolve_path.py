"""Resolve a UD destination through the Subnet Administrator.

Usage: python examples/sa_resolve_path.py DGID [END_PORT]

Asks the SA for a reversible PathRecord from this port to DGID, prints the
path (LIDs, SL, MTU, rate, packet lifetime, P_Key) and the address handle
attributes a UD QP would use to send there.  Needs an InfiniBand port with
a subnet manager (or ibsim + opensm with the umad2sim shim preloaded; see
docs/sa.rst).
"""
import sys

import rdma.sa
import rdma.umad
from rdma._mad import lifetime_to_us, mtu_to_bytes, rate_to_gbps
from rdma.IBA import GID


class Path:
    """The IBPath attributes resolve_path fills (rdma.path.IBPath will
    replace this)."""

    def __init__(self, end_port, DGID):
        self.end_port = end_port
        self.DGID = GID(DGID)
        self.SGID = self.SLID = self.DLID = None
        self.SL = self.pkey = self.MTU = self.rate = None
        self.packet_life_time = self.flow_label = None
        self.hop_limit = self.traffic_class = None
        self.has_grh = False


def ah_attr(path):
    """The ibv_ah_attr fields of a UD address handle for ``path``."""
    attr = {"dlid": path.DLID, "sl": path.SL, "src_path_bits": 0,
            "static_rate": path.rate, "is_global": int(path.has_grh),
            "port_num": path.end_port.port_id}
    if path.has_grh:
        attr["grh"] = {"dgid": str(path.DGID), "flow_label": path.flow_label,
                       "hop_limit": path.hop_limit,
                       "traffic_class": path.traffic_class,
                       "sgid_index": 0}
    return attr


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    end_port = rdma.umad.get_end_port(argv[2] if len(argv) > 2 else None)
    path = Path(end_port, argv[1])
    with rdma.umad.get_umad(end_port) as umad:
        rdma.sa.resolve_path(umad, path, reversible=True)
    print(f"path from {end_port} ({path.SGID}) to {path.DGID}:")
    print(f"  SLID {path.SLID} -> DLID {path.DLID}, SL {path.SL}, "
          f"P_Key {path.pkey:#06x}")
    print(f"  MTU {mtu_to_bytes(path.MTU)} ({path.MTU}), rate "
          f"{rate_to_gbps(path.rate)} Gb/s ({path.rate}), packet lifetime "
          f"{lifetime_to_us(path.packet_life_time):.0f} us "
          f"({path.packet_life_time})")
    print(f"  ah_attr {ah_attr(path)}")
    # With verbs: pd.ah(ibv.ah_attr(**ah_attr(path))) sends to the QP.
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
