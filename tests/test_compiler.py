"""NVRTC itself: CUBIN and lowered names out, errors at the cell's own lines."""

from __future__ import annotations

import pytest

from cudamagic.toolchain.compile.nvrtc import compile_cubin, nvrtc_version, rewrite_log
from cudamagic.errors import CompileError, OptionError
from cudamagic.toolchain.binary.image import read_cubin

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
        "from cudamagic.toolchain.compile.nvrtc import compile_cubin\n"
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
        "from cudamagic.toolchain.compile.nvrtc import compile_cubin\n"
        "r = compile_cubin('__global__ void k() {}', [], ['-arch=sm_90'])\n"
        "print(r.trace is None, r.cubin[:4] == b'\\x7fELF')\n")
    assert out.split() == ["True", "True"]


# --- not a template ---
# ``-n "scale<float>"`` on a kernel that is not a template says that ``scale`` is not a
# template (issue 31 item 3: NVRTC said only "type name is not allowed"). NVRTC is asked: after
# the failed compile, the bare name alone as a name expression; a template, or a cell that fails
# anyway, gets no such sentence.
import pytest

import cudamagic
from cudamagic.errors import CompileError

PLAIN = "__global__ void scale(float* x, float a) { x[0] *= a; }\n"
TEMPLATE = "template <typename T> __global__ void saxpy(T* x) { x[0] += 1; }\n"

# label: (source, name expressions, whether the message must say the bare name is no template)
CASES = {
    "plain kernel given template arguments": (PLAIN, ["scale<float>"], "scale"),
    "plain kernel in a namespace": ("namespace ops {\n" + PLAIN + "}\n", ["ops::scale<int>"],
                                    "ops::scale"),
    "a template given a type that does not exist": (TEMPLATE, ["saxpy<floaty>"], None),
    "a template, and an error elsewhere in the cell": (TEMPLATE + "int broken = ;\n",
                                                       ["saxpy<float>"], None),
}


@pytest.mark.parametrize("label", list(CASES))
def test_a_plain_kernel_named_with_template_arguments_is_said_to_be_no_template(label):
    source, names, bare = CASES[label]
    with pytest.raises(CompileError) as err:
        cudamagic.build(source, names, use_cache=False)
    text = str(err.value)
    if bare is None:
        assert "is not a template" not in text, text
    else:
        assert f'hint: {bare} is not a template: -n "{names[0]}"' in text, text
        assert text.index("is not a template") < text.index("error:")  # the answer first


# --- errors lead ---
# Errors lead with the answer (issue 31): an interrupted compile is one block in IPython, as
# every cudamagic error is, not a Python traceback quoting the whole cell; it is still a
# KeyboardInterrupt, so code that stops on Ctrl-C stops.
import signal

import pytest

from cudamagic.pipeline import steps as pipeline
from cudamagic.errors import CompileInterrupted

CELL = 'extern "C" __global__ void k(float* x, int n) { if (n) x[0] = 1.0f; }\n'


@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    ip = InteractiveShell.instance()
    if "cudamagic" not in ip.extension_manager.loaded:
        ip.run_line_magic("load_ext", "cudamagic")
    return ip


def test_an_interrupted_compile_is_one_block_not_a_traceback(shell, monkeypatch, capsys):
    real = pipeline.read_cubin

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "read_cubin", interrupted)
    result = shell.run_cell(f"%%cuda --module interrupted\n{CELL}")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert isinstance(result.error_in_exec, CompileInterrupted)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert text.strip().startswith("CompileInterrupted: compiling cell.cu was interrupted")
    assert "next run is a hit" in text
    assert "Traceback" not in text and "__global__" not in text, text
    assert len(text.strip().splitlines()) <= 3, text


@pytest.mark.parametrize("cell", ["%%cuda -h", "%%cuda -h\n", "%%cuda --help\n\n  \n"])
def test_a_cell_of_only_the_help_option_shows_the_help(shell, capsys, cell):
    result = shell.run_cell(cell)
    shown = capsys.readouterr()
    assert result.success, result.error_in_exec
    assert "cell body is empty" not in shown.out + shown.err
    assert "usage" in shown.out.lower() or "-n EXPR" in shown.out, shown.out[:300]


@pytest.mark.parametrize("cell", ["%%cuda", "%%cuda -n k\n", "%%cuda --module m\n\n"])
def test_a_cell_of_only_the_magic_line_says_there_is_no_cuda_cpp(shell, capsys, cell):
    result = shell.run_cell(cell)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert type(result.error_in_exec).__name__ == "SourceError", result.error_in_exec
    assert "the cell is empty" in text and "cell body is empty" not in text, text


@pytest.mark.parametrize("cell", ["%%cudax -h", "%cuda -h", "x = 1\n%%cuda -h", "%%cuda_load"])
def test_other_cells_are_left_to_ipython(cell):
    from cudamagic.shell.magic import _bodiless_cuda_cell

    lines = cell.splitlines(keepends=True)
    assert _bodiless_cuda_cell(lines) == lines


CUB = """#include "mylib.cuh"
__global__ void k(int* x) { x[0] = 1; }
"""


def test_a_wall_of_errors_leads_with_the_first_error_then_a_count_of_the_rest(tmp_path):
    """A header of the user's that includes <cub/cub.cuh> (the cell's own include of it is
    refused before any compile: tests/test_headers.py): hundreds of thrust and CUB errors; the
    message opens with the first error, then a count of the rest (the error's log keeps every
    line). In a child: errors inside headers break NVRTC's trace for the rest of the process
    (docs/cache.md, 'After a compile fails inside a header')."""
    import json

    from .conftest import run_python

    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mylib.cuh").write_text("#pragma once\n#include <cub/cub.cuh>\n")
    said = json.loads(run_python(
        "import json, cudamagic\n"
        "from cudamagic.errors import CompileError\n"
        "try:\n"
        f"    cudamagic.build({CUB!r}, options=['-I' + {str(tmp_path / 'inc')!r}],\n"
        f"                    cache={str(tmp_path / 'cache')!r})\n"
        "    print(json.dumps(None))\n"
        "except CompileError as exc:\n"
        "    print(json.dumps([str(exc), exc.log]))\n", timeout=240))
    assert said is not None, "compiled"
    message, log = said
    lines = message.splitlines()
    assert lines[0].startswith("NVRTC could not compile cell.cu (")
    assert ": error" in lines[1], lines[:3]
    assert lines[-1].startswith("... ") and "more error" in lines[-1], lines[-1]
    assert "print(sys.last_value.log)" in lines[-1]
    assert len(lines) < 30 < len(log.splitlines()), len(lines)


@pytest.mark.parametrize("errors", [1, 2, 5, 40])
def test_a_short_log_is_shown_whole_and_a_long_one_folds(errors):
    from cudamagic.toolchain.compile.nvrtc import SHOWN_LOG_LINES, compile_error_message

    log = "\n".join(f"line {i}: error: bad {i}\n  x{i};\n  ^\n" for i in range(errors))
    text = compile_error_message("cell.cu", log, ["do this"])
    lines = text.splitlines()
    assert lines[:2] == [f"NVRTC could not compile cell.cu ({errors} error"
                         f"{'s' if errors > 1 else ''}):", "hint: do this"]
    if len(log.splitlines()) <= SHOWN_LOG_LINES:
        assert text.endswith(log.strip("\n")) or log.strip("\n") in text
    else:
        assert lines[2] == "line 0: error: bad 0" and "line 1: error" not in text
        assert lines[-1].startswith(f"... {errors - 1} more errors")


# a long line of a compile's log -> the message stays short, the error's log and errors whole:
# a 100 000-character -n was quoted whole twice (its error and its echo): a 300 KB message
LONG_LINES = {
    "a 100 000-character name expression": ("template <class T> __global__ void k(T* x) {}\n",
                                            ["x" * 100_000]),
    "a template argument list of 20 000 ints": (
        "template <class... T> __global__ void k(T*... x) {}\n",
        ["k<" + "int," * 20_000 + "q>"]),
    "a 50 000-character cell line": ("__global__ void k() { int a = " + "1+" * 25_000 + "; "
                                     "undefined(); }\n", []),
}


@pytest.mark.parametrize("case", list(LONG_LINES))
def test_a_long_line_of_the_log_is_cut_in_the_message_only(case):
    import cudamagic

    source, names = LONG_LINES[case]
    with pytest.raises(CompileError) as caught:
        cudamagic.build(source, names, use_cache=False, arch="sm_90")
    said, log = str(caught.value), caught.value.log
    assert len(said) < 8000 < len(log), (len(said), len(log))
    assert "characters: the error's log has it whole)" in said
    assert max(len(line) for line in said.splitlines()) < 1100
    # what is wrong, at the end of NVRTC's line, is kept (a cut that kept only the head lost
    # "integer constant is too large" from a 5 000-digit -n: test_names)
    first = next(line for line in log.splitlines() if len(line) > 1000)
    assert first[-200:] in said, first[-200:]
    if names:
        assert [e.expression for e in caught.value.errors] == names  # whole, for code
