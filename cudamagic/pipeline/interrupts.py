"""Ctrl-C during a build: held back from a compile's start to its stored entry, said at once,
raised after the build with what became of its result (:class:`Interrupts`)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
import time
from typing import Any

from ..errors import CompileInterrupted
from ..core.miss import Stored
from ..core.options import PROGRAM_NAME
from ..view.stored import stored_text

__all__ = ["Interrupts"]


class Interrupts:
    """Ctrl-C held back from a compile's start to its stored entry: NVRTC cannot be stopped
    inside a compile (Python sees the signal only once it returns), and what follows it (the
    nvJitLink link, the manifest, the type-reading compile, the store) would lose a finished
    compile if it were interrupted; so the build runs to its end and its result is kept, and
    the interrupt is raised after that (:meth:`raise_if_asked`). Only where Ctrl-C would raise
    KeyboardInterrupt (Python's own handler, on the main thread: IPython's during a cell); an
    ignored signal or a handler of the program's own is left alone."""

    #: said on stderr the moment Ctrl-C arrives (the build may go on for seconds)
    HEARD = ("cudamagic: interrupt received; the compile cannot be stopped half way: the cell "
             "stops once it ends")

    def __init__(self) -> None:
        self.asked = False
        self.asked_at: float | None = None
        self._previous: Any = None

    def __enter__(self) -> "Interrupts":
        import signal  # a compile's: a hit holds nothing
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._hold)
        return self

    def _hold(self, signum: int, frame: Any) -> None:
        if not self.asked:
            self.asked_at = time.perf_counter()
            print(self.HEARD, file=sys.stderr, flush=True)
        self.asked = True

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            import signal
            signal.signal(signal.SIGINT, self._previous)

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Ctrl-C raised as Python raises it, within: around a compile the compile server
        runs, which stops at once (its client kills it and raises CompileInterrupted)."""
        if self._previous is None:
            yield
            return
        import signal
        signal.signal(signal.SIGINT, self._previous)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, self._hold)

    def raise_if_asked(self, started: float, kept: Stored) -> None:
        """Raise the held interrupt, saying when it came into the build that began at
        ``started`` (``time.perf_counter()``), how long the build took, and what became of its
        result.

        :raises CompileInterrupted: Ctrl-C came during the build (a KeyboardInterrupt).
        """
        if self.asked:
            now = time.perf_counter()
            came = (self.asked_at if self.asked_at is not None else now) - started
            raise CompileInterrupted(f"compiling {PROGRAM_NAME} was interrupted {came:.1f} s "
                                    "into the build; a compile cannot be stopped half way, so "
                                    f"the build ran to its end ({now - started:.1f} s): "
                                    f"{stored_text(kept)}")
