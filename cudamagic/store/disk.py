"""The disk store: entry bytes in a diskcache folder that only its owner can write.

The diskcache ``Disk`` used here stores bytes only and refuses to unpickle (a value that
unpickled would be code execution for whoever can write the folder). Every value is its own file
(``disk_min_file_size=0``): the database holds keys and bookkeeping only, so a damaged value file
costs one entry, never the database. Everything the store creates is owner-only (folders 700,
files 600, whatever the umask), and everything it reads must still be: the folder and
``cache.db`` are checked when the store opens, and each value file and the subfolders above it
on every read (:func:`cudamagic.core.files.open_regular`: a symbolic link, a FIFO or a device in place
of an entry is refused, never followed, waited on or read without end).

Every SQLite call holds the process's SQLite lock (:mod:`cudamagic.store.state`: a fork waits
for it), and is bounded: diskcache's busy timeout, then a bounded number of retries. A lookup's
hit count and last-use time are written right after it by the :class:`Bookkeeper`, on its own
thread and its own connection per folder; its queue coalesces by entry and is bounded.

A writer killed between writing a value file and recording it in the database (``kill -9``
during a put) leaves the file behind; :meth:`DiskStore.reclaim` removes such files once they are
older than :data:`ORPHAN_GRACE_S` (a put in flight in another process is younger), in the
background after the first open of a folder in a process, and on every eviction.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
from diskcache.core import DBNAME, DEFAULT_SETTINGS, METADATA, MODE_BINARY, MODE_PICKLE, MODE_RAW

from ..core.files import FileRefused, TooLarge, file_kind, open_regular, read_fd
from .base import Refused, Store, StoreBusy, StoredEntry, StoreUnavailable
from .connections import ThreadConnections, close_orphans
from .limits import DEFAULT_SIZE_LIMIT
from .state import state

__all__ = ["DiskStore", "Bookkeeper", "bookkeeper", "untrusted_folder", "ORPHAN_GRACE_S",
           "EXIT_FLUSH_S", "CACHE_WAIT_S", "BUSY_S"]

#: How long one cache call (a lookup, a store, a delete) waits while another process holds
#: the database's write lock (``BEGIN IMMEDIATE`` from any SQLite client); after that the call
#: does not happen (:class:`~cudamagic.store.base.StoreBusy`): a build compiles, or serves
#: without storing, and says so.
CACHE_WAIT_S = 2.0

#: SQLite's busy timeout for one statement. The process's SQLite lock is held across it, and a
#: fork waits for that lock: a busy database is waited on in these short steps with the lock
#: released between them, so a fork never waits on another process for longer than one step.
BUSY_S = 0.05

#: How long the interpreter's exit waits for the lookups' bookkeeping to be written.
EXIT_FLUSH_S = 2.0

#: A value file the database does not know is reclaimed once it is older than this: a put in
#: flight writes its file first and records it right after (diskcache's own order).
ORPHAN_GRACE_S = 3600.0

# --- trust: who may have written what the cache reads ------------------------------------------

_UID = os.getuid() if hasattr(os, "getuid") else None
# Group write is refused as others' is: a member of the group could plant a CUBIN, which runs
# as this user's code. A team shares compiles through the Redis tier (signed records), and a
# folder several users write would hold files of other owners, refused anyway.
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _foreign(st: os.stat_result, want=stat.S_ISREG) -> str | None:
    """Why what ``st`` describes is not ours at all: another kind of file, another owner."""
    if not want(st.st_mode):
        return f"is {file_kind(st.st_mode)}"
    if _UID is not None and st.st_uid != _UID:
        return f"is owned by another user (uid {st.st_uid})"
    return None


def _distrust(st: os.stat_result, want=stat.S_ISREG) -> str | None:
    """Why what ``st`` describes must not be trusted with code (None when it can be)."""
    why = _foreign(st, want)
    if why is None and st.st_mode & _OTHERS_WRITE:
        who = {stat.S_IWGRP: "its group", stat.S_IWOTH: "others"}.get(
            st.st_mode & _OTHERS_WRITE, "its group and others")
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return why


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
            raise Refused("the stored value was pickled; cudamagic never unpickles")
        if mode == MODE_RAW:
            # entries are always files (disk_min_file_size=0): a value inside the database was
            # written by someone else
            raise Refused("the stored value is inside the database, where cudamagic never "
                           "stores an entry")
        raise Refused("the stored value is text, not an entry record")

    def read_value(self, filename: str) -> bytes:
        """The bytes of a value file, checked as :meth:`fetch` checks them.

        :raises Refused: the file or a folder above it is not trusted, or it is too large.
        :raises OSError: it cannot be read (gone, say).
        """
        return read_fd(*self._open_value(filename))

    def _open_value(self, filename: str) -> tuple[int, int]:
        """A descriptor of a trusted value file (see the class docstring), and its size."""
        parts = _inside(filename)
        if parts is None:
            raise Refused(f"its file name {filename!r} points outside the cache folder")
        path = self._directory
        for part in parts[:-1]:
            # who may write a folder decides who may swap the files in it
            path = os.path.join(path, part)
            why = _distrust(os.lstat(path), stat.S_ISDIR)
            if why:
                raise Refused(f"the folder {path} above its file {why}")
        path = os.path.join(path, parts[-1])
        try:
            return open_regular(path, max_size=self.max_read, trust=_distrust)
        except TooLarge as exc:
            raise Refused(f"its file {path} is {exc.size} bytes, larger than the cache's size "
                           f"limit ({exc.limit} bytes)") from None
        except FileRefused as exc:
            raise Refused(f"its file {path} {exc.reason}") from None

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
            why = _foreign(st, stat.S_ISDIR)
            if why:
                raise OSError(errno.EPERM, f"the cache subfolder {path} {why}")
            if st.st_mode & _OTHERS_WRITE:
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

# diskcache's private members, used here and nowhere else in the package, and why. Its
# Cache.__init__ runs about 70 SQL statements on every open, most of them rewriting settings
# the database already holds (on every kernel restart's first cell: docs/performance.md has the
# cost), and it offers no public way to open a folder as it is. When the stored settings and
# schema are what the full open would leave, _Store sets the attributes Cache.__init__ would set
# from one SELECT instead: it writes _directory, _timeout, _local, _txn_id, _disk and
# _page_size, so it is pinned to the diskcache versions it was checked against (_FAST_OPEN),
# and tests/test_cache_robustness.py compares both opens attribute by attribute; anything
# unexpected takes diskcache's own path. get_deferred, filenames, rows and the size read through
# Cache._sql and _page_size as diskcache's own get and volume do (there is no public query), and
# _PrivateDisk reads Disk._directory, the folder it was made for (no public accessor). The rest
# uses diskcache's public settings (reset) and calls.
_FAST_OPEN = diskcache.__version__.startswith("5.6.")
_SCHEMA = frozenset({"Settings", "Cache", "Cache_key_raw", "Cache_expire_time", "Cache_access_time",
                     "Settings_count_insert", "Settings_count_delete", "Settings_size_insert",
                     "Settings_size_update", "Settings_size_delete"})
_SETTINGS = {"statistics": 1, "disk_min_file_size": 0,
             "cull_limit": 1,  # evict one entry, the least recently used, per write
             "eviction_policy": "least-recently-used"}


class _Store(diskcache.Cache):
    """diskcache's ``Cache``, opened without rewriting settings it already holds."""

    def __init__(self, directory, timeout=BUSY_S, disk=_PrivateDisk, **settings):
        if not (_FAST_OPEN and self._open_as_is(str(directory), timeout, disk, settings)):
            super().__init__(directory, timeout=timeout, disk=disk, **settings)
            # diskcache's threading.local, for one whose connections close under the lock
            # (store/connections.py); the opening thread's connection moves across
            made, self._local = self._local, ThreadConnections()
            for name in ("pid", "con"):
                if hasattr(made, name):
                    setattr(self._local, name, getattr(made, name))

    def _open_as_is(self, directory: str, timeout: float, disk: type,
                    settings: dict[str, Any]) -> bool:
        """Open as ``Cache.__init__`` would when it would change nothing; False to let it."""
        self._directory = directory
        self._timeout = timeout
        self._local = ThreadConnections()  # connections closed under the lock only
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

    def get_deferred(self, key: str) -> tuple[bytes | None, int | None]:
        """The value for ``key`` (None if there is none) and its row (None: a miss), read
        without a write transaction.

        diskcache's ``get`` counts the hit and refreshes the entry's last-use time in a write
        transaction on every lookup (more than the rest of a warm lookup: docs/performance.md);
        here the caller hands those two writes to the :class:`Bookkeeper`, done right
        after on its thread. Everything that reads them (stats, listing, eviction) waits for it.
        """
        db_key, raw = self._disk.put(key)
        rows = self._sql("SELECT rowid, mode, filename, value FROM Cache WHERE key = ? AND "
                         "raw = ? AND (expire_time IS NULL OR expire_time > ?)",
                         (db_key, raw, time.time())).fetchall()
        if not rows:
            return None, None
        ((rowid, mode, filename, db_value),) = rows
        try:
            return self._disk.fetch(mode, filename, db_value, False), rowid
        except OSError:  # deleted meanwhile (another process)
            return None, None

    def database_bytes(self) -> int:
        """Bytes the database itself takes (what a size limit must leave room for, and more)."""
        ((page_count,),) = self._sql("PRAGMA page_count").fetchall()
        return self._page_size * page_count

    def filenames(self) -> set[str]:
        """The value files the database knows."""
        return {name for (name,) in self._sql("SELECT filename FROM Cache WHERE filename IS "
                                               "NOT NULL").fetchall()}

    def rows(self) -> list[tuple]:
        """``(key, filename, size, stored, last used)`` of every entry, without touching any."""
        return self._sql("SELECT key, filename, size, store_time, access_time FROM Cache"
                         ).fetchall()


# What a damaged, full or unwritable folder raises from inside diskcache and sqlite (a damaged
# database also surfaces as UnicodeDecodeError or ValueError while reading its settings).
_STORE_ERRORS = (OSError, sqlite3.Error, diskcache.Timeout, UnicodeError, ValueError, KeyError)
_BUSY_PAUSE_S = 0.02  # between two tries of a busy database, with the SQLite lock released
_SQLITE_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)


def _busy(exc: BaseException | None) -> bool:
    """Whether an error from diskcache or SQLite means another connection holds the lock."""
    if isinstance(exc, diskcache.Timeout):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and isinstance(code, int) \
        and code & 0xFF in _SQLITE_BUSY


def untrusted_folder(directory: Path) -> str | None:
    """Why the cache folder must not be trusted with code (None when it can be).

    The folder itself is followed if it is a link (``~/.cache`` on another disk is common);
    what is inside it is not. Creates ``cache.db`` owner-only if it is not there.
    """
    why = _distrust(directory.stat(), stat.S_ISDIR)
    return f"it {why}" if why else _private_database(directory)


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


class DiskStore(Store):
    """Entry bytes in a trusted diskcache folder (see the module).

    :raises StoreUnavailable: the folder's database cannot be opened.
    """

    in_memory = None

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.location = str(directory)
        self._database = os.path.join(directory, DBNAME)
        self._dc = self._bounded("opening", self._open_store)
        bookkeeper().reclaim_later(directory)

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Hold the SQLite lock; a failure of the folder as :class:`StoreUnavailable`."""
        if state.sqlite_unsafe:
            raise StoreUnavailable(f"{doing} the cache folder {self.directory} is not safe: "
                                   f"{state.sqlite_unsafe}")
        with state.sqlite:
            try:
                yield
            except _STORE_ERRORS as exc:
                raise StoreUnavailable(f"{doing} the cache folder {self.directory} failed "
                                       f"({exc})") from exc

    def _open_store(self) -> "_Store":
        close_orphans()
        return _Store(str(self.directory), **_SETTINGS)

    def _bounded(self, doing: str, call, *args):
        """``call(*args)`` under the lock, tried again (lock released between) while another
        process keeps the database busy, for at most :data:`CACHE_WAIT_S`.

        :raises StoreBusy: still busy after that.
        """
        deadline = time.monotonic() + CACHE_WAIT_S
        while True:
            try:
                with self._guard(doing):
                    return call(*args)
            except StoreUnavailable as exc:
                if not _busy(exc.__cause__):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusy(f"{doing} the cache folder {self.directory} waited "
                                    f"{CACHE_WAIT_S:g} s for its database, which another "
                                    f"process kept locked") from exc
            time.sleep(_BUSY_PAUSE_S)

    def load(self, key: str) -> bytes | None:
        value, rowid = self._bounded("reading", self._dc.get_deferred, key)
        bookkeeper().later(self._database, rowid)  # outside the lock its thread needs
        return value

    def save(self, key: str, value: bytes) -> bool:
        def write() -> bool:
            self._dc.set(key, value)
            return key in self._dc
        return self._bounded("writing to", write)

    def delete(self, key: str) -> bool:
        return bool(self._bounded("deleting from", self._dc.delete, key))

    def __contains__(self, key: str) -> bool:
        return bool(self._bounded("reading", self._dc.__contains__, key))

    def __len__(self) -> int:
        with self._guard("reading"):
            return len(self._dc)

    def __iter__(self) -> Iterator[str]:
        with self._guard("reading"):
            return iter(list(self._dc))

    def volume(self) -> int:
        with self._guard("reading"):
            return self._dc.volume()

    def overhead(self) -> int:
        with self._guard("reading"):
            return self._dc.database_bytes()

    def stored_limit(self) -> object:
        with self._guard("reading"):
            return self._dc.reset("size_limit")  # reads the stored setting back

    def set_limit(self, limit: int, *, keep: bool) -> None:
        # update=False: diskcache's public way to change a setting for this process only
        with self._guard("writing to"):
            self._dc.reset("size_limit", limit, update=keep)
            self._dc.disk.max_read = limit

    def evict(self) -> None:
        self._bounded("evicting from", self._dc.cull)
        self.reclaim()

    def clear(self) -> int:
        removed = self._bounded("clearing", self._dc.clear)
        self.reclaim()
        return removed

    def stats(self) -> tuple[int, int]:
        self.flush()
        with self._guard("reading"):
            return self._dc.stats()

    def unhit(self) -> None:
        bookkeeper().unhit(self._database)

    def listing(self) -> list[StoredEntry]:
        self.flush()
        with self._guard("reading"):
            rows = self._dc.rows()
        disk = self._dc.disk
        return [StoredEntry(key, size, stored, used,
                            functools.partial(disk.read_value, filename) if filename
                            else bytes)
                for key, filename, size, stored, used in rows]

    def reclaim(self) -> int:
        with self._guard("reading"):
            known = self._dc.filenames()
        return reclaim_orphans(self.directory, known)

    def flush(self) -> bool:
        # no longer than a cell waits on the database (another process may hold it)
        return bookkeeper().flush(timeout=CACHE_WAIT_S)

    def close(self) -> None:
        self.flush()
        with self._guard("closing"):
            self._dc.close()

    @property
    def raw(self) -> diskcache.Cache:
        self.flush()
        return self._dc


def _value_files(directory: Path) -> Iterator[tuple[str, float]]:
    """``(name relative to the folder, mtime)`` of each value file in diskcache's two levels of
    subfolders, without following links."""
    def subfolders(path: str) -> list[str]:
        with contextlib.suppress(OSError), os.scandir(path) as it:
            return [e.name for e in it if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
        return []

    top = str(directory)
    for a in subfolders(top):
        for b in subfolders(os.path.join(top, a)):
            with contextlib.suppress(OSError), os.scandir(os.path.join(top, a, b)) as it:
                for e in it:
                    if e.name.endswith(".val") and e.is_file(follow_symlinks=False):
                        with contextlib.suppress(OSError):
                            yield os.path.join(a, b, e.name), e.stat(follow_symlinks=False).st_mtime


def reclaim_orphans(directory: Path, known: set[str]) -> int:
    """Remove the value files in ``directory`` that ``known`` (the database's) lacks and that
    are older than :data:`ORPHAN_GRACE_S`; how many."""
    cutoff = time.time() - ORPHAN_GRACE_S
    removed = 0
    for name, mtime in list(_value_files(directory)):
        if name not in known and mtime < cutoff:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
                removed += 1
                with contextlib.suppress(OSError):
                    os.removedirs(os.path.dirname(os.path.join(directory, name)))
    return removed


class _Counts:
    """The bookkeeping of one folder not written yet (an accumulator, not a record)."""

    __slots__ = ("hits", "misses", "used")

    def __init__(self) -> None:
        self.hits = self.misses = 0
        self.used: dict[int, float] = {}  # rowid -> last use: one per entry, however many hits


class Bookkeeper:
    """Writes the lookups' hit and miss counts and last-use times after the lookups, on a
    thread of its own, with one connection per folder (at most :attr:`MAX_CONNECTIONS`).

    What waits is bounded: lookups of one entry coalesce, at most :attr:`MAX_PENDING` entries
    wait (a lookup beyond waits for the thread, at most :attr:`BACKPRESSURE_S`, then its
    last-use time is dropped), a write that finds the database busy gives up after
    :attr:`WRITE_FOR_S` (bookkeeping only: a count is lost, never a lookup), and every
    :meth:`flush` has a timeout.
    """

    MAX_PENDING = 10_000
    MAX_CONNECTIONS = 8
    BACKPRESSURE_S = 1.0
    WRITE_FOR_S = 10.0
    FLUSH_S = 30.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, _Counts] = {}
        self._size = 0
        self._reclaim: set[str] = set()
        self._reclaimed: set[str] = set()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._cons: OrderedDict[str, sqlite3.Connection] = OrderedDict()

    def later(self, database: str, rowid: int | None) -> None:
        """Count a hit on the entry at ``rowid`` (None: a miss) in ``database``."""
        with self._cond:
            if self._size >= self.MAX_PENDING:
                self._cond.wait_for(lambda: self._size < self.MAX_PENDING, self.BACKPRESSURE_S)
            counts = self._pending.setdefault(database, _Counts())
            if rowid is None:
                counts.misses += 1
            else:
                counts.hits += 1
                if rowid in counts.used or self._size < self.MAX_PENDING:
                    self._size += rowid not in counts.used
                    counts.used[rowid] = time.time()
            self._wake()

    def unhit(self, database: str) -> None:
        """Turn one hit counted in ``database`` into a miss (written or not yet: the counts
        written are added, so a pending -1 undoes a hit already written)."""
        with self._cond:
            counts = self._pending.setdefault(database, _Counts())
            counts.hits -= 1
            counts.misses += 1
            self._wake()

    def reclaim_later(self, directory: Path) -> None:
        """Reclaim the folder's orphaned value files on the thread, once per process."""
        with self._cond:
            if str(directory) not in self._reclaimed:
                self._reclaimed.add(str(directory))
                self._reclaim.add(str(directory))
                self._wake()

    def _wake(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="cudamagic-cache-stats",
                                            daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._reclaim)
                work, self._pending, self._size = self._pending, {}, 0
                folders, self._reclaim = self._reclaim, set()
                self._busy = True
                self._cond.notify_all()
            try:
                for database, counts in work.items():
                    self._write(database, counts)
                for folder in folders:
                    self._reclaim_folder(folder)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, database: str, counts: _Counts) -> None:
        deadline = time.monotonic() + self.WRITE_FOR_S
        while time.monotonic() < deadline:
            with state.sqlite:
                if state.sqlite_unsafe:
                    return
                try:
                    con = self._connection(database)
                    con.execute("BEGIN IMMEDIATE")
                    try:
                        for counter, n in (("hits", counts.hits), ("misses", counts.misses)):
                            if n:
                                con.execute("UPDATE Settings SET value = value + ? WHERE key = ?",
                                            (n, counter))
                        con.executemany("UPDATE Cache SET access_time = ? WHERE rowid = ?",
                                        [(when, rowid) for rowid, when in counts.used.items()])
                        con.execute("COMMIT")
                    except BaseException:
                        con.execute("ROLLBACK")
                        raise
                    return
                except (sqlite3.Error, OSError) as exc:
                    if not _busy(exc):
                        return  # a damaged or vanished database loses a count, nothing more
            time.sleep(0.01)  # busy: let the other writer finish, with the lock released

    def _connection(self, database: str) -> sqlite3.Connection:
        con = self._cons.pop(database, None)
        if con is None:
            # mode=rw: a folder deleted meanwhile gets no new empty database from a count
            con = sqlite3.connect(f"file:{_uri_path(database)}?mode=rw", uri=True,
                                  timeout=0.05, isolation_level=None, check_same_thread=False)
        self._cons[database] = con
        while len(self._cons) > self.MAX_CONNECTIONS:
            self._cons.popitem(last=False)[1].close()
        return con

    def _reclaim_folder(self, folder: str) -> None:
        database = os.path.join(folder, DBNAME)
        with state.sqlite:
            if state.sqlite_unsafe:
                return
            try:
                known = {name for (name,) in self._connection(database).execute(
                    "SELECT filename FROM Cache WHERE filename IS NOT NULL")}
            except (sqlite3.Error, OSError):
                return
        reclaim_orphans(Path(folder), known)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every lookup so far is written (at most ``timeout``, default
        :attr:`FLUSH_S`); whether it was."""
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                return not self._pending
            return self._cond.wait_for(lambda: not (self._pending or self._reclaim or self._busy),
                                       self.FLUSH_S if timeout is None else timeout)

    def forget(self) -> None:
        """In a forked child: drop the parent's bookkeeping (the parent writes it), its thread
        (not copied by the fork) and its connections (left unused and unclosed)."""
        state._inherited.append(self._cons)
        Bookkeeper.__init__(self)


def _uri_path(path: str) -> str:
    """A path for an SQLite ``file:`` URI: its bytes as the file system has them, quoted (a
    folder name that is not UTF-8 reaches Python as surrogates, which UTF-8 cannot encode)."""
    return urllib.parse.quote(os.fsencode(path))


def _flush_at_exit() -> None:
    if state.bookkeeper is not None:
        state.bookkeeper.flush(timeout=EXIT_FLUSH_S)


atexit.register(_flush_at_exit)


def bookkeeper() -> Bookkeeper:
    """The process's bookkeeper (made on first use)."""
    if state.bookkeeper is None:
        with state.making:  # not the default cache's lock: opening that cache comes here
            if state.bookkeeper is None:
                state.bookkeeper = Bookkeeper()
    return state.bookkeeper
