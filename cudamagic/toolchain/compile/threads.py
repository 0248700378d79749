"""NVRTC's own threads: each compile on a new thread, with a large stack and the asynchronous
signals blocked; the caller waits, and a Ctrl-C is raised once NVRTC has returned.

NVRTC keeps its time-trace state per thread and clears it only when a traced compile succeeds:
after a traced compile fails, the thread's next successful compile, traced or not, writes the
trace to the name its own options give, which for an untraced compile is ``.json`` in the
process's current folder; where that cannot be opened NVRTC aborts the process. A new thread
starts with no trace state, and what a failed compile leaves ends with the thread; so no
compile of the package's is touched by another's state, nor leaves any to the caller's thread
(whose later compiles may be another library's). A compile that must run where a traced one
failed (the hints' compiles after a failed one) runs on a thread of its own too
(:func:`clean_thread`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ...core.forksafe import ForkSafeLock
from .signals import POLL_EARLY_S, POLL_S, kept

__all__ = ["on_own_thread", "clean_thread", "block_signals", "NVRTC_STACK"]

_T = TypeVar("_T")


def _runner(box: dict[str, Any], fn: Callable[..., Any], args: tuple,
            done: threading.Event) -> Callable[[], None]:
    """A compile thread's body: its signals blocked, ``fn(*args)``'s value or error put in
    ``box`` for the waiting caller, ``done`` set at its end."""
    def run() -> None:
        try:
            block_signals()
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller, which raises it
            box["error"] = exc
        finally:
            done.set()
    return run


def on_own_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` on a new thread, which the caller waits for.

    NVRTC cannot be interrupted: a Ctrl-C during the compile is raised once it has returned,
    as it would be were NVRTC called on the caller's thread. The thread gets
    :data:`NVRTC_STACK` whatever ``threading.stack_size()`` the program set
    (:func:`_start_with_stack`).
    """
    box: dict[str, Any] = {}
    done = threading.Event()
    run = _runner(box, fn, args, done)
    interrupted: BaseException | None = None
    started = time.perf_counter()
    kept.enter()  # NVRTC 13.0 replaces SIGINT's and SIGTERM's handlers: put back while it runs
    try:
        _start_with_stack(run)
        # an Event, not join(): a join that Ctrl-C interrupts can leave is_alive() False while
        # the thread still runs
        while not done.is_set():
            try:
                # NVRTC puts its handlers at the compile's start: looked for every POLL_S
                # then, later ten times less often
                early = time.perf_counter() - started < POLL_EARLY_S
                if not done.wait(POLL_S if early else 10 * POLL_S):
                    kept.restore()
            # Ctrl-C, or what a handler of the program's raised (sys.exit() in a SIGTERM
            # handler, a SIGALRM timeout): raised once NVRTC has returned, never leaving it
            # running behind an interpreter that ends
            except BaseException as exc:  # noqa: BLE001 - raised below
                interrupted = interrupted or exc
    finally:
        kept.leave()
    if interrupted is not None:
        raise interrupted
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def clean_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` on a new thread (its stack and signals as a compile thread's), from a
    thread that is itself NVRTC's: no signal keeping, the caller's thread already does."""
    box: dict[str, Any] = {}
    worker = _start_with_stack(_runner(box, fn, args, threading.Event()))
    worker.join()
    if "error" in box:
        raise box.pop("error")
    return box["value"]


#: the asynchronous signals the compile thread blocks: the kernel then delivers them to another
#: thread, so none interrupts a system call NVRTC is in (an ``open()`` of a header that waits,
#: on a FUSE or NFS folder, would fail with EINTR) nor runs NVRTC 13.0's own handler on its
#: thread (toolchain/compile/signals.py). Python runs its handlers on the main thread whichever thread
#: received one.
_ASYNC_SIGNALS = tuple(getattr(signal, n) for n in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGCHLD",
    "SIGIO", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGURG", "SIGCONT", "SIGTSTP", "SIGTTIN",
    "SIGTTOU") if hasattr(signal, n))


def block_signals() -> None:
    """Block :data:`_ASYNC_SIGNALS` on the calling thread (the compile thread; where the
    platform has no ``pthread_sigmask``, nothing)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)


#: The stack of the compile thread. NVRTC's front end recurses once per level of a template
#: instantiation: a thread made after ``threading.stack_size(1 << 20)`` dies (SIGSEGV, the
#: whole process) in a depth-200 instantiation that the main thread's 8 MiB compiles; the
#: compile thread gets eight times that, reserved but only touched as NVRTC goes deeper.
NVRTC_STACK = 64 << 20

_stack_lock = ForkSafeLock()


def _start_with_stack(run: Callable[[], None]) -> threading.Thread:
    """Start ``run`` on a daemon thread with :data:`NVRTC_STACK`, whatever the program's
    ``threading.stack_size()``, which is given back as it was. Where that stack cannot be had
    (an address-space limit), the thread gets the platform's default one, not the program's
    smaller setting. (``stack_size`` is per process: a thread another thread of the program
    starts in the same instant gets the larger stack too, which harms nothing.)"""
    with _stack_lock:
        previous = threading.stack_size()
        try:
            for size in (NVRTC_STACK, 0):
                threading.stack_size(size)
                worker = threading.Thread(target=run, name="cudamagic-nvrtc", daemon=True)
                try:
                    worker.start()
                    return worker
                except RuntimeError:  # "can't start new thread": no room for that stack
                    if size == 0:
                        raise
        finally:
            threading.stack_size(previous)
    raise AssertionError("unreachable")
