"""A MAD responder for the transactor tests: a real process on an ibsim
node that answers GMPs of the Baseboard Management class, as a remote
agent would (ibsim passes GMP requests to the clients of a node that
registered as SM-capable, ``SIM_SET_ISSM=1``; ibsim has no BM agent of
its own).

``python mad_server.py MODE COUNT [REDIRECT_LID]`` prints ``ready <lid>``
and answers COUNT requests:

- ``ok``: every Get is answered with a ClassPortInfo whose
  ``capabilityMask`` is our LID (the requester can tell who answered);
- ``busy:N``: the first N tries of each transaction are answered with the
  BUSY status, then as ``ok``;
- ``redirect``: answered with the REDIRECT status and a ClassPortInfo
  naming ``REDIRECT_LID`` (QP1, the QP1 Q_Key, the default P_Key);
- ``error``: answered with status 0x1C (invalid attribute or modifier).
- ``rmpp-endless:SECONDS``: registers for SA GetTable instead (no RMPP in
  the umad layer) and answers each request with RMPP DATA segments, one
  every 20 ms for SECONDS, none flagged Last: a sender that never ends.

It prints ``req TID TRY`` for each request it gets, then ``done`` and
JSON: requests handled, tries per TID.
"""
import json
import sys
import time

import rdma.IBA as IBA
import rdma.umad


def rmpp_endless(u, seconds: float, count: int) -> int:
    """Answer SA GetTables with DATA segments that never end."""
    u.register(IBA.MAD_SUBNET_ADMIN, 2, rmpp=False,
               methods=[IBA.MAD_METHOD_GET_TABLE])
    print(f"ready {u.end_port.lid}", flush=True)
    handled = 0
    deadline = time.monotonic() + 60
    while handled < count and time.monotonic() < deadline:
        got = u.recvfrom(deadline)
        if got is None:
            break
        buf, path = got
        if buf[1] != IBA.MAD_SUBNET_ADMIN or buf[3] & 0x80:
            continue
        handled += 1
        print(f"req {int.from_bytes(bytes(buf[12:16]), 'big'):#x} 1",
              flush=True)
        seg = bytearray(bytes(buf[:256]).ljust(256, b"\0"))
        seg[3] = IBA.MAD_METHOD_GET_TABLE | IBA.MAD_METHOD_RESPONSE
        seg[24], seg[25] = 1, 1                 # RMPP version 1, DATA
        back = path.reverse() if hasattr(path, "reverse") else path
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            seg[26] = 0x1 | (0x2 if n == 1 else 0)   # Active (First)
            seg[28:32] = n.to_bytes(4, "big")
            seg[32:36] = (0 if n == 1 else 220).to_bytes(4, "big")
            u.sendto(seg, back)
            time.sleep(0.02)
    print("done", json.dumps({"handled": handled, "tries": [1] * handled}),
          flush=True)
    u.close()
    return 0


def main() -> int:
    mode, count = sys.argv[1], int(sys.argv[2])
    target = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if mode.startswith("rmpp-endless:"):
        return rmpp_endless(rdma.umad.get_umad(), float(mode[13:]), count)
    u = rdma.umad.get_umad()
    u.register_server(IBA.MAD_BOARD_MANAGEMENT, 1,
                      method_mask=(1 << IBA.MAD_METHOD_GET)
                      | (1 << IBA.MAD_METHOD_SET))
    lid = u.end_port.lid
    print(f"ready {lid}", flush=True)
    seen = {}
    handled = 0
    deadline = time.monotonic() + 60
    while handled < count and time.monotonic() < deadline:
        got = u.recvfrom(deadline)
        if got is None:
            break
        buf, path = got
        if buf[1] != IBA.MAD_BOARD_MANAGEMENT:
            continue
        try:
            fmt, req = u.parse_request(buf, path)
        except IBA.MADError as e:
            u.send_error_exc(e)
            continue
        handled += 1
        tid = fmt.transactionID & 0xFFFFFFFF
        seen[tid] = seen.get(tid, 0) + 1
        print(f"req {tid:#x} {seen[tid]}", flush=True)
        if mode.startswith("busy:") and seen[tid] <= int(mode[5:]):
            u.send_reply(fmt, None, path, status=IBA.MAD_STATUS_BUSY)
            continue
        if mode == "error":
            u.send_reply(fmt, None, path,
                         status=IBA.MAD_STATUS_INVALID_ATTR_OR_MODIFIER)
            continue
        cpi = IBA.MADClassPortInfo(baseVersion=1, classVersion=1)
        if mode == "redirect":
            cpi.redirectLID = target
            cpi.redirectQP = 1
            cpi.redirectQKey = IBA.IB_DEFAULT_QP1_QKEY
            cpi.redirectPKey = 0xFFFF
            u.send_reply(fmt, cpi, path, status=IBA.MAD_STATUS_REDIRECT)
            continue
        cpi.capabilityMask = lid
        u.send_reply(fmt, cpi, path)
    print("done", json.dumps({"handled": handled,
                              "tries": sorted(seen.values())}), flush=True)
    u.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
