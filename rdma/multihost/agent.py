"""The agent: what runs on each host, at the far end of an execnet gateway.

The engine starts it with ``gateway.remote_exec(AGENT_SOURCE)``; it then
serves requests from its channel, one at a time, until ``("exit",)`` or
the channel closes.  A request is ``(op, kwargs)``; the answer is
``("ok", result)`` or ``("error", kind, message)`` where *kind* is the
exception's class name.  Everything crossing the channel is made of
execnet's basic types (bytes, str, numbers, lists, tuples, dicts).

Ops: ``open`` (the device, the port checks, the host's identity),
``pair_begin``/``pair_step``/``pair_end`` (one end of a check of
:mod:`rdma.multihost.checks`), ``call`` (run a user function, given as
source, with this host's :class:`Agent`: the remote-host fixtures),
``stats`` (peak memory).
"""
from __future__ import annotations

import os
import socket
import sys
import textwrap
import traceback
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

if TYPE_CHECKING:
    import rdma.ibverbs as ibv
    from rdma.devices import EndPort

__all__ = ["Agent", "serve", "AGENT_SOURCE"]

#: What the engine sends through ``gateway.remote_exec``.
AGENT_SOURCE = (
    "import sys\n"
    "try:\n"
    "    from rdma.multihost.agent import serve\n"
    "except Exception as e:\n"
    "    channel.send(('error', 'ImportError', 'cannot import the rdma agent "
    "(is rdma installed for ' + sys.executable + '?): ' + repr(e)))\n"
    "else:\n"
    "    serve(channel)\n")


class Agent:
    """This host's state: its device and the check ends in progress."""

    def __init__(self) -> None:
        self.name = "?"
        self.end_port: Optional[EndPort] = None
        self.ctx: Optional[ibv.Context] = None
        self.gid_index: Optional[int] = None
        self.pairs: Dict[int, Any] = {}
        #: Free for user code run through ``call`` (the fixtures' QP pairs).
        self.store: Dict[str, Any] = {}

    def device(self) -> Tuple[EndPort, ibv.Context, int]:
        """The open device: (end port, context, GID index)."""
        if self.end_port is None or self.ctx is None or \
                self.gid_index is None:
            raise RuntimeError(f"host {self.name} has no usable device")
        return self.end_port, self.ctx, self.gid_index

    # -- ops ---------------------------------------------------------------

    def op_open(self, name: str, device: Optional[str] = None,
                provider: Optional[str] = None,
                gid_index: Optional[int] = None) -> Dict[str, Any]:
        """Open the device; return who we are and the port check."""
        import rdma
        from rdma.pytest_plugin import (RdmaSetup, Unavailable, gid_problem,
                                        port_problem, default_gid_index)
        self.name = name
        info: Dict[str, Any] = {
            "hostname": socket.gethostname(), "pid": os.getpid(),
            "python": sys.executable,
            "address": os.environ.get("RDMA_UCX_ADDR", ""),
            "netns": _netns(), "problem": None}
        setup = RdmaSetup(device=device, provider=provider,
                          gid_index=gid_index)
        try:
            ep = setup.end_port()
        except Unavailable as e:
            info["problem"] = str(e)
            return info
        info.update(end_port=str(ep), provider=ep.provider,
                    link_layer=ep.link_layer)
        problem = port_problem(ep)
        idx = gid_index if gid_index is not None else default_gid_index(ep)
        if problem is None and (ep.link_layer == "Ethernet" or
                                (ep.gids and gid_index is not None)):
            problem = gid_problem(ep, idx)
        info["gid_index"] = idx
        if ep.gids and 0 <= idx < len(ep.gids):
            info["gid"] = str(ep.gids[idx])
        info["lid"] = ep.lid
        from rdma.IBA import mtu_to_bytes
        info["mtu"] = mtu_to_bytes(ep.attr.active_mtu)
        info["max_msg_sz"] = ep.attr.max_msg_sz
        info["atomics"] = bool(ep.parent.attr.atomic_cap)
        info["problem"] = problem
        if problem is None:
            self.end_port = ep
            self.gid_index = idx
            self.ctx = rdma.get_verbs(ep)
        return info

    def op_pair_begin(self, key: int, check: str, role: str,
                      params: Dict[str, Any]) -> Any:
        from rdma.multihost.checks import PAIR_CHECKS
        if self.ctx is None:
            raise RuntimeError(f"host {self.name} has no usable device")
        self._drop(key)
        cls = PAIR_CHECKS[check]
        end = cls(self, role, params)
        self.pairs[key] = end
        return end.hello(None)

    def op_pair_step(self, key: int, step: str, peer: Any) -> Any:
        end = self.pairs[key]
        if step != "connect" and step not in end.steps:
            raise ValueError(f"unknown step {step!r}")
        return getattr(end, step)(peer)

    def op_pair_end(self, key: int) -> None:
        self._drop(key)

    def op_call(self, source: str, name: str,
                kwargs: Dict[str, Any]) -> Any:
        """Run function *name* of *source* as ``fn(agent, **kwargs)``."""
        ns: Dict[str, Any] = {"__name__": "rdma_multihost_call"}
        exec(compile(textwrap.dedent(source), f"<call {name}>", "exec"), ns)
        return ns[name](self, **kwargs)

    def op_call_end(self, key: int, source: str, name: str,
                    kwargs: Dict[str, Any]) -> Any:
        """Run *name* from *source* as ``fn(end, **kwargs)`` on the
        :class:`rdma.pytest_plugin.QPEnd` of pair *key*."""
        end = self.pairs[key].end
        ns: Dict[str, Any] = {"__name__": "rdma_multihost_call"}
        exec(compile(textwrap.dedent(source), f"<call {name}>", "exec"), ns)
        return ns[name](end, **kwargs)

    def op_stats(self) -> Dict[str, Any]:
        import resource
        ru = resource.getrusage(resource.RUSAGE_SELF)
        rss = 0
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
        except OSError:
            pass
        return {"maxrss_kib": ru.ru_maxrss, "rss_kib": rss,
                "cpu_s": ru.ru_utime + ru.ru_stime}

    # -- teardown ----------------------------------------------------------

    def _drop(self, key: int) -> None:
        end = self.pairs.pop(key, None)
        if end is not None:
            try:
                end.close()
            except Exception:
                pass

    def close(self) -> None:
        for k in list(self.pairs):
            self._drop(k)
        for v in list(self.store.values()):
            close = getattr(v, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass
        self.store.clear()
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None


def _netns() -> str:
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def serve(channel: Any) -> None:
    """Answer requests on *channel* until told to exit."""
    agent = Agent()
    channel.send(("ok", {"ready": True, "pid": os.getpid()}))
    try:
        while True:
            try:
                msg = channel.receive()
            except EOFError:
                break
            if msg is None or msg[0] == "exit":
                break
            op, kw = msg
            try:
                fn = getattr(agent, "op_" + op)
                channel.send(("ok", fn(**kw)))
            except AssertionError as e:
                channel.send(("error", "AssertionError", str(e)))
            except Exception as e:
                tb = traceback.format_exc(limit=6)
                text = str(e) or tb.strip().splitlines()[-1]
                channel.send(("error", type(e).__name__, text, tb))
    finally:
        agent.close()
