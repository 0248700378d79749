"""The target's C++ scalar types: one model of widths and signs for names and launches alike.

Device code has the host's data model (NVRTC follows the host ABI): LP64 on Linux (``long`` is
8 bytes), LLP64 on Windows (``long`` is 4 bytes, ``wchar_t`` an unsigned 16-bit type). ``char``
and ``wchar_t`` are signed on x86-64 Linux (NVRTC mangles ``'\\xff'`` as ``(char)-1``); on other
machines their sign is not assumed (:attr:`Scalar.signed` is None there).

Two readers: :mod:`cudamagic.cxx` (template arguments: a value converted to a type wraps to its
width) and :mod:`cudamagic.launch` (a Python number packed into a parameter slot: its range and
NumPy dtype). Both look types up here by their canonical spelling (``unsigned long``, not
``long unsigned int``; :func:`builtin_type` makes it from words).

    >>> scalar("unsigned long").size, scalar("unsigned long").dtype
    (8, 'u8')
    >>> scalar("short").wrap(70000)
    4464
    >>> TYPEDEFS["size_t"]
    'unsigned long'
"""

from __future__ import annotations

import enum
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["DataModel", "Scalar", "ScalarKind", "TARGET", "SCALARS", "INTEGERS", "TYPEDEFS", "BUILTIN_WORDS",
           "scalar", "integer", "builtin_type", "ELEMENTS"]


@dataclass(frozen=True)
class DataModel:
    """The widths and signs that differ between hosts (device code takes the host's).

    Attributes
    ----------
    name : str
        ``"LP64"`` or ``"LLP64"``.
    long_bits : int
        Width of ``long`` and ``unsigned long``.
    char_signed, wchar_signed : bool or None
        Whether ``char`` / ``wchar_t`` are signed; None where this machine's sign is not known.
    wchar_bits : int
        Width of ``wchar_t``.
    """

    name: str
    long_bits: int
    char_signed: bool | None
    wchar_bits: int
    wchar_signed: bool | None


def _host_model() -> DataModel:
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    if sys.platform == "win32":
        return DataModel("LLP64", 32, True if x86 else None, 16, False)
    return DataModel("LP64", 64, True if x86 else None, 32, True if x86 else None)


#: The data model of the machine this process runs on (and so of the device code NVRTC makes).
TARGET = _host_model()


class ScalarKind(enum.Enum):
    """What a scalar type holds, as a value reaches it."""

    BOOL = "bool"
    INT = "int"            # every integer and character type
    FLOAT = "float"        # half, float, double
    BFLOAT16 = "bfloat16"


@dataclass(frozen=True)
class Scalar:
    """One C++ arithmetic type as the target holds it.

    Attributes
    ----------
    name : str
        Canonical spelling (``unsigned long``, ``__nv_bfloat16``).
    kind : ScalarKind
    bits : int
        Value bits: 1 for bool, else 8 x size.
    size : int
        Bytes a parameter of the type takes.
    signed : bool or None
        For ints: the sign; None where the platform's sign of ``char``/``wchar_t`` is not known
        (values are then held in signed form, and :meth:`wrap` gives that form).
    dtype : str or None
        NumPy dtype code (``"i4"``, ``"u8"``, ``"?"``, ``"f2"``); None where NumPy has none
        (``__int128``, bfloat16).
    promoted : str or None
        The type integral promotion gives (``short`` -> ``int``); None where it depends on an
        unknown sign; for non-integers, the type itself.
    suffix : str or None
        The literal suffix libstdc++'s demangler writes a value of the type with (``""`` for
        int, ``"ul"`` for unsigned long); None where it writes ``(type)value``.
    """

    name: str
    kind: ScalarKind
    bits: int
    size: int
    signed: bool | None = None
    dtype: str | None = None
    promoted: str | None = None
    suffix: str | None = None

    @property
    def is_integer(self) -> bool:
        """An integer, character or bool type (template arguments of it are typed values)."""
        return self.kind is ScalarKind.INT or self.kind is ScalarKind.BOOL

    @property
    def lo(self) -> int:
        """The least value (signed form where the sign is unknown)."""
        if self.kind is ScalarKind.BOOL or self.signed is False:
            return 0
        return -(1 << (self.bits - 1))

    @property
    def hi(self) -> int:
        """The greatest value (signed form where the sign is unknown)."""
        if self.kind is ScalarKind.BOOL:
            return 1
        return (1 << self.bits) - 1 if self.signed is False else (1 << (self.bits - 1)) - 1

    def fits(self, value: int) -> bool:
        """Whether the integer ``value`` is one of the type's values."""
        return self.lo <= value <= self.hi

    def wrap(self, value: int) -> int:
        """``value`` converted to this integer type: C++'s modular wrap; to bool, ``!= 0``."""
        if self.kind is ScalarKind.BOOL:
            return int(value != 0)
        value &= (1 << self.bits) - 1
        if self.signed is not False and value >> (self.bits - 1):
            value -= 1 << self.bits
        return value


def _int(name: str, bits: int, signed: bool | None, promoted: str | None,
         suffix: str | None = None) -> Scalar:
    sign = "u" if signed is False else "i"
    dtype = f"{sign}{bits // 8}" if bits <= 64 else None
    return Scalar(name, ScalarKind.INT, bits, bits // 8, signed, dtype, promoted, suffix)


def _integers(model: DataModel) -> dict[str, Scalar]:
    # the unsigned counterpart of an unknown-sign wchar_t promotes to int only if it is narrower
    wchar_promoted = ("int" if model.wchar_bits < 32 or model.wchar_signed else
                      "unsigned int" if model.wchar_signed is False else None)
    return {s.name: s for s in (
        Scalar("bool", ScalarKind.BOOL, 1, 1, False, "?", "int"),
        _int("char", 8, model.char_signed, "int"),
        _int("signed char", 8, True, "int"),
        _int("unsigned char", 8, False, "int"),
        _int("short", 16, True, "int"),
        _int("unsigned short", 16, False, "int"),
        _int("int", 32, True, "int", ""),
        _int("unsigned int", 32, False, "unsigned int", "u"),
        _int("long", model.long_bits, True, "long", "l"),
        _int("unsigned long", model.long_bits, False, "unsigned long", "ul"),
        _int("long long", 64, True, "long long", "ll"),
        _int("unsigned long long", 64, False, "unsigned long long", "ull"),
        _int("__int128", 128, True, "__int128"),
        _int("unsigned __int128", 128, False, "unsigned __int128"),
        _int("wchar_t", model.wchar_bits, model.wchar_signed, wchar_promoted),
        _int("char8_t", 8, False, "int"),
        _int("char16_t", 16, False, "int"),
        _int("char32_t", 32, False, "unsigned int"),
    )}


def _floats() -> dict[str, Scalar]:
    return {s.name: s for s in (
        Scalar("float", ScalarKind.FLOAT, 32, 4, True, "f4", "float"),
        Scalar("double", ScalarKind.FLOAT, 64, 8, True, "f8", "double"),
        Scalar("__half", ScalarKind.FLOAT, 16, 2, True, "f2", "__half"),
        Scalar("half", ScalarKind.FLOAT, 16, 2, True, "f2", "half"),
        Scalar("__nv_bfloat16", ScalarKind.BFLOAT16, 16, 2, True, None, "__nv_bfloat16"),
        Scalar("nv_bfloat16", ScalarKind.BFLOAT16, 16, 2, True, None, "nv_bfloat16"),
    )}


#: Integer, character and bool types of the target, by canonical spelling.
INTEGERS: Mapping[str, Scalar] = MappingProxyType(_integers(TARGET))
#: Every scalar a kernel parameter can be passed as a number: INTEGERS, then the floating types
#: (CUDA's ``__half`` and ``__nv_bfloat16`` among them).
SCALARS: Mapping[str, Scalar] = MappingProxyType({**INTEGERS, **_floats()})

#: Class types of libraries whose bytes are those of a NumPy dtype, by their demangled name:
#: what an array a pointer to one takes holds (CUTLASS's ``half_t``, CuTe's ``cute::half_t``
#: being the same class, is IEEE binary16 in two bytes). Its bfloat16, tf32 and fp8 types
#: have no NumPy dtype: a pointer to one takes an array of any.
ELEMENTS: Mapping[str, str] = MappingProxyType({"cutlass::half_t": "f2"})

#: Typedefs NVRTC declares in every program (its built-in header: a cell cannot redeclare them
#: as another type), by the name a cell spells, with the type they stand for on this target.
TYPEDEFS: Mapping[str, str] = MappingProxyType({
    "size_t": "unsigned long" if TARGET.long_bits == 64 else "unsigned long long",
    "ptrdiff_t": "long" if TARGET.long_bits == 64 else "long long",
})

#: Words that together spell one builtin type (``unsigned long int`` is one type).
BUILTIN_WORDS = frozenset(
    "unsigned signed char short int long float double bool void wchar_t char8_t char16_t "
    "char32_t __int128".split())


def scalar(name: str) -> Scalar | None:
    """The scalar type of a canonical spelling (``"unsigned long"``), or None."""
    return SCALARS.get(name)


def integer(name: str) -> Scalar | None:
    """The integer (or character, or bool) type of a canonical spelling, or None."""
    return INTEGERS.get(name)


def builtin_type(words: Sequence[str]) -> str | None:
    """The canonical spelling of a run of builtin type words, or None where they spell none.

    ``["long", "unsigned", "int"]`` is ``"unsigned long"``; ``["signed"]`` is ``"int"``;
    ``["long", "double"]`` is ``"long double"``; ``["float", "int"]`` is None.
    """
    unsigned = "unsigned" in words
    signed = "signed" in words
    for base in ("char", "wchar_t", "char8_t", "char16_t", "char32_t", "float", "bool", "void"):
        if base in words:
            if base == "char" and (unsigned or signed):
                return ("unsigned " if unsigned else "signed ") + "char"
            return None if len(words) > 1 and base != "char" else base
    if "double" in words:
        return "long double" if "long" in words else "double"
    if "__int128" in words:
        return "unsigned __int128" if unsigned else "__int128"
    longs = list(words).count("long")
    base = "short" if "short" in words else ("long long" if longs >= 2 else
                                              "long" if longs == 1 else "int")
    return ("unsigned " if unsigned else "") + base
