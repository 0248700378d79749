"""What every thread of the Jupyter kernel does, cell by cell and between cells, while the whole
notebook of benchmarks/whole_notebook.py runs: a stack sampler inside the kernel.

The sampler is a thread started at the top of the setup cell; every millisecond it records each
other thread's innermost frames (``sys._current_frames``). The last cell writes the samples to a
file; here they are split by the kernel's own dates into the setup cell, the gap to the build
cell, the build cell, the gap to the launch cell and the launch cell, and for each window every
thread that was not idle (waiting in ``select``, the heartbeat, the pipe watchers) is listed with
its most frequent stacks. The sampler needs the GIL to take a sample: a window with far fewer
samples than milliseconds had a thread holding it.

    python3 benchmarks/notebook_threads.py [--tool cudamagic|cupy|both] [--names 10] [--runs 2]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import sys
import tempfile

import whole_notebook
from common import gpu_available, run_notebook

SAMPLER = r'''
import sys as _bench_sys, threading as _bench_th, time as _bench_tm, json as _bench_js
_bench_samples, _bench_stop = [], []
def _bench_sample():
    me = _bench_th.get_ident()
    while not _bench_stop:
        names = {t.ident: t.name for t in _bench_th.enumerate()}
        now = _bench_tm.time()
        for ident, f in _bench_sys._current_frames().items():
            if ident == me:
                continue
            stack = []
            while f is not None and len(stack) < 4:
                stack.append(f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_code.co_name}")
                f = f.f_back
            _bench_samples.append((now, names.get(ident, str(ident)), stack))
        _bench_tm.sleep(0.001)
_bench_th.Thread(target=_bench_sample, name="bench-sampler", daemon=True).start()
'''
DUMP = '_bench_stop.append(1); _bench_tm.sleep(0.01)\nopen({path!r}, "w").write(_bench_js.dumps(_bench_samples))'
IDLE = ("select", "parentpoller.py:run", "_watch_pipe_fd", "heartbeat.py:run", "__init__.py:device",
        "threading.py:wait")


def _epoch(d: datetime.datetime) -> float:
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def windows(run) -> list[tuple[str, float, float]]:
    """The cells and the gaps between them, by the kernel's dates (epoch seconds)."""
    c = run.cells
    out = [("setup cell", c[0].started, c[0].replied), ("gap to the build cell", c[0].replied,
                                                         c[1].started),
           ("build cell", c[1].started, c[1].replied)]
    if len(c) > 4:  # setup, build, launch, dump, check
        out += [("gap to the launch cell", c[1].replied, c[2].started),
                ("launch cell", c[2].started, c[2].replied)]
    return [(w, _epoch(a), _epoch(b)) for w, a, b in out]


def summary(run, samples: list, label: str, top: int = 5) -> list[str]:
    """Each window's busy threads and their most frequent stacks."""
    lines = [f"## {label}"]
    for what, a, b in windows(run):
        lines.append(f"### {what}: {1e3 * (b - a):.1f} ms")
        by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for t, thread, stack in samples:
            if a <= t < b and stack:
                by[thread][" < ".join(stack)] += 1
        for thread, stacks in by.items():
            busy = {s: n for s, n in stacks.items() if not any(i in s.split(" < ")[0]
                                                                for i in IDLE)}
            if not busy:
                continue
            lines.append(f"  {thread}: {sum(stacks.values())} samples, {sum(busy.values())} busy")
            lines += [f"    {n:4d}  {s}" for s, n in collections.Counter(busy).most_common(top)]
    return lines


def run(tools=("cudamagic", "cupy"), n: int = 10, runs: int = 2) -> list[str]:
    gpu = gpu_available()
    out = []
    for tool in tools:
        work = tempfile.mkdtemp(prefix="cudamagic-threads-")
        env = {"CUDAMAGIC_CACHE_DIR": os.path.join(work, "c"),
               "CUPY_CACHE_DIR": os.path.join(work, "p")}
        cells = whole_notebook.notebook(tool, "small", n, gpu)
        run_notebook(cells, cwd=work, env=env)  # untimed: fills the cache and the bytecode
        for r in range(runs):
            path = os.path.join(work, f"samples-{r}.json")
            sampled = [SAMPLER + cells[0], *cells[1:-1], DUMP.format(path=path), cells[-1]]
            done = run_notebook(sampled, cwd=work, env=env)
            with open(path) as f:
                out += summary(done, json.load(f), f"{tool}, {n} names, run {r + 1}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tool", choices=("cudamagic", "cupy", "both"), default="both")
    ap.add_argument("--names", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    tools = ("cudamagic", "cupy") if a.tool == "both" else (a.tool,)
    print("\n".join(run(tools, a.names, a.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
