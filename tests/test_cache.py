"""Entry records on a real diskcache: round trip, every check on read, no pickle, the API's edges."""

from __future__ import annotations

import hashlib
import pickle
import shutil
from dataclasses import replace

import diskcache

import pytest

import cudamagic
from cudamagic.store import disk as cache_mod
from cudamagic.store.state import state
from cudamagic.store.cache import default_cache, KernelCache
from cudamagic.store.entry import BadEntry, decode_entry, encode_entry, ENTRY_FORMAT, EntryRecord
from cudamagic.store.limits import parse_size
from cudamagic.errors import CacheArgumentError, CacheError, CudaMagicError

from .conftest import FIXTURES, settled, value_file

CUBIN = (FIXTURES / "fixture.cubin").read_bytes()
ENTRIES = FIXTURES / "entries"


def _record(**kw) -> EntryRecord:
    return EntryRecord(cubin=CUBIN, lowered={"fill<float>": "_Z4fillIfEvPT_S0_i"}, log="w",
                       options=("-arch=sm_90",), arch="sm_90", nvrtc_version="13.5", **kw)


def _resum(blob: bytes) -> bytes:
    """Recompute the record checksum, as a writer with a bug (or a forger) would."""
    head = len(b"CUDAMAGIC-ENTRY\n")
    return blob[:head] + hashlib.sha256(blob[head + 32:]).digest() + blob[head + 32:]


def test_round_trip():
    rec = _record(key="k" * 64, manifest={"headers": [["a.h", "0" * 64]], "n": 1})
    assert decode_entry(encode_entry(rec), "k" * 64) == rec


def test_entry_without_lowered_map_still_reads():
    rec = EntryRecord(cubin=CUBIN, lowered=None, key="k")
    assert decode_entry(encode_entry(rec)).lowered is None


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: CUBIN, "magic"),                                   # a bare CUBIN
    (lambda b: b[:-1], "checksum"),
    (lambda b: b + b"x", "checksum"),
    (lambda b: b[:-10] + bytes([b[-10] ^ 1]) + b[-9:], "checksum"),
    (lambda b: b[:70] + bytes([b[70] ^ 1]) + b[71:], "checksum"),  # inside the JSON header
    (lambda b: b[:20], "header"),
    (lambda b: _resum(b[:-1]), "truncated"),
    (lambda b: _resum(b.replace(b'"manifest": {}', b'"manifest": []')), "manifest"),
    (lambda b: pickle.dumps({"cubin": CUBIN}), "magic"),
])
def test_bad_values_are_refused(mutate, reason):
    # a changed CUBIN under a re-summed checksum is not among them: the checksum is the one
    # pass over the CUBIN, and whoever re-sums it can rewrite the header's sha256 as well
    with pytest.raises(BadEntry, match=reason):
        decode_entry(mutate(encode_entry(_record(key="k", manifest={}))))


def test_newer_format_is_refused_not_crashed():
    with pytest.raises(BadEntry, match="newer"):
        decode_entry(encode_entry(_record(key="k"), format_version=ENTRY_FORMAT + 1))


# --- an entry names its key (issue 9 item 6) --------------------------------------------------

def test_a_record_read_under_another_key_is_refused():
    blob = encode_entry(_record(key="a" * 64))
    assert decode_entry(blob, "a" * 64).key == "a" * 64
    with pytest.raises(BadEntry, match="copied or moved from another entry"):
        decode_entry(blob, "b" * 64)


def test_a_value_file_copied_over_another_entry_is_not_served(cache):
    mine, theirs = _record(), replace(_record(), cubin=CUBIN + bytes(16))
    cache.put("mine", mine)
    cache.put("theirs", theirs)
    shutil.copyfile(value_file(cache, "theirs"), value_file(cache, "mine"))
    rec, why = cache.get("mine")
    assert rec is None, "another entry's CUBIN was served under this key"
    assert "copied or moved" in why.detail and "deleted" in why.detail and "mine" not in cache
    assert cache.get("theirs")[0].cubin == theirs.cubin  # the other entry is untouched


def test_an_entry_of_the_format_before_keys_is_a_miss(cache):
    old = (ENTRIES / "v1_without_key.entry").read_bytes()
    with pytest.raises(BadEntry, match="does not name its key"):
        decode_entry(old)
    cache.raw.set("k", old)
    rec, why = cache.get("k")
    assert rec is None and "older" in why.detail and "k" not in cache


def test_current_format_fixture_without_lowered_map_reads_as_is():
    from .fixtures.entries.regenerate import FIXTURE_KEY

    rec = decode_entry((ENTRIES / f"v{ENTRY_FORMAT}_without_lowered_map.entry").read_bytes(),
                       FIXTURE_KEY)
    assert rec.lowered is None and rec.cubin == CUBIN and rec.manifest is None


def test_put_names_the_key_and_refuses_a_record_naming_another(cache):
    cache.put("k", _record())
    assert cache.get("k")[0].key == "k"
    with pytest.raises(CacheArgumentError, match="cannot be stored under"):
        cache.put("other", _record(key="k"))
    with pytest.raises(CacheArgumentError, match="name the key"):
        encode_entry(_record())


def test_manifest_must_be_a_json_object():
    with pytest.raises(CacheArgumentError, match="must be a dict"):
        encode_entry(_record(key="k", manifest=[1, 2]))
    with pytest.raises(CacheArgumentError, match="JSON values only"):
        encode_entry(_record(key="k", manifest={"x": {1, 2}}))


# --- the store ---------------------------------------------------------------------------------

def test_cache_deletes_a_bad_entry_and_says_why(cache):
    cache.raw.set("k", CUBIN)
    rec, why = cache.get("k")
    assert rec is None and "magic" in why.detail and "k" not in cache


def test_cache_never_unpickles(cache):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled')",))

    # someone else writes a pickled value into the folder with plain diskcache
    with diskcache.Cache(str(cache.directory)) as other:
        other.set("k", Boom())
    rec, why = cache.get("k")
    assert rec is None and "never unpickles" in why.detail


def test_cache_never_takes_an_entry_from_inside_the_database(cache):
    # plain diskcache keeps small values in cache.db itself, where no file check reaches
    with diskcache.Cache(str(cache.directory), disk_min_file_size=1 << 20) as other:
        other.set("k", encode_entry(_record(key="k")))
    rec, why = cache.get("k")
    assert rec is None and "inside the database" in why.detail


def test_cache_refuses_to_store_non_bytes(cache):
    with pytest.raises(TypeError, match="bytes only"):
        cache.raw.set("k", {"a": 1})
    assert "k" not in cache


def test_cache_round_trip_on_disk(cache):
    rec = _record()
    cache.put("k", rec)
    assert cache.get("k") == (replace(rec, key="k"), None)
    assert not hasattr(cache, "put_raw")  # test-only; tests write raw values via cache.raw


# --- errors of the project's own, saying what works (issue 9 item 9) ---------------------------

@pytest.mark.parametrize("text", ["lots", "1.5.5MB", "1e30GB", "inf", "nan", "-5MB", "12XB", "",
                                  True, None, 2 ** 64])
def test_a_size_that_is_not_one_says_what_is(text):
    with pytest.raises(CacheArgumentError, match="512MB|64GB|0 or more") as info:
        parse_size(text)
    assert isinstance(info.value, ValueError) and isinstance(info.value, CudaMagicError)


@pytest.mark.parametrize("text, size", [("512MB", 512 << 20), ("1 GiB", 1 << 30), ("1.5k", 1536),
                                        ("1048576", 1 << 20), (4096, 4096), ("2tb", 2 << 40)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("env", ["lots", "1.5.5MB", "1e30GB"])
def test_a_bad_size_in_the_environment_is_a_cache_error(tmp_path, monkeypatch, env):
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", env)
    with pytest.raises(CacheArgumentError, match=r"\$CUDAMAGIC_CACHE_SIZE_LIMIT: .*such as"):
        KernelCache(tmp_path)


@pytest.mark.parametrize("bad", [5, 1.5, b"/tmp/x", "", ["/tmp"]])
def test_build_refuses_a_cache_argument_it_cannot_use(bad):
    with pytest.raises(CacheArgumentError, match="is not a cache: give a KernelCache"):
        KernelCache.wrap(bad)
    with pytest.raises(CacheError, match="is not a cache"):
        cudamagic.build("__global__ void k(int* x) { x[0] = 1; }\n", cache=bad)


# --- the default cache and wrap (issue 12) -----------------------------------------------------

def test_default_cache_is_opened_once_and_follows_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "default", None)  # put back after the test
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "a"))
    first = default_cache()
    assert default_cache() is first and first.directory == tmp_path / "a"
    assert KernelCache.wrap(None) is first
    monkeypatch.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path / "b"))
    assert default_cache().directory == tmp_path / "b"


def test_wrap_keeps_a_diskcache_size_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", "2GB")  # the caller's own object wins
    with diskcache.Cache(str(tmp_path), size_limit=300 << 20) as theirs:
        wrapped = KernelCache.wrap(theirs)
    assert wrapped.size_limit == 300 << 20 and wrapped.directory == tmp_path
    assert not wrapped.in_memory
    wrapped.put("k", _record())
    assert wrapped.get("k")[0].cubin == CUBIN


# --- stats refused ---
# ``%cuda_cache stats`` agrees with the reports: an entry the pipeline finds but cannot serve
# (its header changed, its bytes are damaged) is a miss in the folder's counts, not a hit.
#
# Issue 31 item 5: after a header change the reports said 3 misses / 7 hits while the stats said
# 8 hits / 2 misses (each refused entry had been counted a hit by the store).
import pytest

import cudamagic
from cudamagic.store import KernelCache
from cudamagic.store.memory import MemoryStore

SRC = '#include "ops.h"\nextern "C" __global__ void k(int* p) { p[0] = OPS; }\n'


def _tallies(builds: list[bool]) -> tuple[int, int]:
    return sum(builds), len(builds) - sum(builds)


@pytest.mark.parametrize("where", ["folder", "memory"])
def test_a_recompile_after_a_header_change_is_counted_a_miss(tmp_path, where):
    header = tmp_path / "ops.h"
    header.write_text("#define OPS 1\n")
    settled(header)  # not just before the build: such a build is rightly not cached
    cache = KernelCache(tmp_path / "cache")
    if where == "memory":  # the in-memory fallback counts the same way
        cache._store = MemoryStore(1 << 30, "test")
    hits = []
    for value in (1, 1, 2, 2, 3):  # each new value: the entry found is refused, recompiled
        if f"OPS {value}" not in header.read_text():
            header.write_text(f"#define OPS {value}\n")
            settled(header)
        hits.append(cudamagic.build(SRC, cache=cache, base_dir=tmp_path).hit)
    assert hits == [False, True, False, True, False]
    assert cache.stats() == _tallies(hits) == (2, 3)
    cache.close()


def test_a_damaged_entry_is_counted_a_miss(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    src = 'extern "C" __global__ void k(int* p) {}\n'
    assert not cudamagic.build(src, cache=cache).hit
    (key,) = list(cache.keys())
    cache.raw.set(key, b"not an entry")
    assert not cudamagic.build(src, cache=cache).hit  # found, refused, rebuilt
    assert cudamagic.build(src, cache=cache).hit
    assert cache.stats() == (1, 2)
    cache.close()
