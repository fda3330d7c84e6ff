"""Hosts reached through execnet gateways, each running the agent
(:mod:`rdma.multihost.agent`).

A host is given as an execnet gateway spec (``ssh=node1//python=/opt/venv/
bin/python``, ``popen//python=...``, ``socket=host:port``) with optional
keys of ours, removed before execnet sees the spec:

``device=NAME[/PORT]``   the RDMA device on that host (default: ``--device``,
                         else its first ACTIVE port)
``gid_index=N``          the GID index on that host
``id=NAME``              (execnet's own key) the name used in reports;
                         default ``h0``, ``h1``... in the order given

Every request to a host has a timeout; a gateway that does not start, an
agent that dies or does not answer becomes a :class:`HostError` naming the
host, never a hang.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from rdma._errors import RDMAError

__all__ = ["HostError", "CheckError", "Host", "HostSpec", "parse_spec",
           "read_spec_file", "start_hosts", "stop_hosts"]

_OUR_KEYS = ("device", "gid_index")


class HostError(RDMAError):
    """A host could not be started, died, or did not answer in time."""

    def __init__(self, host: str, msg: str):
        super().__init__(f"host {host}: {msg}")
        self.host = host
        self.msg = msg


class CheckError(RDMAError):
    """A check failed on a host (the agent answered with an error)."""

    def __init__(self, host: str, kind: str, msg: str, tb: str = ""):
        super().__init__(msg if kind == "AssertionError"
                         else f"{kind}: {msg}")
        self.host, self.kind, self.msg, self.tb = host, kind, msg, tb


class HostSpec:
    """One ``--hosts`` entry: the execnet spec and our own keys."""

    def __init__(self, spec: str, name: str, device: Optional[str],
                 gid_index: Optional[int]):
        self.spec, self.name = spec, name
        self.device, self.gid_index = device, gid_index

    def __repr__(self) -> str:
        return f"HostSpec({self.name!r}, {self.spec!r})"


def parse_spec(text: str, index: int) -> HostSpec:
    """Parse one host spec (see the module docstring)."""
    text = text.strip()
    if not text:
        raise ValueError("an empty host spec")
    parts = text.split("//")
    keep: List[str] = []
    found: Dict[str, str] = {}
    name = None
    for part in parts:
        key, eq, value = part.partition("=")
        if key in _OUR_KEYS:
            if not eq or not value:
                raise ValueError(f"host spec {text!r}: {key}= needs a value")
            found[key] = value
            continue
        if key == "id":
            name = value
        keep.append(part)
    kinds = [p.partition("=")[0] for p in keep]
    if not any(k in ("popen", "ssh", "socket", "vagrant_ssh") for k in kinds):
        raise ValueError(f"host spec {text!r}: not an execnet gateway spec "
                         f"(popen, ssh=HOST or socket=HOST:PORT, e.g. "
                         f"ssh=node1//python=/opt/venv/bin/python)")
    if name is None:
        name = f"h{index}"
        keep.insert(1, f"id={name}")
    gid = None
    if "gid_index" in found:
        try:
            gid = int(found["gid_index"], 0)
        except ValueError:
            raise ValueError(f"host spec {text!r}: gid_index="
                             f"{found['gid_index']!r} is not a number") \
                from None
    return HostSpec("//".join(keep), name, found.get("device"), gid)


def read_spec_file(path: str) -> List[str]:
    """The specs of a file: one per line, ``#`` comments and blank lines
    ignored."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    if not out:
        raise ValueError(f"{path}: no host specs in the file")
    return out


class Host:
    """A started host: its gateway and the channel to its agent.

    :meth:`call` sends one request and waits for its answer (at most
    *timeout* seconds).  Calls to one host are serialised; calls to
    different hosts may run in parallel threads."""

    def __init__(self, spec: HostSpec):
        self.spec = spec
        self.name = spec.name
        # (execnet's gateway and channel: execnet has no type hints)
        self.gateway: Any = None
        self.channel: Any = None
        self.info: Dict[str, Any] = {}
        #: Why the host is unusable (None while it is fine).
        self.dead: Optional[str] = None
        self._lock = threading.Lock()
        self._late = 0
        self.start_seconds = 0.0

    def __repr__(self) -> str:
        return f"Host({self.name!r})"

    @property
    def usable(self) -> bool:
        return self.dead is None and self.info.get("problem") is None

    def call(self, op: str, timeout: float, **kw: Any) -> Any:
        """Run *op* on the agent; return its result.

        :raises HostError: the host is gone or did not answer in time
        :raises CheckError: the op raised on the host"""
        with self._lock:
            if self.dead is not None:
                raise HostError(self.name, self.dead)
            ch = self.channel
            # Answers to requests that timed out come first: drop them.
            while self._late:
                try:
                    self._receive(ch, timeout, "an earlier request")
                except HostError as e:
                    if self.dead is None:
                        self._die(f"stopped answering ({e.msg})")
                    raise
                self._late -= 1
            try:
                ch.send((op, kw))
            except (OSError, EOFError, ValueError) as e:
                self._die(f"the gateway is closed ({e})")
            try:
                ans = self._receive(ch, timeout, op)
            except HostError as e:
                if "did not answer" in e.msg:
                    self._late += 1
                raise
        if ans[0] == "ok":
            return ans[1]
        raise CheckError(self.name, ans[1], ans[2],
                         ans[3] if len(ans) > 3 else "")

    def _receive(self, ch: Any, timeout: float, what: str) -> Any:
        try:
            return ch.receive(timeout)
        except ch.TimeoutError:
            raise HostError(self.name, f"did not answer {what} within "
                                       f"{timeout:g} s") from None
        except (EOFError, OSError) as e:
            self._die(f"the agent's channel closed during {what} "
                      f"({e or 'EOF'}): the agent or its host died")
        except ch.RemoteError as e:
            self._die(f"the agent died during {what}: "
                      f"{str(e).strip().splitlines()[-1] if str(e) else e}")
        raise AssertionError("unreachable")

    def _die(self, why: str) -> None:
        self.dead = why
        raise HostError(self.name, why)

    def stats(self, timeout: float = 10.0) -> Dict[str, Any]:
        stats: Dict[str, Any] = self.call("stats", timeout)
        return stats


def _make_gateway(group: Any, host: Host, result: Dict[str, Any]) -> None:
    try:
        gw = group.makegateway(host.spec.spec)
        result["gw"] = gw
        from rdma.multihost.agent import AGENT_SOURCE
        ch = gw.remote_exec(AGENT_SOURCE)
        result["ch"] = ch
    except BaseException as e:   # execnet raises many kinds
        result["error"] = e


def start_hosts(specs: Sequence[HostSpec], *, timeout: float = 60.0,
                device: Optional[str] = None,
                provider: Optional[str] = None,
                gid_index: Optional[int] = None,
                group: Any = None) -> Tuple[Any, List[Host]]:
    """Start a gateway and an agent on every host, in parallel, and open
    its device.  A host that fails gets ``dead`` (or ``info["problem"]``)
    set; it is still returned, so that reports can name it.

    :returns: (the execnet group, the hosts in the order given)"""
    try:
        import execnet
    except ImportError:
        raise RDMAError("validation across hosts needs execnet on this "
                        "machine (pip install execnet; the hosts need "
                        "only rdma)") from None
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"host names used twice: {', '.join(sorted(dup))} "
                         f"(give each spec its own id=)")
    if group is None:
        group = execnet.Group()
    hosts = [Host(s) for s in specs]
    results: List[Dict[str, Any]] = [{} for _ in hosts]
    threads = []
    t0 = time.monotonic()
    for h, r in zip(hosts, results):
        t = threading.Thread(target=_make_gateway, args=(group, h, r),
                             name=f"gateway {h.name}", daemon=True)
        t.start()
        threads.append(t)
    deadline = t0 + timeout
    for h, r, t in zip(hosts, results, threads):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            h.dead = (f"the gateway {h.spec.spec!r} did not start within "
                      f"{timeout:g} s")
        elif "error" in r:
            e = r["error"]
            h.dead = (f"the gateway {h.spec.spec!r} could not start: "
                      f"{type(e).__name__}: {str(e).strip() or 'no detail'}")
        else:
            h.gateway, h.channel = r["gw"], r["ch"]

    def hello(h: Host) -> None:
        try:
            left = max(1.0, deadline - time.monotonic())
            ans = h._receive(h.channel, left, "the agent's start")
            if ans[0] != "ok":
                h.dead = ans[2]
                return
            h.info = h.call("open", max(1.0, deadline - time.monotonic()),
                            name=h.name,
                            device=h.spec.device or device,
                            provider=provider,
                            gid_index=(h.spec.gid_index
                                       if h.spec.gid_index is not None
                                       else gid_index))
            h.start_seconds = time.monotonic() - t0
        except (HostError, CheckError) as e:
            if h.dead is None:
                h.dead = e.msg if isinstance(e, HostError) else str(e)

    ts = [threading.Thread(target=hello, args=(h,), daemon=True)
          for h in hosts if h.dead is None]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(1.0, deadline - time.monotonic()) + 5)
    return group, hosts


def stop_hosts(group: Any, hosts: Sequence[Host],
               timeout: float = 10.0) -> None:
    """Tell every agent to exit, then end the gateways (killing what does
    not end within *timeout*)."""
    for h in hosts:
        if h.channel is not None and h.dead is None:
            try:
                h.channel.send(("exit", {}))
            except Exception:
                pass
    try:
        group.terminate(timeout=timeout)
    except Exception:
        pass
