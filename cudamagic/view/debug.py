"""The debugging records in words: a sanitizer run (:class:`~cudamagic.launch.tool_run.
SanitizeReport`), a profile and several side by side (:mod:`cudamagic.toolchain.tools.profiler`), and
the advice of a lost CUDA context. Each has a text view and an HTML view; the HTML is a fold
(``<details>``) as the report's other folds are, opened, with a roofline plot for profiles.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from ..launch.tool_run import CellFinding, SanitizeReport, sanitize_hint
from ..toolchain.device.driver import Sticky, lost_text
from ..toolchain.tools.profiler import Comparison, Profile
from ..toolchain.tools.sanitizer import PRINT_LIMIT, Access, FindingKind, SanitizerTool, Space
from ..core.units import counted, size_text
from .bench import COLOURS

__all__ = ["DebugView", "present", "sanitize_text", "sanitize_html", "initcheck_note", "profile_text",
           "profile_html", "roofline_svg", "crash_lines"]


def _dims(d: Sequence[int] | None) -> str:
    return "(" + ",".join(map(str, d)) + ")" if d is not None else "?"


def _what(cf: CellFinding) -> str:
    f = cf.finding
    if f.kind in (FindingKind.OUT_OF_BOUNDS, FindingKind.MISALIGNED) \
            and f.access is not Access.UNKNOWN:
        space = f" {f.space.value}" if f.space is not Space.UNKNOWN else ""
        size = f" of {counted(f.size, 'byte')}" if f.size else ""
        return f"{f.kind.value}:{space} {f.access.value}{size}"
    return f.kind.value


def _place(cf: CellFinding) -> str:
    if cf.cell_line is not None:
        return f"cell line {cf.cell_line}"
    f = cf.finding
    if f.file and f.line:
        return f"{f.file}:{f.line}"
    return f"{f.function or 'the kernel'}+{f.pc:#x}" if f.pc is not None else \
        (f.function or "an unknown place (build with -lineinfo)")


def _finding_lines(cf: CellFinding) -> list[str]:
    f = cf.finding
    times = f" ({cf.count} times)" if cf.count > 1 else ""
    place = "" if f.kind is FindingKind.API else f" at {_place(cf)}"  # a host call: no line
    lines = [f"{_what(cf)}{place}{times}"]
    if cf.source_line is not None:
        lines.append(f"    {cf.cell_line} | {cf.source_line.rstrip()}")
    who = []
    if f.thread is not None:
        who.append(f"first by thread {_dims(f.thread)} in block {_dims(f.block)}"
                   + (f" ({f.access.value})" if f.peer is not None and f.access.value else ""))
    if cf.place is not None:
        who.append(cf.place.describe())
    elif f.address is not None:
        who.append(f"address {f.address:#x}")
    if who:
        lines.append("    " + "; ".join(who))
    if f.peer is not None:  # a hazard's other access, and its line
        p = f.peer
        at = f"cell line {cf.peer_line}" if cf.peer_line is not None else \
            (f"{p.file}:{p.line}" if p.file and p.line else "an unknown place")
        lines.append(f"    against a {p.access.value or 'access'} at {at} by thread "
                     f"{_dims(p.thread)}")
        if cf.peer_source is not None:
            lines.append(f"    {cf.peer_line} | {cf.peer_source.rstrip()}")
    if f.text:
        lines.append(f"    compute-sanitizer: {f.text}")
    return lines


def _head(r: SanitizeReport) -> str:
    launch = f"{r.kernel}{_dims(r.grid)}{_dims(r.block)}"
    if r.clean:
        return f"{r.tool.value}: no errors in {launch} ({r.tool_version})"
    if not r.findings:
        return f"{r.tool.value}: {launch} did not run to its end ({r.tool_version})"
    # the tool keeps PRINT_LIMIT records of a run: more were not counted
    most = "at least " if r.total >= PRINT_LIMIT else ""
    return (f"{r.tool.value}: {most}{counted(r.total, 'error')} in {launch}, "
            f"{counted(len(r.findings), 'place')} ({r.tool_version})")


def sanitize_text(r: SanitizeReport) -> str:
    """The run as text: a head line, then each folded finding with its cell line."""
    lines = [_head(r)]
    for cf in r.findings:
        lines += ["  " + ln for ln in _finding_lines(cf)]
    if r.failed:
        lines += ["  " + ln for ln in r.failed.splitlines()]
    if r.findings and not r.lineinfo:
        lines.append("  (no line information: the CUBIN has none, so places are code offsets)")
    note = initcheck_note(r)
    if note:
        lines += ["  " + ln for ln in note.splitlines()]
    return "\n".join(lines)


def initcheck_note(r: SanitizeReport) -> str:
    """What an initcheck run could not see, and how to see it: the arrays copied in from the
    notebook are written memory in the child ("" for another tool, or none copied)."""
    if r.tool is not SanitizerTool.INITCHECK or not r.copied_in:
        return ""
    args = "; ".join(a.describe() for a in r.copied_in)
    indices = [str(a.index) for a in r.copied_in]
    given = f"({', '.join(indices)})" if len(indices) > 1 else indices[0]
    these, all_ = ("this array", "all of it") if len(indices) == 1 else \
        ("these arrays", "all of them")
    return (f"not seen: a read of memory the notebook never wrote, in {args}: the child got "
            f"the notebook's bytes of {these}, so initcheck takes {all_} as written\n"
            f"to see such reads, leave {these} as fresh memory (as cupy.empty gives it): "
            f"uninitialized={given}, or %cuda_sanitize --uninitialized {','.join(indices)}")


def sanitize_html(r: SanitizeReport) -> str:
    """The run as a fold: one item per folded finding, the cell's line as code."""
    esc = html.escape
    items = []
    for cf in r.findings:
        first, *rest = _finding_lines(cf)
        code = f"<pre>{esc(rest.pop(0).strip())}</pre>" if cf.source_line is not None else ""
        more = "".join(f"<div><small>{esc(x.strip())}</small></div>" for x in rest)
        items.append(f"<li><b>{esc(first)}</b>{code}{more}</li>")
    failed = f"<pre>{esc(r.failed)}</pre>" if r.failed else ""
    note = initcheck_note(r)
    failed += "".join(f"<div><small>{esc(x)}</small></div>" for x in note.splitlines())
    cls = "cudamagic-fold cudamagic-sanitize" + (" clean" if r.clean else "")
    return (f'<details class="{cls}" open><summary>{esc(_head(r))}</summary>'
            f"<ul>{''.join(items)}</ul>{failed}</details>")


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f} %"


def _rate(v: float | None) -> str:
    return "?" if v is None else f"{v / 1e9:.1f} GB/s"


def _profile_pairs(p: Profile) -> list[tuple[str, str]]:
    us = "?" if p.duration_ns is None else f"{p.duration_ns / 1e3:.1f} us"
    dram = "?" if p.dram_bytes is None else size_text(int(p.dram_bytes))
    return [("duration", us), ("compute (SM) throughput", _pct(p.compute_pct)),
            ("memory throughput", _pct(p.memory_pct)),
            ("DRAM", f"{dram} at {_rate(p.dram_bytes_per_s)} ({_pct(p.dram_pct)} of peak)"),
            ("occupancy", f"{_pct(p.achieved_occupancy_pct)} achieved of "
                          f"{_pct(p.theoretical_occupancy_pct)} theoretical"
                          + (f" (cudamagic: {_pct(p.occupancy_pct)}, limited by "
                             f"{', '.join(p.limited_by) or '-'})"
                             if p.occupancy_pct is not None else "")),
            ("top stalls", ", ".join(f"{s.reason} {s.ratio:.2f}" for s in p.stalls[:3])
             or "none reported")]


def _hot(p: Profile) -> list[str]:
    return [f"cell line {h.line}: {h.share:.0%}  {h.text}" for h in p.hot_lines]


def profile_text(p: "Profile | Comparison") -> str:
    """A profile (or several) as text."""
    if isinstance(p, Comparison):
        return "\n\n".join(profile_text(x) for x in p.profiles)
    lines = [f"{p.label}: ncu {p.tool}".rstrip()]
    lines += [f"  {k}: {v}" for k, v in _profile_pairs(p)]
    if p.hot_lines:
        lines += ["  hottest lines:"] + ["    " + h for h in _hot(p)]
    return "\n".join(lines)


def roofline_svg(profiles: Sequence[Profile], width: int = 460, height: int = 220) -> str:
    """One point per profile: operations per DRAM byte (x, log) against operations per second
    (y, log); profiles without either figure are left out."""
    pts = [(p.label, p.intensity, p.flops_per_s) for p in profiles
           if p.intensity and p.flops_per_s]
    if not pts:
        return ""
    left, right, top, bottom = 56, 12, 10, 34
    xs = [math.log10(x) for _, x, _ in pts]
    ys = [math.log10(y) for _, _, y in pts]
    x0, x1 = math.floor(min(xs)) - 1, math.ceil(max(xs)) + 1
    y0, y1 = math.floor(min(ys)) - 1, math.ceil(max(ys)) + 1

    def px(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * (width - left - right)

    def py(v: float) -> float:
        return top + (1 - (v - y0) / (y1 - y0)) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10" role="img">'
           "<title>roofline: FLOP/s against FLOP per DRAM byte</title>"]
    for e in range(x0, x1 + 1):
        out.append(f'<text x="{px(e):.1f}" y="{height - bottom + 12}" text-anchor="middle">'
                   f"1e{e}</text>")
    for e in range(y0, y1 + 1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(e):.1f}" y2="{py(e):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{py(e) + 3:.1f}" '
                   f'text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">'
               "FLOP per DRAM byte</text>")
    for i, (label, x, y) in enumerate(pts):
        colour = COLOURS[i % len(COLOURS)]
        out.append(f'<circle cx="{px(math.log10(x)):.1f}" cy="{py(math.log10(y)):.1f}" r="5" '
                   f'fill="{colour}"><title>{html.escape(label)}</title></circle>'
                   f'<text x="{width - right - 4}" y="{top + 12 + 12 * i}" text-anchor="end" '
                   f'fill="{colour}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def profile_html(p: "Profile | Comparison") -> str:
    """A profile, or several side by side (one column each), as a fold with a roofline."""
    esc = html.escape
    profiles = p.profiles if isinstance(p, Comparison) else (p,)
    rows = [k for k, _ in _profile_pairs(profiles[0])]
    cells = [dict(_profile_pairs(x)) for x in profiles]
    head = "".join(f"<th>{esc(x.label)}</th>" for x in profiles)
    body = "".join(f"<tr><th>{esc(k)}</th>" + "".join(f"<td>{esc(c[k])}</td>" for c in cells)
                   + "</tr>" for k in rows)
    hot = "".join(f"<div><b>{esc(x.label)}</b><pre>{esc(chr(10).join(_hot(x)))}</pre></div>"
                  for x in profiles if x.hot_lines)
    title = f"profile: {', '.join(x.label for x in profiles)}"
    return (f'<details class="cudamagic-fold cudamagic-profile" open><summary>{esc(title)}'
            f"</summary><table><tr><th></th>{head}</tr>{body}</table>{hot}"
            f"{roofline_svg(profiles)}</details>")


def crash_lines(code: Sticky, device: int, last: Any, first: bool = True) -> list[str]:
    """What a cell's error adds where a lost context surfaced in another library's call (CuPy,
    cuda.bindings): the first time, what happened, what to do and the sanitize call that finds
    the cause; later, one line."""
    if not first:
        return ["", f"cudamagic: {lost_text(code, device, earlier=True)}."]
    return ["", f"cudamagic: {lost_text(code, device)}.", f"cudamagic: {sanitize_hint(last)}"]


class DebugView:
    """A debugging record as a notebook shows it (text, HTML); the record is :attr:`record`
    and its fields read through."""

    def __init__(self, record: Any) -> None:
        self.record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["record"], name)

    def text(self) -> str:
        return "\n\n".join(sanitize_text(r) if isinstance(r, SanitizeReport) else
                           profile_text(r) for r in self._records())

    def html(self) -> str:
        return "".join(sanitize_html(r) if isinstance(r, SanitizeReport) else profile_html(r)
                       for r in self._records())

    def _records(self) -> tuple:
        r = self.record
        return r if isinstance(r, tuple) else (r,)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<cudamagic {type(self.record).__name__}>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())

    def _repr_html_(self) -> str:
        return '<div class="cudamagic-report">' + self.html() + "</div>"


def present(record: Any) -> DebugView:
    """The view a tool run's record is returned in (the pipeline gives modules this)."""
    return DebugView(record)
