"""The report in a notebook: its own output is HTML and names no widget (a saved notebook shows
it without its kernel); past 50 kernels a second output, "show the other N kernels", is an
Accordion whose models are the ones ipywidgets would open (state for state) and whose rows are
made only when it is opened; what show_report displays in a kernel and in a terminal; and, in a
real Jupyter kernel, the comm messages a report costs and that ipywidgets' Python package stays
unimported."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time

import pytest
from comm import create_comm  # no kernel here: comm's own stand-in, no front end

from cudamagic.view import report as R
from cudamagic.view import widget as W
from cudamagic.view.report import SHOWN_ROWS, Explanation

from .test_report import make

KERNEL_ROW = re.compile(r"<tr><td[^>]*><code>k_")


def _badge(value: str) -> tuple[str, str]:
    m = re.search(r'<span class="cudamagic-badge (cudamagic-\w+)"[^>]*>([^<]*)</span>', value)
    assert m, value[:300]
    return m.group(2), m.group(1)


def _frontend_opens(model) -> None:
    """What the front end sends when the user opens an Accordion (the widget protocol's update
    message, as JupyterLab's widget manager sends it)."""
    model._receive({"content": {"data": {"method": "update", "state": {"selected_index": 0},
                                         "buffer_paths": []}}})


# --- the models are ipywidgets' own ----------------------------------------------------------

def _ipywidgets_state(widget) -> dict:
    state = json.loads(json.dumps(widget.get_state()))  # as the comm carries it
    return {k: v for k, v in state.items() if k not in ("layout", "style")}


def test_the_models_state_is_what_ipywidgets_sends():
    ipywidgets = pytest.importorskip("ipywidgets")
    from ipywidgets import _version

    html = ipywidgets.HTML("<b>x</b>")
    html.add_class("one")
    assert W.html_state("<b>x</b>", ("one",)) == _ipywidgets_state(html)
    more = ipywidgets.Accordion(children=[ipywidgets.HTML()], selected_index=None)
    more.set_title(0, "show")
    more.add_class("m")
    child = f"IPY_MODEL_{more.children[0].model_id}"
    assert W.accordion_state(child, "show", ("m",)) == _ipywidgets_state(more)
    assert (W.PROTOCOL_VERSION, W.CONTROLS_VERSION) == (
        _version.__protocol_version__, _version.__jupyter_widgets_controls_version__)


# --- what the report shows -------------------------------------------------------------------

def test_a_miss_report_shows_the_badge_the_rows_and_why():
    report = make(3, "compiled", explanation=Explanation(
        ("source",), ("the source changed (line 5)",), ("line 5 - old", "line 5 + new")))
    value = report.html()
    assert _badge(value) == ("cache miss", "cudamagic-miss")
    assert "why: the source changed (line 5)" in value
    assert "line 5 - old\nline 5 + new" in value
    assert re.findall(r"<tr><td[^>]*><code>(k_\d)</code>", value) == ["k_0", "k_1", "k_2"]
    assert "void k&lt;float, 0&gt;(float*)" in value  # the display signature, escaped
    assert "/home/u/.cache/cudamagic" in value  # the cache folder
    assert "where the 250.0 ms went" in value and "<details" in value


def test_a_hit_report_says_hit_and_no_why():
    value = make(2, "cache", cell_seconds=0.003).html()
    assert _badge(value) == ("cache hit", "cudamagic-hit")
    assert "cudamagic-why" not in value
    assert "3.0 ms · 2 kernels · sm_90" in value


@pytest.mark.parametrize("n", [1, SHOWN_ROWS - 1, SHOWN_ROWS, SHOWN_ROWS + 1, SHOWN_ROWS + 2, 120])
def test_show_the_other_kernels_only_past_fifty(n, shown):
    report = make(n)
    W.show_report(report, W.Frontend(shown.append, create_comm))
    assert len(KERNEL_ROW.findall(shown[0]["text/html"])) == min(n, SHOWN_ROWS)
    if n <= SHOWN_ROWS:  # one output, nothing hidden, nothing to open
        assert len(shown) == 1 and "more kernel" not in shown[0]["text/html"]
        with pytest.raises(ValueError):
            W.RowsFold(report, create_comm)
        return
    hidden = n - SHOWN_ROWS
    assert len(shown) == 2 and set(shown[1]) == {W.VIEW_MIME, "text/plain"}
    assert f"{hidden} more kernel" in shown[0]["text/html"]
    assert f"{hidden} more kernel" in shown[1]["text/plain"]
    view = W.RowsFold(report, create_comm)
    title = f"show the other {hidden} kernel{'s' if hidden > 1 else ''}"
    more = view.more
    assert more.state["titles"] == [title] and more.state["selected_index"] is None
    assert view.rest.state["value"] == ""  # nothing made up front
    _frontend_opens(more)
    rows = KERNEL_ROW.findall(view.rest.state["value"])
    assert len(rows) == hidden
    assert f"k_{n - 1}<" in view.rest.state["value"]
    assert f"k_{SHOWN_ROWS - 1}<" not in view.rest.state["value"]


def test_the_hidden_rows_cost_nothing_until_opened(monkeypatch):
    calls = []
    real = R.display_signature
    monkeypatch.setattr(R, "display_signature", lambda *a: calls.append(a) or real(*a))
    report = make(1000)
    report.html()
    view = W.RowsFold(report, create_comm)
    assert len(calls) == SHOWN_ROWS  # the rows shown, and no more
    _frontend_opens(view.more)
    _frontend_opens(view.more)  # opened twice: made once
    assert len(calls) == 1000


def test_a_reloaded_front_end_gets_the_whole_state():
    model = W.RowsFold(make(SHOWN_ROWS + 1), create_comm).more
    sent = []
    model.comm.send = lambda data=None, **kw: sent.append(data)
    model._receive({"content": {"data": {"method": "request_state"}}})
    assert sent == [{"method": "update", "state": model.state, "buffer_paths": []}]


# --- what show_report displays -----------------------------------------------------------------

@pytest.fixture
def shown():
    return []


def test_show_report_in_a_kernel_gives_html_and_text_and_no_widget(shown):
    """A saved notebook keeps the output as sent: naming a widget model there would leave
    "model not found" once the kernel is gone (JupyterLab saves no widget state by default)."""
    before = make(2, "cache", cell_seconds=0.002)
    after = W.show_report(before, W.Frontend(shown.append, create_comm))
    (bundle,) = shown
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"].startswith("cudamagic: cache hit")
    assert 'class="cudamagic-badge cudamagic-hit"' in bundle["text/html"]
    # the rendering is timed, shown among the phases and in the cell's time
    assert after.timings["display"] > 0
    assert after.cell_seconds == pytest.approx(0.002 + after.timings["display"])
    assert "display (render)" in bundle["text/plain"]


def test_show_report_in_a_terminal_is_text(shown):
    W.show_report(make(2), W.Frontend(shown.append))
    assert shown == [{"text/plain": shown[0]["text/plain"]}]
    assert shown[0]["text/plain"].startswith("cudamagic: cache miss")


def test_show_warnings_alone_for_quiet_cells(shown):
    W.show_warnings(make(1), W.Frontend(shown.append))
    assert shown == []
    W.show_warnings(make(1, warnings=("a <b>",)), W.Frontend(shown.append))
    assert shown[0]["text/plain"] == "cudamagic: warning: a <b>"
    assert "a &lt;b&gt;" in shown[0]["text/html"]


# --- in a real Jupyter kernel ------------------------------------------------------------------

def _run(kc, code: str) -> list[dict]:
    """Execute ``code``; the iopub messages it caused, up to idle."""
    msg_id = kc.execute(code)
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return out
        out.append(msg)


def _reports(messages: list[dict]) -> list[dict]:
    """The report outputs among a cell's messages (its HTML carries the report's class)."""
    return [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"
            and "cudamagic-report" in m["content"]["data"].get("text/html", "")]


def _cell(n: int) -> str:
    names = " ".join(f'-n "k<{i}>"' for i in range(n))
    return f"%%cuda {names}\ntemplate <int N> __global__ void k(int* x) {{ x[0] = N; }}\n"


def test_in_a_kernel_a_report_is_one_message_and_ipywidgets_is_not_imported(tmp_path):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path),
                              env={**os.environ,
                                   "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    try:
        _run(kc, "%load_ext cudamagic")
        small = _run(kc, _cell(3))
        assert [m for m in small if m["msg_type"] == "comm_open"] == []  # no widget at all
        (display,) = _reports(small)  # a slow compile's notice is another output
        assert set(display) == {"text/plain", "text/html"}
        assert "cache miss" in display["text/html"]

        big = _run(kc, _cell(SHOWN_ROWS + 7))
        opens = {m["content"]["comm_id"]: m["content"]["data"]["state"]
                 for m in big if m["msg_type"] == "comm_open"}
        assert sorted(s["_model_name"] for s in opens.values()) == [
            "AccordionModel", "HTMLModel"]
        (report,) = _reports(big)
        (fold,) = [m["content"]["data"] for m in big if m["msg_type"] == "display_data"
                   and W.VIEW_MIME in m["content"]["data"]]
        assert W.VIEW_MIME not in report and "7 more kernels" in report["text/html"]
        (more_id,) = [i for i, s in opens.items() if s["_model_name"] == "AccordionModel"]
        assert opens[more_id]["titles"] == ["show the other 7 kernels"]
        assert fold[W.VIEW_MIME]["model_id"] == more_id
        rest_id = opens[more_id]["children"][0].removeprefix("IPY_MODEL_")
        # the user opens it: the front end says so, the kernel sends the 7 rows
        msg = kc.session.msg("comm_msg", {"comm_id": more_id, "data": {
            "method": "update", "state": {"selected_index": 0}, "buffer_paths": []}})
        kc.shell_channel.send(msg)
        deadline = time.monotonic() + 60
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == rest_id:
                break
            assert time.monotonic() < deadline
        assert len(KERNEL_ROW.findall(m["content"]["data"]["state"]["value"])) == 7

        check = _run(kc, textwrap.dedent("""\
            import sys, json
            print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ipywidgets')))
        """))
        (printed,) = [m["content"]["text"] for m in check if m["msg_type"] == "stream"]
        assert json.loads(printed) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
