"""Where NVRTC writes its time trace: a folder of this process's own, in memory where it can be.

Each process keeps one home folder per parent (``/dev/shm/cudamagic-traces-XXXX``) and holds an
exclusive ``flock`` on it for its whole life; every traced compile gets a fresh folder inside
it, removed when the compile ends. A process killed during a compile (kill -9, an abort) cannot
remove its home; the kernel drops its lock, and the next process's first traced compile removes
every home whose lock it can take. Ownership is the lock, never a process id: a process in
another pid namespace sharing ``/dev/shm`` (containers with a shared IPC namespace) sees none of
this one's pids, but the lock is the file system's and the same in every namespace.

A forked child does not use its parent's home (the parent removes it when it exits): it closes
its copy of the descriptor (which leaves the parent's lock held) and makes its own on its first
traced compile.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator

from ...core.forksafe import ForkSafeLock
from ...core.process import at_fork

__all__ = ["compile_folder", "TRACE_ROOM", "PREFIX"]

#: Free space (and file size limit) a traced compile needs. NVRTC aborts the whole process
#: ("LLVM ERROR: out of memory", SIGABRT) when it cannot write its trace, so a compile traces
#: only where the write cannot fail for want of room (far more than a CCCL-heavy cell's trace).
TRACE_ROOM = 256 << 20

#: The name every home folder starts with (another than earlier versions' pid-named
#: ``cudamagic-trace-PID-`` folders, which their own reapers judge by pid: they leave these be).
PREFIX = "cudamagic-traces-"

_lock = ForkSafeLock()
_homes: dict[str, tuple[str, int]] = {}  # parent -> (home, descriptor holding its lock)
_reaped: set[str] = set()
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0)


def compile_folder() -> str | None:
    """A fresh private folder for one compile's trace (the caller removes it), or None where a
    trace could not safely be written (the compile then runs without it)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft < TRACE_ROOM:
            return None
    except (ImportError, ValueError, OSError):  # pragma: no cover - not Linux
        pass
    for parent in _parents():
        try:
            st = os.statvfs(parent)
            if st.f_bavail * st.f_frsize < TRACE_ROOM or not os.access(parent, os.W_OK):
                continue
            home = _home(parent)
            if home is not None:
                return tempfile.mkdtemp(prefix="compile-", dir=home)
        except OSError:
            continue
    return None


def _parents() -> Iterator[str]:
    """Where a home may go: the temporary folder is asked for only when /dev/shm will not do
    (``gettempdir()`` probes its candidates by writing a file in each)."""
    yield "/dev/shm"
    yield tempfile.gettempdir()


def _home(parent: str) -> str | None:
    """This process's home in ``parent``, made (and its lock taken) on first use."""
    with _lock:
        if parent in _homes:
            home, _ = _homes[parent]
            if os.path.isdir(home):
                return home
            _forget(parent)  # removed under us (a user's rm -rf): make another
        if parent not in _reaped:
            _reaped.add(parent)
            reap(parent)
        for _ in range(3):  # another process's reaper may take a home in the instant it is made
            made = _locked_home(parent)
            if made is not None:
                _homes[parent] = made
                return made[0]
    return None


def _locked_home(parent: str) -> tuple[str, int] | None:
    """A new home with its lock held, or None where a reaper took it first."""
    home = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    fd = os.open(home, _NOFOLLOW_DIR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        now, held = os.stat(home, follow_symlinks=False), os.fstat(fd)
        if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return home, fd
    except OSError:  # locked by a reaper, or gone: it removes it
        pass
    os.close(fd)
    return None


def reap(parent: str) -> int:
    """Remove the homes in ``parent`` of this user's processes that ended without removing
    them: those whose lock can be taken (a live process holds its own). Returns how many."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return 0
    mine = {home for home, _ in _homes.values()}
    removed = 0
    for name in names:
        path = os.path.join(parent, name)
        if path in mine:
            continue
        try:
            fd = os.open(path, _NOFOLLOW_DIR)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its process is alive, in whatever pid namespace
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


def _forget(parent: str) -> None:
    _, fd = _homes.pop(parent)
    try:
        os.close(fd)
    except OSError:
        pass


@atexit.register
def _remove_homes() -> None:
    for parent in list(_homes):
        home, _ = _homes[parent]
        shutil.rmtree(home, ignore_errors=True)
        _forget(parent)


def _after_fork_in_child() -> None:
    # closing the child's copy of each descriptor leaves the parent's lock held (the lock
    # belongs to the open file, which the parent's descriptor still holds)
    for parent in list(_homes):
        _forget(parent)
    _reaped.clear()


at_fork(__name__, "_homes", after_in_child=_after_fork_in_child, covers=("_reaped",))
