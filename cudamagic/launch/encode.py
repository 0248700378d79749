"""The checked path: any accepted value to the exact bytes its parameter receives, or an error.

:func:`encode` / :func:`pack_args` take every value a parameter accepts (:mod:`.params` says
which) to its bytes, or raise a :class:`~cudamagic.errors.ArgumentError` that names the
parameter and says what to pass. Python numbers take the parameter's own type (``2.0`` to a
``float`` is a float32, ``10`` to an ``int`` an int32); a NumPy scalar converts only where its
value survives exactly; a value that does not fit is an error, never a wrapped or truncated
launch. The launch's grid, block, dynamic shared memory and stream are checked here too, before
the device is asked. The generated launcher (:mod:`.launcher`) gives the same bytes for the
common types and hands every other value to the converter here.
"""

from __future__ import annotations

import ctypes
import math
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ArgumentValueError, NoDeviceError
from ..toolchain.device import driver
from .params import (INT_CODES, POINTER_BYTES, ParamSpec, SlotKind, pointer_size_error, tidy_type,
                     type_text)

__all__ = ["encode", "pack_args", "check_dims", "check_shared_mem", "stream_handle"]

_U32 = 2**32 - 1
_U64 = 2**64 - 1


# --- the checked path: any accepted value -> the exact bytes, or an error that says why ---------

def _fail(kernel: str, spec: ParamSpec, message: str,
          exc: type[ArgumentTypeError] | type[ArgumentValueError] = ArgumentTypeError
          ) -> ArgumentTypeError | ArgumentValueError:
    return exc(f"{kernel}: {spec.describe()}: {message}")


# --- how messages show values and types (only ever on the way to an error) ----------------------

_SHOWN = 60  # a value's text in a message: at most this many characters


def show(value: Any) -> str:
    """A value as a message shows it: its own repr (NumPy 2 writes ``np.float64(0.1)``; NumPy 1's
    bare ``0.1`` gets its type put around it), a long one shortened in the middle with an
    ellipsis, so that its start (the type, the leading digits) and its closing quote or bracket
    stay."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user's __repr__ that raises, an int past the digit limit
        if type(value) in (tuple, list) and len(value) <= 3:  # a grid: each dimension shown
            inner = ", ".join(show(v) for v in value)
            text = f"({inner}{',' if len(value) == 1 else ''})" if type(value) is tuple \
                else f"[{inner}]"
        else:
            bits = f" of {value.bit_length()} bits" if isinstance(value, int) else ""
            text = f"<{type(value).__name__}{bits}>"
    if isinstance(value, np.generic) and not text.startswith("np."):  # NumPy 1
        text = f"np.{type(value).__name__}({text})"
    if len(text) > _SHOWN:
        text = f"{text[:_SHOWN - 20]}...{text[-12:]}"
    return text


def _raised(kernel: str, spec: ParamSpec, value: Any, doing: str,
            exc: Exception) -> ArgumentTypeError | ArgumentValueError:
    """The error for an argument whose own code raised while cudamagic read it (raise it
    ``from exc``: the user's traceback stays attached)."""
    return _fail(kernel, spec, _raised_text(value, doing, exc))


def _raised_text(value: Any, doing: str, exc: Exception) -> str:
    text = str(exc)
    return (f"got {type(value).__name__}, and {doing} raised "
            f"{type(exc).__name__}{': ' + text if text else ''}")


def _exact(x: Any) -> Any:
    """A number as an exact Python value (int or Fraction; inf as a float; NaN as "nan"), so
    that values of different types compare by value."""
    if isinstance(x, (bool, np.bool_, int, np.integer)):
        return int(x)
    if np.isnan(x):  # NumPy's tests: math's would round a long double to a double first
        return "nan"
    if np.isinf(x):
        return float(x)
    return Fraction(*x.as_integer_ratio())


def _numpy_exact(kernel: str, spec: ParamSpec, value: np.generic, dtype: np.dtype) -> np.generic:
    """A NumPy scalar as ``dtype``, where its value survives exactly.

    :raises ArgumentTypeError: a complex for a real, a floating-point value for an integer.
    :raises ArgumentValueError: the value would change (``np.float64(0.1)`` for a ``float``).
    """
    if value.dtype == dtype:
        return value
    src = value.dtype.kind
    if src not in "biufc" or (src == "c" and dtype.kind != "c") \
            or (src in "fc" and dtype.kind in "biu"):
        raise _fail(kernel, spec, f"got a {value.dtype} scalar, which does not convert "
                                  f"safely to {type_text(spec)}: pass a {dtype} value")
    with np.errstate(all="ignore"):
        out = dtype.type(np.array(value, dtype)[()])
    parts = (lambda z: (z.real, z.imag)) if dtype.kind == "c" else (lambda z: (z,))
    if [_exact(p) for p in parts(out)] != [_exact(p) for p in parts(value)]:
        raise _fail(kernel, spec, f"{show(value)} is not exactly a {type_text(spec)} (it "
                                  f"would arrive as {show(out)}): convert it yourself "
                                  f"(np.{dtype}(x)), or pass a Python number to round it",
                    ArgumentValueError)
    return out


def _unwrap(value: Any) -> Any:
    """A 0-d NumPy array as its scalar (NumPy hands these out where a scalar is meant)."""
    if type(value) is np.ndarray and value.ndim == 0:
        return value[()]
    return value


def _cupy_handle(value: Any) -> int | None:
    """The handle a CuPy ``TextureObject`` or ``SurfaceObject`` holds (a
    ``cudaTextureObject_t``/``cudaSurfaceObject_t``: an unsigned 64-bit integer), as CuPy's
    RawKernel passes it; None for any other value (CuPy's module is looked up, never imported)."""
    texture = sys.modules.get("cupy.cuda.texture")
    kinds = tuple(getattr(texture, n, None) for n in ("TextureObject", "SurfaceObject"))
    if texture is None or not all(isinstance(k, type) for k in kinds) \
            or not isinstance(value, kinds):  # type: ignore[arg-type]
        return None
    return int(value.ptr)


def _handle_bytes(kernel: str, spec: ParamSpec, value: Any, handle: int) -> bytes:
    """A texture or surface object for a slot: an 8-byte unsigned one (what the CUDA headers
    make ``cudaTextureObject_t``, ``unsigned long long``), or an 8-byte untyped one."""
    if spec.size == POINTER_BYTES and (spec.lo is None or spec.lo >= 0):
        return handle.to_bytes(POINTER_BYTES, "little")
    raise _fail(kernel, spec, f"got a CuPy {type(value).__name__}, whose handle is a "
                              "cudaTextureObject_t / cudaSurfaceObject_t (unsigned long long, "
                              f"8 bytes), for {type_text(spec)}: declare the parameter so")


def _cupy_mdspan_type() -> type | None:
    """CuPy's ``mdspan`` (``ndarray.mdspan()``), where CuPy is imported."""
    return getattr(sys.modules.get("cupy._core._carray"), "mdspan", None)


def _from_mdspan(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """CuPy's ``ndarray.mdspan()`` for a ``cuda::std::mdspan`` by value: the bytes CuPy made
    for it (the data pointer, then each extent, then each stride in elements, of its index
    type), the slot's size of them, as CuPy's RawKernel hands the kernel that same memory."""
    if spec.ctype is None or not tidy_type(spec.ctype).startswith("cuda::std::mdspan<"):
        raise _fail(kernel, spec, "got a CuPy mdspan (ndarray.mdspan()), which is for a "
                                  "cuda::std::mdspan parameter with dynamic extents and "
                                  "layout_stride; pass the array itself for a pointer")
    return ctypes.string_at(value.ptr, spec.size)


def _to_int(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """An integer or bool parameter: Python ints, bools and NumPy integers, by value; a CuPy
    texture or surface object for an 8-byte unsigned one (its handle)."""
    value = _unwrap(value)
    handle = _cupy_handle(value)
    if handle is not None:
        return _handle_bytes(kernel, spec, value, handle)
    if spec.kind is SlotKind.BOOL and isinstance(value, np.generic) and value.dtype.kind == "b":
        return bytes([bool(value)])
    if isinstance(value, np.generic) and value.dtype.kind not in "biu":
        raise _fail(kernel, spec, f"got a {value.dtype} scalar for an integer parameter: pass "
                                  "an int (int(x) truncates on purpose)")
    if not isinstance(value, (int, np.integer, np.bool_)):
        raise _fail(kernel, spec, f"got {type(value).__name__} {show(value)} for an integer "
                                  "parameter: pass an int (int(x) truncates on purpose)")
    v = int(value)
    if not spec.lo <= v <= spec.hi:  # type: ignore[operator]
        raise _fail(kernel, spec, f"{show(v)} does not fit in {type_text(spec)} [{spec.lo}, "
                                  f"{spec.hi}]",
                    ArgumentValueError)
    # two's complement of the slot's width: a PTX slot of unknown sign takes either range
    return (v % (1 << 8 * spec.size)).to_bytes(spec.size, "little")


def _to_float(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A half, float or double parameter: Python numbers round to it (IEEE round to nearest
    even, as NumPy does); NumPy scalars convert only where their value survives."""
    value, dtype = _unwrap(value), spec.dtype
    assert dtype is not None
    if isinstance(value, np.generic):
        return _numpy_exact(kernel, spec, value, dtype).tobytes()
    if not isinstance(value, (int, float)):
        raise _fail(kernel, spec, f"got {type(value).__name__} {show(value)} for a "
                                  "floating-point parameter: pass a float")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any double
        x = math.inf
    with np.errstate(over="ignore"):
        out = np.array(x, dtype)
    if math.isinf(out) and not (isinstance(value, float) and math.isinf(value)):
        raise _fail(kernel, spec, f"{show(value)} does not fit in {type_text(spec)} (largest "
                                  f"{float(np.finfo(dtype).max)!r})", ArgumentValueError)
    if dtype.itemsize > 2:  # what the generated launcher's struct code gives (NumPy agrees)
        return struct.pack("<" + spec.code, x)
    return out.tobytes()


def _bfloat16_bits(x: float) -> int:
    """The bfloat16 nearest to ``x`` (ties to even), as its 16 bits; exact from the double's
    value (no double rounding through float32). Overflow gives infinity's bits."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return sign | 0x7FC0
    if math.isinf(x) or x == 0:
        return sign | (0x7F80 if x else 0)
    _, e = math.frexp(abs(x))  # |x| in [2**(e-1), 2**e)
    q = max(e - 8, -133)  # the spacing of bfloat16 values there (8 significant bits)
    num, den = abs(x).as_integer_ratio()
    n, rem = divmod(num << max(-q, 0), den << max(q, 0))
    if 2 * rem > den << max(q, 0) or (2 * rem == den << max(q, 0) and n & 1):
        n += 1
    # IEEE layout: subnormals are n itself; a normal n in [128, 256] carries its exponent above
    return sign | min(((q + 133) << 7) + n, 0x7F80)


def _bfloat16_value(bits: int) -> float:
    """The value of bfloat16 bits (bfloat16 is the top half of a float32)."""
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _to_bfloat16(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A ``__nv_bfloat16`` parameter (NumPy has no bfloat16 dtype).

    Python numbers round to the nearest bfloat16 (ties to even) from their exact value; NumPy
    floats and ints convert where exact; 2 raw bytes are taken as the bit pattern; a scalar of a
    ``bfloat16`` dtype (ml_dtypes) gives its own bytes.
    """
    value = _unwrap(value)
    if isinstance(value, (bytes, bytearray, memoryview)) and len(bytes(value)) == 2:
        return bytes(value)
    if isinstance(value, np.generic) and value.dtype.name == "bfloat16" \
            and value.dtype.itemsize == 2:
        return value.tobytes()
    exact_only = isinstance(value, np.generic)
    if exact_only and value.dtype.kind not in "biuf" or not isinstance(
            value, (int, float, np.generic)):
        raise _fail(kernel, spec, f"got {type(value).__name__} {show(value)}: a bfloat16 takes "
                                  "a float, or 2 raw bytes (its bit pattern)")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any double
        x = math.copysign(math.inf, value)
    bits = _bfloat16_bits(x)
    if bits & 0x7FFF == 0x7F80 and not (isinstance(value, (float, np.floating))
                                        and np.isinf(value)):
        raise _fail(kernel, spec, f"{show(value)} does not fit in __nv_bfloat16 (largest "
                                  "3.3895313892515355e+38)", ArgumentValueError)
    if exact_only and not math.isnan(x) and _exact(_bfloat16_value(bits)) != _exact(value):
        raise _fail(kernel, spec, f"{show(value)} is not exactly a bfloat16: "
                                  "pass float(x) to round it", ArgumentValueError)
    return bits.to_bytes(2, "little")


def _to_complex(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A ``complex<float>``/``complex<double>`` parameter (CuPy's, CCCL's)."""
    value, dtype = _unwrap(value), spec.dtype
    assert dtype is not None
    if isinstance(value, np.generic):
        return _numpy_exact(kernel, spec, value, dtype).tobytes()
    if not isinstance(value, (int, float, complex)):
        raise _fail(kernel, spec, f"got {type(value).__name__} for a complex parameter: pass "
                                  "a complex")
    try:
        z = complex(value)
    except OverflowError:  # an int beyond any double
        z = complex(math.inf)
    with np.errstate(over="ignore"):
        out = np.array(z, dtype)
    finite_in = (True, True) if isinstance(value, int) else (math.isfinite(z.real),
                                                             math.isfinite(z.imag))
    if any(math.isinf(o) and f for o, f in zip((out.real, out.imag), finite_in)):
        raise _fail(kernel, spec, f"{show(value)} does not fit in {type_text(spec)}",
                    ArgumentValueError)
    return out.tobytes()


def _to_value(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A struct or vector type by value: raw bytes of its size, or host NumPy data; a Python
    complex for a ``double2`` (``cuDoubleComplex`` is one), which is exactly its two doubles,
    as CuPy passes it."""
    mdspan = _cupy_mdspan_type()
    if mdspan is not None and isinstance(value, mdspan):
        return _from_mdspan(kernel, spec, value)
    if isinstance(value, complex) and spec.ctype == "double2" and spec.size == 16:
        return struct.pack("<dd", value.real, value.imag)
    if isinstance(value, complex) and spec.ctype == "float2":
        raise _fail(kernel, spec, f"got the Python complex {show(value)}, which is two doubles "
                                  "(a double2, cuDoubleComplex); a float2 (cuFloatComplex) "
                                  "takes np.complex64(z) (each part rounded to float32), or its "
                                  "8 raw bytes")
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, (np.generic, np.ndarray)):
        data = np.ascontiguousarray(value).tobytes()
    else:
        what = type_text(spec) if spec.ctype else "parameter"
        raise _fail(kernel, spec, f"got {type(value).__name__}; a by-value {what} takes a "
                                  f"NumPy scalar or structured value, or {spec.size} raw bytes")
    if len(data) != spec.size:
        raise _fail(kernel, spec, f"got {len(data)} bytes, the kernel takes {spec.size}",
                    ArgumentValueError)
    return data


def read_attribute(kernel: str, spec: ParamSpec, value: Any, name: str) -> Any:
    """``value.<name>``, None where it has none; where reading it raises (a property: PyTorch's
    ``__cuda_array_interface__`` does for a tensor that requires grad), an argument error that
    names the parameter, chained to the user's exception."""
    try:
        return getattr(value, name, None)
    except Exception as exc:
        raise _raised(kernel, spec, value, f"reading its {name}", exc) from exc


def is_dlpack_only(kernel: str, spec: ParamSpec, value: Any) -> bool:
    """A DLPack producer that is no host array (NumPy arrays speak DLPack too)."""
    return read_attribute(kernel, spec, value, "__dlpack_device__") is not None \
        and read_attribute(kernel, spec, value, "__array_interface__") is None


def _is_device_array(kernel: str, spec: ParamSpec, value: Any) -> bool:
    """Device memory, a ``MemoryPointer`` or None: what only a pointer slot takes."""
    memory_pointer = _memory_pointer_type()
    return value is None or (memory_pointer is not None and isinstance(value, memory_pointer)) \
        or read_attribute(kernel, spec, value, "__cuda_array_interface__") is not None \
        or is_dlpack_only(kernel, spec, value)


def _to_pointer(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A pointer parameter: None (null), device memory (``__cuda_array_interface__`` or DLPack,
    checked for its dtype, the pointee's, and for a non-const pointer, writability), or a
    ``cupy.cuda.MemoryPointer`` (untyped memory, as CuPy's RawKernel takes it for any pointer:
    checked for its device and address)."""
    if spec.size != POINTER_BYTES:  # a foreign CUBIN's record: never cut an address
        raise pointer_size_error(kernel, spec)
    if value is None:
        return bytes(POINTER_BYTES)
    memory_pointer = _memory_pointer_type()
    if memory_pointer is not None and isinstance(value, memory_pointer):
        return _from_memory_pointer(kernel, spec, value).to_bytes(POINTER_BYTES, "little")
    cai = read_attribute(kernel, spec, value, "__cuda_array_interface__")
    if cai is None and is_dlpack_only(kernel, spec, value):
        cai = from_dlpack(kernel, spec, value)
    if cai is None:
        mdspan = _cupy_mdspan_type()
        if mdspan is not None and isinstance(value, mdspan):
            return _from_mdspan(kernel, spec, value)  # the refusal that says what it is for
        if read_attribute(kernel, spec, value, "__array_interface__") is not None \
                or read_attribute(kernel, spec, value, "__array__") is not None:
            raise _fail(kernel, spec, f"got a host array ({type(value).__name__}); a pointer "
                                      "parameter needs device memory: copy it first, e.g. "
                                      "cupy.asarray(x)")
        raise _fail(kernel, spec, f"got {type(value).__name__} {show(value)}; a pointer "
                                  "parameter takes a CUDA array (CuPy, PyTorch, anything with "
                                  "__cuda_array_interface__ or DLPack) or None")
    ptr, readonly, dtype = array_interface(kernel, spec, cai)
    if spec.dtype is not None and dtype != spec.dtype:
        raise _fail(kernel, spec, f"got an array of {dtype} where the kernel reads "
                                  f"{spec.dtype} elements")
    if readonly and not spec.const:
        raise _fail(kernel, spec, "got a read-only array for a pointer the kernel may write "
                                  "through (declare it const, or pass a writable copy)",
                    ArgumentValueError)
    return ptr.to_bytes(POINTER_BYTES, "little")


def _memory_pointer_type() -> type | None:
    """CuPy's ``MemoryPointer`` where CuPy is imported (no value of it exists before)."""
    return getattr(getattr(sys.modules.get("cupy"), "cuda", None), "MemoryPointer", None)


def _from_memory_pointer(kernel: str, spec: ParamSpec, value: Any) -> int:
    """The address a ``cupy.cuda.MemoryPointer`` holds, checked: an int from 0 to 2**64 - 1,
    on the device the launch runs on (the current one: CuPy's rule for a launch)."""
    ptr, device = value.ptr, value.device_id
    if not _is_int(ptr) or not 0 <= int(ptr) <= _U64:
        raise _fail(kernel, spec, f"the MemoryPointer's address {show(ptr)} is not a device "
                                  "address (an int from 0 to 2**64 - 1)", ArgumentValueError)
    if int(ptr) and driver.available():
        current = driver.current_device()
        if device != current:
            raise _fail(kernel, spec, f"got a MemoryPointer to memory on device {device}, and "
                                      f"the launch is on device {current}: launch inside "
                                      f"`with cupy.cuda.Device({device}):`, or copy the data "
                                      f"to device {current}", ArgumentValueError)
    return int(ptr)


def array_interface(kernel: str, spec: ParamSpec, cai: Any) -> tuple[int, bool, np.dtype]:
    """``(pointer, read-only, dtype)`` of a ``__cuda_array_interface__``, each checked: a bad one
    would otherwise launch with a garbage pointer."""
    data = cai.get("data") if isinstance(cai, dict) else None
    if not (isinstance(data, tuple) and len(data) == 2):
        raise _fail(kernel, spec, f"the array's __cuda_array_interface__ has no 'data' "
                                  f"(pointer, read-only) pair (got {show(data)}): it is not a "
                                  "usable device array", ArgumentValueError)
    ptr, readonly = data
    if ptr is None:
        ptr = 0
    if not isinstance(ptr, (int, np.integer)) or isinstance(ptr, bool) \
            or not 0 <= int(ptr) <= _U64:
        raise _fail(kernel, spec, f"the array's data pointer {show(ptr)} is not a device "
                                  "address (an int from 0 to 2**64 - 1)", ArgumentValueError)
    try:
        dtype = np.dtype(cai.get("typestr"))
    except (TypeError, ValueError):
        raise _fail(kernel, spec, f"the array's __cuda_array_interface__ typestr "
                                  f"{show(cai.get('typestr'))} is not a NumPy type string",
                    ArgumentValueError) from None
    return int(ptr), bool(readonly), dtype


# CuPy's runtime statuses that mean no usable device: cudaErrorInsufficientDriver (no driver,
# or one older than CuPy's runtime), cudaErrorNoDevice
_CUPY_NO_DEVICE = (35, 100)


def from_dlpack(kernel: str, spec: ParamSpec, value: Any) -> dict:
    """The ``__cuda_array_interface__`` of a DLPack-only CUDA array, read through CuPy.

    :raises ArgumentTypeError: not CUDA memory, or the object's DLPack methods (or CuPy's
        import of them) raised.
    :raises NoDeviceError: no GPU to import it on (checked first: CuPy would only say
        ``cudaErrorInsufficientDriver``).
    """
    # each of the protocol's steps can fail in the user's object: each says which
    try:
        device = value.__dlpack_device__()
    except Exception as exc:
        raise _raised(kernel, spec, value, "reading its __dlpack_device__()", exc) from exc
    try:
        device_type, _ = device
        device_type = int(device_type)
    except Exception:  # noqa: BLE001 - anything but a pair of ints is the object's mistake
        raise _fail(kernel, spec, f"got {type(value).__name__}, whose __dlpack_device__() "
                                  f"returned {show(device)}, not a (device type, device id) "
                                  "pair") from None
    if device_type not in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        raise _fail(kernel, spec, f"got a DLPack array on device type {device_type}, not "
                                  "CUDA memory")
    if not driver.available():
        try:
            driver._require()  # its message: why, and what works without a GPU
        except NoDeviceError as exc:
            raise NoDeviceError(f"{kernel}: {spec.describe()}: {exc}") from None
    try:
        import cupy  # only for DLPack producers without __cuda_array_interface__
    except ImportError as exc:
        raise _fail(kernel, spec, f"got {type(value).__name__}, a CUDA array that speaks only "
                                  "DLPack: reading its pointer takes CuPy, which cannot be "
                                  f"imported here ({type(exc).__name__}: {exc}); install CuPy, "
                                  "or pass an array with __cuda_array_interface__") from exc
    try:
        return cupy.from_dlpack(value).__cuda_array_interface__
    except Exception as exc:
        if type(exc).__name__ == "CUDARuntimeError" \
                and getattr(exc, "status", None) in _CUPY_NO_DEVICE:
            raise NoDeviceError(
                f"{kernel}: {spec.describe()}: no CUDA device is available to CuPy, which reads "
                f"a DLPack array's pointer ({type(exc).__name__}: {exc}). Compiling, caching "
                "and name resolution work without one; launching a kernel needs a GPU.") from exc
        raise _raised(kernel, spec, value, "converting it through DLPack (cupy.from_dlpack)",
                      exc) from exc


# slot sizes where a Python number is ambiguous without the kernel's types: what it could be
_AMBIGUOUS = {2: ("int16 (short) or uint16", "float16 (__half)"),
              4: ("int32 (int) or uint32", "float32 (float)")}


def _to_untyped(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """No signature (an ``extern "C"`` kernel of a CUBIN without its source): packed by size.

    Device arrays and None are pointers (8-byte slots); a Python int is a signed integer of the
    slot's size (1 or 8 bytes), a Python float a double (8 bytes), a complex a
    complex64/complex128; a NumPy scalar gives its own bytes where its size is the slot's. A
    Python number for a 2- or 4-byte slot is refused: int or float cannot be told apart there.
    """
    # one branch per kind of Python value a C slot of a given size can take
    value = _unwrap(value)
    if _is_device_array(kernel, spec, value):
        if spec.size != POINTER_BYTES:
            what = "None (a null pointer)" if value is None else "a device array"
            raise _fail(kernel, spec, f"got {what} for a {spec.size}-byte parameter: pointers "
                                      f"are {POINTER_BYTES} bytes")
        return _to_pointer(kernel, spec, value)
    if isinstance(value, np.ndarray):
        raise _fail(kernel, spec, f"got a host array ({value.dtype}, shape {value.shape}): "
                                  "a kernel takes device memory (cupy.asarray(x)), or pass "
                                  "a NumPy scalar for a by-value parameter")
    if isinstance(value, np.generic):
        if value.dtype.itemsize != spec.size:
            raise _fail(kernel, spec, f"got a {value.dtype} scalar ({value.dtype.itemsize} "
                                      f"bytes) for a {spec.size}-byte parameter")
        return value.tobytes()
    if isinstance(value, (bool, int, float)) and spec.size in _AMBIGUOUS:
        # without the source, a 2- or 4-byte slot may be a short or a half, an int or a float:
        # a Python number would be guessed into one of them, and a wrong guess reads garbage
        ints, floats = _AMBIGUOUS[spec.size]
        raise _fail(kernel, spec, f"got the Python {type(value).__name__} {show(value)} for a "
                                  f"{spec.size}-byte parameter of a kernel whose parameter types "
                                  f"are unknown (a CUBIN without its source): it could be "
                                  f"{ints} or {floats}; pass a NumPy scalar of the type the "
                                  f"kernel declares, e.g. np.{floats.split()[0]}(x) or "
                                  f"np.{ints.split()[0]}(x)")
    handle = _cupy_handle(value)
    if handle is not None:
        return _handle_bytes(kernel, spec, value, handle)
    if isinstance(value, (bool, int)) and spec.size in INT_CODES:
        lo, hi = -(1 << (8 * spec.size - 1)), (1 << (8 * spec.size - 1)) - 1
        if not lo <= value <= hi:
            raise _fail(kernel, spec, f"{show(value)} does not fit in a signed {spec.size}-byte "
                                      f"integer [{lo}, {hi}]; for an unsigned parameter pass "
                                      f"np.uint{8 * spec.size}(x)", ArgumentValueError)
        return int(value).to_bytes(spec.size, "little", signed=True)
    if isinstance(value, float) and spec.size in (4, 8):
        as_float = replace(spec, kind=SlotKind.FLOAT, dtype=np.dtype(f"f{spec.size}"),
                           code="f" if spec.size == 4 else "d")
        return _to_float(kernel, as_float, value)
    if isinstance(value, complex) and spec.size in (8, 16):
        return _to_complex(kernel, replace(spec, kind=SlotKind.COMPLEX,
                                           dtype=np.dtype(f"c{spec.size}")), value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _to_value(kernel, spec, value)
    raise _fail(kernel, spec, f"got {type(value).__name__} {show(value)}: a kernel without a "
                              "C++ signature takes device arrays, Python numbers, NumPy "
                              f"scalars of the slot's size ({spec.size} bytes) or raw bytes")


CONVERTERS: dict[SlotKind, Callable[[str, ParamSpec, Any], bytes]] = {
    SlotKind.POINTER: _to_pointer, SlotKind.BOOL: _to_int, SlotKind.INT: _to_int,
    SlotKind.FLOAT: _to_float, SlotKind.BFLOAT16: _to_bfloat16, SlotKind.COMPLEX: _to_complex,
    SlotKind.VALUE: _to_value, SlotKind.UNTYPED: _to_untyped,
}


def encode(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """One argument as the exact bytes its parameter receives (the checked path).

    :raises ArgumentTypeError: a value of a kind the parameter cannot take.
    :raises ArgumentValueError: a value that does not fit.
    """
    code = spec.direct_code(value)
    if code is not None:
        try:
            return struct.pack("<" + code, value)
        except (struct.error, OverflowError):
            pass  # out of range: the converter says so
    return CONVERTERS[spec.kind](kernel, spec, value)


def _count_error(kernel: str, specs: Sequence[ParamSpec], args: Any) -> ArgumentTypeError:
    if not isinstance(args, (tuple, list)):
        return ArgumentTypeError(f"{kernel}: args must be a tuple or list of arguments, "
                                 f"got {type(args).__name__}")
    return ArgumentTypeError(
        f"{kernel} takes {len(specs)} argument{'s' if len(specs) != 1 else ''}"
        f" ({', '.join(tidy_type(s.ctype) if s.ctype else '?' for s in specs)}), got {len(args)}")


def pack_args(kernel: str, specs: Sequence[ParamSpec], args: Sequence[Any]) -> list[bytes]:
    """Check every argument against its parameter and return each one's bytes.

    :raises ArgumentTypeError: wrong count, a host array for a pointer, a dtype that is not the
        pointee's, a value of the wrong kind.
    :raises ArgumentValueError: a value out of range, a read-only array for a non-const pointer.
    """
    return [encode(kernel, spec, value) for spec, value in zip(specs, _arg_tuple(kernel, specs,
                                                                                  args))]


def _arg_tuple(kernel: str, specs: Sequence[ParamSpec], args: Any) -> tuple:
    if isinstance(args, (tuple, list)) and len(args) == len(specs):
        return tuple(args)
    raise _count_error(kernel, specs, args)


# --- launch dimensions, shared memory, stream: checked before the device is asked ---------------

def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_dims(name: str, what: str, value: Any) -> tuple[int, int, int]:
    """A launch dimension as three ints from 1 to 2**32 - 1 (the driver's unsigned int; the
    device's own limits are the driver's to check).

    :raises ArgumentTypeError, ArgumentValueError: anything else.
    """
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3 \
            or not all(_is_int(v) for v in value):
        raise ArgumentTypeError(f"{name}: {what} must be an int or a tuple of 1 to 3 ints, "
                                f"got {show(value)}")
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    if any(d < 1 for d in dims):
        raise ArgumentValueError(f"{name}: every {what} dimension must be at least 1, "
                                 f"got {show(value)}")
    if any(d > _U32 for d in dims):
        raise ArgumentValueError(f"{name}: a {what} dimension of {show(max(dims))} is more "
                                 f"than a launch can take (at most {_U32})")
    return dims  # type: ignore[return-value]


def check_shared_mem(name: str, value: Any) -> int:
    """``shared_mem`` as a byte count.

    :raises ArgumentTypeError, ArgumentValueError: not an int from 0 to 2**32 - 1.
    """
    if not _is_int(value):
        raise ArgumentTypeError(f"{name}: shared_mem is the dynamic shared memory in bytes, an "
                                f"int >= 0 (0 for none); got {type(value).__name__} "
                                f"{show(value)}")
    if not 0 <= int(value) <= _U32:
        raise ArgumentValueError(f"{name}: shared_mem must be from 0 to {_U32} bytes, got "
                                 f"{show(int(value))}")
    return int(value)


_STREAM_KINDS = ("a CuPy or PyTorch stream, an object with __cuda_stream__, or a raw handle "
                 "(int)")


def stream_handle(name: str, stream: Any) -> int:
    """A stream's ``CUstream`` handle: a CuPy stream (``.ptr``), a PyTorch stream
    (``.cuda_stream``), an object with ``__cuda_stream__()`` (the CUDA stream protocol: a
    ``(version, handle)`` pair), or a raw handle (int).

    Each is read as the user's code gives it: a property or ``__cuda_stream__`` that raises, or
    answers something that is not a handle, is an error that says which, never a launch on a
    stream nobody asked for.

    :raises ArgumentTypeError, ArgumentValueError: anything else.
    """
    if _is_int(stream):
        return _checked_handle(name, int(stream), "stream handle")
    for attr in ("ptr", "cuda_stream"):
        try:
            value = getattr(stream, attr, None)
        except Exception as exc:
            raise _stream_raised(name, stream, f"reading its .{attr}", exc) from exc
        if value is not None:
            if not _is_int(value):
                raise ArgumentTypeError(f"{name}: stream: got {type(stream).__name__}, whose "
                                        f".{attr} is {type(value).__name__} {show(value)}, "
                                        "not a CUstream handle (int)")
            return _checked_handle(name, int(value), f"stream .{attr}")
    try:
        protocol = getattr(stream, "__cuda_stream__", None)
    except Exception as exc:
        raise _stream_raised(name, stream, "reading its __cuda_stream__", exc) from exc
    if protocol is None:
        raise ArgumentTypeError(f"{name}: stream must be {_STREAM_KINDS}, got "
                                f"{type(stream).__name__} {show(stream)}")
    try:
        answer = protocol()
    except Exception as exc:
        raise _stream_raised(name, stream, "calling its __cuda_stream__()", exc) from exc
    if not (isinstance(answer, tuple) and len(answer) == 2 and _is_int(answer[0])
            and _is_int(answer[1])):
        raise ArgumentTypeError(f"{name}: stream: got {type(stream).__name__}, whose "
                                f"__cuda_stream__() returned {show(answer)}, not a (version, "
                                "handle) pair of ints")
    return _checked_handle(name, int(answer[1]), "stream handle from __cuda_stream__()")


def _checked_handle(name: str, value: int, what: str) -> int:
    if not 0 <= value <= _U64:
        raise ArgumentValueError(f"{name}: {what} {show(value)} is not a CUstream (an int "
                                 f"from 0 to 2**64 - 1)")
    return value


def _stream_raised(name: str, stream: Any, doing: str, exc: Exception) -> ArgumentTypeError:
    """The error for a stream whose own code raised while cudamagic read it (raise it ``from
    exc``)."""
    return ArgumentTypeError(f"{name}: stream: {_raised_text(stream, doing, exc)}")
