"""module.annotate() / %%cuda -a: each cell line with the machine code the -lineinfo build's
line table gives it (real NVRTC, real nvdisasm from the nvidia-cuda-nvdisasm wheel; no GPU).

The oracle is nvdisasm's other reading of the same line table, its JSON (``-json -g``): one
record per instruction, the source place where it changes. The annotation reads the text
listing with the inlining (``-gi``); the two must agree line by line, and each kernel's lines
and padding must add up to its code section's size in the ELF.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest

import cudamagic
from cudamagic.errors import ArgumentValueError
from cudamagic.toolchain.tools import profiler, sass, tools
from cudamagic.toolchain.binary.image import read_cubin

from .planted import LINE_OFFSET, PROFILE_SOURCE

TOOLS = Path(__file__).parent / "fixtures" / "tools"

LOOP = """\
extern "C" __global__ void loop(float* a, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i)
        s += a[i] * a[i];
    a[0] = s;
}
"""
# 64 live values under 24 registers: ptxas spills them (its -v says how many bytes)
SPILL = """\
extern "C" __global__ void spill(float* a, int n) {
    float v[64];
    for (int k = 0; k < 64; ++k) v[k] = a[k * n + threadIdx.x];
    float s = 0;
    for (int k = 0; k < 64; ++k) s += v[k] * v[63 - k] + v[(k * 7) & 63];
    a[threadIdx.x] = s;
}
"""
SHARED = """\
extern "C" __global__ void reverse(float* a) {
    __shared__ float t[256];
    t[threadIdx.x] = a[threadIdx.x];
    __syncthreads();
    a[threadIdx.x] = t[255 - threadIdx.x];
}
"""
INLINED = """\
__device__ float poly(float x) {
    float y = x * x;
    y = y * 3.0f + x;
    return __sinf(y) + 1.0f;
}
extern "C" __global__ void inl(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] = poly(a[i]);
}
"""
TEMPLATE = """\
template <typename T>
__global__ void twice(T* a) {
    a[threadIdx.x] = a[threadIdx.x] * T(2);
}
"""
CELLS = {
    "a plain loop": (LOOP, (), ()),
    "a spilling kernel": (SPILL, (), ("-maxrregcount=24",)),
    "shared memory and a barrier": (SHARED, (), ()),
    "an inlined device function": (INLINED, (), ()),
    "a template with two instances": (TEMPLATE, ("twice<float>", "twice<double>"), ()),
}


def _nvdisasm() -> str:
    """The oracle's nvdisasm: the test extra's wheel's where it is installed (its JSON names each
    instruction's file; the H100's toolkit nvdisasm 13.0 gave ``''`` for every one), else the
    one cudamagic finds."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for wheel in sorted(Path(root).glob("cu*/bin/nvdisasm")):
            if os.access(wheel, os.X_OK):
                return str(wheel)
    tool = tools.find(tools.ToolKind.NVDISASM)
    if not isinstance(tool, tools.Tool):
        raise AssertionError("nvdisasm is in the test extra (nvidia-cuda-nvdisasm): "
                             "pip install -e '.[test]'")
    return tool.path


def _json_lines(cubin: bytes) -> dict[str, list[tuple[str, int | None, str]]]:
    """symbol -> [(file, line, opcode)] per instruction, from nvdisasm -json -g (a place holds
    until the next instruction that names one)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([_nvdisasm(), "-c", "-json", "-g", f.name], capture_output=True,
                              check=True, timeout=300)
    data = json.loads(done.stdout)
    files = [x["file"] for x in data[2]["files"]] if len(data) > 2 else []
    out = {}
    for fn in data[1]:
        place: tuple[str, int | None] = ("", None)
        rows = []
        for i in fn["sass-instructions"]:
            if "source-line" in i:
                # the file as NVRTC named it: 13.5 the bare name, 13.0 with the current folder
                place = (os.path.basename(files[i["source-file-id"]]), i["source-line"])
            rows.append((*place, i["opcode"]))
        out[fn["function-name"]] = rows
    return out


def _built(source, names=(), options=(), tmp_path=None):
    return cudamagic.build(source, names, options=list(options), cache=str(tmp_path))


@pytest.mark.parametrize("cell", CELLS, ids=list(CELLS))
def test_each_lines_count_is_nvdisasms_line_table_count(cell, tmp_path):
    source, names, options = CELLS[cell]
    m = _built(source, names, options, tmp_path)
    a = m.annotate().record
    build = m.debug.lineinfo()
    oracle = _json_lines(build.cubin)
    elf = read_cubin(build.cubin)._elf
    assert a.kernels and {k.symbol for k in a.kernels} == set(oracle)
    for k in a.kernels:
        listed = oracle[k.symbol]
        # the kernel's instruction count is its code section's size, 16 bytes each
        assert k.instructions == len(listed) == elf.section(".text." + k.symbol)[3] // 16
        assert k.counts.instructions + k.padding == k.instructions
        want = Counter(line for file, line, _ in listed[:k.counts.instructions]
                       if file == "cell.cu")
        got = {ln.line: c.counts.instructions for ln in a.lines for c in ln.code
               if c.symbol == k.symbol}
        # with the files nvdisasm named and which nvdisasm: an H200 run under xdist saw none
        # called cell.cu (its serial run passed); the next run says what it saw
        assert got == dict(want), (k.name, got, want, sorted({str(f) for f, _, _ in listed}),
                                   _nvdisasm())
    total = sum(ln.counts.instructions for ln in a.lines)
    assert total == sum(k.counts.instructions for k in a.kernels)
    assert not a.outside


def test_the_spills_are_on_the_lines_that_spill_and_match_ptxas(tmp_path):
    # built with -lineinfo itself: it is its own -lineinfo build, and -v's log is its log
    m = _built(SPILL, (), ("-lineinfo", "-maxrregcount=24", "-Xptxas=-v"), tmp_path)
    a = m.annotate().record
    oracle = _json_lines(m.cubin)["spill"]
    local = Counter((line, op.split(".")[0]) for _, line, op in oracle if op.startswith(("LDL",
                                                                                          "STL")))
    assert local, "the kernel was meant to spill"
    for ln in a.lines:
        assert ln.counts.local_loads == local[(ln.line, "LDL")], ln
        assert ln.counts.local_stores == local[(ln.line, "STL")], ln
    said = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", m.report.log)
    if said is None:  # the H100's NVRTC 13.0 logged no ptxas summary for -Xptxas=-v
        pytest.skip(f"NVRTC {m.report.nvrtc_version}'s log has no ptxas -v summary to compare "
                    f"with: {m.report.log[:300]!r}")
    stores, loads = map(int, said.groups())
    k = a.kernels[0]
    assert (k.counts.local_store_bytes, k.counts.local_load_bytes) == (stores, loads)
    assert k.stack_bytes and k.registers == 24
    text = m.annotate().text()
    if not k.counts.spills:  # the H100's toolkit nvdisasm 13.0 marked none: no claim is made
        assert f"({loads}/{stores} B per thread)" in text and "marked as spills" not in text
        pytest.skip(f"{tools.find(tools.ToolKind.NVDISASM)} marks no spill")
    # nvdisasm marks each of them as a spill: the kernel's array lives in registers
    assert k.counts.spills == k.counts.local_loads + k.counts.local_stores
    assert f"({loads}/{stores} B per thread, {k.counts.spills} of them marked as spills)" in text


def test_shared_memory_and_the_barrier_are_counted_on_their_lines(tmp_path):
    a = _built(SHARED, tmp_path=tmp_path).annotate().record
    by = {ln.text.strip(): ln.counts for ln in a.lines}
    assert by["__syncthreads();"].barriers == 1
    assert by["t[threadIdx.x] = a[threadIdx.x];"].shared == 1
    assert by["t[threadIdx.x] = a[threadIdx.x];"].global_ == 1
    assert by["a[threadIdx.x] = t[255 - threadIdx.x];"].shared == 1
    assert a.kernels[0].shared_bytes == 1024


def test_inlined_code_lands_on_the_line_it_came_from_with_its_call_site(tmp_path):
    m = _built(INLINED, tmp_path=tmp_path)
    a = m.annotate().record
    body = [ln for ln in a.lines if ln.line in (2, 3, 4)]
    assert all(ln.counts.instructions for ln in body), body
    call = next(ln.line for ln in a.lines if "poly(a[i])" in ln.text)
    code = [x.instruction for ln in body for c in ln.code for x in c.code]
    # each came from poly's body and was inlined at the call: nvdisasm -gi says both
    assert all(i.places[0].line in (2, 3, 4) and i.places[-1].line == call for i in code), code


def test_a_templates_instances_are_shown_apart_or_together(tmp_path):
    m = _built(TEMPLATE, ("twice<float>", "twice<double>"), (), tmp_path)
    together, apart = m.annotate(), m.annotate(instances="apart")
    line = next(ln for ln in together.record.lines if "T(2)" in ln.text)
    assert len(line.code) == 2
    assert line.counts.instructions == sum(c.counts.instructions for c in line.code)
    text = apart.text()
    assert "^ twice<double>" in text and "[twice<float>]" in text
    assert "^ twice" not in together.text()
    one = m.annotate("twice<double>").record
    assert [k.name for k in one.kernels] == ["twice<double>"]
    with pytest.raises(ArgumentValueError, match="instances='both'"):
        m.annotate(instances="both")
    with pytest.raises(ArgumentValueError, match="no such kernel"):
        m.annotate("thrice<int>")


HEADER = """\
#pragma once
__device__ inline float half_square(float x) {
    float y = x * x;
    return y * 0.5f + x;
}
__device__ __noinline__ float seven(float x) {
    return x * 7.0f - 1.0f;
}
"""
WITH_HEADER = """\
#include "mine.cuh"
extern "C" __global__ void hk(float* a, int n) {
    int i = threadIdx.x;
    a[i] = half_square(a[i]);
    a[i + 1] = seven(a[i]);
}
"""


def test_a_headers_code_lands_at_its_call_or_under_the_include(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mine.cuh").write_text(HEADER)
    m = _built(WITH_HEADER, (), (f"-I{tmp_path / 'inc'}",), tmp_path)
    a = m.annotate().record
    running = a.kernels[0].counts.instructions  # the padding after them carries a place too
    oracle = _json_lines(m.debug.lineinfo().cubin)["hk"][:running]
    in_header = Counter(line for file, line, _ in oracle if file == "mine.cuh")
    by = {ln.line: ln for ln in a.lines}
    inlined = [x for c in by[4].code for x in c.code if x.header is not None]
    # the inline function's code counts where the cell calls it, marked with its own line
    assert inlined and all(x.header.line in (3, 4) for x in inlined)
    # the __noinline__ function's own code has no place in the cell: under the #include
    under = [x for c in by[1].code for x in c.code]
    assert under and all(x.header is not None and x.header.line == 7 for x in under)
    assert len(inlined) + len(under) == sum(in_header.values())
    assert "mine.cuh:3" in m.annotate().html()


def test_without_nvdisasm_annotate_says_how_to_install_it(tmp_path, monkeypatch):
    m = _built(LOOP, tmp_path=tmp_path)
    monkeypatch.setattr(tools, "find", lambda kind: tools.Missing(kind, ("here",), "install it"))
    with pytest.raises(tools.ToolMissingError, match="nvdisasm not found.*install it"):
        m.annotate()


def test_the_listing_reader_keeps_a_place_until_the_next_and_marks_the_padding():
    listing = "\n".join([
        "//--------------------- .text.k                  --------------------------",
        "k:",
        '\t//## File "/w/cell.cu", line 3 inlined at "/w/cell.cu", line 9',
        '\t//## File "/w/cell.cu", line 9',
        "        /*0000*/                   FMUL R5, R0, R0 ;",
        "        /*0010*/              @!P0 BRA `(.L_x_1) ;",
        '\t//## File "/w/cell.cu", line 10',
        ".L_x_1:",
        "        /*0020*/                   EXIT ;",
        ".L_x_0:",
        "        /*0030*/                   BRA `(.L_x_0);",
        "        /*0040*/                   NOP;",
        "//--------------------- SYMBOLS --------------------------",
        "        /*0000*/                   NOP;"])
    (k,) = sass.read_listing(listing)
    assert [(i.offset, i.opcode, [p.line for p in i.places], i.padding)
            for i in k.instructions] == [(0, "FMUL", [3, 9], False), (0x10, "BRA", [3, 9], False),
                                         (0x20, "EXIT", [10], False),
                                         (0x30, "BRA", [10], True), (0x40, "NOP", [10], True)]
    assert k.instructions[1].text == "@!P0 BRA `(.L_x_1)"
    assert k.instructions[1].kind is sass.Kind.BRANCH


@pytest.mark.parametrize("opcode, kind, nbytes", [
    ("LDL.LU.64", sass.Kind.LOCAL_LOAD, 8), ("STL", sass.Kind.LOCAL_STORE, 4),
    ("STL.128", sass.Kind.LOCAL_STORE, 16), ("LDL.U8", sass.Kind.LOCAL_LOAD, 1),
    ("LDS.64", sass.Kind.SHARED, 8), ("ATOMS.ADD", sass.Kind.SHARED, 4),
    ("LDG.E.128", sass.Kind.GLOBAL, 16), ("RED.E.ADD.F32.FTZ.RN", sass.Kind.GLOBAL, 4),
    ("ATOMG.E.ADD.STRONG.GPU", sass.Kind.GLOBAL, 4), ("BRX", sass.Kind.BRANCH, 4),
    ("CALL.REL.NOINC", sass.Kind.BRANCH, 4), ("BAR.SYNC.DEFER_BLOCKING", sass.Kind.BARRIER, 4),
    ("SYNCS.ARRIVE.TRANS64.A1T0", sass.Kind.BARRIER, 4), ("FFMA", sass.Kind.OTHER, 4)])
def test_an_opcode_is_counted_as_its_kind(opcode, kind, nbytes):
    assert sass.kind_of(opcode) is kind and sass.access_bytes(opcode) == nbytes


def _recorded(name: str):
    path = TOOLS / "recorded" / f"{name}.ncu-rep"
    if not path.exists():
        pytest.skip("no ncu report recorded yet (scripts/record_tool_fixtures.py on a GPU)")
    return profiler.read_report(path, label=name, source=PROFILE_SOURCE,
                                line_offset=LINE_OFFSET)


def test_a_profiles_samples_land_on_the_annotated_lines(tmp_path):
    burn, copy = _recorded("burn"), _recorded("copy")
    assert burn.pcs and burn.symbol == "burn"
    m = cudamagic.build(PROFILE_SOURCE, cache=str(tmp_path))
    a = m.annotate("burn", profile=burn).record
    lines = {ln.line - 0: ln.profiles[0] for ln in a.lines if ln.profiles[0] is not None}
    in_cell = sum(c.samples for c in burn.pcs if c.file.endswith("cell.cu"))
    assert sum(p.samples for p in lines.values()) == in_cell == sum(c.samples for c in burn.pcs)
    # the report's lines are the cell's less the %%cuda line: shifted back here
    loop = next(n for n, text in enumerate(PROFILE_SOURCE.splitlines(), 1) if "steps" in text
                and "for" in text)
    hot = max(lines, key=lambda n: lines[n].samples)
    assert hot in (loop, loop - 3), (hot, lines)  # the loop, or the kernel's first line
    top = lines[loop]
    assert top.stalls and top.executed and 0.9 * 32 * top.executed < top.threads <= \
        32 * top.executed
    # two profiles side by side on one source
    both = m.annotate(profile=[burn, copy]).record
    assert both.profiles == ("burn", "copy")
    copy_lines = {ln.line for ln in both.lines if ln.profiles[1] is not None}
    burn_lines = {ln.line for ln in both.lines if ln.profiles[0] is not None}
    assert copy_lines and burn_lines and not copy_lines & burn_lines
    sectors = [ln.profiles[1] for ln in both.lines if ln.profiles[1] and ln.profiles[1].sectors]
    assert sectors and all(p.ideal_sectors == p.sectors for p in sectors)  # a copy coalesces
    text = m.annotate(profile=[burn, copy]).text()
    assert "burn samples" in text and "copy samples" in text


def test_the_html_is_bounded_and_escaped(tmp_path, monkeypatch):
    from cudamagic.view import annotate as view

    m = _built(LOOP.replace("a[0] = s;", "a[0] = s; // <b>&"), tmp_path=tmp_path)
    page = m.annotate()._repr_html_()
    assert "&lt;b&gt;&amp;" in page and "<b>&" not in page
    monkeypatch.setattr(view, "SHOWN_LINES", 3)
    monkeypatch.setattr(view, "LISTED", 1)
    short = m.annotate()
    assert short.html().count("<tr style") == 3 and "more lines not shown" in short.html()
    assert "... " in short.html() and "more lines not shown" in short.text()


@pytest.mark.parametrize("notebook", [False, True], ids=["terminal", "notebook"])
def test_cuda_dash_a_shows_the_annotation_after_the_report(notebook, tmp_path, monkeypatch,
                                                          capsys):
    from cudamagic.shell import magic
    from cudamagic.view.widget import Frontend

    from .test_magic import _shell

    ip = _shell(tmp_path, monkeypatch)
    shown: list[dict] = []
    if notebook:  # a Jupyter front end: the report is HTML, the annotation a fold of it
        monkeypatch.setattr(magic, "frontend", lambda shell: Frontend(
            shown.append, lambda *a, **k: None))
    ip.run_cell_magic("cuda", "-a", SHARED)
    ip.run_cell_magic("cuda", "--module plain", SHARED)
    if notebook:
        report, plain = shown[0]["text/html"], shown[-1]["text/html"]
        assert "cudamagic-annotation" in report and "__syncthreads();" in report
        assert "cudamagic-annotation" not in plain
    else:
        out = capsys.readouterr().out
        assert out.count("machine code by cell line") == 1  # the -a cell's, not the other's
        # its -lineinfo build and nvdisasm are a phase of the cell's time, not "other"
        assert out.count("annotated source (-lineinfo build, nvdisasm)") == 1, out
        line = next(ln for ln in out.splitlines() if "__syncthreads();" in ln)
        assert line.split()[0] == "5"  # the cell's own line: 4 of the source, below %%cuda
