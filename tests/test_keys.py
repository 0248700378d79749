"""The cache key: every input that changes the CUBIN changes it; nothing else does."""

from __future__ import annotations

from cudamagic.keys import cache_key, quoted_headers

BASE = dict(source="__global__ void k() {}", name_expressions=["a<int, int>", "b"],
            options=["-std=c++17"], arch="sm_90", nvrtc_version="13.5", toolkit="cupy 14")


def test_each_input_changes_the_key():
    k0 = cache_key(**BASE)
    for field, value in [("source", "__global__ void k() { }"), ("name_expressions", ["a<int,int>", "b"]),
                         ("options", ["-std=c++20"]), ("arch", "sm_80"), ("nvrtc_version", "13.0"),
                         ("toolkit", "cupy 15"), ("headers", [("h.cuh", "00")])]:
        assert cache_key(**{**BASE, field: value}) != k0, field


def test_name_expressions_are_a_set_and_commas_do_not_split():
    assert cache_key(**{**BASE, "name_expressions": ["b", "a<int, int>", "b"]}) == cache_key(**BASE)
    # "a<int" + "int>" must not collide with "a<int, int>"
    assert cache_key(**{**BASE, "name_expressions": ["a<int", " int>", "b"]}) != cache_key(**BASE)


def test_quoted_headers_are_followed_recursively(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "a.cuh").write_text('#include "b.cuh"\n')
    (inc / "b.cuh").write_text("#define B 1\n")
    src = '#include "a.cuh"\n#include <cuda/std/complex>\n#include "nothere.h"\n'
    got = dict(quoted_headers(src, [inc]))
    assert set(got) == {"a.cuh", "b.cuh", "nothere.h"} and got["nothere.h"] == "missing"
    before = cache_key(**{**BASE, "headers": quoted_headers(src, [inc])})
    (inc / "b.cuh").write_text("#define B 2\n")
    after = cache_key(**{**BASE, "headers": quoted_headers(src, [inc])})
    assert before != after


def test_include_cycles_end(tmp_path):
    (tmp_path / "a.h").write_text('#include "b.h"\n')
    (tmp_path / "b.h").write_text('#include "a.h"\n')
    assert len(quoted_headers('#include "a.h"', [tmp_path])) == 2
