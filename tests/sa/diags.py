"""Parse infiniband-diags' text output (``smpquery``, ``perfquery``,
``sminfo``...) so that tests compare it with ours field by field.

infiniband-diags prints most attributes as ``Key:.......value`` lines
(libibmad's ``mad_dump_*``); capability masks are followed by indented
lines naming each bit, which are not fields.  :func:`fields` turns such
output into a ``{key: value}`` dict, :func:`as_int` reads a value the
way the tools print numbers (decimal, or hex with ``0x``).
"""
import re
from typing import Dict, List

_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ /\[\]()-]*?)"
                    r"(?::\.+|\.{2,}):?(.*)$")


def fields(text: str) -> Dict[str, str]:
    """The ``Key:....value`` lines of ``text`` as a dict (first wins)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            out.setdefault(m.group(1).strip().rstrip(":"), m.group(2).strip())
    return out


def blocks(text: str, start: str) -> List[Dict[str, str]]:
    """Split ``text`` at lines starting with ``start`` and parse each part
    with :func:`fields` (e.g. one dict per ``# Port counters`` block)."""
    parts: List[List[str]] = []
    for line in text.splitlines():
        if line.startswith(start):
            parts.append([])
        if parts:
            parts[-1].append(line)
    return [fields("\n".join(p)) for p in parts]


def as_int(value: str) -> int:
    """A number as infiniband-diags prints it (``12``, ``0x1f``)."""
    return int(value.split()[0], 0)
