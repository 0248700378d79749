"""The last builds of each cell, kept beside the cache, so that a miss can say why.

A *cell* is a module name in a folder (``cuda_module`` in the notebook's folder): the magic's
``--module`` and the working folder. For each, one small JSON file in ``<cache>/history/``
remembers its last few builds (:data:`PER_CELL`, newest first): key and inputs, that is the
source (up to :data:`MAX_SOURCE` characters), the name expressions, the options, the arch,
NVRTC and the toolkit. Several builds, because the cells of a notebook often share the default
module name: a miss is compared with the closest of them (:func:`explain`): the first build, the
source changed (which lines, a short diff), options, names or arch changed, NVRTC or the
toolkit changed, a header changed, the entry was evicted, damaged or of an older format.

Bounded and cheap on purpose: at most :data:`MAX_CELLS` files (the least recently written go),
each written atomically (a temporary file, then a rename), owner-only like the rest of the
folder. A hit whose key is one the cell remembers writes nothing; after the first hit in a
process it reads nothing either (a dictionary lookup). A damaged or foreign file reads as no
history and is replaced by the next build. Pure apart from the file system: no CUDA, no IPython.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .files import FileRefused, read_regular
from .view.report import Explanation

__all__ = ["CellBuild", "History", "explain", "history_for", "note_build", "source_diff",
           "MAX_CELLS", "PER_CELL", "MAX_SOURCE"]

FOLDER = "history"
#: Cells (module name and folder) remembered per cache folder.
MAX_CELLS = 200
#: Builds remembered per cell, newest first.
PER_CELL = 4
#: Characters of a source kept for a diff (a longer one is remembered by its hash alone).
MAX_SOURCE = 16 * 1024
#: A history file larger than this is not read.
MAX_FILE = PER_CELL * (2 * MAX_SOURCE + 16 * 1024)
#: Lines of diff an explanation shows.
MAX_DIFF_LINES = 12
_VERSION = 2
_NO_ENTRY = "no cache entry"


@dataclass(frozen=True)
class CellBuild:
    """What one build of a cell was made from (what a later miss is compared with)."""

    key: str
    source_sha: str
    source: str | None
    names: tuple[str, ...]
    std: str
    options: tuple[str, ...]
    arch: str
    nvrtc: str
    toolkit: str
    line_offset: int = 0

    @classmethod
    def of(cls, ctx: Any) -> "CellBuild":
        """From a build context (:class:`cudamagic.session.BuildContext`)."""
        from .toolkit import toolkit

        src = ctx.source
        return cls(key=ctx.key,
                   source_sha=hashlib.sha256(src.encode("utf-8", "surrogatepass")).hexdigest(),
                   source=src if len(src) <= MAX_SOURCE else None,
                   names=tuple(ctx.opts.name_expressions), std=ctx.opts.std,
                   options=tuple(ctx.opts.options), arch=ctx.arch, nvrtc=ctx.nvrtc,
                   toolkit=toolkit().fingerprint, line_offset=ctx.line_offset)

    @classmethod
    def from_json(cls, data: object) -> "CellBuild | None":
        """The record, or None for anything that is not one."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(key=str(data["key"]), source_sha=str(data["source_sha"]),
                       source=data["source"] if isinstance(data["source"], str) else None,
                       names=tuple(map(str, data["names"])), std=str(data["std"]),
                       options=tuple(map(str, data["options"])), arch=str(data["arch"]),
                       nvrtc=str(data["nvrtc"]), toolkit=str(data["toolkit"]),
                       line_offset=int(data.get("line_offset", 0)))
        except (KeyError, TypeError, ValueError):
            return None


@functools.lru_cache(maxsize=256)
def cell_id(cwd: str, module: str) -> str:
    """The file name of a cell's record: the module name and folder, hashed."""
    return hashlib.sha256(f"{cwd}\0{module}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


class History:
    """The cells' last builds in one folder (or in memory, where the cache is).

    Parameters
    ----------
    folder : Path or None
        ``<cache>/history``; None keeps the records in this process only.
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._memory: dict[str, tuple[CellBuild, ...]] = {}
        # the keys each cell remembered when this process last read or wrote its file: a hit on
        # one of them needs no file at all
        self._known: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()

    def _path(self, cell: str) -> str:
        return os.path.join(self.folder, f"{cell}.json")

    def knows(self, cell: str, key: str) -> bool:
        """Whether this process has seen ``key`` among the cell's builds (no file access)."""
        return key in self._known.get(cell, ())

    def recall(self, cell: str) -> tuple[CellBuild, ...]:
        """The cell's builds, newest first (none: no file, or one that is not a record)."""
        if self.folder is None:
            return self._memory.get(cell, ())
        builds = self._read(self._path(cell))
        self._known[cell] = frozenset(b.key for b in builds)
        return builds

    def _read(self, path: str) -> tuple[CellBuild, ...]:
        try:
            data = json.loads(read_regular(path, max_size=MAX_FILE))
        except (FileRefused, OSError, ValueError, UnicodeDecodeError, RecursionError):
            return ()
        if not isinstance(data, dict) or data.get("v") != _VERSION \
                or not isinstance(data.get("builds"), list):
            return ()
        builds = tuple(b for b in map(CellBuild.from_json, data["builds"][:PER_CELL]) if b)
        return builds if len(builds) == len(data["builds"][:PER_CELL]) else ()

    def remember(self, cell: str, build: CellBuild, earlier: tuple[CellBuild, ...]) -> None:
        """Keep ``build`` as the cell's newest, before ``earlier`` (what :meth:`recall` gave),
        atomically; the least recently written cells go past :data:`MAX_CELLS`. A folder that
        cannot be written keeps nothing, silently: the history only explains, it never
        decides."""
        builds = (build, *(b for b in earlier if b.key != build.key))[:PER_CELL]
        if self.folder is None:
            self._memory.pop(cell, None)
            self._memory[cell] = builds
            while len(self._memory) > MAX_CELLS:
                self._memory.pop(next(iter(self._memory)))
            return
        path = self._path(cell)
        with self._lock:
            tmp = None
            try:
                os.makedirs(self.folder, mode=0o700, exist_ok=True)
                new_cell = not os.path.lexists(path)
                fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
                with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp: mode 0600
                    json.dump({"v": _VERSION, "when": time.time(),
                               "builds": [asdict(b) for b in builds]}, f,
                              separators=(",", ":"))
                os.replace(tmp, path)
                tmp = None
                self._known[cell] = frozenset(b.key for b in builds)
                if new_cell:
                    self._prune()
            except OSError:
                if tmp is not None:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass

    def _prune(self) -> None:
        entries = []
        with os.scandir(self.folder) as it:
            for e in it:
                if e.name.endswith(".json"):
                    try:
                        entries.append((e.stat(follow_symlinks=False).st_mtime_ns, e.path))
                    except OSError:
                        continue
        if len(entries) <= MAX_CELLS:
            return
        entries.sort()
        for _, path in entries[:len(entries) - MAX_CELLS]:
            try:
                os.unlink(path)
            except OSError:
                pass
            self._known.pop(os.path.basename(path)[:-5], None)


_histories: dict[str, History] = {}
_histories_lock = threading.Lock()


def history_for(store: Any) -> History:
    """The history beside a :class:`~cudamagic.cache.KernelCache` (in memory where the cache
    is: an untrusted or unusable folder keeps nothing of ours either)."""
    where = f"memory:{id(store)}" if store.in_memory else str(store.directory)
    hist = _histories.get(where)
    if hist is not None:
        return hist
    with _histories_lock:
        hist = _histories.get(where)
        if hist is None:
            hist = _histories[where] = History(
                None if store.in_memory else Path(store.directory) / FOLDER)
        return hist


# ---------------------------------------------------------------------------------------------
# Explaining a miss
# ---------------------------------------------------------------------------------------------

def _lines(ranges: list[tuple[int, int]]) -> str:
    parts = [f"line {a}" if a == b else f"lines {a}-{b}" for a, b in ranges[:4]]
    return ", ".join(parts) + (", ..." if len(ranges) > 4 else "")


def source_diff(old: str, new: str, line_offset: int = 0) -> tuple[str, tuple[str, ...]]:
    """Where the source changed, in cell lines (``"line 5"``, ``"lines 5-7, 12"``), and a short
    diff (``line 5 - old``, ``line 5 + new``; at most :data:`MAX_DIFF_LINES` lines)."""
    a, b = old.splitlines(), new.splitlines()
    ranges: list[tuple[int, int]] = []
    diff: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if j2 > j1:
            ranges.append((j1 + 1 + line_offset, j2 + line_offset))
        else:  # lines removed: say where they were
            ranges.append((j1 + line_offset, j1 + line_offset) if j1 else (1 + line_offset,) * 2)
        diff += [f"line {i + 1 + line_offset} - {a[i][:100]}" for i in range(i1, i2)]
        diff += [f"line {j + 1 + line_offset} + {b[j][:100]}" for j in range(j1, j2)]
    if len(diff) > MAX_DIFF_LINES:
        diff = diff[:MAX_DIFF_LINES - 1] + [f"... ({len(diff) - MAX_DIFF_LINES + 1} more lines "
                                            "of diff)"]
    return _lines(ranges), tuple(diff)


def _listed(items) -> str:
    return ", ".join(repr(x) for x in items)


def _set_change(what: str, old: tuple[str, ...], new: tuple[str, ...],
                ordered: bool = True) -> str | None:
    """What changed between two lists; with ``ordered`` False (name expressions, a set in the
    key) an order alone is no change."""
    if old == new or (not ordered and set(old) == set(new)):
        return None
    added = [x for x in new if x not in old]
    removed = [x for x in old if x not in new]
    parts = ([f"added {_listed(added)}"] if added else []) \
        + ([f"removed {_listed(removed)}"] if removed else [])
    return f"{what} changed: " + ("; ".join(parts) if parts else "the same ones, in another order")


def _toolkit_change(old: str, new: str) -> str:
    a, b = old.split(";"), new.split(";")
    gone = [x for x in a if x not in b]
    came = [x for x in b if x not in a]
    pairs = [f"{g.removesuffix('.dist-info')} -> {c.removesuffix('.dist-info')}"
             for g, c in zip(gone, came)][:2]
    detail = (": " + ", ".join(pairs)) if pairs else ""
    return f"the CUDA headers or packages every build sees changed{detail}"


def _cache_kind(reason: str) -> str:
    low = reason.lower()
    if "format" in low or "does not name its key" in low:
        return "format"
    if any(w in low for w in ("header", "__has_include", "now exists", "package folder")):
        return "header"
    return "damaged"


def explain(last: CellBuild | None, now: CellBuild, miss_reason: str | None,
            where: str = "this cell") -> Explanation:
    """Why a build was compiled, from the cell's last build and what the cache said."""
    # one comparison after another, each adding its reason: a flat list reads best
    if miss_reason == "--force":
        return Explanation(("forced",), ("--force: compiled again and the cache entry "
                                         "replaced",))
    cache_said = None if miss_reason in (None, _NO_ENTRY) else miss_reason
    if last is None:
        if cache_said:
            return Explanation((_cache_kind(cache_said),), (cache_said,))
        return Explanation(("first",), (f"first build of {where}",))
    if last.key == now.key:
        if cache_said:
            return Explanation((_cache_kind(cache_said),), (cache_said,))
        return Explanation(("evicted",), (
            f"{where} was built with these same inputs before, but the cache no longer holds "
            "the entry (evicted to stay under the size limit, or cleared)",))
    kinds: list[str] = []
    reasons: list[str] = []
    diff: tuple[str, ...] = ()
    if last.source_sha != now.source_sha:
        kinds.append("source")
        if last.source is not None and now.source is not None:
            where_lines, diff = source_diff(last.source, now.source, now.line_offset)
            reasons.append(f"the source changed ({where_lines})" if where_lines
                           else "the source changed (white space at the end)")
        else:
            reasons.append("the source changed (too long to keep for a diff)")
    change = _set_change("-n", last.names, now.names, ordered=False)
    if change:
        kinds.append("names")
        reasons.append(change)
    if last.std != now.std:
        kinds.append("options")
        reasons.append(f"--std changed: {last.std} -> {now.std}")
    change = _set_change("options", last.options, now.options)
    if change:
        kinds.append("options")
        reasons.append(change)
    if last.arch != now.arch:
        kinds.append("arch")
        reasons.append(f"the target arch changed: {last.arch} -> {now.arch}")
    if last.nvrtc != now.nvrtc:
        kinds.append("nvrtc")
        reasons.append(f"NVRTC changed: {last.nvrtc.removesuffix('.dist-info')} -> "
                       f"{now.nvrtc.removesuffix('.dist-info')}")
    if last.toolkit != now.toolkit:
        kinds.append("toolkit")
        reasons.append(_toolkit_change(last.toolkit, now.toolkit))
    if not kinds:
        kinds.append("other")
        reasons.append("the cache key changed although the source, names, options, arch, NVRTC "
                       "and toolkit did not (a cudamagic with another cache format?)")
    if cache_said:
        kinds.append(_cache_kind(cache_said))
        reasons.append(f"and the entry that could have served was not usable: {cache_said}")
    return Explanation(tuple(dict.fromkeys(kinds)), tuple(reasons), diff)


def closest(builds: tuple[CellBuild, ...], now: CellBuild) -> CellBuild | None:
    """The remembered build a miss is best compared with: same names and options first, then
    the most similar source (the cells of a notebook often share a module name)."""
    def score(b: CellBuild) -> tuple:
        similar = 0.0
        if b.source is not None and now.source is not None:
            similar = difflib.SequenceMatcher(None, b.source.splitlines(),
                                              now.source.splitlines(), autojunk=False).ratio()
        return (b.names == now.names, similar, b.options == now.options)
    return max(builds, key=score, default=None)


def note_build(ctx: Any, origin: str, miss_reason: str | None) -> Explanation | None:
    """Remember a build among its cell's last, and explain it if it was compiled.

    The one call the pipeline makes (``session._module``). A hit on a key the cell remembers
    writes nothing, and reads nothing once this process has read the cell's file.
    """
    if origin == "cubin":
        return None
    if ctx.store is None:
        return Explanation(("no-cache",), ("--no-cache: the cache is neither read nor "
                                           "written",))
    hist = history_for(ctx.store)
    cell = cell_id(ctx.search.cwd, ctx.opts.module)
    if origin == "cache" and hist.knows(cell, ctx.key):
        return None  # the warm path: a dictionary lookup
    builds = hist.recall(cell)
    if origin == "cache" and any(b.key == ctx.key for b in builds):
        return None
    now = CellBuild.of(ctx)
    out = None
    if origin == "compiled":
        same = next((b for b in builds if b.key == now.key), None)
        out = explain(same or closest(builds, now), now, miss_reason,
                      f"{ctx.opts.module} in this folder")
    hist.remember(cell, now, builds)
    return out
