"""The report in a notebook: how a report is shown, and the one widget it may need.

The report is an output of its own HTML (``text/html``, with its text as ``text/plain``): what
is saved in the notebook is what every front end draws, with or without a kernel. JupyterLab
picks an output's renderer by the renderers' rank, not by the bundle's order, and ipywidgets'
renderer ranks first; where the bundle names a widget model the page does not have (a notebook
reopened after its kernel stopped: JupyterLab does not save widget state unless a setting says
so), that renderer writes "Error displaying widget: model not found" and falls back to nothing.
So the report's own output names no widget (docs/report-design.md).

Only a report of more than :data:`~cudamagic.view.report.SHOWN_ROWS` kernels adds a widget, in a
second output below it: an ipywidgets Accordion, *show the other N kernels*, whose rows the
kernel makes when it is opened (they need the kernel).

The models are opened on the widget protocol's own comm (``jupyter.widget``) with the state
ipywidgets itself would send (a test compares the two), so showing a report does not import
ipywidgets' Python package. The front end (JupyterLab's widget manager, from
``jupyterlab_widgets``) renders them as it renders any ``ipywidgets.Accordion``.

Nothing here imports IPython or comm: the shell hands a :class:`Frontend` down (how to display a
bundle, how to open a model's comm), made by :func:`cudamagic.shell.magic.frontend`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ImageError
from ..core.miss import BuildPhase
from ..core.units import counted
from .render import wrap_html
from .report import (SHOWN_ROWS, BuildReport, KernelRows, html_body, html_head, html_rows,
                     html_table, text_body, text_head, text_phases)

__all__ = ["Frontend", "RowsFold", "show_report", "show_warnings", "report_with_attributes",
           "MORE_CLASS"]

#: The CSS class of the Accordion that holds the rows past the first ``SHOWN_ROWS``.
MORE_CLASS = "cudamagic-more-rows"

#: The widget protocol and the front-end module versions of ipywidgets 8 (the dependency's
#: major version): ``ipywidgets._version`` holds the same numbers.
PROTOCOL_VERSION = "2.1.0"
CONTROLS = "@jupyter-widgets/controls"
CONTROLS_VERSION = "2.0.0"
VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def _state(model: str, **state: Any) -> dict[str, Any]:
    """A controls model's full state as ipywidgets sends it, less the Layout (and, for an HTML,
    the Style) model it would make: the front end draws a view without them."""
    return {"_dom_classes": [], "_model_module": CONTROLS,
            "_model_module_version": CONTROLS_VERSION, "_model_name": f"{model}Model",
            "_view_count": None, "_view_module": CONTROLS,
            "_view_module_version": CONTROLS_VERSION, "_view_name": f"{model}View",
            "tabbable": None, "tooltip": None, **state}


def html_state(value: str, classes: tuple[str, ...] = ()) -> dict[str, Any]:
    """An ``ipywidgets.HTML``'s state."""
    return _state("HTML", _dom_classes=list(classes), description="",
                  description_allow_html=False, placeholder="\u200b", value=value)


def accordion_state(child: str, title: str, classes: tuple[str, ...] = ()) -> dict[str, Any]:
    """A closed one-child ``ipywidgets.Accordion``'s state (``child``: a model reference)."""
    return _state("Accordion", _dom_classes=list(classes), box_style="", children=[child],
                  selected_index=None, titles=[title])


#: ``open_comm(target_name=, data=, metadata=)``: opens a comm to the front end and returns it
#: (``comm.create_comm``'s signature; the object has ``comm_id``, ``send`` and ``on_msg``)
OpenComm = Callable[..., Any]


@dataclass(frozen=True)
class Frontend:
    """Where a report is shown, as the shell knows it.

    Attributes
    ----------
    display : callable
        ``display(bundle)`` shows a raw mime bundle (IPython's ``display(bundle, raw=True)``).
    open_comm : callable or None
        Opens a widget model's comm (:data:`OpenComm`); None where no front end draws widgets
        (terminal IPython): the report is text there.
    """

    display: Callable[[dict[str, Any]], None]
    open_comm: OpenComm | None = None


class _Model:
    """One widget model in the front end, kept in step over its comm: what ipywidgets' ``Widget``
    does, for the few plain models a report uses."""

    def __init__(self, state: dict[str, Any], open_comm: OpenComm,
                 on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.state = state
        self.on_change = on_change
        self.comm = open_comm(target_name="jupyter.widget",
                              data={"state": state, "buffer_paths": []},
                              metadata={"version": PROTOCOL_VERSION})
        self.comm.on_msg(self._receive)

    @property
    def ref(self) -> str:
        """How another model's state names this one."""
        return f"IPY_MODEL_{self.comm.comm_id}"

    def update(self, **state: Any) -> None:
        """Change the model here and in the front end."""
        self.state.update(state)
        self.comm.send({"method": "update", "state": state, "buffer_paths": []})

    def _receive(self, msg: dict) -> None:
        data = msg["content"]["data"]
        if data.get("method") == "request_state":  # a front end reloaded, or a second view
            self.comm.send({"method": "update", "state": self.state, "buffer_paths": []})
        elif data.get("method") == "update":
            changed = data.get("state", {})
            self.state.update(changed)
            if self.on_change is not None:
                self.on_change(changed)


class RowsFold:
    """The rows a shown report leaves out, one click away: the models are opened in the front
    end when it is made (``open_comm``: :attr:`Frontend.open_comm`). Only for a report of more
    than ``SHOWN_ROWS`` kernels."""

    def __init__(self, report: BuildReport, open_comm: OpenComm) -> None:
        hidden = len(report.rows) - SHOWN_ROWS
        if hidden <= 0:
            raise ValueError(f"a report of {len(report.rows)} kernels shows them all")
        self.report = report
        self.rest = _Model(html_state(""), open_comm)
        title = f"show the other {counted(hidden, 'kernel')}"
        self.more = _Model(accordion_state(self.rest.ref, title, (MORE_CLASS,)), open_comm,
                           self._opened)

    def _opened(self, changed: dict[str, Any]) -> None:
        """The Accordion was opened: make the hidden rows now, once."""
        if self.rest is None:
            return
        if changed.get("selected_index") is not None and not self.rest.state["value"]:
            self.rest.update(value=html_table(self.report, html_rows(self.report, SHOWN_ROWS)))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {VIEW_MIME: {"version_major": 2, "version_minor": 0,
                            "model_id": self.more.comm.comm_id},
                "text/plain": f"cudamagic: {self.report.more_rows(SHOWN_ROWS)}"}


def report_with_attributes(module, report: BuildReport | None = None,
                           limit: int = 64) -> BuildReport:
    """The report (default: the module's) with registers and static shared, local and constant
    memory per kernel, read off the CUBIN (the same numbers the driver reports: the GPU tests
    compare them), so it needs no GPU and loads nothing on one.

    Modules of more than ``limit`` kernels get them for the rows the table shows (its first
    ``SHOWN_ROWS``) only: the other rows are not made.
    """
    report = module.report if report is None else report
    if not module.kernels or not report.rows:
        return report
    found: dict[str, dict[str, int] | None] = {}

    def resources(symbol: str) -> dict[str, int] | None:
        if symbol not in found:
            try:
                res = module.image.kernel(symbol).resources
            except ImageError:  # a launch says what is wrong; the report shows no numbers
                res = None
            found[symbol] = None if res is None else res.as_dict()
        return found[symbol]

    if len(module.kernels) > limit and isinstance(report.rows, KernelRows):
        head = tuple(resources(r.symbol) for r in report.rows[:SHOWN_ROWS])
        return dataclasses.replace(report, rows=report.rows.with_head(head))
    rows = tuple(dataclasses.replace(r, attributes=resources(r.symbol)) for r in report.rows)
    return dataclasses.replace(report, rows=rows)


def show_report(report: BuildReport, front: Frontend,
                extra: Callable[[], str] | None = None) -> BuildReport:
    """Display the report on ``front``: its HTML (and text) in a Jupyter front end, and past
    ``SHOWN_ROWS`` kernels the fold of the rest (:class:`RowsFold`) below it; text in a terminal.

    The time rendering takes (the table, as text and HTML) is the ``display`` phase and part of
    the time shown; opening the fold's widget and sending it come after and are not. Returns the
    record as shown. ``extra`` makes more HTML for the end of the report in a notebook (the
    timing and occupancy fold), timed with the rest.
    """
    t = time.perf_counter()
    kernel = front.open_comm is not None
    text = text_body(report, SHOWN_ROWS)
    body = html_body(report, SHOWN_ROWS) + (extra() if extra else "") if kernel else ""
    spent = time.perf_counter() - t
    report = report.with_timings(
        {BuildPhase.DISPLAY: spent},
        cell_seconds=None if report.cell_seconds is None else report.cell_seconds + spent)
    plain = "\n".join([*text_head(report), *text, text_phases(report)])
    if front.open_comm is None:
        front.display({"text/plain": plain})
        return report
    front.display({"text/plain": plain, "text/html": wrap_html(html_head(report) + body)})
    if len(report.rows) > SHOWN_ROWS:
        front.display(RowsFold(report, front.open_comm)._repr_mimebundle_())
    return report


def show_warnings(report: BuildReport, front: Frontend) -> None:
    """Say a report's warnings alone on ``front`` (``%%cuda -q``: no report, but a warning is
    still said, at each run)."""
    if not report.warnings:
        return
    import html

    lines = [f"cudamagic: warning: {w}" for w in report.warnings]
    front.display({"text/plain": "\n".join(lines),
                   "text/html": '<div class="cudamagic-report">' + "".join(
                       f'<div class="cudamagic-warning">&#9888; {html.escape(x)}</div>'
                       for x in lines) + "</div>"})
