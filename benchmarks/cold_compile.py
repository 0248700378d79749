"""Cold compile: cudamagic's whole miss path (key, NVRTC, ELF, demangle, resolve, store) against a
bare NVRTC compile of the same source with the same options, alternating, in one process. The
cache folder exists already (as a user's does); each build is forced to compile and store.

Runs with or without a GPU: python benchmarks/cold_compile.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import SOURCES, machine, median, names

import cudamagic
from cudamagic.cache import KernelCache
from cudamagic.compiler import compile_cubin
from cudamagic.options import BuildOptions, nvrtc_options
from cudamagic.session import default_arch


def run(repeats: int = 5, n: int = 10) -> list[dict]:
    """Median seconds of both paths, per source."""
    rows = []
    arch = default_arch()
    for kind in ("small", "heavy"):   # the sources its published numbers were measured on
        src = SOURCES[kind][0]
        exprs = names(kind, n)
        opts = nvrtc_options(BuildOptions(name_expressions=tuple(exprs)), arch)
        ours, bare = [], []
        cache = KernelCache(tempfile.mkdtemp())  # a user's cache folder exists already
        for _ in range(repeats):
            t = time.perf_counter()
            compile_cubin(src, exprs, opts)
            bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            mod = cudamagic.build(src, exprs, cache=cache, force=True)
            ours.append(time.perf_counter() - t)
            assert not mod.hit
        row = {"source": kind, "names": n, "cudamagic": median(ours), "nvrtc": median(bare)}
        rows.append(row)
        print(f"  cold compile {kind:5} {n} names: cudamagic {row['cudamagic'] * 1e3:8.1f} ms  "
              f"bare NVRTC {row['nvrtc'] * 1e3:8.1f} ms  overhead "
              f"{(row['cudamagic'] / row['nvrtc'] - 1) * 100:+.1f}%", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    print(machine())
    run(ap.parse_args().repeats)


if __name__ == "__main__":
    main()
