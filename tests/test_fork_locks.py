"""A forked child never waits on a lock a thread of its parent held at the fork: every lock of
the package comes back unheld in the child (a history being written on another thread, the
driver being initialized by %load_ext's thread, a module's kernels being pushed)."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import cudamagic
from cudamagic.pipeline import explain, module
from cudamagic.errors import ToolchainError
from cudamagic.core.forksafe import ForkSafeLock
from cudamagic.toolchain.device import driver

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

PACKAGE = Path(cudamagic.__file__).parent
CHILD_S = 30


def _in_child(fn) -> str:
    """Run ``fn`` in a forked child: 'ok', 'failed' or 'hung' (killed after CHILD_S)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            signal.alarm(CHILD_S + 5)
            fn()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "ok" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else "failed"
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def _locks() -> dict[str, object]:
    hist = explain.History(None)
    return {"history": hist._lock, "histories": explain._histories_lock,
            "driver init": driver._init_lock, "primary contexts": driver._primary_lock,
            "arrived modules": module._arrived_lock, "a fresh ForkSafeLock": ForkSafeLock()}


LOCKS = _locks()


def _fork_while_held(lock, fn) -> str:
    """:func:`_in_child` of ``fn`` while another thread holds ``lock``."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            release.wait(CHILD_S)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    try:
        return _in_child(fn)
    finally:
        release.set()
        t.join()


@pytest.mark.parametrize("name", list(LOCKS))
def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child(name):
    lock = LOCKS[name]
    got = _fork_while_held(lock, lambda: lock.acquire(timeout=CHILD_S - 5) or os._exit(3))
    assert got == "ok", f"the child waited on the {name} lock its parent's thread held"


def test_a_history_written_on_another_thread_at_the_fork_does_not_hang_the_child(tmp_path):
    """The instance from the field: a thread's build writing its cell's history (History.remember
    holds its lock while it writes the file), a fork, and the child's first build of a new
    cell."""
    cache = tmp_path / "cache"
    cudamagic.build('__global__ void k(int* x) { x[0] = 1; }\n', cache=cache)
    hist = explain.history_for(cudamagic.store.KernelCache.wrap(str(cache)))
    got = _fork_while_held(hist._lock, lambda: cudamagic.build(
        '__global__ void k(int* x) { x[0] = 2; }\n', cache=cache))
    assert got == "ok"


def _build_or_refused(fn) -> None:
    """``fn()``; a child forked while a builder was inside NVRTC is refused its compile
    (tests/test_compile_thread.py), which is that child's right answer, never a wait."""
    try:
        fn()
    except ToolchainError as exc:
        assert "forked while another thread of its parent was inside NVRTC" in str(exc)


def test_twenty_forks_while_two_threads_build_leave_no_child_hung(tmp_path):
    cache = str(tmp_path / "cache")
    src = '__global__ void k{}(float* x) {{ x[0] = {}; }}\n'
    stop = threading.Event()
    errors: list[BaseException] = []

    def builder(t: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                cudamagic.build(src.format(t, i % 3), cache=cache)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=builder, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        outcomes = [_in_child(lambda f=f: _build_or_refused(
            lambda: (cudamagic.build(src.format(99, f), cache=cache),
                     cudamagic.build(src.format(0, 1), cache=cache)))) for f in range(20)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert outcomes.count("hung") == 0 and outcomes.count("failed") == 0, outcomes


# made again in a forked child by the store's own fork hook (store/state.py)
RENEWED = {("store/state.py", "self.sqlite = threading.Lock()"),
           ("store/state.py", "self.default_lock = threading.Lock()"),
           ("store/state.py", "self.making = threading.Lock()"),
           ("store/disk.py", "self._cond = threading.Condition()")}  # Bookkeeper.forget


def test_the_package_makes_no_lock_a_child_could_inherit_held():
    """Every lock of the package is a ForkSafeLock, or one the store's fork hook makes again."""
    made = re.compile(r"threading\.(R?Lock|Condition|Semaphore|BoundedSemaphore)\(")
    found = [(p.relative_to(PACKAGE).as_posix(), line.split("#")[0].strip())
             for p in PACKAGE.rglob("*.py") if p.name != "forksafe.py"
             for line in p.read_text().splitlines() if made.search(line)]
    assert set(found) <= RENEWED, sorted(set(found) - RENEWED)


class _Refused(Exception):
    """What the section under test raises instead of calling its library."""


def _refused(section) -> None:
    with pytest.raises(_Refused, match="forked while"):
        section.check()


@pytest.mark.parametrize("child_first", [False, True], ids=["forks before its first call",
                                                            "forks after being refused"])
def test_a_child_of_a_child_forked_inside_a_native_section_is_refused_too(child_first):
    """A fork while another thread is inside a native library's call leaves its lock held in
    the child; the child's own fork (before or after its first call) has that lock held too,
    so the grandchild's first call is refused as well, not left waiting."""
    from cudamagic.core.forksafe import NativeSection

    native = threading.Lock()  # the library's own lock, held by the call inside at the fork
    section = NativeSection("lib", lambda: (native.acquire(), native.release()), 0.2,
                            _Refused)
    inside, release = threading.Event(), threading.Event()

    def call():
        with section, native:
            inside.set()
            release.wait(CHILD_S)

    def child():
        if child_first:
            _refused(section)
        assert _in_child(lambda: _refused(section)) == "ok"
        _refused(section)

    t = threading.Thread(target=call)
    t.start()
    inside.wait(5)
    try:
        assert _in_child(child) == "ok"
    finally:
        release.set()
        t.join()
    section.check()  # the parent's own calls go on


def test_a_fork_while_a_build_is_inside_the_driver_waits_for_it(monkeypatch, fresh_process):
    """A build on another thread asks the driver for the current device (its default -arch)
    when the notebook forks: the fork waits for the call to return (and holds new ones back
    till it is made), so the child does not inherit the driver library's lock held, which the
    library's own handlers take in the child (at its exit). The race made to happen: the
    library's call holds its lock until the fork has come to wait for it.

    The GPU is what is stood in for: a library whose every call takes its lock, as libcuda's
    do, and whose first cuDeviceGetAttribute holds it."""
    from types import SimpleNamespace

    from cudamagic.core import forksafe

    library_lock, inside, let_go = threading.Lock(), threading.Event(), threading.Event()

    def attribute(value, attr, device):
        with library_lock:
            if not inside.is_set():
                inside.set()
                let_go.wait(CHILD_S)
            value._obj.value = 9 if attr == driver._CC_MAJOR else 0
        return 0

    def one(value, *rest):
        value._obj.value = 1
        return 0

    calls = dict(cuInit=lambda flags: 0, cuDeviceGetCount=one, cuDeviceGet=one,
                 cuCtxGetCurrent=lambda value: 0, cuDeviceGetAttribute=attribute)
    stand_in = driver._Driver.__new__(driver._Driver)
    stand_in._lib = SimpleNamespace(**calls)
    monkeypatch.setattr(driver, "_lib", lambda: stand_in)
    # the current device asked of the stand-in, not of CuPy (which an earlier test of the
    # run may have imported: its real runtime, no GPU here, and the build's thread failed)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    arrived = threading.Event()  # set once a fork waits for the calls inside
    real_before = forksafe.WaitedSection.before_fork

    def before_fork(section):
        arrived.set()
        real_before(section)

    monkeypatch.setattr(forksafe.WaitedSection, "before_fork", before_fork)
    build = threading.Thread(target=driver.current_sm)  # what a build's default -arch asks
    build.start()
    assert inside.wait(CHILD_S)  # the call is inside the library, its lock held

    def let_go_once_the_fork_waits():
        arrived.wait(10)
        let_go.set()

    threading.Thread(target=let_go_once_the_fork_waits).start()
    # the child takes the library's lock, as the library's exit handler does
    got = _in_child(lambda: None if library_lock.acquire(timeout=5) else os._exit(7))
    let_go.set()
    build.join(CHILD_S)
    assert (arrived.is_set(), got) == (True, "ok")
    assert driver._last_sm == [90]  # the build's call went on once the fork was made


def test_a_fork_that_waited_its_most_for_a_native_call_says_so(capfd):
    """A call into the library that does not return (a synchronize behind a kernel that does
    not end) holds a fork at most the section's wait; the fork then goes on and says so on
    stderr, and the calls held back meanwhile go on after it."""
    from cudamagic.core.forksafe import WaitedSection

    section = WaitedSection("a stand-in library", 0.2)
    inside, let_go, later = threading.Event(), threading.Event(), []

    def stuck():
        inside.set()
        let_go.wait(CHILD_S)

    t = threading.Thread(target=section.call, args=(stuck,))
    t.start()
    assert inside.wait(CHILD_S)
    started = time.monotonic()
    got = _in_child(lambda: None)
    waited = time.monotonic() - started
    after = threading.Thread(target=section.call, args=(lambda: later.append(1),))
    after.start()
    after.join(CHILD_S)
    let_go.set()
    t.join(CHILD_S)
    assert got == "ok" and waited >= 0.2 and later == [1]
    assert "a fork waited 0.2 s for a call into a stand-in library" in capfd.readouterr().err
