"""A real browser (see tests/test_browser.py): the report's "timing and occupancy" fold opens in
JupyterLab and its plot is drawn inside the report's output, one line per kernel of the cell. Its screenshot is ``artifacts/browser/occupancy-fold.png``.
"""

from __future__ import annotations

from .test_browser import REPORT, _lab_page, _run_quickstart, _shot, lab  # noqa: F401 - fixture


def test_the_occupancy_fold_draws_its_plot_in_the_report(lab):  # noqa: F811 - the fixture
    with _lab_page(lab, failure="occupancy") as page:
        _run_quickstart(page)
        first = page.locator(REPORT).first
        # the report's folds: this one by its title (a "sanitize and profile" fold follows it)
        fold = first.locator(".cudamagic-fold").filter(
            has=page.locator("summary", has_text="timing and occupancy"))
        hidden = fold.locator("svg").first.bounding_box()  # closed: not drawn
        fold.locator("summary").scroll_into_view_if_needed()
        fold.locator("summary").click()
        plot = fold.locator("svg").first
        plot.wait_for(state="visible", timeout=30_000)
        box = plot.bounding_box()
        lines = fold.locator("svg polyline").count()
        text = fold.inner_text()
        _shot(fold, "occupancy-fold.png")
    assert hidden is None or hidden["width"] == hidden["height"] == 0, hidden
    assert box is not None and box["width"] > 300 and box["height"] > 100, box
    # the quickstart's first cell: saxpy<float>, saxpy<double>, ns::scale<float, 3>, fill
    assert lines == 4, lines
    assert "best block size" in text and ".bench(grid, block, args)" in text, text
