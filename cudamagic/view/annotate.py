"""An :class:`~cudamagic.toolchain.tools.annotation.Annotation` as a notebook and a terminal show it:
a shaded HTML table (each line's source, its instructions by kind, a click opens its machine
code; with profiles, their samples and stall reasons per line, side by side) and a text table.

The HTML is one self-contained element (its style inside it, no script), so a saved notebook
shows it without its kernel; its colours are the page's own text on translucent shading, so it
reads in JupyterLab's light and dark themes alike (``color-scheme: light dark``). Output is
bounded: at most :data:`SHOWN_LINES` lines, :data:`LISTED` instructions per line and
:data:`SHOWN_KERNELS` kernels' totals.
"""

from __future__ import annotations

import enum
import html
from collections.abc import Sequence

from ..toolchain.tools.annotation import Annotation, CellLine, LineCode, LineProfile
from ..toolchain.tools.sass import Counts
from .render import table_text

__all__ = ["Grouping", "AnnotatedView", "annotation_fold", "annotation_text",
           "annotation_html", "SHOWN_LINES", "LISTED", "SHOWN_KERNELS"]

SHOWN_LINES = 2000
LISTED = 200
SHOWN_KERNELS = 50
_SOURCE_WIDTH = 110


class Grouping(str, enum.Enum):
    """How the kernels that share a line (a template's instances) are shown there."""

    TOGETHER = "together"  # one row per line, every kernel's code summed
    APART = "apart"        # one row per kernel with code at the line

    @classmethod
    def of(cls, value: "Grouping | str") -> "Grouping":
        from ..errors import ArgumentValueError

        try:
            return cls(value)
        except ValueError:
            raise ArgumentValueError(f"instances={value!r}: give 'together' or 'apart'") \
                from None


_COUNT_COLUMNS = ("instr", "local ld/st", "shared", "global", "branch", "barrier")


def _count_cells(c: Counts) -> tuple[str, ...]:
    def n(v: int) -> str:
        return str(v) if v else ""

    local = f"{c.local_loads}/{c.local_stores}" if c.local_loads or c.local_stores else ""
    return (n(c.instructions), local, n(c.shared), n(c.global_), n(c.branches), n(c.barriers))


def _profile_cells(p: LineProfile | None) -> tuple[str, str]:
    if p is None or not p.samples:
        return "", ""
    stall = p.stalls[0][0] if p.stalls else ""
    return f"{100 * p.share:.1f}%", stall


def _bytes(n: int | None) -> str:
    return "?" if n is None else f"{n} B"


def _kernel_lines(a: Annotation) -> list[str]:
    out = []
    for k in a.kernels[:SHOWN_KERNELS]:
        c = k.counts
        # spills as nvdisasm marks them: none marked is no claim (13.0's marks none of a
        # kernel that spills, which the local traffic and ptxas's -v say it does)
        spills = f", {c.spills} of them marked as spills" if c.spills else ""
        local = (f", local loads/stores {c.local_loads}/{c.local_stores} "
                 f"({c.local_load_bytes}/{c.local_store_bytes} B per thread{spills})"
                 if c.local_loads or c.local_stores else "")
        out.append(f"{k.name}: {k.instructions} instructions ({k.padding} padding), "
                   f"{'?' if k.registers is None else k.registers} registers, stack "
                   f"{_bytes(k.stack_bytes)}, shared {_bytes(k.shared_bytes)}{local}")
    if len(a.kernels) > SHOWN_KERNELS:
        out.append(f"... and {len(a.kernels) - SHOWN_KERNELS} more kernels")
    return out


def _rows(a: Annotation, grouping: Grouping) -> list[tuple[CellLine, LineCode | None, bool]]:
    """(line, one kernel's code or None for every kernel's, first row of the line)."""
    out: list[tuple[CellLine, LineCode | None, bool]] = []
    for line in a.lines[:SHOWN_LINES]:
        if grouping is Grouping.APART and len(line.code) > 1:
            out += [(line, c, n == 0) for n, c in enumerate(line.code)]
        else:
            out.append((line, None, True))
    return out


def _name(a: Annotation, symbol: str) -> str:
    return next((k.name for k in a.kernels if k.symbol == symbol), symbol)


def annotation_text(a: Annotation, grouping: Grouping = Grouping.TOGETHER) -> str:
    """The annotation as text: the kernels' totals, then a table of the cell's lines."""
    head = [f"machine code by cell line ({a.arch or 'the CUBIN'}, nvdisasm's line table)"]
    if not a.lineinfo:
        head.append("the CUBIN has no line information: no instruction lands on a line")
    head += ["  " + k for k in _kernel_lines(a)]
    columns = ("line", *_COUNT_COLUMNS, *(f"{p[:16]} {w}" for p in a.profiles
                                          for w in ("samples", "stall")), "source")
    rows = []
    for line, code, first in _rows(a, grouping):
        counts = code.counts if code is not None else line.counts
        profiled = tuple(x for p in line.profiles for x in _profile_cells(p)) \
            if first else ("",) * (2 * len(a.profiles))
        text = line.text.rstrip()[:_SOURCE_WIDTH] if first else f"  ^ {_name(a, code.symbol)}" \
            if code is not None else ""
        if code is not None and first:
            text += f"   [{_name(a, code.symbol)}]"
        rows.append((str(line.line) if first else "", *_count_cells(counts), *profiled, text))
    out = head + table_text(columns, rows)
    if len(a.lines) > SHOWN_LINES:
        out.append(f"  ... {len(a.lines) - SHOWN_LINES} more lines not shown")
    outside = sum(c.counts.instructions for c in a.outside)
    if outside:
        out.append(f"  {outside} instructions land outside the cell (headers' own functions)")
    return "\n".join(out)


_STYLE = """<style>
.cudamagic-annotate{color-scheme:light dark;font-size:12px}
.cudamagic-annotate table{border-collapse:collapse}
.cudamagic-annotate td,.cudamagic-annotate th{padding:0 8px 0 0;text-align:right;
vertical-align:top;white-space:nowrap;color:inherit}
.cudamagic-annotate td.src,.cudamagic-annotate th.src{text-align:left;white-space:pre}
.cudamagic-annotate td.src summary{cursor:pointer;list-style:none}
.cudamagic-annotate td.src summary::-webkit-details-marker{display:none}
.cudamagic-annotate pre{margin:2px 0 4px 12px;opacity:.85}
.cudamagic-annotate .n{opacity:.6}
.cudamagic-annotate code,.cudamagic-annotate pre,.cudamagic-annotate td.src{
font-family:var(--jp-code-font-family,monospace)}
</style>"""


def _shade(weight: float) -> str:
    """A translucent warm background for a share of the heaviest line (0..1): the text keeps
    the theme's colour, light or dark."""
    if weight <= 0:
        return ""
    return f"background:rgba(255,140,0,{0.08 + 0.47 * min(weight, 1.0):.2f})"


def _listing(a: Annotation, codes: Sequence[LineCode]) -> str:
    esc = html.escape
    parts = []
    for c in codes:
        lines = []
        for x in c.code[:LISTED]:
            where = f"  // {x.header.file.rsplit('/', 1)[-1]}:{x.header.line}" if x.header else ""
            spill = "  // spill" if x.instruction.spill else ""
            lines.append(f"/*{x.instruction.offset:04x}*/ {x.instruction.text}{spill}{where}")
        if len(c.code) > LISTED:
            lines.append(f"... {len(c.code) - LISTED} more")
        title = f"{esc(_name(a, c.symbol))}:\n" if len(codes) > 1 or len(a.kernels) > 1 else ""
        parts.append(title + esc("\n".join(lines)))
    return "<pre>" + "\n".join(parts) + "</pre>"


def annotation_html(a: Annotation, grouping: Grouping = Grouping.TOGETHER) -> str:
    """The annotation as one self-contained HTML element (see the module's docstring)."""
    esc = html.escape
    rows = _rows(a, grouping)
    profiled = bool(a.profiles)
    heaviest = max((line.counts.instructions for line, _, _ in rows), default=0) or 1
    hottest = [max((p.share for line, _, _ in rows for p in (line.profiles[i],) if p), default=0)
               or 1 for i in range(len(a.profiles))]
    head = "".join(f"<th>{esc(c)}</th>" for c in ("line", *_COUNT_COLUMNS))
    head += "".join(f"<th>{esc(p)} samples</th><th>stall</th>" for p in a.profiles)
    head += "<th class='src'>source</th>"
    body = []
    for line, code, first in rows:
        counts = code.counts if code is not None else line.counts
        weight = (max((p.share / h for p, h in zip(line.profiles, hottest) if p), default=0)
                  if profiled else counts.instructions / heaviest)
        cells = "".join(f"<td>{esc(v)}</td>" for v in _count_cells(counts))
        for p in line.profiles if first else (None,) * len(a.profiles):
            share, stall = _profile_cells(p)
            title = ", ".join(f"{r} {n}" for r, n in p.stalls) if p is not None else ""
            cells += f"<td>{esc(share)}</td><td title='{esc(title)}'>{esc(stall)}</td>"
        text = esc(line.text.rstrip()) if first else f"  &#8627; {esc(_name(a, code.symbol))}" \
            if code is not None else ""
        codes = (code,) if code is not None else line.code
        if codes and any(c.code for c in codes):
            label = text + (f" <span class='n'>[{esc(_name(a, code.symbol))}]</span>"
                            if code is not None and first else "")
            text = f"<details><summary>{label or '&nbsp;'}</summary>{_listing(a, codes)}</details>"
        number = f"<td class='n'>{line.line}</td>" if first else "<td></td>"
        body.append(f"<tr style='{_shade(weight)}'>{number}{cells}<td class='src'>{text}</td>"
                    "</tr>")
    notes = [esc(k) for k in _kernel_lines(a)]
    if len(a.lines) > SHOWN_LINES:
        notes.append(f"{len(a.lines) - SHOWN_LINES} more lines not shown: annotate one kernel "
                     "(module.annotate(kernel=...))")
    outside = [c for c in a.outside if c.code]
    foot = ""
    if outside:
        n = sum(c.counts.instructions for c in outside)
        foot = (f"<details class='cudamagic-outside'><summary>{n} instructions outside the cell"
                f"</summary>{_listing(a, outside)}</details>")
    what = f"machine code by cell line ({esc(a.arch or 'the CUBIN')}, nvdisasm's line table)"
    if not a.lineinfo:
        what += ": the CUBIN has no line information"
    return (f"<div class='cudamagic-annotate'>{_STYLE}<div><b>{what}</b></div>"
            + "".join(f"<div>{x}</div>" for x in notes)
            + f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            + foot + "</div>")


def annotation_fold(view: "AnnotatedView") -> str:
    """The report's "machine code by line" fold (``%%cuda -a``), open: the annotated cell."""
    return ('<details open class="cudamagic-fold cudamagic-annotation"><summary>machine code '
            f"by line</summary>{view.html()}</details>")


class AnnotatedView:
    """The annotated cell as a notebook shows it (HTML) and a terminal (text); the record is
    :attr:`record`."""

    def __init__(self, record: Annotation, grouping: Grouping = Grouping.TOGETHER) -> None:
        self.record = record
        self.grouping = grouping

    def text(self) -> str:
        return annotation_text(self.record, self.grouping)

    def html(self) -> str:
        return annotation_html(self.record, self.grouping)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return (f"<cudamagic Annotation: {len(self.record.lines)} lines, "
                f"{len(self.record.kernels)} kernels>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return '<div class="cudamagic-report">' + self.html() + "</div>"
