"""``ibtool simnet`` and :class:`rdma.simnet.SimNet`: a simulated subnet
(ibsim + opensm) in one command, found again by name from another
process, used by saquery, ibtool and rdma in its environment, stopped
without leaving a process; the ``rdma_simnet`` fixture in a user's pytest
run; and the commands of docs/sa.rst's "A simulated subnet in one
command", run as written."""
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rdma.simnet import SimNet, SimNetError, missing_tool

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "sa.rst"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(missing_tool() is not None,
                                reason=str(missing_tool()))


def _env(state_root, **extra):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST"):
        e.pop(k, None)
    e["RDMA_SIMNET_DIR"] = str(state_root)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    e["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e.update(extra)
    return e


def ibtool(args, state_root, timeout=90, **kw):
    env = _env(state_root, **kw.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "rdma"] + args, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          **kw)


def _processes_naming(text):
    """Live processes whose command line contains *text*."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]
        except OSError:
            continue
        if text.encode() in cmd and state.split()[0] != "Z":
            found.append((pid, cmd.replace(b"\0", b" ").decode()))
    return found


@pytest.fixture
def state_root(tmp_path):
    root = tmp_path / "state"
    yield root
    for d in root.glob("*") if root.exists() else []:
        try:
            SimNet.attach(d.name, root=root).stop()
        except SimNetError:
            pass


def test_up_query_status_down(state_root, tmp_path):
    """up prints eval-able exports; saquery and ibtool saquery answer in
    that environment; status, a second up, down, and nothing is left."""
    # RDMA_PROVIDER=ucx in the shell would point rdma at ucx0: unset.
    up = ibtool(["simnet", "up", "--topology", "line:3"], state_root,
                env={"RDMA_PROVIDER": "ucx"})
    assert up.returncode == 0, up.stderr
    exports = dict(re.findall(r"^export (\w+)=(\S+)$", up.stdout, re.M))
    assert set(exports) == {"LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST"}
    assert exports["SIM_HOST"] == "Hca2"
    assert "is up: line:3, 3 HCAs, opensm on Hca1" in up.stderr
    script = up.stdout + "saquery NR\n" \
        f"{sys.executable} -m rdma saquery NR\n"
    assert up.stdout.startswith("unset RDMA_PROVIDER\n"), up.stdout
    q = subprocess.run(["sh", "-ec", script], cwd=tmp_path,
                       env=_env(state_root, RDMA_PROVIDER="ucx"),
                       capture_output=True,
                       text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    # 3 HCAs and 3 switches, from diags and from ibtool
    assert q.stdout.count("NodeRecord dump") == 12, q.stdout

    st = ibtool(["simnet", "status"], state_root)
    assert st.returncode == 0 and "default: up, line:3" in st.stdout, st
    again = ibtool(["simnet", "up"], state_root)
    assert again.returncode == 1
    assert "already up" in again.stderr and "Traceback" not in again.stderr
    env = ibtool(["simnet", "env", "--node", "Hca3"], state_root)
    assert "export SIM_HOST=Hca3" in env.stdout, env.stderr

    down = ibtool(["simnet", "down"], state_root)
    assert down.returncode == 0 and "stopped" in down.stderr, down.stderr
    assert _processes_naming(exports["IBSIM_SOCKNAME"]) == []
    assert _processes_naming(str(state_root)) == []
    assert not (state_root / "default").exists()
    for action in ("status", "down", "env"):
        r = ibtool(["simnet", action], state_root)
        assert r.returncode == 1 and "no simulated subnet named " \
            "'default' is up" in r.stderr, (action, r.stderr)


def test_up_shell_stops_when_the_shell_exits(state_root, tmp_path):
    r = ibtool(["simnet", "up", "--name", "sh1", "--topology", "line:2",
                "--shell"], state_root, cwd=tmp_path,
               env={"SHELL": "/bin/sh"},
               input="echo host=$SIM_HOST name=$RDMA_SIMNET\n"
                     "saquery NR | grep -c 'NodeRecord dump'\nexit 3\n")
    assert r.returncode == 3, r.stderr
    assert "host=Hca2 name=sh1" in r.stdout and "\n4\n" in r.stdout, r
    assert _processes_naming(str(state_root)) == []
    assert not (state_root / "sh1").exists()


@pytest.mark.parametrize("have,package", [((), "ibsim-utils"),
                                          (("ibsim", "timeout"), "opensm")])
def test_missing_tool_names_the_package(state_root, tmp_path, have,
                                        package):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in have:
        (bindir / tool).symlink_to(shutil.which(tool))
    r = ibtool(["simnet", "up"], state_root, env={"PATH": str(bindir)})
    assert r.returncode == 1
    assert f"Debian's {package} package" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_topology_is_one_line(state_root):
    for topo, why in (("line:x", "takes a number"),
                      ("/nonexistent/topo", "no topology file"),
                      ("fat-tree:5", "even")):
        r = ibtool(["simnet", "up", "--topology", topo], state_root)
        assert r.returncode == 1 and why in r.stderr, (topo, r.stderr)
        assert "Traceback" not in r.stderr


def test_simnet_class_and_attach(tmp_path):
    with SimNet("fat-tree:4", "cls", root=tmp_path) as net:
        assert net.hcas == [f"Hca{i}" for i in range(1, 9)]
        other = SimNet.attach("cls", root=tmp_path)
        assert other.is_up() and other.sockname == net.sockname
        out = net.python("import rdma; ep = rdma.get_end_port(); "
                         "print(ep, ep.sm_lid)", node="Hca8")
        assert out.startswith("ibsim0/1 ") and int(out.split()[1]) > 0
        with pytest.raises(SimNetError, match="already up"):
            SimNet("line:2", "cls", root=tmp_path).start()
        pids = [p for ps in net.processes().values() for p in ps]
        assert len(pids) == 4       # timeout + ibsim, timeout + opensm
    assert not net.is_up() and not (tmp_path / "cls").exists()
    assert not any(Path(f"/proc/{p}").exists() and
                   "Z" != Path(f"/proc/{p}/stat").read_text()
                   .rsplit(")", 1)[1].split()[0] for p in pids)


USER_TESTS = '''
import sys


def test_saquery_and_rdma(rdma_simnet):
    out = rdma_simnet.run(["saquery", "NR"]).stdout
    assert out.count("NodeRecord dump") == 4      # line:2: 2 HCAs, 2 switches
    code = "import rdma; print(rdma.get_end_port().lid)"
    assert int(rdma_simnet.python(code, node="Hca1")) > 0
'''


def _doc_section():
    text = DOC.read_text()
    start = text.index("A simulated subnet in one command\n")
    end = text.index("Testing on a simulated fabric\n", start)
    return text[start:end]


def _blocks(section):
    """[(directive line, caption or None, code)] of the section's
    code-blocks, and the literal block after "start shimmed ones::"."""
    out = []
    lines = section.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        head = ln.startswith(".. code-block::") or ln.endswith("::") and \
            not ln.startswith("..")
        if not head:
            i += 1
            continue
        caption = None
        i += 1
        while i < len(lines) and lines[i].strip().startswith(":"):
            m = re.match(r"\s*:caption:\s*(\S+)", lines[i])
            caption = m.group(1) if m else caption
            i += 1
        body = []
        while i < len(lines) and (not lines[i].strip() or
                                  lines[i].startswith("    ")):
            body.append(lines[i])
            i += 1
        out.append((ln, caption, textwrap.dedent("\n".join(body)).strip()))
    return out


def test_doc_section_runs_as_written(tmp_path):
    """docs/sa.rst's "A simulated subnet in one command": its shell lines,
    its resolve.py and its test_my_subnet.py, run as written (ibtool and
    python3 of this environment first on PATH), then its rdma_simnet
    example in an ordinary pytest run."""
    blocks = _blocks(_doc_section())
    shells = [b for h, c, b in blocks if h.endswith(":: sh")]
    files = {c: b for h, c, b in blocks if c}
    assert len(shells) == 1 and set(files) == {"resolve.py",
                                               "test_my_subnet.py"}
    for name, code in files.items():
        (tmp_path / name).write_text(code + "\n")
    work = tmp_path / "work"
    work.mkdir()
    for name in files:
        shutil.copy(tmp_path / name, work / name)
    assert (BIN / "python3").exists() and (BIN / "ibtool").exists()
    state = tmp_path / "state"
    env = _env(state)                   # this environment's bin first
    try:
        r = subprocess.run(["sh", "-ec", shells[0]], cwd=work, env=env,
                           capture_output=True, text=True, timeout=240)
    finally:
        if (state / "default").exists():
            subprocess.run([sys.executable, "-m", "rdma", "simnet", "down"],
                           env=env, capture_output=True, timeout=60)
    out = r.stdout
    assert r.returncode == 0, (out, r.stderr)
    assert re.search(r"^default: up, fat-tree:4, 8 HCAs", out, re.M), out
    assert out.splitlines().count("14") == 2, out   # diags and ibtool agree
    assert "14 nodes: Hca1 Hca2" in out and "to Hca8: DLID" in out, out
    assert "1 passed" in out, out
    assert not (state / "default").exists()
    assert _processes_naming(str(state)) == []

    # The rdma_simnet example: an ordinary (unshimmed) pytest run.
    example = [b for h, c, b in blocks if h.endswith("start shimmed ones::")]
    assert len(example) == 1
    code = example[0].replace("/path/to/test_my_subnet.py",
                              str(tmp_path / "test_my_subnet.py"))
    (work / "test_fixture_example.py").write_text(code + "\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                        "no:cacheprovider", "test_fixture_example.py"],
                       cwd=work, env=_env(state), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    assert _processes_naming(str(work)) == []


def test_fixture_in_a_users_pytest_run(tmp_path):
    """A user's module using rdma_simnet, in an ordinary pytest run, with
    --rdma-simnet-topology; the subnet is gone afterwards."""
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                        "no:cacheprovider", "--rdma-simnet-topology",
                        "line:2", f"--basetemp={tmp_path / 'bt'}",
                        "test_user.py"], cwd=tmp_path,
                       env=_env(tmp_path / "unused"), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    assert time.monotonic() - t0 < 120
    assert _processes_naming(str(tmp_path / "bt")) == []


def test_ctrl_c_in_the_shell_keeps_the_subnet(state_root, tmp_path):
    """SIGINT to ibtool while its --shell runs (Ctrl-C at the prompt
    reaches the whole foreground group) does not stop the subnet under
    the shell; the shell's own children still get SIGINT's default."""
    r = ibtool(["simnet", "up", "--name", "sh2", "--topology", "line:2",
                "--shell"], state_root, cwd=tmp_path,
               env={"SHELL": "/bin/sh"},
               input="kill -INT $PPID; sleep 0.5\n"
                     "saquery NR | grep -c 'NodeRecord dump'\n"
                     "sh -c 'kill -INT $$; sleep 5'; echo child=$?\n"
                     "exit 0\n")
    assert r.returncode == 0, r.stderr
    assert "\n4\n" in "\n" + r.stdout and "child=130" in r.stdout, r
    assert _processes_naming(str(state_root)) == []
