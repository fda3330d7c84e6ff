"""A simulated InfiniBand fabric for tests: ibsim + opensm + shimmed clients.

:class:`Fabric` starts ``ibsim`` on a topology with its own abstract socket
name, starts ``opensm`` on one node through rdma's ibsim client shim
(``librdma_umad2sim.so``, ``csrc/umad2sim/``, see ``docs/sa.rst``), waits
for "SUBNET UP" in its log and stops everything on :meth:`close`
(process groups, SIGTERM then SIGKILL).  Every process it starts is also
wrapped in coreutils ``timeout`` so that nothing outlives a crashed test
run by more than ``lifetime`` seconds.

The shim is the one ``setup.py`` builds (:func:`rdma.simnet.shim_path`),
or ``$RDMA_UMAD2SIM`` when set (to compare another build).  Clients run
through the shim in the fabric's scratch directory (each shimmed process
creates ``./sys-<pid>/`` there):

- :meth:`Fabric.run` runs a command (``saquery``, ``python -m rdma ...``)
  with a timeout;
- :meth:`Fabric.worker` starts one long-lived Python process on a node
  that executes functions of ``sa_ops`` and sends back pickled results
  (see ``worker.py``).  One worker per node and fabric keeps the number
  of ibsim clients low (ibsim serves at most 10, opensm included, and a
  killed client keeps its slot).
"""
from __future__ import annotations

import itertools
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from rdma import simnet

NET_EXAMPLES = Path("/usr/share/doc/ibsim-utils/net-examples")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: Debian's shim (ibsim-utils), only for comparisons: it cuts an RMPP
#: answer to its first MAD and loses the last 32 bytes of every MAD it
#: receives.
STOCK_SHIM = Path("/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so")
#: rdma's shim as setup.py builds it (rdma/fabric/librdma_umad2sim.so
#: of the rdma package the tests import).
OUR_SHIM = Path(simnet.__file__).resolve().parent / "fabric" / \
    simnet.SHIM_LIBRARY


def _pick_shim() -> Path:
    """The shim every shimmed process preloads: ``$RDMA_UMAD2SIM`` if set,
    else rdma's own (``OUR_SHIM``; run ``setup.py build_ext --inplace`` or
    ``.ci/setup`` when it is missing)."""
    if os.environ.get("RDMA_UMAD2SIM"):
        return Path(os.environ["RDMA_UMAD2SIM"])
    return OUR_SHIM


SHIM = _pick_shim()

_counter = itertools.count()


class FabricError(RuntimeError):
    """The simulated fabric could not be started or used."""


def _wait_for(path: Path, text: str, deadline: float,
              proc: subprocess.Popen) -> None:
    while True:
        try:
            if text in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise FabricError(f"{proc.args[3:]} exited ({proc.returncode}) "
                              f"before {text!r}; see {path}")
        if time.monotonic() > deadline:
            raise FabricError(f"no {text!r} in {path} in time")
        time.sleep(0.02)


def _stop(proc: Optional[subprocess.Popen], grace: float = 2.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)


class Worker:
    """A shimmed Python process on one node running ``sa_ops`` functions."""

    def __init__(self, fabric: "Fabric", node: str, timeout: float = 30):
        self.node = node
        self.timeout = timeout
        self.log = fabric.scratch / f"worker-{node}-{next(_counter)}.log"
        self._err = open(self.log, "wb")
        self.proc = fabric.popen(
            [sys.executable, "-u", str(HERE / "worker.py")], node,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self.call("ping")

    def call(self, op: str, *args: Any, timeout: Optional[float] = None,
             **kw: Any) -> Any:
        """Run ``sa_ops.<op>(*args, **kw)`` in the worker; return its
        result or re-raise its exception.  Bounded by ``timeout``."""
        if self.proc.poll() is not None:
            raise FabricError(f"worker on {self.node} is dead: "
                              f"{self.log.read_text()[-2000:]}")
        data = pickle.dumps((op, args, kw))
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        raw = self._read(4, deadline)
        (n,) = struct.unpack("<I", raw)
        status, value = pickle.loads(self._read(n, deadline))
        if status == "err":
            raise value
        return value

    def _read(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise FabricError(f"worker on {self.node} did not answer in "
                                  f"time; log: "
                                  f"{self.log.read_text()[-2000:]}")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise FabricError(f"worker on {self.node} died: "
                                  f"{self.log.read_text()[-2000:]}")
            buf += chunk
        return buf

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()     # EOF: the worker exits cleanly
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        _stop(self.proc)
        self._err.close()


class Fabric:
    """ibsim on ``topology`` and (unless ``sm_node`` is None) opensm;
    shimmed processes preload ``shim`` (default :data:`SHIM`)."""

    def __init__(self, topology: Path, scratch: Path,
                 sm_node: Optional[str] = "Hca1", lifetime: int = 900,
                 shim: Optional[Path] = None, console: bool = False):
        self.topology = Path(topology)
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.sm_node = sm_node
        self.lifetime = lifetime
        #: The ibsim client shim this fabric's processes preload.
        self.shim = SHIM if shim is None else Path(shim)
        self.sockname = f"rdma-sa-{os.getpid()}-{next(_counter)}"
        self.ibsim: Optional[subprocess.Popen] = None
        self.opensm: Optional[subprocess.Popen] = None
        self.workers: Dict[str, Worker] = {}
        self.startup_s = 0.0
        #: Keep ibsim's console on a pipe (see :meth:`console`).
        self.with_console = console

    # -- processes

    def env(self, node: Optional[str]) -> Dict[str, str]:
        e = dict(os.environ)
        e["IBSIM_SOCKNAME"] = self.sockname
        e["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), str(HERE)] + ([e["PYTHONPATH"]]
                                      if e.get("PYTHONPATH") else []))
        if node is not None:
            e["LD_PRELOAD"] = str(self.shim)
            e["SIM_HOST"] = node
        return e

    def popen(self, argv: List[str], node: Optional[str],
              **kw: Any) -> subprocess.Popen:
        """Start a long-lived process (shimmed on ``node``) bounded by
        ``lifetime`` seconds, in its own process group."""
        cmd = ["timeout", "-k", "5", str(self.lifetime)] + list(argv)
        return subprocess.Popen(cmd, cwd=self.scratch, env=self.env(node),
                                start_new_session=True, **kw)

    def run(self, argv: List[str], node: str, timeout: float = 20,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a shimmed command on ``node`` to completion (bounded)."""
        cmd = ["timeout", "-k", "2", str(timeout)] + list(argv)
        res = subprocess.run(cmd, cwd=self.scratch, env=self.env(node),
                             capture_output=True, text=True,
                             timeout=timeout + 5)
        if check and res.returncode != 0:
            raise FabricError(f"{argv} on {node} failed ({res.returncode}):"
                              f" {res.stderr.strip()[-1500:]}")
        return res

    # -- lifetime

    def start(self) -> "Fabric":
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _start(self) -> None:
        log = self.scratch / "ibsim.log"
        argv = ["ibsim", "-s"] + ([] if self.with_console else ["-n"])
        with open(log, "wb") as out:
            self.ibsim = self.popen(
                argv + [str(self.topology)], None,
                stdin=subprocess.PIPE if self.with_console
                else subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT)
        _wait_for(log, "Network simulator ready", time.monotonic() + 15,
                  self.ibsim)
        if self.sm_node is None:
            return
        conf = self.scratch / "opensm.conf"
        subprocess.run(["timeout", "20", "opensm", "-c", str(conf)],
                       cwd=self.scratch, capture_output=True, check=True,
                       timeout=30)
        lines = []
        for line in conf.read_text().splitlines():
            if line.startswith("dump_files_dir"):
                continue
            if line.startswith("force_log_flush"):
                line = "force_log_flush TRUE"
            lines.append(line)
        conf.write_text("\n".join(lines) + "\n")
        for d in ("osm-cache", "osm-tmp"):
            (self.scratch / d).mkdir(exist_ok=True)
        osm_log = self.scratch / "opensm.log"
        env_extra = {"OSM_CACHE_DIR": str(self.scratch / "osm-cache"),
                     "OSM_TMP_DIR": str(self.scratch / "osm-tmp")}
        cmd = ["timeout", "-k", "5", str(self.lifetime), "opensm", "-F",
               str(conf), "-f", str(osm_log)]
        env = self.env(self.sm_node)
        env.update(env_extra)
        with open(self.scratch / "opensm.out", "wb") as out:
            self.opensm = subprocess.Popen(
                cmd, cwd=self.scratch, env=env, start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)
        _wait_for(osm_log, "SUBNET UP", time.monotonic() + 30, self.opensm)

    def console(self, command: str) -> None:
        """Send one command to ibsim's console (``Unlink "Hca3"[1]``,
        ``Error "Hca3" 100``...; the fabric must be made with
        ``console=True``) and wait until ibsim has run it (its next
        ``sim>`` prompt in ``ibsim.log``, where its answer goes too)."""
        if not self.with_console or self.ibsim is None:
            raise FabricError("this fabric has no ibsim console")
        if self.ibsim.poll() is not None:
            raise FabricError("ibsim is not running")
        log = self.scratch / "ibsim.log"
        before = log.read_bytes().count(b"sim> ")
        self.ibsim.stdin.write(command.encode() + b"\n")
        self.ibsim.stdin.flush()
        deadline = time.monotonic() + 10
        while log.read_bytes().count(b"sim> ") <= before:
            if time.monotonic() > deadline or self.ibsim.poll() is not None:
                raise FabricError(f"ibsim did not run {command!r}; see "
                                  f"{log}")
            time.sleep(0.01)

    def worker(self, node: str) -> Worker:
        """The (cached) worker process on ``node``."""
        w = self.workers.get(node)
        if w is None or w.proc.poll() is not None:
            w = self.workers[node] = Worker(self, node)
        return w

    def close(self) -> None:
        """Stop workers, opensm and ibsim (idempotent, never raises)."""
        for w in self.workers.values():
            try:
                w.close()
            except Exception:       # noqa: BLE001 - teardown must finish
                pass
        self.workers.clear()
        _stop(self.opensm)
        _stop(self.ibsim)

    def __enter__(self) -> "Fabric":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def hca_nodes(topology: Path) -> List[str]:
    """The names of the HCAs of an ibnetdiscover-style topology file that
    have at least one connected port."""
    nodes, current, connected = [], None, False
    for line in Path(topology).read_text().splitlines():
        s = line.strip()
        if s.startswith(("Hca", "Switch")):
            if current and connected:
                nodes.append(current)
            current = s.split('"')[1] if s.startswith("Hca") else None
            connected = False
        elif s.startswith("[") and '"' in s:
            connected = True
    if current and connected:
        nodes.append(current)
    return nodes
