"""Remote hosts for users' own tests (the pytest plugin's
``--rdma-hosts`` fixtures).

:class:`RemoteHost` runs a function on a host; :func:`remote_pair`
connects a QP pair whose two ends live on two hosts and runs functions on
either end.  Functions travel as source (like execnet's ``remote_exec`` of
a function): they must be module-level functions that import what they
use inside their body, take the host's object first (the agent, or the
:class:`rdma.pytest_plugin.QPEnd` of a pair) and return something
execnet can carry (numbers, strings, bytes, lists, tuples, dicts).
"""
from __future__ import annotations

import inspect
import itertools
import textwrap
from typing import Any, Callable, Dict, NoReturn, Optional, Tuple

from rdma.multihost.engine import _both
from rdma.multihost.hosts import CheckError, Host, HostError

__all__ = ["RemoteHost", "RemoteEnd", "RemotePair", "remote_pair",
           "function_source"]

_keys = itertools.count(1 << 20)
#: Names of the QP types (ibv_qp_type) a pair may have.
_QP_TYPES = {2: "RC", 3: "UC", 4: "UD"}


def function_source(fn: Callable[..., Any]) -> Tuple[str, str]:
    """(source, name) of a module-level function, to run remotely."""
    if not inspect.isfunction(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    if fn.__closure__:
        raise ValueError(f"{fn.__name__} uses variables of an enclosing "
                         f"function: it cannot run on another host (pass "
                         f"them as keyword arguments)")
    return textwrap.dedent(inspect.getsource(fn)), fn.__name__


def _raise(e: BaseException) -> NoReturn:
    if isinstance(e, CheckError) and e.kind == "AssertionError":
        raise AssertionError(f"on {e.host}: {e.msg}") from None
    raise e


class RemoteHost:
    """One host of ``--rdma-hosts``: ``name``, ``info`` (its hostname,
    address, end port...) and :meth:`call`."""

    def __init__(self, host: Host, timeout: float = 60.0):
        self.host = host
        self.name = host.name
        self.info = host.info
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"RemoteHost({self.name!r}, {self.info.get('end_port')})"

    def call(self, fn: Callable[..., Any], timeout: Optional[float] = None,
             **kwargs: Any) -> Any:
        """Run ``fn(agent, **kwargs)`` on the host and return its result;
        ``agent.end_port``, ``agent.ctx`` (an open Context),
        ``agent.gid_index`` and ``agent.store`` (a dict kept between
        calls; objects with ``close()`` are closed at the end) are the
        host's.  An ``assert`` failing there raises AssertionError here."""
        src, name = function_source(fn)
        try:
            return self.host.call("call", timeout or self.timeout,
                                  source=src, name=name, kwargs=kwargs)
        except CheckError as e:
            _raise(e)


class RemoteEnd:
    """One end of a :class:`RemotePair`, on host ``host``."""

    def __init__(self, pair: "RemotePair", host: RemoteHost,
                 info: Dict[str, Any]):
        self.pair, self.host, self.info = pair, host, info

    def run(self, fn: Callable[..., Any], timeout: Optional[float] = None,
            **kwargs: Any) -> Any:
        """Run ``fn(end, **kwargs)`` where *end* is this end's
        :class:`rdma.pytest_plugin.QPEnd` (``qp``, ``cq``, ``buf``,
        ``mr``, ``path``, ``post_recv``, ``send_wr``)."""
        src, name = function_source(fn)
        try:
            return self.host.host.call("call_end", timeout or
                                       self.host.timeout, key=self.pair.key,
                                       source=src, name=name, kwargs=kwargs)
        except CheckError as e:
            _raise(e)

    @property
    def peer_mr(self) -> Dict[str, int]:
        """The other end's buffer: ``{"addr": ..., "rkey": ...}`` (for
        RDMA and atomic work requests)."""
        other = self.pair.b if self is self.pair.a else self.pair.a
        return {"addr": other.info["addr"], "rkey": other.info["rkey"]}


class RemotePair:
    """A QP pair between two hosts, at RTS: ``a`` and ``b`` are
    :class:`RemoteEnd`; :meth:`run` runs a function on both at once."""

    def __init__(self, key: int, a: RemoteHost, b: RemoteHost,
                 qp_type: Optional[int] = None):
        self.key = key
        self.hosts = (a, b)
        self.qp_type = qp_type
        self.closed = False
        self.a: RemoteEnd
        self.b: RemoteEnd

    def __repr__(self) -> str:
        kind = _QP_TYPES.get(self.qp_type, f"QP type {self.qp_type}") \
            if self.qp_type is not None else "QP"
        ends = []
        for host, end in zip(self.hosts, (getattr(self, "a", None),
                                          getattr(self, "b", None))):
            text = f"{host.name} {host.info.get('end_port', '?')}"
            qpn = ((end.info.get("path") or {}).get("sqpn")
                   if end is not None else None)
            if qpn is not None:
                text += f" QPN {qpn:#x}"
            ends.append(text)
        state = ("closed" if self.closed else
                 "at RTS" if hasattr(self, "b") else "connecting")
        return (f"<RemotePair {kind} {ends[0]} <-> {ends[1]}, {state}, "
                f"key {self.key}>")

    def run(self, fn_a: Callable[..., Any], fn_b: Callable[..., Any],
            kwargs_a: Optional[Dict[str, Any]] = None,
            kwargs_b: Optional[Dict[str, Any]] = None,
            timeout: Optional[float] = None) -> Tuple[Any, Any]:
        """Run ``fn_a`` on end a and ``fn_b`` on end b at the same time
        (a ping-pong needs both); return both results."""
        ra, rb = _both(lambda: self.a.run(fn_a, timeout, **(kwargs_a or {})),
                       lambda: self.b.run(fn_b, timeout, **(kwargs_b or {})))
        for ok, v in (ra, rb):
            if not ok:
                raise v
        return ra[1], rb[1]

    def close(self) -> None:
        self.closed = True
        for h in self.hosts:
            try:
                h.host.call("pair_end", 10.0, key=self.key)
            except (HostError, CheckError):
                pass

    def __enter__(self) -> "RemotePair":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remote_pair(a: RemoteHost, b: RemoteHost, qp_type: int, *,
                size: int = 4096, depth: int = 16,
                timeout: float = 60.0) -> RemotePair:
    """Make a QP of *qp_type* on each host and connect them (the two
    halves of the path cross as plain data, checked on arrival)."""
    if a.name == b.name:
        raise ValueError(f"a remote pair needs two hosts, got {a.name} twice")
    pair = RemotePair(next(_keys), a, b, int(qp_type))
    params = {"qp_type": int(qp_type), "size": int(size),
              "depth": int(depth), "hosts": [a.name, b.name],
              "timeout": timeout}
    try:
        ra, rb = _both(
            lambda: a.host.call("pair_begin", timeout, key=pair.key,
                                check="qp", role="a", params=params),
            lambda: b.host.call("pair_begin", timeout, key=pair.key,
                                check="qp", role="b", params=params))
        for ok, v in (ra, rb):
            if not ok:
                raise v
        ca, cb = _both(
            lambda: a.host.call("pair_step", timeout, key=pair.key,
                                step="connect", peer=rb[1]),
            lambda: b.host.call("pair_step", timeout, key=pair.key,
                                step="connect", peer=ra[1]))
        for ok, v in (ca, cb):
            if not ok:
                raise v
    except BaseException:
        pair.close()
        raise
    pair.a = RemoteEnd(pair, a, ra[1])
    pair.b = RemoteEnd(pair, b, rb[1])
    return pair


