"""A module's __constant__/__device__ variables listed from the CUBIN and typed from the cell,
without a GPU (tests/test_gpu_parity.py writes and reads them on one)."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.errors import NameResolutionError, NoDeviceError
from cudamagic.toolchain.variables import declared_types

from .test_image import GLOBALS_SOURCE


def test_module_globals_are_listed_with_their_types():
    module = cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False)
    got = {v.cxx_name: (v.name, v.size, v.space, v.dtype, v.shape) for v in module.globals}
    assert got == {
        "coeffs": ("coeffs", 64, "constant", "float32", (16,)),
        "limits": ("limits", 8, "constant", "int32", (2,)),
        "counter": ("counter", 4, "global", "int32", ()),
        "table": ("table", 120, "global", "float64", (3, 5)),
        "initialised": ("initialised", 4, "global", "int32", ()),
        "file_local": ("file_local", 4, "global", "int32", ()),
        "ns::scale": ("_ZN2ns5scaleE", 4, "global", "float32", ()),
        # a variable template's type is not read from the declaration: its bytes
        "zero<float>": ("_Z4zeroIfE", 4, "global", None, (4,)),
    }


@pytest.mark.parametrize("decl, wanted", [
    ("__constant__ float c[16];", ("float32", (16,))),
    ("__device__ unsigned long long n;", ("uint64", ())),
    ("__device__ __managed__ int m = 3;", ("int32", ())),
    ("static __device__ double t[3][5];", ("float64", (3, 5))),
    ("__device__ const short s[2] = {1, 2};", ("int16", (2,))),
    ("__device__ unsigned char b[7];", ("uint8", (7,))),
    ("__device__ __half h;", ("float16", ())),
    ("__device__ int64_t i64;", ("int64", ())),
])
def test_declared_types(decl, wanted):
    (name, got), = declared_types(decl).items()
    assert got == wanted


def test_a_size_that_disagrees_leaves_the_variable_untyped():
    """A declaration the reading gets wrong (the first of two behind #ifdef) must not give a
    view of the wrong size: the CUBIN's size wins, as bytes."""
    source = ("#ifdef WIDE\n__device__ double v[4];\n#else\n__device__ float v[4];\n#endif\n"
              'extern "C" __global__ void k(float* x) { x[0] = v[1]; }\n')
    (narrow,) = cudamagic.build(source, arch="sm_90", use_cache=False).globals
    assert (narrow.dtype, narrow.shape, narrow.size) == (None, (16,), 16)
    (wide,) = cudamagic.build(source, arch="sm_90", use_cache=False,
                              options=["-DWIDE"]).globals
    assert (wide.dtype, wide.shape, wide.size) == ("float64", (4,), 32)


def test_get_global_names_what_there_is_and_needs_a_gpu():
    module = cudamagic.build(GLOBALS_SOURCE, arch="sm_90", use_cache=False)
    with pytest.raises(NameResolutionError, match="coeffs, limits"):
        module.get_global("coefs")
    with pytest.raises(NoDeviceError):
        module.get_global("coeffs")
    with pytest.raises(NoDeviceError):
        module.get_global("ns::scale")  # found by its C++ name; the device is what is missing
