"""The layout every view shares: a text table, an HTML table of plain cells, the report's outer
element, the cell style and the width text folds at. They lay out words and compute none; the
report's own layout is :mod:`.report`'s, the line magics' records' :mod:`.records`'.
"""

from __future__ import annotations

import html

__all__ = ["table_text", "plain_table_html", "wrap_html", "CELL_STYLE", "TEXT_WIDTH"]


def table_text(columns: tuple[str, ...], rows) -> list[str]:
    """A table as text lines, each column as wide as its widest cell."""
    widths = [len(c) for c in columns]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            for r in (columns, *rows)]


#: Where a text line of the report folds (the phases' line would run past 400 characters).
TEXT_WIDTH = 100

#: The style of a table cell in every HTML view.
CELL_STYLE = "text-align:left;padding:1px 10px 1px 0;vertical-align:top"


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
