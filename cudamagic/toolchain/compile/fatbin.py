"""Fatbins and PTX from elsewhere (``nvcc -fatbin``, ``nvcc -ptx``) made into a loadable CUBIN.

A fatbin is a container of code for several targets: a 16-byte header (magic ``0xBA55ED50``,
version 1, header size, size of what follows), then entries, each a header of its own (kind 1
PTX, 2 CUBIN; the target ``sm``; flags, ``0x8000`` when the payload is ZSTD-compressed, as nvcc
stores PTX) and its payload. :func:`read_fatbin` lists the entries without a GPU (the system's
libzstd uncompresses). The CUBIN for the target is taken as it is; without one, the PTX for the
newest target not above it is compiled by nvJitLink, as PTX text is. What nvJitLink makes is
cached by the input's content and the target (and nvJitLink's exact identity:
:func:`~cudamagic.toolchain.compile.link.nvjitlink_identity`), so a second load compiles nothing.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ...core.process import cached
from ...errors import ImageError
from ...core.options import arch_sm
from ...core.units import counted, size_text
from ..binary.elf import EM_CUDA, ET_EXEC, ET_REL, elf_machine, elf_section, elf_type, is_elf
from .link import CodeKind, LinkInput, LinkResult, link_needing_runtime
from .link import device_runtime, nvjitlink_identity
from ..binary.image import read_cubin

__all__ = ["device_runtime_globals", "FatbinEntry", "Loaded", "LinkCache", "read_fatbin", "is_fatbin", "is_ptx",
           "loadable_cubin"]

_MACHINES = {3: "x86", 62: "x86-64", 183: "AArch64", 40: "ARM", 21: "PowerPC 64"}
_MAGICS = (0xBA55ED50, 0x466243B1)  # a fatbin; the second in relocatable objects
_HEADER = struct.Struct("<IHHQ")
# kind, ?, header size, payload size (padded), compressed size, ?, minor, major, sm,
# object-name offset and length, flags, ?, uncompressed size
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")
_KINDS = {1: CodeKind.PTX, 2: CodeKind.CUBIN}
_FLAG_LZ4, _FLAG_ZSTD = 0x2000, 0x8000  # payload compression: older nvcc, nvcc 12.x and later
_FLAG_COMPRESSED = _FLAG_LZ4 | _FLAG_ZSTD


#: The largest uncompressed entry read: more than any CUBIN or PTX for one target that nvcc
#: makes (a whole CUDA library's per-target code is tens of MiB). A declared size above it is
#: refused before anything is allocated.
MAX_ENTRY_BYTES = 512 << 20

#: The most a ZSTD frame can expand its bytes: an RLE block regenerates up to 128 KiB from 4
#: bytes (its 3-byte header and the byte). A declared size past this times the payload is no
#: size that payload can hold.
ZSTD_MAX_RATIO = (128 << 10) // 4

_ZSTD_CONTENTSIZE_UNKNOWN = 2**64 - 1
_ZSTD_CONTENTSIZE_ERROR = 2**64 - 2


@cached(1)
def _libzstd():
    """The system's libzstd (Debian and Ubuntu install it with apt), or None."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getErrorName.restype = ctypes.c_char_p
    lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def checked_size(declared: int, payload: int, label: str, compressed: bool) -> int:
    """An entry's declared uncompressed size, where the payload and the target can hold it.

    :raises ImageError: larger than :data:`MAX_ENTRY_BYTES`, or than a payload of ``payload``
        bytes can expand to.
    """
    if compressed and declared > payload * ZSTD_MAX_RATIO:
        raise ImageError(f"the fatbin's {label} entry is damaged: it declares "
                         f"{size_text(declared)} uncompressed, more than its "
                         f"{size_text(payload)} compressed can hold")
    if declared > MAX_ENTRY_BYTES:
        raise ImageError(f"the fatbin's {label} entry declares {size_text(declared)} "
                         f"uncompressed, more than the {size_text(MAX_ENTRY_BYTES)} this reader "
                         f"takes for the code of one target: it is damaged or not nvcc's")
    return declared


def _zstd_decompress(payload: bytes, size: int, label: str = "compressed") -> bytes:
    """A ZSTD frame of known uncompressed size, uncompressed (never more than ``size``, which
    :func:`checked_size` bounds).

    :raises ImageError: no libzstd here, a damaged frame, a frame of another size, or no memory
        for it.
    """
    import ctypes

    lib = _libzstd()
    if lib is None:
        raise ImageError("the fatbin's entries are ZSTD-compressed and no libzstd was found to "
                         "read them: install it (apt-get install libzstd1)")
    checked_size(size, len(payload), label, True)
    framed = lib.ZSTD_getFrameContentSize(payload, len(payload))
    if framed == _ZSTD_CONTENTSIZE_ERROR:
        raise ImageError(f"the fatbin's {label} entry is damaged: its payload is not a ZSTD "
                         f"frame")
    if framed != _ZSTD_CONTENTSIZE_UNKNOWN and framed != size:
        raise ImageError(f"the fatbin's {label} entry is damaged: it declares {size} bytes "
                         f"uncompressed, its ZSTD frame {framed}")
    try:
        out = ctypes.create_string_buffer(size)
    except MemoryError:
        raise ImageError(f"the fatbin's {label} entry needs {size_text(size)} uncompressed, "
                         f"more memory than this process can have now") from None
    got = lib.ZSTD_decompress(out, size, payload, len(payload))
    if lib.ZSTD_isError(got):
        why = lib.ZSTD_getErrorName(got).decode("ascii", "replace")
        raise ImageError(f"the fatbin's {label} entry is damaged: ZSTD could not uncompress it "
                         f"({why})")
    if got != size:
        raise ImageError(f"the fatbin's {label} entry is damaged: it uncompressed to {got} "
                         f"bytes, it declares {size}")
    return out.raw[:size]


@dataclass(frozen=True)
class FatbinEntry:
    """One entry of a fatbin.

    Attributes
    ----------
    kind : CodeKind or None
        PTX or CUBIN; None for a kind this reader does not know.
    sm : int
        The target (``90``: ``sm_90`` for a CUBIN, ``compute_90`` for PTX).
    compressed : bool
        The payload is compressed (nvJitLink reads it; this module does not).
    payload : bytes
        The bytes as stored (compressed or not).
    size : int
        The uncompressed size.
    version : tuple of int
        ``(major, minor)``: the CUBIN's ELF version or the PTX ISA version.
    """

    kind: CodeKind | None
    sm: int
    compressed: bool
    payload: bytes
    size: int
    version: tuple[int, int]

    flags: int = 0
    raw_kind: int = 0

    @property
    def label(self) -> str:
        """``sm_90`` for a CUBIN, ``compute_90`` for PTX, ``kind 4 for sm_90`` for another
        kind (LTO IR, which nvJitLink links into a program and nothing loads alone)."""
        if self.kind is None:
            return f"kind {self.raw_kind} for sm_{self.sm}"
        return f"{'compute' if self.kind is CodeKind.PTX else 'sm'}_{self.sm}"

    @property
    def data(self) -> bytes:
        """The payload uncompressed (ZSTD through the system's libzstd).

        :raises ImageError: compressed in a way this reader cannot undo, or damaged.
        """
        if not self.compressed:
            return self.payload
        if self.flags & _FLAG_ZSTD:
            return _zstd_decompress(self.payload, self.size, self.label)
        raise ImageError(f"the fatbin's {self.label} entry is compressed with LZ4 (an nvcc "
                         "older than 12): rebuild it with a newer nvcc, or without compression "
                         "(-Xfatbin=-compress=false)")


def is_fatbin(data: bytes) -> bool:
    """The data starts with a fatbin header."""
    return len(data) >= 16 and struct.unpack_from("<I", data)[0] in _MAGICS


def is_ptx(data: bytes) -> bool:
    """The data is PTX text: it holds ``.version`` and ``.target`` directives, no NUL byte
    before them."""
    head = data[:65536]
    return b"\0" not in head.rstrip(b"\0") and b".version" in head and b".target" in head


def read_fatbin(data: bytes) -> tuple[FatbinEntry, ...]:
    """The entries of a fatbin (one container, or several one after another).

    :raises ImageError: not a fatbin, or truncated.
    """
    entries: list[FatbinEntry] = []
    pos = 0
    try:
        while pos + _HEADER.size <= len(data):
            magic, version, header_size, size = _HEADER.unpack_from(data, pos)
            if magic not in _MAGICS:
                if not pos:
                    raise ImageError("not a fatbin: it does not start with the fatbin magic")
                break  # what follows the last container (padding) is not ours
            if version != 1 or header_size < _HEADER.size:
                raise ImageError(f"a fatbin header of version {version}, header size "
                                 f"{header_size} (this reader knows version 1)")
            end = pos + header_size + size
            if end > len(data):
                raise ImageError(f"the fatbin is truncated: its container at {pos} runs to "
                                 f"{end}, the data ends at {len(data)}")
            at = pos + header_size
            while at + _ENTRY.size <= end:
                (kind, _, ehs, psize, csize, _, minor, major, sm, _, _, flags, _,
                 usize) = _ENTRY.unpack_from(data, at)
                if ehs < _ENTRY.size or at + ehs + psize > end:
                    raise ImageError(f"a fatbin entry at {at} runs past its container")
                compressed = bool(flags & _FLAG_COMPRESSED)
                stored = min(csize, psize) if compressed and csize else psize
                label = f"{'compute' if _KINDS.get(kind) is CodeKind.PTX else 'sm'}_{sm}"
                entries.append(FatbinEntry(
                    kind=_KINDS.get(kind), sm=sm, compressed=compressed,
                    payload=bytes(data[at + ehs:at + ehs + stored]),
                    size=checked_size(usize, stored, label, True) if compressed else stored,
                    version=(major, minor), flags=flags, raw_kind=kind))
                at += ehs + psize
            pos = end
    except struct.error as exc:
        raise ImageError(f"the fatbin is malformed ({exc})") from None
    return tuple(entries)


@dataclass(frozen=True)
class Loaded:
    """A loadable CUBIN made from what :func:`loadable_cubin` was given.

    Attributes
    ----------
    cubin : bytes
    source : CodeKind
        What the input was: a CUBIN, PTX or a fatbin.
    how : str
        In words: taken as it was, which fatbin entry, or what nvJitLink compiled.
    linked : bool
        nvJitLink made the CUBIN (now or, where ``cached``, earlier).
    cached : bool
        The CUBIN came from the cache (no link ran).
    ptx : bytes or None
        The PTX text nvJitLink compiled it from (PTX, or a fatbin's PTX entry): it declares
        each kernel's parameter types (:func:`cudamagic.toolchain.binary.ptx.entry_params`).
    """

    cubin: bytes
    source: CodeKind
    how: str
    linked: bool = False
    cached: bool = False
    ptx: bytes | None = None


def _key(kind: CodeKind, data: bytes, arch: str) -> str:
    h = hashlib.sha256()
    for part in (kind.value.encode(), arch.encode(), nvjitlink_identity().encode(), data):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return "link-" + h.hexdigest()


@dataclass(frozen=True)
class LinkCache:
    """Where :func:`loadable_cubin` keeps what nvJitLink made, given by its caller (the pipeline
    puts it over its :class:`~cudamagic.store.KernelCache`): the toolchain knows no store.

    Attributes
    ----------
    find : callable
        ``find(key)``: the CUBIN kept under ``key``, or None.
    keep : callable
        ``keep(key, result, arch)``: keep a link's result for ``arch`` under ``key``.
    """

    find: Callable[[str], bytes | None]
    keep: Callable[[str, LinkResult, str], None]


def _linked(item: LinkInput, arch: str, store: Callable[[], LinkCache | None] | None,
            what: str) -> Loaded:
    """nvJitLink's CUBIN for one input, from the cache where it is there."""
    cache = store() if store is not None else None  # opened only for what needs a link
    key = _key(item.kind, item.data, arch)
    if cache is not None:
        cubin = cache.find(key)
        if cubin is not None and elf_type(cubin) == ET_EXEC:
            return Loaded(cubin, item.kind, f"{what} (from the cache)", linked=True, cached=True,
                          ptx=item.data if item.kind is CodeKind.PTX else None)
    result = link_needing_runtime([item], arch)
    if cache is not None:
        cache.keep(key, result, arch)
    return Loaded(result.cubin, item.kind, what, linked=True,
                  ptx=item.data if item.kind is CodeKind.PTX else None)


def loadable_cubin(data: bytes, arch: str, *, label: str = "<bytes>",
                   store: Callable[[], LinkCache | None] | None = None) -> Loaded:
    """The CUBIN the driver can load for ``arch``, from a CUBIN, PTX text or a fatbin.

    A CUBIN is taken as it is (a relocatable one is linked); PTX is compiled by nvJitLink; from
    a fatbin its CUBIN for ``arch`` is taken, else its PTX for the newest target not above
    ``arch`` is compiled. ``store`` (a function returning a :class:`LinkCache` or None, called
    only where a link is needed) keeps what nvJitLink made.

    :raises ImageError: none of those, or nothing in a fatbin that can serve ``arch``.
    :raises LinkError: nvJitLink refused the PTX (its log says where).
    """
    sm = arch_sm(arch)
    if is_elf(data):
        machine = elf_machine(data)
        if machine != EM_CUDA:
            what = _MACHINES.get(machine or 0, "not a GPU")
            raise ImageError(f"{label} is an ELF file for another machine (e_machine "
                             f"{machine}, {what}), not a CUBIN: give the output of nvcc "
                             f"-cubin, -ptx or -fatbin")
        if elf_type(data) == ET_REL:
            return _linked(LinkInput(data, CodeKind.CUBIN, label), arch, store,
                           f"relocatable CUBIN linked by nvJitLink for {arch}")
        return Loaded(data, CodeKind.CUBIN, "taken as it was")
    if is_fatbin(data):
        return _from_fatbin(read_fatbin(data), data, sm, arch, label, store)
    if is_ptx(data):
        return _linked(LinkInput(data.rstrip(b"\0"), CodeKind.PTX, label), arch, store,
                       f"PTX compiled by nvJitLink for {arch}")
    raise ImageError(f"{label} is not a CUBIN (an ELF file), nor PTX text, nor a fatbin: "
                     "give the output of nvcc -cubin, -ptx or -fatbin")


def _from_fatbin(entries: tuple[FatbinEntry, ...], data: bytes, sm: int, arch: str, label: str,
                 store: Callable[[], LinkCache | None] | None) -> Loaded:
    """The code a fatbin holds for ``sm``: its CUBIN for that target (linked by nvJitLink where
    it is relocatable), else its PTX for the newest target not above it compiled by nvJitLink.

    :raises ImageError: neither is there (nothing in it runs on ``sm``).
    """
    held = _holdings([e.label for e in entries])
    exact = [e for e in entries if e.kind is CodeKind.CUBIN and e.sm == sm]
    if exact:
        cubin = exact[0].data
        if not is_elf(cubin):
            inner = "a fatbin itself (nvcc never nests them)" if is_fatbin(cubin) else \
                "not an ELF file"
            raise ImageError(f"{label}: the fatbin's sm_{sm} CUBIN entry is {inner}: it is "
                             f"damaged or not nvcc's")
        if elf_type(cubin) == ET_REL:
            return _linked(LinkInput(cubin, CodeKind.CUBIN, label), arch, store,
                           f"its relocatable sm_{sm} CUBIN linked (it holds {held})")
        return Loaded(cubin, CodeKind.FATBIN, f"its sm_{sm} CUBIN (it holds {held})")
    ptx = sorted((e for e in entries if e.kind is CodeKind.PTX and e.sm <= sm), key=lambda e: e.sm)
    if ptx:
        return _linked(LinkInput(ptx[-1].data.rstrip(b"\0"), CodeKind.PTX, label), arch, store,
                       f"its {ptx[-1].label} PTX compiled for {arch} (it holds {held})")
    other = [e.label for e in entries if e.kind is None]
    neither = (f"; {_holdings(other)} is neither PTX nor a CUBIN (LTO IR from "
               f"code=lto_{sm} is one such: it is linked into a program, never loaded alone)"
               if other else "")
    raise ImageError(f"{label}: nothing in the fatbin runs on {arch}: it holds {held} (a "
                     f"CUBIN runs on its own target only here, PTX on its target and newer)"
                     f"{neither}; rebuild it with -gencode arch=compute_{sm},code=sm_{sm}")


#: The most targets a message lists of a fatbin's entries (the rest are counted)
SHOWN_TARGETS = 12


def _holdings(labels: list[str]) -> str:
    """What a fatbin holds, in words of bounded length: each target once, in order, with its
    count where it repeats, the first :data:`SHOWN_TARGETS` of them (a 6 MB fatbin can hold
    100 000 entries)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    if not counts:
        return "nothing"
    shown = [label if n == 1 else f"{label} ({counted(n, 'entry', 'entries')})"
             for label, n in list(counts.items())[:SHOWN_TARGETS]]
    more = len(counts) - SHOWN_TARGETS
    return ", ".join(shown) + (f" and {counted(more, 'other target')}" if more > 0 else "")


def _archive_members(data: bytes) -> list[bytes]:
    """The members of a Unix ``ar`` archive (``!<arch>``), in order."""
    members, pos = [], 8
    while data.startswith(b"!<arch>\n") and pos + 60 <= len(data):
        size = int(data[pos + 48:pos + 58])
        members.append(data[pos + 60:pos + 60 + size])
        pos += 60 + size + (size & 1)
    return members


@cached(1)
def device_runtime_globals() -> frozenset[str]:
    """The variables the device runtime library (``libcudadevrt.a``) defines: what a link with
    it adds to a cell's own variables (its error tables, its ``printf`` strings), read from the
    library's own relocatable CUBINs; empty when the library is missing or cannot be read."""
    path = device_runtime()
    names: set[str] = set()
    try:
        for obj in _archive_members(path.read_bytes() if path else b""):
            fatbin = elf_section(obj, b"__nv_relfatbin")
            for entry in read_fatbin(fatbin) if fatbin else ():
                if entry.kind is CodeKind.CUBIN:
                    names.update(g.name for g in read_cubin(entry.data).globals)
    except (OSError, ValueError, struct.error, ImageError):
        return frozenset()
    return frozenset(names)
