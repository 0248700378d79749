"""Argument checks and packing: everything before the launch, so no GPU is needed.

Device arrays are stood in for by objects that carry a ``__cuda_array_interface__`` (the GPU is
the one part that cannot run here); the kernels and their parameter records are real.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudamagic
from cudamagic import driver
from cudamagic.errors import NoDeviceError
from cudamagic.kernel import _stream_handle, pack_args

from .conftest import FIXTURES


class DeviceArray:
    """What CuPy, PyTorch and Numba arrays expose, without the device memory."""

    def __init__(self, dtype, readonly: bool = False, ptr: int = 0x7F0000001000) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "typestr": np.dtype(dtype).str,
                                         "shape": (4,), "strides": None, "version": 3}


EXPRS = ["fill<float>", "fill<__half>", "fill<bool>", "cast<float, double>", "flags<float, 5u, true>",
         "vec<float4>", "shift<int, 0x10>", "lits<'a', 123456789012LL, 18446744073709551615ull>",
         "pack<int, float, double>", "c_kernel", "fill<unsigned char>"]


@pytest.fixture(scope="module")
def mod():
    return cudamagic.load_cubin(FIXTURES / "fixture.cubin", EXPRS)


def _pack(mod, expr, *args):
    k = mod[expr]
    return pack_args(k.name_expression, k.params, args)


def test_python_scalars_take_the_parameters_own_type(mod):
    blobs = _pack(mod, "fill<float>", DeviceArray("f4"), 2, 10)
    assert blobs[1] == np.float32(2).tobytes() and blobs[2] == np.int32(10).tobytes()
    assert _pack(mod, "fill<__half>", DeviceArray("f2"), 1.5, 3)[1] == np.float16(1.5).tobytes()
    assert _pack(mod, "fill<bool>", DeviceArray("?"), True, 3)[1] == b"\x01"
    assert _pack(mod, "pack<int, float, double>", 1, 2, 3)[2] == np.float64(3).tobytes()


def test_wrong_count_names_the_parameters(mod):
    with pytest.raises(TypeError, match=r"fill<float> takes 3 arguments \(float\*, float, int\), got 2"):
        _pack(mod, "fill<float>", DeviceArray("f4"), 1.0)


def test_host_array_for_a_pointer(mod):
    with pytest.raises(TypeError, match=r"parameter 0 \(float\*\): got a host array"):
        _pack(mod, "fill<float>", np.zeros(4, np.float32), 1.0, 4)


def test_dtype_must_match_the_pointee(mod):
    with pytest.raises(TypeError, match="array of float64 where the kernel reads float32"):
        _pack(mod, "fill<float>", DeviceArray("f8"), 1.0, 4)
    with pytest.raises(TypeError, match=r"parameter 1 \(double\*\)"):
        _pack(mod, "cast<float, double>", DeviceArray("f4"), DeviceArray("f4"), 4)


def test_scalar_that_does_not_fit(mod):
    with pytest.raises(ValueError, match=r"parameter 2 \(int\): 1099511627776 does not fit"):
        _pack(mod, "fill<float>", DeviceArray("f4"), 1.0, 2 ** 40)
    with pytest.raises(ValueError, match="does not fit in unsigned char"):
        _pack(mod, "fill<unsigned char>", DeviceArray("u1"), 256, 1)


def test_float_that_does_not_fit(mod):
    with pytest.raises(ValueError, match=r"parameter 1 \(float\): 1e\+39 does not fit in float"):
        _pack(mod, "fill<float>", DeviceArray("f4"), 1e39, 4)


def test_float_for_an_integer(mod):
    with pytest.raises(TypeError, match=r"parameter 2 \(int\): got float"):
        _pack(mod, "fill<float>", DeviceArray("f4"), 1.0, 4.0)


def test_numpy_scalars_convert_only_safely(mod):
    assert _pack(mod, "fill<float>", DeviceArray("f4"), np.float64(0.5), np.int64(3))[2] == \
        np.int32(3).tobytes()
    with pytest.raises(TypeError, match="does not convert safely"):
        _pack(mod, "fill<float>", DeviceArray("f4"), np.complex64(1), 3)


def test_read_only_arrays_only_for_const_pointers(mod):
    with pytest.raises(ValueError, match="read-only array"):
        _pack(mod, "fill<float>", DeviceArray("f4", readonly=True), 1.0, 4)
    _pack(mod, "cast<float, double>", DeviceArray("f4", readonly=True), DeviceArray("f8"), 4)


def test_by_value_structs_take_their_bytes(mod):
    float4 = np.zeros((), dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("w", "f4")])
    assert _pack(mod, "vec<float4>", float4, DeviceArray("V16"))[0] == bytes(16)
    with pytest.raises(ValueError, match="got 8 bytes, the kernel takes 16"):
        _pack(mod, "vec<float4>", bytes(8), DeviceArray("V16"))


def test_kernels_without_a_signature_pack_by_size(mod):
    blobs = _pack(mod, "c_kernel", DeviceArray("f4"), 7)
    assert blobs[1] == np.int32(7).tobytes()
    with pytest.raises(ValueError, match="does not fit"):
        _pack(mod, "c_kernel", DeviceArray("f4"), 2 ** 33)


def test_none_is_a_null_pointer(mod):
    assert _pack(mod, "fill<float>", None, 1.0, 0)[0] == bytes(8)


def test_grid_and_block_are_checked_before_the_device(mod):
    k = mod["fill<float>"]
    with pytest.raises(ValueError, match="at least 1"):
        k((0,), (32,), (None, 1.0, 0))
    with pytest.raises(TypeError, match="1 to 3 ints"):
        k((1, 1, 1, 1), (32,), (None, 1.0, 0))


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU")
def test_a_valid_call_reaches_the_device_check(mod):
    with pytest.raises(NoDeviceError):
        mod["fill<float>"]((1,), (32,), (DeviceArray("f4"), 1.0, 4))


def test_stream_handles():
    class CupyLike:
        ptr = 1234

    class TorchLike:
        cuda_stream = 99

    class Protocol:
        def __cuda_stream__(self):
            return (0, 77)

    assert [_stream_handle(s) for s in (CupyLike(), TorchLike(), Protocol(), 5)] == [1234, 99, 77, 5]
    with pytest.raises(TypeError, match="stream must be"):
        _stream_handle("default")


def _checked_bytes(k, args, size: int) -> bytes:
    """The parameter buffer as the checked path (pack_args) fills it."""
    expected = bytearray(size)
    for spec, blob in zip(k.params, pack_args(k.name_expression, k.params, args)):
        expected[spec.offset:spec.offset + spec.size] = blob
    return bytes(expected)


def test_fast_packers_write_what_the_checked_path_gives(mod, monkeypatch):
    from cudamagic import kernel as kmod

    # the fast path reads (pointer, dtype) straight off known array types, as it does for CuPy's
    monkeypatch.setitem(kmod._FAST_ARRAYS, DeviceArray,
                        lambda a: (a.__cuda_array_interface__["data"][0],
                                   np.dtype(a.__cuda_array_interface__["typestr"])))
    cases = {"fill<float>": (DeviceArray("f4", ptr=0x1234), 2.5, 7),
             "fill<unsigned char>": (DeviceArray("u1"), 255, -3),
             "pack<int, float, double>": (-1, 1e30, 2),
             "c_kernel": (DeviceArray("f4"), 9)}
    for expr, args in cases.items():
        k = mod[expr]
        address, packers, (data, _) = k._launcher()
        for pack, value in zip(packers, args):
            pack(value)
        assert bytes(data) == _checked_bytes(k, args, len(data)), expr
    # the fast path still refuses what the checked path refuses
    address, packers, _ = mod["fill<float>"]._launcher()
    with pytest.raises(TypeError, match="array of float64"):
        packers[0](DeviceArray("f8"))
    with pytest.raises(ValueError, match="does not fit"):
        packers[2](2 ** 31)


def test_generated_launcher_packs_what_the_checked_path_packs(mod):
    """The generated fast launcher, driven with stand-ins for CuPy's array, stream and typed
    launch (the GPU is the part that cannot run here)."""
    import types

    from cudamagic.kernel import _express_path

    class FakeCupyArray:
        def __init__(self, dtype, ptr):
            self.dtype = np.dtype(dtype)
            self.data = types.SimpleNamespace(ptr=ptr)

    fake_cupy = types.SimpleNamespace(
        ndarray=FakeCupyArray,
        cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=77)))
    launched, checked = [], []
    k = mod["fill<float>"]
    address, packers, (data, _) = k._launcher()
    import sys

    old = sys.modules.get("cupy")
    sys.modules["cupy"] = fake_cupy
    try:
        express = _express_path("fill<float>", k.params, lambda *a: checked.append(a), address,
                                data, {0: 0xF00}, lambda: 0, lambda *a: launched.append(a))
    finally:
        if old is None:
            del sys.modules["cupy"]
        else:
            sys.modules["cupy"] = old
    express((4,), (256,), (FakeCupyArray("f4", 0xABC), 2, 10), 0, None)
    assert launched == [(0xF00, 4, 1, 1, 256, 1, 1, 0, 77, address, 0)] and not checked
    assert bytes(data) == _checked_bytes(k, (DeviceArray("f4", ptr=0xABC), 2, 10), len(data))
    # anything unusual goes to the checked path, which does every check
    for args in [(FakeCupyArray("f8", 1), 2.0, 10),      # dtype mismatch
                 (FakeCupyArray("f4", 1), 2.0, 2 ** 40),  # does not fit
                 (FakeCupyArray("f4", 1), 2.0, True),     # a bool for an int
                 (np.zeros(3, np.float32), 2.0, 10)]:     # a host array
        express((4,), (256,), args, 0, None)
    express((4, 2), (256,), (FakeCupyArray("f4", 1), 2.0, 10), 0, None)  # a 2-D grid
    assert len(checked) == 5 and len(launched) == 1
