"""Where the warm ``%%cuda`` cell's time goes, profiled inside a real Jupyter kernel.

The notebook of benchmarks/warm_cell.py (cell 0: import CuPy, make the context, ``%load_ext
cudamagic``; cell 1: the ``%%cuda`` cell with its report shown) runs in fresh ``python3`` kernels
through nbclient, served from a temporary cache that an untimed first run fills. Two more runs:

1. Profile. Cell 1 starts pyinstrument (main thread, ``async_mode="disabled"``, 1 ms samples)
   and calls ``get_ipython().run_cell_magic("cuda", line, source)``, so the widget's display and
   its comm messages are inside; the profiler is stopped by the first line of the next cell, so
   what the kernel does after the cell's code (IPython's post-execute hooks, the reply, waiting
   for the next request) is in the profile too. The kernel's own dates split the cell: its
   ``execute_input`` -> ``execute_reply``, the magic's own time, and the rest. Whether
   ``%load_ext``'s background thread (named by ``cudamagic.DRIVER_THREAD``) was still running
   when cell 1 started is reported (the name is read from the package, so a renamed thread fails
   the run instead of reading "already done" for ever): if so, cell 1 waits for it on the import lock. Without pyinstrument
   (the GPU machine's image lacks it unless carried) cProfile stands in.
2. Imports. The kernel runs with ``PYTHONPROFILEIMPORTTIME=1`` (``-X importtime``); every module
   that appeared in ``sys.modules`` during cell 1, or was still being imported when it started
   (by the background import), is listed with its import time: what the cell imports on first
   use, and what it waits for.

Output: a summary, the profile tree, the slowest functions by own time, the imports; on stdout
and in ``--out`` (default artifacts/profile_cell-SOURCE-N.txt).

On the GPU machine (about 30 s each):
    python3 benchmarks/profile_cell.py --names 10 --out $OUT/profile_cell-10.txt
    python3 benchmarks/profile_cell.py --names 1000 --out $OUT/profile_cell-1000.txt
Without a GPU it runs compile-only (no context in cell 0), as warm_cell.py's dry run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from common import (REPO, SOURCES, cell0, cuda_cell, gpu_available, machine, magic_line,
                    run_notebook, versions)

#: defined before cell 0's own lines (imports the profiler, so cell 1 does not pay for that)
PROFILER_SETUP = '''\
import json as _bench_json, threading as _bench_threading, time as _bench_time
try:
    from pyinstrument import Profiler as _BenchProfiler
except ImportError:
    _BenchProfiler = None
import cProfile as _bench_cprofile, io as _bench_io, pstats as _bench_pstats


def _bench_watch_prewarm():
    """Whether %load_ext's background import is still running; a list that gets the moment
    (perf_counter) it ends. The watcher blocks in join(), so it costs the cell nothing."""
    import cudamagic
    ended = []
    name = cudamagic.DRIVER_THREAD  # AttributeError: the harness no longer matches the package
    alive = [t for t in _bench_threading.enumerate() if t.name == name]
    if alive:
        _bench_threading.Thread(target=lambda: (alive[0].join(), ended.append(
            _bench_time.perf_counter())), daemon=True).start()
    return bool(alive), ended


def _bench_imported():
    """Modules fully imported now: one that %load_ext's background import has begun and not
    finished is left out (it counts as the cell's). Reads each module's __dict__ directly, since
    an attribute access would load a lazy module (CuPy has them) and change what is measured."""
    import sys
    done = set()
    for name, mod in list(sys.modules.items()):
        try:
            spec = object.__getattribute__(mod, "__dict__").get("__spec__")
        except Exception:
            spec = None
        if not getattr(spec, "_initializing", False):
            done.add(name)
    return done
'''

PROFILE_START = '''\
_bench_prewarm, _bench_prewarm_end = _bench_watch_prewarm()
if _BenchProfiler is not None:
    _bench_prof = _BenchProfiler(interval={interval}, async_mode="disabled")
else:
    _bench_prof = _bench_cprofile.Profile()
_bench_prof.start() if _BenchProfiler is not None else _bench_prof.enable()
_bench_t0 = _bench_time.perf_counter()
get_ipython().run_cell_magic("cuda", {line!r}, {source!r})
_bench_magic_s = _bench_time.perf_counter() - _bench_t0
'''

PROFILE_STOP = '''\
if _BenchProfiler is not None:
    _bench_prof.stop()
    print(_bench_prof.output_text(unicode=False, color=False, show_all=False))
    print("BENCH-FLAT")
    print(_bench_prof.output_text(unicode=False, color=False, flat=True))
else:
    _bench_prof.disable()
    _s = _bench_io.StringIO()
    _bench_pstats.Stats(_bench_prof, stream=_s).sort_stats("cumulative").print_stats(45)
    print(_s.getvalue())
    print("BENCH-FLAT")
    _s = _bench_io.StringIO()
    _bench_pstats.Stats(_bench_prof, stream=_s).sort_stats("tottime").print_stats(30)
    print(_s.getvalue())
print("BENCH-PROFILE " + _bench_json.dumps({
    "profiler": "pyinstrument" if _BenchProfiler is not None else "cProfile",
    "prewarm_alive": _bench_prewarm, "magic_s": _bench_magic_s, "hit": bool(cuda_module.hit),
    "prewarm_left_s": _bench_prewarm_end[0] - _bench_t0 if _bench_prewarm_end else None}))
'''

IMPORTS_CELL = '''\
import sys as _bench_sys
_bench_before = _bench_imported()
_bench_prewarm, _bench_prewarm_end = _bench_watch_prewarm()
_bench_t0 = _bench_time.perf_counter()
get_ipython().run_cell_magic("cuda", {line!r}, {source!r})
print("BENCH-IMPORTS " + _bench_json.dumps({{
    "new": sorted(set(_bench_sys.modules) - _bench_before), "prewarm_alive": _bench_prewarm,
    "prewarm_left_s": _bench_prewarm_end[0] - _bench_t0 if _bench_prewarm_end else None}}))
'''

_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _tagged(text: str, tag: str) -> dict:
    line = next(ln for ln in text.splitlines() if ln.startswith(tag + " "))
    return json.loads(line.split(" ", 1)[1])


def profile_run(kind: str, n: int, gpu: bool, work: str, env: dict, interval: float,
                pause: float) -> tuple[str, dict]:
    """The profiled notebook: the profile text and the figures around it."""
    line = magic_line(kind, n)
    src = SOURCES[kind][0].strip() + "\n"
    cells = [PROFILER_SETUP + cell0(True, gpu),
             PROFILE_START.format(interval=interval, line=line, source=src), PROFILE_STOP]
    run = run_notebook(cells, cwd=work, env=env, pause_before={1: pause} if pause else None)
    out = run.cells[2].text("stdout")
    figures = _tagged(out, "BENCH-PROFILE")
    if not figures["hit"]:
        raise AssertionError("the profiled %%cuda cell was not a cache hit")
    tree, _, flat = out.split("BENCH-PROFILE")[0].partition("BENCH-FLAT")
    figures.update(cell_s=run.cells[1].kernel_s, cell_client_s=run.cells[1].client_s,
                   cell0_s=run.cells[0].kernel_s,
                   gap_s=(run.cells[2].started - run.cells[1].replied).total_seconds())
    flat_lines = [ln for ln in flat.strip().splitlines() if ln.strip()]
    return tree.rstrip() + "\n\nslowest functions by own time (top 40):\n" + \
        "\n".join(flat_lines[:45]), figures


def imports_run(kind: str, n: int, gpu: bool, work: str, env: dict, pause: float
                ) -> tuple[list[tuple[int, int, str, bool]], dict]:
    """The ``-X importtime`` notebook: (own us, cumulative us, module, outermost) of every
    module imported during cell 1 (by any thread), in import order, and the figures."""
    cells = [PROFILER_SETUP + cell0(True, gpu),
             IMPORTS_CELL.format(line=magic_line(kind, n),
                                 source=SOURCES[kind][0].strip() + "\n")]
    with tempfile.TemporaryFile("w+") as err:
        run = run_notebook(cells, cwd=work, env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
                           kernel_stderr=err, pause_before={1: pause} if pause else None)
        err.seek(0)
        stderr = err.read()
    figures = _tagged(run.cells[1].text("stdout"), "BENCH-IMPORTS")
    new = set(figures.pop("new"))
    rows = []
    for m in _IMPORT_LINE.finditer(stderr):
        name = m.group(4)
        # depth: -X importtime indents a module two spaces per enclosing import
        rows.append((int(m.group(1)), int(m.group(2)), name, len(m.group(3)) // 2, name in new))
        new.discard(name)   # the first report of a module is its import
    # outermost: a counted module whose parent (the next line less indented: -X importtime
    # prints a module after what it imported) is not counted
    kept = []
    for i, (own, cum, name, depth, counted) in enumerate(rows):
        if counted:
            parent = next((r for r in rows[i + 1:] if r[3] < depth), None)
            kept.append((own, cum, name, parent is None or not parent[4]))
    rows = kept
    figures["cell_s"] = run.cells[1].kernel_s
    figures["modules"] = len(rows)
    return rows, figures


def _thread_name() -> str:
    """The name the package gives its background thread (read from it, never spelled here)."""
    import cudamagic

    return cudamagic.DRIVER_THREAD


def _prewarm(fig: dict) -> str:
    if not fig["prewarm_alive"]:
        return "already done"
    left = fig.get("prewarm_left_s")
    return "running, " + ("ended after the cell" if left is None else
                          f"ended {left * 1e3:.1f} ms after the magic was called")


def render(kind: str, n: int, gpu: bool, tree: str, prof: dict,
           imports: list[tuple[int, int, str, bool]], imp: dict, pause: float) -> str:
    top = [r for r in imports if r[3]]
    lines = [
        f"# profile of the warm %%cuda cell: {kind}, {n} name{'s' if n != 1 else ''}, in a fresh "
        f"Jupyter kernel ({'GPU' if gpu else 'no GPU: compile-only'})",
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {machine()}",
        ", ".join(f"{k} {v}" for k, v in versions().items()),
        f"client pause before the %%cuda cell: {pause:.1f} s" if pause else
        "cells sent back to back (Run All)",
        "",
        f"cell 1, kernel dates (execute_input -> execute_reply): {prof['cell_s'] * 1e3:.1f} ms "
        f"(client-side {prof['cell_client_s'] * 1e3:.1f} ms), under {prof['profiler']}",
        f"  inside run_cell_magic:            {prof['magic_s'] * 1e3:.1f} ms",
        f"  outside it (IPython, reply):      {(prof['cell_s'] - prof['magic_s']) * 1e3:.1f} ms",
        f"  cell 1 reply -> next cell's start: {prof['gap_s'] * 1e3:.1f} ms (the front end's "
        "round trip; idle in the profile)",
        f"cell 0 (import CuPy{', context' if gpu else ''}, %load_ext): "
        f"{prof['cell0_s'] * 1e3:.1f} ms",
        f"%load_ext's background thread ({_thread_name()}: the driver and device 0's context) "
        f"when cell 1 started: "
        f"{_prewarm(prof)} (profiled run), {_prewarm(imp)} (import-time run)",
        f"imports during cell 1: {imp['modules']} modules, "
        f"{sum(r[0] for r in imports) / 1e3:.1f} ms summed own time (under -X importtime, "
        f"cell 1 took {imp['cell_s'] * 1e3:.1f} ms)",
        "",
        "## profile (main thread; stopped by the next cell's first line)",
        "", tree, "",
        "## imports during cell 1, outermost first by cumulative time (for an import that the",
        "## background thread began in cell 0, the cumulative time includes that part)",
        "     own ms   cumul. ms  module",
    ]
    lines += [f"  {s / 1e3:9.2f}  {c / 1e3:9.2f}  {name}"
              for s, c, name, _ in sorted(top, key=lambda r: -r[1])]
    lines += ["", "## every module imported during cell 1, slowest own time first (top 40)",
              "     own ms   cumul. ms  module"]
    lines += [f"  {s / 1e3:9.2f}  {c / 1e3:9.2f}  {name}"
              for s, c, name, _ in sorted(imports, key=lambda r: -r[0])[:40]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=10)
    ap.add_argument("--source", choices=("small", "cccl"), default="small")
    ap.add_argument("--dry-run", action="store_true", default=None,
                    help="no GPU work (automatic where no GPU answers)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds the client waits before the %%%%cuda cell (0: Run All)")
    ap.add_argument("--interval", type=float, default=0.001,
                    help="pyinstrument's sample interval, s (a sample costs ~0.1-0.2 ms in a "
                         "kernel's deep stack: at 0.1 ms the profiler is most of the time)")
    ap.add_argument("--out", type=Path, help="default artifacts/profile_cell-SOURCE-N.txt")
    a = ap.parse_args()
    gpu = gpu_available() if a.dry_run is None else not a.dry_run
    work = tempfile.mkdtemp(prefix="cudamagic-profile-")
    env = {"CUDAMAGIC_CACHE_DIR": os.path.join(work, "cudamagic-cache"),
           "CUPY_CACHE_DIR": os.path.join(work, "cupy-cache")}
    t = time.perf_counter()
    run_notebook([cell0(True, gpu), cuda_cell(a.source, a.names)], cwd=work, env=env)
    print(f"  warm-up (fills the cache) {time.perf_counter() - t:.1f} s", flush=True)
    tree, prof = profile_run(a.source, a.names, gpu, work, env, a.interval, a.pause)
    imports, imp = imports_run(a.source, a.names, gpu, work, env, a.pause)
    text = render(a.source, a.names, gpu, tree, prof, imports, imp, a.pause)
    print(text)
    out = a.out or REPO / "artifacts" / f"profile_cell-{a.source}-{a.names}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
