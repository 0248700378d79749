"""Warm restore: from build() to callables loaded on the GPU, on a cache hit, in a fresh process,
against CuPy's RawModule(code=..., name_expressions=...) + get_function for the same names (also a
hit in CuPy's own cache). The CUDA context is created before the clock starts, for both. Three
ways for cudamagic (see TOOLS): the target is judged on "cudamagic"; the others are reported.

Run on a GPU machine: python benchmarks/warm_restore.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile

from common import fresh, machine, median

CHILD = r"""
import json, sys, time
tool, kind, n, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, "benchmarks")
from common import SOURCES, names
src, exprs = SOURCES[kind][0], names(kind, n)
phases = {}
if tool == "cell":   # a notebook: %load_ext in an earlier cell, then CuPy, then the %%cuda cell
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
import cupy as cp
cp.cuda.Device(0).synchronize()          # the context exists before the clock starts
if tool == "cupy":
    from common import cupy_options
    opts = cupy_options()
    t = time.perf_counter()
    m = cp.RawModule(code=src, name_expressions=exprs, options=opts)
    fns = [m.get_function(e) for e in exprs]
    dt = time.perf_counter() - t
    hit = None
elif tool == "cell":
    line = "-q " + " ".join(f'-n "{e}"' for e in exprs)
    t = time.perf_counter()
    ip.run_cell_magic("cuda", line, src)
    mod = ip.user_ns["cuda_module"].load()
    dt = time.perf_counter() - t
    hit = mod.hit
else:
    import cudamagic
    if tool == "cudamagic":     # the pipeline imported, as CuPy's is by "import cupy"
        import cudamagic.pipeline.steps
    t = time.perf_counter()
    mod = cudamagic.build(src, exprs, cache=cache)
    t_build = time.perf_counter() - t
    mod.load()
    dt = time.perf_counter() - t
    hit = mod.hit
    phases = {k: round(v * 1e3, 3) for k, v in mod.report.timings.items()}
    phases["outside"] = round((t_build - mod.report.timings["total"]) * 1e3, 3)
    phases["load"] = round((dt - t_build) * 1e3, 3)
print(json.dumps({"seconds": dt, "hit": hit, "phases": phases}))
"""

#: cudamagic: build() with the pipeline imported first (as "import cupy" imports CuPy's);
#: cold-import: build() paying for the pipeline's import too; cell: the %%cuda cell of a
#: notebook whose %load_ext ran earlier (its background import has finished).
TOOLS = ("cupy", "cudamagic", "cold-import", "cell")

SIZES = {"small": (1, 10, 100, 1000), "heavy": (10,), "cccl": (10,)}


def run(repeats: int = 3, sizes: dict[str, tuple[int, ...]] | None = None,
        tools: tuple[str, ...] = TOOLS) -> list[dict]:
    """Median warm-restore seconds per (source, names, tool), alternating the tools (``tools``
    holds "cupy" and "cudamagic": the ratio is theirs)."""
    rows = []
    for kind, counts in (SIZES if sizes is None else sizes).items():
        for n in counts:
            row = {"source": kind, "names": n}
            cache = tempfile.mkdtemp()
            env = {"CUPY_CACHE_DIR": cache, "CUDAMAGIC_CACHE_DIR": cache}
            for tool in tools:   # a cold run fills the caches
                fresh(CHILD, tool, kind, str(n), cache, env=env)
            runs: dict[str, list[dict]] = {t: [] for t in tools}
            for _ in range(repeats):   # alternated, so that drift reaches every tool alike
                for tool in tools:
                    runs[tool].append(fresh(CHILD, tool, kind, str(n), cache, env=env))
            for tool in tools:
                assert tool == "cupy" or all(r["hit"] for r in runs[tool]), \
                    f"{tool} missed its cache"
                row[tool] = median(r["seconds"] for r in runs[tool])
            row["phases"] = sorted(runs["cudamagic"], key=lambda r: r["seconds"])[
                len(runs["cudamagic"]) // 2]["phases"]
            rows.append(row)
            print(f"  warm restore {kind:5} {n:5} names: " + "  ".join(
                f"{t} {row[t] * 1e3:.2f} ms" for t in tools)
                + f"  ratio {row['cudamagic'] / row['cupy']:.3f}  phases(ms) {row['phases']}",
                flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    """The markdown table: every tool's median, the ratio judged on "cudamagic"."""
    tools = [t for t in TOOLS if rows and t in rows[0]]
    out = ["| case | " + " | ".join(f"{t} ms" for t in tools) + " | ratio (cudamagic / CuPy) |",
           "| --- |" + " ---: |" * (len(tools) + 1)]
    for r in rows:
        out.append(f"| {r['source']}, {r['names']} names | "
                   + " | ".join(f"{r[t] * 1e3:.2f}" for t in tools)
                   + f" | {r['cudamagic'] / r['cupy']:.2f}x |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    print(machine())
    print("\n".join(table(run(ap.parse_args().repeats))))


if __name__ == "__main__":
    main()
