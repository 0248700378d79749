"""On a GPU: linked builds, PTX and fatbins from nvcc, and variables, launched and checked.

Marked ``gpu`` (skipped without a device). The fixtures are nvcc's own outputs
(tests/fixtures/README.md), so the GPU machine needs no nvcc.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import cudamagic

from .conftest import FIXTURES, run_python
from .test_link import DYNAMIC

pytestmark = pytest.mark.gpu

CHILD = r"""
import json, sys, numpy as np, cupy as cp, cudamagic
from tests.test_link import DYNAMIC
m = cudamagic.build(DYNAMIC, ["tparent<float>"], options=sys.argv[1:] or ["-rdc=true"],
                    cache=CACHE)
x = cp.zeros(32, dtype=cp.int32)
m["parent"]((1,), (32,), (x,))
y = cp.zeros(32, dtype=cp.float32)
m["tparent<float>"]((1,), (32,), (y,))
cp.cuda.Device().synchronize()
print(json.dumps({"hit": m.hit, "child": cp.asnumpy(x).tolist(), "tchild": cp.asnumpy(y).tolist()}))
"""


@pytest.mark.parametrize("option", ["-rdc=true", "-dlto"])
def test_dynamic_parallelism_right_and_from_the_cache_in_a_fresh_process(tmp_path, option):
    code = CHILD.replace("CACHE", repr(str(tmp_path))).replace(
        "options=sys.argv[1:] or", f"options=[{option!r}] or")
    first = json.loads(run_python(code).splitlines()[-1])
    again = json.loads(run_python(code).splitlines()[-1])
    for out in (first, again):
        assert out["child"] == [2 * i for i in range(32)]
        assert out["tchild"] == [1.0] * 32
    assert (first["hit"], again["hit"]) == (False, True)


@pytest.mark.parametrize("name", ["nvcc_kernels.fatbin", "nvcc_kernels_compressed.fatbin",
                                  "nvcc_kernels.ptx"])
def test_ptx_and_fatbins_from_nvcc_launch_right(tmp_path, name):
    import cupy

    module = cudamagic.load_cubin(FIXTURES / name, cache=tmp_path)
    n = 1000
    x = cupy.arange(n, dtype=cupy.float32)
    y = cupy.ones(n, dtype=cupy.float32)
    module["axpy<float>"](((n + 127) // 128,), (128,), (np.float32(2.0), x, y, np.int32(n)))
    assert cupy.allclose(y, 2 * cupy.arange(n, dtype=cupy.float32) + 1)
    z = cupy.zeros(64, dtype=cupy.int32)
    module["fill"]((1,), (64,), (z, np.int32(7)))
    assert (z == 7).all()
    module["forward"]((1,), (64,), (x,))
    assert cupy.allclose(x[:64], 2 * cupy.arange(64, dtype=cupy.float32))


def test_get_global_write_then_kernel_reads_and_kernel_write_then_host_reads():
    import cupy

    source = r"""
    __constant__ float scale[4];
    __device__ int counter;
    namespace ns { __device__ double offset; }
    extern "C" __global__ void apply(float* x) {
      x[threadIdx.x] = x[threadIdx.x] * scale[threadIdx.x % 4] + float(ns::offset);
      atomicAdd(&counter, 1); }
    """
    module = cudamagic.build(source, use_cache=False)
    scale = cupy.asarray(module.get_global("scale"))
    scale[...] = cupy.array([1, 2, 3, 4], dtype=cupy.float32)
    cupy.asarray(module.get_global("ns::offset"))[...] = 0.5
    counter = cupy.asarray(module.get_global("counter"))
    counter[...] = 0
    x = cupy.ones(8, dtype=cupy.float32)
    module["apply"]((1,), (8,), (x,))
    assert x.tolist() == [1.5, 2.5, 3.5, 4.5] * 2
    assert int(counter) == 8
    raw = cupy.asarray(module.get_global("counter", dtype=np.uint8))
    assert raw.shape == (4,) and raw.tolist() == [8, 0, 0, 0]
