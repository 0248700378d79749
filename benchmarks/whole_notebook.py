"""The whole notebook a user re-runs after a restart, cell by cell, against CuPy: a setup cell
(``import cupy``; cudamagic: ``%load_ext``), the build cell (``%%cuda`` with its report shown;
CuPy: ``RawModule`` + ``get_function``), and a launch cell (the first launch of the first
kernel), in fresh Jupyter kernels, both served from their caches.

Where the time goes. Each run records:

- *kernel start*: asking nbclient for a kernel -> sending the setup cell (client clock);
- *setup*: the setup cell (kernel dates: execute_input -> execute_reply);
- *build*: the ``%%cuda`` cell / CuPy's ``RawModule`` cell (CuPy makes the CUDA context and loads
  the module here: ``get_function`` needs both);
- *launch*: the launch cell, and inside it (``perf_counter`` in the kernel) cudamagic's
  *context* (``cp.cuda.Device(0).synchronize()``), *alloc* (``cp.zeros``), *module load*
  (``cuda_module.load()``), *first call* (the launcher's first call, which builds its argument
  encoder) and *sync*; CuPy's *alloc*, *first call* and *sync*;
- *notebook*: setup cell's execute_input -> launch cell's execute_reply (kernel dates), and the
  client-side span from sending the setup cell to the launch cell's reply.

The timed runs alternate cudamagic, CuPy, ...; every figure is a median over ``--repeats``.
A cudamagic run that was not a cache hit, or a CuPy run that added files to its cache, fails the
benchmark (warm_cell's checks).

Without a GPU (or with ``--dry-run``) only the cudamagic notebook runs, compile-only, with no
launch cell: that tests the harness end to end, its numbers are not the GPU machine's.

GPU machine (about 2 minutes for the defaults):
    python3 benchmarks/whole_notebook.py --json $OUT/notebook.json
Here:
    .venv/bin/python benchmarks/whole_notebook.py --dry-run --repeats 1 --sizes 1 --cccl 0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from common import cuda_cell, cupy_cell, cupy_options, gpu_available, machine, median, \
    names, run_notebook, versions
from warm_cell import CHECK_CUDAMAGIC, CHECK_CUPY, MissedCache, _checked, _files, _write

#: the first kernel's buffers, per source kind, and its pointer arguments (then n = 1024), per source kind (buffers made in the launch cell)
ARGS = {"small": ("x = cp.zeros(1024, dtype=cp.float32)", "x"),
        "heavy": ("x = cp.zeros(1024, dtype=cp.complex64)", "x"),
        "cccl": ("x = cp.zeros(1024, dtype=cp.complex64); out = cp.zeros(4, dtype=cp.float32)",
                 "x, out")}

_PHASES = 'print("BENCH-PHASES " + __import__("json").dumps(_ph))'


def launch_cell(tool: str, kind: str) -> str:
    """The launch cell, timing its phases in the kernel and printing them as one JSON line."""
    alloc, bufs = ARGS[kind]
    first = names(kind, 1)[0]
    lines = ["import time as _t", "_ph = {}", "_c = _t.perf_counter()"]

    def phase(name: str, code: str) -> None:
        lines.extend([code, f"_ph[{name!r}] = _t.perf_counter() - _c", "_c = _t.perf_counter()"])

    if tool == "cudamagic":
        phase("context", "cp.cuda.Device(0).synchronize()")
        phase("alloc", alloc)
        phase("module load", "cuda_module.load()")
        phase("first call", f"cuda_module[{first!r}]((4,), (256,), ({bufs}, 1024))")
    else:
        phase("alloc", alloc)
        phase("first call", f"kernels[0]((4,), (256,), ({bufs}, cp.int32(1024)))")
    phase("sync", "cp.cuda.Device(0).synchronize()")
    return "\n".join(lines + [_PHASES])


def notebook(tool: str, kind: str, n: int, gpu: bool) -> list[str]:
    """The cells of one tool's notebook: setup, build, (launch), check."""
    setup = "import cupy as cp" + ("\n%load_ext cudamagic" if tool == "cudamagic" else "")
    build = cuda_cell(kind, n) if tool == "cudamagic" else cupy_cell(kind, n, cupy_options())
    launch = [launch_cell(tool, kind)] if gpu else []
    return [setup, build, *launch, CHECK_CUDAMAGIC if tool == "cudamagic" else CHECK_CUPY]


def _phases(cell) -> dict[str, float]:
    line = next((ln for ln in cell.text("stdout").splitlines() if ln.startswith("BENCH-PHASES ")),
                None)
    if line is None:
        raise MissedCache(f"the launch cell printed no phases:\n{cell.text()}")
    return json.loads(line.split(" ", 1)[1])


def measure(kind: str, n: int, repeats: int, gpu: bool, timeout: int = 600) -> dict:
    """Warm up both notebooks, then ``repeats`` alternated timed runs of each; the raw seconds."""
    tools = ("cudamagic", "cupy") if gpu else ("cudamagic",)
    work = tempfile.mkdtemp(prefix="cudamagic-notebook-")
    caches = {t: os.path.join(work, f"{t}-cache") for t in ("cudamagic", "cupy")}
    for d in caches.values():
        os.makedirs(d)
    env = {"CUDAMAGIC_CACHE_DIR": caches["cudamagic"], "CUPY_CACHE_DIR": caches["cupy"]}
    cells = {t: notebook(t, kind, n, gpu) for t in tools}
    last = 2 if gpu else 1
    for tool in tools:   # untimed: fills both caches and the bytecode
        t = time.perf_counter()
        run_notebook(cells[tool], cwd=work, env=env, timeout=timeout)
        print(f"  notebook {kind} {n:>4} names: warm-up {tool} {time.perf_counter() - t:.1f} s",
              flush=True)
    cupy_files = _files(caches["cupy"]) if gpu else None
    if gpu and not cupy_files:
        raise MissedCache(f"CuPy's warm-up left nothing in CUPY_CACHE_DIR={caches['cupy']}")
    raw: dict[str, dict[str, list[float]]] = {t: {} for t in tools}
    for r in range(repeats):
        for tool in tools:
            run = run_notebook(cells[tool], cwd=work, env=env, timeout=timeout)
            _checked(tool, run, n, caches["cupy"], cupy_files)
            got = {"kernel start": run.kernel_start_s, "setup": run.cells[0].kernel_s,
                   "build": run.cells[1].kernel_s, "notebook": run.span(0, last),
                   "notebook (client)": run.client_span(0, last)}
            if gpu:
                got["launch"] = run.cells[2].kernel_s
                got.update({f"launch: {k}": v for k, v in _phases(run.cells[2]).items()})
            for k, v in got.items():
                raw[tool].setdefault(k, []).append(v)
            print(f"  notebook {kind} {n:>4} names: run {r + 1}/{repeats} {tool:9} "
                  + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in got.items()) + " ms", flush=True)
    return {"source": kind, "names": n, "raw": raw,
            "median": {t: {k: median(v) for k, v in m.items()} for t, m in raw.items()}}


def table(cases: list[dict]) -> list[str]:
    """One markdown table: every case's figures, cudamagic against CuPy."""
    rows = ["| case | figure | cudamagic ms | CuPy ms | ratio |", "| --- | --- | ---: | ---: | ---: |"]
    for c in cases:
        ours, theirs = c["median"]["cudamagic"], c["median"].get("cupy", {})
        label = f"{c['source']}, {c['names']} names"
        for key in dict.fromkeys([*ours, *theirs]):
            a, b = ours.get(key), theirs.get(key)
            ratio = f"{a / b:.2f}x" if a is not None and b else "–"
            rows.append(f"| {label} | {key} | {'–' if a is None else f'{a * 1e3:.1f}'} | "
                        f"{'–' if b is None else f'{b * 1e3:.1f}'} | {ratio} |")
    return rows


def run(sizes=(10, 1000), cccl: int = 10, repeats: int = 5, dry_run: bool | None = None,
        json_path: str | None = None, timeout: int = 600) -> dict:
    """Measure every case, print the table, write the JSON (after every case); return it."""
    gpu = gpu_available() if dry_run is None else not dry_run
    mode = "gpu" if gpu else "dry-run (no GPU, compile-only, no launch cell)"
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "versions": versions(), "mode": mode, "repeats": repeats, "cases": []}
    t0 = time.perf_counter()
    for kind, n in [("small", n) for n in sizes] + ([("cccl", cccl)] if cccl else []):
        result["cases"].append(measure(kind, n, repeats, gpu, timeout))
        if json_path:
            _write(json_path, {**result, "complete": False})
    rows = table(result["cases"])
    result.update(table=rows, wall_s=time.perf_counter() - t0, complete=True)
    print(f"\n### Whole notebook vs CuPy, cell by cell ({mode}), median of {repeats}, "
          f"alternated\n\n{result['date']}; {result['machine']}\n")
    print("\n".join(rows), flush=True)
    if json_path:
        _write(json_path, result)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="10,1000", help="name counts of the small template")
    ap.add_argument("--cccl", type=int, default=10, help="names of the CCCL case; 0 skips it")
    ap.add_argument("--dry-run", action="store_true", default=None)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    a = ap.parse_args()
    run(tuple(int(s) for s in a.sizes.split(",") if s.strip()), a.cccl, a.repeats, a.dry_run,
        a.json, a.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
