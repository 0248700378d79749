"""Without a cell id (nbclient, papermill, a script calling :func:`cudamagic.build`), a cell
never built before is new, not "the source changed; -n changed" against the cell before it
(issue 31 item 5); the same cell edited is still compared with its last build."""

from __future__ import annotations

import cudamagic
from cudamagic.miss import ChangeKind
from cudamagic.store import KernelCache

FIRST = 'extern "C" __global__ void first(int* p) { p[0] = 1; }\n'
SECOND = ('template <typename T> __global__ void second(T* p) { p[0] = 2; }\n'
          'extern "C" __global__ void also(int* p) { p[1] = 3; }\n')


def _kinds(module) -> tuple:
    return tuple(module.report.explanation.kinds)


def test_each_new_cell_is_first_and_an_edit_is_compared(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = KernelCache(tmp_path / "cache")
    assert _kinds(cudamagic.build(FIRST, cache=cache)) == (ChangeKind.FIRST,)
    second = cudamagic.build(SECOND, ["second<float>"], cache=cache)
    assert _kinds(second) == (ChangeKind.FIRST,), second.report.explanation
    edited = cudamagic.build(FIRST.replace("= 1", "= 7"), cache=cache)  # the first cell, edited
    assert _kinds(edited) == (ChangeKind.SOURCE,), edited.report.explanation
    cache.close()
