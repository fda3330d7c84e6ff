"""rdma.cm peers that speak the protocols of librdmacm's example programs.

Each function is one side of one program's exchange (rping, ucmatose,
udaddy, rdma_server/rdma_client), written on rdma.cm and our object model
only, so that tests/vm/test_cm_vm.py can run it against the C program in
the other role.  Each returns a dict of what it saw (for asserts).
"""
import struct
import time

import rdma.cm as cm
import rdma.ibverbs as ibv

RW = (ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_READ |
      ibv.IBV_ACCESS_REMOTE_WRITE)


def wait_wc(cq, n=1, timeout=20.0, what="completion"):
    """Poll cq until n completions came; each must be a success."""
    got = []
    end = time.monotonic() + timeout
    while len(got) < n:
        got += cq.poll(n - len(got))
        if len(got) < n and time.monotonic() > end:
            raise TimeoutError(f"{what}: {len(got)} of {n} within {timeout}s")
    for wc in got:
        if wc.status != ibv.IBV_WC_SUCCESS:
            raise AssertionError(f"{what}: {ibv.wc_status_str(wc.status)} "
                                 f"(wr_id {wc.wr_id})")
    return got


def _send(qp, mr, length=None, **kw):
    qp.post_send(ibv.send_wr(wr_id=kw.pop("wr_id", 1),
                             opcode=kw.pop("opcode", ibv.IBV_WR_SEND),
                             sg_list=mr.sge(length),
                             send_flags=ibv.IBV_SEND_SIGNALED, **kw))


def _recv(qp, mr, wr_id=0, length=None, off=0):
    qp.post_recv(ibv.recv_wr(wr_id=wr_id, sg_list=mr.sge(length, off)))


def _accept_one(listener, recvs=(), **accept_kw):
    """Take a request, make its RC QP, post receives, accept.  recvs:
    (length,) of the buffers to post.  Return (conn, [mrs])."""
    req = listener.get_request(timeout=30)
    cid = req.id
    cid.create_qp(ibv.IBV_QPT_RC, max_recv_wr=max(16, len(recvs)))
    mrs = []
    for i, length in enumerate(recvs):
        mr = cid.pd.mr(bytearray(length), RW)
        _recv(cid.qp, mr, wr_id=i)
        mrs.append(mr)
    cid.accept_qp(**accept_kw)
    return cm.Connection(cid, req.private_data, own_channel=False), mrs


# ---- rping: RDMA READ and WRITE of advertised buffers ----------------
# struct rping_rdma_info: buf (be64), rkey (be32), size (be32).
INFO = struct.Struct(">QII")


def rping_client(addr, port, count, size=64):
    """rping -c: advertise a buffer the server reads, then one it writes;
    compare them (rping -V)."""
    out = {"pings": 0}
    with cm.connect(addr, port, responder_resources=1,
                    initiator_depth=1) as conn:
        pd, qp, cq = conn.pd, conn.qp, conn.cq
        start = pd.mr(bytearray(size), RW)
        rbuf = pd.mr(bytearray(size), RW)
        sbuf = pd.mr(bytearray(INFO.size), RW)
        rcv = pd.mr(bytearray(INFO.size), RW)
        for i in range(count):
            text = (b"rdma-ping-%d: " % i).ljust(size - 1, b"x")
            start.buf[:size - 1] = text
            start.buf[size - 1:size] = b"\0"
            for mr in (start, rbuf):
                _recv(qp, rcv, wr_id=9)
                sbuf.buf[:] = INFO.pack(mr.addr, mr.rkey, size)
                _send(qp, sbuf)
                wait_wc(cq, 2, what="rping exchange")
            if bytes(rbuf.buf[:size]) != bytes(start.buf[:size]):
                raise AssertionError(f"ping {i}: data mismatch")
            out["pings"] += 1
    return out


def rping_server(addr, port, count, size=64, ready=None):
    """rping -s: read the client's buffer, write it back into the second
    one, a 'go ahead' send after each."""
    out = {"pings": 0, "data": []}
    with cm.listen(port, addr) as lst:
        if ready:
            ready()
        conn, (rcv,) = _accept_one(lst, (INFO.size,))
        with conn:
            pd, qp, cq = conn.pd, conn.qp, conn.cq
            buf = pd.mr(bytearray(size), RW)
            go = pd.mr(bytearray(INFO.size), RW)
            for _ in range(count):
                for op in (ibv.IBV_WR_RDMA_READ, ibv.IBV_WR_RDMA_WRITE):
                    wait_wc(cq, 1, what="rping advert")
                    raddr, rkey, rsize = INFO.unpack(bytes(rcv.buf[:16]))
                    _recv(qp, rcv)
                    n = min(rsize, size)
                    _send(qp, buf, n, opcode=op, remote_addr=raddr, rkey=rkey)
                    wait_wc(cq, 1, what="rping rdma")
                    if op == ibv.IBV_WR_RDMA_READ:
                        out["data"].append(bytes(buf.buf[:n]).rstrip(b"\0"))
                    _send(qp, go)
                    wait_wc(cq, 1, what="rping go-ahead")
                out["pings"] += 1
            lst.channel.wait_event(conn.id, cm.CMEventType.DISCONNECTED,
                                   timeout=30)
    return out


# ---- ucmatose: message_count sends each way per connection -----------

def ucmatose_client(addr, port, messages=10, size=100):
    """ucmatose -s ADDR: receives posted before connecting, then send and
    receive `messages` messages of `size` bytes."""
    ch = cm.EventChannel()
    with ch:
        cid = ch.create_id(cm.RDMA_PS_TCP)
        cid.resolve((addr, port))
        cid.create_qp(ibv.IBV_QPT_RC, max_recv_wr=messages,
                      max_send_wr=messages)
        mr = cid.pd.mr(bytearray(size * (messages + 1)), RW)
        for i in range(messages):
            _recv(cid.qp, mr, wr_id=i, length=size, off=size * (i + 1))
        cid.connect_qp(responder_resources=1, initiator_depth=1)
        conn = cm.Connection(cid, b"", own_channel=False)
        for i in range(messages):
            _send(conn.qp, mr, size, wr_id=100 + i)
        wcs = wait_wc(conn.cq, 2 * messages, what="ucmatose messages")
        conn.close()
    return {"recvs": sum(1 for w in wcs if w.opcode == ibv.IBV_WC_RECV)}


def ucmatose_server(addr, port, messages=10, size=100, ready=None):
    """ucmatose (server): accept with receives posted, exchange, wait for
    the client's disconnect."""
    with cm.listen(port, addr) as lst:
        if ready:
            ready()
        conn, mrs = _accept_one(lst, (size,) * messages)
        with conn:
            smr = conn.pd.mr(bytearray(size), RW)
            for i in range(messages):
                _send(conn.qp, smr, wr_id=100 + i)
            wcs = wait_wc(conn.cq, 2 * messages, what="ucmatose messages")
    return {"recvs": sum(1 for w in wcs if w.opcode == ibv.IBV_WC_RECV)}


# ---- rdma_server / rdma_client: 16 bytes each way --------------------

def rdma_client(addr, port, msg=b"rdma-client-msg!"):
    with cm.connect(addr, port) as conn:
        rmr = conn.pd.mr(bytearray(16), RW)
        smr = conn.pd.mr(bytearray(msg), RW)
        _recv(conn.qp, rmr)
        _send(conn.qp, smr)
        wait_wc(conn.cq, 2, what="rdma_server exchange")
        return {"reply": bytes(rmr.buf)}


def rdma_server(addr, port, ready=None):
    with cm.listen(port, addr) as lst:
        if ready:
            ready()
        conn, (rmr,) = _accept_one(lst, (16,))
        with conn:
            wait_wc(conn.cq, 1, what="rdma_client message")
            got = bytes(rmr.buf)
            smr = conn.pd.mr(bytearray(got), RW)
            _send(conn.qp, smr)
            wait_wc(conn.cq, 1, what="reply")
            lst.channel.wait_event(conn.id, cm.CMEventType.DISCONNECTED,
                                   timeout=30)
    return {"got": got}


# ---- udaddy: UD over SIDR ---------------------------------------------
GRH = 40


def udaddy_client(addr, port, messages=10, size=100):
    """udaddy -s ADDR: connect (SIDR), send `messages` datagrams to the
    server's QP, receive as many replies."""
    with cm.EventChannel() as ch:
        cid = ch.create_id(cm.RDMA_PS_UDP)
        cid.resolve((addr, port))
        cid.create_qp(ibv.IBV_QPT_UD, max_recv_wr=messages,
                      max_send_wr=messages)
        mr = cid.pd.mr(bytearray((size + GRH) * (messages + 1)), RW)
        for i in range(messages):
            _recv(cid.qp, mr, wr_id=i, length=size + GRH,
                  off=(size + GRH) * (i + 1))
        ev = cid.connect_qp()
        ah = cid.pd.ah(ev.ah_attr)
        for i in range(messages):
            _send(cid.qp, mr, size, wr_id=100 + i, ah=ah,
                  remote_qpn=ev.qp_num, remote_qkey=ev.qkey)
        wcs = wait_wc(cid.cq, 2 * messages, what="udaddy datagrams")
        return {"qp_num": ev.qp_num, "qkey": ev.qkey,
                "recvs": sum(1 for w in wcs if w.opcode == ibv.IBV_WC_RECV)}


def udaddy_server(addr, port, messages=10, size=100, ready=None):
    """udaddy (server): accept the SIDR request, receive `messages`
    datagrams and answer each (an AH to the GRH's source GID)."""
    with cm.EventChannel() as ch:
        lid = ch.create_id(cm.RDMA_PS_UDP)
        lid.bind_addr((addr, port))
        lid.listen(4)
        if ready:
            ready()
        req = ch.wait_event(lid, cm.CMEventType.CONNECT_REQUEST,
                            timeout=30)
        cid = req.id
        cid.create_qp(ibv.IBV_QPT_UD, max_recv_wr=messages,
                      max_send_wr=messages)
        mr = cid.pd.mr(bytearray((size + GRH) * messages), RW)
        for i in range(messages):
            _recv(cid.qp, mr, wr_id=i, length=size + GRH,
                  off=(size + GRH) * i)
        cid.accept_qp()
        wcs = wait_wc(cid.cq, messages, what="udaddy datagrams")
        path = cid.path()
        sgid_index = _sgid_index(cid)
        smr = cid.pd.mr(bytearray(size), RW)
        for wc in wcs:
            off = (size + GRH) * wc.wr_id
            sgid = bytes(mr.buf[off + 8:off + 24])
            ah = cid.pd.ah(ibv.ah_attr(
                is_global=1, port_num=cid.port_num,
                grh=ibv.global_route(dgid=sgid, sgid_index=sgid_index,
                                     hop_limit=64)))
            _send(cid.qp, smr, wr_id=200 + wc.wr_id, ah=ah,
                  remote_qpn=wc.src_qp, remote_qkey=cm.RDMA_UDP_QKEY)
        wait_wc(cid.cq, messages, what="udaddy replies")
        return {"recvs": len(wcs), "sgid": path.SGID}


def _sgid_index(cid):
    """The GID index of the ID's source GID on its port."""
    sgid = cid.query()[5]
    ctx = cid.context
    for i in range(ctx.query_port(cid.port_num).gid_tbl_len):
        try:
            if bytes(ctx.query_gid(cid.port_num, i)) == sgid:
                return i
        except OSError:
            continue
    raise AssertionError(f"source GID {sgid.hex()} is not in the table")
