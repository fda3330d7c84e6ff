"""Every example script runs on the software fabric and succeeds.

Each script of examples/ (the python-rdma usage examples and the typical
application) runs in its own process with RDMA_PROVIDER=ucx, bounded by its
--timeout and by the subprocess timeout; it must exit 0 and print its
final "OK" (ud_multicast.py may instead print "SKIP:" when the provider
has no multicast, which skips its test with that reason).  Without the
software fabric the tests are skipped, naming the missing provider.
"""
import os
import subprocess
import sys

import pytest

from host_helpers import ROOT

EXAMPLES = ROOT / "examples"

#: example script -> extra arguments
CASES = {
    "ud_qp_setup.py": [],
    "ud_several_destinations.py": ["--count", "4"],
    "ud_response_path.py": ["--requests", "3"],
    "nocm_rc.py": ["--loopback"],
    "wc_errors.py": [],
    "completion_channels.py": [],
    "memory_and_bufferpool.py": [],
    "rc_application.py": [],
    "ud_multicast.py": [],
    "virtual_qp.py": ["--loopback"],
}
#: the examples that predate these and need other things (SA, Cython)
OTHER = {"list_devices.py", "sa_resolve_path.py", "_example_util.py"}


def fabric_missing():
    """None if the software fabric has a device, else why not."""
    try:
        import rdma
        import rdma._ibverbs
    except ImportError as e:
        return f"rdma is not importable: {e}"
    if "ucx" not in rdma._ibverbs._providers():
        return ("the software fabric provider 'ucx' is not built in "
                f"(providers: {', '.join(rdma._ibverbs._providers())})")
    try:
        if not rdma.get_devices("ucx"):
            return "the 'ucx' provider lists no device"
    except Exception as e:          # noqa: BLE001 - any reason is a skip
        return f"the 'ucx' provider is not usable: {e}"
    return None


@pytest.fixture(scope="module")
def fabric_env():
    why = fabric_missing()
    if why is not None:
        pytest.skip(f"needs the software fabric (RDMA_PROVIDER=ucx): {why}")
    env = dict(os.environ)
    env["RDMA_PROVIDER"] = "ucx"
    env.pop("RDMA_DEVICE", None)
    return env


def run_example(name, args, env, timeout=30):
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args,
                           "--timeout", str(timeout)],
                          capture_output=True, text=True, env=env,
                          timeout=timeout + 60, cwd=str(ROOT))


def test_every_example_is_tested():
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    assert scripts - OTHER == set(CASES), \
        "examples/ and CASES disagree: add the new example to CASES"


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_documents_itself(name):
    text = (EXAMPLES / name).read_text()
    doc = text.split('"""')[1]
    assert "Run:" in doc and "Exit status" in doc, \
        f"{name}: the docstring must say how to run it and what it checks"
    res = subprocess.run([sys.executable, str(EXAMPLES / name), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for opt in ("--device", "--provider", "--gid-index", "--timeout"):
        assert opt in res.stdout, f"{name} --help lacks {opt}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs_on_the_fabric(name, fabric_env):
    res = run_example(name, CASES[name], fabric_env)
    out = res.stdout.strip().splitlines()
    if res.returncode == 0 and out and out[-1].startswith("SKIP:"):
        assert name == "ud_multicast.py", f"{name} may not skip"
        pytest.skip(out[-1])
    assert res.returncode == 0, \
        f"{name} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert out and out[-1] == "OK", res.stdout
    assert "FAILED" not in res.stderr


def test_virtual_qp_example_in_spray_mode(fabric_env):
    """virtual_qp.py in its other mode (CASES runs dqplb), with a message
    of one byte more than four fragments on three data QPs."""
    res = run_example("virtual_qp.py", ["--loopback", "--mode", "spray",
                                        "--qps", "3", "--size", "16385"],
                      fabric_env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == "OK", res.stdout
    assert "B: 8 messages of 16385 bytes" in res.stdout


def test_a_failing_example_says_why_in_one_line(fabric_env):
    """Failure is an exit status and one line on stderr, not a traceback."""
    res = run_example("ud_qp_setup.py", ["--device", "no_such_device0"],
                      fabric_env)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "FAILED" in lines[0] and \
        "no_such_device0" in lines[0], res.stderr
