"""Enumerating a CUBIN's kernels and parameter records from its ELF file, without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cudamagic.errors import ImageError
from cudamagic.toolchain.image import read_cubin

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


# cuobjdump's names for the .nv.info attributes in the fixture (fixtures/fixture.nv_info.txt)
EIATTR_NAMES = {0x0A: "EIATTR_PARAM_CBANK", 0x17: "EIATTR_KPARAM_INFO",
                0x19: "EIATTR_CBANK_PARAM_SIZE", 0x1B: "EIATTR_MAXREG_COUNT",
                0x1C: "EIATTR_EXIT_INSTR_OFFSETS", 0x36: "EIATTR_SW_WAR",
                0x37: "EIATTR_CUDA_API_VERSION", 0x50: "EIATTR_SPARSE_MMA_MASK",
                0x5F: "EIATTR_MERCURY_ISA_VERSION"}


def _cuobjdump_sections() -> dict[str, list[tuple[str, str]]]:
    """``.nv.info.<symbol>`` -> [(attribute, value text)] as cuobjdump printed them."""
    out: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in NV_INFO_DUMP.read_text().splitlines():
        if line.startswith(".nv.info."):
            current = out.setdefault(line[len(".nv.info."):].strip(), [])
        elif line.strip().startswith("Attribute:"):
            current.append((line.split(":", 1)[1].strip(), ""))
        elif line.strip().startswith("Value:") and current:
            current[-1] = (current[-1][0], line.split(":", 1)[1].strip())
    return out


# cuobjdump's dump of the fixture CUBIN, read off the GPU machine (tests/fixtures/README.md)
NV_INFO_DUMP = FIXTURES / "fixture.nv_info.txt"


def test_nv_info_records_read_as_cuobjdump_lists_them():
    """The record reader against the real bytes: every kernel's attributes in cuobjdump's order,
    with its values for the parameter bank size and the register limit."""
    from cudamagic.toolchain.image import _records

    image = read_cubin((FIXTURES / "fixture.cubin").read_bytes())
    dumped = _cuobjdump_sections()
    assert set(dumped) == set(image.symbols)
    for k in image.kernels:
        records = list(_records(k.info))
        assert [EIATTR_NAMES.get(a, hex(a)) for _, a, _ in records] == \
            [name for name, _ in dumped[k.symbol]], k.symbol
        for (fmt, attr, body), (_, value) in zip(records, dumped[k.symbol]):
            if attr in (0x19, 0x1B):  # EIFMT_HVAL: the value is the record's two bytes
                assert int.from_bytes(body, "little") == int(value, 16), (k.symbol, value)


RESOURCES = r"""
__constant__ float coeffs[16];
extern "C" __global__ void plain(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void shared_int(int* x) {
  __shared__ int a[1]; a[0] = x[0]; __syncthreads(); x[1] = a[0]; }
extern "C" __global__ void shared_doubles(int* x) {
  __shared__ double a[100]; a[threadIdx.x] = x[0]; __syncthreads(); x[1] = a[99 - threadIdx.x]; }
extern "C" __global__ void local_array(float* x, int n, int k) {
  float a[256]; for (int i = 0; i < 256; ++i) a[(i * k) & 255] = x[i * n];
  x[threadIdx.x] = a[k & 255] + a[(k * 7) & 255]; }
extern "C" __global__ void uses_constant(float* x, int n) { x[threadIdx.x] = coeffs[n & 15]; }
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_resources_are_read_from_the_cubin(tmp_path, arch):
    import cudamagic

    image = read_cubin(cudamagic.build(RESOURCES, arch=arch, cache=tmp_path).cubin)
    res = {k.symbol: k.resources for k in image.kernels}
    assert res["local_array"].local_bytes == 256 * 4  # its array lives in local memory
    assert {r.local_bytes for s, r in res.items() if s != "local_array"} == {0}
    assert {r.const_bytes for r in res.values()} == {16 * 4}  # the CUBIN's __constant__ bank
    assert all(r.registers > 0 for r in res.values())
    # sm_90 puts the 1 KiB the system reserves per block in a kernel's shared section; the
    # driver leaves it out (H200: cuFuncGetAttribute said 800 and 4 for these two)
    assert res["shared_doubles"].static_shared_bytes == 100 * 8
    assert 4 <= res["shared_int"].static_shared_bytes <= 16  # + padding
    assert res["plain"].static_shared_bytes == 0


def test_registers_agree_with_the_text_section_where_it_has_them(tmp_path):
    """Before sm_90 a kernel's .text section also carries its register count (sh_info >> 24):
    the two records must agree (sm_90 CUBINs keep only the .nv.info one)."""
    import cudamagic
    from cudamagic.toolchain.image import _EIATTR_REGCOUNT

    for arch in ("sm_75", "sm_80", "sm_90"):
        image = read_cubin(cudamagic.build(RESOURCES, arch=arch, cache=tmp_path).cubin)
        for k in image.kernels:
            text = k.elf.section(".text." + k.symbol)
            regcount = k.elf.per_symbol[k.symbol_index][_EIATTR_REGCOUNT]
            assert k.resources.registers == regcount
            assert text[6] >> 24 == (regcount if arch != "sm_90" else 0), (arch, k.symbol)
