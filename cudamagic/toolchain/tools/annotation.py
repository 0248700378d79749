"""A cell's source line by line, each line with the machine code the line table attributes to
it (:mod:`.sass`), and, given profiles of its kernels (:mod:`.profiler`), their samples there:
the records :meth:`cudamagic.Module.annotate` shows.

Where an instruction lands (``place_in_cell``):

- its innermost place is in the cell: that line (code inlined from a device function of the
  cell lands in the function's lines, not at the call);
- else the innermost call site in the cell it was inlined at (a header's inline function
  counts where the cell calls it), marked with the header's place;
- else (a header's ``__noinline__`` function, code the line table places in no file) under the
  cell's ``#include`` line that names the header, and where none does, outside the cell.

Every instruction lands once, so a kernel's lines and its padding add up to its instruction
count.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...core.lines import cell_lines
from .profiler import PcCounts, Profile, SourceCounters
from .sass import Counts, FunctionCode, Instruction, Place, in_file

__all__ = ["Landed", "LineCode", "LineProfile", "CellLine", "KernelCode", "Annotation",
           "annotate", "place_in_cell", "STALLS_SHOWN"]

#: the stall reasons kept per line, most samples first
STALLS_SHOWN = 3

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]')


@dataclass(frozen=True)
class Landed:
    """One instruction where it landed: the cell line (None: outside the cell), and the header
    place it came from where that is not the cell."""

    instruction: Instruction
    line: int | None
    header: Place | None = None


@dataclass(frozen=True)
class LineCode:
    """One kernel's code at one cell line."""

    symbol: str
    code: tuple[Landed, ...]
    counts: Counts


@dataclass(frozen=True)
class LineProfile(SourceCounters):
    """One profile's counters at one cell line (:class:`~.profiler.SourceCounters`' fields,
    summed over the line's instructions, the top :data:`STALLS_SHOWN` stall reasons kept), and
    ``share``, the line's part of the kernel's samples."""

    share: float = 0.0


@dataclass(frozen=True)
class CellLine:
    """One line of the cell: its number in the cell, its text, each kernel's code there, and
    each profile's counters there (one per profile given, None where it has none)."""

    line: int
    text: str
    code: tuple[LineCode, ...] = ()
    profiles: tuple[LineProfile | None, ...] = ()

    @property
    def counts(self) -> Counts:
        """Every kernel's code at the line together."""
        total = Counts()
        for c in self.code:
            total = total + c.counts
        return total


@dataclass(frozen=True)
class KernelCode:
    """One kernel as the CUBIN has it: its names, resources (None: not recorded) and totals.

    ``instructions`` is every instruction of its code section, ``padding`` those after its
    end that never run; ``stack_bytes`` the frame per thread (local arrays and spills).
    """

    symbol: str
    name: str
    instructions: int
    padding: int
    counts: Counts
    registers: int | None = None
    stack_bytes: int | None = None
    shared_bytes: int | None = None


@dataclass(frozen=True)
class Annotation:
    """A cell annotated with its machine code: every line (``lines``), the code that lands
    outside the cell (``outside``), each kernel's totals, and the profiles' labels."""

    lines: tuple[CellLine, ...]
    kernels: tuple[KernelCode, ...]
    outside: tuple[LineCode, ...] = ()
    profiles: tuple[str, ...] = ()
    arch: str = ""
    lineinfo: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)


def place_in_cell(places: Sequence[Place], program: str, line_offset: int,
                  includes: Mapping[str, int]) -> tuple[int | None, Place | None]:
    """Where an instruction of ``places`` lands: ``(cell line or None, header place or
    None)`` (the module's docstring says the rule). ``includes``: the file names the cell's
    ``#include`` lines name, with their cell lines."""
    if not places:
        return None, None
    n = in_file(places, program)
    if n == 0:
        return places[0].line + line_offset, None
    if n is not None:
        return places[n].line + line_offset, places[0]
    inner = places[0]
    for name, line in includes.items():
        path = inner.file.replace(os.sep, "/")
        if path == name or path.endswith("/" + name):
            return line, inner
    return None, inner


def _includes(source: str, line_offset: int) -> dict[str, int]:
    """The names the cell's ``#include`` lines spell, with the cell line of each (the first
    that names it)."""
    out: dict[str, int] = {}
    for n, text in enumerate(cell_lines(source), 1):
        m = _INCLUDE.match(text)
        if m:
            out.setdefault(m.group(1).replace("\\", "/").lstrip("./"), n + line_offset)
    return out


def annotate(functions: Sequence[FunctionCode], source: str, *, line_offset: int = 0,
             program: str = "cell.cu", names: Mapping[str, str] | None = None,
             resources: Mapping[str, object] | None = None,
             profiles: Sequence[Profile] = (), arch: str = "",
             lineinfo: bool = True) -> Annotation:
    """The cell's lines with ``functions``' code landed on them (``names``: symbol -> the name
    shown; ``resources``: symbol -> its :class:`~cudamagic.toolchain.binary.image.KernelResources`), and each profile's
    counters where its kernel is one of ``functions``."""
    names = names or {}
    resources = resources or {}
    includes = _includes(source, line_offset)
    texts = cell_lines(source)  # NVRTC's lines, which the line table numbers
    first = 1 + line_offset
    by_line: dict[int | None, dict[str, list[Landed]]] = {}
    kernels: list[KernelCode] = []
    # symbol -> offset -> (cell line, innermost place)
    landed_at: dict[str, dict[int, tuple[int | None, Place | None]]] = {}
    for f in functions:
        at: dict[int, tuple[int | None, Place | None]] = {}
        running = [i for i in f.instructions if not i.padding]
        for i in running:
            line, header = place_in_cell(i.places, program, line_offset, includes)
            if line is not None and not first <= line < first + len(texts):
                line, header = None, header or (i.places[0] if i.places else None)
            by_line.setdefault(line, {}).setdefault(f.symbol, []).append(
                Landed(i, line, header))
            at[i.offset] = (line, i.places[0] if i.places else None)
        landed_at[f.symbol] = at
        res = resources.get(f.symbol)
        kernels.append(KernelCode(
            f.symbol, names.get(f.symbol, f.symbol), len(f.instructions),
            len(f.instructions) - len(running), Counts.of(running),
            getattr(res, "registers", None), getattr(res, "local_bytes", None),
            getattr(res, "static_shared_bytes", None)))

    def code_at(line: int | None) -> tuple[LineCode, ...]:
        return tuple(LineCode(symbol, tuple(code), Counts.of(x.instruction for x in code))
                     for symbol, code in by_line.get(line, {}).items())

    per_profile = [_profile_lines(p, landed_at, program, line_offset) for p in profiles]
    lines = tuple(CellLine(n + line_offset, text, code_at(n + line_offset),
                           tuple(pl.get(n + line_offset) for pl in per_profile))
                  for n, text in enumerate(texts, 1))
    return Annotation(lines, tuple(kernels), code_at(None),
                      tuple(p.label or p.kernel for p in profiles), arch, lineinfo)


def _profile_lines(p: Profile,
                   landed_at: Mapping[str, Mapping[int, tuple[int | None, Place | None]]],
                   program: str, line_offset: int) -> dict[int, LineProfile]:
    """One profile's per-instruction counters summed by the cell line each instruction landed
    on: by its offset in the kernel annotated where ncu places it where the line table does
    (the profiled code is this code), else by ncu's own place where that is in the cell."""
    at = landed_at.get(p.symbol) or landed_at.get(p.kernel) or {}
    total = sum(c.samples for c in p.pcs) or 0
    sums: dict[int, list[PcCounts]] = {}
    for c in p.pcs:
        line, inner = at.get(c.offset, (None, None))
        same = inner is not None and inner.line == c.line \
            and os.path.basename(inner.file) == os.path.basename(c.file)
        if not same:
            line = c.line + line_offset if c.line and os.path.basename(c.file) == program \
                else None
        if line is not None:
            sums.setdefault(line, []).append(c)
    out = {}
    for line, pcs in sums.items():
        samples = sum(c.samples for c in pcs)
        stalls: dict[str, int] = {}
        for c in pcs:
            for reason, n in c.stalls:
                stalls[reason] = stalls.get(reason, 0) + n
        top = tuple(sorted(((r, n) for r, n in stalls.items() if n), key=lambda rn: -rn[1])
                    [:STALLS_SHOWN])
        out[line] = LineProfile(
            samples=samples, share=samples / total if total else 0.0, stalls=top,
            **{name: _sum(getattr(c, name) for c in pcs) for name in _SUMMED})
    return out


_SUMMED = ("executed", "threads", "sectors", "ideal_sectors", "divergent")


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
