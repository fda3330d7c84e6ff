"""``ibtool``'s commands and options as data, read from the argparse
parsers that the command modules build: what the shell completions
(:mod:`rdma.cli.completion`) and the man pages (:mod:`rdma.cli.manpages`)
are generated from, so that they cannot disagree with ``--help``."""
from __future__ import annotations

import argparse
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

__all__ = ["Option", "Positional", "Command", "commands", "top_parser"]

#: Destinations (or metavars) whose value is a file name.
_FILE_WORDS = ("FILE", "file", "junitxml", "node_name_map", "topology",
               "plot")


class Option(NamedTuple):
    """One option: its flags, whether it takes a value, the value's name,
    its choices (or None), whether the value is a file name, and the help
    text (``%(default)s`` expanded)."""
    flags: Tuple[str, ...]
    takes_value: bool
    metavar: str
    choices: Optional[Tuple[str, ...]]
    is_file: bool
    help: str


class Positional(NamedTuple):
    """One positional argument: name, nargs, choices, file?, help."""
    name: str
    nargs: object
    choices: Optional[Tuple[str, ...]]
    is_file: bool
    help: str


class Command(NamedTuple):
    """One ``ibtool`` command: its name, one-line summary, the parser's
    description and epilog, usage (without ``usage: ``), options and
    positionals."""
    name: str
    summary: str
    description: str
    epilog: str
    usage: str
    options: List[Option]
    positionals: List[Positional]


def _is_file(action: argparse.Action) -> bool:
    words = (str(action.metavar or ""), action.dest)
    return any(w in x for w in _FILE_WORDS for x in words)


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    # pylint: disable=protected-access
    return " ".join(parser._get_formatter()._expand_help(action).split())


def _usage(parser: argparse.ArgumentParser) -> str:
    # A fixed width: the generated files must not depend on the terminal.
    # pylint: disable=protected-access
    formatter = argparse.HelpFormatter(parser.prog, width=78)
    formatter.add_usage(parser.usage, parser._actions,
                        parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _describe(name: str, summary: str,
              parser: argparse.ArgumentParser) -> Command:
    options: List[Option] = []
    positionals: List[Positional] = []
    for a in parser._actions:           # pylint: disable=protected-access
        if a.help == argparse.SUPPRESS:
            continue
        choices = tuple(map(str, a.choices)) if a.choices else None
        if a.option_strings:
            options.append(Option(tuple(a.option_strings), a.nargs != 0,
                                  _metavar(a), choices, _is_file(a),
                                  _help(parser, a)))
        else:
            positionals.append(Positional(_metavar(a), a.nargs, choices,
                                          _is_file(a), _help(parser, a)))
    return Command(name, summary, " ".join((parser.description or "")
                                           .split()),
                   " ".join((parser.epilog or "").split()), _usage(parser),
                   options, positionals)


def top_parser() -> Tuple[argparse.ArgumentParser, Command]:
    """``ibtool``'s own parser (every command module imported) and its
    description as a :class:`Command` named ``ibtool``."""
    from rdma.cli import build_parser
    parser = build_parser()
    return parser, _describe("ibtool", parser.description or "", parser)


def commands() -> Iterator[Command]:
    """Every command of :data:`rdma.cli.COMMANDS`, in the table's order,
    from the parser its module builds."""
    from rdma.cli import COMMANDS
    parser, _ = top_parser()
    sub = next(a for a in parser._actions   # pylint: disable=W0212
               if isinstance(a, argparse._SubParsersAction))
    parsers: Dict[str, argparse.ArgumentParser] = sub.choices
    for name, (_, _, summary) in COMMANDS.items():
        yield _describe(name, summary, parsers[name])
