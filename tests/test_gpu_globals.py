"""Variables typed by the compiler, written through get_global and read back by a kernel on the
device (issue 27 A1, issue 29 items 5 and 6): the view has the compiler's dtype and shape, so a
write lands element by element where the kernel reads it, for each class the regular expression
over the cell got wrong (tests/test_globals.py checks the types without a GPU)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cudamagic

pytestmark = pytest.mark.gpu

SOURCE = r"""
// __constant__ double w[4];
__constant__ float w[8];
namespace a { __device__ float s[2]; }
namespace b { __device__ int s[4]; }
namespace { namespace c { __device__ int q[3]; } }
#define N 5
typedef unsigned short u16;
__device__ u16 t[N];
__constant__ int init[] = {4, 5};
namespace z { template <class T> __device__ T tv[2]; }
extern "C" __global__ void read(float* out) {
  int i = threadIdx.x;
  if (i < 8) out[i] = w[i];
  if (i < 2) out[8 + i] = a::s[i];
  if (i < 4) out[10 + i] = (float)b::s[i];
  if (i < 3) out[14 + i] = (float)c::q[i];
  if (i < N) out[17 + i] = (float)t[i];
  if (i < 2) out[22 + i] = (float)init[i];
  if (i < 2) out[24 + i] = z::tv<float>[i];
}
"""


def _read(module):
    import cupy

    out = cupy.zeros(26, dtype=cupy.float32)
    module["read"]((1,), (32,), (out,))
    return out.get()


def _write(module) -> None:
    import cupy

    values = {"w": np.arange(1, 9), "a::s": [9, 10], "b::s": [11, 12, 13, 14],
              "c::q": [15, 16, 17], "t": [18, 19, 20, 21, 22], "&z::tv<float>": [23, 24]}
    for name, vals in values.items():
        view = cupy.asarray(module.get_global(name))
        view[...] = cupy.asarray(np.asarray(vals, dtype=view.dtype))


WANT = list(range(1, 23)) + [4, 5, 23, 24]


def test_each_variable_written_through_its_typed_view_is_what_the_kernel_reads():
    module = cudamagic.build(SOURCE, ["&z::tv<float>"], use_cache=False)
    shapes = {v.cxx_name: (v.dtype, v.shape) for v in module.globals}
    assert shapes["w"] == ("float32", (8,)) and shapes["b::s"] == ("int32", (4,))
    _write(module)
    assert _read(module).tolist() == WANT


def test_a_hit_and_a_module_that_travelled_write_as_typed(tmp_path):
    cudamagic.build(SOURCE, ["&z::tv<float>"], cache=tmp_path)
    hit = cudamagic.build(SOURCE, ["&z::tv<float>"], cache=tmp_path)
    assert hit.hit
    arrived = pickle.loads(pickle.dumps(hit))  # as a Dask worker gets it
    for module in (hit, arrived):
        _write(module)
        assert _read(module).tolist() == WANT


def test_an_extern_c_kernel_takes_its_own_types_beside_a_cpp_kernel_of_its_name():
    """a::k(int, int*) is extern "C"; the C++ k(float, float*) is another kernel: the Python int
    3 reaches a::k as the int 3 (not the float 3.0f's bits)."""
    import cupy

    source = ('namespace a { extern "C" __global__ void k(int x, int* y) { y[0] = x * 2; } }\n'
              "__global__ void k(float x, float* y) { y[0] = x; }\n")
    module = cudamagic.build(source, ["a::k", "(void(*)(float, float*))k"], use_cache=False)
    kernel = module["a::k"]
    assert kernel.symbol == "k" and [p.ctype for p in kernel.params] == ["int", "int*"]
    y = cupy.zeros(1, dtype=cupy.int32)
    kernel((1,), (1,), (3, y))
    assert int(y[0]) == 6
