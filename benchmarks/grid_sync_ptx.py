"""What reading grid sync from the PTX costs on a miss (issue 27 item C), for the CCCL cell (CUB's
BlockReduce over cuda::std::complex, 10 names):

- the PTX fetched from NVRTC (``nvrtcGetPTXSize`` and ``nvrtcGetPTX`` on a compiled program)
  and read (``toolchain.ptx.grid_syncs``), each timed alone, median of R, for the optimised and
  the ``-G`` build (whose PTX is many times larger);
- the whole miss, ``build(force=True)``, with the PTX read (the code now) and without it (the
  code before: ``nvrtc._ptx`` answering None, so neither fetch nor read runs), alternated in one
  process, median of R each.

python benchmarks/grid_sync_ptx.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import CCCL, machine, median, names

import cudamagic
from cudamagic.core.options import BuildOptions
from cudamagic.pipeline.steps import entry_key
from cudamagic import KernelCache
from cudamagic.toolchain.compile import nvrtc
from cudamagic.toolchain.binary.ptx import grid_syncs


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _parts(options: list[str], exprs: list[str], repeats: int) -> tuple[int, float, float]:
    """(PTX bytes, median fetch seconds, median read seconds) of one compiled program."""
    lib = nvrtc._nvrtc()
    _, prog = lib.nvrtcCreateProgram(CCCL.encode(), b"cell.cu", 0, [], [])
    try:
        for e in exprs:
            lib.nvrtcAddNameExpression(prog, e.encode())
        opts = [o.encode() for o in options]
        assert int(lib.nvrtcCompileProgram(prog, len(opts), opts)[0]) == 0
        fetch, ptx = [], b""
        for _ in range(repeats):
            t = time.perf_counter()
            ptx = nvrtc._ptx(lib, prog) or b""
            fetch.append(time.perf_counter() - t)
    finally:
        lib.nvrtcDestroyProgram(prog)
    read = [_timed(lambda: grid_syncs(ptx)) for _ in range(repeats)]
    return len(ptx), median(fetch), median(read)


def run(repeats: int = 5, n: int = 10) -> None:
    exprs = names("cccl", n)
    for label, extra in (("optimised", ()), ("-G", ("-G",))):
        _, _, options, _ = entry_key(CCCL, BuildOptions(name_expressions=tuple(exprs),
                                                        options=extra))
        size, fetch, read = _parts(list(options), exprs, repeats)
        print(f"  {label}: PTX {size / 1e3:.0f} KB, fetch {fetch * 1e3:.2f} ms, read "
              f"{read * 1e3:.2f} ms (median of {repeats})", flush=True)
    cache = KernelCache(tempfile.mkdtemp())
    real = nvrtc._ptx
    t: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(repeats):
        for way in t:
            nvrtc._ptx = real if way == "now" else (lambda lib, prog: None)  # type: ignore
            try:
                t[way].append(_timed(lambda: cudamagic.build(CCCL, exprs, cache=cache,
                                                             force=True)))
            finally:
                nvrtc._ptx = real  # type: ignore
    now, before = median(t["now"]), median(t["before"])
    print(f"  whole miss, {n} names, median of {repeats} alternated: with the PTX read "
          f"{now * 1e3:.0f} ms, without {before * 1e3:.0f} ms ({(now / before - 1) * 100:+.1f} %; "
          f"runs now {[round(x * 1e3) for x in t['now']]}, before "
          f"{[round(x * 1e3) for x in t['before']]}); {machine()}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    run(parser.parse_args().repeats)
