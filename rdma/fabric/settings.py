"""The environment settings of the C core, read from their one table.

The table (name, type, default, reader, meaning) is ``csrc/settings.h``;
the fabric library exports it (``pyrdma_fabric_settings()``) and this
module reads it with :mod:`ctypes`, so there is no second list here.
``python -m rdma.fabric config`` prints it with each value and where the
value came from.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

from rdma import fabric

__all__ = ["Setting", "Value", "settings", "values", "unknown"]

#: Names with this prefix that are no setting are reported by
#: :func:`unknown` (and warned of when a node starts).
PREFIX = "RDMA_UCX_"


class _Row(ctypes.Structure):
    # struct pyrdma_setting (csrc/settings.h)
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_char_p),
                ("dflt", ctypes.c_char_p), ("reader", ctypes.c_char_p),
                ("meaning", ctypes.c_char_p)]


@dataclass(frozen=True)
class Setting:
    """One row of the table."""

    name: str
    type: str
    default: str
    reader: str
    meaning: str


@dataclass(frozen=True)
class Value:
    """A setting's value in an environment."""

    setting: Setting
    value: str
    source: str            #: ``"default"`` or ``"environment"``
    error: Optional[str]   #: why the environment's value is refused

    def as_dict(self) -> Dict[str, Optional[str]]:
        """The value as a JSON object."""
        s = self.setting
        return {"name": s.name, "value": self.value, "source": self.source,
                "default": s.default, "type": s.type, "reader": s.reader,
                "meaning": s.meaning, "error": self.error}


_lib: Optional[ctypes.CDLL] = None


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(fabric.library_path(fabric.FABRIC_LIBRARY))
        lib.pyrdma_fabric_settings.restype = ctypes.POINTER(_Row)
        lib.pyrdma_fabric_settings.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.pyrdma_fabric_setting_check.restype = ctypes.c_int
        lib.pyrdma_fabric_setting_check.argtypes = [
            ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.pyrdma_fabric_setting_closest.restype = ctypes.c_char_p
        lib.pyrdma_fabric_setting_closest.argtypes = [ctypes.c_char_p]
        _lib = lib
    return _lib


def _text(b: Optional[bytes]) -> str:
    return (b or b"").decode()


def settings() -> List[Setting]:
    """Return the table, in its order.

    :raises FileNotFoundError: if the fabric library was not built.
    """
    n = ctypes.c_int()
    rows = _library().pyrdma_fabric_settings(ctypes.byref(n))
    return [Setting(_text(r.name), _text(r.type), _text(r.dflt),
                    _text(r.reader), _text(r.meaning))
            for r in (rows[i] for i in range(n.value))]


def values(env: Optional[Mapping[str, str]] = None) -> List[Value]:
    """Return each setting's value in *env* (default ``os.environ``) and
    where it comes from; a value the C core would refuse carries the
    reason in :attr:`Value.error`.  A secret's value is never shown."""
    env = os.environ if env is None else env
    lib = _library()
    out = []
    for i, s in enumerate(settings()):
        text = env.get(s.name, "")
        if not text:
            out.append(Value(s, s.default or "(none)", "default", None))
            continue
        err = ctypes.create_string_buffer(256)
        bad = lib.pyrdma_fabric_setting_check(i, text.encode(), err,
                                              len(err)) < 0
        shown = "(set)" if s.type == "secret" else text
        out.append(Value(s, shown, "environment",
                         err.value.decode() if bad else None))
    return out


def unknown(env: Optional[Mapping[str, str]] = None
            ) -> Dict[str, Optional[str]]:
    """Return the ``RDMA_UCX_*`` names in *env* that are no setting, each
    with the closest setting's name (or None)."""
    env = os.environ if env is None else env
    names = {s.name for s in settings()}
    lib = _library()
    return {k: (_text(lib.pyrdma_fabric_setting_closest(k.encode()))
                or None)
            for k in sorted(env) if k.startswith(PREFIX) and k not in names}
