"""The MAD structure codec: one generic encoder/decoder driven by tables.

Every structure is a :class:`BinStruct` subclass whose ``FIELDS`` list the
rows of its IBA table in order (reserved rows included) with their widths
in bits.  Offsets are the running sum, so a table reads like the one in
the specification, and its total is checked against ``MAD_LENGTH`` when
the class is made.  All fields are big endian and packed most significant
bit first, the way the IBA numbers bits.

From the table the class gets python-rdma's interface: ``MAD_LENGTH``,
``MEMBERS`` (``(name, bits, count)`` per row), ``COMPONENT_MASK``
(component name to bit, for SA records), ``MAD_ATTRIBUTE_ID`` and the
``MAD_<CLASS><METHOD>`` method numbers, the constructor from bytes, and
:meth:`~BinStruct.pack_into`, :meth:`~BinStruct.unpack_from`,
:meth:`~BinStruct.printer` and pickling.

Values: ints; :class:`rdma.IBA.GUID` for 64-bit GUID rows;
:class:`rdma.IBA.GID` for 128-bit addresses; :class:`bytearray` for byte
arrays (``nodeString``) and for rows wider than 64 bits without a type;
lists for other arrays; nested :class:`BinStruct` objects.  Reserved rows
are named ``reserved_<bit offset>`` as in python-rdma.

Assigning a field (or passing it to the constructor) marks it as set;
:meth:`BinStruct.component_mask` ORs the component bits of the set fields,
which is what an SA query sends when it is not given a mask
(:class:`rdma.IBA.ComponentMask` is python-rdma's explicit way).
"""
from __future__ import annotations

import sys
from types import MemberDescriptorType, ModuleType
from typing import (TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterator,
                    List, Optional, TextIO, Tuple, Type, Union)

#: The instance attributes that hold where a table record's bits are (the
#: table, and the record's offset in it) until its rows are first read
#: (BinStruct._unpack_table).
_UNDECODED = "_binstruct_undecoded"
_UNDECODED_AT = "_binstruct_undecoded_at"

__all__ = ["BinStruct", "BinFormat", "F", "U", "G", "S", "N", "R",
           "METHOD_NUMBERS"]

#: The request methods a structure may declare in ``METHODS``, by the
#: transactor call that sends them (``SubnGet`` -> ``MAD_SUBNGET = 0x01``).
METHOD_NUMBERS = {"Get": 0x01, "Set": 0x02, "Send": 0x03, "Trap": 0x05,
                  "TrapRepress": 0x07, "GetTable": 0x12,
                  "GetTraceTable": 0x13, "GetMulti": 0x14, "Delete": 0x15,
                  "Report": 0x06}

_iba_mod: Optional[ModuleType] = None


def _iba() -> ModuleType:
    """rdma.IBA, imported on first use (it imports the structures)."""
    global _iba_mod
    if _iba_mod is None:
        import rdma.IBA
        _iba_mod = rdma.IBA
    return _iba_mod


def _format_error(msg: str) -> Exception:
    from rdma._mad import MADFormatError
    return MADFormatError(msg)


class _Field:
    """One row of an IBA table: a named run of bits (or ``count`` runs)."""

    __slots__ = ("name", "bits", "kind", "count", "struct", "comp", "fmt",
                 "offset", "comp_index", "reserved")

    def __init__(self, name: Optional[str], bits: int, kind: str = "int",
                 count: int = 1,
                 struct: Optional[Type["BinStruct"]] = None,
                 comp: int = 1, fmt: str = "d"):
        # (set for reserved rows by the class)
        self.name: str = name if name is not None else ""
        self.bits = bits            # width of one element
        self.kind = kind            # int, guid, gid, bytes, struct
        self.count = count          # elements (1: not an array)
        self.struct = struct        # BinStruct subclass for kind struct
        self.comp = comp            # component bits (per element group)
        self.fmt = fmt              # how an int prints: d or x
        self.offset = 0             # bit offset, set by the class
        self.comp_index = 0         # first component bit, set by the class
        self.reserved = name is None

    @property
    def sub(self) -> Type["BinStruct"]:
        """The nested structure class of a row of kind ``struct``."""
        if self.struct is None:
            raise TypeError(f"row {self.name} is not a structure")
        return self.struct


def F(name: str, bits: int, fmt: str = "d", *, count: int = 1,
      comp: int = 1) -> _Field:
    """An integer row (``fmt`` ``x`` prints it in hex); ``count`` makes it
    an array (a :class:`bytearray` for 8-bit elements, else a list);
    ``comp`` is how many component-mask bits it takes (an array whose
    elements are separate SA components passes ``comp=count``).  A row
    wider than 64 bits holds a :class:`bytearray`."""
    kind = "bytes" if bits > 64 and count == 1 else "int"
    return _Field(name, bits, kind, count=count, comp=comp, fmt=fmt)


def U(name: str, count: int = 1, *, comp: int = 1) -> _Field:
    """A 64-bit GUID row (:class:`rdma.IBA.GUID` values); ``comp`` as
    for :func:`F`."""
    return _Field(name, 64, "guid", count=count, fmt="x", comp=comp)


def G(name: str) -> _Field:
    """A 128-bit GID row (:class:`rdma.IBA.GID` values)."""
    return _Field(name, 128, "gid")


def S(name: str, nbytes: int) -> _Field:
    """A byte-string row (a :class:`bytearray`; text is NUL padded)."""
    return _Field(name, 8, "int", count=nbytes, fmt="s")


def N(name: str, struct: Type["BinStruct"], count: int = 1) -> _Field:
    """A nested structure (``count`` > 1: a list of them)."""
    return _Field(name, struct.MAD_LENGTH * 8, "struct", count=count,
                  struct=struct,
                  comp=struct.NUM_COMPONENTS if count == 1 else 1)


def R(bits: int) -> _Field:
    """A reserved row (named ``reserved_<bit offset>``; one component)."""
    return _Field(None, bits, "bytes" if bits > 64 else "int")


def _zero(f: _Field) -> Any:
    if f.kind == "struct":
        if f.count > 1:
            return [f.sub() for _ in range(f.count)]
        return f.sub()
    if f.kind == "bytes":
        return bytearray(f.bits // 8)
    if f.count > 1:
        if f.kind == "int" and f.bits == 8:
            return bytearray(f.count)
        one: Any = (_iba().GUID(0) if f.kind == "guid" else 0)
        return [one] * f.count
    if f.kind == "guid":
        return _iba().GUID(0)
    if f.kind == "gid":
        return _iba().GID(0)
    return 0


def _drop_slots(cls: type) -> None:
    """python-rdma's structures name their rows in ``__slots__``; here
    rows live in the instance dict, so the slot descriptors (which would
    hide them) are removed from the class."""
    slots = cls.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    for name in slots:
        if isinstance(cls.__dict__.get(name), MemberDescriptorType):
            delattr(cls, name)


def _fields_of_members(cls: type) -> List[_Field]:
    """FIELDS for a class that gives python-rdma's ``MEMBERS`` list."""
    fields = []
    for row in cls.__dict__["MEMBERS"]:
        try:
            name, bits, count = row
        except (TypeError, ValueError):
            raise TypeError(f"{cls.__name__}.MEMBERS: {row!r} is not "
                            f"(name, bits, count)") from None
        if not isinstance(name, str) or not isinstance(bits, int) or \
                not isinstance(count, int) or bits <= 0 or count <= 0:
            raise TypeError(f"{cls.__name__}.MEMBERS: {row!r} is not "
                            f"(name, bits, count)")
        if name.startswith("reserved_"):
            fields.append(R(bits * count))
        else:
            fields.append(F(name, bits, count=count))
    used = sum(f.bits * f.count for f in fields)
    total = cls.__dict__.get("MAD_LENGTH", 0) * 8
    if used < total:
        # python-rdma lets MAD_LENGTH cover more than the rows: the rest
        # is padding.
        fields.append(R(total - used))
    return fields


def _class_attribute(cls: type, name: str) -> bool:
    """True if ``name`` is a plain attribute declared by a subclass of
    BinStruct (not a method, not one of BinStruct's own names)."""
    if name.startswith("_") or name.isupper() or hasattr(BinStruct, name):
        return False        # private, a class constant, or ours
    for klass in cls.__mro__:
        if klass is BinStruct:
            return False
        if name in klass.__dict__:
            return not callable(klass.__dict__[name])
    return False


class BinStruct:
    """Base of every MAD structure: a fixed-size, big-endian record.

    ``Cls()`` is all zeros, ``Cls(buf, offset=0)`` decodes ``buf`` (bytes,
    a bytearray or another structure), ``Cls(**fields)`` sets fields (and
    marks them for the component mask).  ``obj.pack_into(buf, offset)``
    encodes, ``obj.unpack_from(buf, offset)`` decodes in place,
    ``Cls.unpack(buf)`` and ``obj.pack()`` are the same as functions.
    Unknown attributes raise :class:`AttributeError`; a value that does
    not fit its row raises :class:`ValueError` naming it; a buffer too
    short raises :class:`rdma.IBA.MADFormatError`.
    """

    #: The IBA table, set by each subclass.
    FIELDS: ClassVar[List[_Field]] = []
    #: Size in bytes.
    MAD_LENGTH: ClassVar[int] = 0
    #: ``(name, bits, count)`` of every row (python-rdma's MEMBERS).
    MEMBERS: ClassVar[List[Tuple[str, int, int]]] = []
    #: Component name to component-mask bit (SA records).
    COMPONENT_MASK: ClassVar[Dict[str, int]] = {}
    #: The attribute ID (attributes only; 0 otherwise).
    MAD_ATTRIBUTE_ID: ClassVar[int] = 0
    #: Transactor calls that may carry the attribute (``"SubnGet"``...).
    METHODS: ClassVar[Tuple[str, ...]] = ()
    #: Number of component-mask bits the structure spans.
    NUM_COMPONENTS: ClassVar[int] = 0
    #: Section of the IBA specification.
    SECTION: ClassVar[str] = ""
    _by_name: ClassVar[Dict[str, _Field]] = {}
    # (name, shift, bits, count, kind, the BinStruct subclass of a row of
    # kind "struct" - None for the other kinds, which never use it)
    _plan: ClassVar[List[Tuple[str, int, int, int, str, Any]]] = []

    if TYPE_CHECKING:
        # Set on each class with a table by __init_subclass__ and
        # _compile_decoder().
        LENGTH: ClassVar[int]
        ATTRIBUTE_ID: ClassVar[int]
        _decode: ClassVar[Callable[["BinStruct", int], None]]

        # The rows of FIELDS are instance attributes made at run time
        # (zero(), unpack_from()): to a type checker each one is Any.
        def __getattr__(self, name: str) -> Any: ...
    else:
        def __getattr__(self, name):
            # Only called for a name the instance does not have: a record
            # of a table (_unpack_table) decodes its rows on first use.
            d = self.__dict__
            if not name.startswith("__"):
                self._rows()
                if name in d:       # (or decoded by another thread)
                    return d[name]
            raise AttributeError(f"{type(self).__name__!r} object has "
                                 f"no attribute {name!r}")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _drop_slots(cls)
        if "FIELDS" not in cls.__dict__ and "MEMBERS" in cls.__dict__:
            # A structure written the way python-rdma's generator writes
            # them: MEMBERS (name, bits, count) and usually its own
            # zero/pack_into/unpack_from, which then override ours.
            cls.FIELDS = _fields_of_members(cls)
        if "FIELDS" not in cls.__dict__:
            return
        if "LENGTH" in cls.__dict__ and "MAD_LENGTH" not in cls.__dict__:
            cls.MAD_LENGTH = cls.__dict__["LENGTH"]
        total = cls.MAD_LENGTH * 8
        off = comp = 0
        by_name: Dict[str, _Field] = {}
        mask: Dict[str, int] = {}
        plan = []
        for f in cls.FIELDS:
            f.offset = off
            f.comp_index = comp
            if f.reserved:
                f.name = f"reserved_{off}"
            if f.name in by_name:
                raise TypeError(f"{cls.__name__}: two rows named {f.name}")
            by_name[f.name] = f
            if f.kind == "struct" and f.count == 1:
                for sub, bit in f.sub.COMPONENT_MASK.items():
                    mask[f"{f.name}.{sub}"] = comp + bit
            elif f.comp > 1 and f.count > 1:
                # the array's first bit under its own name too (python-rdma
                # adds the element index to it)
                mask[f.name] = comp
                for i in range(f.count):
                    mask[f"{f.name}_{i}"] = comp + i * f.comp // f.count
            else:
                mask[f.name] = comp
            width = f.bits * f.count
            plan.append((f.name, total - off - width, f.bits, f.count,
                         f.kind, f.struct))
            off += width
            comp += f.comp
        if off != total:
            raise TypeError(f"{cls.__name__}: rows are {off} bits, "
                            f"MAD_LENGTH says {total}")
        cls.LENGTH = cls.MAD_LENGTH
        cls.NUM_COMPONENTS = comp
        cls.COMPONENT_MASK = mask
        cls.MEMBERS = [(f.name, f.bits, f.count) for f in cls.FIELDS]
        cls._by_name = by_name
        cls._plan = plan
        if cls.MAD_ATTRIBUTE_ID:
            cls.ATTRIBUTE_ID = cls.MAD_ATTRIBUTE_ID
        for call in cls.METHODS:
            for cname in _CLASS_CALLS:
                if call.startswith(cname) and call[len(cname):] in \
                        METHOD_NUMBERS:
                    setattr(cls, "MAD_" + call.upper(),
                            METHOD_NUMBERS[call[len(cname):]])
                    break
            else:
                raise TypeError(f"{cls.__name__}: unknown method {call}")

    # -- construction

    def __init__(self, buf: Union[bytes, bytearray, memoryview,
                                  "BinStruct", None] = None,
                 offset: int = 0, **fields: Any):
        d = self.__dict__
        d["_set"] = set()
        if buf is None:
            self.zero()
        else:
            if isinstance(buf, BinStruct):
                buf = buf.pack()
            self.unpack_from(buf, offset)
        for name, value in fields.items():
            setattr(self, name, value)

    def zero(self) -> None:
        """Set every row back to zero (nothing marked as set)."""
        d = self.__dict__
        d.pop(_UNDECODED, None)
        d.pop(_UNDECODED_AT, None)
        for f in self.FIELDS:
            d[f.name] = _zero(f)
        d["_set"] = set()

    def __setattr__(self, name: str, value: Any) -> None:
        f = self._by_name.get(name)
        if f is None:
            if _class_attribute(type(self), name):
                # A subclass's own attribute (python-rdma programs declare
                # e.g. ``buf = None`` on a structure and set it).
                object.__setattr__(self, name, value)
                return
            raise AttributeError(f"{type(self).__name__} has no field "
                                 f"{name!r}")
        d = self._rows()
        d[name] = self._convert(f, value)
        d["_set"].add(name)

    def _convert(self, f: _Field, value: Any) -> Any:
        where = f"{type(self).__name__}.{f.name}"
        if f.kind == "struct":
            if value is None and f.count == 1:
                # python-rdma's "left out": printers skip the row, packing
                # refuses it.
                return None
            if f.count > 1:
                value = list(value)
                if len(value) != f.count or not all(
                        isinstance(v, f.sub) for v in value):
                    raise TypeError(f"{where} must be a list of {f.count} "
                                    f"{f.sub.__name__}")
                return value
            if not isinstance(value, f.sub) and len(f.sub.FIELDS) == 1:
                # A structure of one row (NodeDescription) takes its value.
                sub = f.sub()
                setattr(sub, f.sub.FIELDS[0].name, value)
                return sub
            if not isinstance(value, f.sub):
                raise TypeError(f"{where} must be a {f.sub.__name__}, "
                                f"not {type(value).__name__}")
            return value
        if f.kind == "bytes" or (f.count > 1 and f.kind == "int"
                                 and f.bits == 8):
            n = f.bits // 8 if f.kind == "bytes" else f.count
            if isinstance(value, str):
                value = value.encode()
            if isinstance(value, int):
                raise TypeError(f"{where} is {n} bytes, not an int")
            raw = bytearray(value)
            if f.fmt != "s" and len(raw) != n:
                raise ValueError(f"{where} has {n} elements, not "
                                 f"{len(raw)}")
            if len(raw) > n:
                raise ValueError(f"{where} is at most {n} bytes, not "
                                 f"{len(raw)}")
            return raw.ljust(n, b"\0")
        if f.count > 1:
            value = list(value)
            if len(value) != f.count:
                raise ValueError(f"{where} has {f.count} elements, not "
                                 f"{len(value)}")
            return [self._one(f, v, where) for v in value]
        return self._one(f, value, where)

    @staticmethod
    def _one(f: _Field, v: Any, where: str) -> Any:
        if f.kind == "gid":
            return v if isinstance(v, _iba().GID) else _iba().GID(v)
        if f.kind == "guid":
            return v if isinstance(v, _iba().GUID) else _iba().GUID(v)
        return v

    # -- decoding

    def unpack_from(self, buf: Union[bytes, bytearray, memoryview],
                    offset: int = 0) -> None:
        """Decode ``MAD_LENGTH`` bytes of ``buf`` at byte ``offset`` into
        this object (nothing marked as set).

        Raises :class:`rdma.IBA.MADFormatError` if ``buf`` is too short.
        """
        n = self.MAD_LENGTH
        if offset < 0 or len(buf) < offset + n:
            raise _format_error(
                f"{type(self).__name__} needs {n} bytes at offset "
                f"{offset}, have {max(0, len(buf) - offset)}")
        self._from_int(int.from_bytes(buf[offset:offset + n], "big"))

    def _from_int(self, v: int) -> None:
        d = self.__dict__
        if _UNDECODED in d:
            d.pop(_UNDECODED, None)
            d.pop(_UNDECODED_AT, None)
        cls = type(self)
        fn = cls.__dict__.get("_decode")
        if fn is None:
            fn = cls._compile_decoder()
        fn(self, v)

    @classmethod
    def _compile_decoder(cls) -> Any:
        """Compile (once per class) a decoder from the class's table:
        one straight-line function with the shifts and masks as
        constants, which fills the same fields with the same values as
        :meth:`_from_int_generic` several times faster.  Stored as the
        class's ``_decode``."""
        iba = _iba()
        ns: Dict[str, Any] = {"GUID": iba.GUID, "GID": iba.GID,
                              "_new": int.__new__, "_ba": bytearray,
                              "_bnew": bytes.__new__}
        lines = ["def _decode(self, v):",
                 "    d = self.__dict__",
                 "    d['_set'] = set()"]
        total = cls.MAD_LENGTH * 8
        for i, (name, shift, bits, count, kind, struct) in \
                enumerate(cls._plan):
            width = bits * count
            x = f"(v >> {shift})" if shift else "v"
            if shift + width < total:
                x = f"({x} & {(1 << width) - 1:#x})"
            key = repr(name)
            if struct is not None:
                ns[f"S{i}"] = struct
                ns[f"D{i}"] = struct.__dict__.get("_decode") or \
                    struct._compile_decoder()
            if count == 1:
                if kind == "int":
                    lines.append(f"    d[{key}] = {x}")
                elif kind == "guid":
                    lines.append(f"    d[{key}] = _new(GUID, {x})")
                elif kind == "gid":
                    # GID(int) checks its argument; x is 128 bits already
                    lines.append(f"    d[{key}] = _bnew(GID, {x}.to_bytes("
                                 f"16, 'big'))")
                elif kind == "bytes":
                    lines.append(f"    d[{key}] = _ba({x}.to_bytes("
                                 f"{bits >> 3}, 'big'))")
                else:
                    lines.append(f"    s = S{i}.__new__(S{i})")
                    lines.append(f"    D{i}(s, {x})")
                    lines.append(f"    d[{key}] = s")
                continue
            if kind == "int" and bits == 8:
                lines.append(f"    d[{key}] = _ba({x}.to_bytes({count}, "
                             f"'big'))")
                continue
            shifts = tuple(bits * (count - 1 - j) for j in range(count))
            ns[f"T{i}"] = shifts
            lines.append(f"    w = {x}")
            one = f"((w >> k) & {(1 << bits) - 1:#x})"
            if kind == "guid":
                one = f"_new(GUID, {one})"
            elif kind == "gid":
                one = f"_bnew(GID, {one}.to_bytes(16, 'big'))"
            if kind == "struct":
                lines.append("    xs = []")
                lines.append(f"    for k in T{i}:")
                lines.append(f"        s = S{i}.__new__(S{i})")
                lines.append(f"        D{i}(s, {one})")
                lines.append("        xs.append(s)")
                lines.append(f"    d[{key}] = xs")
            else:
                lines.append(f"    d[{key}] = [{one} for k in T{i}]")
        exec("\n".join(lines) + "\n", ns)  # noqa: S102 - from our tables
        fn = ns["_decode"]
        cls._decode = fn
        return fn

    def _from_int_generic(self, v: int) -> None:
        """The table-walking decoder :meth:`_compile_decoder` compiles
        (the reference the tests compare the compiled one with)."""
        d = self.__dict__
        d.pop(_UNDECODED, None)
        d.pop(_UNDECODED_AT, None)
        d["_set"] = set()
        iba = _iba()
        for name, shift, bits, count, kind, struct in self._plan:
            mask = (1 << bits) - 1
            if count == 1:
                x = (v >> shift) & mask
                if kind == "int":
                    d[name] = x
                elif kind == "guid":
                    d[name] = iba.GUID(x)
                elif kind == "gid":
                    d[name] = iba.GID(x)
                elif kind == "bytes":
                    d[name] = bytearray(x.to_bytes(bits >> 3, "big"))
                else:
                    s = struct.__new__(struct)
                    s._from_int_generic(x)
                    d[name] = s
                continue
            whole = (v >> shift) & ((1 << (bits * count)) - 1)
            if kind == "int" and bits == 8:
                d[name] = bytearray(whole.to_bytes(count, "big"))
                continue
            xs = [(whole >> (bits * (count - 1 - i))) & mask
                  for i in range(count)]
            if kind == "guid":
                xs = [iba.GUID(x) for x in xs]
            elif kind == "gid":
                xs = [iba.GID(x) for x in xs]
            elif kind == "struct":
                objs = []
                for x in xs:
                    s = struct.__new__(struct)
                    s._from_int_generic(x)
                    objs.append(s)
                xs = objs
            d[name] = xs

    @classmethod
    def unpack(cls, buf: Union[bytes, bytearray, memoryview],
               offset: int = 0) -> "BinStruct":
        """Return a new structure decoded from ``buf`` at ``offset``."""
        obj = cls.__new__(cls)
        obj.unpack_from(buf, offset)
        return obj

    # -- tables: records decoded on first use

    @classmethod
    def _unpack_table(cls, data: bytes, stride: int,
                      need: int) -> List["BinStruct"]:
        """The records of a table: one every *stride* bytes of *data*
        while *need* bytes are left; a record shorter than ``MAD_LENGTH``
        (*stride* smaller) reads zeros after its end.  The same records
        as ``cls(record_bytes)`` each; but a table can hold tens of
        thousands (every PathRecord of a subnet) of which a program often
        reads a few rows, so a record of a class built from a table keeps
        where its bits are (the table's bytes and its offset) and decodes
        them on its first use (``__getattr__``; :meth:`_rows` for the
        methods that read the rows directly)."""
        n = cls.MAD_LENGTH
        take = min(stride, n)
        offsets = range(0, len(data) - need + 1, stride)
        if not cls._decodes_later():
            pad = bytes(n - take)
            return [cls(data[o:o + take] + pad, 0) for o in offsets]
        if "_decode" not in cls.__dict__:
            cls._compile_decoder()
        # Each record holds the table's (bytes, record length, shift) and
        # its offset: two references, no copy, until it is decoded.
        src = (bytes(data), take, 8 * (n - take))
        new = cls.__new__
        out: List[BinStruct] = []
        add = out.append
        last = len(data) - take        # the records past it are cut short
        for o in offsets:
            if o > last:
                # too short: raises MADFormatError as cls(...) does
                add(cls(data[o:o + take] + bytes(n - take), 0))
                continue
            r = new(cls)
            d = r.__dict__
            d[_UNDECODED] = src
            d[_UNDECODED_AT] = o
            add(r)
        return out

    @classmethod
    def _decodes_later(cls) -> bool:
        """Whether the class's records may wait to be decoded: built from
        a table, and decoded by this class's code (a python-rdma style
        subclass with its own unpack_from, or a class attribute named
        like a row, is decoded at once)."""
        base = BinStruct
        return (cls.__init__ is base.__init__ and
                cls.unpack_from is base.unpack_from and
                cls._from_int is base._from_int and
                cls.__setattr__ is base.__setattr__ and
                bool(cls._plan) and
                not any(hasattr(cls, f.name) for f in cls.FIELDS))

    def _rows(self) -> Dict[str, Any]:
        """The instance's rows (its ``__dict__``), decoded first when
        :meth:`_unpack_table` left them for later."""
        d = self.__dict__
        src, o = d.get(_UNDECODED), d.get(_UNDECODED_AT)
        if src is not None and o is not None:
            data, take, shift = src
            type(self).__dict__["_decode"](self, int.from_bytes(
                data[o:o + take], "big") << shift)
            # Dropped once the rows are in: another thread that reads the
            # record meanwhile decodes it too (the same values) instead
            # of finding neither.
            d.pop(_UNDECODED, None)
            d.pop(_UNDECODED_AT, None)
        return d

    # -- encoding

    def _to_int(self, shown: bool = False) -> int:
        """The structure as one int; ``shown``: rows left out (None)
        count as zero (for printing) instead of raising."""
        d = self._rows()
        acc = 0
        for name, shift, bits, count, kind, struct in self._plan:
            value = d[name]
            if value is None and shown:
                continue
            if count == 1:
                x = self._int_of(name, bits, kind, struct, value)
            else:
                if len(value) != count:
                    raise ValueError(f"{type(self).__name__}.{name} has "
                                     f"{count} elements, not {len(value)}")
                if kind == "int" and bits == 8 and isinstance(
                        value, (bytes, bytearray)):
                    x = int.from_bytes(value, "big")
                else:
                    x = 0
                    for v in value:
                        x = (x << bits) | self._int_of(name, bits, kind,
                                                       struct, v)
            acc |= x << shift
        return acc

    def _int_of(self, name: str, bits: int, kind: str, struct: Any,
                v: Any) -> int:
        if kind == "struct":
            if v is None:
                raise ValueError(f"{type(self).__name__}.{name} is None "
                                 f"(left out): set a {struct.__name__} "
                                 f"before packing")
            if not isinstance(v, struct) or not isinstance(v, BinStruct):
                raise TypeError(f"{type(self).__name__}.{name} must be a "
                                f"{struct.__name__}")
            return v._to_int()
        if kind == "bytes":
            raw = bytes(v)
            if len(raw) != bits >> 3:
                raise ValueError(f"{type(self).__name__}.{name} is "
                                 f"{bits >> 3} bytes, not {len(raw)}")
            return int.from_bytes(raw, "big")
        if kind == "gid":
            return int(v) if isinstance(v, _iba().GID) else \
                int(_iba().GID(v))
        if isinstance(v, bool) or not isinstance(v, int) \
                or not 0 <= v < (1 << bits):
            raise ValueError(f"{type(self).__name__}.{name} = {v!r} does "
                             f"not fit in {bits} bits")
        return int(v)

    def pack_into(self, buf: Union[bytearray, memoryview],
                  offset: int = 0) -> None:
        """Encode into ``buf`` at byte ``offset``."""
        n = self.MAD_LENGTH
        if len(buf) < offset + n:
            raise ValueError(f"{type(self).__name__} needs {n} bytes at "
                             f"offset {offset}, the buffer has "
                             f"{len(buf)}")
        buf[offset:offset + n] = self._to_int().to_bytes(n, "big")

    def pack(self) -> bytes:
        """Return the structure's ``MAD_LENGTH`` bytes."""
        return self._to_int().to_bytes(self.MAD_LENGTH, "big")

    # -- component masks

    def component_mask(self) -> int:
        """The SA component mask of the fields that were assigned (a
        nested structure contributes the fields assigned in it; assigning
        a whole nested structure sets all of its components)."""
        mask = 0
        d = self._rows()
        s = d["_set"]
        for f in self.FIELDS:
            if f.kind == "struct" and f.count == 1:
                sub = d[f.name]
                if sub is None:
                    continue
                if f.name in s and not sub._set:
                    mask |= ((1 << f.comp) - 1) << f.comp_index
                else:
                    mask |= sub.component_mask() << f.comp_index
            elif f.name in s:
                mask |= ((1 << f.comp) - 1) << f.comp_index
        return mask

    @classmethod
    def component_bit(cls, name: str) -> int:
        """The component-mask bits of one row (by name; a dotted name
        reaches into a nested structure)."""
        head, _, rest = name.partition(".")
        f = cls._by_name[head]
        if rest:
            return f.sub.component_bit(rest) << f.comp_index
        return ((1 << f.comp) - 1) << f.comp_index

    def fields_set(self) -> List[str]:
        """The names of the rows that were assigned."""
        return [f.name for f in self.FIELDS if f.name in self._set]

    # -- Python protocol

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        d = self._rows()
        for f in self.FIELDS:
            if not f.reserved:
                yield f.name, d[f.name]

    def to_dict(self) -> Dict[str, Any]:
        """The rows (reserved ones left out) as a JSON-friendly dict: GIDs
        as text, GUIDs as ints, byte strings as text, nested structures
        as dicts."""
        out: Dict[str, Any] = {}
        d = self._rows()
        for f in self.FIELDS:
            if f.reserved:
                continue
            out[f.name] = _jsonable(f, d[f.name])
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.pack() == other.pack()

    __hash__ = None  # type: ignore[assignment]

    def __copy__(self) -> "BinStruct":
        return _rebuild(type(self), self.pack(), sorted(self._set))

    def __deepcopy__(self, memo: Dict[int, object]) -> "BinStruct":
        return self.__copy__()

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={v!r}" for n, v in self if not _is_zero(v))
        return f"{type(self).__name__}({parts})"

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.pack(), sorted(self._set)))

    # -- printing

    def printer(self, F: Optional[TextIO] = None, offset: int = 0,
                header: bool = True, format: str = "dump",
                **kwargs: Any) -> None:
        """Pretty print the structure to the file ``F`` (default stdout).

        ``format="dump"`` prints each 32-bit word as its byte offset
        (plus ``offset``), its hex value and the rows that start in it;
        ``format="dotted"`` prints one ``name....value`` line per row, the
        way infiniband-diags prints attributes.  ``header`` prints the
        class name first.
        """
        out = F if F is not None else sys.stdout
        if header:
            out.write(f"{type(self).__name__}\n")
        if format == "dotted":
            _dotted(out, self, **kwargs)
        elif format == "dump":
            _dump(out, self, offset, "")
        else:
            raise ValueError(f"unknown printer format {format!r} (dump or "
                             f"dotted)")

    def __str__(self) -> str:
        import io
        s = io.StringIO()
        self.printer(s, format="dotted")
        return s.getvalue()


class BinFormat(BinStruct):
    """Base of the whole-MAD layouts (``SMPFormat``, ``SAFormat``...):
    they carry ``MAD_CLASS`` and ``MAD_CLASS_VERSION`` and a ``data``
    row holding the attribute."""

    #: Management class and class version the format is for.
    MAD_CLASS: ClassVar[int] = 0
    MAD_CLASS_VERSION: ClassVar[int] = 0

    if TYPE_CHECKING:
        # The common MAD header rows every format has (instance
        # attributes made from FIELDS at run time, like every row).
        baseVersion: int
        mgmtClass: int
        classVersion: int
        method: int
        status: int
        transactionID: int
        attributeID: int
        attributeModifier: int
        data: bytearray

    def describe(self) -> str:
        """A short description of the RPC: method, format, attribute."""
        iba = _iba()
        attr = iba.ATTR_TO_STRUCT.get((type(self), self.attributeID))
        return (f"{iba.const_str('MAD_METHOD_', self.method, True)} "
                f"{type(self).__name__}({self.mgmtClass}."
                f"{self.classVersion}) "
                f"{'??' if attr is None else attr.__name__}"
                f"({self.attributeID})")


# Management class prefixes of the transactor calls, longest first.
_CLASS_CALLS = ("SubnAdm", "Subn", "Performance", "BM", "CommMgt", "DevMgt",
                "SNMP", "Vend")


def _rebuild(cls: Type[BinStruct], raw: bytes,
             set_names: List[str]) -> BinStruct:
    obj = cls.unpack(raw)
    obj._set.update(set_names)
    return obj


def _text(raw: Union[bytes, bytearray]) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


def _is_zero(v: Any) -> bool:
    if isinstance(v, BinStruct):
        return not any(v.pack())
    if isinstance(v, (list, tuple)):
        return all(_is_zero(x) for x in v)
    if isinstance(v, (bytes, bytearray)):
        return not any(v)
    return not v


def _jsonable(f: _Field, v: Any) -> Any:
    if v is None:
        return None
    if f.kind == "struct":
        return [x.to_dict() for x in v] if f.count > 1 else v.to_dict()
    if f.kind == "gid":
        return str(v)
    if f.fmt == "s":
        return _text(v)
    if f.kind == "bytes":
        return bytes(v).hex()
    if f.count > 1:
        return [int(x) for x in v]
    return int(v)


def _value_text(f: _Field, v: Any) -> str:
    if f.kind == "int" and f.fmt == "d" and f.name:
        # python-rdma's per-name formats (programs may add to them)
        extra = getattr(_iba(), "MEMBER_FORMATS", {}).get(f.name)
        if extra == "hex":
            return f"0x{v:0{(f.bits + 3) // 4}x}"
    if f.kind == "gid":
        return str(v)
    if f.kind == "guid":
        return f"0x{int(v):016x}"
    if f.fmt == "s":
        return repr(_text(v))
    if f.kind == "bytes":
        return f"<{len(v)} bytes>"
    if f.fmt == "x":
        return f"0x{v:0{(f.bits + 3) // 4}x}"
    return str(v)


def _decoded_data(s: BinStruct, f: _Field) -> Any:
    """The value of row ``f`` for printing: the ``data`` of a format is
    shown as the attribute its ``attributeID`` names (python-rdma's
    printer does the same)."""
    v = s._rows()[f.name]
    if f.name == "data" and isinstance(s, BinFormat):
        attr = _iba().ATTR_TO_STRUCT.get((type(s), s.attributeID))
        if attr is not None and attr.MAD_LENGTH <= len(v):
            return attr(bytes(v))
    return v


def _dotted(out: TextIO, s: BinStruct, prefix: str = "",
            column: int = 33, skip_reserved: bool = True, *,
            colon: bool = False, name_map: Optional[Dict[str, str]] = None,
            dump_list: bool = False) -> None:
    """One ``Name.....value`` line per row of ``s`` (nested structures
    with ``prefix``); ``colon`` ends each name with ``:``, ``name_map``
    renames rows (keyed by the row name with its first letter upper
    case), ``dump_list`` prints every array element on its own line."""
    for f in s.FIELDS:
        if skip_reserved and f.reserved:
            continue
        v = _decoded_data(s, f)
        if v is None:                   # a row left out (set to None)
            continue
        if isinstance(v, BinStruct) or f.kind == "struct":
            items = v if f.count > 1 else [v]
            for i, sub in enumerate(items):
                tag = f"[{i}]" if f.count > 1 else ""
                _dotted(out, sub, f"{prefix}{f.name}{tag}.", column,
                        skip_reserved, colon=colon, name_map=name_map,
                        dump_list=dump_list)
            continue
        cname = f.name[0].upper() + f.name[1:]
        if name_map:
            cname = name_map.get(cname, cname)
        name = prefix + cname
        sep = ":" if colon else ""
        if f.count > 1 and f.fmt != "s":
            if f.bits > 16 or dump_list:
                for i, x in enumerate(v):
                    n = f"{name}[{i}]{sep}"
                    out.write(f"{n}{'.' * max(1, column - len(n))}"
                              f"{_value_text(f, x)}\n")
                continue
            text = "[" + ", ".join(f"{i}:{_value_text(f, x)}"
                                   for i, x in enumerate(v)) + "]"
        else:
            text = _value_text(f, v)
        n = name + sep
        out.write(f"{n}{'.' * max(1, column - len(n))}{text}\n")


def _dump(out: TextIO, s: BinStruct, offset: int, prefix: str) -> None:
    """python-rdma's dump: a line per 32-bit word with the rows that start
    in it; nested structures open with ``+`` and close with ``-``.  Zero
    words in which no row starts (padding, the empty end of a MAD) are
    left out."""
    raw = s._to_int(shown=True).to_bytes(s.MAD_LENGTH, "big")
    names: Dict[int, List[str]] = {}
    cursor = 0

    def flush(upto: int) -> None:
        nonlocal cursor
        for w in range(cursor, upto, 4):
            chunk = raw[w:w + 4].ljust(4, b"\0")
            here = names.pop(w, [])
            if here or any(chunk):
                out.write(f"{offset + w:3} {chunk.hex().upper()} "
                          f"{','.join(here)}\n")
        cursor = max(cursor, upto)

    for f in s.FIELDS:
        v = _decoded_data(s, f)
        if v is None:                   # a row left out (set to None)
            continue
        word = (f.offset // 32) * 4
        if isinstance(v, BinStruct) and f.offset % 32 == 0:
            flush(word)
            items = [v]     # (an array of structures is a list: not here)
            for i, sub in enumerate(items):
                tag = f"[{i}]" if f.count > 1 else ""
                out.write(f"   + {prefix}{f.name}{tag} "
                          f"{type(sub).__name__}\n")
                _dump(out, sub, offset + word + i * sub.MAD_LENGTH,
                      f"{prefix}{f.name}{tag}.")
                out.write(f"   - {prefix}{f.name}{tag}\n")
            cursor = word + (f.bits * f.count + 31) // 32 * 4
            continue
        if f.count > 1 and f.fmt != "s" and f.bits < 32 and \
                (f.bits * f.count) % 32 == 0 and f.kind != "struct":
            per = 32 // f.bits
            for i, x in enumerate(v):
                names.setdefault(word + (i // per) * 4, []).append(
                    f"{f.name}[{i}]={_value_text(f, x)}")
            continue
        if isinstance(v, BinStruct):
            text = f"<{type(v).__name__}>"
        elif f.count > 1 and f.fmt != "s":
            text = "[" + ", ".join(_value_text(f, x) for x in v) + "]"
        else:
            text = _value_text(f, v)
        names.setdefault(word, []).append(f"{f.name}={text}")
    flush(len(raw))
