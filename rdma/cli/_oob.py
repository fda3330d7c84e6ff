"""Shared helpers of ``ibtool pingpong`` and ``ibtool perf``: the out-of-band
TCP connection, deadlines, exit codes, picking the end port and GID, and
the :class:`rdma.path.IBPath` that connects a QP to what the peer sent.

Exit codes every such command uses (scripts may rely on them):

===  ======================================================================
0    success
1    an RDMA or runtime failure (device, verbs call, failed completion,
     the peer closed the connection or could not be reached)
2    bad usage (an option is wrong, or does not fit the device)
3    data validation failed (``-c``)
124  a step timed out (``--timeout``): the peer is gone or never came
===  ======================================================================
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import (TYPE_CHECKING, Any, Callable, Iterable, List, NamedTuple,
                    Optional, Tuple)

from rdma._errors import RDMAError

if TYPE_CHECKING:
    from rdma.devices import EndPort
    from rdma.path import IBPath

__all__ = ["EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_VALIDATION",
           "EXIT_TIMEOUT", "CLIError", "PeerError", "OOBTimeout",
           "ValidationError", "Deadline", "run_command", "listen", "accept",
           "connect", "recv_exact", "send_all", "Dest", "DEST_LEN",
           "open_end_port", "pick_gid_index", "connect_path",
           "positive_int", "port_number", "mtu_bytes", "seconds"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_VALIDATION = 3
EXIT_TIMEOUT = 124


class CLIError(RDMAError):
    """An error a command reports as one line, with its exit code."""

    exit_code = EXIT_FAILURE


class PeerError(CLIError):
    """The peer could not be reached, closed the connection early, or sent
    something that does not follow the protocol."""


class OOBTimeout(CLIError):
    """A step did not finish within ``--timeout`` seconds."""

    exit_code = EXIT_TIMEOUT


class ValidationError(CLIError):
    """Received data is not what was sent (``-c``)."""

    exit_code = EXIT_VALIDATION


class Deadline:
    """A time limit for one blocking step; *timeout* <= 0 means none."""

    def __init__(self, timeout: Optional[float]):
        self.timeout = timeout if timeout and timeout > 0 else None
        self.at = (None if self.timeout is None
                   else time.monotonic() + self.timeout)

    def remaining(self) -> Optional[float]:
        """Seconds left (at least 1 ms), or None without a limit.
        :raises OOBTimeout: never; see :meth:`check`."""
        if self.at is None:
            return None
        return max(0.001, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def check(self, what: str) -> None:
        """Raise :class:`OOBTimeout` naming *what* if the time is up."""
        if self.expired():
            raise self.error(what)

    def error(self, what: str) -> OOBTimeout:
        return OOBTimeout(f"timed out after {self.timeout:g} s {what}")


def run_command(name: str, fn: Callable[[argparse.Namespace], int],
                args: argparse.Namespace) -> int:
    """Run *fn(args)*; turn our errors into one line on stderr and an exit
    code.  RDMA errors, bad values and Ctrl-C are left to ``rdma.cli.main``
    (exit 1, 2 and 130)."""
    try:
        return fn(args)
    except CLIError as e:
        _fail(name, str(e))
        return e.exit_code
    except RDMAError:
        raise
    except (socket.timeout, TimeoutError) as e:
        _fail(name, f"timed out: {e}")
        return EXIT_TIMEOUT
    except OSError as e:
        _fail(name, str(e.strerror or e))
        return EXIT_FAILURE


def _fail(name: str, msg: str) -> None:
    sys.stdout.flush()
    print(f"ibtool {name}: {msg}", file=sys.stderr)


# -- the TCP connection -------------------------------------------------------

def listen(port: int, bind: Optional[str] = None) -> socket.socket:
    """A listening TCP socket on *port* (all addresses, IPv6 and IPv4 when
    the host has both), with SO_REUSEADDR like the C tools."""
    try:
        if bind is None and socket.has_dualstack_ipv6():
            return socket.create_server(("::", port), family=socket.AF_INET6,
                                        dualstack_ipv6=True, backlog=1)
        return socket.create_server((bind or "", port), backlog=1)
    except OSError as e:
        raise PeerError(f"couldn't listen on port {port}: "
                        f"{e.strerror or e}") from None


def accept(lsock: socket.socket, deadline: Deadline) -> socket.socket:
    """Wait for one client on *lsock* (then closed) within *deadline*."""
    lsock.settimeout(deadline.remaining())
    try:
        conn, _ = lsock.accept()
    except socket.timeout:
        raise deadline.error("waiting for a client to connect") from None
    finally:
        lsock.close()
    conn.settimeout(deadline.remaining())
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def connect(host: str, port: int, deadline: Deadline,
            wait: float = 0.0) -> socket.socket:
    """Connect to *host*:*port*.  While the server refuses (not listening
    yet) retry for up to *wait* seconds; every attempt is bounded by
    *deadline*."""
    retry_until = time.monotonic() + max(0.0, wait)
    while True:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise PeerError(f"couldn't resolve {host}: {e.strerror}") \
                from None
        err: Optional[OSError] = None
        for family, kind, proto, _, addr in infos:
            s = socket.socket(family, kind, proto)
            s.settimeout(deadline.remaining())
            try:
                s.connect(addr)
            except socket.timeout:
                s.close()
                raise deadline.error(f"connecting to {host}:{port}") \
                    from None
            except OSError as e:
                s.close()
                err = e
                continue
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(deadline.remaining())
            return s
        if (isinstance(err, (ConnectionRefusedError, ConnectionResetError))
                and time.monotonic() < retry_until and not deadline.expired()):
            time.sleep(0.05)
            continue
        reason = err.strerror if err is not None and err.strerror else err
        raise PeerError(f"couldn't connect to {host}:{port}: {reason}")


def recv_exact(conn: socket.socket, n: int, deadline: Deadline,
               what: str) -> bytes:
    """Read exactly *n* bytes of *what* within *deadline*."""
    chunks: List[bytes] = []
    got = 0
    while got < n:
        conn.settimeout(deadline.remaining())
        try:
            chunk = conn.recv(n - got)
        except socket.timeout:
            raise deadline.error(f"waiting for {what} from the peer") \
                from None
        except ConnectionError as e:
            raise PeerError(f"connection lost while reading {what}: "
                            f"{e.strerror or e}") from None
        if not chunk:
            raise PeerError(f"the peer closed the connection while sending "
                            f"{what} ({got} of {n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_all(conn: socket.socket, data: bytes, deadline: Deadline,
             what: str) -> None:
    """Send *data* (*what*) within *deadline*."""
    conn.settimeout(deadline.remaining())
    try:
        conn.sendall(data)
    except socket.timeout:
        raise deadline.error(f"sending {what}") from None
    except ConnectionError as e:
        raise PeerError(f"connection lost while sending {what}: "
                        f"{e.strerror or e}") from None


# -- the libibverbs pingpong address message ----------------------------------

#: Length of one "LLLL:QQQQQQ:PPPPPP:GGGG..." message, with its NUL.
DEST_LEN = len("0000:000000:000000:" + "0" * 32) + 1


class Dest(NamedTuple):
    """One QP's address as the ibv_*_pingpong tools exchange it."""

    lid: int
    qpn: int
    psn: int
    gid: bytes          # 16 bytes, network order

    def encode(self) -> bytes:
        """The NUL-terminated text message (LID, QPN, PSN in hex, then the
        GID as 32 hex digits: the bytes in wire order)."""
        text = (f"{self.lid & 0xFFFF:04x}:{self.qpn & 0xFFFFFF:06x}:"
                f"{self.psn & 0xFFFFFF:06x}:{bytes(self.gid).hex()}")
        return text.encode("ascii") + b"\0"

    @classmethod
    def decode(cls, msg: bytes) -> "Dest":
        """Parse one message; :raises PeerError: if it is malformed."""
        text = msg.split(b"\0", 1)[0]
        try:
            lid, qpn, psn, gid = text.decode("ascii").split(":")
            g = bytes.fromhex(gid)
            if len(g) != 16:
                raise ValueError("GID")
            return cls(int(lid, 16), int(qpn, 16), int(psn, 16), g)
        except (UnicodeDecodeError, ValueError):
            raise PeerError(f"the peer sent an invalid address message "
                            f"{text[:60]!r}") from None

    def describe(self) -> str:
        gid = socket.inet_ntop(socket.AF_INET6, bytes(self.gid))
        return (f"LID 0x{self.lid:04x}, QPN 0x{self.qpn:06x}, "
                f"PSN 0x{self.psn:06x}, GID {gid}")


# -- devices, GIDs and paths --------------------------------------------------

def open_end_port(device: Optional[str], ib_port: Optional[int],
                  provider: Optional[str]) -> EndPort:
    """The end port named by ``-d``/``-i`` (default: the first active port,
    or port *ib_port* of the first device)."""
    import rdma
    if device is None and ib_port is None:
        return rdma.get_end_port(None, provider=provider)
    devices = rdma.get_devices(provider)
    if not devices:
        raise RDMAError("no RDMA devices found")
    if device is None:
        device = devices[0].name
    found = [d for d in devices if d.name == device]
    if not found:
        # A wrong -d is bad usage (exit 2), named as the user wrote it.
        raise ValueError(f"no RDMA device {device!r} (devices: "
                         f"{', '.join(d.name for d in devices)})")
    ports = [p.port_id for p in found[0].end_ports]
    if (ib_port or 1) not in ports:
        raise ValueError(f"device {device} has no port {ib_port or 1} "
                         f"(ports: {', '.join(map(str, ports)) or 'none'})")
    return rdma.get_end_port(f"{device}/{ib_port or 1}", provider=provider)


def pick_gid_index(end_port: EndPort, requested: Optional[int]) -> int:
    """The source GID index: *requested* (checked), else on RoCE the first
    IPv4-mapped RoCE v2 GID (then any non-zero one), else -1 (no GID, as
    the C tools without ``-g``)."""
    from rdma import IBA
    gids = end_port.gids
    if requested is not None and requested >= 0:
        if requested >= len(gids):
            raise ValueError(f"GID index {requested} is out of range: "
                             f"{end_port} has {len(gids)} GIDs")
        if not any(bytes(gids[requested])):
            raise ValueError(f"GID index {requested} of {end_port} is empty")
        return requested
    if requested is not None or end_port.link_layer != "Ethernet":
        return -1
    v4 = b"\0" * 10 + b"\xff\xff"
    types = end_port.gid_types
    for want_v4 in (True, False):
        for i, g in enumerate(gids):
            if (any(bytes(g)) and types[i] == IBA.GID_TYPE_ROCE_V2 and
                    (bytes(g)[:12] == v4) == want_v4):
                return i
    for i, g in enumerate(gids):
        if any(bytes(g)):
            return i
    raise RDMAError(f"{end_port} has no GID")


def local_gid(end_port: EndPort, gid_index: int) -> bytes:
    """The 16 bytes of GID *gid_index* (zeros for -1)."""
    return bytes(end_port.gids[gid_index]) if gid_index >= 0 else bytes(16)


def connect_path(end_port: EndPort, qp_type: int, remote: Dest, my_psn: int, *,
                 gid_index: int, mtu: Optional[int] = None, sl: int = 0,
                 rd_atomic: int = 1, remote_gid: Optional[bytes] = None,
                 qkey: Optional[int] = None) -> IBPath:
    """The :class:`rdma.path.IBPath` from this end port to *remote* with the
    exact QPN and PSNs exchanged: ready for ``qp.modify_to_rtr/rts`` and
    ``pd.ah``.  A GRH is used when the remote GID's interface id is not 0
    (the C tools' rule); RoCE and the software fabric go through
    :func:`rdma.path.resolve_path`."""
    import rdma.path
    from rdma.IBA import GID
    path = rdma.path.IBPath(end_port, dqpn=remote.qpn, dqpsn=remote.psn,
                            sqpsn=my_psn, SL=sl, retries=7,
                            min_rnr_timer=12, drdatomic=rd_atomic,
                            srdatomic=rd_atomic, dack_resp_time=12,
                            packet_life_time=12)
    # qp_timeout = 4.096 us * (2**13 + 2**12): timer 14, as the C tools.
    if qkey is not None:
        path.qkey = qkey
    path.pkey_index = 0
    if mtu is not None:
        path.MTU = mtu
    gid = bytes(remote_gid if remote_gid is not None else remote.gid)
    if any(gid[8:]):
        if gid_index < 0:
            raise ValueError("the peer sent a GID: give the local GID index "
                             "with -g")
        path.has_grh = True
        path.DGID = GID(gid)
        path.SGID_index = gid_index
    if end_port.link_layer == "Ethernet" or end_port.provider != "verbs":
        if path.DGID is None and end_port.link_layer == "Ethernet":
            raise PeerError("the peer sent no GID, which RoCE needs (run it "
                            "with -g, e.g. -g 1)")
        if path.DGID is None:
            path.DLID = remote.lid
        rdma.path.resolve_path(None, path)
    else:
        path.DLID = remote.lid
        path.SLID = end_port.lid
    return path


# -- argparse -----------------------------------------------------------------

class _Intermixed(argparse.ArgumentParser):
    """A parser that takes positionals between options, as getopt does
    (``ibtool pingpong rc -g 1 HOST``)."""

    _busy = False

    def parse_known_args(self, args: Optional[Iterable[str]] = None,
                         namespace: Any = None) -> Tuple[Any, List[str]]:
        if self._busy:
            return super().parse_known_args(args, namespace)
        self._busy = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._busy = False


def intermixed(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let the subcommand parser *p* accept its positionals anywhere."""
    p.__class__ = _Intermixed
    return p


def positive_int(text: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def port_number(text: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 < v < 65536:
        raise argparse.ArgumentTypeError(f"port {v} is not in 1..65535")
    return v


def mtu_bytes(text: str) -> int:
    """256, 512, 1024, 2048 or 4096 -> the IBV_MTU_* encoding."""
    from rdma import IBA
    try:
        v = int(text, 0)
    except ValueError:
        v = 0
    if v not in (256, 512, 1024, 2048, 4096):
        raise argparse.ArgumentTypeError(
            f"MTU must be 256, 512, 1024, 2048 or 4096, not {text!r}")
    return IBA.bytes_to_mtu(v)


def seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid time {text!r}") from None
    if v < 0 or v != v:
        raise argparse.ArgumentTypeError(f"invalid time {text!r}")
    return v


def add_common(p: argparse.ArgumentParser, *, gid_flag: str,
               default_port: int = 18515) -> None:
    """Options both commands share."""
    p.add_argument("-p", "--port", type=port_number, default=default_port,
                   help=f"TCP port of the out-of-band exchange "
                        f"(default {default_port})")
    p.add_argument("-d", "--ib-dev", metavar="DEV", default=None,
                   help="RDMA device (default: the first active port)")
    p.add_argument("-i", "--ib-port", metavar="PORT", type=positive_int,
                   default=None, help="port of the device (default 1)")
    p.add_argument(gid_flag, "--gid-idx", dest="gid_idx", metavar="INDEX",
                   type=int, default=None,
                   help="local GID index (default: on RoCE the IPv4 RoCE "
                        "v2 GID; on InfiniBand none)")
    p.add_argument("--provider", default=None,
                   help="verbs, ucx or auto (default: $RDMA_PROVIDER, else "
                        "auto)")
    p.add_argument("--timeout", type=seconds, default=30.0, metavar="S",
                   help="give up (exit 124) when a step - waiting for the "
                        "peer, the exchange, or any completion - takes more "
                        "than S seconds; 0 waits forever (default 30)")
    p.add_argument("--wait", type=seconds, default=0.0, metavar="S",
                   help="client: retry for up to S seconds while the "
                        "server is not listening yet (default 0: fail at "
                        "once, like the C tools)")


def random_psn() -> int:
    return int.from_bytes(os.urandom(3), "big")


def jsonable(obj: Any) -> Any:
    """Dest tuples as dicts for JSON output."""
    if isinstance(obj, Dest):
        return {"lid": obj.lid, "qpn": obj.qpn, "psn": obj.psn,
                "gid": socket.inet_ntop(socket.AF_INET6, bytes(obj.gid))}
    return obj
