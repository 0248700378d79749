"""cudamagic: a ``%%cuda`` cell magic for NVRTC-compiled, disk-cached CUDA kernels.

``%load_ext cudamagic`` registers the magics and loads nothing else: CuPy, NVRTC and the CUDA
driver load on the first build. The same pipeline is a Python API::

    import cudamagic
    mod = cudamagic.build(source, name_expressions=["saxpy<float>"])
    mod["saxpy<float>"]((blocks,), (threads,), (a, x, y, n))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["build", "load_cubin", "gpu_available", "Module", "Kernel", "KernelCache",
           "load_ipython_extension",
           "CudaMagicError", "CompileError", "NameResolutionError", "OptionError", "LaunchError",
           "NoDeviceError", "CacheError", "ImageError", "ContextPoisonedError"]

from .errors import (CacheError, CompileError, ContextPoisonedError, CudaMagicError, ImageError,
                     LaunchError, NameResolutionError, NoDeviceError, OptionError)

if TYPE_CHECKING:  # pragma: no cover
    from .cache import KernelCache
    from .kernel import Kernel
    from .session import Module, build, load_cubin

_LAZY = {"build": "session", "load_cubin": "session", "Module": "session", "Kernel": "kernel",
         "KernelCache": "cache", "gpu_available": "info"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cudamagic' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """``%load_ext cudamagic``: register ``%%cuda`` and the cache magics.

    It returns at once and loads neither CuPy nor the CUDA driver. A background thread then
    imports the pipeline (about 40 ms on an H200 host) while the user moves on, so the first
    ``%%cuda`` cell after a restart costs only its cache lookup.
    """
    import threading

    from .magic import CudaMagics

    ipython.register_magics(CudaMagics)
    threading.Thread(target=_prewarm, name="cudamagic-prewarm", daemon=True).start()


def _prewarm() -> None:
    try:
        from .demangle import default_demangler
        from .session import build_module  # noqa: F401  (the import is the point)
        from .toolkit import toolkit

        toolkit()
        default_demangler()
    except Exception:  # the first %%cuda cell does the same work and reports any failure
        pass
