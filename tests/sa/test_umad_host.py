"""umad on the host without any fabric: loading, and clear errors."""
import os
import subprocess
import sys

import pytest

import rdma.umad
from rdma import _umad
from rdma._errors import RDMAError, SysError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _py(code, **env):
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    e.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-c", code], env=e,
                          capture_output=True, text=True, timeout=60)


def test_import_does_not_load_libibumad():
    res = _py("import rdma._umad, rdma.umad, rdma.sa\n"
              "print('libibumad' in open('/proc/self/maps').read())")
    assert res.returncode == 0 and res.stdout.strip() == "False"


def test_missing_library_names_the_package():
    res = _py("import rdma.umad\n"
              "try:\n"
              "    rdma.umad.get_umad_devices()\n"
              "except rdma.umad.SysError as e:\n"
              "    print(e.func, '|', e)\n",
              RDMA_UMAD_LIBRARY="/nonexistent/libibumad.so.3")
    assert res.stdout.startswith("dlopen |"), res.stderr
    assert "libibumad3" in res.stdout


def test_no_umad_devices_is_a_clear_error():
    if rdma.umad.get_umad_devices():
        pytest.skip("this host has umad devices")
    with pytest.raises(RDMAError, match="no umad devices"):
        rdma.umad.get_umad()


def test_port_arguments_are_checked():
    with pytest.raises(ValueError, match="port_num"):
        _umad.Port("x", 300)
    with pytest.raises(TypeError):
        _umad.get_ca(5)
    with pytest.raises(SysError) as ei:
        _umad.get_ca("nope0")
    assert ei.value.func == "umad_get_ca" and "nope0" in str(ei.value)


def test_sa_path_needs_an_sm():
    class P:
        sm_lid = 0
    with pytest.raises(RDMAError, match="no subnet manager"):
        rdma.umad.sa_path(P())
