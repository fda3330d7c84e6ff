"""Simulated hosts: network namespaces on one bridge (FACTS section 5).

:class:`Cluster` makes *n* namespaces, each with a veth ``eth0`` on a
private bridge and its own IPv4 address (``10.231.<k>.<i>/24``: addresses
that exist only inside these namespaces; the bridge has none, so the
initial namespace gets no route), and for each a wrapper script that runs
the venv's Python inside the namespace with the software fabric over TCP
(``RDMA_UCX_ADDR`` = the host's address, ``UCX_TLS=tcp``,
``UCX_NET_DEVICES=eth0``).  ``spec(i)`` is the execnet gateway spec
``popen//id=hI//python=<wrapper>``.

Names are unique per run (``mh<6 hex>``); :meth:`Cluster.close` (also on
``with`` exit, at interpreter exit and on SIGTERM of the owner) removes the
namespaces, the bridge, the veths and the scratch directory, whatever
failed before.  Needs root.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

__all__ = ["Cluster", "can_run", "why_not"]


def why_not() -> Optional[str]:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the multihost tests as root)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


def can_run() -> bool:
    return why_not() is None


def _ip(*args: str, ns: Optional[str] = None, check: bool = True,
        timeout: float = 20) -> subprocess.CompletedProcess:
    cmd = ["ip"] + (["netns", "exec", ns, "ip"] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: "
                           f"{r.stderr.strip() or r.returncode}")
    return r


class Cluster:
    """*n* simulated hosts on one bridge.

    :param n: number of hosts (1..250)
    :param python: the interpreter the gateways run (default: this one)
    :param env: extra environment for every host's Python
    """

    def __init__(self, n: int, python: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None):
        if not 1 <= n <= 250:
            raise ValueError(f"n must be 1..250, not {n}")
        problem = why_not()
        if problem:
            raise RuntimeError(problem)
        self.n = n
        self.tag = "mh" + os.urandom(3).hex()
        self.subnet = 1 + int.from_bytes(os.urandom(1), "big") % 250
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.dir = tempfile.mkdtemp(prefix=f"rdma-{self.tag}-")
        self.bridge = f"{self.tag}br"
        self.namespaces: List[str] = []
        self.host_veths: List[str] = []
        self.addresses: List[str] = []
        self.wrappers: List[str] = []
        self._closed = False
        self._owner = os.getpid()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- setup ------------------------------------------------------------

    def _build(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            ns = f"{self.tag}-h{i}"
            veth = f"{self.tag}v{i}"
            addr = f"10.231.{self.subnet}.{i + 1}"
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            self.host_veths.append(veth)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            self.addresses.append(addr)
            self.wrappers.append(self._wrapper(i, ns, addr))

    def _wrapper(self, i: int, ns: str, addr: str) -> str:
        env = {"RDMA_UCX_ADDR": addr, "UCX_TLS": "tcp",
               "UCX_NET_DEVICES": "eth0", "UCX_WARN_UNUSED_ENV_VARS": "n",
               "RDMA_PROVIDER": "ucx", "RDMA_SIM_HOST": f"h{i}"}
        env.update(self.env)
        exports = "".join(f"export {k}='{v}'\n" for k, v in env.items())
        path = os.path.join(self.dir, f"python-h{i}")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    f"# simulated host h{i}: namespace {ns}, address {addr}\n"
                    f"{exports}"
                    f"exec ip netns exec {ns} {self.python} \"$@\"\n")
        os.chmod(path, 0o755)
        return path

    # -- what tests use ---------------------------------------------------

    def spec(self, i: int) -> str:
        """The execnet gateway spec of host *i* (its id is ``hI``)."""
        return f"popen//id=h{i}//python={self.wrappers[i]}"

    def specs(self) -> List[str]:
        return [self.spec(i) for i in range(self.n)]

    def counters(self, i: int) -> Dict[str, int]:
        """Bytes and packets through host *i*'s veth (inside its namespace)."""
        out = {}
        for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"):
            r = subprocess.run(["ip", "netns", "exec", self.namespaces[i],
                                "cat", f"/sys/class/net/eth0/statistics/{k}"],
                               capture_output=True, text=True, timeout=20)
            out[k] = int(r.stdout.strip() or 0)
        return out

    def cut(self, i: int) -> None:
        """Cut host *i* off: its veth down on both ends."""
        _ip("link", "set", self.host_veths[i], "down")
        _ip("link", "set", "eth0", "down", ns=self.namespaces[i])

    def slow(self, i: int, rate: str = "10mbit") -> None:
        """Rate-limit host *i* both ways: tbf on both ends of its veth."""
        for ns, dev in ((self.namespaces[i], "eth0"),
                        (None, self.host_veths[i])):
            cmd = ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                   rate, "burst", "32kbit", "latency", "400ms"]
            if ns:
                cmd = ["ip", "netns", "exec", ns] + cmd
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=20)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")

    def unslow(self, i: int) -> None:
        """Lift :meth:`slow` from host *i*."""
        for ns, dev in ((self.namespaces[i], "eth0"),
                        (None, self.host_veths[i])):
            cmd = ["tc", "qdisc", "del", "dev", dev, "root"]
            if ns:
                cmd = ["ip", "netns", "exec", ns] + cmd
            subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                           check=True)

    def block(self, i: int, j: int) -> None:
        """Break only the link between hosts *i* and *j*: each gets a
        blackhole route to the other's address (both keep talking to the
        rest)."""
        for a, b in ((i, j), (j, i)):
            _ip("route", "add", "blackhole", f"{self.addresses[b]}/32",
                ns=self.namespaces[a])

    # -- teardown ---------------------------------------------------------

    def close(self) -> None:
        """Remove everything this cluster made (idempotent)."""
        if self._closed or os.getpid() != self._owner:
            return
        self._closed = True
        for ns in self.namespaces:
            # Processes still inside would keep the namespace alive.
            r = subprocess.run(["ip", "netns", "pids", ns],
                               capture_output=True, text=True, timeout=20)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
        for veth in self.host_veths:
            _ip("link", "del", veth, check=False)
        _ip("link", "del", self.bridge, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> List[str]:
        """Namespaces and links of this cluster that still exist."""
        left = []
        r = subprocess.run(["ip", "netns", "list"], capture_output=True,
                           text=True, timeout=20)
        left += [ln.split()[0] for ln in r.stdout.splitlines()
                 if ln.startswith(self.tag)]
        r = subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                           text=True, timeout=20)
        left += [ln.split(":")[1].strip().split("@")[0]
                 for ln in r.stdout.splitlines()
                 if len(ln.split(":")) > 1 and
                 ln.split(":")[1].strip().startswith(self.tag)]
        return left

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
