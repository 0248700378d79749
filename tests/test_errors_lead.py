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
    ip.run_line_magic("load_ext", "cudamagic")
    yield ip
    ip.run_line_magic("unload_ext", "cudamagic")


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
