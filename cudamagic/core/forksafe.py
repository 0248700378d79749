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
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .process import at_fork

__all__ = ["ForkSafeLock", "once", "NativeSection", "WaitedSection"]


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


class WaitedSection:
    """Calls into a native library whose locks a fork must not copy held, each short enough
    for a fork to wait for (the CUDA driver's: a build asks it for the current device's
    architecture on whatever thread it runs). A fork waits until no call of this process's is
    inside (at most ``wait_s``), and holds new calls back until it is made: no thread of the
    package is inside the library when the child is made, so the child never inherits the
    library's lock held (its exit handlers and fork handlers take it in the child, where no
    thread is left to let it go). Where the wait runs out (a call that does not return: a
    synchronize behind a kernel that does not end), the fork goes on and says so on stderr.
    """

    __slots__ = ("what", "wait_s", "_inside", "_forking", "_idle", "_open", "__weakref__")

    def __init__(self, what: str, wait_s: float) -> None:
        self.what = what
        self.wait_s = wait_s
        self._renew()
        _waited.add(self)

    def _renew(self) -> None:
        # one entry per call inside: list.append and pop are single steps under the GIL, and
        # each side writes before it reads the other's (a call its entry, then the fork's flag;
        # a fork its flag, then the entries), so a call that enters as a fork begins is either
        # waited for or holds back: no lock taken per call
        self._inside: list[None] = []
        self._forking = False
        self._idle = threading.Event()  # set by the last call out while a fork waits
        self._open = threading.Event()  # set while no fork holds calls back
        self._open.set()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, a call into the library, inside the section."""
        inside = self._inside
        inside.append(None)
        while self._forking:  # a fork is being made: out again until it is
            self._leave(inside)
            self._open.wait()
            inside = self._inside
            inside.append(None)
        try:
            return fn(*args)
        finally:
            self._leave(inside)

    def _leave(self, inside: list[None]) -> None:
        inside.pop()
        if self._forking and not inside:
            self._idle.set()

    def before_fork(self) -> None:
        """Hold new calls back; wait for those inside (bounded)."""
        self._idle.clear()
        self._open.clear()
        self._forking = True
        if self._inside and not self._idle.wait(self.wait_s) and self._inside:
            print(f"cudamagic: a fork waited {self.wait_s:g} s for a call into "
                  f"{self.what} on another thread, which has not returned; the child is "
                  f"made now, and may hang where it meets {self.what}'s lock",
                  file=sys.stderr, flush=True)

    def after_fork_in_parent(self) -> None:
        """Let the calls held back in."""
        self._forking = False
        self._open.set()


_waited: "weakref.WeakSet[WaitedSection]" = weakref.WeakSet()


def _before_fork() -> None:
    for section in list(_waited):
        section.before_fork()


def _after_fork_in_parent() -> None:
    for section in list(_waited):
        section.after_fork_in_parent()


def _after_fork_in_child() -> None:
    for lock in list(_all):
        lock._renew()
    for section in list(_sections):
        section._after_fork()
    for waited in list(_waited):
        waited._renew()


at_fork(__name__, "_all", before=_before_fork, after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child, covers=("_sections", "_waited"))
