"""On a GPU: timing against cupyx.profiler.benchmark, a stable variant order, occupancy against
the driver for every fixture kernel and block size.

Marked ``gpu``: skipped with a reason where there is no CUDA device. Run on the GPU machine with
``python -m pytest -m gpu tests/test_gpu_bench.py``.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import cudamagic
from cudamagic.launch.bench import Settings, Variant, compare
from cudamagic.toolchain.device import occupancy as occ

from .conftest import FIXTURES, REPO
from .test_occupancy import check_recording

pytestmark = pytest.mark.gpu

SOURCE = r"""
template <typename T> __global__ void copy(const T* __restrict__ x, T* __restrict__ y, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i]; }
template <int PASSES> __global__ void work(const float* __restrict__ x, float* y, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int p = 0; p < PASSES; ++p) v = v * 0.999f + 0.5f;
  y[i] = v; }
"""
NAMES = ["copy<float>", "work<1>", "work<2048>", "work<8192>"]


@pytest.fixture(scope="module")
def mod():
    return cudamagic.build(SOURCE, NAMES, options=["-std=c++17"], use_cache=False)


def test_timing_is_within_ten_percent_of_cupyx_benchmark(mod):
    """A memory-bound copy (1 GiB each way: the launch latency cupyx's events hold is a small
    part of it), the same launches timed by both, in one run."""
    import cupy as cp
    from cupyx.profiler import benchmark

    n = 256 << 20
    x, y = cp.arange(n, dtype=cp.float32), cp.empty(n, cp.float32)
    k, grid, block = mod["copy<float>"], ((n + 255) // 256,), (256,)
    args = (x, y, n)

    def theirs() -> float:
        r = benchmark(k, (grid, block, args), n_warmup=10, n_repeat=100)
        return float(np.median(r.gpu_times[0])) * 1e3

    before = theirs()
    ours = k.bench(grid, block, args, repeat=100, warmup=10, bytes=2 * 4 * n)
    after = theirs()
    t = ours.timings[0]
    reference = (before + after) / 2
    assert abs(t.median / reference - 1) < 0.10, (t.median, before, after)
    assert 0 < t.gbps and (t.peak_gbps is None or t.gbps < 1.1 * t.peak_gbps)
    assert bool(cp.all(y == x))


def test_variant_order_is_stable_across_three_runs(mod):
    import cupy as cp

    n = 16 << 20
    x, y = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    grid = ((n + 255) // 256,)
    variants = [Variant(label=name, kernel=mod[name], grid=grid, block=(256,), args=(x, y, n))
                for name in ("work<8192>", "work<1>", "work<2048>")]
    orders = []
    for _ in range(3):
        result = compare(variants, settings=Settings(warmup=3, repeat=20))
        orders.append([t.label for t in result.ranked()])
    assert orders == [["work<1>", "work<2048>", "work<8192>"]] * 3
    assert result["work<8192>"].ratio == 1.0 and result["work<1>"].ratio < 1


def test_a_variant_with_another_output_is_marked(mod):
    import cupy as cp

    n = 1 << 20
    x, y = cp.ones(n, cp.float32), cp.zeros(n, cp.float32)
    grid = ((n + 255) // 256,)
    variants = [Variant(label=name, kernel=mod[name], grid=grid, block=(256,), args=(x, y, n),
                        output=y) for name in ("copy<float>", "work<1>")]
    result = compare(variants, settings=Settings(warmup=1, repeat=5))
    assert [t.matches for t in result.timings] == [True, False]
    assert result.ranked()[-1].label == "work<1>"


def test_the_l2_flush_makes_an_l2_resident_copy_slower(mod):
    import cupy as cp

    n = 2 << 20  # 8 MiB each way: both fit in L2
    x, y = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    k, grid = mod["copy<float>"], ((n + 255) // 256,)
    hot = k.bench(grid, (256,), (x, y, n), repeat=50).timings[0]
    cold = k.bench(grid, (256,), (x, y, n), repeat=50, flush_l2=True).timings[0]
    assert cold.median > hot.median, (cold.median, hot.median)


def test_occupancy_table_is_the_drivers_and_the_arithmetic_agrees(mod):
    fixture = cudamagic.load_cubin(FIXTURES / "fixture.cubin")
    kernels = list(fixture.kernels.values()) + [mod[name] for name in NAMES]
    for k in kernels:
        t = k.occupancy(dynamic_shared=(0, 4096, 64 * 1024))
        assert t.source == "driver"
        wrong = [(r.block_size, r.dynamic_shared_bytes, r.active_blocks, r.computed_blocks)
                 for r in t.rows if r.active_blocks != r.computed_blocks]
        assert not wrong, (k.name_expression, wrong[:5])
        for dyn in t.dynamic_sizes:
            rows = [r for r in t.rows if r.dynamic_shared_bytes == dyn]
            assert t.best[dyn] == occ.best_block_size(rows), (k.name_expression, dyn)


def test_every_recorded_kind_of_kernel_agrees_with_the_driver_now(tmp_path):
    """The record script's run, checked at once: every fixture kernel, the heavy kernels, block
    sizes 32..1024, dynamic sizes and carveouts."""
    import json

    spec = importlib.util.spec_from_file_location("record_occupancy",
                                                  REPO / "scripts" / "record_occupancy.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "occupancy.json"
    assert script.main([str(out)]) == 0
    assert check_recording(json.loads(out.read_text())) > 10000


def test_a_kernels_timing_runs_behind_the_hold_kernel_and_prints_as_its_table(mod):
    """Rounds after the warm-up start behind the hold kernel (NVRTC-compiled and loaded by the
    driver, launched with its nanoseconds packed by hand); the result a kernel gives prints as
    the table and shows as the plot."""
    import cupy as cp

    from cudamagic.launch import bench as timing

    n = 1 << 20
    x, y = cp.ones(n, cp.float32), cp.empty(n, cp.float32)
    device = timing.CupyDevice()
    stream = device.stream(None)
    device.prepare()
    start, end = device.event(), device.event()
    device.record(start, stream)
    device.hold(stream, 0.01)
    device.record(end, stream)
    device.synchronize(stream)
    assert device.elapsed_ms(start, end) >= 9.0  # it held the stream ~10 ms
    result = mod["copy<float>"].bench(((n + 255) // 256,), (256,), (x, y, n), repeat=20,
                                      warmup=3)
    assert str(result).splitlines()[0].startswith(f"{device.name}: 3 warm-up, 20 timed")
    assert "<svg" in result._repr_html_()
