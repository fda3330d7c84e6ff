"""The ``ibtool`` command line (also ``python -m rdma``): verbs tools
(``devices``, ``devinfo``, ``pingpong``, ``perf``, ``validate``, ``demo``)
and InfiniBand management tools named and shaped like infiniband-diags'
(``ibstat``, ``smpquery``, ``smpdump``, ``ibaddr``, ``sminfo``,
``perfquery``, ``ibnetdiscover``, ``ibswitches``, ``ibhosts``,
``ibrouters``, ``ibnodes``, ``iblinkinfo``, ``ibroute``, ``dump_lfts``,
``dump_mfts``, ``ibtracert``, ``ibqueryerrors``, ``ibportstate``,
``set_nodedesc``, ``saquery``).  The script is not called ``rdma``: that is
iproute2's tool.

Every subcommand prints errors as one line on stderr (no traceback) and
exits non-zero: 1 for an RDMA error, 2 for bad usage.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from rdma._errors import RDMAError
from rdma.cli import saquery as _saquery
from rdma.cli import validate as _validate

__all__ = ["main"]


def _add_provider(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", default=None,
                   help="provider: verbs, ucx or auto (default: "
                        "$RDMA_PROVIDER, else auto)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ibtool", description="RDMA tools built on the rdma package.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("devices", help="list RDMA devices (like ibv_devices)")
    _add_provider(p)
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing; exit 0 if a device exists, else 1")
    p.set_defaults(func=_cmd_devices)

    p = sub.add_parser("devinfo",
                       help="query RDMA devices (like ibv_devinfo)")
    _add_provider(p)
    p.add_argument("-d", "--ib-dev", metavar="DEVICE",
                   help="use this device (default: all devices)")
    p.add_argument("-i", "--ib-port", metavar="PORT", type=int, default=0,
                   help="use this port of the device (default: all ports)")
    p.add_argument("-l", "--list", action="store_true",
                   help="print only the device names")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print all the attributes of the device")
    p.set_defaults(func=_cmd_devinfo)

    p = sub.add_parser("demo", help="find a device, open it and show what it "
                                    "can do")
    _add_provider(p)
    p.set_defaults(func=_cmd_demo)
    _saquery.add_parser(sub)
    _validate.add_parser(sub)
    from rdma.cli import pingpong as _pingpong
    _pingpong.add_parser(sub)
    from rdma.cli import perf as _perf
    _perf.add_parser(sub)
    # InfiniBand management (python-rdma's ibtool; infiniband-diags' output)
    from rdma.cli import ibstat as _ibstat
    _ibstat.add_parser(sub)
    from rdma.cli import smpquery as _smpquery
    _smpquery.add_parser(sub)
    from rdma.cli import inquiry as _inquiry
    _inquiry.add_parsers(sub)
    from rdma.cli import topology as _topology
    _topology.add_parsers(sub)
    from rdma.cli import linkinfo as _linkinfo
    _linkinfo.add_parser(sub)
    from rdma.cli import smpdump as _smpdump
    _smpdump.add_parser(sub)
    from rdma.cli import routes as _routes
    _routes.add_parsers(sub)
    from rdma.cli import errors as _errors
    _errors.add_parser(sub)
    from rdma.cli import portstate as _portstate
    _portstate.add_parser(sub)
    from rdma.cli import nodedesc as _nodedesc
    _nodedesc.add_parser(sub)
    from rdma.cli import ibvalidate as _ibvalidate
    _ibvalidate.add_parser(sub)
    return parser


def _cmd_devices(args: argparse.Namespace) -> int:
    import rdma
    devices = rdma.get_devices(args.provider)
    if args.quiet:
        return 0 if devices else 1
    print(f"    {'device':<16}\t   node GUID")
    print(f"    {'------':<16}\t----------------")
    for d in devices:
        print(f"    {d.name:<16}\t{int(d.node_guid):016x}")
    return 0


def _cmd_devinfo(args: argparse.Namespace) -> int:
    from rdma.cli.devinfo import devinfo
    return devinfo(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from rdma.cli.demo import demo
    return demo(args)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the ``rdma`` command; return its exit code."""
    parser = build_parser()
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
    try:
        return args.func(args)
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
