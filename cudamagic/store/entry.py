"""The entry record and its encoding: what one cached build is, as bytes that are never pickled.

An entry is one bytes value: a fixed magic, the sha256 of everything after it, the length of a
JSON header, the header (format, the key it was stored under, CUBIN size and sha256, log,
options, arch, NVRTC version, created time, compile time, and the optional fields), then the
CUBIN. Every read checks the magic, the checksum (one sha256 pass over the header and the CUBIN),
the header's shape, the key (a record copied over another entry's file is not that entry) and the
CUBIN's size.

**Entries survive upgrades.** A field added to the record is optional: it goes into
:data:`_OPTIONAL` with its check, and an entry written before it decodes with the field's
default (tests/test_store_upgrade.py reads a folder written by an older cudamagic). A field a
reader does not know is ignored, so an older reader still serves a newer writer's entry of the
same format. :data:`ENTRY_FORMAT` changes only when old entries cannot be read at all.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..cxx.resolve import ResolvedBy
from ..errors import CacheArgumentError
from ..core.miss import MissKind
from ..toolchain.binary.image import GridSyncTable

__all__ = ["EntryRecord", "BadEntry", "TableRow", "encode_entry", "decode_entry", "entry_digest",
           "ENTRY_FORMAT", "ENTRY_MAGIC", "made_here"]

#: The layout of an entry record. 2: the record names its key; format-1 records (which do not)
#: are misses, rebuilt on first use. 3: the record holds its variables' types as the compiler
#: gave them (``variables``); format-2 records (whose variables were typed from the source
#: text) are misses, rebuilt on first use. Independent of :data:`cudamagic.store.keys.KEY_VERSION`, which
#: changes what keys mean.
ENTRY_FORMAT = 3

#: What every encoded entry starts with.
ENTRY_MAGIC = b"CUDAMAGIC-ENTRY\n"
_HEADER_LEN = struct.Struct("<I")
_SUM = 32  # sha256 of everything after it


class BadEntry(Exception):
    """A stored value that is not a usable entry record (the reason is the message; ``kind``
    says what it was: damaged, or of another format)."""

    def __init__(self, message: str, kind: MissKind = MissKind.DAMAGED) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class EntryRecord:
    """One cached build.

    Attributes
    ----------
    cubin : bytes
    lowered : dict of str to str or None
        Name expression -> symbol as NVRTC lowered it; None in entries that lack it (a CUBIN from
        elsewhere): those are resolved by demangling alone.
    log : str
        The compile log (warnings).
    options : tuple of str
    arch : str
    nvrtc_version : str
    created : float
        Seconds since the epoch.
    compile_seconds : float
    python_names : dict of str to str or None
        Name expression -> Python name as the miss derived them (a restore of 1000 kernels
        need not derive them again); optional like ``lowered``.
    key : str
        The cache key the record is stored under; :meth:`KernelCache.put` fills it in. A record
        read back under another key is refused: its file was copied or moved there.
    manifest : dict or None
        A JSON object kept as is (the dependency manifest of the headers the compile read);
        None when there is none.
    kernels : dict or None
        The module's kernel table as the session resolved it, for a module that travels to
        another process (:meth:`cudamagic.Module.__reduce__`): ``{"placeholders": bool,
        "rows": [[name expression, symbol, Python name, resolved by, demangled], ...],
        "too_long": [symbol, ...]}`` (``too_long``, as in ``symbols``). Cache entries do not
        carry it: a hit resolves against the CUBIN itself.
    symbols : dict or None
        Every kernel symbol's text as the miss read it, so that a hit demangles nothing:
        ``{"demangler": "libstdc++", "placeholders": false, "texts": {symbol: text},
        "too_long": [symbol, ...]}`` (an ``extern "C"`` kernel's text gives the parameter
        types its source declares; ``too_long`` lists the symbols whose demangled name was
        too long to keep, which have no text). An entry written before ``too_long`` holds the
        demangler's words of then as such a symbol's text, read as too long by
        :func:`cudamagic.cxx.recorded_texts` (so the format stays; an older reader finds
        fewer texts than symbols in a newer entry and demangles again). None in older
        entries: demangled.
    variables : dict or None
        The CUBIN's variables' types as the compiler gave them in the compile (the type probe,
        :mod:`cudamagic.toolchain.compile.probe`), by symbol: ``{symbol: [C++ type, dtype, shape,
        gap]}`` (:meth:`~cudamagic.toolchain.binary.variables.VarType.to_json`); a variable it lacks was
        not asked about. Every compiled entry has it; a module from a CUBIN built elsewhere
        has none.
    grid_sync : GridSyncTable or None
        Which kernels synchronise the grid, as the PTX the CUBIN was compiled from says
        (:class:`~cudamagic.toolchain.binary.image.GridSyncTable`; stored as ``{"syncing": [symbol,
        ...], "unknown": [symbol, ...]}``; every other kernel does not). None where no PTX
        was read (an entry written before the field, a CUBIN from elsewhere, a ``-dlto`` build
        whose CUBIN answered alone): the CUBIN's records decide.
    made : dict or None
        Where the build was made, for ``%cuda_cache list`` to tell entries apart (an ``extern
        "C"`` cell has no name expressions): ``{"first_line": the cell's first line that is
        not blank, "host": the machine's name, "folder": the working folder}``
        (:func:`made_here`). None in entries written before the field and in those not made
        from a cell (a CUBIN from elsewhere, nvJitLink's).
    """

    cubin: bytes
    lowered: dict[str, str] | None
    log: str = ""
    options: tuple[str, ...] = ()
    arch: str = ""
    nvrtc_version: str = ""
    created: float = field(default_factory=time.time)
    compile_seconds: float = 0.0
    python_names: dict[str, str] | None = None
    key: str = ""
    manifest: Mapping[str, object] | None = None
    kernels: dict[str, Any] | None = None
    symbols: dict[str, Any] | None = None
    variables: dict[str, Any] | None = None
    grid_sync: GridSyncTable | None = None
    made: dict[str, str] | None = None

    @property
    def cubin_sha256(self) -> str:
        """The hex sha256 of the CUBIN."""
        return hashlib.sha256(self.cubin).hexdigest()


def _string_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                           for k, v in value.items())


def _symbol_list(value: object) -> bool:
    """Whether a record's optional ``too_long`` is absent (an older record) or a list of symbols."""
    return value is None or isinstance(value, list) and all(isinstance(s, str) for s in value)


@dataclass(frozen=True)
class TableRow:
    """One kernel of a travelling module's table (``kernels["rows"]``), which the record
    stores as a list of five strings: written and read here only."""

    expression: str
    symbol: str
    python_name: str
    resolved_by: ResolvedBy
    text: str

    def to_json(self) -> list[str]:
        return [self.expression, self.symbol, self.python_name, self.resolved_by.value,
                self.text]

    @classmethod
    def from_json(cls, row: object) -> "TableRow":
        """:raises ValueError: not what :meth:`to_json` writes (a word no ResolvedBy has)."""
        if not (isinstance(row, list) and len(row) == 5 and all(isinstance(x, str) for x in row)):
            raise ValueError("a kernel table's row is not a list of five strings")
        return cls(row[0], row[1], row[2], ResolvedBy(row[3]), row[4])


def _kernel_table(value: object) -> bool:
    """Whether a decoded ``kernels`` field has the shape :class:`EntryRecord` documents."""
    if not (isinstance(value, dict) and isinstance(value.get("placeholders"), bool)
            and isinstance(value.get("rows"), list) and _symbol_list(value.get("too_long"))):
        return False
    try:
        for row in value["rows"]:
            TableRow.from_json(row)
    except ValueError:
        return False
    return True


def _symbol_table(value: object) -> bool:
    """Whether a decoded ``symbols`` field has the shape :class:`EntryRecord` documents."""
    texts = value.get("texts") if isinstance(value, dict) else None
    return (isinstance(value, dict) and isinstance(value.get("demangler"), str)
            and isinstance(value.get("placeholders"), bool) and isinstance(texts, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in texts.items())
            and _symbol_list(value.get("too_long")))


def _variable_table(value: object) -> bool:
    """Whether a decoded ``variables`` field has the shape :class:`EntryRecord` documents."""
    if not isinstance(value, dict):
        return False
    if not value:
        return True
    from ..toolchain.binary.variables import VarType  # an entry with variables only: not every hit's

    try:
        for k, v in value.items():
            if not isinstance(k, str):
                return False
            VarType.from_json(v)
    except ValueError:
        return False
    return True


def _grid_sync_table(value: object) -> bool:
    """Whether a decoded ``grid_sync`` field has the shape :class:`EntryRecord` documents."""
    try:
        GridSyncTable.from_json(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class _Optional:
    """An optional header field: how it is checked and what it becomes in the record."""

    what: str  # "the entry's {name!r} field is not {what}"
    check: Callable[[object], bool]
    load: Callable[[Any], Any] = lambda value: value
    dump: Callable[[Any], Any] = lambda value: value


#: Optional fields, by name: absent (an entry written before the field, or a record without
#: it) -> the record's default; stored only when the record's value differs from that default.
_OPTIONAL: dict[str, _Optional] = {
    "lowered": _Optional("a map of strings", _string_map, dict, dict),
    "python_names": _Optional("a map of strings", _string_map, dict, dict),
    "manifest": _Optional("a JSON object", lambda v: isinstance(v, dict)),
    "kernels": _Optional("a kernel table", _kernel_table),
    "symbols": _Optional("a table of symbol texts", _symbol_table),
    "variables": _Optional("a table of variable types", _variable_table),
    "grid_sync": _Optional("a grid-sync table", _grid_sync_table, GridSyncTable.from_json,
                           GridSyncTable.to_json),
    "made": _Optional("a map of strings", _string_map, dict, dict),
}

#: Required fields and their JSON types.
_SHAPE: dict[str, type | tuple[type, ...]] = {"format": int, "cubin_size": int, "cubin_sha256": str, "log": str, "options": list,
          "arch": str, "nvrtc_version": str, "created": (int, float),
          "compile_seconds": (int, float)}

# what an absent optional field is (``lowered`` has no default: None is its "absent")
_DEFAULTS = {f.name: None if f.default is MISSING else f.default
             for f in fields(EntryRecord)}


def encode_entry(rec: EntryRecord, format_version: int = ENTRY_FORMAT) -> bytes:
    """The bytes stored for an entry.

    :raises CacheArgumentError: the record names no key, or its manifest is not a JSON object.
    """
    if not rec.key:
        raise CacheArgumentError("an entry record must name the key it is stored under "
                                 "(KernelCache.put fills it in)")
    if rec.manifest is not None and not isinstance(rec.manifest, dict):
        raise CacheArgumentError(f"an entry's manifest must be a dict (a JSON object), not a "
                                 f"{type(rec.manifest).__name__}")
    header: dict[str, Any] = {
        "format": format_version, "key": rec.key, "cubin_size": len(rec.cubin),
        "cubin_sha256": rec.cubin_sha256, "log": rec.log, "options": list(rec.options),
        "arch": rec.arch, "nvrtc_version": rec.nvrtc_version, "created": rec.created,
        "compile_seconds": rec.compile_seconds,
    }
    for name, spec in _OPTIONAL.items():
        value = getattr(rec, name)
        if value != _DEFAULTS[name]:
            header[name] = spec.dump(value)
    try:
        blob = json.dumps(header, sort_keys=True, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise CacheArgumentError(f"an entry's manifest must hold JSON values only ({exc})"
                                 ) from None
    body = _HEADER_LEN.pack(len(blob)) + blob + rec.cubin
    return ENTRY_MAGIC + hashlib.sha256(body).digest() + body


#: How much of a cell's first line a record keeps (a line of 10 000 characters is not listed whole).
FIRST_LINE_CHARS = 120


def made_here(source: str, folder: str) -> dict[str, str]:
    """The record's ``made`` field for a build of ``source`` made now in ``folder`` on this
    machine: the source's first line that is not blank (at most :data:`FIRST_LINE_CHARS`)."""
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    if len(first) > FIRST_LINE_CHARS:
        first = first[:FIRST_LINE_CHARS - 3] + "..."
    return {"first_line": first, "host": socket.gethostname(), "folder": folder}


def entry_digest(payload: bytes) -> bytes:
    """The checksum an encoded entry carries (not checked here: :func:`decode_entry` does)."""
    return bytes(payload[len(ENTRY_MAGIC):len(ENTRY_MAGIC) + _SUM])


def decode_entry(value: object, key: str | None = None) -> EntryRecord:
    """Read an entry record back, checking everything.

    Parameters
    ----------
    value : bytes
        What the cache stored.
    key : str, optional
        The key it was found under: the record must name the same one.

    :raises BadEntry: not an entry record, a newer format than this reader knows, an older one
        that does not name its key, a record that names another key, a header of the wrong
        shape, or a CUBIN whose size does not match the header.
    """
    header, cubin = _split(value)
    stored_key = _owner(header, key)
    for name, typ in _SHAPE.items():
        if not isinstance(header.get(name), typ) or isinstance(header.get(name), bool):
            raise BadEntry(f"the entry's header field {name!r} is missing or of the wrong type")
    optional = {}
    for name, spec in _OPTIONAL.items():
        if header.get(name) is None:
            continue
        if not spec.check(header[name]):
            raise BadEntry(f"the entry's {name!r} field is not {spec.what}")
        optional[name] = spec.load(header[name])
    if len(cubin) != header["cubin_size"]:
        raise BadEntry(f"the CUBIN is {len(cubin)} bytes, its header says "
                       f"{header['cubin_size']} (truncated or extended)")
    return EntryRecord(cubin=cubin, lowered=optional.pop("lowered", None), log=header["log"],
                       options=tuple(header["options"]), arch=header["arch"],
                       nvrtc_version=header["nvrtc_version"], created=float(header["created"]),
                       compile_seconds=float(header["compile_seconds"]), key=stored_key,
                       **optional)


def _split(value: object) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the CUBIN of a stored value whose checksum holds."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise BadEntry(f"the stored value is a {type(value).__name__}, not an entry record")
    data = bytes(value)
    if not data.startswith(ENTRY_MAGIC):
        raise BadEntry("the stored value does not start with an entry record's magic "
                       "(a bare CUBIN or foreign data)")
    head = len(ENTRY_MAGIC) + _SUM
    start = head + _HEADER_LEN.size
    if len(data) < start:
        raise BadEntry("the entry is truncated inside its header")
    # the one pass over the bytes: the checksum covers the header (key, CUBIN size and sha256)
    # and the CUBIN together, so a CUBIN that matches it matches its header's sha256 as well;
    # hashing the CUBIN again would check what encode_entry wrote from the same bytes
    if hashlib.sha256(data[head:]).digest() != data[len(ENTRY_MAGIC):head]:
        raise BadEntry("the entry's checksum does not match its contents (corrupted, truncated "
                       "or extended)")
    (hlen,) = _HEADER_LEN.unpack_from(data, head)
    try:
        header = json.loads(data[start:start + hlen].decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadEntry(f"the entry's header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise BadEntry("the entry's header is not a JSON object")
    return header, data[start + hlen:]


def _owner(header: dict[str, Any], key: str | None) -> str:
    """The key the header names, checked against the format and the key it was found under."""
    fmt = header.get("format")
    if isinstance(fmt, int) and fmt > ENTRY_FORMAT:
        raise BadEntry(f"the entry is of format {fmt}, newer than this reader's {ENTRY_FORMAT}",
                       MissKind.FORMAT)
    stored_key = header.get("key")
    if isinstance(fmt, int) and 1 < fmt < ENTRY_FORMAT:
        raise BadEntry(f"the entry is of format {fmt}, older than {ENTRY_FORMAT}: it was "
                       "written before variables' types were asked of the compiler",
                       MissKind.FORMAT)
    if not isinstance(stored_key, str) or not stored_key:
        # a record that does not say whose it is could be any entry's
        older = f"is of format {fmt}, older than {ENTRY_FORMAT}, and " \
            if isinstance(fmt, int) and fmt < ENTRY_FORMAT else ""
        raise BadEntry(f"the entry {older}does not name its key, so it cannot show it belongs "
                       "here", MissKind.FORMAT if older else MissKind.DAMAGED)
    if key is not None and stored_key != key:
        raise BadEntry(f"the entry names key {stored_key[:16]}..., not this one: its file was "
                       "copied or moved from another entry")
    return stored_key
