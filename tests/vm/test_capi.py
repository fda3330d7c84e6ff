"""The C API (rdma/include/pyrdma.h, rdma/capi.pxd) used from Cython."""
import os
import sys

import pytest

import rdma.ibverbs as ibv
from verbs_fixtures import connect_pair

GIDX = int(os.environ.get("RDMA_TESTVM_GID_INDEX", "1"))


@pytest.fixture(scope="module")
def fastloop():
    import variants
    d = variants.variant_dir("cython-example")
    if not list(d.glob("fastloop*.so")):
        d = variants.build_cython_example()
    sys.path.insert(0, str(d))
    try:
        import fastloop
        yield fastloop
    finally:
        sys.path.remove(str(d))


def test_cython_write_loop(fastloop, end_port, ctx):
    """RDMA WRITEs posted and polled from Cython through the capsule."""
    gid = end_port.gids[GIDX]
    with ctx.pd() as pd:
        cq = ctx.cq(128)
        qa = pd.qp(ibv.IBV_QPT_RC, 64, cq, 1, cq)
        qb = pd.qp(ibv.IBV_QPT_RC, 64, cq, 1, cq)
        connect_pair(qa, qb, end_port, dgid=gid)
        src = bytearray(b"cython!!" + bytes(56))
        dst = bytearray(64)
        smr = pd.mr(src, ibv.IBV_ACCESS_LOCAL_WRITE)
        dmr = pd.mr(dst,
                    ibv.IBV_ACCESS_LOCAL_WRITE | ibv.IBV_ACCESS_REMOTE_WRITE)
        n = fastloop.write_loop(qa, cq, smr, dmr.addr + 16, dmr.rkey, 200, 16)
        assert n == 200
        assert bytes(dst[16:24]) == b"cython!!" and dst[:16] == bytes(16)
        # A closed object is refused with EINVAL, not a crash.
        smr.close()
        with pytest.raises(ValueError, match="not an open MR"):
            fastloop.write_loop(qa, cq, smr, dmr.addr, dmr.rkey, 1)
        qa.close()
        with pytest.raises(OSError) as ei:
            fastloop.write_loop(qa, cq, dmr, dmr.addr, dmr.rkey, 1)
        assert ei.value.errno == 22
