"""The README's Layout names every top-level module and folder of rdma/
and csrc/, and nothing that does not exist (issue #25, item 7)."""
from __future__ import annotations

import re

from host_helpers import ROOT

#: Build products and caches, not part of the layout.
IGNORED = re.compile(r"^(__pycache__|.*\.so|.*\.pyc|.*\.egg-info)$")


def _layout() -> dict[str, str]:
    """{path: its line} for each "- `path`, `path`: what" line of the
    README's Layout section."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"\n## Layout\n(.*?)(\n## |\Z)", text, re.S)
    assert m, "README.md has no Layout section"
    named: dict[str, str] = {}
    for line in m.group(1).split("\n"):
        if not line.startswith("- `"):
            continue
        head = line.split(": ", 1)[0]
        for path in re.findall(r"`([^`]+)`", head):
            if path.startswith(("rdma/", "csrc/")):
                assert path not in named, f"{path} named twice"
                named[path] = line
    return named


def _tree() -> set[str]:
    """Every top-level module and folder of rdma/ and csrc/."""
    out = set()
    for top in ("rdma", "csrc"):
        for p in (ROOT / top).iterdir():
            if not IGNORED.match(p.name):
                out.add(f"{top}/{p.name}" + ("/" if p.is_dir() else ""))
    return out


def test_layout_names_every_module_and_folder():
    missing = sorted(_tree() - set(_layout()))
    assert not missing, f"missing from the README's Layout: {missing}"


def test_layout_names_nothing_that_does_not_exist():
    gone = sorted(set(_layout()) - _tree())
    assert not gone, f"the README's Layout names what is not there: {gone}"


def test_each_entry_says_what_lives_there():
    short = [p for p, line in _layout().items()
             if len(line.split(": ", 1)[-1].split()) < 3]
    assert not short, f"entries with no description: {short}"
