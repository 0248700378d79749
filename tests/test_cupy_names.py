"""CuPy's names for a kernel's facts: code ported from CuPy reads ``k.attributes["num_regs"]``,
``k.num_regs``, ``k.max_threads_per_block``, ``k.name``. Without a GPU the CUBIN's values
answer under both names; what only a device knows raises NoDeviceError saying so; on a GPU the
keys and values are CuPy's own RawKernel's for the same source (a gpu test)."""

from __future__ import annotations

import pickle

import pytest

import cudamagic
from cudamagic.errors import NoDeviceError
from cudamagic.launch.attributes import CUPY_NAMES, DEVICE_ONLY
from cudamagic.toolchain import driver

SOURCE = r"""
extern "C" __global__ void uses(float* x, int i) {
    __shared__ float tile[96];
    tile[threadIdx.x % 96] = x[i];
    __syncthreads();
    x[threadIdx.x] = tile[(threadIdx.x + 1) % 96];
}
"""

NO_GPU = pytest.mark.skipif(driver.available(), reason="this machine has a GPU: the driver answers")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    mod = cudamagic.build(SOURCE, arch="sm_90", cache=tmp_path_factory.mktemp("cache"))
    return mod["uses"]


@NO_GPU
@pytest.mark.parametrize("cupy_name", sorted(n for n, own in CUPY_NAMES.items()
                                             if own not in DEVICE_ONLY))
def test_a_cupy_name_is_the_cubins_value_under_cudamagics_name(kernel, cupy_name):
    own = CUPY_NAMES[cupy_name]
    attributes = kernel.attributes
    assert attributes[cupy_name] == attributes[own] == getattr(kernel, cupy_name)


@NO_GPU
def test_the_values_are_the_cubins(kernel):
    r = kernel.resources
    assert (kernel.num_regs, kernel.shared_size_bytes, kernel.local_size_bytes,
            kernel.const_size_bytes) == (r.registers, r.static_shared_bytes, r.local_bytes,
                                         r.const_bytes)
    assert kernel.shared_size_bytes == 96 * 4
    assert kernel.binary_version == 90  # sm_90, as the driver says it: 10 * major + minor
    assert kernel.name == "uses"
    # the older call still answers, and the record leaves the process as a plain dict
    assert kernel.attributes() == kernel.attributes
    assert type(pickle.loads(pickle.dumps(kernel.attributes))) is dict


@NO_GPU
@pytest.mark.parametrize("cupy_name", sorted(n for n, own in CUPY_NAMES.items()
                                             if own in DEVICE_ONLY))
def test_what_only_a_device_knows_says_so(kernel, cupy_name):
    assert cupy_name not in kernel.attributes
    with pytest.raises(NoDeviceError, match=f"{cupy_name} depends on the device"):
        getattr(kernel, cupy_name)


def test_a_name_expression_is_the_kernels_name(tmp_path):
    mod = cudamagic.build("template <typename T> __global__ void k(T* x) { x[0] = T(1); }",
                          ["k<float>"], cache=tmp_path)
    assert mod["k<float>"].name == "k<float>"


@pytest.mark.gpu
def test_the_keys_and_values_are_cupys_rawkernels(kernel):
    """Not run without a GPU: CuPy's RawKernel of the same source, the same names and values."""
    import cupy as cp

    theirs = cp.RawKernel(SOURCE, "uses", options=("-arch=sm_90",))
    ours = kernel.attributes
    assert set(theirs.attributes) <= set(ours), set(theirs.attributes) - set(ours)
    for name, value in theirs.attributes.items():
        if name != "ptx_version":  # CuPy's NVRTC options differ from the build's
            assert ours[name] == value, name
    assert kernel.max_threads_per_block == theirs.max_threads_per_block
