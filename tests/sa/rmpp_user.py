"""One SA GetTable with RMPP joined in user space (run shimmed, one shot:
the shim keeps one agent table per process, so this UMAD must be the
process's only one).  ``python rmpp_user.py ATTR`` prints JSON: the
records and the number of DATA segments acknowledged."""
import json
import sys

import rdma.IBA as IBA
import rdma.umad


def main() -> int:
    with rdma.umad.get_umad() as u:
        u.rmpp_in_user = True
        acks = []
        send = u.sendto

        def counting(buf, path, agent_id=None, timeout_ms=0):
            if len(buf) > 25 and buf[1] == 3 and buf[25] == 2:
                acks.append(int.from_bytes(bytes(buf[28:32]), "big"))
            return send(buf, path, agent_id, timeout_ms)
        u.sendto = counting
        recs = u.SubnAdmGetTable(getattr(IBA, sys.argv[1]))
        agents = [k for k in u._agents if k[0] == IBA.MAD_SUBNET_ADMIN]
    json.dump({"records": [r.to_dict() for r in recs], "acks": acks,
               "agents": agents}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
