"""Why a build was compiled: the last builds of each cell, kept beside the cache, compared
with a miss, and the words for a :class:`~cudamagic.core.miss.Miss`.

A *cell* is what the shell identifies: the cell id IPython gives a notebook cell (Jupyter keeps
it in the notebook, so it survives restarts), or, where a ``--module`` name is given or there is
no cell id (a terminal, :func:`cudamagic.build`), the module name, in the working folder (a
cell id is found after ``%cd``; a module name is one of its folder). For
each, one small JSON file in ``<cache>/history/`` remembers its last few builds
(:data:`PER_CELL`, newest first): key and inputs, that is the source (up to :data:`MAX_SOURCE`
characters), the name expressions, the options, the arch, NVRTC and the toolkit. A miss is
compared with the closest of them (:func:`explain`); what the cache or the header check found is
a typed :class:`~cudamagic.core.miss.Miss`, and its kind alone decides what is said.

Bounded and cheap on purpose: at most :data:`MAX_CELLS` files (the least recently written go),
each written atomically (a temporary file, then a rename), owner-only like the rest of the
folder; every text comparison is linear or capped (:data:`MAX_DIFF_SPAN`). A hit whose key is
one the cell remembers writes nothing; after the first hit in a process it reads nothing either
(a dictionary lookup). A damaged or foreign file reads as no history and is replaced by the next
build. Pure apart from the file system: no CUDA, no IPython.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..core.process import InTest, cached, held
from ..core.forksafe import ForkSafeLock
from ..core.files import FileRefused, read_regular
from ..core.miss import BuildOrigin, ChangeKind, Miss, MissKind
from ..core.options import DEFAULT_MODULE
from ..view.report import Explanation

__all__ = ["CellBuild", "History", "Miss", "MissKind", "cell_id", "describe", "explain",
           "history_for", "most_alike", "note_build", "source_diff", "MAX_CELLS", "PER_CELL",
           "MAX_SOURCE", "MAX_DIFF_SPAN"]

FOLDER = "history"
#: Cells (module name and folder) remembered per cache folder.
MAX_CELLS = 200
#: Names a changed list shows (the rest are counted: a line of 5000 -n).
MAX_LISTED = 10
#: Builds remembered per cell, newest first.
PER_CELL = 4
#: Characters of a source kept for a diff (a longer one is remembered by its hash alone).
MAX_SOURCE = 16 * 1024
#: A history file larger than this is not read.
MAX_FILE = PER_CELL * (2 * MAX_SOURCE + 16 * 1024)
#: Lines of diff an explanation shows.
MAX_DIFF_LINES = 12
_VERSION = 2


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
    #: The kernels' symbols in the CUBIN (what tells cells apart where the shell gives no id);
    #: None in a record written before they were kept.
    kernels: tuple[str, ...] | None = ()
    #: Why the build was not cached, as its report said ("not cached: ..."); "" where it was.
    unstored: str = ""
    #: The headers outside the toolkit it read, ``(path, sha256)`` (a later build of another
    #: source says which of them changed too); None: not known, or too many to keep.
    headers: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def of(cls, *, key: str, source: str, names: tuple[str, ...], std: str,
           options: tuple[str, ...], arch: str, nvrtc: str, toolkit: str,
           line_offset: int = 0, kernels: tuple[str, ...] = (),
           unstored: str = "",
           headers: tuple[tuple[str, str], ...] | None = None) -> "CellBuild":
        """The record of a build from its inputs (the source kept only up to
        :data:`MAX_SOURCE` characters)."""
        return cls(key=key,
                   source_sha=hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(),
                   source=source if len(source) <= MAX_SOURCE else None, names=tuple(names),
                   std=std, options=tuple(options), arch=arch, nvrtc=nvrtc, toolkit=toolkit,
                   line_offset=line_offset, kernels=tuple(kernels),
                   unstored=_capped(unstored), headers=headers)

    @classmethod
    def from_json(cls, data: object) -> "CellBuild | None":
        """The record, or None for anything that is not one."""
        if not isinstance(data, dict):
            return None
        try:
            offset = data.get("line_offset", 0)
            texts = [data[k] for k in ("key", "source_sha", "std", "arch", "nvrtc", "toolkit")]
            kept = data.get("kernels")
            lists = [data["names"], data["options"], [] if kept is None else kept]
            unstored = data.get("unstored", "")  # not in a record written before it was kept
            if not (type(offset) is int and 0 <= offset < 1 << 31  # not a bool, not a float
                    and all(isinstance(t, str) for t in (*texts, unstored))
                    and all(isinstance(x, list) and all(isinstance(i, str) for i in x)
                            for x in lists)):
                return None
            return cls(key=texts[0], source_sha=texts[1],
                       source=data["source"] if isinstance(data["source"], str)
                       else None, names=tuple(lists[0]), std=texts[2], options=tuple(lists[1]),
                       arch=texts[3], nvrtc=texts[4], toolkit=texts[5], line_offset=int(offset),
                       kernels=None if kept is None else tuple(lists[2]),
                       unstored=_capped(unstored), headers=_header_pairs(data.get("headers")))
        except (KeyError, TypeError):
            return None


def _header_pairs(data: object) -> tuple[tuple[str, str], ...] | None:
    """A record's headers as stored (JSON lists of two texts), or None for anything else."""
    if not isinstance(data, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) for t in p)
            for p in data):
        return None
    return tuple((p[0], p[1]) for p in data)


def _settled(builds: tuple[CellBuild, ...]) -> frozenset[str]:
    """The keys a hit needs not write about: the builds kept as cached (a hit on a key whose
    record says "not cached" writes it as cached: another process stored it since)."""
    return frozenset(b.key for b in builds if not b.unstored)


#: the longest "not cached" note a record keeps (a note is a sentence; a file's may be anything)
MAX_NOTE = 1000


def _capped(note: str) -> str:
    return note if len(note) <= MAX_NOTE else note[:MAX_NOTE] + "..."


@cached(256, test=InTest.KEPT)
def cell_id(cwd: str, module: str, cell: str | None = None) -> str:
    """The file name of a cell's record, hashed from what identifies the cell: the shell's cell
    id where there is one and no ``--module`` was given (the same cell after ``%cd``: Jupyter's
    cell ids are unique in the notebook, whatever the working folder), else the module name and
    the folder."""
    what = (f"cell\0{cell}" if cell is not None and module == DEFAULT_MODULE
            else f"{cwd}\0{module}")
    return hashlib.sha256(what.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def cell_words(module: str, cell: str | None = None) -> str:
    """How an explanation names the cell (``this cell``, ``cuda_module in this folder``)."""
    return "this cell" if cell is not None and module == DEFAULT_MODULE \
        else f"{module} in this folder"


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
        self._lock = ForkSafeLock()

    def _path(self, cell: str) -> str:
        assert self.folder is not None  # only asked where there is a folder
        return os.path.join(self.folder, f"{cell}.json")

    def knows(self, cell: str, key: str) -> bool:
        """Whether this process has seen ``key`` among the cell's builds, as cached (no file
        access)."""
        return key in self._known.get(cell, ())

    def recall(self, cell: str) -> tuple[CellBuild, ...]:
        """The cell's builds, newest first (none: no file, or one that is not a record)."""
        if self.folder is None:
            return self._memory.get(cell, ())
        builds = self._read(self._path(cell))
        self._known[cell] = _settled(builds)
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
                self._known[cell] = _settled(builds)
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


_histories: dict[str, History] = held(__name__, "_histories", {})
_histories_lock = ForkSafeLock()


def history_for(store: Any) -> History:
    """The history beside a :class:`~cudamagic.store.KernelCache` (in memory where the cache
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

#: Lines of a changed middle (after the common first and last lines) compared line by line; a
#: longer one is reported as one changed range, so a diff never costs more than this squared.
MAX_DIFF_SPAN = 300


def _lines(ranges: list[tuple[int, int]]) -> str:
    parts = [f"line {a}" if a == b else f"lines {a}-{b}" for a, b in ranges[:4]]
    return ", ".join(parts) + (", ..." if len(ranges) > 4 else "")


def _opcodes(a: list[str], b: list[str]) -> Iterator[tuple[str, int, int, int, int]]:
    """The changes from ``a`` to ``b`` as difflib's opcodes (equal runs left out), in time
    linear in the lines plus :data:`MAX_DIFF_SPAN` squared."""
    start = 0
    end = min(len(a), len(b))
    while start < end and a[start] == b[start]:
        start += 1
    tail = 0
    while tail < end - start and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    a_end, b_end = len(a) - tail, len(b) - tail
    if a_end - start > MAX_DIFF_SPAN or b_end - start > MAX_DIFF_SPAN:
        if a_end > start or b_end > start:
            yield ("replace", start, a_end, start, b_end)
        return
    import difflib  # a miss's comparison: a hit imports none

    matcher = difflib.SequenceMatcher(None, a[start:a_end], b[start:b_end], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            yield tag, i1 + start, i2 + start, j1 + start, j2 + start


def source_diff(old: str, new: str, line_offset: int = 0) -> tuple[str, tuple[str, ...]]:
    """Where the source changed, in cell lines (``"line 5"``, ``"lines 5-7, 12"``), and a short
    diff (``line 5 - old``, ``line 5 + new``; at most :data:`MAX_DIFF_LINES` lines)."""
    from ..core.lines import cell_lines  # a miss's explanation: never a hit's import

    a, b = cell_lines(old), cell_lines(new)
    ranges: list[tuple[int, int]] = []
    diff: list[str] = []
    more = 0
    for _, i1, i2, j1, j2 in _opcodes(a, b):
        if j2 > j1:
            ranges.append((j1 + 1 + line_offset, j2 + line_offset))
        else:  # lines removed: say where they were
            ranges.append((j1 + line_offset, j1 + line_offset) if j1 else (1 + line_offset,) * 2)
        changed = [(i, "-", a[i]) for i in range(i1, min(i2, i1 + MAX_DIFF_LINES))] \
            + [(j, "+", b[j]) for j in range(j1, min(j2, j1 + MAX_DIFF_LINES))]
        more += (i2 - i1) + (j2 - j1) - len(changed)
        diff += [f"line {n + 1 + line_offset} {sign} {text[:100]}" for n, sign, text in changed]
    if len(diff) + more > MAX_DIFF_LINES:
        hidden = len(diff) + more - MAX_DIFF_LINES + 1
        diff = diff[:MAX_DIFF_LINES - 1] + [f"... ({hidden} more lines of diff)"]
    return _lines(ranges), tuple(diff)


def _listed(items: list[str]) -> str:
    """The first :data:`MAX_LISTED` items, and how many more (a line of 5000 ``-n``)."""
    shown = ", ".join(repr(x) for x in items[:MAX_LISTED])
    return shown if len(items) <= MAX_LISTED else f"{shown} and {len(items) - MAX_LISTED} more"


def _set_change(what: str, old: tuple[str, ...], new: tuple[str, ...],
                ordered: bool = True) -> str | None:
    """What changed between two lists; with ``ordered`` False (name expressions, a set in the
    key) an order alone is no change."""
    if old == new or (not ordered and set(old) == set(new)):
        return None
    before, after = set(old), set(new)
    added = [x for x in new if x not in before]
    removed = [x for x in old if x not in after]
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


_WORDS = {MissKind.NO_ENTRY: "no cache entry", MissKind.FORCED: "--force",
          MissKind.NO_CACHE: "--no-cache"}


def describe(miss: Miss) -> str:
    """A miss in words, as the report's first line of why gives it."""
    return miss.detail or _WORDS.get(miss.kind, miss.kind.value)


def _cache_said(miss: Miss | None) -> Miss | None:
    """What the cache's own check found, if anything (not a plain absence, not a request)."""
    if miss is None or miss.kind in (MissKind.NO_ENTRY, MissKind.FORCED, MissKind.NO_CACHE):
        return None
    return miss


def _input_changes(last: CellBuild, now: CellBuild
                   ) -> tuple[list[MissKind | ChangeKind], list[str], tuple[str, ...]]:
    """What differs between two builds' inputs: kinds, one sentence each, a source diff."""
    kinds: list[MissKind | ChangeKind] = []
    reasons: list[str] = []
    diff: tuple[str, ...] = ()
    if last.source_sha != now.source_sha:
        kinds.append(ChangeKind.SOURCE)
        if last.source is not None and now.source is not None:
            where_lines, diff = source_diff(last.source, now.source, now.line_offset)
            reasons.append(f"the source changed ({where_lines})" if where_lines
                           else "the source changed (white space at the end)")
        else:
            reasons.append("the source changed (too long to keep for a diff)")
    # name expressions are a set in the key: an order alone is no change
    for kind, change in (
            (ChangeKind.NAMES, _set_change("-n", last.names, now.names, ordered=False)),
            (ChangeKind.OPTIONS, last.std != now.std and f"--std changed: {last.std} -> {now.std}"),
            (ChangeKind.OPTIONS, _set_change("options", last.options, now.options)),
            (ChangeKind.ARCH, last.arch != now.arch
             and f"the target arch changed: {last.arch} -> {now.arch}"),
            (ChangeKind.NVRTC, last.nvrtc != now.nvrtc
             and f"NVRTC changed: {last.nvrtc.removesuffix('.dist-info')} -> "
                 f"{now.nvrtc.removesuffix('.dist-info')}"),
            (ChangeKind.TOOLKIT, last.toolkit != now.toolkit
             and _toolkit_change(last.toolkit, now.toolkit))):
        if change:
            kinds.append(kind)
            reasons.append(change)
    return kinds, reasons, diff


def _header_changes(last: CellBuild, now: CellBuild) -> list[str]:
    """The headers both builds read whose contents differ, one sentence each (the first
    :data:`MAX_LISTED`): what a miss of a changed source or option names besides."""
    if last.headers is None or now.headers is None:
        return []
    before = dict(last.headers)
    changed = [path for path, digest in now.headers if before.get(path, digest) != digest]
    said = [f"the header {path} changed since the last build" for path in changed[:MAX_LISTED]]
    if len(changed) > MAX_LISTED:
        said.append(f"and {len(changed) - MAX_LISTED} more headers changed")
    return said


def explain(last: CellBuild | None, now: CellBuild, miss: Miss | None,
            where: str = "this cell") -> Explanation:
    """Why a build was compiled, from the cell's last build and the miss the pipeline found.

    What is said is decided by the miss's kind and the two builds' inputs, never by the words
    of a miss's detail (which are shown as they are).
    """
    if miss is not None and miss.kind is MissKind.FORCED:
        return Explanation((MissKind.FORCED,), ("--force: compiled again and the cache entry "
                                                "replaced",))
    said = _cache_said(miss)
    # the cache's own account of an absent entry (the team's holds builds of other header
    # contents): said besides what the history finds
    team = miss.detail if miss is not None and miss.kind is MissKind.NO_ENTRY else ""
    if last is None or last.key == now.key:
        if said is not None:
            return Explanation((said.kind,), (describe(said),))
        if last is None:
            return Explanation((ChangeKind.FIRST,), (f"first build of {where} here", team)
                               if team else (f"first build of {where}",))
        if last.unstored:  # never kept: not an entry the cache lost
            return Explanation((ChangeKind.NOT_STORED,), (
                f"{where} was built with these same inputs before, and that build was "
                f"{last.unstored}",))
        return Explanation((ChangeKind.EVICTED,), (
            f"{where} was built with these same inputs before, but the cache no longer holds "
            "the entry (evicted to stay under the size limit, or cleared)",))
    kinds, reasons, diff = _input_changes(last, now)
    headers = _header_changes(last, now)
    if headers:
        kinds.append(MissKind.HEADER)
        reasons.extend(headers)
    if not kinds:
        kinds.append(ChangeKind.OTHER)
        reasons.append("the cache key changed although the source, names, options, arch, NVRTC "
                       "and toolkit did not (a cudamagic with another cache format?)")
    if said is not None:
        kinds.append(said.kind)
        reasons.append(f"and the entry that could have served was not usable: {describe(said)}")
    if team:
        reasons.append(team)
    return Explanation(tuple(dict.fromkeys(kinds)), tuple(reasons), diff)


def _similarity(a: str, b: str) -> float:
    """How alike two sources are, by the lines they share (a multiset, in linear time)."""
    from ..core.lines import cell_lines

    la, lb = cell_lines(a), cell_lines(b)
    if not la and not lb:
        return 1.0
    shared = sum((collections.Counter(la) & collections.Counter(lb)).values())
    return 2.0 * shared / (len(la) + len(lb))


def _same_cell(earlier: CellBuild, now: CellBuild) -> bool:
    """Whether a build remembered without a cell id may be this cell's: it defined one of the
    kernels this build's CUBIN holds (a record written before kernels were kept: maybe). A
    build of no kernels (a template cell without -n) is no other cell's: it shares none."""
    return earlier.kernels is None or bool(set(earlier.kernels) & set(now.kernels or ()))


def most_alike(builds: tuple[CellBuild, ...], now: CellBuild) -> CellBuild | None:
    """The remembered build a miss is best compared with: same names and options first, then
    the most similar source."""
    def score(b: CellBuild) -> tuple:
        similar = 0.0
        if b.source is not None and now.source is not None:
            similar = _similarity(b.source, now.source)
        return (set(b.names) == set(now.names), similar, b.options == now.options)
    return max(builds, key=score, default=None)


def note_build(store: Any, key: str, build: Callable[[], CellBuild], *, origin: BuildOrigin,
               miss: Miss | None, folder: str, module: str,
               cell: str | None = None) -> Explanation | None:
    """Remember a build among its cell's last, and explain it if it was compiled.

    ``store`` is the build's cache (None: not cached); ``build`` makes the build's record (a
    hash of the source: only where it is needed); ``folder``, ``module`` and ``cell`` identify
    the cell (:func:`cell_id`). A hit on a key the cell remembers writes nothing, and reads
    nothing once this process has read the cell's file.
    """
    if store is None:
        return Explanation((MissKind.NO_CACHE,), ("--no-cache: the cache is neither read nor "
                                                  "written",))
    hist = history_for(store)
    where = cell_id(folder, module, cell)
    if origin is BuildOrigin.CACHE and hist.knows(where, key):
        return None  # the warm path: a dictionary lookup
    builds = hist.recall(where)
    if origin is BuildOrigin.CACHE:
        said = next((b for b in builds if b.key == key), None)
        if said is not None and said.unstored:  # a hit: the entry is cached now after all
            hist.remember(where, replace(said, unstored=""), builds)
        if said is not None:
            return None
    now = build()
    out = None
    if origin is BuildOrigin.COMPILED:
        same = next((b for b in builds if b.key == now.key), None)
        mine = builds
        if cell is None and module == DEFAULT_MODULE:  # no id: every cell shares the folder's
            mine = tuple(b for b in builds if _same_cell(b, now))
        out = explain(same or most_alike(mine, now), now, miss, cell_words(module, cell))
    hist.remember(where, now, builds)
    return out
