"""The widget, constructed from a report and read back: its own CSS class, the badge, the rows,
the explanation of a miss, the rows past 50 rendered only on opening; and what show_report
displays in a kernel and in a terminal."""

from __future__ import annotations

import re

import ipywidgets as w
import pytest

from cudamagic.view import widget as W
from cudamagic.view.report import SHOWN_ROWS, Explanation

from .test_report import make


def _badge(value: str) -> tuple[str, str]:
    m = re.search(r'<span class="cudamagic-badge (cudamagic-\w+)"[^>]*>([^<]*)</span>', value)
    assert m, value[:300]
    return m.group(2), m.group(1)


def test_a_miss_widget_shows_the_badge_the_rows_and_why():
    report = make(3, "compiled", explanation=Explanation(
        ("source",), ("the source changed (line 5)",), ("line 5 - old", "line 5 + new")))
    view = W.report_widget(report)
    assert isinstance(view, w.HTML) and W.WIDGET_CLASS in view._dom_classes
    assert _badge(view.value) == ("cache miss", "cudamagic-miss")
    assert "why: the source changed (line 5)" in view.value
    assert "line 5 - old\nline 5 + new" in view.value
    rows = re.findall(r"<tr><td[^>]*><code>(k_\d)</code>", view.value)
    assert rows == ["k_0", "k_1", "k_2"]
    assert "void k&lt;float, 0&gt;(float*)" in view.value  # the display signature, escaped
    assert "/home/u/.cache/cudamagic" in view.value  # the cache folder (item 8)
    assert "where the 250.0 ms went" in view.value and "<details" in view.value


def test_a_hit_widget_says_hit_and_no_why():
    view = W.report_widget(make(2, "cache", cell_seconds=0.003))
    assert _badge(view.value) == ("cache hit", "cudamagic-hit")
    assert "cudamagic-why" not in view.value
    assert "3.0 ms · 2 kernels · sm_90" in view.value


def test_report_widgets_share_one_layout_and_style():
    a, b = W.report_widget(make(1)), W.report_widget(make(1))
    assert a.layout is b.layout and a.style is b.style  # two comms fewer per report


def test_rows_past_fifty_are_rendered_when_opened():
    report = make(SHOWN_ROWS + 30)
    view = W.report_widget(report)
    assert isinstance(view, w.VBox)
    main, more = view.children
    assert W.WIDGET_CLASS in main._dom_classes and isinstance(more, w.Accordion)
    kernels = re.compile(r"<tr><td[^>]*><code>k_")
    assert len(kernels.findall(main.value)) == SHOWN_ROWS
    assert more.get_title(0) == "show the other 30 kernels"
    rest = more.children[0]
    assert rest.value == ""  # nothing rendered up front
    more.selected_index = 0
    assert len(kernels.findall(rest.value)) == 30
    assert "k_79" in rest.value and "k_49<" not in rest.value


@pytest.fixture
def shown(monkeypatch):
    out = []
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False, **kw: out.append(obj))
    return out


def test_show_report_in_a_kernel_gives_the_widget_with_its_fallbacks(monkeypatch, shown):
    monkeypatch.setattr(W, "_in_kernel", lambda: True)
    before = make(2, "cache", cell_seconds=0.002)
    after = W.show_report(before)
    (bundle,) = shown
    assert set(bundle) >= {"application/vnd.jupyter.widget-view+json", "text/plain", "text/html"}
    assert bundle["text/plain"].startswith("cudamagic: cache hit")
    assert 'class="cudamagic-badge cudamagic-hit"' in bundle["text/html"]
    # the rendering is timed, shown among the phases and in the cell's time
    assert after.timings["display"] > 0
    assert after.cell_seconds == pytest.approx(0.002 + after.timings["display"])
    assert "display (render)" in bundle["text/plain"]


def test_show_report_in_a_terminal_is_text(monkeypatch, shown):
    monkeypatch.setattr(W, "_in_kernel", lambda: False)
    W.show_report(make(2))
    assert shown == [{"text/plain": shown[0]["text/plain"]}]
    assert shown[0]["text/plain"].startswith("cudamagic: cache miss")


def test_show_warnings_alone_for_quiet_cells(shown):
    W.show_warnings(make(1))
    assert shown == []
    W.show_warnings(make(1, warnings=("a <b>",)))
    assert shown[0]["text/plain"] == "cudamagic: warning: a <b>"
    assert "a &lt;b&gt;" in shown[0]["text/html"]
