"""What asking the compiler for types costs on a miss, for a CCCL cell (CUB's BlockReduce over
cuda::std::complex, 10 names) with an extern "C" kernel and typed variables. Alternated in one
process, median of R:

- NVRTC alone: the cell as cudamagic compiles it, without the probe;
- NVRTC with the probe: the same compile with the probe's name expressions and fallbacks
  (toolchain/compile/probe.py), which is what a miss now runs;
- the separate type-reading compile the earlier code ran after that compile for the extern "C"
  kernels' types (a ``-fdevice-syntax-only`` compile of the cell and a template instantiated on
  ``decltype(&fill)``), rebuilt here as it was;
- the whole miss, ``build(force=True)``.

python benchmarks/type_probe.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import CCCL, machine, median, names

import cudamagic
from cudamagic.core.options import BuildOptions
from cudamagic.pipeline.steps import entry_key
from cudamagic.store import KernelCache
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from cudamagic.toolchain.compile.probe import typed_compile

SOURCE = CCCL + r"""
__constant__ float coeffs[16];
namespace ns { __device__ double table[3][5]; }
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v * coeffs[1] + ns::table[1][2]; }
"""
_EARLIER = "\nnamespace __earlier { template <class F> __global__ void of() {} }\n"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(repeats: int = 5, n: int = 10) -> dict[str, float]:
    exprs = names("cccl", n)
    _, _, options, _ = entry_key(SOURCE, BuildOptions(name_expressions=tuple(exprs)))
    cache = KernelCache(tempfile.mkdtemp())
    paths = {
        "nvrtc": lambda: compile_cubin(SOURCE, exprs, options, trace=True),
        "probed": lambda: typed_compile(compile_cubin, SOURCE, exprs, options, trace=True),
        "earlier": lambda: compile_cubin(SOURCE + _EARLIER, ["__earlier::of<decltype(&fill)>"],
                                         [*options, "-fdevice-syntax-only"], trace=False),
        "miss": lambda: cudamagic.build(SOURCE, exprs, cache=cache, force=True),
    }
    t: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(repeats):
        for k, fn in paths.items():
            t[k].append(_timed(fn))
    got = {k: median(v) for k, v in t.items()}
    module = cudamagic.build(SOURCE, exprs, cache=cache)
    typed = [p.ctype for p in module["fill"].params]
    print(f"  CCCL + extern \"C\", {n} names, median of {repeats}: NVRTC alone "
          f"{got['nvrtc'] * 1e3:.0f} ms; with the probe {got['probed'] * 1e3:.0f} ms "
          f"({(got['probed'] / got['nvrtc'] - 1) * 100:+.1f}%); the earlier second compile "
          f"{got['earlier'] * 1e3:.0f} ms ({got['earlier'] / got['nvrtc'] * 100:.0f}% of NVRTC "
          f"alone); the whole miss {got['miss'] * 1e3:.0f} ms; fill's types {typed}; "
          f"{machine()}", flush=True)
    return got


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)
