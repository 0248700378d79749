"""The ipywidgets view of a :class:`~cudamagic.report.BuildReport`.

It renders the report record and nothing else. Where widgets cannot render (terminal IPython,
a plain HTML export), :func:`show_report` displays the record itself, whose ``_repr_html_`` and
``_repr_pretty_`` give the same content as HTML and text.
"""

from __future__ import annotations

import html

from .report import BuildReport

__all__ = ["report_widget", "show_report"]

_BADGE = {"cache": ("#1a7f37", "cache hit"), "compiled": ("#9a6700", "cache miss"),
          "cubin": ("#0969da", "loaded CUBIN")}


def report_widget(report: BuildReport):
    """An ``ipywidgets.VBox``: badge and timings, the name map table, warnings, the log."""
    import ipywidgets as w

    color, label = _BADGE[report.origin]
    total = report.timings.get("total", 0.0) * 1e3
    compile_s = report.timings.get("compile")
    timing = (f"compiled in {compile_s * 1e3:.0f} ms" if compile_s is not None
              else f"loaded in {total:.1f} ms")
    reason = f" &mdash; {html.escape(report.miss_reason)}" if report.miss_reason else ""
    head = w.HTML(
        f'<span class="cudamagic-badge" style="background:{color};color:white;padding:1px 6px;'
        f'border-radius:4px">{label}</span> <span class="cudamagic-timing">{timing}</span>'
        f"{reason} &middot; key <code>{report.short_key}</code> &middot; {report.arch} &middot; "
        f"NVRTC {html.escape(report.nvrtc_version)} &middot; demangler "
        f"{html.escape(report.demangler)} &middot; enumerated by "
        f"{html.escape(report.enumerated_by)}")
    parts = [head, w.HTML(_table(report))]
    if report.warnings:
        parts.append(w.HTML("".join(f'<div class="cudamagic-warning">&#9888; {html.escape(x)}</div>'
                                    for x in report.warnings)))
    if report.log:
        log = w.Accordion(children=[w.HTML(f"<pre>{html.escape(report.log)}</pre>")])
        log.set_title(0, "compile log")
        log.selected_index = None
        parts.append(log)
    box = w.VBox(parts)
    box.add_class("cudamagic-report")
    return box


def _table(report: BuildReport) -> str:
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{html.escape(c)}</th>"
                   for c in report.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td style='padding:0 8px'><code>{html.escape(c)}</code></td>"
                         for c in report.cells(r)) + "</tr>" for r in report.rows)
    return (f'<table class="cudamagic-names"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def show_report(report: BuildReport) -> None:
    """Display the report: as a widget in a Jupyter front end, else as the record (HTML/text)."""
    from IPython.display import display

    try:
        from IPython import get_ipython

        ip = get_ipython()
        in_kernel = ip is not None and getattr(ip, "kernel", None) is not None
        if in_kernel:
            # the widget, with the record's HTML and text beside it for front ends and exports
            # that cannot render widgets
            bundle = report_widget(report)._repr_mimebundle_()
            bundle["text/plain"] = report.text()
            bundle["text/html"] = report.html()
            display(bundle, raw=True)
            return
    except ImportError:  # pragma: no cover - ipywidgets is a dependency
        pass
    display(report)
