"""Both build variants on the real device, and the ASan build clean."""
import pytest

from conftest import run_py

QUERY = (
    "import rdma, rdma._ibverbs as m\n"
    "p = rdma.get_end_port('{dev}', provider='verbs')\n"
    "with rdma.get_verbs(p) as c:\n"
    "    print(m._VERBS_LINKAGE, m.__file__, c.query_port().state, "
    "c.query_device().max_qp > 0, p.gids[1])\n"
)


@pytest.mark.parametrize("name", ["dlopen", "linked"])
def test_variant_opens_device(variant, device, name):
    d = variant(name)
    res = run_py(QUERY.format(dev=device), pythonpath=d)
    assert res.returncode == 0, res.stderr
    assert (res.stdout.startswith(f"{name} {d}") and
            " 4 True ::ffff:" in res.stdout)


def test_dlopen_variant_reports_missing_library(variant, device):
    res = run_py(QUERY.format(dev=device), pythonpath=variant("dlopen"),
                 env={"RDMA_IBVERBS_LIBRARY": "/nonexistent/libibverbs.so.1"})
    assert res.returncode == 1
    assert "rdma.SysError: dlopen:" in res.stderr
    assert "libibverbs1" in res.stderr


LIFETIME = (
    "import gc, warnings, rdma\n"
    "warnings.simplefilter('ignore', ResourceWarning)\n"
    "p = rdma.get_end_port('{dev}', provider='verbs')\n"
    "for i in range(50):\n"
    "    c = rdma.get_verbs(p)\n"
    "    c.query_device(); c.query_port(); "
    "c.query_gid(1, 1); c.query_gid_ex(1, 0)\n"
    "    if i % 3 == 0: c.close(); c.close()\n"
    "    if i % 3 == 1: del c; gc.collect()\n"
    "    if i % 3 == 2:\n"
    "        with c: pass\n"
    "        try: c.query_port()\n"
    "        except ValueError: pass\n"
    "print('done')\n"
)


def test_asan_build_is_clean(variant, device):
    """Open/query/close/forget contexts under AddressSanitizer: no report."""
    import variants
    d = variant("asan")
    res = run_py(LIFETIME.format(dev=device), pythonpath=d, env={
        "LD_PRELOAD": variants.asan_runtime(),
        "ASAN_OPTIONS": "detect_leaks=0:exitcode=99",
        "PYTHONMALLOC": "malloc"})
    assert "AddressSanitizer" not in res.stderr, res.stderr
    assert res.returncode == 0 and "done" in res.stdout, res.stderr
