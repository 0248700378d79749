"""What module.annotate() and %%cuda -a show is the module's own code, whole, on the lines NVRTC
numbered (issue 47): a tool's result is read whole (a tail only of its chatter), a cell's lines
are NVRTC's lines, a hit's annotation is not disassembled again, the magic line's offset and the
instances' names are kept. Real NVRTC, real nvdisasm (the nvidia-cuda-nvdisasm wheel), real
children; no GPU.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

import pytest

import cudamagic
from cudamagic.toolchain.tools import sass, tools
from cudamagic.toolchain.binary.image import read_cubin

from .test_annotate import _json_lines, _nvdisasm


def _listing_size(cubin: bytes) -> int:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return len(subprocess.run([_nvdisasm(), "-c", "-gi", f.name], capture_output=True,
                                  check=True, timeout=300).stdout)


def _section_instructions(cubin: bytes) -> dict[str, int]:
    """symbol -> its code section's instructions (16 bytes each), from the ELF itself."""
    image = read_cubin(cubin)
    return {s: image._elf.section(".text." + s)[3] // 16 for s in image.symbols}


# --- a tool's result is read whole ---------------------------------------------------------------

SIXTY = "\n".join(
    f'extern "C" __global__ void k{i}(float* a, int n) {{\n'
    "    float s = a[threadIdx.x];\n"
    f"    for (int j = 0; j < n; ++j) s = s * 1.5f + a[j + {i}];\n"
    "    a[threadIdx.x] = s;\n"
    "}" for i in range(60)) + "\n"
HUGE = """\
extern "C" __global__ void huge(float* a, const float* b) {
    float s = a[threadIdx.x];
#pragma unroll
    for (int j = 0; j < 1100; ++j)
        s = s * b[j] + 1.0f;
    a[threadIdx.x] = s;
}
"""


@pytest.mark.parametrize("source, kernels", [(SIXTY, 60), (HUGE, 1)],
                         ids=["sixty kernels", "one huge kernel"])
def test_a_listing_past_the_chatter_tail_is_annotated_whole(source, kernels, tmp_path):
    # before: nvdisasm was read through run_child's 64 KiB tail: the sixty-kernel cell was
    # annotated with its last 6 kernels, the huge kernel with none of its code
    m = cudamagic.build(source, cache=str(tmp_path))
    cubin = m.debug.lineinfo().cubin
    assert _listing_size(cubin) > 2 * tools.TAIL_BYTES  # the premise: a listing past the tail
    a = m.annotate().record
    sections = _section_instructions(cubin)
    assert len(a.kernels) == len(sections) == kernels
    assert {k.symbol: k.instructions for k in a.kernels} == sections
    oracle = _json_lines(cubin)
    for k in a.kernels:  # every running instruction is on a line of the cell
        assert k.counts.instructions + k.padding == k.instructions
        on_lines = sum(c.counts.instructions for ln in a.lines for c in ln.code
                       if c.symbol == k.symbol)
        assert on_lines == k.counts.instructions
        in_cell = sum(1 for file, _, _ in oracle[k.symbol][:k.counts.instructions]
                      if file == "cell.cu")
        assert on_lines == in_cell


def test_a_listing_past_its_bound_is_refused_saying_so(tmp_path, monkeypatch):
    # a CUBIN no other test read in this process (which keeps a CUBIN's disassembly)
    m = cudamagic.build(HUGE.replace("huge(", "huge_bounded("), cache=str(tmp_path))
    cubin = m.debug.lineinfo().cubin
    with pytest.raises(sass.DisassemblyError, match=r"is more than 4\.0 KiB, the most read of "
                                                    r"one: it is not annotated"):
        sass.disassemble(cubin, bound=4096)
    monkeypatch.setattr(sass, "LISTING_BYTES", 4096)
    with pytest.raises(sass.DisassemblyError, match="more than 4.0 KiB"):
        m.annotate()


def _write_then_sleep(n: int, sleep: float = 0.0) -> list[str]:
    """A child that writes ``n`` bytes of a pattern that never repeats in a window (the line
    number, each line) to stdout, then sleeps ``sleep`` seconds."""
    code = ("import os, sys, time\n"
            f"data = ''.join(f'{{i:07d}}\\n' for i in range({n} // 8 + 1)).encode()[:{n}]\n"
            "view = memoryview(data)\n"
            "while view:\n"
            "    view = view[os.write(1, view):]\n"
            f"time.sleep({sleep})\n")
    return [sys.executable, "-c", code]


def _pattern(n: int) -> str:
    return "".join(f"{i:07d}\n" for i in range(n // 8 + 1))[:n]


def test_a_result_is_read_whole_and_its_bound_passed_stops_the_child_and_says_so():
    whole = tools.run_for_result(_write_then_sleep(3 << 20), bound=4 << 20, timeout=60)
    assert whole.stdout == _pattern(3 << 20) and whole.stdout_cut == 0
    started = time.monotonic()
    with pytest.raises(tools.ResultTooLarge, match=r"python.* wrote more than 1\.0 MiB as its "
                                                   r"result.*nothing of it is used"):
        tools.run_for_result(_write_then_sleep((1 << 20) + 1, sleep=60), bound=1 << 20,
                             timeout=120)
    assert time.monotonic() - started < 30  # stopped at the bound, not at its sleep's end


def test_a_tail_is_at_most_its_bound_and_counts_exactly_what_it_cut():
    # planted: the tail returned up to twice its bound (the trimming's slack), the cut counted
    # as the bytes seen less the bound
    keep = 1000
    for chunks in ([1500], [600, 900], [2500, 10], [3000], [999], [1000, 1]):
        t = tools._Tail(keep)
        data = _pattern(sum(chunks)).encode()
        at = 0
        for n in chunks:
            t.add(data[at:at + n])
            at += n
        text, cut = t.text()
        assert text == data[-keep:].decode(), chunks
        assert cut == len(data) - len(text), chunks
    # through a real child: 1.5 times the bound in one write is never trimmed by the slack
    done = tools.run_child(_write_then_sleep(1500), keep=keep, timeout=60)
    assert done.stdout == _pattern(1500)[-keep:] and done.stdout_cut == 500


def test_a_sanitizer_report_too_large_to_read_is_no_clean_run(tmp_path, monkeypatch):
    # before: a report past its bound was left unread and the run, exited 0, said "clean"
    from cudamagic.launch.tool_run import failed_account
    from cudamagic.toolchain.tools import sanitizer

    report = tmp_path / "report.xml"
    report.write_text("<ComputeSanitizerOutput>" + "<record/>" * 1000
                      + "</ComputeSanitizerOutput>")
    monkeypatch.setattr(sanitizer, "MAX_REPORT_BYTES", 1 << 10)
    with pytest.raises(sanitizer.SanitizerOutputError) as caught:
        sanitizer.read_xml(report, sanitizer.SanitizerTool.MEMCHECK)
    exited_well = tools.ChildResult(0, "", "", 1.0)
    said = failed_account(False, exited_well, "", str(caught.value))
    assert said.startswith("the tool's report was not read") and "more than" in said
    assert failed_account(False, exited_well, "", "") == ""  # a clean run stays clean


# --- one numbering of a cell's lines, NVRTC's ----------------------------------------------------

#: the characters str.splitlines() breaks a line at and NVRTC does not, and CRLF line ends
SEPARATORS = {"form feed": "\f", "vertical tab": "\v", "FS": "\x1c", "GS": "\x1d", "RS": "\x1e",
              "NEL": "\x85", "U+2028": "\u2028", "U+2029": "\u2029", "lone CR": "\r",
              "CRLF": "\r\n"}


def _nvrtc_error_line(source: str) -> int:
    """The line NVRTC's log names for the cell's one error (the raw bindings, no cudamagic)."""
    import re

    from cuda.bindings import nvrtc

    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"cell.cu", 0, [], [])
    try:
        nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=compute_90"])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return int(re.search(rb"cell\.cu\((\d+)\): error", log).group(1))


@pytest.mark.parametrize("sep", SEPARATORS.values(), ids=list(SEPARATORS))
def test_nvrtc_numbers_lines_at_newline_alone_as_cell_lines_does(sep):
    from cudamagic.core.lines import cell_lines

    # the separator in comments: where NVRTC broke the line there, "oops" would be code
    source = _lined("// one{sep}oops\n__device__ int two; // two{sep}oops\n"
                    "/* three{sep} */ __device__ int three;\nnot_declared = 4;\n", sep)
    line = _nvrtc_error_line(source)
    assert cell_lines(source)[line - 1].startswith("not_declared"), (line, cell_lines(source))


REVERSE = """\
// the reversal{sep}of a block
extern "C" __global__ void rev(float* a) {  // t{sep}is shared
    __shared__ float t[256];  /* {sep} */
    t[threadIdx.x] = a[threadIdx.x];
    __syncthreads();  // every write{sep}before any read
    a[threadIdx.x] = t[255 - threadIdx.x];
}
"""


def _lined(template: str, sep: str) -> str:
    """``template`` with ``sep`` in its comments; CRLF: every line ended so instead."""
    if sep == "\r\n":
        return template.replace("{sep}", " ").replace("\n", "\r\n")
    return template.replace("{sep}", sep)


def _cell(sep: str) -> str:
    return _lined(REVERSE, sep)


@pytest.mark.parametrize("sep", SEPARATORS.values(), ids=list(SEPARATORS))
def test_each_annotated_line_shows_the_code_of_nvrtcs_line_and_a_miss_names_it(
        sep, tmp_path, monkeypatch, capsys):
    # before: str.splitlines() numbered the cell: a line holding a form feed or U+2028 counted
    # two, so every later line was shown beside another line's code and a miss named the
    # wrong line
    from .test_magic import _shell

    ip = _shell(tmp_path, monkeypatch)
    cell = _cell(sep)
    ip.run_cell_magic("cuda", "-q --module rv", cell)
    m = ip.user_ns["rv"]
    a = m.annotate().record
    nvrtc_lines = cell.split("\n")[:-1]  # NVRTC's, as asked of it above
    assert [ln.line for ln in a.lines] == list(range(2, len(nvrtc_lines) + 2))  # below %%cuda
    assert [ln.text for ln in a.lines] == nvrtc_lines
    (k,) = a.kernels
    oracle = _json_lines(m.debug.lineinfo().cubin)["rev"][:k.counts.instructions]
    want: dict[int, int] = {}
    for file, line, _ in oracle:
        if file == "cell.cu":
            want[line + 1] = want.get(line + 1, 0) + 1
    assert {ln.line: ln.counts.instructions for ln in a.lines if ln.code} == want
    barrier = next(ln for ln in a.lines if "__syncthreads();" in ln.text)
    assert barrier.line == 6 and barrier.counts.barriers == 1
    # an edit of the store's line (NVRTC's 6, the cell's 7) is named so
    ip.run_cell_magic("cuda", "-q --module rv", cell.replace("255 - ", "254 - "))
    e = ip.user_ns["rv"].report.explanation
    assert e.summary == "the source changed (line 7)", e.summary
    assert e.diff[0].startswith("line 7 -     a[threadIdx.x] = t[255")


@pytest.mark.parametrize("sep", SEPARATORS.values(), ids=list(SEPARATORS))
def test_a_findings_and_a_hot_lines_text_is_nvrtcs_line(sep):
    # before: launch/tool_run.fold and profiler's hot lines took the text of line N from
    # str.splitlines(): a finding at the barrier was shown beside another line's code
    from cudamagic.launch.capture import Capture
    from cudamagic.launch.support import LineinfoBuild
    from cudamagic.launch.tool_run import fold
    from cudamagic.toolchain.tools.profiler import profile_of
    from cudamagic.toolchain.tools.sanitizer import Finding, FindingKind, SanitizerTool

    from .test_debug_tools import _Action, _Line, _Metric

    source = _cell(sep)
    build = LineinfoBuild(b"", source, 1, "cell.cu", True)
    race = Finding(SanitizerTool.RACECHECK, FindingKind.RACE, "a race", file="cell.cu", line=5,
                   peer=Finding(SanitizerTool.RACECHECK, FindingKind.RACE, "", file="cell.cu",
                                line=6))
    (cf,) = fold([race], build, Capture("rev", (1, 1, 1), (256, 1, 1), 0, ()), [])
    assert cf.cell_line == 6 and cf.source_line.startswith("    __syncthreads();")
    assert cf.peer_line == 7 and cf.peer_source.startswith("    a[threadIdx.x] = t[255")
    samples = _Metric(instances=[(0x10, 90), (0x20, 10)])
    p = profile_of(_Action({"smsp__pcsamp_sample_count": samples},
                           {0x10: _Line("cell.cu", 5), 0x20: _Line("cell.cu", 4)}),
                   source=source, line_offset=1)
    assert [(h.line, h.text) for h in p.hot_lines] == [
        (6, source.split("\n")[4].strip()), (5, "t[threadIdx.x] = a[threadIdx.x];")]


@pytest.mark.parametrize("sep", SEPARATORS.values(), ids=list(SEPARATORS))
def test_a_compile_errors_message_counts_and_names_nvrtcs_lines(sep, tmp_path):
    # before: the log was split at U+2028 and the like: the echo of the erring line broke in
    # two, and its second half, looking like an error line, was counted as a second error
    from cudamagic.errors import CompileError

    source = _lined('extern "C" __global__ void k(float* a) {\n'
                    "    // the next line{sep}is wrong\n"
                    "    a[0] = undefined_x;  // x{sep}line 9: error: fake\n}\n", sep)
    with pytest.raises(CompileError) as caught:
        cudamagic.build(source, cache=str(tmp_path))
    said = str(caught.value)
    assert said.startswith("NVRTC could not compile cell.cu (1 error):"), said
    assert 'line 3: error: identifier "undefined_x" is undefined' in said
    echo = next(ln for ln in said.split("\n") if "a[0] = undefined_x;" in ln)
    assert echo.rstrip("\r").endswith("error: fake")  # the echoed line is one line, whole
    assert [e.line for e in caught.value.errors] == [3]


# --- a hit's annotation is not disassembled again ------------------------------------------------

def test_a_cuda_dash_a_hit_runs_no_nvdisasm_and_shows_the_same_annotation(tmp_path, monkeypatch,
                                                                          capsys):
    # before: every %%cuda -a hit ran nvdisasm again (430 ms here, against 2 ms for the hit)
    from .test_magic import _shell

    runs: list[list[str]] = []
    real = tools.run_for_result

    def counted(argv, *args, **kwargs):
        runs.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(tools, "run_for_result", counted)
    ip = _shell(tmp_path, monkeypatch)
    cell = _cell("").replace("rev(", "rev_once(")  # a CUBIN no other test read in this process
    ip.run_cell_magic("cuda", "-a --module rv", cell)
    first = capsys.readouterr().out
    assert len(runs) == 1 and runs[0][0].endswith("nvdisasm")
    ip.run_cell_magic("cuda", "-a --module rv", cell)
    second = capsys.readouterr().out
    assert ip.user_ns["rv"].report.hit and len(runs) == 1  # a hit: no nvdisasm
    table = first[first.index("machine code by cell line"):]
    assert table and second[second.index("machine code by cell line"):] == table
    # another CUBIN under the same module name and cell is read: its own code, not the last
    edited = cell.replace("__syncthreads();", "__syncthreads(); __syncthreads();")
    ip.run_cell_magic("cuda", "-a --module rv", edited)
    third = capsys.readouterr().out
    assert len(runs) == 2
    barrier = next(ln for ln in ip.user_ns["rv"].annotate().record.lines
                   if "__syncthreads();" in ln.text)
    assert barrier.counts.barriers == 2, third


# --- the magic line's offset ---------------------------------------------------------------------

WITH_HEADER_AND_INLINE = """\
#include "mine.cuh"
__device__ float poly(float x) {
    float y = x * x;
    return __sinf(y) + 1.0f;
}
extern "C" __global__ void hk(float* a, int n) {
    int i = threadIdx.x;
    a[i] = half_square(a[i]);
    a[i + 1] = seven(a[i]) + poly(a[i + 2]);
}
"""


def test_under_the_magic_line_each_line_shows_its_own_code(tmp_path, monkeypatch):
    # planted (none caught before): the cell's lines without the magic line's offset, in the
    # line an instruction lands on, the call site it was inlined at, or the #include's line:
    # every line's code shown one line up. build() has no magic line: the shell's cell does.
    from .test_annotate import HEADER
    from .test_magic import _shell

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mine.cuh").write_text(HEADER)
    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", f"-I{tmp_path / 'inc'} --module hk", WITH_HEADER_AND_INLINE)
    m = ip.user_ns["hk"]
    a = m.annotate().record
    by = {ln.line: ln for ln in a.lines}
    texts = WITH_HEADER_AND_INLINE.split("\n")
    assert all(by[n + 1].text == texts[n - 1] for n in range(1, len(texts)))  # cell = NVRTC + 1
    (k,) = a.kernels
    oracle = _json_lines(m.debug.lineinfo().cubin)["hk"][:k.counts.instructions]
    own = Counter(line + 1 for file, line, _ in oracle if file == "cell.cu")
    got = Counter({ln.line: sum(1 for c in ln.code for x in c.code if x.header is None)
                   for ln in a.lines})
    assert +got == +own  # the cell's own code (poly's body inlined included) on its lines
    # a header's inline code where the cell calls it (cell line 9), its __noinline__ function
    # under the #include (cell line 2)
    inlined = [x for c in by[9].code for x in c.code if x.header is not None]
    under = [x for c in by[2].code for x in c.code]
    assert inlined and all(x.header.file.endswith("mine.cuh") for x in inlined)
    assert under and all(x.header is not None and x.header.line == 7 for x in under)
    assert not a.outside


# --- an instance's name in the HTML --------------------------------------------------------------

class _Page:
    """The tags an HTML page opens and the text it shows (html.parser, the standard library's)."""

    def __init__(self, page: str) -> None:
        from html.parser import HTMLParser

        self.tags: set[str] = set()
        self.texts: list[str] = []
        outer = self

        class Reader(HTMLParser):
            def handle_starttag(self, tag, attrs):
                outer.tags.add(tag)

            def handle_data(self, data):
                outer.texts.append(data)

        reader = Reader(convert_charrefs=True)
        reader.feed(page)
        reader.close()

    @property
    def text(self) -> str:
        return "".join(self.texts)


#: every element the annotation's HTML is made of
_ELEMENTS = {"div", "style", "b", "table", "thead", "tbody", "tr", "th", "td", "details",
             "summary", "pre", "span"}


@pytest.mark.parametrize("instances", ["together", "apart"])
def test_an_instances_name_is_text_in_the_html_never_a_tag(instances, tmp_path):
    # planted (not caught before): the name written into the HTML unescaped, in any of the
    # places it is shown: the kernels' totals, a row of its own, its label, a listing's title,
    # a profile's column; twice<double> then opened a <double> element
    from cudamagic.toolchain.tools.profiler import Profile

    from .test_annotate import TEMPLATE

    m = cudamagic.build(TEMPLATE, ["twice<float>", "twice<double>"], cache=str(tmp_path))
    profile = Profile(label="twice<double> & co", kernel="twice<double>")
    view = m.annotate(profile=profile, instances=instances)
    page = _Page(view._repr_html_())
    assert page.tags <= _ELEMENTS, page.tags - _ELEMENTS
    text = page.text
    assert re.search(r"twice<double>: \d+ instructions", text)  # the kernels' totals
    assert "twice<double>:\n/*" in text  # a listing's title, the line's code by kernel
    assert "twice<double> & co samples" in text  # the profile's column
    if instances == "apart":
        assert "\u21b3 twice<double>" in text and "[twice<float>]" in text
