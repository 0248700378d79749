"""On the GPU machine: the debugging loop end to end (issue 28's must-show).

- Each planted bug (tests/planted.py) found by its compute-sanitizer tool at its cell line, with
  its thread and block; the notebook process's arrays unchanged and its context healthy after
  (a later launch here runs and is right); the fixed kernel clean.
- A device assert and an illegal address in a real Jupyter kernel: the advice in the cell's
  error where CuPy's synchronize meets it and where a cudamagic launch meets it; the assert's
  message in the launching cell.
- printf output in the launching cell with no synchronize written.
- kernel.profile on a memory-bound copy and a compute-bound kernel against ncu run by hand
  (within 10 %) and kernel.bench (duration within 15 %); the top stall and the hottest line
  named; two variants side by side with a roofline point each.

Marked ``gpu``: skipped with a reason without a CUDA device.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys

import numpy as np
import pytest

import cudamagic
from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import build_module
from cudamagic.toolchain.tools import tools
from cudamagic.toolchain.tools.sanitizer import FindingKind

from .conftest import fresh_shell
from .planted import (ASSERT_SOURCE, ILLEGAL_SOURCE, LINE_OFFSET, PLANTED, PRINTF_SOURCE,
                      PROFILE_N, PROFILE_SOURCE, fixed_args)

pytestmark = pytest.mark.gpu

FILL = 'extern "C" __global__ void fill(float* x, float v, int n) { int i = blockIdx.x * ' \
       'blockDim.x + threadIdx.x; if (i < n) x[i] = v; }'


def _cell(source: str, cache) -> cudamagic.Module:
    """A module built as %%cuda builds a cell (its lines one below the magic line)."""
    return build_module(source, options_from_args((), ()), cache=str(cache),
                        line_offset=LINE_OFFSET)


def _args(spec: tuple) -> tuple:
    import cupy as cp

    return tuple(cp.full(v, 3.0, dtype=cp.float32) if kind == "f32" else int(v)
                 for kind, v in spec)


def _healthy(tmp_path) -> None:
    """A launch in this process after the tool run: it runs and its result is right."""
    import cupy as cp

    fill = cudamagic.build(FILL, cache=str(tmp_path))["fill"]
    x = cp.zeros(1000, dtype=cp.float32)
    fill((4,), (256,), (x, 2.5, 1000))
    cp.cuda.Device().synchronize()
    assert np.all(cp.asnumpy(x) == 2.5)


@pytest.mark.parametrize("planted", PLANTED, ids=lambda p: p.name)
def test_a_planted_bug_is_found_at_its_cell_line_and_the_notebook_is_untouched(planted,
                                                                                tmp_path):
    import cupy as cp

    kernel = _cell(planted.source, tmp_path)[planted.name]
    args = _args(planted.args)
    before = [cp.asnumpy(a) for a in args if isinstance(a, cp.ndarray)]
    result = kernel.sanitize((planted.grid,), (planted.block,), args, tool=planted.tool,
                             uninitialized=planted.uninitialized)
    r = result.record
    ours = [cf for cf in r.findings if cf.finding.kind is not FindingKind.API]
    assert ours, str(result)
    first = ours[0]
    assert first.finding.kind is FindingKind[planted.kind], str(result)
    assert first.cell_line - LINE_OFFSET in (planted.line, *planted.also), str(result)
    line = first.cell_line - LINE_OFFSET
    assert first.source_line.strip() == planted.source.splitlines()[line - 1].strip()
    assert first.finding.thread is not None and first.finding.block is not None
    if planted.name == "oob_write":  # x[i + 4096] of a float32[256]: past its end
        assert "bytes past the end of argument 0" in first.place.describe(), str(result)
        assert "float32[256]" in first.place.describe()
    after = [cp.asnumpy(a) for a in args if isinstance(a, cp.ndarray)]
    assert all(np.array_equal(b, a) for b, a in zip(before, after))  # copied, never written
    _healthy(tmp_path)
    fixed = _cell(planted.fixed, tmp_path)[planted.name]
    clean = fixed.sanitize((planted.grid,), (planted.block,), _args(fixed_args(planted)),
                           tool=planted.tool).record
    assert clean.clean, str(clean)
    assert clean.capture_seconds > 0 and clean.child_seconds > clean.capture_seconds  # timed


def test_the_sanitize_magic_names_the_arguments_by_their_expressions(tmp_path):
    ip = fresh_shell()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell("%%cuda -q\n" + PLANTED[0].source)
    ip.run_cell("import cupy as cp; x = cp.zeros(256, cp.float32)")
    shown = ip.run_line_magic("cuda_sanitize", "oob_write((1,), (256,), (x, 4096))")
    assert "argument 0, x: float32[256]" in str(shown)
    assert f"cell line {PLANTED[0].line + LINE_OFFSET}" in str(shown)


def _run_notebook(cells: list[str], tmp_path, monkeypatch) -> list:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    # ipykernel leaves fds 1 and 2 alone (no printf or assert text in a cell) in a kernel whose
    # environment has PYTEST_CURRENT_TEST, as a kernel started from a test inherits: a user's
    # kernel has none
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True).execute()
    return nb.cells


def _text(cell) -> str:
    """Everything a cell showed: streams, errors, and the plain text of its results."""
    out = []
    for o in cell.outputs:
        out.append(o.get("text", "") + o.get("evalue", "") + "\n".join(o.get("traceback", []))
                   + o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


@pytest.mark.parametrize("source, launch, code, kernel", [
    (ASSERT_SOURCE, "check_positive((1,), (256,), (x, 256))", "ASSERT", "check_positive"),
    (ILLEGAL_SOURCE, "wild((1,), (32,), (y,))", "ILLEGAL_ADDRESS", "wild"),
])
def test_a_fault_in_a_real_jupyter_kernel_gets_the_advice(source, launch, code, kernel,
                                                          tmp_path, monkeypatch):
    cells = _run_notebook([
        "%load_ext cudamagic",
        "%%cuda -q\n" + source + "\n" + FILL,
        # fill is loaded and launched once before the fault: its next launch meets the lost
        # context in the launch itself, not in loading the module
        "import cupy as cp\nx = -cp.ones(256, cp.float32)\ny = cp.zeros(4, cp.int32)\n"
        "z = cp.zeros(32, cp.float32)\nfill((1,), (32,), (z, 0.0, 32))\n"
        "cp.cuda.Device().synchronize()",
        launch,
        "cp.cuda.Device().synchronize()",
        "fill((1,), (32,), (z, 1.0, 32))\ncp.cuda.Device().synchronize()",
        "%cuda_info",
    ], tmp_path, monkeypatch)
    launched, synced, later, info = (_text(c) for c in cells[3:7])
    seen = launched + synced
    assert f"CUDA_ERROR_{code}" in seen and "restart the notebook kernel" in seen
    assert f"{kernel}.sanitize(" in seen
    if code == "ASSERT":  # the device's message, in the launching cell (the flush hook)
        assert "Assertion" in launched and "x[i] >= 0.0f" in launched, launched
    # said in full once (above), then in one line: a cudamagic launch's own error, no raw one
    assert "ContextPoisonedError" in later and "was lost earlier" in later, later
    assert "LOST" in info


def test_printf_lands_in_the_launching_cell(tmp_path, monkeypatch):
    cells = _run_notebook(["%load_ext cudamagic", "%%cuda -q\n" + PRINTF_SOURCE,
                           "hello((1,), (32,), (7,))", "1 + 1"], tmp_path, monkeypatch)
    assert "hello 7 from thread 0" in _text(cells[2]) and "hello 7 from thread 1" in \
        _text(cells[2])
    assert "hello" not in _text(cells[3])


# --- profiling ------------------------------------------------------------------------------------

N = PROFILE_N


def _ncu_or_skip() -> tools.Tool:
    tool = tools.find(tools.ToolKind.NCU)
    if isinstance(tool, tools.Missing):
        pytest.skip(f"ncu {tool.describe()}")
    return tool


def _by_hand(ncu: tools.Tool, kernel_name: str, tmp_path) -> dict[str, float]:
    """ncu run by hand on the same launch through CuPy's RawKernel, its CSV read."""
    script = tmp_path / "by_hand.py"
    script.write_text(f"""
import cupy as cp
mod = cp.RawModule(code={PROFILE_SOURCE!r})
a = cp.ones({N}, cp.float32); b = cp.zeros_like(a)
if {kernel_name!r} == "copy":
    mod.get_function("copy")(({N} // 256,), (256,), (a, b, cp.int32({N})))
else:
    mod.get_function("burn")(({N} // 256,), (256,), (a, cp.int32({N}), cp.int32(2000)))
cp.cuda.Device().synchronize()
""")
    metrics = ["gpu__time_duration.sum", "dram__bytes.sum",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__warps_active.avg.pct_of_peak_sustained_active"]
    out = subprocess.run([ncu.path, "--csv", "--page", "raw", "-k", kernel_name,
                          "--clock-control", "none",
                          "--metrics", ",".join(metrics), sys.executable, str(script)],
                         capture_output=True, text=True, timeout=600)
    rows = list(csv.reader(io.StringIO(out.stdout[out.stdout.index('"ID"'):])))
    head, units, values = rows[0], rows[1], rows[2]
    return {m: float(values[head.index(m)].replace(",", "")) for m in metrics}


@pytest.mark.parametrize("name", ["copy", "burn"])
def test_profile_agrees_with_ncu_by_hand_and_with_bench(name, tmp_path):
    import cupy as cp

    ncu = _ncu_or_skip()
    mod = _cell(PROFILE_SOURCE, tmp_path)
    a = cp.ones(N, cp.float32)
    b = cp.zeros_like(a)
    args = (a, b, N) if name == "copy" else (a, N, 2000)
    p = mod[name].profile((N // 256,), (256,), args).record
    hand = _by_hand(ncu, name, tmp_path)
    assert p.duration_ns == pytest.approx(hand["gpu__time_duration.sum"], rel=0.10)
    assert p.compute_pct == pytest.approx(
        hand["sm__throughput.avg.pct_of_peak_sustained_elapsed"], rel=0.10)
    assert p.achieved_occupancy_pct == pytest.approx(
        hand["sm__warps_active.avg.pct_of_peak_sustained_active"], rel=0.10)
    # the child wrote its own copies: the notebook's arrays are as they were
    assert bool(cp.all(a == 1)) and bool(cp.all(b == 0))
    assert p.dram_bytes == pytest.approx(hand["dram__bytes.sum"], rel=0.10)
    if name == "copy":  # memory-bound: each float read once and written once, waits on memory
        assert p.dram_bytes == pytest.approx(2 * 4 * N, rel=0.10)
        assert p.stalls[0].reason == "long_scoreboard"
    else:  # compute-bound
        assert p.compute_pct > 90 and p.memory_pct < 10
    bench = mod[name].bench((N // 256,), (256,), args, repeat=50)
    assert p.duration_ns / 1e6 == pytest.approx(bench.timings[0].median, rel=0.15)
    assert p.stalls and p.stalls[0].reason
    assert p.hot_lines, "-lineinfo source counters name a line"
    lines = PROFILE_SOURCE.splitlines()
    # burn: ncu gives the kernel's first instruction (its opening line) as many samples as the
    # loop (45 % and 43 % on the H200), so the loop is one of the first two
    hottest = [lines[h.line - LINE_OFFSET - 1] for h in p.hot_lines[:2]]
    want = "b[i] = a[i]" if name == "copy" else "v * 1.0000001f"
    assert any(want in h for h in hottest), hottest


def test_two_variants_side_by_side_with_a_roofline(tmp_path):
    import cupy as cp

    _ncu_or_skip()
    ip = fresh_shell()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell("%%cuda -q\n" + PROFILE_SOURCE)
    ip.user_ns.update(a=cp.ones(N, cp.float32), b=cp.zeros(N, cp.float32), N=N)
    shown = ip.run_line_magic("cuda_profile",
                              "copy((N // 256,), (256,), (a, b, N)); "
                              "burn((N // 256,), (256,), (a, N, 2000))")
    labels = [p.label for p in shown.record.profiles]
    assert labels == ["copy", "burn"]
    page = shown._repr_html_()
    # a point for burn; copy does no floating-point work, so it has none on the roofline
    assert page.count("<circle") == 1 and "<title>burn</title>" in page and "roofline" in page
