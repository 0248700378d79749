"""Where a fresh process's warm restore spends its time: cProfile of one restore, and the
import times of the modules it loads (python -X importtime), after CuPy made the context.

Run on a GPU machine: python benchmarks/profile_restore.py [--names N]
"""

from __future__ import annotations

import argparse
import tempfile

from common import fresh

CHILD = r"""
import cProfile, io, json, pstats, sys, time
import cupy as cp
sys.path.insert(0, "benchmarks")
from common import SMALL, names
cp.cuda.Device(0).synchronize()
import cudamagic
exprs = names("small", int(sys.argv[1]))
cudamagic_cache = sys.argv[2]
prof = cProfile.Profile()
t = time.perf_counter()
prof.enable()
mod = cudamagic.build(SMALL, exprs, cache=cudamagic_cache).load()
prof.disable()
dt = time.perf_counter() - t
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
print(out.getvalue())
print(json.dumps({"seconds": dt, "hit": mod.hit}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=10)
    n = str(ap.parse_args().names)
    cache = tempfile.mkdtemp()
    fresh(CHILD, n, cache)  # fills the cache
    import subprocess
    import sys
    import os

    from common import REPO

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", CHILD, n, cache],
                          capture_output=True, text=True, env=env, cwd=REPO)
    print(proc.stdout)
    rows = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")][1:]
    rows.sort(key=lambda ln: int(ln.split("|")[1]), reverse=True)
    print("slowest imports (self us | cumulative us | module):")
    print("\n".join(rows[:30]))


if __name__ == "__main__":
    main()
