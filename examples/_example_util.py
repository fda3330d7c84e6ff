"""Plumbing shared by the example scripts (not an example itself).

Every example takes the same options, picks its end port and source GID the
same way and reports failure the same way:

* ``--device NAME`` (``rxe0``, ``rxe0/1``, a GID; default: the first ACTIVE
  port), ``--provider verbs|ucx|auto`` (default: ``$RDMA_PROVIDER``, else
  auto), ``--gid-index N`` (default: :func:`pick_gid_index`),
  ``--timeout S`` (a bound on the whole run).
* :func:`main_wrapper` turns an exception into a one-line message on stderr
  and exit status 1, and a run longer than ``--timeout`` into status 124.
"""
import argparse
import os
import signal
import sys

import rdma
from rdma import IBA

#: Exit status of a run that exceeded --timeout (as timeout(1)).
EXIT_TIMEOUT = 124


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser with the options every example shares; its help
    text is the example's docstring."""
    p = argparse.ArgumentParser(description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=os.environ.get("RDMA_DEVICE"),
                   help="device, device/port or GID of the end port to use "
                        "(default: $RDMA_DEVICE, else the first ACTIVE port)")
    p.add_argument("--provider", default=None,
                   help="verbs, ucx or auto (default: $RDMA_PROVIDER, "
                        "else auto)")
    p.add_argument("--gid-index", type=int, default=None,
                   help="source GID index (default: the port's RoCE v2 GID "
                        "on Ethernet, GID 0 elsewhere)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="give up after this many seconds (default 30)")
    return p


def get_end_port(args) -> "rdma.devices.EndPort":
    """The end port named by --device/--provider."""
    return rdma.get_end_port(args.device, provider=args.provider)


def pick_gid_index(end_port, requested=None) -> int:
    """The GID index to send from.

    On RoCE (Ethernet link layer) a RoCE v2 GID, IPv4-mapped first (it is
    routable, unlike the fe80:: link-local GID); on InfiniBand and the
    software fabric GID 0, the port's default GID.  *requested* (the
    --gid-index option) wins if it names a non-zero GID."""
    gids = end_port.gids
    if requested is not None:
        if not 0 <= requested < len(gids) or not gids[requested]:
            raise SystemExit(f"error: {end_port} has no GID at index "
                             f"{requested}")
        return requested
    if end_port.link_layer == "Ethernet":
        v2 = [i for i, (g, t) in enumerate(zip(gids, end_port.gid_types))
              if g and t == IBA.GID_TYPE_ROCE_V2]
        mapped = [i for i in v2
                  if bytes(gids[i])[:12] == b"\0" * 10 + b"\xff\xff"]
        for candidates in (mapped, v2):
            if candidates:
                return candidates[0]
    for i, g in enumerate(gids):
        if g:
            return i
    raise SystemExit(f"error: {end_port} has an empty GID table")


def describe(end_port) -> str:
    """One line about the end port."""
    return (f"{end_port} ({end_port.provider}, {end_port.link_layer}, "
            f"LID {end_port.lid}, active MTU "
            f"{IBA.mtu_to_bytes(end_port.attr.active_mtu)})")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def main_wrapper(main, argv=None) -> int:
    """Run ``main(args)`` (args parsed by ``main.parser``) under a timeout;
    return the process exit status."""
    prog = os.path.basename(sys.argv[0])
    args = main.parser.parse_args(argv)
    if args.timeout and args.timeout > 0:
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
    try:
        rc = main(args)
    except _Timeout:
        print(f"{prog}: FAILED: timed out after {args.timeout:g} s",
              file=sys.stderr)
        return EXIT_TIMEOUT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except Exception as e:          # one line, as promised in the docstrings
        if os.environ.get("RDMA_EXAMPLE_TRACEBACK"):
            raise
        print(f"{prog}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return 0 if rc is None else rc


def check(cond: bool, what: str) -> None:
    """Raise (so the example exits non-zero) unless *cond* holds."""
    if not cond:
        raise RuntimeError(what)
