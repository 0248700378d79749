"""Execute a notebook end to end in a real Jupyter kernel and save the executed copy.

Usage: python scripts/run_notebook.py notebooks/quickstart.ipynb [--out artifacts/]
Prints each cell's output as a terminal would show it (reports as text, errors as their message,
pictures as a placeholder). Exits non-zero when a cell raises, except the cells tagged
``raises-exception`` (the quickstart's deliberate errors), which must raise. Without a GPU the
quickstart compiles only (its launch cells say so and skip).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

EXPECTED = "raises-exception"


def _shown(out) -> str:
    """One output as text: a stream's text, an error's own lines (cudamagic's errors render
    without a traceback), a display's text/plain, a picture as a placeholder."""
    if out.get("output_type") == "error":
        return "\n".join(out.get("traceback") or [f"{out.get('ename')}: {out.get('evalue')}"])
    if "text" in out:
        return out["text"]
    data = out.get("data", {})
    pictures = [m for m in data if m.startswith("image/")]
    if pictures:
        return f"[{pictures[0]} picture]"
    return data.get("text/plain", "")


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
    silent = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        raised = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        if EXPECTED in cell.get("metadata", {}).get("tags", []) and not raised:
            silent.append(i)
        for out in cell.get("outputs", []):
            text = _shown(out)
            if text:
                print(text.rstrip())
    seconds = time.perf_counter() - start
    if silent:
        print(f"\n{args.notebook}: cells {silent} are tagged {EXPECTED} but raised nothing",
              file=sys.stderr)
        return 1
    print(f"\n{args.notebook}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells ran in "
          f"{seconds:.1f} s; executed copy in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
