"""NVRTC's precompiled headers, kept by the cache (issue 37): real NVRTC, real files.

Most rows use a header library of the test's own (a few hundred templates: its PCH is a few
MB and made in a tenth of a second); one CUB row shows the heap NVRTC needs for CCCL. Every
row compares the kernel's machine code (its CUBIN ``.text`` section) with a compile that had
no PCH at all.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cudamagic
from cudamagic.errors import OptionError
from cudamagic.options import parse_magic_line
from cudamagic.pipeline import entry_key
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain import pch
from cudamagic.toolchain.elf import elf_section
from cudamagic.toolchain.image import read_cubin
from cudamagic.toolchain.pch import PchKind

from .conftest import REPO

pytestmark = pytest.mark.skipif(not pch.supported(), reason="this NVRTC makes no PCH (< 12.8)")

LIBRARY = "\n".join(
    ["#pragma once", "#include \"scale.h\"", "namespace lib {"]
    + [f"template <class T, int N> struct S{i} {{ __device__ static T f(T x) {{ T s = 0; "
       f"for (int j = 0; j < N; ++j) s += x * (T)({i} + j); return s; }} }};" for i in range(300)]
    + ["}"]) + "\n"
HEAD = '#include "lib.h"\n#include "small.h"\n'
_RUN = random.Random().randrange(1 << 40)  # no process compiled these sources before
_count = iter(range(1, 1 << 30))


def _source(head: str = HEAD) -> str:
    """A new edit of the cell: one constant of its body changed."""
    return head + (f"__global__ void k(float* o) {{ o[0] = lib::S5<float, 4>::f(o[1]) * "
                   f"{_RUN + next(_count)} + SMALLV * SCALE; }}\n")


@pytest.fixture
def lib(tmp_path, monkeypatch, fresh_process):
    """The working folder with the header library in ``lib/`` (``-Ilib``) and an empty
    ``over/`` searched before it (``-Iover``)."""
    tmp_path = tmp_path / "work"
    for name in ("lib", "over", "other"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "lib" / "lib.h").write_text(LIBRARY)
    (tmp_path / "lib" / "small.h").write_text("#pragma once\n#define SMALLV 3\n")
    (tmp_path / "lib" / "scale.h").write_text("#pragma once\n#ifndef SCALE\n#define SCALE 1\n"
                                              "#endif\n")
    (tmp_path / "other" / "small.h").write_text("#pragma once\n#define SMALLV 11\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(pch.PCH_ENV, raising=False)
    monkeypatch.delenv(pch.LIMIT_ENV, raising=False)
    return tmp_path


BASE = ("-Iover", "-Ilib")


def _write(path: Path, text: str) -> None:
    """An edit made a while ago (not during the next compile, which would not be cached)."""
    path.write_text(text)
    past = time.time() - 5
    os.utime(path, (past, past))


def _code(m) -> dict[str, bytes]:
    """Each kernel's machine code: its CUBIN's ``.text.SYMBOL`` section."""
    return {s: elf_section(m.cubin, b".text." + s.encode()) for s in read_cubin(m.cubin).symbols}


def _plain(source: str, options=BASE, **kw):
    """The same build with no PCH and no cache at all."""
    return cudamagic.build(source, options=list(options), use_cache=False, **kw)


def _build(cache, source: str, options=BASE, **kw):
    return cudamagic.build(source, options=list(options), cache=cache, **kw)


def _kind(m) -> PchKind | None:
    return None if m.report.pch is None else m.report.pch[0]


def _folder(cache: KernelCache) -> Path:
    return Path(cache.pch_folder)


def _only_pch(cache: KernelCache) -> Path:
    (found,) = _folder(cache).glob("*.pch")
    return found


def test_an_edit_starts_from_the_pch_and_says_so(lib, cache):
    first = _build(cache, _source())
    assert _kind(first) is PchKind.MADE
    edit = _source()
    second = _build(cache, edit)
    assert _kind(second) is PchKind.USED
    assert _code(second) == _code(_plain(edit))
    said = dict(second.report.facts)["headers"]
    assert said.startswith("from the precompiled header: ") and " instead of " in said
    assert "precompiled" not in second.report.log  # NVRTC's own lines about it are not shown
    # the PCH is in the cache folder's own folder, nothing in the working folder
    assert _only_pch(cache).parent == Path(cache.directory) / "pch"
    assert sorted(p.name for p in lib.iterdir()) == ["lib", "other", "over"]


def test_the_entry_made_from_the_pch_lists_every_header(lib, cache):
    """A compile that starts from the PCH opens none of its headers (NVRTC's trace names
    none): the entry's manifest must list them anyway, or an edited header would be a hit."""
    _build(cache, _source())
    edit = _source()
    assert _kind(_build(cache, edit)) is PchKind.USED
    assert _build(cache, edit).report.hit
    for header, text in [("small.h", "#pragma once\n#define SMALLV 4\n"),
                         ("scale.h", "#pragma once\n#define SCALE 2\n")]:
        _write(lib / "lib" / header, text)
        again = _build(cache, edit)
        assert not again.report.hit, f"{header} edited, and the entry still served"
        assert _code(again) == _code(_plain(edit))


def test_off_switches_and_the_key(lib, cache, monkeypatch):
    """--no-pch, build(pch=False) and $CUDAMAGIC_PCH=0 compile the headers; the key is the
    same either way (a PCH changes no code), so an entry made without one serves with one."""
    assert parse_magic_line("--no-pch").pch is False and parse_magic_line("").pch is True
    with pytest.raises(OptionError, match="pch must be True or False"):
        cudamagic.build(_source(), pch="no")
    source = _source()
    off = _build(cache, source, pch=False)
    assert off.report.pch is None and not _folder(cache).exists()
    assert _build(cache, source).report.hit  # with the PCH on: the same key
    for pch_on in (True, False):
        opts = parse_magic_line(f"-I over -I lib {'' if pch_on else '--no-pch'}")
        assert entry_key(source, opts)[0] == off.key
    monkeypatch.setenv(pch.PCH_ENV, "0")
    assert _build(cache, _source()).report.pch is None and not _folder(cache).exists()
    monkeypatch.setenv(pch.PCH_ENV, "1")
    assert _kind(_build(cache, _source())) is PchKind.MADE


def test_a_cell_without_includes_gets_no_pch(lib, cache):
    m = _build(cache, "#define N 3\n__global__ void k(int* x) { x[0] = N; }\n")
    assert m.report.pch is None and not _folder(cache).exists()
