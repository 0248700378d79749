"""Fork and threads (issue 17 group 3): a forked child never hangs in the package, the
bookkeeping of lookups stays bounded, and every wait at exit has a timeout.

Each experiment runs in a fresh interpreter (the parent), which forks from one loop; every child
works the cache (a hit, a put, the stats) and exits, and the parent gives each child a deadline, then kills it and counts it as hung. One child in five
exits the whole way (atexit, then the interpreter's finalization); the others run the atexit
handlers (where the package's exit waits are) and leave, which keeps 300 forks within a minute.
"""

from __future__ import annotations

import json
import sys

import pytest

from .conftest import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux")

HARNESS = r"""
import atexit, json, os, signal, sys, threading, time
import cudamagic
from cudamagic.store import KernelCache, EntryRecord

folder = sys.argv[1]
SRC = "template <typename T> __global__ void k(T* x) { x[0] = T(1); }\n"
cudamagic.build(SRC, ["k<float>"], cache=folder)  # the one compile; every later build hits
CHILD_S = 20.0

def child(i):
    # what a Pool worker made after a %%cuda cell does first: use the cache
    cache = KernelCache(folder)
    assert cudamagic.build(SRC, ["k<float>"], cache=cache).hit
    cache.put(f"child-{os.getpid()}", EntryRecord(cubin=b"x" * 64, lowered=None))
    cache.stats()
    cudamagic.build(SRC, ["k<float>"], cache=folder).hit  # a hit queued at exit, too

def fork_one(i):
    pid = os.fork()
    if pid == 0:
        code = 0
        # a child still here near its deadline writes where each of its threads is (the
        # test shows it for a hung one: a CI run had one hang, cause unknown)
        import faulthandler
        global STACKS
        STACKS = open(os.path.join(os.path.dirname(folder), f"child-{i}.stack"), "w")
        faulthandler.dump_traceback_later(CHILD_S - 3, exit=False, file=STACKS)
        try:
            child(i)
        except BaseException as exc:
            print(f"child {i}: {exc!r}", file=sys.stderr)
            code = 3
        if i % 5 == 0:
            sys.exit(code)  # the interpreter's whole exit: atexit, then finalization
        atexit._run_exitfuncs()  # the exit's waits (the package's among them), then out
        os._exit(code)
    return pid, time.monotonic() + CHILD_S

def reap(children, block):
    hung = failed = 0
    for pid, deadline in list(children):
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                failed += os.waitstatus_to_exitcode(status) != 0
                children.remove((pid, deadline))
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                hung += 1
                children.remove((pid, deadline))
                break
            if not block:
                break
            time.sleep(0.005)
    return hung, failed
"""

AFTER_HITS = HARNESS + r"""
started = time.monotonic()
children, hung, failed = [], 0, 0
for i in range(int(sys.argv[2])):
    cudamagic.build(SRC, ["k<float>"], cache=folder)  # a hit: its bookkeeping is in flight now
    children.append(fork_one(i))
    while len(children) >= 8:
        h, f = reap(children, block=False)
        hung, failed = hung + h, failed + f
        time.sleep(0.001)
h, f = reap(children, block=True)
print(json.dumps({"hung": hung + h, "failed": failed + f, "s": time.monotonic() - started}))
"""

WHILE_BUILDING = HARNESS + r"""
stop = threading.Event()
errors = []
def builder(n):
    try:
        i = 0
        while not stop.is_set():
            i += 1
            # a folder path: a new KernelCache every build, as build(cache=path) makes one
            assert cudamagic.build(SRC, ["k<float>"], cache=folder).hit
            KernelCache(folder).put(f"t{n}-{i}", EntryRecord(cubin=os.urandom(256), lowered=None))
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=builder, args=(n,)) for n in range(3)]
for t in threads:
    t.start()
started = time.monotonic()
children, hung, failed = [], 0, 0
for i in range(int(sys.argv[2])):
    time.sleep(0.02)
    children.append(fork_one(i))
h, f = reap(children, block=True)
stop.set()
for t in threads:
    t.join(30)
print(json.dumps({"hung": hung + h, "failed": failed + f, "s": time.monotonic() - started,
                  "errors": errors}))
"""


def _run(code: str, folder, forks: int) -> dict:
    out = run_python(code.replace("sys.argv[1]", repr(str(folder)))
                     .replace("sys.argv[2]", repr(str(forks))), timeout=240)
    return json.loads(out.strip().splitlines()[-1])


def test_300_forks_right_after_hits_leave_no_child_hung(tmp_path):
    result = _run(AFTER_HITS, tmp_path / "cache", 300)
    print(f"\n300 forks after hits: {result}")
    assert result["hung"] == 0 and result["failed"] == 0, (result, _stacks(tmp_path))


def _stacks(tmp_path) -> str:
    """Where the hung children were, as each wrote it near its deadline."""
    return "\n".join(f"{p.name}:\n{p.read_text()}" for p in sorted(tmp_path.glob("child-*.stack"))
                     if p.stat().st_size)


def test_20_forks_while_three_threads_build_leave_no_child_hung(tmp_path):
    result = _run(WHILE_BUILDING, tmp_path / "cache", 20)
    print(f"\n20 forks while threads build: {result}")
    assert result["hung"] == 0 and result["failed"] == 0 and not result["errors"], \
        (result, _stacks(tmp_path))


BOUNDED = r"""
import json, os, sys, threading, time
import cudamagic
from cudamagic.store import state as st

folder = sys.argv[1]
SRC = "template <typename T> __global__ void k(T* x) { x[0] = T(1); }\n"
cudamagic.build(SRC, ["k<float>"], cache=folder)
def fds():
    return len(os.listdir("/proc/self/fd"))
base, peak, done = fds(), [0], threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], fds())
        time.sleep(0.002)
def builder():
    for _ in range(300):
        assert cudamagic.build(SRC, ["k<float>"], cache=folder).hit
w = threading.Thread(target=watch); w.start()
ts = [threading.Thread(target=builder) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
done.set(); w.join()
books = st.state.bookkeeper
print(json.dumps({"base": base, "peak": peak[0], "flushed": books.flush(timeout=30),
                  "connections": len(books._cons)}))
"""


def test_two_threads_building_keep_descriptors_and_connections_bounded(tmp_path):
    result = _run(BOUNDED, tmp_path / "cache", 0)
    print(f"\n600 hits from two threads: {result}")
    assert result["flushed"] and result["connections"] <= 8
    assert result["peak"] - result["base"] < 40, result  # not one connection per lookup


EXIT = r"""
import sqlite3, sys, time
import cudamagic
from cudamagic.store.disk import Bookkeeper

folder = sys.argv[1]
SRC = "template <typename T> __global__ void k(T* x) { x[0] = T(1); }\n"
cudamagic.build(SRC, ["k<float>"], cache=folder)
Bookkeeper.WRITE_FOR_S = 600.0  # the bookkeeper would try for ten minutes
# another writer holds the database (not through the package): the hit's count cannot be written
other = sqlite3.connect(folder + "/cache.db", isolation_level=None)
other.execute("BEGIN EXCLUSIVE")
assert cudamagic.build(SRC, ["k<float>"], cache=folder).hit  # a read is not blocked
print("exiting", flush=True)
started = time.monotonic()
"""


def test_exit_waits_for_the_bookkeeping_a_bounded_time(tmp_path):
    import time

    started = time.monotonic()
    out = run_python(EXIT.replace("sys.argv[1]", repr(str(tmp_path / "cache"))), timeout=120)
    assert "exiting" in out
    assert time.monotonic() - started < 60  # EXIT_FLUSH_S, not the bookkeeper's ten minutes


def _db_descriptors(folder) -> set[int]:
    import os

    db = os.path.join(str(folder), "cache.db")
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == db:
                found.add(int(fd))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("dropped", ["the cache object", "the thread that used it"])
def test_a_dropped_connection_is_closed_only_under_the_sqlite_lock(tmp_path, dropped):
    """Issue 26 item 9: a child forked in the instant a dropped cache's connection was being
    closed (sqlite3_close, on whatever thread dropped it, outside the package's SQLite lock)
    copied SQLite's mutex held and waited for ever in its first sqlite3.connect. A dropped
    cache's or an ended thread's connection is now left open until the next connection is made,
    which closes it with the lock held; none is leaked."""
    import gc
    import threading

    from cudamagic.store import KernelCache

    folder = tmp_path / "cache"
    keep = KernelCache(folder)  # the folder exists and one store stays open
    box: list = []

    def use() -> None:
        before = _db_descriptors(folder)
        cache = KernelCache(folder)
        cache.get("k" * 64)
        box.append((cache, _db_descriptors(folder) - before))

    def once() -> set[int]:
        worker = threading.Thread(target=use)
        worker.start()
        worker.join()
        cache, opened = box.pop()
        if dropped == "the cache object":
            del cache
        gc.collect()
        return opened

    opened = once()
    assert opened and opened <= _db_descriptors(folder)  # not closed by the drop
    held = [once() for _ in range(30)]  # each new connection closes the earlier orphans
    assert len(_db_descriptors(folder)) <= 4, (held, _db_descriptors(folder))
    keep.close()
