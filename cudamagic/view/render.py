"""The report's two plain views: text (a terminal, logs, ``print(report)``) and HTML (the
widget's content, and the fallback where widgets do not render). They lay out the record's
words and compute none.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..units import duration_text
from .report import SHOWN_ROWS

if TYPE_CHECKING:  # pragma: no cover
    from .report import BuildReport

__all__ = ["render_text", "render_html", "text_head", "text_body", "text_phases", "html_head",
           "html_body", "html_rows", "html_table", "wrap_html", "table_text", "plain_table_html",
           "CELL_STYLE", "TEXT_WIDTH"]


def table_text(columns: tuple[str, ...], rows) -> list[str]:
    """A table as text lines, each column as wide as its widest cell."""
    widths = [len(c) for c in columns]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in (columns, *rows)]


def text_head(report: BuildReport) -> list[str]:
    """The headline and, for a changed source, its diff."""
    diff = report.explanation.diff if report.explanation is not None and report.why else ()
    return [report.headline, *(f"    {d}" for d in diff)]


#: Where a text line of the report folds (the phases' line would run past 400 characters).
TEXT_WIDTH = 100


def _fold(prefix: str, items) -> str:
    """``items`` joined by `` · `` after ``prefix``, folded between items at
    :data:`TEXT_WIDTH` (continuation lines indented under the first item)."""
    first, *rest = items
    lines, indent = [prefix + first], " " * len(prefix)
    for item in rest:
        if len(lines[-1]) + len(" · ") + len(item) + len(" ·") > TEXT_WIDTH:
            lines[-1] += " ·"
            lines.append(indent + item)
        else:
            lines[-1] += " · " + item
    return "\n".join(lines)


def text_phases(report: BuildReport) -> str:
    """Where the time went, folded between phases."""
    return _fold("  time: ", [f"{p.label} {p.text}" for p in report.phases])


def text_body(report: BuildReport, max_rows: int | None = None) -> list[str]:
    """The name map, the warnings, what the build used, the compile log."""
    lines = table_text(report.columns, report.table(0, max_rows))
    more = report.more_rows(max_rows)
    if more:
        lines.append(f"  ... {more}")
    notes = report.launch_notes(max_rows)
    if notes:
        lines.append(_fold("  launch: ", [f"{name} {note}" for name, note in notes]))
    if report.variables:
        lines.append(_fold("  variables: ", report.variables))
    lines += [f"  warning: {w}" for w in report.warnings]
    lines.append(_fold("  ", [f"{k} {v}" for k, v in report.facts]))
    if report.log:
        lines += ["  compile log:"] + [f"    {ln}" for ln in report.log.splitlines()]
    return lines


def render_text(report: BuildReport, max_rows: int | None = None) -> str:
    """The whole report as text."""
    return "\n".join([*text_head(report), *text_body(report, max_rows), text_phases(report)])


_BADGE_STYLE = {"cudamagic-hit": "#1a7f37", "cudamagic-miss": "#9a6700",
                "cudamagic-cubin": "#0969da"}
CELL_STYLE = "text-align:left;padding:1px 10px 1px 0;vertical-align:top"


def html_rows(report: BuildReport, start: int = 0, stop: int | None = None) -> str:
    """Table rows ``start:stop`` of the name map as ``<tr>`` elements."""
    esc = html.escape
    return "".join("<tr>" + "".join(f"<td style='{CELL_STYLE}'><code>{esc(c)}</code></td>"
                                    for c in r)
                   + "</tr>" for r in report.table(start, stop))


def html_table(report: BuildReport, rows_html: str, cls: str = "cudamagic-names") -> str:
    """The name map's table around rows made by :func:`html_rows`."""
    head = "".join(f"<th style='{CELL_STYLE};white-space:nowrap'>{html.escape(c)}</th>"
                   for c in report.columns)
    return (f'<table class="{cls}" style="border-collapse:collapse"><thead><tr>{head}</tr>'
            f"</thead><tbody>{rows_html}</tbody></table>")


def html_body(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The name map (cut at ``max_rows``), the warnings, the compile log, what the build used."""
    esc = html.escape
    parts = [html_table(report, html_rows(report, 0, max_rows))]
    more = report.more_rows(max_rows)
    if more:
        parts.append(f'<div class="cudamagic-more"><i>&hellip; {esc(more)}</i></div>')
    notes = report.launch_notes(max_rows)
    if notes:
        parts.append('<div class="cudamagic-launch">launch: ' + " &middot; ".join(
            f"<code>{esc(name)}</code> {esc(note)}" for name, note in notes) + "</div>")
    if report.variables:
        parts.append(f'<div class="cudamagic-variables">variables: '
                     + " &middot; ".join(esc(v) for v in report.variables) + "</div>")
    if report.warnings:
        parts.append('<ul class="cudamagic-warnings" style="margin:4px 0;padding-left:18px">'
                     + "".join(f'<li class="cudamagic-warning">&#9888; {esc(w)}</li>'
                               for w in report.warnings) + "</ul>")
    if report.log:
        parts.append(f'<details class="cudamagic-log"><summary>compile log</summary>'
                     f"<pre>{esc(report.log)}</pre></details>")
    parts.append('<div class="cudamagic-facts" style="opacity:.75;font-size:90%">'
                 + " &middot; ".join(f"{esc(k)} <code>{esc(v)}</code>" for k, v in report.facts)
                 + "</div>")
    return "".join(parts)


def html_head(report: BuildReport) -> str:
    """The badge, the time, why a miss happened (with its diff), and the phases behind a click."""
    esc = html.escape
    b = report.badge
    head = (f'<div class="cudamagic-head"><span class="cudamagic-badge {b.css_class}" '
            f'style="background:{_BADGE_STYLE[b.css_class]};color:white;padding:1px 6px;'
            f'border-radius:4px">{esc(b.label)}</span> '
            f'<span class="cudamagic-summary">{esc(report.summary)}</span></div>')
    why = ""
    if report.why:
        diff = report.explanation.diff if report.explanation else ()
        pre = (f'<pre class="cudamagic-diff" style="margin:2px 0">{esc(chr(10).join(diff))}</pre>'
               if diff else "")
        why = f'<div class="cudamagic-why">why: {esc(report.why)}{pre}</div>'
    rows = "".join(f"<tr><td style='{CELL_STYLE}'>{esc(p.label)}</td>"
                   f"<td style='{CELL_STYLE};text-align:right'>{esc(p.text)}</td></tr>"
                   for p in report.phases)
    took = esc(duration_text(report.seconds))
    phases = (f'<details class="cudamagic-phases"><summary>where the {took} '
              f'went</summary><table style="border-collapse:collapse">{rows}</table></details>')
    return head + why + phases


def render_html(report: BuildReport, max_rows: int | None = SHOWN_ROWS) -> str:
    """The whole report as one HTML fragment."""
    return wrap_html(html_head(report) + html_body(report, max_rows))


def wrap_html(inner: str) -> str:
    """The report's outer element (its CSS class marks every form of the report)."""
    return f'<div class="cudamagic-report">{inner}</div>'


def plain_table_html(columns: tuple[str, ...], rows: list[tuple[str, ...]], cls: str) -> str:
    """A table of plain cells as HTML (the line magics' records)."""
    esc = html.escape
    head = "".join(f"<th style='{CELL_STYLE}'>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td style='{CELL_STYLE}'>{esc(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
