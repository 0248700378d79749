"""Reading a CUBIN without a GPU: its kernels, their parameter records and their resources.

A CUBIN is an ELF64 file for the CUDA machine (EM_CUDA, 190). Each kernel is a FUNC symbol with
the CUDA entry bit in ``st_other`` (GLOBAL binding for ``extern "C"`` and ordinary functions, WEAK
for template instances), and each has a section ``.nv.info.<symbol>`` whose EIATTR_KPARAM_INFO
records give every parameter's ordinal, offset and size: the same numbers the driver's
``cuFuncGetParamInfo`` reports. The resources the driver reports as function attributes are in
the ELF too (:class:`KernelResources`), and so is how a kernel must be launched
(:class:`LaunchNeeds`: grid-wide synchronisation, thread-block clusters) and the module's
``__constant__`` and ``__device__`` variables (:class:`GlobalImage`). This module is pure
Python: no CUDA.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ...errors import ImageError
from ...core.forksafe import once
from .elf import elf_header, section_header, section_headers

#: What every identifier the type probe adds to a compile begins with
#: (:mod:`cudamagic.toolchain.compile.probe`): a symbol holding it is the probe's, not the cell's.
PROBE_MARK = "__cudamagic_"

__all__ = ["Param", "KernelImage", "KernelResources", "LaunchNeeds", "GridSyncTable", "GlobalImage",
           "CubinImage", "read_cubin", "sm_of_flags", "elf_sm", "undefined_globals", "block_limits"]

_SHT_SYMTAB = 2
_STT_OBJECT, _STT_FUNC = 1, 2
_STT_CUDA_OBJECT = 13  # a variable's symbol type in relocatable (-rdc) CUBINs
_SHT_CUDA_CALLGRAPH = 0x70000001
_STO_CUDA_ENTRY = 0x10
_SHT_NOBITS = 8
_EIATTR_KPARAM_INFO = 0x17
# per-function records of the CUBIN-wide .nv.info section, each (symbol index, value); codes as
# cuobjdump names them (checked against its output for a CUBIN with local arrays and recursion)
_EIATTR_FRAME_SIZE, _EIATTR_MIN_STACK_SIZE, _EIATTR_REGCOUNT = 0x11, 0x12, 0x2F
_PER_FUNCTION = frozenset((_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE, _EIATTR_MIN_STACK_SIZE))
# per-kernel records of a kernel's own .nv.info.<symbol> section (names as cuobjdump prints them)
EIATTR_MAX_THREADS = 0x05            # __launch_bounds__'s first argument, as (x, y, z)
_EIATTR_COOP_GROUP_INSTR_OFFSETS = 0x28  # the code offsets of cooperative-groups barriers
_EIATTR_CTA_PER_CLUSTER = 0x3D        # __cluster_dims__(x, y, z)
_EIATTR_EXPLICIT_CLUSTER = 0x3E       # the kernel must be launched with a cluster
_EIATTR_NUM_BARRIERS = 0x4C            # named barriers used (cuobjdump's code)
# the low 12 bits of a sm_70+ instruction word that say BPT (the trap of __trap()), the same on
# sm_75, sm_80, sm_90, sm_100 and sm_120 (read off NVRTC's CUBINs: tests/test_image.py)
_OPCODE_MASK, _OPCODE_BPT = 0xFFF, 0x95C
# .nv.info record formats: the byte before the attribute
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


# the device runtime's own kernels (memset/memcpy helpers) that libcudadevrt.a brings into a
# linked CUBIN: internal to it (static, in its source file cuda_device_runtime.cu)
DEVRT_KERNEL = "_cuda_device_runtime_cu_"


def from_device_runtime(symbol: str) -> bool:
    """A kernel the device runtime library brought into the link (not the user's)."""
    return symbol.startswith("__nv_static_") and DEVRT_KERNEL in symbol


def device_runtime_kernels(symbols: Sequence[str]) -> frozenset[str]:
    """The kernels among ``symbols`` that the device runtime brought in
    (:func:`from_device_runtime`); all the names searched at once first, as a CUBIN nearly
    always has none."""
    if DEVRT_KERNEL not in "\0".join(symbols):
        return frozenset()
    return frozenset(s for s in symbols if from_device_runtime(s))


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the CUBIN records it."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class KernelResources:
    """What a kernel uses per thread and per block, as the CUBIN records it.

    The names are those of :meth:`cudamagic.Kernel.attributes`, whose values the driver reads from
    these same records when it loads the CUBIN (tests/test_gpu.py compares them on a GPU).

    Attributes
    ----------
    registers : int
        Registers per thread: the EIATTR_REGCOUNT record (sm_90 and later keep it only there),
        else bits 24-31 of the ``.text.<symbol>`` section's ``sh_info`` (older targets).
    static_shared_bytes : int
        Size of the ``.nv.shared.<symbol>`` section (``__shared__`` arrays), less the 1 KiB
        that sm_90 CUBINs reserve at its start (``.nv.shared.reserved.0``), as the driver
        counts it.
    const_bytes : int
        Size of ``.nv.constant3``, the CUBIN's ``__constant__`` variables (bank 0 holds the
        driver's area and the parameters; the driver does not count it).
    local_bytes : int
        The stack frame per thread (EIATTR_FRAME_SIZE): local arrays and register spills.
    """

    registers: int
    static_shared_bytes: int
    const_bytes: int
    local_bytes: int

    def as_dict(self) -> dict[str, int]:
        """The four values by name, as :meth:`cudamagic.Kernel.attributes` gives them."""
        return {"registers": self.registers, "static_shared_bytes": self.static_shared_bytes,
                "const_bytes": self.const_bytes, "local_bytes": self.local_bytes}


@dataclass(frozen=True)
class GridSyncTable:
    """Which kernels of one CUBIN synchronise the grid, as the PTX it was compiled from says
    (:func:`cudamagic.toolchain.binary.ptx.grid_syncs`), for :class:`LaunchNeeds`; kept beside it.

    Attributes
    ----------
    syncing : frozenset of str
        The kernels that synchronise the grid.
    unknown : frozenset of str
        The kernels the PTX could not tell about (or did not hold: the device runtime's in a
        linked CUBIN): their CUBIN's records decide. Every other kernel does not.
    """

    syncing: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()

    def of(self, symbol: str) -> bool | None:
        """The kernel synchronises the grid; None where the PTX did not tell."""
        return None if symbol in self.unknown else symbol in self.syncing

    def to_json(self) -> dict[str, list[str]]:
        return {"syncing": sorted(self.syncing), "unknown": sorted(self.unknown)}

    @classmethod
    def from_json(cls, value: object) -> "GridSyncTable":
        """The table an entry stored.

        :raises ValueError: not of the shape :meth:`to_json` gives.
        """
        if not isinstance(value, dict) or set(value) != {"syncing", "unknown"} or not all(
                isinstance(v, list) and all(isinstance(s, str) for s in v)
                for v in value.values()):
            raise ValueError(f"not a grid-sync table: {value!r:.80}")
        return cls(frozenset(value["syncing"]), frozenset(value["unknown"]))


@dataclass(frozen=True)
class LaunchNeeds:
    """How a kernel must be launched, as its CUBIN records it.

    Attributes
    ----------
    grid_sync : bool or None
        The kernel (or a function it calls) synchronises the whole grid
        (``cooperative_groups::this_grid().sync()`` or ``barrier_arrive``): it must be launched
        cooperatively (``cuLaunchCooperativeKernel``), with a grid that fits on the device at
        once. No record says so by name; it is read as two that hold together only for grid
        synchronisation: ptxas lists the code offsets of cooperative-groups barriers
        (EIATTR_COOP_GROUP_INSTR_OFFSETS, also present for ``this_thread_block().sync()``), and
        ``grid_group::sync`` traps (``__trap()``) when the grid was not launched cooperatively,
        which a block-level barrier never does. Where the PTX the CUBIN was compiled from was
        read (a compile's, a PTX input's: :class:`GridSyncTable`), it decides instead: the code
        reads the driver's grid workspace and can abort. None where neither can tell: a debug
        (``-G``) CUBIN with cooperative-groups barriers and no PTX read, whose unoptimised code
        keeps traps on paths an optimised build removes.
    cluster_dims : tuple of int or None
        ``__cluster_dims__(x, y, z)`` as compiled (EIATTR_CTA_PER_CLUSTER); None without.
    requires_cluster : bool
        The kernel must be launched with a cluster (EIATTR_EXPLICIT_CLUSTER):
        ``__cluster_dims__`` with or without dimensions.
    max_threads : tuple of int or None
        ``__launch_bounds__``'s maximum threads per block (EIATTR_MAX_THREADS), as (x, y, z).
    """

    grid_sync: bool | None = False
    cluster_dims: tuple[int, int, int] | None = None
    requires_cluster: bool = False
    max_threads: tuple[int, int, int] | None = None


_FROM_ELF = object()  # a KernelImage's info not given: read from its CUBIN


@dataclass(frozen=True)
class GlobalImage:
    """One ``__constant__`` or ``__device__`` variable of a CUBIN (an ELF OBJECT symbol).

    Attributes
    ----------
    name : str
        Its symbol: the plain name for a variable at namespace scope, the mangled one inside a
        namespace or for a variable template's instance (``_Z4scaleIfE``).
    size : int
        Bytes.
    space : str
        ``"constant"`` (``.nv.constant3``) or ``"global"`` (``.nv.global``, zero-initialised,
        or ``.nv.global.init``, with an initialiser).
    offset : int
        Its place in its section.
    initialized : bool
        It has an initialiser in the CUBIN (``.nv.global.init`` or a constant bank with bytes).
    """

    name: str
    size: int
    space: str
    offset: int
    initialized: bool


class KernelImage:
    """One kernel of a CUBIN, its records read on first use (a restore of 1000 kernels reads
    only those that are called or shown).

    Attributes
    ----------
    symbol : str
        The mangled name (or the plain name of an ``extern "C"`` kernel).
    info : bytes or None
        Its ``.nv.info.<symbol>`` section (None: there is none), read into :attr:`params`.
    params : tuple of Param or None
        Parameters in ordinal order; None where the CUBIN carries no parameter records.
    resources : KernelResources or None
        Registers, shared, constant and local memory; None for a kernel made without its CUBIN.
    """

    def __init__(self, symbol: str, info: "bytes | None | object" = _FROM_ELF,
                 symbol_index: int = -1, elf: "_Elf | None" = None,
                 grid_sync: bool | None = None) -> None:
        self.symbol = symbol
        self.symbol_index = symbol_index
        self.elf = elf
        self.grid_sync = grid_sync  # what the PTX said (None: the CUBIN's records decide)
        if info is not _FROM_ELF:  # given: the property below is never asked
            self.__dict__["info"] = info

    def __repr__(self) -> str:
        return f"KernelImage({self.symbol!r}, symbol_index={self.symbol_index})"

    @once
    def info(self) -> bytes | None:
        """Its ``.nv.info.<symbol>`` section, or None."""
        return self.elf.info(self.symbol) if self.elf is not None else None

    @once
    def params(self) -> tuple[Param, ...] | None:
        """Parameters in ordinal order; None where the CUBIN carries no parameter records.

        :raises ImageError: the records are malformed.
        """
        return _kparams(self.info) if self.info is not None else None

    @once
    def resources(self) -> KernelResources | None:
        """Registers, shared, constant and local memory as the CUBIN records them (read on
        first use).

        :raises ImageError: the records are malformed.
        """
        return self.elf.resources(self.symbol, self.symbol_index) if self.elf else None

    @once
    def prints(self) -> bool:
        """The kernel or a function it calls writes to the device's output buffer: ``printf``
        or a failing ``assert`` (the device runtime's ``vprintf`` / ``__assertfail``, undefined
        symbols the CUBIN's call graph reaches)."""
        return self.elf is not None and not self.elf.externals_reached(
            self.symbol_index).isdisjoint(("vprintf", "__assertfail"))

    @once
    def launch(self) -> LaunchNeeds:
        """How the kernel must be launched (grid synchronisation, clusters), read on first use.

        :raises ImageError: the records are malformed.
        """
        if self.elf is None:
            return LaunchNeeds()
        return self.elf.launch_needs(self.symbol, self.symbol_index, self.info, self.grid_sync)


class CubinImage:
    """The kernels of one CUBIN, in symbol-table order, and the target it was built for.

    Only the symbol table is read when it is made (:attr:`symbols`, :attr:`sm`); each kernel's
    records (:meth:`kernel`), the module's variables (:attr:`globals`) and the section names
    they need are read on first use. :attr:`grid_sync` is what the PTX it was compiled from
    says of its kernels' grid synchronisation (None: it was not read).
    """

    def __init__(self, symbols: tuple[str, ...], indices: tuple[int, ...], sm: int | None,
                 elf: "_Elf", grid_sync: "GridSyncTable | None" = None) -> None:
        self.symbols = symbols
        self.sm = sm
        self._indices = indices
        self._elf = elf
        self._made: dict[str, KernelImage] = {}
        self.grid_sync = grid_sync

    def with_grid_sync(self, table: "GridSyncTable | None") -> "CubinImage":
        """The same CUBIN with what its PTX said of grid synchronisation (a new image: one
        whose kernels were made keeps their answers)."""
        return CubinImage(self.symbols, self._indices, self.sm, self._elf, table)

    def __repr__(self) -> str:
        return f"<CubinImage sm_{self.sm}, {len(self.symbols)} kernels>"

    @once
    def _index(self) -> dict[str, int]:
        return dict(zip(self.symbols, self._indices))

    @once
    def kernels(self) -> tuple[KernelImage, ...]:
        """Every kernel's records, in symbol-table order."""
        return tuple(self.kernel(s) for s in self.symbols)

    @once
    def globals(self) -> tuple[GlobalImage, ...]:
        """The module's ``__constant__`` and ``__device__`` variables (without those the type
        probe adds to a compile, :mod:`~cudamagic.toolchain.compile.probe`: their names hold
        ``__cudamagic_``)."""
        return tuple(g for g in self._elf.globals() if PROBE_MARK not in g.name)

    def kernel(self, symbol: str) -> KernelImage:
        """The kernel with this symbol (one object per symbol, whichever thread asks first).

        :raises KeyError: no kernel has that symbol.
        """
        made = self._made.get(symbol)
        if made is None:
            said = self.grid_sync.of(symbol) if self.grid_sync is not None else None
            made = self._made.setdefault(symbol, KernelImage(symbol, symbol_index=self._index[
                symbol], elf=self._elf, grid_sync=said))
        return made

    def global_(self, name: str) -> GlobalImage:
        """The ``__constant__``/``__device__`` variable with this symbol.

        :raises KeyError: no variable has that symbol.
        """
        return {g.name: g for g in self.globals}[name]


_RESERVED_SHARED = 1024  # shared memory the system reserves per block (sm_80 and later)
_SEARCHED_LOOKUPS = 16  # sections found by searching the name table before it is indexed


class _Elf:
    """The section table of one CUBIN, for what is read lazily (records, resources, variables):
    the section names and the tables are parsed on first use."""

    def __init__(self, data: bytes, e_shoff: int, e_shstrndx: int, symtabs: tuple[int, ...],
                 spans: "dict[str, list[int]]") -> None:
        self.data = data
        self._shoff, self._shnum, self._shstrndx = e_shoff, len(spans["offset"]), e_shstrndx
        self._symtabs = symtabs
        self._spans = spans  # per section, as _read found them: name, type, offset, size, link
        self._lookups = 0  # sections looked up by name (a count: a race only miscounts)

    def _span(self, i: int) -> bytes:
        """Section ``i``'s bytes, without the full table."""
        offset = self._spans["offset"][i]
        return self.data[offset:offset + self._spans["size"][i]]

    def elf_header(self, i: int) -> tuple:
        """``(name offset, type, offset, size, link, entsize, info)`` of section ``i``."""
        name, stype, _flags, _addr, off, size, link, info, _align, entsize = \
            section_header(self.data, self._shoff, i)
        return (name, stype, off, size, link, entsize, info)

    @once
    def _shstr(self) -> bytes:
        return self._span(self._shstrndx)

    @once
    def _by_name_offset(self) -> dict[int, int]:
        """Where a section's name starts in the section-name table -> the section (the last,
        where two share it)."""
        return {at: i for i, at in enumerate(self._spans["name"])}

    @once
    def _by_name(self) -> dict[bytes, int]:
        """Section name -> the section (the last of a name), from one pass over the table."""
        table = self._shstr
        starts: dict[int, bytes] = {}
        at = 0
        for raw in table.split(b"\0")[:-1]:  # each NUL-terminated name and where it starts
            starts[at] = raw
            at += len(raw) + 1
        out: dict[bytes, int] = {}
        for i, at in enumerate(self._spans["name"]):
            name = starts.get(at)
            if name is None:  # a name kept as the tail of a longer one
                end = table.find(b"\0", at)
                if end < 0:
                    continue
                name = table[at:end]
            out[name] = i
        return out

    def _index(self, name: str) -> int | None:
        """The section with this name (the last, as in a table by name). The first few lookups
        search the section-name table (a CUBIN of 1000 kernels has 3000 sections, and a launch
        asks for one or two): each place the name ends with a NUL there, that a section's name
        starts at; more lookups (a report's rows) build the table by name once."""
        want = name.encode("utf-8", "surrogateescape")
        self._lookups += 1
        if self._lookups > _SEARCHED_LOOKUPS:
            return self._by_name.get(want)
        want += b"\0"
        table, found = self._shstr, None
        at = table.find(want)
        while at >= 0:
            i = self._by_name_offset.get(at)
            if i is not None and (found is None or i > found):
                found = i
            at = table.find(want, at + 1)
        return found

    def info(self, symbol: str) -> bytes | None:
        """A kernel's ``.nv.info.<symbol>`` section, or None."""
        return self._info(symbol)

    def globals(self) -> tuple[GlobalImage, ...]:
        """The OBJECT symbols of every symbol table that live in constant or global memory
        (only the sections such symbols are in are named: a CUBIN of many kernels has few)."""
        name_at = self._spans["name"]
        out: list[GlobalImage] = []
        for i in self._symtabs:
            symtab = self._span(i)
            words = memoryview(symtab[:len(symtab) // 24 * 24])
            meta = words.cast("I")[1::6].tolist()  # st_info | st_other << 8 | st_shndx << 16
            picked = [j for j, m in enumerate(meta) if m & 0xF in (_STT_OBJECT, _STT_CUDA_OBJECT)
                      and 0 < m >> 16 < self._shnum]
            if not picked:
                continue
            where = {meta[j] >> 16 for j in picked}
            names = dict(zip(where, strings_at(self._shstr, [name_at[k] for k in where])))
            picked = [j for j in picked if names[meta[j] >> 16] in _VARIABLE_SECTIONS]
            longs = words.cast("Q")  # per symbol: (name, info...), st_value, st_size
            values, sizes = longs[1::3].tolist(), longs[2::3].tolist()
            strings = words.cast("I")[0::6].tolist()
            texts = strings_at(self._span(self._spans["link"][i]), [strings[j] for j in picked])
            # .nv.global holds no bytes (NOBITS, or a CUDA section type of that meaning in -rdc)
            out += [GlobalImage(text, sizes[j], _VARIABLE_SECTIONS[section], values[j],
                                section != ".nv.global")
                    for j, text, section in zip(picked, texts,
                                                (names[meta[j] >> 16] for j in picked))]
        return tuple(out)

    def section(self, name: str) -> tuple | None:
        """The section with this name (:meth:`elf_header`'s tuple), or None."""
        i = self._index(name)
        return None if i is None else self.elf_header(i)

    @once
    def per_symbol(self) -> dict[int, dict[int, int]]:
        """symbol index -> {attribute: value} from the CUBIN-wide ``.nv.info`` section."""
        out: dict[int, dict[int, int]] = {}
        sec = self.section(".nv.info")
        if sec is None:
            return out
        data = _section_bytes(self.data, sec)
        # nearly always (symbol, value) records of 12 bytes: (fmt | attr << 8 | size << 16,
        # symbol, value) as columns of ints, no tuple per record (as globals() reads words)
        if len(data) % 12 == 0:
            words = memoryview(data).cast("I")
            heads = words[0::3].tolist()
            if all(h & 0xFF == _EIFMT_SVAL and h >> 16 == 8 for h in heads):
                for head, sym, value in zip(heads, words[1::3].tolist(), words[2::3].tolist()):
                    if (head >> 8) & 0xFF in _PER_FUNCTION:
                        out.setdefault(sym, {})[(head >> 8) & 0xFF] = value
                return out
        for fmt, attr, body in info_records(data):
            if fmt == _EIFMT_SVAL and len(body) >= 8 and attr in _PER_FUNCTION:
                sym, value = struct.unpack_from("<II", body)
                out.setdefault(sym, {})[attr] = value
        return out

    @once
    def functions(self) -> dict[int, str]:
        """symbol index -> name of every FUNC symbol (kernels and the functions they call)."""
        out: dict[int, str] = {}
        sec = self.section(".symtab")
        if sec is None:
            return out
        symtab, strtab = _section_bytes(self.data, sec), self._span(sec[4])
        entries = [(j, e[0]) for j, e in enumerate(
            struct.iter_unpack("<IBBHQQ", symtab[:len(symtab) // 24 * 24]))
            if e[1] & 0xF == _STT_FUNC and e[3] != 0]
        return dict(zip((j for j, _ in entries), strings_at(strtab, [o for _, o in entries])))

    @once
    def callees(self) -> dict[int, set[int]]:
        """caller -> callees by symbol index, from ``.nv.callgraph`` (functions not inlined:
        ``__noinline__``, ``-G``, relocatable code)."""
        out: dict[int, set[int]] = {}
        for i, stype in enumerate(self._spans["type"]):
            if stype == _SHT_CUDA_CALLGRAPH:
                graph = self._span(i)
                for caller, callee in struct.iter_unpack("<II", graph[:len(graph) // 8 * 8]):
                    if callee < 0xFFFFFF00:  # the section opens with markers (0, -1), (0, -2)...
                        out.setdefault(caller, set()).add(callee)
        return out

    @once
    def externals(self) -> dict[int, str]:
        """symbol index -> name of every undefined FUNC symbol (``vprintf``, ``malloc``): the
        device runtime's functions the code calls."""
        sec = self.section(".symtab")
        if sec is None:
            return {}
        symtab, strtab = _section_bytes(self.data, sec), self._span(sec[4])
        entries = [(j, e[0]) for j, e in enumerate(
            struct.iter_unpack("<IBBHQQ", symtab[:len(symtab) // 24 * 24]))
            if e[1] & 0xF == _STT_FUNC and e[3] == 0 and e[0]]
        return dict(zip((j for j, _ in entries), strings_at(strtab, [o for _, o in entries])))

    def externals_reached(self, symbol_index: int) -> set[str]:
        """The undefined functions a kernel calls, directly or through its callees (the
        call graph's edges, ``.nv.callgraph``)."""
        if not self.callees:
            return set()
        return {self.externals[i] for i in self._reached(symbol_index) if i in self.externals}

    def _reached(self, symbol_index: int) -> set[int]:
        """A function and every function it calls, directly or not, by symbol index."""
        seen, todo = {symbol_index}, [symbol_index]
        while todo:
            for callee in self.callees.get(todo.pop(), ()):
                if callee not in seen:
                    seen.add(callee)
                    todo.append(callee)
        return seen

    def reachable(self, symbol_index: int) -> list[str]:
        """The names of a kernel and of every function it calls, directly or not."""
        return [self.functions[i] for i in sorted(self._reached(symbol_index))
                if i in self.functions]

    def _traps(self, name: str) -> bool:
        text = self.section(".text." + name)
        if text is None:
            return False
        code = _section_bytes(self.data, text)
        code = code[:len(code) // 16 * 16]
        # each 16-byte instruction's low 12 bits: its first byte, and the low half of its
        # second; the first bytes are searched in C, the candidates checked one by one
        first, second = code[0::16], code[1::16]
        low, high = _OPCODE_BPT & 0xFF, _OPCODE_BPT >> 8
        i = first.find(low)
        while i >= 0:
            if second[i] & (_OPCODE_MASK >> 8) == high:
                return True
            i = first.find(low, i + 1)
        return False

    def launch_needs(self, symbol: str, symbol_index: int, info: bytes | None,
                     grid_sync: bool | None = None) -> LaunchNeeds:
        """One kernel's launch requirements (see :class:`LaunchNeeds` for the records);
        ``grid_sync``: what the PTX said (None: read from the CUBIN)."""
        try:
            own = {attr: body for _, attr, body in info_records(info or b"")}
            if grid_sync is not None:
                return self._needs(own, grid_sync)
            # a kernel that calls nothing is its own call graph (the function table is every
            # FUNC symbol's name); the code is scanned only where a grid barrier could be
            names = self.reachable(symbol_index) if symbol_index in self.callees else [symbol]
            barriers = False
            for name in names:
                sec = info if name == symbol else self._info(name)
                if sec is not None and any(a == _EIATTR_COOP_GROUP_INSTR_OFFSETS
                                           for _, a, _ in info_records(sec)):
                    barriers = True
            traps = barriers and any(self._traps(name) for name in names)
        except (struct.error, IndexError) as exc:
            raise ImageError(f"the CUBIN's records for {symbol} are malformed ({exc})") from None

        # -G (-lineinfo writes .debug_line); asked only where it changes the answer: a name
        # the CUBIN lacks is looked for through its whole section-name table
        debug = barriers and self.section(".debug_info") is not None
        return self._needs(own, None if barriers and debug else barriers and traps)

    @staticmethod
    def _needs(own: dict[int, bytes], grid_sync: bool | None) -> LaunchNeeds:
        """The launch needs of a kernel whose own records are ``own``."""
        cluster = _dims(own.get(_EIATTR_CTA_PER_CLUSTER))
        return LaunchNeeds(grid_sync=grid_sync, cluster_dims=cluster,
                           requires_cluster=cluster is not None or _EIATTR_EXPLICIT_CLUSTER in own,
                           max_threads=_dims(own.get(EIATTR_MAX_THREADS)))

    def _info(self, name: str) -> bytes | None:
        sec = self.section(".nv.info." + name)
        return None if sec is None else _section_bytes(self.data, sec)

    def resources(self, symbol: str, symbol_index: int) -> KernelResources:
        """One kernel's resources (see :class:`KernelResources` for where each comes from)."""
        try:
            attrs = self.per_symbol.get(symbol_index, {})
        except (struct.error, IndexError) as exc:
            raise ImageError(f"the CUBIN's .nv.info section is malformed ({exc})") from None
        registers = attrs.get(_EIATTR_REGCOUNT)
        text = self.section(".text." + symbol)
        if registers is None:
            registers = (text[6] >> 24) if text is not None else 0
        shared, const = self.section(".nv.shared." + symbol), self.section(".nv.constant3")
        static = shared[3] if shared is not None else 0
        if static and self.section(".nv.shared.reserved.0") is not None:
            # sm_90 CUBINs place the 1 KiB of shared memory the system reserves per block at
            # the start of each kernel's section; the driver's attribute leaves it out (seen
            # on an H200: 1028 bytes in the section, 4 from cuFuncGetAttribute)
            static = max(0, static - _RESERVED_SHARED)
        return KernelResources(registers=registers, static_shared_bytes=static,
                               const_bytes=const[3] if const is not None else 0,
                               local_bytes=attrs.get(_EIATTR_FRAME_SIZE, 0))


def has_line_info(image: CubinImage) -> bool:
    """The CUBIN carries line information (``-lineinfo`` or ``-G``: a ``.nv_debug_line_sass``
    or ``.debug_line`` section): tools can name source lines."""
    elf = image._elf
    return elf.section(".debug_line") is not None or elf.section(".nv_debug_line_sass") is not None


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
    e_flags, e_shoff, e_shnum, e_shstrndx = elf_header(data)
    # the symbol table first, through typed views of the tables: no Python object per section
    # or per symbol that is not a kernel (the rest is read on first use, by _Elf)
    table = memoryview(data)[e_shoff:e_shoff + e_shnum * 64]
    types = memoryview(data)[e_shoff:e_shoff + e_shnum * 64].cast("I")[1::16].tolist()
    words = table.cast("Q")
    offsets, sizes = words[3::8].tolist(), words[4::8].tolist()
    if e_shnum and max(map(operator.add, offsets, sizes)) > len(data):
        for i, (stype, off, size) in enumerate(zip(types, offsets, sizes)):
            if stype != _SHT_NOBITS and off + size > len(data):  # NOBITS holds no bytes
                raise ImageError(f"the CUBIN is truncated: section {i} lies past the end")
    words32 = table.cast("I")
    links = words32[10::16].tolist()
    symtabs = tuple(i for i, t in enumerate(types) if t == _SHT_SYMTAB)
    symbols: list[str] = []
    indices: list[int] = []
    for i in symtabs:
        size = sizes[i] // 24 * 24
        symtab = memoryview(data)[offsets[i]:offsets[i] + size].cast("I")
        # st_info | st_other << 8 | st_shndx << 16: a FUNC with the CUDA entry bit, defined
        meta = symtab[1::6].tolist()
        picked = [j for j, m in enumerate(meta)
                  if m & 0xF == _STT_FUNC and m >> 16 and m & (_STO_CUDA_ENTRY << 8)]
        names = symtab[0::6].tolist()
        link = links[i]
        strtab = data[offsets[link]:offsets[link] + sizes[link]]
        symbols += strings_at(strtab, [names[j] for j in picked])
        indices += picked
    return CubinImage(tuple(symbols), tuple(indices), sm_of_flags(e_flags),
                      _Elf(data, e_shoff, e_shstrndx, symtabs,
                           {"name": words32[0::16].tolist(), "type": types, "offset": offsets,
                            "size": sizes, "link": links}))


# the sections that hold a module's variables, and the memory each is in
_VARIABLE_SECTIONS = {".nv.constant3": "constant", ".nv.global": "global",
                      ".nv.global.init": "global"}


def sm_of_flags(e_flags: int) -> int | None:
    """The target a CUBIN's ELF header names: bits 8-15 of ``e_flags`` (90 for sm_90), None
    where they are 0."""
    return (e_flags >> 8) & 0xFF or None


def elf_sm(data: bytes) -> int | None:
    """The target of a CUBIN (:func:`sm_of_flags` of its header).

    :raises ImageError: not a CUBIN.
    """
    return sm_of_flags(elf_header(data)[0])


def undefined_globals(data: bytes) -> list[str]:
    """The GLOBAL symbols a CUBIN names but defines in no section (a relocatable CUBIN's calls
    to ``cudaLaunchDevice`` and other code a link must bring in), from every symbol table.

    :raises ImageError: not a CUBIN, or a table that runs past the end.
    """
    _, e_shoff, e_shnum, _ = elf_header(data)
    try:
        sections = section_headers(data, e_shoff, e_shnum)
        out: list[str] = []
        for sec in sections:
            if sec[1] != _SHT_SYMTAB:
                continue
            symtab = data[sec[4]:sec[4] + sec[5]]
            link = sections[sec[6]]
            strtab = data[link[4]:link[4] + link[5]]
            entries = struct.iter_unpack("<IBBHQQ", symtab[:len(symtab) // 24 * 24])
            offsets = [e[0] for e in entries
                       # GLOBAL, in no section (the WEAK ones, __UDT..., the linker makes)
                       if e[3] == 0 and e[1] >> 4 == 1 and e[0]]
            out += strings_at(strtab, offsets)
        return out
    except (struct.error, IndexError) as exc:
        raise ImageError(f"the CUBIN's symbol tables are malformed ({exc})") from None


def _dims(body: bytes | None) -> tuple[int, int, int] | None:
    """An ``.nv.info`` record's (x, y, z) value (``__launch_bounds__``, ``__cluster_dims__``)."""
    return struct.unpack_from("<III", body) if body and len(body) >= 12 else None


def block_limits(info: bytes | None) -> tuple[tuple[int, int, int] | None, int]:
    """What a kernel's own ``.nv.info`` records limit a block by: ``__launch_bounds__``'s
    maximum threads (x, y, z; None without) and the named barriers it uses.

    :raises ImageError: a record runs past the end of its section.
    """
    records = {attr: body for _, attr, body in info_records(info or b"")}
    barriers = records.get(_EIATTR_NUM_BARRIERS)
    return (_dims(records.get(EIATTR_MAX_THREADS)),
            barriers[0] if barriers is not None and len(barriers) >= 2 else 0)


def strings_at(table: bytes, offsets: list[int]) -> list[str]:
    """The NUL-terminated strings of a string table at these offsets (an offset into the
    middle of a string is read from there, as the ELF format allows).

    :raises ImageError: a string runs past the end of its table.
    """
    find = table.find
    ends = [find(b"\0", o) for o in offsets]
    if ends and min(ends) < 0:
        raise ImageError("a string table entry runs past the end of its section")
    return [table[o:e].decode("utf-8", "replace") for o, e in zip(offsets, ends)]


def _section_bytes(data: bytes, sec: tuple) -> bytes:
    off, size = sec[2], sec[3]
    return data[off:off + size]


def info_records(info: bytes) -> Iterator[tuple[int, int, bytes]]:
    """The ``(format, attribute, value bytes)`` records of a ``.nv.info`` section.

    :raises ImageError: a record runs past the end, or has a format this reader does not know.
    """
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr = info[pos], info[pos + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", info, pos + 2)
            body = info[pos + 4:pos + 4 + size]
            if len(body) < size:
                raise ImageError("a .nv.info record runs past the end of its section")
            yield fmt, attr, body
            pos += 4 + size
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):
            yield fmt, attr, info[pos + 2:pos + 4]
            pos += 4
        else:
            raise ImageError(f"unknown .nv.info record format {fmt}")


def _kparams(info: bytes) -> tuple[Param, ...]:
    """Parameter records of one ``.nv.info.<symbol>`` section."""
    params: dict[int, Param] = {}
    for fmt, attr, body in info_records(info):
        if fmt == _EIFMT_SVAL and attr == _EIATTR_KPARAM_INFO and len(body) >= 12:
            _index, ordinal, offset, flags = struct.unpack_from("<IHHI", body)
            params[ordinal] = Param(ordinal, offset, (flags >> 18) & 0x3FFF)
    ordered = tuple(params[k] for k in sorted(params))
    if ordered and [p.ordinal for p in ordered] != list(range(len(ordered))):
        raise ImageError("the parameter records of a kernel skip an ordinal")
    return ordered
