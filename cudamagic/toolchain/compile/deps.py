"""What a compile read: the dependency manifest stored with an entry, and its check on a hit.

The files a compile read are the compiler's to say, not a scanner's. NVRTC has no ``-M``, but
``--fdevice-time-trace=FILE`` writes ``FILE.json`` whose "Processing Header File" events name
every header its front end opened, as it spelled the path (``inc/sub/../y.h``, relative to the
process's current folder where the search folder was relative), nested by time inside the
event of the file that included it. A hand scan of ``#include`` lines cannot follow macros,
``__has_include``, line splices, digraphs, ``--pre-include`` or the real search order; the trace
does. The model is ccache's direct mode: the key of the inputs leads to the entry; the entry's
manifest lists the files read, and a hit must find them unchanged:

- every header read: user headers by content (sha256), headers inside versioned packages (the
  toolkit's folders) by size, modification and change times and inode, which an in-place
  edit, a copy over it or a replacement changes, and by content where those differ (the
  entry was made in another installation: :mod:`cudamagic.toolchain.compile.manifest`);
- every place a header would have been found *before* the one that was read (NVRTC searches a
  quoted include's own folder, then each ``-I`` in order; the cell's own folder is the process's
  current folder): each must still hold no such file. Checked cheaply: the deepest existing
  folder on the way to each such place is recorded with its modification time, which changes
  when an entry is added below it; only then are its places looked at one by one;
- every name that ``__has_include`` tested (found in the text of the files read): where it was
  found it must still be, where it was not it must still not be (a folder is not found:
  NVRTC's search and ``__has_include`` both pass over one);
- every file a literal ``#include`` of the cell or a user header finds that is one of the files
  read under another name (a link NVRTC skipped by its include guard or ``#pragma once``).

A build whose manifest cannot be certain (a header gone or renamed at the moment it is taken,
a name NVRTC could not write as UTF-8, a file changed or created during the compile, a name a
``__has_include`` tested that was there when the compile started and is not now) is not
stored (:func:`from_trace`). Which names were there when it started comes from a listing of
the search's own folders taken just before it (:func:`list_search_folders`): only a change
of a name the compile looked up counts, so ``-I.`` in a folder that anything writes into is
still cached.

Where NVRTC cannot write the trace (an NVRTC older than 12.8) the manifest comes from a scan of
quoted includes and says so (``complete`` is False): the report warns that header edits may be
missed. Pure apart from the file system: no CUDA.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from stat import S_ISDIR, S_ISREG

from ...core.process import InTest, cached, held
from .listing import OPENS_FILES as _OPENS_FILES
from .manifest import AbsentGroup, HeaderState, Manifest, SearchPath

__all__ = ["SearchPath", "HeaderState", "AbsentGroup", "Manifest", "reads_no_file", "trace_headers", "from_trace", "from_scan",
           "TRACE_EVENT", "FRONT_END_EVENT", "front_end_seconds", "Listing", "list_search_folders"]

TRACE_EVENT = "Processing Header File"
#: The trace's event of NVRTC's whole front end (parsing the cell and its headers)
FRONT_END_EVENT = "CUDA C++ Front-End"
_BUILTIN = "__nv_nvrtc_builtin_header.h"  # NVRTC's own, held in memory
# __has_include and the macros libraries wrap it in (CCCL's _CCCL_HAS_INCLUDE(<x>)): a name
# tested through a wrapper is still a name tested; matching wrappers too only adds places.
# Linear: nothing before the word (a leading [A-Za-z_]* retried a run of letters from each of
# its letters), a bounded tail, and the name read to its closing quote or the line's end, so
# that a test without one consumes its line instead of being retried from each later start
_HAS_INCLUDE = re.compile(
    rb'(?:has_include|HAS_INCLUDE)[A-Za-z_]{0,64}\s*\(\s*([<"])([^>"\n]*)([>"]?)')
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)
# a test of a name that only a macro spells, in a conditional (not in the #define of a wrapper
# such as CCCL's, whose uses spell their names): __has_include(OPT_HDR)
_HAS_INCLUDE_MACRO = re.compile(
    rb'^[ \t]*(?:#|%:)[ \t]*(?:el)?if\b[^\n]*has_include\w{0,64}[ \t]*\([ \t]*(?![<" \t])',
    re.M | re.I)
_SPLICE_B = re.compile(rb"\\[ \t]*\r?\n")


_SPLICE = re.compile(r"\\[ \t]*\r?\n")


def reads_no_file(source: str, options: Sequence[str]) -> bool:
    """True when a compile cannot open a header: the source (line splices joined) has no word
    that could include one and no option pre-includes one. Such a compile needs no trace,
    whose fixed cost is large beside a small compile (docs/performance.md measures it), and
    its manifest would be empty anyway. Any doubt is a False (trace)."""
    return (_OPENS_FILES.search(_SPLICE.sub("", source)) is None
            and not any(o.startswith(("-include", "--pre-include")) for o in options))


def trace_headers(trace_json: str | bytes) -> list[tuple[str, str | None, float]]:
    """``(header, includer or None for the cell, microseconds into the compile)`` for each
    file the trace says was opened, in the order they were opened.

    Events nest by time: a header's includer is the innermost header event around it. Their
    times count from the compile's start (NVRTC 13.5: they start again at 0 for each compile).

    :raises ValueError: not a trace NVRTC wrote.
    """
    data = json.loads(trace_json)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("the trace holds no event list")
    spans = sorted(((e["ts"], -e.get("dur", 0), e["args"]["detail"]) for e in events
                    if isinstance(e, dict) and e.get("name") == TRACE_EVENT
                    and e.get("args", {}).get("detail") not in (None, _BUILTIN)))
    out: list[tuple[str, str | None, float]] = []
    stack: list[tuple[float, str]] = []  # (end time, path) of the open includers
    for ts, neg_dur, path in spans:
        while stack and stack[-1][0] <= ts:
            stack.pop()
        out.append((path, stack[-1][1] if stack else None, ts))
        stack.append((ts - neg_dur, path))
    return out


def front_end_seconds(trace_json: str | bytes) -> float:
    """The seconds NVRTC's front end took in a compile, as its trace measures it (the
    ``CUDA C++ Front-End`` event; 0 where the trace has none or is not one)."""
    try:
        data = json.loads(trace_json)
    except ValueError:
        return 0.0
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        return 0.0
    spans = [e.get("dur", 0) for e in events if isinstance(e, dict)
             and e.get("name") == FRONT_END_EVENT and isinstance(e.get("dur", 0), (int, float))]
    return max(spans, default=0) / 1e6


#: A header whose modification or change time is this close before NVRTC opened it, or after,
#: may not be what NVRTC read (file system times come from a coarse clock, a jiffy behind).
RACY_NS = 10_000_000


#: The entries listed before a compile, all search folders together (the listing's time and
#: memory stay bounded): a folder that would take the count past it is not listed, and there a
#: ``__has_include`` that found nothing is doubted whenever the folder changed during the
#: compile, as in a folder below a search folder.
LISTING_LIMIT = 20_000


@dataclass(frozen=True)
class Listing:
    """What one of the search's own folders held just before a compile started.

    ``entries`` maps each name in it to ``(inode, is a folder)`` (a symbolic link is no
    folder), as ``os.scandir`` reads them without a stat per entry; ``inode`` is the folder's.
    After the compile, a name that a ``__has_include`` tested there is known to have been
    absent, or the same folder, for the whole compile where it is so before and after; any
    other name may change as it likes.
    """

    folder: str
    inode: int
    entries: Mapping[str, tuple[int, bool]]

    def same(self, name: str) -> bool:
        """``name`` (one component) is as it was listed: absent then and now, or the same
        object (inode), folder or not, then and now."""
        try:
            st = os.lstat(os.path.join(self.folder, name))
        except (OSError, ValueError):
            return name not in self.entries
        return self.entries.get(name) == (st.st_ino, S_ISDIR(st.st_mode))


def list_search_folders(search: SearchPath) -> dict[str, Listing]:
    """The search's own folders (the current folder and every ``-I`` outside the versioned
    packages), each listed, by folder; to take just before the compile and hand to
    :func:`from_trace`. A folder that cannot be listed, or would take the entries listed past
    :data:`LISTING_LIMIT`, is left out (its changes are doubted as before)."""
    out: dict[str, Listing] = {}
    left = LISTING_LIMIT
    for d in ("", *search.include_dirs):
        folder = (search.absolute(d) if d else search.cwd).rstrip("/") or "/"  # as dirname gives
        if folder in out or search.is_versioned(os.path.join(folder, "x")):
            continue
        try:
            inode = os.stat(folder).st_ino
            entries: dict[str, tuple[int, bool]] = {}
            with os.scandir(folder) as it:
                for e in it:
                    if len(entries) >= left:
                        raise OverflowError(folder)
                    entries[e.name] = (e.inode(), e.is_dir(follow_symlinks=False))
        except (OSError, ValueError, OverflowError):
            continue
        left -= len(entries)
        out[folder] = Listing(folder, inode, entries)
    return out


def from_trace(opened: Sequence[tuple], search: SearchPath, source: str,
               started_ns: int | None = None,
               listed: Mapping[str, Listing] | None = None) -> Manifest:
    """The manifest of a compile from its trace (:func:`trace_headers`).

    A manifest that cannot be sure of what the compile read is ``racy`` (the reason), and the
    pipeline does not store the build: a header that cannot be read once the compile ended
    (an editor's atomic save at that moment), a header name NVRTC could not write as UTF-8,
    and, given ``started_ns`` (``time.time_ns()`` just before the compile), a header modified
    after NVRTC opened it or less than :data:`RACY_NS` before (its hash, taken now, may not be
    of the text that was compiled: ccache's rule), a file that appeared during the compile
    where the search or a ``__has_include`` looked, a name a ``__has_include`` tested that
    was there when the compile started and is not now, or a folder where one tested a name
    that only a macro spells that changed during it. ``listed`` (:func:`list_search_folders`,
    taken before the compile) says what the search's own folders held: without it, or in a
    folder it does not list, any change of a folder where a ``__has_include`` found nothing
    is a doubt. A header written by an earlier cell (``%%writefile``) is older than that,
    unless the two cells run within the file system's clock resolution.

    Headers NVRTC skipped as one it had already read (a symbolic or hard link reached again,
    under an include guard or ``#pragma once``) never appear in the trace: the literal
    ``#include`` names of the cell and its user headers are followed, and a file found that
    way which is one of the files read is recorded too (a real header put in the link's place
    is then a change).
    """
    opened = [(o[0], o[1], o[2] if len(o) > 2 else 0.0) for o in opened]
    doubts: list[str] = []
    read = _Read(search)
    opened_at: dict[str, float] = {}
    for path, _, ts in opened:
        full = search.absolute(path)
        opened_at[full] = min(ts, opened_at.get(full, ts))
        if "\ufffd" in path:
            doubts.append(f"NVRTC's trace names the header {path!r}, whose name it could not "
                          "write as UTF-8 text (U+FFFD), so which file it read is unknown")
        elif read.state(full) is None:
            doubts.append(f"the header {full} could not be read once the compile ended (an "
                          "editor saving it at that moment?)")
    pairs = list(dict.fromkeys((p, i) for p, i, _ in opened))
    pairs += _skipped_links(source, pairs, read)
    places: set[str] = set()
    forms: dict[str | None, dict[str, set[bytes]]] = {}
    for path, includer in pairs:
        if includer not in forms:
            forms[includer] = _include_forms(source if includer is None else None, includer, read)
        spelled = forms[includer]
        places.update(place for name, place in _shadowing(path, _folder_of(includer), search)
                      if name is None or spelled.get(name) != {b"<"})
    tested, unknown = _has_include_places(source, [p for p, _ in pairs], read)
    places |= tested
    found = {p: os.path.isfile(p) for p in places}  # NVRTC skips a folder; so does __has_include
    present = tuple(sorted(p for p in tested if found[p]))
    absent = _group_absent([p for p, f in found.items() if not f], search)
    watched = _folder_times(unknown)
    if started_ns is not None:
        doubts += _late(read, opened_at, started_ns)
        doubts += _appeared(places, found, started_ns, listed or {})
        doubts += _tested_changed(tested, found, absent, watched, started_ns, listed or {})
    return Manifest(tuple(read.states.values()), absent, present, complete=True,
                    watched=watched, racy=doubts[0] if doubts else None, search=search)


@dataclass(frozen=True)
class _Scanned:
    """What a file's text says that a manifest looks for (line splices joined), read once per
    content: its ``__has_include`` tests (:data:`_HAS_INCLUDE`), whether one tests a name only a
    macro spells, and its literal ``#include`` names (:data:`_LITERAL_INCLUDE`)."""

    has_include: frozenset[tuple[bytes, bytes, bytes]]
    macro_test: bool
    includes: tuple[tuple[bytes, bytes], ...]

    @classmethod
    def of(cls, text: bytes) -> "_Scanned":
        tests = b"has_include" in text or b"HAS_INCLUDE" in text
        joined = _SPLICE_B.sub(b"", text) if tests or b"include" in text else text
        return cls(frozenset(_HAS_INCLUDE.findall(joined)) if tests else frozenset(),
                   bool(tests and _HAS_INCLUDE_MACRO.search(joined)),
                   tuple(_LITERAL_INCLUDE.findall(joined)) if b"include" in text else ())


#: What this process hashed and scanned, for the next miss that reads the same headers (a
#: CCCL cell's ~600 at every edit): a path's sha256 under its stat (device, inode, size,
#: modification and change times), kept only where neither time was within :data:`RACY_NS`
#: of the read (a later write then moves the change time past the one kept, so an unchanged
#: stat is unchanged content: ccache's rule), and each content's scan by its sha256. Bounded:
#: both are emptied past :data:`_KNOWN_LIMIT` paths (a manifest keeps the scans it took).
# a child keeps them (the files are the same files); a test's reset forgets them
_DIGESTS: dict[str, tuple[tuple[int, int, int, int, int], str]] = held(
    __name__, "_DIGESTS", {})
_SCANS: dict[str, _Scanned] = held(__name__, "_SCANS", {})
_KNOWN_LIMIT = 50_000


class _Read:
    """The files a manifest looks at, each stat'ed once, and read and hashed once unless this
    process already hashed it as it is (:data:`_DIGESTS`)."""

    def __init__(self, search: SearchPath) -> None:
        self.search = search
        self.states: dict[str, HeaderState] = {}
        self.ids: set[tuple[int, int]] = set()  # (device, inode) of each file in ``states``
        self._scans: dict[str, _Scanned] = {}  # of each file in ``states``

    def scanned(self, full: str) -> _Scanned | None:
        """The scan of a file this manifest records (None where it cannot be read)."""
        return self._scans.get(full) if self.state(full) is not None else None

    def state(self, full: str) -> HeaderState | None:
        """The file's state, recorded (None where it is not a file that can be read)."""
        if full in self.states:
            return self.states[full]
        before = time.time_ns()
        try:
            st = os.stat(full)
        except (OSError, ValueError):
            return None
        if not S_ISREG(st.st_mode):
            return None
        stat = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = _DIGESTS.get(full)
        scan = _SCANS.get(known[1]) if known is not None and known[0] == stat else None
        if known is not None and scan is not None:
            digest = known[1]
        else:
            text = _read(full)
            if text is None:
                return None
            digest = hashlib.sha256(text).hexdigest()  # versioned too: checked so elsewhere
            if len(_DIGESTS) >= _KNOWN_LIMIT:
                _DIGESTS.clear()
                _SCANS.clear()
            scan = _SCANS.get(digest) or _SCANS.setdefault(digest, _Scanned.of(text))
            if max(st.st_mtime_ns, st.st_ctime_ns) < before - RACY_NS:
                _DIGESTS[full] = (stat, digest)
        self._scans[full] = scan
        self.states[full] = HeaderState(full, st.st_size, st.st_mtime_ns, digest,
                                        st.st_ctime_ns, st.st_ino)
        self.ids.add((st.st_dev, st.st_ino))
        return self.states[full]


# an #include (or %:include, #include_next) of a literal name, comments allowed before it, and
# the #define of a macro that is a header name (#define HDR "x.h" ... #include HDR)
_COMMENT = rb"/\*[^*\n]*\*+(?:[^/*\n][^*\n]*\*+)*/"
_LITERAL_INCLUDE = re.compile(
    rb'^[ \t]*(?:#|%:)[ \t]*(?:include(?:_next)?|define[ \t]+\w+)[ \t]*(?:' + _COMMENT
    + rb'[ \t]*)*([<"])([^>"\n]+)[>"]', re.M)


def _skipped_links(source: str, pairs: Sequence[tuple[str, str | None]], read: _Read
                   ) -> list[tuple[str, str | None]]:
    """``(path, includer)`` of each file a literal include of the cell or a user header finds
    that was not read but is one of the files read (the same device and inode)."""
    search = read.search
    for path, _ in pairs:
        read.state(search.absolute(path))
    out: list[tuple[str, str | None]] = []
    scans: list[tuple[str | None, _Scanned | None]] = [
        (None, _Scanned.of(source.encode("utf-8", "surrogatepass")))]
    scans += [(p, read.scanned(search.absolute(p))) for p, _ in pairs
              if not search.is_versioned(search.absolute(p))]
    for includer, scan in scans:
        if scan is None:
            continue
        for quote, name in set(scan.includes):
            folders = ((_folder_of(includer),) if quote == b'"' else ()) + search.include_dirs
            spelled = _first_file(os.fsdecode(name), folders, search)
            if spelled is None:
                continue
            full = search.absolute(spelled)
            if full not in read.states and _identity(full) in read.ids:
                read.state(full)
                out.append((spelled, includer))
    return out


def _first_file(name: str, folders: Sequence[str], search: SearchPath) -> str | None:
    """``name`` as spelled in the first folder that holds it as a file (NVRTC's search)."""
    for folder in folders:
        spelled = os.path.join(folder, name) if folder else name
        if os.path.isfile(search.absolute(spelled)):
            return spelled
    return None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _late(read: _Read, opened_at: dict[str, float], started_ns: int) -> list[str]:
    """Headers modified after NVRTC opened them, or within :data:`RACY_NS` before."""
    now = time.time_ns()
    return [f"the header {f.path} changed while it was compiled (or just before)"
            for f in read.states.values()
            if _changed_at(f, now) >= started_ns + int(opened_at.get(f.path, 0.0) * 1000) - RACY_NS]


def _changed_at(f: HeaderState, now_ns: int) -> int:
    """When a file last changed: its change time, which the kernel sets on every write and
    ``utime``, and its modification time unless that is ahead of the clock (``touch -d``, a
    tarball from a machine whose clock ran ahead): a future mtime says nothing about when the
    file changed, and a change that kept it still moved the change time."""
    return f.ctime_ns if f.mtime_ns > now_ns else max(f.mtime_ns, f.ctime_ns)


def _appeared(places: Iterable[str], found: dict[str, bool], started_ns: int,
              listed: Mapping[str, Listing]) -> list[str]:
    """Files that appeared (or were replaced) during the compile where the search or a
    ``__has_include`` looked: NVRTC may have looked before they did. Where the folder was
    listed before the compile, the file must be the one listed then, unchanged since; elsewhere
    the folder's own change time counts too (a rename into place)."""
    since = started_ns - RACY_NS
    out = []
    for p in places:
        if not found[p]:
            continue
        folder, name = os.path.split(p)
        listing = listed.get(folder)
        if listing is not None:
            new = not listing.same(name) or _changed_ns(p, folder=False) >= since
        else:
            new = _changed_ns(p) >= since
        if new:
            out.append(f"{p} appeared while the cell compiled (NVRTC may have searched there "
                       "before it did)")
    return out


def _tested_changed(tested: set[str], found: dict[str, bool], absent: Sequence[AbsentGroup],
                    watched: Sequence[tuple[str, int, int]], started_ns: int,
                    listed: Mapping[str, Listing]) -> list[str]:
    """Names a ``__has_include`` tested that it may have found, though they are not there
    now: in a folder that changed during the compile, a tested name whose first component
    below it is not as the listing before the compile had it (a file there then, removed or
    renamed since). A folder not listed (below a search folder, too large) cannot say which
    name changed: any change there during the compile is a doubt; so is any change of a
    folder where a name that only a macro spells was tested (``watched``)."""
    since = started_ns - RACY_NS
    out = [f"the folder {d}, where a __has_include tested a name that a macro gives, changed "
           "while the cell compiled" for d, m, _ in watched if m >= since]
    for g in absent:
        gone = [p for p in g.places if p in tested and not found[p]]
        listing = listed.get(g.folder)
        moved = listing is not None and listing.inode != g.inode  # another folder there now
        if not gone or (g.mtime_ns < since and not moved):
            continue  # no entry added or removed there during the compile
        if listing is None or moved:
            out.append(f"the folder {g.folder}, where a __has_include found nothing, changed "
                       "while the cell compiled")
            continue
        start = len(g.folder.rstrip("/")) + 1
        out += [f"{p}, which a __has_include tested, changed while the cell compiled (it "
                "may have been there when it was tested)" for p in gone
                if not listing.same(p[start:].split("/", 1)[0])]
    return out


def _changed_ns(path: str, folder: bool = True) -> int:
    """The latest change of a file, of the link to it, and (``folder``) of the folder entry
    holding it."""
    times = []
    for look in (os.stat, os.lstat):
        for target in (path, os.path.dirname(path)) if folder else (path,):
            try:
                st = look(target)
            except (OSError, ValueError):
                continue
            times += [st.st_ctime_ns, st.st_mtime_ns] if target == path else [st.st_ctime_ns]
    return max(times, default=0)


def _folder_times(folders: Iterable[str]) -> list[tuple[str, int, int]]:
    out = []
    for folder in sorted(set(folders)):
        try:
            st = os.stat(folder)
            out.append((folder, st.st_mtime_ns, st.st_ino))
        except OSError:
            out.append((folder, -1, 0))  # not there now: any folder there later is a change
    return out


def _has_include_places(source: str, opened: Sequence[str], read: _Read
                        ) -> tuple[set[str], set[str]]:
    """Every place a ``__has_include`` in the cell or a header it read looked at, and the
    folders where one tested a name the text does not spell (``__has_include(MACRO)`` in an
    ``#if``): there, any new file counts as a change."""
    search = read.search
    places: set[str] = set()
    unknown: set[str] = set()
    scans: list[tuple[str | None, _Scanned | None]] = [
        (None, _Scanned.of(source.encode("utf-8", "surrogatepass")))]
    scans += [(p, read.scanned(search.absolute(p))) for p in dict.fromkeys(opened)]
    for path, scan in scans:  # (a name may be spelled across a line splice: joined there)
        if scan is None or not (scan.has_include or scan.macro_test):
            continue
        first = [_folder_of(path)]
        for quote, name, closed in scan.has_include:
            if not name or not closed:
                continue
            for folder in (*(first if quote == b'"' else ()), *search.include_dirs):
                rel = os.fsdecode(name)  # the name's own bytes, UTF-8 or not
                places.add(search.absolute(os.path.join(folder, rel) if folder else rel))
        if scan.macro_test:
            unknown.update(search.absolute(f) if f else search.cwd
                           for f in (*first, *search.include_dirs))
    return places, unknown


def from_scan(source: str, search: SearchPath, started_ns: int | None = None,
              limit: int = 10_000, listed: Mapping[str, Listing] | None = None) -> Manifest:
    """A manifest from quoted ``#include`` lines, for an NVRTC that writes no trace.

    It follows quoted includes through each file's folder, the current folder and the ``-I``
    folders; it cannot see ``<...>`` includes, macros or ``__has_include``: ``complete`` is
    False and the report says so.
    """
    opened: list[tuple[str, str | None, float]] = []
    todo: list[tuple[str, str | None]] = [(n, None) for n in _QUOTED_INCLUDE.findall(source)]
    seen: set[str] = set()
    while todo and len(seen) < limit:
        name, includer = todo.pop(0)
        for folder in (_folder_of(includer), *search.include_dirs):
            path = os.path.join(folder, name) if folder else name
            full = search.absolute(path)
            if os.path.isfile(full):
                if full not in seen:
                    seen.add(full)
                    opened.append((path, includer, 0.0))
                    text = (_read(full) or b"").decode("utf-8", "replace")
                    todo += [(n, path) for n in _QUOTED_INCLUDE.findall(text)]
                break
    manifest = from_trace(opened, search, source, started_ns, listed)
    return Manifest(manifest.files, manifest.absent, manifest.present, complete=False,
                    racy=manifest.racy, search=search)


def _folder_of(path: str | None) -> str:
    """The folder a file's quoted includes are looked up in first ("" = the current folder,
    which is the cell's)."""
    return "" if path is None else os.path.dirname(path)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _include_forms(source: str | None, includer: str | None, read: _Read
                   ) -> dict[str, set[bytes]]:
    """The names the includer's literal ``#include`` lines spell, each with its forms (``<``,
    ``"``); a toolkit header's, or one that cannot be read, are not looked at (empty)."""
    if source is not None:
        scan: _Scanned | None = _Scanned.of(source.encode("utf-8", "surrogatepass"))
    else:
        assert includer is not None
        full = read.search.absolute(includer)
        scan = None if read.search.is_versioned(full) else read.scanned(full)
    forms: dict[str, set[bytes]] = {}
    for quote, name in scan.includes if scan is not None else ():
        forms.setdefault(os.fsdecode(name), set()).add(quote)
    return forms


def _shadowing(path: str, includer_folder: str, search: SearchPath
               ) -> tuple[tuple[str | None, str], ...]:
    """Places searched before the one where ``path`` was found, each with the name its
    includer spells to reach it through the includer's own folder (None: a place in a ``-I``
    folder, which every include form searches).

    The search order of a quoted include is its includer's folder, then each ``-I``; an angle
    include skips the first (the caller drops such a place where the includer spells the name
    only in angle brackets: NVRTC never looked in its folder for it). The trace does not say
    which folder found it (where folders nest), so every reading is taken; the caller keeps
    the places that held no file (a place that held one cannot have been passed over). Pure
    string work, kept for the process (:func:`_places_before`): a CCCL cell's ~1 000
    (header, includer) pairs are the same at every edit.
    """
    return _places_before(path, includer_folder, search.cwd, search.include_dirs)


@cached(1 << 16, test=InTest.KEPT)  # string work alone: the same answer in every process
def _places_before(path: str, includer_folder: str, cwd: str, include_dirs: tuple[str, ...]
                   ) -> tuple[tuple[str | None, str], ...]:
    folders = (includer_folder, *include_dirs)
    out: list[tuple[str | None, str]] = []
    for k, folder in enumerate(folders):
        if folder:
            prefix = folder.rstrip("/") + "/"
            if not path.startswith(prefix):
                continue
            name = path[len(prefix):]
        elif os.path.isabs(path):
            continue
        else:
            name = path
        for j, earlier in enumerate(folders[:k]):
            place = os.path.join(earlier, name) if earlier else name
            out.append((name if j == 0 else None,
                        place if os.path.isabs(place) else os.path.join(cwd, place)))
    return tuple(out)


def _group_absent(places: Iterable[str], search: SearchPath) -> tuple[AbsentGroup, ...]:
    """Group places by the deepest folder on their way that exists, with its mtime: a file
    created anywhere below changes that folder's mtime (a new entry there), so a hit stats
    one folder per group instead of every place."""
    deepest: dict[str, str] = {}  # a place's folder -> the deepest existing folder on its way

    def existing(folder: str) -> str:
        if folder not in deepest:
            parent = os.path.dirname(folder)
            deepest[folder] = folder if (parent == folder or os.path.isdir(folder)) \
                else existing(parent)
        return deepest[folder]

    groups: dict[str, list[str]] = {}
    for place in places:
        groups.setdefault(existing(os.path.dirname(place)), []).append(place)
    out = []
    for folder, members in sorted(groups.items()):
        try:
            st = os.stat(folder)
            mtime, inode = st.st_mtime_ns, st.st_ino
        except OSError:
            mtime, inode = -1, 0  # cannot be stat'ed now: every check looks at the places
        kept = () if search.is_versioned(os.path.join(folder, "x")) else tuple(sorted(members))
        out.append(AbsentGroup(folder, mtime, kept, inode))
    return tuple(out)
