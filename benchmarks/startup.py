"""Start-up: %load_ext cudamagic in a fresh IPython (IPython itself already imported).

Runs with or without a GPU: python benchmarks/startup.py [--repeats R]
"""

from __future__ import annotations

import argparse

from common import fresh, machine, median

CHILD = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter()
ip.run_line_magic("load_ext", "cudamagic")
dt = time.perf_counter() - t
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cuda"))
print(json.dumps({"seconds": dt, "heavy": heavy}))
"""


def run(repeats: int = 7) -> dict:
    """Median seconds of ``%load_ext cudamagic``."""
    runs = [fresh(CHILD) for _ in range(repeats)]
    assert not any(r["heavy"] for r in runs), runs[0]["heavy"]
    row = {"seconds": median(r["seconds"] for r in runs)}
    print(f"  start-up: %load_ext cudamagic {row['seconds'] * 1e3:.1f} ms (median of {repeats})",
          flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    print(machine())
    run(ap.parse_args().repeats)


if __name__ == "__main__":
    main()
