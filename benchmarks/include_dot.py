"""A CCCL cell with ``-I.`` in a notebook folder of 1 000 unrelated files: is it cached while
other files are written into that folder, and what does its hit cost?

In a fresh temporary folder holding N unrelated files (``--files``, default 1 000), the CCCL
cell of ``common.py`` (10 names) is built with ``-I.`` while a thread writes a checkpoint into
the folder every 50 ms (a training run, a logger, Jupyter's autosave): the first build and
each later one say whether they were a hit, and how long they took. Then, with the writer
stopped, the hit is timed (median of R) twice: the folder as the last build left it, and after
a file was written into it (the folder's time moved: the check looks at the places below it).
``manifest.check()`` alone is timed beside each.

Runs with or without a GPU: python benchmarks/include_dot.py [--files N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from common import SOURCES, machine, median, names

from cudamagic.core.options import options_from_args
from cudamagic.pipeline.steps import build_module
from cudamagic.store.cache import KernelCache
from cudamagic.toolchain.compile.manifest import Manifest


def _writer(folder: Path, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        tmp = folder / "model.pt.tmp"
        tmp.write_bytes(b"w" * 64)
        os.replace(tmp, folder / f"model{n % 3}.pt")
        n += 1
        stop.wait(0.05)


def _hits(src: str, opts, cache: KernelCache, repeats: int) -> tuple[float, float, bool]:
    """Median seconds of a whole hit and of its manifest check, and whether all were hits."""
    times, all_hit = [], True
    for _ in range(repeats):
        t = time.perf_counter()
        mod = build_module(src, opts, cache=cache)
        times.append(time.perf_counter() - t)
        all_hit &= mod.hit
    record, _ = cache.get(mod.key)
    manifest = Manifest.from_json(json.loads(json.dumps(record.manifest)))
    checks = []
    for _ in range(repeats):
        t = time.perf_counter()
        assert manifest.check() is None
        checks.append(time.perf_counter() - t)
    return median(times), median(checks), all_hit


def run(files: int = 1000, repeats: int = 20, builds: int = 3) -> dict:
    src = SOURCES["cccl"][0]
    exprs = names("cccl", 10)
    folder = Path(tempfile.mkdtemp(prefix="notebook-"))
    for i in range(files):
        (folder / f"data{i:04d}.csv").write_text("1,2\n")
    os.chdir(folder)
    cache = KernelCache(tempfile.mkdtemp(prefix="cache-"))
    opts = options_from_args(["-I."], exprs)
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(folder, stop), daemon=True)
    writer.start()
    while_written = []
    for _ in range(builds):
        t = time.perf_counter()
        mod = build_module(src, opts, cache=cache)
        while_written.append({"hit": mod.hit, "seconds": round(time.perf_counter() - t, 4),
                              "not_cached": any("not cached" in w for w in mod.warnings)})
    stop.set()
    writer.join()
    if not any(b["hit"] for b in while_written):  # never stored: store it once, quietly
        assert not build_module(src, opts, cache=cache).hit
    hit, check, all_hit = _hits(src, opts, cache, repeats)
    (folder / "written_after.txt").write_text("x")  # the folder's time moves
    hit_after, check_after, all_hit_after = _hits(src, opts, cache, repeats)
    return {"machine": machine(), "files": files, "while_written": while_written,
            "hit_ms": hit * 1e3, "check_ms": check * 1e3, "all_hit": all_hit,
            "hit_folder_moved_ms": hit_after * 1e3, "check_folder_moved_ms": check_after * 1e3,
            "all_hit_folder_moved": all_hit_after}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--builds", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps(run(args.files, args.repeats, args.builds), indent=1))
