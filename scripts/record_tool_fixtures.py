"""Record the debugging tools' real outputs on the GPU machine into tests/fixtures/tools/recorded:
compute-sanitizer's XML report of every planted bug (tests/planted.py) under its tool, and of
its fixed kernel (``<name>.fixed.xml``), a clean memcheck run (``clean.xml``), and an Nsight
Compute report of two kernels (``copy.ncu-rep``, ``burn.ncu-rep``: a memory-bound copy and a
compute-bound loop of ``tests.planted.PROFILE_SOURCE``, built with ``-lineinfo``).

Run from the repository root on a machine with a GPU (and ncu for the reports):

    python scripts/record_tool_fixtures.py

The parser tests (tests/test_debug_tools.py) read ``recorded/``. Each run also writes
``recorded/VERSIONS.txt``: the tools' versions, the driver's, the GPU's name.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cudamagic.core.options import options_from_args  # noqa: E402
from cudamagic.pipeline.steps import build_module  # noqa: E402
from cudamagic.toolchain.device import driver
from cudamagic.toolchain.tools import tools  # noqa: E402
from tests.planted import (LINE_OFFSET, PLANTED, PROFILE_N, PROFILE_SOURCE,  # noqa: E402
                           fixed_args)

OUT = ROOT / "tests" / "fixtures" / "tools" / "recorded"


def _args(spec: tuple) -> tuple:
    import cupy as cp

    return tuple(cp.full(v, 3.0, dtype=cp.float32) if kind == "f32" else int(v)
                 for kind, v in spec)


def _cell(source: str, cache: str):
    return build_module(source, options_from_args((), ()), cache=cache, line_offset=LINE_OFFSET)


def record_sanitizer(cache: str) -> None:
    for p in PLANTED:
        try:  # one bug's failure still records the others
            kernel = _cell(p.source, cache)[p.name]
            shown = kernel.sanitize((p.grid,), (p.block,), _args(p.args), tool=p.tool,
                                    uninitialized=p.uninitialized,
                                    save_report=OUT / f"{p.name}.xml")
            print(f"--- {p.name} ({p.tool})\n{shown}\n")
            fixed = _cell(p.fixed, cache)[p.name]
            fixed.sanitize((p.grid,), (p.block,), _args(fixed_args(p)), tool=p.tool,
                           save_report=OUT / f"{p.name}.fixed.xml")
        except Exception:  # noqa: BLE001 - printed, and the run goes on
            traceback.print_exc()
    clean = _cell(PLANTED[0].fixed, cache)[PLANTED[0].name]
    clean.sanitize((1,), (256,), _args(fixed_args(PLANTED[0])), save_report=OUT / "clean.xml")


def record_ncu(cache: str) -> None:
    import cupy as cp

    ncu = tools.find(tools.ToolKind.NCU)
    if isinstance(ncu, tools.Missing):
        print(f"no ncu report recorded: ncu {ncu.describe()}")
        return
    mod = _cell(PROFILE_SOURCE, cache)
    n = PROFILE_N
    a, b = cp.ones(n, cp.float32), cp.zeros(n, cp.float32)
    for name, args in (("copy", (a, b, n)), ("burn", (a, n, 2000))):
        try:
            _record_one(mod[name], name, args, ncu, n)
        except Exception:  # noqa: BLE001 - printed, and the run goes on
            traceback.print_exc()


def _record_one(kernel, name: str, args: tuple, ncu, n: int) -> None:
    from cudamagic.launch import tool_run
    from cudamagic.toolchain.tools import profiler

    c, build, device = tool_run.prepare_run(kernel, (n // 256,), (256,), args, {})
    folder = tools.scratch_folder()
    try:
        child = tool_run.write_run(folder, c, build, device)
        report = folder / "profile.ncu-rep"
        tools.run_child(profiler.ncu_argv(ncu.path, kernel.symbol, report, child),
                        env=tool_run._child_env(), cwd=folder)
        shutil.copyfile(report, OUT / f"{name}.ncu-rep")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shown = profiler.read_report(OUT / f"{name}.ncu-rep", label=name, source=PROFILE_SOURCE,
                                 line_offset=LINE_OFFSET)
    print(f"--- {name}\n{shown}\n")


def main() -> None:
    if not driver.available():
        sys.exit("record_tool_fixtures.py needs a GPU: run it on the GPU machine")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        record_sanitizer(cache)
        record_ncu(cache)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv"],
                         capture_output=True, text=True).stdout
    lines = [f"{k.value}: {tools.find(k).describe()}" for k in tools.ToolKind]
    (OUT / "VERSIONS.txt").write_text("\n".join([*lines, f"CUDA driver: {driver.driver_version()}",
                                                 smi.strip(), ""]))
    print(f"recorded into {OUT}")


if __name__ == "__main__":
    main()
