"""The cache key: every input known before a compile changes it; nothing else does."""

from __future__ import annotations

import os

import pytest

from cudamagic.store.keys import cache_key
from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import entry_key

BASE = dict(source="__global__ void k() {}", name_expressions=["a<int, int>", "b"],
            options=["-std=c++17"], arch="sm_90", nvrtc_version="13.5", toolkit="cupy 14")


def test_each_input_changes_the_key():
    k0 = cache_key(**BASE)
    for field, value in [("source", "__global__ void k() { }"),
                         ("name_expressions", ["a<int,int>", "b"]),
                         ("options", ["-std=c++20"]), ("arch", "sm_80"), ("nvrtc_version", "13.0"),
                         ("toolkit", "cupy 15")]:
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


@pytest.mark.parametrize("option, same", [("-Iinc", True), ("-I../common", True),
                                          ("-I{abs}", False), ("-DX=1", True)])
def test_the_key_travels_between_working_folders(tmp_path, monkeypatch, option, same):
    """Two checkouts of one project in two folders: a relative -I (and the working folder
    itself) is named from the working folder, so the key is one; an absolute -I is the folder
    it names, so each checkout's is its own."""
    keys = []
    for checkout in ("a", "b"):
        nb = tmp_path / checkout / "nb"
        (nb / "inc").mkdir(parents=True)
        (tmp_path / checkout / "common").mkdir()
        monkeypatch.chdir(nb)
        opts = options_from_args([option.format(abs=nb / "inc")], [], "sm_90")
        keys.append(entry_key("__global__ void k() {}", opts)[0])
    assert (keys[0] == keys[1]) is same


_KEY_IN_A_CONDA_LIKE_PROCESS = r"""
import ctypes, dataclasses, sys
if sys.argv[1:]:  # the library another NVRTC install holds, loaded as that process loads it
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
from cudamagic.pipeline import steps as pipeline
from cudamagic.core.options import options_from_args
real = pipeline.toolkit  # no nvidia-cuda-nvrtc wheel: NVRTC is a conda or system toolkit's
pipeline.toolkit = lambda: dataclasses.replace(real(), distributions=tuple(
    d for d in real().distributions if not d.startswith("nvidia_cuda_nvrtc")))
key, _, _, nvrtc = pipeline.entry_key("__global__ void k() {}", options_from_args([]))
print(key, nvrtc)
"""


def test_an_nvrtc_outside_a_wheel_is_keyed_by_its_library_not_its_major_minor(tmp_path):
    """Without the nvidia-cuda-nvrtc wheel the key held nvrtcVersion's '13.5' alone, so a patch
    release of a conda or system NVRTC (another library of the same major.minor) was served
    the CUBINs its predecessor compiled. Here the other release is the wheel's library with
    4096 bytes more, loaded before cudamagic asks for NVRTC (cuda.bindings takes a library
    already loaded)."""
    import shutil
    import subprocess
    import sys

    from cudamagic.toolchain.compile.nvrtc import nvrtc_version
    from cudamagic.core.toolkit import loaded_libraries

    nvrtc_version()  # loaded here: which file it is
    wheel_lib = next(line.split()[-1] for line in open("/proc/self/maps")
                     if "/libnvrtc.so" in line)
    other = tmp_path / "libnvrtc.so.13"
    shutil.copyfile(wheel_lib, other)
    with open(other, "ab") as f:
        f.write(bytes(4096))

    def key(*preload: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", _KEY_IN_A_CONDA_LIKE_PROCESS, *preload],
                             capture_output=True, text=True, check=True, timeout=120)
        return out.stdout.split(" ", 1)

    (key_a, said_a), (key_b, said_b) = key(), key(str(other))
    assert key_a != key_b
    assert said_a.startswith(nvrtc_version() + " (libnvrtc.so.13:") and said_a != said_b
    assert loaded_libraries("libnvrtc.so") == (f"libnvrtc.so.13:{os.path.getsize(wheel_lib)}",)
    assert key() == [key_a, said_a]  # the same library, the same key
    # before and after a compile (which maps libnvrtc-builtins too): the same key
    compiled_first = _KEY_IN_A_CONDA_LIKE_PROCESS.replace(
        "key, _, _, nvrtc =", "pipeline.compile_cubin('__global__ void w() {}', [], "
        "['-arch=sm_90'])\nkey, _, _, nvrtc =")
    out = subprocess.run([sys.executable, "-c", compiled_first], capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split(" ", 1) == [key_a, said_a]
