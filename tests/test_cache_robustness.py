"""A cache that is sometimes wrong is worse than none: every failure heals or says what happened.

All on real diskcache folders and the real NVRTC: corruption of the stored files, concurrent
processes, untrusted and unwritable folders and files (modes, owners, FIFOs, links, a database
that points outside), the size limit, old and new entry formats.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import sqlite3
import stat
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import diskcache

import pytest

from cudamagic.store import disk as cache_mod
from cudamagic.store.state import state
from cudamagic.store.cache import KernelCache
from cudamagic.store.entry import decode_entry, encode_entry, ENTRY_FORMAT, EntryRecord
from cudamagic.store.limits import DEFAULT_SIZE_LIMIT
from cudamagic.errors import CacheArgumentError, CacheWarning, CudaMagicError
from cudamagic.pipeline.steps import build_module, entry_key, options_from_args

from .conftest import FIXTURES, REPO, run_python, value_file

SRC = "template <typename T> __global__ void k(T* x, T v) { x[threadIdx.x] = v; }\n"
EXPRS = ["k<float>", "k<int>"]
TRUTH = {"k<float>": "_Z1kIfEvPT_S0_", "k<int>": "_Z1kIiEvPT_S0_"}
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _value_files(directory: Path) -> list[Path]:
    return list(directory.rglob("*.val"))  # diskcache's value files (other things may live here)


def _build(cache: KernelCache, src: str = SRC, compiler=None):
    kw = {} if compiler is None else {"compiler": compiler}
    return build_module(src, options_from_args([], EXPRS), cache=cache, **kw)


def _mutate(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "flip-many", "truncate", "extend", "zero-run", "delete", "empty"])
    if how == "flip":
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    elif how == "flip-many":
        for _ in range(rng.randint(2, 64)):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
    elif how == "truncate":
        data = data[:rng.randrange(len(data))]
    elif how == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 100)))
    elif how == "zero-run":
        i = rng.randrange(len(data))
        data[i:i + rng.randint(1, 4096)] = bytes(len(data[i:i + 4096]))
    elif how == "delete":
        path.unlink()
        return how
    else:
        data = bytearray()
    if bytes(data) == path.read_bytes():
        return "no-op"  # zeros over zeros, flips that cancel: the entry is intact
    path.write_bytes(bytes(data))
    return how


class _CompileOnce:
    """NVRTC's real result for the one cell, compiled once and handed out again: what the test
    watches is the cache's handling of damage, not the compile (120 compiles of the same cell
    would test NVRTC 120 times)."""

    def __init__(self, real) -> None:
        self.real, self.result, self.calls = real, None, 0

    def __call__(self, source, name_expressions, options, **kw):
        self.calls += 1
        if self.result is None:
            self.result = self.real(source, name_expressions, options, **kw)
        return self.result


def test_corrupted_entry_files_are_rebuilt_never_misread(tmp_path, compiler):
    cache = KernelCache(tmp_path)
    compiler = _CompileOnce(compiler)
    _build(cache, compiler=compiler)
    rng = random.Random(20261130)
    outcomes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    trials = 120
    for _ in range(trials):
        (value,) = _value_files(tmp_path)
        how = _mutate(value, rng)
        kinds[how] += 1
        mod = _build(cache, compiler=compiler)  # a damaged entry is the cache's to heal, never
        assert {e: mod[e].symbol for e in EXPRS} == TRUTH  # an error; never a wrong kernel
        reason = mod.report.miss_reason
        if how == "no-op":
            assert mod.hit, "an intact entry was not served"
        elif how == "delete":
            assert not mod.hit and reason == "no cache entry"
        else:  # detected, deleted, and the report says why
            assert not mod.hit and reason and "(deleted)" in reason, (how, reason)
        outcomes["hit" if mod.hit else "rebuilt"] += 1
        assert _build(cache, compiler=compiler).hit  # healed
    print(f"\ncorruption: {trials} trials ({dict(kinds)}): {dict(outcomes)}")
    assert set(kinds) - {"no-op"} == {"flip", "flip-many", "truncate", "extend", "zero-run",
                                      "delete", "empty"}  # every kind of damage was tried
    assert outcomes["rebuilt"] == trials - kinds["no-op"] == compiler.calls - 1
    assert compiler.real.calls == [tuple(EXPRS)]  # one real compile


def _damage_database(db: Path, rng: random.Random, trial: int) -> None:
    data = bytearray(db.read_bytes())
    if trial == 0:
        data[:16] = b"not a database\0\0"  # SQLite refuses this one outright
    else:
        for _ in range(rng.randint(1, 200)):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
    db.write_bytes(bytes(data))
    for side in db.parent.glob("cache.db-*"):
        side.unlink()


def test_a_damaged_database_falls_back_to_memory(tmp_path, compiler):
    rng = random.Random(7)
    fell_back = 0
    for trial in range(10):
        folder = tmp_path / str(trial)
        c = KernelCache(folder)
        _build(c, compiler=compiler)
        c.close()
        _damage_database(folder / "cache.db", rng, trial)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = KernelCache(folder)  # no error: a damaged database is never the user's
            first = _build(cache, compiler=compiler)  # problem
            again = _build(cache, compiler=compiler)
        told = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)
                and "cached in memory" in str(w.message)]
        for mod in (first, again):
            assert {e: mod[e].symbol for e in EXPRS} == TRUTH
        assert again.hit  # still a cache, on disk or in memory
        if cache.in_memory:
            fell_back += 1
            assert len(told) == 1 and str(folder) in told[0]  # said once, naming the folder
            assert "memory" in again.report.cache_dir
        else:  # the damage missed what SQLite reads: the folder goes on, without a word
            assert not told and again.report.cache_dir == str(folder)
        assert again.report.cache_in_memory == bool(cache.in_memory)
    print(f"\ndamaged database: {fell_back} of 10 fell back to memory")
    assert fell_back >= 1


CHILD = r"""
import json, sys, cudamagic
mod = cudamagic.build(sys.argv[1], ["k<float>"], cache=sys.argv[2])
print(json.dumps({"hit": mod.hit, "symbol": mod["k<float>"].symbol}))
"""


def _processes(sources: list[str], cache_dir: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, src, str(cache_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for src in sources]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_eight_processes_same_cell_leave_one_entry(tmp_path):
    results = _processes([SRC] * 8, tmp_path)
    assert {r["symbol"] for r in results} == {"_Z1kIfEvPT_S0_"}
    print(f"\nconcurrency: 8 processes, same cell: {sum(not r['hit'] for r in results)} compiled, "
          f"{sum(r['hit'] for r in results)} hit")
    assert len(KernelCache(tmp_path)) == 1


def test_eight_processes_different_cells_lose_none(tmp_path):
    sources = [SRC.replace("v;", f"v + {i};") for i in range(8)]
    results = _processes(sources, tmp_path)
    assert all(not r["hit"] for r in results)
    cache = KernelCache(tmp_path)
    assert len(cache) == 8
    for src in sources:
        assert build_module(src, options_from_args([], ["k<float>"]), cache=cache).hit


# --- an entry names its key (issue 9 item 6) --------------------------------------------------

def test_a_cell_is_never_served_another_cells_cubin(tmp_path, compiler):
    cache = KernelCache(tmp_path)
    other = SRC.replace("= v;", "= v + 1;")
    mine, theirs = _build(cache, compiler=compiler), _build(cache, other, compiler=compiler)
    Path(value_file(cache, mine.key)).write_bytes(value_file(cache, theirs.key).read_bytes())
    mod = _build(cache, compiler=compiler)
    assert mod.cubin == mine.cubin, "the other cell's CUBIN was served"
    assert not mod.hit and "copied or moved" in mod.report.miss_reason
    assert _build(cache, compiler=compiler).hit and _build(cache, other, compiler=compiler).hit


# --- trust: owner-only, all the way down (issue 9 item 7) --------------------------------------

def test_folder_is_created_owner_only(tmp_path):
    KernelCache(tmp_path / "a" / "cache")
    assert stat.S_IMODE((tmp_path / "a" / "cache").stat().st_mode) == 0o700


def test_everything_inside_is_owner_only_under_umask_002(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)  # a folder the user made: trusted (only its owner writes it)
    (folder / "pch").mkdir()
    (folder / "pch").chmod(0o775)  # as an older version left it under umask 002
    code = f"""
import json, os
os.umask(0o002)   # a shared-group setup: files 664 and folders 775 unless made otherwise
from cudamagic.store.cache import KernelCache
from cudamagic.store.entry import EntryRecord
c = KernelCache({str(folder)!r})
for i in range(40):
    c.put(f"k{{i}}", EntryRecord(cubin=os.urandom(1000), lowered=None))
c.close()
again = KernelCache({str(folder)!r})   # its own files still pass its checks
# a build that includes a header: its precompiled header and the cell's history as well
import cudamagic
os.chdir({str(tmp_path)!r})
open("h.cuh", "w").write("#pragma once\\n#define V 1\\n")
cudamagic.build('#include "h.cuh"\\n__global__ void k(float* y) {{ y[0] = V; }}\\n',
                cache={str(folder)!r})
print(json.dumps({{"memory": again.in_memory,
                   "hits": sum(again.get(f"k{{i}}")[0] is not None for i in range(40))}}))
"""
    out = json.loads(run_python(code).strip().splitlines()[-1])
    loose = sorted(f"{p.relative_to(folder)} {stat.S_IMODE(p.lstat().st_mode):o}"
                   for p in folder.rglob("*") if p.lstat().st_mode & 0o077)
    assert not loose, f"open to the group or others: {loose[:6]}"
    assert any(p.is_dir() for p in folder.iterdir()) and (folder / "cache.db").exists()
    assert {"pch", "history"} <= {p.name for p in folder.iterdir()}, list(folder.iterdir())
    assert out == {"memory": None, "hits": 40}


def _loosen_file(path: Path) -> None:
    path.chmod(0o664)


def _loosen_folder(path: Path) -> None:
    path.parent.chmod(0o775)


def _give_away(path: Path) -> None:
    os.chown(path, 54321, -1)


def _link_to_a_copy(path: Path) -> None:
    # a link to a perfectly good entry of ours elsewhere: still refused (only the link was
    # checked where it lies; whoever could plant it could point it anywhere)
    copy = path.parent.parent.parent.parent / "elsewhere.val"
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o600)
    path.unlink()
    path.symlink_to(copy)


@pytest.mark.parametrize("damage, reason", [
    (_loosen_file, "is writable by its group (mode 664)"),
    (_loosen_folder, "above its file is writable by its group (mode 775)"),
    pytest.param(_give_away, "is owned by another user (uid 54321)",
                 marks=pytest.mark.skipif(not IS_ROOT, reason="needs root to chown")),
    (_link_to_a_copy, "is a symbolic link"),
], ids=["group-writable-file", "group-writable-subfolder", "other-users-file", "symlink"])
def test_an_entry_someone_else_could_have_written_is_rebuilt(tmp_path, compiler, damage, reason):
    cache = KernelCache(tmp_path / "cache")
    key = _build(cache, compiler=compiler).key
    damage(value_file(cache, key))
    mod = _build(cache, compiler=compiler)
    assert not mod.hit, "an entry anyone could have written was served"
    assert reason in mod.report.miss_reason and "(deleted)" in mod.report.miss_reason
    assert {e: mod[e].symbol for e in EXPRS} == TRUTH
    assert _build(cache, compiler=compiler).hit  # rebuilt owner-only


SPECIAL = r"""
import json, os, resource, sqlite3, sys
from cudamagic.store.cache import KernelCache
from cudamagic.pipeline.steps import build_module, options_from_args
folder, how, SRC, EXPRS = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
cache = KernelCache(folder)
opts = options_from_args([], EXPRS)
key = build_module(SRC, opts, cache=cache).key
con = sqlite3.connect(os.path.join(folder, "cache.db"))
((name,),) = con.execute("SELECT filename FROM Cache WHERE key = ?", (key,)).fetchall()
con.close()
path = os.path.join(folder, name)
os.unlink(path)
if how == "fifo":
    os.mkfifo(path, 0o600)         # a plain open() waits for a writer forever
elif how == "dev-zero":
    os.symlink("/dev/zero", path)  # a plain read() takes memory without end
else:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.ftruncate(fd, 1 << 34)      # a sparse 16 GiB file of ours
    os.close(fd)
# never take this machine's memory, whatever the reader does
vm = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize"))) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
mod = build_module(SRC, opts, cache=cache)
print(json.dumps({"hit": mod.hit, "why": mod.report.miss_reason, "gone": not os.path.lexists(path),
                  "symbol": mod["k<float>"].symbol, "again": build_module(SRC, opts, cache=cache).hit}))
"""


@pytest.mark.parametrize("how, reason", [("fifo", "is a FIFO"), ("dev-zero", "symbolic link"),
                                         ("huge", "larger than the cache's size limit")])
def test_a_fifo_device_or_huge_file_is_refused_at_once(tmp_path, how, reason):
    args = [str(tmp_path), how, SRC, json.dumps(EXPRS)]
    code = f"import sys; sys.argv = ['-', *{args!r}]\n" + SPECIAL
    try:
        out = json.loads(run_python(code, timeout=60).strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading the cache hung on a {how} in place of an entry")
    assert out["why"] and reason in out["why"] and "(deleted)" in out["why"], out
    assert out["hit"] is False and out["gone"] and out["again"] is True
    assert out["symbol"] == TRUTH["k<float>"]


def test_a_database_row_never_reads_or_deletes_outside_the_folder(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"not the cache's")
    for key, name in (("rel", "../precious.txt"), ("abs", str(precious))):
        cache.put(key, EntryRecord(cubin=b"x" * 100, lowered=None))
        con = sqlite3.connect(tmp_path / "cache" / "cache.db")
        with con:
            con.execute("UPDATE Cache SET filename = ? WHERE key = ?", (name, key))
        con.close()
        rec, why = cache.get(key)
        assert rec is None and "outside the cache folder" in why.detail
        assert precious.read_bytes() == b"not the cache's", f"{name}: deleted on the database's word"


def _assert_memory_fallback(folder: Path, reason: str) -> None:
    with pytest.warns(CacheWarning, match=re.escape(reason)):
        cache = KernelCache(folder)
    assert cache.in_memory and reason in cache.location
    first = build_module(SRC, options_from_args([], EXPRS), cache=cache)
    again = build_module(SRC, options_from_args([], EXPRS), cache=cache)
    assert (first.hit, again.hit) == (False, True)  # still a cache, for this process
    assert "memory" in again.report.cache_dir and again.report.cache_in_memory
    assert dict(again.report.facts)["cache"] == "in memory, this session only"


@pytest.mark.parametrize("mode, who", [
    (0o777, "writable by its group and others (mode 777)"),
    (0o757, "writable by others (mode 757)"),
    (0o775, "writable by its group (mode 775)"),  # made under umask 002
    (0o770, "writable by its group (mode 770)"),
])
def test_folder_writable_by_its_group_or_others_is_not_trusted(tmp_path, mode, who):
    """Group write is refused too, and said as the group's (docs/cache.md: a member of the
    group could plant a CUBIN; a team shares compiles through the Redis tier)."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    _assert_memory_fallback(folder, who)
    assert not (folder / "cache.db").exists()  # nothing read from it, nothing written


def test_a_folder_made_under_umask_002_is_said_to_be_its_group_s(tmp_path):
    old = os.umask(0o002)
    try:
        (tmp_path / "made").mkdir()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o775
    _assert_memory_fallback(tmp_path / "made", "writable by its group (mode 775)")


@pytest.mark.parametrize("name, damage, reason", [
    ("cache.db", lambda p: p.chmod(0o664), "cache.db is writable by its group (mode 664)"),
    ("cache.db-wal", lambda p: p.chmod(0o660), "cache.db-wal is writable by its group"),
    ("cache.db", lambda p: (p.rename(p.with_name("real.db")), p.symlink_to("real.db")),
     "cache.db is a symbolic link"),
], ids=["group-writable-db", "group-writable-wal", "db-symlink"])
def test_a_database_others_could_write_is_not_trusted(tmp_path, name, damage, reason):
    folder = tmp_path / "cache"
    KernelCache(folder).put("k", EntryRecord(cubin=b"x", lowered=None))
    path = folder / name
    if not path.exists():
        path.write_bytes(b"")  # SQLite removes an empty WAL on close; a crash leaves one
        path.chmod(0o600)
    damage(path)
    _assert_memory_fallback(folder, reason)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to chown")
def test_folder_owned_by_another_user_is_not_trusted(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 54321, -1)
    _assert_memory_fallback(folder, "owned by another user")


def test_folder_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _assert_memory_fallback(blocker / "cache", "cannot be used")


def test_full_disk_warns_once_and_keeps_working(tmp_path):
    code = f"""
import resource, signal, warnings, json
from cudamagic.store.cache import KernelCache
from cudamagic.pipeline.steps import build_module, options_from_args
cache = KernelCache({str(tmp_path)!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))   # the disk is full
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hits = [build_module({SRC!r}, options_from_args([], {EXPRS!r}), cache=cache).hit
            for _ in range(3)]
print(json.dumps({{"hits": hits, "warnings": [str(w.message) for w in caught],
                   "memory": bool(cache.in_memory)}}))
"""
    out = json.loads(run_python(code).strip().splitlines()[-1])
    assert out["hits"] == [False, True, True] and out["memory"]
    assert len(out["warnings"]) == 1 and "cached in memory for this session" in out["warnings"][0]


# --- the size limit: never caching off in silence (issue 9 item 10) ---------------------------

def _entry(size: int) -> EntryRecord:
    return EntryRecord(cubin=os.urandom(size), lowered=None)


def test_least_recently_used_entry_goes_first(tmp_path):
    size = 400_000
    probe = KernelCache(tmp_path / "probe")
    cache = KernelCache(tmp_path / "c", size_limit=probe.volume() + int(3.5 * size))
    for key in ("oldest", "middle", "newest"):
        cache.put(key, _entry(size))
    cache.get("oldest")  # used again: now "middle" is the least recently used
    cache.put("fourth", _entry(size))
    assert sorted(cache.keys()) == ["fourth", "newest", "oldest"]


def test_size_limit_from_the_environment(tmp_path, monkeypatch):
    assert KernelCache(tmp_path / "a").size_limit == DEFAULT_SIZE_LIMIT == 1 << 30
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", "256MB")
    assert KernelCache(tmp_path / "b").size_limit == 256 << 20


@pytest.mark.parametrize("limit", [0, "0", -1, "-5MB", "10KB", 900_000])
def test_a_limit_that_keeps_nothing_is_refused_with_one_that_works(tmp_path, monkeypatch, limit):
    pattern = r"leaves no room for entries.*at least 2MB.*--no-cache|0 or more, such as 512MB"
    with pytest.raises(CacheArgumentError, match=pattern):
        KernelCache(tmp_path / "a", size_limit=limit)
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", str(limit))
    with pytest.raises(CacheArgumentError, match=r"\$CUDAMAGIC_CACHE_SIZE_LIMIT: .*" + pattern):
        KernelCache(tmp_path / "b")
    monkeypatch.delenv("CUDAMAGIC_CACHE_SIZE_LIMIT")
    cache = KernelCache(tmp_path / "c")
    with pytest.raises(CacheArgumentError, match=pattern):
        cache.set_size_limit(limit)
    assert cache.size_limit == DEFAULT_SIZE_LIMIT
    assert KernelCache(tmp_path / "c").size_limit == DEFAULT_SIZE_LIMIT  # the folder kept it too


def test_a_limit_below_what_the_database_takes_is_refused(tmp_path):
    cache = KernelCache(tmp_path, size_limit="64MB")
    for i in range(800):  # a database of a few MB of bookkeeping (long keys)
        cache.raw.set(f"{i:02000x}", b"x")
    con = sqlite3.connect(f"file:{tmp_path / 'cache.db'}?mode=ro", uri=True)
    ((page_size,),), ((pages,),) = (con.execute(f"PRAGMA {p}").fetchall()
                                    for p in ("page_size", "page_count"))
    con.close()
    db = page_size * pages
    assert db > 1 << 20
    with pytest.raises(CacheArgumentError, match=f"database alone takes .* at least "
                                                 f"{-(-(db + (1 << 20)) // (1 << 20))}MB"):
        cache.set_size_limit(db)
    cache.set_size_limit(db + (1 << 20))


def test_cuda_cache_limit_0_is_an_error_that_says_what_works(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setattr(state, "default", None)  # put back after the test
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "cache"))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    for line in ("limit 0", "limit 1e30GB", "limit lots"):
        with pytest.raises(CudaMagicError, match="at least 2MB|such as"):
            ip.run_line_magic("cuda_cache", line)


def test_a_limit_the_folder_kept_that_keeps_nothing_is_replaced_with_a_warning(tmp_path):
    with diskcache.Cache(str(tmp_path), size_limit=0):  # plain diskcache, an older cudamagic
        pass
    with pytest.warns(CacheWarning, match="size limit stored in the cache folder.*leaves no room"
                                          ".*Using the default"):
        cache = KernelCache(tmp_path)
    assert cache.size_limit == DEFAULT_SIZE_LIMIT and not cache.in_memory
    cache.put("k", _entry(1000))
    assert cache.get("k")[0] is not None


def test_an_entry_larger_than_the_limit_warns_with_the_limit_that_fits(tmp_path):
    cache = KernelCache(tmp_path, size_limit="2MB")
    with pytest.warns(CacheWarning, match=r"does not fit .* at least 5MB"):
        cache.put("big", _entry(3 << 20))
    assert "big" not in cache


# --- opening: fast, and the same as diskcache's own open ---------------------------------------

def test_the_fast_open_sets_what_diskcaches_open_sets(tmp_path):
    assert cache_mod._FAST_OPEN, (f"diskcache {diskcache.__version__}: check _Store._open_as_is "
                                  "against its Cache.__init__, then allow this version")
    kept = KernelCache(tmp_path)
    kept.set_size_limit("300MB")  # kept by the folder
    kept.close()

    def state(c):
        attrs = {k: v for k, v in vars(c).items() if k != "_local"}
        attrs["_disk"] = (type(c._disk), vars(c._disk))
        return attrs

    slow = cache_mod._Store.__new__(cache_mod._Store)
    diskcache.Cache.__init__(slow, str(tmp_path), disk=cache_mod._PrivateDisk,
                             **cache_mod._SETTINGS)
    fast = cache_mod._Store.__new__(cache_mod._Store)
    assert fast._open_as_is(str(tmp_path), 60, cache_mod._PrivateDisk, dict(cache_mod._SETTINGS))
    assert state(fast) == state(slow) and fast.size_limit == 300 << 20
    # settings it would change take diskcache's own path
    other = cache_mod._Store.__new__(cache_mod._Store)
    assert not other._open_as_is(str(tmp_path), 60, cache_mod._PrivateDisk,
                                 {**cache_mod._SETTINGS, "cull_limit": 10})
    fresh = cache_mod._Store.__new__(cache_mod._Store)
    assert not fresh._open_as_is(str(tmp_path / "new"), 60, cache_mod._PrivateDisk, {})
    for c in (slow, fast, other, fresh):
        c.close()


# --- format fixtures ---------------------------------------------------------------------------

FIXTURE_SRC = (FIXTURES / "fixture.cu").read_text()
FIXTURE_EXPRS = ["fill<float>", "shift<float, (int)3>", "c_kernel", "mode<(geo::v2::Mode)0>"]
ENTRIES = FIXTURES / "entries"


def _plant(cache: KernelCache, value: bytes, exprs=FIXTURE_EXPRS) -> str:
    key, *_ = entry_key(FIXTURE_SRC, options_from_args([], exprs, arch="sm_90"))
    cache.raw.set(key, value)
    return key


def test_entry_without_lowered_map_still_loads(cache, compiler):
    opts = options_from_args([], FIXTURE_EXPRS, arch="sm_90")
    key = build_module(FIXTURE_SRC, opts, cache=cache, compiler=compiler).key
    # the GPU machine's CUBIN, without its name map, under this machine's key (a real key
    # depends on the NVRTC) and with this machine's header manifest (paths and times are local)
    rec = decode_entry((ENTRIES / f"v{ENTRY_FORMAT}_without_lowered_map.entry").read_bytes())
    cache.raw.set(key, encode_entry(replace(rec, key=key, manifest=cache.get(key)[0].manifest)))
    mod = build_module(FIXTURE_SRC, opts, cache=cache, compiler=compiler)
    assert mod.hit and len(compiler.calls) == 1 and mod.cubin == rec.cubin
    assert {mod[e].resolved_by for e in FIXTURE_EXPRS} == {"demangled"}
    assert mod["shift<float, (int)3>"].symbol == "_Z5shiftIfLi3EEvPT_j"


# explicit ids: a test id lands in the environment (PYTEST_CURRENT_TEST), and one holding 70 KB
# of bytes makes every subprocess of the test (cu++filt) fail with "argument list too long"
@pytest.mark.parametrize("value, reason", [
    ((ENTRIES / "v99_newer_format.entry").read_bytes(), "newer"),
    ((ENTRIES / "v1_without_key.entry").read_bytes(), "does not name its key"),
    ((ENTRIES / "v2_without_lowered_map.entry").read_bytes(), "older than 3"),
    ((FIXTURES / "fixture.cubin").read_bytes(), "bare CUBIN"),
], ids=["newer-format-entry", "older-format-entry", "format-2-entry", "bare-cubin"])
def test_newer_and_older_formats_and_bare_cubin_are_rebuilt(cache, compiler, value, reason):
    key = _plant(cache, value)
    mod = build_module(FIXTURE_SRC, options_from_args([], FIXTURE_EXPRS, arch="sm_90"),
                       cache=cache, compiler=compiler)
    assert not mod.hit and reason in mod.report.miss_reason and len(compiler.calls) == 1
    record, _ = cache.get(key)
    assert record.lowered is not None and record.key == key  # re-stored in the current format


@pytest.mark.parametrize("where", ["first byte", "header", "cubin start", "middle", "last byte"])
def test_one_damaged_byte_anywhere_in_a_large_entry_is_caught(tmp_path, where):
    """An entry of several MiB (a CUBIN of 6 MiB): one byte changed anywhere in its value file,
    at its first byte, in its header, at the CUBIN's first byte, in the middle or at its very
    end, is found by the checksum: the entry is not served, it is deleted, and the next read is
    a plain miss. The same entry undamaged is served byte for byte."""
    from cudamagic.core.miss import MissKind

    cubin = random.Random(7).randbytes(6 << 20)
    record = EntryRecord(cubin=cubin, lowered={"k<1>": "_Z1kILi1EEvv"}, arch="sm_90",
                         nvrtc_version="13.0")
    cache = KernelCache(tmp_path)
    cache.put("key", record)
    got, miss = cache.get("key")
    assert miss is None and got is not None and got.cubin == cubin
    (value,) = _value_files(tmp_path)
    data = bytearray(value.read_bytes())
    start = len(data) - len(cubin)  # the CUBIN closes the value
    at = {"first byte": 0, "header": start // 2, "cubin start": start,
          "middle": start + len(cubin) // 2, "last byte": len(data) - 1}[where]
    data[at] ^= 0x01
    value.write_bytes(bytes(data))
    got, miss = cache.get("key")
    assert got is None and miss is not None and miss.kind is MissKind.DAMAGED, (where, miss)
    assert not _value_files(tmp_path)  # deleted
    assert cache.get("key") == (None, None)  # gone: no entry, nothing to say


@pytest.mark.parametrize("name", [b"caf\xe9", b"\xff\xfe", b"a%20b", b"q?mode=ro", b"h#x",
                                  "é".encode()], ids=repr)
def test_lookups_are_counted_in_a_folder_of_any_name(tmp_path, name):
    """A cache folder whose name is not UTF-8 killed the hit-count thread (the URI of its
    database was encoded as UTF-8): the stats stayed 0/0."""
    import os

    import cudamagic
    from cudamagic.store import KernelCache

    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/" + name)
    cache = KernelCache(folder)
    src = 'extern "C" __global__ void k(int* p) {}\n'
    assert not cudamagic.build(src, cache=cache).hit
    for _ in range(3):
        assert cudamagic.build(src, cache=cache).hit
    assert cache.stats() == (3, 1)
    cache.close()


# --- a busy database is told by SQLite's error code, not its words ---------------------------

@pytest.mark.parametrize("code, words, counted", [
    (5, "reworded: another writer", True),      # SQLITE_BUSY: tried again, the count kept
    (6, "reworded", True),                      # SQLITE_LOCKED
    (11, "database is locked", False),          # SQLITE_CORRUPT with busy words: given up
])
def test_the_bookkeeper_retries_a_busy_database_by_its_code(code, words, counted, tmp_path,
                                                            monkeypatch):
    import sqlite3

    import diskcache

    from cudamagic.store.disk import Bookkeeper, _Counts

    diskcache.Cache(str(tmp_path)).close()
    database = str(tmp_path / "cache.db")
    keeper = Bookkeeper()
    real = keeper._connection
    failed = []

    class Refusing:
        def execute(self, *args):
            failed.append(code)
            exc = sqlite3.OperationalError(words)
            exc.sqlite_errorcode = code
            raise exc

    monkeypatch.setattr(keeper, "_connection", lambda db: real(db) if failed else Refusing())
    counts = _Counts()
    counts.hits = 3
    keeper._write(database, counts)
    with sqlite3.connect(database) as con:
        hits, = con.execute("SELECT value FROM Settings WHERE key = 'hits'").fetchone()
    assert failed == [code] and (hits == 3) is counted


@pytest.mark.parametrize("make, refused", [
    (None, None),                                               # made here, owner-only
    (lambda p: (p.mkdir(), p.chmod(0o777)), None),              # an older cudamagic's: tightened
    (lambda p: (p.mkdir(), p.chmod(0o775)), None),
    (lambda p: (p.mkdir(0o700), os.chown(p, 54321, -1)), "is owned by another user"),
    (lambda p: (p.mkdir(0o777), os.chown(p, 54321, -1)), "is owned by another user"),
    (lambda p: p.write_bytes(b""), "the cache subfolder"),      # not a folder at all
])
def test_a_value_subfolder_is_made_owner_only_or_refused(tmp_path, make, refused):
    """The folders a value file goes into: ours and open to others (left by a umask such as
    002) are made 700; another user's, or not a folder, refuse the write. Decided by the
    folder's mode and owner, not by the words that explain them."""
    top = tmp_path / "cache"
    top.mkdir(0o700)
    disk = cache_mod._PrivateDisk(str(top))
    sub = top / "ab"
    if make is not None:
        make(sub)
    if refused:
        with pytest.raises(OSError, match=refused):
            disk._private_dirs(str(sub / "cd"))
        assert not (sub / "cd").exists()
    else:
        disk._private_dirs(str(sub / "cd"))
        assert [stat.S_IMODE(p.stat().st_mode) for p in (sub, sub / "cd")] == [0o700, 0o700]
