"""A module's ``__constant__`` and ``__device__`` variables: listed from the CUBIN, typed from
the cell's declarations, and on a GPU viewed as device arrays (``__cuda_array_interface__``).

The CUBIN gives each variable's symbol, size and memory (:class:`~.image.GlobalImage`); C++
mangling does not encode a variable's type, so the type comes from the cell's own declaration
(``__constant__ float coeffs[16];``) where it is a plain arithmetic type or an array of one, and
is kept only where its size agrees with the CUBIN's. Anything else is bytes, or the dtype the
caller gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import NameResolutionError
from .image import GlobalImage

__all__ = ["Variable", "DeviceGlobal", "declared_types", "variables"]

# C++ spellings of the arithmetic types and their NumPy dtype names
_CTYPES = {
    "float": "float32", "double": "float64", "bool": "bool",
    "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "short int": "int16", "unsigned short": "uint16",
    "unsigned short int": "uint16", "int": "int32", "signed": "int32", "signed int": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "long": "int64", "long int": "int64",
    "unsigned long": "uint64", "unsigned long int": "uint64", "long long": "int64",
    "long long int": "int64", "unsigned long long": "uint64", "unsigned long long int": "uint64",
    "int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
    "uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
    "size_t": "uint64", "ptrdiff_t": "int64", "__half": "float16", "half": "float16",
}
_TYPE = "|".join(sorted((re.escape(t) for t in _CTYPES), key=len, reverse=True))
_DECL = re.compile(
    r"(?:__constant__|__device__)(?:\s+(?:static|const|volatile|__managed__|__device__|"
    r"__constant__))*\s+(?:(?:cuda::)?(?:std::)?)(?P<type>" + _TYPE + r")\s+(?P<name>[A-Za-z_]\w*)"
    r"(?P<dims>(?:\s*\[\s*\d+\s*\])*)\s*[;=]")


def declared_types(source: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (NumPy dtype name, shape) of each variable the source declares with a plain
    arithmetic type at file or namespace scope (``__device__ double table[3][5];``)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for m in _DECL.finditer(source):
        dims = tuple(int(d) for d in re.findall(r"\d+", m.group("dims")))
        out.setdefault(m.group("name"), (_CTYPES[m.group("type")], dims))
    return out


@dataclass(frozen=True)
class Variable:
    """One variable of a module, as ``module.globals`` lists it.

    Attributes
    ----------
    name : str
        The symbol (``coeffs``; ``_ZN2ns5scaleE`` for ``ns::scale``).
    cxx_name : str
        Its C++ name (``ns::scale``), the symbol where it is not mangled.
    size : int
        Bytes, from the CUBIN.
    space : str
        ``"constant"`` or ``"global"``.
    dtype : str or None
        NumPy dtype name where the declaration's type is known and agrees with ``size``.
    shape : tuple of int
        ``()`` for a scalar, the array's extents otherwise (``(size,)`` bytes when untyped).
    """

    name: str
    cxx_name: str
    size: int
    space: str
    dtype: str | None
    shape: tuple[int, ...]


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def variables(images: tuple[GlobalImage, ...], source: str,
              demangled: dict[str, str]) -> tuple[Variable, ...]:
    """The module's variables with their types where the source declares them."""
    types = declared_types(source) if source else {}
    out = []
    for g in images:
        cxx = demangled.get(g.name, g.name)
        dtype, shape = types.get(cxx.rsplit("::", 1)[-1], (None, ()))
        count = 1
        for d in shape:
            count *= d
        if dtype is None or _itemsize(dtype) * count != g.size:
            dtype, shape = None, (g.size,)
        out.append(Variable(g.name, cxx, g.size, g.space, dtype, shape))
    return tuple(out)


def find(found: tuple[Variable, ...], name: str) -> Variable:
    """The variable with this symbol, or else this C++ name.

    :raises NameResolutionError: none, saying which there are.
    """
    for v in found:
        if v.name == name:
            return v
    matches = [v for v in found if v.cxx_name == name]
    if len(matches) == 1:
        return matches[0]
    held = ", ".join(v.cxx_name for v in found) or "none"
    raise NameResolutionError(f"this module holds no __constant__ or __device__ variable named "
                              f"{name!r} (its variables: {held})")


class DeviceGlobal:
    """A variable's device memory on one device, as an array view CuPy, PyTorch and Numba take
    (``cupy.asarray(module.get_global("coeffs"))``).

    Attributes
    ----------
    variable : Variable
    ptr : int
        The device address (``cuLibraryGetGlobal`` in the device's context).
    device : int
    dtype, shape
        Of the view (the variable's, or the caller's dtype over its bytes).
    """

    def __init__(self, variable: Variable, ptr: int, device: int, dtype: Any,
                 owner: Any) -> None:
        import numpy as np

        self.variable = variable
        self.ptr = ptr
        self.device = device
        self.dtype = np.dtype(dtype if dtype is not None else variable.dtype or "uint8")
        if dtype is None and variable.dtype is not None:
            self.shape = variable.shape
        else:
            if variable.size % self.dtype.itemsize:
                from ..errors import ArgumentValueError

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
                f"{self.dtype}{list(self.shape)} at 0x{self.ptr:x} on device {self.device}>")
