"""Errors lead with the answer (issue 31): an interrupted compile is one block in IPython, as
every cudamagic error is, not a Python traceback quoting the whole cell; it is still a
KeyboardInterrupt, so code that stops on Ctrl-C stops."""

from __future__ import annotations

import signal

import pytest

from cudamagic import pipeline
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
    from cudamagic.magic import _bodiless_cuda_cell

    lines = cell.splitlines(keepends=True)
    assert _bodiless_cuda_cell(lines) == lines


CUB = """#include <cub/cub.cuh>
__global__ void k(int* x) { x[0] = 1; }
"""


def test_a_wall_of_errors_leads_with_the_hint_then_the_first_error(tmp_path):
    """<cub/cub.cuh>: hundreds of thrust and CUB errors; the message opens with what to do,
    then the first error, then a count of the rest (the error's log keeps every line)."""
    import cudamagic
    from cudamagic.errors import CompileError

    with pytest.raises(CompileError) as caught:
        cudamagic.build(CUB, cache=tmp_path)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("NVRTC could not compile cell.cu (")
    assert lines[1].startswith("hint: <cub/cub.cuh> also brings in CUB's device-wide"), lines[:3]
    assert ": error" in lines[2], lines[:4]
    assert lines[-1].startswith("... ") and "more error" in lines[-1], lines[-1]
    assert "print(sys.last_value.log)" in lines[-1]
    assert len(lines) < 30 < len(caught.value.log.splitlines()), len(lines)


@pytest.mark.parametrize("errors", [1, 2, 5, 40])
def test_a_short_log_is_shown_whole_and_a_long_one_folds(errors):
    from cudamagic.toolchain.nvrtc import SHOWN_LOG_LINES, compile_error_message

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
