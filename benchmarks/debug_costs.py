"""The CPU-side costs of a tool run (kernel.sanitize / kernel.profile), measured where they can
be without a GPU: the child's start with the module's payload (interpreter, imports, the
module's arrival, the capture's decoding), compute-sanitizer's own start, the -lineinfo build
(a miss, then a hit), and a capture's encoding and decoding. docs/debugging.md has the numbers.

    python benchmarks/debug_costs.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cudamagic  # noqa: E402
from cudamagic.launch import capture as cap  # noqa: E402
from cudamagic.launch.tool_run import write_run  # noqa: E402
from cudamagic.toolchain import tools  # noqa: E402
from tests.planted import PLANTED  # noqa: E402


def _median(fn, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        t = time.perf_counter()
        mod = cudamagic.build(PLANTED[0].source, cache=str(cache))
        print(f"build (miss): {time.perf_counter() - t:.3f} s")
        t = time.perf_counter()
        mod.debug.lineinfo()
        print(f"-lineinfo build (miss): {time.perf_counter() - t:.3f} s")
        again = cudamagic.build(PLANTED[0].source, cache=str(cache))
        t = time.perf_counter()
        again.debug.lineinfo()
        print(f"-lineinfo build (hit, a new module): {(time.perf_counter() - t) * 1e3:.1f} ms")
        x = cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "x", "<f4", (256,), (4,),
                            0, bytes(1024), 0x1000)
        n = cap.CapturedArg(1, cap.ArgKind.BYTES, (4096).to_bytes(4, "little"), "int", "n")
        c = cap.Capture("oob_write", (1, 1, 1), (256, 1, 1), 0, (x, n))
        folder = Path(tmp) / "run"
        folder.mkdir()
        argv = write_run(folder, c, mod.debug.lineinfo(), 0)
        child = _median(lambda: subprocess.run(argv, env=env, capture_output=True))
        bare = _median(lambda: subprocess.run([sys.executable, "-c", "pass"], env=env))
        print(f"child start to exit (payload arrived, capture decoded; no GPU here): "
              f"{child * 1e3:.0f} ms (a bare interpreter {bare * 1e3:.0f} ms)")
        tool = tools.find(tools.ToolKind.SANITIZER)
        if isinstance(tool, tools.Tool):
            version = _median(lambda: subprocess.run([tool.path, "--version"],
                                                     capture_output=True))
            run = _median(lambda: subprocess.run([tool.path, "--tool", "memcheck", "/bin/true"],
                                                 capture_output=True), n=5)
            print(f"compute-sanitizer --version: {version * 1e3:.0f} ms; "
                  f"compute-sanitizer /bin/true: {run * 1e3:.0f} ms")
        big = cap.CapturedArg(0, cap.ArgKind.ARRAY, bytes(8), "float*", "x", "<f4",
                              (1 << 24,), (4,), 0, bytes(64 << 20), 0x1000)
        c = cap.Capture("k", (1, 1, 1), (1, 1, 1), 0, (big,))
        enc = _median(lambda: cap.encode_capture(c), n=5)
        data = cap.encode_capture(c)
        dec = _median(lambda: cap.decode_capture(data), n=5)
        print(f"capture of 64 MiB: encode {enc * 1e3:.0f} ms, decode {dec * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
