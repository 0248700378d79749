"""On a GPU (the H200, ``bash scripts/device.sh annotate``): the annotated view with the per-line
samples of the two profiled kernels of tests/planted.py, the second sanitize of a session
served by the warm child (timed, printed), and a screenshot of the annotated view with both
profiles written to $OUT (the lead copies it into docs/img/)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cudamagic.toolchain.tools import tools

from .planted import PLANTED, PROFILE_SOURCE
from .test_gpu_debug import _args, _cell, _ncu_or_skip

pytestmark = pytest.mark.gpu
N = 1 << 24


def test_the_profiled_kernels_samples_land_on_their_annotated_lines(tmp_path):
    import cupy as cp

    _ncu_or_skip()
    mod = _cell(PROFILE_SOURCE, tmp_path)
    a = cp.ones(N, cp.float32)
    b = cp.zeros_like(a)
    copy = mod["copy"].profile((N // 256,), (256,), (a, b, N))
    burn = mod["burn"].profile((N // 256,), (256,), (a, N, 2000))
    view = mod.annotate(profile=[copy, burn])
    text = view.text()
    print(text)
    lines = view.record.lines
    for i, p in enumerate((copy.record, burn.record)):
        landed = sum(ln.profiles[i].samples for ln in lines if ln.profiles[i] is not None)
        assert p.pcs and landed == sum(c.samples for c in p.pcs), (p.label, landed)
    loop = next(ln for ln in lines if "for (int s" in ln.text)
    assert loop.profiles[1] is not None and loop.profiles[1].share > 0.3, loop
    out = Path(os.environ.get("OUT", tmp_path))
    (out / "annotate.html").write_text(f"<html><body>{view._repr_html_()}</body></html>")
    from .test_browser import CHROMIUM, _missing

    if _missing() is None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 700})
            page.set_content((out / "annotate.html").read_text())
            page.locator(".cudamagic-annotate").screenshot(path=str(out / "annotate.png"))
            browser.close()


def test_a_second_sanitize_is_served_by_the_warm_child(tmp_path, monkeypatch):
    if not isinstance(tools.find(tools.ToolKind.SANITIZER), tools.Tool):
        pytest.skip("no compute-sanitizer")
    # each run's steps in the child, by the wall clock: where the second run's time goes
    stamps = tmp_path / "child-times.jsonl"
    monkeypatch.setenv("CUDAMAGIC_CHILD_TIMES", str(stamps))
    planted = PLANTED[0]  # its memcheck bug: the second run must find what the first found
    k = _cell(planted.source, tmp_path)[planted.name]
    args = _args(planted.args)
    first = k.sanitize((planted.grid,), (planted.block,), args, tool=planted.tool).record
    time.sleep(3)  # the warm child's start and imports, in the background
    t, sent = time.perf_counter(), time.time()
    second = k.sanitize((planted.grid,), (planted.block,), args, tool=planted.tool).record
    whole, ended = time.perf_counter() - t, time.time()
    print(f"sanitize: first {first.capture_seconds + first.child_seconds:.3f} s, second "
          f"{whole:.3f} s (child {second.child_seconds:.3f} s)")
    runs = [json.loads(line) for line in stamps.read_text().splitlines()]
    if len(runs) >= 2:  # the second run's steps, from the notebook's call to its return
        steps, before = [], sent
        for name, when in [*runs[-1], ["the child's exit, seen by the notebook", ended]]:
            steps.append(f"{name} +{(when - before) * 1e3:.0f} ms")
            before = when
        print("second sanitize by step: call " + ", ".join(steps))
    assert [(f.finding.kind, f.cell_line) for f in second.findings] == \
        [(f.finding.kind, f.cell_line) for f in first.findings] and second.findings
    assert whole <= 0.3
