"""On a GPU: launches against NumPy, driver enumeration against the ELF table, cu++filt.

Marked ``gpu``: skipped with a reason where there is no CUDA device (CI, the development
machines). Run on the GPU machine with ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import cudamagic
from cudamagic import driver
from cudamagic.demangle import default_demangler
from cudamagic.image import read_cubin

from .conftest import FIXTURES, fixture_rows, run_python
from .test_magic import CELL as MAGIC_CELL

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include <cupy/complex.cuh>
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= K; } }
template <typename T> __global__ void cexp(complex<T>* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = exp(z[i]); }
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""
EXPRS = ["saxpy<float>", "saxpy<double>", "ns::scale<float, 3>", "cexp<float>", "cexp<double>"]

RUN = r"""
import json, numpy as np, cupy as cp, cudamagic
mod = cudamagic.build(SOURCE, EXPRS, cache=CACHE)
n = 1000
rng = np.random.default_rng(0)
out = {"hit": mod.hit, "how": sorted({k.resolved_by for k in mod.kernels.values()})}
for t in (np.float32, np.float64):
    x, y = rng.random(n).astype(t), rng.random(n).astype(t)
    dx, dy = cp.asarray(x), cp.asarray(y)
    mod["saxpy<%s>" % ("float" if t == np.float32 else "double")]((4,), (256,), (2.5, dx, dy, n))
    out[t.__name__] = bool(np.allclose(cp.asnumpy(dy), 2.5 * x + y, rtol=1e-6))
x = rng.random(n).astype(np.float32); dx = cp.asarray(x)
mod["ns::scale<float, 3>"]((4,), (256,), (dx, n))
out["scale"] = bool(np.array_equal(cp.asnumpy(dx), x * np.float32(3)))
for t in (np.complex64, np.complex128):
    z = (rng.random(n) + 1j * rng.random(n)).astype(t); dz = cp.asarray(z)
    mod["cexp<%s>" % ("float" if t == np.complex64 else "double")]((4,), (256,), (dz, n))
    out[t.__name__] = bool(np.allclose(cp.asnumpy(dz), np.exp(z), rtol=1e-5))
d = cp.zeros(n, cp.float32)
mod["fill"]((4,), (256,), (d, 7.0, n))
out["fill"] = bool((cp.asnumpy(d) == 7).all())
print(json.dumps(out))
"""


def test_kernels_equal_numpy_fresh_process_and_from_cache(tmp_path):
    code = f"SOURCE = {SOURCE!r}\nEXPRS = {EXPRS!r}\nCACHE = {str(tmp_path)!r}\n" + RUN
    first = json.loads(run_python(code).strip().splitlines()[-1])
    second = json.loads(run_python(code).strip().splitlines()[-1])
    for res, hit in ((first, False), (second, True)):
        assert res.pop("hit") is hit
        res.pop("how")
        assert res == {"float32": True, "float64": True, "scale": True, "complex64": True,
                       "complex128": True, "fill": True}


def test_namespace_callables_through_ipython(tmp_path):
    code = r'''
import json, numpy as np, cupy as cp
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
ip.run_cell_magic("cuda", '-n "saxpy<float>" -n "ns::scale<float, 3>"', CELL)
x = cp.arange(10, dtype=cp.float32); y = cp.ones(10, dtype=cp.float32)
ip.user_ns["saxpy_float"]((1,), (32,), (2.0, x, y, 10))
print(json.dumps({"ok": bool((cp.asnumpy(y) == 2 * np.arange(10) + 1).all()),
                  "hit": ip.user_ns["cuda_module"].hit}))
'''
    env = {"CUDAMAGIC_CACHE_DIR": str(tmp_path)}
    for hit in (False, True):
        out = json.loads(run_python(f"CELL = {MAGIC_CELL!r}\n" + code, env).strip().splitlines()[-1])
        assert out == {"ok": True, "hit": hit}


def test_driver_enumeration_equals_elf(tmp_path):
    for cubin in ((FIXTURES / "fixture.cubin").read_bytes(),
                  cudamagic.build(SOURCE, EXPRS, cache=tmp_path).cubin):
        lib = driver.Library.load(cubin)
        assert sorted(lib.kernel_names()) == sorted(read_cubin(cubin).symbols)
    mod = cudamagic.build(SOURCE, EXPRS, cache=tmp_path)
    assert mod.report.enumerated_by == "driver"


def test_driver_parameter_info_equals_elf_records():
    cubin = (FIXTURES / "fixture.cubin").read_bytes()
    driver.ensure_context(0)
    lib = driver.Library.load(cubin)
    for k in read_cubin(cubin).kernels:
        got = driver.param_info(lib.kernel(k.symbol), len(k.params))
        assert got == [(p.offset, p.size) for p in k.params], k.symbol


def test_cufilt_is_used_and_gives_the_recorded_outputs():
    d = default_demangler()
    assert d.name == "cu++filt"
    rows = fixture_rows()
    assert d.demangle([r.symbol for r in rows]) == [r.cufilt for r in rows]
