"""A kernel's parameter table: one row per parameter, how values reach it.

Built once per kernel from the CUBIN's parameter records (offset and size,
:mod:`cudamagic.toolchain.binary.image`) and the demangled signature (the C++ type, where the kernel
has one): a :class:`ParamSpec` per parameter. The checked path (:mod:`.encode`) and the
generated launcher (:mod:`.launcher`) both read it, and nothing else decides an encoding.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.process import cached, InTest
from ..cxx import SCALARS, Signature, tidy_name
from ..cxx.types import ELEMENTS
from ..errors import LaunchError
from ..toolchain.binary.image import KernelImage
from ..toolchain.binary.ptx import PtxParam, PtxType

__all__ = ["ParamSpec", "SlotKind", "param_specs", "layout_error", "pointer_size_error", "tidy_type",
           "type_text", "POINTER_BYTES"]


_COMPLEX = re.compile(r"(?:^|::)complex<(float|double)>$")
INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_NP_INTS = tuple(dict.fromkeys(np.dtype(c).type for c in "bBhHiIlLqQ"))  # distinct types


class SlotKind(enum.Enum):
    """How values reach a parameter slot (the value is the word messages use)."""

    POINTER = "pointer"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"          # half, float, double
    BFLOAT16 = "bfloat16"
    COMPLEX = "complex"
    VALUE = "value"          # a struct or vector type by value: its bytes
    UNTYPED = "untyped"      # no signature: packed by the slot's size


@dataclass(frozen=True)
class ParamSpec:
    """One row of a kernel's parameter table: where a parameter lies and how values reach it.

    Attributes
    ----------
    index, offset, size : int
        Position, byte offset in the parameter buffer, byte size (from the CUBIN).
    ctype : str or None
        Canonical C++ type from the signature; None where the kernel has none (``extern "C"``).
    kind : SlotKind
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
    kind: SlotKind
    dtype: np.dtype | None = None
    const: bool = False
    lo: int | None = None
    hi: int | None = None
    code: str = ""
    direct: tuple[tuple[type, str], ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """``parameter 2 (float*)``-style text for messages."""
        shown = tidy_type(self.ctype) if self.ctype else f"{self.size} bytes, no C++ type"
        return f"parameter {self.index} ({shown})"

    def direct_code(self, value: Any) -> str | None:
        """The ``struct`` code that packs ``value`` as it is, or None (the converter's turn)."""
        t = type(value)
        for typ, code in self.direct:
            if t is typ and (not nan_checked(typ, code) or value == value):
                return code
        return None


def nan_checked(typ: type, code: str) -> bool:
    """Whether a direct entry packs NaNs differently from NumPy: ``struct`` widens a float32 to
    a double and back, which turns a signalling NaN quiet, so float32 NaNs take the converter
    (their own bytes)."""
    return typ is np.float32 and code == "f"


def _direct_entries(kind: SlotKind, dtype: np.dtype | None, size: int) -> tuple[tuple[type, str], ...]:
    """The types a slot packs without conversion, most common first (the generated launcher
    tests them in this order); every entry is exact (the property tests check each)."""
    if kind is SlotKind.INT and dtype is not None:
        code = INT_CODES[dtype.itemsize].upper() if dtype.kind == "u" else INT_CODES[size]
        first = (int, dtype.type, bool)
        return tuple((t, code) for t in dict.fromkeys(first + _NP_INTS))
    if kind is SlotKind.BOOL:
        return ((bool, "?"), (np.bool_, "?"))
    if kind is SlotKind.FLOAT and dtype is not None and dtype.itemsize == 4:
        return ((float, "f"), (np.float32, "f"), (int, "f"), (bool, "f"))
    if kind is SlotKind.FLOAT and dtype is not None and dtype.itemsize == 8:
        return ((float, "d"), (np.float64, "d"), (int, "d"), (np.float32, "d"), (bool, "d"))
    if kind is SlotKind.UNTYPED and size in INT_CODES:
        i = INT_CODES[size]
        # a Python number packs directly only where its size tells int from float (1, 8 bytes)
        python: list[tuple[type, str]] = [(int, i), (bool, i)] if size in (1, 8) else []
        ints = python + [(np.dtype(f"i{size}").type, i), (np.dtype(f"u{size}").type, i.upper())]
        floats: dict[int, list[tuple[type, str]]] = {4: [(np.float32, "f")],
                                                     8: [(float, "d"), (np.float64, "d")]}
        # long long and long are one width but two NumPy types on Linux
        longlong: list[tuple[type, str]] = [(np.longlong, "q"), (np.ulonglong, "Q")] \
            if size == 8 else []
        return tuple(dict.fromkeys(ints + floats.get(size, []) + longlong))
    # half, bfloat16, complex, structs: the converter; pointers: the launcher reads CuPy arrays
    # itself (_arg_lines), everything else through the converter
    return ()


def param_specs(image: KernelImage, signature: Signature | None,
                declared: Sequence[PtxParam] | None = None) -> tuple[ParamSpec, ...] | None:
    """The parameter table of a kernel: the CUBIN's records and, where it matches, the signature;
    without one, the types its PTX ``declared`` (a kernel loaded from PTX), where they match the
    records slot by slot.

    Returns None where the CUBIN carries no parameter records (nothing can be checked).
    """
    if image.params is None:
        return None
    types: Sequence[str | None] = [None] * len(image.params)
    if signature is not None and signature.params is not None \
            and len(signature.params) == len(image.params):
        types = signature.params
    elif declared is not None and len(declared) == len(image.params) \
            and all(d.size == p.size for d, p in zip(declared, image.params)):
        return tuple(_declared_spec(p.ordinal, p.offset, p.size, d.type if d.count == 1 else None)
                     for p, d in zip(image.params, declared))
    return tuple(_spec(p.ordinal, p.offset, p.size, ctype)
                 for p, ctype in zip(image.params, types))


def _declared_spec(index: int, offset: int, size: int, ptx: PtxType | None) -> ParamSpec:
    """A slot whose PTX type is known (:class:`~cudamagic.toolchain.binary.ptx.PtxType`): an integer
    of 1, 2 or 4 bytes takes a value of either sign's range (PTX does not keep the sign of a C++
    integer: ``int`` and ``unsigned`` are both ``.u32``), ``.f32``/``.f64`` a float; 8-byte
    integers (pointers are ``.u64`` too), bit types and arrays stay untyped."""
    if ptx is not None and ptx.floating and ptx.width in (4, 8):
        dtype = np.dtype(f"f{ptx.width}")
        direct = _direct_entries(SlotKind.FLOAT, dtype, size)
        return ParamSpec(index, offset, size, None, SlotKind.FLOAT, dtype=dtype,
                         code=direct[0][1], direct=direct)
    if ptx is not None and ptx.integer and ptx.width in (1, 2, 4):
        bits = 8 * ptx.width
        lo, hi = -(1 << (bits - 1)), (1 << (bits - (1 if ptx.signed else 0))) - 1
        dtype = np.dtype(f"{'i' if ptx.signed else 'u'}{ptx.width}")
        direct = _direct_entries(SlotKind.INT, dtype, size)
        return ParamSpec(index, offset, size, None, SlotKind.INT, dtype=dtype, lo=lo, hi=hi,
                         code=direct[0][1], direct=direct)
    return _spec(index, offset, size, None)


def _spec(index: int, offset: int, size: int, ctype: str | None) -> ParamSpec:
    """One row of the table (see :class:`ParamSpec`)."""
    if ctype is None:
        return ParamSpec(index, offset, size, ctype, SlotKind.UNTYPED,
                         code=INT_CODES.get(size, ""),
                         direct=_direct_entries(SlotKind.UNTYPED, None, size))
    if ctype.endswith("*") or ctype.endswith("*__restrict__"):
        pointee = ctype.rsplit("*", 1)[0].strip()
        const = pointee.endswith("const")
        base = pointee[:-len("const")].strip() if const else pointee
        return ParamSpec(index, offset, size, ctype, SlotKind.POINTER, dtype=_numpy_dtype(base),
                         const=const, code="Q")
    kind, code, width, lo, hi = _scalar_form(ctype)
    if kind is SlotKind.VALUE or width != size:
        return ParamSpec(index, offset, size, ctype, SlotKind.VALUE)
    dtype = np.dtype(code) if code else None
    direct = _direct_entries(kind, dtype, size)
    return ParamSpec(index, offset, size, ctype, kind, dtype=dtype, lo=lo, hi=hi,
                     code=direct[0][1] if direct else "", direct=direct)


def _scalar_form(ctype: str) -> tuple[SlotKind, str | None, int, int | None, int | None]:
    """``(kind, NumPy dtype code, size, lo, hi)`` of a canonical C++ type: a scalar from the
    one C++ type model (:data:`cudamagic.cxx.SCALARS`: widths and signs of the target), a
    ``complex<float/double>``, else ``("value", None, 0, None, None)`` (a struct by value)."""
    m = _COMPLEX.search(ctype)
    if m:
        return (SlotKind.COMPLEX, "c8", 8, None, None) if m.group(1) == "float" \
            else (SlotKind.COMPLEX, "c16", 16, None, None)
    scalar = SCALARS.get(ctype)
    if scalar is None:
        return SlotKind.VALUE, None, 0, None, None
    kind = SlotKind[scalar.kind.name]  # a scalar's slot is of its own kind
    if scalar.is_integer:
        return kind, scalar.dtype, scalar.size, scalar.lo, scalar.hi
    return kind, scalar.dtype, scalar.size, None, None


def _numpy_dtype(ctype: str) -> np.dtype | None:
    """The NumPy dtype of a canonical C++ type, where it has one (a pointer's pointee: a
    scalar, or a library's class of a dtype's bytes, :data:`cudamagic.cxx.types.ELEMENTS`)."""
    code = _scalar_form(ctype)[1] or ELEMENTS.get(ctype)
    return np.dtype(code) if code else None


@cached(1024, test=InTest.KEPT)
def tidy_type(ctype: str) -> str:
    """A C++ type as messages show it: library-internal inline namespaces left out
    (``thrust::THRUST_300102_SM_900_NS::complex<float>`` is ``thrust::complex<float>``,
    ``cuda::std::__4::complex`` ``cuda::std::complex``), as the build report shows them
    (:func:`cudamagic.cxx.tidy_name`, the one rule)."""
    return tidy_name(ctype)


def type_text(spec: ParamSpec) -> str:
    """The type a value must fit, for messages: the parameter's C++ type, or for an
    ``extern "C"`` slot (no C++ type) the slot as it is used (``a 4-byte float slot``)."""
    if spec.ctype is not None:
        return tidy_type(spec.ctype)
    article = "an" if str(spec.size).startswith("8") or spec.size in (11, 18) else "a"
    return f"{article} {spec.size}-byte {spec.kind.value} slot"


POINTER_BYTES = 8  # a device address: every target NVRTC compiles for is 64-bit


def layout_error(kernel: str, specs: Sequence[ParamSpec]) -> LaunchError | None:
    """Why the CUBIN's parameter records cannot be launched through, or None.

    Records that overlap, and a pointer parameter the record gives other than 8 bytes (a foreign
    or damaged CUBIN: the address would be cut to part of itself), are refused before any
    argument is packed.
    """
    pos = 0
    for spec in sorted(specs, key=lambda s: s.offset):
        if spec.offset < pos:
            return LaunchError(f"{kernel}: the CUBIN's parameter records overlap (parameter "
                               f"{spec.index} at offset {spec.offset}); it cannot be launched")
        if spec.kind is SlotKind.POINTER and spec.size != POINTER_BYTES:
            return pointer_size_error(kernel, spec)
        pos = spec.offset + spec.size
    return None


def pointer_size_error(kernel: str, spec: ParamSpec) -> LaunchError:
    """The refusal of a pointer parameter whose record is not 8 bytes."""
    return LaunchError(f"{kernel}: {spec.describe()}: the CUBIN's record gives this pointer "
                       f"{spec.size} bytes, not {POINTER_BYTES}: a device address would be cut "
                       "to part of itself, so it is refused (the CUBIN is damaged or was built "
                       "for a 32-bit target; rebuild it with NVRTC or nvcc for this GPU)")
