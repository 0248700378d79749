"""The pipeline of one build: options -> key -> cache -> image -> names -> resolve -> kernels.

:func:`build_module` decides everything a build needs up front, in one :class:`BuildContext`;
then a hit (:func:`_restore`) or a miss (:func:`_compile`) each return a complete
:class:`Module`, report included. This module knows no IPython: the magic is a thin shell over
:func:`build_module`, and :func:`build` / :func:`load_cubin` are the Python API. The compiler,
the demangler and the cache come in as arguments so tests can watch them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager

from .toolchain import driver
from .files import NotAFile, TooLarge, read_regular
from .store.disk import _MAGIC as _ENTRY_MAGIC
from .store import BadEntry, EntryRecord, KernelCache, decode_entry, encode_entry
from .toolchain.nvrtc import (CompileResult, compile_cubin, nvrtc_version, shift_lines,
                       supported_archs, template_kernels)
from .toolchain.deps import Manifest, SearchPath, from_scan, from_trace, reads_no_file, trace_headers
from .toolchain.demangle import Demangler, Pending, default_demangler
from .errors import (CompileError, ImageError, InputWarning, NameResolutionError, OptionError,
                     SourceError)
from .toolchain.image import CubinImage, read_cubin
from .launch import Kernel
from .keys import cache_key
from .cxx import Signatures, python_name, valid_python_name
from .options import (DEFAULT_ARCH, PROGRAM_NAME, BuildOptions, nvrtc_options,
                      options_from_nvrtc)
from .view.report import BuildReport, KernelRow
from .cxx import NVRTC, Resolved, closest, plain_kernels, resolve
from .toolkit import toolkit

__all__ = ["Module", "BuildContext", "build", "build_module", "entry_key", "load_cubin",
           "default_arch"]

Compiler = Callable[..., CompileResult]


def default_arch() -> str:
    """The current device's ``sm_XX``; :data:`~cudamagic.options.DEFAULT_ARCH` without a GPU."""
    if not driver.available():
        return DEFAULT_ARCH
    major, minor = driver.compute_capability(driver.current_device())
    return f"sm_{major * 10 + minor}"


class Binary:
    """A CUBIN and its ELF view, loaded into the CUDA driver on first use (once per process;
    the driver then puts it into each device's context on first use there)."""

    def __init__(self, cubin: bytes, image: CubinImage) -> None:
        self.cubin = cubin
        self.image = image
        self._lib: driver.Library | None = None
        self._lock = threading.Lock()

    def _library(self) -> "driver.Library":
        with self._lock:
            if self._lib is None:
                lib = driver.Library.load(self.cubin)
                # one call, not a name per kernel (1 000 calls on a module's first launch):
                # the GPU tests compare the names themselves
                count = lib.kernel_count()
                if count != len(self.image.kernels):  # the driver agrees with the ELF
                    raise ImageError(f"the driver finds {count} kernels in the CUBIN, its ELF "
                                     f"symbol table {len(self.image.kernels)}")
                self._lib = lib
            return self._lib


class Module(Mapping[str, Kernel]):
    """The kernels of one build, by name expression.

    ``module["saxpy<float>"]`` takes the user's exact string; ``module.kernels`` maps every name
    the module answers to (name expressions and plain kernel names) to its :class:`Kernel`.

    Attributes
    ----------
    hit : bool
        Served from the cache.
    report : BuildReport
    key : str
    cubin : bytes
    image : CubinImage
    warnings : tuple of str
    """

    def __init__(self, binary: Binary, key: str, kernels: dict[str, Kernel],
                 report: BuildReport, placeholders: bool = False) -> None:
        self._binary = binary
        self.key = key
        self.kernels = kernels
        self.report = report
        self.warnings = report.warnings
        self._placeholders = placeholders  # how the kernels' demangled texts name T1, T2...
        self._payload_bytes: bytes | None = None
        for kern in kernels.values():
            kern._owner = self  # a kernel that travels takes its module along

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
        return self.report.hit

    def load(self, device: int | None = None) -> "Module":
        """Load every kernel on a device now (default: the current one) instead of at first call.

        :raises NoDeviceError: no CUDA device is available.
        """
        device = driver.current_device() if device is None else device
        driver.ensure_context(device)
        for kern in self.kernels.values():
            kern.function(device, context_ready=True)
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
        near = closest(expr, held)
        raise NameResolutionError(
            f"this module holds no kernel named {expr!r} (lookups take the exact name expression "
            f"given with -n). It holds: {', '.join(held) or 'nothing'}"
            + (f". Closest: {', '.join(near)}" if near else ""))

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def __repr__(self) -> str:
        return (f"<cudamagic.Module {len(self.kernels)} kernels, {self.report.status}, "
                f"key {self.key[:12]}>")

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.report.text())

    def _repr_html_(self) -> str:
        return self.report.html()

    def __reduce__(self):
        """A module travels (pickle, Dask) as its entry record: the CUBIN, the kernel table
        and a header under one checksum, checked on arrival. No code object, no driver handle:
        the other process loads the CUBIN on its own GPU on first call, and never compiles."""
        return _arrive, (self._payload(), self.report)

    def _payload(self) -> bytes:
        if self._payload_bytes is None:
            rows = [[k.name_expression, k.symbol, k.python_name, k.resolved_by, k.signature]
                    for k in self.kernels.values()]
            record = EntryRecord(cubin=self.cubin, lowered=None, key=self.key,
                                 arch=self.report.arch, nvrtc_version=self.report.nvrtc_version,
                                 kernels={"placeholders": self._placeholders, "rows": rows})
            self._payload_bytes = encode_entry(record)
        return self._payload_bytes


# Modules that arrived in this process, by their payload's checksum: a task that brings the
# same module again gets the one already here (its CUBIN already loaded on this GPU).
_arrived: "weakref.WeakValueDictionary[bytes, Module]" = weakref.WeakValueDictionary()
_arrived_lock = threading.Lock()


def _arrive(payload: bytes, report: BuildReport) -> Module:
    """A module rebuilt from its travelling record (:meth:`Module.__reduce__`).

    :raises ImageError: the record was damaged or altered on the way (its checksum or shape
        does not hold): it is refused.
    """
    digest = bytes(payload[len(_ENTRY_MAGIC):len(_ENTRY_MAGIC) + 32])
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
    binary = Binary(record.cubin, read_cubin(record.cubin))
    table = record.kernels["rows"]
    sigs = Signatures({symbol: text for _, symbol, _, _, text in table},
                      record.kernels["placeholders"])
    try:
        kernels = {label: Kernel(binary, name_expression=label, symbol=symbol,
                                 python_name=name, signatures=sigs, resolved_by=how,
                                 image=binary.image.kernel(symbol))
                   for label, symbol, name, how, _ in table}
    except KeyError as exc:
        raise ImageError(f"a cudamagic module arrived whose kernel table names {exc} , which "
                         "its CUBIN does not hold; it is refused") from None
    module = Module(binary, record.key, kernels, report, record.kernels["placeholders"])
    module._payload_bytes = payload
    with _arrived_lock:
        _arrived[digest] = module
    return module




@dataclass
class BuildContext:
    """Everything one build needs, decided before the cache is asked.

    Attributes
    ----------
    source : str
    opts : BuildOptions
    arch : str
    options : tuple of str
        The NVRTC options, in the order NVRTC gets them (and the key hashes them).
    search : SearchPath
        Where the compile looks for headers (for the dependency manifest).
    key : str
    nvrtc : str
        NVRTC's identity in the key (its wheel's dist-info name, or its version).
    store : KernelCache or None
        None: neither read nor write (``--no-cache``).
    demangler : Demangler
    line_offset : int
        NVRTC's line numbers plus this are the cell's (1 below a magic line).
    compiler : callable
    compile_notice : callable returning a context manager, or None
        Wraps the compile (the magic says "compiling..." there).
    reserved : tuple of str
        Python names kernels must not take (the module's own name).
    started : float
        ``time.perf_counter()`` when the build began.
    timings : dict of str to float
        Seconds per phase, filled as the build goes.
    notes : list of str
        Warnings about the input, said once in the report.
    """

    source: str
    opts: BuildOptions
    arch: str
    options: tuple[str, ...]
    search: SearchPath
    key: str
    nvrtc: str
    store: KernelCache | None
    demangler: Demangler
    line_offset: int = 0
    compiler: Compiler = compile_cubin
    compile_notice: Callable[[], ContextManager[Any]] | None = None
    reserved: tuple[str, ...] = ()
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def lap(self, phase: str, since: float) -> float:
        """Record the time since ``since`` under ``phase``; returns now."""
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now


def _context(source: str, opts: BuildOptions, *, cache: KernelCache | None,
             base_dir: str | os.PathLike | None, **rest: Any) -> BuildContext:
    """Check the input and decide everything a build needs (no compile, no cache read).

    :raises SourceError: a source NVRTC cannot take.
    :raises OptionError: a bad option.
    """
    started = time.perf_counter()
    line_offset = rest.get("line_offset", 0)
    _check_source(source, line_offset)
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise OptionError(f"base_dir must be a folder (a str or a path), got "
                          f"{type(base_dir).__name__} {base_dir!r:.60}")
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    notes = [f"-I {d}: no such folder (looked for {base / d})" for d in opts.include_dirs
             if not (base / d).is_dir()]
    if opts.duplicates:
        notes.append(f"-n given more than once for {', '.join(map(repr, opts.duplicates))}: "
                     "each is compiled once")
    tk = toolkit()
    arch = opts.arch or default_arch()
    options = nvrtc_options(opts, arch, tk.include_dirs, base)
    # NVRTC's wheel names the NVRTC a build uses without loading it (loading takes tens of ms,
    # kept off the hit path); without the wheel, ask NVRTC itself
    nv = tk.nvrtc_wheel or nvrtc_version()
    cwd = os.getcwd()
    search = SearchPath(cwd, tuple(o[2:] for o in options if o.startswith("-I")),
                        tk.include_dirs)
    key = cache_key(source=source, name_expressions=opts.name_expressions, options=options,
                    arch=arch, nvrtc_version=nv, toolkit=tk.fingerprint, cwd=cwd)
    store = None if opts.no_cache or rest.pop("keyless", False) else KernelCache.wrap(cache)
    ctx = BuildContext(source=source, opts=opts, arch=arch, options=options, search=search,
                       key=key, nvrtc=nv, store=store,
                       demangler=rest.pop("demangler", None) or default_demangler(),
                       reserved=(opts.module, *rest.pop("reserved", ())), started=started,
                       notes=notes, **rest)
    ctx.lap("key", started)
    return ctx


def entry_key(source: str, opts: BuildOptions, base_dir: str | os.PathLike | None = None
              ) -> tuple[str, str, tuple[str, ...], str]:
    """The cache key of a build, with the arch, NVRTC options and NVRTC identity it implies."""
    ctx = _context(source, opts, cache=None, base_dir=base_dir, keyless=True)
    return ctx.key, ctx.arch, ctx.options, ctx.nvrtc


def build_module(source: str, opts: BuildOptions, *, cache: KernelCache | None = None,
                 base_dir: str | os.PathLike | None = None, line_offset: int = 0,
                 compiler: Compiler = compile_cubin, demangler: Demangler | None = None,
                 compile_notice: Callable[[], ContextManager[Any]] | None = None,
                 reserved: Sequence[str] = ()) -> Module:
    """The pipeline behind :func:`build` and the ``%%cuda`` magic: a hit when the cache can
    serve, else a compile.

    ``line_offset`` shifts NVRTC's line numbers to the cell's (1 below a magic line);
    ``compile_notice`` wraps the compile, when there is one; ``reserved`` names no kernel may
    be pushed under (besides the module's own: the names IPython relies on).
    """
    ctx = _context(source, opts, cache=cache, base_dir=base_dir, line_offset=line_offset,
                   compiler=compiler, demangler=demangler, compile_notice=compile_notice,
                   reserved=tuple(reserved))
    # cu++filt starts now and overlaps the cache read or the compile
    with contextlib.closing(ctx.demangler.start()) as pending:
        if ctx.store is None or opts.force:
            return _compile(ctx, pending, "--no-cache" if ctx.store is None else "--force")
        t = time.perf_counter()
        record, why = ctx.store.get(ctx.key)
        ctx.lap("lookup", t)
        if record is None:
            return _compile(ctx, pending, why or "no cache entry")
        found = _restore(ctx, record, pending)
        if isinstance(found, Module):
            return found
        ctx.store.delete(ctx.key)
    # the entry could not serve; the demangler's one batch may be spent on it
    with contextlib.closing(ctx.demangler.start()) as fresh:
        return _compile(ctx, fresh, found)


_INCOMPLETE = ("NVRTC wrote no list of the headers it read (an NVRTC older than 12.8, or no "
               "room for its trace in /dev/shm or the temporary folder), so the cache follows "
               "quoted includes only: after editing a header included another way, rebuild "
               "with --force")


class _Unservable(Exception):
    """A cache entry that cannot serve this build (the message says why)."""


def _restore(ctx: BuildContext, record: EntryRecord, pending: Pending) -> "Module | str":
    """A module from a cache entry, or the reason it cannot serve (the caller recompiles)."""
    t = time.perf_counter()
    try:
        manifest = Manifest.from_json(record.manifest)
    except ValueError as exc:
        return str(exc)
    stale = manifest.check()
    t = ctx.lap("headers", t)
    if stale:
        return stale
    if not manifest.complete:
        ctx.notes.append(_INCOMPLETE)
    try:
        binary = Binary(record.cubin, read_cubin(record.cubin))
        sigs = _signatures(ctx, binary, pending)
        resolution = resolve(ctx.opts.name_expressions, sigs, record.lowered)
        if resolution.stale:
            raise _Unservable("the cached entry's stored name map does not match its CUBIN: "
                              f"{resolution.stale[0]!r}: {resolution.stale_reasons[0]}")
        if resolution.unresolved:
            u = resolution.unresolved[0]
            raise _Unservable(f"{u.name_expression!r} could not be resolved from the cached "
                              f"CUBIN: {u.reason}")
        made = _kernels(ctx, binary, resolution.resolved, sigs, record.python_names or {},
                        strict=True)
    except ImageError as exc:
        return f"the cached CUBIN is unreadable ({exc})"
    except _Unservable as exc:
        return str(exc)
    ctx.lap("resolve", t)
    return _module(ctx, binary, made, origin="cache", miss_reason=None, record=record)


def _compile(ctx: BuildContext, pending: Pending, miss_reason: str) -> Module:
    """The miss: compile, assemble from NVRTC's exact map, store with the manifest."""
    t = time.perf_counter()
    _check_arch(ctx.arch)  # the first in a process loads NVRTC (100-200 ms)
    t = ctx.lap("nvrtc", t)
    no_files = reads_no_file(ctx.source, ctx.opts.options)
    started_ns = time.time_ns()  # a header changed after this may not be what NVRTC read
    with (ctx.compile_notice or contextlib.nullcontext)():
        result = ctx.compiler(ctx.source, ctx.opts.name_expressions, ctx.options,
                              program_name=PROGRAM_NAME, line_offset=ctx.line_offset,
                              trace=not no_files)
    t = ctx.lap("compile", t)
    if no_files:
        manifest = Manifest()  # nothing was read: nothing to check on a hit
    elif result.trace is not None:
        manifest = from_trace(trace_headers(result.trace), ctx.search, ctx.source, started_ns)
    else:
        manifest = from_scan(ctx.source, ctx.search, started_ns)
        ctx.notes.append(_INCOMPLETE)
    t = ctx.lap("manifest", t)
    try:
        binary = Binary(result.cubin, read_cubin(result.cubin))
    except ImageError as exc:
        raise CompileError(f"NVRTC's output is not a CUBIN ({exc}); check the -o options") \
            from None
    sigs = _signatures(ctx, binary, pending)
    lowered = dict(result.lowered)
    missing = [e for e in ctx.opts.name_expressions if lowered[e] not in sigs]
    if missing:
        raise NameResolutionError(
            "NVRTC lowered these name expressions to no kernel of the CUBIN (a __device__ or "
            "host function, or an -o option that keeps NVRTC from making code?): "
            + ", ".join(repr(e) for e in missing))
    made = _kernels(ctx, binary, [Resolved(e, lowered[e], NVRTC) for e in
                                  ctx.opts.name_expressions], sigs, {}, strict=False)
    ctx.lap("resolve", t)
    record = EntryRecord(cubin=result.cubin, lowered=lowered,
                         log=shift_lines(result.log, -ctx.line_offset),  # source lines
                         options=ctx.options, arch=ctx.arch, nvrtc_version=nvrtc_version(),
                         compile_seconds=result.seconds, manifest=manifest.to_json(),
                         # names as derived, before any suffix that this cell's --module or
                         # its neighbours called for: a later build applies its own
                         python_names={e: python_name(e) for e in ctx.opts.name_expressions})
    if ctx.store is not None and manifest.racy:
        ctx.notes.append(f"not cached: {manifest.racy}, so its text cannot be tied to this "
                         "CUBIN; the next run compiles again")
    elif ctx.store is not None:
        t = time.perf_counter()
        ctx.store.put(ctx.key, record)
        ctx.lap("store", t)
    return _module(ctx, binary, made, origin="compiled", miss_reason=miss_reason,
                   record=record)


def _signatures(ctx: BuildContext, binary: Binary, pending: Pending) -> Signatures:
    """Every kernel's demangled signature (parsed lazily), from the CUBIN's ELF table."""
    t = time.perf_counter()
    symbols = list(binary.image.symbols)
    sigs = Signatures(dict(zip(symbols, pending(symbols))), ctx.demangler.placeholders)
    ctx.lap("demangle", t)
    return sigs


def _kernels(ctx: BuildContext, binary: Binary, resolved: Sequence[Resolved],
             sigs: Signatures, known: Mapping[str, str], strict: bool) -> dict[str, Kernel]:
    """One Kernel per name expression and per plain kernel, each with its Python name.

    ``known`` holds Python names stored with a cache entry; with ``strict`` one that is not an
    identifier makes the entry unservable. Names that sanitize alike, or that would take the
    module's own name, get a suffix, and a note says so.
    """
    namer = _Namer(ctx.reserved, ctx.notes)
    kernels: dict[str, Kernel] = {}
    for r in (*resolved, *plain_kernels(sigs, {r.symbol for r in resolved})):
        stored = known.get(r.name_expression)
        if stored is not None and not valid_python_name(stored):
            if strict:
                raise _Unservable(f"the cached entry's Python name {stored!r} for "
                                  f"{r.name_expression!r} is not an identifier: a bad entry")
            stored = None
        name = namer.name(r.name_expression, r.symbol, stored)
        kernels[r.name_expression] = Kernel(
            binary, name_expression=r.name_expression, symbol=r.symbol, python_name=name,
            signatures=sigs, resolved_by=r.resolved_by, image=binary.image.kernel(r.symbol))
    _note_unnamed(ctx, sigs, {k.symbol for k in kernels.values()})
    return kernels


class _Namer:
    """Python names for kernels: one per symbol, never a reserved one, never two alike."""

    def __init__(self, reserved: Sequence[str], notes: list[str]) -> None:
        self._by_symbol: dict[str, str] = {}
        # the first reserved name is the module's; the rest are the shell's (get_ipython, In...)
        self._owner: dict[str, tuple[str, str]] = {
            r: ("" if i == 0 else "IPython", "") for i, r in enumerate(reserved)}
        self._notes = notes

    def name(self, label: str, symbol: str, stored: str | None) -> str:
        if symbol in self._by_symbol:
            return self._by_symbol[symbol]
        base = stored or python_name(label)
        name, n = base, 2
        while name in self._owner and self._owner[name][1] != symbol:
            name, n = f"{base}_{n}", n + 1
        if name != base:
            other = self._owner[base][0]
            self._notes.append(
                f"{label!r} is pushed as {name!r}: {base!r} is "
                + ("a name IPython relies on" if other == "IPython" else
                   f"taken by {other!r}" if other else "the module's own name (--module)"))
        self._owner[name] = (label, symbol)
        self._by_symbol[symbol] = name
        return name


def _note_unnamed(ctx: BuildContext, sigs: Signatures, named: set[str]) -> None:
    """Say what a cell defines but the user cannot call: templates without a -n, overloads
    without a cast, or no kernel at all."""
    # non-template kernels left without a name are overloads: only a cast can pick one
    unnamed = [sigs.text(s) for s in sigs
               if s not in named and sigs.maybe_plain(s) and "<" not in sigs[s].name]
    asked = {e.split("<", 1)[0].strip().rsplit("::", 1)[-1] for e in ctx.opts.name_expressions}
    templates = [name for name in template_kernels(ctx.source) if name not in asked]
    if templates:
        first = templates[0]
        ctx.notes.append(
            f"the __global__ template{'s' if len(templates) > 1 else ''} "
            f"{', '.join(templates)} {'are' if len(templates) > 1 else 'is'} "
            f"not compiled: a template kernel is compiled only for the instances named with "
            f'-n, e.g. -n "{first}<float>" (name_expressions=["{first}<float>"] in build())')
    elif not sigs:
        ctx.notes.append("the cell defines no __global__ kernel (only __device__ or host code): "
                         "there is nothing to call from Python")
    if unnamed:
        ctx.notes.append(f"{len(unnamed)} overloaded kernel(s) have no name to call them by; "
                         "name each with a cast, e.g. -n \"(void(*)(float*))f\": "
                         + "; ".join(unnamed[:5]))


def _module(ctx: BuildContext, binary: Binary, kernels: dict[str, Kernel], *, origin: str,
            miss_reason: str | None, record: EntryRecord) -> Module:
    """The finished module, with its report (and the build remembered as its cell's last, so
    that the next miss can say what changed)."""
    from .explain import note_build

    t = time.perf_counter()
    explanation = note_build(ctx, origin, miss_reason)
    ctx.lap("history", t)
    ctx.timings["total"] = time.perf_counter() - ctx.started

    def sizes(k: Kernel) -> tuple[int, ...] | None:
        # extern "C": the symbol carries no types, so the report shows the CUBIN's sizes
        if "(" in k.signature:
            return None
        try:
            params = binary.image.kernel(k.symbol).params
        except ImageError:  # the launch says so; the report shows "?"
            return None
        return None if params is None else tuple(p.size for p in params)

    rows = tuple(KernelRow(k.python_name, k.name_expression, k.symbol, k.signature,
                           k.resolved_by, placeholders=ctx.demangler.placeholders,
                           param_sizes=sizes(k)) for k in kernels.values())
    report = BuildReport(
        key=ctx.key, hit=origin == "cache", origin=origin, miss_reason=miss_reason,
        timings=dict(ctx.timings), demangler=ctx.demangler.name,
        enumerated_by="ELF symbol table", arch=ctx.arch, nvrtc_version=record.nvrtc_version,
        cache_dir=ctx.store.location if ctx.store else "(not cached)",
        log=shift_lines(record.log, ctx.line_offset),  # the cell's own line numbers
        rows=rows, warnings=tuple(dict.fromkeys(ctx.notes)), explanation=explanation,
        module_name=ctx.opts.module)
    return Module(binary, ctx.key, kernels, report, ctx.demangler.placeholders)


def _check_arch(arch: str) -> None:
    """Before a compile (never on a hit: asking NVRTC loads it): can this NVRTC target arch?

    :raises OptionError: it cannot (a GPU newer than the NVRTC, or a typo in --arch).
    """
    sm = int("".join(ch for ch in arch if ch.isdigit()))
    if sm not in supported_archs():
        raise OptionError(f"NVRTC {nvrtc_version()} cannot build a CUBIN for {arch} (it supports "
                          f"sm_{', sm_'.join(map(str, supported_archs()))}); install a newer "
                          "nvidia-cuda-nvrtc, or give --arch one of those")


def _line_of(source: str, index: int, line_offset: int) -> int:
    return source.count("\n", 0, index) + 1 + line_offset


def _check_source(source: str, line_offset: int) -> None:
    """Refuse what NVRTC cannot take, saying where.

    :raises SourceError: an empty source, a NUL byte, text that is not valid UTF-8.
    """
    if not isinstance(source, str):
        raise SourceError(f"the source must be a str, got {type(source).__name__}")
    if not source.strip():
        raise SourceError("the cell is empty: there is no CUDA C++ to compile")
    if "\0" in source:
        raise SourceError(f"line {_line_of(source, source.index(chr(0)), line_offset)}: the "
                          "source holds a NUL byte, which NVRTC cannot take; remove it")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SourceError(f"line {_line_of(source, exc.start, line_offset)}: the source holds "
                          f"text that is not valid UTF-8 ({source[exc.start]!r}); re-type or "
                          "remove it") from None


def _warn(module: Module) -> Module:
    """Say the build's warnings once, as Python warnings, for callers that show no report."""
    for note in module.warnings:
        warnings.warn(note, InputWarning, stacklevel=3)
    return module


def build(source: str, name_expressions: Sequence[str] = (), options: Sequence[str] = (),
          arch: str | None = None, cache: "KernelCache | Any" = None, *, force: bool = False,
          use_cache: bool = True, base_dir: str | os.PathLike | None = None) -> Module:
    """Compile CUDA C++ (or take it from the cache) and return its kernels.

    Parameters
    ----------
    source : str
        CUDA C++ source.
    name_expressions : sequence of str
        Kernels to instantiate and export, exactly as written (``"saxpy<float>"``).
    options : sequence of str
        NVRTC options (``-std=c++20``, ``-I dir``, ``-DN=4``, ``-lineinfo``...), kept in order.
    arch : str, optional
        ``sm_XX``; default the current device's (``sm_90`` without a GPU).
    cache : KernelCache, diskcache.Cache, path or None
        None is the default on-disk cache (``$CUDAMAGIC_CACHE_DIR`` or ``~/.cache/cudamagic``).
    force : bool
        Recompile and overwrite the cache entry.
    use_cache : bool
        False neither reads nor writes the cache.
    base_dir : path, optional
        Folder for relative ``-I`` and angle includes (default: the working directory, which
        NVRTC also searches first for the source's quoted includes).

    :raises CompileError: NVRTC refused the source or a name expression.
    :raises OptionError: a bad option or argument.
    :raises NameResolutionError: a name expression that names no kernel.
    """
    opts = options_from_nvrtc(options, name_expressions, arch, force=force,
                              no_cache=not use_cache)
    return _warn(build_module(source, opts, cache=cache, base_dir=base_dir))


_MAX_CUBIN = 4 << 30  # a sanity bound: CUBINs of many thousand kernels are tens of MB


def _read_cubin_arg(path_or_bytes: object) -> tuple[bytes, str]:
    """The bytes of what :func:`load_cubin` was given, and a label for messages.

    :raises ImageError: not bytes, not a path, or a path that cannot be read as a file.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), "<bytes>"
    if not isinstance(path_or_bytes, (str, os.PathLike)):
        raise ImageError(f"load_cubin takes a path or the CUBIN's bytes, got "
                         f"{type(path_or_bytes).__name__}")
    label = os.fspath(path_or_bytes)
    try:  # a path the user gave: a link is followed, a FIFO or a device refused at once
        return read_regular(label, max_size=_MAX_CUBIN, follow_links=True), label
    except NotAFile as exc:
        if exc.kind == "a folder":
            raise ImageError(f"{label} is a folder, not a CUBIN file") from None
        raise ImageError(f"{label} is not a regular file (a FIFO, a device or a socket): "
                         "give the CUBIN file itself") from None
    except TooLarge as exc:
        raise ImageError(f"{label} is {exc.size} bytes: more than a CUBIN is "
                         f"({_MAX_CUBIN >> 20} MiB at most)") from None
    except OSError as exc:
        raise ImageError(f"{label} cannot be read: {exc.strerror or exc}") from None


def load_cubin(path_or_bytes: "str | os.PathLike | bytes", name_expressions: Sequence[str] = (),
               *, module: str | None = None, demangler: Demangler | None = None) -> Module:
    """A module from a CUBIN built elsewhere (``nvcc -cubin``), resolved by demangling alone.

    :raises ImageError: not a CUBIN, or a path that cannot be read.
    :raises NameResolutionError: a name expression that names no kernel, or several, with the
        closest candidates.
    """
    started = time.perf_counter()
    opts = options_from_nvrtc((), name_expressions, **({"module": module} if module else {}))
    cubin, label = _read_cubin_arg(path_or_bytes)
    binary = Binary(cubin, read_cubin(cubin))
    ctx = BuildContext(source="", opts=opts,
                       arch=f"sm_{binary.image.sm}" if binary.image.sm else "?", options=(),
                       search=SearchPath(os.getcwd(), ()), key=record_key(cubin), nvrtc="-",
                       store=None, demangler=demangler or default_demangler(),
                       reserved=(opts.module,), started=started)
    with contextlib.closing(ctx.demangler.start()) as pending:
        sigs = _signatures(ctx, binary, pending)
    resolution = resolve(opts.name_expressions, sigs)
    if resolution.unresolved:
        lines = [f"  {u.name_expression!r}: {u.reason}"
                 + (f"; closest: {'; '.join(u.candidates)}" if u.candidates else "")
                 for u in resolution.unresolved]
        raise NameResolutionError(f"{label}: these name expressions could not be resolved "
                                  "(a CUBIN from elsewhere has no stored name map, so only "
                                  "demangling can find them):\n" + "\n".join(lines))
    made = _kernels(ctx, binary, resolution.resolved, sigs, {}, strict=False)
    record = EntryRecord(cubin=cubin, lowered=None, arch=ctx.arch, nvrtc_version="-")
    return _warn(_module(ctx, binary, made, origin="cubin", miss_reason=None, record=record))


def record_key(cubin: bytes) -> str:
    """The key a CUBIN from elsewhere is known by: its sha256."""
    return hashlib.sha256(cubin).hexdigest()
