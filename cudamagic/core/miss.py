"""Why a build was not served from the cache, as a typed record made where the miss is found.

The store (an entry damaged, of another format, refused), the header manifest (a header
changed) and the pipeline (forced, not cached, a stored map that does not hold) each make a
:class:`Miss` with its :class:`MissKind`; :mod:`cudamagic.pipeline.explain` and the views decide what
to say from the kind, never from the words of ``detail``. Pure: no imports of the package.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["BuildPhase", "ChangeKind", "HitKind", "Miss", "MissKind", "StoreOutcome", "Stored"]


class HitKind(str, enum.Enum):
    """Which tier of the cache served a hit."""

    #: The cache folder on this machine.
    LOCAL = "local"
    #: The team's remote cache (:mod:`cudamagic.store.remote`), then kept in the folder.
    REMOTE = "remote"


class MissKind(str, enum.Enum):
    """What kept a cache entry from serving (a ``str``: the codes read as plain text)."""

    #: The cache holds no entry under the key.
    NO_ENTRY = "no-entry"
    #: ``--force`` / ``build(force=True)``: compiled again by request.
    FORCED = "forced"
    #: ``--no-cache`` / ``use_cache=False``: the cache is neither read nor written.
    NO_CACHE = "no-cache"
    #: A header the last compile read, or a place it searched, changed.
    HEADER = "header"
    #: The entry was written by another version of cudamagic (its format, or its manifest's).
    FORMAT = "format"
    #: The entry is damaged: checksum, shape, a CUBIN that cannot be read, a stored name map
    #: or Python name that does not hold, a file moved from another key.
    DAMAGED = "damaged"
    #: The stored value is not one the cache reads (another owner, a link, a special file, a
    #: pickle, a value kept inside the database).
    UNTRUSTED = "untrusted"
    #: The cache folder could not be read.
    UNREADABLE = "unreadable"
    #: Another process kept the cache's database locked for longer than a lookup waits.
    BUSY = "busy"
    #: The entry holds no stored name map and a name expression cannot be resolved without one.
    UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class Miss:
    """One reason a cache entry did not serve.

    Attributes
    ----------
    kind : MissKind
        What it was; the only part anything decides on.
    detail : str
        The finder's own account of the instance (which header, which field), shown as it is.
    path : str or None
        The file it concerns, where there is one (a header, the entry's value file).
    """

    kind: MissKind
    detail: str = ""
    path: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", MissKind(self.kind))


class WordEnum(str, enum.Enum):
    """An enum a user reads: each member equals, and prints as, the word the views show
    (``kernel.resolved_by == "demangled"`` holds); the code tests members."""

    def __str__(self) -> str:
        return str(self.value)


class BuildPhase(WordEnum):
    """A phase of a build or a cell, as ``BuildReport.timings`` keys its seconds (in the order
    a cell goes through them; ``report.timings["compile"]`` still reads)."""

    IMPORTS = "imports"
    PARSE = "parse"
    DRIVER = "driver"
    KEY = "key"
    LOOKUP = "lookup"
    REMOTE = "remote"
    HEADERS = "headers"
    NVRTC = "nvrtc"
    COMPILE = "compile"
    LISTING = "listing"      # the header listing's time past the compile (toolchain/compile/listing.py)
    LINK = "link"
    MANIFEST = "manifest"
    DEMANGLE = "demangle"
    RESOLVE = "resolve"
    STORE = "store"
    HISTORY = "history"
    PUSH = "push"
    RESOURCES = "resources"
    ANNOTATE = "annotate"    # %%cuda -a: the -lineinfo build and its machine code by line
    DISPLAY = "display"
    TOTAL = "total"          # the build's own time, start to end


class BuildOrigin(WordEnum):
    """Where a build's module came from (``BuildReport.origin``)."""

    CACHE = "cache"          # a hit
    COMPILED = "compiled"    # compiled by NVRTC (a miss)
    CUBIN = "cubin"          # a CUBIN from elsewhere (load_cubin)


class ChangeKind(str, enum.Enum):
    """What an explanation found by comparing a build with the cell's earlier one."""

    #: The cell was never built before (with this cache).
    FIRST = "first"
    SOURCE = "source"
    NAMES = "names"
    OPTIONS = "options"
    ARCH = "arch"
    NVRTC = "nvrtc"
    TOOLKIT = "toolkit"
    #: The same inputs were built before; the cache no longer holds the entry.
    EVICTED = "evicted"
    #: The same inputs were built before, and that build was not cached (its note says why).
    NOT_STORED = "not stored"
    #: The key changed although none of the inputs compared did.
    OTHER = "other"


class StoreOutcome(enum.Enum):
    """What became of a compiled build's entry (:class:`Stored`); the views word it."""

    #: Kept in the cache: the next run is a hit.
    KEPT = enum.auto()
    #: ``--no-cache``: the cache is not written.
    NO_CACHE = enum.auto()
    #: The header manifest cannot tie the text the compile read to its CUBIN (a header
    #: changed while it was read...): not stored, the next run compiles again.
    RACY = enum.auto()
    #: Another process kept the cache's database locked for longer than a store waits.
    BUSY = enum.auto()
    #: The build failed: nothing to keep.
    FAILED = enum.auto()


@dataclass(frozen=True)
class Stored:
    """What became of a build's entry: its :class:`StoreOutcome`, and the finder's own account
    of the instance where there is one (the manifest's doubt, for RACY), shown as it is."""

    outcome: StoreOutcome
    detail: str = ""
