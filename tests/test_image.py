"""Enumerating a CUBIN's kernels and parameter records from its ELF file, without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from cudamagic.errors import ImageError
from cudamagic.toolchain.binary.image import read_cubin

from .conftest import FIXTURES
import random
import struct


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
    from cudamagic.toolchain.binary.image import info_records

    image = read_cubin((FIXTURES / "fixture.cubin").read_bytes())
    dumped = _cuobjdump_sections()
    assert set(dumped) == set(image.symbols)
    for k in image.kernels:
        records = list(info_records(k.info))
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
    from cudamagic.toolchain.binary.image import _EIATTR_REGCOUNT

    for arch in ("sm_75", "sm_80", "sm_90"):
        image = read_cubin(cudamagic.build(RESOURCES, arch=arch, cache=tmp_path).cubin)
        for k in image.kernels:
            text = k.elf.section(".text." + k.symbol)
            regcount = k.elf.per_symbol[k.symbol_index][_EIATTR_REGCOUNT]
            assert k.resources.registers == regcount
            assert text[6] >> 24 == (regcount if arch != "sm_90" else 0), (arch, k.symbol)


# Each kernel with whether it synchronises the grid: the reading must tell grid-wide barriers
# from block-, warp- and cluster-level ones, through a __noinline__ call, and from a kernel
# that traps without any barrier.
LAUNCH_SOURCE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ __noinline__ void grid_sync_fn() { cg::this_grid().sync(); }
extern "C" __global__ void grid_sync(int* x) { x[0] = 1; cg::this_grid().sync(); x[1] = 2; }
extern "C" __global__ void grid_sync_twice(int* x) {
  cg::grid_group g = cg::this_grid(); x[0] = 1; g.sync(); x[1] = 2; g.sync(); x[2] = 3; }
extern "C" __global__ void grid_sync_called(int* x) { x[0] = 1; grid_sync_fn(); x[1] = 2; }
extern "C" __global__ void grid_sync_branch(int* x, int n) { if (n) cg::this_grid().sync(); }
extern "C" __global__ void grid_arrive_wait(int* x) {
  cg::grid_group g = cg::this_grid(); auto t = g.barrier_arrive(); x[0] = 1;
  g.barrier_wait(static_cast<decltype(t)&&>(t)); }
extern "C" __global__ void block_sync(int* x) { x[0] = 1; cg::this_thread_block().sync(); }
extern "C" __global__ void syncthreads(int* x) { x[0] = 1; __syncthreads(); x[1] = x[0]; }
extern "C" __global__ void grid_valid(int* x) { x[0] = cg::this_grid().is_valid(); }
extern "C" __global__ void grid_size(int* x) { x[0] = cg::this_grid().size(); }
extern "C" __global__ void tile_shuffle(int* x) {
  auto t = cg::tiled_partition<32>(cg::this_thread_block()); x[0] = t.shfl_down(x[0], 1); t.sync(); }
extern "C" __global__ void traps(int* x) { if (x[0]) __trap(); x[1] = 1; }
extern "C" __global__ void block_sync_traps(int* x) {
  cg::this_thread_block().sync(); if (x[0]) __trap(); }
extern "C" __global__ void atomic_spin(int* x) { while (atomicAdd(x, 1) < 100) {} __syncthreads(); }
"""
GRID_SYNC = {"grid_sync", "grid_sync_twice", "grid_sync_called", "grid_sync_branch",
             "grid_arrive_wait"}


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"])
def test_grid_sync_is_read_from_the_cubin(tmp_path, arch):
    import cudamagic

    image = read_cubin(cudamagic.build(LAUNCH_SOURCE, arch=arch, options=["-std=c++17"],
                                       use_cache=False).cubin)
    got = {k.symbol for k in image.kernels if k.launch.grid_sync}
    assert len(image.kernels) == 13
    # block_sync_traps: the reading's known limit (a block barrier beside an explicit __trap)
    assert got == GRID_SYNC | {"block_sync_traps"}, arch


def test_debug_builds_say_grid_sync_is_unknown():
    """-G keeps traps on cooperative-groups paths an optimised build removes: a kernel with
    cooperative-groups barriers reads None (cannot tell), one without reads False."""
    import cudamagic

    image = read_cubin(cudamagic.build(LAUNCH_SOURCE, arch="sm_90", use_cache=False,
                                       options=["-std=c++17", "-G"]).cubin)
    launch = {k.symbol: k.launch.grid_sync for k in image.kernels}
    assert launch["grid_sync"] is None and launch["block_sync"] is None
    assert launch["syncthreads"] is False and launch["traps"] is False
    lineinfo = read_cubin(cudamagic.build(LAUNCH_SOURCE, arch="sm_90", use_cache=False,
                                          options=["-std=c++17", "-lineinfo"]).cubin)
    assert {k.symbol for k in lineinfo.kernels if k.launch.grid_sync} == \
        GRID_SYNC | {"block_sync_traps"}


CLUSTER_SOURCE = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) pair(int* x) { x[0] = 1; }
extern "C" __global__ void __cluster_dims__(2, 3, 4) box(int* x) { x[0] = 1; }
extern "C" __global__ void __cluster_dims__(4) four(int* x) { x[0] = 1; }
extern "C" __global__ void __cluster_dims__() any_cluster(int* x) { x[0] = 1; }
extern "C" __global__ void __launch_bounds__(256) bounded(int* x) { x[0] = 1; }
extern "C" __global__ void __launch_bounds__(128, 2) bounded_min(int* x) { x[0] = 1; }
extern "C" __global__ void plain(int* x) { x[0] = 1; }
"""


@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_120"])
def test_cluster_dims_and_launch_bounds_are_read_from_the_cubin(arch):
    import cudamagic

    image = read_cubin(cudamagic.build(CLUSTER_SOURCE, arch=arch, use_cache=False).cubin)
    got = {k.symbol: (k.launch.cluster_dims, k.launch.requires_cluster, k.launch.max_threads)
           for k in image.kernels}
    assert got == {"pair": ((2, 1, 1), True, None), "box": ((2, 3, 4), True, None),
                   "four": ((4, 1, 1), True, None), "any_cluster": (None, True, None),
                   "bounded": (None, False, (256, 1, 1)),
                   "bounded_min": (None, False, (128, 1, 1)), "plain": (None, False, None)}
    assert not any(k.launch.grid_sync for k in image.kernels)


GLOBALS_SOURCE = r"""
__constant__ float coeffs[16];
__constant__ int limits[2] = {3, 4};
__device__ int counter;
__device__ double table[3][5];
__device__ int initialised = 7;
static __device__ int file_local;
namespace ns { __device__ float scale; }
template <typename T> __device__ T zero;
template __device__ float zero<float>;
extern "C" __global__ void use(float* x) {
  x[0] = coeffs[1] + limits[1] + counter + table[1][2] + initialised + file_local + ns::scale
       + zero<float>; }
"""


@pytest.mark.parametrize("options", [[], ["-rdc=true"], ["-G"]])
def test_globals_are_listed_from_the_symbol_table(options):
    import cudamagic

    image = read_cubin(cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False,
                                       options=options).cubin)
    got = {g.name: (g.size, g.space, g.initialized) for g in image.globals}
    assert got == {"coeffs": (64, "constant", True), "limits": (8, "constant", True),
                   "counter": (4, "global", False), "table": (120, "global", False),
                   "initialised": (4, "global", True), "file_local": (4, "global", False),
                   "_ZN2ns5scaleE": (4, "global", False), "_Z4zeroIfE": (4, "global", False)}
    assert image.global_("table").size == 3 * 5 * 8
    with pytest.raises(KeyError):
        image.global_("use")  # a kernel is no variable


# --------------------------------------------------------------------------------------------------
# A CUBIN read lazily must still refuse a damaged file with an ImageError, wherever it is read.
#
# A hit and ``load_cubin`` read only the symbol table up front; a kernel's records, its resources,
# its launch needs and the module's variables are read on first use (a launch, a report row, a
# ``module.globals`` long after the load). A damaged file must then give the same clear
# :class:`ImageError` as an eager reading did, never an ``IndexError`` out of the ELF tables.

@pytest.fixture(scope="module")
def cubins() -> dict[str, bytes]:
    import cudamagic

    return {
        "fixture": (FIXTURES / "fixture.cubin").read_bytes(),
        "launch": cudamagic.build(LAUNCH_SOURCE, arch="sm_90", options=["-std=c++17"],
                                  use_cache=False).cubin,
        "globals-rdc": cudamagic.build(GLOBALS_SOURCE, arch="sm_90", options=["-rdc=true"],
                                       use_cache=False).cubin,
    }


def _section_table(data: bytes) -> tuple[int, int]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    (shnum,) = struct.unpack_from("<H", data, 0x3C)
    return shoff, shnum


def _read_everything(data: bytes) -> None:
    """Read the CUBIN and every record a hit reads lazily; only ImageError may come out."""
    try:
        image = read_cubin(data)
    except ImageError:
        return
    readers = [lambda: image.globals] + [
        (lambda s=s, a=a: getattr(image.kernel(s), a))
        for s in image.symbols for a in ("info", "params", "resources", "launch")]
    for read in readers:
        try:
            read()
        except ImageError:
            pass


@pytest.mark.parametrize("name", ["fixture", "launch", "globals-rdc"])
@pytest.mark.parametrize("beyond", [0, 1, 1000])
def test_a_section_name_table_past_the_section_table_is_refused_at_once(cubins, name, beyond):
    data = bytearray(cubins[name])
    _, shnum = _section_table(data)
    struct.pack_into("<H", data, 0x3E, min(shnum + beyond, 0xFFFF))
    with pytest.raises(ImageError, match="section-name table"):
        read_cubin(bytes(data))


def _mutants(data: bytes, rng: random.Random, count: int):
    shoff, shnum = _section_table(data)
    spans = [struct.unpack_from("<QQ", data, shoff + 64 * i + 24) for i in range(shnum)]
    spans = [(o, s) for o, s in spans if s and o + s <= len(data)]
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.choice((1, 2, 4))):
            where = rng.random()
            if where < 0.3:  # the ELF header
                i = rng.randrange(64)
            elif where < 0.6:  # the section table
                i = shoff + rng.randrange(shnum * 64)
            else:  # a section's bytes: records, symbols, names, code
                offset, size = rng.choice(spans)
                i = offset + rng.randrange(size)
            b[i] = rng.randrange(256)
        yield bytes(b)


@pytest.mark.parametrize("name", ["fixture", "launch", "globals-rdc"])
def test_every_lazy_reading_of_a_damaged_cubin_is_an_image_error(cubins, name):
    rng = random.Random(f"lazy-{name}")
    for mutant in _mutants(cubins[name], rng, 300):
        _read_everything(mutant)  # an IndexError, struct.error... fails the test here
