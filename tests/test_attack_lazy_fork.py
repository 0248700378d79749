"""A fork while another thread works out a report's first row leaves the child's report
working: a hit's report rows are made when shown, so a child forked after the hit (a worker
pool, a fork-based Dask worker) is the one that shows them; nothing on that way may wait on a
lock the parent's thread held at the fork (Python 3.11's functools.cached_property holds one
lock per property for every instance while it computes)."""

from __future__ import annotations

import os
import threading

import pytest

from cudamagic.view import report as report_module

from .test_fork_locks import _in_child
from .test_lazy_restore import hit  # noqa: F401  (the fixture: a module served from the cache)

def _held(monkeypatch, name: str):
    """Replace report.``name`` by one whose first call waits until released."""
    entered, release = threading.Event(), threading.Event()
    real = getattr(report_module, name)

    def held(*args, **kwargs):
        if not entered.is_set():  # the parent thread's call; the child's goes through
            entered.set()
            release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(report_module, name, held)
    return entered, release


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("shown", ["signature", "text", "html"])
def test_a_fork_while_a_thread_makes_a_row_leaves_the_childs_report_working(hit, monkeypatch,
                                                                           shown):
    entered, release = _held(monkeypatch, "display_signature")
    rows = hit.report.rows
    reader = threading.Thread(target=lambda: rows[0].signature)
    reader.start()
    assert entered.wait(30)
    show = {"signature": lambda: rows[1].signature, "text": hit.report.text,
            "html": hit.report.html}[shown]
    try:
        outcome = _in_child(show)
    finally:
        release.set()
        reader.join()
    assert outcome == "ok", f"the child's report {shown} {outcome}"
