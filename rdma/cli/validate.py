"""``ibtool validate``: run the fabric validation suite
(:mod:`rdma.validation`) and print a summary table.

::

    ibtool validate                              # first ACTIVE port, loopback
    ibtool validate --device rxe0 --gid-index 1
    ibtool validate --device rxe1 --peer-device rxe2 --junitxml out.xml
    ibtool validate --provider ucx --quick -- -k transfer -x
    ibtool validate --hosts ssh=node1//python=/opt/venv/bin/python \\
                    --hosts ssh=node2//python=/opt/venv/bin/python --plot m.png

With ``--hosts`` the checks run between hosts reached through execnet
gateways (:mod:`rdma.multihost`), not in a local pytest run.

pytest runs in a child process (a crash or a hang of a verb cannot take
the report with it; ``--timeout`` bounds the whole run), in a scratch
directory, with only this package's plugin loaded (other installed pytest
plugins are not autoloaded; ``-- -p NAME`` loads one).  The result is
always written as JUnit XML (to ``--junitxml`` or a temporary file) and the
table is built from it.  Exit status: 0 when nothing failed, 1 when a check
failed, 2 for bad usage (a ``--device`` or ``--peer-device`` that is not
there among them), 3 when pytest itself could not run (or timed out).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional, Tuple
from rdma.cli._common import Subparsers

__all__ = ["add_parser", "validate", "run_suite", "read_junit", "format_table"]


def add_parser(subparsers: Subparsers, name: str,
               help: str) -> argparse.ArgumentParser:
    """Add ``validate`` to the ``rdma`` command's subparsers."""
    p = subparsers.add_parser(
        name, help=help,
        description="Check a fabric: ports active and GID tables sane, every "
                    "verb on RC/UC/UD from 1 B to 1 MiB with data "
                    "verification, atomics under contention, SA paths where "
                    "an SA exists.  Arguments after -- go to pytest.",
        epilog="exit status: 0 all checks passed (or were skipped), 1 a check "
               "failed, 2 bad usage, 3 pytest could not run or timed out")
    p.add_argument("-d", "--device", metavar="NAME[/PORT]",
                   help="device to check (default: the first ACTIVE port)")
    p.add_argument("-i", "--port", type=int, metavar="N",
                   help="port number of the device (default: its first port)")
    p.add_argument("-g", "--gid-index", type=int, metavar="N",
                   help="GID index to use (default: RoCE v2 IPv4-mapped on "
                        "RoCE, else 0)")
    p.add_argument("--provider", default=None,
                   help="provider: verbs, ucx or auto (default: "
                        "$RDMA_PROVIDER, else auto)")
    p.add_argument("--peer-device", metavar="NAME[/PORT]",
                   help="second device: QP pairs run between the two "
                        "(default: loopback on --device)")
    p.add_argument("--peer-gid-index", type=int, metavar="N",
                   help="GID index on the peer device")
    p.add_argument("--junitxml", metavar="FILE",
                   help="write the JUnit XML report to FILE")
    p.add_argument("--multicast", action="store_true",
                   help="also check UD multicast delivery (needs multicast "
                        "routing in the fabric)")
    p.add_argument("--quick", action="store_true",
                   help="fewer iterations and one direction (slow machines)")
    p.add_argument("--timeout", type=float, default=1800, metavar="S",
                   help="stop the run after S seconds (default 1800)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show pytest's output (progress and tracebacks)")
    p.add_argument("--json", action="store_true",
                   help="print the results as one JSON object (the fields "
                        "of the text: device, provider, link_layer, "
                        "gid_index, peer, tests, counts, verdict, seconds, "
                        "first_problem, exit_status)")
    m = p.add_argument_group(
        "several hosts (execnet gateways; see docs/validation.rst)")
    m.add_argument("--hosts", action="append", metavar="SPEC|FILE",
                   help="a host as an execnet gateway spec (popen//python="
                        "..., ssh=node1//python=..., socket=HOST:PORT; "
                        "//device=NAME and //gid_index=N per host), or a "
                        "file with one spec per line; repeat for each host. "
                        "The checks that need two ends then run between "
                        "host pairs")
    m.add_argument("--pairs", default="all", metavar="all|ring|FILE",
                   help="which host pairs: all (default, N-1 rounds of N/2 "
                        "pairs at a time), ring, or a file of NAME NAME "
                        "lines")
    m.add_argument("--plot", metavar="FILE",
                   help="save the bandwidth and latency matrices as a "
                        "heatmap picture (matplotlib; PNG, SVG, PDF...)")
    m.add_argument("--checks", default="transfer,atomics,perf",
                   metavar="LIST",
                   help="pair checks to run (default transfer,atomics,perf)")
    m.add_argument("--slow-fraction", type=float, default=0.5,
                   metavar="F",
                   help="a pair direction whose bandwidth is below F times "
                        "the typical pair's (the median of the hosts' "
                        "medians) is slow (default 0.5)")
    m.add_argument("--lat-factor", type=float, default=5.0, metavar="X",
                   help="a pair whose latency is above X times the "
                        "typical pair's is slow (default 5)")
    m.add_argument("--pair-timeout", type=float, default=10.0, metavar="S",
                   help="seconds an agent waits for one completion "
                        "(default 10); a host that does not answer a step "
                        "within S+30 s fails its pair")
    p.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                   help="extra pytest arguments (after --)")
    return p


# -- running the suite -------------------------------------------------------

def _plugin_args() -> List[str]:
    """-p options that make sure our plugin is loaded exactly once."""
    try:
        from importlib.metadata import entry_points
        eps = entry_points(group="pytest11")
        if any(ep.name == "rdma" and ep.value == "rdma.pytest_plugin"
               for ep in eps):
            return ["-p", "rdma"]        # by entry point name (no double load)
    except Exception:
        pass
    return ["-p", "rdma.pytest_plugin"]


def build_pytest_args(args: argparse.Namespace, junit: str) -> List[str]:
    a = ["-m", "pytest", "--pyargs", "rdma.validation", *_plugin_args(),
         "-p", "no:cacheprovider", f"--junitxml={junit}",
         "-o", "junit_family=xunit1", "-o", "junit_logging=no",
         "--rdma-require"]
    a += ["-rN", "--tb=short"] if args.verbose else ["-q", "--tb=no", "-rN",
                                                     "--no-header"]
    for opt in _PLUGIN_VALUES:
        val = getattr(args, _PLUGIN_OPTIONS[opt][2:].replace("-", "_"))
        if val is not None:
            a.append(f"{opt}={val}")
    for opt in _PLUGIN_FLAGS:
        if getattr(args, _PLUGIN_OPTIONS[opt][2:]):
            a.append(opt)
    return a + list(args.pytest_args)


#: The pytest plugin's options that ``ibtool validate`` passes on, and
#: its own names for them.
_PLUGIN_OPTIONS = {"--rdma-device": "--device", "--rdma-port": "--port",
                   "--rdma-gid-index": "--gid-index",
                   "--rdma-provider": "--provider",
                   "--rdma-peer-device": "--peer-device",
                   "--rdma-peer-gid-index": "--peer-gid-index",
                   "--rdma-quick": "--quick",
                   "--rdma-multicast": "--multicast",
                   "--rdma-hosts": "--hosts"}
_PLUGIN_VALUES = ("--rdma-device", "--rdma-port", "--rdma-gid-index",
                  "--rdma-provider", "--rdma-peer-device",
                  "--rdma-peer-gid-index")
_PLUGIN_FLAGS = ("--rdma-quick", "--rdma-multicast")


def own_option_names(text: str) -> str:
    """*text* (a check's message, written for pytest) with the plugin's
    option names replaced by ``ibtool validate``'s: the suite says "give
    --rdma-peer-device", ``ibtool validate``'s option is --peer-device."""
    if "ibtool validate" in text:       # names both already
        return text
    return re.sub(r"--rdma-[a-z-]+\b",
                  lambda m: _PLUGIN_OPTIONS.get(m.group(0), m.group(0)),
                  text)


def run_suite(pytest_args: List[str], timeout: float,
              show_output: bool) -> Tuple[int, str]:
    """Run ``python -m pytest ...`` in a fresh process group (in a scratch
    directory, so no local conftest or ini file leaks in); return its
    exit status (-signal if killed) and its output."""
    import rdma
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(
        rdma.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                        if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Only our plugin (-p): other installed plugins are not autoloaded, so
    # they can neither slow the run down nor change it (-- -p NAME loads one).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with tempfile.TemporaryDirectory(prefix="rdma-validate-") as cwd:
        proc = subprocess.Popen([sys.executable] + pytest_args, cwd=cwd,
                                env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        assert proc.stdout is not None      # stdout=PIPE
        stdout = proc.stdout
        out: List[str] = []
        deadline = time.monotonic() + timeout
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(stdout, selectors.EVENT_READ)
        timed_out = False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not sel.select(min(left, 1.0)):
                    if proc.poll() is not None:
                        rest = stdout.read()
                        if rest:
                            out.append(rest)
                            if show_output:
                                sys.stdout.write(rest)
                        break
                    continue
                line = stdout.readline()
                if not line:
                    break
                out.append(line)
                if show_output:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        except KeyboardInterrupt:
            _kill(proc)
            raise
        finally:
            sel.close()
        if timed_out:
            _kill(proc)
            out.append(f"\nrdma validate: timed out after {timeout:g} s\n")
            return -signal.SIGKILL, "".join(out)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill(proc)
            rc = proc.wait()
        return rc, "".join(out)


def _kill(proc: "subprocess.Popen[str]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# -- the report -------------------------------------------------------------

def _first_line(text: Optional[str]) -> str:
    if not text:
        return ""
    text = text.strip()
    for prefix in ("AssertionError: ", "Failed: ", "Skipped: ",
                   "failed on setup with \"", "failed on teardown with \""):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.startswith("Failed: "):
        text = text[len("Failed: "):]
    if text.startswith("AssertionError: "):
        text = text[len("AssertionError: "):]
    # pytest appends "assert ..." introspection after the message.
    line = text.split("\n", 1)[0].strip()
    return line.rstrip('"')


def _short_skip(message: str) -> str:
    # pytest writes skip reasons as "('file', line, 'Skipped: reason')" in
    # some versions; keep the reason.
    m = message.strip()
    if m.startswith("(") and "Skipped: " in m:
        m = m.split("Skipped: ", 1)[1].rstrip("')\"")
    return _first_line(m)


def read_junit(path: str) -> Tuple[List[Dict[str, str]], Dict[str, str]]:
    """The test cases of a JUnit XML file (name, result, detail, time) and
    the suite's properties."""
    tree = ET.parse(path)
    root = tree.getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    rows: List[Dict[str, str]] = []
    props: Dict[str, str] = {}
    for s in suites:
        for p in s.findall("properties/property"):
            props[p.get("name", "")] = p.get("value", "")
        for tc in s.findall("testcase"):
            cls = tc.get("classname", "")
            mod = cls.rsplit(".", 1)[-1]
            name = f"{mod}::{tc.get('name', '')}"
            detail = ""
            for p in tc.findall("properties/property"):
                if p.get("name") == "detail":
                    detail = p.get("value", "")
            result = "PASSED"
            for tag, res in (("failure", "FAILED"), ("error", "ERROR"),
                             ("skipped", "SKIPPED")):
                el = tc.find(tag)
                if el is None:
                    continue
                msg = el.get("message") or (el.text or "")
                if tag == "skipped":
                    if el.get("type") == "pytest.xfail":
                        result = "XFAIL"
                    else:
                        result = res
                    detail = _short_skip(msg)
                else:
                    result = res
                    detail = _first_line(msg) or _first_line(el.text)
                break
            rows.append({"test": name, "result": result, "detail": detail,
                         "time": tc.get("time", "0")})
    return rows, props


def format_table(rows: List[Dict[str, str]], width: Optional[int] = None
                 ) -> str:
    """The summary table: test, result, detail (wrapped to *width*)."""
    if width is None:
        width = max(100, shutil.get_terminal_size((120, 24)).columns)
    tw = max([len("test")] + [len(r["test"]) for r in rows])
    rw = max([len("result")] + [len(r["result"]) for r in rows])
    dw = max(30, width - tw - rw - 4)
    lines = [f"{'test':<{tw}}  {'result':<{rw}}  detail",
             f"{'-' * tw}  {'-' * rw}  {'-' * min(dw, 40)}"]
    prev = None
    for r in rows:
        detail = r["detail"]
        if r["result"] in ("FAILED", "ERROR") and detail and detail == prev:
            detail = "(the same problem as above)"
        else:
            prev = detail if r["result"] in ("FAILED", "ERROR") else None
        wrapped = textwrap.wrap(detail, dw) or [""]
        lines.append(f"{r['test']:<{tw}}  {r['result']:<{rw}}  {wrapped[0]}")
        for more in wrapped[1:]:
            lines.append(f"{'':<{tw}}  {'':<{rw}}  {more}")
    return "\n".join(lines)


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _result(args: argparse.Namespace, rc: int, output: str,
            rows: List[Dict[str, str]], props: Dict[str, str],
            elapsed: float) -> Dict[str, Any]:
    """What ``ibtool validate`` reports, as the fields of its text (and of
    ``--json``): the port checked, the table's rows (``test``, ``result``,
    ``detail``, ``time``), the counts, the verdict, the first problem and
    the exit status."""
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    failed = counts.get("FAILED", 0) + counts.get("ERROR", 0)
    res: Dict[str, Any] = {
        "device": props.get("rdma_end_port") or args.device,
        "provider": props.get("rdma_provider"),
        "link_layer": props.get("rdma_link_layer"),
        "gid_index": props.get("rdma_gid_index"),
        "peer": props.get("rdma_peer") or args.peer_device or "loopback",
        "tests": rows,
        "counts": {k.lower(): n for k, n in sorted(counts.items())},
        "seconds": elapsed, "junitxml": args.junitxml,
        "first_problem": None, "problem": None}
    if rc < 0:
        res.update(verdict="STOPPED", exit_status=3,
                   problem=f"the run was stopped ({_tail(output, 1)})")
    elif rc not in (0, 1) and not failed:
        res.update(verdict="ERROR", exit_status=3,
                   problem=f"pytest exit status {rc}")
    else:
        verdict = "FAILED" if failed or rc == 1 else "PASSED"
        res.update(verdict=verdict, exit_status=1 if failed or rc == 1
                   else 0)
    if failed:
        first = next(r for r in rows if r["result"] in ("FAILED", "ERROR"))
        res["first_problem"] = {"test": first["test"],
                                "detail": first["detail"]}
    return res


def _print_result(res: Dict[str, Any], rows: List[Dict[str, str]],
                  output: str) -> None:
    """:func:`_result` as text: the header, the table, the verdict."""
    head = f"ibtool validate: {res['device'] or 'first ACTIVE port'}"
    if res["provider"]:
        ll, gi = (("?" if v is None else v)
                  for v in (res["link_layer"], res["gid_index"]))
        head += f" ({res['provider']}, {ll}, GID index {gi})"
    head += f", peer: {res['peer']}"
    print(head)
    print()
    print(format_table(rows))
    print()
    if res["verdict"] == "STOPPED":
        print(f"ibtool validate: {res['problem']}")
        return
    if res["verdict"] == "ERROR":
        print(_tail(output), file=sys.stderr)
        print(f"ibtool validate: {res['problem']}", file=sys.stderr)
        return
    summary = ", ".join(f"{n} {k}" for k, n in res["counts"].items())
    print(f"{res['verdict']}: {summary or 'no tests ran'} in "
          f"{res['seconds']:.1f} s"
          + (f"; JUnit XML: {res['junitxml']}" if res["junitxml"] else ""))
    if res["first_problem"]:
        print(f"first problem: {res['first_problem']['test']}: "
              f"{res['first_problem']['detail']}")


def validate(args: argparse.Namespace) -> int:
    if args.pytest_args and args.pytest_args[0] == "--":
        args.pytest_args = args.pytest_args[1:]
    if args.timeout <= 0:
        raise ValueError("--timeout must be positive")
    if getattr(args, "hosts", None):
        if args.json:
            raise ValueError("--json is for one host: with --hosts the "
                             "report is the table, matrix and JUnit XML")
        from rdma.multihost.command import validate_hosts
        return validate_hosts(args)
    for opt, default in (("plot", None), ("pairs", "all"),
                         ("checks", "transfer,atomics,perf"),
                         ("slow_fraction", 0.5), ("lat_factor", 5.0),
                         ("pair_timeout", 10.0)):
        if getattr(args, opt, default) != default:
            raise ValueError(f"--{opt.replace('_', '-')} needs --hosts")
    # a device that is not there is bad usage (exit 2, one line naming
    # it and the devices there are), not 29 checks failing on it
    from rdma.cli._common import check_end_port_name
    for name in (args.device, args.peer_device):
        if name:
            check_end_port_name(name, provider=args.provider)
    tmpdir = None
    if args.junitxml:
        junit = os.path.abspath(args.junitxml)
        d = os.path.dirname(junit)
        if d and not os.path.isdir(d):
            raise ValueError(f"--junitxml: directory {d} does not exist")
    else:
        tmpdir = tempfile.mkdtemp(prefix="rdma-validate-xml-")
        junit = os.path.join(tmpdir, "validation.xml")
    try:
        if os.path.exists(junit):
            os.unlink(junit)
        t0 = time.monotonic()
        rc, output = run_suite(build_pytest_args(args, junit), args.timeout,
                               args.verbose)
        elapsed = time.monotonic() - t0
        if not os.path.exists(junit):
            print(output.rstrip(), file=sys.stderr)
            problem = f"pytest wrote no report (exit status {rc})"
            print(f"ibtool validate: {problem}", file=sys.stderr)
            if args.json:
                print(json.dumps({"verdict": "ERROR", "problem": problem,
                                  "exit_status": 3}))
            return 3
        rows, props = read_junit(junit)
        for r in rows:
            r["detail"] = own_option_names(r["detail"])
        if args.verbose and not args.json:
            print()
        result = _result(args, rc, output, rows, props, elapsed)
        if args.json:
            print(json.dumps(result))
        else:
            _print_result(result, rows, output)
        status: int = result["exit_status"]
        return status
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
