"""The process's SIGINT and SIGTERM handlers, kept as they were while NVRTC compiles.

NVRTC 13.0's front end installs handlers of its own for SIGINT and SIGTERM, for the whole
process, while a compile runs, and puts the previous ones back when it ends: a Ctrl-C (Jupyter's
"Interrupt the kernel" sends SIGINT) during the compile then ends the whole process with exit
status 4, saying nothing, instead of raising ``KeyboardInterrupt``. What it puts back also has
other flags (``SA_RESTART`` added): a blocking read that Ctrl-C should interrupt is restarted
instead. (NVRTC 13.5 installs none. Seen with ``sigaction`` during a compile held at a header's
open, tests/test_nvrtc_trace.py.)

:class:`KeptHandlers` takes the handlers' exact records (``sigaction``) when the first compile of
the process's current ones starts, and undoes NVRTC's changes only (a handler whose code lies in
NVRTC's library, or NVRTC's flags on the program's handler; a change the program makes meanwhile
is kept and becomes the record): where it is polled
(the caller's thread, while it waits for the compile thread: every :data:`POLL_S` in the
compile's first :data:`POLL_EARLY_S`, when NVRTC puts its own, ten times less often after), and
when the last compile ends. What is left: a signal that comes between NVRTC's putting its
handlers and the next poll meets NVRTC's; the poll needs the interpreter, so a C call that holds
it for long (a large sort on the main thread) widens that window.

Linux only (the record's layout is glibc's); elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any

from ...core.forksafe import ForkSafeLock
from ...core.process import at_fork

__all__ = ["KeptHandlers", "POLL_EARLY_S", "POLL_S", "kept"]

#: how often the waiting caller looks at the handlers in a compile's first POLL_EARLY_S (NVRTC
#: puts its own at the start), ten times less often after
POLL_S = 0.001
POLL_EARLY_S = 0.1

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: the flag the C library adds to every handler it installs (its return trampoline)
_SA_RESTORER = 0x04000000


class _Sigaction(ctypes.Structure):
    """glibc's ``struct sigaction`` (x86-64 and aarch64 Linux)."""

    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


class _DlInfo(ctypes.Structure):
    """glibc's ``Dl_info``: which loaded file an address lies in."""

    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


class KeptHandlers:
    """Counts the compiles running; holds the handlers as the program last set them.

    Only NVRTC's handlers are undone: a handler whose code lies in NVRTC's library
    (``dladdr``), or the program's own handler with the flags NVRTC's restore gave it. A change
    the program makes while a compile runs (ipykernel sets SIGINT ignored between cells and
    back for each; a handler of the program's own) is kept, and becomes the record.
    """

    def __init__(self) -> None:
        self._lock = ForkSafeLock()
        self._running = 0
        self._saved: dict[int, bytes] = {}
        self._replaced: dict[int, bytes] = {}
        self._libc: Any = None
        self._dladdr: Any = None
        self._nvrtc_code: dict[int, bool] = {}
        if sys.platform.startswith("linux"):
            try:
                self._libc = ctypes.CDLL(None, use_errno=True)
                self._libc.sigaction  # noqa: B018 - the symbol must be there
            except (OSError, AttributeError):
                self._libc = None
            for lib in (self._libc, "libdl.so.2"):
                try:
                    found = (lib if not isinstance(lib, str) else ctypes.CDLL(lib)).dladdr
                except (OSError, AttributeError):
                    continue
                found.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
                self._dladdr = found
                break

    def _is_nvrtcs(self, address: int | None) -> bool:
        """Whether ``address`` (a handler) is code of NVRTC's library."""
        if not address or self._dladdr is None:
            return False
        known = self._nvrtc_code.get(address)
        if known is None:
            info = _DlInfo()
            name: bytes = info.fname or b"" if self._dladdr(address, ctypes.byref(info)) else b""
            known = b"libnvrtc" in os.path.basename(name)
            self._nvrtc_code[address] = known
        return known

    @staticmethod
    def _same(a: bytes | None, b: bytes) -> bool:
        """Whether two records set the same handler: its address, its flags but the C
        library's own ``SA_RESTORER``, and the kernel's part of the mask (the first word; glibc
        leaves the rest of the record's mask as the buffer held it)."""
        if a is None:
            return False
        x, y = _Sigaction.from_buffer_copy(a), _Sigaction.from_buffer_copy(b)
        return (x.handler, x.flags & ~_SA_RESTORER, x.mask[0]) == \
            (y.handler, y.flags & ~_SA_RESTORER, y.mask[0])

    def _read(self, sig: int) -> bytes | None:
        record = _Sigaction()
        if self._libc.sigaction(int(sig), None, ctypes.byref(record)) != 0:
            return None
        return bytes(record)

    def _write(self, sig: int, raw: bytes) -> None:
        record = _Sigaction.from_buffer_copy(raw)
        self._libc.sigaction(int(sig), ctypes.byref(record), None)

    def enter(self) -> None:
        """A compile starts: the first takes the handlers' records."""
        if self._libc is None:
            return
        with self._lock:
            if self._running == 0:
                self._saved = {}
                for sig in _SIGNALS:
                    raw = self._read(sig)
                    if raw is not None:
                        self._saved[sig] = raw
            self._running += 1

    def restore(self) -> bool:
        """Undo NVRTC's change of each handler (see the class); whether one was undone."""
        if self._libc is None or not self._saved:
            return False
        changed = False
        with self._lock:
            for sig, raw in list(self._saved.items()):
                now = self._read(sig)
                if now is None or self._same(now, raw):
                    continue
                handler = _Sigaction.from_buffer_copy(now).handler
                replaced = self._replaced.get(sig)
                if self._is_nvrtcs(handler) or \
                        handler == _Sigaction.from_buffer_copy(raw).handler:
                    self._replaced.setdefault(sig, raw)  # what NVRTC saved, to put back
                    self._write(sig, raw)
                    changed = True
                elif replaced is not None and \
                        handler == _Sigaction.from_buffer_copy(replaced).handler:
                    # NVRTC, ending, put back what it had replaced, over a change the program
                    # made meanwhile (the record): the program's stays
                    self._write(sig, raw)
                    changed = True
                else:  # the program's own change: kept, and the record from now on
                    self._saved[sig] = now
        return changed

    def leave(self) -> None:
        """A compile has ended: undo what NVRTC left (its own restore changes the flags); the
        last one forgets the records."""
        if self._libc is None:
            return
        try:
            self.restore()
        finally:
            with self._lock:
                self._running -= 1
                if self._running <= 0:
                    self._running = 0
                    self._saved = {}
                    self._replaced = {}

    def forget(self) -> None:
        """A forked child: no compile of its parent's runs there."""
        self._running = 0
        self._saved = {}
        self._replaced = {}


kept = KeptHandlers()


def _after_fork_in_child() -> None:
    kept.forget()


at_fork(__name__, "kept", after_in_child=_after_fork_in_child, test=kept.forget)
