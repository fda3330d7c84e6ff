"""The ``ibtool`` command line (also ``python -m rdma``): verbs tools
(``devices``, ``devinfo``, ``pingpong``, ``cm-pingpong``, ``perf``,
``validate``, ``demo``)
and InfiniBand management tools named and shaped like infiniband-diags'
(``ibstat``, ``smpquery``, ``smpdump``, ``ibaddr``, ``sminfo``,
``perfquery``, ``ibnetdiscover``, ``ibswitches``, ``ibhosts``,
``ibrouters``, ``ibnodes``, ``iblinkinfo``, ``ibroute``, ``dump_lfts``,
``dump_mfts``, ``ibtracert``, ``ibqueryerrors``, ``ibportstate``,
``set_nodedesc``, ``saquery``), and ``simnet``, a simulated subnet
(ibsim and opensm) to run them on.  The script is not called ``rdma``: that is
iproute2's tool.

Commands are found by name, as in python-rdma's ``ibtool``:
:data:`COMMANDS` maps each one to the module that implements it, a module
of ``rdma.cli`` of the same name (``-`` spelled ``_``), and the function
in it.  An alias (``dump_lfts``, ``dump_mfts``; ``ibswitches`` ...
``ibnodes``) names the module of the command it shares its code with.
Every module has ``add_parser(subparsers, name, help)``, which builds the
parser of the command *name* (an alias's too) and returns it.  Only the
module of the command being run is imported: ``ibtool --help`` lists the
commands from the table.

Every subcommand prints errors as one line on stderr (no traceback) and
exits non-zero: 1 for an RDMA error, 2 for bad usage, 130 when
interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["main", "build_parser", "COMMANDS", "command_module"]

#: ``ibtool``'s commands, in ``--help`` order: name -> (module of
#: ``rdma.cli`` relative to it, function in it, one-line summary).
COMMANDS: Dict[str, Tuple[str, str, str]] = {
    "devices": (".devices", "devices",
                "list RDMA devices (like ibv_devices)"),
    "devinfo": (".devinfo", "devinfo",
                "query RDMA devices (like ibv_devinfo)"),
    "demo": (".demo", "demo",
             "find a device, open it and show what it can do"),
    "saquery": (".saquery", "saquery",
                "query the subnet administrator (like saquery)"),
    "validate": (".validate", "validate",
                 "check a fabric: ports, GIDs, every verb, atomics, paths "
                 "(runs the rdma.validation pytest suite)"),
    "pingpong": (".pingpong", "pingpong",
                 "ping-pong messages like ibv_{rc,uc,ud,srq}_pingpong "
                 "(and with them)"),
    "cm-pingpong": (".cm_pingpong", "cm_pingpong",
                    "ping over a connection-manager connection (like "
                    "rping, and with it)"),
    "perf": (".perf", "perf",
             "bandwidth/latency of write, read, send, atomic "
             "(perftest-style)"),
    # InfiniBand management (python-rdma's ibtool; infiniband-diags' output)
    "ibstat": (".ibstat", "ibstat",
               "show the local InfiniBand CAs (like ibstat)"),
    "smpquery": (".smpquery", "smpquery",
                 "read a node's SMP attributes (like smpquery)"),
    "ibaddr": (".ibaddr", "ibaddr",
               "a port's GID and LID range (like ibaddr)"),
    "sminfo": (".sminfo", "sminfo",
               "the subnet manager's SMInfo (like sminfo)"),
    "perfquery": (".perfquery", "perfquery",
                  "a port's PortCounters (like perfquery)"),
    "ibnetdiscover": (".ibnetdiscover", "ibnetdiscover",
                      "discover the subnet and print its topology file "
                      "(like ibnetdiscover)"),
    "ibswitches": (".ibnetdiscover", "ibswitches",
                   "list the switches of the subnet (like ibswitches)"),
    "ibhosts": (".ibnetdiscover", "ibhosts",
                "list the CAs of the subnet (like ibhosts)"),
    "ibrouters": (".ibnetdiscover", "ibrouters",
                  "list the routers of the subnet (like ibrouters)"),
    "ibnodes": (".ibnetdiscover", "ibnodes",
                "list the CAs and switches of the subnet (like ibnodes)"),
    "iblinkinfo": (".iblinkinfo", "iblinkinfo",
                   "every link of the subnet (like iblinkinfo)"),
    "smpdump": (".smpdump", "smpdump",
                "any SMP attribute as raw bytes (like smpdump)"),
    "ibroute": (".ibroute", "ibroute",
                "a switch's unicast forwarding table (like ibroute)"),
    "dump_lfts": (".ibroute", "dump_fts",
                  "the unicast forwarding table of every switch of the "
                  "subnet (like dump_lfts, infiniband-diags' dump_fts)"),
    "dump_mfts": (".ibroute", "dump_fts",
                  "the multicast forwarding table of every switch of the "
                  "subnet (like dump_mfts, infiniband-diags' dump_fts -M)"),
    "ibtracert": (".ibtracert", "ibtracert",
                  "the route between two LIDs (like ibtracert)"),
    "ibqueryerrors": (".ibqueryerrors", "ibqueryerrors",
                      "ports whose error counters are above a threshold "
                      "(like ibqueryerrors)"),
    "ibportstate": (".ibportstate", "ibportstate",
                    "show, enable, disable or reset a port (like "
                    "ibportstate)"),
    "set_nodedesc": (".set_nodedesc", "set_nodedesc",
                     "show or set local CAs' NodeDescription (like "
                     "set_nodedesc.sh)"),
    "validate-subnet": (".validate_subnet", "validate_subnet",
                        "check an InfiniBand subnet: topology, link rates, "
                        "error counters, routes, SM"),
    "simnet": (".simnet", "simnet",
               "start, show or stop a simulated InfiniBand subnet (ibsim "
               "and opensm)"),
}


def command_module(name: str) -> Any:
    """The module that implements the command *name* (imported now)."""
    return importlib.import_module(COMMANDS[name][0], __name__)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size() finds it
    ($COLUMNS, else stdout's terminal, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        out = sys.__stdout__
        try:
            columns = (os.get_terminal_size(out.fileno()).columns
                       if out is not None else 0)
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class Parser(argparse.ArgumentParser):
    """argparse's parser, without the ``import shutil`` (2 ms of every
    command's start) that argparse's help formatter does for the
    terminal's width at every ``add_argument``; the width is found here
    (as shutil finds it) when a formatter is made.  Subparsers are of the
    same class."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        # formatter_class is typed as taking prog alone; argparse's
        # formatters all take width too
        make: Any = self.formatter_class
        fmt: argparse.HelpFormatter = make(prog=self.prog,
                                           width=_columns() - 2)
        return fmt


class _Version(argparse.Action):
    """``--version``: print the version of the rdma package (the one
    running, ``rdma.__version__``) and exit 0."""

    def __init__(self, option_strings: List[str], dest: str,
                 help: Optional[str] = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS,
                         default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        import rdma
        print(f"{parser.prog} {rdma.__version__}")
        parser.exit()


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """``ibtool``'s parser.  With *only*, just that command's module is
    imported and builds its parser; the others are listed with their
    summaries (enough for ``--help`` and for naming a wrong command)."""
    parser = Parser(
        prog="ibtool", description="RDMA tools built on the rdma package.")
    parser.add_argument("--version", action=_Version,
                        help="print the version of the rdma package and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (_, _, summary) in COMMANDS.items():
        if only is None or name == only:
            command_module(name).add_parser(sub, name, summary)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def _command_word(argv: List[str]) -> Optional[str]:
    """The command *argv* names: its first word that is not an option (the
    top-level parser has no option that takes a value)."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``ibtool`` command; return its exit code (130, quietly,
    when interrupted before the command started)."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        return 130


def _main(argv: List[str]) -> int:
    name = _command_word(argv)
    parser = build_parser(only=name or "")
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Commands with a "rest" list take positionals after options too
        # (smpquery -D nodeinfo 0,1 and smpquery nodeinfo -D 0,1), as the
        # C tools' getopt does; anything else is an error as before.
        if not isinstance(getattr(args, "rest", None), list) or \
                any(e.startswith("-") and len(e) > 1 and
                    not e[1:2].isdigit() for e in extra):
            parser.parse_args(argv)         # exits 2 naming the argument
        args.rest.extend(extra)
    func = getattr(command_module(args.command), COMMANDS[args.command][1])
    return _run(args, func)


def _run(args: argparse.Namespace, func: Any) -> int:
    from rdma._errors import RDMAError
    try:
        status: int = func(args)
        return status
    except RDMAError as e:
        print(f"ibtool {args.command}: {e}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as e:
        print(f"ibtool {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ibtool {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
