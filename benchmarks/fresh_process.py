"""A fresh process served from the cache, imports included: a script or a test worker running
``import cudamagic; cudamagic.build(src, names).load()`` against ``import cupy;
RawModule(code=src, name_expressions=names).get_function(...)`` for every name, in the same run.

Each child reads its source and names from a JSON file, then starts the clock before its first
import of the tool; it reports the seconds to callables loaded on the GPU (CuPy's get_function
makes the context and loads the module, so cudamagic's figure includes ``load()``), split into
import, build and load for cudamagic. The parent also times the whole process (interpreter start
to exit). Both caches are filled by an untimed run first; runs alternate, medians of
``--repeats``. A cudamagic child that was not a hit fails the benchmark.

Without a GPU (or with ``--dry-run``) only cudamagic runs, ``build()`` alone (compile-only).

GPU machine (about a minute):   python3 benchmarks/fresh_process.py --json $OUT/fresh.json
Here:   .venv/bin/python benchmarks/fresh_process.py --dry-run --repeats 1 --sizes 1 --cccl 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from common import SOURCES, bench_env, compile_bytecode, cupy_options, gpu_available, machine, median, names, \
    versions

#: the fresh-process hit's goal against CuPy's (issue 30: a third)
FRESH_GOAL = 1 / 3

CHILD = r"""
import json, sys, time
spec = json.load(open(sys.argv[1]))
import numpy  # already imported in both, as in a user's script (issue 30's table)
try:
    import cupy
except ImportError:  # no CuPy here: cudamagic alone
    pass
t0 = time.perf_counter()
if spec["tool"] == "cudamagic":
    import cudamagic
    t1 = time.perf_counter()
    mod = cudamagic.build(spec["source"], spec["names"])
    t2 = time.perf_counter()
    if spec["gpu"]:
        mod.load()
    t3 = time.perf_counter()
    out = {"hit": mod.hit, "kernels": len(mod), "import": t1 - t0, "build": t2 - t1,
           "load": t3 - t2}
else:
    import cupy as cp
    t1 = time.perf_counter()
    m = cp.RawModule(code=spec["source"], name_expressions=spec["names"],
                     options=tuple(spec["options"]))
    fns = [m.get_function(e) for e in spec["names"]]
    t3 = time.perf_counter()
    out = {"hit": None, "kernels": len(fns), "import": t1 - t0, "build + load": t3 - t1}
out["seconds"] = t3 - t0
out["cudamagic_modules"] = sum(m.split(".")[0] == "cudamagic" for m in sys.modules)
print(json.dumps(out))
"""


def _child(spec_path: str, env: dict[str, str]) -> dict:
    """One fresh interpreter in the spec's folder (a quiet one: a CCCL build searches the
    working folder for headers it does not find, and a busy folder such as /tmp that changes
    during the compile keeps it out of the cache); its own figures and the process's wall
    time."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, spec_path], capture_output=True, text=True,
                          env=bench_env(env), timeout=900, cwd=os.path.dirname(spec_path))
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"fresh-process child failed:\n{proc.stdout}\n{proc.stderr}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process": wall}


def measure(kind: str, n: int, repeats: int, gpu: bool) -> dict:
    """Fill both caches, then ``repeats`` alternated fresh processes of each tool."""
    tools = ("cudamagic", "cupy") if gpu else ("cudamagic",)
    compile_bytecode()
    work = tempfile.mkdtemp(prefix="cudamagic-fresh-")
    env = {"CUDAMAGIC_CACHE_DIR": os.path.join(work, "cudamagic-cache"),
           "CUPY_CACHE_DIR": os.path.join(work, "cupy-cache")}
    specs = {}
    for tool in tools:
        specs[tool] = os.path.join(work, f"{tool}.json")
        with open(specs[tool], "w") as f:
            json.dump({"tool": tool, "gpu": gpu, "source": SOURCES[kind][0],
                       "names": names(kind, n), "options": list(cupy_options())}, f)
        _child(specs[tool], env)   # untimed: the compile, and the bytecode
    raw: dict[str, dict[str, list[float]]] = {t: {} for t in tools}
    modules = 0
    for _ in range(repeats):
        for tool in tools:
            got = _child(specs[tool], env)
            if tool == "cudamagic" and not got["hit"]:
                raise AssertionError("cudamagic's fresh process missed its cache")
            if tool == "cudamagic":
                modules = got["cudamagic_modules"]
            if got["kernels"] != n:
                raise AssertionError(f"{tool}: {got['kernels']} kernels, expected {n}")
            for k, v in got.items():
                if isinstance(v, float):
                    raw[tool].setdefault(k, []).append(v)
    med = {t: {k: median(v) for k, v in m.items()} for t, m in raw.items()}
    line = "  ".join(f"{t} {med[t]['seconds'] * 1e3:.1f} ms (process {med[t]['process'] * 1e3:.0f})"
                     for t in tools)
    if gpu:
        ratio = med['cudamagic']['seconds'] / med['cupy']['seconds']
        met = "met" if ratio <= FRESH_GOAL else "MISSED"
        line += f"  ratio {ratio:.2f}x (goal {FRESH_GOAL:.2f}x: {met})"
    line += f"  ({modules} cudamagic modules imported)"
    print(f"  fresh process {kind:5} {n:>4} names: {line}", flush=True)
    return {"source": kind, "names": n, "raw": raw, "median": med, "modules": modules}


def _ms(row: dict | None, key: str, digits: int = 1) -> str:
    return "–" if row is None else f"{row[key] * 1e3:.{digits}f}"


def table(cases: list[dict]) -> list[str]:
    """The markdown table: import -> loaded, the process, cudamagic's split."""
    rows = ["| case | cudamagic ms | CuPy ms | ratio (goal 0.33) | process ms, cudamagic / CuPy | "
            "cudamagic import / build / load ms | modules |",
            "| --- | ---: | ---: | ---: | --- | --- | ---: |"]
    for c in cases:
        ours, theirs = c["median"]["cudamagic"], c["median"].get("cupy")
        ratio = f"{ours['seconds'] / theirs['seconds']:.2f}x" if theirs else "–"
        split = " / ".join(_ms(ours, k) for k in ("import", "build", "load"))
        rows.append(f"| {c['source']}, {c['names']} names | {_ms(ours, 'seconds')} | "
                    f"{_ms(theirs, 'seconds')} | {ratio} | {_ms(ours, 'process', 0)} / "
                    f"{_ms(theirs, 'process', 0)} | {split} | {c.get('modules', '–')} |")
    return rows


def run(sizes=(1, 10, 100, 1000), cccl: int = 10, repeats: int = 5,
        dry_run: bool | None = None, json_path: str | None = None) -> dict:
    """Measure every case, print the table, write the JSON; return the results."""
    gpu = gpu_available() if dry_run is None else not dry_run
    mode = "gpu" if gpu else "dry-run (no GPU, build() only, compile-only)"
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "versions": versions(), "mode": mode, "repeats": repeats, "cases": []}
    for kind, n in [("small", n) for n in sizes] + ([("cccl", cccl)] if cccl else []):
        result["cases"].append(measure(kind, n, repeats, gpu))
    result["table"] = table(result["cases"])
    print(f"\n### Fresh process, import to loaded, vs CuPy ({mode}), median of {repeats}, "
          f"alternated\n\n{result['date']}; {result['machine']}\n")
    print("\n".join(result["table"]), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="1,10,100,1000", help="name counts of the small template")
    ap.add_argument("--cccl", type=int, default=10, help="names of the CCCL case; 0 skips it")
    ap.add_argument("--dry-run", action="store_true", default=None)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    run(tuple(int(s) for s in a.sizes.split(",") if s.strip()), a.cccl, a.repeats, a.dry_run,
        a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
