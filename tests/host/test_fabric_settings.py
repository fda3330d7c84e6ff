"""The one table of settings (issue #25, item 6): csrc/settings.h holds
every environment variable the C core reads; a fabric node reads them
once when it starts (a value that does not parse is EINVAL naming it, an
unknown RDMA_UCX_* name a warning naming the closest setting);
``python -m rdma.fabric config`` prints them from the table the fabric
library exports; docs/fabric.rst lists exactly the table's names.

Real fabric nodes in fresh interpreters (tests/host/host_helpers.run_py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import rdma
from host_helpers import ROOT, run_py

settings = pytest.importorskip("rdma.fabric.settings")

try:
    TABLE = settings.settings()
except FileNotFoundError as e:     # the fabric library was not built
    pytest.skip(str(e), allow_module_level=True)
NAMES = [s.name for s in TABLE]
#: Where the rdma package this test imported lives (this tree, or a build
#: variant such as build/variants/asan): the subprocesses use the same.
RDMA_PATH = os.path.dirname(os.path.dirname(rdma.__file__))

# Open ucx0 (a node starts) and report the outcome as one line.
OPEN = """
import rdma
try:
    with rdma.get_verbs("ucx0") as ctx:
        ctx.pd()
    print("opened")
except OSError as e:
    print("errno", e.errno, e)
"""


def _env(**extra: str) -> dict:
    env = {"RDMA_PROVIDER": "ucx"}
    env.update(extra)
    return env


def _open(**extra: str) -> subprocess.CompletedProcess:
    r = run_py("import os; os.environ['RDMA_PROVIDER'] = 'ucx'\n" + OPEN,
               pythonpath=RDMA_PATH, env=_env(**extra))
    assert r.returncode == 0, r.stderr
    return r


def _config(*args: str, **extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=RDMA_PATH, **extra)
    return subprocess.run([sys.executable, "-P", "-m", "rdma.fabric",
                           "config", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_table_names_are_unique_and_every_row_is_complete():
    assert len(NAMES) == len(set(NAMES))
    for s in TABLE:
        assert s.type and s.reader and s.meaning, s
        assert s.reader in ("fabric", "loader", "front end"), s


def _documented() -> list[str]:
    text = (ROOT / "docs" / "fabric.rst").read_text()
    m = re.search(r"\nSettings\n-+\n(.*?)\n\S[^\n]*\n-{4,}\n", text, re.S)
    assert m, "docs/fabric.rst has no Settings section"
    table = m.group(1)[m.group(1).index("\n===="):]
    return re.findall(r"^``([A-Z][A-Z0-9_]+)``", table, re.M)


def test_docs_list_exactly_the_table():
    """docs/fabric.rst's Settings table names every setting of the table
    and no other (a row added to csrc/settings.h must be documented)."""
    documented = _documented()
    assert len(documented) == len(set(documented)), documented
    missing = sorted(set(NAMES) - set(documented))
    unknown = sorted(set(documented) - set(NAMES))
    assert not missing, f"settings missing from docs/fabric.rst: {missing}"
    assert not unknown, f"docs/fabric.rst names no setting: {unknown}"


def test_no_getenv_outside_the_table():
    """Only csrc/settings.c reads the environment (the ibsim shim in
    csrc/umad2sim/, a test tool with ibsim's own variables, aside)."""
    found = []
    for p in sorted((ROOT / "csrc").rglob("*.[ch]")):
        if p.name == "settings.c" or "umad2sim" in p.parts:
            continue
        for n, line in enumerate(p.read_text().split("\n"), 1):
            if re.search(r"\b(secure_)?getenv\s*\(", line):
                found.append(f"{p.relative_to(ROOT)}:{n}")
    assert not found, found


def test_config_prints_values_and_sources():
    r = _config("--json", RDMA_UCX_CMA_MIN="8K", RDMA_UCX_SECRET="s3cret",
                RDMA_UCX_NO_RING="")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    by = {v["name"]: v for v in out["settings"]}
    assert list(by) == NAMES
    assert by["RDMA_UCX_CMA_MIN"]["value"] == "8K"
    assert by["RDMA_UCX_CMA_MIN"]["source"] == "environment"
    assert by["RDMA_UCX_NO_RING"]["source"] == "default"   # empty: unset
    assert by["RDMA_UCX_NO_RING"]["value"] == "0"
    assert by["RDMA_UCX_SECRET"]["value"] == "(set)"
    assert "s3cret" not in r.stdout
    assert all(v["error"] is None for v in by.values())
    text = _config(RDMA_UCX_CMA_MIN="8K")
    assert text.returncode == 0, text.stderr
    line = [x for x in text.stdout.split("\n")
            if x.startswith("RDMA_UCX_CMA_MIN ")]
    assert line and "8K" in line[0] and "environment" in line[0], text.stdout


def test_config_refuses_a_bad_value_and_names_unknown_ones():
    r = _config("--json", RDMA_UCX_CMA="2", RDMA_UCX_CMAMIN="1")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    err = {v["name"]: v["error"] for v in out["settings"]}
    assert "RDMA_UCX_CMA=2" in err["RDMA_UCX_CMA"], err
    assert out["unknown"] == {"RDMA_UCX_CMAMIN": "RDMA_UCX_CMA_MIN"}
    r = _config(RDMA_UCX_CMAMIN="1")
    assert r.returncode == 0
    assert "did you mean RDMA_UCX_CMA_MIN?" in r.stderr


@pytest.mark.parametrize("name,value", [
    ("RDMA_UCX_CMA_MIN", "12q"), ("RDMA_UCX_CMA", "2"),
    ("RDMA_UCX_ADOPT", "maybe"), ("RDMA_UCX_NO_RING", "yes please"),
])
def test_a_node_refuses_a_value_that_does_not_parse(name, value):
    """Before the table these were read with strtoull/strcmp where they
    were used: 12q was 12 bytes, CMA=2 and ADOPT=maybe were ignored."""
    r = _open(**{name: value})
    assert r.stdout.startswith("errno 22 "), (r.stdout, r.stderr)
    assert f"{name}={value}" in r.stdout


def test_a_node_warns_of_an_unknown_name():
    r = _open(RDMA_UCX_NORING="1")
    assert r.stdout.strip() == "opened", (r.stdout, r.stderr)
    assert ("RDMA_UCX_NORING is not a setting of the fabric; did you mean "
            "RDMA_UCX_NO_RING?") in r.stderr


def test_a_node_starts_with_good_values():
    r = _open(RDMA_UCX_CMA_MIN="64K", RDMA_UCX_ADOPT="0",
              RDMA_UCX_NO_RING="1", RDMA_UCX_CMA="0")
    assert r.stdout.strip() == "opened", (r.stdout, r.stderr)
    assert "not a setting" not in r.stderr
