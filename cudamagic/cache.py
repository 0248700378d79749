"""The on-disk CUBIN cache: entry records in a diskcache folder, never pickled.

An entry is one bytes value: a fixed magic, the sha256 of everything after it, the length of a
JSON header, the header (format version, CUBIN size and sha256, the lowered-name map, log, options,
arch, NVRTC version, created time), then the CUBIN. A value that unpickled would be code execution
for whoever can write the cache folder, so the diskcache ``Disk`` used here stores bytes only and
refuses to unpickle. Every read checks the magic, the checksum, the header's shape and the CUBIN's
sha256; a bad entry is deleted and reported as a miss with its reason, so the caller rebuilds it.

Every value is its own file (``disk_min_file_size=0``): the database holds keys and bookkeeping
only, so a damaged CUBIN file costs one entry, never the database.

Where the folder cannot be used (it cannot be created or written, the disk is full, the database
is damaged, or it is writable by others or owned by someone else, which would let them plant
code), the cache warns once and goes on in memory for the rest of the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import struct
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import diskcache

from .errors import CacheWarning
from .keys import FORMAT_VERSION

__all__ = ["EntryRecord", "EntryInfo", "BadEntry", "encode_entry", "decode_entry", "KernelCache",
           "default_cache_dir", "DEFAULT_SIZE_LIMIT", "parse_size"]

_MAGIC = b"CUDAMAGIC-ENTRY\n"
_HEADER_LEN = struct.Struct("<I")
_SUM = 32  # sha256 of everything after it
DEFAULT_SIZE_LIMIT = 1 << 30  # 1 GiB


class BadEntry(Exception):
    """A stored value that is not a usable entry record (the reason is the message)."""


@dataclass(frozen=True)
class EntryRecord:
    """One cached build.

    Attributes
    ----------
    cubin : bytes
    lowered : dict of str to str or None
        Name expression -> symbol as NVRTC lowered it; None in entries that lack it (an older
        format, or a CUBIN from elsewhere): those are resolved by demangling alone.
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

    @property
    def cubin_sha256(self) -> str:
        """The hex sha256 of the CUBIN."""
        return hashlib.sha256(self.cubin).hexdigest()


def encode_entry(rec: EntryRecord, format_version: int = FORMAT_VERSION) -> bytes:
    """The bytes stored for an entry."""
    header: dict[str, Any] = {
        "format": format_version, "cubin_size": len(rec.cubin), "cubin_sha256": rec.cubin_sha256,
        "log": rec.log, "options": list(rec.options), "arch": rec.arch,
        "nvrtc_version": rec.nvrtc_version, "created": rec.created,
        "compile_seconds": rec.compile_seconds,
    }
    if rec.lowered is not None:
        header["lowered"] = dict(rec.lowered)
    if rec.python_names is not None:
        header["python_names"] = dict(rec.python_names)
    blob = json.dumps(header, sort_keys=True).encode()
    body = _HEADER_LEN.pack(len(blob)) + blob + rec.cubin
    return _MAGIC + hashlib.sha256(body).digest() + body


_SHAPE = {"format": int, "cubin_size": int, "cubin_sha256": str, "log": str, "options": list,
          "arch": str, "nvrtc_version": str, "created": (int, float),
          "compile_seconds": (int, float)}


def decode_entry(value: object) -> EntryRecord:
    """Read an entry record back, checking everything.

    :raises BadEntry: not an entry record, a newer format than this reader knows, a header of
        the wrong shape, or a CUBIN whose size or sha256 does not match the header.
    """
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise BadEntry(f"the stored value is a {type(value).__name__}, not an entry record")
    data = bytes(value)
    if not data.startswith(_MAGIC):
        raise BadEntry("the stored value does not start with an entry record's magic "
                       "(a bare CUBIN or foreign data)")
    head = len(_MAGIC) + _SUM
    start = head + _HEADER_LEN.size
    if len(data) < start:
        raise BadEntry("the entry is truncated inside its header")
    if hashlib.sha256(data[head:]).digest() != data[len(_MAGIC):head]:
        raise BadEntry("the entry's checksum does not match its contents (corrupted, truncated "
                       "or extended)")
    (hlen,) = _HEADER_LEN.unpack_from(data, head)
    try:
        header = json.loads(data[start:start + hlen].decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadEntry(f"the entry's header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise BadEntry("the entry's header is not a JSON object")
    fmt = header.get("format")
    if isinstance(fmt, int) and fmt > FORMAT_VERSION:
        raise BadEntry(f"the entry is of format {fmt}, newer than this reader's "
                       f"{FORMAT_VERSION}")
    for name, typ in _SHAPE.items():
        if not isinstance(header.get(name), typ) or isinstance(header.get(name), bool):
            raise BadEntry(f"the entry's header field {name!r} is missing or of the wrong type")
    for name in ("lowered", "python_names"):
        value = header.get(name)
        if value is not None and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            raise BadEntry(f"the entry's {name!r} field is not a map of strings")
    cubin = data[start + hlen:]
    if len(cubin) != header["cubin_size"]:
        raise BadEntry(f"the CUBIN is {len(cubin)} bytes, its header says "
                       f"{header['cubin_size']} (truncated or extended)")
    if hashlib.sha256(cubin).hexdigest() != header["cubin_sha256"]:
        raise BadEntry("the CUBIN's sha256 does not match its header (corrupted)")
    return EntryRecord(cubin=cubin, lowered=header.get("lowered"), log=header["log"],
                       options=tuple(header["options"]), arch=header["arch"],
                       nvrtc_version=header["nvrtc_version"], created=float(header["created"]),
                       compile_seconds=float(header["compile_seconds"]),
                       python_names=header.get("python_names"))


class _RefusedPickle(Exception):
    pass


class _BytesDisk(diskcache.Disk):
    """A diskcache ``Disk`` that stores bytes only and never unpickles."""

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if not read and not isinstance(value, bytes):
            raise TypeError("cudamagic's cache stores bytes only")
        return super().store(value, read, key=key)

    def fetch(self, mode, filename, value, read):
        if mode == diskcache.core.MODE_PICKLE:
            raise _RefusedPickle()
        return super().fetch(mode, filename, value, read)


def default_cache_dir() -> Path:
    """``$CUDAMAGIC_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudamagic``, else ``~/.cache/cudamagic``."""
    env = os.environ.get("CUDAMAGIC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cudamagic"


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str | int) -> int:
    """``"512MB"``, ``"1 GiB"``, ``"1048576"`` -> bytes (binary units).

    :raises ValueError: not a size.
    """
    if isinstance(text, int):
        return text
    t = str(text).strip().lower().replace(" ", "")
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    if not num or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size such as 512MB or 1GiB")
    return int(float(num) * _UNITS[unit])


def _untrusted(directory: Path) -> str | None:
    """Why a folder must not be trusted with code (None when it can be)."""
    st = directory.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, CacheWarning, stacklevel=4)


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry as ``%cuda_cache list`` shows it."""

    key: str
    size: int
    created: float | None
    last_used: float | None
    name_expressions: tuple[str, ...]
    readable: bool


class _MemoryStore:
    """What the cache falls back to: least-recently-used values in a dict, for this process."""

    def __init__(self, size_limit: int) -> None:
        self.size_limit = size_limit
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: str, default=None, retry: bool = True):
        if key not in self._data:
            self.misses += 1
            return default
        self.hits += 1
        self._data.move_to_end(key)
        return self._data[key]

    def set(self, key: str, value: bytes, retry: bool = True) -> bool:
        if not isinstance(value, bytes):
            raise TypeError("cudamagic's cache stores bytes only")
        self._data[key] = value
        self._data.move_to_end(key)
        while self.volume() > self.size_limit and len(self._data) > 1:
            self._data.popitem(last=False)
        return True

    def delete(self, key: str, retry: bool = True) -> bool:
        return self._data.pop(key, None) is not None

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def volume(self) -> int:
        return sum(len(v) for v in self._data.values())

    def clear(self, retry: bool = True) -> int:
        n = len(self._data)
        self._data.clear()
        return n

    def close(self) -> None:
        pass


# What a damaged, full or unwritable folder raises from inside diskcache and sqlite (a damaged
# database also surfaces as UnicodeDecodeError or ValueError while reading its settings).
_STORE_ERRORS = (OSError, sqlite3.Error, diskcache.Timeout, UnicodeError, ValueError, KeyError)


class KernelCache:
    """Entry records by key, in a diskcache folder with least-recently-used eviction.

    Parameters
    ----------
    directory : path, optional
        Default :func:`default_cache_dir`.
    size_limit : int or str, optional
        Bytes kept before the least recently used entries go (default 1 GiB, or
        ``$CUDAMAGIC_CACHE_SIZE_LIMIT``, which takes sizes such as ``512MB``).

    Attributes
    ----------
    directory : Path
    in_memory : str or None
        Why the cache is in memory instead of the folder (None while on disk).
    """

    def __init__(self, directory: str | os.PathLike | None = None,
                 size_limit: int | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        if size_limit is None:
            size_limit = os.environ.get("CUDAMAGIC_CACHE_SIZE_LIMIT")
        # without an explicit limit the folder keeps the one set last (%cuda_cache limit)
        settings = {} if size_limit is None else {"size_limit": parse_size(size_limit)}
        self.size_limit = settings.get("size_limit", DEFAULT_SIZE_LIMIT)
        self.in_memory: str | None = None
        self._dc: Any = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            why = _untrusted(self.directory)
            if why:
                self._fall_back(f"the cache folder {self.directory} is not trusted: {why}; "
                                "a CUBIN from there could be anyone's code. Fix its owner or mode "
                                "(chmod 700) or set CUDAMAGIC_CACHE_DIR")
                return
            self._dc = diskcache.Cache(str(self.directory), disk=_BytesDisk, statistics=1,
                                       disk_min_file_size=0,
                                       cull_limit=1,  # evict one entry, the least recently used, per write
                                       eviction_policy="least-recently-used", **settings)
            self.size_limit = int(self._dc.size_limit)
        except _STORE_ERRORS as exc:
            self._fall_back(f"the cache folder {self.directory} cannot be used ({exc})")

    def _fall_back(self, why: str) -> None:
        _warn_once(str(self.directory), f"cudamagic: {why}; compiled kernels are cached in "
                                        "memory for this session only")
        self.in_memory = why
        if self._dc is not None:
            try:
                self._dc.close()
            except _STORE_ERRORS:
                pass
        self._dc = _MemoryStore(self.size_limit)

    @property
    def location(self) -> str:
        """The folder, or ``"memory (<why>)"``."""
        return f"memory ({self.in_memory})" if self.in_memory else str(self.directory)

    @classmethod
    def wrap(cls, cache: "KernelCache | diskcache.Cache | str | os.PathLike | None"
             ) -> "KernelCache":
        """A KernelCache from what :func:`cudamagic.build` accepts as ``cache``."""
        if isinstance(cache, KernelCache):
            return cache
        if isinstance(cache, diskcache.Cache):
            return cls(cache.directory)
        return cls(cache)

    def get(self, key: str) -> tuple[EntryRecord | None, str | None]:
        """The entry for ``key``, or ``(None, why)``; a bad entry is deleted here."""
        try:
            value = self._dc.get(key, default=None, retry=True)
        except _RefusedPickle:
            self.delete(key)
            return None, "the stored value was pickled; cudamagic never unpickles (deleted)"
        except _STORE_ERRORS as exc:
            self._fall_back(f"reading the cache folder {self.directory} failed ({exc})")
            return None, "the cache folder could not be read"
        if value is None:
            return None, None
        try:
            return decode_entry(value), None
        except BadEntry as exc:
            self.delete(key)
            return None, f"{exc} (deleted)"

    def put(self, key: str, record: EntryRecord) -> None:
        """Store an entry (replacing any under the same key)."""
        self.put_raw(key, encode_entry(record))

    def put_raw(self, key: str, value: bytes) -> None:
        """Store raw bytes under a key (tests use it to plant foreign values)."""
        try:
            self._dc.set(key, value, retry=True)
        except _STORE_ERRORS as exc:
            self._fall_back(f"writing to the cache folder {self.directory} failed ({exc})")
            self._dc.set(key, value)

    def delete(self, key: str) -> bool:
        """Remove an entry; True if there was one."""
        try:
            return bool(self._dc.delete(key, retry=True))
        except _STORE_ERRORS:
            return False

    def __contains__(self, key: str) -> bool:
        return key in self._dc

    def __len__(self) -> int:
        return len(self._dc)

    def keys(self) -> Iterator[str]:
        """Every key."""
        return iter(self._dc)

    def volume(self) -> int:
        """Bytes the cache holds (on disk: the folder, database included)."""
        return self._dc.volume()

    def set_size_limit(self, size_limit: int | str) -> None:
        """Change the size limit (kept in the folder's settings); evicts down to it now."""
        self.size_limit = parse_size(size_limit)
        if isinstance(self._dc, _MemoryStore):
            self._dc.size_limit = self.size_limit
        else:
            self._dc.reset("size_limit", self.size_limit)
            self._dc.cull()

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        return self._dc.clear(retry=True)

    def stats(self) -> tuple[int, int]:
        """``(hits, misses)`` of lookups, counted in the folder across sessions."""
        if isinstance(self._dc, _MemoryStore):
            return self._dc.hits, self._dc.misses
        return self._dc.stats()

    def entries(self) -> list["EntryInfo"]:
        """Every entry, newest first, read without touching its last-used time."""
        infos = []
        if isinstance(self._dc, _MemoryStore):
            rows = [(k, None, len(v), None, None, v) for k, v in self._dc._data.items()]
        else:
            rows = [(*r, None) for r in self._rows()]
        for key, filename, size, stored, used, value in rows:
            if value is None:
                try:
                    value = (self.directory / filename).read_bytes() if filename else b""
                except OSError:
                    value = b""
            try:
                rec = decode_entry(value)
                exprs, created, ok = tuple(rec.lowered or ()), rec.created, True
            except BadEntry:
                exprs, created, ok = (), stored, False
            infos.append(EntryInfo(key, size, created, used, exprs, ok))
        return sorted(infos, key=lambda e: e.created or 0, reverse=True)

    def _rows(self) -> list[tuple]:
        # diskcache keeps its bookkeeping in the "Cache" table of cache.db; read it directly so
        # that listing does not count as use (a get would refresh every entry's LRU time)
        con = sqlite3.connect(f"file:{self.directory / 'cache.db'}?mode=ro", uri=True)
        try:
            return con.execute("SELECT key, filename, size, store_time, access_time "
                               "FROM Cache").fetchall()
        finally:
            con.close()

    def evict_older_than(self, seconds: float) -> int:
        """Remove the entries last used more than ``seconds`` ago; returns how many."""
        cutoff = time.time() - seconds
        old = [e.key for e in self.entries() if (e.last_used or e.created or 0) < cutoff]
        return sum(self.delete(k) for k in old)

    def close(self) -> None:
        """Close the database connection (it reopens on next use)."""
        self._dc.close()

    @property
    def raw(self) -> Any:
        """The underlying diskcache (or the in-memory store after a fall-back)."""
        return self._dc

    def __repr__(self) -> str:
        return f"KernelCache({self.location!r})"
