"""Locks that a forked child gets back unheld.

A forked child is a copy of the one thread that forked: a lock another thread of the parent
held at that moment (writing a history file, initializing the driver) stays held in the child
with no thread left to release it, and the child's first build or launch waits forever (a
``multiprocessing`` Pool or a DataLoader made while a cell builds on another thread). The
package's locks are made here, and a child replaces each with a fresh one: what such a lock
guards is state of the parent's threads, which the child does not have.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A ``threading.Lock`` (``with``, ``acquire``, ``release``) that a forked child gets back
    unheld."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _all.add(self)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As :meth:`threading.Lock.acquire`."""
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        """As :meth:`threading.Lock.release`."""
        self._lock.release()

    def locked(self) -> bool:
        """Whether it is held."""
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def _renew(self) -> None:
        self._lock = threading.Lock()


_all: "weakref.WeakSet[ForkSafeLock]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_all):
        lock._renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
