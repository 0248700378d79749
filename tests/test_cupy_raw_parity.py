"""The behaviours CuPy's RawModule suite checks (tests/cupy_tests/core_tests/test_raw.py in
CuPy's repository), with the project's own kernels and cudamagic's calls (``build`` for
``RawModule(code=...)``, ``load_cubin`` for ``RawModule(path=...)``, ``module[name]`` for
``get_function``, ``module.get_global`` for ``get_global``). What carries over from CuPy is the
facts: which behaviour each of its tests checks, and the results it expects. The kernel sources
below are written here; none is CuPy's.

Ported (CuPy's test: the behaviour, the kernel here):

- test_basic: one extern "C" kernel built and launched, sums equal (``elementwise_add``)
- test_module: two kernels of one extern "C" block, by name (``pairwise_add``/``pairwise_mul``)
- test_compiler_flag / test_invalid_compiler_flag: a -D option picks the element type; a value
  the cell refuses is a CompileError with the cell's #error text (``real_add``/``real_mul``)
- test_load_cubin / test_load_ptx: nvcc's CUBIN, PTX and fatbin loaded and launched (``ratio``)
- test_module_load_failure, test_get_function_failure: a missing file, an unknown kernel name
- test_dynamical_parallelism (+ _compile_failure): a kernel launching a kernel links with -dc,
  -rdc=true and -dlto, and fails to compile without (``fill_by_chunks``/``fill_chunk``)
- test_cuFloatComplex / test_cuDoubleComplex: cuComplex.h's add, sub, mul, div, conj, abs, fma,
  make, precision conversion and a by-value complex scalar (``cops``/``zops``)
- test_const_memory: a __constant__ array listed with its type and shape, filled from the host
  (``gains``, ``apply_gains``)
- test_template_specialization / test_template_failure: name expressions instantiate a template
  for int, float and CuPy's complex<double> beside a plain kernel; an uninstantiated one is a
  NameResolutionError (``square_in_place``/``square_doubles``)
- test_raw_pointer: a void* parameter given CuPy's MemoryPointer (``affine``)
- test_compile_kernel / test_compile_module: NVRTC's warning kept in the log, on a hit too
  (``combine``)
- TestRawGridSync: a grid-wide barrier read from the CUBIN, launched cooperatively unasked
  (``two_phase_add``)
- TestRawPicklable: a module and a kernel pickled, launched in another process
- the jitify test's std_code: <type_traits> refused with what to include (``bump``)

The compile, link, load and name-resolution half of each test runs here; the launches are
marked ``gpu``. docs/parity.md lists CuPy's tests that do not apply to cudamagic, and why.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import CompileError, ImageError, NameResolutionError

from .conftest import run_python

# ---- the kernels: the project's own, one per behaviour CuPy's suite checks ----

# elementwise sum, one thread an element, bounds-checked by a grid-stride loop
ADD = r"""
extern "C" __global__ void elementwise_add(const float* lhs, const float* rhs, float* dst,
                                           unsigned count) {
    for (unsigned at = blockIdx.x * blockDim.x + threadIdx.x; at < count;
         at += gridDim.x * blockDim.x)
        dst[at] = lhs[at] + rhs[at];
}
"""

# the operator comes from a -D option; the local no one reads makes NVRTC warn
COMBINE = r"""
extern "C" __global__ void combine(const float* lhs, const float* rhs, float* dst,
                                   unsigned count) {
    float never_read;
    unsigned at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= count) return;
    dst[at] = lhs[at] COMBINE_OP rhs[at];
}
"""

# two C-linkage kernels in one block, sharing a device helper templated on the operation
PAIRWISE = r"""
struct Plus  { __device__ float operator()(float a, float b) const { return a + b; } };
struct Times { __device__ float operator()(float a, float b) const { return a * b; } };

template <class Op>
__device__ void pairwise(const float* a, const float* b, float* out, unsigned count, Op op) {
    unsigned at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) out[at] = op(a[at], b[at]);
}

extern "C" {
__global__ void pairwise_add(const float* a, const float* b, float* out, unsigned count) {
    pairwise(a, b, out, count, Plus());
}
__global__ void pairwise_mul(const float* a, const float* b, float* out, unsigned count) {
    pairwise(a, b, out, count, Times());
}
}
"""

# the element type chosen by a macro, a width the cell does not support refused by #error
BY_WIDTH = r"""
#ifndef WIDTH
#define WIDTH 8
#endif
#if WIDTH == 8
typedef double real_t;
#elif WIDTH == 4
typedef float real_t;
#else
#error "WIDTH must be 4 or 8"
#endif

extern "C" {
__global__ void real_add(const real_t* a, const real_t* b, real_t* out, unsigned count) {
    unsigned at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) out[at] = a[at] + b[at];
}
__global__ void real_mul(const real_t* a, const real_t* b, real_t* out, unsigned count) {
    unsigned at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) out[at] = a[at] * b[at];
}
}
"""

# dynamic parallelism: each thread of the parent launches a child grid over its own chunk
NESTED = r"""
extern "C" {
__global__ void fill_chunk(float* chunk, int length) {
    if (threadIdx.x < length) chunk[threadIdx.x] = 1.0f;
}
__global__ void fill_by_chunks(float* data, int count, int chunk) {
    int which = blockIdx.x * blockDim.x + threadIdx.x;
    if (which < count / chunk) fill_chunk<<<1, chunk>>>(data + which * chunk, chunk);
}
}
"""

# what nvcc compiles to a CUBIN, PTX or a fatbin for load_cubin
RATIO = r"""
extern "C" __global__ void ratio(const float* num, const float* den, float* out,
                                 unsigned count) {
    unsigned at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) out[at] = num[at] / (den[at] + 1.0f);
}
"""

# cuComplex.h's arithmetic, one kernel per precision choosing the operation by an argument;
# the by-value scalar is a double2 (16 bytes) in the one and a float2 (8) in the other
CUCOMPLEX = r"""
#include <cuComplex.h>

enum Op { ADD, SUB, MUL, DIV, CONJ, ABS, FMA, MAKE, CONVERT, ADD_SCALAR };

extern "C" __global__ void zops(int op, int count, const cuDoubleComplex* a,
                                const cuDoubleComplex* b, const cuDoubleComplex* c,
                                cuDoubleComplex* out, double* magnitude, cuFloatComplex* narrow,
                                cuDoubleComplex scalar) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= count) return;
    switch (op) {
    case ADD: out[at] = cuCadd(a[at], b[at]); break;
    case SUB: out[at] = cuCsub(a[at], b[at]); break;
    case MUL: out[at] = cuCmul(a[at], b[at]); break;
    case DIV: out[at] = cuCdiv(a[at], b[at]); break;
    case CONJ: out[at] = cuConj(a[at]); break;
    case ABS: magnitude[at] = cuCabs(a[at]); break;
    case FMA: out[at] = cuCfma(a[at], b[at], c[at]); break;
    case MAKE: {
        cuDoubleComplex made = make_cuDoubleComplex(1.8, 2.9);
        out[at] = make_cuDoubleComplex(cuCreal(made), -3.0 * cuCimag(made));
    } break;
    case CONVERT: narrow[at] = cuComplexDoubleToFloat(a[at]); break;
    case ADD_SCALAR: out[at] = cuCadd(a[at], scalar); break;
    }
}

extern "C" __global__ void cops(int op, int count, const cuFloatComplex* a,
                                const cuFloatComplex* b, const cuFloatComplex* c,
                                cuFloatComplex* out, float* magnitude, cuDoubleComplex* wide,
                                cuFloatComplex scalar) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= count) return;
    switch (op) {
    case ADD: out[at] = cuCaddf(a[at], b[at]); break;
    case SUB: out[at] = cuCsubf(a[at], b[at]); break;
    case MUL: out[at] = cuCmulf(a[at], b[at]); break;
    case DIV: out[at] = cuCdivf(a[at], b[at]); break;
    case CONJ: out[at] = cuConjf(a[at]); break;
    case ABS: magnitude[at] = cuCabsf(a[at]); break;
    case FMA: out[at] = cuCfmaf(a[at], b[at], c[at]); break;
    case MAKE: {
        cuFloatComplex made = make_cuFloatComplex(1.8f, 2.9f);
        out[at] = make_cuFloatComplex(cuCrealf(made), -3.0f * cuCimagf(made));
    } break;
    case CONVERT: wide[at] = cuComplexFloatToDouble(a[at]); break;
    case ADD_SCALAR: out[at] = cuCaddf(a[at], scalar); break;
    }
}
"""
COMPLEX_OPS = ("ADD", "SUB", "MUL", "DIV", "CONJ", "ABS", "FMA", "MAKE", "CONVERT", "ADD_SCALAR")

# a __constant__ array the host fills, read by a kernel
CONSTANT = r"""
__constant__ float gains[100];

extern "C" __global__ void apply_gains(float* values, int count) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= count) return;
    values[at] = values[at] * gains[at];
}
"""

# a template instantiated by name expressions (CuPy's complex among them) beside a plain kernel
TEMPLATED = r"""
#include <cupy/complex.cuh>

template <class V>
__global__ void square_in_place(V* values, int count) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) values[at] = values[at] * values[at];
}

__global__ void square_doubles(double* values, int count) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) values[at] = values[at] * values[at];
}
"""

# an untyped pointer, cast inside the kernel
UNTYPED = r"""
extern "C" __global__ void affine(void* raw, int count) {
    double* values = static_cast<double*>(raw);
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) values[at] = 3.0 * values[at] - 8.0;
}
"""

# a grid-wide barrier between two phases: the second reads what other blocks wrote
GRID_SYNC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void two_phase_add(const float* a, const float* b, float* out, int count) {
    cg::grid_group grid = cg::this_grid();
    long long rank = grid.thread_rank(), threads = grid.size();
    for (long long at = rank; at < count; at += threads) out[at] = a[at];
    grid.sync();
    for (long long at = count - 1 - rank; at >= 0; at -= threads) out[at] += b[at];
}
"""

# the C++ standard library's <type_traits>, which NVRTC does not have, in a constrained template
NEEDS_STD = r"""
#include <type_traits>

template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
__global__ void bump(I* values, int count) {
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < count) values[at] += 100;
}
"""

gpu = pytest.mark.gpu
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _sum_args(dtype):
    """CuPy's _helper: x1 = arange(N*N), x2 = ones, y = zeros, for a (N,)x(N,) launch."""
    import cupy

    n = 10
    x1 = cupy.arange(n ** 2, dtype=dtype).reshape(n, n)
    x2 = cupy.ones((n, n), dtype=dtype)
    y = cupy.zeros((n, n), dtype=dtype)
    return n, x1, x2, y


def _run_sum(kernel, dtype=np.float32):
    n, x1, x2, y = _sum_args(dtype)
    kernel((n,), (n,), (x1, x2, y, np.uint32(n ** 2)))
    return x1, x2, y


# ---- test_basic, test_module, test_compiler_flag ----

def test_basic_module_and_compiler_flag_compile():
    assert set(cudamagic.build(ADD, use_cache=False).kernels) == {"elementwise_add"}
    assert set(cudamagic.build(PAIRWISE, use_cache=False).kernels) == {
        "pairwise_add", "pairwise_mul"}
    mod3 = cudamagic.build(BY_WIDTH, options=["-DWIDTH=8"], use_cache=False)
    # WIDTH=8 makes real_t double: the CUBIN's parameter records say 8-byte pointers and
    # the element type shows in nothing else (extern "C"), so the launch test checks it
    assert [p.size for p in mod3.image.kernel("real_add").params] == [8, 8, 8, 4]


@gpu
def test_basic():
    import cupy

    x1, x2, y = _run_sum(cudamagic.build(ADD)["elementwise_add"])
    assert cupy.allclose(y, x1 + x2)


@gpu
def test_module():
    import cupy

    module = cudamagic.build(PAIRWISE)
    x1, x2, y = _run_sum(module["pairwise_add"])
    assert cupy.allclose(y, x1 + x2)
    x1, x2, y = _run_sum(module["pairwise_mul"])
    assert cupy.allclose(y, x1 * x2)


@gpu
def test_compiler_flag():
    import cupy

    module = cudamagic.build(BY_WIDTH, options=["-DWIDTH=8"])
    x1, x2, y = _run_sum(module["real_add"], np.float64)
    assert cupy.allclose(y, x1 + x2)
    x1, x2, y = _run_sum(module["real_mul"], np.float64)
    assert cupy.allclose(y, x1 * x2)


def test_invalid_compiler_flag():
    with pytest.raises(CompileError, match="WIDTH must be 4 or 8"):
        cudamagic.build(BY_WIDTH, options=["-DWIDTH=3"], use_cache=False)


# ---- test_load_cubin, test_load_ptx (nvcc makes the files, as CuPy's test does) ----

def _nvcc(tmp_path, flag: str, arch: str = "sm_90"):
    src = tmp_path / "ratio.cu"
    src.write_text(RATIO)
    out = tmp_path / f"ratio.{flag.lstrip('-')}"
    subprocess.run(["nvcc", f"-gencode=arch=compute_{arch[3:]},code=sm_{arch[3:]}", flag,
                    str(src), "-o", str(out)], check=True, capture_output=True)
    return out


@needs_nvcc
@pytest.mark.parametrize("flag", ["-cubin", "-ptx", "-fatbin"])
def test_load_cubin_ptx_and_fatbin_resolve(tmp_path, flag):
    module = cudamagic.load_cubin(_nvcc(tmp_path, flag), arch="sm_90", cache=tmp_path / "c")
    assert set(module.kernels) == {"ratio"}


@gpu
@needs_nvcc
@pytest.mark.parametrize("flag", ["-cubin", "-ptx", "-fatbin"])
def test_load_cubin(tmp_path, flag):
    import cupy

    arch = cudamagic.pipeline.steps.default_arch()
    module = cudamagic.load_cubin(_nvcc(tmp_path, flag, arch), cache=tmp_path / "c")
    x1, x2, y = _run_sum(module["ratio"])
    assert cupy.allclose(y, x1 / (x2 + 1.0))


def test_module_load_failure(tmp_path):
    with pytest.raises(ImageError, match="cannot be read"):
        cudamagic.load_cubin(tmp_path / "this_does_not_exist.cubin")


def test_get_function_failure():
    module = cudamagic.build(PAIRWISE, use_cache=False)
    with pytest.raises(NameResolutionError, match="no kernel named 'no_such_kernel'"):
        module["no_such_kernel"]


# ---- test_dynamical_parallelism, test_dynamical_parallelism_compile_failure ----

def test_dynamical_parallelism_links():
    module = cudamagic.build(NESTED, options=["-dc"], use_cache=False)
    assert set(module.kernels) == {"fill_by_chunks", "fill_chunk"}
    assert module.cubin[16] == 2  # an executable CUBIN: linked with the device runtime


def test_dynamical_parallelism_compile_failure():
    with pytest.raises(CompileError):
        cudamagic.build(NESTED, use_cache=False)


@gpu
@pytest.mark.parametrize("options", [["-dc"], ["-rdc=true"], ["-dlto"]])
def test_dynamical_parallelism(options):
    import cupy

    n, inner_chunk = 169, 13
    x = cupy.zeros((n,), dtype=cupy.float32)
    kernel = cudamagic.build(NESTED, options=options)["fill_by_chunks"]
    kernel((1,), (n // inner_chunk,), (x, np.int32(n), np.int32(inner_chunk)))
    assert (x == 1.0).all()


# ---- test_cuFloatComplex, test_cuDoubleComplex ----

def test_cucomplex_compiles():
    """cuDoubleComplex is double2 (16 bytes), cuComplex float2 (8): the by-value scalar's slot
    says so in each precision's kernel."""
    module = cudamagic.build(CUCOMPLEX, use_cache=False)
    assert set(module.kernels) == {"zops", "cops"}
    assert [p.size for p in module.image.kernel("zops").params] == [4, 4] + [8] * 6 + [16]
    assert [p.size for p in module.image.kernel("cops").params] == [4, 4] + [8] * 6 + [8]


@gpu
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_cucomplex(dtype):
    import cupy

    n, block = 100, 32
    grid = (n + block - 1) // block
    single = dtype == np.complex64
    kernel = cudamagic.build(CUCOMPLEX)["cops" if single else "zops"]
    rnd = lambda: (cupy.random.random((n,)) + 1j * cupy.random.random((n,))).astype(dtype)
    a, b, c = rnd(), rnd(), rnd()
    out = cupy.zeros((n,), dtype=dtype)
    real = cupy.zeros((n,), dtype=np.float32 if single else np.float64)
    other = cupy.zeros((n,), dtype=np.complex128 if single else np.complex64)
    scalar = dtype(2 + 3j)

    def run(op):
        kernel((grid,), (block,), (np.int32(COMPLEX_OPS.index(op)), np.int32(n), a, b, c, out,
                                   real, other, scalar))

    run("ADD"); assert (out == a + b).all()
    run("SUB"); assert (out == a - b).all()
    run("MUL"); assert cupy.allclose(out, a * b)
    run("DIV"); assert (out == a / b).all()
    run("CONJ"); assert (out == cupy.conj(a)).all()
    # cuComplex.h's cuCabs(f) scales before its square root; cupy.abs's hypot can differ from it
    # in the last place: equal to within 2 units in the last place
    eps = np.finfo(real.dtype).eps
    run("ABS"); assert cupy.allclose(real, cupy.abs(a), rtol=2 * eps, atol=0)
    run("FMA"); assert cupy.allclose(out, a * b + c)
    run("MAKE"); assert cupy.allclose(out, 1.8 - 1j * 8.7)
    run("CONVERT"); assert (other == a.astype(other.dtype)).all()
    run("ADD_SCALAR"); assert (out == a + scalar).all()


# ---- test_const_memory ----

def test_const_memory_is_listed():
    module = cudamagic.build(CONSTANT, use_cache=False)
    (var,) = module.globals
    assert (var.name, var.size, var.space, var.dtype, var.shape) == (
        "gains", 400, "constant", "float32", (100,))


@gpu
def test_const_memory():
    import cupy

    module = cudamagic.build(CONSTANT)
    const_arr = cupy.asarray(module.get_global("gains"))
    assert const_arr.shape == (100,) and const_arr.dtype == cupy.float32
    data = cupy.arange(100, dtype=cupy.float32)
    const_arr[...] = data
    output_arr = cupy.ones(100, dtype=cupy.float32)
    module["apply_gains"]((1,), (100,), (output_arr, np.int32(100)))
    assert (data == output_arr).all()


# ---- test_template_specialization, test_template_failure ----

TEMPLATE_NAMES = ["square_in_place<int>", "square_in_place<float>",
                  "square_in_place<complex<double>>", "square_doubles"]


def test_template_specialization_resolves():
    module = cudamagic.build(TEMPLATED, TEMPLATE_NAMES, use_cache=False)
    symbols = {e: module[e].symbol for e in TEMPLATE_NAMES}
    complex_symbol = symbols.pop("square_in_place<complex<double>>")
    assert symbols == {"square_in_place<int>": "_Z15square_in_placeIiEvPT_i",
                       "square_in_place<float>": "_Z15square_in_placeIfEvPT_i",
                       "square_doubles": "_Z14square_doublesPdi"}
    # thrust::complex<double> inside CCCL's versioned namespace (THRUST_300102_SM_900_NS...)
    assert complex_symbol.startswith("_Z15square_in_placeIN6thrust")
    assert complex_symbol.endswith("7complexIdEEEvPT_i")


@gpu
def test_template_specialization():
    import cupy

    module = cudamagic.build(TEMPLATED, TEMPLATE_NAMES)
    for name, dtype in zip(TEMPLATE_NAMES, (cupy.int32, cupy.float32, cupy.complex128,
                                             cupy.float64)):
        in_arr = cupy.testing.shaped_random((10,), dtype=dtype)
        out_arr = in_arr ** 2
        module[name]((1,), (10,), (in_arr, np.int32(10)))
        assert cupy.allclose(in_arr, out_arr)


def test_template_failure():
    unnamed = cudamagic.build(TEMPLATED, use_cache=False)
    with pytest.raises(NameResolutionError):
        unnamed["square_in_place<int>"]
    named = cudamagic.build(TEMPLATED, ["square_in_place<int>"], use_cache=False)
    with pytest.raises(NameResolutionError):
        named["square_in_place<double>"]


# ---- test_raw_pointer ----

def test_raw_pointer_compiles():
    module = cudamagic.build(UNTYPED, use_cache=False)
    assert [p.size for p in module.image.kernel("affine").params] == [8, 4]


@gpu
def test_raw_pointer():
    import cupy
    from cupy.cuda import memory

    kernel = cudamagic.build(UNTYPED)["affine"]
    a = cupy.ones((100,), dtype=cupy.float64)
    memptr = memory.alloc(100 * a.dtype.itemsize)
    memptr.copy_from(a.data, 100 * a.dtype.itemsize)
    b = cupy.ndarray((100,), cupy.float64, memptr=memptr)
    kernel((1,), (100,), (memptr, np.int32(100)))
    assert (3.0 * a - 8.0 == b).all()


# ---- test_compile_kernel, test_compile_module ----

def test_compile_log_has_the_warning(tmp_path):
    module = cudamagic.build(COMBINE, options=["-DCOMBINE_OP=+"], cache=tmp_path)
    assert "warning" in module.report.log
    again = cudamagic.build(COMBINE, options=["-DCOMBINE_OP=+"], cache=tmp_path)
    assert again.hit and "warning" in again.report.log  # the stored log, on a hit too


@gpu
def test_compile_module():
    import cupy

    x1, x2, y = _run_sum(cudamagic.build(COMBINE, options=["-DCOMBINE_OP=+"])["combine"])
    assert cupy.allclose(y, x1 + x2)


# ---- TestRawGridSync (CuPy needs enable_cooperative_groups=True; cudamagic reads the CUBIN) ----

def test_grid_sync_is_read_from_the_cubin():
    module = cudamagic.build(GRID_SYNC, use_cache=False)
    assert module.image.kernel("two_phase_add").launch.grid_sync is True
    plain = cudamagic.build(ADD, use_cache=False)
    assert plain.image.kernel("elementwise_add").launch.grid_sync is False


@gpu
@pytest.mark.parametrize("n", [10, 100, 1000])
@pytest.mark.parametrize("block", [64, 256])
def test_grid_sync(n, block):
    import cupy

    kernel = cudamagic.build(GRID_SYNC)["two_phase_add"]
    x1 = cupy.arange(n ** 2, dtype="float32").reshape(n, n)
    x2 = cupy.ones((n, n), dtype="float32")
    y = cupy.zeros((n, n), dtype="float32")
    # CuPy's grid, capped at one block per SM: a grid-wide barrier needs every block resident
    # at once (CuPy's n=1000, block=64 asks 15 625 blocks), and the kernel strides over n
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = min((n * n + block - 1) // block, sms)
    kernel((grid,), (block,), (x1, x2, y, np.int32(n ** 2)))  # no cooperative flag asked for
    assert cupy.allclose(y, x1 + x2)


@gpu
def test_grid_sync_oversized_grid_is_refused_before_launch():
    import cupy

    kernel = cudamagic.build(GRID_SYNC)["two_phase_add"]
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    y = cupy.zeros(16, dtype="float32")
    with pytest.raises(cudamagic.errors.LaunchError, match=str(sms)):
        kernel((sms * 1000,), (1024,), (y, y, y, np.int32(16)))
    cupy.cuda.Device().synchronize()  # the context is still usable: nothing was launched


# ---- TestRawPicklable ----

def test_module_pickles_without_a_gpu():
    module = cudamagic.build(ADD, use_cache=False)
    back = pickle.loads(pickle.dumps(module))
    assert back.cubin == module.cubin and set(back.kernels) == {"elementwise_add"}
    kernel = pickle.loads(pickle.dumps(module["elementwise_add"]))
    assert kernel.symbol == "elementwise_add"


@gpu
@pytest.mark.parametrize("what", ["mod", "mod_ker"])
def test_raw_picklable(tmp_path, what):
    module = cudamagic.build(ADD, use_cache=False)
    obj = module if what == "mod" else module["elementwise_add"]
    (tmp_path / "raw.pkl").write_bytes(pickle.dumps(obj))
    run_python(f"""
import pickle, numpy as np, cupy as cp
obj = pickle.load(open({str(tmp_path / 'raw.pkl')!r}, 'rb'))
ker = obj["elementwise_add"] if {what == 'mod'!r} else obj
n = 100
a = cp.random.random(n, dtype=cp.float32); b = cp.random.random(n, dtype=cp.float32)
c = cp.empty_like(a)
ker((1,), (100,), (a, b, c, np.uint32(n)))
assert cp.allclose(a + b, c)
""")


# ---- std_code (the slow jitify test): NVRTC has no <type_traits> ----

def test_std_code_says_what_to_include():
    # the project's own standard headers take it as it is (on by default) ...
    module = cudamagic.build(NEEDS_STD, ["bump<int>"], use_cache=False)
    assert module["bump<int>"].symbol.startswith("_Z4bumpIiLi0EEvPT_i")
    # ... and without them the error says what to include instead
    with pytest.raises(CompileError, match="cuda/std/type_traits"):
        cudamagic.build(NEEDS_STD, ["bump<int>"], use_cache=False, std_headers=False)
    fixed = NEEDS_STD.replace("<type_traits>", "<cuda/std/type_traits>").replace(
        "std::", "cuda::std::")
    module = cudamagic.build(fixed, ["bump<int>"], use_cache=False, std_headers=False)
    assert module["bump<int>"].symbol.startswith("_Z4bumpIiLi0EEvPT_i")
