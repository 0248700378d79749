"""The on-disk CUBIN cache: entry records in a diskcache folder, never pickled.

An entry is one bytes value: a fixed magic, the length of a JSON header, the header (format
version, CUBIN size and sha256, the lowered-name map, log, options, arch, NVRTC version, created
time), then the CUBIN. A value that unpickled would be code execution for whoever can write the
cache folder, so the diskcache ``Disk`` used here stores bytes only and refuses to unpickle.
Every read checks the magic, the header's shape and the CUBIN's sha256; a bad entry is deleted
and reported as a miss with its reason, so the caller rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import diskcache

from .errors import CacheError
from .keys import FORMAT_VERSION

__all__ = ["EntryRecord", "BadEntry", "encode_entry", "decode_entry", "KernelCache",
           "default_cache_dir", "DEFAULT_SIZE_LIMIT"]

_MAGIC = b"CUDAMAGIC-ENTRY\n"
_HEADER_LEN = struct.Struct("<I")
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
    """

    cubin: bytes
    lowered: dict[str, str] | None
    log: str = ""
    options: tuple[str, ...] = ()
    arch: str = ""
    nvrtc_version: str = ""
    created: float = field(default_factory=time.time)
    compile_seconds: float = 0.0

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
    blob = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + _HEADER_LEN.pack(len(blob)) + blob + rec.cubin


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
    start = len(_MAGIC) + _HEADER_LEN.size
    if len(data) < start:
        raise BadEntry("the entry is truncated inside its header")
    (hlen,) = _HEADER_LEN.unpack_from(data, len(_MAGIC))
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
    lowered = header.get("lowered")
    if lowered is not None and not (isinstance(lowered, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in lowered.items())):
        raise BadEntry("the entry's lowered-name map is not a map of strings")
    cubin = data[start + hlen:]
    if len(cubin) != header["cubin_size"]:
        raise BadEntry(f"the CUBIN is {len(cubin)} bytes, its header says "
                       f"{header['cubin_size']} (truncated or extended)")
    if hashlib.sha256(cubin).hexdigest() != header["cubin_sha256"]:
        raise BadEntry("the CUBIN's sha256 does not match its header (corrupted)")
    return EntryRecord(cubin=cubin, lowered=lowered, log=header["log"],
                       options=tuple(header["options"]), arch=header["arch"],
                       nvrtc_version=header["nvrtc_version"], created=float(header["created"]),
                       compile_seconds=float(header["compile_seconds"]))


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


class KernelCache:
    """Entry records by key, in a diskcache folder with least-recently-used eviction.

    Parameters
    ----------
    directory : path, optional
        Default :func:`default_cache_dir`.
    size_limit : int, optional
        Bytes kept before the least recently used entries go (default 1 GiB, or
        ``$CUDAMAGIC_CACHE_SIZE_LIMIT``).
    """

    def __init__(self, directory: str | os.PathLike | None = None,
                 size_limit: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        if size_limit is None:
            size_limit = int(os.environ.get("CUDAMAGIC_CACHE_SIZE_LIMIT", DEFAULT_SIZE_LIMIT))
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dc = diskcache.Cache(str(self.directory), disk=_BytesDisk,
                                       size_limit=size_limit,
                                       eviction_policy="least-recently-used")
        except (OSError, diskcache.core.sqlite3.Error) as exc:
            raise CacheError(f"cannot open the cache folder {self.directory}: {exc}") from exc

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
        if value is None:
            return None, None
        try:
            return decode_entry(value), None
        except BadEntry as exc:
            self.delete(key)
            return None, f"{exc} (deleted)"

    def put(self, key: str, record: EntryRecord) -> None:
        """Store an entry (replacing any under the same key)."""
        self._dc.set(key, encode_entry(record), retry=True)

    def put_raw(self, key: str, value: bytes) -> None:
        """Store raw bytes under a key (tests use it to plant foreign values)."""
        self._dc.set(key, value, retry=True)

    def delete(self, key: str) -> bool:
        """Remove an entry; True if there was one."""
        return bool(self._dc.delete(key, retry=True))

    def __contains__(self, key: str) -> bool:
        return key in self._dc

    def __len__(self) -> int:
        return len(self._dc)

    def keys(self) -> Iterator[str]:
        """Every key, oldest first."""
        return iter(self._dc)

    def volume(self) -> int:
        """Bytes the cache folder holds."""
        return self._dc.volume()

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        return self._dc.clear(retry=True)

    def close(self) -> None:
        """Close the database connection (it reopens on next use)."""
        self._dc.close()

    @property
    def raw(self) -> diskcache.Cache:
        """The underlying diskcache (for cache tools and tests)."""
        return self._dc

    def __repr__(self) -> str:
        return f"KernelCache({str(self.directory)!r})"

