"""The memory store: what the cache falls back to when its folder cannot be used."""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Iterator

from .base import Store, StoredEntry

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Least-recently-used values in a dict, for this process only.

    Parameters
    ----------
    size_limit : int
    why : str
        Why the cache is in memory (shown as its location).
    """

    def __init__(self, size_limit: int, why: str) -> None:
        self.size_limit = size_limit
        self.in_memory = why
        self.location = f"memory ({why})"
        # key -> (value, stored, last used); the order is the order of use
        self._data: OrderedDict[str, tuple[bytes, float, float]] = OrderedDict()
        self.hits = self.misses = 0

    def load(self, key: str) -> bytes | None:
        if key not in self._data:
            self.misses += 1
            return None
        self.hits += 1
        value, stored, _ = self._data[key]
        self._data[key] = (value, stored, time.time())
        self._data.move_to_end(key)
        return value

    def save(self, key: str, value: bytes) -> bool:
        if not isinstance(value, bytes):
            raise TypeError("cudamagic's cache stores bytes only")
        now = time.time()
        self._data[key] = (value, now, now)
        self._data.move_to_end(key)
        self.evict()
        return key in self._data

    def evict(self) -> None:
        while self.volume() > self.size_limit and len(self._data) > 1:
            self._data.popitem(last=False)

    def delete(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._data))

    def volume(self) -> int:
        return sum(len(v) for v, _, _ in self._data.values())

    def overhead(self) -> int:
        return 0

    def stored_limit(self) -> object:
        return self.size_limit

    def set_limit(self, limit: int, *, keep: bool) -> None:
        self.size_limit = limit

    def clear(self) -> int:
        n = len(self._data)
        self._data.clear()
        return n

    def stats(self) -> tuple[int, int]:
        return self.hits, self.misses

    def unhit(self) -> None:
        self.hits, self.misses = self.hits - 1, self.misses + 1

    def listing(self) -> list[StoredEntry]:
        return [StoredEntry(key, len(value), stored, used, functools.partial(bytes, value))
                for key, (value, stored, used) in self._data.items()]

    def reclaim(self) -> int:
        return 0

    def flush(self) -> bool:
        return True

    def close(self) -> None:
        pass

    @property
    def raw(self) -> "MemoryStore":
        return self

    # what tests write foreign values through (``cache.raw.set``), as on diskcache
    def set(self, key: str, value: bytes, retry: bool = True) -> bool:
        """Store a raw value (tests)."""
        return self.save(key, value)

    def get(self, key: str, default=None, retry: bool = True):
        """A raw value (tests)."""
        value = self.load(key)
        return default if value is None else value
