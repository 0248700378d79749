"""Per-launch overhead of an empty kernel: cudamagic vs CuPy RawKernel vs bare cuLaunchKernel.

Run on a GPU machine:  python benchmarks/launch_overhead.py [--launches N]
Each path launches the same empty kernel with three arguments (a device array, a float, an int)
N times in a loop on the same stream; the time is host wall time per launch, after a warm-up,
with a synchronize at the end (the queue never fills: the kernel is empty). Prints a table and
the ratios against CuPy, measured side by side in this one run.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import tempfile
import time

import cupy as cp
import numpy as np
from cuda.bindings import driver as cu

import cudamagic

SRC = r"""
extern "C" __global__ void empty_c(float* x, float a, int n) {}
template <typename T> __global__ void empty_t(T* x, T a, int n) {}
"""


def per_launch(fn, n: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean seconds per launch of ``n`` launches."""
    fn()
    cp.cuda.runtime.deviceSynchronize()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        cp.cuda.runtime.deviceSynchronize()
        times.append((time.perf_counter() - t) / n)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--breakdown", action="store_true", help="time each piece of a launch")
    args = ap.parse_args()
    n = args.launches
    cp.cuda.Device(0).synchronize()  # the context exists before any clock starts
    x = cp.zeros(16, cp.float32)
    mod = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())
    k_t, k_c = mod["empty_t<float>"], mod["empty_c"]
    raw = cp.RawKernel(SRC.split("template")[0], "empty_c")
    a32, n32 = np.float32(1.5), np.int32(16)

    # bare driver: the same CUBIN, arguments packed once, outside the loop
    handle = k_c._handle(0)
    stream = cp.cuda.get_current_stream().ptr
    vals = (ctypes.c_void_p(x.data.ptr), ctypes.c_float(1.5), ctypes.c_int(16))
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in vals])
    addr = ctypes.addressof(ptrs)

    def bare():
        cu.cuLaunchKernel(handle, 1, 1, 1, 1, 1, 1, 0, stream, addr, 0)

    rows = [
        ("bare cuLaunchKernel (pre-packed)", per_launch(bare, n)),
        ("CuPy RawKernel (numpy scalars)", per_launch(lambda: raw((1,), (1,), (x, a32, n32)), n)),
        ("cudamagic extern \"C\" kernel", per_launch(lambda: k_c((1,), (1,), (x, 1.5, 16)), n)),
        ("cudamagic template kernel (typed checks)", per_launch(lambda: k_t((1,), (1,), (x, 1.5, 16)), n)),
    ]
    cupy_t = rows[1][1]
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"machine: {dev}, driver {cudamagic.driver.driver_version()}, CuPy {cp.__version__}, "
          f"Python {platform.python_version()}, {n} launches x 5 repeats (median)")
    print(f"{'path':44} {'us/launch':>10} {'vs CuPy':>8}")
    for name, t in rows:
        print(f"{name:44} {t * 1e6:10.2f} {t / cupy_t:8.2f}")


if __name__ == "__main__" and "--breakdown" not in __import__("sys").argv:
    main()


def breakdown() -> None:
    """Where a cudamagic launch spends its time, piece by piece (run with --breakdown)."""
    import timeit

    from cudamagic import driver

    x = cp.zeros(16, cp.float32)
    mod = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())
    k = mod["empty_t<float>"]
    k((1,), (1,), (x, 1.5, 16))
    address, packers, _ = k._launcher()
    fn = k._functions[0]
    stream = driver.current_stream()
    raw = driver._raw_launch()
    n = 100000
    pieces = {
        "current_device()": lambda: driver.current_device(),
        "current_stream()": lambda: driver.current_stream(),
        "packers (3 args)": lambda: [p(v) for p, v in zip(packers, (x, 1.5, 16))],
        "ctypes cuLaunchKernel": lambda: raw(fn, 1, 1, 1, 1, 1, 1, 0, stream, address, None),
        "driver.launch": lambda: driver.launch(fn, (1, 1, 1), (1, 1, 1), 0, stream, address, 0, "x"),
        "whole call": lambda: k((1,), (1,), (x, 1.5, 16)),
    }
    for name, f in pieces.items():
        t = timeit.timeit(f, number=n) / n
        cp.cuda.runtime.deviceSynchronize()
        print(f"  {name:28} {t * 1e6:7.2f} us")


if __name__ == "__main__" and "--breakdown" in __import__("sys").argv:
    breakdown()
