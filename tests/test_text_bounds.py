"""Every text pass of the compiler and the manifest is linear on adversarial input.

Each pass is timed on a small and a large input of the same shape (16 KB, then 1 MB). The
bounds are generous for a linear pass (a loaded machine included) and far below what the
quadratic passes took: a 72 KB comment of repeated ``template<>`` took 9.8 s to read for kernel
templates (on every hit), 64 KB of letters before ``has_include`` 50 s in the manifest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from cudamagic.toolchain.compile import deps
from cudamagic.toolchain.compile.nvrtc import (count_errors, plain_kernels, rewrite_log,
                                               shift_lines, template_kernels)

SIZES = ((16_000, 0.25), (1_000_000, 3.0))  # (characters, seconds allowed)


def _rep(unit: str, n: int, head: str = "", tail: str = "") -> str:
    return head + unit * max(1, (n - len(head) - len(tail)) // len(unit)) + tail


# shapes of cell source that a reading for kernel templates runs on (every hit reads one)
SOURCES: dict[str, Callable[[int], str]] = {
    "comment of template<>": lambda n: _rep("template<>", n, "// "),
    "comment of template<": lambda n: _rep("template<", n, "// "),
    "template< then >": lambda n: _rep("template<", n // 2) + _rep(">", n // 2),
    "> __global__ after one head": lambda n: _rep("> __global__ void ", n, "template <"),
    "words between __global__ and void": lambda n: _rep("a ", n, "template <> __global__ "),
    "spaces after >": lambda n: _rep(" ", n, "template <>", "__global__ void k("),
    "__x__ specifiers": lambda n: _rep("__x__ ", n, "template <> "),
    "a long __word": lambda n: _rep("x", n, "template <> __", " __global__ void k("),
    "__global__ repeated": lambda n: _rep("__global__ ", n),
    "void repeated": lambda n: _rep("void ", n),
}

NAMES = [f"k<{i}>" for i in range(2000)]
# shapes of NVRTC log that the rewrite to the cell's lines runs on
LOGS: dict[str, Callable[[int], tuple[str, list[str]]]] = {
    "one line of (": lambda n: ("(" * n, []),
    "one line of cell.cu(": lambda n: (_rep("cell.cu(", n), []),
    "located errors": lambda n: (_rep('cell.cu(5): error: identifier "x" is undefined\n', n), []),
    "name-map errors": lambda n: ("".join(
        f'__nv_name_map({i + 2}): error: identifier "q{i}" is undefined\n'
        f"  #pragma nv_mangled_name k<{i}>\n                          ^\n\n"
        for i in range(min(len(NAMES), n // 120))), NAMES),
    "one undefined long name": lambda n: (
        f'__nv_name_map(2): error: identifier "{"k" * n}" is undefined\n', ["k" * n + "<int>"]),
    "colons": lambda n: (_rep("x: ", n), []),
}
TEMPLATES = "".join(f"template <class T> __global__ void t{i}(T*) {{}}\n" for i in range(3000))

# shapes of header text that the manifest's scans (__has_include, literal includes) read
HEADERS: dict[str, Callable[[int], bytes]] = {
    "letters before has_include": lambda n: b"a" * n + b"has_include",
    "has_include repeated": lambda n: b"has_include" * (n // 11),
    "__has_include(< repeated": lambda n: b"__has_include(<" * (n // 15),
    "#if has_include words": lambda n: b"#if " + b"has_include" * (n // 11),
    "#include of comment openers": lambda n: b"#include " + b"/*" * (n // 2),
    "#include /* and stars": lambda n: b"#include /*" + b"*" * n,
    "#define of a long name": lambda n: b"#define " + b"a" * n,
    "line splices": lambda n: b"\\ " * (n // 2) + b"\\\n" * (n // 4),
    "include words": lambda n: b'#include "' * (n // 10),
}


def _within_bounds(run: Callable[[int], object]) -> None:
    for size, allowed in SIZES:
        start = time.perf_counter()
        run(size)
        took = time.perf_counter() - start
        assert took < allowed, f"{took:.2f} s at {size} characters (allowed {allowed} s)"


@pytest.mark.parametrize("shape", list(SOURCES))
def test_reading_a_source_for_kernels_is_linear(shape):
    _within_bounds(lambda n: (template_kernels(SOURCES[shape](n)), plain_kernels(SOURCES[shape](n))))


def test_the_template_reading_still_finds_kernel_templates():
    src = ("template <typename T> __global__ void saxpy(T* x) {}\n"
           "template <class T> static __global__ void c() {}\n"
           "template <class T> void __global__ d() {}\n"
           "template <int N, typename = cuda::std::enable_if_t<(N > 0)>> __global__ void e() {}\n"
           "__global__ void plain() {}\ntemplate <class T> __device__ void dev() {}\n"
           "template <class T> struct S {}; __global__ void after_a_struct(int) {}\n"
           "// template <class T> __global__ void commented(T) {}\n")
    assert template_kernels(src) == ["saxpy", "c", "d", "e", "commented"]


@pytest.mark.parametrize("shape", list(LOGS))
def test_rewriting_a_log_is_linear(shape):
    def run(n):
        log, names = LOGS[shape](n)
        text = rewrite_log(log, "cell.cu", names, 1, TEMPLATES)
        count_errors(text)
        shift_lines(text, 3)
    _within_bounds(run)


def test_a_log_of_many_name_errors_lists_a_bounded_few_templates():
    log, names = LOGS["name-map errors"](240)
    log = log.replace('"q0"', '"k"')
    text = rewrite_log(log, "cell.cu", names, 1, TEMPLATES)
    assert "t0, t1, t2" in text and "and 2990 more" in text


@pytest.mark.parametrize("shape", list(HEADERS))
def test_the_manifest_reads_a_header_in_linear_time(shape, tmp_path):
    def run(n):
        (tmp_path / "h.h").write_bytes(HEADERS[shape](n))
        search = deps.SearchPath(str(tmp_path), (str(tmp_path / "inc"),))
        deps.from_trace([("h.h", None)], search, HEADERS[shape](n).decode("latin-1"))
    _within_bounds(run)


def test_the_no_trace_test_and_the_trace_reader_are_linear():
    def run(n):
        assert not deps.reads_no_file(_rep("\\\ninclud", n, tail="e"), [])
        events = [{"name": "Processing Header File", "ts": i, "dur": 1,
                   "args": {"detail": f"h{i}.h"}} for i in range(n // 80)]
        assert len(deps.trace_headers(json.dumps({"traceEvents": events}))) == n // 80
    _within_bounds(run)
