"""The CPU-side costs of a tool run (kernel.sanitize / kernel.profile), measured where they can
be without a GPU: the child's start with the module's payload (interpreter, imports, the
module's arrival, the capture's decoding), compute-sanitizer's own start, the -lineinfo build
(a miss, then a hit), and a capture's encoding and decoding; with a GPU, also the whole
kernel.sanitize under each tool and kernel.profile, against the same launch run in the
notebook's process. docs/debugging-design.md has the numbers.

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
from cudamagic.toolchain.tools import tools  # noqa: E402
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
        if cudamagic.gpu_available():
            _on_the_gpu(str(cache))


def _on_the_gpu(cache: str) -> None:
    """kernel.sanitize (each planted bug's tool) and kernel.profile end to end: the capture,
    the child, the tool, the report read; against the launch itself, here."""
    import cupy as cp

    from tests.planted import PROFILE_N, PROFILE_SOURCE, fixed_args

    for p in PLANTED:
        k = cudamagic.build(p.fixed, cache=cache)[p.name]
        args = tuple(cp.full(v, 3.0, dtype=cp.float32) if kind == "f32" else int(v)
                     for kind, v in fixed_args(p))

        def launch():
            k((p.grid,), (p.block,), args)
            cp.cuda.Device().synchronize()

        launch()
        here = _median(launch)
        run = _median(lambda: k.sanitize((p.grid,), (p.block,), args, tool=p.tool), n=3)
        print(f"sanitize {p.name} ({p.tool}): {run:.2f} s (the launch here {here * 1e3:.2f} ms)")
    mod = cudamagic.build(PROFILE_SOURCE, cache=cache)
    a, b = cp.ones(PROFILE_N, cp.float32), cp.zeros(PROFILE_N, cp.float32)
    for name, args in (("copy", (a, b, PROFILE_N)), ("burn", (a, PROFILE_N, 2000))):
        grid = (PROFILE_N // 256,)
        run = _median(lambda: mod[name].profile(grid, (256,), args), n=3)
        bench = mod[name].bench(grid, (256,), args, repeat=20).timings[0].median
        print(f"profile {name}: {run:.2f} s (the kernel itself {bench:.3f} ms)")


if __name__ == "__main__":
    main()
