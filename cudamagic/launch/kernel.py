"""One kernel as a Python callable: its parameter table, argument encoding, and the launch.

Everything about how an argument reaches a parameter is in one table, built once per kernel from
the CUBIN's parameter records (offset and size, :mod:`cudamagic.image`) and the demangled
signature (the C++ type, where the kernel has one): a :class:`ParamSpec` per parameter. Two
readers of the table, and no other encoding anywhere:

- the checked path, :func:`encode` / :func:`pack_args`: any accepted value to the exact bytes the
  kernel receives, or a :class:`~cudamagic.errors.ArgumentError` that names the parameter and
  says what to pass;
- the launcher generated per kernel (:func:`generate_launcher`), which packs the common argument
  types (``ParamSpec.direct``) with one ``struct.pack_into`` and hands every other value to the
  checked path's converter for that parameter.

So the first call and every later call, the fast and the slow path, give the same bytes. Python
numbers take the parameter's own type (``2.0`` to a ``float`` is a float32, ``10`` to an ``int``
an int32); a NumPy scalar converts only where its value survives exactly; a value that does not
fit is an error, never a wrapped or truncated launch.
"""

from __future__ import annotations

import ctypes
import functools
import math
import re
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from ..toolchain import driver
from ..errors import ArgumentTypeError, ArgumentValueError, LaunchError, NoDeviceError
from ..toolchain.image import KernelImage, KernelResources
from ..cxx import Signature, Signatures

__all__ = ["Kernel", "ParamSpec", "LaunchHooks", "param_specs", "encode", "pack_args",
           "generate_launcher"]

_get_ident = threading.get_ident
_U32 = 2**32 - 1
_U64 = 2**64 - 1
# dynamic shared memory a launch may ask for without raising the kernel's limit first
_DEFAULT_DYNAMIC_SHARED = 48 * 1024

# canonical C++ builtin type -> (kind, NumPy dtype code or None). long is 8 bytes (LP64 Linux);
# size_t and uintptr_t demangle as unsigned long, ptrdiff_t as long.
_SCALARS: dict[str, tuple[str, str | None]] = {
    "bool": ("bool", "?"), "char": ("int", "i1"), "signed char": ("int", "i1"),
    "unsigned char": ("int", "u1"), "char8_t": ("int", "u1"), "short": ("int", "i2"),
    "unsigned short": ("int", "u2"), "int": ("int", "i4"), "unsigned int": ("int", "u4"),
    "long": ("int", "i8"), "unsigned long": ("int", "u8"), "long long": ("int", "i8"),
    "unsigned long long": ("int", "u8"), "wchar_t": ("int", "i4"), "char16_t": ("int", "u2"),
    "char32_t": ("int", "u4"), "__int128": ("int", None), "unsigned __int128": ("int", None),
    "float": ("float", "f4"), "double": ("float", "f8"), "__half": ("float", "f2"),
    "half": ("float", "f2"), "__nv_bfloat16": ("bfloat16", None),
    "nv_bfloat16": ("bfloat16", None),
}
_COMPLEX = re.compile(r"(?:^|::)complex<(float|double)>$")
_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_NP_INTS = tuple(dict.fromkeys(np.dtype(c).type for c in "bBhHiIlLqQ"))  # distinct types


@dataclass(frozen=True)
class ParamSpec:
    """One row of a kernel's parameter table: where a parameter lies and how values reach it.

    Attributes
    ----------
    index, offset, size : int
        Position, byte offset in the parameter buffer, byte size (from the CUBIN).
    ctype : str or None
        Canonical C++ type from the signature; None where the kernel has none (``extern "C"``).
    kind : str
        ``"pointer"``, ``"bool"``, ``"int"``, ``"float"`` (half, float, double), ``"bfloat16"``,
        ``"complex"``, ``"value"`` (a struct or vector type by value: its bytes) or
        ``"untyped"`` (no signature: packed by the slot's size).
    dtype : numpy.dtype or None
        The scalar's dtype, or a pointer's pointee dtype where known.
    const : bool
        A pointer to const (read-only arrays are accepted).
    lo, hi : int or None
        The range of an integer or bool parameter.
    code : str
        The ``struct`` code the generated launcher packs this slot with ("" where it has none:
        every value then goes through the converter).
    direct : tuple of (type, str)
        Exact Python/NumPy types that ``struct`` packs as they are, each with its code; a value
        of any other type goes through the converter. ``struct`` range-checks integers, and a
        failure there sends the whole call through the checked path, which says what is wrong.
    """

    index: int
    offset: int
    size: int
    ctype: str | None
    kind: str
    dtype: np.dtype | None = None
    const: bool = False
    lo: int | None = None
    hi: int | None = None
    code: str = ""
    direct: tuple[tuple[type, str], ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """``parameter 2 (float*)``-style text for messages."""
        shown = _tidy_type(self.ctype) if self.ctype else f"{self.size} bytes, no C++ type"
        return f"parameter {self.index} ({shown})"

    def direct_code(self, value: Any) -> str | None:
        """The ``struct`` code that packs ``value`` as it is, or None (the converter's turn)."""
        t = type(value)
        for typ, code in self.direct:
            if t is typ and (not _nan_checked(typ, code) or value == value):
                return code
        return None


def _nan_checked(typ: type, code: str) -> bool:
    """Whether a direct entry packs NaNs differently from NumPy: ``struct`` widens a float32 to
    a double and back, which turns a signalling NaN quiet, so float32 NaNs take the converter
    (their own bytes)."""
    return typ is np.float32 and code == "f"


def _direct_entries(kind: str, dtype: np.dtype | None, size: int) -> tuple[tuple[type, str], ...]:
    """The types a slot packs without conversion, most common first (the generated launcher
    tests them in this order); every entry is exact (the property tests check each)."""
    if kind == "int" and dtype is not None:
        code = _INT_CODES[dtype.itemsize].upper() if dtype.kind == "u" else _INT_CODES[size]
        first = (int, dtype.type, bool)
        return tuple((t, code) for t in dict.fromkeys(first + _NP_INTS))
    if kind == "bool":
        return ((bool, "?"), (np.bool_, "?"))
    if kind == "float" and dtype is not None and dtype.itemsize == 4:
        return ((float, "f"), (np.float32, "f"), (int, "f"), (bool, "f"))
    if kind == "float" and dtype is not None and dtype.itemsize == 8:
        return ((float, "d"), (np.float64, "d"), (int, "d"), (np.float32, "d"), (bool, "d"))
    if kind == "untyped" and size in _INT_CODES:
        i = _INT_CODES[size]
        ints = [(int, i), (np.dtype(f"i{size}").type, i), (bool, i),
                (np.dtype(f"u{size}").type, i.upper())]
        floats = {4: [(float, "f"), (np.float32, "f")], 8: [(float, "d"), (np.float64, "d")]}
        # long long and long are one width but two NumPy types on Linux
        longlong = [(np.longlong, "q"), (np.ulonglong, "Q")] if size == 8 else []
        return tuple(dict.fromkeys(ints + floats.get(size, []) + longlong))
    # half, bfloat16, complex, structs: the converter; pointers: the launcher reads CuPy arrays
    # itself (_arg_lines), everything else through the converter
    return ()


def param_specs(image: KernelImage, signature: Signature | None) -> tuple[ParamSpec, ...] | None:
    """The parameter table of a kernel: the CUBIN's records and, where it matches, the signature.

    Returns None where the CUBIN carries no parameter records (nothing can be checked).
    """
    if image.params is None:
        return None
    types: Sequence[str | None] = [None] * len(image.params)
    if signature is not None and signature.params is not None \
            and len(signature.params) == len(image.params):
        types = signature.params
    return tuple(_spec(p.ordinal, p.offset, p.size, ctype)
                 for p, ctype in zip(image.params, types))


def _spec(index: int, offset: int, size: int, ctype: str | None) -> ParamSpec:
    """One row of the table (see :class:`ParamSpec`)."""
    where = {"index": index, "offset": offset, "size": size, "ctype": ctype}
    if ctype is None:
        return ParamSpec(**where, kind="untyped", code=_INT_CODES.get(size, ""),
                         direct=_direct_entries("untyped", None, size))
    if ctype.endswith("*") or ctype.endswith("*__restrict__"):
        pointee = ctype.rsplit("*", 1)[0].strip()
        const = pointee.endswith("const")
        base = pointee[:-len("const")].strip() if const else pointee
        return ParamSpec(**where, kind="pointer", dtype=_numpy_dtype(base), const=const, code="Q")
    kind, code = _SCALARS.get(ctype, ("value", None))
    m = _COMPLEX.search(ctype)
    if m:
        kind, code = "complex", ("c8" if m.group(1) == "float" else "c16")
    dtype = np.dtype(code) if code else None
    width = dtype.itemsize if dtype is not None else {"bfloat16": 2}.get(kind, 16)
    if kind == "value" or width != size:
        return ParamSpec(**where, kind="value")
    lo = hi = None
    if kind == "bool":
        lo, hi = 0, 1
    elif kind == "int":
        signed = dtype.kind == "i" if dtype is not None else not ctype.startswith("unsigned")
        lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed \
            else (0, (1 << (8 * size)) - 1)
    direct = _direct_entries(kind, dtype, size)
    return ParamSpec(**where, kind=kind, dtype=dtype, lo=lo, hi=hi,
                     code=direct[0][1] if direct else "", direct=direct)


def _numpy_dtype(ctype: str) -> np.dtype | None:
    """The NumPy dtype of a canonical C++ type, where it has one (a pointer's pointee)."""
    kind, code = _SCALARS.get(ctype, ("value", None))
    m = _COMPLEX.search(ctype)
    if m:
        code = "c8" if m.group(1) == "float" else "c16"
    return np.dtype(code) if code else None


# --- the checked path: any accepted value -> the exact bytes, or an error that says why ---------

def _fail(kernel: str, spec: ParamSpec, message: str,
          exc: type[Exception] = ArgumentTypeError) -> Exception:
    return exc(f"{kernel}: {spec.describe()}: {message}")


# --- how messages show values and types (only ever on the way to an error) ----------------------

_SHOWN = 60  # a value's text in a message: at most this many characters


def _show(value: Any) -> str:
    """A value as a message shows it: its own repr (NumPy 2 writes ``np.float64(0.1)``; NumPy 1's
    bare ``0.1`` gets its type put around it), a long one shortened in the middle with an
    ellipsis, so that its start (the type, the leading digits) and its closing quote or bracket
    stay."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user's __repr__ that raises, an int past the digit limit
        bits = f" of {value.bit_length()} bits" if isinstance(value, int) else ""
        text = f"<{type(value).__name__}{bits}>"
    if isinstance(value, np.generic) and not text.startswith("np."):  # NumPy 1
        text = f"np.{type(value).__name__}({text})"
    if len(text) > _SHOWN:
        text = f"{text[:_SHOWN - 20]}...{text[-12:]}"
    return text


@functools.lru_cache(maxsize=1024)
def _tidy_type(ctype: str) -> str:
    """A C++ type as messages show it: library-internal inline namespaces left out
    (``thrust::THRUST_300102_SM_900_NS::complex<float>`` is ``thrust::complex<float>``,
    ``cuda::std::__4::complex`` ``cuda::std::complex``), as the build report shows them."""
    from ..view.report import _tidy  # the report's one rule; imported on the first error only

    return _tidy(ctype)


def _type_text(spec: ParamSpec) -> str:
    """The type a value must fit, for messages: the parameter's C++ type, or for an
    ``extern "C"`` slot (no C++ type) the slot as it is used (``a 4-byte float slot``)."""
    if spec.ctype is not None:
        return _tidy_type(spec.ctype)
    article = "an" if str(spec.size).startswith("8") or spec.size in (11, 18) else "a"
    return f"{article} {spec.size}-byte {spec.kind} slot"


def _raised(kernel: str, spec: ParamSpec, value: Any, doing: str,
            exc: Exception) -> ArgumentTypeError:
    """The error for an argument whose own code raised while cudamagic read it (raise it
    ``from exc``: the user's traceback stays attached)."""
    text = str(exc)
    return _fail(kernel, spec, f"got {type(value).__name__}, and {doing} raised "
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
                                  f"safely to {_type_text(spec)}: pass a {dtype} value")
    with np.errstate(all="ignore"):
        out = np.array(value, dtype)[()]
    parts = (lambda z: (z.real, z.imag)) if dtype.kind == "c" else (lambda z: (z,))
    if [_exact(p) for p in parts(out)] != [_exact(p) for p in parts(value)]:
        raise _fail(kernel, spec, f"{_show(value)} is not exactly a {_type_text(spec)} (it "
                                  f"would arrive as {_show(out)}): convert it yourself "
                                  f"(np.{dtype}(x)), or pass a Python number to round it",
                    ArgumentValueError)
    return out


def _unwrap(value: Any) -> Any:
    """A 0-d NumPy array as its scalar (NumPy hands these out where a scalar is meant)."""
    if type(value) is np.ndarray and value.ndim == 0:
        return value[()]
    return value


def _to_int(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """An integer or bool parameter: Python ints, bools and NumPy integers, by value."""
    value = _unwrap(value)
    if spec.kind == "bool" and isinstance(value, np.generic) and value.dtype.kind == "b":
        return bytes([bool(value)])
    if isinstance(value, np.generic) and value.dtype.kind not in "biu":
        raise _fail(kernel, spec, f"got a {value.dtype} scalar for an integer parameter: pass "
                                  "an int (int(x) truncates on purpose)")
    if not isinstance(value, (int, np.integer, np.bool_)):
        raise _fail(kernel, spec, f"got {type(value).__name__} {_show(value)} for an integer "
                                  "parameter: pass an int (int(x) truncates on purpose)")
    v = int(value)
    if not spec.lo <= v <= spec.hi:  # type: ignore[operator]
        raise _fail(kernel, spec, f"{v} does not fit in {_type_text(spec)} [{spec.lo}, {spec.hi}]",
                    ArgumentValueError)
    return v.to_bytes(spec.size, "little", signed=spec.lo < 0)  # type: ignore[operator]


def _to_float(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A half, float or double parameter: Python numbers round to it (IEEE round to nearest
    even, as NumPy does); NumPy scalars convert only where their value survives."""
    value, dtype = _unwrap(value), spec.dtype
    assert dtype is not None
    if isinstance(value, np.generic):
        return _numpy_exact(kernel, spec, value, dtype).tobytes()
    if not isinstance(value, (int, float)):
        raise _fail(kernel, spec, f"got {type(value).__name__} {_show(value)} for a "
                                  "floating-point parameter: pass a float")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any double
        x = math.inf
    with np.errstate(over="ignore"):
        out = np.array(x, dtype)
    if math.isinf(out) and not (isinstance(value, float) and math.isinf(value)):
        raise _fail(kernel, spec, f"{_show(value)} does not fit in {_type_text(spec)} (largest "
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
        raise _fail(kernel, spec, f"got {type(value).__name__} {_show(value)}: a bfloat16 takes "
                                  "a float, or 2 raw bytes (its bit pattern)")
    try:
        x = float(value)
    except OverflowError:  # an int beyond any double
        x = math.copysign(math.inf, value)
    bits = _bfloat16_bits(x)
    if bits & 0x7FFF == 0x7F80 and not (isinstance(value, (float, np.floating))
                                        and np.isinf(value)):
        raise _fail(kernel, spec, f"{_show(value)} does not fit in __nv_bfloat16 (largest "
                                  "3.3895313892515355e+38)", ArgumentValueError)
    if exact_only and not math.isnan(x) and _exact(_bfloat16_value(bits)) != _exact(value):
        raise _fail(kernel, spec, f"{_show(value)} is not exactly a bfloat16: "
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
        raise _fail(kernel, spec, f"{_show(value)} does not fit in {_type_text(spec)}",
                    ArgumentValueError)
    return out.tobytes()


def _to_value(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A struct or vector type by value: raw bytes of its size, or host NumPy data."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, (np.generic, np.ndarray)):
        data = np.ascontiguousarray(value).tobytes()
    else:
        what = _type_text(spec) if spec.ctype else "parameter"
        raise _fail(kernel, spec, f"got {type(value).__name__}; a by-value {what} takes a "
                                  f"NumPy scalar or structured value, or {spec.size} raw bytes")
    if len(data) != spec.size:
        raise _fail(kernel, spec, f"got {len(data)} bytes, the kernel takes {spec.size}",
                    ArgumentValueError)
    return data


def _attribute(kernel: str, spec: ParamSpec, value: Any, name: str) -> Any:
    """``value.<name>``, None where it has none; where reading it raises (a property: PyTorch's
    ``__cuda_array_interface__`` does for a tensor that requires grad), an argument error that
    names the parameter, chained to the user's exception."""
    try:
        return getattr(value, name, None)
    except Exception as exc:
        raise _raised(kernel, spec, value, f"reading its {name}", exc) from exc


def _dlpack_only(kernel: str, spec: ParamSpec, value: Any) -> bool:
    """A DLPack producer that is no host array (NumPy arrays speak DLPack too)."""
    return _attribute(kernel, spec, value, "__dlpack_device__") is not None \
        and _attribute(kernel, spec, value, "__array_interface__") is None


def _is_device_array(kernel: str, spec: ParamSpec, value: Any) -> bool:
    return value is None or _attribute(kernel, spec, value, "__cuda_array_interface__") \
        is not None or _dlpack_only(kernel, spec, value)


def _to_pointer(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """A pointer parameter: None (null), or device memory: ``__cuda_array_interface__`` or
    DLPack, checked for its dtype (the pointee's) and, for a non-const pointer, writability."""
    if value is None:
        return bytes(8)
    cai = _attribute(kernel, spec, value, "__cuda_array_interface__")
    if cai is None and _dlpack_only(kernel, spec, value):
        cai = _from_dlpack(kernel, spec, value)
    if cai is None:
        if _attribute(kernel, spec, value, "__array_interface__") is not None \
                or _attribute(kernel, spec, value, "__array__") is not None:
            raise _fail(kernel, spec, f"got a host array ({type(value).__name__}); a pointer "
                                      "parameter needs device memory: copy it first, e.g. "
                                      "cupy.asarray(x)")
        raise _fail(kernel, spec, f"got {type(value).__name__} {_show(value)}; a pointer "
                                  "parameter takes a CUDA array (CuPy, PyTorch, anything with "
                                  "__cuda_array_interface__ or DLPack) or None")
    ptr, readonly, dtype = _interface(kernel, spec, cai)
    if spec.dtype is not None and dtype != spec.dtype:
        raise _fail(kernel, spec, f"got an array of {dtype} where the kernel reads "
                                  f"{spec.dtype} elements")
    if readonly and not spec.const:
        raise _fail(kernel, spec, "got a read-only array for a pointer the kernel may write "
                                  "through (declare it const, or pass a writable copy)",
                    ArgumentValueError)
    return ptr.to_bytes(8, "little")


def _interface(kernel: str, spec: ParamSpec, cai: Any) -> tuple[int, bool, np.dtype]:
    """``(pointer, read-only, dtype)`` of a ``__cuda_array_interface__``, each checked: a bad one
    would otherwise launch with a garbage pointer."""
    data = cai.get("data") if isinstance(cai, dict) else None
    if not (isinstance(data, tuple) and len(data) == 2):
        raise _fail(kernel, spec, f"the array's __cuda_array_interface__ has no 'data' "
                                  f"(pointer, read-only) pair (got {_show(data)}): it is not a "
                                  "usable device array", ArgumentValueError)
    ptr, readonly = data
    if ptr is None:
        ptr = 0
    if not isinstance(ptr, (int, np.integer)) or isinstance(ptr, bool) \
            or not 0 <= int(ptr) <= _U64:
        raise _fail(kernel, spec, f"the array's data pointer {_show(ptr)} is not a device "
                                  "address (an int from 0 to 2**64 - 1)", ArgumentValueError)
    try:
        dtype = np.dtype(cai.get("typestr"))
    except (TypeError, ValueError):
        raise _fail(kernel, spec, f"the array's __cuda_array_interface__ typestr "
                                  f"{_show(cai.get('typestr'))} is not a NumPy type string",
                    ArgumentValueError) from None
    return int(ptr), bool(readonly), dtype


# CuPy's runtime statuses that mean no usable device: cudaErrorInsufficientDriver (no driver,
# or one older than CuPy's runtime), cudaErrorNoDevice
_CUPY_NO_DEVICE = (35, 100)


def _from_dlpack(kernel: str, spec: ParamSpec, value: Any) -> dict:
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
                                  f"returned {_show(device)}, not a (device type, device id) "
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


def _to_untyped(kernel: str, spec: ParamSpec, value: Any) -> bytes:
    """No signature (``extern "C"``): packed by the slot's size.

    Device arrays and None are pointers (8-byte slots); a Python int is a signed integer of the
    slot's size, a Python float a float32 (4 bytes) or double (8 bytes), a complex a
    complex64/complex128; a NumPy scalar gives its own bytes where its size is the slot's.
    """
    # one branch per kind of Python value a C slot of a given size can take
    value = _unwrap(value)
    if _is_device_array(kernel, spec, value):
        if spec.size != 8:
            what = "None (a null pointer)" if value is None else "a device array"
            raise _fail(kernel, spec, f"got {what} for a {spec.size}-byte parameter: pointers "
                                      "are 8 bytes")
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
    if isinstance(value, (bool, int)) and spec.size in _INT_CODES:
        lo, hi = -(1 << (8 * spec.size - 1)), (1 << (8 * spec.size - 1)) - 1
        if not lo <= value <= hi:
            raise _fail(kernel, spec, f"{value} does not fit in a signed {spec.size}-byte "
                                      f"integer [{lo}, {hi}]; for an unsigned parameter pass "
                                      f"np.uint{8 * spec.size}(x)", ArgumentValueError)
        return int(value).to_bytes(spec.size, "little", signed=True)
    if isinstance(value, float) and spec.size in (4, 8):
        as_float = replace(spec, kind="float", dtype=np.dtype(f"f{spec.size}"),
                           code="f" if spec.size == 4 else "d")
        return _to_float(kernel, as_float, value)
    if isinstance(value, complex) and spec.size in (8, 16):
        return _to_complex(kernel, replace(spec, kind="complex",
                                           dtype=np.dtype(f"c{spec.size}")), value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _to_value(kernel, spec, value)
    raise _fail(kernel, spec, f"got {type(value).__name__} {_show(value)}: a kernel without a "
                              "C++ signature takes device arrays, Python numbers, NumPy "
                              f"scalars of the slot's size ({spec.size} bytes) or raw bytes")


_CONVERTERS: dict[str, Callable[[str, ParamSpec, Any], bytes]] = {
    "pointer": _to_pointer, "bool": _to_int, "int": _to_int, "float": _to_float,
    "bfloat16": _to_bfloat16, "complex": _to_complex, "value": _to_value,
    "untyped": _to_untyped,
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
    return _CONVERTERS[spec.kind](kernel, spec, value)


def _count_error(kernel: str, specs: Sequence[ParamSpec], args: Any) -> ArgumentTypeError:
    if not isinstance(args, (tuple, list)):
        return ArgumentTypeError(f"{kernel}: args must be a tuple or list of arguments, "
                                 f"got {type(args).__name__}")
    return ArgumentTypeError(
        f"{kernel} takes {len(specs)} argument{'s' if len(specs) != 1 else ''}"
        f" ({', '.join(_tidy_type(s.ctype) if s.ctype else '?' for s in specs)}), got {len(args)}")


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


def _dims(name: str, what: str, value: Any) -> tuple[int, int, int]:
    """A launch dimension as three ints from 1 to 2**32 - 1 (the driver's unsigned int; the
    device's own limits are the driver's to check).

    :raises ArgumentTypeError, ArgumentValueError: anything else.
    """
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3 \
            or not all(_is_int(v) for v in value):
        raise ArgumentTypeError(f"{name}: {what} must be an int or a tuple of 1 to 3 ints, "
                                f"got {_show(value)}")
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    if any(d < 1 for d in dims):
        raise ArgumentValueError(f"{name}: every {what} dimension must be at least 1, "
                                 f"got {value!r}")
    if any(d > _U32 for d in dims):
        raise ArgumentValueError(f"{name}: a {what} dimension of {max(dims)} is more than a "
                                 f"launch can take (at most {_U32})")
    return dims  # type: ignore[return-value]


def _shared_mem(name: str, value: Any) -> int:
    """``shared_mem`` as a byte count.

    :raises ArgumentTypeError, ArgumentValueError: not an int from 0 to 2**32 - 1.
    """
    if not _is_int(value):
        raise ArgumentTypeError(f"{name}: shared_mem is the dynamic shared memory in bytes, an "
                                f"int >= 0 (0 for none); got {type(value).__name__} "
                                f"{_show(value)}")
    if not 0 <= int(value) <= _U32:
        raise ArgumentValueError(f"{name}: shared_mem must be from 0 to {_U32} bytes, got "
                                 f"{int(value)}")
    return int(value)


def _length(dims: Any) -> int:
    """How many dimensions a grid or block has (1 for an int or anything odd)."""
    return len(dims) if isinstance(dims, (tuple, list)) else 1


def _kernel_of(module: Any, label: str) -> "Kernel":
    """A kernel of an arrived module, by its name expression (:meth:`Kernel.__reduce__`)."""
    return module.kernels[label]


def _stream_handle(name: str, stream: Any) -> int:
    """A stream's ``CUstream`` handle: a CuPy or PyTorch stream, an object with
    ``__cuda_stream__``, or a raw handle (int).

    :raises ArgumentTypeError, ArgumentValueError: anything else.
    """
    value = stream
    if not _is_int(value):
        value = next((v for v in (getattr(stream, "ptr", None),
                                  getattr(stream, "cuda_stream", None)) if _is_int(v)), None)
    if value is None and hasattr(stream, "__cuda_stream__"):
        value = stream.__cuda_stream__()[1]
    if not _is_int(value):
        raise ArgumentTypeError(f"{name}: stream must be a CuPy or PyTorch stream, an object "
                                f"with __cuda_stream__, or a raw handle (int), got "
                                f"{type(stream).__name__} {_show(stream)}")
    if not 0 <= int(value) <= _U64:
        raise ArgumentValueError(f"{name}: stream handle {int(value)} is not a CUstream")
    return int(value)


# --- the generated launcher -----------------------------------------------------------------------

class _NoSuchType:
    """Stands for CuPy's ndarray and Stream where CuPy is not imported: nothing is of this type."""


class _NullStream:
    ptr = 0


@dataclass(frozen=True)
class LaunchHooks:
    """What a generated launcher calls beyond Python: the device side (stand-ins in the tests).

    Attributes
    ----------
    array_type, stream_type : type
        CuPy's ``ndarray`` and ``Stream`` (their pointer and handle are read straight off), or
        a type nothing is of.
    current_device : callable
        ``() -> int``.
    current_stream : callable
        ``() -> object`` with the handle as ``.ptr`` (CuPy's current stream).
    handles : dict
        device -> the kernel's handle there, for the launch's lookup.
    load : callable
        ``(device) -> handle``: loads the kernel on a device (first launch there).
    launch : callable or None
        ``cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra)``
        taking plain ints, raising on failure; None: :func:`cudamagic.driver.fast_launch` on
        first use.
    relaunch : callable
        ``(fn, device, grid, block, shared_mem, stream)``: the checked launch after ``launch``
        raised; it says what went wrong.
    raise_shared_limit : callable
        ``(device, nbytes)``: lets the kernel take more than 48 KiB of dynamic shared memory.
    """

    array_type: type
    stream_type: type
    current_device: Callable[[], int]
    current_stream: Callable[[], Any]
    handles: dict[int, int]
    load: Callable[[int], int]
    launch: Callable[..., Any] | None
    relaunch: Callable[..., None]
    raise_shared_limit: Callable[[int, int], None]


@dataclass(frozen=True)
class Launcher:
    """A generated launch function and the parameter buffer it fills (kept alive with it)."""

    run: Callable[..., None]
    buffer: ctypes.Array
    pointers: ctypes.Array
    source: str = field(repr=False)

    @property
    def address(self) -> int:
        """The ``void*[]`` the driver reads each parameter through."""
        return ctypes.addressof(self.pointers)


def _fast_form(spec: ParamSpec, env: dict[str, Any], sample: Any) -> tuple[str, str, str]:
    """How the generated launcher takes one argument as it is: ``(test, value, code)``, the test
    that its type is one ``struct`` packs exactly with ``code``, and the expression packed.

    A slot with one code (every typed one) tests all its direct types. An ``extern "C"`` slot
    has a code per type (an int or a float in a 4-byte slot): the launcher takes the group of
    the first call's argument (a C parameter has one type), and any other type through the
    checked path, which gives the same bytes, more slowly. A slot with no direct form (half,
    bfloat16, complex, structs) has no test: its converter runs on every call.
    """
    i, a = spec.index, f"a{spec.index}"
    pointer = spec.kind == "pointer" or (spec.kind == "untyped" and spec.size == 8
                                         and (type(sample) is env["ND"] or sample is None
                                              or spec.direct_code(sample) is None))
    if pointer:
        if spec.kind == "pointer" and spec.dtype is not None:
            env[f"D{i}"] = spec.dtype
            return f"type({a}) is ND and {a}.dtype is D{i}", f"{a}.data.ptr", "Q"
        return f"type({a}) is ND", f"{a}.data.ptr", "Q"
    if not spec.direct:
        return "", "", ""
    code = spec.direct_code(sample) if spec.kind == "untyped" else None
    code = code or spec.code
    group = [t for t, c in spec.direct if c == code]
    terms = []
    for j, typ in enumerate(group):
        if j == 3:  # the common types by identity, the rest by one set lookup
            env[f"S{i}"] = frozenset(group[3:])
            terms.append(f"t in S{i}")
            break
        env[f"T{i}_{j}"] = typ
        nan = f" and {a} == {a}" if _nan_checked(typ, code) else ""
        terms.append(f"{'(t := type(' + a + '))' if j == 0 else 't'} is T{i}_{j}{nan}")
    return f"({' or '.join(terms)})", a, code


def _dims_lines(what: str, names: str, first: int = 1) -> list[str]:
    """Generated code that reads a launch dimension: 1 to 3 ints inline (a sequence pattern is
    the fewest bytecodes for it: this runs on every launch), anything else through
    :func:`_dims` (NumPy ints; it says what is wrong).

    The length ``first`` (the first call's: a kernel is called with one shape) is tried first:
    each pattern tried and missed costs about 600 machine instructions (callgrind), 0.1 us.
    The bound is a literal: a constant costs less than a global.
    """
    x, y, z = names.split(", ")
    ok = [f"type({v}) is int and 0 < {v} <= {_U32}" for v in (x, y, z)]
    cases = {1: [f"        case ({x},) if {ok[0]}:", f"            {y} = {z} = 1"],
             2: [f"        case ({x}, {y}) if {ok[0]} and {ok[1]}:", f"            {z} = 1"],
             3: [f"        case ({x}, {y}, {z}) if {' and '.join(ok)}:", "            pass"]}
    order = [first, *(n for n in (1, 2, 3) if n != first)] if first in cases else [1, 2, 3]
    return [f"    match {what}:", *(line for n in order for line in cases[n]),
            "        case _:", f"            {names} = dims(name, '{what}', {what})"]


def generate_launcher(name: str, specs: Sequence[ParamSpec], hooks: LaunchHooks,
                      sample: Sequence[Any] = (), shape: tuple[int, int] = (1, 1)) -> Launcher:
    """The launch function of one kernel, generated from its parameter table.

    Generated (as CuPy and Numba generate their launchers) because a Python loop over
    per-argument packers costs about 1 us a launch (benchmarks/launch_overhead.py). Where every
    argument is of a type its slot packs as it is (``ParamSpec.direct``), one type test each and
    one ``struct.pack_into`` fill the buffer; anything else, or a value ``struct`` refuses (out
    of range), goes through the checked path (:func:`pack_args`), which gives the same bytes or
    says what is wrong. ``sample`` (the first call's arguments) picks the group of an
    ``extern "C"`` slot. Order: arguments, grid, block, shared memory, stream, then the device,
    so every argument error is raised before (and without) a GPU.
    """
    size = max((s.offset + s.size for s in specs), default=0)
    buf = (ctypes.c_char * max(size, 1))()
    ptrs = (ctypes.c_void_p * max(len(specs), 1))()
    for s in specs:
        ptrs[s.index] = ctypes.addressof(buf) + s.offset
    env = _launcher_globals(name, specs, hooks, buf)
    env["address"] = ctypes.addressof(ptrs)
    sample = tuple(sample) if len(sample) == len(specs) else (None,) * len(specs)
    tests, values, fmt, converted, pos = [], [], "<", [], 0
    for spec in sorted(specs, key=lambda s: s.offset):
        if spec.offset < pos:
            raise LaunchError(f"{name}: the CUBIN's parameter records overlap (parameter "
                              f"{spec.index} at offset {spec.offset}); it cannot be launched")
        test, value, code = _fast_form(spec, env, sample[spec.index])
        fmt += (f"{spec.offset - pos}x" if spec.offset > pos else "") + (code or f"{spec.size}x")
        tests += [test] if test else []
        values += [value] if value else []
        if not code:  # no direct form: the slot's converter, written after the pack
            env[f"C{spec.index}"] = functools.partial(_CONVERTERS[spec.kind], name, spec)
            env[f"W{spec.index}"] = struct.Struct(f"<{spec.size}s").pack_into
            converted.append(f"W{spec.index}(buf, {spec.offset}, C{spec.index}(a{spec.index}))")
        pos = spec.offset + spec.size
    env["pack"] = struct.Struct(fmt).pack_into
    source = _launcher_source(len(specs), shape, " and ".join(tests) or "True",
                              [f"pack(buf, 0{''.join(', ' + v for v in values)})", *converted])
    exec(compile(source, f"<cudamagic launcher for {name}>", "exec"), env)
    return Launcher(env["launch_kernel"], buf, ptrs, source)


def _launcher_globals(name: str, specs: Sequence[ParamSpec], hooks: LaunchHooks,
                      buf: ctypes.Array) -> dict[str, Any]:
    """What a generated launcher reads as globals: the hooks, the buffer, the slow paths."""
    env: dict[str, Any] = {
        "name": name, "ND": hooks.array_type, "ST": hooks.stream_type,
        "buf": buf, "handles": hooks.handles, "load": hooks.load,
        "current_device": hooks.current_device, "current_stream": hooks.current_stream,
        "relaunch": hooks.relaunch, "ZERO": 0,
        "with_shared": functools.partial(_with_shared, name, hooks),
        "struct_error": struct.error, "dims": _dims, "stream_handle": _stream_handle,
        "get_ident": _get_ident, "OWNER": _get_ident(), "other_thread": Kernel._any_thread,
        "repack": functools.partial(_write, name, specs, buf=buf),
    }
    env["launch"] = hooks.launch or _first_launch(env)
    return env


def _launcher_source(nargs: int, shape: tuple[int, int], fast_test: str,
                     packs: list[str]) -> str:
    """The text of a generated launcher (see :func:`generate_launcher`)."""
    names = f"{', '.join(f'a{i}' for i in range(nargs))}{',' if nargs == 1 else ''}"
    # a tuple of another length fails to unpack (no len() call on the common path)
    unpack = [f"        try: {names} = args", "        except ValueError: repack(args)"] \
        if nargs else ["        if args: repack(args)"]
    return "\n".join([
        "def launch_kernel(self, grid, block, args=(), shared_mem=0, stream=None):",
        # the buffer is this thread's: another thread takes its own launcher
        "    if get_ident() != OWNER:",
        "        return other_thread(self, grid, block, args, shared_mem, stream)",
        "    if type(args) is tuple:",
        *unpack,
        f"        if {fast_test}:",
        "            try:",
        *[f"                {p}" for p in packs],
        "            except (struct_error, OverflowError):",
        "                repack(args)  # a value out of range: the checked path says which",
        "        else:",
        "            repack(args)  # another type: the checked path converts it or says why",
        "    else:",
        "        repack(args)  # a list, or a wrong count",
        *_dims_lines("grid", "gx, gy, gz", shape[0]),
        *_dims_lines("block", "bx, by, bz", shape[1]),
        # CPython keeps a single int 0, so `is ZERO` is one test for the common shared_mem=0
        "    if stream is None and shared_mem is ZERO:",
        "        device = current_device()",
        "        fn = handles.get(device)",
        "        if fn is None: fn = load(device)",
        "        st = current_stream().ptr",
        "    elif type(stream) is ST and shared_mem is ZERO:",
        "        st = stream.ptr",
        "        device = current_device()",
        "        fn = handles.get(device)",
        "        if fn is None: fn = load(device)",
        "    else:  # another stream, or dynamic shared memory: checked before the device",
        "        shared_mem, st, device, fn = with_shared(shared_mem, stream)",
        "    try:",
        "        launch(fn, gx, gy, gz, bx, by, bz, shared_mem, st, address, 0)",
        "    except Exception:",
        "        relaunch(fn, device, (gx, gy, gz), (bx, by, bz), shared_mem, st)",
        "",
    ])


def _with_shared(name: str, hooks: LaunchHooks, shared_mem: Any,
                 stream: Any) -> tuple[int, int, int, int]:
    """The launch's ``(shared_mem, stream, device, function)`` where it asks for dynamic shared
    memory: both checked before the device is asked, the kernel's limit raised above 48 KiB."""
    shared_mem = _shared_mem(name, shared_mem)
    st = None if stream is None else _stream_handle(name, stream)
    device = hooks.current_device()
    fn = hooks.handles.get(device)
    if fn is None:
        fn = hooks.load(device)
    if shared_mem > _DEFAULT_DYNAMIC_SHARED:
        hooks.raise_shared_limit(device, shared_mem)
    return shared_mem, hooks.current_stream().ptr if st is None else st, device, fn


def _first_launch(env: dict[str, Any]) -> Callable[..., Any]:
    """A stand-in for the driver's launch that looks it up on first use (importing the driver
    binding is left to the first launch) and puts it in the launcher's globals."""
    def first(*args: Any) -> Any:
        env["launch"] = driver.fast_launch()
        return env["launch"](*args)
    return first


def _write(name: str, specs: Sequence[ParamSpec], args: Any, *, buf: ctypes.Array) -> None:
    """Fill the parameter buffer through the checked path (every argument, every check)."""
    for spec, blob in zip(specs, pack_args(name, specs, args)):
        struct.pack_into(f"<{spec.size}s", buf, spec.offset, blob)


class Kernel:
    """A kernel of a built module, callable as ``kernel(grid, block, args, shared_mem=0, stream=None)``.

    Attributes
    ----------
    name_expression : str
        The user's exact string (or the plain name of an ``extern "C"`` kernel).
    symbol : str
        The mangled name in the CUBIN.
    python_name : str
        The identifier it is pushed under in the notebook.
    signature : str
        The demangled signature.
    resolved_by : str
        ``"nvrtc"``, ``"stored"``, ``"demangled"`` or ``"extern-c"``.
    params : tuple of ParamSpec or None
        The parameter table.
    resources : KernelResources or None
        Registers, shared, constant and local memory, as the CUBIN records them.
    """

    def __init__(self, module: Any, name_expression: str, symbol: str, python_name: str,
                 signatures: Signatures, resolved_by: str, image: KernelImage) -> None:
        self.module = module  # what holds the loaded CUBIN: anything with _library()
        self.name_expression = name_expression
        self.symbol = symbol
        self.python_name = python_name
        self.signature = signatures.text(symbol)
        self.resolved_by = resolved_by
        self._signatures = signatures
        self._image = image
        self._params: tuple[ParamSpec, ...] | None | bool = False  # False: not read yet
        self._handles: dict[int, int] = {}  # device -> CUkernel (launches take it as it is)
        self._shared_limit: dict[int, int] = {}
        self._launchers: dict[int, Launcher] = {}  # by thread
        self._lock = threading.Lock()

    @property
    def params(self) -> tuple[ParamSpec, ...] | None:
        """The parameter table (read from the CUBIN and the signature on first use, so a restore
        of many kernels parses only those that are called)."""
        if self._params is False:
            self._params = param_specs(self._image, self._signatures[self.symbol])
        return self._params  # type: ignore[return-value]

    @property
    def resources(self) -> KernelResources | None:
        """Registers, shared, constant and local memory as the CUBIN records them (no GPU)."""
        return self._image.resources

    def __repr__(self) -> str:
        return (f"<cudamagic.Kernel {self.name_expression!r} symbol={self.symbol!r} "
                f"resolved_by={self.resolved_by!r}>")

    def _handle(self, device: int, context_ready: bool = False) -> int:
        handle = self._handles.get(device)
        if handle is None:
            with self._lock:
                if not context_ready:
                    driver.ensure_context(device)
                handle = self._handles[device] = self.module._library().kernel(self.symbol)
        return handle

    def function(self, device: int | None = None, context_ready: bool = False) -> int:
        """The kernel's ``CUfunction`` in a device's context, loading the module there if needed."""
        device = driver.current_device() if device is None else device
        return driver.kernel_function(self._handle(device, context_ready))

    def attributes(self, device: int | None = None) -> dict[str, int]:
        """Registers, static shared, local and constant memory (and, from the driver, the largest
        block and dynamic shared memory).

        With a GPU these are the driver's numbers for the device (default: the current one).
        Without one, ``registers``, ``static_shared_bytes``, ``const_bytes`` and ``local_bytes``
        come from the CUBIN (:attr:`resources`; the driver reads the same records), and the two
        that depend on the device, ``max_threads_per_block`` and ``max_dynamic_shared_bytes``,
        are absent.

        :raises NoDeviceError: no GPU, and a kernel made without its CUBIN.
        """
        if device is None and not driver.available():
            if self.resources is None:
                raise NoDeviceError(f"{self.name_expression}: no CUDA device, and no CUBIN "
                                    "records to read the attributes from")
            return self.resources.as_dict()
        device = driver.current_device() if device is None else device
        return driver.kernel_attributes(self._handle(device), device)

    def bench(self, grid: Any, block: Any, args: Sequence[Any] = (), shared_mem: int = 0,
              stream: Any = None, **options: Any) -> Any:
        """Time this launch on the GPU with CUDA events (:func:`cudamagic.launch.bench.bench`:
        ``repeat``, ``budget_s``, ``warmup``, ``flush_l2``, ``bytes``, ``flops``).

        :raises NoDeviceError: no GPU.
        """
        from . import bench as timing

        return timing.bench(self, grid, block, args, shared_mem=shared_mem, stream=stream,
                            **options)

    def occupancy(self, block_sizes: Sequence[int] | None = None,
                  dynamic_shared: Sequence[int] = (0,), **options: Any) -> Any:
        """Blocks per SM against block size (:func:`cudamagic.toolchain.occupancy.table`: the
        driver's answer on a GPU, computed from the CUBIN without one; ``sm``, ``carveout``)."""
        from ..toolchain import occupancy

        return occupancy.table(self, block_sizes or occupancy.DEFAULT_BLOCK_SIZES,
                               dynamic_shared, **options)

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), shared_mem: int = 0,
                 stream: Any = None) -> None:
        """Launch the kernel (asynchronously, on ``stream``: CuPy's current one by default).

        :raises ArgumentTypeError, ArgumentValueError: an argument, dimension, ``shared_mem``
            or ``stream`` that does not fit (checked before the launch, no GPU needed).
        :raises NoDeviceError: no CUDA device is available.
        :raises ContextPoisonedError: the context is unusable after a kernel fault.
        :raises LaunchError: the driver refused the launch.
        """
        self._any_thread(grid, block, args, shared_mem, stream)

    def _any_thread(self, grid: Any, block: Any, args: Sequence[Any] = (),
                    shared_mem: int = 0, stream: Any = None) -> None:
        """A launch through the calling thread's launcher (made on its first launch)."""
        launcher = self._launchers.get(_get_ident())
        if launcher is None:
            launcher = self._make_launcher(args, (_length(grid), _length(block)))
        launcher.run(self, grid, block, args, shared_mem, stream)

    def _make_launcher(self, sample: Any, shape: tuple[int, int] = (1, 1)) -> Launcher:
        """This thread's launcher (its own parameter buffer: threads launch concurrently);
        ``sample``, the first call's arguments, picks how ``extern "C"`` slots are packed.

        The first one made becomes the kernel's own ``__call__`` (a class of its own, made
        once per kernel): calling the kernel then runs the generated launcher directly, one
        Python call instead of three on the one hot path; other threads are sent on to theirs.
        """
        if self.params is None:
            raise LaunchError(f"{self.name_expression}: the CUBIN carries no parameter records "
                              f"for {self.symbol}; cudamagic cannot pack its arguments safely")
        sample = sample if isinstance(sample, (tuple, list)) else ()
        launcher = generate_launcher(self.name_expression, self.params, self._launch_hooks(),
                                     sample, shape)
        # by thread: a thread id reused after a thread ends takes over a dead thread's buffer
        self._launchers[_get_ident()] = launcher
        if type(self) is Kernel:
            self.__class__ = type("Kernel", (Kernel,), {"__call__": launcher.run,
                                                         "__module__": Kernel.__module__,
                                                         "__doc__": Kernel.__doc__})
        return launcher

    def __reduce__(self):
        """A kernel travels with its module (pickled once however many of its kernels go
        along, as the module's checksummed record) and is found by its name expression on
        arrival: see :meth:`cudamagic.Module.__reduce__`."""
        owner = getattr(self, "_owner", None)
        if owner is None:
            raise TypeError(f"{self.name_expression}: a kernel made outside a module cannot be "
                            "pickled")
        return _kernel_of, (owner, self.name_expression)

    def _launch_hooks(self) -> LaunchHooks:
        """The device side of a launch: CuPy's types and calls where CuPy is imported (its typed
        ``cuLaunchKernel`` binding is the cheapest from Python), the driver module's otherwise."""
        cupy = sys.modules.get("cupy")
        fast = "cupy_backends.cuda.api.driver" in sys.modules
        return LaunchHooks(
            array_type=cupy.ndarray if cupy is not None else _NoSuchType,
            stream_type=cupy.cuda.Stream if cupy is not None else _NoSuchType,
            current_device=driver.device_getter(),
            current_stream=cupy.cuda.get_current_stream if cupy is not None
            else _NullStream,
            handles=self._handles, load=self._handle,
            launch=driver.fast_launch() if fast else None,
            relaunch=self._relaunch, raise_shared_limit=self._raise_shared_limit)

    def _relaunch(self, fn: int, device: int, grid: tuple[int, int, int],
                  block: tuple[int, int, int], shared_mem: int, stream: int) -> None:
        """The checked launch after a fast one raised: nothing was launched, so a thread without
        a context gets one and a retry, and anything else the error that says what went wrong."""
        launcher = self._launchers[_get_ident()]
        driver.launch(fn, grid, block, shared_mem, stream, launcher.address, device=device,
                      what=f"launching {self.name_expression}")

    def _raise_shared_limit(self, device: int, nbytes: int) -> None:
        if self._shared_limit.get(device, 0) < nbytes:
            driver.set_max_dynamic_shared(self._handle(device), device, nbytes)
            self._shared_limit[device] = nbytes
