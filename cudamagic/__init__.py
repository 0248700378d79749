"""cudamagic: a ``%%cuda`` cell magic for NVRTC-compiled, disk-cached CUDA kernels.

``%load_ext cudamagic`` registers the magics and starts the CUDA driver in a background thread
(:func:`load_ipython_extension`); the pipeline is imported by the first ``%%cuda`` cell, NVRTC
loads on the first compile, CuPy only to take an array that offers DLPack alone. The same
pipeline is a Python API::

    import cudamagic
    mod = cudamagic.build(source, name_expressions=["saxpy<float>"])
    mod["saxpy<float>"]((blocks,), (threads,), (a, x, y, n))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["build", "load_cubin", "gpu_available", "Module", "Kernel", "KernelCache",
           "load_ipython_extension",
           "CudaMagicError", "OptionError", "SourceError", "CompileError", "LogError",
           "CompileInterrupted", "LinkError", "ToolchainError", "StaleModuleError",
           "NameResolutionError",
           "ImageError", "CacheError", "CacheArgumentError", "LaunchError", "NoDeviceError",
           "ForkedCudaError", "ContextPoisonedError", "ArgumentError", "ArgumentTypeError",
           "ArgumentValueError", "OccupancyError", "DemangleError", "ToolMissingError",
           "ScratchError", "SanitizerOutputError", "ProfileReadError", "DisassemblyError",
           "CudaMagicWarning", "CacheWarning", "ShadowWarning", "InputWarning"]

from .errors import (ArgumentError, ArgumentTypeError, ArgumentValueError, CacheArgumentError,
                     CacheError, CacheWarning, CompileError, CompileInterrupted,
                     ContextPoisonedError, CudaMagicError, CudaMagicWarning, DemangleError,
                     DisassemblyError, ForkedCudaError, ImageError, InputWarning, LaunchError,
                     LinkError, LogError, NameResolutionError, NoDeviceError, OccupancyError,
                     OptionError, ProfileReadError, SanitizerOutputError, ScratchError,
                     ShadowWarning, SourceError, StaleModuleError, ToolMissingError,
                     ToolchainError)

if TYPE_CHECKING:  # pragma: no cover
    from .store import KernelCache
    from .launch import Kernel
    from .pipeline.module import Module
    from .pipeline.api import build, load_cubin


# ---- the modules' names of before the folders move (issue 48) ------------------------------
#: each old dotted name -> the module it is now. A Module pickled, or shipped to a Dask worker,
#: by a cudamagic of before the move names its classes by their old modules (its Module as
#: ``module.Module`` at the package's top); the finder below gives each old name a module that
#: forwards every attribute to the one it became, so such a pickle loads. Written by the move's
#: script from the moves it made; old names that are packages now are not in it.
_MOVED = {
    "cudamagic.annotated": "cudamagic.pipeline.annotated",
    "cudamagic.api": "cudamagic.pipeline.api",
    "cudamagic.child": "cudamagic.pipeline.child",
    "cudamagic.explain": "cudamagic.pipeline.explain",
    "cudamagic.files": "cudamagic.core.files",
    "cudamagic.forksafe": "cudamagic.core.forksafe",
    "cudamagic.info": "cudamagic.shell.info",
    "cudamagic.interrupts": "cudamagic.pipeline.interrupts",
    "cudamagic.keys": "cudamagic.store.keys",
    "cudamagic.libraries": "cudamagic.core.libraries",
    "cudamagic.lineinfo": "cudamagic.pipeline.lineinfo",
    "cudamagic.lines": "cudamagic.core.lines",
    "cudamagic.magic": "cudamagic.shell.magic",
    "cudamagic.miss": "cudamagic.core.miss",
    "cudamagic.module": "cudamagic.pipeline.module",
    "cudamagic.naming": "cudamagic.pipeline.naming",
    "cudamagic.options": "cudamagic.core.options",
    "cudamagic.precompiled": "cudamagic.pipeline.precompiled",
    "cudamagic.process": "cudamagic.core.process",
    "cudamagic.toolchain.annotation": "cudamagic.toolchain.tools.annotation",
    "cudamagic.toolchain.demangle": "cudamagic.toolchain.binary.demangle",
    "cudamagic.toolchain.deps": "cudamagic.toolchain.compile.deps",
    "cudamagic.toolchain.driver": "cudamagic.toolchain.device.driver",
    "cudamagic.toolchain.elf": "cudamagic.toolchain.binary.elf",
    "cudamagic.toolchain.fatbin": "cudamagic.toolchain.compile.fatbin",
    "cudamagic.toolchain.image": "cudamagic.toolchain.binary.image",
    "cudamagic.toolchain.link": "cudamagic.toolchain.compile.link",
    "cudamagic.toolchain.listing": "cudamagic.toolchain.compile.listing",
    "cudamagic.toolchain.manifest": "cudamagic.toolchain.compile.manifest",
    "cudamagic.toolchain.nvrtc": "cudamagic.toolchain.compile.nvrtc",
    "cudamagic.toolchain.occupancy": "cudamagic.toolchain.device.occupancy",
    "cudamagic.toolchain.pch": "cudamagic.toolchain.compile.pch",
    "cudamagic.toolchain.probe": "cudamagic.toolchain.compile.probe",
    "cudamagic.toolchain.profiler": "cudamagic.toolchain.tools.profiler",
    "cudamagic.toolchain.ptx": "cudamagic.toolchain.binary.ptx",
    "cudamagic.toolchain.sanitizer": "cudamagic.toolchain.tools.sanitizer",
    "cudamagic.toolchain.sass": "cudamagic.toolchain.tools.sass",
    "cudamagic.toolchain.signals": "cudamagic.toolchain.compile.signals",
    "cudamagic.toolchain.threads": "cudamagic.toolchain.compile.threads",
    "cudamagic.toolchain.tracefolder": "cudamagic.toolchain.compile.tracefolder",
    "cudamagic.toolchain.variables": "cudamagic.toolchain.binary.variables",
    "cudamagic.toolkit": "cudamagic.core.toolkit",
    "cudamagic.typed": "cudamagic.pipeline.typed",
    "cudamagic.units": "cudamagic.core.units",
}


def _made_by_import(spec: Any) -> None:
    """An old name's module is a new, empty one (the import system makes it)."""


def _forward(module: Any) -> None:
    """The old name's module gives each attribute of the module it became (the same class
    objects, so an old pickle's ``Module`` is :class:`Module`); that module, its
    ``__spec__`` included, is left as it is."""
    import functools
    import importlib

    now = importlib.import_module(_MOVED[module.__name__])
    setattr(module, "__getattr__", functools.partial(getattr, now))
    module.__doc__ = now.__doc__


class _OldNames:
    """The old names' finder and loader (importlib calls its attributes by name), first on
    ``sys.meta_path``: an old name is never looked for as a file (an editable install's finder
    would find an old checkout's)."""

    create_module = staticmethod(_made_by_import)
    exec_module = staticmethod(_forward)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)  # type: ignore[arg-type]


def _install_old_names() -> None:
    import sys

    if not any(isinstance(f, _OldNames) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldNames())


_install_old_names()

# imported on first use: %load_ext and `import cudamagic` stay light
_LAZY = {"build": "pipeline.api", "load_cubin": "pipeline.api", "Module": "pipeline.module",
         "Kernel": "launch", "KernelCache": "store", "gpu_available": "shell.info"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cudamagic' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazy ones (what completion offers), importing none."""
    return sorted(set(globals()) | set(_LAZY))


#: the name of the thread ``%load_ext`` starts the CUDA driver in (benchmarks watch for it)
DRIVER_THREAD = "cudamagic-driver"


def load_ipython_extension(ipython) -> None:
    """``%load_ext cudamagic``: register ``%%cuda``, the line magics and the shell's hooks, and
    start the CUDA driver.

    The driver starts in a background thread: ``cuInit`` and device 0's primary context, the one
    CuPy and every launch use (docs/performance.md has what each costs; both calls leave the
    interpreter free, so the notebook goes on meanwhile); a launch that comes before they are
    done waits for the rest. ``CUDAMAGIC_EAGER_CONTEXT=0`` leaves the context to the first launch
    (a notebook that works on another device only, or never launches). Nothing else is imported
    or found here (issue 38; tests/test_import_cost.py holds the list of what ``%load_ext`` may
    import): once the cell that ran it has finished, a second thread imports what a ``%%cuda``
    cell's hit needs, the pipeline, the cache and the report (:data:`cudamagic.shell.magic.HIT_PATH`),
    and does the first hit's once-per-process work (the magic line's parser, regular
    expressions, the toolkit's folders and the demangler, which a later cell looks up again
    where ``$CUDA_HOME``, ``$CUDA_PATH``, ``$PATH`` or ``sys.path`` changed), while the notebook
    waits for its next cell; the launch code comes with the first launch (or, with
    a GPU and NumPy imported, in the driver thread once the context is made), the debugging
    views with the first cell that shows them.
    """
    import threading

    # first: the driver's start is the longest part of a restarted notebook's way to a launch
    done = threading.Event()
    eager = eager_context()

    def run() -> None:
        try:
            _start_driver(eager)
        finally:
            done.set()

    threading.Thread(target=run, name=DRIVER_THREAD, daemon=True).start()
    from .shell.magic import CudaMagics, note_driver_thread

    note_driver_thread(done)  # a fork, and the interpreter's exit, wait for it
    ipython.register_magics(CudaMagics)


#: set to ``0`` to keep ``%load_ext`` from making device 0's primary context ahead of a launch
EAGER_CONTEXT_ENV = "CUDAMAGIC_EAGER_CONTEXT"
_OFF, _ON = frozenset(("0", "false", "no", "off")), frozenset(("", "1", "true", "yes", "on"))


def eager_context() -> bool:
    """Whether ``%load_ext`` makes device 0's primary context: ``CUDAMAGIC_EAGER_CONTEXT`` set
    to ``0``, ``false``, ``no`` or ``off`` (any case) says not.

    :warns InputWarning: any other value but ``1``, ``true``, ``yes``, ``on``; the context is
        made, as without the variable.
    """
    import os
    import warnings

    value = os.environ.get(EAGER_CONTEXT_ENV, "1")
    word = value.strip().lower()
    if word in _OFF:
        return False
    if word not in _ON:
        warnings.warn(f"{EAGER_CONTEXT_ENV}={value!r} is neither on (1, true, yes, on) nor off "
                      f"(0, false, no, off): device 0's primary context is made now, as without "
                      f"it; set {EAGER_CONTEXT_ENV}=0 before %load_ext to leave it to the first "
                      "launch", InputWarning, stacklevel=3)
    return True


def _start_driver(eager: bool = True) -> None:
    """The driver thread: ``cuInit`` and device 0's primary context; then, where NumPy is
    already imported (CuPy imports it: a notebook that launches), the launch code, so that the
    first launch does not import it (issue 38: most of a first call's time, docs/performance.md;
    the thread runs while the notebook waits for its next cell, and imports no NumPy itself)."""
    import sys

    from .toolchain.device import driver

    if not driver.available() or not eager:
        return
    try:
        driver.retain_primary(0)
    except CudaMagicError:  # the first launch makes it and says what is wrong
        return
    if "numpy" in sys.modules:
        from .launch import launcher  # noqa: F401
