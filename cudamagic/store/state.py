"""What the store keeps per process, in one object: reset by tests, and in a forked child.

A forked child is a copy of one thread of its parent. SQLite's own per-process bookkeeping
(which connection holds which lock on which file, its mutexes) is copied as it stood at the
fork: a fork while a thread was inside a SQLite call leaves the child with a lock or a mutex
that no thread of its own will ever release, and its next write waits forever. So every SQLite
call the package makes holds :attr:`ProcessState.sqlite`, and a fork waits for it (its hooks
are registered with :mod:`cudamagic.core.process`): no thread of the package is inside SQLite when
the child is made.
The child then starts clean: a fresh lock, no bookkeeping inherited (the parent writes its own),
no bookkeeper thread, the default cache opened again on first use (its connection is
diskcache's to replace: it reconnects when the process id changes), and the warnings said
afresh.

Where the fork cannot wait (a thread held the lock longer than :data:`FORK_WAIT_S`, a
database another process keeps locked), the child must not touch SQLite at all: every cache in
it goes on in memory, with a warning.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..core.process import at_fork

__all__ = ["ProcessState", "state", "FORK_WAIT_S", "MAX_FOLDERS"]

#: Folder caches kept open for builds that name a folder (``build(..., cache="path")``).
MAX_FOLDERS = 16

#: How long a fork waits for a thread of the package to leave SQLite. The lock is held only
#: across one statement's short busy timeout (:data:`~cudamagic.store.disk.BUSY_S`): a
#: database another process keeps locked is waited on with the lock released, so a fork never
#: waits on another process; past this (a statement stuck on a dead disk) the child goes on in
#: memory.
FORK_WAIT_S = 5.0


class ProcessState:
    """The store's per-process state.

    Attributes
    ----------
    sqlite : threading.Lock
        Held around every SQLite call of the package (and by a fork, see the module).
    warned : set of (str, str)
        The (what, where) of the cache warnings already said in this process.
    default : KernelCache or None
        The default cache, once opened, and ``default_spec``, what it was opened for.
    folders : OrderedDict
        The caches :meth:`KernelCache.wrap` opened for folders named by path, reused by later
        builds naming the same folder (at most :data:`MAX_FOLDERS`, least recently used out).
    sqlite_unsafe : str or None
        Why SQLite must not be touched in this process (a fork that could not wait), or None.
    bookkeeper : object or None
        The disk store's writer of hit counts and last-use times (made on first use).
    """

    def __init__(self) -> None:
        self.sqlite = threading.Lock()
        self.warned: set[tuple[str, str]] = set()
        self.default: Any = None
        self.default_spec: tuple[str | None, ...] | None = None
        self.default_lock = threading.Lock()
        self.making = threading.Lock()  # made on first use: the bookkeeper
        self.folders: OrderedDict[tuple[str, ...], tuple[tuple[int, int], Any]] = OrderedDict()
        self.sqlite_unsafe: str | None = None
        self.bookkeeper: Any = None
        self._fork_held = False
        # what a child inherited and must neither use nor close (closing runs SQLite code)
        self._inherited: list[Any] = []

    def reset(self) -> None:
        """Forget the default cache, the folder caches and the warnings said (tests; a forked
        child)."""
        with self.default_lock:
            if self.default is not None:
                self._inherited.append(self.default)
            self.default = self.default_spec = None
            self._inherited.extend(self.folders.values())
            self.folders.clear()
        self.warned.clear()

    def before_fork(self) -> None:
        """Wait until no thread of the package is inside SQLite (bounded), and hold it so.

        The bookkeeper's queue is not waited for: the child drops it and the parent writes it
        (waiting would wait on whichever process holds the database)."""
        self._fork_held = self.sqlite.acquire(timeout=FORK_WAIT_S)

    def after_fork_in_parent(self) -> None:
        """Let the parent's threads back into SQLite."""
        if self._fork_held:
            self._fork_held = False
            self.sqlite.release()

    def after_fork_in_child(self) -> None:
        """Start clean (see the module)."""
        if not self._fork_held:
            self.sqlite_unsafe = ("this process was forked while another thread of its parent "
                                  "was inside SQLite")
        self._fork_held = False
        self.sqlite = threading.Lock()
        self.default_lock = threading.Lock()
        self.making = threading.Lock()
        if self.bookkeeper is not None:
            self.bookkeeper.forget()
        self.reset()


state = ProcessState()

at_fork(__name__, "state", before=state.before_fork, after_in_parent=state.after_fork_in_parent,
        after_in_child=state.after_fork_in_child, test=state.reset)
