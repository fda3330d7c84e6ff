"""``ibtool``'s commands are found by name: one table
(:data:`rdma.cli.COMMANDS`) maps each to the module of ``rdma.cli`` of the
same name, or, for an alias, to the module of the command it shares its
code with; only the module of the command being run is imported."""
import argparse
import importlib.util
import os
import subprocess
import sys

import pytest

import rdma.cli
from rdma.cli import COMMANDS

CLI_DIR = os.path.dirname(rdma.cli.__file__)
#: Modules of rdma/cli that are tools of their own, not ibtool commands.
NOT_COMMANDS = {"manpages", "completion"}


def _own_module(name):
    return "." + name.replace("-", "_")


def run(*args, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True,
                          text=True, timeout=120, **kw)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_has_a_module_of_its_name_or_is_an_alias(name):
    module, func, summary = COMMANDS[name]
    assert summary and not summary.endswith(".")
    if module != _own_module(name):
        # An alias: the module is another command's own module.
        owners = [n for n in COMMANDS if _own_module(n) == module and
                  COMMANDS[n][0] == module]
        assert owners, f"{name} maps to {module}, no command's own module"
    spec = importlib.util.find_spec("rdma.cli" + module)
    assert spec is not None and spec.origin == os.path.join(
        CLI_DIR, module[1:] + ".py")
    mod = rdma.cli.command_module(name)
    assert callable(getattr(mod, func)), f"{module} has no {func}"
    assert callable(mod.add_parser)


def test_every_command_module_is_in_the_table():
    """Each public module of rdma/cli is a command's (shared code lives in
    ``_``-prefixed modules)."""
    modules = {f[:-3] for f in os.listdir(CLI_DIR)
               if f.endswith(".py") and not f.startswith("_")}
    owned = {module[1:] for module, _, _ in COMMANDS.values()}
    assert modules - NOT_COMMANDS == owned


def test_each_module_builds_its_own_parser():
    parser = rdma.cli.build_parser()
    sub = next(a for a in parser._actions
               if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
    for name, p in sub.choices.items():
        assert p.prog == f"ibtool {name}"
        # a real parser, not the summary-only stand-in: it has -h
        assert any("-h" in a.option_strings for a in p._actions), name


def test_help_lists_every_command():
    res = run("-m", "rdma", "--help")
    assert res.returncode == 0, res.stderr
    listed = [line.split()[0] for line in res.stdout.splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == list(COMMANDS)
    for name, (_, _, summary) in COMMANDS.items():
        assert summary.split()[0] in res.stdout


def test_only_the_command_run_is_imported():
    res = run("-c", "import sys; from rdma.cli import main; "
                    "rc = main(['devices', '-q']); "
                    "print(sorted(m for m in sys.modules "
                    "if m.startswith('rdma.cli.')))")
    assert res.returncode == 0, res.stderr
    loaded = eval(res.stdout.splitlines()[-1])
    assert set(loaded) <= {"rdma.cli.devices", "rdma.cli._common"}
    res = run("-c", "import sys, contextlib, io\n"
                    "from rdma.cli import main\n"
                    "with contextlib.redirect_stdout(io.StringIO()):\n"
                    "    try:\n"
                    "        main(['--help'])\n"
                    "    except SystemExit:\n"
                    "        pass\n"
                    "print(sorted(m for m in sys.modules "
                    "if m.startswith('rdma.cli.')))")
    assert res.returncode == 0, res.stderr
    assert eval(res.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize("name", ["dump_mfts", "ibswitches",
                                  "validate-subnet", "ibtracert"])
def test_command_help_through_the_table(name):
    res = run("-m", "rdma", name, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"usage: ibtool {name} ")
