"""Where a fresh process's warm restore spends its time, against its floor.

Each run is a fresh process that imports the pipeline (as warm_restore.py's "cudamagic" does),
makes the CUDA context where there is a GPU, and times ``cudamagic.build(...)`` served from the
cache, then ``.load()`` (GPU only), with the build's own phases and the time outside them. The
same process then times the *floor* of that restore: read the entry's value file, one sha256
over it, the CUBIN's ELF symbol table, a dict of the names to the symbols; cudamagic / floor is
the ratio issue 21's "within 1.5x of the floor" reads (the floor is measured after the build, so
the value file is in the page cache for both). Medians of ``--repeats`` fresh processes, then a
cProfile of one more restore and the slowest imports of a process that makes one
(``python -X importtime``).

Without a GPU it runs compile-only: no context, no load().

    python benchmarks/profile_restore.py --names 1000 [--kind cccl] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from common import REPO, bench_env, fresh, gpu_available, median

CHILD = r"""
import cProfile, glob, hashlib, io, json, os, pstats, struct, sys, time
sys.path.insert(0, "benchmarks")
from common import SOURCES, names
kind, n, cache, gpu, profile = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", \
    sys.argv[5] == "1"
src, exprs = SOURCES[kind][0], names(kind, n)
if gpu:
    import cupy as cp
    cp.cuda.Device(0).synchronize()  # the context exists before the clock starts
import cudamagic, cudamagic.pipeline.steps


def floor():
    # the least a restore can do: the value file, one sha256, the symbol table, a dict
    path = max(glob.glob(os.path.join(cache, "**", "*.val"), recursive=True),
               key=os.path.getsize)
    with open(path, "rb") as f:
        data = f.read()
    hashlib.sha256(data).digest()
    elf = memoryview(data)[data.find(b"\x7fELF"):]
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    count, = struct.unpack_from("<H", elf, 0x3C)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + 64 * i) for i in range(count)]
    symtab = next(h for h in heads if h[1] == 2)
    strings = bytes(elf[heads[symtab[6]][4]:heads[symtab[6]][4] + heads[symtab[6]][5]])
    found = [strings[s[0]:strings.index(b"\0", s[0])].decode()
             for s in struct.iter_unpack("<IBBHQQ", elf[symtab[4]:symtab[4] + symtab[5]])
             if s[1] & 0xF == 2 and s[2] & 0x10]
    return dict(zip(exprs, found))


prof = cProfile.Profile() if profile else None
t = time.perf_counter()
if prof:
    prof.enable()
mod = cudamagic.build(src, exprs, cache=cache)
t_build = time.perf_counter() - t
if gpu:
    mod.load()
t_all = time.perf_counter() - t
if prof:
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
    print(out.getvalue())
t = time.perf_counter()
assert len(floor()) == min(len(exprs), len(mod.image.symbols))
t_floor = time.perf_counter() - t
phases = {k: v * 1e3 for k, v in mod.report.timings.items()}
phases["outside"] = (t_build - mod.report.timings["total"]) * 1e3
phases["load"] = (t_all - t_build) * 1e3
print(json.dumps({"hit": mod.hit, "build": t_build * 1e3, "seconds": t_all, "floor": t_floor * 1e3,
                  "phases": phases}))
"""


def run(kind: str, names: int, repeats: int, gpu: bool) -> dict:
    """Medians over ``repeats`` fresh processes, after one that fills the cache."""
    cache = tempfile.mkdtemp(prefix="cudamagic-profile-restore-")
    args = (kind, str(names), cache, "1" if gpu else "0", "0")
    fresh(CHILD, *args)  # fills the cache
    runs = [fresh(CHILD, *args) for _ in range(repeats)]
    assert all(r["hit"] for r in runs), "a restore missed the cache"
    phases = {k: median(r["phases"][k] for r in runs) for k in runs[0]["phases"]}
    ms = median(r["seconds"] for r in runs) * 1e3
    floor = median(r["floor"] for r in runs)
    return {"kind": kind, "names": names, "ms": ms, "build_ms": median(r["build"] for r in runs),
            "floor_ms": floor, "ratio": ms / floor, "phases": phases, "cache": cache}


def _child(*args: str) -> subprocess.CompletedProcess:
    """A fresh interpreter run as the benchmark's children are (:func:`common.fresh`)."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=bench_env(), cwd=REPO, timeout=900, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=10)
    ap.add_argument("--kind", default="small", choices=("small", "heavy", "cccl"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-profile", action="store_true", help="the medians only")
    a = ap.parse_args()
    gpu = gpu_available()
    row = run(a.kind, a.names, a.repeats, gpu)
    what = "build() + load()" if gpu else "build() (no GPU: compile-only)"
    print(f"{a.kind}, {a.names} names, {what}, median of {a.repeats} fresh processes: "
          f"{row['ms']:.2f} ms; floor {row['floor_ms']:.2f} ms; cudamagic / floor "
          f"{row['ratio']:.2f}")
    print("phases (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in row["phases"].items()))
    if a.no_profile:
        return
    child = (a.kind, str(a.names), row["cache"], "1" if gpu else "0")
    print(_child("-c", CHILD, *child, "1").stdout.rsplit("\n", 2)[0])  # the cProfile
    stderr = _child("-X", "importtime", "-c", CHILD, *child, "0").stderr
    rows = [ln for ln in stderr.splitlines() if ln.startswith("import time:")][1:]
    rows.sort(key=lambda ln: int(ln.split("|")[1]), reverse=True)
    print("slowest imports (self us | cumulative us | module):")
    print("\n".join(rows[:30]))
    print(json.dumps({k: v for k, v in row.items() if k != "cache"}))


if __name__ == "__main__":
    os.chdir(REPO)
    main()
