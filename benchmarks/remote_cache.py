"""The team cache on loopback: a remote hit in a fresh process against a local hit and a compile.

For 10 and 1 000 name expressions of a small template and for the CCCL cell: one process
compiles (its cache folder empty, the server empty), a fresh process with another empty folder
takes the record from the server (remote hit), a third fresh process with that folder serves it
locally (local hit). Each row is the build's own time (``report.timings["total"]``) and, for the
remote hit, the server's part. The background store's cost to the compiling cell is the compile
with the tier on against the same compile with it off (both in fresh processes, cache empty).

    python benchmarks/remote_cache.py [--repeat 3] [--quick]

A second machine's first cell is the remote hit: ``compile_over_remote_hit`` is how many times
faster it is than compiling (both in fresh processes, this run). Needs ``redis-server``
(Debian's package, or ``$CUDAMAGIC_TEST_REDIS_SERVER``: ``bash scripts/device.sh remote`` on
the GPU machine); the server runs on 127.0.0.1 with nothing saved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import SOURCES, bench_env, median, names  # noqa: E402

from tests.redis_server import start_server  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from cudamagic import build
from cudamagic.store import KernelCache
spec = json.loads(sys.argv[1])
cache = KernelCache(spec["cache"], remote=None if spec["remote"] else False)
t = time.perf_counter()
m = build(spec["source"], name_expressions=spec["names"], cache=cache)
wall = time.perf_counter() - t
if cache.remote is not None:
    cache.remote.flush(60)
print(json.dumps({"status": m.report.status, "total": m.report.timings["total"], "wall": wall,
                  "remote": m.report.timings.get("remote", 0.0)}))
"""


def _child(spec: dict, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True,
                         text=True, env=env, check=True, timeout=900).stdout
    return json.loads(out.strip().splitlines()[-1])


def _case(kind: str, n: int, server, key: str, root: Path) -> dict:
    source, _ = SOURCES[kind]
    env = bench_env({"CUDAMAGIC_REMOTE_CACHE": server.url, "CUDAMAGIC_REMOTE_KEY_FILE": key})
    server.client().flushall()
    spec = {"source": source, "names": names(kind, n), "remote": True}
    a, b = tempfile.mkdtemp(dir=root), tempfile.mkdtemp(dir=root)
    compiled = _child({**spec, "cache": a}, env)
    remote = _child({**spec, "cache": b}, env)
    local = _child({**spec, "cache": b}, env)
    off = _child({**spec, "cache": tempfile.mkdtemp(dir=root), "remote": False}, env)
    assert (compiled["status"], remote["status"], local["status"]) == (
        "cache miss", "cache hit (remote)", "cache hit"), (compiled, remote, local)
    return {"compile": compiled["total"], "compile_tier_off": off["total"],
            "remote_hit": remote["total"], "remote_part": remote["remote"],
            "local_hit": local["total"]}


def manifest_check(repeat: int) -> dict:
    """The CCCL cell's header check on a hit: the fast path (an entry made here: size, times
    and inode of each packaged header) against the content path (made in another installation:
    every header hashed), in ms of this thread's CPU time, median of ``repeat`` checks in this
    process."""
    import time

    from cudamagic import build
    from cudamagic.store import KernelCache
    from cudamagic.toolchain.compile.manifest import Manifest
    from cudamagic.pipeline.steps import _context, BuildSettings
    from cudamagic.core.options import options_from_args

    source, stem = SOURCES["cccl"]
    cache = KernelCache(tempfile.mkdtemp(), remote=False)
    m = build(source, name_expressions=[f"{stem}<1>"], cache=cache)
    stored = cache.get(m.key)[0].manifest
    search = _context(source, options_from_args([], [f"{stem}<1>"]), BuildSettings(),
                      keyless=True).search

    def timed(data: dict) -> float:
        times = []
        for _ in range(repeat):
            man = Manifest.from_json(data, search)
            t = time.thread_time()  # CPU time: this machine's load shows less in it
            assert man.check() is None
            times.append(time.thread_time() - t)
        return median(times) * 1000

    elsewhere = json.loads(json.dumps(stored))
    for row in elsewhere["files"]:
        row[2:6] = [row[2], 0, 0, 0]  # times and inode of another installation
    return {"headers": len(stored["files"]), "fast_ms": round(timed(stored), 2),
            "content_ms": round(timed(elsewhere), 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10 names and CCCL only")
    ap.add_argument("--only", default=None, help="one case: small:10, small:1000 or cccl:1")
    ap.add_argument("--manifest", action="store_true",
                    help="only the header check's two paths (no server)")
    args = ap.parse_args()
    if args.manifest:
        print(json.dumps({"manifest_check": manifest_check(max(args.repeat, 20))}))
        return
    root = Path(tempfile.mkdtemp(prefix="cudamagic-remote-bench-"))
    key = root / "team.key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    server = start_server(root / "redis")
    cases = [("small", 10), ("cccl", 1)] + ([] if args.quick else [("small", 1000)])
    if args.only:
        kind, n = args.only.split(":")
        cases = [(kind, int(n))]
    try:
        for kind, n in cases:
            runs = [_case(kind, n, server, str(key), root) for _ in range(args.repeat)]
            row = {k: median([r[k] for r in runs]) for k in runs[0]}
            print(json.dumps({"cell": kind, "names": n, "repeat": args.repeat,
                              **{k: round(v * 1000, 2) for k, v in row.items()},
                              "compile_over_remote_hit": round(row["compile"]
                                                               / row["remote_hit"], 1)}))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
