"""What linking adds to a cold compile: -rdc and -dlto builds against whole-program ones.

Per source of benchmarks/common.py (the small template with 10 names, the CUB +
cuda::std::complex one with 10 names) and a kernel that launches a kernel (dynamic parallelism,
which needs -rdc and the device runtime), alternated in one process, median of R:

- whole: ``build(use_cache=False)`` without -rdc (where the source compiles without it);
- -rdc=true: the same build, NVRTC's relocatable CUBIN linked by nvJitLink;
- -dlto: NVRTC's LTO IR, compiled and linked by nvJitLink with -lto;
- link alone: the ``link`` lap of the -rdc and -dlto builds' reports.

Only builds with -rdc/-dc/-dlto pay it: a whole-program build is never linked.
Runs with or without a GPU: python benchmarks/link_overhead.py [--repeats R]
"""

from __future__ import annotations

import argparse
import json

from common import SOURCES, machine, median, names

import cudamagic

DYNAMIC = r"""
extern "C" __global__ void child(int* x) { x[threadIdx.x] *= 2; }
extern "C" __global__ void parent(int* x) { if (threadIdx.x == 0) child<<<1, 32>>>(x); }
"""


def _cases() -> dict[str, tuple[str, list[str], bool]]:
    """name -> (source, name expressions, compiles without -rdc)."""
    return {"small": (SOURCES["small"][0], names("small", 10), True),
            "cccl": (SOURCES["cccl"][0], names("cccl", 10), True),
            "dynamic": (DYNAMIC, [], False)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    out: dict[str, dict] = {"machine": machine()}
    for case, (src, exprs, whole_ok) in _cases().items():
        modes = {"whole": []} if whole_ok else {}
        modes.update({"-rdc=true": ["-rdc=true"], "-dlto": ["-dlto"]})
        if not whole_ok:
            modes.pop("whole", None)
        totals: dict[str, list[float]] = {m: [] for m in modes}
        links: dict[str, list[float]] = {m: [] for m in modes if m != "whole"}
        cudamagic.build(src, exprs, options=["-rdc=true"], arch="sm_90", use_cache=False)
        for _ in range(args.repeats):
            for mode in modes:
                opts = [] if mode == "whole" else [mode]
                m = cudamagic.build(src, exprs, options=opts, arch="sm_90", use_cache=False)
                totals[mode].append(m.report.timings["total"])
                if mode in links:
                    links[mode].append(m.report.timings["link"])
        out[case] = {"total_ms": {k: round(median(v) * 1e3, 1) for k, v in totals.items()},
                     "link_ms": {k: round(median(v) * 1e3, 1) for k, v in links.items()}}
        print(case, json.dumps(out[case]))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
