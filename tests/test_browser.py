"""A real browser: JupyterLab on localhost, Debian's Chromium driven by Playwright, runs the
quickstart and reads what the report renders: its badge, its table's rows, the explanation of a
miss, the phases behind a click; and the error block of a bad kernel call. Then the notebook is
saved, its kernel shut down and the page opened again: every report still reads the same (the
report's output is HTML and names no widget model a new page would lack), and so does the
notebook converted to HTML by nbconvert. The report needs no widget manager either
(:func:`test_without_the_widget_manager_the_report_reads_the_same`); past 50 kernels a widget
shows the rest when its fold is opened.

Needs ``chromium`` (Debian), ``jupyterlab`` and ``playwright`` (PyPI). With
``CUDAMAGIC_BROWSER_KERNEL=NAME`` (and ``JUPYTER_PATH`` where that kernelspec lives) the
notebooks run on that kernel, e.g. a fresh venv that installed the wheel, instead of this
checkout. Skipped with a reason
where they are missing, except where ``CUDAMAGIC_REQUIRE_BROWSER=1`` (CI sets it), where their
absence is a failure. Screenshots land in ``artifacts/browser/``: ``widget-miss.png``,
``widget-changed.png``, ``widget-hit.png``, ``argument-error.png``, ``compile-error.png``,
``picture.png``, ``quickstart.png``, ``widget-more-rows.png``, ``highlight.png`` (a %%cuda cell highlighted as C++ beside a Python
cell), ``reopened.png`` (the notebook
reopened after its kernel was shut down), ``nbconvert.png`` (its HTML export).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from cudamagic.view.report import SHOWN_ROWS

from .conftest import REPO

CHROMIUM = "/usr/bin/chromium"
# a read-only checkout (the suite run from a read-only folder) names another place
ARTIFACTS = Path(os.environ.get("CUDAMAGIC_ARTIFACTS", REPO / "artifacts")) / "browser"
REPORT = ".jp-OutputArea-output .cudamagic-report"
MANAGER = "@jupyter-widgets/jupyterlab-manager"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is not installed (Debian package chromium)"
    for mod in ("playwright", "jupyterlab"):
        try:
            __import__(mod)
        except ImportError:
            return f"the Python package {mod} is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path, request):
    """JupyterLab serving a copy of the quickstart; ``request.param`` may name lab extensions
    to disable (as ``jupyter labextension disable`` would, in this server's own config)."""
    why = _missing()
    if why:
        if os.environ.get("CUDAMAGIC_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser test must run here: {why}")
        pytest.skip(why)
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", root)
    _many_kernels_notebook(root / "many.ipynb")
    _highlight_notebook(root / "highlight.ipynb")
    # the JupyterLab extension as the wheel installs it (share/jupyter/labextensions/...)
    shared = tmp_path / "jupyter-path"
    shutil.copytree(REPO / "labextension" / "prebuilt",
                    shared / "labextensions" / "cudamagic-jupyterlab")
    kernel = os.environ.get("CUDAMAGIC_BROWSER_KERNEL")  # an installed wheel's kernel, by name
    if kernel:
        _use_kernel(root, kernel)
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    config = tmp_path / "jupyter-config"
    disabled = getattr(request, "param", ())
    if disabled:
        (config / "labconfig").mkdir(parents=True)
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {name: True for name in disabled}}))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"),
           "JUPYTER_CONFIG_DIR": str(config),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
           "JUPYTER_PATH": os.pathsep.join(filter(None, [str(shared),
                                                         os.environ.get("JUPYTER_PATH")])),
           "PYTHONPATH": "" if kernel else os.pathsep.join([str(REPO),
                                                            os.environ.get("PYTHONPATH", "")])}
    log = open(tmp_path / "jupyter.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1", "--allow-root",
         f"--ServerApp.root_dir={root}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyter.log").read_text())
            time.sleep(0.5)
    yield base, token, tmp_path
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


MANY = SHOWN_ROWS + 5


def _use_kernel(root: Path, kernel: str) -> None:
    """Point the notebooks at the kernelspec ``kernel`` (found on ``JUPYTER_PATH``): the test then
    runs the package that kernel's environment installed, not this checkout."""
    import nbformat

    for path in root.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
        nbformat.write(nb, path)


def _many_kernels_notebook(path: Path) -> None:
    """A notebook whose one %%cuda cell holds more kernels than a report shows up front."""
    import nbformat

    names = " ".join(f'-n "k<{i}>"' for i in range(MANY))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext cudamagic"),
                nbformat.v4.new_code_cell(f"%%cuda {names}\ntemplate <int N> __global__ void "
                                          "k(int* x) { x[0] = N; }\n")]
    nbformat.write(nb, path)


#: The same words in a %%cuda cell and in a Python cell: keywords of C++, names in Python.
HIGHLIGHT_WORDS = ("template", "typename")


def _highlight_notebook(path: Path) -> None:
    """A %%cuda cell and a Python cell holding the same C++ keywords."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
                    '%%cuda -n "k<int>"\ntemplate <typename T> __global__ void k(unsigned* x) '
                    "{ x[0] = 1; }"),
                nbformat.v4.new_code_cell("template = typename = 1"),
                nbformat.v4.new_code_cell("%%cuda_like\ntemplate = typename = 2")]
    nbformat.write(nb, path)


_TOKEN_COLOR = """([cell, word]) => {
    const content = document.querySelectorAll('.jp-CodeCell .cm-content')[cell];
    const walker = document.createTreeWalker(content, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.textContent.indexOf(word);
        if (at >= 0) {
            return getComputedStyle(node.parentElement).color;
        }
    }
    return null;
}"""

_KEYWORD_COLOR = """() => {
    const probe = document.createElement('span');
    probe.style.color = 'var(--jp-mirror-editor-keyword-color)';
    document.body.appendChild(probe);
    const color = getComputedStyle(probe).color;
    probe.remove();
    return color;
}"""


def _open(p, base: str, token: str, tmp_path: Path, notebook: str = "quickstart.ipynb"):
    """A Chromium page on a notebook (the quickstart), its kernel started and idle."""
    browser = p.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
        args=["--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update",
              "--disable-sync"], viewport={"width": 1500, "height": 1000})
    page = browser.new_page()
    page.goto(f"{base}/lab/tree/{notebook}?token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=120_000)
    try:  # a fresh JupyterLab may ask which kernel to start; take the default
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=10_000).click()
    except Exception:
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                           ".jp-Toolbar-kernelStatus", timeout=120_000)
    expected = os.environ.get("CUDAMAGIC_BROWSER_KERNEL")
    if expected:  # the notebook runs on that kernel, not on a default the dialog offered
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
                names = {s["kernel"]["name"] for s in json.load(r)}
            if names or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert names == {expected}, names
    return browser, page


@contextmanager
def _lab_page(lab, notebook: str = "quickstart.ipynb", failure: str = "quickstart"):
    """A Chromium page on ``notebook`` in the test's JupyterLab, closed at the end; a failure
    inside leaves a full-page screenshot, ``artifacts/browser/<failure>-failure.png``."""
    from playwright.sync_api import sync_playwright

    base, token, tmp_path = lab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser, page = _open(p, base, token, tmp_path, notebook)
        try:
            yield page
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"{failure}-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def _run_all(page) -> None:
    page.locator(".jp-CodeCell .jp-InputArea-editor").first.click()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def _run_quickstart(page) -> None:
    """Run every cell of the quickstart and wait for its last one (%cuda_info) to show."""
    _run_all(page)
    page.wait_for_selector(".jp-OutputArea-output:has-text('cudamagic environment')",
                           timeout=300_000)


def _shot(locator, name: str) -> None:
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(ARTIFACTS / name))


def _scroll_through(page, selector: str, count: int) -> None:
    """Scroll the notebook down until ``count`` elements match ``selector``: JupyterLab attaches
    a cell's outputs once it has come into view (a reopened notebook shows the first few)."""
    scroller = page.locator(".jp-WindowedPanel-outer").first
    for _ in range(60):
        if page.locator(selector).count() >= count:
            break
        scroller.evaluate("e => e.scrollBy(0, e.clientHeight * 0.8)")
        time.sleep(0.3)
    scroller.evaluate("e => e.scrollTo(0, 0)")


def _read_reports(page) -> dict:
    """What the four reports of the quickstart say (read from the DOM: JupyterLab draws only
    the cells in view, and a cell out of view has no inner text)."""
    _scroll_through(page, REPORT, 4)
    reports = page.locator(REPORT)
    assert reports.count() == 4, reports.count()  # miss, miss, changed, hit
    first, fractal, changed, hit = (reports.nth(i) for i in range(4))
    seen: dict = {
        "badges": [w.locator(".cudamagic-badge").text_content()
                   for w in (first, fractal, changed, hit)],
        "first why": first.locator(".cudamagic-why").text_content(),
        "rows": first.locator(".cudamagic-names tbody tr").all_text_contents(),
        "facts": first.locator(".cudamagic-facts").text_content(),
        "changed why": changed.locator(".cudamagic-why").text_content(),
        "hit why": hit.locator(".cudamagic-why").count(),
    }
    hit.scroll_into_view_if_needed()
    hit.locator(".cudamagic-phases summary").click()  # the phases, one click away
    seen["phases"] = hit.locator(".cudamagic-phases table").inner_text()  # drawn now
    timing = hit.locator(".cudamagic-fold", has=page.locator("summary",
                                                             has_text="timing and occupancy"))
    timing.locator("summary").first.scroll_into_view_if_needed()
    timing.locator("summary").first.click()  # the timing and occupancy fold, with its plot
    seen["fold"] = timing.inner_text()
    seen["plot"] = timing.locator("svg").count()
    seen["missing"] = page.get_by_text("model not found").count()
    return seen


def _check_reports(seen: dict, cache: Path) -> None:
    assert seen["badges"] == ["cache miss", "cache miss", "cache miss", "cache hit"], seen
    assert "first build of this cell" in seen["first why"], seen  # JupyterLab gives a cell id
    assert "the source changed (line 10)" in seen["changed why"], seen
    assert "T(16)" in seen["changed why"] and "added 'mandelbrot<double>'" in seen["changed why"]
    assert seen["hit why"] == 0, seen
    assert len(seen["rows"]) == 4, seen
    for expected in ("saxpy_float", "saxpy<float>", "_Z5saxpyIfEvT_PKS0_PS0_i",
                     "void saxpy<float>(float, float const*, float*, int)", "ns_scale_float_3",
                     "_ZN2ns5scaleIfLi3EEEvPT_i", "void fill(float*, float, int)", "nvrtc"):
        assert any(expected in r for r in seen["rows"]), (expected, seen["rows"])
    assert "cache" in seen["facts"] and str(cache) in seen["facts"]
    assert "cache lookup" in seen["phases"] and "the cell" in seen["phases"], seen
    assert "best block size" in seen["fold"] and seen["plot"] == 1, seen
    assert seen["missing"] == 0, seen


def _shut_down_kernels(base: str, token: str) -> None:
    """What *Kernel → Shut Down* does, for every session of the server."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}",
                                     method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def _save(page) -> None:
    page.keyboard.press("Control+s")
    page.wait_for_selector(".jp-mod-dirty", state="detached", timeout=60_000)


def test_the_report_renders_in_jupyterlab_and_after_the_kernel_is_gone(lab):
    from playwright.sync_api import sync_playwright

    base, token, tmp_path = lab
    with _lab_page(lab) as page:
        _run_quickstart(page)
        seen = _read_reports(page)
        first, changed, hit = (page.locator(REPORT).nth(i) for i in (0, 2, 3))
        error = page.locator(".jp-OutputArea-output", has_text="ArgumentTypeError").first
        seen["error"] = error.text_content()
        _shot(first, "widget-miss.png")
        _shot(changed, "widget-changed.png")
        _shot(hit, "widget-hit.png")
        _shot(error, "argument-error.png")
        _shot(page.locator(".jp-OutputArea-output", has_text="CompileError").first,
              "compile-error.png")
        _shot(page.locator(".jp-OutputArea-output img").first, "picture.png")
        page.screenshot(path=str(ARTIFACTS / "quickstart.png"))
        # saved, its kernel shut down, opened again (a new page: no model of the old kernel)
        _save(page)
        _shut_down_kernels(base, token)
        page.reload()
        page.wait_for_selector(REPORT, timeout=120_000)
        time.sleep(3)  # the widget manager restores (from a new kernel, if one starts)
        reopened = _read_reports(page)
        _shot(page.locator(REPORT).first, "reopened.png")
    _check_reports(seen, tmp_path / "cache")
    assert "takes 4 arguments" in seen["error"] and "Traceback" not in seen["error"], seen
    _check_reports(reopened, tmp_path / "cache")
    # the saved notebook converted to HTML, as nbviewer and an export render it
    page_html = tmp_path / "quickstart.html"
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--output",
                    str(page_html), str(tmp_path / "lab" / "quickstart.ipynb")],
                   check=True, capture_output=True, timeout=300)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            exported = browser.new_page(viewport={"width": 1500, "height": 1000})
            exported.goto(page_html.as_uri())
            reports = exported.locator(".cudamagic-report")
            badges = [reports.nth(i).locator(".cudamagic-badge").inner_text()
                      for i in range(reports.count())]
            rows = reports.first.locator(".cudamagic-names tbody tr").all_inner_texts()
            _shot(reports.first, "nbconvert.png")
        finally:
            browser.close()
    assert badges == ["cache miss", "cache miss", "cache miss", "cache hit"], badges
    assert any("saxpy_float" in r for r in rows), rows


@pytest.mark.parametrize("lab", [(MANAGER,)], indirect=True)
def test_without_the_widget_manager_the_report_reads_the_same(lab):
    """With JupyterLab's widget manager disabled (a JupyterLab without jupyterlab_widgets), the
    report shows as it does with it: its output is HTML, no widget."""
    with _lab_page(lab, failure="manager") as page:
        _run_all(page)
        page.wait_for_selector(REPORT, timeout=300_000)
        report = page.locator(REPORT).first
        # read from the DOM: Run All leaves the first report out of view, undrawn
        badge = report.locator(".cudamagic-badge").text_content()
        rows = report.locator(".cudamagic-names tbody tr").all_text_contents()
    assert badge == "cache miss"
    assert any("saxpy_float" in r for r in rows), rows


def test_a_cuda_cell_is_highlighted_as_cpp(lab):
    """With the wheel's JupyterLab extension, a cell whose first line is %%cuda is C++ to the
    editor: ``template`` and ``typename`` take the theme's keyword colour there, and not in a
    Python cell holding the same words (nor in a cell of another magic starting alike)."""
    with _lab_page(lab, "highlight.ipynb", failure="highlight") as page:
        page.wait_for_selector(".jp-CodeCell .cm-content", timeout=60_000)
        time.sleep(2)  # the C++ language loads on first use
        keyword = page.evaluate(_KEYWORD_COLOR)
        colors = {(cell, word): page.evaluate(_TOKEN_COLOR, [cell, word])
                  for cell in range(3) for word in HIGHLIGHT_WORDS}
        _shot(page.locator(".jp-Notebook"), "highlight.png")
        # typing %%cuda into a Python cell makes it C++, and taking it away undoes it
        second = page.locator(".jp-CodeCell .cm-content").nth(1)
        second.click()
        page.keyboard.press("Control+Home")
        page.keyboard.type("%%cuda\n")
        time.sleep(1)
        typed = page.evaluate(_TOKEN_COLOR, [1, "template"])
        page.keyboard.press("Control+z")
        page.keyboard.press("Control+z")
        time.sleep(1)
        undone = page.evaluate(_TOKEN_COLOR, [1, "template"])
    assert keyword and keyword != "rgba(0, 0, 0, 0)", keyword
    for word in HIGHLIGHT_WORDS:
        assert colors[(0, word)] == keyword, (word, colors, keyword)
        assert colors[(1, word)] != keyword, (word, colors, keyword)
        assert colors[(2, word)] != keyword, (word, colors, keyword)
    assert typed == keyword and undone != keyword, (typed, undone, keyword)


def test_the_other_kernels_are_shown_when_their_fold_is_opened(lab):
    """Past 50 kernels the report holds 50 rows and, below it, a widget's fold, *show the other
    N kernels*; opening it in the browser makes the kernel send the rest, drawn in the fold."""
    with _lab_page(lab, "many.ipynb", failure="many") as page:
        _run_all(page)
        page.wait_for_selector(REPORT, timeout=300_000)
        report = page.locator(REPORT).first
        shown = report.locator(".cudamagic-names tbody tr").count()
        more = page.locator(".jp-OutputArea-output .cudamagic-more-rows")
        title = more.get_by_text(f"show the other {MANY - SHOWN_ROWS} kernels")
        before = more.locator(".cudamagic-names tbody tr").count()
        title.click()
        rows = more.locator(".cudamagic-names tbody tr")
        rows.first.wait_for(timeout=60_000)
        opened = rows.all_text_contents()
        _shot(more, "widget-more-rows.png")
        # saved and reloaded, the page asks the kernel for the models' state again
        _save(page)
        page.reload()
        page.wait_for_selector(REPORT, timeout=120_000)
        reloaded = page.locator(REPORT).first.locator(".cudamagic-names tbody tr").count()
    assert shown == SHOWN_ROWS and before == 0 and reloaded == SHOWN_ROWS
    assert len(opened) == MANY - SHOWN_ROWS
    assert opened[0].startswith(f"k_{SHOWN_ROWS}") and opened[-1].startswith(f"k_{MANY - 1}")


_TABLE_WIDTHS = """() => [...document.querySelectorAll(".jp-OutputArea-output .cudamagic-names")].map(
    t => [t.getBoundingClientRect().width,
          t.closest(".jp-OutputArea-output").getBoundingClientRect().width])"""


def test_the_name_table_fits_the_output_area(lab):
    """Long symbols and signatures wrap inside their cells: the name table is never wider than
    the output area it is drawn in (it was 1 189 px against about 1 130: issue 31 item 4)."""
    with _lab_page(lab, failure="names-fit") as page:
        _run_quickstart(page)
        page.wait_for_selector(REPORT, timeout=120_000)
        wide = page.evaluate(_TABLE_WIDTHS)
        page.set_viewport_size({"width": 1000, "height": 1000})  # a laptop's half screen
        time.sleep(1)
        widths = page.evaluate(_TABLE_WIDTHS)
        _shot(page.locator(REPORT).first, "names-fit.png")
    assert widths and wide, "no name table was drawn"
    assert all(table <= area for table, area in wide + widths), (wide, widths)
