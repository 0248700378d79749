"""Per-launch overhead of an empty kernel: cudamagic vs CuPy RawKernel vs bare cuLaunchKernel.

Run on a GPU machine:  python benchmarks/launch_overhead.py [--batches N] [--batch B]

Every path launches the same empty kernel (same CUBIN for cudamagic and the bare driver calls)
with three arguments: a device array, a float, an int; the bare calls get them packed once,
outside the loop. Two numbers per path:

- host us/launch: the host time of a batch of B launches (B well under the launch queue's depth,
  so no launch waits for the GPU), divided by B; median over N batches, with a synchronize
  (untimed) between batches. This is the per-launch overhead a Python caller pays.
- queue-full us/launch: 20 000 launches back to back, then a synchronize: with the queue full
  this is bounded by how fast the GPU retires empty kernels, and equal for fast enough callers.

Ratios are against CuPy's RawKernel, measured side by side in this one run.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import sys
import tempfile
import time

import cupy as cp
import cupy_backends.cuda.api.driver as cupy_driver
import numpy as np
from cuda.bindings import driver as cu

import cudamagic
from cudamagic import driver

SRC = r"""
extern "C" __global__ void empty_c(float* x, float a, int n) {}
template <typename T> __global__ void empty_t(T* x, T a, int n) {}
"""


def host_per_launch(fn, batches: int, batch: int) -> float:
    """Median host seconds per launch over ``batches`` batches of ``batch`` launches."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t) / batch)
        cp.cuda.runtime.deviceSynchronize()
    return statistics.median(times)


def queue_full_per_launch(fn, n: int = 20000) -> float:
    """Seconds per launch of ``n`` launches back to back, synchronized at the end."""
    cp.cuda.runtime.deviceSynchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    return (time.perf_counter() - t) / n


def paths():
    """(name, zero-argument launch function) for every path measured."""
    x = cp.zeros(16, cp.float32)
    mod = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())
    k_t, k_c = mod["empty_t<float>"], mod["empty_c"]
    raw = cp.RawKernel(SRC.split("template")[0], "empty_c")
    a32, n32 = np.float32(1.5), np.int32(16)
    k_c((1,), (1,), (x, 1.5, 16))  # loads the module on this device

    # the bare driver: the same CUBIN, arguments packed once, outside the loop
    function = k_c._functions[0]
    stream = cp.cuda.get_current_stream().ptr
    vals = (ctypes.c_void_p(x.data.ptr), ctypes.c_float(1.5), ctypes.c_int(16))
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in vals])
    address = ctypes.addressof(ptrs)
    kernel = cu.CUkernel(k_c._handles[0])
    typed_launch = cupy_driver.launchKernel
    keep = (vals, ptrs)  # the packed arguments must outlive this function

    def bare_typed(_keep=keep):
        typed_launch(function, 1, 1, 1, 1, 1, 1, 0, stream, address, 0)

    def bare_bindings(_keep=keep):
        cu.cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, address, 0)

    return [
        ("bare cuLaunchKernel, CuPy's typed binding", bare_typed),
        ("bare cuLaunchKernel, cuda.bindings", bare_bindings),
        ("CuPy RawKernel (NumPy scalars)", lambda: raw((1,), (1,), (x, a32, n32))),
        ('cudamagic, extern "C" kernel', lambda: k_c((1,), (1,), (x, 1.5, 16))),
        ("cudamagic, template kernel (typed checks)", lambda: k_t((1,), (1,), (x, 1.5, 16))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    cp.cuda.Device(0).synchronize()  # the context exists before any clock starts
    rows = [(name, host_per_launch(fn, args.batches, args.batch), queue_full_per_launch(fn))
            for name, fn in paths()]
    cupy_host, cupy_full = next((h, f) for n, h, f in rows if n.startswith("CuPy"))
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"launch overhead: {dev}, driver CUDA {driver.driver_version()}, CuPy {cp.__version__}, "
          f"Python {platform.python_version()}; host: median of {args.batches} batches of "
          f"{args.batch}; queue-full: 20000 launches")
    print(f"{'path':50} {'host us':>8} {'vs CuPy':>8} {'full us':>8} {'vs CuPy':>8}")
    for name, h, f in rows:
        print(f"{name:50} {h * 1e6:8.2f} {h / cupy_host:8.2f} {f * 1e6:8.2f} {f / cupy_full:8.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
