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
from cudamagic.errors import ArgumentValueError
from cudamagic.launch.encode import encode, pack_args
from cudamagic.launch.kernel import Kernel
from cudamagic.launch.params import SlotKind

from .test_kernel import (COMPLEX, ECHO_EXPRS, ECHO_SOURCE, FLOATS, INT128,
                          INTEGERS, UNTYPED, CupyArrayStandIn, CupyStreamStandIn,
                          StandInDevice, fresh, oracle, untyped_oracle)

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
