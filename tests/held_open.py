"""A file whose next open, by any thread, waits until the test lets it go: a write lease.

A test of a race between a thread inside a native call and a fork must make the race happen,
not hope for it. NVRTC opens each header a cell includes inside its front end, where it holds
its lock (tests/test_compile_thread.py): a header under a write lease (``fcntl`` ``F_SETLEASE``)
keeps that open waiting, and the kernel tells the lease's holder (SIGIO) the moment the open
arrives. The test forks then, and :meth:`HeldOpen.release` lets the open, and the compile, go
on. The kernel's ``lease-break-time`` (45 s by default) bounds the wait should a test never
release it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from pathlib import Path


class LeaseUnavailable(RuntimeError):
    """This file system or kernel gives no write lease here (leases off, a file system
    without them)."""


class HeldOpen:
    """``path`` written with ``text`` and held under a write lease until :meth:`release`.

    Made on the main thread (where the SIGIO handler runs). :meth:`opened` waits until
    another open of the file has arrived and is waiting.

    :raises LeaseUnavailable: no lease could be taken (the reason is the error's text).
    """

    def __init__(self, path: str | os.PathLike, text: str = "// held\n") -> None:
        self.path = Path(path)
        self.path.write_text(text)
        self._arrived = threading.Event()
        self._previous = signal.signal(signal.SIGIO, lambda *_: self._arrived.set())
        self._handling = True
        self._fd: int | None = os.open(self.path, os.O_WRONLY)
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError as exc:
            self.release()
            raise LeaseUnavailable(f"no write lease on {self.path}: {exc}") from exc

    def opened(self, timeout: float) -> bool:
        """Whether an open of the file arrived (and waits) within ``timeout`` seconds."""
        return self._arrived.wait(timeout)

    def let_go(self) -> None:
        """Give the lease up from any thread: the waiting open goes on. Idempotent. The SIGIO
        handler stays until :meth:`release` (the main thread's to call)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor ends its lease

    def release(self) -> None:
        """Give the lease up and put the SIGIO handler back (on the main thread). Idempotent."""
        self.let_go()
        if self._handling:
            signal.signal(signal.SIGIO, self._previous)
            self._handling = False

    def __enter__(self) -> "HeldOpen":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
