"""NVRTC's precompiled headers, kept in the cache folder's own ``pch`` folder.

A cell's leading ``#include`` lines are the same parse at every edit; NVRTC (12.8 and later)
can write that parse to a file (``-create-pch=FILE``) and start a later compile from it
(``-use-pch=FILE``). The files are NVRTC's; which file a compile gets, whether it still fits
and how many are kept are this module's, because NVRTC's own check does not cover them: a PCH
made before a header was edited is used as it is (its parse has the old text), and a PCH cut
short kills the process that maps it (SIGBUS).

A PCH serves only the process that made it: NVRTC 13.5 refuses one made by another process
(or before the heap was resized) as "incompatible ... heap allocation address" (#20282). So a
header set (``SET``: a sha256 of the cell's leading preprocessor lines, :func:`header_prefix`,
the NVRTC options, NVRTC's identity, the toolkit's fingerprint and the working folder) has one
PCH per process, ``KEY.pch`` (``KEY``: ``SET`` and the process's pid and start time), with its
record ``KEY.json``: the process and heap it was made with, the header manifest of the
compile that made it (:mod:`cudamagic.toolchain.compile.manifest`, checked like a cache entry's before
each use), the headers it read (a compile that starts from the PCH opens none of them, so its
entry's manifest takes them from here), the file's size, inode and modification time as
published, and the seconds the making compile took. A file that is not a regular file of that
size, inode and time, a record that does not parse or names another process or heap, a
manifest that no longer holds: the PCH is removed and made again by the compile, never used.
(A file rewritten in place with its modification time put back is not seen: only reading all
of its hundreds of MB each time would.)

A compile uses its PCH through a hard link of its own (``tmp/``): an eviction or replacement
of ``KEY.pch`` during the compile changes nothing it reads. A PCH is made under a private name
in ``tmp/`` and published by rename under the folder's lock (``.lock``), its record after it:
two threads making one PCH at once each publish a whole file, the later one replacing the
earlier, never a mixture. ``KEY.hits`` counts its uses.

NVRTC's heap for making a PCH is one per process (``nvrtcSetPCHHeapSize``, 256 MiB by
default: a CUB cell's needs 335 MB). A make that finds it too small gives a good CUBIN and no
PCH, and the size NVRTC asked for (``nvrtcGetPCHHeapSizeRequired``) is kept in ``SET.heap``:
the next make in this process or another first raises the heap to the largest size the folder
keeps (:func:`heap_for`), once, since a resize makes the process's earlier PCHs useless. So
the short heap is paid once per header set.

Bounded: the folder keeps at most its size limit (``$CUDAMAGIC_PCH_SIZE_LIMIT``, default
:data:`DEFAULT_LIMIT`, read by :func:`cudamagic.store.limits.pch_size_limit`): the PCHs of
processes that ended go first, then the least recently used; a PCH is made only where the disk
keeps :data:`FREE_RESERVE` free after it and the process may write a file that large.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from stat import S_ISREG
from typing import Any

from ...core.files import FileRefused, read_regular
from ...core.process import InChild, InTest, cached, held
from ...core.units import size_text
from .manifest import Manifest, SearchPath

__all__ = ["PchKind", "PchOutcome", "PchPlan", "PchFiles", "PCH_ENV", "LIMIT_ENV",
           "DEFAULT_LIMIT", "FREE_RESERVE", "SUPPRESSED", "supported", "switched_off",
           "pch_key", "plan", "settle", "files_of", "clear", "heap_for",
           "discard", "say_once", "made_size", "hold", "release", "held_fds"]

PCH_ENV = "CUDAMAGIC_PCH"
LIMIT_ENV = "CUDAMAGIC_PCH_SIZE_LIMIT"
#: What the folder keeps by default: six PCHs of a CUB cell (337 MB each)
DEFAULT_LIMIT = 2 << 30
#: Free disk a PCH must leave after it is written
FREE_RESERVE = 1 << 30
#: What a PCH is taken to need before one of its header set was made (NVRTC's default heap)
DEFAULT_HEAP = 256 << 20
#: NVRTC's own words about PCH files, which are this module's to act on, never the cell's: an
#: option set or directive prefix the PCH was not made with (629, 630), a file of another
#: NVRTC or none (626), one cut short (2226), a heap too small to make one (639), one made by
#: another process or before the heap was resized (20282), a #line that keeps one from being
#: made past it (20283: the cell's own; what became of the PCH is read from NVRTC, not its log)
SUPPRESSED = "-diag-suppress=626,629,630,639,2226,20282,20283"
FORMAT = 1
_RECORD_MAX = 64 << 20  # a CCCL cell's record is some hundred KB


class PchKind(str, Enum):
    """What became of a compile's PCH."""

    #: the compile started from the PCH
    USED = "used"
    #: the compile made the PCH
    MADE = "made"
    #: NVRTC did not take the PCH it was given (another NVRTC's file, options that differ)
    REFUSED = "refused"
    #: NVRTC's heap was too small to make it (the size it needs is kept)
    HEAP = "heap"
    #: NVRTC could not write it
    FAILED = "failed"


@dataclass(frozen=True)
class PchOutcome:
    """What NVRTC said of the PCH of one compile; ``required``: the heap it asked for."""

    kind: PchKind
    required: int = 0


@dataclass(frozen=True)
class PchPlan:
    """The PCH one compile is given: to make (``create``) or to use, through ``path``.

    Attributes
    ----------
    folder, key : str
        ``key``: this process's PCH of the header set (:func:`_own`).
    create : bool
    path : str
        The private file NVRTC writes (to make) or reads (a hard link of ``KEY.pch``).
    headers : tuple of (str, str or None, float)
        The headers the PCH holds, as :func:`~cudamagic.toolchain.compile.deps.trace_headers` gives
        them (to use): the compile's manifest lists them though NVRTC does not open them.
    made_seconds : float
        The compile that made the PCH (to use): what the headers cost without it.
    heap : int
        NVRTC's PCH heap to have before the compile (to make): what it asked for when it last
        tried, 0 where it never found its heap too small.
    """

    folder: str
    key: str
    create: bool
    path: str
    headers: tuple[tuple[str, str | None, float], ...] = ()
    made_seconds: float = 0.0
    heap: int = 0
    #: the header set's name (:func:`pch_key`), which the heap NVRTC asks for is kept under
    set_key: str = ""
    #: the process whose NVRTC compiles and its heap's generation (:func:`owner`,
    #: :func:`generation`): a compile server's, or None for this process
    owner: tuple[str, int] | None = None
    #: the owner name (``owners/NAME``) the PCH's record is kept alive by: a compile server's
    #: (:func:`hold`, asked of it), which outlives the notebook that asked; "" for this
    #: process's own
    holder: str = ""
    #: the cell's directives the header set is named by (:func:`header_prefix`): a compile
    #: that uses the PCH and opens no file past them needs no header listing
    prefix: str = ""

    def options(self) -> tuple[str, str]:
        """The NVRTC options that make or use it."""
        return (f"-create-pch={self.path}" if self.create else f"-use-pch={self.path}",
                SUPPRESSED)


@dataclass(frozen=True)
class PchFiles:
    """What a PCH folder holds, for ``%cuda_cache``: files, bytes, uses, the last use (epoch
    seconds, 0 where none)."""

    folder: str
    count: int
    size: int
    hits: int
    last_use: float
    limit: int
    #: of ``count``: private files left by processes that ended during a compile
    left: int = 0


# said once per process: a folder where no PCH can be made (read-only, full, too small a limit)
_said: set[str] = held(__name__, "_said", set(), child=InChild.KEPT, test=InTest.CLEARED)
# the heap this process set (NVRTC's is process-wide and never lowered here), and how many
# times it was resized: a PCH made before a resize no longer serves (NVRTC 13.5: #20282)
_heap: list[int] = held(__name__, "_heap", [0, 0], child=InChild.KEPT, test=InTest.KEPT,
                        clear=lambda: None)


def _started(pid: int) -> str | None:
    """When process ``pid`` started (``/proc/PID/stat``'s field 22, in clock ticks), which
    with the pid names a process and no later one; None where it is gone (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _process() -> str:
    """This process, as a PCH's record names the process that made it: NVRTC takes a PCH
    only in the process (the loaded NVRTC, its heap at the same address) that made it."""
    return f"{os.getpid()}:{_started(os.getpid()) or ''}"


def owner() -> str:
    """This process as a PCH's record names its maker (a compile server asks it of itself)."""
    return _process()


def generation() -> int:
    """How often this process resized NVRTC's PCH heap (its PCHs made before no longer
    serve)."""
    return _heap[1]


def _maker(given: tuple[str, int] | None) -> tuple[str, int]:
    return given if given is not None else (_process(), _heap[1])


def _parents_let_go() -> None:
    """In a forked child: the parent's owner locks let go of (their descriptors closed, never
    unlocked: the lock is the open file's, and the parent keeps it). A child that kept them
    (a multiprocessing worker outliving the notebook) kept the parent's PCHs alive, unusable
    by anyone, and first in no eviction."""
    for mine, (_, fd) in list(_owners.items()):
        if mine[0] != os.getpid():
            del _owners[mine]
            try:
                os.close(fd)
            except OSError:
                pass


# this process's owner name and the descriptor holding its lock (``owners/NAME`` in the
# folder), one per folder; a forked child makes its own (its pid is another) and closes its
# parent's
_owners: dict[tuple[int, str], tuple[str, int]] = held(
    __name__, "_owners", {}, child=InChild.RENEWED, test=InTest.KEPT, clear=lambda: None,
    renew=_parents_let_go)


def _owner(folder: str) -> str:
    """This process's name in ``folder``: a file ``owners/NAME`` it holds an exclusive
    ``flock`` on for its whole life. Liveness is that lock, never a pid: a process in another
    pid namespace sharing the folder sees none of this one's pids, but the lock is the file
    system's (the idea of :mod:`cudamagic.toolchain.compile.tracefolder`)."""
    mine = (os.getpid(), folder)
    if mine in _owners:
        return _owners[mine][0]
    owners = os.path.join(folder, "owners")
    os.makedirs(owners, mode=0o700, exist_ok=True)
    name = secrets.token_hex(8)
    fd = os.open(os.path.join(owners, name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                 | getattr(os, "O_NOFOLLOW", 0), 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _owners[mine] = (name, fd)
    return name


def _alive(folder: str, owner: object) -> bool:
    """Whether the process named ``owner`` still holds its lock (a PCH or private file of a
    process that ended serves no one); this process's own names are alive."""
    if not isinstance(owner, str) or not re.fullmatch(r"[0-9a-f]{16}", owner):
        return False
    if any(name == owner for name, _ in _owners.values()):
        return True
    try:
        fd = os.open(os.path.join(folder, "owners", owner), os.O_RDONLY | os.O_CLOEXEC
                     | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False  # no such owner: its file was reaped
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held: its process is alive, in whatever pid namespace
    finally:
        os.close(fd)
    return False


def hold(folder: str) -> str:
    """This process's owner name in ``folder``, held for its life (a compile server's: the
    PCHs its children make are recorded under it, so they outlive the notebook that asked);
    the PCHs and private files of owners that ended are removed first."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    name = _owner(folder)
    with _locked(folder):
        _evict(folder, 1 << 62)  # no size bound: only the ended owners' files go
    return name


def release(folder: str) -> int:
    """At this process's end: its PCHs in ``folder`` removed (no later process can use them)
    and its owner name given up; how many PCHs went."""
    mine = (os.getpid(), folder)
    if mine not in _owners:
        return 0
    name, fd = _owners[mine]
    with _locked(folder):
        gone = [e[2] for e in _entries(folder)
                if (_read_json(_paths(folder, e[2])[1]) or {}).get("owner") == name]
        for key in gone:
            _remove(folder, key)
        del _owners[mine]
        try:
            os.unlink(os.path.join(folder, "owners", name))
        except OSError:
            pass
        os.close(fd)
    return len(gone)


def held_fds() -> list[int]:
    """The descriptors of the owner locks this process holds (a child that must not keep
    them closes them: a lock kept by a stray grandchild would keep dead PCHs alive)."""
    return [fd for _, fd in _owners.values()]


def _reap_owners(folder: str) -> None:
    """Remove the owner files of processes that ended (under the folder's lock)."""
    owners = os.path.join(folder, "owners")
    for name in os.listdir(owners) if os.path.isdir(owners) else ():
        if not _alive(folder, name):
            try:
                os.unlink(os.path.join(owners, name))
            except OSError:
                pass


@cached(1)
def supported() -> bool:
    """Whether the NVRTC here makes and reads precompiled headers (12.8 and later)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return False
    if not hasattr(nvrtc, "nvrtcGetPCHCreateStatus"):
        return False
    status, major, minor = nvrtc.nvrtcVersion()
    return int(status) == 0 and (major, minor) >= (12, 8)


def switched_off() -> bool:
    """``$CUDAMAGIC_PCH`` set to 0 (or off, false, no) turns PCHs off for every build."""
    return os.environ.get(PCH_ENV, "").strip().lower() in ("0", "off", "false", "no")


def pch_key(prefix: str, options: Sequence[str], nvrtc: str, toolkit: str, cwd: str) -> str:
    """The name of a header set: every input that changes what NVRTC puts in its PCH (the
    heap it needs is kept under it, ``KEY.heap``; each process's PCH has a name of its own,
    :func:`_own`)."""
    return _hashed(f"pch{FORMAT}", prefix, *options, "\0", nvrtc, toolkit, cwd)


def _own(key: str, maker: tuple[str, int] | None = None) -> str:
    """The name of this process's PCH of header set ``key`` (no other process can use it);
    ``maker``: the compile server's process where one compiles."""
    return _hashed(key, _maker(maker)[0])


def _hashed(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:40]


@contextmanager
def _locked(folder: str) -> Iterator[None]:
    fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                 | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def say_once(why: str, notes: list[str]) -> None:
    """``why`` in ``notes`` where this process has not said it yet: told apart by its words
    up to the first digit (a free-space count changes between two builds)."""
    said = re.split(r"\d", why, maxsplit=1)[0]
    if said not in _said:
        _said.add(said)
        notes.append(why)


def _read_json(path: str) -> dict | None:
    try:
        data = json.loads(read_regular(path, max_size=_RECORD_MAX))
    except (OSError, ValueError, FileRefused):
        return None
    return data if isinstance(data, dict) else None


def _stamp(st: os.stat_result) -> list[int]:
    # not the change time: each use's hard link changes it
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns]


def _paths(folder: str, key: str) -> tuple[str, str, str, str]:
    base = os.path.join(folder, key)
    return base + ".pch", base + ".json", base + ".hits", base + ".heap"


def heap_for(folder: str, key: str) -> int:
    """The heap NVRTC asked for when it last tried to make this PCH (0: never too small)."""
    try:
        return max(0, int(read_regular(_paths(folder, key)[3], max_size=64).strip() or 0))
    except (OSError, ValueError, FileRefused):
        return 0


def _largest_heap(folder: str) -> int:
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".heap")]
    except OSError:
        return 0
    return max((heap_for(folder, n[:-5]) for n in names), default=0)


def _valid(folder: str, key: str, search: SearchPath,
           maker: tuple[str, int] | None = None) -> dict | None:
    """The PCH's record where its file is the one it describes and its headers are unchanged;
    None otherwise (nothing there, or something the caller removes)."""
    pch, record_path, _, _ = _paths(folder, key)
    record = _read_json(record_path)
    if record is None or record.get("format") != FORMAT or record.get("key") != key:
        return None
    if [record.get("process"), record.get("heap")] != list(_maker(maker)):
        return None  # another process's, or made before NVRTC's heap was resized
    try:
        st = os.lstat(pch)
    except OSError:
        return None
    if not S_ISREG(st.st_mode) or _stamp(st) != record.get("stamp"):
        return None  # a folder, FIFO or link in its place, a file cut short or rewritten
    try:
        manifest = Manifest.from_json(record.get("manifest"), search)
    except (ValueError, TypeError, KeyError):
        return None
    if manifest.check() is not None:
        return None  # a header edited, added or removed since it was made
    return record


def _remove(folder: str, key: str) -> None:
    for path in _paths(folder, key)[:3]:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def _private(folder: str, key: str) -> str:
    """A private file of this process in ``tmp/``, named by its owner (:func:`_owner`): one
    whose owner's lock is free was left by a process that died during a compile."""
    return os.path.join(folder, "tmp", f"{_owner(folder)}.{key}.{secrets.token_hex(4)}.pch")


def _over_limit(size: int, limit: int) -> str:
    return (f"no precompiled header: this header set's ({size_text(size)}) is more than the "
            f"folder's size limit ({size_text(limit)}, ${LIMIT_ENV}); it is not kept")


def made_size(folder: str, key: str) -> int:
    """The size of this header set's PCH where one was made over the limit (0: none was)."""
    try:
        path = _paths(folder, key)[3][:-5] + ".size"
        return max(0, int(read_regular(path, max_size=64).strip() or 0))
    except (OSError, ValueError, FileRefused):
        return 0


def _room(folder: str, known: int, limit: int, notes: list[str]) -> bool:
    """Whether a PCH may be written here (said once where not): ``known``, the heap NVRTC said
    it needs (0: not known), must fit the limit; the disk and the process's file size limit
    must take it, or :data:`DEFAULT_HEAP` where it is not known."""
    need = max(known, DEFAULT_HEAP)
    if known > limit:
        say_once(_over_limit(known, limit), notes)
        return False
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and soft < need + (64 << 20):
            say_once("no precompiled header: this process may not write a file that large "
                      "(ulimit -f)", notes)
            return False
    except (ImportError, ValueError, OSError):  # pragma: no cover - not Linux
        pass
    free = shutil.disk_usage(folder).free
    if free < need + FREE_RESERVE:
        say_once(f"no precompiled header: the disk of {folder} has {free >> 20} MB free, and "
                  f"a PCH ({need >> 20} MB) must leave {FREE_RESERVE >> 20} MB", notes)
        return False
    return True


def plan(folder: str, key: str, search: SearchPath, notes: list[str],
         limit: int, maker: tuple[str, int] | None = None, holder: str = ""
         ) -> PchPlan | None:
    """The PCH a compile of this header set gets: its valid file to use (linked privately),
    else one to make; None where none can be (said once in ``notes``). ``limit``: the
    folder's size limit (:func:`cudamagic.store.limits.pch_size_limit`); ``maker``: the
    compile server's process and heap generation (:func:`owner`, :func:`generation`, asked
    of it) where the compile runs there, None: in this process; ``holder``: the owner name
    a made PCH's record gets (:func:`hold`, the server's), "" for this process's."""
    tmp = os.path.join(folder, "tmp")
    set_key, key = key, _own(key, maker)
    try:
        for made in (folder, tmp):  # each 700: makedirs gives its mode to the last one only
            os.makedirs(made, mode=0o700, exist_ok=True)
            st = os.lstat(made)  # one an older version left open to its group: closed
            if st.st_mode & 0o077 and st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode):
                os.chmod(made, 0o700)
        with _locked(folder):
            record = _valid(folder, key, search, maker)
            if record is None:
                _remove(folder, key)
            else:
                link = _private(folder, key)
                os.link(_paths(folder, key)[0], link)
                headers = tuple((str(p), i if isinstance(i, str) else None, 0.0)
                                for p, i, *_ in record.get("headers", []))
                return PchPlan(folder, key, False, link, headers,
                               float(record.get("seconds", 0.0)), owner=maker)
        heap = heap_for(folder, set_key)
        if not _room(folder, max(heap, made_size(folder, set_key)), limit, notes):
            return None
        # raised once to what the folder's largest header set asked for: a resize makes this
        # process's earlier PCHs useless
        heap = max(heap, _largest_heap(folder))
        path = _private(folder, key)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError as exc:
        say_once(f"no precompiled header: {folder} cannot be written "
                  f"({os.strerror(exc.errno) if exc.errno else exc})", notes)
        return None
    return PchPlan(folder, key, True, path, heap=heap, set_key=set_key, owner=maker,
                   holder=holder)


def settle(p: PchPlan, outcome: PchOutcome | None, headers: Sequence[tuple], manifest: Any,
           seconds: float, notes: list[str], limit: int) -> PchOutcome | None:
    """After the compile: publish a PCH it made (with its record), count a use, remove a PCH
    NVRTC refused, keep the heap NVRTC asked for; the private file goes in every case. What
    stands of ``outcome``: None where a PCH made was not kept (over the limit, not written)."""
    try:
        return outcome if _settle(p, outcome, headers, manifest, seconds, notes, limit) \
            else None
    except OSError as exc:
        say_once(f"no precompiled header: {p.folder} cannot be written "
                  f"({os.strerror(exc.errno) if exc.errno else exc})", notes)
        return None if outcome is None or outcome.kind is PchKind.MADE else outcome
    finally:
        discard(p)


def _settle(p: PchPlan, outcome: PchOutcome | None, headers: Sequence[tuple], manifest: Any,
            seconds: float, notes: list[str], limit: int) -> bool:
    """:func:`settle`'s work: False where a PCH made was not kept."""
    pch, record_path, hits_path, _ = _paths(p.folder, p.key)
    heap_path = _paths(p.folder, p.set_key or p.key)[3]
    if outcome is None:
        return True
    kind = outcome.kind
    if kind is PchKind.HEAP:
        _write(heap_path, str(outcome.required + (1 << 20)).encode())
        return True
    if kind is PchKind.FAILED:
        say_once(f"no precompiled header: NVRTC could not write one in {p.folder}", notes)
        return True
    if kind is PchKind.REFUSED:
        with _locked(p.folder):
            if _same_file(pch, p.path):
                _remove(p.folder, p.key)
        return True
    if kind is PchKind.USED:
        with _locked(p.folder):
            _write(hits_path, json.dumps([_hits(hits_path) + 1, time.time()]).encode())
        return True
    if kind is not PchKind.MADE:
        return True
    size = os.path.getsize(p.path)
    if size == 0:
        return False
    if size > limit:  # never kept: the next compile of this header set makes none
        _write(_paths(p.folder, p.set_key or p.key)[3][:-5] + ".size", str(size).encode())
        say_once(_over_limit(size, limit), notes)
        with _locked(p.folder):  # the folder itself kept to the limit (a lower one than
            _evict(p.folder, limit)  # its PCHs were made under, or the dead's left over)
        return False
    record = {"format": FORMAT, "key": p.key, "seconds": seconds, "made": time.time(),
              "process": _maker(p.owner)[0], "owner": p.holder or _owner(p.folder),
              "heap": _maker(p.owner)[1],
              "manifest": manifest, "headers": [[h[0], h[1]] for h in headers]}
    before_publish()
    with _locked(p.folder):
        os.rename(p.path, pch)
        os.chmod(pch, 0o600)
        record["stamp"] = _stamp(os.lstat(pch))
        _write(record_path, json.dumps(record).encode())
        _write(hits_path, json.dumps([0, time.time()]).encode())
        _evict(p.folder, limit, keep=p.key)
    return True


def discard(p: PchPlan) -> None:
    """After a compile that failed: its private file goes, the PCH stays as it was."""
    try:
        os.unlink(p.path)
    except OSError:
        pass


def before_publish() -> None:
    """Called between a made PCH and its publication (tests hold two processes here)."""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _hits(path: str) -> int:
    data = _read_json_list(path)
    return int(data[0]) if data else 0


def _read_json_list(path: str) -> list | None:
    try:
        data = json.loads(read_regular(path, max_size=4096))
    except (OSError, ValueError, FileRefused):
        return None
    if isinstance(data, list) and len(data) == 2 and all(isinstance(x, (int, float))
                                                          for x in data):
        return data
    return None


def _write(path: str, data: bytes) -> None:
    """``data`` as ``path``, whole or not at all (a private file renamed over it)."""
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _entries(folder: str) -> list[tuple[float, int, str, int]]:
    """``(last use, size, key, hits)`` of each published PCH."""
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if not name.endswith(".pch"):
            continue
        key = name[:-4]
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        used = _read_json_list(_paths(folder, key)[2]) or [0, st.st_mtime]
        out.append((float(used[1]), st.st_size if S_ISREG(st.st_mode) else 0, key,
                    int(used[0])))
    return out


def _evict(folder: str, limit: int, keep: str = "") -> None:
    """Remove the PCHs of processes that ended, then the least recently used until the folder
    holds at most ``limit`` bytes, and the private files of processes that ended (under the
    lock)."""
    entries = sorted(_entries(folder))
    for entry in list(entries):  # a PCH of a process that ended serves no one
        record = _read_json(_paths(folder, entry[2])[1])
        if entry[2] != keep and not _alive(folder, (record or {}).get("owner")):
            _remove(folder, entry[2])
            entries.remove(entry)
    total = sum(size for _, size, _, _ in entries) + _left(folder, remove=True)[1]
    for _, size, key, _ in entries:
        if total <= limit:
            break
        if key != keep:
            _remove(folder, key)
            total -= size
    _reap_owners(folder)


def _left(folder: str, remove: bool) -> tuple[int, int]:
    """The private files in ``tmp/`` of processes that ended (killed during a compile): how
    many and their bytes, those of this process's own and live processes' links not counted
    (each is a published PCH's second name); ``remove``: they go."""
    tmp = os.path.join(folder, "tmp")
    count = size = 0
    for name in os.listdir(tmp) if os.path.isdir(tmp) else ():
        if _alive(folder, name.split(".", 1)[0]):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if remove:
                os.unlink(path)
        except OSError:
            continue
        count += 1
        size += st.st_size if S_ISREG(st.st_mode) and st.st_nlink == 1 else 0
    return count, size


def files_of(folder: str, limit: int) -> PchFiles:
    """What the folder holds (nothing where it does not exist), the private files left by
    processes that ended among its files and bytes."""
    entries = _entries(folder)
    left, left_size = _left(folder, remove=False)
    return PchFiles(folder, len(entries) + left, sum(e[1] for e in entries) + left_size,
                    sum(e[3] for e in entries), max((e[0] for e in entries), default=0.0),
                    limit, left)


def clear(folder: str) -> tuple[int, int]:
    """Remove every PCH of the folder and the private files of processes that ended (the
    kernels' entries stay); how many of each went."""
    if not os.path.isdir(folder):
        return 0, 0
    with _locked(folder):
        keys = [e[2] for e in _entries(folder)]
        for key in keys:
            _remove(folder, key)
        left, _ = _left(folder, remove=True)
        for name in os.listdir(folder):
            if name.endswith((".heap", ".size")):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
        _reap_owners(folder)
    return len(keys), left


def raise_heap(nvrtc, heap: int) -> None:
    """NVRTC's PCH heap at least ``heap`` bytes (never lowered: it is the process's)."""
    if heap <= _heap[0]:
        return
    status, current = nvrtc.nvrtcGetPCHHeapSize()
    if int(status) == 0 and current >= heap:
        _heap[0] = current
        return
    status, = nvrtc.nvrtcSetPCHHeapSize(heap)
    if int(status) == 0:
        _heap[0] = heap
        _heap[1] += 1  # this process's PCHs made before it no longer serve


_USING = re.compile(r'^"[^"\n]*": (using|creating) precompiled header file "[^"\n]*"\n?', re.M)


def read_outcome(nvrtc, prog, p: PchPlan, log: str) -> tuple[PchOutcome, str]:
    """What NVRTC did with ``p`` in the compiled program, and the log without its PCH lines."""
    used = any(m.group(1) == "using" for m in _USING.finditer(log))
    log = _USING.sub("", log)
    if not p.create:
        return PchOutcome(PchKind.USED if used else PchKind.REFUSED), log
    status, = nvrtc.nvrtcGetPCHCreateStatus(prog)
    if status == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return PchOutcome(PchKind.MADE), log
    if status == nvrtc.nvrtcResult.NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED:
        _, required = nvrtc.nvrtcGetPCHHeapSizeRequired(prog)
        return PchOutcome(PchKind.HEAP, int(required)), log
    return PchOutcome(PchKind.FAILED), log


#: NVRTC's words for a PCH file it could not open: the compile is done again without it
CANNOT_OPEN = "cannot open precompiled header file"
