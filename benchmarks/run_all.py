"""Every benchmark in one run, then one table of results against the targets.

On the GPU machine: python benchmarks/run_all.py  (scripts/device.sh bench does this)
Without a GPU, the benchmarks that need one are left out and say so.
"""

from __future__ import annotations

import sys
import time

import cache_scale
import cold_compile
import startup
from common import machine

from cudamagic import driver


def main() -> int:
    print(f"cudamagic benchmarks, {time.strftime('%Y-%m-%d')}: {machine()}", flush=True)
    results: list[tuple[str, str, str, bool]] = []  # (what, measured, target, met)

    s = startup.run()
    results.append(("%load_ext cudamagic", f"{s['seconds'] * 1e3:.1f} ms", "< 300 ms",
                    s["seconds"] < 0.3))
    rows = cache_scale.run()
    spread = max(r["seconds"] for r in rows) / min(r["seconds"] for r in rows)
    results.append(("hit lookup, 10 -> 10 000 entries",
                    " / ".join(f"{r['seconds'] * 1e3:.2f}" for r in rows) + " ms",
                    "flat within 2x", spread <= 2))
    for r in cold_compile.run():
        over = r["cudamagic"] / r["nvrtc"] - 1
        results.append((f"cold compile overhead ({r['source']}, {r['names']} names)",
                        f"{over * 100:+.1f}% ({r['cudamagic'] * 1e3:.0f} vs {r['nvrtc'] * 1e3:.0f} ms)",
                        "< 5%", over < 0.05))
    if driver.available():
        import launch_overhead
        import warm_restore

        rows = warm_restore.run()
        for r in rows:
            ratio = r["cudamagic"] / r["cupy"]
            target, met = "-", True
            if r["names"] == 10:
                target, met = "<= 1/3 of CuPy and < 10 ms", ratio <= 1 / 3 and r["cudamagic"] < 0.01
            if r["names"] == 1000:
                target, met = "< 50 ms", r["cudamagic"] < 0.05
            results.append((f"warm restore ({r['source']}, {r['names']} names)",
                            f"{r['cudamagic'] * 1e3:.2f} ms vs CuPy {r['cupy'] * 1e3:.2f} ms "
                            f"({ratio:.3f}x); cell {r['cell'] * 1e3:.2f}, cold import "
                            f"{r['cold-import'] * 1e3:.2f} ms", target, met))
        small = {r["names"]: r["cudamagic"] for r in rows if r["source"] == "small"}
        growth = small[1000] / small[100]
        results.append(("warm restore growth, 100 -> 1000 names", f"{growth:.1f}x",
                        "<= 10x (linear)", growth <= 10))
        cp_launch = launch_overhead
        cp_launch.cp.cuda.Device(0).synchronize()
        lrows = [(n, cp_launch.host_per_launch(fn, 200, 256)) for n, fn in cp_launch.paths()]
        cupy_t = next(t for n, t in lrows if n.startswith("CuPy"))
        for n, t in lrows:
            print(f"  launch {n:50} {t * 1e6:7.2f} us  ({t / cupy_t:.2f}x CuPy)", flush=True)
        ours = max(t for n, t in lrows if n.startswith("cudamagic"))
        results.append(("launch overhead (host, per launch)",
                        f"{ours * 1e6:.2f} us vs CuPy {cupy_t * 1e6:.2f} us ({ours / cupy_t:.2f}x)",
                        "<= CuPy", ours <= cupy_t))
    else:
        print("  (no GPU: warm restore and launch overhead need one and were not run)")

    print(f"\n{'benchmark':45} {'measured':48} {'target':28} met")
    for what, measured, target, met in results:
        print(f"{what:45} {measured:48} {target:28} {'yes' if met else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
