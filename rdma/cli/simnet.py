"""``ibtool simnet``: a simulated InfiniBand subnet in one command.

``up`` starts ``ibsim`` on a topology and ``opensm`` on one of its HCAs
through rdma's ibsim client shim (:class:`rdma.simnet.SimNet`), waits for
the subnet to come up and prints the environment of a client as
``export`` lines (``eval "$(ibtool simnet up)"``), or with ``--shell``
opens ``$SHELL`` in it and stops the subnet when the shell exits.
``env`` prints those lines again, ``shell`` opens a shell in a subnet
that is up, ``status`` says whether it is up, ``down`` stops it.  Each
subnet has a name (``--name``, default ``default``) and a state
directory (``$XDG_RUNTIME_DIR/rdma-simnet/NAME`` or
``/tmp/rdma-simnet-$USER/NAME``) through which the other actions find it.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "simnet"]

_ACTIONS = ("up", "down", "status", "env", "shell")


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``simnet`` to ``ibtool``."""
    from rdma.simnet import DEFAULT_TOPOLOGY
    p: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help,
        description="Start, show or stop a simulated InfiniBand subnet: "
                    "ibsim on a topology, opensm as its subnet manager, and "
                    "the environment (LD_PRELOAD of rdma's ibsim shim, "
                    "IBSIM_SOCKNAME, SIM_HOST) in which saquery, the other "
                    "infiniband-diags tools, ibtool and Python programs "
                    "using rdma see one of its HCAs as the CA ibsim0.",
        epilog='Example: eval "$(ibtool simnet up --topology fat-tree:4)"; '
               'saquery NR; ibtool saquery PR; ibtool simnet down.  Needs '
               "Debian's ibsim-utils and opensm.")
    p.add_argument("action", choices=_ACTIONS,
                   help="up: start and print the client environment; "
                        "down: stop; status: say whether it is up; env: "
                        "print the client environment; shell: open "
                        "$SHELL in it")
    p.add_argument("--name", default="default",
                   help="the subnet's name (default: %(default)s)")
    p.add_argument("--topology", default=DEFAULT_TOPOLOGY,
                   help="up: a topology file (ibnetdiscover's format, as "
                        "ibsim reads it), fat-tree:K (a two-level fat-tree "
                        "of radix K, K*K/2 HCAs) or line:N (N switches in "
                        "a chain, one HCA each) (default: %(default)s)")
    p.add_argument("--sm-node", metavar="NODE",
                   help="up: the HCA opensm runs on (default: the first)")
    p.add_argument("--node", metavar="NODE",
                   help="up, env, shell: the HCA clients sit on (default: "
                        "the first HCA that is not the SM's)")
    p.add_argument("--lifetime", type=float, default=8 * 3600,
                   metavar="SECONDS",
                   help="up: ibsim and opensm stop by themselves after this "
                        "long (default: %(default)s)")
    p.add_argument("--shell", action="store_true",
                   help="up: open $SHELL in the subnet instead of printing "
                        "the environment; the subnet stops when it exits")
    p.add_argument("--json", action="store_true",
                   help="status: print one JSON object")
    return p


def _err(msg: str) -> int:
    print(f"ibtool simnet: {msg}", file=sys.stderr)
    return 1


def _shell(env: Dict[str, str], name: str) -> int:
    """Run ``$SHELL`` (else ``/bin/sh``) with *env*; its exit status."""
    sh = os.environ.get("SHELL") or "/bin/sh"
    env = dict(env, RDMA_SIMNET=name)
    print(f"ibtool simnet: a shell in simulated subnet {name!r} "
          f"(SIM_HOST={env['SIM_HOST']}); exit to leave it",
          file=sys.stderr)
    # Ctrl-C at the shell's prompt is the shell's: this process (which
    # stops the subnet when the shell exits) ignores it meanwhile, the
    # shell starts with the default disposition.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.call(
            [sh], env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    finally:
        signal.signal(signal.SIGINT, old)


def _up(args: argparse.Namespace) -> int:
    from rdma.simnet import SimNet
    net = SimNet(args.topology, args.name, sm_node=args.sm_node,
                 node=args.node, lifetime=args.lifetime)
    net.start()
    print(f"ibtool simnet: {args.name!r} is up: {net.topology}, "
          f"{len(net.hcas)} HCAs, opensm on {net.sm_node}, clients on "
          f"{net.node} ({net.startup_s:.1f} s; logs in {net.dir})",
          file=sys.stderr)
    if not args.shell:
        sys.stdout.write(net.exports())
        return 0
    try:
        return _shell(net.env(), args.name)
    finally:
        net.stop()


def _status(net: Any, as_json: bool) -> int:
    st = net.status()
    if as_json:
        print(json.dumps(st))
    else:
        procs = ", ".join(f"{role} {pids[-1]}" if pids else f"{role} gone"
                          for role, pids in st["processes"].items())
        print(f"{st['name']}: {'up' if st['up'] else 'DOWN'}, "
              f"{st['topology']}, {st['hcas']} HCAs, opensm on "
              f"{st['sm_node']}, clients on {st['node']}, "
              f"IBSIM_SOCKNAME={st['sockname']} ({procs}; {st['dir']})")
    return 0 if st["up"] else 1


def simnet(args: argparse.Namespace) -> int:
    """Run ``ibtool simnet ACTION``."""
    from rdma.simnet import SimNet, SimNetError
    try:
        if args.action == "up":
            return _up(args)
        net = SimNet.attach(args.name)
        if args.action == "down":
            was_up = net.is_up()
            net.stop()
            print(f"ibtool simnet: {args.name!r} "
                  f"{'stopped' if was_up else 'was already down; cleared'}",
                  file=sys.stderr)
            return 0
        if args.action == "status":
            return _status(net, args.json)
        if not net.is_up():
            return _err(f"simulated subnet {args.name!r} is down (its "
                        f"processes are gone): ibtool simnet down --name "
                        f"{args.name} clears it")
        if args.node and args.node not in net.hcas:
            raise ValueError(f"--node {args.node}: not an HCA of "
                             f"{net.topology}")
        if args.action == "env":
            sys.stdout.write(net.exports(args.node))
            return 0
        return _shell(net.env(args.node), args.name)
    except (SimNetError, FileNotFoundError) as e:
        return _err(str(e))
