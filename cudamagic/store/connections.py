"""diskcache's per-thread SQLite connections, closed only under the process's SQLite lock.

diskcache keeps each thread's connection in a ``threading.local``. A connection is closed when
nothing refers to it any more: when its thread ends, or when the ``Cache`` object is dropped
(``build(cache=path)`` and ``KernelCache(path)`` make one per call). That close runs SQLite
code (``sqlite3_close``, which takes SQLite's process-wide mutexes) on whatever thread drops the
last reference, outside :attr:`~cudamagic.store.state.ProcessState.sqlite`, so a fork could
copy a mutex held by it: the child then waited for ever in its first ``sqlite3.connect``
(issue 26 item 9, about one run in 250 of tests/test_store_fork.py's fork stress).

:class:`ThreadConnections` takes the ``threading.local``'s place. Its connections are never
freed by a dropped reference: when the ``Cache`` goes, or a thread ends, its connections become
orphans, and orphans are closed by :func:`close_orphans`, which runs with the SQLite lock held
(each time a thread opens a connection, and when a store opens). A forked child keeps the
orphans and the other threads' connections it inherited, neither used nor closed (closing runs
SQLite code on the parent's copy).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ..core.process import at_fork

__all__ = ["ThreadConnections", "close_orphans"]

_orphans: list[Any] = []  # connections no one will use again, to close under the lock
_inherited: list[Any] = []  # a forked child's copies of its parent's: never used nor closed
_all: "weakref.WeakSet[ThreadConnections]" = weakref.WeakSet()


def _adopt(slots: dict) -> None:
    """A dropped :class:`ThreadConnections`' connections, kept until :func:`close_orphans`
    (a finalizer: it may run on any thread, so it only moves references)."""
    for values in list(slots.values()):
        con = values.get("con")
        if con is not None:
            _orphans.append(con)
    slots.clear()


class ThreadConnections:
    """Per-thread attributes (diskcache sets ``pid`` and ``con``), as ``threading.local``, whose
    connections outlive their thread and their owner until :func:`close_orphans`."""

    def __init__(self) -> None:
        slots: dict[threading.Thread, dict[str, Any]] = {}
        object.__setattr__(self, "_slots", slots)
        weakref.finalize(self, _adopt, slots)
        _all.add(self)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._slots[threading.current_thread()][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "con":  # a thread opens a connection: diskcache does it under the lock
            close_orphans()
        self._slots.setdefault(threading.current_thread(), {})[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self._slots[threading.current_thread()][name]
        except KeyError:
            raise AttributeError(name) from None

    def _release_ended(self) -> None:
        """The connections of threads that have ended, made orphans."""
        for thread in [t for t in list(self._slots) if not t.is_alive()]:
            con = self._slots.pop(thread).get("con")
            if con is not None:
                _orphans.append(con)

    def _after_fork_in_child(self) -> None:
        me = threading.current_thread()
        for thread in [t for t in list(self._slots) if t is not me]:
            _inherited.append(self._slots.pop(thread))


def close_orphans() -> None:
    """Close the connections no one will use again (those of dropped caches and of ended
    threads). Call with the SQLite lock held."""
    for slots in list(_all):
        slots._release_ended()
    while _orphans:
        con = _orphans.pop()
        try:
            con.close()
        except Exception:  # noqa: BLE001 - a connection that cannot close is let go
            pass


def _after_fork_in_child() -> None:
    _inherited.extend(_orphans)
    _orphans.clear()
    for slots in list(_all):
        slots._after_fork_in_child()


at_fork(__name__, "_all", after_in_child=_after_fork_in_child,
        covers=("_orphans", "_inherited"))
