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
            "08_bandwidth_latency_sweep"]
#: notebooks that must show a plot
PLOTS = {"02_qp_state_machine", "08_bandwidth_latency_sweep"}
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
    nb = execute(name, kernel)
    outputs = [o for c in nb.cells if c.cell_type == "code"
               for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs
                   if o.output_type == "stream" and o.name == "stdout")
    assert "ucx" in text, "the notebook did not run on the software fabric"
    if name in PLOTS:
        assert any("image/png" in o.get("data", {}) for o in outputs), \
            f"{name} shows no plot"
