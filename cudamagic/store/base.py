"""The one interface every store of entry bytes implements: the disk store, the memory fallback
(and, later, a remote tier).

Modelled on CuPy's ``KernelCacheBackend`` (``load``/``save`` by name): a store moves the bytes
of encoded entries by key and keeps its own bookkeeping (sizes, last use, hits); what an entry
means and whether it can be trusted is :class:`~cudamagic.store.KernelCache`'s. Nothing in the
package asks which kind of store it holds.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Store", "StoredEntry", "Refused", "StoreUnavailable", "StoreBusy", "REMOTE_VARIABLES"]

#: The environment that configures the remote tier (:mod:`.remote`, imported only where the
#: first of them is set or a cache is given one).
REMOTE_VARIABLES = ("CUDAMAGIC_REMOTE_CACHE", "CUDAMAGIC_REMOTE_KEY_FILE",
                    "CUDAMAGIC_REMOTE_PASSWORD_FILE")


class Refused(Exception):
    """A stored value the store will not hand out (the reason is the message): a special file,
    someone else's file, a pickled value. The caller deletes it and rebuilds.

    Not an ``OSError``: diskcache takes an ``OSError`` from ``Disk.fetch`` for a file deleted
    by another process and answers a plain miss, and a refusal must say why.
    """


class StoreUnavailable(Exception):
    """The store cannot be used any more (its database is damaged, the disk is full, the folder
    went away); the message says what failed. The cache goes on in memory."""


class StoreBusy(StoreUnavailable):
    """Another process kept the store's database locked for longer than a cell waits
    (:data:`~cudamagic.store.disk.CACHE_WAIT_S`): this one call did not happen, and the store
    stays in use for the next."""


@dataclass(frozen=True)
class StoredEntry:
    """One stored value as a listing sees it, without counting as a use."""

    key: str
    size: int
    stored: float | None
    last_used: float | None
    read: Callable[[], bytes]  # the value, checked as a lookup checks it; raises Refused, OSError


class Store(abc.ABC):
    """Entry bytes by key, least recently used out first beyond the size limit.

    Every method may raise :class:`StoreUnavailable`.
    """

    #: Where the entries are, in words (a folder, or "memory (<why>)").
    location: str
    #: Why the entries are in memory rather than a folder (None: they are in a folder).
    in_memory: str | None = None

    @abc.abstractmethod
    def load(self, key: str) -> bytes | None:
        """The value stored under ``key`` (None: none); counts a hit or a miss.

        :raises Refused: a value that must not be read (the reason is the message).
        """

    @abc.abstractmethod
    def save(self, key: str, value: bytes) -> bool:
        """Store ``value`` under ``key``, replacing any; whether it is still there after the
        eviction the write caused."""

    @abc.abstractmethod
    def delete(self, key: str) -> bool:
        """Remove an entry; True if there was one."""

    @abc.abstractmethod
    def __contains__(self, key: str) -> bool: ...

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def __iter__(self) -> Iterator[str]: ...

    @abc.abstractmethod
    def volume(self) -> int:
        """Bytes the store holds (a folder: its database included)."""

    @abc.abstractmethod
    def overhead(self) -> int:
        """Bytes a size limit must leave beside the entries (a folder's database)."""

    @abc.abstractmethod
    def stored_limit(self) -> object:
        """The size limit the store keeps for later sessions, as stored (None: none kept)."""

    @abc.abstractmethod
    def set_limit(self, limit: int, *, keep: bool) -> None:
        """Evict beyond ``limit`` from now on (each write evicts); ``keep``: the folder keeps
        it for later sessions too."""

    @abc.abstractmethod
    def evict(self) -> None:
        """Evict down to the size limit now, and reclaim what killed writers left."""

    @abc.abstractmethod
    def clear(self) -> int:
        """Remove every entry; how many there were."""

    @abc.abstractmethod
    def stats(self) -> tuple[int, int]:
        """``(hits, misses)`` of lookups (a folder: across sessions)."""

    @abc.abstractmethod
    def unhit(self) -> None:
        """Count the last :meth:`load` that found an entry as a miss: its reader refused the
        value (damaged, stale headers, a name map that does not hold), so nothing was served."""

    @abc.abstractmethod
    def listing(self) -> list[StoredEntry]:
        """Every entry, without touching its last-use time."""

    @abc.abstractmethod
    def reclaim(self) -> int:
        """Remove what a killed writer left behind; how many files (none in memory)."""

    @abc.abstractmethod
    def flush(self) -> bool:
        """Wait (bounded) until the lookups' bookkeeping so far is written; whether it was."""

    @abc.abstractmethod
    def close(self) -> None:
        """Let go of open connections (they reopen on next use)."""

    @property
    @abc.abstractmethod
    def raw(self) -> object:
        """What the entries are kept in (tests write foreign values through it)."""
