"""The store's bad inputs and edges (issue 17 group 5, issue 18's must-show for the store):
stored size limits that are no size, diskcache objects with odd limits, cache folders named by
unknown users, a one-off limit, a delete racing a put, value files orphaned by kill -9, and
``--older-than`` by last use with every unit."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from pathlib import Path

import diskcache
import pytest

from cudamagic.errors import CacheArgumentError, CacheWarning, CudaMagicError
from cudamagic.store import DEFAULT_SIZE_LIMIT, EntryRecord, KernelCache, default_cache
from cudamagic.store import disk as disk_mod
from cudamagic.store.limits import MAX_SIZE

from .conftest import run_python


# each test sees its own warnings and default cache
pytestmark = pytest.mark.usefixtures("fresh_process")


def _record(size: int = 1000, **kw) -> EntryRecord:
    return EntryRecord(cubin=os.urandom(size), lowered=None, **kw)


def _stored_limit(folder: Path) -> object:
    con = sqlite3.connect(folder / "cache.db")
    try:
        ((value,),) = con.execute("SELECT value FROM Settings WHERE key = 'size_limit'")
        return value
    finally:
        con.close()


def _set_stored_limit(folder: Path, value: object) -> None:
    con = sqlite3.connect(folder / "cache.db")
    with con:
        con.execute("UPDATE Settings SET value = ? WHERE key = 'size_limit'", (value,))
    con.close()


def _opened_with_warnings(folder, **kw) -> tuple[KernelCache, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = KernelCache(folder, **kw)
    return cache, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


# --- a size limit stored in the database as something that is no size -----------------------

# (what the Settings row holds, the limit the cache then uses; None: it warns and repairs)
STORED = [
    (None, None), ("abc", None), ("1GB", None), ("", None), (b"\x00\x01", None),
    (b"", None), (1.5, None), (float("inf"), None), (-1, None), (-(2 ** 63), None),
    (0, None), (1000, None), (MAX_SIZE, MAX_SIZE), (256 << 20, 256 << 20),
]


@pytest.mark.parametrize("value, uses", STORED, ids=[repr(v)[:20] for v, _ in STORED])
def test_a_stored_limit_that_is_no_size_is_repaired_with_a_warning(tmp_path, value, uses):
    KernelCache(tmp_path).close()
    _set_stored_limit(tmp_path, value)
    cache, said = _opened_with_warnings(tmp_path)
    assert not cache.in_memory, cache.in_memory  # the folder goes on
    if uses is None:
        assert len(said) == 1 and "size limit stored in the cache folder" in said[0], said
        assert "%cuda_cache limit" in said[0]
        assert cache.size_limit == DEFAULT_SIZE_LIMIT == _stored_limit(tmp_path)  # repaired
    else:
        assert not said and cache.size_limit == uses == _stored_limit(tmp_path)
    cache.put("k", _record())
    assert cache.get("k")[0] is not None
    cache.close()
    again, said = _opened_with_warnings(tmp_path)
    assert not said  # the repair held: nothing to say the next time


# --- a diskcache given with a limit of its own ------------------------------------------------

# (diskcache's size_limit, the limit the cache uses, or the error's words)
DISKCACHE = [
    ("1GB", 1 << 30), ("512MB", 512 << 20), (None, DEFAULT_SIZE_LIMIT),
    (float("inf"), MAX_SIZE), (300 << 20, 300 << 20), (float(1 << 30), 1 << 30),
    ("lots", "is not a size"), (-5, "0 or more"), (2 ** 70, "more than the largest"),
    (float("nan"), "is not a size cudamagic can use"), (1.5e3, "leaves no room"),
    (2.5, "is not a size cudamagic can use"),
    (0, "leaves no room"), ([1], "is not a size cudamagic can use"),
]


@pytest.mark.parametrize("limit, expect", DISKCACHE, ids=[repr(v)[:20] for v, _ in DISKCACHE])
def test_a_diskcache_with_any_size_limit_is_used_or_refused_in_words(tmp_path, limit, expect):
    theirs = diskcache.Cache(str(tmp_path))
    theirs.size_limit = limit  # what diskcache.Cache(size_limit=...) leaves on the object
    theirs.close()
    if isinstance(expect, str):
        with pytest.raises(CacheArgumentError, match=expect) as info:
            KernelCache.wrap(theirs)
        assert isinstance(info.value, CudaMagicError)
        return
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        cache = KernelCache.wrap(theirs)
    assert cache.size_limit == expect and not cache.in_memory
    cache.put("k", _record())
    assert cache.get("k")[0] is not None


def test_a_diskcache_made_with_a_text_limit_is_served(tmp_path):
    # diskcache takes size_limit="1GB" and stores the text: its own first eviction would fail
    with diskcache.Cache(str(tmp_path), size_limit="1GB") as theirs:
        cache = KernelCache.wrap(theirs)
    assert cache.size_limit == 1 << 30 and _stored_limit(tmp_path) == 1 << 30
    cache.put("k", _record())
    assert cache.get("k")[0] is not None


# --- folders named by users that do not exist -------------------------------------------------

FOLDERS = [
    ("~nosuchuser/x", "no user 'nosuchuser' is known"),
    ("~nosuchuser", "no user 'nosuchuser' is known"),
    ("~no such user/cache", "no user 'no such user' is known"),
    ("cache\0x", "NUL byte"),
]


@pytest.mark.parametrize("name, words", FOLDERS, ids=[n.replace("\0", "NUL") for n, _ in FOLDERS])
def test_a_folder_that_names_no_folder_says_so(tmp_path, monkeypatch, name, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CacheArgumentError, match=words):
        KernelCache(name)
    with pytest.raises(CacheArgumentError, match=words):
        KernelCache.wrap(name)
    if "\0" not in name:  # the environment cannot hold a NUL
        monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", name)
        with pytest.raises(CacheArgumentError, match=r"\$CUDAMAGIC_CACHE_DIR=.*" + words):
            default_cache()
    assert os.listdir(tmp_path) == []  # nothing made in the current folder


def test_a_home_that_cannot_be_found_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAMAGIC_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(
        RuntimeError("Could not determine home directory."))))
    monkeypatch.setattr(Path, "expanduser", lambda self: (_ for _ in ()).throw(
        RuntimeError("Could not determine home directory.")))
    with pytest.raises(CacheArgumentError, match="home folder is unknown"):
        default_cache()


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    from cudamagic.store import default_cache_dir

    monkeypatch.delenv("CUDAMAGIC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_cache_dir() == Path.home() / ".cache" / "cudamagic"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "cudamagic"


# --- a one-off limit is this process's, not the folder's --------------------------------------

def test_a_one_off_limit_leaves_the_folders_limit_as_it_was(tmp_path, monkeypatch):
    kept = KernelCache(tmp_path)
    kept.set_size_limit("256MB")  # %cuda_cache limit: kept by the folder
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", "8MB")
    one_off = KernelCache(tmp_path)
    assert one_off.size_limit == 8 << 20  # this process evicts by it...
    for i in range(4):
        one_off.put(f"k{i}", _record(3 << 20))
    assert len(one_off) < 4  # ...and did
    monkeypatch.delenv("CUDAMAGIC_CACHE_SIZE_LIMIT")
    assert KernelCache(tmp_path).size_limit == 256 << 20 == _stored_limit(tmp_path)
    assert KernelCache(tmp_path, size_limit="16MB").size_limit == 16 << 20
    assert KernelCache(tmp_path).size_limit == 256 << 20  # the argument is one-off too


# --- an entry gone right after its put: deleted by another process, or too large --------------

RACES = [  # (entry bytes, limit, another process deletes it right after the put, warned)
    (1000, "64MB", True, False), (1000, "64MB", False, False),
    (3 << 20, "2MB", False, True), (3 << 20, "2MB", True, True),
    (40 << 20, "32MB", True, True),
]


@pytest.mark.parametrize("size, limit, deleted, warned", RACES)
def test_a_delete_racing_a_put_is_not_called_a_size_problem(tmp_path, monkeypatch, size, limit,
                                                            deleted, warned):
    cache = KernelCache(tmp_path, size_limit=limit)
    other = diskcache.Cache(str(tmp_path))  # another process's view of the folder
    real = disk_mod._Store.set

    def set_then_lose(self, key, value, *a, **kw):
        done = real(self, key, value, *a, **kw)
        if deleted:
            other.delete(key)
        return done

    monkeypatch.setattr(disk_mod._Store, "set", set_then_lose)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.put("k", _record(size))
    said = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert bool(said) == warned, said
    assert all("does not fit" in s for s in said)
    other.close()


# --- value files orphaned by kill -9 during a put ---------------------------------------------

KILLER = r"""
import json, os, random, signal, sys, time
from cudamagic.store import KernelCache, EntryRecord
folder = sys.argv[1]
KernelCache(folder, size_limit="64MB").close()
blob = os.urandom(4 << 20)
rng = random.Random(5)
for n in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        cache = KernelCache(folder, size_limit="64MB")
        i = 0
        while True:
            i += 1
            cache.put(f"{os.getpid()}-{i}", EntryRecord(cubin=blob, lowered=None))
    time.sleep(rng.uniform(0.02, 0.25))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print("done")
"""


def _orphans(folder: Path) -> tuple[set[str], set[str]]:
    con = sqlite3.connect(folder / "cache.db")
    known = {n for (n,) in con.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL")}
    con.close()
    files = {str(p.relative_to(folder)) for p in folder.glob("*/*/*.val")}
    return files - known, files & known


def _age(folder: Path, seconds: float) -> None:
    when = time.time() - seconds
    for p in folder.glob("*/*/*.val"):
        os.utime(p, (when, when))


def test_value_files_orphaned_by_kill_9_are_reclaimed(tmp_path):
    folder = tmp_path / "cache"
    orphans: set[str] = set()
    for _ in range(4):  # kills land where they land: go on until some put was cut in two
        run_python(KILLER.replace("sys.argv[1]", repr(str(folder)))
                   .replace("sys.argv[2]", "12"), timeout=240)
        orphans, _ = _orphans(folder)
        if orphans:
            break
    assert orphans, "no kill landed between a value file and its row"
    fresh = KernelCache(folder)  # young orphans: maybe a put in flight elsewhere; kept
    disk_mod.bookkeeper().flush()
    assert _orphans(folder)[0] == orphans
    disk_mod.bookkeeper()._reclaimed.clear()  # as in the next process
    _age(folder, disk_mod.ORPHAN_GRACE_S + 60)
    _, kept = _orphans(folder)
    reopened = KernelCache(folder)  # the next open reclaims them, in the background
    disk_mod.bookkeeper().flush()
    left, still = _orphans(folder)
    print(f"\nkill -9 during puts: {len(orphans)} orphaned value files, reclaimed on open")
    assert not left and still == kept  # every entry's own file stays
    for key in reopened.keys():
        assert reopened.get(key)[0] is not None
    fresh.close()


def test_eviction_reclaims_orphans_too(tmp_path):
    cache = KernelCache(tmp_path)
    cache.put("k", _record())
    disk_mod.bookkeeper().flush()
    stray = tmp_path / "ab" / "cd" / "0123456789abcdef.val"  # as a killed put leaves one
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"x" * 100)
    assert cache.evict_older_than(3600) == 0 and stray.exists()  # young: maybe in flight
    _age(tmp_path, disk_mod.ORPHAN_GRACE_S + 60)
    assert cache.evict_older_than(10 * 86400) == 0
    assert not stray.exists() and cache.get("k")[0] is not None


# --- %cuda_cache clear --older-than: by last use, every unit ----------------------------------

DAY = 86400.0
# entry -> (stored days ago, last used days ago); created (in the record) = stored
ENTRIES = {"old": (25, 25), "reused": (25, 10), "new": (0.01, 0.01)}
AGES = [  # (--older-than, what goes)
    ("2w", {"old"}), ("14d", {"old"}), ("336h", {"old"}), ("20160m", {"old"}),
    ("1209600s", {"old"}), ("1209600", {"old"}), ("1w", {"old", "reused"}),
    ("3w", {"old"}), ("4w", set()), ("9d", {"old", "reused"}), ("1h", {"old", "reused"}),
    ("0.5w", {"old", "reused"}), ("1s", {"old", "reused", "new"}), ("22d", {"old"}),
    ("26d", set()),
]


def _aged_cache(folder: Path) -> KernelCache:
    cache = KernelCache(folder)
    now = time.time()
    for key, (stored, _) in ENTRIES.items():
        cache.put(key, _record(created=now - stored * DAY))
    disk_mod.bookkeeper().flush()
    con = sqlite3.connect(folder / "cache.db")
    with con:
        for key, (stored, used) in ENTRIES.items():
            con.execute("UPDATE Cache SET store_time = ?, access_time = ? WHERE key = ?",
                        (now - stored * DAY, now - used * DAY, key))
    con.close()
    return cache


@pytest.mark.parametrize("age, gone", AGES)
def test_clear_older_than_goes_by_last_use(tmp_path, monkeypatch, age, gone):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path))
    _aged_cache(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    stats = ip.run_line_magic("cuda_cache", f"clear --older-than {age}")
    assert f"removed {len(gone)} entr" in stats.note
    assert set(default_cache().keys()) == set(ENTRIES) - gone


def test_a_lookup_makes_an_entry_recent(tmp_path):
    cache = _aged_cache(tmp_path)
    assert cache.get("old")[0] is not None  # used now: its last use is now
    assert cache.evict_older_than(14 * DAY) == 0
    assert set(cache.keys()) == set(ENTRIES)


def test_listing_reads_last_use_without_making_it(tmp_path):
    cache = _aged_cache(tmp_path)
    for _ in range(2):
        used = {e.key: e.last_used for e in cache.entries()}
    assert time.time() - used["old"] > 20 * DAY  # listing is not a use
    assert json.dumps(sorted(used))  # every key listed


def test_the_default_cache_opens_first_in_a_fresh_process(tmp_path):
    # the first thing a fresh kernel does: the default cache, before anything made the
    # bookkeeper (opening it makes the bookkeeper: one lock must not be taken twice)
    out = run_python("from cudamagic.store import default_cache\nprint(default_cache().location)",
                     env={"CUDAMAGIC_CACHE_DIR": str(tmp_path / "c")}, timeout=60)
    assert out.strip() == str(tmp_path / "c")
