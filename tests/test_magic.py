"""``%%cuda`` through IPython itself, in fresh processes standing for kernel restarts."""

from __future__ import annotations

import json
import re

import pytest

from cudamagic.errors import OptionError

from .conftest import FIXTURES, run_python

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
    from cudamagic.store.cache import KernelCache

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
    assert "Load a CUBIN, PTX or fatbin built elsewhere" in ip.find_line_magic("cuda_load").__doc__


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
ip.run_cell_magic("cuda", '-n "k<float>"', "#include <cuda/std/complex>\n"
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


# --- issue 11: readable everywhere -----------------------------------------------------------

TWO_TEMPLATES = ("template <typename T>\n__global__ void saxpy(T a, const T* x, T* y, int n) {}\n"
                 "template <typename T>\n__global__ void zeta(T* x) {}\n")


def _error_of(ip, line: str, cell: str):
    result = ip.run_cell(f"%%cuda {line}\n{cell}", store_history=False, silent=True)
    return result.error_in_exec


@pytest.mark.parametrize("line, blamed, hint", [
    # NVRTC numbers its name map in byte order, not in the order of the -n options
    ('-n "zeta<float>" -n "saxpy<float>" -n "alpha<int>"', "alpha<int>",
     "the cell defines no kernel template 'alpha' (its __global__ templates: saxpy, zeta)"),
    ('-n "saxpy<int>" -n "saxpy<float>" -n "saxpy<flot>"', "saxpy<flot>",
     "identifier \"flot\" is undefined; did you mean 'float'?"),
    ('-n "saxpi<float>"', "saxpi<float>",
     "the cell defines no kernel template 'saxpi'; did you mean 'saxpy'?"),
])
def test_a_name_expression_error_is_blamed_on_its_own_n(tmp_path, monkeypatch, line, blamed, hint):
    from cudamagic.errors import CompileError

    ip = _shell(tmp_path, monkeypatch)
    err = _error_of(ip, line, TWO_TEMPLATES)
    assert isinstance(err, CompileError)
    text = str(err)
    assert text.startswith("NVRTC could not compile cell.cu (1 error):"), text
    assert f'name expression -n "{blamed}": error: {hint}' in text
    others = {e for e in ("zeta<float>", "saxpy<float>", "saxpy<int>", "alpha<int>", "saxpy<flot>",
                          "saxpi<float>") if e != blamed}
    assert not any(f'-n "{e}":' in text for e in others), text
    # NVRTC's internal pragma and its follow-on errors are not shown; the -n is, with a caret
    assert "nv_mangled_name" not in text and "type name is not allowed" not in text
    assert f'  -n "{blamed}"' in text and text.rstrip().endswith("^")


def test_name_map_lines_agree_with_nvrtc():
    """name_map_lines against NVRTC's own numbering, for many sets of expressions that all fail
    (each then has an error line whose echo names it)."""
    import random
    import re

    from cudamagic.toolchain.compile.nvrtc import _check, _nvrtc, name_map_lines

    nvrtc = _nvrtc()
    rng = random.Random(11)
    words = ["u", "v", "Zq", "_w", "w1", "a", "ab", "A"]
    args = ["<int>", " <float>", "<b >", "", "< c>", "<int, 3>"]
    for _ in range(12):
        exprs = list(dict.fromkeys(rng.choice(words) + rng.choice(args) for _ in range(6)))
        prog = _check(nvrtc.nvrtcCreateProgram(b"__global__ void k() {}\n", b"cell.cu", 0, [], []),
                      "create")
        try:
            for e in exprs:
                _check(nvrtc.nvrtcAddNameExpression(prog, e.encode()), "add")
            nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=sm_90"])
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "size")
            buf = bytearray(size)
            _check(nvrtc.nvrtcGetProgramLog(prog, buf), "log")
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
        seen = dict(re.findall(r"__nv_name_map\((\d+)\): .*\n  #pragma nv_mangled_name (.*)\n",
                               bytes(buf).decode()))
        assert seen and {int(k): v for k, v in seen.items()} == name_map_lines(exprs), exprs


def test_a_log_without_a_located_error_is_not_counted(monkeypatch):
    from cudamagic.toolchain.compile import nvrtc as compiler
    from cudamagic.toolchain.compile.nvrtc import compile_cubin
    from cudamagic.errors import CompileError

    monkeypatch.setattr(compiler, "rewrite_log", lambda *a, **k: "something NVRTC said")
    with pytest.raises(CompileError) as err:
        compile_cubin("__global__ void k( {}\n", [], ["-arch=sm_90"])
    assert str(err.value) == "NVRTC could not compile cell.cu:\nsomething NVRTC said"


TERMINAL = r'''
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
for code in CODE:
    print(f"----- {code.splitlines()[0]}")
    ip.run_cell(code)
'''


def _terminal(tmp_path, *cells: str, env: dict | None = None) -> tuple[str, str]:
    """Cells run by IPython as a terminal runs them (results shown by its display hook): what a
    person sees on stdout and stderr."""
    import os
    import subprocess
    import sys

    from .conftest import REPO

    code = f"CODE = {list(cells)!r}\n" + TERMINAL
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                   filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                               "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"), **(env or {})},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def test_line_magics_and_reports_read_as_text_in_a_terminal(tmp_path):
    out, err = _terminal(tmp_path, '%%cuda -q -n "saxpy<float>"\n' + TWO_TEMPLATES,
                         "%cuda_cache stats", "%cuda_cache list", "%cuda_info",
                         "print(cuda_module.report)", "cuda_module.report")
    assert "cudamagic cache\n  location: " in out and "  lookups: 0 hits, 1 misses" in out
    assert "cudamagic cache entries (newest first)\n  key " in out
    # the device line: "device: none (...)" without a GPU, "device 0: NVIDIA H200 (sm_90)" with
    assert re.search(r"cudamagic environment\n  device( \d+)?: ", out) and "  NVRTC: " in out
    for record in ("CacheStats(", "CacheListing(", "EnvironmentInfo(", "BuildReport(", "KernelRow("):
        assert record not in out, record
    printed = out.split("----- print(cuda_module.report)")[1]
    assert printed.lstrip().startswith("cudamagic: cache miss")
    assert "void saxpy<float>(float, float const*, float*, int)" in printed
    assert "time: " in printed and "the cell" in printed
    assert not err.strip(), err


def test_warnings_are_said_once_in_the_report_not_as_python_warnings(tmp_path):
    cell = ('%%cuda\nextern "C" __global__ void len(float* x) {}\n'
            '__global__ void max(int* x) {}\n')
    out, err = _terminal(tmp_path, "len = 3", cell, "len = 3", cell.replace("%%cuda", "%%cuda -q"))
    said_builtin = "the kernel name 'max' hides Python's builtin max() in this notebook; del max " \
                   "brings the builtin back (the kernel stays cuda_module['max'])"
    said_variable = "'len' replaces the notebook's variable of type int; the kernel is also " \
                    "cuda_module['len']: rename your variable to keep both"
    shown, quiet = out.split("----- len = 3")[1:]
    assert shown.count(said_builtin) == 1 and shown.count(said_variable) == 1
    assert "cudamagic: cache miss" in shown
    # -q: no report, but a warning is still said, once
    assert quiet.count(said_variable) == 1 and "cudamagic: cache hit" not in quiet
    assert "Warning" not in err and "_warn_shadowing" not in err, err


def test_an_untrusted_cache_folder_is_said_once_in_the_report(tmp_path):
    import os

    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    out, err = _terminal(tmp_path, '%%cuda -n "saxpy<float>"\n' + TWO_TEMPLATES,
                         env={"CUDAMAGIC_CACHE_DIR": str(folder)})
    assert out.count(f"the cache folder {folder} is not trusted") == 1
    assert "CacheWarning" not in err and "warnings.warn" not in err, err


def test_an_untrusted_cache_folder_is_said_where_the_first_build_fails(tmp_path):
    """A new user's finding: the folder's warning is said once per process, and where the
    first cell did not compile it went with that cell's report, which is never shown: no cell
    said it. It is said beside the error."""
    import os

    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o775)
    out, err = _terminal(tmp_path, '%%cuda\n__global__ void gw() { x }\n',
                         '%%cuda\n__global__ void gw() {}\n',
                         env={"CUDAMAGIC_CACHE_DIR": str(folder)})
    said = out + err
    assert said.count("writable by its group (mode 775)") == 1, said
    assert "CacheWarning" not in err and "self._store" not in err, err  # a line, no source


@pytest.mark.parametrize("name", ["In", "Out", "get_ipython", "exit"])
def test_a_module_name_ipython_relies_on_is_refused_and_left_in_place(name, tmp_path,
                                                                       monkeypatch):
    """``--module In`` (or Out, get_ipython...) replaced IPython's own name with the module,
    hinting "name the module with --module": refused, saying which name and why, by %%cuda
    before any compile and by %cuda_load; the notebook's name stays."""
    ip = _shell(tmp_path, monkeypatch)
    before = ip.user_ns[name]
    for cell in (f"%%cuda -q --module {name}\n" + 'extern "C" __global__ void k() {}\n',
                 f'%cuda_load {FIXTURES / "fixture.cubin"} -q --module {name}'):
        result = ip.run_cell(cell)
        assert isinstance(result.error_in_exec, OptionError), (cell, result.error_in_exec)
        said = str(result.error_in_exec)
        assert f"--module {name!r}" in said and "IPython" in said, said
        assert ip.user_ns[name] is before


def test_quiet_shows_cudamagics_own_warnings_at_every_run_and_not_nvrtcs(tmp_path, monkeypatch,
                                                                          capsys):
    """docs/magics.md's -q row: no report; cudamagic's own warning (a missing -I folder) is
    shown at each run, the hit too; NVRTC's warning (#177-D) is not shown, and is in the
    report's log."""
    ip = _shell(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    for hit in (False, True):
        ip.run_cell_magic("cuda", "-q -I nothere", 'extern "C" __global__ void k() { int x; }\n')
        out = capsys.readouterr().out
        report = ip.user_ns["cuda_module"].report
        assert report.hit is hit
        assert out.count("-I nothere: no such folder") == 1, out
        assert "#177" not in out and "cache miss" not in out and "cache hit" not in out, out
        assert "#177" in report.log


def test_cuda_load_says_its_warnings_once(tmp_path, monkeypatch, capsys):
    import warnings

    from .conftest import FIXTURES

    ip = _shell(tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ip.run_line_magic("cuda_load", f'{FIXTURES / "fixture.cubin"} -n "fill<float>" --module fx')
    assert not caught, [str(w.message) for w in caught]
    out = capsys.readouterr().out
    assert out.count("overloaded kernel(s) have no name to call them by") == 1


def test_signatures_through_the_magic(tmp_path, monkeypatch):
    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", '-q -n "saxpy<float>"', TWO_TEMPLATES
                      + 'extern "C" __global__ void fill(float* x, float v, int n) {}\n'
                      + "__global__ void plain(int* x) {}\n")
    shown = {r.python_name: r.signature for r in ip.user_ns["cuda_module"].report.rows}
    assert shown == {"saxpy_float": "void saxpy<float>(float, float const*, float*, int)",
                     "fill": "void fill(float*, float, int)",  # the types its source declares
                     "plain": "void plain(int*)"}


def test_the_report_times_the_cell_and_is_the_modules(tmp_path, monkeypatch, capsys):
    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", '-n "saxpy<float>"', TWO_TEMPLATES)
    report = ip.user_ns["cuda_module"].report
    assert report.cell_seconds >= report.timings["total"]
    assert {"parse", "push", "display", "history", "compile"} <= set(report.timings)
    assert report.phases[-1].label == "the cell"
    assert report.headline in capsys.readouterr().out.splitlines()  # what was shown is the module's


def test_help_and_arguments(tmp_path, monkeypatch, capsys):
    from cudamagic.errors import OptionError

    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", "-h --module helped", TWO_TEMPLATES)
    assert "--name-expression" in capsys.readouterr().out and "helped" not in ip.user_ns
    with pytest.raises(OptionError, match='must be quoted: -n "ns::scale<float, 3>"'):
        ip.run_cell_magic("cuda", "-n ns::scale<float, 3>", TWO_TEMPLATES)
    with pytest.raises(OptionError, match="give --arch one of those") as err:
        ip.run_cell_magic("cuda", "--arch sm_999", TWO_TEMPLATES)
    assert "or pass --arch" not in str(err.value)


def test_a_slow_compile_that_fails_says_failed_after(tmp_path):
    out, err = _terminal(tmp_path, '%%cuda -n "k<float>"\n#include <cuda/std/complex>\n'
                         "template <typename T> __global__ void k(cuda::std::complex<T>* z) "
                         "{ z[0] = cuda::std::exp(z[0]) }\n")
    assert "compiling cell.cu with NVRTC..." in err
    assert "compiling cell.cu failed after" in err and "compiled cell.cu in" not in err
    assert 'error: expected a ";"' in out + err


# --- history per cell, and names IPython relies on (pipeline helper) ----------------------------

def _run(ip, line: str, body: str, cell_id: str | None):
    """Run a %%cuda cell as a front end does (IPython gives it the cell's id); its report."""
    result = ip.run_cell(f"%%cuda {line}\n{body}", cell_id=cell_id)
    assert result.success, result.error_in_exec
    return ip.user_ns["cuda_module" if "--module" not in line else line.split()[-1]].report


CELLS = ['extern "C" __global__ void a(float* x) {}\n',
         'extern "C" __global__ void b(float* x) {}\n',
         'template <typename T> __global__ void c(T* x) {}\n']


def test_history_is_per_cell_not_per_module_name(tmp_path, monkeypatch):
    """Three cells of a fresh notebook, each with the default module name: each is the first
    build of its cell; a re-run cell is compared with its own earlier build."""
    ip = _shell(tmp_path, monkeypatch)
    lines = ["-q", "-q", '-q -n "c<float>"']
    for i, (line, body) in enumerate(zip(lines, CELLS)):
        e = _run(ip, line, body, f"cell-{i}").explanation
        assert (e.kinds, e.summary) == (("first",), "first build of this cell"), i
    edited = _run(ip, "-q", CELLS[1].replace("float* x", "float* x, int n"), "cell-1")
    assert edited.explanation.kinds == ("source",)
    assert edited.explanation.summary == "the source changed (line 2)"  # not "-n changed"
    # a cell without an id (a terminal) and one with --module are identified by the name
    _run(ip, "-q --module named", CELLS[0], "cell-9")
    moved = _run(ip, "-q --module named", CELLS[0].replace("float*", "int*"), "cell-10")
    assert moved.explanation.kinds == ("source",)


def test_cuda_and_cuda_load_never_push_over_names_ipython_relies_on(tmp_path, monkeypatch):
    ip = _shell(tmp_path, monkeypatch)
    reserved = ["get_ipython", "In", "Out", "exit", "quit"]
    before = {n: ip.user_ns[n] for n in reserved}
    body = "".join(f'extern "C" __global__ void {n}(int* p) {{}}\n' for n in reserved)
    ip.run_cell_magic("cuda", "-q", body)
    assert {n: ip.user_ns[n] for n in reserved} == before
    pushed = {k.name_expression: k.python_name for k in ip.user_ns["cuda_module"].kernels.values()}
    assert pushed == {n: f"{n}_2" for n in reserved}
    path = tmp_path / "k.cubin"
    path.write_bytes(ip.user_ns["cuda_module"].cubin)
    ip.run_line_magic("cuda_load", f"{path} --module loaded -q")
    assert {n: ip.user_ns[n] for n in reserved} == before
    loaded = ip.user_ns["loaded"]
    assert {k.python_name for k in loaded.kernels.values()} == {f"{n}_2" for n in reserved}
    assert any("a name IPython relies on" in w for w in loaded.report.warnings)


def test_the_shown_report_is_kept_through_the_modules_own_setter(tmp_path, monkeypatch):
    ip = _shell(tmp_path, monkeypatch)
    ip.run_cell_magic("cuda", "-q", CELLS[0])
    module = ip.user_ns["cuda_module"]
    assert "push" in module.report.timings and module.warnings == module.report.warnings
    with pytest.raises(AttributeError):
        module.report = None
    other = cudamagic_build(CELLS[1], tmp_path)
    with pytest.raises(ValueError, match="cannot be module"):
        module.set_report(other.report)


def cudamagic_build(source: str, tmp_path):
    import cudamagic

    return cudamagic.build(source, cache=tmp_path / "cache")


# What a new user porting CuPy RawModule code met (from test_user_tries.py): %cuda_load --arch
@pytest.mark.parametrize("arch, sm, linked", [("sm_80", 80, False), ("sm_90", 90, False),
                                              ("sm_100", 100, True)])
def test_cuda_load_picks_a_fatbins_target_with_arch(tmp_path, monkeypatch, arch, sm, linked):
    ip = _shell(tmp_path, monkeypatch)
    ip.run_line_magic("cuda_load", f'"{FIXTURES / "nvcc_kernels.fatbin"}" --arch {arch} '
                                   "--module fb -q")
    module = ip.user_ns["fb"]
    assert module.image.sm == sm and "fill" in module.kernels
    assert ("link (nvJitLink)" in module.report.text()) == linked
    assert "PTX or fatbin" in ip.find_line_magic("cuda_load").__doc__


def test_every_line_magic_answers_dash_h_with_its_help(tmp_path):
    """Issue 51 snag 4: ``%%cuda -h`` showed help and the six line magics an error; -h shows
    the whole help, the same text as ``%name?``."""
    code = r'''
import contextlib, io, json
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
out, helps, full = {}, {}, {}
for m in ("cuda_load", "cuda_cache", "cuda_info", "cuda_bench", "cuda_sanitize", "cuda_profile"):
    for flag in ("-h", "--help"):
        with contextlib.redirect_stdout(io.StringIO()) as said:
            r = ip.run_cell(f"%{m} {flag}")
        out[f"{m} {flag}"] = repr(r.error_in_exec)
        helps[f"{m} {flag}"] = said.getvalue()
    full[m] = ip.object_inspect(f"%{m}")["docstring"]  # what %m? shows
print("RESULT " + json.dumps([out, helps, full]))
'''
    said = run_python(code, {"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    errors, helps, full = json.loads(said.split("RESULT ", 1)[1])
    assert set(errors.values()) == {"None"}, errors
    for asked, text in helps.items():  # the whole help, continuation lines too (issue: -h
        # dropped the usage's second line, the rest of wrapped sentences, -n's description)
        assert text.strip() == full[asked.split()[0]].strip(), (asked, text)
    for words in ("%cuda_load [--arch sm_XX]", "%cuda_cache [--older-than AGE]",
                  "Device, driver, NVRTC", "%cuda_bench [-n REPEAT", "%cuda_sanitize [--tool",
                  "%cuda_profile kernel(grid, block, args)"):
        assert words in said, said


# --- %cuda_cache list tells extern "C" cells apart (issue 51, snag 7) --------------------------

EXTERN_A = '''
// scale: the first cell
#if 0
extern "C" __global__ void never_compiled(float* x) {}
#endif
#define KERNEL(name) extern "C" __global__ void name(float* x, int n) {}
KERNEL(made_by_a_macro)
extern "C" __global__ void scale(float* x, float a, int n) {}
'''
EXTERN_B = 'extern "C" __global__ void fill(int* x, int v) {}\n'


def test_cache_list_names_extern_c_entries_by_their_kernels_first_line_and_origin(
        tmp_path, monkeypatch):
    """Two extern "C" cells (no name expressions) are told apart: each entry names the kernels
    its CUBIN holds (one made by a macro is there, one under #if 0 is not: read from the CUBIN,
    not the source), the cell's first line, and the host:folder it was built in (a %cd
    between the builds shows)."""
    import socket

    from cudamagic.store.cache import KernelCache

    ip = _shell(tmp_path, monkeypatch)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    monkeypatch.chdir(first)
    ip.run_cell_magic("cuda", "-q", EXTERN_A)
    ip.run_line_magic("cd", "-q " + str(second))
    ip.run_cell_magic("cuda", "-q", EXTERN_B)
    listing = ip.run_line_magic("cuda_cache", "list")
    b, a = listing.entries  # newest first
    assert (sorted(a.kernels), b.kernels) == (["made_by_a_macro", "scale"], ("fill",))
    assert (a.first_line, b.first_line) == ("// scale: the first cell", EXTERN_B.strip())
    host = socket.gethostname()
    assert (a.made_at, b.made_at) == (f"{host}:{first}", f"{host}:{second}")
    text = listing.text().splitlines()
    assert "never_compiled" not in listing.text()
    assert all(w in text[3] for w in ("made_by_a_macro, scale", "// scale: the first cell",
                                      f"{host}:{first}"))
    assert all(w in text[2] for w in ("fill", EXTERN_B.strip(), f"{host}:{second}"))
    html = listing._repr_html_()
    assert "made_by_a_macro, scale" in html and f"{host}:{second}" in html

    # an entry written before the record said where it was made lists "-" there, still readable
    cache = KernelCache(tmp_path / "cache")
    record, _ = cache.get(a.key)
    from dataclasses import replace
    cache.put(a.key, replace(record, made=None))
    old = {e.key: e for e in ip.run_line_magic("cuda_cache", "list").entries}[a.key]
    assert (old.first_line, old.made_at, old.readable) == ("", "", True)
    assert sorted(old.kernels) == sorted(a.kernels)
