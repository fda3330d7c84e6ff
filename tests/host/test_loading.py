"""The dlopen and linked builds: import without rdma-core, clean errors."""
import os
import re
import subprocess

import pytest

import rdma
import rdma._ibverbs as _ibverbs
from host_helpers import run_py


def _undefined_symbols(so):
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_default_build_is_dlopen_and_needs_no_libibverbs():
    """The default build resolves no ibv_* symbol at load time."""
    assert _ibverbs._VERBS_LINKAGE == "dlopen"
    undefined = _undefined_symbols(_ibverbs.__file__)
    verbs = {s for s in undefined if re.match(r"_?_*ibv_", s.split("@")[0])}
    assert not verbs, f"dlopen build references libibverbs symbols: {verbs}"
    ldd = subprocess.run(["ldd", _ibverbs.__file__], capture_output=True,
                         text=True).stdout
    assert "libibverbs" not in ldd


def test_missing_libibverbs_imports_and_names_the_package():
    """Pointing the loader at a library that does not exist: import works,
    listing the verbs provider raises SysError naming the package."""
    code = (
        "import rdma\n"
        "try:\n"
        "    rdma.get_devices('verbs')\n"
        "except rdma.SysError as e:\n"
        "    print('ERR', e.errno, e.func, e)\n"
        "else:\n"
        "    print('NOERR')\n"
        "p = rdma.get_end_port()\n"
        "print('AUTO', p.provider)\n"
    )
    res = run_py(code, env={"RDMA_IBVERBS_LIBRARY": "libdoes-not-exist.so.9"})
    assert res.returncode == 0, res.stderr
    assert "ERR 2 dlopen" in res.stdout
    assert "libdoes-not-exist.so.9" in res.stdout
    assert "libibverbs1" in res.stdout          # the Debian package
    # Auto mode skips the missing library and uses the software fabric.
    assert "AUTO ucx" in res.stdout


@pytest.mark.parametrize("env, call, lib, first", [
    ("RDMA_IBVERBS_LIBRARY", "rdma.get_devices('verbs')", "libibverbs",
     "ibv_get_device_list"),
    ("RDMA_UMAD_LIBRARY", "rdma.get_devices('umad')", "libibumad",
     "umad_init")])
def test_library_without_the_symbols_names_the_first_missing(env, call, lib,
                                                             first):
    """Pointing a loader (csrc/dlload.c, shared by both extensions) at a
    library that loads but is not the one asked for (libz): SysError
    ENOSYS from dlsym naming the library and its first missing symbol;
    asking again fails the same way (nothing half loaded is kept)."""
    code = ("import rdma\n"
            "for _ in range(2):\n"
            "    try:\n"
            f"        {call}\n"
            "    except rdma.SysError as e:\n"
            "        print('ERR', e.errno, e.func, e)\n"
            "    else:\n"
            "        print('NOERR')\n")
    res = run_py(code, env={env: "libz.so.1"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], res.stdout
    assert lines[0].startswith("ERR 38 dlsym"), res.stdout
    assert f"{lib} has no symbol {first} (rdma-core too old?)" in lines[0]



def test_ucx_loader_names_the_first_missing_symbol(tmp_path):
    """The fabric loads libucp through the same loader (csrc/dlload.c, also
    built into librdma_fabric.so): a library that is not libucp fails with
    SysError ENOSYS from dlsym naming the file, the first missing symbol
    and the UCX version needed, the same way when asked again."""
    os.chmod(tmp_path, 0o700)
    code = ("import rdma\n"
            "for _ in range(2):\n"
            "    try:\n"
            "        rdma.get_end_port(provider='ucx')\n"
            "    except rdma.SysError as e:\n"
            "        print('ERR', e.errno, e.func, e)\n"
            "    else:\n"
            "        print('NOERR')\n")
    res = run_py(code, env={"RDMA_UCX_LIBRARY": "libz.so.1",
                            "RDMA_UCX_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], res.stdout
    assert lines[0].startswith("ERR 38 dlsym"), res.stdout
    assert ("libz.so.1 has no symbol ucp_config_read (UCX too old? 1.13 or "
            "later is needed)") in lines[0], res.stdout

def test_no_kernel_support_means_no_devices():
    """On this host (no RDMA in the kernel) the list is empty, not an error."""
    assert rdma.get_devices("verbs") == []
    with pytest.raises(rdma.RDMAError, match="no RDMA devices"):
        rdma.get_end_port(provider="verbs")
    with pytest.raises(rdma.SysError) as ei:
        rdma.ibverbs.Context("rxe0")
    assert ei.value.func == "ibv_open_device" and "rxe0" in str(ei.value)


def test_unknown_provider_rejected():
    with pytest.raises(ValueError, match="unknown RDMA provider 'nope'"):
        rdma.get_devices("nope")
    with pytest.raises(ValueError, match="unknown RDMA provider"):
        rdma.ibverbs.Context("x", provider="nope")


def test_provider_env_variable():
    res = run_py("import rdma; rdma.get_devices()",
                 env={"RDMA_PROVIDER": "bogus"})
    assert (res.returncode != 0 and
            "unknown RDMA provider 'bogus'" in res.stderr)


def test_linked_variant_links_libibverbs_and_imports(linked_variant):
    so = next((linked_variant / "rdma").glob("_ibverbs*.so"))
    ldd = subprocess.run(["ldd", str(so)], capture_output=True,
                         text=True).stdout
    assert "libibverbs.so.1" in ldd
    res = run_py("import rdma, rdma._ibverbs as m; "
                 "print(m.__file__, m._VERBS_LINKAGE, "
                 "rdma.get_devices('verbs'))",
                 pythonpath=linked_variant)
    assert res.returncode == 0, res.stderr
    assert str(linked_variant) in res.stdout and "linked []" in res.stdout
