"""module.annotate() on a cell of many kernels, against that cell's -lineinfo compile in the
same run: the first annotate (nvdisasm's run and the listing's reading, the lines landed, the
HTML made) and a second (the disassembly kept on the module). docs/debugging-design.md has the numbers.

    python benchmarks/annotate.py [KERNELS]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cudamagic  # noqa: E402


def cell(kernels: int) -> str:
    return "".join(f'extern "C" __global__ void k{i}(float* a, int n) {{\n'
                   f"    int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   f"    if (j < n) a[j] = a[j] * {i}.5f + 1.0f;\n}}\n" for i in range(kernels))


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="?", type=int, default=1000,
                    help="kernels in the cell (default 1000)")
    kernels = ap.parse_args().kernels
    source = cell(kernels)
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        m = cudamagic.build(source, options=["-lineinfo"], cache=folder)
        compiled = time.perf_counter() - t
        t = time.perf_counter()
        view = m.annotate()
        page = view.html()
        first = time.perf_counter() - t
        t = time.perf_counter()
        m.annotate().html()
        second = time.perf_counter() - t
    print(f"{kernels} kernels, {len(source.splitlines())} lines: compile (-lineinfo) "
          f"{compiled:.2f} s; annotate first {first:.2f} s ({first / compiled:.2f} of the "
          f"compile), again {second:.2f} s ({second / compiled:.2f}); HTML {len(page) // 1024} KiB")


if __name__ == "__main__":
    main()
