"""Issue 29, items 1-4: CuPy's RawKernel behaviours for code from other projects.

Everything up to the launch runs here (argument checks, the bytes packed against the kernel's
parameter layout, NoDeviceError after them); the launches with exact results are marked ``gpu``
(they run on the device machine).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import cudamagic
from cudamagic.errors import ArgumentTypeError, ArgumentValueError, NoDeviceError
from cudamagic.launch.encode import pack_args
from cudamagic.toolchain import driver
from cudamagic.toolchain.ptx import PtxParam, PtxType, entry_params

from .conftest import FIXTURES
from .test_kernel import DeviceArray

no_gpu = pytest.mark.skipif(driver.available(), reason="this machine has a GPU")

# ---- item 1: a kernel loaded from PTX takes Python numbers where PTX declares numbers ----

PTX_SOURCE = r"""
extern "C" __global__ void axpb(const float* x1, const float* x2, float* y, unsigned int n,
                                float a, double b, int shift, short s, unsigned char c) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x1[i] * a + x2[i] + float(b) + float(shift) + float(s) + float(c);
}
"""


def nvrtc_ptx(source: str, arch: str = "compute_90") -> bytes:
    """NVRTC's PTX for ``source`` (what ``nvcc -ptx`` writes for it, near enough)."""
    from cuda.bindings import nvrtc

    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    try:
        (status,) = nvrtc.nvrtcCompileProgram(prog, 1, [f"-arch={arch}".encode()])
        assert int(status) == 0
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = bytes(size)
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.rstrip(b"\0")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.fixture(scope="module")
def ptx_module(tmp_path_factory):
    return cudamagic.load_cubin(nvrtc_ptx(PTX_SOURCE), cache=tmp_path_factory.mktemp("c"))


def test_ptx_declares_every_parameter_s_type():
    declared = entry_params(nvrtc_ptx(PTX_SOURCE))["axpb"]
    assert declared == tuple(PtxParam(t) for t in (
        PtxType.U64, PtxType.U64, PtxType.U64, PtxType.U32, PtxType.F32, PtxType.F64,
        PtxType.U32, PtxType.U16, PtxType.U8))
    struct_ptx = entry_params(nvrtc_ptx(
        'struct S { int a; double b; };\nextern "C" __global__ void k(S s, float2 f) {}'))
    assert struct_ptx["k"] == (PtxParam(PtxType.B8, 16), PtxParam(PtxType.B8, 8))


def test_a_ptx_kernel_packs_python_numbers_into_its_declared_slots(ptx_module):
    k = ptx_module["axpb"]
    x1, x2, y = DeviceArray("f4", ptr=0x1000), DeviceArray("f4", ptr=0x2000), \
        DeviceArray("f4", ptr=0x3000)
    args = (x1, x2, y, 100, 2.0, 0.5, -3, -2, 255)
    packed = pack_args("axpb", k.params, args)
    # the bytes each slot of the kernel's parameter layout (offset, size: the CUBIN's) needs
    expected = [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x2000), struct.pack("<Q", 0x3000),
                struct.pack("<I", 100), struct.pack("<f", 2.0), struct.pack("<d", 0.5),
                struct.pack("<i", -3), struct.pack("<h", -2), struct.pack("<B", 255)]
    assert packed == expected
    assert [s.size for s in k.params] == [len(b) for b in expected]


@pytest.mark.parametrize("index, value, error, match", [
    (3, 2**32, ArgumentValueError, "does not fit"),        # .u32: int and unsigned, not more
    (3, -2**31 - 1, ArgumentValueError, "does not fit"),
    (3, 1.5, ArgumentTypeError, "integer parameter"),      # a float for an integer slot
    (8, 256, ArgumentValueError, "does not fit"),          # .u8: char or unsigned char
    (4, 1e39, ArgumentValueError, "does not fit"),         # .f32 overflow
    (4, "2", ArgumentTypeError, "floating-point"),
])
def test_a_ptx_kernel_refuses_what_its_slots_cannot_hold(ptx_module, index, value, error,
                                                         match):
    k = ptx_module["axpb"]
    args = [DeviceArray("f4"), DeviceArray("f4"), DeviceArray("f4"), 100, 2.0, 0.5, -3, -2, 255]
    args[index] = value
    with pytest.raises(error, match=match):
        pack_args("axpb", k.params, args)


def test_both_readings_of_an_unsigned_or_signed_32_bit_slot_pack_alike(ptx_module):
    specs = ptx_module["axpb"].params
    assert pack_args("k", specs[3:4], [2**32 - 1]) == pack_args("k", specs[3:4], [-1])
    assert pack_args("k", specs[3:4], [np.uint32(7)]) == [struct.pack("<I", 7)]


@no_gpu
def test_a_ptx_kernel_call_with_python_numbers_reaches_the_device_check(ptx_module):
    with pytest.raises(NoDeviceError):
        ptx_module["axpb"]((1,), (32,), (DeviceArray("f4"), DeviceArray("f4"),
                                          DeviceArray("f4"), 100, 2.0, 0.5, -3, -2, 255))


def test_a_fatbin_s_ptx_entry_declares_its_types_and_its_nvcc_cubin_keeps_the_refusal(tmp_path):
    fatbin = FIXTURES / "nvcc_kernels.fatbin"
    # sm_100: no CUBIN for it, so its compute_90 PTX is compiled, and declares `fill`'s int
    from_ptx = cudamagic.load_cubin(fatbin, arch="sm_100", cache=tmp_path)["fill"]
    assert pack_args("fill", from_ptx.params, [None, 7]) == [bytes(8), struct.pack("<I", 7)]
    # sm_90: nvcc's CUBIN, no PTX: the 4-byte slot could be an int or a float
    from_cubin = cudamagic.load_cubin(fatbin, arch="sm_90", cache=tmp_path)["fill"]
    with pytest.raises(ArgumentTypeError, match="a CUBIN without its source"):
        pack_args("fill", from_cubin.params, [None, 7])
    assert pack_args("fill", from_cubin.params, [None, np.int32(7)])[1] == struct.pack("<i", 7)


def test_the_ptx_fixture_s_kernels_take_python_numbers(tmp_path):
    module = cudamagic.load_cubin(FIXTURES / "nvcc_kernels.ptx", arch="sm_90", cache=tmp_path)
    axpy = module["axpy<float>"]  # its signature from demangling: the C++ types win
    assert pack_args("axpy", axpy.params, [2.0, None, None, 5])[0] == struct.pack("<f", 2.0)
    assert pack_args("fill", module["fill"].params, [None, 3]) == [bytes(8),
                                                                   struct.pack("<I", 3)]


@pytest.mark.gpu
def test_a_ptx_kernel_launches_with_python_numbers():
    import cupy as cp

    k = cudamagic.load_cubin(nvrtc_ptx(PTX_SOURCE))["axpb"]  # compute_90 PTX: sm_90 and newer
    x1 = cp.arange(100, dtype=cp.float32)
    x2 = cp.full(100, 10.0, cp.float32)
    y = cp.zeros(100, cp.float32)
    k((1,), (128,), (x1, x2, y, 100, 2.0, 0.5, -3, -2, 255))
    expected = np.arange(100, dtype=np.float32) * 2 + 10 + 0.5 - 3 - 2 + 255
    assert y.get().tolist() == expected.tolist()


# ---- item 2: a Python complex for a by-value double2 / cuDoubleComplex / complex<double> ----

COMPLEX_SOURCE = r"""
#include <cuComplex.h>
#include <cuda/std/complex>
#include <thrust/complex.h>
extern "C" __global__ void scale(cuDoubleComplex s, double2 d, cuda::std::complex<double> c,
                                 thrust::complex<double> t, cuDoubleComplex* out) {
    out[0] = s; out[1] = d; out[2] = make_cuDoubleComplex(c.real(), c.imag());
    out[3] = make_cuDoubleComplex(t.real(), t.imag());
}
extern "C" __global__ void scalef(cuFloatComplex s, float2 d, cuFloatComplex* out) {
    out[0] = s; out[1] = d;
}
"""


@pytest.fixture(scope="module")
def complex_module():
    return cudamagic.build(COMPLEX_SOURCE, use_cache=False)


def test_a_python_complex_is_each_kind_of_complex_double(complex_module):
    k = complex_module["scale"]
    z = 2 + 3j
    packed = pack_args("scale", k.params, [z, z, z, z, None])
    assert packed[:4] == [struct.pack("<dd", 2.0, 3.0)] * 4
    assert [s.size for s in k.params[:4]] == [16] * 4
    # the exact bytes: an inexact decimal keeps its double
    assert pack_args("scale", k.params, [0.1 - 1e300j, 0.1j, 0, 0, None])[0] == \
        struct.pack("<dd", 0.1, -1e300)


def test_a_python_complex_for_a_float_pair_says_what_to_pass(complex_module):
    k = complex_module["scalef"]
    for slot in (0, 1):
        args = [np.complex64(1 + 2j), np.complex64(1 + 2j), None]
        args[slot] = 1 + 2j
        with pytest.raises(ArgumentTypeError, match=r"np\.complex64\(z\)"):
            pack_args("scalef", k.params, args)
    assert pack_args("scalef", k.params, [np.complex64(1 + 2j)] * 2 + [None])[0] == \
        struct.pack("<ff", 1.0, 2.0)


@no_gpu
def test_a_complex_call_reaches_the_device_check(complex_module):
    with pytest.raises(NoDeviceError):
        complex_module["scale"]((1,), (1,), (2 + 3j, 1j, 1 + 0j, -1j, DeviceArray("c16")))


@pytest.mark.gpu
def test_a_python_complex_arrives_as_each_complex_double():
    import cupy as cp

    k = cudamagic.build(COMPLEX_SOURCE, use_cache=False)["scale"]
    out = cp.zeros(4, cp.complex128)
    k((1,), (1,), (2 + 3j, -1.5j, 0.25 + 0j, 1e300 - 1e-300j, out))
    assert out.get().tolist() == [2 + 3j, -1.5j, 0.25 + 0j, 1e300 - 1e-300j]


# ---- item 3: get_global is a cupy.cuda.MemoryPointer, as CuPy's RawModule gives it ----

GLOBALS_SOURCE = r"""
__device__ float x[100];
__constant__ int coeffs[4] = {1, 2, 3, 4};
extern "C" __global__ void bump(int n) { int i = threadIdx.x; if (i < n) x[i] += coeffs[i % 4]; }
"""


class _Owner:
    """Stands in for the module (what must stay alive while the memory is used)."""


def _view(dtype=None):
    from cudamagic.toolchain.variables import Variable, device_global

    var = Variable("x", "x", 400, "global", "float32", (100,))
    owner = _Owner()
    return device_global(var, 0x7F0000004000, 0, dtype, owner), owner


def test_the_global_view_is_a_memory_pointer_and_keeps_the_array_interface():
    from cupy.cuda import memory

    view, owner = _view()
    assert isinstance(view, memory.MemoryPointer)
    assert (view.ptr, view.device_id, view.mem.size) == (0x7F0000004000, 0, 400)
    import gc
    import weakref

    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is not None  # the module stays alive while the pointer (or CuPy's arrays
    # over it) does
    assert view.__cuda_array_interface__ == {"shape": (100,), "typestr": "<f4",
                                             "data": (0x7F0000004000, False), "strides": None,
                                             "version": 3}
    assert "x global float32[100] at 0x7f0000004000 on device 0" in repr(view)
    assert _view(np.uint8)[0].shape == (400,)


def test_cupy_ndarray_takes_the_view_as_its_memptr():
    """``cupy.ndarray((100,), cupy.float32, mod.get_global("x"))``: CuPy's constructor takes
    only a MemoryPointer there (a plain view was "Cannot convert DeviceGlobal to
    cupy.cuda.memory.MemoryPointer"); making the array touches no device."""
    import cupy

    from cudamagic.toolchain.variables import DeviceGlobal

    view, _ = _view()
    array = cupy.ndarray((100,), cupy.float32, view)
    assert (array.data.ptr, array.shape, array.dtype) == (0x7F0000004000, (100,), np.float32)
    assert array.data is view
    plain = DeviceGlobal(view.variable, 0x7F0000004000, 0, None, None)
    with pytest.raises(TypeError, match="MemoryPointer"):
        cupy.ndarray((100,), cupy.float32, plain)


def test_the_view_passes_as_a_pointer_argument():
    module = cudamagic.build('extern "C" __global__ void k(float* p) {}', use_cache=False)
    view, _ = _view()
    assert pack_args("k", module["k"].params, [view]) == [struct.pack("<Q", 0x7F0000004000)]


@pytest.mark.gpu
def test_ported_get_global_code_runs_unchanged():
    import cupy

    module = cudamagic.build(GLOBALS_SOURCE, use_cache=False)
    x = cupy.ndarray((100,), cupy.float32, module.get_global("x"))
    x[...] = cupy.arange(100, dtype=cupy.float32)
    module["bump"]((1,), (128,), (100,))
    expected = np.arange(100, dtype=np.float32) + np.tile([1, 2, 3, 4], 25)
    assert x.get().tolist() == expected.tolist()
    assert cupy.asarray(module.get_global("coeffs")).get().tolist() == [1, 2, 3, 4]


# ---- item 4: CuPy's TextureObject / SurfaceObject and ndarray.mdspan() as arguments ----

OBJECTS_SOURCE = r"""
#include <cuda/std/mdspan>
using span2 = cuda::std::mdspan<float, cuda::std::dextents<long long, 2>,
                                cuda::std::layout_stride>;
using span2i = cuda::std::mdspan<float, cuda::std::dextents<int, 2>, cuda::std::layout_stride>;
extern "C" __global__ void fetch(cudaTextureObject_t t, cudaSurfaceObject_t s, float* out, int n) {
    int i = threadIdx.x;
    if (i < n) { out[i] = tex1Dfetch<float>(t, i); surf1Dwrite(out[i] * 2.0f, s, i * 4); }
}
extern "C" __global__ void fill2(span2 a, span2i b) {
    int i = threadIdx.x, j = threadIdx.y;
    if (i < a.extent(0) && j < a.extent(1)) a(i, j) = float(10 * i + j);
    if (i < b.extent(0) && j < b.extent(1)) b(i, j) = -float(10 * i + j);
}
"""


@pytest.fixture(scope="module")
def objects_module():
    return cudamagic.build(OBJECTS_SOURCE, use_cache=False)


def test_texture_and_surface_objects_pass_as_their_handles(objects_module):
    from cupy.cuda.texture import SurfaceObject, TextureObject

    k = objects_module["fetch"]
    # made without a GPU (no resource behind them): their handle is 0, as CuPy's RawKernel
    # would pass it; on the device machine the gpu test below reads through real ones
    tex, surf = TextureObject.__new__(TextureObject), SurfaceObject.__new__(SurfaceObject)
    assert pack_args("fetch", k.params, [tex, surf, None, 4]) == \
        [struct.pack("<Q", tex.ptr), struct.pack("<Q", surf.ptr), bytes(8), struct.pack("<i", 4)]
    with pytest.raises(ArgumentTypeError, match="unsigned long long, 8 bytes"):
        pack_args("fetch", k.params, [tex, surf, None, tex])  # a texture for the int


def _fake_array(shape, dtype, ptr=0x7F0000008000):
    """A CuPy array over device memory it does not own (made without a GPU)."""
    import cupy
    from cupy.cuda import memory

    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = memory.MemoryPointer(memory.UnownedMemory(ptr, size, None, 0), 0)
    return cupy.ndarray(shape, dtype, mem)


def test_an_mdspan_passes_as_the_bytes_of_its_cuda_std_mdspan(objects_module):
    import cupy

    k = objects_module["fill2"]
    assert [s.size for s in k.params] == [40, 24]  # pointer, 2 extents, 2 strides
    a = _fake_array((3, 4), cupy.float32)
    b = _fake_array((3, 4), cupy.float32)[:, ::2]  # strided: extents 3, 2; strides 4, 2
    packed = pack_args("fill2", k.params, [a.mdspan(index_type=cupy.int64),
                                           b.mdspan(index_type=cupy.int32)])
    assert packed == [struct.pack("<Qqqqq", 0x7F0000008000, 3, 4, 4, 1),
                      struct.pack("<Qiiii", 0x7F0000008000, 3, 2, 4, 2)]


def test_an_mdspan_for_a_pointer_says_what_to_pass():
    import cupy

    module = cudamagic.build('extern "C" __global__ void k(float* p) {}', use_cache=False)
    with pytest.raises(ArgumentTypeError, match="cuda::std::mdspan parameter"):
        pack_args("k", module["k"].params,
                  [_fake_array((3, 4), cupy.float32).mdspan(index_type=cupy.int64)])


@pytest.mark.gpu
def test_textures_surfaces_and_mdspans_launch_with_exact_results():
    import cupy
    from cupy.cuda import texture

    module = cudamagic.build(OBJECTS_SOURCE, use_cache=False)
    src = cupy.arange(8, dtype=cupy.float32) + 0.5
    rt = cupy.cuda.runtime
    desc = texture.ChannelFormatDescriptor(32, 0, 0, 0, rt.cudaChannelFormatKindFloat)
    res = texture.ResourceDescriptor(rt.cudaResourceTypeLinear, arr=src, chDesc=desc,
                                     sizeInBytes=src.nbytes)
    tex = texture.TextureObject(res, texture.TextureDescriptor())
    arr = texture.CUDAarray(desc, 8, 0, 0, rt.cudaArraySurfaceLoadStore)
    surf = texture.SurfaceObject(texture.ResourceDescriptor(rt.cudaResourceTypeArray,
                                                            cuArr=arr))
    out = cupy.zeros(8, cupy.float32)
    module["fetch"]((1,), (8,), (tex, surf, out, 8))
    back = np.zeros(8, np.float32)
    arr.copy_to(back)
    assert out.get().tolist() == [i + 0.5 for i in range(8)]
    assert back.tolist() == [2 * (i + 0.5) for i in range(8)]
    a = cupy.zeros((3, 4), cupy.float32)
    b = cupy.zeros((3, 4), cupy.float32)
    module["fill2"]((1,), (4, 4), (a.mdspan(index_type=cupy.int64),
                                   b[:, ::2].mdspan(index_type=cupy.int32)))
    assert a.get().tolist() == [[10 * i + j for j in range(4)] for i in range(3)]
    assert b.get().tolist() == [[-(10 * i + j // 2) if j % 2 == 0 else 0.0 for j in range(4)]
                                for i in range(3)]
