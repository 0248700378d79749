"""Enumerating a CUBIN's kernels and parameter records from its ELF file, without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cudamagic.errors import ImageError
from cudamagic.image import read_cubin

from .conftest import FIXTURES


def test_fixture_cubin_lists_every_kernel_once(rows):
    image = read_cubin((FIXTURES / "fixture.cubin").read_bytes())
    # the driver enumerated 42 kernels on the GPU machine, one per distinct symbol
    assert len(image.kernels) == 42
    assert set(image.symbols) == {r.symbol for r in rows}
    assert image.sm == 90


def test_parameter_records_equal_what_the_driver_reported(rows):
    image = read_cubin((FIXTURES / "fixture.cubin").read_bytes())
    for r in rows:
        k = image.kernel(r.symbol)
        assert tuple((p.offset, p.size) for p in k.params) == r.params, r.expression


@pytest.mark.parametrize("data, what", [
    (b"", "ELF header"), (b"\x7fELF" + b"\0" * 60, "64-bit"), (b"MZ" + b"\0" * 100, "ELF header"),
])
def test_not_a_cubin(data, what):
    with pytest.raises(ImageError, match=what):
        read_cubin(data)


def test_host_elf_is_refused():
    host_elf = open(os.path.realpath(sys.executable), "rb").read()
    assert host_elf[:4] == b"\x7fELF"
    with pytest.raises(ImageError, match="machine"):
        read_cubin(host_elf)


def test_every_truncation_is_an_image_error_or_a_subset():
    data = (FIXTURES / "fixture.cubin").read_bytes()
    full = set(read_cubin(data).symbols)
    for cut in range(0, len(data), 997):
        try:
            got = set(read_cubin(data[:cut]).symbols)
        except ImageError:
            continue
        assert got <= full


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_cubin_is_read(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text('template <typename T> __global__ void k(T* x, int n) {}\n'
                   'template __global__ void k<float>(float*, int);\n'
                   'extern "C" __global__ void c(double* x) {}\n')
    subprocess.run(["nvcc", "-cubin", "-arch=sm_80", "-o", str(tmp_path / "k.cubin"), str(src)],
                   check=True, capture_output=True)
    image = read_cubin((tmp_path / "k.cubin").read_bytes())
    assert set(image.symbols) == {"_Z1kIfEvPT_i", "c"}
    assert [(p.offset, p.size) for p in image.kernel("_Z1kIfEvPT_i").params] == [(0, 8), (8, 4)]
