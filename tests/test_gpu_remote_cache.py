"""On a GPU: kernels served by the team cache run right, and a forged record's CUBIN never
reaches the GPU. Marked ``gpu``: run on the GPU machine with ``python -m pytest -m gpu``
(redis-server on loopback, as tests/test_remote_cache.py; there the one the ``redis-server``
wheel bundles: ``bash scripts/device.sh remote``)."""

from __future__ import annotations

import numpy as np
import pytest

from cudamagic import build
from cudamagic.store import KernelCache
from cudamagic.store.remote import RECORD_MAGIC, open_remote

from .redis_server import start_server

pytestmark = pytest.mark.gpu

SOURCE = r"""
template <typename T> __global__ void axpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
"""
NAMES = ["axpy<float>", "axpy<double>"]
N = 1000


def _run(mod, dtype, name):
    import cupy as cp

    x = cp.arange(N, dtype=dtype)
    y = cp.ones(N, dtype=dtype)
    mod[name](((N + 255) // 256,), (256,), (dtype(2), x, y, np.int32(N)))
    return cp.asnumpy(y)


@pytest.fixture
def two_caches(tmp_path):
    server = start_server(tmp_path / "redis")
    key = tmp_path / "k"
    key.write_text("k" * 64)
    key.chmod(0o600)
    caches = [KernelCache(tmp_path / n, remote=open_remote(server.url, str(key))[0])
              for n in "ab"]
    yield server, caches
    server.stop()


def test_a_remote_hit_launches_the_right_kernels(two_caches):
    _, (a, b) = two_caches
    build(SOURCE, NAMES, cache=a)
    assert a.remote.flush()
    mod = build(SOURCE, NAMES, cache=b)
    assert mod.report.status == "cache hit (remote)"
    want = 2 * np.arange(N) + 1
    assert np.array_equal(_run(mod, np.float32, "axpy<float>"), want.astype(np.float32))
    assert np.array_equal(_run(mod, np.float64, "axpy<double>"), want)


def test_a_forged_cubin_is_never_loaded(two_caches, monkeypatch):
    """A record whose tag is not the team's (zeros): refused, the module served is this
    machine's compile, and its launches give the right answers."""
    server, (a, b) = two_caches
    made = build(SOURCE, NAMES, cache=a)
    assert a.remote.flush()
    names = list(server.client().scan_iter(a.remote.record_name(made.key, "*")))
    assert len(names) == 1, names  # one build of the cell: one state of its headers
    record = server.client().get(names[0])
    server.client().set(names[0], RECORD_MAGIC + b"\0" * 32 + record[len(RECORD_MAGIC) + 32:])
    mod = build(SOURCE, NAMES, cache=b)
    assert mod.report.status == "cache miss" and b.remote.remote_stats().refused == 1
    assert np.array_equal(_run(mod, np.float32, "axpy<float>"),
                          (2 * np.arange(N) + 1).astype(np.float32))
