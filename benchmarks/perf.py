"""Issue 21's table in one run, each figure against CuPy measured in the same run (alternated,
medians): the warm ``%%cuda`` cell (warm_cell.py), the whole notebook with a launch cell, cell by
cell (whole_notebook.py), the API restore in a fresh process, context made first (warm_restore.py),
a fresh process with its imports (fresh_process.py), ``%load_ext`` alone (startup.py), and
the first launch part by part (first_launch.py).

Writes ``perf.json`` (every harness's results) and ``perf.md`` (their tables) into ``--out``,
both rewritten after each part so that a run cut short keeps what it measured.

GPU machine (scripts/device.sh perf; about 7 minutes):   python3 benchmarks/perf.py --out $OUT
Here (no GPU: every harness compile-only, cudamagic alone; the restore needs a GPU and is
left out):   .venv/bin/python benchmarks/perf.py --out /tmp/perf --quick

The head line names the commit measured (common.project_commit): git's where this folder is a
work tree's top, else the commit stamped into the copy (``.commit``, or ``CUDAMAGIC_COMMIT``),
and always the git tree hash of ``cudamagic/`` as found (``git rev-parse COMMIT:cudamagic``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

import driver_start
import first_launch
import fresh_process
import whole_notebook
import startup
import warm_cell
import warm_restore
from common import gpu_available, machine, versions


#: seconds the client waits before the ``%%cuda`` cell in the cell-by-cell warm cell
PAUSE_S = 1.0


def parts(gpu: bool, quick: bool, reps: int) -> list[tuple[str, Callable[[], dict], Callable]]:
    """(name, run it, its table from the result) for every part, the headline first: a run cut
    short by the device's limit keeps the parts the issue asks about most."""
    if quick:
        reps = 1
    sizes = (1,) if quick else (10, 1000)
    cccl = 0 if quick else 10
    out = [
        ("whole notebook, cell by cell", lambda: whole_notebook.run(sizes, cccl, reps, not gpu),
         lambda r: r["table"]),
        ("fresh process, imports included",
         lambda: fresh_process.run(sizes, cccl, reps, not gpu),
         lambda r: r["table"]),
        ("warm cell", lambda: warm_cell.run(sizes, cccl, reps, not gpu),
         lambda r: r["table"]),
        # the same notebooks run a cell at a time: the client waits before the %%cuda cell as
        # a person does between cells (the time %load_ext's warm-up has to import the hit path)
        (f"warm cell, run cell by cell ({PAUSE_S:.0f} s before the %%cuda cell)",
         lambda: warm_cell.run(sizes, cccl, reps, not gpu, PAUSE_S), lambda r: r["table"]),
        ("%load_ext against IPython's start, and the first cell",
         lambda: startup.run(3 if quick else 7), startup.table),
        ("the first launch, part by part, against CuPy's first call",
         lambda: first_launch.run(1 if quick else 7, not gpu), first_launch.table),
    ]
    if gpu:
        out.insert(1, ("the driver's start in a fresh process (what %load_ext's thread does)",
                       lambda: {"figures": driver_start.run(5 if not quick else 1)},
                       lambda r: driver_start.table(r["figures"])))
        out.insert(3, ("API restore: build() + load(), context made first",
                       lambda: {"rows": warm_restore.run(
                           reps, {"small": (1, 10, 100, 1000), "cccl": (10,)},
                           ("cupy", "cudamagic"))},
                       lambda r: warm_restore.table(r["rows"])))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for perf.json and perf.md")
    ap.add_argument("--quick", action="store_true", help="one run of one size each: the harness")
    ap.add_argument("--dry-run", action="store_true", help="as without a GPU, even with one")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per tool and case")
    a = ap.parse_args()
    gpu = gpu_available() and not a.dry_run
    os.makedirs(a.out, exist_ok=True)
    found = versions()
    head = (f"cudamagic perf, {time.strftime('%Y-%m-%d %H:%M:%S')}: {machine()}; "
            + ("GPU" if gpu else "no GPU: compile-only, cudamagic alone")
            + f"; cudamagic {found['cudamagic']}")
    print(head, flush=True)
    result: dict = {"head": head, "versions": found, "parts": {}}
    text = [f"# {head}", ""]
    t0 = time.perf_counter()
    for name, measure, tabulate in parts(gpu, a.quick, a.repeats):
        print(f"\n## {name} ({time.perf_counter() - t0:.0f} s in)", flush=True)
        t = time.perf_counter()
        res = measure()
        result["parts"][name] = {**res, "wall_s": time.perf_counter() - t}
        text += [f"## {name} ({time.perf_counter() - t:.0f} s)", "", *tabulate(res), ""]
        with open(os.path.join(a.out, "perf.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)
        with open(os.path.join(a.out, "perf.md"), "w") as f:
            f.write("\n".join(text) + "\n")
    print(f"\n(perf wall time {time.perf_counter() - t0:.0f} s; {a.out}/perf.md, perf.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
