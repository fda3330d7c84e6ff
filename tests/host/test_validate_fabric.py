"""`ibtool validate` on the software fabric: the whole shipped suite passes,
and a wrong GID index fails with a message naming it."""
import subprocess
import sys

import pytest

import rdma


@pytest.fixture(scope="module")
def fabric():
    try:
        return rdma.get_end_port(provider="ucx")
    except (rdma.RDMAError, ValueError) as e:
        pytest.skip(f"no software fabric device: {e}")


def validate(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "rdma", "validate",
                           "--provider", "ucx", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_validate_passes_on_the_fabric(fabric, tmp_path):
    xml = tmp_path / "v.xml"
    res = validate("--junitxml", str(xml))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "PASSED" in res.stdout and "test_transfer" in res.stdout
    assert xml.exists() and "testsuite" in xml.read_text()


def test_validate_names_a_bad_gid_index(fabric):
    res = validate("--quick", "--gid-index", "5")
    assert res.returncode == 1, res.stdout[-3000:]
    assert "GID index 5" in res.stdout
