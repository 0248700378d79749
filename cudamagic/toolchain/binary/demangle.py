"""Demangling kernel symbols: cu++filt where the CUDA toolkit has one, libstdc++ otherwise.

cu++filt takes every symbol of a module on standard input in one process (one start for the
whole batch), and prints template parameters as ``T1``; libstdc++'s ``__cxa_demangle`` (through ctypes)
is on every Linux machine and prints concrete types. :mod:`cudamagic.cxx` makes both agree.

Both are bounded. A mangled name refers back to its own parts, so a 200-character symbol can
demangle to gigabytes, and neither demangler can be stopped once it has started (libstdc++'s
grows one buffer until memory runs out). So each symbol's demangled length is bounded before
it is handed over (:func:`cudamagic.cxx.mangled.demangled_bound`, one linear pass): one that
could exceed :data:`WORK_LIMIT` is not demangled, and a text longer than :data:`TEXT_LIMIT` is
not kept; both come back as None (no text: a view says it in words). A symbol that is not a mangled name (a line
break, a form feed, any character a mangling does not use) comes back unchanged, and is never
written to cu++filt, which reads one name a line.
"""

from __future__ import annotations

import ctypes
import enum
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...core.process import cached
from ...errors import CudaMagicError, DemangleError

__all__ = ["Demangler", "Pending", "CuFilt", "LibStdCxx", "find_cufilt", "default_demangler",
           "variable_texts",
           "concrete_demangler", "TEXT_LIMIT", "WORK_LIMIT", "plan", "Plan"]

#: The longest demangled text kept (a CCCL kernel's is a few KiB).
TEXT_LIMIT = 64 << 10
#: The largest bound of a symbol's demangled length that is still demangled: the demangler's
#: time and memory grow with its output, so this bounds both (a few ms, a few MiB).
WORK_LIMIT = 4 << 20
# the characters of an Itanium mangling (and of the clone suffixes after it)
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]*")


class Plan(enum.Enum):
    """What a demangler does with a symbol (:func:`plan`)."""

    DEMANGLE = enum.auto()
    KEEP = enum.auto()       # not a mangled name: it comes back as it is
    TOO_LONG = enum.auto()   # its demangled name could exceed the limits


def plan(symbol: str) -> Plan:
    """What a demangler does with ``symbol`` (:class:`Plan`)."""
    if _MANGLED.fullmatch(symbol) is None:
        return Plan.KEEP
    if len(symbol) > TEXT_LIMIT:
        return Plan.TOO_LONG
    from ...cxx.mangled import Unreadable, coarse_bound, demangled_bound  # a demangling's

    bound = coarse_bound(symbol)  # one regular expression: enough for nearly every kernel
    if bound > WORK_LIMIT:
        try:
            bound = demangled_bound(symbol)
        except Unreadable:
            pass  # a construct the reader does not follow: the coarse bound stands
    return Plan.DEMANGLE if bound <= WORK_LIMIT else Plan.TOO_LONG


def _bounded(symbols: Sequence[str], run: Callable[[list[str]], list[str]]
             ) -> list[str | None]:
    """``run`` (a list of symbols -> their texts) applied to the symbols that :func:`plan`
    lets through; the others as plan says (None: too long); a text over :data:`TEXT_LIMIT`
    is not kept (None)."""
    plans = [plan(s) for s in symbols]
    todo = [s for s, p in zip(symbols, plans) if p is Plan.DEMANGLE]
    done = iter(run(todo) if todo else ())
    out: list[str | None] = []
    for s, p in zip(symbols, plans):
        if p is Plan.KEEP:
            out.append(s)
        elif p is Plan.TOO_LONG:
            out.append(None)
        else:
            text = next(done)
            out.append(text if len(text) <= TEXT_LIMIT else None)
    return out


#: How long cu++filt may take for one batch (far more than it takes: docs/performance.md).
_CUFILT_SECONDS = 30



class Demangler:
    """Turns mangled symbols into readable names.

    Attributes
    ----------
    name : str
        What the report calls it (``"cu++filt"`` or ``"libstdc++"``).
    placeholders : bool
        Whether its output names template parameters ``T1``, ``T2``... in parameter lists.
    """

    name = "?"
    placeholders = False

    def demangle(self, symbols: Sequence[str]) -> list[str | None]:
        """Demangle many symbols at once; a name that is not mangled comes back unchanged, one
        whose demangled name is too long to keep (:func:`plan`, :data:`TEXT_LIMIT`) as None."""
        raise NotImplementedError

    def start(self) -> "Pending":
        """Get ready to demangle (a demangler that is a process starts it now, so that its
        start overlaps other work); call the result with the symbols, then close it."""
        return Pending(self.demangle)


class Pending:
    """A demangling under way: call it once with the symbols; ``close`` it in any case."""

    def __init__(self, run, release=None) -> None:
        self._run = run
        self._release = release

    def __call__(self, symbols: Sequence[str]) -> list[str | None]:
        return self._run(symbols)

    def close(self) -> None:
        """Release what :meth:`Demangler.start` took (a process that was never fed)."""
        if self._release is not None:
            self._release()


@dataclass(frozen=True)
class CuFilt(Demangler):
    """The CUDA toolkit's ``cu++filt``, run once per batch of symbols."""

    path: str
    name = "cu++filt"
    placeholders = True

    def demangle(self, symbols: Sequence[str]) -> list[str | None]:
        pending = self.start()
        try:
            return pending(symbols)
        finally:
            pending.close()

    def start(self) -> Pending:
        # cu++filt answers only at the end of its input, so one process serves one batch; its
        # start overlaps the compile or the cache read
        # bytes, split at "\n" alone: text mode would also split at "\r", "\f" and the
        # other line ends Python knows, and misalign every name after one
        import subprocess  # here: a hit whose entry holds the demangled names starts none

        try:
            proc = subprocess.Popen([self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
        except OSError as exc:  # gone or no longer runnable since it was found
            raise DemangleError(f"{self.path} could not be started ({exc.strerror or exc}): "
                                "it was found earlier, and cu++filt is looked up again only "
                                "where $CUDA_HOME, $CUDA_PATH or $PATH change; fix one of them "
                                "or restart the kernel to look for it again (without cu++filt, "
                                "libstdc++ demangles)") from None

        def batch(symbols: Sequence[str]) -> list[str]:
            # every symbol here passed plan(): mangling characters only, so one line each
            data = ("\n".join(symbols) + "\n").encode()
            try:
                out, _ = proc.communicate(data, timeout=_CUFILT_SECONDS)
            except subprocess.TimeoutExpired:
                raise DemangleError(f"{self.path} did not answer within {_CUFILT_SECONDS} s "
                                    f"for {len(symbols)} symbols") from None
            lines = out.split(b"\n")
            if lines and not lines[-1]:
                lines.pop()
            if proc.returncode != 0 or len(lines) != len(symbols):
                raise DemangleError(f"{self.path} exited {proc.returncode} and printed "
                                    f"{len(lines)} lines for {len(symbols)} symbols")
            return [o.decode("utf-8", "replace").strip() or s for o, s in zip(lines, symbols)]

        def run(symbols: Sequence[str]) -> list[str | None]:
            return _bounded(symbols, batch)

        def release() -> None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

        return Pending(run, release)


class LibStdCxx(Demangler):
    """libstdc++'s ``abi::__cxa_demangle``, through ctypes."""

    name = "libstdc++"
    placeholders = False

    def __init__(self) -> None:
        try:  # the usual soname first: find_library runs ldconfig in a subprocess (ms)
            lib = ctypes.CDLL("libstdc++.so.6")
        except OSError:
            from ctypes.util import find_library  # imports subprocess: only where needed

            lib = ctypes.CDLL(find_library("stdc++") or "libstdc++.so.6")
        self._cxa = getattr(lib, "__cxa_demangle")  # not self.__x: name mangling
        self._cxa.restype = ctypes.c_void_p
        self._cxa.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_int)]
        self._free = ctypes.CDLL(None).free
        self._free.argtypes = [ctypes.c_void_p]

    def demangle(self, symbols: Sequence[str]) -> list[str | None]:
        return _bounded(symbols, lambda todo: [self._one(s) for s in todo])

    def _one(self, symbol: str) -> str:
        status = ctypes.c_int(0)
        ptr = self._cxa(symbol.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return symbol
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            self._free(ptr)


_CUFILT_VARS = ("CUDA_HOME", "CUDA_PATH", "PATH")


def find_cufilt(env: "tuple[str | None, str | None, str | None] | None" = None) -> str | None:
    """Path of cu++filt: $CUDA_HOME/bin, $CUDA_PATH/bin, $PATH, then /usr/local/cuda/bin
    (``env``: those three variables' values, default the environment's)."""
    home, cuda_path, path = env or tuple(os.environ.get(v) for v in _CUFILT_VARS)
    for root in (home, cuda_path):
        if root and os.access(Path(root, "bin", "cu++filt"), os.X_OK):
            return os.path.abspath(Path(root, "bin", "cu++filt"))
    found = shutil.which("cu++filt", path=path)
    if found:
        return os.path.abspath(found)  # a relative $PATH entry: from this working folder
    fallback = Path("/usr/local/cuda/bin/cu++filt")
    return str(fallback) if os.access(fallback, os.X_OK) else None


@cached(1)
def concrete_demangler() -> "LibStdCxx | None":
    """libstdc++'s demangler, which names concrete parameter types (what the report shows),
    in process; None where it cannot be loaded."""
    try:
        return LibStdCxx()
    except (OSError, AttributeError):
        return None


def concrete_text(symbol: str) -> str | None:
    """``symbol`` demangled with concrete parameter types (libstdc++'s, in process), where a
    text with cu++filt's placeholders ``T1``... is to be shown; None where that demangler is not
    there, the symbol is not mangled, or it gives the symbol back."""
    concrete = concrete_demangler() if symbol.startswith("_Z") else None
    text = concrete.demangle([symbol])[0] if concrete is not None else None
    return None if text is None or text == symbol else text


def default_demangler() -> Demangler:
    """cu++filt when it is found, else libstdc++: looked up once, and again where what it is
    found by changed since (``$CUDA_HOME``, ``$CUDA_PATH``, ``$PATH``, and the working folder,
    from which relative ones are taken)."""
    return _demangler_for(tuple(os.environ.get(v) for v in _CUFILT_VARS), os.getcwd())


@cached(1)
def _demangler_for(env: tuple[str | None, ...], cwd: str) -> Demangler:
    """:func:`default_demangler` for these values of the variables (``cwd``: the key only)."""
    path = find_cufilt(env)  # type: ignore[arg-type]
    # without cu++filt, libstdc++: the one the report's texts loaded already, where it did
    return CuFilt(path) if path else (concrete_demangler() or LibStdCxx())


def variable_texts(symbols: Sequence[str], *, may_start: bool) -> dict[str, str | None]:
    """symbol -> demangled name of the mangled ones among ``symbols`` (variables; None: too
    long to keep), by the one demangler variables use: libstdc++'s in this process where it
    loads, else (where ``may_start``) the default one, started for this batch; {} where
    neither. ``module.globals``, the report's variables and a hit's check of the name
    expressions that name variables all read them here."""
    mangled = [s for s in symbols if s.startswith("_Z")]
    if not mangled:
        return {}
    lib = concrete_demangler()
    if lib is not None:
        return dict(zip(mangled, lib.demangle(mangled)))
    if not may_start:
        return {}
    pending = default_demangler().start()
    try:
        return dict(zip(mangled, pending(mangled)))
    finally:
        pending.close()
