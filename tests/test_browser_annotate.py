"""A real browser (Chromium through Playwright, as tests/test_browser.py drives it): the annotated
cell's HTML rendered in a light page and in a dark one (JupyterLab's dark theme's colours, and
``prefers-color-scheme: dark``), its text readable over its shading in both, a line's machine
code opened by a click. Screenshots: artifacts/browser/annotate-light.png, annotate-dark.png.
"""

from __future__ import annotations

import re

import pytest

import cudamagic

from .test_annotate import SPILL
from .test_browser import ARTIFACTS, CHROMIUM, _missing

# the page colours of JupyterLab's themes (--jp-layout-color0, --jp-content-font-color1)
THEMES = {"light": ("#ffffff", "rgba(0, 0, 0, 0.87)"), "dark": ("#111111", "rgba(255, 255, 255, 1)")}


def _rgba(text: str) -> tuple[float, ...]:
    parts = [float(x) for x in re.findall(r"[\d.]+", text)]
    return tuple(parts) if len(parts) == 4 else (*parts, 1.0)


def _over(top: tuple[float, ...], under: tuple[float, ...]) -> tuple[float, ...]:
    a = top[3]
    return tuple(top[i] * a + under[i] * (1 - a) for i in range(3)) + (1.0,)


def _luminance(c: tuple[float, ...]) -> float:
    def channel(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(x) for x in c[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("theme", THEMES)
def test_the_annotated_cell_reads_in_light_and_dark_themes(theme, tmp_path):
    why = _missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    m = cudamagic.build(SPILL, options=["-maxrregcount=24"], cache=str(tmp_path))
    page_bg, page_fg = THEMES[theme]
    doc = (f"<html><head><style>body{{background:{page_bg};color:{page_fg};"
           f"font-family:sans-serif}}</style></head><body>{m.annotate()._repr_html_()}"
           "</body></html>")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900},
                                    color_scheme=theme)  # type: ignore[arg-type]
            page.set_content(doc)
            rows = page.locator(".cudamagic-annotate tbody tr")
            seen = [(rows.nth(i).evaluate("e => getComputedStyle(e).backgroundColor"),
                     rows.nth(i).locator("td.src").evaluate("e => getComputedStyle(e).color"))
                    for i in range(rows.count())]
            hot = rows.filter(has_text="s += v[k]").first
            hot.locator("summary").click()
            listing = hot.locator("pre").inner_text()
            visible = hot.locator("pre").is_visible()
            page.locator(".cudamagic-annotate").screenshot(
                path=str(ARTIFACTS / f"annotate-{theme}.png"))
        finally:
            browser.close()
    base = _rgba(_hex(page_bg))
    shaded = [(bg, fg) for bg, fg in seen if _rgba(bg)[3] > 0]
    assert shaded, seen
    for bg, fg in seen:
        under = _over(_rgba(bg), base)
        assert _contrast(_over(_rgba(fg), under), under) >= 4.5, (theme, bg, fg)
    assert visible and "FFMA" in listing and "LDL" in listing, listing


def _hex(colour: str) -> str:
    v = colour.lstrip("#")
    return f"rgb({int(v[0:2], 16)}, {int(v[2:4], 16)}, {int(v[4:6], 16)})"
