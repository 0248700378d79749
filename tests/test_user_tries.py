"""What a new user porting CuPy RawModule code met: each test is one thing found by trying it."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.toolchain.variables import find
from cudamagic.errors import NameResolutionError

from .conftest import FIXTURES

DYNAMIC = r"""
__global__ void child(int* x) { x[threadIdx.x] += 1; }
extern "C" __global__ void parent(int* x) { child<<<1, 32>>>(x); }
"""


def _unnamed(report) -> list[str]:
    """Timed laps the report's phases do not show by name (they would fall into 'other')."""
    named = {p.seconds for p in report.phases[:-1] if p.label != "other"}
    return [k for k, s in report.timings.items() if k != "total" and s not in named]


@pytest.mark.parametrize("options", [[], ["-rdc=true"], ["-dc"], ["-dlto"]])
def test_every_lap_of_a_build_is_a_named_phase(tmp_path, options):
    module = cudamagic.build(DYNAMIC if options else DYNAMIC.replace("child<<<1, 32>>>(x);", ""),
                             options=options, arch="sm_90", cache=tmp_path)
    assert _unnamed(module.report) == []
    assert ("link (nvJitLink)" in module.report.text()) == bool(options)


@pytest.mark.parametrize("name", ["nvcc_kernels.ptx", "nvcc_kernels.fatbin"])
def test_what_nvjitlink_does_for_a_load_is_a_named_phase_and_a_hit_is_a_lookup(tmp_path, name):
    # the fatbin holds no sm_100 CUBIN: its PTX is compiled, as a .ptx file is
    first = cudamagic.load_cubin(FIXTURES / name, arch="sm_100", cache=tmp_path)
    assert _unnamed(first.report) == []
    assert [p.label for p in first.report.phases].count("link (nvJitLink)") == 1
    again = cudamagic.load_cubin(FIXTURES / name, arch="sm_100", cache=tmp_path)
    labels = [p.label for p in again.report.phases]
    assert "link (nvJitLink)" not in labels and "cache lookup" in labels


def test_a_cubin_taken_as_it_is_has_no_link_phase(tmp_path):
    module = cudamagic.load_cubin(FIXTURES / "nvcc_kernels.fatbin", arch="sm_90", cache=tmp_path)
    assert "link (nvJitLink)" not in [p.label for p in module.report.phases]


VARIABLES = r"""
template <typename T> __device__ T table[4];
__constant__ float coeffs[8];
extern "C" __global__ void rd(float* o) { o[0] = table<float>[0] + coeffs[1]; }
template <typename T> __global__ void k(T* o) { o[0] = table<T>[1]; }
"""


@pytest.mark.parametrize("names", [["table<float>"], ["coeffs"], ["k<float>", "table<float>"],
                                   ["table<double>"], ["&table<double>"]])
def test_a_variable_given_as_a_name_expression_is_taken_as_nvrtc_takes_it(tmp_path, names):
    """NVRTC's nvrtcAddNameExpression takes a variable (and instantiates a variable template's
    instance no code uses): the module lists it, typed, and reaches it by the expression."""
    module = cudamagic.build(VARIABLES, names, arch="sm_90", cache=tmp_path)
    variables = [n for n in names if not n.startswith("k<")]
    assert set(module.variable_expressions) == set(variables)
    assert all(v not in module.kernels for v in variables)
    for v in variables:
        found = find(module.globals, v, module.variable_expressions)
        assert found.dtype == ("float64" if "double" in v else "float32")
        assert found.shape == ((8,) if v == "coeffs" else (4,))


def test_without_the_name_expression_the_variable_is_listed(tmp_path):
    module = cudamagic.build(VARIABLES, ["k<float>"], arch="sm_90", cache=tmp_path)
    assert {"table<float>", "coeffs"} <= {v.cxx_name for v in module.globals}


# where kernel authors put launch attributes: between void and the name (CUDA's guide), or
# before void; each with one or two arguments
ATTRIBUTES = ["__launch_bounds__(256)", "__launch_bounds__(256, 2)", "__launch_bounds__( 128 )",
              "__cluster_dims__(2, 1, 1)", "__maxnreg__(32)", "__noinline__"]
PLACES = ["__global__ void {a} k", "__global__ {a} void k", "{a} __global__ void k"]


@pytest.mark.parametrize("attribute", ATTRIBUTES)
@pytest.mark.parametrize("place", PLACES)
def test_a_launch_attribute_is_not_read_as_the_kernels_name(tmp_path, attribute, place):
    from cudamagic.toolchain.nvrtc import plain_kernels, template_kernels

    declaration = place.format(a=attribute) + "(float* x) { x[threadIdx.x] = 1.0f; }"
    template = "template <typename T>\n" + declaration.replace("float", "T")
    assert template_kernels(template) == ["k"] and plain_kernels(template) == []
    assert plain_kernels(declaration) == ["k"] and template_kernels(declaration) == []
    if attribute == "__noinline__":
        return  # a function attribute NVRTC refuses on a kernel; the reading is what counts
    without = cudamagic.build(template, arch="sm_90", cache=tmp_path)
    assert any("template k is not compiled" in w for w in without.report.warnings)
    assert not any("__" in w.split("template ")[-1][:20] for w in without.report.warnings)
    built = cudamagic.build(template, ["k<float>"], arch="sm_90", cache=tmp_path)
    assert not any("is not compiled" in w for w in built.report.warnings)


def test_rawmodule_code_finds_kernels_with_get_function(tmp_path):
    # CuPy: mod = cp.RawModule(code=..., name_expressions=[...]); mod.get_function("saxpy<float>")
    source = (r'template <typename T> __global__ void saxpy(T a, T* y) { y[0] *= a; }'
              '\nextern "C" __global__ void fill(float* x) { x[0] = 1.0f; }')
    module = cudamagic.build(source, ["saxpy<float>"], arch="sm_90", cache=tmp_path)
    assert module.get_function("saxpy<float>") is module["saxpy<float>"]
    assert module.get_function("fill").symbol == "fill"
    with pytest.raises(NameResolutionError, match="saxpy<float>"):
        module.get_function("saxpy<double>")


@pytest.mark.parametrize("arch, sm, linked", [("sm_80", 80, False), ("sm_90", 90, False),
                                              ("sm_100", 100, True)])
def test_cuda_load_picks_a_fatbins_target_with_arch(tmp_path, monkeypatch, arch, sm, linked):
    from .test_magic import _shell

    ip = _shell(tmp_path, monkeypatch)
    ip.run_line_magic("cuda_load", f'"{FIXTURES / "nvcc_kernels.fatbin"}" --arch {arch} '
                                   "--module fb -q")
    module = ip.user_ns["fb"]
    assert module.image.sm == sm and "fill" in module.kernels
    assert ("link (nvJitLink)" in module.report.text()) == linked
    assert "PTX or fatbin" in ip.find_line_magic("cuda_load").__doc__
