"""What starting the CUDA driver costs a fresh process, and whether it holds the interpreter.

Each figure is a median over fresh processes (5 by default), on the GPU machine:

- *ctypes*: ``libcuda.so.1`` opened, ``cuInit``, ``cuDeviceGetCount``,
  ``cuDevicePrimaryCtxRetain`` (device 0) and ``cuCtxSetCurrent``, each timed: the calls
  ``%load_ext cudamagic`` makes in its background thread (the driver module's ctypes binding);
  and the device memory in use once the context is made (``cuMemGetInfo``: the context's own
  footprint where nothing else runs on the GPU; printed in the ms column, as MiB);
- *thread*: the same calls in a thread while the main thread sleeps 0.5 ms at a time: the
  longest the main thread waited to run again (a call holding the GIL would show as a stall as
  long as the call);
- *CuPy*: ``import cupy``, the first runtime call (``cuInit``) and the context
  (``Device(0).synchronize()``), each timed;
- *cuda.bindings*: importing its driver module, and its ``cuInit``.

    python3 benchmarks/driver_start.py [--repeats 5] [--json out.json]
Needs a GPU (it exits saying so without one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from common import bench_env, gpu_available

CTYPES = r'''
import ctypes, json, time
t0 = time.perf_counter()
lib = ctypes.CDLL("libcuda.so.1"); t1 = time.perf_counter()
lib.cuInit(0); t2 = time.perf_counter()
n = ctypes.c_int(); lib.cuDeviceGetCount(ctypes.byref(n)); t3 = time.perf_counter()
ctx = ctypes.c_void_p(); lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
t4 = time.perf_counter()
lib.cuCtxSetCurrent(ctx); t5 = time.perf_counter()
free, total = ctypes.c_size_t(), ctypes.c_size_t()
lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
print(json.dumps({"dlopen": t1 - t0, "cuInit": t2 - t1, "cuDeviceGetCount": t3 - t2,
                  "cuDevicePrimaryCtxRetain": t4 - t3, "cuCtxSetCurrent": t5 - t4,
                  "device memory in use with the context, MiB": (total.value - free.value)
                  / 2**20 / 1e3}))
'''
THREAD = r'''
import ctypes, json, threading, time
def start():
    lib = ctypes.CDLL("libcuda.so.1"); lib.cuInit(0)
    ctx = ctypes.c_void_p(); lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
t = threading.Thread(target=start); t0 = time.perf_counter(); t.start()
waits, last = [], time.perf_counter()
while t.is_alive():
    time.sleep(0.0005); now = time.perf_counter(); waits.append(now - last); last = now
print(json.dumps({"thread": time.perf_counter() - t0, "longest main-thread wait": max(waits)}))
'''
CUPY = r'''
import json, time
t0 = time.perf_counter(); import cupy; t1 = time.perf_counter()
cupy.cuda.runtime.getDeviceCount(); t2 = time.perf_counter()
cupy.cuda.Device(0).synchronize(); t3 = time.perf_counter()
print(json.dumps({"import cupy": t1 - t0, "first call (cuInit)": t2 - t1, "context": t3 - t2}))
'''
BINDINGS = r'''
import json, time
t0 = time.perf_counter(); from cuda.bindings import driver; t1 = time.perf_counter()
driver.cuInit(0); t2 = time.perf_counter()
print(json.dumps({"import cuda.bindings.driver": t1 - t0, "cuInit": t2 - t1}))
'''
PARTS = (("ctypes", CTYPES), ("thread", THREAD), ("CuPy", CUPY), ("cuda.bindings", BINDINGS))


def run(repeats: int = 5) -> dict[str, dict[str, float]]:
    """Each part's figures, median seconds over ``repeats`` fresh processes (after one untimed
    run that writes the bytecode)."""
    out = {}
    for name, code in PARTS:
        rows = []
        for i in range(repeats + 1):
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  env=bench_env(), timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
            if i:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        out[name] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return out


def table(result: dict[str, dict[str, float]]) -> list[str]:
    rows = ["| part | call | ms |", "| --- | --- | ---: |"]
    for part, figures in result.items():
        rows += [f"| {part} | {k} | {v * 1e3:.1f} |" for k, v in figures.items()]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not gpu_available():
        print("driver_start.py needs a GPU: nothing measured")
        return 0
    result = run(a.repeats)
    print("\n".join(table(result)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
