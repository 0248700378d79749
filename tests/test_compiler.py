"""NVRTC itself: CUBIN and lowered names out, errors at the cell's own lines."""

from __future__ import annotations

import pytest

from cudamagic.toolchain.nvrtc import compile_cubin, nvrtc_version, rewrite_log
from cudamagic.errors import CompileError, OptionError
from cudamagic.toolchain.image import read_cubin

from .conftest import run_python

OK = "template <typename T> __global__ void k(T* x) { x[0] = T(1); }\n"


def test_compile_gives_cubin_and_exact_lowered_names():
    res = compile_cubin(OK, ["k<float>", "k<int>"], ["-arch=sm_90"])
    assert res.lowered == {"k<float>": "_Z1kIfEvPT_", "k<int>": "_Z1kIiEvPT_"}
    assert set(read_cubin(res.cubin).symbols) == set(res.lowered.values())
    assert nvrtc_version().count(".") == 1


def test_syntax_error_on_cell_line_7_is_reported_as_line_7():
    body = "\n".join([
        "// 2", "// 3", "template <typename T>", "__global__ void k(T* x) {",
        "  x[0] = T(1)", "}", ""])  # the magic line is cell line 1, this body starts at line 2
    with pytest.raises(CompileError) as err:
        compile_cubin(body, ["k<float>"], ["-arch=sm_90"], line_offset=1)
    text = str(err.value)
    assert 'line 7: error: expected a ";"' in text
    assert "  }" in text and "^" in text  # the offending line, with a caret
    assert "cell.cu(" not in text


def test_bad_name_expression_points_at_its_option():
    with pytest.raises(CompileError) as err:
        compile_cubin(OK, ["k<float>", "k<flot>"], ["-arch=sm_90"])
    assert 'name expression -n "k<flot>"' in str(err.value)
    assert "__nv_name_map" not in str(err.value)


def test_refused_option_is_an_option_error():
    with pytest.raises(OptionError, match="-bogus"):
        compile_cubin(OK, [], ["-arch=sm_90", "-bogus"])


def test_warnings_are_kept_in_the_log():
    res = compile_cubin("__global__ void k(int* x) { int unused = 1; x[0] = 2; }\n", [],
                        ["-arch=sm_90"], line_offset=1)
    assert "line 2" in res.log and "unused" in res.log


def test_rewrite_log_keeps_unrelated_lines():
    log = 'other.cuh(3): error: oops\ncell.cu(2): warning: w\n1 error detected in the compilation of "cell.cu".'
    assert rewrite_log(log, "cell.cu", [], 1) == "other.cuh(3): error: oops\nline 3: warning: w"


def test_a_clean_compile_leaves_the_interpreters_bytes_alone():
    """NVRTC writes the log and the CUBIN into the buffers it is handed; an empty log is one
    byte, and a buffer made as b" " * 1 is CPython's shared b" ": writing there corrupts it for
    the whole process (a Jupyter kernel included)."""
    out = run_python(
        "from cudamagic.toolchain.nvrtc import compile_cubin\n"
        "r = compile_cubin('__global__ void k() {}', [], ['-arch=sm_90'])\n"
        "assert r.log == '' and r.cubin[:4] == b'\\x7fELF'\n"
        "print(bytes([32]) == b' ', b'a b'.split(b' '), b' ' * 3)\n")
    assert out.split("\n")[0] == "True [b'a', b'b'] b'   '"


def test_no_room_for_the_trace_compiles_without_it():
    """NVRTC aborts the process when it cannot write its trace (seen: "LLVM ERROR: out of
    memory", SIGABRT under a 4 KB file size limit): a compile without room must not ask."""
    out = run_python(
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "from cudamagic.toolchain.nvrtc import compile_cubin\n"
        "r = compile_cubin('__global__ void k() {}', [], ['-arch=sm_90'])\n"
        "print(r.trace is None, r.cubin[:4] == b'\\x7fELF')\n")
    assert out.split() == ["True", "True"]
