"""On a GPU: what the pipeline pushes runs right (template instances of a foreign CUBIN found
without -n, a kernel named as a Python keyword, a module shipped twice, a build kept through
Ctrl-C). Marked ``gpu``: run on the GPU machine with ``python -m pytest -m gpu``."""

from __future__ import annotations

import pickle
import signal

import numpy as np
import pytest

import cudamagic
from cudamagic.pipeline.steps import build_module, options_from_args

pytestmark = pytest.mark.gpu

SOURCE = r"""
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= K; } }
template <typename T> __global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void lambda(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""
EXPRS = ["ns::scale<float, 3>", "saxpy<double>"]
N = 1000


def _check(mod) -> None:
    """Each kernel of SOURCE, called by its Python name's kernel, gives NumPy's answer."""
    import cupy as cp

    rng = np.random.default_rng(0)
    by_name = {k.python_name: k for k in mod.kernels.values()}
    x = rng.random(N).astype(np.float32)
    dx = cp.asarray(x)
    by_name["ns_scale_float_3"]((4,), (256,), (dx, N))
    assert np.array_equal(cp.asnumpy(dx), x * np.float32(3))
    a, b = rng.random(N), rng.random(N)
    da, db = cp.asarray(a), cp.asarray(b)
    by_name["saxpy_double"]((4,), (256,), (2.5, da, db, N))
    assert np.allclose(cp.asnumpy(db), 2.5 * a + b, rtol=1e-12)
    d = cp.zeros(N, cp.float32)
    # extern "C": a foreign CUBIN records only slot sizes, so the scalars say their types
    by_name["lambda_"]((4,), (256,), (d, np.float32(7.0), np.int32(N)))
    assert (cp.asnumpy(d) == 7).all()


def test_a_foreign_cubin_without_names_runs_its_template_instances(tmp_path):
    built = cudamagic.build(SOURCE, EXPRS, cache=tmp_path / "cache")
    loaded = cudamagic.load_cubin(built.cubin)  # no -n: found by demangling
    assert {k.python_name for k in loaded.kernels.values()} == {
        "ns_scale_float_3", "saxpy_double", "lambda_"}
    _check(loaded)


def test_a_module_shipped_twice_is_one_module_that_runs(tmp_path):
    mod = cudamagic.build(SOURCE, EXPRS, cache=tmp_path / "cache")
    blob = pickle.dumps(mod)
    first, second = pickle.loads(blob), pickle.loads(blob)
    assert first is second
    _check(first)


def test_a_build_kept_through_ctrl_c_is_served_and_runs(tmp_path):
    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    def interrupted(*args, **kw):
        result = compile_cubin(*args, **kw)
        signal.raise_signal(signal.SIGINT)
        return result

    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        build_module(SOURCE, options_from_args([], EXPRS), cache=cudamagic.KernelCache(cache),
                     compiler=interrupted)
    again = cudamagic.build(SOURCE, EXPRS, cache=cache)
    assert again.hit
    _check(again)
