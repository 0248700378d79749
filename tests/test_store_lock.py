"""Another process holding the cache database's write lock (``BEGIN IMMEDIATE`` from any SQLite
client): a build waits on the cache a bounded, short time, then compiles without storing and
says so; a hit still serves from the folder; the cache stays on disk; and a fork never waits
on that other process. Each case runs with a real second process holding the lock."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import cudamagic
from cudamagic.store import EntryRecord, KernelCache
from cudamagic.store.disk import CACHE_WAIT_S

from .conftest import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux")

_HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


class _Holder:
    """A second process holding the database's write lock while in ``with``."""

    def __init__(self, database) -> None:
        self.database = str(database)

    def __enter__(self) -> "_Holder":
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLD, self.database],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"
        return self

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def test_a_build_against_a_locked_cache_compiles_says_so_and_keeps_the_folder(tmp_path):
    """The build waited 198 s here (three tries of diskcache's 60 s timeout and the bookkeeping's
    flush), then moved the whole session's cache to memory."""
    cache = KernelCache(tmp_path / "cache")
    old = 'extern "C" __global__ void old(int* p) {}\n'
    new = 'extern "C" __global__ void fresh(int* p) {}\n'
    cudamagic.build(old, cache=cache)
    with _Holder(cache.directory / "cache.db"):
        t = time.monotonic()
        built = cudamagic.build(new, cache=cache)
        store_s = built.report.timings["store"]
        took = time.monotonic() - t
        assert not built.hit
        assert any("another process kept the cache's database locked" in n
                   for n in built.report.warnings), built.report.warnings
        assert store_s < CACHE_WAIT_S + 1.0, (store_s, took)
        assert cudamagic.build(old, cache=cache).hit  # a read is not blocked by the lock
        assert cache.in_memory is None  # still the folder, not memory for the session
    assert not cudamagic.build(new, cache=cache).hit  # it was not stored, so: stored now
    assert cudamagic.build(new, cache=cache).hit


_FORK_WHILE_LOCKED = """
import json, os, sys, threading, time
from cudamagic.store import EntryRecord, KernelCache
cache = KernelCache(sys.argv[1])
stop = threading.Event()
def writer():  # a thread of the package waiting on the database another process holds
    i = 0
    while not stop.is_set():
        i += 1
        cache.put(f"k{i}", EntryRecord(cubin=b"x" * 64, lowered=None))
t = threading.Thread(target=writer)
t.start()
time.sleep(0.5)
waits = []
for _ in range(5):
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    waits.append(time.monotonic() - started)
    os.waitpid(pid, 0)
    time.sleep(0.3)
stop.set()
t.join(30)
print(json.dumps(waits))
"""


def test_a_fork_never_waits_on_the_process_holding_the_lock(tmp_path):
    """A fork waited for the package's SQLite lock, held by a thread waiting out diskcache's
    60 s busy timeout, and for the bookkeeping's flush: 58 s per fork."""
    folder = tmp_path / "cache"
    KernelCache(folder).put("seed", EntryRecord(cubin=b"s" * 64, lowered=None))
    with _Holder(folder / "cache.db"):
        code = _FORK_WHILE_LOCKED.replace("sys.argv[1]", repr(str(folder)))
        waits = json.loads(run_python(code, timeout=120).strip().splitlines()[-1])
    assert max(waits) < 1.0, waits
