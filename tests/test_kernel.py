"""Argument checks and packing: everything before the launch, so no GPU is needed.

Device arrays are stood in for by objects that carry a ``__cuda_array_interface__``, and the
device side of a launch (CuPy's ndarray and stream types, the current device and stream, the
driver's ``cuLaunchKernel``) by :class:`StandInDevice`, which reads the parameters through the
``void*[]`` exactly as the driver does: the GPU is the one part that cannot run here. The kernels,
their parameter records and the packing code are real.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import dataclasses
import functools
import math
import re
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from unittest import mock

import numpy as np
import pytest

import cudamagic
from cudamagic.toolchain.device import driver
from cudamagic.launch import encode as encode_module
from cudamagic.launch import params as params_module
from cudamagic.errors import (
    ArgumentError,
    ArgumentTypeError,
    ArgumentValueError,
    LaunchError,
    NoDeviceError,
)
from cudamagic.launch.encode import pack_args, stream_handle
from cudamagic.launch.kernel import Kernel
from cudamagic.launch.launcher import LaunchHooks
from cudamagic.launch.params import SlotKind

from .conftest import FIXTURES


class DeviceArray:
    """What CuPy, PyTorch and Numba arrays expose, without the device memory."""

    def __init__(self, dtype, readonly: bool = False, ptr: int = 0x7F0000001000) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "typestr": np.dtype(dtype).str,
                                         "shape": (4,), "strides": None, "version": 3}


class CupyArrayStandIn:
    """What the generated launcher reads off a ``cupy.ndarray`` (dtype, data pointer), and its
    ``__cuda_array_interface__`` (what the checked path reads)."""

    def __init__(self, dtype, ptr: int = 0x7F0000002000) -> None:
        self.dtype = np.dtype(dtype)
        self.data = types.SimpleNamespace(ptr=ptr)
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": self.dtype.str,
                                         "shape": (4,), "strides": None, "version": 3}


class CupyStreamStandIn:
    """A ``cupy.cuda.Stream``: its handle is ``.ptr``."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


@dataclass(frozen=True)
class Launch:
    """One launch as the stand-in driver saw it: the bytes of every parameter, and for
    ``cuLaunchKernelEx`` the cluster and cooperative attributes."""

    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    params: tuple[bytes, ...]
    api: str = "cuLaunchKernel"
    cluster: tuple[int, int, int] | None = None
    cooperative: bool = False


class StandInDevice:
    """The device side of a launch, for a machine without a GPU: device 0 (``SMS`` SMs, each
    holding ``per_sm`` blocks of any kernel), current stream 77, and a ``cuLaunchKernel`` and
    ``cuLaunchKernelEx`` that record what the driver would read."""

    STREAM = 77
    FUNCTION = 0xF00
    SMS = 132

    def __init__(self, per_sm: int = 8, clusters: bool = True) -> None:
        self.launches: list[Launch] = []
        self.shared_limits: list[tuple[int, int]] = []
        self.occupancy_asked: list[tuple[int, int, int, int]] = []
        self.per_sm, self.clusters = per_sm, clusters

    def hooks(self, kernel: Kernel) -> LaunchHooks:
        specs = kernel.params
        stream = types.SimpleNamespace(ptr=self.STREAM)

        def read(params: int) -> tuple[bytes, ...]:
            ptrs = (ctypes.c_void_p * max(len(specs), 1)).from_address(params)
            return tuple(ctypes.string_at(ptrs[s.index], s.size) for s in specs)

        def launch(fn, gx, gy, gz, bx, by, bz, shared_mem, st, params, extra):
            self.launches.append(Launch(fn, (gx, gy, gz), (bx, by, bz), shared_mem, st,
                                        read(params)))

        def launch_ex(fn, device, params, call, what):
            assert device == 0 and what == f"launching {kernel.name_expression}"
            self.launches.append(Launch(fn, call.grid, call.block, call.shared_mem, call.stream,
                                        read(params), "cuLaunchKernelEx", call.cluster,
                                        call.cooperative))

        def occupancy(device, fn, threads, shared_mem):
            self.occupancy_asked.append((device, fn, threads, shared_mem))
            return self.per_sm

        limits = driver.DeviceLimits(0, "Stand-in GPU", self.SMS, True, self.clusters)
        return LaunchHooks(array_type=CupyArrayStandIn, stream_type=CupyStreamStandIn,
                           current_device=lambda: 0, current_stream=lambda: stream,
                           handles={0: self.FUNCTION}, load=lambda device: self.FUNCTION,
                           launch=launch, relaunch=lambda *a: None,
                           raise_shared_limit=lambda d, n: self.shared_limits.append((d, n)),
                           other_thread=Kernel._any_thread, launch_ex=launch_ex,
                           occupancy=occupancy, device_limits=lambda device: limits,
                           dynamic_shared_default=kernel.dynamic_shared_default)

    @contextlib.contextmanager
    def attached(self) -> Iterator[StandInDevice]:
        """Kernels whose launcher is made inside this block launch on the stand-in."""
        with mock.patch.object(Kernel, "_launch_hooks", lambda k: self.hooks(k)):
            yield self


def fresh(k: Kernel) -> Kernel:
    """The same kernel as a new object: its first call makes its launcher."""
    return Kernel(binary=k.binary, name_expression=k.name_expression, symbol=k.symbol,
                  python_name=k.python_name, signatures=k._signatures,
                  resolved_by=k.resolved_by, image=k.image)


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
    blobs = _pack(mod, "c_kernel", DeviceArray("f4"), np.int32(7))
    assert blobs[1] == np.int32(7).tobytes()
    assert _pack(mod, "c_kernel", DeviceArray("f4"), np.float32(7))[1] == np.float32(7).tobytes()


@pytest.mark.parametrize("value", [7, 1.0, True, 2 ** 33, -0.0])
def test_a_python_number_for_a_4_byte_slot_without_types_is_refused(mod, value):
    """A CUBIN without its source: a 4-byte slot may be an int or a float, and a guess that is
    wrong reads garbage in the kernel (1 as int32 is 1.4e-45 as a float): say so, every path."""
    with pytest.raises(ArgumentTypeError, match=r"could be int32 .* or float32 .*np\.float32"):
        _pack(mod, "c_kernel", DeviceArray("f4"), value)
    dev = StandInDevice()
    with dev.attached():
        k = fresh(mod["c_kernel"])
        with pytest.raises(ArgumentTypeError, match="could be"):
            k((1,), (32,), (DeviceArray("f4", ptr=0x1000), value))
        with pytest.raises(ArgumentTypeError, match="could be"):  # and on a later call
            k((1,), (32,), (DeviceArray("f4", ptr=0x1000), value))
    assert dev.launches == []


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

    handles = [stream_handle("k", s) for s in (CupyLike(), TorchLike(), Protocol(), 5)]
    assert handles == [1234, 99, 77, 5]
    with pytest.raises(ArgumentTypeError, match="stream must be"):
        stream_handle("k", "default")
    with pytest.raises(ArgumentValueError, match="not a CUstream"):
        stream_handle("k", -1)


@pytest.mark.parametrize("rotate", [0, 2, 3], ids=["1-D first", "2-D first", "3-D first"])
def test_generated_launcher_packs_what_the_checked_path_packs(mod, rotate):
    """Every call shape through the generated launcher (first call and later calls) hands the
    driver the bytes the checked path gives, with the grid, block and stream asked for (the
    launcher tries the first call's dimensions first: every order is checked)."""
    dev = StandInDevice()
    x = CupyArrayStandIn("f4", 0xABC)
    shapes = [
        ((4,), (256,), (x, 2, 10), {}),
        ((4,), (256,), (x, np.float32(2.5), np.int32(-7)), {}),
        ((4, 3), (16, 8), (x, 2.5, 7), {}),
        ((4, 3, 2), (8, 4, 2), (x, np.float32(2.5), np.int64(7)), {}),
        ([4, 3], np.int64(32), [x, 2.5, 7], {}),
        ((1,), (32,), (x, 1.0, 3), {"stream": CupyStreamStandIn(5)}),
        ((1,), (32,), (DeviceArray("f4", ptr=0x1234), np.float16(0.5), True), {"stream": 9}),
        ((1,), (32,), (None, 1.0, 3), {"shared_mem": 65536}),
    ]
    shapes = shapes[rotate:] + shapes[:rotate]
    with dev.attached():
        k = fresh(mod["fill<float>"])
        for grid, block, args, kw in shapes * 2:  # first calls, then later calls
            k(grid, block, args, **kw)
    want_dims = {1: lambda d: (d[0], 1, 1), 2: lambda d: (d[0], d[1], 1), 3: lambda d: tuple(d)}
    for (grid, block, args, kw), got in zip(shapes * 2, dev.launches, strict=True):
        grid = grid if isinstance(grid, (tuple, list)) else (grid,)
        block = block if isinstance(block, (tuple, list)) else (block,)
        assert got.params == tuple(pack_args("fill<float>", k.params, args)), args
        assert got.grid == want_dims[len(grid)](grid) and got.block == want_dims[len(block)](block)
        stream = kw.get("stream")
        assert got.stream == (StandInDevice.STREAM if stream is None
                              else getattr(stream, "ptr", stream))
        assert got.shared_mem == kw.get("shared_mem", 0) and got.function == StandInDevice.FUNCTION
    assert dev.shared_limits == [(0, 65536)] * 2


def test_threads_launch_one_kernel_each_with_its_own_arguments(mod):
    """The kernel's own call is its first thread's launcher; another thread is sent on to its
    own (its own parameter buffer): concurrent launches never hand the driver each other's
    bytes."""
    import threading

    dev = StandInDevice()
    calls_per_thread, seen = 300, {}
    lock = threading.Lock()
    k = fresh(mod["fill<float>"])

    def launch(value: int) -> None:
        x = CupyArrayStandIn("f4", 0x1000 + value)
        for _ in range(calls_per_thread):
            k((1,), (32,), (x, float(value), value))

    def record(fn, gx, gy, gz, bx, by, bz, shared_mem, st, params, extra):
        time.sleep(0.0001)  # let another thread run between the packing and the driver's read
        ptrs = (ctypes.c_void_p * 3).from_address(params)
        blob = tuple(ctypes.string_at(ptrs[s.index], s.size) for s in k.params)
        with lock:
            seen[blob] = seen.get(blob, 0) + 1

    with mock.patch.object(Kernel, "_launch_hooks",
                           lambda kern: dataclasses.replace(dev.hooks(kern), launch=record)):
        threads = [threading.Thread(target=launch, args=(v,)) for v in (1, 2, 3, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    want = {tuple(pack_args("fill<float>", k.params, (CupyArrayStandIn("f4", 0x1000 + v),
                                                       float(v), v))): calls_per_thread
            for v in (1, 2, 3, 4)}
    assert seen == want


def test_generated_launcher_keeps_every_check(mod):
    """The fast path refuses what the checked path refuses, and launches nothing then."""
    dev = StandInDevice()
    with dev.attached():
        k = fresh(mod["fill<float>"])
        k((1,), (32,), (CupyArrayStandIn("f4"), 1.0, 1))
        with pytest.raises(ArgumentTypeError, match="array of float64 where the kernel reads"):
            k((1,), (32,), (CupyArrayStandIn("f8"), 1.0, 1))
        with pytest.raises(ArgumentTypeError, match=r"parameter 1 \(float\): got a complex64"):
            k((1,), (32,), (CupyArrayStandIn("f4"), np.complex64(1), 1))
        with pytest.raises(ArgumentValueError, match=r"parameter 2 \(int\): 2147483648 does not"):
            k((1,), (32,), (CupyArrayStandIn("f4"), 1.0, np.int64(2**31)))
        with pytest.raises(ArgumentTypeError, match=r"parameter 2 \(int\): got str '1'"):
            k((1,), (32,), (CupyArrayStandIn("f4"), 1.0, "1"))
        with pytest.raises(ArgumentTypeError, match="takes 3 arguments"):
            k((1,), (32,), (CupyArrayStandIn("f4"), 1.0))
    assert len(dev.launches) == 1


class CudaArrayInterface:
    def __init__(self, interface: dict) -> None:
        self.__cuda_array_interface__ = interface


@pytest.mark.parametrize("interface, message", [
    ({"data": (-1, False), "typestr": "<f4", "shape": (4,), "version": 3},
     r"data pointer -1 is not a device address"),
    ({"data": (2**70, False), "typestr": "<f4", "shape": (4,), "version": 3},
     r"data pointer 1180591620717411303424 is not a device address"),
    ({"typestr": "<f4", "shape": (4,), "version": 3},
     r"__cuda_array_interface__ has no 'data' \(pointer, read-only\) pair"),
    ({"data": (4096, False), "typestr": "nonsense", "shape": (4,), "version": 3},
     r"__cuda_array_interface__ typestr 'nonsense' is not a NumPy type string"),
])
def test_a_bad_cuda_array_interface_is_refused(mod, interface, message):
    # raised before the device is asked: this machine has none, so a later check would say so
    with pytest.raises(ArgumentValueError,
                       match=r"fill<float>: parameter 0 \(float\*\): the array's " + message):
        mod["fill<float>"]((1,), (32,), (CudaArrayInterface(interface), 1.0, 4))


@pytest.mark.parametrize("call, error, message", [
    (lambda k: k((1,), (1,), (1, 1.0, 10**400)), ArgumentValueError,
     r"parameter 2 \(double\): 1000000000000000000000.* does not fit in double"),
    (lambda k: k((1,), (1,), (1, 1.0, 1.0), shared_mem=None), ArgumentTypeError,
     r"shared_mem is the dynamic shared memory in bytes, an int >= 0 .*got NoneType None"),
    (lambda k: k((1,), (1,), (1, 1.0, 1.0), shared_mem=-1), ArgumentValueError,
     r"shared_mem must be from 0 to 4294967295 bytes, got -1"),
    (lambda k: k((1,), (1,), (1, 1.0, 1.0), shared_mem=1.5), ArgumentTypeError,
     r"got float 1.5"),
    (lambda k: k((1,), (1,), (1, 1.0, 1.0), stream="s"), ArgumentTypeError,
     r"stream must be a CuPy or PyTorch stream.*got str 's'"),
    (lambda k: k((2**32,), (1,), (1, 1.0, 1.0)), ArgumentValueError,
     r"grid dimension of 4294967296 is more than a launch can take"),
    (lambda k: k((1.0,), (1,), (1, 1.0, 1.0)), ArgumentTypeError,
     r"grid must be an int or a tuple of 1 to 3 ints, got \(1.0,\)"),
])
def test_launch_arguments_are_checked_before_the_device(mod, call, error, message):
    # this machine has no GPU: a check made after the device lookup would raise NoDeviceError
    with pytest.raises(error, match=r"pack<int, float, double>: .*" + message):
        call(mod["pack<int, float, double>"])


def test_a_host_array_is_no_pointer_for_an_extern_c_kernel(mod):
    # no signature: the 8-byte slot could be a pointer, but host memory never is one
    with pytest.raises(ArgumentTypeError, match=r"c_kernel: parameter 0 \(8 bytes, no C\+\+ "
                                                r"type\): got a host array \(float32"):
        mod["c_kernel"]((1,), (32,), (np.zeros(4, np.float32), 4))


def test_argument_errors_are_project_errors_and_python_ones(mod):
    with pytest.raises(ArgumentError) as info:
        mod["fill<float>"]((1,), (32,), (None, 1.0, 4.0))
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, cudamagic.errors.LaunchError)


SAXPY = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
"""


def test_an_argument_error_shows_as_one_block_in_ipython(tmp_path, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns["saxpy_float"] = cudamagic.build(SAXPY, ["saxpy<float>"],
                                                   cache=tmp_path)["saxpy<float>"]
    result = shell.run_cell("saxpy_float((4,), (256,), (2.0, None, None, 1024.0))")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert isinstance(result.error_in_exec, ArgumentTypeError)
    assert ("ArgumentTypeError: saxpy<float>: parameter 3 (int): got float 1024.0 for an "
            "integer parameter: pass an int") in text
    assert "Traceback" not in text and "kernel.py" not in text and "launcher" not in text
    assert len(text.strip().splitlines()) == 1


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU: the driver answers")
def test_attributes_without_a_gpu_come_from_the_cubin(mod):
    k = mod["fill<float>"]
    assert {n: k.attributes()[n] for n in k.resources.as_dict()} == k.resources.as_dict() == {
        "registers": k.resources.registers, "static_shared_bytes": 0, "const_bytes": 0,
        "local_bytes": 0}
    assert k.resources.registers > 0


# --- argument objects that misbehave, messages that read well (tester's findings) ---------------

class RaisingInterface:
    """A device-array-like whose ``__cuda_array_interface__`` raises (PyTorch's does for a tensor
    that requires grad)."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


class DLPackOnly:
    """A CUDA array that speaks only DLPack; ``device`` or ``error`` says what it answers."""

    def __init__(self, device=(2, 0), error: Exception | None = None) -> None:
        self.device, self.error = device, error

    def __dlpack_device__(self):
        if self.error is not None:
            raise self.error
        return self.device

    def __dlpack__(self, *args, **kwargs):  # never reached: the tests stop before the capsule
        raise BufferError("no capsule here")


@pytest.mark.parametrize("expr, where", [("fill<float>", r"parameter 0 \(float\*\)"),
                                         ("c_kernel", r"parameter 0 \(8 bytes, no C\+\+ type\)")])
def test_a_raising_cuda_array_interface_is_an_argument_error(mod, expr, where):
    with pytest.raises(ArgumentTypeError, match=expr + ": " + where + r": got RaisingInterface, "
                       r"and reading its __cuda_array_interface__ raised RuntimeError: Can't get "
                       r"__cuda_array_interface__ on Variable that requires grad") as info:
        _pack(mod, expr, RaisingInterface(), *((1.0, 4) if expr == "fill<float>" else (4,)))
    assert isinstance(info.value.__cause__, RuntimeError)  # chained: the user's own traceback


def test_a_raising_dlpack_device_is_an_argument_error(mod):
    with pytest.raises(ArgumentTypeError, match=r"fill<float>: parameter 0 \(float\*\): got "
                       r"DLPackOnly, and reading its __dlpack_device__\(\) raised ValueError: "
                       r"stream closed") as info:
        _pack(mod, "fill<float>", DLPackOnly(error=ValueError("stream closed")), 1.0, 4)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ArgumentTypeError, match=r"__dlpack_device__\(\) returned 'cuda', not a "
                                                r"\(device type, device id\) pair"):
        _pack(mod, "fill<float>", DLPackOnly(device="cuda"), 1.0, 4)


class FakeCUDARuntimeError(RuntimeError):
    """Stands for ``cupy_backends.cuda.api.runtime.CUDARuntimeError`` (its name and status)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


FakeCUDARuntimeError.__name__ = "CUDARuntimeError"


def _fake_cupy(error: Exception) -> types.ModuleType:
    fake = types.ModuleType("cupy")

    def from_dlpack(value):
        raise error

    fake.from_dlpack = from_dlpack
    return fake


def test_a_failing_dlpack_conversion_is_an_argument_error(mod):
    import sys

    with mock.patch.object(driver, "available", lambda: True), \
            mock.patch.dict(sys.modules, {"cupy": _fake_cupy(BufferError("read-only export"))}), \
            pytest.raises(ArgumentTypeError, match=r"fill<float>: parameter 0 \(float\*\): got "
                          r"DLPackOnly, and converting it through DLPack \(cupy.from_dlpack\) "
                          r"raised BufferError: read-only export") as info:
        _pack(mod, "fill<float>", DLPackOnly(), 1.0, 4)
    assert isinstance(info.value.__cause__, BufferError)


def test_cupys_missing_driver_for_a_dlpack_array_is_no_device(mod):
    """A driver CuPy's runtime cannot use (cudaErrorInsufficientDriver): no device, as every
    other launch without one says, not CuPy's raw error."""
    import sys

    error = FakeCUDARuntimeError(35, "cudaErrorInsufficientDriver: CUDA driver version is "
                                     "insufficient for CUDA runtime version")
    with mock.patch.object(driver, "available", lambda: True), \
            mock.patch.dict(sys.modules, {"cupy": _fake_cupy(error)}), \
            pytest.raises(NoDeviceError, match=r"fill<float>: parameter 0 \(float\*\): no CUDA "
                          r"device is available to CuPy, which reads a DLPack array's pointer "
                          r"\(CUDARuntimeError: cudaErrorInsufficientDriver.*\)\. Compiling, "
                          r"caching and name resolution work without one; launching a kernel "
                          r"needs a GPU\.") as info:
        _pack(mod, "fill<float>", DLPackOnly(), 1.0, 4)
    assert info.value.__cause__ is error


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU")
def test_a_dlpack_array_without_a_gpu_is_no_device(mod):
    with pytest.raises(NoDeviceError, match=r"fill<float>: parameter 0 \(float\*\): no CUDA "
                       r"device is available: .*launching a kernel needs a GPU\."):
        mod["fill<float>"]((1,), (32,), (DLPackOnly(), 1.0, 4))
    # a DLPack array in host memory is still refused as such, GPU or not
    with pytest.raises(ArgumentTypeError, match="DLPack array on device type 1, not CUDA memory"):
        _pack(mod, "fill<float>", DLPackOnly(device=(1, 0)), 1.0, 4)


def test_values_show_as_their_own_repr(mod):
    with pytest.raises(ArgumentValueError) as info:
        _pack(mod, "fill<float>", DeviceArray("f4"), np.float64(0.1), 4)
    assert ": np.float64(0.1) is not exactly a float (it would arrive as np.float32(0.1)): " \
        "convert it yourself (np.float32(x))" in str(info.value)
    spec = params_module._spec(0, 0, 8, "complex<float>")
    with pytest.raises(ArgumentValueError) as info:
        encode_module.encode("k", spec, np.complex128(0.1 + 0.2j))
    assert "np.complex128(0.1+0.2j) is not exactly a complex<float> (it would arrive as " \
        "np.complex64(0.1+0.2j))" in str(info.value)
    with pytest.raises(ArgumentValueError, match=r"np.float32\(0.1\) is not exactly a bfloat16"):
        encode_module.encode("k", params_module._spec(0, 0, 2, "__nv_bfloat16"), np.float32(0.1))


# (the CUBIN's slot size, the C++ type the signature gives it, a value of that type)
_WIDTH_MISMATCHES = [
    (4, "double", 1.5), (8, "float", 1.5), (4, "long long", 7), (8, "int", 7),
    (2, "int", 7), (1, "short", 7), (4, "complex<float>", 1 + 2j), (8, "__half", 1.5),
]


@pytest.mark.parametrize("size, ctype, value", _WIDTH_MISMATCHES,
                         ids=[f"{t}-in-{n}-bytes" for n, t, _ in _WIDTH_MISMATCHES])
def test_a_scalar_whose_slot_is_not_its_width_is_taken_as_raw_bytes_only(size, ctype, value):
    """A signature that gives a slot a type of another width than the CUBIN records (a foreign
    CUBIN, a stale map) never packs the type's bytes into it: a ``double`` into a 4-byte slot
    would write 8 bytes where the kernel reads 4. The slot takes raw bytes of its own size alone,
    and the message says how many."""
    from cudamagic.cxx import parse_demangled
    from cudamagic.toolchain.binary.image import Param

    record = types.SimpleNamespace(params=(Param(ordinal=0, offset=0, size=size),))
    (spec,) = params_module.param_specs(record, parse_demangled(f"k({ctype})"))
    assert spec.kind is SlotKind.VALUE and spec.size == size and not spec.direct
    with pytest.raises(ArgumentTypeError, match=f"or {size} raw bytes"):
        encode_module.encode("k", spec, value)
    with pytest.raises(ArgumentValueError, match=f"the kernel takes {size}"):
        encode_module.encode("k", spec, b"\0" * (size + 4))
    assert encode_module.encode("k", spec, b"\1" * size) == b"\1" * size


def test_long_values_are_shortened_with_an_ellipsis(mod):
    with pytest.raises(ArgumentTypeError) as info:
        _pack(mod, "fill<float>", DeviceArray("f4"), 1.0, "x" * 200)
    shown = str(info.value).split("got str ", 1)[1].split(" for an integer")[0]
    assert shown.startswith("'xxx") and shown.endswith("xxx'") and "..." in shown
    assert len(shown) < 80
    with pytest.raises(ArgumentValueError) as info:
        _pack(mod, "pack<int, float, double>", 1, 1.0, 10**400)
    assert "..." in str(info.value) and str(info.value).endswith(
        "does not fit in double (largest 1.7976931348623157e+308)")
    # past Python's digit limit repr() itself raises: the message still comes
    with pytest.raises(ArgumentValueError, match=r"<int of 16610 bits> does not fit in double"):
        _pack(mod, "pack<int, float, double>", 1, 1.0, 10**5000)


def test_an_extern_c_overflow_names_the_slot(mod):
    with pytest.raises(ArgumentTypeError, match=r"c_kernel: parameter 1 \(4 bytes, no C\+\+ "
                       r"type\): got the Python float 1e\+39 for a 4-byte parameter"):
        _pack(mod, "c_kernel", DeviceArray("f4"), 1e39)
    with pytest.raises(ArgumentValueError, match=r"c_kernel: parameter 0 \(8 bytes, no C\+\+ "
                       r"type\): \(1e\+39\+0j\) does not fit in an 8-byte complex slot"):
        _pack(mod, "c_kernel", complex(1e39), 4)


THRUST = "thrust::THRUST_300102_SM_900_NS::complex<float>"
LIBCUDACXX = "cuda::std::__4::complex<double>"


def _library_typed_kernel() -> Kernel:
    """A kernel whose parameters are of CCCL's versioned types (no GPU, no CUBIN: its records)."""
    from cudamagic.toolchain.binary.image import Param
    from cudamagic.cxx.signatures import Signatures

    symbol = "_Z1kIN6thrust23THRUST_300102_SM_900_NS7complexIfEEEvT_PKN4cuda3std3__47complexIdEEi"
    text = f"void k<{THRUST} >({THRUST}, {LIBCUDACXX} const*, int)"
    image = types.SimpleNamespace(symbol=symbol, resources=None,
                                  params=(Param(0, 0, 8), Param(1, 8, 8), Param(2, 16, 4)))
    return Kernel(binary=None, name_expression="k<thrust::complex<float>>", symbol=symbol,
                  python_name="k", signatures=Signatures({symbol: text}, False),
                  resolved_by="demangled", image=image)


@pytest.mark.parametrize("args, error, message", [
    (("x", None, 1), ArgumentTypeError, r"parameter 0 \(thrust::complex<float>\): got str"),
    ((1j, DeviceArray("f4"), 1), ArgumentTypeError,
     r"parameter 1 \(cuda::std::complex<double> const\*\): got an array of float32"),
    ((complex(1e39), None, 1), ArgumentValueError,
     (r"parameter 0 \(thrust::complex<float>\): \(1e\+39\+0j\) does not fit in "
      r"thrust::complex<float>$")),
    ((np.complex128(0.1j), None, 1), ArgumentValueError,
     r"is not exactly a thrust::complex<float> "),
    ((1j,), ArgumentTypeError,
     r"takes 3 arguments \(thrust::complex<float>, cuda::std::complex<double> const\*, int\)"),
])
def test_library_namespaces_are_left_out_of_messages(args, error, message):
    k = _library_typed_kernel()
    assert k.params[0].kind is SlotKind.COMPLEX and k.params[1].dtype == np.complex128  # still read
    with pytest.raises(error, match=r"^k<thrust::complex<float>>:? .*" + message) as info:
        k((1,), (1,), args)
    assert "_NS" not in str(info.value) and "__4" not in str(info.value)


# --- echo kernels, and what each must receive (the oracle, independent of cudamagic's code) ------
# shared by tests/test_param_encoding.py (every path, no GPU) and tests/test_gpu.py (on a GPU)

ECHO_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cupy/complex.cuh>
struct Pair { int a; float c; double b; };  // no padding: the kernel copies every byte
template <typename T> __global__ void echo(T v, T* out) { *out = v; }
extern "C" __global__ void echo1(unsigned char v, unsigned char* out) { *out = v; }
extern "C" __global__ void echo2(unsigned short v, unsigned short* out) { *out = v; }
extern "C" __global__ void echo4(unsigned int v, unsigned int* out) { *out = v; }
extern "C" __global__ void echo8(unsigned long long v, unsigned long long* out) { *out = v; }
extern "C" __global__ void echo16(Pair v, Pair* out) { *out = v; }
"""
# name expression -> the parameter's NumPy dtype ("bf16": none in NumPy; "V": raw bytes)
INTEGERS = {
    "echo<bool>": "?", "echo<char>": "i1", "echo<signed char>": "i1", "echo<unsigned char>": "u1",
    "echo<short>": "i2", "echo<unsigned short>": "u2", "echo<int>": "i4",
    "echo<unsigned int>": "u4", "echo<long>": "i8", "echo<unsigned long>": "u8",
    "echo<long long>": "i8", "echo<unsigned long long>": "u8", "echo<size_t>": "u8",
    "echo<wchar_t>": "i4", "echo<char16_t>": "u2", "echo<char32_t>": "u4",
}
INT128 = {"echo<__int128>": "i16", "echo<unsigned __int128>": "u16"}  # no NumPy dtype
FLOATS = {"echo<__half>": "f2", "echo<float>": "f4", "echo<double>": "f8"}
COMPLEX = {"echo<complex<float>>": "c8", "echo<complex<double>>": "c16"}
OTHERS = {"echo<__nv_bfloat16>": "bf16", "echo<Pair>": "V16", "echo<float4>": "V16",
          "echo<int2>": "V8"}
UNTYPED = {"echo1": 1, "echo2": 2, "echo4": 4, "echo8": 8, "echo16": 16}
ECHO_EXPRS = [*INTEGERS, *INT128, *FLOATS, *COMPLEX, *OTHERS]


def _exact(x: Any) -> Any:
    if isinstance(x, (bool, np.bool_, int, np.integer)):
        return int(x)
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return float(x)
    return Fraction(*x.as_integer_ratio())


@functools.lru_cache(maxsize=1)
def _bf16_values() -> list[Fraction]:
    """The value of every finite non-negative bfloat16 (bits 0 to 0x7F7F), ascending."""
    bits = np.arange(0x7F80, dtype=np.uint32) << 16
    return [Fraction(*float(f).as_integer_ratio()) for f in bits.view(np.float32)]


def bf16_oracle(x: float) -> bytes | type[Exception]:
    """The bfloat16 nearest to ``x``, ties to the even bit pattern, found by search over every
    bfloat16 value (no bit tricks to share a mistake with)."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return (sign | 0x7FC0).to_bytes(2, "little")
    if math.isinf(x):
        return (sign | 0x7F80).to_bytes(2, "little")
    values, ax = _bf16_values(), Fraction(*abs(x).as_integer_ratio())
    i = bisect.bisect_right(values, ax) - 1  # values[i] <= |x|
    if i == len(values) - 1:
        ulp = values[-1] - values[-2]
        if ax - values[-1] >= ulp / 2:  # the tie goes to the even pattern: infinity
            return ArgumentValueError
        return (sign | i).to_bytes(2, "little")
    lo, hi = values[i], values[i + 1]
    pick = i if ax - lo < hi - ax or (ax - lo == hi - ax and i % 2 == 0) else i + 1
    return (sign | pick).to_bytes(2, "little")


def oracle(code: str, value: Any) -> bytes | type[Exception]:
    """The bytes a parameter of NumPy dtype ``code`` must receive for ``value``, or the error."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if code == "bf16":
        return _bf16_expected(value)
    if code in INT128.values():
        if not isinstance(value, (bool, int, np.integer, np.bool_)):
            return ArgumentTypeError
        signed, v = code == "i16", int(value)
        lo, hi = (-(1 << 127), (1 << 127) - 1) if signed else (0, (1 << 128) - 1)
        return v.to_bytes(16, "little", signed=signed) if lo <= v <= hi else ArgumentValueError
    dtype = np.dtype(code)
    if isinstance(value, np.generic) and value.dtype == dtype:
        return value.tobytes()
    if dtype.kind in "biu":
        if isinstance(value, (float, complex, np.floating, np.complexfloating)):
            return ArgumentTypeError
        v = int(value)
        lo, hi = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        return np.array(v, dtype).tobytes() if lo <= v <= hi else ArgumentValueError
    if isinstance(value, np.generic):  # another NumPy type: only where exact
        if value.dtype.kind == "c" and dtype.kind != "c":
            return ArgumentTypeError
        with np.errstate(all="ignore"):
            out = np.array(value, dtype)[()]
        parts = (lambda z: (z.real, z.imag)) if dtype.kind == "c" else (lambda z: (z,))
        same = [_exact(p) for p in parts(out)] == [_exact(p) for p in parts(value)]
        return out.tobytes() if same else ArgumentValueError
    if dtype.kind == "c" and not isinstance(value, (int, float, complex)):
        return ArgumentTypeError
    try:
        with np.errstate(all="ignore"):
            out = np.array(value, dtype)
    except OverflowError:  # an int beyond any double
        return ArgumentValueError
    ins = (value.real, value.imag) if dtype.kind == "c" else (value,)
    outs = (out.real, out.imag) if dtype.kind == "c" else (out,)
    if any(np.isinf(o) and not (isinstance(i, float) and math.isinf(i)) for o, i in zip(outs, ins)):
        return ArgumentValueError
    return out.tobytes()


def _bf16_expected(value: Any) -> bytes | type[Exception]:
    if isinstance(value, bytes):
        return value
    if isinstance(value, np.generic):  # NumPy values: only where exactly a bfloat16
        if value.dtype.kind not in "biuf":
            return ArgumentTypeError
        with np.errstate(all="ignore"):
            want = bf16_oracle(float(value))
        if isinstance(want, bytes) and not np.isnan(value):
            back = np.frombuffer(b"\0\0" + want, "<f4")[0]
            if _exact(back) != _exact(value):
                return ArgumentValueError
        return want
    try:
        return bf16_oracle(float(value))
    except OverflowError:
        return ArgumentValueError


def untyped_oracle(size: int, value: Any) -> bytes | type[Exception]:
    """What an ``extern "C"`` slot of ``size`` bytes (no source) must receive: a Python int as a
    signed int of that size and a float as a double (1 and 8 bytes; a Python number for a 2- or
    4-byte slot is refused), a NumPy scalar of that size as its bytes."""
    if isinstance(value, np.generic):
        return value.tobytes() if value.dtype.itemsize == size else ArgumentTypeError
    if isinstance(value, (bool, int, float)) and size in (2, 4):
        return ArgumentTypeError  # int or float cannot be told apart by the slot's size
    if isinstance(value, (bool, int)):
        if size not in (1, 2, 4, 8):
            return ArgumentTypeError
        lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1
        return np.array(int(value), f"i{size}").tobytes() if lo <= value <= hi \
            else ArgumentValueError
    if isinstance(value, float):
        return oracle(f"f{size}", value) if size in (4, 8) else ArgumentTypeError
    return ArgumentTypeError


# --- what the user's objects answer, at any size (issue 17 group 5) -----------------------------

HUGE = 10**5000  # past Python's int -> str digit limit: repr() itself raises


class RaisingProperty:
    """A stream whose ``ptr`` or ``cuda_stream`` property raises (a closed stream wrapper)."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __getattr__(self, name):
        if name == self.attr:
            raise RuntimeError("stream was destroyed")
        raise AttributeError(name)


class ProtocolStream:
    """A stream speaking the CUDA stream protocol; ``answer`` is what ``__cuda_stream__()``
    returns, or raises where it is an exception."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def __cuda_stream__(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _call(**kw):
    return lambda k: k(kw.pop("grid", (1,)), kw.pop("block", (1,)),
                       kw.pop("args", (1, 1.0, 1.0)), **kw)


BAD_LAUNCHES = [  # (call on pack<int, float, double>, error, message)
    (_call(stream=RaisingProperty("ptr")), ArgumentTypeError,
     r"stream: got RaisingProperty, and reading its \.ptr raised RuntimeError: stream was "
     r"destroyed"),
    (_call(stream=RaisingProperty("cuda_stream")), ArgumentTypeError,
     r"stream: got RaisingProperty, and reading its \.cuda_stream raised RuntimeError"),
    (_call(stream=ProtocolStream(ValueError("no context"))), ArgumentTypeError,
     r"stream: got ProtocolStream, and calling its __cuda_stream__\(\) raised ValueError: "
     r"no context"),
    (_call(stream=ProtocolStream(7)), ArgumentTypeError,
     r"__cuda_stream__\(\) returned 7, not a \(version, handle\) pair of ints"),
    (_call(stream=ProtocolStream((0,))), ArgumentTypeError,
     r"__cuda_stream__\(\) returned \(0,\), not a \(version, handle\) pair"),
    (_call(stream=ProtocolStream((0, "s"))), ArgumentTypeError,
     r"__cuda_stream__\(\) returned \(0, 's'\), not a \(version, handle\) pair"),
    (_call(stream=ProtocolStream((0, -1))), ArgumentValueError,
     r"stream handle from __cuda_stream__\(\) -1 is not a CUstream"),
    (_call(stream=ProtocolStream((0, HUGE))), ArgumentValueError,
     r"stream handle from __cuda_stream__\(\) <int of 16610 bits> is not a CUstream"),
    (_call(stream=types.SimpleNamespace(ptr=1.5)), ArgumentTypeError,
     r"stream: got SimpleNamespace, whose \.ptr is float 1\.5, not a CUstream handle"),
    (_call(stream=types.SimpleNamespace(ptr=HUGE)), ArgumentValueError,
     r"stream \.ptr <int of 16610 bits> is not a CUstream"),
    (_call(stream=HUGE), ArgumentValueError, r"stream handle <int of 16610 bits> is not"),
    (_call(stream=-HUGE), ArgumentValueError, r"stream handle <int of 16610 bits> is not"),
    (_call(grid=(HUGE,)), ArgumentValueError,
     r"a grid dimension of <int of 16610 bits> is more than a launch can take"),
    (_call(grid=(1, -HUGE)), ArgumentValueError,
     r"every grid dimension must be at least 1, got \(1, <int of 16610 bits>\)"),
    (_call(block=HUGE), ArgumentValueError, r"a block dimension of <int of 16610 bits>"),
    (_call(block=[HUGE, 1, 1]), ArgumentValueError, r"a block dimension of <int of 16610 bits>"),
    (_call(shared_mem=HUGE), ArgumentValueError,
     r"shared_mem must be from 0 to 4294967295 bytes, got <int of 16610 bits>"),
    (_call(shared_mem=-HUGE), ArgumentValueError, r"got <int of 16610 bits>"),
    (_call(args=(HUGE, 1.0, 1.0)), ArgumentValueError,
     r"parameter 0 \(int\): <int of 16610 bits> does not fit in int"),
    (_call(args=(-HUGE, 1.0, 1.0)), ArgumentValueError,
     r"parameter 0 \(int\): <int of 16610 bits> does not fit in int"),
    (_call(args=(np.int64(1), 1.0, HUGE)), ArgumentValueError,
     r"parameter 2 \(double\): <int of 16610 bits> does not fit in double"),
]


@pytest.mark.parametrize("call, error, message", BAD_LAUNCHES,
                         ids=[f"case{i}" for i in range(len(BAD_LAUNCHES))])
def test_misbehaving_streams_and_huge_values_are_argument_errors(mod, call, error, message):
    # this machine has no GPU: each check must come before the device is asked
    with pytest.raises(error, match=r"^pack<int, float, double>: .*" + message) as info:
        call(mod["pack<int, float, double>"])
    if "raised" in message:  # the user's exception stays attached
        assert info.value.__cause__ is not None


@pytest.mark.parametrize("expr", ["fill<float>", "fill<bool>", "fill<unsigned char>", "c_kernel",
                                  "pack<int, float, double>", "shift<int, 0x10>"])
def test_a_huge_int_for_any_integer_slot_says_so(mod, expr):
    """Every integer, bool and 4-byte extern "C" slot of each kernel, given an int past the
    digit limit: the error names the slot and the value by its size (no launch)."""
    k = mod[expr]
    slots = [s for s in k.params if s.kind in (SlotKind.INT, SlotKind.BOOL)
             or s.kind is SlotKind.UNTYPED and s.size == 4]
    assert slots
    for spec in slots:
        values = [None if s.kind is SlotKind.POINTER
                  or s.kind is SlotKind.UNTYPED and s.size == 8 else np.int32(1) if s.kind is SlotKind.UNTYPED else 1 for s in k.params]
        # a 4-byte slot without types refuses any Python int (int or float?), by its size too
        error, said = ((ArgumentTypeError, r": got the Python int <int of 16610 bits> for a")
                       if spec.kind is SlotKind.UNTYPED else
                       (ArgumentValueError, r": <int of 16610 bits> does not fit"))
        for huge in (HUGE, -HUGE):
            values[spec.index] = huge
            with pytest.raises(error, match=re.escape(spec.describe()) + said):
                pack_args(k.name_expression, k.params, values)
            with StandInDevice().attached() as dev, pytest.raises(error):
                fresh(k)((1,), (1,), tuple(values))
            assert not dev.launches


def _foreign_kernel(ctypes_: list[str], sizes: list[int]) -> Kernel:
    """A kernel as a foreign CUBIN may describe it: its parameter records and signature."""
    from cudamagic.cxx import Signatures
    from cudamagic.toolchain.binary.image import Param

    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    image = types.SimpleNamespace(symbol="_Z1kv", resources=None, params=tuple(
        Param(i, o, n) for i, (o, n) in enumerate(zip(offsets, sizes))))
    text = f"void k({', '.join(ctypes_)})"
    return Kernel(binary=None, name_expression="k", symbol="_Z1kv", python_name="k",
                  signatures=Signatures({"_Z1kv": text}, False), resolved_by="demangled",
                  image=image)


@pytest.mark.parametrize("ctype", ["float*", "void*", "double const*", "int*__restrict__",
                                   "complex<float>*"])
@pytest.mark.parametrize("size", [1, 2, 4, 16])
def test_a_pointer_record_of_another_size_is_refused(ctype, size):
    """A foreign CUBIN whose record gives a pointer 4 bytes: the address would be cut to its
    low half; refused, by the launch and by the checked path, naming the parameter."""
    k = _foreign_kernel(["int", ctype], [4, size])
    assert k.params[1].kind is SlotKind.POINTER
    message = (r"^k: parameter 1 \(.*\): the CUBIN's record gives this pointer "
               rf"{size} bytes, not 8: a device address would be cut")
    with StandInDevice().attached() as dev, pytest.raises(LaunchError, match=message):
        k((1,), (1,), (1, CupyArrayStandIn(k.params[1].dtype or "f4", 0x7F0012345678)))
    assert not dev.launches
    with pytest.raises(LaunchError, match=message):
        pack_args("k", k.params, (1, None))


# --- cupy.cuda.MemoryPointer for a pointer (issue 19 item 5) -----------------------------------

def _memory_pointer(address: int, device: int = 0, offset: int = 0):
    import cupy

    memory = cupy.cuda.UnownedMemory(address, 4096, None, device_id=device)
    return cupy.cuda.MemoryPointer(memory, offset)


@pytest.mark.parametrize("expr, args, slot", [
    ("fill<float>", lambda p: (p, 1.0, 4), 0),
    ("cast<float, double>", lambda p: (DeviceArray("f4"), p, 4), 1),  # double*: untyped memory
    ("vec<float4>", lambda p: (bytes(16), p), 1),
    ("c_kernel", lambda p: (p, np.int32(4)), 0),  # extern "C": an 8-byte slot
])
def test_a_memory_pointer_is_its_address_for_any_pointer(mod, expr, args, slot):
    """As CuPy's RawKernel takes it: untyped device memory for any pointer, its address (with
    the pointer's offset) in the slot, through the checked path and the generated launcher."""
    p = _memory_pointer(0x7F0000400000, offset=0x30)
    want = (0x7F0000400030).to_bytes(8, "little")
    k = mod[expr]
    assert pack_args(expr, k.params, args(p))[slot] == want
    with StandInDevice().attached() as dev:
        kern = fresh(k)
        kern((1,), (32,), args(p))
        kern((1,), (32,), args(p))  # the launcher's later calls too
    assert [launch.params[slot] for launch in dev.launches] == [want, want]


def test_a_memory_pointer_on_another_device_is_refused(mod, monkeypatch):
    monkeypatch.setattr(driver, "available", lambda: True)
    monkeypatch.setattr(driver, "current_device", lambda: 0)
    with pytest.raises(ArgumentValueError, match=r"fill<float>: parameter 0 \(float\*\): got a "
                       r"MemoryPointer to memory on device 1, and the launch is on device 0: "
                       r"launch inside `with cupy.cuda.Device\(1\):`"):
        _pack(mod, "fill<float>", _memory_pointer(0x7F0000400000, device=1), 1.0, 4)
    assert _pack(mod, "fill<float>", _memory_pointer(0x7F0000400000, device=0), 1.0, 4)[0] == \
        (0x7F0000400000).to_bytes(8, "little")


def test_a_memory_pointer_is_no_value_for_a_narrow_slot(mod):
    with pytest.raises(ArgumentTypeError, match=r"c_kernel: parameter 1 \(4 bytes, no C\+\+ "
                       r"type\): got a device array for a 4-byte parameter: pointers are 8"):
        _pack(mod, "c_kernel", DeviceArray("f4"), _memory_pointer(0x7F0000400000))


# --- the kernel object: what its names say (issue 18 item 3) -----------------------------------

def test_a_kernel_stays_a_kernel_and_names_its_module_and_binary(mod):
    k = fresh(mod["fill<float>"])
    with StandInDevice().attached():
        k((1,), (32,), (CupyArrayStandIn("f4"), 1.0, 1))
    assert type(k) is Kernel  # no class made per kernel on its first launch
    assert k.__call__.__func__.__name__ == "launch_kernel"  # the generated launcher, bound
    original = mod["fill<float>"]
    assert original.module is mod and original.binary is mod._binary
    assert fresh(original).module is None  # a kernel made on its own belongs to no module


# --- cooperative and cluster launches (issue 19 item 2): the path taken, the refusals ----------

LAUNCH_KINDS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void plain(int* x, int n) { if (n) x[0] = 1; }
extern "C" __global__ void grid_sum(int* x, int n) {
  cg::grid_group g = cg::this_grid(); atomicAdd(x, n); g.sync(); x[1] = x[0]; }
extern "C" __global__ void block_only(int* x, int n) { cg::this_thread_block().sync(); x[0] = n; }
extern "C" __global__ void __cluster_dims__(2, 1, 1) paired(int* x, int n) { x[0] = n; }
extern "C" __global__ void __cluster_dims__() any_cluster(int* x, int n) { x[0] = n; }
"""


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """Kernels built by NVRTC for sm_90: their CUBIN says which launch each needs."""
    return cudamagic.build(LAUNCH_KINDS, [], arch="sm_90",
                           cache=tmp_path_factory.mktemp("kinds"))


def _launched(k: Kernel, *calls, dev: StandInDevice | None = None) -> list[Launch]:
    dev = dev or StandInDevice()
    with dev.attached():
        kern = fresh(k)
        for grid, block, kw in calls:
            kern(grid, block, (None, 3), **kw)
    return dev.launches


def test_the_cubin_chooses_the_launch(kinds):
    """grid sync -> cooperative without being asked; __cluster_dims__ -> cuLaunchKernelEx (the
    shape is the kernel's); block-level sync and plain kernels -> cuLaunchKernel."""
    assert kinds["grid_sum"].launch_needs.grid_sync and not kinds["block_only"].launch_needs.grid_sync
    got = {name: [(x.api, x.cooperative, x.cluster) for x in
                  _launched(kinds[name], ((4,), (32,), {}), ((4,), (32,), {}))]
           for name in ("plain", "grid_sum", "block_only", "paired")}
    assert got == {"plain": [("cuLaunchKernel", False, None)] * 2,
                   "grid_sum": [("cuLaunchKernelEx", True, None)] * 2,
                   "block_only": [("cuLaunchKernel", False, None)] * 2,
                   "paired": [("cuLaunchKernelEx", False, None)] * 2}


def test_a_call_asks_for_clusters_or_a_cooperative_launch(kinds):
    calls = [((4,), (32,), {"cluster": (2, 1, 1)}), ((4,), (32,), {"cluster": 4}),
             ((4,), (32,), {"cooperative": True}), ((4,), (32,), {}),
             ((4, 2), (32,), {"cluster": [2, 2], "cooperative": True, "shared_mem": 1024})]
    got = [(x.api, x.cooperative, x.cluster, x.shared_mem, x.grid)
           for x in _launched(kinds["plain"], *calls)]
    assert got == [("cuLaunchKernelEx", False, (2, 1, 1), 0, (4, 1, 1)),
                   ("cuLaunchKernelEx", False, (4, 1, 1), 0, (4, 1, 1)),
                   ("cuLaunchKernelEx", True, None, 0, (4, 1, 1)),
                   ("cuLaunchKernel", False, None, 0, (4, 1, 1)),
                   ("cuLaunchKernelEx", True, (2, 2, 1), 1024, (4, 2, 1))]
    # the bytes are the checked path's, whatever the launch
    k = kinds["plain"]
    assert {x.params for x in _launched(k, *calls)} == {tuple(pack_args("plain", k.params,
                                                                        (None, 3)))}
    # cooperative=False overrides what the CUBIN says
    assert [(x.api, x.cooperative) for x in _launched(
        kinds["grid_sum"], ((4,), (32,), {"cooperative": False}))] == [("cuLaunchKernelEx", False)]


@pytest.mark.parametrize("grid, block, shared, per_sm", [
    ((1056,), (256,), 0, 8), ((1057,), (256,), 0, 8), ((33, 32), (16, 16), 4096, 8),
    ((32, 33), (1024,), 0, 2), ((264,), (1024,), 0, 2), ((265, 1, 1), (32, 32), 0, 2),
    ((1,), (1024,), 65536, 0), ((132,), (64,), 0, 1), ((133,), (64,), 0, 1),
])
def test_a_cooperative_grid_larger_than_the_device_holds_is_refused(kinds, grid, block, shared,
                                                                     per_sm):
    """Refused before the launch iff its blocks exceed occupancy x SMs, with the numbers; the
    occupancy asked for this block size and shared memory, once per shape."""
    dev = StandInDevice(per_sm=per_sm)
    blocks, threads = math.prod(grid), math.prod(block)
    fits = blocks <= per_sm * StandInDevice.SMS
    with dev.attached():
        k = fresh(kinds["grid_sum"])
        for _ in range(2):
            if fits:
                k(grid, block, (None, 1), shared_mem=shared)
                continue
            with pytest.raises(LaunchError) as info:
                k(grid, block, (None, 1), shared_mem=shared)
            text = str(info.value)
            assert text.startswith("a cooperative launch of grid_sum (it synchronises its "
                                   f"whole grid) needs every block resident at once: a grid "
                                   f"of {blocks} blocks ")
            assert f"of {threads} threads with {shared} bytes of dynamic shared memory" in text
            if per_sm:
                most = per_sm * StandInDevice.SMS
                assert (f"device 0 (Stand-in GPU, 132 SMs) holds at most {per_sm} such block"
                        in text and f"x 132 SMs = {most}: launch at most {most} blocks" in text)
            else:
                assert "cannot hold even one such block" in text
    assert len(dev.launches) == (2 if fits else 0)
    assert dev.occupancy_asked == [(0, StandInDevice.FUNCTION, threads, shared)]


@pytest.mark.parametrize("name, kw, error, message", [
    ("plain", {"cluster": (3, 1, 1)}, ArgumentValueError,
     r"the grid \(4, 2, 1\) is not a whole number of clusters of \(3, 1, 1\) blocks \(the "
     r"call's cluster\)"),
    ("plain", {"cluster": (1, 4)}, ArgumentValueError, r"clusters of \(1, 4, 1\) blocks"),
    ("paired", {}, None, None),  # (4, 2) is whole pairs
    ("paired", {"cluster": (2, 1, 1)}, None, None),
    ("paired", {"cluster": (4, 1, 1)}, ArgumentValueError,
     r"cluster=\(4, 1, 1\), but the kernel was compiled with __cluster_dims__\(2, 1, 1\)"),
    ("any_cluster", {}, ArgumentValueError,
     r"compiled with __cluster_dims__\(\) and no shape: launch it with cluster=\(x, y, z\)"),
    ("any_cluster", {"cluster": (4, 2)}, None, None),
    ("plain", {"cluster": (0, 1, 1)}, ArgumentValueError, r"every cluster dimension must be at "
                                                           r"least 1"),
    ("plain", {"cluster": "2"}, ArgumentTypeError, r"cluster must be an int or a tuple of 1 to "
                                                    r"3 ints, got '2'"),
    ("plain", {"cooperative": 1}, ArgumentTypeError, r"cooperative must be True, False or None"),
    ("plain", {"cluster": (HUGE,)}, ArgumentValueError, r"a cluster dimension of <int of 16610 "
                                                         r"bits>"),
])
def test_cluster_shapes_are_checked_before_the_launch(kinds, name, kw, error, message):
    dev = StandInDevice()
    if error is None:
        _launched(kinds[name], ((4, 2), (32,), kw), dev=dev)
        assert len(dev.launches) == 1 and dev.launches[0].api == "cuLaunchKernelEx"
        return
    with pytest.raises(error, match=f"^{name}: .*{message}"):
        _launched(kinds[name], ((4, 2), (32,), kw), dev=dev)
    assert not dev.launches


def test_a_device_without_clusters_says_so(kinds):
    with pytest.raises(LaunchError, match=r"plain: device 0 \(Stand-in GPU, 132 SMs\) cannot "
                       r"launch thread-block clusters \(they need compute capability 9.0"):
        _launched(kinds["plain"], ((4,), (32,), {"cluster": 2}), dev=StandInDevice(clusters=False))


@pytest.mark.skipif(driver.available(), reason="this machine has a GPU")
def test_extended_launch_arguments_are_checked_before_the_device(kinds):
    # no GPU here: a check made after the device lookup would raise NoDeviceError
    with pytest.raises(ArgumentTypeError, match="cluster must be"):
        kinds["plain"]((4,), (32,), (None, 1), cluster=2.0)
    with pytest.raises(NoDeviceError):
        kinds["grid_sum"]((4,), (32,), (None, 1))


def test_a_kernel_carries_a_function_name_for_function_tools(mod):
    """cupyx.profiler.benchmark and other function tools name what they time by ``__name__``."""
    for kernel in mod.kernels.values():
        assert kernel.__name__ == kernel.python_name and kernel.__qualname__ == kernel.python_name


def test_another_thread_passes_cluster_and_cooperative_on(kinds):
    """A thread other than the launcher's goes to its own launcher with every keyword."""
    import threading

    dev = StandInDevice()
    with dev.attached():
        k = fresh(kinds["plain"])
        k((4,), (32,), (None, 3))
        t = threading.Thread(target=lambda: k((4,), (32,), (None, 3), cluster=2,
                                              cooperative=True))
        t.start()
        t.join()
    assert [(x.api, x.cluster, x.cooperative) for x in dev.launches] == [
        ("cuLaunchKernel", None, False), ("cuLaunchKernelEx", (2, 1, 1), True)]


def test_static_and_dynamic_shared_memory_together_raise_the_limit(tmp_path):
    """The driver's 48 KiB default counts a block's static ``__shared__`` arrays with its dynamic
    shared memory: 40 KiB static + 16 KiB dynamic must raise the kernel's limit, 4 KiB need not."""
    src = ('extern "C" __global__ void tile(float* out) {\n'
           '  __shared__ float t[10240]; extern __shared__ float d[];\n'
           '  t[threadIdx.x] = d[threadIdx.x]; out[threadIdx.x] = t[threadIdx.x ^ 1]; }\n')
    k = cudamagic.build(src, cache=str(tmp_path / "cache"))["tile"]
    assert k.resources.static_shared_bytes == 40 * 1024
    assert k.dynamic_shared_default == 8 * 1024
    dev = StandInDevice()
    with dev.attached():
        k = fresh(k)
        k((1,), (32,), (None,), shared_mem=4096)
        k((1,), (32,), (None,), shared_mem=16384)
    assert dev.shared_limits == [(0, 16384)]


# the call's grid and cluster -> what a machine without a GPU says (every argument error
# before the device: the device question comes last)
CLUSTER_CALLS = {
    "a cluster that does not divide the grid": (((4,), (3, 1, 1)), ArgumentValueError,
                                                 "not a whole number of clusters"),
    "a 2-D cluster that does not divide the grid": (((4, 2), (2, 3)), ArgumentValueError,
                                                    "not a whole number of clusters"),
    "a cluster dimension of 0": (((4,), (0, 1, 1)), ArgumentValueError, "at least 1"),
    "a cluster that is text": (((4,), "x"), ArgumentTypeError, "cluster must be an int"),
    "a cluster that divides the grid": (((4,), (2, 1, 1)), NoDeviceError, "no CUDA device"),
}


@pytest.mark.parametrize("case", list(CLUSTER_CALLS))
def test_cluster_argument_errors_come_before_the_device_question(tmp_path, no_gpu, case):
    """A cluster that does not divide the grid was said only as NoDeviceError without a GPU."""
    (grid, cluster), error, words = CLUSTER_CALLS[case]
    k = cudamagic.build('extern "C" __global__ void k(int n) {}\n', cache=tmp_path)["k"]
    with pytest.raises(error, match=words):
        k(grid, (32,), (1,), cluster=cluster)


# --- cupy names ---
# CuPy's names for a kernel's facts: code ported from CuPy reads ``k.attributes["num_regs"]``,
# ``k.num_regs``, ``k.max_threads_per_block``, ``k.name``. Without a GPU the CUBIN's values
# answer under both names; what only a device knows raises NoDeviceError saying so; on a GPU the
# keys and values are CuPy's own RawKernel's for the same source (a gpu test).
import pickle

import pytest

import cudamagic
from cudamagic.errors import NoDeviceError
from cudamagic.launch.attributes import CUPY_NAMES, DEVICE_ONLY
from cudamagic.toolchain.device import driver

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


def test_a_loaded_cubins_extern_c_kernel_says_its_signature_as_its_report_row(tmp_path):
    """A new user's finding: a CUBIN loaded from elsewhere (no source, no type probe) showed
    'void fill(8 bytes, 4 bytes, 4 bytes)' in its report row and 'void fill' as the kernel's
    signature. Both are the CUBIN's parameter sizes now."""
    built = cudamagic.build('extern "C" __global__ void fill(float* x, float v, int n) '
                            "{ x[0] = v; }\n", arch="sm_90", cache=tmp_path / "a")
    loaded = cudamagic.load_cubin(built.cubin, arch="sm_90", cache=tmp_path / "b")
    (row,) = loaded.report.rows
    assert loaded["fill"].signature == row.signature == "void fill(8 bytes, 4 bytes, 4 bytes)"
    assert built["fill"].signature == "void fill(float*, float, int)"  # the probe's types
