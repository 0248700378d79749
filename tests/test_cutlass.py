"""CUTLASS and CuTe in a cell (issue 50): found, given the options they need, with no option of
the user's; real NVRTC, the nvidia-cutlass wheel (the test extra)."""

import numpy as np
import pytest

import cudamagic
from cudamagic.cxx.declared import included_headers
from cudamagic.core.libraries import cutlass

pytestmark = pytest.mark.skipif(cutlass() is None, reason="the nvidia-cutlass wheel is absent")

CUTE = r'''
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
using namespace cute;
template <class T, class N>
__global__ void scale(T* x, float a) {
  auto t = make_tensor(make_gmem_ptr(x), make_layout(make_shape(N{})));
  if (threadIdx.x < size(t)) t(threadIdx.x) = T(float(t(threadIdx.x)) * a);
}
'''
NAME = "scale<cutlass::half_t, cute::Int<128>>"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return cudamagic.KernelCache(str(tmp_path_factory.mktemp("cutlass-cache")))


@pytest.fixture(scope="module")
def built(cache):
    return cudamagic.build(CUTE, [NAME], cache=cache)


def test_only_include_directives_count():
    src = '// #include <cute/x.hpp>\n/* #include <cutlass/y.h> */\nconst char* s = "#include <cute/z>";\n' \
          '#  include \\\n <cute/tensor.hpp>\n#include "cutlass/gemm/gemm.h"\n'
    assert included_headers(src) == ("cute/tensor.hpp", "cutlass/gemm/gemm.h")


def test_a_cute_cell_compiles_with_no_option_and_the_report_says_what_was_added(built, cache):
    added = dict(built.report.facts)["options added for CUTLASS:"]
    assert "-default-device" in added and "cutlass_library/source/include" in added
    # the name expression of CuTe's types restores from the cache, and its table checks dtypes
    again = cudamagic.build(CUTE, [NAME], cache=cache)
    assert again.report.hit
    assert again[NAME].params[0].dtype == np.dtype(np.float16)


def test_a_user_std_is_kept(cache):
    m = cudamagic.build(CUTE, [NAME], cache=cache, options=["-std=c++20"])
    assert "options added for CUTLASS:" in dict(m.report.facts)
    key, arch, options, _ = cudamagic.pipeline.steps.entry_key(
        CUTE, cudamagic.core.options.options_from_args(["-std=c++20"], [NAME]))
    assert "-std=c++20" in options and "-std=c++17" not in options
