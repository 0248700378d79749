"""Shared pieces of the benchmarks: sources, fresh-process runs, medians, the machine line."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SMALL = r"""
template <int N> __global__ void k(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += N; }
"""
HEAVY = r"""
#include <cuda/std/complex>
template <int N> __global__ void h(cuda::std::complex<float>* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = cuda::std::exp(z[i]) * cuda::std::sqrt(z[i]) + cuda::std::pow(z[i], float(N)); }
"""
SOURCES = {"small": (SMALL, "k"), "heavy": (HEAVY, "h")}


def names(kind: str, n: int) -> list[str]:
    """``n`` name expressions for a source kind: ``k<0>`` ... ``k<n-1>``."""
    return [f"{SOURCES[kind][1]}<{i}>" for i in range(n)]


def median(xs) -> float:
    return statistics.median(xs)


def fresh(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            # bytecode as an installed package has it (some images disable writing it; then
            # every fresh process would compile every module from source)
            "PYTHONPYCACHEPREFIX": "/tmp/cudamagic-bench-pycache", **(env or {})}
    full.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=full, timeout=900, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> str:
    """One line naming the machine and the versions measured."""
    parts = [platform.node() or "?", f"Python {platform.python_version()}"]
    try:
        from cudamagic import compiler, driver

        if driver.available():
            parts.insert(0, f"{driver.device_name(0)} x{driver.device_count()}, driver CUDA "
                            f"{driver.driver_version()}")
        parts.append(f"NVRTC {compiler.nvrtc_version()}")
    except Exception:  # pragma: no cover
        pass
    try:
        import importlib.metadata as md

        parts.append(f"CuPy {md.version('cupy-cuda13x')}")
        parts.append(f"cuda-bindings {md.version('cuda-bindings')}")
    except Exception:  # pragma: no cover
        pass
    return ", ".join(parts)
