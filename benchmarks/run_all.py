"""Every benchmark in one run: first the headline, the warm ``%%cuda`` cell in real Jupyter
kernels against CuPy (warm_cell.py: what a user waits for), then the API-level benchmarks
(build(), restore, compile, launch: the pipeline without Jupyter), each section with its table.

On the GPU machine: python3 benchmarks/run_all.py  (scripts/device.sh bench does this). About
7 minutes: the cell section about 4, the API section about 3; --quick cuts the cell section to
about 2. Under a 10-minute limit per command, run the sections apart: --sections cell, then
--sections api.
Without a GPU the cell section is warm_cell.py's dry run (cudamagic only, compile-only, small
sizes) and the API benchmarks that need a GPU are left out and say so.
"""

from __future__ import annotations

import argparse
import sys
import time

from common import gpu_available, machine

Row = tuple[str, str, str, bool]   # (what, measured, target, met)


def cell_section(quick: bool, gpu: bool, json_path: str | None) -> list[Row]:
    """The headline: warm %%cuda cell, whole notebook and cell 0, against CuPy."""
    import warm_cell

    if gpu:
        sizes, repeats = ((10, 1000), 3) if quick else ((1, 10, 100, 1000), 5)
        res = warm_cell.run(sizes, cccl=10, repeats=repeats, dry_run=False, json_path=json_path)
    else:
        res = warm_cell.run((1, 10), cccl=0, repeats=3, dry_run=True, json_path=json_path)
    rows: list[Row] = []
    for c in res["cases"]:
        med, label = c["median"], f"{c['source']}, {c['names']} names"
        ours, theirs = med["cudamagic"], med.get("cupy")
        for key, what in (("cell", "warm %%cuda cell"), ("notebook", "notebook, cell 0 -> 1")):
            if theirs:
                measured = (f"{ours[key] * 1e3:.1f} ms vs CuPy {theirs[key] * 1e3:.1f} ms "
                            f"({ours[key] / theirs[key]:.2f}x)")
            else:
                measured = f"{ours[key] * 1e3:.1f} ms (dry run: no CuPy)"
            rows.append((f"{what} ({label})", measured, "-", True))
    share = res["summary"]["load_ext_share"]
    cell0 = res["summary"]["cell0"]
    if share is not None:
        rows.append(("%load_ext's share of cell 0", f"{share * 1e3:.1f} ms (cell 0 "
                     f"{cell0['cudamagic'] * 1e3:.0f} vs CuPy's {cell0['cupy'] * 1e3:.0f} ms)",
                     "< 300 ms", share < 0.3))
    else:
        rows.append(("cell 0: import CuPy + %load_ext (dry run)",
                     f"{cell0['cudamagic'] * 1e3:.1f} ms", "-", True))
    return rows


def api_section(gpu: bool) -> list[Row]:
    """The pipeline without Jupyter: start-up, cache scale, cold compile, restore."""
    import cache_scale
    import cold_compile
    import startup

    results: list[Row] = []
    s = startup.run()
    results.append(("%load_ext cudamagic (fresh IPython)", f"{s['seconds'] * 1e3:.1f} ms",
                    "< 300 ms", s["seconds"] < 0.3))
    rows = cache_scale.run()
    spread = max(r["seconds"] for r in rows) / min(r["seconds"] for r in rows)
    results.append(("hit lookup, 10 -> 10 000 entries",
                    " / ".join(f"{r['seconds'] * 1e3:.2f}" for r in rows) + " ms",
                    "flat within 2x", spread <= 2))
    for r in cold_compile.run():
        over = r["miss"] / r["bare"] - 1
        allowed = max(0.001, 0.05 * r["bare"])
        results.append((f"cold compile overhead ({r['source']}, {r['names']} names)",
                        f"{(r['miss'] - r['bare']) * 1e3:+.1f} ms, {over * 100:+.1f}% "
                        f"({r['miss'] * 1e3:.0f} vs {r['bare'] * 1e3:.0f} ms)",
                        "<= 1 ms or 5%", r["miss"] - r["bare"] <= allowed))
        results.append((f"header check on a hit ({r['source']}, {r['headers']} headers)",
                        f"{(r['manifest_read'] + r['manifest_check']) * 1e3:.2f} ms", "-", True))
    if not gpu:
        print("  (no GPU: warm restore needs one and was not run)")
        return results
    import warm_restore

    rows = warm_restore.run()
    for r in rows:
        ratio = r["cudamagic"] / r["cupy"]
        results.append((f"warm restore ({r['source']}, {r['names']} names)",
                        f"{r['cudamagic'] * 1e3:.2f} ms vs CuPy {r['cupy'] * 1e3:.2f} ms "
                        f"({ratio:.3f}x); cell {r['cell'] * 1e3:.2f}, cold import "
                        f"{r['cold-import'] * 1e3:.2f} ms", "<= 1/3 of CuPy", ratio <= 1 / 3))
    print("  (launch overhead: benchmarks/launch_overhead.py, every call shape)")
    return results


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n{title}\n{'benchmark':50} {'measured':52} {'target':28} met")
    for what, measured, target, met in rows:
        print(f"{what:50} {measured:52} {target:28} {'yes' if met else 'NO'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="cell,api", help="cell, api or both (default)")
    ap.add_argument("--quick", action="store_true",
                    help="cell section at 10 and 1000 names (+ CCCL), 3 runs each")
    ap.add_argument("--json", help="write the cell section's results here")
    a = ap.parse_args()
    sections = {s.strip() for s in a.sections.split(",")}
    gpu = gpu_available()
    print(f"cudamagic benchmarks, {time.strftime('%Y-%m-%d')}: {machine()}", flush=True)
    tables = []
    if "cell" in sections:
        print("\n## 1. Headline: the warm %%cuda cell in Jupyter kernels, against CuPy "
              "(warm_cell.py)", flush=True)
        tables.append(("1. the warm %%cuda cell as a user waits for it (nbclient, fresh kernels)",
                       cell_section(a.quick, gpu, a.json)))
    if "api" in sections:
        print("\n## 2. API-level benchmarks: the pipeline without Jupyter", flush=True)
        tables.append(("2. API level: build(), restore, compile, launch (no Jupyter, no report)",
                       api_section(gpu)))
    for title, rows in tables:
        print_table(title, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
