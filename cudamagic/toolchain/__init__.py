"""The tools a build drives: NVRTC, the header manifest, the CUBIN reader, demanglers, the driver.

NVRTC's two entry points a build names are here as stand-ins that import :mod:`.compile.nvrtc` when
called: a cache hit never imports the compiler's module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .compile.nvrtc import CompileResult

__all__ = ["compile_cubin", "nvrtc_version", "nvrtc_identity"]


def compile_cubin(*args: Any, **kwargs: Any) -> "CompileResult":
    """:func:`.compile.nvrtc.compile_cubin` (its module imported by the first compile)."""
    from .compile import nvrtc

    return nvrtc.compile_cubin(*args, **kwargs)


def nvrtc_version() -> str:
    """:func:`.compile.nvrtc.nvrtc_version` (its module imported where it is asked)."""
    from .compile import nvrtc

    return nvrtc.nvrtc_version()


def nvrtc_identity() -> str:
    """:func:`.compile.nvrtc.nvrtc_identity` (its module imported where it is asked)."""
    from .compile import nvrtc

    return nvrtc.nvrtc_identity()
