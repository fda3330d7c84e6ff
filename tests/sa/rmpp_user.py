"""One SA GetTable with RMPP joined in user space (run shimmed, one shot:
the shim keeps one agent table per process, so this UMAD must be the
process's only one).  ``python rmpp_user.py ATTR`` prints JSON: the
records and the number of DATA segments acknowledged.

``python rmpp_user.py ATTR LID DEADLINE MAX_BYTES`` asks the node of LID
instead of the SA, with ``rmpp_deadline`` and ``rmpp_max_bytes`` set, and
prints the error the call ended with and how long it took."""
import json
import sys
import time

import rdma.IBA as IBA
import rdma.path
import rdma.umad


def hostile(attr: str, lid: int, deadline: float, max_bytes: int) -> int:
    with rdma.umad.get_umad() as u:
        u.rmpp_in_user = True
        u.rmpp_deadline = deadline
        u.rmpp_max_bytes = max_bytes
        path = rdma.path.IBPath(u.end_port, DLID=lid, dqpn=1,
                                qkey=IBA.IB_DEFAULT_QP1_QKEY,
                                SLID=u.end_port.lid)
        t0 = time.monotonic()
        try:
            u.SubnAdmGetTable(getattr(IBA, attr), path=path)
            out = {"error": None}
        except IBA.MADError as e:
            out = {"error": type(e).__name__, "msg": str(e)}
        out["seconds"] = time.monotonic() - t0
    json.dump(out, sys.stdout)
    return 0


def main() -> int:
    if len(sys.argv) > 2:
        return hostile(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                       int(sys.argv[4]))
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
