"""The on-disk CUBIN cache: entry records in a diskcache folder, never pickled.

An entry is one bytes value: a fixed magic, the sha256 of everything after it, the length of a
JSON header, the header (format, the key it was stored under, CUBIN size and sha256, the
lowered-name map, log, options, arch, NVRTC version, created time, an optional dependency
manifest), then the CUBIN. A value that unpickled would be code execution for whoever can write
the cache folder, so the diskcache ``Disk`` used here stores bytes only and refuses to unpickle.
Every read checks the magic, the checksum, the header's shape, the key (a record copied over
another entry's file is not that entry) and the CUBIN's sha256; a bad entry is deleted and
reported as a miss with its reason, so the caller rebuilds it.

Every value is its own file (``disk_min_file_size=0``): the database holds keys and bookkeeping
only, so a damaged CUBIN file costs one entry, never the database. Everything the cache creates
is owner-only (folders 700, files 600, whatever the umask), and everything it reads must still
be: the folder and ``cache.db`` are checked when the cache opens, and each value file and the
subfolders above it on every read, through a descriptor opened with ``O_NOFOLLOW | O_NONBLOCK``
(a symbolic link, a FIFO or a device in place of an entry is refused, never followed, waited on
or read without end).

Where the folder cannot be used (it cannot be created or written, the disk is full, the database
is damaged, or the folder or its database is writable by others or owned by someone else, which
would let them plant code), the cache warns once and goes on in memory for the rest of the
process. A size limit that would keep nothing is refused with the limit that works: caching
never turns itself off in silence.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import json
import math
import os
import queue
import sqlite3
import stat
import struct
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import DBNAME, DEFAULT_SETTINGS, METADATA, MODE_BINARY, MODE_PICKLE, MODE_RAW

from ..miss import Miss, MissKind
from ..errors import CacheArgumentError, CacheWarning, CudaMagicError
from ..files import FileRefused, TooLarge, file_kind, open_regular, read_fd
from ..units import size_text

__all__ = ["EntryRecord", "EntryInfo", "BadEntry", "encode_entry", "decode_entry", "KernelCache",
           "default_cache", "default_cache_dir", "DEFAULT_SIZE_LIMIT", "MIN_ENTRY_ROOM",
           "ENTRY_FORMAT", "parse_size"]

#: The layout of an entry record. 2: the record names its key; format-1 records (which do not)
#: are misses, rebuilt on first use. Independent of :data:`cudamagic.keys.KEY_VERSION`, which
#: changes what keys mean.
ENTRY_FORMAT = 2

_MAGIC = b"CUDAMAGIC-ENTRY\n"
_HEADER_LEN = struct.Struct("<I")
_SUM = 32  # sha256 of everything after it
DEFAULT_SIZE_LIMIT = 1 << 30  # 1 GiB
#: Room a size limit must leave beside the database for entries (a typical CUBIN fits many
#: times); a limit below the database plus this would evict every entry as it is stored.
MIN_ENTRY_ROOM = 1 << 20
_MAX_SIZE = (1 << 63) - 1  # SQLite's largest integer: diskcache keeps the limit in the database


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
        "rows": [[name expression, symbol, Python name, resolved by, demangled], ...]}``.
        Cache entries do not carry it: a hit resolves against the CUBIN itself.
    symbols : dict or None
        Every kernel symbol's text as the miss read it, so that a hit demangles nothing:
        ``{"demangler": "libstdc++", "placeholders": false, "texts": {symbol: text}}`` (an
        ``extern "C"`` kernel's text gives the parameter types its source declares, and a
        demangled name too long to keep is stored as that). None in older entries: demangled.
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
    manifest: dict[str, Any] | None = None
    kernels: dict[str, Any] | None = None
    symbols: dict[str, Any] | None = None

    @property
    def cubin_sha256(self) -> str:
        """The hex sha256 of the CUBIN."""
        return hashlib.sha256(self.cubin).hexdigest()


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
    if rec.lowered is not None:
        header["lowered"] = dict(rec.lowered)
    if rec.python_names is not None:
        header["python_names"] = dict(rec.python_names)
    if rec.manifest is not None:
        header["manifest"] = rec.manifest
    if rec.kernels is not None:
        header["kernels"] = rec.kernels
    if rec.symbols is not None:
        header["symbols"] = rec.symbols
    try:
        blob = json.dumps(header, sort_keys=True, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise CacheArgumentError(f"an entry's manifest must hold JSON values only ({exc})"
                                 ) from None
    body = _HEADER_LEN.pack(len(blob)) + blob + rec.cubin
    return _MAGIC + hashlib.sha256(body).digest() + body


_SHAPE = {"format": int, "cubin_size": int, "cubin_sha256": str, "log": str, "options": list,
          "arch": str, "nvrtc_version": str, "created": (int, float),
          "compile_seconds": (int, float)}


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
        shape, or a CUBIN whose size or sha256 does not match the header.
    """
    # long on purpose: every check in order, each with the message that says what was wrong
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
    if isinstance(fmt, int) and fmt > ENTRY_FORMAT:
        raise BadEntry(f"the entry is of format {fmt}, newer than this reader's {ENTRY_FORMAT}",
                       MissKind.FORMAT)
    stored_key = header.get("key")
    if not isinstance(stored_key, str) or not stored_key:
        # a record that does not say whose it is could be any entry's
        older = f"is of format {fmt}, older than {ENTRY_FORMAT}, and " \
            if isinstance(fmt, int) and fmt < ENTRY_FORMAT else ""
        raise BadEntry(f"the entry {older}does not name its key, so it cannot show it belongs "
                       "here", MissKind.FORMAT if older else MissKind.DAMAGED)
    if key is not None and stored_key != key:
        raise BadEntry(f"the entry names key {stored_key[:16]}..., not this one: its file was "
                       "copied or moved from another entry")
    for name, typ in _SHAPE.items():
        if not isinstance(header.get(name), typ) or isinstance(header.get(name), bool):
            raise BadEntry(f"the entry's header field {name!r} is missing or of the wrong type")
    for name in ("lowered", "python_names"):
        value = header.get(name)
        if value is not None and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            raise BadEntry(f"the entry's {name!r} field is not a map of strings")
    manifest = header.get("manifest")
    if manifest is not None and not isinstance(manifest, dict):
        raise BadEntry("the entry's 'manifest' field is not a JSON object")
    kernels = header.get("kernels")
    if kernels is not None and not _kernel_table(kernels):
        raise BadEntry("the entry's 'kernels' field is not a kernel table")
    symbols = header.get("symbols")
    if symbols is not None and not _symbol_table(symbols):
        raise BadEntry("the entry's 'symbols' field is not a table of symbol texts")
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
                       python_names=header.get("python_names"), key=stored_key,
                       manifest=manifest, kernels=kernels, symbols=symbols)


def _kernel_table(value: object) -> bool:
    """Whether a decoded ``kernels`` field has the shape :class:`EntryRecord` documents."""
    return (isinstance(value, dict) and isinstance(value.get("placeholders"), bool)
            and isinstance(value.get("rows"), list)
            and all(isinstance(r, list) and len(r) == 5 and all(isinstance(x, str) for x in r)
                    for r in value["rows"]))


def _symbol_table(value: object) -> bool:
    """Whether a decoded ``symbols`` field has the shape :class:`EntryRecord` documents."""
    texts = value.get("texts") if isinstance(value, dict) else None
    return (isinstance(value, dict) and isinstance(value.get("demangler"), str)
            and isinstance(value.get("placeholders"), bool) and isinstance(texts, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in texts.items()))


# --- trust: who may have written what the cache reads ------------------------------------------

_UID = os.getuid() if hasattr(os, "getuid") else None
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
def _distrust(st: os.stat_result, want=stat.S_ISREG) -> str | None:
    """Why what ``st`` describes must not be trusted with code (None when it can be)."""
    if not want(st.st_mode):
        return f"is {file_kind(st.st_mode)}"
    if _UID is not None and st.st_uid != _UID:
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & _OTHERS_WRITE:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class _Refused(Exception):
    """A stored value the cache will not read (the reason is the message).

    Not an ``OSError``: diskcache takes an ``OSError`` from ``Disk.fetch`` for a file deleted
    by another process and answers a plain miss, and a refusal must say why.
    """


_CREATE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))


class _PrivateDisk(diskcache.Disk):
    """A diskcache ``Disk`` that stores bytes only, never unpickles, and trusts only its own files.

    It writes folders 700 and files 600 whatever the umask, and reads a value file only when the
    file and every folder between it and the cache folder are owned by this user and writable by
    no one else, the file is a regular file (opened without following a link and without waiting
    on a FIFO), and it is no larger than ``max_read``.
    """

    #: Largest value file read (KernelCache sets its size limit: no entry it keeps is larger).
    max_read: int = DEFAULT_SIZE_LIMIT

    def store(self, value, read, key=diskcache.core.UNKNOWN):
        if not read and not isinstance(value, bytes):
            raise TypeError("cudamagic's cache stores bytes only")
        return super().store(value, read, key=key)

    def fetch(self, mode, filename, value, read):
        if mode == MODE_BINARY:
            fd, size = self._open_value(filename)
            if read:
                return os.fdopen(fd, "rb")
            return read_fd(fd, size)
        if mode == MODE_PICKLE:
            raise _Refused("the stored value was pickled; cudamagic never unpickles")
        if mode == MODE_RAW:
            # entries are always files (disk_min_file_size=0): a value inside the database was
            # written by someone else
            raise _Refused("the stored value is inside the database, where cudamagic never "
                           "stores an entry")
        raise _Refused("the stored value is text, not an entry record")

    def read_value(self, filename: str) -> bytes:
        """The bytes of a value file, checked as :meth:`fetch` checks them.

        :raises _Refused: the file or a folder above it is not trusted, or it is too large.
        :raises OSError: it cannot be read (gone, say).
        """
        return read_fd(*self._open_value(filename))

    def _open_value(self, filename: str) -> tuple[int, int]:
        """A descriptor of a trusted value file (see the class docstring), and its size."""
        parts = _inside(filename)
        if parts is None:
            raise _Refused(f"its file name {filename!r} points outside the cache folder")
        path = self._directory
        for part in parts[:-1]:
            # who may write a folder decides who may swap the files in it
            path = os.path.join(path, part)
            why = _distrust(os.lstat(path), stat.S_ISDIR)
            if why:
                raise _Refused(f"the folder {path} above its file {why}")
        path = os.path.join(path, parts[-1])
        try:
            return open_regular(path, max_size=self.max_read, trust=_distrust)
        except TooLarge as exc:
            raise _Refused(f"its file {path} is {exc.size} bytes, larger than the cache's size "
                           f"limit ({exc.limit} bytes)") from None
        except FileRefused as exc:
            raise _Refused(f"its file {path} {exc.reason}") from None

    def _write(self, full_path, iterator, mode, encoding=None):
        full_dir = os.path.dirname(full_path)
        for count in range(1, 11):
            try:
                self._private_dirs(full_dir)
                # 600 whatever the umask (a umask only takes bits away); O_EXCL as diskcache's "x"
                fd = os.open(full_path, _CREATE_FLAGS, 0o600)
            except OSError:
                # another process's Disk.remove may take the folder away between the two (the
                # retry is diskcache's own)
                if count == 10:
                    raise
                continue
            with open(fd, mode.replace("x", "w"), encoding=encoding) as writer:
                size = 0
                for chunk in iterator:
                    size += len(chunk)
                    writer.write(chunk)
                return size

    def _private_dirs(self, full_dir: str) -> None:
        """Create the folders down to ``full_dir`` owner-only; make older ones owner-only.

        :raises OSError: a folder on the way that is not ours or not a folder.
        """
        rel = os.path.relpath(full_dir, self._directory)
        path = self._directory
        for part in Path(rel).parts:
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o700)
                continue
            except FileExistsError:
                pass
            st = os.lstat(path)
            why = _distrust(st, stat.S_ISDIR)
            if why and not why.startswith("is writable"):
                raise OSError(errno.EPERM, f"the cache subfolder {path} {why}")
            if why:
                # made by an older cudamagic under a umask such as 002: its files are checked
                # one by one on read, and from now on no one else may add to it
                os.chmod(path, 0o700)

    def remove(self, file_path):
        # a file name comes from the database: never delete outside the cache folder on its word
        if _inside(file_path) is not None:
            super().remove(file_path)


def _inside(filename: object) -> list[str] | None:
    """The parts of a relative file name that stays inside its folder; None for any other."""
    if not isinstance(filename, str) or not filename or os.path.isabs(filename):
        return None
    parts = filename.split(os.sep)
    return None if ".." in parts or "" in parts else parts


# --- opening diskcache -------------------------------------------------------------------------

# diskcache's Cache.__init__ runs about 70 SQL statements on every open, most of them rewriting
# settings the database already holds (3-9 ms here, on every kernel restart's first cell). When
# the stored settings and schema are what the full open would leave, _Store sets the same
# attributes from one SELECT instead. It relies on Cache.__init__'s attribute names, hence the
# version check (and tests/test_cache_robustness.py compares both opens attribute by attribute);
# anything unexpected takes diskcache's own path.
_FAST_OPEN = diskcache.__version__.startswith("5.6.")
_SCHEMA = frozenset({"Settings", "Cache", "Cache_key_raw", "Cache_expire_time", "Cache_access_time",
                     "Settings_count_insert", "Settings_count_delete", "Settings_size_insert",
                     "Settings_size_update", "Settings_size_delete"})
_SETTINGS = {"statistics": 1, "disk_min_file_size": 0,
             "cull_limit": 1,  # evict one entry, the least recently used, per write
             "eviction_policy": "least-recently-used"}


class _Store(diskcache.Cache):
    """diskcache's ``Cache``, opened without rewriting settings it already holds."""

    def __init__(self, directory, timeout=60, disk=_PrivateDisk, **settings):
        if not (_FAST_OPEN and self._open_as_is(str(directory), timeout, disk, settings)):
            super().__init__(directory, timeout=timeout, disk=disk, **settings)

    def _open_as_is(self, directory: str, timeout: float, disk: type,
                    settings: dict[str, Any]) -> bool:
        """Open as ``Cache.__init__`` would when it would change nothing; False to let it."""
        self._directory = directory
        self._timeout = timeout
        self._local = threading.local()
        self._txn_id = None
        try:
            con = self._con  # diskcache's own: connects and sets the per-connection pragmas
            stored = dict(con.execute("SELECT key, value FROM Settings").fetchall())
            schema = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
            ((page_size,),) = con.execute("PRAGMA page_size").fetchall()
        except (sqlite3.Error, ValueError):
            self.close()
            return False
        sets = {**DEFAULT_SETTINGS, **stored, **settings}
        for name in METADATA:
            sets.pop(name, None)
        if (any(stored.get(k) != v for k, v in sets.items()) or not METADATA.keys() <= stored.keys()
                or sets.get("eviction_policy") != "least-recently-used"
                or not _SCHEMA <= schema or ("Cache_tag_rowid" in schema) != bool(sets["tag_index"])):
            self.close()
            return False
        for name, value in sets.items():
            setattr(self, name, value)
        for name in METADATA:
            setattr(self, name, stored[name])
        self._disk = disk(directory, **{k[5:]: v for k, v in sets.items() if k.startswith("disk_")})
        self._page_size = page_size
        return True

    def get_deferred(self, key: str) -> bytes | None:
        """The value for ``key`` (None if there is none), read without a write transaction.

        diskcache's ``get`` counts the hit and refreshes the entry's last-use time in a write
        transaction on every lookup (about 2 ms on an H200 host, more than the rest of a warm
        lookup); here those two writes are handed to :data:`_bookkeeper` and done right after,
        on its thread. Everything that reads them (stats, listing, eviction) waits for it.
        """
        db_key, raw = self._disk.put(key)
        rows = self._sql("SELECT rowid, mode, filename, value FROM Cache WHERE key = ? AND "
                         "raw = ? AND (expire_time IS NULL OR expire_time > ?)",
                         (db_key, raw, time.time())).fetchall()
        if not rows:
            _bookkeeper.later(self, "misses", None)
            return None
        ((rowid, mode, filename, db_value),) = rows
        try:
            value = self._disk.fetch(mode, filename, db_value, False)
        except OSError:  # deleted meanwhile (another process)
            _bookkeeper.later(self, "misses", None)
            return None
        _bookkeeper.later(self, "hits", rowid)
        return value

    def database_bytes(self) -> int:
        """Bytes the database itself takes (what a size limit must leave room for, and more)."""
        ((page_count,),) = self._sql("PRAGMA page_count").fetchall()
        return self._page_size * page_count


class _Bookkeeper:
    """Writes a lookup's hit or miss count and last-use time after the lookup, on a thread of
    its own (its own SQLite connection); :meth:`flush` waits until all are written."""

    def __init__(self) -> None:
        self._queue: "queue.Queue[tuple[Any, str, int | None, float]]" = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def later(self, store: Any, counter: str, rowid: int | None) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.Queue()  # a forked child inherits a queue nobody serves
                self._thread = threading.Thread(target=self._run, args=(self._queue,),
                                                name="cudamagic-cache-stats", daemon=True)
                self._thread.start()
            self._queue.put((store, counter, rowid, time.time()))

    @staticmethod
    def _run(work: "queue.Queue[tuple[Any, str, int | None, float]]") -> None:
        while True:
            store, counter, rowid, when = work.get()
            try:
                with store._transact(retry=True) as (sql, _):
                    sql(f"UPDATE Settings SET value = value + 1 WHERE key = '{counter}'")
                    if rowid is not None:
                        sql("UPDATE Cache SET access_time = ? WHERE rowid = ?", (when, rowid))
            except Exception:  # bookkeeping only: a closed or damaged database loses a count
                pass
            finally:
                work.task_done()

    def flush(self) -> None:
        """Wait until every lookup so far is written."""
        with self._lock:
            thread, work = self._thread, self._queue
        if thread is not None and thread.is_alive():
            work.join()


_bookkeeper = _Bookkeeper()
atexit.register(_bookkeeper.flush)


def _private_database(directory: Path) -> str | None:
    """Create ``cache.db`` owner-only if it is not there; why it is not trusted, or None.

    SQLite would create it (and its -wal and -shm files, which take the database's mode) 644 or,
    under umask 002, 664: writable by the group, who could then add rows whose values diskcache
    hands back from the database itself.
    """
    db = directory / DBNAME
    try:
        os.close(os.open(db, _CREATE_FLAGS, 0o600))  # an empty file is an empty database
    except FileExistsError:
        pass
    for path in (db, directory / f"{DBNAME}-wal", directory / f"{DBNAME}-shm"):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        why = _distrust(st)
        if why:
            return f"its database file {path} {why}"
    return None


# --- sizes -------------------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str | int | float) -> int:
    """``"512MB"``, ``"1 GiB"``, ``"1048576"`` -> bytes (binary units).

    :raises CacheArgumentError: (a ``ValueError``) not a size: no number, an unknown unit, a
        negative, infinite or NaN number, or more bytes than the cache's database can record.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise CacheArgumentError(f"{text!r} is not a size: give bytes or a number with a unit, "
                                 "such as 512MB or 1GiB")
    if isinstance(text, int):
        number, scale = float(text), 1
    else:
        t = str(text).strip().lower().replace(" ", "").replace("_", "")
        num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = t[len(num):]
        try:
            number, scale = float(num), _UNITS[unit]
        except (ValueError, KeyError):
            raise CacheArgumentError(f"{text!r} is not a size: give bytes or a number with a "
                                     "unit (B, KB, MB, GB, TB), such as 512MB or 1GiB") from None
    if math.isnan(number) or number < 0:
        raise CacheArgumentError(f"{text!r} is not a size: a size limit is a number of bytes, "
                                 "0 or more, such as 512MB")
    size = text if isinstance(text, int) else (int(number * scale) if math.isfinite(number)
                                               else _MAX_SIZE + 1)
    if size > _MAX_SIZE:
        raise CacheArgumentError(f"{text!r} is more than the largest size the cache can record "
                                 f"({_MAX_SIZE} bytes, 8 EiB); give a size such as 64GB")
    return size


def _short_of(limit: int, database: int) -> str | None:
    """Why ``limit`` leaves no room beside a database of ``database`` bytes, with what works."""
    need = database + MIN_ENTRY_ROOM
    if limit >= need:
        return None
    works = max(-(-need // (1 << 20)), 2)  # whole MiB, rounded up
    db = f"the cache's database alone takes {size_text(database)}, and " if database else ""
    return (f"a size limit of {limit} bytes leaves no room for entries: {db}every entry stored "
            f"would be evicted at once, so every build would compile again. Give at least "
            f"{works}MB (the default is 1GB); to not cache at all, use --no-cache "
            "(build(..., use_cache=False))")


def default_cache_dir() -> Path:
    """``$CUDAMAGIC_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudamagic``, else ``~/.cache/cudamagic``."""
    env = os.environ.get("CUDAMAGIC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cudamagic"


_warned: set[tuple[str, str]] = set()


def _warn_once(what: str, where: str, message: str) -> None:
    if (what, where) not in _warned:
        _warned.add((what, where))
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


def _folder(directory: object) -> Path:
    """The folder a ``cache``/``directory`` argument names.

    :raises CacheArgumentError: it names none.
    """
    if isinstance(directory, (str, os.PathLike)):
        path = os.fspath(directory)
        if isinstance(path, str) and path.strip():
            return Path(path).expanduser()
    raise CacheArgumentError(
        f"cache={directory!r} is not a cache: give a KernelCache, a diskcache.Cache, a folder "
        "(a str or pathlib.Path), or None for the default folder "
        "($CUDAMAGIC_CACHE_DIR or ~/.cache/cudamagic)")


class KernelCache:
    """Entry records by key, in a diskcache folder with least-recently-used eviction.

    Parameters
    ----------
    directory : str or path, optional
        Default :func:`default_cache_dir`.
    size_limit : int or str, optional
        Bytes kept before the least recently used entries go (default: what the folder keeps,
        1 GiB for a new one, or ``$CUDAMAGIC_CACHE_SIZE_LIMIT``, which takes sizes such as
        ``512MB``). A limit that would keep nothing (below the database plus
        :data:`MIN_ENTRY_ROOM`) is refused; one the folder kept from before is replaced by the
        default, with a warning.

    Attributes
    ----------
    directory : Path
    size_limit : int
    in_memory : str or None
        Why the cache is in memory instead of the folder (None while on disk).

    :raises CacheArgumentError: (a ``ValueError``) ``directory`` is not a folder name, or the
        size limit (given or from the environment) is not a size or would keep nothing; the
        message says what works.
    """

    def __init__(self, directory: str | os.PathLike | None = None,
                 size_limit: int | str | None = None) -> None:
        # absolute: diskcache joins value files to it, and a notebook may chdir later
        self.directory = (_folder(directory) if directory is not None
                          else default_cache_dir()).absolute()
        origin = "size_limit"
        if size_limit is None and os.environ.get("CUDAMAGIC_CACHE_SIZE_LIMIT") is not None:
            size_limit = os.environ["CUDAMAGIC_CACHE_SIZE_LIMIT"]
            origin = "$CUDAMAGIC_CACHE_SIZE_LIMIT"
        limit = None if size_limit is None else _checked_size(size_limit, origin, 0)
        self.size_limit = DEFAULT_SIZE_LIMIT if limit is None else limit
        self.in_memory: str | None = None
        self._dc: Any = None
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            why = _untrusted(self.directory) or _private_database(self.directory)
            if why:
                self._fall_back("untrusted", f"the cache folder {self.directory} is not trusted: "
                                f"{why}; a CUBIN from there could be anyone's code. Fix its "
                                "owner or mode (chmod 700 the folder, 600 its files) or "
                                + ("point CUDAMAGIC_CACHE_DIR (set now) at a folder of your own"
                                   if os.environ.get("CUDAMAGIC_CACHE_DIR")
                                   else "set CUDAMAGIC_CACHE_DIR to a folder of your own"))
                return
            # the limit is not passed to diskcache: it would store it before it can be checked
            self._dc = _Store(str(self.directory), **_SETTINGS)
            self._settle_limit(limit, origin)
        except CudaMagicError:
            self.close()
            raise
        except _STORE_ERRORS as exc:
            self._fall_back("unusable", f"the cache folder {self.directory} cannot be used "
                                        f"({exc})")

    def _settle_limit(self, limit: int | None, origin: str) -> None:
        """Take ``limit`` (None: the folder's own), refusing one that would keep nothing."""
        database = self._dc.database_bytes()
        stored = self._dc.size_limit
        if limit is None:
            limit = stored
            why = _short_of(limit, database)
            if why:
                # kept by the folder from before (an older cudamagic, plain diskcache): warn and
                # cache, rather than refuse and leave %cuda_cache limit no cache to fix it with
                _warn_once("limit", str(self.directory),
                           f"cudamagic: the size limit stored in the cache folder "
                           f"{self.directory}: {why}. Using the default "
                           f"({size_text(DEFAULT_SIZE_LIMIT)}) instead")
                limit = max(DEFAULT_SIZE_LIMIT, database + MIN_ENTRY_ROOM)
        else:
            why = _short_of(limit, database)
            if why:
                raise CacheArgumentError(f"{origin}: {why}")
        if limit != stored:
            self._dc.reset("size_limit", limit)
        self.size_limit = limit
        self._dc.disk.max_read = limit

    def _fall_back(self, what: str, why: str) -> None:
        _warn_once(what, str(self.directory), f"cudamagic: {why}; compiled kernels are cached "
                                              "in memory for this session only")
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
        """A KernelCache from what :func:`cudamagic.build` accepts as ``cache``.

        A ``diskcache.Cache`` is reopened on its folder with cudamagic's own ``Disk`` (the
        caller's would unpickle, and would read files without the checks above) and with the
        caller's size limit; the folder then keeps cudamagic's storage settings (bytes only,
        one file per entry, least recently used out first). None is :func:`default_cache`.

        :raises CacheArgumentError: (a ``ValueError``) anything else, with what it accepts; or
            the diskcache's size limit would keep nothing.
        """
        if isinstance(cache, KernelCache):
            return cache
        if cache is None:
            return default_cache()
        if isinstance(cache, diskcache.Cache):
            return cls(cache.directory, size_limit=int(cache.size_limit))
        return cls(_folder(cache))

    def get(self, key: str) -> tuple[EntryRecord | None, Miss | None]:
        """The entry for ``key``, or ``(None, miss)`` (``miss`` None: there is none).

        A bad entry (damaged, another key's, an older format, an untrusted or special file) is
        deleted here, or left where it cannot be, and ``miss`` says so; the caller rebuilds.
        """
        try:
            value = (self._dc.get_deferred(key) if isinstance(self._dc, _Store)
                     else self._dc.get(key, default=None, retry=True))
        except _Refused as exc:
            return None, Miss(MissKind.UNTRUSTED, f"{exc} ({self._gone(key)})")
        except _STORE_ERRORS as exc:
            self._fall_back("read", f"reading the cache folder {self.directory} failed ({exc})")
            return None, Miss(MissKind.UNREADABLE, "the cache folder could not be read")
        if value is None:
            return None, None
        try:
            return decode_entry(value, key), None
        except BadEntry as exc:
            return None, Miss(exc.kind, f"{exc} ({self._gone(key)})")

    def _gone(self, key: str) -> str:
        return "deleted" if self.delete(key) else "could not be deleted"

    def put(self, key: str, record: EntryRecord) -> None:
        """Store an entry under ``key`` (replacing any), naming ``key`` inside it.

        Warns once when the entry does not fit the size limit beside the database (it was
        evicted as soon as it was stored), with the limit that would keep it.

        :raises CacheArgumentError: the record names another key.
        """
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        if record.key != key:
            if record.key:
                raise CacheArgumentError(f"a record naming key {record.key[:16]}... cannot be "
                                         f"stored under {key[:16]}...")
            record = replace(record, key=key)
        value = encode_entry(record)
        try:
            self._dc.set(key, value, retry=True)
            kept = key in self._dc
        except _STORE_ERRORS as exc:
            self._fall_back("write", f"writing to the cache folder {self.directory} failed ({exc})")
            self._dc.set(key, value)
            return
        if not kept:
            need = -(-(len(value) + self._database_bytes() + MIN_ENTRY_ROOM) // (1 << 20))
            _warn_once("fit", str(self.directory),
                       f"cudamagic: a {size_text(len(value))} entry does not fit the cache's size "
                       f"limit ({size_text(self.size_limit)}) and was evicted as soon as it was "
                       "stored, so "
                       f"this build will compile every time. Raise the limit to at least "
                       f"{need}MB (%cuda_cache limit {need}MB or $CUDAMAGIC_CACHE_SIZE_LIMIT)")

    def delete(self, key: str) -> bool:
        """Remove an entry; True if there was one."""
        _bookkeeper.flush()  # the lookups' counts and last-use times first
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

    def _database_bytes(self) -> int:
        return 0 if isinstance(self._dc, _MemoryStore) else self._dc.database_bytes()

    def set_size_limit(self, size_limit: int | str) -> None:
        """Change the size limit (kept in the folder's settings); evicts down to it now.

        :raises CacheArgumentError: (a ``ValueError``) not a size, or a limit that would keep
            nothing (below the database plus :data:`MIN_ENTRY_ROOM`); the message says what
            limit works.
        """
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        limit = _checked_size(size_limit, "", self._database_bytes())
        self.size_limit = limit
        if isinstance(self._dc, _MemoryStore):
            self._dc.size_limit = limit
        else:
            self._dc.reset("size_limit", limit)
            self._dc.disk.max_read = limit
            self._dc.cull()

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        return self._dc.clear(retry=True)

    def stats(self) -> tuple[int, int]:
        """``(hits, misses)`` of lookups, counted in the folder across sessions."""
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        if isinstance(self._dc, _MemoryStore):
            return self._dc.hits, self._dc.misses
        return self._dc.stats()

    def entries(self) -> list["EntryInfo"]:
        """Every entry, newest first, read without touching its last-used time."""
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        infos = []
        if isinstance(self._dc, _MemoryStore):
            rows = [(k, None, len(v), None, None, v) for k, v in self._dc._data.items()]
        else:
            rows = [(*r, None) for r in self._rows()]
        for key, filename, size, stored, used, value in rows:
            if value is None:
                try:  # checked like a lookup: a FIFO here would hang %cuda_cache list
                    value = self._dc.disk.read_value(filename) if filename else b""
                except (_Refused, OSError):
                    value = b""
            try:
                rec = decode_entry(value, key if isinstance(key, str) else None)
                exprs, created, ok = tuple(rec.lowered or ()), rec.created, True
            except BadEntry:
                exprs, created, ok = (), stored, False
            infos.append(EntryInfo(key, size, created, used, exprs, ok))
        return sorted(infos, key=lambda e: e.created or 0, reverse=True)

    def _rows(self) -> list[tuple]:
        # diskcache keeps its bookkeeping in the "Cache" table of cache.db; read it directly so
        # that listing does not count as use (a get would refresh every entry's LRU time)
        con = sqlite3.connect(f"file:{self.directory / DBNAME}?mode=ro", uri=True)
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
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        if self._dc is not None:
            self._dc.close()

    @property
    def raw(self) -> Any:
        """The underlying diskcache (or the in-memory store after a fall-back).

        Tests write foreign values through it (``cache.raw.set(key, b"...")``).
        """
        _bookkeeper.flush()  # the lookups' counts and last-use times first
        return self._dc

    def __repr__(self) -> str:
        return f"KernelCache({self.location!r})"


def _checked_size(size_limit: int | str, origin: str, database: int) -> int:
    """A size limit that keeps something; ``origin`` (where it came from) leads any message.

    :raises CacheArgumentError: not a size, or below ``database`` plus MIN_ENTRY_ROOM.
    """
    try:
        limit = parse_size(size_limit)
        why = _short_of(limit, database)
    except CacheArgumentError as exc:
        why = str(exc)
    if why:
        raise CacheArgumentError(f"{origin}: {why}" if origin else why) from None
    return limit


def _untrusted(directory: Path) -> str | None:
    """Why the cache folder must not be trusted with code (None when it can be).

    The folder itself is followed if it is a link (``~/.cache`` on another disk is common);
    what is inside it is not.
    """
    why = _distrust(directory.stat(), stat.S_ISDIR)
    return f"it {why}" if why else None


_default: KernelCache | None = None
_default_spec: tuple[str | None, str | None] | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache in :func:`default_cache_dir`, opened once.

    Reopened when :func:`default_cache_dir` names another folder (``$CUDAMAGIC_CACHE_DIR``
    changed).

    :raises CacheArgumentError: ``$CUDAMAGIC_CACHE_SIZE_LIMIT`` is not a size that keeps
        something (see :class:`KernelCache`).
    """
    global _default, _default_spec
    # the folder as the environment names it: a relative $CUDAMAGIC_CACHE_DIR is taken from the
    # current folder once, when the cache opens, and a later chdir does not move the cache
    spec = (os.environ.get("CUDAMAGIC_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"))
    with _default_lock:
        if _default is None or _default_spec != spec:
            _default, _default_spec = KernelCache(), spec
        return _default
