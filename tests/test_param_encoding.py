"""Every value reaches the kernel exactly, on every path, or is refused alike (issue 14).

For each parameter type of a real kernel (compiled here by the real NVRTC: real parameter
records and signatures) and values drawn from the type's whole range, edges included, in Python
and NumPy forms: the bytes the checked path gives (:func:`encode`, :func:`pack_args`) and the
bytes the generated launcher hands the driver on a kernel's first call and on a later call all
equal what an independent oracle says the kernel must receive (``np.array(v, dtype).tobytes()``
where NumPy has the type); a value that does not fit is refused by every path with the same
error, naming the parameter, and nothing is launched. The device side of a launch is a stand-in
(tests/test_kernel.py's StandInDevice); tests/test_gpu.py runs the same cases on a GPU.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="hypothesis is not installed (pip install hypothesis)")
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cudamagic
from cudamagic.errors import ArgumentTypeError, ArgumentValueError, NoDeviceError
from cudamagic.launch.encode import encode, pack_args
from cudamagic.launch.kernel import Kernel
from cudamagic.launch.params import SlotKind
from cudamagic.toolchain.binary.ptx import PtxParam, PtxType, entry_params

from .conftest import FIXTURES
from .test_kernel import (COMPLEX, ECHO_EXPRS, ECHO_SOURCE, FLOATS, INT128,
                          INTEGERS, UNTYPED, CupyArrayStandIn, CupyStreamStandIn,
                          DeviceArray, StandInDevice, fresh, oracle, untyped_oracle)

NUMPY_INTS = [np.dtype(c) for c in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8")]
NUMPY_FLOATS = [np.dtype(c) for c in ("f2", "f4", "f8", "g")]
SETTINGS = settings(max_examples=120, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    return cudamagic.build(ECHO_SOURCE, ECHO_EXPRS, cache=tmp_path_factory.mktemp("echo"))


@pytest.fixture(scope="module")
def foreign_echo(echo):
    """The same CUBIN without its source: its extern "C" kernels have no declared types."""
    return cudamagic.load_cubin(echo.cubin)


# --- every path ------------------------------------------------------------------------------------

def out_array(expr: str, k: Kernel) -> CupyArrayStandIn:
    """A device array the echo kernel's ``T* out`` takes (the pointee's dtype, or bytes)."""
    pointee = k.params[1].dtype
    return CupyArrayStandIn(pointee if pointee is not None else "u1", ptr=0x7F00DEAD0000)


def check_every_path(k: Kernel, value: Any, want: bytes | type[Exception]) -> None:
    """The checked path, and a fresh kernel's first and second launch, against ``want``."""
    name, spec = k.name_expression, k.params[0]
    args = (value, out_array(name, k))
    dev = StandInDevice()
    with dev.attached():
        launcher = fresh(k)
        if isinstance(want, bytes):
            assert encode(name, spec, value) == want, value
            assert pack_args(name, k.params, args)[0] == want, value
            launcher((1,), (32,), args)  # the first call makes the launcher
            launcher((2, 2), (8, 4), args, stream=CupyStreamStandIn(5))  # a later call
            assert [launch.params[0] for launch in dev.launches] == [want, want], value
            return
        message = rf"{name}: parameter 0 \("
        with pytest.raises(want, match=message):
            encode(name, spec, value)
        with pytest.raises(want, match=message):
            pack_args(name, k.params, args)
        for _ in range(2):  # first call, later call
            with pytest.raises(want, match=message):
                launcher((1,), (32,), args)
        assert dev.launches == []


# --- strategies ------------------------------------------------------------------------------------

def _ints_around(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [lo, hi, lo - 1, hi + 1, lo + 1, hi - 1, 0, 1, -1, 2**31, 2**32 + 5, -2**63, 2**63 - 1,
             2**63, 2**64 - 1, 2**64, -2**63 - 1]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi),
                     st.integers(lo - 2**70, hi + 2**70))


def _numpy_int(v: int) -> st.SearchStrategy[Any]:
    holds = [d for d in NUMPY_INTS if np.iinfo(d).min <= v <= np.iinfo(d).max]
    if not holds:
        return st.just(v)
    return st.sampled_from(holds).map(lambda d: np.array(v, d)[()])


def _bits(dtype: np.dtype) -> st.SearchStrategy[np.generic]:
    """Any bit pattern of a NumPy float dtype: every NaN payload, subnormal, infinity; the
    signalling and payload-carrying NaNs among the edges (a widening to double quiets them)."""
    n, nmant = dtype.itemsize, np.finfo(dtype).nmant
    sign, inf = 1 << (8 * n - 1), ((1 << (8 * n - 1)) - 1) & ~((1 << nmant) - 1)
    quiet = inf | (1 << (nmant - 1))
    nans = [inf | 1, inf | ((1 << (nmant - 1)) - 1), inf | 0x15, quiet, quiet | 0x2A]
    edges = [0, 1, (1 << (8 * n)) - 1, sign, inf, sign | inf, *nans, *(sign | b for b in nans)]
    return st.one_of(st.integers(0, (1 << (8 * n)) - 1), st.sampled_from(edges)).map(
        lambda b: np.frombuffer(b.to_bytes(n, "little"), dtype)[0])


def _float_edges(dtype: np.dtype) -> list[float]:
    fi = np.finfo(dtype)
    big = float(fi.max)
    ulp = big - float(np.nextafter(dtype.type(fi.max), dtype.type(0)))
    return [big, -big, big + ulp / 2, big + ulp / 4, float(fi.tiny), float(fi.smallest_subnormal),
            float(fi.smallest_subnormal) / 2, float(fi.smallest_subnormal) * 0.75, 0.0, -0.0,
            math.inf, -math.inf, math.nan, 1 / 3, 0.1, 2.0**24 + 1, 1e308, 5e-324]


def _python_floats(dtype: np.dtype) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(_float_edges(dtype)), st.floats(),
                     st.floats(-float(np.finfo(dtype).max) * 2, float(np.finfo(dtype).max) * 2))


def _quiet(f, *args):
    with np.errstate(all="ignore"):  # drawing values past a type's range is the point
        return f(*args)


def _other_numpy_floats() -> st.SearchStrategy[np.generic]:
    return st.sampled_from(NUMPY_FLOATS).flatmap(
        lambda d: st.one_of(_bits(d) if d.itemsize <= 8 else st.floats().map(np.longdouble),
                            st.floats().map(lambda f, d=d: _quiet(np.array, f, d)[()])))


# --- the property tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("expr", list(INTEGERS))
@SETTINGS
@given(data=st.data())
def test_integers_and_bools_reach_the_kernel_exactly(echo, expr, data):
    k, code = echo[expr], INTEGERS[expr]
    dtype = np.dtype(code)
    lo, hi = (0, 1) if code == "?" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    v = data.draw(_ints_around(lo, hi))
    form = data.draw(st.sampled_from(["python", "exact", "numpy", "0-d", "bool", "float"]))
    if form == "exact":
        assume(lo <= v <= hi)
        value = np.array(v, dtype)[()]
    elif form == "numpy":
        value = data.draw(_numpy_int(v))
    elif form == "0-d":
        value = np.array(data.draw(_numpy_int(v)))
    elif form == "bool":
        value = data.draw(st.sampled_from([True, False, np.True_, np.False_]))
    elif form == "float":
        value = data.draw(st.one_of(st.floats(), _other_numpy_floats()))
    else:
        value = v
    check_every_path(k, value, oracle(code, value))


@pytest.mark.parametrize("expr", list(INT128))
@SETTINGS
@given(data=st.data())
def test_128_bit_integers_reach_the_kernel_exactly(echo, expr, data):
    k, code = echo[expr], INT128[expr]
    lo, hi = (-(1 << 127), (1 << 127) - 1) if code == "i16" else (0, (1 << 128) - 1)
    v = data.draw(_ints_around(lo, hi))
    form = data.draw(st.sampled_from(["python", "numpy", "float"]))
    value = data.draw(_numpy_int(v)) if form == "numpy" else (
        data.draw(st.floats()) if form == "float" else v)
    check_every_path(k, value, oracle(code, value))


@pytest.mark.parametrize("expr", list(FLOATS))
@SETTINGS
@given(data=st.data())
def test_floats_reach_the_kernel_exactly(echo, expr, data):
    k, code = echo[expr], FLOATS[expr]
    dtype = np.dtype(code)
    form = data.draw(st.sampled_from(["python", "exact", "numpy", "int", "numpy-int", "0-d"]))
    if form == "python":
        value = data.draw(_python_floats(dtype))
    elif form == "exact":
        value = data.draw(_bits(dtype))
    elif form == "numpy":
        value = data.draw(_other_numpy_floats())
    elif form == "int":
        value = data.draw(st.one_of(st.integers(), st.integers(-2**1100, 2**1100),
                                    st.sampled_from([2**53 + 1, 2**60 + 2**36 + 1, 65520, 65519,
                                                     True])))
    elif form == "numpy-int":
        value = data.draw(st.integers(-2**63, 2**64 - 1).flatmap(_numpy_int))
    else:
        value = np.array(data.draw(_bits(dtype)))
    check_every_path(k, value, oracle(code, value))


@pytest.mark.parametrize("expr", list(COMPLEX))
@SETTINGS
@given(data=st.data())
def test_complex_values_reach_the_kernel_exactly(echo, expr, data):
    k, code = echo[expr], COMPLEX[expr]
    value = data.draw(st.one_of(
        st.complex_numbers(), st.floats(), st.integers(-2**70, 2**70),
        st.sampled_from([np.complex64, np.complex128]).flatmap(
            lambda t: st.complex_numbers().map(lambda z, t=t: _quiet(t, z))),
        _other_numpy_floats(), st.just(complex(3.5e38, 1)), st.just(np.complex128(0.1 + 0.5j))))
    check_every_path(k, value, oracle(code, value))


@SETTINGS
@given(data=st.data())
def test_bfloat16_rounds_python_numbers_and_takes_exact_numpy_ones(echo, data):
    k = echo["echo<__nv_bfloat16>"]
    form = data.draw(st.sampled_from(["python", "float32", "numpy", "raw", "int"]))
    if form == "python":
        value = data.draw(st.one_of(st.floats(), st.sampled_from([
            3.3895313892515355e38, 3.3961775292304019e38, 3.39617752923e38 * 1.0000001,
            1.00390625, 1.01171875, 1.005859375, 9.183549615799121e-41, 4.591774807899561e-41,
            2.0**-134, 2.0**-133 * 1.5, -0.0, math.nan, math.inf])))
    elif form == "float32":
        value = data.draw(_bits(np.dtype("f4")))
    elif form == "numpy":
        value = data.draw(_other_numpy_floats())
    elif form == "raw":
        value = data.draw(st.binary(min_size=2, max_size=2))
    else:
        value = data.draw(st.integers(-2**140, 2**140))
    check_every_path(k, value, oracle("bf16", value))


def test_bfloat16_from_a_python_float_is_round_to_nearest_even(echo):
    k = echo["echo<__nv_bfloat16>"]
    cases = {1.0: 0x3F80, 1.00390625: 0x3F80, 1.01171875: 0x3F82, 1.005859375: 0x3F81,
             -2.5: 0xC020, 3.3895313892515355e38: 0x7F7F, 2.0**-133: 0x0001, 2.0**-134: 0x0000,
             2.0**-134 * 1.5: 0x0001, math.inf: 0x7F80, -0.0: 0x8000}
    for x, bits in cases.items():
        assert encode(k.name_expression, k.params[0], x) == bits.to_bytes(2, "little"), x
    with pytest.raises(ArgumentValueError, match="does not fit in __nv_bfloat16"):
        encode(k.name_expression, k.params[0], 3.4e38)
    with pytest.raises(ArgumentValueError, match="is not exactly a bfloat16"):
        encode(k.name_expression, k.params[0], np.float32(0.1))


@pytest.mark.parametrize("expr", list(UNTYPED))
@SETTINGS
@given(data=st.data())
def test_extern_c_slots_take_values_by_size(foreign_echo, expr, data):
    k, size = foreign_echo[expr], UNTYPED[expr]
    assert k.params[0].kind is SlotKind.UNTYPED and k.params[0].size == size
    value = data.draw(st.one_of(
        _ints_around(-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if size <= 8
        else st.integers(), st.booleans(),
        _python_floats(np.dtype(f"f{size}") if size in (2, 4, 8) else np.dtype("f8")),
        st.integers(-2**63, 2**64 - 1).flatmap(_numpy_int), _bits(np.dtype("f2")),
        _bits(np.dtype("f4")), _bits(np.dtype("f8"))))
    check_every_path(k, value, untyped_oracle(size, value))


@pytest.mark.parametrize("expr, nbytes", [("echo<Pair>", 16), ("echo<float4>", 16),
                                           ("echo<int2>", 8)])
@SETTINGS
@given(data=st.data())
def test_structs_by_value_take_their_bytes(echo, expr, nbytes, data):
    k = echo[expr]
    raw = data.draw(st.binary(min_size=0, max_size=24))
    form = data.draw(st.sampled_from(["bytes", "numpy"]))
    value = raw if form == "bytes" else np.frombuffer(raw, np.uint8).copy()
    want = raw if len(raw) == nbytes else ArgumentValueError
    check_every_path(k, value, want)


@SETTINGS
@given(ptr=st.integers(0, 2**64 - 1), direct=st.booleans())
def test_pointers_reach_the_kernel_exactly(echo, ptr, direct):
    """A data pointer anywhere in the address space, read straight off a CuPy array (the
    launcher's fast branch) or through ``__cuda_array_interface__`` (the converter)."""
    k = echo["echo<int>"]
    out = CupyArrayStandIn("i4", ptr)
    if not direct:
        out = type("CudaArray", (), {"__cuda_array_interface__": out.__cuda_array_interface__})()
    dev = StandInDevice()
    with dev.attached():
        launcher = fresh(k)
        launcher((1,), (1,), (7, out))
        launcher((1,), (1,), (7, out))
    want = ptr.to_bytes(8, "little")
    assert pack_args(k.name_expression, k.params, (7, out))[1] == want
    assert [launch.params[1] for launch in dev.launches] == [want, want]


@pytest.mark.parametrize("expr", ["echo8", "echo<float>"])
def test_a_pointer_past_the_address_space_is_refused_by_every_path(echo, expr):
    k = echo[expr]
    for ptr in (-1, 2**64, 2**70):
        out = type("CudaArray", (), {"__cuda_array_interface__": {
            "data": (ptr, False), "typestr": "<f4", "shape": (1,), "version": 3}})()
        args = (1, out)
        with pytest.raises(ArgumentValueError, match=r"parameter 1 .* is not a device address"):
            pack_args(k.name_expression, k.params, args)
        dev = StandInDevice()
        with dev.attached():
            launcher = fresh(k)
            for _ in range(2):
                with pytest.raises(ArgumentValueError, match="is not a device address"):
                    launcher((1,), (1,), args)
        assert dev.launches == []


def test_the_table_is_what_the_cubin_and_signature_say(echo):
    """One row per parameter, with the CUBIN's offset and size and the type's range."""
    rows = {e: echo[e].params[0] for e in ECHO_EXPRS}
    assert rows["echo<long long>"].size == 8 and rows["echo<long long>"].code == "q"
    assert (rows["echo<unsigned long long>"].lo, rows["echo<unsigned long long>"].hi) == \
        (0, 2**64 - 1)
    assert rows["echo<size_t>"].ctype == "unsigned long" and rows["echo<size_t>"].code == "Q"
    assert rows["echo<char>"].lo == -128  # char is signed on Linux
    assert rows["echo<__nv_bfloat16>"].kind is SlotKind.BFLOAT16
    assert rows["echo<float4>"].kind is SlotKind.VALUE and rows["echo<Pair>"].size == 16
    assert rows["echo<complex<double>>"].kind is SlotKind.COMPLEX
    for e in ECHO_EXPRS:  # a direct type's struct code always packs the slot's size
        for typ, code in rows[e].direct:
            assert struct.calcsize("<" + code) == rows[e].size, (e, typ, code)


@pytest.mark.parametrize("expr", ["echo4", "echo8"])
def test_an_extern_c_slot_takes_every_accepted_type_after_its_first_call(foreign_echo, expr):
    """The launcher packs an ``extern "C"`` slot fastest for the first call's type (a C
    parameter has one type); every other type still reaches it exactly, through the checked
    path."""
    k, size = foreign_echo[expr], UNTYPED[expr]
    values = [1.5, 7, np.float32(2.5), np.int32(-3), np.uint32(5), True, -1, 0.1,
              np.float64(0.25), np.int64(-2**40), np.uint64(2**64 - 1), 2**40]
    out = CupyArrayStandIn("u1")
    for first in values:
        dev = StandInDevice()
        with dev.attached():
            launcher = fresh(k)
            accepted = [v for v in [first, *values] if isinstance(untyped_oracle(size, v), bytes)]
            for v in accepted:
                launcher((1,), (1,), (v, out))
        assert [launch.params[0] for launch in dev.launches] == \
            [untyped_oracle(size, v) for v in accepted], first


# CuPy's RawKernel behaviours for code from other projects (issue 29 items 1-4; from test_parity_more.py):
# everything up to the launch runs here, the launches with exact results are gpu-marked.

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


@pytest.mark.usefixtures("no_gpu")  # the device check, as without a GPU
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


@pytest.mark.usefixtures("no_gpu")  # the device check, as without a GPU
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
