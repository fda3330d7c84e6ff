"""rdma.SysError: an OSError carrying errno and the failing C function."""
import errno
import pickle

import rdma


def test_syserror_is_oserror_with_func():
    e = rdma.SysError(errno.EINVAL, "ibv_modify_qp", "bad state")
    assert isinstance(e, OSError) and isinstance(e, rdma.RDMAError)
    assert e.errno == errno.EINVAL and e.func == "ibv_modify_qp"
    assert "ibv_modify_qp" in str(e) and "bad state" in str(e)
    assert "Invalid argument" in str(e)


def test_syserror_pickles():
    e = rdma.SysError(errno.ENOMEM, "ibv_reg_mr", "no memory left")
    f = pickle.loads(pickle.dumps(e))
    assert (f.errno, f.func, str(f)) == (e.errno, e.func, str(e))


def test_a_verb_the_provider_lacks_is_eopnotsupp_naming_it():
    """The software fabric has no memory windows: its ops table leaves
    alloc_mw NULL and the object model calls the stub put there
    (csrc/provider_stubs.c), which fails with EOPNOTSUPP naming the verb;
    the PD stays usable and no half-made MW is left on it."""
    import gc
    import rdma.ibverbs as ibv
    with rdma.get_verbs(rdma.get_end_port(provider="ucx")) as ctx:
        pd = ctx.pd()
        for t in (ibv.IBV_MW_TYPE_1, ibv.IBV_MW_TYPE_2):
            try:
                pd.mw(t)
            except rdma.SysError as e:
                assert e.errno == errno.EOPNOTSUPP, e
                assert e.func == "ibv_alloc_mw", e
                assert "does not implement" in str(e), e
            else:
                raise AssertionError("pd.mw() worked on the ucx provider")
        gc.collect()
        buf = bytearray(64)
        with pd.mr(buf, ibv.IBV_ACCESS_LOCAL_WRITE) as mr:
            assert mr.length == 64
        pd.close()
