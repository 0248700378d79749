"""A module is its inputs: every later build of a module (the ``-lineinfo`` build behind
``module.annotate()``, ``kernel.sanitize`` and ``kernel.profile``) compiles what the module was
built from (its source, options, search path and toolkit as recorded, and the header contents
its manifest names) or refuses with :class:`~cudamagic.StaleModuleError`, naming what changed.

The tool runs' build step is ``module.debug.lineinfo()`` (what ``sanitize`` and ``profile``
call once their arguments are checked on the GPU): it runs without one. Which code a build
holds is read off its CUBIN: the cell's ``__device__`` variable is initialised from the
header's constant, so the value's bytes are in the CUBIN's data.
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

import cudamagic
from cudamagic import StaleModuleError

OLD, NEW = 1234.5, 6789.25
CELL = """\
#include "k.cuh"
__device__ float kv = K;
extern "C" __global__ void scale(float* a) { a[threadIdx.x] *= kv; }
"""


def _header(path: Path, value: float) -> None:
    """The header saved a second ago: a compile that starts within 10 ms of a header's change
    cannot be sure which text it read and is refused as racy (on a fast machine the next line
    of the test is that soon), which is not what these tests are about."""
    path.write_text(f"#define K {value}f\n")
    then = time.time_ns() - 1_000_000_000
    os.utime(path, ns=(then, then))


def _holds(cubin: bytes, value: float) -> bool:
    return struct.pack("<f", value) in cubin


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A module built in tmp_path from k.cuh (OLD) in an -I folder, and the header's path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "k.cuh"
    _header(header, OLD)
    m = cudamagic.build(CELL, options=[f"-I{tmp_path / 'inc'}"], cache=str(tmp_path / "c"))
    assert _holds(m.cubin, OLD)
    return m, header


def _annotate(m):
    return m.annotate()


def _tool_build(m):  # what kernel.sanitize / kernel.profile build before their child starts
    return m.debug.lineinfo()


@pytest.mark.parametrize("use", [_annotate, _tool_build], ids=["annotate", "sanitize/profile"])
def test_a_header_edited_after_the_build_is_named_and_nothing_else_is_shown(built, use):
    m, header = built
    _header(header, NEW)
    with pytest.raises(StaleModuleError, match=rf"the header {header} changed.*re-run the cell"):
        use(m)
    _header(header, OLD)  # put back: the module's own inputs again
    use(m)
    assert _holds(m.debug.lineinfo().cubin, OLD)
    _header(header, NEW)  # once made, the -lineinfo build is the module's: kept
    assert _holds(_tool_build(m).cubin, OLD)


def test_a_header_removed_or_shadowed_after_the_build_is_refused(built, tmp_path):
    m, header = built
    header.unlink()
    with pytest.raises(StaleModuleError, match=rf"{header} .*is gone"):
        m.debug.lineinfo()
    _header(header, OLD)
    shadow = tmp_path / "k.cuh"  # the working folder is searched first for a quoted include
    _header(shadow, NEW)
    with pytest.raises(StaleModuleError, match=rf"{shadow} now exists"):
        m.debug.lineinfo()


def test_a_header_edited_during_the_lineinfo_compile_is_caught_by_what_it_read(tmp_path):
    """The check before the compile passes; the compile then reads another header (its time
    put back, so only the contents it read can tell): refused, from that compile's manifest."""
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "k.cuh"
    _header(header, OLD)
    when = header.stat().st_mtime_ns - 10**9
    os.utime(header, ns=(when, when))
    edits = []

    def compiler(source, name_expressions, options, **kw):
        if "-lineinfo" in options:  # after the check before it, before NVRTC reads k.cuh
            _header(header, NEW)
            os.utime(header, ns=(when, when))
            edits.append(header)
        return compile_cubin(source, name_expressions, options, **kw)

    m = build_module(CELL, options_from_args([f"-I{tmp_path / 'inc'}"], ()),
                     cache=str(tmp_path / "c"), compiler=compiler)
    with pytest.raises(StaleModuleError, match=rf"the header {header} changed"):
        m.debug.lineinfo()
    assert edits, "the -lineinfo compile ran"


def test_the_rebuild_takes_the_modules_toolkit_not_a_changed_cuda_home(tmp_path, monkeypatch):
    homes = {}
    for name, value in (("a", OLD), ("b", NEW)):
        inc = tmp_path / name / "include"
        inc.mkdir(parents=True)
        (inc / "cuda_fp16.h").write_text("#pragma once\n")  # what makes a folder the toolkit's
        _header(inc / "k.cuh", value)
        homes[name] = str(tmp_path / name)
    monkeypatch.setenv("CUDA_HOME", homes["a"])
    m = cudamagic.build(CELL.replace('"k.cuh"', "<k.cuh>"), cache=str(tmp_path / "c"))
    assert _holds(m.cubin, OLD)
    monkeypatch.setenv("CUDA_HOME", homes["b"])
    assert _holds(m.debug.lineinfo().cubin, OLD)


def test_a_module_read_from_the_working_folder_is_not_rebuilt_in_another(tmp_path,
                                                                          monkeypatch):
    for name, value in (("x", OLD), ("y", NEW)):
        (tmp_path / name).mkdir()
        _header(tmp_path / name / "k.cuh", value)
    monkeypatch.chdir(tmp_path / "x")
    m = cudamagic.build(CELL, cache=str(tmp_path / "c"))
    monkeypatch.chdir(tmp_path / "y")
    with pytest.raises(StaleModuleError, match=rf"working folder is now {tmp_path / 'y'}"):
        m.debug.lineinfo()
    monkeypatch.chdir(tmp_path / "x")
    assert _holds(m.debug.lineinfo().cubin, OLD)


def test_a_refusal_before_the_compile_compiles_nothing(tmp_path, compiler):
    from cudamagic.core.options import options_from_args
    from cudamagic.pipeline.steps import build_module

    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "k.cuh"
    _header(header, OLD)
    m = build_module(CELL, options_from_args([f"-I{tmp_path / 'inc'}"], ()),
                     cache=str(tmp_path / "c"), compiler=compiler)
    _header(header, NEW)
    with pytest.raises(StaleModuleError, match=str(header)):
        m.debug.lineinfo()
    assert len(compiler.calls) == 1  # the module's own compile only
