"""``ibtool demo``: find the devices, then move data over a real RC connection.

The demo lists the devices and ports, opens the first active port, connects
two RC queue pairs to each other with :mod:`rdma.path` (the python-rdma way:
IBPath, resolve_path, fill_path, modify_to_init/rtr/rts) and runs a SEND, an
RDMA WRITE, an RDMA READ and an atomic FETCH_AND_ADD, checking the bytes
and timing a short ping-pong.  It works the same on a verbs device and on
the software fabric.
"""
from __future__ import annotations

import argparse
import struct
import time
from typing import List

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.IBA import GID_TYPE_ROCE_V2
from rdma.cli._common import Subparsers, add_provider

__all__ = ["add_parser", "demo"]

_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE"}
_MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_ACCESS = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE |
           ibv.IBV_ACCESS_REMOTE_READ | ibv.IBV_ACCESS_REMOTE_ATOMIC)


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``demo`` to ``ibtool``."""
    p = subparsers.add_parser(name, help=help)
    add_provider(p)
    return p


def _list(devices: rdma.devices.DemandList[rdma.devices.Device]) -> None:
    print(f"Found {len(devices)} RDMA device(s):")
    for d in devices:
        print(f"  {d.name:<10} provider={d.provider:<6} "
              f"node_guid={d.node_guid}  {d.transport_name}")
        for p in d.end_ports:
            print(f"    port {p.port_id}: {_STATES.get(p.state, p.state)}, "
                  f"{p.link_layer}, lid {p.lid}, "
                  f"MTU {_MTU.get(p.attr.active_mtu, '?')}")
            for i, (g, t) in enumerate(zip(p.gids, p.gid_types)):
                if g:
                    v2 = " (RoCE v2)" if t == GID_TYPE_ROCE_V2 else ""
                    print(f"      GID[{i}] {g}{v2}")


def _path_to(end_port: rdma.devices.EndPort,
             qp: ibv.QP) -> rdma.path.IBPath:
    """A path from end_port to qp on the same port (a loopback
    connection, made exactly as between two machines)."""
    gid = None
    if end_port.link_layer == "Ethernet" or not end_port.lid:
        idx = rdma.path._roce_sgid_index(end_port, None) \
            if end_port.link_layer == "Ethernet" else 0
        gid = end_port.gids[idx]
    path = rdma.path.IBPath(end_port, dqpn=qp.qp_num, DGID=gid,
                            DLID=end_port.lid, retries=7, min_rnr_timer=12)
    return rdma.path.resolve_path(None, path)


def _wait(poller: rdma.vtools.CQPoller, n: int, what: str) -> List[ibv.wc]:
    wcs = []
    for wc in poller.iterwc(count=n, timeout=10):
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise ibv.WCError(wc, msg=what)
        wcs.append(wc)
    if len(wcs) < n:
        raise rdma.RDMAError(f"{what}: no completion within 10 s")
    return wcs


def demo(args: argparse.Namespace) -> int:
    """Run ``ibtool demo``; return the exit status."""
    devices = rdma.get_devices(args.provider)
    if not devices:
        raise rdma.RDMAError("no RDMA devices found")
    _list(devices)
    end_port = rdma.get_end_port(provider=args.provider)
    print(f"\nUsing {end_port} ({end_port.provider}); connecting two RC QPs "
          f"to each other")
    with rdma.get_verbs(end_port) as ctx:
        a = ctx.query_device()
        print(f"  device: max_qp={a.max_qp} max_cqe={a.max_cqe} "
              f"max_mr_size={a.max_mr_size:#x} atomic_cap={a.atomic_cap}")
        pd = ctx.pd()
        cq = ctx.cq(64)
        qa = pd.qp(ibv.IBV_QPT_RC, 16, cq, 16, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 16, cq, 16, cq)
        pa, pb = _path_to(end_port, qb), _path_to(end_port, qa)
        rdma.path.fill_path(qa, pa, max_rd_atomic=1)
        rdma.path.fill_path(qb, pb, max_rd_atomic=1)
        pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
        for qp, path in ((qa, pa), (qb, pb)):
            qp.modify_to_init(path, _ACCESS & ~ibv.IBV_ACCESS_LOCAL_WRITE)
            qp.modify_to_rtr(path)
            qp.modify_to_rts(path)
        print(f"  QP {qa.qp_num:#x} <-> QP {qb.qp_num:#x}: {pa}")
        abuf, bbuf = bytearray(4096), bytearray(4096)
        amr, bmr = pd.mr(abuf, _ACCESS), pd.mr(bbuf, _ACCESS)
        poller = rdma.vtools.CQPoller(cq)

        # SEND with immediate data.
        qb.post_recv(ibv.recv_wr(wr_id=1, sg_list=bmr.sge(64, 0)))
        abuf[:17] = b"hello over RDMA!!"
        qa.post_send(ibv.send_wr(wr_id=2, opcode=ibv.IBV_WR_SEND_WITH_IMM,
                                 imm_data=0x1234,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=amr.sge(17, 0)))
        wcs = {w.wr_id: w for w in _wait(poller, 2, "SEND")}
        assert bytes(bbuf[:17]) == b"hello over RDMA!!"
        print(f"  SEND: {wcs[1].byte_len} bytes, imm_data "
              f"{wcs[1].imm_data:#x}: "
              f"{bytes(bbuf[:17]).decode()!r}")

        # RDMA WRITE then READ back.
        abuf[100:116] = b"written remotely"
        qa.post_send(ibv.send_wr(wr_id=3, opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=amr.sge(16, 100),
                                 remote_addr=bmr.addr + 1000, rkey=bmr.rkey))
        _wait(poller, 1, "RDMA WRITE")
        assert bytes(bbuf[1000:1016]) == b"written remotely"
        qa.post_send(ibv.send_wr(wr_id=4, opcode=ibv.IBV_WR_RDMA_READ,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=amr.sge(16, 2000),
                                 remote_addr=bmr.addr + 1000, rkey=bmr.rkey))
        _wait(poller, 1, "RDMA READ")
        assert bytes(abuf[2000:2016]) == b"written remotely"
        print("  RDMA WRITE + RDMA READ: 16 bytes there and back")

        # Atomic fetch-and-add on an 8-byte counter.
        struct.pack_into("<Q", bbuf, 3000, 41)
        qa.post_send(ibv.send_wr(wr_id=5,
                                 opcode=ibv.IBV_WR_ATOMIC_FETCH_AND_ADD,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=amr.sge(8, 3008),
                                 remote_addr=bmr.addr + 3000, rkey=bmr.rkey,
                                 compare_add=1))
        _wait(poller, 1, "FETCH_AND_ADD")
        old, = struct.unpack_from("<Q", abuf, 3008)
        new, = struct.unpack_from("<Q", bbuf, 3000)
        assert (old, new) == (41, 42)
        print(f"  ATOMIC FETCH_AND_ADD: old value {old}, memory now {new}")

        # A short ping-pong.
        iters = 200
        rbuf_a = ibv.RecvBatch([ibv.recv_wr(wr_id=10, sg_list=amr.sge(8, 0))])
        rbuf_b = ibv.RecvBatch([ibv.recv_wr(wr_id=11, sg_list=bmr.sge(8, 0))])
        ping = ibv.SendBatch([ibv.send_wr(wr_id=12, opcode=ibv.IBV_WR_SEND,
                                          send_flags=ibv.IBV_SEND_SIGNALED,
                                          sg_list=amr.sge(8, 0))])
        pong = ibv.SendBatch([ibv.send_wr(wr_id=13, opcode=ibv.IBV_WR_SEND,
                                          send_flags=ibv.IBV_SEND_SIGNALED,
                                          sg_list=bmr.sge(8, 0))])
        arr = ibv.WCArray(8)
        t0 = time.perf_counter()
        deadline = time.monotonic() + 30
        for _ in range(iters):
            qa.post_recv(rbuf_a)
            qb.post_recv(rbuf_b)
            qa.post_send(ping)
            got = 0
            while got < 4:          # ping sent+received, pong sent+received
                n = cq.poll_into(arr)
                bad = arr.first_error() if n else None
                if bad is not None:
                    raise ibv.WCError(arr[bad], msg="ping-pong")
                for i in range(n):
                    if arr.wr_id(i) == 11:
                        qb.post_send(pong)
                got += n
                if time.monotonic() > deadline:
                    raise rdma.RDMAError("ping-pong: timed out")
        dt = time.perf_counter() - t0
        print(f"  ping-pong: {iters} round trips, {dt / iters * 1e6:.1f} us "
              f"per round trip")
    print("\nAll good: every object was closed with the Context.")
    return 0
