#!/usr/bin/env python3
"""The "typical application" of an RDMA program, step by step, on RC.

Follows the ten steps of the RDMA-aware programming overview: get the
device list, open a device, query its capabilities, allocate a protection
domain, register memory, create a completion queue, create queue pairs,
bring them to RTS, post work requests and poll for their completions, and
clean up by destroying the objects in the reverse order of their creation.

Two RC QPs of the same device are connected to each other, so one process
plays both the requester ("A") and the responder ("B"); between two hosts
only the exchange of the path, address and rkey changes (see nocm_rc.py).
The operations, each checked:

* SEND and SEND with immediate (B must have posted receives);
* RDMA WRITE (B is not notified) and RDMA WRITE with immediate (B gets a
  completion carrying the immediate value, consuming a receive);
* RDMA READ;
* atomic FETCH_AND_ADD and COMPARE_AND_SWAP on an 8-byte aligned word of
  B's memory (skipped if the device reports no atomic support).

Run:  python examples/rc_application.py [--device D] [--provider P]
Exit status 0 when every operation gave the expected result.
"""
import mmap
import struct
import sys

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util

SIZE = 4096
MSG, WRITE, ATOMIC = 0, 1024, 2048          # offsets in the buffers


def wait(poller, count, timeout, qp):
    wcs = []
    for wc in poller.iterwc(count=count, timeout=timeout):
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc, qp=qp)
        wcs.append(wc)
    util.check(not poller.timedout, f"timed out: {len(wcs)} of {count} "
                                    f"completions")
    return wcs


def main(args):
    # 1. Get the device list.
    devices = rdma.get_devices(args.provider)
    print("1. devices:", ", ".join(f"{d.name} ({d.provider})"
                                   for d in devices) or "none")
    # 2. Open the requested device (by name, or the first ACTIVE port).
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    ctx = rdma.get_verbs(end_port)
    print("2. opened", util.describe(end_port))
    created = []                # every verbs object, in creation order
    try:
        # 3. Query the device capabilities.
        dev = ctx.query_device()
        atomics = dev.atomic_cap != ibv.IBV_ATOMIC_NONE
        print(f"3. max_qp {dev.max_qp}, max_cqe {dev.max_cqe}, max_mr_size "
              f"{dev.max_mr_size:#x}, max_qp_rd_atom {dev.max_qp_rd_atom}, "
              f"atomic_cap {dev.atomic_cap}")
        # 4. Allocate a protection domain.
        pd = ctx.pd()
        created.append(pd)
        print("4. PD allocated")
        # 5. Register memory: one region per side, page aligned (mmap) so
        #    the atomic word is 8-byte aligned.
        access = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
                  ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_REMOTE_ATOMIC)
        buf_a, buf_b = mmap.mmap(-1, SIZE), mmap.mmap(-1, SIZE)
        mr_a, mr_b = pd.mr(buf_a, access), pd.mr(buf_b, access)
        created += [mr_a, mr_b]
        print(f"5. MRs: A lkey {mr_a.lkey:#x}; B rkey {mr_b.rkey:#x} "
              f"at {mr_b.addr:#x}")
        # 6. Create a completion queue (one for both QPs here).
        cq = ctx.cq(64)
        created.append(cq)
        poller = rdma.vtools.CQPoller(cq)
        print(f"6. CQ with {cq.cqe} entries")
        # 7. Create the queue pairs.
        qa = pd.qp(ibv.IBV_QPT_RC, 16, cq, 16, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 16, cq, 16, cq)
        created += [qa, qb]
        print(f"7. QPs {qa.qp_num:#x} and {qb.qp_num:#x}, state "
              f"{qa.state} (IBV_QPS_RESET = {ibv.IBV_QPS_RESET})")
        # 8. Bring the QPs up: RESET -> INIT -> RTR -> RTS.
        pa = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                 dqpn=qb.qp_num))
        pb = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                 dqpn=qa.qp_num))
        rdma.path.fill_path(qa, pa)
        rdma.path.fill_path(qb, pb)
        pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn     # exchanged PSNs
        for qp, path in ((qa, pa), (qb, pb)):
            qp.modify_to_init(path, access & ~ibv.IBV_ACCESS_LOCAL_WRITE)
            qp.modify_to_rtr(path)
            qp.modify_to_rts(path)
        util.check(qa.state == qb.state == ibv.IBV_QPS_RTS, "not in RTS")
        print("8. both QPs in RTS, path MTU",
              rdma.IBA.mtu_to_bytes(pa.MTU))

        # 9. Post work requests and poll for completions.
        # SEND and SEND with immediate: B posts receives first.
        qb.post_recv([ibv.recv_wr(wr_id=100 + i,
                                  sg_list=mr_b.sge(64, MSG + 64 * i))
                      for i in range(3)])
        buf_a[MSG:MSG + 5] = b"ping!"
        qa.post_send([ibv.send_wr(wr_id=1, opcode=ibv.IBV_WR_SEND,
                                  sg_list=mr_a.sge(5, MSG)),
                      ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_SEND_WITH_IMM,
                                  imm_data=0x1234, sg_list=mr_a.sge(5, MSG))])
        wcs = wait(poller, 4, args.timeout, qa)
        recvs = [wc for wc in wcs if wc.opcode == ibv.IBV_WC_RECV]
        util.check(len(recvs) == 2, "expected two receive completions")
        util.check(bytes(buf_b[MSG:MSG + 5]) == b"ping!", "SEND data")
        util.check([bool(wc.wc_flags & ibv.IBV_WC_WITH_IMM)
                    for wc in recvs] == [False, True], "immediate flags")
        util.check(recvs[1].imm_data == 0x1234, "immediate value")
        print(f"9. SEND: B received {bytes(buf_b[MSG:MSG + 5])!r}, then one "
              f"with immediate {recvs[1].imm_data:#x}")

        # RDMA WRITE (silent for B), then WRITE with immediate (B notified).
        text = b"RDMA WRITE data"
        buf_a[WRITE:WRITE + len(text)] = text
        qa.post_send(ibv.send_wr(wr_id=3, opcode=ibv.IBV_WR_RDMA_WRITE,
                                 sg_list=mr_a.sge(len(text), WRITE),
                                 remote_addr=mr_b.addr + WRITE,
                                 rkey=mr_b.rkey))
        wait(poller, 1, args.timeout, qa)
        util.check(bytes(buf_b[WRITE:WRITE + len(text)]) == text,
                   "RDMA WRITE data")
        util.check(cq.poll() == [], "B was notified of a plain RDMA WRITE")
        qa.post_send(ibv.send_wr(wr_id=4,
                                 opcode=ibv.IBV_WR_RDMA_WRITE_WITH_IMM,
                                 imm_data=0xBEEF,
                                 sg_list=mr_a.sge(4, WRITE),
                                 remote_addr=mr_b.addr + WRITE + 100,
                                 rkey=mr_b.rkey))
        wcs = wait(poller, 2, args.timeout, qa)
        imm = [wc for wc in wcs
               if wc.opcode == ibv.IBV_WC_RECV_RDMA_WITH_IMM]
        util.check(len(imm) == 1 and imm[0].imm_data == 0xBEEF,
                   f"WRITE with immediate: {wcs}")
        print(f"   RDMA WRITE: B's memory now holds {text!r}; WRITE with "
              f"immediate -> B's completion has {imm[0].imm_data:#x}")

        # RDMA READ: A fetches from B's memory.
        buf_b[WRITE + 512:WRITE + 520] = b"B's data"
        qa.post_send(ibv.send_wr(wr_id=5, opcode=ibv.IBV_WR_RDMA_READ,
                                 sg_list=mr_a.sge(8, WRITE + 512),
                                 remote_addr=mr_b.addr + WRITE + 512,
                                 rkey=mr_b.rkey))
        wait(poller, 1, args.timeout, qa)
        util.check(bytes(buf_a[WRITE + 512:WRITE + 520]) == b"B's data",
                   "RDMA READ data")
        got = bytes(buf_a[WRITE + 512:WRITE + 520])
        print(f"   RDMA READ: A read {got!r}")

        # Atomics on the 64-bit word at B's ATOMIC offset.
        if atomics:
            struct.pack_into("=Q", buf_b, ATOMIC, 40)
            qa.post_send(ibv.send_wr(wr_id=6,
                                     opcode=ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                     sg_list=mr_a.sge(8, ATOMIC),
                                     remote_addr=mr_b.addr + ATOMIC,
                                     rkey=mr_b.rkey, compare_add=2))
            wait(poller, 1, args.timeout, qa)
            old = struct.unpack_from("=Q", buf_a, ATOMIC)[0]
            new = struct.unpack_from("=Q", buf_b, ATOMIC)[0]
            util.check((old, new) == (40, 42), f"FETCH_AND_ADD {old}, {new}")
            print(f"   FETCH_AND_ADD 2: returned {old}, B's word is now {new}")
            qa.post_send(ibv.send_wr(wr_id=7,
                                     opcode=ibv.IBV_WR_ATOMIC_CMP_AND_SWP,
                                     sg_list=mr_a.sge(8, ATOMIC + 8),
                                     remote_addr=mr_b.addr + ATOMIC,
                                     rkey=mr_b.rkey, compare_add=42,
                                     swap=7))
            wait(poller, 1, args.timeout, qa)
            old = struct.unpack_from("=Q", buf_a, ATOMIC + 8)[0]
            new = struct.unpack_from("=Q", buf_b, ATOMIC)[0]
            util.check((old, new) == (42, 7), f"CMP_AND_SWP {old}, {new}")
            print(f"   COMPARE_AND_SWAP 42 -> 7: returned {old}, B's word "
                  f"is now {new}")
        else:
            print("   atomics: skipped (device atomic_cap is "
                  "IBV_ATOMIC_NONE)")
    finally:
        # 10. Clean up: destroy the objects in the reverse order of their
        #     creation.  (ctx.close() alone would do all of it, in this
        #     order, because a parent closes its children first.)
        print("10. clean up in reverse order:")
        for obj in reversed(created):
            print(f"   closing {type(obj).__name__}")
            obj.close()
        ctx.close()
    for m in (buf_a, buf_b):
        m.close()           # possible only now that the MRs are gone
    print("   closed the device")
    print("OK")
    return 0


main.parser = util.parser(__doc__)

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
