"""A user's own cross-host test with the plugin's remote-host fixtures
(the example of docs/validation.rst).  Run with::

    pytest cross_host_example.py --rdma-hosts SPEC_A --rdma-hosts SPEC_B

Functions that run on a host travel as source: module level, imports
inside, results made of plain data."""
import rdma.ibverbs as ibv


def hostname(agent):
    import socket
    return socket.gethostname(), str(agent.end_port)


def receive(end, size):
    from rdma.pytest_plugin import poll_cq
    end.post_recv(size, off=0)
    wc = poll_cq(end.cq, 1, timeout=10)[0]
    assert wc.status == 0, f"receive failed: status {wc.status}"
    return bytes(end.buf[:wc.byte_len])


def send(end, data):
    import time
    from rdma.pytest_plugin import poll_cq
    import rdma.ibverbs as ibv
    end.buf[1024:1024 + len(data)] = data
    time.sleep(0.2)           # let the receiver post first (RC retries RNR)
    end.qp.post_send(end.send_wr(ibv.IBV_WR_SEND, len(data), off=1024))
    assert poll_cq(end.cq, 1, timeout=10)[0].status == 0


def write_to(end, data, addr, rkey):
    from rdma.pytest_plugin import poll_cq
    import rdma.ibverbs as ibv
    end.buf[:len(data)] = data
    end.qp.post_send(ibv.send_wr(opcode=ibv.IBV_WR_RDMA_WRITE,
                                 send_flags=ibv.IBV_SEND_SIGNALED,
                                 sg_list=end.mr.sge(len(data), 0),
                                 remote_addr=addr + 2048, rkey=rkey))
    assert poll_cq(end.cq, 1, timeout=10)[0].status == 0


def read_back(end, n):
    return bytes(end.buf[2048:2048 + n])


def test_hosts_answer(rdma_hosts):
    names = [h.call(hostname) for h in rdma_hosts]
    assert len(names) >= 2 and all(ep for _, ep in names)


def test_send_across(rdma_remote_rc_pair):
    pair = rdma_remote_rc_pair
    got, _ = pair.run(receive, send, {"size": 64}, {"data": b"hello there"})
    assert got == b"hello there"


def test_write_across(rdma_remote_pair):
    pair = rdma_remote_pair(ibv.IBV_QPT_RC, size=8192)
    mr = pair.a.peer_mr             # b's buffer, seen from a
    pair.a.run(write_to, data=b"x" * 100, addr=mr["addr"], rkey=mr["rkey"])
    assert pair.b.run(read_back, n=100) == b"x" * 100


def test_remote_assert_fails(rdma_remote_host):
    """A failing assert on the host is an AssertionError here, naming it."""
    import pytest

    with pytest.raises(AssertionError, match=r"on h0: .*status"):
        rdma_remote_host.call(_bad)


def _bad(agent):
    assert False, "receive failed: status 5"
