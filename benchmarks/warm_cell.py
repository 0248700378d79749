"""The warm ``%%cuda`` cell as a user waits for it, against the same work in CuPy, in real Jupyter
kernels.

What is measured. Two notebooks, each run top to bottom by nbclient in a fresh ``python3`` kernel
(as "Restart Kernel and Run All Cells" does: a cell is sent once the one before has replied):

- cudamagic: cell 0 ``import cupy as cp; cp.cuda.Device(0).synchronize(); %load_ext cudamagic``;
  cell 1 the ``%%cuda`` cell with one ``-n`` per instance and its report shown (no ``-q``); with a
  GPU, cell 2 ``cuda_module.load()`` (every kernel on the GPU, as ``get_function`` leaves CuPy's;
  cudamagic otherwise loads a kernel on its first call); then an untimed check cell.
- CuPy: cell 0 ``import cupy as cp; cp.cuda.Device(0).synchronize()``; cell 1
  ``RawModule(code=..., name_expressions=..., options=...)`` and ``get_function`` for every name,
  with cudamagic's dialect and ``-I`` folders (CuPy's CCCL and the toolkit's headers); then an
  untimed check cell.

- floor: cell 0 as CuPy's plus a ``%%floor`` cell magic (:data:`FLOOR_SETUP`); cell 1 the
  ``%%cuda`` cell's line and source under ``%%floor``: the least a warm cell can do in the same
  kernel (the line split into its names, the entry's value file read, one sha256, the CUBIN's
  ELF symbol table, a dict, one small HTML display). cudamagic / floor is the ratio issue 21's
  "1.5x its floor" reads.

Both are served from their caches: ``CUDAMAGIC_CACHE_DIR`` and ``CUPY_CACHE_DIR`` point at fresh
temporary folders, and a first, untimed run of each notebook fills them (and the bytecode of
everything imported). Then the timed runs alternate cudamagic, CuPy, cudamagic, CuPy, ...; each
figure is the median over them. The CUDA context is made in cell 0 for both, before the cell
under test.

- *cell*: the kernel's own dates, from cell 1's ``execute_input`` (iopub) to its
  ``execute_reply`` (shell): everything the kernel did for the cell, the widget's comm messages
  included. The client-side wall time (request sent -> reply and idle status received) is
  recorded beside it.
- *cell + load()*: cudamagic's cells 1 and 2 against CuPy's cell 1 (GPU only).
- *notebook*: cell 0's ``execute_input`` -> cell 1's ``execute_reply`` (kernel dates); the kernel's
  start-up is left out, for both.
- *cell 0*: cell 0 of each notebook; cudamagic's minus CuPy's is ``%load_ext``'s share (target
  under 300 ms), a difference of medians.

Sanity: every timed cudamagic run must report ``cuda_module.hit`` (the check cell prints it), and
its cell 1 must have displayed the report; every timed CuPy run must leave CuPy's cache folder
as the warm-up left it. A run that missed fails the benchmark.

Without a GPU (or with ``--dry-run``) only the cudamagic notebook runs, compile-only: cell 0
imports CuPy without making a context, and there is no ``load()`` cell. That tests the harness
end to end; its numbers are not the GPU machine's.

On the GPU machine, quick (3 cases x 8 notebook runs of ~3 s, plus the compiles that fill the
caches: about 2 minutes):
    python3 benchmarks/warm_cell.py --repeats 3 --sizes 10,1000 --json $OUT/warm_cell.json
and the full default (5 cases x 12 runs: about 4 minutes):
    python3 benchmarks/warm_cell.py --json $OUT/warm_cell.json
The JSON is rewritten after every case, so a run cut short keeps what it measured.
Here:
    .venv/bin/python benchmarks/warm_cell.py --dry-run --repeats 3 --sizes 1,10 --cccl 0
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from common import (cell0, cuda_cell, cupy_cell, cupy_options, gpu_available, machine, median,
                    run_notebook, versions)

CHECK_CUDAMAGIC = """import json
try:
    _n = len(cuda_module)
except TypeError:
    _n = None
print("BENCH-CHECK " + json.dumps({"hit": bool(cuda_module.hit), "kernels": _n}))"""
CHECK_CUPY = 'print("BENCH-CHECK " + __import__("json").dumps({"kernels": len(kernels)}))'

#: The floor's cell 0 (untimed): a ``%%floor`` cell magic that does the least a warm cell can do
#: with the same line and source, in the same kernel: split the line into its names, read the
#: cache entry's value file, one sha256 over it, the CUBIN's ELF symbol table (global
#: and weak functions), a dict of names to symbols, one small HTML display. The entry is the largest
#: value file in the cache folder the cudamagic warm-up filled.
FLOOR_SETUP = r"""
import glob as _g, hashlib as _h, html as _html, os as _os, shlex as _shlex, struct as _st
from IPython.core.magic import no_var_expand as _literal, register_cell_magic as _reg
from IPython.display import display as _display
_VALUE = max(_g.glob(_os.path.join(_os.environ["CUDAMAGIC_CACHE_DIR"], "**", "*.val"),
                     recursive=True), key=_os.path.getsize)

def _symbols(elf):
    shoff, = _st.unpack_from("<Q", elf, 0x28)
    size, count = _st.unpack_from("<HH", elf, 0x3A)
    secs = [_st.unpack_from("<IIQQQQIIQQ", elf, shoff + i * size) for i in range(count)]
    for sec in secs:
        if sec[1] == 2:  # SHT_SYMTAB, its strings in the section sh_link names
            names = secs[sec[6]][4]
            table = elf[sec[4]:sec[4] + sec[5]]
            return [elf[names + n:elf.index(b"\0", names + n)].decode()
                    for n, info, _, _, _, _ in _st.iter_unpack("<IBBHQQ", table)
                    if info in (0x12, 0x22)]  # STT_FUNC, STB_GLOBAL or STB_WEAK (templates)
    return []

@_reg
@_literal  # as %%cuda: no $var expansion of a line of a thousand options
def floor(line, cell):
    names = _shlex.split(line)[1::2]
    with open(_VALUE, "rb") as f:
        data = f.read()
    _h.sha256(data).digest()
    kernels = dict(zip(names, _symbols(data[data.find(b"\x7fELF"):])))
    rows = "".join(f"<tr><td>{_html.escape(k)}</td><td>{_html.escape(v)}</td></tr>"
                   for k, v in list(kernels.items())[:50])
    _display({"text/html": f"<table>{rows}</table>", "text/plain": f"{len(kernels)} kernels"},
             raw=True)
    globals()["floor_kernels"] = len(kernels)
"""
CHECK_FLOOR = 'print("BENCH-CHECK " + __import__("json").dumps({"kernels": floor_kernels}))'

TOOLS = ("cudamagic", "cupy", "floor")


class MissedCache(AssertionError):
    """A timed run was not served from its cache: its number would be a compile's."""


def notebook(tool: str, kind: str, n: int, gpu: bool) -> list[str]:
    """The cells of one tool's notebook (the last one is the untimed check)."""
    if tool == "cudamagic":
        return [cell0(True, gpu), cuda_cell(kind, n), *(["cuda_module.load()"] if gpu else []),
                CHECK_CUDAMAGIC]
    if tool == "floor":
        return [cell0(False, gpu) + "\n" + FLOOR_SETUP,
                cuda_cell(kind, n).replace("%%cuda ", "%%floor ", 1), CHECK_FLOOR]
    return [cell0(False, gpu), cupy_cell(kind, n, cupy_options()), CHECK_CUPY]


def _files(folder: str) -> int:
    return sum(len(fs) for _, _, fs in os.walk(folder))


def _checked(tool: str, run, n: int, cupy_cache: str | None, cupy_files: int | None) -> dict:
    """The run's check cell says it was a hit with ``n`` kernels; else :class:`MissedCache`."""
    line = next((ln for ln in run.cells[-1].text("stdout").splitlines()
                 if ln.startswith("BENCH-CHECK ")), None)
    if line is None:
        raise MissedCache(f"{tool}: the check cell printed nothing:\n{run.cells[-1].text()}")
    check = json.loads(line.split(" ", 1)[1])
    if check.get("kernels") not in (None, n):
        raise MissedCache(f"{tool}: {check['kernels']} kernels, expected {n}")
    if tool == "cudamagic":
        if not check["hit"]:
            raise MissedCache("cudamagic: the warm %%cuda cell was not a cache hit; its time "
                              "would be a compile's")
        shown = [o for o in run.cells[1].outputs if o.get("output_type") == "display_data"]
        if not shown:
            raise MissedCache("cudamagic: the %%cuda cell displayed no report (was -q given?)")
        if not any("cache hit" in o.get("data", {}).get("text/plain", "") for o in shown):
            print("  warning: the report's text/plain does not say 'cache hit' (module.hit did)",
                  flush=True)
    elif cupy_files is not None and _files(cupy_cache) != cupy_files:
        raise MissedCache(f"CuPy: its cache folder went from {cupy_files} to "
                          f"{_files(cupy_cache)} files: a timed run compiled")
    return check


def measure(kind: str, n: int, repeats: int, gpu: bool, pause: float = 0.0,
            timeout: int = 600) -> dict:
    """Warm up both notebooks, then ``repeats`` alternated timed runs of each; the raw seconds."""
    tools = TOOLS if gpu else ("cudamagic", "floor")
    work = tempfile.mkdtemp(prefix="cudamagic-cell-")
    caches = {"cudamagic": os.path.join(work, "cudamagic-cache"),
              "cupy": os.path.join(work, "cupy-cache")}
    for d in caches.values():
        os.makedirs(d)
    env = {"CUDAMAGIC_CACHE_DIR": caches["cudamagic"], "CUPY_CACHE_DIR": caches["cupy"]}
    cells = {t: notebook(t, kind, n, gpu) for t in tools}
    pause_before = {1: pause} if pause else None

    def once(tool: str):
        return run_notebook(cells[tool], cwd=work, env=env, timeout=timeout,
                            pause_before=pause_before)

    cupy_files = None
    for tool in tools:   # the untimed warm-up: fills both caches and the bytecode
        t = time.perf_counter()
        once(tool)
        print(f"  {kind} {n:>4} names: warm-up {tool} {time.perf_counter() - t:.1f} s", flush=True)
    if gpu:
        cupy_files = _files(caches["cupy"])
        if not cupy_files:
            raise MissedCache(f"CuPy's warm-up left nothing in CUPY_CACHE_DIR={caches['cupy']}")
    raw: dict[str, dict[str, list[float]]] = {t: {} for t in tools}
    for r in range(repeats):
        for tool in tools:
            run = once(tool)
            _checked(tool, run, n, caches["cupy"], cupy_files)
            got = {"cell": run.cells[1].kernel_s, "cell_client": run.cells[1].client_s,
                   "cell0": run.cells[0].kernel_s, "notebook": run.span(0, 1),
                   "notebook_client": run.client_span(0, 1), "kernel_start": run.kernel_start_s}
            if tool == "cudamagic" and gpu:
                got["load"] = run.cells[2].kernel_s
                got["cell_load"] = run.span(1, 2)
            for k, v in got.items():
                raw[tool].setdefault(k, []).append(v)
            print(f"  {kind} {n:>4} names: run {r + 1}/{repeats} {tool:9} cell "
                  f"{got['cell'] * 1e3:8.1f} ms (client {got['cell_client'] * 1e3:8.1f}), cell 0 "
                  f"{got['cell0'] * 1e3:7.1f} ms, notebook {got['notebook'] * 1e3:7.1f} ms",
                  flush=True)
    return {"source": kind, "names": n, "raw": raw,
            "median": {t: {k: median(v) for k, v in m.items()} for t, m in raw.items()}}


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"{a / b:.2f}x"


def table(cases: list[dict], gpu: bool = True) -> tuple[list[str], dict]:
    """The markdown table and the summary figures (cell 0, ``%load_ext``'s share)."""
    rows = ["| case | cudamagic ms | CuPy ms | ratio | client-side ms, cudamagic / CuPy |",
            "| --- | ---: | ---: | ---: | --- |"]

    def add(what: str, ours_key: str, theirs_key: str | None, client_key: str | None = None):
        for c in cases:
            med = c["median"]
            ours = med["cudamagic"].get(ours_key)
            if ours is None:
                continue
            theirs = med.get("cupy", {}).get(theirs_key) if theirs_key else None
            client = "–"
            if client_key:
                client = f"{_ms(med['cudamagic'][client_key])} / " \
                         f"{_ms(med.get('cupy', {}).get(client_key))}"
            label = f"{c['source']}, {c['names']} name{'s' if c['names'] != 1 else ''}"
            rows.append(f"| {what}: {label} | {_ms(ours)} | {_ms(theirs)} | "
                        f"{_ratio(ours, theirs)} | {client} |")

    add("cell", "cell", "cell", "cell_client")
    add("cell + load()", "cell_load", "cell")
    add("notebook", "notebook", "notebook", "notebook_client")
    for c in cases:  # the floor: the least a warm cell can do (FLOOR_SETUP), same kernel, same run
        floor = c["median"].get("floor", {}).get("cell")
        if floor is not None:
            ours = c["median"]["cudamagic"]["cell"]
            label = f"{c['source']}, {c['names']} name{'s' if c['names'] != 1 else ''}"
            rows.append(f"| floor: {label} (cudamagic / floor in the ratio column) | "
                        f"{_ms(floor)} | | {_ratio(ours, floor)} | – |")
    # cell 0 is the same in every case: pool the runs
    pooled = {t: [x for c in cases for x in c["raw"].get(t, {}).get("cell0", [])] for t in TOOLS}
    cell0 = {t: median(v) if v else None for t, v in pooled.items()}
    rows.append(f"| cell 0 (import CuPy{', context' if gpu else ''}; cudamagic: + %load_ext), "
                f"all cases | "
                f"{_ms(cell0['cudamagic'])} | {_ms(cell0['cupy'])} | "
                f"{_ratio(cell0['cudamagic'], cell0['cupy'])} | – |")
    share = None if cell0["cupy"] is None else cell0["cudamagic"] - cell0["cupy"]
    if share is not None:
        rows.append(f"| %load_ext's share of cell 0 (difference of medians; target < 300 ms: "
                    f"{'met' if share < 0.3 else 'NOT met'}) | {_ms(share)} | | | |")
    return rows, {"cell0": cell0, "load_ext_share": share}


def run(sizes=(1, 10, 100, 1000), cccl: int = 10, repeats: int = 5, dry_run: bool | None = None,
        pause: float = 0.0, json_path: str | None = None, timeout: int = 600) -> dict:
    """Measure every case, print the markdown table, write the JSON; return the results."""
    gpu = gpu_available() if dry_run is None else not dry_run
    if dry_run is None and not gpu:
        print("  (no GPU: dry run, the cudamagic notebook only, compile-only)", flush=True)
    cases_spec = [("small", n) for n in sizes] + ([("cccl", cccl)] if cccl else [])
    t0 = time.perf_counter()
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
              "versions": versions(), "mode": "gpu" if gpu else "dry-run (no GPU, compile-only)",
              "repeats": repeats, "pause_before_cell_s": pause, "cases": []}
    for kind, n in cases_spec:
        result["cases"].append(measure(kind, n, repeats, gpu, pause, timeout))
        if json_path:   # after every case, so that a run cut short keeps what it measured
            _write(json_path, {**result, "complete": False})
    rows, summary = table(result["cases"], gpu)
    result.update(summary=summary, table=rows, wall_s=time.perf_counter() - t0, complete=True)
    print(f"\n### Warm %%cuda cell vs CuPy, fresh Jupyter kernels ({result['mode']}), median of "
          f"{repeats}, alternated\n\n{result['date']}; {result['machine']}\n"
          + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + "\n")
    print("\n".join(rows), flush=True)
    print(f"\n(benchmark wall time {result['wall_s']:.0f} s)")
    if json_path:
        _write(json_path, result)
        print(f"results in {json_path}")
    return result


def _write(path: str, result: dict) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per notebook (default 5)")
    ap.add_argument("--sizes", default="1,10,100,1000",
                    help="name counts of the small template (default 1,10,100,1000)")
    ap.add_argument("--cccl", type=int, default=10,
                    help="names of the CUB BlockReduce + cuda::std::complex case; 0 skips it")
    ap.add_argument("--dry-run", action="store_true", default=None,
                    help="no GPU work: the cudamagic notebook only, compile-only (automatic "
                         "where no GPU answers)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds the client waits before sending the %%%%cuda cell (0: Run All)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    a = ap.parse_args()
    sizes = tuple(int(s) for s in a.sizes.split(",") if s.strip())
    run(sizes, a.cccl, a.repeats, a.dry_run, a.pause, a.json, a.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
