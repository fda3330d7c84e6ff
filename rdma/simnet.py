"""A simulated InfiniBand subnet: rdma's ibsim client shim.

``librdma_umad2sim.so`` (``csrc/umad2sim/``, built by ``setup.py`` next
to the fabric libraries in ``rdma/fabric/``) is preloaded into a process
that uses libibumad (opensm, infiniband-diags, rdma itself).  The process
then sees one CA, ``ibsim0``, whose port is a node of the fabric an
``ibsim`` server (Debian's ``ibsim-utils``) simulates, and its MADs travel
through that server.  See ``docs/sa.rst`` for what the shim does.

The environment the shim reads:

``IBSIM_SOCKNAME``
    the server's socket name (``ibsim`` started with the same variable);
``SIM_HOST``
    the node (name or NodeDescription) to sit on, else ibsim's default;
``SIM_SET_ISSM``
    set: the port is SM-capable from the start;
``UMAD2SIM_WAIT``
    seconds to wait for the server (default 30);
``UMAD2SIM_DEBUG``
    set: say on stderr what the shim does.

:class:`SimNet` is a whole simulated subnet: ``ibsim`` on a topology
(a file, ``fat-tree:K`` or ``line:N``, :mod:`rdma.simtopo`) and
``opensm`` on one of its HCAs through the shim, with the environment of
a client on another.  Its state (socket name, process groups, logs)
lives in a directory named for it (:func:`state_root`), so another
process (``ibtool simnet down``) finds and stops it.
"""
from __future__ import annotations

import getpass
import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from rdma import simtopo

__all__ = ["SHIM_LIBRARY", "shim_path", "environ", "SimNet",
           "SimNetError", "state_root", "DEFAULT_TOPOLOGY"]

#: File name of the shim, in ``rdma/fabric/``.
SHIM_LIBRARY = "librdma_umad2sim.so"

_FABRIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "fabric")


def shim_path() -> str:
    """Return the absolute path of the shim.

    :raises FileNotFoundError: if it was not built (the message says how).
    """
    path = os.path.join(_FABRIC_DIR, SHIM_LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{path} is missing: build it with 'python setup.py build_ext "
            f"--inplace' (or 'pip install -e .'), which builds the ibsim "
            f"shim with the fabric libraries")
    return path


def environ(node: Optional[str], sockname: str,
            base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Return a copy of *base* (default ``os.environ``) for a process on
    ``node`` of the ibsim server named ``sockname``: the shim is added to
    ``LD_PRELOAD`` (after what is there), ``SIM_HOST`` and
    ``IBSIM_SOCKNAME`` are set."""
    env = dict(os.environ if base is None else base)
    lib = shim_path()
    rest = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split()
            if p and p != lib]
    env["LD_PRELOAD"] = " ".join(rest + [lib])
    env["IBSIM_SOCKNAME"] = sockname
    if node is not None:
        env["SIM_HOST"] = node
    return env


# ---------------------------------------------------------------------------
# A whole simulated subnet

#: The topology :class:`SimNet` uses when none is given: 4 leaves and 2
#: spines of 4 ports, 8 HCAs.
DEFAULT_TOPOLOGY = "fat-tree:4"

#: The tools a simulated subnet needs and the Debian packages that have
#: them.
_TOOLS = {"ibsim": "ibsim-utils", "opensm": "opensm",
          "timeout": "coreutils"}

_STATE = "state.json"
#: Variables a client's environment goes without: they could choose
#: another device than the simulated CA.
_UNSET = ("RDMA_PROVIDER", "RDMA_DEVICE")
_counter = itertools.count()


class SimNetError(RuntimeError):
    """A simulated subnet could not be started, found or used."""


def state_root() -> Path:
    """The directory that holds one directory per simulated subnet:
    ``$RDMA_SIMNET_DIR`` if set, else ``$XDG_RUNTIME_DIR/rdma-simnet``
    when that is a writable directory, else ``/tmp/rdma-simnet-<user>``.
    """
    if os.environ.get("RDMA_SIMNET_DIR"):
        return Path(os.environ["RDMA_SIMNET_DIR"])
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg) and os.access(xdg, os.W_OK):
        return Path(xdg) / "rdma-simnet"
    try:
        user = getpass.getuser()
    except Exception:                   # noqa: BLE001 - no passwd entry
        user = str(os.getuid())
    return Path("/tmp") / f"rdma-simnet-{user}"


def missing_tool() -> Optional[str]:
    """Why a simulated subnet cannot start here (a tool that is not
    installed, named with its Debian package), or None."""
    for tool, package in _TOOLS.items():
        if shutil.which(tool) is None:
            return (f"{tool} is not installed (it is in Debian's "
                    f"{package} package: apt-get install {package})")
    return None


def _group_members(pgid: int) -> List[int]:
    """The live (not zombie) processes of process group *pgid*."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_for(path: Path, text: str, timeout: float,
              proc: "subprocess.Popen[bytes]", what: str) -> None:
    """Wait until *text* is in the file *path* that *proc* writes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if text in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            raise SimNetError(f"{what} exited ({proc.returncode}) before "
                              f"{text!r}; see {path}")
        if time.monotonic() > deadline:
            raise SimNetError(f"{what} did not say {text!r} in "
                              f"{timeout:.0f} s; see {path}")
        time.sleep(0.02)


class SimNet:
    """A simulated subnet: ibsim on *topology*, opensm on *sm_node*
    through the shim, clients on *node* (default: the first HCA that is
    not the SM's).

    :param topology: a topology file (ibnetdiscover's format),
        ``fat-tree:K`` or ``line:N`` (:mod:`rdma.simtopo`).
    :param name: the subnet's name: its state is in ``state_root()/name``
        (default: a name of this process).  Two subnets of one name cannot
        be up at once.
    :param lifetime: seconds after which ibsim and opensm stop by
        themselves (coreutils ``timeout``), whatever happens to the
        process that started them.
    :param root: the directory of the state directories (default
        :func:`state_root`).
    :param sm: start opensm (False: ibsim alone, no SM, no SUBNET UP).
    :param console: keep ibsim's console on a pipe of this process
        (:meth:`console`).
    :param shim: the shim to preload (default :func:`shim_path`).

    ``start()``/``stop()`` or ``with SimNet(...) as net:``.
    :meth:`attach` finds one another process started.
    """

    def __init__(self, topology: Union[str, Path] = DEFAULT_TOPOLOGY,
                 name: Optional[str] = None, *,
                 sm_node: Optional[str] = None, node: Optional[str] = None,
                 lifetime: float = 3600, root: Optional[Path] = None,
                 sm: bool = True, console: bool = False,
                 shim: Optional[Union[str, Path]] = None) -> None:
        if name is None:
            name = f"py{os.getpid()}-{next(_counter)}"
        if not name or "/" in name or name.startswith("."):
            raise SimNetError(f"bad simulated subnet name {name!r}")
        if lifetime <= 0:
            raise SimNetError(f"lifetime must be positive, not {lifetime}")
        self.name = name
        self.topology = str(topology)
        self.dir = Path(root if root is not None else state_root()) / name
        self.lifetime = lifetime
        self.with_sm = sm
        self.with_console = console
        self._shim = None if shim is None else str(shim)
        self._sm_node = sm_node
        self._node = node
        self.sockname = ""
        self.hcas: List[str] = []
        self.pgids: Dict[str, int] = {}
        self._procs: Dict[str, "subprocess.Popen[bytes]"] = {}
        #: Seconds :meth:`start` took.
        self.startup_s = 0.0

    def __repr__(self) -> str:
        state = "up" if self.is_up() else "down"
        return (f"<SimNet {self.name!r} {self.topology} {state}, "
                f"dir {self.dir}>")

    # -- names

    @property
    def shim(self) -> str:
        """The shim the subnet's processes preload."""
        return self._shim if self._shim is not None else shim_path()

    @property
    def sm_node(self) -> Optional[str]:
        """The HCA opensm runs on (None without an SM)."""
        if not self.with_sm:
            return None
        return self._sm_node or (self.hcas[0] if self.hcas else None)

    @property
    def node(self) -> str:
        """The HCA clients sit on by default."""
        if self._node:
            return self._node
        others = [h for h in self.hcas if h != self.sm_node]
        if not others and not self.hcas:
            raise SimNetError(f"the topology {self.topology} has no HCA")
        return (others or self.hcas)[0]

    # -- environment of a client

    def env(self, node: Optional[str] = None,
            base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The environment of a client on *node* (default :attr:`node`):
        *base* (default ``os.environ``) with the shim preloaded,
        ``IBSIM_SOCKNAME`` and ``SIM_HOST``, and without
        ``RDMA_PROVIDER`` and ``RDMA_DEVICE`` (which could point rdma
        at another device than the simulated CA)."""
        if not self.sockname:
            raise SimNetError(f"simulated subnet {self.name!r} is not up")
        e = dict(os.environ if base is None else base)
        for var in _UNSET:
            e.pop(var, None)
        rest = [p for p in e.get("LD_PRELOAD", "").replace(":", " ").split()
                if p and p != self.shim]
        e["LD_PRELOAD"] = " ".join(rest + [self.shim])
        e["IBSIM_SOCKNAME"] = self.sockname
        e["SIM_HOST"] = node or self.node
        return e

    def exports(self, node: Optional[str] = None) -> str:
        """``export NAME=value`` lines (for ``eval`` in a POSIX shell) of
        what a client on *node* needs (after an ``unset`` line when this
        process has ``RDMA_PROVIDER`` or ``RDMA_DEVICE``)."""
        e = self.env(node)
        unset = [v for v in _UNSET if v in os.environ]
        return ("unset " + " ".join(unset) + "\n" if unset else "") + \
            "".join(f"export {k}={shlex.quote(e[k])}\n"
                    for k in ("LD_PRELOAD", "IBSIM_SOCKNAME", "SIM_HOST"))

    def _child_env(self, node: Optional[str]) -> Dict[str, str]:
        e = self.env(node)
        # The rdma package this process uses is the one children import.
        pkg = str(Path(__file__).resolve().parent.parent)
        e["PYTHONPATH"] = os.pathsep.join(
            [pkg] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
        return e

    def run(self, argv: Sequence[str], node: Optional[str] = None, *,
            timeout: float = 60, check: bool = True,
            cwd: Optional[Union[str, Path]] = None,
            **kw: Any) -> "subprocess.CompletedProcess[str]":
        """Run *argv* on *node* with the shim preloaded, to completion
        (killed after *timeout* seconds), in *cwd* (default the state
        directory: a shimmed process makes ``./sys-<pid>/`` where it
        starts).  Output is captured as text.

        :raises SimNetError: when *check* and it fails (its stderr in
            the message)."""
        cmd = ["timeout", "-k", "2", str(timeout)] + [str(a) for a in argv]
        kw.setdefault("capture_output", True)
        res = subprocess.run(cmd, cwd=str(cwd or self.dir),
                             env=self._child_env(node), text=True,
                             timeout=timeout + 10, **kw)
        if check and res.returncode != 0:
            how = "timed out" if res.returncode == 124 else \
                f"failed ({res.returncode})"
            raise SimNetError(f"{' '.join(map(str, argv))} on "
                              f"{node or self.node} {how}: "
                              f"{(res.stderr or '').strip()[-2000:]}")
        return res

    def python(self, code: str, node: Optional[str] = None, *,
               timeout: float = 60) -> str:
        """Run Python *code* in a shimmed interpreter on *node*; return
        what it printed.  :raises SimNetError: if it fails."""
        return self.run([sys.executable, "-c", code], node,
                        timeout=timeout).stdout

    def popen(self, argv: Sequence[str], node: Optional[str] = None,
              **kw: Any) -> "subprocess.Popen[Any]":
        """Start a long-lived shimmed process on *node* in the state
        directory, bounded by the subnet's lifetime; the caller stops
        it."""
        cmd = ["timeout", "-k", "5", str(self.lifetime)] + \
            [str(a) for a in argv]
        kw.setdefault("cwd", str(self.dir))
        return subprocess.Popen(cmd, env=self._child_env(node), **kw)

    # -- lifetime

    def start(self) -> "SimNet":
        """Start ibsim and opensm and wait for SUBNET UP.

        :raises SimNetError: a tool is missing, a subnet of this name is
            up, the topology is bad, or a process failed (its log named).
        """
        why = missing_tool()
        if why:
            raise SimNetError(why)
        shim = self.shim                 # FileNotFoundError says how
        if not os.path.isfile(shim):
            raise SimNetError(f"no shim {shim}")
        try:
            text, self.topology = simtopo.topology_text(self.topology)
        except (ValueError, OSError) as e:
            raise SimNetError(str(e)) from None
        self.hcas = simtopo.hca_nodes(text)
        if not self.hcas:
            raise SimNetError(f"the topology {self.topology} has no "
                              f"connected HCA")
        self._claim()
        t0 = time.monotonic()
        try:
            (self.dir / "topology").write_text(text)
            self.sockname = f"rdma-simnet-{os.getuid()}-{self.name}-" \
                f"{os.getpid()}-{next(_counter)}"
            self._start_ibsim()
            self._save()
            if self.with_sm:
                self._start_opensm()
                self._save()
        except BaseException:
            self.stop(remove=False)         # the logs the error names stay
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _claim(self) -> None:
        """Make the state directory; refuse if a subnet of this name is
        up, clear what a dead one left."""
        if self.dir.exists():
            try:
                other = SimNet.attach(self.name, root=self.dir.parent)
            except SimNetError:
                other = None
            if other is not None and other.is_up():
                raise SimNetError(
                    f"a simulated subnet named {self.name!r} is already "
                    f"up (stop it with: ibtool simnet down --name "
                    f"{self.name})")
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, mode=0o700)

    def _spawn(self, role: str, argv: List[str], node: Optional[str],
               extra: Optional[Dict[str, str]] = None,
               stdin: Any = subprocess.DEVNULL) -> "subprocess.Popen[bytes]":
        env = self.env(node) if node is not None else dict(os.environ)
        env["IBSIM_SOCKNAME"] = self.sockname
        env.update(extra or {})
        cmd = ["timeout", "-k", "5", str(int(self.lifetime))] + argv
        with open(self.dir / f"{role}.out", "wb") as out:
            proc = subprocess.Popen(cmd, cwd=str(self.dir), env=env,
                                    start_new_session=True, stdin=stdin,
                                    stdout=out, stderr=subprocess.STDOUT)
        self._procs[role] = proc
        self.pgids[role] = proc.pid
        return proc

    def _start_ibsim(self) -> None:
        argv = ["ibsim", "-s"] + ([] if self.with_console else ["-n"])
        proc = self._spawn(
            "ibsim", argv + [str(self.dir / "topology")], None,
            stdin=subprocess.PIPE if self.with_console
            else subprocess.DEVNULL)
        _wait_for(self.dir / "ibsim.out", "Network simulator ready", 30,
                  proc, "ibsim")

    def _opensm_conf(self) -> Path:
        """opensm's default configuration with its log flushed at every
        line (else "SUBNET UP" sits in a buffer) and no dump files."""
        conf = self.dir / "opensm.conf"
        subprocess.run(["timeout", "20", "opensm", "-c", str(conf)],
                       cwd=str(self.dir), capture_output=True, check=True,
                       timeout=30)
        lines = []
        for ln in conf.read_text().splitlines():
            if ln.startswith("dump_files_dir"):
                continue
            if ln.startswith("force_log_flush"):
                ln = "force_log_flush TRUE"
            lines.append(ln)
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def _start_opensm(self) -> None:
        conf = self._opensm_conf()
        extra = {}
        for var, d in (("OSM_CACHE_DIR", "osm-cache"),
                       ("OSM_TMP_DIR", "osm-tmp")):
            (self.dir / d).mkdir(exist_ok=True)
            extra[var] = str(self.dir / d)
        log = self.dir / "opensm.log"
        proc = self._spawn("opensm", ["opensm", "-F", str(conf), "-f",
                                      str(log)], self.sm_node, extra)
        _wait_for(log, "SUBNET UP", 60, proc, "opensm")

    def _save(self) -> None:
        state = {"name": self.name, "topology": self.topology,
                 "sockname": self.sockname, "hcas": self.hcas,
                 "sm_node": self.sm_node, "node": self.node,
                 "shim": self.shim, "pgids": self.pgids,
                 "lifetime": self.lifetime, "started": time.time()}
        tmp = self.dir / (_STATE + ".tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(tmp, self.dir / _STATE)

    @classmethod
    def attach(cls, name: str = "default",
               root: Optional[Path] = None) -> "SimNet":
        """The subnet *name* that a process (maybe another) started.

        :raises SimNetError: if there is none of that name."""
        d = Path(root if root is not None else state_root()) / name
        try:
            state = json.loads((d / _STATE).read_text())
        except (OSError, ValueError):
            raise SimNetError(f"no simulated subnet named {name!r} is up "
                              f"(nothing in {d}; start one with: ibtool "
                              f"simnet up --name {name})") from None
        net = cls(state["topology"], name, root=d.parent,
                  sm_node=state.get("sm_node"), node=state.get("node"),
                  lifetime=state.get("lifetime", 3600),
                  sm=state.get("sm_node") is not None,
                  shim=state.get("shim"))
        net.sockname = state["sockname"]
        net.hcas = list(state.get("hcas", []))
        net.pgids = {k: int(v) for k, v in state.get("pgids", {}).items()}
        return net

    def _ours(self, pgid: int) -> List[int]:
        """The live processes of *pgid* if it is still this subnet's
        group (one of them names its state directory)."""
        pids = _group_members(pgid)
        if any(str(self.dir) in _cmdline(p) for p in pids):
            return pids
        return []

    def processes(self) -> Dict[str, List[int]]:
        """{role: live pids} of ibsim and opensm (and their timeout
        wrappers)."""
        return {role: self._ours(pgid) for role, pgid in self.pgids.items()}

    def is_up(self) -> bool:
        """True while ibsim (and opensm, if it has one) runs."""
        procs = self.processes()
        return bool(procs) and all(procs.get(r) for r in
                                   (["ibsim", "opensm"] if self.with_sm
                                    else ["ibsim"]))

    def status(self) -> Dict[str, Any]:
        """What :meth:`is_up`, the names and the processes say, as a
        dict (``ibtool simnet status``)."""
        return {"name": self.name, "up": self.is_up(),
                "topology": self.topology, "hcas": len(self.hcas),
                "sm_node": self.sm_node, "node": self.node if self.hcas
                else None, "sockname": self.sockname, "dir": str(self.dir),
                "processes": self.processes()}

    def process(self, role: str) -> "Optional[subprocess.Popen[bytes]]":
        """The ``subprocess.Popen`` of ``"ibsim"`` or ``"opensm"`` (its
        coreutils ``timeout`` wrapper, which passes signals on) when this
        process started it, else None."""
        return self._procs.get(role)

    def console(self, command: str, timeout: float = 10) -> str:
        """Send one command to ibsim's console (``Unlink "Hca3"[1]``...;
        needs ``console=True``), wait until ibsim has run it and return
        what it printed."""
        proc = self._procs.get("ibsim")
        if not self.with_console or proc is None or proc.stdin is None:
            raise SimNetError("this simulated subnet has no ibsim console "
                              "(make it with console=True)")
        if proc.poll() is not None:
            raise SimNetError("ibsim is not running")
        log = self.dir / "ibsim.out"
        before = log.read_bytes()
        proc.stdin.write(command.encode() + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            now = log.read_bytes()
            if now.count(b"sim> ") > before.count(b"sim> "):
                return now[len(before):].decode(errors="replace")
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SimNetError(f"ibsim did not run {command!r}; see "
                                  f"{log}")
            time.sleep(0.01)

    def stop(self, grace: float = 3.0, remove: bool = True) -> None:
        """Stop opensm and ibsim (SIGTERM, then SIGKILL after *grace*
        seconds) and (if *remove*) remove the state directory.
        Idempotent."""
        for role in ("opensm", "ibsim"):
            pgid = self.pgids.get(role)
            if pgid is not None:
                self._stop_group(role, pgid, grace)
        for proc in self._procs.values():
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        self._procs.clear()
        self.pgids.clear()
        if remove and (self.dir / "topology").exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_group(self, role: str, pgid: int, grace: float) -> None:
        proc = self._procs.get(role)
        if not self._ours(pgid) and (proc is None or
                                     proc.poll() is not None):
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if proc is not None:
                    proc.poll()
                if not _group_members(pgid):
                    break
                time.sleep(0.02)
            else:
                continue
            break
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "SimNet":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
