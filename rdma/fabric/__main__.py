"""``python -m rdma.fabric``: run unmodified C verbs programs on ``ucx0``.

::

    python -m rdma.fabric exec -- ibv_devinfo -v  # run CMD with ucx0
    python -m rdma.fabric preload                 # what to put in LD_PRELOAD
    LD_PRELOAD="$(python -m rdma.fabric preload)" ibv_devices
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from rdma import fabric


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rdma.fabric",
        description="Make the software fabric (ucx0) visible to C programs "
                    "linked against libibverbs.")
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("exec", help="run CMD ARGS... with ucx0 visible "
                        "(LD_PRELOAD set; the process is replaced)")
    ex.add_argument("cmd", nargs=argparse.REMAINDER,
                    help="the command, after '--'")
    sub.add_parser("preload", help="print what to put in LD_PRELOAD")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; return the exit status (``exec`` does not
    return when it succeeds)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "preload":
            print(fabric.library_path())
            return 0
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            print("python -m rdma.fabric exec: no command given "
                  "(usage: exec -- CMD ARGS...)", file=sys.stderr)
            return 2
        env = fabric.environ()
    except FileNotFoundError as e:
        print(f"python -m rdma.fabric: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print(f"python -m rdma.fabric exec: cannot run {cmd[0]!r}: "
              f"{e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
