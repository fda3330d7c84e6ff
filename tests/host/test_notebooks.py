"""The teaching notebooks: stored clean, and each executes top to bottom.

Every notebooks/*.ipynb runs with nbclient in a real IPython kernel (the
venv's interpreter, through a kernel spec written to a temporary
directory, so no manual `ipykernel install` is needed), with the
notebook's folder as working directory and RDMA_PROVIDER=ucx.  A failing
cell fails the test.  Without the software fabric the execution tests are
skipped, naming the missing provider.
"""
import json
import os
import sys

import pytest

from host_helpers import ROOT
from test_examples import fabric_missing

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = ROOT / "notebooks"
EXPECTED = ["01_objects_and_lifetime", "02_qp_state_machine",
            "03_send_recv", "04_rdma_write_read", "05_atomics",
            "06_ud_and_grh", "07_completion_channels",
            "08_bandwidth_latency_sweep", "09_sa_on_a_simulated_subnet",
            "10_virtual_qp_striping", "11_connection_manager"]
#: notebooks that must show a plot
PLOTS = {"02_qp_state_machine", "08_bandwidth_latency_sweep",
         "10_virtual_qp_striping"}
#: notebooks that run on a simulated InfiniBand subnet (ibsim + opensm)
#: instead of the software fabric, and what their output must show
SIMNET = {"09_sa_on_a_simulated_subnet": "our port: ibsim0/1"}
KERNEL = "rdma-test-python3"


def test_the_notebooks_are_there():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_is_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and any(c.cell_type == "markdown" for c in nb.cells)
    for c in code:
        assert c.outputs == [] and c.execution_count is None, \
            f"{name}: a code cell has stored outputs"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A kernel spec for this interpreter, in a temporary JUPYTER_PATH."""
    why = fabric_missing()
    if why is not None:
        pytest.skip(f"needs the software fabric (RDMA_PROVIDER=ucx): {why}")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher",
                 "-f", "{connection_file}"],
        "display_name": "rdma tests (venv python3)", "language": "python"}))
    saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "RDMA_PROVIDER",
                                            "RDMA_DEVICE", "MPLBACKEND")}
    os.environ["JUPYTER_PATH"] = str(root)
    os.environ["RDMA_PROVIDER"] = "ucx"
    os.environ.pop("RDMA_DEVICE", None)
    os.environ.pop("MPLBACKEND", None)
    yield KERNEL
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def execute(name, kernel_name, timeout=120):
    from nbclient import NotebookClient
    path = NOTEBOOKS / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernel_name, timeout=timeout,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()        # raises CellExecutionError on a failing cell
    return nb


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_executes(name, kernel):
    if name in SIMNET:
        from rdma.simnet import missing_tool
        if missing_tool():
            pytest.skip(f"needs a simulated subnet: {missing_tool()}")
    nb = execute(name, kernel)
    outputs = [o for c in nb.cells if c.cell_type == "code"
               for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs
                   if o.output_type == "stream" and o.name == "stdout")
    if name in SIMNET:
        assert SIMNET[name] in text, "it did not run on the simulated subnet"
    else:
        assert "ucx" in text, "the notebook did not run on the software " \
            "fabric"
    if name in PLOTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), \
            f"{name} shows no plot"


def test_state_diagram_labels_do_not_overlap():
    """Notebook 02's QP state diagram, drawn with the Agg backend: no two
    texts overlap, and no edge label covers a state's box."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nb = nbformat.read(NOTEBOOKS / "02_qp_state_machine.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code"
                and "FancyBboxPatch" in c.source)
    plt.close("all")
    exec(cell.source.replace("plt.show()", ""), {})
    fig = plt.gcf()
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    texts = [(t.get_text(), t.get_window_extent(r)) for t in ax.texts
             if t.get_text()]          # (the arrows are empty annotations)
    boxes = [p.get_window_extent(r) for p in ax.patches]
    states = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
    assert {s for s, _ in texts} >= states
    for i, (s1, e1) in enumerate(texts):
        for s2, e2 in texts[i + 1:]:
            assert not e1.overlaps(e2), f"{s1!r} overlaps {s2!r}"
        if s1 not in states:
            for b in boxes:
                assert not e1.overlaps(b), f"{s1!r} covers a state's box"
    plt.close("all")


def test_readme_notebook_command_shows_the_outputs():
    """The README's command for running a notebook, as written (from the
    checkout, with its .venv): it prints the notebook with the outputs of
    its cells (``jupyter execute`` alone printed nothing)."""
    import re
    import subprocess
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^(\.venv/bin/jupyter .*?\.ipynb)", text.replace(
        "\\\n    ", ""), re.M)
    assert m, "no jupyter command in the README"
    cmd = m.group(1)
    if not (ROOT / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("no .venv in this checkout (the README's setup)")
    env = dict(os.environ, RDMA_PROVIDER="ucx")
    r = subprocess.run(cmd, shell=True, cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # An output of the first cell: the port it found, on the fabric.
    assert re.search(r"^    ucx0/1: provider ucx", r.stdout, re.M), \
        r.stdout[:3000]
