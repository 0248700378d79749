"""``%%cuda`` through IPython itself, in fresh processes standing for kernel restarts."""

from __future__ import annotations

import json

import pytest

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
    assert "CompileError: NVRTC could not compile cell.cu" in out
    assert 'line 5: error: expected a ";"' in out
    assert "Traceback" not in out and out.strip().endswith("FAILED CompileError")


def _shell(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    return ip


def test_help_is_the_parsers(tmp_path, monkeypatch):
    ip = _shell(tmp_path, monkeypatch)
    doc = ip.find_cell_magic("cuda").__doc__
    for flag in ("--name-expression", "--arch", "--std", "-I", "-D", "--option", "--module",
                 "--force", "--no-cache", "--quiet"):
        assert flag in doc


def test_cache_magics(tmp_path, monkeypatch, capsys):
    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", '-q -n "saxpy<float>"', CELL)
    ip.run_cell_magic("cuda", '-q -n "saxpy<float>"', CELL)  # a hit
    ip.run_cell_magic("cuda", '-q -n "saxpy<double>"', CELL)
    stats = ip.run_line_magic("cuda_cache", "stats")
    assert (stats.entries, stats.hits, stats.misses) == (2, 1, 2)
    assert stats.location == str(tmp_path / "cache") and "2 hits" not in stats.text()
    listing = ip.run_line_magic("cuda_cache", "list")
    assert [e.name_expressions for e in listing.entries] == [("saxpy<double>",), ("saxpy<float>",)]
    assert "saxpy<double>" in listing.text().splitlines()[2]  # newest first
    ip.run_line_magic("cuda_cache", "clear --older-than 1h")
    assert ip.run_line_magic("cuda_cache", "stats").entries == 2
    ip.run_line_magic("cuda_cache", "limit 256MB")
    from cudamagic.cache import KernelCache

    assert KernelCache(tmp_path / "cache").size_limit == 256 << 20  # kept by the folder
    cleared = ip.run_line_magic("cuda_cache", "clear")
    assert cleared.entries == 0 and "done: removed 2 entries" in cleared.text()
    assert ip.run_line_magic("cuda_cache", "stats").entries == 0


@pytest.mark.parametrize("magic, line, message", [
    ("cuda_cache", 'clear --older-than "7d', "No closing quotation"),
    ("cuda_cache", "bogus", "invalid choice"),
    ("cuda_cache", "clear --older-than soon", "give an age such as"),
    ("cuda_cache", "stats 5MB", "takes no size"),
    ("cuda_cache", "limit lots", "is not a size"),
    ("cuda_cache", "limit 1e30GB", "more than the largest size"),
    ("cuda_load", '"x.cubin', "No closing quotation"),
    ("cuda_load", "x.cubin --module class", "not a name Python can assign to"),
])
def test_line_magic_errors_are_the_projects_own(tmp_path, monkeypatch, magic, line, message):
    from cudamagic.errors import CudaMagicError

    ip = _shell(tmp_path, monkeypatch)
    with pytest.raises(CudaMagicError, match=message):
        ip.run_line_magic(magic, line)


def test_line_magics_document_their_arguments(tmp_path, monkeypatch):
    ip = _shell(tmp_path, monkeypatch)
    cache_doc = ip.find_line_magic("cuda_cache").__doc__
    assert "Inspect and manage the CUBIN cache" in cache_doc
    assert "s (seconds), m (minutes), h (hours), d (days) or w (weeks)" in " ".join(cache_doc.split())
    assert "Load a CUBIN built elsewhere" in ip.find_line_magic("cuda_load").__doc__


def test_cuda_load_and_cuda_info(tmp_path, monkeypatch):
    from .conftest import FIXTURES

    ip = _shell(tmp_path, monkeypatch)
    ip.run_line_magic("cuda_load", f'{FIXTURES / "fixture.cubin"} -n "fill<float>" -n "shift<int, 0x10>" '
                                   "--module fx -q")
    assert ip.user_ns["fx"]["shift<int, 0x10>"].symbol == "_Z5shiftIiLi16EEvPT_j"
    assert callable(ip.user_ns["fill_float"]) and callable(ip.user_ns["shift_int_16"])
    info = dict(ip.run_line_magic("cuda_info", "").fields)
    assert info["NVRTC"].count(".") == 1 and info["demangler"]
    assert str(tmp_path / "cache") in info["cache"]


def test_a_slow_compile_says_so_in_a_terminal(tmp_path):
    code = r'''
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
ip.run_cell_magic("cuda", '-q -n "k<float>"', "#include <cuda/std/complex>\n"
    "template <typename T> __global__ void k(cuda::std::complex<T>* z) { z[0] = cuda::std::exp(z[0]); }\n")
'''
    import subprocess
    import sys

    from .conftest import REPO

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={**__import__("os").environ, "CUDAMAGIC_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "compiling cell.cu with NVRTC..." in proc.stderr
    assert "compiled cell.cu in" in proc.stderr


def test_the_cubin_served_does_not_depend_on_the_module_name(tmp_path):
    """__FILE__ is the program name: it must not change with --module, which is not in the key
    (a hit for --module two served one.cu's CUBIN while a compile gave two.cu's)."""
    code = r'''
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
cell = 'extern "C" __global__ void f(const char** out) { *out = __FILE__; }\n'
ip.run_cell_magic("cuda", "-q --module one", cell)
ip.run_cell_magic("cuda", "-q --module two", cell)
ip.run_cell_magic("cuda", "-q --module fresh --no-cache", cell)
ns = ip.user_ns
print(ns["two"].hit, ns["two"].cubin == ns["fresh"].cubin)
'''
    out = run_python(code, {"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    assert out.split() == ["True", "True"]
