"""Cold compile and the header manifest: what the miss path adds to NVRTC, what the trace costs,
and what checking the manifest costs on a hit.

Per source (the small template and the CUB + cuda::std::complex one, 10 names), alternated in
one process, median of R:

- bare NVRTC: ``compile_cubin`` with cudamagic's options, no trace;
- NVRTC + trace: the same with ``--fdevice-time-trace`` (which lists the headers read);
- cudamagic miss: ``build(force=True)``: key, NVRTC with the trace, the manifest, ELF,
  demangle, resolve, store (the cache folder exists already, as a user's does);
- on a hit: reading the stored manifest back (JSON) and checking it (a stat of every header,
  a folder stat per group of places that must stay empty, a hash of user headers).

Runs with or without a GPU: python benchmarks/cold_compile.py [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from common import SOURCES, machine, median, names

import cudamagic
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from cudamagic.toolchain.compile.deps import Manifest
from cudamagic.core.options import BuildOptions
from cudamagic.pipeline.steps import entry_key


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(repeats: int = 5, n: int = 10) -> list[dict]:
    """Median seconds of each path, per source."""
    rows = []
    for kind in ("small", "cccl"):
        src, exprs = SOURCES[kind][0], names(kind, n)
        _, _, options, _ = entry_key(src, BuildOptions(name_expressions=tuple(exprs)))
        cache = KernelCache(tempfile.mkdtemp())
        t = {"bare": [], "trace": [], "miss": []}
        for _ in range(repeats):
            t["bare"].append(_timed(lambda: compile_cubin(src, exprs, options, trace=False)))
            t["trace"].append(_timed(lambda: compile_cubin(src, exprs, options, trace=True)))
            t["miss"].append(_timed(lambda: cudamagic.build(src, exprs, cache=cache,
                                                            force=True)))
        mod = cudamagic.build(src, exprs, cache=cache)
        assert mod.hit
        record, _ = cache.get(mod.key)
        stored = json.dumps(record.manifest)
        manifest = Manifest.from_json(json.loads(stored))
        read = median([_timed(lambda: Manifest.from_json(json.loads(stored)))
                       for _ in range(50)])
        check = median([_timed(manifest.check) for _ in range(50)])
        places = sum(len(g.places) for g in manifest.absent)
        row = {"source": kind, "names": n, "headers": len(manifest.files),
               "folder_groups": len(manifest.absent), "places": places,
               "present": len(manifest.present), "manifest_bytes": len(stored),
               **{k: median(v) for k, v in t.items()}, "manifest_read": read,
               "manifest_check": check}
        rows.append(row)
        bare = row["bare"]
        print(f"  {kind:5} {n} names, {row['headers']} headers read: bare NVRTC "
              f"{bare * 1e3:8.1f} ms, with trace {row['trace'] * 1e3:8.1f} ms "
              f"({(row['trace'] / bare - 1) * 100:+.1f}%), cudamagic miss "
              f"{row['miss'] * 1e3:8.1f} ms ({(row['miss'] - bare) * 1e3:+.1f} ms, "
              f"{(row['miss'] / bare - 1) * 100:+.1f}%); on a hit: manifest read "
              f"{read * 1e3:.2f} ms + check {check * 1e3:.2f} ms "
              f"({row['folder_groups']} folders, {places} places, "
              f"{len(stored) / 1024:.0f} KiB)", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    print(machine())
    rows = run(args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("CUDAMAGIC_CACHE_DIR", tempfile.mkdtemp())
    main()
