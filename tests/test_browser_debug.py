"""A real browser (JupyterLab, Chromium through Playwright; tests/test_browser.py's harness):
the sanitizer's fold, rendered from a record built from a compute-sanitizer report of
tests/fixtures/tools/recorded (the tool's own, recorded on the GPU machine), and
the %%cuda report's "sanitize and profile" fold. Screenshots: artifacts/browser/sanitize-fold.png
and debug-fold.png (docs/img/sanitize-fold.png is one of them).
"""

from __future__ import annotations

import pytest

from .planted import PLANTED
from .test_browser import REPORT, _lab_page, _run_all, _shot, lab  # noqa: F401 - fixture

RECORD = '''
from pathlib import Path
from cudamagic.launch import capture as cap
from cudamagic.launch.tool_run import LineinfoBuild, SanitizeReport, fold
from cudamagic.toolchain.tools.sanitizer import SanitizerTool, parse_xml
from cudamagic.view.debug import present
from tests.planted import PLANTED, LINE_OFFSET
from tests.test_debug_tools import _report
p = PLANTED[0]
findings = parse_xml(_report("oob_write"), SanitizerTool.MEMCHECK)
base = min(f.address for f in findings if f.address) - 4 * 4096
x = cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "x", "<f4", (256,), (4,), 0,
                    bytes(1024), base)
n = cap.CapturedArg(1, cap.ArgKind.BYTES, (4096).to_bytes(4, "little"), "int", "n")
c = cap.Capture("oob_write", (1, 1, 1), (256, 1, 1), 0, (x, n))
folded = fold(findings, LineinfoBuild(b"", p.source, LINE_OFFSET, "cell.cu", True), c,
              [cap.Placement(0, base, 1024)])
present(SanitizeReport(SanitizerTool.MEMCHECK, "from a fixture report", "oob_write",
                       (1, 1, 1), (256, 1, 1), folded, len(findings), True))
'''


def test_the_sanitizer_and_report_folds_in_jupyterlab(lab):
    import nbformat

    base, token, tmp_path = lab
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%load_ext cudamagic"),
        nbformat.v4.new_code_cell("%%cuda\n" + PLANTED[0].source),
        nbformat.v4.new_code_cell(RECORD.strip())])
    nbformat.write(nb, tmp_path / "lab" / "debug.ipynb")
    with _lab_page(lab, "debug.ipynb", failure="debug") as page:
        _run_all(page)
        fold = page.wait_for_selector(".jp-OutputArea-output .cudamagic-sanitize",
                                      timeout=300_000)
        text = fold.text_content()
        out = page.locator(".jp-OutputArea-output", has=page.locator(".cudamagic-sanitize"))
        _shot(out.first, "sanitize-fold.png")
        report = page.locator(REPORT).first
        report.locator(".cudamagic-debug summary").click()
        debug = report.locator(".cudamagic-debug").text_content()
        _shot(report, "debug-fold.png")
    assert f"at cell line {PLANTED[0].line + 1}" in text, text
    assert "x[i + n] = 1.0f;" in text
    assert "15 360 bytes past the end of argument 0, x: float32[256]" in text
    assert "oob_write.sanitize(grid, block, args)" in debug, debug
