"""A module's ``__constant__`` and ``__device__`` variables: listed from the CUBIN, typed by
the compiler, and on a GPU viewed as device arrays (``__cuda_array_interface__``).

The CUBIN gives each variable's symbol, size and memory (:class:`~.image.GlobalImage`); C++
mangling does not encode a variable's type, so the type is what NVRTC said in the compile that
made the CUBIN (:mod:`~cudamagic.toolchain.compile.probe`), stored with the entry and carried by a module that travels.
A variable the compiler was not asked about, or whose element NumPy has no dtype for, is
bytes, with the reason (:class:`TypeGap`); nothing is read from the source text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.process import cached
from ...errors import NameResolutionError
from .image import GlobalImage

__all__ = ["device_global", "Variable", "Variables", "DeviceGlobal", "VarType", "TypeGap",
           "variables", "find", "plain_name", "strip_internal"]


class TypeGap(enum.Enum):
    """Why a variable has no dtype (its bytes are shown, never a guess)."""

    NOT_ASKED = "not-asked"          # not declared in the cell's own text (a header, a macro)
    NOT_ARITHMETIC = "not-arithmetic"  # a class, a pointer to member, a type NumPy has no dtype for
    NO_SOURCE = "no-source"          # a CUBIN from elsewhere: no compiler to ask
    SIZE = "size"                    # the compiler's type and the CUBIN's size disagree


@dataclass(frozen=True)
class VarType:
    """A variable's type as the compiler gave it.

    Attributes
    ----------
    ctype : str or None
        The C++ type as the demangler spells the compiler's answer (``float [8]``); None where
        none was asked or answered.
    dtype : str or None
        The NumPy dtype name of its element, where the element is an arithmetic type.
    shape : tuple of int
        The array's extents (``()`` for a scalar, or an array of unknown bound).
    gap : TypeGap or None
        Why ``dtype`` is None.
    """

    ctype: str | None
    dtype: str | None
    shape: tuple[int, ...] = ()
    gap: TypeGap | None = None

    def to_json(self) -> list[object]:
        return [self.ctype, self.dtype, list(self.shape), self.gap.value if self.gap else None]

    @classmethod
    def from_json(cls, value: object) -> "VarType":
        """:raises ValueError: not what :meth:`to_json` writes."""
        if not (isinstance(value, list) and len(value) == 4):
            raise ValueError("a variable's type is not a list of 4")
        ctype, dtype, shape, gap = value
        if not (ctype is None or isinstance(ctype, str)) or not (
                dtype is None or isinstance(dtype, str)) or not isinstance(shape, list) or \
                not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40
                        for d in shape) or len(shape) > 32:
            raise ValueError("a variable's type has fields of the wrong type")
        if dtype is not None and dtype not in _KNOWN_DTYPES:
            raise ValueError(f"a variable's dtype {dtype!r} is not one cudamagic writes")
        return cls(ctype, dtype, tuple(shape), TypeGap(gap) if gap is not None else None)


# the dtypes of the builtin types' one-letter Itanium codes, and of CUDA's own scalar classes
BUILTIN_DTYPES = {"f": "float32", "d": "float64", "b": "bool", "c": "int8", "a": "int8",
            "h": "uint8", "s": "int16", "t": "uint16", "i": "int32", "j": "uint32",
            "l": "int64", "m": "uint64", "x": "int64", "y": "uint64", "Ds": "uint16",
            "Di": "uint32", "Du": "uint8", "DF16_": "float16", "6__half": "float16"}
_KNOWN_DTYPES = frozenset(BUILTIN_DTYPES.values())


def strip_internal(text: str) -> str:
    """A demangled name without NVRTC's per-program namespace for internal entities
    (``_INTERNAL_00000000_7_cell_cu_k::fl`` is the static ``fl``), and with an anonymous
    namespace spelled one way whichever demangler wrote it."""
    return re.sub(r"^_INTERNAL_[0-9A-Za-z_]*::", "", text).replace("<unnamed>", "(anonymous namespace)")



@dataclass(frozen=True)
class Variable:
    """One variable of a module, as ``module.globals`` lists it.

    Attributes
    ----------
    name : str
        The symbol (``coeffs``; ``_ZN2ns5scaleE`` for ``ns::scale``).
    cxx_name : str
        Its C++ name (``ns::scale``; ``(anonymous namespace)::b::a`` whichever demangler), the
        symbol where it is not mangled.
    size : int
        Bytes, from the CUBIN.
    space : str
        ``"constant"`` or ``"global"``.
    dtype : str or None
        NumPy dtype name of the element, where the compiler's type has one (a pointer is
        ``uint64``: its value is an address).
    shape : tuple of int
        ``()`` for a scalar, the array's extents otherwise (``(size,)`` bytes when untyped).
    ctype : str or None
        The C++ type as the compiler gave it (``float [8]``), where it was asked.
    gap : TypeGap or None
        Why ``dtype`` is None.
    """

    name: str
    cxx_name: str
    size: int
    space: str
    dtype: str | None
    shape: tuple[int, ...]
    ctype: str | None = None
    gap: TypeGap | None = None


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def _typed(g: GlobalImage, t: VarType) -> tuple[str | None, tuple[int, ...], TypeGap | None]:
    """(dtype, shape, gap) of a variable whose type the compiler gave, checked against the
    CUBIN's size (an array of unknown bound takes its extent from the size)."""
    if t.dtype is None:
        return None, (g.size,), t.gap or TypeGap.NOT_ARITHMETIC
    item = _itemsize(t.dtype)
    count = 1
    for d in t.shape:
        count *= d
    if item * count == g.size:
        return t.dtype, t.shape, None
    if t.ctype is not None and t.ctype.endswith("[]") and not t.shape and g.size % item == 0:
        return t.dtype, (g.size // item,), None
    return None, (g.size,), TypeGap.SIZE


def variables(images: tuple[GlobalImage, ...], types: Mapping[str, VarType] | None,
              demangled: Mapping[str, str | None]) -> Variables:
    """The module's variables, typed where the compiler said the type (``types`` by symbol;
    None: a CUBIN from elsewhere, with no compile to ask)."""
    out = []
    for g in images:
        cxx = strip_internal(demangled.get(g.name) or g.name)  # too long: its symbol
        t = types.get(g.name) if types is not None else None
        if t is None:
            gap = TypeGap.NOT_ASKED if types is not None else TypeGap.NO_SOURCE
            out.append(Variable(g.name, cxx, g.size, g.space, None, (g.size,), None, gap))
            continue
        dtype, shape, why = _typed(g, t)
        out.append(Variable(g.name, cxx, g.size, g.space, dtype, shape, t.ctype, why))
    return Variables(out)


#: Variables a repr names; the rest are counted
SHOWN = 8


class Variables(tuple):
    """``module.globals``: the module's variables, a tuple of :class:`Variable` in the CUBIN's
    order (as before), also looked up by name: ``module.globals["coeffs"]`` (a symbol, a C++
    name, with or without its anonymous namespaces), ``"coeffs" in module.globals``, ``.get``.
    Its repr names the first few and counts the rest (a CCCL cell holds a thousand)."""

    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, str):
            return find(self, key)
        return super().__getitem__(key)

    def get(self, name: str, default: Any = None) -> Any:
        """The variable of that name, or ``default``."""
        try:
            return find(self, name)
        except NameResolutionError:
            return default

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            return self.get(key) is not None
        return super().__contains__(key)

    @property
    def names(self) -> tuple[str, ...]:
        """Their C++ names, in order."""
        return tuple(v.cxx_name for v in self)

    def __repr__(self) -> str:
        shown = ", ".join(self.names[:SHOWN])
        more = len(self) - SHOWN
        return (f"<{len(self)} variable{'s' if len(self) != 1 else ''}"
                + (f": {shown}" if self else "") + (f" and {more} more" if more > 0 else "")
                + ">")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


_ANONYMOUS = "(anonymous namespace)::"


def plain_name(cxx_name: str) -> str:
    """A C++ name without its anonymous namespaces (``b::a`` for
    ``(anonymous namespace)::b::a``), the name code in the same file uses."""
    return cxx_name.replace(_ANONYMOUS, "")


def find(found: tuple[Variable, ...], name: str,
         expressions: Mapping[str, str] | None = None) -> Variable:
    """The variable with this symbol, C++ name (with or without its anonymous namespaces and
    a leading ``::``), or name expression (``&z::tv<float>``, with or without the ``&``).

    :raises NameResolutionError: none, or several, saying which there are.
    """
    if not isinstance(name, str):
        raise NameResolutionError(f"a variable is looked up by its name, a str, not "
                                  f"{type(name).__name__} {name!r:.60}")
    by_symbol = {v.name: v for v in found}
    if name in by_symbol:
        return by_symbol[name]
    expressions = expressions or {}
    stripped = name.strip()
    for key in (stripped, "&" + stripped, stripped[1:].strip() if stripped.startswith("&")
                else None):
        for expr, symbol in expressions.items():
            if key is not None and expr.strip() == key and symbol in by_symbol:
                return by_symbol[symbol]
    bare = stripped[1:].strip() if stripped.startswith("&") else stripped
    bare = bare[2:].lstrip() if bare.startswith("::") else bare  # ::ns::w names ns::w
    for test in (lambda v: v.cxx_name == bare, lambda v: plain_name(v.cxx_name) == bare):
        matches = [v for v in found if test(v)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise NameResolutionError(
                f"{name!r:.200} names {len(matches)} variables of this module ("
                + ", ".join(v.cxx_name for v in matches) + "): give the symbol ("
                + ", ".join(v.name for v in matches) + ")")
    more = len(found) - 10
    held = (", ".join(v.cxx_name for v in found[:10]) or "none") + (
        f" and {more} more" if more > 0 else "")
    raise NameResolutionError(f"this module holds no __constant__ or __device__ variable named "
                              f"{name!r:.200} (its variables: {held})")


class DeviceGlobal:
    """A variable's device memory on one device, as an array view CuPy, PyTorch and Numba take
    (``cupy.asarray(module.get_global("coeffs"))``).

    Where CuPy is installed, :func:`device_global` makes it a ``cupy.cuda.MemoryPointer`` as
    well (what CuPy's ``RawModule.get_global`` returns), so that ported code's
    ``cupy.ndarray(shape, dtype, module.get_global("x"))`` runs unchanged; ``device`` is then
    CuPy's ``Device`` (as a ``MemoryPointer``'s is) and ``device_id`` the number either way.

    Attributes
    ----------
    variable : Variable
    ptr : int
        The device address (``cuLibraryGetGlobal`` in the device's context).
    device : int (cupy.cuda.Device with CuPy)
    device_id : int
    dtype, shape
        Of the view (the variable's, or the caller's dtype over its bytes).
    """

    def __init__(self, variable: Variable, ptr: int, device: int, dtype: Any,
                 owner: Any) -> None:
        self.ptr = ptr
        self.device = device
        self.device_id = device
        self._view(variable, dtype, owner)

    def _view(self, variable: Variable, dtype: Any, owner: Any) -> None:
        import numpy as np

        self.variable = variable
        self.dtype = np.dtype(dtype if dtype is not None else variable.dtype or "uint8")
        if dtype is None and variable.dtype is not None:
            self.shape = variable.shape
        else:
            if variable.size % self.dtype.itemsize:
                from ...errors import ArgumentValueError

                raise ArgumentValueError(
                    f"{variable.cxx_name} is {variable.size} bytes, not a whole number of "
                    f"{self.dtype} ({self.dtype.itemsize} bytes each)")
            self.shape = (variable.size // self.dtype.itemsize,)
        self._owner = owner  # the module: its CUBIN stays loaded while the view lives

    @property
    def nbytes(self) -> int:
        """The variable's size in bytes."""
        return self.variable.size

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Version 3 of the CUDA array interface (no stream: the memory is the module's)."""
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def __repr__(self) -> str:
        return (f"<cudamagic.DeviceGlobal {self.variable.cxx_name} {self.variable.space} "
                f"{self.dtype}{list(self.shape)} at 0x{self.ptr:x} on device {self.device_id}>")


def device_global(variable: Variable, ptr: int, device: int, dtype: Any,
                  owner: Any) -> DeviceGlobal:
    """The view of a variable's memory: a :class:`DeviceGlobal` that is also CuPy's
    ``MemoryPointer`` (over ``UnownedMemory`` of the variable's size, holding ``owner``: the
    CUBIN stays loaded while CuPy's arrays over it live) where CuPy imports, else a plain one."""
    pointer = _memory_pointer_view()
    if pointer is None:
        return DeviceGlobal(variable, ptr, device, dtype, owner)
    return pointer(variable, ptr, device, dtype, owner)


@cached(1)
def _memory_pointer_view() -> type | None:
    try:
        from cupy.cuda import memory
    except Exception:  # noqa: BLE001 - no CuPy, or one that cannot load: the plain view
        return None

    class DeviceGlobalPointer(DeviceGlobal, memory.MemoryPointer):
        __doc__ = DeviceGlobal.__doc__

        def __init__(self, variable: Variable, ptr: int, device: int, dtype: Any,
                     owner: Any) -> None:
            # ptr, device and device_id are the MemoryPointer's own (read-only) attributes
            memory.MemoryPointer.__init__(
                self, memory.UnownedMemory(ptr, variable.size, owner, device), 0)
            self._view(variable, dtype, owner)

    DeviceGlobalPointer.__name__ = DeviceGlobalPointer.__qualname__ = "DeviceGlobal"
    return DeviceGlobalPointer
