"""Man pages for ``ibtool``, generated from its argparse parsers.

::

    python -m rdma.cli.manpages OUTDIR     # OUTDIR/ibtool.1, ibtool-CMD.1
    man -l OUTDIR/ibtool-devinfo.1

One page for ``ibtool`` (the commands, exit status, environment) and one
per command (``ibtool-devinfo.1``: synopsis, description, every option
and argument with its help text).  pip installs them with the package
into ``share/man/man1`` (``setup.py``'s data files, from the copies in
``rdma/cli/data/man/``, which ``tests/host/test_cli_completion.py``
checks against what this module generates).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Tuple

from rdma.cli._argspec import Command, Option, commands, top_parser

__all__ = ["pages", "write", "main"]

_SOURCE = "rdma {version}"
_MANUAL = "User Commands"


def _esc(text: str) -> str:
    """*text* as troff text: backslashes and minus signs escaped, and a
    line never starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def _flag(flag: str) -> str:
    return f"\\fB{_esc(flag)}\\fR"


def _option_head(o: Option) -> str:
    arg = f" \\fI{_esc(o.metavar)}\\fR" if o.takes_value else ""
    return ", ".join(_flag(f) + arg for f in o.flags)


def _paragraphs(text: str) -> List[str]:
    return [_esc(text)] if text else []


def _page(title: str, name: str, summary: str, version: str,
          synopsis: str,
          sections: List[Tuple[str, List[str]]]) -> str:
    out = [f'.TH {_esc(title.upper())} 1 "" '
           f'"{_SOURCE.format(version=version)}"'
           f' "{_MANUAL}"',
           ".nh",                       # no hyphenation of option names
           ".ad l",
           ".SH NAME",
           f"{_esc(name)} \\- {_esc(summary)}",
           ".SH SYNOPSIS",
           ".nf",
           _esc(synopsis),
           ".fi"]
    for head, lines in sections:
        if lines:
            out.append(f".SH {head}")
            out.extend(lines)
    return "\n".join(out) + "\n"


def _command_page(c: Command, version: str) -> str:
    args: List[str] = []
    for p in c.positionals:
        args += [".TP", f"\\fI{_esc(p.name)}\\fR"]
        args += _paragraphs(p.help) or [""]
    opts: List[str] = []
    for o in c.options:
        opts += [".TP", _option_head(o)]
        opts += _paragraphs(o.help) or [""]
    description = _paragraphs(c.description or c.summary[:1].upper() +
                              c.summary[1:] + ".")
    exit_status = _paragraphs(c.epilog) if "exit status" in c.epilog else \
        _paragraphs("0 on success, 1 for an RDMA or runtime failure, 2 for "
                    "bad usage, 130 when interrupted.")
    see = [f"\\fBibtool\\fR(1), \\fBpython \\-m rdma {_esc(c.name)} "
           f"\\-\\-help\\fR"]
    return _page(f"ibtool-{c.name}", f"ibtool-{c.name}", c.summary, version,
                 c.usage, [("DESCRIPTION", description),
                           ("ARGUMENTS", args), ("OPTIONS", opts),
                           ("EXIT STATUS", exit_status),
                           ("SEE ALSO", see)])


def _top_page(top: Command, cmds: List[Command], version: str) -> str:
    lines = []
    for c in cmds:
        lines += [".TP", f"\\fB{_esc(c.name)}\\fR", _esc(c.summary) + ".",
                  f"See \\fBibtool\\-{_esc(c.name)}\\fR(1)."]
    opts: List[str] = []
    for o in top.options:
        opts += [".TP", _option_head(o)] + _paragraphs(o.help)
    description = _paragraphs(
        "RDMA tools built on the rdma Python package (python -m rdma runs "
        "the same): verbs tools (devices, devinfo, pingpong, perf, "
        "validate, demo) and InfiniBand management tools named and shaped "
        "like infiniband-diags' and python-rdma's. Every command prints "
        "an error as one line on stderr.")
    exit_status = _paragraphs(
        "0 on success, 1 for an RDMA or runtime failure, 2 for bad usage "
        "(an unknown option, a wrong value, a device or port that is not "
        "there), 130 when interrupted; some commands add their own (see "
        "their pages).")
    env = [".TP", "\\fBRDMA_PROVIDER\\fR",
           _esc("The provider when --provider is not given: verbs, ucx "
                "(the software fabric) or auto.")]
    see = [", ".join(f"\\fBibtool\\-{_esc(c.name)}\\fR(1)" for c in cmds)
           + ", \\fBibv_devinfo\\fR(1), \\fBibstat\\fR(8)"]
    return _page("ibtool", "ibtool", "RDMA tools built on the rdma package",
                 version, top.usage,
                 [("DESCRIPTION", description), ("OPTIONS", opts),
                  ("COMMANDS", lines), ("EXIT STATUS", exit_status),
                  ("ENVIRONMENT", env), ("SEE ALSO", see)])


def pages() -> Dict[str, str]:
    """File name -> troff text of every page (``ibtool.1`` first)."""
    import rdma
    _, top = top_parser()
    cmds = list(commands())
    out = {"ibtool.1": _top_page(top, cmds, rdma.__version__)}
    for c in cmds:
        out[f"ibtool-{c.name}.1"] = _command_page(c, rdma.__version__)
    return out


def write(outdir: str) -> List[str]:
    """Write every page into *outdir* (made if needed); return the paths."""
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for name, text in pages().items():
        path = os.path.join(outdir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m rdma.cli.manpages OUTDIR", file=sys.stderr)
        return 2
    for path in write(argv[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
