"""CuPy's RawModule conformance suite (tests/cupy_tests/core_tests/test_raw.py in CuPy's
repository), ported to cudamagic: CuPy's kernel sources and expected results, cudamagic's calls
(``build`` for ``RawModule(code=...)``, ``load_cubin`` for ``RawModule(path=...)``,
``module[name]`` for ``get_function``, ``module.get_global`` for ``get_global``).

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

# ---- CuPy's kernel sources, as its test_raw.py has them ----
TEST_SOURCE1 = r'''
extern "C" __global__
void test_sum(const float* x1, const float* x2, float* y, unsigned int N) {
    int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
        y[tid] = x1[tid] + x2[tid];
}
'''

TEST_COMPILE_SRC = r'''
extern "C" __global__
void test_op(const float* x1, const float* x2, float* y, unsigned int N) {
    int tid = blockDim.x * blockIdx.x + threadIdx.x;
    int j;  // To generate a warning to appear in the log stream
    if (tid < N)
        y[tid] = x1[tid] OP x2[tid];
}
'''

TEST_SOURCE2 = r'''
extern "C"{

__global__ void test_sum(const float* x1, const float* x2, float* y, \
                         unsigned int N)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
    {
        y[tid] = x1[tid] + x2[tid];
    }
}

__global__ void test_multiply(const float* x1, const float* x2, float* y, \
                              unsigned int N)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
    {
        y[tid] = x1[tid] * x2[tid];
    }
}

}
'''

TEST_SOURCE3 = r'''
#ifndef PRECISION
    #define PRECISION 2
#endif

#if PRECISION == 2
    #define TYPE double
#elif PRECISION == 1
    #define TYPE float
#else
    #error precision not supported
#endif

extern "C"{

__global__ void test_sum(const TYPE* x1, const TYPE* x2, TYPE* y, \
                         unsigned int N)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
    {
        y[tid] = x1[tid] + x2[tid];
    }
}

__global__ void test_multiply(const TYPE* x1, const TYPE* x2, TYPE* y, \
                              unsigned int N)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
    {
        y[tid] = x1[tid] * x2[tid];
    }
}

}
'''

TEST_SOURCE4 = r'''
extern "C"{

__global__ void test_kernel_inner(float *arr, int N)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;

    if (tid < N)
        arr[tid] = 1.0;
}

__global__ void test_kernel(float *arr, int N, int inner_blk)
{
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;

    if (tid < N/inner_blk)
        test_kernel_inner<<<1, inner_blk>>>(arr+tid*inner_blk, inner_blk);
}

}
'''

TEST_SOURCE5 = r'''
extern "C" __global__
void test_div(const float* x1, const float* x2, float* y, unsigned int N) {
    int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N)
        y[tid] = x1[tid] / (x2[tid] + 1.0);
}
'''

TEST_CUCOMPLEX = r'''
#include <cuComplex.h>
#define N 100

extern "C"{
/* ------------------- double complex ------------------- */

__global__ void test_add(cuDoubleComplex* arr1, cuDoubleComplex* arr2,
                         cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCadd(arr1[tid], arr2[tid]);
    }
}

__global__ void test_sub(cuDoubleComplex* arr1, cuDoubleComplex* arr2,
                         cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCsub(arr1[tid], arr2[tid]);
    }
}

__global__ void test_mul(cuDoubleComplex* arr1, cuDoubleComplex* arr2,
                         cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCmul(arr1[tid], arr2[tid]);
    }
}

__global__ void test_div(cuDoubleComplex* arr1, cuDoubleComplex* arr2,
                         cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCdiv(arr1[tid], arr2[tid]);
    }
}

__global__ void test_conj(cuDoubleComplex* arr, cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuConj(arr[tid]);
    }
}

__global__ void test_abs(cuDoubleComplex* arr, double* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCabs(arr[tid]);
    }
}

__global__ void test_fma(cuDoubleComplex* A, cuDoubleComplex* B,
                         cuDoubleComplex* C, cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCfma(A[tid], B[tid], C[tid]);
    }
}

__global__ void test_make(cuDoubleComplex* arr) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    cuDoubleComplex out = make_cuDoubleComplex(1.8, 2.9);
    if (tid < N) {
        arr[tid] = make_cuDoubleComplex(cuCreal(out), -3.*cuCimag(out));
    }
}

__global__ void test_downcast(cuDoubleComplex* arr, cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuComplexDoubleToFloat(arr[tid]);
    }
}

__global__ void test_add_scalar(cuDoubleComplex* arr, cuDoubleComplex scalar,
                                cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCadd(arr[tid], scalar);
    }
}

/* ------------------- single complex ------------------- */

__global__ void test_addf(cuComplex* arr1, cuComplex* arr2,
                          cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCaddf(arr1[tid], arr2[tid]);
    }
}

__global__ void test_subf(cuComplex* arr1, cuComplex* arr2,
                          cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCsubf(arr1[tid], arr2[tid]);
    }
}

__global__ void test_mulf(cuComplex* arr1, cuComplex* arr2,
                          cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCmulf(arr1[tid], arr2[tid]);
    }
}

__global__ void test_divf(cuComplex* arr1, cuComplex* arr2,
                          cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCdivf(arr1[tid], arr2[tid]);
    }
}

__global__ void test_conjf(cuComplex* arr, cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuConjf(arr[tid]);
    }
}

__global__ void test_absf(cuFloatComplex* arr, float* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCabsf(arr[tid]);
    }
}

__global__ void test_fmaf(cuFloatComplex* A, cuFloatComplex* B,
                          cuFloatComplex* C, cuFloatComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCfmaf(A[tid], B[tid], C[tid]);
    }
}

__global__ void test_makef(cuComplex* arr) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    cuComplex out = make_cuFloatComplex(1.8, 2.9);
    if (tid < N) {
        arr[tid] = make_cuFloatComplex(cuCrealf(out), -3.*cuCimagf(out));
    }
}

__global__ void test_upcast(cuComplex* arr, cuDoubleComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuComplexFloatToDouble(arr[tid]);
    }
}

__global__ void test_addf_scalar(cuComplex* arr, cuComplex scalar,
                                 cuComplex* out) {
    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
    if (tid < N) {
        out[tid] = cuCadd(arr[tid], scalar);
    }
}

}
'''

TEST_CONST_MEM = r'''
extern "C"{
__constant__ float some_array[100];

__global__ void multiply_by_const(float* x, int N) {
    int id = threadIdx.x + blockIdx.x * blockDim.x;

    if (id < N) {
        x[id] *= some_array[id];
    }
}
}
'''

TEST_CXX_TEMPLATE = r'''
#include <cupy/complex.cuh>

template<typename T>
__global__ void my_sqrt(T* input, int N) {
  unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < N) {
    input[x] *= input[x];
  }
}

__global__ void my_func(double* input, int N) {
  unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < N) {
    input[x] *= input[x];
  }
}
'''

TEST_CAST = r'''
extern "C" __global__ void my_func(void* input, int N) {
  double* arr = (double*)(input);
  unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
  if (x < N) {
    arr[x] = 3.0 * arr[x] - 8.0;
  }
}
'''

TEST_GRID_SYNC = r'''
#include <cooperative_groups.h>

extern "C" __global__
void test_grid_sync(const float* x1, const float* x2, float* y, int n) {
    namespace cg = cooperative_groups;
    cg::grid_group grid = cg::this_grid();
    int size = gridDim.x * blockDim.x;
    int tid = blockDim.x * blockIdx.x + threadIdx.x;
    for (int i = tid; i < n; i += size) {
        y[i] = x1[i];
    }
    cg::sync(grid);
    for (int i = n - 1 - tid; i >= 0; i -= size) {
        y[i] += x2[i];
    }
}
'''

STD_CODE = r'''
#include <type_traits>

template<typename T,
         typename = typename std::enable_if<std::is_integral<T>::value>::type>
__global__ void shift (T* a, int N) {
    unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < N) {
        a[tid] += 100;
    }
}
'''

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
    assert set(cudamagic.build(TEST_SOURCE1, use_cache=False).kernels) == {"test_sum"}
    assert set(cudamagic.build(TEST_SOURCE2, use_cache=False).kernels) == {
        "test_sum", "test_multiply"}
    mod3 = cudamagic.build(TEST_SOURCE3, options=["-DPRECISION=2"], use_cache=False)
    # PRECISION=2 makes TYPE double: the CUBIN's parameter records say 8-byte pointers and
    # the element type shows in nothing else (extern "C"), so the launch test checks it
    assert [p.size for p in mod3.image.kernel("test_sum").params] == [8, 8, 8, 4]


@gpu
def test_basic():
    import cupy

    x1, x2, y = _run_sum(cudamagic.build(TEST_SOURCE1)["test_sum"])
    assert cupy.allclose(y, x1 + x2)


@gpu
def test_module():
    import cupy

    module = cudamagic.build(TEST_SOURCE2)
    x1, x2, y = _run_sum(module["test_sum"])
    assert cupy.allclose(y, x1 + x2)
    x1, x2, y = _run_sum(module["test_multiply"])
    assert cupy.allclose(y, x1 * x2)


@gpu
def test_compiler_flag():
    import cupy

    module = cudamagic.build(TEST_SOURCE3, options=["-DPRECISION=2"])
    x1, x2, y = _run_sum(module["test_sum"], np.float64)
    assert cupy.allclose(y, x1 + x2)
    x1, x2, y = _run_sum(module["test_multiply"], np.float64)
    assert cupy.allclose(y, x1 * x2)


def test_invalid_compiler_flag():
    with pytest.raises(CompileError, match="precision not supported"):
        cudamagic.build(TEST_SOURCE3, options=["-DPRECISION=3"], use_cache=False)


# ---- test_load_cubin, test_load_ptx (nvcc makes the files, as CuPy's test does) ----

def _nvcc(tmp_path, flag: str, arch: str = "sm_90"):
    src = tmp_path / "test_load_cubin.cu"
    src.write_text(TEST_SOURCE5)
    out = tmp_path / f"test_load_cubin.{flag.lstrip('-')}"
    subprocess.run(["nvcc", f"-gencode=arch=compute_{arch[3:]},code=sm_{arch[3:]}", flag,
                    str(src), "-o", str(out)], check=True, capture_output=True)
    return out


@needs_nvcc
@pytest.mark.parametrize("flag", ["-cubin", "-ptx", "-fatbin"])
def test_load_cubin_ptx_and_fatbin_resolve(tmp_path, flag):
    module = cudamagic.load_cubin(_nvcc(tmp_path, flag), arch="sm_90", cache=tmp_path / "c")
    assert set(module.kernels) == {"test_div"}


@gpu
@needs_nvcc
@pytest.mark.parametrize("flag", ["-cubin", "-ptx", "-fatbin"])
def test_load_cubin(tmp_path, flag):
    import cupy

    arch = cudamagic.pipeline.default_arch()
    module = cudamagic.load_cubin(_nvcc(tmp_path, flag, arch), cache=tmp_path / "c")
    x1, x2, y = _run_sum(module["test_div"])
    assert cupy.allclose(y, x1 / (x2 + 1.0))


def test_module_load_failure(tmp_path):
    with pytest.raises(ImageError, match="cannot be read"):
        cudamagic.load_cubin(tmp_path / "this_does_not_exist.cubin")


def test_get_function_failure():
    module = cudamagic.build(TEST_SOURCE2, use_cache=False)
    with pytest.raises(NameResolutionError, match="no kernel named 'no_such_kernel'"):
        module["no_such_kernel"]


# ---- test_dynamical_parallelism, test_dynamical_parallelism_compile_failure ----

def test_dynamical_parallelism_links():
    module = cudamagic.build(TEST_SOURCE4, options=["-dc"], use_cache=False)
    assert set(module.kernels) == {"test_kernel", "test_kernel_inner"}
    assert module.cubin[16] == 2  # an executable CUBIN: linked with the device runtime


def test_dynamical_parallelism_compile_failure():
    with pytest.raises(CompileError):
        cudamagic.build(TEST_SOURCE4, use_cache=False)


@gpu
@pytest.mark.parametrize("options", [["-dc"], ["-rdc=true"], ["-dlto"]])
def test_dynamical_parallelism(options):
    import cupy

    n, inner_chunk = 169, 13
    x = cupy.zeros((n,), dtype=cupy.float32)
    kernel = cudamagic.build(TEST_SOURCE4, options=options)["test_kernel"]
    kernel((1,), (n // inner_chunk,), (x, np.int32(n), np.int32(inner_chunk)))
    assert (x == 1.0).all()


# ---- test_cuFloatComplex, test_cuDoubleComplex ----

CUCOMPLEX_KERNELS = {"test_add", "test_sub", "test_mul", "test_div", "test_conj", "test_abs",
                     "test_fma", "test_make", "test_downcast", "test_add_scalar", "test_addf",
                     "test_subf", "test_mulf", "test_divf", "test_conjf", "test_absf",
                     "test_fmaf", "test_makef", "test_upcast", "test_addf_scalar"}


# CuPy maps cuComplex.h onto its own complex type (translate_cucomplex), whose cuCadd takes
# floats too; the toolkit's cuComplex.h that cudamagic compiles has cuCaddf for them
CUCOMPLEX = TEST_CUCOMPLEX.replace(
    "cuComplex* out) {\n    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;\n"
    "    if (tid < N) {\n        out[tid] = cuCadd(arr[tid], scalar);",
    "cuComplex* out) {\n    unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;\n"
    "    if (tid < N) {\n        out[tid] = cuCaddf(arr[tid], scalar);")


def test_cucomplex_compiles():
    """cuDoubleComplex is double2 (16 bytes), cuComplex float2 (8)."""
    assert CUCOMPLEX != TEST_CUCOMPLEX
    module = cudamagic.build(CUCOMPLEX, use_cache=False)
    assert set(module.kernels) == CUCOMPLEX_KERNELS
    assert [p.size for p in module.image.kernel("test_add_scalar").params] == [8, 16, 8]
    assert [p.size for p in module.image.kernel("test_addf_scalar").params] == [8, 8, 8]


@gpu
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_cucomplex(dtype):
    import cupy

    n, block = 100, 32
    grid = (n + block - 1) // block
    f = "f" if dtype == np.complex64 else ""
    module = cudamagic.build(CUCOMPLEX)
    rnd = lambda: (cupy.random.random((n,)) + 1j * cupy.random.random((n,))).astype(dtype)
    a, b, c = rnd(), rnd(), rnd()
    out = cupy.zeros((n,), dtype=dtype)
    real = cupy.zeros((n,), dtype=np.float32 if f else np.float64)
    other = cupy.zeros((n,), dtype=np.complex128 if f else np.complex64)

    def run(name, *args):
        module[name]((grid,), (block,), args)

    run(f"test_add{f}", a, b, out); assert (out == a + b).all()
    run(f"test_sub{f}", a, b, out); assert (out == a - b).all()
    run(f"test_mul{f}", a, b, out); assert cupy.allclose(out, a * b)
    run(f"test_div{f}", a, b, out); assert (out == a / b).all()
    run(f"test_conj{f}", a, out); assert (out == cupy.conj(a)).all()
    # CuPy compares exactly because its translate_cucomplex turns cuCabs into its own abs; here
    # the kernel calls cuComplex.h's cuCabs(f), whose scaled algorithm differs from cupy.abs's
    # hypot in the last place (seen on the H200): equal to within 2 units in the last place
    eps = np.finfo(real.dtype).eps
    run(f"test_abs{f}", a, real); assert cupy.allclose(real, cupy.abs(a), rtol=2 * eps, atol=0)
    run(f"test_fma{f}", a, b, c, out); assert cupy.allclose(out, a * b + c)
    run(f"test_make{f}", out); assert cupy.allclose(out, 1.8 - 1j * 8.7)
    if f:
        run("test_upcast", a, other); assert (other == a.astype(cupy.complex128)).all()
    else:
        run("test_downcast", a, other); assert (other == a.astype(cupy.complex64)).all()
    scalar = dtype(2 + 3j)
    run(f"test_add{f}_scalar", a, scalar, out); assert (out == a + scalar).all()


# ---- test_const_memory ----

def test_const_memory_is_listed():
    module = cudamagic.build(TEST_CONST_MEM, use_cache=False)
    (var,) = module.globals
    assert (var.name, var.size, var.space, var.dtype, var.shape) == (
        "some_array", 400, "constant", "float32", (100,))


@gpu
def test_const_memory():
    import cupy

    module = cudamagic.build(TEST_CONST_MEM)
    const_arr = cupy.asarray(module.get_global("some_array"))
    assert const_arr.shape == (100,) and const_arr.dtype == cupy.float32
    data = cupy.arange(100, dtype=cupy.float32)
    const_arr[...] = data
    output_arr = cupy.ones(100, dtype=cupy.float32)
    module["multiply_by_const"]((1,), (100,), (output_arr, np.int32(100)))
    assert (data == output_arr).all()


# ---- test_template_specialization, test_template_failure ----

TEMPLATE_NAMES = ["my_sqrt<int>", "my_sqrt<float>", "my_sqrt<complex<double>>", "my_func"]


def test_template_specialization_resolves():
    module = cudamagic.build(TEST_CXX_TEMPLATE, TEMPLATE_NAMES, use_cache=False)
    symbols = {e: module[e].symbol for e in TEMPLATE_NAMES}
    complex_symbol = symbols.pop("my_sqrt<complex<double>>")
    assert symbols == {"my_sqrt<int>": "_Z7my_sqrtIiEvPT_i",
                       "my_sqrt<float>": "_Z7my_sqrtIfEvPT_i", "my_func": "_Z7my_funcPdi"}
    # thrust::complex<double> inside CCCL's versioned namespace (THRUST_300102_SM_900_NS...)
    assert complex_symbol.startswith("_Z7my_sqrtIN6thrust")
    assert complex_symbol.endswith("7complexIdEEEvPT_i")


@gpu
def test_template_specialization():
    import cupy

    module = cudamagic.build(TEST_CXX_TEMPLATE, TEMPLATE_NAMES)
    for name, dtype in zip(TEMPLATE_NAMES, (cupy.int32, cupy.float32, cupy.complex128,
                                             cupy.float64)):
        in_arr = cupy.testing.shaped_random((10,), dtype=dtype)
        out_arr = in_arr ** 2
        module[name]((1,), (10,), (in_arr, np.int32(10)))
        assert cupy.allclose(in_arr, out_arr)


def test_template_failure():
    unnamed = cudamagic.build(TEST_CXX_TEMPLATE, use_cache=False)
    with pytest.raises(NameResolutionError):
        unnamed["my_sqrt<int>"]
    named = cudamagic.build(TEST_CXX_TEMPLATE, ["my_sqrt<int>"], use_cache=False)
    with pytest.raises(NameResolutionError):
        named["my_sqrt<double>"]


# ---- test_raw_pointer ----

def test_raw_pointer_compiles():
    module = cudamagic.build(TEST_CAST, use_cache=False)
    assert [p.size for p in module.image.kernel("my_func").params] == [8, 4]


@gpu
def test_raw_pointer():
    import cupy
    from cupy.cuda import memory

    kernel = cudamagic.build(TEST_CAST)["my_func"]
    a = cupy.ones((100,), dtype=cupy.float64)
    memptr = memory.alloc(100 * a.dtype.itemsize)
    memptr.copy_from(a.data, 100 * a.dtype.itemsize)
    b = cupy.ndarray((100,), cupy.float64, memptr=memptr)
    kernel((1,), (100,), (memptr, np.int32(100)))
    assert (3.0 * a - 8.0 == b).all()


# ---- test_compile_kernel, test_compile_module ----

def test_compile_log_has_the_warning(tmp_path):
    module = cudamagic.build(TEST_COMPILE_SRC, options=["-DOP=+"], cache=tmp_path)
    assert "warning" in module.report.log
    again = cudamagic.build(TEST_COMPILE_SRC, options=["-DOP=+"], cache=tmp_path)
    assert again.hit and "warning" in again.report.log  # the stored log, on a hit too


@gpu
def test_compile_module():
    import cupy

    x1, x2, y = _run_sum(cudamagic.build(TEST_COMPILE_SRC, options=["-DOP=+"])["test_op"])
    assert cupy.allclose(y, x1 + x2)


# ---- TestRawGridSync (CuPy needs enable_cooperative_groups=True; cudamagic reads the CUBIN) ----

def test_grid_sync_is_read_from_the_cubin():
    module = cudamagic.build(TEST_GRID_SYNC, use_cache=False)
    assert module.image.kernel("test_grid_sync").launch.grid_sync is True
    plain = cudamagic.build(TEST_SOURCE1, use_cache=False)
    assert plain.image.kernel("test_sum").launch.grid_sync is False


@gpu
@pytest.mark.parametrize("n", [10, 100, 1000])
@pytest.mark.parametrize("block", [64, 256])
def test_grid_sync(n, block):
    import cupy

    kernel = cudamagic.build(TEST_GRID_SYNC)["test_grid_sync"]
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

    kernel = cudamagic.build(TEST_GRID_SYNC)["test_grid_sync"]
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    y = cupy.zeros(16, dtype="float32")
    with pytest.raises(cudamagic.errors.LaunchError, match=str(sms)):
        kernel((sms * 1000,), (1024,), (y, y, y, np.int32(16)))
    cupy.cuda.Device().synchronize()  # the context is still usable: nothing was launched


# ---- TestRawPicklable ----

def test_module_pickles_without_a_gpu():
    module = cudamagic.build(TEST_SOURCE1, use_cache=False)
    back = pickle.loads(pickle.dumps(module))
    assert back.cubin == module.cubin and set(back.kernels) == {"test_sum"}
    kernel = pickle.loads(pickle.dumps(module["test_sum"]))
    assert kernel.symbol == "test_sum"


@gpu
@pytest.mark.parametrize("what", ["mod", "mod_ker"])
def test_raw_picklable(tmp_path, what):
    module = cudamagic.build(TEST_SOURCE1, use_cache=False)
    obj = module if what == "mod" else module["test_sum"]
    (tmp_path / "raw.pkl").write_bytes(pickle.dumps(obj))
    run_python(f"""
import pickle, numpy as np, cupy as cp
obj = pickle.load(open({str(tmp_path / 'raw.pkl')!r}, 'rb'))
ker = obj["test_sum"] if {what == 'mod'!r} else obj
n = 100
a = cp.random.random(n, dtype=cp.float32); b = cp.random.random(n, dtype=cp.float32)
c = cp.empty_like(a)
ker((1,), (100,), (a, b, c, np.uint32(n)))
assert cp.allclose(a + b, c)
""")


# ---- std_code (the slow jitify test's source): NVRTC has no <type_traits> ----

def test_std_code_says_what_to_include():
    with pytest.raises(CompileError, match="cuda/std/type_traits"):
        cudamagic.build(STD_CODE, ["shift<int>"], use_cache=False)
    fixed = STD_CODE.replace("<type_traits>", "<cuda/std/type_traits>").replace(
        "std::", "cuda::std::")
    module = cudamagic.build(fixed, ["shift<int>"], use_cache=False)
    assert module["shift<int>"].symbol.startswith("_Z5shiftIiv")
