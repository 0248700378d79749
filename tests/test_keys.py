"""The cache key: every input known before a compile changes it; nothing else does."""

from __future__ import annotations

from cudamagic.keys import cache_key

BASE = dict(source="__global__ void k() {}", name_expressions=["a<int, int>", "b"],
            options=["-std=c++17"], arch="sm_90", nvrtc_version="13.5", toolkit="cupy 14",
            cwd="/home/u/nb")


def test_each_input_changes_the_key():
    k0 = cache_key(**BASE)
    for field, value in [("source", "__global__ void k() { }"),
                         ("name_expressions", ["a<int,int>", "b"]),
                         ("options", ["-std=c++20"]), ("arch", "sm_80"), ("nvrtc_version", "13.0"),
                         ("toolkit", "cupy 15"), ("cwd", "/home/u/other")]:
        assert cache_key(**{**BASE, field: value}) != k0, field


def test_name_expressions_are_a_set_and_commas_do_not_split():
    assert cache_key(**{**BASE, "name_expressions": ["b", "a<int, int>", "b"]}) == cache_key(**BASE)
    # "a<int" + "int>" must not collide with "a<int, int>"
    assert cache_key(**{**BASE, "name_expressions": ["a<int", " int>", "b"]}) != cache_key(**BASE)


def test_option_order_is_part_of_the_key():
    # -UFOO -DFOO defines FOO; -DFOO -UFOO does not: two different CUBINs
    assert cache_key(**{**BASE, "options": ["-UFOO", "-DFOO"]}) != \
        cache_key(**{**BASE, "options": ["-DFOO", "-UFOO"]})


def test_parts_cannot_bleed_into_each_other():
    # one option holding what two would hold is another key (the parts are length-prefixed)
    assert cache_key(**{**BASE, "options": ["-DA=1", "-DB=2"]}) != \
        cache_key(**{**BASE, "options": ["-DA=1\0-DB=2"]})
    assert cache_key(**{**BASE, "arch": "sm_90", "nvrtc_version": "13.5"}) != \
        cache_key(**{**BASE, "arch": "sm_9", "nvrtc_version": "013.5"})
