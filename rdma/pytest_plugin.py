"""pytest plugin for tests that need an RDMA device.

Registered through the ``pytest11`` entry point (as ``rdma``), so it is
active in every pytest run of an environment where ``rdma`` is installed.
It adds:

Options (also ini keys ``rdma_device``, ``rdma_port``...)
    ``--rdma-device NAME[/PORT]``  the device (default: the first ACTIVE
    port of the provider); ``--rdma-port N``; ``--rdma-gid-index N`` (default:
    on RoCE the RoCE v2 IPv4-mapped GID, else a RoCE v2 GID, else index 0);
    ``--rdma-provider verbs|ucx|auto`` (default ``$RDMA_PROVIDER``, else auto);
    ``--rdma-peer-device NAME[/PORT]`` and ``--rdma-peer-gid-index N``: the
    far end of the QP pairs (default: the same port, loopback);
    ``--rdma-quick`` (tests may run fewer iterations);
    ``--rdma-multicast`` (opt in to checks of multicast delivery);
    ``--rdma-require``: a missing device or a port that is not ACTIVE fails
    the tests instead of skipping them.

Fixtures
    ``rdma_setup`` (the resolved configuration, :class:`RdmaSetup`),
    ``rdma_end_port``, ``rdma_peer_end_port``, ``rdma_gid_index``,
    ``rdma_ctx``, ``rdma_pd``, ``rdma_pair`` (a factory of connected
    :class:`QPPair`), ``rdma_rc_pair``, ``rdma_uc_pair``, ``rdma_ud_pair``
    and ``rdma_sa`` (a :class:`rdma.umad.UMAD` whose port has a subnet
    administrator).  Every verbs object they make is closed afterwards.
    ``rdma_simnet``: a simulated InfiniBand subnet (ibsim and opensm,
    :class:`rdma.simnet.SimNet`) up for the session, whose ``run`` and
    ``python`` start shimmed processes on it (``--rdma-simnet-topology``
    chooses the topology).

Markers
    ``rdma_atomics``, ``rdma_srq``, ``rdma_mw``, ``rdma_ud_multicast``,
    ``rdma_two_devices``, ``rdma_needs("atomics", ...)``: skip the test, with
    the reason, when the device (or the peer device) lacks the capability;
    ``rdma_require``: as ``--rdma-require`` for one test or module.

Remote hosts (``--rdma-hosts SPEC``, repeatable: execnet gateway specs)
    ``rdma_hosts`` (every host, started once per session), ``rdma_remote_host``
    (the first), ``rdma_remote_pair`` (a factory of QP pairs between two
    hosts, :func:`rdma.multihost.remote.remote_pair`) and
    ``rdma_remote_rc_pair``; skipped without ``--rdma-hosts``.

Without a device a test that uses these fixtures or markers is skipped with
a reason that names the device and provider that were looked for; a
``--rdma-device`` (or peer device) that is not among the devices there
stops the run at once as a usage error (exit 4), naming the ones there.
"""
from __future__ import annotations

import os
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generator, Iterator,
                    List, NoReturn, Optional, Sequence, Tuple, TypeVar,
                    Union)

import pytest

if TYPE_CHECKING:
    import rdma.ibverbs as ibv
    from _pytest.nodes import Node

    from rdma.devices import DemandList, Device, EndPort
    from rdma.IBA import GID
    from rdma.multihost.remote import RemoteHost, RemotePair
    from rdma.path import IBPath
    from rdma.umad import UMAD

_T = TypeVar("_T")

__all__ = ["RdmaSetup", "Unavailable", "QPEnd", "QPPair", "make_pair",
           "path_between", "poll_cq", "CAPABILITIES", "default_gid_index",
           "describe_gids"]

_OPTIONS = (
    # (name, ini, type, help)
    ("device", str, "RDMA device to test, NAME or NAME/PORT (default: the "
                    "first ACTIVE port)"),
    ("port", int, "port number of the device (default: its first port)"),
    ("gid_index", int, "GID index to use (default: a RoCE v2 IPv4-mapped "
                       "GID on RoCE, else index 0)"),
    ("provider", str, "provider: verbs, ucx or auto (default: "
                      "$RDMA_PROVIDER, else auto)"),
    ("peer_device", str, "device of the far end of QP pairs, NAME or "
                         "NAME/PORT (default: the same port, loopback)"),
    ("peer_gid_index", int, "GID index on the peer device (default: like "
                            "--rdma-gid-index)"),
)

_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE",
                5: "ACTIVE_DEFER"}
_PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled",
                4: "PortConfigurationTraining", 5: "LinkUp",
                6: "LinkErrorRecovery", 7: "PhyTest"}
_GID_TYPES = {0: "IB/RoCE v1", 1: "RoCE v1", 2: "RoCE v2"}


class Unavailable(Exception):
    """What a test needs is not there (a device, a provider, a port)."""


class NotFound(Unavailable):
    """A device or port the user named is not among those there: a
    mistyped ``--rdma-device`` is bad usage, not a reason to skip."""


# ---------------------------------------------------------------------------
# options

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rdma", "RDMA devices (rdma.pytest_plugin)")
    for name, typ, help_ in _OPTIONS:
        group.addoption("--rdma-" + name.replace("_", "-"),
                        dest="rdma_" + name, type=typ, default=None,
                        metavar=name.split("_")[-1].upper(), help=help_)
        parser.addini("rdma_" + name, help_ + " (ini form)", default=None)
    group.addoption("--rdma-quick", dest="rdma_quick", action="store_true",
                    default=False,
                    help="run fewer iterations (slow machines, emulated VMs)")
    group.addoption("--rdma-multicast", dest="rdma_multicast",
                    action="store_true", default=False,
                    help="also check UD multicast delivery (it needs "
                         "multicast routing in the fabric)")
    group.addoption("--rdma-require", dest="rdma_require", action="store_true",
                    default=False,
                    help="fail, instead of skipping, tests whose device is "
                         "missing or whose port is not ACTIVE")
    group.addoption("--rdma-hosts", dest="rdma_hosts", action="append",
                    default=None, metavar="SPEC|FILE",
                    help="a remote host as an execnet gateway spec "
                         "(ssh=node1//python=/opt/venv/bin/python, "
                         "popen//python=...), or a file of specs; repeat for "
                         "more hosts (fixtures rdma_hosts, rdma_remote_host, "
                         "rdma_remote_pair)")
    group.addoption("--rdma-simnet-topology", dest="rdma_simnet_topology",
                    default=None, metavar="TOPOLOGY",
                    help="the topology of the rdma_simnet fixture's "
                         "simulated subnet: a topology file, fat-tree:K or "
                         "line:N (default: fat-tree:4)")


_MARKERS = {
    "rdma_atomics": "skip unless the RDMA device(s) support atomic operations",
    "rdma_srq": "skip unless the RDMA device(s) support shared receive queues",
    "rdma_mw": "skip unless the RDMA device(s) support memory windows",
    "rdma_ud_multicast": "skip unless the RDMA device(s) support UD multicast",
    "rdma_two_devices": "skip unless --rdma-peer-device names another port",
    "rdma_needs(*caps)": "skip unless the RDMA device(s) have every "
                         "capability named (atomics, srq, mw, ud_multicast, "
                         "two_devices)",
    "rdma_require": "a missing RDMA device or inactive port fails the test "
                    "instead of skipping it",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in _MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[_SETUP_KEY] = RdmaSetup.from_config(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    setup = config.stash.get(_SETUP_KEY, None)
    if setup is not None:
        setup.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """A device (or peer device) the user named that is not there, while
    others are, stops the run at once with one line naming it and the
    ones there are (pytest's usage error, exit 4), instead of a green run
    of skips.  Checked only for the command line's options (a shared ini
    file may name a device some machines lack: those skip) and when a
    collected test uses an rdma fixture.  No device at all stays a skip:
    a machine without RDMA."""
    config = session.config
    setup = config.stash.get(_SETUP_KEY, None)
    named = [(option, spec, find) for option, spec, find in (
        ("--rdma-device", config.getoption("rdma_device", None),
         setup.end_port if setup else None),
        ("--rdma-peer-device", config.getoption("rdma_peer_device", None),
         setup.peer_end_port if setup else None)) if spec]
    if setup is None or not named:
        return
    if not any(n.startswith("rdma_")
               for item in session.items
               for n in getattr(item, "fixturenames", ())):
        return
    for option, spec, find in named:
        try:
            assert find is not None
            find()
        except NotFound as e:
            raise pytest.UsageError(f"{option} {spec}: {e}") from None
        except Unavailable:
            return          # no devices, no provider: tests skip


def pytest_collection_modifyitems(session: pytest.Session,
                                   config: pytest.Config,
                                   items: List[pytest.Item]) -> None:
    # The shipped suite runs (and reports) in its own order: ports first.
    order: Optional[Dict[str, int]] = None
    for i, item in enumerate(items):
        mod = getattr(getattr(item, "module", None), "__name__", "")
        if mod.startswith("rdma.validation."):
            if order is None:
                from rdma.validation import MODULES
                order = {m: k for k, m in enumerate(MODULES)}
    if order is None:
        return

    def key(pair: Tuple[int, pytest.Item]) -> Tuple[int, int]:
        assert order is not None
        i, item = pair
        mod = getattr(getattr(item, "module", None), "__name__", "")
        if mod.startswith("rdma.validation."):
            return (order.get(mod.rsplit(".", 1)[1], len(order)), i)
        return (len(order) + 1, i)
    items[:] = [it for _, it in sorted(enumerate(items), key=key)]


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    setup = config.stash.get(_SETUP_KEY, None)
    if setup is None or not setup.explicit:
        return None
    return f"rdma: {setup.describe()}"


# ---------------------------------------------------------------------------
# the resolved configuration

def describe_gids(end_port: EndPort, limit: int = 8) -> str:
    """The non-empty GIDs of *end_port*: ``0 fe80::... (RoCE v2), ...``."""
    items = [f"{i} {g} ({_GID_TYPES.get(t, t)})"
             for i, (g, t) in enumerate(zip(end_port.gids, end_port.gid_types))
             if g]
    if not items:
        return "none"
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _is_v4_mapped(gid: GID) -> bool:
    return bytes(gid)[:12] == b"\0" * 10 + b"\xff\xff"


def default_gid_index(end_port: EndPort, like: Optional[GID] = None) -> int:
    """The GID index the fixtures use when none is given: on RoCE a RoCE v2
    GID (IPv4-mapped first, or of the same family as the GID *like*), else
    index 0."""
    if end_port.link_layer != "Ethernet":
        return 0
    want_v4 = True if like is None else _is_v4_mapped(like)
    first_v2: Optional[int] = None
    first_any: Optional[int] = None
    for i, (g, t) in enumerate(zip(end_port.gids, end_port.gid_types)):
        if not g:
            continue
        if first_any is None:
            first_any = i
        if t == 2:
            if _is_v4_mapped(g) == want_v4:
                return i
            if first_v2 is None:
                first_v2 = i
    for cand in (first_v2, first_any):
        if cand is not None:
            return cand
    return 0


def _port_state_text(end_port: EndPort) -> str:
    a = end_port.attr
    return (f"{_PORT_STATES.get(a.state, a.state)} ({a.state}), physical "
            f"state {_PHYS_STATES.get(a.phys_state, a.phys_state)}")


def _netdev_of(end_port: EndPort) -> Optional[str]:
    """The network interface under a RoCE port (from sysfs), if known."""
    if end_port.provider != "verbs" or end_port.link_layer != "Ethernet":
        return None
    base = (f"/sys/class/infiniband/{end_port.parent.name}/ports/"
            f"{end_port.port_id}/gid_attrs/ndevs")
    try:
        for name in sorted(os.listdir(base), key=int):
            try:
                with open(os.path.join(base, name)) as f:
                    dev = f.read().strip()
            except OSError:
                continue
            if dev:
                return dev
    except (OSError, ValueError):
        pass
    # A port that is down has an empty GID table; rxe names its netdev in
    # the parent link.
    try:
        link = os.readlink(f"/sys/class/infiniband/{end_port.parent.name}"
                           f"/device/net")
        return os.path.basename(link) or None
    except OSError:
        pass
    try:
        names = os.listdir(f"/sys/class/infiniband/{end_port.parent.name}"
                           f"/device/net")
        return names[0] if names else None
    except OSError:
        return None


def port_problem(end_port: EndPort) -> Optional[str]:
    """Why *end_port* cannot carry traffic, or None if it is ACTIVE."""
    a = end_port.attr
    if a.state == 4:
        return None
    text = f"{end_port} is not ACTIVE: state {_port_state_text(end_port)}"
    ndev = _netdev_of(end_port)
    if ndev:
        try:
            with open(f"/sys/class/net/{ndev}/operstate") as f:
                op = f.read().strip()
            text += f"; its network interface {ndev} is {op}"
            if op == "down":
                text += f" (ip link set {ndev} up)"
        except OSError:
            text += f"; its network interface is {ndev}"
    elif end_port.link_layer == "InfiniBand" and a.state in (2, 3):
        text += " (no subnet manager has configured it: is an SM running?)"
    return text


def gid_problem(end_port: EndPort, index: int) -> Optional[str]:
    """Why GID *index* of *end_port* cannot be used, or None."""
    n = len(end_port.gids)
    if index < 0 or index >= n:
        return (f"GID index {index} does not exist on {end_port} (its GID "
                f"table has {n} entries); non-empty GIDs: "
                f"{describe_gids(end_port)}")
    if not end_port.gids[index]:
        return (f"GID index {index} of {end_port} is empty (::); "
                f"non-empty GIDs: {describe_gids(end_port)}")
    return None


class RdmaSetup:
    """The options of the run, resolved lazily to end ports.

    Lookups are cached: :meth:`end_port` and :meth:`peer_end_port` return
    the :class:`rdma.EndPort` or raise :class:`Unavailable` with a message
    that names what was looked for."""

    def __init__(self, device: Optional[str] = None,
                 port: Optional[int] = None,
                 gid_index: Optional[int] = None,
                 provider: Optional[str] = None,
                 peer_device: Optional[str] = None,
                 peer_gid_index: Optional[int] = None,
                 quick: bool = False, require: bool = False,
                 multicast: bool = False):
        self.device = device
        self.port = port
        self.gid_index_opt = gid_index
        self.provider = provider
        self.peer_device = peer_device
        self.peer_gid_index_opt = peer_gid_index
        self.quick = quick
        self.require = require
        self.multicast = multicast
        self._cache: Dict[str, Tuple[bool, Any]] = {}

    @classmethod
    def from_config(cls, config: pytest.Config) -> "RdmaSetup":
        def get(name: str, typ: Callable[[Any], Any]) -> Any:
            v = config.getoption("rdma_" + name, None)
            if v is None:
                v = config.getini("rdma_" + name)
                if v in (None, "", []):
                    return None
                try:
                    v = typ(v)
                except ValueError:
                    raise pytest.UsageError(
                        f"ini rdma_{name}: {v!r} is not a valid "
                        f"{getattr(typ, '__name__', typ)}")
            return v
        kw = {name: get(name, typ) for name, typ, _ in _OPTIONS}
        return cls(quick=config.getoption("rdma_quick", False),
                   require=config.getoption("rdma_require", False),
                   multicast=config.getoption("rdma_multicast", False), **kw)

    @property
    def explicit(self) -> bool:
        return any(v is not None for v in (self.device, self.port,
                                           self.gid_index_opt, self.provider,
                                           self.peer_device))

    @property
    def provider_name(self) -> str:
        return self.provider or os.environ.get("RDMA_PROVIDER") or "auto"

    def describe(self) -> str:
        dev = self.device or "first ACTIVE port"
        if self.port is not None:
            dev += f" port {self.port}"
        s = f"device {dev}, provider {self.provider_name}"
        if self.gid_index_opt is not None:
            s += f", GID index {self.gid_index_opt}"
        if self.peer_device:
            s += f", peer {self.peer_device}"
        return s

    def __repr__(self) -> str:
        """The options that differ from the defaults, as the constructor
        takes them, and the end ports once looked up (``->``)."""
        opts = [("device", self.device, None), ("port", self.port, None),
                ("gid_index", self.gid_index_opt, None),
                ("provider", self.provider, None),
                ("peer_device", self.peer_device, None),
                ("peer_gid_index", self.peer_gid_index_opt, None),
                ("quick", self.quick, False),
                ("require", self.require, False),
                ("multicast", self.multicast, False)]
        s = "RdmaSetup(" + ", ".join(f"{k}={v!r}" for k, v, default in opts
                                     if v != default) + ")"
        found = [f"{k} {self._cache[k][1]}" for k in ("end_port",
                                                        "peer_end_port")
                 if self._cache.get(k, (False,))[0]]
        return s + (f" -> {', '.join(found)}" if found else "")

    def close(self) -> None:
        self._cache.clear()

    # -- lookups

    def _cached(self, key: str, fn: Callable[[], _T]) -> _T:
        if key not in self._cache:
            try:
                self._cache[key] = (True, fn())
            except Unavailable as e:
                self._cache[key] = (False, e)
        ok, v = self._cache[key]
        if not ok:
            raise v
        res: _T = v
        return res

    def devices(self) -> DemandList[Device]:
        def find() -> DemandList[Device]:
            import rdma
            try:
                return rdma.get_devices(self.provider)
            except Exception as e:   # unknown provider, missing library
                raise Unavailable(f"RDMA provider {self.provider_name!r} is "
                                  f"not usable: {e}") from None
        return self._cached("devices", find)

    def _lookup(self, spec: Optional[str], port: Optional[int],
                what: str) -> EndPort:
        devices = self.devices()
        if not devices:
            raise Unavailable(
                f"no RDMA device found (provider {self.provider_name})"
                + (f"; wanted {what} {spec!r}" if spec else "")
                + "; run inside the Soft-RoCE VM (python -m rdma.testvm) or "
                  "choose another provider with --rdma-provider")
        names = ", ".join(str(p) for d in devices for p in d.end_ports)
        if spec is None:
            ports = [p for d in devices for p in d.end_ports
                     if port is None or p.port_id == port]
            if not ports:
                raise Unavailable(f"no RDMA port {port} (have: {names})")
            active = [p for p in ports if p.state == 4]
            return (active or ports)[0]
        dev_name, sep, port_s = spec.partition("/")
        if sep:
            try:
                port = int(port_s, 0)
            except ValueError:
                raise NotFound(f"invalid port number in {what} "
                               f"{spec!r}") from None
        for d in devices:
            if d.name != dev_name:
                continue
            if not d.end_ports:
                raise Unavailable(f"RDMA device {dev_name} has no ports")
            if port is None:
                return d.end_ports.first()
            for p in d.end_ports:
                if p.port_id == port:
                    return p
            raise NotFound(f"RDMA device {dev_name} has no port {port} "
                           f"(have: {names})")
        raise NotFound(f"RDMA device {dev_name!r} not found (provider "
                       f"{self.provider_name} has: {names})")

    def end_port(self) -> EndPort:
        """The end port under test."""
        return self._cached("end_port", lambda: self._lookup(
            self.device, self.port, "device"))

    def peer_end_port(self) -> EndPort:
        """The far end of QP pairs (the same port when loopback)."""
        def find() -> EndPort:
            if not self.peer_device:
                return self.end_port()
            return self._lookup(self.peer_device, None, "peer device")
        return self._cached("peer_end_port", find)

    @property
    def two_devices(self) -> bool:
        return bool(self.peer_device) and \
            self.peer_end_port() != self.end_port()

    def gid_index(self) -> int:
        """The GID index on :meth:`end_port` (given, or the default)."""
        ep = self.end_port()
        if self.gid_index_opt is not None:
            return self.gid_index_opt
        return default_gid_index(ep)

    def peer_gid_index(self) -> int:
        ep = self.peer_end_port()
        if not self.peer_device or ep == self.end_port():
            return self.gid_index()
        if self.peer_gid_index_opt is not None:
            return self.peer_gid_index_opt
        if self.gid_index_opt is not None:
            return self.gid_index_opt
        me = self.end_port()
        idx = self.gid_index()
        like = me.gids[idx] if idx < len(me.gids) else None
        return default_gid_index(ep, like)

    def ready_port(self, peer: bool = False) -> EndPort:
        """The end port (or the peer's), checked to be ACTIVE with a
        usable GID; raises Unavailable (port) or ValueError (GID)."""
        ep = self.peer_end_port() if peer else self.end_port()
        problem = port_problem(ep)
        if problem:
            raise Unavailable(problem)
        idx = self.peer_gid_index() if peer else self.gid_index()
        if ep.link_layer == "Ethernet" or ep.gids:
            problem = gid_problem(ep, idx)
            if problem:
                raise ValueError(problem)
        return ep


_SETUP_KEY = pytest.StashKey[RdmaSetup]()


def _setup_of(config: pytest.Config) -> RdmaSetup:
    try:
        return config.stash[_SETUP_KEY]
    except KeyError:
        s = config.stash[_SETUP_KEY] = RdmaSetup.from_config(config)
        return s


def _requires(node: Node, setup: RdmaSetup) -> bool:
    return setup.require or node.get_closest_marker("rdma_require") is not None


def _skip(reason: str) -> NoReturn:
    """pytest.skip(reason), reported at the user's test (its file and
    line, as pytest reports a skip from a fixture) rather than at the line
    of this plugin that called it, which is what pytest reports for a skip
    raised in a hook such as pytest_runtest_setup."""
    try:
        exc = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:           # a pytest without the keyword (< 7)
        exc = pytest.skip.Exception(reason)
    raise exc from None


def _unavailable(node: Node, setup: RdmaSetup,
                 e: Exception) -> NoReturn:
    if _requires(node, setup):
        # Called while handling *e*: the failure says it all, so it is
        # not chained to it ("During handling of the above exception").
        raise pytest.fail.Exception(str(e), pytrace=False) from None
    _skip(str(e))


# ---------------------------------------------------------------------------
# capability markers

def _cap_atomics(ep: EndPort) -> Optional[str]:
    a = ep.parent.attr
    if a.atomic_cap == 0:
        return (f"{ep.parent} has no atomic operations (atomic_cap "
                f"IBV_ATOMIC_NONE)")
    return None


def _cap_srq(ep: EndPort) -> Optional[str]:
    if ep.parent.attr.max_srq == 0:
        return f"{ep.parent} has no shared receive queues (max_srq 0)"
    return None


def _cap_mw(ep: EndPort) -> Optional[str]:
    if ep.parent.attr.max_mw == 0:
        return f"{ep.parent} has no memory windows (max_mw 0)"
    return None


def _cap_ud_multicast(ep: EndPort) -> Optional[str]:
    a = ep.parent.attr
    if a.max_mcast_grp == 0 or a.max_mcast_qp_attach == 0:
        return (f"{ep.parent} has no UD multicast (max_mcast_grp "
                f"{a.max_mcast_grp}, max_mcast_qp_attach "
                f"{a.max_mcast_qp_attach})")
    return None


#: Capability name -> function(end_port) returning why it is missing, or
#: None.  The markers ``rdma_<name>`` and ``rdma_needs(name)`` check them
#: on the end port and on the peer end port.
CAPABILITIES: Dict[str, Callable[[EndPort], Optional[str]]] = {
    "atomics": _cap_atomics,
    "srq": _cap_srq,
    "mw": _cap_mw,
    "ud_multicast": _cap_ud_multicast,
}


def _wanted_caps(item: pytest.Item) -> List[str]:
    caps: List[str] = []
    for name in list(CAPABILITIES) + ["two_devices"]:
        if item.get_closest_marker("rdma_" + name) is not None:
            caps.append(name)
    for m in item.iter_markers("rdma_needs"):
        for c in m.args:
            if c not in CAPABILITIES and c != "two_devices":
                raise pytest.UsageError(
                    f"{item.nodeid}: rdma_needs({c!r}): unknown capability "
                    f"(known: {', '.join(CAPABILITIES)}, two_devices)")
            if c not in caps:
                caps.append(c)
    return caps


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    caps = _wanted_caps(item)
    if not caps:
        return
    setup = _setup_of(item.config)
    try:
        ep = setup.end_port()
        peer = setup.peer_end_port()
    except Unavailable as e:
        _unavailable(item, setup, e)
    for c in caps:
        if c == "two_devices":
            if not setup.two_devices:
                _skip("needs two RDMA ports: give --rdma-peer-device "
                            "(now loopback on " f"{ep})")
            continue
        for port in ((ep,) if peer == ep else (ep, peer)):
            why = CAPABILITIES[c](port)
            if why:
                _skip(why)


# ---------------------------------------------------------------------------
# polling and pairs

def poll_cq(cq: ibv.CQ, n: int = 1, timeout: float = 10.0,
            what: str = "") -> List[ibv.wc]:
    """Poll *cq* until *n* completions arrived and return them; fail with
    what did arrive after *timeout* seconds.  (A :class:`rdma.vtools.
    CQPoller` that leaves the CQ's completion channel to the caller.)"""
    from rdma.vtools import CQPoller
    got = list(CQPoller(cq, use_channel=False).iterwc(count=n,
                                                      timeout=timeout))
    if len(got) < n:
        raise AssertionError(
            f"no completion after {timeout:g} s"
            f"{' for ' + what if what else ''}"
            f" (expected {n}, got {len(got)}): is the peer reachable?")
    return got


def path_between(src_ep: EndPort, src_gid_index: int, dst_ep: EndPort,
                 dst_gid_index: int, **kw: Any) -> IBPath:
    """An :class:`rdma.path.IBPath` from *src_ep* to *dst_ep* without an
    SA: GIDs on RoCE, LIDs on InfiniBand, the fabric's own addressing on
    the software fabric; the MTU is the smaller active MTU."""
    from rdma.path import IBPath, resolve_path
    mtu = min(src_ep.attr.active_mtu, dst_ep.attr.active_mtu)
    if src_ep.link_layer == "Ethernet":
        p = IBPath(src_ep, SGID=src_ep.gids[src_gid_index],
                   DGID=dst_ep.gids[dst_gid_index], MTU=mtu, **kw)
        return resolve_path(None, p)
    if src_ep.provider == "verbs":
        # InfiniBand in one subnet: LIDs, no GRH.
        return IBPath(src_ep, SLID=src_ep.lid, DLID=dst_ep.lid, MTU=mtu,
                      **kw)
    p = IBPath(src_ep, DLID=dst_ep.lid, MTU=mtu, **kw)
    if dst_ep.gids and dst_ep.gids[dst_gid_index]:
        p.DGID = dst_ep.gids[dst_gid_index]
        if src_ep.gids and src_ep.gids[src_gid_index]:
            p.SGID = src_ep.gids[src_gid_index]
    return resolve_path(None, p)


#: Q_Key of the UD pairs.
QKEY = 0x11111111
#: Bytes of GRH in front of a UD receive.
GRH_LEN = 40


class QPEnd:
    """One end of a :class:`QPPair`: ``ctx``, ``pd``, ``cq`` (send and
    receive), optional ``srq``, ``qp``, ``buf`` (a bytearray registered as
    ``mr``) and ``path`` (to the other end)."""

    def __init__(self, ctx: ibv.Context, end_port: EndPort, gid_index: int,
                 qp_type: int, *, size: int, depth: int, srq: bool,
                 access: int, pd: Optional[ibv.PD] = None):
        import rdma.ibverbs as ibv
        self.ctx = ctx
        self.end_port = end_port
        self.gid_index = gid_index
        self.qp_type = qp_type
        self._own_pd = pd is None
        self.pd = ctx.pd() if pd is None else pd
        self.cq = ctx.cq(4 * depth)
        self.srq = self.pd.srq(max_wr=depth) if srq else None
        self.qp = self.pd.qp(qp_type, depth, self.cq, depth, self.cq,
                             srq=self.srq, sq_sig_all=1)
        self.buf = bytearray(size)
        self.mr = self.pd.mr(self.buf, access | ibv.IBV_ACCESS_LOCAL_WRITE)
        #: The path to the other end (set by make_pair).
        self.path: Optional[IBPath] = None

    @property
    def gid(self) -> GID:
        return self.end_port.gids[self.gid_index]

    def post_recv(self, length: int, off: int = 0, wr_id: int = 0) -> None:
        """Post one receive of buf[off:off+length] (to the SRQ if any)."""
        import rdma.ibverbs as ibv
        wr = ibv.recv_wr(wr_id=wr_id, sg_list=self.mr.sge(length, off))
        (self.srq or self.qp).post_recv(wr)

    def send_wr(self, opcode: int, length: int, off: int = 0,
                remote: Any = None, remote_off: int = 0,
                **kw: Any) -> ibv.send_wr:
        """A signaled send_wr of buf[off:off+length]; RDMA and atomic
        opcodes address *remote* (a QPEnd, or anything with ``mr.addr``
        and ``mr.rkey``) at *remote_off*; UD carries
        the AH, QPN and Q_Key of the path."""
        import rdma.ibverbs as ibv
        fields: Dict[str, Any] = dict(wr_id=kw.pop("wr_id", 1), opcode=opcode,
                      send_flags=ibv.IBV_SEND_SIGNALED,
                      sg_list=self.mr.sge(length, off))
        if remote is not None and opcode not in (ibv.IBV_WR_SEND,
                                                 ibv.IBV_WR_SEND_WITH_IMM):
            fields.update(remote_addr=remote.mr.addr + remote_off,
                          rkey=remote.mr.rkey)
        if self.qp_type == ibv.IBV_QPT_UD:
            assert self.path is not None        # (make_pair sets it)
            fields.update(ah=self.pd.ah(self.path), remote_qpn=self.path.dqpn,
                          remote_qkey=self.path.qkey)
        fields.update(kw)
        return ibv.send_wr(**fields)

    def close(self) -> None:
        objs: Tuple[Union[ibv.QP, ibv.SRQ, ibv.MR, ibv.CQ, ibv.PD, None],
                    ...] = (self.qp, self.srq, self.mr, self.cq,
                            self.pd if self._own_pd else None)
        for o in objs:
            if o is not None:
                o.close()


class QPPair:
    """Two QPs of one transport connected to each other (RC/UC) or able to
    reach each other (UD): ``a`` and ``b`` are :class:`QPEnd`."""

    def __init__(self, a: QPEnd, b: QPEnd, qp_type: int):
        self.a, self.b, self.qp_type = a, b, qp_type

    @property
    def loopback(self) -> bool:
        return self.a.end_port == self.b.end_port

    def __iter__(self) -> Iterator[QPEnd]:
        return iter((self.a, self.b))

    def close(self) -> None:
        self.a.close()
        self.b.close()

    def __enter__(self) -> "QPPair":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_pair(ctx_a: ibv.Context, ep_a: EndPort, gid_a: int,
              ctx_b: ibv.Context, ep_b: EndPort, gid_b: int,
              qp_type: int, *, size: int = 4096, depth: int = 16,
              srq: bool = False, access: Optional[int] = None,
              retries: int = 7, pd_b: Optional[ibv.PD] = None) -> QPPair:
    """Make two QPs of *qp_type* (``ibv.IBV_QPT_RC/UC/UD``), one on each
    context, and bring both to RTS addressed to each other.  Each end has
    a *size*-byte buffer registered with *access* (default: every remote
    right the transport allows).  *pd_b*: put end b in this PD of *ctx_b*
    (so that several pairs can reach one MR), instead of a new one."""
    import rdma.ibverbs as ibv
    from rdma.path import fill_path
    if access is None:
        access = ibv.IBV_ACCESS_LOCAL_WRITE
        if qp_type in (ibv.IBV_QPT_RC, ibv.IBV_QPT_UC):
            access |= ibv.IBV_ACCESS_REMOTE_WRITE
        if qp_type == ibv.IBV_QPT_RC:
            access |= ibv.IBV_ACCESS_REMOTE_READ
            if ep_a.parent.attr.atomic_cap and ep_b.parent.attr.atomic_cap:
                access |= ibv.IBV_ACCESS_REMOTE_ATOMIC
    a: Optional[QPEnd] = None
    b: Optional[QPEnd] = None
    try:
        a = QPEnd(ctx_a, ep_a, gid_a, qp_type, size=size, depth=depth,
                  srq=srq, access=access)
        b = QPEnd(ctx_b, ep_b, gid_b, qp_type, size=size, depth=depth,
                  srq=srq, access=access, pd=pd_b)
        qp_access = access & ~ibv.IBV_ACCESS_LOCAL_WRITE
        extra: Dict[str, Any] = {}
        if qp_type == ibv.IBV_QPT_UD:
            extra["qkey"] = QKEY
        else:
            extra.update(retries=retries, min_rnr_timer=1)
        pa = path_between(ep_a, gid_a, ep_b, gid_b, **extra)
        pb = path_between(ep_b, gid_b, ep_a, gid_a, **extra)
        pa.dqpn, pb.dqpn = b.qp.qp_num, a.qp.qp_num
        fill_path(a.qp, pa)
        fill_path(b.qp, pb)
        pa.dqpsn, pb.dqpsn = pb.sqpsn, pa.sqpsn
        # What one end may have outstanding, the other must accept.
        pa.srdatomic = pb.drdatomic = min(pa.srdatomic, pb.drdatomic)
        pb.srdatomic = pa.drdatomic = min(pb.srdatomic, pa.drdatomic)
        pa.dack_resp_time, pb.dack_resp_time = \
            pb.sack_resp_time, pa.sack_resp_time
        a.path, b.path = pa, pb
        a.qp.establish(pa, qp_access)
        b.qp.establish(pb, qp_access)
        return QPPair(a, b, qp_type)
    except BaseException:
        for e in (b, a):
            if e is not None:
                e.close()
        raise


# ---------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope="session")
def rdma_setup(pytestconfig: pytest.Config) -> RdmaSetup:
    """The resolved RDMA options of the run (:class:`RdmaSetup`)."""
    return _setup_of(pytestconfig)


@pytest.fixture
def rdma_end_port(request: pytest.FixtureRequest,
                  rdma_setup: RdmaSetup) -> EndPort:
    """The :class:`rdma.EndPort` under test (skips if there is none)."""
    try:
        return rdma_setup.end_port()
    except Unavailable as e:
        _unavailable(request.node, rdma_setup, e)


@pytest.fixture
def rdma_peer_end_port(request: pytest.FixtureRequest, rdma_setup: RdmaSetup,
                       rdma_end_port: EndPort) -> EndPort:
    """The far end port of pairs (the same as rdma_end_port in loopback)."""
    try:
        return rdma_setup.peer_end_port()
    except Unavailable as e:
        _unavailable(request.node, rdma_setup, e)


@pytest.fixture
def rdma_gid_index(rdma_setup: RdmaSetup, rdma_end_port: EndPort) -> int:
    """The GID index used on rdma_end_port."""
    return rdma_setup.gid_index()


@pytest.fixture
def rdma_ctx(rdma_end_port: EndPort) -> Generator[ibv.Context, None, None]:
    """An open :class:`rdma.ibverbs.Context` on rdma_end_port."""
    import rdma
    with rdma.get_verbs(rdma_end_port) as ctx:
        yield ctx


@pytest.fixture
def rdma_pd(rdma_ctx: ibv.Context) -> Generator[ibv.PD, None, None]:
    """A protection domain on rdma_ctx."""
    with rdma_ctx.pd() as pd:
        yield pd


@pytest.fixture
def rdma_pair(request: pytest.FixtureRequest, rdma_setup: RdmaSetup,
              rdma_end_port: EndPort, rdma_peer_end_port: EndPort
              ) -> Generator[Callable[..., QPPair], None, None]:
    """A factory: ``rdma_pair(qp_type, size=4096, depth=16, srq=False,
    access=None, pd_b=None)`` returns a :class:`QPPair` between
    rdma_end_port and the peer end port, both at RTS.  Fails with the
    reason when a port is not ACTIVE (skips without --rdma-require) or the
    GID index is unusable."""
    import rdma
    try:
        ep_a = rdma_setup.ready_port()
        ep_b = rdma_setup.ready_port(peer=True)
    except Unavailable as e:
        _unavailable(request.node, rdma_setup, e)
    except ValueError as e:
        pytest.fail(str(e), pytrace=False)
    gid_a, gid_b = rdma_setup.gid_index(), rdma_setup.peer_gid_index()
    ctxs: List[ibv.Context] = []
    pairs: List[QPPair] = []

    def factory(qp_type: int, **kw: Any) -> QPPair:
        if not ctxs:
            ctxs.append(rdma.get_verbs(ep_a))
            ctxs.append(ctxs[0] if ep_b == ep_a else rdma.get_verbs(ep_b))
        p = make_pair(ctxs[0], ep_a, gid_a, ctxs[1], ep_b, gid_b, qp_type,
                      **kw)
        pairs.append(p)
        return p

    try:
        yield factory
    finally:
        for p in reversed(pairs):
            p.close()
        for c in {id(c): c for c in ctxs}.values():
            c.close()


@pytest.fixture
def rdma_rc_pair(rdma_pair: Callable[..., QPPair]) -> QPPair:
    """A connected RC :class:`QPPair` (4 KiB buffers)."""
    import rdma.ibverbs as ibv
    return rdma_pair(ibv.IBV_QPT_RC)


@pytest.fixture
def rdma_uc_pair(rdma_pair: Callable[..., QPPair]) -> QPPair:
    """A connected UC :class:`QPPair` (4 KiB buffers)."""
    import rdma.ibverbs as ibv
    return rdma_pair(ibv.IBV_QPT_UC)


@pytest.fixture
def rdma_ud_pair(rdma_pair: Callable[..., QPPair]) -> QPPair:
    """Two UD QPs at RTS whose ``path`` reaches each other (4 KiB buffers;
    receives have a 40-byte GRH in front)."""
    import rdma.ibverbs as ibv
    return rdma_pair(ibv.IBV_QPT_UD)


@pytest.fixture
def rdma_sa(request: pytest.FixtureRequest, rdma_setup: RdmaSetup,
            rdma_end_port: EndPort) -> Generator[UMAD, None, None]:
    """A :class:`rdma.umad.UMAD` on rdma_end_port whose subnet has an SA:
    an InfiniBand port of a verbs device, or a CA that only libibumad
    reports (ibsim's, through the shim).  Skips on RoCE and on the
    software fabric; fails when the port knows no subnet manager."""
    ep = rdma_end_port
    if ep.provider == "ucx":
        _skip(f"{ep} is on the software fabric, which has no subnet "
                    f"administrator (paths come from its own addressing)")
    if ep.link_layer == "Ethernet":
        _skip(f"{ep} is RoCE (Ethernet link layer): there is no "
                    f"subnet administrator; paths are resolved from GIDs")
    problem = port_problem(ep)
    if problem:
        _unavailable(request.node, rdma_setup, Unavailable(problem))
    if not ep.sm_lid:
        pytest.fail(f"{ep} is ACTIVE but knows no subnet manager (SM LID 0)",
                    pytrace=False)
    import rdma
    try:
        umad = rdma.get_umad(ep)
    except Exception as e:
        _unavailable(request.node, rdma_setup,
                     Unavailable(f"cannot open a umad port on {ep}: {e}"))
    with umad:
        yield umad


@pytest.fixture(scope="session")
def rdma_simnet(pytestconfig: pytest.Config,
                tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A simulated InfiniBand subnet up for the whole session: a
    :class:`rdma.simnet.SimNet` (ibsim on ``--rdma-simnet-topology``,
    default ``fat-tree:4``, and opensm), stopped at the end.  The shim
    must be in a process from its start, so tests use the subnet through
    shimmed child processes: ``rdma_simnet.run(argv, node=None)`` (a
    :class:`subprocess.CompletedProcess`, text captured),
    ``rdma_simnet.python(code, node=None)`` (what the code printed),
    ``rdma_simnet.env(node)`` for your own ``subprocess`` calls.  ibsim
    serves at most 10 client processes at a time, opensm included.
    Skips, naming the Debian package, when ibsim or opensm is missing."""
    from rdma.simnet import DEFAULT_TOPOLOGY, SimNet, SimNetError, \
        missing_tool
    why = missing_tool()
    if why:
        _skip(f"no simulated subnet: {why}")
    topology = pytestconfig.getoption("rdma_simnet_topology", None) or \
        DEFAULT_TOPOLOGY
    net = SimNet(topology, f"pytest{os.getpid()}",
                 root=tmp_path_factory.mktemp("rdma-simnet"))
    try:
        net.start()
    except (SimNetError, FileNotFoundError) as e:
        pytest.fail(f"the simulated subnet did not start: {e}",
                    pytrace=False)
    try:
        yield net
    finally:
        net.stop()


# ---------------------------------------------------------------------------
# remote hosts (--rdma-hosts): rdma.multihost

@pytest.fixture(scope="session")
def rdma_hosts(pytestconfig: pytest.Config, rdma_setup: RdmaSetup
               ) -> Generator[List[RemoteHost], None, None]:
    """Every host of ``--rdma-hosts`` as a
    :class:`rdma.multihost.remote.RemoteHost`, each with its agent started
    and its device open (``--rdma-device``/``--rdma-provider``/
    ``--rdma-gid-index`` apply to every host; ``//device=`` in a spec to
    one).  Skips without ``--rdma-hosts``; a host that cannot start fails
    the test, naming it."""
    values = pytestconfig.getoption("rdma_hosts", None)
    if not values:
        _skip("no remote hosts: give --rdma-hosts SPEC (an execnet "
                    "gateway spec) for each host")
    from rdma.multihost.command import host_specs
    from rdma.multihost.hosts import start_hosts, stop_hosts
    from rdma.multihost.remote import RemoteHost
    try:
        specs = host_specs(values)
    except (ValueError, OSError) as e:
        raise pytest.UsageError(f"--rdma-hosts: {e}")
    group, hosts = start_hosts(specs, device=rdma_setup.device,
                               provider=rdma_setup.provider,
                               gid_index=rdma_setup.gid_index_opt)
    try:
        bad = [f"{h.name}: {h.dead or h.info.get('problem')}"
               for h in hosts if not h.usable]
        if bad:
            pytest.fail("remote hosts not usable: " + "; ".join(bad),
                        pytrace=False)
        yield [RemoteHost(h) for h in hosts]
    finally:
        stop_hosts(group, hosts)


@pytest.fixture
def rdma_remote_host(rdma_hosts: List[RemoteHost]) -> RemoteHost:
    """The first host of ``--rdma-hosts``
    (:class:`rdma.multihost.remote.RemoteHost`: ``call(fn, **kw)``)."""
    return rdma_hosts[0]


@pytest.fixture
def rdma_remote_pair(rdma_hosts: List[RemoteHost]
                     ) -> Generator[Callable[..., RemotePair], None, None]:
    """A factory: ``rdma_remote_pair(qp_type, size=4096, depth=16,
    hosts=(0, 1))`` returns a :class:`rdma.multihost.remote.RemotePair`
    at RTS between two of ``--rdma-hosts`` (by index or name); closed
    afterwards.  Skips with fewer than two hosts."""
    from rdma.multihost.remote import remote_pair
    if len(rdma_hosts) < 2:
        _skip("needs two remote hosts (give --rdma-hosts twice)")
    by_name = {h.name: h for h in rdma_hosts}
    pairs: List[RemotePair] = []

    def factory(qp_type: int, size: int = 4096, depth: int = 16,
                hosts: Sequence[Union[int, str]] = (0, 1)) -> RemotePair:
        ends = [by_name[h] if isinstance(h, str) else rdma_hosts[h]
                for h in hosts]
        p = remote_pair(ends[0], ends[1], qp_type, size=size, depth=depth)
        pairs.append(p)
        return p
    try:
        yield factory
    finally:
        for p in reversed(pairs):
            p.close()


@pytest.fixture
def rdma_remote_rc_pair(rdma_remote_pair: Callable[..., RemotePair]
                        ) -> RemotePair:
    """A connected RC :class:`rdma.multihost.remote.RemotePair` between
    the first two remote hosts (4 KiB buffers)."""
    import rdma.ibverbs as ibv
    return rdma_remote_pair(ibv.IBV_QPT_RC)
