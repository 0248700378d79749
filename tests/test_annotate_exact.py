"""What module.annotate() and %%cuda -a show is the module's own code, whole, on the lines NVRTC
numbered (issue 47): a tool's result is read whole (a tail only of its chatter), a cell's lines
are NVRTC's lines, a hit's annotation is not disassembled again, the magic line's offset and the
instances' names are kept. Real NVRTC, real nvdisasm (the nvidia-cuda-nvdisasm wheel), real
children; no GPU.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import pytest

import cudamagic
from cudamagic.toolchain import sass, tools
from cudamagic.toolchain.image import read_cubin

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
    m = cudamagic.build(HUGE, cache=str(tmp_path))
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
    from cudamagic.toolchain import sanitizer

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
