"""Options shared by ``ibtool``'s InfiniBand management commands.

They follow infiniband-diags (and python-rdma's ``ibtool``, which
emulated them): ``-C/--Ca`` and ``-P/--Port`` pick the local end port, a
target is a LID by default, ``-G/--Guid`` makes it a port GUID (hex, as
infiniband-diags prints them) and ``-D/--Direct`` a directed route
(``0,1,3``; a bare ``0`` or ``3`` is the one-element route ``0,`` / ``3,``),
``-L/--Lid`` insists on a LID.  :func:`parse_target` turns one target
argument into an :class:`rdma.path.IBPath` or :class:`rdma.path.IBDRPath`
through :func:`rdma.path.from_string`, so every form ``from_string``
knows (GIDs, ``IBPath(...)``) works too.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional

__all__ = ["add_device_options", "add_target_options", "get_end_port",
           "parse_target", "smp_path", "gmp_path", "smp_get", "CmdError",
           "add_node_name_map", "load_node_name_map", "node_name",
           "add_sa_option", "transactor", "unicast_lid", "any_lid",
           "add_query_options", "add_timeout_option", "open_umad",
           "target_words"]


class CmdError(ValueError):
    """Bad command line input; ``ibtool`` prints it and exits with 2."""


def add_device_options(p: argparse.ArgumentParser) -> None:
    """``-C/--Ca`` and ``-P/--Port``: the local end port."""
    p.add_argument("-C", "--Ca", dest="CA", default=None,
                   help="the RDMA device to use (name)")
    p.add_argument("-P", "--Port", dest="port", default=None,
                   help="the port of the device (number, or DEVICE/PORT)")


def add_target_options(p: argparse.ArgumentParser) -> None:
    """``-D``, ``-G``, ``-L``: how the target argument is written."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-D", "--Direct", dest="addr_direct", action="store_true",
                   help="the target is a directed route: port numbers "
                        "separated by commas, starting with 0")
    g.add_argument("-G", "--Guid", dest="addr_guid", action="store_true",
                   help="the target is a port GUID (hex)")
    g.add_argument("-L", "--Lid", dest="addr_lid", action="store_true",
                   help="the target is a LID (the default)")


def get_end_port(args: argparse.Namespace) -> Any:
    """The local umad end port that ``-C``/``-P`` name (default: the first
    ACTIVE one).  Raises :class:`rdma.RDMAError` when there is none, and
    :class:`CmdError` (bad usage, exit 2) when ``-C``/``-P`` name no
    device or port of those there are."""
    import rdma.umad
    ca, port = getattr(args, "CA", None), getattr(args, "port", None)
    if ca is None and port is None:
        return rdma.umad.get_end_port()
    try:
        return _named_end_port(ca, port)
    except rdma.RDMAError as e:
        if not rdma.get_devices():
            raise                       # no device at all: not usage
        raise CmdError(str(e)) from None


def _named_end_port(ca: Optional[str], port: Optional[str]) -> Any:
    import rdma.umad
    if ca is None:
        if "/" in str(port):
            return rdma.umad.get_end_port(str(port))
        devices = rdma.umad.get_umad_devices()
        if not devices:
            return rdma.umad.get_end_port()     # raises: no devices
        ca = devices[0].name
    if port is None:
        return rdma.umad.get_end_port(ca)
    return rdma.umad.get_end_port(f"{ca}/{port}")


def parse_target(value: str, args: Optional[argparse.Namespace] = None,
                 end_port: Any = None) -> Any:
    """Parse one target argument as infiniband-diags would read it under
    ``args``' ``-D``/``-G``/``-L``; return the path.

    :raises CmdError: naming the argument and what is wrong with it.
    """
    import rdma.path
    direct = bool(getattr(args, "addr_direct", False))
    guid = bool(getattr(args, "addr_guid", False))
    lid = bool(getattr(args, "addr_lid", False))
    text = value.strip()
    if direct:
        try:
            text = f"{int(text, 0)},"        # -D 0 is the route "0,"
        except ValueError:
            pass
    elif guid:
        try:
            n = int(text, 16)
        except ValueError:
            raise CmdError(f"{value!r} is not a GUID (hex)") from None
        if not 0 < n < 1 << 64:
            raise CmdError(f"{value!r} is not a 64-bit GUID")
        text = ":".join(f"{n:016x}"[i:i + 4] for i in range(0, 16, 4))
    try:
        path = rdma.path.from_string(text, end_port)
    except (ValueError, TypeError) as e:
        raise CmdError(f"bad target {value!r}: {e}") from None
    is_dr = isinstance(path, rdma.path.IBDRPath)
    if direct and not is_dr:
        raise CmdError(f"{value!r} is not a directed route (-D): "
                       f"write it as 0,PORT,PORT...")
    if guid and getattr(path, "DGID", None) is None:
        raise CmdError(f"{value!r} is not a GUID (-G)")
    if (lid or not (direct or guid)) and not is_dr and \
            getattr(path, "DGID", None) is None and \
            not getattr(path, "DLID", 0):
        raise CmdError(f"{value!r} is not a LID")
    if lid and (is_dr or not getattr(path, "DLID", 0)):
        raise CmdError(f"{value!r} is not a LID (-L)")
    return path


def _lid_of(path: Any, umad: Any, text: str) -> None:
    """Give a GID-only path its LID through the SA (a PathRecord)."""
    import rdma.path
    if getattr(path, "DLID", 0):
        return
    try:
        rdma.path.resolve_path(umad, path)
    except Exception as e:        # noqa: BLE001 - reported as usage
        raise CmdError(f"cannot resolve {text!r} to a LID through the SA: "
                       f"{e}") from None


def smp_path(target: Optional[str], args: argparse.Namespace,
             end_port: Any, umad: Any) -> Any:
    """The path an SMP to ``target`` takes: the directed route to the
    local port when ``target`` is None, the route itself for ``-D``, else
    a LID-routed path to QP0 (a GUID is resolved to a LID through the
    SA)."""
    import rdma.IBA as IBA
    import rdma.path
    if target is None:
        return rdma.path.IBDRPath(end_port)
    path = parse_target(target, args, end_port)
    if isinstance(path, rdma.path.IBDRPath):
        return path
    _lid_of(path, umad, target)
    path.dqpn = 0
    path.sqpn = 0
    path.qkey = IBA.IB_DEFAULT_QP0_QKEY
    path.SLID = end_port.lid
    return path


def gmp_path(target: Optional[str], args: argparse.Namespace,
             end_port: Any, umad: Any) -> Any:
    """The LID-routed path a GMP (PerfMgt...) to ``target`` takes, to QP1
    (the local port when ``target`` is None).  A directed route is not a
    GMP path: :class:`CmdError`."""
    import rdma.IBA as IBA
    import rdma.path
    if target is None:
        path = rdma.path.IBPath(end_port, DLID=end_port.lid)
    else:
        path = parse_target(target, args, end_port)
        if isinstance(path, rdma.path.IBDRPath):
            raise CmdError(f"{target!r}: a directed route cannot carry "
                           f"this MAD; give a LID or GUID")
        _lid_of(path, umad, target)
    path.dqpn = 1
    path.sqpn = 1
    path.qkey = IBA.IB_DEFAULT_QP1_QKEY
    path.SLID = end_port.lid
    return path


def smp_get(umad: Any, cls: type, path: Any, amod: int = 0) -> Any:
    """One SubnGet of ``cls`` over ``path`` with python-rdma's transactor
    API; return the decoded attribute."""
    return umad.SubnGet(cls, path, amod)


def add_node_name_map(p: argparse.ArgumentParser) -> None:
    """``--node-name-map FILE``: print the names a map file gives node
    GUIDs instead of their NodeDescription (infiniband-diags' option)."""
    p.add_argument("--node-name-map", dest="node_name_map", metavar="FILE",
                   default=None,
                   help="node name map file: lines 'GUID \"name\"' whose "
                        "names replace those nodes' descriptions")


def load_node_name_map(name: Optional[str]) -> Dict[int, str]:
    """Read a node name map: one node per line, its GUID (``0x...`` hex,
    or decimal) then its name (in double quotes, or the rest of the
    line); ``#`` starts a comment, blank lines are skipped.  Returns
    ``{node GUID: name}`` (empty for *name* None).

    :raises CmdError: if the file cannot be read or a line has no GUID or
        no name, naming the file and the line."""
    if name is None:
        return {}
    try:
        with open(name) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CmdError(f"cannot read node name map {name}: "
                       f"{e.strerror}") from None
    out: Dict[int, str] = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        word, _, rest = text.partition(" ")
        if "\t" in word:
            word, _, more = word.partition("\t")
            rest = more + " " + rest
        try:
            guid = int(word, 0)
        except ValueError:
            raise CmdError(f"{name} line {n}: {word!r} is not a GUID "
                           f"(write 0x...)") from None
        if not 0 <= guid < 1 << 64:
            raise CmdError(f"{name} line {n}: {word!r} is not a 64-bit "
                           f"GUID")
        rest = rest.strip()
        if rest.startswith('"'):
            end = rest.find('"', 1)
            if end < 0:
                raise CmdError(f"{name} line {n}: the name has no closing "
                               f"quote")
            nm = rest[1:end]
        else:
            nm = rest.split("#", 1)[0].strip()
        if not nm:
            raise CmdError(f"{name} line {n}: GUID {word} has no name")
        out[guid] = nm
    return out


def node_name(name_map: Dict[int, str], guid: Any, desc: Any) -> str:
    """The name to print for the node with GUID *guid*: its name in
    *name_map* (see :func:`load_node_name_map`), else its description."""
    if name_map and guid is not None:
        nm = name_map.get(int(guid))
        if nm is not None:
            return nm
    return "" if desc is None else str(desc)


def add_sa_option(p: argparse.ArgumentParser) -> None:
    """``--sa`` (python-rdma's option): read what the command reads by
    SMPs from the SA's records instead."""
    p.add_argument("--sa", dest="use_sa", action="store_true",
                   help="read NodeInfo, PortInfo, forwarding tables... "
                        "from the SA's records instead of by SMPs "
                        "(python-rdma's option)")


def transactor(umad: Any, args: argparse.Namespace) -> Any:
    """*umad*, or with ``--sa`` an :class:`rdma.satransactor.SATransactor`
    around it (SMP reads become SA record queries)."""
    if getattr(args, "use_sa", False):
        from rdma.satransactor import SATransactor
        return SATransactor(umad)
    return umad


def unicast_lid(text: str, what: str) -> int:
    """*text* as a unicast LID (0 to 0xBFFF, any base ``int(x, 0)``
    reads); *what* names it in the error."""
    try:
        v = int(text, 0)
    except ValueError:
        raise CmdError(f"bad {what} {text!r}") from None
    if not 0 <= v <= 0xBFFF:
        raise CmdError(f"{what} {v} is out of the unicast range")
    return v


def any_lid(text: str, what: str) -> int:
    """*text* as any 16-bit LID (an MLID too); *what* names it in the
    error."""
    try:
        v = int(text, 0)
    except ValueError:
        raise CmdError(f"bad {what} {text!r}") from None
    if not 0 <= v <= 0xFFFF:
        raise CmdError(f"{what} {v:#x} is not a 16-bit LID")
    return v


def add_query_options(p: argparse.ArgumentParser) -> None:
    """The options of the one-node inquiries (``ibaddr``, ``sminfo``):
    the local end port, the target, ``--sa`` and ``-t/--timeout``."""
    add_device_options(p)
    add_target_options(p)
    add_sa_option(p)
    add_timeout_option(p)


def add_timeout_option(p: argparse.ArgumentParser) -> None:
    """``-t/--timeout MS``: the timeout of each MAD."""
    p.add_argument("-t", "--timeout", type=int, default=None, metavar="MS",
                   help="timeout of each MAD in ms")


def open_umad(args: argparse.Namespace, end_port: Any) -> Any:
    """An :class:`rdma.umad.UMAD` on *end_port* with ``-t``'s timeout."""
    import rdma.umad
    kw = {} if args.timeout is None else {"timeout_ms": args.timeout}
    return rdma.umad.UMAD(end_port, **kw)


def target_words(args: argparse.Namespace, most: int) -> List[str]:
    """The positional words (``args.rest``), at most *most* of them."""
    if len(args.rest) > most:
        raise CmdError(f"too many arguments: {' '.join(args.rest)}")
    return list(args.rest)
