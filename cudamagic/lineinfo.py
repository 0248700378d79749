"""What a module's tool runs get from the pipeline (:class:`~cudamagic.launch.tool_run.
DebugSupport`): its ``-lineinfo`` build, made on first use, and the view of a result.

A kernel's ``sanitize`` and ``profile`` need the cell's CUBIN with line information; the launch
layer may not import the pipeline, so the pipeline hands each module a callable that builds the
same cell with ``-lineinfo`` added (cached under its own key like any build) where its own CUBIN
has none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from .launch.support import DebugSupport, LineinfoBuild
from .module import Module
from .options import PROGRAM_NAME, BuildOptions
from .toolchain.image import has_line_info


class BuildContext(Protocol):
    """What this module reads of the pipeline's ``BuildContext`` (the pipeline imports this
    module, so it names no pipeline type); read only."""

    @property
    def source(self) -> str: ...
    @property
    def opts(self) -> BuildOptions: ...
    @property
    def settings(self) -> Any: ...
    @property
    def store(self) -> Any: ...
    @property
    def line_offset(self) -> int: ...

__all__ = ["debug_support"]


def debug_support(ctx: BuildContext, module: Module,
                  build: Callable[..., Module]) -> DebugSupport:
    """The module's tool-run support: its -lineinfo build (made by ``build``, the pipeline's
    ``build_module``) and the debugging view."""
    return DebugSupport(lineinfo=_lineinfo_build(ctx, module, build), present=_present)


def _present(record: Any) -> Any:
    """The debugging view of a tool run's record (imported by the first tool run, not by a
    build)."""
    from .view.debug import present

    return present(record)


def _lineinfo_build(ctx: BuildContext, module: Module,
                    build: Callable[..., Module]) -> Callable[[], LineinfoBuild]:
    """The callable a module's tool runs get their build from: the module itself where its
    CUBIN has line information, else the same cell built again with ``-lineinfo`` (once, cached
    under its own key, as a cell of its own in the miss history)."""
    made: list[LineinfoBuild] = []

    def lineinfo() -> LineinfoBuild:
        if made:
            return made[0]
        target = module
        if not has_line_info(module.image) and ctx.source:
            opts = dataclasses.replace(ctx.opts, options=(*ctx.opts.options, "-lineinfo"),
                                       force=False, quiet=True)
            s = ctx.settings
            target = build(ctx.source, opts, cache=ctx.store or s.cache, base_dir=s.base_dir,
                           line_offset=s.line_offset, compiler=s.compiler,
                           demangler=s.demangler, reserved=s.reserved,
                           cell=f"{s.cell or ctx.opts.module}:lineinfo")
        made.append(LineinfoBuild(target.payload(), ctx.source, ctx.line_offset, PROGRAM_NAME,
                                  has_line_info(target.image), target.cubin))
        return made[0]
    return lineinfo
