"""The cache of built modules: entry records by key, in a folder, else in memory.

:class:`KernelCache` turns records into bytes and back (:mod:`.entry`), checks what it reads
(a bad entry is deleted and reported as a miss with its reason, so the caller rebuilds it), and
keeps them in one :class:`~cudamagic.store.base.Store`: the folder's
(:class:`~cudamagic.store.disk.DiskStore`) or, where the folder cannot be used (it cannot be
created or written, the disk is full, the database is damaged, or the folder or its database is
writable by others or owned by someone else, which would let them plant code), memory's, with
one warning, for the rest of the process. A size limit that would keep nothing is refused with
the limit that works: caching never turns itself off in silence.

**Size limits.** The folder keeps its limit for every session that opens it: 1 GiB for a new
folder, changed by :meth:`KernelCache.set_size_limit` (``%cuda_cache limit``). A limit given for
one process, ``KernelCache(size_limit=...)`` or ``$CUDAMAGIC_CACHE_SIZE_LIMIT``, governs what this
process evicts and leaves the folder's limit as it was: a one-off run with a small limit does
not shrink the cache of every later run. The one exception is a repair: where the stored limit
is no size at all (NULL, text, a blob, out of range: written by hand, plain diskcache or an
older version) or keeps nothing, it is replaced, by the limit given if any, else the default,
with a warning.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import diskcache

from ..errors import CacheArgumentError, CacheWarning, CudaMagicError
from .base import REMOTE_VARIABLES, Refused, Store, StoreBusy, StoreUnavailable
from .disk import CACHE_WAIT_S, DiskStore, untrusted_folder
from .entry import BadEntry, EntryRecord, decode_entry, encode_entry
from .limits import (DEFAULT_SIZE_LIMIT, MAX_SIZE, MIN_ENTRY_ROOM, checked_size,
                     short_of, stored_limit_problem)
from .state import MAX_FOLDERS, state
from ..core.miss import HitKind, Miss, MissKind
from ..toolchain.compile.manifest import contents_digest
from ..core.units import size_text

if TYPE_CHECKING:  # pragma: no cover
    from ..toolchain.compile.fatbin import LinkCache
    from ..toolchain.compile.link import LinkResult
    from .remote import RemoteStore

__all__ = ["KernelCache", "EntryInfo", "Lookup", "default_cache", "default_cache_dir"]


@dataclass(frozen=True)
class EntryInfo:
    """One cache entry as ``%cuda_cache list`` shows it."""

    key: str
    size: int
    created: float | None
    last_used: float | None
    name_expressions: tuple[str, ...]
    readable: bool
    #: the CUBIN's kernels no name expression names (``extern "C"`` ones, by their symbol), as
    #: its symbol table has them (:func:`unnamed_kernels`)
    kernels: tuple[str, ...] = ()
    #: the cell's first line that is not blank ("": not recorded: an older entry, a CUBIN from
    #: elsewhere)
    first_line: str = ""
    #: where it was made, as ``host:folder`` ("": not recorded)
    made_at: str = ""


def unnamed_kernels(rec: EntryRecord) -> tuple[str, ...]:
    """The kernels of a record's CUBIN that none of its name expressions lowered to, read from
    the CUBIN's symbol table (the device runtime's and the type probe's left out): an ``extern
    "C"`` kernel by its symbol (its name), a C++ one by its demangled text where the record
    keeps it (the demangler's reading of the symbol), else its symbol."""
    from ..toolchain.binary.image import PROBE_MARK, from_device_runtime, read_cubin

    named = set((rec.lowered or {}).values())
    texts = (rec.symbols or {}).get("texts", {})
    try:
        symbols = read_cubin(rec.cubin).symbols
    except CudaMagicError:  # ImageError: a record whose bytes are no CUBIN lists none
        return ()
    return tuple(texts.get(s, s) if s.startswith("_Z") else s for s in symbols
                 if s not in named and PROBE_MARK not in s and not from_device_runtime(s))


def _entry_info(row: Any, value: object) -> EntryInfo:
    """One listing row: the record's names, kernels and origin, or unreadable."""
    try:
        rec = decode_entry(value, row.key if isinstance(row.key, str) else None)
    except BadEntry:
        return EntryInfo(row.key, row.size, row.stored, row.last_used, (), False)
    made = rec.made or {}
    where = f"{made.get('host', '')}:{made.get('folder', '')}" if made else ""
    return EntryInfo(row.key, row.size, rec.created, row.last_used, tuple(rec.lowered or ()),
                     True, kernels=unnamed_kernels(rec), first_line=made.get("first_line", ""),
                     made_at=where)


def _warn_once(what: str, where: str, message: str) -> None:
    if (what, where) not in state.warned:
        state.warned.add((what, where))
        warnings.warn(message, CacheWarning, stacklevel=4)


class KernelCache:
    """Entry records by key, in a diskcache folder with least-recently-used eviction.

    Parameters
    ----------
    directory : str or path, optional
        Default :func:`default_cache_dir`.
    size_limit : int or str, optional
        Bytes this process keeps before the least recently used entries go (default: what the
        folder keeps, 1 GiB for a new one, or ``$CUDAMAGIC_CACHE_SIZE_LIMIT``, which takes sizes
        such as ``512MB``); the folder's own limit is left as it is (see the module). A limit
        that would keep nothing (below the database plus
        :data:`~cudamagic.store.limits.MIN_ENTRY_ROOM`) is refused.

    Attributes
    ----------
    directory : Path
    size_limit : int
    in_memory : str or None
        Why the cache is in memory instead of the folder (None while on disk).
    remote : RemoteStore or None
        The remote tier (:mod:`cudamagic.store.remote`), asked on a local miss; given as
        ``remote=`` (a :class:`RemoteStore`, a URL, or False for none) or by
        ``$CUDAMAGIC_REMOTE_CACHE`` and ``$CUDAMAGIC_REMOTE_KEY_FILE``.
    remote_off : str or None
        Why a remote tier that was asked for is off (no team key, a key file others can read).

    :raises CacheArgumentError: (a ``ValueError``) ``directory`` is not a folder name, or the
        size limit (given or from the environment) is not a size or would keep nothing; the
        message says what works.
    """

    def __init__(self, directory: str | os.PathLike | None = None,
                 size_limit: int | str | None = None,
                 remote: "RemoteStore | str | bool | None" = None) -> None:
        # absolute: diskcache joins value files to it, and a notebook may chdir later
        self.directory = (_folder(directory) if directory is not None
                          else default_cache_dir()).absolute()
        origin = "size_limit"
        if size_limit is None and os.environ.get("CUDAMAGIC_CACHE_SIZE_LIMIT") is not None:
            size_limit = os.environ["CUDAMAGIC_CACHE_SIZE_LIMIT"]
            origin = "$CUDAMAGIC_CACHE_SIZE_LIMIT"
        limit = None if size_limit is None else checked_size(size_limit, origin, 0)
        self.size_limit = DEFAULT_SIZE_LIMIT if limit is None else limit
        self._store: Store | None = None
        self.remote, self.remote_off = _remote(remote)
        try:
            self._store = self._open()
            self._settle_limit(limit, origin)
        except CudaMagicError:
            self.close()
            raise
        except StoreUnavailable as exc:
            self._fall_back("unusable", str(exc))
        except OSError as exc:
            self._fall_back("unusable", f"the cache folder {self.directory} cannot be used "
                                        f"({exc})")

    def _open(self) -> Store:
        """The folder's store, or memory's where the folder is not to be trusted."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = untrusted_folder(self.directory)
        if not why:
            return DiskStore(self.directory)
        hint = ("point CUDAMAGIC_CACHE_DIR (set now) at a folder of your own"
                if os.environ.get("CUDAMAGIC_CACHE_DIR")
                else "set CUDAMAGIC_CACHE_DIR to a folder of your own")
        return self._memory("untrusted", f"the cache folder {self.directory} is not trusted: "
                            f"{why}; a CUBIN from there could be anyone's code. Fix its owner "
                            f"or mode (chmod 700 the folder, 600 its files) or {hint}")

    def _settle_limit(self, limit: int | None, origin: str) -> None:
        """Take ``limit`` (None: the folder's own), refusing one that would keep nothing and
        repairing a stored one that is no size or keeps nothing (see the module)."""
        store = self._live()
        database = store.overhead()
        stored = store.stored_limit()
        problem = stored_limit_problem(stored)
        if problem is None and isinstance(stored, int):
            problem = short_of(stored, database)
        if limit is not None:
            why = short_of(limit, database)
            if why:
                raise CacheArgumentError(f"{origin}: {why}")
        if problem:
            # warn and cache, rather than refuse and leave %cuda_cache limit no cache to fix it
            repair = limit if limit is not None else max(DEFAULT_SIZE_LIMIT,
                                                         database + MIN_ENTRY_ROOM)
            _warn_once("limit", str(self.directory),
                       f"cudamagic: the size limit stored in the cache folder {self.directory} "
                       f"{problem}. Using {'the default' if limit is None else 'the limit given'} "
                       f"({size_text(repair)}) instead; %cuda_cache limit SIZE sets another")
            store.set_limit(repair, keep=True)
        elif limit is not None and limit != stored:
            store.set_limit(limit, keep=False)
        if limit is not None:
            self.size_limit = limit
        elif problem or not isinstance(stored, int):  # not an int: a problem, so repaired
            self.size_limit = repair
        else:
            self.size_limit = stored

    def _live(self) -> Store:
        assert self._store is not None
        return self._store

    def _memory(self, what: str, why: str) -> Store:
        _warn_once(what, str(self.directory), f"cudamagic: {why}; compiled kernels are cached "
                                              "in memory for this session only")
        from .memory import MemoryStore  # a folder that cannot serve: not a hit's import

        return MemoryStore(self.size_limit, why)

    def _fall_back(self, what: str, why: str) -> None:
        if self._store is not None:
            try:
                self._store.close()
            except StoreUnavailable:
                pass
        self._store = self._memory(what, why)

    def _use(self, call, *args, doing: str = "", default: Any = None):
        """``call(*args)`` on the store; a store that fails falls back to memory for the calls
        after this one, and this one answers ``default`` (it is not made again in memory: a get
        is a miss, a put keeps nothing, a delete has nothing to delete)."""
        try:
            return call(*args)
        except StoreBusy:  # another process holds the database now: this call only is skipped
            return default
        except StoreUnavailable as exc:
            self._fall_back(doing or "failed", str(exc))
            return default

    @property
    def in_memory(self) -> str | None:
        """Why the cache is in memory instead of the folder (None while on disk)."""
        return self._live().in_memory

    @property
    def pch_folder(self) -> str | None:
        """The folder of NVRTC's precompiled headers beside the entries (``pch`` in the cache
        folder; :mod:`cudamagic.toolchain.compile.pch`); None while the cache is in memory."""
        return None if self.in_memory is not None else str(self.directory / "pch")

    @property
    def location(self) -> str:
        """The folder, or ``"memory (<why>)"``."""
        return self._live().location

    @classmethod
    def wrap(cls, cache: "KernelCache | diskcache.Cache | str | os.PathLike | None"
             ) -> "KernelCache":
        """A KernelCache from what :func:`cudamagic.build` accepts as ``cache``.

        A ``diskcache.Cache`` is reopened on its folder with cudamagic's own ``Disk`` (the
        caller's would unpickle, and would read files without the checks above) and with the
        caller's size limit; the folder then keeps cudamagic's storage settings (bytes only,
        one file per entry, least recently used out first). None is :func:`default_cache`. A
        folder named by path is opened once per process and reused while its database is the
        same file (a build per cell need not open it again, nor leave a connection behind).

        :raises CacheArgumentError: (a ``ValueError``) anything else, with what it accepts; or
            the diskcache's size limit is not a size or would keep nothing.
        """
        if isinstance(cache, KernelCache):
            return cache
        if cache is None:
            return default_cache()
        if isinstance(cache, diskcache.Cache):
            return cls(cache.directory, size_limit=_diskcache_limit(cache))
        return _folder_cache(cls, _folder(cache))

    def get(self, key: str) -> tuple[EntryRecord | None, Miss | None]:
        """The entry for ``key``, or ``(None, miss)`` (``miss`` None: there is none), from the
        folder or else the remote tier (:meth:`lookup` says which)."""
        found = self.lookup(key)
        return found.record, found.miss

    def lookup(self, key: str, check: "Callable[[object], Miss | None] | None" = None
               ) -> "Lookup":
        """The entry for ``key`` from the folder, else from the remote tier, and where it came
        from (the caller keeps a remote one in the folder once it serves: :meth:`keep`).

        ``check`` says why a stored header manifest does not hold here (None: it holds): a
        folder's entry that does not hold is deleted and the remote tier asked (another
        machine may have built the cell from these headers' contents), which serves the
        newest build of ``key`` that holds. Without it, any entry serves. A bad entry
        (damaged, another key's, an older format, an untrusted or special file, a remote
        record whose signature does not hold) is deleted here, or left where it cannot be, and
        ``miss`` says so; the caller rebuilds.
        """
        record, miss = self._local(key)
        if record is not None and check is not None:
            miss = check(record.manifest)
            if miss is not None:
                self.refuse(key, HitKind.LOCAL)
                record = None
        if record is not None or self.remote is None:
            return Lookup(record, miss, HitKind.LOCAL if record is not None else None)
        return self._lookup_remote(key, check, miss)

    def _lookup_remote(self, key: str, check: "Callable[[object], Miss | None] | None",
                       miss: Miss | None) -> "Lookup":
        """The remote tier's part of :meth:`lookup`; ``miss`` is the folder's own reason,
        kept where the tier has nothing to serve."""
        assert self.remote is not None
        t = time.perf_counter()
        try:
            found = self.remote.find(key, None if check is None else _holds(check))
        except Refused as exc:
            _warn_once("signature", self.remote.location, f"cudamagic: {exc} (remote cache "
                       f"{self.remote.location}, key {key[:12]}); it was deleted there and the "
                       "cell is compiled. Records fail this way when someone who can write the "
                       "server changed them, or a machine signs with another team key")
            return Lookup(None, miss or Miss(MissKind.UNTRUSTED, str(exc)), None,
                          time.perf_counter() - t)
        seconds = found.seconds
        if found.entry is None:
            if miss is None and found.others:  # never "changed since the last compile" here
                miss = Miss(MissKind.NO_ENTRY, "no cache entry for these headers' contents "
                            f"(the team cache holds {found.others} build"
                            f"{'s' if found.others > 1 else ''} of this cell that read other "
                            "header contents)")
            return Lookup(None, miss, None, seconds)
        try:
            record = decode_entry(found.entry, key)
            if contents_digest(record.manifest) != found.variant:
                raise BadEntry("its manifest is not the one it was indexed by")
        except BadEntry as exc:  # signed by the team, yet not an entry this reader takes
            self.remote.unhit()
            return Lookup(None, miss or Miss(exc.kind, f"the remote record: {exc}"), None,
                          seconds)
        # the same contents, yet stored with other times: the record's own is checked
        if check is not None and _manifest_bytes(record.manifest) != found.manifest:
            stale = check(record.manifest)
            if stale is not None:
                self.remote.unhit()
                return Lookup(None, miss or stale, None, seconds)
        return Lookup(record, miss, HitKind.REMOTE, seconds)

    def _local(self, key: str) -> tuple[EntryRecord | None, Miss | None]:
        try:
            value = self._live().load(key)
        except Refused as exc:
            return None, Miss(MissKind.UNTRUSTED, f"{exc} ({self._gone(key)})")
        except StoreBusy:
            return None, Miss(MissKind.BUSY, "another process kept the cache's database locked "
                                             f"for over {CACHE_WAIT_S:g} s")
        except StoreUnavailable as exc:
            self._fall_back("read", str(exc))
            return None, Miss(MissKind.UNREADABLE, "the cache folder could not be read")
        if value is None:
            return None, None
        try:
            return decode_entry(value, key), None
        except BadEntry as exc:
            self._use(self._live().unhit)
            return None, Miss(exc.kind, f"{exc} ({self._gone(key)})")

    def _gone(self, key: str) -> str:
        return "deleted" if self.delete(key) else "could not be deleted"

    def refuse(self, key: str, hit: HitKind | None) -> None:
        """The entry :meth:`lookup` found for ``key`` cannot serve (its headers changed, its
        name map does not hold): the lookup counts as a miss, and a local entry is deleted
        (a remote record may still serve the machines it was built for)."""
        if hit is HitKind.LOCAL:
            self._use(self._live().unhit)
            self.delete(key)
        elif self.remote is not None:
            self.remote.unhit()

    def keep(self, key: str, record: EntryRecord) -> bool:
        """Store an entry in the folder only (one the remote tier served, or a local one whose
        manifest was restamped): the remote already has it."""
        return self.put(key, record, share=False)

    def link_cache(self) -> "LinkCache":
        """What :func:`~cudamagic.toolchain.compile.fatbin.loadable_cubin` keeps nvJitLink's CUBINs in:
        entries of this cache holding the CUBIN alone (no name map, no manifest: what was
        linked is the key)."""
        from ..toolchain.compile.fatbin import LinkCache

        def find(key: str) -> bytes | None:
            record, _ = self.get(key)
            return None if record is None else record.cubin

        def keep(key: str, result: "LinkResult", arch: str) -> None:
            self.put(key, EntryRecord(cubin=result.cubin, lowered=None, log=result.log,
                                      arch=arch, nvrtc_version="-",
                                      compile_seconds=result.seconds, manifest={}))
        return LinkCache(find, keep)

    def put(self, key: str, record: EntryRecord, share: bool = True) -> bool:
        """Store an entry under ``key`` (replacing any), naming ``key`` inside it; False where
        it was not stored because another process kept the database locked for longer than
        :data:`~cudamagic.store.disk.CACHE_WAIT_S` (the cache stays in use). ``share``: offer
        it to the remote tier too, in the background (never delaying the caller).

        Warns once when the entry does not fit the size limit beside the database (it was
        evicted as soon as it was stored), with the limit that would keep it. An entry that
        fits and is gone at once was deleted by another process meanwhile: nothing to say.

        :raises CacheArgumentError: the record names another key.
        """
        if record.key != key:
            if record.key:
                raise CacheArgumentError(f"a record naming key {record.key[:16]}... cannot be "
                                         f"stored under {key[:16]}...")
            record = replace(record, key=key)
        value = encode_entry(record)
        if share and self.remote is not None:
            self.remote.share(key, value, contents_digest(record.manifest),
                              _manifest_bytes(record.manifest))
        store = self._live()
        if not store.flush():  # the lookups' last-use times first: eviction goes by them
            return False  # they could not be written for CACHE_WAIT_S: the database is held
        try:
            kept = store.save(key, value)
            room = self.size_limit - store.overhead() - MIN_ENTRY_ROOM
        except StoreBusy:
            return False
        except StoreUnavailable as exc:
            self._fall_back("write", str(exc))
            self._live().save(key, value)
            return True
        if not kept and len(value) > room:
            need = -(-(len(value) + self.size_limit - room) // (1 << 20))
            _warn_once("fit", str(self.directory),
                       f"cudamagic: a {size_text(len(value))} entry does not fit the cache's size limit "
                       f"({size_text(self.size_limit)}) and was evicted as soon as it was stored, so "
                       f"this build will compile every time. Raise the limit to at least "
                       f"{need}MB (%cuda_cache limit {need}MB or $CUDAMAGIC_CACHE_SIZE_LIMIT)")
        return True

    def delete(self, key: str) -> bool:
        """Remove an entry; True if there was one."""
        return bool(self._use(self._live().delete, key, doing="write", default=False))

    def __contains__(self, key: str) -> bool:
        return bool(self._use(self._live().__contains__, key, default=False))

    def __len__(self) -> int:
        return self._use(self._live().__len__, default=0)

    def __bool__(self) -> bool:
        return True  # a cache is there whatever it holds: never a count of its entries

    def keys(self) -> Iterator[str]:
        """Every key."""
        return self._use(self._live().__iter__, default=iter(()))

    def volume(self) -> int:
        """Bytes the cache holds (on disk: the folder, database included)."""
        return self._use(self._live().volume, default=0)

    def set_size_limit(self, size_limit: int | str) -> None:
        """Change the size limit, kept by the folder for later sessions; evicts down to it now.

        :raises CacheArgumentError: (a ``ValueError``) not a size, or a limit that would keep
            nothing (below the database plus :data:`~cudamagic.store.limits.MIN_ENTRY_ROOM`);
            the message says what limit works.
        """
        store = self._live()
        limit = checked_size(size_limit, "", self._use(store.overhead, default=0))
        self.size_limit = limit
        self._use(lambda: store.set_limit(limit, keep=True), doing="write")
        self._use(self._live().evict, doing="write")

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        return self._use(self._live().clear, doing="write", default=0)

    def stats(self) -> tuple[int, int]:
        """``(hits, misses)`` of lookups, counted in the folder across sessions."""
        return self._use(self._live().stats, default=(0, 0))

    def entries(self) -> list[EntryInfo]:
        """Every entry, newest first, read without touching its last-used time."""
        infos = []
        for row in self._use(self._live().listing, default=[]):
            try:  # checked like a lookup: a FIFO here would hang %cuda_cache list
                value = row.read()
            except (Refused, OSError):
                value = b""
            infos.append(_entry_info(row, value))
        return sorted(infos, key=lambda e: e.created or 0, reverse=True)

    def evict_older_than(self, seconds: float) -> int:
        """Remove the entries last used more than ``seconds`` ago (an entry never looked up
        since it was stored: stored more than ``seconds`` ago); returns how many."""
        cutoff = time.time() - seconds
        old = [e.key for e in self.entries() if (e.last_used or e.created or 0) < cutoff]
        removed = sum(self.delete(k) for k in old)
        self._use(self._live().reclaim, doing="write")
        return removed

    def close(self) -> None:
        """Close the database connection (it reopens on next use), and the remote tier's."""
        if self._store is not None:
            self._use(self._store.close)
        if self.remote is not None:
            self.remote.close()

    @property
    def raw(self) -> Any:
        """The underlying diskcache (or the in-memory store after a fall-back).

        Tests write foreign values through it (``cache.raw.set(key, b"...")``).
        """
        return self._live().raw

    def __repr__(self) -> str:
        return f"KernelCache({self.location!r})"


@dataclass(frozen=True)
class Lookup:
    """What :meth:`KernelCache.lookup` found: the record or why not, which tier served it
    (None: neither), and the seconds the remote tier took (0: not asked)."""

    record: EntryRecord | None
    miss: Miss | None
    hit: HitKind | None
    remote_seconds: float = 0.0


def _manifest_bytes(manifest: object) -> bytes:
    """A manifest as the remote index holds it (JSON; :func:`_holds` reads it back)."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def _holds(check: "Callable[[object], Miss | None]") -> "Callable[[bytes], bool]":
    """Whether a manifest as the remote index holds it holds here (one that is no JSON never
    does)."""
    def holds(data: bytes) -> bool:
        try:
            manifest = json.loads(data)
        except ValueError:
            return False
        return check(manifest) is None
    return holds


def _remote(remote: object) -> "tuple[RemoteStore | None, str | None]":
    """The remote tier a cache was given (see :class:`KernelCache`), or why it is off; its
    module is imported only where one is given or configured."""
    if remote is False or (remote is None and not os.environ.get(REMOTE_VARIABLES[0])):
        return None, None
    from .remote import RemoteStore, open_remote

    if isinstance(remote, RemoteStore):
        return remote, None
    if remote is None or isinstance(remote, str):
        store, why = open_remote(remote if isinstance(remote, str) else None)
        if why:
            _warn_once("remote", why, f"cudamagic: {why}")
        return store, why
    raise CacheArgumentError(f"remote={remote!r:.60} is not a remote cache: give a RemoteStore, "
                             "a redis:// URL, or False for none")


def _folder_cache(cls: type, folder: Path) -> KernelCache:
    """The process's cache for ``folder`` (see :meth:`KernelCache.wrap`)."""
    folder = folder.absolute()
    spec = (str(folder), os.environ.get("CUDAMAGIC_CACHE_SIZE_LIMIT") or "",
            *(os.environ.get(v) or "" for v in REMOTE_VARIABLES))
    try:
        st = os.stat(folder / "cache.db")
        identity = (st.st_dev, st.st_ino)
    except OSError:
        identity = (-1, -1)
    with state.default_lock:
        known = state.folders.get(spec)
        if known is not None and known[0] == identity and identity != (-1, -1):
            state.folders.move_to_end(spec)
            return known[1]
    cache = cls(folder)
    try:
        st = os.stat(folder / "cache.db")
        identity = (st.st_dev, st.st_ino)
    except OSError:
        return cache
    with state.default_lock:
        state.folders[spec] = (identity, cache)
        while len(state.folders) > MAX_FOLDERS:
            state.folders.popitem(last=False)
    return cache


def _diskcache_limit(cache: diskcache.Cache) -> int | str | None:
    """The size limit a ``diskcache.Cache`` was made with, as :class:`KernelCache` takes one.

    diskcache takes any value and fails only when it first evicts; here: an infinite one is the
    largest the database can record (diskcache's "no limit"), None is the folder's own.

    :raises CacheArgumentError: a value that is no size, naming where it came from.
    """
    value = cache.size_limit
    if isinstance(value, float) and value == float("inf"):
        return MAX_SIZE
    if value is None or isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise CacheArgumentError(f"diskcache.Cache(size_limit={value!r:.40}) is not a size cudamagic "
                             "can use: give bytes or a size such as '512MB'")


def _folder(directory: object) -> Path:
    """The folder a ``cache``/``directory`` argument names.

    :raises CacheArgumentError: it names none, or a home folder that cannot be found.
    """
    if isinstance(directory, (str, os.PathLike)):
        path = os.fspath(directory)
        if isinstance(path, str) and path.strip():
            return _expanded(path, f"cache={path!r}")
    raise CacheArgumentError(
        f"cache={directory!r} is not a cache: give a KernelCache, a diskcache.Cache, a folder "
        "(a str or pathlib.Path), or None for the default folder "
        "($CUDAMAGIC_CACHE_DIR or ~/.cache/cudamagic)")


def _expanded(path: str, origin: str) -> Path:
    """``path`` with ``~`` or ``~user`` expanded.

    :raises CacheArgumentError: the user or the home folder is unknown, or the name holds a
        NUL byte.
    """
    if "\0" in path:
        raise CacheArgumentError(f"{origin}: a folder name cannot hold a NUL byte")
    try:
        return Path(path).expanduser()
    except (RuntimeError, KeyError) as exc:
        user = path[1:].split("/", 1)[0]
        who = f"no user {user!r} is known here" if user else f"the home folder is unknown ({exc})"
        raise CacheArgumentError(f"{origin}: {who}, so {path.split('/', 1)[0]!r} names no "
                                 "folder; give an absolute path or one under ~/") from None


def default_cache_dir() -> Path:
    """``$CUDAMAGIC_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudamagic``, else ``~/.cache/cudamagic``.

    :raises CacheArgumentError: ``$CUDAMAGIC_CACHE_DIR`` names a ``~user`` that is not known,
        or the home folder cannot be found.
    """
    env = os.environ.get("CUDAMAGIC_CACHE_DIR")
    if env:
        return _expanded(env, f"$CUDAMAGIC_CACHE_DIR={env!r}")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is to be ignored
        return Path(xdg) / "cudamagic"
    return _expanded("~/.cache", "the default cache folder ~/.cache/cudamagic") / "cudamagic"


def default_cache() -> KernelCache:
    """The process-wide cache in :func:`default_cache_dir`, opened once.

    Reopened when :func:`default_cache_dir` names another folder (``$CUDAMAGIC_CACHE_DIR``
    changed).

    :raises CacheArgumentError: ``$CUDAMAGIC_CACHE_SIZE_LIMIT`` is not a size that keeps
        something, or ``$CUDAMAGIC_CACHE_DIR`` names no folder (see :class:`KernelCache`).
    """
    # the folder as the environment names it: a relative $CUDAMAGIC_CACHE_DIR is taken from the
    # current folder once, when the cache opens, and a later chdir does not move the cache
    spec = tuple(os.environ.get(v) for v in ("CUDAMAGIC_CACHE_DIR", "XDG_CACHE_HOME",
                                             *REMOTE_VARIABLES))
    with state.default_lock:
        if state.default is None or state.default_spec != spec:
            state.default, state.default_spec = KernelCache(), spec
        return state.default


def default_cache_opened() -> bool:
    """Whether this process has opened the default cache."""
    return state.default is not None


def reset() -> None:
    """Forget the default cache and the cache warnings already said (tests)."""
    state.reset()

