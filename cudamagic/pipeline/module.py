"""A built module and how it travels: :class:`Binary` (a CUBIN and its driver library),
:class:`Module` (the kernels of one build, by name expression) and the arrival of a module
shipped to another process (pickle, Dask), rebuilt there once per payload."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..core.forksafe import ForkSafeLock, once
from ..core.process import held
from ..errors import ImageError, NameResolutionError
from ..launch import Kernel
from ..launch.kernel import KernelTools
from ..store import BadEntry, EntryRecord, decode_entry, encode_entry, entry_digest
from ..store.entry import TableRow
from ..toolchain.device import driver
from ..toolchain.binary.image import CubinImage, GlobalImage, device_runtime_kernels, read_cubin
from ..cxx import Signatures, recorded_texts, similar_names
from ..cxx.resolve import ResolvedBy
from ..core.units import counted
from ..view.report import BuildReport

if TYPE_CHECKING:  # pragma: no cover  (PTX's parameters: a load_cubin of PTX reads them)
    from ..toolchain.binary.ptx import PtxParam
    # the variables' module: imported where a module's variables are asked for, not by a hit
    from ..toolchain.binary.variables import DeviceGlobal, Variables, VarType

__all__ = ["Binary", "KernelTable", "Module", "arrive"]


class Binary:
    """A CUBIN and its ELF view, loaded into the CUDA driver on first use (once per process;
    the driver then puts it into each device's context on first use there)."""

    def __init__(self, cubin: bytes, image: CubinImage,
                 declared: Mapping[str, tuple[PtxParam, ...] | None] | None = None) -> None:
        self.cubin = cubin
        self.image = image
        # symbol -> its parameters as the PTX the CUBIN was compiled from declares them (a PTX
        # or fatbin load): an extern "C" kernel's slots then take Python numbers
        self.declared: Mapping[str, tuple[PtxParam, ...] | None] = declared or {}
        self._lib: driver.Library | None = None
        self._lock = ForkSafeLock()

    @once
    def runtime_kernels(self) -> frozenset[str]:
        """The device runtime's own kernels in a linked CUBIN: not the user's to call."""
        return device_runtime_kernels(self.image.symbols)

    @once
    def own_globals(self) -> tuple[GlobalImage, ...]:
        """The CUBIN's variables less those the device runtime library brought into its link
        (known from the library itself, not from their names): the cell's, and its headers'."""
        if not self.runtime_kernels:
            return self.image.globals
        from ..toolchain.compile.fatbin import device_runtime_globals

        theirs = device_runtime_globals()
        return tuple(g for g in self.image.globals if g.name not in theirs)

    def library(self) -> "driver.Library":
        with self._lock:
            if self._lib is None:
                lib = driver.Library.load(self.cubin)
                # one call, not a name per kernel: the GPU tests compare the names themselves
                count = lib.kernel_count()
                if count != len(self.image.symbols):  # the driver agrees with the ELF
                    raise ImageError(f"the driver finds {count} kernels in the CUBIN, its ELF "
                                     f"symbol table {len(self.image.symbols)}")
                self._lib = lib
            return self._lib


def _bench(kernel: Kernel, *args: Any, **options: Any) -> Any:
    from ..view.shown import kernel_bench  # the timing harness: imported by the first bench

    return kernel_bench(kernel, *args, **options)


def _occupancy(kernel: Kernel, *args: Any, **options: Any) -> Any:
    from ..view.shown import kernel_occupancy

    return kernel_occupancy(kernel, *args, **options)


#: what every module's kernels time and size themselves with: results shown by the views
KERNEL_TOOLS = KernelTools(bench=_bench, occupancy=_occupancy)

#: The most kernel names a lookup's error lists (a CCCL module holds thousands)
SHOWN_NAMES = 10


class KernelTable(Mapping[str, Kernel]):
    """A module's kernels by the name each answers to, each :class:`Kernel` made on first use
    (a restore of 1000 kernels makes those that are looked up, called or pushed).

    Every entry was resolved before the table is made (for a cache entry: its stored symbol is
    one of the CUBIN's kernels and agrees with its demangled name); nothing here resolves.
    Two threads asking for one kernel get the same object.
    """

    def __init__(self, binary: Binary, signatures: Signatures,
                 entries: "list[tuple[str, str, str, ResolvedBy]]") -> None:
        # label -> (symbol, Python name, resolved by), in the module's order
        self._entries = {label: (symbol, name, how) for label, symbol, name, how in entries}
        self._binary = binary
        self._signatures = signatures
        self._made: dict[str, Kernel] = {}
        self._module: "Module | None" = None

    @property
    def signatures(self) -> Signatures:
        """Every kernel's demangled signature, by symbol."""
        return self._signatures

    def entries(self) -> Iterator[tuple[str, str, str, ResolvedBy]]:
        """``(label, symbol, Python name, resolved by)`` of every kernel, making none."""
        return ((label, *rest) for label, rest in self._entries.items())

    def bind(self, module: "Module") -> None:
        """Make ``module`` the one its kernels belong to (a kernel that travels takes it)."""
        self._module = module
        for kern in list(self._made.values()):
            kern.module = module

    def __getitem__(self, label: str) -> Kernel:
        kern = self._made.get(label)
        if kern is None:
            symbol, name, how = self._entries[label]
            kern = Kernel(self._binary, name_expression=label, symbol=symbol, python_name=name,
                          signatures=self._signatures, resolved_by=how, tools=KERNEL_TOOLS)
            kern.module = self._module
            kern = self._made.setdefault(label, kern)
        return kern

    def __contains__(self, label: object) -> bool:
        try:
            return label in self._entries
        except TypeError:  # unhashable: no kernel's name
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<cudamagic.KernelTable {counted(len(self), 'kernel')}: {', '.join(self._entries)[:200]}>"


class Module(Mapping[str, Kernel]):
    """The kernels of one build, by name expression.

    ``module["saxpy<float>"]`` takes the user's exact string; ``module.kernels`` maps every name
    the module answers to (name expressions and plain kernel names) to its :class:`Kernel`.

    Attributes
    ----------
    hit : bool
        Served from the cache.
    report : BuildReport
        The build's report; a shell that shows it with its own additions keeps the shown one
        (:meth:`set_report`).
    key : str
    cubin : bytes
    image : CubinImage
    warnings : tuple of str
    """

    def __init__(self, binary: Binary, key: str, kernels: "KernelTable | dict[str, Kernel]",
                 report: BuildReport, placeholders: bool = False,
                 variable_types: "Mapping[str, VarType] | None" = None,
                 variable_expressions: "Mapping[str, str] | None" = None) -> None:
        self._binary = binary
        # the compiler's types of the variables, by symbol (None: a CUBIN from elsewhere), and
        # the name expressions (-n "&z::tv<float>") that name variables, with their symbols
        self._types = variable_types
        self._expressions = dict(variable_expressions or {})
        self._variables: Variables | None = None
        self.key = key
        self.kernels = kernels
        self._report = report
        self._placeholders = placeholders  # how the kernels' demangled texts name T1, T2...
        self._payload_bytes: bytes | None = None
        # what tool runs (kernel.sanitize, kernel.profile) get from the pipeline: the -lineinfo
        # build and the view (:attr:`debug`); None for a module that arrived from another process
        self._debug: Any = None
        self._debug_made: Callable[[], Any] | None = None
        self._debug_lock = ForkSafeLock()
        if isinstance(kernels, KernelTable):
            kernels.bind(self)
        else:
            for kern in kernels.values():
                kern.module = self  # a kernel that travels takes its module along

    @property
    def debug(self) -> Any:
        """The module's tool-run support (:class:`~cudamagic.launch.support.DebugSupport`), made
        by the first tool run that asks (:meth:`debug_from`): a build, a hit's too, imports
        none of the tool runs' modules; None for a module that arrived from another process."""
        with self._debug_lock:
            if self._debug_made is not None:
                self._debug, self._debug_made = self._debug_made(), None
            return self._debug

    @debug.setter
    def debug(self, support: Any) -> None:
        with self._debug_lock:
            self._debug, self._debug_made = support, None

    def debug_from(self, make: Callable[[], Any]) -> None:
        """Make :attr:`debug` with ``make`` when it is first asked for."""
        with self._debug_lock:
            self._debug, self._debug_made = None, make

    @property
    def report(self) -> BuildReport:
        """The build's report (the one a shell showed, where it showed one)."""
        return self._report

    def set_report(self, report: BuildReport) -> None:
        """Keep ``report`` as this module's: the one a shell showed, with the warnings and
        timings the shell added (``%%cuda`` adds its push and the cell's time).

        :raises ValueError: a report of another build.
        """
        if report.key != self.key:
            raise ValueError(f"a report of build {report.key[:12]} cannot be module "
                             f"{self.key[:12]}'s")
        self._report = report

    @property
    def warnings(self) -> tuple[str, ...]:
        """The report's warnings about the input."""
        return self._report.warnings

    @property
    def cubin(self) -> bytes:
        """The CUBIN's bytes."""
        return self._binary.cubin

    @property
    def image(self) -> CubinImage:
        """The CUBIN's kernels and parameter records, as its ELF tables give them."""
        return self._binary.image

    @property
    def hit(self) -> bool:
        """True when the build was served from the cache."""
        return self._report.hit

    @property
    def globals(self) -> Variables:
        """The module's ``__constant__`` and ``__device__`` variables: name, C++ name, size,
        memory space, and the C++ type, dtype and shape as the compiler gave them (listed from
        the CUBIN's symbol table; no GPU needed)."""
        if self._variables is None:
            from ..toolchain.binary.demangle import variable_texts
            from ..toolchain.binary.variables import variables

            own = self._binary.own_globals
            names = [g.name for g in own]
            self._variables = variables(own, self._types,
                                        variable_texts(names, may_start=True))
        return self._variables

    @property
    def variable_expressions(self) -> dict[str, str]:
        """The name expressions given for variables (``&z::tv<float>``), with their symbols."""
        return dict(self._expressions)

    def get_global(self, name: str, dtype: object = None, device: int | None = None
                   ) -> DeviceGlobal:
        """A variable's device memory as an array view (``__cuda_array_interface__``) on a
        device (default: the current one), as CuPy's ``RawModule.get_global`` gives it.

        ``name`` is the symbol, the C++ name (``ns::scale``; a name in an anonymous namespace
        with or without it) or the name expression it was given as (``&z::tv<float>``, with or
        without the ``&``); ``dtype`` views the bytes as another type (default: the compiler's
        type, else bytes).

        :raises NameResolutionError: no such variable.
        :raises NoDeviceError: no CUDA device is available.
        """
        from ..toolchain.binary.variables import device_global, find

        var = find(self.globals, name, self._expressions)
        device = driver.current_device() if device is None else device
        driver.ensure_context(device)
        ptr, size = self._binary.library().global_(var.name)
        if size != var.size:
            raise ImageError(f"the driver finds {var.name} of {size} bytes, the CUBIN's symbol "
                             f"table {var.size}")
        return device_global(var, ptr, device, dtype, self)

    def annotate(self, kernel: Any = None, *, profile: Any = None,
                 instances: str = "together") -> Any:
        """The cell's source line by line, each line with the machine code the compiler made of
        it: the instructions the ``-lineinfo`` build's line table attributes to it (nvdisasm's;
        no GPU needed), counted by kind (local loads/stores, shared, global, branches,
        barriers; a click shows them), and each kernel's registers, stack and shared memory.

        Parameters
        ----------
        kernel : str or Kernel, optional
            One kernel (its name expression); default every kernel of the module.
        profile : Profile, or a list of them, optional
            What ``kernel.profile(...)`` returned: its warp samples, top stall reasons and
            source counters on the same lines; several side by side.
        instances : {"together", "apart"}
            Kernels that share a line (a template's instances) summed there, or one row each.

        :raises ToolMissingError: no nvdisasm (``pip install nvidia-cuda-nvdisasm``).
        """
        from .annotated import annotate_module

        return annotate_module(self, kernel, profile=profile, instances=instances)

    def load(self, device: int | None = None) -> "Module":
        """Load the module on a device now (default: the current one) instead of at first call:
        the CUBIN into the driver and into the device's context, three driver calls whatever the
        number of kernels. Each kernel's own handle is looked up by its first call (microseconds):
        a module of 1000 kernels of which a few are launched asks the driver for those few.

        :raises NoDeviceError: no CUDA device is available.
        """
        device = driver.current_device() if device is None else device
        driver.ensure_context(device)
        self._binary.library().module()
        return self

    def __getitem__(self, expr: str) -> Kernel:
        try:
            return self.kernels[expr]
        except (KeyError, TypeError):
            pass
        if not isinstance(expr, str):
            raise NameResolutionError(f"a kernel is looked up by its name expression, a str "
                                      f"(module['saxpy<float>']), not {type(expr).__name__} "
                                      f"{expr!r:.60}")
        held = sorted(self.kernels)
        near = similar_names(expr, held)
        more = len(held) - SHOWN_NAMES
        # another instance of a template the module holds: a -n compiles it, a lookup cannot
        template = expr.split("<", 1)[0].strip() if "<" in expr else ""
        other = template and any(h.split("<", 1)[0].strip() == template for h in held)
        raise NameResolutionError(
            f"this module holds no kernel named {expr!r:.200} (lookups take the exact name "
            f"expression given with -n). It holds: {', '.join(held[:SHOWN_NAMES]) or 'nothing'}"
            + (f" and {more} more (module.keys())" if more > 0 else "")
            + (f". Closest: {', '.join(near)}" if near else "")
            + (f". A template is compiled for the instances named only: add -n {expr!r:.200} "
               f"to the cell's line (name_expressions in build()) to compile this one"
               if other else ""))

    def __contains__(self, expr: object) -> bool:
        """Whether ``module[expr]`` gives a kernel (a Mapping's answer: False, never an
        error, for a name it does not hold or a key that is no name)."""
        return isinstance(expr, str) and expr in self.kernels

    def get(self, expr: str, default: Any = None) -> Any:
        """``module[expr]``, or ``default`` where it holds no such kernel (as a Mapping)."""
        return self[expr] if expr in self else default

    def get_function(self, name: str) -> Kernel:
        """The kernel ``name`` (its name expression, or an ``extern "C"`` kernel's name), as
        CuPy's ``RawModule.get_function`` gives it: ``module[name]`` under CuPy's name."""
        return self[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def __repr__(self) -> str:
        return (f"<cudamagic.Module {counted(len(self.kernels), 'kernel')}, "
                f"{self._report.status}, key {self.key[:12]}>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        # as the report shows itself: its first rows and how many more (print(module.report)
        # has them all); a cell ending in module.load() shows this
        self._report._repr_pretty_(p, cycle)

    def _repr_html_(self) -> str:
        return self._report.html()

    def __reduce__(self):
        """A module travels (pickle, Dask) as its entry record: the CUBIN, the kernel table
        and a header under one checksum, checked on arrival. No code object, no driver handle:
        the other process loads the CUBIN on its own GPU on first call, and never compiles."""
        return arrive, (self.payload(), self._report)

    def payload(self) -> bytes:
        if self._payload_bytes is None:
            if isinstance(self.kernels, KernelTable):  # from the table: no Kernel is made
                text = self.kernels.signatures.text
                rows = [TableRow(label, symbol, name, how, text(symbol)).to_json()
                        for label, symbol, name, how in self.kernels.entries()]
                too_long = sorted(self.kernels.signatures.too_long)
            else:
                rows = [TableRow(k.name_expression, k.symbol, k.python_name, k.resolved_by,
                                 k.demangled).to_json() for k in self.kernels.values()]
                too_long = sorted(k.symbol for k in self.kernels.values() if k.name_too_long)
            # the variables' types travel with it, the expressions that name variables (as
            # the lowered map; a travelling module's kernels are its table's), and what the
            # PTX said of grid sync
            record = EntryRecord(cubin=self.cubin, lowered=self._expressions or None,
                                 key=self.key, arch=self._report.arch,
                                 nvrtc_version=self._report.nvrtc_version,
                                 kernels={"placeholders": self._placeholders, "rows": rows,
                                          "too_long": too_long},
                                 variables=None if self._types is None else
                                 {k: v.to_json() for k, v in self._types.items()},
                                 grid_sync=self.image.grid_sync)
            self._payload_bytes = encode_entry(record)
        return self._payload_bytes


# Modules that arrived in this process, by their payload's checksum: a task that brings the
# same module again gets the one already here (its CUBIN already loaded on this GPU).
_arrived: "weakref.WeakValueDictionary[bytes, Module]" = held(
    __name__, "_arrived", weakref.WeakValueDictionary())
_arrived_lock = ForkSafeLock()


def _variable_types(table: Mapping[str, Any]) -> dict[str, VarType]:
    """The types of a shipped module's variables (none: the variables' module not imported)."""
    if not table:
        return {}
    from ..toolchain.binary.variables import VarType

    return {k: VarType.from_json(v) for k, v in table.items()}


def arrive(payload: bytes, report: BuildReport | None) -> Module:
    """A module rebuilt from its travelling record (:meth:`Module.__reduce__`); the same
    payload arriving again gives the module already here.

    :raises ImageError: the record was damaged or altered on the way (its checksum or shape
        does not hold): it is refused.
    """
    digest = entry_digest(payload)
    with _arrived_lock:
        known = _arrived.get(digest)
        if known is not None and known._payload_bytes == payload:
            return known
    try:
        record = decode_entry(payload)
    except BadEntry as exc:
        raise ImageError(f"a cudamagic module arrived damaged or altered and is refused: {exc}"
                         ) from None
    if record.kernels is None:
        raise ImageError("a cudamagic module arrived without its kernel table and is refused")
    binary = Binary(record.cubin, read_cubin(record.cubin).with_grid_sync(record.grid_sync))
    table = [TableRow.from_json(row) for row in record.kernels["rows"]]  # checked by decode
    sigs = Signatures(recorded_texts({r.symbol: r.text for r in table},
                                     record.kernels.get("too_long")),
                      record.kernels["placeholders"])
    held = set(binary.image.symbols)
    missing = next((r.symbol for r in table if r.symbol not in held), None)
    if missing is not None:
        raise ImageError(f"a cudamagic module arrived whose kernel table names {missing!r}, "
                         "which its CUBIN does not hold; it is refused")
    kernels = KernelTable(binary, sigs, [(r.expression, r.symbol, r.python_name, r.resolved_by)
                                         for r in table])
    expressions = record.lowered or {}
    globals_ = {g.name for g in binary.image.globals}
    stray = next((e for e, symbol in expressions.items() if symbol not in globals_), None)
    if stray is not None:
        raise ImageError(f"a cudamagic module arrived whose variable {stray!r} names a symbol "
                         "its CUBIN does not hold; it is refused")
    types = None if record.variables is None else _variable_types(record.variables)
    # the report's rows came without their kernels' images (KernelRows.__reduce__: the CUBIN
    # travels once, in the record): the arrived CUBIN's, for what a row reads off its records
    if report is not None:  # None: a tool run's child, which shows no report
        report = dataclasses.replace(report, rows=tuple(dataclasses.replace(
            row, image=binary.image.kernel(row.symbol) if row.symbol in held else None)
            for row in report.rows))
    module = Module(binary, record.key, kernels, report,  # type: ignore[arg-type]
                    record.kernels["placeholders"], types, expressions)
    module._payload_bytes = payload
    with _arrived_lock:
        _arrived[digest] = module
    return module
