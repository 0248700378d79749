"""Demangling kernel symbols: cu++filt where the CUDA toolkit has one, libstdc++ otherwise.

cu++filt takes every symbol of a module on standard input in one process (about 2 ms for 1000
names), and prints template parameters as ``T1``; libstdc++'s ``__cxa_demangle`` (through ctypes)
is on every Linux machine and prints concrete types. :mod:`cudamagic.names` makes both agree.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Demangler", "Pending", "CuFilt", "LibStdCxx", "find_cufilt", "default_demangler",
           "concrete_demangler"]


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

    def demangle(self, symbols: Sequence[str]) -> list[str]:
        """Demangle many symbols at once; a name that is not mangled comes back unchanged."""
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

    def __call__(self, symbols: Sequence[str]) -> list[str]:
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

    def demangle(self, symbols: Sequence[str]) -> list[str]:
        pending = self.start()
        try:
            return pending(symbols)
        finally:
            pending.close()

    def start(self) -> Pending:
        # cu++filt answers only at the end of its input, so one process serves one batch; its
        # start (about 1 ms) overlaps the compile or the cache read
        proc = subprocess.Popen([self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)

        def run(symbols: Sequence[str]) -> list[str]:
            if any("\n" in s for s in symbols):
                raise ValueError("a symbol holds a line break")
            out, _ = proc.communicate("\n".join(symbols) + "\n" if symbols else "", timeout=60)
            lines = out.splitlines()
            if proc.returncode != 0 or len(lines) != len(symbols):
                raise RuntimeError(f"{self.path} exited {proc.returncode} and printed "
                                   f"{len(lines)} lines for {len(symbols)} symbols")
            return [o.strip() or s for o, s in zip(lines, symbols)]

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
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        self._cxa = getattr(lib, "__cxa_demangle")  # not self.__x: name mangling
        self._cxa.restype = ctypes.c_void_p
        self._cxa.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_int)]
        self._free = ctypes.CDLL(None).free
        self._free.argtypes = [ctypes.c_void_p]

    def demangle(self, symbols: Sequence[str]) -> list[str]:
        return [self._one(s) for s in symbols]

    def _one(self, symbol: str) -> str:
        if not symbol.startswith("_Z"):
            return symbol
        status = ctypes.c_int(0)
        ptr = self._cxa(symbol.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return symbol
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            self._free(ptr)


def find_cufilt() -> str | None:
    """Path of cu++filt: $CUDA_HOME/bin, $CUDA_PATH/bin, $PATH, then /usr/local/cuda/bin."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and os.access(Path(root, "bin", "cu++filt"), os.X_OK):
            return str(Path(root, "bin", "cu++filt"))
    found = shutil.which("cu++filt")
    if found:
        return found
    fallback = Path("/usr/local/cuda/bin/cu++filt")
    return str(fallback) if os.access(fallback, os.X_OK) else None


@functools.lru_cache(maxsize=1)
def concrete_demangler() -> "LibStdCxx | None":
    """libstdc++'s demangler, which names concrete parameter types (what the report shows),
    in process; None where it cannot be loaded."""
    try:
        return LibStdCxx()
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=1)
def default_demangler() -> Demangler:
    """cu++filt when it is found, else libstdc++ (looked up once per process)."""
    path = find_cufilt()
    return CuFilt(path) if path else LibStdCxx()
