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

__all__ = ["ForkSafeLock", "once"]


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


class once:  # noqa: N801 - used as a decorator, like functools.cached_property
    """A value computed on first use and kept on the instance, like
    ``functools.cached_property`` but without its lock.

    Python 3.11's ``cached_property`` holds one lock per property for all instances while it
    computes: a fork while another thread computes one leaves the child's first use of that
    property, on any instance, waiting for ever. Here two threads may both compute the value;
    the first one stored is the one every caller gets.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        # a non-data descriptor: once the value is in the instance's __dict__, Python reads it
        # from there and this is not called again
        return obj.__dict__.setdefault(self.name, self.fn(obj))


def _after_fork_in_child() -> None:
    for lock in list(_all):
        lock._renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
