"""Cache scale: a hit's lookup time with 10, 1 000 and 10 000 entries in the cache folder.

Runs with or without a GPU: python benchmarks/cache_scale.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from common import SMALL, machine, median

import cudamagic
from cudamagic.store.cache import KernelCache


def run(sizes=(10, 1000, 10000), repeats: int = 50) -> list[dict]:
    """Median seconds of ``build()`` on a hit, per cache size."""
    filler_src = "__global__ void f(int* x) { x[0] = 1; }\n"
    filler = KernelCache(tempfile.mkdtemp())
    key = cudamagic.build(filler_src, cache=filler).key
    record_bytes = filler.raw.get(key)
    rows = []
    for n in sizes:
        cache = KernelCache(tempfile.mkdtemp())
        for _ in range(n - 1):
            cache.raw.set(os.urandom(32).hex(), record_bytes)  # fillers: never read
        cudamagic.build(SMALL, ["k<1>"], cache=cache)  # the n-th entry: the one looked up
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            mod = cudamagic.build(SMALL, ["k<1>"], cache=cache)
            times.append(time.perf_counter() - t)
            assert mod.hit
        rows.append({"entries": len(cache), "seconds": median(times)})
        print(f"  cache scale {len(cache):6} entries: hit in {rows[-1]['seconds'] * 1e3:.2f} ms",
              flush=True)
    return rows


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(machine())
    run()


if __name__ == "__main__":
    main()
