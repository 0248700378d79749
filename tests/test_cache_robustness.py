"""A cache that is sometimes wrong is worse than none: every failure heals or says what happened.

All on real diskcache folders and the real NVRTC: corruption of the stored files, concurrent
processes, untrusted and unwritable folders, the size limit, old and new entry formats.
"""

from __future__ import annotations

import collections
import json
import os
import random
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from cudamagic.cache import DEFAULT_SIZE_LIMIT, KernelCache
from cudamagic.errors import CacheWarning, CudaMagicError
from cudamagic.session import build_module, entry_key, options_from_nvrtc

from .conftest import FIXTURES, REPO, run_python

SRC = "template <typename T> __global__ void k(T* x, T v) { x[threadIdx.x] = v; }\n"
EXPRS = ["k<float>", "k<int>"]
TRUTH = {"k<float>": "_Z1kIfEvPT_S0_", "k<int>": "_Z1kIiEvPT_S0_"}


def _value_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("cache.db")]


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
    path.write_bytes(bytes(data))
    return how


def test_corrupted_entry_files_are_rebuilt_never_misread(tmp_path, compiler):
    cache = KernelCache(tmp_path)
    opts = options_from_nvrtc([], EXPRS)
    build_module(SRC, opts, cache=cache, compiler=compiler)
    rng = random.Random(20261130)
    outcomes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    trials = 120
    for _ in range(trials):
        (value,) = _value_files(tmp_path)
        kinds[_mutate(value, rng)] += 1
        try:
            mod = build_module(SRC, opts, cache=cache, compiler=compiler)
        except CudaMagicError:
            outcomes["clear error"] += 1
            continue
        assert {e: mod[e].symbol for e in EXPRS} == TRUTH  # never a wrong kernel
        outcomes["hit" if mod.hit else "rebuilt"] += 1
        assert build_module(SRC, opts, cache=cache, compiler=compiler).hit  # healed
    print(f"\ncorruption: {trials} trials ({dict(kinds)}): {dict(outcomes)}")
    assert outcomes["hit"] == 0  # every damaged entry was detected
    assert outcomes["rebuilt"] + outcomes["clear error"] == trials


def test_a_damaged_database_falls_back_to_memory(tmp_path):
    rng = random.Random(7)
    handled = 0
    for trial in range(10):
        folder = tmp_path / str(trial)
        c = KernelCache(folder)
        build_module(SRC, options_from_nvrtc([], EXPRS), cache=c)
        c.close()
        db = folder / "cache.db"
        data = bytearray(db.read_bytes())
        for _ in range(rng.randint(1, 200)):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        db.write_bytes(bytes(data))
        for side in folder.glob("cache.db-*"):
            side.unlink()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            try:
                mod = build_module(SRC, options_from_nvrtc([], EXPRS), cache=KernelCache(folder))
            except CudaMagicError:
                handled += 1
                continue
        assert {e: mod[e].symbol for e in EXPRS} == TRUTH
        handled += 1
    assert handled == 10


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
        assert build_module(src, options_from_nvrtc([], ["k<float>"]), cache=cache).hit


def test_folder_is_created_owner_only(tmp_path):
    KernelCache(tmp_path / "a" / "cache")
    assert stat.S_IMODE((tmp_path / "a" / "cache").stat().st_mode) == 0o700


def _assert_memory_fallback(folder: Path, reason: str) -> None:
    with pytest.warns(CacheWarning, match=reason):
        cache = KernelCache(folder)
    assert cache.in_memory and reason in cache.location
    first = build_module(SRC, options_from_nvrtc([], EXPRS), cache=cache)
    again = build_module(SRC, options_from_nvrtc([], EXPRS), cache=cache)
    assert (first.hit, again.hit) == (False, True)  # still a cache, for this process
    assert "memory" in again.report.cache_dir


def test_folder_writable_by_others_is_not_trusted(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    _assert_memory_fallback(folder, "writable by others")
    assert not (folder / "cache.db").exists()  # nothing read from it, nothing written


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
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
from cudamagic.cache import KernelCache
from cudamagic.session import build_module, options_from_nvrtc
cache = KernelCache({str(tmp_path)!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))   # the disk is full
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hits = [build_module({SRC!r}, options_from_nvrtc([], {EXPRS!r}), cache=cache).hit
            for _ in range(3)]
print(json.dumps({{"hits": hits, "warnings": [str(w.message) for w in caught],
                   "memory": bool(cache.in_memory)}}))
"""
    out = json.loads(run_python(code).strip().splitlines()[-1])
    assert out["hits"] == [False, True, True] and out["memory"]
    assert len(out["warnings"]) == 1 and "cached in memory for this session" in out["warnings"][0]


def test_least_recently_used_entry_goes_first(tmp_path):
    blob = (FIXTURES / "entries" / "v1_without_lowered_map.entry").read_bytes()
    cache = KernelCache(tmp_path, size_limit=KernelCache(tmp_path / "probe").volume()
                        + int(3.5 * len(blob)))
    for key in ("oldest", "middle", "newest"):
        cache.put_raw(key, blob)
    cache.get("oldest")  # used again: now "middle" is the least recently used
    cache.put_raw("fourth", blob)
    assert sorted(cache.keys()) == ["fourth", "newest", "oldest"]


def test_size_limit_from_the_environment(tmp_path, monkeypatch):
    assert KernelCache(tmp_path / "a").size_limit == DEFAULT_SIZE_LIMIT == 1 << 30
    monkeypatch.setenv("CUDAMAGIC_CACHE_SIZE_LIMIT", "256MB")
    assert KernelCache(tmp_path / "b").size_limit == 256 << 20


FIXTURE_SRC = (FIXTURES / "fixture.cu").read_text()
FIXTURE_EXPRS = ["fill<float>", "shift<float, (int)3>", "c_kernel", "mode<(geo::v2::Mode)0>"]


def _plant(cache: KernelCache, value: bytes, exprs=FIXTURE_EXPRS) -> str:
    key, *_ = entry_key(FIXTURE_SRC, options_from_nvrtc([], exprs, arch="sm_90"))
    cache.put_raw(key, value)
    return key


def test_entry_without_lowered_map_still_loads(cache, compiler):
    _plant(cache, (FIXTURES / "entries" / "v1_without_lowered_map.entry").read_bytes())
    mod = build_module(FIXTURE_SRC, options_from_nvrtc([], FIXTURE_EXPRS, arch="sm_90"),
                       cache=cache, compiler=compiler)
    assert mod.hit and not compiler.calls
    assert {mod[e].resolved_by for e in FIXTURE_EXPRS} == {"demangled"}
    assert mod["shift<float, (int)3>"].symbol == "_Z5shiftIfLi3EEvPT_j"


# explicit ids: a test id lands in the environment (PYTEST_CURRENT_TEST), and one holding 70 KB
# of bytes makes every subprocess of the test (cu++filt) fail with "argument list too long"
@pytest.mark.parametrize("value, reason", [
    ((FIXTURES / "entries" / "v99_newer_format.entry").read_bytes(), "newer"),
    ((FIXTURES / "fixture.cubin").read_bytes(), "bare CUBIN"),
], ids=["newer-format-entry", "bare-cubin"])
def test_newer_format_and_bare_cubin_are_rebuilt(cache, compiler, value, reason):
    key = _plant(cache, value)
    mod = build_module(FIXTURE_SRC, options_from_nvrtc([], FIXTURE_EXPRS, arch="sm_90"),
                       cache=cache, compiler=compiler)
    assert not mod.hit and reason in mod.report.miss_reason and len(compiler.calls) == 1
    record, _ = cache.get(key)
    assert record.lowered is not None  # re-stored in the current format
