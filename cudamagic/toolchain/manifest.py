"""The dependency manifest: the headers one compile read and the places that must stay empty,
as stored with an entry, and its check on a hit. :mod:`cudamagic.toolchain.deps` makes one from
NVRTC's trace (its module text says what is recorded and why). Pure apart from the file system.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from ..miss import Miss, MissKind

__all__ = ["SearchPath", "HeaderState", "AbsentGroup", "Manifest", "MANIFEST_VERSION"]

MANIFEST_VERSION = 2


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
        modification and change times and inode instead of content.
    """

    cwd: str
    include_dirs: tuple[str, ...]
    versioned: tuple[str, ...] = ()

    def absolute(self, path: str) -> str:
        """A path as the compile saw it, made absolute (not normalized: ``..`` after a
        symbolic link means what the file system says)."""
        return path if os.path.isabs(path) else os.path.join(self.cwd, path)

    def is_versioned(self, path: str) -> bool:
        norm = os.path.normpath(path)
        return any(norm.startswith(os.path.normpath(d) + os.sep) for d in self.versioned)


@dataclass(frozen=True)
class HeaderState:
    """One file the compile read, as it was then.

    A user header is checked by its content (``sha256``) on every hit: a file swapped for one
    of the same size and time (``cp -p``, a switched link, two writes within one clock tick)
    is still caught. A versioned package's header (``sha256`` None) is checked by its size,
    modification and change times and inode, which an in-place edit, a copy over it or a
    switched link changes.
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
    folder (a file added or removed) counts as a change, without looking closer.
    """

    folder: str
    mtime_ns: int
    places: tuple[str, ...]

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

    ``files`` rows are ``[folder, name, size, mtime_ns, ctime_ns, inode, sha256 or None]``,
    ``absent`` rows ``[folder path, mtime_ns, [[folder, name], ...]]``, ``watched`` rows
    ``[folder path, mtime_ns]``, ``present`` rows ``[folder, name]``. Rows stay lists: a hit
    reads hundreds of them, and JSON objects per row would cost more than the check. Only this
    module reads or writes them; the format changes with :data:`MANIFEST_VERSION`.
    """

    version: int
    complete: bool
    folders: list[str]
    files: list[list[Any]]
    watched: list[list[Any]]
    absent: list[list[Any]]
    present: list[list[Any]]


class Manifest:
    """The files one compile read, and the places that must stay empty for a hit.

    Kept as the compact JSON object stored in the entry (paths as a folder index and a name)
    and checked straight from it: a CCCL cell's manifest lists hundreds of headers and more
    places, and building an object for each would cost more on every hit than the check.

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
                 watched: Sequence[tuple[str, int]] = (), racy: str | None = None) -> None:
        # why what the compile read is not certain (a header changed during it...): then the
        # entry must not be stored
        self.racy = racy
        self._malformed = False
        folders: dict[str, int] = {}

        def split(path: str) -> list:
            head, tail = os.path.split(path)
            return [folders.setdefault(head, len(folders)), tail]

        self._data: StoredManifest = {
            "version": MANIFEST_VERSION, "complete": bool(complete),
            "files": [[*split(f.path), f.size, f.mtime_ns, f.ctime_ns, f.inode, f.sha256]
                      for f in files],
            "watched": [[d, m] for d, m in watched],
            "absent": [[g.folder, g.mtime_ns, [split(p) for p in g.places]] for g in absent],
            "present": [split(p) for p in present]}
        self._data["folders"] = list(folders)

    @classmethod
    def from_json(cls, data: object) -> "Manifest":
        """A stored manifest, as it is (a malformed one fails its check, never serves).

        :raises ValueError: not a manifest of this version.
        """
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION or not all(
                isinstance(data.get(k), list) for k in ("folders", "files", "absent", "present")):
            raise ValueError("the entry's header manifest is missing or of another version")
        # every path the check hands the file system must be text: an integer would be taken
        # as a file descriptor; the rest is checked as it is read (a join of a non-text fails)
        manifest = cls.__new__(cls)
        manifest._data = cast(StoredManifest, data)
        manifest.racy = None
        manifest._malformed = not (
            all(type(f) is str for f in data["folders"])
            and isinstance(data.get("watched", []), list)
            and all(type(g) is list and g and type(g[0]) is str
                    for k in ("absent", "watched") for g in data.get(k, ())))
        return manifest

    def to_json(self) -> StoredManifest:
        """The manifest as the compact JSON object stored in the entry record."""
        return self._data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Manifest) and other._data == self._data

    @property
    def complete(self) -> bool:
        return bool(self._data.get("complete"))

    @property
    def files(self) -> tuple[HeaderState, ...]:
        folders = self._data["folders"]
        return tuple(HeaderState(os.path.join(folders[i], n), s, m, h, c, ino)
                     for i, n, s, m, c, ino, h in self._data["files"])

    @property
    def absent(self) -> tuple[AbsentGroup, ...]:
        folders = self._data["folders"]
        return tuple(AbsentGroup(d, m, tuple(os.path.join(folders[i], n) for i, n in ps))
                     for d, m, ps in self._data["absent"])

    @property
    def present(self) -> tuple[str, ...]:
        folders = self._data["folders"]
        return tuple(os.path.join(folders[i], n) for i, n in self._data["present"])

    def check(self) -> Miss | None:
        """Why the entry no longer matches the files (None when it does).

        Every file is stat'ed; user headers whose size or time changed are hashed (a ``touch``
        is not a change).
        """
        if self._malformed:
            return Miss(MissKind.DAMAGED, "the entry's header manifest is malformed (a folder "
                        "that is not text)")
        try:
            changed = self._check()
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            return Miss(MissKind.DAMAGED, f"the entry's header manifest is malformed ({exc})")
        return None if changed is None else Miss(MissKind.HEADER, changed)

    def _check(self) -> str | None:
        return self._check_files() or self._check_folders() or self._check_present()

    def _check_files(self) -> str | None:
        stat, join, data = os.stat, os.path.join, self._data
        folders = data["folders"]
        for i, name, size, mtime_ns, ctime_ns, inode, digest in data["files"]:
            path = join(folders[i], name)
            try:
                st = stat(path)
            except OSError:
                return f"the header {path} was read by the last compile and is gone"
            if digest is not None:
                if _digest(path) != digest:
                    return f"the header {path} changed since the last compile"
            elif (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) != (
                    size, mtime_ns, ctime_ns, inode):
                return f"the header {path} changed since the last compile"
        return None

    def _check_folders(self) -> str | None:
        stat, join, data = os.stat, os.path.join, self._data
        folders = data["folders"]
        for folder, mtime_ns in data.get("watched", []):
            try:
                if stat(folder).st_mtime_ns == mtime_ns:
                    continue
            except OSError:
                pass
            return (f"the folder {folder} changed since the last compile, and a "
                    "__has_include there tested a name given by a macro")
        for folder, mtime_ns, places in data["absent"]:
            try:
                if stat(folder).st_mtime_ns == mtime_ns:
                    continue
            except OSError:
                pass
            if not places:
                return (f"the package folder {folder} changed since the last compile "
                        "(a header may have been added there)")
            group = AbsentGroup(folder, mtime_ns,
                                tuple(join(folders[i], n) for i, n in places))
            found = group.appeared()
            if found:
                return (f"{found} now exists; the last compile found no file there (a "
                        "header there shadows the one it read, or changes a __has_include)")
        return None

    def _check_present(self) -> str | None:
        join, data = os.path.join, self._data
        folders = data["folders"]
        for i, name in data["present"]:
            if not os.path.isfile(join(folders[i], name)):
                return (f"{join(folders[i], name)}, which __has_include found in the last "
                        "compile, is gone")
        return None


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
