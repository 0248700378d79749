"""Execute a notebook end to end in a real Jupyter kernel and save the executed copy.

Usage: python scripts/run_notebook.py notebooks/quickstart.ipynb [--out artifacts/]
Exits non-zero when a cell raises. Without a GPU the quickstart compiles only (its launch cells
say so and skip).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--out", type=Path, default=Path("artifacts"))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(args.notebook.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as err:
        print(err, file=sys.stderr)
        return 1
    finally:
        args.out.mkdir(parents=True, exist_ok=True)
        dest = args.out / args.notebook.name
        nbformat.write(nb, dest)
    for cell in nb.cells:
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                text = out.get("text") or out.get("data", {}).get("text/plain", "")
                if text:
                    print(text.rstrip())
    print(f"\n{args.notebook}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells ran in "
          f"{time.perf_counter() - start:.1f} s; executed copy in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
