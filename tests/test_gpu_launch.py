"""On a GPU: cooperative launches chosen from the CUBIN, their refusal, thread-block clusters,
and CuPy's MemoryPointer as a pointer argument (issue 19 items 2 and 5).

Marked ``gpu``: skipped with a reason where there is no CUDA device. Clusters need sm_90 or newer
(the H200 is sm_90); the cluster tests skip on older devices.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import ArgumentValueError, LaunchError
from cudamagic.toolchain.device import driver

from .conftest import run_python

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// every block adds its part to partial[block]; after the grid-wide barrier thread 0 of the
// grid reads every block's part: right only if all blocks passed the barrier together
extern "C" __global__ void grid_sum(const int* x, int* partial, int* out, int n) {
  cg::grid_group g = cg::this_grid();
  int s = 0;
  for (long long i = g.thread_rank(); i < n; i += g.size()) s += x[i];
  atomicAdd(&partial[blockIdx.x], s);
  g.sync();
  if (g.thread_rank() == 0) {
    int t = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) t += partial[b];
    *out = t;
  }
}

extern "C" __global__ void mark(int* out, int v) { if (threadIdx.x == 0) out[blockIdx.x] = v; }

// each block writes what the hardware says of its cluster: its rank (cooperative groups and
// %cluster_ctarank) and the cluster's size (dim_blocks and %cluster_nctarank)
__device__ void cluster_info(int* out) {
  if (threadIdx.x != 0) return;
  cg::cluster_group c = cg::this_cluster();
  unsigned rank, count;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(count));
  int* o = out + 4 * blockIdx.x;
  o[0] = c.block_rank(); o[1] = rank; o[2] = c.dim_blocks().x; o[3] = count;
}
extern "C" __global__ void cluster_plain(int* out) { cluster_info(out); }
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_pair(int* out) { cluster_info(out); }
extern "C" __global__ void __cluster_dims__() cluster_any(int* out) { cluster_info(out); }

extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return cudamagic.build(SOURCE, cache=tmp_path_factory.mktemp("gpu_launch"))


def _needs_clusters():
    if not driver.device_limits(driver.current_device()).clusters:
        pytest.skip("this device cannot launch thread-block clusters (sm_90 or newer)")


def _grid_sum(k, blocks: int, threads: int = 256, **kw):
    import cupy as cp

    n = 1 << 20
    x = cp.arange(n, dtype=cp.int32) % 7
    partial = cp.zeros(blocks, cp.int32)
    out = cp.full(1, -1, cp.int32)
    k((blocks,), (threads,), (x, partial, out, n), **kw)
    cp.cuda.Device().synchronize()
    return int(out.get()[0]), int((cp.arange(n, dtype=cp.int32) % 7).sum().get())


def test_a_grid_sync_kernel_is_right_with_no_flag(mod):
    """The CUBIN says grid_sum syncs its grid: launched cooperatively without being asked, over
    as many blocks as the device holds at once."""
    k = mod["grid_sum"]
    assert k.launch_needs.grid_sync
    device = driver.current_device()
    per_sm = driver.max_active_blocks(device, k._handle(device), 256, 0)
    blocks = per_sm * driver.device_limits(device).sm_count
    for grid in (1, driver.device_limits(device).sm_count, blocks):
        got, want = _grid_sum(k, grid)
        assert got == want, grid


def test_a_grid_sync_kernel_is_right_from_the_cache_in_a_fresh_process(tmp_path):
    code = f"""
import json, cupy as cp, cudamagic
SOURCE = {SOURCE!r}
out = []
for _ in range(2):
    mod = cudamagic.build(SOURCE, cache={str(tmp_path)!r})
    n = 1 << 16
    x = cp.arange(n, dtype=cp.int32) % 5
    partial, res = cp.zeros(64, cp.int32), cp.full(1, -1, cp.int32)
    mod["grid_sum"]((64,), (128,), (x, partial, res, n))
    out.append([mod.hit, int(res.get()[0]) == int(x.sum().get())])
print(json.dumps(out))
"""
    assert json.loads(run_python(code).strip().splitlines()[-1]) == [[False, True], [True, True]]
    second = json.loads(run_python(code).strip().splitlines()[-1])  # a restarted kernel
    assert second == [[True, True], [True, True]]


def test_an_oversized_cooperative_grid_is_refused_before_the_launch(mod):
    import cupy as cp

    k = mod["grid_sum"]
    device = driver.current_device()
    limits = driver.device_limits(device)
    per_sm = driver.max_active_blocks(device, k._handle(device), 256, 0)
    most = per_sm * limits.sm_count
    n = 1 << 10
    x, partial = cp.ones(n, cp.int32), cp.zeros(most + 1, cp.int32)
    out = cp.full(1, -1, cp.int32)
    with pytest.raises(LaunchError, match=rf"grid of {most + 1} blocks .* at most {per_sm} such "
                       rf"block.* x {limits.sm_count} SMs = {most}: launch at most {most}"):
        k((most + 1,), (256,), (x, partial, out, n))
    cp.cuda.Device().synchronize()  # nothing was launched, and the context is fine
    assert int(out.get()[0]) == -1 and int(partial.sum().get()) == 0
    assert _grid_sum(k, most)[0] == _grid_sum(k, most)[1]  # the largest grid that fits runs


def test_cooperative_true_for_an_ordinary_kernel(mod):
    import cupy as cp

    out = cp.zeros(8, cp.int32)
    mod["mark"]((8,), (32,), (out, 5), cooperative=True)
    assert out.get().tolist() == [5] * 8


def _cluster_rows(k, grid: int, **kw):
    import cupy as cp

    out = cp.full(4 * grid, -1, cp.int32)
    k((grid,), (64,), (out,), **kw)
    cp.cuda.Device().synchronize()
    return out.get().reshape(grid, 4).tolist()


@pytest.mark.parametrize("name, cluster, size", [
    ("cluster_plain", (2, 1, 1), 2), ("cluster_plain", 4, 4), ("cluster_plain", None, 1),
    ("cluster_pair", None, 2), ("cluster_pair", (2, 1, 1), 2), ("cluster_any", (4, 1, 1), 4),
])
def test_a_cluster_launch_reads_its_cluster_in_the_kernel(mod, name, cluster, size):
    """The kernel reads its rank and its cluster's size back (cooperative groups and the PTX
    registers): the launch's cluster, or the kernel's __cluster_dims__."""
    _needs_clusters()
    kw = {} if cluster is None else {"cluster": cluster}
    rows = _cluster_rows(mod[name], 8, **kw)
    assert rows == [[b % size, b % size, size, size] for b in range(8)]


def test_cluster_shapes_that_do_not_fit_are_refused(mod):
    _needs_clusters()
    with pytest.raises(ArgumentValueError, match="not a whole number of clusters"):
        _cluster_rows(mod["cluster_plain"], 6, cluster=4)
    with pytest.raises(ArgumentValueError, match=r"compiled with __cluster_dims__\(2, 1, 1\)"):
        _cluster_rows(mod["cluster_pair"], 8, cluster=4)
    with pytest.raises(ArgumentValueError, match=r"launch it with cluster="):
        _cluster_rows(mod["cluster_any"], 8)
    assert _cluster_rows(mod["cluster_plain"], 2, cluster=2)[1] == [1, 1, 2, 2]  # still fine


def test_a_memory_pointer_argument(mod):
    """A cupy.cuda.MemoryPointer for a float* (CuPy's RawKernel takes one), with an offset."""
    import cupy as cp

    x = cp.zeros(1024, cp.float32)
    mod["fill"]((4,), (256,), (x.data, np.float32(2.5), 512))
    mod["fill"]((4,), (256,), (x.data + 512 * 4, 7.0, 512))
    got = x.get()
    assert (got[:512] == 2.5).all() and (got[512:] == 7.0).all()


def test_static_and_dynamic_shared_memory_past_48k_together(tmp_path):
    """40 KiB of static ``__shared__`` arrays and 16 KiB of dynamic shared memory in one block:
    the launch raises the kernel's limit (the driver's 48 KiB default counts both)."""
    import cupy as cp

    src = ('extern "C" __global__ void tile(float* out) {\n'
           '  __shared__ float t[10240]; extern __shared__ float d[];\n'
           '  d[threadIdx.x * 16] = threadIdx.x; t[threadIdx.x] = 2 * threadIdx.x;\n'
           '  __syncthreads(); out[threadIdx.x] = t[threadIdx.x] + d[threadIdx.x * 16]; }\n')
    k = cudamagic.build(src, cache=str(tmp_path / "cache"))["tile"]
    out = cp.zeros(256, cp.float32)
    k((1,), (256,), (out,), shared_mem=16384)
    cp.cuda.Device().synchronize()
    assert out[3].item() == 9.0 and out[255].item() == 765.0
