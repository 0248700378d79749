"""Warm restore: from build() to callables loaded on the GPU, on a cache hit, in a fresh process,
against CuPy's RawModule(code=..., name_expressions=...) + get_function for the same names (also a
hit in CuPy's own cache). The CUDA context is created before the clock starts, for both.

Run on a GPU machine: python benchmarks/warm_restore.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile

from common import SOURCES, fresh, machine, median, names

CHILD = r"""
import json, sys, time
import cupy as cp
tool, kind, n, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, "benchmarks")
from common import SOURCES, names
from cudamagic.options import system_include_dirs
src, exprs = SOURCES[kind][0], names(kind, n)
opts = ("-std=c++17", *(f"-I{d}" for d in system_include_dirs()))
cp.cuda.Device(0).synchronize()          # the context exists before the clock starts
if tool == "cudamagic":
    import cudamagic
    t = time.perf_counter()
    mod = cudamagic.build(src, exprs, cache=cache)
    t_build = time.perf_counter() - t
    mod.load()
    dt = time.perf_counter() - t
    hit = mod.hit
    phases = {k: round(v * 1e3, 3) for k, v in mod.report.timings.items()}
    phases["import+setup"] = round((t_build - mod.report.timings["total"]) * 1e3, 3)
    phases["load"] = round((dt - t_build) * 1e3, 3)
else:
    t = time.perf_counter()
    m = cp.RawModule(code=src, name_expressions=exprs, options=opts)
    fns = [m.get_function(e) for e in exprs]
    dt = time.perf_counter() - t
    hit, phases = None, {}
print(json.dumps({"seconds": dt, "hit": hit, "phases": phases}))
"""

SIZES = {"small": (1, 10, 100, 1000), "heavy": (1, 10, 100)}


def run(repeats: int = 5) -> list[dict]:
    """Median warm-restore seconds per (source, names, tool)."""
    rows = []
    for kind, sizes in SIZES.items():
        for n in sizes:
            row = {"source": kind, "names": n}
            for tool in ("cudamagic", "cupy"):
                cache = tempfile.mkdtemp()
                env = {"CUPY_CACHE_DIR": cache, "CUDAMAGIC_CACHE_DIR": cache}
                fresh(CHILD, tool, kind, str(n), cache, env=env)  # the cold run fills the cache
                runs = [fresh(CHILD, tool, kind, str(n), cache, env=env) for _ in range(repeats)]
                assert tool == "cupy" or all(r["hit"] for r in runs), "cudamagic missed its cache"
                row[tool] = median(r["seconds"] for r in runs)
                if tool == "cudamagic":
                    row["phases"] = runs[len(runs) // 2]["phases"]
            rows.append(row)
            print(f"  warm restore {kind:5} {n:5} names: cudamagic {row['cudamagic'] * 1e3:8.2f} ms"
                  f"  CuPy {row['cupy'] * 1e3:8.2f} ms  ratio {row['cudamagic'] / row['cupy']:.3f}"
                  f"  phases(ms) {row['phases']}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    print(machine())
    run(ap.parse_args().repeats)


if __name__ == "__main__":
    main()
