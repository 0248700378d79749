"""A corpus of bad cells and magic lines, through IPython: each gets a specific error or warning
of the project's own, the notebook stays usable, and no failed compile leaves a cache entry."""

from __future__ import annotations

import warnings

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cudamagic.store.cache import KernelCache
from cudamagic.errors import (CompileError, CudaMagicError, InputWarning, OptionError,
                              ShadowWarning, SourceError)
import os
import time
import cudamagic
from cudamagic import CudaMagicError
from cudamagic.errors import OptionError
from cudamagic.core.options import BuildOptions

K = "template <typename T> __global__ void k(T* x) { x[0] = T(1); }\n"
OVERLOADS = "__global__ void f(float* x) {}\n__global__ void f(double* x) {}\n"

# (label, magic line, cell, what must happen: an error class or a warning class)
CORPUS = [
    ("syntax error", "-n k<float>", K.replace(";", ""), CompileError),
    ("unknown -n", '-n "nothere<int>"', K, CompileError),
    ("malformed -n", '-n "k<float"', K, CompileError),
    ("-n with trailing junk", '-n "k<float>; int y"', K, CompileError),
    ("empty -n", '-n ""', K, OptionError),
    ("-n naming a __device__ function", "-n d", "__device__ void d() {}\n" + K, CompileError),
    ("ambiguous overload without a cast", "-n f", OVERLOADS, CompileError),
    ("-n naming no kernel and a type", "-n int", K, CompileError),
    ("unknown NVRTC option", "-o -bogus", K, OptionError),
    ("option without its dash", "-o lineinfo", K, OptionError),
    ("conflicting arch options", "--arch sm_90 -o -arch=sm_80", K, OptionError),
    ("conflicting std options", "-o -std=c++14", K, OptionError),
    ("arch NVRTC does not know", "--arch sm_99", K, OptionError),
    ("PTX arch", "--arch compute_90", K, OptionError),
    ("bad dialect", "--std c++98", K, OptionError),
    ("unknown magic flag", "--bogus", K, OptionError),
    ("flag missing its value", "-n", K, OptionError),
    ("unbalanced quote", '-n "k<float>', K, OptionError),
    ("module name not an identifier", "--module 3d", K, OptionError),
    ("malformed macro", "-D 1X=2", K, OptionError),
    ("option that makes no CUBIN", "-o -ptx", K, OptionError),
    ("empty cell", "", "\n", SourceError),
    ("blank cell", "", "  \n\t\n", SourceError),
    ("NUL byte", "", "__global__ void z(int* x) {}\n\0\n", SourceError),
    ("invalid UTF-8", "", "// caf\udce9\n__global__ void z(int* x) {}\n", SourceError),
    ("missing quoted header", "", '#include "nothere.cuh"\n__global__ void z(int* x) {}\n', CompileError),
    ("#error", "", "#error stop here\n", CompileError),
    ("static_assert", "-n k<float>", K + "static_assert(sizeof(int) == 3, \"no\");\n", CompileError),
    ("name expression with a NUL", '-n "k<float>\0"', K, OptionError),
    ("cell with no kernels", "", "__device__ int twice(int x) { return 2 * x; }\n",
     (InputWarning, "defines no __global__ kernel")),
    ("templates but no -n", "", K, (InputWarning, 'e.g. -n "k<float>"')),
    ("duplicate -n", "-n k<float> -n k<float>", K, (InputWarning, "more than once for 'k<float>'")),
    ("expressions that sanitize to one name", '-n "k<a::b>" -n "k<a_b>"',
     "namespace a { struct b {}; }\nstruct a_b {};\n" + K.replace("T(1)", "T()"),
     (InputWarning, "'k<a_b>' is pushed as 'k_a_b_2'")),
    ("-I folder that does not exist", "-I no/such/dir", "__global__ void z(int* x) {}\n",
     (InputWarning, "-I no/such/dir: no such folder")),
    ("kernel name shadowing a builtin", "", "extern \"C\" __global__ void sum(int* x) {}\n",
     (ShadowWarning, "hides Python's builtin sum()")),
    ("kernel name shadowing a user variable", "", "extern \"C\" __global__ void data(int* x) {}\n",
     (ShadowWarning, "'data' replaces the notebook's variable of type list")),
    ("module name shadowing a user variable", "--module results", K.replace("T(1)", "T(2)") + "__global__ void z2(int* x) {}\n",
     (ShadowWarning, "'results' replaces the notebook's variable of type dict")),
    ("overloads without names", "", OVERLOADS, (InputWarning, "overloaded kernel(s)")),
    # options mean what NVRTC makes of them (issue 9, item 5)
    ("NUL in an option", '-o "-DA=1\0-DB=2"', K, OptionError),
    ("NUL in an -I", '-I "inc\0x"', K, OptionError),
    ("NUL in the magic line", '-q\0', K, OptionError),
    ("lone surrogate in -n", '-n "k<\udce9>"', K, OptionError),
    ("lone surrogate in -o", '-o "-D\udce9"', K, OptionError),
    ("lone surrogate in -I", '-I "inc\udce9"', K, OptionError),
    ("syntax-only option (no CUBIN)", "-o -fdevice-syntax-only", K, OptionError),
    ("syntax-only option, long form", "-o --fdevice-syntax-only", K, OptionError),
    ("arch in -o with a space", '-o "-arch sm_80"', K, OptionError),
    ("arch in -o, long form", "-o --gpu-architecture=sm_80", K, OptionError),
    ("precompiled headers (files the key cannot see)", "-o -pch", K, OptionError),
    # a module is never silently replaced (issue 9, item 8)
    ("module name that is a keyword", "--module class", K, OptionError),
    ("extern C kernel named like the module", "",
     'extern "C" __global__ void cuda_module(int* x) {}\n',
     (InputWarning, "'cuda_module' is pushed as 'cuda_module_2'")),
    ("module named like a kernel", '--module saxpy_float -n "saxpy<float>"',
     "template <typename T> __global__ void saxpy(T* x) {}\n",
     (InputWarning, "'saxpy<float>' is pushed as 'saxpy_float_2'")),
    ("1 MB source", "", "// " + "x" * 80 + "\n" * 1 + ("// " + "y" * 100 + "\n") * 10000
     + "__global__ void big(int* x) {}\n", None),
    ("1000 name expressions", " ".join(f'-n "lots<{i}>"' for i in range(1000)),
     "template <int N> __global__ void lots(int* x) { x[0] = N; }\n", None),
]


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    import os

    old = os.environ.get("CUDAMAGIC_CACHE_DIR")
    os.environ["CUDAMAGIC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    yield ip
    if old is None:
        os.environ.pop("CUDAMAGIC_CACHE_DIR")
    else:
        os.environ["CUDAMAGIC_CACHE_DIR"] = old


def _run(ip, line: str, cell: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ip.run_cell(f"%%cuda {line}\n{cell}", store_history=False, silent=True)
    return result.error_in_exec, [w.category for w in caught]


def _module_name(line: str) -> str:
    return line.split("--module ")[1].split()[0] if "--module " in line else "cuda_module"


def test_corpus(shell):
    assert len(CORPUS) >= 30
    shell.user_ns["data"] = [1, 2, 3]  # a user's variables
    shell.user_ns["results"] = {"a": 1}
    cache = KernelCache()
    for label, line, cell, expect in CORPUS:
        before = set(cache.keys())
        if isinstance(expect, tuple) and expect[0] is not ShadowWarning:
            shell.user_ns.pop(_module_name(line), None)
        error, warned = _run(shell, line, cell)
        if isinstance(expect, tuple):  # an input warning, said once, in the module's report
            assert error is None, (label, error)
            module = shell.user_ns[_module_name(line)]
            said = [w for w in module.report.warnings if expect[1] in w]
            assert len(said) == 1, (label, module.report.warnings)
            assert InputWarning not in warned, (label, "said twice: also a Python warning")
        elif expect is not None and not issubclass(expect, Warning):
            assert isinstance(error, expect), (label, error)
            assert isinstance(error, CudaMagicError), label
            assert set(cache.keys()) == before, f"{label}: a failed cell left a cache entry"
        elif expect is not None:
            assert error is None, (label, error)
            assert expect in warned, (label, warned)
        else:
            assert error is None, (label, error)
        # the notebook stays usable: a good cell still builds and its kernel is there
        ok_error, _ = _run(shell, "-q -n k<float>", K)
        assert ok_error is None and callable(shell.user_ns["k_float"]), label
    print(f"\nbad input: {len(CORPUS)} inputs tried, each handled as expected")


def test_a_module_and_a_kernel_of_one_name_both_stay_reachable(shell):
    from cudamagic.launch.kernel import Kernel
    from cudamagic.pipeline.steps import Module

    error, _ = _run(shell, "-q", 'extern "C" __global__ void cuda_module(int* x) {}\n')
    assert error is None
    assert isinstance(shell.user_ns["cuda_module"], Module)
    assert isinstance(shell.user_ns["cuda_module_2"], Kernel)
    assert shell.user_ns["cuda_module"]["cuda_module"] is shell.user_ns["cuda_module_2"]


# --------------------------------------------------------------------------------------------------
# Bad build() arguments found by attacking issue 17 as a new user: each is a CudaMagicError
# that says what to do (never a raw Python exception), options that read or write files the
# key cannot see are refused, and a long -n list is checked in linear time.

SRC = '__global__ void k(float* x) { x[0] = 1; }\n'

# options NVRTC takes that write a file on each compile (a hit writes none), or hand ptxas
# an options file the key cannot see
WRITES_OR_READS = ["-time=t.csv", "--time=t.csv", "-time=-", "--time=/tmp/x.csv",
                   "-Xptxas=--options-file=o.txt", "-Xptxas=-optf=o.txt",
                   "--ptxas-options=--options-file=o.txt", "--ptxas-options=-optf",
                   "-Xptxas=-v --options-file o.txt", "-Xptxas=-O3,-optf=o.txt"]
KEPT = ["-Xptxas=-v", "--ptxas-options=-O3", "-Xptxas=--optfoo", "-timeX", "-lineinfo"]


@pytest.mark.parametrize("opt", WRITES_OR_READS)
def test_options_with_files_the_key_cannot_see_are_refused(opt):
    with pytest.raises(OptionError, match="leave it out"):
        BuildOptions(options=(opt,))


@pytest.mark.parametrize("opt", KEPT)
def test_neighbouring_options_are_kept(opt):
    assert BuildOptions(options=(opt,)).options == (opt,)


def test_a_time_option_leaves_no_file_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError):
        cudamagic.build(SRC, options=["-time=t.csv"], use_cache=False)
    assert os.listdir(tmp_path) == []


BAD = {
    "arch: an integer of 5000 digits": dict(arch=10 ** 5000),
    "arch: a negative integer": dict(arch=-90),
    "arch: a float": dict(arch=9.0),
    "arch: a list": dict(arch=["sm_90"]),
    "arch: True": dict(arch=True),
    "arch: a string of 5000 digits": dict(arch="sm_" + "9" * 5000),
    "base_dir: a NUL byte": dict(base_dir="/tmp\0x"),
    "base_dir: a name that is not UTF-8": dict(base_dir=os.fsdecode(b"/tmp/\xff")),
    "base_dir: a path object, not UTF-8": dict(base_dir=__import__("pathlib").Path(
        os.fsdecode(b"/tmp/\xfe"))),
}


@pytest.mark.parametrize("label", list(BAD))
def test_bad_arguments_are_cudamagic_errors(label):
    with pytest.raises(CudaMagicError) as info:
        cudamagic.build(SRC, use_cache=False, **BAD[label])
    assert len(str(info.value)) < 400, "the message quotes the whole bad value"


def test_an_include_folder_name_too_long_for_the_system_is_a_note(tmp_path):
    """A -I name the file system refuses (ENAMETOOLONG) is a folder that is not there."""
    with pytest.warns(cudamagic.InputWarning, match="no such folder") as seen:
        m = cudamagic.build(SRC, options=["-I" + "/a" * 3000], cache=tmp_path / "c")
    assert m.kernels
    assert all(len(str(w.message)) < 1000 for w in seen), "the note quotes the whole name"


def test_many_name_expressions_are_checked_in_linear_time():
    names = tuple(f"k<{i}>" for i in range(40_000)) + ("k<7>",)
    start = time.perf_counter()
    opts = BuildOptions(name_expressions=names)
    assert time.perf_counter() - start < 2.0
    assert opts.duplicates == ("k<7>",) and len(opts.name_expressions) == 40_000
