"""Occupancy: how many blocks of a kernel one SM holds at once, and what stops it holding more.

Two sources for one answer. With a GPU whose architecture is the CUBIN's, the driver's
``cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`` and ``cuOccupancyMaxPotentialBlockSize``
say how many blocks fit. Without one, the same number is computed from what the CUBIN records
(registers, static shared memory, ``__launch_bounds__``, named barriers) and a table of each
architecture's limits, by the rules of CUDA's occupancy calculator (``cuda_occupancy.h``):

- warps: a block takes ``ceil(threads / 32)`` warp slots of the SM's ``max_threads_per_sm / 32``;
- registers: a warp gets ``registers * 32`` rounded up to 256; the register file is split
  evenly over the SM's four sub-partitions, and whole warps fit into each; a block whose warps,
  rounded up to a multiple of four, need more than 64 Ki registers cannot launch at all;
- shared memory: a block takes its static and dynamic shared memory plus what the system reserves
  (1 KiB from sm_80), rounded up to 128 bytes (256 before sm_80); the SM's shared memory is the
  carveout the kernel prefers (all of it by default), rounded up to a size the SM can be set to,
  and grown to hold one block where the preference is smaller;
- blocks: a fixed number per SM for each architecture;
- barriers (sm_90 and later): a block using ``n`` named barriers fits ``2 * max_blocks / n`` times.

The limits come from the calculator's per-architecture rules and NVIDIA's technical
specifications per compute capability; tests/test_occupancy.py checks the arithmetic against the
driver's answers recorded on an H200 (scripts/record_occupancy.py) and against the calculator
header compiled where a C compiler and the header are at hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import CudaMagicError, OccupancyError, OptionError
from ...core.miss import WordEnum
from ...core.options import arch_sm

__all__ = ["ArchLimits", "KernelUsage", "Occupancy", "OccupancyTable", "OccupancyError",
           "arch_limits", "known_archs", "compute", "usage_of", "table", "best_block_size",
           "cubin_sm", "DEFAULT_BLOCK_SIZES", "LIMIT_NAMES", "Limit", "Source"]

_KIB = 1024
_WARP = 32

#: the block sizes a table covers unless asked otherwise: every whole number of warps
DEFAULT_BLOCK_SIZES = tuple(range(32, 1025, 32))

class Limit(WordEnum):
    """What can limit the blocks per SM."""

    WARPS = "warps"
    REGISTERS = "registers"
    SHARED = "shared memory"
    BLOCKS = "blocks"
    BARRIERS = "barriers"


class Source(WordEnum):
    """Who answered an occupancy: the CUDA driver, or cudamagic's arithmetic."""

    DRIVER = "driver"
    COMPUTED = "computed"


#: what can limit the blocks per SM, in the order the views list them
LIMIT_NAMES = tuple(Limit)



@dataclass(frozen=True)
class ArchLimits:
    """One architecture's limits, as the occupancy arithmetic uses them (bytes, threads, counts).

    Attributes
    ----------
    sm : int
        ``major * 10 + minor`` (90 for sm_90).
    max_threads_per_sm, max_blocks_per_sm : int
        Resident threads and blocks per SM.
    shared_per_sm : int
        The most shared memory an SM can be configured to (the largest carveout).
    shared_per_block_optin : int
        The most a block may use once the kernel opts in (a launch above 48 KiB does).
    shared_sizes_kib : tuple of int
        The sizes the SM's shared memory can be configured to; a carveout is rounded up to one.
    reserved_shared_per_block : int
        Shared memory the system takes from every block (1 KiB from sm_80).
    shared_unit : int
        Shared memory is given to blocks in multiples of this.
    barrier_factor : int
        Named barriers per SM are ``barrier_factor * max_blocks_per_sm`` (sm_90 and later).
    """

    sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int
    shared_per_block_optin: int
    shared_sizes_kib: tuple[int, ...]
    reserved_shared_per_block: int
    shared_unit: int
    barrier_factor: int = 2
    max_threads_per_block: int = 1024
    shared_per_block: int = 48 * _KIB
    registers_per_sm: int = 64 * _KIB
    registers_per_block: int = 64 * _KIB
    max_registers_per_thread: int = 255
    register_unit: int = 256
    sub_partitions: int = 4

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM."""
        return self.max_threads_per_sm // _WARP

    def shared_size_for(self, nbytes: int) -> int | None:
        """The smallest size the SM's shared memory can be set to that holds ``nbytes``; None
        where none does."""
        if nbytes == 0 and 0 in self.shared_sizes_kib:
            return 0
        for kib in self.shared_sizes_kib:
            if kib * _KIB >= nbytes and kib:
                return kib * _KIB
        return None


_VOLTA_SIZES = (0, 8, 16, 32, 64, 96)
_AMPERE_SIZES = (0, 8, 16, 32, 64, 100, 132, 164)
_GA10X_SIZES = (0, 8, 16, 32, 64, 100)
_HOPPER_SIZES = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


def _arch(sm: int, threads: int, blocks: int, shared_kib: int, sizes: tuple[int, ...],
          barrier_factor: int = 2) -> ArchLimits:
    """A row of the table: the optin limit is the SM's shared memory less the reserved 1 KiB
    from sm_80 (the SM's whole shared memory before)."""
    reserved = _KIB if sm >= 80 else 0
    return ArchLimits(sm=sm, max_threads_per_sm=threads, max_blocks_per_sm=blocks,
                      shared_per_sm=shared_kib * _KIB,
                      shared_per_block_optin=shared_kib * _KIB - reserved,
                      shared_sizes_kib=sizes, reserved_shared_per_block=reserved,
                      shared_unit=128 if sm >= 80 else 256, barrier_factor=barrier_factor)


# (resident threads, resident blocks, shared KiB per SM, configurable sizes, barrier factor)
_ARCHS: dict[int, ArchLimits] = {a.sm: a for a in (
    _arch(70, 2048, 32, 96, _VOLTA_SIZES),
    _arch(72, 2048, 32, 96, _VOLTA_SIZES),
    _arch(75, 1024, 16, 64, (32, 64)),
    _arch(80, 2048, 32, 164, _AMPERE_SIZES),
    _arch(86, 1536, 16, 100, _GA10X_SIZES, barrier_factor=1),
    _arch(87, 1536, 16, 164, _AMPERE_SIZES, barrier_factor=1),
    _arch(89, 1536, 24, 100, _GA10X_SIZES, barrier_factor=1),
    _arch(90, 2048, 32, 228, _HOPPER_SIZES),
    _arch(100, 2048, 32, 228, _HOPPER_SIZES),
    _arch(103, 2048, 32, 228, _HOPPER_SIZES, barrier_factor=1),
    _arch(120, 1536, 24, 100, _GA10X_SIZES, barrier_factor=1),
    _arch(121, 1536, 24, 100, _GA10X_SIZES, barrier_factor=1),
)}


def known_archs() -> tuple[int, ...]:
    """The architectures (``sm`` numbers) that have a limits table."""
    return tuple(sorted(_ARCHS))


def arch_limits(sm: int) -> ArchLimits:
    """The limits table of one architecture.

    :raises OccupancyError: no table for it (an unknown number is an error, never a guess).
    """
    try:
        return _ARCHS[int(sm)]
    except (KeyError, TypeError, ValueError):
        known = ", ".join(f"sm_{s}" for s in known_archs())
        raise OccupancyError(
            f"no occupancy limits table for sm_{sm}: cudamagic knows {known}. On a GPU of that "
            "architecture the driver answers instead (pass device=)") from None


@dataclass(frozen=True)
class KernelUsage:
    """What one kernel asks of an SM, as the CUBIN records it.

    Attributes
    ----------
    registers : int
        Registers per thread.
    static_shared_bytes : int
        ``__shared__`` arrays per block (without the reserved 1 KiB).
    max_threads : int or None
        The block size ``__launch_bounds__`` allows; None where the kernel sets none.
    barriers : int
        Named barriers the kernel uses (``__syncthreads`` is barrier 0: 1); 0 for none.
    """

    registers: int
    static_shared_bytes: int = 0
    max_threads: int | None = None
    barriers: int = 1

    def max_block_size(self, arch: ArchLimits) -> int:
        """The largest block that launches: the device's, ``__launch_bounds__``'s and what the
        register file holds, as the driver's ``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK``."""
        most = arch.max_threads_per_block if self.max_threads is None \
            else min(arch.max_threads_per_block, self.max_threads)
        per_warp = _round_up(self.registers * _WARP, arch.register_unit)
        if per_warp:
            warps = arch.registers_per_block // per_warp // arch.sub_partitions * arch.sub_partitions
            most = min(most, warps * _WARP)
        return most




def usage_of(kernel: Any) -> KernelUsage:
    """A kernel's usage from its CUBIN records: a :class:`cudamagic.Kernel`, a
    :class:`~cudamagic.toolchain.binary.image.KernelImage`, or a :class:`KernelUsage` as it is.

    :raises OccupancyError: a kernel made without its CUBIN.
    """
    if isinstance(kernel, KernelUsage):
        return kernel
    image = getattr(kernel, "image", kernel)
    resources = getattr(image, "resources", None)
    if resources is None:
        raise OccupancyError(f"{getattr(kernel, 'name_expression', kernel)!r}: no CUBIN "
                             "records to compute occupancy from")
    from ..binary.image import block_limits

    # the kernel's own records alone: its launch needs (image.launch) would also walk the call
    # graph and scan the code, which the block limit does not depend on
    dims, barriers = block_limits(image.info)
    max_threads = None if dims is None else dims[0] * dims[1] * dims[2]
    return KernelUsage(registers=resources.registers,
                       static_shared_bytes=resources.static_shared_bytes,
                       max_threads=max_threads, barriers=barriers)


@dataclass(frozen=True)
class Occupancy:
    """One kernel at one block size and dynamic shared memory size on one architecture.

    Attributes
    ----------
    sm, block_size, dynamic_shared_bytes : int
        The question.
    active_blocks : int
        Blocks per SM (0: the launch does not fit); the driver's where ``source`` is
        :attr:`Source.DRIVER`.
    max_warps : int
        Resident warps per SM.
    limits : dict of Limit to int or None
        Blocks per SM each resource alone allows (None: that resource sets no limit).
    limited_by : tuple of Limit
        The resources whose limit is the answer (several can tie).
    registers_per_block, shared_per_block : int
        What a block is given (after rounding up to the allocation units).
    carveout : int or None
        The shared memory carveout asked, percent of the largest (None: the default).
    source : Source
    computed_blocks : int
        The arithmetic's answer (equal to ``active_blocks`` unless the driver disagrees).
    launches : bool
        Whether a launch of this shape runs: some block fits, and the block is within the
        kernel's own limit (the driver counts blocks past that limit too).
    reason : str
        Why the launch does not run, where it does not ("" otherwise).
    """

    sm: int
    block_size: int
    dynamic_shared_bytes: int
    active_blocks: int
    max_warps: int
    limits: dict[Limit, int | None] = field(hash=False)
    limited_by: tuple[Limit, ...]
    registers_per_block: int
    shared_per_block: int
    carveout: int | None = None
    source: Source = Source.COMPUTED
    computed_blocks: int = 0
    launches: bool = True
    reason: str = ""

    @property
    def warps_per_block(self) -> int:
        """Warp slots one block takes."""
        return -(-self.block_size // _WARP)

    @property
    def active_warps(self) -> int:
        """Resident warps per SM at this occupancy."""
        return self.active_blocks * self.warps_per_block

    @property
    def occupancy(self) -> float:
        """Resident warps over the SM's warp slots, 0 to 1."""
        return self.active_warps / self.max_warps


@dataclass(frozen=True)
class OccupancyTable:
    """A kernel's occupancy over block sizes, for each dynamic shared memory size asked.

    Attributes
    ----------
    kernel : str
        The kernel's name expression.
    sm : int
    usage : KernelUsage
    rows : tuple of Occupancy
        Every (dynamic shared size, block size) pair, in that order.
    best : dict of int to int
        Dynamic shared size -> the block size that holds the most warps per SM (the largest
        such block, as the driver's ``cuOccupancyMaxPotentialBlockSize`` picks).
    min_grid : dict of int to int or None
        Dynamic shared size -> blocks that fill every SM at the best block size (None without a
        device: the SM count is the device's).
    source : Source

    A record: its text and HTML are :mod:`cudamagic.view.bench`'s, and ``kernel.occupancy()``
    gives it with them (:class:`cudamagic.view.shown.ShownOccupancy`).
    """

    kernel: str
    sm: int
    usage: KernelUsage
    rows: tuple[Occupancy, ...]
    best: dict[int, int] = field(hash=False)
    min_grid: dict[int, int | None] = field(hash=False)
    source: Source = Source.COMPUTED

    @property
    def dynamic_sizes(self) -> tuple[int, ...]:
        """The dynamic shared memory sizes the table covers."""
        return tuple(dict.fromkeys(r.dynamic_shared_bytes for r in self.rows))

    def at(self, block_size: int, dynamic_shared_bytes: int = 0) -> Occupancy:
        """The row for one block size and dynamic shared size.

        :raises KeyError: the table has no such row.
        """
        for r in self.rows:
            if r.block_size == block_size and r.dynamic_shared_bytes == dynamic_shared_bytes:
                return r
        raise KeyError((block_size, dynamic_shared_bytes))


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _check_sizes(block_size: Any, dynamic_shared_bytes: Any, carveout: Any) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise OccupancyError(f"block size {block_size!r}: give the threads per block as a "
                             "positive int (x * y * z for a 3-D block)")
    if isinstance(dynamic_shared_bytes, bool) or not isinstance(dynamic_shared_bytes, int) \
            or dynamic_shared_bytes < 0:
        raise OccupancyError(f"dynamic shared memory {dynamic_shared_bytes!r}: give bytes as an "
                             "int >= 0")
    if carveout is not None and (isinstance(carveout, bool) or not isinstance(carveout, int)
                                 or not 0 <= carveout <= 100):
        raise OccupancyError(f"carveout {carveout!r}: give a percentage of the largest shared "
                             "memory, 0 to 100, or None for the default")


def _index_or_none(value: Any, what: str, wanted: str) -> int | None:
    """None, or an int >= 0 (a NumPy int too) as an int.

    :raises OccupancyError: anything else (a string, a bool, a float, a negative number),
        saying ``what`` it was and the ``wanted`` words.
    """
    if value is None:
        return None
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError(value)
        number = int(value.__index__())
    except (TypeError, AttributeError, ValueError):
        number = -1
    if number < 0:
        raise OccupancyError(f"{what}={value!r:.80}: {wanted}")
    return number


def _device_index(device: Any) -> int | None:
    """The GPU asked about: None (the current one), or a device number ('0', -1 and True were
    taken, and without a GPU answered as if they were a device).

    :raises OccupancyError: anything else.
    """
    return _index_or_none(device, "device", "give the GPU's number, an int >= 0 (0 for the "
                          "first), or None for the current one")


def _limit(max_dynamic_shared: Any) -> int | None:
    """The kernel's dynamic shared memory limit as asked: None, or bytes (-5, 1.5, a string
    were taken, or a raw TypeError).

    :raises OccupancyError: anything else.
    """
    return _index_or_none(max_dynamic_shared, "max_dynamic_shared", "give the kernel's dynamic "
                          "shared memory limit as bytes, an int >= 0, or None for the most "
                          "the launch asks")


def _register_limit(usage: KernelUsage, arch: ArchLimits, warps: int) -> tuple[int | None, int,
                                                                               str]:
    """Blocks the register file allows, the registers a block is given, and why none fit."""
    per_warp = _round_up(usage.registers * _WARP, arch.register_unit)
    per_block = per_warp * warps
    # the hardware checks a block as if its warps were spread over all sub-partitions (never
    # fewer registers than the block's own: per_block need not be checked beside it)
    assumed = per_warp * _round_up(warps, arch.sub_partitions)
    if usage.registers > arch.max_registers_per_thread or assumed > arch.registers_per_block:
        return 0, per_block, (f"{usage.registers} registers a thread: a block of {warps} warps "
                              f"needs more than the {arch.registers_per_block} a block may have")
    if per_warp == 0:
        return None, 0, ""
    warps_per_partition = arch.registers_per_sm // arch.sub_partitions // per_warp
    return warps_per_partition * arch.sub_partitions // warps, per_block, ""


def _shared_limit(usage: KernelUsage, arch: ArchLimits, dynamic: int, carveout: int | None,
                  max_dynamic: int | None) -> tuple[int | None, int, str]:
    """Blocks shared memory allows, the shared memory a block is given, and why none fit."""
    static = usage.static_shared_bytes + arch.reserved_shared_per_block
    per_block = _round_up(static + dynamic, arch.shared_unit)
    if max_dynamic is not None and dynamic > max_dynamic:
        return 0, per_block, (f"{dynamic} bytes of dynamic shared memory: over the kernel's "
                              f"limit of {max_dynamic} (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_"
                              "SIZE_BYTES; raise it first)")
    # the kernel's dynamic limit raised to what the launch asks, up to the opt-in maximum
    limit = (arch.shared_per_block_optin if static + dynamic > arch.shared_per_block
             + arch.reserved_shared_per_block else arch.shared_per_block) \
        + arch.reserved_shared_per_block
    if per_block > limit:
        return 0, per_block, (f"{per_block} bytes of shared memory a block: more than the "
                              f"{limit - arch.reserved_shared_per_block} bytes sm_{arch.sm} "
                              "allows a block")
    preferred = arch.shared_per_sm if carveout is None else carveout * arch.shared_per_sm // 100
    configured = arch.shared_size_for(preferred)
    if configured is None or configured < per_block:
        # a smaller preference is grown to hold one block
        configured = arch.shared_size_for(per_block) or arch.shared_per_sm
    if per_block == 0:
        return None, 0, ""
    return configured // per_block, per_block, ""


def compute(kernel: Any, block_size: int, dynamic_shared_bytes: int = 0, *, sm: int,
            carveout: int | None = None, max_dynamic_shared: int | None = None) -> Occupancy:
    """The occupancy arithmetic for one kernel, block size and dynamic shared size.

    Parameters
    ----------
    kernel : Kernel, KernelImage or KernelUsage
        What the kernel uses (read from its CUBIN).
    block_size : int
        Threads per block.
    dynamic_shared_bytes : int
        Dynamic shared memory per block.
    sm : int
        The architecture (``90``); its limits table must exist (:func:`known_archs`).
    carveout : int or None
        The kernel's preferred shared memory carveout, percent of the largest; None: default.
    max_dynamic_shared : int or None
        The kernel's dynamic shared memory limit (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_
        BYTES``); None: raised to what the launch asks (up to the architecture's opt-in limit).

    The block count is the driver's rule, which does not look at the kernel's own block limit
    (``__launch_bounds__``, or registers): a block over it gets a count and ``launches``
    False, with the reason.

    :raises OccupancyError: an unknown architecture, a size that is not one.
    """
    _check_sizes(block_size, dynamic_shared_bytes, carveout)
    max_dynamic_shared = _limit(max_dynamic_shared)
    arch, usage = arch_limits(sm), usage_of(kernel)
    warps = -(-block_size // _WARP)
    most = usage.max_block_size(arch)
    reasons = []
    by_warps = arch.max_warps_per_sm // warps if block_size <= arch.max_threads_per_block else 0
    if block_size > most:
        reasons.append(f"a block of {block_size} threads is over the kernel's limit of {most} "
                       "(its __launch_bounds__ or registers): the launch fails")
    by_regs, regs_per_block, why = _register_limit(usage, arch, warps)
    reasons += [why] if why and not reasons else []
    by_shared, shared_per_block, why = _shared_limit(usage, arch, dynamic_shared_bytes, carveout,
                                                     max_dynamic_shared)
    reasons += [why] if why else []
    limits: dict[Limit, int | None] = {Limit.WARPS: by_warps, Limit.REGISTERS: by_regs,
                                       Limit.SHARED: by_shared,
                                       Limit.BLOCKS: arch.max_blocks_per_sm, Limit.BARRIERS: None}
    if arch.sm >= 90 and usage.barriers > 0:
        limits[Limit.BARRIERS] = arch.barrier_factor * arch.max_blocks_per_sm // usage.barriers
    blocks = min(v for v in limits.values() if v is not None)
    limited_by = tuple(k for k in LIMIT_NAMES if limits[k] == blocks)
    launches = blocks > 0 and block_size <= most
    return Occupancy(sm=arch.sm, block_size=block_size, dynamic_shared_bytes=dynamic_shared_bytes,
                     active_blocks=blocks, max_warps=arch.max_warps_per_sm, limits=limits,
                     limited_by=limited_by, registers_per_block=regs_per_block,
                     shared_per_block=shared_per_block, carveout=carveout,
                     computed_blocks=blocks, launches=launches,
                     reason="" if launches else "; ".join(reasons))


def best_block_size(rows: Iterable[Occupancy]) -> int:
    """The block size that launches holding the most threads per SM (the largest of equals, as
    the driver picks); 0 where nothing launches."""
    best, most = 0, 0
    for r in sorted(rows, key=lambda r: -r.block_size):
        if r.launches and r.active_blocks * r.block_size > most:
            best, most = r.block_size, r.active_blocks * r.block_size
    return best


def size_list(value: Any, what: str) -> tuple[int, ...]:
    """Block sizes or dynamic shared sizes as people pass them: one int, or any sequence or
    array of ints (NumPy's included), as a tuple of ints.

    :raises OccupancyError: anything else (a float, a bool, a string, an empty list).
    """
    items = (value,) if isinstance(value, (int, str, bytes)) or not hasattr(value, "__iter__") \
        or getattr(value, "ndim", None) == 0 else tuple(value)  # (a 0-d array: one value)
    out = []
    for item in items:
        try:
            if isinstance(item, (bool, str, bytes)):
                raise TypeError(item)
            out.append(int(item.__index__()))
        except (TypeError, AttributeError, ValueError):  # a float, a row of a 2-D array...
            raise OccupancyError(f"{what} {item!r:.80}: give an int, or a list or array of "
                                 "ints") from None
    if not out:
        raise OccupancyError(f"{what}: the list is empty; give at least one size")
    return tuple(out)


def sm_number(value: Any) -> int:
    """An architecture as people write it (``90``, ``"90"``, ``"sm_90"``, ``"compute_90"``,
    ``"90a"``, a NumPy int) as its number, read by :func:`cudamagic.core.options.arch_sm`.

    :raises OccupancyError: anything else (``90.7``, ``"sm90x"``, a bool).
    """
    number = value.__index__() if not isinstance(value, (str, bool)) and hasattr(
        value, "__index__") else value
    try:
        return arch_sm(number, virtual=True)
    except OptionError:
        raise OccupancyError(f"sm={value!r}: give the architecture as 90, '90' or 'sm_90'"
                             ) from None


def table(kernel: Any, block_sizes: Any = DEFAULT_BLOCK_SIZES, dynamic_shared: Any = (0,), *,
          sm: Any = None, carveout: int | None = None, device: int | None = None,
          max_dynamic_shared: int | None = None) -> OccupancyTable:
    """A kernel's occupancy over block sizes and dynamic shared sizes.

    With a GPU (``device``, or the current one when ``sm`` is not given) whose architecture is
    the CUBIN's, each row's ``active_blocks`` is the driver's answer and the best block size is
    ``cuOccupancyMaxPotentialBlockSize``'s; the limits per resource are always the arithmetic's.
    Without one, everything is computed for ``sm`` (default: the CUBIN's architecture).
    ``block_sizes`` and ``dynamic_shared`` take one int or a sequence or array of them (None:
    the defaults); ``sm`` takes ``90``, ``"90"`` or ``"sm_90"``; ``max_dynamic_shared`` is
    :func:`compute`'s.

    :raises OccupancyError: an unknown architecture, a size that is not one, no CUBIN records.
    """
    block_sizes = size_list(DEFAULT_BLOCK_SIZES if block_sizes is None else block_sizes,
                        "block size")
    dynamic_shared = size_list((0,) if dynamic_shared is None else dynamic_shared,
                           "dynamic shared memory")
    sm = None if sm is None else sm_number(sm)
    max_dynamic_shared = _limit(max_dynamic_shared)
    device = _device_index(device)
    usage = usage_of(kernel)
    name = str(getattr(kernel, "name_expression", None) or getattr(kernel, "symbol", "kernel"))
    ask = _driver_for(kernel, sm, device, carveout)
    target = sm if sm is not None else (ask.sm if ask else cubin_sm(kernel))
    if target is None:
        raise OccupancyError(f"{name}: its CUBIN names no architecture; pass sm=")
    rows: list[Occupancy] = []
    best: dict[int, int] = {}
    min_grid: dict[int, int | None] = {}
    for dyn in dynamic_shared:
        found = [compute(usage, b, dyn, sm=target, carveout=carveout,
                         max_dynamic_shared=max_dynamic_shared) for b in block_sizes]
        if ask is not None:
            most = usage.max_block_size(arch_limits(target))
            found = [_answered(r, ask.active_blocks(r.block_size, dyn), most) for r in found]
            min_grid[dyn], best[dyn] = ask.potential_block_size(dyn)
        else:
            best[dyn] = best_block_size(found)
            min_grid[dyn] = None
        rows += found
    return OccupancyTable(kernel=name, sm=target, usage=usage, rows=tuple(rows), best=best,
                          min_grid=min_grid, source=Source.DRIVER if ask else Source.COMPUTED)


def _answered(row: Occupancy, blocks: int, most: int) -> Occupancy:
    """A computed row with the driver's block count in it."""
    launches = blocks > 0 and row.block_size <= most
    return replace(row, active_blocks=blocks, source=Source.DRIVER, launches=launches,
                   reason=row.reason or ("" if launches else "the driver finds no room"))


def cubin_sm(kernel: Any) -> int | None:
    """The architecture the kernel's CUBIN was built for (its ELF header says)."""
    image = getattr(getattr(kernel, "module", None), "image", None)  # a Kernel's Binary
    sm = getattr(image, "sm", None)
    if sm is not None:
        return sm
    elf = getattr(getattr(kernel, "image", kernel), "elf", None)
    if elf is None:
        return None
    from ..binary.image import elf_sm

    return elf_sm(elf.data)


class _DriverOccupancy:
    """The driver's occupancy calls for one kernel on one device (cuda.bindings)."""

    def __init__(self, kernel: Any, device: int, sm: int) -> None:
        from cuda.bindings import driver as cu

        from . import driver

        self.cu, self.kernel, self.device, self.sm = cu, kernel, device, sm
        driver.ensure_context(device)
        self.function = cu.CUfunction(kernel.function(device, context_ready=True))
        self._raised = 0

    def _call(self, fn, *args):
        status, *values = fn(*args)
        if status != self.cu.CUresult.CUDA_SUCCESS:
            from ...errors import LaunchError

            raise LaunchError(f"{fn.__name__} failed with {getattr(status, 'name', status)}")
        return values

    def _allow(self, dynamic: int) -> None:
        """Raise the kernel's dynamic shared limit to this size where it is over the default
        (48 KiB less the static shared memory), as the arithmetic assumes."""
        default = 48 * _KIB - usage_of(self.kernel).static_shared_bytes
        if dynamic > max(default, self._raised):
            self.kernel.raise_shared_limit(self.device, dynamic)
            self._raised = dynamic

    def active_blocks(self, block_size: int, dynamic: int) -> int:
        """``cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`` (default flags)."""
        self._allow(dynamic)
        (n,) = self._call(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
                          self.function, block_size, dynamic,
                          self.cu.CUoccupancy_flags.CU_OCCUPANCY_DEFAULT)
        return int(n)

    def potential_block_size(self, dynamic: int) -> tuple[int, int]:
        """``(min grid, block size)`` from ``cuOccupancyMaxPotentialBlockSize``."""
        self._allow(dynamic)
        grid, block = self._call(self.cu.cuOccupancyMaxPotentialBlockSize, self.function, None,
                                 dynamic, 0)
        return int(grid), int(block)


def _driver_for(kernel: Any, sm: int | None, device: int | None,
                carveout: int | None) -> _DriverOccupancy | None:
    """The driver's answers where they apply: a real kernel, a GPU, its architecture the one
    asked (and the CUBIN's), the default carveout; None otherwise."""
    if carveout is not None or not hasattr(kernel, "function"):
        return None
    from . import driver

    if device is None and sm is not None or not driver.available():
        return None
    device = driver.current_device() if device is None else device
    here = driver.device_sm(device)
    if (sm is not None and sm != here) or cubin_sm(kernel) not in (None, here):
        return None
    return _DriverOccupancy(kernel, device, here)
