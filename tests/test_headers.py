"""The header matrix: what kernel authors include, compiled from this venv's wheels alone
(the README's install), and for what cannot compile, the message that says what to use."""

from __future__ import annotations

import os

import pytest

import cudamagic
from cudamagic.core.toolkit import KNOWN_TO_FAIL
from cudamagic.errors import CompileError
from cudamagic.core.toolkit import include_hints, toolkit

# header -> a line of device code that uses it (so an include that compiles to nothing is not
# taken for one that works)
WORKS = {
    "cuda_fp16.h": "__half h = __float2half(x[0]); x[0] = __half2float(__hadd(h, h));",
    "cuda_bf16.h": "__nv_bfloat16 b = __float2bfloat16(x[0]); x[0] = __bfloat162float(b);",
    "cuda_fp8.h": "__nv_fp8_e4m3 f(x[0]); x[0] = float(f);",
    "mma.h": "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;"
             " nvcuda::wmma::fill_fragment(acc, 0.0f);",
    "cooperative_groups.h": "cooperative_groups::this_thread_block().sync();",
    "cooperative_groups/reduce.h":
        "namespace cg = cooperative_groups; auto t = cg::tiled_partition<32>("
        "cg::this_thread_block()); x[0] = cg::reduce(t, x[0], cg::plus<float>());",
    "cooperative_groups/memcpy_async.h":
        "namespace cg = cooperative_groups; __shared__ float s[32]; auto b = "
        "cg::this_thread_block(); cg::memcpy_async(b, s, x, sizeof(float) * 32); cg::wait(b);",
    "cuda/barrier": "__shared__ cuda::barrier<cuda::thread_scope_block> bar; (void)bar;",
    "cuda/pipeline": "auto p = cuda::make_pipeline(); p.producer_acquire(); p.producer_commit();",
    "cuda/ptx": "x[0] = float(cuda::ptx::get_sreg_laneid());",
    "cuda/std/cstdint": "cuda::std::uint32_t u = 3; x[0] = float(u);",
    "cuda/std/type_traits": "static_assert(cuda::std::is_same_v<float, decltype(x[0] + 1.0f)>);",
    "cuda/std/limits": "x[0] = cuda::std::numeric_limits<float>::max();",
    "cuda/std/array": "cuda::std::array<float, 2> a{1.0f, 2.0f}; x[0] = a[1];",
    "cuda/std/tuple": "auto t = cuda::std::make_tuple(1.0f, 2); x[0] = cuda::std::get<0>(t);",
    "cuda/std/utility": "auto p = cuda::std::make_pair(1.0f, 2); x[0] = p.first;",
    "cuda/std/complex": "cuda::std::complex<float> c(1.0f, 2.0f); x[0] = cuda::std::abs(c);",
    "cuda/std/atomic": "cuda::std::atomic_ref<float> r(x[0]); r.fetch_add(1.0f);",
    "cuda/std/cmath": "x[0] = cuda::std::sqrt(x[1]);",
    "cuda/std/bit": "x[0] = float(cuda::std::popcount(7u));",
    "cuda/std/span": "cuda::std::span<float> s(x, 2); x[0] = s[1];",
    "cuda/std/functional": "x[0] = cuda::std::plus<float>()(x[0], x[1]);",
    "cuda/std/cassert": "assert(x != nullptr);",
    "cuda/std/optional": "cuda::std::optional<float> o = x[0]; x[0] = o.value_or(0.0f);",
    "cub/block/block_reduce.cuh":
        "typedef cub::BlockReduce<float, 128> R; __shared__ typename R::TempStorage t;"
        " x[0] = R(t).Sum(x[threadIdx.x]);",
    "cub/block/block_scan.cuh":
        "typedef cub::BlockScan<int, 128> S; __shared__ typename S::TempStorage t; int o;"
        " S(t).ExclusiveSum(int(x[threadIdx.x]), o); x[0] = float(o);",
    "cub/block/block_load.cuh":
        "float v[4]; cub::LoadDirectBlocked(threadIdx.x, x, v); x[0] = v[0];",
    "cub/warp/warp_reduce.cuh":
        "typedef cub::WarpReduce<float> W; __shared__ typename W::TempStorage t;"
        " x[0] = W(t).Sum(x[threadIdx.x]);",
    "curand_kernel.h": "curandStatePhilox4_32_10_t s; curand_init(1234, threadIdx.x, 0, &s);"
                       " x[threadIdx.x] = curand_uniform(&s);",
    "cupy/complex.cuh": "thrust::complex<float> c(x[0], x[1]); x[0] = thrust::abs(c);",
}
# header -> what the message must say to do instead
# (<cstdint>, <cmath>, <thrust/complex.h> and the other standard headers cudamagic ships
# compile: the standard-header part of this file; turned off, they fail with a hint there too)
FAILS = {
    "complex": "<cuda/std/complex>",
    "optional": "<cuda/std/optional>",
    "cstdio": "without an include",
    "vector": "no C or C++ standard library",
    "cub/cub.cuh": "<cub/block/block_reduce.cuh>",
}


def _cell(header: str, body: str = "") -> str:
    return (f"#include <{header}>\n"
            f'extern "C" __global__ void k(float* x) {{ {body} }}\n')


@pytest.mark.parametrize("header", sorted(WORKS))
def test_header_compiles_from_the_wheels(header):
    module = cudamagic.build(_cell(header, WORKS[header]), arch="sm_90", use_cache=False,
                             options=["-std=c++17"])
    assert "k" in module.kernels


@pytest.mark.parametrize("header", sorted(FAILS))
def test_header_that_cannot_compile_names_what_to_use(header):
    """In a child: a compile that fails inside a header (cub/cub.cuh's own includes) breaks
    NVRTC's trace for the rest of its process (docs/cache.md, 'After a compile fails inside a header')."""
    message = _failed_in_child(f"_cell({header!r})", arch="sm_90", options=["-std=c++17"])
    assert "hint: " in message and FAILS[header] in message, message[-600:]


def test_a_header_known_to_fail_is_said_before_compiling(compiler, tmp_path, monkeypatch):
    """Issue 51, snag 6: <cub/cub.cuh> got its hint only after a failed compile of 7-9 s; now
    the cell is refused before NVRTC is called, at the include's line, with what works. A
    project's own cub/cub.cuh (found first, by -I) is compiled as any header."""
    from cudamagic.errors import CompileError
    from cudamagic.pipeline.steps import build_module
    from cudamagic.core.options import options_from_args
    from cudamagic.store import KernelCache

    monkeypatch.chdir(tmp_path)
    cell = '// a comment\n#include <cub/cub.cuh>\nextern "C" __global__ void k(float* x) {}\n'
    with pytest.raises(CompileError) as err:
        build_module(cell, options_from_args([], [], arch="sm_90"), compiler=compiler,
                     line_offset=1, cache=KernelCache(tmp_path / "cache"))
    assert compiler.calls == [], "NVRTC was called"
    assert "line 3: #include <cub/cub.cuh>: NVRTC cannot compile" in str(err.value)
    assert "hint: " in str(err.value) and "<cub/block/block_reduce.cuh>" in str(err.value)
    (tmp_path / "own" / "cub").mkdir(parents=True)
    (tmp_path / "own" / "cub" / "cub.cuh").write_text("#define OWN 1\n")
    mine = build_module(cell, options_from_args(["-Iown"], [], arch="sm_90"),
                        compiler=compiler, cache=KernelCache(tmp_path / "cache"))
    assert len(compiler.calls) == 1 and "k" in mine.kernels


@pytest.mark.parametrize("header", sorted(KNOWN_TO_FAIL))
def test_each_header_known_to_fail_fails_with_the_real_nvrtc(header):
    """The table is true: each entry, compiled by the real NVRTC (the refusal before the
    compile turned off), fails. In a child: a compile failing inside a header breaks NVRTC's
    trace for the rest of its process."""
    from .conftest import run_python

    out = run_python(
        "import cudamagic, cudamagic.core.toolkit as t\n"
        "from cudamagic.errors import CompileError\n"
        "t.known_to_fail = lambda *a: []\n"
        f"src = '#include <{header}>\\nextern \"C\" __global__ void k(float* x) {{}}\\n'\n"
        "try:\n"
        "    cudamagic.build(src, use_cache=False, arch='sm_90')\n"
        "    print('compiled')\n"
        "except CompileError as exc:\n"
        "    print('failed:', str(exc).splitlines()[0])\n", timeout=240)
    assert "failed: NVRTC could not compile" in out, out


def _failed_in_child(cell: str, **build) -> str:
    """The message of the CompileError that building ``cell`` (an expression over this
    module's names) raises in a fresh interpreter; "compiled" where it compiled."""
    from .conftest import run_python

    return run_python(
        "import cudamagic\n"
        "from cudamagic.errors import CompileError\n"
        "from tests.test_headers import *\n"
        "from tests.test_headers import _cell, _std_cell\n"
        "try:\n"
        f"    cudamagic.build({cell}, use_cache=False, **{build!r})\n"
        "    print('compiled')\n"
        "except CompileError as exc:\n"
        "    print(exc)\n", timeout=240)


def test_the_matrix_uses_the_wheels_of_this_venv():
    """The headers come from the installed packages (CuPy's CCCL, the nvidia-* wheels), not a
    system toolkit, unless CUDA_HOME points at one."""
    dirs = toolkit().include_dirs
    if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH"):
        assert all("site-packages" in d for d in dirs), dirs
    assert any(os.path.isfile(os.path.join(d, "crt", "mma.h")) for d in dirs)
    assert any(os.path.isfile(os.path.join(d, "curand_kernel.h")) for d in dirs)
    dists = " ".join(toolkit().distributions)
    assert "nvidia_cuda_crt" in dists and "nvidia_curand" in dists


@pytest.mark.parametrize("log, source, wanted", [
    ('cell.cu(1): catastrophic error: cannot open source file "cstdint"', "", "cuda/std/cstdint"),
    ('x(1): catastrophic error: cannot open source file "curand_kernel.h"', "",
     "pip install nvidia-curand"),
    ('x(1): catastrophic error: cannot open source file "crt/mma.h"', "",
     "pip install nvidia-cuda-crt"),
    # a header of the user's own: where it was looked for and what to do (it had no hint)
    ('x(1): catastrophic error: cannot open source file "my_header.h"', "",
     "add -I DIR to the %%cuda line"),
    ("x(3): error: identifier \"foo\" is undefined", "#include <cub/cub.cuh>\n", "block- and warp"),
    ("x(3): error: identifier \"foo\" is undefined", "#include <cub/block/block_scan.cuh>\n", None),
])
def test_hints_are_given_for_headers_and_only_for_them(log, source, wanted):
    hints = include_hints(log, source)
    if wanted is None:
        assert hints == []
    else:
        assert len(hints) == 1 and wanted in hints[0]


def test_an_angle_include_of_a_header_in_the_current_folder_says_why_it_is_not_found(
        tmp_path, monkeypatch):
    """Issue 51 snag 1: the hint said "in neither the current folder ...: put it there" of a
    header that is there; an angle include does not look there (quotes or -I . do)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nothere.h").write_text("#define X 1\n")
    log = 'cell.cu(1): catastrophic error: cannot open source file "nothere.h"'
    hints = include_hints(log, "#include <nothere.h>\n")
    assert len(hints) == 1 and "is in the current folder" in hints[0], hints
    assert '#include "nothere.h"' in hints[0] and "-I ." in hints[0], hints
    assert "neither" not in hints[0] and "put it there" not in hints[0], hints
    # where it is not there, the old words hold
    (tmp_path / "nothere.h").unlink()
    assert "in neither the current folder" in include_hints(log, "#include <nothere.h>\n")[0]


# --- The C++ standard headers cudamagic ships (issue 29 item 8) ---
# Issue 29, item 8: the C++ standard headers in device code (cudamagic/headers/std).
#
# NVRTC has no C++ standard library; cudamagic ships small headers of its own that map the ones
# device code includes onto libcu++ (``<cuda/std/...>``) and the device math functions, searched
# after every other folder. The matrix compiles each with a line of code that uses it (real
# NVRTC); the rest checks what the user relies on: a project's own header wins, the option turns
# them off and is in the key, a ``-dlto`` or ``assert``/``NDEBUG`` cell behaves, and what runs on
# a GPU gives the exact numbers (marked ``gpu``).
import pytest

import cudamagic
from cudamagic.errors import CompileError, OptionError
from cudamagic.core.options import parse_magic_line
from cudamagic.pipeline.steps import entry_key
from cudamagic.core.toolkit import std_header_dirs, std_headers_shipped

# header -> a line of device code that needs it (std:: names, as ported code writes them)
MATRIX = {
    "cstdint": "std::int32_t i = -3; std::uint64_t u = 1ull << 40; x[0] = float(i + (u >> 40));",
    "stdint.h": "int32_t i = INT32_MAX; uint8_t b = UINT8_MAX; x[0] = float(b) + float(i > 0);",
    "type_traits": "static_assert(std::is_integral_v<int> && !std::is_integral_v<float>); "
                   "static_assert(std::is_same<std::remove_cv_t<const int>, int>::value);",
    "limits": "x[0] = std::numeric_limits<float>::max(); "
              "x[1] = float(std::numeric_limits<int>::min());",
    "climits": "x[0] = float(INT_MAX) + float(CHAR_BIT);",
    "limits.h": "x[0] = float(LLONG_MAX) + float(UINT_MAX);",
    "cfloat": "x[0] = FLT_MAX; x[1] = float(DBL_EPSILON);",
    "float.h": "x[0] = FLT_EPSILON;",
    "cstddef": "std::size_t n = sizeof(float); std::ptrdiff_t d = &x[1] - &x[0]; "
               "std::nullptr_t z = nullptr; x[0] = float(n + d) + float(z == nullptr);",
    "stddef.h": "size_t n = offsetof(float2, y); x[0] = float(n);",
    "utility": "auto p = std::make_pair(1.0f, 2); float a = 1, b = 2; std::swap(a, b); "
               "x[0] = p.first + a + std::move(b);",
    "tuple": "auto t = std::make_tuple(1.0f, 2, 3.0); x[0] = std::get<0>(t) + "
             "float(std::tuple_size<decltype(t)>::value);",
    "array": "std::array<float, 3> a{1.0f, 2.0f, 3.0f}; x[0] = a[2] + float(a.size());",
    "cmath": "x[0] = std::sqrt(x[1]) + std::min(x[2], 1.0f) + std::max(2.0f, x[3]) "
             "+ std::abs(-1.0f) + std::exp(0.0f) + float(std::isnan(x[4])) + std::fma(x[0], 2.0f, 1.0f);",
    "math.h": "x[0] = sqrtf(x[1]) + powf(2.0f, 3.0f) + float(M_PI) + HUGE_VALF + INFINITY;",
    "algorithm": "float v[3] = {3.0f, 1.0f, 2.0f}; x[0] = *std::max_element(v, v + 3) + "
                 "std::clamp(x[1], 0.0f, 1.0f) + std::min(1, 2) + std::max({1, 5, 3});",
    "cassert": "assert(x != nullptr);",
    "assert.h": "assert(x != nullptr);",
    "thrust/complex.h": "thrust::complex<float> z(x[0], x[1]); z = thrust::exp(z) * z; "
                        "x[0] = thrust::abs(z) + z.real();",
}


def _std_cell(header: str, body: str) -> str:
    return f'#include <{header}>\nextern "C" __global__ void k(float* x) {{ {body} }}\n'


def test_the_matrix_covers_every_header_shipped():
    assert std_headers_shipped() <= set(MATRIX), std_headers_shipped() - set(MATRIX)
    for name in ("cstdint", "type_traits", "limits", "cmath", "math.h", "climits", "cfloat",
                 "cstddef", "utility", "tuple", "array", "cassert"):  # the list
        assert name in std_headers_shipped()


@pytest.mark.parametrize("header", sorted(MATRIX))
def test_each_standard_header_compiles_with_code_that_uses_it(header):
    module = cudamagic.build(_std_cell(header, MATRIX[header]), use_cache=False)
    assert "k" in module.kernels


def test_all_of_them_together_under_using_namespace_std():
    """Ported code includes several and writes ``using namespace std``: nothing is ambiguous
    (sqrt(float) is both NVRTC's and libcu++'s)."""
    includes = "".join(f"#include <{h}>\n" for h in sorted(MATRIX))
    body = "using namespace std; x[0] = sqrt(x[1]) + min(x[2], x[3]) + abs(x[4]); " \
           "int32_t i = numeric_limits<int32_t>::max(); x[5] = float(i);"
    source = includes + f'extern "C" __global__ void k(float* x) {{ {body} }}\n'
    for std in ("c++17", "c++20"):
        assert "k" in cudamagic.build(source, options=[f"-std={std}"], use_cache=False).kernels


@pytest.mark.parametrize("header, wanted", [
    ("cstdint", "--no-std-headers"), ("cmath", "<cuda/std/cmath>"),
    ("thrust/complex.h", "--no-std-headers"),
])
def test_turned_off_they_are_not_found_and_the_error_says_how_to_turn_them_on(header, wanted):
    """In a child: thrust/complex.h fails inside a header it includes, which breaks NVRTC's
    trace for the rest of its process (docs/cache.md, 'After a compile fails inside a header')."""
    said = _failed_in_child(f"_std_cell({header!r}, MATRIX[{header!r}])", std_headers=False)
    assert "hint: " in said and wanted in said, said[-600:]


def test_a_standard_header_cudamagic_does_not_ship_still_says_what_there_is():
    with pytest.raises(CompileError) as info:
        cudamagic.build(_std_cell("vector", ""), use_cache=False)
    assert "no C or C++ standard library" in str(info.value)


def test_the_option_is_in_the_key_and_on_the_magic_line():
    on, off = parse_magic_line(""), parse_magic_line("--no-std-headers")
    assert on.std_headers and not off.std_headers
    key_on, _, options_on, _ = entry_key("__global__ void k() {}", on)
    key_off, _, options_off, _ = entry_key("__global__ void k() {}", off)
    assert key_on != key_off
    before, after = std_header_dirs()
    assert options_on[-1] == f"-I{after[0]}"  # searched last
    assert options_on.index(f"-I{before[0]}") < min(
        i for i, o in enumerate(options_on) if "_cccl" in o)  # before CCCL's own thrust
    assert not any(o in options_off for o in (f"-I{before[0]}", f"-I{after[0]}"))
    with pytest.raises(OptionError):
        cudamagic.build("__global__ void k() {}", std_headers="no")  # type: ignore[arg-type]


def test_a_project_s_own_header_wins(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cstdint").write_text("#pragma once\n#define PROJECT_CSTDINT 7\n")
    source = '#include <cstdint>\nextern "C" __global__ void k(int* x) { x[0] = PROJECT_CSTDINT; }\n'
    module = cudamagic.build(source, options=[f"-I{tmp_path / 'inc'}"], use_cache=False)
    assert "k" in module.kernels
    with pytest.raises(CompileError, match="PROJECT_CSTDINT"):  # ours: no such macro
        cudamagic.build(source, use_cache=False)


def test_ndebug_turns_assert_off_and_an_assert_stays_in_the_code_without_it():
    """``assert`` is redefined on each inclusion of <cassert>: with NDEBUG defined the
    expression is not even compiled (an undeclared name in it is no error)."""
    body = "assert(undeclared_name == 1);"
    off = "#define NDEBUG\n" + _std_cell("cassert", body)
    assert "k" in cudamagic.build(off, use_cache=False).kernels
    with pytest.raises(CompileError, match="undeclared_name"):
        cudamagic.build(_std_cell("cassert", body), use_cache=False)
    assert "k" in cudamagic.build(_std_cell("cassert", "assert(x[0] > 0.0f);"),
                                  options=["-DNDEBUG"], use_cache=False).kernels


@pytest.mark.parametrize("header", ["cassert", "assert.h"])
@pytest.mark.parametrize("first, second", [("#define NDEBUG", "#undef NDEBUG"),
                                           ("#undef NDEBUG", "#define NDEBUG")])
def test_each_inclusion_of_cassert_follows_ndebug_as_it_is_then(header, first, second):
    """Included twice with NDEBUG changed between, assert() is what the second inclusion
    says: on (an undeclared name in it is an error) or off (not compiled)."""
    cell = (f"{first}\n#include <{header}>\n{second}\n#include <{header}>\n"
            'extern "C" __global__ void k(float* x) { assert(undeclared_name == 1); }\n')
    if second.startswith("#undef"):
        with pytest.raises(CompileError, match="undeclared_name"):
            cudamagic.build(cell, use_cache=False)
    else:
        assert "k" in cudamagic.build(cell, use_cache=False).kernels


def test_a_hit_checks_the_standard_headers_it_read(tmp_path, monkeypatch):
    """The standard headers a compile read are in its manifest like the toolkit's: one edited
    (a copy of the folder stands in for the installed one) makes the next build a miss."""
    import shutil

    import cudamagic.core.toolkit as tk

    copy = tmp_path / "headers"
    shutil.copytree(tk._HEADERS, copy)
    monkeypatch.setattr(tk, "_HEADERS", copy)
    source = _std_cell("limits", MATRIX["limits"])
    first = cudamagic.build(source, cache=tmp_path / "cache")
    assert cudamagic.build(source, cache=tmp_path / "cache").hit
    limits = copy / "std" / "limits"
    limits.write_text(limits.read_text() + "// edited\n")
    again = cudamagic.build(source, cache=tmp_path / "cache")
    assert not first.hit and not again.hit


NUMBERS = r"""
#include <cstdint>
#include <limits>
#include <type_traits>
#include <cmath>
#include <thrust/complex.h>
template <typename T> __device__ T twice(T v) {
    static_assert(std::is_floating_point_v<T>, "floats only");
    return v + v;
}
extern "C" __global__ void numbers(float* out, std::int64_t* ints) {
    out[0] = std::numeric_limits<float>::max();
    out[1] = std::numeric_limits<float>::lowest();
    out[2] = std::sqrt(16.0f);
    out[3] = std::min(3.0f, -2.5f);
    out[4] = twice(1.25f);
    thrust::complex<float> z(3.0f, 4.0f);
    out[5] = thrust::abs(z);
    out[6] = (z * thrust::complex<float>(0.0f, 1.0f)).real();
    out[7] = float(std::is_integral_v<std::int32_t>);
    ints[0] = std::numeric_limits<std::int32_t>::min();
    ints[1] = std::numeric_limits<std::uint16_t>::max();
    ints[2] = INT64_MAX;
}
"""


@pytest.mark.gpu
def test_a_kernel_using_the_standard_headers_gives_exact_numbers():
    import cupy as cp
    import numpy as np

    k = cudamagic.build(NUMBERS, use_cache=False)["numbers"]
    out, ints = cp.zeros(8, cp.float32), cp.zeros(3, cp.int64)
    k((1,), (1,), (out, ints))
    f32 = np.finfo(np.float32)
    assert out.get().tolist() == [float(f32.max), float(f32.min), 4.0, -2.5, 2.5, 5.0, -4.0, 1.0]
    assert ints.get().tolist() == [-2**31, 2**16 - 1, 2**63 - 1]
