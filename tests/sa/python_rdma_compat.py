"""Run python-rdma's own ``ibtool`` on *our* ``rdma`` package.

python-rdma (github.com/jgunthorpe/python-rdma) is Python 2 and GPL, so
none of it is kept in this repository.  Given a checkout of it, this
module copies only its ``ibtool`` script and its ``libibtool/`` package
into a scratch directory, converts them to Python 3 mechanically (the
standard library's ``lib2to3`` fixers, nothing else: no edit adapts their
code to ours), and runs them with this repository's ``rdma`` package on
the path.  python-rdma's own ``rdma/`` package is never copied, so every
``import rdma...`` in their code reaches ours.

Use from the command line::

    python tests/sa/python_rdma_compat.py convert /tmp/pyrdma-src /tmp/py3
    python tests/sa/python_rdma_compat.py run /tmp/pyrdma-py3 -- ibstat

(``run`` only sets the paths; on ibsim the command must run through the
ibsim shim, see ``tests/sa/test_python_rdma_compat.py``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence

#: The repository whose ``rdma`` package their code must import.
ROOT = Path(__file__).resolve().parent.parent.parent

#: The only parts of python-rdma that are copied.
SCRIPT = "ibtool"
PACKAGE = "libibtool"


class CompatError(RuntimeError):
    """A python-rdma checkout cannot be converted or run."""


def _check_checkout(src: Path) -> None:
    if not src.is_dir():
        raise CompatError(f"{src} is not a directory (expected a checkout "
                          f"of github.com/jgunthorpe/python-rdma)")
    if not (src / SCRIPT).is_file():
        raise CompatError(f"{src} has no {SCRIPT!r} script: not a "
                          f"python-rdma checkout")
    if not (src / PACKAGE / "__init__.py").is_file():
        raise CompatError(f"{src} has no {PACKAGE}/__init__.py: not a "
                          f"python-rdma checkout")


def _fixers() -> List[str]:
    """lib2to3's full set of default fixers."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            import lib2to3.refactor as refactor
    except ImportError as exc:       # Python >= 3.13 has no lib2to3
        raise CompatError(
            f"this Python ({sys.version.split()[0]}) has no lib2to3; run the "
            f"converter with Python 3.12 or older") from exc
    return refactor.get_fixers_from_package("lib2to3.fixes")


def _drop_lone_semicolons(path: Path) -> None:
    """lib2to3's ``future`` fixer removes ``from __future__ import
    with_statement;`` but leaves its ``;`` alone on the line, which is a
    syntax error: drop such lines (python-rdma ends statements with ``;``)."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if ln.strip() != ";"]
    if len(kept) != len(lines):
        path.write_text("".join(kept))


#: What ``/`` meant in Python 2, for the converted files (what
#: ``futurize``'s ``old_div`` does): floor division of two ints.
_DIV_HELPER = (
    "def _py2_div(a, b):  # added by python_rdma_compat: Python 2's '/'\n"
    "    if isinstance(a, int) and isinstance(b, int):\n"
    "        return a // b\n"
    "    return a / b\n")


def _py2_division(path: Path) -> None:
    """Replace every ``a / b`` with ``_py2_div(a, b)`` (Python 2 floored
    the quotient of two ints; Python 3's ``/`` does not, and lib2to3 has
    no fixer for it) and define ``_py2_div`` at the top of the file.
    ``/=`` is not rewritten (python-rdma's ibtool has none: checked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        from lib2to3 import pygram, pytree
        from lib2to3.fixer_util import Call, Comma, Name
        from lib2to3.pgen2 import driver, token
    drv = driver.Driver(pygram.python_grammar_no_print_statement,
                        convert=pytree.convert)
    tree = drv.parse_string(path.read_text())
    if any(leaf.type == token.SLASHEQUAL for leaf in tree.leaves()):
        raise CompatError(f"{path} uses '/=': no mechanical conversion")
    changed = False
    # innermost first: a replaced term's clone then carries its converted
    # inner terms (a / (b / c))
    for node in list(tree.post_order()):
        if node.type != pygram.python_symbols.term or not any(
                c.type == token.SLASH for c in node.children):
            continue
        kids = [c.clone() for c in node.children]
        prefix = node.prefix
        left = kids[0]
        left.prefix = ""
        for op, right in zip(kids[1::2], kids[2::2]):
            right.prefix = " "
            if op.type == token.SLASH:
                left = Call(Name("_py2_div"), [left, Comma(), right])
            else:
                op.prefix = " "
                left = pytree.Node(pygram.python_symbols.term,
                                   [left, op, right])
        left.prefix = prefix
        node.replace(left)
        changed = True
    if changed:
        text = str(tree)
        lines = text.splitlines(keepends=True)
        head = 0
        while head < len(lines) and lines[head].startswith("#"):
            head += 1
        path.write_text("".join(lines[:head]) + _DIV_HELPER +
                        "".join(lines[head:]))


def convert(src: Path, dest: Path) -> Path:
    """Copy python-rdma's ``ibtool`` and ``libibtool/`` from checkout
    ``src`` into ``dest`` (created; it must not exist or be empty) and
    convert them to Python 3 in place with lib2to3's default fixers.

    Returns the path of the converted ``ibtool`` script.  The script is
    written as ``ibtool`` (as in the checkout) and nothing named ``rdma``
    is created in ``dest``.

    :raises CompatError: ``src`` is not a python-rdma checkout, ``dest``
        is not empty, or a file fails to convert.
    """
    src, dest = Path(src), Path(dest)
    _check_checkout(src)
    if dest.exists() and any(dest.iterdir()):
        raise CompatError(f"{dest} is not empty; give a new directory")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / SCRIPT, dest / SCRIPT)
    shutil.copytree(src / PACKAGE, dest / PACKAGE,
                    ignore=shutil.ignore_patterns("*.pyc", "__pycache__"))
    if (dest / "rdma").exists():     # never their rdma package
        raise CompatError(f"{dest / 'rdma'} exists; refusing to shadow ours")

    fixers = _fixers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        import lib2to3.refactor as refactor

    class Tool(refactor.RefactoringTool):
        def log_error(self, msg, *args, **kw):  # noqa: D102
            raise CompatError(msg % args)

    tool = Tool(fixers, {"print_function": False})
    files = [dest / SCRIPT] + sorted((dest / PACKAGE).glob("*.py"))
    for f in files:
        tool.refactor_file(str(f), write=True, doctests_only=False)
        _drop_lone_semicolons(f)
        _py2_division(f)
    for f in files:
        try:
            with warnings.catch_warnings():     # their invalid escapes
                warnings.simplefilter("ignore")
                compile(f.read_text(), str(f), "exec")
        except SyntaxError as exc:
            raise CompatError(f"{f} is not valid Python 3 after lib2to3: "
                              f"{exc}") from exc
    return dest / SCRIPT


def env_for(converted: Path, base: Optional[Dict[str, str]] = None
            ) -> Dict[str, str]:
    """The environment in which the converted tool imports ``libibtool``
    from ``converted`` and ``rdma`` from this repository."""
    converted = Path(converted)
    if not (converted / PACKAGE).is_dir():
        raise CompatError(f"{converted} holds no converted {PACKAGE}/ "
                          f"(run convert first)")
    if (converted / "rdma").exists():
        raise CompatError(f"{converted / 'rdma'} exists: python-rdma's own "
                          f"rdma package would shadow ours")
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(converted)] + ([old] if old else []))
    return env


def command(converted: Path, argv: Sequence[str]) -> List[str]:
    """The command line that runs the converted ``ibtool argv...``."""
    script = Path(converted) / SCRIPT
    if not script.is_file():
        raise CompatError(f"{script} is missing (run convert first)")
    return [sys.executable, "-W", "ignore::DeprecationWarning",
            str(script), *argv]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="op", required=True)
    c = sub.add_parser("convert", help="copy and convert ibtool/libibtool")
    c.add_argument("src", type=Path, help="python-rdma checkout")
    c.add_argument("dest", type=Path, help="new directory")
    r = sub.add_parser("run", help="run the converted ibtool on our rdma")
    r.add_argument("converted", type=Path)
    r.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    try:
        if a.op == "convert":
            print(convert(a.src, a.dest))
            return 0
        args = a.args[1:] if a.args[:1] == ["--"] else a.args
        return subprocess.call(command(a.converted, args),
                               env=env_for(a.converted))
    except CompatError as exc:
        print(f"python_rdma_compat: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
