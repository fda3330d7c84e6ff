"""A process that creates and destroys QPs on ucx0, one after the other,
keeps its memory flat (issue 23; csrc/fabric/qp.c qp_window).

New QPs took turns over all 16384 rows of the fabric's QP table, so each
QP created touched a row not touched before of ``N.qps``, ``N.qp_gen``
and the key page's ``sh_qp`` (42 bytes) until all were touched: a
process's RSS grew by about 45 bytes per QP created (84 KiB per 1,000
rdma.cm connections, two QPs each) up to some 700 KiB, and ``N.qp_hi``,
the bound of every scan of the table, went to its top.  Now new QPs take
turns over a window of rows that follows the most QPs alive at once (at
least 1024 rows).

Each test runs its loop in a fresh child process (its table untouched)
and reads the child's RSS from ``/proc/self/statm`` after a warm-up that
covers the window; under ASan (RDMA_TEST_ASAN) the allocator's quarantine
makes RSS meaningless, so the loops run smaller, for ASan's reports only.
"""
import os
import subprocess
import sys
import textwrap

import pytest

ASAN = bool(os.environ.get("RDMA_TEST_ASAN"))

#: the old code's growth over 20,000 QPs: ~640 KiB (over 2,000
#: connections: ~165 KiB); the fixed code's: 0-4 KiB
QP_BOUND = 128 << 10
CM_BOUND = 48 << 10

PRELUDE = textwrap.dedent("""
    import os, sys, threading
    import rdma, rdma.cm as cm, rdma.ibverbs as ibv
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    warm, n = int(sys.argv[1]), int(sys.argv[2])
""")

QP_LOOP = PRELUDE + textwrap.dedent("""
    with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as c:
        pd = c.pd()
        cq = c.cq(16)
        cap = ibv.qp_cap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                         max_recv_sge=1)
        def loop(k):
            for _ in range(k):
                init = ibv.qp_init_attr(send_cq=cq, recv_cq=cq, cap=cap,
                                        qp_type=ibv.IBV_QPT_RC)
                pd.qp(init).close()
        loop(warm)
        r0 = rss()
        loop(n)
        print(rss() - r0)
""")

CM_LOOP = PRELUDE + textwrap.dedent("""
    port = int(sys.argv[3])
    E = cm.CMEventType
    with cm.listen(port, "127.0.0.1", provider="ucx") as lst:
        def serve():
            for _ in range(warm + n):
                c = lst.accept(timeout=30)
                lst.channel.wait_event(c.id, E.DISCONNECTED, timeout=30)
                c.id.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        def loop(k):
            for _ in range(k):
                with cm.connect("127.0.0.1", port, provider="ucx"):
                    pass
        loop(warm)
        r0 = rss()
        loop(n)
        grew = rss() - r0
        t.join(60)
        assert not t.is_alive(), "the server thread hung"
        print(grew)
""")


def run_loop(tmp_path, script, *args):
    """Run script in a child on a private fabric directory; its printed
    RSS growth in bytes."""
    d = tmp_path / "rendezvous"
    d.mkdir(mode=0o700)
    env = dict(os.environ, RDMA_UCX_DIR=str(d), UCX_WARN_UNUSED_ENV_VARS="n")
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ERROR: AddressSanitizer" not in r.stderr, r.stderr
    return int(r.stdout.split()[-1])


def test_qp_create_destroy_loop_rss_flat(tmp_path):
    """20,000 QPs created and destroyed one after the other after 2,000
    of warm-up: RSS grows by less than 128 KiB (before: ~640 KiB)."""
    warm, n = (2000, 20000) if not ASAN else (200, 2000)
    grew = run_loop(tmp_path, QP_LOOP, warm, n)
    print(f"RSS growth over {n} QPs: {grew} bytes")
    if not ASAN:
        assert grew < QP_BOUND, f"RSS grew {grew} bytes over {n} QPs"


def test_cm_connect_disconnect_loop_rss_flat(tmp_path):
    """2,000 rdma.cm connections on ucx0 made and torn down after 1,500 of
    warm-up: RSS grows by less than 48 KiB (before: ~165 KiB)."""
    import fabric_helpers as fh
    warm, n = (1500, 2000) if not ASAN else (50, 200)
    grew = run_loop(tmp_path, CM_LOOP, warm, n, fh.free_port())
    print(f"RSS growth over {n} connections: {grew} bytes")
    if not ASAN:
        assert grew < CM_BOUND, f"RSS grew {grew} bytes over {n} connections"


@pytest.mark.parametrize("live", [1, 700])
def test_qpns_differ_while_alive_and_rows_come_back(tmp_path, live):
    """With live QPs held open, new QPs get QPNs no live QP has; the
    rows come back only after a full turn of the window."""
    script = PRELUDE + textwrap.dedent("""
        with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as c:
            pd = c.pd()
            cq = c.cq(16)
            def qp():
                return pd.qp(ibv.qp_init_attr(send_cq=cq, recv_cq=cq,
                                              qp_type=ibv.IBV_QPT_RC))
            held = [qp() for _ in range(warm)]
            nums = {q.qp_num for q in held}
            assert len(nums) == warm
            seen = []
            for _ in range(n):
                q = qp()
                assert q.qp_num not in nums, q.qp_num
                seen.append(q.qp_num)
                q.close()
            assert len(set(seen)) == n, "a QPN came back"
            rows = {x & 0x3fff for x in seen}
            for q in held:
                q.close()
            print(len(rows))
    """)
    n = 3000
    rows = run_loop(tmp_path, script, live, n)
    # the window: 1024 rows for 1 live QP, 2048 for 700 (less the two
    # reserved rows and the live ones)
    assert rows == (1024 - 2 - live if live == 1 else 2048 - 2 - live)
