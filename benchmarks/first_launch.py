"""Where a kernel's first launch in a process goes (issue 38 item 3), against CuPy's first call.

Each child is a fresh process that imports NumPy (and CuPy, where there is one) first, as a
notebook's launch cell has them, serves a module from the cache (``build()``, then ``load()`` on
a GPU) and times the first call of one of its kernels in parts, each from cudamagic's own code:

- ``imports``: the launch modules a first call imports (``launch.launcher`` with ``encode``,
  ``params``, ``extended``): a hit no longer imports them;
- ``param table``: ``kernel.params``, the parameter table read off the CUBIN and the signature;
- ``launcher``: the launch function generated for the kernel (``generate_launcher``);
- ``call`` (GPU only): the first call itself once the above are made: the kernel's handle in
  the device's context (``cuLibraryGetKernel``), packing and ``cuLaunchKernel``;
- ``whole`` (GPU only): the first call of another kernel of the module, all parts in one, and
  the same kernel's second call; CuPy's ``RawModule.get_function`` and first call of the same
  source in the same process (its module loaded first, as ``load()`` loads cudamagic's).

Without a GPU the driver answers nothing: the CPU parts (imports, parameter table, launcher) are
timed with a stand-in current-device hook, and nothing is launched.

GPU machine:   python3 benchmarks/first_launch.py          (scripts/device.sh first_launch)
Here:          .venv/bin/python benchmarks/first_launch.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from common import compile_bytecode, fresh, gpu_available, machine

SOURCE = r"""
template <int N> __global__ void k(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += N; }
"""
NAMES = [f"k<{i}>" for i in range(10)]

CHILD = r"""
import json, sys, time
import numpy as np
try:
    import cupy as cp
except ImportError:
    cp = None
import cudamagic
from cudamagic.toolchain.device import driver
spec = json.loads(sys.argv[1])
gpu = spec["gpu"]
mod = cudamagic.build(spec["source"], spec["names"])
out = {"hit": mod.hit}
if gpu:
    mod.load()
    x = cp.zeros(1024, dtype=cp.float32)
    cp.cuda.Device().synchronize()
kernel = mod["k<0>"]
t0 = time.perf_counter()
from cudamagic.launch import launcher
t1 = time.perf_counter()
params = kernel.params
t2 = time.perf_counter()
if not gpu:  # no device to ask: the hook a launch reads the current device through
    driver.device_getter = lambda: (lambda: 0)
args = (x, 1024) if gpu else (np.zeros(1, np.float32).ctypes.data, 1024)
made = kernel._make_launcher(args, (1, 1))
t3 = time.perf_counter()
out.update({"imports": t1 - t0, "param table": t2 - t1, "launcher": t3 - t2})
if gpu:
    kernel((4,), (256,), args)
    cp.cuda.Device().synchronize()
    t4 = time.perf_counter()
    out["call"] = t4 - t3
    other = mod["k<1>"]
    t5 = time.perf_counter()
    other((4,), (256,), (x, 1024))
    t6 = time.perf_counter()
    other((4,), (256,), (x, 1024))
    t7 = time.perf_counter()
    cp.cuda.Device().synchronize()
    out.update({"whole": t6 - t5, "second": t7 - t6})
    raw = cp.RawModule(code=spec["source"], name_expressions=spec["names"])
    raw.get_function("k<0>")  # loads the module, as load() does cudamagic's
    t8 = time.perf_counter()
    fn = raw.get_function("k<1>")
    fn((4,), (256,), (x, np.int32(1024)))
    t9 = time.perf_counter()
    fn((4,), (256,), (x, np.int32(1024)))
    t10 = time.perf_counter()
    cp.cuda.Device().synchronize()
    out.update({"cupy whole": t9 - t8, "cupy second": t10 - t9})
print(json.dumps(out))
"""

PARTS = ("imports", "param table", "launcher", "call", "whole", "second", "cupy whole",
         "cupy second")


def run(repeats: int = 7, dry_run: bool = False) -> dict:
    """Medians of each part over ``repeats`` fresh processes (a first, untimed one fills the
    cache)."""
    gpu = gpu_available() and not dry_run
    env = {"CUDAMAGIC_CACHE_DIR": os.path.join(tempfile.mkdtemp(prefix="cudamagic-fl-"), "c")}
    compile_bytecode()
    spec = json.dumps({"source": SOURCE, "names": NAMES, "gpu": gpu})
    fresh(CHILD, spec, env=env)  # untimed: fills the cache
    runs = [fresh(CHILD, spec, env=env) for _ in range(repeats)]
    assert all(r["hit"] for r in runs), "a timed child was not served from the cache"
    med = {k: statistics.median(r[k] for r in runs) for k in PARTS if k in runs[0]}
    return {"gpu": gpu, "repeats": repeats, "median": med}


def table(res: dict) -> list[str]:
    med = res["median"]
    rows = ["| part | ms |", "| --- | ---: |"]
    rows += [f"| {k} | {med[k] * 1e3:.3f} |" for k in PARTS if k in med]
    if "whole" in med:
        cpu = sum(med[k] for k in ("imports", "param table", "launcher"))
        rows.append(f"| first call against CuPy's | {med['whole'] / med['cupy whole']:.2f}x "
                    f"(goal 1; CPU parts {cpu * 1e3:.2f} ms) |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dry-run", action="store_true", help="as without a GPU, even with one")
    a = ap.parse_args()
    print(machine())
    res = run(a.repeats, a.dry_run)
    print("\n".join(table(res)))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
