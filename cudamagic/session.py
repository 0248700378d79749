"""The pipeline of one build: options -> key -> cache -> image -> names -> resolve -> kernels.

This module knows no IPython: the magic is a thin shell over :func:`build_module`, and
:func:`build` / :func:`load_cubin` are the public Python API. The compiler, the demangler and the
cache come in as arguments so tests can watch them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ContextManager

from . import driver
from .cache import EntryRecord, KernelCache, default_cache_dir
from .compiler import CompileResult, compile_cubin, nvrtc_version, supported_archs
from .demangle import Demangler, Pending, default_demangler
from .errors import ImageError, InputWarning, NameResolutionError, OptionError, SourceError
from .image import CubinImage, read_cubin
from .kernel import Kernel
from .keys import cache_key, quoted_headers
from .names import Signatures, python_name
from .options import (DEFAULT_ARCH, BuildOptions, nvrtc_options, nvrtc_wheel,
                      toolkit_fingerprint)
from .report import BuildReport, EnvironmentInfo, KernelRow
from .resolve import NVRTC, Resolution, Resolved, closest, plain_kernels, resolve

__all__ = ["Module", "build", "build_module", "entry_key", "load_cubin", "default_arch",
           "default_cache", "options_from_nvrtc"]

Compiler = Callable[..., CompileResult]

_default_cache: KernelCache | None = None
_default_cache_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache in :func:`cudamagic.cache.default_cache_dir` (opened once)."""
    global _default_cache
    with _default_cache_lock:
        if _default_cache is None or _default_cache.directory != default_cache_dir():
            _default_cache = KernelCache()
        return _default_cache


def default_arch() -> str:
    """The current device's ``sm_XX``; :data:`~cudamagic.options.DEFAULT_ARCH` without a GPU."""
    if not driver.available():
        return DEFAULT_ARCH
    major, minor = driver.compute_capability(driver.current_device())
    return f"sm_{major * 10 + minor}"


def _check_arch(arch: str) -> None:
    """Before a compile (never on a hit: asking NVRTC loads it): can this NVRTC target arch?

    :raises OptionError: it cannot (a GPU newer than the NVRTC, or a typo in --arch).
    """
    sm = int("".join(ch for ch in arch if ch.isdigit()))
    if sm not in supported_archs():
        raise OptionError(f"NVRTC {nvrtc_version()} cannot build a CUBIN for {arch} (it supports "
                          f"sm_{', sm_'.join(map(str, supported_archs()))}); install a newer "
                          "nvidia-cuda-nvrtc, or pass --arch")


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
    """

    def __init__(self, cubin: bytes, image: CubinImage, key: str,
                 library: "driver.Library | None" = None,
                 enumerated_by: str = "ELF symbol table") -> None:
        self.cubin = cubin
        self.image = image
        self.key = key
        self.enumerated_by = enumerated_by
        self.kernels: dict[str, Kernel] = {}
        self.warnings: tuple[str, ...] = ()
        self.report: BuildReport  # set by the builder
        self._lib = library
        self._lib_lock = threading.Lock()

    @property
    def hit(self) -> bool:
        """True when the build was served from the cache."""
        return self.report.hit

    def _library(self) -> "driver.Library":
        with self._lib_lock:
            if self._lib is None:
                self._lib = driver.Library.load(self.cubin)
            return self._lib

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
        except KeyError:
            pass
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
        return f"<cudamagic.Module {len(self.kernels)} kernels, {self.report.status}, key {self.key[:12]}>"

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.report.text())

    def _repr_html_(self) -> str:
        return self.report.html()


def options_from_nvrtc(options: Sequence[str], name_expressions: Sequence[str] = (),
                       arch: str | None = None, **fields: Any) -> BuildOptions:
    """A :class:`BuildOptions` from an NVRTC option list (``-std=c++20``, ``-I dir``, ``-DX=1``...)."""
    std = None
    inc: list[str] = []
    defs: list[str] = []
    extra: list[str] = []
    it = iter(options)
    for opt in it:
        if not isinstance(opt, str):
            raise OptionError(f"NVRTC options are strings, got {opt!r}")
        flag, _, value = opt.partition("=")
        if flag in ("-arch", "--gpu-architecture"):
            arch = value or next(it, "")
        elif flag in ("-std", "--std"):
            std = value or next(it, "")
        elif opt in ("-I", "--include-path", "-D", "--define-macro"):
            (inc if opt in ("-I", "--include-path") else defs).append(next(it, ""))
        elif opt.startswith("-I") or opt.startswith("--include-path="):
            inc.append(opt[2:] if opt.startswith("-I") else value)
        elif opt.startswith("-D") or opt.startswith("--define-macro="):
            defs.append(opt[2:] if opt.startswith("-D") else value)
        else:
            extra.append(opt)
    kwargs: dict[str, Any] = dict(name_expressions=tuple(name_expressions), arch=arch,
                                  include_dirs=tuple(inc), defines=tuple(defs), extra=tuple(extra))
    if std:
        kwargs["std"] = std
    kwargs.update(fields)
    return BuildOptions(**kwargs)


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
        NVRTC options (``-std=c++20``, ``-I dir``, ``-DN=4``, ``-lineinfo``...).
    arch : str, optional
        ``sm_XX``; default the current device's (``sm_90`` without a GPU).
    cache : KernelCache, diskcache.Cache, path or None
        None is the default on-disk cache (``$CUDAMAGIC_CACHE_DIR`` or ``~/.cache/cudamagic``).
    force : bool
        Recompile and overwrite the cache entry.
    use_cache : bool
        False neither reads nor writes the cache.
    base_dir : path, optional
        Folder for quoted includes and relative ``-I`` (default: the working directory).

    :raises CompileError: NVRTC refused the source or a name expression.
    :raises OptionError: a bad option or argument.
    :raises NameResolutionError: a name expression that names no kernel.
    """
    opts = options_from_nvrtc(options, name_expressions, arch, force=force,
                              no_cache=not use_cache)
    return build_module(source, opts, cache=None if cache is None else KernelCache.wrap(cache),
                        base_dir=base_dir)


def entry_key(source: str, opts: BuildOptions, base_dir: str | os.PathLike | None = None
              ) -> tuple[str, str, tuple[str, ...], str]:
    """The cache key of a build, with the arch, NVRTC options and NVRTC version it implies."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    arch = opts.arch or default_arch()
    options = nvrtc_options(opts, arch, base)
    # the NVRTC wheel's identity when it is installed (cuda.bindings loads NVRTC from it); else
    # ask NVRTC itself, which loads the library (tens of ms: kept off the hit path where it can)
    nv = nvrtc_wheel() or nvrtc_version()
    headers = quoted_headers(source, [*(base / d for d in opts.include_dirs), base])
    key = cache_key(source=source, name_expressions=opts.name_expressions,
                    options=(f"-std={opts.std}", *(f"-I{d}" for d in opts.include_dirs),
                             *(f"-D{d}" for d in opts.defines), *opts.extra),
                    arch=arch, nvrtc_version=nv, toolkit=toolkit_fingerprint(), headers=headers)
    return key, arch, options, nv


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


def _check_include_dirs(opts: BuildOptions, base_dir: str | os.PathLike | None) -> None:
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    for d in opts.include_dirs:
        if not (base / d).is_dir():
            warnings.warn(f"-I {d}: no such folder (looked for {base / d})", InputWarning,
                          stacklevel=3)


def build_module(source: str, opts: BuildOptions, *, cache: KernelCache | None = None,
                 base_dir: str | os.PathLike | None = None, line_offset: int = 0,
                 program_name: str = "cell.cu", compiler: Compiler = compile_cubin,
                 demangler: Demangler | None = None,
                 compile_notice: Callable[[], ContextManager[Any]] | None = None) -> Module:
    """The pipeline behind :func:`build` and the ``%%cuda`` magic.

    ``line_offset`` shifts NVRTC's line numbers to the cell's (1 below a magic line);
    ``compile_notice`` wraps the compile, when there is one (the magic says "compiling..." there).
    """
    _check_source(source, line_offset)
    _check_include_dirs(opts, base_dir)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    key, arch, options, _ = entry_key(source, opts, base_dir)
    timings["key"] = time.perf_counter() - t0
    store = None if opts.no_cache else (cache if cache is not None else default_cache())
    demangler = demangler or default_demangler()
    pending = demangler.start()
    try:
        return _build(source, opts, key, arch, options, store, demangler, pending, timings, t0,
                      line_offset, program_name, compiler, compile_notice)
    finally:
        pending.close()


def _build(source: str, opts: BuildOptions, key: str, arch: str, options: tuple[str, ...],
           store: KernelCache | None, demangler: Demangler, pending: Pending,
           timings: dict[str, float], t0: float, line_offset: int, program_name: str,
           compiler: Compiler, compile_notice: Callable[[], ContextManager[Any]] | None
           ) -> Module:
    """A hit when the cache can serve, else the miss (:func:`_compile`)."""
    miss_reason: str | None = "no cache entry"
    if store is None:
        miss_reason = "--no-cache"
    elif opts.force:
        miss_reason = "--force"
    else:
        t = time.perf_counter()
        record, why = store.get(key)
        timings["lookup"] = time.perf_counter() - t
        if why:
            miss_reason = why
        if record is not None:
            found = _restore(record, opts.name_expressions, key, demangler, pending, timings)
            if isinstance(found, Module):
                _finish(found, "cache", None, record, demangler, arch,
                        record.nvrtc_version, store, timings, t0)
                return found
            store.delete(key)
            # the entry could not serve; the demangler's one batch may be spent on it
            with contextlib.closing(demangler.start()) as fresh:
                return _compile(source, opts, key, arch, options, store, demangler, fresh,
                                timings, t0, line_offset, program_name, compiler,
                                compile_notice, found)

    return _compile(source, opts, key, arch, options, store, demangler, pending, timings, t0,
                    line_offset, program_name, compiler, compile_notice, miss_reason)


def _compile(source: str, opts: BuildOptions, key: str, arch: str, options: tuple[str, ...],
             store: KernelCache | None, demangler: Demangler, pending: Pending,
             timings: dict[str, float], t0: float, line_offset: int, program_name: str,
             compiler: Compiler, compile_notice: Callable[[], ContextManager[Any]] | None,
             miss_reason: str | None) -> Module:
    """The miss: compile, assemble from NVRTC's exact map, store."""
    _check_arch(arch)
    t = time.perf_counter()
    with (compile_notice or contextlib.nullcontext)():
        result = compiler(source, opts.name_expressions, options, program_name=program_name,
                          line_offset=line_offset)
    timings["compile"] = time.perf_counter() - t
    record = EntryRecord(cubin=result.cubin, lowered=dict(result.lowered), log=result.log,
                         options=options, arch=arch, nvrtc_version=nvrtc_version(),
                         compile_seconds=result.seconds)
    module = _assemble(record, opts.name_expressions, key, demangler, pending, timings,
                       from_nvrtc=True)
    record = dataclasses.replace(record, python_names={
        e: module.kernels[e].python_name for e in opts.name_expressions})
    if store is not None:
        t = time.perf_counter()
        store.put(key, record)
        timings["store"] = time.perf_counter() - t
    _finish(module, "compiled", miss_reason, record, demangler, arch,
            record.nvrtc_version, store, timings, t0)
    return module


def _restore(record: EntryRecord, expressions: Sequence[str], key: str, demangler: Demangler,
             pending: Pending, timings: dict[str, float]) -> "Module | str":
    """A module from a cache entry, or the reason it cannot serve (the caller recompiles)."""
    try:
        return _assemble(record, expressions, key, demangler, pending, timings,
                         from_nvrtc=False)
    except ImageError as exc:
        return f"the cached CUBIN is unreadable ({exc})"
    except _Unservable as exc:
        return str(exc)


class _Unservable(Exception):
    """A cache entry that cannot give every name expression its kernel."""


def _enumerate(cubin: bytes, timings: dict[str, float]
               ) -> tuple[CubinImage, "driver.Library | None", str]:
    t = time.perf_counter()
    image = read_cubin(cubin)
    library = None
    how = "ELF symbol table"
    if driver.available():
        library = driver.Library.load(cubin)
        names = library.kernel_names()
        how = "driver"
        if set(names) != set(image.symbols):
            raise ImageError("the driver and the ELF symbol table list different kernels: "
                             f"{sorted(set(names) ^ set(image.symbols))}")
    timings["enumerate"] = time.perf_counter() - t
    return image, library, how


def _assemble(record: EntryRecord, expressions: Sequence[str], key: str, demangler: Demangler,
              pending: Pending, timings: dict[str, float], from_nvrtc: bool) -> Module:
    image, library, how = _enumerate(record.cubin, timings)
    t = time.perf_counter()
    symbols = list(image.symbols)
    demangled = pending(symbols)
    sigs = Signatures(dict(zip(symbols, demangled)), demangler.placeholders)
    timings["demangle"] = time.perf_counter() - t

    t = time.perf_counter()
    if from_nvrtc:
        lowered = record.lowered or {}
        not_kernels = [e for e in expressions if lowered.get(e) not in sigs]
        if not_kernels:
            raise NameResolutionError(
                "these name expressions name no __global__ kernel of the source (a __device__ "
                f"or host function?): {', '.join(repr(e) for e in not_kernels)}")
        resolution = Resolution(tuple(Resolved(e, lowered[e], NVRTC) for e in expressions))
    else:
        resolution = resolve(expressions, sigs, record.lowered)
        if resolution.stale:
            raise _Unservable("the cached entry's stored symbol for "
                              f"{resolution.stale[0]!r} is not in its CUBIN (bad entry)")
        if resolution.unresolved:
            u = resolution.unresolved[0]
            raise _Unservable(f"{u.name_expression!r} could not be resolved from the cached "
                              f"CUBIN: {u.reason}")
    timings["resolve"] = time.perf_counter() - t

    module = Module(record.cubin, image, key, library, how)
    _add_kernels(module, resolution.resolved, sigs, record.python_names or {})
    return module


def _add_kernels(module: Module, resolved: Sequence[Resolved], sigs: Signatures,
                 known: Mapping[str, str]) -> None:
    """Make the kernels; ``known`` holds Python names a miss derived already."""
    names_by_symbol: dict[str, str] = {}
    used: dict[str, str] = {}  # python name -> symbol
    notes: list[str] = []

    def name_for(label: str, symbol: str) -> str:
        if symbol in names_by_symbol:
            return names_by_symbol[symbol]
        base = known.get(label) or python_name(label)
        name, n = base, 2
        while name in used and used[name] != symbol:
            name, n = f"{base}_{n}", n + 1
        if name != base:
            notes.append(f"{label!r} and {used_label[base]!r} both sanitize to {base!r}; "
                            f"{label!r} is pushed as {name!r}")
        used[name] = symbol
        used_label.setdefault(name, label)
        names_by_symbol[symbol] = name
        return name

    used_label: dict[str, str] = {}
    extra = plain_kernels(sigs, {r.symbol for r in resolved})
    for r in (*resolved, *extra):
        kern = Kernel(module, r.name_expression, r.symbol, name_for(r.name_expression, r.symbol),
                      sigs, r.resolved_by, module.image.kernel(r.symbol))
        module.kernels[r.name_expression] = kern
    named = {k.symbol for k in module.kernels.values()}
    # non-template kernels left without a name are overloads: only a cast can pick one
    unnamed = [sigs.text(s) for s in sigs
               if s not in named and sigs.maybe_plain(s) and "<" not in sigs[s].name]
    if not sigs:
        notes.append("the source defines no kernel: a __global__ template is only compiled "
                     "when a -n names an instance of it")
    elif unnamed:
        notes.append(f"{len(unnamed)} overloaded kernel(s) have no name to call them by; "
                     f"name each with a cast, e.g. -n \"(void(*)(float*))f\": "
                     + "; ".join(unnamed[:5]))
    module.warnings = tuple(notes)


def _finish(module: Module, origin: str, miss_reason: str | None, record: EntryRecord,
            demangler: Demangler, arch: str, nv: str, store: KernelCache | None,
            timings: dict[str, float], t0: float) -> None:
    timings["total"] = time.perf_counter() - t0
    for note in module.warnings:
        warnings.warn(note, InputWarning, stacklevel=4)
    rows = tuple(KernelRow(k.python_name, k.name_expression, k.symbol, k.signature,
                           k.resolved_by) for k in module.kernels.values())
    module.report = BuildReport(
        key=module.key, hit=origin == "cache", origin=origin, miss_reason=miss_reason, timings=timings,
        demangler=demangler.name, enumerated_by=module.enumerated_by,
        arch=arch, nvrtc_version=nv, cache_dir=store.location if store else "(not cached)",
        log=record.log, rows=rows, warnings=module.warnings)


def load_cubin(path_or_bytes: "str | os.PathLike | bytes", name_expressions: Sequence[str] = (),
               *, demangler: Demangler | None = None) -> Module:
    """A module from a CUBIN built elsewhere (``nvcc -cubin``), resolved by demangling alone.

    :raises ImageError: not a CUBIN.
    :raises NameResolutionError: a name expression that names no kernel, or several, with the
        closest candidates.
    """
    t0 = time.perf_counter()
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        cubin = bytes(path_or_bytes)
        label = "<bytes>"
    else:
        label = str(path_or_bytes)
        cubin = Path(path_or_bytes).read_bytes()
    demangler = demangler or default_demangler()
    timings: dict[str, float] = {}
    record = EntryRecord(cubin=cubin, lowered=None, arch="")
    image = read_cubin(cubin)
    try:
        with contextlib.closing(demangler.start()) as pending:
            module = _assemble(record, name_expressions, record.cubin_sha256, demangler,
                               pending, timings, from_nvrtc=False)
    except _Unservable:
        symbols = list(image.symbols)
        sigs = Signatures(dict(zip(symbols, demangler.demangle(symbols))),
                          demangler.placeholders)
        res = resolve(name_expressions, sigs)
        lines = [f"  {u.name_expression!r}: {u.reason}"
                 + (f"; closest: {'; '.join(u.candidates)}" if u.candidates else "")
                 for u in res.unresolved]
        raise NameResolutionError(f"{label}: these name expressions could not be resolved "
                                  "(a CUBIN from elsewhere has no stored name map, so only "
                                  "demangling can find them):\n" + "\n".join(lines)) from None
    arch = f"sm_{image.sm}" if image.sm else "?"
    _finish(module, "cubin", None, record, demangler, arch, "-", None, timings, t0)
    return module


def report_with_attributes(module: Module, limit: int = 64) -> BuildReport:
    """The module's report with registers and shared/local memory per kernel, where a GPU is.

    Reading them loads the module on the current device, so only the display asks (and for at
    most ``limit`` kernels); :func:`build` itself stays lazy.
    """
    if not driver.available() or not module.kernels or len(module.kernels) > limit:
        return module.report
    device = driver.current_device()
    by_symbol = {}
    for k in module.kernels.values():
        if k.symbol not in by_symbol:
            by_symbol[k.symbol] = k.attributes(device)
    rows = tuple(dataclasses.replace(r, attributes=by_symbol.get(r.symbol))
                 for r in module.report.rows)
    return dataclasses.replace(module.report, rows=rows)


def environment_info() -> EnvironmentInfo:
    """What a build uses here: devices, driver, NVRTC, demangler, target arch, cache."""
    import importlib.metadata

    from .demangle import CuFilt

    fields: list[tuple[str, str]] = []
    if driver.available():
        for i in range(driver.device_count()):
            major, minor = driver.compute_capability(i)
            fields.append((f"device {i}", f"{driver.device_name(i)} (sm_{major}{minor})"))
        fields.append(("driver", f"CUDA {driver.driver_version()}"))
    else:
        fields.append(("device", "none (compile, cache and name resolution work; launches "
                                 "need a GPU)"))
    fields.append(("NVRTC", nvrtc_version()))
    d = default_demangler()
    fields.append(("demangler", f"{d.name} ({d.path})" if isinstance(d, CuFilt) else d.name))
    try:
        fields.append(("arch in use", default_arch()))
    except OptionError as exc:
        fields.append(("arch in use", str(exc)))
    cache = default_cache()
    fields.append(("cache", f"{cache.location} ({len(cache)} entries, "
                            f"{cache.volume() / 2**20:.1f} of {cache.size_limit / 2**20:.0f} MiB)"))
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cuda-bindings", "nvidia-cuda-nvrtc"):
        try:
            fields.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            pass
    return EnvironmentInfo(tuple(fields))
