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
