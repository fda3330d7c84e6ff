"""One side of the seed's "No CM RC QP Setup", as a separate process.

Usage: nocm_side.py a|b DEVICE PORT   (a listens on 127.0.0.1:PORT, b connects)
Exchanges pickled paths over a TCP socket, brings the RC QP to RTS with
modify_to_init/rtr/rts, then side a RDMA-writes into b's buffer and sends a
message; b checks both and replies.  Prints "OK <detail>" on success.
"""
import pickle
import socket
import struct
import sys
import time

import rdma
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools

side, dev, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
gid_index = 1


def sock_pair():
    if side == "a":
        ls = socket.create_server(("127.0.0.1", port))
        ls.settimeout(60)
        s, _ = ls.accept()
        ls.close()
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    s.settimeout(60)
    return s


def send(s, obj):
    b = pickle.dumps(obj)
    s.sendall(struct.pack("!I", len(b)) + b)


def recv(s):
    def exact(n):
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out
    return pickle.loads(exact(struct.unpack("!I", exact(4))[0]))


end_port = rdma.get_end_port(dev)
s = sock_pair()
with rdma.get_verbs(end_port) as ctx:
    pd = ctx.pd()
    cq = ctx.cq(32)
    qp = pd.qp(ibv.IBV_QPT_RC, 8, cq, 8, cq)
    buf = bytearray(1024)
    mr = pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE)
    if side == "a":
        path = rdma.path.IBPath(end_port, SGID=end_port.gids[gid_index])
        rdma.path.fill_path(qp, path)
        path.reverse(for_reply=False)
        send(s, (path, mr.addr, mr.rkey))
        path, raddr, rkey = recv(s)
        path.reverse(for_reply=False)
        path.end_port = end_port
    else:
        path, raddr, rkey = recv(s)
        path.end_port = end_port
        rdma.path.fill_path(qp, path)
        rdma.path.resolve_path(None, path)      # RoCE: from the GID table
        send(s, (path, mr.addr, mr.rkey))
    qp.modify_to_init(path, ibv.IBV_ACCESS_REMOTE_WRITE)
    qp.modify_to_rtr(path)
    qp.modify_to_rts(path)
    pool = rdma.vtools.BufferPool(pd, 8, 64)
    pool.post_recvs(qp, 4)
    # Synchronize the transition to RTS.
    if side == "a":
        send(s, True)
        recv(s)
    else:
        recv(s)
        send(s, True)
    poller = rdma.vtools.CQPoller(cq)
    if side == "a":
        buf[:11] = b"written by "
        qp.post_send(ibv.send_wr(wr_id=pool.NO_WR_ID,
                                 opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=mr.sge(11), remote_addr=raddr + 100,
                                 rkey=rkey))
        idx = pool.pop()
        pool.copy_to(b"hello b", idx)
        qp.post_send(pool.make_send_wr(idx, 7))
        got = []
        for wc in poller.iterwc(count=3, timeout=30):
            pool.finish_wcs(qp, wc)
            if wc.opcode == ibv.IBV_WC_RECV:
                got.append(bytes(pool.copy_from(wc.wr_id, 0, wc.byte_len)))
        assert not poller.timedout, "timed out"
        assert got == [b"ack from b"], got
        print("OK a", path)
    else:
        for wc in poller.iterwc(count=1, timeout=30):
            pool.finish_wcs(qp, wc)
            msg = bytes(pool.copy_from(wc.wr_id, 0, wc.byte_len))
        assert not poller.timedout, "timed out"
        assert msg == b"hello b", msg
        assert bytes(buf[100:111]) == b"written by ", bytes(buf[100:111])
        idx = pool.pop()
        pool.copy_to(b"ack from b", idx)
        qp.post_send(pool.make_send_wr(idx, 10))
        for wc in poller.iterwc(count=1, timeout=30):
            pool.finish_wcs(qp, wc)
        assert not poller.timedout
        print("OK b", path)
    pool.close()
s.close()
