"""Per-launch host time of an empty kernel in the call shapes people write: cudamagic against
CuPy's RawKernel, side by side in one run, with bare ``cuLaunchKernel`` as the floor.

Run on a GPU machine:  python benchmarks/launch_overhead.py [--rounds N] [--batch B]

Every shape launches an empty kernel ``(float* x, float a, int n)``: a template instance for the
typed shapes, an ``extern "C"`` one for the untyped shape, compiled by cudamagic and by CuPy
(RawModule/RawKernel) from the same source. The shapes (issue 10 item 5):

- ``k((1,), (32,), (x, 2.0, 1))``                       Python numbers
- ``k((1,), (32,), (x, np.float32(2), np.int32(1)))``   NumPy scalars (CuPy's convention)
- the same with a 2-D grid and block ``(1, 1), (32, 1)``
- the same with ``stream=s``, a CuPy stream (CuPy has no stream argument: its calls run inside
  ``with s:``, entered once per batch)
- an ``extern "C"`` kernel with NumPy scalars

The NumPy scalars are made in the call, as written above, for both libraries. Method: every
path is a batch of B launches (B well under the launch queue's depth, so no launch waits for the
GPU), timed on the host; N rounds, each running every path once in a fresh random order, with a
synchronize (untimed) after each batch; the figure is the median over rounds of the batch time
divided by B. Interleaving keeps drift (clocks, other load) from favouring one side.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import cupy as cp
import cupy_backends.cuda.api.driver as cupy_driver
import numpy as np
from cuda.bindings import driver as cu

import cudamagic
from cudamagic.toolchain.device import driver

SRC = r"""
extern "C" __global__ void empty_c(float* x, float a, int n) {}
template <typename T> __global__ void empty_t(T* x, T a, int n) {}
"""
TARGET = 0.9  # cudamagic's host time at or below this fraction of CuPy's, every shape

Batch = Callable[[int], None]


def shapes(x, stream) -> list[tuple[str, Batch, Batch]]:
    """(shape, cudamagic batch, CuPy batch) for every call shape measured.

    One plain loop per shape and library, written out (no shared helper taking the call as an
    argument): an extra Python call per launch would be measured too.
    """
    mod = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())
    k, kc = mod["empty_t<float>"], mod["empty_c"]
    raw = cp.RawModule(code=SRC, name_expressions=["empty_t<float>"]).get_function(
        "empty_t<float>")
    raw_c = cp.RawKernel(SRC, "empty_c")
    f32, i32 = np.float32, np.int32

    def py(n):
        for _ in range(n):
            k((1,), (32,), (x, 2.0, 1))

    def py_cupy(n):
        for _ in range(n):
            raw((1,), (32,), (x, 2.0, 1))

    def np1(n):
        for _ in range(n):
            k((1,), (32,), (x, f32(2), i32(1)))

    def np1_cupy(n):
        for _ in range(n):
            raw((1,), (32,), (x, f32(2), i32(1)))

    def np2(n):
        for _ in range(n):
            k((1, 1), (32, 1), (x, f32(2), i32(1)))

    def np2_cupy(n):
        for _ in range(n):
            raw((1, 1), (32, 1), (x, f32(2), i32(1)))

    def st(n):
        for _ in range(n):
            k((1,), (32,), (x, f32(2), i32(1)), stream=stream)

    def st_cupy(n):
        with stream:
            for _ in range(n):
                raw((1,), (32,), (x, f32(2), i32(1)))

    def ext(n):
        for _ in range(n):
            kc((1,), (32,), (x, f32(2), i32(1)))

    def ext_cupy(n):
        for _ in range(n):
            raw_c((1,), (32,), (x, f32(2), i32(1)))

    return [("(x, 2.0, 1)", py, py_cupy),
            ("(x, np.float32(2), np.int32(1))", np1, np1_cupy),
            ("2-D grid and block, NumPy scalars", np2, np2_cupy),
            ("stream=s, NumPy scalars", st, st_cupy),
            ('extern "C", NumPy scalars', ext, ext_cupy)]


def floors(x, kernel) -> list[tuple[str, Batch]]:
    """Bare ``cuLaunchKernel`` with arguments packed once, outside the loop: what any Python
    launcher costs at least."""
    stream = cp.cuda.get_current_stream().ptr
    kernel((1,), (32,), (x, 1.5, 16))  # loads it on this device
    function = kernel._handles[cp.cuda.runtime.getDevice()]
    vals = (ctypes.c_void_p(x.data.ptr), ctypes.c_float(1.5), ctypes.c_int(16))
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in vals])
    address, typed = ctypes.addressof(ptrs), cupy_driver.launchKernel
    handle = cu.CUkernel(function)

    def bare_typed(n, _keep=(vals, ptrs)):
        for _ in range(n):
            typed(function, 1, 1, 1, 32, 1, 1, 0, stream, address, 0)

    def bare_bindings(n, _keep=(vals, ptrs)):
        for _ in range(n):
            cu.cuLaunchKernel(handle, 1, 1, 1, 32, 1, 1, 0, stream, address, 0)

    return [("bare cuLaunchKernel, CuPy's typed binding", bare_typed),
            ("bare cuLaunchKernel, cuda.bindings", bare_bindings)]


def measure(paths: dict[str, Batch], rounds: int, batch: int) -> dict[str, float]:
    """Median seconds per launch of each path, over ``rounds`` shuffled rounds."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    order = list(paths)
    for fn in paths.values():  # warm up: launchers made, modules loaded
        fn(8)
    cp.cuda.runtime.deviceSynchronize()
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            t = time.perf_counter()
            paths[name](batch)
            times[name].append((time.perf_counter() - t) / batch)
            cp.cuda.runtime.deviceSynchronize()
    return {name: statistics.median(ts) for name, ts in times.items()}


def checks_still_on(x) -> None:
    """The fast path still refuses a wrong dtype (a benchmark of a launcher without its checks
    would be no benchmark)."""
    k = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())["empty_t<float>"]
    k((1,), (32,), (x, np.float32(2), np.int32(1)))
    try:
        k((1,), (32,), (cp.zeros(16, cp.float64), np.float32(2), np.int32(1)))
    except TypeError:
        return
    raise AssertionError("a float64 array reached a float* parameter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    cp.cuda.Device(0).synchronize()  # the context exists before any clock starts
    x = cp.zeros(16, cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    checks_still_on(x)
    table = shapes(x, stream)
    paths: dict[str, Batch] = {}
    for name, ours, theirs in table:
        paths["cudamagic " + name], paths["CuPy " + name] = ours, theirs
    kernel = cudamagic.build(SRC, ["empty_t<float>"], cache=tempfile.mkdtemp())["empty_c"]
    bare = floors(x, kernel)
    paths.update(bare)
    got = measure(paths, args.rounds, args.batch)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"launch overhead: {dev}, driver CUDA {driver.driver_version()}, CuPy {cp.__version__}, "
          f"Python {platform.python_version()}; median of {args.rounds} shuffled rounds of "
          f"{args.batch}-launch batches, host time per launch")
    print(f"{'call shape':40} {'cudamagic us':>13} {'CuPy us':>8} {'ratio':>6}  target <= {TARGET}")
    for name, _, _ in table:
        ours, theirs = got["cudamagic " + name], got["CuPy " + name]
        verdict = "met" if ours <= TARGET * theirs else "MISSED"
        print(f"{name:40} {ours * 1e6:13.2f} {theirs * 1e6:8.2f} {ours / theirs:6.2f}  {verdict}")
    for name, _ in bare:
        print(f"{name:40} {got[name] * 1e6:13.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
