"""The whole pipeline with the real NVRTC and a real diskcache: miss, hit, restore, recompile."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time

import pytest

import cudamagic
from cudamagic.toolchain.device import driver
from cudamagic.toolchain.compile.deps import RACY_NS
from cudamagic.errors import CompileError, NameResolutionError, NoDeviceError
from cudamagic.pipeline.steps import build_module, options_from_args

from .conftest import run_python

# Every kind of spelling variant the core issue names, several naming one symbol.
SOURCE = r"""
#include <cupy/complex.cuh>
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= K; } }
template <typename T> __global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
template <typename T, int K> __global__ void shift(T* x) {}
template <typename T, bool B> __global__ void flag(T* x, unsigned n) {}
template <typename T> __global__ void by_size(T* x) {}
typedef unsigned long my_size;
enum class Tag { A, B };
template <Tag t> __global__ void tagged(int* x) {}
template <typename A, typename B> __global__ void cast(const A* in, B* out) {}
template <typename T> __global__ void cx(complex<T>* z, int n) {
  int i = threadIdx.x; if (i < n) z[i] = exp(z[i]); }
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""
DECIDABLE = ["ns::scale<float, 3>", "ns::scale<float,(int)3>", "saxpy<float>", "saxpy< double >",
             "shift<float, -1>", "shift<float, (int)-2>", "flag<double, true>",
             "flag<double, (bool)0>", "by_size<unsigned long>", "by_size<size_t>",
             "tagged<(Tag)0>",
             "cast<const float*, float *>", "cast<float const *,float*>", "cx<float>",
             "cx<double>"]
UNDECIDABLE = ["by_size<my_size>", "tagged<Tag::B>"]  # an alias; an enumerator
ALL = DECIDABLE + UNDECIDABLE

CHILD = r"""
import json, sys
from cuda.bindings import nvrtc
compiles = []
real = nvrtc.nvrtcCompileProgram
def counted(*a):
    compiles.append(1)
    return real(*a)
nvrtc.nvrtcCompileProgram = counted
import cudamagic
args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
mod = cudamagic.build(SOURCE, EXPRS, cache=CACHE)
print(json.dumps({"hit": mod.hit, "compiles": len(compiles),
                  "map": {k.name_expression: k.symbol for k in mod.kernels.values()},
                  "how": {k.name_expression: k.resolved_by for k in mod.kernels.values()},
                  "names": {k.name_expression: k.python_name for k in mod.kernels.values()}}))
"""


def _child(cache_dir, exprs) -> dict:
    code = f"SOURCE = {SOURCE!r}\nEXPRS = {exprs!r}\nCACHE = {str(cache_dir)!r}\n" + CHILD
    return json.loads(run_python(code).strip().splitlines()[-1])


def test_fresh_process_is_a_hit_with_nvrtcs_exact_map(tmp_path):
    first = _child(tmp_path, ALL)
    assert not first["hit"] and first["compiles"] == 1  # fill's declared types come from the same compile
    assert set(first["how"].values()) == {"nvrtc", "extern-c"}
    second = _child(tmp_path, ALL)  # a kernel restart
    assert second["hit"] and second["compiles"] == 0
    assert second["map"] == first["map"]
    # each stored pair is checked against its demangled symbol: equal where that decides,
    # accepted unverified where it cannot (an alias, an enumerator)
    assert {e: second["how"][e] for e in ALL} == {
        **{e: "stored" for e in DECIDABLE}, **{e: "stored-unverified" for e in UNDECIDABLE}}
    # the spelling variants name one symbol each, as NVRTC says
    assert first["map"]["by_size<my_size>"] == first["map"]["by_size<unsigned long>"] \
        == first["map"]["by_size<size_t>"]
    assert first["map"]["ns::scale<float, 3>"] == "_ZN2ns5scaleIfLi3EEEvPT_i"
    assert second["names"]["ns::scale<float, 3>"] == "ns_scale_float_3"
    assert second["names"]["fill"] == "fill"


def _strip_lowered_map(cache, module):
    record, _ = cache.get(module.key)
    cache.put(module.key, dataclasses.replace(record, lowered=None))


def test_without_stored_map_decidable_expressions_still_hit(cache, compiler):
    first = build_module(SOURCE, options_from_args([], DECIDABLE), cache=cache, compiler=compiler)
    _strip_lowered_map(cache, first)
    again = build_module(SOURCE, options_from_args([], DECIDABLE), cache=cache, compiler=compiler)
    assert again.hit and len(compiler.calls) == 1
    assert {e: again[e].resolved_by for e in DECIDABLE} == {e: "demangled" for e in DECIDABLE}
    assert {e: again[e].symbol for e in DECIDABLE} == {e: first[e].symbol for e in DECIDABLE}


def test_without_stored_map_undecidable_expressions_recompile_and_restore_the_map(cache, compiler):
    first = build_module(SOURCE, options_from_args([], ALL), cache=cache, compiler=compiler)
    _strip_lowered_map(cache, first)
    again = build_module(SOURCE, options_from_args([], ALL), cache=cache, compiler=compiler)
    assert not again.hit and len(compiler.calls) == 2
    assert "could not be resolved" in again.report.miss_reason
    assert {e: again[e].symbol for e in ALL} == {e: first[e].symbol for e in ALL}
    record, _ = cache.get(first.key)
    assert record.lowered == {e: first[e].symbol for e in ALL}  # re-stored with its map
    third = build_module(SOURCE, options_from_args([], ALL), cache=cache, compiler=compiler)
    assert third.hit and len(compiler.calls) == 2


def test_stored_symbol_missing_from_cubin_recompiles(cache, compiler):
    first = build_module(SOURCE, options_from_args([], ["saxpy<float>"]), cache=cache,
                         compiler=compiler)
    record, _ = cache.get(first.key)
    cache.put(first.key, dataclasses.replace(record, lowered={"saxpy<float>": "_Z5wrongv"}))
    again = build_module(SOURCE, options_from_args([], ["saxpy<float>"]), cache=cache,
                         compiler=compiler)
    assert not again.hit and "is not in the CUBIN" in again.report.miss_reason
    assert again["saxpy<float>"].symbol == first["saxpy<float>"].symbol


def test_force_and_no_cache(cache, compiler):
    opts = options_from_args([], ["saxpy<float>"])
    build_module(SOURCE, opts, cache=cache, compiler=compiler)
    forced = build_module(SOURCE, dataclasses.replace(opts, force=True), cache=cache,
                          compiler=compiler)
    assert not forced.hit and forced.report.miss_reason == "--force"
    uncached = build_module(SOURCE, dataclasses.replace(opts, no_cache=True), cache=cache,
                            compiler=compiler)
    assert not uncached.hit and len(compiler.calls) == 3 and len(cache) == 1


def test_unknown_lookup_lists_what_the_module_holds(cache):
    mod = cudamagic.build(SOURCE, ["saxpy<float>", "saxpy<double>"], cache=cache)
    with pytest.raises(NameResolutionError) as err:
        mod["saxpy<flaot>"]
    assert "saxpy<float>" in str(err.value) and "Closest" in str(err.value)
    assert set(mod.kernels) == {"saxpy<float>", "saxpy<double>", "fill"}
    with pytest.raises(NameResolutionError, match=r"add -n 'saxpy<int>' to the cell's line"):
        mod["saxpy<int>"]  # an instance not named: how to get it, not only what is there
    with pytest.raises(NameResolutionError) as err:
        mod["scale<int>"]  # no template of that name here: nothing to add
    assert "add -n" not in str(err.value)


def test_failed_compile_leaves_no_entry(cache):
    with pytest.raises(CompileError):
        cudamagic.build("__global__ void k( {", ["k"], cache=cache)
    with pytest.raises(CompileError, match='-n "nothere"'):
        cudamagic.build(SOURCE, ["nothere"], cache=cache)
    assert len(cache) == 0


def test_device_function_is_not_a_kernel(cache):
    with pytest.raises(CompileError, match='-n "twice<float>".*non-__global__'):
        cudamagic.build("template <typename T> __device__ T twice(T x) { return 2 * x; }\n"
                        "template __device__ float twice<float>(float);\n", ["twice<float>"],
                        cache=cache)
    assert len(cache) == 0


@pytest.mark.parametrize("include, expr", [
    ("#include <cupy/complex.cuh>\ntemplate <typename T> __global__ void k(complex<T>* z)"
     " { z[0] = exp(z[0]); }", "k<float>"),
    ("#include <cuda/std/complex>\ntemplate <typename T> __global__ void k(cuda::std::complex<T>* z)"
     " { z[0] = cuda::std::exp(z[0]); }", "k<double>"),
    ("#include <cub/warp/warp_reduce.cuh>\ntemplate <typename T> __global__ void k(T* x)"
     " { using W = cub::WarpReduce<T>; __shared__ typename W::TempStorage t;"
     " T s = W(t).Sum(x[threadIdx.x]); if (threadIdx.x == 0) x[0] = s; }", "k<int>"),
    ("#include <cuda_fp16.h>\ntemplate <typename T> __global__ void k(T* x)"
     " { x[0] = __float2half(1.0f); }", "k<__half>"),
])
def test_headers_users_expect(cache, include, expr):
    mod = cudamagic.build(include, [expr], cache=cache)
    assert mod[expr].resolved_by == "nvrtc"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_load_cubin_from_nvcc(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {} }\n"
                   "template __global__ void ns::scale<float, 3>(float*, int);\n"
                   "template __global__ void ns::scale<double, -1>(double*, int);\n"
                   'extern "C" __global__ void c(double* x) {}\n')
    out = tmp_path / "k.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    mod = cudamagic.load_cubin(out, ["ns::scale<float, 3>", "ns::scale<double,(int)-1>"])
    assert mod["ns::scale<float, 3>"].symbol == "_ZN2ns5scaleIfLi3EEEvPT_i"
    assert mod["ns::scale<double,(int)-1>"].symbol == "_ZN2ns5scaleIdLin1EEEvPT_i"
    assert {k.resolved_by for k in mod.kernels.values()} == {"demangled", "extern-c"}
    assert mod.report.origin == "cubin" and mod.report.arch == "sm_90"
    with pytest.raises(NameResolutionError, match="closest"):
        cudamagic.load_cubin(out, ["ns::scale<float, 4>"])


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU")
def test_calling_without_a_gpu_says_so(cache):
    mod = cudamagic.build(SOURCE, ["saxpy<float>"], cache=cache)
    with pytest.raises(NoDeviceError, match="no CUDA device is available"):
        mod["saxpy<float>"]((1,), (32,), (1.0, None, None, 0))


def test_relative_includes_and_header_edits(tmp_path, cache, compiler):
    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "k.cuh"
    header.write_text("#define K 2\n")
    # saved before the build, as a user does: a header saved within the file system's clock
    # resolution of the compile is not stored (test_deps checks that rule)
    time.sleep(2 * RACY_NS / 1e9)
    src = '#include "k.cuh"\ntemplate <typename T> __global__ void k(T* x) { x[0] *= K; }\n'
    opts = options_from_args(["-I", "inc"], ["k<float>"])
    m1 = build_module(src, opts, cache=cache, base_dir=tmp_path, compiler=compiler)
    m2 = build_module(src, opts, cache=cache, base_dir=tmp_path, compiler=compiler)
    assert m2.hit, (m1.warnings, m2.report.miss_reason)
    header.write_text("#define K 3\n")
    assert not build_module(src, opts, cache=cache, base_dir=tmp_path, compiler=compiler).hit
    assert len(compiler.calls) == 2


def test_stored_python_names_must_be_identifiers(cache, compiler):
    first = build_module(SOURCE, options_from_args([], ["saxpy<float>"]), cache=cache,
                         compiler=compiler)
    record, _ = cache.get(first.key)
    cache.put(first.key, dataclasses.replace(
        record, python_names={"saxpy<float>": "not an identifier; rm -rf"}))
    again = build_module(SOURCE, options_from_args([], ["saxpy<float>"]), cache=cache,
                         compiler=compiler)
    assert not again.hit and "not an identifier" in again.report.miss_reason
    assert again["saxpy<float>"].python_name == "saxpy_float"


@pytest.mark.parametrize("arg, message", [
    ("no/such/file.cubin", "cannot be read"),
    (".", "is a folder"),
    (123, "takes a path or the CUBIN's bytes"),
    (b"not an elf", "not a CUBIN"),
])
def test_load_cubin_says_what_is_wrong(arg, message):
    with pytest.raises(cudamagic.ImageError, match=message):
        cudamagic.load_cubin(arg, ["k<int>"])


def test_a_swapped_stored_map_is_never_served(cache, compiler):
    """An entry whose stored map swaps two kernels (each symbol is in the CUBIN) is caught by
    comparing each pair with its demangled symbol, and rebuilt."""
    src = "template <int N> __global__ void t(int* x) { x[0] = N; }\n"
    exprs = ["t<1>", "t<2>"]
    first = build_module(src, options_from_args([], exprs), cache=cache, compiler=compiler)
    record, _ = cache.get(first.key)
    swapped = {"t<1>": record.lowered["t<2>"], "t<2>": record.lowered["t<1>"]}
    cache.put(first.key, dataclasses.replace(record, lowered=swapped))
    again = build_module(src, options_from_args([], exprs), cache=cache, compiler=compiler)
    assert not again.hit and "does not match its CUBIN" in again.report.miss_reason
    assert {e: again[e].symbol for e in exprs} == {e: first[e].symbol for e in exprs}


def test_a_stored_log_takes_the_line_numbers_of_the_cell_that_shows_it(cache, compiler):
    """A warning on source line 2 is cell line 3 below a magic line, whoever compiled it."""
    src = "__global__ void k(int* p) {\n  int unused = 3;\n  *p = 1;\n}\n"
    first = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert "line 2: warning" in first.report.log
    in_a_cell = build_module(src, options_from_args([], []), cache=cache, compiler=compiler,
                             line_offset=1)
    assert in_a_cell.hit and "line 3: warning" in in_a_cell.report.log
    again = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert "line 2: warning" in again.report.log


def test_python_names_do_not_depend_on_the_cache_history(cache, compiler):
    src = "template <typename T> __global__ void t(T* x) {}\n"
    first = build_module(src, options_from_args([], ["t<int>"], module="t_int"), cache=cache,
                         compiler=compiler)
    assert first["t<int>"].python_name == "t_int_2"  # the module took t_int
    again = build_module(src, options_from_args([], ["t<int>"]), cache=cache, compiler=compiler)
    assert again.hit and again["t<int>"].python_name == "t_int"


def test_a_kernel_never_takes_a_name_ipython_relies_on(cache, compiler):
    mod = build_module('extern "C" __global__ void get_ipython(int* p) {}\n',
                       options_from_args([], []), cache=cache, compiler=compiler,
                       reserved=("get_ipython", "In", "Out"))
    assert mod["get_ipython"].python_name == "get_ipython_2"
    assert any("a name IPython relies on" in w for w in mod.warnings)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_load_cubin_refuses_what_is_not_a_file(tmp_path, kind):
    import os

    path = tmp_path / "k.cubin"
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block for ever
    else:
        path.symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(cudamagic.ImageError, match="not a regular file"):
        cudamagic.load_cubin(path, ["k<int>"])


def test_odd_arguments_to_build_and_lookups_say_what(cache):
    assert cudamagic.build('extern "C" __global__ void z(int* x) {}', None, None,
                           cache=cache).hit is False  # None: no names, no options
    with pytest.raises(cudamagic.OptionError, match="base_dir must be a folder"):
        cudamagic.build('extern "C" __global__ void z(int* x) {}', cache=cache, base_dir=123)
    mod = cudamagic.build('extern "C" __global__ void z(int* x) {}', cache=cache)
    with pytest.raises(NameResolutionError, match="looked up by its name expression, a str"):
        mod[123]


# --- the key: the working folder and the toolkit ------------------------------------------------

INCLUDES = '#include "here.h"\n__global__ void k(float* x) { x[0] = HERE; }\n'


def test_the_working_folder_is_checked_even_with_base_dir(tmp_path, monkeypatch, cache,
                                                           compiler):
    """NVRTC looks in the working folder first for a quoted include, whatever base_dir says:
    a build run from folder B must not be served folder A's CUBIN. The key no longer holds the
    working folder (issue 32: two checkouts share entries); the entry's manifest names the
    header by its path from the working folder and its content, so B's differing header is a
    miss, and back in A the entry (now B's) is a miss again, never B's CUBIN."""
    base, a, b = (tmp_path / n for n in ("base", "a", "b"))
    for folder, value in ((base, 0), (a, 1), (b, 2)):
        folder.mkdir()
        (folder / "here.h").write_text(f"#define HERE {value}\n")
    time.sleep(2 * RACY_NS / 1e9)  # saved before the build: one saved just before is not stored
    opts = options_from_args([], [])
    monkeypatch.chdir(a)
    from_a = build_module(INCLUDES, opts, cache=cache, base_dir=base, compiler=compiler)
    monkeypatch.chdir(b)
    from_b = build_module(INCLUDES, opts, cache=cache, base_dir=base, compiler=compiler)
    assert not from_b.hit and len(compiler.calls) == 2
    assert from_b.report.miss_reason and "here.h" in from_b.report.miss_reason
    assert from_b.cubin != from_a.cubin  # HERE is 2, not A's 1
    monkeypatch.chdir(a)
    again = build_module(INCLUDES, opts, cache=cache, base_dir=base, compiler=compiler)
    assert again.cubin == from_a.cubin and not again.hit


def test_the_toolkit_is_in_the_key(cache, compiler, monkeypatch):
    """Other CUDA headers (another CCCL, another CuPy) are another build."""
    import dataclasses as dc

    from cudamagic.pipeline import steps as pipeline
    from cudamagic.core.toolkit import toolkit

    src = '__global__ void k(float* x) {}\n'
    first = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    other = dc.replace(toolkit(), distributions=(*toolkit().distributions,
                                                  "cccl-9.9.9.dist-info"))
    monkeypatch.setattr(pipeline, "toolkit", lambda: other)
    again = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert not again.hit and again.key != first.key
    assert again.report.explanation.kinds == ("toolkit",)


# --- the working folder NVRTC cannot search ---------------------------------------------------

def _deleted(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    os.chdir(gone)
    gone.rmdir()


def _not_utf8(tmp_path):
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.mkdir(odd)
    os.chdir(odd)


@pytest.mark.parametrize("make, words", [(_deleted, "no longer exists"),
                                         (_not_utf8, "is not UTF-8 text")])
@pytest.mark.parametrize("call", ["build", "entry_key"])
def test_a_working_folder_nvrtc_cannot_search_is_said(tmp_path, monkeypatch, cache, make, words,
                                                      call):
    from cudamagic.pipeline.steps import entry_key

    monkeypatch.chdir(tmp_path)  # restored after the test, whatever make() did
    make(tmp_path)
    src = '__global__ void k(float* x) {}\n'
    with pytest.raises(cudamagic.OptionError, match=words) as info:
        if call == "build":
            cudamagic.build(src, cache=cache, base_dir=tmp_path)
        else:
            entry_key(src, options_from_args([], []))
    assert "change to a folder" in str(info.value)
    assert not list(cache.keys())  # nothing stored


# --- Ctrl-C during a compile --------------------------------------------------------------------

def test_ctrl_c_during_a_compile_keeps_the_result_and_says_interrupted(cache, compiler):
    """NVRTC cannot be stopped inside a compile: the signal arrives as it returns. The build is
    kept (the next run is a hit) and the interrupt then says what happened."""
    import signal

    def interrupted(*args, **kw):
        result = compiler(*args, **kw)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C, seen as NVRTC returns
        return result

    src = 'extern "C" __global__ void k(float* x) {}\n'
    with pytest.raises(KeyboardInterrupt, match=r"interrupted .* s into the build; .* next run is a hit"):
        build_module(src, options_from_args([], []), cache=cache, compiler=interrupted)
    again = build_module(src, options_from_args([], []), cache=cache, compiler=compiler)
    assert again.hit and len(compiler.calls) == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_a_sigint_handler_of_the_programs_own_is_left_alone(cache, compiler, monkeypatch):
    import signal

    seen = []
    monkeypatch.setattr(signal, "signal", signal.signal)  # restored after the test
    previous = signal.signal(signal.SIGINT, lambda *a: seen.append(a[0]))
    try:
        def interrupted(*args, **kw):
            result = compiler(*args, **kw)
            signal.raise_signal(signal.SIGINT)
            return result

        mod = build_module('extern "C" __global__ void k(float* x) {}\n',
                           options_from_args([], []), cache=cache, compiler=interrupted)
        assert not mod.hit and seen == [signal.SIGINT]  # the program's handler had it
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_failing_compile_says_interrupted(cache):
    import signal

    from cudamagic.toolchain.compile.nvrtc import compile_cubin

    def interrupted(*args, **kw):
        try:
            return compile_cubin(*args, **kw)
        finally:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt, match="interrupted .* it failed, so nothing is kept"):
        build_module("__global__ void k(float* x) { x[0] = }\n", options_from_args([], []),
                     cache=cache, compiler=interrupted)
    assert not list(cache.keys())


# --- Python names ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["lambda", "None", "True", "def", "pass", "yield", "async"])
def test_a_kernel_named_as_a_python_keyword_is_pushed_with_an_underscore(cache, name):
    mod = cudamagic.build(f'extern "C" __global__ void {name}(int* p) {{}}\n', cache=cache)
    assert mod[name].python_name == f"{name}_"
    assert any(f"pushed as '{name}_'" in w and "Python keyword" in w for w in mod.warnings)


# --- foreign CUBINs without -n -----------------------------------------------------------------

FOREIGN = r"""
namespace ns { template <typename T, int K> __global__ void scale(T* x, int n) {} }
template <typename T> __global__ void over(T* x) {}
template <typename T> __global__ void over(T* x, int n) {}
template <typename T> __global__ void saxpy(T a, const T* x, T* y, int n) {}
extern "C" __global__ void plain(float* x) {}
"""
INSTANCES = {"ns::scale<float, 3>": "ns_scale_float_3",
             "ns::scale<double, -1>": "ns_scale_double_m1",
             "saxpy<float>": "saxpy_float", "saxpy<unsigned int>": "saxpy_unsigned_int"}
OVERLOADS = ["(void(*)(float*))over<float>", "(void(*)(float*, int))over<float>"]


def test_a_foreign_cubin_without_names_pushes_every_unambiguous_template_instance(cache):
    built = cudamagic.build(FOREIGN, list(INSTANCES) + OVERLOADS, cache=cache)
    mod = cudamagic.load_cubin(built.cubin)
    by_symbol = {k.symbol: k for k in mod.kernels.values()}
    for expr, name in INSTANCES.items():
        kern = by_symbol[built[expr].symbol]
        assert kern.python_name == name and kern.resolved_by == "demangled"
        assert mod[kern.name_expression] is kern
    assert by_symbol[built["plain"].symbol].python_name == "plain"
    # the two over<float> share a name: neither is pushed, both are listed
    assert not {built[e].symbol for e in OVERLOADS} & set(by_symbol)
    (note,) = [w for w in mod.warnings if "template instance" in w]
    assert note.startswith("2 template instance(s)") and note.count("over<float>") == 2
    named = cudamagic.load_cubin(built.cubin, ["saxpy<float>"])  # with -n: only what is asked
    assert set(named.kernels) == {"saxpy<float>", "plain"}


# --- shipped modules ---------------------------------------------------------------------------

def test_the_same_shipped_module_arriving_twice_is_rebuilt_once(cache, monkeypatch):
    import pickle

    from cudamagic.pipeline import module as M

    mod = cudamagic.build(FOREIGN, list(INSTANCES), cache=cache)
    blob = pickle.dumps(mod)
    reads = []
    real = M.read_cubin
    monkeypatch.setattr(M, "read_cubin", lambda cubin: reads.append(1) or real(cubin))
    first, second = pickle.loads(blob), pickle.loads(blob)
    assert first is second and len(reads) == 1
    assert first["saxpy<float>"].module is first


@pytest.mark.parametrize("include", ["cooperative_groups.h", "cuda/std/complex",
                                     "cuda/std/cstdint", "cub/block/block_reduce.cuh"])
def test_files_beside_the_notebook_never_stand_in_for_toolkit_headers(tmp_path, monkeypatch,
                                                                       include):
    """The toolkit's headers include each other with angle brackets (libcu++ includes
    ``<version>`` where one exists): a notebook folder holding files of such names must not be
    searched for them, while the cell's own quoted includes are still found there."""
    for name in ("version", "complex", "type_traits", "cstdint", "utility", "atomic"):
        (tmp_path / name).write_text("#error a file beside the notebook was taken for <%s>\n" % name)
    (tmp_path / "mine.cuh").write_text("#define MINE 3\n")
    monkeypatch.chdir(tmp_path)
    src = f'#include <{include}>\n#include "mine.cuh"\n__global__ void k(int* x) {{ *x = MINE; }}\n'
    mod = cudamagic.build(src, cache=str(tmp_path / "cache"))
    assert "k" in mod.kernels
