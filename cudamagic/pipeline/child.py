"""The child process a tool run starts, under compute-sanitizer or ncu: :func:`main` with
``FOLDER DEVICE``, once the notebook's ``sys.path`` is set from ``FOLDER/path.json``
(``python -m cudamagic.pipeline.child FOLDER DEVICE`` by hand). It takes the module as a Dask worker does
(its travelling record, never a compile), rebuilds the launch's arguments in buffers of its own
(each of exactly its size, so the tool sees each allocation's bounds), launches the kernel once
and synchronises.

It writes ``placed.json`` in FOLDER: where each array argument lies in this process (the parent
names the tool's addresses against them) and, where the launch or the synchronize failed, the
driver's error. The exit status is 0 for a launch that ran to its end, 3 otherwise."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path

from ..launch.capture import TIMES_ENV


def run(folder: Path, device: int) -> int:
    from ..errors import CudaMagicError
    from ..launch.capture import decode_capture, rebuild
    from .module import arrive
    from ..toolchain.device import driver

    stamps = [("go", time.time())]
    module = arrive((folder / "module.bin").read_bytes(), None)
    c = decode_capture((folder / "capture.bin").read_bytes())
    kernel = module.kernels[c.kernel]
    stamps.append(("module arrived", time.time()))
    placed: list = []
    error = ""
    try:
        driver.ensure_context(device)
        stamps.append(("context", time.time()))
        slots, where = rebuild(c, driver.mem_alloc, driver.copy_to_device)
        stamps.append(("arguments rebuilt", time.time()))
        placed = [(p.index, p.base, p.nbytes) for p in where]
        _save(folder, placed, "")  # written before the launch: a fault may end the process
        buffers = [ctypes.create_string_buffer(s, len(s)) for s in slots]
        params = (ctypes.c_void_p * max(len(buffers), 1))(
            *[ctypes.cast(b, ctypes.c_void_p) for b in buffers])
        handle = kernel._handle(device, context_ready=True)
        stamps.append(("module loaded", time.time()))
        if c.shared_mem > kernel.dynamic_shared_default:
            kernel.raise_shared_limit(device, c.shared_mem)
        driver.launch(handle, c.grid, c.block, c.shared_mem, 0, ctypes.addressof(params),
                      device=device, what=f"launching {c.kernel}")
        driver.synchronize()
        stamps.append(("launched and synchronised", time.time()))
    except CudaMagicError as exc:
        error = str(exc)
    _save(folder, placed, error)
    stamps.append(("saved", time.time()))
    if os.environ.get(TIMES_ENV):
        with open(os.environ[TIMES_ENV], "a", encoding="utf-8") as f:
            f.write(json.dumps(stamps) + "\n")
    return 3 if error else 0


def _save(folder: Path, placed: list, error: str) -> None:
    """placed.json written whole or not at all (a fault or the tool may end the process)."""
    part = folder / "placed.json.part"
    part.write_text(json.dumps({"placed": placed, "error": error}))
    os.replace(part, folder / "placed.json")


def main(argv: list[str]) -> int:
    """``FOLDER DEVICE``: :func:`run`'s exit status."""
    return run(Path(argv[0]), int(argv[1]))


if __name__ == "__main__":  # pragma: no cover - run by the tools, in a process of its own
    sys.exit(main(sys.argv[1:]))
