"""``%%cuda`` through IPython itself, in fresh processes standing for kernel restarts."""

from __future__ import annotations

import json

from .conftest import run_python

CELL = r'''
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {} }
extern "C" __global__ void fill(float* x, float v, int n) {}
'''
SESSION = r'''
import json, sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
mods = sorted(m for m in sys.modules if m.split(".")[0] in ("cupy", "cuda"))
assert not mods, f"%load_ext imported {mods}"
ip.run_cell_magic("cuda", '-n "saxpy<float>" -n "saxpy<double>" -n "ns::scale<float, 3>" --module mod', CELL)
ns = ip.user_ns
print(json.dumps({"hit": ns["mod"].hit,
                  "callables": sorted(k for k in ("saxpy_float", "saxpy_double", "ns_scale_float_3", "fill")
                                      if callable(ns.get(k))),
                  "lookup": ns["mod"]["saxpy<float>"].symbol,
                  "report": ns["mod"].report.text()}))
'''


def test_second_session_is_a_hit_with_the_callables(tmp_path):
    env = {"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")}
    code = f"CELL = {CELL!r}\n" + SESSION
    first = json.loads(run_python(code, env).strip().splitlines()[-1])
    second = json.loads(run_python(code, env).strip().splitlines()[-1])
    assert (first["hit"], second["hit"]) == (False, True)
    assert second["callables"] == ["fill", "ns_scale_float_3", "saxpy_double", "saxpy_float"]
    assert second["lookup"] == "_Z5saxpyIfEvT_PKS0_PS0_i"
    assert "cache hit" in second["report"] and "stored" in second["report"]


def test_compile_error_renders_without_traceback(tmp_path):
    code = r'''
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
r = ip.run_cell("%%cuda -n k<float>\ntemplate <typename T>\n__global__ void k(T* x) {\n  x[0] = 1\n}\n")
print("FAILED" if r.error_in_exec is not None else "OK", type(r.error_in_exec).__name__)
'''
    out = run_python(code, {"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    assert "CompileError: NVRTC could not compile cuda_module.cu" in out
    assert 'line 5: error: expected a ";"' in out
    assert "Traceback" not in out and out.strip().endswith("FAILED CompileError")
