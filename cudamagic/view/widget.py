"""The ipywidgets view of a :class:`~cudamagic.report.BuildReport`, and how a report is shown.

The widget lays out the record's HTML view (:mod:`cudamagic.report`) and decides no words. It is
one ``ipywidgets.HTML`` (carrying the CSS class ``cudamagic-widget``), the phases and the compile
log behind ``<details>``; a report of more than :data:`~cudamagic.report.SHOWN_ROWS` kernels adds
an Accordion whose rows are rendered only when it is opened. One HTML widget rather than a box
of them: each widget is a comm (and a Layout and a Style besides), and the fewer there are, the
less the notebook waits (measured in docs/performance.md).

Where widgets cannot render (terminal IPython, an HTML export), the same record shows as text
or HTML: the widget's display bundle carries both beside it.
"""

from __future__ import annotations

import time

from .report import (SHOWN_ROWS, BuildReport, html_body, html_head, html_rows, html_table,
                     text_body, text_head, text_phases, wrap_html)

__all__ = ["report_widget", "show_report", "show_warnings", "WIDGET_CLASS"]

#: The CSS class of the widget's own element (the HTML fallback never carries it).
WIDGET_CLASS = "cudamagic-widget"


def report_widget(report: BuildReport, body: str | None = None):
    """The report as an ipywidgets widget: an ``HTML`` (or, past :data:`SHOWN_ROWS` kernels, a
    ``VBox`` of it and an Accordion holding the other rows, filled when first opened).

    ``body`` is the report's HTML body when the caller rendered it already.
    """
    import ipywidgets as w

    if body is None:
        body = html_body(report, SHOWN_ROWS)
    main = w.HTML(wrap_html(html_head(report) + body), **_shared_looks(w))
    main.add_class(WIDGET_CLASS)
    if len(report.rows) <= SHOWN_ROWS:
        return main
    rest = w.HTML("")
    more = w.Accordion(children=[rest], selected_index=None)
    more.set_title(0, f"show the other {len(report.rows) - SHOWN_ROWS} kernels")
    more.add_class("cudamagic-more-rows")

    def fill(change) -> None:
        if change["new"] is not None and not rest.value:
            rest.value = html_table(report, html_rows(report, SHOWN_ROWS))

    more.observe(fill, names="selected_index")
    box = w.VBox([main, more])
    box.add_class("cudamagic-report-box")
    return box


_looks: dict = {}


def _shared_looks(w) -> dict:
    """One Layout and one Style for every report's HTML widget: a widget's own would be two more
    comms for each report (measured in a Jupyter kernel: an HTML widget built in 1.3 ms with its
    own, 0.6 ms with shared ones). Made again after ``Widget.close_all()``."""
    if not _looks or any(getattr(x, "comm", None) is None for x in _looks.values()):
        first = w.HTML()
        _looks.update(layout=first.layout, style=first.style)
    return _looks


def prepare() -> None:
    """Make the shared Layout and Style now (``%load_ext``), in a Jupyter kernel: the first
    report then opens one comm instead of three (about 3 ms on an H200 host)."""
    if _in_kernel():
        import ipywidgets

        _shared_looks(ipywidgets)


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def show_report(report: BuildReport) -> BuildReport:
    """Display the report: a widget in a Jupyter front end (with its text and HTML beside it for
    front ends and exports that cannot render widgets), text in a terminal.

    The time rendering takes (the table, as text and HTML) is the ``display`` phase and part of
    the time shown; building the widget and sending it come after and are not. Returns the
    record as shown.
    """
    from IPython.display import display

    t = time.perf_counter()
    kernel = _in_kernel()
    text = text_body(report, SHOWN_ROWS)
    body = html_body(report, SHOWN_ROWS) if kernel else ""
    spent = time.perf_counter() - t
    report = report.with_timings(
        cell_seconds=None if report.cell_seconds is None else report.cell_seconds + spent,
        display=spent)
    plain = "\n".join([*text_head(report), *text, text_phases(report)])
    if not kernel:
        display({"text/plain": plain}, raw=True)
        return report
    bundle = report_widget(report, body)._repr_mimebundle_()
    bundle["text/plain"] = plain
    bundle["text/html"] = wrap_html(html_head(report) + body)
    display(bundle, raw=True)
    return report


def show_warnings(report: BuildReport) -> None:
    """Say a report's warnings alone (``%%cuda -q``: no report, but a warning is still said,
    once)."""
    if not report.warnings:
        return
    import html

    from IPython.display import display

    lines = [f"cudamagic: warning: {w}" for w in report.warnings]
    display({"text/plain": "\n".join(lines),
             "text/html": '<div class="cudamagic-report">' + "".join(
                 f'<div class="cudamagic-warning">&#9888; {html.escape(x)}</div>'
                 for x in lines) + "</div>"}, raw=True)
