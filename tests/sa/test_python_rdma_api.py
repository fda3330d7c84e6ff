"""What python-rdma's management programs rely on, on ibsim + opensm (our
own tests of the fixes found by running python-rdma's ibtool; they run
without python-rdma).  They use a worker process of their own: they set
the port's ``sa_path.SMKey``, which later SA queries of that process
send."""
import pytest

from fabric import Worker


@pytest.fixture(scope="module")
def worker(fabric):
    w = Worker(fabric, "Hca2")
    try:
        yield w
    finally:
        w.close()


def test_sa_path_parent_and_copy(fabric, worker):
    r = worker.call("compat", "sa_path_and_parent")
    assert r["parent_is_end_port"] and r["sa_path_is_ibpath"]
    assert r["same_object"] and r["smkey_kept"] == 1
    assert r["sm_lid"] == 1 and r["sm_guid"] == 0x100001
    assert r["sm_state"] == 3           # master


def test_path_not_found(fabric, worker):
    name, is_class_error, text = worker.call("compat", "path_not_found",
                                             0x1234)
    assert name == "SAPathNotFoundError" and is_class_error
    assert "DLID 4660" in text


def test_path_on_scheduler(fabric, worker):
    r = worker.call("compat", "path_on_scheduler", 6, 0x1234)
    assert r["found"] == (6, 4, "fe80::10:a", 1)
    assert r["missing"] == "SAPathNotFoundError"


def test_surround_fetches_descriptions(fabric, worker):
    desc, peers = worker.call("compat", "surround", 0x100006)
    assert desc == "Hca3"
    assert peers == [("Switch1", 2)]


def test_advance_dr_turns_back_at_a_ca(fabric, worker):
    r = worker.call("compat", "turn_back_at_ca", 0x100000)
    assert len(r["back"]) == len(r["to_ca"]) - 1
    assert r["back"] == r["to_ca"][:-1]
    assert r["guid"] == r["want_guid"] == 0x200000
    assert r["port"] == r["want_port"] == 1


def test_sa_path_without_a_subnet_manager(fabrics):
    """python-rdma's end_port.sa_path exists without an SM (DLID 0); an
    SA query through it is a clear error."""
    f = fabrics("1sw2hca", sm=False)
    w = Worker(f, "Hca2")
    try:
        dlid, kind, err = w.call("compat", "no_sm_sa_path")
    finally:
        w.close()
    assert dlid == 0 and kind == "SAPath"
    assert "no subnet manager" in err


def test_converter_python2_division(tmp_path):
    """The converter's one change beyond lib2to3: Python 2's ``/``."""
    import python_rdma_compat as compat
    f = tmp_path / "m.py"
    f.write_text("# head\nx = 7 / 2 * 3 + a / (b / c)\ny = 7.0 / 2\n")
    compat._py2_division(f)
    ns = {"a": 9, "b": 7, "c": 2}
    exec(f.read_text(), ns)
    assert ns["x"] == 3 * 3 + 9 // 3 and ns["y"] == 3.5
    assert f.read_text().startswith("# head\ndef _py2_div")
    (tmp_path / "n.py").write_text("x /= 2\n")
    with pytest.raises(compat.CompatError, match="'/='"):
        compat._py2_division(tmp_path / "n.py")
