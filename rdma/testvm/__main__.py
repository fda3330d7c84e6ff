"""python -m rdma.testvm: run a command inside the Soft-RoCE test VM."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType
from typing import NoReturn, Optional

from . import (EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_VM_FAILURE, VMError,
               VMTimeout, VMUnavailable, cache_state, check_requirements, run)

_EPILOG = f"""\
The command runs in the current directory with the caller's PATH, PYTHONPATH,
VIRTUAL_ENV, HOME, LANG, TERM, LC_*, PYENV*, PYTHON*, RDMA_* and PYTEST_*
variables, plus RDMA_TESTVM_* variables describing the devices (rxe0 on
dummy0, 192.0.2.1, GID index 1; with --two-host also rxe1/veth0/198.51.100.1
and rxe2/veth1/198.51.100.2).  Files written under $RDMA_TESTVM_OUT are copied
to --out DIR.  Guest writes anywhere else are discarded.

exit status:
  N    the command's own exit status (128+S if it was killed by signal S)
  {EXIT_TIMEOUT}  a step timed out (boot, or the command: it was killed)
  {EXIT_VM_FAILURE}  the VM failed (guest setup error, kernel panic, qemu died)
  {EXIT_UNAVAILABLE}  the VM cannot run here (missing package or kernel)
  2    bad usage
  130/143  interrupted by SIGINT/SIGTERM (the VM is killed)
(A command that itself exits with {EXIT_TIMEOUT}-{EXIT_UNAVAILABLE} is
indistinguishable from these; a one-line message on stderr tells them
apart.)

example:
  python -m rdma.testvm --two-host --out build/vm -- \\
      sh -c 'python -m pytest tests/vm --junitxml="$RDMA_TESTVM_OUT/vm.xml"'
"""


class _Terminated(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: Optional[FrameType]) -> NoReturn:
    # Ignore repeats while the VM is being torn down.
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    raise _Terminated(signum)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rdma.testvm",
        usage="%(prog)s [options] -- CMD [ARGS...]\n"
              "       %(prog)s --check",
        description="Boot Debian's kernel in qemu with the host's root "
                    "filesystem, load Soft-RoCE (rdma_rxe) and run CMD there.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--two-host", action="store_true",
                   help="also create rxe1 (veth0) and rxe2 (veth1), whose "
                        "traffic crosses a veth pair")
    p.add_argument("--timeout", type=float, default=600, metavar="S",
                   help="kill the command after S seconds (default 600)")
    p.add_argument("--boot-timeout", type=float, default=120, metavar="S",
                   help="give up if the VM is not ready after S seconds "
                        "(default 120)")
    p.add_argument("--memory", default="1G", metavar="M",
                   help="guest memory, e.g. 1G or 512M (default 1G)")
    p.add_argument("--cpus", type=int, default=2, metavar="N",
                   help="guest CPUs (default 2)")
    p.add_argument("--cwd", metavar="DIR",
                   help="run the command in DIR (default: the current "
                        "directory; must not be under /tmp, /run or /dev)")
    p.add_argument("--out", metavar="DIR",
                   help="copy the files the command wrote under "
                        "$RDMA_TESTVM_OUT to DIR")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="set an extra variable in the guest (repeatable)")
    p.add_argument("--print-dmesg", action="store_true",
                   help="print the guest's kernel log to stderr afterwards")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print boot timings, and the console/dmesg tail "
                        "on failure")
    p.add_argument("--check", action="store_true",
                   help="check the requirements, print the kernel, qemu and "
                        "cache state, and exit")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command and its arguments (after --)")
    return p


def _check() -> int:
    try:
        req = check_requirements()
        state = cache_state()
    except VMUnavailable as e:
        print(f"rdma-testvm: unavailable: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    print(f"kernel:    {req.kernel_version} ({req.vmlinuz})")
    print(f"modules:   {req.modules_dir}")
    print(f"qemu:      {req.qemu}")
    print(f"busybox:   {req.busybox}")
    print(f"cache:     {state['cache_dir']}")
    print(f"vmlinux:   {state['vmlinux']}")
    print(f"initramfs: {state['initramfs']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.check:
        if command:
            parser.error("--check takes no command")
        return _check()
    if not command:
        parser.error("no command given (put it after --)")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env wants K=V, not {item!r}")
        env[key] = value

    old = {s: signal.signal(s, _on_signal)
           for s in (signal.SIGTERM, signal.SIGHUP)}
    res = None
    try:
        res = run(command, two_host=args.two_host, timeout=args.timeout,
                  boot_timeout=args.boot_timeout, memory=args.memory,
                  cpus=args.cpus, cwd=args.cwd, env=env, out_dir=args.out,
                  stream=sys.stdout)
    except VMTimeout as e:
        _fail(f"{e.step} timed out after {e.seconds:g} s", e, args)
        return EXIT_TIMEOUT
    except VMUnavailable as e:
        print(f"rdma-testvm: unavailable: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except VMError as e:
        _fail(str(e).splitlines()[0], e, args)
        return EXIT_VM_FAILURE
    except ValueError as e:
        print(f"rdma-testvm: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nrdma-testvm: interrupted, VM killed", file=sys.stderr)
        return 130
    except _Terminated as e:
        print(f"rdma-testvm: got signal {e.signum}, VM killed",
              file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:
        return 141
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    sys.stdout.flush()
    if args.print_dmesg:
        sys.stderr.write(res.dmesg)
    if args.verbose:
        print(f"rdma-testvm: boot {res.boot_seconds:.2f} s, command "
              f"{res.command_seconds:.2f} s, total {res.total_seconds:.2f} s, "
              f"exit status {res.returncode}", file=sys.stderr)
    return res.returncode


def _fail(line: str, e: BaseException, args: argparse.Namespace) -> None:
    sys.stdout.flush()
    dmesg: str = getattr(e, "dmesg", "")
    if args.print_dmesg and dmesg:
        sys.stderr.write(dmesg)
    if args.verbose:
        print(str(e), file=sys.stderr)
        console: str = getattr(e, "console", "")
        if console:
            print("--- console ---\n" + console.rstrip(), file=sys.stderr)
    print(f"rdma-testvm: {line}", file=sys.stderr)


def _entry() -> int:
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        status = 141
    if status == 141:
        # stdout is gone: keep the interpreter from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return status


if __name__ == "__main__":
    sys.exit(_entry())
