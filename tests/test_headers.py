"""The header matrix: what kernel authors include, compiled from this venv's wheels alone
(the README's install), and for what cannot compile, the message that says what to use."""

from __future__ import annotations

import os

import pytest

import cudamagic
from cudamagic.errors import CompileError
from cudamagic.toolkit import include_hints, toolkit

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
# compile: tests/test_parity_headers.py; turned off, they fail with a hint there too)
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
    with pytest.raises(CompileError) as info:
        cudamagic.build(_cell(header), arch="sm_90", use_cache=False, options=["-std=c++17"])
    message = str(info.value)
    assert "hint: " in message and FAILS[header] in message, message[-600:]


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
