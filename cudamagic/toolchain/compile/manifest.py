"""The dependency manifest: the headers one compile read and the places that must stay empty,
as stored with an entry, and its check on a hit. :mod:`cudamagic.toolchain.compile.deps` makes one from
NVRTC's trace (its module text says what is recorded and why). Pure apart from the file system.

**A manifest travels.** Its paths are stored by the folder they were found from, not as this
machine spells it: a folder of the toolkit by its name inside its package
(``site-packages/cupy/_core/include``), the working folder and relative ``-I`` folders as
paths from the working folder, anything else as the absolute path it is. A check takes them
from the build's own :class:`SearchPath`, so an entry made in another checkout, venv or
machine names this build's files. Every header is stored with its sha256: a header of a
versioned package is checked by its size, times and inode where those match (the entry was
made here) and by its content where they do not (made in another installation of the same
versions); a user header always by content. What a check found by content on this machine is
handed back (:meth:`Manifest.restamped`) so that the next hit here takes the fast path.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from stat import S_ISREG
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from ...core.miss import Miss, MissKind

__all__ = ["SearchPath", "HeaderState", "AbsentGroup", "Manifest", "ManifestChecks",
           "MANIFEST_VERSION", "contents_digest", "own_headers", "read_otherwise",
           "reads_working_folder"]

#: 3: paths by the folder they were found from (see the module), a sha256 for every header,
#: the inode of every folder checked by time. Entries of version 2 are misses, rebuilt once.
MANIFEST_VERSION = 3
_ABSOLUTE, _WORKING = "", "."  # the roots a stored folder may name besides the toolkit's


@dataclass(frozen=True)
class SearchPath:
    """Where a compile looks for headers, as NVRTC was told.

    Attributes
    ----------
    cwd : str
        The process's current folder during the compile: relative paths in the trace are
        relative to it, and the cell's own quoted includes are looked up there first.
    include_dirs : tuple of str
        The ``-I`` folders, in order, exactly as passed to NVRTC (the trace spells paths with
        them).
    versioned : tuple of str
        Folders of installed packages (the toolkit's): their headers are checked by size,
        modification and change times and inode where those match.
    named : tuple of (str, str, str)
        ``(folder, root, path)``: a folder and the name that travels for it: a toolkit folder
        by its name in its package (``root`` that name, ``path`` ""), a relative ``-I`` by its
        path from the working folder (``root`` ".", ``path`` "../common"). The working folder
        is always root "." and needs no row.
    """

    cwd: str
    include_dirs: tuple[str, ...]
    versioned: tuple[str, ...] = ()
    named: tuple[tuple[str, str, str], ...] = ()

    def portable(self, folder: str) -> tuple[str, str]:
        """``(root, path)`` for an absolute folder (``root`` "": ``path`` is absolute)."""
        best = ("", _ABSOLUTE, folder)
        for base, root, rel in (*self.named, (self.cwd, _WORKING, "")):
            base = base.rstrip("/") or "/"
            if (folder == base or folder.startswith(base + "/")) and len(base) > len(best[0]):
                rest = folder[len(base) + 1:]
                best = (base, root, os.path.join(rel, rest) if rel else rest)
        return best[1], best[2]

    def local(self, root: str, path: str) -> str | None:
        """The absolute folder a stored ``(root, path)`` names in this build (None: a toolkit
        folder this installation does not have)."""
        if root == _ABSOLUTE:
            return path
        if root == _WORKING:
            base: str | None = self.cwd
        else:
            base = next((f for f, r, rel in self.named if r == root and not rel), None)
        if base is None:
            return None
        return os.path.join(base, path) if path else base

    def absolute(self, path: str) -> str:
        """A path as the compile saw it, made absolute (not normalized: ``..`` after a
        symbolic link means what the file system says)."""
        return path if os.path.isabs(path) else os.path.join(self.cwd, path)

    def is_versioned(self, path: str) -> bool:
        norm = os.path.normpath(path)
        return any(norm.startswith(prefix) for prefix in self._versioned_prefixes)

    @functools.cached_property
    def _versioned_prefixes(self) -> tuple[str, ...]:
        # normalized once per search, not once per question: a CCCL cell's manifest asks for
        # each of its ~1 700 (header, includer) pairs (cached in the instance's own __dict__,
        # which a frozen dataclass allows)
        return tuple(os.path.normpath(d) + os.sep for d in self.versioned)


@dataclass(frozen=True)
class HeaderState:
    """One file the compile read, as it was then.

    A user header is checked by its content (``sha256``) on every hit: a file swapped for one
    of the same size and time (``cp -p``, a switched link, two writes within one clock tick)
    is still caught. A versioned package's header is checked by its size, modification and
    change times and inode (an in-place edit, a copy over it or a switched link changes them),
    and by its content where they differ (the same header of another installation).
    ``sha256`` is None only for a manifest built by hand.
    """

    path: str
    size: int
    mtime_ns: int
    sha256: str | None
    ctime_ns: int = 0
    inode: int = 0


@dataclass(frozen=True)
class AbsentGroup:
    """Places below one existing folder that held no file when the compile ran.

    ``places`` is empty for a folder inside a versioned package: there any change of the
    folder (a file added or removed) counts as a change, without looking closer; the same
    folder of another installation of the same versions (another inode) is taken as the
    package's own.
    """

    folder: str
    mtime_ns: int
    places: tuple[str, ...]
    inode: int = 0

    def appeared(self) -> str | None:
        """A place that holds a file now (None if none does; a folder is no file to NVRTC).

        The places' first components below the folder held no file (the folder is the
        deepest that existed, or the place itself was a folder), so one look at each
        component clears every place below it.
        """
        below: dict[str, list[str]] = {}
        start = len(self.folder.rstrip("/")) + 1
        for p in self.places:
            below.setdefault(p[start:].split("/", 1)[0], []).append(p)
        for component, places in below.items():
            if os.path.exists(os.path.join(self.folder, component)):
                for p in places:
                    if os.path.isfile(p):
                        return p
        return None


class StoredManifest(TypedDict, total=False):
    """The manifest as an entry stores it (JSON): every path a folder index and a name.

    ``folders`` rows are ``[root, path]`` (see the module: "" absolute, "." the working
    folder, else a toolkit folder's name); ``files`` rows are ``[folder, name, size, mtime_ns,
    ctime_ns, inode, sha256]``, ``absent`` rows ``[folder, mtime_ns, inode, [[folder, name],
    ...]]``, ``watched`` rows ``[folder, mtime_ns, inode]``, ``present`` rows ``[folder,
    name]``; ``made`` lists ``[root, absolute folder]`` where the entry was made (for a check
    given no search path). Rows stay lists: a hit reads hundreds of them, and JSON objects per
    row would cost more than the check. Only this module reads or writes them; the format
    changes with :data:`MANIFEST_VERSION`.
    """

    version: int
    complete: bool
    folders: list[list[str]]
    files: list[list[Any]]
    watched: list[list[Any]]
    absent: list[list[Any]]
    present: list[list[Any]]
    made: list[list[str]]


class Manifest:
    """The files one compile read, and the places that must stay empty for a hit.

    Kept as the compact JSON object stored in the entry (paths as an index into a list of
    folders, each folder by its root, see the module) and checked straight from it: a CCCL
    cell's manifest lists hundreds of headers and more places, and building an object for each
    would cost more on every hit than the check.

    Attributes
    ----------
    files : tuple of HeaderState
    absent : tuple of AbsentGroup
    present : tuple of str
        Paths that ``__has_include`` found.
    complete : bool
        False where the headers came from a scan of quoted includes (no trace).
    """

    def __init__(self, files: Sequence[HeaderState] = (), absent: Sequence[AbsentGroup] = (),
                 present: Sequence[str] = (), complete: bool = True,
                 watched: Sequence[tuple[str, int, int]] = (), racy: str | None = None,
                 search: SearchPath | None = None) -> None:
        # why what the compile read is not certain (a header changed during it...): then the
        # entry must not be stored
        self.racy = racy
        self._malformed = False
        self._search = search or SearchPath("/", ())
        self._fresh: dict[tuple[str, int], list[int]] = {}
        index: dict[str, int] = {}

        def folder(path: str) -> int:
            return index.setdefault(path, len(index))

        def split(path: str) -> list:
            head, tail = os.path.split(path)
            return [folder(head), tail]

        self._data: StoredManifest = {
            "version": MANIFEST_VERSION, "complete": bool(complete),
            "files": [[*split(f.path), f.size, f.mtime_ns, f.ctime_ns, f.inode, f.sha256]
                      for f in files],
            "watched": [[folder(d), m, ino] for d, m, ino in watched],
            "absent": [[folder(g.folder), g.mtime_ns, g.inode, [split(p) for p in g.places]]
                       for g in absent],
            "present": [split(p) for p in present]}
        s = self._search
        self._data["folders"] = [list(s.portable(f)) for f in index]
        made = {r: s.local(r, "") for r, _ in self._data["folders"] if r != _ABSOLUTE}
        self._data["made"] = sorted([r, f] for r, f in made.items() if f is not None)
        self._folders: list[str | None] = list(index)

    @classmethod
    def from_json(cls, data: object, search: SearchPath | None = None) -> "Manifest":
        """A stored manifest, as it is (a malformed one fails its check, never serves), to be
        checked against ``search`` (default: the folders where it was made).

        :raises ValueError: not a manifest of this version.
        """
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION or not all(
                isinstance(data.get(k), list) for k in ("folders", "files", "absent", "present")):
            raise ValueError("the entry's header manifest is missing or of another version")
        manifest = cls.__new__(cls)
        manifest._data = cast(StoredManifest, data)
        manifest.racy = None
        manifest._fresh = {}
        manifest._folders = []
        # every path the check hands the file system must be text: an integer would be taken
        # as a file descriptor; the rest is checked as it is read (a join of a non-text fails)
        manifest._malformed = not (
            all(type(f) is list and len(f) == 2 and all(type(x) is str for x in f)
                for f in data["folders"])
            and isinstance(data.get("watched", []), list)
            and all(type(g) is list and g and type(g[0]) is int
                    for k in ("absent", "watched") for g in data.get(k, ())))
        if search is None:
            made = {r: f for r, f in data.get("made", ()) if type(r) is str and type(f) is str} \
                if isinstance(data.get("made"), list) and all(
                    type(m) is list and len(m) == 2 for m in data["made"]) else {}
            search = SearchPath(made.get(_WORKING, "/"), (), tuple(
                f for r, f in made.items() if r != _WORKING),
                tuple((f, r, "") for r, f in made.items() if r != _WORKING))
        manifest._search = search
        if not manifest._malformed:
            manifest._folders = [search.local(r, p) for r, p in data["folders"]]
        return manifest

    def to_json(self) -> StoredManifest:
        """The manifest as the compact JSON object stored in the entry record."""
        return self._data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Manifest) and other._data == self._data

    @property
    def complete(self) -> bool:
        return bool(self._data.get("complete"))

    def _folder(self, i: int) -> str:
        folder = self._folders[i]
        if folder is None:
            raise _Elsewhere(self._data["folders"][i][0])
        return folder

    @property
    def files(self) -> tuple[HeaderState, ...]:
        return tuple(HeaderState(os.path.join(self._folder(i), n), s, m, h, c, ino)
                     for i, n, s, m, c, ino, h in self._data["files"])

    @property
    def absent(self) -> tuple[AbsentGroup, ...]:
        return tuple(AbsentGroup(self._folder(d), m, tuple(os.path.join(self._folder(i), n)
                                                           for i, n in ps), ino)
                     for d, m, ino, ps in self._data["absent"])

    @property
    def present(self) -> tuple[str, ...]:
        return tuple(os.path.join(self._folder(i), n) for i, n in self._data["present"])

    def check(self) -> Miss | None:
        """Why the entry no longer matches the files (None when it does).

        Every file is stat'ed; user headers are hashed, and so are versioned headers whose
        size, times or inode differ from the stored ones (a ``touch`` is not a change).
        """
        self._fresh = {}
        if self._malformed:
            return Miss(MissKind.DAMAGED, "the entry's header manifest is malformed (a folder "
                        "that is not text)")
        try:
            changed = self._check()
        except _Elsewhere as exc:
            return Miss(MissKind.HEADER, f"the entry was made with the toolkit folder {exc}, "
                        "which this installation does not have")
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            return Miss(MissKind.DAMAGED, f"the entry's header manifest is malformed ({exc})")
        if changed is not None:
            self._fresh = {}
            return Miss(MissKind.HEADER, changed)
        return None

    def restamped(self) -> dict | None:
        """After a check that passed: the stored manifest with this machine's sizes, times and
        inodes where the check had to look closer (an entry made in another installation), so
        that the next hit takes the fast path; None where nothing differed."""
        if not self._fresh:
            return None
        data: dict[str, Any] = dict(self._data)
        for part in ("files", "watched", "absent"):
            rows = [list(r) for r in data[part]]
            for (kind, n), values in self._fresh.items():
                if kind == part:
                    start = 2 if part == "files" else 1
                    rows[n][start:start + len(values)] = values
            data[part] = rows
        made = {r: self._search.local(r, "") for r, _ in data["folders"] if r != _ABSOLUTE}
        data["made"] = sorted([r, f] for r, f in made.items() if f is not None)
        return data

    def _check(self) -> str | None:
        return self._check_files() or self._check_folders() or self._check_present()

    def _check_files(self) -> str | None:
        stat, join = os.stat, os.path.join
        folders = self._folders
        versioned = [f is not None and self._search.is_versioned(join(f, "x")) for f in folders]
        for n, (i, name, size, mtime_ns, ctime_ns, inode, digest) in enumerate(
                self._data["files"]):
            folder = folders[i]
            path = join(folder if folder is not None else self._folder(i), name)
            try:
                st = stat(path)
            except OSError:
                return f"the header {path} was read by the last compile and is gone"
            if versioned[i] and st.st_mtime_ns == mtime_ns and st.st_size == size \
                    and st.st_ctime_ns == ctime_ns and st.st_ino == inode:
                continue  # the fast path: an entry made here
            now = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
            if digest is None or _digest(path, size) != digest:
                if digest is None and not versioned[i]:
                    continue  # hand-built: nothing to compare
                return f"the header {path} changed since the last compile"
            if versioned[i] and _stat_list(path) == now:
                self._fresh[("files", n)] = now
        return None

    def _check_folders(self) -> str | None:
        for n, (i, mtime_ns, inode) in enumerate(self._data.get("watched", ())):
            why = self._folder_moved("watched", n, self._folder(i), mtime_ns, inode)
            if why is not None:
                return (f"the folder {self._folder(i)} changed since the last compile, and a "
                        "__has_include there tested a name given by a macro")
        for n, (i, mtime_ns, inode, places) in enumerate(self._data["absent"]):
            folder = self._folder(i)
            if self._folder_moved("absent", n, folder, mtime_ns, inode) is None:
                continue
            if not places:
                return (f"the package folder {folder} changed since the last compile "
                        "(a header may have been added there)")
            group = AbsentGroup(folder, mtime_ns, tuple(os.path.join(self._folder(j), name)
                                                        for j, name in places))
            found = group.appeared()
            if found:
                return (f"{found} now exists; the last compile found no file there (a "
                        "header there shadows the one it read, or changes a __has_include)")
        return None

    def _folder_moved(self, part: str, n: int, folder: str, mtime_ns: int,
                      inode: int) -> str | None:
        """None where the folder is as recorded, or is the same folder of another installation
        of the same package versions (recorded to be restamped); else the folder."""
        try:
            st = os.stat(folder)
        except OSError:
            return folder
        if st.st_mtime_ns == mtime_ns:
            return None
        if st.st_ino != inode and self._search.is_versioned(os.path.join(folder, "x")):
            self._fresh[(part, n)] = [st.st_mtime_ns, st.st_ino]
            return None
        return folder

    def _check_present(self) -> str | None:
        for i, name in self._data["present"]:
            path = os.path.join(self._folder(i), name)
            if not os.path.isfile(path):
                return (f"{path}, which __has_include found in the last compile, is gone")
        return None


class ManifestChecks:
    """The checks of stored manifests for one build (the folder's entry's, each remote build's
    of its key): called with a stored manifest, why it does not hold here (None: it holds).
    ``held`` is the last one that held, ``seconds`` what the checks took."""

    def __init__(self, search: SearchPath) -> None:
        self._search = search
        self.held: Manifest | None = None
        self.seconds = 0.0

    def __call__(self, data: object) -> Miss | None:
        t = time.perf_counter()
        try:
            manifest = Manifest.from_json(data, self._search)
            miss = manifest.check()
        except ValueError as exc:
            miss = Miss(MissKind.FORMAT, str(exc))
        self.seconds += time.perf_counter() - t
        if miss is None:
            self.held = manifest
        return miss


def contents_digest(data: object) -> str:
    """What a stored manifest says the compile read, as a name (32 hex digits): its folders by
    root, each header's name, size and sha256, the places that held no file and the names
    ``__has_include`` found; not where or when it was made (times, inodes), so two machines
    whose compiles read the same contents name them alike. Anything that is no manifest of
    this version is named by all of it."""
    if isinstance(data, dict) and data.get("version") == MANIFEST_VERSION:
        try:
            data = [data["version"], bool(data.get("complete")), data["folders"],
                    [[i, n, s, h] for i, n, s, _m, _c, _ino, h in data["files"]],
                    [[d, places] for d, _m, _ino, places in data["absent"]],
                    [[d] for d, _m, _ino in data.get("watched", ())], data["present"]]
        except (KeyError, TypeError, ValueError):
            pass
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _headers(data: object) -> dict[tuple[str, str], object]:
    """A stored manifest's headers: ``(root, path)`` -> sha256 (see the module for roots)."""
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        raise ValueError("not a header manifest of this version")
    folders = data["folders"]
    return {(folders[i][0], os.path.join(folders[i][1], name)): row[-1]
            for i, name, *row in data["files"]}


def read_otherwise(recorded: object, made: object, search: SearchPath) -> str | None:
    """Where a compile whose manifest is ``made`` read other header contents than the one
    ``recorded`` lists (each header compared by its sha256, found by the folder it was read
    from), in words naming the header as ``search`` spells it; None: the same headers, each
    of the same content. Malformed or of another version: said so, never the same."""
    try:
        before, after = _headers(recorded), _headers(made)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        return f"the header manifest cannot be compared ({exc})"

    def shown(place: tuple[str, str]) -> str:
        root, path = place
        folder = search.local(root, "")
        return os.path.join(folder, path) if folder is not None else f"{root}/{path}"

    for place, digest in before.items():
        if place not in after:
            return f"the header {shown(place)} was read by this module's compile and not now"
        if after[place] != digest or digest is None:
            return f"the header {shown(place)} changed since this module was built"
    for place in after.keys() - before.keys():
        return (f"the header {shown(place)} is read now and was not by this module's "
                "compile (a header put where the search looks first?)")
    return None


def own_headers(data: object, limit: int = 32) -> tuple[tuple[str, str], ...] | None:
    """The headers a stored manifest names outside the toolkit's folders (the working folder,
    ``-I`` folders, absolute paths), each by its path (one in the working folder from there,
    ``inc/scale.h``) with its sha256; None where
    there are more than ``limit`` or ``data`` is no manifest of this version. What a later
    compile of another source compares, to say that a header changed too."""
    try:
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            return None
        folders = data["folders"]
        own: list[tuple[str, str]] = []
        for i, name, *row in data["files"]:
            root, path = folders[i]
            if root in (_ABSOLUTE, _WORKING):
                if len(own) == limit:
                    return None
                own.append((os.path.join(path, name), str(row[-1])))
        return tuple(own)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def reads_working_folder(data: object) -> bool:
    """Whether a stored manifest names anything in the working folder (a header the cell's
    quoted include found there, or a place there that held no file): a compile in another
    folder may read other files."""
    return isinstance(data, dict) and any(
        type(f) is list and f[:1] == [_WORKING] for f in data.get("folders", ()))


class _Elsewhere(Exception):
    """A stored folder whose root this build lacks (the root is the message)."""


def _stat_list(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _digest(path: str, size: object) -> str | None:
    """The sha256 of a regular file of ``size`` bytes (None: it is not one, or unreadable).

    A stored manifest may name any path: it is opened without blocking (a FIFO), must be a
    regular file (not /dev/zero, a folder), of the size recorded (a file of another size is
    another file: not read), and is hashed in pieces, never more than ``size`` bytes.
    """
    if type(size) is not int or size < 0:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not S_ISREG(st.st_mode) or st.st_size != size:
            return None
        h, left = hashlib.sha256(), size
        while left > 0:
            piece = os.read(fd, min(left, 1 << 20))
            if not piece:
                return None  # cut while read
            h.update(piece)
            left -= len(piece)
        return None if os.read(fd, 1) else h.hexdigest()  # grown while read
    except OSError:
        return None
    finally:
        os.close(fd)
