"""What PTX declares about each kernel's parameters: the ``.param`` type of every slot.

PTX names a type for each parameter of an ``.entry`` (``.param .u32 k_param_3``,
``.param .f32 ...``, ``.param .align 8 .b8 k_param_5[16]`` for a struct), which a CUBIN built from
it no longer says: a kernel loaded from PTX (``nvcc -ptx``, a fatbin's PTX entry) takes Python
numbers where its slots are declared numbers. The compilers lower C++ integers by width alone
(``int`` and ``unsigned`` are both ``.u32``), so an integer slot's sign is not known: a value of
either reading fits. Pure: no CUDA.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["PtxType", "PtxParam", "entry_params"]


class PtxType(enum.Enum):
    """A PTX fundamental type of a ``.param`` (its spelling without the dot)."""

    U8, U16, U32, U64 = "u8", "u16", "u32", "u64"
    S8, S16, S32, S64 = "s8", "s16", "s32", "s64"
    F16, F32, F64 = "f16", "f32", "f64"
    B8, B16, B32, B64 = "b8", "b16", "b32", "b64"

    @property
    def width(self) -> int:
        """Its size in bytes."""
        return int(self.value[1:]) // 8

    @property
    def integer(self) -> bool:
        return self.value[0] in "us"

    @property
    def signed(self) -> bool:
        return self.value[0] == "s"

    @property
    def floating(self) -> bool:
        return self.value[0] == "f"


@dataclass(frozen=True)
class PtxParam:
    """One ``.param`` of an entry: its type, and the element count of an array (``.b8 p[16]``
    is a 16-byte struct or vector by value); ``count`` is 1 for a scalar."""

    type: PtxType
    count: int = 1

    @property
    def size(self) -> int:
        return self.type.width * self.count


_COMMENT = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(([^)]*)\)")
_PARAM = re.compile(rb"^\.param((?:\s+\.\w+(?:\s+\d+)?)*?)\s+\.([a-z]\d+)\s+[A-Za-z_$%][\w$%]*"
                    rb"\s*(?:\[\s*(\d+)\s*\])?$")
_TYPES = {t.value.encode(): t for t in PtxType}


def entry_params(ptx: bytes) -> dict[str, tuple[PtxParam, ...] | None]:
    """Each ``.entry``'s parameters as PTX declares them, by the entry's name (the symbol).

    An entry whose parameter list this reader does not follow (a type it does not know, an
    unsized array) maps to None: its slots stay untyped, never guessed.
    """
    text = _COMMENT.sub(b" ", ptx)
    return {m.group(1).decode("utf-8", "replace"): _params(m.group(2).strip())
            for m in _ENTRY.finditer(text)}


def _params(body: bytes) -> tuple[PtxParam, ...] | None:
    """The parameters of one entry's list, or None where one is not understood."""
    params: list[PtxParam] = []
    for decl in (body.split(b",") if body else []):
        p = _PARAM.match(decl.strip())
        kind = _TYPES.get(p.group(2)) if p else None
        if p is None or kind is None:
            return None
        params.append(PtxParam(kind, int(p.group(3)) if p.group(3) else 1))
    return tuple(params)
