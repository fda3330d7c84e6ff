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
