"""The ELF file format as cudamagic reads it: the header's fields (a CUBIN's checked), the
section-header layout, and one named section of any 64-bit ELF file (a host object's
``__nv_relfatbin`` in ``libcudadevrt.a``). :mod:`.image` reads a CUBIN's tables with these
(and its symbol tables' views); :mod:`~cudamagic.toolchain.compile.fatbin`, :mod:`~cudamagic.toolchain.compile.link` and the pipeline ask here."""

from __future__ import annotations

import struct

from ...errors import ImageError

__all__ = ["EM_CUDA", "ET_REL", "ET_EXEC", "is_elf", "elf_machine", "elf_type", "elf_header",
           "section_header", "section_headers", "elf_section"]

#: ``e_machine`` of a CUBIN
EM_CUDA = 190

#: an ELF image's ``e_type``: relocatable (``-rdc``'s output) and executable
ET_REL, ET_EXEC = 1, 2

#: One 64-bit section header: name, type, flags, address, offset, size, link, info, alignment,
#: entry size
_SECTION = struct.Struct("<IIQQQQIIQQ")


def is_elf(data: bytes) -> bool:
    """The data starts as an ELF file does."""
    return data[:4] == b"\x7fELF"


def elf_machine(data: bytes) -> int | None:
    """``e_machine`` of an ELF file (190 for a CUBIN), None for what is not one."""
    if len(data) < 20 or not is_elf(data):
        return None
    return struct.unpack_from("<H", data, 18)[0]


def elf_type(image: bytes) -> int | None:
    """``e_type`` of an ELF image (1 relocatable, 2 executable), None for anything else."""
    if len(image) < 18 or not is_elf(image):
        return None
    return struct.unpack_from("<H", image, 16)[0]


def elf_header(data: bytes) -> tuple[int, int, int, int]:
    """``(e_flags, e_shoff, e_shnum, e_shstrndx)`` of an ELF header checked to be a CUBIN's."""
    if len(data) < 64 or not is_elf(data):
        raise ImageError("not a CUBIN: the data does not start with an ELF header")
    if data[4] != 2 or data[5] != 1:
        raise ImageError("not a CUBIN: only 64-bit little-endian ELF files are CUDA images")
    e_machine = elf_machine(data)
    if e_machine != EM_CUDA:
        raise ImageError(f"not a CUBIN: ELF machine {e_machine}, a CUDA image has {EM_CUDA}")
    (e_flags,) = struct.unpack_from("<I", data, 48)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    if e_shentsize != 64 or e_shoff + e_shnum * 64 > len(data):
        raise ImageError("the CUBIN is truncated: its section table lies past the end")
    if e_shstrndx >= e_shnum:  # checked here: the section names are read only on first use
        raise ImageError(f"the CUBIN is malformed: its section-name table is section "
                         f"{e_shstrndx} of {e_shnum}")
    return e_flags, e_shoff, e_shnum, e_shstrndx


def section_header(data: bytes, e_shoff: int, i: int) -> tuple[int, ...]:
    """Section ``i``'s header fields, in the order of :data:`_SECTION`."""
    return _SECTION.unpack_from(data, e_shoff + _SECTION.size * i)


def section_headers(data: bytes, e_shoff: int, e_shnum: int) -> list[tuple[int, ...]]:
    """Every section's header fields (:func:`section_header`'s), in order."""
    return list(_SECTION.iter_unpack(data[e_shoff:e_shoff + e_shnum * _SECTION.size]))


def elf_section(data: bytes, name: bytes) -> bytes | None:
    """The named section of a 64-bit little-endian ELF file of any machine, None when it has
    none (or is no such file)."""
    if not is_elf(data) or data[4:6] != b"\x02\x01" or len(data) < 64:  # 64-bit, LE
        return None
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, shstrndx = struct.unpack_from("<HH", data, 60)
    heads = section_headers(data, shoff, shnum)
    names = heads[shstrndx][4]
    for head in heads:
        start = names + head[0]
        if data[start:data.index(b"\0", start)] == name:
            return data[head[4]:head[4] + head[5]]
    return None
