"""``python -m rdma.fabric``: run unmodified C verbs programs on ``ucx0``.

::

    python -m rdma.fabric exec -- ibv_devinfo -v  # run CMD with ucx0
    python -m rdma.fabric preload                 # what to put in LD_PRELOAD
    python -m rdma.fabric config [--json]         # the settings, as read
    LD_PRELOAD="$(python -m rdma.fabric preload)" ibv_devices
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from rdma import fabric
from rdma.fabric import settings


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
    cf = sub.add_parser("config", help="print each setting of the "
                        "environment, its value and where it came from")
    cf.add_argument("--json", action="store_true",
                    help="print a JSON object instead")
    return p


def _config(as_json: bool) -> int:
    """``config``: 0, or 1 when a value is refused."""
    vals = settings.values()
    unknown = settings.unknown()
    bad = [v.error for v in vals if v.error]
    if as_json:
        print(json.dumps({"settings": [v.as_dict() for v in vals],
                          "unknown": unknown}, indent=2))
        return 1 if bad else 0
    width = max(len(v.setting.name) for v in vals)
    vwidth = max(len(v.value) for v in vals)
    for v in vals:
        print(f"{v.setting.name:<{width}}  {v.value:<{vwidth}}  "
              f"{v.source:<11}  {v.setting.meaning}")
    for name, near in unknown.items():
        hint = f"; did you mean {near}?" if near else ""
        print(f"warning: {name} is not a setting{hint}", file=sys.stderr)
    for e in bad:
        print(f"error: {e}", file=sys.stderr)
    return 1 if bad else 0


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; return the exit status (``exec`` does not
    return when it succeeds)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "preload":
            print(fabric.library_path())
            return 0
        if args.command == "config":
            return _config(args.json)
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
