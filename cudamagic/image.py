"""Reading a CUBIN without a GPU: its kernels (ELF symbol table) and their parameter records.

A CUBIN is an ELF64 file for the CUDA machine (EM_CUDA, 190). Each kernel is a FUNC symbol with
the CUDA entry bit in ``st_other`` (GLOBAL binding for ``extern "C"`` and ordinary functions, WEAK
for template instances), and each has a section ``.nv.info.<symbol>`` whose EIATTR_KPARAM_INFO
records give every parameter's ordinal, offset and size: the same numbers the driver's
``cuFuncGetParamInfo`` reports. This module is pure Python: no CUDA.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from .errors import ImageError

__all__ = ["Param", "KernelImage", "CubinImage", "read_cubin"]

_EM_CUDA = 190
_SHT_SYMTAB = 2
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10
_EIATTR_KPARAM_INFO = 0x17
# .nv.info record formats: the byte before the attribute
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the CUBIN records it."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class KernelImage:
    """One kernel of a CUBIN.

    Attributes
    ----------
    symbol : str
        The mangled name (or the plain name of an ``extern "C"`` kernel).
    info : bytes or None
        Its ``.nv.info.<symbol>`` section, read into :attr:`params` on first use (a restore of
        1000 kernels reads only those that are called).
    params : tuple of Param or None
        Parameters in ordinal order; None where the CUBIN carries no parameter records.
    """

    symbol: str
    info: bytes | None = None

    @functools.cached_property
    def params(self) -> tuple[Param, ...] | None:
        """Parameters in ordinal order; None where the CUBIN carries no parameter records.

        :raises ImageError: the records are malformed.
        """
        return _kparams(self.info) if self.info is not None else None


@dataclass(frozen=True)
class CubinImage:
    """The kernels of one CUBIN, in symbol-table order, and the target it was built for."""

    kernels: tuple[KernelImage, ...]
    sm: int | None

    @property
    def symbols(self) -> tuple[str, ...]:
        """Every kernel's symbol."""
        return tuple(k.symbol for k in self.kernels)

    @functools.cached_property
    def _by_symbol(self) -> dict[str, KernelImage]:
        return {k.symbol: k for k in self.kernels}

    def kernel(self, symbol: str) -> KernelImage:
        """The kernel with this symbol.

        :raises KeyError: no kernel has that symbol.
        """
        return self._by_symbol[symbol]


def _cstr(blob: bytes, offset: int) -> str:
    end = blob.find(b"\0", offset)
    if end < 0:
        raise ImageError("a string table entry runs past the end of its section")
    return blob[offset:end].decode("utf-8", "replace")


def read_cubin(data: bytes) -> CubinImage:
    """List the kernels of a CUBIN from its ELF symbol table.

    Parameters
    ----------
    data : bytes
        The CUBIN's bytes.

    Returns
    -------
    CubinImage

    :raises ImageError: not a 64-bit little-endian ELF file for a CUDA device, or malformed.
    """
    try:
        return _read(memoryview(data).tobytes() if not isinstance(data, bytes) else data)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ImageError(f"the CUBIN is malformed or truncated ({exc})") from None


def _read(data: bytes) -> CubinImage:
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ImageError("not a CUBIN: the data does not start with an ELF header")
    if data[4] != 2 or data[5] != 1:
        raise ImageError("not a CUBIN: only 64-bit little-endian ELF files are CUDA images")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    if e_machine != _EM_CUDA:
        raise ImageError(f"not a CUBIN: ELF machine {e_machine}, a CUDA image has {_EM_CUDA}")
    (e_flags,) = struct.unpack_from("<I", data, 48)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    if e_shentsize != 64 or e_shoff + e_shnum * 64 > len(data):
        raise ImageError("the CUBIN is truncated: its section table lies past the end")

    sections = []
    # one C loop over the section table (a CUBIN of 1000 kernels has 4000 sections)
    for i, (name, stype, _flags, _addr, off, size, link, _info, _align, entsize) in enumerate(
            struct.iter_unpack("<IIQQQQIIQQ", data[e_shoff:e_shoff + e_shnum * 64])):
        if stype != 8 and off + size > len(data):  # 8: SHT_NOBITS holds no bytes
            raise ImageError(f"the CUBIN is truncated: section {i} lies past the end")
        sections.append((name, stype, off, size, link, entsize))
    shstr = _section_bytes(data, sections[e_shstrndx])
    names = _strings(shstr, [s[0] for s in sections])

    index_of = {name: i for i, name in enumerate(names)}
    kernels: list[KernelImage] = []
    for sec in sections:
        if sec[1] != _SHT_SYMTAB:
            continue
        symtab = _section_bytes(data, sec)
        strtab = _section_bytes(data, sections[sec[4]])
        entries = [e for e in struct.iter_unpack("<IBBHQQ", symtab[:len(symtab) // 24 * 24])
                   if e[1] & 0xF == _STT_FUNC and e[3] != 0 and e[2] & _STO_CUDA_ENTRY]
        for symbol in _strings(strtab, [e[0] for e in entries]):
            info_index = index_of.get(".nv.info." + symbol)
            kernels.append(KernelImage(symbol, None if info_index is None
                                       else _section_bytes(data, sections[info_index])))
    sm = (e_flags >> 8) & 0xFF if e_flags >> 8 & 0xFF else None
    return CubinImage(tuple(kernels), sm)


def _strings(table: bytes, offsets: list[int]) -> list[str]:
    """The NUL-terminated strings of a string table at these offsets (one split, then a
    lookup per offset; an offset into the middle of a string is read on its own)."""
    starts: dict[int, str] = {}
    pos = 0
    for raw in table.split(b"\0")[:-1]:  # an unterminated tail is no string (_cstr says so)
        starts[pos] = raw.decode("utf-8", "replace")
        pos += len(raw) + 1
    return [starts[o] if o in starts else _cstr(table, o) for o in offsets]


def _section_bytes(data: bytes, sec: tuple) -> bytes:
    _name, _stype, off, size, _link, _entsize = sec
    return data[off:off + size]


def _kparams(info: bytes) -> tuple[Param, ...]:
    """Parameter records of one ``.nv.info.<symbol>`` section."""
    params: dict[int, Param] = {}
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr = info[pos], info[pos + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", info, pos + 2)
            body = info[pos + 4:pos + 4 + size]
            if len(body) < size:
                raise ImageError("a parameter record runs past the end of its section")
            if attr == _EIATTR_KPARAM_INFO and size >= 12:
                _index, ordinal, offset, flags = struct.unpack_from("<IHHI", body)
                params[ordinal] = Param(ordinal, offset, (flags >> 18) & 0x3FFF)
            pos += 4 + size
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            pos += 4
        else:
            raise ImageError(f"unknown .nv.info record format {fmt}")
    ordered = tuple(params[k] for k in sorted(params))
    if ordered and [p.ordinal for p in ordered] != list(range(len(ordered))):
        raise ImageError("the parameter records of a kernel skip an ordinal")
    return ordered
