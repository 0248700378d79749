"""``%cuda_cache stats`` agrees with the reports: an entry the pipeline finds but cannot serve
(its header changed, its bytes are damaged) is a miss in the folder's counts, not a hit.

Issue 31 item 5: after a header change the reports said 3 misses / 7 hits while the stats said
8 hits / 2 misses (each refused entry had been counted a hit by the store)."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.store import KernelCache
from cudamagic.store.memory import MemoryStore

SRC = '#include "ops.h"\nextern "C" __global__ void k(int* p) { p[0] = OPS; }\n'


def _tallies(builds: list[bool]) -> tuple[int, int]:
    return sum(builds), len(builds) - sum(builds)


@pytest.mark.parametrize("where", ["folder", "memory"])
def test_a_recompile_after_a_header_change_is_counted_a_miss(tmp_path, where):
    header = tmp_path / "ops.h"
    header.write_text("#define OPS 1\n")
    cache = KernelCache(tmp_path / "cache")
    if where == "memory":  # the in-memory fallback counts the same way
        cache._store = MemoryStore(1 << 30, "test")
    hits = []
    for value in (1, 1, 2, 2, 3):  # each new value: the entry found is refused, recompiled
        if f"OPS {value}" not in header.read_text():
            header.write_text(f"#define OPS {value}\n")
        hits.append(cudamagic.build(SRC, cache=cache, base_dir=tmp_path).hit)
    assert hits == [False, True, False, True, False]
    assert cache.stats() == _tallies(hits) == (2, 3)
    cache.close()


def test_a_damaged_entry_is_counted_a_miss(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    src = 'extern "C" __global__ void k(int* p) {}\n'
    assert not cudamagic.build(src, cache=cache).hit
    (key,) = list(cache.keys())
    cache.raw.set(key, b"not an entry")
    assert not cudamagic.build(src, cache=cache).hit  # found, refused, rebuilt
    assert cudamagic.build(src, cache=cache).hit
    assert cache.stats() == (1, 2)
    cache.close()
