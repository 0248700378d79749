"""Start-up: ``%load_ext cudamagic`` in a fresh IPython against IPython's own start, and the
first ``%%cuda`` cell (a cache hit) after it.

Three kinds of fresh process, alternated, medians: a bare interpreter (``python -c pass``),
IPython's start (``InteractiveShell.instance()``), and that shell loading cudamagic then running
one ``%%cuda`` cell the cache already holds. IPython's start (its import and
``InteractiveShell.instance()``) and ``%load_ext`` are timed inside their processes, the bare
interpreter from outside (what every process pays before either); the budget (issue 30) is
``%load_ext`` at most half of IPython's start. Bytecode is compiled first, as a wheel
install leaves it (common.compile_bytecode). Runs with or without a GPU.

python benchmarks/startup.py [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import SOURCES, bench_env, compile_bytecode, cuda_cell, fresh, machine, median

#: %load_ext's budget against IPython's own start (issue 30: "well under")
LOAD_EXT_BUDGET = 0.5

SHELL = r"""
import json, sys, time
t0 = time.perf_counter()
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t1 = time.perf_counter()
out = {"ipython": t1 - t0}
if sys.argv[1] == "cudamagic":
    ip.run_line_magic("load_ext", "cudamagic")
    t2 = time.perf_counter()
    line, source = sys.argv[2].split("\n", 1)
    ip.run_cell_magic("cuda", line.removeprefix("%%cuda "), source)
    t3 = time.perf_counter()
    out.update({"load_ext": t2 - t1, "first_cell": t3 - t2})
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy",))
print(json.dumps({**out, "heavy": heavy}))
"""


def _bare(env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=bench_env(env))
    return time.perf_counter() - t


def run(repeats: int = 7) -> dict:
    """Medians of a bare interpreter, IPython's start, ``%load_ext`` and the first cell."""
    env = {"CUDAMAGIC_CACHE_DIR": os.path.join(tempfile.mkdtemp(prefix="cudamagic-su-"), "c")}
    compile_bytecode()
    cell = cuda_cell("small", 10)
    fresh(SHELL, "cudamagic", cell, env=env)  # untimed: fills the cache
    raw: dict[str, list[float]] = {"bare": [], "ipython": [], "load_ext": [], "first_cell": []}
    for _ in range(repeats):
        raw["bare"].append(_bare(env))
        raw["ipython"].append(fresh(SHELL, "ipython", env=env)["ipython"])
        got = fresh(SHELL, "cudamagic", cell, env=env)
        assert not got["heavy"], got["heavy"]
        for k in ("load_ext", "first_cell"):
            raw[k].append(got[k])
    row = {k: median(v) for k, v in raw.items()}
    row["seconds"] = row["load_ext"]
    row["ratio"] = row["load_ext"] / row["ipython"]
    row["budget"] = LOAD_EXT_BUDGET
    row["met"] = row["ratio"] <= LOAD_EXT_BUDGET
    print(f"  start-up (median of {repeats}): bare python {row['bare'] * 1e3:.0f} ms, IPython's "
          f"start {row['ipython'] * 1e3:.1f} ms, %load_ext cudamagic {row['load_ext'] * 1e3:.1f} "
          f"ms ({row['ratio']:.2f}x IPython's, budget {LOAD_EXT_BUDGET}x: "
          f"{'met' if row['met'] else 'MISSED'}), first %%cuda cell (hit, 10 names) "
          f"{row['first_cell'] * 1e3:.1f} ms", flush=True)
    return row


def table(row: dict) -> list[str]:
    return ["| bare python | IPython's start | %load_ext | ratio (budget) | first %%cuda hit |",
            "| ---: | ---: | ---: | ---: | ---: |",
            f"| {row['bare'] * 1e3:.0f} ms | {row['ipython'] * 1e3:.1f} ms | "
            f"{row['load_ext'] * 1e3:.1f} ms | {row['ratio']:.2f}x ({row['budget']}x, "
            f"{'met' if row['met'] else 'missed'}) | {row['first_cell'] * 1e3:.1f} ms |"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    print(machine())
    print("\n".join(table(run(ap.parse_args().repeats))))


if __name__ == "__main__":
    main()
