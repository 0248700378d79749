"""A miss's precompiled header: which one its compile gets, and what became of it.

The files and their checks are :mod:`cudamagic.toolchain.compile.pch`'s; this module decides, for one
build, whether a PCH is wanted at all (the cell starts with includes, ``--no-pch``,
``build(..., pch=False)`` and ``$CUDAMAGIC_PCH=0`` are not given, the cache is a folder, this
NVRTC makes PCHs), and after the compile keeps a PCH only where the compile's header manifest
is sure of what it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import CacheArgumentError
from ..core.options import BuildOptions
from ..store import KernelCache
from ..store.limits import pch_size_limit
from ..toolchain.compile import pch
from ..toolchain.compile.deps import (Manifest, SearchPath, from_trace, front_end_seconds,
                                      trace_headers)
from ..toolchain.compile.listing import header_prefix
from ..toolchain.compile.pch import PchKind, PchPlan
from ..core.units import size_text

if TYPE_CHECKING:  # pragma: no cover
    from ..toolchain.compile.nvrtc import CompileResult

__all__ = ["plan_for", "settle_for", "held_headers", "dropped_on_failure", "beside", "PchUse"]

#: What became of a miss's PCH: its kind, the compile's seconds and those NVRTC's front end
#: spent on the PCH's headers without it (its trace's measure, when the PCH was made)
PchUse = tuple[PchKind, float, float]


def plan_for(opts: BuildOptions, store: KernelCache | None, source: str,
             options: Sequence[str], identity: tuple[str, str], search: SearchPath,
             notes: list[str], served: Any = None, *,
             holder: Callable[[str], str] | None = None) -> PchPlan | None:
    """The PCH this miss's compile is given (None: none); ``identity``: NVRTC's and the
    toolkit's, as the key names them; ``served``: the compile server's facts where it
    compiles (its NVRTC and process make the PCH), ``holder``: the server's owner name in a
    folder (the PCH made is the server's, kept past this process). Why none can be made is
    said once in ``notes``."""
    if not opts.pch or pch.switched_off() or store is None:
        return None
    prefix = header_prefix(source)
    if prefix is None or not (served.pch_supported if served else pch.supported()):
        return None
    folder = store.pch_folder
    if folder is None:
        return None
    key = pch.pch_key(prefix, options, *identity, search.cwd)
    try:
        maker = (served.owner, served.generation) if served else None
        held = holder(folder) if served and holder is not None else ""
        made = pch.plan(folder, key, search, notes, pch_size_limit(), maker, held)
        return None if made is None else replace(made, prefix=prefix)
    except CacheArgumentError as exc:  # said once: the variable is the process's
        pch.say_once(f"no precompiled header: {exc}", notes)
        return None


def held_headers(plan: PchPlan | None, result: "CompileResult"
                 ) -> tuple[tuple[str, str | None, float], ...]:
    """The headers a compile read from its PCH (NVRTC's trace names none of them: it opened
    none), for its manifest; none where it used no PCH."""
    if result.pch_trace is not None:  # made from the include lines alone, then used
        return tuple(trace_headers(result.pch_trace))
    used = plan is not None and result.pch is not None and result.pch.kind is PchKind.USED
    return plan.headers if used and plan is not None else ()


def settle_for(plan: PchPlan, result: "CompileResult", manifest: Manifest,
               notes: list[str], search: SearchPath, entries_limit: int = 0
               ) -> list[PchUse]:
    """Publish the PCH the compile made, where its manifest is sure (a racy or incomplete one
    may not list what the PCH holds), count a use, drop one NVRTC refused. The PCH's record
    lists the headers of the trace that names what it holds: the include lines' own where it
    was made from them alone (``result.pch_trace``), and keeps the seconds NVRTC's front end
    took on them, as NVRTC's trace measures it (what a compile from the PCH does not spend)."""
    outcome = result.pch
    if outcome is not None and outcome.kind is PchKind.MADE \
            and (manifest.racy or not manifest.complete):
        outcome = None
    held = result.pch_trace if result.pch_trace is not None else result.trace
    headers = trace_headers(held) if held is not None else []
    if result.pch_trace is not None:  # only what the PCH holds, checked before each use
        manifest = from_trace(headers, search, plan.prefix + "\n")
    try:
        limit = pch_size_limit()
    except CacheArgumentError:  # said when the plan was made
        limit = pch.DEFAULT_LIMIT
    parsed = front_end_seconds(held) if held is not None else 0.0
    kept = pch.settle(plan, outcome, headers, manifest.to_json(), parsed, notes, limit)
    if kept is not None and kept.kind is PchKind.MADE and entries_limit:
        beside(plan.folder, limit, entries_limit, notes)
    # NVRTC's own time, not the header listing's wait past it
    seconds = result.nvrtc_seconds or result.seconds
    return [] if kept is None else [(kept.kind, seconds, plan.made_seconds or parsed)]


def beside(folder: str, limit: int, entries_limit: int, notes: list[str]) -> None:
    """Said once where the PCHs kept pass the entries' size limit (``%cuda_cache limit``): a
    user who set that limit is told that the PCHs are not under it."""
    files = pch.files_of(folder, limit)
    if files.size > entries_limit:
        pch.say_once(f"the precompiled headers kept ({size_text(files.size)}) are more than the "
                     f"cache's size limit ({size_text(entries_limit)}, %cuda_cache limit), "
                     f"which bounds the entries only: they keep a limit of their own, "
                     f"{size_text(limit)} (${pch.LIMIT_ENV}); %cuda_cache clear --pch removes "
                     "them", notes)


@contextmanager
def dropped_on_failure(plan: PchPlan | None) -> Iterator[None]:
    """Around the compile: where it fails, the plan's private file goes and the PCH stays."""
    try:
        yield
    except BaseException:
        if plan is not None:
            pch.discard(plan)
        raise
