"""The pipeline of one build: options -> key -> cache -> image -> names -> resolve -> kernels.

:func:`build_module` decides everything a build needs up front, in one :class:`BuildContext`;
then a hit (:func:`_cached`) or a miss (:func:`_compile`) each return a complete
:class:`~cudamagic.pipeline.module.Module`, report included. This module knows no IPython: the magic is
a thin shell over :func:`build_module`, and :mod:`cudamagic.pipeline.api`'s :func:`~cudamagic.pipeline.api.build` and
:func:`~cudamagic.pipeline.api.load_cubin` are the Python API. The compiler, the demangler and the cache come in as :class:`BuildSettings` so tests can
watch them. What a module is, and how it travels, is :mod:`cudamagic.pipeline.module`; how kernels are
named for Python, :mod:`cudamagic.pipeline.naming`; why a miss happened, :mod:`cudamagic.pipeline.explain`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, cast

from ..cxx.resolve import NVRTC, Resolved, ResolvedBy, plain_kernels, resolve
from ..cxx.signatures import Signatures, stored_signatures, symbol_record
from ..core.forksafe import ForkSafeLock
from ..core.process import InChild, InTest, held
from ..errors import CompileError, CudaMagicError, ImageError, NameResolutionError, OptionError
from ..store.keys import cache_key
from ..core.miss import BuildOrigin, BuildPhase, HitKind, Miss, MissKind, StoreOutcome, Stored
from .module import Binary, KernelTable, Module
from .naming import Namer, derived_name, invalid_names, unnamed_hints
from ..core.libraries import NO_LIBRARY, LibraryOptions, library_options
from ..core.options import (DEFAULT_ARCH, PROGRAM_NAME, BuildOptions, arch_sm, check_source,
                            check_text, include_folders, is_folder, nvrtc_options, shown_path,
                            working_folder, options_from_args, relocatable, shift_lines)  # noqa: F401 - tests'
from ..store import EntryRecord, KernelCache
from ..store.entry import made_here
from ..store.cache import default_cache_dir
from ..store.disk import CACHE_WAIT_S
from ..toolchain import compile_cubin, nvrtc_identity, nvrtc_version
from ..toolchain.device import driver
from ..toolchain.binary import elf
from ..toolchain.binary.demangle import Demangler, Pending, default_demangler
from ..toolchain.binary.image import read_cubin
from ..toolchain.compile.manifest import Manifest, ManifestChecks, SearchPath, own_headers
from ..core.toolkit import std_header_dirs, toolkit
from .typed import PROBE_RETRIED, answers, contradicted, stored_types, variable_expressions
from ..view.report import BuildReport, KernelRow, KernelRows

if TYPE_CHECKING:  # pragma: no cover  (the compile's records: a hit never imports them)
    from ..compiler.client import ServedCompiler
    from .precompiled import PchUse
    from ..toolchain.compile import deps, fatbin
    from ..toolchain.compile.listing import HeaderListing
    from ..toolchain.compile.nvrtc import CompileResult
    from ..toolchain.binary.variables import VarType

__all__ = ["Module", "BuildSettings", "BuildContext", "build_module", "entry_key", "default_arch"]

Compiler = Callable[..., "CompileResult"]


class _Served:
    """:data:`SERVED` before its first use: the compile server's client
    (:class:`~cudamagic.compiler.client.ServedCompiler`) is a miss's, so its modules are
    imported by the first attribute or call asked of it, never by a hit."""

    def _client(self) -> Any:
        from ..compiler.client import ServedCompiler

        with _SERVED_LOCK:
            if _SERVED_CLIENT[0] is None:
                _SERVED_CLIENT[0] = ServedCompiler(compile_cubin, default_cache_dir)
        return _SERVED_CLIENT[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._client()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client(), name)


_SERVED_LOCK = ForkSafeLock()
# the compile server's client, made on the first miss (a hit never imports it): a live
# object (each request opens a connection of its own, so a forked child may use its copy), kept
# by a forked child and by a test's reset
_SERVED_CLIENT: list[Any] = held(__name__, "_SERVED_CLIENT", [None], child=InChild.KEPT,
                                 test=InTest.KEPT, clear=lambda: None)
#: The default compiler: the compile server's (docs/architecture.md), NVRTC in this process
#: where none serves
SERVED = cast("ServedCompiler", _Served())


def default_arch() -> str:
    """The current device's ``sm_XX`` (:func:`~cudamagic.toolchain.device.driver.current_sm`: in a
    child forked after CUDA started, its parent's); :data:`~cudamagic.core.options.DEFAULT_ARCH`
    without a GPU."""
    sm = driver.current_sm()
    return DEFAULT_ARCH if sm is None else f"sm_{sm}"


@dataclass(frozen=True)
class BuildSettings:
    """How one build runs, besides what it builds (:class:`~cudamagic.core.options.BuildOptions`).

    Attributes
    ----------
    cache : KernelCache, diskcache.Cache, path or None
        Where entries are read and written; None is the default on-disk cache.
    base_dir : path or None
        The folder relative ``-I`` folders and angle includes are taken from; None: the
        working folder.
    line_offset : int
        NVRTC's line numbers plus this are the cell's (1 below a magic line).
    compiler : callable
        Compiles on a miss (:func:`~cudamagic.toolchain.compile.nvrtc.compile_cubin`'s signature).
    demangler : Demangler or None
        Demangles the CUBIN's symbols; None: the default one.
    compile_notice : callable returning a context manager, or None
        Wraps the compile (the magic says "compiling..." there).
    reserved : tuple of str
        Python names no kernel may take besides the module's own (the shell's: ``get_ipython``,
        ``In``, ``Out``...).
    cell : str or None
        The identity the shell gives the cell (IPython's cell id): the history compares a miss
        with that cell's own earlier builds. None: the module name identifies it.
    """

    cache: "KernelCache | Any" = None
    base_dir: "str | os.PathLike | None" = None
    line_offset: int = 0
    compiler: Compiler = SERVED
    demangler: Demangler | None = None
    compile_notice: "Callable[[], ContextManager[Any]] | None" = None
    reserved: tuple[str, ...] = ()
    cell: str | None = None

    def __post_init__(self) -> None:
        if self.base_dir is not None and not isinstance(self.base_dir, (str, os.PathLike)):
            raise OptionError(f"base_dir must be a folder (a str or a path), got "
                              f"{type(self.base_dir).__name__} {self.base_dir!r:.60}")
        if self.base_dir is not None:  # NVRTC takes its folders as text
            check_text("base_dir", os.fsdecode(os.fspath(self.base_dir)))
        object.__setattr__(self, "reserved", tuple(self.reserved))


@dataclass(frozen=True)
class BuildContext:
    """Everything one build decided before the cache is asked; ``timings`` and ``notes`` are
    filled as it goes.

    Attributes
    ----------
    source : str
    opts : BuildOptions
    settings : BuildSettings
    arch : str
    options : tuple of str
        The NVRTC options, in the order NVRTC gets them (and the key hashes them).
    search : SearchPath
        Where the compile looks for headers (for the dependency manifest).
    key : str
    nvrtc : str
        NVRTC's identity in the key (its wheel's dist-info name, or its version and library).
    toolkit : str
        The fingerprint of the headers every build sees (in the key).
    store : KernelCache or None
        None: neither read nor write (``--no-cache``).
    demangler : Demangler
    started : float
        ``time.perf_counter()`` when the build began.
    timings : dict of BuildPhase to float
        Seconds per phase.
    notes : list of str
        Warnings about the input, said once in the report.
    pch_used : list of precompiled.PchUse
        What became of the miss's precompiled header (empty: it was given none).
    inputs : callable or None
        A module's rebuild (:func:`rebuild`): given the manifest of what this build read (its
        compile's, or its entry's on a hit), raises where that is not what the module read.
    added : LibraryOptions
        The options added for a library the cell includes (CUTLASS), in ``options`` already.
    """

    source: str
    opts: BuildOptions
    settings: BuildSettings
    arch: str
    options: tuple[str, ...]
    search: SearchPath
    key: str
    nvrtc: str
    toolkit: str
    store: KernelCache | None
    demangler: Demangler
    started: float = field(default_factory=time.perf_counter)
    timings: dict[BuildPhase, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    pch_used: "list[PchUse]" = field(default_factory=list)
    inputs: "Callable[[Manifest], None] | None" = None
    #: how the miss's list of headers was had (toolchain/compile/listing.py)
    listings: "list[HeaderListing]" = field(default_factory=list)
    added: LibraryOptions = NO_LIBRARY

    @property
    def pch_use(self) -> "PchUse | None":
        """What became of the miss's precompiled header (None: it was given none)."""
        return self.pch_used[-1] if self.pch_used else None

    @property
    def line_offset(self) -> int:
        """NVRTC's line numbers plus this are the cell's."""
        return self.settings.line_offset

    @property
    def reserved(self) -> tuple[str, ...]:
        """The Python names kernels must not take: the module's own first."""
        return (self.opts.module, *self.settings.reserved)

    def lap(self, phase: BuildPhase, since: float) -> float:
        """Record the time since ``since`` under ``phase``; returns now."""
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now


def _context(source: str, opts: BuildOptions, settings: BuildSettings,
             keyless: bool = False) -> BuildContext:
    """Check the input and decide everything a build needs (no compile, no cache read);
    ``keyless`` opens no cache.

    :raises SourceError: a source NVRTC cannot take.
    :raises OptionError: a bad option, or a working folder NVRTC cannot search.
    """
    started = time.perf_counter()
    check_source(source, settings.line_offset)
    cwd = working_folder()
    base = Path(settings.base_dir) if settings.base_dir is not None else Path(cwd)
    notes = [f"-I {shown_path(d)}: no such folder (looked for {shown_path(str(base / d))})"
             for d in opts.include_dirs if not is_folder(base / d)]
    if opts.duplicates:
        notes.append(f"-n given more than once for {', '.join(map(repr, opts.duplicates))}: "
                     "each is compiled once")
    tk = toolkit()
    arch = opts.arch or default_arch()
    added = _library(source, opts, base)
    notes += added.notes
    options = nvrtc_options(opts, arch, tk.include_dirs, base, cwd, added.options)
    # NVRTC's wheel names the NVRTC a build uses without loading it (loading takes tens of ms,
    # kept off the hit path); without the wheel, NVRTC's version and its library's file
    nv = tk.nvrtc_wheel or nvrtc_identity()
    before, after = std_header_dirs()  # package files, as the toolkit's are
    search = SearchPath(cwd, include_folders(options),
                        (*before, *tk.include_dirs, *after, *added.versioned),
                        (*_named(opts, tk.named, base, cwd), *_shim_names(before, after),
                         *added.named))
    fingerprint = tk.fingerprint + added.fingerprint
    key = cache_key(source=source, name_expressions=opts.name_expressions,
                    options=_travelling(options, search), arch=arch, nvrtc_version=nv,
                    toolkit=fingerprint)
    store = None if opts.no_cache or keyless else KernelCache.wrap(settings.cache)
    ctx = BuildContext(source=source, opts=opts, settings=settings, arch=arch, options=options,
                       search=search, key=key, nvrtc=nv, toolkit=fingerprint, store=store,
                       demangler=settings.demangler or default_demangler(), started=started,
                       notes=notes, added=added)
    ctx.lap(BuildPhase.KEY, started)
    return ctx


def _library(source: str, opts: BuildOptions, base: Path) -> LibraryOptions:
    """What the libraries the cell's own ``#include`` lines name need (CUTLASS, CuTe); the
    directives are read only where the text names such a folder at all."""
    if "cute/" not in source and "cutlass/" not in source:
        return NO_LIBRARY
    from ..cxx.declared import included_headers  # never a hit's import where no such folder
    return library_options(opts, included_headers(source), base)


def _named(opts: BuildOptions, toolkit_named: Sequence[tuple[str, str]], base: Path,
           cwd: str) -> tuple[tuple[str, str, str], ...]:
    """The folders of a build that have names that travel (:attr:`SearchPath.named`): the
    toolkit's, and the ``-I`` folders given relative (and ``base_dir``), from ``cwd``."""
    rel = [base / d for d in opts.include_dirs if not os.path.isabs(d)]
    if base.resolve() != Path(cwd).resolve():
        rel.append(base)
    return (*((d, n, "") for d, n in toolkit_named),
            *((str(p.resolve()), ".", os.path.relpath(p.resolve(), cwd)) for p in rel))


def _shim_names(before: Sequence[str], after: Sequence[str]
                ) -> tuple[tuple[str, str, str], ...]:
    """cudamagic's own header folders by names that travel (``cudamagic-std``): the same in
    every installation; their files are checked on a hit like the toolkit's."""
    return (*((d, "cudamagic-nvrtc", "") for d in before),
            *((d, "cudamagic-std", "") for d in after))


def _travelling(options: Sequence[str], search: SearchPath) -> tuple[str, ...]:
    """The NVRTC options as the key names them: each toolkit or relative ``-I`` folder by
    its root and path (:meth:`SearchPath.portable`; NUL, which no option holds, keeps the two
    apart), an absolute one as it is."""
    named = {folder for folder, _, _ in search.named}
    return tuple("-I" + "\0".join(search.portable(o[2:])) if o[:2] == "-I" and o[2:] in named
                 else o for o in options)


def entry_key(source: str, opts: BuildOptions, base_dir: str | os.PathLike | None = None
              ) -> tuple[str, str, tuple[str, ...], str]:
    """The cache key of a build, with the arch, NVRTC options and NVRTC identity it implies."""
    ctx = _context(source, opts, BuildSettings(base_dir=base_dir), keyless=True)
    return ctx.key, ctx.arch, ctx.options, ctx.nvrtc


def build_module(source: str, opts: BuildOptions, *, cache: KernelCache | None = None,
                 base_dir: str | os.PathLike | None = None, line_offset: int = 0,
                 compiler: Compiler = SERVED, demangler: Demangler | None = None,
                 compile_notice: Callable[[], ContextManager[Any]] | None = None,
                 reserved: Sequence[str] = (), cell: str | None = None) -> Module:
    """The pipeline behind :func:`build` and the ``%%cuda`` magic: a hit when the cache can
    serve, else a compile. The keyword arguments are :class:`BuildSettings`' fields.
    """
    settings = BuildSettings(cache=cache, base_dir=base_dir, line_offset=line_offset,
                             compiler=compiler, demangler=demangler,
                             compile_notice=compile_notice, reserved=tuple(reserved), cell=cell)
    return _built(_context(source, opts, settings))


def rebuild(ctx: BuildContext, option: str, inputs: Callable[[Manifest], None]) -> Module:
    """A module's cell built again with one more NVRTC option (``-lineinfo``) from what the
    module was built from: its source, options, search path, arch, NVRTC and toolkit as its
    ``ctx`` recorded them, not the environment's now; ``inputs`` checks what it read."""
    opts = replace(ctx.opts, options=(*ctx.opts.options, option), force=False, quiet=True)
    at = 2 + len(ctx.opts.options)  # nvrtc_options: -arch, -std, the user's, the folders
    options = (*ctx.options[:at], option, *ctx.options[at:])
    key = cache_key(source=ctx.source, name_expressions=opts.name_expressions, arch=ctx.arch,
                    options=_travelling(options, ctx.search), nvrtc_version=ctx.nvrtc,
                    toolkit=ctx.toolkit)
    settings = replace(ctx.settings, compile_notice=None,
                       cell=f"{ctx.settings.cell or ctx.opts.module}:{option.lstrip('-')}")
    return _built(replace(ctx, opts=opts, settings=settings, options=options, key=key,
                          started=time.perf_counter(), timings={}, notes=[], pch_used=[],
                          inputs=inputs))


def _built(ctx: BuildContext) -> Module:
    """A hit when the cache can serve, else a compile."""
    if ctx.store is not None and not ctx.opts.force:
        found = _cached(ctx, ctx.store)
        if isinstance(found, Module):
            return found
        miss = found
    else:
        miss = Miss(MissKind.NO_CACHE if ctx.store is None else MissKind.FORCED)
    # a miss: cu++filt (a process) starts now and overlaps the compile; a hit reads the texts
    # its entry stored and starts none
    with contextlib.closing(ctx.demangler.start()) as pending:
        return _compile(ctx, pending, miss)


#: Why a compile whose trace NVRTC broke is not cached (said as "not cached: ...")
_BROKEN_TRACE = ("the headers it read are not known (NVRTC's list of them is broken in this "
                 "process since a compile failed inside a header: restart the kernel, or the "
                 "process, to cache again)")
#: The same, as the cell's history keeps it: read by the next miss of the same inputs, maybe in a
#: restarted kernel whose NVRTC lists its headers again (there "in this process" is untrue)
_BROKEN_TRACE_THEN = ("the headers it read were not known (NVRTC's list of them was broken in "
                      "the process that built it, since a compile had failed inside a header "
                      "there)")
_INCOMPLETE = ("NVRTC wrote no list of the headers it read (an NVRTC older than 12.8, or no "
               "room for its trace in /dev/shm or the temporary folder), so the cache follows "
               "quoted includes only: after editing a header included another way, rebuild "
               "with --force")


class _Unservable(Exception):
    """A cache entry that cannot serve this build (``miss`` says why)."""

    def __init__(self, miss: Miss) -> None:
        super().__init__(miss.detail)
        self.miss = miss


def _cached(ctx: BuildContext, store: KernelCache) -> "Module | Miss":
    """The module the cache serves, or why it serves none. The cache asks ``checks`` of
    the folder's entry and of each build of the key the remote tier holds (the newest whose
    headers match serves); the lookup's time is split into the folder's, the server's and
    the header checks'."""
    t = time.perf_counter()
    checks = ManifestChecks(ctx.search)
    looked = store.lookup(ctx.key, checks)
    ctx.lap(BuildPhase.LOOKUP, t)
    ctx.timings[BuildPhase.LOOKUP] -= looked.remote_seconds + checks.seconds
    for phase, seconds in ((BuildPhase.REMOTE, looked.remote_seconds),
                           (BuildPhase.HEADERS, checks.seconds)):
        if seconds:
            ctx.timings[phase] = seconds
    if looked.record is None:
        return looked.miss or Miss(MissKind.NO_ENTRY)
    assert checks.held is not None  # the cache serves no entry it did not check
    if ctx.inputs is not None:  # a rebuild: the entry's headers must be the module's
        ctx.inputs(checks.held)
    found = _served(ctx, looked.record, checks.held, looked.hit)
    if not isinstance(found, Module):
        store.refuse(ctx.key, looked.hit)
    return found


def _served(ctx: BuildContext, record: EntryRecord, manifest: Manifest,
            hit: HitKind | None) -> "Module | Miss":
    """The module from an entry whose manifest holds, or why it cannot serve. An entry from
    the remote tier, or one whose manifest was checked by content here, is kept in the folder
    with this machine's file times, so that the next hit takes the fast path."""
    t = time.perf_counter()
    if not manifest.complete:
        ctx.notes.append(_INCOMPLETE)
    if elf.elf_type(record.cubin) == elf.ET_REL:  # cached unlinked before builds were linked
        return Miss(MissKind.DAMAGED, "the cached CUBIN is relocatable device code that was "
                                      "never linked (the driver cannot launch it)")
    try:
        binary = Binary(record.cubin, read_cubin(record.cubin).with_grid_sync(record.grid_sync))
        sigs = _signatures(ctx, binary, None, record.symbols)
        var_exprs = variable_expressions(ctx.opts.name_expressions, record.lowered or {},
                                         binary.image)
        lying = contradicted(var_exprs)
        if lying is not None:
            raise _Unservable(Miss(MissKind.DAMAGED, "the cached entry's stored name map does "
                                   f"not match its CUBIN: {lying!r}: its variable "
                                   f"{var_exprs[lying]} is another entity"))
        resolution = resolve([e for e in ctx.opts.name_expressions if e not in var_exprs],
                             sigs, record.lowered)
        if resolution.stale:
            raise _Unservable(Miss(MissKind.DAMAGED, "the cached entry's stored name map does "
                                   f"not match its CUBIN: {resolution.stale[0]!r}: "
                                   f"{resolution.stale_reasons[0]}"))
        if resolution.unresolved:
            u = resolution.unresolved[0]
            raise _Unservable(Miss(MissKind.UNRESOLVED, f"{u.name_expression!r} could not be "
                                   f"resolved from the cached CUBIN: {u.reason}"))
        made = _kernels(ctx, binary, resolution.resolved, sigs, record.python_names or {},
                        strict=True)
    except ImageError as exc:
        return Miss(MissKind.DAMAGED, f"the cached CUBIN is unreadable ({exc})")
    except _Unservable as exc:
        return exc.miss
    t = ctx.lap(BuildPhase.RESOLVE, t)
    fresh = manifest.restamped()
    if ctx.store is not None and (fresh is not None or hit is HitKind.REMOTE):
        ctx.store.keep(ctx.key, replace(record, manifest=fresh or record.manifest))
        ctx.lap(BuildPhase.STORE, t)
    return _module(ctx, binary, made, origin=BuildOrigin.CACHE, miss=None, record=record,
                   variables=(stored_types(record.variables), var_exprs), hit=hit,
                   inputs=manifest)


def _compile(ctx: BuildContext, pending: Pending, miss: Miss) -> Module:
    """The miss: compile, assemble from NVRTC's exact map, store with the manifest; Ctrl-C
    from the compile's start to the stored entry is raised after it (:class:`~cudamagic.pipeline.interrupts.Interrupts`)."""
    _refuse_known_failures(ctx)
    t = time.perf_counter()
    _check_arch(ctx.arch, ctx.settings.compiler)  # the first loads NVRTC (its own phase)
    t = ctx.lap(BuildPhase.NVRTC, t)
    from .interrupts import Interrupts  # a miss's: a hit holds no interrupt

    with Interrupts() as interrupts:
        try:
            module, kept = _compile_held(ctx, pending, miss, t, interrupts)
        except CudaMagicError:
            interrupts.raise_if_asked(t, Stored(StoreOutcome.FAILED))
            raise
    interrupts.raise_if_asked(t, kept)
    return module


def _refuse_known_failures(ctx: BuildContext) -> None:
    """Before a compile: a header the cell includes that cudamagic knows NVRTC cannot compile
    (``<cub/cub.cuh>``) is said at once, with what works instead, not after a compile of
    seconds that fails.

    :raises CompileError: the cell includes one (nothing is compiled or cached).
    """
    from ..core.toolkit import known_to_fail
    found = known_to_fail(ctx.source, ctx.search.include_dirs, ctx.search.cwd)
    if found:
        said = [f"line {line + ctx.line_offset}: #include <{name}>: NVRTC cannot compile this "
                "header, so the cell was not compiled" for line, name, _ in found]
        raise CompileError("\n".join([*said, *(f"hint: {hint}" for _, _, hint in found)]))


def _before_compile(ctx: BuildContext) -> tuple[bool, dict[str, deps.Listing], int]:
    """Whether the cell can open no file, what its search folders held at the start, and when
    it started (a header changed after that may not be what NVRTC read)."""
    from ..toolchain.compile import deps
    no_files = deps.reads_no_file(ctx.source, ctx.opts.options)
    return no_files, {} if no_files else deps.list_search_folders(ctx.search), time.time_ns()


def _compile_held(ctx: BuildContext, pending: Pending, miss: Miss, t: float,
                  interrupts: Any = None) -> tuple[Module, Stored]:
    """:func:`_compile`'s work, with Ctrl-C held: the module and what became of its entry."""
    from .precompiled import dropped_on_failure, held_headers, plan_for
    from ..toolchain.binary import ptx
    from ..toolchain.compile.probe import typed_compile
    no_files, listed, started_ns = _before_compile(ctx)
    notice, served = ctx.settings.compile_notice or contextlib.nullcontext, \
        served_facts(ctx.settings.compiler)
    plan = None if no_files else plan_for(ctx.opts, ctx.store, ctx.source, ctx.options, (
        ctx.nvrtc, ctx.toolkit), ctx.search, ctx.notes, served, holder=_holder(ctx))
    with notice(), dropped_on_failure(plan), _stoppable(served, interrupts):  # probe's too
        typed = typed_compile(ctx.settings.compiler, ctx.source, ctx.opts.name_expressions,
                              ctx.options, program_name=PROGRAM_NAME, line_offset=ctx.line_offset,
                              trace=not no_files, **({} if plan is None else {"pch": plan}))
    ctx.notes.extend([PROBE_RETRIED.format(typed.compiles)] if typed.compiles > 1 else [])
    result, t = typed.result, _lap_compile(ctx, typed.result, t)
    if relocatable(ctx.options):  # -rdc/-dc/-dlto: only the linked CUBIN can be loaded
        from ..toolchain.compile.link import link_compiled
        result = link_compiled(result, ctx.arch, ctx.options)
        t = ctx.lap(BuildPhase.LINK, t)
    manifest = _manifest(ctx, result, no_files, started_ns, listed, held_headers(plan, result))
    _settle_pch(ctx, plan, result, manifest)
    t = ctx.lap(BuildPhase.MANIFEST, t)
    try:
        image = read_cubin(result.cubin)  # what the PTX said of grid sync, where it was read
        binary = Binary(result.cubin, image.with_grid_sync(
            ptx.grid_sync_table(result.grid_sync, image.symbols)))
    except ImageError as exc:
        raise CompileError(f"NVRTC's output is not a CUBIN ({exc}); check the -o options") \
            from None
    # what the probes said: variables' types, extern "C" kernels' parameter types
    sigs, said = answers(typed, binary.image, _signatures(ctx, binary, pending), ctx.demangler)
    lowered = dict(result.lowered)
    var_exprs = variable_expressions(ctx.opts.name_expressions, lowered, binary.image)
    kernel_exprs = [e for e in ctx.opts.name_expressions if e not in var_exprs]
    missing = [e for e in kernel_exprs if lowered[e] not in sigs]
    if missing:
        raise NameResolutionError(
            "NVRTC lowered these name expressions to no kernel or variable of the CUBIN (a "
            "__device__ or host function, or an -o option that keeps NVRTC from making code?): "
            + ", ".join(repr(e) for e in missing))
    made = _kernels(ctx, binary, [Resolved(e, lowered[e], NVRTC) for e in kernel_exprs], sigs,
                    {}, strict=False)
    ctx.lap(BuildPhase.RESOLVE, t)
    record = EntryRecord(cubin=result.cubin, lowered=lowered,
                         log=shift_lines(result.log, -ctx.line_offset),  # source lines
                         options=ctx.options, arch=ctx.arch, made=made_here(ctx.source, ctx.search.cwd),
                         nvrtc_version=served.nvrtc_version if served else nvrtc_version(),
                         compile_seconds=result.seconds, manifest=manifest.to_json(),
                         # names as derived, before any suffix that this cell's --module or
                         # its neighbours called for: a later build applies its own
                         python_names={e: derived_name(e) for e in kernel_exprs},
                         symbols=symbol_record(sigs, ctx.demangler.name),
                         variables={k: v.to_json() for k, v in said.variables.items()},
                         grid_sync=binary.image.grid_sync)
    kept = _store(ctx, record, manifest)
    return _module(ctx, binary, made, origin=BuildOrigin.COMPILED, miss=miss, record=record,
                   variables=(dict(said.variables), var_exprs), stored=kept, inputs=manifest), kept


def _holder(ctx: BuildContext) -> Any:
    """The compile server's owner name in a PCH folder, where a server compiles (its PCHs
    outlive this process)."""
    return getattr(ctx.settings.compiler, "pch_holder", None)


def _lap_compile(ctx: BuildContext, result: CompileResult, t: float) -> float:
    """The compile's phase, and the header listing's time past it as a phase of its own."""
    ctx.listings.append(result.listing)
    t = ctx.lap(BuildPhase.COMPILE, t + result.listing.added_seconds)
    if result.listing.beside or result.listing.traced is not None or result.listing.in_pch:
        ctx.timings[BuildPhase.LISTING] = result.listing.added_seconds
    return t


def _settle_pch(ctx: BuildContext, plan: Any, result: CompileResult, manifest: Manifest) -> None:
    """What became of the compile's precompiled header (none where ``plan`` is None), told
    the cache's size limit (the entries', which the PCHs are not under)."""
    from .precompiled import settle_for
    if plan is not None:
        limit = int(getattr(ctx.store, "size_limit", 0) or 0)
        ctx.pch_used.extend(settle_for(plan, result, manifest, ctx.notes, ctx.search, limit))


def _stoppable(served: Any, interrupts: Any) -> ContextManager[Any]:
    """Ctrl-C let through where the compile server compiles: it stops the compile at once."""
    return contextlib.nullcontext() if served is None or interrupts is None \
        else interrupts.released()


def _manifest(ctx: BuildContext, result: CompileResult, no_files: bool,
              started_ns: int, listed: Mapping[str, deps.Listing],
              from_pch: Sequence[tuple[str, str | None, float]] = ()) -> Manifest:
    """The headers the compile read, and the places it searched, to check on a hit;
    ``from_pch``: the headers of the precompiled header it started from, which NVRTC's trace
    does not name (it opened none of them)."""
    from ..toolchain.compile.deps import from_scan, from_trace, trace_headers
    if no_files:
        return Manifest()  # nothing was read: nothing to check on a hit
    if result.trace is not None or (result.listing.in_pch and from_pch):
        # (no trace where every file-opening line is in the PCH: its record lists them)
        read = trace_headers(result.trace) if result.trace is not None else []
        return from_trace([*from_pch, *read], ctx.search, ctx.source, started_ns, listed)
    if result.trace_broken:  # what it read is not known: not stored (docs/cache.md)
        return Manifest(complete=False, racy=_BROKEN_TRACE, search=ctx.search)
    ctx.notes.append(_INCOMPLETE)
    return from_scan(ctx.source, ctx.search, started_ns, listed=listed)


def _store(ctx: BuildContext, record: EntryRecord, manifest: Manifest) -> Stored:
    """Put the entry in the cache where it can be trusted; what became of it (the note, where
    it could have been kept and was not, worded by the view)."""
    if ctx.inputs is not None:  # a rebuild: what it read must be what the module read
        ctx.inputs(manifest)
    if ctx.store is None:
        return Stored(StoreOutcome.NO_CACHE)
    if manifest.racy:
        stored = Stored(StoreOutcome.RACY, manifest.racy)
    else:
        t = time.perf_counter()
        kept = ctx.store.put(ctx.key, record)
        ctx.lap(BuildPhase.STORE, t)
        stored = Stored(StoreOutcome.KEPT if kept else StoreOutcome.BUSY)
    from ..view.stored import stored_note  # a miss's note: never a hit's import

    note = stored_note(stored, CACHE_WAIT_S)
    if note is not None:
        ctx.notes.append(note)
    return stored


def _signatures(ctx: BuildContext, binary: Binary, pending: Pending | None,
                stored: Mapping[str, Any] | None = None) -> Signatures:
    """Every kernel's demangled signature (parsed lazily), from the CUBIN's ELF table; on a
    hit, from the texts the entry stored (nothing is demangled again). ``pending``: the
    demangling the caller started, else one is started here where it is needed."""
    t = time.perf_counter()
    # a linked CUBIN also holds the device runtime's own helper kernels: not the user's to call
    runtime = binary.runtime_kernels
    symbols = [s for s in binary.image.symbols if s not in runtime] if runtime \
        else list(binary.image.symbols)
    sigs = stored_signatures(stored, symbols, ctx.demangler.name)
    if sigs is None:
        with contextlib.closing(ctx.demangler.start()) if pending is None \
                else contextlib.nullcontext(pending) as running:
            sigs = Signatures(dict(zip(symbols, running(symbols))), ctx.demangler.placeholders)
    ctx.lap(BuildPhase.DEMANGLE, t)
    return sigs


def _kernels(ctx: BuildContext, binary: Binary, resolved: Sequence[Resolved],
             sigs: Signatures, known: Mapping[str, str], strict: bool,
             extra: Sequence[Resolved] = ()) -> KernelTable:
    """The module's kernels, one per name expression, per plain kernel and per ``extra`` one,
    each with its Python name (each Kernel made on first use).

    ``known`` holds Python names stored with a cache entry; with ``strict`` one that is not an
    identifier makes the entry unservable. Names that sanitize alike, or that would take a
    reserved name, get a suffix, and a note says so.
    """
    # NVRTC writes the symbol table last-defined first (docs/report-design.md): read backwards
    made = [*resolved, *reversed(plain_kernels(sigs, {r.symbol for r in resolved})), *extra]
    stored: list[str | None] = [known.get(r.name_expression) for r in made]
    for i in invalid_names(stored):
        if strict:
            raise _Unservable(Miss(MissKind.DAMAGED, f"the cached entry's Python name "
                                   f"{stored[i]!r} for {made[i].name_expression!r} is not an "
                                   "identifier: a bad entry"))
        stored[i] = None
    names = Namer(ctx.reserved, ctx.notes).names(
        [(r.name_expression, r.symbol, name) for r, name in zip(made, stored)])
    ctx.notes.extend(unnamed_hints(ctx.source, ctx.opts.name_expressions, sigs,
                                   {r.symbol for r in made}))
    return KernelTable(binary, sigs, [(r.name_expression, r.symbol, name, r.resolved_by)
                                      for r, name in zip(made, names)])


def _image(binary: Binary, symbol: str) -> Any:
    """The kernel's records in the CUBIN (the report reads how it is launched), or None."""
    try:
        return binary.image.kernel(symbol)
    except KeyError:
        return None


def _cell_build(ctx: BuildContext, kernels: KernelTable, stored: Stored | None,
                inputs: Manifest | None) -> Any:
    """The build's record in its cell's history (:class:`~cudamagic.pipeline.explain.CellBuild`), with
    the headers outside the toolkit that ``inputs`` names."""
    from .explain import CellBuild
    from ..view.stored import not_cached

    return CellBuild.of(
        key=ctx.key, source=ctx.source, names=ctx.opts.name_expressions, std=ctx.opts.std,
        options=ctx.opts.options, arch=ctx.arch, nvrtc=ctx.nvrtc, toolkit=ctx.toolkit,
        line_offset=ctx.line_offset, kernels=tuple(e[1] for e in kernels.entries()),
        unstored=(not_cached(stored, CACHE_WAIT_S) or "").replace(
            _BROKEN_TRACE, _BROKEN_TRACE_THEN) if stored else "",
        headers=None if inputs is None else own_headers(inputs.to_json()))


def _module(ctx: BuildContext, binary: Binary, kernels: KernelTable, *, origin: BuildOrigin,
            miss: Miss | None, record: EntryRecord, linked: bool = False,
            loaded: "fatbin.Loaded | None" = None,
            variables: "tuple[dict[str, VarType], dict[str, str]] | None" = None,
            hit: HitKind | None = None, stored: Stored | None = None,
            inputs: Manifest | None = None) -> Module:
    """The finished module, with its report (and the build remembered as its cell's last, so
    that the next miss can say what changed, or that it was not cached: ``stored``);
    ``inputs``: the manifest of the headers it was built from (its later builds' check)."""
    from .explain import describe, note_build

    t = time.perf_counter()
    explanation = None if origin is BuildOrigin.CUBIN else note_build(
        ctx.store, ctx.key, lambda: _cell_build(ctx, kernels, stored, inputs), origin=origin,
        miss=miss, folder=ctx.search.cwd, module=ctx.opts.module, cell=ctx.settings.cell)
    ctx.lap(BuildPhase.HISTORY, t)
    ctx.timings[BuildPhase.TOTAL] = time.perf_counter() - ctx.started

    def sizes(symbol: str, text: str) -> tuple[int, ...] | None:
        # extern "C": the symbol carries no types, so the report shows the CUBIN's sizes
        if "(" in text or symbol in too_long:
            return None
        try:
            params = binary.image.kernel(symbol).params
        except ImageError:  # the launch says so; the report shows "?"
            return None
        return None if params is None else tuple(p.size for p in params)

    text = kernels.signatures.text  # the rows are made from the table: no Kernel is made
    too_long = kernels.signatures.too_long
    placeholders = ctx.demangler.placeholders

    def row(entry: tuple[str, str, str, ResolvedBy]) -> KernelRow:  # made when the report shows it
        label, symbol, name, how = entry
        signature = text(symbol)
        return KernelRow(name, label, symbol, signature, how, placeholders=placeholders,
                         param_sizes=sizes(symbol, signature), image=_image(binary, symbol),
                         too_long=symbol in too_long)

    rows = KernelRows(tuple(kernels.entries()), row)
    types, expressions = variables if variables is not None else (None, {})
    report = BuildReport(
        key=ctx.key, hit=origin is BuildOrigin.CACHE, origin=origin, hit_kind=hit,
        miss_reason=None if miss is None else describe(miss),
        timings=dict(ctx.timings), demangler=ctx.demangler.name, arch=ctx.arch,
        nvrtc_version=record.nvrtc_version,
        cache_in_memory=ctx.store is not None and ctx.store.in_memory is not None,
        cache_dir=ctx.store.location if ctx.store else "(not cached)",
        loaded=loaded.source if loaded else None, loaded_cached=bool(loaded and loaded.cached),
        log=shift_lines(record.log, ctx.line_offset),  # the cell's own line numbers
        rows=rows, warnings=tuple(dict.fromkeys(ctx.notes)), explanation=explanation,
        module_name=ctx.opts.module, globals=binary.own_globals, pch=ctx.pch_use,
        listing=ctx.listings[-1] if ctx.listings else None,
        added=(ctx.added.library, ctx.added.shown) if ctx.added.library else None,
        linked=linked or relocatable(ctx.options), own_globals=None if types is None
        else frozenset(types), device_runtime=bool(binary.runtime_kernels))
    module = Module(binary, ctx.key, kernels, report, ctx.demangler.placeholders, types,
                    expressions)
    module.debug_from(lambda: _debug_support(ctx, module, inputs))
    return module


def _debug_support(ctx: BuildContext, module: Module, inputs: Manifest | None) -> Any:
    """The module's tool-run support (:func:`~cudamagic.pipeline.lineinfo.debug_support`), made by the
    first tool run that asks for it."""
    from .lineinfo import debug_support

    return debug_support(ctx, module, rebuild, inputs)


def served_facts(compiler: Compiler) -> Any:
    """The compile server's facts where ``compiler`` is served by one (it is started on the
    first miss), None where it compiles in this process."""
    asked = getattr(compiler, "facts", None)
    return asked() if asked is not None else None


def _check_arch(arch: str, compiler: Compiler = SERVED) -> None:
    """Before a compile (never on a hit: asking NVRTC loads it, or starts its server): can this
    NVRTC target arch?

    :raises OptionError: it cannot (a GPU newer than the NVRTC, or a typo in --arch).
    """
    from ..toolchain.compile.nvrtc import supported_archs
    served = served_facts(compiler)
    archs = served.archs if served else supported_archs()
    if arch_sm(arch) not in archs:
        version = served.nvrtc_version if served else nvrtc_version()
        raise OptionError(f"NVRTC {version} cannot build a CUBIN for {arch} (it supports "
                          f"sm_{', sm_'.join(map(str, archs))}); install a newer "
                          "nvidia-cuda-nvrtc, or give --arch one of those")
