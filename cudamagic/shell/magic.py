"""The IPython shell over :mod:`cudamagic.pipeline.steps`: ``%%cuda``, ``%cuda_cache``, ``%cuda_load``
and ``%cuda_info``.

Thin on purpose: parse the line, call the pipeline, push the names, show the report. Everything
else lives in the pipeline modules, which know no IPython.
"""

from __future__ import annotations

import builtins
import contextvars
import inspect
import os
import shlex
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import (Magics, line_cell_magic, line_magic, magics_class,
                                no_var_expand)
from IPython.core.magic_arguments import argument, magic_arguments

from ..core.forksafe import ForkSafeLock
from ..errors import OptionError
from ..core.options import (DEFAULT_MODULE, PROGRAM_NAME, magic_help, module_name_free,
                            parse_magic_line)
from ..core.process import at_fork
from ..core.units import counted

if TYPE_CHECKING:  # pragma: no cover
    from ..view.widget import Frontend

__all__ = ["CudaMagics"]

#: A compile that takes longer than this shows that it is compiling.
NOTICE_AFTER_S = 0.5


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _server_command(word: str | None) -> str:
    """``%cuda_cache server [stop]``: the compile server's state, or its end, in words."""
    from .info import server_text
    from ..pipeline.steps import SERVED

    if word not in (None, "stop"):
        raise OptionError(f"%cuda_cache server takes stop or nothing (got {word!r})")
    facts = SERVED.status()
    if word is None:
        return f"compile server: {server_text(facts)}"
    if facts is None or not SERVED.stop():
        return "no compile server serves this notebook"
    return f"the compile server (pid {facts.pid}) was stopped; the next miss starts another"


def _age_seconds(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds.

    :raises OptionError: not an age.
    """
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * _AGE_UNITS[t[-1]] if t[-1:] in _AGE_UNITS else float(t)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise OptionError(f"%cuda_cache clear --older-than {text!r}: give an age such as 30s, "
                          "15m, 12h, 7d or 2w")
    return value


def _parse(magic, line: str):
    """A line magic's arguments through IPython's ``magic_arguments``; its errors (an unknown
    flag, an unbalanced quote) as the project's own."""
    try:  # POSIX quoting, as a shell and the %%cuda line have it (IPython's own keeps quotes)
        return magic.parser.parse_args(shlex.split(line))
    except (UsageError, ValueError) as exc:
        raise OptionError(f"%{magic.__name__}: {exc}; see %{magic.__name__}?") from None


def _help_asked(magics: Any, name: str, line: str) -> bool:
    """Whether a line magic's line asks for its help (``-h`` or ``--help`` first): then the
    help is printed, as ``%%cuda -h`` does, and nothing else is done."""
    words = line.split(None, 1)
    if not words or words[0] not in ("-h", "--help"):
        return False
    shell = getattr(magics, "shell", None)
    found = shell.object_inspect(f"%{name}") if shell is not None else {}
    if found.get("found") and found.get("docstring"):
        print(found["docstring"])  # the help ``%name?`` shows, whole
    else:
        print(inspect.cleandoc(getattr(type(magics), name).__doc__ or ""))
    return True


@contextmanager
def _compile_notice(shell, program: str):
    """Show "compiling..." once a compile has run ``NOTICE_AFTER_S``, then the time it took.

    NVRTC releases the GIL while it compiles, so a timer thread can speak up meanwhile. In a
    Jupyter front end the notice is one output, made when the notice is due (a compile that
    ends sooner leaves no output: ``-q`` means none) and then updated in place by its display
    id; in a terminal it is a line on stderr.
    """
    in_kernel = getattr(shell, "kernel", None) is not None
    said = _Notice(program, in_kernel)
    # the timer runs in this cell's context, so its output goes to this cell
    timer = threading.Timer(NOTICE_AFTER_S, contextvars.copy_context().run, args=(said.start,))
    timer.daemon = True
    timer.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        timer.cancel()
        said.finish(failed)


class _Notice:
    """The compile notice's one output: made when due, then ended, never after its end."""

    def __init__(self, program: str, in_kernel: bool) -> None:
        self.program, self.in_kernel = program, in_kernel
        self.started = time.perf_counter()
        self.lock = ForkSafeLock()
        self.handle = None
        self.shown = self.over = False

    def _say(self, text: str, html: str) -> None:
        if not self.in_kernel:
            print(text, file=sys.stderr, flush=True)
            return
        from IPython.display import display

        bundle = {"text/plain": text, "text/html": html}
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def start(self) -> None:
        """The compile is still running: say so."""
        with self.lock:
            if self.over:
                return
            self.shown = True
            text = f"compiling {self.program} with NVRTC..."
            self._say(text, f"<i>&#9203; {text}</i>")

    def finish(self, failed: bool) -> None:
        """The compile ended: where the notice was shown, say how long it took."""
        with self.lock:
            self.over = True
            if not self.shown:
                return
            took = f"{time.perf_counter() - self.started:.1f} s"
            text = (f"compiling {self.program} failed after {took}" if failed
                    else f"compiled {self.program} in {took}")
            self._say(text, f"<i>{text}</i>")


def frontend(shell: Any) -> "Frontend":
    """Where this shell shows a report: IPython's ``display``, and in a Jupyter kernel the
    widget protocol's comms (``comm.create_comm``); a terminal has no comm, so text. The one
    place the views' displays meet IPython and comm."""
    from IPython.display import display

    from ..view.widget import Frontend

    if getattr(shell, "kernel", None) is None:
        return Frontend(display=lambda bundle: display(bundle, raw=True))
    from comm import create_comm

    return Frontend(display=lambda bundle: display(bundle, raw=True), open_comm=create_comm)


def _shell_names(shell) -> tuple[str, ...]:
    """Names IPython put in the namespace and relies on (get_ipython, In, Out, exit...): a
    kernel pushed over one would break the notebook, so none takes them."""
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    return tuple(n for n in hidden if n.isidentifier())


def _cell_id(shell) -> str | None:
    """The identity IPython gives the cell being run (a notebook cell's id, which the notebook
    keeps across restarts), or None (a terminal, or a cell run without one)."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    cell = getattr(getattr(result, "info", None), "cell_id", None)
    return cell if isinstance(cell, str) and cell else None


def install_debug_hooks(shell: Any) -> None:
    """What the shell adds for the debugging loop, once per shell: a lost CUDA context explained
    wherever it surfaces (every error IPython shows passes ``_showtraceback``, which other
    extensions wrap too: this wraps whatever is there), and after a cell that launched a kernel
    writing to the device's output (printf, assert), a synchronize, so its text lands in that
    cell's output."""
    if shell is None or getattr(shell, "_cudamagic_debug_hooks", False):
        return
    shell._cudamagic_debug_hooks = True
    previous = shell._showtraceback

    def showtraceback(etype: Any, evalue: Any, stb: Any) -> Any:
        return previous(etype, evalue, list(stb) + _crash_lines(evalue))

    shell._showtraceback = showtraceback
    shell.events.register("post_run_cell", _flush_device_output)


def _crash_lines(evalue: Any) -> list[str]:
    """The advice a lost context adds to an error another library raised (cudamagic's own
    ContextPoisonedError says it in its message). Only an error that carries a CUDA error
    code imports the advice's view."""
    from ..errors import ContextPoisonedError
    from ..toolchain.device import driver

    try:
        code = driver.sticky_of(evalue)
        if code is None or isinstance(evalue, ContextPoisonedError):
            return []
        from ..view.debug import crash_lines

        device = driver.note_lost(code)
        return crash_lines(code, device, _last_launch(), driver.first_telling(device))
    except Exception:  # noqa: BLE001 - the error being shown matters more than the advice
        return []


#: the module whose launch functions note the last launch and a pending device print
_LAUNCHER = "cudamagic.launch.launcher"


def _last_launch() -> Any:
    """The last launch noted (None before the first launch: the launch code is then not even
    imported, and this imports none of it)."""
    launcher = sys.modules.get(_LAUNCHER)
    return None if launcher is None else launcher.LAST_LAUNCH[0]


def _flush_device_output(result: Any = None) -> None:
    """post_run_cell: after a cell that launched a printing kernel, wait for the device, so
    the driver writes its printf buffer (or a failed assert's message) into this cell. It runs
    after every cell: until the launch code is imported (the first launch) no kernel can have
    printed, and it imports nothing."""
    launcher = sys.modules.get(_LAUNCHER)
    if launcher is None or not launcher.PRINT_PENDING[0]:
        return
    launcher.PRINT_PENDING[0] = False
    from ..errors import ContextPoisonedError, CudaMagicError
    from ..toolchain.device import driver
    from ..view.debug import crash_lines

    try:
        driver.synchronize()
    except ContextPoisonedError as exc:
        code = driver.Sticky(exc.code) if exc.code is not None else driver.Sticky.LAUNCH_FAILED
        device = exc.device if exc.device is not None else -1
        lines = crash_lines(code, device, launcher.LAST_LAUNCH[0], not exc.repeated)
        print("\n".join(lines).strip(), file=sys.stderr)
    except CudaMagicError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()


#: what a ``%%cuda`` cell's hit imports, and what a notebook's report adds: the warm-up imports
#: them (tests/test_import_cost.py: after it, a hit cell imports nothing; tests/test_hit_reach.py)
HIT_PATH = ("cudamagic.core.miss", "cudamagic.pipeline.steps", "cudamagic.pipeline.explain",
            "cudamagic.view.widget")
#: what a notebook's report adds to it: the timing fold (occupancy from the CUBIN) and comm
NOTEBOOK_PATH = ("cudamagic.toolchain.device.occupancy", "cudamagic.view.bench", "comm")

#: a cell's source for :func:`_first_use`: one template kernel, which a hit's hints read
_WARM_SOURCE = "template <int N> __global__ void k(float* x) { x[N] = 0.f; }\n"


def _first_use() -> None:
    """What a process's first hit does once and keeps, done by the warm-up after its imports
    (docs/performance.md): the magic line's parser and its expressions, the hints' and
    ``--arch``'s expressions, the toolkit's folders, cu++filt looked up and libstdc++ loaded.
    Each is the same call a cell makes, on a sample. The toolkit and cu++filt follow
    ``CUDA_HOME``, ``PATH`` and ``sys.path``: where a cell changes them afterwards, the next
    ``%%cuda`` cell looks again. Nothing is written, no cache is opened, no driver is asked."""
    from ..cxx.kernel_names import template_kernels
    from ..core.options import normalize_arch, parse_magic_line
    from ..toolchain.binary.demangle import concrete_demangler, default_demangler
    from ..core.toolkit import toolkit

    parse_magic_line("-q -n k<1>")
    normalize_arch("sm_90")
    template_kernels(_WARM_SOURCE)
    concrete_demangler()
    default_demangler()
    toolkit()


#: the name of the warm-up's thread (tests and benchmarks watch for it)
WARM_THREAD = "cudamagic-warm"


class _Warmup:
    """The first ``%%cuda`` cell's imports, done while the notebook waits for it (issue 38).

    ``%load_ext`` imports only what registers the magics; the pipeline, the cache and the
    report (:data:`HIT_PATH`, with :data:`NOTEBOOK_PATH` in a notebook: most of a first hit
    cell, docs/performance.md) would come with
    the first ``%%cuda`` cell. Once the cell that ran ``%load_ext`` has finished (IPython's
    ``post_run_cell``, once), a background thread imports them, so that cell pays nothing for
    them and the user's next cell finds them done. A ``%%cuda`` cell that comes before the
    thread is done waits for it (its report counts the wait as imports): never two imports of
    the package at once. A fork waits for it first (a child must not inherit an import that a
    thread of its parent held), at most :attr:`FORK_WAIT_S`.
    """

    FORK_WAIT_S = 10.0

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        # set when the thread's work ends: waited on, never join(), which a Ctrl-C can leave
        # saying the thread ended while it still imports (CPython issue 45274)
        self.done = threading.Event()
        self._lock = ForkSafeLock()

    def start(self, names: tuple[str, ...] = ()) -> None:
        """Start the warm-up thread, importing ``names`` (default :data:`HIT_PATH`), unless it
        was started before in this process."""
        with self._lock:
            if self.thread is not None:
                return
            names = names or HIT_PATH
            self.thread = threading.Thread(target=self._run, args=(self.done, names),
                                           name=WARM_THREAD, daemon=True)
            self.thread.start()

    @staticmethod
    def _run(done: threading.Event, names: tuple[str, ...]) -> None:
        import importlib

        try:
            for name in names:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - the cell's own import says what is wrong
                    return
            try:
                _first_use()
            except Exception:  # noqa: BLE001 - the cell meets it again and says what is wrong
                pass
        finally:
            done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread's work, where one runs (not from the thread itself); False where
        it is still running after ``timeout``."""
        if self.thread is not None and self.thread is not threading.current_thread():
            return self.done.wait(timeout)
        return True

    def forget(self) -> None:
        """A forked child's side: its parent's thread is not its own."""
        self.thread = None
        self.done = threading.Event()


_WARMUP = _Warmup()


#: set when the driver thread ``%load_ext`` started last in this process has ended (its Event:
#: cudamagic.load_ipython_extension)
_DRIVER: list[threading.Event | None] = [None]


def note_driver_thread(done: threading.Event) -> None:
    """Keep the Event of ``%load_ext``'s driver thread, which a fork waits for (bounded, as for
    the warm-up): a child must not inherit an import of the launch code that the thread held;
    and so does the interpreter's exit: a process that ends while the thread is inside the
    driver (making the context, docs/performance.md) ended with a failing status, its work
    done."""
    import atexit

    if _DRIVER[0] is None:
        atexit.register(_join_driver_at_exit)
    _DRIVER[0] = done


def _join_driver_at_exit() -> None:
    done = _DRIVER[0]
    if done is not None:
        done.wait(_Warmup.FORK_WAIT_S)


def _wait_for_threads() -> None:
    """Before a fork: the warm-up's work and the driver thread's, each at most FORK_WAIT_S.
    A Ctrl-C meanwhile does not cut the wait short (the child would inherit a held import, and
    CPython drops what a fork's hook raises): it is said on stderr."""
    deadline = time.monotonic() + _Warmup.FORK_WAIT_S
    waits = [("the warm-up", lambda t: _WARMUP.wait(t)),
             ("the driver thread", lambda t: _DRIVER[0].wait(t) if _DRIVER[0] else True)]
    for what, wait in waits:
        while True:
            try:
                if not wait(max(0.0, deadline - time.monotonic())):
                    print(FORK_WAIT_EXPIRED.format(what, _Warmup.FORK_WAIT_S), file=sys.stderr,
                          flush=True)
                break
            except KeyboardInterrupt:
                print(FORK_WAIT_INTERRUPTED, file=sys.stderr, flush=True)


#: said when a fork has waited its most for a thread that is still running
FORK_WAIT_EXPIRED = ("cudamagic: a fork waited {1:g} s for {0} of cudamagic, which is still "
                     "running (an import or a file system that does not answer?); the child is "
                     "made now, and may hang if it imports what that thread holds")

#: said when Ctrl-C comes while a fork waits for the threads
FORK_WAIT_INTERRUPTED = ("cudamagic: Ctrl-C while a fork waited for cudamagic's background "
                         "imports: the fork waits on (a child must not inherit an import held "
                         "half done); Python drops an interrupt during a fork")


def _forget_threads() -> None:
    _WARMUP.forget()
    _DRIVER[0] = None


at_fork(__name__, "_WARMUP", before=_wait_for_threads, after_in_child=_forget_threads,
        test=_forget_threads, covers=("_DRIVER",))


def _install_warmup(shell: Any) -> None:
    """Start the warm-up after the cell that loads the extension (a shell without IPython's
    events, or a process where it ran already, gets none)."""
    events = getattr(shell, "events", None)
    if events is None or _WARMUP.thread is not None:
        return
    hook = _WarmupHook()
    hook.notebook = getattr(shell, "kernel", None) is not None  # a front end that draws HTML
    if not any(isinstance(f, _WarmupHook) for f in events.callbacks.get("post_run_cell", ())):
        events.register("post_run_cell", hook)
        hook.events = events


class _WarmupHook:
    """``post_run_cell``, once: start the warm-up and unregister."""

    events: Any = None
    notebook = True

    def __call__(self, result: Any = None) -> None:
        if self.events is not None:
            try:
                self.events.unregister("post_run_cell", self)
            except ValueError:
                pass
        names = HIT_PATH + (NOTEBOOK_PATH if self.notebook else ())
        if all(name in sys.modules for name in names):
            return  # a cell did it all already (a %load_ext run without a cell of its own)
        _WARMUP.start(names)


def _bodiless_cuda_cell(lines: list[str]) -> list[str]:
    """IPython's input transformer for a cell that is a ``%%cuda`` line alone: give it an empty
    line as its body, so that the magic answers (``-h`` the help; otherwise that the cell holds no
    CUDA C++) where IPython would refuse it first ("the cell body is empty")."""
    if not lines or any(line.strip() for line in lines[1:]):
        return lines
    first = lines[0]
    if first == "%%cuda" or first.startswith(("%%cuda ", "%%cuda\n")):
        return [first if first.endswith("\n") else first + "\n", "\n"]
    return lines


@magics_class
class CudaMagics(Magics):
    """``%%cuda``: compile a cell with NVRTC (cached) and push its kernels into the notebook."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        install_debug_hooks(shell)
        _install_warmup(shell)
        cleanup = getattr(shell, "input_transformers_cleanup", None)
        if cleanup is not None and _bodiless_cuda_cell not in cleanup:
            cleanup.append(_bodiless_cuda_cell)

    # no $var/{expr} expansion of the line: braces and dollars are C++ there (S{1}, operator$),
    # and IPython's expansion of a line with 1000 -n options takes seconds
    @no_var_expand
    @line_cell_magic
    def cuda(self, line: str, cell: str | None = None):
        started = time.perf_counter()  # the report's time is the cell's, from here
        if cell is None:  # %cuda (one %): the help, and where the cell magic goes
            print("%%cuda is a cell magic: its line holds the options and the cell below it "
                  "the CUDA C++.\n\n" + (CudaMagics.cuda.__doc__ or ""))
            return
        _WARMUP.wait()  # the warm-up's imports, where it runs: the ones below are then done
        from ..core.miss import BuildPhase
        from ..pipeline.steps import build_module

        t = time.perf_counter()
        imports = t - started
        opts = parse_magic_line(line)
        if opts is None:  # -h, --help
            print(CudaMagics.cuda.__doc__)
            return
        module_name_free(opts.module, _shell_names(self.shell))
        phases = {BuildPhase.IMPORTS: imports, BuildPhase.PARSE: time.perf_counter() - t}
        if opts.arch is None:  # the build asks the driver for the GPU's arch: start it here, timed
            t = time.perf_counter()
            from ..toolchain.device import driver

            driver.available()
            if time.perf_counter() - t > 5e-4:  # only where this cell started it
                phases[BuildPhase.DRIVER] = time.perf_counter() - t
        with _warnings_said_in_report() as said:
            module = build_module(cell, opts, line_offset=1,
                                  compile_notice=None if opts.quiet else (
                                      lambda: _compile_notice(self.shell, PROGRAM_NAME)),
                                  reserved=_shell_names(self.shell),
                                  cell=_cell_id(self.shell))
        t = time.perf_counter()
        said += self._push(opts.module, module)
        phases[BuildPhase.PUSH] = time.perf_counter() - t
        annotation = None
        if opts.annotate:
            t = time.perf_counter()
            annotation = module.annotate()
            phases[BuildPhase.ANNOTATE] = time.perf_counter() - t
        self._show(module, module.report.with_warnings(tuple(said)).with_timings(phases),
                   started, opts.quiet, annotation=annotation)

    cuda.__doc__ = magic_help()

    @magic_arguments()
    @argument("path", help="the file: a CUBIN, PTX or fatbin (nvcc -cubin, -ptx, -fatbin); "
                           "quote a path with spaces")
    @argument("--arch", default=None, metavar="sm_XX",
              help="the target a fatbin's CUBIN is picked for and PTX is compiled for "
                   "(default the current device's, sm_90 without a GPU)")
    @argument("-n", "--name-expression", action="append", default=[], metavar="EXPR",
              help='a kernel to find by its C++ name, e.g. -n "ns::scale<float, 3>" '
                   "(repeatable; found by demangling the CUBIN's symbols)")
    @argument("--module", default=DEFAULT_MODULE, metavar="NAME",
              help=f"Python name of the module object (default {DEFAULT_MODULE})")
    @argument("-q", "--quiet", action="store_true", help="show no report")
    @line_magic
    def cuda_load(self, line: str):
        """Load a CUBIN, PTX or fatbin built elsewhere and push its kernels, as %%cuda does.

        Kernels are found by demangling the CUBIN's symbols (a CUBIN from elsewhere has no
        stored name map); extern "C" and non-template kernels are pushed by their plain name.
        """
        if _help_asked(self, "cuda_load", line):
            return None
        started = time.perf_counter()
        from ..pipeline.api import load_cubin

        ns = _parse(self.cuda_load, line)
        module_name_free(ns.module, _shell_names(self.shell))
        with _warnings_said_in_report() as said:
            module = load_cubin(os.path.expanduser(ns.path), ns.name_expression, arch=ns.arch,
                                module=ns.module, reserved=_shell_names(self.shell))
        said += self._push(ns.module, module)
        self._show(module, module.report.with_warnings(tuple(said)), started, ns.quiet)

    @magic_arguments()
    @argument("command", nargs="?", default="stats",
              choices=("stats", "list", "clear", "limit", "remote", "server"),
              help="stats (default): entries, size, hits and misses, the folder; "
                   "list: entries, newest first; clear: remove entries; "
                   "limit: show or set the size limit; remote: the team cache's server, "
                   "hits, misses, bytes, errors and latency; server: the compile server "
                   "serving this notebook (server stop: end it)")
    @argument("size", nargs="?", default=None,
              help="for limit: the new size limit, e.g. 512MB, 2GiB, 1073741824 (bytes); kept "
                   "by the folder for later sessions")
    @argument("--older-than", metavar="AGE", default=None,
              help="for clear: only entries last used longer ago than AGE: a number and a unit, "
                   "s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. 30s, "
                   "15m, 12h, 7d")
    @argument("--pch", action="store_true",
              help="for clear: remove the precompiled headers (docs/cache.md), not the entries")
    @line_magic
    def cuda_cache(self, line: str):
        """Inspect and manage the CUBIN cache (the folder in $CUDAMAGIC_CACHE_DIR, else
        ~/.cache/cudamagic). Each command returns a record shown as text or a table."""
        if _help_asked(self, "cuda_cache", line):
            return None
        from ..store import default_cache
        from ..toolchain.compile.pch import clear as pch_clear
        from ..view.records import CacheListing, CacheStats, RemoteCacheStats, limit_words

        ns = _parse(self.cuda_cache, line)
        if ns.command == "server":
            return CacheStats.of(default_cache(), _server_command(ns.size))
        if ns.size is not None and ns.command != "limit":
            raise OptionError(f"%cuda_cache {ns.command} takes no size; did you mean "
                              f"%cuda_cache limit {ns.size}?")
        if (ns.older_than is not None or ns.pch) and ns.command != "clear":
            raise OptionError("--older-than and --pch go with %cuda_cache clear")
        if ns.older_than is not None and ns.pch:
            raise OptionError("%cuda_cache clear --pch removes every precompiled header: "
                              "give --older-than for entries only")
        cache = default_cache()
        if ns.command == "list":
            return CacheListing(tuple(cache.entries()))
        if ns.command == "remote":
            return RemoteCacheStats.of(cache)
        note = ""
        if ns.command == "clear" and ns.pch:
            folder = cache.pch_folder
            removed, left = (0, 0) if folder is None else pch_clear(folder)
            note = (f"removed {counted(removed, 'precompiled header')}"
                    + (f" and {counted(left, 'file')} left by processes that ended during a "
                       "compile" if left else "") + "; the entries are kept")
        elif ns.command == "clear":
            age = None if ns.older_than is None else _age_seconds(ns.older_than)
            removed = cache.clear() if age is None else cache.evict_older_than(age)
            note = f"removed {counted(removed, 'entry', 'entries')}"
        elif ns.command == "limit" and ns.size is not None:
            cache.set_size_limit(ns.size)
            note = limit_words(cache)
        return CacheStats.of(cache, note)

    @line_magic
    def cuda_info(self, line: str = ""):
        """Device, driver, NVRTC, demangler, target arch and cache location."""
        if _help_asked(self, "cuda_info", line):
            return None
        from .info import environment_info

        if line.strip():
            raise OptionError(f"%cuda_info takes no arguments (got {line.strip()!r})")

        return environment_info()

    @no_var_expand
    @line_magic
    def cuda_bench(self, line: str = ""):
        """Time kernel launches on the GPU (CUDA events), several side by side.

        %cuda_bench [-n REPEAT | -t SECONDS] [-w WARMUP] [--flush-l2] [--bytes EXPR]
        [--flops EXPR] [--baseline N|LABEL] [--check OUTPUT [--reference EXPR]]
        kernel(grid, block, args) [; other(grid, block, args) ...]

        Each call is read, not run: its parts are evaluated here and the launches are timed
        interleaved round-robin (docs/timing.md). Returns the result: a table and a plot.
        """
        if _help_asked(self, "cuda_bench", line):
            return None
        from ..launch.bench import run_line
        from ..view.shown import show_bench

        return show_bench(run_line(line, self._shell().user_ns))

    @no_var_expand
    @line_magic
    def cuda_sanitize(self, line: str = ""):
        """Run kernel launches under compute-sanitizer, each in a child process.

        %cuda_sanitize [--tool memcheck|racecheck|initcheck|synccheck] [--uninitialized I,J]
        kernel(grid, block, args) [; other(grid, block, args) ...]

        Each call is read, not run here: its parts are evaluated and the launch runs again in a
        child process (the arrays copied), so this notebook's arrays and CUDA context are never
        touched. Returns the findings, each at its cell line (docs/debugging.md).
        """
        if _help_asked(self, "cuda_sanitize", line):
            return None
        from ..launch.tool_run import sanitize_line

        assert self.shell is not None  # a registered magic has its shell
        return sanitize_line(line, self.shell.user_ns)

    @no_var_expand
    @line_magic
    def cuda_profile(self, line: str = ""):
        """Profile kernel launches with Nsight Compute (ncu), each in a child process.

        %cuda_profile kernel(grid, block, args) [; other(grid, block, args) ...]

        Shows duration, throughput against peak, DRAM traffic, occupancy, the top stall
        reasons and the hottest cell lines, the launches side by side (docs/debugging.md).
        """
        if _help_asked(self, "cuda_profile", line):
            return None
        from ..launch.tool_run import profile_line

        assert self.shell is not None
        return profile_line(line, self.shell.user_ns)

    def _push(self, module_name: str, module: Any) -> list[str]:
        """Put the module and its kernels into the notebook; the shadowing warnings, to be said
        in the report."""
        names: dict[str, Any] = {module_name: module}
        for kern in module.kernels.values():
            names[kern.python_name] = kern
        said = self._warn_shadowing(names)
        self._shell().push(names)
        return said

    def _show(self, module: Any, report: Any, started: float, quiet: bool = False,
              annotation: Any = None) -> None:
        """Show the report (with -q, only its warnings), timed from ``started``; the module's
        ``report`` becomes the one shown. ``annotation`` (``-a``): the annotated cell, a fold
        of the report in a notebook, its text after the report in a terminal or with -q."""
        from ..core.miss import BuildPhase
        from ..view.widget import report_with_attributes, show_report, show_warnings

        front = frontend(self.shell)

        if not quiet:
            t = time.perf_counter()
            report = report_with_attributes(module, report)
            report = report.with_timings({BuildPhase.RESOURCES: time.perf_counter() - t})
        report = report.with_timings(cell_seconds=time.perf_counter() - started)
        folded = annotation is not None and not quiet and front.open_comm is not None
        if quiet:
            show_warnings(report, front)
        else:
            def extra() -> str:  # a notebook's only: a terminal's report has no folds
                from ..view.bench import debug_fold, timing_fold

                folds = timing_fold(module) + debug_fold(module)
                if folded:  # -a only: the view's module is not imported by a plain cell
                    from ..view.annotate import annotation_fold

                    folds += annotation_fold(annotation)
                return folds

            report = show_report(report, front, extra=extra)
        if annotation is not None and not folded:
            front.display({"text/plain": annotation.text(), "text/html": annotation._repr_html_()})
        module.set_report(report)

    def _shell(self) -> Any:
        """The shell the magics are registered on (a Magics made without one has None)."""
        if self.shell is None:
            raise RuntimeError("cudamagic's magics are used without an IPython shell")
        return self.shell

    def _warn_shadowing(self, names: dict[str, Any]) -> list[str]:
        """What the names would hide in the notebook: a variable that is not one of ours, or a
        builtin. Said once, in the report (not as Python warnings as well)."""
        from ..launch import Kernel
        from ..pipeline.steps import Module

        ns = self._shell().user_ns
        builtin = vars(builtins)  # a dict lookup: hasattr raises inside for each name it lacks
        module = next(iter(names))
        said = []
        # the few names that hide something, found by set operations (a cell pushes 1000)
        hiding = names.keys() & (ns.keys() | builtin.keys())
        for name in (n for n in names if n in hiding):
            old = ns.get(name, None)
            if name in ns and not isinstance(old, (Kernel, Module)):
                fix = ("; name the module with --module" if name == module else
                       f"; the kernel is also {module}[{names[name].name_expression!r}]: "
                       "rename your variable to keep both")
                said.append(f"{name!r} replaces the notebook's variable of type "
                            f"{type(old).__name__}{fix}")
            elif name not in ns and name in builtin:
                said.append(f"the kernel name {name!r} hides Python's builtin {name}() in this "
                            f"notebook; del {name} brings the builtin back (the kernel stays "
                            f"{module}[{names[name].name_expression!r}])"
                            if name != module else
                            f"--module {name} hides Python's builtin {name}() in this notebook")
        return said


@contextmanager
def _warnings_said_in_report() -> Iterator[list[str]]:
    """Collect cudamagic's own Python warnings during a build, to say them in the report (once,
    without the internal source line a Python warning quotes); others pass through."""
    from ..errors import CudaMagicWarning

    said: list[str] = []
    caught: list[warnings.WarningMessage] = []
    shown = False  # a build that raised shows no report: its warnings are said as warnings
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield said
        shown = True
    finally:
        for w in caught:
            if shown and issubclass(w.category, CudaMagicWarning):
                said.append(str(w.message).removeprefix("cudamagic: "))
            elif issubclass(w.category, CudaMagicWarning):  # beside the error, as a line
                print(f"cudamagic: {str(w.message).removeprefix('cudamagic: ')}",
                      file=sys.stderr)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                       source=w.source)
