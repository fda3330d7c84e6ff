"""``ibtool``'s shell completions (bash, zsh) and man pages: generated
from the argparse parsers (rdma.cli.completion, rdma.cli.manpages), the
copies installed by pip (rdma/cli/data/, setup.py's data files) are
current, and they work in a real bash, zsh and man."""
import os
import shutil
import subprocess
import sys

import pytest

from rdma.cli import COMMANDS
from rdma.cli import _argspec, completion, manpages

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "rdma", "cli", "data")
BASH = os.path.join(DATA, "bash", "ibtool")
ZSH = os.path.join(DATA, "zsh", "_ibtool")
MAN = os.path.join(DATA, "man")
REGENERATE = ("regenerate: python -m rdma.cli.completion bash > "
              "rdma/cli/data/bash/ibtool; python -m rdma.cli.completion "
              "zsh > rdma/cli/data/zsh/_ibtool; python -m rdma.cli.manpages "
              "rdma/cli/data/man")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_installed_copies_are_current():
    """What pip installs is what the parsers generate now."""
    assert _read(BASH) == completion.bash_script(), REGENERATE
    assert _read(ZSH) == completion.zsh_script(), REGENERATE
    want = manpages.pages()
    assert sorted(os.listdir(MAN)) == sorted(want), REGENERATE
    for name, text in want.items():
        assert _read(os.path.join(MAN, name)) == text, (name, REGENERATE)


def test_setup_installs_them():
    """setup.py's data files and pyproject's package data name them."""
    text = _read(os.path.join(ROOT, "setup.py"))
    for where in ("share/bash-completion/completions",
                  "share/zsh/site-functions", "share/man/man1",
                  'CLI_DATA + "bash/ibtool"', 'CLI_DATA + "zsh/_ibtool"',
                  'CLI_DATA + "man/*.1"'):
        assert where in text, where
    assert '"rdma.cli" = ["data/bash/ibtool", "data/zsh/_ibtool", ' \
           '"data/man/*.1"]' in _read(os.path.join(ROOT, "pyproject.toml"))


# -- bash --------------------------------------------------------------------

def bash_complete(*words):
    """COMPREPLY of _ibtool for the command line *words* (the last one is
    being completed), in a real bash with only the script loaded."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); '
              'COMP_CWORD=$(($# - 1)); _ibtool; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    res = subprocess.run(["bash", "--norc", "-c", script, "bash", BASH,
                          *words], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and not res.stderr, res.stderr
    return [w for w in res.stdout.split("\n") if w]


def test_bash_the_brief_example():
    res = subprocess.run(
        ["bash", "-c", f"source {BASH}; COMP_WORDS=(ibtool dev); "
                       f"COMP_CWORD=1; _ibtool; echo ${{COMPREPLY[@]}}"],
        capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["devices", "devinfo"], res.stderr


def test_bash_commands_and_top_options():
    assert bash_complete("ibtool", "") == \
        ["-h", "--help", "--version"] + list(COMMANDS)
    assert bash_complete("ibtool", "ibt") == ["ibtracert"]
    assert bash_complete("ibtool", "--v") == ["--version"]


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_bash_options_of_every_command(cmd):
    spec = {c.name: c for c in _argspec.commands()}[cmd]
    flags = [f for o in spec.options for f in o.flags]
    assert bash_complete("ibtool", cmd, "-") == flags
    assert "-h" in flags


def test_bash_values_and_positionals(tmp_path):
    assert bash_complete("ibtool", "perf", "--output", "") == \
        ["text", "csv", "json"]
    assert bash_complete("ibtool", "pingpong", "") == \
        ["rc", "uc", "ud", "srq"]
    # an option's value is not the positional: still the mode
    assert bash_complete("ibtool", "pingpong", "-d", "ucx0", "r") == ["rc"]
    assert bash_complete("ibtool", "pingpong", "rc", "") == []
    assert bash_complete("ibtool", "perf", "-A", "C") == ["CMP_AND_SWAP"]
    assert bash_complete("ibtool", "devinfo", "-d", "") == []
    f = tmp_path / "names.map"
    f.write_text("")
    assert bash_complete("ibtool", "ibnetdiscover", "--node-name-map",
                         str(tmp_path / "na")) == [str(f)]
    assert bash_complete("ibtool", "ibnetdiscover", str(tmp_path / "n")) \
        == [str(f)]


# -- zsh ---------------------------------------------------------------------

needs_zsh = pytest.mark.skipif(shutil.which("zsh") is None,
                               reason="zsh is not installed")


def zsh_complete(tmp_path, line):
    """What a real interactive zsh (compinit, our _ibtool in fpath) offers
    when TAB is pressed at the end of *line*."""
    fp = tmp_path / "fpath"
    fp.mkdir(exist_ok=True)
    shutil.copy(ZSH, fp / "_ibtool")
    out = tmp_path / "offered"
    if out.exists():
        out.unlink()
    res = subprocess.run(["zsh", "-f", os.path.join(HERE, "zsh_complete.zsh"),
                          str(fp), str(out), line], capture_output=True,
                         text=True, timeout=120)
    if res.returncode == 3:
        pytest.skip("zsh has no zsh/zpty module")
    words = out.read_text().split("\n")
    assert "--END--" in words, (res.stdout, res.stderr)
    return sorted({w for w in words if w and w != "--END--"})


@needs_zsh
def test_zsh_completes_in_a_real_shell(tmp_path):
    assert zsh_complete(tmp_path, "ibtool dev") == ["devices", "devinfo"]
    assert zsh_complete(tmp_path, "ibtool --v") == ["--version"]
    assert zsh_complete(tmp_path, "ibtool perf --output ") == \
        ["csv", "json", "text"]
    assert zsh_complete(tmp_path, "ibtool pingpong ") == \
        ["rc", "srq", "uc", "ud"]
    spec = {c.name: c for c in _argspec.commands()}["devinfo"]
    assert zsh_complete(tmp_path, "ibtool devinfo -") == \
        sorted(f for o in spec.options for f in o.flags)
    (tmp_path / "names.map").write_text("")
    assert zsh_complete(tmp_path, f"ibtool ibnetdiscover {tmp_path}/na") \
        == ["names.map"]


def test_zsh_script_parses():
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    res = subprocess.run(["zsh", "-n", ZSH], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr


# -- man pages ---------------------------------------------------------------

def test_manpages_command_writes_every_page(tmp_path):
    res = subprocess.run([sys.executable, "-m", "rdma.cli.manpages",
                          str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["ibtool.1"] + [f"ibtool-{c}.1" for c in COMMANDS])


@pytest.mark.skipif(shutil.which("man") is None, reason="no man")
@pytest.mark.parametrize("page", ["ibtool.1"] + [f"ibtool-{c}.1"
                                                 for c in COMMANDS])
def test_man_renders_every_page(page):
    res = subprocess.run(["man", "-l", "-P", "cat", "--warnings",
                          os.path.join(MAN, page)], capture_output=True,
                         text=True, timeout=60,
                         env=dict(os.environ, MANWIDTH="80", LC_ALL="C"))
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    text = res.stdout
    for head in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS"):
        assert f"\n{head}\n" in text, (head, text[:500])
    if page != "ibtool.1":
        cmd = page[len("ibtool-"):-2]
        spec = {c.name: c for c in _argspec.commands()}[cmd]
        assert f"ibtool {cmd}" in text
        for o in spec.options:      # every option is documented
            assert o.flags[-1] in text, o.flags
    else:
        flat = " ".join(text.split())
        for c in COMMANDS:
            assert f"ibtool-{c}(1)" in flat, c
