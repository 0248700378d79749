"""The precompiled header made from the cell's include lines alone (issue 47 items 9, 10, 11):
real NVRTC, real files, the header library of tests/test_pch.py.

- A ``#define`` below the includes is not part of the PCH: its edits start from one PCH.
- The entry of a cell that starts from a PCH lists what that cell read, not every header the
  compile that made the PCH read.
- What the report says the PCH spared is NVRTC's front end on the headers, not the making
  compile's whole time (its body included).
"""

from __future__ import annotations

import pytest

from cudamagic.toolchain.compile import pch
from cudamagic.toolchain.compile.pch import PchKind

from .test_pch import BASE, _RUN, _build, _code, _count, _folder, _kind, _plain, _write, lib  # noqa: F401

pytestmark = pytest.mark.skipif(not pch.supported(), reason="this NVRTC makes no PCH (< 12.8)")

_KERNEL = "__global__ void k(float* o) {{ o[0] = lib::S5<float, 4>::f(o[1]) * N + {n}; }}\n"


def _with_define(n: int) -> str:
    return '#include "lib.h"\n#define N ' + str(n) + "\n" + _KERNEL.format(n=_RUN)


def test_an_edit_of_a_define_below_the_includes_starts_from_the_pch(lib, cache):
    """Each edit of ``#define N`` below the includes used to make a new PCH (its directives
    were the PCH's) and none was used, while the report said "kept ... for the next edit":
    the PCH is made from the include lines alone, and the next edit of N starts from it
    (planted: header_prefix keeping every leading directive -> MADE, MADE, MADE)."""
    kinds = []
    for n in (1, 2, 3):
        m = _build(cache, _with_define(n))
        kinds.append(_kind(m))
        assert _code(m) == _code(_plain(_with_define(n))), kinds
    assert kinds == [PchKind.MADE, PchKind.USED, PchKind.USED], kinds
    assert len(list(_folder(cache).glob("*.pch"))) == 1  # one PCH, the include lines'
    said = dict(m.report.facts)["headers"]
    assert said.startswith("from the precompiled header: "), said


def test_a_made_pch_is_the_one_the_next_edit_uses(lib, cache):
    """Whatever the cell's leading lines past its includes (a conditional define, a comment,
    a guard opened before the last include and closed after it), the report's "kept as a
    precompiled header for the next edit" holds: the next edit of the cell's code uses it."""
    heads = ['#if 1\n#include "lib.h"\n#endif\n#ifndef N\n#define N 2\n#endif\n',
             '#include "lib.h"\n// a comment\n\n#define N 3\n#pragma nv_diag_suppress 177\n']
    for head in heads:
        first = _build(cache, head + _KERNEL.format(n=_RUN + next(_count)))
        assert _kind(first) is PchKind.MADE
        assert "kept as a precompiled header for the next edit" in dict(
            first.report.facts)["headers"]
        edit = head + _KERNEL.format(n=_RUN + next(_count))
        second = _build(cache, edit)
        assert _kind(second) is PchKind.USED, head
        assert _code(second) == _code(_plain(edit))


_DBG = '#include "lib.h"\n__global__ void k(float* o) {{ o[0] = lib::S5<float, 4>::f(o[1]) + {n}; }}\n' \
    '#include "dbg.h"\n__global__ void d(float* o) {{ o[0] = DBG; }}\n'
_PLAIN = '#include "lib.h"\n__global__ void k(float* o) {{ o[0] = lib::S6<float, 4>::f(o[1]) + {n}; }}\n'


def test_an_edit_of_a_header_one_cell_never_includes_leaves_the_other_a_hit(lib, cache):
    """Two cells share the PCH of ``#include "lib.h"``; only the first includes dbg.h (below
    its code). An edit of dbg.h recompiles the first and not the second: the second's entry
    lists what its compile read (the PCH's headers), not every header of the compile that
    made the PCH (planted: the PCH's record listing the making compile's whole trace ->
    the second cell is a miss, "the header dbg.h changed")."""
    _write(lib / "lib" / "dbg.h", "#pragma once\n#define DBG 1\n")
    one = _DBG.format(n=_RUN + next(_count))
    two = _PLAIN.format(n=_RUN + next(_count))
    assert _kind(_build(cache, one)) is PchKind.MADE
    assert _kind(_build(cache, two)) is PchKind.USED
    assert _build(cache, one).report.hit and _build(cache, two).report.hit
    _write(lib / "lib" / "dbg.h", "#pragma once\n#define DBG 2\n")
    again = _build(cache, two)
    assert again.report.hit, again.report.miss_reason
    edited = _build(cache, one)
    assert not edited.report.hit  # the cell that reads dbg.h is compiled again
    assert _code(edited) == _code(_plain(one))
    assert _kind(edited) is PchKind.USED  # and dbg.h's edit left the PCH of lib.h standing


_HEAVY = ('#include "lib.h"\n__global__ void k(float* o) {{ float s = {n};\n'
          + "".join(f"  s += lib::S{i}<float, 64>::f(o[{i}]);\n" for i in range(0, 300, 2))
          + "  o[0] = s; }}\n")


def test_what_the_pch_spared_is_the_headers_parse_not_the_making_compile(lib, cache):
    """The report's saving was the making compile's whole time, its body included (a small
    edit took a tenth of it without any PCH): it is now the seconds NVRTC's front end spent
    on the headers, as its trace measures them. A cell whose body costs many times its
    headers says far less than that compile's time (planted: the record keeping the making
    compile's seconds -> the spared time is the whole compile)."""
    made = _build(cache, _HEAVY.format(n=_RUN + next(_count)))
    assert _kind(made) is PchKind.MADE
    used = _build(cache, _HEAVY.format(n=_RUN + next(_count)))
    assert _kind(used) is PchKind.USED
    _, compiled, spared = used.report.pch
    _, making, _ = made.report.pch
    assert 0 < spared < making / 3, (spared, making)
    said = dict(used.report.facts)["headers"]
    assert "front end" in said and " instead of " not in said, said


def test_a_cache_limit_says_the_pchs_keep_their_own(lib, tmp_path, monkeypatch):
    """A new user's ``%cuda_cache limit 64MB`` then one CUB edit left 323 MiB in the folder,
    unsaid: the limit command says that it bounds the entries and that the PCHs keep a limit
    of their own (and their size now), and the build that keeps PCHs past the entries' limit
    says so, once (planted: the limit's note 'size limit set' -> no word of the PCHs; the
    build's note removed -> the build says nothing)."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "magic-cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    said = ip.run_line_magic("cuda_cache", "limit 2MB").text()
    assert "the entries' size limit set to 2.0 MiB" in said, said
    assert "precompiled headers are not under it" in said and pch.LIMIT_ENV in said, said
    m = None
    for n in (1, 2):
        ip.run_cell_magic("cuda", "-q -I over -I lib", _with_define(100 + n))
        m = ip.user_ns["cuda_module"]
        told = [w for w in m.report.warnings if "precompiled headers kept" in w]
        assert len(told) == (1 if n == 1 else 0), m.report.warnings
        if n == 1:
            assert "%cuda_cache limit" in told[0] and pch.LIMIT_ENV in told[0], told
    after = ip.run_line_magic("cuda_cache", "limit 2MB").text()
    assert "hold 0 bytes" not in after, after  # the PCH's bytes now
