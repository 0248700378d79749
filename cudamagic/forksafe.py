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
from collections.abc import Callable
from typing import Any

from .process import at_fork

__all__ = ["ForkSafeLock", "once", "NativeSection"]


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


class NativeSection:
    """Calls into a native library whose own locks a fork may copy held.

    NVRTC holds a lock of its own during part of a compile: a child forked while another thread
    of its parent was there gets that lock held by a thread it does not have, and its first
    compile waits for ever. Each call into such a library runs inside ``with section:``. In a
    child forked while any call was inside, the first :meth:`check` runs ``probe`` (a call of
    the library's own that takes the same locks) on a thread of its own for at most
    ``probe_s``: if it returns, the library is usable; if not, this and every later call is
    refused with ``refuse(why)`` (the caller's error: this module is below the errors), instead
    of waiting.
    """

    __slots__ = ("what", "probe", "probe_s", "refuse", "_inside", "_count", "_suspect",
                 "refused", "__weakref__")

    def __init__(self, what: str, probe: Callable[[], object], probe_s: float,
                 refuse: Callable[[str], Exception]) -> None:
        self.what = what
        self.refuse = refuse
        self.probe = probe
        self.probe_s = probe_s
        self._inside = threading.Lock()
        self._count = 0
        self._suspect = False
        #: why this process must not call the library (its lock copied held), or None
        self.refused: str | None = None
        _sections.add(self)

    def check(self) -> None:
        """:raises: ``refuse(why)``: this process was forked while a call was inside, and the
        library's lock stayed held."""
        if self._suspect:
            with self._inside:
                if self._suspect:
                    self._suspect = False
                    if not self._probe_returns():
                        self.refused = (
                            f"{self.what} cannot be used in this process: it was forked while "
                            f"another thread of its parent was inside {self.what}, and the fork "
                            f"copied the lock that thread held, so a call here waits for ever "
                            f"(a probe did not return in {self.probe_s:g} s). Build before "
                            f"forking, or start worker processes with multiprocessing's "
                            f"'spawn' or 'forkserver' method; kernels already built or cached "
                            f"still load here")
        if self.refused is not None:
            raise self.refuse(self.refused)

    def _probe_returns(self) -> bool:
        done = threading.Event()

        def run() -> None:
            try:
                self.probe()
            except Exception:  # noqa: BLE001 - returned is what the probe asks
                pass
            done.set()

        threading.Thread(target=run, name=f"cudamagic-probe-{self.what}", daemon=True).start()
        return done.wait(self.probe_s)

    def __enter__(self) -> None:
        self.check()
        with self._inside:
            self._count += 1

    def __exit__(self, *exc: Any) -> None:
        with self._inside:
            self._count -= 1

    def fork_outside(self) -> int | None:
        """``os.fork()`` where no call of this process's is inside (none can enter meanwhile):
        the child's pid, 0 in the child, or None where a call was inside (a child would get
        the library's lock copied held) or no child could be made."""
        with self._inside:
            if self._count:
                return None
            try:
                return os.fork()
            except OSError:
                return None

    def _after_fork(self) -> None:
        self._inside = threading.Lock()
        self._suspect = self._suspect or self._count > 0
        self._count = 0


_sections: "weakref.WeakSet[NativeSection]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for lock in list(_all):
        lock._renew()
    for section in list(_sections):
        section._after_fork()


at_fork(__name__, "_all", after_in_child=_after_fork_in_child, covers=("_sections",))
