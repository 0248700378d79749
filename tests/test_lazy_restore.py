"""A hit reads each kernel's records on first use: the same answer for every thread, a fork in
the middle of a first read leaves the child working, and what is read lazily is what an eager
read gives."""

from __future__ import annotations

import os
import threading
import time
from unittest import mock

import pytest

from cudamagic.launch import kernel as kernel_module
from cudamagic.pipeline import build_module, options_from_args
from cudamagic.toolchain.image import read_cubin

from .test_fork_locks import _in_child

SOURCE = r"""
template <int N> __global__ void t(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] += N; }
extern "C" __global__ void plain(double* y, char c, short s) { y[0] = c + s; }
__constant__ float scale[4];
__device__ int counter;
"""
EXPRS = [f"t<{i}>" for i in range(6)]


@pytest.fixture
def hit(cache, compiler):
    """A module served from the cache (compiled once first)."""
    opts = options_from_args([], EXPRS)
    build_module(SOURCE, opts, cache=cache, compiler=compiler)
    mod = build_module(SOURCE, opts, cache=cache, compiler=compiler)
    assert mod.hit
    return mod


def _slow(real, delay: float = 0.02):
    """``real`` taking ``delay`` seconds: threads that start together all compute at once."""
    def slow(*args, **kwargs):
        time.sleep(delay)
        return real(*args, **kwargs)
    return slow


def test_threads_touching_one_lazy_kernel_get_one_answer(hit):
    label = EXPRS[3]
    barrier = threading.Barrier(8)
    seen: list[tuple] = []

    def touch() -> None:
        barrier.wait()
        k = hit[label]
        seen.append((k, k._image, k.params, k._image.params, k.signature,
                     hit.image.kernel(k.symbol)))

    with mock.patch.object(kernel_module, "param_specs", _slow(kernel_module.param_specs)):
        threads = [threading.Thread(target=touch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(seen) == 8
    first = seen[0]
    for other in seen[1:]:
        assert all(a is b for a, b in zip(first, other)), "two threads got two answers"
    assert first[1] is first[5]  # the kernel's records are its image's, not a copy


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_a_threads_first_read_leaves_the_child_working(hit):
    """A thread is inside a kernel's first parameter read when the process forks: the child
    reads another kernel's records (and the one being read) without waiting on the parent's
    thread."""
    entered, release = threading.Event(), threading.Event()
    real = kernel_module.param_specs

    def held(*args, **kwargs):
        if not entered.is_set():  # the reader's call; the child's goes through
            entered.set()
            release.wait(30)
        return real(*args, **kwargs)

    a, b = hit[EXPRS[0]], hit[EXPRS[1]]
    with mock.patch.object(kernel_module, "param_specs", held):
        reader = threading.Thread(target=lambda: a.params)
        reader.start()
        assert entered.wait(30)
        try:
            outcome = _in_child(lambda: (b.params, b.signature, b._image.resources,
                                         b.launch_needs, hit.image.globals))
        finally:
            release.set()
            reader.join()
    assert outcome == "ok"


def test_what_is_read_lazily_is_what_the_cubin_holds(hit):
    """Every kernel's records and the module's variables, read on first use from the restored
    module, equal those of a fresh reading of the same CUBIN's every kernel at once."""
    fresh = read_cubin(hit.cubin)
    eager = {k.symbol: (k.params, k.resources, k.launch) for k in fresh.kernels}
    assert set(fresh.symbols) == {k.symbol for k in hit.kernels.values()}
    for k in hit.kernels.values():
        assert (k._image.params, k.resources, k.launch_needs) == eager[k.symbol], k.symbol
    assert [(g.name, g.size, g.space) for g in hit.image.globals] == \
        [(g.name, g.size, g.space) for g in fresh.globals]
    assert {g.name for g in hit.image.globals} >= {"scale", "counter"}
    assert [p.size for p in hit["plain"].params] == [8, 1, 2]


@pytest.mark.gpu
def test_load_takes_the_module_into_the_context_and_each_kernel_at_its_first_call(tmp_path):
    """load() is two driver calls whatever the kernel count (library, then its module in this
    context); a kernel's handle is looked up by its first call, which launches it right."""
    import cupy as cp
    import numpy as np

    from cudamagic import build

    exprs = [f"t<{i}>" for i in range(50)]
    build(SOURCE, exprs, cache=tmp_path)
    mod = build(SOURCE, exprs, cache=tmp_path)
    assert mod.hit
    assert mod.load() is mod
    assert mod._binary._lib is not None and mod._binary._lib.module() != 0
    assert all(not k._handles for k in mod.kernels.values())  # none looked up yet
    x = cp.zeros(32, dtype=cp.float32)
    mod["t<7>"]((1,), (32,), (x, 32))
    cp.cuda.Device().synchronize()
    assert np.allclose(cp.asnumpy(x), 7.0)
    assert [e for e, k in mod.kernels.items() if k._handles] == ["t<7>"]
