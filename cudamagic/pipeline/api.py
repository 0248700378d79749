"""The Python API over the pipeline: :func:`build` (CUDA C++ in, a module out, through the cache)
and :func:`load_cubin` (a CUBIN, fatbin or PTX from elsewhere), each a :class:`BuildContext` made
and handed to :mod:`cudamagic.pipeline.steps`, whose warnings are said as Python warnings (a caller of
the API is shown no report)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

from ..cxx.resolve import Resolved, resolve
from ..cxx.signatures import Signatures
from ..cxx.resolve import Resolution, template_instances
from ..errors import InputWarning, NameResolutionError, OptionError
from ..core.files import read_cubin_arg
from ..core.miss import BuildOrigin, BuildPhase
from .module import Binary, Module
from ..core.options import normalize_arch, options_from_args
from .steps import (BuildContext, BuildSettings, _kernels, _module, _signatures, build_module,
                    default_arch)
from ..store import EntryRecord, KernelCache
from ..toolchain.binary.demangle import Demangler, default_demangler
from ..toolchain.binary.image import read_cubin
from ..toolchain.compile.manifest import SearchPath
from ..view.report import too_long_text

__all__ = ["build", "load_cubin", "record_key"]

def _warn(module: Module) -> Module:
    """Say the build's warnings once, as Python warnings, for callers that show no report."""
    for note in module.warnings:
        warnings.warn(note, InputWarning, stacklevel=3)
    return module


def build(source: str, name_expressions: Sequence[str] = (), options: Sequence[str] = (),
          arch: str | None = None, cache: "KernelCache | Any" = None, *, force: bool = False,
          use_cache: bool = True, base_dir: str | os.PathLike | None = None,
          std_headers: bool = True, pch: bool = True) -> Module:
    """Compile CUDA C++ (or take it from the cache) and return its kernels.

    Parameters
    ----------
    source : str
        CUDA C++ source.
    name_expressions : sequence of str
        Kernels to instantiate and export, exactly as written (``"saxpy<float>"``).
    options : sequence of str
        NVRTC options, one token each (``-std=c++20``, ``-Idir`` or ``"-I", "dir"``,
        ``-DN=4``, ``-lineinfo``...), kept in order.
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
    std_headers : bool
        cudamagic's C++ standard headers for device code (``<cstdint>``, ``<cmath>``,
        ``<limits>``... mapped onto libcu++), searched after every other folder; False leaves
        them out (the magic's ``--no-std-headers``).
    pch : bool
        A miss may read the headers from NVRTC's precompiled header kept in the cache folder;
        False compiles them (the magic's ``--no-pch``; ``$CUDAMAGIC_PCH=0`` for every build).
        Not in the cache key: it changes no code.

    :raises CompileError: NVRTC refused the source or a name expression.
    :raises OptionError: a bad option or argument.
    :raises NameResolutionError: a name expression that names no kernel.
    """
    if type(std_headers) is not bool:
        raise OptionError(f"std_headers must be True or False, got {type(std_headers).__name__}")
    if type(pch) is not bool:
        raise OptionError(f"pch must be True or False, got {type(pch).__name__}")
    opts = options_from_args(options, name_expressions, arch, force=force,
                             no_cache=not use_cache, std_headers=std_headers, pch=pch)
    return _warn(build_module(source, opts, cache=cache, base_dir=base_dir))


def load_cubin(path_or_bytes: "str | os.PathLike | bytes", name_expressions: Sequence[str] = (),
               *, module: str | None = None, demangler: Demangler | None = None,
               reserved: Sequence[str] = (), arch: str | None = None,
               cache: "KernelCache | Any" = None) -> Module:
    """A module from a CUBIN built elsewhere (``nvcc -cubin``), resolved by demangling alone.

    PTX (``nvcc -ptx``) and fatbins (``nvcc -fatbin``) are taken too: the fatbin's CUBIN for
    ``arch`` (default: the current device's, ``sm_90`` without a GPU), else nvJitLink's code for
    it, cached by content and ``arch`` in ``cache`` (the default cache when None).

    Without ``name_expressions`` every kernel that demangling names unambiguously is there:
    ``extern "C"`` and non-template kernels by their name, template instances by their
    demangled name (``scale<float, 3>``); the report lists the others. ``reserved``: Python
    names no kernel may take besides the module's (the shell's).

    :raises ImageError: not a CUBIN, or a path that cannot be read.
    :raises NameResolutionError: a name expression that names no kernel, or several, with the
        closest candidates.
    """
    started = time.perf_counter()
    opts = options_from_args((), name_expressions, **({"module": module} if module else {}))
    from ..toolchain.compile import fatbin
    from ..toolchain.binary import ptx  # a CUBIN from elsewhere: not a hit's modules
    cubin, label = read_cubin_arg(path_or_bytes)
    linked_from = time.perf_counter()
    stores: list[KernelCache] = []  # the cache, where a link needed one

    def link_store() -> Any:
        stores.append(KernelCache.wrap(cache))
        return stores[0].link_cache()

    loaded = fatbin.loadable_cubin(cubin, normalize_arch(arch) if arch else default_arch(),
                                   label=label, store=link_store)
    original, cubin = cubin, loaded.cubin
    image, said = read_cubin(cubin), None if loaded.ptx is None else ptx.grid_syncs(loaded.ptx)
    binary = Binary(cubin, image.with_grid_sync(ptx.grid_sync_table(said, image.symbols)),
                    ptx.entry_params(loaded.ptx) if loaded.ptx is not None else None)
    ctx = BuildContext(source="", opts=opts,
                       settings=BuildSettings(demangler=demangler, reserved=tuple(reserved)),
                       arch=f"sm_{binary.image.sm}" if binary.image.sm else "?", options=(),
                       search=SearchPath("", ()), key=record_key(cubin), nvrtc="-", toolkit="",
                       store=stores[0] if stores else None,
                       demangler=demangler or default_demangler(), started=started)
    # PTX, a fatbin's PTX or a relocatable CUBIN went through nvJitLink (or its cached output)
    if loaded.linked:
        ctx.lap(BuildPhase.LOOKUP if loaded.cached else BuildPhase.LINK, linked_from)
    with contextlib.closing(ctx.demangler.start()) as pending:
        sigs = _signatures(ctx, binary, pending)
    resolution, instances = _resolve_foreign(ctx, sigs, label)
    made = _kernels(ctx, binary, resolution.resolved, sigs, {}, strict=False, extra=instances)
    record = EntryRecord(cubin=cubin, lowered=None, arch=ctx.arch, nvrtc_version="-")
    return _warn(_module(ctx, binary, made, origin=BuildOrigin.CUBIN, miss=None, record=record,
                         linked=loaded.linked, loaded=loaded))


def _resolve_foreign(ctx: BuildContext, sigs: Signatures, label: str) -> tuple[Resolution, list[Resolved]]:
    """A foreign CUBIN's name expressions resolved by demangling, and its lone template instances."""
    opts = ctx.opts
    resolution = resolve(opts.name_expressions, sigs)
    if resolution.unresolved:
        lines = [f"  {u.name_expression!r}: {u.reason}"
                 + (f"; closest: {'; '.join(u.candidates)}" if u.candidates else "")
                 for u in resolution.unresolved]
        raise NameResolutionError(f"{label}: these name expressions could not be resolved "
                                  "(a CUBIN from elsewhere has no stored name map, so only "
                                  "demangling can find them):\n" + "\n".join(lines))
    instances: list[Resolved] = []
    if not opts.name_expressions:
        instances, ambiguous = template_instances(sigs)
        if ambiguous:
            ctx.notes.append(
                f"{len(ambiguous)} template instance(s) share a name with another kernel, so "
                "no name expression picks one alone; name each with a cast (-n "
                "\"(void(*)(float*))k<float>\"): "
                + "; ".join(too_long_text(s) if s in sigs.too_long else sigs.text(s)
                            for s in ambiguous[:5])
                + ("; ..." if len(ambiguous) > 5 else ""))
    return resolution, instances


def record_key(cubin: bytes) -> str:
    """The key a CUBIN from elsewhere is known by: its sha256."""
    return hashlib.sha256(cubin).hexdigest()
