"""What a module's tool runs get from the pipeline (:class:`~cudamagic.launch.tool_run.
DebugSupport`): its ``-lineinfo`` build, made on first use, and the view of a result.

A kernel's ``sanitize`` and ``profile`` and ``module.annotate()`` need the cell's CUBIN with
line information; the launch layer may not import the pipeline, so the pipeline hands each
module a callable that builds the same cell with ``-lineinfo`` added (cached under its own key
like any build) where its own CUBIN has none.

**A module is its inputs.** That build compiles what the module was built from: the module's
source, NVRTC options, search path, toolkit and arch as recorded (the pipeline's ``rebuild``;
not the environment's now), and the header contents its manifest names. Those are checked
against the files before the compile (a refusal costs no compile) and, exactly, after it: the
``-lineinfo`` build's own manifest (what its compile read, by sha256, or what its cache entry
was made from) must name the same headers with the same contents, so a header edited during
the compile is caught too. Otherwise it raises :class:`~cudamagic.errors.StaleModuleError`
naming the header; nothing is kept, so a header put back makes the next call work.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import StaleModuleError
from ..launch.support import DebugSupport, LineinfoBuild
from .module import Module
from ..core.options import PROGRAM_NAME, BuildOptions, working_folder
from ..toolchain.binary.image import has_line_info
from ..toolchain.compile.manifest import Manifest, SearchPath, read_otherwise, reads_working_folder


class BuildContext(Protocol):
    """What this module reads of the pipeline's ``BuildContext`` (the pipeline imports this
    module, so it names no pipeline type); read only."""

    @property
    def source(self) -> str: ...
    @property
    def opts(self) -> BuildOptions: ...
    @property
    def line_offset(self) -> int: ...
    @property
    def search(self) -> SearchPath: ...

#: ``rebuild(ctx, option, check)``: the pipeline's build of the module's cell again with one
#: more NVRTC option, ``check`` given the manifest of what that build read (it raises)
Rebuild = Callable[[Any, str, Callable[[Manifest], None]], Module]

__all__ = ["debug_support"]


def debug_support(ctx: BuildContext, module: Module, rebuild: Rebuild,
                  inputs: Manifest | None) -> DebugSupport:
    """The module's tool-run support: its -lineinfo build (made by ``rebuild``, the pipeline's,
    from what the module was built from: ``inputs``, the manifest of the headers it read) and
    the debugging view."""
    return DebugSupport(lineinfo=_lineinfo_build(ctx, module, rebuild, inputs),
                        present=_present)


def _present(record: Any) -> Any:
    """The debugging view of a tool run's record (imported by the first tool run, not by a
    build)."""
    from ..view.debug import present

    return present(record)


_AGAIN = ("annotate, sanitize and profile need this module built again with -lineinfo, and "
          "that build would compile other code than the module runs: re-run the cell to build "
          "the module from the files as they are now (or put the header back as it was)")


def _refuse(why: str) -> StaleModuleError:
    return StaleModuleError(f"{why}. {_AGAIN}")


def _checked_before(ctx: BuildContext, inputs: Manifest) -> None:
    """Refuse before any compile where the module's own inputs are not there now: a manifest
    that was never sure (a header changed while the module was built), the working folder
    changed where the module read from it, a header changed, gone or shadowed."""
    if inputs.racy:
        raise _refuse(f"what this module was built from is not known exactly ({inputs.racy})")
    data = inputs.to_json()
    cwd = working_folder()
    if reads_working_folder(data) and os.path.realpath(cwd) != os.path.realpath(ctx.search.cwd):
        raise _refuse(f"the working folder is now {cwd}; this module was built in "
                      f"{ctx.search.cwd}, where NVRTC looked up the cell's quoted includes "
                      "(%cd back there to build it again)")
    miss = Manifest.from_json(data, ctx.search).check()
    if miss is not None:
        raise _refuse(miss.detail.replace("the last compile", "this module's compile"))


def _same_inputs(ctx: BuildContext, inputs: Manifest) -> Callable[[Manifest], None]:
    """The check of what the -lineinfo build read (its compile's manifest, or the one its cache
    entry was made from) against what the module was built from."""
    def check(made: Manifest) -> None:
        why = made.racy or read_otherwise(inputs.to_json(), made.to_json(), ctx.search)
        if why:
            raise _refuse(why)
    return check


def _lineinfo_build(ctx: BuildContext, module: Module, rebuild: Rebuild,
                    inputs: Manifest | None) -> Callable[[], LineinfoBuild]:
    """The callable a module's tool runs get their build from: the module itself where its
    CUBIN has line information, else the same cell built again with ``-lineinfo`` (once, cached
    under its own key, as a cell of its own in the miss history) from the module's inputs."""
    made: list[LineinfoBuild] = []

    def lineinfo() -> LineinfoBuild:
        if made:
            return made[0]
        target = module
        if not has_line_info(module.image) and ctx.source:
            held = inputs if inputs is not None else Manifest()
            _checked_before(ctx, held)
            target = rebuild(ctx, "-lineinfo", _same_inputs(ctx, held))
        made.append(LineinfoBuild(target.payload(), ctx.source, ctx.line_offset, PROGRAM_NAME,
                                  has_line_info(target.image), target.cubin))
        return made[0]
    return lineinfo
