"""The header listing: a source whose traced compile names every header a compile reads.

NVRTC's time trace names every header its front end opened, but on a cell whose kernel
instantiates many templates the trace is most of the compile (issue 54 measures it). What a
compile opens is decided by its preprocessing, and every file it opens is opened
by a directive: an ``#include`` (``#include_next``, ``%:include``, ``#import``, ``#embed``)
whose logical line holds the word, or a ``-include`` option. So the cell is compiled twice at
once (:func:`~cudamagic.toolchain.compile.nvrtc.compile_cubin`): as it is, untraced, and, traced, in a
forked child (:class:`ListingChild`), as :func:`listing_source` gives it: every line kept as it
is up to the last logical line that holds one of those words, and past it only the lines that
start a directive (the rest blank, so line numbers stay). Up to that line the two texts are the
same, so their preprocessing and every file either opens there is the same; past it the full
compile opens nothing, whatever its code, macros, ``__COUNTER__`` or ``_Pragma`` do. The
listing may open more (a directive past that line that the full text holds in a comment or a
raw string) and never fewer.

Where the listing cannot be used the compile itself is traced, as before, and the report says
why (:class:`Traced`): nothing to leave out, a trigraph
line splice (``??/``), a listing that failed where the cell compiled (a construct opened
before the last include and closed after it), or no child process to be had.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .threads import block_signals, clean_thread

__all__ = ["OPENS_FILES", "Traced", "HeaderListing", "listing_source", "in_pch", "NO_LISTING",
           "header_prefix", "made_whole",
           "ListingChild"]

#: Words without which a line opens no file: #include (also %:include, #include_next, through
#: a macro), __has_include, and the other directives EDG may know for files
OPENS_FILES = re.compile(r"include|import|embed")
_SPLICED = re.compile(r"\\[ \t]*\r?$")
_DIRECTIVE = re.compile(r"^[ \t\f\v]*(?:#|%:)")


class Traced(str, enum.Enum):
    """Why a compile was traced itself instead of listed beside (:class:`HeaderListing`)."""

    NOTHING_LEFT_OUT = "nothing-left-out"   # no code past the cell's last include
    TRIGRAPH = "trigraph"                   # a ??/ line splice the listing cannot follow
    LISTING_FAILED = "listing-failed"       # the listing did not compile where the cell did
    NO_CHILD = "no-child"                   # no child process could be started for it
    PCH_NOT_USED = "pch-not-used"           # NVRTC did not take the PCH that held its headers


@dataclass(frozen=True)
class HeaderListing:
    """How a compile's list of headers was had.

    ``beside``: the listing compile ran beside the compile (its own ``seconds``, on another
    thread); else ``traced`` says why the compile carried the trace itself, or both are unset
    where no trace was asked (a cell that opens no file, no room to write one).
    ``added_seconds``: the wall time the listing added past the compile (waiting for it, or a
    traced compile after a failed listing).
    ``in_pch``: no listing was run: every line that opens a file is inside the precompiled
    header's directives the compile started from, so the files it read are those the PCH's
    record lists (:func:`in_pch`).
    """

    beside: bool = False
    seconds: float = 0.0
    traced: Traced | None = None
    added_seconds: float = 0.0
    in_pch: bool = False


#: A compile that asked for no trace
NO_LISTING = HeaderListing()


def _groups(lines: list[str]) -> list[tuple[int, int]]:
    """``(first, last)`` line index of each logical line, physical lines joined where one
    ends in a backslash (spaces after it allowed, as NVRTC allows them)."""
    out = []
    start = 0
    for i, line in enumerate(lines):
        if not _SPLICED.search(line) or i == len(lines) - 1:
            out.append((start, i))
            start = i + 1
    return out


def _logical(lines: list[str]) -> tuple[list[tuple[int, int]], list[str], int]:
    """Each logical line's ``(first, last)`` physical line, its text joined, and the last
    physical line of the last logical line that may open a file (-1: none)."""
    groups = _groups(lines)
    joined = ["".join(_SPLICED.sub("", lines[i]) for i in range(a, b + 1)) for a, b in groups]
    last = max((b for (a, b), text in zip(groups, joined) if OPENS_FILES.search(text)),
               default=-1)
    return groups, joined, last


_LEADING = re.compile(r"\s*#")
_INCLUDE = re.compile(r"\s*#\s*include\b")
_OPENS_GROUP = re.compile(r"\s*#\s*if")  # #if, #ifdef, #ifndef
_CLOSES_GROUP = re.compile(r"\s*#\s*endif\b")


def _leading(source: str) -> list[str]:
    """The cell's leading lines NVRTC's PCH can hold: blank lines, ``//`` comments and
    preprocessor directives (with their ``\\`` continuations) before its first other line."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            out.append(line)
        elif _LEADING.match(line):
            out.append(line)
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = lines[i]
                out.append(line)
        else:
            break
        i += 1
    return out


def header_prefix(source: str) -> str | None:
    """The cell's include lines, as a PCH is made from them: its leading lines
    (:func:`_leading`) up to its last ``#include`` and on to where every ``#if`` around it is
    closed; None where they include nothing (no header parse to keep). A ``#define`` below
    the includes is left out: NVRTC takes a PCH made from a text that its cell's first lines
    are, with more directives after them, so an edit of that ``#define`` starts from the same
    PCH. A prefix read short only names the PCH: NVRTC checks the directives itself and uses
    no PCH they do not match."""
    lines = _leading(source)
    depth, cut, last = 0, -1, -1
    for i, line in enumerate(lines):
        if _INCLUDE.match(line):
            last = i
        depth += 1 if _OPENS_GROUP.match(line) else -1 if _CLOSES_GROUP.match(line) else 0
        if last >= 0 and depth <= 0 and cut < last:
            cut = i
    if last < 0:
        return None
    return "\n".join(lines[:(cut if cut >= last else len(lines) - 1) + 1]).rstrip()


def made_whole(source: str, prefix: str) -> bool:
    """Whether a compile of ``source`` makes the PCH of ``prefix`` (its include lines,
    :func:`header_prefix`) itself: NVRTC's PCH holds every leading directive of the text it
    compiles, so a cell with more directives past its include lines, or a line past them that
    may open a file (a header the PCH must not list: the cells that share it never read it),
    is made from the include lines alone."""
    past = _leading(source)[len(prefix.split("\n")):]
    return in_pch(source, prefix) and all(not line.strip() or line.strip().startswith("//")
                                          for line in past)


def in_pch(source: str, prefix: str) -> bool:
    """Whether every line of ``source`` that may open a file is among its first lines,
    ``prefix`` (:func:`header_prefix`: the include lines a PCH's header set is named by). A compile that starts from that PCH then opens what the compile that
    made it opened for the same text and options, which the PCH's record lists (and checks
    before the PCH is used): no listing is needed."""
    if "??/" in source:
        return False
    return _logical(source.split("\n"))[2] < len(prefix.split("\n"))


def listing_source(source: str) -> str | Traced:
    """The listing's text of ``source`` (see the module's text), or why there is none."""
    if "??/" in source:
        return Traced.TRIGRAPH
    lines = source.split("\n")  # NVRTC's lines: a form feed or U+2028 ends none
    groups, joined, last = _logical(lines)
    out = lines[:last + 1]
    left_out = False
    for (a, b), text in zip(groups, joined):
        if b <= last:
            continue
        if _DIRECTIVE.match(text):
            out += lines[a:b + 1]
        else:
            left_out = left_out or any(line.strip() for line in lines[a:b + 1])
            out += [""] * (b - a + 1)
    return "\n".join(out) if left_out else Traced.NOTHING_LEFT_OUT


@dataclass(frozen=True)
class ListingChild:
    """The listing's compile in a forked child process: NVRTC compiles one program at a time
    in a process (two threads' compiles take the sum of their times), so the listing runs
    beside the compile only in a process of its own; and whatever its failure leaves in
    NVRTC (a trace broken for the rest of the process, :func:`~cudamagic.toolchain.compile.nvrtc.
    whole_trace`) ends with the child. The child writes only into ``folder`` (the trace
    folder its options name) and tells by its exit status whether the compile succeeded; it
    never returns into the caller's code (``os._exit``)."""

    pid: int
    folder: str
    started: float

    @classmethod
    def start(cls, folder: str, fork: Callable[[], int | None], compile_: Callable[..., Any],
              *args: Any) -> "ListingChild | None":
        """Fork (``fork``: NVRTC's section's, which forks only where no compile of this
        process is inside NVRTC) a child that runs ``compile_(*args)`` on a compile thread of
        its own (the stack NVRTC needs); None where no child could be started."""
        started = time.perf_counter()
        with warnings.catch_warnings():  # Python 3.12's warning of a fork with threads: the
            warnings.simplefilter("ignore", DeprecationWarning)  # child calls NVRTC only
            pid = fork()
        if pid is None:
            return None
        if pid == 0:  # pragma: no cover - the child, measured by its parent
            code = 1
            try:
                block_signals()  # the parent's Ctrl-C is its own; the child is stopped by it
                clean_thread(compile_, *args)
                code = 0
            finally:
                os._exit(code)
        return cls(pid, folder, started)

    def wait(self, bound_s: float) -> tuple[bool, float]:
        """Whether the child's compile succeeded within ``bound_s`` seconds from now (past
        it, the child is ended: a lock another library's thread held at the fork may hold it
        for ever), and the seconds since it was started."""
        deadline = time.monotonic() + bound_s
        delay = 0.001
        try:
            while True:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    return (os.waitstatus_to_exitcode(status) == 0,
                            time.perf_counter() - self.started)
                if time.monotonic() > deadline:
                    self.stop()
                    return False, time.perf_counter() - self.started
                time.sleep(delay)
                delay = min(2 * delay, 0.02)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End the child (the compile failed or was interrupted: its list is not wanted)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
