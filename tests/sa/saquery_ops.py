"""SA registrations for ``test_saquery_diags``, run as a shimmed script
on one node (``fabric.run([python, "saquery_ops.py", OP, ...], node)``);
each prints one JSON value.

- ``subscribe TRAP [vendor]``: an InformInfo Set subscribing the local
  port to trap TRAP (generic; with ``vendor`` a vendor subscription),
  which opensm keeps as an InformInfoRecord.  Prints the SA's answer.
"""
import json
import sys
from typing import Any, Dict, List

import rdma
import rdma.IBA as IBA


def subscribe(u: Any, trap: str, vendor: str = "") -> Dict[str, Any]:
    ii = IBA.MADInformInfo()
    ii.GID = IBA.GID("::")
    ii.LIDRangeBegin = 0xFFFF
    ii.isGeneric = 0 if vendor else 1
    ii.subscribe = 1
    ii.type = 0xFFFF
    ii.trapNumber = int(trap, 0)
    ii.QPN = 1
    ii.respTimeValue = 18
    ii.producerType = 0x1234 if vendor else 0xFFFFFF
    return u.SubnAdmSet(ii).to_dict()


def main(argv: List[str]) -> int:
    ep = rdma.get_end_port()
    with rdma.get_umad(ep) as u:
        print(json.dumps(globals()[argv[0]](u, *argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
