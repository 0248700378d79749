"""The walk of one ``%%cuda`` cell through the package, as the interpreter sees it: every call
into a cudamagic module recorded (``sys.setprofile``), in a fresh IPython shell after
``%load_ext`` and its warm-up, for a cell that is a hit (run once before, unrecorded) or a miss.

Prints, as JSON: the modules in the order the cell first enters them, the number of stays (a
stay: consecutive calls in one module), and the walk by folder (room) with its returns to a
room it had left (the leaf layer, ``core``, and the package's ``__init__`` left out: every room
uses them). docs/architecture.md's "The walk of one cell" is this script's output
(tests/test_layout.py compares them).

Usage: python scripts/walk.py hit|miss  (CUDAMAGIC_CACHE_DIR: a folder of its own)
"""

from __future__ import annotations

import json
import sys

CELL = "template<int N> __global__ void k(float* x) { x[0] = N; }\n"


def room(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "toolchain":
        return "toolchain/" + parts[2]
    return parts[1] if len(parts) > 1 else ""


def main(kind: str) -> dict:
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "cudamagic")
    from cudamagic.shell import magic

    if magic._WARMUP.thread is not None:
        magic._WARMUP.thread.join()
    if kind == "hit":
        ip.run_cell_magic("cuda", "-q -n k<1>", CELL)
    stays: list[str] = []

    def seen(frame, event, arg):
        name = frame.f_globals.get("__name__", "")
        if event == "call" and name.startswith("cudamagic") and (not stays or stays[-1] != name):
            stays.append(name)

    sys.setprofile(seen)
    try:
        ip.run_cell_magic("cuda", "-q -n k<1>", CELL)
    finally:
        sys.setprofile(None)
    rooms: list[str] = []
    for name in stays:
        r = room(name)
        if r not in ("", "core") and (not rooms or rooms[-1] != r):
            rooms.append(r)
    returns = sum(1 for i, r in enumerate(rooms) if r in rooms[:i])
    return {"kind": kind, "modules": list(dict.fromkeys(stays)), "stays": len(stays),
            "rooms": rooms, "returns": returns}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "hit")))
